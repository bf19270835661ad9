"""Image instructions: MIMG (gfx11), VIMAGE and VSAMPLE (gfx12) -- ``image_load``, ``image_sample_c_d_o``, ...

In: an ``image_*`` instruction -- ``vdata, vaddr, srsrc[, ssamp]`` and the modifiers ``dmask:`` ``dim:`` ``unorm``
``glc slc dlc`` (gfx11) or ``th: scope:`` (gfx12) ``r128 a16 tfe lwe d16`` -- or its bytes. Out: its bytes, or the
``Inst`` llvm-mc prints for them. The address is one VGPR range (gfx11), or a list of VGPRs (``[v1, v5, v7]``: NSA on
gfx11, the only form on gfx12, where the last of the 4 (VSAMPLE) or 5 (VIMAGE) fields may hold the rest as a range).
How many address and data registers an instruction takes follows LLVM's rules (``AMDGPU::getAddrSizeMIMGOp`` and
the asm parser's MIMG checks): address words = extra arguments (offset, bias, z-compare) + coordinates of the
``dim`` and a lod/clamp/mip (halved and rounded up with ``a16``) + gradients (halved and rounded to pairs for
``_g16``); data registers = dmask channels (always 4 for gather4 and msaa_load; halved with ``d16``) + ``tfe``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from tg_amd.arch import Arch, AsmError
from tg_amd.encoding import _Encoder, _no_mods, _operands, _unsigned
from tg_amd.inst import Inst
from tg_amd.operands import Reg
from tg_amd.symbols import policy_name, policy_value

if TYPE_CHECKING:
    from tg_amd.isa import OpInfo
    from tg_amd.layouts import Layout

# dim: code -> (name, coordinates, gradients); sample/gather ops take the first six only
DIMS = {0: ("1D", 1, 2), 1: ("2D", 2, 4), 2: ("3D", 3, 6), 3: ("CUBE", 3, 4), 4: ("1D_ARRAY", 2, 2),
        5: ("2D_ARRAY", 3, 4), 6: ("2D_MSAA", 3, 4), 7: ("2D_MSAA_ARRAY", 4, 4)}
DIM_CODE = {**{f"SQ_RSRC_IMG_{n}": c for c, (n, _, _) in DIMS.items()}, **{n: c for c, (n, _, _) in DIMS.items()}}
FAMILIES = ("MIMG", "VIMAGE", "VSAMPLE")
# modifiers in the one order llvm-mc reads them; the cache policy (glc slc dlc / th scope) in any order
ORDER = {"dmask": 0, "dim": 1, "unorm": 2, "glc": 3, "slc": 3, "dlc": 3, "th": 3, "scope": 3, "r128": 4, "a16": 5,
         "tfe": 6, "lwe": 7, "d16": 8}
FLAGS = ("unorm", "r128", "a16", "lwe", "d16")  # modifiers of image_* only (a16 is an AGPR elsewhere)
NSA_FIELDS = {"MIMG": 5, "VIMAGE": 5, "VSAMPLE": 4}  # address operands a list may have


@dataclass(frozen=True)
class Shape:
    """What an image opcode reads, as LLVM's MIMG base-opcode tables say (spelled in the mnemonic)."""
    sampler: bool     # takes a sampler descriptor (ssamp)
    coords: bool      # takes the dim's coordinates
    lod: bool         # one more word: lod, clamp or mip level
    extra: int        # offset, bias and z-compare words
    gradients: bool   # derivatives (_d)
    g16: bool         # 16-bit derivatives (_g16)
    d16: bool         # takes d16
    atomic: bool
    gather: bool      # returns 4 channels; dmask selects one (gather4*, msaa_load)
    msaa: bool        # MSAA dims only (msaa_load)

    @property
    def policy(self) -> str:
        return "th_atomic" if self.atomic else "th_load"


@cache
def shape(name: str) -> Shape:
    base = name.removeprefix("image_")
    if base.startswith("atomic_"):
        return Shape(False, True, False, 0, False, False, False, True, False, False)
    if base == "get_resinfo":
        return Shape(False, False, True, 0, False, False, False, False, False, False)
    if base == "msaa_load":
        return Shape(False, True, False, 0, False, False, True, False, True, True)
    if base.startswith(("load", "store")):
        return Shape(False, True, "_mip" in base, 0, False, False, "pck" not in base, False, False, False)
    if base == "get_lod":
        return Shape(True, True, False, 0, False, False, False, False, False, False)
    parts = set(base.split("_")[1:])  # sample_c_d_cl_o_g16 -> c d cl o g16
    return Shape(True, True, bool(parts & {"l", "cl"}), len(parts & {"o", "b", "c"}), "d" in parts, "g16" in parts,
                 True, False, base.startswith("gather4"), False)


# ray-tracing queries: the address groups (node pointer, ray extent, origin, direction, inverse direction;
# with a16 direction and inverse direction share 3 VGPRs), 4 result VGPRs and a 4-SGPR descriptor
BVH = {"image_bvh_intersect_ray": (1, 1, 3, 3, 3), "image_bvh64_intersect_ray": (2, 1, 3, 3, 3)}


def bvh_groups(name: str, a16: bool) -> tuple[int, ...]:
    groups = BVH[name]
    return groups[:4] if a16 else groups


def is_store(name: str) -> bool:
    return name.startswith("image_store")


def address_words(s: Shape, dim: int, a16: bool) -> int:
    """Address VGPRs of ``s`` for ``dim`` (LLVM's getAddrSizeMIMGOp; RDNA has 16-bit gradients as _g16 only)."""
    _, coords, gradients = DIMS[dim]
    parts = (coords if s.coords else 0) + int(s.lod)
    words = s.extra + ((parts + 1) // 2 if a16 else parts)
    if s.gradients:
        words += (gradients // 2 + 1) // 2 * 2 if s.g16 else gradients
    return words


# address register classes LLVM generates an encoding for, each when the words of some dim fall in its range
# (a 4-VGPR form serves 3 and 4 words, an 8-VGPR form 5 to 8, a 16-VGPR form 13 to 16)
ADDRESS_CLASSES = ((1, 1), (2, 2), (3, 3), (3, 4), (5, 5), (6, 6), (7, 7), (5, 8), (9, 9), (10, 10), (11, 11),
                   (12, 12), (13, 16))


@cache
def _sizes(name: str, listed: bool = False) -> frozenset[int]:
    """Address sizes LLVM has an encoding of ``name`` for: 1..4 without a sampler; with one, the word counts
    LLVM lists for the sample variant (its MIMG_Sampler_AddrSizes) plus the extra arguments -- as they are
    for an address list (``listed``), else the register classes covering them."""
    s = shape(name)
    if not s.sampler:
        return frozenset(range(1, 5))
    if s.gradients:
        top = (7 if s.g16 else 9) + int(s.lod)
        words = range(2 + s.extra, top + 1 + s.extra)
    else:
        words = range(1 + s.extra, 4 + int(s.lod) + s.extra)
    if listed:
        return frozenset(words)
    return frozenset(hi for lo, hi in ADDRESS_CLASSES if any(lo <= w <= hi for w in words))


def data_count(s: Shape, dmask: int, d16: bool, tfe: bool) -> int:
    channels = 4 if s.gather else bin(dmask & 0xF or 1).count("1")
    return ((channels + 1) // 2 if d16 else channels) + int(tfe)


# data registers LLVM has an atomic of (cmpswap carries compare and swap values), and the count llvm-mc's
# disassembler shows for a dmask/tfe count without one of its own (it keeps the form it decoded first)
ATOMIC_DATA = {False: frozenset({1, 2, 3, 5}), True: frozenset({2, 3, 4, 5})}
GATHER_DATA = frozenset({2, 4, 5})  # gather4: 4 channels, d16 halves them, tfe adds one
ATOMIC_SHOWN = {False: {1: 1, 2: 2, 4: 5}, True: {2: 2, 4: 4}}


def shown_data_count(name: str, s: Shape, count: int) -> int | None:
    """The data VGPRs llvm-mc's disassembler shows for ``count``; None when it has no form of that size."""
    if s.atomic:
        return ATOMIC_SHOWN["cmpswap" in name].get(count)
    return count if count in (GATHER_DATA if s.gather and not s.msaa else range(1, 6)) else None


# ---------------------------------------------------------------- encoding

def _dim(enc: _Encoder) -> int:
    dim = enc.inst.mods.get("dim")
    if dim is None:
        enc.fail("operands are not valid for this GPU or mode (dim: is required)")
    if not isinstance(dim, str) or dim not in DIM_CODE:
        enc.fail("invalid dim value", "dim")
    return DIM_CODE[str(dim)]


def _addresses(enc: _Encoder, op: Any, expected: int) -> list[int]:
    """First VGPR of each address field; checks the count against ``expected`` as llvm-mc does."""
    info, arch, what = enc.info, enc.arch, enc.what(1, "vaddr")
    mismatch = "image address size does not match dim and a16"
    if isinstance(op, list | tuple) and len(op) == 1:
        op = op[0]
    if isinstance(op, Reg):
        reg = enc.vreg(op, op.count, what)
        if arch.gen == 12 and reg.count > 1:
            enc.fail("operands are not valid for this GPU or mode (a gfx12 address of several VGPRs is a list "
                     "[v1, v2, ...])", what)
        sizes = _sizes(info.name)
        oversized = reg.count == 8 and 5 <= expected <= 7 and 8 in sizes  # LLVM still takes the 8-VGPR form
        if reg.count not in sizes:
            enc.fail("invalid operand for instruction (no form with that many address VGPRs)", what)
        if expected not in sizes or not (reg.count == expected or oversized):
            enc.fail(mismatch, what)
        return [reg.index]
    if not isinstance(op, list | tuple) or not op:
        enc.fail("expected a VGPR or a list of VGPRs [v1, v2, ...]", what)
    fields = NSA_FIELDS[info.fmt]
    if len(op) > fields:
        enc.fail(f"not a valid operand (at most {fields} addresses in a list)", what)
    regs = [enc.vreg(r, r.count if isinstance(r, Reg) else 1, what) for r in op]
    partial = arch.gen == 12 and len(regs) == fields  # the last field holds the rest
    if any(r.count != 1 for r in regs[:-1]) or (regs[-1].count != 1 and not partial):
        enc.fail("invalid operand for instruction (each address is one VGPR)", what)
    if sum(r.count for r in regs) != expected or expected not in _sizes(info.name, listed=True):
        enc.fail(mismatch, what)
    return [r.index for r in regs]


def encode(enc: _Encoder) -> bytes:
    """image_* (MIMG on gfx11, VIMAGE / VSAMPLE on gfx12)."""
    info, f, mods, arch = enc.info, enc.fields, enc.inst.mods, enc.arch
    if info.name in BVH:
        return _encode_bvh(enc)
    s = shape(info.name)
    flags = ["dmask", "dim", "r128", "a16", "tfe", "d16"]
    flags += ["glc", "slc", "dlc", "unorm", "lwe"] if arch.gen == 11 else ["th", "scope"]
    flags += ["unorm", "lwe"] if info.fmt == "VSAMPLE" else []
    if not s.d16:
        flags.remove("d16")
    _no_mods(enc, tuple(flags))
    ops = _operands(enc, info.sig)
    dmask = _unsigned(mods.get("dmask", 0), 4, "dmask", enc)
    dim = _dim(enc)
    a16, d16, tfe = bool(mods.get("a16")), bool(mods.get("d16")), bool(mods.get("tfe"))
    if s.atomic and dmask not in (1, 3, 15):
        enc.fail("invalid atomic image dmask", "dmask")
    if s.gather and dmask not in (1, 2, 4, 8):
        enc.fail("invalid image_gather dmask: only one bit must be set", "dmask")
    if s.msaa and dim < 6:
        enc.fail("invalid dim; must be MSAA type", "dim")
    count = data_count(s, dmask, d16, tfe)
    vdata = ops[0]
    sizes = ATOMIC_DATA["cmpswap" in info.name] if s.atomic else GATHER_DATA if s.gather and not s.msaa \
        else range(1, 6)
    if isinstance(vdata, Reg) and vdata.count not in sizes:
        enc.fail("invalid operand for instruction (no form with that many data VGPRs)", enc.what(0, "vdata"))
    if not isinstance(vdata, Reg) or vdata.kind != "v" or vdata.count != count:
        detail = ", d16 and tfe" if s.d16 else " and tfe"
        enc.fail(f"image data size does not match dmask{detail} (needs {count} VGPRs)", enc.what(0, "vdata"))
    f["vdata"] = enc.vreg(vdata, count, enc.what(0, "vdata")).index
    addrs = _addresses(enc, ops[1], address_words(s, dim, a16))
    rsrc = _descriptor(enc, ops[2], 8, enc.what(2, "srsrc"))
    f["srsrc"] = rsrc >> 2 if arch.gen == 11 else rsrc
    if s.sampler:
        samp = _descriptor(enc, ops[3], 4, enc.what(3, "ssamp"))
        f["ssamp"] = samp >> 2 if arch.gen == 11 else samp
    f.update(dmask=dmask, dim=dim)
    for flag in ("unorm", "glc", "slc", "dlc", "r128", "a16", "tfe", "lwe", "d16"):
        if mods.get(flag):
            f[flag] = 1
    if arch.gen == 11:
        f["vaddr"] = addrs[0]
        if len(addrs) > 1:
            f["nsa"] = 1
            enc.extra = sum(r << 8 * k for k, r in enumerate(addrs[1:]))
    else:
        for k, r in enumerate(addrs):
            f[f"vaddr{k}"] = r
        _policy(enc, "th_store" if is_store(info.name) else s.policy)
    return enc.emit(enc.layout(info.fmt))


def _descriptor(enc: _Encoder, op: Any, count: int, what: str) -> int:
    """An image or sampler descriptor: SGPRs or TTMPs (not null or other named registers)."""
    if not (isinstance(op, Reg) and op.kind in ("s", "ttmp")):
        enc.fail("invalid operand for instruction (expected SGPRs)", what)
    return enc.sreg(op, count, what)


def _encode_bvh(enc: _Encoder) -> bytes:
    """image_bvh*_intersect_ray: only a16 is written; dmask 0xf, r128 (and unorm on gfx11) are implied."""
    info, f, arch = enc.info, enc.fields, enc.arch
    _no_mods(enc, ("a16",))
    vdata, vaddr, rsrc = _operands(enc, info.sig)
    a16 = bool(enc.inst.mods.get("a16"))
    groups = bvh_groups(info.name, a16)
    f["vdata"] = enc.vreg(vdata, 4, enc.what(0, "vdata")).index
    what = enc.what(1, "vaddr")
    if isinstance(vaddr, Reg) and arch.gen == 11:
        f["vaddr"] = enc.vreg(vaddr, sum(groups), what).index
    elif isinstance(vaddr, list | tuple) and len(vaddr) == len(groups):
        regs = [enc.vreg(r, n, what) for r, n in zip(vaddr, groups, strict=True)]
        if arch.gen == 11:
            f.update(vaddr=regs[0].index, nsa=1)
            enc.extra = sum(r.index << 8 * k for k, r in enumerate(regs[1:]))
        else:
            f.update({f"vaddr{k}": r.index for k, r in enumerate(regs)})
    else:
        enc.fail(f"invalid operand for instruction (the address is [{', '.join(map(str, groups))}] VGPRs"
                 f"{' or one range of them' if arch.gen == 11 else ''})", what)
    rsrc_code = _descriptor(enc, rsrc, 4, enc.what(2, "srsrc"))
    f["srsrc"] = rsrc_code >> 2 if arch.gen == 11 else rsrc_code
    f.update(dmask=15, r128=1, a16=int(a16))
    if arch.gen == 11:
        f["unorm"] = 1
    return enc.emit(enc.layout(info.fmt))


def _policy(enc: _Encoder, kind: str) -> None:
    """gfx12 ``th:`` / ``scope:`` by name (llvm-mc takes no numbers here); BYPASS goes with SCOPE_SYS."""
    mods = enc.inst.mods
    for key, table in (("th", kind), ("scope", "scope")):
        if key in mods:
            if not isinstance(mods[key], str):
                enc.fail("expected an identifier", key)
            enc.fields[key] = policy_value(table, mods[key], enc.arch)
    bypass = str(mods.get("th", "")).endswith("_BYPASS")
    if bypass != (enc.fields.get("th") == 3 and enc.fields.get("scope") == 3):
        enc.fail("scope and th combination is not valid", "th")


def check_order(name: str, mods: dict[str, Any]) -> None:
    """llvm-mc reads an image instruction's modifiers in one order only (``dmask:`` first, ``d16`` last)."""
    rank = -1
    for key in mods:
        if key in ORDER:
            if ORDER[key] < rank:
                raise AsmError(f"invalid operand for instruction ({key} must come before the modifiers "
                               "dmask dim unorm glc slc dlc th scope r128 a16 tfe lwe d16 that follow it "
                               "in that order)", name, key)
            rank = ORDER[key]


# ---------------------------------------------------------------- decoding

def decode(data: bytes, arch: Arch, offset: int, layout: Layout, info: OpInfo, f: dict[str, int]) -> tuple[Inst, int]:
    """The image instruction at ``data[offset:]`` as llvm-mc prints it, and its size."""
    size = layout.bits // 8
    if info.name in BVH:
        return _decode_bvh(data, arch, offset, info, f, size)
    s = shape(info.name)
    dim, a16 = f["dim"], bool(f["a16"])
    expected = address_words(s, dim, a16)
    d16 = bool(f.get("d16")) and s.d16
    count = shown_data_count(info.name, s, data_count(s, f["dmask"], d16, bool(f.get("tfe"))))
    if count is None or expected not in _sizes(info.name, listed=arch.gen == 12 or bool(f.get("nsa"))):
        # llvm-mc has no form of these sizes and shows the one it decoded first: one data VGPR (cmpswap two,
        # gather4 four), the smallest address (gfx11) or four address fields (gfx12)
        count = 2 if "cmpswap" in info.name else 4 if s.gather and not s.msaa else 1
        expected = min(_sizes(info.name)) if arch.gen == 11 else 4
    ops: list[Any] = [Reg("v", f["vdata"], count)]
    from tg_amd.decoder import _Decoder
    d = _Decoder(arch, info, f, None)
    if arch.gen == 11:
        first = f["vaddr"]
        if f["nsa"]:
            extra = _nsa_dword(data, offset + size, info, arch)
            size += 4
            ops.append(tuple(Reg("v", r) for r in [first] + [extra >> 8 * k & 0xFF for k in range(expected - 1)]))
        else:
            ops.append(Reg("v", first, expected))
        ops.append(d.scalar(f["srsrc"] << 2, 8))
        if s.sampler:
            ops.append(d.scalar(f["ssamp"] << 2, 4))
    else:
        fields = NSA_FIELDS[info.fmt]
        n = min(expected, fields)
        regs = [Reg("v", f[f"vaddr{k}"]) for k in range(n)]
        if expected > fields:
            regs[-1] = Reg("v", regs[-1].index, expected - fields + 1)
        ops.append(regs[0] if expected == 1 else tuple(regs))
        ops.append(d.scalar(f["srsrc"], 8))
        if s.sampler:
            ops.append(d.scalar(f["ssamp"], 4))
    mods: dict[str, Any] = {}
    if f["dmask"]:
        mods["dmask"] = f["dmask"]
    mods["dim"] = f"SQ_RSRC_IMG_{DIMS[dim][0]}"
    for flag in ("unorm", "glc", "slc", "dlc"):
        if f.get(flag):
            mods[flag] = True
    if arch.gen == 12:
        kind = "th_store" if is_store(info.name) else s.policy
        for key, table in (("th", kind), ("scope", "scope")):
            if f[key]:
                mods[key] = policy_name(table, f[key], arch, f["scope"]) or f[key]
    for flag in ("r128", "a16", "tfe", "lwe", "d16"):
        if f.get(flag) and (flag != "d16" or s.d16):
            mods[flag] = True
    return Inst(info.name, tuple(ops), mods), size


def _nsa_dword(data: bytes, offset: int, info: OpInfo, arch: Arch) -> int:
    if offset + 4 > len(data):
        raise AsmError(f"truncated NSA dword at byte {offset}", info.name, None, arch.name)
    return int.from_bytes(data[offset:offset + 4], "little")


def _decode_bvh(data: bytes, arch: Arch, offset: int, info: OpInfo, f: dict[str, int], size: int) -> tuple[Inst, int]:
    from tg_amd.decoder import _Decoder
    a16 = bool(f["a16"])
    groups = bvh_groups(info.name, a16)
    if arch.gen == 11 and not f["nsa"]:
        vaddr: Any = Reg("v", f["vaddr"], sum(groups))
        rsrc = f["srsrc"] << 2
    elif arch.gen == 11:
        extra = _nsa_dword(data, offset + size, info, arch)
        size += 4
        firsts = [f["vaddr"]] + [extra >> 8 * k & 0xFF for k in range(len(groups) - 1)]
        vaddr, rsrc = tuple(Reg("v", r, n) for r, n in zip(firsts, groups, strict=True)), f["srsrc"] << 2
    else:
        vaddr = tuple(Reg("v", f[f"vaddr{k}"], n) for k, n in enumerate(groups))
        rsrc = f["srsrc"]
    ops = (Reg("v", f["vdata"], 4), vaddr, _Decoder(arch, info, f, None).scalar(rsrc, 4))
    return Inst(info.name, ops, {"a16": True} if a16 else {}), size

"""The instruction set of each arch, built from the opcode tables (``tg_amd.tables``).

In: an arch and a mnemonic. Out: an ``OpInfo`` (format, opcode, operand roles in assembly
order, operand widths) -- ``lookup(arch, name)`` -- and the reverse map from (format, opcode)
to ``OpInfo`` the decoder uses -- ``by_opcode(arch, fmt, op)``.

Operand roles: ``sdst ssrc0 ssrc1 simm16 label waitcnt`` (scalar ALU), ``sdata sbase sbuf soff``
(scalar memory), ``vdst src0 src1 src2 vsrc0 vsrc1 vcc mask k sdst`` (vector ALU; ``vcc`` is the
implicit VCC of the 32-bit encodings, ``mask`` a lane mask in SGPRs, ``k`` an inline literal),
``adst asrc0`` (AGPRs), ``mdst msrc0 msrc1 msrc2`` (MFMA: VGPR or AGPR), ``addr data0 data1``
(LDS), ``vaddr vdata saddr`` (global/flat memory).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from tg_amd.arch import ARCHS, Arch, AsmError, get_arch

TYPE_RE = re.compile(r"^(?:b|f|i|u|bf|iu)(\d+)$")
GFX9_WIDTH = {"dword": 32, "dwordx2": 64, "dwordx3": 96, "dwordx4": 128, "dwordx8": 256, "dwordx16": 512}
DEFAULT_SIG = {
    "SOP1": "sdst,ssrc0", "SOP2": "sdst,ssrc0,ssrc1", "SOPC": "ssrc0,ssrc1", "SOPK": "sdst,simm16", "SOPP": "",
    "SMEM": "sdata,sbase,soff", "VOP1": "vdst,src0", "VOP2": "vdst,src0,vsrc1", "VOPC": "vcc,src0,vsrc1",
    "MAI": "mdst,msrc0,msrc1,msrc2", "VOPD_X": "vdst,src0,vsrc1", "VOPD_Y": "vdst,src0,vsrc1",
}
DST_ROLES = {"sdst", "sdata", "vdst", "adst", "mdst"}
DS_DATA1 = {"ds_bvh_stack_rtn_b32": 4}  # DS instructions whose data1 is wider than data0 (VGPRs)
SRC_INDEX = {"ssrc0": 1, "src0": 1, "vsrc0": 1, "asrc0": 1, "msrc0": 1, "ssrc1": 2, "src1": 2, "vsrc1": 2,
             "msrc1": 2, "src2": 3, "ssrc2": 3, "msrc2": 3, "data0": 3, "data1": 3, "vdata": 3}


@dataclass(frozen=True)
class OpInfo:
    name: str
    fmt: str                  # table: SOP1 ... VOP3SD, VOP3P, MAI, VOPD_X, VOPD_Y, DS, GLOBAL, FLAT
    op: int
    sig: tuple[str, ...]
    types: tuple[str, str, str, str]  # dst, src0, src1, src2
    regs: tuple[int, ...] | None = None  # register counts dst, src0, src1, src2 (override)
    e64: int | None = None    # VOP3 opcode of a VOP1/VOP2/VOPC instruction
    flags: frozenset[str] = field(default_factory=frozenset)

    def width(self, slot: int) -> int:
        m = TYPE_RE.match(self.types[slot])
        if m:
            bits = int(m.group(1))
            return bits if bits == 16 or bits % 32 == 0 else 32
        return GFX9_WIDTH.get(self.types[slot], 32)

    def is_float(self, slot: int) -> bool:
        return self.types[slot].startswith(("f", "bf"))

    def exponent_mods(self, slot: int, rdna: bool) -> str | None:
        """How llvm-mc reads modifiers on ``v_ldexp_*``'s integer exponent (source slot 2): ``"sext"``
        (``sext(x)``, its neg bit) on every target, ``"negabs"`` (also -x and |x|) for RDNA's v_ldexp_f16;
        None for every other operand."""
        if slot != 2 or not self.name.startswith("v_ldexp_"):
            return None
        return "negabs" if rdna and self.name == "v_ldexp_f16" else "sext"

    def count(self, slot: int) -> int:
        """Registers the operand in ``slot`` (0 dst, 1..3 sources/data) spans."""
        if self.regs is not None and slot < len(self.regs):
            return self.regs[slot]
        return max(1, self.width(slot) // 32)

    @property
    def layout(self) -> str:
        if self.fmt in ("GLOBAL", "FLAT"):
            return "FLAT"
        if self.fmt.startswith("VOPD"):
            return "VOPD"
        return self.fmt


def _types(name: str, given: str | None) -> tuple[str, str, str, str]:
    if given:
        parts = given.split(",")
    else:
        parts = [p for p in name.split("_") if TYPE_RE.match(p) or p in GFX9_WIDTH]
        if not parts:
            parts = ["b32"]
        parts = [parts[0], parts[-1]]
    parts = parts + [parts[-1]] * (4 - len(parts))
    return (parts[0], parts[1], parts[2], parts[3])


def _default_sig(fmt: str, name: str, keys: dict[str, str], gen: int) -> str:
    if fmt in DEFAULT_SIG:
        if fmt == "VOPC" and name.startswith("v_cmpx") and gen >= 11:
            return "src0,vsrc1"
        return DEFAULT_SIG[fmt]
    if fmt in ("VOP3", "VOP3P"):
        n = int(keys.get("n", "2"))
        return "vdst," + ",".join(f"src{i}" for i in range(n))
    if fmt == "GLOBAL":
        if "_store_" in name or keys.get("atomic"):
            return "vaddr,vdata,saddr"
        return "vdst,vaddr,saddr"
    if fmt == "FLAT":
        return "vaddr,vdata" if "_store_" in name else "vdst,vaddr"
    raise ValueError(f"{name}: format {fmt} needs sig=")


def parse_table(fmt: str, text: str, gen: int) -> list[OpInfo]:
    """Rows of one table text for generation ``gen`` (rows tagged for another generation are skipped)."""
    rows = []
    for line in text.strip().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        tags = [w for w in words if w.startswith("@")]
        if tags and f"@{gen}" not in tags:
            continue
        name, op = words[0], int(words[1], 0)
        keys = dict(w.split("=", 1) for w in words[2:] if "=" in w)
        sig = keys["sig"] if "sig" in keys else _default_sig(fmt, name, keys, gen)
        regs = tuple(int(x) for x in keys["regs"].split(",")) if "regs" in keys else None
        e64 = None
        if fmt in ("VOP1", "VOP2", "VOPC") and keys.get("e64") != "no":
            base = {"VOPC": 0, "VOP2": 256, "VOP1": 384 if gen >= 11 else 320}[fmt]
            e64 = int(keys["e64"], 0) if "e64" in keys else base + op
        flags = frozenset(k for k in ("wmma", "atomic", "nomods", "regsrc", "mix") if keys.get(k))
        rows.append(OpInfo(name, fmt, op, tuple(r for r in sig.split(",") if r), _types(name, keys.get("t")),
                           regs, e64, flags))
    return rows


@cache
def _isa(gen: int) -> tuple[dict[str, OpInfo], dict[tuple[str, int], OpInfo]]:
    from tg_amd.tables import cdna, rdna
    tables = cdna.TABLES if gen == 9 else {**rdna.TABLES, "VOPD_X": rdna.VOPD_X, "VOPD_Y": rdna.VOPD_Y}
    by_name: dict[str, OpInfo] = {}
    by_op: dict[tuple[str, int], OpInfo] = {}
    for fmt, text in tables.items():
        for info in parse_table(fmt, text, gen):
            if fmt.startswith("VOPD"):
                by_op[(fmt, info.op)] = info
                by_name.setdefault(info.name, info)
                continue
            if info.name in by_name:
                raise ValueError(f"duplicate mnemonic {info.name} in gfx{gen} tables")
            by_name[info.name] = info
            key = {"VOP3SD": "VOP3", "MAI": "VOP3P"}.get(fmt, fmt)
            if (key, info.op) in by_op:
                raise ValueError(f"duplicate opcode {fmt} {info.op:#x} in gfx{gen} tables ({info.name})")
            by_op[(key, info.op)] = info
            if info.e64 is not None:
                by_op[("VOP3", info.e64)] = info
    _add_llvm_rows(gen, by_name, by_op)
    return by_name, by_op


# operand types whose width a register count overrides: b32 read as 2 registers is b64
def _fit_type(t: str, count: int) -> str:
    m = re.match(r"^(b|f|i|u|bf|iu)(\d+)$", t)
    prefix = m.group(1) if m else "b"
    bits = int(m.group(2)) if m else 32
    if count > 1 and bits != 32 * count:
        return f"{prefix}{32 * count}"
    if count == 1 and bits > 32:
        return f"{prefix}32"
    return t


def _add_llvm_rows(gen: int, by_name: dict[str, OpInfo], by_op: dict[tuple[str, int], OpInfo]) -> None:
    """Rows for the mnemonics LLVM lists that the hand-written tables lack (``tg_amd.llvm_table``)."""
    from tg_amd.llvm_table import Derived, derive, listing
    rows = listing(gen)
    e64 = {r.name.removesuffix("_e64"): r.op for r in rows if r.family == "VOP3" and r.name.endswith("_e64")}
    vop32 = {r.name.removesuffix("_e32") for r in rows if r.family in ("VOP1", "VOP2", "VOPC")}
    for row in rows:
        base = row.name.removesuffix("_e32").removesuffix("_e64")
        if base in by_name or row.family.startswith("VOPD") or (row.name.endswith("_e64") and base in vop32):
            continue
        d = derive(gen, row)
        if not isinstance(d, Derived):
            UNSUPPORTED.setdefault(gen, {})[base] = d
            continue
        fmt = d.family
        types: tuple[str, ...]
        if fmt in ("MUBUF", "MTBUF"):
            types = ("b32", "b32", "b32", f"b{32 * d.regs[3]}")
        elif fmt in ("MIMG", "VIMAGE", "VSAMPLE"):
            types = ("b32", "b32", "b32", "b32")
        else:
            types = tuple(_fit_type(t, n) for t, n in zip(_llvm_types(base), d.regs, strict=True))
        if fmt == "VOP3" and "sdst" in d.sig and "vdst" in d.sig:
            fmt = "VOP3SD"
        if fmt == "VOP3P" and gen == 9 and base.startswith(("v_mfma", "v_smfmac")):
            fmt = "MAI"
        sig = d.sig if fmt != "MAI" or "vidx" in d.sig else ("mdst", "msrc0", "msrc1", "msrc2")
        info = OpInfo(base, fmt, d.op, sig, (types[0], types[1], types[2], types[3]), d.regs,
                      e64.get(base) if fmt in ("VOP1", "VOP2", "VOPC") else None,
                      _llvm_flags(base))
        key = {"VOP3SD": "VOP3", "MAI": "VOP3P"}.get(fmt, fmt)
        if (key, info.op) in by_op:
            continue
        by_name[base] = info
        by_op[(key, info.op)] = info
        if info.e64 is not None:
            by_op.setdefault(("VOP3", info.e64), info)


def _llvm_types(name: str) -> tuple[str, str, str, str]:
    """Operand types of a listed mnemonic: spelled in its name, with the exceptions LLVM's operand
    classes make (packed and dot sources are 32-bit words, fp8/bf8 and class masks are integers)."""
    from tg_amd.llvm_table import TYPES
    types = list(_types(name, TYPES.get(name)))
    if name in TYPES:
        return (types[0], types[1], types[2], types[3])
    types = [re.sub(r"^(bf|f)8$", "b32", t) for t in types]
    if "_class_" in name:
        types[2] = "u32"  # the class mask, also of the f16 forms
    if name.startswith(("v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8")):
        types[1:] = ["b32"] * 3  # the source is fp8/bf8 bytes
    return (types[0], types[1], types[2], types[3])


def _llvm_flags(name: str) -> frozenset[str]:
    flags = set()
    if "_atomic_" in name:
        flags.add("atomic")
    if name.startswith(("v_wmma", "v_swmmac")):
        flags.add("wmma")
    if any(w in name for w in ("fp8", "bf8", "_iu4", "_iu8", "_i4", "_u4", "_i8")) and name.startswith("v_dot"):
        flags.add("nomods")
    if name.startswith(("v_fma_mix", "v_mad_mix")):
        flags.add("mix")
    if name.startswith(("v_cvt_pk_fp8", "v_cvt_pk_bf8", "v_cvt_sr_fp8", "v_cvt_sr_bf8", "v_dot2_f16_f16",
                        "v_dot2_bf16_bf16")):
        flags.add("noclamp")
    return frozenset(flags)


UNSUPPORTED: dict[int, dict[str, str]] = {}  # gen -> mnemonic -> why tg-amd cannot encode it yet


def ds_count(info: OpInfo, role: str) -> int:
    """VGPRs of a DS operand: the address one, data and destination as the types say (data1 may be wider)."""
    if role == "addr":
        return 1
    if role == "data1" and info.name in DS_DATA1:
        return DS_DATA1[info.name]
    return info.count(0 if role == "vdst" else SRC_INDEX.get(role, 1))


def two_offsets(name: str) -> bool:
    """DS instructions with two 8-bit offsets (``offset0:``/``offset1:``) instead of one 16-bit offset."""
    return any(w in name for w in ("2addr", "read2", "write2", "xchg2"))


def vopd_info(arch: Arch, name: str, half: str) -> OpInfo | None:
    """The VOPD X or Y half named ``name`` (``half`` is ``"X"`` or ``"Y"``)."""
    _, by_op = _isa(arch.gen)
    for (fmt, _op), info in by_op.items():
        if fmt == f"VOPD_{half}" and info.name == name:
            return info
    return None


def lookup(arch: str | Arch, name: str) -> OpInfo:
    """The instruction ``name`` on ``arch``; an ``AsmError`` naming the archs that have it if absent."""
    arch = get_arch(arch)
    info = _isa(arch.gen)[0].get(name)
    if info is None and name in aliases(arch.name):  # an older name llvm-mc accepts (buffer_load_dword)
        name = aliases(arch.name)[name]
        info = _isa(arch.gen)[0].get(name)
    if info is None and name in UNSUPPORTED.get(arch.gen, {}):
        raise AsmError(f"not supported by tg-amd yet: {UNSUPPORTED[arch.gen][name]}", name, None, arch.name)
    if info is None or info.fmt.startswith("VOPD"):
        others = [a for a, spec in ARCHS.items() if name in _isa(spec.gen)[0] and spec.gen != arch.gen]
        hint = f"; it exists on {', '.join(others)}" if others else ""
        raise AsmError(f"no such instruction on this arch{hint}", name, None, arch.name)
    return info


@cache
def aliases(arch: str) -> dict[str, str]:
    """Other names llvm-mc accepts on ``arch`` -> the mnemonic (listed by ``tests/llvm_aliases.py``)."""
    from tg_amd.llvm_table import TABLES
    out = {}
    for line in (TABLES / "llvm19_aliases.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            a, alias, name = line.split("\t")
            if a == arch:
                out[alias] = name
    return out


def by_opcode(arch: Arch, fmt: str, op: int) -> OpInfo | None:
    return _isa(arch.gen)[1].get((fmt, op))


def mnemonics(arch: str | Arch) -> list[OpInfo]:
    """Every instruction of ``arch`` (VOPD halves included), in table order."""
    arch = get_arch(arch)
    by_name, by_op = _isa(arch.gen)
    seen = {id(i) for i in by_name.values()}
    return list(by_name.values()) + [i for i in by_op.values() if id(i) not in seen]


def all_names() -> set[str]:
    return {name for spec in ARCHS.values() for name in _isa(spec.gen)[0]}

"""Encoder: ``encode(inst, arch, pc, labels) -> bytes`` for one instruction.

In: an ``Inst`` (mnemonic, operands in LLVM order, modifiers) and an arch; for branches the
instruction's byte address and the label addresses. Out: the instruction's bytes (little
endian dwords, a trailing 32-bit literal when one is needed). Every operand is checked
(register file, register count and alignment, immediate range); failures raise ``AsmError``
naming the instruction, the operand and the arch. This module holds the scalar and vector ALU
formats; ``tg_amd.encoding`` the per-instruction state they share, ``tg_amd.encode_mem`` the memory,
interpolation and export formats, ``tg_amd.image`` the image formats.
"""
from __future__ import annotations

from typing import Any

from tg_amd import dpp, image, sdwa
from tg_amd import encode_mem as mem
from tg_amd.arch import Arch, AsmError, get_arch
from tg_amd.encoding import PACKED, TRUE16, NoFit, _Encoder, _no_mods, _operands, _signed, _unsigned
from tg_amd.inst import Inst
from tg_amd.isa import SRC_INDEX, OpInfo, lookup, vopd_info
from tg_amd.llvm_table import dpp_forms
from tg_amd.operands import (
    Label,
    Mod,
    Reg,
    Sext,
    constant_code,
)
from tg_amd.symbols import Sym
from tg_amd.symbols import value as symbol_value

OMOD = {"mul:2": 1, "mul:4": 2, "div:2": 3}
SRC_FIELDS = ("src0", "src1", "src2")
SHIFT64 = ("v_lshlrev_b64", "v_lshrrev_b64", "v_ashrrev_i64")  # constant bus limit 1 even on RDNA


BARRIER_ID = ("s_barrier_signal", "s_barrier_init", "s_barrier_join", "s_wakeup_barrier", "s_get_barrier_state")
PERMLANE_OP_SEL = ("v_permlane16_", "v_permlanex16_")  # op_sel:[fi, bound_ctrl]: two bits
NULL_SDST = ("s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt")  # gfx11: null, n
UNSIGNED_SIMM16 = ("s_getreg", "s_setreg")  # hwreg immediates: 0..0xffff only


# ---------------------------------------------------------------- scalar ALU

# s_waitcnt counters: (low bit, width); RDNA vmcnt [15:10], lgkmcnt [9:4], expcnt [2:0];
# CDNA vmcnt [3:0] (+ [15:14]), expcnt [6:4], lgkmcnt [11:8]
WAITCNT_FIELDS = {True: {"vmcnt": (10, 6), "lgkmcnt": (4, 6), "expcnt": (0, 3)},
                  False: {"vmcnt": (0, 4), "expcnt": (4, 3), "lgkmcnt": (8, 4)}}


def waitcnt_value(counters: dict[str, int], arch: Arch) -> int:
    """The immediate of ``s_waitcnt`` with ``counters`` (the others at their maximum: no wait)."""
    value = 0xFFF7 if arch.rdna else 0xCF7F
    for name, count in counters.items():
        lo, width = WAITCNT_FIELDS[arch.rdna][name]
        value &= ~(((1 << width) - 1) << lo)
        value |= (count & ((1 << width) - 1)) << lo
        if name == "vmcnt" and not arch.rdna:
            value = (value & ~0xC000) | ((count >> 4) << 14)
    return value


def _waitcnt(enc: _Encoder, op: Any, what: str) -> int:
    if isinstance(op, int):
        return _unsigned(op, 16, what, enc)
    if not isinstance(op, dict):
        enc.fail(f"expected vmcnt(n) expcnt(n) lgkmcnt(n), got {op!r}", what)
    for name, count in op.items():
        if name not in WAITCNT_FIELDS[enc.arch.rdna]:
            enc.fail(f"unknown counter {name}", what)
        width = WAITCNT_FIELDS[enc.arch.rdna][name][1]
        limit = 63 if name == "vmcnt" and not enc.arch.rdna else (1 << width) - 1
        _unsigned(count, (limit + 1).bit_length() - 1, f"{what} {name}", enc)
    return waitcnt_value(op, enc.arch)


def _salu(enc: _Encoder) -> bytes:
    info = enc.info
    _no_mods(enc)
    for i, (role, op) in enumerate(zip(info.sig, _operands(enc, info.sig), strict=True)):
        what = enc.what(i, role)
        if role == "gpridx":  # s_set_gpr_idx_on's mode: gpr_idx(SRC0,DST) or 0..15
            code = symbol_value(op, enc.arch) if isinstance(op, Sym) else op
            if not isinstance(code, int) or not 0 <= code <= 15:
                enc.fail("invalid immediate: only 4-bit values are legal", what)
            enc.fields["ssrc1"] = code
        elif role == "sdst":
            if info.name in NULL_SDST and op != Reg("null"):
                enc.fail("src0 must be null", what)
            enc.fields["sdst"] = enc.sreg(op, info.count(0), what)
        elif role in ("ssrc0", "ssrc1"):
            if info.name.startswith(BARRIER_ID) and not (isinstance(op, int) or op == Reg("m0")):
                enc.fail("barrier id must be an inline constant or m0", what)
            if "regsrc" in info.flags and not isinstance(op, Reg):
                enc.fail("expected an SGPR", what)
            code, _, _ = enc.src(op, SRC_INDEX[role], what, vgpr=False)
            if isinstance(op, Mod):
                enc.fail("modifiers are not allowed on scalar operands", what)
            enc.fields[role] = code
        elif role == "simm16":
            if isinstance(op, Sym):
                op = symbol_value(op, enc.arch)
            if info.name.startswith(UNSIGNED_SIMM16):
                enc.fields["simm16"] = _unsigned(op, 16, what, enc)
            else:
                enc.fields["simm16"] = _signed(op, 16, what, enc, unsigned_ok=True)
        elif role == "k":
            if not isinstance(op, int | float) or isinstance(op, bool):
                enc.fail("expected a 32-bit constant", what)
            enc.set_literal(_const_value(op), what)
        elif role == "label":
            if isinstance(op, Label):
                if enc.labels is None or op.name not in enc.labels:
                    enc.fail(f"undefined label {op.name}", what)
                delta = enc.labels[op.name] - (enc.pc + 4)
                if delta % 4:
                    enc.fail(f"branch target {op.name} is not dword aligned", what)
                op = delta // 4
            enc.fields["simm16"] = _signed(op, 16, what, enc, unsigned_ok=True)  # llvm-mc prints 0..65535
        elif role == "waitcnt":
            enc.fields["simm16"] = _waitcnt(enc, op, what)
        elif role == "msg":  # s_sendmsg_rtn_*: the message id sits in the SSRC0 field
            enc.fields["ssrc0"] = _unsigned(symbol_value(op, enc.arch) if isinstance(op, Sym) else op, 8, what, enc)
    return enc.emit(enc.layout(info.fmt))


# ---------------------------------------------------------------- scalar memory

def _smem(enc: _Encoder) -> bytes:
    info, arch, f = enc.info, enc.arch, enc.fields
    prefetch = "plen" in info.sig
    _no_mods(enc, () if prefetch else ("offset", "glc", "dlc") if arch.gen == 11 else ("offset", "glc"))
    ops = _operands(enc, info.sig)
    offset_bits = {11: 21, 12: 24, 9: 21}[arch.gen]
    for i, (role, op) in enumerate(zip(info.sig, ops, strict=True)):
        what = enc.what(i, role)
        if role == "sdata":
            f["sdata"] = enc.sreg(op, info.count(0), what)
        elif role == "probe":  # s_atc_probe: 7 bits (gfx12: 5), the rest dropped as llvm-mc drops them
            f["sdata"] = _unsigned(op, 16, what, enc) & (0x1F if arch.gen == 12 else 0x7F)
        elif role == "plen":  # s_prefetch_*: 5 bits, likewise
            f["sdata"] = _unsigned(op, 16, what, enc) & 0x1F
        elif role == "ioffset":
            f["offset"] = _signed(op, offset_bits, what, enc)
        elif role == "soffset":
            f["soffset"] = enc.sreg(op, 1, what)
        elif role in ("sbase", "sbuf"):
            f["sbase"] = enc.sreg(op, 2 if role == "sbase" else 4, what) >> 1
        elif role == "soff":
            extra = enc.inst.mods.get("offset")
            if isinstance(op, int):
                if extra is not None:
                    enc.fail("give the offset once", "offset")
                f["offset"] = _signed(op, offset_bits, what, enc)
                if arch.gen == 9:
                    f["imm"] = 1
                else:
                    f["soffset"] = arch.null or 0
                continue
            code = enc.sreg(op, 1, what)
            if arch.gen != 9:
                f["soffset"] = code
                f["offset"] = _signed(extra or 0, offset_bits, "offset", enc)
            elif extra is None:
                f["offset"] = code
            else:
                f.update(imm=1, soe=1, soffset=code, offset=_signed(extra, offset_bits, "offset", enc))
    for flag in ("glc", "dlc"):
        if enc.inst.mods.get(flag):
            f[flag] = 1
    return enc.emit(enc.layout("SMEM"))


# ---------------------------------------------------------------- vector ALU

def _mask_count(enc: _Encoder) -> int:
    return 1 if enc.arch.wave == 32 else 2


def _vcc(enc: _Encoder, op: Any, what: str) -> None:
    want = "vcc_lo" if enc.arch.wave == 32 else "vcc"
    if not (isinstance(op, Reg) and op.kind == want):
        raise NoFit


def _vop_sdwa(enc: _Encoder) -> bytes:
    """VOP1 / VOP2 / VOPC with SDWA (gfx9): sources may be VGPRs, SGPRs or inline constants, with
    neg/abs (float) or sext (integer); VOPC may write an SGPR pair instead of VCC."""
    info, f, mods, arch = enc.info, enc.fields, enc.inst.mods, enc.arch
    forms = dpp_forms(arch.gen).get(info.name, ())
    src_only = (False, "sdwa_src") in forms  # v_cvt_f32_fp8 and the like: selects its source only
    if (False, "sdwa") not in forms and not src_only:
        enc.fail("has no SDWA form on this arch")
    allowed = ("src0_sel", "src1_sel") if src_only or info.fmt == "VOPC" else sdwa.KEYS
    _no_mods(enc, allowed + (("clamp", "omod") if info.fmt != "VOPC" else ()))
    srcs: list[tuple[int, int, int, int, bool]] = []
    sdst = None
    for i, (role, op) in enumerate(zip(info.sig, _operands(enc, info.sig), strict=True)):
        what = enc.what(i, role)
        if role == "vdst":
            f["vdst"] = enc.vreg(op, info.count(0), what).index
        elif role == "vcc" and info.fmt == "VOPC" and i == 0:
            if not (isinstance(op, Reg) and op.kind == "vcc"):
                sdst = enc.sreg(op, 2, what)
        elif role == "vcc":
            _vcc(enc, op, what)
        elif role in ("src0", "vsrc1"):
            neg = ab = sext = 0
            if isinstance(op, Sext):
                if src_only:
                    enc.fail("sext is not valid here", what)
                op, sext = op.value, 1
            if isinstance(op, Mod):
                if not info.is_float(1 if role == "src0" else 2):
                    enc.fail("neg/abs modifiers need a float operand", what)
                neg, ab, op = int(op.neg), int(op.abs), op.value
            if isinstance(op, Reg) and op.kind == "v":
                code, scalar = enc.vreg(op, 1, what).index, False
            else:
                code, scalar = enc.src(op, 1, what, vgpr=False, literal=False)[0], True
            if role == "vsrc1":
                f["vsrc1"] = code
            srcs.append((code, neg, ab, sext, scalar))
        else:
            enc.fail(f"operand role {role} is not supported with SDWA", what)
    implicit_vcc = int(info.fmt == "VOP2" and info.sig[-1:] == ("vcc",))  # carry-in / cndmask select
    if sum(s[4] and s[0] < 128 for s in srcs) + implicit_vcc > 1:
        enc.fail("reads 2 scalar values (SGPRs, VCC); the constant bus allows 1")
    f["src0"] = sdwa.MARKER
    try:
        enc.extra = sdwa.encode({"dst_unused": "UNUSED_PAD", **mods} if src_only else mods, srcs,
                                info.fmt == "VOPC", sdst, arch)
    except AsmError as e:
        enc.fail(str(e).split(" (")[0], e.operand)
    return enc.emit(enc.layout(info.fmt))


def _true16_operands(enc: _Encoder) -> None:
    """v8.l / v8.h -> the VGPR number the encodings hold (index + 128 for the high half); halves required,
    no neg/abs."""
    ops = []
    for i, (role, op) in enumerate(zip(enc.info.sig, _operands(enc, enc.info.sig), strict=True)):
        what = enc.what(i, role)
        if isinstance(op, Mod):
            enc.fail("not a valid operand (no neg/abs)", what)
        if isinstance(op, Reg) and op.kind == "v":
            if not op.half:
                enc.fail("invalid operand for instruction (a 16-bit VGPR half: v8.l or v8.h)", what)
            if op.index >= 128:
                enc.fail("operands are not valid for this GPU or mode (halves of v0..v127 only)", what)
            op = Reg("v", op.index + 128 * (op.half == "h"))
        elif role == "vdst":
            enc.fail("invalid operand for instruction (a 16-bit VGPR half: v8.l or v8.h)", what)
        ops.append(op)
    enc.inst = Inst(enc.inst.name, tuple(ops), enc.inst.mods, enc.inst.enc)


def _vop32(enc: _Encoder) -> bytes:
    """VOP1 / VOP2 / VOPC in their 32-bit encoding (raises NoFit when VOP3 is needed)."""
    info, f = enc.info, enc.fields
    if info.name in TRUE16:
        _true16_operands(enc)
    if not enc.arch.rdna and (sdwa.has_sdwa(enc.inst.mods) or enc.inst.enc == "sdwa"):
        return _vop_sdwa(enc)
    use_dpp = dpp.has_dpp(enc.inst.mods) or enc.inst.enc == "dpp"
    if any(m not in dpp.KEYS for m in enc.inst.mods):
        raise NoFit
    negabs = 0
    for i, (role, op) in enumerate(zip(info.sig, _operands(enc, info.sig), strict=True)):
        if use_dpp and role in ("src0", "vsrc1") and isinstance(op, Mod | Reg | Sext):
            op, negabs = _dpp_source(enc, op, role, negabs, enc.what(i, role))
        what = enc.what(i, role)
        slot = 0 if role in ("vdst", "adst") else SRC_INDEX.get(role, 1)
        # (the 32-bit class mask of v_cmp*_class_f16 is a 16-bit VGPR operand there too)
        vgpr16 = info.width(slot) == 16 or (slot == 2 and info.name.endswith("_class_f16"))
        if (enc.arch.rdna and vgpr16 and isinstance(op, Reg) and op.kind == "v"
                and op.index >= 128 and not info.name.startswith(PACKED) and info.name not in TRUE16):
            raise NoFit  # 16-bit operands of the 32-bit encodings reach v0..v127 only
        if role == "vdst":
            f["vdst"] = enc.vreg(op, info.count(0), what).index
        elif role == "adst":
            f["vdst"] = enc.vreg(op, info.count(0), what, ("a",)).index
        elif role == "sdst":
            f["vdst"] = enc.sreg(op, 1, what)
        elif role == "src0":
            if isinstance(op, Mod):
                raise NoFit
            f["src0"] = enc.src(op, 1, what)[0]
        elif role in ("vsrc0", "asrc0"):
            f["src0"] = 256 + enc.vreg(op, info.count(1), what, ("a",) if role == "asrc0" else ("v",)).index
        elif role == "vsrc1":
            if not (isinstance(op, Reg) and op.kind == "v"):
                raise NoFit
            f["vsrc1"] = enc.vreg(op, info.count(2), what).index
        elif role == "vcc":
            _vcc(enc, op, what)
        elif role == "k":
            if isinstance(op, Reg | Mod):
                enc.fail("expected a literal constant", what)
            bits = 16 if info.width(0) == 16 else 32
            code, lit = constant_code(op, bits, info.is_float(1), info.name, what, enc.arch)
            enc.set_literal(lit if lit is not None else _const_value(op, bits), what)
    implicit = ("vcc",) if info.sig and info.sig[-1] == "vcc" else ()  # carry-in / cndmask select
    literal = [(255, 1)] if enc.literal is not None else []  # fmamk/fmaak's K is a constant-bus read
    _constant_bus(enc, [(f.get("src0"), info.count(1)), *literal], implicit)
    if use_dpp:
        if negabs and "dpp8" in enc.inst.mods:
            raise NoFit  # DPP8's dword has no neg/abs bits; llvm-mc takes the VOP3 form
        _apply_dpp(enc, negabs)
    return enc.emit(enc.layout(info.fmt))


def _dpp_source(enc: _Encoder, op: Any, role: str, negabs: int, what: str) -> tuple[Reg, int]:
    """A DPP source: a VGPR, its neg/abs going into the DPP dword (bits neg0 abs0 neg1 abs1)."""
    shift = 0 if role == "src0" else 2
    slot = 1 if role == "src0" else 2
    exponent = enc.info.exponent_mods(slot, enc.arch.rdna)
    if isinstance(op, Sext):
        if not exponent:
            enc.fail("sext is valid on SDWA sources and v_ldexp's exponent only", what)
        negabs |= 1 << shift
        op = op.value
    elif isinstance(op, Mod):
        if not (enc.info.is_float(slot) or exponent == "negabs"):
            enc.fail("neg/abs modifiers need a float operand", what)
        negabs |= (int(op.neg) | int(op.abs) << 1) << shift
        op = op.value
    if not (isinstance(op, Reg) and op.kind == "v"):
        enc.fail("DPP sources are VGPRs", what)
    return op, negabs


def _apply_dpp(enc: _Encoder, negabs: int) -> None:
    """Moves src0 into the DPP dword and puts the DPP marker in its place."""
    if enc.literal is not None:
        enc.fail("DPP takes no literal constant")
    src0 = enc.fields.get("src0", 0)
    if src0 < 256:
        enc.fail("DPP needs a VGPR as the first source", "src0")
    kind = "dpp8" if "dpp8" in enc.inst.mods else "dpp16"
    vop3 = enc.layout_name in ("VOP3", "VOP3SD")
    if (vop3, kind) not in dpp_forms(enc.arch.gen).get(enc.info.name, ()):
        enc.fail(f"has no {kind.upper()} form{' in its VOP3 encoding' if vop3 else ''} on this arch")
    try:
        code, word = dpp.encode(enc.inst.mods, src0 - 256, negabs, enc.arch)
    except AsmError as e:
        raise AsmError(str(e).split(" (")[0], enc.inst.name, e.operand, enc.arch.name) from None
    enc.fields["src0"] = code
    enc.extra = word


def _constant_bus(enc: _Encoder, codes: list[tuple[int | None, int]], implicit: tuple[str, ...] = ()) -> None:
    """At most 1 (CDNA) or 2 (RDNA) scalar values per VALU instruction: SGPRs, implicit VCC, the literal.

    ``codes``: (source code, register count); vcc_lo and vcc are different reads."""
    free = enc.arch.null  # null reads nothing
    reads = {(c, n if c != 255 else 1) for c, n in codes
             if c is not None and c != free and (c < 128 or c in (253, 255))}
    if "vcc" in implicit:
        reads.add((106, _mask_count(enc)))
    if "vcc!" in implicit:  # v_div_fmas reads all of VCC (even in wave32): an explicit vcc_lo is another read
        reads.add((106, 2))
    limit = 2 if enc.arch.rdna and enc.info.name not in SHIFT64 else 1
    if len(reads) > limit:
        enc.fail(f"reads {len(reads)} scalar values (SGPRs, VCC, literal); the constant bus allows {limit}")


def _const_value(op: int | float, bits: int = 32) -> int:
    """The literal dword of a constant (a float as its ``bits``-wide float bits)."""
    from tg_amd.operands import float_bits
    return float_bits(op, bits) if isinstance(op, float) else op & 0xFFFFFFFF


def _e64_sig(info: OpInfo, arch: Arch) -> tuple[str, ...]:
    """Operand roles of a VOP1/VOP2/VOPC instruction in its VOP3 encoding."""
    sig = []
    for i, role in enumerate(info.sig):
        if role == "vsrc1":
            sig.append("src1")
        elif role == "vsrc0":
            sig.append("src0")
        elif role == "vcc" and info.fmt == "VOPC":
            sig.append("cdst")
        elif role == "vcc":
            sig.append("sdst" if i == 1 else "mask")
        else:
            sig.append(role)
    return tuple(sig)


def _vop3(enc: _Encoder, sig: tuple[str, ...], op: int) -> bytes:
    info, f, mods = enc.info, enc.fields, enc.inst.mods
    layout = enc.layout("VOP3SD" if "sdst" in sig and "vdst" in sig else "VOP3")
    enc.layout_name = layout.name
    use_dpp = dpp.has_dpp(mods) or enc.inst.enc == "e64_dpp"
    if use_dpp and not enc.arch.rdna:
        enc.fail("VOP3 with DPP exists on RDNA only")
    _no_mods(enc, ("clamp", "omod", "op_sel") + (dpp.KEYS if use_dpp else ()))
    f["op"] = op
    neg = ab = 0
    nsrc = 0
    for i, (role, o) in enumerate(zip(sig, _operands(enc, sig), strict=True)):
        what = enc.what(i, role)
        if role == "vdst":
            f["vdst"] = enc.vreg(o, info.count(0), what).index
        elif role == "sdst":
            count = _mask_count(enc) if info.fmt in ("VOP2", "VOP3SD") else 1
            f["sdst" if "sdst" in layout.fields else "vdst"] = enc.sreg(o, count, what)
        elif role == "cdst":
            f["vdst"] = enc.sreg(o, _mask_count(enc), what)
        elif role in SRC_FIELDS:
            k = SRC_FIELDS.index(role)
            code, n, a = enc.src(o, k + 1, what, literal=enc.arch.vop3_literal)
            f[role] = code
            neg |= n << k
            ab |= a << k
            nsrc = max(nsrc, k + 1)
        elif role in ("ssrc0", "ssrc1", "ssrc2"):
            k = int(role[-1])
            f[f"src{k}"] = enc.src(o, k + 1, what, vgpr=False, literal=enc.arch.vop3_literal)[0]
            nsrc = max(nsrc, k + 1)
        elif role in ("vsrc0", "vsrc1", "vsrc2"):  # VGPR-only sources
            k = int(role[-1])
            f[f"src{k}"] = 256 + enc.vreg(o, info.count(k + 1), what).index
            nsrc = max(nsrc, k + 1)
        elif role == "mask":
            f["src2"] = enc.sreg(o, _mask_count(enc), what)
            nsrc = 3
    if info.fmt == "VOPC" and info.name.startswith("v_cmpx") and enc.arch.rdna:
        f["vdst"] = 126
    lane_ops = ("v_readlane_b32", "v_writelane_b32")
    if info.name not in lane_ops:
        implicit = ("vcc!",) if info.name.startswith("v_div_fmas") else ()  # reads VCC
        _constant_bus(enc, [(f.get(k), info.count(i + 1)) for i, k in enumerate(SRC_FIELDS)], implicit)
    elif info.name == "v_writelane_b32" and not enc.arch.rdna:  # lane select in M0 is free on CDNA
        _constant_bus(enc, [(f.get("src0"), 1), (f.get("src1") if f.get("src1") != enc.arch.m0 else None, 1)])
    if neg:
        f["neg"] = neg
    if ab:
        if "abs" not in layout.fields:
            enc.fail("abs is not valid with a scalar carry-out", "abs")
        f["abs"] = ab
    if mods.get("clamp"):
        if "noclamp" in info.flags:
            enc.fail("clamp is not valid here", "clamp")
        f["clamp"] = 1
    if "omod" in mods:
        if mods["omod"] not in OMOD:
            enc.fail(f"output modifier {mods['omod']!r} (mul:2, mul:4, div:2)", "omod")
        f["omod"] = OMOD[mods["omod"]]
    if "op_sel" in mods and info.name.startswith(PERMLANE_OP_SEL):
        bits = list(mods["op_sel"])
        if len(bits) != 2:
            enc.fail("op_sel takes 2 bits here (fi, bound_ctrl)", "op_sel")
        f["op_sel"] = bits[0] | bits[1] << 1
    elif "op_sel" in mods:
        bits = list(mods["op_sel"])
        if len(bits) != nsrc + 1 or "op_sel" not in layout.fields:
            enc.fail(f"op_sel takes {nsrc + 1} bits", "op_sel")
        f["op_sel"] = sum(b << k for k, b in enumerate(bits[:-1])) | bits[-1] << 3
    if use_dpp:
        _apply_dpp(enc, 0)  # VOP3 keeps neg/abs in its own fields
    return enc.emit(layout)


def _valu(enc: _Encoder) -> bytes:
    info = enc.info
    if info.fmt in ("VOP3", "VOP3SD"):
        return _vop3(enc, info.sig, info.op)
    if enc.inst.enc not in ("e64", "e64_dpp"):
        try:
            return _vop32(enc)
        except NoFit:
            if enc.inst.enc in ("e32", "dpp", "sdwa") or info.e64 is None:
                enc.fail("operands do not fit the 32-bit encoding" +
                         ("" if info.e64 is None else "; use the _e64 form"))
    if info.e64 is None:
        enc.fail("has no 64-bit (VOP3) encoding")
    enc.fields.clear()
    enc.literal = enc.extra = None
    return _vop3(enc, _e64_sig(info, enc.arch), info.e64)


def _bits(enc: _Encoder, name: str, n: int, default: int) -> list[int]:
    value = enc.inst.mods.get(name)
    if value is None:
        return [default] * 3
    bits = list(value)
    if len(bits) != n or any(b not in (0, 1) for b in bits):
        enc.fail(f"{name} takes {n} bits of 0/1", name)
    return bits + [default] * (3 - n)


def _vop3p(enc: _Encoder) -> bytes:
    info, f = enc.info, enc.fields
    _no_mods(enc, ("op_sel", "op_sel_hi", "neg_lo", "neg_hi", "clamp"))
    f["op"] = info.op
    mix = "mix" in info.flags
    mix_neg = [0, 0]
    nsrc = sum(r.startswith(("src", "asrc")) for r in info.sig)
    for i, (role, o) in enumerate(zip(info.sig, _operands(enc, info.sig), strict=True)):
        what = enc.what(i, role)
        if role == "vdst":
            f["vdst"] = enc.vreg(o, info.count(0), what).index
        elif role == "adst":
            f["vdst"] = enc.vreg(o, info.count(0), what, ("a",)).index
        elif role == "asrc0":
            f["src0"] = 256 + enc.vreg(o, info.count(1), what, ("a",)).index
        elif role in SRC_FIELDS:
            if isinstance(o, Mod) and not mix:
                enc.fail("packed math takes neg_lo/neg_hi, not -x or |x|", what)
            code, neg, ab = enc.src(o, SRC_FIELDS.index(role) + 1, what, literal=enc.arch.vop3_literal)
            f[role] = code
            k = SRC_FIELDS.index(role)
            mix_neg[0] |= neg << k  # fma_mix: -x and |x| live in the neg_lo and neg_hi bits
            mix_neg[1] |= ab << k
    op_sel = _bits(enc, "op_sel", nsrc, 0)
    op_sel_hi = _bits(enc, "op_sel_hi", nsrc, 0 if mix else 1)
    if mix and ("neg_lo" in enc.inst.mods or "neg_hi" in enc.inst.mods):
        enc.fail("fma_mix takes -x and |x|, not neg_lo/neg_hi", "neg_lo")
    neg_lo = [mix_neg[0] >> k & 1 for k in range(3)] if mix else _bits(enc, "neg_lo", nsrc, 0)
    neg_hi = [mix_neg[1] >> k & 1 for k in range(3)] if mix else _bits(enc, "neg_hi", nsrc, 0)
    f["op_sel"] = op_sel[0] | op_sel[1] << 1 | op_sel[2] << 2
    f["op_sel_hi"] = op_sel_hi[0] | op_sel_hi[1] << 1
    f["op_sel_hi2"] = op_sel_hi[2]
    f["neg"] = neg_lo[0] | neg_lo[1] << 1 | neg_lo[2] << 2
    f["neg_hi"] = neg_hi[0] | neg_hi[1] << 1 | neg_hi[2] << 2
    if enc.inst.mods.get("clamp"):
        f["clamp"] = 1
    _constant_bus(enc, [(f.get(k), info.count(i + 1)) for i, k in enumerate(SRC_FIELDS)])
    return enc.emit(enc.layout("VOP3P"))


def _mai(enc: _Encoder) -> bytes:
    """MFMA: D, A, B (VGPRs or AGPRs), C (D's file, or an inline constant); sparse MFMA (v_smfmac_*)
    accumulates into D and reads the sparsity index VGPR in C's place."""
    info, f, mods = enc.info, enc.fields, enc.inst.mods
    sparse = "vidx" in info.sig
    _no_mods(enc, ("cbsz", "abid") if sparse else ("cbsz", "abid", "blgp"))
    f["op"] = info.op
    ops = _operands(enc, info.sig)
    dst = enc.vreg(ops[0], info.count(0), enc.what(0, "mdst"), ("v", "a"))
    f["vdst"] = dst.index
    f["acc_cd"] = int(dst.kind == "a")
    acc = 0
    for k in (1, 2):
        r = enc.vreg(ops[k], info.count(k), enc.what(k, f"msrc{k - 1}"), ("v", "a"))
        f[f"src{k - 1}"] = 256 + r.index
        acc |= int(r.kind == "a") << (k - 1)
    c = ops[3]
    if sparse:
        f["src2"] = 256 + enc.vreg(c, 1, enc.what(3, "vidx")).index
    elif isinstance(c, Reg):
        enc.vreg(c, info.count(3), enc.what(3, "msrc2"), (dst.kind,))
        same = c.index == dst.index and c.count == dst.count
        overlap = c.index < dst.index + dst.count and dst.index < c.index + c.count
        if not same and overlap and dst.count > 4:  # LLVM allows a partial overlap up to 128-bit D
            enc.fail("C must be D itself or not overlap D", enc.what(3, "msrc2"))
        f["src2"] = 256 + c.index
    else:
        enc.info = info
        f["src2"] = enc.src(c, 3, enc.what(3, "msrc2"), vgpr=False, literal=False)[0]
    f["acc"] = acc
    for name, bits in (("cbsz", 3), ("abid", 4), ("blgp", 3)):
        if name in mods:
            f[name] = _unsigned(mods[name], bits, name, enc)
    return enc.emit(enc.layout("MAI"))


# ---------------------------------------------------------------- VOPD

def _vopd(enc: _Encoder) -> bytes:
    x, y, arch = enc.inst, enc.inst.dual, enc.arch
    assert y is not None
    f = enc.fields
    regs: dict[str, dict[str, int]] = {}
    for half, part in (("X", x), ("Y", y)):
        info = vopd_info(arch, part.name, half)
        if info is None:
            raise AsmError(f"no such VOPD {half} opcode on this arch", part.name, None, arch.name)
        sub = _Encoder(part, arch, info, enc.pc, enc.labels)
        sub.literal = enc.literal
        if part.mods:
            sub.fail("VOPD halves take no modifiers")
        got: dict[str, int] = {}
        for i, (role, o) in enumerate(zip(info.sig, _operands(sub, info.sig), strict=True)):
            what = sub.what(i, role)
            if role == "vdst":
                got["vdst"] = sub.vreg(o, 1, what).index
            elif role == "src0":
                if isinstance(o, Mod):
                    sub.fail("VOPD takes no modifiers", what)
                got["src0"] = sub.src(o, 1, what)[0]
            elif role == "vsrc1":
                got["vsrc1"] = sub.vreg(o, 1, what).index
            elif role == "vcc":
                if not (isinstance(o, Reg) and o.kind == "vcc_lo"):
                    sub.fail("expected vcc_lo", what)
            elif role == "k":
                code, lit = constant_code(o, 32, True, part.name, what, arch)
                sub.set_literal(lit if lit is not None else _const_value(o), what)
        enc.literal = sub.literal
        f["opx" if half == "X" else "opy"] = info.op
        regs[half] = got
    gx, gy = regs["X"], regs["Y"]
    scalar = {c for g in (gx, gy) for c in [g["src0"]] if c < 128}
    scalar |= {106} if "v_dual_cndmask_b32" in (x.name, y.name) else set()
    scalar |= {255} if enc.literal is not None else set()
    if len(scalar) > 2:
        enc.fail(f"VOPD pair reads {len(scalar)} scalar values (SGPRs, VCC, literal); the constant bus allows 2")
    if gx["vdst"] % 2 == gy["vdst"] % 2:
        enc.fail(f"VOPD destinations must be one even and one odd VGPR, got v{gx['vdst']} and v{gy['vdst']}",
                 "vdst")
    bx, by = _vopd_banks(x.name, gx), _vopd_banks(y.name, gy)
    for k, (key, banks) in enumerate((("src0", 4), ("src1", 4), ("src2", 2))):
        a, b = bx[k], by[k]
        if a is not None and b is not None and a % banks == b % banks:
            enc.fail(f"VOPD {key} operands must use different VGPR banks (v{a}, v{b})", key)
    f.update(srcx0=gx["src0"], vsrcx1=gx.get("vsrc1", 0), vdstx=gx["vdst"], srcy0=gy["src0"],
             vsrcy1=gy.get("vsrc1", 0), vdsty=gy["vdst"] >> 1)
    return enc.emit(enc.layout("VOPD"))


def _vopd_banks(name: str, got: dict[str, int]) -> tuple[int | None, int | None, int | None]:
    """The VGPRs a VOPD half reads as src0, src1, src2 (fmac/dot2acc accumulate into vdst; fmamk's
    vsrc1 is its addend)."""
    src0 = got["src0"] - 256 if got.get("src0", 0) >= 256 else None
    src1, src2 = got.get("vsrc1"), None
    if name in ("v_dual_fmac_f32", "v_dual_dot2acc_f32_f16", "v_dual_dot2acc_f32_bf16"):
        src2 = got["vdst"]
    elif name == "v_dual_fmamk_f32":
        src1, src2 = None, got.get("vsrc1")
    return src0, src1, src2


FORMAT_ENCODERS = {"SOP1": _salu, "SOP2": _salu, "SOPC": _salu, "SOPK": _salu, "SOPP": _salu, "SMEM": _smem,
                   "VOP1": _valu, "VOP2": _valu, "VOPC": _valu, "VOP3": _valu, "VOP3SD": _valu,
                   "VOP3P": _vop3p, "MAI": _mai, "DS": mem._ds, "GLOBAL": mem._flat, "FLAT": mem._flat,
                   "SCRATCH": mem._flat, "MUBUF": mem._buffer, "MTBUF": mem._buffer, "VINTERP": mem._vinterp,
                   "LDSDIR": mem._ldsdir,
                   "EXP": mem._exp, "MIMG": image.encode, "VIMAGE": image.encode, "VSAMPLE": image.encode}


def encode(inst: Inst, arch: str | Arch, pc: int = 0, labels: dict[str, int] | None = None) -> bytes:
    """The bytes of one instruction (see module docstring)."""
    arch = get_arch(arch)
    if inst.dual is not None:
        info = vopd_info(arch, inst.name, "X")
        if info is None:
            raise AsmError("no such VOPD X opcode on this arch", inst.name, None, arch.name)
        return _vopd(_Encoder(inst, arch, info, pc, labels))
    info = lookup(arch, inst.name)
    enc = _Encoder(inst, arch, info, pc, labels)
    if info.fmt in ("VOP3", "VOP3SD", "VOP3P", "MAI", "SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM", "DS",
                    "GLOBAL", "FLAT", "SCRATCH", "MUBUF", "MTBUF", "VINTERP", "LDSDIR", "EXP", *image.FAMILIES) and \
            inst.enc not in (None, "e64_dpp"):
        enc.fail(f"has only one encoding; drop the _{inst.enc} suffix")
    enc.fields["op"] = info.op
    return FORMAT_ENCODERS[info.fmt](enc)

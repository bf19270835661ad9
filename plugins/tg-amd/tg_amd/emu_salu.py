"""What the scalar ALU instructions do (``s_*`` arithmetic, logic, compares, SOPK; RDNA4's scalar float).

In: a decoded ``Inst`` and its ``Context``. Out: the closure ``op(wave)`` that executes it, as in
``tg_amd.emu_ops`` (which dispatches here): ``salu_op`` for the table-driven families, ``salu1`` for
the remaining one-source ``s_*`` instructions (after the memory ones). Integer semantics are Python
ints on the SGPR bits; scalar floats are numpy float32/float16 values of the SGPR bits.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tg_amd.emu_operands import M32, M64, Context, Op, as_f64, cvt_f_to_int, sread, swriter, unsupported
from tg_amd.emu_state import EXEC, Wave
from tg_amd.inst import Inst
from tg_amd.operands import Reg, float_bits


def salu_op(inst: Inst, ctx: Context) -> Op | None:
    """The op of a two-source, compare, SOPK or scalar float instruction; None for the others."""
    name = inst.name
    if name in SOP2:
        return _salu2(inst, ctx)
    if SFLOAT_RE.match(name):
        return _sfloat(inst, ctx)
    if name in SCVT:
        return _scvt(inst, ctx)
    if re.match(r"^s_cmp_[a-z]+_f(16|32)$", name):
        return _sfcmp(inst, ctx)
    if name.startswith("s_cmp_"):
        return _scmp(inst, ctx)
    if name.startswith(("s_movk", "s_cmovk", "s_addk", "s_mulk", "s_cmpk")):
        return _sopk(inst, ctx)
    return None


def _sext(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def _add_overflow(a: int, b: int, r: int) -> int:
    sa, sb, sr = a >> 31 & 1, b >> 31 & 1, r >> 31 & 1
    return int(sa == sb and sr != sa)


def _sub_overflow(a: int, b: int, r: int) -> int:
    sa, sb, sr = a >> 31 & 1, b >> 31 & 1, r >> 31 & 1
    return int(sa != sb and sr != sa)


def _bfe(a: int, b: int, bits: int) -> int:
    off, width = b & (bits - 1), b >> 16 & 0x7F
    return a >> off & ((1 << width) - 1)


# name -> (fn(a, b, scc) -> (result, new scc or None), dst bits, src0 bits, src1 bits)
SOP2: dict[str, tuple[Callable[[int, int, int], tuple[int, int | None]], int, int, int]] = {}


def _sop2(names: str, fn: Callable[[int, int, int], tuple[int, int | None]], bits: tuple[int, int, int] = (32,) * 3
          ) -> None:
    for name in names.split():
        SOP2[name] = (fn, *bits)


_sop2("s_add_u32 s_add_co_u32", lambda a, b, c: (a + b, (a + b) >> 32))
_sop2("s_sub_u32 s_sub_co_u32", lambda a, b, c: (a - b, int(a < b)))
_sop2("s_addc_u32 s_add_co_ci_u32", lambda a, b, c: (a + b + c, (a + b + c) >> 32))
_sop2("s_subb_u32 s_sub_co_ci_u32", lambda a, b, c: (a - b - c, int(a < b + c)))
_sop2("s_add_i32 s_add_co_i32", lambda a, b, c: (a + b, _add_overflow(a, b, a + b)))
_sop2("s_sub_i32 s_sub_co_i32", lambda a, b, c: (a - b, _sub_overflow(a, b, a - b)))
_sop2("s_mul_i32", lambda a, b, c: (a * b, None))
_sop2("s_mul_hi_u32", lambda a, b, c: (a * b >> 32, None))
_sop2("s_lshl_b32", lambda a, b, c: (r := a << (b & 31) & M32, int(r != 0)))
_sop2("s_lshr_b32", lambda a, b, c: (r := a >> (b & 31), int(r != 0)))
_sop2("s_ashr_i32", lambda a, b, c: (r := _sext(a, 32) >> (b & 31) & M32, int(r != 0)))
_sop2("s_and_b32", lambda a, b, c: (r := a & b, int(r != 0)))
_sop2("s_or_b32", lambda a, b, c: (r := a | b, int(r != 0)))
_sop2("s_xor_b32", lambda a, b, c: (r := a ^ b, int(r != 0)))
_sop2("s_and_not1_b32", lambda a, b, c: (r := a & ~b & M32, int(r != 0)))
_sop2("s_or_not1_b32", lambda a, b, c: (r := (a | ~b) & M32, int(r != 0)))
_sop2("s_min_u32", lambda a, b, c: (min(a, b), int(a < b)))
_sop2("s_max_u32", lambda a, b, c: (max(a, b), int(a > b)))
_sop2("s_min_i32", lambda a, b, c: (a if _sext(a, 32) < _sext(b, 32) else b, int(_sext(a, 32) < _sext(b, 32))))
_sop2("s_max_i32", lambda a, b, c: (a if _sext(a, 32) > _sext(b, 32) else b, int(_sext(a, 32) > _sext(b, 32))))
_sop2("s_cselect_b32", lambda a, b, c: (a if c else b, None))
_sop2("s_bfe_u32", lambda a, b, c: (r := _bfe(a, b, 32), int(r != 0)))
_sop2("s_bfm_b32", lambda a, b, c: (((1 << (a & 31)) - 1) << (b & 31), None))
_sop2("s_pack_ll_b32_b16", lambda a, b, c: (a & 0xFFFF | (b & 0xFFFF) << 16, None))


def _lshl_add(n: int) -> Callable[[int, int, int], tuple[int, int | None]]:
    return lambda a, b, c: (r := (a << n) + b, r >> 32)


for _n in (1, 2, 3, 4):
    _sop2(f"s_lshl{_n}_add_u32", _lshl_add(_n))
_sop2("s_and_b64", lambda a, b, c: (r := a & b, int(r != 0)), (64, 64, 64))
_sop2("s_or_b64", lambda a, b, c: (r := a | b, int(r != 0)), (64, 64, 64))
_sop2("s_xor_b64", lambda a, b, c: (r := a ^ b, int(r != 0)), (64, 64, 64))
_sop2("s_cselect_b64", lambda a, b, c: (a if c else b, None), (64, 64, 64))
_sop2("s_lshl_b64", lambda a, b, c: (r := a << (b & 63) & M64, int(r != 0)), (64, 64, 32))
_sop2("s_lshr_b64", lambda a, b, c: (r := a >> (b & 63), int(r != 0)), (64, 64, 32))
_sop2("s_add_nc_u64", lambda a, b, c: (a + b, None), (64, 64, 64))
_sop2("s_sub_nc_u64", lambda a, b, c: (a - b, None), (64, 64, 64))
_sop2("s_mul_u64", lambda a, b, c: (a * b, None), (64, 64, 64))


def _salu2(inst: Inst, ctx: Context) -> Op:
    fn, dbits, abits, bbits = SOP2[inst.name]
    write, a, b = swriter(inst.operands[0], dbits), sread(inst.operands[1], abits), sread(inst.operands[2], bbits)
    mask = M64 if dbits == 64 else M32

    def op(w: Wave) -> None:
        result, scc = fn(a(w), b(w), w.scc)
        write(w, result & mask)
        if scc is not None:
            w.scc = scc
    return op


SCMP: dict[str, Callable[[int, int], bool]] = {
    "eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
}
SCMP_RE = re.compile(r"^s_cmpk?_([a-z]+)_([iu])(32|64)$")


def _scmp(inst: Inst, ctx: Context) -> Op:
    m = SCMP_RE.match(inst.name)
    if not m or m.group(1) not in SCMP:
        return unsupported(inst, ctx)
    cond, signed, bits = SCMP[m.group(1)], m.group(2) == "i", int(m.group(3))
    a, b = sread(inst.operands[0], bits), sread(inst.operands[1], bits)
    if signed:
        def op_signed(w: Wave) -> None:
            w.scc = int(cond(_sext(a(w), bits), _sext(b(w), bits)))
        return op_signed

    def op(w: Wave) -> None:
        w.scc = int(cond(a(w), b(w)))
    return op


def salu1(inst: Inst, ctx: Context) -> Op:
    name = inst.name
    if name in ("s_mov_b32", "s_mov_b64", "s_cmov_b32", "s_cmov_b64", "s_not_b32", "s_brev_b32",
                "s_bcnt1_i32_b32"):
        bits = 64 if name.endswith("b64") else 32
        write, src = swriter(inst.operands[0], bits), sread(inst.operands[1], bits)
        if name.startswith("s_cmov"):
            def cmov(w: Wave) -> None:
                if w.scc:
                    write(w, src(w))
            return cmov
        if name == "s_not_b32":
            def snot(w: Wave) -> None:
                r = ~src(w) & M32
                write(w, r)
                w.scc = int(r != 0)
            return snot
        if name == "s_bcnt1_i32_b32":
            def bcnt(w: Wave) -> None:
                r = src(w).bit_count()
                write(w, r)
                w.scc = int(r != 0)
            return bcnt
        if name == "s_brev_b32":
            return lambda w: write(w, int(f"{src(w):032b}"[::-1], 2))
        return lambda w: write(w, src(w))
    saveexec = {"s_and_saveexec_b32": lambda s, e: s & e, "s_or_saveexec_b32": lambda s, e: s | e,
                "s_and_not1_saveexec_b32": lambda s, e: s & ~e & M32}
    if name in saveexec:
        fn, write, src = saveexec[name], swriter(inst.operands[0]), sread(inst.operands[1])

        def op(w: Wave) -> None:
            old = w.s[EXEC]
            new = fn(src(w), old)
            write(w, old)
            w.s[EXEC] = new
            w.scc = int(new != 0)
        return op
    if name == "s_barrier_signal":
        def signal(w: Wave) -> None:
            w.barriers += 1
        return signal
    return unsupported(inst, ctx)


def _sopk(inst: Inst, ctx: Context) -> Op:
    name = inst.name
    if not name.endswith("_u32"):  # the decoder gives the 16 bits as printed; these instructions sign-extend
        inst = Inst(name, (inst.operands[0], _sext(int(inst.operands[1]) & 0xFFFF, 16)), inst.mods, inst.enc)
    if name.startswith("s_cmpk_"):
        return _scmp(inst, ctx)
    code_dst = inst.operands[0]
    write, cur, imm = swriter(code_dst), sread(code_dst), inst.operands[1]
    if name == "s_movk_i32":
        return lambda w: write(w, imm & M32)
    if name == "s_cmovk_i32":
        def cmovk(w: Wave) -> None:
            if w.scc:
                write(w, imm & M32)
        return cmovk
    if name in ("s_addk_i32", "s_addk_co_i32"):
        def addk(w: Wave) -> None:
            a, b = cur(w), imm & M32
            write(w, (a + b) & M32)
            w.scc = _add_overflow(a, b, a + b)
        return addk
    if name == "s_mulk_i32":
        return lambda w: write(w, cur(w) * imm & M32)
    return unsupported(inst, ctx)


# ---- scalar float (RDNA4): f32 / f16 values in SGPR bits, numpy's IEEE arithmetic (FMA rounded once)

def _sfloat_reader(op: Any, half: bool) -> Callable[[Wave], Any]:
    """A scalar float source as a numpy float32/float16 (f16: the low half of the SGPR)."""
    if half and not isinstance(op, Reg):
        bits = float_bits(op, 16) if isinstance(op, float) else op & 0xFFFF
        value = np.uint16(bits).view(np.float16)
        return lambda w: value
    raw = sread(op)
    if half:
        return lambda w: np.uint16(raw(w) & 0xFFFF).view(np.float16)
    return lambda w: np.uint32(raw(w)).view(np.float32)


def _fbits(x: Any, half: bool) -> int:
    return int(np.float16(x).view(np.uint16)) if half else int(np.float32(x).view(np.uint32))


SFLOAT: dict[str, Callable[..., Any]] = {
    "add": lambda a, b: as_f64(a) + as_f64(b), "sub": lambda a, b: as_f64(a) - as_f64(b),
    "mul": lambda a, b: as_f64(a) * as_f64(b), "min_num": np.fmin, "max_num": np.fmax,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rndne": np.rint,
}
SFLOAT_RE = re.compile(r"^s_(add|sub|mul|min_num|max_num|floor|ceil|trunc|rndne|fmac|fmaak|fmamk)_f(16|32)$")
SCVT: dict[str, tuple[str, str, Callable[[Any], Any]]] = {  # name -> (source kind, result kind, fn)
    "s_cvt_f32_i32": ("i32", "f32", lambda a: np.float32(a)), "s_cvt_f32_u32": ("u32", "f32", lambda a: np.float32(a)),
    "s_cvt_i32_f32": ("f32", "i32", lambda a: int(cvt_f_to_int(a, -2147483648.0, 2147483647.0, np.int32))),
    "s_cvt_u32_f32": ("f32", "u32", lambda a: int(cvt_f_to_int(a, 0.0, 4294967295.0, np.uint32))),
    "s_cvt_f16_f32": ("f32", "f16", lambda a: np.float16(a)), "s_cvt_f32_f16": ("f16", "f32", lambda a: np.float32(a)),
    "s_cvt_hi_f32_f16": ("f16hi", "f32", lambda a: np.float32(a)),
}


def _sfloat(inst: Inst, ctx: Context) -> Op:
    """s_add_f32, s_fmac_f16, s_floor_f32, ...: the result's bits to the SGPR (f16: zero-extended)."""
    m = SFLOAT_RE.match(inst.name)
    assert m is not None
    kind, half = m.group(1), m.group(2) == "16"
    write = swriter(inst.operands[0])
    srcs = [_sfloat_reader(op, half) for op in inst.operands[1:]]
    if kind == "fmac":  # d = a * b + d
        srcs.append(_sfloat_reader(inst.operands[0], half))
    dtype = np.float16 if half else np.float32
    if kind in ("fmac", "fmaak", "fmamk"):
        order = (0, 2, 1) if kind == "fmamk" else (0, 1, 2)  # fmamk: a * K + b (K in the middle)

        def fma(w: Wave) -> None:
            x = [srcs[i](w) for i in order]
            write(w, _fbits(dtype(as_f64(x[0]) * as_f64(x[1]) + as_f64(x[2])), half))
        return fma
    fn = SFLOAT[kind]

    def op(w: Wave) -> None:
        write(w, _fbits(dtype(fn(*[r(w) for r in srcs])), half))
    return op


def _scvt(inst: Inst, ctx: Context) -> Op:
    src_kind, dst_kind, fn = SCVT[inst.name]
    write, raw = swriter(inst.operands[0]), sread(inst.operands[1])
    if isinstance(inst.operands[1], float) and src_kind == "f16":
        raw = sread(float_bits(inst.operands[1], 16))

    def read(w: Wave) -> Any:
        x = raw(w)
        return {"i32": _sext(x, 32), "u32": x, "f32": np.uint32(x).view(np.float32),
                "f16": np.uint16(x & 0xFFFF).view(np.float16), "f16hi": np.uint16(x >> 16).view(np.float16)}[src_kind]

    def op(w: Wave) -> None:
        y = fn(read(w))
        write(w, y & M32 if dst_kind in ("i32", "u32") else _fbits(y, dst_kind == "f16"))
    return op


SFCMP: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda a, b: a < b, "eq": lambda a, b: a == b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "lg": lambda a, b: a < b or a > b, "ge": lambda a, b: a >= b, "o": lambda a, b: not (np.isnan(a) or np.isnan(b)),
    "u": lambda a, b: bool(np.isnan(a) or np.isnan(b)), "nge": lambda a, b: not a >= b,
    "nlg": lambda a, b: not (a < b or a > b),
    "ngt": lambda a, b: not a > b, "nle": lambda a, b: not a <= b, "neq": lambda a, b: not a == b,
    "nlt": lambda a, b: not a < b,
}


def _sfcmp(inst: Inst, ctx: Context) -> Op:
    m = re.match(r"^s_cmp_([a-z]+)_f(16|32)$", inst.name)
    if not m or m.group(1) not in SFCMP:
        return unsupported(inst, ctx)
    cond, half = SFCMP[m.group(1)], m.group(2) == "16"
    a, b = _sfloat_reader(inst.operands[0], half), _sfloat_reader(inst.operands[1], half)

    def op(w: Wave) -> None:
        w.scc = int(bool(cond(a(w), b(w))))
    return op

"""Casts and bitcasts of scalars, by register file (the four CAST rules of ``isel.SCALAR_ISEL``).

In:  the emitter, a source register and the two dtypes. Out: the converted value's register. Semantics are
     ``tgcore.runtime.python``'s: float->int truncates and wraps modulo 2**bits (NaN/inf give 0), narrow floats
     round to nearest even (float64 through float32 rounded to odd, so it rounds once).
"""
from __future__ import annotations

from typing import Any

from tg_x86.emitter import Emitter
from tg_x86.flags import flags_to_bool
from tg_x86.isa import Cond, Op
from tg_x86.lanes import F16_ROUND, FLOOR_IMM, NARROW_FLOATS, SelectionError, gbits, is_vec
from tg_x86.machine import RAX, RCX, RDX, VMem
from tg_x86.operands import Label
from tg_x86.values import mem, reg
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import DType, dtypes
from tgcore.uop import UOp


# ---- casts (by register file: the four CAST rules of SCALAR_ISEL) ----
def int_to_int(ctx: Emitter, x: VReg, sdt: DType, dst: DType) -> VReg:
    d = ctx.new("gpr")
    if dst is dtypes.bool:
        bits = gbits(sdt)
        ctx.emit(Op.CMP, [], [x], (("u", 0, bits), ("i", 0)))
        ctx.setcc(d, Cond.NE)
        ctx.emit(Op.MOVZX, [d], [d], (("d", 0, 32), ("u", 0, 8)))
    elif dst.itemsize == 8:
        if dtypes.is_unsigned(sdt) or sdt is dtypes.bool or sdt.itemsize == 8:
            ctx.emit(Op.MOV, [d], [x], (("d", 0, gbits(sdt)), ("u", 0, gbits(sdt))))
        else:
            ctx.emit(Op.MOVSXD, [d], [x], (("d", 0, 64), ("u", 0, 32)))
    elif dst.itemsize == 4:
        ctx.emit(Op.MOV, [d], [x], (("d", 0, 32), ("u", 0, 32)))
    else:
        op = Op.MOVZX if dtypes.is_unsigned(dst) else Op.MOVSX
        ctx.emit(op, [d], [x], (("d", 0, 32), ("u", 0, dst.itemsize * 8)))
    return d


def cvt_int(ctx: Emitter, d: VReg, x: Any, bits: int, to64: bool) -> None:
    op = Op.VCVTSI2SD if to64 else Op.VCVTSI2SS
    ctx.emit(op, [d], [x], (("d", 0, 128), ("d", 0, 128), ("u", 0, bits)))


def int_to_float(ctx: Emitter, x: VReg, sdt: DType, dst: DType) -> VReg:
    wide = dst is dtypes.float64 or (dst is dtypes.bfloat16 and sdt.itemsize >= 4)
    d = ctx.new("vec")
    if sdt is dtypes.uint64:
        done = Label("u64")
        cvt_int(ctx, d, x, 64, wide)
        ctx.emit(Op.TEST, [], [x, x], (("u", 0, 64), ("u", 1, 64)))
        ctx.jump(done, Cond.NS)
        ctx.emit(Op.MOV, [RAX], [x], (("d", 0, 64), ("u", 0, 64)))
        ctx.alu2(Op.SHR, RAX, RAX, 1, 64)
        ctx.emit(Op.MOV, [RCX], [x], (("d", 0, 32), ("u", 0, 32)))
        ctx.alu2(Op.AND, RCX, RCX, 1, 32)
        ctx.alu2(Op.OR, RAX, RAX, RCX, 64)
        cvt_int(ctx, d, RAX, 64, wide)
        ctx.vop3(Op.VADDSD if wide else Op.VADDSS, d, d, d)
        ctx.label(done)
    else:
        bits = 64 if sdt.itemsize == 8 or sdt is dtypes.uint32 else 32
        cvt_int(ctx, d, x, bits, wide)
    if dst is dtypes.float16:
        return round_f16(ctx, d)
    if dst is dtypes.bfloat16:
        return round_bf16(ctx, f64_to_f32_odd(ctx, d) if wide else d)
    return d


def float_to_int(ctx: Emitter, x: VReg, sdt: DType, dst: DType) -> VReg:
    d = ctx.new("gpr")
    f64 = sdt is dtypes.float64
    if dst is dtypes.bool:
        z = ctx.new("vec")
        ctx.emit(Op.VXORPS, [z], [], (("d", 0, 128), ("d", 0, 128), ("d", 0, 128)))
        ctx.emit(Op.VUCOMISD if f64 else Op.VUCOMISS, [], [x, z], (("u", 0, 128), ("u", 1, 128)))
        return flags_to_bool(ctx, ("ne",))
    cvt = Op.VCVTTSD2SI if f64 else Op.VCVTTSS2SI
    ctx.emit(cvt, [d], [x], (("d", 0, 64), ("u", 0, 128)))
    if beyond_int64_matters(sdt, dst):
        wrap_beyond_int64(ctx, d, x, f64)
    if dst.itemsize == 4:
        ctx.emit(Op.MOV, [d], [d], (("d", 0, 32), ("u", 0, 32)))
    elif dst.itemsize < 4:
        ctx.canon(d, dst)
    return d


def beyond_int64_matters(sdt: DType, dst: DType) -> bool:
    """Whether values out of int64's range (where vcvtt* gives 0x8000000000000000) can have nonzero low bits in
    ``dst``: such values are multiples of 2**11 (float64) or 2**40 (float32 and narrower), so a narrower result
    is 0 anyway, as is the indefinite value's."""
    return dst.itemsize * 8 > (11 if sdt is dtypes.float64 else 40)


def wrap_beyond_int64(ctx: Emitter, d: VReg, x: VReg, f64: bool) -> None:
    """``d = trunc(x) mod 2**64`` (NaN, inf -> 0) where vcvtt* gave the indefinite value 0x8000000000000000:
    x is then an integer with |x| >= 2**63 (or NaN, inf), so z = x - 2**64 * floor(x / 2**64) - 2**63 is exact
    and in [-2**63, 2**63), and cvtt(z) with the top bit flipped is x mod 2**64 (NaN: the indefinite, flipped, is 0)."""
    done = Label("f2i")
    ctx.emit(Op.CMP, [], [d], (("u", 0, 64), ("i", 1)))   # overflows only for 0x8000000000000000
    ctx.jump(done, Cond.NO)
    fdt = dtypes.float64 if f64 else dtypes.float32
    mul, sub = (Op.VMULSD, Op.VSUBSD) if f64 else (Op.VMULSS, Op.VSUBSS)
    q, k, k64, y, z = (ctx.new("vec") for _ in range(5))
    ctx.vop3(mul, q, x, ctx.fconst(2.0 ** -64, fdt))
    ctx.vop3(Op.VROUNDSD if f64 else Op.VROUNDSS, k, q, q, (("i", FLOOR_IMM),))
    ctx.vop3(mul, k64, k, ctx.fconst(2.0 ** 64, fdt))
    ctx.vop3(sub, y, x, k64)
    ctx.vop3(sub, z, y, ctx.fconst(2.0 ** 63, fdt))
    ctx.emit(Op.VCVTTSD2SI if f64 else Op.VCVTTSS2SI, [d], [z], (("d", 0, 64), ("u", 0, 128)))
    ctx.mov_imm(RAX, 1 << 63, 64)
    ctx.alu2(Op.XOR, d, d, RAX, 64)
    ctx.label(done)


def float_to_float(ctx: Emitter, x: VReg, sdt: DType, dst: DType) -> VReg:
    if sdt is dst or (sdt in NARROW_FLOATS and dst is dtypes.float32):
        d = ctx.new("vec")
        ctx.copy(d, x)
        return d
    if dst is dtypes.float64:
        d = ctx.new("vec")
        ctx.vop3(Op.VCVTSS2SD, d, x, x)
        return d
    if sdt is dtypes.float64:
        f = f64_to_f32_odd(ctx, x) if dst in NARROW_FLOATS else None
        if f is None:
            d = ctx.new("vec")
            ctx.vop3(Op.VCVTSD2SS, d, x, x)
            return d
        x = f
    if dst is dtypes.float16:
        return round_f16(ctx, x)
    if dst is dtypes.bfloat16:
        return round_bf16(ctx, x)
    d = ctx.new("vec")
    ctx.copy(d, x)
    return d


def round_f16(ctx: Emitter, x: VReg) -> VReg:
    t, d = ctx.new("vec"), ctx.new("vec")
    ctx.emit(Op.VCVTPS2PH, [t], [x], (("d", 0, 128), ("u", 0, 128), ("i", F16_ROUND)))
    ctx.emit(Op.VCVTPH2PS, [d], [t], (("d", 0, 128), ("u", 0, 128)))
    return d


def round_bf16(ctx: Emitter, x: VReg) -> VReg:
    """float32 -> bfloat16 (as float32), round to nearest even; NaN stays a quiet NaN."""
    d = ctx.new("vec")
    g = (("d", 0, 32), ("u", 0, 32))
    ctx.emit(Op.VMOVD, [RAX], [x], (("d", 0, 32), ("u", 0, 128)))
    ctx.emit(Op.MOV, [RCX], [RAX], g)
    ctx.alu2(Op.SHR, RCX, RCX, 16, 32)
    ctx.alu2(Op.AND, RCX, RCX, 1, 32)
    ctx.alu2(Op.ADD, RCX, RCX, 0x7FFF, 32)
    ctx.alu2(Op.ADD, RCX, RCX, RAX, 32)
    ctx.alu2(Op.AND, RCX, RCX, 0xFFFF0000, 32)
    ctx.emit(Op.MOV, [RDX], [RAX], g)
    ctx.alu2(Op.OR, RDX, RDX, 0x400000, 32)
    ctx.alu2(Op.AND, RDX, RDX, 0xFFFF0000, 32)
    ctx.alu2(Op.AND, RAX, RAX, 0x7FFFFFFF, 32)
    ctx.emit(Op.CMP, [], [RAX], (("u", 0, 32), ("i", 0x7F800000)))
    ctx.emit(Op.CMOVCC, [RCX], [RCX, RDX], (("d", 0, 32), ("u", 1, 32)), two=True, cond=Cond.A)
    ctx.emit(Op.VMOVD, [d], [RCX], (("d", 0, 128), ("u", 0, 32)))
    return d


def f64_to_f32_odd(ctx: Emitter, x: VReg) -> VReg:
    """float64 -> float32 rounded to odd: rounding that again to a narrower float rounds once."""
    f, t = ctx.new("vec"), ctx.new("vec")
    done = Label("odd")
    ctx.vop3(Op.VCVTSD2SS, f, x, x)
    ctx.vop3(Op.VCVTSS2SD, t, f, f)
    ctx.emit(Op.VUCOMISD, [], [t, x], (("u", 0, 128), ("u", 1, 128)))
    ctx.jump(done, Cond.E)           # exact (or NaN: unordered sets ZF)
    ctx.emit(Op.VMOVD, [RAX], [f], (("d", 0, 32), ("u", 0, 128)))
    ctx.emit(Op.MOV, [RCX], [RAX], (("d", 0, 32), ("u", 0, 32)))
    ctx.alu2(Op.AND, RCX, RCX, 0x7FFFFFFF, 32)
    ctx.emit(Op.CMP, [], [RCX], (("u", 0, 32), ("i", 0x7F800000)))
    ctx.jump(done, Cond.E)           # overflowed to inf: stays inf
    ctx.emit(Op.VMOVQ, [RCX], [t], (("d", 0, 64), ("u", 0, 128)))
    ctx.alu2(Op.SHL, RCX, RCX, 1, 64)
    ctx.emit(Op.VMOVQ, [RDX], [x], (("d", 0, 64), ("u", 0, 128)))
    ctx.alu2(Op.SHL, RDX, RDX, 1, 64)
    ctx.emit(Op.CMP, [], [RDX, RCX], (("u", 0, 64), ("u", 1, 64)))   # below: |x| < |f|
    ctx.emit(Op.LEA, [RCX], [VMem(None, RAX, disp=-1)], (("d", 0, 32), ("u", 0, None)))
    ctx.emit(Op.CMOVCC, [RAX], [RAX, RCX], (("d", 0, 32), ("u", 1, 32)), two=True, cond=Cond.B)
    ctx.alu2(Op.OR, RAX, RAX, 1, 32)
    ctx.emit(Op.VMOVD, [f], [RAX], (("d", 0, 128), ("u", 0, 32)))
    ctx.label(done)
    return f


# ---- bitcast ----
def bitcast(ctx: Emitter, src: UOp, dst: DType) -> VReg:
    if src in ctx.facts.assembled:   # bytes read as one integer: one load of that size
        return assembled_load(ctx, src, dst)
    sdt = src.dtype
    x = reg(ctx, src)
    if sdt.itemsize != dst.itemsize or sdt.count != 1 or dst.count != 1:
        raise SelectionError(f"x86: bitcast {sdt} -> {dst}")
    bits = dst.itemsize * 8
    if is_vec(sdt):   # float -> its bits in a gpr
        d = ctx.new("gpr")
        if sdt is dtypes.float16:
            t = ctx.new("vec")
            ctx.emit(Op.VCVTPS2PH, [t], [x], (("d", 0, 128), ("u", 0, 128), ("i", F16_ROUND)))
            ctx.emit(Op.VMOVD, [d], [t], (("d", 0, 32), ("u", 0, 128)))
        else:
            ctx.emit(Op.VMOVQ if bits == 64 else Op.VMOVD, [d], [x], (("d", 0, max(bits, 32)), ("u", 0, 128)))
            if sdt is dtypes.bfloat16:
                ctx.alu2(Op.SHR, d, d, 16, 32)
        if is_vec(dst):
            return bits_to_float(ctx, d, dst)
        ctx.canon(d, dst)
        return d
    if is_vec(dst):
        return bits_to_float(ctx, x, dst)
    d = ctx.new("gpr")
    ctx.copy(d, x)
    ctx.canon(d, dst)
    return d


def assembled_load(ctx: Emitter, load: UOp, dst: DType) -> VReg:
    """The 2, 4 or 8 bytes of uint8 vector ``load`` as one little-endian unsigned integer ``dst`` (zero-extended)."""
    d = ctx.new("gpr")
    bits = dst.itemsize * 8
    m = mem(ctx, load.src[0], bits)
    if bits == 16:
        ctx.emit(Op.MOVZX, [d], [m], (("d", 0, 32), ("u", 0, None)))
    else:
        ctx.emit(Op.MOV, [d], [m], (("d", 0, bits), ("u", 0, None)))
    return d


def bits_to_float(ctx: Emitter, x: VReg, dst: DType) -> VReg:
    d = ctx.new("vec")
    if dst is dtypes.float64:
        ctx.emit(Op.VMOVQ, [d], [x], (("d", 0, 128), ("u", 0, 64)))
    elif dst is dtypes.float32:
        ctx.emit(Op.VMOVD, [d], [x], (("d", 0, 128), ("u", 0, 32)))
    elif dst is dtypes.float16:  # vcvtph2ps reads lane 0 from bits 0-15 only: the gpr's upper bits do not matter
        ctx.emit(Op.VMOVD, [d], [x], (("d", 0, 128), ("u", 0, 32)))
        ctx.emit(Op.VCVTPH2PS, [d], [d], (("d", 0, 128), ("u", 0, 128)))
    else:
        t = ctx.new("gpr")
        ctx.emit(Op.MOVZX, [t], [x], (("d", 0, 32), ("u", 0, 16)))
        ctx.alu2(Op.SHL, t, t, 16, 32)
        ctx.emit(Op.VMOVD, [d], [t], (("d", 0, 128), ("u", 0, 32)))
    return d

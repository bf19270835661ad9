"""Integer division and remainder by a constant as multiply and shift (no ``div``/``idiv``: those take 20-90 cycles).

In:  the emitter and an IDIV/MOD UOp whose divisor is a CONST. Out: its instructions and the value's register.
     Semantics as everywhere in tgcore: the quotient truncates toward zero, the remainder has the dividend's sign,
     x/0 = x%0 = 0, INT_MIN/-1 wraps.

The magic numbers (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994):
for an N-bit unsigned n and a divisor d that is not a power of two, ``floor(n / d) = floor(n * M / 2**s)`` with
``M = ceil(2**s / d)`` as soon as ``n * (M*d - 2**s) < 2**s`` for every n: ``unsigned_magic`` and ``signed_magic``
pick the smallest such s. A signed quotient is computed on |d| with ``floor``, which is one below the truncated
quotient for a negative n (the product is never an integer there), so the sign bit of n is added back.
Powers of two are shifts (signed: the dividend biased by ``2**k - 1`` when negative, so the shift truncates).
Narrow types (int8, uint16, ...) are held extended to 32 bits: they divide as 32-bit values, then wrap.
"""
from __future__ import annotations

from tg_x86.emitter import Emitter
from tg_x86.isa import Op
from tg_x86.lanes import canon_const, gbits
from tg_x86.machine import RAX, RDX
from tg_x86.values import reg
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp


def unsigned_magic(d: int, bits: int) -> tuple[int, int]:
    """(M, s) with ``n // d == (n * M) >> s`` for every ``0 <= n < 2**bits``, the smallest s; d >= 2 is not a
    power of two. M < 2**(bits+1) (it can need one bit more than n)."""
    for s in range(bits, 2 * bits + 1):
        m = -(-(1 << s) // d)
        if (m * d - (1 << s)) << bits <= 1 << s:
            return m, s
    raise AssertionError("unreachable: s = bits + ceil(log2 d) always works")


def signed_magic(ad: int, bits: int) -> tuple[int, int]:
    """(M, s) with ``floor(n * M / 2**s) == floor(n / ad)`` for ``|n| <= 2**(bits-1)``, not an integer for n < 0
    (``ad`` >= 3 not a power of two); M < 2**bits."""
    for s in range(bits - 1, 2 * bits):
        m = -(-(1 << s) // ad)
        if (m * ad - (1 << s)) << (bits - 1) < 1 << s:
            return m, s
    raise AssertionError("unreachable: s = bits - 1 + ceil(log2 ad) always works")


def const_divisor(u: UOp) -> int | None:
    """The divisor of IDIV/MOD ``u`` when it is a constant of an integer dtype (as its math value), else None."""
    b = u.src[1]
    if b.op is not Ops.CONST or u.dtype is dtypes.bool or b.dtype.count != 1:
        return None
    return canon_const(b)


def unsigned_division(u: UOp, d: int) -> bool:
    """Can IDIV/MOD ``u`` by ``d`` divide as unsigned? Unsigned types, and signed ones when the divisor is
    positive and the dividend never negative (a loop index, an offset): the same results, fewer instructions."""
    return dtypes.is_unsigned(u.dtype.scalar()) or (d > 0 and u.src[0].vmin >= 0)


def divide_by_const(ctx: Emitter, u: UOp, d: int) -> VReg:
    dt = u.dtype
    bits = gbits(dt)
    a = reg(ctx, u.src[0])
    out = ctx.new("gpr")
    unsigned = unsigned_division(u, d)
    ad = abs(d)
    if d == 0:
        ctx.mov_imm(out, 0, 32)
        return out
    if ad & (ad - 1) == 0:
        k = ad.bit_length() - 1
        if unsigned:
            _unsigned_pow2(ctx, u.op, out, a, k, bits)
        else:
            _signed_pow2(ctx, u.op, out, a, k, d < 0, bits)
    else:
        q = _unsigned_quotient(ctx, a, d, bits) if unsigned else _signed_quotient(ctx, a, ad, d < 0, bits)
        if u.op is Ops.IDIV:
            ctx.copy(out, q)
        else:  # r = a - q*d
            t = ctx.new("gpr")
            _mul_imm(ctx, t, q, d, bits)
            ctx.alu2(Op.SUB, out, a, t, bits)
    ctx.canon(out, dt)
    return out


def _imm_or_reg(ctx: Emitter, value: int, bits: int) -> int | VReg:
    """``value`` as an operand of a ``bits``-wide ALU op: an immediate when it sign-extends from 32 bits."""
    value &= (1 << bits) - 1
    signed = value - (1 << bits) if value >= 1 << (bits - 1) else value
    if -(1 << 31) <= signed < 1 << 31:
        return signed
    r = ctx.new("gpr")
    ctx.mov_imm(r, value, bits)
    return r


def _mul_imm(ctx: Emitter, d: VReg, a: VReg, value: int, bits: int) -> None:
    m = _imm_or_reg(ctx, value, bits)
    if isinstance(m, int):
        ctx.emit(Op.IMUL3, [d], [a], (("d", 0, bits), ("u", 0, bits), ("i", m)))
    else:
        ctx.alu2(Op.IMUL, d, a, m, bits)


def _shift_or_copy(ctx: Emitter, op: Op, d: VReg, a: VReg, k: int, bits: int) -> None:
    if k:
        ctx.alu2(op, d, a, k, bits)
    else:
        ctx.copy(d, a)


def _unsigned_pow2(ctx: Emitter, op: Ops, out: VReg, a: VReg, k: int, bits: int) -> None:
    if op is Ops.IDIV:
        _shift_or_copy(ctx, Op.SHR, out, a, k, bits)
    else:
        ctx.alu2(Op.AND, out, a, _imm_or_reg(ctx, (1 << k) - 1, bits), bits)


def _signed_pow2(ctx: Emitter, op: Ops, out: VReg, a: VReg, k: int, negative: bool, bits: int) -> None:
    """Divisor ±2**k: a negative dividend is biased by 2**k - 1 so the arithmetic shift truncates toward zero."""
    if k == 0:  # ±1: the quotient is a or -a (wraps), the remainder 0
        if op is Ops.MOD:
            ctx.mov_imm(out, 0, 32)
        elif negative:
            ctx.emit(Op.NEG, [out], [a], (("d", 0, bits),), two=True)
        else:
            ctx.copy(out, a)
        return
    sign, biased = ctx.new("gpr"), ctx.new("gpr")
    ctx.alu2(Op.SAR, sign, a, bits - 1, bits)
    bias = ctx.new("gpr")
    ctx.alu2(Op.SHR, bias, sign, bits - k, bits)
    ctx.alu2(Op.ADD, biased, bias, a, bits)
    if op is Ops.IDIV:
        if negative:
            q = ctx.new("gpr")
            ctx.alu2(Op.SAR, q, biased, k, bits)
            ctx.emit(Op.NEG, [out], [q], (("d", 0, bits),), two=True)
        else:
            ctx.alu2(Op.SAR, out, biased, k, bits)
    else:  # r = a - (biased with its low k bits cleared)
        t = ctx.new("gpr")
        ctx.alu2(Op.AND, t, biased, _imm_or_reg(ctx, -(1 << k), bits), bits)
        ctx.alu2(Op.SUB, out, a, t, bits)


def _unsigned_quotient(ctx: Emitter, a: VReg, d: int, bits: int) -> VReg:
    m, s = unsigned_magic(d, bits)
    q = ctx.new("gpr")
    if bits == 32:  # in 64-bit registers: n*M fits when M < 2**32; else n*(M - 2**32) >> 32, plus n
        z, t = ctx.new("gpr"), ctx.new("gpr")
        ctx.emit(Op.MOV, [z], [a], (("d", 0, 32), ("u", 0, 32)))  # zero-extends to 64 bits
        if m < 1 << 32:
            _mul_imm(ctx, t, z, m, 64)
            ctx.alu2(Op.SHR, q, t, s, 64)
        else:
            hi, summed = ctx.new("gpr"), ctx.new("gpr")
            _mul_imm(ctx, t, z, m - (1 << 32), 64)
            ctx.alu2(Op.SHR, hi, t, 32, 64)
            ctx.alu2(Op.ADD, summed, hi, z, 64)
            ctx.alu2(Op.SHR, q, summed, s - 32, 64)
        return q
    # 64 bits: the high half of the 128-bit product (mul: rdx:rax = rax * r/m64)
    hi = _mulhi(ctx, Op.MUL, a, m & ((1 << 64) - 1))
    if m < 1 << 64:
        _shift_or_copy(ctx, Op.SHR, q, hi, s - 64, 64)
        return q
    # M has 65 bits: n*M >> 64 = hi + n may overflow, so ((n - hi) >> 1) + hi, then the rest of the shift
    diff, half, summed = ctx.new("gpr"), ctx.new("gpr"), ctx.new("gpr")
    ctx.alu2(Op.SUB, diff, a, hi, 64)
    ctx.alu2(Op.SHR, half, diff, 1, 64)
    ctx.alu2(Op.ADD, summed, half, hi, 64)
    _shift_or_copy(ctx, Op.SHR, q, summed, s - 65, 64)
    return q


def _signed_quotient(ctx: Emitter, a: VReg, ad: int, negative: bool, bits: int) -> VReg:
    m, s = signed_magic(ad, bits)
    floor = ctx.new("gpr")
    if bits == 32:  # |n| * M < 2**63: the exact product in a 64-bit register
        n, t = ctx.new("gpr"), ctx.new("gpr")
        ctx.emit(Op.MOVSXD, [n], [a], (("d", 0, 64), ("u", 0, 32)))
        _mul_imm(ctx, t, n, m, 64)
        ctx.alu2(Op.SAR, floor, t, s, 64)
    else:  # the high half of the signed 128-bit product; M >= 2**63 reads as M - 2**64, so n is added back
        hi = _mulhi(ctx, Op.IMUL1, a, m - (1 << 64) if m >= 1 << 63 else m)
        if m >= 1 << 63:
            t = ctx.new("gpr")
            ctx.alu2(Op.ADD, t, hi, a, 64)
            hi = t
        _shift_or_copy(ctx, Op.SAR, floor, hi, s - 64, 64)
    sign, q = ctx.new("gpr"), ctx.new("gpr")
    ctx.alu2(Op.SHR, sign, a, bits - 1, bits)  # 1 for a negative dividend: floor -> truncation
    ctx.alu2(Op.ADD, q, floor, sign, bits)
    if negative:
        nq = ctx.new("gpr")
        ctx.emit(Op.NEG, [nq], [q], (("d", 0, bits),), two=True)
        return nq
    return q


def _mulhi(ctx: Emitter, op: Op, a: VReg, m: int) -> VReg:
    """The high 64 bits of ``a * m`` (``mul``/one-operand ``imul``: rdx:rax = rax * r/m64)."""
    ctx.mov_imm(RAX, m, 64)
    ctx.emit(op, [RAX, RDX], [RAX, a], (("u", 1, 64),))
    hi = ctx.new("gpr")
    ctx.emit(Op.MOV, [hi], [RDX], (("d", 0, 64), ("u", 0, 64)))
    return hi

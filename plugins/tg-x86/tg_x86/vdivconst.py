"""int32 vector division and remainder by a constant (the same in every lane) as multiply and shift.

In:  the emitter, an IDIV/MOD of an int32/uint32 vector and the divisor. Out: its pieces (``per_piece``).
     The magic numbers and the semantics are ``divconst``'s. AVX2 has no 32-bit multiply-high: ``vpmuldq`` /
     ``vpmuludq`` multiply the even lanes into 64-bit products, the odd lanes are shifted down and multiplied the
     same way, and ``vpblendd`` takes the high halves of both.
"""
from __future__ import annotations

from tg_x86.divconst import signed_magic, unsigned_division, unsigned_magic
from tg_x86.emitter import Emitter
from tg_x86.isa import Op
from tg_x86.vpieces import per_piece, vpiece
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

ODD_LANES = 0xAA  # vpblendd: dwords 1, 3, 5, 7 from the second source


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def vdivide_by_const(ctx: Emitter, u: UOp, d: int) -> None:
    a = u.src[0]
    unsigned = unsigned_division(u, d)

    def piece(out: VReg, p: int, bits: int) -> None:
        x = vpiece(ctx, a, p)
        em = _VEmit(ctx, bits)
        if d == 0:
            ctx.copy(out, ctx.zero(bits))
        elif abs(d) & (abs(d) - 1) == 0:
            k = abs(d).bit_length() - 1
            ctx.copy(out, _unsigned_pow2(em, u.op, x, k) if unsigned else _signed_pow2(em, u.op, x, k, d < 0))
        else:
            q = _unsigned_quotient(em, x, d) if unsigned else _signed_quotient(em, x, abs(d), d < 0)
            ctx.copy(out, q if u.op is Ops.IDIV else em.op(Op.VPSUBD, x, em.op(Op.VPMULLD, q, em.splat(d))))
    per_piece(ctx, u, piece)


class _VEmit:
    """Three-operand int32 vector ops on new registers of one piece width."""

    def __init__(self, ctx: Emitter, bits: int) -> None:
        self.ctx, self.bits = ctx, bits

    def op(self, op: Op, *uses: object, imm: int | None = None) -> VReg:
        d = self.ctx.vnew()
        self.ctx.vemit(op, d, list(uses), self.bits, () if imm is None else (("i", imm),))
        return d

    def shift(self, op: Op, x: VReg, k: int) -> VReg:
        if k == 0:
            return x
        d = self.ctx.vnew()
        self.ctx.emit(op, [d], [x], (("d", 0, self.bits), ("u", 0, self.bits), ("i", k)))
        return d

    def splat(self, value: int) -> object:
        return self.ctx.splat(_int32(value), dtypes.int32, self.bits)

    def neg(self, x: VReg) -> VReg:
        return self.op(Op.VPSUBD, self.ctx.zero(self.bits), x)

    def mulhi(self, x: VReg, m: int, signed: bool) -> VReg:
        """The high 32 bits of each lane's product with ``m`` (a 32-bit pattern, read signed or not)."""
        mul = Op.VPMULDQ if signed else Op.VPMULUDQ
        ms = self.splat(m)
        even = self.shift(Op.VPSRLQ, self.op(mul, x, ms), 32)
        odd = self.op(mul, self.shift(Op.VPSRLQ, x, 32), ms)
        return self.op(Op.VPBLENDD, even, odd, imm=ODD_LANES)


def _unsigned_pow2(em: _VEmit, op: Ops, x: VReg, k: int) -> VReg:
    return em.shift(Op.VPSRLD, x, k) if op is Ops.IDIV else em.op(Op.VPAND, x, em.splat((1 << k) - 1))


def _signed_pow2(em: _VEmit, op: Ops, x: VReg, k: int, negative: bool) -> VReg:
    """Divisor ±2**k: a negative dividend biased by 2**k - 1 so the arithmetic shift truncates toward zero."""
    if k == 0:
        if op is Ops.MOD:
            return em.ctx.zero(em.bits)
        return em.neg(x) if negative else x
    bias = em.shift(Op.VPSRLD, em.shift(Op.VPSRAD, x, 31), 32 - k)
    biased = em.op(Op.VPADDD, x, bias)
    if op is Ops.MOD:
        return em.op(Op.VPSUBD, x, em.op(Op.VPAND, biased, em.splat(-(1 << k))))
    q = em.shift(Op.VPSRAD, biased, k)
    return em.neg(q) if negative else q


def _unsigned_quotient(em: _VEmit, x: VReg, d: int) -> VReg:
    m, s = unsigned_magic(d, 32)
    if m < 1 << 32:
        return em.shift(Op.VPSRLD, em.mulhi(x, m, signed=False), s - 32)
    # M has 33 bits: x*M >> 32 = hi + x may overflow, so ((x - hi) >> 1) + hi, then the rest of the shift
    hi = em.mulhi(x, m - (1 << 32), signed=False)
    half = em.shift(Op.VPSRLD, em.op(Op.VPSUBD, x, hi), 1)
    return em.shift(Op.VPSRLD, em.op(Op.VPADDD, half, hi), s - 33)


def _signed_quotient(em: _VEmit, x: VReg, ad: int, negative: bool) -> VReg:
    m, s = signed_magic(ad, 32)
    hi = em.mulhi(x, m, signed=True)
    if m >= 1 << 31:  # M read as M - 2**32: add x back
        hi = em.op(Op.VPADDD, hi, x)
    q = em.op(Op.VPADDD, em.shift(Op.VPSRAD, hi, s - 32), em.shift(Op.VPSRLD, x, 31))
    return em.neg(q) if negative else q

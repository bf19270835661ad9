"""C renderer: the high bytes of wrapped byte products in 256-bit vectors (TQ1_0's trits).

In:  a kernel in REDUCE form after the optimizations (the C renderer's legalizer): 32 bytes ``b`` and 32 bytes
     ``p`` widened to 16-bit lanes, ``(u16(b) * (u16(p) << 8))`` (the byte product ``b * p`` wrapped to 8 bits, in
     the high byte), its high half times a constant ``m`` (``tg_mulhi_u16x32``, ``cbytedot.high_product``) and
     narrowed back to bytes: per byte ``(((b * p) & 255) * m) >> 8``.
Out: ``tg_wrapped_high_u8x32(b, p, m)``: the same bytes computed in the 16-bit words of 256-bit vectors, the even
     bytes (a word's low byte) and the odd ones (its high byte) each by one ``vpmullw`` and one ``vpmulhuw``, put
     together by a shift and an or. The 32 lanes of 16 bits were 512-bit vectors (a widening, a ``vpmullw``, a
     ``vpmulhuw`` and a narrowing ``vpermt2b`` per 32 bytes), and a 512-bit instruction in flight takes the vector
     units of port 1 off every instruction (TQ1_0 4096^2 GEMV kernel, one thread: the kernel's vector multiplies,
     byte dots and conversions queued on port 0 alone). Exact: the same integers either way.
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.renderer.cbytedot import HALF_WORDS, MULHI_HELPER, WIDE, _constant_lanes, high_product
from tgcore.uop import Ops, UOp

WRAPPED_HIGH_HELPER = "tg_wrapped_high_u8x32"
BYTES = dtypes.uint8.vec(WIDE)
WRAPPED_HIGH_TYPES = (BYTES, HALF_WORDS)
WRAPPED_HIGH_PREAMBLE = """\
static inline tg_uint8x32 tg_wrapped_high_u8x32(tg_uint8x32 b, tg_uint8x32 p, unsigned short m) {
#if defined(__AVX2__)
  typedef unsigned short tg_h __attribute__((vector_size(32)));
  typedef short tg_s __attribute__((vector_size(32)));
  tg_h w = (tg_h)b, q = (tg_h)p, by = (tg_h){0} + m;
  tg_h even = (tg_h)__builtin_ia32_pmulhuw256((tg_s)(w * (q << 8)), (tg_s)by);        /* low bytes */
  tg_h odd = (tg_h)__builtin_ia32_pmulhuw256((tg_s)((w >> 8) * (q & 0xFF00)), (tg_s)by);  /* high bytes */
  return (tg_uint8x32)(even | (odd << 8));
#else
  tg_uint16x32 t = (__builtin_convertvector(b, tg_uint16x32) * __builtin_convertvector(p, tg_uint16x32)) & 255;
  return __builtin_convertvector((t * m) >> 8, tg_uint8x32);
#endif
}
"""


def _int_lanes(u: UOp) -> list[int] | None:
    """The lanes of an integer constant (``cbytedot._constant_lanes``); None for anything else."""
    lanes = _constant_lanes(u)
    ints = [v for v in lanes or () if isinstance(v, int)]
    return ints if lanes is not None and len(ints) == len(lanes) else None


def _bytes_under_widening(u: UOp) -> UOp | None:
    """``b`` for ``u16(b)`` of 32 bytes."""
    return u.src[0] if u.op is Ops.CAST and u.dtype == HALF_WORDS and u.src[0].dtype == BYTES else None


def _bytes_times_256(u: UOp) -> UOp | None:
    """``p`` for ``u16(p) << 8`` or ``u16(p) * 256`` of 32 bytes, or for constants that are multiples of 256."""
    if u.op in (Ops.SHL, Ops.MUL) and (p := _bytes_under_widening(u.src[0])) is not None:
        if _int_lanes(u.src[1]) == [8 if u.op is Ops.SHL else 256] * WIDE:
            return p
    lanes = _int_lanes(u)
    if lanes is not None and all(0 <= v < 1 << 16 and v % 256 == 0 for v in lanes):
        return UOp(Ops.VCONST, BYTES, (), tuple(v >> 8 for v in lanes)) if len(set(lanes)) > 1 else \
            UOp.const(BYTES, lanes[0] >> 8)
    return None


def wrapped_high_bytes(x: UOp) -> UOp | None:
    """``u8(tg_mulhi_u16x32(u16(b) * (u16(p) << 8), m))`` on 32 lanes, ``m`` one constant below 256 (see the module
    docstring) -> ``tg_wrapped_high_u8x32(b, p, m)``; else None."""
    if x.op is not Ops.CAST or x.dtype != BYTES or x.src[0].dtype != HALF_WORDS:
        return None
    high = x.src[0] if x.src[0].op is Ops.CUSTOMI else high_product(x.src[0])
    if high is None or high.op is not Ops.CUSTOMI or high.arg != MULHI_HELPER:
        return None
    product, by = high.src
    factor = _int_lanes(by)
    if product.op is not Ops.MUL or factor is None or len(set(factor)) != 1 or not 0 < factor[0] < 256:
        return None
    for wide, other in (product.src, product.src[::-1]):
        b, p = _bytes_under_widening(wide), _bytes_times_256(other)
        if b is not None and p is not None:
            return UOp(Ops.CUSTOMI, BYTES, (b, p, UOp.const(dtypes.uint16, factor[0])), WRAPPED_HIGH_HELPER)
    return None


def uses_wrapped_high(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg == WRAPPED_HIGH_HELPER for u in kernel)

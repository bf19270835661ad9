"""C renderer: 32 signed bytes negated where the bits of a 32-bit word are set (IQ2_S / IQ3_S's sign bits).

In:  a kernel in REDUCE form after the optimizations (the C renderer's legalizer): ``(x ^ m) - m`` over 32 bytes (or
     ``(x ^ m) + t`` with ``m = -t``, as the codegen folds it), ``m`` lane ``p`` 0 or -1 as bit ``p`` of a word
     ``w`` (its bytes broadcast and taken apart by byte ops: tg-gguf's ``(byte & b) + (128 - b)``, its top bit;
     checked lane by lane on all 256 values of the lane's byte, ``cbytevectors``' way).
Out: ``tg_negate_bits(x, w)``: with AVX512BW one subtraction from zero under the mask ``w`` (the word moved to a
     mask register), where the bits were spread over the bytes, tested, and the activations xor-ed and subtracted
     (before that, a gather of 4 rows of 8 mask bytes from a table); else the same masks in vector C. Exact: the same
     bytes (``-(-128)`` wraps to -128 either way).
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.renderer.cbytevectors import SPREAD_WORD_BITS, word_bits
from tgcore.uop import Ops, UOp

NEGATE_BITS_HELPER = "tg_negate_bits"
SIGNED, UNSIGNED = dtypes.int8.vec(32), dtypes.uint8.vec(32)
NEGATE_BITS_TYPES = (SIGNED, UNSIGNED)
NEGATE_BITS_PREAMBLE = """\
static inline tg_int8x32 tg_negate_bits(tg_int8x32 x, unsigned int bits) {
  typedef char tg_c __attribute__((vector_size(32)));
#if defined(__AVX512BW__) && defined(__AVX512VL__) && !defined(__clang__)
  return (tg_int8x32)__builtin_ia32_psubb256_mask((tg_c){0}, (tg_c)x, (tg_c)x, bits);
#else
""" + SPREAD_WORD_BITS + """\
  tg_c m = (tg_c)((spread & masks) != (tg_uint8x32){0});
  return (tg_int8x32)(((tg_c)x ^ m) - m);
#endif
}
"""


def negate_bits(x: UOp) -> UOp | None:
    """``(a ^ m) - m`` or ``(a ^ m) + t`` over 32 signed bytes, ``m`` -1 and ``t`` 1 where the bits of one word are
    set (see the module docstring) -> ``tg_negate_bits(a, w)``; else None."""
    if x.op not in (Ops.ADD, Ops.SUB) or x.dtype != SIGNED:
        return None
    for flipped, other in ((x.src[0], x.src[1]), (x.src[1], x.src[0])) if x.op is Ops.ADD else ((x.src[0], x.src[1]),):
        if flipped.op is not Ops.XOR:
            continue
        for a, m in (flipped.src, flipped.src[::-1]):
            if x.op is Ops.SUB and other is not m:
                continue
            word = word_bits(m, -1, UNSIGNED, SIGNED)
            if word is not None and (x.op is Ops.SUB or word_bits(other, 1, UNSIGNED, SIGNED) == word):
                return UOp(Ops.CUSTOMI, SIGNED, (a, word), NEGATE_BITS_HELPER)
    return None


def uses_negate_bits(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg == NEGATE_BITS_HELPER for u in kernel)

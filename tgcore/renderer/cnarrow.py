"""C renderer: vector conversions to narrower lanes that gcc 12 makes lane by lane, as one instruction where the target
has it.

In:  a vector CAST of 8 float32 lanes to float16, or of 8 int32 lanes to int8 (``NARROWING``): what a store
     ``Renderer.narrowing_stores`` lets codegen vectorize writes (a KV cache's float16 keys and values, the
     activations' 8-bit rounding).
Out: a call of a helper in ``NARROWING_PREAMBLE``: one ``vcvtps2ph`` with F16C (rounding as the scalar conversion does:
     the MXCSR's mode, to nearest even), one ``vpmovdb`` with AVX-512VL (the low byte of each lane: C's wrapping
     conversion); elsewhere ``__builtin_convertvector`` (the same values, lane by lane).
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

NARROWING = {(dtypes.float32.vec(8), dtypes.float16.vec(8)): "tg_narrow_f32x8_f16",
             (dtypes.int32.vec(8), dtypes.int8.vec(8)): "tg_narrow_i32x8_i8"}
NARROWING_TYPES = {t for pair in NARROWING for t in pair}
NARROWING_PREAMBLE = """\
static inline tg_float16x8 tg_narrow_f32x8_f16(tg_float32x8 v) {
#if defined(__F16C__)
  return (tg_float16x8)__builtin_ia32_vcvtps2ph256(v, 4);  /* (4: the current rounding mode, as a scalar cast) */
#else
  return __builtin_convertvector(v, tg_float16x8);
#endif
}
static inline tg_int8x8 tg_narrow_i32x8_i8(tg_int32x8 v) {
#if defined(__AVX512VL__) && defined(__AVX512F__)
  typedef char tg_low16 __attribute__((vector_size(16)));
  tg_low16 b = (tg_low16)__builtin_ia32_pmovdb256_mask(v, (tg_low16){0}, (unsigned char)-1);
  tg_int8x8 r; __builtin_memcpy(&r, &b, 8); return r;
#else
  return __builtin_convertvector(v, tg_int8x8);
#endif
}
"""


def uses_narrowing(kernel: list[UOp]) -> bool:
    """Whether ``kernel`` has a CAST the helpers render."""
    return any(u.op is Ops.CAST and (u.src[0].dtype, u.dtype) in NARROWING for u in kernel)

"""C renderer: a vector conversion to narrower lanes that gcc 12 makes lane by lane, as one instruction where the target
has it.

In:  a vector CAST of 8 float32 lanes to float16 (``NARROWING``): what a store ``Renderer.narrowing_stores`` lets
     codegen vectorize writes (a KV cache's float16 keys and values).
Out: a call of the helper in ``NARROWING_PREAMBLE``: one ``vcvtps2ph`` with F16C (rounding as the scalar conversion
     does: the MXCSR's mode, to nearest even); elsewhere ``__builtin_convertvector`` (the same values, lane by lane).
(int32 lanes stored as int8, the activations' 8-bit rounding, stay a scalar loop on C: gcc vectorizes it by itself,
in 512-bit vectors where the target has them; 8-lane stores with vpmovdb measured no faster.)
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

NARROWING = {(dtypes.float32.vec(8), dtypes.float16.vec(8)): "tg_narrow_f32x8_f16"}
NARROWING_TYPES = {t for pair in NARROWING for t in pair}
NARROWING_PREAMBLE = """\
static inline tg_float16x8 tg_narrow_f32x8_f16(tg_float32x8 v) {
#if defined(__F16C__)
  return (tg_float16x8)__builtin_ia32_vcvtps2ph256(v, 4);  /* (4: the current rounding mode, as a scalar cast) */
#else
  return __builtin_convertvector(v, tg_float16x8);
#endif
}
"""


def uses_narrowing(kernel: list[UOp]) -> bool:
    """Whether ``kernel`` has a CAST the helper renders."""
    return any(u.op is Ops.CAST and (u.src[0].dtype, u.dtype) in NARROWING for u in kernel)

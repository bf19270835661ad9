"""C renderer: an int32 vector's lanes reduced to one scalar (a vectorized reduction's last step) in log2 steps.

In:  a kernel after the optimizations: an int32 ``MAX`` or ``ADD`` tree whose leaves are every lane of one 8-lane
     vector once (``GEP`` 0..7: what codegen makes of a vector accumulator's horizontal sum or maximum).
Out: ``tg_hmax_i32x8(v)`` / ``tg_hadd_i32x8(v)`` (a ``CUSTOMI``): the halves combined, then the quarters, then the
     pairs (AVX2: an extract, two in-lane shuffles and three ``vpmaxsd`` / ``vpaddd``), where gcc extracted each
     lane and combined them with scalar compares and moves (tg-gguf's activation scales: a block's largest |x|, 7
     extracts and 7 compare-and-moves per block of 32). Integers only: max and wrapping addition are associative and
     commutative, so any order gives the same value (a float sum would round differently).
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

LANES = 8
HORIZONTAL_HELPERS = {Ops.MAX: "tg_hmax_i32x8", Ops.ADD: "tg_hadd_i32x8"}
HORIZONTAL_PREAMBLE = """\
typedef int tg_int32x4h __attribute__((vector_size(16)));
static inline tg_int32x4h tg_max_i32x4h(tg_int32x4h a, tg_int32x4h b) {
#if defined(__SSE4_1__)
  return (tg_int32x4h)__builtin_ia32_pmaxsd128(a, b);
#else
  tg_int32x4h m = a > b; return (a & m) | (b & ~m);
#endif
}
static inline int tg_hmax_i32x8(tg_int32x8 v) {
  tg_int32x4h m = tg_max_i32x4h(__builtin_shufflevector(v, v, 0, 1, 2, 3), __builtin_shufflevector(v, v, 4, 5, 6, 7));
  m = tg_max_i32x4h(m, __builtin_shufflevector(m, m, 2, 3, 0, 1));
  m = tg_max_i32x4h(m, __builtin_shufflevector(m, m, 1, 0, 3, 2));
  return m[0];
}
static inline int tg_hadd_i32x8(tg_int32x8 v) {
  typedef unsigned int tg_u4 __attribute__((vector_size(16)));  /* (wrapping, as the scalar tree's int32 adds) */
  tg_u4 s = (tg_u4)__builtin_shufflevector(v, v, 0, 1, 2, 3) + (tg_u4)__builtin_shufflevector(v, v, 4, 5, 6, 7);
  s += __builtin_shufflevector(s, s, 2, 3, 0, 1);
  s += __builtin_shufflevector(s, s, 1, 0, 3, 2);
  return (int)s[0];
}
"""


def horizontal_reduction(x: UOp) -> UOp | None:
    """An int32 ``MAX`` / ``ADD`` tree over every lane of one 8-lane int32 vector, each once -> the helper's call."""
    if x.op not in HORIZONTAL_HELPERS or x.dtype != dtypes.int32:
        return None
    leaves: list[UOp] = []
    stack = [x]
    while stack:
        n = stack.pop()
        if n.op is x.op and n.dtype == x.dtype and len(leaves) + len(stack) <= LANES:
            stack.extend(n.src)
        else:
            leaves.append(n)
    if len(leaves) != LANES or any(u.op is not Ops.GEP or len(u.arg) != 1 for u in leaves):
        return None
    vector = leaves[0].src[0]
    if vector.dtype != dtypes.int32.vec(LANES) or any(u.src[0] is not vector for u in leaves) \
            or sorted(u.arg[0] for u in leaves) != list(range(LANES)):
        return None
    return UOp(Ops.CUSTOMI, x.dtype, (vector,), HORIZONTAL_HELPERS[x.op])


def uses_horizontal_reduction(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg in HORIZONTAL_HELPERS.values() for u in kernel)

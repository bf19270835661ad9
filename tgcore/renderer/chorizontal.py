"""C renderer: an int32 or float32 vector's lanes reduced to one scalar (a vectorized reduction's last step) in log2
steps.

In:  a kernel after the optimizations: an int32 ``MAX`` or ``ADD`` tree whose leaves are every lane of one 8-lane
     vector once (``GEP`` 0..7: what codegen makes of a vector accumulator's horizontal sum or maximum).
Out: ``tg_hmax_i32x8(v)`` / ``tg_hadd_i32x8(v)`` (a ``CUSTOMI``): the halves combined, then the quarters, then the
     pairs (AVX2: an extract, two in-lane shuffles and three ``vpmaxsd`` / ``vpaddd``), where gcc extracted each
     lane and combined them with scalar compares and moves (tg-gguf's activation scales: a block's largest |x|, 7
     extracts and 7 compare-and-moves per block of 32). Integers only: max and wrapping addition are associative and
     commutative, so any order gives the same value.
     A float32 ``ADD`` tree only in the pairwise order codegen builds, ((0+1)+(2+3))+((4+5)+(6+7)) (either operand
     first at any node): ``tg_hadd_f32x8(v)`` adds the same pairs in the same order with two in-lane shuffles, an
     extract and three adds, so the sum is the scalar tree's bit for bit (a float sum in another order would round
     differently). gcc made 7 extracts and 7 scalar adds of it: attention's q.k, 3 to 6 such sums per cache slot.
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


FLOAT_SUM_HELPER = "tg_hadd_f32x8"
FLOAT_SUM_PREAMBLE = """\
static inline float tg_hadd_f32x8(tg_float32x8 v) {  /* ((v0+v1)+(v2+v3))+((v4+v5)+(v6+v7)): the scalar tree's order */
  tg_float32x8 p = v + __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
  tg_float32x8 q = p + __builtin_shufflevector(p, p, 2, 3, 0, 1, 6, 7, 4, 5);
  return q[0] + q[4];
}
"""


def _pairwise(n: UOp, size: int) -> tuple[UOp, int] | None:
    """(vector, first lane) when ``n`` adds ``size`` consecutive lanes of one float32 vector pairwise (halves first
    summed alone, then added; either operand first), else None."""
    if size == 1:
        return (n.src[0], n.arg[0]) if n.op is Ops.GEP and len(n.arg) == 1 else None
    if n.op is not Ops.ADD or n.dtype != dtypes.float32 or len(n.src) != 2:
        return None
    left, right = (_pairwise(s, size // 2) for s in n.src)
    if left is None or right is None:
        return None
    (va, a), (vb, b) = sorted((left, right), key=lambda h: h[1])
    return (va, a) if va is vb and a % size == 0 and b == a + size // 2 else None


def float_sum(x: UOp) -> UOp | None:
    """The pairwise float32 ``ADD`` tree over the 8 lanes of one vector -> ``tg_hadd_f32x8``'s call."""
    found = _pairwise(x, LANES)
    if found is None or found[1] != 0 or found[0].dtype != dtypes.float32.vec(LANES):
        return None
    return UOp(Ops.CUSTOMI, x.dtype, (found[0],), FLOAT_SUM_HELPER)


def horizontal_reduction(x: UOp) -> UOp | None:
    """An int32 ``MAX`` / ``ADD`` tree over every lane of one 8-lane int32 vector, each once, or a float32 one in the
    pairwise order (``float_sum``) -> the helper's call."""
    if x.op is Ops.ADD and x.dtype == dtypes.float32:
        return float_sum(x)
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


def uses_float_sum(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg == FLOAT_SUM_HELPER for u in kernel)

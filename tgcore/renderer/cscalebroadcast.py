"""C renderer: a product of two float loads broadcast to 8 lanes as the product of two broadcast loads.

In:  a kernel in REDUCE form after the optimizations (the C renderer's legalizer): ``y * VECTORIZE(s, ..., s)`` of 8
     float32 lanes, ``s = a * b`` with ``a`` and ``b`` scalar loads (a quantization block's factor: a scale looked
     up in a table times the activations' scale, a new one per block and weight row).
Out: ``tg_broadcast_product8(a's element, b's element)``: both broadcast from memory (``vbroadcastss ymm, m32``, a
     load alone) and multiplied as vectors, where gcc multiplied the scalars and broadcast the product from a
     register (``vbroadcastss ymm, xmm``: the shuffle port, which a grid type's kernel fills with its index
     widening, broadcasts and gathers; IQ1_S 4096^2 GEMV kernel, one thread: 0.85 -> 0.78 ms). The same float32
     product either way (one rounding). Written with the broadcast builtin: in plain vector C gcc folds it back.
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

BROADCAST_PRODUCT_HELPER = "tg_broadcast_product8"
LANES = dtypes.float32.vec(8)
# (a macro over the two elements, so the call takes their addresses: the renderer names an element, not a pointer)
BROADCAST_PRODUCT_PREAMBLE = """\
static inline tg_float32x8 tg_broadcast_product8_at(const float* a, const float* b) {
#if defined(__AVX__) && !defined(__clang__)
  return (tg_float32x8)__builtin_ia32_vbroadcastss256(a) * (tg_float32x8)__builtin_ia32_vbroadcastss256(b);
#else
  float p = *a * *b;
  return (tg_float32x8){p, p, p, p, p, p, p, p};
#endif
}
#define tg_broadcast_product8(a, b) tg_broadcast_product8_at(&(a), &(b))
"""


def _element(u: UOp) -> UOp | None:
    """The INDEX of a scalar float32 load from a kernel parameter's memory that is always read (no gate, or a gate
    that is the constant true), else None (an accumulator's or a local's element stays a value)."""
    if u.op is not Ops.LOAD or u.dtype != dtypes.float32 or len(u.src) != 1 or u.src[0].op is not Ops.INDEX:
        return None
    index = u.src[0]
    if index.src[0].op is not Ops.PARAM:
        return None
    ungated = len(index.src) == 2 or (len(index.src) == 3 and index.src[2].op is Ops.CONST and index.src[2].arg is True)
    return index if ungated and index.src[1].dtype.count == 1 else None


def _broadcast_call(vec: UOp) -> UOp | None:
    """``VECTORIZE`` of one ``a * b`` in 8 float32 lanes, ``a`` and ``b`` scalar loads always read -> one call of
    ``tg_broadcast_product8`` at their elements; else None."""
    if vec.op is not Ops.VECTORIZE or vec.dtype != LANES or any(s is not vec.src[0] for s in vec.src):
        return None
    product = vec.src[0]
    if product.op is not Ops.MUL or len(product.src) != 2:
        return None
    a, b = (_element(s) for s in product.src)
    if a is None or b is None:
        return None
    return UOp(Ops.CUSTOMI, LANES, (a, b), BROADCAST_PRODUCT_HELPER)


def broadcast_product(x: UOp) -> UOp | None:
    """``y * VECTORIZE(a * b)`` (8 float32 lanes) -> ``y * tg_broadcast_product8(a, b)``; else None. Only as a factor:
    the vector product of an addend would let gcc contract ``a * b + c`` into one fused multiply-add (one rounding
    where the scalar product had two: other bits), a factor's product rounds as the scalar one did."""
    if x.op is not Ops.MUL or x.dtype != LANES or len(x.src) != 2:
        return None
    for i, vec in enumerate(x.src):
        if (call := _broadcast_call(vec)) is not None:
            return UOp(Ops.MUL, x.dtype, (x.src[1 - i], call) if i else (call, x.src[1]), x.arg)
    return None


def uses_broadcast_product(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg == BROADCAST_PRODUCT_HELPER for u in kernel)

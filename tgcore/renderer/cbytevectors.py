"""C renderer: vectors of bytes put together from one load.

In:  a kernel in REDUCE form after the optimizations (the C renderer's legalizer), and the rendering of shuffles.
Out: ``nearby_byte_loads``: a vector of scalar byte loads from one buffer at constant offsets from one index, all
     inside 4, 8 or 16 bytes of which the first and last are read (a K-quant's scale bytes taken in the order of
     their sub-blocks: 96, 98, 100, 102, 97, ...) -> one load of those bytes and a shuffle of its lanes (gcc put the
     scalar bytes together with a shift and an or each). ``repeats_16_bytes`` / ``REPEAT16_PREAMBLE``: a vector of
     16 bytes twice over (a block's 16 nibble bytes in both halves of 32 lanes) as one broadcast, which gcc folds
     into the load (``vbroadcasti128``; its own shuffle of the halves is a load and a ``vpermq`` on the shuffle
     port). The same values either way.
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

SPANS = (4, 8, 16)  # bytes one load may take (vector types the renderer declares)


def _byte_load_at(u: UOp) -> tuple[UOp, UOp] | None:
    """``(buffer, index)`` of an ungated scalar load of one byte."""
    if (u.op is not Ops.LOAD or u.dtype not in (dtypes.uint8, dtypes.int8) or len(u.src) != 1
            or u.src[0].op is not Ops.INDEX or len(u.src[0].src) != 2 or u.src[0].src[1].dtype.count != 1):
        return None
    return u.src[0].src[0], u.src[0].src[1]


def nearby_byte_loads(vec: UOp) -> UOp | None:
    """A VECTORIZE of byte loads (see the module docstring) as one vector load and a shuffle of it; else None. Only
    bytes whose first and last are read are loaded (no read past what the kernel reads)."""
    if vec.op is not Ops.VECTORIZE or len(vec.src) < 2 or all(s is vec.src[0] for s in vec.src):
        return None  # (one value in every lane: a broadcast)
    places = [_byte_load_at(s) for s in vec.src]
    if any(p is None for p in places) or any(s.dtype != vec.src[0].dtype for s in vec.src):
        return None
    buf, base = places[0]  # type: ignore[misc]
    from tgcore.uop.symbolic import difference
    found = [difference(p[1], base) if p[0] is buf else None for p in places]  # type: ignore[index]
    offsets = [o for o in found if isinstance(o, int)]
    if len(offsets) != len(found):
        return None
    low, high = min(offsets), max(offsets)
    span = high - low + 1
    if span not in SPANS or len(set(offsets)) < 2:
        return None
    first = vec.src[offsets.index(low)]
    wide = UOp(Ops.LOAD, vec.dtype.scalar().vec(span), (first.src[0],))
    return UOp(Ops.VECTORIZE, vec.dtype, tuple(wide.gep(o - low) for o in offsets))


def repeats_16_bytes(u: UOp) -> bool:
    """Whether ``u`` is a 16-byte vector twice over (lanes ``0..15, 0..15`` of one 16-byte vector)."""
    if u.op is not Ops.VECTORIZE or u.dtype.itemsize != 32 or not u.src or not all(
            x.op is Ops.GEP and len(x.arg) == 1 for x in u.src):
        return False
    source = u.src[0].src[0]
    return (source.dtype.itemsize == 16 and all(x.src[0] is source for x in u.src)
            and [x.arg[0] for x in u.src] == list(range(source.dtype.count)) * 2)


REPEAT16_HELPER = "tg_repeat16"
REPEAT16_PREAMBLE = """\
static inline tg_uint8x32 tg_repeat16(tg_uint8x16 v) {
#if defined(__AVX2__) && !defined(__clang__)
  typedef long long tg_words2 __attribute__((vector_size(16)));
  return (tg_uint8x32)__builtin_ia32_vbroadcastsi256((tg_words2)v);
#else
  return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#endif
}
"""


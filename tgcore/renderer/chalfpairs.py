"""C renderer: two float16 scalars at neighbouring addresses read and converted together.

In:  a kernel in REDUCE form after the optimizations (the C renderer's legalizer: after ``combine_byte_loads``),
     where a float16 is read out of a byte buffer as ``float(bitcast(load of 2 bytes))`` (a quantized block's
     scale and its minimum, Q4_1's ``d`` and ``m``, each a scalar for every weight row and block).
Out: each pair of such conversions whose bytes are neighbours (``a`` and ``a + 2``, one buffer, ungated) as one
     load of 4 bytes converted as a vector of 2 (``tg_half2_to_f32``: one ``vcvtph2ps`` with F16C, the two lanes
     taken apart after), where each was a 2-byte insert and a conversion of its own. The same values: a float16
     converts to float32 exactly.
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

PAIR, WORDS, HALVES = dtypes.float32.vec(2), dtypes.uint8.vec(4), dtypes.float16.vec(2)
HALF2_HELPER = "tg_half2_to_f32"


def _half_read_at(u: UOp) -> tuple[UOp, UOp] | None:
    """``(buffer, index)`` when ``u`` is ``float32(bitcast<half>(bitcast<u16>(2-byte load at buffer[index])))``."""
    if u.op is not Ops.CAST or u.dtype != dtypes.float32 or u.src[0].dtype != dtypes.float16:
        return None
    half = u.src[0]
    if half.op is not Ops.BITCAST or half.src[0].op is not Ops.BITCAST or half.src[0].dtype != dtypes.uint16:
        return None
    load = half.src[0].src[0]
    if load.op is not Ops.LOAD or load.dtype != dtypes.uint8.vec(2) or len(load.src) != 1:
        return None
    index = load.src[0]
    if index.op is not Ops.INDEX or len(index.src) != 2 or index.src[1].dtype.count != 1:
        return None  # (ungated only: a gated pair would need both gates)
    return index.src[0], index.src[1]


def pair_half_reads(sink: UOp) -> UOp | None:
    """Every pair of neighbouring float16 reads (see the module docstring) as one 4-byte read converted at once."""
    from tgcore.uop.symbolic import difference
    reads = [(u, at) for u in sink.toposort if (at := _half_read_at(u)) is not None]
    paired: dict[UOp, UOp] = {}
    for low, (buf, index) in reads:
        if low in paired:
            continue
        high = next((u for u, (b, i) in reads if b is buf and u not in paired and u is not low
                     and difference(i, index) == 2), None)
        if high is None:
            continue
        load = UOp(Ops.LOAD, WORDS, (low.src[0].src[0].src[0].src[0],))  # at the low half's INDEX
        pair = UOp(Ops.CAST, PAIR, (UOp(Ops.BITCAST, HALVES, (load,)),))
        paired[low], paired[high] = pair.gep(0), pair.gep(1)
    return sink.substitute(paired) if paired else None


# 2 float16 lanes -> 2 float32 lanes: one vcvtph2ps of the 4 bytes moved into a vector register (vmovd)
HALF2_PREAMBLE = """\
static inline tg_float32x2 tg_half2_to_f32(tg_float16x2 v) {
#if defined(__F16C__)
  typedef short tg_halfbits8 __attribute__((vector_size(16)));
  typedef unsigned int tg_u32x4 __attribute__((vector_size(16)));
  typedef float tg_f32x4 __attribute__((vector_size(16)));
  unsigned int bits; __builtin_memcpy(&bits, &v, 4);
  tg_f32x4 f = __builtin_ia32_vcvtph2ps((tg_halfbits8)(tg_u32x4){bits, 0u, 0u, 0u});
  return (tg_float32x2){f[0], f[1]};
#else
  return __builtin_convertvector(v, tg_float32x2);
#endif
}
"""


HALF2_LANE8_HELPER = "tg_half2_lane8_f32"
# one half of a pair (its 4 bytes) converted into all 8 lanes of a float32 vector: the 4 bytes broadcast from memory,
# all 8 halves converted at once (vcvtph2ps) and the wanted ones taken by an in-lane permute. gcc made of the pair's
# conversion and a lane in every lane a move, a shuffle and a broadcast (both pair members: 3 shuffle-port ops, here 2)
HALF2_LANE8_PREAMBLE = """\
static inline tg_float32x8 tg_half2_lane8_f32(tg_uint8x4 b, int k) {
#if defined(__F16C__) && defined(__AVX__)
  typedef short tg_halfbits8 __attribute__((vector_size(16)));
  typedef unsigned int tg_u32x4 __attribute__((vector_size(16)));
  unsigned int bits; __builtin_memcpy(&bits, &b, 4);
  tg_float32x8 f = __builtin_ia32_vcvtph2ps256((tg_halfbits8)(tg_u32x4){bits, bits, bits, bits});
  if (k) return __builtin_shufflevector(f, f, 1, 1, 3, 3, 5, 5, 7, 7);
  return __builtin_shufflevector(f, f, 0, 0, 2, 2, 4, 4, 6, 6);
#else
  tg_float16x2 h; __builtin_memcpy(&h, &b, 4);
  float x = (float)h[k];
  return (tg_float32x8){x, x, x, x, x, x, x, x};
#endif
}
"""


def pair_lane_broadcast(u: UOp) -> tuple[UOp, int] | None:
    """``(the pair's 4-byte load, k)`` when ``u`` is lane ``k`` of a converted float16 pair (``pair_half_reads``) in all
    8 lanes of a float32 vector; else None."""
    if u.op is not Ops.VECTORIZE or u.dtype != dtypes.float32.vec(8) or any(s is not u.src[0] for s in u.src):
        return None
    lane = u.src[0]
    if lane.op is not Ops.GEP or len(lane.arg) != 1 or lane.src[0].op is not Ops.CAST or lane.src[0].dtype != PAIR:
        return None
    halves = lane.src[0].src[0]
    if halves.op is not Ops.BITCAST or halves.dtype != HALVES or halves.src[0].dtype != WORDS:
        return None
    return halves.src[0], lane.arg[0]


def both_pair_lanes_broadcast(kernel: list[UOp]) -> set[UOp]:
    """The pairs' 4-byte loads whose both members are put in every lane (Q4_1/Q5_1's d and m): those are converted
    by ``tg_half2_lane8_f32`` (where only one is, the pair's own conversion stays and the helper's came on top: a
    K-quant's d, 3% slower)."""
    lanes: dict[UOp, set[int]] = {}
    for u in kernel:
        if (pair := pair_lane_broadcast(u)) is not None:
            lanes.setdefault(pair[0], set()).add(pair[1])
    return {load for load, taken in lanes.items() if taken == {0, 1}}

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

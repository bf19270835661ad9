"""C renderer: narrow ints widened to int32 lanes in one instruction where gcc's generic conversion takes several.

In:  a vector CAST from 8 lanes of 8- or 16-bit ints (16 lanes of 16-bit ints) to int32 (``WIDEN_BYTES``).
Out: a call of a helper in ``WIDEN_PREAMBLE`` (vpmov[sz]x with AVX2 / AVX-512F; the generic conversion elsewhere),
     whose source types are ``WIDEN_TYPES``.
"""
from __future__ import annotations

from tgcore.dtype import dtypes

# 8 lanes of 8-bit ints -> 8 lanes of 32-bit ints: one AVX2 instruction (vpmovzxbd / vpmovsxbd). gcc lowers the
# generic __builtin_convertvector of an 8-byte vector lane by lane, so where AVX2 is there the kernel calls these
# (16-bit ints too: vpmov[sz]xwd, where gcc took 2 halves, 4 ops).
# 16 lanes of 16-bit ints (a row-lane product's table row numbers, ``tg_gguf.grid_lanes``): one AVX-512F
# vpmov[sz]xwd into a zmm, where gcc took 2 halves, 2 extracts and an insert
WIDEN_BYTES = {(dtypes.uint8, 8): "tg_widen_u8x8", (dtypes.int8, 8): "tg_widen_i8x8",
               (dtypes.int16, 8): "tg_widen_i16x8", (dtypes.uint16, 8): "tg_widen_u16x8",
               (dtypes.int16, 16): "tg_widen_i16x16", (dtypes.uint16, 16): "tg_widen_u16x16"}
WIDEN_TYPES = {dtypes.uint8.vec(8), dtypes.int8.vec(8), dtypes.int16.vec(8), dtypes.uint16.vec(8),
               dtypes.int16.vec(16), dtypes.uint16.vec(16)}  # the helpers' source types
WIDEN_PREAMBLE = """\
typedef char tg_bytes16 __attribute__((vector_size(16)));
typedef int tg_widened8 __attribute__((vector_size(32)));
static inline tg_bytes16 tg_low8(unsigned long long b) {
  long long __attribute__((vector_size(16))) t = {(long long)b, 0}; return (tg_bytes16)t; }
static inline tg_widened8 tg_widen_u8x8(tg_uint8x8 v) {  /* (clang has no pmovzx builtins) */
#if defined(__AVX2__) && !defined(__clang__)
  unsigned long long b; __builtin_memcpy(&b, &v, 8); return (tg_widened8)__builtin_ia32_pmovzxbd256(tg_low8(b));
#else
  return __builtin_convertvector(v, tg_widened8);
#endif
}
static inline tg_widened8 tg_widen_i8x8(tg_int8x8 v) {
#if defined(__AVX2__) && !defined(__clang__)
  unsigned long long b; __builtin_memcpy(&b, &v, 8); return (tg_widened8)__builtin_ia32_pmovsxbd256(tg_low8(b));
#else
  return __builtin_convertvector(v, tg_widened8);
#endif
}
#if defined(__AVX2__) && !defined(__clang__)
#define tg_widen16(s, v) ((tg_widened8)__builtin_ia32_pmov##s##xwd256((tg_int16x8)(v)))
#else
#define tg_widen16(s, v) __builtin_convertvector(v, tg_widened8)
#endif
static inline tg_widened8 tg_widen_i16x8(tg_int16x8 v) { return tg_widen16(s, v); }
static inline tg_widened8 tg_widen_u16x8(tg_uint16x8 v) { return tg_widen16(z, v); }
typedef int tg_widened16 __attribute__((vector_size(64)));
#if defined(__AVX512F__) && !defined(__clang__)
#define tg_widen32(s, v) ((tg_widened16)__builtin_ia32_pmov##s##xwd512_mask((tg_int16x16)(v), (tg_widened16){0}, -1))
#else
#define tg_widen32(s, v) __builtin_convertvector(v, tg_widened16)
#endif
static inline tg_widened16 tg_widen_i16x16(tg_int16x16 v) { return tg_widen32(s, v); }
static inline tg_widened16 tg_widen_u16x16(tg_uint16x16 v) { return tg_widen32(z, v); }
"""

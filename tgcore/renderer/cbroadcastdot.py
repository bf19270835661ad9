"""C renderer: a row-lane byte dot whose signed operand is 4 bytes of memory broadcast: one ``vpdpbusd`` reading them.

In:  a kernel after ``CRenderer.legalize``'s dot rules: ``tg_dot4_u8i8(a, b)`` / ``tg_dot4_u8i8_acc(c, a, b)``
     (``cbytedot``) whose ``b`` is one ungated 4-byte load repeated into every 32-bit lane (``cbytedot._repeated``: the
     row-lane products' activation bytes, ``cbytedot.row_lanes_dot``; 8 per block and batch row).
Out: ``tg_dot4_bcst(a, x)`` / ``tg_dot4_bcst_acc(c, a, x)`` with ``x`` the loaded bytes' first element (an lvalue:
     the call takes its address). With AVX512-VNNI and AVX512VL one ``vpdpbusd`` whose memory operand is the 4 bytes
     broadcast ({1to8}, EVEX only: no ``vpbroadcastd`` of its own: gcc does not fold the broadcast into the dot); else
     the 4 bytes loaded, broadcast and passed to the plain helper. The same sums: an int32 dot is exact either way.
     A C harness of the row-lane kernel, one core, Q4_1 1536x576 at 1/4/8 batch rows: 12.8/31.9/55.2 ->
     12.2/29.1/51.0 us, the same bits.
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.renderer.cbytedot import (
    DOT16_ACC_HELPER,
    DOT16_HELPER,
    DOT_ACC_HELPER,
    DOT_HELPER,
    DOT_TYPES,
    WIDE_ROWS,
    repeated_of,
)
from tgcore.uop import Ops, UOp

BCST_HELPER = "tg_dot4_bcst"
BCST_ACC_HELPER = "tg_dot4_bcst_acc"
BCST_TYPES = DOT_TYPES


def _broadcast_preamble(lanes: int) -> str:
    """The C helper ``tg_dot4_bcst[_x16]_acc_at(c, a, p)`` for ``lanes`` 32-bit lanes (8 or 16): with AVX512-VNNI one
    ``vpdpbusd`` whose memory operand is the 4 bytes at ``p`` broadcast to every lane, else those bytes repeated and
    passed to the plain dot helper; and the two macros that take an lvalue's address."""
    wide = "_x16" if lanes == WIDE_ROWS else ""
    # a 256-bit (ymm) vpdpbusd is EVEX-encoded only with AVX512VL
    guard = "defined(__AVX512VNNI__)" + ("" if wide else " && defined(__AVX512VL__)")
    acc, width = f"tg_int32x{lanes}", 4 * lanes
    return f"""\
static inline {acc} tg_dot4_bcst{wide}_acc_at({acc} c, tg_uint8x{width} a, const void* p) {{
#if {guard}
  __asm__("vpdpbusd %2%{{1to{lanes}%}}, %1, %0" : "+v"(c) : "v"(a), "m"(*(const int*)p));
  return c;
#else
  unsigned int w; __builtin_memcpy(&w, p, 4);
  typedef unsigned int tg_w __attribute__((vector_size({width})));
  return tg_dot4_u8i8{wide}_acc(c, a, (tg_int8x{width})((tg_w){{0}} + w));
#endif
}}
#define tg_dot4_bcst{wide}(a, x) tg_dot4_bcst{wide}_acc_at(({acc}){{0}}, (a), &(x))
#define tg_dot4_bcst{wide}_acc(c, a, x) tg_dot4_bcst{wide}_acc_at((c), (a), &(x))
"""


BCST_PREAMBLE = _broadcast_preamble(8)
# the 16-lane helpers (row lanes of a 512-bit vector): lane l the sum of bytes 4l .. 4l+3 of a times those of b;
# one zmm vpdpbusd with AVX512-VNNI, lane by lane elsewhere (the renderer asks for 16 rows only with it)
DOT16_PREAMBLE = """\
static inline tg_int32x16 tg_dot4_u8i8_x16_acc(tg_int32x16 c, tg_uint8x64 a, tg_int8x64 b) {
#if defined(__AVX512VNNI__)
#if defined(__clang__)
  return __builtin_ia32_vpdpbusd512(c, (tg_int32x16)a, (tg_int32x16)b);
#else
  return __builtin_ia32_vpdpbusd_v16si(c, (tg_int32x16)a, (tg_int32x16)b);
#endif
#else
  for (int l = 0; l < 16; l++)
    for (int k = 0; k < 4; k++) c[l] += (int)a[4 * l + k] * (int)b[4 * l + k];
  return c;
#endif
}
#define tg_dot4_u8i8_x16(a, b) tg_dot4_u8i8_x16_acc((tg_int32x16){0}, (a), (b))
"""
DOT16_TYPES = (dtypes.int32.vec(WIDE_ROWS), dtypes.uint8.vec(4 * WIDE_ROWS), dtypes.int8.vec(4 * WIDE_ROWS))
BCST16_HELPER, BCST16_ACC_HELPER = "tg_dot4_bcst_x16", "tg_dot4_bcst_x16_acc"
BCST16_PREAMBLE = _broadcast_preamble(WIDE_ROWS)
# the plain and broadcast-operand helpers, by the plain one
BROADCAST_OF = {DOT_HELPER: BCST_HELPER, DOT_ACC_HELPER: BCST_ACC_HELPER, DOT16_HELPER: BCST16_HELPER,
                DOT16_ACC_HELPER: BCST16_ACC_HELPER}


def _broadcast_word_at(b: UOp) -> UOp | None:
    """The INDEX of an ungated 4-byte load at one address that ``b`` (a signed 32- or 64-byte operand) repeats in
    every 32-bit lane."""
    if b.dtype not in (dtypes.int8.vec(32), dtypes.int8.vec(4 * WIDE_ROWS)) or (load := repeated_of(b)) is None:
        return None
    if (load.op is not Ops.LOAD or load.dtype != dtypes.int8.vec(4) or len(load.src) != 1
            or load.src[0].op is not Ops.INDEX or len(load.src[0].src) != 2 or load.src[0].src[1].dtype.count != 1):
        return None
    return load.src[0]


def broadcast_dot(x: UOp) -> UOp | None:
    """``tg_dot4_u8i8[_x16][_acc](..., a, b)`` with ``b`` a broadcast 4-byte load -> ``tg_dot4_bcst[_x16][_acc](...,
    a, x)``."""
    if x.op is not Ops.CUSTOMI or x.arg not in BROADCAST_OF:
        return None
    at = _broadcast_word_at(x.src[-1])
    if at is None:
        return None
    return UOp(Ops.CUSTOMI, x.dtype, (*x.src[:-1], at), BROADCAST_OF[x.arg])


def uses_broadcast_dot(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg in (BCST_HELPER, BCST_ACC_HELPER) for u in kernel)


def uses_wide_dot(kernel: list[UOp]) -> bool:
    """Whether ``kernel`` calls a 16-lane dot (``DOT16_PREAMBLE``, which the broadcast one falls back on)."""
    return any(u.op is Ops.CUSTOMI and u.arg in (DOT16_HELPER, DOT16_ACC_HELPER, BCST16_HELPER, BCST16_ACC_HELPER)
               for u in kernel)


def uses_wide_broadcast_dot(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg in (BCST16_HELPER, BCST16_ACC_HELPER) for u in kernel)

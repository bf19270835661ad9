"""Batch invariance: the choices that keep one output element's reduction order the same whatever the number of rows
around it (``heuristic``'s module docstring states the property).

In:  a reduction's length, its accumulator's dtype, the renderer's vector widths.
Out: the lanes the reduction is summed in (``reduce_lanes``), and ``INVARIANT_ROWS``, the row counts the property
     covers.
"""
from __future__ import annotations

from tgcore.dtype import DType

INVARIANT_ROWS = 8  # products with at most this many rows sum each element in one row's order (batch invariance)
WIDE_REDUCE_MIN = 1 << 16  # a reduction this long is summed in several vectors at once (else in one)


def reduce_lanes(size: int, acc: DType, simd_widths: dict[DType, int]) -> int:
    """The lanes a reduction of ``size`` iterations along its inputs' contiguous axis is summed in (0: none fit): one
    native vector of the accumulator, or, from ``WIDE_REDUCE_MIN`` on (or without native vectors), 32, 16 or 8 lanes
    so that several native adds overlap. Read from the reduction alone, never from the rows around it (batch
    invariance: see the module docstring)."""
    native = simd_widths.get(acc, 0)
    widths = (native,) if native > 1 and size < WIDE_REDUCE_MIN else (32, 16, 8)
    return next((w for w in widths if size % w == 0), 0)

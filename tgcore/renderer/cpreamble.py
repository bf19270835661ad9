"""C renderer: which of the byte and vector helpers of the preamble a kernel calls.

In:  a rendered kernel's UOps (after ``CRenderer.legalize``), with the names and lane gates of its rendering.
Out: the vector types those helpers need declared and their C text, in the order the renderer puts them after its
     own (each module's ``uses_*`` or match says whether its helper is called).
"""
from __future__ import annotations

from tgcore.dtype import DType, dtypes
from tgcore.renderer.cbroadcastdot import (
    BCST16_PREAMBLE,
    BCST_PREAMBLE,
    BCST_TYPES,
    DOT16_PREAMBLE,
    DOT16_TYPES,
    uses_broadcast_dot,
    uses_wide_broadcast_dot,
    uses_wide_dot,
)
from tgcore.renderer.cbytedot import (
    BYTE_TABLE_PREAMBLE,
    DOT_PREAMBLE,
    DOT_TYPES,
    MULHI_PREAMBLE,
    MULHI_TYPES,
    byte_table_lookup,
    uses_byte_dot,
    uses_high_product,
)
from tgcore.renderer.cbytevectors import (
    BITS_HELPER,
    BITS_PREAMBLE,
    LOW4_TABLE_PREAMBLE,
    REPEAT16_PREAMBLE,
    low4_index,
    repeats_16_bytes,
)
from tgcore.renderer.chighbytes import WRAPPED_HIGH_PREAMBLE, WRAPPED_HIGH_TYPES, uses_wrapped_high
from tgcore.renderer.chorizontal import (
    FLOAT_SUM_PREAMBLE,
    HORIZONTAL_PREAMBLE,
    uses_float_sum,
    uses_horizontal_reduction,
)
from tgcore.renderer.clanerange import RANGE_STORE_PREAMBLE, uses_range_store
from tgcore.renderer.cnarrow import NARROWING_PREAMBLE, NARROWING_TYPES, uses_narrowing
from tgcore.renderer.cnegatebits import NEGATE_BITS_PREAMBLE, NEGATE_BITS_TYPES, uses_negate_bits
from tgcore.renderer.crowgather import ROWS_PREAMBLE, ROWS_TYPES, uses_row_gather
from tgcore.renderer.cscalebroadcast import BROADCAST_PRODUCT_PREAMBLE, uses_broadcast_product
from tgcore.uop import Ops, UOp


def byte_helpers(kernel: list[UOp], names: dict[UOp, str], lane_gates: dict[UOp, list[str]]) -> tuple[set[DType], str]:
    """``(vector types, C text)`` of the byte and vector helpers ``kernel`` calls."""
    vectors: set[DType] = set()
    helpers = ""
    if any(repeats_16_bytes(u) for u in kernel):
        vectors |= {dtypes.uint8.vec(16), dtypes.uint8.vec(32)}
        helpers += REPEAT16_PREAMBLE
    if any(u.op is Ops.CUSTOMI and u.arg == BITS_HELPER for u in kernel):
        vectors |= {dtypes.uint8.vec(32)}
        helpers += BITS_PREAMBLE
    for used, types, preamble in ((lambda k: uses_byte_dot(k) or uses_broadcast_dot(k), DOT_TYPES, DOT_PREAMBLE),
                                  (uses_broadcast_dot, BCST_TYPES, BCST_PREAMBLE),  # (falls back on the dot helper)
                                  (uses_wide_dot, DOT16_TYPES, DOT16_PREAMBLE),
                                  (uses_wide_broadcast_dot, (), BCST16_PREAMBLE),
                                  (uses_row_gather, ROWS_TYPES, ROWS_PREAMBLE),
                                  (uses_high_product, MULHI_TYPES, MULHI_PREAMBLE),
                                  (uses_broadcast_product, (), BROADCAST_PRODUCT_PREAMBLE),
                                  (uses_negate_bits, NEGATE_BITS_TYPES, NEGATE_BITS_PREAMBLE),
                                  (uses_wrapped_high, WRAPPED_HIGH_TYPES, WRAPPED_HIGH_PREAMBLE),
                                  (uses_horizontal_reduction, (dtypes.int32.vec(8),), HORIZONTAL_PREAMBLE),
                                  (uses_float_sum, (dtypes.float32.vec(8),), FLOAT_SUM_PREAMBLE),
                                  (uses_narrowing, NARROWING_TYPES, NARROWING_PREAMBLE)):
        if used(kernel):
            vectors |= set(types)
            helpers += preamble
    if any(byte_table_lookup(u) is not None for u in kernel):  # (rendered wherever one matches, dot or not)
        vectors |= {dtypes.uint8.vec(32)}
        helpers += BYTE_TABLE_PREAMBLE
        if any((i := byte_table_lookup(u)) is not None and low4_index(i) is not None for u in kernel):
            helpers += LOW4_TABLE_PREAMBLE
    if uses_range_store(kernel, names, lane_gates):
        helpers += RANGE_STORE_PREAMBLE
    return vectors, helpers

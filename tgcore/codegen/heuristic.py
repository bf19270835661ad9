"""The default policy: which optimizations a kernel gets on a renderer, without timing anything.

In:  a kernel SINK in REDUCE form (simplified), the renderer, the threads the device offers and the
     kernel's work (operations, or bytes / 4 when that is larger).
Out: a list of ``Opt`` records for ``tgcore.codegen.optimize.apply_opts``.

- Elementwise kernels and reductions along an output axis (a matmul's, a column sum): the output axis that
  is contiguous in memory becomes vector lanes, and in reductions a second output axis is unrolled.
- Matrix products large enough to be compute bound get a register tile (``gemm_opts``): rows unrolled,
  several vectors of columns, and the reduction tiled so one block of the right-hand matrix stays in cache.
- Reductions along their input's contiguous axis (a matrix-vector product, dequantize-and-dot): the reduced
  axis becomes vector lanes, summed across lanes at the end; quantization blocks get ``BLOCK``.
- The outermost output loop left is split over threads when the kernel has enough work for them.
"""
from __future__ import annotations

from tgcore.codegen.optimize import Opt, OptOps, kernel_axes
from tgcore.codegen.upcast import MAX_LANES, MAX_UNROLL, REDUCE_ROWS, _size, _stride, block_divisors
from tgcore.dtype import DType
from tgcore.helpers import prod
from tgcore.uop import Ops, UOp

MIN_WORK_PER_THREAD = 1 << 15  # loop iterations below which a thread costs more than it saves


def _main_inputs(ast: UOp) -> list[UOp]:
    """Index expressions of the loads from the largest input buffer (what the kernel mostly streams)."""
    loads = [u for u in ast.toposort if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
    if not loads:
        return []

    def size(u: UOp) -> int:
        return getattr(u.src[0].src[0].dtype, "size", 0) * u.dtype.itemsize
    biggest = max(size(u) for u in loads)
    return list(dict.fromkeys(u.src[0].src[1] for u in loads if size(u) == biggest))


def vector_opts(ast: UOp, simd_widths: dict[DType, int]) -> list[Opt]:
    """UPCAST and UNROLL records (see the module docstring) for ``ast``'s loops.

    In a reduction along its main input, with an output axis to unroll by ``REDUCE_ROWS`` (sharing the loads;
    the rows' accumulators are independent), the reduced axis is vectorized by the SIMD width of the
    accumulator: one native vector (wider ones make C compilers split every operation, and inside a
    quantization block an 8-lane slice sees one nibble shift, not a mix); a second output axis, if any (the
    other input's rows in a matrix product), is unrolled by 2. Without one, by 32 lanes (16 or 8 when the axis
    is shorter) so several native adds overlap.
    """
    stores = [s for s in ast.src if s.op is Ops.STORE]
    if len(stores) != 1 or not simd_widths:
        return []
    axes = kernel_axes(ast)
    number = {r: i for i, r in enumerate(axes)}
    store = stores[0]
    width = simd_widths.get(store.src[1].dtype, 0)
    index = store.src[0].src[1]
    ranges = [r for r in index.toposort if r.op is Ops.RANGE and r in number and r.arg[1] == "global"]
    reduces = [u for u in ast.toposort if u.op is Ops.REDUCE]
    mains = _main_inputs(ast)
    contiguous = [r for r in ranges if _stride(index, r) == 1]
    along_output = bool(contiguous) and all(_stride(m, contiguous[0]) in (0, 1) for m in mains)
    if reduces and mains and not along_output and len(reduces) == 1:
        reduce_ranges = [r for r in reduces[0].src[1:] if any(_stride(m, r) == 1 for m in mains)]
        rows = [r for r in ranges if _size(r) % REDUCE_ROWS == 0]
        # with rows to interleave, one native vector per row (the rows are the independent accumulators);
        # alone, a wide vector (several native ones, so the adds do not wait on each other)
        acc_width = simd_widths.get(reduces[0].dtype.scalar(), 0) if rows else 0
        widths = (acc_width,) if acc_width > 1 else (32, 16, 8)
        lanes = next((w for w in widths if reduce_ranges and _size(reduce_ranges[0]) % w == 0), 0)
        if lanes:
            red = reduce_ranges[0]
            vector = Opt(OptOps.UPCAST, number[red], lanes)
            blocks = [k // lanes for k in block_divisors(ast, red) if k % lanes == 0 and k // lanes > 1]
            block = [Opt(OptOps.BLOCK, number[red], max(blocks))] if blocks else []
            if not rows:
                return [vector, *block]
            # a second output axis (a matrix product: rows of both inputs) by 2: each loaded vector of either
            # input then feeds 2 or 4 accumulators instead of one
            cols = [r for r in ranges if r is not rows[0] and _size(r) % 2 == 0]
            return [Opt(OptOps.UNROLL, number[rows[0]], REDUCE_ROWS),
                    *(Opt(OptOps.UNROLL, number[c], 2) for c in cols[:1]), vector, *block]
    if not (contiguous and width > 1 and _size(contiguous[0]) % width == 0):
        return []
    chosen = [Opt(OptOps.UPCAST, number[contiguous[0]], width)]
    if reduces:
        others = [r for r in ranges if r is not contiguous[0] and _size(r) % 4 == 0 and _size(r) >= 8]
        if others:
            row = max(others, key=lambda r: _stride(index, r) or 0)
            chosen.insert(0, Opt(OptOps.UNROLL, number[row], 8 if _size(row) % 8 == 0 and _size(row) >= 64 else 4))
    return chosen


def thread_opt(ast: UOp, opts: list[Opt], threads: int, work: int) -> list[Opt]:
    """Split the outermost output loop left after ``opts`` over up to ``threads`` threads (each thread gets a
    contiguous chunk), when there is ``MIN_WORK_PER_THREAD`` of ``work`` for each."""
    if threads <= 1:
        return []
    axes = kernel_axes(ast)
    for i, r in enumerate(axes):
        if r.arg[1] != "global":
            continue
        left = _size(r) // prod(o.amount for o in opts if o.axis == i and o.op in (OptOps.UPCAST, OptOps.UNROLL))
        if left > 1:
            n = min(threads, left, max(1, work // MIN_WORK_PER_THREAD))
            return [Opt(OptOps.THREAD, i, n)] if n > 1 else []
    return []


def heuristic_opts(ast: UOp, renderer: object, threads: int = 1, work: int = 0) -> list[Opt]:
    """The default optimization list for ``ast`` on ``renderer`` (see the module docstring)."""
    linear = getattr(renderer, "linear", True)  # a renderer that takes the REDUCE form vectorizes by itself
    opts = vector_opts(ast, getattr(renderer, "simd_widths", None) or {}) if linear else []
    lanes = max((o.amount for o in opts if o.op is OptOps.UPCAST), default=1)
    if lanes > MAX_LANES or prod(o.amount for o in opts if o.op is OptOps.UNROLL) > MAX_UNROLL:
        opts = []
    if getattr(renderer, "has_threads", False):
        opts += thread_opt(ast, opts, threads, work)
    return opts


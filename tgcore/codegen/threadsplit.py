"""The thread split: which output loop a kernel's threads share, and into how many chunks.

In:  a kernel SINK, the opts chosen so far, the threads the device offers, the kernel's work.
Out: one ``THREAD`` opt, or none (not enough work for a second thread).
"""
from __future__ import annotations

from tgcore.codegen.optimize import Opt, OptOps, kernel_axes
from tgcore.codegen.upcast import _size
from tgcore.helpers import prod, round_up
from tgcore.uop import RangeKind, UOp

MIN_WORK_PER_THREAD = 1 << 15  # loop iterations below which a thread costs more than it saves


def thread_opt(ast: UOp, opts: list[Opt], threads: int, work: int) -> list[Opt]:
    """Split the outermost output loop left after ``opts`` over up to ``threads`` threads (each thread gets a
    contiguous chunk), when there is ``MIN_WORK_PER_THREAD`` of ``work`` for each. When that loop's iterations do not
    share out evenly and are few (``_uneven``: attention's 3 key/value heads on 2 threads, one thread doing twice
    the other's work), the next output loop that shares out evenly is split instead."""
    if threads <= 1:
        return []
    left = _output_loops_left(ast, opts)
    if not left:
        return []
    i, size = left[0]
    n = min(threads, size, max(1, work // MIN_WORK_PER_THREAD))
    if n <= 1:
        return []
    if _uneven(size, n):
        i = next((j for j, m in left if m % n == 0), i)
    return [Opt(OptOps.THREAD, i, n)]


def _output_loops_left(ast: UOp, opts: list[Opt]) -> list[tuple[int, int]]:
    """(axis, iterations) of each output loop (outermost first) that ``opts`` leave more than one iteration of."""
    out = []
    for i, r in enumerate(kernel_axes(ast)):
        if r.arg.kind is not RangeKind.GLOBAL:
            continue
        size = _size(r)
        for o in opts:
            if o.axis == i and o.op is OptOps.PAD:
                size = round_up(size, o.amount)
        left = size // prod(o.amount for o in opts if o.axis == i and o.op in (OptOps.UPCAST, OptOps.UNROLL))
        if left > 1:
            out.append((i, left))
    return out


UNEVEN_SHARE = 1 / 8  # a thread split whose busiest thread does this much more than an even share is uneven


def _uneven(size: int, threads: int) -> bool:
    """Whether ``size`` iterations in ``threads`` contiguous chunks leave the busiest thread ``UNEVEN_SHARE`` more
    than an even share (3 on 2 threads: 2 against 1.5)."""
    return -(-size // threads) * threads > size * (1 + UNEVEN_SHARE)

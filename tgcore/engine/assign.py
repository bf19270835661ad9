"""Lazy writes into memory: ``Tensor.assign`` records a write, a read of the new value runs it.

In:  ``defer(tensor, target, value)`` from ``Tensor.assign``; the graphs a realize is about to run.
Out: the written memory updated in place (views of it and captured JIT kernels see the new values),
     while lazy tensors built before the assign still see the values they were built from.

How: the assign gives the written memory a new BUFFER uop (``REALIZATION.new_version``); the
tensor, and every tensor realized into that memory, move to it, and the write waits in
``REALIZATION.pending`` under it. A realize that reads a pending uop first runs its write; an assign
that reads one (a second write into the same memory, Adam's parameter update reading its new
moments) runs it at once, so pending writes never wait on each other. Just before the write runs, the old BUFFER uop is
looked at: when nothing but the write itself holds it, nobody can read the old values and the
write goes in place at no cost; otherwise the old contents are copied aside for their readers
(``REALIZATION.preserve``).
"""
from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from tgcore.engine.realize import run_schedule
from tgcore.runtime.buffer import Buffer
from tgcore.schedule.kernelize import ScheduleItem, create_schedule
from tgcore.schedule.state import REALIZATION, PendingWrite, written_buffer_uop
from tgcore.uop import Ops, UOp

_COPY_AST = UOp(Ops.NOOP)  # (a copy item's ast is not read)


def defer(tensor: Any, target: UOp, value: UOp) -> None:
    """Record ``target = value`` (``target``: a view of a BUFFER) and move ``tensor`` and the holders of that
    buffer to the value after the write."""
    run_pending([target, value])  # (writes this one reads run now: chains of pending writes stay one long)
    old = written_buffer_uop(target)
    if old is None:
        raise ValueError("assign target must be a view of a buffer made by reshape/shrink/permute/flip, "
                         "or a take of one")
    new = REALIZATION.new_version(old)
    REALIZATION.defer_write(new, PendingWrite(target, value, tensor.device))
    REALIZATION.move_holders(old, new, also=tensor)


def run_pending(outs: Iterable[UOp]) -> None:
    """Run the pending writes whose results the graphs of ``outs`` read, each after the writes it reads."""
    for u in REALIZATION.pending_reads(outs):
        _run_write(u)


def run_all_pending() -> None:
    """Run every pending write (the JIT, before and at the end of a capture)."""
    while REALIZATION.pending:
        _run_write(next(iter(REALIZATION.pending)))


def _run_write(new: UOp) -> None:
    write = REALIZATION.pending.pop(new, None)
    if write is None:  # (already run as a dependency of another write)
        return
    if write.finish is not None:  # a write started outside the scheduler (REALIZATION.prepare_write)
        write.finish()
        return
    assert write.target is not None and write.value is not None
    run_pending([write.target, write.value])  # e.g. a second assign into the same memory reads the first's
    old_ref = weakref.ref(_old_uop(write))
    node = UOp(Ops.ASSIGN, write.target.dtype, (write.target, write.value))
    items, _ = create_schedule([node], write.device)
    buffer = REALIZATION.buffer(new)
    for si in items:
        si.buf_uops = ()  # (only the schedule cache needs them; they would hold the old uop)
    del node, write, _
    if buffer is not None:
        REALIZATION.invalidate(buffer)  # (cached values living in this memory would hold the old uop too)
    old = old_ref()
    if old is not None:  # something besides the write still reads the old values: keep a copy for it
        REALIZATION.preserve(old, _recorded_copy)
    del old
    run_schedule(items)


def _recorded_copy(dest: Buffer, src: Buffer) -> None:
    """A copy run as a schedule item, so a JIT capture replays it before the write."""
    run_schedule([ScheduleItem(_COPY_AST, [dest, src], dest.device, "copy")])


def _old_uop(write: PendingWrite) -> UOp:
    old = written_buffer_uop(write.target) if write.target is not None else None
    assert old is not None  # (defer checked it)
    return old

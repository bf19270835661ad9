"""What the model's worker thread hands to the HTTP side, and where its time goes.

``outbox_for(loop).put(queue, item)``: an output on its way from the worker to an asyncio queue on ``loop``; one
wake-up of the loop carries everything put until it runs. ``WorkerClock``: the worker's seconds per phase (prefill,
decode, host, idle) and its step counts, for ``/metrics``.
"""
from __future__ import annotations

import asyncio
import threading
import time
import weakref
from typing import Any


class Outbox:
    """Outputs on their way from the worker to one event loop. One wake-up of the loop carries everything emitted
    until it runs: a decode step's tokens for all its streams cost one wake-up, not one each (on a small machine
    every wake-up of the HTTP thread takes a core from the model's threads)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # (weak: the outbox is the value of a weak dictionary keyed by the loop)
        self._items: list[tuple[asyncio.Queue[Any], Any]] = []
        self._lock = threading.Lock()

    def put(self, outputs: asyncio.Queue[Any], item: Any) -> None:
        """Queue ``item`` for ``outputs`` (thread-safe; RuntimeError once the loop is closed)."""
        loop = self._loop()
        if loop is None or loop.is_closed():
            raise RuntimeError("the event loop is closed")
        with self._lock:
            self._items.append((outputs, item))
            if len(self._items) > 1:
                return  # a wake-up is already on its way
        loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:  # (on the loop)
        with self._lock:
            items, self._items = self._items, []
        for outputs, item in items:
            outputs.put_nowait(item)


_outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Outbox] = weakref.WeakKeyDictionary()
_outboxes_lock = threading.Lock()


def outbox_for(loop: asyncio.AbstractEventLoop) -> Outbox:
    with _outboxes_lock:
        box = _outboxes.get(loop)
        if box is None:
            box = _outboxes[loop] = Outbox(loop)
        return box


class WorkerClock:
    """Where the worker's time goes, in seconds per phase since it started (``/metrics`` shows them):
    ``prefill`` (prompt chunks through the model), ``decode`` (batched steps through the model), ``host`` (the rest
    of each turn: scheduling, sampling, detokenizing, handing events to the HTTP side), ``idle`` (waiting for work,
    warm-ups made while idle included), ``load`` (from the engine's start to the worker's: loading, the first
    warm-ups). ``steps`` counts decode steps, ``rows`` the sequences they ran and ``step_rows`` the rows they
    computed (a step's rows reach its highest slot: idle rows included)."""

    PHASES = ("prefill", "decode", "host", "idle", "load")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self.steps = 0
        self.rows = 0
        self.step_rows = 0  # rows the steps computed: up to the highest slot in use (idle rows included)
        self.chunks = 0
        self._mark = time.perf_counter()

    def lap(self, phase: str) -> None:
        """The time since the last lap was spent in ``phase``."""
        now = time.perf_counter()
        self.seconds[phase] += now - self._mark
        self._mark = now

"""What the model's worker thread hands to the HTTP side, and where its time goes.

``outbox_for(loop).put(queue, item, urgent)``: an output on its way from the worker to an asyncio queue on ``loop``;
one wake-up of the loop carries everything put until it runs. A stream's tokens in between its first and its last
are paced: the loop is woken for them at most every ``HANDOFF_INTERVAL_S`` (the worker's ``flush_outboxes()`` after
each turn sends what waited that long), an urgent output (a choice's first token or last event, an error, the end)
at once. ``WorkerClock``: the worker's seconds per phase (prefill, decode, host, idle) and its step counts, for
``/metrics``.
"""
from __future__ import annotations

import asyncio
import threading
import time
import weakref
from typing import Any

# seconds between two wake-ups of the event loop for tokens that are not urgent: one stream's 4 ms tokens woke the
# HTTP thread 250 times a second, each wake-up a thread switch that took a core from the model's kernels and the
# GIL from the worker (SmolLM2 through the server: 0.8x the engine's decode, ~10% of the worker's time in the
# hand-off); 50 ms is ~3-12 tokens per wake-up, 20 updates a second of a stream's text. Against 25 ms (serve.py,
# interleaved runs at load 4-7): a stream's decode times the worker's mean step 0.963/0.903/0.833 at 1/4/8 streams
# (median of 4 runs) against 0.931/0.856/0.812 (6 runs): the wake-ups, the SSE sends and the client's parses take
# CPU from the model's threads
HANDOFF_INTERVAL_S = 0.05


class Outbox:
    """Outputs on their way from the worker to one event loop. One wake-up of the loop carries everything emitted
    until it runs: a decode step's tokens for all its streams cost one wake-up, not one each, and a stream's tokens
    between its first and last are paced (see the module doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # (weak: the outbox is the value of a weak dictionary keyed by the loop)
        self._items: list[tuple[asyncio.Queue[Any], Any]] = []
        self._lock = threading.Lock()
        self._waking = False  # a wake-up is on its way (it carries whatever is put before it runs)
        self._woken_at = -HANDOFF_INTERVAL_S  # time.monotonic() of the last wake-up

    def put(self, outputs: asyncio.Queue[Any], item: Any, urgent: bool = True) -> None:
        """Queue ``item`` for ``outputs`` (thread-safe; RuntimeError once the loop is closed). Not ``urgent``: the
        loop is woken for it now only if the last wake-up was ``HANDOFF_INTERVAL_S`` ago, else by ``flush``."""
        loop = self._loop()
        if loop is None or loop.is_closed():
            raise RuntimeError("the event loop is closed")
        with self._lock:
            self._items.append((outputs, item))
            if not self._wake_now(urgent):
                return
        loop.call_soon_threadsafe(self._deliver)

    def flush(self, force: bool = False) -> None:
        """Wake the loop for the outputs held back, when the last wake-up was ``HANDOFF_INTERVAL_S`` ago (``force``:
        now, the worker is about to run something long)."""
        loop = self._loop()
        if not self._items or loop is None or loop.is_closed():
            return
        with self._lock:
            if not self._items or not self._wake_now(force):
                return
        loop.call_soon_threadsafe(self._deliver)

    def _wake_now(self, urgent: bool) -> bool:
        """(Under the lock, items waiting) whether to wake the loop now; if so, the wake-up is on its way."""
        if self._waking:
            return False
        now = time.monotonic()
        if not urgent and now - self._woken_at < HANDOFF_INTERVAL_S:
            return False
        self._waking, self._woken_at = True, now
        return True

    def _deliver(self) -> None:  # (on the loop)
        with self._lock:
            items, self._items = self._items, []
            self._waking = False
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


def flush_outboxes(force: bool = False) -> None:
    """``Outbox.flush`` of every loop's outbox (the worker, after each turn; ``force``: before a long one)."""
    with _outboxes_lock:
        boxes = list(_outboxes.values())
    for box in boxes:
        try:
            box.flush(force)
        except RuntimeError:  # (the loop closed meanwhile: its jobs are cancelled by their next emit)
            pass


class WorkerClock:
    """Where the worker's time goes, in seconds per phase since it started (``/metrics`` shows them):
    ``prefill`` (prompt chunks through the model), ``decode`` (batched steps through the model), ``host`` (the rest
    of each turn: scheduling, sampling, detokenizing, handing events to the HTTP side), ``idle`` (waiting for work,
    warm-ups made while idle included), ``gather`` (woken from idle, waiting for the requests sent with the first),
    ``load`` (from the engine's start to the worker's: loading, the first warm-ups). ``steps`` counts decode steps,
    ``rows`` the sequences they ran and ``step_rows`` the rows they computed (a step's rows reach its highest slot:
    idle rows included), ``steps_while_prefilling`` those run while a sequence in a slot waited for its prompt;
    ``chunks`` counts prompt chunks prefilled, ``prefill_forwards`` the forwards they ran in, ``swaps`` the slots that
    swapped caches to reuse a prompt prefix."""

    PHASES = ("prefill", "decode", "host", "idle", "gather", "load")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self.steps = 0
        self.rows = 0
        self.step_rows = 0  # rows the steps computed: up to the highest slot in use (idle rows included)
        self.chunks = 0
        self.prefill_forwards = 0  # forwards the chunks ran in (several prompts' chunks joined in one)
        self.steps_while_prefilling = 0  # decode steps run while a sequence in a slot was prefilling
        self.swaps = 0  # slots that swapped caches to reuse a cached prompt prefix (``Model.swap_sequences``)
        self._mark = time.perf_counter()

    def lap(self, phase: str) -> None:
        """The time since the last lap was spent in ``phase``."""
        now = time.perf_counter()
        self.seconds[phase] += now - self._mark
        self._mark = now

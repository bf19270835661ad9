"""What the server captures besides the first attention window's decode steps, and in which order: before ready while
the time allows, the rest while idle (``server_engine.Engine``).

In:  the model, the server's prefill chunk, how many prompts may join in one forward, the first window's position.
Out: ``plan(...)``: a list of calls, each making the captures (``tgcore.jit``) of one shape a request may run, so a
     request that runs it later compiles nothing: short prompts' prefill, one and several prompts of two chunks, then
     window by window the chunks of a long prompt and the decode steps of every row count.

Each call runs in the slot(s) caching the fewest tokens and empties them after: the worker makes them only while no
sequence runs.

``without_collections(freeze)``: the block runs with Python's cyclic garbage collector off; with ``freeze`` (the
long-lived ``tg serve llm`` process), when it ends without an error, what it made that is garbage already is
collected (objects made with the collector off stay in its youngest generation: a cheap pass) and the rest frozen
(``gc.freeze``): loading and a capture make objects that live as long as the model, and each full collection walked
all of them again to find nothing (SmolLM2 through ``tg serve llm --parallel 8`` at load 7-10: 3 of 0.3-0.6 s while
loading, one of 0.4-0.6 s every ~3 s of idle captures, one of 2.45 s while 8 streams decoded, each collecting 0-15
objects); frozen, a collection walks only what came after. Frozen objects are never collected: a process that loads
models and drops them (tests, a library user) leaves ``freeze`` off.

``release_freed_memory(model)``: after loading's warm-ups and after each idle one, the memory they freed goes back to
the system (this process's only: a pipeline's other ranks keep their C heaps' free pages).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import logging
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

# the prefill sizes of prompts that fit in one chunk (a prompt is padded to the next of them), captured at position 0
# while idle: 4-16 fused (small captures), 32 and 64 dense (prompts of 17-63 tokens; those up to the chunk size)
SHORT_PROMPT_PADDINGS = (4, 8, 16, 32, 64)


@contextlib.contextmanager
def without_collections(freeze: bool) -> Iterator[None]:
    """Run the block with the cyclic garbage collector off; with ``freeze``, after a block that ended without an
    error, collect its garbage and freeze the rest (see the module doc)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if freeze:
            gc.collect(0)
            gc.freeze()
    finally:
        if enabled:
            gc.enable()


def release_freed_memory(model: Any) -> None:
    """Give back the memory the warm-ups freed: the device's freed-buffer cache (what tgcore's captures do not keep
    aside) and the C heap's free pages (``free_cache``). A failure is logged, never raised: an optimisation."""
    from tgcore import Device
    try:
        Device(model.device).allocator.free_cache()
    except Exception:  # noqa: BLE001 - the server goes on with the memory it holds
        log.warning("releasing the memory the warm-ups freed failed", exc_info=True)


def plan(model: Any, chunk: int, batch: int, first: int) -> list[Callable[[], None]]:
    """The captures after the decode steps at position ``first`` (the first window's, made at load), first first."""
    limit = model.config.max_context
    calls: list[Callable[[], None]] = [functools.partial(short_prompt, model, n) for n in SHORT_PROMPT_PADDINGS
                                       if n <= min(chunk, limit - 1)]
    two = 2 * chunk <= limit - 1
    if two:
        calls.append(functools.partial(two_chunks, model, chunk))
    shapes = model.decode_shapes()
    long_windows = long_prompt_windows(model, chunk) if model.joins_prompts else []
    # (prompts of two chunks joining together: once the decode steps of their generations' first window are captured)
    joins_after = min((pos for _, pos in shapes if pos >= 2 * chunk), default=None) \
        if two and model.joins_prompts else None
    for window in sorted({pos + 1 for _, pos in shapes if pos != first}):  # (the windows a context reaches)
        if window in long_windows:  # (a long prompt's chunks there, then the steps after it)
            calls.append(functools.partial(long_prompt, model, chunk, window))
        calls += [functools.partial(model.warm_up, [s]) for s in shapes if s[1] == window - 1]
        if window - 1 == joins_after:
            calls += [functools.partial(joining, model, chunk, n) for n in range(2, batch + 1)]
    return calls


def emptiest_slot(model: Any) -> int:
    return min(range(model.sequences), key=lambda i: (len(model.tokens_of(i)), -i))


def short_prompt(model: Any, n: int) -> None:
    """The prefill of an ``n``-token prompt at position 0."""
    seq = emptiest_slot(model)
    model.forward_last([0] * n, 0, seq=seq)  # (its first call captures it)
    model.reset(seq)


def two_chunks(model: Any, chunk: int) -> None:
    """What a prompt of one to two chunks runs: ``chunk`` tokens at position 0 without logits, then the last chunk
    (padded as a whole one) at that position with them. Without it the first requests of a usual length paid two
    compiles and two captures (TTFT 1.4-2.3 s against 0.3 s for 128 tokens)."""
    seq = emptiest_slot(model)
    model.prefill([0] * chunk, 0, seq=seq)  # (the first call of each captures it)
    model.forward_last([0] * chunk, chunk, seq=seq)
    model.reset(seq)


def joining(model: Any, chunk: int, n: int) -> None:
    """What ``n`` prompts of two chunks joining together run (``two_chunks`` for one): their first chunks in one
    forward, then their last ones with logits."""
    slots = sorted(range(model.sequences), key=lambda i: (len(model.tokens_of(i)), -i))[:n]
    model.prefill_chunks([(seq, [0] * chunk, 0) for seq in slots])  # (the first call of each captures it)
    model.prefill_chunks([(seq, [0] * chunk, chunk) for seq in slots], logits=True)
    for seq in slots:
        model.reset(seq)


def whole_rows(chunk: int) -> int:
    """The rows a whole chunk runs (and a prompt's last chunk after its first: ``Model.forward_last``'s padding)."""
    from tg_llm.prefill import batch_padding
    return batch_padding([(0, [0] * chunk, 0)])


def long_prompt_windows(model: Any, chunk: int) -> list[int]:
    """The attention windows (``kv_cache.prefill_window``) of a prompt's chunks after its first, smallest first, as
    many as the model keeps captures of a chunk's prefill (``prefill.captures_kept``) beside the short prompts' and
    ``two_chunks``'s (a model whose chunks run dense keeps too few: none)."""
    from tg_llm.kv_cache import prefill_window
    from tg_llm.prefill import captures_kept
    whole, limit = whole_rows(chunk), model.config.max_context
    windows = sorted({prefill_window(limit, start + whole - 1) for start in range(whole, limit - whole + 1, whole)})
    room = captures_kept(model, whole) - len(SHORT_PROMPT_PADDINGS) - 1
    return windows[:max(0, room)]


def long_prompt(model: Any, chunk: int, window: int) -> None:
    """What a prompt's chunks run at attention window ``window``: a whole chunk without logits and the last one with
    them (padded as a whole one), at the chunk that ends the window."""
    from tg_llm import prefill
    whole = whole_rows(chunk)
    seq = emptiest_slot(model)
    start = min(window, model.config.max_context) - whole
    prefill.warm_up(model, seq, start, whole, None)
    prefill.warm_up(model, seq, start, whole, "last")

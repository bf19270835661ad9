"""A prefill's host side: which prompt chunks of which sequences run in one forward, and that forward's inputs.

In:  chunks (sequence, tokens, start position) of one or more sequences' prompts and the ``Model`` they run on.
Out: the chunks' keys and values in the model's caches, and the logits asked for (``Model.prefill_chunks``,
     ``Model.forward`` and its kin run here after their checks).

The graph itself is ``Model._prefill_graph`` (the model's layers); this module pads the chunks, records which slots
they write, builds the rotary rows, masks, cache writes and the logits' row picks on the host, and keeps the jitted
graph per kind of call (see the model's module docstring: prefill, several sequences' prefills).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tg_llm.kv_cache import prefill_window
from tg_llm.model import (
    BATCH_PREFILL_CAPTURES,
    DENSE_MIN_TOKENS,
    FUSED_PREFILL_CAPTURES,
    PREFILL_CAPTURES,
    PREFILL_CHUNK,
    Model,
)


def batch_padding(chunks: Sequence[tuple[int, Sequence[int], int]]) -> int:
    """The rows each sequence of a prefill runs: its token count padded to a power of two (at least 4), the largest
    of the chunks'."""
    return max(max(4, 1 << (len(tokens) - 1).bit_length()) for _, tokens, _ in chunks)


def prefill_chunks(model: Model, asked: Sequence[tuple[int, Sequence[int], int]],
                   logits: bool = False) -> np.ndarray | None:
    """``Model.prefill_chunks``: the checks, then the batches, then the chunks that run alone."""
    chunks = [(model._check_seq(int(s)), [int(t) for t in tokens], int(start)) for s, tokens, start in asked]
    if len({s for s, _, _ in chunks}) != len(chunks):
        raise ValueError("prefill_chunks: a sequence appears twice")
    for seq, tokens, start in chunks:
        if not 0 < len(tokens) <= PREFILL_CHUNK:
            raise ValueError(f"prefill_chunks: a chunk has {len(tokens)} tokens (1..{PREFILL_CHUNK})")
        model._check_room(start, len(tokens), seq)
    done: set[int] = set()
    last: dict[int, np.ndarray] = {}  # (with ``logits``) each sequence's last token's logits
    # batches of the chunks that run as many rows alone (the attention kernels' plans change with the rows)
    groups: dict[int, list[tuple[int, list[int], int]]] = {}
    for chunk in chunks:
        padded = batch_padding([chunk])
        if batchable(model, chunk, padded):
            groups.setdefault(padded, []).append(chunk)
    for together in groups.values():
        if len(together) < 2:
            continue
        for seq, _, start in together:
            model._truncate(seq, start)
        rows = run(model, together, "last" if logits else None)
        for i, (seq, tokens, _) in enumerate(together):
            model._tokens[seq] = model._tokens[seq] + tokens
            done.add(seq)
            if rows is not None:
                last[seq] = rows[i][-1]
    for seq, tokens, start in chunks:
        if seq not in done:
            last[seq] = model._run(tokens, start, "last" if logits else "none", seq)[-1:]
    return np.stack([last[seq].reshape(-1) for seq, _, _ in chunks]) if logits else None


def batch_partners(model: Model, lead: tuple[int, list[int], int], others: Sequence[tuple[int, list[int], int]],
                   most: int) -> list[int]:
    """The indices of up to ``most`` of the chunks ``others`` (sequence, tokens, start) that ``prefill_chunks`` runs
    in one forward with the chunk ``lead``, each then bitwise as alone: the same padded rows, a batch it takes."""
    padded = batch_padding([lead])
    if not batchable(model, lead, padded):
        return []
    return [i for i, c in enumerate(others) if batch_padding([c]) == padded and batchable(model, c, padded)][:most]


def batchable(model: Model, chunk: tuple[int, list[int], int], padded: int) -> bool:
    """Whether a chunk padded to ``padded`` rows runs in a batch as alone: where each row's products keep their
    order at any row count, the row lanes (at least 8 rows: whole groups of 8 share each weight load) or the dense
    GEMM (the fused float products' plans change with the rows), and where the batch fits (``fits_batch``)."""
    least = 8 if model._lane_prefill else DENSE_MIN_TOKENS
    return padded >= least and fits_batch(model, chunk, padded)


def captures_kept(model: Model, rows: int) -> int:
    """How many captures of one sequence's prefill of ``rows`` rows the model keeps per kind of result."""
    return PREFILL_CAPTURES if not model._lane_prefill and rows >= DENSE_MIN_TOKENS else FUSED_PREFILL_CAPTURES


def warm_up(model: Model, seq: int, start: int, rows: int, want: str | None) -> None:
    """Capture the prefill of ``rows`` tokens at ``start`` of sequence ``seq`` (what ``want`` asks for), as a prompt
    reaching there runs it, without prefilling the positions before: the sequence is taken to hold ``start`` tokens
    (their keys are whatever its cache holds: the outputs are dropped), then emptied."""
    model.reset(seq)
    model._tokens[seq] = [0] * start
    run(model, [(seq, [0] * rows, start)], want)
    model.reset(seq)


def fits_batch(model: Model, chunk: tuple[int, list[int], int], padded: int) -> bool:
    """Whether a chunk can run in a batch padded to ``padded`` rows per sequence (see ``Model.prefill_chunks``)."""
    seq, tokens, start = chunk
    return (len(tokens) > 1 and start + padded <= model.config.max_context and model._window_cached(start, seq)
            and all(start % kind.cache_len + padded <= kind.cache_len for kind in model.kinds))


def run(model: Model, chunks: list[tuple[int, list[int], int]], want: str | None,
        padding: int = 0) -> list[np.ndarray] | None:
    """Several tokens of one or more sequences in one forward: each chunk (sequence, tokens, start) padded to the
    same power of two of rows (``batch_padding``), attention over a power-of-two window of the cache, so
    prompts of many lengths and positions share a few compiled kernel sets (and jit captures, see the model's
    module docstring); at least ``padding`` rows per chunk. Returns each chunk's logits ``want`` asks for (None:
    none)."""
    from tgcore.tensor import Tensor
    from tgcore.uop import UOp
    solo = len(chunks) == 1
    padded = max(batch_padding(chunks), padding)
    if solo and chunks[0][2] + padded > model.config.max_context:  # the padding's writes must stay in the cache
        padded = len(chunks[0][1])

    def named(name: str, i: int) -> str:  # (one sequence keeps the names of its captures before batches)
        return name if solo else f"{name}{i}"
    # a variable names each sequence, so every sequence's prefill runs the same kernels
    seq_vars = [UOp.variable(named("sequence", i), 0, model.sequences - 1).bind(seq) if model.sequences > 1 else 0
                for i, (seq, _, _) in enumerate(chunks)]
    # padding rows: computed, written past the end, never read
    x = model._stage_input([t for _, tokens, _ in chunks for t in tokens + [tokens[-1]] * (padded - len(tokens))])
    last = max(start for _, _, start in chunks) + padded - 1
    inputs = []
    for kind in model.kinds:
        window = prefill_window(kind.cache_len, last)
        masks = []
        # (sequence, first slot: an int or a bound variable, first row, rows)
        writes: list[tuple[Any, Any, int, int]] = []
        for i, (seq, tokens, start) in enumerate(chunks):
            slot = kind.record(seq, start, len(tokens), padded)
            masks.append(kind.mask_rows(seq, start, len(tokens), padded, window))
            if slot + padded <= kind.cache_len:
                writes.append((seq_vars[i], UOp.variable(named(kind.variable, i), 0, kind.cache_len - padded)
                               .bind(slot), i * padded, padded))
            else:  # the ring wraps around inside this call (one sequence alone): two writes
                first = kind.cache_len - slot
                writes += [(seq_vars[i], slot, 0, first), (seq_vars[i], 0, first, padded - first)]
        cos, sin = model._rotary(kind, np.concatenate([np.arange(start, start + padded) for _, _, start in chunks]))
        inputs.append((cos, sin, Tensor(np.concatenate(masks), device=model.device), writes))
    pick = None
    if want == "last":  # a (chunks, rows) matrix that picks each chunk's last real token's hidden state
        rows = np.zeros((len(chunks), len(chunks) * padded), np.float32)
        for i, (_, tokens, _) in enumerate(chunks):
            rows[i, i * padded + len(tokens) - 1] = 1.0
        pick = Tensor(rows, device=model.device)
    dense = not model._lane_prefill and padded >= DENSE_MIN_TOKENS
    seqs = (seq_vars[0], seq_vars[0] + 1) if solo else seq_vars
    if all(not isinstance(first_slot, int) for *_, writes in inputs for _, first_slot, _, _ in writes):
        # every slot is a bound variable: a replay fits any start; jitted like decode (its scratch buffers
        # shared between layers), captured by the first call
        step = model._prefill_steps.get((want, dense, solo))
        if step is None:
            import tgcore
            captures = (PREFILL_CAPTURES if dense else FUSED_PREFILL_CAPTURES) if solo else BATCH_PREFILL_CAPTURES
            step = model._prefill_steps[want, dense, solo] = tgcore.jit(
                functools.partial(model._prefill_graph, want=want, dense=dense), max_captures=captures,
                capture_first=True)
    else:  # the ring wraps inside this call: the cache writes take constant slots, run eagerly
        step = functools.partial(model._prefill_graph, want=want, dense=dense)
    logit_rows = None if want is None else len(chunks) * (1 if want == "last" else padded)
    out = model._stage_output(step(x, inputs, pick, seqs), logit_rows)()
    if out is None:
        return None
    if want == "last":
        return [out[i:i + 1] for i in range(len(chunks))]
    return [out[i * padded:i * padded + len(tokens)] for i, (_, tokens, _) in enumerate(chunks)]

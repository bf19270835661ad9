"""Batched decode (``Model.decode``): several sequences, each with its own KV cache, one forward per step.

Checked against the float64 numpy reference of ``test_model`` (each sequence's logits are its own prompt's, not
a neighbour's), and for batch invariance: a sequence's logits are bitwise the same whether it decodes alone or
beside any other sequences (the batch-size buckets 1, 2 and 4 run different captured steps), and a sequence
that sits idle while others decode keeps its cache (its row writes only a position it has not reached).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from llm_testutil import smollm2_path
from test_model import reference

SEQUENCES = 4
MAX_CONTEXT = 64
STEPS = 3

_CACHE: dict[str, Any] = {}


def batch_model() -> Any:
    if "model" not in _CACHE:
        from tg_llm.model import Model
        # float products, like the numpy reference (the integer path's batch invariance: test_int_dot.py)
        _CACHE["model"] = Model.from_gguf(smollm2_path(), device="CPU", max_context=MAX_CONTEXT, sequences=SEQUENCES,
                                          int_dot=False)
    return _CACHE["model"]


def prompts() -> list[list[int]]:
    rng = np.random.default_rng(7)
    return [[int(t) for t in rng.integers(100, 40000, 3 + 4 * s)] for s in range(SEQUENCES)]


def run(model: Any, seqs: list[int], steps: int = STEPS) -> dict[int, list[np.ndarray]]:
    """Prefill each sequence's prompt, then decode ``steps`` greedy tokens for all of ``seqs`` together; the logits
    of every decode step per sequence."""
    ps = prompts()
    last = {}
    for s in seqs:
        model.reset(s)
        last[s] = model.forward_last(ps[s], 0, seq=s)
    tokens = {s: [int(np.argmax(last[s]))] for s in seqs}
    rows: dict[int, list[np.ndarray]] = {s: [] for s in seqs}
    for i in range(steps):
        out = model.decode([(s, tokens[s][-1], len(ps[s]) + i) for s in seqs])
        for s, row in zip(seqs, out, strict=True):
            rows[s].append(row.copy())
            tokens[s].append(int(np.argmax(row)))
    return rows


def test_batched_decode_matches_reference():
    model = batch_model()
    rows = run(model, [0, 3], steps=2)  # two rows apart in the 4-row step (the numpy reference is slow)
    ps = prompts()
    for s in (0, 3):
        ids = ps[s] + [int(np.argmax(model.forward_last(ps[s], 0, seq=s)))]
        ids.append(int(np.argmax(rows[s][0])))
        ref = reference().forward(ids)
        for i in range(2):
            got, want = rows[s][i], ref[len(ps[s]) + i]
            assert np.abs(got - want).max() < 1e-2, (s, i)
            assert int(np.argmax(got)) == int(np.argmax(want))


def test_batch_invariance():
    """Each sequence alone, then in batches of every size bucket: bitwise equal logits at every step."""
    model = batch_model()
    alone = {s: run(model, [s])[s] for s in range(SEQUENCES)}
    for seqs in ([0, 1], [3, 0, 2], [0, 1, 2, 3]):
        together = run(model, seqs)
        for s in seqs:
            for i in range(STEPS):
                np.testing.assert_array_equal(together[s][i], alone[s][i], err_msg=f"sequence {s} step {i} in {seqs}")


def test_idle_sequence_keeps_its_cache():
    """Sequence 1 stops after its prompt while 0 and 2 decode (its row runs idle in the step); it then goes on
    exactly as if nothing had run meanwhile."""
    model = batch_model()
    ps = prompts()
    model.reset(1)
    first = int(np.argmax(model.forward_last(ps[1], 0, seq=1)))
    straight = model.decode([(1, first, len(ps[1]))])[0].copy()
    model.reset(1)
    model.forward_last(ps[1], 0, seq=1)
    held = model.tokens_of(1)
    run(model, [0, 2], steps=3)
    assert model.tokens_of(1) == held
    np.testing.assert_array_equal(model.decode([(1, first, len(ps[1]))])[0], straight)


def test_decode_rejects_bad_steps():
    model = batch_model()
    model.reset()
    model.forward([5, 6, 7], 0, seq=2)
    with pytest.raises(ValueError, match="twice"):
        model.decode([(2, 1, 3), (2, 1, 3)])
    with pytest.raises(ValueError, match="sequence 9 does not exist"):
        model.decode([(9, 1, 0)])
    with pytest.raises(ValueError, match="gap"):
        model.decode([(2, 1, 5)])
    assert model.decode([]).shape == (0, model.vocab_size)


def test_batched_decode_after_warm_up_compiles_nothing():
    from tgcore.engine.realize import CompileCounter
    model = batch_model()
    run(model, [0, 1, 2, 3], steps=3)  # warm-up of the 4-row step (the first call captures it)
    before = CompileCounter.count
    run(model, [0, 1, 2, 3], steps=3)
    run(model, [2, 3], steps=3)
    assert CompileCounter.count == before

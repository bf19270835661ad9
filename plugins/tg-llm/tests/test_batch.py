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


def test_swapped_sequences_go_on_as_each_other():
    """Sequences 0 and 3 prefill prompts of different lengths, then swap (``Model.swap_sequences``, a copy on the host,
    no kernel compiled): each goes on bitwise as the other's prompt prefilled in its own slot would (one step of both,
    then a step alone), its tokens are the other's; an unknown sequence is refused."""
    from tgcore.engine.realize import CompileCounter
    model = batch_model()
    ps = prompts()
    short, long = ps[1], ps[2]

    def straight(prompt: list[int], seq: int) -> list[np.ndarray]:  # prefilled in ``seq`` itself, two steps
        model.reset(seq)
        token = int(np.argmax(model.forward_last(prompt, 0, seq=seq)))
        first = model.decode([(seq, token, len(prompt))])[0].copy()
        return [first, model.decode([(seq, int(np.argmax(first)), len(prompt) + 1)])[0].copy()]
    want = {0: straight(short, 0), 3: straight(long, 3)}
    model.reset()
    tokens = {3: int(np.argmax(model.forward_last(short, 0, seq=3))), 0: int(np.argmax(model.forward_last(long, 0)))}
    before = CompileCounter.count
    model.swap_sequences(3, 0)
    assert CompileCounter.count == before
    assert model.tokens_of(0) == short and model.tokens_of(3) == long
    both = model.decode([(0, tokens[3], len(short)), (3, tokens[0], len(long))])
    for seq, row in zip((0, 3), both, strict=True):
        np.testing.assert_array_equal(row, want[seq][0], err_msg=f"sequence {seq}")
    np.testing.assert_array_equal(model.decode([(3, int(np.argmax(both[1])), len(long) + 1)])[0], want[3][1])
    with pytest.raises(ValueError, match="sequence 4 does not exist"):
        model.swap_sequences(0, 4)


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


def int_model() -> Any:
    """The bundled file on the integer path: every product takes the row lanes, so prefills run through them too."""
    if "int" not in _CACHE:
        from tg_llm.model import Model
        _CACHE["int"] = Model.from_gguf(smollm2_path(), device="CPU", max_context=MAX_CONTEXT, sequences=SEQUENCES)
    return _CACHE["int"]


# (first chunk, second chunk) per sequence: 0, 1 and 3 share the first chunk's size, 0 and 1 the second's (a forward
# for each such batch: the float model's dense products from 32 rows), 2's first chunk pads to 16 rows (alone on the
# float model: its fused products' plans change with the rows) and its second is one token (a decode step alone), 3's
# second pads to 4 rows (alone: the attention's plans change with the rows)
CHUNKS = ((32, 20), (32, 17), (13, 1), (32, 3))


def chunked_prompts() -> list[list[int]]:
    rng = np.random.default_rng(11)
    return [[int(t) for t in rng.integers(100, 40000, a + b)] for a, b in CHUNKS]


@pytest.mark.parametrize("integer", [False, True], ids=["float", "int-dot"])
def test_prefill_chunks_match_each_alone(integer):
    """Two turns of chunks of 4 sequences through ``prefill_chunks`` (the second with logits), then one decode step:
    each sequence's logits bitwise those of its chunks run alone (``prefill``, ``forward_last``), and close to the
    float64 reference."""
    model = int_model() if integer else batch_model()
    ps = chunked_prompts()
    alone = []
    for s, (a, _) in enumerate(CHUNKS):
        model.reset(s)
        model.prefill(ps[s][:a], 0, seq=s)
        last = model.forward_last(ps[s][a:], a, seq=s).copy()
        alone.append((last, model.decode([(s, int(np.argmax(last)), len(ps[s]))])[0].copy()))
    model.reset()
    assert model.prefill_chunks([(s, ps[s][:a], 0) for s, (a, _) in enumerate(CHUNKS)]) is None
    last = model.prefill_chunks([(s, ps[s][a:], a) for s, (a, _) in enumerate(CHUNKS)], logits=True)
    assert any(not solo for _, _, solo in model._prefill_steps)  # (sequences 0 and 1 ran in one forward)
    assert all(model.tokens_of(s) == ps[s] for s in range(SEQUENCES))
    steps = model.decode([(s, int(np.argmax(last[s])), len(ps[s])) for s in range(SEQUENCES)])
    for s in range(SEQUENCES):
        np.testing.assert_array_equal(last[s], alone[s][0], err_msg=f"sequence {s}'s last chunk")
        np.testing.assert_array_equal(steps[s], alone[s][1], err_msg=f"sequence {s}'s next step")
    ref = reference().forward(ps[0])[-1]
    assert np.abs(last[0] - ref).max() < (0.05 if integer else 1e-2) * np.abs(ref).max()


def test_eight_prompts_joined_in_one_forward_match_each_alone(monkeypatch):
    """The server's largest joined prefill (``server_engine.PREFILL_BATCH`` 8): the two 16-token chunks of 8 prompts on
    the integer path, each turn one forward of all 8: every sequence's last logits bitwise those of its chunks run
    alone."""
    from tg_llm import prefill
    from tg_llm.model import Model
    from tg_llm.server_engine import PREFILL_BATCH
    n = PREFILL_BATCH
    forwards: list[int] = []
    run = prefill.run
    monkeypatch.setattr(prefill, "run", lambda model, chunks, *a, **k: (forwards.append(len(chunks)),
                                                                         run(model, chunks, *a, **k))[1])
    model = Model.from_gguf(smollm2_path(), device="CPU", max_context=MAX_CONTEXT, sequences=n)
    try:
        rng = np.random.default_rng(13)
        ps = [[int(t) for t in rng.integers(100, 40000, 32)] for _ in range(n)]
        alone = []
        for s in range(n):
            model.reset(s)
            model.prefill(ps[s][:16], 0, seq=s)
            alone.append(model.forward_last(ps[s][16:], 16, seq=s).copy())
        model.reset()
        forwards.clear()
        model.prefill_chunks([(s, ps[s][:16], 0) for s in range(n)])
        last = model.prefill_chunks([(s, ps[s][16:], 16) for s in range(n)], logits=True)
        assert forwards == [n, n]
        for s in range(n):
            np.testing.assert_array_equal(last[s], alone[s], err_msg=f"sequence {s}")
    finally:
        model.close()


def test_prefill_chunks_rejects_bad_chunks():
    model = batch_model()
    model.reset()
    with pytest.raises(ValueError, match="twice"):
        model.prefill_chunks([(1, [5, 6], 0), (1, [7, 8], 0)])
    with pytest.raises(ValueError, match="0 tokens"):
        model.prefill_chunks([(1, [], 0)])
    with pytest.raises(ValueError, match="gap"):
        model.prefill_chunks([(2, [5, 6], 3)])


def test_token_lists_handed_out_stay_as_they_were():
    """``tokens_of`` and ``cached_tokens`` hand out copies: a list held while its sequence decodes does not grow with it
    (a decode step appends to the sequence's own list in place)."""
    model = batch_model()
    ps = prompts()
    model.reset()
    model.forward_last(ps[0], 0, seq=0)
    held, cached = model.tokens_of(0), model.cached_tokens
    model.decode([(0, 800, len(ps[0]))])
    assert held == ps[0] and cached == ps[0] and model.tokens_of(0) == ps[0] + [800]


def test_logits_kept_by_the_caller_are_not_overwritten():
    """A decode step writes its logits into an array it hands out without a copy (``HeldOutputs``): one the caller
    still holds is never written again, whichever steps follow (more than the arrays kept: copies)."""
    import tg_llm.step_inputs as step_inputs
    model = batch_model()
    ps = prompts()
    for s in (0, 1):
        model.reset(s)
        model.forward_last(ps[s], 0, seq=s)
    kept, copies = [], []
    for i in range(step_inputs.OUTPUTS_KEPT + 2):
        out = model.decode([(s, 500 + i, len(ps[s]) + i) for s in (0, 1)])
        kept.append(out)
        copies.append(out.copy())
    for i, (out, copy) in enumerate(zip(kept, copies, strict=True)):
        np.testing.assert_array_equal(out, copy, err_msg=f"step {i}")
    assert not np.array_equal(kept[0], kept[1])


def test_a_step_of_fewer_rows_than_it_runs_hands_out_a_view():
    """Sequences 0..2 run in a step of 4 rows (the next power of two): their logits are the first 3 rows of the step's
    array, not a copy (3 rows x 192 KiB copied out of caches the step's kernels had filled), and a kept view is never
    written again either; out of order or with a gap between them, a copy (the rows they ask for)."""
    model = batch_model()
    ps = prompts()
    for s in range(3):
        model.reset(s)
        model.forward_last(ps[s], 0, seq=s)
    kept, copies = [], []
    for i in range(3):
        out = model.decode([(s, 600 + i, len(ps[s]) + i) for s in range(3)])
        assert out.shape == (3, model.vocab_size) and out.base is not None and out.base.size == 4 * model.vocab_size
        kept.append(out)
        copies.append(out.copy())
    for out, copy in zip(kept, copies, strict=True):
        np.testing.assert_array_equal(out, copy)
    out = model.decode([(2, 700, len(ps[2]) + 3), (0, 701, len(ps[0]) + 3)])  # (rows 2 and 0: a copy, in that order)
    assert out.shape == (2, model.vocab_size) and out.base is None
    out = model.decode([(0, 702, len(ps[0]) + 4), (2, 703, len(ps[2]) + 4)])  # (rows 0 and 2, a gap: a copy)
    assert out.shape == (2, model.vocab_size) and out.base is None

"""Sampling on a logits row (numpy) and stop handling, against hand-computed values and statistics
with fixed seeds."""
from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import pytest
from tg_llm import Sampler, SamplingParams, StopChecker
from tg_llm.sampling import apply_penalties, filter_mask, penalised_values


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(np.asarray(x, dtype=np.float64) - np.max(x))
    return e / e.sum()


def draws(logits, params, n, seed=0) -> np.ndarray:
    s = Sampler(seed)
    return np.array([s.sample(logits, params).token for _ in range(n)])


LOGITS4 = np.log(np.array([0.5, 0.3, 0.15, 0.05]))


def test_greedy_is_argmax():
    rng = np.random.default_rng(0)
    for _ in range(50):
        logits = rng.normal(size=1000).astype(np.float32)
        assert Sampler(1).sample(logits, SamplingParams(temperature=0)).token == int(np.argmax(logits))


@pytest.mark.parametrize("temperature", [1e-40, 1e-300, 1e-320])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_tiny_temperature_picks_the_best_token(temperature, dtype):
    """A temperature far below 1e-6 (the API accepts any in [0, 2]) samples the argmax, as its limit does: the
    quotients overflowed float32 to inf and the draw raised, failing every request of the server's batch."""
    logits = np.random.default_rng(7).normal(size=300).astype(dtype) * 5
    for params in (SamplingParams(temperature=temperature), SamplingParams(temperature=temperature, top_k=40)):
        assert Sampler(1).sample(logits, params).token == int(np.argmax(logits))


def test_same_seed_same_tokens():
    logits = np.random.default_rng(3).normal(size=500)
    p = SamplingParams(temperature=0.9, top_p=0.95)
    a, b, c = Sampler(42), Sampler(42), Sampler(43)
    seq_a = [a.sample(logits, p).token for _ in range(100)]
    assert seq_a == [b.sample(logits, p).token for _ in range(100)]
    assert seq_a != [c.sample(logits, p).token for _ in range(100)]


def test_temperature_one_matches_softmax_frequencies():
    n = 20000
    counts = np.bincount(draws(LOGITS4, SamplingParams(), n), minlength=4) / n
    assert np.allclose(counts, [0.5, 0.3, 0.15, 0.05], atol=0.015)


def test_temperature_scales_logits():
    n = 20000
    counts = np.bincount(draws(LOGITS4, SamplingParams(temperature=2.0), n, seed=5), minlength=4) / n
    assert np.allclose(counts, softmax(LOGITS4 / 2.0), atol=0.015)


def test_top_k_restricts_support():
    logits = np.random.default_rng(4).normal(size=100)
    top = set(np.argsort(-logits)[:5].tolist())
    seen = set(draws(logits, SamplingParams(temperature=3.0, top_k=5), 3000, seed=1).tolist())
    assert seen == top  # only the top 5, and (at a high temperature) all of them
    freq = np.bincount(draws(LOGITS4, SamplingParams(top_k=2), 20000, seed=2), minlength=4) / 20000
    assert np.allclose(freq, [0.5 / 0.8, 0.3 / 0.8, 0, 0], atol=0.015)


def test_top_p_keeps_smallest_set_reaching_p():
    probs = softmax(LOGITS4)
    assert filter_mask(probs, top_p=0.8).tolist() == [True, True, False, False]  # 0.5 + 0.3 reaches 0.8
    assert filter_mask(probs, top_p=0.81).tolist() == [True, True, True, False]
    assert filter_mask(probs, top_p=0.4).tolist() == [True, False, False, False]  # always at least one
    freq = np.bincount(draws(LOGITS4, SamplingParams(top_p=0.81), 20000, seed=3), minlength=4) / 20000
    assert freq[3] == 0
    assert np.allclose(freq[:3], np.array([0.5, 0.3, 0.15]) / 0.95, atol=0.015)


def test_min_p_relative_to_best():
    probs = softmax(LOGITS4)
    assert filter_mask(probs, min_p=0.2).tolist() == [True, True, True, False]  # keep p >= 0.1
    assert filter_mask(probs, min_p=0.7).tolist() == [True, False, False, False]  # keep p >= 0.35
    seen = set(draws(LOGITS4, SamplingParams(min_p=0.2), 5000, seed=4).tolist())
    assert seen == {0, 1, 2}


def test_filters_compose_top_k_then_top_p():
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    # top_k=3 -> {0,1,2} with mass 0.9; top_p=0.7 of that (0.63) -> {0,1}
    assert filter_mask(probs, top_k=3, top_p=0.7).tolist() == [True, True, False, False]
    for top_p, min_p in ((0.5, 0.1), (0.5, 0.0), (1.0, 0.1)):  # nothing of positive probability: nothing kept
        assert not filter_mask(np.zeros(4), top_p=top_p, min_p=min_p).any()


def test_top_k_support_is_the_full_vocabulary_filter():
    """The sampler filters only the top-k candidates (not the whole vocabulary's distribution): the tokens it can
    draw and their weights are those of the filters over the whole vocabulary, sorting everything
    (``reference_candidates``), across top-k, top-p and min-p settings."""
    from tg_llm.sampling import _candidates
    rng = np.random.default_rng(6)
    for k, p, m in [(40, 0.95, 0.05), (5, 1.0, 0.0), (40, 0.5, 0.0), (200, 1.0, 0.3), (1, 0.9, 0.1)]:
        logits = rng.normal(size=5000) * 3
        for temperature, dtype in itertools.product((0.5, 1.0, 1.7), (np.float64, np.float32)):
            params = SamplingParams(temperature=temperature, top_k=k, top_p=p, min_p=m)
            logits = logits.astype(dtype).astype(np.float64)
            expected, expected_weights = reference_candidates(logits, params)
            ids, weights = _candidates(logits.astype(dtype), params)
            assert ids.tolist() == expected.tolist()
            assert np.allclose(weights / weights.sum(), expected_weights / expected_weights.sum())


def test_repetition_penalty_llama_style():
    logits = np.array([2.0, -2.0, 1.0, 0.5])
    out = apply_penalties(logits, [0, 1, 1, 3], repetition_penalty=2.0)
    assert out.tolist() == [1.0, -4.0, 1.0, 0.25]  # positive / 2, negative * 2, once per token


def test_frequency_presence_penalty_openai():
    logits = np.array([2.0, -2.0, 1.0, 0.5])
    out = apply_penalties(logits, [0, 1, 1, 3, 1], frequency_penalty=0.5, presence_penalty=0.25)
    # token 0: once, token 1: three times, token 2: never, token 3: once
    expected = [2.0 - 0.5 - 0.25, -2.0 - 1.5 - 0.25, 1.0, 0.5 - 0.5 - 0.25]
    assert np.allclose(out, expected)
    assert apply_penalties(logits, []).tolist() == logits.tolist()
    for none in (penalised_values(logits, [0]), penalised_values(logits, [], frequency_penalty=0.5)):
        for shared in none:  # (the empty results are shared arrays: a caller cannot change them)
            assert shared.size == 0 and not shared.flags.writeable


def test_penalty_changes_greedy_choice():
    logits = np.array([3.0, 2.5, 0.0])
    greedy = SamplingParams(temperature=0)
    assert Sampler().sample(logits, greedy, history=[0]).token == 0
    assert Sampler().sample(logits, SamplingParams(temperature=0, repetition_penalty=1.5), history=[0]).token == 1
    assert Sampler().sample(logits, SamplingParams(temperature=0, presence_penalty=0.6), history=[0]).token == 1
    with pytest.raises(ValueError, match="outside"):
        apply_penalties(logits, [7], repetition_penalty=1.1)


def test_logprobs_of_choice_and_top_alternatives():
    logits = np.array([1.0, 3.0, 2.0, -1.0, 0.5])
    expected = np.log(softmax(logits))
    s = Sampler(0).sample(logits, SamplingParams(temperature=0, logprobs=3, repetition_penalty=2.0), history=[1])
    assert s.token == 2  # 3.0 / 2 < 2.0
    assert math.isclose(s.logprob, expected[2], rel_tol=1e-12)  # the model's log-probability, unpenalised
    assert [t for t, _ in s.top] == [1, 2, 0]
    assert np.allclose([lp for _, lp in s.top], expected[[1, 2, 0]])
    assert Sampler(0).sample(logits).top == []


def reference_candidates(x: np.ndarray, p: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The tokens temperature, top-k, top-p and min-p leave of the (penalised, float64) logits ``x`` and their
    unnormalised weights: the module doc's steps over the whole vocabulary, sorting everything."""
    with np.errstate(over="ignore"):
        z = x / p.temperature
    ids = np.arange(x.shape[0])
    if p.top_k and p.top_k < x.shape[0]:  # the k best and their ties
        ids = np.flatnonzero(z >= np.sort(z)[-p.top_k])
    top = z[ids].max()
    # (quotients that overflow: the best tokens alone)
    weights = np.exp(z[ids] - top) if np.isfinite(top) else (x[ids] == x[ids].max()).astype(np.float64)
    probs = weights / weights.sum()
    keep = probs > 0
    if p.top_p < 1.0:  # the smallest set of most likely tokens (ties: the lower id first) reaching top_p
        order = np.lexsort((np.arange(probs.shape[0]), -probs))
        cumulative = np.cumsum(probs[order]) / probs.sum()
        reached = np.flatnonzero(cumulative >= p.top_p * (1 - 1e-9))
        cut = reached[0] + 1 if reached.size else probs.shape[0]
        nucleus = np.zeros_like(keep)
        nucleus[order[:cut]] = True
        keep &= nucleus
    if p.min_p > 0.0:
        keep &= probs >= p.min_p * probs[keep].max()
    ids, weights = ids[keep], weights[keep]
    return ids, weights


def reference_sample(logits: np.ndarray, p: SamplingParams, history: list[int],
                     rng: np.random.Generator) -> tuple[int, float, list[tuple[int, float]]]:
    """The module doc's steps written out plainly in float64 over the whole vocabulary (sorting everything, no
    shortcuts), drawing as ``Sampler`` does: (token, the model's log-probability of it, the ``logprobs`` best)."""
    row = np.asarray(logits)
    x = row.astype(np.float64)
    window = history[max(0, len(history) - p.repeat_last_n):] if p.repeat_last_n > 0 else history
    window = window if p.repeat_last_n else []
    for t in sorted(set(window)):
        if p.repetition_penalty != 1.0:
            x[t] = x[t] / p.repetition_penalty if x[t] > 0 else x[t] * p.repetition_penalty
        x[t] -= window.count(t) * p.frequency_penalty + p.presence_penalty
    if p.temperature == 0:
        token = int(np.argmax(x))
    else:
        ids, weights = reference_candidates(x, p)
        cumulative = np.cumsum(weights)
        i = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
        token = int(ids[min(i, ids.shape[0] - 1)])
    shifted = row.astype(np.float64) - row.max()
    logprobs = shifted - np.log(np.sum(np.exp(shifted)))
    best = np.lexsort((np.arange(row.shape[0]), -row))[:p.logprobs]  # by logit, ties: the lower id first
    return token, float(logprobs[token]), [(int(t), float(logprobs[t])) for t in best]


def random_logits(rng: np.random.Generator, n: int, dtype: type) -> np.ndarray:
    """Logits of one of several shapes: many exact ties, a few far-apart values, -inf entries, float32 extremes."""
    kind = rng.integers(6)
    if kind == 0:
        row = np.round(rng.normal(size=n) * 8) / 4  # many exact ties
    elif kind == 1:
        row = rng.normal(size=n) * 3
        row[rng.integers(0, n, 4)] = rng.normal(size=4) * 30 + 20  # a few far ahead
    elif kind == 2:
        row = rng.normal(size=n) * 5
        row[rng.random(n) < 0.3] = -np.inf
    elif kind == 3:
        row = rng.uniform(-3e38, 3e38, size=n)  # (float32's extremes: exp of their differences underflows to 0)
    elif kind == 4:
        row = np.full(n, float(np.finfo(np.float32).min))  # float32's lowest (and sometimes a few above)
        row[rng.integers(0, n, 3 * rng.integers(2))] = -3e38
    else:
        row = np.full(n, 1.5)  # all equal
        row[rng.integers(0, n, 3)] = 2.0
    return row.astype(dtype)


SETTINGS = [
    dict(temperature=0), dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05), dict(temperature=1.0),
    dict(temperature=0.7, top_k=5), dict(temperature=1.3, top_p=0.5), dict(temperature=0.9, min_p=0.2),
    dict(temperature=0.8, top_k=40, repetition_penalty=1.3, repeat_last_n=8),
    dict(temperature=0, presence_penalty=0.5, frequency_penalty=0.25),
    dict(temperature=0.9, top_k=3, min_p=0.2, repetition_penalty=0.8, repeat_last_n=0),
    dict(temperature=0.6, top_k=2, top_p=0.3, repetition_penalty=1.5, frequency_penalty=-0.5, presence_penalty=2),
    dict(temperature=0.8, top_k=100_000, top_p=1.0, min_p=0.0),  # k larger than the vocabulary
    dict(temperature=1e-7, top_k=40, top_p=0.9), dict(temperature=1e-30, top_k=10), dict(temperature=1e-30),
    dict(temperature=2e6, top_k=7, min_p=1e-300), dict(temperature=1e6, min_p=1e-150),
    dict(temperature=0.5, top_p=0.999999, min_p=0.999),
    dict(temperature=0.8, top_k=1), dict(temperature=0.8, min_p=1.0),
    dict(temperature=0.8, top_k=20, top_p=0.2, min_p=1.0),
    dict(temperature=1.1, top_k=700, top_p=0.97, repetition_penalty=1.2),
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, logprobs=5, logprob=True),
    dict(temperature=0, logprobs=20, logprob=True, repetition_penalty=1.1, repeat_last_n=64),
]


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_samples_match_a_plain_reference_of_every_step(setting):
    """Tokens, the chosen token's log-probability and the top alternatives equal those of the plain computation
    (bit for bit: a seeded server answer does not depend on how the sampler finds them), over vocabularies small
    and large (the group bound of ``top_ids`` with and without left-over values), float32 and float64 rows."""
    p = SamplingParams(**setting)
    rng = np.random.default_rng(sum(map(ord, str(setting))))
    for trial in range(24):
        n = int(rng.choice([7, 700, 3001, 20_000, 49_152]))
        dtype = np.float32 if trial % 3 else np.float64
        logits = random_logits(rng, n, dtype)
        history = [int(t) for t in rng.integers(0, n, int(rng.integers(0, 80)))]
        history += [int(t) for t in np.argsort(-logits)[:rng.integers(0, 12)]]  # (the best tokens: the likeliest)
        history += history[:5]  # (repeats: frequency counts above one)
        sampler, reference = Sampler(trial), np.random.default_rng(trial)
        for _ in range(4):
            sample = sampler.sample(logits, p, history)
            token, logprob, top = reference_sample(logits, p, history, reference)
            assert sample.token == token, (trial, n, dtype)
            if p.logprob or p.logprobs:
                assert sample.logprob == logprob or (math.isnan(logprob) and math.isnan(sample.logprob))
                assert [t for t, _ in sample.top] == [t for t, _ in top]
                assert np.array_equal([lp for _, lp in sample.top], [lp for _, lp in top], equal_nan=True)
            else:
                assert sample.logprob is None and sample.top == []


def test_min_p_at_a_weight_matches_the_reference():
    """Min-p alone decides from the weights without the vocabulary's total, except for a weight too close to
    ``min_p`` to call: there (min_p a token's weight, or one rounding step off it) it must fall back and still
    keep what the plain computation keeps."""
    rng = np.random.default_rng(11)
    for trial in range(12):
        logits = random_logits(rng, 5000, np.float32)
        if not np.isfinite(logits.max()) or trial % 4 == 3:
            logits = (rng.normal(size=5000) * 4).astype(np.float32)
        temperature = float(rng.choice([0.5, 1.0, 1.7]))
        x = logits.astype(np.float64) / temperature
        weight = np.exp(x - x.max())
        at = float(np.sort(weight)[-int(rng.integers(2, 40))])
        for min_p in (at, np.nextafter(at, 0), np.nextafter(at, 1), at * (1 + 1e-13), at * (1 - 1e-9), at * 1.01):
            p = SamplingParams(temperature=temperature, min_p=min(float(min_p), 1.0))
            for seed in range(3):
                token = Sampler(seed).sample(logits, p).token
                assert token == reference_sample(logits, p, [], np.random.default_rng(seed))[0], (trial, min_p)


@pytest.mark.filterwarnings("error")
def test_min_p_alone_at_float32_lowest():
    """Min-p's logit threshold below float32's lowest logit is no overflow warning (the comparison is in float32)."""
    logits = np.full(50, np.finfo(np.float32).min, np.float32)
    logits[7] = -3.3e38
    for row in (logits, np.full(50, np.finfo(np.float32).min, np.float32)):
        p = SamplingParams(temperature=1e6, min_p=1e-150)
        assert Sampler(3).sample(row, p).token == reference_sample(row, p, [], np.random.default_rng(3))[0]


@pytest.mark.parametrize("n", [1, 5, 640, 641, 4099, 49_152])
def test_top_ids_are_the_k_best_and_their_ties(n):
    from tg_llm.sampling import top_ids
    rng = np.random.default_rng(n)
    for k in (1, 2, 40, 300, n - 1, n, n + 5):
        if k < 1:
            continue
        for row in (random_logits(rng, n, np.float32), random_logits(rng, n, np.float64)):
            expected = np.flatnonzero(row >= np.sort(row)[-min(k, n)])
            assert top_ids(row, k).tolist() == expected.tolist(), (n, k)
            first = np.sort(np.lexsort((np.arange(n), -row))[:k])  # (by value, then id: the first k)
            assert top_ids(row, k, ties=False).tolist() == first.tolist(), (n, k)
    if n > 640:  # the best values all in one of ``top_ids``' groups (a column of its view), ties everywhere else
        for k in (2, 5, 40):
            row = np.zeros(n, np.float32)
            depth = min(64, n // (8 * k))
            row[::n // depth][:depth] = np.arange(depth, 0, -1)
            assert top_ids(row, k).tolist() == np.flatnonzero(row >= np.sort(row)[-k]).tolist(), (n, k)
            assert top_ids(row, k, ties=False).tolist() == np.sort(np.lexsort((np.arange(n), -row))[:k]).tolist()


def test_top_p_and_top_logprobs_sort_few_candidates_when_most_values_tie(monkeypatch):
    """Most probabilities 0 (a low temperature) or most logits -inf (a masked row): every value ties with the k-th,
    and top-p and the top alternatives still sort only the first k of the order (the result is the reference's)."""
    from tg_llm import sampling
    sizes = []

    def counted(row, k, **ties):
        ids = top_ids(row, k, **ties)
        sizes.append(ids.shape[0])
        return ids
    top_ids = sampling.top_ids
    monkeypatch.setattr(sampling, "top_ids", counted)
    n = 49_152
    rng = np.random.default_rng(5)
    real = (rng.normal(size=n) * 2.5).astype(np.float32)
    real[:20] += 12
    masked = np.full(n, -np.inf, np.float32)
    masked[[7, 90, 4000]] = [1, 2, 3]
    for row, setting in ((real, dict(temperature=0.005, top_p=0.95)), (masked, dict(temperature=1.0, top_p=0.9)),
                         (masked, dict(temperature=0, logprobs=5))):
        p = SamplingParams(**setting)
        sizes.clear()
        sample = Sampler(1).sample(row, p, [])
        assert sizes and max(sizes) <= sampling.NUCLEUS_FIRST, (setting, sizes)
        token, _, top = reference_sample(row, p, [], np.random.default_rng(1))
        assert sample.token == token and [t for t, _ in sample.top] == [t for t, _ in top]
    # a flat distribution: the best 256, 2048, then (16384 being a third of the vocabulary) one sort of all
    flat = (rng.normal(size=n) * 0.01).astype(np.float32)
    p = SamplingParams(temperature=1.0, top_p=0.95)
    sizes.clear()
    assert Sampler(2).sample(flat, p).token == reference_sample(flat, p, [], np.random.default_rng(2))[0]
    assert sizes == [256, 2048]


def test_logprob_only_when_asked():
    logits = np.array([1.0, 3.0, 2.0, -1.0, 0.5], np.float32)
    expected = np.log(softmax(logits.astype(np.float64)))
    asked = Sampler(0).sample(logits, SamplingParams(temperature=0.5, logprob=True))
    assert asked.logprob is not None and math.isclose(asked.logprob, expected[asked.token], rel_tol=1e-12)
    assert asked.top == []
    assert Sampler(0).sample(logits, SamplingParams(temperature=0.5)).logprob is None


def test_params_validation():
    for bad in (dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(min_p=2), dict(top_k=-1),
                dict(repetition_penalty=0), dict(frequency_penalty=3), dict(logprobs=-1)):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    for name in ("temperature", "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"):
        for value in (math.inf, -math.inf, math.nan):
            with pytest.raises(ValueError, match=f"{name} must be a finite number"):
                SamplingParams(**{name: value})
    with pytest.raises(ValueError, match="one row"):
        Sampler().sample(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        Sampler().sample(np.array([0.0, np.nan]))


def run_chunks(checker: StopChecker, chunks: list[str]) -> tuple[str, bool, list[str]]:
    shown = []
    for chunk in chunks:
        text, stop = checker.feed(chunk)
        shown.append(text)
        if stop:
            return "".join(shown), True, shown
    shown.append(checker.flush())
    return "".join(shown), False, shown


def splits(text: str, parts: int):
    for cuts in itertools.combinations(range(1, len(text)), parts - 1):
        bounds = (0, *cuts, len(text))
        yield [text[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize("text,stops,expected", [
    ("Hello world STOP more text", ["STOP"], "Hello world "),
    ("xxabaabacyy", ["abac"], "xxaba"),  # a partial match ("aba") that fails, then the real one
    ("one\n\nUser: hi", ["\n\nUser:", "###"], "one"),
    ("a ### b \n\nUser:", ["\n\nUser:", "###"], "a "),  # the earliest stop string wins
    ("no stop in here", ["STOP", "xyz"], None),
    ("ends with a prefix ST", ["STOP"], None),
])
def test_stop_checker_exhaustive_over_split_points(text, stops, expected):
    for parts in (1, 2, 3):
        for chunks in splits(text, parts):
            shown, stopped, pieces = run_chunks(StopChecker(stops), chunks)
            if expected is None:
                assert (shown, stopped) == (text, False), chunks
            else:
                assert (shown, stopped) == (expected, True), chunks
            for i in range(1, len(pieces) + 1):  # no prefix of the stream shows any stop string
                assert not any(s in "".join(pieces[:i]) for s in stops)
    shown, stopped, _ = run_chunks(StopChecker(stops), list(text))  # one character at a time
    assert shown == (text if expected is None else expected) and stopped == (expected is not None)


def test_stop_checker_holds_back_only_possible_prefixes():
    c = StopChecker(["STOP"])
    assert c.feed("Hello S") == ("Hello ", False)  # "S" might start STOP
    assert c.feed("T") == ("", False)
    assert c.feed("ART") == ("START", False)  # "STA" cannot: released
    assert c.feed("ST") == ("", False)
    assert c.feed("OP!") == ("", True)
    assert c.matched == "STOP"
    assert c.feed("more") == ("", True) and c.flush() == ""


def test_stop_checker_stop_tokens():
    c = StopChecker(["</end>"], stop_ids={2, 7})
    assert c.feed_token(10, "text </") == ("text ", False)
    assert c.feed_token(7, "<|im_end|>") == ("</", True)  # held text is released, the token's text is not
    assert c.matched == 7
    c2 = StopChecker(stop_ids=[2])
    assert c2.feed_token(5, "abc") == ("abc", False)
    assert c2.flush() == ""


# ---- penalty window and the defaults a server request gets ----

def test_repeat_last_n_window():
    """Penalties look at the last repeat_last_n tokens of the history (-1: all of it, 0: none)."""
    logits = np.array([2.0, 1.9, 0.0])
    history = [0, 2]  # token 0 is the older one

    def greedy(last_n: int) -> int:
        p = SamplingParams(temperature=0, repetition_penalty=2.0, repeat_last_n=last_n)
        return Sampler(0).sample(logits, p, history).token
    assert greedy(-1) == 1 and greedy(2) == 1  # token 0 penalised: 2.0 / 2 < 1.9
    assert greedy(1) == 0 and greedy(0) == 0   # only token 2 (or nothing) penalised
    p = SamplingParams(temperature=0, repetition_penalty=2.0, repeat_last_n=2)
    assert Sampler(0).sample(logits, p, collections.deque([0, 0, 2])).token == 1  # any iterable, e.g. a deque
    with pytest.raises(ValueError, match="repeat_last_n"):
        SamplingParams(repeat_last_n=-2)


def write_header_only_gguf(path, kv: dict) -> None:
    """A GGUF file of metadata only, written by gguf-py (the reference writer)."""
    from llm_testutil import require_gguf
    gguf = require_gguf()
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in kv.items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, int):
            writer.add_int32(key, value)
        else:
            writer.add_float32(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_sampling_defaults_llama_cpp_then_file_then_flags(tmp_path):
    from tg_llm.models import header_metadata
    from tg_llm.sampling import SERVER_DEFAULTS, sampling_defaults
    assert SERVER_DEFAULTS == {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
                               "repetition_penalty": 1.0, "repeat_last_n": 64}
    assert sampling_defaults({}) == SERVER_DEFAULTS
    path = tmp_path / "sampled.gguf"
    write_header_only_gguf(path, {"general.name": "Sampled  Model", "general.sampling.temp": 0.5,
                                  "general.sampling.top_k": 20, "general.sampling.penalty_repeat": 1.25,
                                  "general.sampling.penalty_last_n": 32,
                                  "general.sampling.min_p": -1.0})  # invalid: ignored
    md = header_metadata(path)
    got = sampling_defaults(md, {"top_k": 5, "top_p": None})
    assert got == {"temperature": 0.5, "top_k": 5, "top_p": 0.95, "min_p": 0.05,
                   "repetition_penalty": pytest.approx(1.25), "repeat_last_n": 32}
    with pytest.raises(ValueError, match="top_p"):
        sampling_defaults(md, {"top_p": 1.5})
    # the server shows general.name (spaces collapsed) and accepts the file stem too
    from tg_llm.server_engine import Engine
    engine = Engine(path, sampling={"temperature": 0.0})
    assert engine.model_id == "Sampled Model" and engine.aliases == ["sampled"]
    assert engine.sampling["temperature"] == 0.0 and engine.sampling["top_k"] == 20
    assert Engine(tmp_path / "missing.gguf").model_id == "missing"

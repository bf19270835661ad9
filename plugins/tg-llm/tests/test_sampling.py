"""Sampling on a logits row (numpy) and stop handling, against hand-computed values and statistics
with fixed seeds."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from tg_llm import Sampler, SamplingParams, StopChecker
from tg_llm.sampling import apply_penalties, filter_mask


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


def test_top_k_support_is_the_full_vocabulary_filter():
    """The sampler filters only the top-k candidates (not the whole vocabulary's distribution): the tokens it can
    draw are exactly those ``filter_mask`` keeps on the full softmax, across top-k, top-p and min-p settings."""
    from tg_llm.sampling import _candidates
    rng = np.random.default_rng(6)
    for k, p, m in [(40, 0.95, 0.05), (5, 1.0, 0.0), (40, 0.5, 0.0), (200, 1.0, 0.3), (1, 0.9, 0.1)]:
        logits = rng.normal(size=5000) * 3
        for temperature, dtype in itertools.product((0.5, 1.0, 1.7), (np.float64, np.float32)):
            params = SamplingParams(temperature=temperature, top_k=k, top_p=p, min_p=m)
            logits = logits.astype(dtype).astype(np.float64)
            expected = np.flatnonzero(filter_mask(softmax(logits / temperature), k, p, m))
            ids, weights = _candidates(logits.astype(dtype), params)
            assert ids.tolist() == expected.tolist()
            assert np.allclose(weights / weights.sum(), softmax(logits[ids] / temperature))


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


def _reference_token(logits: np.ndarray, p: SamplingParams, history: list[int], rng: np.random.Generator) -> int:
    """The module doc's steps written out in float64 over the whole vocabulary, drawing as ``Sampler`` does."""
    x = np.asarray(logits, dtype=np.float64).copy()
    window = history if p.repeat_last_n < 0 else history[len(history) - p.repeat_last_n:] if p.repeat_last_n else []
    for t in set(window):
        if p.repetition_penalty != 1.0:
            x[t] = x[t] / p.repetition_penalty if x[t] > 0 else x[t] * p.repetition_penalty
        x[t] -= window.count(t) * p.frequency_penalty + p.presence_penalty
    if p.temperature == 0:
        return int(np.argmax(x))
    x = x / p.temperature
    ids = np.arange(x.shape[0])
    if p.top_k and p.top_k < x.shape[0]:  # the k best and their ties, then the filters on their distribution
        ids = np.flatnonzero(x >= np.sort(x)[-p.top_k])
    weights = np.exp(x[ids] - x[ids].max())
    keep = filter_mask(weights / weights.sum(), 0, p.top_p, p.min_p)
    ids, weights = ids[keep], weights[keep]
    cumulative = np.cumsum(weights)
    i = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return int(ids[min(i, ids.shape[0] - 1)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tokens_match_a_float64_reference_of_every_step(dtype):
    """The sampler's shortcuts (no float64 copy without penalties, top-k picked before the division, no log-softmax
    without logprobs) choose the tokens of the plain float64 computation, ties included (logits on a coarse grid)."""
    rng = np.random.default_rng(5)
    settings = [dict(temperature=0), dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
                dict(temperature=1.0), dict(temperature=0.7, top_k=5), dict(temperature=1.3, top_p=0.5),
                dict(temperature=0.8, top_k=40, repetition_penalty=1.3, repeat_last_n=8),
                dict(temperature=0, presence_penalty=0.5, frequency_penalty=0.25),
                dict(temperature=0.9, top_k=3, min_p=0.2, repetition_penalty=0.8, repeat_last_n=0)]
    for setting in settings:
        p = SamplingParams(**setting)
        for trial in range(20):
            logits = (np.round(rng.normal(size=3000) * 8) / 4).astype(dtype)  # many exact ties
            history = [int(t) for t in rng.integers(0, 3000, 12)]
            sampler, reference = Sampler(trial), np.random.default_rng(trial)
            for _ in range(3):
                sample = sampler.sample(logits, p, history)
                assert sample.token == _reference_token(logits, p, history, reference), setting
                assert sample.logprob is None and sample.top == []


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

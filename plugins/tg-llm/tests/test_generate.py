"""tg_llm.generate on the real SmolLM2 file: greedy tokens vs the numpy reference, stop handling, prefix cache.

The model and the numpy reference come from test_model (one of each per test session).
"""
from __future__ import annotations

import pytest
from test_model import MAX_CONTEXT, prompt_ids, reference, smollm2_model, smollm2_path

N_GREEDY = 6


def generator():  # noqa: ANN201
    from tg_llm.generate import Generator
    from tg_llm.tokenizer import Tokenizer
    return Generator(smollm2_model(), Tokenizer.from_gguf(smollm2_path()))


def test_greedy_matches_numpy_reference_and_is_deterministic():
    ids = prompt_ids(20)
    expected = reference().greedy(ids, N_GREEDY)
    gen = generator()
    first = list(gen.generate(ids, max_tokens=N_GREEDY, temperature=0, stop_ids=[]))
    assert [e.token_id for e in first] == expected
    assert first[-1].finish_reason == "length"
    assert all(e.finish_reason is None for e in first[:-1])
    assert (first[-1].prompt_tokens, first[-1].completion_tokens) == (20, N_GREEDY)
    again = list(gen.generate(ids, max_tokens=N_GREEDY, temperature=0, stop_ids=[]))
    assert [e.token_id for e in again] == expected
    assert again[0].cached_tokens == 19  # the whole prompt but its last token came from the cache
    text = "".join(e.text for e in first)
    assert text == gen.tokenizer.decode(expected)


def test_prefix_cache_extends_and_resets():
    ids = prompt_ids(20)
    gen = generator()
    list(gen.generate(ids[:10], max_tokens=1, temperature=0))
    events = list(gen.generate(ids, max_tokens=1, temperature=0))
    assert events[0].cached_tokens == 10 and gen.timings.prefill_tokens == 10
    other = [ids[1]] + ids[1:12]
    events = list(gen.generate(other, max_tokens=1, temperature=0))
    assert events[0].cached_tokens == 0 and gen.timings.prefill_tokens == len(other)


def test_stop_string_is_held_back_and_cut():
    ids = prompt_ids(20)
    expected = reference().greedy(ids, N_GREEDY)
    gen = generator()
    full = gen.tokenizer.decode(expected)
    stop = full.strip()[:3]
    assert stop
    events = list(gen.generate(ids, max_tokens=N_GREEDY, temperature=0, stop=[stop], stop_ids=[]))
    assert events[-1].finish_reason == "stop"
    text = "".join(e.text for e in events)
    assert stop not in text and full.startswith(text)


def test_logprobs_and_sampling_seed():
    ids = prompt_ids(20)
    gen = generator()
    events = list(gen.generate(ids, max_tokens=3, temperature=0, logprobs=3, stop_ids=[]))
    for e in events:
        assert len(e.top_logprobs) == 3 and e.logprob <= 0
        assert e.top_logprobs[0][1] == pytest.approx(e.logprob)  # greedy: the chosen token is the most likely
    a = [e.token_id for e in gen.generate(ids, max_tokens=4, temperature=1.0, seed=7, stop_ids=[])]
    b = [e.token_id for e in gen.generate(ids, max_tokens=4, temperature=1.0, seed=7, stop_ids=[])]
    assert a == b


def test_prompt_that_fills_the_context_is_an_error():
    from tg_llm.model import ContextLengthError
    gen = generator()
    with pytest.raises(ContextLengthError):
        list(gen.generate([1] * MAX_CONTEXT, max_tokens=1))


def test_generation_stops_at_the_end_of_the_context():
    ids = prompt_ids(20)
    gen = generator()
    prompt = (ids * 4)[:MAX_CONTEXT - 2]
    events = list(gen.generate(prompt, max_tokens=10, temperature=0, stop_ids=[]))
    assert events[-1].finish_reason == "length"
    # the tokens sampled for positions MAX_CONTEXT-2 and -1 run through the model; the third has no room
    assert len(events) == 3

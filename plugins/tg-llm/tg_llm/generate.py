"""Token generation: prompt ids in, a stream of ``Event``s out (one per generated token).

``Generator(model, tokenizer).generate(prompt_ids, max_tokens, ...)``:

1. prefix cache: the longest common prefix of the prompt and the tokens already in the model's KV
   cache is kept; only the rest of the prompt is prefilled (at least its last token, whose logits
   choose the first new token). A prompt that shares nothing starts from an empty cache;
2. prefill: the remaining prompt in one pass (``Model.forward_last``);
3. decode: sample a token (``tg_llm.sampling.Sampler``), decode its text with the tokenizer's
   ``StreamDecoder`` (only complete UTF-8 characters), pass it through a ``StopChecker`` (stop strings
   are held back until they cannot match), emit an ``Event``, run the token through the model, repeat.

Generation ends with ``finish_reason``:
- ``"stop"``: an end token (EOS, end-of-turn) or a stop string; neither is part of the text;
- ``"length"``: ``max_tokens`` tokens were generated, or the KV cache is full.

Every event carries the token counts; the last one also the finish reason. When an end token ends the
generation, the last event's token is that end token and its text only what was still held back; when
a stop string does, the text before the stop string. A prompt that leaves no room in the context
raises ``ContextLengthError`` before anything runs.
"""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tg_llm.model import ContextLengthError
from tg_llm.sampling import Sampler, SamplingParams, StopChecker


@dataclass
class Event:
    """One step of a generation: a token and the text it completes (see the module doc)."""
    token_id: int | None
    text: str
    logprob: float | None = None
    top_logprobs: list[tuple[str, float]] = field(default_factory=list)
    finish_reason: str | None = None  # set on the last event: "stop" or "length"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV came from the cache (not prefilled again)


@dataclass
class Timings:
    """Figures of the last ``generate`` call (seconds, token counts)."""
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    decode_tokens: int = 0
    decode_s: float = 0.0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class Generator:
    """Generates tokens from a ``tg_llm.model.Model`` with a ``tg_llm.tokenizer.Tokenizer``.

    One generation at a time (the model has one KV cache); ``timings`` describes the last one.
    """

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.timings = Timings()

    def stop_ids(self) -> set[int]:
        """Token ids that end a generation: EOS and every end-of-turn token of the vocabulary."""
        ids = set(getattr(self.tokenizer, "eot_ids", ()) or ())
        if self.tokenizer.eos_id is not None:
            ids.add(self.tokenizer.eos_id)
        return ids

    def generate(self, prompt_ids: Sequence[int], max_tokens: int = 256, params: SamplingParams | None = None, *,
                 stop: Sequence[str] | str | None = (), seed: int | None = None, stop_ids: Sequence[int] | None = None,
                 **sampling: Any) -> Iterator[Event]:
        """Generate up to ``max_tokens`` tokens after ``prompt_ids``.

        Sampling settings come from ``params`` and/or keyword arguments named like ``SamplingParams``
        fields (``temperature=0`` is greedy; ``logprobs=n`` fills ``top_logprobs``). ``stop``: strings that
        end the generation; ``stop_ids``: end tokens (default: EOS and end-of-turn tokens).
        """
        if params is None:
            params = SamplingParams(**sampling)
        elif sampling:
            params = SamplingParams(**{**params.__dict__, **sampling})
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("the prompt has no tokens")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        limit = self.model.config.max_context
        if len(prompt) >= limit:
            raise ContextLengthError(f"the prompt has {len(prompt)} tokens; the context holds {limit} "
                                     f"(room is needed for at least one generated token)")
        return self._run(prompt, max_tokens, params, stop, seed, self.stop_ids() if stop_ids is None else stop_ids)

    def _run(self, prompt: list[int], max_tokens: int, params: SamplingParams, stop: Sequence[str] | str | None,
             seed: int | None, stop_ids: Any) -> Iterator[Event]:
        model = self.model
        cached = min(common_prefix(model.cached_tokens, prompt), len(prompt) - 1)
        if cached == 0:
            model.reset()
        self.timings = timings = Timings(prefill_tokens=len(prompt) - cached)
        t0 = time.perf_counter()
        logits = model.forward_last(prompt[cached:], cached)
        timings.prefill_s = time.perf_counter() - t0
        stream = TokenStream(self.tokenizer, len(prompt), cached, max_tokens, params, stop, seed, stop_ids,
                             model.config.max_context)
        t0 = time.perf_counter()
        while True:
            event = stream.step(logits)
            if event.finish_reason is not None:
                timings.decode_tokens = len(stream.generated) - 1
                timings.decode_s = time.perf_counter() - t0
                yield event
                return
            yield event
            logits = model.forward_last([event.token_id], stream.pos - 1)


class TokenStream:
    """One generation's state after its prompt: each ``step(logits)`` samples a token (``Sampler``), decodes its
    text (only complete UTF-8 characters), passes it through a ``StopChecker`` (stop strings are held back until
    they cannot match) and returns its ``Event``. ``pos`` is the position the next sampled token will take; after a
    step without a finish reason, the caller runs that token at ``pos - 1`` for the next logits."""

    def __init__(self, tokenizer: Any, prompt_tokens: int, cached: int, max_tokens: int, params: SamplingParams,
                 stop: Sequence[str] | str | None, seed: int | None, stop_ids: Any, limit: int) -> None:
        self.tokenizer = tokenizer
        self.prompt_tokens = prompt_tokens
        self.cached = cached
        self.max_tokens = max_tokens
        self.params = params
        self.limit = limit
        self.sampler = Sampler(seed)
        self.decoder = tokenizer.stream_decoder()
        self.checker = StopChecker(stop, stop_ids)
        self.generated: list[int] = []
        self.pos = prompt_tokens

    def step(self, logits: Any) -> Event:
        tok, checker = self.tokenizer, self.checker
        sample = self.sampler.sample(logits, self.params, self.generated)
        self.generated.append(sample.token)
        text, stopped = checker.feed_token(sample.token, self.decoder.add(sample.token))
        finish = None
        if stopped:
            finish = "stop"
        elif len(self.generated) >= self.max_tokens or self.pos >= self.limit:  # no room to run this token
            finish = "length"
        if finish == "length":
            text += checker.feed(self.decoder.flush()).text + checker.flush()
        top = [(tok.decode([t]), lp) for t, lp in sample.top]
        self.pos += 1
        return Event(sample.token, text, sample.logprob, top, finish, self.prompt_tokens, len(self.generated),
                     self.cached)

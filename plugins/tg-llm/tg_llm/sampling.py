"""Choosing the next token from the model's last logits row, and knowing when to stop.

``Sampler(seed).sample(logits, params, history)`` -> ``Sample(token, logprob, top)``. The steps, in order:

1. penalties on the logits, from ``history`` (the token ids to penalise, e.g. everything generated so
   far), of which the last ``repeat_last_n`` count (-1: all of it, 0: no penalties, as llama.cpp's
   ``penalty_last_n``):
   - repetition (llama.cpp / CTRL style): for each token that occurs, ``l / r`` if ``l > 0`` else ``l * r``;
   - frequency and presence (OpenAI): ``l - count * frequency_penalty - (count > 0) * presence_penalty``;
2. temperature: ``0`` means greedy (argmax of the penalised logits; steps 3-5 are skipped);
   otherwise the logits are divided by it;
3. ``top_k`` (0 = off): keep the k largest (ties with the k-th are kept);
4. ``top_p`` (1 = off): keep the smallest set of most likely tokens whose probability reaches ``top_p``;
5. ``min_p`` (0 = off): keep tokens with probability >= ``min_p`` times the largest probability;
6. draw from the renormalised distribution with the sampler's own ``numpy.random.Generator``.

Temperature comes before the filters (as in Hugging Face and vLLM), so ``top_p``/``min_p`` see the
distribution that is actually sampled. The reported log-probabilities are the model's: log-softmax of
the raw logits, before penalties and temperature (OpenAI's ``logprobs``): for the chosen token (when
``logprob`` is set or ``logprobs`` > 0; else ``Sample.logprob`` is None and no log-softmax is computed) and
the ``logprobs`` most likely alternatives.

Without penalties a sample reads the logits in their own dtype: greedy is their argmax, and top-k picks its
candidates from them before anything is converted (a float32 row in float64 keeps its order and ties, and
dividing by a positive temperature does too, so the candidates, their probabilities and the draw are those
of the float64 path).

``StopChecker`` turns a stream of text chunks into text safe to show: it holds back any tail that
could be the start of a stop string, so a stop string split across chunks is never shown.

``sampling_defaults(metadata, overrides)``: the settings a request gets for the fields it leaves out:
llama.cpp's server defaults, then the GGUF file's ``general.sampling.*`` keys, then ``overrides``
(the server's or ``tg llm chat``'s flags).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings (OpenAI request fields plus top_k / min_p / repetition_penalty)."""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repeat_last_n: int = -1  # penalties look at the last n tokens of the history (-1: all, 0: none)
    logprobs: int = 0  # how many top alternatives to report (0: none)
    logprob: bool = False  # report the chosen token's log-probability (also when logprobs > 0)

    def __post_init__(self) -> None:
        checks = [
            (self.temperature >= 0, "temperature must be >= 0"),
            (self.top_k >= 0, "top_k must be >= 0 (0 turns it off)"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (0 <= self.min_p <= 1, "min_p must be in [0, 1]"),
            (self.repetition_penalty > 0, "repetition_penalty must be > 0 (1 turns it off)"),
            (-2 <= self.frequency_penalty <= 2, "frequency_penalty must be in [-2, 2]"),
            (-2 <= self.presence_penalty <= 2, "presence_penalty must be in [-2, 2]"),
            (self.repeat_last_n >= -1, "repeat_last_n must be >= -1 (-1: all tokens, 0: no penalties)"),
            (self.logprobs >= 0, "logprobs must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


class Sample(NamedTuple):
    """The chosen token, its log-probability (None unless asked for), and the top alternatives as (token,
    logprob), best first."""
    token: int
    logprob: float | None
    top: list[tuple[int, float]]


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable log-softmax of a 1-D float array (float64 result)."""
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - np.max(x)
    return shifted - np.log(np.sum(np.exp(shifted)))


def apply_penalties(logits: np.ndarray, history: Iterable[int], repetition_penalty: float = 1.0,
                    frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> np.ndarray:
    """A penalised copy of ``logits`` (float64) for the tokens in ``history`` (see the module doc)."""
    out = np.array(logits, dtype=np.float64)
    ids = np.fromiter(history, dtype=np.int64)
    if ids.size == 0 or (repetition_penalty == 1.0 and frequency_penalty == 0.0 and presence_penalty == 0.0):
        return out
    if ids.min() < 0 or ids.max() >= out.shape[0]:
        raise ValueError(f"history holds token ids outside 0..{out.shape[0] - 1}")
    tokens, counts = np.unique(ids, return_counts=True)
    if repetition_penalty != 1.0:
        values = out[tokens]
        out[tokens] = np.where(values > 0, values / repetition_penalty, values * repetition_penalty)
    out[tokens] -= counts * frequency_penalty + presence_penalty
    return out


def filter_mask(probs: np.ndarray, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> np.ndarray:
    """Which tokens survive top-k, then top-p, then min-p on the distribution ``probs`` (a bool array)."""
    keep = probs > 0
    if top_k and top_k < probs.shape[0]:
        kth = np.partition(probs, -top_k)[-top_k]
        keep &= probs >= kth
    if top_p < 1.0:
        masked = np.where(keep, probs, 0.0)
        total = masked.sum()
        order = _most_likely_first(masked, top_p * total)
        cumulative = np.cumsum(masked[order]) / total
        # the smallest prefix whose mass reaches top_p: everything before the first index reaching it, and it
        # (a relative slack of 1e-9 so that a mass equal to top_p up to rounding counts as reaching it)
        cut = int(np.searchsorted(cumulative, top_p * (1 - 1e-9), side="left")) + 1
        top = np.zeros_like(keep)
        top[order[:cut]] = True
        keep &= top
    if min_p > 0.0:
        keep &= probs >= min_p * np.max(np.where(keep, probs, 0.0))
    return keep


def _most_likely_first(probs: np.ndarray, mass: float) -> np.ndarray:
    """Indices of the most likely tokens, best first, enough of them to hold ``mass``.

    Sorting a whole 50k-150k vocabulary is the slow part of top-p, so sort only the best 1024 unless
    they do not hold enough probability (a very flat distribution).
    """
    n = probs.shape[0]
    if n > 2048:
        best = np.argpartition(-probs, 1023)[:1024]
        if probs[best].sum() >= mass:
            return best[np.argsort(-probs[best], kind="stable")]
    return np.argsort(-probs, kind="stable")


def _candidates(logits: np.ndarray, p: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The tokens top-k, top-p and min-p keep from ``logits`` divided by the temperature (ascending ids) and
    their probabilities up to a common factor. With top-k on, only the k best (and ties) are exponentiated and
    filtered: the filters and the draw depend on ratios of probabilities, not on the vocabulary's total. From
    float32 logits the k best are picked before the division (at a temperature in [1e-6, 1e6] no two float32
    values round to one float64 quotient, so the order and the ties are those of ``logits / temperature``):
    only they are divided."""
    n = logits.shape[0]
    pick_first = logits.dtype == np.float32 and 1e-6 <= p.temperature <= 1e6
    with np.errstate(over="ignore"):  # (overflow: handled below)
        scaled = logits if pick_first else logits.astype(np.float64) / p.temperature
    if p.top_k and p.top_k < n:
        ids = np.flatnonzero(scaled >= np.partition(scaled, n - p.top_k)[n - p.top_k])
    else:
        ids = np.arange(n)
    chosen = scaled[ids].astype(np.float64) / p.temperature if pick_first else scaled[ids]
    top = chosen.max()
    # (a temperature so small the quotients overflow: the best tokens alone, as the limit of the distribution is)
    weights = np.exp(chosen - top) if np.isfinite(top) else (logits[ids] == logits[ids].max()).astype(np.float64)
    keep = filter_mask(weights / weights.sum(), 0, p.top_p, p.min_p)
    return ids[keep], weights[keep]


def _window(history: Iterable[int], last_n: int) -> Iterable[int]:
    if last_n < 0:
        return history
    return list(history)[-last_n:] if last_n else []


# llama.cpp's server defaults (common_params_sampling): a new user's first question gets a sensible answer
SERVER_DEFAULTS: dict[str, float | int] = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
                                           "repetition_penalty": 1.0, "repeat_last_n": 64}
# the GGUF keys llama.cpp's converter writes from a model's generation_config.json
GGUF_SAMPLING_KEYS = {"temperature": "general.sampling.temp", "top_k": "general.sampling.top_k",
                      "top_p": "general.sampling.top_p", "min_p": "general.sampling.min_p",
                      "repetition_penalty": "general.sampling.penalty_repeat",
                      "repeat_last_n": "general.sampling.penalty_last_n"}


def sampling_defaults(metadata: Mapping[str, object] | None = None,
                      overrides: Mapping[str, float | int | None] | None = None) -> dict[str, Any]:
    """``SERVER_DEFAULTS`` overridden by the file's ``general.sampling.*`` values, then by ``overrides``
    (None values are left out). A file value that is not a valid setting is ignored (a ``ValueError``
    names a bad override)."""
    out: dict[str, Any] = dict(SERVER_DEFAULTS)
    for name, key in GGUF_SAMPLING_KEYS.items():
        value = (metadata or {}).get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        setting: dict[str, Any] = {name: int(value) if isinstance(SERVER_DEFAULTS[name], int) else float(value)}
        try:
            SamplingParams(**setting)
        except ValueError:
            continue
        out.update(setting)
    for name, value in (overrides or {}).items():
        if value is not None:
            out[name] = value
    SamplingParams(**out)
    return out


class Sampler:
    """Draws tokens with its own random generator: the same seed gives the same tokens."""

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def sample(self, logits: np.ndarray | Sequence[float], params: SamplingParams | None = None,
               history: Iterable[int] = ()) -> Sample:
        """Choose the next token from one row of logits (shape ``(vocab,)``)."""
        p = params or SamplingParams()
        row = np.asarray(logits)
        if row.dtype not in (np.float32, np.float64):
            row = row.astype(np.float64)
        if row.ndim != 1 or row.shape[0] == 0:
            raise ValueError(f"expected one row of logits, got shape {row.shape}")
        best = int(np.argmax(row))  # (numpy's argmax of a row with a NaN is the first NaN: one pass for both)
        most = row[best]
        if np.isnan(most):
            raise ValueError("logits contain NaN")
        penalised = row
        penalties = p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0
        if penalties and p.repeat_last_n != 0:  # (else nothing changes: the row as it is)
            penalised = apply_penalties(row, _window(history, p.repeat_last_n), p.repetition_penalty,
                                        p.frequency_penalty, p.presence_penalty)
        if p.temperature == 0:
            token = best if penalised is row else int(np.argmax(penalised))
        else:
            support, weights = _candidates(penalised, p)
            token = self._draw(support, weights)
        if not (p.logprob or p.logprobs):
            return Sample(token, None, [])
        # the model's log-probabilities (log_softmax of the row in float64), for the chosen token and the top ones
        shifted = row.astype(np.float64) - float(most)
        log_total = np.log(np.sum(np.exp(shifted)))
        top: list[tuple[int, float]] = []
        if p.logprobs:
            logprobs = shifted - log_total
            n = min(p.logprobs, logprobs.shape[0])
            chosen = np.argpartition(-logprobs, n - 1)[:n]
            chosen = chosen[np.argsort(-logprobs[chosen], kind="stable")]
            top = [(int(t), float(logprobs[t])) for t in chosen]
        return Sample(token, float(shifted[token] - log_total), top)

    def _draw(self, support: np.ndarray, weights: np.ndarray) -> int:
        """One of ``support`` with probability proportional to its weight."""
        cumulative = np.cumsum(weights)
        u = self.rng.random() * cumulative[-1]
        i = int(np.searchsorted(cumulative, u, side="right"))
        return int(support[min(i, support.shape[0] - 1)])


class StopResult(NamedTuple):
    """What ``StopChecker`` returns: the text that is safe to emit now, and whether generation must stop."""
    text: str
    stop: bool


class StopChecker:
    """Stop strings and stop tokens over a stream of text chunks.

    ``feed(chunk)`` returns ``(text, stop)``: ``text`` never contains a stop string or any part of
    one that might still complete; once a stop string appears, ``text`` is everything before it and
    ``stop`` is True (the stop string itself is never emitted, as in the OpenAI API). ``feed_token(id,
    chunk)`` also stops on the ids in ``stop_ids`` (EOS / end-of-turn) without emitting that token's
    text. At the end of a stream that did not stop, ``flush()`` returns the text held back.
    ``matched`` is the stop string (or token id) that ended the stream, else None.
    """

    def __init__(self, stop: Sequence[str] | str | None = (), stop_ids: Iterable[int] = ()) -> None:
        if isinstance(stop, str):
            stop = [stop]
        self.stop = [s for s in (stop or ()) if s]
        self.stop_ids = frozenset(stop_ids)
        self._held = ""
        self.stopped = False
        self.matched: str | int | None = None

    def feed(self, chunk: str) -> StopResult:
        """Add streamed text; get back what can be shown now."""
        if self.stopped:
            return StopResult("", True)
        buf = self._held + chunk
        first = -1
        for s in self.stop:
            at = buf.find(s)
            if at >= 0 and (first < 0 or at < first):
                first, self.matched = at, s
        if first >= 0:
            self._held = ""
            self.stopped = True
            return StopResult(buf[:first], True)
        keep = self._partial_tail(buf)
        self._held = buf[len(buf) - keep:] if keep else ""
        return StopResult(buf[:len(buf) - keep], False)

    def feed_token(self, token_id: int, chunk: str) -> StopResult:
        """Like ``feed``, but a token in ``stop_ids`` ends the stream (its text is not shown)."""
        if self.stopped:
            return StopResult("", True)
        if token_id in self.stop_ids:
            self.stopped = True
            self.matched = token_id
            held, self._held = self._held, ""
            return StopResult(held, True)
        return self.feed(chunk)

    def flush(self) -> str:
        """End of stream: the held-back text (it never completed a stop string)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_tail(self, buf: str) -> int:
        """Length of the longest tail of ``buf`` that is a proper prefix of some stop string."""
        best = 0
        for s in self.stop:
            for n in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:n]):
                    best = n
                    break
        return best

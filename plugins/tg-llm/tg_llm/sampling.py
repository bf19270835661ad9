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
4. ``top_p`` (1 = off): keep the smallest set of most likely tokens whose probability reaches ``top_p``
   (of equally likely tokens the lower id comes first);
5. ``min_p`` (0 = off): keep tokens with probability >= ``min_p`` times the largest probability;
6. draw from the renormalised distribution with the sampler's own ``numpy.random.Generator``.

Temperature comes before the filters (as in Hugging Face and vLLM), so ``top_p``/``min_p`` see the
distribution that is actually sampled. The reported log-probabilities are the model's: log-softmax of
the raw logits, before penalties and temperature (OpenAI's ``logprobs``): for the chosen token (when
``logprob`` is set or ``logprobs`` > 0; else ``Sample.logprob`` is None and no log-softmax is computed) and
the ``logprobs`` tokens of the largest logits (ties: the lower id first), best first.

The sampler runs once per row of every decode step, so it avoids passes over the whole vocabulary wherever the
result is that of the plain float64 computation bit for bit (tokens, probabilities, log-probabilities): greedy
is one argmax of the row; penalties are values for the penalised tokens alone (no penalised copy of the row);
top-k finds its candidates in the row's own dtype (a float32 row in float64 keeps its order and ties, and
dividing by a positive temperature does too) with a bound from group maxima (``top_ids``), and only the k best
are converted, exponentiated and filtered (the filters and the draw depend on ratios of probabilities); top-p
sorts only the most likely tokens. Without top-k every token is a candidate, and the vocabulary's float64
probabilities are computed as in the plain path.

``StopChecker`` turns a stream of text chunks into text safe to show: it holds back any tail that
could be the start of a stop string, so a stop string split across chunks is never shown.

``sampling_defaults(metadata, overrides)``: the settings a request gets for the fields it leaves out:
llama.cpp's server defaults, then the GGUF file's ``general.sampling.*`` keys, then ``overrides``
(the server's or ``tg llm chat``'s flags).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

# ``top_ids``' groups: at most this many values each (the rows of its view), and at least this many groups per value
# picked (a bound that leaves out most groups)
SELECT_DEPTH = 64
SELECT_GROUPS_PER_K = 8
NUCLEUS_FIRST = 256  # top-p sorts the best 256 tokens first (``_nucleus``)
FLOAT32_LOWEST = float(np.finfo(np.float32).min)
NO_TOKENS, NO_VALUES = np.zeros(0, np.int64), np.zeros(0, np.float64)  # (no penalised tokens)
NO_TOKENS.setflags(write=False)  # (shared, and returned by ``penalised_values``)
NO_VALUES.setflags(write=False)

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
        for name in ("temperature", "top_p", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"):
            if not math.isfinite(getattr(self, name)):  # (an infinite penalty turns a logit of 0 into NaN)
                raise ValueError(f"{name} must be a finite number, got {getattr(self, name)}")
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


def penalised_values(logits: np.ndarray, history: Iterable[int], repetition_penalty: float = 1.0,
                     frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """The tokens of ``history`` (ascending ids, each once) and their penalised logits (float64; see the module
    doc): the only entries penalties change, so a sample needs no penalised copy of the whole row."""
    if repetition_penalty == 1.0 and frequency_penalty == 0.0 and presence_penalty == 0.0:
        return NO_TOKENS, NO_VALUES
    ids = np.fromiter(history, dtype=np.int64)
    if ids.size == 0:
        return NO_TOKENS, NO_VALUES
    if ids.min() < 0 or ids.max() >= logits.shape[0]:
        raise ValueError(f"history holds token ids outside 0..{logits.shape[0] - 1}")
    tokens, counts = np.unique(ids, return_counts=True)
    values = logits[tokens].astype(np.float64)
    if repetition_penalty != 1.0:
        values = np.where(values > 0, values / repetition_penalty, values * repetition_penalty)
    values -= counts * frequency_penalty + presence_penalty
    return tokens, values


def apply_penalties(logits: np.ndarray, history: Iterable[int], repetition_penalty: float = 1.0,
                    frequency_penalty: float = 0.0, presence_penalty: float = 0.0) -> np.ndarray:
    """A penalised copy of ``logits`` (float64) for the tokens in ``history`` (see the module doc)."""
    out = np.array(logits, dtype=np.float64)
    tokens, values = penalised_values(out, history, repetition_penalty, frequency_penalty, presence_penalty)
    out[tokens] = values
    return out


def top_ids(row: np.ndarray, k: int, ties: bool = True) -> np.ndarray:
    """Ascending ids of the ``k`` largest values of ``row`` and of every value equal to the k-th (``row`` has no NaN);
    with ``ties`` False, of only the lowest ids among those equal to the k-th: the first k of the order by value,
    then id (many values tie with the k-th when most probabilities are 0 or most logits -inf).

    A partition of the whole vocabulary reads and moves every value; instead the row is cut into groups (the
    columns of a ``(depth, width)`` view, the few values left over each a group of its own). The k-th largest of
    the groups' maxima is at most the row's k-th largest (k groups hold a value at least that large), so only the
    groups whose maximum reaches it can hold one of the k best: the k-th largest is picked from their values alone.
    """
    n = row.shape[0]
    if k >= n:
        return np.arange(n)
    depth = min(SELECT_DEPTH, n // (SELECT_GROUPS_PER_K * k))
    if depth < 2:  # (a k close to the vocabulary's size: too few groups to leave any out)
        return _at_least(np.arange(n), row, np.partition(row, n - k)[n - k], k, ties)
    width = n // depth
    grid = row[:depth * width].reshape(depth, width)
    left_over = row[depth * width:]
    maxima = grid.max(axis=0)
    if left_over.size:  # (a vocabulary that is no multiple of ``depth``: the values left over are groups of one)
        maxima = np.concatenate([maxima, left_over])
    bound = np.partition(maxima, maxima.shape[0] - k)[maxima.shape[0] - k]
    columns = np.flatnonzero(maxima[:width] >= bound)
    if 2 * columns.shape[0] > width:  # (most groups reach it, e.g. a row of ties: they would be copied for nothing)
        # (fewer than k values above the bound: the k-th is the bound, and no partition of ties, which is slow)
        kth = bound if np.count_nonzero(row > bound) < k else np.partition(row, n - k)[n - k]
        return _at_least(np.arange(n), row, kth, k, ties)
    values = grid[:, columns].ravel()  # (depth, len(columns)): the groups that may hold one of the k best
    at = np.flatnonzero(values >= bound)
    within, column = np.divmod(at, columns.shape[0])
    ids = within * width + columns[column]
    values = values[at]
    if left_over.size:
        extra = np.flatnonzero(left_over >= bound)
        ids, values = np.concatenate([ids, depth * width + extra]), np.concatenate([values, left_over[extra]])
    return _at_least(ids, values, np.partition(values, values.shape[0] - k)[values.shape[0] - k], k, ties)


def _at_least(ids: np.ndarray, values: np.ndarray, kth: float, k: int, ties: bool) -> np.ndarray:
    """Ascending ``ids`` of the ``values`` >= ``kth`` (the k-th largest), or without ``ties`` those above it and the
    lowest ids of those equal to it, k in all (picked by a partition: there may be a whole vocabulary of them)."""
    if ties:
        return np.sort(ids[values >= kth])
    above, tied = ids[values > kth], ids[values == kth]
    need = k - above.shape[0]
    if need < tied.shape[0]:
        tied = np.partition(tied, need - 1)[:need]
    return np.sort(np.concatenate([above, tied]))


def filter_mask(probs: np.ndarray, top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0) -> np.ndarray:
    """Which tokens survive top-k, then top-p, then min-p on the distribution ``probs`` (a bool array)."""
    if top_k and top_k < probs.shape[0]:
        probs = np.where(probs >= np.partition(probs, -top_k)[-top_k], probs, 0.0)
    keep = np.zeros(probs.shape[0], dtype=bool)
    keep[kept_by_filters(probs, top_p, min_p)] = True
    return keep


def kept_by_filters(probs: np.ndarray, top_p: float = 1.0, min_p: float = 0.0) -> np.ndarray:
    """Ascending positions of the tokens of positive probability that top-p, then min-p keep from ``probs``."""
    if top_p < 1.0:
        best = _nucleus(probs, top_p)
        if min_p > 0.0 and best.size:  # (none kept: every probability 0)
            best = best[probs[best] >= min_p * probs[best[0]]]
        return np.sort(best)
    threshold = min_p * probs.max()
    return np.flatnonzero(probs >= threshold if threshold > 0 else probs > 0)


def _nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """The smallest set of most likely tokens (ties to the lower position) whose probability reaches ``top_p`` of
    the total, best first, those of probability 0 left out. Sorting a whole 50k-250k vocabulary is the slow part,
    so only the best ``NUCLEUS_FIRST`` are sorted, 8 times more while they do not reach it (all of them once that
    is a quarter of the vocabulary)."""
    total = probs.sum()
    if not total > 0:
        return NO_TOKENS
    n = probs.shape[0]
    m = NUCLEUS_FIRST
    while True:
        if m < n:
            best = top_ids(probs, m, ties=False)
            best = best[np.argsort(-probs[best], kind="stable")]
        else:
            best = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[best]) / total
        # the smallest prefix whose mass reaches top_p: everything before the first index reaching it, and it
        # (a relative slack of 1e-9 so that a mass equal to top_p up to rounding counts as reaching it)
        cut = int(np.searchsorted(cumulative, top_p * (1 - 1e-9), side="left")) + 1
        if cut <= best.shape[0] or m >= n:  # (the first m of the whole order)
            best = best[:cut]
            return best if probs[best[-1]] > 0 else best[probs[best] > 0]  # (best first: zeros at the end)
        m = m * 8 if m * 8 < n // 4 else n  # (a flat distribution: past a quarter of it, one sort of all is cheaper)


def _candidates(row: np.ndarray, p: SamplingParams, tokens: np.ndarray = NO_TOKENS,
                values: np.ndarray = NO_VALUES) -> tuple[np.ndarray, np.ndarray]:
    """The tokens top-k, top-p and min-p keep from the logits ``row`` (with ``values`` for its penalised ``tokens``)
    divided by the temperature (ascending ids), and their probabilities up to a common factor. With top-k on, only
    the k best (and ties) are exponentiated and filtered: the filters and the draw depend on ratios of
    probabilities, not on the vocabulary's total."""
    n = row.shape[0]
    k = p.top_k if p.top_k and p.top_k < n else 0
    if not k and p.top_p == 1.0 and tokens.size == 0:
        found = _min_p_alone(row, p.min_p, p.temperature)
        if found is not None:
            return found
    ids, logits, scaled = _scaled_logits(row, tokens, values, k, p.temperature)
    top = scaled.max()
    # (a temperature so small the quotients overflow: the best tokens alone, as the limit of the distribution is)
    weights = np.exp(scaled - top) if np.isfinite(top) else (logits == logits.max()).astype(np.float64)
    if p.top_p == 1.0 and p.min_p == 0.0 and weights.min() > 1e-300:  # (no filter, no probability rounds to 0)
        return (np.arange(weights.shape[0]) if ids is None else ids), weights
    kept = kept_by_filters(weights / weights.sum(), p.top_p, p.min_p)
    return (kept if ids is None else ids[kept]), weights[kept]


def _quotients_keep_order(row: np.ndarray, temperature: float) -> bool:
    """Whether float32 logits divided by ``temperature`` in float64 keep their order and ties (no two float32 values
    round to one quotient at a temperature in [1e-6, 1e6]): then the best tokens can be picked before the division."""
    return row.dtype == np.float32 and 1e-6 <= temperature <= 1e6


def _min_p_alone(row: np.ndarray, min_p: float, temperature: float) -> tuple[np.ndarray, np.ndarray] | None:
    """What min-p alone keeps from a float32 row (as ``_candidates``), from the tokens whose logit is near enough the
    best to weigh about ``min_p`` (a logit threshold) and without the vocabulary's total: a probability
    ``w / total`` reaches ``min_p`` times the best's ``1 / total`` when the weight ``w`` (the best's is 1) is above
    ``min_p`` by more than the divisions' rounding and does not when below. None when a weight is too close to
    call, or the filter or the row is outside that reasoning (the whole computation decides then)."""
    if not _quotients_keep_order(row, temperature) or min_p < 1e-200:
        return None
    top = float(row.max()) / temperature  # (dividing by a positive number keeps the order: the largest quotient)
    if not math.isfinite(top):
        return None
    reach = temperature * (top + math.log(min_p))  # (a margin far above the rounding of the quotients and of exp)
    reach -= 1e-4 * (1 + abs(temperature * top) + abs(temperature * math.log(min_p)))
    ids = np.flatnonzero(row >= max(reach, FLOAT32_LOWEST))  # (compared in float32: a lower bound would overflow)
    weights = np.exp(row[ids].astype(np.float64) / temperature - top)
    low, high = min_p * (1 - 1e-12), min_p * (1 + 1e-12)
    if ((weights > low) & (weights < high)).any():
        return None
    kept = weights >= high
    return ids[kept], weights[kept]


def _scaled_logits(row: np.ndarray, tokens: np.ndarray, values: np.ndarray, k: int,
                   temperature: float) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """(ids, penalised logits, those divided by ``temperature``) of the k best tokens of the penalised row and
    their ties (ascending ids), or of every token (ids None) when ``k`` is 0; float64. From float32 logits the
    k best are picked before the division (at a temperature in [1e-6, 1e6] no two float32 values round to one
    float64 quotient, so the order and the ties are those of ``logits / temperature``): only they are divided."""
    if not k or not _quotients_keep_order(row, temperature):
        logits = row.astype(np.float64)
        logits[tokens] = values
        with np.errstate(over="ignore"):  # (overflow: ``_candidates`` takes the best tokens alone)
            scaled = logits / temperature
        if not k:
            return None, logits, scaled
        ids = top_ids(scaled, k)
        return ids, logits[ids], scaled[ids]
    if tokens.size == 0:
        ids = top_ids(row, k)
        logits = row[ids].astype(np.float64)
        return ids, logits, logits / temperature
    ids, logits = _best_with_penalties(row, tokens, values, k)
    scaled = logits / temperature
    if ids.shape[0] > k:
        best = scaled >= np.partition(scaled, ids.shape[0] - k)[ids.shape[0] - k]
        ids, logits, scaled = ids[best], logits[best], scaled[best]
    return ids, logits, scaled


def _best_with_penalties(row: np.ndarray, tokens: np.ndarray, values: np.ndarray,
                         k: int) -> tuple[np.ndarray, np.ndarray]:
    """Ascending ids and penalised logits (float64) of a set holding the k best of the penalised row and their
    ties: the penalised tokens and the others among the row's k + len(tokens) best (fewer than k others and the
    penalised tokens are above the k-th best other, so it is among them)."""
    free = top_ids(row, k + tokens.shape[0])
    at = np.minimum(np.searchsorted(tokens, free), tokens.shape[0] - 1)
    free = free[tokens[at] != free]
    ids = np.concatenate([free, tokens])
    logits = np.concatenate([row[free].astype(np.float64), values])
    order = np.argsort(ids, kind="stable")
    return ids[order], logits[order]


def _greedy(row: np.ndarray, best: int, tokens: np.ndarray, values: np.ndarray) -> int:
    """The first of the best tokens of the penalised row (``best``: the row's): the penalised tokens against the best
    of the others."""
    if tokens.size == 0:
        return best
    free = best  # (the row's first best, when not penalised, is the first best of the others)
    if (tokens == best).any():
        others = row.copy()
        others[tokens] = -np.inf
        free = int(np.argmax(others))  # (a penalised token when every other is -inf: then its value is in ``values``)
    if not (tokens == free).any():
        tokens, values = np.append(tokens, free), np.append(values, float(row[free]))
    return int(tokens[values == values.max()].min())


def _model_logprobs(row: np.ndarray, token: int, n: int) -> tuple[float, list[tuple[int, float]]]:
    """The log-probability of ``token`` under the model (log-softmax of ``row`` in float64) and the ``n`` most likely
    tokens' (by logit, ties to the lower id), best first."""
    most = float(row.max())
    best = top_ids(row, n, ties=False) if n else NO_TOKENS
    best = best[np.argsort(-row[best], kind="stable")][:n]
    shifted = row.astype(np.float64)
    shifted -= most
    chosen, best_shifted = shifted[token], shifted[best]
    np.exp(shifted, out=shifted)
    log_total = np.log(np.sum(shifted))
    top = [(int(t), float(lp)) for t, lp in zip(best, best_shifted - log_total, strict=True)]
    return float(chosen - log_total), top


def _window(history: Iterable[int], last_n: int) -> Iterable[int]:
    if last_n < 0:
        return history
    if not last_n:
        return []
    # (a deque is a Sequence that cannot be sliced)
    return history[-last_n:] if isinstance(history, list | tuple) else list(history)[-last_n:]


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
        # (numpy's argmax and max of a row with a NaN find a NaN: the pass greedy makes anyway checks for them)
        best = int(np.argmax(row)) if p.temperature == 0 else -1  # (-1: not greedy, no argmax needed)
        if np.isnan(row.max() if best < 0 else row[best]):
            raise ValueError("logits contain NaN")
        tokens, values = NO_TOKENS, NO_VALUES
        penalties = p.repetition_penalty != 1.0 or p.frequency_penalty != 0.0 or p.presence_penalty != 0.0
        if penalties and p.repeat_last_n != 0:
            tokens, values = penalised_values(row, _window(history, p.repeat_last_n), p.repetition_penalty,
                                              p.frequency_penalty, p.presence_penalty)
        if p.temperature == 0:
            token = _greedy(row, best, tokens, values)
        else:
            token = self._draw(*_candidates(row, p, tokens, values))
        if not (p.logprob or p.logprobs):
            return Sample(token, None, [])
        logprob, top = _model_logprobs(row, token, min(p.logprobs, row.shape[0]))
        return Sample(token, logprob, top)

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

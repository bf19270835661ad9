"""SentencePiece-style BPE (``tokenizer.ggml.model = llama``: Llama 2, Mistral v0.1, Phi-3, ...).

Encoding one fragment of text (no special tokens in it):

1. spaces become ``▁`` (U+2581); the caller has already put a space in front when the vocabulary
   wants a space prefix;
2. every character starts as its own symbol;
3. repeatedly merge the adjacent pair whose concatenation is a token with the highest score
   (``tokenizer.ggml.scores``), leftmost first on ties, until no adjacent pair forms a token;
4. a final symbol that is a token is emitted as that token; one that is not (a character missing
   from the vocabulary) is emitted as its UTF-8 bytes with the byte tokens ``<0x00>``..``<0xFF>``
   ("byte fallback"), or as the unknown token when the vocabulary has no byte tokens.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence

SPACE = "\u2581"  # ▁, how SentencePiece writes a space


def byte_token_value(text: str) -> int | None:
    """``"<0x41>"`` -> 0x41; None when ``text`` is not a byte token's text."""
    if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
        try:
            return int(text[3:5], 16)
        except ValueError:
            return None
    return None


class SPMModel:
    """Score-driven merging over characters, with byte fallback."""

    def __init__(self, token_to_id: dict[str, int], scores: Sequence[float], byte_ids: dict[int, int],
                 unk_id: int | None) -> None:
        self.token_to_id = token_to_id
        self.scores = scores
        self.byte_ids = byte_ids  # byte value -> id of its <0x..> token
        self.unk_id = unk_id

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (ordinary text; spaces are turned into ▁ here)."""
        if not text:
            return []
        out: list[int] = []
        for sym in self.merge(text.replace(" ", SPACE)):
            tid = self.token_to_id.get(sym)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._fallback(sym))
        return out

    def _fallback(self, sym: str) -> list[int]:
        ids = []
        for b in sym.encode("utf-8"):
            tid = self.byte_ids.get(b, self.unk_id)
            if tid is None:
                raise ValueError(f"{sym!r} has no token, no byte token <0x{b:02X}> and the vocabulary has no "
                                 "unknown token")
            ids.append(tid)
        if not self.byte_ids and self.unk_id is not None:
            return [self.unk_id]  # no byte tokens: one unknown token for the whole character
        return ids

    def merge(self, text: str) -> list[str]:
        """The final symbols of ``text`` after score-ordered merging (heap of (-score, left position))."""
        syms: list[str | None] = list(text)
        n = len(syms)
        if n < 2:
            return list(text)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        vocab = self.token_to_id
        scores = self.scores
        heap: list[tuple[float, int, str, str]] = []
        for i in range(n - 1):
            tid = vocab.get(text[i] + text[i + 1])
            if tid is not None:
                heap.append((-scores[tid], i, text[i], text[i + 1]))
        heapq.heapify(heap)
        while heap:
            _, i, left, right = heapq.heappop(heap)
            j = nxt[i]
            if j < 0 or syms[i] != left or syms[j] != right:
                continue  # stale entry
            merged = left + right
            syms[i] = merged
            syms[j] = None
            nxt[i] = nxt[j]
            if nxt[j] >= 0:
                prv[nxt[j]] = i
            p = prv[i]
            if p >= 0:
                pair = syms[p] + merged  # type: ignore[operator]
                tid = vocab.get(pair)
                if tid is not None:
                    heapq.heappush(heap, (-scores[tid], p, syms[p], merged))  # type: ignore[arg-type, misc]
            q = nxt[i]
            if q >= 0:
                pair = merged + syms[q]  # type: ignore[operator]
                tid = vocab.get(pair)
                if tid is not None:
                    heapq.heappush(heap, (-scores[tid], i, merged, syms[q]))  # type: ignore[arg-type, misc]
        return [s for s in syms if s is not None]

"""Byte-level BPE (``tokenizer.ggml.model = gpt2``): plain text in, token ids out, and back.

Encoding one fragment of text (no special tokens in it):

1. split it into pre-tokens (``tg_llm.pretokenize``, rule from ``tokenizer.ggml.pre``);
2. write each pre-token's UTF-8 bytes as the GPT-2 byte alphabet (every byte is one printable
   character, so a space is ``Ġ`` and a newline ``Ċ``);
3. merge adjacent symbols: always the pair with the lowest merge rank, leftmost first, until no
   adjacent pair is in the merge table; each final symbol is a token.

Step 3 runs once per distinct pre-token: results are cached, so ordinary text costs a dict lookup
per word.
"""
from __future__ import annotations

import heapq
from collections.abc import Sequence
from functools import cache

from tg_llm import pretokenize

_CACHE_LIMIT = 200_000  # pre-tokens kept in the cache before it is cleared


@cache
def byte_alphabet() -> tuple[str, ...]:
    """The GPT-2 byte alphabet: ``byte_alphabet()[b]`` is the character that stands for byte ``b``.

    Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7f-0xa0, 0xad) take
    the code points 256, 257, ... in byte order.
    """
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    out = []
    extra = 256
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(extra))
            extra += 1
    return tuple(out)


@cache
def _alphabet_bytes() -> dict[str, int]:
    return {ch: b for b, ch in enumerate(byte_alphabet())}


def to_alphabet(data: bytes) -> str:
    """Bytes -> the string of their GPT-2 alphabet characters."""
    table = byte_alphabet()
    return "".join(table[b] for b in data)


def from_alphabet(text: str) -> bytes:
    """A token's text in the GPT-2 alphabet -> its bytes (characters outside the alphabet: their UTF-8)."""
    table = _alphabet_bytes()
    out = bytearray()
    for ch in text:
        b = table.get(ch)
        if b is None:
            out += ch.encode("utf-8")
        else:
            out.append(b)
    return bytes(out)


class BPEModel:
    """Merges by rank over the GPT-2 byte alphabet, with a cache per pre-token."""

    def __init__(self, token_to_id: dict[str, int], merges: Sequence[str], pre: str, unk_id: int | None) -> None:
        pretokenize.check(pre)
        self.pre = pre
        self.token_to_id = token_to_id
        self.unk_id = unk_id
        self.ignore_merges = pre in pretokenize.IGNORE_MERGES
        self.ranks: dict[tuple[str, str], int] = {}
        for rank, merge in enumerate(merges):
            left, sep, right = merge.partition(" ")
            if not sep or not left or not right:
                raise ValueError(f"merge {rank} {merge!r} is not two symbols separated by one space")
            self.ranks.setdefault((left, right), rank)
        self._cache: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (ordinary text: special tokens are not recognised here)."""
        out: list[int] = []
        cache_ = self._cache
        for piece in pretokenize.split(text, self.pre):
            ids = cache_.get(piece)
            if ids is None:
                if len(cache_) >= _CACHE_LIMIT:
                    cache_.clear()
                ids = cache_[piece] = self._encode_piece(piece)
            out.extend(ids)
        return out

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        word = to_alphabet(piece.encode("utf-8"))
        if self.ignore_merges and word in self.token_to_id:
            return (self.token_to_id[word],)
        return tuple(self._ids(self.merge(word)))

    def merge(self, word: str) -> list[str]:
        """Apply the merges to ``word`` (one character per symbol to start): the final symbols, in order.

        A heap of candidate pairs ordered by (rank, position of the left symbol). A popped pair is used
        only if both symbols are still there unchanged, so stale entries are skipped, not removed.
        """
        syms: list[str | None] = list(word)
        n = len(syms)
        if n < 2:
            return list(word)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        ranks = self.ranks
        heap: list[tuple[int, int, str, str]] = []
        for i in range(n - 1):
            rank = ranks.get((word[i], word[i + 1]))
            if rank is not None:
                heap.append((rank, i, word[i], word[i + 1]))
        heapq.heapify(heap)
        while heap:
            _, i, left, right = heapq.heappop(heap)
            j = nxt[i]
            if j < 0 or syms[i] != left or syms[j] != right:
                continue  # stale: one side has merged with something else since this entry was pushed
            merged = left + right
            syms[i] = merged
            syms[j] = None
            nxt[i] = nxt[j]
            if nxt[j] >= 0:
                prv[nxt[j]] = i
            p = prv[i]
            if p >= 0:
                rank = ranks.get((syms[p], merged))  # type: ignore[arg-type, misc]
                if rank is not None:
                    heapq.heappush(heap, (rank, p, syms[p], merged))  # type: ignore[arg-type, misc]
            q = nxt[i]
            if q >= 0:
                rank = ranks.get((merged, syms[q]))  # type: ignore[arg-type, misc]
                if rank is not None:
                    heapq.heappush(heap, (rank, i, merged, syms[q]))  # type: ignore[arg-type, misc]
        return [s for s in syms if s is not None]

    def _ids(self, symbols: list[str]) -> list[int]:
        out = []
        for sym in symbols:
            tid = self.token_to_id.get(sym)
            if tid is not None:
                out.append(tid)
                continue
            for ch in sym:  # a merge result missing from the vocabulary: fall back to its characters
                cid = self.token_to_id.get(ch, self.unk_id)
                if cid is None:
                    raise ValueError(f"byte {from_alphabet(ch)!r} has no token and the vocabulary has no unknown token")
                out.append(cid)
        return out

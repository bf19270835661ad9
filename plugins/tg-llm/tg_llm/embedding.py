"""Token embeddings of a GGUF model: rows dequantized on the host from the file's raw (quantized) table."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tg_llm.model_config import ModelError

# the embedding rows of a call of at most this many tokens (a decode step) are kept, up to this many bytes of them
# (then forgotten at once): dequantizing a row on the host cost ~0.1 ms of a 1-row step's few
EMBEDDING_KEPT_CALL = 8
EMBEDDING_KEPT_BYTES = 16 << 20


class Embedding:
    """Token embedding rows dequantized on the host from the file's raw (quantized) table."""

    def __init__(self, gf: Any, name: str, device: str, scale: float = 1.0) -> None:
        from tg_gguf.quants import DEQUANTIZERS
        if name not in gf.tensor_info:
            raise ModelError(f"model file has no tensor {name!r}")
        info = gf.tensor_info[name]
        self.vocab, self.dim = int(info.shape[0]), int(info.shape[1])
        self.type = info.type
        self.scale = np.float32(scale)
        self.table: np.ndarray | None = None
        self._kept: dict[int, np.ndarray] = {}  # token -> its row, for the rows of decode steps
        if info.type in DEQUANTIZERS:
            raw = np.frombuffer(gf.tensor_bytes(name), dtype=np.uint8)
            self.rows = raw.reshape(self.vocab, raw.size // self.vocab)
        else:  # no numpy dequantizer for this type: dequantize once on the device, keep a float table
            self.table = gf.tensors_as(device=device)[name].numpy()

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        if not 0 < len(ids) <= EMBEDDING_KEPT_CALL:
            return self.rows_of(ids)
        # (a decode step: its rows kept, most tokens come back; the new ones dequantized together, one call for the
        # step: each call cost ~50 us on the caches a step's kernels leave, per row of a batched step)
        tokens = [int(i) for i in ids]
        rows = [self._kept.get(t) for t in tokens]
        missing = list(dict.fromkeys(t for t, row in zip(tokens, rows, strict=True) if row is None))
        if missing:
            if (len(self._kept) + len(missing)) * self.dim * 4 > EMBEDDING_KEPT_BYTES:
                self._kept.clear()
            self._kept.update(zip(missing, self.rows_of(missing), strict=True))
        return np.stack([self._kept[t] if row is None else row for t, row in zip(tokens, rows, strict=True)])

    def rows_of(self, ids: Sequence[int]) -> np.ndarray:
        idx = np.asarray(ids, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.vocab):
            raise ValueError(f"token ids must be in 0..{self.vocab - 1}")
        if self.table is not None:
            rows = np.ascontiguousarray(self.table[idx], dtype=np.float32)
        else:
            from tg_gguf.quants import dequantize_numpy
            rows = dequantize_numpy(self.type, self.rows[idx], (idx.size, self.dim))
        return rows if self.scale == 1.0 else rows * self.scale

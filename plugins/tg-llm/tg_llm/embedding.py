"""Token embeddings of a GGUF model: rows dequantized on the host from the file's raw (quantized) table."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tg_llm.model_config import ModelError

# the embedding rows of a call of at most this many tokens (a decode step) are kept, up to this many bytes of them
# (then forgotten at once): a step's new rows, dequantized on the host, cost 140-270 us on the caches its kernels leave
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
            from tg_gguf.quants import row_dequantizer
            try:
                self._dequantize, row_bytes = row_dequantizer(info.type, self.dim, f"{name}'s row of {self.dim} values")
            except ValueError as e:
                raise ModelError(str(e)) from None
            raw = np.frombuffer(gf.tensor_bytes(name), dtype=np.uint8)
            if raw.size != self.vocab * row_bytes:
                raise ModelError(f"{name} holds {raw.size} bytes, not {self.vocab} rows of {row_bytes}")
            self.rows = raw.reshape(self.vocab, row_bytes)
        else:  # no numpy dequantizer for this type: dequantize once on the device, keep a float table
            self.table = gf.tensors_as(device=device)[name].numpy()

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        if not 0 < len(ids) <= EMBEDDING_KEPT_CALL:
            return self.rows_of(ids)
        # (a decode step: its rows kept, most tokens come back)
        rows = [self._kept.get(int(i)) for i in ids]
        for row in rows:  # (a plain loop: on the caches a step's kernels leave, a zip costs more than the lookups)
            if row is None:
                return self._with_new_rows(ids, rows)
        return np.stack(rows)  # type: ignore[arg-type]  # (none is None here)

    def _with_new_rows(self, ids: Sequence[int], rows: list[np.ndarray | None]) -> np.ndarray:
        """The rows of ``ids`` where those in ``rows`` are None are new: dequantized together and kept (one call for a
        step's new tokens: see EMBEDDING_KEPT_CALL)."""
        missing = list(dict.fromkeys(int(i) for i, row in zip(ids, rows, strict=True) if row is None))
        new = dict(zip(missing, self.rows_of(missing), strict=True))
        if (len(self._kept) + len(new)) * self.dim * 4 > EMBEDDING_KEPT_BYTES:
            self._kept.clear()
        self._kept.update(new)
        return np.stack([new[int(i)] if row is None else row for i, row in zip(ids, rows, strict=True)])

    def rows_of(self, ids: Sequence[int]) -> np.ndarray:
        # (a decode step's few ids checked in Python and the type's dequantizer called directly: each numpy call a
        # step makes costs 15-50 us on the caches its kernels leave)
        if len(ids) <= EMBEDDING_KEPT_CALL:
            idx: Any = [int(i) for i in ids]
            bad = any(not 0 <= i < self.vocab for i in idx)
        else:
            idx = np.asarray(ids, dtype=np.int64)
            bad = bool(idx.size) and (idx.min() < 0 or idx.max() >= self.vocab)
        if bad:
            raise ValueError(f"token ids must be in 0..{self.vocab - 1}")
        if self.table is not None:
            rows = np.ascontiguousarray(self.table[idx], dtype=np.float32)
        else:
            rows = self._dequantize(self.rows[idx])
        return rows if self.scale == 1.0 else rows * self.scale

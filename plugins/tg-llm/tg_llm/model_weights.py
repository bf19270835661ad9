"""A model's weights read from its GGUF file onto the device, with a progress count.

In:  an open GGUF file (``tg_gguf.load``), the model's config, the device, the tensor names this process loads (a
     pipeline stage: its layers only) and a ``progress(done, total)`` callback.
Out: ``WeightReader.get(name)``: a norm or bias as a float32 buffer (``small``), else a weight as its quantized bytes
     (``QuantizedMatrix``, dequantized lazily); ``stacked(names)``: neighbouring weights of one type as one matrix.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tg_llm.model_config import ModelConfig, ModelError


class WeightReader:
    """Reads weights by name and counts them for ``progress`` (``total``: the names given)."""

    def __init__(self, gf: Any, config: ModelConfig, device: str, names: list[str],
                 progress: Callable[[int, int], None] | None, int_dot: bool) -> None:
        self.gf = gf
        self.config = config
        self.device = device
        self.progress = progress
        self.int_dot = int_dot
        self.tensors = gf.tensors_as(device=device)
        self.total, self.done = len(names), 0

    def _count(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)

    def get(self, name: str, small: bool = False, required: bool = True) -> Any:
        """A norm or bias (``small``) as a float32 buffer of its own, else a weight (``matrix``); None for a missing
        tensor that is not ``required``."""
        if name not in self.gf.tensor_info:
            if required:
                raise ModelError(f"{self.config.architecture} model file has no tensor {name!r}")
            return None
        if small:  # norms and biases: a float32 buffer of their own
            t = self.tensors[name].cast("float32").contiguous().realize()
        else:
            t = self.matrix(name)
        self._count(1)
        return t

    def matrix(self, name: str) -> Any:
        """A weight as its quantized bytes (or their row-lane form) on the device (loaded now; the dequantization
        stays lazy)."""
        from tg_gguf.dequant import check_supported
        from tg_gguf.intdot import QuantizedMatrix
        info = self.gf.tensor_info[name]
        check_supported(info.type, name)
        rows, cols = (int(s) for s in info.shape)
        return QuantizedMatrix.from_host(np.frombuffer(self.gf.tensor_bytes(name), dtype=np.uint8), info.type,
                                         (rows, cols), self.device, name, self.int_dot)

    def stacked(self, names: list[str]) -> list[Any]:
        """The weights ``names`` (same columns) as few matrices as possible: each run of neighbours of one
        type becomes one matrix, their raw bytes concatenated on the host (a quantized row is whole blocks,
        so rows stack byte for byte), dequantized lazily. A Q4_K_M file's Q6_K attn_v makes two runs."""
        from tg_gguf.dequant import check_supported
        from tg_gguf.intdot import QuantizedMatrix
        gf = self.gf
        missing = [n for n in names if n not in gf.tensor_info]
        if missing:
            raise ModelError(f"{self.config.architecture} model file has no tensor {missing[0]!r}")
        runs: list[list[str]] = []
        for n in names:
            if runs and gf.tensor_info[n].type == gf.tensor_info[runs[-1][0]].type:
                runs[-1].append(n)
            else:
                runs.append([n])
        matrices = []
        for run in runs:
            infos = [gf.tensor_info[n] for n in run]
            raw = np.concatenate([np.frombuffer(gf.tensor_bytes(n), dtype=np.uint8) for n in run])
            rows = sum(int(i.shape[0]) for i in infos)
            self._count(len(run))
            name = "+".join(run)
            check_supported(infos[0].type, name)
            matrices.append(QuantizedMatrix.from_host(raw, infos[0].type, (rows, int(infos[0].shape[1])), self.device,
                                                      name, self.int_dot))
        return matrices

"""``GGUFFile.tensors``: tensor name -> a lazy Tensor dequantized on use.

In:  an opened ``GGUFFile`` (from a path or from bytes), a target ``dtype`` (float32 or float16) and
     a compute device.
Out: a read-only mapping; ``tensors[name]`` is a lazy Tensor of the tensor's shape whose graph is the
     dequantization (``tg_gguf.dequant``) of the tensor's raw bytes.

The raw bytes reach the device once per (tensor, device): from a file through the DISK device (a
shrink of the whole-file DISK tensor copied to the device reads only that tensor's bytes), from an
in-memory file with ``Tensor(np.frombuffer(...))``. They are realized on the device and kept (in the
``GGUFFile``); the dequantization on top stays lazy, so it fuses into whatever consumes it (a matmul
reads the quantized bytes directly).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from tg_gguf.dequant import check_supported, dequantize

if TYPE_CHECKING:
    from tg_gguf.reader import GGUFFile
    from tgcore.tensor import Tensor

DTYPES = ("float32", "float16")


class GGUFTensors(Mapping[str, "Tensor"]):
    """Tensor name -> lazy dequantized Tensor (``dtype`` on ``device``), for one ``GGUFFile``."""

    def __init__(self, gf: GGUFFile, dtype: str = "float32", device: str | None = None) -> None:
        from tgcore.runtime.registry import canonical
        name = getattr(dtype, "name", dtype)
        if name not in DTYPES:
            raise ValueError(f"GGUF tensors can be dequantized to {' or '.join(DTYPES)}, not {dtype!r}")
        self.gf = gf
        self.dtype = name
        self.device = canonical(device)

    def __getitem__(self, name: str) -> Tensor:
        info = self._info(name)
        check_supported(info.type, name)
        return dequantize(self.raw(name), info.type, info.shape, self.dtype, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.gf.tensor_info)

    def __len__(self) -> int:
        return len(self.gf.tensor_info)

    def __contains__(self, name: object) -> bool:
        return name in self.gf.tensor_info

    def __repr__(self) -> str:
        return f"<GGUFTensors of {self.gf!r}: {len(self)} tensors as {self.dtype} on {self.device}>"

    def _info(self, name: str):  # noqa: ANN202
        try:
            return self.gf.tensor_info[name]
        except KeyError:
            raise KeyError(f"no tensor {name!r} in {self.gf.path or 'this GGUF file'}") from None

    def raw(self, name: str) -> Tensor:
        """The tensor's raw (quantized) bytes as a realized 1-D uint8 Tensor on the device (loaded once)."""
        import numpy as np

        from tgcore.tensor import Tensor

        info = self._info(name)
        self.gf._view()  # fail on a closed file
        key = (name, self.device)
        cache = self.gf._device_bytes
        if key in cache:
            return cache[key]
        if info.nbytes == 0:
            raw = Tensor(np.zeros(0, dtype=np.uint8), device=self.device)
        elif self.gf._mmap is not None:
            disk = self.gf._disk_tensor()
            raw = disk.shrink(((info.offset, info.offset + info.nbytes),)).to(self.device).realize()
        else:
            raw = Tensor(np.frombuffer(self.gf.tensor_bytes(name), dtype=np.uint8), device=self.device)
        cache[key] = raw
        return raw

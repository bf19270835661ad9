"""The host inputs of a jitted decode step, kept on the device from one step to the next.

In:  a step's shape (a key: rows, attention windows, first sequence) and the numpy arrays its inputs hold now.
Out: the same tensors call after call for that key, their memory rewritten in place with this step's arrays.

Why: a decode step of one row runs in a few milliseconds, and making its five or so input tensors anew each step (a
buffer, a name, an allocation, the old ones freed) cost ~0.3 ms of it. A jitted step replays on whatever input
buffers it is given, so handing it the same ones, refilled, is the same computation. A tensor is only refilled when
nothing but itself reads its memory (``RealizationState.in_place_buffer``: no lazy graph built on it is alive), else
it is replaced by a new one, as before.

The step's result goes the other way (``HeldOutputs``): it is written into a tensor passed in, and the numpy array over
that tensor's memory is the caller's result, so nothing is copied out after the step.
"""
from __future__ import annotations

import ctypes
import sys
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np


class HeldInputs:
    """Input tensors per step shape, refilled in place (see the module doc)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._held: dict[Hashable, list[Any]] = {}

    def fill(self, key: Hashable, arrays: Sequence[np.ndarray]) -> list[Any]:
        """Tensors holding ``arrays`` (each of the shape and dtype the key's earlier calls gave)."""
        from tgcore.schedule.state import REALIZATION
        from tgcore.tensor import Tensor
        held = self._held.get(key)
        if held is None or len(held) != len(arrays):
            held = self._held[key] = [Tensor(a, device=self.device) for a in arrays]
            return held
        for i, (t, a) in enumerate(zip(held, arrays, strict=True)):
            buf = REALIZATION.in_place_buffer(t)
            if buf is None or t.shape != a.shape or t.dtype.np != a.dtype:
                held[i] = Tensor(a, device=self.device)
                continue
            buf.copyin(np.ascontiguousarray(a))  # (copyin takes any C-contiguous buffer)
            REALIZATION.invalidate(buf)
        return held


# arrays kept per step shape for HeldOutputs: a caller that keeps every step's logits gets copies after this many
OUTPUTS_KEPT = 4


class _Output:
    def __init__(self, tensor: Any, flat: np.ndarray, shape: tuple[int, ...]) -> None:
        self.tensor, self.flat, self.array = tensor, flat, flat.reshape(shape)

    def free(self) -> bool:
        """Whether no one but this holds the array or any view of it (numpy gives every view of ``array`` the flat
        array as its base)."""
        return sys.getrefcount(self.array) == 2 and sys.getrefcount(self.flat) == 3  # (+1: the call's argument)


class HeldOutputs:
    """Tensors a jitted step writes its result into (an input it assigns to), each with a numpy array over its memory
    that is handed to the caller as the result: no copy after the step (the logits of a decode step, 4 rows x 49152
    floats, cost ~0.2-0.4 ms to copy out of caches the step's kernels had filled). A tensor is written again only
    when nothing but this holds its array (its reference count: the caller dropped the array and every view of it);
    while ``OUTPUTS_KEPT`` are held, ``take`` gives None (the caller copies the result out as before)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._held: dict[Hashable, list[_Output]] = {}

    def take(self, key: Hashable, shape: tuple[int, ...], dtype: type) -> tuple[Any, np.ndarray | None]:
        """A tensor of ``shape`` (numpy ``dtype``) for the step to write, with the array over its memory that no one
        else holds; while ``OUTPUTS_KEPT`` are held, a tensor of its own and None (copy its values out)."""
        from tgcore.schedule.state import REALIZATION
        from tgcore.tensor import Tensor
        outputs = self._held.setdefault(key, [])
        for out in outputs:
            if out.free():
                return out.tensor, out.array
        tensor = Tensor.empty(*shape, dtype=np.dtype(dtype).name, device=self.device).realize()
        buf = REALIZATION.buffer_of(tensor)
        assert buf is not None
        buf.ensure_allocated()
        if len(outputs) >= OUTPUTS_KEPT or not buf.allocator.can_zero_copy:
            return tensor, None
        memory: Any = (ctypes.c_uint8 * buf.nbytes).from_buffer(buf.as_buffer())
        memory.tensor = tensor  # the array's memory stays the tensor's while any view of it is alive, model or not
        outputs.append(_Output(tensor, np.frombuffer(memory, np.dtype(dtype)), shape))
        return tensor, outputs[-1].array

"""The host inputs of a jitted decode step, kept on the device from one step to the next.

In:  a step's shape (a key: rows, attention windows, first sequence) and the numpy arrays its inputs hold now.
Out: the same tensors call after call for that key, their memory rewritten in place with this step's arrays.

Why: a decode step of one row runs in a few milliseconds, and making its five or so input tensors anew each step (a
buffer, a name, an allocation, the old ones freed) cost ~0.3 ms of it. A jitted step replays on whatever input
buffers it is given, so handing it the same ones, refilled, is the same computation. A tensor is only refilled when
nothing but itself reads its memory (``RealizationState.in_place_buffer``: no lazy graph built on it is alive), else
it is replaced by a new one, as before.
"""
from __future__ import annotations

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

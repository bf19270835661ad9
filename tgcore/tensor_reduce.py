"""The reductions that stay on Tensor: logsumexp (it needs exp and log, whose formulas make unshaped constants on
a UOp) and the running maxima and minima with their indices (cummax, cummin: they gather); the others (sum, max,
min, mean, var, argmax, cumsum, matmul, ...) are shared with UOp in `tgcore.uop.reduction`.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.

In:  a tensor and ``axis`` (None for all axes, an int or ints, negative counting from the end), as in ``sum``.
Out: lazy tensors, as torch's.
"""
# mypy: disable-error-code="misc"
# (methods annotate ``self: Tensor``: a mixin is only ever used as a base of Tensor)
from __future__ import annotations

import builtins
import math
from typing import TYPE_CHECKING

from tgcore.dtype import dtypes, least_upper_float
from tgcore.uop.movement import axis_index
from tgcore.uop.reduction import Axis, reduced_axes

if TYPE_CHECKING:
    from tgcore.tensor import Tensor


class ReduceMixin:
    __slots__ = ()

    def logsumexp(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False) -> Tensor:
        """log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the max, so large values do not overflow."""
        x = self.cast(least_upper_float(self.dtype))
        m = x.max(axis, keepdim=True)
        m = ((m == math.inf) | (m == -math.inf)).where(0.0, m)  # all -inf (or +inf present): shift by 0
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in reduced_axes(axis, x.ndim)))

    def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
        """Running maximum along ``axis``: (values, indices), like torch (an index is the latest position holding
        the running value; after a nan, the latest nan)."""
        return self._cumulative_with_indices(axis, True)

    def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
        """Running minimum along ``axis``: (values, indices), like torch (see cummax)."""
        return self._cumulative_with_indices(axis, False)

    def _cumulative_with_indices(self: Tensor, axis: int, is_max: builtins.bool) -> tuple[Tensor, Tensor]:
        """(values, indices); the values are gathered at the indices, so the gradient goes where torch sends it
        (the one position each value came from, not split between ties)."""
        idx = self._cumulative_indices(self._cumulative(axis, is_max).detach(), axis)
        if self.ndim == 0:
            return self, idx
        return self.gather(axis, idx), idx

    def _cumulative_indices(self: Tensor, values: Tensor, axis: int) -> Tensor:
        """For each position i, the latest j <= i where this tensor holds values[i] (int64)."""
        tensor_type = type(self)
        if self.ndim == 0:
            axis_index(axis, 0)
            return tensor_type(0, device=self.device, dtype=dtypes.int64)
        ax = axis_index(axis, self.ndim)
        n = self.shape[ax]
        x = self.transpose(ax, -1) if ax != self.ndim - 1 else self
        v = values.transpose(ax, -1) if ax != self.ndim - 1 else values
        rows = tensor_type.arange(n, device=self.device).reshape(n, 1)
        cols = tensor_type.arange(n, device=self.device).reshape(1, n)
        xj, vi = x.unsqueeze(-2), v.unsqueeze(-1)  # [..., i, j]
        same = (xj == vi) | (xj.isnan() & vi.isnan())
        out = ((cols <= rows) & same).where(cols, -1).max(-1).cast(dtypes.int64)
        return out.transpose(ax, -1) if ax != self.ndim - 1 else out

    def _cumulative(self: Tensor, axis: int, is_max: builtins.bool) -> Tensor:
        tensor_type = type(self)
        if self.ndim == 0:
            return self
        ax = axis_index(axis, self.ndim)
        n = self.shape[ax]
        x = self.transpose(ax, -1) if ax != self.ndim - 1 else self
        rows = tensor_type.arange(n, device=self.device).reshape(n, 1)
        cols = tensor_type.arange(n, device=self.device).reshape(1, n)
        window = x.unsqueeze(-2).expand(x.shape[:-1] + (n, n))
        # [i, j]: j <= i takes part in position i; the others are replaced by the last element of the window
        # (x[i] itself), which never changes the extreme and works for every dtype, nan and inf included
        own = x.unsqueeze(-1).expand(x.shape[:-1] + (n, n))
        masked = (cols <= rows).where(window, own)
        out = masked.max(-1) if is_max else masked.min(-1)
        return out.transpose(ax, -1) if ax != self.ndim - 1 else out

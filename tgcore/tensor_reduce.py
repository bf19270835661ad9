"""Reductions and matmul: sum/max/min/mean/cumsum (one REDUCE_AXIS each), and built on them var, std, prod,
argmax/argmin, any/all, logsumexp, cummax/cummin.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.

In:  a tensor, ``axis`` (None for all axes, an int, or a tuple of ints; negative counts from
     the end) and ``keepdim`` (keep reduced axes as size 1), as in ``sum``.
Out: lazy tensors; each reduction is one REDUCE_AXIS (or a few) that the scheduler fuses.
"""
# mypy: disable-error-code="misc"
# (methods annotate ``self: Tensor``: a mixin is only ever used as a base of Tensor)
from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tgcore.dtype import DType, dtypes, least_upper_dtype, least_upper_float
from tgcore.errors import TensorValueError
from tgcore.helpers import prod

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

Axis = int | Sequence[int] | None


def _axes(axis: Axis, ndim: int) -> tuple[int, ...]:
    """Sorted, non-negative axes for ``axis`` (None means all); IndexError when one is out of range."""
    if axis is None:
        return tuple(range(ndim))
    raw = (axis,) if isinstance(axis, int) else tuple(axis)
    out = set()
    for a in raw:
        if not -max(ndim, 1) <= a < max(ndim, 1):
            raise IndexError(f"axis {a} is out of range for a tensor with {ndim} dimensions")
        out.add(a % max(ndim, 1))
    return tuple(sorted(out)) if ndim else ()


def _axis(axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis % max(ndim, 1)


def _count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return prod(shape[a] for a in axes)


class ReduceMixin:
    __slots__ = ()

    # (sum, prod, max, any: tgcore.uop.reduction.ReductionMixin, shared with UOp)
    def min(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False) -> Tensor:
        if self.dtype is dtypes.bool:
            return self.logical_not().max(axis, keepdim).logical_not()
        if dtypes.is_unsigned(self.dtype):
            return (int(self.dtype.max) - (int(self.dtype.max) - self).max(axis, keepdim))
        if dtypes.is_int(self.dtype):  # ~x = -x - 1 reverses the order without overflowing at the type's minimum
            return ~((~self).max(axis, keepdim))
        return -((-self).max(axis, keepdim))

    def mean(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False) -> Tensor:
        out = self.cast(least_upper_float(self.dtype)).sum(axis, keepdim)
        n = prod(self.shape) // max(1, prod(out.shape)) if self.numel() else 0
        return out / n if n else out * math.nan

    def cumsum(self: Tensor, axis: builtins.int = 0) -> Tensor:
        """Running sum along ``axis`` (a masked sum over a window: O(n^2) work along that axis)."""
        ax = _axis(axis, self.ndim)
        if self.ndim == 0:  # (a 0-d tensor is its own running sum)
            return self.cast(self._sum_dtype())
        n = self.shape[ax]
        x = self.transpose(ax, -1) if ax != self.ndim - 1 else self
        rows = self.arange(n, device=self.device).reshape(n, 1)
        cols = self.arange(n, device=self.device).reshape(1, n)
        mask = cols <= rows  # [i, j]: j contributes to position i
        window = x.unsqueeze(-2).expand(x.shape[:-1] + (n, n))
        out = mask.where(window, 0).sum(-1, dtype=self._sum_dtype())
        return out.transpose(ax, -1) if ax != self.ndim - 1 else out

    def _sum_dtype(self: Tensor) -> DType:
        if dtypes.is_int(self.dtype) or self.dtype is dtypes.bool:
            return dtypes.uint64 if dtypes.is_unsigned(self.dtype) else dtypes.int64
        return self.dtype

    # ---------------------------------------------------------------- matmul
    def matmul(self: Tensor, other: Tensor) -> Tensor:
        a, b = self, other
        if a.ndim == 0 or b.ndim == 0:
            raise TensorValueError("matmul needs tensors with at least one dimension")
        a1, b1 = a.ndim == 1, b.ndim == 1
        if a1:
            a = a.reshape(1, -1)
        if b1:
            b = b.reshape(-1, 1)
        if a.shape[-1] != b.shape[-2]:
            raise TensorValueError(f"matmul shapes {self.shape} and {other.shape} do not line up "
                                   f"({a.shape[-1]} != {b.shape[-2]})")
        dt = least_upper_dtype(a.dtype, b.dtype)
        a, b = a.cast(dt), b.cast(dt)
        # (..., M, K) x (..., K, N) -> (..., M, 1, K) * (..., 1, N, K), summed over K
        acc = dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt  # like torch: wide products and sum
        prod_ = a.cast(acc).unsqueeze(-2) * b.cast(acc).transpose(-1, -2).unsqueeze(-3)
        out = prod_.sum(-1, dtype=acc).cast(dt)
        if a1:
            out = out.squeeze(-2)
        if b1:
            out = out.squeeze(-1)
        return out

    def __matmul__(self: Tensor, other: Tensor) -> Tensor:
        return self.matmul(other)

    def dot(self: Tensor, other: Tensor) -> Tensor:
        return self.matmul(other)

    # ---------------------------------------------------------------- built on them
    def var(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False, correction: int | float = 1) -> Tensor:
        """Variance: sum of squared deviations from the mean over (count - correction), like numpy's ``ddof``."""
        x = self.cast(least_upper_float(self.dtype))
        n = _count(x.shape, _axes(axis, x.ndim))
        dev = x - x.mean(axis, keepdim=True)
        ss = (dev * dev).sum(axis, keepdim)
        return ss / max(n - correction, 0)  # (like torch: inf, or nan for 0/0, when correction >= n)

    def std(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False, correction: int | float = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False,
                 correction: int | float = 1) -> tuple[Tensor, Tensor]:
        return self.var(axis, keepdim, correction), self.cast(least_upper_float(self.dtype)).mean(axis, keepdim)

    def std_mean(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False,
                 correction: int | float = 1) -> tuple[Tensor, Tensor]:
        return self.std(axis, keepdim, correction), self.cast(least_upper_float(self.dtype)).mean(axis, keepdim)

    def all(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False) -> Tensor:
        """Whether every element is true (nonzero); True over an empty axis."""
        return self.cast(dtypes.bool).logical_not().any(axis, keepdim).logical_not()

    def argmax(self: Tensor, axis: int | None = None, keepdim: builtins.bool = False) -> Tensor:
        """Index of the largest value along ``axis`` (of the flattened tensor for None); the first one on ties."""
        return self._arg_extreme(True, axis, keepdim)

    def argmin(self: Tensor, axis: int | None = None, keepdim: builtins.bool = False) -> Tensor:
        """Index of the smallest value along ``axis`` (of the flattened tensor for None); the first one on ties."""
        return self._arg_extreme(False, axis, keepdim)

    def _arg_extreme(self: Tensor, is_max: builtins.bool, axis: int | None, keepdim: builtins.bool) -> Tensor:
        tensor_type = type(self)
        name = "argmax" if is_max else "argmin"
        if axis is None:
            out = self.reshape(-1)._arg_extreme(is_max, 0, False)
            return out.reshape((1,) * self.ndim) if keepdim else out
        ax = _axes(axis, self.ndim)[0] if self.ndim else 0
        n = self.shape[ax] if self.ndim else 1
        if n == 0:
            raise ValueError(f"{name} of an empty axis (axis {axis} of shape {self.shape})")
        if not is_max and dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype):
            return (~self)._arg_extreme(True, axis, keepdim)  # ~x = -x - 1 reverses the order and never overflows
        hit = self == (self.max(ax, keepdim=True) if is_max else self.min(ax, keepdim=True))
        if dtypes.is_float(self.dtype):  # max and min propagate NaN: the first NaN is the answer
            hit = hit | (self != self)
        # a hit at index i scores n - i, so the largest score is the first hit
        score = tensor_type.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - ax - 1))
        best = hit.where(score, 0).max(ax, keepdim)
        return (n - best).cast(dtypes.default_int)

    def logsumexp(self: Tensor, axis: Axis = None, keepdim: builtins.bool = False) -> Tensor:
        """log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the max, so large values do not overflow."""
        x = self.cast(least_upper_float(self.dtype))
        m = x.max(axis, keepdim=True)
        m = ((m == math.inf) | (m == -math.inf)).where(0.0, m)  # all -inf (or +inf present): shift by 0
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in _axes(axis, x.ndim)))

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
            _axes(axis, 0)
            return tensor_type(0, device=self.device, dtype=dtypes.int64)
        ax = _axes(axis, self.ndim)[0]
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
        ax = _axes(axis, self.ndim)[0]
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

"""Ordering and data-dependent selection: sort, argsort, topk, nonzero, masked_select, scatter_reduce,
cumprod, logcumsumexp.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.

In:  tensors and torch's arguments for each function.
Out: lazy tensors, except ``nonzero`` and ``masked_select``, whose size depends on the data: they realize the
     mask to count it (like indexing with a bool tensor).

How: ``sort`` ranks every element against every other along the axis (O(n^2) compares, one reduction), with
ties in their original order (a stable sort: torch's order for equal values) and nan after every number
(first when descending), then moves each element to its rank with a one-hot select, so the values'
gradient flows back to where each came from. ``cumprod`` and ``logcumsumexp`` reduce a masked window per
position (O(n^2) along the axis, like ``cumsum``).
"""
# mypy: disable-error-code="misc"
# (methods annotate ``self: Tensor``: a mixin is only ever used as a base of Tensor)
from __future__ import annotations

import builtins
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tgcore.dtype import dtypes, least_upper_float
from tgcore.errors import TensorValueError
from tgcore.uop.mixins import broadcast_shape

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

SCATTER_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _axis(axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-max(ndim, 1)}, {max(ndim, 1) - 1}], "
                         f"but got {axis})")
    return axis % max(ndim, 1)


def _last(x: Tensor, ax: int) -> Tensor:
    """``x`` with axis ``ax`` moved last (its own inverse with the same ax: a swap)."""
    return x.transpose(ax, -1) if ax != x.ndim - 1 else x


def _window(x: Tensor, fill: Any) -> Tensor:
    """(..., n) -> (..., n, n): row i holds x[..., j] for j <= i and ``fill`` after."""
    n = x.shape[-1]
    rows = x.arange(n, device=x.device).reshape(n, 1)
    cols = x.arange(n, device=x.device).reshape(1, n)
    return (cols <= rows).where(x.unsqueeze(-2).expand(x.shape[:-1] + (n, n)), fill)


class SelectMixin:
    __slots__ = ()

    # ---------------------------------------------------------------- sorting
    def sort(self: Tensor, dim: int = -1, descending: builtins.bool = False, *,
             stable: builtins.bool = False) -> tuple[Tensor, Tensor]:
        """(values, indices) sorted along ``dim``; equal values keep their order, nan sorts as the largest.
        The sort is always stable, so ``stable`` (torch's keyword) changes nothing."""
        tensor_type = type(self)
        if self.ndim == 0:
            _axis(dim, 0)
            return self, tensor_type(0, device=self.device, dtype=dtypes.int64)
        ax = _axis(dim, self.ndim)
        x = _last(self, ax)
        n = x.shape[-1]
        xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)  # [..., i, j]: element i against element j
        if dtypes.is_float(x.dtype):
            nan_i, nan_j = xi.isnan(), xj.isnan()
            before = ((xj > xi) | (nan_j & nan_i.logical_not())) if descending else \
                ((xj < xi) | (nan_i & nan_j.logical_not()))
            same = (xj == xi) | (nan_i & nan_j)
        else:
            before, same = (xj > xi) if descending else (xj < xi), xj == xi
        pos = tensor_type.arange(n, device=self.device)
        earlier = pos.reshape(1, n) < pos.reshape(n, 1)  # [i, j]: j comes before i
        rank = (before | (same & earlier)).sum(-1, dtype=dtypes.int32)  # (..., n): where element i goes
        to = rank.unsqueeze(-1) == pos  # [..., i, k]: element i goes to place k
        values = to.where(xi, False if x.dtype is dtypes.bool else 0)
        values = values.max(-2) if x.dtype is dtypes.bool else values.sum(-2, dtype=x.dtype)
        indices = to.where(pos.reshape(n, 1).cast(dtypes.int64), 0).sum(-2, dtype=dtypes.int64)
        return _last(values, ax), _last(indices, ax)

    def argsort(self: Tensor, dim: int = -1, descending: builtins.bool = False, *,
                stable: builtins.bool = False) -> Tensor:
        return self.sort(dim, descending)[1]

    def topk(self: Tensor, k: int, dim: int = -1, largest: builtins.bool = True,
             sorted: builtins.bool = True) -> tuple[Tensor, Tensor]:  # noqa: A002 (torch's name)
        """The ``k`` largest (smallest) elements along ``dim`` and their indices, in order."""
        ax = _axis(dim, self.ndim)
        n = self.shape[ax] if self.ndim else 1
        if not 0 <= k <= n:
            raise TensorValueError(f"selected index k out of range (k = {k}, size {n})")
        values, indices = self.sort(ax, descending=largest)
        if self.ndim == 0:
            return values, indices
        keep = [None] * ax + [(0, k)] + [None] * (self.ndim - ax - 1)
        return values.shrink(keep), indices.shrink(keep)

    # ---------------------------------------------------------------- data-dependent sizes
    def nonzero(self: Tensor, as_tuple: builtins.bool = False) -> Any:
        """Indices of the nonzero elements, (count, ndim) int64 in row-major order (realizes this tensor)."""
        tensor_type = type(self)
        where = np.nonzero(self.cast(dtypes.bool).numpy().reshape(self.shape if self.ndim else (1,)))
        if as_tuple:
            return tuple(tensor_type(w.astype(np.int64), device=self.device) for w in where)
        return tensor_type(np.stack(where, axis=-1).astype(np.int64).reshape(-1, self.ndim), device=self.device)

    def masked_select(self: Tensor, mask: Any) -> Tensor:
        """The elements where ``mask`` (broadcast with this tensor) is true, flattened (realizes the mask)."""
        tensor_type = type(self)
        m = mask if isinstance(mask, tensor_type) else tensor_type(np.asarray(mask, dtype=bool), device=self.device)
        if m.dtype is not dtypes.bool:
            raise TypeError(f"masked_select: expected a bool mask, got {m.dtype!r}")
        shape = broadcast_shape(self.shape, m.shape)
        x = self._broadcast_to(shape).reshape(-1)
        return x[m._broadcast_to(shape).reshape(-1).numpy()]

    # ---------------------------------------------------------------- scatter with a reduction
    def scatter_reduce(self: Tensor, dim: int, index: Any, src: Tensor, reduce: str,
                       include_self: builtins.bool = True) -> Tensor:
        """Combine ``src[..., i, ...]`` into ``out[..., index[..., i, ...], ...]`` along ``dim`` with ``reduce``
        ("sum", "prod", "mean", "amax", "amin"); ``include_self`` counts the existing value as one of them."""
        tensor_type = type(self)
        from tgcore.tensor_index import _check_bounds, _index_tensor, _region
        if reduce not in SCATTER_REDUCTIONS:
            raise TensorValueError(f"reduce argument must be one of {SCATTER_REDUCTIONS}, got {reduce!r}")
        d = _axis(dim, self.ndim)
        idx = _index_tensor(self, index)
        region = _region(self, idx, d, "scatter_reduce")
        size = self.shape[d] if self.ndim else 1
        _check_bounds(idx if index is idx else index, d, size)
        if src.ndim != idx.ndim or any(s < i for s, i in zip(src.shape, idx.shape, strict=True)):
            raise TensorValueError(f"scatter_reduce: src of shape {src.shape} is smaller than the index {idx.shape}")
        s = src.cast(self.dtype).shrink([(0, n) for n in idx.shape]) if idx.ndim else src.cast(self.dtype)
        idx = (idx < 0).where(idx + size, idx)
        x_t, i_t, s_t = _last(region, d), _last(idx, d), _last(s, d)
        onehot = i_t.unsqueeze(-1) == tensor_type.arange(size, device=self.device)  # (..., K, S)
        sv = s_t.unsqueeze(-1)
        hits = onehot.sum(-2, dtype=dtypes.int32)  # (..., S)
        if reduce in ("sum", "mean"):
            total = onehot.where(sv, 0).sum(-2, dtype=self.dtype)
            if include_self:
                total = total + x_t
            new = total
            if reduce == "mean":
                count = hits + (1 if include_self else 0)
                new = total / count.maximum(1).cast(least_upper_float(self.dtype)) if dtypes.is_float(self.dtype) \
                    else total // count.maximum(1).cast(self.dtype)
        elif reduce == "prod":
            new = onehot.where(sv, 1).prod(-2, dtype=self.dtype)
            if include_self:
                new = new * x_t
        else:
            is_max = reduce == "amax"
            lowest = -math.inf if dtypes.is_float(self.dtype) else int(self.dtype.min)
            highest = math.inf if dtypes.is_float(self.dtype) else int(self.dtype.max)
            picked = onehot.where(sv, lowest if is_max else highest)
            new = picked.max(-2) if is_max else picked.min(-2)
            if include_self:
                new = new.maximum(x_t) if is_max else new.minimum(x_t)
        new = (hits > 0).where(new, x_t).cast(self.dtype)  # untouched places keep their value
        new = _last(new, d)
        if new.shape == self.shape:
            return new
        pads = [(0, full - part) for full, part in zip(self.shape, new.shape, strict=True)]
        inside = tensor_type.full(new.shape, True, dtype=dtypes.bool, device=self.device).pad(pads)
        return inside.where(new.pad(pads), self)

    # ---------------------------------------------------------------- running products and log-sum-exps
    def cumprod(self: Tensor, dim: int = 0) -> Tensor:
        """Running product along ``dim`` (ints as int64, like torch); the gradient handles zeros."""
        ax = _axis(dim, self.ndim)
        if self.ndim == 0:
            return self.cast(self._accumulation_dtypes(None)[1])
        acc_dt, out_dt = self._accumulation_dtypes(None)
        x = _last(self.cast(acc_dt), ax)
        return _last(_window(x, 1).prod(-1, dtype=acc_dt), ax).cast(out_dt)

    def logcumsumexp(self: Tensor, dim: int = 0) -> Tensor:
        """log(cumsum(exp(x))) along ``dim``, each position shifted by its running maximum (no overflow, and small
        early values are not lost to a later large one)."""
        ax = _axis(dim, self.ndim)
        x = self.cast(least_upper_float(self.dtype))
        if self.ndim == 0:
            return x
        x = _last(x, ax)
        m = x.cummax(-1)[0].detach()
        m = (m.abs() == math.inf).where(0.0, m)  # all -inf so far (or +inf): shift by 0
        w = _window(x, -math.inf) - m.unsqueeze(-1)
        return _last(w.exp().sum(-1).log() + m, ax)

"""The reductions UOp and Tensor share, written once on ``Self``: sum, prod, max and any (one REDUCE_AXIS each,
with torch's accumulation dtypes), and built on them min, all, mean, var, std, var_mean, std_mean, argmax,
argmin, cumsum and matmul.

In:  a class with the movement surface (`tgcore.uop.movement`), the elementwise one (`tgcore.uop.mixins`:
     ``alu``, ``_scalar_like``, ``_broadcasted``, ``_where``) and two more methods: ``_reduce_axis(op, axes)``
     (the REDUCE_AXIS of ``op`` over ``axes``, sorted and non-negative, keeping them as size 1) and
     ``_arange(n)`` (0, 1, ..., n-1 as an int32 value of this kind). ``axis`` is None (all axes), an int or a
     sequence of ints, negative counting from the end.
Out: lazy reductions; ``keepdim`` keeps the reduced axes as size 1. Ints and bools sum and multiply as int64
     (uint64 for unsigned), narrow floats accumulate in float32 and round back once (like torch on CPU).

The formulas pair their operands explicitly (``_broadcasted``, ``_scalar_like``, ``_where``) and subtract as
``a + NEG(b)``, because a UOp's own operators neither broadcast nor take Python scalars as shaped constants and
its ``-`` keeps a C-like meaning: so a formula builds the same graph on a Tensor as on its UOp. ``logsumexp``
stays on Tensor (`tgcore.tensor_reduce`): it needs ``exp`` and ``log``, whose formulas
(`tgcore.uop.transcendental`) take Python scalars, which a UOp makes unshaped constants (right for the kernel-level
nodes those formulas serve, not for a tensor-level graph).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

from tgcore.dtype import DType, dtypes, least_upper_dtype, least_upper_float, to_dtype
from tgcore.errors import TensorValueError
from tgcore.helpers import prod
from tgcore.uop.movement import axis_index
from tgcore.uop.ops import Ops

Axis = int | Sequence[int] | None


def reduced_axes(axis: Axis, ndim: int) -> tuple[int, ...]:
    """Sorted, non-negative axes for ``axis`` (None means all); IndexError when one is out of range."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted({axis_index(a, ndim) for a in ((axis,) if isinstance(axis, int) else axis)}))


def _count(shape: tuple[int, ...], axis: Axis) -> int:
    """How many elements a reduction over ``axis`` combines into each result (IndexError for a bad axis)."""
    axes = reduced_axes(axis, len(shape))
    return prod(shape[a] for a in axes) if shape else 1


class ReductionMixin:
    """Reductions written once for UOp and Tensor (see the module docstring for the surface)."""

    __slots__ = ()
    if TYPE_CHECKING:  # (from MovementMixin and ElementwiseMixin, or the class itself)
        @property
        def shape(self) -> tuple[int, ...]: ...

        @property
        def ndim(self) -> int: ...

        @property
        def dtype(self) -> DType: ...

        def numel(self) -> int: ...

        def cast(self, dtype: DType) -> Self: ...

        def alu(self, op: Ops, *src: Self) -> Self: ...

        def _scalar_like(self, value: Any, dtype: DType | None = None) -> Self: ...

        def _broadcasted(self, x: Any, reverse: bool = False) -> tuple[Self, Self]: ...

        def _where(self, x: Any, y: Any) -> Self: ...

        def reshape(self, *shape: Any) -> Self: ...

        def transpose(self, dim0: int = 1, dim1: int = 0) -> Self: ...

        def unsqueeze(self, dim: int) -> Self: ...

        def squeeze(self, dim: int | None = None) -> Self: ...

        def expand(self, *shape: Any) -> Self: ...

        def eq(self, x: Any) -> Self: ...

        def ne(self, x: Any) -> Self: ...

        def sqrt(self) -> Self: ...

        def exp(self) -> Self: ...

        def log(self) -> Self: ...

        def __add__(self, x: Any) -> Self: ...

        def __mul__(self, x: Any) -> Self: ...

        def __truediv__(self, x: Any) -> Self: ...

        def __lt__(self, x: Any) -> Self: ...

        def __or__(self, x: Any) -> Self: ...

        def __xor__(self, x: Any) -> Self: ...

    def _reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> Self:
        raise NotImplementedError

    def _arange(self, n: int) -> Self:
        """0, 1, ..., n-1 (int32) as a value of this kind."""
        raise NotImplementedError

    # ---------------------------------------------------------------- elementwise steps, as a Tensor builds them
    def _not(self) -> Self:
        """not x for a bool value (x != True)."""
        return self.ne(self._scalar_like(True))

    def _minus(self, x: Self) -> Self:
        """self - x for two values of one dtype and shape, as ADD(self, NEG(x)) (a Tensor's ``-``)."""
        return self + x.alu(Ops.NEG)

    def _bit_not(self) -> Self:
        """~x for a signed int value: -x - 1, which reverses the order and never overflows."""
        return self ^ self._scalar_like(-1)

    def _reduce(self, op: Ops, axis: Axis, keepdim: bool) -> Self:
        axes = reduced_axes(axis, self.ndim)
        if self.ndim == 0:
            return self
        out_shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
        red = self._reduce_axis(op, axes) if axes else self
        if keepdim:
            return red
        return red.reshape(tuple(s for i, s in enumerate(out_shape) if i not in axes))

    def _accumulation_dtypes(self, dtype: DType | str | None) -> tuple[DType, DType]:
        """(dtype to accumulate a sum or product in, dtype of the result): ints and bools widen to int64
        (uint64 for unsigned), narrow floats accumulate in float32 and round back once, also when asked for by
        ``dtype`` (like torch, and the same on every device)."""
        if dtype is not None:
            dt = to_dtype(dtype)
            return (dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt), dt
        if dtypes.is_int(self.dtype) or self.dtype is dtypes.bool:
            wide = dtypes.uint64 if dtypes.is_unsigned(self.dtype) else dtypes.int64
            return wide, wide
        return (dtypes.float32 if self.dtype in (dtypes.float16, dtypes.bfloat16) else self.dtype), self.dtype

    def sum(self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None) -> Self:
        """Sum; ints and bools accumulate as int64 (uint64 for unsigned), narrow floats in float32."""
        acc_dt, out_dt = self._accumulation_dtypes(dtype)
        return self.cast(acc_dt)._reduce(Ops.ADD, axis, keepdim).cast(out_dt)

    def prod(self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None) -> Self:
        """Product; ints and bools multiply as int64 (uint64 for unsigned), narrow floats in float32 (as numpy)."""
        acc_dt, out_dt = self._accumulation_dtypes(dtype)
        reduced_axes(axis, self.ndim)  # IndexError before building anything
        return self.cast(acc_dt)._reduce(Ops.MUL, axis, keepdim).cast(out_dt)

    def max(self, axis: Axis = None, keepdim: bool = False) -> Self:
        return self._reduce(Ops.MAX, axis, keepdim)

    def any(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """Whether any element is true (nonzero); False over an empty axis."""
        return self.cast(dtypes.bool).max(axis, keepdim)

    # ---------------------------------------------------------------- built on them
    def min(self, axis: Axis = None, keepdim: bool = False) -> Self:
        if self.dtype is dtypes.bool:
            return self._not().max(axis, keepdim)._not()
        if dtypes.is_unsigned(self.dtype):  # top - max(top - x)
            top = int(self.dtype.max)
            m = self._scalar_like(top)._minus(self).max(axis, keepdim)
            return m._scalar_like(top)._minus(m)
        if dtypes.is_int(self.dtype):
            return self._bit_not().max(axis, keepdim)._bit_not()
        return self.alu(Ops.NEG).max(axis, keepdim).alu(Ops.NEG)

    def all(self, axis: Axis = None, keepdim: bool = False) -> Self:
        """Whether every element is true (nonzero); True over an empty axis."""
        return self.cast(dtypes.bool)._not().any(axis, keepdim)._not()

    def mean(self, axis: Axis = None, keepdim: bool = False) -> Self:
        out = self.cast(least_upper_float(self.dtype)).sum(axis, keepdim)
        n = _count(self.shape, axis) if self.numel() else 0
        return out / out._scalar_like(n) if n else out * out._scalar_like(math.nan)

    def var(self, axis: Axis = None, keepdim: bool = False, correction: int | float = 1) -> Self:
        """Variance: sum of squared deviations from the mean over (count - correction), like numpy's ``ddof``."""
        return self.var_mean(axis, keepdim, correction)[0]

    def std(self, axis: Axis = None, keepdim: bool = False, correction: int | float = 1) -> Self:
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(self, axis: Axis = None, keepdim: bool = False, correction: int | float = 1) -> tuple[Self, Self]:
        """Variance and mean from one mean (the variance's deviations are taken from it)."""
        x = self.cast(least_upper_float(self.dtype))
        n = _count(x.shape, axis)
        mean = x.mean(axis, keepdim=True)
        x, wide_mean = x._broadcasted(mean)
        dev = x._minus(wide_mean)
        ss = (dev * dev).sum(axis, keepdim)
        var = ss / ss._scalar_like(max(n - correction, 0))  # (like torch: inf, or nan for 0/0, when correction >= n)
        return var, mean if keepdim else mean.reshape(var.shape)

    def std_mean(self, axis: Axis = None, keepdim: bool = False, correction: int | float = 1) -> tuple[Self, Self]:
        var, mean = self.var_mean(axis, keepdim, correction)
        return var.sqrt(), mean

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """Index of the largest value along ``axis`` (of the flattened value for None); the first one on ties."""
        return self._arg_extreme(True, axis, keepdim)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """Index of the smallest value along ``axis`` (of the flattened value for None); the first one on ties."""
        return self._arg_extreme(False, axis, keepdim)

    def _arg_extreme(self, is_max: bool, axis: int | None, keepdim: bool) -> Self:
        name = "argmax" if is_max else "argmin"
        if axis is None:
            out = self.reshape(-1)._arg_extreme(is_max, 0, False)
            return out.reshape((1,) * self.ndim) if keepdim else out
        ax = reduced_axes(axis, self.ndim)[0] if self.ndim else 0
        n = self.shape[ax] if self.ndim else 1
        if n == 0:
            raise ValueError(f"{name} of an empty axis (axis {axis} of shape {self.shape})")
        if not is_max and dtypes.is_int(self.dtype) and not dtypes.is_unsigned(self.dtype):
            return self._bit_not()._arg_extreme(True, axis, keepdim)
        x, extreme = self._broadcasted(self.max(ax, keepdim=True) if is_max else self.min(ax, keepdim=True))
        hit = x.eq(extreme)
        if dtypes.is_float(self.dtype):  # max and min propagate NaN: the first NaN is the answer
            hit = hit | self.ne(self)
        # a hit at index i scores n - i, so the largest score is the first hit
        i = self._arange(n)
        score = (i * i._scalar_like(-1) + i._scalar_like(n)).reshape((n,) + (1,) * (self.ndim - ax - 1))
        best = hit._where(score, 0).max(ax, keepdim)
        return best._scalar_like(n)._minus(best).cast(dtypes.default_int)

    def cumsum(self, axis: int = 0) -> Self:
        """Running sum along ``axis`` (a masked sum over a window: O(n^2) work along that axis)."""
        ax = axis_index(axis, self.ndim)
        out_dt = self._accumulation_dtypes(None)[1]
        if self.ndim == 0:  # (a 0-d value is its own running sum)
            return self.cast(out_dt)
        n = self.shape[ax]
        x = self.transpose(ax, -1) if ax != self.ndim - 1 else self
        cols, rows = self._arange(n).reshape(1, n)._broadcasted(self._arange(n).reshape(n, 1))
        mask = (rows < cols)._not()  # [i, j]: j <= i contributes to position i
        window = x.unsqueeze(-2).expand(x.shape[:-1] + (n, n))
        out = mask._where(window, 0).sum(-1, dtype=out_dt)
        return out.transpose(ax, -1) if ax != self.ndim - 1 else out

    # ---------------------------------------------------------------- matmul
    def matmul(self, other: Self) -> Self:
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
        x, y = a.cast(acc).unsqueeze(-2)._broadcasted(b.cast(acc).transpose(-1, -2).unsqueeze(-3))
        out = (x * y).sum(-1, dtype=acc).cast(dt)
        if a1:
            out = out.squeeze(-2)
        if b1:
            out = out.squeeze(-1)
        return out

    def __matmul__(self, other: Self) -> Self:
        return self.matmul(other)

    def dot(self, other: Self) -> Self:
        return self.matmul(other)

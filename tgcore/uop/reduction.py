"""The reductions UOp and Tensor share: sum, prod, max and any (one REDUCE_AXIS each), with torch's
accumulation dtypes, written once on ``Self``. Reductions that need elementwise ops with Python scalars (min,
all, mean, ...) stay on Tensor: a UOp does not broadcast a scalar, so the two would build different graphs.

In:  a class with the movement surface (`tgcore.uop.movement`), the elementwise one (`tgcore.uop.mixins`) and
     ``_reduce_axis(op, axes)``: the REDUCE_AXIS of ``op`` over ``axes`` (sorted, non-negative), keeping them
     as size 1. ``axis`` is None (all axes), an int or a sequence of ints, negative counting from the end.
Out: lazy reductions; ``keepdim`` keeps the reduced axes as size 1. Ints and bools sum and multiply as int64
     (uint64 for unsigned), narrow floats accumulate in float32 and round back once (like torch on CPU).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

from tgcore.dtype import DType, dtypes, to_dtype
from tgcore.uop.movement import axis_index
from tgcore.uop.ops import Ops

Axis = int | Sequence[int] | None


def reduced_axes(axis: Axis, ndim: int) -> tuple[int, ...]:
    """Sorted, non-negative axes for ``axis`` (None means all); IndexError when one is out of range."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted({axis_index(a, ndim) for a in ((axis,) if isinstance(axis, int) else axis)}))


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

        def cast(self, dtype: DType) -> Self: ...

        def reshape(self, *shape: Any) -> Self: ...

    def _reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> Self:
        raise NotImplementedError

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

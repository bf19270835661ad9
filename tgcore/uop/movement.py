"""The movement ops UOp and Tensor share (reshape, permute, expand, shrink, flip and the shapes built on them),
written once on ``Self``.

In:  a class with the small abstract surface below: ``shape`` (the value's shape), ``dtype`` and
     ``_movement(op, arg)`` (the movement op ``op`` with a checked ``arg`` applied to this value).
Out: ``reshape`` (with -1 and None), ``view``, ``permute``, ``transpose``, ``T``, ``expand``, ``shrink`` (with
     symbolic starts), ``flip``, ``squeeze``, ``unsqueeze``, ``flatten`` and ``_broadcast_to``, checked like torch
     (TensorValueError, which is a ValueError and a RuntimeError; IndexError for an axis out of range).

A UOp's ``_movement`` builds the node (a reshape of an untagged reshape folds into one); a Tensor's wraps the
node its UOp builds, so both make the same graph. A no-op (the same shape, the identity permutation, nothing
shrunk or flipped) returns the value itself on both.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from tgcore.dtype import DType
from tgcore.errors import TensorValueError
from tgcore.helpers import prod
from tgcore.uop.ops import Ops


def shape_args(args: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept ``f(2, 3)`` and ``f((2, 3))`` alike."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    out = []
    for a in args:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise TypeError(f"shape entries must be ints, got {a!r}")
        out.append(int(a))
    return tuple(out)


def check_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    if any(s < 0 for s in shape):
        raise TensorValueError(f"negative dimension in shape {shape}")
    return shape


def axis_index(axis: int, ndim: int) -> int:
    """``axis`` (negative counts from the end) as an index into ``ndim`` axes; a 0-d value has axis 0 / -1."""
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis % max(ndim, 1)


def _is_uop(x: Any) -> bool:
    """Whether ``x`` is a symbolic int (a UOp: this module is below uop.py, so it asks for its bounds)."""
    return not isinstance(x, (int, float, np.number)) and hasattr(x, "vmin")


def sint(x: Any) -> Any:
    """An int, or a symbolic int UOp (a bound variable or an expression of one)."""
    return x if _is_uop(x) else int(x)


def _vmin(x: Any) -> Any:
    return x.vmin if _is_uop(x) else x


def _vmax(x: Any) -> Any:
    return x.vmax if _is_uop(x) else x


class MovementMixin:
    """Movement ops written once for UOp and Tensor (see the module docstring for the surface)."""

    __slots__ = ()
    if TYPE_CHECKING:  # (a property of both)
        @property
        def shape(self) -> tuple[int, ...]: ...

        @property
        def dtype(self) -> DType: ...

    def _movement(self, op: Ops, arg: Any) -> Self:
        raise NotImplementedError

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def reshape(self, *shape: Any) -> Self:
        """A view with ``shape``; one entry may be -1 (inferred), None keeps that axis's size."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(self.shape[i] if s is None and i < self.ndim else s for i, s in enumerate(shape))
        new = list(shape_args(shape)) if shape else []
        if new.count(-1) > 1:
            raise TensorValueError("reshape: only one dimension can be -1")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known:
                raise TensorValueError(f"cannot reshape {self.shape} into {tuple(new)}")
            new[new.index(-1)] = self.numel() // known
        shp = check_shape(tuple(new))
        if prod(shp) != self.numel():
            raise TensorValueError(f"cannot reshape {self.shape} ({self.numel()} elements) into {shp} ({prod(shp)})")
        if shp == self.shape:
            return self
        return self._movement(Ops.RESHAPE, shp)

    def view(self, *shape: Any) -> Self:
        return self.reshape(*shape)

    def permute(self, *order: Any) -> Self:
        o = tuple(axis_index(a, self.ndim) for a in shape_args(order)) if self.ndim else ()
        if sorted(o) != list(range(self.ndim)):
            raise TensorValueError(f"permute order {order} is not a permutation of {self.ndim} axes")
        if o == tuple(range(self.ndim)):
            return self
        return self._movement(Ops.PERMUTE, o)

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
        order = list(range(self.ndim))
        a, b = axis_index(dim0, self.ndim), axis_index(dim1, self.ndim)
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Self:
        return self.permute(tuple(reversed(range(self.ndim))))

    def expand(self, *shape: Any) -> Self:
        new = shape_args(shape)
        if len(new) < self.ndim:
            raise TensorValueError(f"expand to {new}: fewer dimensions than the tensor's {self.shape}")
        me = self.reshape((1,) * (len(new) - self.ndim) + self.shape) if len(new) > self.ndim else self
        out = tuple(m if n == -1 else n for m, n in zip(me.shape, new, strict=True))
        for m, n in zip(me.shape, out, strict=True):
            if m != n and m != 1:
                raise TensorValueError(f"cannot expand {self.shape} to {new}: only size-1 dimensions expand")
        if out == me.shape:
            return me
        return me._movement(Ops.EXPAND, check_shape(out))

    def shrink(self, arg: Sequence[tuple[Any, Any] | None]) -> Self:
        """Keep ``[start, end)`` of each axis (None keeps all); a start may be symbolic (a bound variable) when
        the size it keeps is a constant."""
        if len(arg) != self.ndim:
            raise ValueError(f"shrink needs one (start, end) per axis: got {len(arg)} for {self.ndim} axes")
        bounds: tuple[tuple[Any, Any], ...] = tuple((0, s) if a is None else (sint(a[0]), sint(a[1]))
                                                    for a, s in zip(arg, self.shape, strict=True))
        for (lo, hi), s in zip(bounds, self.shape, strict=True):
            if _is_uop(lo) or _is_uop(hi):  # symbolic start (e.g. a bound position): fixed size
                end: Any = hi if _is_uop(hi) else lo.const_like(hi)
                size = (end - lo).simplify()
                if size.op is not Ops.CONST or _vmin(lo) < 0 or _vmax(hi) > s or size.arg < 0:
                    raise ValueError(f"symbolic shrink {arg} needs a constant size within shape {self.shape}")
            elif not 0 <= lo <= hi <= s:
                raise ValueError(f"shrink {arg} is out of bounds for shape {self.shape}")
        if all(b == (0, s) for b, s in zip(bounds, self.shape, strict=True)):
            return self
        return self._movement(Ops.SHRINK, bounds)

    def flip(self, *axis: Any) -> Self:
        axes = {axis_index(a, self.ndim) for a in shape_args(axis)}
        if not axes:
            return self
        return self._movement(Ops.FLIP, tuple(i in axes for i in range(self.ndim)))

    def squeeze(self, dim: int | None = None) -> Self:
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        d = axis_index(dim, self.ndim)
        if self.ndim == 0:  # (dim 0 or -1 names the tensor itself, like torch)
            return self
        return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

    def unsqueeze(self, dim: int) -> Self:
        d = axis_index(dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Axes ``start_dim`` to ``end_dim`` (inclusive) merged into one; a 0-d value becomes 1-d."""
        if self.ndim == 0:
            axis_index(start_dim, 0), axis_index(end_dim, 0)
            return self.reshape(1)
        s, e = axis_index(start_dim, self.ndim), axis_index(end_dim, self.ndim)
        if s > e:
            raise TensorValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

    def _broadcast_to(self, shape: tuple[int, ...]) -> Self:
        if self.shape == shape:
            return self
        return self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)


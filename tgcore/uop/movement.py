"""The movement ops UOp and Tensor share (reshape, permute, expand, shrink, pad, flip and the shapes built on them),
written once on ``Self``.

In:  a class with the small abstract surface below: ``shape`` (the value's shape), ``dtype`` and
     ``_movement(op, arg)`` (the movement op ``op`` with a checked ``arg`` applied to this value); ``pad`` with a
     fill value other than 0 also uses the elementwise surface (``_scalar_like``, ``_where``).
Out: ``reshape`` (with -1 and None), ``view``, ``permute``, ``transpose``, ``T``, ``expand``, ``shrink`` (with
     symbolic starts), ``pad`` (constant, reflect, replicate, circular; torch's flat padding tuples), ``flip``,
     ``squeeze``, ``unsqueeze``, ``flatten``, ``_broadcast_to`` and ``_join`` (values of one dtype side by side
     along an axis: ``cat`` after its checks), checked like torch (TensorValueError, which is a ValueError and a
     RuntimeError; IndexError for an axis out of range).

A UOp's ``_movement`` builds the node (a reshape of an untagged reshape folds into one); a Tensor's wraps the
node its UOp builds, so both make the same graph. A no-op (the same shape, the identity permutation, nothing
shrunk or flipped) returns the value itself on both.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from tgcore.dtype import DType, dtypes
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
    if type(x) is int:  # (the common case, before asking for bounds)
        return x
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

        def _scalar_like(self, value: Any, dtype: DType | None = None) -> Self: ...

        def _where(self, x: Any, y: Any) -> Self: ...

        def __add__(self, x: Any) -> Self: ...

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
        current = self.shape
        if all(type(s) is int and s >= 0 for s in shape):  # (the common case, spelled out in ints: nothing to fill in)
            shp = shape
        else:
            shp = self._reshape_target(shape)
        if prod(shp) != prod(current):
            raise TensorValueError(f"cannot reshape {current} ({prod(current)} elements) into {shp} ({prod(shp)})")
        if shp == current:
            return self
        return self._movement(Ops.RESHAPE, shp)

    def _reshape_target(self, shape: tuple[Any, ...]) -> tuple[int, ...]:
        """The shape ``reshape(shape)`` asks for: None keeps this value's extent, one -1 is inferred."""
        shape = tuple(self.shape[i] if s is None and i < self.ndim else s for i, s in enumerate(shape))
        new = list(shape_args(shape)) if shape else []
        if new.count(-1) > 1:
            raise TensorValueError("reshape: only one dimension can be -1")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known:
                raise TensorValueError(f"cannot reshape {self.shape} into {tuple(new)}")
            new[new.index(-1)] = self.numel() // known
        return check_shape(tuple(new))

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
        shape = self.shape
        if len(arg) != len(shape):
            raise ValueError(f"shrink needs one (start, end) per axis: got {len(arg)} for {len(shape)} axes")
        bounds: tuple[tuple[Any, Any], ...] = tuple((0, s) if a is None else (sint(a[0]), sint(a[1]))
                                                    for a, s in zip(arg, shape, strict=True))
        for (lo, hi), s in zip(bounds, shape, strict=True):
            if type(lo) is int and type(hi) is int:  # (the common case first: plain bounds)
                if not 0 <= lo <= hi <= s:
                    raise ValueError(f"shrink {arg} is out of bounds for shape {self.shape}")
            elif _is_uop(lo) or _is_uop(hi):  # symbolic start (e.g. a bound position): fixed size
                end: Any = hi if _is_uop(hi) else lo.const_like(hi)
                size = (end - lo).simplify()
                if size.op is not Ops.CONST or _vmin(lo) < 0 or _vmax(hi) > s or size.arg < 0:
                    raise ValueError(f"symbolic shrink {arg} needs a constant size within shape {self.shape}")
            elif not 0 <= lo <= hi <= s:
                raise ValueError(f"shrink {arg} is out of bounds for shape {self.shape}")
        if all(b == (0, s) for b, s in zip(bounds, shape, strict=True)):
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

    def pad(self, padding: Sequence[Any], value: Any = 0, mode: str = "constant") -> Self:
        """Pad each axis by (before, after); negative amounts remove elements.

        ``padding`` is one (before, after) pair (or None) per axis, or a flat torch-style tuple of ints that pads
        the last axes, last axis first: ``(left, right, top, bottom)``. ``mode`` is "constant" (``value``),
        "reflect", "replicate" or "circular" (see ``pad_nd``); ``x.pad(p, "reflect")`` names the mode as well.
        """
        if isinstance(value, str):
            mode, value = value, 0
        if padding and all(isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in padding):
            if len(padding) % 2 or len(padding) // 2 > self.ndim:
                raise TensorValueError(f"a flat padding needs an even number of ints, at most 2 per axis, got "
                                       f"{tuple(padding)} for {self.ndim} axes")
            pairs = [(int(padding[i]), int(padding[i + 1])) for i in range(0, len(padding), 2)]
            padding = [None] * (self.ndim - len(pairs)) + pairs[::-1]
        if mode != "constant":
            return self.pad_nd(padding, mode=mode)
        if len(padding) != self.ndim:
            raise TensorValueError(f"pad needs one (before, after) per axis: got {len(padding)} for {self.ndim} axes")
        pads = tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
        if all(b >= 0 and a >= 0 for b, a in pads):  # (the common case: nothing removed)
            me, pos = self, pads
        else:  # negative padding is a shrink
            shrink = tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pads, self.shape, strict=True))
            if any(lo > hi for lo, hi in shrink):
                raise TensorValueError(f"padding {padding} removes more than the tensor's shape {self.shape}")
            me = self.shrink(shrink)
            pos = tuple((max(b, 0), max(a, 0)) for b, a in pads)
        if all(p == (0, 0) for p in pos):
            return me
        out = me._movement(Ops.PAD, pos)
        if value == 0:
            return out
        inside = me._scalar_like(True, dtypes.bool)._movement(Ops.PAD, pos)
        return inside._where(out, value)

    def pad_nd(self, padding: Sequence[tuple[int, int] | None], mode: str = "constant",
               value: int | float | bool = 0) -> Self:
        """Pad each axis by (before, after) with ``mode``: "constant" (``value``), "reflect" (mirror without the
        edge, numpy's "reflect"), "replicate" (repeat the edge, numpy's "edge") or "circular" (wrap around,
        numpy's "wrap"). Negative amounts remove elements first."""
        if len(padding) != self.ndim:
            raise TensorValueError(f"pad needs one (before, after) pair per axis: got {len(padding)} pairs for a "
                                   f"tensor with {self.ndim} axes")
        if mode == "constant":
            return self.pad(padding, value)
        if mode not in ("reflect", "replicate", "circular"):
            raise TensorValueError(f"pad mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
        if value != 0:
            raise TensorValueError(f"pad value is only used by mode='constant', not {mode!r}")
        pads = [(0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding]
        x = self.pad([(min(b, 0), min(a, 0)) for b, a in pads])  # the removals
        for d, (b, a) in enumerate(pads):
            b, a = max(b, 0), max(a, 0)
            if b == a == 0:
                continue
            x = x._pad_axis(d, b, a, mode)
        return x

    def _pad_axis(self, d: int, before: int, after: int, mode: str) -> Self:
        s = self.shape[d]
        limit = {"reflect": s - 1, "replicate": None, "circular": s}[mode]
        if s == 0 or (limit is not None and max(before, after) > limit):
            raise TensorValueError(f"pad mode {mode!r} on axis {d} of size {s} allows at most {limit} per side, "
                                   f"got ({before}, {after})")

        # (start, end) of the left and right parts along d; replicate repeats its one-wide edge parts
        spans = {"reflect": ((1, before + 1), (s - 1 - after, s - 1)), "replicate": ((0, 1), (s - 1, s)),
                 "circular": ((s - before, s), (0, after))}[mode]
        left, right = (self.shrink(_on_axis(self.ndim, d, span)) for span in spans)
        if mode == "reflect":
            left, right = left.flip(d), right.flip(d)
        elif mode == "replicate":
            left = left.expand(self.shape[:d] + (before,) + self.shape[d + 1:])
            right = right.expand(self.shape[:d] + (after,) + self.shape[d + 1:])
        return left._join([left, self, right], d)

    def _join(self, parts: Sequence[Self], d: int) -> Self:
        """``parts`` (one dtype, the same shape off axis ``d``) side by side along axis ``d``: each padded with
        zeros to the whole length, then added (empty parts stay in the graph: their gradient is zeros of their
        shape, like torch's)."""
        total = sum(t.shape[d] for t in parts)
        out: Self | None = None
        offset = 0
        for t in parts:
            n = t.shape[d]
            part = t.pad(_on_axis(t.ndim, d, (offset, total - offset - n)))
            out = part if out is None else out + part
            offset += n
        return self if out is None else out


def _on_axis(ndim: int, axis: int, pair: tuple[int, int]) -> list[tuple[int, int] | None]:
    """A shrink/pad argument that applies ``pair`` to ``axis`` and leaves the other axes alone."""
    arg: list[tuple[int, int] | None] = [None] * ndim
    arg[axis] = pair
    return arg

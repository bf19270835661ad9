"""Indexing and joining: __getitem__/__setitem__, gather/scatter, cat/stack/split/chunk, repeat, one_hot, pad modes.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.

In:  Python indices (ints, slices with any step, None, Ellipsis), integer index tensors or
     arrays, boolean masks whose true count can be read (numpy arrays, lists, or bool
     tensors, which are realized to count them).
Out: lazy tensors. Ints and slices are movement ops only, so the result is a view and costs
     no kernel of its own: a slice is a shrink, a negative step adds a flip, a step ``k``
     pads the axis to a multiple of ``k``, splits it into ``(n, k)`` and keeps column 0.
     An integer index tensor selects with a one-hot comparison against ``arange`` and a sum
     over the indexed axis (a gather fused into the consumer's kernel, O(output x axis) work).

``__setitem__`` is functional under the hood: it builds the new value of the whole tensor
(``where(mask, new values moved into place, old values)``) and points this Tensor object at
it (``self.uop = ...``). Other tensors that were derived from this one before the
assignment keep the old values. With repeated indices the last assignment wins.

Index checks: an int or an index array / realized index tensor out of range raises
IndexError naming the index, the axis and its size. A lazy (not yet computed) index tensor is
not read for checking; an out-of-range entry there selects 0.
"""
# mypy: disable-error-code="misc"
# (methods annotate ``self: Tensor``: a mixin is only ever used as a base of Tensor)
from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tgcore.dtype import dtypes, least_upper_dtype
from tgcore.errors import TensorValueError
from tgcore.helpers import prod
from tgcore.uop.mixins import broadcast_shape

if TYPE_CHECKING:
    from tgcore.tensor import Tensor


def _axis(axis: int, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
    return int(axis) % max(ndim, 1)


def _ints(args: tuple[Any, ...], what: str) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for a in args:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise TypeError(f"{what} must be ints, got {a!r}")
    return tuple(int(a) for a in args)


def _axis_op(x: Tensor, axis: int, pair: tuple[int, int]) -> list[tuple[int, int] | None]:
    """A shrink/pad argument that applies ``pair`` to ``axis`` and leaves the other axes alone."""
    arg: list[tuple[int, int] | None] = [None] * x.ndim
    arg[axis] = pair
    return arg


# ------------------------------------------------------------------------------------------ index parsing

@dataclass(frozen=True)
class _Take:
    """What a basic index keeps of one source axis: ``n`` elements from ``first``, ``step`` apart."""
    first: int
    n: int
    step: int

    @property
    def span(self) -> int:
        """Source elements from the first kept one to the last one, inclusive."""
        return (self.n - 1) * abs(self.step) + 1 if self.n else 0

    @property
    def low(self) -> int:
        """Lowest source position kept."""
        return self.first if self.step > 0 else self.first - self.span + 1 if self.n else 0


@dataclass
class _Plan:
    """An index expression resolved against a shape.

    ``takes`` has one entry per source axis (ints keep one element, advanced axes everything).
    ``view_axes`` lists, per axis of the basic view (the source after shrink/flip/stride with
    a size-1 axis inserted for each None), where it came from: a source axis number, or None
    for an inserted axis. ``drop`` holds view axes removed by an int index (when no advanced
    index is present); ``adv`` maps view axes to their index tensors.
    """
    takes: list[_Take]
    view_axes: list[int | None]
    drop: set[int]
    adv: dict[int, Any]


def _as_index_array(idx: Any, tensor_type: type[Tensor]) -> Any:
    """Lists and numpy arrays -> numpy arrays; Tensors stay."""
    if isinstance(idx, tensor_type):
        return idx
    arr = np.asarray(idx)
    if arr.size == 0 and arr.dtype.kind not in "biu":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "biu":
        raise IndexError(f"arrays used as indices must be integer or bool, got {arr.dtype}")
    return arr


def _plan(tensor_type: type[Tensor], shape: tuple[int, ...], index: Any) -> _Plan:
    items = list(index) if isinstance(index, tuple) else [index]
    # masks first: a k-dimensional bool mask stands for k integer arrays (its nonzero positions)
    expanded: list[Any] = []
    for it in items:
        if isinstance(it, (list, tuple, np.ndarray, tensor_type)):  # (a tuple inside the index is a list, as in torch)
            it = _as_index_array(it, tensor_type)
            is_bool = it.dtype is dtypes.bool if isinstance(it, tensor_type) else it.dtype == np.bool_
            if is_bool:
                mask = it.numpy() if isinstance(it, tensor_type) else it
                expanded.append(("mask", mask))
                continue
            if isinstance(it, tensor_type) and not dtypes.is_int(it.dtype):
                raise IndexError(f"tensors used as indices must be integer or bool, got {it.dtype!r}")
        elif it is not None and it is not Ellipsis and not isinstance(it, (slice, int, np.integer)):
            raise TypeError(f"unsupported index {it!r}: use ints, slices, None, ..., integer or bool arrays/tensors")
        if isinstance(it, bool):
            raise TypeError("a Python bool is not a supported index; use a bool array or tensor as a mask")
        expanded.append(it)

    def width(it: Any) -> int:
        if it is None or it is Ellipsis:
            return 0
        return it[1].ndim if isinstance(it, tuple) else 1

    if sum(it is Ellipsis for it in expanded) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(width(it) for it in expanded)
    if used > len(shape):
        raise IndexError(f"too many indices for a tensor with {len(shape)} dimensions: {used} were indexed")
    at = next((i for i, it in enumerate(expanded) if it is Ellipsis), len(expanded))  # no "in": Tensor == is lazy
    expanded[at:at + 1] = [slice(None)] * (len(shape) - used)  # unindexed axes: the ellipsis, else at the end

    takes: list[_Take] = []
    view_axes: list[int | None] = []
    drop: set[int] = set()
    adv: dict[int, Any] = {}
    for it in expanded:
        if it is None:
            view_axes.append(None)
            continue
        ax = len(takes)
        if isinstance(it, tuple):  # bool mask over len(mask.shape) axes
            mask = it[1]
            if tuple(mask.shape) != shape[ax:ax + mask.ndim]:
                raise IndexError(f"boolean mask of shape {mask.shape} does not match the indexed axes "
                                 f"{shape[ax:ax + mask.ndim]} (axes {ax}..{ax + mask.ndim - 1})")
            for k, positions in enumerate(np.nonzero(mask)):
                adv[len(view_axes)] = positions
                takes.append(_Take(0, shape[ax + k], 1))
                view_axes.append(ax + k)
            continue
        size = shape[ax]
        if isinstance(it, (int, np.integer)):
            i = int(it)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of range for axis {ax} with size {size}")
            takes.append(_Take(i % size, 1, 1))
            drop.add(len(view_axes))  # (torch: an int is basic indexing even next to arrays, unlike numpy)
        elif isinstance(it, slice):
            r = range(*it.indices(size))
            takes.append(_Take(r[0], len(r), r.step) if len(r) else _Take(0, 0, 1))
        else:
            _check_bounds(it, ax, size)
            takes.append(_Take(0, size, 1))
            adv[len(view_axes)] = it
        view_axes.append(ax)
    return _Plan(takes, view_axes, drop, adv)


def _check_bounds(idx: Any, axis: int, size: int) -> None:
    """IndexError for out-of-range entries of a numpy index or a realized index tensor (lazy ones are not read)."""
    if hasattr(idx, "_is_realized"):  # a tensor
        if not idx._is_realized():
            return
        idx = idx.numpy()
    bad = (idx < -size) | (idx >= size)
    if bad.any():
        raise IndexError(f"index {int(idx[bad].reshape(-1)[0])} is out of range for axis {axis} with size {size}")


# ------------------------------------------------------------------------------------------ basic indexing

def _take(x: Tensor, ax: int, t: _Take) -> Tensor:
    """Keep ``t`` of axis ``ax``: shrink, flip for a negative step, stride by reshaping."""
    x = x.shrink(_axis_op(x, ax, (t.low, t.low + t.span)))
    if t.step < 0:
        x = x.flip(ax)
    k = abs(t.step)
    if t.n > 1 and k > 1:  # pad to n*k, view as (n, k), keep column 0
        x = x.pad(_axis_op(x, ax, (0, t.n * k - t.span)))
        x = x.reshape(x.shape[:ax] + (t.n, k) + x.shape[ax + 1:])
        x = x.shrink([None] * (ax + 1) + [(0, 1)] + [None] * (x.ndim - ax - 2))
        x = x.reshape(x.shape[:ax] + (t.n,) + x.shape[ax + 2:])
    return x


def _untake(x: Tensor, ax: int, t: _Take, size: int) -> Tensor:
    """Inverse of ``_take``: put axis ``ax`` back in place in an axis of ``size``, zeros (False) elsewhere."""
    k = abs(t.step)
    if t.n > 1 and k > 1:
        x = x.reshape(x.shape[:ax] + (t.n, 1) + x.shape[ax + 1:])
        x = x.pad([None] * (ax + 1) + [(0, k - 1)] + [None] * (x.ndim - ax - 2))
        x = x.reshape(x.shape[:ax] + (t.n * k,) + x.shape[ax + 2:])
        x = x.shrink(_axis_op(x, ax, (0, t.span)))
    if t.step < 0:
        x = x.flip(ax)
    return x.pad(_axis_op(x, ax, (t.low, size - t.low - t.span)))


def _basic_view(x: Tensor, plan: _Plan) -> Tensor:
    for ax, t in enumerate(plan.takes):
        x = _take(x, ax, t)
    return x.reshape(tuple(1 if a is None else x.shape[a] for a in plan.view_axes))


def _unbasic(v: Tensor, plan: _Plan, shape: tuple[int, ...]) -> Tensor:
    """A tensor of ``shape`` with the basic view ``v`` moved back in place (zeros elsewhere)."""
    v = v.reshape(tuple(t.n for t in plan.takes))
    for ax, t in enumerate(plan.takes):
        v = _untake(v, ax, t, shape[ax])
    return v


# ------------------------------------------------------------------------------------------ advanced indexing

@dataclass
class _Advanced:
    """Advanced axes of a view, flattened: ``linear`` (broadcast shape ``bshape``) indexes ``n`` positions."""
    axes: list[int]          # view axes with an index, in order
    kept: list[int]          # the other view axes
    bshape: tuple[int, ...]  # broadcast shape of the index tensors
    linear: Tensor           # row-major position within the indexed axes
    n: int                   # number of positions within the indexed axes
    front: builtins.bool     # result axes from the indices go first (indexed axes not adjacent)

    def out_order(self, nkept: int) -> list[int]:
        """Axis order taking (kept..., index...) to the result's layout: the index axes replace the indexed ones
        when those are adjacent, else they go first (numpy's rule)."""
        before = 0 if self.front else self.axes[0]  # adjacent: every view axis before the first indexed one is kept
        kept_idx, b_idx = list(range(nkept)), list(range(nkept, nkept + len(self.bshape)))
        return kept_idx[:before] + b_idx + kept_idx[before:]


def _advanced(view: Tensor, plan: _Plan) -> _Advanced:
    tensor_type = type(view)
    axes = sorted(plan.adv)
    kept = [a for a in range(view.ndim) if a not in plan.adv]
    idx = [plan.adv[a] for a in axes]
    idx = [i if isinstance(i, tensor_type) else
           tensor_type(i.astype(np.int32 if i.size == 0 or abs(i).max() < 2**31 else np.int64), device=view.device)
           for i in idx]
    bshape: tuple[int, ...] = ()
    for i in idx:
        bshape = broadcast_shape(bshape, i.shape)
    sizes = [view.shape[a] for a in axes]
    linear: Tensor | None = None
    stride = 1
    for i, size in reversed(list(zip(idx, sizes, strict=True))):
        i = (i < 0).where(i + size, i) if not dtypes.is_unsigned(i.dtype) else i
        term = i * stride if stride != 1 else i
        linear = term if linear is None else linear + term
        stride *= size
    assert linear is not None
    linear = linear._broadcast_to(bshape) if linear.shape != bshape else linear
    front = axes != list(range(axes[0], axes[0] + len(axes)))
    return _Advanced(axes, kept, bshape, linear, prod(sizes), front)


def _flatten_indexed(view: Tensor, a: _Advanced) -> Tensor:
    """The view as (kept..., n): indexed axes moved last and merged."""
    x = view.permute(a.kept + a.axes)
    return x.reshape(tuple(view.shape[k] for k in a.kept) + (a.n,))


def _select(x: Tensor, onehot: Tensor, axis: int) -> Tensor:
    """Sum of ``x`` where ``onehot`` along ``axis`` (at most one true per output): a gather, exact for any dtype."""
    picked = onehot.where(x, False if x.dtype is dtypes.bool else 0)
    if x.dtype is dtypes.bool:
        return picked.max(axis)
    return picked.sum(axis, dtype=x.dtype)


def _getitem_advanced(view: Tensor, plan: _Plan) -> Tensor:
    a = _advanced(view, plan)
    x = _flatten_indexed(view, a)
    kept_shape = x.shape[:-1]
    nb = len(a.bshape)
    xr = x.reshape(kept_shape + (1,) * nb + (a.n,))
    positions = view.arange(a.n, device=view.device)
    onehot = a.linear.reshape((1,) * len(kept_shape) + a.bshape + (1,)) == positions
    out = _select(xr, onehot, -1)
    return out.permute(a.out_order(len(kept_shape)))


def _setitem_advanced(view: Tensor, plan: _Plan, value: Tensor) -> Tensor:
    """``view`` with the positions its advanced index selects replaced by ``value`` (the last write wins)."""
    a = _advanced(view, plan)
    x = _flatten_indexed(view, a)
    kept_shape = x.shape[:-1]
    order = a.out_order(len(kept_shape))
    inverse = [order.index(i) for i in range(len(order))]
    v = value.permute(inverse)  # (kept..., index...); kept axes the value broadcasts over are still size 1
    nk = len(kept_shape)
    v = v._broadcast_to(v.shape[:nk] + a.bshape)
    m = prod(a.bshape)
    v = v.reshape(v.shape[:nk] + (1, m))
    lin = a.linear.reshape(1, m)
    pos = view.arange(a.n, device=view.device).reshape(a.n, 1)
    writer = view.arange(m, device=view.device).reshape(1, m)
    last = (lin == pos).where(writer, -1).max(-1)  # (n,): the last write to each position, -1 for none
    # (kept..., n), computed before broadcasting over the kept axes the value does not vary along
    val = _select(v, writer == last.reshape(a.n, 1), -1)
    new = (last >= 0).where(val, x)
    new = new.reshape(kept_shape + tuple(view.shape[ax] for ax in a.axes))
    back = a.kept + a.axes
    return new.permute([back.index(i) for i in range(view.ndim)])


def _drop_ints(view: Tensor, plan: _Plan) -> tuple[Tensor, _Plan]:
    """The view without the axes ints indexed, and the plan's advanced axes renumbered to match: torch places the
    advanced result axes after the ints are gone (``x[:, 0, :, [1, 2]]`` keeps them in place; numpy moves them
    first)."""
    if not plan.drop:
        return view, plan
    kept = [a for a in range(view.ndim) if a not in plan.drop]
    adv = {kept.index(a): idx for a, idx in plan.adv.items()}
    return view.reshape(tuple(view.shape[a] for a in kept)), _Plan(plan.takes, plan.view_axes, set(), adv)


# ------------------------------------------------------------------------------------------ the mixin

class IndexMixin:
    __slots__ = ()

    # ---------------------------------------------------------------- indexing
    def __getitem__(self: Tensor, index: Any) -> Tensor:
        plan = _plan(type(self), self.shape, index)
        view = _basic_view(self, plan)
        if plan.adv:
            return _getitem_advanced(*_drop_ints(view, plan))
        return view.reshape(tuple(s for i, s in enumerate(view.shape) if i not in plan.drop))

    def __setitem__(self: Tensor, index: Any, value: Any) -> None:
        """Assign into the indexed positions; functional underneath: ``self.uop`` becomes the updated tensor."""
        tensor_type = type(self)
        plan = _plan(tensor_type, self.shape, index)
        view = _basic_view(self, plan)
        if isinstance(value, tensor_type):
            if value.device != self.device:
                raise TensorValueError(f"cannot assign a tensor on {value.device} into one on {self.device}; use .to()")
            val = value.cast(self.dtype)
        else:
            data = np.asarray(value) if isinstance(value, (list, tuple, np.ndarray)) else value
            val = tensor_type(data, device=self.device, dtype=self.dtype)
        target = self[index].shape
        while val.ndim > len(target) and val.shape[0] == 1:  # numpy drops leading size-1 axes of the value
            val = val.reshape(val.shape[1:])
        try:
            fits = val.ndim <= len(target) and broadcast_shape(val.shape, target) == target
        except ValueError:
            fits = False
        if not fits:
            raise TensorValueError(f"cannot assign a value of shape {val.shape} to an index of shape {target}")
        val = val.reshape((1,) * (len(target) - val.ndim) + val.shape)  # same rank, not yet broadcast
        if plan.adv:
            new_view = _setitem_advanced(*_drop_ints(view, plan), val).reshape(view.shape)
        else:
            new_view = val._broadcast_to(target).reshape(view.shape)
        ones = tensor_type.full(view.shape, True, dtype=dtypes.bool, device=self.device)
        written = _unbasic(ones, plan, self.shape)
        self.uop = written.where(_unbasic(new_view, plan, self.shape), self).uop

    def take(self: Tensor, index: Tensor) -> Tensor:
        """``self.flatten()[index]`` as an indexed load (torch.take): one read per output, fused into the consumer's
        kernel (``gather`` and ``[]`` cost O(output x axis)). ``index`` is an integer tensor; an entry out of range
        reads 0 (torch raises). The table's gradient sums the gradients of the outputs that read each entry.
        ``table.take(index).assign(values)`` writes into those entries instead (``Tensor.assign``)."""
        from tgcore.uop.ops import Ops
        from tgcore.uop.uop import UOp
        if not isinstance(index, type(self)) or not dtypes.is_int(index.dtype) or index.dtype is dtypes.bool:
            raise TypeError(f"take needs an integer index tensor, got {getattr(index, 'dtype', type(index))!r}")
        if index.device != self.device:
            raise ValueError(f"take: index on {index.device}, table on {self.device}")
        table = self.reshape(-1)
        return table._new(UOp(Ops.INDEX, self.dtype, (table.uop, index.uop)))

    def gather(self: Tensor, dim: int, index: Any) -> Tensor:
        """``out[..., i, ...] = self[..., index[..., i, ...], ...]`` along ``dim``; ``index`` has self's ndim and is
        no larger on the other axes (torch.gather; negative indices count from the end)."""
        d = _axis(dim, self.ndim)
        idx = _index_tensor(self, index)
        region = _region(self, idx, d, "gather")
        size = self.shape[d]
        _check_bounds(idx if index is idx else index, d, size)
        idx = (idx < 0).where(idx + size, idx)
        x_t, i_t = region.transpose(d, -1), idx.transpose(d, -1)
        onehot = i_t.unsqueeze(-1) == self.arange(size, device=self.device)  # (..., K, S)
        return _select(x_t.unsqueeze(-2), onehot, -1).transpose(d, -1)

    def scatter(self: Tensor, dim: int, index: Any, src: Any, reduce: str | None = None) -> Tensor:
        """``out[..., index[..., i, ...], ...] = src[..., i, ...]`` along ``dim`` (torch.scatter): the last write wins
        on repeats; ``reduce="add"`` / ``"multiply"`` combine every write with the old value instead."""
        tensor_type = type(self)
        if reduce not in (None, "add", "multiply"):
            raise TensorValueError(f"scatter reduce must be None, 'add' or 'multiply', got {reduce!r}")
        d = _axis(dim, self.ndim)
        idx = _index_tensor(self, index)
        region = _region(self, idx, d, "scatter")
        size = self.shape[d]
        _check_bounds(idx if index is idx else index, d, size)
        idx = (idx < 0).where(idx + size, idx)
        if isinstance(src, tensor_type):
            if any(s < i for s, i in zip(src.shape, idx.shape, strict=True)) or src.ndim != idx.ndim:
                raise TensorValueError(f"scatter src of shape {src.shape} is smaller than the index {idx.shape}")
            s = src.cast(self.dtype).shrink([(0, n) for n in idx.shape])
        else:
            s = tensor_type.full(idx.shape, src, dtype=self.dtype, device=self.device)
        x_t, i_t, s_t = region.transpose(d, -1), idx.transpose(d, -1), s.transpose(d, -1)
        k = i_t.shape[-1]
        onehot = i_t.unsqueeze(-1) == tensor_type.arange(size, device=self.device)  # (..., K, S)
        if reduce == "add":
            new = x_t + onehot.where(s_t.unsqueeze(-1), 0).sum(-2, dtype=self.dtype)
        elif reduce == "multiply":
            new = x_t * onehot.where(s_t.unsqueeze(-1), 1).prod(-2, dtype=self.dtype)
        else:
            writer = tensor_type.arange(k, device=self.device).reshape(k, 1)
            last = onehot.where(writer, -1).max(-2, keepdim=True)  # (..., 1, S)
            new = (last >= 0).where(_select(s_t.unsqueeze(-1), writer == last, -2).unsqueeze(-2), x_t.unsqueeze(-2))
            new = new.squeeze(-2)
        new = new.cast(self.dtype).transpose(d, -1)
        if new.shape == self.shape:
            return new
        pads = [(0, full - part) for full, part in zip(self.shape, new.shape, strict=True)]
        inside = tensor_type.full(new.shape, True, dtype=dtypes.bool, device=self.device).pad(pads)
        return inside.where(new.pad(pads), self)

    def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:
        """``value`` where ``mask`` is true, else this tensor (keeps this tensor's dtype)."""
        tensor_type = type(self)
        v = value.cast(self.dtype) if isinstance(value, tensor_type) else tensor_type(value, device=self.device,
                                                                             dtype=self.dtype)
        return mask.cast(dtypes.bool).where(v, self)

    def one_hot(self: Tensor, num_classes: int = -1) -> Tensor:
        """A new last axis of ``num_classes`` with a 1 at each element's value (int32); -1 reads max + 1."""
        if not dtypes.is_int(self.dtype) or self.dtype is dtypes.bool:
            raise TypeError(f"one_hot needs an integer tensor, got {self.dtype!r}")
        if num_classes == -1:
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        return (self.unsqueeze(-1) == self.arange(num_classes, device=self.device)).cast(dtypes.default_int)

    # ---------------------------------------------------------------- shape
    def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
        """Split axis ``dim`` into ``sizes`` (one entry may be -1)."""
        d = _axis(dim, self.ndim)
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def repeat(self: Tensor, *repeats: Any) -> Tensor:
        """Tile the tensor ``repeats[i]`` times along axis i (numpy.tile / torch.repeat); a view, no copy."""
        reps = _ints(repeats, "repeat counts")
        if len(reps) < self.ndim:
            raise TensorValueError(f"repeat needs at least one count per axis: got {len(reps)} for {self.ndim} axes")
        if any(r < 0 for r in reps):
            raise TensorValueError(f"repeat counts must not be negative, got {reps}")
        base = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape(tuple(v for s in base for v in (1, s)))
        x = x.expand(tuple(v for r, s in zip(reps, base, strict=True) for v in (r, s)))
        return x.reshape(tuple(r * s for r, s in zip(reps, base, strict=True)))

    def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
        """Repeat each element ``repeats`` times along ``dim`` (of the flattened tensor for None)."""
        if not isinstance(repeats, (int, np.integer)) or isinstance(repeats, bool) or repeats < 0:
            raise TypeError(f"repeat_interleave needs a non-negative int count, got {repeats!r}")
        x = self.reshape(-1) if dim is None else self
        d = _axis(dim, x.ndim) if dim is not None else 0
        s = x.shape
        x = x.unsqueeze(d + 1).expand(s[:d + 1] + (int(repeats),) + s[d + 1:])
        return x.reshape(s[:d] + (s[d] * int(repeats),) + s[d + 1:])

    # ---------------------------------------------------------------- joining and splitting
    def cat(self: Tensor | Sequence[Tensor], *others: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along ``dim`` (``a.cat(b, c)`` or ``Tensor.cat([a, b, c])``); dtypes promote."""
        tensors = _tensor_list(self, others)
        if not tensors:
            raise TensorValueError("cat needs at least one tensor")
        first = tensors[0]
        if first.ndim == 0:
            raise TensorValueError("cat needs tensors with at least one dimension; use stack for 0-d tensors")
        d = _axis(dim, first.ndim)
        for t in tensors[1:]:
            if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape, strict=True))
                                           if i != d):
                raise TensorValueError(f"cat along axis {d}: shapes {first.shape} and {t.shape} differ off that axis")
            if t.device != first.device:
                raise TensorValueError(f"cat of tensors on different devices: {first.device} and {t.device}")
        dt = least_upper_dtype(*(t.dtype for t in tensors))
        return first._join([t.cast(dt) for t in tensors], d)  # (shared with UOp: tgcore.uop.movement)

    def stack(self: Tensor | Sequence[Tensor], *others: Tensor, dim: int = 0) -> Tensor:
        """Join tensors of one shape along a new axis ``dim``."""
        tensors = _tensor_list(self, others)
        if not tensors:
            raise TensorValueError("stack needs at least one tensor")
        for t in tensors[1:]:
            if t.shape != tensors[0].shape:
                raise TensorValueError(f"stack needs tensors of one shape, got {tensors[0].shape} and {t.shape}")
        d = _axis(dim, tensors[0].ndim + 1)
        return type(tensors[0]).cat([t.unsqueeze(d) for t in tensors], dim=d)

    def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
        """Pieces of ``sizes`` along ``dim`` (an int: pieces of that size, the last may be smaller); views."""
        d = _axis(dim, self.ndim)
        n = self.shape[d]
        if isinstance(sizes, (int, np.integer)):
            if sizes <= 0:
                raise TensorValueError(f"split size must be positive, got {sizes}")
            parts = [int(sizes)] * (n // sizes) + ([n % sizes] if n % sizes else []) or [0]
        else:
            parts = list(_ints(tuple(sizes), "split sizes"))
            if sum(parts) != n or any(p < 0 for p in parts):
                raise TensorValueError(f"split sizes {parts} do not add up to the axis size {n}")
        out, start = [], 0
        for p in parts:
            out.append(self.shrink(_axis_op(self, d, (start, start + p))))
            start += p
        return tuple(out)

    def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
        """Up to ``chunks`` pieces of ceil(size / chunks) along ``dim`` (torch.chunk)."""
        if not isinstance(chunks, (int, np.integer)) or chunks <= 0:
            raise TensorValueError(f"chunk count must be a positive int, got {chunks!r}")
        n = self.shape[_axis(dim, self.ndim)]
        return self.split(max(1, -(-n // int(chunks))), dim)

    # ---------------------------------------------------------------- padding modes


def _tensor_list(first: Tensor | Sequence[Tensor], others: tuple[Tensor, ...]) -> list[Tensor]:
    """``a.cat(b, c)`` and ``Tensor.cat([a, b, c])`` alike."""
    if isinstance(first, (list, tuple)):
        return [*first, *others]
    return [cast("Tensor", first), *others]


def _index_tensor(like: Tensor, index: Any) -> Tensor:
    """``index`` (a tensor, list or array of ints) as an integer tensor on ``like``'s device."""
    tensor_type = type(like)
    if isinstance(index, tensor_type):
        if not dtypes.is_int(index.dtype) or index.dtype is dtypes.bool:
            raise TypeError(f"index tensors must be integer, got {index.dtype!r}")
        return index
    arr = _as_index_array(index, tensor_type)
    if arr.dtype == np.bool_:
        raise TypeError("index arrays must be integer, got bool")
    wide = not (arr.size == 0 or abs(arr).max() < 2**31)
    return tensor_type(arr.astype(np.int64 if wide else np.int32), device=like.device)


def _region(x: Tensor, idx: Tensor, d: int, what: str) -> Tensor:
    """``x`` shrunk to ``idx``'s extent on every axis but ``d``."""
    if idx.ndim != x.ndim:
        raise TensorValueError(f"{what} index needs {x.ndim} dimensions like the tensor, got {idx.ndim}")
    for i, (a, b) in enumerate(zip(idx.shape, x.shape, strict=True)):
        if i != d and a > b:
            raise TensorValueError(f"{what} index of shape {idx.shape} is larger than the tensor {x.shape} on axis {i}")
    return x.shrink([None if i == d else (0, n) for i, n in enumerate(idx.shape)])

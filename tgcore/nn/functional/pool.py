"""Max and average pools (1-d to 3-d), max pool indices and `max_unpool2d`."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tgcore.dtype import dtypes
from tgcore.errors import TensorValueError
from tgcore.nn.functional.common import IntOrTuple, _check_spatial, _pad_last, _tuple, windows
from tgcore.tensor import Tensor
from tgcore.tensor_autograd import with_gradient

# ------------------------------------------------------------------------------------------ pooling

def _pool_geometry(length: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> tuple[int, int]:
    """(output length, extra padding after) for one axis; with ceil_mode a last partial window is kept if it
    starts inside the input or the padding before it (torch's rule)."""
    span = d * (k - 1) + 1
    total = length + 2 * p
    if total < span:
        raise TensorValueError(f"pooling window of {k} (dilation {d}) is larger than the padded input ({total})")
    if not ceil_mode:
        return (total - span) // s + 1, 0
    o = -(-(total - span) // s) + 1
    if (o - 1) * s >= length + p:
        o -= 1
    return o, max(0, (o - 1) * s + span - total)


def _pool_args(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None, padding: IntOrTuple,
               dilation: IntOrTuple, ceil_mode: bool, nd: int,
               name: str) -> tuple[list[tuple[int, int]], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(padding per spatial axis, the ceil_mode extra included after; kernel; stride; dilation)."""
    _check_spatial(x, nd, name)
    k = _tuple(kernel_size, nd, "kernel_size")
    no_stride = stride is None or (not isinstance(stride, int) and len(stride) == 0)
    s = k if no_stride else _tuple(stride, nd, "stride")  # type: ignore[arg-type]
    p, d = _tuple(padding, nd, "padding"), _tuple(dilation, nd, "dilation")
    for ki, pi in zip(k, p, strict=True):
        if pi > ki // 2:
            raise TensorValueError(f"{name}: padding {p} must be at most half the kernel size {k}")
    pads = []
    for i in range(nd):
        _, extra = _pool_geometry(x.shape[x.ndim - nd + i], k[i], s[i], p[i], d[i], ceil_mode)
        pads.append((p[i], p[i] + extra))
    return pads, k, s, d


def _blocks(x: Tensor, k: tuple[int, ...], s: tuple[int, ...]) -> tuple[Tensor, tuple[int, ...]]:
    """Windows that do not overlap (stride >= kernel, no dilation) over the last ``len(k)`` axes, as a reshape:
    ``(..., L1, ..., Ln) -> (..., O1, K1, ..., On, Kn)`` and the K axes. Unlike ``windows`` no permute and no
    copies of a row: a reduction over the K axes reads the input in its own order, and its gradient is a
    reshape and a pad (``windows``' sums the copies, a reduction kernel per axis)."""
    nd = len(k)
    lead = x.ndim - nd
    keep: list[tuple[int, int] | None] = [None] * lead
    outs = [(n - kk) // ss + 1 for n, kk, ss in zip(x.shape[lead:], k, s, strict=True)]
    # each axis as rows of s, the first k of each row: pad when the last row runs past the end (only its
    # first k, inside the input, are read), else cut the tail no window reaches
    if any(ss * o > n for n, ss, o in zip(x.shape[lead:], s, outs, strict=True)):
        x = x.pad(keep + [(0, max(0, ss * o - n)) for n, ss, o in zip(x.shape[lead:], s, outs, strict=True)])
    if any(ss * o < n for n, ss, o in zip(x.shape[lead:], s, outs, strict=True)):
        x = x.shrink(keep + [(0, ss * o) for ss, o in zip(s, outs, strict=True)])
    x = x.reshape(x.shape[:lead] + tuple(d for ss, o in zip(s, outs, strict=True) for d in (o, ss)))
    if any(ss != kk for ss, kk in zip(s, k, strict=True)):
        x = x.shrink(keep + [r for kk in k for r in (None, (0, kk))])
    return x, tuple(lead + 2 * i + 1 for i in range(nd))


def _pool_windows(x: Tensor, k: tuple[int, ...], s: tuple[int, ...],
                  d: tuple[int, ...]) -> tuple[Tensor, tuple[int, ...]]:
    """The windows a pooling reduces over the last ``len(k)`` axes of ``x``, and the axes to reduce."""
    if all(dd == 1 and ss >= kk for kk, ss, dd in zip(k, s, d, strict=True)):  # the default: stride = kernel
        return _blocks(x, k, s)
    win = windows(x, k, s, d)
    return win, tuple(range(win.ndim - len(k), win.ndim))


def _max_pool(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None, padding: IntOrTuple,
              dilation: IntOrTuple, ceil_mode: bool, nd: int, name: str,
              return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    pads, k, s, d = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode, nd, name)
    fill = -math.inf if dtypes.is_float(x.dtype) else int(x.dtype.min)
    win, axes = _pool_windows(_pad_last(x, pads, fill), k, s, d)
    if not return_indices:
        return win.max(axes)
    # the flat spatial index of each input position, windowed the same way (padding: -1, never picked)
    spatial = x.shape[x.ndim - nd:]
    where = Tensor.arange(math.prod(spatial), device=x.device).reshape(spatial)
    where_win, _ = _pool_windows(_pad_last(where, pads, -1), k, s, d)
    flat = _taps_last(win, axes)
    cand = _taps_last(where_win, tuple(a - (x.ndim - nd) for a in axes))
    first = flat.argmax(-1, keepdim=True)  # the first maximum of each window (torch's choice)
    picked = (first == Tensor.arange(flat.shape[-1], device=x.device)).where(cand, 0)
    return flat.max(-1), picked.sum(-1, dtype=dtypes.int64)


def _taps_last(win: Tensor, axes: tuple[int, ...]) -> Tensor:
    """Windows with their tap axes ``axes`` moved last and merged into one."""
    rest = [i for i in range(win.ndim) if i not in axes]
    return win.permute(rest + list(axes)).reshape(tuple(win.shape[i] for i in rest) + (-1,))


def max_unpool2d(x: Tensor, indices: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None,
                 padding: IntOrTuple = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """The inverse of ``max_pool2d(..., return_indices=True)``: each value put back at its flat spatial index
    in an output of zeros (of ``output_size``, by default the size the pool came from)."""
    return _max_unpool(x, indices, kernel_size, stride, padding, output_size, 2)


def _max_unpool(x: Tensor, indices: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None,
                padding: IntOrTuple, output_size: Sequence[int] | None, nd: int) -> Tensor:
    if indices.shape != x.shape:
        raise TensorValueError(f"max_unpool: indices of shape {indices.shape} do not match the input {x.shape}")
    k = _tuple(kernel_size, nd, "kernel_size")
    st = k if stride is None else _tuple(stride, nd, "stride")
    p = _tuple(padding, nd, "padding")
    lead, sp = x.shape[:x.ndim - nd], x.shape[x.ndim - nd:]
    if output_size is None:
        out_sp = tuple((n - 1) * ss - 2 * pp + kk for n, ss, pp, kk in zip(sp, st, p, k, strict=True))
    else:
        out_sp = tuple(output_size)[-nd:]
    n_out = math.prod(out_sp)
    vals, at = x.reshape(lead + (math.prod(sp),)), indices.reshape(lead + (math.prod(sp),))
    hit = at.unsqueeze(-1) == Tensor.arange(n_out, device=x.device)  # (..., S, n_out)
    # overlapping windows may put the same element at one index twice: keep one copy (max), not their sum
    fill = -math.inf if dtypes.is_float(x.dtype) else int(x.dtype.min)
    picked = hit.where(vals.unsqueeze(-1), fill).max(-2)
    out = with_gradient(hit.any(-2).where(picked, 0), (vals, at), _unpool_grad)
    return out.reshape(lead + out_sp)


def _unpool_grad(g: Tensor, out: Tensor, vals: Tensor, at: Tensor) -> tuple[Tensor, None]:
    """Each input gets the gradient of the position it went to (a repeated index: each copy gets it, like torch)."""
    return g.gather(-1, at), None


def max_pool1d(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               dilation: IntOrTuple = 1, ceil_mode: bool = False) -> Tensor:
    """Maximum over sliding windows of (N, C, L); padding counts as -inf."""
    out = _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 1, "max_pool1d")
    assert isinstance(out, Tensor)
    return out


def max_pool2d(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               dilation: IntOrTuple = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """Maximum over sliding windows of (N, C, H, W); padding counts as -inf. The gradient of a window whose
    maximum is tied is split evenly between the tied positions (torch gives it all to one). With
    ``return_indices`` also each maximum's flat index in H*W (int64; the first maximum of a window)."""
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 2, "max_pool2d", return_indices)


def max_pool3d(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               dilation: IntOrTuple = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """Maximum over sliding windows of (N, C, D, H, W) (see max_pool2d)."""
    return _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, 3, "max_pool3d", return_indices)


def _avg_pool(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None, padding: IntOrTuple, ceil_mode: bool,
              count_include_pad: bool, divisor_override: int | None, nd: int, name: str,
              dilation: IntOrTuple = 1) -> Tensor:
    pads, k, s, d = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode, nd, name)
    lead = x.ndim - nd
    total, axes = _pool_windows(_pad_last(x, pads), k, s, d)
    summed = total.sum(axes)
    if divisor_override is not None:
        return summed / divisor_override
    # divisor per window: positions inside the input (and the explicit padding if count_include_pad), never the
    # extra padding ceil_mode adds
    sp = x.shape[lead:]
    if count_include_pad:
        inside = Tensor.ones(*[n + 2 * p for n, (p, _) in zip(sp, pads, strict=True)], device=x.device)
        inside = inside.pad([(0, after - before) for before, after in pads])
    else:
        inside = Tensor.ones(*sp, device=x.device).pad(pads)
    inside_windows, inside_axes = _pool_windows(inside, k, s, d)
    count = inside_windows.sum(inside_axes)
    return (summed / count.cast(summed.dtype)).cast(summed.dtype)


def avg_pool1d(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over sliding windows of (N, C, L)."""
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1, "avg_pool1d")


def avg_pool2d(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None,
               dilation: IntOrTuple = 1) -> Tensor:
    """Mean over sliding windows of (N, C, H, W); ``count_include_pad`` counts the zero padding in the divisor.
    ``dilation`` (not in torch) spreads the window's taps apart like a convolution's."""
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2,
                     "avg_pool2d", dilation)


def avg_pool3d(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over sliding windows of (N, C, D, H, W)."""
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3,
                     "avg_pool3d")

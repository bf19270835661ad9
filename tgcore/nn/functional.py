"""Neural-network functions on lazy tensors: linear, convolutions, pooling, normalizations, losses, attention.

In:  `tgcore.tensor.Tensor` inputs (and parameters as plain tensors), with torch.nn.functional's argument
     names and layouts (NCHW images, weights ``(out, in, kh, kw)``, class-index targets).
Out: lazy tensors built from Tensor's own ops, so gradients come from the tensor-level rules and the
     scheduler fuses what it can. Nothing here runs a kernel except `batch_norm` in training mode with
     running statistics, which updates them in place (``Tensor.assign``).

Convolutions and pools are "im2col by views": `windows` turns each spatial axis of length L into an
(output position, kernel tap) pair of axes using only expand/reshape/pad/shrink, so a convolution is
one broadcast multiply summed over (input channel, taps) -- one reduction kernel, no materialized
patch matrix in the forward pass.

Narrow floats (float16, bfloat16) accumulate sums in float32 and are normalized in float32, rounding
once at the end, like torch on CPU.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from tgcore.dtype import DType, dtypes, least_upper_dtype, least_upper_float
from tgcore.errors import TensorValueError
from tgcore.helpers import ceildiv, round_up
from tgcore.tensor import Tensor
from tgcore.tensor_autograd import with_gradient

IntOrTuple = int | Sequence[int]
Pads = list[tuple[int, int] | None]  # (before, after) per axis, None for axes left alone
NARROW_FLOATS = (dtypes.float16, dtypes.bfloat16)

__all__ = ["avg_pool1d", "avg_pool2d", "avg_pool3d", "batch_norm", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "cross_entropy", "dropout", "embedding", "interpolate", "l1_loss", "layer_norm",
           "linear", "log_softmax", "matmul", "max_pool1d", "max_pool2d", "max_pool3d", "max_unpool2d", "mse_loss",
           "nll_loss", "normalize", "rms_norm", "scaled_dot_product_attention", "softmax", "windows"]


# ------------------------------------------------------------------------------------------ helpers

def _tuple(v: IntOrTuple, n: int, what: str) -> tuple[int, ...]:
    """``v`` as n ints (an int is repeated); ValueError for a sequence of the wrong length."""
    if isinstance(v, int):
        return (v,) * n
    out = tuple(int(x) for x in v)
    if len(out) != n:
        raise TensorValueError(f"{what} needs {n} values (one per spatial axis), got {tuple(v)}")
    return out


def _pad_last(x: Tensor, pads: Sequence[tuple[int, int]], value: float = 0.0) -> Tensor:
    """Pad the last ``len(pads)`` axes by (before, after) each (negative amounts crop)."""
    full: Pads = [None] * (x.ndim - len(pads))
    full.extend(pads)
    return x.pad(full, value)


def _compute_dtype(dt: DType) -> DType:
    """The dtype a normalization computes in: float32 for narrow floats, else the float form of ``dt``."""
    f = least_upper_float(dt)
    return dtypes.float32 if f in NARROW_FLOATS else f


def _reduce_out(loss: Tensor, reduction: str, denominator: Tensor | None = None) -> Tensor:
    """Apply a torch-style ``reduction`` ('mean', 'sum', 'none') to per-element losses."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.sum() / denominator if denominator is not None else loss.mean()
    raise TensorValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_spatial(x: Tensor, nd: int, what: str) -> None:
    if x.ndim not in (nd + 1, nd + 2):
        raise TensorValueError(f"{what} needs an (N, C, {nd} spatial axes) input, or (C, {nd} spatial axes) without "
                               f"the batch, got shape {x.shape}")


# ------------------------------------------------------------------------------------------ windows

def _window_last(x: Tensor, k: int, s: int, d: int) -> Tensor:
    """Views of the last axis (length L) as (output position o, tap j): ``out[..., i, j] = x[..., i*s + j*d]``."""
    pre, length = x.shape[:-1], x.shape[-1]
    span = d * (k - 1) + 1
    o = (length - span) // s + 1
    keep = [None] * len(pre)
    if k == 1:
        taps = x.unsqueeze(-2)  # (..., 1, L)
        row = length
    else:
        # k copies of the row, laid end to end and re-read with a row length d longer: row j starts d*j later
        flat = x.unsqueeze(-2).expand(pre + (k, length)).reshape(pre + (k * length,))
        taps = flat.pad(keep + [(0, k * d)]).reshape(pre + (k, length + d))
        row = length + d
    # taps[..., j, c] = x[..., j*d + c] for c < L - d*(k-1); take every s-th c
    need = s * o
    if need <= row:
        taps = taps.shrink(keep + [None, (0, need)])
    else:
        taps = taps.shrink(keep + [None, (0, s * (o - 1) + 1)]).pad(keep + [None, (0, need - s * (o - 1) - 1)])
    if s > 1:
        taps = taps.reshape(pre + (k, o, s)).shrink(keep + [None, None, (0, 1)]).reshape(pre + (k, o))
    return taps.transpose(-1, -2)


def windows(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
    """Sliding windows over the last ``len(kernel)`` axes, as views (no copy).

    ``(..., L1, ..., Ln) -> (..., O1, ..., On, K1, ..., Kn)`` with
    ``out[..., o1.., k1..] = x[..., o1*s1 + k1*d1, ...]`` and ``Oi = (Li - di*(Ki - 1) - 1) // si + 1``.
    """
    nd = len(kernel)
    lead = x.ndim - nd
    for i in range(nd):
        a = lead + i
        n = x.ndim
        if x.shape[a] < dilation[i] * (kernel[i] - 1) + 1:
            raise TensorValueError(f"window of {kernel[i]} taps (dilation {dilation[i]}) does not fit an axis of "
                                   f"{x.shape[a]} (after padding)")
        order = [j for j in range(n) if j != a] + [a]
        w = _window_last(x.permute(order), kernel[i], stride[i], dilation[i])  # (rest..., o, k)
        back = list(range(n - 1))
        back.insert(a, n - 1)
        x = w.permute(back + [n])
    return x


# ------------------------------------------------------------------------------------------ linear

def matmul(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b`` with batch broadcasting (Tensor.matmul)."""
    return a.matmul(b)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` with ``weight`` of shape (out_features, in_features); sums in float32 for narrow
    floats."""
    if weight.ndim != 2 or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        raise TensorValueError(f"linear: input {x.shape} does not match weight {weight.shape} (expected (..., "
                               f"{weight.shape[-1] if weight.ndim else '?'}) and a 2-d weight)")
    dt = least_upper_dtype(x.dtype, weight.dtype)
    out = (x.cast(dt).unsqueeze(-2) * weight.cast(dt)).sum(-1)
    return out + bias if bias is not None else out


# ------------------------------------------------------------------------------------------ convolution

def _conv_padding(padding: IntOrTuple | str, nd: int, kernel: tuple[int, ...], dilation: tuple[int, ...],
                  stride: tuple[int, ...]) -> list[tuple[int, int]]:
    """(before, after) per spatial axis; 'same' puts the extra element of an odd total after (like torch)."""
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nd
        if padding == "same":
            if any(s != 1 for s in stride):
                raise TensorValueError("padding='same' needs stride 1")
            totals = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
            return [(t // 2, t - t // 2) for t in totals]
        raise TensorValueError(f"padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
    return _pad_pairs(padding, nd)


def _pad_pairs(padding: IntOrTuple, nd: int) -> list[tuple[int, int]]:
    """(before, after) per spatial axis from an int, one int per axis, or a flat torch-style ``F.pad`` tuple of
    2*nd ints that starts with the last axis: ``(left, right, top, bottom)`` for 2-d."""
    if not isinstance(padding, int) and len(padding) == 2 * nd and nd > 1:
        flat = [int(p) for p in padding]
        return [(flat[2 * i], flat[2 * i + 1]) for i in reversed(range(nd))]
    return [(p, p) for p in _tuple(padding, nd, "padding")]


def _conv(x: Tensor, weight: Tensor, bias: Tensor | None, stride: IntOrTuple, padding: IntOrTuple | str,
          dilation: IntOrTuple, groups: int, nd: int, name: str) -> Tensor:
    _check_spatial(x, nd, name)
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x.unsqueeze(0)
    if weight.ndim != nd + 2:
        raise TensorValueError(f"{name}: weight must have {nd + 2} dimensions (out, in/groups, kernel...), got "
                               f"{weight.shape}")
    n, cin = x.shape[:2]
    cout, cin_g = weight.shape[:2]
    kernel = weight.shape[2:]
    if groups < 1 or cin % groups or cout % groups:
        raise TensorValueError(f"{name}: groups={groups} must divide the input channels ({cin}) and the output "
                               f"channels ({cout})")
    if cin_g * groups != cin:
        raise TensorValueError(f"{name}: input has {cin} channels but the weight expects {cin_g * groups} "
                               f"({cin_g} per group x {groups} groups)")
    st, dl = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
    pads = _conv_padding(padding, nd, kernel, dl, st)
    dt = least_upper_dtype(x.dtype, weight.dtype)
    x, weight = x.cast(dt), weight.cast(dt)
    padded = _pad_last(x, pads)
    if _flat_windows_pay(padded, cout, kernel, st, dl):
        out = _conv_flat(x, weight, groups, kernel, dl, tuple(pads))
    else:
        win = windows(padded, kernel, st, dl)  # (N, Cin, O..., K...)
        out_sp = win.shape[2:2 + nd]
        # (N, G, 1, Cin/G, O..., K...) * (1, G, Cout/G, Cin/G, 1..., K...) summed over Cin/G and the taps
        win = win.reshape((n, groups, 1, cin_g) + out_sp + kernel)
        w = weight.reshape((1, groups, cout // groups, cin_g) + (1,) * nd + kernel)
        axes = (3,) + tuple(range(4 + nd, 4 + 2 * nd))
        out = (win * w).sum(axes).reshape((n, cout) + out_sp)
    if bias is not None:
        out = out + bias.cast(dt).reshape((1, cout) + (1,) * nd)
    return out.squeeze(0) if unbatched else out


FLAT_CONV_MIN_FLOPS = 1 << 26  # smaller convolutions keep the plain windows: one kernel fewer, no padded copy
# the flat positions computed are a multiple of this (the columns of whole register tiles: a tile of padded columns
# is gated lane by lane), the extra ones read the padding and are cut off with the rest
FLAT_POSITIONS_MULTIPLE = 64


def _conv_out(padded: Sequence[int], kernel: Sequence[int], dilation: Sequence[int]) -> tuple[int, ...]:
    """Output extents of a stride-1 convolution of an input padded to ``padded``."""
    return tuple(p - d * (k - 1) for p, k, d in zip(padded, kernel, dilation, strict=True))


def _flat_windows_pay(x: Tensor, cout: int, kernel: tuple[int, ...], stride: tuple[int, ...],
                      dilation: tuple[int, ...]) -> bool:
    """Whether ``_conv_flat`` is worth its padded copy: stride 1, and enough multiply-adds."""
    out = _conv_out(x.shape[2:], kernel, dilation)
    if any(s != 1 for s in stride) or min(out) < 1:
        return False
    return 2 * x.shape[0] * x.shape[1] * cout * math.prod(kernel) * math.prod(out) >= FLAT_CONV_MIN_FLOPS


Pad = tuple[int, int]


def _conv_flat(x: Tensor, weight: Tensor, groups: int, kernel: tuple[int, ...], dilation: tuple[int, ...],
               pads: tuple[Pad, ...]) -> Tensor:
    """A stride-1 convolution of ``x`` (N, Cin, S...) padded by ``pads`` over its flattened positions (see
    ``_flat_windows``): the taps of each output channel are a matrix product's rows, the flattened positions its
    columns. Its gradients are convolutions of the same form (``_conv_flat_grad``), not the chain rule through the
    window views (which would sum a materialized copy of the windows)."""
    nd = len(kernel)
    n = x.shape[0]
    cout, cin_g = weight.shape[:2]
    xp = _pad_last(x, pads)
    padded = xp.shape[2:]
    win, out_sp = _flat_windows(xp, kernel, dilation, FLAT_POSITIONS_MULTIPLE)
    computed = win.shape[-1]
    win = win.reshape((n, groups, 1, cin_g) + kernel + (computed,))
    w = weight.reshape((1, groups, cout // groups, cin_g) + kernel + (1,))
    out = (win * w).sum(tuple(range(3, 4 + nd)))  # (N, G, Cout/G, computed)
    # computed on the padded grid (its columns are the kernel's contiguous axis), then the valid part cut out
    positions = out_sp[0] * math.prod(padded[1:])
    out = out.contiguous().reshape((n, cout, computed)).shrink((None, None, (0, positions)))
    out = out.reshape((n, cout, out_sp[0]) + tuple(padded[1:]))
    out = out.shrink([None, None, None] + [(0, o) for o in out_sp[1:]])
    return with_gradient(out, (x, weight), _flat_conv_rule(pads, dilation))


@functools.cache
def _flat_conv_rule(pads: tuple[Pad, ...], dilation: tuple[int, ...]) -> Callable[..., tuple[Tensor, Tensor]]:
    """The gradient rule of ``_conv_flat`` for one padding and dilation: one function per pair (the rule is part of
    the graph node, so the same convolution twice makes the same graph)."""
    def rule(g: Tensor, out: Tensor, x: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
        return _conv_flat_grad(g, x, weight, pads, dilation)
    return rule


def _flat_windows(x: Tensor, kernel: tuple[int, ...], dilation: tuple[int, ...],
                  multiple: int = 1) -> tuple[Tensor, tuple[int, ...]]:
    """The windows of a stride-1 convolution of the padded input ``x`` (N, Cin, P...) over its flattened positions,
    (N, Cin, K1..Kn, positions), and the output extents: output position ``p`` (row-major over (O1, P2, ..., Pn))
    reads ``flat[p + sum_i k_i * d_i * S_i]`` (S_i: the padded row strides), so every tap is the same contiguous run
    shifted; the positions past each row's valid outputs (the last ``d_i*(K_i-1)`` of axes 2..n) are computed and
    cut off, and so are the positions past the last row up to a ``multiple`` of positions. ``x`` is made contiguous
    once (the padding), then windows of the flat axis are views."""
    nd = len(kernel)
    n, cin = x.shape[:2]
    padded = x.shape[2:]
    out_sp = _conv_out(padded, kernel, dilation)
    strides = [math.prod(padded[i + 1:]) for i in range(nd)]
    positions = round_up(out_sp[0] * strides[0], multiple)  # output positions on the padded grid: O1 x P2 x ... x Pn
    reach = sum((k - 1) * d * s for k, d, s in zip(kernel, dilation, strides, strict=True))
    slack_rows = ceildiv(positions + reach - math.prod(padded), strides[0])  # read by the cut-off positions
    x = x.pad([None, None, (0, slack_rows)] + [None] * (nd - 1)) if slack_rows > 0 else x
    flat = x.contiguous().reshape((n, cin, math.prod(x.shape[2:])))
    win = flat
    for k, d, s in zip(kernel, dilation, strides, strict=True):  # taps of each axis: (..., L) -> (..., L', k)
        win = _window_last(win, k, 1, d * s)
        win = win.transpose(-1, -2)  # the positions last again
    return win.shrink([None] * (win.ndim - 1) + [(0, positions)]), out_sp


def _conv_flat_grad(g: Tensor, x: Tensor, weight: Tensor, pads: tuple[Pad, ...],
                    dilation: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Gradients of ``_conv_flat`` for the output gradient ``g``. The input's is the transposed convolution, for the
    input's own positions only: ``g`` padded by the kernel's reach less the forward padding (cropped where that is
    negative), convolved with the flipped kernel, channels swapped (the flat form again). The weight's is a matrix
    product over the batch and the positions of the padded input's windows (rows: input channel and tap) with ``g``
    on the padded grid (zeros past each row's outputs) transposed to (positions, output channels), so the output
    channels are contiguous vector columns (the register tile of ``heuristic.gemm_opts``, its positions in K blocks)
    and no lanes are summed across."""
    kernel = weight.shape[2:]
    nd = len(kernel)
    n = x.shape[0]
    cout, cin_g = weight.shape[:2]
    groups = x.shape[1] // cin_g
    reach = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
    g_wide = _pad_last(g, [(r - before, r - after) for r, (before, after) in zip(reach, pads, strict=True)])
    dx = _conv(g_wide, _flipped_transpose(weight, groups, nd), None, 1, 0, dilation, groups, nd, "conv gradient")
    xp = _pad_last(x, pads)
    padded, out_sp = xp.shape[2:], g.shape[2:]
    g_grid = _pad_last(g, [(0, p - o) for p, o in zip(padded[1:], out_sp[1:], strict=True)])
    win, _ = _flat_windows(xp, kernel, dilation, FLAT_POSITIONS_MULTIPLE)  # (the forward's padded copy of x)
    positions = out_sp[0] * math.prod(padded[1:])
    win = win.shrink([None] * (win.ndim - 1) + [(0, positions)])
    g_t = g_grid.reshape((n, groups, cout // groups, positions)).transpose(-1, -2).contiguous()
    g_t = g_t.reshape((n, groups, 1) + (1,) * nd + (positions, cout // groups))
    win = win.reshape((n, groups, cin_g) + kernel + (positions, 1))
    dw = (win * g_t).sum((0, 3 + nd))  # (G, Cin/G, K..., Cout/G)
    dw = dw.permute((0, 2 + nd, 1) + tuple(range(2, 2 + nd)))
    return dx, dw.reshape(weight.shape)


def _flipped_transpose(weight: Tensor, groups: int, nd: int) -> Tensor:
    """(In, Out/G, K...) -> (Out, In/G, K...), flipped in space: the kernel of the adjoint convolution."""
    cin, cout_g = weight.shape[:2]
    kernel = weight.shape[2:]
    cin_g = cin // groups
    w = weight.reshape((groups, cin_g, cout_g) + kernel).transpose(1, 2).reshape((groups * cout_g, cin_g) + kernel)
    return w.flip(*range(2, 2 + nd))


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
           padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """1-d convolution (cross-correlation) of (N, C, L) with a (Cout, C/groups, K) weight."""
    return _conv(x, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
           padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """2-d convolution (cross-correlation) of (N, C, H, W) with a (Cout, C/groups, KH, KW) weight."""
    return _conv(x, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
           padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """3-d convolution (cross-correlation) of (N, C, D, H, W) with a (Cout, C/groups, KD, KH, KW) weight."""
    return _conv(x, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def _conv_transpose(x: Tensor, weight: Tensor, bias: Tensor | None, stride: IntOrTuple, padding: IntOrTuple,
                    output_padding: IntOrTuple, groups: int, dilation: IntOrTuple, nd: int, name: str) -> Tensor:
    """The adjoint of a strided convolution: spread the input out by the stride (zeros between elements), pad by
    the kernel's reach less ``padding``, and convolve with the flipped kernel, in and out channels swapped."""
    _check_spatial(x, nd, name)
    unbatched = x.ndim == nd + 1
    if unbatched:
        x = x.unsqueeze(0)
    if weight.ndim != nd + 2:
        raise TensorValueError(f"{name}: weight must have {nd + 2} dimensions (in, out/groups, kernel...), got "
                               f"{weight.shape}")
    cin, cout_g = weight.shape[:2]
    kernel = weight.shape[2:]
    if groups < 1 or cin % groups:
        raise TensorValueError(f"{name}: groups={groups} must divide the weight's input channels ({cin})")
    if x.shape[1] != cin:
        raise TensorValueError(f"{name}: input has {x.shape[1]} channels but the weight expects {cin}")
    st, dl = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
    pd, op = _tuple(padding, nd, "padding"), _tuple(output_padding, nd, "output_padding")
    for o, s, d in zip(op, st, dl, strict=True):
        if o >= max(s, d):
            raise TensorValueError(f"{name}: output_padding {op} must be smaller than the stride {st} or the "
                                   f"dilation {dl}")
    # insert s-1 zeros between neighbours on each spatial axis (views: unsqueeze, pad, reshape, shrink)
    for i, s in enumerate(st):
        if s == 1:
            continue
        a = 2 + i
        length = x.shape[a]
        x = x.unsqueeze(a + 1).pad([None] * (a + 1) + [(0, s - 1)] + [None] * (x.ndim - a - 1))
        x = x.reshape(x.shape[:a] + (length * s,) + x.shape[a + 2:])
        x = x.shrink([None] * a + [(0, (length - 1) * s + 1)] + [None] * (x.ndim - a - 1))
    pads = [(d * (k - 1) - p, d * (k - 1) - p + o) for k, d, p, o in zip(kernel, dl, pd, op, strict=True)]
    x = _pad_last(x, pads)  # negative amounts crop
    out = _conv(x, _flipped_transpose(weight, groups, nd), bias, 1, 0, dl, groups, nd, name)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:
    """Transposed 1-d convolution with a (Cin, Cout/groups, K) weight (torch's argument order)."""
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 1, "conv_transpose1d")


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:
    """Transposed 2-d convolution with a (Cin, Cout/groups, KH, KW) weight (torch's argument order)."""
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 2, "conv_transpose2d")


def conv_transpose3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:
    """Transposed 3-d convolution with a (Cin, Cout/groups, KD, KH, KW) weight (torch's argument order)."""
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation, 3, "conv_transpose3d")


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


# ------------------------------------------------------------------------------------------ resampling

INTERPOLATE_MODES = {"nearest": None, "linear": 1, "bilinear": 2, "trilinear": 3}


def interpolate(x: Tensor, size: IntOrTuple | None = None, scale_factor: float | Sequence[float] | None = None,
                mode: str = "nearest", align_corners: bool | None = None) -> Tensor:
    """Resize the spatial axes of (N, C, *spatial) to ``size`` (or by ``scale_factor``), like torch: "nearest" picks
    floor(i * scale), the linear modes blend the two neighbours of each output position's source coordinate
    (pixel centres aligned, or the corners with ``align_corners``). One axis at a time: gathers and a blend,
    with the positions and weights computed here (they depend on the sizes only)."""
    if mode not in INTERPOLATE_MODES:
        raise TensorValueError(f"interpolate: mode must be one of {sorted(INTERPOLATE_MODES)}, got {mode!r}")
    nd = x.ndim - 2
    want = INTERPOLATE_MODES[mode]
    if nd < 1 or (want is not None and want != nd):
        raise TensorValueError(f"interpolate: mode {mode!r} needs a {(want or 1) + 2}-d input, got shape {x.shape}")
    if align_corners is not None and mode == "nearest":
        raise TensorValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                               "trilinear")
    if (size is None) == (scale_factor is None):
        raise TensorValueError("interpolate: give exactly one of size and scale_factor")
    spatial = x.shape[2:]
    if size is not None:
        out = _tuple(size, nd, "size")
        scales = [n / m if m else 0.0 for n, m in zip(spatial, out, strict=True)]
    else:
        assert scale_factor is not None
        sf = [float(scale_factor)] * nd if isinstance(scale_factor, (int, float)) else [float(f) for f in scale_factor]
        out = tuple(math.floor(n * f) for n, f in zip(spatial, sf, strict=True))
        scales = [1 / f for f in sf]
    for i, (n, m, scale) in enumerate(zip(spatial, out, scales, strict=True)):
        x = _resample_axis(x, 2 + i, n, m, scale, mode == "nearest", bool(align_corners))
    return x


def _resample_axis(x: Tensor, ax: int, n: int, m: int, scale: float, nearest: bool, corners: bool) -> Tensor:
    import numpy as np
    pick: list[object] = [slice(None)] * x.ndim
    dst = np.arange(m, dtype=np.float64)
    if nearest:
        pick[ax] = np.minimum(np.floor(dst * scale).astype(np.int64), n - 1)
        return x[tuple(pick)]
    if corners:
        src = dst * ((n - 1) / (m - 1)) if m > 1 else np.zeros(m)
    else:
        src = np.maximum((dst + 0.5) * scale - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n - 1)
    hi = np.minimum(lo + 1, n - 1)
    frac = (src - lo).astype(np.float32)
    shape = [1] * x.ndim
    shape[ax] = m
    w = Tensor(frac.reshape(shape), device=x.device).cast(least_upper_float(x.dtype))
    pick[ax] = lo
    below = x[tuple(pick)]
    pick[ax] = hi
    above = x[tuple(pick)]
    return below * (1 - w) + above * w


# ------------------------------------------------------------------------------------------ softmax

def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along ``dim`` (narrow floats computed in float32)."""
    dt = least_upper_float(x.dtype)
    xf = x.cast(_compute_dtype(x.dtype))
    e = (xf - xf.max(dim, keepdim=True).detach()).exp()
    return (e / e.sum(dim, keepdim=True)).cast(dt)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - max - log(sum(exp(x - max))) along ``dim`` (narrow floats computed in float32)."""
    dt = least_upper_float(x.dtype)
    xf = x.cast(_compute_dtype(x.dtype))
    shifted = xf - xf.max(dim, keepdim=True).detach()
    return (shifted - shifted.exp().sum(dim, keepdim=True).log()).cast(dt)


# ------------------------------------------------------------------------------------------ normalization

def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along ``dim``."""
    ax = x.abs()
    norm = (ax * ax).sum(dim, keepdim=True).sqrt() if p == 2 else (ax ** p).sum(dim, keepdim=True) ** (1 / p)
    return x / norm.maximum(eps)


def _norm_axes(x: Tensor, normalized_shape: IntOrTuple) -> tuple[int, ...]:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape or len(shape) > x.ndim:
        raise TensorValueError(f"normalized_shape {shape} does not match the last axes of the input {x.shape}")
    return tuple(range(x.ndim - len(shape), x.ndim))


def layer_norm(x: Tensor, normalized_shape: IntOrTuple, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axes (biased variance, like torch)."""
    axes = _norm_axes(x, normalized_shape)
    dt = least_upper_float(x.dtype)
    xf = x.cast(_compute_dtype(x.dtype))
    mean = xf.mean(axes, keepdim=True)
    centered = xf - mean
    var = (centered * centered).mean(axes, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.cast(out.dtype)
    if bias is not None:
        out = out + bias.cast(out.dtype)
    return out.cast(dt)


def rms_norm(x: Tensor, normalized_shape: IntOrTuple, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last axes; ``eps=None`` uses the dtype's machine epsilon."""
    axes = _norm_axes(x, normalized_shape)
    dt = least_upper_float(x.dtype)
    if eps is None:
        eps = _EPS.get(dt, _EPS[dtypes.float32])
    xf = x.cast(_compute_dtype(x.dtype))
    out = xf * ((xf * xf).mean(axes, keepdim=True) + eps).rsqrt()
    if weight is not None:
        out = out * weight.cast(out.dtype)
    return out.cast(dt)


_EPS = {dtypes.float16: 0.0009765625, dtypes.bfloat16: 0.0078125, dtypes.float32: 1.1920928955078125e-07,
        dtypes.float64: 2.220446049250313e-16}


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Normalize each channel (axis 1) of (N, C, ...) by batch statistics (``training``) or the running ones.

    In training mode the running statistics, when given, are updated in place now (``Tensor.assign``):
    ``running = (1 - momentum) * running + momentum * batch``, with the unbiased batch variance (like torch).
    """
    if x.ndim < 2:
        raise TensorValueError(f"batch_norm needs an (N, C, ...) input, got shape {x.shape}")
    c = x.shape[1]
    bshape = (1, c) + (1,) * (x.ndim - 2)
    dt = least_upper_float(x.dtype)
    xf = x.cast(_compute_dtype(x.dtype))
    if training:
        axes = (0,) + tuple(range(2, x.ndim))
        count = x.numel() // max(c, 1)
        if count <= 1:
            raise TensorValueError(f"batch_norm in training mode needs more than one value per channel, got {x.shape}")
        mean = xf.mean(axes, keepdim=True)
        centered = xf - mean
        var = (centered * centered).mean(axes, keepdim=True)
        if running_mean is not None:
            running_mean.assign(running_mean * (1 - momentum) + mean.detach().reshape(c) * momentum)
        if running_var is not None:
            unbiased = var.detach().reshape(c) * (count / (count - 1))
            running_var.assign(running_var * (1 - momentum) + unbiased * momentum)
    else:
        if running_mean is None or running_var is None:
            raise TensorValueError("batch_norm in eval mode needs running_mean and running_var (or training=True)")
        mean = running_mean.cast(xf.dtype).reshape(bshape)
        var = running_var.cast(xf.dtype).reshape(bshape)
        centered = xf - mean
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * weight.cast(out.dtype).reshape(bshape)
    if bias is not None:
        out = out + bias.cast(out.dtype).reshape(bshape)
    return out.cast(dt)


# ------------------------------------------------------------------------------------------ dropout, embedding

def _keep_mask(shape: tuple[int, ...], p: float, device: str) -> Tensor:
    """True with probability 1-p (the Tensor RNG keeps its counter on the device: fresh masks under the JIT)."""
    return Tensor.rand(*shape, device=device) >= p


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by 1/(1-p); the identity when not training.

    The mask comes from the Tensor RNG's generator (``Tensor.manual_seed`` makes it repeatable) with a counter on
    the device, so jitted train steps draw a new mask on every call.
    """
    if not 0.0 <= p <= 1.0:
        raise TensorValueError(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0
    keep = _keep_mask(x.shape, p, x.device)
    return keep.where(x * (1.0 / (1.0 - p)), 0).cast(x.dtype)


def embedding(idx: Tensor, weight: Tensor) -> Tensor:
    """Rows of ``weight`` (num_embeddings, dim) picked by the integer tensor ``idx``: shape idx.shape + (dim,)."""
    if not dtypes.is_int(idx.dtype) or idx.dtype is dtypes.bool:
        raise TypeError(f"embedding indices must be integers, got {idx.dtype!r}")
    vocab = weight.shape[0]
    hit = idx.unsqueeze(-1) == Tensor.arange(vocab, device=idx.device)  # (..., V)
    return (hit.unsqueeze(-1).where(weight, 0)).sum(-2)


# ------------------------------------------------------------------------------------------ losses

def nll_loss(logp: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """-logp[target] (class axis 1, or 0 for a single (C,) sample), optionally weighted per class."""
    return _class_loss(logp, target, weight, ignore_index, reduction, 0.0, "nll_loss")


def cross_entropy(x: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross entropy of logits (N, C, ...) (or (C,)) against class indices (N, ...) or class
    probabilities (same shape as the logits), with torch's ``weight``, ``ignore_index`` and ``label_smoothing``."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise TensorValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    cls = 0 if x.ndim == 1 else 1
    logp = log_softmax(x, cls)
    return _class_loss(logp, target, weight, ignore_index, reduction, label_smoothing, "cross_entropy")


def _class_loss(logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int, reduction: str,
                smoothing: float, name: str) -> Tensor:
    cls = 0 if logp.ndim == 1 else 1
    c = logp.shape[cls]
    wshape = (c,) + (1,) * (logp.ndim - cls - 1)
    w = weight.cast(logp.dtype).reshape(wshape) if weight is not None else None
    if dtypes.is_float(target.dtype):  # class probabilities
        if target.shape != logp.shape:
            raise TensorValueError(f"{name}: probability targets must have the input's shape {logp.shape}, got "
                                   f"{target.shape}")
        probs = target.cast(logp.dtype)
        if smoothing:
            probs = probs * (1 - smoothing) + smoothing / c
        term = -(logp * probs if w is None else logp * probs * w).sum(cls)
        return _reduce_out(term, reduction)
    if not dtypes.is_int(target.dtype) or target.dtype is dtypes.bool:
        raise TypeError(f"{name}: targets must be class indices (integers) or probabilities (floats), got "
                        f"{target.dtype!r}")
    expect = logp.shape[:cls] + logp.shape[cls + 1:]
    if target.shape != expect:
        raise TensorValueError(f"{name}: target shape {target.shape} does not match the input {logp.shape} "
                               f"(expected {expect})")
    classes = Tensor.arange(c, device=logp.device).reshape(wshape)
    onehot = target.unsqueeze(cls) == classes  # (N, C, ...)
    valid = target != ignore_index
    picked = onehot.where(logp if w is None else logp * w, 0).sum(cls)  # w[t] * logp[t]
    wt = onehot.where(w, 0).sum(cls) if w is not None else valid.cast(logp.dtype)
    wt = valid.where(wt, 0)
    loss = -valid.where(picked, 0)
    if smoothing:
        spread = (logp if w is None else logp * w).sum(cls)
        loss = loss * (1 - smoothing) - valid.where(spread, 0) * (smoothing / c)
    return _reduce_out(loss, reduction, wt.sum())


def binary_cross_entropy(p: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = "mean") -> Tensor:
    """-(y log p + (1 - y) log(1 - p)) with each log clamped at -100 (like torch)."""
    if p.shape != target.shape:
        raise TensorValueError(f"binary_cross_entropy: input {p.shape} and target {target.shape} differ in shape")
    y = target.cast(p.dtype)
    loss = -(y * p.log().maximum(-100.0) + (1 - y) * (1 - p).log().maximum(-100.0))
    if weight is not None:
        loss = loss * weight
    return _reduce_out(loss, reduction)


def binary_cross_entropy_with_logits(x: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid + binary cross entropy in one stable formula: (1 - y) x + (1 + (pw - 1) y) softplus(-x)."""
    if x.shape != target.shape:
        raise TensorValueError(f"binary_cross_entropy_with_logits: input {x.shape} and target {target.shape} differ "
                               "in shape")
    y = target.cast(x.dtype)
    softplus_neg = _log1p_small((-x.abs()).exp()) + (-x).maximum(0)  # log(1 + exp(-x)) without overflow
    scale = 1 + (pos_weight - 1) * y if pos_weight is not None else None
    loss = (1 - y) * x + (softplus_neg if scale is None else scale * softplus_neg)
    if weight is not None:
        loss = loss * weight
    return _reduce_out(loss, reduction)


def _log1p_small(e: Tensor) -> Tensor:
    """log(1 + e) for 0 <= e <= 1, accurate for tiny e, with a finite gradient everywhere. (Tensor.log1p's gradient
    is nan where 1 + e rounds to 1.)"""
    return (e < 1e-4).where(e * (1 - e * 0.5), (e + 1).log())


def mse_loss(x: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    d = x - target
    return _reduce_out(d * d, reduction)


def l1_loss(x: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return _reduce_out((x - target).abs(), reduction)


# ------------------------------------------------------------------------------------------ attention

def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., heads, L, E) / (..., heads, S, E) tensors.

    ``attn_mask`` is boolean (True takes part) or additive float, broadcast to (..., L, S); ``is_causal`` masks
    key s > query l (aligned at the top left, like torch). With ``enable_gqa``, k and v may have fewer heads
    (a divisor of q's): each is shared by a group of consecutive query heads.
    """
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise TensorValueError("scaled_dot_product_attention needs (..., L, E) tensors")
    if is_causal and attn_mask is not None:
        raise TensorValueError("scaled_dot_product_attention: pass attn_mask or is_causal, not both")
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == 0 or hq % hk or v.shape[-3] != hk:
            raise TensorValueError(f"enable_gqa: query heads ({hq}) must be a multiple of the key/value heads ({hk}, "
                                   f"{v.shape[-3]})")
        k, v = k.repeat_interleave(hq // hk, -3), v.repeat_interleave(hq // hk, -3)
    length, src = q.shape[-2], k.shape[-2]
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = q.matmul(k.transpose(-1, -2)) * sc
    if is_causal:
        rows = Tensor.arange(length, device=q.device).reshape(length, 1)
        cols = Tensor.arange(src, device=q.device).reshape(1, src)
        scores = (cols <= rows).where(scores, -math.inf)
    elif attn_mask is not None:
        if attn_mask.dtype is dtypes.bool:
            scores = attn_mask.where(scores, -math.inf)
        else:
            scores = scores + attn_mask.cast(scores.dtype)
    weights = softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p, True)
    return weights.matmul(v.cast(weights.dtype))

"""Convolutions (1-d to 3-d) and transposed convolutions, as broadcast multiplies over `windows` (or, for
large stride-1 convolutions, over the flattened padded input)."""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import cast

from tgcore.dtype import least_upper_dtype
from tgcore.errors import TensorValueError
from tgcore.helpers import ceildiv, round_up
from tgcore.nn.functional.common import IntOrTuple, _check_spatial, _pad_last, _tuple, windows
from tgcore.tensor import Tensor
from tgcore.tensor_autograd import with_gradient

Pad = tuple[int, int]


# ------------------------------------------------------------------------------------------ convolution
def _conv_padding(padding: IntOrTuple | str | list[Pad], nd: int, kernel: tuple[int, ...],
                  dilation: tuple[int, ...], stride: tuple[int, ...]) -> list[tuple[int, int]]:
    """(before, after) per spatial axis; 'same' puts the extra element of an odd total after (like torch)."""
    if isinstance(padding, list) and all(isinstance(p, tuple) for p in padding):  # (pairs already: internal calls)
        return [(int(before), int(after)) for before, after in cast(list[Pad], padding)]
    padding = cast(IntOrTuple | str, padding)
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


def _batched(x: Tensor, weight: Tensor, nd: int, name: str, weight_axes: str) -> tuple[Tensor, bool]:
    """``x`` with a batch axis, and whether it came without one, once ``x`` has ``nd`` spatial axes and ``weight``
    the ``nd + 2`` axes (``weight_axes``, kernel...) of an ``nd``-d convolution's weight."""
    _check_spatial(x, nd, name)
    if weight.ndim != nd + 2:
        raise TensorValueError(f"{name}: weight must have {nd + 2} dimensions ({weight_axes}, kernel...), got "
                               f"{weight.shape}")
    unbatched = x.ndim == nd + 1
    return (x.unsqueeze(0) if unbatched else x), unbatched

def _conv(x: Tensor, weight: Tensor, bias: Tensor | None, stride: IntOrTuple, padding: IntOrTuple | str | list[Pad],
          dilation: IntOrTuple, groups: int, nd: int, name: str) -> Tensor:
    """The convolutions' common body; ``padding`` may also be a list of (before, after) per spatial axis, negative
    amounts cropping (the adjoint convolutions pad that way)."""
    x, unbatched = _batched(x, weight, nd, name, "out, in/groups")
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
    if _flat_windows_pay(x.shape, pads, cout, kernel, st, dl):
        out = _conv_flat(x, weight, groups, kernel, dl, tuple(pads))
    else:
        win = windows(_pad_last(x, pads), kernel, st, dl)  # (N, Cin, O..., K...)
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


def _flat_windows_pay(shape: tuple[int, ...], pads: Sequence[Pad], cout: int, kernel: tuple[int, ...],
                      stride: tuple[int, ...], dilation: tuple[int, ...]) -> bool:
    """Whether ``_conv_flat`` is worth its padded copy for an input of ``shape`` (N, Cin, S...) padded by ``pads``:
    stride 1, and enough multiply-adds."""
    out = _conv_out(_padded_extents(shape[2:], pads), kernel, dilation)
    if any(s != 1 for s in stride) or min(out) < 1:
        return False
    return 2 * shape[0] * shape[1] * cout * math.prod(kernel) * math.prod(out) >= FLAT_CONV_MIN_FLOPS


def _padded_extents(spatial: Sequence[int], pads: Sequence[Pad]) -> tuple[int, ...]:
    """The spatial extents of an input padded by ``pads`` (negative amounts crop)."""
    return tuple(s + before + after for s, (before, after) in zip(spatial, pads, strict=True))



def _conv_flat(x: Tensor, weight: Tensor, groups: int, kernel: tuple[int, ...], dilation: tuple[int, ...],
               pads: tuple[Pad, ...]) -> Tensor:
    """A stride-1 convolution of ``x`` (N, Cin, S...) padded by ``pads`` over its flattened positions (see
    ``_flat_windows``): the taps of each output channel are a matrix product's rows, the flattened positions its
    columns. Its gradients are convolutions of the same form (``_conv_flat_grad``), not the chain rule through the
    window views (which would sum a materialized copy of the windows)."""
    nd = len(kernel)
    n = x.shape[0]
    cout, cin_g = weight.shape[:2]
    crop = [(min(before, 0), min(after, 0)) for before, after in pads]
    if any(before or after for before, after in crop):  # negative amounts: a crop first, then only zeros added
        x = _pad_last(x, crop)
        pads = tuple((max(before, 0), max(after, 0)) for before, after in pads)
    win, out_sp, grid = _flat_windows(x, pads, kernel, dilation, FLAT_POSITIONS_MULTIPLE)
    computed = win.shape[-1]
    win = win.reshape((n, groups, 1, cin_g) + kernel + (computed,))
    w = weight.reshape((1, groups, cout // groups, cin_g) + kernel + (1,))
    out = (win * w).sum(tuple(range(3, 4 + nd)))  # (N, G, Cout/G, computed)
    # computed on the padded grid (its columns are the kernel's contiguous axis), then the valid part cut out: realized
    # as it is, the product stores only that part (``Kernelizer.cropped_reduction``); a consumer reads through the crop
    positions = out_sp[0] * math.prod(grid[1:])
    out = out.contiguous().reshape((n, cout, computed)).shrink((None, None, (0, positions)))
    out = out.reshape((n, cout, out_sp[0]) + grid[1:])
    out = out.shrink([None, None, None] + [(0, o) for o in out_sp[1:]])
    return with_gradient(out, (x, weight), _flat_conv_rule(pads, dilation))


@functools.cache
def _flat_conv_rule(pads: tuple[Pad, ...], dilation: tuple[int, ...]) -> Callable[..., tuple[Tensor, Tensor]]:
    """The gradient rule of ``_conv_flat`` for one padding and dilation: one function per pair (the rule is part of
    the graph node, so the same convolution twice makes the same graph)."""
    def rule(g: Tensor, out: Tensor, x: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
        return _conv_flat_grad(g, x, weight, pads, dilation)
    return rule


def _flat_windows(x: Tensor, pads: Sequence[Pad], kernel: tuple[int, ...], dilation: tuple[int, ...],
                  multiple: int = 1) -> tuple[Tensor, tuple[int, ...], tuple[int, ...]]:
    """The windows of a stride-1 convolution of the input ``x`` (N, Cin, S...) padded by ``pads`` (no negative
    amounts) over its flattened positions, (N, Cin, K1..Kn, positions), the output extents and the extents of the
    grid the positions run over. ``x`` is padded once onto that grid (``_grid_pads``: each row's zeros after it
    also serve as the next row's before it) and made contiguous; output position ``p`` (row-major over (O1, G2, ...,
    Gn)) reads ``flat[p + sum_i k_i * d_i * S_i]`` (S_i: the grid's row strides), so every tap is the same
    contiguous run shifted, a view. The positions past each row's valid outputs are computed and cut off, and so
    are the positions past the last row up to a ``multiple`` of positions (zero rows after the last one are
    padded on for them to read)."""
    nd = len(kernel)
    n, cin = x.shape[:2]
    out_sp = _conv_out(_padded_extents(x.shape[2:], pads), kernel, dilation)
    grid_pads = _grid_pads(pads, kernel, dilation)
    grid = _padded_extents(x.shape[2:], grid_pads)
    strides = [math.prod(grid[i + 1:]) for i in range(nd)]
    positions = round_up(out_sp[0] * strides[0], multiple)  # output positions on the grid: O1 x G2 x ... x Gn
    reach = sum((k - 1) * d * s for k, d, s in zip(kernel, dilation, strides, strict=True))
    slack_rows = max(0, ceildiv(positions + reach - math.prod(grid), strides[0]))  # read by the cut-off positions
    (before, after), rest = grid_pads[0], grid_pads[1:]
    x = _pad_last(x, [(before, after + slack_rows)] + rest)
    win = x.contiguous().reshape((n, cin, math.prod(x.shape[2:])))
    for i, (k, d, s) in enumerate(zip(kernel, dilation, strides, strict=True)):  # (..., L) -> (..., k, L')
        win = _taps(win, k, d * s, positions if i == nd - 1 else None)
    return win, out_sp, grid


def _grid_pads(pads: Sequence[Pad], kernel: tuple[int, ...], dilation: tuple[int, ...]) -> list[Pad]:
    """The padding that puts the input on the flat grid: ``pads``, except that the last axis gets only the zeros
    after each row that the next row's zeros before it do not already give. A tap past a row's end reads on into
    the next row's first columns, which are zeros as long as the row has at least ``after`` zeros between its data
    and the next row's; and a row must hold the ``W + before + after - d*(k-1)`` output columns. So rows of
    ``W + max(before, after, before + after - d*(k-1))``: a 3x3 convolution padded by 1 computes 57 columns per
    row of 56 outputs where its padded rows have 58 (2% fewer products and a smaller padded copy)."""
    (before, after), k, d = pads[-1], kernel[-1], dilation[-1]
    zeros = max(before, after, before + after - d * (k - 1))
    return [*pads[:-1], (before, zeros - before)]


def _taps(x: Tensor, k: int, step: int, keep: int | None) -> Tensor:
    """The ``k`` taps ``step`` apart of the last axis as views, a new axis before it: ``out[..., j, p] = x[..., p +
    j*step]`` for the ``keep`` first positions ``p`` (None: every one the last tap reaches). The row is repeated k
    times end to end and read again with a row ``step`` longer, so row ``j`` starts ``j*step`` later."""
    pre, length = x.shape[:-1], x.shape[-1]
    keep = length - step * (k - 1) if keep is None else keep
    rest = [None] * len(pre)
    if k == 1:
        return x.reshape(pre + (1, length)).shrink(rest + [None, (0, keep)])
    rows = x.reshape(pre + (1, length)).expand(pre + (k, length)).reshape(pre + (k * length,))
    rows = rows.pad(rest + [(0, k * step)]).reshape(pre + (k, length + step))
    return rows.shrink(rest + [None, (0, keep)])


def _conv_flat_grad(g: Tensor, x: Tensor, weight: Tensor, pads: tuple[Pad, ...],
                    dilation: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Gradients of ``_conv_flat`` for the output gradient ``g``. The input's is the transposed convolution, for the
    input's own positions only: ``g`` padded by the kernel's reach less the forward padding (cropped where that is
    negative), convolved with the flipped kernel, channels swapped (the flat form again). The weight's is a matrix
    product over the batch and the positions of the padded input's windows (rows: input channel and tap) with ``g``
    on the padded grid (zeros past each row's outputs) transposed to (positions, output channels), so the output
    channels are contiguous vector columns (the register tile of ``gemmplan.gemm_opts``, its positions in K blocks)
    and no lanes are summed across."""
    kernel = weight.shape[2:]
    nd = len(kernel)
    n = x.shape[0]
    cout, cin_g = weight.shape[:2]
    groups = x.shape[1] // cin_g
    reach = [d * (k - 1) for k, d in zip(kernel, dilation, strict=True)]
    g_pads = [(r - before, r - after) for r, (before, after) in zip(reach, pads, strict=True)]
    dx = _conv(g, _flipped_transpose(weight, groups, nd), None, 1, g_pads, dilation, groups, nd, "conv gradient")
    win, out_sp, grid = _flat_windows(x, pads, kernel, dilation, FLAT_POSITIONS_MULTIPLE)  # (the forward's copy)
    g_grid = _pad_last(g, [(0, p - o) for p, o in zip(grid[1:], out_sp[1:], strict=True)])
    positions = out_sp[0] * math.prod(grid[1:])
    win = win.shrink([None] * (win.ndim - 1) + [(0, positions)])
    g_t = g_grid.reshape((n, groups, cout // groups, positions)).transpose(-1, -2).contiguous()
    g_t = g_t.reshape((n, groups, 1) + (1,) * nd + (positions, cout // groups))
    win = win.reshape((n, groups, cin_g) + kernel + (positions, 1))
    # (G, Cin/G, K..., Cout/G) stored as computed (whole vectors of output channels), then put in the weight's
    # order by a copy of the small result: the product storing into that order wrote lane by lane, once per K block
    dw = (win * g_t).sum((0, 3 + nd)).contiguous()
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
    x, unbatched = _batched(x, weight, nd, name, "in, out/groups")
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
    out = _conv(x, _flipped_transpose(weight, groups, nd), bias, 1, pads, dl, groups, nd, name)  # (< 0: crops)
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

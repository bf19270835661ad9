"""Shared pieces of the functional modules: argument helpers, reductions of losses, and `windows` (sliding
windows over spatial axes as views, the "im2col by views" convolutions and pools build on)."""
from __future__ import annotations

from collections.abc import Sequence

from tgcore.dtype import DType, dtypes, least_upper_float
from tgcore.errors import TensorValueError
from tgcore.tensor import Tensor

IntOrTuple = int | Sequence[int]
Pads = list[tuple[int, int] | None]  # (before, after) per axis, None for axes left alone
NARROW_FLOATS = (dtypes.float16, dtypes.bfloat16)


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

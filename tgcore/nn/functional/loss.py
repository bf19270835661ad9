"""Losses with torch's reductions: negative log likelihood, cross entropy, binary cross entropy, MSE, L1."""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.errors import TensorValueError
from tgcore.nn.functional.common import _reduce_out
from tgcore.nn.functional.norm import log_softmax
from tgcore.tensor import Tensor

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

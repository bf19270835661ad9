"""Softmax and normalizations: `softmax`, `log_softmax`, `normalize`, `layer_norm`, `rms_norm`, `batch_norm`
(narrow floats computed in float32)."""
from __future__ import annotations

from tgcore.dtype import dtypes, least_upper_float
from tgcore.errors import TensorValueError
from tgcore.nn.functional.common import IntOrTuple, _compute_dtype
from tgcore.tensor import Tensor

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

"""Layers: plain objects holding parameter tensors, called on a tensor (``layer(x)``).

In:  sizes and options named like torch.nn's; parameters are created on ``device`` with torch's default
     initialisation (uniform in +-1/sqrt(fan_in) for Linear and Conv2d, N(0, 1) for Embedding, ones and
     zeros for norms), drawn from the Tensor RNG.
Out: lazy tensors (`tgcore.nn.functional`). Parameters are created with ``requires_grad=True`` (like torch), so
     ``loss.backward()`` fills their ``.grad``. Attribute names match torch's state dicts (``weight``, ``bias``,
     ``running_mean``, ...), so `tgcore.nn.state.get_state_dict` gives the same keys as ``module.state_dict()``
     and `get_parameters` finds everything an optimizer needs.

There is no Module base class: `get_state_dict` walks attributes, lists and dicts. Layers whose behaviour
differs between training and evaluation (BatchNorm, Dropout) have a ``training`` flag.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from tgcore.dtype import DType, dtypes
from tgcore.nn import functional as F
from tgcore.nn.functional.common import _tuple
from tgcore.nn.functional.conv import _conv
from tgcore.tensor import Tensor

__all__ = ["BatchNorm", "BatchNorm1d", "BatchNorm2d", "Conv1d", "Conv2d", "ConvTranspose2d", "Dropout", "Embedding",
           "LayerNorm", "Linear", "RMSNorm"]


def _param(t: Tensor) -> Tensor:
    """``t`` in a buffer of its own (so optimizers update it in place with ``assign``), wanting gradients."""
    return t.contiguous().realize().requires_grad_(True)


def _uniform(shape: tuple[int, ...], bound: float, dtype: DType | None, device: str | None) -> Tensor:
    return _param(Tensor.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device))


def _filled(shape: tuple[int, ...], value: float, dtype: DType | str | None, device: str | None) -> Tensor:
    return _param(Tensor.full(shape, value, dtype=dtype or dtypes.default_float, device=device))


def _state(shape: tuple[int, ...], value: float, dtype: DType | str | None, device: str | None) -> Tensor:
    """A buffer that is not a parameter (``requires_grad=False``: optimizers leave it out)."""
    t = Tensor.full(shape, value, dtype=dtype or dtypes.default_float, device=device).contiguous().realize()
    return t.requires_grad_(False)


class Linear:
    """y = x @ weight.T + bias; weight (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: str | None = None,
                 dtype: DType | None = None) -> None:
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        self.bias = _uniform((out_features,), bound, dtype, device) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class _ConvNd:
    nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int |
                 Sequence[int] = 1, padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1,
                 groups: int = 1, bias: bool = True, device: str | None = None, dtype: DType | None = None) -> None:
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must divide in_channels ({in_channels}) and out_channels "
                             f"({out_channels})")
        self.kernel_size = _tuple(kernel_size, self.nd, "kernel_size")
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * math.prod(self.kernel_size)
        bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = _uniform((out_channels, in_channels // groups) + self.kernel_size, bound, dtype, device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return _conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups, self.nd,
                       f"Conv{self.nd}d")


class Conv1d(_ConvNd):
    """1-d convolution over (N, C, L); weight (out, in/groups, k)."""

    nd = 1


class Conv2d(_ConvNd):
    """2-d convolution over (N, C, H, W); weight (out, in/groups, kh, kw)."""

    nd = 2


class ConvTranspose2d:
    """Transposed 2-d convolution; weight (in, out/groups, kh, kw) like torch."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 output_padding: int | Sequence[int] = 0, groups: int = 1, bias: bool = True,
                 dilation: int | Sequence[int] = 1, device: str | None = None, dtype: DType | None = None) -> None:
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must divide in_channels ({in_channels}) and out_channels "
                             f"({out_channels})")
        self.kernel_size = _tuple(kernel_size, 2, "kernel_size")
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation
        fan_in = out_channels // groups * math.prod(self.kernel_size)  # torch's fan_in for this weight layout
        bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
        self.weight = _uniform((in_channels, out_channels // groups) + self.kernel_size, bound, dtype, device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)


class Embedding:
    """A lookup table: integer indices -> rows of weight (num_embeddings, embedding_dim)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, device: str | None = None,
                 dtype: DType | None = None) -> None:
        self.weight = _param(Tensor.randn(num_embeddings, embedding_dim, dtype=dtype, device=device))

    def __call__(self, idx: Tensor) -> Tensor:
        return F.embedding(idx, self.weight)


def _shape(normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    return (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)


class LayerNorm:
    """Normalize over the last axes to zero mean and unit variance, then scale and shift."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device: str | None = None, dtype: DType | None = None) -> None:
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.weight = _filled(self.normalized_shape, 1.0, dtype, device) if elementwise_affine else None
        self.bias = _filled(self.normalized_shape, 0.0, dtype, device) if elementwise_affine and bias else None

    def __call__(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm:
    """Scale the last axes by 1/sqrt(mean of squares + eps), then by weight."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device: str | None = None, dtype: DType | None = None) -> None:
        self.normalized_shape, self.eps = _shape(normalized_shape), eps
        self.weight = _filled(self.normalized_shape, 1.0, dtype, device) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class BatchNorm:
    """Per-channel (axis 1) normalization by batch statistics while ``training``, by running ones otherwise.

    The running statistics are updated in place (``Tensor.assign``) by every training-mode call, so a jitted
    train step keeps them current. They are created with ``requires_grad=False``, so optimizers given
    ``get_parameters(model)`` leave them alone.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: str | None = None, dtype: DType | None = None) -> None:
        self.eps, self.momentum, self.training = eps, momentum, True
        self.weight = _filled((num_features,), 1.0, dtype, device) if affine else None
        self.bias = _filled((num_features,), 0.0, dtype, device) if affine else None
        self.running_mean: Tensor | None = None
        self.running_var: Tensor | None = None
        self.num_batches_tracked: Tensor | None = None
        if track_running_stats:
            self.running_mean = _state((num_features,), 0.0, dtype, device)
            self.running_var = _state((num_features,), 1.0, dtype, device)
            self.num_batches_tracked = _state((), 0, dtypes.int64, device)

    def __call__(self, x: Tensor) -> Tensor:
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        batch_stats = self.training or self.running_mean is None
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, batch_stats,
                            self.momentum, self.eps)


BatchNorm1d = BatchNorm
BatchNorm2d = BatchNorm


class Dropout:
    """Zero elements with probability p while ``training`` (scaling the rest by 1/(1-p))."""

    def __init__(self, p: float = 0.5) -> None:
        self.p, self.training = p, True

    def __call__(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

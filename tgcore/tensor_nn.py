"""Neural-network functions as Tensor methods: thin forwards to `tgcore.nn.functional`, where each is written once.

A mixin of `tgcore.tensor.Tensor`. Names and arguments follow torch's functions with the tensor as the first
argument (``x.conv2d(w)`` is ``F.conv2d(x, w)``); tinygrad-style names (``binary_crossentropy``,
``sparse_categorical_crossentropy``) are there too. ``conv2d`` / ``conv_transpose2d`` pick 1-, 2- or 3-d from
the weight's rank.

In:  tensors, as in `tgcore.nn.functional`.
Out: lazy tensors.
"""
# mypy: disable-error-code="misc"
# (methods annotate ``self: Tensor``: a mixin is only ever used as a base of Tensor)
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tgcore.errors import TensorValueError

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

IntOrTuple = int | Sequence[int]


def _functional() -> Any:
    from tgcore.nn import functional  # (functional imports Tensor: imported when first used)
    return functional


def _by_rank(weight: Tensor, names: tuple[str, str, str]) -> Any:
    if weight.ndim not in (3, 4, 5):
        raise TensorValueError(f"the weight must have 3, 4 or 5 dimensions (a 1-, 2- or 3-d convolution), got "
                               f"{weight.shape}")
    return getattr(_functional(), names[weight.ndim - 3])


class NNMixin:
    __slots__ = ()

    # ---------------------------------------------------------------- softmax family
    def softmax(self: Tensor, dim: int = -1) -> Tensor:
        return _functional().softmax(self, dim)

    def log_softmax(self: Tensor, dim: int = -1) -> Tensor:
        return _functional().log_softmax(self, dim)

    def softmin(self: Tensor, dim: int = -1) -> Tensor:
        return _functional().softmax(-self, dim)

    # ---------------------------------------------------------------- losses
    def cross_entropy(self: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                      reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
        return _functional().cross_entropy(self, target, weight, ignore_index, reduction, label_smoothing)

    def nll_loss(self: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                 reduction: str = "mean") -> Tensor:
        return _functional().nll_loss(self, target, weight, ignore_index, reduction)

    def binary_crossentropy(self: Tensor, target: Tensor, weight: Tensor | None = None,
                            reduction: str = "mean") -> Tensor:
        """Binary cross entropy of probabilities (torch's ``binary_cross_entropy``)."""
        return _functional().binary_cross_entropy(self, target, weight, reduction)

    def binary_crossentropy_logits(self: Tensor, target: Tensor, weight: Tensor | None = None,
                                   reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
        """Binary cross entropy of logits (torch's ``binary_cross_entropy_with_logits``)."""
        return _functional().binary_cross_entropy_with_logits(self, target, weight, reduction, pos_weight)

    def sparse_categorical_crossentropy(self: Tensor, target: Tensor, ignore_index: int = -1,
                                        label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
        """Cross entropy of logits with the classes on the last axis against integer targets of the other axes."""
        c = self.shape[-1] if self.ndim else 0
        return _functional().cross_entropy(self.reshape(-1, c), target.reshape(-1), None, ignore_index, reduction,
                                           label_smoothing).reshape(target.shape if reduction == "none" else ())

    # ---------------------------------------------------------------- attention, linear, normalization
    def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                     dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                     enable_gqa: bool = False) -> Tensor:
        return _functional().scaled_dot_product_attention(self, key, value, attn_mask, dropout_p, is_causal, scale,
                                                          enable_gqa)

    def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        return _functional().linear(self, weight, bias)

    def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over ``axis`` (no weight or bias)."""
        mean = self.mean(axis, keepdim=True)
        centered = self - mean
        return centered * ((centered * centered).mean(axis, keepdim=True) + eps).rsqrt()

    def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        return _functional().normalize(self, p, dim, eps)

    def dropout(self: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
        return _functional().dropout(self, p, training)

    # ---------------------------------------------------------------- convolution and pooling
    def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
               padding: IntOrTuple | str = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
        """Convolution of this (N, C, *spatial) tensor; 1-, 2- or 3-d by the weight's rank."""
        return _by_rank(weight, ("conv1d", "conv2d", "conv3d"))(self, weight, bias, stride, padding, dilation, groups)

    def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                         padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                         dilation: IntOrTuple = 1) -> Tensor:
        """Transposed convolution; 1-, 2- or 3-d by the weight's rank."""
        fn = _by_rank(weight, ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"))
        return fn(self, weight, bias, stride, padding, output_padding, groups, dilation)

    def max_pool2d(self: Tensor, kernel_size: IntOrTuple = (2, 2), stride: IntOrTuple | None = None,
                   padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
                   return_indices: bool = False) -> Any:
        return _functional().max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices)

    def max_pool3d(self: Tensor, kernel_size: IntOrTuple = (2, 2, 2), stride: IntOrTuple | None = None,
                   padding: IntOrTuple = 0, dilation: IntOrTuple = 1, ceil_mode: bool = False,
                   return_indices: bool = False) -> Any:
        return _functional().max_pool3d(self, kernel_size, stride, padding, dilation, ceil_mode, return_indices)

    def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: IntOrTuple = (2, 2), stride: IntOrTuple | None = None,
                     padding: IntOrTuple = 0, output_size: Sequence[int] | None = None) -> Tensor:
        return _functional().max_unpool2d(self, indices, kernel_size, stride, padding, output_size)

    def avg_pool2d(self: Tensor, kernel_size: IntOrTuple = (2, 2), stride: IntOrTuple | None = None,
                   padding: IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None, dilation: IntOrTuple = 1) -> Tensor:
        return _functional().avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                        divisor_override, dilation)

    def avg_pool3d(self: Tensor, kernel_size: IntOrTuple = (2, 2, 2), stride: IntOrTuple | None = None,
                   padding: IntOrTuple = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None) -> Tensor:
        return _functional().avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                        divisor_override)

    # ---------------------------------------------------------------- resampling
    def interpolate(self: Tensor, size: IntOrTuple | None = None, scale_factor: float | Sequence[float] | None = None,
                    mode: str = "nearest", align_corners: bool | None = None) -> Tensor:
        return _functional().interpolate(self, size, scale_factor, mode, align_corners)

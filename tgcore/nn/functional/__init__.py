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

Each idea has its module: `common` (argument helpers, `windows`), `linear` (matmul, linear, embedding, dropout),
`conv`, `pool`, `resample` (interpolate), `norm` (softmax and normalizations), `loss`, `attention`. This
package re-exports their public functions, so ``tgcore.nn.functional.conv2d`` is the name to use.
"""
from __future__ import annotations

from tgcore.nn.functional.attention import scaled_dot_product_attention
from tgcore.nn.functional.common import windows
from tgcore.nn.functional.conv import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
from tgcore.nn.functional.linear import dropout, embedding, linear, matmul
from tgcore.nn.functional.loss import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    l1_loss,
    mse_loss,
    nll_loss,
)
from tgcore.nn.functional.norm import batch_norm, layer_norm, log_softmax, normalize, rms_norm, softmax
from tgcore.nn.functional.pool import (
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    max_unpool2d,
)
from tgcore.nn.functional.resample import interpolate

__all__ = ["avg_pool1d", "avg_pool2d", "avg_pool3d", "batch_norm", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "cross_entropy", "dropout", "embedding", "interpolate", "l1_loss", "layer_norm",
           "linear", "log_softmax", "matmul", "max_pool1d", "max_pool2d", "max_pool3d", "max_unpool2d", "mse_loss",
           "nll_loss", "normalize", "rms_norm", "scaled_dot_product_attention", "softmax", "windows"]

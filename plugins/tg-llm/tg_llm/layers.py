"""The transformer's building blocks on tensors: RMSNorm, softmax's numerators, soft-caps, linear layers, rotary
embeddings."""
from __future__ import annotations

from typing import Any

import numpy as np


def rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """x / sqrt(mean(x^2 over the last axis) + eps) * weight."""
    from tgcore.nn.functional import rms_norm as norm
    return norm(x, x.shape[-1], weight, eps)


EXP_FLOOR = -80.0  # exp(-80) = 1.8e-35, still a normal float32


def masked_exp(x: Any, mask: Any) -> Any:
    """Softmax's numerators over the last axis under an additive ``mask`` of 0 (attend) and -inf (do not):
    ``exp(x + mask - max(x + mask))``. A masked entry is exactly 0 without an exponential of -inf: on x86 the
    exponential of anything below float32's normal range (-87) goes through subnormal numbers, ~3x slower for the
    whole vector. An allowed entry's exponent is clamped at ``EXP_FLOOR``: 1.8e-35 for anything smaller, beside the
    largest entry's 1 in the sum nothing a float32 can tell apart."""
    shifted = x + mask
    exponent = (shifted - shifted.max(-1, keepdim=True)).maximum(EXP_FLOOR)
    return (mask == 0).where(exponent.exp(), 0.0)


def softcap(x: Any, cap: float) -> Any:
    """cap * tanh(x / cap): x squashed smoothly into (-cap, cap)."""
    return (x * (1.0 / cap)).tanh() * cap


def _matmul_t(x: Any, w: Any) -> Any:
    """x @ w.T for a (out, in) weight: a ``tg_gguf.intdot.QuantizedMatrix`` (integer dot products where its type and
    the device take them, else its dequantization fused in) or a float tensor."""
    return w.matmul_t(x) if hasattr(w, "matmul_t") else x @ w.T


def linear(x: Any, w: Any, b: Any = None) -> Any:
    """x @ w.T (+ b) for a (out, in) weight (see ``_matmul_t``)."""
    out = _matmul_t(x, w)
    return out if b is None else out + b


def linear_parts(x: Any, ws: list[Any], b: Any = None) -> Any:
    """x @ (the row-wise concatenation of the weights ``ws``).T (+ b): one product per weight, outputs side by
    side (weights of different quantization types cannot share one dequantizing matmul)."""
    from tgcore.tensor import Tensor
    # each product a buffer of its own: a cat of two lazy reductions fuses into one kernel that redoes the work
    out = _matmul_t(x, ws[0]) if len(ws) == 1 else Tensor.cat(*[_matmul_t(x, w).contiguous() for w in ws], dim=-1)
    return out if b is None else out + b


def rope(x: Any, cos: Any, sin: Any, rope_dims: int, interleaved: bool) -> Any:
    """Rotate the first ``rope_dims`` dims of each head of x (T, heads, head_dim); cos/sin are (T, rope_dims/2)."""
    from tgcore.tensor import Tensor
    t, heads, hd = x.shape
    half = rope_dims // 2
    c, s = cos.reshape(t, 1, half), sin.reshape(t, 1, half)
    rot = x.shrink((None, None, (0, rope_dims))) if rope_dims < hd else x
    if interleaved:  # pairs (2j, 2j+1)
        # x * (c, c) + (each pair swapped) * (-s, s): whole vectors (a swap of neighbours is one in-register permute,
        # the signs a constant vector), where the cat of a pair's two results was built lane by lane (SmolLM2's
        # 8-row key cache writes: 564 -> 149 instructions). Lane by lane the products are a * c and b * s (even),
        # a * s and b * c (odd) as before; summed as "fused + rounded", the C compiler contracts the same product of
        # each lane into a multiply-add as it did in ``a*c - b*s`` and ``a*s + b*c``: the same bits (checked on logits).
        # (The X86 renderer contracted the old form otherwise: there the rotation now rounds as C's, its logits move
        # by rounding, batch-invariant as before.)
        swapped = rot.reshape(t, heads, half, 2).flip(-1).reshape(t, heads, rope_dims)
        c, s = c.reshape(t, 1, half, 1), s.reshape(t, 1, half, 1)
        cos2 = c.expand(t, 1, half, 2).reshape(t, 1, rope_dims)
        even = (Tensor.arange(rope_dims, device=x.device) % 2 == 0).reshape(1, 1, rope_dims)
        sin2 = s.expand(t, 1, half, 2).reshape(t, 1, rope_dims) * even.where(-1.0, 1.0)
        fused = even.where(rot, swapped) * even.where(cos2, sin2)
        rounded = even.where(swapped, rot) * even.where(sin2, cos2)
        out = fused + rounded
    else:  # pairs (j, j + half)
        a, b = rot.shrink((None, None, (0, half))), rot.shrink((None, None, (half, rope_dims)))
        out = Tensor.cat(a * c - b * s, b * c + a * s, dim=-1)
    if rope_dims < hd:
        out = Tensor.cat(out, x.shrink((None, None, (rope_dims, hd))), dim=-1)
    return out


def rope_frequencies(rope_dims: int, base: float, scale: float = 1.0,
                     freq_factors: np.ndarray | None = None) -> np.ndarray:
    """The angular frequency of each rotation pair (float64, rope_dims/2 of them): ``base ** (-2j/rope_dims)``,
    divided by the per-pair ``freq_factors`` (Llama 3's ``rope_freqs``, Phi-3's LongRoPE factors) and by
    the linear ``scale``."""
    j = np.arange(rope_dims // 2, dtype=np.float64)
    freqs = base ** (-2.0 * j / rope_dims)
    if freq_factors is not None:
        freqs = freqs / freq_factors.astype(np.float64)
    return freqs / scale

"""`scaled_dot_product_attention` (masks, causal, dropout, grouped-query heads)."""
from __future__ import annotations

import math

from tgcore.dtype import dtypes
from tgcore.errors import TensorValueError
from tgcore.nn.functional.linear import dropout
from tgcore.nn.functional.norm import softmax
from tgcore.tensor import Tensor

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

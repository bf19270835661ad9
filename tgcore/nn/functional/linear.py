"""Linear maps and their companions: `matmul`, `linear`, `embedding`, `dropout`."""
from __future__ import annotations

from tgcore.dtype import dtypes, least_upper_dtype
from tgcore.errors import TensorValueError
from tgcore.tensor import Tensor

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

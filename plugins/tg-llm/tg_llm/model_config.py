"""A model's hyperparameters read from GGUF metadata, checked against its tensors' shapes (``config_from_metadata``).

The errors a bad file raises live here too: ``ModelError`` (and ``UnsupportedArchitectureError``), and
``ContextLengthError`` for calls past the KV cache.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tg_llm.architectures import ARCHITECTURES, SUPPORTED_ARCHITECTURES, Architecture

ROPE_SCALING_TYPES = ("none", "linear")  # {arch}.rope.scaling.type values this module applies


class ModelError(ValueError):
    """The GGUF file does not describe a model this module can run."""


class UnsupportedArchitectureError(ModelError):
    """``general.architecture`` names an architecture this module does not implement."""


class ContextLengthError(ValueError):
    """A call would go past the KV cache's ``max_context`` positions."""


@dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters read from GGUF metadata (``arch`` holds the architecture's fixed facts)."""
    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    dim: int
    head_dim: int
    ffn_dim: int
    vocab_size: int
    context_length: int  # what the model was trained for
    max_context: int     # what the KV cache holds: min(context_length, the max_context asked for)
    norm_eps: float
    rope_base: float
    rope_dims: int
    rope_interleaved: bool
    rope_scale: float = 1.0  # linear scaling: positions are divided by this
    tied_embeddings: bool = False
    name: str = ""
    arch: Architecture = field(default=ARCHITECTURES["llama"], compare=False)
    sliding_layers: tuple[bool, ...] = ()  # per layer: attends over a sliding window (else all earlier keys)
    sliding_window: int = 0                # keys within this many positions (the query's own included)
    swa_rope_base: float = 10000.0         # rope base of the sliding layers
    swa_rope_scale: float = 1.0            # their linear rope scaling
    attention_scale: float = 1.0           # scores are q.k times this
    attn_softcap: float = 0.0              # scores -> cap * tanh(scores / cap) (0: off)
    final_softcap: float = 0.0             # logits -> cap * tanh(logits / cap) (0: off)
    rope_original_context: int = 0         # LongRoPE: the long factors apply past this context
    rope_attn_factor: float = 1.0          # LongRoPE: cos and sin are scaled by this
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _meta(md: dict[str, Any], key: str, default: Any = None, required: bool = False) -> Any:
    if key in md:
        return md[key]
    if required:
        raise ModelError(f"GGUF metadata has no {key!r}")
    return default


def _int(md: dict[str, Any], key: str, default: Any = None, required: bool = False) -> int:
    """An integer metadata value (the first of a per-layer array, as some files write head counts)."""
    value = _meta(md, key, default, required)
    if isinstance(value, list):
        if not value:
            raise ModelError(f"GGUF metadata {key!r} is an empty array")
        value = value[0]
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ModelError(f"GGUF metadata {key!r} = {value!r} is not an integer") from None


def _positive(key: str, value: int) -> int:
    if value < 1:
        raise ModelError(f"GGUF metadata {key!r} = {value} must be >= 1")
    return value


def sliding_layers(arch: Architecture, md: dict[str, Any], n_layers: int) -> tuple[tuple[bool, ...], int]:
    """Which layers use a sliding window, and the window (0 when none does)."""
    key = f"{arch.name}.attention.sliding_window"
    window = _int(md, key, arch.swa_window or 0) if arch.swa_pattern else 0
    if window <= 0:
        return (False,) * n_layers, 0
    pattern_key = f"{arch.name}.attention.sliding_window_pattern"
    pattern = _meta(md, pattern_key, arch.swa_pattern)
    if isinstance(pattern, list):  # one flag per layer
        if len(pattern) != n_layers:
            raise ModelError(f"GGUF metadata {pattern_key!r} has {len(pattern)} entries for {n_layers} layers")
        return tuple(bool(p) for p in pattern), window
    n = int(pattern)
    if n < 0:
        raise ModelError(f"GGUF metadata {pattern_key!r} = {n} must be >= 0")
    # layer i slides unless it is the last of each group of n (n = 0: every layer slides)
    return tuple(n == 0 or i % n < n - 1 for i in range(n_layers)), window


def config_from_metadata(md: dict[str, Any], tensor_names: Sequence[str], max_context: int = 4096) -> ModelConfig:
    """A ``ModelConfig`` from GGUF metadata; unsupported architectures raise ``UnsupportedArchitectureError``,
    inconsistent metadata ``ModelError`` naming the key."""
    name = md.get("general.architecture")
    if name not in ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"architecture {name!r} is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    arch = ARCHITECTURES[name]
    if max_context < 1:
        raise ValueError(f"max_context must be >= 1, got {max_context}")
    n_heads = _positive(f"{name}.attention.head_count", _int(md, f"{name}.attention.head_count", required=True))
    n_kv = _positive(f"{name}.attention.head_count_kv", _int(md, f"{name}.attention.head_count_kv", n_heads))
    dim = _positive(f"{name}.embedding_length", _int(md, f"{name}.embedding_length", required=True))
    if f"{name}.attention.key_length" not in md and dim % n_heads:
        raise ModelError(f"{name}.embedding_length {dim} is not a multiple of {name}.attention.head_count "
                         f"{n_heads} (and there is no {name}.attention.key_length)")
    head_dim = _positive(f"{name}.attention.key_length", _int(md, f"{name}.attention.key_length", dim // n_heads))
    value_dim = _int(md, f"{name}.attention.value_length", head_dim)
    if value_dim != head_dim:
        raise ModelError(f"key length {head_dim} != value length {value_dim} is not supported")
    if n_heads % n_kv:
        raise ModelError(f"{n_heads} query heads ({name}.attention.head_count) are not a multiple of {n_kv} "
                         f"key/value heads ({name}.attention.head_count_kv)")
    n_layers = _positive(f"{name}.block_count", _int(md, f"{name}.block_count", required=True))
    ctx = _int(md, f"{name}.context_length", 2048)
    vocab = _meta(md, f"{name}.vocab_size")
    if vocab is None:
        tokens = md.get("tokenizer.ggml.tokens")
        vocab = len(tokens) if tokens is not None else None
    rope_dims = _int(md, f"{name}.rope.dimension_count", head_dim)
    if rope_dims % 2 or not 0 < rope_dims <= head_dim:
        raise ModelError(f"{name}.rope.dimension_count {rope_dims} must be even and in 2..{head_dim} (head size)")
    scaling = str(_meta(md, f"{name}.rope.scaling.type", "none"))
    factor = float(_meta(md, f"{name}.rope.scaling.factor", 1.0) or 1.0)
    if scaling not in ROPE_SCALING_TYPES and (factor != 1.0 or scaling not in ("yarn", "longrope")):
        raise ModelError(f"rope scaling {scaling!r} is not supported ({name}.rope.scaling.type; "
                         f"supported: {', '.join(ROPE_SCALING_TYPES)})")
    rope_scale = factor if scaling == "linear" else 1.0
    swa, window = sliding_layers(arch, md, n_layers)
    attn_softcap = float(_meta(md, f"{name}.attn_logit_softcapping", arch.attn_softcap or 0.0)) \
        if arch.attn_softcap is not None else 0.0
    final_softcap = float(_meta(md, f"{name}.final_logit_softcapping", arch.final_softcap or 0.0)) \
        if arch.final_softcap is not None else 0.0
    rope_base = float(_meta(md, f"{name}.rope.freq_base", 10000.0))
    query_dim = dim / n_heads if n_layers in arch.wide_query_scale_layers else head_dim
    return ModelConfig(
        architecture=name, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_kv, dim=dim, head_dim=head_dim, ffn_dim=_int(md, f"{name}.feed_forward_length", required=True),
        vocab_size=int(vocab) if vocab is not None else 0, context_length=ctx, max_context=min(ctx, max_context),
        norm_eps=float(_meta(md, f"{name}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_base=rope_base, rope_dims=rope_dims, rope_interleaved=arch.rope_interleaved, rope_scale=rope_scale,
        tied_embeddings="output.weight" not in tensor_names, name=str(md.get("general.name", "")), arch=arch,
        sliding_layers=swa, sliding_window=window,
        swa_rope_base=float(_meta(md, f"{name}.rope.freq_base_swa",
                                  arch.swa_rope_base if arch.swa_rope_base is not None else rope_base)),
        swa_rope_scale=rope_scale if arch.swa_rope_scaled else 1.0, attention_scale=1.0 / math.sqrt(query_dim),
        attn_softcap=attn_softcap, final_softcap=final_softcap,
        rope_original_context=_int(md, f"{name}.rope.scaling.original_context_length", ctx),
        rope_attn_factor=float(_meta(md, f"{name}.rope.scaling.attn_factor", 1.0)))


def expected_shapes(cfg: ModelConfig, vocab: int) -> dict[str, tuple[int, ...]]:
    """The (rows, columns) GGUF shape of every tensor the architecture may have, by name."""
    d, q, kv, ffn = cfg.dim, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim, cfg.ffn_dim
    expected: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (vocab, d), "output.weight": (vocab, d), "output_norm.weight": (d,),
        "rope_freqs.weight": (cfg.rope_dims // 2,), "rope_factors_long.weight": (cfg.rope_dims // 2,),
        "rope_factors_short.weight": (cfg.rope_dims // 2,)}
    per_layer = {
        "attn_norm.weight": (d,), "attn_q.weight": (q, d), "attn_k.weight": (kv, d), "attn_v.weight": (kv, d),
        "attn_qkv.weight": (q + 2 * kv, d), "attn_output.weight": (d, q), "attn_q.bias": (q,),
        "attn_k.bias": (kv,), "attn_v.bias": (kv,), "attn_q_norm.weight": (cfg.head_dim,),
        "attn_k_norm.weight": (cfg.head_dim,), "ffn_norm.weight": (d,), "ffn_gate.weight": (ffn, d),
        "ffn_up.weight": (2 * ffn if cfg.arch.fused_gate_up else ffn, d), "ffn_down.weight": (d, ffn),
        "post_attention_norm.weight": (d,), "post_ffw_norm.weight": (d,),
    }
    for i in range(cfg.n_layers):
        expected.update({f"blk.{i}.{name}": shape for name, shape in per_layer.items()})
    return expected


def check_tensor_shapes(cfg: ModelConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """Raise ``ModelError`` naming the first weight whose shape ((rows, columns) as GGUF stores it) disagrees
    with the metadata. Absent tensors are left to the loader, which names the required ones."""
    vocab = shapes.get("token_embd.weight", (0,))[0]
    for name, shape in expected_shapes(cfg, vocab).items():
        if name in shapes and shapes[name] != shape:
            raise ModelError(f"tensor {name!r} has shape {shapes[name]}; the metadata implies {shape}")

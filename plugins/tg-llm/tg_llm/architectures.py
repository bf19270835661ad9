"""What each supported GGUF architecture means, as one record per architecture.

In:  ``general.architecture`` of a GGUF file.
Out: an ``Architecture``: which tensors a layer has, how the file lays out q/k for the rotation, which
     norms, activation, scalings, soft-caps and sliding-window layers the network uses. ``model.py``
     reads these fields and never the architecture's name.

The facts follow how llama.cpp's ``convert_hf_to_gguf.py`` writes each architecture and how llama.cpp
runs it:
- ``llama``/``mistral`` Wq/Wk rows are permuted per head by the converter, so rotation pairs are
  adjacent dims; every other architecture keeps Hugging Face's row order (pairs j, j + d/2).
- Gemma's RMSNorm multiplies by ``1 + w``; the converter stores ``w + 1``, so the file's norm weights
  are used as they are (a plain RMSNorm), for every ``*norm.weight`` including Gemma 3's q/k norms.
- Sliding-window layers: layer i slides unless ``i % pattern == pattern - 1`` (Gemma 2: every other
  layer starting with layer 0; Gemma 3: five of every six). ``{arch}.attention.sliding_window_pattern``
  overrides the pattern; Gemma 3 files without ``attention.sliding_window`` have no sliding layers.
  Gemma 3's sliding layers rotate with base 10000 (``rope.freq_base_swa`` overrides) and without the
  global layers' rope scaling; Gemma 2's use the global base.
- Queries are scaled by ``1/sqrt(head_dim)``; the Gemma 27B models (recognised by their layer count, as
  llama.cpp does) by ``1/sqrt(dim / heads)``.
- Phi-3 stores Wq, Wk, Wv as one ``attn_qkv`` tensor and Wgate, Wup as one ``ffn_up`` of 2*ffn rows
  (gate first); its LongRoPE factors are the ``rope_factors_long``/``rope_factors_short`` tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Activation = Literal["silu", "gelu_tanh"]


@dataclass(frozen=True)
class Architecture:
    """The per-architecture facts the model code needs (GGUF names without the ``blk.N.`` prefix)."""
    name: str
    rope_interleaved: bool                  # rotation pairs (2j, 2j+1): q/k rows permuted by the converter
    qkv: tuple[str, ...] = ("attn_q", "attn_k", "attn_v")  # one fused tensor, or q, k, v
    gate_up: tuple[str, ...] = ("ffn_gate", "ffn_up")      # one fused tensor (gate rows first), or gate, up
    qk_norm: bool = False                   # per-head RMSNorm of q and k before the rotation
    post_norms: bool = False                # RMSNorm of the attention and FFN outputs before each residual add
    embedding_scale: bool = False           # token embeddings times sqrt(dim)
    activation: Activation = "silu"         # of the gate, times up
    attn_softcap: float | None = None       # default of {arch}.attn_logit_softcapping (None: not used)
    final_softcap: float | None = None      # default of {arch}.final_logit_softcapping (None: not used, 0: off)
    swa_pattern: int = 0                    # sliding-window layer pattern (0: no sliding layers)
    swa_window: int | None = None           # default of {arch}.attention.sliding_window (None: required)
    swa_rope_base: float | None = None      # default rope base of the sliding layers (None: the global one)
    swa_rope_scaled: bool = True            # sliding layers use the global rope scaling too
    wide_query_scale_layers: tuple[int, ...] = ()  # layer counts whose queries scale by 1/sqrt(dim/heads)
    long_rope: bool = False                 # LongRoPE factor tensors may be present

    @property
    def fused_qkv(self) -> bool:
        return len(self.qkv) == 1

    @property
    def fused_gate_up(self) -> bool:
        return len(self.gate_up) == 1


ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (
    Architecture("llama", rope_interleaved=True),
    Architecture("mistral", rope_interleaved=True),
    Architecture("qwen2", rope_interleaved=False),
    Architecture("qwen3", rope_interleaved=False, qk_norm=True),
    Architecture("gemma2", rope_interleaved=False, post_norms=True, embedding_scale=True, activation="gelu_tanh",
                 attn_softcap=50.0, final_softcap=30.0, swa_pattern=2, swa_window=4096,
                 wide_query_scale_layers=(46,)),
    Architecture("gemma3", rope_interleaved=False, qk_norm=True, post_norms=True, embedding_scale=True,
                 activation="gelu_tanh", final_softcap=0.0, swa_pattern=6, swa_rope_base=10000.0,
                 swa_rope_scaled=False, wide_query_scale_layers=(62,)),
    Architecture("phi3", rope_interleaved=False, qkv=("attn_qkv",), gate_up=("ffn_up",), long_rope=True),
)}

SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)

"""tg_llm.model against Hugging Face ``transformers`` loading the same synthetic GGUF file.

An independent implementation: transformers reads the file with its own GGUF loader (its own metadata
mapping, q/k un-permutation for llama, ``norm - 1`` for Gemma's folded RMSNorm weights, its own reading of
fused Phi-3 tensors) and runs its own model classes (Gemma 3's interleaved local/global layers, Gemma 2's
soft-caps, Phi-3's LongRoPE). Where transformers' GGUF loader ignores a field llama.cpp's converter writes
(Llama 3 / LongRoPE scaling, linear scaling of Gemma 3's global layers, Gemma 2's soft-caps), the test
passes the Hugging Face config value the converter would have written it from, as ``config.json`` would.

The files (``tiny_gguf``) use the quant types real files use: Q4_K with Q6_K ``ffn_down`` and Q8_0 ``attn_v``
(like Q4_K_M), Q6_K, Q8_0, dims multiples of 256 for the K-quants, and head sizes transformers' defaults
assume where its GGUF loader reads none (Gemma's ``query_pre_attn_scalar`` 256, Qwen 3's ``head_dim`` 128).

Checks, position by position: logits of a prompt longer than the sliding window (prefill, then one token at a
time through the jitted decode step), same argmax; for Gemma 3 a sequence long enough for the sliding layers'
ring buffer to wrap, and a rewind into positions the ring has overwritten; token ids against
``AutoTokenizer``. Tolerance: both run float32 on the same dequantized weights, so they differ only in
summation order: about 2^-24 relative per operation over dot products of <= 512 terms and a few layers, so
the bound is relative to the logits' size: 1e-5 of the largest logit (measured: up to ~4e-6 of it).

``mistral`` is not among them: llama.cpp writes Mistral models as ``llama`` (transformers and gguf-py know
no ``mistral`` GGUF architecture); tg-llm's ``mistral`` record equals ``llama``'s and has the numpy reference.

Missing ``transformers``/``torch``/``accelerate``/``gguf``: skipped locally, a failure when ``CI=true``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llm_testutil import require, require_gguf
from tiny_gguf import GEMMA_ARCHS, Llama3Rope, LongRope, TinySpec, write_tiny_gguf

TOLERANCE = 1e-5  # max abs logit difference, relative to the largest logit (when that is > 1)
VOCAB = 300
K_MIX = (("ffn_down.weight", "Q6_K"), ("attn_v.weight", "Q8_0"))  # what Q4_K_M files keep in better types


def llama3_rope(spec: TinySpec, w: dict[str, np.ndarray]) -> dict[str, Any]:
    cfg = spec.llama3_rope
    assert cfg is not None
    return {"rope_parameters": {"rope_type": "llama3", "rope_theta": spec.rope_base, "factor": cfg.factor,
                                "low_freq_factor": cfg.low_freq_factor, "high_freq_factor": cfg.high_freq_factor,
                                "original_max_position_embeddings": cfg.original_context}}


def gemma3_rope(spec: TinySpec, w: dict[str, np.ndarray]) -> dict[str, Any]:
    return {"rope_parameters": {
        "full_attention": {"rope_type": "linear", "factor": spec.linear_rope, "rope_theta": spec.rope_base},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}


def gemma2_softcaps(spec: TinySpec, w: dict[str, np.ndarray]) -> dict[str, Any]:
    assert spec.softcaps is not None
    return {"attn_logit_softcapping": spec.softcaps[0], "final_logit_softcapping": spec.softcaps[1]}


def phi3_longrope(spec: TinySpec, w: dict[str, np.ndarray]) -> dict[str, Any]:
    assert spec.long_rope is not None
    original = spec.long_rope.original_context
    return {"rope_parameters": {"rope_type": "longrope", "rope_theta": spec.rope_base,
                                "original_max_position_embeddings": original,
                                "long_factor": w["rope_factors_long.weight"].tolist(),
                                "short_factor": w["rope_factors_short.weight"].tolist()},
            "original_max_position_embeddings": original, "pad_token_id": VOCAB - 1}


# name: (spec, Hugging Face config values its GGUF loader does not read, tg-llm max_context)
VARIANTS: dict[str, tuple[TinySpec, Any, int]] = {
    "llama-q4_k_m-llama3rope": (TinySpec(
        "llama", dim=256, n_heads=4, n_kv_heads=2, head_dim=64, ffn_dim=512, tied=False, quant="Q4_K",
        quant_overrides=K_MIX, rope_base=500000.0, llama3_rope=Llama3Rope(factor=8.0, original_context=16),
        seed=20), llama3_rope, 128),
    "llama-q6_k-mqa": (TinySpec("llama", dim=256, n_heads=4, n_kv_heads=1, head_dim=64, ffn_dim=256, tied=False,
                                quant="Q6_K", seed=21), None, 128),
    "qwen2-q8_0-bias": (TinySpec("qwen2", dim=256, n_heads=4, n_kv_heads=2, head_dim=64, ffn_dim=512,
                                 qkv_bias=True, quant="Q8_0", rope_base=1e6, seed=22), None, 128),
    "qwen3-q4_k_m": (TinySpec("qwen3", dim=256, n_heads=2, n_kv_heads=1, head_dim=128, ffn_dim=512, qk_norm=True,
                              quant="Q4_K", quant_overrides=K_MIX, rope_base=1e6, eps=1e-6, seed=23), None, 128),
    "gemma2-q8_0-softcap": (TinySpec(
        "gemma2", n_layers=2, dim=256, n_heads=2, n_kv_heads=1, head_dim=256, ffn_dim=512, quant="Q8_0",
        sliding_window=8, softcaps=(20.0, 10.0), eps=1e-6, seed=24), gemma2_softcaps, 128),
    "gemma3-q4_k_m-sliding": (TinySpec(
        "gemma3", n_layers=6, dim=256, n_heads=2, n_kv_heads=1, head_dim=256, ffn_dim=512, quant="Q4_K",
        quant_overrides=K_MIX, sliding_window=8, rope_base=1e6, linear_rope=8.0, eps=1e-6, context=512,
        seed=25), gemma3_rope, 512),
    "phi3-q8_0-longrope-short": (TinySpec(
        "phi3", dim=256, n_heads=4, n_kv_heads=4, head_dim=64, ffn_dim=512, tied=False, quant="Q8_0",
        long_rope=LongRope(original_context=64), seed=26), phi3_longrope, 64),
    "phi3-q8_0-longrope-long": (TinySpec(
        "phi3", dim=256, n_heads=4, n_kv_heads=4, head_dim=64, ffn_dim=512, tied=False, quant="Q8_0",
        long_rope=LongRope(original_context=32), seed=27), phi3_longrope, 128),
}
N_PREFILL = 12
N_TOKENS = {"phi3-q8_0-longrope-long": 48}  # past the original context: Hugging Face switches to the long factors
N_DEFAULT = 40


def transformers_modules() -> tuple[Any, Any]:
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded
    require("accelerate", "pip install accelerate")
    torch = require("torch", "pip install torch")
    transformers = require("transformers", "pip install 'transformers==5.25.0'")
    return torch, transformers


class Built:
    """One variant's file, tg-llm model, and the transformers model of the same file."""

    def __init__(self, name: str, folder: Path) -> None:
        from tg_llm.model import Model
        require_gguf()
        torch, transformers = transformers_modules()
        spec, hf_config, max_context = VARIANTS[name]
        self.spec, self.folder, self.torch = spec, folder, torch
        self.weights = write_tiny_gguf(spec, folder / "model.gguf", vocab=VOCAB)
        overrides = hf_config(spec, self.weights) if hf_config is not None else {}
        transformers.logging.set_verbosity_error()
        self.hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(folder), gguf_file="model.gguf", dtype=torch.float32, **overrides).eval()
        # every product in float, like the reference (the integer path quantizes activations: test_int_dot.py), and
        # a float32 KV cache like transformers' (the float16 one against a reference that rounds its keys and values
        # alike: test_model.py, test_architectures.py)
        self.model = Model.from_gguf(folder / "model.gguf", device="CPU", max_context=max_context, int_dot=False,
                                     kv_dtype="float32")
        n = N_TOKENS.get(name, N_DEFAULT)
        self.ids = [int(t) for t in np.random.default_rng(spec.seed).integers(0, VOCAB, n)]

    def reference(self, ids: list[int]) -> np.ndarray:
        with self.torch.no_grad():
            return self.hf(self.torch.tensor([ids])).logits[0].double().numpy()


_BUILT: dict[str, Built] = {}


@pytest.fixture(params=list(VARIANTS))
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    name = request.param
    if name not in _BUILT:
        _BUILT[name] = Built(name, tmp_path_factory.mktemp(name))
    return _BUILT[name]


def assert_close(got: np.ndarray, want: np.ndarray, first_position: int = 0) -> None:
    assert got.shape == want.shape
    diff = np.abs(got.astype(np.float64) - want).max(-1)
    worst = int(diff.argmax())
    scale = float(np.abs(want).max())
    assert diff.max() < TOLERANCE * max(1.0, scale), \
        f"max abs diff {diff.max():.3g} at position {first_position + worst} (logits up to {scale:.3g})"
    same = got.argmax(-1) == want.argmax(-1)
    assert same.all(), f"argmax differs at positions {(np.flatnonzero(~same) + first_position).tolist()}"


def test_prefill_and_decode_match_transformers(built: Built):
    """Prefill N_PREFILL tokens, then one token at a time: every position's logits, past the sliding window."""
    want = built.reference(built.ids)
    model = built.model
    model.reset()
    rows = [model.forward(built.ids[:N_PREFILL], 0)]
    rows += [model.forward([t], i) for i, t in enumerate(built.ids[N_PREFILL:], N_PREFILL)]
    assert_close(np.concatenate(rows), want)


def test_token_ids_match_auto_tokenizer(built: Built):
    """Byte-level BPE (``gpt2``) files with Llama 3's (``llama-bpe``), Qwen's (``qwen2``) and GPT-2's
    pre-tokenizer (the vocabulary has digit and contraction merges, so the three split differently), and
    Gemma's SentencePiece vocabulary (byte fallback, BOS added once, turn markers as user-defined tokens):
    the same ids as ``AutoTokenizer`` on the same file."""
    from tg_llm.tokenizer import Tokenizer
    _, transformers = transformers_modules()
    hf = transformers.AutoTokenizer.from_pretrained(str(built.folder), gguf_file="model.gguf")
    ours = Tokenizer.from_gguf(built.folder / "model.gguf")
    special = "<start_of_turn>user\nhi<end_of_turn>\n" if built.spec.arch in GEMMA_ARCHS else "hi<|endoftext|>"
    for text in ("the quick brown fox jumps over the lazy dog", " two  spaces\nand a newline!", "héllo wörld 123",
                 "it's 2024 and 1234567 dogs, DON'T", special):
        assert ours.encode(text, parse_special=True) == hf.encode(text), text


@pytest.mark.parametrize("built", ["gemma3-q4_k_m-sliding"], indirect=True)
def test_sliding_ring_buffer_wraps_and_rewinds(built: Built):
    """A 300-token sequence: the sliding layers' ring (window 8 + one prefill chunk of 256 = 264 slots) wraps
    inside a prefill (positions 250..269, padded to 32 rows) and again during the decode; then a rewind to
    position 20, whose window the ring has overwritten, is recomputed."""
    from tg_llm.model import PREFILL_CHUNK
    ids = [int(t) for t in np.random.default_rng(5).integers(0, VOCAB, 300)]
    want = built.reference(ids)
    model = built.model
    model.reset()
    assert model.kinds[1].cache_len == 8 + PREFILL_CHUNK < len(ids)
    rows = [model.forward(ids[:250], 0), model.forward(ids[250:270], 250)]
    rows += [model.forward([t], i) for i, t in enumerate(ids[270:], 270)]
    assert_close(np.concatenate(rows), want)
    rewound = model.forward(ids[20:24], 20)
    assert_close(rewound, want[20:24], first_position=20)
    assert model.cached_tokens == ids[:24]

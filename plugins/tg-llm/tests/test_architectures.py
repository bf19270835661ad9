"""tg_llm.model on tiny random GGUF files of each llama-family architecture, against a numpy reference.

The files come from ``tiny_gguf`` (gguf-py's writer): ``llama`` with a separate ``output.weight`` and
Llama 3 rope scaling (``rope_freqs.weight``), ``llama`` Q8_0 with linear rope scaling and tied output,
``qwen2`` with q/k/v biases and partial rotary dims, ``qwen3`` with per-head q/k RMSNorms and a head
size that is not dim/heads, ``mistral`` Q4_0 with sliding-window metadata, and ``qwen2`` with mixed
weight types (Q4_0, Q8_0 attn_v/ffn_down, one F16 attn_k, F16 embedding, F32 output).

The reference is a float64 numpy forward pass written from the Hugging Face model definitions
(rotate-half rotary embeddings on Hugging Face-ordered q/k rows, repeat_kv GQA, SwiGLU, RMSNorm, the
Llama 3 / linear frequency rules). It takes its hyperparameters from the ``TinySpec`` (the "HF config")
and its weights from the file through ``gguf.GGUFReader`` + ``gguf.quants.dequantize``, undoing the
llama/mistral q/k row permutation. So it checks tg_llm's choice of rotation layout per architecture,
its reading of the metadata and its fused dequantization, not the same formulas twice.

Missing ``gguf``: skipped locally, a failure when ``CI=true``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_model import require_gguf
from tiny_gguf import PERMUTED_QK_ARCHS, Llama3Rope, TinySpec, unpermute_qk, write_tiny_gguf

PROMPT = "the quick brown fox jumps over the lazy dog and the fish swim"
N_PROMPT = 12
N_GREEDY = 5
TOLERANCE = 1e-3  # max abs logit difference (float32 model vs float64 reference on the same weights)

VARIANTS: dict[str, TinySpec] = {
    "llama-untied-llama3rope": TinySpec("llama", n_layers=3, tied=False, rope_base=500000.0,
                                        llama3_rope=Llama3Rope(factor=8.0, original_context=64)),
    "llama-q8_0-linearrope": TinySpec("llama", linear_rope=4.0, quant="Q8_0", seed=1),
    "qwen2-bias-partialrope": TinySpec("qwen2", qkv_bias=True, rope_dims=8, rope_base=1e6, seed=2),
    "qwen3-qknorm-headdim32": TinySpec("qwen3", qk_norm=True, head_dim=32, tied=False, rope_base=1e6, seed=3),
    "mistral-q4_0-slidingwindow": TinySpec("mistral", tied=False, quant="Q4_0", sliding_window=4096, seed=4),
    "qwen2-mixedquant": TinySpec("qwen2", qkv_bias=True, tied=False, quant="Q4_0", seed=5, quant_overrides=(
        ("attn_v.weight", "Q8_0"), ("ffn_down.weight", "Q8_0"), ("blk.1.attn_k.weight", "F16"),
        ("token_embd.weight", "F16"), ("output.weight", "F32"))),
}


# ---------------------------------------------------------------------------------------------- reference

def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def inverse_frequencies(spec: TinySpec) -> np.ndarray:
    """Hugging Face's rotary inverse frequencies, with its ``linear`` or ``llama3`` scaling rule."""
    d = spec.rotary_dims
    inv = 1.0 / spec.rope_base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if spec.linear_rope is not None:
        inv = inv / spec.linear_rope
    if spec.llama3_rope is not None:
        cfg = spec.llama3_rope
        wavelen = 2 * math.pi / inv
        smooth = (cfg.original_context / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor -
                                                                             cfg.low_freq_factor)
        smoothed = (1 - smooth) * inv / cfg.factor + smooth * inv
        low, high = cfg.original_context / cfg.low_freq_factor, cfg.original_context / cfg.high_freq_factor
        inv = np.where(wavelen < high, inv, np.where(wavelen > low, inv / cfg.factor, smoothed))
    return inv


def rotate_half_rope(x: np.ndarray, positions: np.ndarray, spec: TinySpec) -> np.ndarray:
    """Hugging Face rotary embedding on the first rotary_dims dims of x (T, heads, head_dim)."""
    d = spec.rotary_dims
    angles = positions[:, None] * inverse_frequencies(spec)[None, :]
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, None, :]
    rot, rest = x[..., :d], x[..., d:]
    rotated = np.concatenate([-rot[..., d // 2:], rot[..., :d // 2]], -1)
    return np.concatenate([rot * cos + rotated * sin, rest], -1)


class Reference:
    """A float64 numpy forward pass of ``spec`` with the weights stored in the GGUF file at ``path``."""

    def __init__(self, spec: TinySpec, path: Path) -> None:
        gguf = require_gguf()
        self.spec = spec
        self.w: dict[str, np.ndarray] = {}
        for t in gguf.GGUFReader(path).tensors:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
            if spec.arch in PERMUTED_QK_ARCHS and t.name.endswith(("attn_q.weight", "attn_k.weight")):
                w = unpermute_qk(w, spec.n_heads if "attn_q" in t.name else spec.n_kv_heads)
            self.w[t.name] = w

    def _attention(self, i: int, h: np.ndarray, positions: np.ndarray) -> np.ndarray:
        s, w, t = self.spec, self.w, h.shape[0]
        p = f"blk.{i}."

        def project(name: str, heads: int) -> np.ndarray:
            out = h @ w[p + name + ".weight"].T
            if p + name + ".bias" in w:
                out = out + w[p + name + ".bias"]
            return out.reshape(t, heads, s.head_dim)

        q, k, v = project("attn_q", s.n_heads), project("attn_k", s.n_kv_heads), project("attn_v", s.n_kv_heads)
        if s.qk_norm:
            q = rms_norm(q, w[p + "attn_q_norm.weight"], s.eps)
            k = rms_norm(k, w[p + "attn_k_norm.weight"], s.eps)
        q, k = rotate_half_rope(q, positions, s), rotate_half_rope(k, positions, s)
        group = s.n_heads // s.n_kv_heads  # query head j reads key/value head j // group
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(s.head_dim)
        scores = np.where(np.tril(np.ones((t, t), dtype=bool))[None], scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(t, s.n_heads * s.head_dim)
        return attn @ w[p + "attn_output.weight"].T

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Logits (float64) of every position of ``tokens``, starting at position 0."""
        s, w = self.spec, self.w
        x = w["token_embd.weight"][tokens]
        positions = np.arange(len(tokens), dtype=np.float64)
        for i in range(s.n_layers):
            p = f"blk.{i}."
            x = x + self._attention(i, rms_norm(x, w[p + "attn_norm.weight"], s.eps), positions)
            h = rms_norm(x, w[p + "ffn_norm.weight"], s.eps)
            gate, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
        out = w.get("output.weight", w["token_embd.weight"])
        return rms_norm(x, w["output_norm.weight"], s.eps) @ out.T

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        tokens = list(prompt)
        for _ in range(n):
            tokens.append(int(np.argmax(self.forward(tokens)[-1])))
        return tokens[len(prompt):]


# ---------------------------------------------------------------------------------------------- fixtures

class Built:
    """One variant written to disk, with its HF weights, reference, tg_llm model and tokenizer."""

    def __init__(self, spec: TinySpec, path: Path) -> None:
        from tg_llm.model import Model
        from tg_llm.tokenizer import Tokenizer
        self.spec, self.path = spec, path
        self.hf_weights = write_tiny_gguf(spec, path)
        self.reference = Reference(spec, path)
        self.model = Model.from_gguf(path, device="CPU")
        self.tokenizer = Tokenizer.from_gguf(path)
        ids = self.tokenizer.encode(PROMPT)
        assert len(ids) >= N_PROMPT
        self.prompt = ids[:N_PROMPT]
        self.expected = self.reference.forward(self.prompt)


_BUILT: dict[str, Built] = {}


@pytest.fixture(params=list(VARIANTS))
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    name = request.param
    if name not in _BUILT:
        require_gguf()
        _BUILT[name] = Built(VARIANTS[name], tmp_path_factory.mktemp("tiny") / f"{name}.gguf")
    return _BUILT[name]


def max_diff(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max())


# ---------------------------------------------------------------------------------------------- tests

def test_reference_reads_back_the_written_weights(built: Built):
    """The reference's weights (dequantized, q/k rows back in HF order) are the ones written."""
    atol = {"F32": 0.0, "F16": 4e-3, "Q8_0": 0.02, "Q4_0": 0.3}
    for name, hf in built.hf_weights.items():
        kind = built.spec.quant_of(name) if hf.ndim == 2 else "F32"
        np.testing.assert_allclose(built.reference.w[name], hf, atol=atol[kind], rtol=0, err_msg=name)


def test_config_follows_metadata(built: Built):
    s, cfg = built.spec, built.model.config
    assert (cfg.architecture, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.dim, cfg.head_dim, cfg.ffn_dim) == \
        (s.arch, s.n_layers, s.n_heads, s.n_kv_heads, s.dim, s.head_dim, s.ffn_dim)
    assert (cfg.vocab_size, cfg.context_length, cfg.rope_base, cfg.rope_dims) == \
        (300, s.context, s.rope_base, s.rotary_dims)
    assert cfg.tied_embeddings == s.tied
    assert cfg.rope_scale == (s.linear_rope or 1.0)
    assert cfg.rope_interleaved == (s.arch in PERMUTED_QK_ARCHS)


def test_prefill_logits_match_reference(built: Built):
    model = built.model
    model.reset()
    got = model.forward(built.prompt, 0)
    assert got.shape == (N_PROMPT, 300) and got.dtype == np.float32
    diff = max_diff(got, built.expected)
    assert diff < TOLERANCE, f"max abs diff {diff}"


def test_decode_steps_match_reference(built: Built):
    """Prefill 5 tokens, then the other 7 one at a time through the jitted decode step and KV cache."""
    model = built.model
    model.reset()
    rows = [model.forward(built.prompt[:5], 0)]
    for i in range(5, N_PROMPT):
        rows.append(model.forward([built.prompt[i]], i))
    diff = max_diff(np.concatenate(rows), built.expected)
    assert diff < TOLERANCE, f"max abs diff {diff}"


@pytest.mark.parametrize("built", ["llama-untied-llama3rope", "qwen3-qknorm-headdim32"], indirect=True)
def test_long_sequence_across_decode_windows(built: Built):
    """Prefill at position 0, a second prefill at position 12 (a prompt extending the cache), then decode
    one token at a time up to position 80: decode attention windows of 32, 64 and 128 positions, and rotary
    angles where the Llama 3 low-frequency scaling matters."""
    ids = [int(t) for t in np.random.default_rng(7).integers(0, 300, 81)]
    expected = built.reference.forward(ids)
    model = built.model
    model.reset()
    rows = [model.forward(ids[:12], 0), model.forward(ids[12:20], 12)]
    rows += [model.forward([ids[i]], i) for i in range(20, len(ids))]
    got = np.concatenate(rows)
    diff = np.abs(got.astype(np.float64) - expected).max(-1)
    assert diff.max() < TOLERANCE, f"max abs diff {diff.max()} at position {int(diff.argmax())}"


def test_greedy_generation_matches_reference(built: Built):
    from tg_llm.generate import Generator
    expected = built.reference.greedy(built.prompt, N_GREEDY)
    gen = Generator(built.model, built.tokenizer)
    events = list(gen.generate(built.prompt, max_tokens=N_GREEDY, temperature=0, stop_ids=[]))
    assert [e.token_id for e in events] == expected
    assert "".join(e.text for e in events) == built.tokenizer.decode(expected)


# ---------------------------------------------------------------------------------------------- bad files

def load(spec: TinySpec, tmp_path: Path) -> Any:
    require_gguf()
    from tg_llm.model import Model
    path = tmp_path / f"{spec.arch}.gguf"
    write_tiny_gguf(spec, path)
    return Model.from_gguf(path, device="CPU")


@pytest.mark.parametrize("arch", ["gpt2", "falcon", "gemma"])
def test_unsupported_architecture_is_named(arch: str, tmp_path: Path):
    from tg_llm.model import UnsupportedArchitectureError
    with pytest.raises(UnsupportedArchitectureError, match=f"architecture '{arch}' is not supported.*llama"):
        load(TinySpec(arch), tmp_path)


@pytest.mark.parametrize("spec, tensor", [
    (TinySpec("llama").without("blk.1.ffn_up.weight"), "blk.1.ffn_up.weight"),
    (TinySpec("llama").without("blk.0.attn_q.weight"), "blk.0.attn_q.weight"),
    (TinySpec("mistral").without("output_norm.weight"), "output_norm.weight"),
    (TinySpec("qwen3", qk_norm=True).without("blk.1.attn_k_norm.weight"), "blk.1.attn_k_norm.weight"),
    (TinySpec("qwen2").without("token_embd.weight"), "token_embd.weight"),
])
def test_missing_tensor_is_named(spec: TinySpec, tensor: str, tmp_path: Path):
    from tg_llm.model import ModelError
    with pytest.raises(ModelError, match=f"no tensor '{tensor}'"):
        load(spec, tmp_path)


@pytest.mark.parametrize("spec, tensor", [
    (TinySpec("qwen2").with_wrong_shape("blk.1.attn_k.weight", (64, 64)), "blk.1.attn_k.weight"),
    (TinySpec("llama").with_wrong_shape("blk.0.ffn_down.weight", (64, 64)), "blk.0.ffn_down.weight"),
    (TinySpec("qwen3", qk_norm=True).with_wrong_shape("blk.0.attn_q_norm.weight", (32,)),
     "blk.0.attn_q_norm.weight"),
    (TinySpec("llama", tied=False).with_wrong_shape("output.weight", (300, 32)), "output.weight"),
])
def test_tensor_shape_disagreeing_with_metadata_is_named(spec: TinySpec, tensor: str, tmp_path: Path):
    from tg_llm.model import ModelError
    with pytest.raises(ModelError, match=f"tensor '{tensor}' has shape"):
        load(spec, tmp_path)


def test_unsupported_rope_scaling_is_named(tmp_path: Path):
    from tg_llm.model import ModelError
    with pytest.raises(ModelError, match="rope scaling 'yarn' is not supported"):
        load(TinySpec("llama", rope_scaling_type="yarn"), tmp_path)

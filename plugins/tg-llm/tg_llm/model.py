"""Decoder-only transformers of the llama family, read from a GGUF file, with a preallocated KV cache.

In:  a GGUF file whose ``general.architecture`` is ``llama``, ``mistral``, ``qwen2`` or ``qwen3``.
Out: ``Model.forward(tokens, start_pos)`` -> float32 logits (numpy, one row per token).

What the model computes (per layer, pre-norm):

    h   = x + Wo · attention(rope(Wq · rmsnorm(x)), rope(Wk · rmsnorm(x)), Wv · rmsnorm(x))
    out = h + Wdown · (silu(Wgate · rmsnorm(h)) * (Wup · rmsnorm(h)))

with grouped-query attention (``n_kv_heads`` key/value heads shared by groups of query heads), the
q/k/v biases of ``qwen2`` and the per-head q/k RMSNorms of ``qwen3``; the logits are
``output.weight · rmsnorm(x)`` (``token_embd.weight`` when the file has no ``output.weight``).

Weights stay quantized on the device: each is tg-gguf's lazy dequantization of the raw bytes, which
fuses into the matmul that consumes it. Wq, Wk and Wv are stacked into one matrix at load time (their raw
bytes concatenated: quantized rows are whole blocks), so a layer runs one matrix-vector product for the
three (and one for Wgate and Wup); the keys' rotation is computed by the kernel that writes them into the
cache. The token embedding is looked up on the host (the rows of the quantized table for the given ids are
dequantized with numpy), so the device never holds a float copy of the vocabulary table.

Rotary embeddings. ``{arch}.rope.dimension_count`` dims of each head rotate, pair j with frequency
``freq_base ** (-2j / rope_dims)``. Which dims form pair j depends on how the file stores q/k:
GGUF ``llama``/``mistral`` files store Wq/Wk with the rows of each head permuted (row ``h*d + 2j + s``
holds Hugging Face row ``h*d + s*d/2 + j``), so the rotation pairs are adjacent dims (2j, 2j+1)
("interleaved"); ``qwen2``/``qwen3`` files keep Hugging Face's order, so pair j is (j, j + d/2)
("halves"). Both compute the same attention as the original model. Linear position scaling
(``rope.scaling.type = linear``) and per-frequency factors (the ``rope_freqs.weight`` tensor of Llama 3.1+)
are applied; YaRN is not supported (a clear error).

KV cache: per layer, keys and values of shape (n_kv_heads, max_context, head_dim) in float32, allocated
once for ``max_context = min(model context, max_context)`` positions. A call writes its tokens' keys
and values at ``start_pos ..`` with ``Tensor.assign`` into a shrink at a bound variable ``start_pos``,
so the kernels do not depend on the position. Token embeddings, rotary cos/sin rows and the additive
attention mask are computed on the host and passed in as tensors.

- Decode (one token): ``tgcore.jit`` of the whole step; after two warm-up calls every step replays the
  capture and compiles nothing. Attention reads the smallest power-of-two window of the cache (at least
  32 positions) that covers positions 0..pos, with the mask ``key position <= pos``: one capture per
  window size, so a new compile only when the context crosses a power of two, and a step reads cache in
  proportion to its position rather than to max_context.
- Prefill (several tokens): run eagerly (a capture would keep every intermediate buffer alive); the
  token count is padded to a power of two (the padding rows write cache positions that later tokens
  overwrite and that the mask hides until then) and attention reads a power-of-two window of the cache
  that covers the prompt, so prompts of many lengths share a few compiled kernel sets. From
  ``DENSE_MIN_TOKENS`` rows on, each weight is dequantized into a temporary float buffer and multiplied
  as a plain GEMM: the fused dequantizing matmul decodes the weight once per row.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
_HALVES_ROPE = ("qwen2", "qwen3")  # files that keep the Hugging Face (rotate-half) order of q/k rows
PREFILL_CHUNK = 256    # a longer prompt is prefilled in chunks of this many tokens (bounds the scratch memory)
DENSE_MIN_TOKENS = 4   # from this many rows on, a weight is dequantized once and multiplied as floats



DECODE_WINDOWS = 16  # decode captures kept: one per power-of-two attention window

class ModelError(ValueError):
    """The GGUF file does not describe a model this module can run."""


class UnsupportedArchitectureError(ModelError):
    """``general.architecture`` names an architecture this module does not implement."""


class ContextLengthError(ValueError):
    """A call would go past the KV cache's ``max_context`` positions."""


@dataclass(frozen=True)
class ModelConfig:
    """Hyperparameters read from GGUF metadata."""
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
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _meta(md: dict[str, Any], key: str, default: Any = None, required: bool = False) -> Any:
    if key in md:
        return md[key]
    if required:
        raise ModelError(f"GGUF metadata has no {key!r}")
    return default


def config_from_metadata(md: dict[str, Any], tensor_names: Sequence[str], max_context: int = 4096) -> ModelConfig:
    """A ``ModelConfig`` from GGUF metadata; unsupported architectures raise ``UnsupportedArchitectureError``."""
    arch = md.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    if max_context < 1:
        raise ValueError(f"max_context must be >= 1, got {max_context}")
    n_heads = int(_meta(md, f"{arch}.attention.head_count", required=True))
    n_kv = _meta(md, f"{arch}.attention.head_count_kv", n_heads)
    n_kv = int(n_kv[0] if isinstance(n_kv, list) else n_kv)
    dim = int(_meta(md, f"{arch}.embedding_length", required=True))
    head_dim = int(_meta(md, f"{arch}.attention.key_length", dim // n_heads))
    value_dim = int(_meta(md, f"{arch}.attention.value_length", head_dim))
    if value_dim != head_dim:
        raise ModelError(f"key length {head_dim} != value length {value_dim} is not supported")
    if n_heads % n_kv:
        raise ModelError(f"{n_heads} query heads are not a multiple of {n_kv} key/value heads")
    ctx = int(_meta(md, f"{arch}.context_length", 2048))
    vocab = _meta(md, f"{arch}.vocab_size")
    if vocab is None:
        tokens = md.get("tokenizer.ggml.tokens")
        vocab = len(tokens) if tokens is not None else None
    rope_dims = int(_meta(md, f"{arch}.rope.dimension_count", head_dim))
    scaling = _meta(md, f"{arch}.rope.scaling.type", "none")
    factor = float(_meta(md, f"{arch}.rope.scaling.factor", 1.0) or 1.0)
    if scaling not in ("none", "linear") and factor != 1.0:
        raise ModelError(f"rope scaling {scaling!r} is not supported (supported: none, linear)")
    ffn = _meta(md, f"{arch}.feed_forward_length", required=True)
    return ModelConfig(
        architecture=arch, n_layers=int(_meta(md, f"{arch}.block_count", required=True)), n_heads=n_heads,
        n_kv_heads=n_kv, dim=dim, head_dim=head_dim, ffn_dim=int(ffn[0] if isinstance(ffn, list) else ffn),
        vocab_size=int(vocab) if vocab is not None else 0, context_length=ctx, max_context=min(ctx, max_context),
        norm_eps=float(_meta(md, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_base=float(_meta(md, f"{arch}.rope.freq_base", 10000.0)), rope_dims=rope_dims,
        rope_interleaved=arch not in _HALVES_ROPE, rope_scale=factor if scaling == "linear" else 1.0,
        tied_embeddings="output.weight" not in tensor_names, name=str(md.get("general.name", "")))


def check_tensor_shapes(cfg: ModelConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """Raise ``ModelError`` naming the first weight whose shape ((rows, columns) as GGUF stores it) disagrees
    with the metadata. Absent tensors are left to the loader, which names the required ones."""
    d, q, kv = cfg.dim, cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    vocab = shapes.get("token_embd.weight", (0,))[0]
    expected = {"token_embd.weight": (vocab, d), "output.weight": (vocab, d), "output_norm.weight": (d,),
                "rope_freqs.weight": (cfg.rope_dims // 2,)}
    per_layer = {
        "attn_norm.weight": (d,), "attn_q.weight": (q, d), "attn_k.weight": (kv, d), "attn_v.weight": (kv, d),
        "attn_output.weight": (d, q), "attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,),
        "attn_q_norm.weight": (cfg.head_dim,), "attn_k_norm.weight": (cfg.head_dim,), "ffn_norm.weight": (d,),
        "ffn_gate.weight": (cfg.ffn_dim, d), "ffn_up.weight": (cfg.ffn_dim, d), "ffn_down.weight": (d, cfg.ffn_dim),
    }
    for i in range(cfg.n_layers):
        expected.update({f"blk.{i}.{name}": shape for name, shape in per_layer.items()})
    for name, shape in expected.items():
        if name in shapes and shapes[name] != shape:
            raise ModelError(f"tensor {name!r} has shape {shapes[name]}; the metadata implies {shape}")


# ---------------------------------------------------------------------------------------------- ops

def rms_norm(x: Any, weight: Any, eps: float) -> Any:
    """x / sqrt(mean(x^2 over the last axis) + eps) * weight."""
    return x * ((x * x).mean(-1, keepdim=True) + eps).rsqrt() * weight


def softmax(x: Any) -> Any:
    """Softmax over the last axis."""
    e = (x - x.max(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def linear(x: Any, w: Any, b: Any = None) -> Any:
    """x @ w.T (+ b) for a (out, in) weight (a quantized GGUF weight's dequantization fuses in here)."""
    out = x @ w.T
    return out if b is None else out + b


def rope(x: Any, cos: Any, sin: Any, rope_dims: int, interleaved: bool) -> Any:
    """Rotate the first ``rope_dims`` dims of each head of x (T, heads, head_dim); cos/sin are (T, rope_dims/2)."""
    from tgcore.tensor import Tensor
    t, heads, hd = x.shape
    half = rope_dims // 2
    c, s = cos.reshape(t, 1, half), sin.reshape(t, 1, half)
    rot = x.shrink((None, None, (0, rope_dims))) if rope_dims < hd else x
    if interleaved:  # pairs (2j, 2j+1)
        pairs = rot.reshape(t, heads, half, 2)
        a, b = pairs.shrink((None, None, None, (0, 1))), pairs.shrink((None, None, None, (1, 2)))
        c, s = c.reshape(t, 1, half, 1), s.reshape(t, 1, half, 1)
        out = Tensor.cat(a * c - b * s, a * s + b * c, dim=-1).reshape(t, heads, rope_dims)
    else:  # pairs (j, j + half)
        a, b = rot.shrink((None, None, (0, half))), rot.shrink((None, None, (half, rope_dims)))
        out = Tensor.cat(a * c - b * s, b * c + a * s, dim=-1)
    if rope_dims < hd:
        out = Tensor.cat(out, x.shrink((None, None, (rope_dims, hd))), dim=-1)
    return out


def rope_frequencies(cfg: ModelConfig, freq_factors: np.ndarray | None = None) -> np.ndarray:
    """The angular frequency of each rotation pair (float64, rope_dims/2 of them)."""
    j = np.arange(cfg.rope_dims // 2, dtype=np.float64)
    freqs = cfg.rope_base ** (-2.0 * j / cfg.rope_dims)
    if freq_factors is not None:
        freqs = freqs / freq_factors.astype(np.float64)
    return freqs / cfg.rope_scale


# ---------------------------------------------------------------------------------------------- model

@dataclass
class _Layer:
    attn_norm: Any
    wqkv: Any  # Wq, Wk and Wv stacked (rows q, then k, then v): one matrix-vector product for the three
    wo: Any
    bqkv: Any  # their biases stacked the same way (qwen2), or None
    q_norm: Any
    k_norm: Any
    ffn_norm: Any
    w_gate_up: Any  # Wgate and Wup stacked (rows gate, then up): one matrix-vector product for the two
    w_down: Any
    cache_k: Any
    cache_v: Any


class _Embedding:
    """Token embedding rows dequantized on the host from the file's raw (quantized) table."""

    def __init__(self, gf: Any, name: str, device: str) -> None:
        from tg_gguf.quants import DEQUANTIZERS
        if name not in gf.tensor_info:
            raise ModelError(f"model file has no tensor {name!r}")
        info = gf.tensor_info[name]
        self.vocab, self.dim = int(info.shape[0]), int(info.shape[1])
        self.type = info.type
        self.table: np.ndarray | None = None
        if info.type in DEQUANTIZERS:
            raw = np.frombuffer(gf.tensor_bytes(name), dtype=np.uint8)
            self.rows = raw.reshape(self.vocab, raw.size // self.vocab)
        else:  # no numpy dequantizer for this type: dequantize once on the device, keep a float table
            self.table = gf.tensors_as(device=device)[name].numpy()

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        idx = np.asarray(ids, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.vocab):
            raise ValueError(f"token ids must be in 0..{self.vocab - 1}")
        if self.table is not None:
            return np.ascontiguousarray(self.table[idx], dtype=np.float32)
        from tg_gguf.quants import dequantize_numpy
        return dequantize_numpy(self.type, self.rows[idx], (idx.size, self.dim))


class Model:
    """A llama-family decoder on one device. Build with ``Model.from_gguf``.

    ``forward(tokens, start_pos)`` runs ``tokens`` at positions ``start_pos ..`` (the cache must
    already hold positions ``0 .. start_pos-1``) and returns their logits. ``cached_tokens`` is the
    list of tokens whose keys and values the cache holds; ``reset()`` empties it.
    """

    def __init__(self, gf: Any, config: ModelConfig, device: str,
                 progress: Callable[[int, int], None] | None = None) -> None:
        from tgcore.tensor import Tensor
        self.gf = gf
        self.config = config
        self.device = device
        cfg = config
        tensors = gf.tensors_as(device=device)
        names = [n for n in gf.tensor_info if n.startswith(("blk.", "output", "rope_freqs"))]
        total, done = len(names), 0

        def get(name: str, small: bool = False, required: bool = True) -> Any:
            nonlocal done
            if name not in gf.tensor_info:
                if required:
                    raise ModelError(f"{cfg.architecture} model file has no tensor {name!r}")
                return None
            t = tensors[name]
            if small:  # norms and biases: a float32 buffer of their own
                t = t.cast("float32").contiguous().realize()
            else:
                tensors.raw(name)  # the quantized bytes onto the device now (the dequantization stays lazy)
            done += 1
            if progress is not None:
                progress(done, total)
            return t

        if "token_embd.weight" not in gf.tensor_info:
            raise ModelError(f"{cfg.architecture} model file has no tensor 'token_embd.weight'")
        check_tensor_shapes(cfg, {n: tuple(int(s) for s in info.shape) for n, info in gf.tensor_info.items()})
        self.embedding = _Embedding(gf, "token_embd.weight", device)
        if cfg.vocab_size and self.embedding.vocab != cfg.vocab_size:
            raise ModelError(f"token_embd.weight has {self.embedding.vocab} rows, vocab_size is {cfg.vocab_size}")
        self.vocab_size = self.embedding.vocab
        self.layers: list[_Layer] = []
        cache_shape = (cfg.n_kv_heads, cfg.max_context, cfg.head_dim)
        def stacked(names: list[str]) -> Any:
            """The weights ``names`` (same type and columns) as one matrix: their raw bytes concatenated on
            the host (a quantized row is whole blocks, so rows stack byte for byte), dequantized lazily."""
            from tg_gguf.dequant import dequantize
            nonlocal done
            missing = [n for n in names if n not in gf.tensor_info]
            if missing:
                raise ModelError(f"{cfg.architecture} model file has no tensor {missing[0]!r}")
            infos = [gf.tensor_info[n] for n in names]
            if len({i.type for i in infos}) > 1 or len({tuple(i.shape[1:]) for i in infos}) > 1:
                parts = [get(n) for n in names]  # mixed types: stack the dequantized weights instead
                return Tensor.cat(*parts, dim=0)
            raw = np.concatenate([np.frombuffer(gf.tensor_bytes(n), dtype=np.uint8) for n in names])
            rows = sum(int(i.shape[0]) for i in infos)
            done += len(names)
            if progress is not None:
                progress(done, total)
            return dequantize(Tensor(raw, device=device).realize(), infos[0].type, (rows, *infos[0].shape[1:]),
                              name="+".join(names))

        for i in range(cfg.n_layers):
            p = f"blk.{i}."
            qk_norm = cfg.architecture == "qwen3"
            biases = [get(p + f"attn_{x}.bias", True, False) for x in "qkv"]
            if any(b is not None for b in biases) and any(b is None for b in biases):
                raise ModelError(f"layer {i} has biases for some of q/k/v only")
            self.layers.append(_Layer(
                attn_norm=get(p + "attn_norm.weight", small=True),
                wqkv=stacked([p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"]),
                wo=get(p + "attn_output.weight"),
                bqkv=Tensor.cat(*biases).contiguous().realize() if biases[0] is not None else None,
                q_norm=get(p + "attn_q_norm.weight", True, qk_norm),
                k_norm=get(p + "attn_k_norm.weight", True, qk_norm),
                ffn_norm=get(p + "ffn_norm.weight", small=True),
                w_gate_up=stacked([p + "ffn_gate.weight", p + "ffn_up.weight"]), w_down=get(p + "ffn_down.weight"),
                cache_k=Tensor.zeros(*cache_shape, device=device).contiguous().realize(),
                cache_v=Tensor.zeros(*cache_shape, device=device).contiguous().realize()))
        self.output_norm = get("output_norm.weight", small=True)
        self.output = get("output.weight", required=False)
        if self.output is None:
            self.output = tensors["token_embd.weight"]
            tensors.raw("token_embd.weight")
        factors = None
        if "rope_freqs.weight" in gf.tensor_info:
            factors = get("rope_freqs.weight", small=True).numpy()
        self.freqs = rope_frequencies(cfg, factors)
        self.cached_tokens: list[int] = []
        self._decode_step: Any = None

    # ---- construction ----

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], device: str | None = None, max_context: int = 4096,
                  progress: Callable[[int, int], None] | None = None) -> Model:
        """Load the model in GGUF file ``path`` onto ``device`` (default: ``DEV``), with a KV cache of
        ``min(model context, max_context)`` positions. ``progress(done, total)`` is called per weight loaded."""
        import tg_gguf

        from tgcore.runtime.registry import canonical
        gf = tg_gguf.load(path)
        try:
            config = config_from_metadata(dict(gf.metadata), list(gf.tensor_info), max_context)
            return cls(gf, config, canonical(device), progress)
        except BaseException:
            gf.close()
            raise

    def close(self) -> None:
        """Release the file mapping (the model cannot run afterwards)."""
        self.gf.close()

    # ---- running ----

    def reset(self) -> None:
        """Forget the cached tokens (the cache memory is kept and overwritten by later calls)."""
        self.cached_tokens = []

    def forward(self, tokens: Sequence[int], start_pos: int) -> np.ndarray:
        """Logits (float32, shape (len(tokens), vocab)) of ``tokens`` placed at ``start_pos``, ``start_pos+1``, ..."""
        return self._run(tokens, start_pos, want="all")

    def forward_last(self, tokens: Sequence[int], start_pos: int) -> np.ndarray:
        """Like ``forward`` but only the last token's logits (shape (vocab,)): a prefill skips the rest."""
        return self._run(tokens, start_pos, want="last")[-1]

    def _run(self, tokens: Sequence[int], start_pos: int, want: str) -> np.ndarray:
        cfg = self.config
        tokens = [int(t) for t in tokens]
        n = len(tokens)
        if n == 0:
            raise ValueError("forward needs at least one token")
        if not 0 <= start_pos <= len(self.cached_tokens):
            raise ValueError(f"start_pos {start_pos} leaves a gap: the cache holds {len(self.cached_tokens)} "
                             f"positions (use 0..{len(self.cached_tokens)})")
        if start_pos + n > cfg.max_context:
            raise ContextLengthError(
                f"{start_pos + n} tokens do not fit in the context of {cfg.max_context} positions "
                f"(model context {cfg.context_length}, max_context {cfg.max_context})")
        self.cached_tokens = self.cached_tokens[:start_pos]  # past start_pos the cache is rewritten now
        if n == 1:
            logits = self._decode(tokens[0], start_pos)
        else:
            rows = []
            for c in range(0, n, PREFILL_CHUNK):
                chunk = tokens[c:c + PREFILL_CHUNK]
                last_chunk = c + PREFILL_CHUNK >= n
                part = self._prefill(chunk, start_pos + c, want if last_chunk else ("all" if want == "all" else None))
                if part is not None:
                    rows.append(part)
                self.cached_tokens = self.cached_tokens + chunk
            logits = np.concatenate(rows)
            return logits
        self.cached_tokens = self.cached_tokens + tokens
        return logits

    # ---- inputs computed on the host ----

    def _rotary(self, start: int, n: int) -> tuple[Any, Any]:
        from tgcore.tensor import Tensor
        angles = np.arange(start, start + n, dtype=np.float64)[:, None] * self.freqs[None, :]
        return (Tensor(np.cos(angles).astype(np.float32), device=self.device),
                Tensor(np.sin(angles).astype(np.float32), device=self.device))

    def _mask(self, start: int, n: int, window: int) -> Any:
        """Additive (n, window) mask: 0 where key position <= query position, -inf elsewhere."""
        from tgcore.tensor import Tensor
        allowed = np.arange(window)[None, :] <= np.arange(start, start + n)[:, None]
        return Tensor(np.where(allowed, 0.0, -np.inf).astype(np.float32), device=self.device)

    def _decode(self, token: int, pos: int) -> np.ndarray:
        """One token through the jitted decode step (every call after two warm-ups replays it)."""
        from tgcore.tensor import Tensor
        from tgcore.uop import UOp
        s = self.config.max_context
        if self._decode_step is None:
            import tgcore
            self._decode_step = tgcore.jit(self._decode_graph, max_captures=DECODE_WINDOWS)
        x = Tensor(self.embedding([token]), device=self.device)
        cos, sin = self._rotary(pos, 1)
        var = UOp.variable("start_pos", 0, s - 1).bind(pos)
        # attend over a power-of-two window of the cache that covers positions 0..pos, not the whole cache:
        # one capture per window size (a compile each time the context crosses a power of two)
        window = min(s, max(32, 1 << pos.bit_length()))
        return self._decode_step(x, cos, sin, self._mask(pos, 1, window), var).numpy()

    def _decode_graph(self, x: Any, cos: Any, sin: Any, mask: Any, start_pos: Any) -> Any:
        for layer in self.layers:
            x = self._layer(layer, x, cos, sin, mask, start_pos, mask.shape[-1], dense=False)
        return self._logits(x, dense=False)

    def _prefill(self, tokens: list[int], start: int, want: str | None) -> np.ndarray | None:
        """Several tokens at once, run eagerly (not captured: a capture would keep every intermediate
        buffer). The token count is padded to a power of two and attention reads a power-of-two window
        of the cache, so prompts of many lengths and positions share a few compiled kernel sets."""
        from tgcore.tensor import Tensor
        from tgcore.uop import UOp
        s = self.config.max_context
        n = len(tokens)
        padded = max(4, 1 << (n - 1).bit_length())
        if start + padded > s:  # the padding's cache writes must stay inside the cache
            padded = n
        window = min(s, max(32, 1 << (start + padded - 1).bit_length()))
        ids = tokens + [tokens[-1]] * (padded - n)  # padding rows: computed, written past the end, never read
        x = Tensor(self.embedding(ids), device=self.device)
        cos, sin = self._rotary(start, padded)
        mask = self._mask(start, padded, window)
        var = UOp.variable("start_pos", 0, s - padded).bind(start)
        dense = padded >= DENSE_MIN_TOKENS
        for layer in self.layers:
            x = self._layer(layer, x, cos, sin, mask, var, window, dense)
        if want is None:
            return None
        if want == "last":
            pick = np.zeros((1, padded), np.float32)
            pick[0, n - 1] = 1.0
            return self._logits(Tensor(pick, device=self.device) @ x, dense=False).numpy()
        return self._logits(x, dense).numpy()[:n]

    # ---- the network ----

    def _logits(self, x: Any, dense: bool) -> Any:
        w = self.output.contiguous() if dense else self.output
        return linear(rms_norm(x, self.output_norm, self.config.norm_eps).contiguous(), w).contiguous()

    def _layer(self, layer: _Layer, x: Any, cos: Any, sin: Any, mask: Any, start_pos: Any, window: int,
               dense: bool) -> Any:
        """One transformer block on x (T, dim): writes the block's keys/values for positions start_pos ..
        start_pos+T-1 into the cache and attends over the first ``window`` cache positions with ``mask``
        (T, window). ``dense``: dequantize each weight into a float buffer first and run a plain GEMM
        (faster for many rows than the fused dequantizing matmul, which decodes the weight once per row)."""
        cfg = self.config
        t = x.shape[0]
        hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        group = nh // nkv

        def w(weight: Any) -> Any:
            return weight.contiguous() if dense else weight

        def normed(weight: Any) -> Any:  # a buffer of its own, else each group of output rows recomputes it
            return rms_norm(x, weight, cfg.norm_eps).contiguous()

        h = normed(layer.attn_norm)
        qkv = linear(h, w(layer.wqkv), layer.bqkv).contiguous().realize()  # (T, (nh + 2 nkv) * hd)
        q = qkv.shrink((None, (0, nh * hd))).reshape(t, nh, hd)
        k = qkv.shrink((None, (nh * hd, (nh + nkv) * hd))).reshape(t, nkv, hd)
        v = qkv.shrink((None, ((nh + nkv) * hd, (nh + 2 * nkv) * hd))).reshape(t, nkv, hd)
        if layer.q_norm is not None:
            q = rms_norm(q, layer.q_norm, cfg.norm_eps)
            k = rms_norm(k, layer.k_norm, cfg.norm_eps)
        q = rope(q, cos, sin, cfg.rope_dims, cfg.rope_interleaved).contiguous().realize()
        k = rope(k, cos, sin, cfg.rope_dims, cfg.rope_interleaved)  # computed by the cache write
        rows = (None, (start_pos, start_pos + t), None)
        layer.cache_k.shrink(rows).assign(k.permute(1, 0, 2))
        layer.cache_v.shrink(rows).assign(v.permute(1, 0, 2))
        s = cfg.max_context
        keys, values = layer.cache_k, layer.cache_v
        if window < s:
            keys = keys.shrink((None, (0, window), None))
            values = values.shrink((None, (0, window), None))
        qg = q.reshape(t, nkv, group, hd).permute(1, 2, 0, 3)  # (kv heads, group, T, hd)
        # (kv heads, group, T, window); a buffer of its own, else the softmax's last kernel recomputes q.k
        scores = ((qg @ keys.reshape(nkv, 1, window, hd).transpose(-1, -2)) * (1.0 / math.sqrt(hd))).contiguous()
        # a buffer of its own, else the next matmul recomputes exp per output
        weights = softmax(scores + mask.reshape(1, 1, t, window)).contiguous()
        # a (T, heads * head_dim) buffer: Wo's reduction then runs over one axis (whole quantization blocks)
        attn = (weights @ values.reshape(nkv, 1, window, hd)).permute(2, 0, 1, 3).reshape(t, nh * hd).contiguous()
        x = (x + linear(attn, w(layer.wo))).contiguous().realize()  # (else the FFN kernels recompute it)
        h = normed(layer.ffn_norm)
        ffn = cfg.ffn_dim
        gate_up = linear(h, w(layer.w_gate_up)).contiguous()  # (T, 2 ffn): one product for both halves
        gate, up = gate_up.shrink((None, (0, ffn))), gate_up.shrink((None, (ffn, 2 * ffn)))
        up = (gate.silu() * up).contiguous()  # (as above: silu once)
        return (x + linear(up, w(layer.w_down))).contiguous().realize()

    def __repr__(self) -> str:
        c = self.config
        return (f"<Model {c.architecture} {c.name!r}: {c.n_layers} layers, dim {c.dim}, heads {c.n_heads}/"
                f"{c.n_kv_heads}, vocab {self.vocab_size}, context {c.max_context}/{c.context_length} "
                f"on {self.device}>")

"""Tiny random llama-family GGUF files written with gguf-py (the format's reference writer), for tests.

In:  a ``TinySpec`` (architecture, sizes, which optional features: biases, q/k norms, untied output,
     rope scaling, quantization).
Out: ``write_tiny_gguf(spec, path)`` writes the file and returns the weights in Hugging Face row order
     (``HFWeights``: a dict of float32 arrays named like the GGUF tensors).

How: weights are drawn from a seeded normal distribution in Hugging Face order and stored the way
llama.cpp's converter stores them:
- ``llama``/``mistral``: the rows of each head of Wq/Wk are permuted, ``reshape(heads, 2, d/2, in)``
  swapped to ``(heads, d/2, 2, in)``, so GGUF row ``2j + s`` holds Hugging Face row ``s*d/2 + j``;
  ``qwen2``/``qwen3`` keep the Hugging Face order (llama.cpp runs them with NEOX rotation);
- 2-D weights as F32, F16, or quantized with ``gguf.quants.quantize`` (Q8_0, Q4_0), one type for all
  or per tensor (real quantized files mix types, e.g. a better type for attn_v and ffn_down); norms,
  biases and ``rope_freqs.weight`` always F32;
- Llama 3 rope scaling is converted to ``rope_freqs.weight`` (one divisor per rotation pair) as
  llama.cpp's converter does; linear scaling is ``rope.scaling.type = linear`` + ``rope.scaling.factor``.
The tokenizer is a byte-level BPE vocabulary (``tokenizer.ggml.model = gpt2``): the 256 byte symbols,
merges learned from a fixed sentence, and an ``<|endoftext|>`` EOS token.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from iquants import quantize_iq3_s
from kquants import QUANTIZERS as K_QUANTIZERS

HFWeights = dict[str, np.ndarray]
QUANTIZERS = {**K_QUANTIZERS, "IQ3_S": quantize_iq3_s}  # the types gguf-py cannot quantize

TRAINING_TEXT = ("the quick brown fox jumps over the lazy dog while the other dogs sleep in the warm sun "
                 "and the fox runs over the hill to the river where the fish swim")
# digits and contractions, so that pre-tokenizers that split them differently give different ids
BPE_EXTRA_TEXT = "it's 2024 and 1234567 dogs don't sleep it's 2024 1234567"
EOS_TEXT = "<|endoftext|>"
BPE_PRE = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2"}  # tokenizer.ggml.pre as the converter writes
PERMUTED_QK_ARCHS = ("llama", "mistral")  # files whose q/k rows llama.cpp's converter permutes


@dataclass(frozen=True)
class Llama3Rope:
    """Hugging Face ``rope_scaling = {"rope_type": "llama3", ...}``."""
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: int = 64


@dataclass(frozen=True)
class LongRope:
    """Hugging Face ``rope_scaling = {"rope_type": "longrope", ...}`` (Phi-3): per-pair factors."""
    original_context: int = 64
    seed: int = 11

    def factors(self, pairs: int) -> tuple[np.ndarray, np.ndarray]:
        """(long, short) divisors of the rotation frequencies."""
        rng = np.random.default_rng(self.seed)
        return ((1.0 + 3.0 * rng.random(pairs)).astype(np.float32),
                (1.0 + 0.2 * rng.random(pairs)).astype(np.float32))


@dataclass(frozen=True)
class TinySpec:
    """What to write: the model's hyperparameters and optional features."""
    arch: str
    n_layers: int = 2
    dim: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16          # != dim / n_heads is written as attention.key_length/value_length
    ffn_dim: int = 96
    context: int = 128
    eps: float = 1e-5
    rope_base: float = 10000.0
    rope_dims: int | None = None      # rope.dimension_count (None: head_dim, not written)
    tied: bool = True                 # no output.weight: the logits use token_embd.weight
    qkv_bias: bool = False            # qwen2
    qk_norm: bool = False             # qwen3
    linear_rope: float | None = None  # rope.scaling.type = linear, this factor
    llama3_rope: Llama3Rope | None = None
    rope_scaling_type: str | None = None  # written as is (for the unsupported-scaling test)
    sliding_window: int | None = None
    swa_rope_base: float | None = None      # rope.freq_base_swa (gemma3; None: not written)
    softcaps: tuple[float, float] | None = None  # gemma2: attention and final logit soft-caps
    long_rope: LongRope | None = None       # phi3: LongRoPE factors
    quant: str = "F32"                # F32, Q8_0, Q4_0, Q4_K, Q6_K or IQ3_S for the 2-D weights
    quant_overrides: tuple[tuple[str, str], ...] = ()  # (name suffix, type): F32, F16, Q8_0, Q4_0, Q4_K, Q6_K
    seed: int = 0
    drop: tuple[str, ...] = field(default=())  # tensors left out of the file (for the error tests)
    wrong_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # tensors written as zeros of this shape

    @property
    def rotary_dims(self) -> int:
        return self.rope_dims if self.rope_dims is not None else self.head_dim

    def without(self, *names: str) -> TinySpec:
        return replace(self, drop=self.drop + names)

    def with_wrong_shape(self, name: str, shape: tuple[int, ...]) -> TinySpec:
        return replace(self, wrong_shapes=self.wrong_shapes + ((name, shape),))

    def quant_of(self, name: str) -> str:
        """The type a 2-D weight is stored as (the last matching override, else ``quant``)."""
        kind = self.quant
        for suffix, override in self.quant_overrides:
            if name.endswith(suffix):
                kind = override
        return kind


# ---------------------------------------------------------------------------------------------- tokenizer

def byte_symbols() -> list[str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes map to themselves, the other
    bytes to U+0100 + n in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def learn_merges(text: str, count: int) -> list[str]:
    """``count`` BPE merges learned from ``text`` (words split at spaces, a space prefix as GPT-2 does)."""
    sym = byte_symbols()
    words = [[sym[b] for b in (w if i == 0 else " " + w).encode()] for i, w in enumerate(text.split(" "))]
    merges: list[str] = []
    made: set[str] = set(sym)
    while len(merges) < count:
        pairs = Counter((a, b) for w in words for a, b in zip(w, w[1:], strict=False) if a + b not in made)
        if not pairs:
            break
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append(f"{a} {b}")
        made.add(a + b)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    return merges


GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
SPM_SPACE = "\u2581"


def spm_vocabulary(size: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types of a ``size``-token SentencePiece vocabulary laid out like Gemma's: <pad>, <eos>,
    <bos>, <unk>, the turn markers, the 256 byte-fallback tokens <0xNN>, then pieces (``\u2581`` for a space)
    scored by the order their BPE merges were learned, the single characters of the training text last."""
    chars = sorted(set(TRAINING_TEXT.replace(" ", SPM_SPACE)))
    specials = len(GEMMA_SPECIALS) + 256
    words = [SPM_SPACE + w for w in TRAINING_TEXT.split(" ")]
    pieces: list[str] = []
    split = [list(w) for w in words]
    while len(pieces) < size - specials - len(chars):
        pairs = Counter((a, b) for w in split for a, b in zip(w, w[1:], strict=False))
        if not pairs:
            break
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if a + b not in pieces:
            pieces.append(a + b)
        for w in split:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    normal = [p for p in pieces if p not in chars] + chars
    tokens = GEMMA_SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + normal
    if len(tokens) != size:
        raise ValueError(f"the training text gives {len(tokens)} SentencePiece tokens, not {size}")
    scores = [0.0] * specials + [-float(i) for i in range(len(normal))]
    types = [3, 3, 3, 2, 4, 4] + [6] * 256 + [1] * len(normal)  # CONTROL, UNKNOWN, USER_DEFINED, BYTE, NORMAL
    return tokens, scores, types


def vocabulary(size: int) -> tuple[list[str], list[str], list[int]]:
    """Tokens, merges and token types of a ``size``-token byte-level BPE vocabulary (EOS last)."""
    merges = learn_merges(TRAINING_TEXT + " " + BPE_EXTRA_TEXT, size - 256 - 1)
    tokens = byte_symbols() + [m.replace(" ", "") for m in merges] + [EOS_TEXT]
    if len(tokens) != size:
        raise ValueError(f"the training text gives only {len(tokens)} tokens, not {size}")
    types = [1] * (size - 1) + [3]  # NORMAL ..., CONTROL
    return tokens, merges, types


# ---------------------------------------------------------------------------------------------- weights

def llama3_rope_factors(spec: TinySpec) -> np.ndarray:
    """Per-pair divisors of the rotation frequencies for Llama 3 scaling (Hugging Face's llama3 rule)."""
    cfg = spec.llama3_rope
    assert cfg is not None
    d = spec.rotary_dims
    freqs = spec.rope_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    low_wavelen = cfg.original_context / cfg.low_freq_factor
    high_wavelen = cfg.original_context / cfg.high_freq_factor
    factors = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(cfg.factor)
        else:
            smooth = (cfg.original_context / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor -
                                                                                 cfg.low_freq_factor)
            factors.append(1.0 / ((1 - smooth) / cfg.factor + smooth))
    return np.array(factors, dtype=np.float32)


GEMMA_ARCHS = ("gemma2", "gemma3")  # RMSNorm times (1 + w): the converter stores w + 1


def random_weights(spec: TinySpec, vocab: int) -> HFWeights:
    """Random weights as Hugging Face holds them (row order, Gemma's norm offsets), named like the GGUF
    tensors; Phi-3's fused q/k/v and gate/up as the one tensor each that both Hugging Face and GGUF keep."""
    rng = np.random.default_rng(spec.seed)
    gemma = spec.arch in GEMMA_ARCHS

    def matrix(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) / math.sqrt(inp)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return ((0.0 if gemma else 1.0) + 0.2 * rng.standard_normal(n)).astype(np.float32)

    def bias(n: int) -> np.ndarray:
        return (0.5 * rng.standard_normal(n)).astype(np.float32)

    q_rows, kv_rows = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    w: HFWeights = {"token_embd.weight": rng.standard_normal((vocab, spec.dim)).astype(np.float32),
                    "output_norm.weight": norm(spec.dim)}
    if gemma:  # Gemma scales the embeddings by sqrt(dim): keep the hidden state of order 1
        w["token_embd.weight"] /= math.sqrt(spec.dim)
    if not spec.tied:
        w["output.weight"] = matrix(vocab, spec.dim)
    for i in range(spec.n_layers):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm(spec.dim)
        q, k, v = matrix(q_rows, spec.dim), matrix(kv_rows, spec.dim), matrix(kv_rows, spec.dim)
        if spec.arch == "phi3":
            w[p + "attn_qkv.weight"] = np.concatenate([q, k, v])
        else:
            w[p + "attn_q.weight"], w[p + "attn_k.weight"], w[p + "attn_v.weight"] = q, k, v
        w[p + "attn_output.weight"] = matrix(spec.dim, q_rows)
        if spec.qkv_bias:
            w[p + "attn_q.bias"], w[p + "attn_k.bias"], w[p + "attn_v.bias"] = \
                bias(q_rows), bias(kv_rows), bias(kv_rows)
        if spec.qk_norm or spec.arch == "gemma3":
            w[p + "attn_q_norm.weight"], w[p + "attn_k_norm.weight"] = norm(spec.head_dim), norm(spec.head_dim)
        if gemma:
            w[p + "post_attention_norm.weight"] = norm(spec.dim)
        w[p + "ffn_norm.weight"] = norm(spec.dim)
        gate, up = matrix(spec.ffn_dim, spec.dim), matrix(spec.ffn_dim, spec.dim)
        if spec.arch == "phi3":
            w[p + "ffn_up.weight"] = np.concatenate([gate, up])
        else:
            w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"] = gate, up
        w[p + "ffn_down.weight"] = matrix(spec.dim, spec.ffn_dim)
        if gemma:
            w[p + "post_ffw_norm.weight"] = norm(spec.dim)
    if spec.llama3_rope is not None:
        w["rope_freqs.weight"] = llama3_rope_factors(spec)
    if spec.long_rope is not None:
        w["rope_factors_long.weight"], w["rope_factors_short.weight"] = spec.long_rope.factors(spec.rotary_dims // 2)
    return w


def permute_qk(w: np.ndarray, heads: int) -> np.ndarray:
    """Hugging Face -> GGUF row order of a llama Wq/Wk (llama.cpp's converter permutation)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, heads: int) -> np.ndarray:
    """GGUF -> Hugging Face row order (the inverse of ``permute_qk``)."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def file_tensor(spec: TinySpec, name: str, w: np.ndarray) -> np.ndarray:
    """A weight as the file stores it (q/k rows permuted for llama/mistral, Gemma's norms as w + 1)."""
    if spec.arch in GEMMA_ARCHS and name.endswith("norm.weight"):
        return w + np.float32(1.0)
    if spec.arch in PERMUTED_QK_ARCHS and name.endswith(("attn_q.weight", "attn_k.weight")):
        heads = spec.n_heads if "attn_q" in name else spec.n_kv_heads
        return permute_qk(w, heads)
    return w


# ---------------------------------------------------------------------------------------------- file

def write_metadata(writer: object, spec: TinySpec, vocab: int) -> None:
    import gguf
    assert isinstance(writer, gguf.GGUFWriter)
    writer.add_name(f"tiny-{spec.arch}")
    writer.add_block_count(spec.n_layers)
    writer.add_context_length(spec.context)
    writer.add_embedding_length(spec.dim)
    writer.add_feed_forward_length(spec.ffn_dim)
    writer.add_head_count(spec.n_heads)
    writer.add_head_count_kv(spec.n_kv_heads)
    writer.add_layer_norm_rms_eps(spec.eps)
    writer.add_rope_freq_base(spec.rope_base)
    writer.add_vocab_size(vocab)
    if spec.head_dim * spec.n_heads != spec.dim or spec.arch in GEMMA_ARCHS:  # Gemma's converter always writes it
        writer.add_key_length(spec.head_dim)
        writer.add_value_length(spec.head_dim)
    if spec.rope_dims is not None:
        writer.add_rope_dimension_count(spec.rope_dims)
    if spec.linear_rope is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(spec.linear_rope)
    if spec.rope_scaling_type is not None:
        writer.add_string(f"{spec.arch}.rope.scaling.type", spec.rope_scaling_type)
        writer.add_rope_scaling_factor(4.0)
    if spec.sliding_window is not None:
        writer.add_sliding_window(spec.sliding_window)
    if spec.swa_rope_base is not None:
        writer.add_rope_freq_base_swa(spec.swa_rope_base)
    if spec.softcaps is not None:
        writer.add_attn_logit_softcapping(spec.softcaps[0])
        writer.add_final_logit_softcapping(spec.softcaps[1])
    if spec.long_rope is not None:  # as the converter writes Phi-3's: the original context and attn_factor
        scale = spec.context / spec.long_rope.original_context
        writer.add_rope_scaling_orig_ctx_len(spec.long_rope.original_context)
        writer.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(spec.long_rope.original_context)))
    if spec.arch in GEMMA_ARCHS:  # SentencePiece, as Gemma's converter writes it
        tokens, scores, types = spm_vocabulary(vocab)
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_bos_token_id(2)
        writer.add_eos_token_id(1)
        writer.add_unk_token_id(3)
        writer.add_pad_token_id(0)
        writer.add_eot_token_id(5)
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)
        writer.add_add_space_prefix(False)
        return
    tokens, merges, types = vocabulary(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(BPE_PRE.get(spec.arch, "gpt-2"))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(vocab - 1)
    writer.add_add_bos_token(False)


def write_tiny_gguf(spec: TinySpec, path: Path, vocab: int = 300) -> HFWeights:
    """Write ``spec`` as a GGUF file at ``path``; the weights (Hugging Face order) come back."""
    import gguf
    weights = random_weights(spec, vocab)
    writer = gguf.GGUFWriter(str(path), spec.arch)
    write_metadata(writer, spec, vocab)
    for name, w in weights.items():
        if name in spec.drop:
            continue
        data = file_tensor(spec, name, w)
        wrong_shape = dict(spec.wrong_shapes).get(name)
        if wrong_shape is not None:
            data = np.zeros(wrong_shape, np.float32)
        kind = spec.quant_of(name) if data.ndim == 2 else "F32"
        if kind == "F32":
            writer.add_tensor(name, data)
        elif kind == "F16":
            writer.add_tensor(name, data.astype(np.float16))
        elif kind in QUANTIZERS:  # gguf-py cannot quantize the K-quants, nor the grid types
            writer.add_tensor(name, QUANTIZERS[kind](data), raw_dtype=gguf.GGMLQuantizationType[kind])
        else:
            qtype = gguf.GGMLQuantizationType[kind]
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights

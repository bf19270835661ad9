"""Decoder-only transformers read from a GGUF file, with a preallocated KV cache.

In:  a GGUF file whose ``general.architecture`` is one of ``architectures.SUPPORTED_ARCHITECTURES``
     (``llama``, ``mistral``, ``qwen2``, ``qwen3``, ``gemma2``, ``gemma3``, ``phi3``).
Out: ``Model.forward(tokens, start_pos)`` -> float32 logits (numpy, one row per token).

What the model computes (per layer, pre-norm):

    h   = x + post(Wo · attention(rope(Wq · rmsnorm(x)), rope(Wk · rmsnorm(x)), Wv · rmsnorm(x)))
    out = h + post(Wdown · (act(Wgate · rmsnorm(h)) * (Wup · rmsnorm(h))))

with grouped-query attention (``n_kv_heads`` key/value heads shared by groups of query heads); the logits
are ``output.weight · rmsnorm(x)`` (``token_embd.weight`` when the file has no ``output.weight``). What
varies by architecture is data in its ``Architecture`` record (``architectures.py``): q/k/v biases,
per-head q/k RMSNorms, ``post`` (an RMSNorm, Gemma; else nothing), ``act`` (SiLU or GELU-tanh), the
embedding scale, soft-caps of the attention scores and of the logits, sliding-window layers with their own
rope base, fused q/k/v and gate/up tensors, LongRoPE factors.

Weights stay quantized on the device (``tg_gguf.intdot.QuantizedMatrix``): a product with one runs as integer dot
products on 8-bit quantized activations where tg-gguf's policy says that is faster on the device (as llama.cpp's CPU
backend does; ``int_dot=False`` turns it off), else as tg-gguf's lazy dequantization of the raw bytes fused into
the matmul. Wq, Wk and Wv are stacked into one matrix at load time (their raw
bytes concatenated: quantized rows are whole blocks), so a layer runs one matrix-vector product for the
three (and one for Wgate and Wup); where the file mixes types among them (Q4_K_M keeps Wv in Q6_K) each run
of one type is its own matrix and product. The keys' rotation is computed by the kernel that writes them into the
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

KV cache: per layer, keys and values of shape (n_kv_heads, max_context, head_dim) in float16 (``KV_DTYPE``;
float32 on request), allocated once for ``max_context = min(model context, max_context)`` positions; a
sliding-window layer keeps a ring of ``window + PREFILL_CHUNK`` slots instead (slot = position mod its length),
and every mask is computed from the position each slot holds. A call writes its tokens' keys
and values at ``start_pos ..`` with ``Tensor.assign`` into a shrink at a bound variable ``start_pos``,
so the kernels do not depend on the position. Token embeddings, rotary cos/sin rows and the additive
attention mask are computed on the host and passed in as tensors.

- Decode (one token): ``tgcore.jit`` of the whole step, captured by its first call (``capture_first``: the
  weights and caches it reads are realized at load); every later step replays the capture and compiles
  nothing. Attention reads the smallest window of the cache that covers positions 0..pos, a power of two
  or three quarters of one (at least 32 positions), with the mask ``key position <= pos``: one capture per
  window size, so a new compile only when the context crosses one of these sizes (two per doubling), and a
  step reads cache in proportion to its position rather than to max_context.
- Prefill (several tokens): the token count is padded to a power of two (the padding rows write cache
  positions that later tokens overwrite and that the mask hides until then) and attention reads a
  power-of-two window of the cache that covers the prompt, so prompts of many lengths share a few
  compiled kernel sets. Jitted like decode (one capture per padded length and window; the capture's
  scratch buffers are shared between layers, so it keeps about one layer's intermediates; the last
  ``PREFILL_CAPTURES`` used are kept per kind of result, ``FUSED_PREFILL_CAPTURES`` under
  ``DENSE_MIN_TOKENS`` rows, whose scratch holds no dequantized weights), except when
  the cache ring wraps inside the call (constant slots: run eagerly). From ``DENSE_MIN_TOKENS`` rows on,
  each weight is dequantized into a temporary float buffer holding its transpose and multiplied as a
  plain GEMM (the register-tiled one, B contiguous along the output columns): the fused dequantizing
  matmul decodes the weight once per row. Not where every product takes the row lanes (``tg_gguf.lanes``:
  ``LANE_TYPES`` on the C and X86 renderers): their kernels read each weight once per group of 8 rows, at any row
  count, faster than dequantizing (SmolLM2 Q4_1, 64 rows: 123-194 vs 394-403 ms; 128 rows 363-388 vs 666-747 ms,
  load ~4).
- Several sequences' prefills (``prefill_chunks``, a server's streams): their chunks in one forward, the rows of
  sequence i after those of sequence i - 1, each sequence its own bound variables (slot, first cache slot), cache
  writes and attention over its own cache window (the keys of several sequences a cat of their windows). Only
  chunks that pad to the same rows alone go together, and only where every row's products keep their order at any
  row count (the row lanes; the dense GEMM), so each chunk's keys, values and logits are bitwise those of its run
  alone.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_llm.embedding import Embedding
from tg_llm.kv_cache import CacheKind, RowWrites, decode_window, first_dtype, swap_sequences, write_rows, zeroed
from tg_llm.layers import linear, linear_parts, masked_exp, rms_norm, rope, rope_frequencies, softcap
from tg_llm.model_config import (
    ContextLengthError,
    ModelConfig,
    ModelError,
    UnsupportedArchitectureError,
    check_tensor_shapes,
    config_from_metadata,
)
from tg_llm.model_weights import WeightReader
from tg_llm.step_inputs import HeldInputs, HeldOutputs

if TYPE_CHECKING:
    from tg_llm.pipeline import PipelineStage

# the model's errors and config reader are part of this module's interface (callers catch them from here)
__all__ = ["Model", "ModelConfig", "ModelError", "UnsupportedArchitectureError", "ContextLengthError",
           "config_from_metadata", "PREFILL_CHUNK", "DENSE_MIN_TOKENS", "KV_DTYPE"]

PREFILL_CHUNK = 256    # a longer prompt is prefilled in chunks of this many tokens (bounds the scratch memory)
# from this many rows on, a weight is dequantized once and multiplied as floats (CPU ms per SmolLM2 Q4_1 prefill,
# fused vs dense: 4 rows 24 vs 86-102, 16 rows 87-91 vs 102-126, 32 rows 171-182 vs 160), unless every product
# takes the row lanes (see the module docstring)
DENSE_MIN_TOKENS = 32
# the KV cache's element type: float16 halves the bytes attention reads, which at 8 decode rows are as many as the
# weights' (SmolLM2, window 192); the keys and values are rounded once, when written, as llama.cpp's default does
KV_DTYPE = "float16"
DECODE_WINDOWS = 24    # decode captures kept: one per attention window (``kv_cache.decode_window``: 14 up to 4096)
# prefill captures kept per kind of result (each keeps a layer of scratch: weights, activations): a server's one-chunk
# prompts of 17-32 and 33-64 tokens and its second chunks are three
PREFILL_CAPTURES = 4
# ... of prefills under DENSE_MIN_TOKENS rows (no dequantized weights in their scratch: a few activations), which
# short prompts (a chat turn, a server's requests) and the last chunks of long ones run
FUSED_PREFILL_CAPTURES = 16
# ... of prefills of several sequences at once (a server's chunks of its prefilling streams): one per sequence count,
# padding and window
BATCH_PREFILL_CAPTURES = 32


# ---------------------------------------------------------------------------------------------- model

def _integer_inputs(weights: list[Any]) -> bool:
    """Whether every product with ``weights`` runs as integer dot products (``QuantizedMatrix.integer_path``): its
    input is then read by the activations' quantization only, not by each group of output rows."""
    return all(getattr(w, "integer_path", False) for w in weights)


def _cache_window(cache: Any, seqs: Any, window: int) -> Any:
    """The first ``window`` slots of the sequences ``seqs`` of a cache (sequences, kv heads, slots, head_dim): a
    (first, end) range (ints or bound variables), or a list of bound variables (a prefill of several sequences)."""
    if isinstance(seqs, tuple):
        return cache.shrink((seqs, None, (0, window), None))
    from tgcore.tensor import Tensor
    return Tensor.cat(*[cache.shrink(((s, s + 1), None, (0, window), None)) for s in seqs])


@dataclass
class _Layer:
    kind: int  # index into Model.kinds: which cache length, window, rotation and inputs this layer uses
    attn_norm: Any
    wqkv: list[Any]  # Wq, Wk and Wv stacked (rows q, then k, then v): one product for the three (per weight type)
    wo: Any
    bqkv: Any  # their biases stacked the same way (qwen2), or None
    q_norm: Any
    k_norm: Any
    post_attn_norm: Any  # of the attention output before the residual add (Gemma), or None
    ffn_norm: Any
    w_gate_up: list[Any]  # Wgate and Wup stacked (rows gate, then up): one product for the two (per weight type)
    w_down: Any
    post_ffn_norm: Any  # of the FFN output before the residual add (Gemma), or None
    cache_k: Any
    cache_v: Any


class Model:
    """A decoder of one of the ``SUPPORTED_ARCHITECTURES`` on one device. Build with ``Model.from_gguf``.

    ``forward(tokens, start_pos)`` runs ``tokens`` at positions ``start_pos ..`` (the cache must
    already hold positions ``0 .. start_pos-1``) and returns their logits. ``cached_tokens`` is the
    list of tokens whose keys and values the cache holds; ``reset()`` empties it.
    """

    # several sequences' prefill chunks run in one forward (``prefill_chunks``), and the prefill captures may be made
    # directly (``tg_llm.prefill.warm_up``): a server joins prompts and warms long prompts up (``PipelineModel``: no)
    joins_prompts = True

    def __init__(self, gf: Any, config: ModelConfig, device: str,
                 progress: Callable[[int, int], None] | None = None, sequences: int = 1,
                 stage: PipelineStage | None = None, int_dot: bool = True, kv_dtype: str = KV_DTYPE) -> None:
        from tgcore.tensor import Tensor
        if sequences < 1:
            raise ValueError(f"sequences must be >= 1, got {sequences}")
        self.gf = gf
        self.config = config
        self.device = device
        self.sequences = sequences
        self.stage = stage
        if kv_dtype not in ("float32", "float16"):
            raise ValueError(f"kv_dtype must be 'float32' or 'float16', got {kv_dtype!r}")
        self.kv_dtype = kv_dtype
        cfg, arch = config, config.arch
        owned = range(cfg.n_layers) if stage is None else stage.layers
        self.has_output = stage is None or stage.last  # the output norm and matrix: on the last stage only
        names = [n for n in gf.tensor_info if n.startswith("rope_")
                 or (n.startswith("output") and self.has_output)
                 or (n.startswith("blk.") and int(n.split(".")[1]) in owned)]
        weights = WeightReader(gf, cfg, device, names, progress, int_dot)
        get, matrix, stacked = weights.get, weights.matrix, weights.stacked

        if "token_embd.weight" not in gf.tensor_info:
            raise ModelError(f"{cfg.architecture} model file has no tensor 'token_embd.weight'")
        check_tensor_shapes(cfg, {n: tuple(int(s) for s in info.shape) for n, info in gf.tensor_info.items()})
        self.embedding = Embedding(gf, "token_embd.weight", device,
                                    math.sqrt(cfg.dim) if arch.embedding_scale else 1.0)
        if cfg.vocab_size and self.embedding.vocab != cfg.vocab_size:
            raise ModelError(f"token_embd.weight has {self.embedding.vocab} rows, vocab_size is {cfg.vocab_size}")
        self.vocab_size = self.embedding.vocab
        self.kinds = self._kinds(get)

        self.layers: list[_Layer] = []
        for i in owned:
            p = f"blk.{i}."
            biases = [get(p + f"attn_{x}.bias", True, False) for x in "qkv"]
            if any(b is not None for b in biases) and any(b is None for b in biases):
                raise ModelError(f"layer {i} has biases for some of q/k/v only")
            kind = int(cfg.sliding_layers[i]) if self.kinds[-1].ring else 0
            cache_shape = (sequences, cfg.n_kv_heads, self.kinds[kind].cache_len, cfg.head_dim)
            self.layers.append(_Layer(
                kind=kind,
                attn_norm=get(p + "attn_norm.weight", small=True),
                wqkv=stacked([p + n + ".weight" for n in arch.qkv]),
                wo=get(p + "attn_output.weight"),
                bqkv=Tensor.cat(*biases).contiguous().realize() if biases[0] is not None else None,
                q_norm=get(p + "attn_q_norm.weight", True, arch.qk_norm),
                k_norm=get(p + "attn_k_norm.weight", True, arch.qk_norm),
                post_attn_norm=get(p + "post_attention_norm.weight", True) if arch.post_norms else None,
                ffn_norm=get(p + "ffn_norm.weight", small=True),
                w_gate_up=stacked([p + n + ".weight" for n in arch.gate_up]), w_down=get(p + "ffn_down.weight"),
                post_ffn_norm=get(p + "post_ffw_norm.weight", True) if arch.post_norms else None,
                cache_k=zeroed(cache_shape, device, kv_dtype), cache_v=zeroed(cache_shape, device, kv_dtype)))
        self.output_norm: Any = None
        self.output: Any = None
        if self.has_output:
            self.output_norm = get("output_norm.weight", small=True)
            self.output = get("output.weight", required=False)
            if self.output is None:
                self.output = matrix("token_embd.weight")
        self._tokens: list[list[int]] = [[] for _ in range(sequences)]  # per sequence: the tokens its cache holds
        self._decode_step: Any = None
        self._step_inputs = HeldInputs(device)  # the decode step's input tensors, refilled each step
        self._step_outputs = HeldOutputs(device)  # ... and the tensors it writes its logits into
        # (what it returns, dense, one sequence) -> jitted graph
        self._prefill_steps: dict[tuple[str | None, bool, bool], Any] = {}
        # whether every product takes the row lanes: a prefill's rows then run through them at any count (in groups
        # of 8 rows, each row's sum in one order: batch-invariant), not dense (dequantized weights, a float GEMM)
        products = [w for layer in self.layers for w in (*layer.wqkv, layer.wo, *layer.w_gate_up, layer.w_down)]
        self._lane_prefill = all(getattr(w, "lanes", None) is not None for w in products)

    def _kinds(self, get: Callable[..., Any]) -> list[CacheKind]:
        """The full-attention kind (always first) and, when some layers slide, the sliding kind."""
        cfg = self.config
        factors = None
        if "rope_freqs.weight" in self.gf.tensor_info:  # Llama 3: one divisor per rotation pair
            factors = get("rope_freqs.weight", small=True).numpy()
        cos_scale = 1.0
        if cfg.arch.long_rope and "rope_factors_long.weight" in self.gf.tensor_info:
            # LongRoPE: the long factors when the context goes past the original one (llama.cpp's rule)
            long = cfg.max_context > cfg.rope_original_context
            factors = get("rope_factors_long.weight" if long else "rope_factors_short.weight", small=True).numpy()
            cos_scale = cfg.rope_attn_factor
        s = cfg.max_context
        kinds = [CacheKind(s, 0, rope_frequencies(cfg.rope_dims, cfg.rope_base, cfg.rope_scale, factors), cos_scale,
                       "start_pos", np.full((self.sequences, s), -1, np.int64))]
        if any(cfg.sliding_layers):
            ring = min(s, cfg.sliding_window + PREFILL_CHUNK)
            kinds.append(CacheKind(ring, cfg.sliding_window, rope_frequencies(cfg.rope_dims, cfg.swa_rope_base,
                                                                          cfg.swa_rope_scale), cos_scale,
                               "ring_pos", np.full((self.sequences, ring), -1, np.int64)))
        return kinds

    # ---- construction ----

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], device: str | None = None, max_context: int = 4096,
                  progress: Callable[[int, int], None] | None = None, sequences: int = 1,
                  stage: PipelineStage | None = None, int_dot: bool = True, kv_dtype: str = KV_DTYPE) -> Model:
        """Load the model in GGUF file ``path`` onto ``device`` (default: ``DEV``), with ``sequences`` KV caches
        of ``min(model context, max_context)`` positions each. ``progress(done, total)`` is called per weight
        loaded. ``stage``: this process's part of a pipeline (``tg_llm.pipeline``): its layers only.
        ``int_dot=False``: every product in float (no activation quantization; see ``tg_gguf.intdot``).
        ``kv_dtype``: the KV cache's element type, "float16" (``KV_DTYPE``) or "float32"."""
        import tg_gguf

        from tgcore.runtime.registry import canonical
        gf = tg_gguf.load(path)
        try:
            config = config_from_metadata(dict(gf.metadata), list(gf.tensor_info), max_context)
            return cls(gf, config, canonical(device), progress, sequences, stage, int_dot, kv_dtype)
        except BaseException:
            gf.close()
            raise

    def close(self) -> None:
        """Release the file mapping (the model cannot run afterwards)."""
        self.gf.close()

    # ---- running ----

    @property
    def cached_tokens(self) -> list[int]:
        """The tokens whose keys and values sequence 0's cache holds (a copy)."""
        return list(self._tokens[0])

    def tokens_of(self, seq: int) -> list[int]:
        """The tokens whose keys and values sequence ``seq``'s cache holds (a copy)."""
        return list(self._tokens[self._check_seq(seq)])

    def _check_seq(self, seq: int) -> int:
        if not 0 <= seq < self.sequences:
            raise ValueError(f"sequence {seq} does not exist (the model has {self.sequences}: 0..{self.sequences - 1})")
        return seq

    def reset(self, seq: int | None = None) -> None:
        """Forget the cached tokens of sequence ``seq`` (None: of all); the memory is kept and overwritten later."""
        for s in range(self.sequences) if seq is None else [self._check_seq(seq)]:
            self._tokens[s] = []
            for kind in self.kinds:
                kind.forget(s)

    def swap_sequences(self, a: int, b: int) -> None:
        """Exchange what sequences ``a`` and ``b``'s caches hold (keys, values, the tokens and the position of each
        slot), as if each had run the other's calls: a server moves a cached prompt prefix into the slot it wants
        (the batched step's rows reach the highest slot in use) without losing the other slot's. A copy on the host
        of the slots either holds (nothing compiles)."""
        a, b = self._check_seq(a), self._check_seq(b)
        if a == b:
            return
        held = max(len(self._tokens[a]), len(self._tokens[b]))
        for layer in self.layers:
            slots = min(self.kinds[layer.kind].cache_len, held)  # (a ring's slots: all once it wrapped)
            for cache in (layer.cache_k, layer.cache_v):
                swap_sequences(cache, a, b, slots)
        for kind in self.kinds:
            kind.slot_pos[[a, b]] = kind.slot_pos[[b, a]]
        self._tokens[a], self._tokens[b] = self._tokens[b], self._tokens[a]

    def forward(self, tokens: Sequence[int], start_pos: int, seq: int = 0) -> np.ndarray:
        """Logits (float32, shape (len(tokens), vocab)) of ``tokens`` placed at ``start_pos``, ``start_pos+1``, ...
        of sequence ``seq``."""
        return self._run(tokens, start_pos, "all", self._check_seq(seq))

    def forward_last(self, tokens: Sequence[int], start_pos: int, seq: int = 0, padding: int = 0) -> np.ndarray:
        """Like ``forward`` but only the last token's logits (shape (vocab,)): a prefill skips the rest. ``padding``:
        run at least this many rows (a server's last chunk of a long prompt as its whole chunks: their captures)."""
        return self._run(tokens, start_pos, "last", self._check_seq(seq), padding)[-1]

    def prefill(self, tokens: Sequence[int], start_pos: int, seq: int = 0) -> None:
        """Run ``tokens`` at ``start_pos ..`` of sequence ``seq`` into its cache, computing no logits (a chunk of a
        long prompt that is not its last)."""
        self._run(tokens, start_pos, "none", self._check_seq(seq))

    def prefill_chunks(self, chunks: Sequence[tuple[int, Sequence[int], int]],
                       logits: bool = False) -> np.ndarray | None:
        """Chunks of several sequences' prompts in one forward where they allow it: ``chunks`` holds (sequence,
        tokens, start position) triples (each sequence once, at most ``PREFILL_CHUNK`` tokens, placed as
        ``prefill`` places them). With ``logits``, returns each chunk's last token's logits (shape (len(chunks),
        vocab)), else None. Each chunk's keys, values and logits are bitwise those of its ``prefill`` /
        ``forward_last`` alone (batch invariance: every row's products run in one order whatever the rows around
        it, and each sequence attends over its own cache); a chunk of one token, one whose padded rows would leave
        the cache or wrap a sliding ring, or one whose window a ring has overwritten runs alone."""
        from tg_llm import prefill
        return prefill.prefill_chunks(self, chunks, logits)

    def _check_room(self, start_pos: int, n: int, seq: int) -> None:
        cfg, held = self.config, len(self._tokens[seq])
        if not 0 <= start_pos <= held:
            raise ValueError(f"start_pos {start_pos} leaves a gap: the cache holds {held} "
                             f"positions (use 0..{held})")
        if start_pos + n > cfg.max_context:
            raise ContextLengthError(
                f"{start_pos + n} tokens do not fit in the context of {cfg.max_context} positions "
                f"(model context {cfg.context_length}, max_context {cfg.max_context})")

    def _truncate(self, seq: int, start_pos: int) -> None:
        """Past ``start_pos`` sequence ``seq``'s cache is rewritten now. Nothing to do where it holds exactly
        ``start_pos`` tokens (every decode step): a slot past it is masked (its key is past every query) until a
        later write fills it."""
        if len(self._tokens[seq]) == start_pos:
            return
        self._tokens[seq] = self._tokens[seq][:start_pos]
        for kind in self.kinds:
            kind.forget(seq, start_pos)

    def _run(self, tokens: Sequence[int], start_pos: int, want: str, seq: int, padding: int = 0) -> np.ndarray:
        tokens = [int(t) for t in tokens]
        n = len(tokens)
        if n == 0:
            raise ValueError("forward needs at least one token")
        self._check_room(start_pos, n, seq)
        if not self._window_cached(start_pos, seq):
            # a sliding layer's ring has already overwritten keys the window at start_pos needs: run the
            # cached prefix again (its hidden states depend on every earlier token, so from position 0)
            prefix = self._tokens[seq][:start_pos]
            self.reset(seq)
            out = self._run(prefix + tokens, 0, want, seq)
            return out if want == "last" else out[start_pos:]
        self._truncate(seq, start_pos)
        if n == 1:
            return self._decode([(seq, tokens[0], start_pos)])
        from tg_llm import prefill
        rows = []
        for c in range(0, n, PREFILL_CHUNK):
            chunk = tokens[c:c + PREFILL_CHUNK]
            last_chunk = c + PREFILL_CHUNK >= n
            wanted = want if last_chunk or want == "all" else "none"
            part = prefill.run(self, [(seq, chunk, start_pos + c)], None if wanted == "none" else wanted, padding)
            if part is not None:
                rows.append(part[0])
            self._tokens[seq] = self._tokens[seq] + chunk
        return np.concatenate(rows) if rows else np.zeros((0, self.vocab_size), np.float32)

    def decode(self, steps: Sequence[tuple[int, int, int]], blocks: int = 1) -> np.ndarray:
        """One token for each of several sequences in one batched forward: ``steps`` holds (sequence, token,
        position) triples, each position at most what its sequence's cache holds. Returns their logits
        (float32, shape (len(steps), vocab)) in that order: an array a later step writes into again once nothing
        refers to it or a view of it (a weak reference does not count: copy what a weakref must keep).

        Each row computes exactly what it would alone (batch-invariant): the weights multiply each row with
        the fused dequantizing matmul, whose per-row reduction order does not depend on the row count, and
        attention is per row over its own sequence's cache.

        ``blocks`` > 1 (a pipeline stage): the sequences are cut into that many contiguous blocks, each a forward
        of its own, all started before any logits are collected, so a stage works on one block while the next
        stage works on the one before."""
        steps = [(self._check_seq(int(s)), int(t), int(p)) for s, t, p in steps]
        if not steps:
            return np.zeros((0, self.vocab_size), np.float32)
        if len({s for s, _, _ in steps}) != len(steps):
            raise ValueError("decode: a sequence appears twice in one step")
        direct: list[tuple[int, int, int]] = []
        rerun: list[tuple[int, int, int]] = []
        for step in steps:
            seq, _, pos = step
            self._check_room(pos, 1, seq)
            (direct if self._window_cached(pos, seq) else rerun).append(step)
        out = {}
        for seq, token, pos in rerun:  # rare: a rewind past a sliding ring; recomputed alone
            out[seq] = self._run([token], pos, "last", seq)[-1]
        if direct:
            for seq, _, pos in direct:
                self._truncate(seq, pos)
            rows = self._decode_blocks(direct, blocks)
            if not rerun:  # (direct is steps, in their order)
                return rows
            for (seq, _, _), row in zip(direct, rows, strict=True):
                out[seq] = row
        return np.stack([out[s] for s, _, _ in steps])

    def _decode_blocks(self, steps: list[tuple[int, int, int]], blocks: int) -> np.ndarray:
        """``_decode`` of each block of ``blocks`` contiguous sequences that has steps, all launched first."""
        if blocks <= 1:
            return self._decode(steps)
        launched = []
        for first, rows in self._blocks(blocks):
            block = [step for step in steps if first <= step[0] < first + rows]
            if block:
                launched.append((block, self._decode_launch(block, rows, None, first)))
        by_seq = {seq: row for block, collect in launched for (seq, _, _), row in zip(block, collect(), strict=True)}
        return np.stack([by_seq[seq] for seq, _, _ in steps])

    def batch_rows(self, highest_seq: int) -> int:
        """Rows a batched decode step runs to reach sequence ``highest_seq``: a power of two (at most
        ``sequences``), so a few captured step sizes serve every batch."""
        return min(self.sequences, 1 << highest_seq.bit_length())

    def _window_cached(self, start: int, seq: int) -> bool:
        """Whether every sliding kind still holds sequence ``seq``'s keys of the window before ``start``."""
        return all(kind.holds_window(seq, start) for kind in self.kinds)

    # ---- inputs computed on the host ----

    def _rotary(self, kind: CacheKind, positions: np.ndarray) -> tuple[Any, Any]:
        from tgcore.tensor import Tensor
        cos, sin = self._rotary_rows(kind, positions)
        return Tensor(cos, device=self.device), Tensor(sin, device=self.device)

    def _rotary_rows(self, kind: CacheKind, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rotation's cos and sin rows (float32) of ``positions``, from the kind's table of the positions reached
        so far (a decode step looks rows up instead of computing cos and sin)."""
        reached = int(positions.max(initial=0)) + 1
        if kind.rotary is None or len(kind.rotary[0]) < reached:
            # grown by doubling, not made for all of max_context at once: at a 131072-token context that table is
            # 64 MiB per kind (and ~190 MiB of float64 on the way) for positions most runs never reach
            size = min(self.config.max_context, max(1024, 1 << (reached - 1).bit_length()))
            held = 0 if kind.rotary is None else len(kind.rotary[0])  # only the new rows are computed
            angles = np.arange(held, size, dtype=np.float64)[:, None] * kind.freqs[None, :]
            new = ((np.cos(angles) * kind.cos_scale).astype(np.float32),
                   (np.sin(angles) * kind.cos_scale).astype(np.float32))
            kind.rotary = new if kind.rotary is None else (np.concatenate([kind.rotary[0], new[0]]),
                                                           np.concatenate([kind.rotary[1], new[1]]))
        cos, sin = kind.rotary
        return cos[positions], sin[positions]

    def decode_shapes(self) -> list[tuple[int, int]]:
        """Every (rows, position) whose decode step is a capture of its own: one per row count and attention window,
        smallest windows first (the position is the window's last)."""
        rows = sorted({self.batch_rows(s) for s in range(self.sequences)})
        windows = sorted({decode_window(self.kinds[0].cache_len, p) for p in range(self.config.max_context)})
        return [(r, w - 1) for w in windows for r in rows]

    def warm_up(self, shapes: Sequence[tuple[int, int]], blocks: int = 1) -> None:
        """Capture the batched decode step for each (rows, position) of ``decode_shapes``, so decoding with it
        compiles nothing later (with ``blocks`` > 1, also the full blocks of ``decode(blocks=)`` after the first).
        Every row runs idle (writes only positions its sequence has not reached); a model with sliding-window
        layers forgets its cached tokens (their rings would be overwritten)."""
        for rows, pos in shapes:  # (the first call of a shape captures it)
            self._decode([], rows=rows, idle_pos=pos)
        for pos in sorted({pos for _, pos in shapes}) if blocks > 1 else []:
            for first, rows in self._blocks(blocks)[1:]:
                self._decode_launch([], rows, pos, first)()
        if any(kind.ring for kind in self.kinds):
            self.reset()

    def _blocks(self, blocks: int) -> list[tuple[int, int]]:
        """(first sequence, rows) of each block of ``decode(blocks=)``: a power of two rows, the last maybe fewer."""
        size = 1 << (-(-self.sequences // blocks) - 1).bit_length()
        return [(first, min(size, self.sequences - first)) for first in range(0, self.sequences, size)]

    def _decode(self, steps: list[tuple[int, int, int]], rows: int = 0, idle_pos: int | None = None) -> np.ndarray:
        return self._decode_launch(steps, rows, idle_pos)()

    def _decode_launch(self, steps: list[tuple[int, int, int]], rows: int = 0, idle_pos: int | None = None,
                       first: int = 0) -> Callable[[], np.ndarray]:
        """One token per (sequence, token, position) through the jitted batched step (the first call of a step
        size captures it, every later one replays it); returns what collects the logits. Row r of the step is
        sequence ``first`` + r: the rows 0 .. ``batch_rows`` - 1 run whether or not their sequence decodes now; an idle
        row writes a key its sequence has not reached yet (later overwritten, masked until then) and attends
        only to it. ``first`` > 0 (a block of a pipeline's decode) is a bound variable: one capture for every
        block."""
        from tgcore.uop import UOp
        if self._decode_step is None:
            import tgcore
            buckets = max(1, self.sequences.bit_length() + 1)
            # (twice: the blocks after the first of a pipeline's decode are captures of their own)
            # (capture_first: everything the step keeps, weights and caches, is realized at load)
            self._decode_step = tgcore.jit(self._decode_graph, max_captures=2 * DECODE_WINDOWS * buckets,
                                           capture_first=True)
        by_seq = {seq: (token, pos) for seq, token, pos in steps}
        rows = min(max(rows, self.batch_rows(max(by_seq, default=first) - first)), self.sequences - first)
        first_seq = UOp.variable("first_sequence", 1, self.sequences - rows).bind(first) if first else 0
        tokens, positions, idle = [], [], []
        for r in range(rows):
            seq = first + r
            if seq in by_seq:
                token, pos = by_seq[seq]
            else:  # an idle row: the next position its sequence has not reached (the last, when the cache is full)
                if len(self._tokens[seq]) >= self.config.max_context:
                    self._truncate(seq, self.config.max_context - 1)
                reached = len(self._tokens[seq])
                token, pos = 0, reached if idle_pos is None else max(idle_pos, reached)
                idle.append(r)
            tokens.append(token)
            positions.append(pos)
        x = self._stage_input(tokens, held=True)
        pos_array = np.asarray(positions, np.int64)
        seqs = np.arange(first, first + rows)
        idle_rows = np.zeros(rows, bool)
        idle_rows[idle] = True
        cfg = self.config
        arrays: list[np.ndarray] = []  # per kind: cos, sin, mask, each row's first cache element
        windows = []
        for kind in self.kinds:
            # attend over a window of the cache that covers the slots in use (a power of two or three quarters of
            # one), not the whole cache: one capture per window size and row count
            window = decode_window(kind.cache_len, int(pos_array.max()))
            slots, masks = kind.decode_rows(seqs, pos_array, idle_rows, window)
            cache_size = self.sequences * cfg.n_kv_heads * kind.cache_len * cfg.head_dim
            rows_first = ((seqs * (cfg.n_kv_heads * kind.cache_len) + slots) * cfg.head_dim).astype(
                first_dtype(cache_size))
            arrays += [*self._rotary_rows(kind, pos_array), masks, rows_first]
            windows.append(window)
        if isinstance(x, np.ndarray):  # (the embeddings: held with the rest)
            x, *held = self._step_inputs.fill((rows, first, *windows), [x, *arrays])
        else:
            held = self._step_inputs.fill((rows, first, *windows), arrays)
        inputs = [(cos, sin, mask, RowWrites(rows_first)) for cos, sin, mask, rows_first in
                  zip(held[0::4], held[1::4], held[2::4], held[3::4], strict=True)]
        if self.stage is None:  # (the logits written into an array handed out as it is: no copy)
            out, array = self._step_outputs.take((rows, first), (rows, self.vocab_size), np.float32)
            self._decode_step(x, inputs, first_seq, out)
            collect = (lambda: array) if array is not None else out.numpy
        else:
            collect = self._stage_output(self._decode_step(x, inputs, first_seq), rows)
        for seq, token, _ in steps:
            self._tokens[seq].append(token)  # (a list no caller holds: ``tokens_of`` and ``cached_tokens`` copy)

        def logits_of_steps() -> np.ndarray:
            logits = collect()
            assert logits is not None
            picked = [seq - first for seq, _, _ in steps]
            start = picked[0] if picked else 0
            if picked == list(range(start, start + len(picked))):  # (consecutive rows in order: a view, not a copy)
                return logits[start:start + len(picked)]
            return logits[picked]
        return logits_of_steps

    def _decode_graph(self, x: Any, inputs: list[tuple[Any, Any, Any, Any]], first_seq: Any, out: Any = None) -> Any:
        """The step's logits (the last hidden states on a pipeline stage before the last), or with ``out`` written
        into it (nothing returned)."""
        rows = x.shape[0]
        for layer in self.layers:
            cos, sin, mask, writes = inputs[layer.kind]
            x = self._layer(layer, x, cos, sin, mask, writes, (first_seq, first_seq + rows), dense=False)
        if not self.has_output:
            return x
        if out is None:
            return self._logits(x, dense=False)
        out.assign(self._logits(x, dense=False, buffer=False))
        return None

    def _prefill_graph(self, x: Any, inputs: list[tuple[Any, Any, Any, list[tuple[Any, Any, int, int]]]], pick: Any,
                       seqs: Any, want: str | None, dense: bool) -> Any:
        """The prefill's layers on x (each sequence's padded tokens, dim) for the sequences ``seqs`` (a (first, end)
        range of one, or a list), then the logits ``want`` asks for: the rows ``pick`` selects ("last"), every row
        ("all"), or none (the last hidden state)."""
        for layer in self.layers:
            cos, sin, mask, writes = inputs[layer.kind]
            x = self._layer(layer, x, cos, sin, mask, writes, seqs, dense)
        if want is None or not self.has_output:  # (a pipeline stage before the last passes x on)
            return x
        if want == "last":
            return self._logits(pick @ x, dense=False)
        # (every row's logits: through the head's row lanes, else dense from DENSE_MIN_TOKENS rows even where the
        # other products take the lanes)
        head_lanes = getattr(self.output, "lanes", None) is not None
        return self._logits(x, dense or (not head_lanes and x.shape[0] >= DENSE_MIN_TOKENS))

    # ---- a pipeline stage's ends ----

    def _stage_input(self, ids: list[int], held: bool = False) -> Any:
        """The hidden states the layers start from: the tokens' embeddings (``held``: as a numpy array, for
        ``HeldInputs``), or (a later pipeline stage) what the previous stage sent."""
        from tgcore.tensor import Tensor
        if self.stage is None or self.stage.first:
            if self.stage is not None:
                self.stage.flush()  # (the step about to replay overwrites what the last one sent)
            rows = self.embedding(ids)
            return rows if held else Tensor(rows, device=self.device)
        return self.stage.receive_hidden(len(ids), self.config.dim, self.device)

    def _stage_output(self, out: Any, logit_rows: int | None) -> Callable[[], np.ndarray | None]:
        """What collects the logits (``logit_rows`` of them; None: none wanted) from what the layers returned:
        ``out`` itself in one process; in a pipeline, the stage passes ``out`` on and the first stage receives the
        logits back (the others get an empty (rows, 0) array). Collect before the next step replays: it
        overwrites ``out``."""
        if self.stage is None:
            logits = None if logit_rows is None else out.numpy()
            return lambda: logits
        return self.stage.pass_on(out, logit_rows, self.vocab_size)

    # ---- the network ----

    def _logits(self, x: Any, dense: bool, buffer: bool = True) -> Any:
        """The logits of the rows x, in a buffer of their own (``buffer``), else lazy (assigned by the caller)."""
        cfg = self.config
        w = self.output.dequantized.contiguous() if dense else self.output
        h = rms_norm(x, self.output_norm, cfg.norm_eps)
        logits = linear(h if not dense and _integer_inputs([w]) else h.contiguous(), w)
        if cfg.final_softcap:
            logits = softcap(logits, cfg.final_softcap)
        return logits.contiguous() if buffer else logits

    def _layer(self, layer: _Layer, x: Any, cos: Any, sin: Any, mask: Any,
               writes: list[tuple[Any, Any, int, int]] | RowWrites, seqs: tuple[Any, Any], dense: bool) -> Any:
        """One transformer block on x (T, dim): writes the block's keys/values into its cache (``writes``:
        (sequence, first slot, first token, token count) per contiguous run of slots, or each row at its own slot,
        ``RowWrites``) and attends over the first ``window`` cache slots of the sequences ``seqs`` (first, end: an
        int or a bound variable) with ``mask`` (T, window). One sequence: the T rows are its consecutive tokens; B
        sequences: T = B, row b is the one token of sequence first + b. ``dense``: dequantize each weight into a
        float buffer first (its transpose, so ``x @ W.T`` reads B along the output columns) and run a plain GEMM
        (faster for many rows than the fused dequantizing matmul, which decodes the weight once per row; not
        batch-invariant)."""
        from tgcore.dtype import dtypes
        cfg = self.config
        t = x.shape[0]
        hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        group = nh // nkv
        window = mask.shape[-1]

        def w(weight: Any) -> Any:  # (out, in), dense: a view of an (in, out) buffer
            return weight.dequantized.T.contiguous().T if dense else weight

        def once(v: Any, weights: list[Any]) -> Any:
            """``v`` as a buffer of its own, else each group of output rows of a float product recomputes it; left
            lazy for integer products (``_integer_inputs``): their quantization's two kernels read it once each."""
            return v if not dense and _integer_inputs(weights) else v.contiguous()

        def normed(v: Any, weight: Any, weights: list[Any]) -> Any:
            return once(rms_norm(v, weight, cfg.norm_eps), weights)

        h = normed(x, layer.attn_norm, layer.wqkv)
        qkv = linear_parts(h, [w(m) for m in layer.wqkv], layer.bqkv).contiguous().realize()  # (T, (nh+2nkv)*hd)
        q = qkv.shrink((None, (0, nh * hd))).reshape(t, nh, hd)
        k = qkv.shrink((None, (nh * hd, (nh + nkv) * hd))).reshape(t, nkv, hd)
        v = qkv.shrink((None, ((nh + nkv) * hd, (nh + 2 * nkv) * hd))).reshape(t, nkv, hd)
        if layer.q_norm is not None:
            q = rms_norm(q, layer.q_norm, cfg.norm_eps)
            k = rms_norm(k, layer.k_norm, cfg.norm_eps)
        q = rope(q, cos, sin, cfg.rope_dims, cfg.rope_interleaved).contiguous().realize()
        k = rope(k, cos, sin, cfg.rope_dims, cfg.rope_interleaved)  # computed by the cache write
        if isinstance(writes, RowWrites):  # (a batched decode step: every row at its own slot, one kernel per cache)
            write_rows(layer.cache_k, k, writes.first)
            write_rows(layer.cache_v, v, writes.first)
            writes = []
        for seq, first_slot, first, count in writes:
            rows = ((seq, seq + 1), None, (first_slot, first_slot + count), None)
            keys_in, values_in = (k, v) if count == t else (k.shrink(((first, first + count), None, None)),
                                                               v.shrink(((first, first + count), None, None)))
            for cache, rows_in in ((layer.cache_k, keys_in), (layer.cache_v, values_in)):
                cache.shrink(rows).assign(rows_in.permute(1, 0, 2).reshape(1, nkv, count, hd).cast(cache.dtype))
        keys = _cache_window(layer.cache_k, seqs, window)  # (B, kv heads, window, hd)
        values = _cache_window(layer.cache_v, seqs, window)
        b = keys.shape[0]
        tq = t // b  # queries per sequence
        if keys.dtype != dtypes.float32:
            # a decode step reads a float16 cache as it is (half the bytes); a prefill converts its window once into a
            # buffer (its products then take the float register tile, whose plan does not change with the sequences)
            keys, values = (c.cast(dtypes.float32) if tq == 1 else c.cast(dtypes.float32).contiguous()
                            for c in (keys, values))
        qg = q.reshape(b, tq, nkv, group, hd).permute(0, 2, 3, 1, 4)  # (B, kv heads, group, Tq, hd)
        # (B, kv heads, group, Tq, window); a buffer of its own, else the softmax's last kernel recomputes q.k
        scores = (qg @ keys.reshape(b, nkv, 1, window, hd).transpose(-1, -2)) * cfg.attention_scale
        if cfg.attn_softcap:
            scores = softcap(scores, cfg.attn_softcap)
        scores = scores.contiguous()
        # softmax's numerators in a buffer of their own (else the next matmul recomputes exp per output), the product
        # divided by their sum after it: one exponential per score
        numerators = masked_exp(scores, mask.reshape(b, 1, 1, tq, window)).contiguous()
        attn = (numerators @ values.reshape(b, nkv, 1, window, hd)) / numerators.sum(-1, keepdim=True)
        # a (T, heads * head_dim) buffer: Wo's reduction then runs over one axis (whole quantization blocks)
        attn = attn.permute(0, 3, 1, 2, 4).reshape(t, nh * hd)
        attn = attn.contiguous()
        out = linear(attn, w(layer.wo))
        if layer.post_attn_norm is not None:
            out = rms_norm(out.contiguous(), layer.post_attn_norm, cfg.norm_eps)
        x = (x + out).contiguous().realize()  # (else the FFN kernels recompute it)
        h = normed(x, layer.ffn_norm, layer.w_gate_up)
        ffn = cfg.ffn_dim
        gate_up = linear_parts(h, [w(m) for m in layer.w_gate_up]).contiguous()  # (T, 2 ffn): both halves
        gate, up = gate_up.shrink((None, (0, ffn))), gate_up.shrink((None, (ffn, 2 * ffn)))
        act = gate.silu() if cfg.arch.activation == "silu" else gate.gelu(approximate="tanh")
        # a buffer of its own on either path: the activation's quantization reads it twice (its scales, its rounding)
        # and the silu is ~50 vector ops per 8 values (8 rows x 1536, one core: 86.8 -> 75.0 us with the product)
        up = (act * up).contiguous()
        out = linear(up, w(layer.w_down))
        if layer.post_ffn_norm is not None:
            out = rms_norm(out.contiguous(), layer.post_ffn_norm, cfg.norm_eps)
        return (x + out).contiguous().realize()

    def __repr__(self) -> str:
        c = self.config
        return (f"<Model {c.architecture} {c.name!r}: {c.n_layers} layers, dim {c.dim}, heads {c.n_heads}/"
                f"{c.n_kv_heads}, vocab {self.vocab_size}, context {c.max_context}/{c.context_length} "
                f"on {self.device}>")

"""The tokenizer of a GGUF model: text <-> token ids, from the file's ``tokenizer.ggml.*`` metadata.

``Tokenizer.from_gguf(path)`` reads only the metadata (vocab-only files work). Two vocabulary kinds:

- ``tokenizer.ggml.model = "gpt2"``: byte-level BPE with merges (``tg_llm.tokenizer_bpe``) and a
  pre-tokenizer chosen by ``tokenizer.ggml.pre`` (``tg_llm.pretokenize``);
- ``tokenizer.ggml.model = "llama"``: SentencePiece-style, scores + byte fallback
  (``tg_llm.tokenizer_spm``).

``encode(text, add_special=True, parse_special=False)``:

1. cut the text at special tokens: user-defined tokens always, control tokens (``<|im_start|>``,
   ``<s>``) only with ``parse_special`` (longest match first, leftmost);
2. encode each ordinary fragment with the vocabulary's model (SentencePiece-style vocabularies with
   ``add_space_prefix`` get a space in front of the first fragment and of any fragment right after a
   special token, as llama.cpp does);
3. with ``add_special``, put BOS in front / EOS at the end when ``add_bos_token`` / ``add_eos_token`` say so.

``decode(ids)`` joins the tokens' bytes and decodes UTF-8 (invalid bytes become U+FFFD);
``StreamDecoder`` does the same one token at a time and never returns half a character.
"""
from __future__ import annotations

import codecs
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from typing import Any

from tg_llm.tokenizer_bpe import BPEModel, from_alphabet
from tg_llm.tokenizer_spm import SPACE, SPMModel, byte_token_value


class TokenType(IntEnum):
    """``tokenizer.ggml.token_type`` values."""
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


class TokenizerError(ValueError):
    """The tokenizer metadata is missing, inconsistent or of a kind this package does not support."""


# Texts of tokens that end a turn in common chat formats (ChatML, Llama 3, Phi-3, Gemma, DeepSeek, ...).
EOT_TEXTS = frozenset({
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "<|EOT|>", "<｜end▁of▁sentence｜>", "<|return|>",
})

SUPPORTED_MODELS = ("gpt2", "llama")


class Tokenizer:
    """Text <-> token ids for one vocabulary. Build it with ``from_gguf`` or ``from_metadata``.

    Attributes: ``model`` ("gpt2" or "llama"), ``pre`` (pre-tokenizer name, BPE only), ``vocab_size``,
    ``id_to_token`` (list of token texts as stored), ``token_to_id`` (dict), ``token_types``,
    ``bos_id``/``eos_id``/``unk_id``/``pad_id`` (or None), ``eot_ids`` (every token that ends a turn,
    EOS included), ``add_bos``/``add_eos``/``add_space_prefix``, ``chat_template`` (str or None).
    """

    def __init__(self, tokens: Sequence[str], *, model: str = "gpt2", pre: str = "default",
                 merges: Sequence[str] = (), scores: Sequence[float] | None = None,
                 token_types: Sequence[int] | None = None, bos_id: int | None = None, eos_id: int | None = None,
                 unk_id: int | None = None, pad_id: int | None = None, eot_ids: Iterable[int] = (),
                 add_bos: bool | None = None, add_eos: bool = False, add_space_prefix: bool | None = None,
                 chat_template: str | None = None) -> None:
        if model not in SUPPORTED_MODELS:
            raise TokenizerError(f"tokenizer.ggml.model {model!r} is not supported (supported: "
                                 f"{', '.join(SUPPORTED_MODELS)}; BERT/WordPiece, T5/Unigram and RWKV are not)")
        if not tokens:
            raise TokenizerError("the vocabulary (tokenizer.ggml.tokens) is empty")
        n = len(tokens)
        self.model = model
        self.id_to_token: list[str] = list(tokens)
        self.vocab_size = n
        types = list(token_types) if token_types is not None else [TokenType.NORMAL] * n
        if len(types) != n:
            raise TokenizerError(f"tokenizer.ggml.token_type has {len(types)} entries for {n} tokens")
        self.token_types: list[int] = [int(t) for t in types]
        self.token_to_id: dict[str, int] = {}
        for i, text in enumerate(self.id_to_token):
            self.token_to_id.setdefault(text, i)
        for name, tid in (("bos", bos_id), ("eos", eos_id), ("unknown", unk_id), ("padding", pad_id)):
            if tid is not None and not 0 <= tid < n:
                raise TokenizerError(f"tokenizer.ggml.{name}_token_id {tid} is outside the vocabulary of {n} tokens")
        self.bos_id, self.eos_id, self.unk_id, self.pad_id = bos_id, eos_id, unk_id, pad_id
        self.add_bos = add_bos if add_bos is not None else model == "llama"
        self.add_eos = add_eos
        self.add_space_prefix = add_space_prefix if add_space_prefix is not None else model == "llama"
        self.chat_template = chat_template
        self.pre = pre if model == "gpt2" else None

        special_kinds = (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)
        ends = {t for t in eot_ids if 0 <= t < n}
        if not ends:  # no end-of-turn ids in the metadata: the special tokens common chat formats end turns with
            ends = {i for i, text in enumerate(self.id_to_token) if text in EOT_TEXTS and types[i] in special_kinds}
        if eos_id is not None:
            ends.add(eos_id)
        self.eot_ids: frozenset[int] = frozenset(ends)

        # special-token matchers: user-defined tokens are always cut out, control/unknown only on request
        always = [t for i, t in enumerate(self.id_to_token) if t and types[i] == TokenType.USER_DEFINED]
        on_request = [t for i, t in enumerate(self.id_to_token)
                      if t and types[i] in (TokenType.CONTROL, TokenType.UNKNOWN)]
        self._special_always = _alternation(always)
        self._special_all = _alternation(always + on_request)

        self._impl: BPEModel | SPMModel
        if model == "gpt2":
            if not merges:
                raise TokenizerError("a gpt2 (byte-level BPE) vocabulary needs tokenizer.ggml.merges")
            try:
                self._impl = BPEModel(self.token_to_id, merges, pre, unk_id)
            except ValueError as e:
                raise TokenizerError(str(e)) from e
        else:
            if scores is None:
                scores = [0.0] * n
            if len(scores) != n:
                raise TokenizerError(f"tokenizer.ggml.scores has {len(scores)} entries for {n} tokens")
            byte_ids: dict[int, int] = {}
            for i, text in enumerate(self.id_to_token):
                if types[i] == TokenType.BYTE:
                    value = byte_token_value(text)
                    if value is None:
                        raise TokenizerError(f"token {i} {text!r} has type BYTE but is not written <0xNN>")
                    byte_ids.setdefault(value, i)
            self._impl = SPMModel(self.token_to_id, list(scores), byte_ids, unk_id)
        self._bytes_cache: dict[tuple[int, bool], bytes] = {}

    # ---- construction from GGUF ----

    @classmethod
    def from_gguf(cls, path: str | os.PathLike[str], *, pre: str | None = None) -> Tokenizer:
        """The tokenizer stored in a GGUF file (a full model or a vocab-only file).

        ``pre`` overrides ``tokenizer.ggml.pre`` (e.g. for a file whose pre-tokenizer is unknown).
        """
        import tg_gguf
        with tg_gguf.load(path) as gf:
            metadata = dict(gf.metadata)
        try:
            return cls.from_metadata(metadata, pre=pre)
        except TokenizerError as e:
            raise TokenizerError(f"{os.fspath(path)}: {e}") from e

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], *, pre: str | None = None) -> Tokenizer:
        """The tokenizer described by GGUF metadata (``tokenizer.ggml.*`` and ``tokenizer.chat_template``)."""
        def get(key: str, default: Any = None) -> Any:
            return metadata.get("tokenizer.ggml." + key, default)

        model = get("model")
        if model is None:
            raise TokenizerError("no tokenizer in this file (tokenizer.ggml.model is missing)")
        tokens = get("tokens")
        if tokens is None:
            raise TokenizerError("tokenizer.ggml.tokens is missing")
        if pre is None:
            pre = get("pre", "default")
        template = metadata.get("tokenizer.chat_template")
        eot = [get(k) for k in ("eot_token_id", "eom_token_id") if get(k) is not None]
        return cls(tokens, model=model, pre=pre, merges=get("merges", ()), scores=get("scores"),
                   token_types=get("token_type"), bos_id=get("bos_token_id"), eos_id=get("eos_token_id"),
                   unk_id=get("unknown_token_id"), pad_id=get("padding_token_id"), eot_ids=eot,
                   add_bos=get("add_bos_token"), add_eos=bool(get("add_eos_token", False)),
                   add_space_prefix=get("add_space_prefix"),
                   chat_template=template if isinstance(template, str) else None)

    # ---- encoding ----

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``.

        ``add_special``: add BOS/EOS as ``tokenizer.ggml.add_bos_token``/``add_eos_token`` say.
        ``parse_special``: text of control tokens (``<|im_start|>``) becomes those tokens; without it
        that text is encoded as ordinary characters. User-defined tokens are always recognised.
        """
        out: list[int] = []
        if add_special and self.add_bos:
            if self.bos_id is None:
                raise TokenizerError("add_bos_token is set but the vocabulary has no BOS token")
            out.append(self.bos_id)
        prefix_space = self.model == "llama" and self.add_space_prefix
        prev_special = True
        for fragment, special_id in self._fragments(text, parse_special):
            if special_id is not None:
                out.append(special_id)
                prev_special = True
                continue
            if prefix_space and prev_special:
                fragment = " " + fragment
            out.extend(self._impl.encode(fragment))
            prev_special = False
        if add_special and self.add_eos:
            if self.eos_id is None:
                raise TokenizerError("add_eos_token is set but the vocabulary has no EOS token")
            out.append(self.eos_id)
        return out

    def _fragments(self, text: str, parse_special: bool) -> Iterable[tuple[str, int | None]]:
        """``text`` cut into (ordinary text, None) and (token text, token id) pieces, in order."""
        matcher = self._special_all if parse_special else self._special_always
        if matcher is None:
            if text:
                yield text, None
            return
        pos = 0
        for m in matcher.finditer(text):
            if m.start() > pos:
                yield text[pos:m.start()], None
            yield m.group(), self.token_to_id[m.group()]
            pos = m.end()
        if pos < len(text):
            yield text[pos:], None

    # ---- decoding ----

    def token_bytes(self, token_id: int, skip_special: bool = False) -> bytes:
        """The bytes token ``token_id`` stands for (control tokens: their text, or b"" with ``skip_special``)."""
        key = (token_id, skip_special)
        cached = self._bytes_cache.get(key)
        if cached is not None:
            return cached
        if not 0 <= token_id < self.vocab_size:
            raise TokenizerError(f"token id {token_id} is outside the vocabulary of {self.vocab_size} tokens")
        text = self.id_to_token[token_id]
        kind = self.token_types[token_id]
        if kind in (TokenType.CONTROL, TokenType.UNKNOWN):
            data = b"" if skip_special else text.encode("utf-8")
        elif kind == TokenType.USER_DEFINED:
            data = text.encode("utf-8")
        elif self.model == "gpt2":
            data = from_alphabet(text)
        elif kind == TokenType.BYTE:
            value = byte_token_value(text)
            data = bytes([value]) if value is not None else text.encode("utf-8")
        else:
            data = text.replace(SPACE, " ").encode("utf-8")
        self._bytes_cache[key] = data
        return data

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """The text of ``ids``. Bytes that are not valid UTF-8 become U+FFFD.

        ``skip_special`` leaves out control tokens (BOS, EOS, ``<|im_end|>``).
        """
        data = b"".join([self.token_bytes(i, skip_special) for i in ids])
        if self.model == "llama" and self.add_space_prefix and data.startswith(b" "):
            data = data[1:]  # the space the encoder put in front (as StreamDecoder drops it)
        return data.decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special: bool = False) -> StreamDecoder:
        """A ``StreamDecoder`` for this tokenizer."""
        return StreamDecoder(self, skip_special=skip_special)

    # ---- chat ----

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            **kwargs: Any) -> str:
        """Render ``messages`` with this file's chat template (ChatML when it has none).

        ``bos_token``/``eos_token`` are this vocabulary's; other keyword arguments go to the template.
        """
        from tg_llm.chat_template import render_chat
        kwargs.setdefault("bos_token", self.id_to_token[self.bos_id] if self.bos_id is not None else "")
        kwargs.setdefault("eos_token", self.id_to_token[self.eos_id] if self.eos_id is not None else "")
        return render_chat(self.chat_template, messages, add_generation_prompt=add_generation_prompt, **kwargs)

    def encode_chat(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                    **kwargs: Any) -> list[int]:
        """Token ids of ``messages`` rendered with the chat template, special tokens parsed, BOS exactly once:
        the template's own when it writes one, else added when ``add_bos_token`` says so."""
        ids = self.encode(self.apply_chat_template(messages, add_generation_prompt, **kwargs), add_special=False,
                          parse_special=True)
        if self.add_bos and self.bos_id is not None and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id, *ids]
        return ids

    def __repr__(self) -> str:
        pre = f", pre={self.pre!r}" if self.pre else ""
        return f"Tokenizer(model={self.model!r}{pre}, vocab_size={self.vocab_size})"


class StreamDecoder:
    """Decode tokens one at a time without ever returning part of a UTF-8 character.

    ``add(token_id)`` returns the text that is complete so far (possibly ""); bytes of a character
    split across tokens wait for the rest. ``flush()`` returns what is left at the end (an incomplete
    character becomes U+FFFD). For SentencePiece-style vocabularies with a space prefix, the space in
    front of the first text is dropped, as a whole-sequence decode does.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._strip_space = tokenizer.model == "llama" and tokenizer.add_space_prefix

    def add(self, token_id: int) -> str:
        """Feed one token; return the newly completed text."""
        data = self.tokenizer.token_bytes(token_id, self.skip_special)
        if self._strip_space and data:
            self._strip_space = False
            if data.startswith(b" "):
                data = data[1:]
        return self._utf8.decode(data)

    def add_many(self, ids: Iterable[int]) -> str:
        """Feed several tokens; return the newly completed text."""
        return "".join(self.add(i) for i in ids)

    def flush(self) -> str:
        """End of stream: the text still held back (an incomplete character as U+FFFD)."""
        return self._utf8.decode(b"", final=True)


def _alternation(texts: list[str]) -> re.Pattern[str] | None:
    """A pattern matching any of ``texts``, longest first (so ``<|im_start|>`` wins over ``<|im``)."""
    if not texts:
        return None
    ordered = sorted(set(texts), key=lambda t: (-len(t), t))
    return re.compile("|".join(re.escape(t) for t in ordered))

"""tg-llm: what an LLM server needs around the model.

- ``Tokenizer.from_gguf(path)``: byte-level BPE and SentencePiece-style vocabularies read from GGUF
  metadata; ``encode``/``decode`` and ``StreamDecoder`` (``tg_llm.tokenizer``).
- ``ChatTemplate`` / ``render_chat``: the file's jinja2 chat template in a sandbox, as Hugging Face
  renders it (``tg_llm.chat_template``).
- ``Sampler``, ``SamplingParams``, ``StopChecker``: choosing the next token from a logits row and
  stopping on stop strings or end tokens (``tg_llm.sampling``).

Importing this package is cheap; each name imports its module (and numpy, jinja2, regex) on first use.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Tokenizer": "tg_llm.tokenizer",
    "TokenizerError": "tg_llm.tokenizer",
    "StreamDecoder": "tg_llm.tokenizer",
    "TokenType": "tg_llm.tokenizer",
    "ChatTemplate": "tg_llm.chat_template",
    "ChatTemplateError": "tg_llm.chat_template",
    "render_chat": "tg_llm.chat_template",
    "Sampler": "tg_llm.sampling",
    "SamplingParams": "tg_llm.sampling",
    "Sample": "tg_llm.sampling",
    "StopChecker": "tg_llm.sampling",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tg_llm' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

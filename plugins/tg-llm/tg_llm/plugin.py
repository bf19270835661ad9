"""The tgcore plugin ``llm``.

No hooks yet: ``tg serve llm`` (an OpenAI-compatible server) will register here. Cheap to
import: the tokenizer, chat templates (jinja2) and sampling (numpy) load when first used.
"""
from __future__ import annotations

TG_HOOKSPEC_VERSION = 1

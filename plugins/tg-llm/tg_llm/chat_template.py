"""Chat templates: a list of messages in, the prompt text out.

A GGUF file carries its model's Hugging Face chat template (``tokenizer.chat_template``, jinja2).
``ChatTemplate(source)`` compiles it the way ``transformers`` does, so a template renders here exactly
as it does there:

- ``jinja2.sandbox.ImmutableSandboxedEnvironment`` (templates come with downloaded files: no access to
  Python internals, no mutating the messages), ``trim_blocks=True``, ``lstrip_blocks=True``, the
  ``loopcontrols`` extension (``{% break %}``, ``{% continue %}``) and ``{% generation %}`` blocks;
- variables ``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token`` and anything else
  passed (``tools``, ``documents``, ...); globals ``raise_exception(msg)`` and ``strftime_now(fmt)``;
- a ``tojson`` filter that is ``json.dumps`` with ``ensure_ascii=False`` (jinja2's own escapes HTML
  characters, which Hugging Face's does not), taking ``indent``, ``separators`` and ``sort_keys``.

A file without a template gets ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n``). Any problem in a
template (syntax, a ``raise_exception`` call, a blocked attribute, a type error) is a
``ChatTemplateError``.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# Built-in templates for ``--chat-template NAME`` (the turn formats of these model families)
GEMMA = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] + '\n\n' %}"
    "{% else %}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' + ns.system"
    " + message['content'] | trim + '<end_of_turn>\n' }}{% set ns.system = '' %}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
    " + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
PHI3 = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
BUILTIN_TEMPLATES = {"chatml": CHATML, "gemma": GEMMA, "llama3": LLAMA3, "phi3": PHI3}


def chat_template_source(name_or_path: str) -> str:
    """The template ``--chat-template`` names: a built-in (``chatml``, ``gemma``, ``llama3``, ``phi3``) or a
    file holding a Jinja template. It is compiled here, so a bad one fails before the model loads."""
    from pathlib import Path
    if name_or_path in BUILTIN_TEMPLATES:
        source = BUILTIN_TEMPLATES[name_or_path]
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise ChatTemplateError(f"chat template {name_or_path!r} is neither a file nor a built-in "
                                    f"({', '.join(BUILTIN_TEMPLATES)})")
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ChatTemplateError(f"chat template file {name_or_path!r} cannot be read: {e}") from e
    ChatTemplate(source)
    return source


class ChatTemplateError(ValueError):
    """A chat template that does not compile or fails while rendering."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template raised: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


_ENV: Any = None


def _environment() -> Any:
    """The shared sandboxed jinja2 environment (built on first use: jinja2 is imported only here)."""
    global _ENV
    if _ENV is None:
        import jinja2.ext
        from jinja2 import nodes
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        class GenerationBlock(jinja2.ext.Extension):
            """``{% generation %}...{% endgeneration %}``: marks the assistant's text; renders its body."""
            tags = {"generation"}

            def parse(self, parser: Any) -> Any:
                lineno = next(parser.stream).lineno
                body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                return nodes.Scope(body, lineno=lineno)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[GenerationBlock, jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        _ENV = env
    return _ENV


class ChatTemplate:
    """A compiled chat template; ``source=None`` (a file without a template) means ChatML."""

    def __init__(self, source: str | None) -> None:
        import jinja2
        self.source = CHATML if source is None else source
        self.is_default = source is None
        try:
            self._template = _environment().from_string(self.source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template does not compile: {e.message} (line {e.lineno})") from e

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = False,
               **kwargs: Any) -> str:
        """The prompt for ``messages`` (dicts with ``role`` and ``content``, as in the OpenAI API).

        ``bos_token``/``eos_token`` default to ""; further keyword arguments (``tools``, ...) become
        template variables.
        """
        import jinja2
        from jinja2.sandbox import SecurityError
        kwargs.setdefault("bos_token", "")
        kwargs.setdefault("eos_token", "")
        try:
            return self._template.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                         **kwargs)
        except ChatTemplateError:
            raise
        except SecurityError as e:
            raise ChatTemplateError(f"chat template blocked by the sandbox: {e}") from e
        except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError,
                ZeroDivisionError, OverflowError, RecursionError) as e:
            raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from e

    def __repr__(self) -> str:
        return "ChatTemplate(ChatML)" if self.is_default else f"ChatTemplate({len(self.source)} chars)"


_COMPILED: dict[str | None, ChatTemplate] = {}


def render_chat(source: str | None, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = False,
                **kwargs: Any) -> str:
    """Render ``messages`` with template ``source`` (None: ChatML); compiled templates are reused."""
    template = _COMPILED.get(source)
    if template is None:
        if len(_COMPILED) > 64:
            _COMPILED.clear()
        template = _COMPILED[source] = ChatTemplate(source)
    return template.render(messages, add_generation_prompt=add_generation_prompt, **kwargs)

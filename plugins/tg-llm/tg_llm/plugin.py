"""The tgcore plugin ``llm``.

No hooks yet: ``tg serve llm`` (an OpenAI-compatible server) will register here. Cheap to
import: the tokenizer, chat templates (jinja2) and sampling (numpy) load when first used.
"""
from __future__ import annotations

import tgcore
from tgcore.plugins.hookspecs import RegisterApp

TG_HOOKSPEC_VERSION = 1


# ---- tg serve llm (the OpenAI-compatible server and chat page) ----

@tgcore.hookimpl
def tg_register_apps(register: RegisterApp) -> None:
    """``tg serve llm`` (``tg_llm.server``); FastAPI, uvicorn and the model load only when it runs."""
    def run_server(argv: list[str]) -> int:
        from tg_llm.server import run
        return run(argv)

    register("llm", run_server, "OpenAI-compatible server and chat page for a GGUF model (tg serve llm --help)")

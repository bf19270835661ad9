"""The tgcore plugin ``llm``.

Hooks: ``tg llm chat`` / ``tg llm bench`` (``tg_add_commands``) and ``tg serve llm``
(``tg_register_apps``). Cheap to import: the model, tokenizer, chat templates (jinja2), sampling
(numpy) and the server load when a command runs.
"""
from __future__ import annotations

import argparse

import tgcore
from tgcore.plugins.hookspecs import RegisterApp

TG_HOOKSPEC_VERSION = 1


@tgcore.hookimpl
def tg_add_commands(subparsers: argparse._SubParsersAction) -> None:
    """``tg llm chat`` / ``tg llm bench`` (tg_llm.cli)."""
    from tg_llm.cli import add_commands
    add_commands(subparsers)


# ---- tg serve llm (the OpenAI-compatible server and chat page) ----

@tgcore.hookimpl
def tg_register_apps(register: RegisterApp) -> None:
    """``tg serve llm`` (``tg_llm.server``); FastAPI, uvicorn and the model load only when it runs."""
    def run_server(argv: list[str]) -> int:
        from tg_llm.server import run
        return run(argv, exit_process=True)

    register("llm", run_server, "OpenAI-compatible server and chat page for a GGUF model (tg serve llm --help)")

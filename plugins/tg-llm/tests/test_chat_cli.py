"""``tg llm chat``: its sampling settings (the server's defaults, then its flags)."""
from __future__ import annotations

import argparse

from llm_testutil import smollm2_path


def chat_args(*argv: str) -> argparse.Namespace:
    from tg_llm.cli import add_commands
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    return parser.parse_args(["llm", "chat", "--model", str(smollm2_path()), *argv])


def test_chat_uses_the_server_defaults_then_its_flags() -> None:
    from tg_llm.cli import chat_sampling
    from tg_llm.sampling import SERVER_DEFAULTS
    assert chat_sampling(chat_args()) == SERVER_DEFAULTS  # SmolLM2's file has no general.sampling.* keys
    got = chat_sampling(chat_args("--temperature", "0", "--top-k", "3", "--repeat-penalty", "1.1"))
    assert got == {**SERVER_DEFAULTS, "temperature": 0.0, "top_k": 3, "repetition_penalty": 1.1}

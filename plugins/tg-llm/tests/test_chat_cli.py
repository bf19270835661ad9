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


def test_chat_non_finite_flag_is_a_cli_error() -> None:
    import pytest
    from tg_llm.cli import CliError, chat_sampling
    with pytest.raises(CliError, match="repetition_penalty must be a finite number"):
        chat_sampling(chat_args("--repeat-penalty", "inf"))


def test_piped_chat_ctrl_c_stops_the_reply_then_quits() -> None:
    """Piped input: no progress-bar redraws on stderr (not a terminal), no ``> `` prompt on stdout. Ctrl-C
    (SIGINT) during a reply stops it and the chat waits for the next line; a second one quits with status 0."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time
    cmd = [sys.executable, "-m", "tgcore.cli", "llm", "chat", "--model", str(smollm2_path()), "--temperature", "0",
           "--max-context", "512", "--max-tokens", "480"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    out: list[bytes] = []
    err: list[bytes] = []

    def pump(stream, into) -> None:
        for chunk in iter(lambda: stream.read1(4096), b""):
            into.append(chunk)
    threads = [threading.Thread(target=pump, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err), daemon=True)]
    for t in threads:
        t.start()

    def wait_for(check, what: str) -> None:
        deadline = time.monotonic() + 120
        while not check():
            assert proc.poll() is None, f"chat exited early ({what}): {b''.join(err).decode()}"
            assert time.monotonic() < deadline, f"no {what}: {b''.join(err).decode()}"
            time.sleep(0.02)
    try:
        proc.stdin.write(b"Count from 1 to 1000, one number per line.\n")
        proc.stdin.flush()
        wait_for(lambda: len(b"".join(out)) > 8, "reply")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: b"[stopped]" in b"".join(err), "[stopped] after the first Ctrl-C")
        time.sleep(0.5)
        assert proc.poll() is None  # still chatting
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    for t in threads:
        t.join(10)
    stdout, stderr = b"".join(out).decode(), b"".join(err).decode()
    assert not stdout.startswith("> ") and "\n> " not in stdout
    assert "\r" not in stderr and "loading [" not in stderr and "Traceback" not in stderr, stderr

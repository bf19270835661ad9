"""``tg serve llm`` live on a loopback port with the real SmolLM2 model, checked with the official ``openai``
client (its parsing of responses and streams, and its mapping of statuses to exception classes, is the
reference for the wire format) and raw ``httpx`` for the SSE framing and error JSON.

One server is shared by every test here (``test_server_helpers.shared_server``); generation is slow on
the CPU, so tests ask for few tokens and reuse a greedy baseline. The last test sends SIGTERM to the
shared server while a stream is open.
"""
from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from typing import Any

import pytest
from test_server_helpers import MODEL_ID, MODEL_NAME, require, shared_server, smollm2_path

CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def server() -> Any:
    return shared_server()


@pytest.fixture(scope="module")
def client(server: Any) -> Any:
    openai = require("openai", "pip install openai")
    return openai.OpenAI(base_url=server.url("/v1"), api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from tg_llm import Tokenizer
    return Tokenizer.from_gguf(smollm2_path())


@pytest.fixture(scope="module")
def greedy_chat(client: Any) -> Any:
    """The greedy (temperature 0) reply to CHAT, 6 tokens, with logprobs: the baseline other tests compare to."""
    return client.chat.completions.create(model=MODEL_ID, messages=CHAT, temperature=0, max_tokens=6,
                                          logprobs=True, top_logprobs=3)


@pytest.fixture(scope="module")
def greedy_completion(client: Any) -> Any:
    return client.completions.create(model=MODEL_ID, prompt=PROMPT, temperature=0, max_tokens=8)


def chat_prompt_tokens(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return len(tokenizer.encode(text, add_special=True, parse_special=True))


def sse_lines(server: Any, path: str, body: dict[str, Any]) -> list[str]:
    """The non-empty lines of a streamed response, read raw."""
    import httpx
    with httpx.stream("POST", server.url(path), json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return [line for line in r.iter_lines() if line]


# ---- health, models, chat page ----

def test_health_models_and_page(server: Any, client: Any) -> None:
    import httpx
    health = httpx.get(server.url("/health"))
    assert health.status_code == 200 and health.json()["status"] == "ok"
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert client.models.retrieve(MODEL_ID).id == MODEL_NAME  # the file stem is an alias
    assert client.models.retrieve(MODEL_NAME).id == MODEL_NAME
    # the file has no general.sampling.* keys: llama.cpp's server's defaults
    from tg_llm.sampling import SERVER_DEFAULTS
    card = models.data[0].model_dump()
    assert card["sampling"] == SERVER_DEFAULTS and card["aliases"] == [MODEL_ID]
    page = httpx.get(server.url("/"))
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/v1/chat/completions" in page.text


def test_load_progress_and_time_logged(server: Any) -> None:
    log = server.log()
    assert "100% (" in log  # the progress bar reached the end
    assert f"loaded {MODEL_NAME}" in log and " s" in log.split(f"loaded {MODEL_NAME}")[1].splitlines()[0]


# ---- chat ----

def test_chat_non_streaming(greedy_chat: Any, tokenizer: Any) -> None:
    r = greedy_chat
    assert r.object == "chat.completion" and r.model == MODEL_NAME
    choice = r.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens == chat_prompt_tokens(tokenizer, CHAT)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    content = choice.logprobs.content
    assert r.usage.completion_tokens == len(content) <= 6
    if choice.finish_reason == "length":
        assert len(content) == 6
        assert "".join(bytes(t.bytes).decode("utf-8", "replace") for t in content) == choice.message.content
    for t in content:  # greedy: the chosen token is the most likely one
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == pytest.approx(t.logprob)
        assert [a.logprob for a in t.top_logprobs] == sorted((a.logprob for a in t.top_logprobs), reverse=True)


def test_chat_streaming_matches(client: Any, greedy_chat: Any) -> None:
    stream = client.chat.completions.create(model=MODEL_ID, messages=CHAT, temperature=0, max_tokens=6, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.id == chunks[0].id and c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == greedy_chat.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == greedy_chat.choices[0].finish_reason and not any(finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump() == greedy_chat.usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_sse_framing(server: Any) -> None:
    lines = sse_lines(server, "/v1/chat/completions", {"model": MODEL_ID, "messages": CHAT, "max_tokens": 2,
                                                       "temperature": 0, "stream": True})
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    first = json.loads(lines[0][6:])
    assert first["choices"][0]["delta"]["role"] == "assistant"
    last = json.loads(lines[-2][6:])
    assert last["choices"][0]["finish_reason"] in ("stop", "length") and "usage" not in last


def test_model_may_be_omitted_and_llama_cpp_spellings(server: Any, greedy_chat: Any) -> None:
    """One model is served, so ``model`` may be left out (as llama.cpp's server allows); ``repeat_penalty`` and
    ``repeat_last_n`` are accepted as llama.cpp spells them (1.0 is no penalty: the greedy reply is unchanged).
    The body is JSON with no ``Content-Type`` (raw bytes), then with curl -d's form type."""
    import httpx
    body = json.dumps({"messages": CHAT, "temperature": 0, "max_tokens": 6, "repeat_penalty": 1.0,
                       "repeat_last_n": 8}).encode()
    for headers in ({}, {"content-type": "application/x-www-form-urlencoded"}):
        r = httpx.post(server.url("/v1/chat/completions"), content=body, headers=headers, timeout=300)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == MODEL_NAME
        assert r.json()["choices"][0]["message"]["content"] == greedy_chat.choices[0].message.content


def test_seed_reproducible_with_n(client: Any) -> None:
    def run() -> list[str]:
        r = client.chat.completions.create(model=MODEL_ID, messages=CHAT, temperature=1.0, max_tokens=4, seed=1234,
                                           n=2)
        assert [c.index for c in r.choices] == [0, 1]
        assert 2 <= r.usage.completion_tokens <= 8  # both choices count
        return [c.message.content for c in r.choices]
    assert run() == run()


def test_stop_strings(client: Any, greedy_completion: Any) -> None:
    text = greedy_completion.choices[0].text
    assert greedy_completion.choices[0].finish_reason == "length" and len(text) >= 6, text
    at = len(text) // 2
    stop = text[at:at + 3]
    expected = text[:text.index(stop)]
    r = client.completions.create(model=MODEL_ID, prompt=PROMPT, temperature=0, max_tokens=8, stop=[stop, "\x00"])
    assert r.choices[0].text == expected and r.choices[0].finish_reason == "stop"
    stream = client.completions.create(model=MODEL_ID, prompt=PROMPT, temperature=0, max_tokens=8, stop=stop,
                                       stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"


# ---- completions ----

def test_completions_non_streaming_and_streaming(client: Any, greedy_completion: Any, tokenizer: Any) -> None:
    r = greedy_completion
    assert r.object == "text_completion" and r.model == MODEL_NAME
    assert r.usage.prompt_tokens == len(tokenizer.encode(PROMPT))
    assert r.usage.completion_tokens == 8 and r.usage.total_tokens == r.usage.prompt_tokens + 8
    stream = client.completions.create(model=MODEL_ID, prompt=PROMPT, temperature=0, max_tokens=8, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == r.choices[0].text
    assert chunks[-1].usage.model_dump() == r.usage.model_dump()


def test_completions_echo_logprobs(client: Any, tokenizer: Any) -> None:
    ids = tokenizer.encode(PROMPT)
    r = client.completions.create(model=MODEL_ID, prompt=PROMPT, temperature=0, max_tokens=2, echo=True, logprobs=2)
    choice = r.choices[0]
    assert choice.text.startswith(PROMPT)
    lp = choice.logprobs
    n = len(ids) + 2
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens[:len(ids)]) == PROMPT
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[0] == 0
    assert [choice.text[o:o + len(t)] for o, t in zip(lp.text_offset, lp.tokens, strict=True)] == lp.tokens
    for k in range(1, n):  # the token's own logprob is in the top-2 or below both
        top = lp.top_logprobs[k]
        assert len(top) == 2
        assert lp.tokens[k] in top or lp.token_logprobs[k] <= min(top.values()) + 1e-9
    for k in range(len(ids), n):  # generated greedily: the top token
        assert lp.token_logprobs[k] == pytest.approx(max(lp.top_logprobs[k].values()))
    # scoring only: max_tokens 0 with echo gives the same prompt log-probabilities
    score = client.completions.create(model=MODEL_ID, prompt=ids, max_tokens=0, echo=True, logprobs=0)
    assert score.choices[0].text == PROMPT and score.usage.completion_tokens == 0
    assert score.choices[0].logprobs.token_logprobs == pytest.approx(lp.token_logprobs[:len(ids)])


# ---- errors ----

def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL_ID, "messages": CHAT, "max_tokens": 1, **fields}


ERROR_CASES = [
    # (name, path, body (dict -> JSON, bytes -> raw), status, code, param)
    ("malformed JSON", "/v1/chat/completions", b'{"model": "x", ', 400, "invalid_json", None),
    ("body not an object", "/v1/chat/completions", b"[1, 2]", 400, "invalid_type", None),
    ("missing messages", "/v1/chat/completions", {"model": MODEL_ID}, 400, "missing_required_parameter", "messages"),
    ("temperature a string", "/v1/chat/completions", _chat(temperature="hot"), 400, "invalid_type", "temperature"),
    ("temperature too high", "/v1/chat/completions", _chat(temperature=3), 400, "invalid_value", "temperature"),
    ("max_tokens a string", "/v1/chat/completions", _chat(max_tokens="5"), 400, "invalid_type", "max_tokens"),
    ("n a bool", "/v1/chat/completions", _chat(n=True), 400, "invalid_type", "n"),
    ("bad role", "/v1/chat/completions", _chat(messages=[{"role": "wizard", "content": "hi"}]), 400,
     "invalid_value", "messages[0].role"),
    ("content a number", "/v1/chat/completions", _chat(messages=[{"role": "user", "content": 5}]), 400,
     "invalid_type", "messages[0].content"),
    ("five stop strings", "/v1/chat/completions", _chat(stop=list("abcde")), 400, "invalid_value", "stop"),
    ("top_logprobs 21", "/v1/chat/completions", _chat(logprobs=True, top_logprobs=21), 400, "invalid_value",
     "top_logprobs"),
    ("unknown model", "/v1/chat/completions", _chat(model="gpt-4o"), 404, "model_not_found", "model"),
    ("two repetition penalties", "/v1/chat/completions", _chat(repetition_penalty=1.1, repeat_penalty=1.2), 400,
     None, "repeat_penalty"),
    ("repetition_penalty 1e400 (inf)", "/v1/chat/completions",
     json.dumps(_chat(repetition_penalty=1.5)).replace("1.5", "1e400").encode(), 400, "invalid_value",
     "repetition_penalty"),
    ("repeat_penalty Infinity", "/v1/completions", json.dumps({"model": MODEL_ID, "prompt": "a",
     "repeat_penalty": math.inf}).encode(), 400, "invalid_value", "repeat_penalty"),
    ("top_p NaN", "/v1/chat/completions", json.dumps(_chat(top_p=math.nan)).encode(), 400, "invalid_value",
     "top_p"),
    ("repeat_last_n -2", "/v1/chat/completions", _chat(repeat_last_n=-2), 400, "invalid_value", "repeat_last_n"),
    ("tools", "/v1/chat/completions", _chat(tools=[{"type": "function", "function": {"name": "f"}}]), 400,
     "unsupported_parameter", "tools"),
    ("json mode", "/v1/chat/completions", _chat(response_format={"type": "json_object"}), 400,
     "unsupported_parameter", "response_format"),
    ("n too large", "/v1/chat/completions", _chat(n=50), 400, None, "n"),
    ("image content", "/v1/chat/completions",
     _chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]), 400,
     "unsupported_parameter", "messages[0].content[0].type"),
    ("prompt too long", "/v1/chat/completions", _chat(messages=[{"role": "user", "content": "hi " * 200}]), 400,
     "context_length_exceeded", "messages"),
    ("max_tokens past the context", "/v1/chat/completions", _chat(max_tokens=500), 400, "context_length_exceeded",
     "messages"),
    ("completion prompt too long", "/v1/completions", {"model": MODEL_ID, "prompt": "word " * 200}, 400,
     "context_length_exceeded", "prompt"),
    ("completion logprobs 6", "/v1/completions", {"model": MODEL_ID, "prompt": "a", "logprobs": 6}, 400,
     "invalid_value", "logprobs"),
    ("completion prompt a number", "/v1/completions", {"model": MODEL_ID, "prompt": 5}, 400, "invalid_type",
     "prompt"),
    ("token id outside the vocabulary", "/v1/completions", {"model": MODEL_ID, "prompt": [10 ** 7]}, 400, None,
     "prompt"),
    ("completion unknown model", "/v1/completions", {"model": "davinci", "prompt": "a"}, 404, "model_not_found",
     "model"),
    ("unknown route", "/v1/embeddings", {"model": MODEL_ID, "input": "a"}, 404, "unknown_url", None),
]


@pytest.mark.parametrize("name,path,body,status,code,param", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_error_responses(server: Any, name: str, path: str, body: Any, status: int, code: str | None,
                         param: str | None) -> None:
    import httpx
    if isinstance(body, bytes):
        r = httpx.post(server.url(path), content=body, headers={"content-type": "application/json"})
    else:
        r = httpx.post(server.url(path), json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["code"] == code and err["param"] == param
    assert err["type"] == "invalid_request_error"


def test_errors_through_openai_client(client: Any) -> None:
    openai = require("openai", "pip install openai")
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=CHAT, max_tokens=1)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "x " * 300}])
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_ID, messages=CHAT, tools=[
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
    assert e.value.param == "tools"


# ---- concurrency, disconnects, robustness ----

def test_infinite_penalty_rejected_while_a_stream_runs(server: Any, client: Any, greedy_chat: Any) -> None:
    """An infinite repetition penalty (JSON 1e400) is a 400 that never reaches the worker, whose failure would end
    every running job: a stream open meanwhile ends as it would alone."""
    import httpx
    stream = client.chat.completions.create(model=MODEL_ID, messages=CHAT, temperature=0, max_tokens=6, stream=True)
    chunks = [next(stream)]  # (the stream is running: its first chunk came)
    body = json.dumps(_chat(temperature=0, repetition_penalty=1.5)).replace("1.5", "1e400")
    r = httpx.post(server.url("/v1/chat/completions"), content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "repetition_penalty", r.text
    chunks += list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == greedy_chat.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == greedy_chat.choices[0].finish_reason


def test_concurrent_clients(server: Any, greedy_chat: Any) -> None:
    openai = require("openai", "pip install openai")
    expected = greedy_chat.choices[0].message.content
    results: dict[int, Any] = {}

    def worker(i: int) -> None:
        c = openai.OpenAI(base_url=server.url("/v1"), api_key="unused", max_retries=0, timeout=600)
        try:
            if i % 2:
                chunks = list(c.chat.completions.create(model=MODEL_ID, messages=CHAT, temperature=0, max_tokens=6,
                                                        stream=True, stream_options={"include_usage": True}))
                text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
                finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1]
                results[i] = (text, finish, chunks[-1].usage.completion_tokens)
            else:
                r = c.chat.completions.create(model=MODEL_ID, messages=CHAT, temperature=0, max_tokens=6)
                results[i] = (r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    want = (expected, greedy_chat.choices[0].finish_reason, greedy_chat.usage.completion_tokens)
    assert results == {i: want for i in range(8)}


def test_client_disconnect_stops_generation(server: Any) -> None:
    import httpx
    body = {"model": MODEL_ID, "messages": CHAT, "max_tokens": 80, "temperature": 0,
            "stop": ["\x00"], "stream": True}
    with httpx.stream("POST", server.url("/v1/chat/completions"), json=body, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content":"' in line and '"role"' not in line:
                break  # the first generated text: now go away
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "client went away" in server.log():
            break
        time.sleep(0.2)
    line = next(x for x in server.log().splitlines() if "client went away" in x)
    stopped_after = int(line.split("after ")[1].split()[0])
    assert stopped_after < 80
    while time.monotonic() < deadline and httpx.get(server.url("/health")).json()["queue"]:
        time.sleep(0.2)
    assert httpx.get(server.url("/health")).json()["queue"] == 0


def test_survives_malformed_requests(server: Any, client: Any) -> None:
    import httpx
    bodies: list[bytes] = [b"", b"{", b"null", b"[]", b'"x"', b"\xff\xfe\x00", b'{"model": 1}', b"{" * 5000,
                           json.dumps({"model": MODEL_ID, "messages": [{"role": "user"}] * 3}).encode(),
                           json.dumps({"model": MODEL_ID, "messages": "hi"}).encode(),
                           json.dumps({"model": MODEL_ID, "prompt": [[1, "a"]]}).encode()]
    statuses = []
    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        for i in range(190):
            path = "/v1/completions" if i % 3 == 0 else "/v1/chat/completions"
            r = http.post(path, content=bodies[i % len(bodies)], headers={"content-type": "application/json"})
            statuses.append(r.status_code)
            assert "error" in r.json()
    assert set(statuses) == {400}
    for _ in range(10):  # not even HTTP
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"\x16\x03\x01 GARBAGE \r\n\r\n")
            s.settimeout(10)
            try:
                s.recv(1024)
            except (TimeoutError, ConnectionError):
                pass
    assert httpx.get(server.url("/health")).status_code == 200
    r = client.chat.completions.create(model=MODEL_ID, messages=CHAT, temperature=0, max_tokens=1)
    assert r.choices[0].finish_reason in ("stop", "length")


def test_access_log(server: Any) -> None:
    log = server.log()
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in log
    assert '"POST /v1/chat/completions HTTP/1.1" 400' in log
    assert "prompt=" in log and "completion=" in log
    # time to first token and the decode rate (from the first token to the last) of a generating request
    line = next(ln for ln in log.splitlines()
                if '"POST /v1/chat/completions HTTP/1.1" 200' in ln and "finish=length" in ln)
    assert re.search(r" ttft=\d+\.\d{3}s decode=\d+\.\dtok/s ", line), line


def test_metrics(server: Any) -> None:
    """GET /metrics, read with prometheus-client's own text parser: the requests the tests above made."""
    import httpx
    parser = require("prometheus_client.parser", "pip install prometheus-client")
    r = httpx.get(server.url("/metrics"))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in parser.text_string_to_metric_families(r.text) for s in family.samples}

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]
    assert value("tg_llm_requests_total", path="/v1/chat/completions", status="200") >= 5
    assert value("tg_llm_requests_total", path="/v1/chat/completions", status="400") >= 5
    assert value("tg_llm_completion_tokens_total") >= 20 and value("tg_llm_prompt_tokens_total") >= 20
    assert value("tg_llm_decode_tokens_total") > 0 and value("tg_llm_decode_seconds_total") > 0
    assert value("tg_llm_decode_tokens_per_second") > 0 and value("tg_llm_prefill_tokens_per_second") > 0
    count = value("tg_llm_time_to_first_token_seconds_count")
    assert count >= 5 and value("tg_llm_time_to_first_token_seconds_bucket", le="+Inf") == count
    assert value("tg_llm_queue_depth") == 0 and value("tg_llm_active_slots") == 0
    assert value("tg_llm_kernels_compiled") > 0 and value("tg_llm_warm_ups_left") >= 0  # (the warm-ups compiled)
    assert 0 <= value("tg_llm_kernels_generated") <= value("tg_llm_kernels_compiled")  # (0 with a warm cache)
    # where the worker's time went: each phase, the decode steps and the rows they ran (a step runs one or more)
    assert value("tg_llm_worker_seconds_total", phase="decode") > 0 and value("tg_llm_worker_seconds_total",
                                                                              phase="prefill") > 0
    assert value("tg_llm_worker_seconds_total", phase="host") > 0 and value("tg_llm_worker_seconds_total",
                                                                            phase="idle") > 0
    steps = value("tg_llm_decode_steps_total")
    assert steps > 0 and value("tg_llm_decode_rows_total") >= steps and value("tg_llm_prefill_chunks_total") > 0
    assert value("tg_llm_decode_step_rows_total") >= value("tg_llm_decode_rows_total")


# ---- last: SIGTERM ends the shared server ----

def test_sigterm_ends_open_stream_with_a_final_chunk(server: Any) -> None:
    """SIGTERM with a stream running (the shared server's --shutdown-timeout is 0): the stream ends at its next
    token with finish_reason server_shutdown and [DONE]; a second signal (SIGINT) changes nothing; exit 0 and
    no traceback in the log."""
    import signal

    import httpx
    body = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Tell me a long story about a dragon."}],
            "max_tokens": 80, "temperature": 0, "stream": True, "stop": ["\x00"]}
    lines = []
    with httpx.stream("POST", server.url("/v1/chat/completions"), json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()
        it = r.iter_lines()
        for line in it:
            if line:
                lines.append(line)
                if json.loads(line[6:])["choices"][0]["delta"].get("content"):
                    break  # generating
        server.terminate()
        server.proc.send_signal(signal.SIGINT)
        lines += [line for line in it if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert not any("error" in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "server_shutdown"
    assert sum(1 for c in chunks if c["choices"][0]["delta"].get("content")) < 80
    assert server.proc.wait(60) == 0
    log = server.log()
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url("/health"), timeout=5)

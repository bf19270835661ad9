"""Continuous batching in ``tg serve llm`` (live, real SmolLM2, the official ``openai`` client).

The server runs 4 slots (``--parallel 4``) and prefills prompts in chunks of 16 tokens, so a 200-token prompt
takes 13 scheduler turns. Checked:
- batch invariance: greedy and seeded completions sent 8 at once (4 run, 4 wait for a slot and join the
  batch as others finish) each equal the same request sent alone;
- cancelling one stream of a running batch: the others finish unchanged, the slot is freed;
- chunked prefill: a short request sent while a long prompt is prefilling gets its first token first;
- prompts that arrive together prefill in one forward per chunk and decode together from their first tokens;
- prompt log-probabilities (echo) prefill in the same chunks: the generation's log-probabilities are unchanged;
- SIGTERM with 4 streams running: each ends with ``server_shutdown``, exit 0, no traceback;
- loading and the warm-up captures run without cyclic garbage collections and leave what they made frozen.
No wall-clock assertions: only orderings and equalities.
"""
from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest
from test_server_helpers import MODEL_ID, LiveServer, job_tokens, require, require_server_deps, smollm2_path

ARGS = ["--max-context", "256", "--parallel", "4", "--prefill-chunk", "16", "--shutdown-timeout", "0"]
PROMPTS = ["The capital of France is", "Once upon a time, in a small village,", "def fibonacci(n):",
           "The three primary colors are"]
GEN = 8


@pytest.fixture(scope="module")
def server() -> Any:
    require_server_deps()
    smollm2_path()
    s = LiveServer(ARGS)
    s.wait_ready()
    yield s
    s.stop()


def client(server: Any) -> Any:
    openai = require("openai", "pip install openai")
    return openai.OpenAI(base_url=server.url("/v1"), api_key="unused", max_retries=0, timeout=600)


def complete(server: Any, prompt: str | list[int], **kw: Any) -> str:
    r = client(server).completions.create(model=MODEL_ID, prompt=prompt, max_tokens=kw.pop("max_tokens", GEN),
                                          stop=["\x00"], **kw)
    return r.choices[0].text


def requests() -> list[dict[str, Any]]:
    """Greedy and seeded sampling (the server's default top-k/top-p/min-p) for each prompt."""
    return ([{"prompt": p, "temperature": 0} for p in PROMPTS]
            + [{"prompt": p, "temperature": 1.0, "seed": 100 + i} for i, p in enumerate(PROMPTS)])


def concurrently(fn: Any, args: list[Any]) -> list[Any]:
    out: list[Any] = [None] * len(args)

    def run(i: int) -> None:
        try:
            out[i] = fn(args[i])
        except Exception as e:  # noqa: BLE001 - reported by the caller's assertion
            out[i] = e
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    return out


def test_batch_invariance_greedy_and_seeded(server: Any) -> None:
    alone = [complete(server, **dict(r)) for r in requests()]
    assert len(set(alone)) == len(alone)  # the requests really differ
    together = concurrently(lambda r: complete(server, **dict(r)), requests()[::-1])  # 4 run, 4 wait for a slot
    assert together == alone[::-1]


def stream_text(server: Any, prompt: str, max_tokens: int, stop_after: int | None = None) -> tuple[str, str | None]:
    """Stream a greedy completion; with ``stop_after`` close the stream after that many text chunks."""
    stream = client(server).completions.create(model=MODEL_ID, prompt=prompt, max_tokens=max_tokens,
                                               temperature=0, stop=["\x00"], stream=True)
    text, finish, chunks = "", None, 0
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].text or ""
            finish = chunk.choices[0].finish_reason or finish
            chunks += bool(chunk.choices[0].text)
            if stop_after is not None and chunks >= stop_after:
                stream.close()
                return text, "closed"
    return text, finish


def test_cancel_one_stream_of_a_batch(server: Any) -> None:
    import httpx
    n = 24
    alone = [stream_text(server, p, n) for p in PROMPTS[:3]]
    before = server.log().count("client went away")
    jobs = [(PROMPTS[0], n, None), (PROMPTS[1], n, 2), (PROMPTS[2], n, None)]
    got = concurrently(lambda j: stream_text(server, *j), jobs)
    assert got[0] == alone[0] and got[2] == alone[2]
    assert got[1][1] == "closed" and alone[1][0].startswith(got[1][0])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.log().count("client went away") == before:
        time.sleep(0.1)
    assert server.log().count("client went away") == before + 1
    while time.monotonic() < deadline and httpx.get(server.url("/health")).json()["queue"]:
        time.sleep(0.1)
    assert httpx.get(server.url("/health")).json()["queue"] == 0


def active_slots(server: Any) -> float:
    import httpx
    text = httpx.get(server.url("/metrics"), timeout=30).text
    return float(next(ln.split()[-1] for ln in text.splitlines() if ln.startswith("tg_llm_active_slots ")))


def test_short_request_overtakes_a_long_prefill(server: Any) -> None:
    """A 200-token prompt prefills in 13 chunks; a short request sent once the long one holds a slot gets its first
    token before the long one does, and both complete as they would alone."""
    long_prompt = [int(t) for t in np.random.default_rng(3).integers(100, 40000, 200)]
    firsts: dict[str, float] = {}
    texts: dict[str, str] = {}

    def run(name: str, prompt: Any) -> None:
        stream = client(server).completions.create(model=MODEL_ID, prompt=prompt, max_tokens=4, temperature=0,
                                                   stop=["\x00"], stream=True)
        text = ""
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                firsts.setdefault(name, time.monotonic())
                text += chunk.choices[0].text
        texts[name] = text

    assert active_slots(server) == 0
    long = threading.Thread(target=run, args=("long", long_prompt))
    long.start()
    deadline = time.monotonic() + 60
    while active_slots(server) < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "long" not in firsts  # still prefilling
    run("short", PROMPTS[0])
    long.join(600)
    assert firsts["short"] < firsts["long"]
    assert texts["short"] == complete(server, PROMPTS[0], max_tokens=4, temperature=0)
    assert texts["long"] == complete(server, long_prompt, max_tokens=4, temperature=0)


def test_prompts_arriving_together_join_in_one_forward_and_decode_together() -> None:
    """Four 32-token prompts queued before the worker starts (two chunks of 16 each): their chunks run in one forward
    per chunk (``Model.prefill_chunks``), so every stream has its first token before the first decode step and the
    steps are the generation's (``GEN`` - 1), each with all four rows; each stream's greedy tokens are those of its
    prompt run alone through the model."""
    import asyncio

    from tg_llm.model import Model
    from tg_llm.server_engine import Choice, Engine, Job
    batched: list[int] = []  # the chunks of each prefill_chunks call for the prompts (the warm-ups' are zeros)

    def load(*args: Any, **kw: Any) -> Any:
        model = Model.from_gguf(*args, **kw)
        run_chunks = model.prefill_chunks

        def counted(chunks: Any, logits: bool = False) -> Any:
            if any(any(tokens) for _, tokens, _ in chunks):
                batched.append(len(chunks))
            return run_chunks(chunks, logits)
        model.prefill_chunks = counted  # type: ignore[method-assign]
        return model
    engine = Engine(smollm2_path(), max_context=128, parallel=4, prefill_chunk=16, load_model=load)
    loop = asyncio.new_event_loop()
    prompts = [[int(t) for t in np.random.default_rng(20 + i).integers(100, 40000, 32)] for i in range(4)]
    jobs = [Job([Choice(p, GEN, temperature=0.0)], loop, time.monotonic() + 600) for p in prompts]
    for job in jobs:  # (queued before the worker starts: its first turn takes the four)
        assert engine.try_submit(job)
    engine.start_loading().join(600)
    assert engine.state == "ready"
    model = engine.model

    got = [loop.run_until_complete(job_tokens(job)) for job in jobs]
    engine.stop()
    engine._worker.join(60)  # (the worker owns the model until then)
    assert batched == [4, 4] and engine.clock.chunks == 8
    assert engine.clock.steps == GEN - 1 and engine.clock.rows == 4 * (GEN - 1)
    for prompt, stream in zip(prompts, got, strict=True):
        model.reset()
        model.prefill(prompt[:16], 0)  # (the server's chunks)
        alone = [int(np.argmax(model.forward_last(prompt[16:], 16)))]
        for pos in range(len(prompt), len(prompt) + GEN - 1):
            alone.append(int(np.argmax(model.forward_last([alone[-1]], pos))))
        assert stream == alone


def test_prompts_arriving_one_by_one_reuse_their_prefix_from_other_slots() -> None:
    """Four 32-token prompts run together (slots 0-3 cache them), then again one at a time in reverse order, each
    sent once the one before holds a slot. A prompt arriving alone takes the lowest free slot (fewest rows per step),
    whose cache holds another prompt: the slot caching its first chunk swaps caches with it (``Model.swap_sequences``),
    so the second round prefills one chunk of 16 per prompt (4, not 8: no prompt is prefilled twice) and each stream's
    greedy tokens are those of the first round (prefilled from scratch)."""
    import asyncio

    from tg_llm.server_engine import Choice, Engine, Job
    engine = Engine(smollm2_path(), max_context=128, parallel=4, prefill_chunk=16)
    engine.start_loading().join(600)
    assert engine.state == "ready"
    deadline = time.monotonic() + 600
    while engine.warm_ups_left and time.monotonic() < deadline:  # (an idle warm-up empties the slots it runs in)
        time.sleep(0.1)
    loop = asyncio.new_event_loop()
    prompts = [[int(t) for t in np.random.default_rng(40 + i).integers(100, 40000, 32)] for i in range(4)]

    def job(prompt: list[int]) -> Any:
        j = Job([Choice(prompt, GEN, temperature=0.0)], loop, time.monotonic() + 600)
        assert engine.try_submit(j)
        return j

    first = [job(p) for p in prompts]  # (together: slots 0-3 in order)
    first_tokens = [loop.run_until_complete(job_tokens(j)) for j in first]
    chunks, swaps = engine.clock.chunks, engine.clock.swaps
    assert chunks == 8 and swaps == 0
    second = []
    for p in prompts[::-1]:
        second.append(job(p))
        assert second[-1].started.wait(600)
    second_tokens = [loop.run_until_complete(job_tokens(j)) for j in second]
    engine.stop()
    engine._worker.join(60)
    assert second_tokens == first_tokens[::-1]
    assert engine.clock.chunks - chunks == 4 and engine.clock.swaps - swaps >= 1


def test_prompts_arriving_while_a_stream_decodes_prefill_before_its_next_step() -> None:
    """A stream is decoding when a request for three choices of a 32-token prompt arrives (two chunks of 16 each): all
    their chunks run before the stream's next decode step (one stall, not a chunk between its steps), and they join
    its steps from their first tokens; each choice's greedy tokens are those of the prompt run alone."""
    import asyncio

    from tg_llm.model import Model
    from tg_llm.server_engine import Choice, Engine, Job
    prompt = [int(t) for t in np.random.default_rng(60).integers(100, 40000, 32)]
    calls: list[str] = []  # "P": a prefill of the prompt's chunks, "D": a decode step
    chunks = (prompt[:16], prompt[16:])

    def load(*args: Any, **kw: Any) -> Any:
        model = Model.from_gguf(*args, **kw)

        def logged(name: str, run: Any, tokens_of: Any) -> Any:
            def call(*a: Any, **k: Any) -> Any:
                if name == "D" or any(list(tokens) in chunks for tokens in tokens_of(*a)):
                    calls.append(name)
                return run(*a, **k)
            return call
        model.decode = logged("D", model.decode, lambda steps, *_: [])  # type: ignore[method-assign]
        model.prefill = logged("P", model.prefill, lambda tokens, *_: [tokens])  # type: ignore[method-assign]
        model.forward_last = logged("P", model.forward_last, lambda tokens, *_: [tokens])  # type: ignore[method-assign]
        model.prefill_chunks = logged(  # type: ignore[method-assign]
            "P", model.prefill_chunks, lambda parts, *_: [tokens for _, tokens, _ in parts])
        return model
    engine = Engine(smollm2_path(), max_context=128, parallel=4, prefill_chunk=16, load_model=load)
    engine.start_loading().join(600)
    assert engine.state == "ready"
    loop = asyncio.new_event_loop()
    decoding = Job([Choice([int(t) for t in np.random.default_rng(61).integers(100, 40000, 12)], 48,
                           temperature=0.0)], loop, time.monotonic() + 600)
    assert engine.try_submit(decoding)
    deadline = time.monotonic() + 600
    while decoding.first_token_at is None and time.monotonic() < deadline:
        time.sleep(0.005)
    steps = engine.clock.steps
    three = Job([Choice(prompt, GEN, temperature=0.0) for _ in range(3)], loop, time.monotonic() + 600)
    assert engine.try_submit(three)

    async def collect() -> list[list[int]]:
        got: list[list[int]] = [[], [], []]
        while (out := await three.outputs.get()).kind != "end":
            assert out.kind == "event", out.payload
            got[out.index].append(out.payload.token_id)
        return got
    got = loop.run_until_complete(collect())
    loop.run_until_complete(job_tokens(decoding))
    engine.stop()
    engine._worker.join(60)
    assert engine.clock.steps > steps  # (the stream was still decoding when the three arrived)
    burst = calls[calls.index("P"):len(calls) - calls[::-1].index("P")]
    assert "D" not in burst, calls
    model = engine.model
    model.reset(0)
    model.prefill(prompt[:16], 0)  # (the server's chunks)
    alone = [int(np.argmax(model.forward_last(prompt[16:], 16)))]
    for pos in range(len(prompt), len(prompt) + GEN - 1):
        alone.append(int(np.argmax(model.forward_last([alone[-1]], pos))))
    assert got == [alone] * 3


def test_prompt_logprobs_do_not_change_the_generation(server: Any) -> None:
    """A request with prompt log-probabilities (echo) prefills in the scheduler's chunks too: its generated tokens'
    log-probabilities are bitwise those of the same request without echo (a 40-token prompt: 3 chunks of 16)."""
    prompt = [int(t) for t in np.random.default_rng(5).integers(100, 40000, 40)]

    def generated_logprobs(echo: bool) -> list[float]:
        r = client(server).completions.create(model=MODEL_ID, prompt=prompt, max_tokens=4, temperature=0,
                                              stop=["\x00"], logprobs=1, echo=echo)
        return r.choices[0].logprobs.token_logprobs[-4:]

    plain = generated_logprobs(False)
    assert generated_logprobs(True) == plain


def test_shutdown_deadline_ends_streams_while_the_worker_is_busy() -> None:
    """At the shutdown deadline each unfinished choice gets its ``server_shutdown`` event and the job its end, even
    when the worker is stuck inside a step: what the worker emits afterwards is dropped."""
    import asyncio

    from tg_llm.generate import Event
    from tg_llm.server_engine import SHUTDOWN_FINISH, Choice, Job

    async def run() -> list[Any]:
        job = Job([Choice([1, 2], 4), Choice([3], 4)], asyncio.get_running_loop(), time.monotonic() + 60)
        job.emit(_output("event", 0, Event(5, "a", finish_reason="length")))
        job.emit(_output("event", 1, Event(6, "b")))
        job.end_now()
        job.emit(_output("event", 1, Event(7, "c")))  # the worker, late: dropped
        await asyncio.sleep(0.05)
        items = []
        while not job.outputs.empty():
            items.append(job.outputs.get_nowait())
        return items

    items = asyncio.run(run())
    assert [(o.kind, o.index) for o in items] == [("event", 0), ("event", 1), ("event", 1), ("end", 0)]
    assert [o.payload.finish_reason for o in items[:3]] == ["length", None, SHUTDOWN_FINISH]


def _output(kind: str, index: int, payload: Any) -> Any:
    from tg_llm.server_engine import Output
    return Output(kind, index, payload)  # type: ignore[arg-type]


def test_sigterm_with_four_streams(server: Any) -> None:
    """Last (ends the server): 4 streams running, SIGTERM: each ends with finish_reason server_shutdown and
    [DONE], exit 0, no traceback."""
    import httpx
    started = threading.Barrier(5)

    def run(prompt: str) -> list[str]:
        body = {"model": MODEL_ID, "prompt": prompt, "max_tokens": 200, "temperature": 0, "stop": ["\x00"],
                "stream": True}
        lines = []
        with httpx.stream("POST", server.url("/v1/completions"), json=body, timeout=300) as r:
            it = r.iter_lines()
            for line in it:
                if line:
                    lines.append(line)
                    if json.loads(line[6:])["choices"][0].get("text"):
                        break
            started.wait(120)
            lines += [line for line in it if line]
        return lines

    results: list[Any] = []
    threads = [threading.Thread(target=lambda p=p: results.append(run(p))) for p in PROMPTS]
    for t in threads:
        t.start()
    started.wait(300)  # all four are generating
    server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(120)
    assert len(results) == 4
    for lines in results:
        assert lines[-1] == "data: [DONE]"
        assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "server_shutdown"
    assert server.proc.wait(60) == 0
    assert "Traceback" not in server.log()


def test_a_stream_decodes_while_short_requests_keep_arriving() -> None:
    """A stream is decoding while requests of two-chunk prompts that end at their first token keep arriving (a new one
    queued at each of their prefills, so one is always waiting): the prefill-first run before a decode step is bounded
    (``PREFILL_FIRST_CHUNKS`` forwards per ``PREFILL_FIRST_SLOTS`` slots), so the stream keeps getting steps
    (unbounded, it got none for as long as the requests came)."""
    import asyncio

    from tg_llm.model import Model
    from tg_llm.server_engine import PREFILL_FIRST_CHUNKS, PREFILL_FIRST_SLOTS, Choice, Engine, Job
    rng = np.random.default_rng(62)
    loop = asyncio.new_event_loop()
    calls: list[str] = []  # "P": a prefill forward, "D": a decode step
    flood: list[Job] = []
    engine: Engine | None = None

    def arrive() -> None:  # (from the worker, inside a prefill: the next request is queued before the loop looks)
        if engine is not None and len(flood) < 12:
            job = Job([Choice([int(t) for t in rng.integers(100, 40000, 20)], 1, temperature=0.0)], loop,
                      time.monotonic() + 600)
            assert engine.try_submit(job)
            flood.append(job)

    def load(*args: Any, **kw: Any) -> Any:
        model = Model.from_gguf(*args, **kw)

        def logged(name: str, run: Any) -> Any:
            def call(*a: Any, **k: Any) -> Any:
                calls.append(name)
                if name == "P" and flood:
                    arrive()
                return run(*a, **k)
            return call
        model.decode = logged("D", model.decode)  # type: ignore[method-assign]
        model.prefill = logged("P", model.prefill)  # type: ignore[method-assign]
        model.prefill_chunks = logged("P", model.prefill_chunks)  # type: ignore[method-assign]
        model.forward_last = logged("P", model.forward_last)  # type: ignore[method-assign]
        return model
    engine = Engine(smollm2_path(), max_context=128, parallel=4, prefill_chunk=16, load_model=load)
    engine.start_loading().join(600)
    assert engine.state == "ready"
    while engine.warm_ups_left:
        time.sleep(0.05)
    decoding = Job([Choice([int(t) for t in rng.integers(100, 40000, 12)], 40, temperature=0.0)], loop,
                   time.monotonic() + 600)
    assert engine.try_submit(decoding)
    deadline = time.monotonic() + 600
    while decoding.first_token_at is None and time.monotonic() < deadline:
        time.sleep(0.005)
    calls.clear()
    arrive()
    loop.run_until_complete(job_tokens(decoding))
    for job in flood:
        loop.run_until_complete(job_tokens(job))
    engine.stop()
    engine._worker.join(60)
    assert len(flood) == 12
    most = PREFILL_FIRST_CHUNKS * -(-engine.parallel // PREFILL_FIRST_SLOTS)
    runs = "".join(calls).split("D")
    assert max(len(run) for run in runs) <= most, calls


def test_loading_and_warm_ups_run_without_collections_and_freeze_what_they_made() -> None:
    """The model loads and each warm-up capture (before ready and while idle) runs with the garbage collector off;
    after them the collector is on again and the model is frozen (``gc.freeze``: no full collection walks it)."""
    import gc

    from tg_llm.model import Model
    from tg_llm.server_engine import Engine
    enabled_while: list[bool] = []

    def load(*a: Any, **k: Any) -> Any:
        enabled_while.append(gc.isenabled())
        model = Model.from_gguf(*a, **k)
        warm_up = model.warm_up

        def recorded(*a: Any, **k: Any) -> Any:
            enabled_while.append(gc.isenabled())
            return warm_up(*a, **k)
        model.warm_up = recorded  # type: ignore[method-assign]
        return model
    assert gc.isenabled()
    engine = Engine(smollm2_path(), max_context=128, parallel=2, prefill_chunk=16, load_model=load,
                    freeze_model=True)
    try:
        engine.start_loading().join(600)
        assert engine.state == "ready"
        deadline = time.monotonic() + 600
        while engine.warm_ups_left and time.monotonic() < deadline:
            time.sleep(0.05)
        engine.stop()
        engine._worker.join(60)
        assert len(enabled_while) >= 3 and not any(enabled_while), enabled_while  # (the load, at load, while idle)
        assert gc.isenabled()
        assert not any(o is engine.model for o in gc.get_objects())  # (frozen objects are in no generation)
    finally:
        gc.unfreeze()  # (the rest of this process's tests load and drop models)


def test_without_collections_frees_the_garbage_it_made_and_freezes_only_after_success() -> None:
    """A block's cyclic garbage is collected before the freeze (frozen, it would never be); the objects it keeps are
    frozen; a block that raised freezes nothing and turns the collector back on; off before, it stays off; without
    ``freeze`` nothing is frozen."""
    import gc
    import weakref

    from tg_llm.server_warmup import without_collections

    class Node:
        other: Any = None
    assert gc.isenabled()
    try:
        with without_collections(freeze=True):
            assert not gc.isenabled()
            garbage, kept = Node(), Node()
            garbage.other, kept.other = garbage, kept  # (two cycles, one dropped)
            dead = weakref.ref(garbage)
            del garbage
        assert gc.isenabled()
        assert dead() is None
        assert not any(o is kept for o in gc.get_objects())  # (frozen: in no generation)
    finally:
        gc.unfreeze()
    for freeze in (True, False):
        with pytest.raises(RuntimeError), without_collections(freeze=freeze):
            failed = Node()
            raise RuntimeError("a capture failed")
        assert gc.isenabled()
        assert any(o is failed for o in gc.get_objects()) and not gc.get_freeze_count()
    with without_collections(freeze=False):
        made = Node()
    assert any(o is made for o in gc.get_objects()) and not gc.get_freeze_count()
    gc.disable()
    try:
        with without_collections(freeze=False):
            pass
        assert not gc.isenabled()  # (off before: left off)
    finally:
        gc.enable()


def test_prompts_sent_apart_to_an_idle_server_share_its_first_forward(monkeypatch: Any) -> None:
    """Eight 32-token prompts (two chunks of 16) to an idle server of 8 slots: four sent one by one, each once the one
    before holds a slot, four more as the first prefill forward starts. The worker woken by the first waits for the
    others (``Engine.gather``; its window made long here so only its end at ``PREFILL_BATCH`` prompts counts, 4 here)
    and the first four share each forward, the next four join the next ones: every chunk runs in a forward of 4,
    ceil(8 / 4) forwards per chunk and no decode step before all have their first tokens (before, the first prompt
    prefilled alone while the others were on their way: forwards of 1, 1, 2, 2, a step, 4, 4). Each stream's greedy
    tokens are those of its prompt run alone."""
    import asyncio

    from tg_llm import server_engine
    from tg_llm.model import Model
    from tg_llm.server_engine import Choice, Engine, Job
    batch = 4
    monkeypatch.setattr(server_engine, "PREFILL_BATCH", batch)
    monkeypatch.setattr(server_engine, "ARRIVAL_GAP_S", 30.0)
    monkeypatch.setattr(server_engine, "GATHER_MAX_S", 120.0)
    loop = asyncio.new_event_loop()
    prompts = [[int(t) for t in np.random.default_rng(80 + i).integers(100, 40000, 32)] for i in range(8)]
    jobs: list[Any] = []
    calls: list[Any] = []  # the chunks of each prefill forward of the prompts (warm-ups' are zeros), "D" a step
    engine: Engine | None = None

    def submit(prompt: list[int]) -> None:
        assert engine is not None
        jobs.append(Job([Choice(prompt, GEN, temperature=0.0)], loop, time.monotonic() + 600))
        assert engine.try_submit(jobs[-1])

    def load(*args: Any, **kw: Any) -> Any:
        model = Model.from_gguf(*args, **kw)

        def logged(run: Any, chunks_of: Any) -> Any:
            def call(*a: Any, **k: Any) -> Any:
                chunks = chunks_of(*a, **k)
                if any(any(tokens) for tokens in chunks):
                    calls.append(len(chunks))
                    if len(jobs) == 4:  # (the other four arrive during the first forward)
                        for p in prompts[4:]:
                            submit(p)
                return run(*a, **k)
            return call
        run_decode = model.decode
        model.decode = lambda steps: (calls.append("D"), run_decode(steps))[1]  # type: ignore[method-assign]
        model.prefill = logged(model.prefill, lambda tokens, *_, **__: [tokens])  # type: ignore[method-assign]
        model.forward_last = logged(model.forward_last, lambda tokens, *_, **__: [tokens])  # type: ignore
        model.prefill_chunks = logged(  # type: ignore[method-assign]
            model.prefill_chunks, lambda parts, *_, **__: [tokens for _, tokens, _ in parts])
        return model
    engine = Engine(smollm2_path(), max_context=128, parallel=8, prefill_chunk=16, load_model=load)
    engine.start_loading().join(600)
    assert engine.state == "ready"
    first = Job([Choice(prompts[0][:12], 1, temperature=0.0)], loop, time.monotonic() + 600)
    # (it ends after any idle capture running; the next starts after IDLE_WARM_AFTER_S without work: none while the
    # requests come)
    assert engine.try_submit(first)
    loop.run_until_complete(job_tokens(first))
    calls.clear()
    for p in prompts[:4]:  # (each once the one before holds a slot: before, the worker went on to prefill it alone)
        submit(p)
        assert jobs[-1].started.wait(600)
    got = [loop.run_until_complete(job_tokens(job)) for job in jobs]
    engine.stop()
    engine._worker.join(60)
    forwards = [c for c in calls if c != "D"]
    assert forwards == [batch] * 4 and calls.index("D") == 4, calls
    model = engine.model
    for prompt, stream in zip(prompts, got, strict=True):
        model.reset(0)
        model.prefill(prompt[:16], 0)  # (the server's chunks)
        alone = [int(np.argmax(model.forward_last(prompt[16:], 16)))]
        for pos in range(len(prompt), len(prompt) + GEN - 1):
            alone.append(int(np.argmax(model.forward_last([alone[-1]], pos))))
        assert stream == alone


def test_a_lone_request_waits_for_company_at_most_the_arrival_gap(monkeypatch: Any) -> None:
    """A lone 32-token prompt to an idle server waits ``ARRIVAL_GAP_S`` for requests sent with it (made 0.5 s here),
    then prefills alone, long before ``GATHER_MAX_S``; a 12-token prompt (one chunk, which runs alone anyway) does
    not wait."""
    import asyncio

    from tg_llm import server_engine
    from tg_llm.server_engine import Choice, Engine, Job
    monkeypatch.setattr(server_engine, "ARRIVAL_GAP_S", 0.5)
    monkeypatch.setattr(server_engine, "GATHER_MAX_S", 60.0)
    engine = Engine(smollm2_path(), max_context=128, parallel=4, prefill_chunk=16)
    engine.start_loading().join(600)
    assert engine.state == "ready"
    loop = asyncio.new_event_loop()
    rng = np.random.default_rng(90)

    def run(n: int) -> tuple[Any, float]:
        """A request of an ``n``-token prompt: the job and the seconds the worker gathered for it."""
        before = engine.clock.seconds["gather"]
        job = Job([Choice([int(t) for t in rng.integers(100, 40000, n)], 4, temperature=0.0)], loop,
                  time.monotonic() + 600)
        assert engine.try_submit(job)
        assert len(loop.run_until_complete(job_tokens(job))) == 4
        return job, engine.clock.seconds["gather"] - before
    # (a request queued behind an idle capture has waited already, no gathering then: this one ends after any capture
    # running, the next starts after IDLE_WARM_AFTER_S without work)
    run(12)
    alone, _ = run(32)
    short, waited = run(12)
    engine.stop()
    engine._worker.join(60)
    assert 0.5 <= alone.first_token_at - alone.submitted < 30  # (the gap, not GATHER_MAX_S)
    assert waited < 0.25

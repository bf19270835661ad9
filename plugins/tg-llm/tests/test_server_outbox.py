"""How the engine's outputs reach the HTTP side (no model): one wake-up of the event loop carries every output
emitted until it runs, in order per job; a stream takes them in batches, an error after some events still delivers
those events first, and ``end`` stops the batches."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from test_server_helpers import require_server_deps
from tg_llm.server_engine import END, Choice, Job, Output


def jobs_on(loop: asyncio.AbstractEventLoop, n: int) -> list[Job]:
    return [Job([Choice([1, 2, 3], 4)], loop, time.monotonic() + 60) for _ in range(n)]


def counted_loop() -> tuple[asyncio.AbstractEventLoop, list[Any]]:
    """A new event loop whose wake-ups from other threads (``call_soon_threadsafe``) are listed as they come."""
    loop = asyncio.new_event_loop()
    wake_ups: list[Any] = []
    plain = loop.call_soon_threadsafe

    def counted(*args: Any) -> Any:
        wake_ups.append(args)
        return plain(*args)
    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    return loop, wake_ups


def test_a_burst_of_outputs_costs_one_wake_up_and_keeps_each_jobs_order() -> None:
    loop, wake_ups = counted_loop()
    jobs = jobs_on(loop, 3)

    def worker() -> None:  # a decode step's outputs for three jobs, twice, then their ends (the loop not running)
        for step in range(2):
            for j, job in enumerate(jobs):
                job.emit(Output("event", 0, (j, step)))
        for job in jobs:
            job.emit(END)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(wake_ups) == 1

    async def drain(job: Job) -> list[Any]:
        got = []
        while (out := await job.outputs.get()).kind != "end":
            got.append(out.payload)
        return got

    async def drain_all() -> list[list[Any]]:
        return list(await asyncio.gather(*(drain(job) for job in jobs)))
    got = loop.run_until_complete(drain_all())
    assert got == [[(j, 0), (j, 1)] for j in range(3)]
    jobs[0].emit(Output("event", 0, "late"))  # after END: dropped
    loop.run_until_complete(asyncio.sleep(0))
    assert jobs[0].outputs.empty()
    loop.close()
    job = jobs_on(loop, 1)[0]
    job.emit(Output("event", 0, "x"))  # the loop is gone: the job is cancelled, nothing raises
    assert job.cancelled.is_set()


def test_a_streams_tokens_between_its_first_and_last_are_paced(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from tg_llm import server_handoff
    now = [100.0]  # the hand-off's clock, moved by hand
    monkeypatch.setattr(server_handoff, "time", SimpleNamespace(monotonic=lambda: now[0]))
    interval = server_handoff.HANDOFF_INTERVAL_S
    loop, wake_ups = counted_loop()
    job = jobs_on(loop, 1)[0]
    got: list[Any] = []

    def deliver() -> None:  # (the loop runs what the wake-ups scheduled)
        loop.run_until_complete(asyncio.sleep(0))
        while not job.outputs.empty():
            got.append(job.outputs.get_nowait().payload)

    job.emit(Output("event", 0, SimpleNamespace(finish_reason=None, token=0)))  # the first token: at once
    assert len(wake_ups) == 1
    deliver()
    for t in (1, 2):  # the next ones within the interval: held back, a flush too soon sends nothing
        now[0] += interval / 4
        job.emit(Output("event", 0, SimpleNamespace(finish_reason=None, token=t)))
        server_handoff.flush_outboxes()
    assert len(wake_ups) == 1
    deliver()
    assert [e.token for e in got] == [0]
    now[0] += interval  # the worker's flush after the interval: both at once
    server_handoff.flush_outboxes()
    assert len(wake_ups) == 2
    deliver()
    job.emit(Output("event", 0, SimpleNamespace(finish_reason=None, token=3)))  # held back ...
    server_handoff.flush_outboxes(force=True)  # ... until the worker runs something long
    assert len(wake_ups) == 3
    deliver()
    job.emit(Output("event", 0, SimpleNamespace(finish_reason=None, token=4)))
    job.emit(Output("event", 0, SimpleNamespace(finish_reason="length", token=5)))  # the last: at once, with 4
    assert len(wake_ups) == 4
    deliver()
    assert [e.token for e in got] == [0, 1, 2, 3, 4, 5]
    loop.close()


def test_batches_deliver_events_before_an_error_and_stop_at_the_end() -> None:
    require_server_deps()
    from tg_llm.server_app import _API
    from tg_llm.server_protocol import APIError
    loop = asyncio.new_event_loop()
    api = _API(engine=None, timeout=60)  # type: ignore[arg-type]
    ok, failing = jobs_on(loop, 2)
    for job in (ok, failing):
        job.emit(Output("event", 0, "a"))
        job.emit(Output("event", 0, "b"))
    ok.emit(END)
    failing.emit(Output("error", 0, ValueError("bad")))

    async def collect(job: Job) -> tuple[list[list[Any]], BaseException | None]:
        batches: list[list[Any]] = []
        try:
            async for batch in api.batches(job):
                batches.append([out.payload for out in batch])
        except APIError as e:
            return batches, e
        return batches, None
    assert loop.run_until_complete(collect(ok)) == ([["a", "b"]], None)
    batches, error = loop.run_until_complete(collect(failing))
    assert batches == [["a", "b"]] and isinstance(error, APIError) and error.status == 400
    assert failing.cancelled.is_set()
    loop.close()


def test_batches_time_out_at_the_deadline() -> None:
    require_server_deps()
    from tg_llm.server_app import _API
    from tg_llm.server_protocol import APIError
    loop = asyncio.new_event_loop()
    api = _API(engine=None, timeout=60)  # type: ignore[arg-type]
    job = Job([Choice([1], 1)], loop, time.monotonic() + 0.05)

    async def first() -> Any:
        async for batch in api.batches(job):
            return batch
    with pytest.raises(APIError) as e:
        loop.run_until_complete(first())
    assert e.value.status == 504 and job.cancelled.is_set()
    loop.close()


class _SlotModel:
    """What the scheduler's slot choice asks of a model: each slot's cached tokens, a step's rows, swapping two slots'
    caches."""

    def __init__(self, cached: dict[int, list[int]], sequences: int = 8) -> None:
        from types import SimpleNamespace

        from tg_llm.model import Model
        self.sequences = sequences
        self.cached = cached
        self.config = SimpleNamespace(max_context=4096)
        self.batch_rows = Model.batch_rows.__get__(self)

    def tokens_of(self, seq: int) -> list[int]:
        return list(self.cached.get(seq, []))

    def swap_sequences(self, a: int, b: int) -> None:
        self.cached[a], self.cached[b] = self.cached.get(b, []), self.cached.get(a, [])


@pytest.mark.parametrize(("cached_slot", "cached_len", "busy", "waiting", "want"), [
    (5, 128, [0], 0, 1),     # a cached chunk in slot 5 would make every step 8 rows: the lowest free slot, swapped
    (1, 128, [0], 0, 1),     # cached in a slot of the lowest row bucket: reused there
    (3, 128, [0, 2], 0, 3),  # slot 1 and slot 3 both give 4-row steps: the one caching the prompt's chunks
    (6, 600, [0], 0, 1),     # a long cached prefix too: swapped into the lowest free slot
    (3, 128, [], 3, 3),      # four sequences will run 4-row steps anyway: slots 0-3 cost the same, slot 3 caches
    (5, 128, [], 3, 0),      # ... but slot 5 would make them 8 rows: swapped into slot 0
])
def test_a_new_sequence_takes_the_slot_with_fewest_rows_and_its_cached_prefix(
        cached_slot: int, cached_len: int, busy: list[int], waiting: int, want: int) -> None:
    """The slot of fewest rows per step; its cache swapped with the free slot caching the prompt's chunks, if another
    one does: the prefix is reused wherever it was, the chosen slot's tokens kept in the other."""
    from types import SimpleNamespace

    from tg_llm import server_engine
    from tg_llm.server_engine import _JobState, _Scheduler
    from tg_llm.server_handoff import WorkerClock
    prompt = list(range(1000, 1000 + cached_len + 10))
    other = [7] * 70  # (what the chosen slot cached before: kept in the slot it swapped with)
    model = _SlotModel({cached_slot: prompt[:cached_len], want: other} if want != cached_slot
                       else {cached_slot: prompt[:cached_len]})
    engine = SimpleNamespace(model=model, parallel=8, prefill_chunk=64, active_slots=0, running_jobs=0,
                             clock=WorkerClock())
    sched = _Scheduler(engine)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    for i in busy:  # (any object holds a slot)
        sched.slots[i] = SimpleNamespace(job=None)  # type: ignore[call-overload]
    state = _JobState(Job([Choice(prompt, 4)] * (1 + waiting), loop, time.monotonic() + 60))
    sched.jobs.append(state)
    sched.start(state, state.waiting.pop(0))
    taken = [i for i, s in enumerate(sched.slots) if isinstance(s, server_engine._Sequence)]
    assert taken == [want]
    assert sched.slots[want].cached == min(cached_len, len(prompt) - 1) // 64 * 64
    assert model.cached[want] == prompt[:cached_len]
    assert engine.clock.swaps == (want != cached_slot)
    if want != cached_slot:
        assert model.cached[cached_slot] == other
    loop.close()


def test_a_streams_tokens_that_come_together_go_in_one_chunk_per_choice() -> None:
    """Tokens of one wake-up (a paced stream gets several) are one SSE chunk per choice: the texts joined and, asked
    for, the log-probabilities of every token in it, in order; the finish in a chunk of its own."""
    require_server_deps()
    import json
    from types import SimpleNamespace

    from tg_llm.generate import Event
    from tg_llm.server_app import _API
    from tg_llm.server_protocol import CompletionRequest
    tokenizer = SimpleNamespace(token_bytes=lambda t: f"<{t}>".encode())
    api = _API(engine=SimpleNamespace(model_id="m", tokenizer=tokenizer), timeout=60)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    job = Job([Choice([1], 3), Choice([1], 3)], loop, time.monotonic() + 60)
    for step in range(3):  # (three decode steps of two choices before the loop runs: one batch)
        for i in range(2):
            last = "length" if step == 2 else None
            job.emit(Output("event", i, Event(10 * i + step, f"t{i}{step}", -0.5 * step, [], last, 1, 3)))
    job.emit(END)
    req = CompletionRequest(model="m", prompt=[1], max_tokens=3, stream=True, logprobs=0, n=2)

    async def first_send() -> str:
        stream = api.completion_stream(job, None, req, "id", 0, 1, ["", ""], False)  # type: ignore[arg-type]
        sent = await stream.__anext__()
        await stream.aclose()
        return sent
    sent = loop.run_until_complete(first_send())
    loop.close()
    chunks = [json.loads(line[len("data: "):])["choices"][0] for line in sent.split("\n\n") if line]
    assert [(c["index"], c["text"], c["finish_reason"]) for c in chunks] == [
        (0, "t00t01t02", None), (0, "", "length"), (1, "t10t11t12", None), (1, "", "length")]
    assert chunks[0]["logprobs"]["tokens"] == ["<0>", "<1>", "<2>"]
    assert chunks[0]["logprobs"]["token_logprobs"] == [0.0, -0.5, -1.0]
    assert chunks[2]["logprobs"]["text_offset"] == [0, 4, 8]


def test_a_chat_streams_tokens_that_come_together_go_in_one_chunk() -> None:
    """The chat stream's peer of the test above: one delta per choice with the texts joined and one logprobs content
    entry per token."""
    require_server_deps()
    import json
    from types import SimpleNamespace

    from tg_llm.generate import Event
    from tg_llm.server_app import _API
    from tg_llm.server_protocol import ChatCompletionRequest
    tokenizer = SimpleNamespace(token_bytes=lambda t: f"<{t}>".encode())
    api = _API(engine=SimpleNamespace(model_id="m", tokenizer=tokenizer), timeout=60)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    job = Job([Choice([1], 2)], loop, time.monotonic() + 60)
    job.emit(Output("event", 0, Event(5, "a", -1.0)))
    job.emit(Output("event", 0, Event(6, "b", -2.0, [], "length", 1, 2)))
    job.emit(END)
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}], stream=True, logprobs=True)

    async def sends() -> list[str]:
        stream = api.chat_stream(job, None, req, "id", 0, 1, False)  # type: ignore[arg-type]
        got = [await stream.__anext__(), await stream.__anext__()]  # (the role chunk, then the tokens)
        await stream.aclose()
        return got
    sent = loop.run_until_complete(sends())[1]
    loop.close()
    chunks = [json.loads(line[len("data: "):])["choices"][0] for line in sent.split("\n\n") if line]
    assert [(c["delta"], c["finish_reason"]) for c in chunks] == [({"content": "ab"}, None), ({}, "length")]
    assert [(e["token"], e["logprob"]) for e in chunks[0]["logprobs"]["content"]] == [("<5>", -1.0), ("<6>", -2.0)]

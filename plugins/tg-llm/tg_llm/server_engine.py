"""One model, up to ``parallel`` generations at once: loading in the background, a FIFO queue of requests and a
scheduler that decodes every running generation in one batched forward per step.

In:  ``Engine(path, device, max_context, parallel=4)``; ``engine.start_loading()`` loads the model (one KV cache
     per slot) and tokenizer on a thread (a progress bar on stderr, the load time logged) and warms the decode
     step up for every batch size (then more captures while ``READY_BUDGET_S`` allows, the rest while idle),
     while the server already answers /health ("loading" until then). ``engine.try_submit(job)`` puts a ``Job``
     (one or more ``Choice``s: prompt ids + sampling settings) in the queue.
Out: each job's ``Output`` items, delivered to the job's asyncio queue in order per choice: prompt
     log-probabilities (echo), the generator's events per choice, an error, and always a final ``END``. One wake-up
     of the event loop carries all the outputs emitted until it runs (a decode step's tokens for every stream);
     ``engine.clock`` (``WorkerClock``) says where the worker's time went (prefill, decode, host, idle).

One worker thread owns the model. Each choice of a job is a sequence in a slot of its own (its own KV cache,
position, sampler and seed, stop strings); choices wait first-in first-out for a free slot. Each turn of the
worker's loop it
1. takes the jobs that arrived and drops the sequences of cancelled, timed-out or (at shutdown) stopped jobs
   (woken from idle, it first waits a few ms for the requests sent with the first, so their prompts share the first
   prefill forward: ``Engine.gather``);
2. gives free slots to waiting choices (the free slot that keeps the batched step's rows fewest, counting the
   rows the sequences in slots and waiting need anyway; among those the one whose cache holds the most whole
   chunks of the prompt: the prefix cache works per slot, in whole chunks; when another free slot caches more of
   the prompt, the two swap their caches: ``Model.swap_sequences``);
3. prefills one chunk (at most ``prefill_chunk`` tokens) of the prefilling sequence with the fewest prompt tokens
   left, so a long prompt is prefilled across many turns and a short one is not stuck behind it, in one forward
   with the next chunks of up to ``PREFILL_BATCH`` - 1 other prefilling sequences whose chunks run alongside it as
   they would alone (prompts of two chunks arriving together join the decode steps together; a shorter prompt, or
   any on a pipeline, runs alone); a sequence's last chunk gives its first token. While prompts with at most
   ``PREFILL_FIRST_CHUNKS`` chunks left are prefilling (requests arriving a few ms apart), their chunks all run
   before the step, taking the requests that arrived meanwhile: the streams decoding get one stall, not a chunk
   between each of their steps;
4. runs one batched decode step (``Model.decode``) for every sequence that has a token to run, and samples the
   next token of each; finished ones free their slot at once.
A sequence's tokens do not depend on what else runs (``Model.decode`` is batch-invariant) nor on what its slot
cached before (a prompt is always prefilled in the same chunks).

Shutdown: ``engine.drain(seconds)`` lets the jobs already accepted run for at most ``seconds`` more;
past that, each choice still generating (or not started) ends with a last event whose ``finish_reason`` is
``SHUTDOWN_FINISH``: sent by a timer at the deadline (the worker may be inside a prefill chunk or decode step
that takes a while on a loaded machine; what it emits for the job afterwards is dropped), and the worker
frees the job's slots at its next turn.
"""
from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tg_llm import server_warmup
from tg_llm.server_handoff import WorkerClock, flush_outboxes
from tg_llm.server_jobs import END, SHUTDOWN_FINISH, Choice, Job, JobTimeout, Output, shutdown_event

# (a request's types are part of this module's interface: callers import them from here)
__all__ = ["Engine", "Choice", "Job", "JobTimeout", "Output", "END", "SHUTDOWN_FINISH", "PREFILL_CHUNK", "model_id_for"]

log = logging.getLogger("tg_llm.server")


class ProgressBar:
    """A one-line progress bar on stderr for ``progress(done, total)`` callbacks."""

    def __init__(self, label: str, stream: Any = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        total = max(total, 1)
        percent = int(100 * done / total)
        if not self.tty and percent // 25 == self._last // 25 and done != total:
            return  # not a terminal: a line at every quarter, not a redraw per weight
        if percent == self._last and done != total:
            return
        self._last = percent
        filled = self.width * done // total
        bar = "#" * filled + "-" * (self.width - filled)
        line = f"{self.label} [{bar}] {percent:3d}% ({done}/{total})"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done >= total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# prompt tokens prefilled per scheduler turn (a short request waits for at most one chunk); prefill throughput at
# 64 is that at 128 (SmolLM2 Q4_1, 512 tokens, load 8-13: 27-36 vs 29-31 tok/s; at 32: 16-23)
PREFILL_CHUNK = 64
# seconds from the engine's creation to ready that the warm-ups aim at: after the first window's decode steps, the
# next warm-ups (short prompts' prefill, the chunks, the next windows) run before ready while the last one's time
# says the next still fits; the rest while idle. A warm program cache (tgcore.engine.programs) makes them cheap.
READY_BUDGET_S = 3.5
# prefilling sequences whose next chunks may run in one forward (``prefill.batch_partners``): prompts arriving
# together then decode together from their first tokens (one joining per turn ran 8 streams' 64 tokens in 70-72
# steps, not 64-66). 8: eight prompts sent together prefill in one forward, not two (the first four's streams waited
# a forward, ~0.17 s, after their first tokens: at 8 streams a stream's decode x the worker's mean step 0.83-0.86 ->
# 0.91-0.93, quiet serve.py rounds); a joined chunk costs about the same per prompt at 2, 4 and 8 (42, 40, 42 ms).
# Each count takes two warm-up captures (without and with logits): SmolLM2 --parallel 8, max context 256, every
# warm-up before ready: RSS after them 450 -> 515 MB, the peak while the largest is made 0.84 -> 1.38 GB (it grows
# with the model's width). At --parallel 5 and up, 4 prompts sent together wait ARRIVAL_GAP_S for a fifth.
PREFILL_BATCH = 8
# prompts with at most this many chunks left prefill before the next decode step (``_Scheduler.prefills_first``); a
# short request behind a long prompt still waits for one chunk of it at most
PREFILL_FIRST_CHUNKS = 2
# a turn runs at most PREFILL_FIRST_CHUNKS prefill forwards per this many slots before its decode step (4: the
# prompts of a --parallel 8 server's slots, two chunks each, joined four to a forward; one-chunk prompts, which never
# join, four a turn there)
PREFILL_FIRST_SLOTS = 4
# a worker woken from idle by a prompt that joins others in a prefill forward (``_Scheduler.could_join_more``) waits
# for the requests sent with it while they keep coming at most ARRIVAL_GAP_S apart, for at most GATHER_MAX_S after
# the first, and no longer once a forward's PREFILL_BATCH prompts are there. 4-8 requests sent at once by the openai
# client's threads (bench/serve.py) reach the queue over 5-50 ms, 0.5-17 ms apart (up to 32 while a prefill competes
# for the 2 cores): each thread builds its request under that process's GIL; uvicorn submits each 1-2 ms after its
# bytes came. Without the wait the first prefilled alone at once and its stream stalled after its first token for the
# others' forward. A lone request's first token comes ARRIVAL_GAP_S later (a shorter prompt, which prefills alone
# anyway, does not wait).
ARRIVAL_GAP_S = 0.025
GATHER_MAX_S = 0.08
IDLE_POLL_S = 0.5     # how often an idle worker looks at the queue when nothing arrives
# an idle capture (up to a second on a loaded machine) starts only after this long without work, so requests sent
# one after another (a client's next turn, a benchmark's next round) do not wait behind one
IDLE_WARM_AFTER_S = 1.0


class Engine:
    """The model, its tokenizer and the worker that schedules jobs onto ``parallel`` slots."""

    def __init__(self, path: str | os.PathLike[str], device: str | None = None, max_context: int = 4096,
                 max_queue: int = 64, on_failure: Callable[[BaseException], None] | None = None,
                 chat_template: str | None = None, sampling: dict[str, float | int | None] | None = None,
                 parallel: int = 4, prefill_chunk: int = PREFILL_CHUNK,
                 load_model: Callable[..., Any] | None = None, freeze_model: bool = False) -> None:
        from tg_llm.model import PREFILL_CHUNK as MODEL_CHUNK
        from tg_llm.models import header_metadata
        from tg_llm.sampling import sampling_defaults
        if parallel < 1:
            raise ValueError(f"parallel must be >= 1, got {parallel}")
        if not 1 <= prefill_chunk <= MODEL_CHUNK:  # (a server's chunk is one forward of the model's: joined, padded)
            raise ValueError(f"prefill_chunk must be in 1..{MODEL_CHUNK}, got {prefill_chunk}")
        self.path = Path(path)
        self.chat_template = chat_template  # overrides the file's (None: the file's own, else ChatML)
        self.device = device
        self.max_context_asked = max_context
        self.max_queue = max_queue
        self.parallel = parallel
        self.prefill_chunk = prefill_chunk
        self.on_failure = on_failure
        self.load_model = load_model  # (path, device=, max_context=, progress=, sequences=) -> model; None: Model's
        # freeze what loading and the captures make (``server_warmup.without_collections``): a process serving this
        # engine for its lifetime; frozen, the model is never freed
        self.freeze_model = freeze_model
        metadata = header_metadata(self.path)
        self.aliases = [model_id_for(self.path)]  # names a request's ``model`` may also use
        self.model_id = _display_name(metadata) or self.aliases[0]
        # what a request gets for the sampling fields it leaves out (flags over the file over llama.cpp's)
        self.sampling = sampling_defaults(metadata, sampling)
        self.created = int(self.path.stat().st_mtime) if self.path.exists() else 0
        self.state: Literal["loading", "ready", "failed"] = "loading"
        self.error: BaseException | None = None
        self.model: Any = None
        self.tokenizer: Any = None
        self.stop_ids: set[int] = set()
        self.load_seconds = 0.0
        self.warm_up_seconds = 0.0
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._pending = 0  # jobs queued or running
        self._live: set[Job] = set()  # the same jobs (what a shutdown past its deadline ends)
        self._stop_timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self.running_jobs = 0  # jobs with a choice in a slot
        self.active_slots = 0  # slots generating
        self.stop_at: float | None = None  # time.monotonic() past which generations end (shutdown)
        self._warm_later: list[Callable[[], None]] = []  # captures to make while idle, first first
        self.constructed_at = time.monotonic()  # (what READY_BUDGET_S counts from)
        self.warm_ups_before_ready = 0  # of the captures in ``_warm_later``'s list, those made before ready
        self.clock = WorkerClock()

    # ---- loading ----

    def start_loading(self) -> threading.Thread:
        """Load on a daemon thread; the worker starts once the model is ready."""
        thread = threading.Thread(target=self._load, name="tg-llm-load", daemon=True)
        thread.start()
        return thread

    def _load(self) -> None:
        from tg_llm.generate import Generator
        from tg_llm.model import Model
        from tg_llm.tokenizer import Tokenizer
        start = time.perf_counter()
        try:
            with server_warmup.without_collections(self.freeze_model):  # (what loading and the captures make lives on)
                log.info("loading %s", self.path)
                self.tokenizer = Tokenizer.from_gguf(self.path)
                if self.chat_template is not None:
                    self.tokenizer.chat_template = self.chat_template
                self.model = (self.load_model or Model.from_gguf)(
                    self.path, device=self.device, max_context=self.max_context_asked,
                    progress=ProgressBar(f"loading {self.path.name}"), sequences=self.parallel)
                self.stop_ids = Generator(self.model, self.tokenizer).stop_ids()
                # the step of every batch size at the smallest attention window now; then the prefill of short prompts
                # (a short request's first token), the chunks of longer ones and the longer windows: before ready while
                # the time allows (READY_BUDGET_S), the rest while idle
                shapes = self.model.decode_shapes()
                first = min(pos for _, pos in shapes)
                warm = time.perf_counter()
                self.model.warm_up([s for s in shapes if s[1] == first])
                self.warm_up_seconds = time.perf_counter() - warm
                self._warm_later = server_warmup.plan(self.model, self.prefill_chunk, min(PREFILL_BATCH, self.parallel),
                                                      first)
                self._warm_while_time_allows((time.perf_counter() - warm) / max(1, sum(s[1] == first for s in shapes)))
                self.warm_up_seconds = time.perf_counter() - warm
            server_warmup.release_freed_memory(self.model)
        except BaseException as e:  # noqa: BLE001 - any failure is reported and ends the server
            self.state, self.error = "failed", e
            log.error("failed to load %s: %s: %s", self.path, type(e).__name__, e)
            if self.on_failure is not None:
                self.on_failure(e)
            return
        self.load_seconds = time.perf_counter() - start
        cfg = self.model.config
        log.info("loaded %s (%s, %d layers, vocab %d, context %d of %d, %d slots) on %s in %.1f s (warm-up %.1f s, "
                 "%d more warm-ups while idle)", self.model_id, cfg.architecture, cfg.n_layers, cfg.vocab_size,
                 cfg.max_context, cfg.context_length, self.parallel, getattr(self.model, "device", self.device),
                 self.load_seconds, self.warm_up_seconds, len(self._warm_later))
        self._worker = threading.Thread(target=self._work, name="tg-llm-worker", daemon=True)
        self._worker.start()
        self.state = "ready"

    def _warm_while_time_allows(self, last: float) -> None:
        """Make the next idle warm-ups now, before ready, while one more taking as long as the last (``last``
        seconds) ends within ``READY_BUDGET_S`` of the engine's creation; none once a shutdown began."""
        while self._warm_later and self.stop_at is None and \
                time.monotonic() - self.constructed_at + last <= READY_BUDGET_S:
            start = time.perf_counter()
            try:
                self._warm_later.pop(0)()
            except Exception:  # noqa: BLE001 - an optional capture: a request needing it compiles it then
                log.warning("a warm-up capture failed; the rest are skipped", exc_info=True)
                self._warm_later.clear()
                return
            self.warm_ups_before_ready += 1
            last = time.perf_counter() - start

    @property
    def max_context(self) -> int:
        return int(self.model.config.max_context)

    # ---- queue ----

    @property
    def warm_ups_left(self) -> int:
        """Captures the worker still makes while idle."""
        return len(self._warm_later)

    @property
    def pending(self) -> int:
        return self._pending

    def try_submit(self, job: Job) -> bool:
        """Queue ``job``; False when ``max_queue`` jobs are already waiting or running."""
        with self._lock:
            if self._pending >= self.max_queue:
                return False
            self._pending += 1
            self._live.add(job)
        self._queue.put(job)
        return True

    def drain(self, seconds: float) -> None:
        """Shutdown: jobs already accepted may generate for ``seconds`` more (a second call can shorten it).
        At the deadline the worker ends them at its next token; a timer ends their streams at the deadline
        even when the worker is inside a long prefill chunk or decode step."""
        at = time.monotonic() + max(seconds, 0.0)
        if self.stop_at is not None and self.stop_at <= at:
            return
        self.stop_at = at
        if self._stop_timer is not None:
            self._stop_timer.cancel()
        self._stop_timer = threading.Timer(max(seconds, 0.0), self._end_live)
        self._stop_timer.daemon = True
        self._stop_timer.start()

    def _end_live(self) -> None:
        with self._lock:
            live = list(self._live)
        for job in live:
            job.end_now()

    @property
    def stopping(self) -> bool:
        return self.stop_at is not None and time.monotonic() >= self.stop_at

    def stop(self) -> None:
        """Stop the worker after the jobs already queued."""
        self._queue.put(None)

    # ---- the scheduler ----

    def _work(self) -> None:
        sched = _Scheduler(self)
        last_busy = -IDLE_WARM_AFTER_S  # time.monotonic() when the worker last had work
        clock = self.clock
        clock.lap("load")  # (loading and the warm-ups before ready)
        while True:
            clock.lap("host")
            idle = not sched.busy()
            now = time.monotonic()
            if not idle:
                last_busy = now
            quiet = now - last_busy
            if idle and self._warm_later and self.stop_at is None and quiet >= IDLE_WARM_AFTER_S:
                try:
                    with server_warmup.without_collections(self.freeze_model):
                        self._warm_later.pop(0)()  # one capture while idle
                except Exception:  # noqa: BLE001 - an optional capture: a request needing it compiles it then
                    log.warning("an idle warm-up capture failed; the rest are skipped", exc_info=True)
                    self._warm_later.clear()
                server_warmup.release_freed_memory(self.model)
            # wait for work only when there is nothing to run
            wait = IDLE_POLL_S if not self._warm_later else max(0.0, min(IDLE_POLL_S, IDLE_WARM_AFTER_S - quiet))
            self.take_arrivals(sched, wait if idle else None)
            if idle:
                clock.lap("idle")
                self.gather(sched)
            if sched.closing and not sched.busy():
                return
            try:
                sched.turn()
            except BaseException as e:  # noqa: BLE001 - reported to every running job, the worker keeps serving
                log.exception("generation failed")
                sched.fail_all(e)
            flush_outboxes()  # (the tokens held back that waited long enough)

    def gather(self, sched: _Scheduler) -> None:
        """Woken from idle: give the jobs taken their slots and, while their next prefill forward could take more
        prompts, wait for the requests sent with them (``ARRIVAL_GAP_S``, ``GATHER_MAX_S``), so they share it."""
        if not sched.busy():
            return
        first = min(state.job.submitted for state in sched.jobs)
        sched.admit()
        while sched.could_join_more() and not sched.closing and self.stop_at is None:
            last = max(state.job.submitted for state in sched.jobs)
            left = min(first + GATHER_MAX_S, last + ARRIVAL_GAP_S) - time.monotonic()
            if left <= 0:
                break
            self.take_arrivals(sched, left)
            sched.admit()
        self.clock.lap("gather")

    def take_arrivals(self, sched: _Scheduler, wait: float | None = None) -> None:
        """Hand the jobs queued to the scheduler (first waiting up to ``wait`` seconds for one; None: not at all)."""
        arrived: list[Job | None] = []
        try:
            arrived.append(self._queue.get(timeout=wait) if wait is not None else self._queue.get_nowait())
            while True:
                arrived.append(self._queue.get_nowait())
        except queue.Empty:
            pass
        for item in arrived:
            if item is None:
                sched.closing = True
            else:
                sched.accept(item)

    def _job_done(self, job: Job) -> None:
        with self._lock:
            self._pending -= 1
            self._live.discard(job)
        job.emit(END)

    def prompt_logprobs(self, c: Choice, seq: int = 0) -> list[tuple[int, float | None, list[tuple[int, float]]]]:
        """Each prompt token with its log-probability given the tokens before it (None for the first) and
        the ``top_logprobs`` most likely tokens at its position, from a forward pass over the prompt in slot
        ``seq``. The pass runs in the scheduler's chunks (``prefill_chunk`` tokens from position 0), so the keys
        and values it leaves in the cache, which the generation then continues from, are bitwise those of a
        request without prompt log-probabilities: its generated tokens and their log-probabilities are the same.
        (The whole prompt runs in this one scheduler turn.)"""
        from tg_llm.sampling import log_softmax
        ids = c.prompt_ids
        out: list[tuple[int, float | None, list[tuple[int, float]]]] = [(ids[0], None, [])]
        if len(ids) < 2:
            return out
        chunk = self.prefill_chunk
        logits = np.concatenate([np.asarray(self.model.forward(ids[at:min(at + chunk, len(ids) - 1)], at, seq=seq))
                                 for at in range(0, len(ids) - 1, chunk)])
        for pos in range(1, len(ids)):
            row = log_softmax(logits[pos - 1])
            top: list[tuple[int, float]] = []
            if c.top_logprobs:
                best = np.argsort(-row, kind="stable")[:c.top_logprobs]
                top = [(int(t), float(row[t])) for t in best]
            out.append((ids[pos], float(row[ids[pos]]), top))
        return out


@dataclass
class _Sequence:
    """One choice of a job in a slot: its prompt, how much of it the slot's cache holds, its token stream."""
    job: Job
    index: int
    choice: Choice
    slot: int
    done: int                     # prompt tokens in the slot's cache
    cached: int                   # of which came from the prefix cache
    clock: _ChoiceClock
    stream: Any = None            # the TokenStream once the prompt is prefilled
    next_token: int | None = None  # the token to run at the next decode step

    @property
    def prefilling(self) -> bool:
        return self.stream is None


class _JobState:
    def __init__(self, job: Job) -> None:
        self.job = job
        self.left = len(job.choices)  # choices not finished
        self.waiting = list(range(len(job.choices)))  # choices not in a slot yet
        self.running = False


class _Scheduler:
    """The worker's state: jobs accepted, choices waiting for a slot, sequences in slots (see the module doc)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.model = engine.model
        self.jobs: list[_JobState] = []  # in arrival order
        self.slots: list[_Sequence | None] = [None] * engine.parallel
        self.closing = False

    def busy(self) -> bool:
        return bool(self.jobs)

    def accept(self, job: Job) -> None:
        if job.cancelled.is_set():
            self.engine._job_done(job)
            return
        self.jobs.append(_JobState(job))

    # ---- one turn ----

    def turn(self) -> None:
        self.sweep()
        self.admit()
        # a bounded run of prefill forwards (``PREFILL_FIRST_SLOTS``): requests that keep arriving and end at their
        # first token (max_tokens 1, a stop, a cancel) would otherwise free their slots for the next ones and never
        # let the running streams step
        for _ in range(PREFILL_FIRST_CHUNKS * -(-self.engine.parallel // PREFILL_FIRST_SLOTS)):
            self.prefill_chunks()
            self.sweep()  # a chunk can take a while: what was cancelled or stopped meanwhile does not decode
            if not any(self.prefills_first(s) for s in self.slots):
                break
            self.engine.take_arrivals(self)  # (requests that arrived during the chunk join now)
            self.admit()
        self.decode_step()

    def prefills_first(self, seq: _Sequence | None) -> bool:
        """Whether ``seq`` is prefilling a prompt with at most ``PREFILL_FIRST_CHUNKS`` chunks left: such prompts
        (requests arriving a few ms apart) all prefill before the next decode step, so the streams decoding meanwhile
        get one stall, not a chunk between each of their steps, and the new ones join the next step together; a
        longer prompt prefills one chunk per turn, interleaved with the steps."""
        return seq is not None and seq.prefilling and \
            len(seq.choice.prompt_ids) - seq.done <= PREFILL_FIRST_CHUNKS * self.engine.prefill_chunk

    def sweep(self) -> None:
        """End the jobs that were cancelled, ran past their deadline, or that the shutdown stops."""
        now = time.monotonic()
        for state in list(self.jobs):
            job = state.job
            if job.cancelled.is_set():
                self.end(state)
            elif now > job.deadline:
                job.emit(Output("error", 0, JobTimeout("the request ran past the server's time limit")))
                self.end(state)
            elif self.engine.stopping:
                for i in self.unfinished(state):
                    job.emit(Output("event", i, shutdown_event(job.choices[i])))
                self.end(state)

    def unfinished(self, state: _JobState) -> list[int]:
        running = [s.index for s in self.slots if s is not None and s.job is state.job]
        return sorted(running + state.waiting)

    def end(self, state: _JobState) -> None:
        """Free the job's slots and deliver its end."""
        for i, s in enumerate(self.slots):
            if s is not None and s.job is state.job:
                s.clock.add_to(s.job)
                self.slots[i] = None
        self.jobs.remove(state)
        self.engine._job_done(state.job)
        self.count()

    def count(self) -> None:
        self.engine.active_slots = sum(s is not None for s in self.slots)
        self.engine.running_jobs = sum(1 for st in self.jobs if st.running)

    def fail_all(self, error: BaseException) -> None:
        for state in list(self.jobs):
            if state.running:
                state.job.emit(Output("error", 0, error))
                self.end(state)
        for seq in range(self.model.sequences):
            self.model.reset(seq)

    def admit(self) -> None:
        """Waiting choices (first come first served) into free slots."""
        for state in list(self.jobs):
            while state.waiting and None in self.slots:
                index = state.waiting.pop(0)
                try:
                    self.start(state, index)
                except Exception as e:  # noqa: BLE001 - this job's error; the others go on
                    if not isinstance(e, ValueError):
                        log.exception("generation failed")
                    state.job.emit(Output("error", 0, e))
                    self.end(state)
                    break
            if None not in self.slots:
                return

    def start(self, state: _JobState, index: int) -> None:
        from tg_llm.generate import common_prefix
        from tg_llm.model import ContextLengthError
        job, choice = state.job, state.job.choices[index]
        prompt, limit = choice.prompt_ids, self.model.config.max_context
        if not prompt:
            raise ValueError("the prompt has no tokens")
        if len(prompt) >= limit:
            raise ContextLengthError(f"the prompt has {len(prompt)} tokens; the context holds {limit} "
                                     f"(room is needed for at least one generated token)")
        free = [i for i, s in enumerate(self.slots) if s is None]
        in_use = [i for i, s in enumerate(self.slots) if s is not None]
        chunk = self.engine.prefill_chunk
        shared = {i: common_prefix(self.model.tokens_of(i), prompt) for i in free}

        # the rows the steps will run anyway: the sequences in slots and those waiting for one (this one included)
        demand = len(in_use) + 1 + sum(len(st.waiting) for st in self.jobs)
        least_rows = self.model.batch_rows(min(demand, len(self.slots)) - 1)

        def reused(i: int) -> int:  # (only whole chunks of the prompt are reused, see below)
            return min(shared[i], len(prompt) - 1) // chunk * chunk

        def cost(i: int) -> tuple[int, int, int]:
            # a batched step runs rows up to the highest slot in use (a power of two): fewest rows first (beyond
            # those the waiting sequences need anyway), then the most whole chunks of the prompt cached, then the
            # lowest slot
            rows = max(least_rows, self.model.batch_rows(max([i, *in_use])))
            return (rows, -reused(i), i)
        slot = min(free, key=cost)
        # another free slot caching more of the prompt (requests arriving one by one each see fewer rows wanted and
        # take the lowest slots, whose caches hold other prompts): the two slots swap what they hold, so this prompt
        # is not prefilled again and the chosen slot's cache is kept for a later prompt
        donor = max(free, key=lambda i: (reused(i), -i))
        if reused(donor) > reused(slot):
            self.model.swap_sequences(slot, donor)
            shared[slot], shared[donor] = shared[donor], shared[slot]
            self.engine.clock.swaps += 1
        job.started.set()
        state.running = True
        if choice.prompt_logprobs:
            job.emit(Output("prompt_logprobs", index, self.engine.prompt_logprobs(choice, slot)))
            shared[slot] = len(prompt) - 1
        if choice.max_tokens == 0:
            self.finished(state)
            return
        # the cached prefix is cut back to a whole number of chunks: the rest is then prefilled in the same chunks
        # as from scratch, so a prompt's logits (and tokens) do not depend on what its slot held before
        cached = min(shared[slot], len(prompt) - 1) // chunk * chunk
        self.slots[slot] = _Sequence(job, index, choice, slot, cached, cached, _ChoiceClock(time.monotonic()))
        self.count()

    def finished(self, state: _JobState) -> None:
        state.left -= 1
        if state.left == 0:
            self.end(state)

    def state_of(self, job: Job) -> _JobState:
        return next(st for st in self.jobs if st.job is job)

    def prefill_chunks(self) -> None:
        """The next chunk of the prefilling sequence with the fewest prompt tokens left, in one forward with the next
        chunks of up to ``PREFILL_BATCH`` - 1 others that run alongside it as they would alone
        (``prefill.batch_partners``); prompts of two chunks arriving together then get their first tokens together and
        decode in full steps from there, as ``tg llm bench``'s sequences do, not one joining per turn beside steps that
        grow (shorter prompts, whose only chunk the warm-up does not capture joined, and a pipeline's run alone);
        a sequence's last chunk samples its first token."""
        waiting = self.prefill_order()
        if not waiting:
            return
        from tg_llm.prefill import batch_partners
        lead, group = waiting[0], waiting[:1]
        lead_shape = self.shape(lead)
        if self.joins(lead_shape):
            others = [s for s in waiting[1:] if self.shape(s) == lead_shape]
            group += [others[i] for i in batch_partners(self.model, self.next_chunk(lead),
                                                        [self.next_chunk(s) for s in others], PREFILL_BATCH - 1)]
        parts = [self.next_chunk(s)[1] for s in group]
        last = lead_shape[2]
        flush_outboxes(force=True)  # (a chunk takes a while: the tokens held back go first)
        clock = self.engine.clock
        clock.lap("host")
        clock.chunks += len(group)
        if len(group) == 1:  # (alone: main's calls, whose captures the warm-up made)
            seq = group[0]
            # (a later chunk as many rows as a whole one: the warm-up's captures, whatever the prompt's length)
            whole = server_warmup.whole_rows(self.engine.prefill_chunk)
            logits = self.model.forward_last(parts[0], seq.done, seq=seq.slot, padding=whole if seq.done else 0)[None] \
                if last else self.model.prefill(parts[0], seq.done, seq=seq.slot)
        else:
            logits = self.model.prefill_chunks([(s.slot, part, s.done) for s, part in zip(group, parts, strict=True)],
                                               logits=last)
        clock.lap("prefill")
        clock.prefill_forwards += 1
        for i, (seq, part) in enumerate(zip(group, parts, strict=True)):
            seq.done += len(part)
            if last:
                seq.stream = self.new_stream(seq)
                self.deliver(seq, logits[i])

    def prefill_order(self) -> list[_Sequence]:
        """The prefilling sequences, the one with the fewest prompt tokens left (the next forward's lead) first."""
        return sorted((s for s in self.slots if s is not None and s.prefilling),
                      key=lambda s: (len(s.choice.prompt_ids) - s.done, s.clock.start))

    def next_chunk(self, seq: _Sequence) -> tuple[int, list[int], int]:
        """(slot, tokens, start) of the sequence's next prompt chunk."""
        return seq.slot, seq.choice.prompt_ids[seq.done:seq.done + self.engine.prefill_chunk], seq.done

    def shape(self, seq: _Sequence) -> tuple[int, int, bool]:
        """The sequence's next chunk: its padded rows, its start and whether it is the prompt's last."""
        from tg_llm.prefill import batch_padding
        return (batch_padding([self.next_chunk(seq)]), seq.done,
                seq.done + self.engine.prefill_chunk >= len(seq.choice.prompt_ids))

    def joins(self, shape: tuple[int, int, bool]) -> bool:
        """Whether a next chunk of this ``shape`` may run in one forward with others: only in the shapes the warm-up
        captured (``server_warmup.joining``: prompts of two chunks), all their prompts' last chunks or none (a chunk's
        keys are those of its run alone)."""
        chunk = self.engine.prefill_chunk
        whole = server_warmup.whole_rows(chunk)
        return bool(self.model.joins_prompts) and shape in ((whole, 0, False), (whole, chunk, True))

    def could_join_more(self) -> bool:
        """Whether the next prefill forward could take prompts that are not here yet: its lead joins others, fewer
        than ``PREFILL_BATCH`` prompts of its shape are prefilling, a slot is free and no choice waits for one."""
        waiting = self.prefill_order()
        if not waiting or None not in self.slots or any(st.waiting for st in self.jobs):
            return False
        lead = self.shape(waiting[0])
        return self.joins(lead) and sum(self.shape(s) == lead for s in waiting) < PREFILL_BATCH

    def new_stream(self, seq: _Sequence) -> Any:
        from tg_llm.generate import TokenStream
        from tg_llm.sampling import SamplingParams
        c = seq.choice
        params = SamplingParams(temperature=c.temperature, top_p=c.top_p, top_k=c.top_k, min_p=c.min_p,
                                repetition_penalty=c.repetition_penalty, repeat_last_n=c.repeat_last_n,
                                frequency_penalty=c.frequency_penalty, presence_penalty=c.presence_penalty,
                                logprobs=c.top_logprobs if c.logprobs else 0, logprob=c.logprobs)
        return TokenStream(self.engine.tokenizer, len(c.prompt_ids), seq.cached, c.max_tokens, params, c.stop,
                           c.seed, self.engine.stop_ids, self.model.config.max_context)

    def deliver(self, seq: _Sequence, logits: Any) -> None:
        """Sample the sequence's next token from ``logits`` and send its event; free the slot when it finished."""
        event = seq.stream.step(logits)
        seq.clock.tick(event)
        job = seq.job
        if job.first_token_at is None:
            job.first_token_at = seq.clock.first
        job.emit(Output("event", seq.index, event))
        if event.finish_reason is None:
            seq.next_token = event.token_id
            return
        seq.clock.add_to(job)
        self.slots[seq.slot] = None
        self.count()
        self.finished(self.state_of(job))

    def decode_step(self) -> None:
        """One batched forward for every sequence with a token to run."""
        ready = [s for s in self.slots if s is not None and s.next_token is not None]
        if not ready:
            return
        steps = [(s.slot, s.next_token, s.stream.pos - 1) for s in ready]
        for s in ready:
            s.next_token = None
        clock = self.engine.clock
        clock.lap("host")
        logits = self.model.decode(steps)
        clock.lap("decode")
        clock.steps += 1
        clock.steps_while_prefilling += any(s is not None and s.prefilling for s in self.slots)
        clock.rows += len(steps)
        clock.step_rows += self.model.batch_rows(max(s.slot for s in ready))
        for s, row in zip(ready, logits, strict=True):
            self.deliver(s, row)


class _ChoiceClock:
    """When one choice's tokens came: prefill is the wait for the first, decode the time from it to the last."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.first: float | None = None
        self.last = start
        self.tokens = 0
        self.prefilled = 0
        self.added = False

    def tick(self, event: Any) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = now
            self.prefilled = int(getattr(event, "prompt_tokens", 0)) - int(getattr(event, "cached_tokens", 0))
        self.last = now
        self.tokens += 1

    def add_to(self, job: Job) -> None:
        if self.first is None or self.added:
            return
        self.added = True
        job.prefill_tokens += self.prefilled
        job.prefill_s += self.first - self.start
        job.decode_tokens += self.tokens - 1
        job.decode_s += self.last - self.first


def _display_name(metadata: dict[str, Any]) -> str | None:
    name = metadata.get("general.name")
    return " ".join(name.split()) if isinstance(name, str) and name.strip() else None


def model_id_for(path: Path) -> str:
    """The name clients use for the model: the file name without ``.gguf``."""
    name = path.name
    return name[:-5] if name.lower().endswith(".gguf") else name

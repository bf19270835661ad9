"""One model, one generation at a time: loading in the background and a fair FIFO queue of requests.

In:  ``Engine(path, device, max_context)``; ``engine.start_loading()`` loads the model and tokenizer on a
     thread (a progress bar on stderr, the load time logged) while the server already answers /health.
     ``engine.submit(job)`` puts a ``Job`` (one or more ``Choice``s: prompt ids + sampling settings) in
     the queue.
Out: each job's ``Output`` items, delivered to the job's asyncio queue in order: prompt log-probabilities
     (echo), the generator's events per choice, an error, and always a final ``END``.

A single worker thread takes jobs first-in first-out and runs their choices one after another, so
requests never interleave on the model (the KV cache belongs to one generation at a time). A job whose
client went away (``job.cancel()``) is skipped if it is still queued, and its generation stops at the
next token if it is running; past its deadline a job stops the same way and reports a timeout.

Shutdown: ``engine.drain(seconds)`` lets the jobs already accepted run for at most ``seconds`` more;
past that, each choice still generating (or not started) ends at its next token with a last event
whose ``finish_reason`` is ``SHUTDOWN_FINISH``.
"""
from __future__ import annotations

import asyncio
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

log = logging.getLogger("tg_llm.server")


@dataclass
class Choice:
    """One generation: a prompt and how to sample its continuation."""
    prompt_ids: list[int]
    max_tokens: int
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    repeat_last_n: int = -1
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logprobs: bool = False         # report each generated token's log-probability
    top_logprobs: int = 0          # ... and this many alternatives
    prompt_logprobs: bool = False  # echo: also the log-probabilities of the prompt tokens


OutputKind = Literal["prompt_logprobs", "event", "error", "end"]


@dataclass
class Output:
    """What the worker sends back for a job: ``kind``, the choice index and a payload."""
    kind: OutputKind
    index: int = 0
    payload: Any = None


END = Output("end")
SHUTDOWN_FINISH = "server_shutdown"  # the finish_reason of a choice the server's shutdown ended


class JobTimeout(Exception):
    """The job ran past its deadline."""


class Job:
    """A request's work, its output queue (on the server's event loop) and its cancel flag."""

    def __init__(self, choices: list[Choice], loop: asyncio.AbstractEventLoop, deadline: float) -> None:
        self.choices = choices
        self.loop = loop
        self.deadline = deadline  # time.monotonic() value
        self.outputs: asyncio.Queue[Output] = asyncio.Queue()
        self.cancelled = threading.Event()
        self.started = threading.Event()
        # figures the worker fills in (time.monotonic() values, seconds, token counts)
        self.submitted = time.monotonic()
        self.first_token_at: float | None = None
        self.prefill_tokens = 0
        self.prefill_s = 0.0
        self.decode_tokens = 0  # tokens after each choice's first: the decode rate's numerator
        self.decode_s = 0.0

    @property
    def ttft(self) -> float | None:
        """Seconds from submission (queue wait included) to the first generated token."""
        return None if self.first_token_at is None else self.first_token_at - self.submitted

    @property
    def decode_tokens_per_second(self) -> float | None:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 and self.decode_tokens else None

    def cancel(self) -> None:
        """Stop this job: skipped while queued, stopped at the next token while running."""
        self.cancelled.set()

    def emit(self, item: Output) -> None:
        """Deliver an output to the request's coroutine (thread-safe; dropped if the loop is gone)."""
        try:
            self.loop.call_soon_threadsafe(self.outputs.put_nowait, item)
        except RuntimeError:  # the event loop closed (server shut down)
            self.cancelled.set()


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


class Engine:
    """The model, its tokenizer and the worker that runs jobs in arrival order."""

    def __init__(self, path: str | os.PathLike[str], device: str | None = None, max_context: int = 4096,
                 max_queue: int = 64, on_failure: Callable[[BaseException], None] | None = None,
                 chat_template: str | None = None, sampling: dict[str, float | int | None] | None = None) -> None:
        from tg_llm.models import header_metadata
        from tg_llm.sampling import sampling_defaults
        self.path = Path(path)
        self.chat_template = chat_template  # overrides the file's (None: the file's own, else ChatML)
        self.device = device
        self.max_context_asked = max_context
        self.max_queue = max_queue
        self.on_failure = on_failure
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
        self.generator: Any = None
        self.load_seconds = 0.0
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._pending = 0  # jobs queued or running
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self.running: Job | None = None
        self.stop_at: float | None = None  # time.monotonic() past which generations end (shutdown)

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
            log.info("loading %s", self.path)
            self.tokenizer = Tokenizer.from_gguf(self.path)
            if self.chat_template is not None:
                self.tokenizer.chat_template = self.chat_template
            self.model = Model.from_gguf(self.path, device=self.device, max_context=self.max_context_asked,
                                         progress=ProgressBar(f"loading {self.path.name}"))
            self.generator = Generator(self.model, self.tokenizer)
        except BaseException as e:  # noqa: BLE001 - any failure is reported and ends the server
            self.state, self.error = "failed", e
            log.error("failed to load %s: %s: %s", self.path, type(e).__name__, e)
            if self.on_failure is not None:
                self.on_failure(e)
            return
        self.load_seconds = time.perf_counter() - start
        cfg = self.model.config
        log.info("loaded %s (%s, %d layers, vocab %d, context %d of %d) on %s in %.1f s", self.model_id,
                 cfg.architecture, cfg.n_layers, cfg.vocab_size, cfg.max_context, cfg.context_length,
                 getattr(self.model, "device", self.device), self.load_seconds)
        self._worker = threading.Thread(target=self._work, name="tg-llm-worker", daemon=True)
        self._worker.start()
        self.state = "ready"

    @property
    def max_context(self) -> int:
        return int(self.model.config.max_context)

    # ---- queue ----

    @property
    def pending(self) -> int:
        return self._pending

    def try_submit(self, job: Job) -> bool:
        """Queue ``job``; False when ``max_queue`` jobs are already waiting or running."""
        with self._lock:
            if self._pending >= self.max_queue:
                return False
            self._pending += 1
        self._queue.put(job)
        return True

    def drain(self, seconds: float) -> None:
        """Shutdown: jobs already accepted may generate for ``seconds`` more (a second call can shorten it)."""
        at = time.monotonic() + max(seconds, 0.0)
        self.stop_at = at if self.stop_at is None else min(self.stop_at, at)

    @property
    def stopping(self) -> bool:
        return self.stop_at is not None and time.monotonic() >= self.stop_at

    def stop(self) -> None:
        """Stop the worker after the jobs already queued."""
        self._queue.put(None)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self.running = job
            try:
                if not job.cancelled.is_set():
                    job.started.set()
                    self._run(job)
            finally:
                self.running = None
                with self._lock:
                    self._pending -= 1
                job.emit(END)

    def _run(self, job: Job) -> None:
        index = 0
        try:
            for index, choice in enumerate(job.choices):
                if choice.prompt_logprobs:
                    job.emit(Output("prompt_logprobs", index, self.prompt_logprobs(choice)))
                    self._check(job)
                if choice.max_tokens == 0:
                    continue
                self._check(job)
                events = self._generate(choice)
                clock = _ChoiceClock(time.monotonic())
                try:
                    for event in events:
                        clock.tick(event)
                        if job.first_token_at is None:
                            job.first_token_at = clock.first
                        job.emit(Output("event", index, event))
                        if getattr(event, "finish_reason", None) is not None:
                            break
                        self._check(job)
                finally:
                    close = getattr(events, "close", None)
                    if close is not None:
                        close()
                    clock.add_to(job)
        except _Cancelled:
            return
        except _Stopping:
            for i in range(index, len(job.choices)):  # this choice and those not started
                job.emit(Output("event", i, _shutdown_event(job.choices[i])))
        except BaseException as e:  # noqa: BLE001 - reported to the request, the worker keeps serving
            if not isinstance(e, JobTimeout | ValueError):
                log.exception("generation failed")
            job.emit(Output("error", 0, e))

    def _check(self, job: Job) -> None:
        if job.cancelled.is_set():
            raise _Cancelled
        if time.monotonic() > job.deadline:
            raise JobTimeout("the request ran past the server's time limit")
        if self.stopping:
            raise _Stopping

    def _generate(self, c: Choice) -> Any:
        return self.generator.generate(
            c.prompt_ids, c.max_tokens, temperature=c.temperature, top_p=c.top_p, top_k=c.top_k, min_p=c.min_p,
            repetition_penalty=c.repetition_penalty, repeat_last_n=c.repeat_last_n,
            frequency_penalty=c.frequency_penalty, presence_penalty=c.presence_penalty,
            logprobs=c.top_logprobs if c.logprobs else 0, stop=c.stop, seed=c.seed)

    def prompt_logprobs(self, c: Choice) -> list[tuple[int, float | None, list[tuple[int, float]]]]:
        """Each prompt token with its log-probability given the tokens before it (None for the first) and
        the ``top_logprobs`` most likely tokens at its position, from one forward pass over the prompt."""
        from tg_llm.sampling import log_softmax
        ids = c.prompt_ids
        out: list[tuple[int, float | None, list[tuple[int, float]]]] = [(ids[0], None, [])]
        if len(ids) < 2:
            return out
        logits = np.asarray(self.model.forward(ids[:-1], 0))
        for pos in range(1, len(ids)):
            row = log_softmax(logits[pos - 1])
            top: list[tuple[int, float]] = []
            if c.top_logprobs:
                best = np.argsort(-row, kind="stable")[:c.top_logprobs]
                top = [(int(t), float(row[t])) for t in best]
            out.append((ids[pos], float(row[ids[pos]]), top))
        return out


class _ChoiceClock:
    """When one choice's tokens came: prefill is the wait for the first, decode the time from it to the last."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.first: float | None = None
        self.last = start
        self.tokens = 0
        self.prefilled = 0

    def tick(self, event: Any) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = now
            self.prefilled = int(getattr(event, "prompt_tokens", 0)) - int(getattr(event, "cached_tokens", 0))
        self.last = now
        self.tokens += 1

    def add_to(self, job: Job) -> None:
        if self.first is None:
            return
        job.prefill_tokens += self.prefilled
        job.prefill_s += self.first - self.start
        job.decode_tokens += self.tokens - 1
        job.decode_s += self.last - self.first


class _Cancelled(Exception):
    """The job's client went away."""


class _Stopping(Exception):
    """The server is shutting down and the time it gave running jobs is up."""


def _shutdown_event(choice: Choice) -> Any:
    """The last event of a choice the shutdown ended (no token: the text already sent is all there is)."""
    from tg_llm.generate import Event
    return Event(None, "", finish_reason=SHUTDOWN_FINISH, prompt_tokens=len(choice.prompt_ids))


def _display_name(metadata: dict[str, Any]) -> str | None:
    name = metadata.get("general.name")
    return " ".join(name.split()) if isinstance(name, str) and name.strip() else None


def model_id_for(path: Path) -> str:
    """The name clients use for the model: the file name without ``.gguf``."""
    name = path.name
    return name[:-5] if name.lower().endswith(".gguf") else name

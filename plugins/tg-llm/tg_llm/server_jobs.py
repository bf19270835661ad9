"""A request's work as the engine sees it: its choices, the outputs it gets back and its cancel flag.

In:  ``Job(choices, loop, deadline)``: one or more ``Choice``s (prompt ids and sampling settings) of a request, the
     asyncio loop its coroutine runs on, and its deadline.
Out: ``job.outputs``: ``Output`` items the engine's worker emits (thread-safe, through ``server_handoff``'s outbox),
     in order per choice, always ending with ``END``; ``job.end_now()`` ends every unfinished choice at once with a
     ``SHUTDOWN_FINISH`` event (a shutdown past its deadline); the timings the worker fills in (TTFT, decode rate).
"""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from tg_llm.server_handoff import outbox_for


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
        self._emit_lock = threading.Lock()
        self._finished: set[int] = set()  # choices whose last event was emitted
        self._begun: set[int] = set()  # choices whose first event was emitted
        self._closed = False  # END emitted: later outputs are dropped
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
        """Deliver an output to the request's coroutine (thread-safe; dropped after END, or if the loop is gone)."""
        with self._emit_lock:
            if self._closed:
                return
            # (a choice's tokens between its first and its last are paced: server_handoff)
            urgent = item.kind != "event" or item.index not in self._begun
            if item.kind == "event":
                self._begun.add(item.index)
                if getattr(item.payload, "finish_reason", None) is not None:
                    self._finished.add(item.index)
                    urgent = True
            self._closed = item.kind == "end"
            self._put(item, urgent)

    def end_now(self) -> None:
        """Shutdown past its deadline: each choice not finished gets its ``SHUTDOWN_FINISH`` event, then END,
        at once, whatever the worker is running (its later outputs for this job are dropped)."""
        with self._emit_lock:
            if self._closed:
                return
            for i, choice in enumerate(self.choices):
                if i not in self._finished:
                    self._put(Output("event", i, shutdown_event(choice)))
            self._put(END)
            self._closed = True
        self.cancelled.set()

    def _put(self, item: Output, urgent: bool = True) -> None:
        try:
            outbox_for(self.loop).put(self.outputs, item, urgent)
        except RuntimeError:  # the event loop closed (server shut down)
            self.cancelled.set()


def shutdown_event(choice: Choice) -> Any:
    """The last event of a choice the shutdown ended (no token: the text already sent is all there is)."""
    from tg_llm.generate import Event
    return Event(None, "", finish_reason=SHUTDOWN_FINISH, prompt_tokens=len(choice.prompt_ids))

"""``GET /metrics``: the server's figures in Prometheus' text format (via ``prometheus-client``).

Each app has its own registry (several apps in one process, as in the tests, never share counters):

- ``tg_llm_requests_total{path, status}``: HTTP requests answered;
- ``tg_llm_prompt_tokens_total``, ``tg_llm_completion_tokens_total``: tokens in and out of generations;
- ``tg_llm_queue_depth``: requests waiting; ``tg_llm_active_slots``: slots generating (up to ``--parallel``);
- ``tg_llm_prefill_tokens_total`` / ``_seconds_total`` and ``tg_llm_decode_tokens_total`` /
  ``_seconds_total`` (their ratio is the rate over any window), and ``tg_llm_prefill_tokens_per_second``
  / ``tg_llm_decode_tokens_per_second``: the rates of the last request that generated;
- ``tg_llm_time_to_first_token_seconds``: a histogram, queue wait included (what a client waits);
- ``tg_llm_kernels_compiled``: kernels the process made programs for so far (a request that runs captured steps
  adds none), counted whether compiled now or read from the program and compiler disk caches;
  ``tg_llm_kernels_generated``: those of them whose code generation ran (0 for kernels a warm program cache
  holds); ``tg_llm_warm_ups_left``: captures the worker still makes while idle;
- ``tg_llm_worker_seconds_total{phase}``: where the model's worker thread spends its time (prefill, decode, host,
  idle, gather); ``tg_llm_decode_steps_total``, ``tg_llm_decode_rows_total`` (sequences),
  ``tg_llm_decode_step_rows_total`` (rows computed, idle ones included), ``tg_llm_prefill_chunks_total``,
  ``tg_llm_prefill_forwards_total`` (the forwards they ran in), ``tg_llm_decode_steps_while_prefilling_total`` (steps
  run while a sequence in a slot waited for its prompt), ``tg_llm_slot_swaps_total`` (slots that swapped caches to
  reuse a cached prompt prefix).
"""
from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))
KNOWN_PATHS = ("/", "/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions")


class Metrics:
    """The counters, gauges and histogram of one server; ``render()`` is the ``/metrics`` body."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, engine: Any) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("tg_llm_requests", "HTTP requests answered", ["path", "status"], registry=r)
        self.prompt_tokens = Counter("tg_llm_prompt_tokens", "prompt tokens of generations", registry=r)
        self.completion_tokens = Counter("tg_llm_completion_tokens", "tokens generated", registry=r)
        self.prefill_tokens = Counter("tg_llm_prefill_tokens", "prompt tokens run through the model (not cached)",
                                      registry=r)
        self.prefill_seconds = Counter("tg_llm_prefill_seconds", "seconds spent prefilling", registry=r)
        self.decode_tokens = Counter("tg_llm_decode_tokens", "tokens decoded after each choice's first",
                                     registry=r)
        self.decode_seconds = Counter("tg_llm_decode_seconds", "seconds from each choice's first token to its last",
                                      registry=r)
        self.prefill_rate = Gauge("tg_llm_prefill_tokens_per_second", "prefill rate of the last generation",
                                  registry=r)
        self.decode_rate = Gauge("tg_llm_decode_tokens_per_second", "decode rate of the last generation",
                                 registry=r)
        self.ttft = Histogram("tg_llm_time_to_first_token_seconds", "seconds from a request's arrival to its first "
                              "token (queue wait included)", buckets=TTFT_BUCKETS, registry=r)
        queue = Gauge("tg_llm_queue_depth", "requests waiting for the model", registry=r)
        queue.set_function(lambda: max(engine.pending - engine.running_jobs, 0))
        active = Gauge("tg_llm_active_slots", "KV cache slots generating", registry=r)
        active.set_function(lambda: float(engine.active_slots))
        from tgcore.engine.realize import CompileCounter
        compiled = Gauge("tg_llm_kernels_compiled", "kernels this process made programs for so far (compiled now "
                         "or read from the disk caches)", registry=r)
        compiled.set_function(lambda: float(CompileCounter.count))
        generated = Gauge("tg_llm_kernels_generated", "of those, kernels whose code generation ran (not in the "
                          "program cache)", registry=r)
        generated.set_function(lambda: float(CompileCounter.generated))
        r.register(_WorkerCollector(engine))
        warm = Gauge("tg_llm_warm_ups_left", "warm-up captures left to make while idle", registry=r)
        warm.set_function(lambda: float(engine.warm_ups_left))

    def request(self, path: str, status: int) -> None:
        """One answered request (paths outside the routes are counted as ``other``: labels stay few)."""
        self.requests.labels(path if path in KNOWN_PATHS else "other", str(status)).inc()

    def generation(self, job: Any, prompt_tokens: int, completion_tokens: int) -> None:
        """A finished request that generated (its ``Job`` carries the timings the engine measured)."""
        self.prompt_tokens.inc(prompt_tokens)
        self.completion_tokens.inc(completion_tokens)
        self.prefill_tokens.inc(job.prefill_tokens)
        self.prefill_seconds.inc(job.prefill_s)
        self.decode_tokens.inc(job.decode_tokens)
        self.decode_seconds.inc(job.decode_s)
        if job.prefill_s > 0 and job.prefill_tokens:
            self.prefill_rate.set(job.prefill_tokens / job.prefill_s)
        if job.decode_tokens_per_second is not None:
            self.decode_rate.set(job.decode_tokens_per_second)
        if job.ttft is not None:
            self.ttft.observe(job.ttft)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _WorkerCollector:
    """``tg_llm_worker_seconds_total{phase}`` (the engine's ``WorkerClock``), ``tg_llm_decode_steps_total``,
    ``tg_llm_decode_rows_total`` and ``tg_llm_decode_step_rows_total`` (over the steps: the mean batch, and the
    rows computed for it), ``tg_llm_prefill_chunks_total``, ``tg_llm_prefill_forwards_total``,
    ``tg_llm_decode_steps_while_prefilling_total``, ``tg_llm_slot_swaps_total``."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def collect(self) -> Any:
        clock = self.engine.clock
        seconds = CounterMetricFamily("tg_llm_worker_seconds", "seconds the model's worker thread spent per phase "
                                      "(prefill and decode: through the model; host: scheduling, sampling, handing "
                                      "tokens out; idle: waiting for work; load: before the worker started)",
                                      labels=["phase"])
        for phase, value in clock.seconds.items():
            seconds.add_metric([phase], value)
        yield seconds
        yield CounterMetricFamily("tg_llm_decode_steps", "batched decode steps", value=clock.steps)
        yield CounterMetricFamily("tg_llm_decode_rows", "sequences the decode steps ran", value=clock.rows)
        yield CounterMetricFamily("tg_llm_decode_step_rows", "rows the decode steps computed (up to the highest slot "
                                  "in use: idle rows included)", value=clock.step_rows)
        yield CounterMetricFamily("tg_llm_prefill_chunks", "prompt chunks prefilled", value=clock.chunks)
        yield CounterMetricFamily("tg_llm_prefill_forwards", "forwards the prompt chunks ran in (several prompts' "
                                  "chunks joined in one)", value=clock.prefill_forwards)
        yield CounterMetricFamily("tg_llm_decode_steps_while_prefilling", "decode steps run while a sequence in a "
                                  "slot waited for its prompt", value=clock.steps_while_prefilling)
        yield CounterMetricFamily("tg_llm_slot_swaps", "slots that swapped caches to reuse a cached prompt prefix",
                                  value=clock.swaps)

"""Pipeline-parallel inference: a model's layers split across the ranks of an MPI job.

In:  R processes started by ``mpirun -np R`` (``tg serve llm --pipeline R``, ``tg llm bench --pipeline R``), joined
     through ``tgcore.transport("mpi")`` (the tg-mlx-rdma plugin's; this module never imports it).
Out: ``connect(R)`` -> a ``PipelineStage`` per rank. Rank 0 loads its part with ``load(...)`` and gets a
     ``PipelineModel`` that the server engine (or the bench) drives exactly like a ``Model``; every other rank loads
     its part and runs ``serve_stage`` until rank 0 says stop.

How. Rank r holds the contiguous layers ``split_layers(n_layers, R)[r]`` and their KV caches; rank 0 also the
embedding (looked up on the host), the tokenizer and the sampler, the last rank the output norm and matrix. Every
call that changes a model's state (``forward``, ``forward_last``, ``prefill``, ``decode``, ``reset``, ``warm_up``,
``swap_sequences``) is first sent by rank 0 to every other rank as a command, so all ranks keep the same bookkeeping
(cached tokens, cache slots, masks) and run the same call on their own layers: rank r receives the hidden states
(rows, dim) from rank r-1, runs its layers (the same jitted steps as one process) and sends its output to rank r+1;
the last rank sends the logits to rank 0. Each row's arithmetic is the single-process one, so greedy output is
token-identical.
Several sequences in flight: a decode step is cut into one block of sequences per rank (``Model.decode(blocks=R)``),
all launched before rank 0 collects any logits, so rank r runs a block while rank r+1 runs the one before. Sends
are non-blocking and waited before the next step replays (it overwrites what they send) or the next command:
with blocking sends rank 0 (sending the next block) and the last rank (sending logits) would wait for each other.
Errors a user can cause (a bad sequence, position or token id, a too-long prompt) are checked on rank 0 before
the command goes out, so they reach the caller as in one process and the other ranks never see the call.

Faults. Every wait has the transport's deadline (``timeout`` seconds). When rank 0 has sent nothing for a
quarter of it, a heartbeat goes round (rank 0 pings every rank, each answers), so an idle server notices a stuck
rank and a stuck rank 0 is noticed by the others. Any failure on any rank (a peer gone, a timeout, an error in a
stage) is fatal: the rank prints it and exits non-zero, and mpirun then ends the job on every rank.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

DEFAULT_TIMEOUT = 60.0  # seconds any rank waits for another before the job ends
# the calls ranks replay
COMMANDS = ("forward", "forward_last", "prefill", "decode", "reset", "warm_up", "swap_sequences")
STOP, PING = "stop", "ping"
CLOCK_START, CLOCK_REPORT = "clock_start", "clock_report"  # (bench) restart every rank's clock; send it to rank 0


class PipelineError(RuntimeError):
    """A pipeline that cannot be set up as asked (rank count, layer count)."""


def split_layers(n_layers: int, ranks: int) -> list[range]:
    """Contiguous layer ranges for ``ranks`` stages, sizes differing by at most one (the first ranks get the extra
    layers: the last one also runs the output matrix)."""
    if ranks > n_layers:
        raise PipelineError(f"--pipeline {ranks} asks for more ranks than the model has layers ({n_layers}); "
                            f"use at most {n_layers}")
    base, extra = divmod(n_layers, ranks)
    bounds = [0]
    for r in range(ranks):
        bounds.append(bounds[-1] + base + (r < extra))
    return [range(bounds[r], bounds[r + 1]) for r in range(ranks)]


class PipelineStage:
    """One rank's end of the pipeline: the transport, its layers, and the messages between stages.

    ``Model`` calls ``receive_hidden`` (stages after the first) and ``pass_on``; rank 0's ``PipelineModel`` sends
    commands with ``command``; the other ranks take them with ``next_command``. All traffic of rank 0 happens under
    ``lock`` (the heartbeat thread and the model's caller share the transport)."""

    def __init__(self, transport: Any, ranks: int, timeout: float) -> None:
        self.transport = transport
        self.rank = int(transport.rank)
        self.ranks = ranks
        self.timeout = timeout
        self.layers: range = range(0)
        self.lock = threading.RLock()
        self.closed = threading.Event()  # rank 0 sent stop: nothing more goes out
        self.last_sent = time.monotonic()
        # seconds this rank waited for another one since ``clock_start`` (the rest of the time it worked)
        self.wait_s = 0.0
        self.clock_started = time.perf_counter()
        self._sending: list[Any] = []  # handles of sends under way (their tensors stay alive until waited)

    @property
    def first(self) -> bool:
        return self.rank == 0

    @property
    def last(self) -> bool:
        return self.rank == self.ranks - 1

    def assign(self, n_layers: int) -> range:
        """Take this rank's share of ``n_layers`` layers."""
        self.layers = split_layers(n_layers, self.ranks)[self.rank]
        return self.layers

    # ---- hidden states and logits (called by Model) ----

    def receive_hidden(self, rows: int, dim: int, device: str) -> Any:
        self.flush()
        return self._recv((rows, dim), "float32", self.rank - 1, device)

    def flush(self) -> None:
        """Wait for this rank's sends under way: before a step replays (it overwrites what they send) and before
        the next command. Sends are non-blocking so that a rank never waits for a send while the rank it sends to
        waits for it (rank 0 sends the next block while the last rank sends it the logits of the one before)."""
        start = time.perf_counter()
        while self._sending:
            self._sending.pop(0).wait()
        self.wait_s += time.perf_counter() - start

    def pass_on(self, out: Any, logit_rows: int | None, vocab: int) -> Callable[[], np.ndarray | None]:
        """Send this stage's output on (the hidden states to the next rank; the last rank's logits to rank 0, when
        some are wanted) and return what collects the logits: on rank 0, a receive started now and waited for
        when called (so rank 0 can start the next block first); on the other ranks an empty (rows, 0) array."""
        if not self.last:
            self._sending.append(self.transport.isend(out, self.rank + 1))
        elif logit_rows is not None:
            self._sending.append(self.transport.isend(out, 0))
        if logit_rows is None:
            return lambda: None
        if not self.first:
            empty = np.zeros((logit_rows, 0), np.float32)
            return lambda: empty
        handle = self.transport.irecv((logit_rows, vocab), "float32", self.ranks - 1)

        def collect() -> np.ndarray:
            start = time.perf_counter()
            logits = handle.wait().numpy()
            self.wait_s += time.perf_counter() - start
            self.flush()
            return logits
        return collect

    def _recv(self, shape: tuple[int, ...], dtype: str, src: int, device: str | None) -> Any:
        start = time.perf_counter()
        t = self.transport.recv(shape, dtype, src, device=device)
        self.wait_s += time.perf_counter() - start
        return t

    # ---- commands (rank 0 -> every other rank) ----

    def command(self, name: str, args: Sequence[Any]) -> None:
        from tgcore.tensor import Tensor
        self.flush()
        payload = np.frombuffer(json.dumps([name, list(args)]).encode(), np.uint8)
        for r in range(1, self.ranks):
            self.transport.send(Tensor(np.array([payload.size], np.int64)), r)
            self.transport.send(Tensor(payload.copy()), r)
        self.last_sent = time.monotonic()

    def next_command(self) -> tuple[str, list[Any]]:
        self.flush()
        size = int(self._recv((1,), "int64", 0, None).numpy()[0])
        name, args = json.loads(self._recv((size,), "uint8", 0, None).numpy().tobytes())
        return name, args

    def ping(self) -> None:
        """A round trip to every rank (each answers the ping command)."""
        with self.lock:
            self.command(PING, [])
            for r in range(1, self.ranks):
                self._recv((1,), "int64", r, None)

    def answer_ping(self) -> None:
        from tgcore.tensor import Tensor
        self.transport.send(Tensor(np.array([self.rank], np.int64)), 0)

    def restart_clocks(self) -> None:
        """Rank 0: every rank's wait clock starts from zero now."""
        with self.lock:
            self.command(CLOCK_START, [])
            self._restart_clock()

    def _restart_clock(self) -> None:
        self.wait_s, self.clock_started = 0.0, time.perf_counter()

    def idle_shares(self) -> list[float]:
        """Rank 0: per rank, the share of the time since ``restart_clocks`` it spent waiting for another rank."""
        with self.lock:
            self.command(CLOCK_REPORT, [])
            shares = [self.wait_s / max(time.perf_counter() - self.clock_started, 1e-9)]
            for r in range(1, self.ranks):
                wait, elapsed = self._recv((2,), "float64", r, None).numpy()
                shares.append(float(wait / max(elapsed, 1e-9)))
        return shares

    def _report_clock(self) -> None:
        from tgcore.tensor import Tensor
        now = np.array([self.wait_s, time.perf_counter() - self.clock_started], np.float64)
        self.transport.send(Tensor(now), 0)

    def stop(self) -> None:
        """Rank 0: tell every other rank to return from ``serve_stage``."""
        with self.lock:
            self.command(STOP, [])


def connect(ranks: int, timeout: float = DEFAULT_TIMEOUT) -> PipelineStage:
    """Join the MPI job as one of ``ranks`` pipeline stages; a clear error when the job has another size."""
    import tgcore
    if ranks < 1:
        raise PipelineError(f"--pipeline must be at least 1, got {ranks}")
    if ranks == 1:
        raise PipelineError("--pipeline 1 is one process: leave --pipeline out")
    transport = tgcore.transport("mpi", timeout=timeout)
    if transport.world_size != ranks:
        how = ("start it with `mpirun -np {0} ...`" if transport.world_size == 1
               else "make --pipeline match mpirun's -np").format(ranks)
        raise PipelineError(f"--pipeline {ranks} needs an MPI job of {ranks} ranks, this one has "
                            f"{transport.world_size}: {how}")
    return PipelineStage(transport, ranks, timeout)


def load(stage: PipelineStage, path: Any, device: str | None, max_context: int,
         progress: Callable[[int, int], None] | None = None, sequences: int = 1, kv_dtype: str = "float16") -> Any:
    """This rank's part of the model in GGUF file ``path`` (its KV caches of ``kv_dtype``): a ``PipelineModel`` on
    rank 0, the stage's ``Model`` on the others."""
    import tg_gguf

    from tg_llm.model import Model, config_from_metadata
    from tgcore.runtime.registry import canonical
    gf = tg_gguf.load(path)
    try:
        config = config_from_metadata(dict(gf.metadata), list(gf.tensor_info), max_context)
        stage.assign(config.n_layers)
        model = Model(gf, config, canonical(device), progress, sequences, stage, kv_dtype=kv_dtype)
    except BaseException:
        gf.close()
        raise
    return PipelineModel(model, stage) if stage.first else model


class PipelineModel:
    """Rank 0's view of the pipelined model: what ``Model`` offers; each state-changing call goes to every rank.

    A heartbeat thread pings the other ranks when no call went out for a quarter of the timeout. ``fatal`` is called
    with the error when the pipeline breaks (default: print it and exit non-zero, which ends the MPI job)."""

    def __init__(self, model: Any, stage: PipelineStage, fatal: Callable[[BaseException], None] | None = None) -> None:
        self._model = model
        self.stage = stage
        self.fatal = fatal or exit_on_failure
        self._heartbeat = threading.Thread(target=self._beat, name="tg-llm-pipeline-heartbeat", daemon=True)
        self._heartbeat.start()

    # a prefill runs one sequence at a time (``prefill_chunks`` is not a pipeline command), and only through the
    # commands (a warm-up calling ``tg_llm.prefill`` directly would run rank 0's layers alone)
    joins_prompts = False

    def __getattr__(self, name: str) -> Any:  # config, sequences, tokens_of, decode_shapes, ...: rank 0's own
        return getattr(self._model, name)

    def forward(self, tokens: Sequence[int], start_pos: int, seq: int = 0) -> np.ndarray:
        return self._call("forward", self._tokens(tokens, start_pos, seq), start_pos, seq)

    def forward_last(self, tokens: Sequence[int], start_pos: int, seq: int = 0, padding: int = 0) -> np.ndarray:
        return self._call("forward_last", self._tokens(tokens, start_pos, seq), start_pos, seq, int(padding))

    def prefill(self, tokens: Sequence[int], start_pos: int, seq: int = 0) -> None:
        self._call("prefill", self._tokens(tokens, start_pos, seq), start_pos, seq)

    def prefill_chunks(self, chunks: Sequence[Any], logits: bool = False) -> np.ndarray | None:
        # (not a pipeline command: rank 0's own model would run its layers and send hidden states that the other
        # ranks, waiting for a command, refuse; its grouping also depends on the layers a rank holds)
        raise NotImplementedError("prefill_chunks does not run on a pipeline yet: prefill each chunk with prefill()")

    def decode(self, steps: Sequence[tuple[int, int, int]]) -> np.ndarray:
        m = self._model
        steps = [(m._check_seq(int(s)), int(t), int(p)) for s, t, p in steps]
        if len({s for s, _, _ in steps}) != len(steps):
            raise ValueError("decode: a sequence appears twice in one step")
        for seq, token, pos in steps:
            self._check_ids([token])
            m._check_room(pos, 1, seq)
        # one block of sequences per rank: while a rank runs a block, the one before it runs the next block
        return self._call("decode", [list(s) for s in steps], self.stage.ranks)

    def reset(self, seq: int | None = None) -> None:
        if seq is not None:
            self._model._check_seq(seq)
        self._call("reset", seq)

    def swap_sequences(self, a: int, b: int) -> None:
        m = self._model
        self._call("swap_sequences", m._check_seq(int(a)), m._check_seq(int(b)))

    def warm_up(self, shapes: Sequence[tuple[int, int]]) -> None:
        self._call("warm_up", [[int(r), int(p)] for r, p in shapes], self.stage.ranks)

    def close(self) -> None:
        """Stop the other ranks' loops, leave the job and release the file."""
        finish(self.stage)
        self._model.close()

    # ---- checks made before anything goes out ----

    def _tokens(self, tokens: Sequence[int], start_pos: int, seq: int) -> list[int]:
        ids = [int(t) for t in tokens]
        if not ids:
            raise ValueError("forward needs at least one token")
        self._check_ids(ids)
        self._model._check_room(start_pos, len(ids), self._model._check_seq(seq))
        return ids

    def _check_ids(self, ids: list[int]) -> None:
        vocab = self._model.vocab_size
        if any(not 0 <= t < vocab for t in ids):
            raise ValueError(f"token ids must be in 0..{vocab - 1}")

    # ---- sending ----

    def _call(self, name: str, *args: Any) -> Any:
        """Send the command, then run the call on this rank's layers. A failure once the command is out is fatal:
        the other ranks are in the middle of it."""
        with self.stage.lock:
            if self.stage.closed.is_set():
                raise PipelineError("the pipeline is closed")
            try:
                self.stage.command(name, args)
                return getattr(self._model, name)(*args)
            except BaseException as e:
                self.fatal(e)
                raise

    def _beat(self) -> None:
        interval = self.stage.timeout / 4
        while not self.stage.closed.wait(min(interval, 1.0)):
            if time.monotonic() - self.stage.last_sent < interval or not self.stage.lock.acquire(blocking=False):
                continue
            try:
                if not self.stage.closed.is_set():
                    self.stage.ping()
            except BaseException as e:  # noqa: BLE001 - reported by fatal
                self.fatal(e)
                return
            finally:
                self.stage.lock.release()


def finish(stage: PipelineStage) -> None:
    """Rank 0, at the end (also when its own load failed): stop the other ranks and leave the job."""
    with stage.lock:
        if stage.closed.is_set():
            return
        stage.closed.set()
        try:
            stage.stop()
            stage.transport.close()
        except Exception as e:  # noqa: BLE001 - the job cannot end cleanly
            exit_on_failure(e, stage.rank)


def check_fits(path: Any, ranks: int) -> None:
    """A clear error, before anything loads, when the model in ``path`` has fewer layers than ``ranks``."""
    from tg_llm.models import header_metadata
    metadata = header_metadata(path)
    layers = metadata.get(f"{metadata.get('general.architecture')}.block_count")
    if isinstance(layers, int | np.integer):
        split_layers(int(layers), ranks)


def serve_stage(model: Any, stage: PipelineStage) -> None:
    """A rank after the first: run rank 0's commands on this stage's layers until it sends stop."""
    while True:
        name, args = stage.next_command()
        if name == STOP:
            return
        if name == PING:
            stage.answer_ping()
        elif name == CLOCK_START:
            stage._restart_clock()
        elif name == CLOCK_REPORT:
            stage._report_clock()
        elif name in COMMANDS:
            getattr(model, name)(*args)
        else:
            raise PipelineError(f"rank {stage.rank}: unknown command {name!r} from rank 0")


def exit_on_failure(error: BaseException, rank: int = 0) -> None:
    """The pipeline broke: say why and end this process non-zero (mpirun then ends the job on every rank)."""
    print(f"tg llm: pipeline rank {rank} failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def run_stage(stage: PipelineStage, path: Any, device: str | None, max_context: int, sequences: int,
              kv_dtype: str = "float16") -> int:
    """The whole life of a rank after the first: load its layers, serve rank 0's commands; any error is fatal.

    SIGINT and SIGTERM (which mpirun passes to every rank) are ignored here and by the compilers this rank starts:
    rank 0 decides when the job ends (a server drains its requests first) and then sends stop."""
    import signal
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        model = load(stage, path, device, max_context, sequences=sequences, kv_dtype=kv_dtype)
        serve_stage(model, stage)
        model.close()
        stage.transport.close()
    except BaseException as e:  # noqa: BLE001 - reported, then the job ends
        exit_on_failure(e, stage.rank)
    return 0

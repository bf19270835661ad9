"""Run a schedule: compile each kernel once per device, allocate buffers, call programs.

In:  ``ScheduleItem``s from ``tgcore.schedule``.
Out: the output buffers filled in; ``GlobalCounters`` and the ``DEBUG=2`` line per kernel
     updated through ``update_stats``.

Compiled programs are cached in memory by (device, kernel AST): kernels are hash-consed
UOps, so the same computation on different buffers reuses its program. The cache keeps the
``MAX_RUNNERS`` most recently used programs (a CPU program holds a loaded library, ~5 memory
mappings, until it is dropped), so a process that keeps meeting new kernels stays bounded;
a dropped kernel met again is rebuilt from the disk caches of generated programs (``engine.programs``) and of
the compiler, which also serve later processes. A kernel's optimizations come from ``engine.beam``'s policy: a
stored BEAM winner, a search when ``BEAM`` is set, else the heuristic. Host calls (``HostCall``: Python a caller
wants run right after a given kernel, e.g. a transport starting to send the buffer it wrote) run between the items
and are recorded for the JIT like kernels.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tgcore.codegen import Kernel, ProgramSpec, get_program
from tgcore.codegen.optimize import Opt
from tgcore.engine import profile
from tgcore.engine.beam import beam_policy, winner_stamp
from tgcore.engine.programs import program_key, programs
from tgcore.engine.stats import KernelTimes, update_stats
from tgcore.helpers import BEAM, DEBUG
from tgcore.runtime.buffer import Buffer
from tgcore.runtime.registry import open_device
from tgcore.schedule.kernelize import ScheduleItem
from tgcore.uop import UOp, trace
from tgcore.uop.pattern import _default_compiled
from tgcore.uop.rewrite import _log_enabled, _spec_enabled


@dataclass
class Runner:
    spec: ProgramSpec
    program: Any
    device: str


class CompileCounter:
    """Kernels this process made programs for (tests check that replays make none).

    ``count``: programs compiled and loaded, each one counted whether its code was generated and compiled now or read
    from the program and compiler disk caches; ``generated``: those whose code generation ran (none for kernels a
    warm program cache holds)."""
    count = 0
    generated = 0


MAX_RUNNERS = 1024  # compiled programs kept in memory (least recently used ones are dropped first)
_runners: dict[tuple[str, UOp], Runner] = {}  # in use order: the most recently used last


@dataclass
class HostCall:
    """Python run between kernels, ``fn(bufs)`` (a transport starting to send a buffer a kernel just finished).
    A JIT capture records it in its place among the kernels, and every replay calls it again there."""
    name: str
    fn: Callable[[list[Buffer]], None]


Recorded = tuple[Runner | HostCall | None, list[Buffer], str, str]  # (runner, buffers, kind, device); None: a copy
_captures: list[list[Recorded]] = []


@contextlib.contextmanager
def capturing(into: list[Recorded]) -> Iterator[None]:
    """Record every kernel, copy and host call run (runner, buffers, kind, device) into ``into`` while active
    (the JIT)."""
    _captures.append(into)
    try:
        yield
    finally:
        _captures.pop()
_lock = threading.Lock()


def get_runner(device: str, ast: UOp) -> Runner:
    """The program for ``ast`` on ``device`` with the default optimizations, compiled once per process."""
    key = (device, ast)
    runner = _runners.pop(key, None)
    if runner is not None:
        _runners[key] = runner  # now the most recently used
        return runner
    with _lock:
        if key in _runners:
            return _runners[key]
        started = profile.ACTIVE.now_ns() if profile.ACTIVE is not None else 0
        _runners[key] = runner = compile_runner(device, ast)
        if profile.ACTIVE is not None:
            profile.ACTIVE.span("compile", runner.spec.name, device, started)
        while len(_runners) > MAX_RUNNERS:
            del _runners[next(iter(_runners))]
        return runner


def compile_runner(device: str, ast: UOp, opts: list[Opt] | None = None) -> Runner:
    """Compile ``ast`` for ``device`` now, not cached in memory. ``opts``: an explicit optimization list (e.g. from a
    test); by default the policy: a BEAM winner stored for this kernel, a search when BEAM is set, else the
    heuristic. Raises ``OptError`` for a list that does not fit the kernel."""
    dev = open_device(device)
    threads = getattr(dev, "threads", 1)
    if opts is not None:
        CompileCounter.generated += 1
        spec = get_program(ast, dev.renderer, threads, opts)
    else:
        spec = generate(dev, ast, threads)
    if DEBUG >= 4:
        print(spec.src if isinstance(spec.src, str) else f"<{len(spec.src)} bytes>")
    if DEBUG >= 5:
        for i, u in enumerate(spec.uops):
            print(f"{i:4d} {u.op.name:12s} {u.dtype!r:24s} {[spec.uops.index(s) for s in u.src if s in spec.uops]}"
                  f" {u.arg!r}")
    return Runner(spec, build_program(dev, spec), device)


def generate(dev: Any, ast: UOp, threads: int) -> ProgramSpec:
    """The program the policy gives ``ast`` on ``dev``: from the disk cache of generated programs when it holds it,
    else generated now and stored there."""
    key = program_key(dev.name, ast, dev.renderer, threads)
    if key is not None and int(BEAM.value) <= 0 and not passes_watched():
        spec = programs.lookup(key)
        if spec is not None:
            return spec
    seen: list[Kernel] = []  # the prepared kernel the policy saw (none: a hand-written program)
    policy = beam_policy(dev)

    def recording(kernel: Kernel, renderer: Any, threads: int) -> list[Opt]:
        seen.append(kernel)
        return policy(kernel, renderer, threads)
    CompileCounter.generated += 1
    spec = get_program(ast, dev.renderer, threads, policy=recording)
    if key is not None and seen:
        programs.store(key, spec, winner_stamp(dev.name, seen[0], dev.renderer, threads))
    return spec


def passes_watched() -> bool:
    """Whether this run wants to see code generation run (a rewrite trace, ``TG_SPEC`` checks, the interpreted
    matchers, ``DEBUG>=4``: the generated code or listing printed): then stored programs are not read (BEAM,
    searching, does not read them either)."""
    return (trace.ACTIVE is not None or DEBUG >= 4 or _spec_enabled() or _log_enabled()
            or not _default_compiled())


def build_program(dev: Any, spec: ProgramSpec, disk_cache: bool = True) -> Any:
    """``spec`` compiled by the device's compiler (text through its disk cache unless ``disk_cache`` is false) and
    loaded: a callable ``program(*handles, vals=, threads=, wait=)``."""
    if isinstance(spec.src, str) and disk_cache:
        lib = dev.compiler.compile_cached(spec.src)
    else:
        lib = dev.compiler.compile(spec.src)
    CompileCounter.count += 1
    loader = dev.renderer.program or dev.program  # an ISA renderer may load its own code
    program = loader(spec.name, lib)
    if spec.global_size is not None:  # a hand-written kernel: bind its launch dimensions once
        program = functools.partial(program, global_size=spec.global_size, local_size=spec.local_size)
    return program


def _copy(dest: Buffer, src: Buffer) -> None:
    dest.ensure_allocated()
    dest.copy_from(src)


def run_host(call: HostCall, bufs: list[Buffer], device: str) -> None:
    """Call ``call.fn(bufs)`` now, recorded like a kernel when a JIT capture is active."""
    if _captures:
        _captures[-1].append((call, list(bufs), "host", device))
    call.fn(list(bufs))


HostCalls = dict[int, list[tuple[HostCall, list[Buffer]]]]  # item index -> host calls to run right after it


def run_schedule(items: list[ScheduleItem], after: HostCalls | None = None) -> None:
    """Run ``items`` in order; ``after[k]``: host calls to run once item ``k`` ran (``after[-1]``: before any)."""
    for call, bufs in after.get(-1, ()) if after else ():
        run_host(call, bufs, items[0].device if items else bufs[0].device)
    for k, si in enumerate(items):
        _run_item(si)
        for call, bufs in after.get(k, ()) if after else ():
            run_host(call, bufs, si.device)


def _run_item(si: ScheduleItem) -> None:
    """Run one kernel or copy (recorded when a JIT capture is active)."""
    if _captures:
        runner = None if si.kind == "copy" else get_runner(si.device, si.ast)
        _captures[-1].append((runner, list(si.bufs), si.kind, si.device))
    if si.kind == "copy":
        _copy(si.bufs[0], si.bufs[1])
        update_stats(f"copy {si.bufs[0].nbytes}B {si.bufs[1].device} -> {si.bufs[0].device}", si.device, "copy",
                     num_bufs=2, mem=si.bufs[0].nbytes)
        return
    if DEBUG >= 3:
        print(si.ast)
    runner = get_runner(si.device, si.ast)
    handles = [si.bufs[i].ensure_allocated().handle for i in runner.spec.buf_slots]
    vals = tuple(si.var_vals[v] for v in runner.spec.vars)
    timed = KernelTimes.wanted()
    probe = profile.ACTIVE.counters_before(open_device(si.device)) if profile.ACTIVE is not None else None
    elapsed = runner.program(*handles, vals=vals, threads=runner.spec.threads, wait=timed)
    update_stats(runner.spec.name, si.device, si.kind, num_bufs=len(si.bufs), ops=runner.spec.ops,
                 mem=runner.spec.mem, time_s=elapsed, threads=runner.spec.threads,
                 counters=profile.Profiler.counters_after(probe) if probe is not None else None)

"""``tgcore.jit``: capture the kernels a function runs, then replay them with new inputs.

In:  a Python function of Tensors (and bound symbolic variables, ``v.bind(n)``) that returns
     Tensors.
Out: a callable with the same signature. The first call with a given input signature (shapes,
     dtypes, devices of the tensor arguments, how their memory overlaps (the same tensor in two
     slots, slices of one buffer), names of the bound variables) runs normally,
     compiling its kernels; the second call captures the kernels it runs; every later call
     replays them on the new input buffers and variable values, skipping the Python
     function, scheduling and codegen entirely.

A replay runs a plan made at capture time (each kernel's argument handles fixed; only the
input buffers and variable values change per call). When every kernel is a C kernel on the
CPU device, the whole plan is one call into the native thread pool (``NativeGraph``). With
``DEBUG=2`` or inside ``KernelTimes.record()`` that call also reads the clock between kernels,
and each kernel's time goes to ``update_stats`` (otherwise nothing is timed).

Replayed outputs live in buffers the capture owns: a later call overwrites them, so copy an
output (``.numpy()`` or ``.contiguous().realize()``) if you need it beyond the next call.
Buffers the captured kernels allocate and the function does not return are scratch: intermediates
whose lives do not overlap share memory in replays (``_share_scratch``; not those a host call is given),
so a function that keeps a tensor it computed (other than by returning it) must not rely on its contents
after a replay. Memory the captured kernels read other than through the inputs (weights, a received tensor used as
a constant) is reported to the realization state (``read_by_capture``) while the capture lives: a receive pool does
not take it for a new message even after every tensor over it was dropped.
Assigns (``Tensor.assign``, an optimizer step): writes assigned before a call run before it, never
inside the capture; writes the function assigns run inside it, even those nothing it returns reads,
and a replay redoes them in place (with the copy of old values a lazy reader inside the function
needed). Like a plain call, a replay leaves lazy tensors built before it from memory the function
writes (the tensors it assigns into) with the values they were built against: before the kernels run, that
memory gets a new version, which the tensors realized into it move to, and the old contents are copied aside
only if a lazy tensor still reads them.
Host calls (``Tensor.realize(on_ready=...)``: Python a data-parallel wrapper runs between kernels to start
an allreduce) are replayed in their places among the kernels, with this call's buffers; a capture that has
any runs kernel by kernel (no native graph).
``capture_first=True`` skips the plain first call: the first call of a signature captures (compiling what it
needs). Only for a function whose first call realizes nothing it keeps beyond the call (its state, weights or
caches, realized before): a kernel that filled such a tensor once would be replayed as part of every call, and
its buffer taken as scratch.
A function must not read tensor values (``.numpy()``, ``.item()``) while it is captured: what
it computes must depend on its inputs only through kernels. Up to ``max_captures`` input
signatures are kept (least recently used ones are dropped).
"""
from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tgcore.engine import profile
from tgcore.engine import realize as engine
from tgcore.engine.assign import run_all_pending
from tgcore.engine.stats import GlobalCounters, KernelTimes, update_stats
from tgcore.runtime.buffer import Buffer
from tgcore.schedule.state import REALIZATION
from tgcore.uop import Ops, UOp
from tgcore.uop.uop import add_reader


class JitError(RuntimeError):
    """A jitted function did something a capture cannot replay."""


@dataclass
class _Step:
    runner: engine.Runner | engine.HostCall | None   # None for a copy
    bufs: list[Buffer]
    kind: str
    device: str


@dataclass
class _Capture:
    outputs: Any                             # the function's result, with tensors replaced by their uops
    plan: list[_PlannedStep]                 # what a replay runs
    ops: int = 0                             # the steps' estimated operations and bytes, for GlobalCounters
    mem: int = 0
    graph: Any = None                        # the plan as one native call, when every step is a CPU kernel
    # the graph's argument words that take an input (by (input number, byte offset, captured buffer)) or a
    # variable (by name): one word per call for each, written to all of its (step, argument) places
    graph_inputs: dict[tuple[int, int, Buffer], list[tuple[int, int]]] = field(default_factory=dict)
    graph_vars: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    needs: dict[str, str] = field(default_factory=dict)  # variable name -> the first kernel that reads it
    # memory the function writes that outlives a call (tensors it assigns into): fixed buffers, and input numbers
    written: list[Buffer] = field(default_factory=list)
    written_inputs: list[int] = field(default_factory=list)
    # the memory of the returned tensors, which every replay writes again: its version is bumped per replay (what
    # is cached of its values, a transport's send view say, is stale)
    output_memory: list[Buffer] = field(default_factory=list)

    kernels: int = 0                         # kernels and copies (host calls are not counted)

    def __post_init__(self) -> None:
        self.kernels = sum(p.kind != "host" for p in self.plan)
        self.ops = sum(p.ops for p in self.plan)
        self.mem = sum(p.mem for p in self.plan)
        for p in self.plan:
            for v in p.vars:
                self.needs.setdefault(v, p.name)
        if any(p.copy is not None or p.kind == "host" for p in self.plan) or \
                any(p.device.split(":")[0] != "CPU" for p in self.plan):
            return
        from tgcore.runtime.cpu import NativeGraph
        self.graph = NativeGraph.build([(p.program, tuple(0 if a is None else a for a in p.args) + (0,) * len(p.vars),
                                         p.threads) for p in self.plan])
        for i, p in enumerate(self.plan):
            for arg, n, offset, old in p.inputs:
                self.graph_inputs.setdefault((n, offset, old), []).append((i, arg))
            for j, v in enumerate(p.vars):
                self.graph_vars.setdefault(v, []).append((i, len(p.args) + j))


def _flatten(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        return [x for o in obj for x in _flatten(o)]
    if isinstance(obj, dict):
        return [x for o in obj.values() for x in _flatten(o)]
    return [obj]


def _buffer_of(t: Any) -> Buffer:
    u = t.uop.src[0] if t.uop.op is Ops.RESHAPE else t.uop
    buf = REALIZATION.buffer(u)
    assert buf is not None  # (the caller realized t into a buffer)
    # memory now, before a capture names it: with an assign into a still unallocated Tensor.empty, replays did not
    # write each call's input (it showed the capture's values; test_jit's fresh-empty-input test)
    return buf.ensure_allocated()


def _layout(bufs: list[Buffer]) -> tuple[tuple[int, int] | None, ...]:
    """For each input buffer, (j, byte offset from input j) for the first earlier input j whose memory it
    shares (the same tensor twice, or slices of one buffer), else None. A capture replays only for calls
    whose inputs overlap the same way: a kernel argument inside several inputs is then the same memory."""
    seen: dict[int, list[int]] = {}  # id of a base buffer -> the inputs in it
    out: list[tuple[int, int] | None] = []
    for i, b in enumerate(bufs):
        found = None
        group = seen.setdefault(id(b.base), [])
        for j in group:
            o = bufs[j]
            if b.offset < o.offset + o.nbytes and o.offset < b.offset + b.nbytes:
                found = (j, b.offset - o.offset)
                break
        group.append(i)
        out.append(found)
    return tuple(out)


def _input_place(b: Buffer, inputs: list[Buffer]) -> tuple[int, int] | None:
    """(input number, byte offset into it) when the kernel buffer ``b`` is an input's memory or lies inside one
    (a slice the function took of it), else None."""
    for n, inp in enumerate(inputs):
        if b is inp:
            return n, 0
    for n, inp in enumerate(inputs):
        if b.base is inp.base and inp.offset <= b.offset and b.offset + b.nbytes <= inp.offset + inp.nbytes:
            return n, b.offset - inp.offset
    return None


class Jit:
    def __init__(self, fn: Callable[..., Any], max_captures: int = 8, capture_first: bool = False) -> None:
        self.fn = fn
        self.max_captures = max_captures
        self.capture_first = capture_first
        self.captures: OrderedDict[tuple, _Capture] = OrderedDict()
        self.seen: set[tuple] = set()
        functools.update_wrapper(self, fn)

    # ---- signature ----
    @staticmethod
    def _inputs(args: tuple, kwargs: dict) -> tuple[list[Any], dict[str, int]]:
        from tgcore.tensor import Tensor
        tensors, variables = [], {}
        for a in _flatten(list(args)) + _flatten(kwargs):
            if isinstance(a, Tensor):
                tensors.append(a)
            elif isinstance(a, UOp) and a.op is Ops.BIND:
                var, value = a.unbind()
                variables[var.arg[0]] = value
        return tensors, variables

    @staticmethod
    def _key(tensors: list[Any], bufs: list[Buffer], variables: dict[str, int]) -> tuple:
        return tuple((t.shape, t.dtype, t.device) for t in tensors) + (_layout(bufs),) + tuple(sorted(variables))

    # ---- calls ----
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors, variables = self._inputs(args, kwargs)
        if REALIZATION.pending:  # writes assigned before this call run now, not as part of a capture
            run_all_pending()
        for t in tensors:  # inputs must sit contiguously in a buffer (or a view at an offset into one)
            if not (t.uop.op is Ops.RESHAPE and t.uop.src[0].op is Ops.BUFFER):
                t.uop = t.realize().uop  # (a slice of a buffer: a view of it, read in place)
                add_reader(t.uop, t)
        bufs = [_buffer_of(t) for t in tensors]
        key = self._key(tensors, bufs, variables)
        capture = self.captures.get(key)
        if capture is not None:
            self.captures.move_to_end(key)
            if profile.ACTIVE is None:
                return self._replay(capture, tensors, bufs, variables)
            return self._profiled("jit_replay", tensors, lambda: self._replay(capture, tensors, bufs, variables))
        if key not in self.seen and not self.capture_first:  # first call: run normally (compiles everything)
            self.seen.add(key)
            out = self.fn(*args, **kwargs)
            _realize_all(out)
            run_all_pending()  # (writes the function assigned but nothing read)
            return out
        if profile.ACTIVE is None:
            return self._capture(key, bufs, args, kwargs)
        return self._profiled("jit_capture", tensors, lambda: self._capture(key, bufs, args, kwargs))

    def _profiled(self, kind: str, tensors: list[Any], call: Callable[[], Any]) -> Any:
        """``call()`` recorded as one ``kind`` span of the active profile (its kernels are recorded by the engine)."""
        assert profile.ACTIVE is not None
        started = profile.ACTIVE.now_ns()
        out = call()
        if profile.ACTIVE is not None:
            name = getattr(self.fn, "__qualname__", repr(self.fn))
            profile.ACTIVE.span(kind, name, str(tensors[0].device) if tensors else "-", started)
        return out

    def _capture(self, key: tuple, inputs: list[Buffer], args: tuple, kwargs: dict) -> Any:
        recorded = _Recording()
        with engine.capturing(recorded), REALIZATION.no_cache(), REALIZATION.recording_writes() as written:
            out = self.fn(*args, **kwargs)
            _realize_all(out)
            run_all_pending()
        steps = [_Step(runner, list(bufs), kind, device) for runner, bufs, kind, device in recorded]
        outputs = _map_tensors(out, lambda t: t.uop)
        kept = {b.base for b in map(REALIZATION.buffer, _output_buffers(outputs)) if b is not None}
        # a host call may still read its buffers after the next kernels ran (a transport sending one); what the
        # function assigns to is state
        kept |= {b.base for s in steps if isinstance(s.runner, engine.HostCall) for b in s.bufs}
        kept |= {b.base for b in written}
        scratch = recorded.fresh - kept
        steps = _share_scratch(steps, scratch)
        # (the capturing call's own intermediates: the replays have memory of their own, and the freed-buffer cache
        # kept them for sizes rarely asked for again: GBs over a server's warm-ups)
        for b in scratch:
            b.cache_when_freed = False
        capture = _Capture(outputs, _plan(steps, inputs))
        capture.output_memory = [b for b in dict.fromkeys(
            b.base for b in map(REALIZATION.buffer, _output_buffers(outputs)) if b is not None) if b in recorded.fresh]
        # its kernels read the memory of the buffers they were given (all but the inputs) in every replay
        REALIZATION.read_by_capture(capture, [b for p in capture.plan for b in p.bufs
                                              if _input_place(b, inputs) is None])
        for b in dict.fromkeys(written):  # (base buffers)
            places = [n for n, inp in enumerate(inputs) if inp.base is b]
            if places:
                capture.written_inputs.extend(places)
            else:
                capture.written.append(b)
        self.captures[key] = capture
        if len(self.captures) > self.max_captures:
            self.captures.popitem(last=False)
        return out

    def _replay(self, capture: _Capture, tensors: list[Any], inputs: list[Buffer], variables: dict[str, int]) -> Any:
        from tgcore.tensor import Tensor
        for name, kernel in capture.needs.items():
            if name not in variables:
                raise JitError(f"kernel {kernel} needs variable {name!r}, which this call did not bind")
        views: dict[tuple[int, int, Any, int], Buffer] = {}  # one view per (input, size, dtype, offset) a call needs

        def bound(n: int, offset: int, old: Buffer) -> Buffer:
            key = (n, old.size, old.dtype, offset)
            buf = views.get(key)
            if buf is None:
                inp = inputs[n]
                same = offset == 0 and old.nbytes == inp.nbytes
                buf = views[key] = (inp if same else inp.view(old.size, old.dtype, offset)).ensure_allocated()
            return buf

        if capture.written or capture.written_inputs:
            _protect_lazy_readers(capture, inputs)
        timed = KernelTimes.wanted()  # DEBUG=2 or a recording: each kernel's time goes to update_stats
        if capture.graph is not None:  # one native call for every kernel
            graph = capture.graph
            for (n, offset, old), places in capture.graph_inputs.items():
                graph.set_all(places, bound(n, offset, old).handle)
            for name, places in capture.graph_vars.items():
                graph.set_all(places, variables[name])
            times = graph.run(timed)
            for step, elapsed in zip(capture.plan, times or (), strict=False):
                update_stats(step.name, step.device, step.kind, num_bufs=step.num_bufs, ops=step.ops, mem=step.mem,
                             time_s=elapsed, threads=step.threads, jit=True)
        for step in capture.plan if capture.graph is None else ():
            if step.kind == "host":  # Python between kernels (Tensor.realize(on_ready=...)), on this call's inputs
                bufs = list(step.bufs)
                for slot, n, offset, old in step.inputs:
                    bufs[slot] = bound(n, offset, old)
                step.program(bufs)
                continue
            if step.copy is not None:
                dest, src = step.copy
                for slot, n, offset, old in step.inputs:
                    dest, src = (bound(n, offset, old), src) if slot == 0 else (dest, bound(n, offset, old))
                start = time.perf_counter() if timed else 0.0
                dest.ensure_allocated().copy_from(src)
                if timed:
                    update_stats("copy (jit)", step.device, "copy", num_bufs=2, mem=dest.nbytes,
                                 time_s=time.perf_counter() - start, jit=True)
                continue
            args: Sequence[Any] = step.args
            if step.inputs:
                filled = list(args)
                for arg, n, offset, old in step.inputs:
                    filled[arg] = bound(n, offset, old).handle
                args = filled
            vals = tuple(variables[v] for v in step.vars)
            probe = profile.ACTIVE.counters_before(engine.open_device(step.device)) \
                if profile.ACTIVE is not None else None
            elapsed = step.program(*args, vals=vals, threads=step.threads, wait=timed)
            if timed:
                update_stats(step.name, step.device, step.kind, num_bufs=step.num_bufs, ops=step.ops, mem=step.mem,
                             time_s=elapsed, threads=step.threads, jit=True,
                             counters=profile.Profiler.counters_after(probe) if probe is not None else None)
        for b in capture.output_memory:
            REALIZATION.invalidate(b)
        if not timed:  # the counters of every step at once (no line to print per kernel)
            GlobalCounters.kernel_count += capture.kernels
            GlobalCounters.global_ops += capture.ops
            GlobalCounters.global_mem += capture.mem
        device = tensors[0].device if tensors else None
        return _map_tensors(capture.outputs, lambda u: Tensor(u, device=_device_of_uop(u, device)), uops=True)


@dataclass
class _PlannedStep:
    """One replayed kernel with its arguments worked out at capture time: only input buffers change per call."""
    name: str
    device: str
    kind: str
    program: Any                                    # the kernel; for a host step its function of the buffers
    args: tuple[Any, ...]                           # buffer handles in argument order
    inputs: list[tuple[int, int, int, Buffer]]      # (argument, input number, byte offset, captured buffer)
    vars: tuple[str, ...]
    threads: int
    num_bufs: int
    ops: int
    mem: int
    copy: tuple[Buffer, Buffer] | None = None       # (dest, src) for a copy step
    bufs: list[Buffer] = field(default_factory=list)  # the captured buffers: they own the memory args points to


class _Recording(list):
    """The kernels a capture runs, as ``engine.capturing`` records them (before each runs), and ``fresh``: the base
    buffers a recorded kernel was the first to use (unallocated until then), which only the capture's kernels fill."""

    def __init__(self) -> None:
        super().__init__()
        self.fresh: set[Buffer] = set()

    def append(self, item: engine.Recorded) -> None:
        self.fresh.update(b.base for b in item[1] if not b.base.is_allocated() and b.base not in self.fresh)
        super().append(item)


def _output_buffers(outputs: Any) -> list[UOp]:
    """Every BUFFER uop a capture's outputs (uops) read."""
    return [n for u in _flatten(outputs) if isinstance(u, UOp) for n in u.toposort if n.op is Ops.BUFFER]


def _share_scratch(steps: list[_Step], scratch: set[Buffer]) -> list[_Step]:
    """``steps`` with the ``scratch`` buffers (base buffers the capture allocated, that no output is in) sharing
    memory: each scratch buffer lives from the first to the last step that uses it, and one that starts after
    another ended takes over its memory when the byte sizes match. A decoder's layers then share one layer's
    scratch instead of keeping every intermediate of every layer."""
    last = {b: i for i, s in enumerate(steps) for b in (x.base for x in s.bufs) if b in scratch}
    free: dict[tuple[str, int, Any], list[Buffer]] = {}
    given: dict[Buffer, Buffer] = {}
    views: dict[int, Buffer] = {}

    def mapped(b: Buffer) -> Buffer:
        base = b.base
        if base not in scratch:
            return b
        if base not in given:
            pool = free.get((base.device, base.nbytes, base.options))
            given[base] = pool.pop() if pool else Buffer(base.device, base.size, base.dtype, options=base.options)
        if b is base:
            return given[base]
        if id(b) not in views:
            views[id(b)] = Buffer(b.device, b.size, b.dtype, options=b.options, base=given[base], offset=b.offset)
        return views[id(b)]

    out = []
    for i, s in enumerate(steps):
        out.append(_Step(s.runner, [mapped(b) for b in s.bufs], s.kind, s.device))
        for base in {b.base for b in s.bufs if last.get(b.base) == i}:
            free.setdefault((base.device, base.nbytes, base.options), []).append(given[base])
    return out


def _plan(steps: list[_Step], inputs: list[Buffer]) -> list[_PlannedStep]:
    """Each step with its arguments fixed, except those that are (in) one of the ``inputs``."""
    plan = []
    for step in steps:
        slots = {slot: place for slot, b in enumerate(step.bufs) if (place := _input_place(b, inputs)) is not None}
        if isinstance(step.runner, engine.HostCall):
            planned_inputs = [(slot, n, offset, step.bufs[slot]) for slot, (n, offset) in slots.items()]
            plan.append(_PlannedStep(step.runner.name, step.device, "host", step.runner.fn, (), planned_inputs, (), 1,
                                     len(step.bufs), 0, 0, bufs=step.bufs))
            continue
        if step.runner is None:
            planned_inputs = [(slot, n, offset, step.bufs[slot]) for slot, (n, offset) in slots.items()]
            plan.append(_PlannedStep("copy", step.device, "copy", None, (), planned_inputs, (), 1, 2, 0,
                                     step.bufs[0].nbytes, copy=(step.bufs[0], step.bufs[1]), bufs=step.bufs))
            continue
        spec = step.runner.spec
        args: list[Any] = []
        planned_inputs = []
        for arg, slot in enumerate(spec.buf_slots):
            if slot in slots:
                n, offset = slots[slot]
                planned_inputs.append((arg, n, offset, step.bufs[slot]))
                args.append(None)
            else:
                args.append(step.bufs[slot].ensure_allocated().handle)
        plan.append(_PlannedStep(spec.name, step.device, step.kind, step.runner.program, tuple(args), planned_inputs,
                                 spec.vars, spec.threads, len(step.bufs), spec.ops, spec.mem, bufs=step.bufs))
    return plan


def _protect_lazy_readers(capture: _Capture, inputs: list[Buffer]) -> None:
    """Before a replay writes memory that outlives the call: as an assign in a plain call does, the tensors
    realized into that memory move to a new version of it, and lazy tensors built before the call from the old
    version keep its values (copied aside only when one is alive)."""
    renamed = REALIZATION.rename_for_overwrite([*capture.written, *(inputs[n] for n in capture.written_inputs)])
    mapping: dict[UOp, UOp] = {}
    for ref, new in renamed:
        old = ref()
        if old is not None:
            mapping[old] = new
        del old
    if mapping:  # the outputs the capture returns follow the memory they name
        capture.outputs = _map_tensors(capture.outputs, lambda u: u.substitute(mapping), uops=True)
    mapping.clear()  # (the old names must not be held here when keep_old_values looks for their readers)
    REALIZATION.keep_old_values(renamed)


def _realize_all(out: Any) -> None:
    from tgcore.tensor import Tensor
    results = [o for o in _flatten(out) if isinstance(o, Tensor)]
    if results:
        results[0].realize(*results[1:])


def _device_of_uop(u: UOp, default: str | None) -> str | None:
    base = u.src[0] if u.op is Ops.RESHAPE else u
    return base.src[1].arg if base.op is Ops.BUFFER else default


def _map_tensors(obj: Any, fn: Callable[[Any], Any], uops: bool = False) -> Any:
    from tgcore.tensor import Tensor
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(o, fn, uops) for o in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn, uops) for k, v in obj.items()}
    if (uops and isinstance(obj, UOp)) or (not uops and isinstance(obj, Tensor)):
        return fn(obj)
    return obj


def jit(fn: Callable[..., Any] | None = None, *, max_captures: int = 8, capture_first: bool = False) -> Any:
    """Decorator: ``@tgcore.jit`` or ``@tgcore.jit(max_captures=4)``."""
    if fn is None:
        return lambda f: Jit(f, max_captures, capture_first)
    return Jit(fn, max_captures, capture_first)

"""Codegen: a kernel AST from the scheduler -> a program for one renderer.

In:  a kernel SINK in loop form (see ``tgcore.schedule.kernelize``) and a Renderer.
Out: a ``ProgramSpec``: the kernel name, the rendered source or bytes, the variables the
     kernel takes (in argument order), how many threads to run it on, and estimates of
     operations and bytes moved for the stats line.

Passes, in order: simplify index math (symbolic) -> emulate narrow floats in float32 where
the renderer asks -> optimizations (a list of ``Opt`` records from a policy, applied by
``optimize.apply_opts``: vectorize, unroll, tile, split across threads) -> reductions into
accumulators and loops closed with END -> short innermost loops unrolled where the renderer asks -> linearize ->
render.

``get_program`` is ``prepare_kernel`` (up to the point where optimizations are chosen: a ``Kernel``), a policy
(``OptPolicy``: the heuristic by default; the engine passes the BEAM cache and search) and ``lower_kernel``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tgcore.codegen.accumulate import add_accumulators_and_ends
from tgcore.codegen.heuristic import heuristic_opts
from tgcore.codegen.linearize import drop_buffer_afters, linearize
from tgcore.codegen.optimize import Opt, apply_opts
from tgcore.codegen.opts import emulate_floats, estimate_cost, kernel_name
from tgcore.codegen.transcendental import decompose_transcendentals
from tgcore.codegen.unroll import unroll_short_loops
from tgcore.custom import KernelLaunch, is_custom_program
from tgcore.helpers import DEBUG
from tgcore.renderer import Renderer
from tgcore.uop import Ops, UOp, trace


@dataclass(frozen=True)
class ProgramSpec:
    name: str
    src: str | bytes
    vars: tuple[str, ...]        # DEFINE_VAR names, in argument order
    threads: int                 # how many core_ids to run
    ops: int                     # estimated arithmetic operations
    mem: int                     # estimated bytes moved
    buf_slots: tuple[int, ...] = ()  # which of the schedule's buffers the kernel takes, in argument order
    uops: tuple[UOp, ...] = ()   # the linear program (empty for renderers that take the SINK)
    global_size: tuple[int, int, int] | None = None  # launch dimensions of a hand-written kernel
    local_size: tuple[int, int, int] | None = None


def simplify_kernel(ast: UOp) -> UOp:
    from tgcore.uop.rewrite import graph_rewrite
    from tgcore.uop.symbolic import symbolic
    return graph_rewrite(ast, symbolic, name="simplify kernel")


def compact_params(ast: UOp) -> tuple[UOp, tuple[int, ...]]:
    """Number the buffers a kernel still reads or writes 0..n-1 (simplification can drop some:
    ``y - (x + y)`` reads no ``y``); returns the kernel and the original slot of each argument."""
    slots = sorted({u.arg for u in ast.toposort if u.op is Ops.PARAM})
    if slots == list(range(len(slots))):
        return ast, tuple(slots)
    params = {u.arg: u for u in ast.toposort if u.op is Ops.PARAM}
    return ast.substitute({params[s]: params[s].replace(arg=i) for i, s in enumerate(slots)}), tuple(slots)


def custom_program_spec(ast: UOp, renderer: Renderer) -> ProgramSpec:
    """A hand-written kernel goes to the renderer as written: no codegen pass touches machine instructions."""
    if not renderer.custom_kernels:
        raise NotImplementedError(f"{renderer} cannot run hand-written kernels (custom_kernel)")
    launch: KernelLaunch = ast.arg
    return ProgramSpec(launch.name, renderer.render(launch.name, ast), (), 1, launch.ops, launch.mem,  # type: ignore[attr-defined]
                       tuple(range(launch.n_args)), (), launch.global_size, launch.local_size)


@dataclass(frozen=True)
class Kernel:
    """A kernel ready for optimizations: simplified, its buffers numbered 0..n-1, transcendentals decomposed and
    narrow floats emulated as the renderer asks. ``ast`` is what ``Opt`` axes and policies refer to."""
    ast: UOp
    name: str
    vars: tuple[str, ...]        # DEFINE_VAR names, in argument order
    ops: int                     # estimated arithmetic operations
    mem: int                     # estimated bytes moved
    buf_slots: tuple[int, ...]   # which of the schedule's buffers the kernel takes, in argument order

    @property
    def work(self) -> int:
        """What the heuristic weighs threads against: operations, or bytes / 4 when that is larger."""
        return max(self.ops, self.mem // 4)


# A policy chooses the optimizations of a prepared kernel: (kernel, renderer, threads) -> opts.
OptPolicy = Callable[[Kernel, Renderer, int], list[Opt]]


def prepare_kernel(ast: UOp, renderer: Renderer) -> Kernel:
    """The kernel from the scheduler, up to the point where optimizations are chosen (see ``Kernel``)."""
    ast, buf_slots = compact_params(simplify_kernel(ast))
    if not renderer.native_transcendentals:
        ast = decompose_transcendentals(ast)
    name = kernel_name(ast)
    ops, mem = estimate_cost(ast)
    variables = tuple(sorted({u.arg[0] for u in ast.toposort if u.op is Ops.DEFINE_VAR}))
    emulated = renderer.emulated_floats
    if emulated:
        ast = emulate_floats(ast, emulated)
    return Kernel(ast, name, variables, ops, mem, buf_slots)


def default_policy(kernel: Kernel, renderer: Renderer, threads: int) -> list[Opt]:
    """The heuristic's list (``tgcore.codegen.heuristic``): what a kernel gets when nothing else decides."""
    return heuristic_opts(kernel.ast, renderer, threads, kernel.work)


def lower_kernel(kernel: Kernel, renderer: Renderer, opts: list[Opt]) -> ProgramSpec:
    """``kernel`` with ``opts`` applied, linearized and rendered (``OptError`` for a list that does not fit)."""
    if DEBUG >= 3:
        print(f"{kernel.name}: opts [{', '.join(map(str, opts))}]")
    ast, n_threads = apply_opts(kernel.ast, opts, renderer)
    trace.record_step(f"apply opts [{', '.join(map(str, opts))}]", kernel.ast, ast)
    name, variables, ops, mem, buf_slots = kernel.name, kernel.vars, kernel.ops, kernel.mem, kernel.buf_slots
    if not renderer.linear:
        return ProgramSpec(name, renderer.render(name, ast), variables, n_threads, ops, mem,  # type: ignore[attr-defined]
                           buf_slots)
    legalize = renderer.legalize
    if legalize is not None:
        from tgcore.uop.rewrite import graph_rewrite
        ast = graph_rewrite(ast, legalize, ctx=renderer, name="legalize")
    with_ends = add_accumulators_and_ends(ast)
    trace.record_step("add accumulators and ends", ast, with_ends)
    if renderer.unrolled_trips:
        unrolled = unroll_short_loops(with_ends, renderer.unrolled_trips)
        trace.record_step("unroll short loops", with_ends, unrolled)
        with_ends = unrolled
    uops = drop_buffer_afters(linearize(with_ends, renderer.placement_priority))
    src = renderer.render(name, uops)  # type: ignore[attr-defined]
    return ProgramSpec(name, src, variables, n_threads, ops, mem, buf_slots, tuple(uops))


def get_program(ast: UOp, renderer: Renderer, threads: int = 1, opts: list[Opt] | None = None,
                policy: OptPolicy | None = None) -> ProgramSpec:
    """Lower one kernel for ``renderer``; ``threads`` is the most core_ids the device offers. ``opts``: the
    optimizations to apply; without them ``policy`` chooses (default: the heuristic; ``tgcore.engine.beam`` passes
    the BEAM cache and search). ``DEBUG=3`` prints the list of each kernel."""
    if is_custom_program(ast):
        return custom_program_spec(ast, renderer)
    with trace.kernel_trace("kernel", renderer) as traced:  # VIZ=1: the passes below are recorded
        kernel = prepare_kernel(ast, renderer)
        if traced is not None:
            traced.name = kernel.name
        if opts is None:
            opts = (policy or default_policy)(kernel, renderer, threads)
        spec = lower_kernel(kernel, renderer, opts)
        if traced is not None:
            trace.record_code(*renderer.listing(spec.src))
    return spec

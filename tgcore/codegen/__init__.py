"""Codegen: a kernel AST from the scheduler -> a program for one renderer.

In:  a kernel SINK in loop form (see ``tgcore.schedule.kernelize``) and a Renderer.
Out: a ``ProgramSpec``: the kernel name, the rendered source or bytes, the variables the
     kernel takes (in argument order), how many threads to run it on, and estimates of
     operations and bytes moved for the stats line.

Passes, in order: simplify index math (symbolic) -> emulate narrow floats in float32 where
the renderer asks -> optimizations (a list of ``Opt`` records from a policy, applied by
``optimize.apply_opts``: vectorize, unroll, tile, split across threads) -> reductions into
accumulators and loops closed with END -> linearize -> render.
"""
from __future__ import annotations

from dataclasses import dataclass

from tgcore.codegen.accumulate import add_accumulators_and_ends
from tgcore.codegen.heuristic import heuristic_opts
from tgcore.codegen.linearize import drop_buffer_afters, linearize
from tgcore.codegen.optimize import Opt, apply_opts
from tgcore.codegen.opts import emulate_floats, estimate_cost, kernel_name
from tgcore.codegen.transcendental import decompose_transcendentals
from tgcore.custom import KernelLaunch, is_custom_program
from tgcore.helpers import DEBUG
from tgcore.uop import Ops, UOp


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


def custom_program_spec(ast: UOp, renderer: object) -> ProgramSpec:
    """A hand-written kernel goes to the renderer as written: no codegen pass touches machine instructions."""
    if not getattr(renderer, "custom_kernels", False):
        raise NotImplementedError(f"{renderer} cannot run hand-written kernels (custom_kernel)")
    launch: KernelLaunch = ast.arg
    return ProgramSpec(launch.name, renderer.render(launch.name, ast), (), 1, launch.ops, launch.mem,  # type: ignore[attr-defined]
                       tuple(range(launch.n_args)), (), launch.global_size, launch.local_size)


def get_program(ast: UOp, renderer: object, threads: int = 1, opts: list[Opt] | None = None) -> ProgramSpec:
    """Lower one kernel for ``renderer``; ``threads`` is the most core_ids the device offers. ``opts``: the
    optimizations to apply (default: the heuristic's choice; ``DEBUG=3`` prints the list of each kernel)."""
    if is_custom_program(ast):
        return custom_program_spec(ast, renderer)
    ast, buf_slots = compact_params(simplify_kernel(ast))
    if not getattr(renderer, "native_transcendentals", False):
        ast = decompose_transcendentals(ast)
    name = kernel_name(ast)
    ops, mem = estimate_cost(ast)
    variables = tuple(sorted({u.arg[0] for u in ast.toposort if u.op is Ops.DEFINE_VAR}))
    emulated: frozenset = getattr(renderer, "emulated_floats", frozenset())
    if emulated:
        ast = emulate_floats(ast, emulated)
    if opts is None:
        opts = heuristic_opts(ast, renderer, threads, max(ops, mem // 4))
    if DEBUG >= 3:
        print(f"{name}: opts [{', '.join(map(str, opts))}]")
    ast, n_threads = apply_opts(ast, opts, renderer)
    if not getattr(renderer, "linear", True):
        return ProgramSpec(name, renderer.render(name, ast), variables, n_threads, ops, mem,  # type: ignore[attr-defined]
                           buf_slots)
    legalize = getattr(renderer, "legalize", None)
    if legalize is not None:
        from tgcore.uop.rewrite import graph_rewrite
        ast = graph_rewrite(ast, legalize, ctx=renderer, name="legalize")
    uops = drop_buffer_afters(linearize(add_accumulators_and_ends(ast), getattr(renderer, "placement_priority", None)))
    src = renderer.render(name, uops)  # type: ignore[attr-defined]
    return ProgramSpec(name, src, variables, n_threads, ops, mem, buf_slots, tuple(uops))

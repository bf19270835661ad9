"""X86 vs C on the CPU device: compile cost, first-run latency and kernel run time.

Prints (never asserts):
  1. compile step per kernel, as issue 6 defines it: what each renderer does from the kernel's linear program
     to loadable code. X86: its ``legalize`` matcher (if it has one) + ``render`` (selection, register
     allocation, encoding: linear UOps -> bytes); C: ``CRenderer.render`` + cc (no disk cache). Both start from
     the linear program ``get_program`` made for that renderer; the core passes before it (simplify, upcast,
     accumulators, linearize) are shared work and not counted here (section 2 covers them end to end).
     Wall and CPU time (the CPU time of cc, a child process, included), per kernel the best of 5 rounds; a
     round runs every X86 step, then every C step. Every round starts from a fresh process's memo tables (X86's
     forms, encoded instructions, frame code; ``clear_memo_tables``) and a warm-up kernel, so each step is that
     kernel's first compile, with the tables holding only what earlier kernels of the round left there. A line
     clearly labelled "not the target" times the whole ``get_program`` (core passes included) for X86 vs
     ``get_program`` + cc for C, once per kernel.
     Each kernel is compiled as a never-seen one: the facts cached on graph nodes (toposorts, ranges, bounds,
     normal-form marks) are dropped before each timed step, and the one-time costs of a process (imports,
     instruction tables, rule compilation, cc's first start) are paid on a warm-up kernel before timing
  2. end-to-end latency of a never-seen small kernel (build, compile, run, read back)
  3. run time of ~20 representative kernels (GFLOPS for the matmuls) on both renderers, and the geomean ratio X86/C

  With --stages, first: where X86's get_program time goes, per stage (ms/kernel, CPU time, the same kernels);
  the stages from "x86 select" down are the X86 render of section 1 (after the register plan either
  "x86 encode_plan" or "regalloc rewrite" + "x86 finish" + "x86 assemble", whichever way the renderer goes)

Run: python plugins/tg-x86/bench/x86.py [--stages]
"""
from __future__ import annotations

import math
import random
import resource
import sys
import time

import numpy as np

from tgcore.codegen import get_program
from tgcore.dtype import dtypes
from tgcore.engine.realize import get_runner
from tgcore.nn.functional import conv2d
from tgcore.runtime.compiler import ClangCompiler
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.uop.uop import clear_derived_caches

rng = np.random.default_rng(0)


def softmax(x: Tensor) -> Tensor:
    e = (x - x.max(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def workloads(dev: str) -> dict:
    def f32(*shape):
        return Tensor(rng.standard_normal(shape).astype(np.float32), device=dev).realize()
    a1m, b1m = f32(1 << 20), f32(1 << 20)
    m256 = f32(256, 256)
    m512a, m512b = f32(512, 512), f32(512, 512)
    m1024a, m1024b = f32(1024, 1024), f32(1024, 1024)
    x = f32(1024, 1024)
    i32 = Tensor(rng.integers(-1000, 1000, 1 << 20).astype(np.int32), device=dev).realize()
    h16 = Tensor(rng.standard_normal(1 << 20).astype(np.float16), device=dev).realize()
    img, kern = f32(4, 16, 64, 64), f32(32, 16, 3, 3)
    return {
        "add 1M": lambda: a1m + b1m,
        "mul-add 1M": lambda: a1m * b1m + 1.0,
        "relu 1M": lambda: a1m.relu(),
        "where 1M": lambda: (a1m < b1m).where(a1m, b1m),
        "exp 1M": lambda: a1m.exp(),
        "sqrt 1M": lambda: a1m.abs().sqrt(),
        "sum 1M": lambda: a1m.sum(),
        "max 1M": lambda: a1m.max(),
        "sum rows 1024^2": lambda: x.sum(1),
        "sum cols 1024^2": lambda: x.sum(0),
        "transpose 1024^2": lambda: x.T.contiguous(),
        "matmul 256^3": lambda: m256 @ m256,
        "matmul 512^3": lambda: m512a @ m512b,
        "matmul 1024^3": lambda: m1024a @ m1024b,
        "softmax 1024^2": lambda: softmax(x),
        "conv2d 3x3 pad 1": lambda: conv2d(img, kern, padding=1),
        "int add/mul 1M": lambda: i32 * 3 + i32,
        "int // 1M": lambda: i32 // 7,
        "cast f32->i32 1M": lambda: a1m.cast(dtypes.int32),
        "cast i32->f32 1M": lambda: i32.cast(dtypes.float32),
        "cast f16->f32 1M": lambda: h16.cast(dtypes.float32),
        "cast f32->bf16 1M": lambda: a1m.cast(dtypes.bfloat16),
    }


def run_time(dev: str, make, reps: int = 5) -> float:
    """Seconds per run of the kernels computing make() (compiled beforehand), the best of ``reps`` runs."""
    out = make()
    items, _ = create_schedule([out.uop], dev)
    steps = []
    for si in items:
        if si.kind == "copy":
            continue
        runner = get_runner(si.device, si.ast)
        handles = [b.ensure_allocated().handle for b in si.bufs]
        vals = tuple(si.var_vals[v] for v in runner.spec.vars)
        steps.append((runner, handles, vals))
    best = math.inf
    for _ in range(reps):
        t = 0.0
        for runner, handles, vals in steps:
            t += runner.program(*handles, vals=vals, threads=runner.spec.threads, wait=True)
        best = min(best, t)
    return best


def _legalize_input(ast, renderer) -> object | None:
    """The kernel ``get_program`` hands to ``renderer.legalize`` (None: the renderer has no legalize matcher)."""
    if renderer.legalize is None:
        return None
    import tgcore.uop.rewrite
    seen: list = []
    original = tgcore.uop.rewrite.graph_rewrite

    def spy(sink, pm, *args, **kwargs):
        if pm is renderer.legalize:
            seen.append(sink)
        return original(sink, pm, *args, **kwargs)
    tgcore.uop.rewrite.graph_rewrite = spy  # get_program imports it at call time
    try:
        get_program(ast, renderer, 2)
    finally:
        tgcore.uop.rewrite.graph_rewrite = original
    assert seen, "the renderer has a legalize matcher but get_program did not apply it"
    return seen[0]


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (cc runs as a child process)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _compile_step(renderer, spec, legal_in, cc: ClangCompiler | None) -> tuple[float, float]:
    """(wall, CPU) seconds of the renderer's own work on ``spec``'s linear program: legalize (if any) + render
    (+ cc), as for a never-seen kernel."""
    from tgcore.uop.rewrite import graph_rewrite
    uops = list(spec.uops)
    clear_derived_caches()
    c0, t0 = _cpu_seconds(), time.perf_counter()
    if legal_in is not None:
        graph_rewrite(legal_in, renderer.legalize, ctx=renderer, name="legalize")
    out = renderer.render(spec.name, uops)
    if cc is not None:
        cc.compile(out)
    t1, c1 = time.perf_counter(), _cpu_seconds()
    assert out == spec.src, "render of the linear program differs from get_program's"
    return t1 - t0, c1 - c0


def compile_times(repeats: int = 5) -> None:
    from tg_x86.renderer import X86Renderer, clear_memo_tables

    from tgcore.renderer.cstyle import CRenderer
    x86, c, cc = X86Renderer(), CRenderer(), ClangCompiler()
    asts = []
    for make in workloads("CPU").values():
        items, _ = create_schedule([make().uop], "CPU")
        asts += [si.ast for si in items if si.kind != "copy"]
    warm = Tensor(np.arange(16, dtype=np.float32), device="CPU") * 3.0 - 1.0   # not one of the timed kernels

    def warm_up(renderers: tuple) -> None:
        """Compile the warm-up kernel with each (renderer, its compiler or None)."""
        for si in create_schedule([warm.uop], "CPU")[0]:
            if si.kind != "copy":
                for r, comp in renderers:
                    _compile_step(r, get_program(si.ast, r, 2), _legalize_input(si.ast, r), comp)
    warm_up(((x86, None), (c, cc)))
    n = len(asts)
    print(f"1. compile step per kernel ({n} kernels, never-seen; per kernel the best of {repeats} rounds, each round "
          "all X86 steps then all C steps)")
    whole_x = whole_c = 0.0
    xspecs, cspecs = [], []
    for ast in asts:
        clear_derived_caches()
        t0 = time.perf_counter()
        xspecs.append(get_program(ast, x86, 2))
        t1 = time.perf_counter()
        clear_derived_caches()
        t2 = time.perf_counter()
        cspecs.append(get_program(ast, c, 2))
        cc.compile(cspecs[-1].src)
        t3 = time.perf_counter()
        whole_x, whole_c = whole_x + t1 - t0, whole_c + t3 - t2
    steps = [(x86, xspecs, [_legalize_input(a, x86) for a in asts], None),
             (c, cspecs, [_legalize_input(a, c) for a in asts], cc)]

    def fresh_tables() -> None:
        """Back to a fresh process's memo tables (making the specs above, or an earlier round, compiled every kernel
        once), then the warm-up kernel again: the round's compiles are each kernel's first, with the tables
        holding only what the warm-up and the kernels before it in the round left there."""
        clear_memo_tables()
        warm_up(((x86, None),))
    # best[r][k]: kernel k's best (wall, CPU) seconds on renderer r. Rounds rather than kernel by kernel: running
    # cc between X86 renders would slow them (caches) in a way X86 compiles in real use are not
    best = [[(math.inf, math.inf)] * n for _ in steps]
    for _ in range(repeats):
        fresh_tables()
        for r, (renderer, specs, legal_in, comp) in enumerate(steps):
            for k in range(n):
                wall, cpu = _compile_step(renderer, specs[k], legal_in[k], comp)
                best[r][k] = (min(best[r][k][0], wall), min(best[r][k][1], cpu))
    step_x = [sum(b[i] for b in best[0]) for i in (0, 1)]
    step_c = [sum(b[i] for b in best[1]) for i in (0, 1)]
    legal = " + legalize" if x86.legalize is not None else ""
    for k, what in ((0, "wall"), (1, "CPU ")):
        print(f"   compile step, {what}: X86 render{legal} {1e3 * step_x[k] / n:6.2f} ms/kernel   "
              f"C render + cc {1e3 * step_c[k] / n:6.2f} ms/kernel   ratio X86/C {step_x[k] / step_c[k]:.4f} "
              f"({step_c[k] / step_x[k]:.1f}x faster; target >= 40x)")
    # the same per kernel: the geometric mean of each kernel's ratio (the line above is the ratio of the sums,
    # which the largest kernels dominate)
    per_kernel = [c[1] / x[1] for x, c in zip(best[0], best[1], strict=True)]
    geo = math.exp(sum(map(math.log, per_kernel)) / n)
    print(f"   per kernel, CPU: geometric mean of C/X86 {geo:.1f}x   median {sorted(per_kernel)[n // 2]:.1f}x   "
          f"smallest {min(per_kernel):.1f}x")
    print(f"   (not the target) whole get_program, core passes included, wall, once: X86 {1e3 * whole_x / n:6.2f} "
          f"ms/kernel   C get_program + cc {1e3 * whole_c / n:6.2f} ms/kernel   ({whole_c / whole_x:.1f}x faster)")


def _owner(where: object, name: str) -> object:
    """The module or class whose own attribute ``name`` is (a class may inherit it)."""
    if isinstance(where, type):
        return next(c for c in where.__mro__ if name in c.__dict__)
    return where


def compile_stages() -> None:
    """Time each stage of X86's get_program by wrapping the functions get_program and the renderer call."""
    import tg_x86.assembler
    import tg_x86.isel
    import tg_x86.machine
    import tg_x86.plan_code
    from tg_x86.renderer import X86Renderer

    import tgcore.codegen
    import tgcore.codegen.regalloc
    spent: dict[str, float] = {}

    def timed(module: object, name: str, label: str) -> None:
        fn = getattr(module, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - start
        setattr(module, name, wrapper)
    # the core passes get_program calls through tgcore.codegen's globals (the policy: the heuristic's choice)
    core = ("simplify_kernel", "decompose_transcendentals", "estimate_cost", "default_policy", "apply_opts",
            "add_accumulators_and_ends", "linearize")
    missing = [n for n in core if not hasattr(tgcore.codegen, n)]
    if missing:
        raise SystemExit(f"--stages: tgcore.codegen no longer has {', '.join(missing)}; update the stage list")
    stages = [(tgcore.codegen, n, n) for n in core]
    # selection: module functions (isel.select/select_both) or the ISARenderer stage (select, and the Selector
    # deriving the program that holds pointers in registers), whichever this version of the plugin has
    selection = [(tg_x86.isel, "select"), (tg_x86.isel, "select_both"), (X86Renderer, "select"),
                 (getattr(tg_x86.isel, "Selector", None), "args_held")]
    stages += [(_owner(m, n), n, "x86 select") for m, n in selection if m is not None and hasattr(m, n)]
    stages += [(tg_x86.machine, "cleanup", "x86 cleanup"),
               (tgcore.codegen.regalloc, "plan_registers", "regalloc plan"),
               (tgcore.codegen.regalloc.RegisterPlan, "rewrite", "regalloc rewrite"),
               (tg_x86.machine, "finish", "x86 finish"), (tg_x86.assembler, "assemble", "x86 assemble")]
    # straight from the register plan to bytes (instead of rewrite, finish and assemble), when the renderer does that
    stages += [(tg_x86.plan_code, "encode_plan", "x86 encode_plan")]
    originals = [(m, n, getattr(m, n)) for m, n, _ in stages]
    asts = [si.ast for make in workloads("CPU").values() for si in create_schedule([make().uop], "CPU")[0]
            if si.kind != "copy"]
    x86 = X86Renderer()
    get_program(asts[0], x86, 2)  # one-time costs
    for m, n, label in stages:
        timed(m, n, label)
    total = 0.0
    try:
        for ast in asts:
            clear_derived_caches()
            start = time.process_time()
            get_program(ast, x86, 2)
            total += time.process_time() - start
    finally:
        for m, n, fn in originals:
            setattr(m, n, fn)
    print(f"0. X86 get_program by stage, CPU time ({len(asts)} kernels, never-seen): {1e3 * total / len(asts):.2f} "
          "ms/kernel")
    for label, t in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"   {label:28s} {1e3 * t / len(asts):7.3f} ms/kernel")
    print(f"   {'(rest of get_program)':28s} {1e3 * (total - sum(spent.values())) / len(asts):7.3f} ms/kernel")


def first_run_latency() -> None:
    print("2. end-to-end latency of a never-seen small kernel (build, compile, run, read back)")
    a = np.arange(64, dtype=np.float32)
    for dev in ("CPU:X86", "CPU"):
        times = []
        for _ in range(5):
            k = random.random()  # a new constant: a kernel no cache has seen
            t0 = time.perf_counter()
            (Tensor(a, device=dev) * k + 1.0).numpy()
            times.append(time.perf_counter() - t0)
        print(f"   {dev:8s} median {1e3 * sorted(times)[2]:8.2f} ms")


def run_times() -> None:
    print("3. kernel run time (best of 5), X86 vs C")
    x86, c = workloads("CPU:X86"), workloads("CPU")
    ratios = []
    for name in x86:
        tx, tc = run_time("CPU:X86", x86[name]), run_time("CPU", c[name])
        ratios.append(tx / tc)
        flops = ""
        if name.startswith("matmul"):
            n = int(name.split()[1].split("^")[0])
            flops = f"   GFLOPS X86 {2 * n ** 3 / tx / 1e9:6.1f}  C {2 * n ** 3 / tc / 1e9:6.1f}"
        print(f"   {name:20s} X86 {1e3 * tx:9.3f} ms   C {1e3 * tc:9.3f} ms   X86/C {tx / tc:6.2f}{flops}")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"   geomean X86/C over {len(ratios)} workloads: {geo:.2f}")


if __name__ == "__main__":
    if "--stages" in sys.argv[1:]:
        compile_stages()
    compile_times()
    first_run_latency()
    run_times()

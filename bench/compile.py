"""Compile cost: ``get_program`` wall time per never-seen GEMM and convolution kernel, without BEAM. Prints; asserts
nothing.

    python bench/compile.py [--device CPU] [--threads 2]

The kernels are matrix products of odd and round shapes (padded register tiles, K tiles) and the kernels of a
convolution's forward and backward pass. Each shape appears once in the process, so no kernel (and no node of
one) was seen before: the figure is what a new model pays per kernel on its first call. The renderer's Python
side only (codegen and rendering), not the C compiler or the assembler. Wall and CPU time (this thread's) are both
printed: on a busy machine the CPU time is the steadier figure. One kernel of another shape is lowered
first, so that the one-time set-up (imports, the pattern matchers' compiled functions) is not in the figure.
"""
from __future__ import annotations

import argparse
import statistics
import time

import tgcore.nn.functional as F
from tgcore.codegen import get_program
from tgcore.runtime.registry import open_device
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.uop import UOp

GEMMS = [(100, 101, 102), (256, 257, 255), (200, 301, 103), (128, 129, 130), (129, 127, 131), (300, 300, 300),
         (512, 513, 511), (97, 1000, 1001), (1000, 1000, 1000), (1024, 1024, 1024)]  # m, k, n
CONVS = [(8, 64, 64, 56), (32, 8, 16, 13), (4, 3, 17, 31)]  # batch, in channels, out channels, size (3x3, padding 1)


def kernels(device: str) -> list[tuple[str, UOp]]:
    """(workload kind, kernel) of every workload (the schedule's ASTs: nothing runs)."""
    asts: list[tuple[str, UOp]] = []
    for m, k, n in GEMMS:
        out = Tensor.empty(m, k, device=device) @ Tensor.empty(k, n, device=device)
        asts += [("matmul", si.ast) for si in create_schedule([out.uop], device)[0]]
    for b, cin, cout, size in CONVS:
        x = Tensor.empty(b, cin, size, size, device=device).requires_grad_()
        w = Tensor.empty(cout, cin, 3, 3, device=device).requires_grad_()
        F.conv2d(x, w, padding=1).sum().backward()
        assert x.grad is not None and w.grad is not None
        asts += [("conv fwd+bwd", si.ast) for si in create_schedule([x.grad.uop, w.grad.uop], device)[0]]
    return asts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--threads", type=int, default=2, help="the core_ids a kernel may split over")
    args = ap.parse_args()
    renderer = open_device(args.device).renderer
    warm = Tensor.empty(33, 65, device=args.device) @ Tensor.empty(65, 17, device=args.device)
    get_program(create_schedule([warm.uop], args.device)[0][-1].ast, renderer, args.threads)
    rows: list[tuple[str, str, float, float]] = []
    for kind, ast in kernels(args.device):
        wall, cpu = time.perf_counter(), time.thread_time()
        spec = get_program(ast, renderer, args.threads)
        rows.append((kind, spec.name, time.perf_counter() - wall, time.thread_time() - cpu))
    print(f"  {'workload':13s} {'kernel':32s} {'wall':>9s} {'CPU':>9s}")
    for kind, name, seconds, cpu_seconds in rows:
        print(f"  {kind:13s} {name:32s} {seconds * 1e3:6.1f} ms {cpu_seconds * 1e3:6.1f} ms")
    print(f"get_program on {args.device} ({type(renderer).__name__}), never-seen kernels, median (max) ms:")
    for kind in ("matmul", "conv fwd+bwd", "all"):
        chosen = [row for row in rows if kind in ("all", row[0])]
        wall_times, cpu_times = [row[2] * 1e3 for row in chosen], [row[3] * 1e3 for row in chosen]
        print(f"  {kind:13s} {len(chosen):3d} kernels  wall {statistics.median(wall_times):6.1f} "
              f"({max(wall_times):6.1f})  CPU {statistics.median(cpu_times):6.1f} ({max(cpu_times):6.1f})")


if __name__ == "__main__":
    main()

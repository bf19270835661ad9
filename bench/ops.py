"""tgcore (CPU) next to numpy and torch on a few core ops, in one run. Prints figures and ratios; asserts nothing.

    python bench/ops.py [--device CPU] [--repeat 5] [--quick]

Ratios are tgcore/peer throughput (higher is better), medians of --repeat runs; the compute-bound rows time
tgcore and its peer in turn, round by round (each timed call after the same function has run untimed for a while),
so both see the same load on a shared machine. The peer of the
matrix products is numpy (its BLAS on the same number of threads as tgcore's CPU device), of the convolutions
torch (same threads; skipped when torch is not installed). With ``--device CPU:X86`` (or any device other than
CPU) the compute-bound rows also print the ratio to the CPU device's default (C) renderer. ``--quick`` skips the
2048^3 product.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import time

from tgcore.helpers import cpu_count

THREADS = cpu_count()
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))  # numpy's BLAS on tgcore's threads (before numpy loads)

import numpy as np  # noqa: E402

import tgcore.nn.functional as F  # noqa: E402
from tgcore.tensor import Tensor  # noqa: E402


def median_time(fn, repeat: int) -> float:
    fn()  # warm up: compile, allocate
    times = []
    for _ in range(repeat):
        gc.collect()  # results are freed by refcount; collect anything else before timing
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


SETTLE_S = 0.25  # untimed calls before each timed one: longer than OpenBLAS's idle threads spin (2^28 cycles)


def interleaved_medians(fns: list, repeat: int) -> list[float]:
    """The median time of each of ``fns``, timed in turn round by round: on a shared machine every function sees
    about the same load, so a change of load during the run does not land on one side of a ratio. Before each timed
    call the same function runs untimed for ``SETTLE_S``: right after another library's call its threads are still
    spinning (OpenBLAS's for ~0.1 s after each product; measured: tgcore's 1024^3 product at 258 GFLOPS alone, 141
    right after numpy's, and again 258 with OPENBLAS_THREAD_TIMEOUT=4), and after a pause worker threads take time
    to wake (either library at about half speed after a 0.3 s sleep): the timed call sees the steady state of a
    loop of calls to one library."""
    for fn in fns:
        fn()  # warm up: compile, allocate
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, spent in zip(fns, times, strict=True):
            gc.collect()
            settle = time.perf_counter() + SETTLE_S
            while time.perf_counter() < settle:
                fn()
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [statistics.median(spent) for spent in times]


def compute_rows(dev: str, rep: int, quick: bool) -> list[tuple[str, float, float, str, float | None]]:
    """(name, tgcore GFLOPS, peer GFLOPS, peer name, tgcore GFLOPS on CPU's default renderer or None)."""
    rng = np.random.default_rng(1)
    rows: list[tuple[str, float, float, str, float | None]] = []

    def add(name: str, flops: float, make, peer: str, peer_fn) -> None:
        devices = [dev] if dev == "CPU" else [dev, "CPU"]
        runs = [make(d) for d in devices]  # inputs made and copied to the device here, not in the timed calls
        fns = [lambda run=run: run().realize() for run in runs] + [peer_fn]
        rates = [flops / t / 1e9 for t in interleaved_medians(fns, rep)]
        rows.append((name, rates[0], rates[-1], peer, rates[1] if dev != "CPU" else None))

    shapes = [(1024, 1024, 1024), *([] if quick else [(2048, 2048, 2048)]), (1000, 1000, 1000)]
    def product(a_np: np.ndarray, b_np: np.ndarray):
        def make(d: str):
            a, b = Tensor(a_np, device=d).realize(), Tensor(b_np, device=d).realize()
            return lambda: a @ b
        return make

    for m, n, k in shapes:
        a_np, b_np = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        add(f"matmul {m}x{n}x{k}", 2 * m * n * k, product(a_np, b_np), "numpy",
            lambda a_np=a_np, b_np=b_np: a_np @ b_np)
    a_np = rng.standard_normal((16, 256, 256), dtype=np.float32)
    b_np = rng.standard_normal((16, 256, 256), dtype=np.float32)
    add("batched 16x256^3", 2 * 16 * 256**3, product(a_np, b_np), "numpy", lambda: a_np @ b_np)
    try:
        import torch
    except ImportError:
        print("(torch is not installed: no convolution rows)")
        return rows
    torch.set_num_threads(THREADS)
    x_np = rng.standard_normal((8, 64, 56, 56), dtype=np.float32)
    w_np = rng.standard_normal((64, 64, 3, 3), dtype=np.float32) * 0.05
    flops = 2 * 8 * 64 * 64 * 9 * 56 * 56
    xt, wt = torch.tensor(x_np), torch.tensor(w_np)
    def conv_forward(d: str):
        x, w = Tensor(x_np, device=d).realize(), Tensor(w_np, device=d).realize()
        return lambda: F.conv2d(x, w, padding=1)
    add("conv2d 3x3 64ch 56^2 b8 fwd", flops, conv_forward, "torch",
        lambda: torch.nn.functional.conv2d(xt, wt, padding=1))
    # a training step's work: the output and both gradients for a random output gradient (the gradient of .sum()
    # is constant: tgcore would fold it into cheaper kernels than a training step runs)
    g_np = rng.standard_normal((8, 64, 56, 56), dtype=np.float32)
    xg, wg, gt = xt.clone().requires_grad_(), wt.clone().requires_grad_(), torch.tensor(g_np)

    def torch_backward() -> None:
        xg.grad = wg.grad = None
        torch.nn.functional.conv2d(xg, wg, padding=1).backward(gt)

    def tg_backward(d: str):
        x = Tensor(x_np, device=d, requires_grad=True).realize()
        w = Tensor(w_np, device=d, requires_grad=True).realize()
        g = Tensor(g_np, device=d).realize()

        def step() -> Tensor:
            x.grad = w.grad = None
            out = F.conv2d(x, w, padding=1)
            out.backward(g)
            return out.realize(x.grad, w.grad)
        return step
    add("conv2d same, fwd+bwd", 3 * flops, tg_backward, "torch", torch_backward)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="skip the 2048^3 matrix product")
    args = ap.parse_args()
    dev, rep = args.device, args.repeat
    rng = np.random.default_rng(0)
    n = 16 * 1024 * 1024
    a_np, b_np = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    a, b = Tensor(a_np, device=dev), Tensor(b_np, device=dev)
    small = Tensor(rng.standard_normal(16, dtype=np.float32), device=dev)

    def overhead():
        t = small
        for i in range(10):
            t = t * 1.0001 + float(i)
        t.realize()

    rows = []
    t_tg, t_np = median_time(lambda: (a + b).realize(), rep), median_time(lambda: a_np + b_np, rep)
    rows.append(("add 16M f32", 3 * 4 * n / t_tg / 1e9, 3 * 4 * n / t_np / 1e9, "GB/s"))
    t_tg, t_np = median_time(lambda: a.sum().realize(), rep), median_time(lambda: a_np.sum(), rep)
    rows.append(("sum 16M f32", 4 * n / t_tg / 1e9, 4 * n / t_np / 1e9, "GB/s"))
    m = 4 * 1024 * 1024  # transcendentals: elements per second, next to numpy's libm
    for np_dt in (np.float32, np.float64):
        x_np = rng.uniform(-100.0, 100.0, m).astype(np_dt)
        x = Tensor(x_np, device=dev).realize()
        for fn in ("sin", "cos"):
            t_tg = median_time(lambda fn=fn, x=x: getattr(x, fn)().realize(), rep)
            t_np = median_time(lambda fn=fn, x_np=x_np: getattr(np, fn)(x_np), rep)
            rows.append((f"{fn} 4M {np.dtype(np_dt).name}", m / t_tg / 1e6, m / t_np / 1e6, "Melem/s"))
    t_ov = median_time(overhead, max(rep, 20))
    print(f"{'benchmark':22s} {'tgcore':>10s} {'numpy':>10s} {'unit':>7s} {'ratio':>6s}")
    for name, tg, ref, unit in rows:
        print(f"{name:22s} {tg:10.2f} {ref:10.2f} {unit:>7s} {tg / ref:6.2f}")
    print(f"{'10-op overhead, 16 el':22s} {t_ov * 1e6:10.1f} {'':>10s} {'us':>7s}")
    compute = compute_rows(dev, rep, args.quick)
    vs_c = f" {dev + '/C':>8s}" if dev != "CPU" else ""
    print(f"\n{'compute-bound (GFLOPS)':30s} {'tgcore':>8s} {'peer':>8s} {'':6s} {'ratio':>6s}{vs_c}"
          f"   ({THREADS} threads)")
    for name, tg, ref, peer, on_c in compute:
        extra = f" {tg / on_c:8.2f}" if on_c else ""
        print(f"{name:30s} {tg:8.1f} {ref:8.1f} {peer:6s} {tg / ref:6.2f}{extra}")


if __name__ == "__main__":
    main()

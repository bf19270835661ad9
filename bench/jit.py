"""Per-call time of a ~20-kernel function, plain vs tgcore.jit, in one run. Prints; asserts nothing.

    python bench/jit.py [--device CPU] [--calls 50]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tgcore
from tgcore.engine.stats import GlobalCounters
from tgcore.tensor import Tensor


def layers(x: Tensor, w: Tensor) -> Tensor:
    for _ in range(5):  # 4 kernels per layer
        y = x @ w
        e = (y - y.max(1, keepdim=True)).exp()
        x = e / e.sum(1, keepdim=True)
    return x


def per_call(fn, inputs, w, calls: int) -> tuple[float, float]:
    fn(inputs[0], w).realize()
    fn(inputs[1], w).realize()
    start_kernels = GlobalCounters.kernel_count
    start = time.perf_counter()
    for i in range(calls):
        fn(inputs[i % len(inputs)], w).realize()
    return (time.perf_counter() - start) / calls, (GlobalCounters.kernel_count - start_kernels) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((32, 32)).astype(np.float32), device=args.device)
    inputs = [Tensor(rng.standard_normal((16, 32)).astype(np.float32), device=args.device).realize() for _ in range(4)]
    plain, plain_kernels = per_call(layers, inputs, w, args.calls)
    jitted, jit_kernels = per_call(tgcore.jit(layers), inputs, w, args.calls)
    print(f"{'':8s} {'per call':>10s} {'kernels/call':>13s}")
    print(f"{'plain':8s} {plain * 1e6:8.1f}us {plain_kernels:13.1f}")
    print(f"{'jit':8s} {jitted * 1e6:8.1f}us {jit_kernels:13.1f}")
    print(f"speedup  {plain / jitted:8.1f}x")


if __name__ == "__main__":
    main()

"""tgcore (CPU) next to numpy on a few core ops, in one run. Prints figures and ratios; asserts nothing.

    python bench/ops.py [--device CPU] [--repeat 5]

Ratios are tgcore/numpy throughput (higher is better), medians of --repeat runs.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time

import numpy as np

from tgcore.tensor import Tensor


def median_time(fn, repeat: int) -> float:
    fn()  # warm up: compile, allocate
    times = []
    for _ in range(repeat):
        gc.collect()  # results are freed by refcount; collect anything else before timing
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    dev, rep = args.device, args.repeat
    rng = np.random.default_rng(0)
    n = 16 * 1024 * 1024
    a_np, b_np = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    a, b = Tensor(a_np, device=dev), Tensor(b_np, device=dev)
    m = 1024
    x_np, y_np = rng.standard_normal((m, m), dtype=np.float32), rng.standard_normal((m, m), dtype=np.float32)
    x, y = Tensor(x_np, device=dev), Tensor(y_np, device=dev)
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
    t_tg, t_np = median_time(lambda: (x @ y).realize(), rep), median_time(lambda: x_np @ y_np, rep)
    rows.append(("matmul 1024^3 f32", 2 * m**3 / t_tg / 1e9, 2 * m**3 / t_np / 1e9, "GFLOPS"))
    t_ov = median_time(overhead, max(rep, 20))
    print(f"{'benchmark':22s} {'tgcore':>10s} {'numpy':>10s} {'unit':>7s} {'ratio':>6s}")
    for name, tg, ref, unit in rows:
        print(f"{name:22s} {tg:10.2f} {ref:10.2f} {unit:>7s} {tg / ref:6.2f}")
    print(f"{'10-op overhead, 16 el':22s} {t_ov * 1e6:10.1f} {'':>10s} {'us':>7s}")


if __name__ == "__main__":
    main()

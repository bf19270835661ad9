"""Row-lane products (``tg_gguf.lanes``) against the activations-in-lanes ones (``tg_gguf.intdot``), one process,
alternating, jitted (kernels only), at 1/4/8 batch rows. Prints microseconds per product and the ratios; asserts
nothing. Run it on one core for the figures of the note: ``taskset -c 1 python plugins/tg-gguf/bench/lanes.py``.
``--kernels``: instead, the row-lane path's kernels one by one (the activations' scales, their rounding, their block
sums, the product), each one's median over ``--rounds`` x 20 timed calls (``KernelTimes``), the batches interleaved.
``--groups``: instead, the product kernel with the weight in groups of 8 rows against groups of 16 (``repack(group=)``:
16 rows per 512-bit vector, what the C renderer takes with AVX512-VNNI), alternating, medians and their ratio.

    python plugins/tg-gguf/bench/lanes.py [--types Q4_1,Q4_0,Q8_0] [--shape 1536x576] [--rounds 5] [--kernels|--groups]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # random_blocks


def best(fn, calls: int = 20) -> float:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
    from tg_gguf.lanes import repack
    from tg_gguf_testutil import random_blocks

    from tgcore.tensor import Tensor
    p = argparse.ArgumentParser()
    p.add_argument("--types", default="Q4_1,Q4_0,Q8_0")
    p.add_argument("--shape", default="1536x576")
    p.add_argument("--batches", default="1,4,8")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="CPU")
    p.add_argument("--kernels", action="store_true", help="time the row-lane path's kernels one by one")
    p.add_argument("--groups", action="store_true", help="the product with 8-row against 16-row groups")
    a = p.parse_args()
    n, k = (int(s) for s in a.shape.split("x"))
    if a.kernels:
        kernels(a, n, k)
        return
    if a.groups:
        groups(a, n, k)
        return
    print(f"{'type':6s} {'rows':>4s} {'intdot us':>10s} {'lanes us':>9s} {'ratio':>6s}")
    for name in a.types.split(","):
        gtype = GGMLType[name]
        raw_np = random_blocks(gtype, n * k // BLOCK_LAYOUT[gtype][0], seed=1, small=True)
        raw = Tensor(raw_np, device=a.device).realize()
        lanes = repack(raw_np, gtype, (n, k), a.device)
        for m in (int(s) for s in a.batches.split(",")):
            x = Tensor(np.random.default_rng(m).standard_normal((m, k)).astype(np.float32), device=a.device).realize()
            t_old, t_new = compare(raw, lanes, gtype, (n, k), x, a.rounds)
            print(f"{name:6s} {m:4d} {t_old * 1e6:10.1f} {t_new * 1e6:9.1f} {t_old / t_new:6.2f}x", flush=True)


def compare(raw, lanes, gtype, shape: tuple[int, int], x, rounds: int) -> tuple[float, float]:
    """(best intdot seconds, best row-lane seconds) for the activations ``x``, jitted, alternating."""
    from tg_gguf.intdot import int_matmul, quantize_activations
    from tg_gguf.lanes import row_lanes_matmul

    import tgcore
    old = tgcore.jit(lambda v: int_matmul(v, raw, gtype, shape).realize())
    new = tgcore.jit(lambda v: row_lanes_matmul(*quantize_activations(v), lanes).realize())
    t_old = t_new = float("inf")
    for _ in range(rounds):
        t_old = min(t_old, best(lambda: old(x)))
        t_new = min(t_new, best(lambda: new(x)))
    return t_old, t_new


def kernels(a: argparse.Namespace, n: int, k: int) -> None:
    """Each batch's row-lane kernels (quantization and product, jitted together), median microseconds per kernel."""
    import statistics

    from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
    from tg_gguf.intdot import quantize_activations
    from tg_gguf.lanes import repack, row_lanes_matmul
    from tg_gguf_testutil import random_blocks

    import tgcore
    from tgcore.engine.stats import KernelTimes
    from tgcore.tensor import Tensor
    for name in a.types.split(","):
        gtype = GGMLType[name]
        lanes = repack(random_blocks(gtype, n * k // BLOCK_LAYOUT[gtype][0], seed=1, small=True), gtype, (n, k),
                       a.device)
        runs, xs = {}, {}
        for m in (int(s) for s in a.batches.split(",")):
            x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
            xs[m] = Tensor(x, device=a.device).realize()
            runs[m] = tgcore.jit(lambda v, w=lanes: row_lanes_matmul(*quantize_activations(v), w).realize())
            for _ in range(3):
                runs[m](xs[m])
        times: dict[int, list[list[float]]] = {m: [] for m in runs}
        kernel_names: dict[int, list[str]] = {}
        for _ in range(a.rounds * 20):
            for m, run in runs.items():
                with KernelTimes.record() as recorded:
                    run(xs[m])
                times[m].append([t.seconds for t in recorded])
                kernel_names[m] = [t.name for t in recorded]
        for m in runs:
            names = kernel_names[m]
            medians = [statistics.median(r[j] for r in times[m]) * 1e6 for j in range(len(names))]
            parts = "  ".join(f"{nm} {t:.2f}" for nm, t in zip(names, medians, strict=True))
            print(f"{name:6s} {m:4d} rows: {parts}  (sum {sum(medians):.2f} us)", flush=True)


def groups(a: argparse.Namespace, n: int, k: int) -> None:
    """The product kernel's median microseconds with the weight in groups of 8 and of 16 rows, alternating."""
    import statistics

    from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
    from tg_gguf.intdot import quantize_activations
    from tg_gguf.lanes import repack, row_lanes_matmul
    from tg_gguf_testutil import random_blocks

    import tgcore
    from tgcore.engine.stats import KernelTimes
    from tgcore.tensor import Tensor
    for name in a.types.split(","):
        gtype = GGMLType[name]
        raw = random_blocks(gtype, n * k // BLOCK_LAYOUT[gtype][0], seed=1, small=True)
        weights = {g: repack(raw, gtype, (n, k), a.device, group=g) for g in (8, 16)}
        for m in (int(s) for s in a.batches.split(",")):
            x = Tensor(np.random.default_rng(m).standard_normal((m, k)).astype(np.float32), device=a.device).realize()
            runs = {g: tgcore.jit(lambda v, w=w: row_lanes_matmul(*quantize_activations(v), w).realize())
                    for g, w in weights.items()}
            times: dict[int, list[float]] = {g: [] for g in runs}
            for _ in range(3 + a.rounds * 20):
                for g, run in runs.items():
                    with KernelTimes.record() as recorded:
                        run(x)
                    times[g].append(recorded[-1].seconds)  # (the product: the last kernel)
            eight, sixteen = (statistics.median(times[g][3:]) * 1e6 for g in (8, 16))
            print(f"{name:6s} {m:4d} rows: 8-row groups {eight:.1f} us, 16-row {sixteen:.1f} us, "
                  f"{sixteen / eight:.2f}x", flush=True)


if __name__ == "__main__":
    main()

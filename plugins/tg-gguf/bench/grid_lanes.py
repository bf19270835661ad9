"""The grid types' GEMV in the row lanes (``tg_gguf.grid_lanes``) against ``intdot``'s layout (activations in the
lanes), both jitted, interleaved in one process. Prints figures and ratios; asserts nothing.

    python plugins/tg-gguf/bench/grid_lanes.py [--types IQ1_S,IQ3_XXS] [--size 4096] [--rounds 15]

Per type and round: the jitted streaming reference (``gguf.py``'s: a float32 row sum over a buffer of the weight's
file bytes), the row-lane product (``lanes.row_lanes_matmul`` on a weight repacked by ``lanes.repack``, as
``QuantizedMatrix.matmul_t`` runs it) and the ``intdot`` one (``int_matmul`` on the raw bytes), each the best of 3
calls, back to back; the columns are medians over rounds of the times, of each round's % of the stream and of its
speed-up (intdot's time over the row lanes'); "bytes": the row-lane form's size over the file's. Both products quantize
the activations the same way (per 32); their results agree to float rounding (printed).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # random_blocks

import numpy as np  # noqa: E402
from gguf import interleaved_rounds, percent_of_stream, stream_buffer  # noqa: E402 (this folder's gguf.py)

GRID_TYPES = "IQ1_S,IQ1_M,IQ2_XXS,IQ2_XS,IQ2_S,IQ3_XXS,IQ3_S"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default=GRID_TYPES)
    ap.add_argument("--size", type=int, default=4096, help="rows and columns (a multiple of 256)")
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    from tg_gguf.constants import GGMLType
    from tg_gguf.grid_lanes import GRIDS

    n = k = a.size
    print(f"grid GEMV {n}x{k}, jitted, CPU_COUNT={os.environ.get('CPU_COUNT', 'all')}: median ms and % of the jitted "
          f"stream over {a.rounds} interleaved rounds")
    print(f"{'type':8s} {'bytes':>6s} {'stream':>7s} {'lanes':>7s} {'%strm':>6s} {'intdot':>7s} {'%strm':>6s} "
          f"{'speed-up':>12s} {'max rel diff':>12s}")
    for name in a.types.split(","):
        gtype = GGMLType[name]
        if gtype not in GRIDS:
            sys.exit(f"grid_lanes: {name} has no grid row-lane layout (types: {', '.join(t.name for t in GRIDS)})")
        measure(gtype, n, k, a.rounds)


def measure(gtype, n: int, k: int, rounds: int) -> None:
    """One type's row of the table."""
    from tg_gguf.constants import BLOCK_LAYOUT
    from tg_gguf.intdot import int_matmul, quantize_activations
    from tg_gguf.lanes import repack, row_lanes_matmul
    from tg_gguf_testutil import random_blocks

    import tgcore
    from tgcore.tensor import Tensor
    raw_np = random_blocks(gtype, n * k // BLOCK_LAYOUT[gtype][0], small=True)
    raw = Tensor(raw_np, device="CPU").realize()
    w = repack(raw_np, gtype, (n, k), "CPU")
    x = Tensor(np.random.default_rng(1).standard_normal(k).astype(np.float32), device="CPU").realize()

    def lanes_product(v):
        xq, dx = quantize_activations(v.reshape(1, k))
        return row_lanes_matmul(xq, dx, w).realize()
    steps = {"stream": tgcore.jit(lambda b: b.sum(axis=1).realize()),
             "lanes": tgcore.jit(lanes_product),
             "intdot": tgcore.jit(lambda v: int_matmul(v, raw, gtype, (n, k)).realize())}
    buf = stream_buffer(raw_np.size, n, "CPU")
    args = {"stream": buf, "lanes": x, "intdot": x}
    ours, theirs = steps["lanes"](x).numpy().reshape(n), steps["intdot"](x).numpy().reshape(n)
    diff = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    times = interleaved_rounds({s: (lambda f=fn, s=s: f(args[s])) for s, fn in steps.items()}, rounds)
    pct = {s: statistics.median(percent_of_stream(times, s)) for s in ("lanes", "intdot")}
    ratio = statistics.median(t1 / t0 for t0, t1 in zip(times["lanes"], times["intdot"], strict=True))
    held = w.qs.numpy().nbytes + w.d.numpy().nbytes
    med = {s: statistics.median(t) * 1e3 for s, t in times.items()}
    print(f"{gtype.name:8s} {held / raw_np.size:5.2f}x {med['stream']:7.3f} {med['lanes']:7.3f} {pct['lanes']:5.0f}% "
          f"{med['intdot']:7.3f} {pct['intdot']:5.0f}% {ratio:11.2f}x {diff:12.1e}", flush=True)

if __name__ == "__main__":
    main()

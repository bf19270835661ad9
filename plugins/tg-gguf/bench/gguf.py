"""tg-gguf next to gguf-py / numpy, in one run. Prints figures and ratios; asserts nothing.

    python plugins/tg-gguf/bench/gguf.py [--device CPU] [--repeat 5] [--rounds 31] [--elements 4194304]
        [--types Q4_0,Q4_K] [--gemv-types Q4_K,Q6_K] [--no-dequant]

1. Dequantization throughput per type: GB/s of quantized input turned into float32, tg-gguf's tensor-op
   dequantization (one kernel, raw bytes already on the device) vs ``gguf.quants.dequantize`` (numpy's
   own conversion for the plain types gguf-py does not handle: F64, I8..I64).
2. A 4096x4096 quantized GEMV (``w @ x``) per type (``--gemv-types``): tg-gguf (one kernel reading the
   quantized bytes) as ms, GB/s of weight bytes and % of the streaming bandwidth measured next to it (a plain
   float32 row sum over a buffer of the same byte size and row count: what the machine streams in this run),
   each called once per realize (per-call overhead included on both sides);
   vs numpy (gguf-py dequantization, then a float32 matvec), and vs numpy's matvec alone on an already
   dequantized weight (the float32 roofline numpy reaches).
   Then the same product replayed by ``tgcore.jit`` (kernels only, as an LLM's decode step runs them), against
   the streaming reference replayed the same way ("jit stream"): "jit float", and for the types with an integer
   path (``tg_gguf.intdot``: activations quantized to 8 bits per 32) "jit int" (ms, and % of the jitted stream:
   ``QuantizedMatrix.matmul_t``'s integer product, as a model runs it, with the weight's rows in the vector lanes
   where ``tg_gguf.lanes`` takes the type); "policy" says which one tg-gguf picks on the device (``uses_int_dot``;
   "lanes": the integer product in row lanes). Compare a jitted time with the jitted
   stream only: the per-call stream includes a realize's fixed cost, which flatters small weights.
   The jitted columns are measured in --rounds rounds, each timing the stream, the float and the integer GEMV
   back to back (the best of 3 calls each), so a round's ratios see the same machine state; the columns are the
   medians over rounds of the times and of each round's ratios, and "spread" is the 25th-75th percentile of the
   policy path's per-round % of stream (on a shared machine the ratio moves far less than either time).

Ratios are tg-gguf / reference throughput (higher is better): medians of --repeat runs for the
dequantization, the best of --repeat runs for the per-call GEMV and its streaming reference (on a shared machine
the fastest run is the least disturbed one). Kernels are compiled in a warm-up run that is not timed.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# this file is named gguf.py: keep its folder off the path so `import gguf` finds gguf-py
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # random_blocks, reference_dequantize

from tg_gguf.constants import BLOCK_LAYOUT, GGMLType  # noqa: E402
from tg_gguf.dequant import DEQUANTIZERS, dequantize  # noqa: E402
from tg_gguf_testutil import random_blocks, reference_dequantize  # noqa: E402

from tgcore.tensor import Tensor  # noqa: E402

GEMV_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
              "TQ1_0", "TQ2_0", "MXFP4", "F16", "BF16",
              "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S")  # the grid types last (slow today)


def median_time(fn: Callable[[], object], repeat: int) -> float:
    return statistics.median(run_times(fn, repeat))


def best_time(fn: Callable[[], object], repeat: int) -> float:
    return min(run_times(fn, repeat))


def run_times(fn: Callable[[], object], repeat: int) -> list[float]:
    fn()  # warm up: compile, allocate
    times = []
    for _ in range(repeat):
        gc.collect()  # results are freed by refcount; collect anything else before timing
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def dequantize_row(gtype: GGMLType, elements: int, device: str, repeat: int) -> None:
    block, _ = BLOCK_LAYOUT[gtype]
    shape = (elements // 1024, 1024)
    raw_np = random_blocks(gtype, elements // block, small=True)
    raw = Tensor(raw_np, device=device).realize()
    t_tg = median_time(lambda: dequantize(raw, gtype, shape).realize(), repeat)
    t_ref = median_time(lambda: reference_dequantize(gtype, raw_np, shape), repeat)
    gb = raw_np.size / 1e9
    print(f"{gtype.name:8s} {raw_np.size / 1e6:7.2f} {gb / t_tg:9.3f} {gb / t_ref:9.3f} {t_ref / t_tg:6.2f}x")


def stream_buffer(nbytes: int, rows: int, device: str) -> Tensor:
    """A float32 buffer of ``nbytes`` as ``rows`` rows: summed row by row (split over threads like a GEMV's rows), what
    the machine streams."""
    return Tensor(np.ones((rows, nbytes // 4 // rows), np.float32), device=device).realize()


def gemv_row(gtype: GGMLType, n: int, device: str, repeat: int, rounds: int) -> None:
    block, _ = BLOCK_LAYOUT[gtype]
    raw_np = random_blocks(gtype, n * n // block, small=True)
    buf = stream_buffer(raw_np.size, n, device)
    t_stream = best_time(lambda: buf.sum(axis=1).realize(), repeat)
    x_np = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    w = dequantize(Tensor(raw_np, device=device).realize(), gtype, (n, n))
    w_np = reference_dequantize(gtype, raw_np, (n, n))
    # a fresh x each run, so nothing is reused from the last one
    t_tg = best_time(lambda: (w @ Tensor(x_np, device=device)).realize(), repeat)
    t_np = best_time(lambda: reference_dequantize(gtype, raw_np, (n, n)) @ x_np, repeat)
    t_mv = best_time(lambda: w_np @ x_np, repeat)
    gb = raw_np.size / 1e9
    jitted = jit_columns(gtype, w, raw_np, x_np, buf, n, device, rounds)
    print(f"{gtype.name:8s} {t_tg * 1e3:9.2f} {gb / t_tg:7.2f} {gb / t_stream:8.2f} {100 * t_stream / t_tg:7.0f}% "
          f"{t_np * 1e3:10.2f} {t_np / t_tg:6.2f}x {t_mv * 1e3:11.2f} {t_mv / t_tg:6.2f}x {jitted}", flush=True)


def interleaved_rounds(steps: dict[str, Callable[[], object]], rounds: int, calls: int = 3) -> dict[str, list[float]]:
    """Seconds per step (the best of ``calls`` calls) in each of ``rounds`` rounds that time every step back to back,
    so the steps of one round see the same machine state. Each step is called once first (compile, allocate)."""
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        gc.collect()
        for name, step in steps.items():
            best = float("inf")
            for _ in range(calls):
                start = time.perf_counter()
                step()
                best = min(best, time.perf_counter() - start)
            times[name].append(best)
    return times


def percent_of_stream(times: dict[str, list[float]], name: str) -> list[float]:
    """Each round's % of the jitted stream for step ``name``."""
    return [100 * s / t for s, t in zip(times["stream"], times[name], strict=True)]


def quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:  # (one round: no spread)
        return values[0], values[0]
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return low, high


def jit_columns(gtype: GGMLType, w: Tensor, raw_np: np.ndarray, x_np: np.ndarray, buf: Tensor, n: int, device: str,
                rounds: int) -> str:
    """The jitted stream, float GEMV and, for a type with an integer path, integer GEMV, interleaved in ``rounds``
    rounds (``interleaved_rounds``): median times, median per-round % of stream, and the policy path's spread."""
    from tg_gguf.intdot import SUMS, QuantizedMatrix, int_matmul, uses_int_dot

    import tgcore
    x = Tensor(x_np, device=device).realize()
    stream_step = tgcore.jit(lambda b: b.sum(axis=1).realize())
    float_step = tgcore.jit(lambda v: (w @ v).realize())
    steps: dict[str, Callable[[], object]] = {"stream": lambda: stream_step(buf), "float": lambda: float_step(x)}
    lanes = False
    if gtype in SUMS:
        raw = Tensor(raw_np, device=device).realize()
        matrix = QuantizedMatrix(raw, gtype, (n, n))  # the integer product as a model runs it (maybe row lanes)
        lanes = matrix.integer_path and matrix.row_lanes is not None
        int_step = tgcore.jit(lambda v: (matrix.matmul_t(v) if matrix.integer_path
                                         else int_matmul(v, raw, gtype, (n, n))).realize())
        steps["int"] = lambda: int_step(x)
    times = interleaved_rounds(steps, rounds)
    med = {name: statistics.median(t) for name, t in times.items()}
    pct = {name: percent_of_stream(times, name) for name in steps if name != "stream"}
    stream_float = (f"{med['stream'] * 1e3:10.3f} {med['float'] * 1e3:9.2f} "
                    f"{statistics.median(pct['float']):5.0f}%")
    if "int" not in steps:
        low, high = quartiles(pct["float"])
        return f"{stream_float} {'':8s} {'':6s} {'':7s} {'float':>6s} {low:3.0f}-{high:<3.0f}"
    policy = "int" if uses_int_dot(gtype, device) else "float"
    low, high = quartiles(pct[policy])
    policy = "lanes" if lanes else policy
    int_over_float = statistics.median(f / i for f, i in zip(times["float"], times["int"], strict=True))
    return (f"{stream_float} {med['int'] * 1e3:8.2f} {statistics.median(pct['int']):5.0f}% {int_over_float:6.2f}x "
            f"{policy:>6s} {low:3.0f}-{high:<3.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=31, help="interleaved rounds of the jitted GEMV columns")
    ap.add_argument("--elements", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--gemv-size", type=int, default=4096)
    ap.add_argument("--types", default="", help="comma-separated type names (default: all supported)")
    ap.add_argument("--gemv-types", default=",".join(GEMV_TYPES), help="comma-separated type names for the GEMV")
    ap.add_argument("--no-dequant", action="store_true", help="only the GEMV table")
    args = ap.parse_args()
    types = [GGMLType[t] for t in args.types.split(",")] if args.types else sorted(DEQUANTIZERS, key=int)
    if not args.no_dequant:
        print(f"dequantization to float32, {args.elements} elements, {args.device} (GB/s of quantized input)")
        print(f"{'type':8s} {'MB in':>7s} {'tg-gguf':>9s} {'gguf-py':>9s} {'ratio':>7s}")
        for gtype in types:
            dequantize_row(gtype, args.elements, args.device, args.repeat)
    n = args.gemv_size
    print(f"\nquantized GEMV w @ x, w {n}x{n}, {args.device} (ms; GB/s of weight bytes; stream: GB/s of a float32 "
          "row sum of the same bytes; ratio = numpy time / tg-gguf time)")
    print(f"{'type':8s} {'tg-gguf':>9s} {'GB/s':>7s} {'stream':>8s} {'%stream':>8s} {'np deq+mv':>10s} {'ratio':>7s} "
          f"{'np mv only':>11s} {'ratio':>7s} {'jit stream':>10s} {'jit float':>9s} {'%strm':>6s} "
          f"{'jit int':>8s} {'%strm':>6s} {'int/fl':>7s} {'policy':>6s} {'spread':>7s}")
    for name in args.gemv_types.split(","):
        gemv_row(GGMLType[name], n, args.device, args.repeat, args.rounds)

if __name__ == "__main__":
    main()

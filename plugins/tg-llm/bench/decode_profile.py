"""Where one decode step of tg-llm spends its time, kernel by kernel, next to the weight-bytes floor. Prints only.

    python plugins/tg-llm/bench/decode_profile.py [--model FILE.gguf] [--steps 20] [--prompt-tokens 128]
                                                  [--device CPU] [--top 25]

A prompt is prefilled, then jitted decode steps run in turn untimed and with kernel timing on
(``tgcore.engine.stats.KernelTimes``: the native graph reads the clock between kernels, as bench/train.py's
breakdown does); each kernel's median over the timed steps, summed by kernel name and sorted by time. "other" is
the median untimed step's wall time minus the median kernel sum (Python: the replay's setup, the logits' copy).
Each GEMV kernel's weight bytes (the quantized matrices of its shape: rows x bytes per row) are printed with the
GB/s that makes, and the floor is the step's weight bytes at the streaming rate given by ``--stream-gbs``
(default: a plain float32 sum over a buffer of that many bytes, measured here, jitted). On a busy machine (the load
average is printed) only the medians are the undisturbed steps' times; compare kernels of one run with each other,
and runs only at the same load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def weight_rows(model: Any) -> dict[tuple[int, int], int]:
    """(rows, columns) -> bytes per row, for every quantized matrix of the model (a kernel named
    ``r_<rows>_<cols>`` reads one of that shape)."""
    mats = [model.output] if model.output is not None else []
    for layer in model.layers:
        mats += [*layer.wqkv, layer.wo, *layer.w_gate_up, layer.w_down]
    from tg_gguf.constants import BLOCK_LAYOUT
    rows: dict[tuple[int, int], int] = {}
    for m in mats:
        if hasattr(m, "gtype"):  # (the raw bytes may be gone: a weight held in its row-lane form)
            block, block_bytes = BLOCK_LAYOUT[m.gtype]
            rows[m.shape] = m.shape[1] // block * block_bytes
    return rows


def stream_rate(nbytes: int, device: str) -> float:
    """Bytes per second of a jitted float32 sum over ``nbytes``, best of 20."""
    import tgcore
    from tgcore.tensor import Tensor
    nbytes = max(nbytes // 4096, 1) * 4096
    buf = Tensor(np.ones(nbytes // 4, np.float32), device=device).realize()
    step = tgcore.jit(lambda: buf.reshape(-1, 1024).sum(-1).realize())
    for _ in range(3):
        step()
    best = float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def time_steps(step: Callable[[], None], steps: int) -> tuple[float, list[str], list[float], dict[str, list[float]]]:
    """Untimed ``step()`` calls alternating with calls whose kernels are timed in the native graph
    (``KernelTimes.record``, as ``bench/train.py`` does): (the median untimed call's seconds, the kernels' names in
    order, each one's median seconds, kernel name -> those medians)."""
    from tgcore.engine.stats import KernelTimes
    runs, walls = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        walls.append(time.perf_counter() - t0)
        with KernelTimes.record() as times:
            step()
        runs.append(times)
    names = [k.name for k in runs[0]]
    per_kernel = [statistics.median(run[j].seconds for run in runs) for j in range(len(names))]
    by_name: dict[str, list[float]] = {}
    for name, seconds in zip(names, per_kernel, strict=True):
        by_name.setdefault(name, []).append(seconds)
    return statistics.median(walls), names, per_kernel, by_name


def main() -> int:
    from tg_llm.cli import model_path
    from tg_llm.model import Model

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model")
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--stream-gbs", type=float, help="streaming rate for the floor (default: measured)")
    args = ap.parse_args()
    path = model_path(args.model)
    model = Model.from_gguf(path, device=args.device, max_context=args.prompt_tokens + 3 * args.steps + 8)
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(100, model.vocab_size - 1, args.prompt_tokens)]
    logits = model.forward_last(prompt, 0)
    token, pos = int(np.argmax(logits)), args.prompt_tokens

    def step() -> None:
        nonlocal token, pos
        token = int(np.argmax(model.decode([(0, token, pos)])[0]))
        pos += 1
    for _ in range(3):  # capture and first replays
        step()
    wall, names, per_kernel, by_name = time_steps(step, args.steps)
    rows = weight_rows(model)
    kernels = sum(per_kernel)
    weight_bytes = sum(_weight_bytes(n, rows) for n in names)
    rate = args.stream_gbs * 1e9 if args.stream_gbs else stream_rate(weight_bytes, args.device)
    if hasattr(os, "getloadavg"):
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{path.name} on {args.device}: one decode step {wall * 1e3:.2f} ms (median of {args.steps}), "
          f"{len(names)} kernels {kernels * 1e3:.2f} ms; weight bytes {weight_bytes / 1e6:.1f} MB, at "
          f"{rate / 1e9:.1f} GB/s (stream) {weight_bytes / rate * 1e3:.2f} ms")
    print(f"  {'kernel':28s} {'calls':>5s} {'total':>10s} {'share':>6s} {'weights':>9s} {'GB/s':>6s}")
    for name, ts in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:args.top]:
        wb = _weight_bytes(name, rows) * len(ts)
        gbs = f"{wb / sum(ts) / 1e9:6.1f}" if wb else ""
        wtxt = f"{wb / 1e6:7.2f}MB" if wb else ""
        print(f"  {name:28s} {len(ts):5d} {sum(ts) * 1e6:8.1f}us {sum(ts) / wall:6.1%} {wtxt:>9s} {gbs:>6s}")
    print(f"  {'other (step - kernels)':28s} {'':5s} {(wall - kernels) * 1e6:8.1f}us {(wall - kernels) / wall:6.1%}")
    return 0


def _weight_bytes(name: str, rows: dict[tuple[int, int], int]) -> int:
    """The weight bytes a GEMV kernel named ``r_<rows>_<cols>`` reads (0 for another kernel)."""
    parts = name.split("_")
    if len(parts) != 3 or parts[0] != "r" or not parts[1].isdigit() or not parts[2].isdigit():
        return 0
    shape = (int(parts[1]), int(parts[2]))
    return rows.get(shape, 0) * shape[0]


if __name__ == "__main__":
    raise SystemExit(main())

"""Where one batched decode step spends its time, kernel by kernel, at several row counts. Prints; asserts nothing.

    python plugins/tg-llm/bench/batch_step.py [--model FILE.gguf] [--rows 1,4,8] [--steps 12] [--device CPU]

For each row count N: N sequences are prefilled with a short prompt, then decoded together (``Model.decode``, the
jitted batched step). Untimed steps alternate with steps whose kernels are timed in the native graph
(``KernelTimes.record``, as ``bench/train.py`` does); each kernel's median over the timed steps is summed by kernel
name (its shape: ``r_4_3072_576`` is a 4-row product with a 3072 x 576 weight). "other" is the median untimed step
minus the median kernel sum: the host's work (inputs, masks, logits) and the pool's waits between kernels, which
grow with the machine's load; "host CPU outside kernels" is the main thread's CPU time outside the kernels' native run
(the host's work alone, preemption not counted: comparable across loads where "other" is not). The last column
compares each kernel's time with the one-row step's kernel of the same role in the first (smallest) row count's step
(the name with the row count left out): from one row, how much more a batch of N costs (N: no sharing at all).
"""
from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

from decode_profile import time_steps  # (this folder: a script's own folder is on sys.path)

SHOWN = 16  # kernels listed per row count (by total time)
FRESH = itertools.count(500)  # --new-tokens: tokens no step fed before, across every row count (the host keeps rows)


def role(name: str, rows: int) -> str:
    """A kernel's name without its leading row count (``r_4_3072_576`` -> ``r_3072_576``)."""
    return re.sub(rf"^([a-zA-Z]+)_{rows}_", r"\1_", name) if rows > 1 else name


def host_cpu(step: Any, steps: int) -> float:
    """Median main-thread CPU seconds of ``step()`` outside the native graph's run (the host's Python and copies, with
    the cache misses the kernels leave it; preemption by other processes is not counted, unlike "other")."""
    from tgcore.runtime.cpu import NativeGraph
    run, inside = NativeGraph.run, [0.0]

    def counted(graph: Any, timed: bool = False) -> Any:
        t0 = time.thread_time()
        try:
            return run(graph, timed)
        finally:
            inside[0] += time.thread_time() - t0
    NativeGraph.run = counted  # type: ignore[method-assign]
    try:
        cpu = []
        for _ in range(steps):
            inside[0] = 0.0
            t0 = time.thread_time()
            step()
            cpu.append(time.thread_time() - t0 - inside[0])
    finally:
        NativeGraph.run = run  # type: ignore[method-assign]
    return statistics.median(cpu)


def profile(model: Any, rows: int, steps: int, prompt: int = 4,
            new_tokens: bool = False) -> tuple[float, float, dict[str, list[float]], float]:
    """(median step seconds, median kernel seconds, kernel name -> per-call medians, median host CPU seconds
    (``host_cpu``)) of ``rows`` sequences, each decoding after a prompt of ``prompt`` tokens. ``new_tokens``: each
    step feeds every row a token no step fed before (as a server's streams do: the host dequantizes its embedding),
    else the same token per row every step (its embedding row kept on the host)."""
    model.reset()
    for s in range(rows):
        model.forward_last([100 + s] + [200 + i for i in range(prompt - 1)], 0, seq=s)
    position = prompt

    def step() -> None:
        nonlocal position
        model.decode([(s, (next(FRESH) if new_tokens else 500 + s) % model.vocab_size, position) for s in range(rows)])
        position += 1
    for _ in range(3):  # the first call of a step size captures it
        step()
    wall, _, per_kernel, by_name = time_steps(step, steps)
    return wall, sum(per_kernel), by_name, host_cpu(step, steps)

def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the bundled SmolLM2 Q4_1)")
    p.add_argument("--rows", default="1,4,8", help="row counts to profile, comma-separated (default 1,4,8)")
    p.add_argument("--steps", type=int, default=12, help="timed steps per row count (default 12)")
    p.add_argument("--device", default=None, help="device (default: DEV or CPU)")
    p.add_argument("--prompt-tokens", type=int, default=4,
                   help="prompt length before the decode steps (default 4; attention reads the power-of-two window "
                        "covering the positions: 130 reads 256 slots)")
    p.add_argument("--new-tokens", action="store_true",
                   help="a token no step fed before for every row of every step, as a server's streams (the host "
                        "dequantizes their embeddings); default: the same token per row every step")
    args = p.parse_args()
    from tg_llm.cli import model_path
    from tg_llm.model import Model
    rows = sorted({int(r) for r in args.rows.split(",")})
    path = model_path(args.model)
    model = Model.from_gguf(path, device=args.device, max_context=max(512, 2 * args.prompt_tokens + 64),
                            sequences=max(rows))
    print(f"{path.name} on {model.device}, load average {os.getloadavg()[0]:.1f}")
    single: dict[str, float] = {}
    try:
        for n in rows:
            wall, kernels, by_name, host = profile(model, n, args.steps, args.prompt_tokens, args.new_tokens)
            print(f"\n{n} row(s): one step {wall * 1e3:.2f} ms ({n / wall:.1f} tok/s), "
                  f"{sum(len(v) for v in by_name.values())} kernels {kernels * 1e3:.2f} ms")
            print(f"  {'kernel':28s} {'calls':>5s} {'total':>10s} {'share':>6s} {'x first':>8s}")
            for name, ts in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:SHOWN]:
                key = role(name, n)
                if n == rows[0]:
                    single[key] = sum(ts)
                ratio = f"{sum(ts) / single[key]:7.2f}x" if key in single and n != rows[0] else ""
                print(f"  {name:28s} {len(ts):5d} {sum(ts) * 1e6:8.1f}us {sum(ts) / wall:6.1%} {ratio:>8s}")
            other = wall - kernels
            print(f"  {'other (step - kernels)':28s} {'':5s} {other * 1e6:8.1f}us {other / wall:6.1%}")
            print(f"  {'host CPU outside kernels':28s} {'':5s} {host * 1e6:8.1f}us {host / wall:6.1%}")
    finally:
        model.close()


if __name__ == "__main__":
    main()

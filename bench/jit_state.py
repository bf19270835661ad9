"""A jitted training step that writes state (6 layers, Adam): per-call CPU time of the replay, with and without a
lazy reader of the parameters alive across the call, next to the part that protects lazy readers
(``_protect_lazy_readers``: is any name of the written memory read by more than its holders?). Prints; asserts
nothing. CPU time (``time.process_time``) is less disturbed by a shared machine than wall time.

    python bench/jit_state.py [--device CPU] [--calls 300]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tgcore
from tgcore import nn
from tgcore.engine import jit as jit_module
from tgcore.tensor import Tensor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="CPU")
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    params = [Tensor(rng.standard_normal((8, 8)).astype(np.float32), device=args.device, requires_grad=True)
              for _ in range(6)]
    opt = nn.Adam(params, lr=0.01)
    x = Tensor(rng.standard_normal((4, 8)).astype(np.float32), device=args.device)

    @tgcore.jit
    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        h = x
        for p in params:
            h = (h @ p).tanh()
        loss = h.sum()
        loss.backward()
        opt.step(loss)
        return loss

    for _ in range(4):
        step(x)

    def replay(with_reader: bool) -> float:
        start = time.process_time()
        for _ in range(args.calls):
            reader = params[0] * 2 if with_reader else None  # a lazy reader: the replay keeps its old values
            step(x)
            del reader
        return (time.process_time() - start) / args.calls * 1e6

    (capture,) = step.captures.values()

    def protect() -> float:
        start = time.process_time()
        for _ in range(args.calls):
            jit_module._protect_lazy_readers(capture, [])
        return (time.process_time() - start) / args.calls * 1e6

    best = {name: min(fn() for _ in range(5)) for name, fn in
            (("replay", lambda: replay(False)), ("replay, lazy reader alive", lambda: replay(True)),
             ("protect lazy readers", protect))}
    written = len(capture.written) + len(capture.written_inputs)
    print(f"{'(CPU time per call, best of 5)':32s} {'us':>8s}   ({written} written buffers, {capture.kernels} kernels)")
    for name, us in best.items():
        print(f"{name:32s} {us:8.1f}")


if __name__ == "__main__":
    main()

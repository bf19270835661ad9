"""Run time of kernels with gated loads (padding), X86 vs C: the cost of the gated-access legalization.

Prints (never asserts) the best of many runs per kernel.
Run: python plugins/tg-x86/bench/gated.py [reps [elements of the 1-d pads]]
"""
from __future__ import annotations

import os
import sys

import numpy as np

from tgcore.nn.functional import conv2d
from tgcore.tensor import Tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from x86 import run_time  # noqa: E402  (the bench next to this one)

rng = np.random.default_rng(0)


def workloads(dev: str, n: int = 1 << 20) -> dict:
    def t(a: np.ndarray) -> Tensor:
        return Tensor(a, device=dev).realize()
    f = t(rng.standard_normal(n).astype(np.float32))
    i = t(rng.integers(-1000, 1000, n).astype(np.int32))
    img = t(rng.standard_normal((4, 16, 64, 64)).astype(np.float32))
    kern = t(rng.standard_normal((32, 16, 3, 3)).astype(np.float32))
    size = f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K"
    return {
        f"pad1d f32 {size}": lambda: f.pad(((3, 5),)),
        f"pad1d i32 {size}": lambda: i.pad(((3, 5),)),
        f"pad1d f32 {size} *2": lambda: f.pad(((3, 5),)) * 2.0,
        "conv2d 3x3 pad 1": lambda: conv2d(img, kern, padding=1),
    }


if __name__ == "__main__":
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    x86, c = workloads("CPU:X86", n), workloads("CPU", n)
    for name in x86:
        tx, tc = run_time("CPU:X86", x86[name], reps), run_time("CPU", c[name], reps)
        print(f"   {name:20s} X86 {1e3 * tx:9.4f} ms   C {1e3 * tc:9.4f} ms   X86/C {tx / tc:6.2f}")

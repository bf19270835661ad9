"""Train-step time of a small convnet, tgcore (plain and tgcore.jit) vs torch on CPU, in one run. Prints; asserts
nothing.

    python bench/train.py [--steps 20] [--batch 32] [--threads N]

Model: conv 1->8 3x3, relu, maxpool 2, conv 8->16 3x3, relu, maxpool 2, linear 400->10, cross entropy, SGD with
momentum; 28x28 inputs. Both libraries start from the same weights and use the same number of CPU threads
(tgcore's CPU_COUNT and torch.set_num_threads; default: the cores this process may use). Times are medians
over the timed steps (robust to a busy machine); the final losses are printed too, as a sanity check.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import tgcore
import tgcore.nn.functional as F
from tgcore import nn
from tgcore.engine.stats import GlobalCounters
from tgcore.helpers import cpu_count
from tgcore.tensor import Tensor


class Net:
    def __init__(self) -> None:
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3), nn.Conv2d(8, 16, 3)
        self.fc = nn.Linear(16 * 5 * 5, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.conv1(x).relu(), 2)
        x = F.max_pool2d(self.conv2(x).relu(), 2)
        return self.fc(x.flatten(1))


def torch_net(model: Net):  # noqa: ANN201
    import torch
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Flatten(), torch.nn.Linear(16 * 5 * 5, 10))
    ours = [model.conv1.weight, model.conv1.bias, model.conv2.weight, model.conv2.bias, model.fc.weight, model.fc.bias]
    with torch.no_grad():
        for p, t in zip(net.parameters(), ours, strict=True):
            p.copy_(torch.tensor(t.numpy()))
    return net


def time_tgcore(jitted: bool, batches: list[tuple[np.ndarray, np.ndarray]], steps: int) -> tuple[float, float, float]:
    """(seconds per step, kernels per step, last loss), after warm-up steps that compile (and capture)."""
    Tensor.manual_seed(0)
    model = Net()
    opt = nn.SGD(nn.get_parameters(model), lr=0.01, momentum=0.9)

    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss)
        return loss

    fn = tgcore.jit(step) if jitted else step
    inputs = [(Tensor(x), Tensor(y)) for x, y in batches]
    for i in range(3):  # compile; the jit captures on its second call
        fn(*inputs[i % len(inputs)])
    k0, times = GlobalCounters.kernel_count, []
    for i in range(steps):
        t0 = time.perf_counter()
        loss = fn(*inputs[i % len(inputs)])
        times.append(time.perf_counter() - t0)  # (every kernel has run: the step realizes the loss and the updates)
    kernels = (GlobalCounters.kernel_count - k0) / steps
    return statistics.median(times), kernels, loss.item()


def time_torch(batches: list[tuple[np.ndarray, np.ndarray]], steps: int) -> tuple[float, float]:
    import torch
    torch.set_num_threads(cpu_count())
    Tensor.manual_seed(0)
    net = torch_net(Net())  # the same initial weights as the tgcore runs
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    inputs = [(torch.tensor(x), torch.tensor(y).long()) for x, y in batches]

    def step(x, y):  # noqa: ANN001, ANN202
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss

    for i in range(3):
        step(*inputs[i % len(inputs)])
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        loss = step(*inputs[i % len(inputs)])
        times.append(time.perf_counter() - t0)
    return statistics.median(times), loss.item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for both (default: all usable cores)")
    args = ap.parse_args()
    if args.threads > 0:
        os.environ["CPU_COUNT"] = str(args.threads)  # read when the CPU device opens (the first tensor)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((args.batch, 1, 28, 28)).astype(np.float32),
                rng.integers(0, 10, args.batch).astype(np.int32)) for _ in range(4)]
    print(f"convnet train step, batch {args.batch}, 28x28, {cpu_count()} threads, {args.steps} timed steps")
    plain, plain_k, plain_loss = time_tgcore(False, batches, args.steps)
    jit, jit_k, jit_loss = time_tgcore(True, batches, args.steps)
    try:
        ref, ref_loss = time_torch(batches, args.steps)
    except ImportError:
        ref, ref_loss = float("nan"), float("nan")
    print(f"{'':14s} {'ms/step':>9s} {'kernels/step':>13s} {'last loss':>10s} {'vs torch':>9s}")
    print(f"{'tgcore plain':14s} {plain * 1e3:9.2f} {plain_k:13.1f} {plain_loss:10.4f} {plain / ref:8.2f}x")
    print(f"{'tgcore jit':14s} {jit * 1e3:9.2f} {jit_k:13.1f} {jit_loss:10.4f} {jit / ref:8.2f}x")
    print(f"{'torch':14s} {ref * 1e3:9.2f} {'':13s} {ref_loss:10.4f} {1.0:8.2f}x")
    print(f"jit speedup over plain: {plain / jit:.1f}x")


if __name__ == "__main__":
    main()

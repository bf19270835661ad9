"""Train-step time of a small convnet and an MLP, tgcore (plain and tgcore.jit) vs torch on CPU, in one run, and
where one jitted step spends its time, kernel by kernel. Prints; asserts nothing.

    python bench/train.py [--model convnet|mlp|both] [--steps 20] [--threads N] [--torch-ops]

Models (both trained with cross entropy and SGD with momentum, both libraries from the same weights):
  convnet: 28x28x1 inputs, batch 32 (--batch): conv 1->8 3x3, relu, maxpool 2, conv 8->16 3x3, relu, maxpool 2,
           linear 400->10
  mlp:     784 inputs, batch 128 (--mlp-batch): linear 784->512, relu, linear 512->512, relu, linear 512->10
Both libraries use the same number of CPU threads (tgcore's CPU_COUNT and torch.set_num_threads; default: the
cores this process may use). Times are medians over the timed steps (robust to a busy machine); the final losses
are printed too, as a sanity check.

The breakdown: jitted steps run again, every other one with kernel timing on (`KernelTimes.record`; the native
graph reads the clock between kernels); each kernel's median over the timed steps, summed by kernel name, sorted
by time. "other" is the untimed steps' median wall time minus the timed steps' median kernel sum: Python (the
replay's argument setup, the output tensors) and the call into the pool. With --torch-ops, torch's own per-op
table (torch.profiler) of its step follows, for comparison.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import tgcore
import tgcore.nn.functional as F
from tgcore import nn
from tgcore.engine.stats import GlobalCounters, KernelTimes
from tgcore.helpers import cpu_count
from tgcore.tensor import Tensor


class Net:
    def __init__(self) -> None:
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3), nn.Conv2d(8, 16, 3)
        self.fc = nn.Linear(16 * 5 * 5, 10)
        self.layers = [self.conv1, self.conv2, self.fc]

    def __call__(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.conv1(x).relu(), 2)
        x = F.max_pool2d(self.conv2(x).relu(), 2)
        return self.fc(x.flatten(1))


class MLP:
    def __init__(self) -> None:
        self.layers = [nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)]

    def __call__(self, x: Tensor) -> Tensor:
        for layer in self.layers[:-1]:
            x = layer(x).relu()
        return self.layers[-1](x)


def torch_convnet():  # noqa: ANN201
    import torch
    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(8, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(16 * 5 * 5, 10))


def torch_mlp():  # noqa: ANN201
    import torch
    return torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 10))


@dataclass
class Model:
    name: str
    make: Callable[[], Any]          # the tgcore model
    make_torch: Callable[[], Any]    # the same layers in torch (weights copied in)
    input_shape: tuple[int, ...]     # one example


MODELS = {"convnet": Model("convnet", Net, torch_convnet, (1, 28, 28)),
          "mlp": Model("mlp", MLP, torch_mlp, (784,))}


def tgcore_step(model: Model) -> tuple[Callable[[Tensor, Tensor], Tensor], Any]:
    Tensor.manual_seed(0)
    net = model.make()
    opt = nn.SGD(nn.get_parameters(net), lr=0.01, momentum=0.9)

    def step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step(loss)
        return loss
    return step, net


def time_tgcore(model: Model, jitted: bool, batches: list[tuple[np.ndarray, np.ndarray]], steps: int,
                ) -> tuple[float, float, float, Any]:
    """(seconds per step, kernels per step, last loss, the step function), after warm-up steps that compile (and
    capture)."""
    step, _ = tgcore_step(model)
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
    return statistics.median(times), kernels, loss.item(), (fn, inputs)


def breakdown(fn: Any, inputs: list[tuple[Tensor, Tensor]], steps: int) -> None:
    """Print the per-kernel table of a jitted step: each kernel's median over ``steps`` timed replays, and the
    step's time outside its kernels (the median untimed step, from steps run in turn with the timed ones, minus
    the median kernel sum: timing a replay adds Python work per kernel, so a timed step's wall time would not do)."""
    runs, walls, sums = [], [], []
    for i in range(steps):
        t0 = time.perf_counter()
        fn(*inputs[i % len(inputs)])
        walls.append(time.perf_counter() - t0)
        with KernelTimes.record() as times:
            fn(*inputs[i % len(inputs)])
        runs.append(times)
        sums.append(sum(k.seconds for k in times))
    names = [(k.name, k.kind) for k in runs[0]]
    per_kernel = [statistics.median(run[j].seconds for run in runs) for j in range(len(names))]
    by_name: dict[tuple[str, str], list[float]] = {}
    for key, seconds in zip(names, per_kernel, strict=True):
        by_name.setdefault(key, []).append(seconds)
    wall, kernels = statistics.median(walls), statistics.median(sums)
    print(f"  one jitted step: {wall * 1e3:.2f} ms, of which {len(names)} kernels {kernels * 1e3:.2f} ms "
          f"(timed in the native graph; medians of {steps} steps)")
    print(f"  {'kernel':32s} {'kind':11s} {'calls':>5s} {'total':>9s} {'share':>6s}")
    for (name, kind), ts in sorted(by_name.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {name:32s} {kind:11s} {len(ts):5d} {sum(ts) * 1e6:7.1f}us {sum(ts) / wall:6.1%}")
    print(f"  {'other (step - kernels)':32s} {'':11s} {'':5s} {(wall - kernels) * 1e6:7.1f}us "
          f"{(wall - kernels) / wall:6.1%}  (Python, the call into the pool)")


def torch_step(model: Model):  # noqa: ANN201
    import torch
    Tensor.manual_seed(0)
    _, ours = tgcore_step(model)  # the same initial weights as the tgcore runs
    net = model.make_torch()
    params = [p for layer in ours.layers for p in (layer.weight, layer.bias)]
    with torch.no_grad():
        for p, t in zip(net.parameters(), params, strict=True):
            p.copy_(torch.tensor(t.numpy()))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):  # noqa: ANN001, ANN202
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def time_torch(model: Model, batches: list[tuple[np.ndarray, np.ndarray]], steps: int, ops: bool,
               ) -> tuple[float, float, str]:
    """(seconds per step, last loss, torch's per-op table if ``ops`` else "")."""
    import torch
    torch.set_num_threads(cpu_count())
    step = torch_step(model)
    inputs = [(torch.tensor(x), torch.tensor(y).long()) for x, y in batches]
    for i in range(3):
        step(*inputs[i % len(inputs)])
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        loss = step(*inputs[i % len(inputs)])
        times.append(time.perf_counter() - t0)
    table = ""
    if ops:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(steps):
                step(*inputs[i % len(inputs)])
        rows = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40)
        table = f"  torch ops over {steps} steps (self time: the op's own work)\n" + "\n".join(
            "  " + line for line in rows.splitlines())
    return statistics.median(times), loss.item(), table


def run(model: Model, batch: int, steps: int, torch_ops: bool) -> None:
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((batch, *model.input_shape)).astype(np.float32),
                rng.integers(0, 10, batch).astype(np.int32)) for _ in range(4)]
    print(f"{model.name} train step, batch {batch}, {cpu_count()} threads, {steps} timed steps")
    plain, plain_k, plain_loss, _ = time_tgcore(model, False, batches, steps)
    jit, jit_k, jit_loss, (fn, inputs) = time_tgcore(model, True, batches, steps)
    try:
        ref, ref_loss, table = time_torch(model, batches, steps, torch_ops)
    except ImportError:
        ref, ref_loss, table = float("nan"), float("nan"), ""
    print(f"  {'':14s} {'ms/step':>9s} {'kernels/step':>13s} {'last loss':>10s} {'vs torch':>9s}")
    print(f"  {'tgcore plain':14s} {plain * 1e3:9.2f} {plain_k:13.1f} {plain_loss:10.4f} {plain / ref:8.2f}x")
    print(f"  {'tgcore jit':14s} {jit * 1e3:9.2f} {jit_k:13.1f} {jit_loss:10.4f} {jit / ref:8.2f}x")
    print(f"  {'torch':14s} {ref * 1e3:9.2f} {'':13s} {ref_loss:10.4f} {1.0:8.2f}x")
    print(f"  jit speedup over plain: {plain / jit:.1f}x")
    breakdown(fn, inputs, steps)
    if table:
        print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["convnet", "mlp", "both"], default="both")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32, help="convnet batch")
    ap.add_argument("--mlp-batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for both (default: all usable cores)")
    ap.add_argument("--torch-ops", action="store_true", help="also print torch's per-op table of its step")
    args = ap.parse_args()
    if args.threads > 0:
        os.environ["CPU_COUNT"] = str(args.threads)  # read when the CPU device opens (the first tensor)
    for name in ("convnet", "mlp") if args.model == "both" else (args.model,):
        run(MODELS[name], args.batch if name == "convnet" else args.mlp_batch, args.steps, args.torch_ops)


if __name__ == "__main__":
    main()

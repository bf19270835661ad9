"""Data-parallel training throughput: an MLP (784-512-512-10) on 2 ranks against 1 rank with 2 threads, the
communication share, and a scaling model for N machines from the measured allreduce bandwidth. Prints, asserts
nothing.

    python plugins/tg-mlx-rdma/bench/dp.py [--batch 256] [--steps 30] [--repeat 3] [--mpirun-args "..."]

Run without mpirun: it starts the two kinds of jobs itself, alternating them ``--repeat`` times so both see the
same machine state, and prints samples/s of each run and the ratio of the medians:

- ``1 rank``: one process, ``CPU_COUNT=2`` (kernels split over 2 threads), the jitted train step on the whole
  global batch, no transport;
- ``2 ranks``: ``mpirun -np 2``, ``CPU_COUNT=1`` each, ``DataParallel`` with the same jitted step on half the batch.

Each job trains ``--steps`` timed steps after 3 warm-up steps (compile, capture). The 2-rank job also reports the
time its ranks spent in the transport (starting, progressing and waiting for the bucket allreduces:
``DataParallel.comm_seconds``) as a share of the step time, and the allreduce time it measured (median and
fastest of 10 in-place ``iallreduce``s of the gradient's size, float32). The scaling model then predicts
samples/s on N machines of this one's speed, for a ring allreduce over links of the fastest measured bandwidth
(see ``scaling``).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

SIZES = (784, 512, 512, 10)


def model_and_data(batch: int):  # noqa: ANN201
    import numpy as np

    from tgcore import Tensor
    from tgcore.nn import Linear

    class MLP:
        def __init__(self) -> None:
            self.layers = [Linear(a, b) for a, b in zip(SIZES[:-1], SIZES[1:], strict=True)]

        def __call__(self, x: Tensor) -> Tensor:
            for layer in self.layers[:-1]:
                x = layer(x).relu()
            return self.layers[-1](x)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], batch).astype(np.int32)
    return MLP(), x, y


def job(batch: int, steps: int, distributed: bool) -> dict[str, float]:
    """One training job (this process is one rank); returns samples/s of the global batch and, distributed, the
    communication figures."""
    import numpy as np

    import tgcore
    import tgcore.nn.functional as F
    from tgcore import Tensor
    from tgcore.nn import SGD, get_parameters
    tgcore.Tensor.manual_seed(0)
    model, x_all, y_all = model_and_data(batch)
    tr = dp = None
    if distributed:
        from tg_mlx_rdma.data_parallel import DataParallel, shard_sizes
        tr = tgcore.transport("mpi", timeout=120)
        dp = DataParallel(model, tr)
        sizes = shard_sizes(batch, tr.world_size)
        start = sum(sizes[:tr.rank])
        x_all, y_all = x_all[start:start + sizes[tr.rank]], y_all[start:start + sizes[tr.rank]]
        params = dp.params
    else:
        params = get_parameters(model)
    opt = SGD(params, lr=0.01, momentum=0.9)
    x, y = Tensor(x_all).realize(), Tensor(y_all).realize()

    @tgcore.jit
    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if dp is not None:
            dp.reduce_gradients(loss, count=x.shape[0])
        opt.step(loss)
        opt.zero_grad()
        return loss

    for _ in range(3):
        step(x, y).numpy()
    if tr is not None:
        tr.barrier()
    if dp is not None:
        dp.comm_seconds = 0.0
    started = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    loss = float(step(x, y).numpy())  # (the last step's result: every step ran)
    elapsed = time.perf_counter() - started
    out = {"samples_per_s": batch * (steps + 1) / elapsed, "step_s": elapsed / (steps + 1), "loss": loss}
    if tr is not None and dp is not None:
        out["comm_share"] = dp.comm_seconds / elapsed
        nbytes = sum(p.numel() for p in dp.params) * 4
        g = Tensor(np.ones(nbytes // 4, np.float32)).realize()
        times = []
        for _ in range(10):
            tr.barrier()
            t0 = time.perf_counter()
            tr.iallreduce(g, "sum", out=g).wait()
            times.append(time.perf_counter() - t0)
        out["allreduce_s"] = statistics.median(times)
        out["allreduce_best_s"] = min(times)
        out["grad_bytes"] = nbytes
        # figures of rank 0; the step time is the slower rank's
        slow = tr.allreduce(Tensor(np.array([elapsed], np.float64)), "max").numpy()[0]
        out["samples_per_s"] = batch * (steps + 1) / slow
        tr.close()
        if tr.rank != 0:
            return {}
    return out


def scaling(step_1: float, allreduce_s: float, nbytes: int, ranks_measured: int) -> list[tuple[int, float, float]]:
    """Predicted samples/s per global-batch-second factor for N machines: compute splits evenly (``step_1 / N``,
    from the 1-process step), a ring allreduce moves ``2 (N - 1) / N`` of the gradient over each link, at the bus
    bandwidth measured with ``ranks_measured`` ranks; no overlap (the pessimistic end) and full overlap (the
    optimistic end, comm hidden behind compute where it fits). Returns (N, time per step no overlap, with)."""
    factor = 2 * (ranks_measured - 1) / ranks_measured
    busbw = nbytes * factor / allreduce_s
    rows = []
    for n in (1, 2, 4, 8, 16, 32):
        comm = 0.0 if n == 1 else 2 * (n - 1) / n * nbytes / busbw
        compute = step_1 / n
        rows.append((n, compute + comm, max(compute, comm)))
    return rows


def run_child(args: argparse.Namespace, distributed: bool) -> dict[str, float]:
    env = {**os.environ, "CPU_COUNT": "1" if distributed else "2"}
    cmd = [sys.executable, __file__, "--child", "--batch", str(args.batch), "--steps", str(args.steps)]
    if distributed:
        cmd = ["mpirun", "-np", "2", *shlex.split(args.mpirun_args), "-x", "CPU_COUNT", *cmd, "--distributed"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(lines[0][7:])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    default_mpirun = "--allow-run-as-root" if os.geteuid() == 0 else ""
    ap.add_argument("--mpirun-args", default=default_mpirun, help="extra mpirun arguments (e.g. --mca btl ...)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--distributed", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        out = job(args.batch, args.steps, args.distributed)
        if out:
            print("RESULT " + json.dumps(out), flush=True)
        return
    print(f"MLP {'-'.join(map(str, SIZES))}, global batch {args.batch}, SGD momentum, jitted step; load average "
          f"{os.getloadavg()[0]:.2f}")
    one, two = [], []
    for r in range(args.repeat):  # alternate, so both kinds see the same machine state
        one.append(run_child(args, False))
        two.append(run_child(args, True))
        print(f"run {r}: 1 rank x 2 threads {one[-1]['samples_per_s']:8.0f} samples/s | 2 ranks x 1 thread "
              f"{two[-1]['samples_per_s']:8.0f} samples/s (comm share {two[-1]['comm_share']:.0%}, allreduce of "
              f"{two[-1]['grad_bytes'] / 1e6:.2f} MB {two[-1]['allreduce_s'] * 1e3:.2f} ms)", flush=True)
    med1 = statistics.median(o["samples_per_s"] for o in one)
    med2 = statistics.median(o["samples_per_s"] for o in two)
    print(f"median: 1 rank {med1:.0f} samples/s, 2 ranks {med2:.0f} samples/s, 2 ranks / 1 rank {med2 / med1:.2f}; "
          f"comm share {statistics.median(o['comm_share'] for o in two):.0%}; load average "
          f"{os.getloadavg()[0]:.2f}")
    # scaling model: one machine's step time = a 1-rank run with the threads of one machine
    step_1 = statistics.median(o["step_s"] for o in one)
    # the link's bandwidth: the fastest allreduce (on a shared machine the slower ones lost the CPU to others)
    allreduce_s = min(o["allreduce_best_s"] for o in two)
    nbytes = int(two[0]["grad_bytes"])
    busbw = nbytes * 1.0 / allreduce_s  # 2 ranks: a ring moves 2 * (1/2) of the gradient over each link
    median_s = statistics.median(o["allreduce_s"] for o in two)
    print(f"allreduce of {nbytes / 1e6:.2f} MB: median {median_s * 1e3:.2f} ms, fastest {allreduce_s * 1e3:.2f} ms")
    print(f"scaling model (ring allreduce at the fastest measured bus bandwidth {busbw / 1e9:.2f} GB/s, machines as "
          f"fast as this one at {args.batch / step_1:.0f} samples/s; the global batch split evenly):")
    print("   N   samples/s no overlap   samples/s full overlap   efficiency (no overlap)")
    for n, t_none, t_full in scaling(step_1, allreduce_s, nbytes, 2):
        print(f"{n:4d} {args.batch / t_none:22.0f} {args.batch / t_full:24.0f} {step_1 / n / t_none:22.0%}")


if __name__ == "__main__":
    main()

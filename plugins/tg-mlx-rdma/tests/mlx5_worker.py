"""One rank of an mlx5-transport test job on the device model.

    python mlx5_worker.py SCENARIO RANK WORLD HOST:PORT [--big]     # TCP rendezvous
    mpirun -np N python mlx5_worker.py SCENARIO --mpi [--big]       # connection details over MPI

Runs the same checks as the MPI tests (``mpi_worker.suite`` / ``mismatch``: every rank compares with
numpy) through ``tgcore.transport("mlx5", model=True, ...)``. Prints ``OK rank R`` when all passed.
"""
from __future__ import annotations

import os
import sys

from mpi_worker import mismatch, nonblocking, suite

import tgcore


def direct(tr) -> None:  # noqa: ANN001
    """Tensor memory is registered with the device, not copied through the slots: 1 MiB messages (the same tensor
    rewritten, and distinct tensors kept alive: more than the cache holds, so old regions are destroyed) checked
    against numpy; only headers go through the slots."""
    import numpy as np
    from tg_mlx_rdma import mlx5_transport

    from tgcore import Tensor
    mlx5_transport.MR_CACHE = 3
    n, rounds = 1 << 18, 8
    keys_before = len(tr._hw._mkeys)
    copied, made = tr.slot_bytes, tr.registrations
    if tr.rank == 0:
        same = Tensor(np.zeros(n, np.float32)).realize()
        kept = []
        for i in range(rounds):
            if i % 2:
                same.assign(Tensor(np.full(n, i, np.float32))).realize()  # (the same memory, new values)
                tr.send(same, 1)
            else:
                kept.append(Tensor(np.full(n, i, np.float32)).realize())  # (new memory every time)
                tr.send(kept[-1], 1)
    else:
        for i in range(rounds):
            got = tr.recv((n,), "float32", 0)
            assert np.array_equal(got.numpy(), np.full(n, i, np.float32)), f"direct message {i}"
    assert tr.slot_bytes - copied <= rounds * 128, (tr.slot_bytes, copied)  # only the headers were copied
    assert tr.registrations - made >= 2, tr.registrations  # tensor memory was registered ...
    assert len(tr._mrs) <= 3 and len(tr._hw._mkeys) <= keys_before + 3  # ... and old regions destroyed
    print(f"rank {tr.rank} direct: {tr.registrations - made} registrations, {tr.slot_bytes - copied} bytes copied")


def main() -> int:
    scenario = sys.argv[1]
    timeout = float(os.environ.get("TG_TEST_TIMEOUT", "60"))
    chunk = 256 << 10  # small chunks: a 1 MiB message is 4 SENDs through the 2 slots
    if "--mpi" in sys.argv:
        tr = tgcore.transport("mlx5", model=True, exchange="mpi", timeout=timeout, chunk=chunk)
    else:
        rank, world, address = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        tr = tgcore.transport("mlx5", model=True, rank=rank, world_size=world, rendezvous=address, timeout=timeout,
                              chunk=chunk)
    if scenario == "suite":
        suite(tr, "--big" in sys.argv)
    elif scenario == "mismatch":
        mismatch(tr)
    elif scenario == "nonblocking":
        nonblocking(tr)
    elif scenario == "direct":
        direct(tr)
    elif scenario == "die":  # rank 1 is killed while rank 0 sends it 8 MiB
        import signal

        import numpy as np

        from tgcore import Tensor
        if tr.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        tr.send(Tensor(np.zeros(2 << 20, np.float32)), 1)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    tr.close()
    print(f"OK rank {tr.rank}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

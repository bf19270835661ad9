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

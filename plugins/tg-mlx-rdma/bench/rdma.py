"""Send/recv bandwidth of the ``mpi`` transport next to raw mpi4py, in one run. Prints, asserts nothing.

    mpirun -np 2 [--allow-run-as-root] python plugins/tg-mlx-rdma/bench/rdma.py [--sizes 1,4,16,64,256] [--repeat 5]

Rank 0 sends float32 tensors of each size (MiB) to rank 1, ``--repeat`` timed rounds after a warm-up:

- ``tg``: ``transport.send(tensor, 1)`` / ``transport.recv(shape, dtype, 0)``: the header, the deadline
  polling loop, a new result tensor per recv (its buffer comes back from the allocator's cache);
- ``mpi4py``: ``comm.Send(array)`` / ``comm.Recv(array)`` into a preallocated numpy array.

Figures are GB/s measured on the receiver (median round, barrier before each); the ratio is tg / mpi4py
(target >= 0.9 from 16 MiB). Pick the byte transport with ``--mca pml ob1 --mca btl self,vader`` (shared
memory) or ``self,tcp``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def one_round(tr, comm, mpi, kind: str, n: int, src: object) -> None:  # noqa: ANN001
    """One message rank 0 -> rank 1: through the transport ("tg") or raw mpi4py ("raw")."""
    if kind == "tg":
        if tr.rank == 0:
            tr.send(src, 1)
        elif tr.rank == 1:
            tr.recv((n,), "float32", 0)  # dropped at once: its buffer goes back to the allocator's cache
    elif tr.rank in (0, 1):
        (comm.Send if tr.rank == 0 else comm.Recv)([src, mpi.FLOAT], 1 - tr.rank)


def measure(tr, comm, mpi, mib: int, repeat: int) -> None:  # noqa: ANN001
    import tgcore
    n = (mib << 20) // 4
    values = np.arange(n, dtype=np.float32)
    sources = {"tg": tgcore.Tensor(values).realize() if tr.rank == 0 else None,
               "raw": values if tr.rank == 0 else np.empty(n, dtype=np.float32)}
    times: dict[str, list[float]] = {"tg": [], "raw": []}
    for i in range(repeat + 1):  # round 0 warms up (page faults, connections)
        for kind in ("tg", "raw"):  # interleaved: both see the same machine state
            comm.Barrier()
            start = time.perf_counter()
            one_round(tr, comm, mpi, kind, n, sources[kind])
            if i:
                times[kind].append(time.perf_counter() - start)
    if tr.rank == 1:
        ok = bool(np.array_equal(tr.recv((n,), "float32", 0).numpy(), values))  # a last round, checked
        tg_bw, raw_bw = ((mib << 20) / statistics.median(times[k]) / 1e9 for k in ("tg", "raw"))
        comm.send((tg_bw, raw_bw, ok), dest=0)
    elif tr.rank == 0:
        tr.send(sources["tg"], 1)
        tg_bw, raw_bw, ok = comm.recv(source=1)
        flag = "" if ok else "  (WRONG DATA)"
        print(f"{mib:>6} {tg_bw:>9.2f} {raw_bw:>12.2f} {tg_bw / raw_bw:>6.2f}{flag}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,16,64,256", help="message sizes in MiB, comma separated")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    from mpi4py import MPI

    import tgcore

    tr = tgcore.transport("mpi", timeout=120)
    if tr.world_size < 2:
        print("run me under mpirun with 2 ranks: mpirun -np 2 python plugins/tg-mlx-rdma/bench/rdma.py")
        return 0
    if tr.rank == 0:
        library = MPI.Get_library_version().split(",")[0]
        print(f"send/recv float32, rank 0 -> rank 1, {tr.world_size} ranks, MPI: {library}")
        print(f"{'MiB':>6} {'tg GB/s':>9} {'mpi4py GB/s':>12} {'ratio':>6}")
    for mib in (int(s) for s in args.sizes.split(",")):
        measure(tr, MPI.COMM_WORLD, MPI, mib, args.repeat)
    tr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

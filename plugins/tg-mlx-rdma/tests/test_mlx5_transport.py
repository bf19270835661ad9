"""The ``mlx5`` transport on the device model: the MPI tests' checks, over a TCP rendezvous and over MPI.

Every rank checks its results against numpy (``mpi_worker.suite`` / ``mismatch``). The real-hardware path
is checked for its error: this machine has no ConnectX NIC.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
from conftest import HERE, run_job
from test_mpi import NONBLOCKING_ERRORS, ok
from tg_mlx_rdma import CommTimeout

import tgcore
from tgcore import Tensor

WORKER = HERE / "mlx5_worker.py"


def tcp_job(world: int, scenario: str, *extra: str, timeout: float = 120,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``world`` worker processes meeting at a TCP rendezvous; returns one result with all outputs joined.

    Outputs go to files (a full pipe would block a worker while we wait on another)."""
    address = f"127.0.0.1:{random.randint(20000, 60000)}"
    with tempfile.TemporaryDirectory() as tmp:
        logs = [(open(f"{tmp}/{r}.out", "w+"), open(f"{tmp}/{r}.err", "w+")) for r in range(world)]
        procs = [subprocess.Popen([sys.executable, str(WORKER), scenario, str(r), str(world), address, *extra],
                                  stdout=out, stderr=err, text=True, cwd=HERE,
                                  env={**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})})
                 for r, (out, err) in enumerate(logs)]
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:  # a hang: every worker dumps its threads' stacks, then dies
                for q in procs:
                    q.send_signal(signal.SIGABRT)
                for q in procs:
                    try:
                        q.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        q.kill()
                        q.wait()
        texts = []
        for out, err in logs:
            out.seek(0)
            err.seek(0)
            texts.append((out.read(), err.read()))
            out.close()
            err.close()
    code = next((p.returncode for p in procs if p.returncode), 0)
    return subprocess.CompletedProcess([], code, "".join(o for o, _ in texts), "".join(e for _, e in texts))


def test_two_ranks_tcp_rendezvous_all_dtypes_and_sizes() -> None:
    """0, 1, 1001 elements and 1 MiB of every dtype (1 MiB = 4 chunks of 256 KiB); 64 MiB is covered by the
    driver's two-process test (the transport adds only chunking on top)."""
    ok(tcp_job(2, "suite"), 2)


def test_mismatches_raise_and_the_stream_stays_in_step() -> None:
    proc = tcp_job(2, "mismatch")
    ok(proc, 2)
    assert "recv expected float32[5] from rank 0, but rank 0 sent float32[4]" in proc.stdout
    assert "but rank 0 sent int32[4]" in proc.stdout


def test_nonblocking_calls_and_broadcast_on_the_model() -> None:
    """The MPI tests' non-blocking scenario (isend/irecv both ways, out-of-order waits, irecv/iallreduce into
    tensors, broadcast, errors) through the mlx5 transport on the device model."""
    proc = tcp_job(2, "nonblocking")
    ok(proc, 2)
    for text in NONBLOCKING_ERRORS:
        assert text in proc.stdout, proc.stdout


def test_tensor_memory_is_registered_not_copied() -> None:
    """1 MiB messages go from the sender's tensor memory into the receiver's result without the slots; the memory
    region cache reuses registrations and destroys the oldest beyond its size (checked on the model's keys)."""
    proc = tcp_job(2, "direct")
    ok(proc, 2)
    assert "rank 1 direct:" in proc.stdout, proc.stdout


def test_dead_peer_is_a_clear_error() -> None:
    """Rank 1 is killed: rank 0's send fails (its requests are never answered) naming rank 1, not a hang."""
    proc = tcp_job(2, "die", timeout=60, env={"TG_TEST_TIMEOUT": "10"})
    assert proc.returncode != 0
    assert "rank 1" in proc.stderr and ("PeerFailed" in proc.stderr or "CommTimeout" in proc.stderr), proc.stderr


def test_four_ranks_exchanging_over_mpi(need_mpi: None) -> None:
    ok(run_job(4, [str(WORKER), "suite", "--mpi"], timeout=240, oversubscribe=True), 4)
    ok(run_job(4, [str(WORKER), "nonblocking", "--mpi"], timeout=240, oversubscribe=True), 4)


def test_real_hardware_path_says_there_is_no_nic() -> None:
    with pytest.raises(RuntimeError, match="no ConnectX device|no PCIe"):
        tgcore.transport("mlx5", rank=0, world_size=1)


def test_world_of_one_on_the_model() -> None:
    with tgcore.transport("mlx5", model=True, rank=0, world_size=1, timeout=10) as tr:
        x = np.arange(5, dtype=np.int32)
        assert (tr.allreduce(Tensor(x), "max").numpy() == x).all()
        tr.barrier()
        with pytest.raises(ValueError, match="own rank"):
            tr.send(Tensor(x), 0)


def test_missing_rank_times_out_naming_it() -> None:
    address = f"127.0.0.1:{random.randint(20000, 60000)}"
    with pytest.raises(CommTimeout, match=r"ranks \[1\] did not join the rendezvous"):
        tgcore.transport("mlx5", model=True, rank=0, world_size=2, rendezvous=address, timeout=2)


def test_bad_options_are_clear() -> None:
    with pytest.raises(ValueError, match="needs rank= and world_size="):
        tgcore.transport("mlx5", model=True)
    with pytest.raises(ValueError, match="rendezvous='host:port'"):
        tgcore.transport("mlx5", model=True, rank=0, world_size=2)

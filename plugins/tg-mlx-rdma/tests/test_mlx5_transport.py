"""The ``mlx5`` transport on the device model: the MPI tests' checks, over a TCP rendezvous and over MPI.

Every rank checks its results against numpy (``mpi_worker.suite`` / ``mismatch``). The real-hardware path
is checked for its error: this machine has no ConnectX NIC.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys

import numpy as np
import pytest
from conftest import HERE, run_job
from test_mpi import ok
from tg_mlx_rdma import CommTimeout

import tgcore
from tgcore import Tensor

WORKER = HERE / "mlx5_worker.py"


def tcp_job(world: int, scenario: str, *extra: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``world`` worker processes meeting at a TCP rendezvous; returns one result with all outputs joined."""
    address = f"127.0.0.1:{random.randint(20000, 60000)}"
    procs = [subprocess.Popen([sys.executable, str(WORKER), scenario, str(r), str(world), address, *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)
             for r in range(world)]
    outs, code = [], 0
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"mlx5 job {scenario} hung for {timeout} s")
        outs.append((out, err))
        code = code or p.returncode
    return subprocess.CompletedProcess([], code, "".join(o for o, _ in outs), "".join(e for _, e in outs))


def test_two_ranks_tcp_rendezvous_all_dtypes_and_sizes() -> None:
    """0, 1, 1001 elements and 1 MiB of every dtype (1 MiB = 4 chunks of 256 KiB); 64 MiB is covered by the
    driver's two-process test (the transport adds only chunking on top)."""
    ok(tcp_job(2, "suite"), 2)


def test_mismatches_raise_and_the_stream_stays_in_step() -> None:
    proc = tcp_job(2, "mismatch")
    ok(proc, 2)
    assert "recv expected float32[5] from rank 0, but rank 0 sent float32[4]" in proc.stdout
    assert "but rank 0 sent int32[4]" in proc.stdout


def test_dead_peer_is_a_clear_error() -> None:
    """Rank 1 is killed: rank 0's send fails (its requests are never answered) naming rank 1, not a hang."""
    address = f"127.0.0.1:{random.randint(20000, 60000)}"
    env = {**os.environ, "TG_TEST_TIMEOUT": "10"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), "die", str(r), "2", address], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE) for r in (0, 1)]
    out0, err0 = procs[0].communicate(timeout=60)
    procs[1].communicate(timeout=60)
    assert procs[0].returncode != 0 and procs[1].returncode == -9
    assert "rank 1" in err0 and ("PeerFailed" in err0 or "CommTimeout" in err0), err0[-3000:]


def test_four_ranks_exchanging_over_mpi(need_mpi: None) -> None:
    ok(run_job(4, [str(WORKER), "suite", "--mpi"], timeout=240, oversubscribe=True), 4)


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

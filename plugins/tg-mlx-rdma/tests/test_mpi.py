"""The mpi transport under mpirun: results equal numpy's, mismatches and dead peers give clear errors.

Each test starts an mpirun job of ``mpi_worker.py`` (which checks every result against numpy in
every rank) with a timeout, so a hang fails the test instead of stalling the run.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from conftest import WORKER, run_job


def ok(proc: subprocess.CompletedProcess[str], np_: int) -> None:
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, report
    for rank in range(np_):
        assert f"OK rank {rank}" in proc.stdout, report


@pytest.mark.parametrize("net", ["shm", "tcp"])
def test_two_ranks_all_dtypes_and_sizes(need_mpi: None, net: str) -> None:
    """0, 1, 1001 elements and 1 MiB of every dtype (all ops), 64 MiB of float32, uint8, bfloat16."""
    ok(run_job(2, [str(WORKER), "suite", "--big"], timeout=180, net=net), 2)


def test_four_ranks_oversubscribed(need_mpi: None) -> None:
    ok(run_job(4, [str(WORKER), "suite"], timeout=120, oversubscribe=True), 4)


def test_mismatched_recv_and_allreduce_raise(need_mpi: None) -> None:
    proc = run_job(2, [str(WORKER), "mismatch"], timeout=60)
    ok(proc, 2)
    assert "recv expected float32[5] from rank 0, but rank 0 sent float32[4]" in proc.stdout
    assert "but rank 0 sent int32[4]" in proc.stdout
    assert "recv expected float32[4] from rank 0, but rank 0 sent float32[262144]" in proc.stdout  # more than asked
    assert "recv expected float32[0] from rank 0, but rank 0 sent float32[2]" in proc.stdout


def test_messages_of_several_chunks(need_mpi: None) -> None:
    proc = run_job(2, [str(WORKER), "chunks"], timeout=60)
    ok(proc, 2)
    assert proc.stdout.count("expected error") == 3, proc.stdout


def test_headers_only_when_they_change(need_mpi: None) -> None:
    """Data sent without its header (the one sent last applies): received, refused with the right message and
    drained; a refused recv(out=) leaves out's values and version as they were."""
    proc = run_job(2, [str(WORKER), "headers"], timeout=60)
    ok(proc, 2)
    assert "recv expected int32[262144] from rank 0, but rank 0 sent float32[262144]" in proc.stdout, proc.stdout
    assert "recv expected float32[262144] from rank 0, but rank 0 sent int32[262144]" in proc.stdout, proc.stdout


@pytest.mark.parametrize("net", ["shm", "tcp"])
def test_messages_keep_their_order(need_mpi: None, net: str) -> None:
    """While a recv of a small tensor waits, a large message sent before a small one is refused (it came first) and
    the small one is the next recv's; small, large, small arrive in that order (review: a receive posted for small
    messages only took a small one sent after a large one)."""
    proc = run_job(2, [str(WORKER), "order"], timeout=60, net=net)
    ok(proc, 2)
    assert proc.stdout.count("expected error") == 1, proc.stdout


@pytest.mark.parametrize("net", ["shm", "tcp"])
def test_mixed_sizes_keep_their_order(need_mpi: None, net: str) -> None:
    """120 messages of mixed sizes and kinds (one-message small ones, header-and-data large ones, large ones without
    a header, empty ones), sender and receiver pausing at random points: each receive (recv, recv(out=), irecv,
    irecvs waited in reverse) gets its own message."""
    ok(run_job(2, [str(WORKER), "mixed"], timeout=90, net=net), 2)


@pytest.mark.parametrize("net", ["shm", "tcp"])
def test_small_messages_taken_early_wait_their_turn(need_mpi: None, net: str) -> None:
    """A recv of a small tensor posts a receive for any small message; one it takes before a large message sent
    earlier (queued before the recv; arriving while the recv waits; taken while the posted receive is cancelled;
    taken in an interrupted wait) is delivered in its turn, after the large one is refused."""
    proc = run_job(2, [str(WORKER), "parked"], timeout=90, net=net)
    ok(proc, 2)
    assert proc.stdout.count("expected error") == 3, proc.stdout


@pytest.mark.parametrize("net", ["shm", "tcp"])
def test_large_messages_land_in_pooled_results(need_mpi: None, net: str) -> None:
    """A large recv posts its receive into a pooled result before the message arrives (its header is the one sent
    last): the data lands (also while the last result is held); a small message or a new header in its place is
    refused and the next message arrives intact; an interrupted wait loses no message."""
    proc = run_job(2, [str(WORKER), "landing"], timeout=90, net=net)
    ok(proc, 2)
    assert proc.stdout.count("expected error") == 2, proc.stdout


def test_small_sends_do_not_wait_for_their_receive(need_mpi: None) -> None:
    """Both ranks send 8 KiB messages first (a send that waited for its receive would deadlock them), and a
    close completes the sends still on their way."""
    ok(run_job(2, [str(WORKER), "small-sends"], timeout=60), 2)


def test_a_tensor_sent_again_carries_its_new_values(need_mpi: None) -> None:
    """A tensor sent again after a write into its memory (in place, or an assign) sends the new values, small (a
    staging buffer) or large (a persistent send, one per tensor: two tensors sent in turn each send their own)."""
    ok(run_job(2, [str(WORKER), "resend"], timeout=60), 2)


NONBLOCKING_ERRORS = ["allreduce needs the same shape, dtype and op on every rank, got rank 0: float32[3] sum; "
                      "rank 1: float32[4] sum",
                      "broadcast needs the same shape, dtype and root on every rank, got rank 0: float32[2] root 0; "
                      "rank 1: int32[2] root 0",
                      "recv expected float32[4] from rank 0, but rank 0 sent int32[4]",
                      "was already waited for; wait() returns its result once"]


@pytest.mark.parametrize("np_", [2, 4])
def test_nonblocking_calls_and_broadcast(need_mpi: None, np_: int) -> None:
    """isend/irecv both ways at once, receives and allreduces waited in reverse order, irecv/iallreduce into
    tensors that a realize waits for, broadcast from the first and last rank, pooled receive tensors never
    reused while referenced; mismatches raise on every rank and waiting twice is refused."""
    proc = run_job(np_, [str(WORKER), "nonblocking"], timeout=120, oversubscribe=np_ > 2)
    ok(proc, np_)
    for text in NONBLOCKING_ERRORS:
        assert text in proc.stdout, proc.stdout


@pytest.mark.parametrize("how", ["kill", "exit", "hang"])
def test_dead_or_stuck_peer_ends_the_job(need_mpi: None, how: str) -> None:
    """Rank 1 is killed, exits, or hangs while rank 0 waits for it: the job ends non-zero, naming rank 1."""
    start = time.monotonic()
    proc = run_job(2, [str(WORKER), f"die-{how}"], timeout=60, env={"TG_TEST_TIMEOUT": "5"})
    elapsed = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert elapsed < 45, f"took {elapsed:.0f} s"
    if how == "hang":  # our deadline fires, names the peer, and the exit aborts the job
        assert "CommTimeout" in out and "rank 1 did not answer" in out, out
        assert "aborts the MPI job" in out, out
    else:  # Open MPI notices the dead process and ends the job, naming it ("process rank 1 ... exited on
        # signal 9", or for a non-zero exit the process name [[job,1],1], whose last number is the rank)
        assert re.search(r"rank 1\b|\[\[\d+,\d+\],1\]", out), out


def test_stuck_peer_in_a_nonblocking_collective_ends_the_job(need_mpi: None) -> None:
    """Rank 1 hangs while rank 0 waits on an iallreduce handle: CommTimeout after the transport timeout, then the
    exit aborts the whole job."""
    start = time.monotonic()
    proc = run_job(2, [str(WORKER), "die-hang"], timeout=60, env={"TG_TEST_TIMEOUT": "5", "TG_TEST_COLLECTIVE": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert time.monotonic() - start < 45
    assert "CommTimeout" in out and "allreduce (sum) of float32[4] did not complete within 5 s" in out, out
    assert "aborts the MPI job" in out, out


def test_without_mpirun_is_a_world_of_one(need_mpi: None) -> None:
    code = """
import numpy as np, tgcore
from tgcore import Tensor
tr = tgcore.transport("mpi", timeout=10)
assert (tr.rank, tr.world_size) == (0, 1), tr
x = np.arange(5, dtype=np.int32)
assert (tr.allreduce(Tensor(x), "max").numpy() == x).all()
tr.barrier()
try:
    tr.send(Tensor(x), 0)
except ValueError as e:
    print("ERR", e)
tr.close()
try:
    tr.barrier()
except Exception as e:
    print("CLOSED", type(e).__name__)
print("DONE")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "ERR dst=0 is this process's own rank" in proc.stdout
    assert "CLOSED TransportClosed" in proc.stdout
    assert "DONE" in proc.stdout

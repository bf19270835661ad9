"""Scenarios of the MPI test worker (``mpi_worker.py parked|landing``) about the transport's posted receives: small
messages a receive took before their turn set aside for the receive whose turn it is, large ones received into
pooled results by a receive posted before they arrive, and waits interrupted around them (the communicator and
requests wrapped so a probe is slow or a test raises ``KeyboardInterrupt``)."""
from __future__ import annotations

import time

from mpi_worker import ONE_MIB, check, data, expect_error
from tg_mlx_rdma import PeerMismatch

from tgcore import Tensor


class _SlowProbe:
    """The transport's communicator, whose ``Iprobe`` first sleeps (the messages sent meanwhile are all there when
    it looks: a small one taken by the receive a waiting recv posted, and a larger one before or after it), then
    answers, or raises ``KeyboardInterrupt`` (an interrupted wait) when ``interrupt`` is set."""

    def __init__(self, comm, interrupt: bool = False) -> None:  # noqa: ANN001
        self._comm, self.interrupt = comm, interrupt

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._comm, name)

    def Iprobe(self, *args):  # noqa: ANN002, ANN201, N802
        time.sleep(0.3)
        _take_in(self._comm)
        if self.interrupt:
            raise KeyboardInterrupt
        return self._comm.Iprobe(*args)


class _InterruptAfterTest:
    """A posted receive whose ``Test`` raises ``KeyboardInterrupt`` right after the first test that completes it
    (a signal arriving between the receive's completion and the transport seeing it)."""

    def __init__(self, req) -> None:  # noqa: ANN001
        self.req, self.armed = req, True

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.req, name)

    def __ne__(self, other) -> bool:  # noqa: ANN001
        return bool(self.req != other)  # (a completed receive is inactive: REQUEST_NULL)

    def Test(self, *args):  # noqa: ANN002, ANN201, N802
        done = self.req.Test(*args)
        if done and self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return done


def _take_in(comm) -> None:  # noqa: ANN001
    """Let MPI take in the messages that arrived (matching a posted receive, or queued): it does so inside calls,
    a few at a time; a probe for a tag nobody sends keeps it going."""
    for _ in range(200):
        comm.Iprobe(0, 0x7400)


def parked(tr) -> None:
    """A recv waiting for a small message posts a receive for any small one; when that takes a small message
    before a larger one sent earlier (the recv asked for the wrong thing), the small one is set aside and is the
    next recv's, and the larger one is refused. Three ways: everything queued before the recv; sent while the
    recv waits in a (slow) probe, larger-then-small and small-then-larger; and a wait interrupted after the
    posted receive took the message (the next recv gets it)."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if tr.rank > 1:
        for _ in range(5):
            comm.Barrier()
        return
    n = ONE_MIB // 4
    small = [data(0, "float32", 1000, seed) for seed in range(8)] + [data(0, "float32", 1000, 10)]
    large = data(0, "float32", n, 9)
    sends = [[large, small[0], small[1], large, small[2]],  # 1: all queued before the recvs
             [large, small[3]], [small[4], large, small[5]],  # 2: while the first recv waits in the slow probe
             [small[6]],  # 3: while the recv waits in an interrupted probe
             [small[8]]]  # 4: interrupted just after the posted receive took it
    if tr.rank == 0:
        tr.send(Tensor(small[7]), 1)  # (a recv with the same arguments before: the next ones take the fast path)
        for group in sends:
            comm.Barrier()
            time.sleep(0.1)
            # (a large send waits for its receive: isend, so the small ones after it go out at once)
            handles = [tr.isend(Tensor(a), 1) for a in group]
            for h in handles:
                h.wait()
        return
    check(tr.recv(1000, "float32", 0).numpy(), small[7], "a small message")
    comm.Barrier()
    time.sleep(0.5)  # 1: all there; a recv of a small one refuses the large one, the next takes the one set aside
    _take_in(tr._comm)
    for want in ([small[0], small[1]], [small[2]]):  # (the second large one comes without its header)
        msg = expect_error(PeerMismatch, ("float32[1000]", f"float32[{n}]"), lambda: tr.recv(1000, "float32", 0))
        print(f"rank 1 expected error: {msg}")
        for a in want:
            check(tr.recv(1000, "float32", 0).numpy(), a, "a small message set aside")
    real = tr._comm
    tr._comm = _SlowProbe(real)
    try:
        comm.Barrier()  # 2: large, small
        msg = expect_error(PeerMismatch, ("float32[1000]", f"float32[{n}]"), lambda: tr.recv(1000, "float32", 0))
        print(f"rank 1 expected error: {msg}")
        check(tr.recv(1000, "float32", 0).numpy(), small[3], "the small message after a refused large one")
        comm.Barrier()  # small, large, small
        check(tr.recv(1000, "float32", 0).numpy(), small[4], "a small message taken by the posted receive")
        check(tr.recv(n, "float32", 0).numpy(), large, "the large message after it")
        into = Tensor.empty(1000, dtype="float32")
        check(tr.recv(1000, "float32", 0, out=into).numpy(), small[5], "the small message after that")
        tr._comm = _SlowProbe(real, interrupt=True)
        comm.Barrier()  # 3: interrupted
        expect_error(KeyboardInterrupt, (), lambda: tr.recv(1000, "float32", 0))
        tr._comm = real
        check(tr.recv(1000, "float32", 0).numpy(), small[6], "the message of an interrupted recv")
        tr._posted[0] = _InterruptAfterTest(tr._posted[0])
        comm.Barrier()  # 4: interrupted as the posted receive completes (review: its message was lost)
        expect_error(KeyboardInterrupt, (), lambda: tr.recv(1000, "float32", 0))
        tr._posted[0] = tr._posted[0].req
        check(tr.recv(1000, "float32", 0).numpy(), small[8], "the message taken as its recv was interrupted")
    finally:
        tr._comm = real


class _Interrupting:
    """The transport's communicator, whose receives of any tag (a large recv's posted receive) are interrupted: their
    ``Test`` raises ``KeyboardInterrupt`` right after the test that completes them (``after``) or at the first test,
    before it looks (the receive is still under way)."""

    def __init__(self, comm, after: bool) -> None:  # noqa: ANN001
        self._comm, self.after = comm, after

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._comm, name)

    def Irecv(self, buf, source, tag):  # noqa: ANN001, ANN201, N802
        return self._interrupting(self._comm.Irecv(buf, source, tag), tag)

    def Recv_init(self, buf, source, tag):  # noqa: ANN001, ANN201, N802
        return self._interrupting(self._comm.Recv_init(buf, source, tag), tag)  # (persistent: each Start arms it)

    def _interrupting(self, req, tag):  # noqa: ANN001, ANN201
        from mpi4py import MPI
        if tag != MPI.ANY_TAG:
            return req
        return _InterruptAfterTest(req) if self.after else _InterruptBeforeTest(req)


class _InterruptBeforeTest:
    """A receive whose first ``Test`` raises ``KeyboardInterrupt`` without looking (an interrupted wait)."""

    def __init__(self, req) -> None:  # noqa: ANN001
        self.req, self.armed = req, True

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self.req, name)

    def __ne__(self, other) -> bool:  # noqa: ANN001
        return bool(self.req != other)

    def Start(self) -> None:  # noqa: N802
        self.armed = True
        self.req.Start()

    def Test(self, *args):  # noqa: ANN002, ANN201, N802
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return self.req.Test(*args)


def landing(tr) -> None:
    """Large recvs without out= whose header is the one the sender sent last take the next message by a receive
    posted into a pooled result before it arrives: the data (also while the last result is held), a small message
    and a new header in its place (refused; the new header's data is drained), a wait interrupted after the
    receive took the message (the next recv gets it) and before (nothing taken)."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if tr.rank > 1:
        comm.Barrier()
        return
    n = ONE_MIB // 4
    a = [data(0, "float32", n, seed) for seed in range(8)]
    small, other = data(0, "float32", 10, 8), data(0, "int32", n, 9)
    if tr.rank == 0:
        for x in [a[0], a[1], a[2], small, a[3], other, a[4], a[5]]:
            tr.send(Tensor(x), 1)
        comm.Barrier()
        for x in a[6:] + a[:4]:
            tr.send(Tensor(x), 1)
        return
    check(tr.recv(n, "float32", 0).numpy(), a[0], "the first message (header, then data)")
    pooled = tr._pool.hits + tr._pool.misses
    first = tr.recv(n, "float32", 0)
    second = tr.recv(n, "float32", 0)  # (the first one held: into another pooled buffer)
    check(first.numpy(), a[1], "a message landed in a pooled result")
    check(second.numpy(), a[2], "a message landed while the last result is held")
    for words in (("float32[262144]", "float32[10]"), ()):
        if words:
            print(f"rank 1 expected error: {expect_error(PeerMismatch, words, lambda: tr.recv(n, 'float32', 0))}")
        else:
            check(tr.recv(n, "float32", 0).numpy(), a[3], "a message landed after a refused small one")
    words = ("expected float32[262144]", "sent int32[262144]")
    print(f"rank 1 expected error: {expect_error(PeerMismatch, words, lambda: tr.recv(n, 'float32', 0))}")
    check(tr.recv(n, "float32", 0).numpy(), a[4], "the message after a refused new header and its drained data")
    real = tr._comm
    try:  # (the persistent receives into pooled results are made again through the interrupting communicator)
        tr._free_land_inits()
        tr._comm = _Interrupting(real, after=True)
        expect_error(KeyboardInterrupt, (), lambda: tr.recv(n, "float32", 0))
        tr._comm = real
        tr._free_land_inits()
        check(tr.recv(n, "float32", 0).numpy(), a[5], "the message taken as its recv was interrupted")
        tr._free_land_inits()
        tr._comm = _Interrupting(real, after=False)
        expect_error(KeyboardInterrupt, (), lambda: tr.recv(n, "float32", 0))
    finally:
        tr._comm = real
        tr._free_land_inits()
    comm.Barrier()
    check(tr.recv(n, "float32", 0).numpy(), a[6], "a message after an interrupted recv that took nothing")
    check(tr.recv(n, "float32", 0).numpy(), a[7], "the next one")
    assert tr._pool.hits + tr._pool.misses > pooled + 6, "the recvs did not take pooled results"
    for k in range(4):  # (an assign into a result: its node names a copy, the pool gives its buffer up)
        got = tr.recv(n, "float32", 0)
        got.assign(got + 1).realize()
        check(got.numpy(), a[k] + 1, "a result assigned into")
        del got
    in_pool = {id(p) for entries in tr._pool._free.values() for p in entries}
    assert all(id(p) in in_pool for _, p in tr._land_inits), "a persistent receive holds a buffer the pool gave up"

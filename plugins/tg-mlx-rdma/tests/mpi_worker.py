"""One rank of an MPI test job: ``mpirun -np N python mpi_worker.py SCENARIO [--big]``.

Every rank builds every rank's input from a seed (numpy), so each can compute the expected
result of a send or an allreduce with numpy alone and compare it with what the transport gave.
Prints ``OK rank R`` and exits 0 when every check passed; anything else is a failure.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
from tg_mlx_rdma import CommTimeout, PeerMismatch

import tgcore
from tgcore import Tensor

DTYPES = ["float32", "float16", "int32", "int64", "uint8", "bool", "bfloat16"]
ONE_MIB, BIG = 1 << 20, 64 << 20
NP_DTYPES = {"bfloat16": np.float32}  # values of bfloat16 tensors come back as float32 from numpy()


def data(rank: int, dtype: str, n: int, seed: int) -> np.ndarray:
    """Rank ``rank``'s input: integer-valued, so float sums and products over <= 4 ranks are exact."""
    np_dt = NP_DTYPES.get(dtype, dtype)
    if n > ONE_MIB:  # big: a cheap pattern (random numbers for 64 MiB take seconds)
        period = (np.arange(9 * 1024) * (2 * rank + 3) + seed) % 9 - 4
        return np.resize((period > 0) if dtype == "bool" else period.astype(np_dt), n)
    rng = np.random.default_rng([seed, rank, DTYPES.index(dtype)])
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype in ("int32", "int64", "uint8"):  # the full range: sums and products wrap, as in numpy
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return rng.integers(-4, 5, n).astype(np_dt)


def to_tensor(a: np.ndarray, dtype: str) -> Tensor:
    """bfloat16 tensors are made from their storage: the top 16 bits of the (exact) float32 values."""
    if dtype == "bfloat16":
        bits = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return Tensor(np.ascontiguousarray(bits)).bitcast(dtype)
    return Tensor(a, dtype=dtype)


def to_numpy(t: Tensor) -> np.ndarray:
    """bfloat16 values are read from their storage: bits << 16 is the float32 value."""
    if t.dtype.name == "bfloat16":
        return (t.bitcast("uint16").numpy().astype(np.uint32) << 16).view(np.float32)
    return t.numpy()


def n_elements(dtype: str, nbytes: int) -> int:
    itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    return max(nbytes // itemsize, 0)


def reference(arrays: list[np.ndarray], op: str, dtype: str) -> np.ndarray:
    if dtype == "bool":
        fn = np.logical_or if op in ("sum", "max") else np.logical_and
    else:
        fn = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[op]
    out = arrays[0].copy()
    for a in arrays[1:]:
        fn(out, a, out=out)  # in the arrays' dtype: integers wrap
    return out


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))[:5] if got.shape == want.shape else []
        raise AssertionError(f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}; first bad {bad}")


def exchange(tr, dtype: str, n: int, seed: int) -> None:
    """Pairs (0,1), (2,3), ...: the even rank sends first, then the odd one answers; both check."""
    me, peer = tr.rank, tr.rank ^ 1
    if peer >= tr.world_size:
        return
    shape = (n,) if n % 2 or n < 4 else (2, n // 2)  # some 2-d tensors too
    mine = to_tensor(data(me, dtype, n, seed).reshape(shape), dtype)
    theirs = data(peer, dtype, n, seed).reshape(shape)
    for turn in (0, 1):
        if (me % 2) == turn:
            tr.send(mine, peer)
        else:
            check(to_numpy(tr.recv(shape, dtype, peer)), theirs, f"recv {dtype}{shape} from rank {peer}")


def exchange_into(tr) -> None:
    """recv(out=...): pairs as in ``exchange``; the odd rank receives into one tensor twice (values computed from
    its old contents are not reused), and bad ``out`` tensors are refused without consuming the message."""
    me, peer = tr.rank, tr.rank ^ 1
    if peer >= tr.world_size:
        return
    n = ONE_MIB // 4 + 3
    rounds = [data(me - me % 2, "int32", n, seed) for seed in (7, 8)]  # the even rank's data, known to both
    # one message each: the fast path
    small = [data(me - me % 2, "float32", 1000, seed).reshape(5, 200) for seed in range(4)]
    if me % 2 == 0:
        for a in rounds + small:
            tr.send(Tensor(a), peer)
        return
    out = Tensor.empty(n, dtype="int32")
    for shape, dtype, bad in (((n,), "int32", Tensor.empty(n + 1, dtype="int32")),
                              ((n,), "int32", Tensor.empty(n, dtype="float32")),
                              ((n,), "int32", Tensor(np.zeros((2, n), np.int32))[1])):  # a view
        try:
            tr.recv(shape, dtype, peer, out=bad)
        except ValueError as e:
            assert "out" in str(e), str(e)
        else:
            raise AssertionError(f"recv into {bad.dtype.name}{list(bad.shape)} did not fail")
    doubled_before = None
    lazy_double = out * 2  # keeps the node alive, so the core may cache its value between the rounds
    for i, want in enumerate(rounds):
        got = tr.recv((n,), "int32", peer, out=out)
        assert got is out, "recv(out=) must return out"
        check(got.numpy(), want, f"recv(out=) round {i}")
        doubled = (out * 2).numpy()
        check(doubled, want * 2, f"a value computed from out after recv(out=) round {i}")
        if doubled_before is not None:
            assert not np.array_equal(doubled, doubled_before)
        doubled_before = doubled
    del lazy_double
    into = Tensor.empty(5, 200, dtype="float32")
    for i, want in enumerate(small):
        before = into + 1 if i == 2 else None  # a lazy graph built before the write keeps the old values
        got = tr.recv((5, 200), "float32", peer, out=into)
        assert got is into, "recv(out=) must return out"
        check(got.numpy(), want, f"small recv(out=) round {i}")
        if before is not None:
            check(before.numpy(), small[1] + 1, "a value built from out before a recv(out=)")


BIG_DTYPES = ["float32", "uint8", "bfloat16"]  # 64 MiB of every dtype would take minutes


def suite(tr, big: bool) -> None:
    sizes = [0, 1, 1001, ONE_MIB] + ([BIG] if big else [])
    for seed, nbytes in enumerate(sizes):
        for dtype in DTYPES if nbytes <= ONE_MIB else BIG_DTYPES:
            n = nbytes if nbytes < 2 or nbytes == 1001 else n_elements(dtype, nbytes)
            exchange(tr, dtype, n, seed)
            ops = ["sum", "max", "min", "prod"] if nbytes <= ONE_MIB else ["sum"]
            for op in ops:
                x = to_tensor(data(tr.rank, dtype, n, seed), dtype)
                want = reference([data(r, dtype, n, seed) for r in range(tr.world_size)], op, dtype)
                check(to_numpy(tr.allreduce(x, op)), want, f"allreduce {op} {dtype}[{n}]")
    # every size class of a message, 1 byte to 16 MiB: the header packed in front of the data (up to the mpi
    # transport's SMALL = 16 KiB, received straight into a pooled result) and the data then the header
    for seed, nbytes in enumerate([1, 4095, 4096, 16383, 16384, 16385, 65536, ONE_MIB + 1, 16 * ONE_MIB]):
        exchange(tr, "uint8", nbytes, 100 + seed)
    for dtype in ("float32", "bfloat16", "int64", "bool"):
        for nbytes in (4096, 16384, 16384 + 8):
            exchange(tr, dtype, n_elements(dtype, nbytes), 120)
    exchange_into(tr)
    tr.barrier()
    # a tensor that is a view (transpose) of a realized one is sent as its values
    if tr.world_size >= 2 and tr.rank < 2:
        base = np.arange(12, dtype=np.float32).reshape(3, 4)
        if tr.rank == 0:
            tr.send(Tensor(base).T, 1)
        else:
            check(tr.recv((4, 3), "float32", 0).numpy(), base.T.copy(), "recv of a transposed tensor")


# (what rank 0 sends, what rank 1 asks for): fewer bytes, same bytes, more bytes (small and large
# messages: a receive that is too short must not be overrun), nothing, something for nothing
MISMATCHES = [(np.arange(4, dtype=np.float32), ((5,), "float32")),
              (np.arange(4, dtype=np.int32), ((4,), "float32")),
              (np.arange(6, dtype=np.float32), ((5,), "float32")),
              (np.arange(1 << 18, dtype=np.float32), ((4,), "float32")),
              (np.arange(1 << 18, dtype=np.float32), (((1 << 18) - 1,), "float32")),
              (np.arange(4096, dtype=np.int32), ((4096,), "float32")),  # a packed message's size, other dtype
              (np.arange(4096, dtype=np.float32), ((4097,), "float32")),  # packed, asked for one over SMALL
              (np.arange(4097, dtype=np.float32), ((4096,), "float32")),  # over SMALL, asked for a packed size
              (np.zeros(0, dtype=np.float32), ((2,), "float32")),
              (np.arange(2, dtype=np.float32), ((0,), "float32"))]


def mismatch(tr) -> None:
    if tr.rank == 0:
        for sent, _ in MISMATCHES:
            tr.send(Tensor(sent), 1)
        tr.send(Tensor(np.arange(3, dtype=np.float32)), 1)
    elif tr.rank == 1:
        for sent, (shape, dtype) in MISMATCHES:
            words = (f"{dtype}{list(shape)}", f"{sent.dtype}{list(sent.shape)}")
            try:
                tr.recv(shape, dtype, 0)
            except PeerMismatch as e:
                msg = str(e)
                assert all(w in msg for w in words) and "rank 0" in msg, msg
                print(f"rank 1 expected error: {msg}")
            else:
                raise AssertionError(f"recv of {dtype}{shape} did not fail")
        check(tr.recv((3,), "float32", 0).numpy(), np.arange(3, dtype=np.float32), "recv after mismatches")
    n = 4 if tr.rank == 0 else 5
    try:
        tr.allreduce(Tensor(np.ones(n, dtype=np.float32)))
    except PeerMismatch as e:
        assert "float32[4]" in str(e) and "float32[5]" in str(e), str(e)
        print(f"rank {tr.rank} expected error: {e}")
    else:
        raise AssertionError("allreduce with different shapes did not fail")
    try:
        tr.allreduce(Tensor(np.ones(2, dtype=np.float32)), op="mean")
    except ValueError as e:
        assert "mean" in str(e)
    else:
        raise AssertionError("op='mean' did not fail")
    tr.barrier()


def chunks(tr) -> None:
    """Messages of several chunks (CHUNK made small: the real one is 1 GiB): matching, mismatched in either
    direction (the extra chunks are drained: the next message still arrives intact), and a 1-chunk message."""
    import tg_mlx_rdma.mpi
    tg_mlx_rdma.mpi.CHUNK = 1000
    tg_mlx_rdma.mpi.SMALL = 256  # (so every message here is a large one: header, then data in chunks)
    # (sent, asked) float32 elements; a size sent again goes without its header, also when the recv asks for another
    plan = [(2500, 2500), (2500, 1500), (1500, 2500), (250, 250), (1001, 1001), (1001, 1001), (1001, 250)]
    for seed, (sent, asked) in enumerate(plan):
        a = data(0, "float32", sent, seed)
        if tr.rank == 0:
            tr.send(Tensor(a), 1)
        elif tr.rank == 1:
            try:
                got = tr.recv((asked,), "float32", 0)
            except PeerMismatch as e:
                assert sent != asked and f"float32[{sent}]" in str(e), str(e)
                print(f"rank 1 expected error: {e}")
            else:
                assert sent == asked, f"recv of {asked} elements from a send of {sent} did not fail"
                check(got.numpy(), a, f"recv of {sent} elements in chunks")
    tr.barrier()


def headers(tr) -> None:
    """A large message's header goes only when it changes: receives of data sent without one (blocking, into out=,
    non-blocking), mismatches found on either kind of message (the data is drained, the next message is intact),
    and a recv(out=) that meets a mismatch leaves out as it was (values and version)."""
    if tr.rank > 1:
        return
    n = 1 << 18
    a = np.arange(n, dtype=np.float32)
    c = np.arange(n, dtype=np.int32) * 3
    small = np.arange(10, dtype=np.float32)
    plan = [(a, a), (a, a), (small, small), (a, a), (a, c), (c, a), (a, a), (a, a), (a, a)]  # (sent, asked)
    if tr.rank == 0:
        for sent, _ in plan:
            tr.send(Tensor(sent), 1)
        return
    realization = tgcore.realization
    outs = {"float32": Tensor(np.full(n, -1, np.float32)).realize(),
            "int32": Tensor(np.full(n, -1, np.int32)).realize()}
    for i, (sent, asked) in enumerate(plan[:7]):
        dtype = str(asked.dtype)
        out = outs[dtype] if asked.size == n and (i % 2 or sent is not asked) else None
        if sent is asked:
            got = tr.recv(asked.shape, dtype, 0, out=out)
            assert out is None or got is out
            check(got.numpy(), sent, f"message {i}")
            continue
        before = out.numpy().copy()
        version = realization.version(realization.buffer_of(out))
        msg = expect_error(PeerMismatch, (f"{dtype}[{n}]", f"{sent.dtype}[{n}]"),
                           lambda shape=asked.shape, dtype=dtype, out=out: tr.recv(shape, dtype, 0, out=out))
        print(f"rank 1 expected error: {msg}")
        check(out.numpy(), before, f"out after the mismatch of message {i}")
        assert realization.version(realization.buffer_of(out)) == version, "a refused message announced a write"
    first, second = tr.irecv((n,), "float32", 0), tr.irecv((n,), "float32", 0, out=outs["float32"])
    check(second.wait().numpy(), a, "the second of two irecvs, waited first")
    check(first.wait().numpy(), a, "the first of two irecvs")


def expect_error(kind: type, words: tuple[str, ...], fn) -> str:  # noqa: ANN001
    try:
        fn()
    except kind as e:
        msg = str(e)
        assert all(w in msg for w in words), msg
        return msg
    raise AssertionError(f"expected {kind.__name__} with {words}")


def nonblocking(tr) -> None:
    """isend/irecv/iallreduce handles and broadcast, every result against numpy; handles waited out of order."""
    me, world = tr.rank, tr.world_size
    peer = me ^ 1
    paired = peer < world
    # 1. both ranks of a pair isend and irecv at once (blocking sends would deadlock for large messages), waited
    #    receive first; sizes around the pool's limit and over it
    for seed, (dtype, n) in enumerate([("float32", 1), ("int64", 1001), ("bfloat16", ONE_MIB // 2),
                                       ("uint8", 5 * ONE_MIB), ("float16", 0)]):
        if not paired:
            break
        hs = tr.isend(to_tensor(data(me, dtype, n, seed), dtype), peer)
        hr = tr.irecv((n,), dtype, peer)
        check(to_numpy(hr.wait()), data(peer, dtype, n, seed), f"irecv {dtype}[{n}]")
        assert hs.wait() is None
    # 2. several receives from one rank, waited in reverse order: they match the sends in the order made
    shapes = [((3, 4), "float32"), ((7,), "int32"), ((2, 2, 2), "float64"), ((1000,), "float32")]
    if paired and me % 2 == 0:
        sends = [tr.isend(Tensor(np.full(shape, i + 1, dtype)), peer) for i, (shape, dtype) in enumerate(shapes)]
        for h in sends[::-1]:
            h.wait()
    elif paired:
        recvs = [tr.irecv(shape, dtype, peer) for shape, dtype in shapes]
        for i in reversed(range(len(recvs))):
            shape, dtype = shapes[i]
            check(recvs[i].wait().numpy(), np.full(shape, i + 1, dtype), f"out-of-order irecv {i}")
    # 3. irecv(out=t): a realize reading t waits for the data without wait() being called
    if paired:
        n = 4099
        out = Tensor.empty(n, dtype="float32")
        h_out = tr.irecv((n,), "float32", peer, out=out)
        tr.send(Tensor(data(me, "float32", n, 42)), peer) if me % 2 == 0 else None
        check((out + 1).numpy(), data(peer, "float32", n, 42) + 1, "a read of irecv(out=) before wait")
        if me % 2 == 1:
            tr.send(Tensor(data(me, "float32", n, 42)), peer)
        assert h_out.wait() is out
        check(out.numpy(), data(peer, "float32", n, 42), "irecv(out=) after wait")
        msg = expect_error(RuntimeError, ("already waited",), h_out.wait)
        print(f"rank {me} expected error: {msg}")
    # 4. received tensors the user keeps (or built lazy graphs or realized slices from) are never reused by the
    #    pool; dropped ones are
    if paired:
        n, rounds = 1024, 9
        kept, lazies, slices = [], [], []
        for i in range(rounds):
            if me % 2 == 0:
                tr.send(Tensor(np.full(n, i, np.float32)), peer)
            else:
                t = tr.recv((n,), "float32", peer)
                if i % 3 == 0:
                    kept.append((i, t))
                elif i % 3 == 1:
                    lazies.append((i, t * 2))
                else:
                    slices.append((i, t[2:5].realize()))  # (a view of the received memory)
                del t
        for i, t in kept:
            check(t.numpy(), np.full(n, i, np.float32), f"kept received tensor {i}")
        for i, t in lazies:
            check(t.numpy(), np.full(n, 2 * i, np.float32), f"lazy graph of received tensor {i}")
        for i, t in slices:
            check(t.numpy(), np.full(3, i, np.float32), f"realized slice of received tensor {i}")
        hits = tr._pool.hits
        for i in range(4):
            if me % 2 == 0:
                tr.send(Tensor(np.full(n, i, np.float32)), peer)
            else:
                check(tr.recv((n,), "float32", peer).numpy(), np.full(n, i, np.float32), f"pooled receive {i}")
        if me % 2:
            assert tr._pool.hits >= hits + 3, (hits, tr._pool.hits)  # dropped results' memory is reused
    # 5. several iallreduces under way, waited in reverse order; in place (out= the input)
    plan = [("float32", "sum", 1001), ("int32", "max", 7), ("float16", "prod", 33), ("bool", "min", 64),
            ("int64", "sum", ONE_MIB // 8)]
    hs = [(dtype, op, n, tr.iallreduce(to_tensor(data(me, dtype, n, 50 + i), dtype), op))
          for i, (dtype, op, n) in enumerate(plan)]
    for i in reversed(range(len(hs))):
        dtype, op, n, h = hs[i]
        want = reference([data(r, dtype, n, 50 + i) for r in range(world)], op, dtype)
        check(to_numpy(h.wait()), want, f"iallreduce {op} {dtype}[{n}]")
    g = Tensor(data(me, "float32", 4096, 60)).realize()
    h = tr.iallreduce(g, "sum", out=g)
    doubled = g * 2  # read after the write was registered: waits for it
    want = reference([data(r, "float32", 4096, 60) for r in range(world)], "sum", "float32")
    check(doubled.numpy(), want * 2, "a read of iallreduce(out=) before wait")
    assert h.wait() is g
    check(g.numpy(), want, "in-place iallreduce")
    # 6. broadcast from the first and the last rank, into a new tensor and into out=
    for root in (0, world - 1):
        x = to_tensor(data(me, "bfloat16", 3000, root), "bfloat16")
        got = tr.broadcast(x, root)
        check(to_numpy(got), data(root, "bfloat16", 3000, root), f"broadcast from rank {root}")
        dest = Tensor.empty(5, 3, dtype="int32")
        got = tr.broadcast(Tensor(np.arange(15, dtype=np.int32).reshape(5, 3) * (me + 1)), root, out=dest)
        assert (got is dest) == (me != root)
        check(got.numpy(), np.arange(15, dtype=np.int32).reshape(5, 3) * (root + 1), f"broadcast(out=) from {root}")
    # 7. errors: mismatched shapes/dtypes in collectives and receives raise on wait, everywhere; a bad root
    h = tr.iallreduce(Tensor(np.ones(3 + me, np.float32)))
    msg = expect_error(PeerMismatch, ("float32[3]", "float32[4]"), h.wait)
    print(f"rank {me} expected error: {msg}")
    msg = expect_error(PeerMismatch, ("broadcast", "int32[2]" if me else "float32[2]"),
                       lambda: tr.broadcast(Tensor(np.ones(2, np.float32 if me == 0 else np.int32)), 0))
    print(f"rank {me} expected error: {msg}")
    expect_error(ValueError, ("root=",), lambda: tr.broadcast(Tensor(np.ones(2, np.float32)), world))
    if paired:
        if me % 2 == 0:
            tr.isend(Tensor(np.ones(4, np.int32)), peer).wait()
        else:
            h = tr.irecv(4, "float32", peer)
            msg = expect_error(PeerMismatch, ("recv expected float32[4]", "sent int32[4]"), h.wait)
            print(f"rank {me} expected error: {msg}")
            expect_error(RuntimeError, ("already waited",), h.wait)
    check(tr.allreduce(Tensor(np.full(2, me, np.int64))).numpy(), np.full(2, sum(range(world)), np.int64),
          "an allreduce after the errors")
    tr.barrier()


def small_sends(tr) -> None:
    """Small sends return without waiting for their receive: ranks 0 and 1 both send first (8 KiB messages, over
    Open MPI's shared-memory eager limit), as many as the transport keeps on their way, then receive; then rank 0
    sends again and closes before rank 1 receives (close completes them, and the data arrives intact). In between,
    messages of many sizes (the persistent send requests are freed and made again)."""
    from tg_mlx_rdma.mpi import SEND_BUFFERS, SEND_INITS
    if tr.rank > 1:
        return
    peer, n = 1 - tr.rank, 2048
    for i in range(SEND_BUFFERS):
        tr.send(Tensor(np.full(n, 10 * tr.rank + i, np.float32)), peer)
    for i in range(SEND_BUFFERS):
        check(tr.recv(n, "float32", peer).numpy(), np.full(n, 10 * peer + i, np.float32), f"small send {i}")
    # more (buffer, size) pairs than the transport keeps persistent requests for: they are freed and made again
    sizes = [1 + 37 * k for k in range(2 * SEND_INITS // SEND_BUFFERS + 1)]
    for size in sizes:
        if tr.rank == 0:
            for i in range(SEND_BUFFERS):
                tr.send(Tensor(np.arange(size, dtype=np.int32) * (i + 1)), 1)
        else:
            for i in range(SEND_BUFFERS):
                check(tr.recv(size, "int32", 0).numpy(), np.arange(size, dtype=np.int32) * (i + 1), f"{size} #{i}")
    if tr.rank == 0:
        for i in range(SEND_BUFFERS):
            tr.send(Tensor(np.arange(n, dtype=np.float32) + i), 1)
    else:
        time.sleep(0.5)  # (rank 0 is in close by now)
        for i in range(SEND_BUFFERS):
            check(tr.recv(n, "float32", 0).numpy(), np.arange(n, dtype=np.float32) + i, f"send before close {i}")


def resend(tr) -> None:
    """One tensor sent again and again, its memory written in between (in place by recv(out=), or by an assign):
    every message carries the values it has when sent, from each staging buffer of small sends (a staging buffer
    does not copy a tensor again that it holds unchanged) and by the persistent send of a large one (made again for
    new memory, freed with its tensor)."""
    import gc

    from tg_mlx_rdma.mpi import SEND_BUFFERS
    if tr.rank > 1:
        return
    for n in (1000, ONE_MIB // 4):
        _resend(tr, n, SEND_BUFFERS)
    gc.collect()
    assert not tr._data_sends, "the persistent send of a tensor that is gone was kept"


def _resend(tr, n: int, buffers: int) -> None:  # noqa: ANN001
    t = Tensor(np.zeros(n, np.float32)).realize()
    other = Tensor(np.full(n, -1, np.float32)).realize()
    for k, sent in enumerate([t, other, t, other]):  # (two tensors alive, sent in turn)
        if tr.rank == 0:
            tr.send(sent, 1)
        else:
            check(tr.recv(n, "float32", 0).numpy(), np.full(n, -(k % 2), np.float32), f"{n}: in turn {k}")
    for i in range(3 * buffers):
        if tr.rank == 0:
            for _ in range(buffers + 1):  # (every staging buffer, and the first again)
                tr.send(t, 1)
            if i % 2:
                t.assign(Tensor(np.full(n, i + 1, np.float32))).realize()
            else:
                tr.recv(n, "float32", 1, out=t)  # (the same node: its memory written in place)
        else:
            for k in range(buffers + 1):
                check(tr.recv(n, "float32", 0).numpy(), np.full(n, i, np.float32), f"{n}: round {i}, message {k}")
            if not i % 2:
                tr.send(Tensor(np.full(n, i + 1, np.float32)), 0)
    # a jitted step's output: every replay writes the same memory and returns a tensor over the same node
    step = tgcore.jit(lambda x: (x * 2 + 1).contiguous())
    for i in range(2 * buffers + 1):
        if tr.rank == 0:
            tr.send(step(Tensor(np.full(n, i, np.float32)).realize()), 1)
        else:
            check(tr.recv(n, "float32", 0).numpy(), np.full(n, 2 * i + 1, np.float32), f"{n}: jitted output {i}")


def order(tr) -> None:
    """Messages are taken in the order they were sent while a recv of a small tensor waits: a large message sent
    before a small one is refused by a recv asking for the small one (and the small one is the next recv's), and
    small, large, small arrive in that order (the same for recv(out=))."""
    from mpi4py import MPI
    if tr.rank > 1:
        MPI.COMM_WORLD.Barrier()
        MPI.COMM_WORLD.Barrier()
        return
    n = ONE_MIB // 4
    small = [data(0, "float32", 1000, seed) for seed in range(4)]
    large = data(0, "float32", n, 5)
    comm = MPI.COMM_WORLD
    if tr.rank == 0:
        tr.send(Tensor(small[3]), 1)  # (a recv with the same arguments before: the next ones take the fast path)
        comm.Barrier()  # 1: a large message where a small one is asked for, sent while the recv waits
        time.sleep(0.2)
        tr.send(Tensor(large), 1)
        tr.send(Tensor(small[0]), 1)
        comm.Barrier()  # 2: small, large, small, sent while the first recv waits
        time.sleep(0.2)
        for a in (small[1], large, small[2]):
            tr.send(Tensor(a), 1)
        return
    check(tr.recv(1000, "float32", 0).numpy(), small[3], "a small message")
    comm.Barrier()
    msg = expect_error(PeerMismatch, ("float32[1000]", f"float32[{n}]"), lambda: tr.recv(1000, "float32", 0))
    print(f"rank 1 expected error: {msg}")
    check(tr.recv(1000, "float32", 0).numpy(), small[0], "the small message after a refused large one")
    comm.Barrier()
    check(tr.recv(1000, "float32", 0).numpy(), small[1], "the first small message")
    check(tr.recv(n, "float32", 0).numpy(), large, "the large message after it")
    into = Tensor.empty(1000, dtype="float32")
    check(tr.recv(1000, "float32", 0, out=into).numpy(), small[2], "the small message after that")


# (dtype, elements): small messages (header and data in one), larger ones (a header message when it changed, then
# the data) and an empty one
MIXED = [("float32", 1000), ("uint8", 37), ("float32", 0), ("int32", 20000), ("float32", 70000), ("uint8", 16384),
         ("uint8", 16385), ("int64", 3), ("float16", 9000), ("bool", 5)]


def mixed(tr) -> None:
    """120 messages of mixed sizes and kinds, sent and received with pauses at random points (so receives wait
    at different stages, or find several messages queued): each receive gets its own message, in order, through
    recv, recv(out=), an irecv waited at once, or a group of irecvs waited in reverse."""
    if tr.rank > 1:
        return
    rng = np.random.default_rng(23)
    count = 120
    plan = [MIXED[k] for k in rng.integers(0, len(MIXED), count)]
    pauses, ways = rng.random((2, count)) < 0.15, rng.integers(0, 4, count)
    if tr.rank == 0:
        for i, (dtype, n) in enumerate(plan):
            if pauses[0, i]:
                time.sleep(0.002)
            tr.send(Tensor(data(0, dtype, n, i)), 1)
        tr.recv(1, "int32", 1)  # (rank 1 got them all)
        return
    outs: dict[tuple[str, int], Tensor] = {}
    i = 0
    while i < count:
        if pauses[1, i]:
            time.sleep(0.002)
        if ways[i] == 3:  # up to three irecvs, waited last first
            group = list(range(i, min(i + 3, count)))
            handles = [tr.irecv(plan[j][1], plan[j][0], 0) for j in group]
            for j, h in reversed(list(zip(group, handles, strict=True))):
                check(h.wait().numpy(), data(0, *plan[j], j), f"message {j} {plan[j]} (irecv group)")
            i += len(group)
            continue
        dtype, n = plan[i]
        if ways[i] == 0:
            got = tr.recv(n, dtype, 0)
        elif ways[i] == 1:
            got = tr.recv(n, dtype, 0, out=outs.setdefault((dtype, n), Tensor.empty(n, dtype=dtype)))
        else:
            got = tr.irecv(n, dtype, 0).wait()
        check(got.numpy(), data(0, dtype, n, i), f"message {i} {plan[i]}")
        i += 1
    tr.send(Tensor(np.zeros(1, np.int32)), 0)


def die(tr, how: str) -> None:
    """Rank 1 goes away; rank 0 waits for a message from it."""
    if tr.rank == 1:
        time.sleep(0.5)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif how == "exit":
            os._exit(3)
        else:  # hang: alive, but never sends
            time.sleep(3600)
    if tr.rank != 1:
        try:
            if os.environ.get("TG_TEST_COLLECTIVE"):  # rank 0 (and any other) waits in a collective
                tr.iallreduce(Tensor(np.ones(4, np.float32))).wait()
            elif tr.rank == 0:
                tr.irecv((4,), "float32", 1).wait()
        except CommTimeout as e:
            assert "rank 1" in str(e), str(e)
            raise
    time.sleep(3600)  # other ranks: mpirun or the abort must end us


def main() -> int:
    scenario = sys.argv[1]
    timeout = float(os.environ.get("TG_TEST_TIMEOUT", "60"))
    tr = tgcore.transport("mpi", timeout=timeout)
    if scenario == "suite":
        suite(tr, "--big" in sys.argv)
    elif scenario == "mismatch":
        mismatch(tr)
    elif scenario == "nonblocking":
        nonblocking(tr)
    elif scenario == "chunks":
        chunks(tr)
    elif scenario == "headers":
        headers(tr)
    elif scenario == "small-sends":
        small_sends(tr)
    elif scenario == "resend":
        resend(tr)
    elif scenario == "order":
        order(tr)
    elif scenario == "mixed":
        mixed(tr)
    elif scenario in ("parked", "landing"):
        import mpi_posted  # (this directory is the script's: on sys.path)
        getattr(mpi_posted, scenario)(tr)
    elif scenario.startswith("die-"):
        die(tr, scenario[4:])
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    tr.close()
    print(f"OK rank {tr.rank}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

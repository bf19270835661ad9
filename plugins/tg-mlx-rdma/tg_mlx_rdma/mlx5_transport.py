"""The ``mlx5`` transport: the transport API over the user-space mlx5 driver (RC QPs, SEND/RECV).

In:  ``tgcore.transport("mlx5", rank=, world_size=, rendezvous="host:port")`` (or ``exchange="mpi"`` under
     mpirun), and the device: the ConnectX NIC (default; a machine without one gets the driver's
     "no PCIe" / "no ConnectX device" error) or ``model=True``: the software device model, one per process,
     connected through a fabric directory the ranks share.
Out: a ``Transport``: ``send``, ``recv``, ``allreduce``, ``barrier``, ``close``.

How: every pair of ranks gets an RC queue pair; the QP numbers and GIDs are exchanged over the TCP
rendezvous (rank 0 listens, collects one JSON line per rank and answers with the table) or MPI. A message is
the 16-word wire header then the data in ``chunk``-byte SENDs (default ``CHUNK``). Tensor memory of at least
``DIRECT_MIN`` bytes is registered with the device itself (``map_dma`` and a memory key, kept in a cache keyed by
address and size, ``MR_CACHE`` entries, least recently used destroyed first): the SENDs go straight from the
tensor and the receives straight into the result, no copy. Smaller messages, headers, and memory the hardware
access cannot map go through two registered slots per side (one copy each side). A receive posts its receive
requests when it is first in line (a chunk at a time, two ahead), so each message lands where its receive says;
a SEND the peer has no receive for yet waits in the device (RNR retry) until the peer's ``recv`` posts one or
the timeout ends it. ``allreduce`` and ``barrier`` gather to rank 0 and broadcast back.
"""
from __future__ import annotations

import json
import socket
import tempfile
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_mlx_rdma.transport import (
    DEFAULT_TIMEOUT,
    HEADER_BYTES,
    HEADER_WORDS,
    REDUCE_OPS,
    CommError,
    CommTimeout,
    Handle,
    PeerFailed,
    PeerMismatch,
    RecvPool,
    Steps,
    Transport,
    TransportClosed,
    as_dtype,
    as_shape,
    broadcast_args,
    check_header,
    describe_header,
    header_nbytes,
    make_header,
    recv_target,
    tensor_bytes,
)

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

__all__ = ["Mlx5Transport", "connect"]

CHUNK = 4 << 20  # bytes per SEND
SLOTS = 2  # send / receive slots per peer; also the SENDs / receives a message keeps posted ahead
DIRECT_MIN = 64 << 10  # tensor memory from this size is registered with the device (smaller: copied via slots)
MR_CACHE = 64  # registered memory regions kept


def connect(**options: Any) -> Mlx5Transport:
    """``tgcore.transport("mlx5", ...)``."""
    return Mlx5Transport(**options)


# ------------------------------------------------------------------------------------------ rendezvous

def _tcp_exchange(rank: int, world: int, address: str, mine: dict, timeout: float) -> list[dict]:
    """Everyone's ``mine`` (JSON-able), in rank order, through rank 0 listening at ``address``."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    if rank == 0:
        table: list[Any] = [mine] + [None] * (world - 1)
        with socket.create_server((host, int(port)), reuse_port=False) as srv:
            srv.settimeout(timeout)
            peers: list[socket.socket] = []
            while len(peers) < world - 1:
                try:
                    conn, _ = srv.accept()
                except TimeoutError:
                    missing = [r for r in range(1, world) if table[r] is None]
                    raise CommTimeout(f"rank 0: ranks {missing} did not join the rendezvous at {address} "
                                      f"within {timeout:g} s", missing[0]) from None
                conn.settimeout(max(deadline - time.monotonic(), 1.0))
                line = conn.makefile("r").readline()
                theirs = json.loads(line)
                table[theirs["rank"]] = theirs
                peers.append(conn)
            answer = (json.dumps(table) + "\n").encode()
            for conn in peers:
                conn.sendall(answer)
                conn.close()
        return table
    while True:  # rank 0 may not listen yet
        try:
            conn = socket.create_connection((host, int(port)), timeout=1.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise CommTimeout(f"rank {rank}: nobody listens at the rendezvous {address} (rank 0 missing?)",
                                  0) from None
            time.sleep(0.05)
    with conn:
        conn.settimeout(max(deadline - time.monotonic(), 1.0))
        conn.sendall((json.dumps(mine) + "\n").encode())
        try:
            line = conn.makefile("r").readline()
        except TimeoutError:
            raise CommTimeout(f"rank {rank}: rank 0 did not answer the rendezvous within {timeout:g} s", 0) from None
    if not line:
        raise PeerFailed(f"rank {rank}: rank 0 closed the rendezvous without an answer", 0)
    return json.loads(line)


def _mpi_exchange(mine: dict) -> tuple[int, int, list[dict]]:
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    return comm.Get_rank(), comm.Get_size(), comm.allgather(mine)


# ------------------------------------------------------------------------------------------ the transport

class _Peer:
    """The QP to one other rank, its CQs, its registered send/receive slots and the order of its messages.

    Each direction is a byte stream of SENDs: the k-th SEND uses send slot ``k % SLOTS``; receives stay posted
    in every receive slot, so the k-th arriving SEND lands in slot ``k % SLOTS`` and waits there until a recv
    consumes it (then the slot's receive is posted again). A call takes its place in ``send_line`` /
    ``recv_line`` (a ticket per message) when it is made, and moves that message when its ticket is first:
    messages keep the order of the calls, whatever order their handles are waited in."""

    def __init__(self, dev: Any, pd: int, rank: int, chunk: int) -> None:
        self.rank = rank
        self.send_cq = dev.create_cq(6)
        self.recv_cq = dev.create_cq(6)
        self.qp = dev.create_qp(pd, self.send_cq, self.recv_cq, 5, 5)
        self.send_mr = dev.reg_mr(pd, dev.alloc(SLOTS * chunk), remote_write=False)
        self.recv_mr = dev.reg_mr(pd, dev.alloc(SLOTS * chunk))
        self.send_view = self.send_mr.buf.view
        self.recv_view = self.recv_mr.buf.view
        self.sent = self.send_done = 0  # SENDs posted, completed
        self.recv_posted = 0  # receives posted into a slot (the next goes to slot recv_posted % SLOTS)
        self.landing: deque[int | None] = deque()  # per posted receive, in order: its slot offset (None: direct)
        self.arrived: list[Any] = []  # receive completions not consumed yet
        self.send_line: list[object] = []
        self.recv_line: list[object] = []


class Mlx5Transport(Transport):
    """See the module docstring."""

    name = "mlx5"

    def __init__(self, rank: int | None = None, world_size: int | None = None, rendezvous: str | None = None,
                 exchange: str = "tcp", model: bool = False, fabric: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, chunk: int = CHUNK) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if not (HEADER_BYTES <= chunk <= 1 << 30 and chunk % 64 == 0):
            raise ValueError(f"chunk must be a multiple of 64 bytes from {HEADER_BYTES} to 1 GiB, got {chunk!r}")
        self.chunk = chunk
        if exchange not in ("tcp", "mpi"):
            raise ValueError(f"exchange must be 'tcp' or 'mpi', got {exchange!r}")
        self.timeout = float(timeout)
        self._failure: str | None = None
        self._closed = False
        self._active: list[Handle] = []  # calls under way (every wait moves them all on)
        self._pool = RecvPool()
        # (address, nbytes) -> (memory key, its DMA mapping): tensor memory registered with the device, oldest first
        self._mrs: OrderedDict[tuple[int, int], tuple[Any, Any]] = OrderedDict()
        self._mrs_busy: dict[tuple[int, int], int] = {}  # regions a message under way uses (never destroyed then)
        self.registrations = 0  # memory keys created for tensor memory (a cache miss each)
        self.slot_bytes = 0  # bytes copied through the registered slots (headers, small messages, unmappable memory)
        if exchange == "tcp":
            if rank is None or world_size is None:
                raise ValueError("the mlx5 transport needs rank= and world_size= (and rendezvous='host:port' when "
                                 "world_size > 1), or exchange='mpi' under mpirun")
            if not 0 <= rank < world_size:
                raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
            if world_size > 1 and not rendezvous:
                raise ValueError("world_size > 1 needs rendezvous='host:port' (where rank 0 listens)")
        self._hw = self._open_hardware(model, fabric, self.timeout)
        try:
            from tg_mlx_rdma.mlx5.device import Mlx5Device
            self.dev = Mlx5Device(self._hw)
            self.pd = self.dev.alloc_pd()
            self._connect(rank, world_size, rendezvous, exchange)
        except BaseException:
            self._hw.close()
            raise

    @staticmethod
    def _open_hardware(model: bool, fabric: str | None, timeout: float) -> Any:
        if not model:
            from tg_mlx_rdma.mlx5.hw import SysfsPci
            return SysfsPci()  # NoPCIe / NoConnectXDevice on machines without the NIC
        from tg_mlx_rdma.testing.mlx5_model import Mlx5Model
        # (a SEND waits in the device for the peer's receive longer than a call may wait: the call's timeout names
        # the peer first, as with the NIC's unlimited RNR retries)
        return Mlx5Model(fabric or model_fabric_dir(), rnr_timeout=timeout + 5)

    def _connect(self, rank: int | None, world: int | None, rendezvous: str | None, exchange: str) -> None:
        if exchange == "mpi":
            from mpi4py import MPI
            rank, world = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
        assert rank is not None and world is not None
        self.rank, self.world_size = rank, world
        self.peers = {r: _Peer(self.dev, self.pd, r, self.chunk) for r in range(world) if r != rank}
        mine = {"rank": rank, "gid": self.dev.gid.hex(), "qpn": {str(r): p.qp.qpn for r, p in self.peers.items()}}
        table: list[dict[str, Any]]
        if world == 1:
            table = [mine]
        elif exchange == "mpi":
            table = _mpi_exchange(mine)[2]
        else:
            assert rendezvous is not None
            table = _tcp_exchange(rank, world, rendezvous, mine, self.timeout)
        from tg_mlx_rdma.mlx5.device import QpInfo
        for r, peer in self.peers.items():
            theirs = table[r]
            peer.qp.connect(QpInfo(theirs["qpn"][str(rank)], bytes.fromhex(theirs["gid"])))
        tickets = self._tickets([(r, d) for r in sorted(self.peers) for d in ("send", "recv")])

        def greet() -> Steps:  # a byte each way on every QP: the peers' QPs are connected too
            for i, r in enumerate(sorted(self.peers)):
                yield from self._send_msg(self.peers[r], tickets[2 * i], memoryview(b"H"))

        def listen() -> Steps:  # (under way at once: a SEND completes only once the peer posted its receive)
            for i, r in enumerate(sorted(self.peers)):
                yield from self._recv_msg(self.peers[r], tickets[2 * i + 1], None, 1, "connecting")
        sends, recvs = self._handle(greet(), "connecting", None), self._handle(listen(), "connecting", None)
        recvs.wait()
        sends.wait()

    # ---------------------------------------------------------------- state
    def _live(self) -> None:
        if self._failure is not None:
            raise TransportClosed(f"rank {self.rank}: the mlx5 transport failed earlier ({self._failure})")
        if self._closed:
            raise TransportClosed(f"rank {self.rank}: the mlx5 transport is closed")

    def _fail(self, err: CommError) -> CommError:
        self._failure = str(err)
        return err

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.clear()
        self._mrs.clear()
        self.dev.close()

    # ---------------------------------------------------------------- registered tensor memory
    def _register(self, mv: memoryview) -> tuple[tuple[int, int], Any] | None:
        """A memory key over ``mv`` (from the cache, or made now), marked busy; None when ``mv`` is small or the
        hardware access cannot map it (the caller copies through the slots). ``_release`` ends the use."""
        if mv.nbytes < DIRECT_MIN or mv.readonly:
            return None
        key = (int(np.frombuffer(mv, dtype=np.uint8).ctypes.data), mv.nbytes)
        entry = self._mrs.get(key)
        if entry is not None:
            self._mrs.move_to_end(key)
        else:
            from tg_mlx_rdma.mlx5.hw import HardwareError
            try:
                mapped = self._hw.map_dma(mv)
            except HardwareError:
                return None
            entry = self._mrs[key] = (self.dev.reg_mr(self.pd, mapped), mapped)
            self.registrations += 1
            self._evict()
        self._mrs_busy[key] = self._mrs_busy.get(key, 0) + 1
        return key, entry[0]

    def _release(self, key: tuple[int, int]) -> None:
        left = self._mrs_busy[key] - 1
        if left:
            self._mrs_busy[key] = left
        else:
            del self._mrs_busy[key]

    def _evict(self) -> None:
        """Destroy the least recently used regions over ``MR_CACHE`` that no message uses (the memory they keep
        alive is let go: an address is never reused while its region exists)."""
        for key in list(self._mrs):
            if len(self._mrs) <= MR_CACHE:
                return
            if key not in self._mrs_busy:
                mr, mapped = self._mrs.pop(key)
                self.dev.dereg_mr(mr)
                self._hw.unmap_dma(mapped)

    # ---------------------------------------------------------------- progress
    def _poll(self, peer: _Peer, cq: Any) -> list[Any]:
        from tg_mlx_rdma.mlx5.device import CompletionError
        try:
            return cq.poll()  # type: ignore[no-any-return]
        except CompletionError as e:
            raise self._fail(PeerFailed(f"rank {self.rank}: a transfer with rank {peer.rank} failed: {e}",
                                        peer.rank)) from e

    def _send_slot_free(self, peer: _Peer) -> bool:
        peer.send_done += len(self._poll(peer, peer.send_cq))
        return peer.sent - peer.send_done < SLOTS

    def _arrival(self, peer: _Peer) -> bool:
        if not peer.arrived:
            peer.arrived.extend(self._poll(peer, peer.recv_cq))
        return bool(peer.arrived)

    def _block(self, handle: Handle) -> None:
        """Move every call under way on (a peer's progress may wait on ours) until ``handle`` finished."""
        deadline = time.monotonic() + self.timeout
        idle = 0
        while True:
            for h in list(self._active):
                if h is not handle and h.done():
                    self._active.remove(h)
            if handle.done():
                if handle in self._active:
                    self._active.remove(handle)
                return
            idle += 1
            time.sleep(0 if idle < 1000 else 0.0001)  # the device model runs in threads of this process
            if idle % 256 == 0 and time.monotonic() > deadline:
                blame = (f"rank {handle.peer} did not answer" if handle.peer is not None else
                         "not every rank answered (one is dead, stuck, or in a different call)")
                raise self._fail(CommTimeout(f"rank {self.rank}: {handle.what} did not complete within "
                                             f"{self.timeout:g} s: {blame}", handle.peer))

    def _handle(self, steps: Steps, what: str | Any, peer: int | None) -> Handle:
        handle = Handle(self, steps, what, peer)
        self._active.append(handle)
        handle.done()  # starts at once what can start
        return handle

    def _put(self, peer: _Peer, data: memoryview) -> Steps:
        """Stages: ``data`` as SENDs of at most ``chunk`` bytes (at least one): straight from ``data`` when it is
        registered (``_register``), else each copied into a free send slot."""
        direct = self._register(data)
        try:
            for start in range(0, max(data.nbytes, 1), self.chunk):
                yield lambda: self._send_slot_free(peer)
                n = min(self.chunk, data.nbytes - start)
                if direct is not None:
                    peer.qp.post_send("SEND", direct[1], start, n)
                else:
                    slot = (peer.sent % SLOTS) * self.chunk
                    peer.send_view[slot:slot + n] = data[start:start + n]
                    self.slot_bytes += n
                    peer.qp.post_send("SEND", peer.send_mr, slot, n)
                peer.sent += 1
            if direct is not None:  # (the memory is read until the last SEND completed)
                last = peer.sent
                yield lambda: self._send_slot_free(peer) and peer.send_done >= last
        finally:
            if direct is not None:
                self._release(direct[0])

    def _take(self, peer: _Peer, out: memoryview | None, nbytes: int, what: str) -> Steps:
        """Stages: receive ``nbytes`` (at least one SEND) into ``out`` (None: discard): straight into ``out`` when it
        is registered, else through the receive slots. Receives are posted here, ``SLOTS`` chunks ahead."""
        direct = self._register(out) if out is not None else None
        chunks = [(start, min(self.chunk, nbytes - start)) for start in range(0, max(nbytes, 1), self.chunk)]
        posted = 0
        try:
            for i, (start, want) in enumerate(chunks):
                while posted < len(chunks) and posted - i < SLOTS:
                    at, size = chunks[posted]
                    if direct is not None:
                        peer.qp.post_recv(direct[1], at, max(size, 1))
                        peer.landing.append(None)
                    else:
                        slot = (peer.recv_posted % SLOTS) * self.chunk
                        peer.qp.post_recv(peer.recv_mr, slot, self.chunk)
                        peer.recv_posted += 1
                        peer.landing.append(slot)
                    posted += 1
                yield lambda: self._arrival(peer)
                c = peer.arrived.pop(0)
                landed = peer.landing.popleft()
                if c.byte_count != want:
                    raise self._mismatch(f"rank {self.rank}: {what}: rank {peer.rank} sent a chunk of {c.byte_count} "
                                         f"bytes where {want} were due", peer.rank)
                if out is not None and want and landed is not None:
                    out[start:start + want] = peer.recv_view[landed:landed + want]
                    self.slot_bytes += want
        finally:
            if direct is not None:
                self._release(direct[0])

    def _send_msg(self, peer: _Peer, ticket: object, *parts: memoryview) -> Steps:
        """Stages: wait for ``ticket``'s turn, send ``parts`` (each a run of SENDs), wait until they completed."""
        yield lambda: peer.send_line[0] is ticket
        try:
            for part in parts:
                yield from self._put(peer, part)
        finally:
            peer.send_line.remove(ticket)
        last = peer.sent
        yield lambda: self._send_slot_free(peer) and peer.send_done >= last

    def _recv_msg(self, peer: _Peer, ticket: object, out: memoryview | None, nbytes: int, what: str) -> Steps:
        yield lambda: peer.recv_line[0] is ticket
        try:
            yield from self._take(peer, out, nbytes, what)
        finally:
            peer.recv_line.remove(ticket)

    def _mismatch(self, message: str, peer: int) -> CommError:
        self._failure = message  # the byte stream is out of step: nothing later can be trusted
        return PeerMismatch(message, peer)

    # ---------------------------------------------------------------- point to point
    def send(self, tensor: Tensor, dst: int) -> None:
        self.isend(tensor, dst).wait()

    def isend(self, tensor: Tensor, dst: int) -> Handle:
        self._live()
        self._check_peer(dst, "dst")
        data, keep = tensor_bytes(tensor)
        header = make_header(as_shape(keep.shape), keep.dtype)
        what = f"send of {describe_header(header)} to rank {dst}"
        peer, ticket = self.peers[dst], object()
        peer.send_line.append(ticket)
        parts = (memoryview(header.tobytes()), data) if data.nbytes else (memoryview(header.tobytes()),)

        def steps() -> Steps:
            yield from self._send_msg(peer, ticket, *parts)
            kept.clear()
        kept = [keep]
        return self._handle(steps(), what, dst)

    def recv(self, shape: int | Sequence[int], dtype: Any, src: int, device: str | None = None,
             out: Tensor | None = None) -> Tensor:
        result: Tensor = self.irecv(shape, dtype, src, device, out, blocking=True).wait()
        return result

    def irecv(self, shape: int | Sequence[int], dtype: Any, src: int, device: str | None = None,
              out: Tensor | None = None, blocking: bool = False) -> Handle:
        self._live()
        self._check_peer(src, "src")
        dims, dt = as_shape(shape), as_dtype(dtype)
        want = make_header(dims, dt)
        cell: list[Handle] = []
        t, mv, commit = recv_target(dims, dt, device, out, self._pool,
                                    None if blocking else (lambda: cell[0]._settle()))
        what = f"recv of {describe_header(want)} from rank {src}"
        peer, ticket = self.peers[src], object()
        peer.recv_line.append(ticket)

        def steps() -> Steps:
            yield lambda: peer.recv_line[0] is ticket
            try:
                got = np.zeros(HEADER_WORDS, dtype=np.int64)
                yield from self._take(peer, got.data.cast("B"), HEADER_BYTES, what)
                try:
                    check_header(got, want, src, self.rank)
                except PeerMismatch:
                    if header_nbytes(got):
                        yield from self._take(peer, None, header_nbytes(got), f"{what} (discarding its data)")
                    raise
                if mv.nbytes:
                    yield from self._take(peer, mv, mv.nbytes, what)
            finally:
                peer.recv_line.remove(ticket)
            commit()
            return t
        cell.append(self._handle(steps(), what, src))
        return cell[0]

    # ---------------------------------------------------------------- collectives (through rank 0)
    def _tickets(self, plan: list[tuple[int, str]]) -> list[object]:
        """Take places in the peers' lines now, in call order: ``plan`` is (peer rank, "send" | "recv") per message."""
        tickets = []
        for r, direction in plan:
            ticket = object()
            (self.peers[r].send_line if direction == "send" else self.peers[r].recv_line).append(ticket)
            tickets.append(ticket)
        return tickets

    def _check_call(self, call: np.ndarray, tickets: list[object], what: str) -> Steps:
        """Stages: every rank sends ``call`` to rank 0, which answers all with every rank's call (``verdict``);
        returns the verdict (element 0: whether all agree). Uses ``tickets[:2]`` off rank 0, ``2 * peers`` on it."""
        if self.rank == 0:
            calls = [call]
            for i, r in enumerate(sorted(self.peers)):
                theirs = np.zeros_like(call)
                yield from self._recv_msg(self.peers[r], tickets[i], theirs.data.cast("B"), theirs.nbytes, what)
                calls.append(theirs)
            agree = all((c == call).all() for c in calls)
            verdict = np.array([int(agree)] + [int(x) for c in calls for x in c], dtype=np.int64)
            for i, r in enumerate(sorted(self.peers)):
                yield from self._send_msg(self.peers[r], tickets[len(self.peers) + i], memoryview(verdict.tobytes()))
        else:
            yield from self._send_msg(self.peers[0], tickets[0], memoryview(call.tobytes()))
            verdict = np.zeros(1 + self.world_size * call.size, dtype=np.int64)
            yield from self._recv_msg(self.peers[0], tickets[1], verdict.data.cast("B"), verdict.nbytes, what)
        return verdict

    def _check_plan(self) -> list[tuple[int, str]]:
        if self.rank == 0:
            return [(r, "recv") for r in sorted(self.peers)] + [(r, "send") for r in sorted(self.peers)]
        return [(0, "send"), (0, "recv")] if self.world_size > 1 else []

    def _disagreement(self, verdict: np.ndarray, size: int, call: str, label: Any) -> PeerMismatch:
        rows = verdict[1:].reshape(self.world_size, size)
        calls_text = "; ".join(f"rank {r}: {describe_header(row[:-1])} {label(row[-1])}" for r, row in enumerate(rows))
        what = "op" if call == "allreduce" else "root"
        return PeerMismatch(f"rank {self.rank}: {call} needs the same shape, dtype and {what} on every rank, "
                            f"got {calls_text}")

    def barrier(self) -> None:
        self._live()
        plan = self._check_plan()
        tickets = self._tickets(plan)
        call = np.zeros(1, dtype=np.int64)
        self._handle(self._check_call(call, tickets, "barrier"), "barrier", None).wait()

    def iallreduce(self, tensor: Tensor, op: str = "sum", out: Tensor | None = None) -> Handle:
        self._live()
        self._check_op(op)
        data, keep = tensor_bytes(tensor)
        shape, dt = as_shape(keep.shape), keep.dtype
        call = np.concatenate([make_header(shape, dt), np.array([REDUCE_OPS.index(op)], dtype=np.int64)])
        what = f"allreduce ({op}) of {describe_header(call[:-1])}"
        cell: list[Handle] = []
        target, mv, commit = recv_target(shape, dt, tensor.device if out is None else None, out, self._pool,
                                         None if out is None else (lambda: cell[0]._settle()))
        acc = bytearray(data) if self.rank == 0 else None  # (copied now: out may be the input)
        plan = self._check_plan()
        if data.nbytes:
            plan += plan  # the data the same way as the call: to rank 0, and back
        tickets = self._tickets(plan)
        n_check = len(plan) // 2 if data.nbytes else len(plan)

        def steps() -> Steps:
            try:
                verdict = yield from self._check_call(call, tickets, what)
                if not verdict[0]:
                    raise self._disagreement(verdict, call.size, "allreduce", lambda a: REDUCE_OPS[int(a)])
                if data.nbytes:
                    rest = tickets[n_check:]
                    if self.rank == 0:
                        assert acc is not None
                        from tg_mlx_rdma.reduce_ops import numpy_combiner
                        combine = numpy_combiner(dt, op)
                        theirs = bytearray(len(acc))
                        for i, r in enumerate(sorted(self.peers)):
                            yield from self._recv_msg(self.peers[r], rest[i], memoryview(theirs), len(theirs), what)
                            combine(theirs, acc, None)
                        mv[:] = acc
                        for i, r in enumerate(sorted(self.peers)):
                            yield from self._send_msg(self.peers[r], rest[len(self.peers) + i], mv)
                    else:
                        yield from self._send_msg(self.peers[0], rest[0], data)
                        yield from self._recv_msg(self.peers[0], rest[1], mv, mv.nbytes, what)
                elif acc is not None and mv.nbytes:
                    mv[:] = acc
            finally:
                self._drop_tickets(plan, tickets)
            commit()
            kept.clear()
            return target
        kept = [keep]
        cell.append(self._handle(steps(), what, None))
        return cell[0]

    def _drop_tickets(self, plan: list[tuple[int, str]], tickets: list[object]) -> None:
        """Take the places a failed call did not use out of the lines (used ones left already)."""
        for (r, direction), ticket in zip(plan, tickets, strict=True):
            line = self.peers[r].send_line if direction == "send" else self.peers[r].recv_line
            if ticket in line:
                line.remove(ticket)

    def broadcast(self, tensor: Tensor, root: int = 0, out: Tensor | None = None) -> Tensor:
        self._live()
        shape, dt = broadcast_args(tensor, root, self.world_size)
        call = np.concatenate([make_header(shape, dt), np.array([root], dtype=np.int64)])
        what = f"broadcast of {describe_header(call[:-1])} from rank {root}"
        if self.rank == root:
            mv, keep = tensor_bytes(tensor)
            target, commit = tensor, None
        else:
            target, mv, commit = recv_target(shape, dt, tensor.device if out is None else None, out)
        plan = self._check_plan()
        n_check = len(plan)
        if self.rank == root:
            plan += [(r, "send") for r in sorted(self.peers)]
        else:
            plan.append((root, "recv"))
        tickets = self._tickets(plan)

        def steps() -> Steps:
            try:
                verdict = yield from self._check_call(call, tickets, what)
                if not verdict[0]:
                    raise self._disagreement(verdict, call.size, "broadcast", lambda a: f"root {int(a)}")
                rest = tickets[n_check:]
                if self.rank == root:
                    for i, r in enumerate(sorted(self.peers)):
                        yield from self._send_msg(self.peers[r], rest[i], mv)
                else:
                    yield from self._recv_msg(self.peers[root], rest[0], mv, mv.nbytes, what)
            finally:
                self._drop_tickets(plan, tickets)
            if commit is not None:
                commit()
            return target
        result: Tensor = self._handle(steps(), what, None).wait()
        return result


def model_fabric_dir() -> Path:
    """Where model devices meet by default (a socket per device, named by its GID)."""
    return Path(tempfile.gettempdir()) / "tg-mlx5-fabric"

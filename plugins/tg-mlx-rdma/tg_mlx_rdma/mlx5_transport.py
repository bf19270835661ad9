"""The ``mlx5`` transport: the transport API over the user-space mlx5 driver (RC QPs, SEND/RECV).

In:  ``tgcore.transport("mlx5", rank=, world_size=, rendezvous="host:port")`` (or ``exchange="mpi"`` under
     mpirun), and the device: the ConnectX NIC (default; a machine without one gets the driver's
     "no PCIe" / "no ConnectX device" error) or ``model=True``: the software device model, one per process,
     connected through a fabric directory the ranks share.
Out: a ``Transport``: ``send``, ``recv``, ``allreduce``, ``barrier``, ``close``.

How: every pair of ranks gets an RC queue pair; the QP numbers and GIDs are exchanged over the TCP
rendezvous (rank 0 listens, collects one JSON line per rank and answers with the table) or MPI. A message is
the 16-word wire header then the data in ``chunk``-byte SENDs (default ``CHUNK``). The sender copies each
chunk into one of two registered send slots (so one chunk is on the wire while the next is copied), the
receiver posts two receive slots and copies each arrived chunk into the result tensor: device memory must be
registered, so this path has one copy on each side. A SEND the peer has no receive for yet waits in the
device (RNR retry) until the peer's ``recv`` posts one or the timeout ends it. ``allreduce`` and ``barrier``
gather to rank 0 and broadcast back.
"""
from __future__ import annotations

import json
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_mlx_rdma.transport import (
    DEFAULT_TIMEOUT,
    HEADER_WORDS,
    REDUCE_OPS,
    CommError,
    CommTimeout,
    PeerFailed,
    PeerMismatch,
    Transport,
    TransportClosed,
    as_dtype,
    as_shape,
    check_header,
    describe_header,
    empty_tensor,
    header_nbytes,
    make_header,
    recv_target,
    tensor_bytes,
)

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

__all__ = ["Mlx5Transport", "connect"]

CHUNK = 4 << 20  # bytes per SEND
SLOTS = 2  # send / receive slots per peer
HEADER_BYTES = 8 * HEADER_WORDS


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
            peers = []
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
    """The QP to one other rank, its CQ and its registered send/receive slots."""

    def __init__(self, dev: Any, pd: int, rank: int, chunk: int) -> None:
        self.rank = rank
        self.cq = dev.create_cq(6)
        self.qp = dev.create_qp(pd, self.cq, self.cq, 5, 5)
        self.send_mr = dev.reg_mr(pd, dev.alloc(SLOTS * chunk), remote_write=False)
        self.recv_mr = dev.reg_mr(pd, dev.alloc(SLOTS * chunk))
        self.send_view = self.send_mr.buf.view
        self.recv_view = self.recv_mr.buf.view


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
        if exchange == "tcp":
            if rank is None or world_size is None:
                raise ValueError("the mlx5 transport needs rank= and world_size= (and rendezvous='host:port' when "
                                 "world_size > 1), or exchange='mpi' under mpirun")
            if not 0 <= rank < world_size:
                raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
            if world_size > 1 and not rendezvous:
                raise ValueError("world_size > 1 needs rendezvous='host:port' (where rank 0 listens)")
        self._hw = self._open_hardware(model, fabric)
        try:
            from tg_mlx_rdma.mlx5.device import Mlx5Device
            self.dev = Mlx5Device(self._hw)
            self.pd = self.dev.alloc_pd()
            self._connect(rank, world_size, rendezvous, exchange)
        except BaseException:
            self._hw.close()
            raise

    @staticmethod
    def _open_hardware(model: bool, fabric: str | None) -> Any:
        if not model:
            from tg_mlx_rdma.mlx5.hw import SysfsPci
            return SysfsPci()  # NoPCIe / NoConnectXDevice on machines without the NIC
        from tg_mlx_rdma.testing.mlx5_model import Mlx5Model
        return Mlx5Model(fabric or model_fabric_dir())

    def _connect(self, rank: int | None, world: int | None, rendezvous: str | None, exchange: str) -> None:
        if exchange == "mpi":
            from mpi4py import MPI
            rank, world = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
        assert rank is not None and world is not None
        self.rank, self.world_size = rank, world
        self.peers = {r: _Peer(self.dev, self.pd, r, self.chunk) for r in range(world) if r != rank}
        mine = {"rank": rank, "gid": self.dev.gid.hex(), "qpn": {str(r): p.qp.qpn for r, p in self.peers.items()}}
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
        for peer in self.peers.values():  # every rank connected its QPs before anyone sends
            peer.qp.post_recv(peer.recv_mr, 0, 1)
        for peer in self.peers.values():
            peer.qp.post_send("SEND", peer.send_mr, 0, 1)
        for peer in self.peers.values():
            self._wait(peer, 2, "connecting")

    # ---------------------------------------------------------------- state
    def _live(self) -> None:
        if self._failure is not None:
            raise TransportClosed(f"rank {self.rank}: the mlx5 transport failed earlier ({self._failure})")
        if self._closed:
            raise TransportClosed(f"rank {self.rank}: the mlx5 transport is closed")

    def _wait(self, peer: _Peer, count: int, what: str) -> list[Any]:
        from tg_mlx_rdma.mlx5.device import CompletionError
        try:
            return peer.cq.wait(count, timeout=self.timeout)
        except TimeoutError:
            err: CommError = CommTimeout(f"rank {self.rank}: {what} did not complete within {self.timeout:g} s: "
                                         f"rank {peer.rank} did not answer", peer.rank)
        except CompletionError as e:
            err = PeerFailed(f"rank {self.rank}: {what} failed with rank {peer.rank}: {e}", peer.rank)
        self._failure = str(err)
        raise err

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.dev.close()

    # ---------------------------------------------------------------- point to point
    def _send_bytes(self, peer: _Peer, data: memoryview, what: str) -> None:
        """``data`` as SENDs of at most self.chunk bytes, through the two send slots."""
        inflight = 0
        for i, start in enumerate(range(0, max(data.nbytes, 1), self.chunk)):
            if inflight == SLOTS:
                self._wait(peer, 1, what)
                inflight -= 1
            n = min(self.chunk, data.nbytes - start)
            slot = (i % SLOTS) * self.chunk
            peer.send_view[slot:slot + n] = data[start:start + n]
            peer.qp.post_send("SEND", peer.send_mr, slot, n)
            inflight += 1
        if inflight:
            self._wait(peer, inflight, what)

    def _recv_bytes(self, peer: _Peer, out: memoryview | None, nbytes: int, what: str) -> None:
        """Receive ``nbytes`` (at least one SEND) into ``out`` (None: discard)."""
        chunks = max(-(-nbytes // self.chunk), 1)
        posted = 0
        for _ in range(min(SLOTS, chunks)):
            peer.qp.post_recv(peer.recv_mr, (posted % SLOTS) * self.chunk, self.chunk)
            posted += 1
        for i in range(chunks):
            (c,) = self._wait(peer, 1, what)
            slot = (i % SLOTS) * self.chunk
            start = i * self.chunk
            want = min(self.chunk, nbytes - start)
            if c.byte_count != want:
                raise self._mismatch(f"rank {self.rank}: {what}: rank {peer.rank} sent a chunk of {c.byte_count} "
                                     f"bytes where {want} were due", peer.rank)
            if out is not None and want:
                out[start:start + want] = peer.recv_view[slot:slot + want]
            if posted < chunks:
                peer.qp.post_recv(peer.recv_mr, slot, self.chunk)
                posted += 1

    def _mismatch(self, message: str, peer: int) -> CommError:
        self._failure = message  # the byte stream is out of step: nothing later can be trusted
        return PeerMismatch(message, peer)

    def send(self, tensor: Tensor, dst: int) -> None:
        self._live()
        self._check_peer(dst, "dst")
        data, keep = tensor_bytes(tensor)
        header = make_header(as_shape(keep.shape), keep.dtype)
        what = f"send of {describe_header(header)} to rank {dst}"
        peer = self.peers[dst]
        self._send_bytes(peer, memoryview(header.tobytes()), what)
        if data.nbytes:
            self._send_bytes(peer, data, what)
        del keep

    def recv(self, shape: int | Sequence[int], dtype: Any, src: int, device: str | None = None,
             out: Tensor | None = None) -> Tensor:
        self._live()
        self._check_peer(src, "src")
        dims, dt = as_shape(shape), as_dtype(dtype)
        want = make_header(dims, dt)
        t, mv, commit = recv_target(dims, dt, device, out)
        what = f"recv of {describe_header(want)} from rank {src}"
        peer = self.peers[src]
        got = np.zeros(HEADER_WORDS, dtype=np.int64)
        self._recv_bytes(peer, memoryview(got).cast("B"), HEADER_BYTES, what)
        try:
            check_header(got, want, src, self.rank)
        except PeerMismatch:
            if header_nbytes(got):
                self._recv_bytes(peer, None, header_nbytes(got), what + " (discarding the mismatched data)")
            raise
        if mv.nbytes:
            self._recv_bytes(peer, mv, mv.nbytes, what)
        commit()
        return t

    # ---------------------------------------------------------------- collectives (through rank 0)
    def barrier(self) -> None:
        self._live()
        token = memoryview(b"B")
        if self.rank == 0:
            for r, peer in self.peers.items():
                self._recv_bytes(peer, None, 1, f"barrier (waiting for rank {r})")
            for r, peer in self.peers.items():
                self._send_bytes(peer, token, f"barrier (releasing rank {r})")
        else:
            self._send_bytes(self.peers[0], token, "barrier")
            self._recv_bytes(self.peers[0], None, 1, "barrier")

    def allreduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        self._live()
        self._check_op(op)
        data, keep = tensor_bytes(tensor)
        shape, dt = as_shape(keep.shape), keep.dtype
        call = np.concatenate([make_header(shape, dt), np.array([REDUCE_OPS.index(op)], dtype=np.int64)])
        what = f"allreduce ({op}) of {describe_header(call[:-1])}"
        acc = bytearray(data)
        if self.rank == 0:
            calls = [call]
            for r in sorted(self.peers):
                theirs = np.zeros_like(call)
                self._recv_bytes(self.peers[r], memoryview(theirs).cast("B"), theirs.nbytes, what)
                calls.append(theirs)
            agree = all((c == call).all() for c in calls)
            verdict = np.array([int(agree)] + [int(x) for c in calls for x in c], dtype=np.int64)
            for r in sorted(self.peers):
                self._send_bytes(self.peers[r], memoryview(verdict.tobytes()), what)
        else:
            self._send_bytes(self.peers[0], memoryview(call.tobytes()), what)
            verdict = np.zeros(1 + self.world_size * call.size, dtype=np.int64)
            self._recv_bytes(self.peers[0], memoryview(verdict).cast("B"), verdict.nbytes, what)
        if not verdict[0]:
            rows = verdict[1:].reshape(self.world_size, call.size)
            calls_text = "; ".join(f"rank {r}: {describe_header(row[:-1])} {REDUCE_OPS[int(row[-1])]}"
                                   for r, row in enumerate(rows))
            raise PeerMismatch(f"rank {self.rank}: allreduce needs the same shape, dtype and op on every rank, "
                               f"got {calls_text}")
        if data.nbytes:
            if self.rank == 0:
                from tg_mlx_rdma.mpi import _numpy_combiner
                combine = _numpy_combiner(dt, op)
                theirs = bytearray(len(acc))
                for r in sorted(self.peers):
                    self._recv_bytes(self.peers[r], memoryview(theirs), len(theirs), what)
                    combine(theirs, acc, None)
                for r in sorted(self.peers):
                    self._send_bytes(self.peers[r], memoryview(acc), what)
            else:
                self._send_bytes(self.peers[0], data, what)
                self._recv_bytes(self.peers[0], memoryview(acc), len(acc), what)
        out, mv, commit = empty_tensor(shape, dt, tensor.device)
        if mv.nbytes:
            mv[:] = acc
        commit()
        del keep
        return out


def model_fabric_dir() -> Path:
    """Where model devices meet by default (a socket per device, named by its GID)."""
    return Path(tempfile.gettempdir()) / "tg-mlx5-fabric"

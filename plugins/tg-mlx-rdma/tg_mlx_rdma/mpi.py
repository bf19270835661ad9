"""The ``mpi`` transport: the transport API over mpi4py (Open MPI from Debian's packages).

In:  an MPI world (started by ``mpirun -np N python script.py``; a plain ``python script.py``
     is a world of size 1) or a communicator passed as ``comm=``.
Out: a ``Transport`` whose calls post non-blocking MPI requests and poll them against a
     deadline, so a dead or stuck peer gives ``CommTimeout`` (or Open MPI ends the job) instead
     of a hang.

All traffic runs on a private duplicate of the communicator, so user mpi4py traffic on the
same ranks never matches ours. ``send`` of up to ``SMALL`` bytes posts one message, the 16-word header
(``transport.make_header``, with the message's sequence number: below) followed by the data, from a staging copy,
and returns without waiting for its receive (tag ``TAG_SMALL``). Larger sends post the header (tag ``TAG_HEADER``)
only when it is not the last one sent to that rank in a header message, then the data (tag ``TAG_DATA``, in chunks
of at most ``CHUNK`` bytes: MPI counts are C ints); the receiver checks data that comes without a header against the
last header it received from that rank (both sides keep it per rank; messages match in order), so a tensor sent
again and again is one message (from a persistent send kept per rank while the tensor lives).

A blocking ``recv`` of a small tensor posts a receive of any ``TAG_SMALL`` message (into a landing buffer of the
largest one, so none is truncated), so the message lands while the recv waits. That receive can take a small message
sent after a larger one still queued (which is not for it); so every send counts the messages to each rank and a
small message carries its number (``SEQ_WORD``): one taken before its turn is set aside for the receive whose turn
it is (``_parked``). A blocking ``recv`` of a larger tensor without ``out=`` whose header is the last one the sender
sent in a header message posts a receive of any message into its pooled result instead (``mpi_next``: the data
then comes without a header, and nothing the sender may send next is larger). Other receives probe for the next
message from the sender and check its header before they post the receive of the data, whose size the header
gave: a sender that sent more bytes than asked for never meets a too-short receive (Open MPI 4.1 overruns the buffer
of a truncated receive); its data is received and dropped and the recv raises ``PeerMismatch``. A blocking
``recv(out=)`` announces its write into ``out`` only after the check. After a timeout or an MPI error the transport
is failed (later calls raise ``TransportClosed``); if it is still failed when the interpreter exits it calls
``MPI_Abort`` so the other ranks do not wait forever in ``MPI_Finalize``.
"""
from __future__ import annotations

import atexit
import sys
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_mlx_rdma.mpi_collectives import CHUNK, _first_in_line
from tg_mlx_rdma.mpi_next import FAST_POLLS, TAG_DATA, TAG_HEADER, TAG_SMALL, MPINext, What
from tg_mlx_rdma.transport import (
    _SEND_VIEWS,
    DEFAULT_TIMEOUT,
    HEADER_BYTES,
    HEADER_WORDS,
    KEY_BYTES,
    MAGIC,
    SEQ_WORD,
    CommError,
    CommTimeout,
    Handle,
    PeerFailed,
    PeerMismatch,
    RecvPool,
    Steps,
    TransportClosed,
    _no_commit,
    as_dtype,
    as_shape,
    check_header,
    check_output,
    describe_header,
    header_nbytes,
    header_of,
    in_place_bytes,
    make_header,
    message_of,
    realization,
    recv_target,
    view_of,
    write_into,
)

if TYPE_CHECKING:
    from tgcore.dtype import DType
    from tgcore.tensor import Tensor

__all__ = ["MPITransport", "connect"]

# messages up to this many data bytes go as one TAG_SMALL message, the header and then the data: the sender copies
# them together, and the receiver takes the whole message into its landing buffer; one message costs less than two
# up to here, even above Open MPI's eager limit (4 KiB on shared memory), where each message waits for its receive
SMALL = 16384
SEND_BUFFERS = 4  # small sends that may be on their way at once (send returns before they are received)
SEND_INITS = 64  # persistent requests of small sends kept (one per staging buffer, message size and rank)
IDLE_POLLS = 1  # polls that found nothing before a wait does its idle work (recv: make the next result ahead)
SPIN_SECONDS = 0.05  # poll flat out this long (MPI progresses only inside our Test calls) ...
YIELD_SECONDS = 1.0  # ... then yield the CPU between polls, then sleep 1 ms between polls



def connect(timeout: float = DEFAULT_TIMEOUT, comm: Any = None, abort_on_failure: bool = True) -> MPITransport:
    """``tgcore.transport("mpi", ...)``: join the MPI world (or ``comm``)."""
    return MPITransport(timeout=timeout, comm=comm, abort_on_failure=abort_on_failure)


class MPITransport(MPINext):
    """The transport API on an MPI communicator. See the module docstring."""

    name = "mpi"

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, comm: Any = None, abort_on_failure: bool = True) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        from mpi4py import MPI
        self._mpi = MPI
        self.timeout = float(timeout)
        self.abort_on_failure = abort_on_failure
        self._failure: str | None = None
        self._closed = False
        self._user_ops: dict[tuple[str, str], tuple[Any, Any]] = {}  # (dtype, op) -> (MPI datatype, MPI.Op)
        base = MPI.COMM_WORLD if comm is None else comm
        self.rank, self.world_size = base.Get_rank(), base.Get_size()
        base.Set_errhandler(MPI.ERRORS_RETURN)  # errors raise MPI.Exception instead of aborting
        self._comm: Any
        self._coll: Any  # the data stages of collectives (see _agree)
        self._comm, req = base.Idup()
        self._coll, req2 = base.Idup()
        self._wait([req, req2], "connecting (duplicating the communicator)", None)
        self._probers: dict[int, list[Handle]] = {}  # src -> receives that have not probed their data yet
        self._collectives: list[Handle] = []  # collectives that have not posted their data stage yet
        self._pool = RecvPool()
        self._pool.on_drop.append(self._forget_landing)
        self._peers: set[int] = set()  # ranks send checked with _check_peer
        # recv(out=)'s last out that passed check_output: (out, weakly; its node then, weakly; the recv's spec; the
        # Buffer in_place_bytes gave, weakly; the node's readers count then)
        self._out_checked: tuple[Callable[[], Any], Callable[[], Any], Any, Callable[[], Any], int] = \
            (_dead, _dead, None, _dead, -1)
        self._last_recv: tuple[tuple[int, ...], DType, str | None] | None = None  # (recv's fast path, no out=)
        self._status = MPI.Status()  # (recv's fast path)
        # send's fast path packs small messages into these buffers and returns without waiting for the receiver;
        # each buffer's request is completed before the buffer is packed again
        self._slots = [_Staging(i) for i in range(SEND_BUFFERS)]
        for i, slot in enumerate(self._slots):
            slot.next = self._slots[(i + 1) % SEND_BUFFERS]
        self._slot = self._slots[0]  # the next send's
        self._send_inits: dict[tuple[int, int, int], Any] = {}  # (buffer, data bytes, rank) -> persistent send
        # small messages arrive here (a receive posted for any of them: _await_small); its words, for the sequence
        self._landing = memoryview(bytearray(HEADER_BYTES + SMALL))
        self._landing_words = self._landing.cast("q")
        self._landing_key = self._landing[:KEY_BYTES]  # (the header words a recv compares)
        self._count = 0  # bytes of the message in the landing buffer (_in_turn)
        self._posted: dict[int, Any] = {}  # src -> the persistent receive of a small message into _landing
        self._land_inits: dict[tuple[int, Any], Any] = {}  # (src, pooled buffer) -> a receive of any message into it
        # messages sent to each rank / taken from each rank so far (small messages carry their number: SEQ_WORD)
        self._seq_out = [0] * self.world_size
        self._seq_in = [0] * self.world_size
        self._parked: dict[int, dict[int, bytes]] = {}  # src -> {number: small message taken before its turn}
        self._invalidate = realization().invalidate  # (a write into memory: its version bumped)
        self._header_in = memoryview(bytearray(HEADER_BYTES))  # (recv's fast path: header messages)
        # the last header sent to / received from each rank in a header message: data of a large message that
        # comes without one has that header (a sender sends the header only when it changes)
        self._headers_sent: dict[int, np.ndarray] = {}
        self._headers_got: dict[int, bytes] = {}
        # dst -> (the memoryview of the last large message sent there, its persistent data send (inactive between
        # sends), the sent node weakly: the entry goes with it): a tensor sent again costs a Start
        self._data_sends: dict[int, tuple[memoryview, Any, Any]] = {}
        # recv's checked arguments -> (shape, dtype, wire header bytes, data bytes, the pool's key)
        self._recv_specs: dict[Any, tuple[tuple[int, ...], DType, bytes, int, Any]] = {}
        atexit.register(self._at_exit)

    # ---------------------------------------------------------------- state
    def _live(self) -> None:
        if self._failure is not None:
            raise TransportClosed(f"rank {self.rank}: the mpi transport failed earlier ({self._failure}); "
                                  "MPI cannot recover: end the job")
        if self._closed:
            raise TransportClosed(f"rank {self.rank}: the mpi transport is closed")

    def _fail(self, err: CommError) -> CommError:
        self._failure = str(err)
        return err

    def _at_exit(self) -> None:
        if self._failure is not None and self.abort_on_failure and self.world_size > 1:
            sys.stdout.flush()
            print(f"tg-mlx-rdma: rank {self.rank} aborts the MPI job after: {self._failure}",
                  file=sys.stderr, flush=True)
            self._comm.Abort(1)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self._at_exit)
        if self._failure is None:
            try:
                self._free_send_inits()  # (the sends complete first: their buffers must outlive them)
            except CommError:
                self._at_exit()
                raise
        if self._failure is not None:
            self._at_exit()  # the peers cannot be left waiting
            return
        for datatype, op in self._user_ops.values():
            op.Free()
            datatype.Free()
        self._user_ops.clear()
        for req in self._posted.values():  # (inactive: a recv never leaves its posted receive active)
            req.Free()
        self._posted.clear()
        self._free_land_inits()
        for _, req, _ in self._data_sends.values():  # (inactive: a large send completes before send returns)
            req.Free()
        self._data_sends.clear()
        self._pool.clear()
        self._comm.Free()
        self._coll.Free()

    # ---------------------------------------------------------------- waiting
    def _wait(self, reqs: list[Any], what: What, peer: int | None, idle: Callable[[], None] | None = None) -> None:
        """Poll ``reqs`` until all complete; ``CommTimeout`` (naming ``peer``) after ``self.timeout`` s. ``idle``:
        see ``_until``."""
        testall = self._mpi.Request.Testall
        self._until(lambda: testall(reqs), what, peer, reqs, idle)

    def _until(self, done: Callable[[], bool], what: What, peer: int | None, pending: list[Any],
               idle: Callable[[], None] | None = None) -> None:
        """Call ``done()`` (an MPI test: MPI progresses only inside such calls) until it is true.

        The first ``FAST_POLLS`` calls run without reading the clock (most messages finish there), then it
        polls flat out for ``SPIN_SECONDS``, then yields the CPU between polls, then sleeps 1 ms between
        polls. After ``self.timeout`` s it cancels ``pending`` and raises ``CommTimeout`` naming ``peer``;
        an MPI error raises ``PeerFailed``. Either fails the transport. ``idle``: work to do once the first
        ``IDLE_POLLS`` polls found nothing (the wait has time for it).
        """
        mpi = self._mpi
        try:
            for _ in range(IDLE_POLLS):
                if done():
                    return
            if idle is not None:
                idle()
            for _ in range(FAST_POLLS):
                if done():
                    return
            start = time.monotonic()
            deadline = start + self.timeout
            while not done():
                now = time.monotonic()
                if now >= deadline:
                    break
                if now - start > YIELD_SECONDS:
                    time.sleep(0.001)
                elif now - start > SPIN_SECONDS:
                    time.sleep(0)
            else:
                return
        except mpi.Exception as e:
            raise self._peer_failed(e, what, peer) from e
        for r in pending:
            if r != mpi.REQUEST_NULL:
                try:
                    r.Cancel()
                except mpi.Exception:
                    pass
        if peer is not None:
            blame = f"rank {peer} did not answer (dead, stuck, or in a different call)"
        else:
            blame = f"not every rank of 0..{self.world_size - 1} joined (one is dead, stuck, or in a different call)"
        raise self._fail(CommTimeout(f"rank {self.rank}: {_text(what)} did not complete within {self.timeout:g} s: "
                                     f"{blame}", peer))

    def _peer_failed(self, e: Any, what: What, peer: int | None) -> CommError:
        """The transport's failure after the MPI error ``e`` in ``what`` (it is failed from now on)."""
        who = f" with rank {peer}" if peer is not None else ""
        return self._fail(PeerFailed(f"rank {self.rank}: {_text(what)} failed{who}: {e.Get_error_string()}", peer))

    # ---------------------------------------------------------------- point to point
    def _block(self, handle: Handle) -> None:
        self._until(handle._advance, lambda: handle.what, handle.peer, [])

    def _requests(self, reqs: list[Any]) -> Callable[[], bool]:
        """A stage test: all of ``reqs`` completed."""
        testall = self._mpi.Request.Testall
        return lambda: testall(reqs)

    def send(self, tensor: Tensor, dst: int) -> None:
        if self._failure is not None or self._closed:
            self._live()
        if type(dst) is not int or dst not in self._peers:  # (the ranks checked before)
            self._peers.add(self._check_peer(dst, "dst"))
        # (the fast paths of isend: no handle; message_of's common case inline: a tensor sent before, its memory
        # unchanged since, on a device with nothing to synchronize. After a 1 MiB copy every call made is cold)
        node = getattr(tensor, "uop", None)
        hit = _SEND_VIEWS.get(id(node))  # (no node has id(None))
        if hit is not None and hit[0]() is node and hit[1] is None and hit[4].version == hit[5]:
            data, keep, header = hit[2], tensor, hit[3]
        else:
            data, keep, header = message_of(tensor)
        nbytes = data.nbytes
        if nbytes > SMALL:
            if nbytes > CHUNK:
                self.isend(keep, dst).wait()
                return
            self._seq_out[dst] += 1
            last = self._data_sends.get(dst)
            try:
                if last is not None and last[0] is data and self._headers_sent.get(dst) is header:
                    req = last[1]  # (the same memory again, no header: the persistent send of its data)
                    req.Start()
                    if not req.Test():  # (while the receiver takes the data: the next result ahead)
                        self._until(req.Test, lambda: f"send of {describe_header(header)} to rank {dst}", dst, [req],
                                    self._make_ahead)
                else:
                    self._send_large(data, keep, header, dst)
            except BaseException:
                # interrupted or failed: its persistent send may still be active, so it is given up (never started
                # again nor freed while MPI may read the memory)
                self._data_sends.pop(dst, None)
                raise
            return
        # A copy of the data goes out, so the send returns without waiting for the receiver: that wait (a handshake
        # above the byte transport's eager limit) would put the receiver's own work into this rank's time. The
        # request is completed when its buffer comes round again (or at close), or by a recv while it waits.
        slot = self._slot
        self._slot = slot.next
        if slot.busy:
            self._finish_send(slot)
        if slot.header is not header:  # (the same tensor sent again: its header is there already)
            slot.buf[:HEADER_BYTES] = header.data.cast("B")
            slot.header = header
        seq = self._seq_out[dst]
        slot.words[SEQ_WORD] = seq
        self._seq_out[dst] = seq + 1
        if slot.nbytes != nbytes or slot.dst != dst:  # (the buffer's last request: same size and rank, no lookup)
            self._bind(slot, nbytes, dst)
        # The data is copied unless this buffer holds it already: the same send view (one is handed out only while
        # its memory is unchanged: ``_SEND_VIEWS``). Writing the bytes again would cost more than the copy: the
        # receiver then reads them from the cache of this rank's core instead of its own (~1 us at 4 KiB).
        if slot.source is not data:
            slot.source = None  # (an interrupt between the copy and the next line must not leave the old name)
            slot.data[:] = data
            slot.source = data
        slot.req.Start()
        slot.busy = True

    def _send_large(self, data: memoryview, keep: Tensor, header: np.ndarray, dst: int) -> None:
        """Send ``data`` (at most ``CHUNK`` bytes) with its header when new, waiting until it is out (``send`` sends
        the data it sent last to ``dst`` by its persistent send itself)."""
        reqs = self._header_if_new(header, dst)
        reqs.append(self._data_send(data, keep, dst))
        if not self._mpi.Request.Testall(reqs):
            self._wait(reqs, lambda: f"send of {describe_header(header)} to rank {dst}", dst, self._make_ahead)

    def _header_if_new(self, header: np.ndarray, dst: int) -> list[Any]:
        """The request of a header message to ``dst`` (tag ``TAG_HEADER``) when ``header`` is not the last one sent
        there by a header message (the receiver checks a message without one against that); else none."""
        if self._headers_sent.get(dst) is header:  # (header_of hands out one array per shape and dtype)
            return []
        self._headers_sent[dst] = header
        return [self._comm.Isend([header, self._mpi.INT64_T], dst, TAG_HEADER)]

    def _data_send(self, data: memoryview, keep: Tensor, dst: int) -> Any:
        """The started request of a data message (tag ``TAG_DATA``) of ``data`` (``keep``'s) to ``dst``: a persistent
        one, kept as the last of ``dst`` (``_data_sends``) while ``keep``'s node lives, so sending the same tensor
        again costs a ``Start`` (less to run between one large message and the next, when the copy of the last one
        has just pushed the interpreter's own memory out of the cache)."""
        mpi = self._mpi
        self._drop_data_send(dst)
        if data.nbytes > RecvPool.MAX_MESSAGE:  # (the fixed cost of a larger message does not matter)
            return self._comm.Isend([data, mpi.BYTE], dst, TAG_DATA)
        req = self._comm.Send_init([data, mpi.BYTE], dst, TAG_DATA)
        # (the request holds the memory: given up with the node, so the allocator can hand it out again)
        self._data_sends[dst] = (data, req, weakref.ref(keep.uop, lambda _: self._drop_data_send(dst, req)))
        req.Start()
        return req

    def _drop_data_send(self, dst: int, req: Any = None) -> None:
        """Free ``dst``'s persistent data send (only if it is ``req``, when given)."""
        last = self._data_sends.get(dst)
        if last is not None and (req is None or last[1] is req) and self._failure is None and not self._closed:
            del self._data_sends[dst]
            last[1].Free()  # (inactive: every large send completes before send returns)

    def _bind(self, slot: _Staging, nbytes: int, dst: int) -> None:
        """Give ``slot`` the persistent request sending its header and ``nbytes`` of data to ``dst`` (tag
        ``TAG_SMALL``; one per buffer, size and rank: no new request per message). Up to ``SEND_INITS`` are kept,
        then all are freed."""
        key = (slot.index, nbytes, dst)
        req = self._send_inits.get(key)
        if req is None:
            if len(self._send_inits) >= SEND_INITS:
                self._free_send_inits()
            req = self._send_inits[key] = self._comm.Send_init([slot.buf[:HEADER_BYTES + nbytes], self._mpi.BYTE],
                                                               dst, TAG_SMALL)
        slot.nbytes, slot.dst, slot.req, slot.data = nbytes, dst, req, slot.buf[HEADER_BYTES:HEADER_BYTES + nbytes]
        slot.source = None

    def _free_send_inits(self) -> None:
        self._finish_sends()  # (a persistent request is freed once it is not active)
        for req in self._send_inits.values():
            req.Free()
        self._send_inits.clear()
        for slot in self._slots:
            slot.nbytes = slot.dst = -1

    def _make_ahead(self) -> None:
        """Make the result of a receive like the last one ahead (a send waiting for its receiver has the time)."""
        if self._last_recv is not None:
            self._pool.prepare(*self._last_recv)

    def _finish_send(self, slot: _Staging) -> None:
        """Wait until the small send from ``slot`` is complete, so its buffer is free."""
        if not slot.req.Test():
            self._wait([slot.req], f"an earlier send to rank {slot.dst}", slot.dst)
        slot.busy = False

    def _finish_sends(self) -> None:
        for slot in self._slots:
            if slot.busy:
                self._finish_send(slot)

    def isend(self, tensor: Tensor, dst: int) -> Handle:
        self._live()
        self._check_peer(dst, "dst")
        data, keep, header = message_of(tensor)
        mpi, comm = self._mpi, self._comm
        seq = self._seq_out[dst]
        self._seq_out[dst] = seq + 1
        if data.nbytes <= SMALL:  # one message, header and data: a copy is cheaper than a second message
            packed = bytearray(HEADER_BYTES + data.nbytes)
            packed[:HEADER_BYTES] = header.data.cast("B")
            memoryview(packed)[:HEADER_BYTES].cast("q")[SEQ_WORD] = seq
            packed[HEADER_BYTES:] = data
            reqs = [comm.Isend([packed, mpi.BYTE], dst, TAG_SMALL)]
        else:  # the header when it is not the one sent last to dst, then the data
            reqs = self._header_if_new(header, dst)
            reqs += [comm.Isend([data[start:start + CHUNK], mpi.BYTE], dst, TAG_DATA)
                     for start in range(0, data.nbytes, CHUNK)]

        def steps() -> Steps:
            yield self._requests(reqs)
            kept.clear()  # the data may be freed only now
        kept = [keep]
        return Handle(self, steps(), lambda: f"send of {describe_header(header)} to rank {dst}", dst)

    def recv(self, shape: int | Sequence[int], dtype: Any, src: int, device: str | None = None,
             out: Tensor | None = None) -> Tensor:
        # The fast path (no handle) when no other receive from src is under way, no message from src waits aside
        # and the arguments were seen before: a small message is taken by a posted receive (``_await_small``), a
        # larger one probed here, and one the fast path does not take (several chunks, a mismatch) goes on to
        # irecv's stages. out= is checked first (a bad out consumes no message) and its write announced only once
        # the header matched; the data then lands in out's memory.
        key = (shape, dtype, src, device)
        spec = self._recv_specs.get(key) if isinstance(shape, (int, tuple)) and isinstance(dtype, str) else None
        if spec is None or self._probers.get(src) or (self._parked and src in self._parked) or \
                (out is not None and device is not None):
            result: Tensor = self.irecv(shape, dtype, src, device, out, blocking=True).wait()
            if spec is None and len(self._recv_specs) < 256 and isinstance(dtype, str):
                dims, dt = as_shape(shape), as_dtype(dtype)  # (valid: the call went through)
                wire = make_header(dims, dt)
                self._recv_specs[key] = (dims, dt, wire.tobytes()[:KEY_BYTES], header_nbytes(wire),
                                         (dims, dt, device))
            return result
        if self._failure is not None or self._closed:
            self._live()
        dims, dt, want, nbytes, pool_key = spec
        if out is None:
            self._last_recv = pool_key
        direct = None  # out's Buffer and memory, when the write can go straight in (announced once the header matched)
        if out is not None:
            # (out's node is what check_output looks at: the same node, the same answer; in_place_bytes's answer
            # for it holds until something new reads the node or its name, which the node's readers count)
            checked, node = self._out_checked, out.uop
            readers = node.readers
            in_place = checked[3]() if readers is not None and readers.changes[0] == checked[4] else None
            if checked[0]() is not out or checked[1]() is not node or checked[2] is not spec:
                check_output(out, dims, dt)
                in_place = None
            if in_place is not None:
                direct = in_place, view_of(in_place)
            else:
                direct = in_place_bytes(out, dims, dt)
                self._out_checked = (weakref.ref(out), weakref.ref(node), spec,
                                     _dead if direct is None else weakref.ref(direct[0]),
                                     -1 if readers is None else readers.changes[0])
        mpi, status = self._mpi, self._status
        ready = None  # (a larger message's target, found before the probe)
        if nbytes <= SMALL:
            pool = self._pool
            message = self._await_small(src, lambda: f"recv of {dt.name}{list(dims)} from rank {src}",
                                        None if out is not None else lambda: pool.prepare_key(pool_key))
            if message is None:  # (the next message from src is in the landing buffer)
                count, landing = self._count, self._landing
                if count != HEADER_BYTES + nbytes or self._landing_key.tobytes() != want:
                    self._refuse_small(bytes(landing[:count]), dims, dt, src)
                if direct is not None:  # (the common cases inline: out=, and a pooled result)
                    self._invalidate(direct[0])
                    direct[1][:] = landing[HEADER_BYTES:count]
                    return out  # type: ignore[return-value]
                if out is None:
                    got = pool.take_key(pool_key)
                    if got is not None:
                        got[1].elements[:] = landing[HEADER_BYTES:count]
                        return got[0]
                t, mv, commit = self._target(dims, dt, device, out, nbytes, direct)
                mv[:] = landing[HEADER_BYTES:count]
                return _committed(commit, t)
        else:
            if out is None and HEADER_BYTES + SMALL < nbytes <= CHUNK and self._headers_got.get(src) == want:
                got = self._pool.take_key(pool_key)  # (a pooled result: received into by a receive posted now)
                if got is not None:
                    return self._land(src, got, nbytes, dims, dt)
            # (a pooled result first: the likely message, the data, is received as soon as the probe finds it)
            ready = self._pool.take(dims, dt, device) if out is None else None
            message = self._probe_next(src, lambda: f"recv of {dt.name}{list(dims)} from rank {src}")
        count, tag = status.Get_count(mpi.BYTE), status.Get_tag()
        if nbytes <= CHUNK:  # one data message, after its header or without one (the header sent last)
            if tag == TAG_HEADER and count == HEADER_BYTES:
                self._receive(message, self._header_in, src)
                self._headers_got[src] = header = self._header_in[:KEY_BYTES].tobytes()
                if header != want:
                    self._refuse(np.frombuffer(self._header_in, np.int64), dims, dt, src, True)
                t, mv, commit = self._target(dims, dt, device, out, nbytes, direct, ready)
                req = self._comm.Irecv([mv, mpi.BYTE], src, TAG_DATA)  # (the header said: exactly nbytes)
                if not req.Test():
                    self._wait([req], lambda: f"recv of {dt.name}{list(dims)} from rank {src}", src)
                return _committed(commit, t)
            if tag == TAG_DATA and count == nbytes and self._headers_got.get(src) == want:
                t, mv, commit = self._target(dims, dt, device, out, nbytes, direct, ready)
                self._receive(message, mv, src)
                return _committed(commit, t)
        ready = None  # (back to the pool: the fallback takes its own target)
        result = self.irecv(dims, dt, src, device, out, blocking=True, found=(message, status)).wait()
        self._status = mpi.Status()  # (the handle's stages read that status)
        return result

    def _target(self, dims: tuple[int, ...], dt: DType, device: str | None, out: Tensor | None, nbytes: int,
                direct: tuple[Any, memoryview] | None, ready: Any = None,
                ) -> tuple[Tensor, memoryview, Callable[[], None]]:
        """Where recv's fast path puts the data: ``ready`` (a pooled result taken before), a pooled result, or out
        (checked by ``check_output``; ``direct``: from ``in_place_bytes``), whose write is announced now."""
        if ready is not None:
            return ready  # type: ignore[no-any-return]
        if out is None:
            return self._pool.take(dims, dt, device)
        if direct is not None:
            self._invalidate(direct[0])
            return out, direct[1], _no_commit
        return (out, *write_into(out, nbytes))

    def _refuse(self, got: np.ndarray, dims: tuple[int, ...], dt: DType, src: int, data_follows: bool) -> None:
        """Raise ``PeerMismatch`` for the sender's header ``got``; when its data follows in data messages, receive
        and drop them first, so the next message from ``src`` arrives intact."""
        what = f"recv of {dt.name}{list(dims)} from rank {src}"
        if data_follows:
            self._check_or_drain(got, header_of(dims, dt), src, 0, what)
            self._drain(header_nbytes(got), src, what)  # (only the padding differs: its data is not ours either)
        else:
            check_header(got, header_of(dims, dt), src, self.rank)
        raise PeerMismatch(f"rank {self.rank}: {what}: a header that differs only in its padding", src)

    def _receive(self, message: Any, into: memoryview, src: int) -> None:
        """Receive the probed ``message`` (all of ``into``'s bytes)."""
        req = message.Irecv([into, self._mpi.BYTE])
        if not req.Test():  # (the data came with the probed message unless the byte transport splits it)
            self._wait([req], lambda: f"recv from rank {src}", src)

    def irecv(self, shape: int | Sequence[int], dtype: Any, src: int, device: str | None = None,
              out: Tensor | None = None, blocking: bool = False, found: tuple[Any, Any] | None = None) -> Handle:
        self._live()
        self._check_peer(src, "src")
        dims, dt = as_shape(shape), as_dtype(dtype)
        want = make_header(dims, dt)
        nbytes = header_nbytes(want)
        cell: list[Handle] = []
        if out is not None:
            if device is not None:
                raise ValueError("recv takes device= or out=, not both (the result lives on out's device)")
            check_output(out, dims, dt)  # (a bad out consumes no message)
        # A non-blocking receive announces its write into out now (a realize that reads out waits for it); a
        # blocking one once the header matched.
        made = [] if blocking else [recv_target(dims, dt, device, out, self._pool, lambda: cell[0]._settle())]

        def target() -> tuple[Tensor, memoryview, Callable[[], None]]:
            if not made:
                made.append(recv_target(dims, dt, device, out, self._pool))
            return made[0]
        mpi, comm = self._mpi, self._comm
        probers = self._probers.setdefault(src, [])

        def what() -> str:
            return f"recv of {describe_header(want)} from rank {src}"
        # The first message is matched by probing, not by a posted receive: its size and tag come with it, so a
        # sender that sent more bytes than asked for never overruns the buffer (Open MPI 4.1 corrupts memory on a
        # truncated receive). Receives from one rank probe in the order they were made (waiting on a later one
        # first moves the earlier ones on), so they match the sends in order.
        # A small message a posted receive took before its turn (``_await_small``) is taken from where it was set
        # aside when its turn comes. Each message matched is counted (``_seq_in``).
        status, improbe = mpi.Status() if found is None else found[1], comm.Improbe
        message: list[Any] = [None if found is None else found[0]]
        early: list[bytes | None] = [None]

        def probed() -> bool:
            if not _first_in_line(probers, handle):  # (an earlier receive from src probes first)
                return False
            if self._parked:
                early[0] = self._early(src)
                if early[0] is not None:
                    return True
            message[0] = improbe(src, mpi.ANY_TAG, status)
            if message[0] is None:
                return False
            self._seq_in[src] += 1
            return True

        def received(into: Any) -> Callable[[], bool]:
            return self._requests([message[0].Irecv([into, mpi.BYTE])])

        def steps() -> Steps:
            if message[0] is None:
                yield probed
            aside = early[0]
            count, tag = (status.Get_count(mpi.BYTE), status.Get_tag()) if aside is None else (len(aside), TAG_SMALL)
            try:  # (the next receive from src probes once this one has matched all its messages)
                if tag == TAG_SMALL:  # header and data
                    # (a message shorter than a header, zero-padded, is refused as not a tensor by check_header)
                    packed = aside.ljust(HEADER_BYTES, b"\0") if aside is not None else \
                        bytearray(max(count, HEADER_BYTES))
                    if aside is None:
                        yield received(memoryview(packed)[:count])
                    check_header(np.frombuffer(packed, np.int64, HEADER_WORDS), want, src, self.rank)
                    t, mv, commit = target()
                    mv[:] = memoryview(packed)[HEADER_BYTES:]
                    return _committed(commit, t)
                first = min(nbytes, CHUNK)
                if tag == TAG_HEADER and count == HEADER_BYTES:  # the header, then the data in chunks
                    got = np.empty(HEADER_WORDS, dtype=np.int64)
                    yield received(got)
                    self._headers_got[src] = got.tobytes()[:KEY_BYTES]
                    self._check_or_drain(got, want, src, 0, what)
                    t, mv, commit = target()
                    yield self._requests([comm.Irecv([mv[s:s + CHUNK], mpi.BYTE], src, TAG_DATA)
                                          for s in range(0, mv.nbytes, CHUNK)])
                    return _committed(commit, t)
                last = self._headers_got.get(src)
                if tag == TAG_DATA and last == want.tobytes()[:KEY_BYTES] and count == first:  # (the header sent last)
                    t, mv, commit = target()
                    yield self._requests([message[0].Irecv([mv[:first], mpi.BYTE])] +
                                         [comm.Irecv([mv[s:s + CHUNK], mpi.BYTE], src, TAG_DATA)
                                          for s in range(first, mv.nbytes, CHUNK)])
                    return _committed(commit, t)
                yield received(bytearray(max(count, 0)))  # (dropped: a mismatch or a message not of this transport)
                if tag == TAG_DATA and last is not None:
                    self._check_or_drain(np.frombuffer(last, np.int64), want, src, count, what)
                    raise PeerMismatch(f"rank {self.rank}: {what()}: the first data message has {count} bytes, "
                                       f"not {first}", src)  # (same header, other size: not between two of us)
                raise PeerMismatch(f"rank {self.rank}: {what()}: rank {src} sent a message of {count} bytes with "
                                   f"tag {tag:#x} that is not a tgcore tensor; is the peer using the same "
                                   "tg-mlx-rdma version?", src)
            finally:
                probers.remove(handle)
        handle = Handle(self, steps(), what, src)
        probers.append(handle)
        cell.append(handle)
        return handle

    def _check_or_drain(self, got: np.ndarray, want: np.ndarray, src: int, taken: int, what: What) -> None:
        """``check_header``; on a mismatch first receive and drop the sender's data messages (all but ``taken``
        bytes), so the next message from ``src`` arrives intact."""
        try:
            check_header(got, want, src, self.rank)
        except PeerMismatch:
            if int(got[0]) == MAGIC:
                self._drain(header_nbytes(got) - taken, src, what)
            raise

    def _recv_bytes(self, mv: memoryview, src: int, what: What) -> None:
        mpi, comm = self._mpi, self._comm
        reqs = [comm.Irecv([mv[s:s + CHUNK], mpi.BYTE], src, TAG_DATA) for s in range(0, mv.nbytes, CHUNK)]
        if reqs:
            self._wait(reqs, what, src)

    def _drain(self, nbytes: int, src: int, what: What) -> None:
        if nbytes > 0:
            self._recv_bytes(memoryview(bytearray(nbytes)), src,
                             lambda: _text(what) + " (discarding the mismatched data)")

class _Staging:
    """A staging buffer of small sends (``HEADER_BYTES + SMALL`` bytes; its words, for the sequence number), the
    header in it, its last persistent request (``nbytes`` of data to ``dst``) with the data's place, what the data
    was copied from (``source``: a memoryview, None after a rebind), and whether that request is on its way
    (``busy``: completed before the buffer is written again)."""

    __slots__ = ("index", "buf", "words", "header", "nbytes", "dst", "req", "data", "source", "busy", "next")

    def __init__(self, index: int) -> None:
        self.index, self.buf = index, memoryview(bytearray(HEADER_BYTES + SMALL))
        self.words = self.buf.cast("q")
        self.header: np.ndarray | None = None
        self.nbytes = self.dst = -1
        self.req: Any = None
        self.data: memoryview = self.buf
        self.source: memoryview | None = None
        self.busy = False
        self.next: _Staging = self


def _committed(commit: Callable[[], None], t: Tensor) -> Tensor:
    commit()
    return t


def _dead() -> None:
    """(a weak reference whose object is gone)"""


def _text(what: What) -> str:
    return what if isinstance(what, str) else what()

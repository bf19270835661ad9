"""How the ``mpi`` transport takes the next message from a rank (``MPINext``, a base of ``mpi.MPITransport``).

In:  the transport's private communicator, the count of messages taken from each rank so far (``_seq_in``), its
     receive pool's results and its waiting loop.
Out: the next message from a rank, taken one of three ways: a small one by a receive of any small message posted into
     the landing buffer (``_await_small``); a large one whose header is the one that rank sent last, straight into a
     pooled result by a receive of any message posted before it arrives (``_land``); any other by a matched probe
     (``_probe_next``), after which the caller receives it. What a posted receive took before its turn, or as its
     wait was interrupted, is set aside for the receive whose turn it is (``_parked``).

A posted receive is ready the moment its message arrives: MPI receives it inside the poll that sees it, where a probe
hands the message back to Python first. Neither posted receive can meet a message larger than its buffer (Open MPI
4.1 overruns the buffer of a truncated receive): see ``_await_small`` and ``_land``.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_mlx_rdma.mpi_collectives import MPICollectives
from tg_mlx_rdma.transport import (
    HEADER_BYTES,
    HEADER_WORDS,
    KEY_BYTES,
    SEQ_WORD,
    CommError,
    PeerFailed,
    PeerMismatch,
    check_header,
    header_nbytes,
    header_of,
    make_header,
)

if TYPE_CHECKING:
    from tgcore.dtype import DType
    from tgcore.tensor import Tensor

__all__ = ["FAST_POLLS", "TAG_DATA", "TAG_HEADER", "TAG_SMALL", "MPINext", "What"]

What = str | Callable[[], str]  # what a wait is for, for error messages (a callable: built only on failure)

TAG_HEADER = 0x7401
TAG_DATA = 0x7402
TAG_SMALL = 0x7403  # header and data in one message
FAST_POLLS = 512  # polls before the first clock read
OTHER_POLLS = 16  # polls of a posted receive per probe for a message of another kind (see _poll_posted)
LAND_INITS = 64  # persistent receives into pooled results kept (one per rank and pooled buffer: _land)


class MPINext(MPICollectives):
    """Taking the next message from a rank (see the module docstring); ``MPITransport`` provides the state and
    waiting declared here."""

    if TYPE_CHECKING:
        _status: Any
        _seq_in: list[int]
        _count: int
        _landing: memoryview
        _landing_words: memoryview
        _posted: dict[int, Any]
        _land_inits: dict[tuple[int, Any], Any]
        _parked: dict[int, dict[int, bytes]]
        _headers_got: dict[int, bytes]
        _slot: Any
        _failure: str | None

        def _until(self, done: Callable[[], bool], what: What, peer: int | None, pending: list[Any],
                   idle: Callable[[], None] | None = None) -> None: ...
        def _peer_failed(self, e: Any, what: What, peer: int | None) -> CommError: ...
        def _fail(self, err: CommError) -> CommError: ...
        def _refuse(self, got: np.ndarray, dims: tuple[int, ...], dt: DType, src: int, data_follows: bool) -> None: ...
        def _recv_bytes(self, mv: memoryview, src: int, what: What) -> None: ...

    def _land(self, src: int, got: tuple[Tensor, Any], nbytes: int, dims: tuple[int, ...], dt: DType) -> Tensor:
        """The next message from ``src``, a tensor of ``nbytes`` (more than ``HEADER_BYTES + SMALL``), received
        straight into the pooled result ``got`` (``RecvPool.take_key``'s: nobody else sees its memory yet) by a
        receive of any message posted before it arrives; recv's path when the header of ``dims``/``dt`` is the last
        one ``src`` sent in a header message.

        The next message is then, between two of us, that tensor's data (exactly ``nbytes``: data comes without a
        header only when its header is the last one sent), a header message (a new header, which is never this
        recv's: refused, its data received and dropped) or a small message (never a tensor this large: refused);
        each fits the buffer, so none is truncated. The posted receive is never left active: an exception during the
        wait cancels it, and a message it took meanwhile is set aside for the next recv (``_withdraw_landed``)."""
        mpi, status = self._mpi, self._status
        pooled = got[1]
        into = pooled.elements
        req = self._land_inits.get((src, pooled))  # (a persistent receive per rank and pooled buffer)
        if req is None:
            req = self._land_init(src, pooled)
        test = req.Test
        try:
            req.Start()
            if not test(status):
                # (polled here first: the interpreter's state is cold after a 1 MiB copy, and every frame
                # left on the way back to the caller costs ~0.5 us then)
                for _ in range(FAST_POLLS):
                    if test(status):
                        break
                else:
                    self._until(lambda: bool(test(status)), lambda: f"recv of {dt.name}{list(dims)} from rank {src}",
                                src, [req])
        except mpi.Exception as err:
            raise self._peer_failed(err, f"recv of {dt.name}{list(dims)}", src) from err
        except BaseException:
            if self._failure is None:  # (a failed transport is not used again: its requests do not matter)
                self._withdraw_landed(req, into, src, nbytes, dims, dt)
            raise
        self._seq_in[src] += 1
        count, tag = status.Get_count(mpi.BYTE), status.Get_tag()
        if tag == TAG_DATA and count == nbytes:
            return got[0]
        what = f"recv of {dt.name}{list(dims)} from rank {src}"
        if tag == TAG_HEADER and count == HEADER_BYTES:
            header = bytes(into[:HEADER_BYTES])
            self._headers_got[src] = header[:KEY_BYTES]
            if header[:KEY_BYTES] != make_header(dims, dt).tobytes()[:KEY_BYTES]:
                self._refuse(np.frombuffer(header, np.int64), dims, dt, src, True)
            self._recv_bytes(into, src, what)  # (the same header again: not between two of us, but its data is ours)
            return got[0]
        if tag == TAG_SMALL:
            self._refuse_small(bytes(into[:count]), dims, dt, src)
        raise PeerMismatch(f"rank {self.rank}: {what}: rank {src} sent a message of {count} bytes with tag {tag:#x} "
                           "that is not a tgcore tensor; is the peer using the same tg-mlx-rdma version?", src)

    def _land_init(self, src: int, pooled: Any) -> Any:
        """The persistent receive of any message from ``src`` into ``pooled``'s elements (``_land``'s). Up to
        ``LAND_INITS`` are kept (each holds its buffer), then all are freed."""
        if len(self._land_inits) >= LAND_INITS:
            self._free_land_inits()
        req = self._land_inits[(src, pooled)] = self._comm.Recv_init([pooled.elements, self._mpi.BYTE], src,
                                                                     self._mpi.ANY_TAG)
        return req

    def _forget_landing(self, pooled: Any) -> None:
        """Free the persistent receives into a buffer the pool gave up (each held its memory)."""
        for key in [key for key in self._land_inits if key[1] is pooled]:
            self._land_inits.pop(key).Free()  # (inactive: _land never leaves its receive active)

    def _free_land_inits(self) -> None:
        for req in self._land_inits.values():  # (inactive: _land never leaves its receive active)
            req.Free()
        self._land_inits.clear()

    def _withdraw_landed(self, req: Any, into: memoryview, src: int, nbytes: int, dims: tuple[int, ...],
                         dt: DType) -> None:
        """Cancel ``_land``'s receive ``req`` (an interrupted wait); a message it took meanwhile is set aside for the
        next recv from ``src`` (``_parked``, as a small message: header and data), or, a header message, becomes the
        last header received (its data is the next message)."""
        mpi = self._mpi
        req.Cancel()
        status = mpi.Status()
        self._until(lambda: bool(req.Test(status)), f"cancelling a receive from rank {src}", src, [])
        if status.Is_cancelled():
            return
        if status.Get_source() == mpi.ANY_SOURCE:
            # an inactive request's empty status: the receive had completed (an interrupt right after its test
            # returned), and the status that test filled tells what it took
            status = self._status
        count, tag, e = status.Get_count(mpi.BYTE), status.Get_tag(), self._seq_in[src]
        if tag == TAG_HEADER and count == HEADER_BYTES:
            self._headers_got[src] = bytes(into[:KEY_BYTES])
            return
        if tag == TAG_DATA and count == nbytes:
            message = make_header(dims, dt).tobytes() + bytes(into[:count])
        else:  # (a small message, or one that is not a tensor: refused in its turn)
            message = bytes(into[:count])
        self._parked.setdefault(src, {})[e] = message

    def _await_small(self, src: int, what: What, idle: Callable[[], None] | None) -> Any:
        """Take the next message from ``src`` (one recv's, already counted in ``_seq_in``) with a receive of any
        ``TAG_SMALL`` message posted into the landing buffer, so a small message lands while this polls (no probe,
        then receive, once it is there). Returns None once the next message is in the landing buffer
        (``self._status`` has its size), else the matched probe of the next message, one of another kind.

        The posted receive takes the first small message from ``src`` not taken yet, which need not be the next
        one: a larger message sent before it is not for that receive. Its sequence number (``SEQ_WORD``) tells:
        a small message that came early is set aside (``_parked``) for the receive whose turn it is, and the
        next message is probed. A probe seeing another message first cancels the posted receive (what it took
        meanwhile is delivered or set aside by the same rule). Every ``TAG_SMALL`` message fits the landing buffer
        (``HEADER_BYTES + SMALL`` bytes), so none is truncated. The posted receive is never left active: an
        exception during the wait cancels it and sets aside what it took."""
        mpi, status, comm = self._mpi, self._status, self._comm
        req = self._posted.get(src)
        if req is None:  # (a persistent receive per rank: no new request per message)
            req = self._posted[src] = comm.Recv_init([self._landing, mpi.BYTE], src, TAG_SMALL)
        test = req.Test
        try:
            req.Start()
            landed = test(status) or self._poll_posted(test, src, what, idle)  # (it may be there already)
        except mpi.Exception as err:
            raise self._peer_failed(err, what, src) from err
        except BaseException:
            if self._failure is None:  # (a failed transport is not used again: its requests do not matter)
                self._withdraw(req, src, deliver=False)
            raise
        if landed:
            count, e = status.Get_count(mpi.BYTE), self._seq_in[src]
            if count >= HEADER_BYTES and self._landing_words[SEQ_WORD] == e:  # (_in_turn's common case, inline)
                self._seq_in[src], self._count = e + 1, count
                return None
            if self._in_turn(src, status):
                return None
        elif self._withdraw(req, src):
            return None
        return self._probe_next(src, what)  # (the next message: every small one before it was taken)

    def _probe_next(self, src: int, what: What) -> Any:
        """The matched probe of the next message from ``src`` (its size and tag in ``self._status``), counted."""
        improbe, status, anytag = self._comm.Improbe, self._status, self._mpi.ANY_TAG
        message = improbe(src, anytag, status)  # (a message already there: no closures, no polling loop)
        if message is None:
            found: list[Any] = [None]

            def probed() -> bool:
                found[0] = improbe(src, anytag, status)
                return found[0] is not None
            self._until(probed, what, src, [])
            message = found[0]
        self._seq_in[src] += 1
        return message

    def _poll_posted(self, test: Callable[[Any], bool], src: int, what: What, idle: Callable[[], None] | None) -> bool:
        """Poll the posted receive (``test``) until it completes (True) or a message of another kind from ``src`` is
        there (False): ``idle`` first, then a tight loop that probes for other messages every ``OTHER_POLLS`` polls
        (the common case is the small message: its test alone runs MPI's progress), then ``_until``."""
        mpi, status, iprobe = self._mpi, self._status, self._comm.Iprobe
        try:
            slot = self._slot  # (the next small send's staging buffer, freed now if its send is done)
            if slot.busy and slot.req.Test():
                slot.busy = False
            if idle is not None:
                idle()
            for _ in range(FAST_POLLS // OTHER_POLLS):
                for _ in range(OTHER_POLLS):
                    if test(status):
                        return True
                if iprobe(src, mpi.ANY_TAG):
                    return False
        except mpi.Exception as e:
            raise self._peer_failed(e, what, src) from e
        other = [False]

        def arrived() -> bool:
            if test(status):
                return True
            if iprobe(src, mpi.ANY_TAG):  # (the posted receive takes every small message: this one is not)
                other[0] = True
                return True
            return False
        self._until(arrived, what, src, [], None)
        return not other[0]

    def _withdraw(self, req: Any, src: int, deliver: bool = True) -> bool:
        """Cancel the posted receive ``req``; True when it had taken the next message from ``src`` meanwhile (then it
        is in the landing buffer, and counted), else anything it took is set aside (``_in_turn``; with ``deliver``
        False even the next message: the recv that waited for it is not going on)."""
        req.Cancel()
        status = self._mpi.Status()
        self._until(lambda: bool(req.Test(status)), f"cancelling a receive from rank {src}", src, [])
        if status.Get_source() == self._mpi.ANY_SOURCE and not status.Is_cancelled():
            # an inactive request's empty status: the receive had completed (an interrupt right after its test
            # returned), and the status that test filled tells what it took
            status = self._status
        return not status.Is_cancelled() and self._in_turn(src, status, deliver)

    def _in_turn(self, src: int, status: Any, deliver: bool = True) -> bool:
        """Whether the small message the posted receive took from ``src`` (in the landing buffer, ``status``) is the
        next one, which then counts as received; else (or without ``deliver``) it is kept aside until its turn
        (``_parked``)."""
        count, e = status.Get_count(self._mpi.BYTE), self._seq_in[src]
        seq = self._landing_words[SEQ_WORD] if count >= HEADER_BYTES else e  # (not a tensor: refused in turn)
        if seq == e and deliver:
            self._seq_in[src], self._count = e + 1, count
            return True
        if seq < e:
            raise self._fail(PeerFailed(f"rank {self.rank}: rank {src} sent message number {seq} again after "
                                        f"{e} messages; is the peer using the same tg-mlx-rdma version?", src))
        self._parked.setdefault(src, {})[seq] = bytes(self._landing[:count])
        return False

    def _early(self, src: int) -> bytes | None:
        """The next message from ``src`` when a posted receive took it early (``_in_turn``), now counted."""
        parked = self._parked.get(src)
        if parked is None:
            return None
        e = self._seq_in[src]
        message = parked.pop(e, None)
        if message is not None:
            self._seq_in[src] = e + 1
            if not parked:
                del self._parked[src]
        return message

    def _refuse_small(self, message: bytes, dims: tuple[int, ...], dt: DType, src: int) -> None:
        """Raise ``PeerMismatch`` for a small message (header and data) that a recv of ``dims``/``dt`` did not ask
        for."""
        what = f"recv of {dt.name}{list(dims)} from rank {src}"
        if len(message) >= HEADER_BYTES:
            got = np.frombuffer(message, np.int64, HEADER_WORDS)
            check_header(got, header_of(dims, dt), src, self.rank)
            raise PeerMismatch(f"rank {self.rank}: {what}: a message of {len(message)} bytes for a header of "
                               f"{header_nbytes(got)} data bytes, or a header that differs only in its padding", src)
        raise PeerMismatch(f"rank {self.rank}: {what}: rank {src} sent a message of {len(message)} bytes with tag "
                           f"{TAG_SMALL:#x} that is not a tgcore tensor; is the peer using the same tg-mlx-rdma "
                           "version?", src)

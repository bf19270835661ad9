"""The transport API every backend implements, and the tensor <-> bytes plumbing they share.

In:  tensors on any device; a process group a backend connected (``rank``, ``world_size``).
Out: ``send(tensor, dst)``, ``recv(shape, dtype, src) -> Tensor``, ``allreduce(tensor, op)``,
     ``broadcast(tensor, root)``, ``barrier()``, ``close()``; non-blocking ``isend``/``irecv``/``iallreduce``
     returning a ``Handle`` (``wait()`` gives the result, once); failures as ``CommError`` subclasses naming
     the peer, never a hang: every wait has a deadline (``timeout`` seconds, per call).

Zero copy: a realized, contiguous tensor on a device whose allocator can hand out its memory
(CPU, DISK) is given to the backend as a memoryview of the device buffer itself; ``recv`` and
``allreduce`` allocate the result tensor's buffer first and let the backend write into it. Other
devices go through one host copy each way.

Wire header (what a ``send`` puts in front of the data, so ``recv`` can check it): 16 int64s,
``MAGIC, dtype code, itemsize, nbytes, ndim, *shape`` (zero padded; at most ``MAX_DIMS`` dims), then in the last
word (``SEQ_WORD``) the message's sequence number from its sender to its receiver where a backend needs one (the
mpi backend's one-message sends: see ``mpi.py``; 0 otherwise). A recv checks the words before it.
"""
from __future__ import annotations

import abc
import weakref
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

from tgcore.helpers import prod

if TYPE_CHECKING:
    import numpy as np

    from tgcore.dtype import DType
    from tgcore.tensor import Tensor

__all__ = ["CommError", "CommTimeout", "PeerFailed", "PeerMismatch", "TransportClosed", "Transport", "Handle",
           "RecvPool", "REDUCE_OPS", "WIRE_DTYPES", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 60.0  # seconds a single call may wait for its peers
REDUCE_OPS = ("sum", "max", "min", "prod")
# the wire code of a dtype is its index here: append only
WIRE_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
               "fp8e4m3", "fp8e5m2", "float16", "bfloat16", "float32", "float64")
HEADER_WORDS = 16
HEADER_BYTES = 8 * HEADER_WORDS
MAGIC = 0x7467_5452_0002  # "tgTR", wire version 2 (1 had no sequence number)
SEQ_WORD = HEADER_WORDS - 1  # the header word of the sequence number
KEY_BYTES = 8 * SEQ_WORD  # the header's bytes before it: what a recv compares
MAX_DIMS = SEQ_WORD - 5


class CommError(RuntimeError):
    """A send, recv, collective or connection failed. ``peer`` is the other rank, when one is to blame."""

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class CommTimeout(CommError, TimeoutError):
    """A peer did not answer within the timeout (it may be dead, stuck, or waiting on something else)."""


class PeerFailed(CommError):
    """The backend reported a failure of a peer or of the link to it."""


class PeerMismatch(CommError, ValueError):
    """Both sides answered, but disagree: shape, dtype or size of the tensor, or the reduce op."""


class TransportClosed(CommError):
    """The transport was closed (or failed earlier and cannot be used any more)."""


_DTYPE_CACHE: dict[Any, DType] = {}  # what callers pass ("float32", a numpy dtype) -> DType: a per-message lookup


def as_dtype(dtype: Any) -> DType:
    """A tgcore DType from a DType, a name ("float32") or a numpy dtype."""
    try:
        return _DTYPE_CACHE[dtype]
    except (KeyError, TypeError):  # TypeError: unhashable
        pass
    from tgcore.dtype import DType, dtypes, to_dtype
    dt = to_dtype(dtype) if isinstance(dtype, DType | str) else dtypes.from_numpy(dtype)
    if len(_DTYPE_CACHE) < 256:
        _DTYPE_CACHE[dtype] = dt
    return dt


def wire_code(dt: DType) -> int:
    if dt.name not in WIRE_DTYPES:
        raise TypeError(f"cannot move tensors of dtype {dt.name}; supported: {', '.join(WIRE_DTYPES)}")
    return WIRE_DTYPES.index(dt.name)


def as_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in dims):
        raise ValueError(f"shape must be non-negative ints, got {shape!r}")
    if len(dims) > MAX_DIMS:
        raise ValueError(f"tensors with more than {MAX_DIMS} dimensions cannot be sent (shape {dims}); reshape first")
    return dims


_HEADER_CACHE: dict[tuple[tuple[int, ...], DType], np.ndarray] = {}  # recent headers (read-only arrays)


def broadcast_args(tensor: Any, root: Any, world_size: int) -> tuple[tuple[int, ...], DType]:
    """The shape and dtype of a broadcast's tensor, after checking ``root`` is a rank and ``tensor`` a Tensor."""
    if not isinstance(root, int) or not 0 <= root < world_size:
        raise ValueError(f"root={root!r} is not a rank of this group (ranks 0..{world_size - 1})")
    from tgcore.tensor import Tensor as TensorType
    if not isinstance(tensor, TensorType):
        raise TypeError(f"expected a tgcore Tensor, got {type(tensor).__name__}")
    return as_shape(tensor.shape), tensor.dtype


def make_header(shape: tuple[int, ...], dt: DType) -> np.ndarray:
    """The wire header of a ``dt`` tensor of ``shape``: a read-only int64 array (recent ones are cached)."""
    key = (shape, dt)
    h = _HEADER_CACHE.get(key)
    if h is not None:
        return h
    import numpy as np
    n = 1
    for d in shape:
        n *= d
    words = [MAGIC, wire_code(dt), dt.itemsize, n * dt.itemsize, len(shape), *shape]
    h = np.array(words + [0] * (HEADER_WORDS - len(words)), dtype=np.int64)
    h.flags.writeable = False
    if len(_HEADER_CACHE) >= 256:
        _HEADER_CACHE.clear()
    _HEADER_CACHE[key] = h
    return h


def header_of(shape: Any, dt: DType) -> np.ndarray:
    """``make_header`` for a shape that may be any sequence of ints, checked (``as_shape``) on a cache miss."""
    h = _HEADER_CACHE.get((shape, dt)) if type(shape) is tuple else None
    return h if h is not None else make_header(as_shape(shape), dt)


def describe_header(h: np.ndarray) -> str:
    """``float32[2, 3]`` for a header."""
    code, ndim = int(h[1]), int(h[4])
    name = WIRE_DTYPES[code] if 0 <= code < len(WIRE_DTYPES) else f"<dtype code {code}>"
    return f"{name}{list(int(d) for d in h[5:5 + ndim])}"


def check_header(got: np.ndarray, want: np.ndarray, src: int, me: int) -> None:
    """Raise ``PeerMismatch`` when the sender's header ``got`` is not what this recv asked for."""
    if got[:SEQ_WORD].tobytes() == want[:SEQ_WORD].tobytes():  # the common case, in well under a microsecond
        return
    if int(got[0]) != MAGIC:
        raise PeerMismatch(f"rank {me}: message from rank {src} is not a tgcore tensor (bad header "
                           f"{int(got[0]):#x}); is the peer using the same tg-mlx-rdma version?", peer=src)
    if (got[1:SEQ_WORD] != want[1:SEQ_WORD]).any():
        raise PeerMismatch(f"rank {me}: recv expected {describe_header(want)} from rank {src}, but rank {src} "
                           f"sent {describe_header(got)}; make the recv's shape and dtype match the send", peer=src)


def header_nbytes(h: np.ndarray) -> int:
    return int(h[3])


# ---------------------------------------------------------------------------------------------- tensor memory

_STATE: list[Any] = []  # tgcore.realization, looked up once (a lookup per message costs ~2 us)


def realization() -> Any:
    """``tgcore.realization`` (looked up once)."""
    if not _STATE:
        import tgcore
        _STATE.append(tgcore.realization)
    return _STATE[0]


def _buffer_of(t: Tensor) -> Any:
    """The runtime Buffer holding a realized, contiguous tensor (realized first), or None for a view."""
    return realization().buffer_of(t)


def tensor_bytes(t: Tensor) -> tuple[memoryview, Tensor]:
    """The tensor's bytes (realized first) and the tensor that owns them (keep it alive while in use).

    Zero-copy on devices whose allocator allows it; otherwise a host copy. A tensor sent again with the same
    node (a realized tensor nobody wrote into since: a write gives it a new node) reuses the memoryview found
    the last time (``_SEND_VIEWS``; its device is still synchronized first).
    """
    hit = send_view(t)
    if hit is not None:
        return hit[2], t
    return _new_send_view(t)


def send_view(t: Any) -> tuple[Any, Any, memoryview, np.ndarray, Any, int] | None:
    """``t``'s entry in ``_SEND_VIEWS`` (its memoryview ``[2]`` and wire header ``[3]``) while the memory of its node
    is unchanged (its device synchronized now), else None."""
    u = getattr(t, "uop", None)
    hit = _SEND_VIEWS.get(id(u))  # (no node has id(None))
    if hit is not None and hit[0]() is u and hit[4].version == hit[5]:
        if hit[1] is not None:
            hit[1].synchronize()
        return hit
    return None


def _new_send_view(t: Tensor) -> tuple[memoryview, Tensor]:
    """``tensor_bytes`` of a tensor without a valid ``_SEND_VIEWS`` entry (one is made when it can be kept)."""
    from tgcore.tensor import Tensor
    if not isinstance(t, Tensor):
        raise TypeError(f"expected a tgcore Tensor, got {type(t).__name__}")
    if t.numel() == 0:
        return memoryview(b""), t
    buf = _buffer_of(t)
    if buf is None:  # a view of a larger buffer: materialize it contiguously
        t = t.contiguous().realize()
        buf = _buffer_of(t)
        if buf is None:
            raise RuntimeError(f"could not get a contiguous buffer for {t!r}")
    mv = buf.as_buffer()
    u = t.uop
    if buf.allocator.can_zero_copy and mv.nbytes <= _SEND_VIEW_BYTES and u.op.name in ("BUFFER", "RESHAPE"):
        if len(_SEND_VIEWS) >= 32:
            _SEND_VIEWS.clear()
        key = id(u)  # (the entry goes with its node: the memoryview never keeps freed memory alive)
        _SEND_VIEWS[key] = (weakref.ref(u, _forget(_SEND_VIEWS, key)), to_synchronize(buf.dev), mv,
                            header_of(t.shape, t.dtype), buf.base, buf.base.version)
    return mv, t


def message_of(t: Tensor) -> tuple[memoryview, Tensor, np.ndarray]:
    """``tensor_bytes`` and the tensor's wire header (remembered with the memoryview: a send's fast path)."""
    hit = send_view(t)
    if hit is not None:
        return hit[2], t, hit[3]
    mv, keep = _new_send_view(t)
    return mv, keep, header_of(keep.shape, keep.dtype)


# id(node) -> (the node, weakly; its device (None: nothing to synchronize); a memoryview of its memory; its wire
# header; the base Buffer and its version then: a write since, e.g. an assign that copied the old values aside for
# this node, makes the entry stale): realized tensors sent recently, small ones (their per-message cost matters)
_SEND_VIEWS: dict[int, tuple[Any, Any, memoryview, np.ndarray, Any, int]] = {}
_SEND_VIEW_BYTES = 4 << 20


def to_synchronize(dev: Any) -> Any:
    """``dev``, or None when its ``synchronize`` is ``Device``'s, which does nothing (a synchronous device)."""
    from tgcore.runtime.device import Device
    return None if type(dev).synchronize is Device.synchronize else dev


def empty_tensor(shape: tuple[int, ...], dt: DType,
                 device: str | None) -> tuple[Tensor, memoryview, Callable[[], None]]:
    """A new tensor, a writable memoryview to fill it through, and ``commit()`` to call once it is filled."""
    from tgcore.tensor import Tensor
    t = Tensor.empty(shape, dtype=dt, device=device)
    if prod(shape) == 0:
        return t, memoryview(bytearray(0)), lambda: None
    buf = _buffer_of(t)
    assert buf is not None  # (a new tensor owns its buffer)
    buf.ensure_allocated()
    if buf.allocator.can_zero_copy:
        return t, buf.as_buffer(), _no_commit
    staging = memoryview(bytearray(buf.nbytes))
    return t, staging, lambda: buf.copyin(staging) and None


def check_output(out: Tensor, shape: tuple[int, ...], dt: DType) -> None:
    """Raise when ``out`` cannot take a ``recv`` of ``shape``/``dt`` (see ``output_bytes``); changes nothing, so a
    receive checks ``out`` before it consumes a message and prepares it only once the message's header matched."""
    if not isinstance(out, _tensor_type()):
        raise TypeError(f"out must be a tgcore Tensor, got {type(out).__name__}")
    if out.dtype != dt or tuple(out.shape) != shape:
        raise ValueError(f"out is {out.dtype.name}{list(out.shape)}, but the recv is for {dt.name}{list(shape)}")
    if prod(shape) and realization().own_buffer(out) is None:
        raise ValueError("out must own a contiguous buffer (Tensor.empty(...) or a realized tensor), "
                         "not a view or a lazy expression")


def output_bytes(out: Tensor, shape: tuple[int, ...], dt: DType,
                 finish: Callable[[], None] | None = None) -> tuple[memoryview, Callable[[], None]]:
    """A writable memoryview of ``out``'s own buffer and ``commit()`` to call once it is filled (``recv(out=...)``).

    ``out`` must have ``shape`` and ``dt`` and own a contiguous buffer (``Tensor.empty(...)`` or a realized
    tensor, not a view or a lazy expression). Like ``Tensor.assign``, lazy tensors built from ``out`` before
    keep its old values, and values cached from its old contents are forgotten. ``finish``: for a write still
    under way when this returns, what waits for it (a realize reading ``out`` calls it first).
    """
    check_output(out, shape, dt)
    return write_into(out, prod(shape), finish)


def in_place_bytes(out: Tensor, shape: tuple[int, ...], dt: DType) -> tuple[Any, memoryview] | None:
    """For a checked ``out`` (``check_output``): its Buffer and a writable memoryview of it when a write can go
    straight in (``tgcore.realization.in_place_buffer``: nothing but its holders reads it) and the device allows
    it, else None (then ``write_into``). Changes nothing (memory not allocated yet gives None: ``write_into``
    allocates it once the write is certain): ``invalidate`` the Buffer once the write is certain."""
    buf = realization().in_place_buffer(out)
    if buf is None or buf.size == 0 or not buf.allocator.can_zero_copy or not buf.is_allocated():
        return None
    return buf, view_of(buf)


def view_of(buf: Any) -> memoryview:
    """``buf.as_buffer()``, remembered per Buffer (its device is still synchronized first)."""
    hit = _OUT_VIEWS.get(id(buf))
    if hit is not None and hit[0]() is buf:
        if hit[2] is not None:  # (as as_buffer does: work still queued on the device may read the memory)
            hit[2].synchronize()
        return hit[1]
    mv = buf.as_buffer()
    if len(_OUT_VIEWS) >= 32:
        _OUT_VIEWS.clear()
    key = id(buf)  # (the entry goes with its Buffer: the memoryview never keeps freed memory alive)
    _OUT_VIEWS[key] = (weakref.ref(buf, _forget(_OUT_VIEWS, key)), mv, to_synchronize(buf.dev))
    return mv


def write_into(out: Tensor, numel: int, finish: Callable[[], None] | None = None,
               ) -> tuple[memoryview, Callable[[], None]]:
    """``output_bytes`` for an ``out`` of ``numel`` elements that ``check_output`` accepted (the write is announced
    now)."""
    if numel == 0:
        return memoryview(bytearray(0)), _no_commit
    buf = realization().prepare_write(out, finish=finish).ensure_allocated()
    if not buf.allocator.can_zero_copy:
        staging = memoryview(bytearray(buf.nbytes))
        return staging, lambda: buf.copyin(staging) and None
    return view_of(buf), _no_commit


# id(Buffer) -> (the Buffer, weakly; a writable memoryview of it; its device or None, as in _SEND_VIEWS): buffers
# received into recently (recv(out=))
_OUT_VIEWS: dict[int, tuple[Any, memoryview, Any]] = {}


def _forget(views: dict[int, Any], key: int) -> Callable[[Any], None]:
    def forget(_: Any) -> None:
        views.pop(key, None)
    return forget


def recv_target(shape: tuple[int, ...], dt: DType, device: str | None, out: Tensor | None,
                pool: RecvPool | None = None, finish: Callable[[], None] | None = None,
                ) -> tuple[Tensor, memoryview, Callable[[], None]]:
    """Where a ``recv`` lands: a new (or pooled) tensor on ``device`` or ``out``'s own memory (``output_bytes``,
    with ``finish``); checked before anything is received, so a bad ``out`` consumes no message."""
    if out is None:
        return pool.take(shape, dt, device) if pool is not None else empty_tensor(shape, dt, device)
    if device is not None:
        raise ValueError("recv takes device= or out=, not both (the result lives on out's device)")
    mv, commit = output_bytes(out, shape, dt, finish)
    return out, mv, commit


PoolKey = tuple[tuple[int, ...], "DType", str | None]


class _Pooled:
    """One pooled buffer: its base (the elements' bytes), a writable memoryview of them, and the node every result
    over it shares (a reshape of a name of a view of all of the base)."""

    __slots__ = ("base", "elements", "node", "view", "lease")

    def __init__(self, base: Any, shape: tuple[int, ...], dt: DType) -> None:
        realization().watch_memory(base)  # (before any name of it exists: sole_buffer needs them all)
        self.base, self.elements = base, base.as_buffer()
        self.view = base.view(base.nbytes // dt.itemsize, dt, 0)
        self.node = _tensor_type().from_buffer(self.view, shape).uop
        self.lease: Any = None  # (tgcore.realization.lend's, of the last result)

    def free(self) -> bool:
        """Whether nothing but the shared node reads the memory (the last result is gone, nothing else read it) and
        the node still names it (not a copy: class doc of ``RecvPool``)."""
        state = realization()
        buf = state.returned(self.lease) if self.lease is not None else None
        return (buf if buf is not None else state.sole_buffer(self.node)) is self.view

    def result(self) -> Tensor:
        """A new tensor over the shared node (the caller checked nothing reads the memory: ``free``)."""
        t = _tensor_type().over(self.node, self.base.device)  # (the pool's Buffer has the canonical device)
        self.lease = realization().lend(self.node, t, self.lease)  # (held: it follows writes into its memory)
        return t


class RecvPool:
    """Result tensors for ``recv``/``allreduce`` without ``out=``, whose memory is reused once nothing uses it.

    Making a tensor per message (a view, BUFFER and RESHAPE nodes, the Tensor; freeing them) costs several times a
    small MPI message. The pool owns up to ``PER_KEY`` buffers per (shape, dtype, device), up to ``MAX_BYTES`` in
    all, and one node per buffer that every result over it shares: a result is a new Tensor over that node, made
    only when ``tgcore.realization.sole_buffer`` says nothing but the node reads the memory (no earlier result, lazy
    graph, realized slice, pending write, other name of it or JIT capture that read it is alive; after the first
    result ``tgcore.realization.returned`` says so in constant time when nothing new read it); the write is
    announced (its version bumped), as for any write. Messages over ``MAX_MESSAGE`` bytes are not pooled (their fixed
    cost is small next to the copy). The pool's node keeps its name alive, so an assign into a result copies the old
    contents aside for it (as for any name still alive); that buffer then leaves the pool.

    A pooled buffer's elements start where the allocator's memory does (page aligned from 1 MiB, as a tensor's
    own): MPI's single-copy transfer into memory at another offset within its page than the sender's is slower
    (1 MiB on shared memory: ~2 us of ~55 with 128 bytes in front, which the pool used to keep for a header). The
    next result can be made ahead, while a receive waits for its message (``prepare``); a prepared result's memory
    was free when it was made and nobody but the pool has seen the tensor, so it stays free until handed out."""

    PER_KEY = 4
    MAX_BYTES = 64 << 20
    MAX_MESSAGE = 4 << 20

    def __init__(self) -> None:
        self._free: dict[PoolKey, list[_Pooled]] = {}
        self._ready: dict[PoolKey, tuple[Tensor, _Pooled]] = {}  # key -> a result made ahead
        self._unpoolable: set[str | None] = set()  # devices without zero-copy access
        self._invalidate = realization().invalidate
        self._bytes = 0
        self.hits = self.misses = 0  # results whose memory was reused / that needed new memory (or were not pooled)
        # called with each buffer the pool gives up (a transport drops what it keeps of it: a persistent receive)
        self.on_drop: list[Callable[[_Pooled], None]] = []

    def take(self, shape: tuple[int, ...], dt: DType, device: str | None) -> tuple[Tensor, memoryview,
                                                                                     Callable[[], None]]:
        """A tensor of ``shape``/``dt`` on ``device``, a writable view of its memory and ``commit()``."""
        got = self.take_key((shape, dt, device))
        if got is None:
            return empty_tensor(shape, dt, device)
        return got[0], got[1].elements, _no_commit

    def take_key(self, key: PoolKey) -> tuple[Tensor, _Pooled] | None:
        """A pooled tensor of the key ``(shape, dtype, device)`` and its buffer (write the message into its
        ``elements``); None when such a message is not pooled."""
        made = self._ready.pop(key, None)
        if made is None:
            made = self._make(key)
            if made is None:
                return None
        self._invalidate(made[1].base)  # (it is written now)
        return made

    def prepare(self, shape: tuple[int, ...], dt: DType, device: str | None) -> None:
        """Make the next result of this key now (a receive waiting for its message has the time)."""
        self.prepare_key((shape, dt, device))

    def prepare_key(self, key: PoolKey) -> None:
        """``prepare`` of the key ``(shape, dtype, device)``."""
        if key not in self._ready:
            made = self._make(key)
            if made is not None:
                self._ready[key] = made

    def _make(self, key: PoolKey) -> tuple[Tensor, _Pooled] | None:
        entries = self._free.get(key)  # (a key with entries is one the pool takes)
        if entries is not None:
            state = realization()
            for pooled in entries:
                if pooled.free():
                    self.hits += 1
                    return pooled.result(), pooled
                if state.buffer_under(pooled.node) is not pooled.view:  # its node names a copy now (class doc)
                    entries.remove(pooled)  # (on every take: the buffer is given back at once)
                    self._bytes -= pooled.elements.nbytes
                    for dropped in self.on_drop:
                        dropped(pooled)
                    return self._make(key)  # (the others again, without it)
        shape, dt, device = key
        nbytes = prod(shape) * dt.itemsize
        if nbytes == 0 or nbytes > self.MAX_MESSAGE or device in self._unpoolable:
            self.misses += 1
            return None
        self.misses += 1
        if self._bytes + nbytes > self.MAX_BYTES or (entries is not None and len(entries) >= self.PER_KEY):
            return None
        from tgcore.dtype import dtypes
        from tgcore.runtime.buffer import Buffer
        from tgcore.runtime.registry import canonical
        base = Buffer(canonical(device), nbytes, dtypes.uint8).ensure_allocated()
        if not base.allocator.can_zero_copy:  # (a device without zero-copy access: nothing to gain)
            self._unpoolable.add(device)
            return None
        pooled = _Pooled(base, shape, dt)
        self._free.setdefault(key, []).append(pooled)
        self._bytes += nbytes
        return pooled.result(), pooled

    def clear(self) -> None:
        self._free.clear()
        self._ready.clear()
        self._bytes = 0


def _tensor_type() -> Any:
    """tgcore's Tensor class, imported once (an import per message costs ~2 us)."""
    if not _TENSOR:
        from tgcore.tensor import Tensor
        _TENSOR.append(Tensor)
    return _TENSOR[0]


_TENSOR: list[Any] = []


def _no_commit() -> None:
    """(the data was written straight into the tensor's memory: nothing to copy in)"""


Steps = Generator[Callable[[], bool], None, Any]  # a non-blocking call: yields "is this stage done?" tests


class Handle:
    """A non-blocking call under way (``isend``, ``irecv``, ``iallreduce``). ``wait()`` blocks until it is done
    (at most the transport's ``timeout`` seconds) and returns its result: the tensor for ``irecv`` and
    ``iallreduce``, None for ``isend``. ``done()`` makes progress without blocking and says whether it finished.
    Handles may be waited in any order; each exactly once (a second ``wait`` raises ``RuntimeError``). Errors of
    the call (``PeerMismatch``, ``CommTimeout``, ...) are raised by ``wait``."""

    def __init__(self, transport: Transport, steps: Steps, what: str | Callable[[], str], peer: int | None) -> None:
        self._transport, self._steps, self._what, self.peer = transport, steps, what, peer
        self._test: Callable[[], bool] | None = _ready
        self._result: Any = None
        self._error: BaseException | None = None
        self._waited = False

    def _advance(self) -> bool:
        """Go through as many stages as are ready, without blocking; True once the call finished (or failed)."""
        while self._test is not None:
            try:
                if not self._test():
                    return False
                self._test = self._steps.send(None)
            except StopIteration as stop:
                self._test, self._result = None, stop.value
            except BaseException as e:
                self._test, self._error = None, e
                raise
        return True

    def done(self) -> bool:
        """Progress the call; True once ``wait`` would return (or raise) at once."""
        try:
            return self._advance()
        except BaseException:
            return True  # (wait raises it)

    def _settle(self) -> None:
        """Block until the call finished; raise its error. Safe to call again (a pending write's ``finish``)."""
        if self._test is not None:
            self._transport._block(self)
        if self._error is not None:
            raise self._error

    def wait(self) -> Any:
        """Block until the call is done and return its result (raises its error). Only once per handle."""
        if self._waited:
            raise RuntimeError(f"rank {self._transport.rank}: this handle ({self.what}) was already waited for; "
                               "wait() returns its result once")
        self._waited = True
        self._settle()
        result, self._result = self._result, None
        return result

    @property
    def what(self) -> str:
        return self._what if isinstance(self._what, str) else self._what()

    def __repr__(self) -> str:
        state = "waited" if self._waited else "done" if self._test is None else "pending"
        return f"<Handle {self.what}: {state}>"


def _ready() -> bool:
    return True


# ---------------------------------------------------------------------------------------------- the API

class Transport(abc.ABC):
    """A connected process group. Backends implement the abstract methods; all calls block until done
    or until ``timeout`` seconds pass (then ``CommTimeout``). Usable as a context manager."""

    name: str = "?"
    rank: int
    world_size: int
    timeout: float

    @abc.abstractmethod
    def send(self, tensor: Tensor, dst: int) -> None:
        """Send ``tensor`` (any shape, dtype and device) to rank ``dst``; returns when its memory may be reused."""

    @abc.abstractmethod
    def recv(self, shape: int | Sequence[int], dtype: Any, src: int, device: str | None = None,
             out: Tensor | None = None) -> Tensor:
        """Receive a tensor of ``shape`` and ``dtype`` from rank ``src`` onto ``device`` (default device if None).

        With ``out`` (a tensor of ``shape`` and ``dtype`` that owns its buffer, see ``output_bytes``) the data
        lands in ``out``'s memory and ``out`` is returned: no new tensor per message. Raises ``PeerMismatch``
        when the sender sent another shape or dtype (the message is consumed; ``out`` is left as it was by the mpi
        backend, unspecified by others)."""

    def allreduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        """The elementwise ``op`` ("sum", "max", "min", "prod") of ``tensor`` over all ranks, as a new tensor
        on ``tensor``'s device. Every rank must pass the same shape, dtype and op (else ``PeerMismatch``).
        bool tensors: sum/max are logical or, prod/min logical and; integers wrap like numpy."""
        result: Tensor = self.iallreduce(tensor, op).wait()
        return result

    @abc.abstractmethod
    def broadcast(self, tensor: Tensor, root: int = 0, out: Tensor | None = None) -> Tensor:
        """Rank ``root``'s ``tensor`` on every rank: ``root`` returns ``tensor``; the others return a new tensor
        on their ``tensor``'s device (or ``out``, written like ``recv(out=)``) with root's values. Every rank
        passes a tensor of the same shape and dtype (its values are not read off root); else ``PeerMismatch``
        on every rank."""

    @abc.abstractmethod
    def isend(self, tensor: Tensor, dst: int) -> Handle:
        """``send`` without waiting: returns a ``Handle`` at once; ``tensor``'s memory is read until ``wait()``
        (which returns None). Two ranks may ``isend`` to each other and then ``irecv``."""

    @abc.abstractmethod
    def irecv(self, shape: int | Sequence[int], dtype: Any, src: int, device: str | None = None,
              out: Tensor | None = None) -> Handle:
        """``recv`` without waiting: ``wait()`` returns the tensor. With ``out``, ``out`` is written when the data
        arrives: a realize that reads ``out`` waits for it first (``tgcore.realization.prepare_write``). Receives
        from one rank match its sends in the order the ``irecv`` calls were made, whatever order they are
        waited in."""

    @abc.abstractmethod
    def iallreduce(self, tensor: Tensor, op: str = "sum", out: Tensor | None = None) -> Handle:
        """``allreduce`` without waiting: ``wait()`` returns the result (a new tensor, or ``out`` written like
        ``irecv(out=)``). ``tensor`` is read until then. Every rank must start its collectives (``iallreduce``,
        ``allreduce``, ``broadcast``, ``barrier``) in the same order."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Return once every rank has called ``barrier``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the group. Further calls raise ``TransportClosed``. Safe to call twice."""

    def _block(self, handle: Handle) -> None:
        """Progress ``handle`` until it finished (``CommTimeout`` after ``timeout`` s)."""
        raise NotImplementedError

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} rank {self.rank} of {self.world_size}>"

    # ---- checks shared by backends ----
    def _check_peer(self, peer: int, what: str) -> int:
        if not isinstance(peer, int) or isinstance(peer, bool):
            raise TypeError(f"{what} must be an int rank, got {type(peer).__name__}")
        if not 0 <= peer < self.world_size:
            raise ValueError(f"{what}={peer} is not a rank of this group (ranks 0..{self.world_size - 1})")
        if peer == self.rank:
            raise ValueError(f"{what}={peer} is this process's own rank; send/recv need another rank")
        return peer

    @staticmethod
    def _check_op(op: str) -> str:
        if op not in REDUCE_OPS:
            raise ValueError(f"unknown reduce op {op!r}; use one of {', '.join(REDUCE_OPS)}")
        return op

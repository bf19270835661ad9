"""The transport API every backend implements, and the tensor <-> bytes plumbing they share.

In:  tensors on any device; a process group a backend connected (``rank``, ``world_size``).
Out: ``send(tensor, dst)``, ``recv(shape, dtype, src) -> Tensor``, ``allreduce(tensor, op)``,
     ``barrier()``, ``close()``; failures as ``CommError`` subclasses naming the peer, never a hang:
     every wait has a deadline (``timeout`` seconds, per call).

Zero copy: a realized, contiguous tensor on a device whose allocator can hand out its memory
(CPU, DISK) is given to the backend as a memoryview of the device buffer itself; ``recv`` and
``allreduce`` allocate the result tensor's buffer first and let the backend write into it. Other
devices go through one host copy each way.

Wire header (what a ``send`` puts in front of the data, so ``recv`` can check it): 16 int64s,
``MAGIC, dtype code, itemsize, nbytes, ndim, *shape`` (zero padded; at most ``MAX_DIMS`` dims).
"""
from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tgcore.helpers import prod

if TYPE_CHECKING:
    import numpy as np

    from tgcore.dtype import DType
    from tgcore.tensor import Tensor

__all__ = ["CommError", "CommTimeout", "PeerFailed", "PeerMismatch", "TransportClosed", "Transport",
           "REDUCE_OPS", "WIRE_DTYPES", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 60.0  # seconds a single call may wait for its peers
REDUCE_OPS = ("sum", "max", "min", "prod")
# the wire code of a dtype is its index here: append only
WIRE_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
               "fp8e4m3", "fp8e5m2", "float16", "bfloat16", "float32", "float64")
HEADER_WORDS = 16
MAGIC = 0x7467_5452_0001  # "tgTR", wire version 1
MAX_DIMS = HEADER_WORDS - 5


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


def describe_header(h: np.ndarray) -> str:
    """``float32[2, 3]`` for a header."""
    code, ndim = int(h[1]), int(h[4])
    name = WIRE_DTYPES[code] if 0 <= code < len(WIRE_DTYPES) else f"<dtype code {code}>"
    return f"{name}{list(int(d) for d in h[5:5 + ndim])}"


def check_header(got: np.ndarray, want: np.ndarray, src: int, me: int) -> None:
    """Raise ``PeerMismatch`` when the sender's header ``got`` is not what this recv asked for."""
    if got.tobytes() == want.tobytes():  # the common case, in well under a microsecond
        return
    if int(got[0]) != MAGIC:
        raise PeerMismatch(f"rank {me}: message from rank {src} is not a tgcore tensor (bad header "
                           f"{int(got[0]):#x}); is the peer using the same tg-mlx-rdma version?", peer=src)
    if (got[1:] != want[1:]).any():
        raise PeerMismatch(f"rank {me}: recv expected {describe_header(want)} from rank {src}, but rank {src} "
                           f"sent {describe_header(got)}; make the recv's shape and dtype match the send", peer=src)


def header_nbytes(h: np.ndarray) -> int:
    return int(h[3])


# ---------------------------------------------------------------------------------------------- tensor memory

_STATE: list[Any] = []  # tgcore.realization, looked up once (a lookup per message costs ~2 us)


def _realization() -> Any:
    if not _STATE:
        import tgcore
        _STATE.append(tgcore.realization)
    return _STATE[0]


def _buffer_of(t: Tensor) -> Any:
    """The runtime Buffer holding a realized, contiguous tensor (realized first), or None for a view."""
    return _realization().buffer_of(t)


def tensor_bytes(t: Tensor) -> tuple[memoryview, Tensor]:
    """The tensor's bytes (realized first) and the tensor that owns them (keep it alive while in use).

    Zero-copy on devices whose allocator allows it; otherwise a host copy.
    """
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
    return buf.as_buffer(), t


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
        return t, buf.as_buffer(), lambda: None
    staging = memoryview(bytearray(buf.nbytes))
    return t, staging, lambda: buf.copyin(staging) and None


def output_bytes(out: Tensor, shape: tuple[int, ...], dt: DType) -> tuple[memoryview, Callable[[], None]]:
    """A writable memoryview of ``out``'s own buffer and ``commit()`` to call once it is filled (``recv(out=...)``).

    ``out`` must have ``shape`` and ``dt`` and own a contiguous buffer (``Tensor.empty(...)`` or a realized
    tensor, not a view or a lazy expression). Like ``Tensor.assign``, lazy tensors built from ``out`` before
    keep its old values, and values cached from its old contents are forgotten.
    """
    from tgcore.tensor import Tensor
    if not isinstance(out, Tensor):
        raise TypeError(f"out must be a tgcore Tensor, got {type(out).__name__}")
    if tuple(out.shape) != shape or out.dtype != dt:
        raise ValueError(f"out is {out.dtype.name}{list(out.shape)}, but the recv is for {dt.name}{list(shape)}")
    if prod(shape) == 0:
        return memoryview(bytearray(0)), lambda: None
    try:
        buf = _realization().prepare_write(out).ensure_allocated()
    except ValueError:
        raise ValueError("out must own a contiguous buffer (Tensor.empty(...) or a realized tensor), "
                         "not a view or a lazy expression") from None
    if buf.allocator.can_zero_copy:
        return buf.as_buffer(), lambda: None
    staging = memoryview(bytearray(buf.nbytes))
    return staging, lambda: buf.copyin(staging) and None


def recv_target(shape: tuple[int, ...], dt: DType, device: str | None,
                out: Tensor | None) -> tuple[Tensor, memoryview, Callable[[], None]]:
    """Where a ``recv`` lands: a new tensor on ``device`` (``empty_tensor``) or ``out``'s own memory
    (``output_bytes``); checked before anything is received, so a bad ``out`` consumes no message."""
    if out is None:
        return empty_tensor(shape, dt, device)
    if device is not None:
        raise ValueError("recv takes device= or out=, not both (the result lives on out's device)")
    mv, commit = output_bytes(out, shape, dt)
    return out, mv, commit


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
        when the sender sent another shape or dtype (the message is consumed; ``out``'s contents are then
        unspecified)."""

    @abc.abstractmethod
    def allreduce(self, tensor: Tensor, op: str = "sum") -> Tensor:
        """The elementwise ``op`` ("sum", "max", "min", "prod") of ``tensor`` over all ranks, as a new tensor
        on ``tensor``'s device. Every rank must pass the same shape, dtype and op (else ``PeerMismatch``).
        bool tensors: sum/max are logical or, prod/min logical and; integers wrap like numpy."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Return once every rank has called ``barrier``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the group. Further calls raise ``TransportClosed``. Safe to call twice."""

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

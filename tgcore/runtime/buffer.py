"""Buffer: a typed, lazily allocated piece of device memory, or a view into one.

In: a device (name or Device object), a size in elements and a dtype (anything with
`.itemsize`, `.np` (numpy dtype or None) and `.name`, e.g. `tgcore.dtype.DType`).
Out: device memory that is allocated on first use, byte copies in and out, zero-copy
memoryviews where the device allows it, numpy arrays.

A view (`buf.view(...)` or `Buffer(..., base=b, offset=k)`) shares its base's memory.
The base counts its allocated views: deallocating a base while views are allocated only
marks it; the memory goes back to the allocator when the last view is released. A base's
``version`` counts the writes into its memory (values computed from it are stale once it moves).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tgcore.runtime.device import Device

if TYPE_CHECKING:
    import weakref

    import numpy as np

    from tgcore.runtime.allocator import Allocator
    from tgcore.uop.uop import UOp


def _open_device(name: str) -> Device:
    # the registry is written separately and may import a lot: import at use time
    from tgcore.runtime.registry import open_device  # type: ignore[import-not-found,unused-ignore]

    return open_device(name)


def _byte_view(data: Any, what: str) -> memoryview:
    """A flat, C-contiguous byte memoryview of a buffer-protocol object."""
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if not mv.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    return mv.cast("B") if (mv.format != "B" or mv.ndim != 1) else mv


class Buffer:
    """`size` elements of `dtype` on `device`; see the module docstring.

    device: a device name (resolved on first use via the device registry) or a Device.
    options: hashable allocation options (e.g. allocator.BufferOptions) or None.
    base, offset: make this a view of `base`, starting `offset` bytes into it.
    preallocate: allocate now instead of on first use.
    """

    _base: Buffer | None
    offset: int

    def __init__(
        self, device: str | Device, size: int, dtype: Any, *, options: Any = None, base: Buffer | None = None,
        offset: int = 0, preallocate: bool = False,
    ):
        if size < 0:
            raise ValueError(f"buffer size must be >= 0, got {size}")
        if offset < 0:
            raise ValueError(f"buffer offset must be >= 0, got {offset}")
        self._dev: Device | None = device if isinstance(device, Device) else None
        self.device: str = device.name if isinstance(device, Device) else device
        self.size = size
        self.dtype = dtype
        self.options = options
        self._handle: Any = None
        self._view_count = 0  # allocated views of this base
        self._views_alive = 0  # views of this base not yet garbage (allocated or not)
        self._free_pending = False  # base deallocated while views were alive
        self.cache_when_freed = True  # (on a base) False: freed memory goes back to the device, not to its cache
        if base is not None:
            if base._base is not None:  # a view of a view is a view of the root
                offset += base.offset
                base = base._base
            if offset + self.nbytes > base.nbytes:
                raise ValueError(
                    f"view of {self.nbytes} bytes at offset {offset} does not fit in "
                    f"a base buffer of {base.nbytes} bytes"
                )
            if base.device != self.device:
                raise ValueError(f"view device {self.device} differs from its base's device {base.device}")
            if self._dev is None:
                self._dev = base._dev
            if options is None:
                self.options = base.options
        elif offset != 0:
            raise ValueError("offset is only meaningful for a view: pass base= as well")
        self._base = base
        if base is not None:
            base._views_alive += 1
        self.offset = offset
        self.version = 0  # (on a base) bumped by every write into its memory: tgcore.schedule.state.invalidate
        # (on a base) the names (BUFFER uops, weakly) of its memory once tgcore.schedule.state watches it, else None
        self.names: list[weakref.ref[UOp]] | None = None
        if preallocate:
            self.allocate()

    # ---- identity ----

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def base(self) -> Buffer:
        """The buffer that owns the memory (self for a base buffer)."""
        return self._base if self._base is not None else self

    @property
    def dev(self) -> Device:
        """The Device object (looked up by name on first use)."""
        if self._dev is None:
            self._dev = _open_device(self.device)
        return self._dev

    @property
    def allocator(self) -> Allocator:
        return self.dev.allocator

    def __repr__(self) -> str:
        view = f" view of offset {self.offset}" if self._base is not None else ""
        state = "allocated" if self.is_allocated() else "unallocated"
        return f"<Buffer {self.device} {self.size} x {getattr(self.dtype, 'name', self.dtype)}{view} {state}>"

    # ---- lifetime ----

    def is_allocated(self) -> bool:
        return self._handle is not None and not self._free_pending

    def allocate(self) -> Buffer:
        """Get device memory now (a no-op if already allocated). Returns self."""
        if self._handle is not None:
            self._free_pending = False
            return self
        if self._base is not None:
            base = self._base
            base.allocate()
            self._handle = base.allocator.offset(base._handle, self.nbytes, self.offset)
            base._view_count += 1
        else:
            self._handle = self.allocator.alloc(self.nbytes, self.options)
        return self

    def ensure_allocated(self) -> Buffer:
        return self.allocate()

    def deallocate(self) -> None:
        """Give the memory back (to the allocator's cache). Safe to call twice."""
        if self._handle is None:
            return
        if self._base is not None:
            self._handle = None
            base = self._base
            base._view_count -= 1
            if base._view_count == 0 and base._free_pending:
                base._release()
            return
        if self._view_count > 0:
            self._free_pending = True  # released when the last view goes
            return
        self._release()

    def _release(self) -> None:
        handle, self._handle, self._free_pending = self._handle, None, False
        self.allocator.free(handle, self.nbytes, self.options, cache=self.cache_when_freed)

    def __del__(self) -> None:
        try:
            if self._handle is not None:
                self.deallocate()
            if self._base is not None:
                self._base._views_alive -= 1
        except Exception:
            pass  # never raise from a finalizer (e.g. at interpreter exit)

    # ---- views ----

    @property
    def views_alive(self) -> int:
        """(On a base) how many views of its memory exist, allocated or not (a view counts until it is garbage)."""
        return self._views_alive

    def view(self, size: int, dtype: Any, offset: int = 0) -> Buffer:
        """A Buffer of `size` x `dtype` starting `offset` bytes into this one, sharing memory."""
        return Buffer(self._dev if self._dev is not None else self.device, size, dtype, options=self.options,
                      base=self, offset=offset)

    # ---- data ----

    @property
    def handle(self) -> Any:
        """The allocator handle (allocates if needed): what programs get as a buffer argument."""
        if not self.is_allocated():
            self.allocate()
        return self._handle

    def copyin(self, src: Any) -> Buffer:
        """Copy all nbytes of `src` (any C-contiguous buffer-protocol object) into this buffer."""
        mv = _byte_view(src, "copyin source")
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyin of {mv.nbytes} bytes into a buffer of {self.nbytes} bytes ({self!r})")
        self.allocator.copyin(self.handle, mv)
        return self

    def copyout(self, dest: Any) -> memoryview:
        """Copy this buffer's bytes into `dest` (writable, nbytes long). Returns dest as bytes."""
        mv = _byte_view(dest, "copyout destination")
        if mv.readonly:
            raise ValueError("copyout destination is read-only")
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyout of a {self.nbytes} byte buffer into {mv.nbytes} bytes ({self!r})")
        self.dev.synchronize()
        self.allocator.copyout(mv, self.handle)
        return mv

    def as_buffer(self, allow_zero_copy: bool = True) -> memoryview:
        """This buffer's bytes: zero-copy where the device allows it (CPU, DISK), else a copy.

        A zero-copy view aliases device memory: it sees later writes and must not be used
        after the buffer is deallocated (its memory may then be reused by another buffer).
        """
        if allow_zero_copy and self.allocator.can_zero_copy:
            self.dev.synchronize()
            return self.allocator.as_buffer(self.handle)
        return self.copyout(memoryview(bytearray(self.nbytes)))

    def numpy(self) -> np.ndarray:
        """A 1-D numpy array of the contents. Always a copy, so it stays valid after the buffer dies."""
        import numpy as np

        np_dtype = self.dtype.np
        if np_dtype is None:
            np_dtype = _extra_numpy_dtype(self.dtype)
        out = np.empty(self.size, dtype=np_dtype)
        if self.nbytes:
            self.copyout(out.view(np.uint8).data)
        return out

    def copy_from(self, src: Buffer) -> Buffer:
        """Copy `src` (same nbytes, any device) into this buffer, reading only src's bytes."""
        if src.nbytes != self.nbytes:
            raise ValueError(f"copy of {src.nbytes} bytes into a buffer of {self.nbytes} bytes")
        return self.copyin(src.as_buffer())


_ML_DTYPES_NAMES = {"fp8e4m3": "float8_e4m3fn", "fp8e5m2": "float8_e5m2"}


def _extra_numpy_dtype(dtype: Any) -> Any:
    """numpy dtype for types numpy lacks (bfloat16, fp8) via ml_dtypes, if installed."""
    name = getattr(dtype, "name", str(dtype))
    ml_name = _ML_DTYPES_NAMES.get(name, name)
    try:
        import ml_dtypes  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pass
    else:
        if hasattr(ml_dtypes, ml_name):
            return getattr(ml_dtypes, ml_name)
    raise TypeError(f"dtype {name} has no numpy equivalent (install ml_dtypes, or read raw bytes with as_buffer())")

"""The DISK device: buffers backed by one file through mmap (one device per file).

In: a name "DISK:/path/to/file". Out: buffers over byte ranges of that file. The file is
mapped on first allocation and read lazily by the OS: a view at an offset and a copy of
it to a compute device (`cpu_buf.copy_from(disk_view)`) touch only that view's pages, so
a loader can open a multi-GB file and copy out just the slices it needs.

By default the file is opened read-only and never written. A buffer allocated with
`BufferOptions(writable=True)` maps it read-write instead, creating the file or growing
it to the buffer's size (for saving).
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from tgcore.runtime.allocator import Allocator
from tgcore.runtime.device import Device

PREFIX = "DISK:"


class DiskHandle:
    """`size` bytes at `offset` in a mapping of the file (`mm` is None for an empty file)."""

    __slots__ = ("mm", "offset", "size", "writable")

    def __init__(self, mm: mmap.mmap | None, offset: int, size: int, writable: bool):
        self.mm = mm
        self.offset = offset
        self.size = size
        self.writable = writable

    def __repr__(self) -> str:
        return f"<DiskHandle {self.size} bytes at {self.offset}{' rw' if self.writable else ''}>"


class DiskAllocator(Allocator):
    """Maps the device's file lazily; handles are DiskHandles. Nothing is cached or counted
    in mem_used: the file's pages belong to the OS page cache, not to tgcore.
    """

    can_zero_copy = True

    def __init__(self, path: str):
        super().__init__(lru=False, counts_memory=False)
        self.path = path
        self.mm: mmap.mmap | None = None
        self.file_size = 0
        self.writable = False
        self.mapped = False

    # ---- mapping ----

    def _map(self, nbytes: int, writable: bool) -> None:
        if self.mapped and (self.writable or not writable) and (not writable or self.file_size >= nbytes):
            return
        if writable:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        else:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                raise FileNotFoundError(f"DISK: file {self.path!r} does not exist") from None
            except IsADirectoryError:
                raise IsADirectoryError(f"DISK: {self.path!r} is a directory, not a file") from None
        try:
            size = os.fstat(fd).st_size
            if writable and size < nbytes:
                os.ftruncate(fd, nbytes)
                size = nbytes
            access = mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ
            # older mappings stay alive as long as handles made from them do
            self.mm = mmap.mmap(fd, 0, access=access) if size > 0 else None
        finally:
            os.close(fd)  # mmap keeps its own duplicate of the descriptor
        self.file_size = size
        self.writable = writable
        self.mapped = True

    def _check_range(self, offset: int, nbytes: int, limit: int, what: str) -> None:
        if offset < 0 or nbytes < 0 or offset + nbytes > limit:
            raise ValueError(
                f"DISK: slice of {nbytes} bytes at offset {offset} goes past the end of {what} "
                f"({limit} bytes) in file {self.path!r}"
            )

    # ---- allocator API ----

    def _alloc(self, nbytes: int, options: Any) -> DiskHandle:
        self._map(nbytes, bool(getattr(options, "writable", False)))
        self._check_range(0, nbytes, self.file_size, "the file")
        return DiskHandle(self.mm, 0, nbytes, self.writable)

    def offset(self, handle: Any, nbytes: int, offset: int) -> DiskHandle:
        self._check_range(offset, nbytes, handle.size, "the base buffer")
        return DiskHandle(handle.mm, handle.offset + offset, nbytes, handle.writable)

    def as_buffer(self, handle: Any) -> memoryview:
        if handle.mm is None or handle.size == 0:
            return memoryview(b"")
        return memoryview(handle.mm)[handle.offset:handle.offset + handle.size]

    def copyout(self, dest: memoryview, src: Any) -> None:
        dest[:] = self.as_buffer(src)[:dest.nbytes]

    def copyin(self, dest: Any, src: memoryview) -> None:
        if not dest.writable:
            raise PermissionError(
                f"DISK: file {self.path!r} is mapped read-only; allocate the buffer with "
                "options=BufferOptions(writable=True) to write to it"
            )
        if src.nbytes:
            self.as_buffer(dest)[:src.nbytes] = src

    def flush(self) -> None:
        """Write dirty pages of a writable mapping to the file."""
        if self.mm is not None and self.writable:
            self.mm.flush()


class DiskDevice(Device):
    """A file as a device. `name` is "DISK:<path>"; the path may be relative or use ~."""

    allocator: DiskAllocator

    def __init__(self, name: str, variant: str | None = None):
        if not name.upper().startswith(PREFIX):
            raise ValueError(f"a DISK device name looks like 'DISK:/path/to/file', got {name!r}")
        path = os.path.expanduser(name[len(PREFIX):])
        if not path:
            raise ValueError(f"DISK device name {name!r} has no file path (use 'DISK:/path/to/file')")
        super().__init__(name, None, allocator=DiskAllocator(path), program=_no_programs)
        self.variant = variant
        self.path = path

    def synchronize(self) -> None:
        pass

    def flush(self) -> None:
        """Write pending changes of a writable file to disk."""
        self.allocator.flush()


class _no_programs:
    """DISK runs no kernels."""

    def __init__(self, name: str, lib: bytes):
        raise NotImplementedError("the DISK device cannot run programs; copy its buffers to a compute device")

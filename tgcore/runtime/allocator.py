"""Allocator base: device memory handles with an LRU cache of freed buffers.

In: sizes in bytes and hashable options. Out: opaque handles (a device's own type: a
ctypes array on CPU, a file slice on DISK, ...), byte copies in and out of them.

A device subclasses `Allocator` and implements `_alloc`/`_free` and the copies; the base
class does the caching and keeps `GlobalCounters.mem_used` equal to the bytes held by
live (not cached) buffers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tgcore.engine.stats import GlobalCounters

_MEM_LOCK = threading.Lock()  # GlobalCounters.mem_used is shared by all allocators


@dataclass(frozen=True)
class BufferOptions:
    """Hashable per-buffer allocation options (part of the allocator cache key).

    nolru: never put this buffer in the freed-buffer cache.
    host: memory the host can read directly (for devices that distinguish it).
    writable: DISK only: map the file read-write, creating or growing it to fit.
    zeroed: the memory reads as zeros when allocated: fresh memory, never a freed buffer from the cache (an
        allocator whose fresh memory is zero, ``fresh_is_zero``, touches none of it: a large cache written a
        little at a time costs nothing up front; the others fill it with zeros).
    """

    nolru: bool = False
    host: bool = False
    writable: bool = False
    zeroed: bool = False


class Allocator:
    """Base allocator. Subclasses implement `_alloc`, `_free`, `copyin`, `copyout` and,
    where supported, `as_buffer` (set `can_zero_copy = True`) and `offset`.

    lru: keep freed buffers for reuse by a later `alloc` of the same (nbytes, options).
    cache_limit: most bytes kept in that cache (oldest-freed evicted first); None = no limit.
    counts_memory: whether this allocator's buffers count in GlobalCounters.mem_used.
    """

    can_zero_copy: bool = False
    fresh_is_zero: bool = False  # whether `_alloc`'s memory always reads as zeros (BufferOptions.zeroed)

    def __init__(self, *, lru: bool = True, cache_limit: int | None = None, counts_memory: bool = True):
        self.lru = lru
        self.cache_limit = cache_limit
        self.counts_memory = counts_memory
        self.cache: OrderedDict[tuple[int, Any], list[Any]] = OrderedDict()
        self.cached_bytes = 0
        self._lock = threading.Lock()  # alloc/free may come from several threads (e.g. a server)

    # ---- public API ----

    def alloc(self, nbytes: int, options: Any = None) -> Any:
        """A handle to `nbytes` of device memory (a cached freed one if available)."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        zeroed = getattr(options, "zeroed", False)
        with self._lock:
            handle = None if zeroed else self._take_cached(nbytes, options)
        if handle is None:
            try:
                handle = self._alloc(nbytes, options)
            except MemoryError:
                # memory may be sitting in the cache: give it back and try once more
                self.free_cache()
                handle = self._alloc(nbytes, options)
            if zeroed and not self.fresh_is_zero and nbytes:
                self.copyin(handle, memoryview(bytes(nbytes)))
        if self.counts_memory:
            with _MEM_LOCK:
                GlobalCounters.mem_used += nbytes
        return handle

    def free(self, handle: Any, nbytes: int, options: Any = None, cache: bool = True) -> None:
        """Release a handle from `alloc`; it goes to the cache unless caching is off (or ``cache`` is False: memory
        the caller knows nothing will ask for again)."""
        if self.counts_memory:
            with _MEM_LOCK:
                GlobalCounters.mem_used -= nbytes
        with self._lock:
            if cache and self.lru and not getattr(options, "nolru", False) and not getattr(options, "zeroed", False):
                key = (nbytes, options)
                self.cache.setdefault(key, []).append(handle)
                self.cache.move_to_end(key)
                self.cached_bytes += nbytes
                self._enforce_limit()
                return
        self._free(handle, nbytes, options)

    def free_cache(self) -> None:
        """Really free every cached buffer."""
        with self._lock:
            entries, self.cache, self.cached_bytes = list(self.cache.items()), OrderedDict(), 0
        for (nbytes, options), handles in entries:
            for handle in handles:
                self._free(handle, nbytes, options)

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Copy the bytes of `src` to the start of device buffer `dest`."""
        raise NotImplementedError(f"{type(self).__name__} does not support copyin")

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Copy the first len(dest) bytes of device buffer `src` into `dest`."""
        raise NotImplementedError(f"{type(self).__name__} does not support copyout")

    def as_buffer(self, handle: Any) -> memoryview:
        """A zero-copy byte memoryview of the handle's memory (only if can_zero_copy)."""
        raise NotImplementedError(f"{type(self).__name__} has no zero-copy view of its memory")

    def offset(self, handle: Any, nbytes: int, offset: int) -> Any:
        """A handle for `nbytes` starting `offset` bytes into `handle`, sharing its memory."""
        raise NotImplementedError(f"{type(self).__name__} does not support views at an offset")

    # ---- subclass hooks ----

    def _alloc(self, nbytes: int, options: Any) -> Any:
        raise NotImplementedError

    def _free(self, handle: Any, nbytes: int, options: Any) -> None:
        """Really release memory. Default: drop the reference and let GC release it."""

    # ---- internals ----

    def _take_cached(self, nbytes: int, options: Any) -> Any:
        handles = self.cache.get((nbytes, options))
        if not handles:
            return None
        handle = handles.pop()
        if not handles:
            del self.cache[(nbytes, options)]
        self.cached_bytes -= nbytes
        return handle

    def _enforce_limit(self) -> None:
        if self.cache_limit is None:
            return
        while self.cached_bytes > self.cache_limit and self.cache:
            key = next(iter(self.cache))
            handles = self.cache[key]
            handle = handles.pop(0)
            if not handles:
                del self.cache[key]
            self.cached_bytes -= key[0]
            self._free(handle, key[0], key[1])

"""The CPU device: host memory, shared objects loaded with ctypes, kernels split over threads.

In: C source from the C renderer (compiled by `ClangCompiler` into shared-object bytes) or
any other shared object a renderer produces. Out: callables that run a kernel on host
buffers.

Calling convention of a CPU kernel:
    void name(<buffer pointers...>, <int32 vals...>, int32 core_id)
`CPUProgram(..., threads=n)` calls it n times at once with core_id = 0..n-1; the kernel
splits its work by core_id. ctypes releases the GIL during the call, so the calls really
run in parallel on the shared thread pool.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tgcore.helpers import cache_dir, cpu_count
from tgcore.runtime.allocator import Allocator
from tgcore.runtime.compiler import ClangCompiler, CompileError, CompilerNotFoundError
from tgcore.runtime.device import Device

__all__ = ["CPUAllocator", "CPUDevice", "CPUProgram", "ClangCompiler", "CompileError", "CompilerNotFoundError"]

ALIGNMENT = 64  # bytes; enough for AVX/AVX-512 aligned loads and a cache line
_MMAP_THRESHOLD = 1 << 20  # buffers at least this big come from mmap: page aligned, lazily zeroed


class CPUAllocator(Allocator):
    """Host memory. A handle is a ctypes `c_uint8` array whose address is 64-byte aligned;
    it owns (keeps alive) the memory it points into, so it can be passed straight to kernels.
    """

    can_zero_copy = True

    def _alloc(self, nbytes: int, options: Any) -> Any:
        if nbytes >= _MMAP_THRESHOLD:
            # private (not shared) anonymous memory with huge pages: faster to stream, and what MPI's
            # single-copy path expects
            backing: Any = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            if hasattr(mmap, "MADV_HUGEPAGE"):
                backing.madvise(mmap.MADV_HUGEPAGE)
            pad = 0
        else:
            backing = (ctypes.c_uint8 * (nbytes + ALIGNMENT))()
            pad = -ctypes.addressof(backing) % ALIGNMENT
        return (ctypes.c_uint8 * nbytes).from_buffer(backing, pad)

    def copyin(self, dest: Any, src: memoryview) -> None:
        memoryview(dest).cast("B")[:src.nbytes] = src

    def copyout(self, dest: memoryview, src: Any) -> None:
        dest[:] = memoryview(src).cast("B")[:dest.nbytes]

    def as_buffer(self, handle: Any) -> memoryview:
        return memoryview(handle).cast("B")

    def offset(self, handle: Any, nbytes: int, offset: int) -> Any:
        if offset + nbytes > len(handle):
            raise ValueError(f"view of {nbytes} bytes at offset {offset} is outside a {len(handle)} byte buffer")
        return (ctypes.c_uint8 * nbytes).from_buffer(handle, offset)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def thread_pool() -> ThreadPoolExecutor:
    """The process-wide pool that runs kernel threads (CPU_COUNT workers)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=cpu_count(), thread_name_prefix="tgcore-cpu")
    return _pool


def _load_shared_object(name: str, lib: bytes) -> ctypes.CDLL:
    """dlopen `lib` via a temp file; retry under the cache dir if the temp dir is mounted noexec."""
    errors = []
    for directory in (None, str(cache_dir() / "so")):
        try:
            if directory is not None:
                os.makedirs(directory, exist_ok=True)
            fd, path = tempfile.mkstemp(prefix=f"tgcore-{name[:40]}-", suffix=".so", dir=directory)
        except OSError as e:
            errors.append(f"{directory}: {e}")
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(lib)
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
        finally:
            os.unlink(path)  # the loader keeps its mapping; the file is not needed anymore
    raise OSError(f"could not load the shared object for kernel {name!r}: " + "; ".join(errors))


_INT = int


def _run_core(fxn: Any, args: tuple[Any, ...], core_id: int) -> None:
    fxn(*args, core_id)


def run_on_cores(fxn: Any, args: tuple[Any, ...], threads: int) -> None:
    """Call ``fxn(*args, core_id)`` for core_id 0..threads-1 at once: core 0 on this thread, the rest on the
    shared pool (ctypes releases the GIL). The calling convention of every CPU kernel, whoever compiled it."""
    if threads <= 1:
        fxn(*args, 0)
        return
    pool = thread_pool()
    futures = [pool.submit(_run_core, fxn, args, core_id) for core_id in range(1, threads)]
    try:
        fxn(*args, 0)
    finally:
        for future in futures:
            future.result()


class CPUProgram:
    """A kernel in a shared object: `CPUProgram(name, lib)` loads `lib` (bytes) and finds `name`.

    `prg(*bufs, vals=(), threads=1, wait=False)`: bufs are allocator handles (or raw int
    addresses), vals int32 scalars. Returns the elapsed seconds if wait, else None.
    """

    def __init__(self, name: str, lib: bytes):
        self.name = name
        self.lib = _load_shared_object(name, lib)
        try:
            self.fxn = getattr(self.lib, name)
        except AttributeError:
            raise AttributeError(f"shared object has no function {name!r} (is the kernel name right?)") from None
        # No argtypes: ctypes passes arrays as pointers and ints as C int (= int32 here),
        # which is ~1µs faster per call than converting through declared argtypes.
        self.fxn.restype = None

    def __call__(self, *bufs: Any, vals: tuple[int, ...] = (), threads: int = 1, wait: bool = False) -> float | None:
        if _INT in map(type, bufs):  # raw addresses: as C int they would be truncated
            bufs = tuple(ctypes.c_void_p(b) if type(b) is int else b for b in bufs)
        start = time.perf_counter() if wait else 0.0
        if threads <= 1:
            self.fxn(*bufs, *vals, 0)  # the common case, without building an argument tuple
        else:
            run_on_cores(self.fxn, (*bufs, *vals), threads)
        return time.perf_counter() - start if wait else None

    def __repr__(self) -> str:
        return f"<CPUProgram {self.name}>"


class CPUDevice(Device):
    """The host CPU. `threads` is how many core_ids the engine should split kernels into."""

    def __init__(self, name: str = "CPU", variant: str | None = None):
        super().__init__(name, variant, allocator=CPUAllocator(), program=CPUProgram)
        self.threads = cpu_count()

"""The CPU device: host memory, shared objects loaded with ctypes, kernels split over threads.

In: C source from the C renderer (compiled by `ClangCompiler` into shared-object bytes) or
any other shared object a renderer produces. Out: callables that run a kernel on host
buffers.

Calling convention of a CPU kernel:
    void name(<buffer pointers...>, <int32 vals...>, int32 core_id)
`CPUProgram(..., threads=n)` calls it n times at once with core_id = 0..n-1; the kernel
splits its work by core_id. The calls run on a small native pthread pool (built from C on
first use, Linux x86-64/AArch64): one ctypes call starts and joins them, workers spin
briefly, then sleep. The core_ids are claimed one at a time by whichever thread is running (the
caller included), so on a busy machine a worker the OS has descheduled does not hold up the kernel
unless it already holds a core_id. Elsewhere, or for kernels with more than POOL_MAX_ARGS arguments, they
run on a Python thread pool (ctypes releases the GIL, so they still run in parallel).
`NativeGraph` runs a fixed list of kernels (a JIT capture) in one call into the pool.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tgcore.helpers import cache_dir, cpu_count
from tgcore.runtime.allocator import Allocator
from tgcore.runtime.compiler import ClangCompiler, CompileError, CompilerNotFoundError
from tgcore.runtime.device import Device

__all__ = ["CPUAllocator", "CPUDevice", "CPUProgram", "ClangCompiler", "CompileError", "CompilerNotFoundError"]

ALIGNMENT = 64  # bytes; enough for AVX/AVX-512 aligned loads and a cache line
_MMAP_THRESHOLD = 1 << 20  # buffers at least this big come from mmap: page aligned, lazily zeroed
_HUGE_PAGE_MAX = 2 << 20  # a larger huge page (AArch64 with 16 or 64 KiB pages: 32 or 512 MiB) is not asked for


class CPUAllocator(Allocator):
    """Host memory. A handle is a ctypes `c_uint8` array whose address is 64-byte aligned;
    it owns (keeps alive) the memory it points into, so it can be passed straight to kernels.
    """

    can_zero_copy = True
    fresh_is_zero = True  # (anonymous mmap pages and ctypes arrays start zeroed; mmap's are mapped on first touch)

    def _alloc(self, nbytes: int, options: Any) -> Any:
        if nbytes >= _MMAP_THRESHOLD:
            # private (not shared) anonymous memory, what MPI's single-copy path expects, in huge pages (below).
            # Not a zeroed buffer (a cache filled a little at a time): its first write into each huge page would
            # zero all of it, small pages map only what is written
            if getattr(options, "zeroed", False):
                backing: Any = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                _advise(backing, "MADV_NOHUGEPAGE", 0, nbytes)
                pad = 0
            else:
                backing, pad = _huge_mapping(nbytes)
        else:
            backing = (ctypes.c_uint8 * (nbytes + ALIGNMENT))()
            pad = -ctypes.addressof(backing) % ALIGNMENT
        return (ctypes.c_uint8 * nbytes).from_buffer(backing, pad)

    def free_cache(self) -> None:
        """Really free every cached buffer, and hand the C heap's free pages back to the system: the small buffers
        (under ``_MMAP_THRESHOLD``) come from ``malloc``, which keeps what they freed (SmolLM2's ``tg serve llm
        --parallel 8`` after its warm-ups, before the captures' own intermediates stopped being cached: RSS 3.1 GB,
        1.6 GB after freeing the cache, 0.8 GB once trimmed)."""
        super().free_cache()
        _trim_heap()

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


def _advise(backing: mmap.mmap, advice: str, start: int, length: int) -> None:
    """``madvise`` where the platform has it (a hint: the kernel may ignore it)."""
    flag = getattr(mmap, advice, None)
    if flag is not None:
        backing.madvise(flag, start, length)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None (not Linux, or another C library)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim  # type: ignore[no-any-return]


def _trim_heap() -> None:
    """Return the C heap's free memory to the system where the C library can (glibc's ``malloc_trim(0)``)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _huge_page_size() -> int:
    """The size of the transparent huge pages the kernel maps for memory that asks for them (Linux, not disabled),
    up to ``_HUGE_PAGE_MAX``; else 0."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return 0
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            size = int(f.read())
    except (OSError, ValueError):
        return 0
    return size if 0 < size <= _HUGE_PAGE_MAX and size % mmap.PAGESIZE == 0 else 0


HUGE_PAGE = _huge_page_size()


def _huge_mapping(nbytes: int) -> tuple[mmap.mmap, int]:
    """A private anonymous mapping and the offset in it where ``nbytes`` start on a huge page, the whole huge pages
    inside those bytes asked for (``MADV_HUGEPAGE``; the tail past the last whole one is kept in small pages,
    ``MADV_NOHUGEPAGE``, so a buffer never holds more memory than its size). Huge pages make Open MPI's single copy
    out of the memory faster (fewer pages to pin) and keep large kernels' operands in fewer TLB entries. A buffer
    under one huge page (where only rounding it up would give one: up to twice its memory) and a machine without
    huge pages: a plain mapping of ``nbytes``; the huge page reserved in front of a larger one, to find its start,
    is address space only."""
    whole = nbytes // HUGE_PAGE * HUGE_PAGE if HUGE_PAGE else 0
    if not whole:
        return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS), 0
    backing = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = ctypes.c_char.from_buffer(backing)  # (its address; released at once, so the mapping can close)
    pad = -ctypes.addressof(start) % HUGE_PAGE
    del start
    _advise(backing, "MADV_HUGEPAGE", pad, whole)
    # (and not the rest: where the kernel maps huge pages unasked, THP "always", the tail and the reserve could
    # hold a whole huge page of their own, a buffer of 3 MiB then 4)
    _advise(backing, "MADV_NOHUGEPAGE", pad + whole, len(backing) - pad - whole)
    return backing, pad


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


_dlclose: Callable[[int], None] | None
try:
    from _ctypes import dlclose as _dlclose  # POSIX
except ImportError:  # Windows: libraries stay loaded
    _dlclose = None


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

# ---- the native pool: kernel threads started and woken in C, so a multi-core kernel costs one ctypes call ----

POOL_MAX_ARGS = 24  # kernels with more arguments (before core_id) use the Python thread pool
POOL_MAX_THREADS = 0xFFFF  # ... and kernels split into more core_ids (a 16-bit field of the pool's job word)
_POOL_SPIN = 400    # pause instructions a waiting thread spins before it sleeps (a few microseconds)
_POOL_HOT_SPIN = 100_000  # ... while a graph of kernels runs (yielding now and then: the machine may be busy)

# Every argument travels as one machine word: pointers, and int32 values sign-extended (the callee reads the low
# 32 bits of the register or 8-byte stack slot). That is how the x86-64 SysV and Linux AArch64 calling
# conventions pass them, so the pool is used on those only (Apple's arm64 packs stack arguments).
_POOL_SOURCE = """\
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>
typedef intptr_t W;
static pthread_mutex_t run_mu = PTHREAD_MUTEX_INITIALIZER, mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static int gen, created_gen, nworkers, job_nargs, hot, done_chunks;
static uint32_t job_number;
/* the running job: bits 63..32 its number, 31..16 its chunk count, 15..0 the next chunk to claim */
static uint64_t job;
static void *job_fn; static W *job_args;
static inline void relax(void) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
static inline void relax_or_yield(int spins) {  /* a busy machine: let a descheduled partner thread run */
  if ((spins & 255) == 255) sched_yield(); else relax();
}
static void call(void *f, W *a, int n, W core) {
  switch (n) {
%(cases)s
  }
}
/* claim chunks (core_ids) of job `number` one at a time and run them until none is left. Whoever is running
   takes the next chunk, so a thread the OS has descheduled delays the job by at most the chunk it holds */
static void run_chunks(uint32_t number) {
  for (;;) {
    uint64_t s = __atomic_load_n(&job, __ATOMIC_ACQUIRE);
    uint32_t chunks = (uint32_t)(s >> 16) & 0xffff, next = (uint32_t)s & 0xffff;
    if ((uint32_t)(s >> 32) != number || next >= chunks) return;
    if (!__atomic_compare_exchange_n(&job, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
    call(job_fn, job_args, job_nargs, next);  /* the job stays until this chunk is counted done */
    if (__atomic_add_fetch(&done_chunks, 1, __ATOMIC_ACQ_REL) == (int)chunks) {
      pthread_mutex_lock(&mu); pthread_cond_signal(&done_cv); pthread_mutex_unlock(&mu);
    }
  }
}
static void *worker(void *p) {
  (void)p;
  int seen = __atomic_load_n(&created_gen, __ATOMIC_ACQUIRE);  /* jobs after its start */
  for (;;) {
    for (int spins = 0; __atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen; spins++) {
      if (spins < %(spin)d || (__atomic_load_n(&hot, __ATOMIC_ACQUIRE) && spins < %(hot_spin)d)) {
        relax_or_yield(spins);
        continue;
      }
      pthread_mutex_lock(&mu);
      while (__atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen) pthread_cond_wait(&cv, &mu);
      pthread_mutex_unlock(&mu);
    }
    seen = __atomic_load_n(&gen, __ATOMIC_ACQUIRE);
    run_chunks((uint32_t)(__atomic_load_n(&job, __ATOMIC_ACQUIRE) >> 32));
  }
  return 0;
}
static int ensure_workers(int threads) {  /* under run_mu */
  __atomic_store_n(&created_gen, __atomic_load_n(&gen, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
  while (nworkers < threads - 1) {
    pthread_t t; pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &at, worker, 0);
    pthread_attr_destroy(&at);
    if (err) return err;
    nworkers++;
  }
  return 0;
}
static void split(void *f, W *args, int nargs, int threads) {  /* under run_mu, workers started */
  job_fn = f; job_args = args; job_nargs = nargs;
  __atomic_store_n(&done_chunks, 0, __ATOMIC_RELAXED);  /* every chunk of the last job was counted */
  uint32_t number = ++job_number;
  __atomic_store_n(&job, ((uint64_t)number << 32) | ((uint64_t)threads << 16), __ATOMIC_RELEASE);
  pthread_mutex_lock(&mu);
  __atomic_add_fetch(&gen, 1, __ATOMIC_ACQ_REL);
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  run_chunks(number);
  int limit = __atomic_load_n(&hot, __ATOMIC_ACQUIRE) ? %(hot_spin)d : %(spin)d;
  for (int spins = 0; spins < limit && __atomic_load_n(&done_chunks, __ATOMIC_ACQUIRE) < threads; spins++)
    relax_or_yield(spins);
  if (__atomic_load_n(&done_chunks, __ATOMIC_ACQUIRE) < threads) {
    pthread_mutex_lock(&mu);
    while (__atomic_load_n(&done_chunks, __ATOMIC_ACQUIRE) < threads) pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
  }
}
int tg_pool_run(void *f, W *args, int nargs, int threads) {
  pthread_mutex_lock(&run_mu);
  int err = ensure_workers(threads);
  if (!err) split(f, args, nargs, threads);
  pthread_mutex_unlock(&run_mu);
  return err;
}
static inline int64_t now_ns(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
/* a whole sequence of kernels in one call; the workers keep spinning between its split kernels. With `stamps`
   (n + 1 slots, else NULL) it records the clock before the first kernel and after each one */
typedef struct { void *fn; W *args; int nargs, threads; } tg_step;
int tg_pool_graph(tg_step *steps, int n, int64_t *stamps) {
  int most = 1;
  for (int i = 0; i < n; i++) most = steps[i].threads > most ? steps[i].threads : most;
  pthread_mutex_lock(&run_mu);
  int err = ensure_workers(most);
  if (!err) {
    __atomic_store_n(&hot, 1, __ATOMIC_RELEASE);
    if (stamps) stamps[0] = now_ns();
    for (int i = 0; i < n; i++) {
      if (steps[i].threads <= 1) call(steps[i].fn, steps[i].args, steps[i].nargs, 0);
      else split(steps[i].fn, steps[i].args, steps[i].nargs, steps[i].threads);
      if (stamps) stamps[i + 1] = now_ns();
    }
    __atomic_store_n(&hot, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&run_mu);
  return err;
}
/* in a forked child the workers are gone: start afresh */
void tg_pool_forget(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER; pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
  run_mu = fresh; mu = fresh; cv = fresh_cv; done_cv = fresh_cv; nworkers = 0; hot = 0; done_chunks = 0; job = 0;
}
"""


def _pool_source() -> str:
    cases = []
    for n in range(POOL_MAX_ARGS + 1):
        params = ", ".join(["W"] * (n + 1))
        args = "".join(f"a[{i}], " for i in range(n))
        cases.append(f"  case {n}: ((void (*)({params}))f)({args}core); break;")
    return _POOL_SOURCE % {"cases": "\n".join(cases), "spin": _POOL_SPIN, "hot_spin": _POOL_HOT_SPIN}


_native_pool: Any = None
_native_pool_state = "untried"  # "untried", "ready" or "unavailable"


def _pool_supported() -> bool:
    import platform
    import sys
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64")


def native_pool() -> Any:
    """``tg_pool_run(fn, args, nargs, threads)`` from a small C library built on first use, or None where it
    cannot be built or is not supported (then kernels run on the Python thread pool)."""
    global _native_pool, _native_pool_state
    if _native_pool_state != "untried":
        return _native_pool
    with _pool_lock:
        if _native_pool_state == "untried":
            try:
                if not _pool_supported() or os.environ.get("TG_NATIVE_POOL", "1") == "0":
                    raise OSError("not supported here")
                compiler = ClangCompiler(flags=["-O2", "-shared", "-fPIC", "-pthread"])
                lib = _load_shared_object("tg_pool", compiler.compile_cached(_pool_source()))
                lib.tg_pool_run.restype = ctypes.c_int
                lib.tg_pool_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
                lib.tg_pool_forget.restype = None
                lib.tg_pool_graph.restype = ctypes.c_int
                lib.tg_pool_graph.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
                global _native_graph_fn
                _native_graph_fn = lib.tg_pool_graph
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=lib.tg_pool_forget)
                _native_pool, _native_pool_state = lib.tg_pool_run, "ready"
            except (OSError, CompileError, CompilerNotFoundError, AttributeError):
                _native_pool, _native_pool_state = None, "unavailable"
    return _native_pool


_native_graph_fn: Any = None


class _GraphStep(ctypes.Structure):
    _fields_ = [("fn", ctypes.c_void_p), ("args", ctypes.c_void_p), ("nargs", ctypes.c_int),
                ("threads", ctypes.c_int)]


class NativeGraph:
    """A fixed sequence of CPU kernels run by one call into the native pool (workers stay awake between the
    kernels split over cores). ``set(step, arg, value)`` changes one argument word (a buffer address or an
    int32 value) before a ``run()``. Build with ``NativeGraph.build``, which returns None when the native
    pool is not available or a program has no native entry ``fxn`` (a ctypes function following the CPU kernel
    convention: ``CPUProgram``'s, or a plugin's machine code such as tg-x86's ``X86Program``)."""

    def __init__(self, calls: list[tuple[int, list[int], int]], programs: tuple[Any, ...] = ()) -> None:
        self.programs = programs  # the kernels' code must stay loaded while the graph holds their addresses
        self.words = [(ctypes.c_ssize_t * max(1, len(w)))(*w) for _, w, _ in calls]
        self.steps = (_GraphStep * max(1, len(calls)))()
        for step, (fn, w, threads), words in zip(self.steps, calls, self.words, strict=False):
            step.fn, step.args, step.nargs, step.threads = fn, ctypes.addressof(words), len(w), threads
        self.count = len(calls)

    @staticmethod
    def build(calls: list[tuple[Any, tuple[Any, ...], int]]) -> NativeGraph | None:
        """``calls``: (program, argument words or handles, threads) per kernel, arguments before core_id."""
        if native_pool() is None or _native_graph_fn is None:
            return None
        if not all(getattr(p, "fxn", None) is not None and len(a) <= POOL_MAX_ARGS and t <= POOL_MAX_THREADS
                   for p, a, t in calls):
            return None
        return NativeGraph([(ctypes.cast(p.fxn, ctypes.c_void_p).value or 0, [_as_word(x) for x in a], t)
                            for p, a, t in calls], tuple(p for p, _, _ in calls))

    def set(self, step: int, arg: int, value: Any) -> None:
        self.words[step][arg] = _as_word(value)

    def set_all(self, places: list[tuple[int, int]], value: Any) -> None:
        """``set`` one value at every (step, argument) of ``places`` (non-empty). The places of one value are
        written together (a JIT replay's input or variable): when the first already holds it, so do the rest, and
        nothing is written (a replay on the same memory as the last one)."""
        word, words = _as_word(value), self.words
        step, arg = places[0]
        if words[step][arg] == word:
            return
        for step, arg in places:
            words[step][arg] = word

    def run(self, timed: bool = False) -> list[float] | None:
        """Run every kernel in order. With ``timed``, return each kernel's seconds (clock read in C between
        kernels, so the figures carry no Python or ctypes cost), else None."""
        stamps = (ctypes.c_int64 * (self.count + 1))() if timed else None
        err = _native_graph_fn(self.steps, self.count, stamps)
        if err:
            raise OSError(err, f"could not start kernel threads: {os.strerror(err)}")
        if stamps is None:
            return None
        return [(stamps[i + 1] - stamps[i]) * 1e-9 for i in range(self.count)]


def _as_word(arg: Any) -> int:
    """A kernel argument as the machine word the native pool passes: a buffer's address or an int."""
    if type(arg) is _INT:
        return arg
    if isinstance(arg, ctypes.c_void_p):
        return arg.value or 0
    return ctypes.addressof(arg)


def _run_core(fxn: Any, args: tuple[Any, ...], core_id: int) -> None:
    fxn(*args, core_id)


def run_on_cores(fxn: Any, args: tuple[Any, ...], threads: int) -> None:
    """Call ``fxn(*args, core_id)`` for core_id 0..threads-1 at once: core 0 on this thread, the rest on
    worker threads (the native pool, else the Python pool; ctypes releases the GIL). The calling convention
    of every CPU kernel, whoever compiled it."""
    if threads <= 1:
        fxn(*args, 0)
        return
    native = native_pool() if len(args) <= POOL_MAX_ARGS and threads <= POOL_MAX_THREADS else None
    if native is not None:
        words = (ctypes.c_ssize_t * max(1, len(args)))(*map(_as_word, args))
        if native(ctypes.cast(fxn, ctypes.c_void_p), words, len(args), threads) == 0:
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

    def __del__(self) -> None:
        """Unload the library (its memory mappings) once nothing can call the kernel: whatever keeps the function
        (a runner cache, a JIT capture, a NativeGraph) keeps this program."""
        lib = self.__dict__.get("lib")
        if lib is not None and _dlclose is not None:
            self.__dict__.pop("fxn", None)
            _dlclose(lib._handle)

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

    def profile_counters(self) -> Any:
        """Linux perf counters over this process's threads (the kernel pool's workers included)."""
        from tgcore.runtime.perfcounters import ThreadCounters
        return ThreadCounters()

"""Buffer and Allocator on the CPU and NULL devices: laziness, views, copies, cache, mem_used."""

import ctypes
import platform
import sys
import types

import numpy as np
import pytest

from tgcore.dtype import dtypes
from tgcore.engine.stats import GlobalCounters
from tgcore.runtime import cpu as cpu_runtime
from tgcore.runtime.allocator import Allocator, BufferOptions
from tgcore.runtime.buffer import Buffer
from tgcore.runtime.cpu import CPUAllocator, CPUDevice
from tgcore.runtime.null import NullDevice, NullHandle


@pytest.fixture
def cpu():
    return CPUDevice()


def test_allocation_is_lazy(cpu):
    before = GlobalCounters.mem_used
    buf = Buffer(cpu, 100, dtypes.float32)
    assert not buf.is_allocated() and buf.nbytes == 400
    assert GlobalCounters.mem_used == before
    buf.allocate()
    assert buf.is_allocated()
    assert GlobalCounters.mem_used == before + 400
    buf.deallocate()
    assert not buf.is_allocated()
    assert GlobalCounters.mem_used == before


def test_preallocate(cpu):
    assert Buffer(cpu, 4, dtypes.int32, preallocate=True).is_allocated()


def test_copy_roundtrip_matches_numpy(cpu):
    data = np.arange(-50, 50, dtype=np.int16)
    buf = Buffer(cpu, 100, dtypes.int16).copyin(data)
    out = np.zeros(100, dtype=np.int16)
    buf.copyout(memoryview(out))
    np.testing.assert_array_equal(out, data)
    np.testing.assert_array_equal(buf.numpy(), data)
    assert bytes(buf.as_buffer()) == data.tobytes()
    # copyin from read-only bytes works too
    buf.copyin(bytes(range(200)))
    assert bytes(buf.as_buffer()) == bytes(range(200))


def test_size_mismatch_is_an_error(cpu):
    buf = Buffer(cpu, 4, dtypes.float32)
    with pytest.raises(ValueError, match="12 bytes into a buffer of 16"):
        buf.copyin(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="into 32 bytes"):
        buf.copyout(memoryview(bytearray(32)))
    with pytest.raises(ValueError, match="read-only"):
        buf.copyout(memoryview(bytes(16)))


def test_as_buffer_is_zero_copy_on_cpu(cpu):
    buf = Buffer(cpu, 8, dtypes.uint8).copyin(bytes(8))
    mv = buf.as_buffer()
    mv[3] = 42
    assert buf.numpy()[3] == 42  # numpy() copies, as_buffer() aliases
    arr = buf.numpy()
    arr[0] = 7
    assert bytes(buf.as_buffer())[0] == 0


def test_handles_are_64_byte_aligned(cpu):
    bufs = [Buffer(cpu, n, dtypes.uint8).allocate() for n in (1, 3, 63, 100, 4096, 1 << 21)]
    for buf in bufs:
        assert ctypes.addressof(buf.handle) % 64 == 0


def test_large_buffer_starts_zeroed_and_works(cpu):
    buf = Buffer(cpu, 1 << 20, dtypes.float32)  # 4 MB: mmap-backed
    arr = buf.numpy()
    assert arr.shape == (1 << 20,) and not arr.any()
    buf.copyin(np.ones(1 << 20, np.float32))
    assert buf.numpy().sum() == 1 << 20


def _mapping_flags(addr):
    """The ``VmFlags`` of the mapping holding ``addr`` (``/proc/self/smaps``): "hg" asked for huge pages, "nh" not."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(maxsplit=1)[0]
            if not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {addr:#x}")


@pytest.mark.skipif(not cpu_runtime.HUGE_PAGE, reason="no transparent huge pages here (not Linux, or disabled)")
def test_large_buffers_start_on_a_huge_page_and_ask_for_whole_ones(cpu):
    huge = cpu_runtime.HUGE_PAGE
    buf = Buffer(cpu, 3 * huge + 4096, dtypes.uint8).allocate()
    addr = ctypes.addressof(buf.handle)
    assert addr % huge == 0
    assert "hg" in _mapping_flags(addr) and "hg" in _mapping_flags(addr + 3 * huge - 1)
    assert "nh" in _mapping_flags(addr + 3 * huge)  # (the tail: small pages even under THP "always")
    buf.copyin(np.arange(buf.nbytes, dtype=np.uint8))
    assert np.array_equal(buf.numpy(), np.arange(buf.nbytes, dtype=np.uint8))
    under = Buffer(cpu, huge - 4096, dtypes.uint8).allocate()  # (only rounding up would give it a huge page)
    assert "hg" not in _mapping_flags(ctypes.addressof(under.handle))
    zeroed = Buffer(cpu, 3 * huge, dtypes.uint8, options=BufferOptions(zeroed=True)).allocate()
    assert "nh" in _mapping_flags(ctypes.addressof(zeroed.handle))  # (small pages: only what is written is mapped)


def test_views_share_memory(cpu):
    base = Buffer(cpu, 8, dtypes.float32).copyin(np.arange(8, dtype=np.float32))
    view = base.view(4, dtypes.float32, 16)  # elements 4..7
    np.testing.assert_array_equal(view.numpy(), [4, 5, 6, 7])
    view.copyin(np.full(4, -1, np.float32))
    np.testing.assert_array_equal(base.numpy(), [0, 1, 2, 3, -1, -1, -1, -1])
    # a view with another dtype reinterprets the same bytes
    as_int = base.view(2, dtypes.int32, 0)
    np.testing.assert_array_equal(as_int.numpy(), np.arange(8, dtype=np.float32)[:2].view(np.int32))
    # a view of a view is a view of the base, offsets add up
    inner = view.view(2, dtypes.float32, 4)
    assert inner.base is base and inner.offset == 20
    inner.copyin(np.array([9, 9], np.float32))
    np.testing.assert_array_equal(base.numpy(), [0, 1, 2, 3, -1, 9, 9, -1])


def test_view_out_of_range(cpu):
    base = Buffer(cpu, 4, dtypes.float32)
    with pytest.raises(ValueError, match="does not fit"):
        base.view(2, dtypes.float32, 12)
    with pytest.raises(ValueError, match="only meaningful for a view"):
        Buffer(cpu, 4, dtypes.float32, offset=4)


def test_base_outlives_its_views(cpu):
    before = GlobalCounters.mem_used
    base = Buffer(cpu, 16, dtypes.uint8).copyin(bytes(range(16)))
    view = base.view(4, dtypes.uint8, 8).allocate()
    base.deallocate()  # a view is alive: memory must stay
    assert not base.is_allocated()
    assert GlobalCounters.mem_used == before + 16
    assert bytes(view.as_buffer()) == bytes(range(8, 12))
    view.deallocate()  # last view gone: now the base's memory is returned
    assert GlobalCounters.mem_used == before
    assert (16, None) in cpu.allocator.cache


def test_garbage_collected_buffers_return_memory(cpu):
    before = GlobalCounters.mem_used
    base = Buffer(cpu, 1000, dtypes.float32).allocate()
    views = [base.view(10, dtypes.float32, 40 * i).allocate() for i in range(5)]
    assert GlobalCounters.mem_used == before + 4000
    del base
    assert GlobalCounters.mem_used == before + 4000  # views keep the base alive
    del views
    assert GlobalCounters.mem_used == before


def test_allocator_cache_reuses_freed_memory(cpu):
    before = GlobalCounters.mem_used
    a = Buffer(cpu, 256, dtypes.float32).allocate()
    address = ctypes.addressof(a.handle)
    a.deallocate()
    assert GlobalCounters.mem_used == before
    b = Buffer(cpu, 256, dtypes.float32).allocate()  # same nbytes and options: reused
    assert ctypes.addressof(b.handle) == address
    c = Buffer(cpu, 256, dtypes.float32, options=BufferOptions(host=True)).allocate()  # other options: new
    assert ctypes.addressof(c.handle) != address
    b.deallocate()
    c.deallocate()
    assert len(cpu.allocator.cache) == 2
    cpu.allocator.free_cache()
    assert not cpu.allocator.cache and cpu.allocator.cached_bytes == 0
    assert GlobalCounters.mem_used == before


def test_nolru_skips_the_cache(cpu):
    buf = Buffer(cpu, 32, dtypes.uint8, options=BufferOptions(nolru=True)).allocate()
    buf.deallocate()
    assert not cpu.allocator.cache


def test_a_buffer_marked_not_to_be_cached_skips_the_cache(cpu):
    buf = Buffer(cpu, 32, dtypes.uint8).allocate()
    buf.cache_when_freed = False  # (what a jit capture does to its capturing call's intermediates)
    buf.deallocate()
    assert not cpu.allocator.cache


def test_free_cache_hands_the_c_heaps_free_memory_back(cpu, monkeypatch):
    """The CPU allocator's ``free_cache`` trims the C heap (glibc's ``malloc_trim(0)``) after freeing its buffers, and
    works where the C library has no such call."""
    real = cpu_runtime._malloc_trim
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":  # (the real call is found there)
        assert callable(real())
    trims: list[int] = []
    monkeypatch.setattr(cpu_runtime, "_malloc_trim", lambda: trims.append)
    Buffer(cpu, 64, dtypes.uint8).allocate().deallocate()
    assert cpu.allocator.cached_bytes == 64
    cpu.allocator.free_cache()
    assert cpu.allocator.cached_bytes == 0 and trims == [0]
    monkeypatch.setattr(cpu_runtime, "_malloc_trim", lambda: None)
    Buffer(cpu, 64, dtypes.uint8).allocate().deallocate()
    cpu.allocator.free_cache()
    assert cpu.allocator.cached_bytes == 0


@pytest.mark.parametrize("size", [256, 1 << 20])  # (ctypes memory below the mmap threshold, mmap pages above it)
def test_zeroed_buffers_read_zeros_even_after_a_freed_buffer_of_their_size(cpu, size):
    dirty = Buffer(cpu, size, dtypes.float32, options=BufferOptions(zeroed=True)).allocate()
    dirty.copyin(memoryview(np.full(size, 7.0, np.float32)))
    dirty.deallocate()  # (not kept for reuse: a zeroed buffer never is)
    plain = Buffer(cpu, size, dtypes.float32).allocate()
    plain.copyin(memoryview(np.full(size, 5.0, np.float32)))
    plain.deallocate()
    fresh = Buffer(cpu, size, dtypes.float32, options=BufferOptions(zeroed=True)).allocate()
    assert not fresh.numpy().any()
    fresh.deallocate()
    cpu.allocator.free_cache()


def test_zeroed_fills_memory_an_allocator_does_not_give_zeroed():
    class Dirty(Allocator):
        def _alloc(self, nbytes, options):
            return bytearray(b"\xff" * nbytes)

        def copyin(self, dest, src):
            dest[:src.nbytes] = src

    alloc = Dirty()
    assert alloc.alloc(16, BufferOptions(zeroed=True)) == bytearray(16)
    assert alloc.alloc(16) == bytearray(b"\xff" * 16)


class RecordingAllocator(Allocator):
    """Counts real allocations and frees; handles are bytearrays."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.allocated = 0
        self.freed = 0

    def _alloc(self, nbytes, options):
        self.allocated += 1
        return bytearray(nbytes)

    def _free(self, handle, nbytes, options):
        self.freed += 1


def test_cache_limit_evicts_oldest_first():
    alloc = RecordingAllocator(cache_limit=250)
    handles = [alloc.alloc(100) for _ in range(3)]
    for h in handles:
        alloc.free(h, 100)
    assert alloc.freed == 1 and alloc.cached_bytes == 200  # 300 > 250: the oldest went
    assert alloc.alloc(100) is handles[2]  # most recently freed comes back first
    assert alloc.allocated == 3


def test_memory_error_flushes_cache_and_retries():
    class Tight(RecordingAllocator):
        def _alloc(self, nbytes, options):
            if self.cache_holding():
                raise MemoryError
            return super()._alloc(nbytes, options)

        def cache_holding(self):
            return self.cached_bytes > 0

    alloc = Tight()
    alloc.free(alloc.alloc(64), 64)
    assert alloc.alloc(128) is not None
    assert alloc.freed == 1 and not alloc.cache


def test_device_name_resolved_lazily_through_open_device(monkeypatch, cpu):
    opened = []

    def fake_open_device(name):
        opened.append(name)
        return cpu

    monkeypatch.setitem(sys.modules, "tgcore.runtime.registry", types.SimpleNamespace(open_device=fake_open_device))
    buf = Buffer("CPU", 4, dtypes.float32)
    assert buf.device == "CPU" and opened == []  # nothing opened yet
    buf.copyin(np.arange(4, dtype=np.float32))
    assert opened == ["CPU"]
    np.testing.assert_array_equal(buf.numpy(), np.arange(4))
    assert opened == ["CPU"]  # looked up once


def test_numpy_of_bfloat16_uses_ml_dtypes(cpu):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    buf = Buffer(cpu, 3, dtypes.bfloat16).copyin(values.view(np.uint16))
    out = buf.numpy()
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), [1.5, -2.0, 3.25])


def test_copy_from_another_buffer(cpu):
    src = Buffer(cpu, 6, dtypes.int32).copyin(np.arange(6, dtype=np.int32))
    dst = Buffer(cpu, 3, dtypes.int32).copy_from(src.view(3, dtypes.int32, 12))
    np.testing.assert_array_equal(dst.numpy(), [3, 4, 5])


def test_empty_buffer(cpu):
    buf = Buffer(cpu, 0, dtypes.float32)
    assert buf.numpy().shape == (0,)
    assert bytes(buf.as_buffer()) == b""


# ---- NULL ----

def test_null_allocates_nothing():
    dev = NullDevice()
    before = GlobalCounters.mem_used
    buf = Buffer(dev, 1 << 40, dtypes.float32).allocate()  # 4 TB: fine, nothing is allocated
    assert isinstance(buf.handle, NullHandle)
    assert GlobalCounters.mem_used == before
    small = Buffer(dev, 4, dtypes.uint8).copyin(b"abcd")
    assert bytes(small.copyout(memoryview(bytearray(b"wxyz")))) == b"wxyz"  # nothing stored, nothing read
    view = buf.view(10, dtypes.float32, 40)
    assert isinstance(view.handle, NullHandle) and view.handle.nbytes == 40
    buf.deallocate()
    assert not dev.allocator.cache
    prg = dev.program("anything", b"")
    assert prg(buf.handle, vals=(1,), threads=4) is None
    assert prg(wait=True) == 0.0


def test_cpu_allocator_offset_bounds():
    alloc = CPUAllocator()
    handle = alloc.alloc(16)
    with pytest.raises(ValueError, match="outside a 16 byte buffer"):
        alloc.offset(handle, 8, 12)
    alloc.free(handle, 16)


def test_threads_allocating_at_once_keep_mem_used_exact(cpu):
    import threading

    before = GlobalCounters.mem_used

    def churn(seed):
        for i in range(200):
            buf = Buffer(cpu, 16 + (seed + i) % 5, dtypes.float32).allocate()
            buf.deallocate()

    workers = [threading.Thread(target=churn, args=(k,)) for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert GlobalCounters.mem_used == before
    assert sum(len(handles) for handles in cpu.allocator.cache.values()) <= 4 * 5  # freed buffers were reused


def test_views_alive_counts_every_view_until_it_is_garbage():
    import gc
    base = Buffer("CPU", 16, dtypes.float32)
    a = base.view(4, dtypes.float32)            # never allocated
    b = a.view(2, dtypes.float32, offset=4)     # a view of a view counts on the root
    assert base.views_alive == 2 and a.views_alive == 0
    b.ensure_allocated()
    del a
    gc.collect()
    assert base.views_alive == 1
    del b
    gc.collect()
    assert base.views_alive == 0

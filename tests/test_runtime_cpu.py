"""CPU runtime: ClangCompiler, its disk cache, CPUProgram over Buffers, checked against numpy."""

import subprocess

import numpy as np
import pytest

from tgcore.runtime import compiler as compiler_mod
from tgcore.runtime.buffer import Buffer
from tgcore.runtime.compiler import CompileError, CompilerNotFoundError
from tgcore.runtime.cpu import ClangCompiler, CPUDevice, CPUProgram


class FakeDType:
    """Duck type of tgcore.dtype.DType (itemsize, np, name)."""

    def __init__(self, name, np_dtype):
        self.name, self.np, self.itemsize = name, np_dtype, np.dtype(np_dtype).itemsize


float32 = FakeDType("float32", np.float32)

# hand-written kernel: core_id picks a contiguous chunk of [0, n)
ADD_SRC = r"""
void add(float* restrict out, const float* restrict a, const float* restrict b, int n, int nthreads, int core_id) {
  int chunk = (n + nthreads - 1) / nthreads;
  int start = core_id * chunk;
  int end = start + chunk < n ? start + chunk : n;
  for (int i = start; i < end; i++) out[i] = a[i] + b[i];
}
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CC", raising=False)


@pytest.fixture(scope="module")
def add_lib():
    return ClangCompiler().compile(ADD_SRC)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_add_kernel_matches_numpy(add_lib, threads):
    dev = CPUDevice()
    n = 1001  # not a multiple of the thread count
    rng = np.random.default_rng(0)
    a_np = rng.standard_normal(n).astype(np.float32)
    b_np = rng.standard_normal(n).astype(np.float32)
    a = Buffer(dev, n, float32).copyin(a_np)
    b = Buffer(dev, n, float32).copyin(b_np)
    out = Buffer(dev, n, float32)
    prg = CPUProgram("add", add_lib)
    elapsed = prg(out.handle, a.handle, b.handle, vals=(n, threads), threads=threads, wait=True)
    assert isinstance(elapsed, float) and elapsed >= 0
    np.testing.assert_array_equal(out.numpy(), a_np + b_np)


def test_program_called_many_times_and_without_wait(add_lib):
    dev = CPUDevice()
    n = 64
    a = Buffer(dev, n, float32).copyin(np.ones(n, np.float32))
    out = Buffer(dev, n, float32).copyin(np.zeros(n, np.float32))
    prg = CPUProgram("add", add_lib)
    for _ in range(50):
        assert prg(out.handle, out.handle, a.handle, vals=(n, 2), threads=2) is None
    np.testing.assert_array_equal(out.numpy(), np.full(n, 50, np.float32))


def test_program_accepts_raw_int_addresses(add_lib):
    # numpy's addresses are plain ints (often above 2**31): they must be passed as pointers
    n = 8
    arrs = [np.arange(n, dtype=np.float32) for _ in range(3)]
    CPUProgram("add", add_lib)(*(arr.ctypes.data for arr in arrs), vals=(n, 1))
    np.testing.assert_array_equal(arrs[0], np.arange(n, dtype=np.float32) * 2)


def test_views_as_kernel_arguments(add_lib):
    dev = CPUDevice()
    base = Buffer(dev, 16, float32).copyin(np.arange(16, dtype=np.float32))
    lo = base.view(8, float32, 0)
    hi = base.view(8, float32, 32)
    CPUProgram("add", add_lib)(lo.handle, lo.handle, hi.handle, vals=(8, 1))
    expected = np.arange(16, dtype=np.float32)
    expected[:8] += expected[8:]
    np.testing.assert_array_equal(base.numpy(), expected)


def test_missing_function_name(add_lib):
    with pytest.raises(AttributeError, match="no function 'mul'"):
        CPUProgram("mul", add_lib)


def test_compile_error_has_message_and_source():
    bad = "void broken(float* out, int core_id) { out[0] = undefined_name; }"
    with pytest.raises(CompileError) as info:
        ClangCompiler().compile(bad)
    assert "undefined_name" in info.value.message
    assert info.value.source == bad
    assert "broken" in str(info.value)


def test_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/tg-cc")
    with pytest.raises(CompilerNotFoundError, match="/nonexistent/tg-cc"):
        ClangCompiler().compile_cached(ADD_SRC)


def test_cc_env_overrides(monkeypatch, tmp_path):
    import shutil

    real = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    wrapper = tmp_path / "my-cc"
    marker = tmp_path / "used"
    wrapper.write_text(f'#!/bin/sh\ntouch "{marker}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    ClangCompiler().compile(ADD_SRC)
    assert marker.exists()


class CountingRun:
    def __init__(self):
        self.calls = 0
        self.real = subprocess.run

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


def test_second_compile_hits_the_cache(monkeypatch, tmp_path):
    counter = CountingRun()
    monkeypatch.setattr(compiler_mod.subprocess, "run", counter)
    cc = ClangCompiler()
    first = cc.compile_cached(ADD_SRC)
    assert counter.calls == 1
    second = ClangCompiler().compile_cached(ADD_SRC)  # a new compiler object: cache is on disk
    assert counter.calls == 1
    assert first == second
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert len(entries) == 1 and not entries[0].name.startswith(".tmp")
    # different source or flags -> different entry
    ClangCompiler().compile_cached(ADD_SRC + "\n")
    ClangCompiler(flags=["-O1", "-shared", "-fPIC"]).compile_cached(ADD_SRC)
    assert counter.calls == 3


def _only_entry(tmp_path):
    (entry,) = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    return entry


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_cache_entry_is_recompiled(monkeypatch, tmp_path, damage):
    counter = CountingRun()
    monkeypatch.setattr(compiler_mod.subprocess, "run", counter)
    good = ClangCompiler().compile_cached(ADD_SRC)
    entry = _only_entry(tmp_path)
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        entry.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    elif damage == "garbage":
        entry.write_bytes(b"not a cache entry at all" * 10)
    else:
        entry.write_bytes(b"")
    again = ClangCompiler().compile_cached(ADD_SRC)
    assert counter.calls == 2
    assert again == good
    assert entry.read_bytes() == data  # the entry was rewritten whole
    # and the recompiled library works
    n = 4
    arrs = [np.arange(n, dtype=np.float32) for _ in range(3)]
    CPUProgram("add", again)(*(arr.ctypes.data for arr in arrs), vals=(n, 1))
    np.testing.assert_array_equal(arrs[0], np.arange(n) * 2)


def test_unwritable_cache_dir_still_compiles(monkeypatch, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("TG_CACHE_DIR", str(blocker))
    lib = ClangCompiler().compile_cached(ADD_SRC)
    assert lib[:4] == b"\x7fELF" or lib[:4] in (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf")


def test_cpu_device_basics(monkeypatch):
    monkeypatch.setenv("CPU_COUNT", "3")
    dev = CPUDevice("CPU")
    assert dev.name == "CPU" and dev.threads == 3
    assert dev.compiler is None and dev.renderer is None
    assert dev.program is CPUProgram

    class FakeRenderer:
        compiler = ClangCompiler()

    dev.renderer = FakeRenderer()
    assert dev.compiler is FakeRenderer.compiler
    assert CPUDevice("CPU", "X86").name == "CPU:X86"
    assert CPUDevice("CPU:X86", "X86").name == "CPU:X86"
    dev.synchronize()


def test_loading_garbage_is_a_clear_error():
    with pytest.raises(OSError, match="could not load the shared object for kernel 'k'"):
        CPUProgram("k", b"this is not an ELF file")


def _kernel_mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "/tgcore-" in line)


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")
def test_live_kernel_libraries_stay_bounded(monkeypatch):
    """Meeting new kernels keeps at most MAX_RUNNERS programs, and a dropped CPU program unloads its library."""
    import gc

    from tgcore.engine import realize
    from tgcore.tensor import Tensor
    monkeypatch.setattr(realize, "MAX_RUNNERS", 4)
    monkeypatch.setattr(realize, "_runners", {})
    gc.collect()
    before = _kernel_mappings()
    for n in range(2, 26):  # a new shape, a new kernel
        a = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal((Tensor(a, device="CPU") * 3 + 1).numpy(), a * 3 + 1)
    gc.collect()
    assert len(realize._runners) == 4
    assert _kernel_mappings() - before <= 4 * 8  # 4 libraries of ~5 segments each (24 loaded: ~120)
    a = np.arange(2, dtype=np.float32)
    np.testing.assert_array_equal((Tensor(a, device="CPU") * 3 + 1).numpy(), a * 3 + 1)  # dropped, built again

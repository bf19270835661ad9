"""DISK device: file-backed buffers through mmap, checked against the file's bytes."""

import os
import resource

import numpy as np
import pytest

from tgcore.dtype import dtypes
from tgcore.engine.stats import GlobalCounters
from tgcore.runtime.allocator import BufferOptions
from tgcore.runtime.buffer import Buffer
from tgcore.runtime.cpu import CPUDevice
from tgcore.runtime.disk import DiskDevice


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(np.arange(1024, dtype=np.float32).tobytes())
    return path


def test_buffer_over_file_equals_file_bytes(data_file):
    disk = DiskDevice(f"DISK:{data_file}")
    assert disk.name == f"DISK:{data_file}" and disk.path == str(data_file)
    base = Buffer(disk, 4096, dtypes.uint8)
    raw = data_file.read_bytes()
    assert bytes(base.as_buffer()) == raw
    view = base.view(10, dtypes.float32, 400)  # floats 100..109
    np.testing.assert_array_equal(view.numpy(), np.arange(100, 110, dtype=np.float32))
    assert bytes(view.as_buffer()) == raw[400:440]


def test_copy_slice_to_cpu(data_file):
    disk = DiskDevice(f"DISK:{data_file}")
    base = Buffer(disk, 4096, dtypes.uint8)
    cpu_buf = Buffer(CPUDevice(), 16, dtypes.float32).copy_from(base.view(16, dtypes.float32, 64))
    np.testing.assert_array_equal(cpu_buf.numpy(), np.arange(16, 32, dtype=np.float32))


def test_buffer_smaller_than_file(data_file):
    buf = Buffer(DiskDevice(f"DISK:{data_file}"), 8, dtypes.float32)
    np.testing.assert_array_equal(buf.numpy(), np.arange(8, dtype=np.float32))


def test_read_only_open_never_writes(data_file):
    before = data_file.read_bytes()
    mtime = os.stat(data_file).st_mtime_ns
    buf = Buffer(DiskDevice(f"DISK:{data_file}"), 1024, dtypes.float32)
    buf.numpy()
    with pytest.raises(PermissionError, match="read-only"):
        buf.copyin(np.zeros(1024, np.float32))
    assert data_file.read_bytes() == before
    assert os.stat(data_file).st_mtime_ns == mtime


def test_disk_memory_is_not_counted(data_file):
    before = GlobalCounters.mem_used
    buf = Buffer(DiskDevice(f"DISK:{data_file}"), 4096, dtypes.uint8).allocate()
    assert GlobalCounters.mem_used == before
    buf.deallocate()


def test_sparse_multi_gb_file_reads_only_the_slice(tmp_path):
    path = tmp_path / "huge.bin"
    size = 6 << 30  # 6 GiB, sparse: takes no disk space
    payload = np.arange(256, dtype=np.float32)
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(5 << 30)
        f.write(payload.tobytes())
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    base = Buffer(DiskDevice(f"DISK:{path}"), size, dtypes.uint8)
    view = base.view(256, dtypes.float32, 5 << 30)
    cpu_buf = Buffer(CPUDevice(), 256, dtypes.float32).copy_from(view)
    np.testing.assert_array_equal(cpu_buf.numpy(), payload)
    np.testing.assert_array_equal(base.view(4, dtypes.float32, 1 << 30).numpy(), np.zeros(4))
    rss_growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert rss_growth_mb < 256, f"reading a 1 KB slice grew RSS by {rss_growth_mb:.0f} MB"


def test_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.safetensors"
    buf = Buffer(DiskDevice(f"DISK:{missing}"), 10, dtypes.uint8)  # lazy: no error yet
    with pytest.raises(FileNotFoundError, match="nope.safetensors"):
        buf.numpy()
    assert not missing.exists()


def test_buffer_past_end_of_file(data_file):
    buf = Buffer(DiskDevice(f"DISK:{data_file}"), 5000, dtypes.uint8)
    with pytest.raises(ValueError, match=r"5000 bytes at offset 0 goes past the end of the file \(4096 bytes\)") as e:
        buf.allocate()
    assert str(data_file) in str(e.value)


def test_slice_past_end_of_buffer_raises(data_file):
    base = Buffer(DiskDevice(f"DISK:{data_file}"), 4096, dtypes.uint8)
    with pytest.raises(ValueError, match="40 bytes at offset 4080"):
        base.view(10, dtypes.float32, 4080)
    disk = DiskDevice(f"DISK:{data_file}")
    handle = disk.allocator.alloc(4096)
    with pytest.raises(ValueError, match=r"40 bytes at offset 4080 .*weights.bin"):
        disk.allocator.offset(handle, 40, 4080)


def test_writable_mode_creates_and_writes(tmp_path):
    path = tmp_path / "out" / "saved.bin"
    path.parent.mkdir()
    disk = DiskDevice(f"DISK:{path}")
    buf = Buffer(disk, 8, dtypes.int32, options=BufferOptions(writable=True))
    buf.view(4, dtypes.int32, 16).copyin(np.array([1, 2, 3, 4], np.int32))
    disk.flush()
    assert path.read_bytes() == np.array([0, 0, 0, 0, 1, 2, 3, 4], np.int32).tobytes()


def test_bad_device_names():
    with pytest.raises(ValueError, match="DISK:/path"):
        DiskDevice("CPU")
    with pytest.raises(ValueError, match="no file path"):
        DiskDevice("DISK:")


def test_disk_runs_no_programs(data_file):
    disk = DiskDevice(f"DISK:{data_file}")
    with pytest.raises(NotImplementedError, match="compute device"):
        disk.program("k", b"")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    buf = Buffer(DiskDevice(f"DISK:{path}"), 0, dtypes.uint8)
    assert bytes(buf.as_buffer()) == b""

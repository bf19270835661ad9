"""helpers (env flags, colours, raw memory) and engine stats (GlobalCounters, DEBUG=2 line)."""

import ctypes
import pathlib
import re

import pytest

from tgcore.engine.stats import GlobalCounters, update_stats
from tgcore.helpers import (
    DEBUG,
    Context,
    ansilen,
    ansistrip,
    cache_dir,
    ceildiv,
    colored,
    cpu_count,
    getenv,
    prod,
    round_up,
    to_mv,
)


def test_getenv_is_typed(monkeypatch):
    monkeypatch.setenv("TG_TEST_INT", "12")
    monkeypatch.setenv("TG_TEST_STR", "hello")
    monkeypatch.setenv("TG_TEST_BOOL", "yes")
    assert getenv("TG_TEST_INT", 0) == 12
    assert getenv("TG_TEST_STR", "") == "hello"
    assert getenv("TG_TEST_BOOL", False) is True
    assert getenv("TG_TEST_UNSET", 7) == 7
    monkeypatch.setenv("TG_TEST_BOOL", "0")
    assert getenv("TG_TEST_BOOL", True) is False
    monkeypatch.setenv("TG_TEST_INT", "abc")
    with pytest.raises(ValueError, match="TG_TEST_INT"):
        getenv("TG_TEST_INT", 0)


def test_debug_reads_env_at_call_time_and_context_overrides(monkeypatch):
    monkeypatch.setenv("DEBUG", "1")
    assert DEBUG.value == 1 and DEBUG >= 1 and not DEBUG >= 2
    with Context(DEBUG=3):
        assert DEBUG.value == 3
        with Context(DEBUG=0):
            assert not DEBUG
        assert DEBUG.value == 3
    assert DEBUG.value == 1
    monkeypatch.setenv("DEBUG", "2")  # (a new value after a read: parsed again)
    assert DEBUG.value == 2
    monkeypatch.delenv("DEBUG")
    assert DEBUG.value == 0
    with pytest.raises(KeyError, match="unknown flag"):
        with Context(NOT_A_FLAG=1):
            pass


def test_numbers():
    assert prod([2, 3, 4]) == 24 and prod([]) == 1
    assert round_up(13, 8) == 16 and round_up(16, 8) == 16 and round_up(0, 8) == 0
    assert ceildiv(7, 2) == 4 and ceildiv(8, 2) == 4


def test_colors():
    text = colored("hello", "red")
    assert text != "hello" and ansistrip(text) == "hello" and ansilen(text) == 5
    assert ansilen(colored("x", "BRIGHT_green") + "yz") == 3
    assert colored("plain", None) == "plain"
    with pytest.raises(ValueError, match="unknown colour"):
        colored("x", "purple")


def test_to_mv_aliases_memory():
    arr = (ctypes.c_uint8 * 8)(*range(8))
    mv = to_mv(ctypes.addressof(arr), 8)
    assert bytes(mv) == bytes(range(8))
    mv[0] = 99
    assert arr[0] == 99


def test_cpu_count_env(monkeypatch):
    monkeypatch.setenv("CPU_COUNT", "5")
    assert cpu_count() == 5
    monkeypatch.delenv("CPU_COUNT")
    assert cpu_count() >= 1


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() in (tmp_path / "xdg" / "tgcore", pathlib.Path.home() / "Library" / "Caches" / "tgcore")


# ---- stats ----

@pytest.fixture
def counters():
    saved = GlobalCounters.mem_used
    GlobalCounters.reset()
    yield GlobalCounters
    GlobalCounters.reset()
    GlobalCounters.mem_used = saved


def test_counters_accumulate_and_reset(counters):
    update_stats("E_4", "CPU", "elementwise", num_bufs=2, ops=100, mem=48, time_s=0.5)
    update_stats("r_4", "CPU", "reduce", num_bufs=2, ops=50, mem=20, time_s=None)
    assert (counters.kernel_count, counters.global_ops, counters.global_mem) == (2, 150, 68)
    assert counters.time_sum_s == 0.5
    counters.mem_used = 123
    counters.reset()
    assert (counters.kernel_count, counters.global_ops, counters.global_mem, counters.time_sum_s) == (0, 0, 0, 0.0)
    assert counters.mem_used == 123  # live memory is not a per-run counter


LINE_RE = re.compile(
    r"^\*\*\* (?P<device>\S+)\s+(?P<num>\d+) (?P<name>\S+)\s+bufs\s+(?P<bufs>\d+)\s+mem\s+(?P<mem>[\d.]+) GB"
    r"\s+tm\s+(?P<tm>[\d.]+)(?P<unit>us|ms| s)/\s*(?P<total>[\d.]+)(?:us|ms| s)"
    r" \(\s*(?P<gflops>[\d.]+) GFLOPS\s+(?P<gbs>[\d.]+) GB/s\)$"
)


def test_debug2_prints_one_line_per_kernel(counters, capsys):
    counters.mem_used = 2_500_000_000
    with Context(DEBUG=2):
        update_stats("E_16_4", "CPU", "elementwise", num_bufs=3, ops=2_000_000, mem=12_000_000, time_s=0.001)
        update_stats("r_256", "CPU:X86", "reduce", num_bufs=2, ops=4_000_000, mem=1_000_000, time_s=0.002)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 2
    first = LINE_RE.match(ansistrip(lines[0]))
    assert first is not None, lines[0]
    assert first["device"] == "CPU" and first["num"] == "1" and first["name"] == "E_16_4"
    assert first["bufs"] == "3" and first["mem"] == "2.50"
    assert float(first["tm"]) == 1.0 and first["unit"] == "ms"
    assert float(first["gflops"]) == pytest.approx(2.0) and float(first["gbs"]) == pytest.approx(12.0)
    second = LINE_RE.match(ansistrip(lines[1]))
    assert second is not None, lines[1]
    assert second["device"] == "CPU:X86" and second["num"] == "2" and second["total"] == "3.00"
    # names are coloured by kind, differently for elementwise and reduce; columns line up
    assert colored("E_16_4", "yellow") in lines[0] and colored("r_256", "green") in lines[1]
    assert ansistrip(lines[0]).index("bufs") == ansistrip(lines[1]).index("bufs")


def test_no_output_below_debug2(counters, capsys):
    with Context(DEBUG=1):
        update_stats("E_1", "CPU", "copy", num_bufs=2, ops=0, mem=4, time_s=1e-6)
    assert capsys.readouterr().out == ""
    assert counters.kernel_count == 1


def test_untimed_kernel_line(counters, capsys):
    with Context(DEBUG=2):
        update_stats("custom_gemm", "AMD", "custom", num_bufs=4)
    line = ansistrip(capsys.readouterr().out.strip())
    assert line.startswith("*** AMD") and "custom_gemm" in line and "bufs  4" in line
    assert "GFLOPS" not in line

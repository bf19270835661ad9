"""Run-time statistics: global counters and the one-line-per-kernel DEBUG=2 report.

In: one call to `update_stats` per kernel run (name, device, kind, buffers, estimated
ops and bytes, measured time). Out: updated `GlobalCounters` and, with DEBUG>=2, a line
on stdout like (wrapped here; one line when printed, the name in colour)

    *** CPU:X86       2 r_256_16_4_4                       bufs  2  mem   0.00 GB
        tm    20.00us/    1.02ms (   200.00 GFLOPS    50.00 GB/s)

Fields: device, kernel number (GlobalCounters.kernel_count after this kernel), kernel
name coloured by kind, number of buffers, memory in use, this kernel's time / total
time so far, GFLOPS and GB/s of this kernel.

`KernelTimes.record()` collects a `KernelTime` per kernel run without printing (a bench's
per-kernel table); while none is active, kernels (and JIT replays) are not timed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from tgcore.engine import profile
from tgcore.helpers import DEBUG, ansilen, colored


class GlobalCounters:
    """Process-wide counters. `reset()` clears the per-run counters, not `mem_used`.

    mem_used is the bytes held by live buffers on compute devices (allocators update it);
    it is a fact about memory, not about a run, so reset() leaves it alone.
    """

    kernel_count: int = 0
    global_ops: int = 0
    global_mem: int = 0
    time_sum_s: float = 0.0
    mem_used: int = 0

    @classmethod
    def reset(cls) -> None:
        cls.kernel_count = 0
        cls.global_ops = 0
        cls.global_mem = 0
        cls.time_sum_s = 0.0


@dataclass(frozen=True)
class KernelTime:
    """One timed kernel run."""
    name: str
    device: str
    kind: str
    seconds: float
    ops: int
    mem: int


class KernelTimes:
    """The active recordings of kernel times (innermost last). ``with KernelTimes.record() as times:`` times
    every kernel run inside the block (a JIT replay included: its kernels are timed between them in the native
    graph) and appends a `KernelTime` per run to ``times``."""

    active: list[list[KernelTime]] = []

    @classmethod
    @contextlib.contextmanager
    def record(cls) -> Iterator[list[KernelTime]]:
        into: list[KernelTime] = []
        cls.active.append(into)
        try:
            yield into
        finally:
            cls.active.pop()

    @classmethod
    def wanted(cls) -> bool:
        """Whether kernels should be timed now (a recording or a profile is active, or DEBUG >= 2 prints the
        times)."""
        return bool(cls.active) or profile.ACTIVE is not None or DEBUG >= 2


# kernel kind -> colour of its name in the DEBUG=2 line
KIND_COLORS: dict[str, str] = {
    "elementwise": "yellow",
    "reduce": "green",
    "copy": "cyan",
    "custom": "magenta",
}

NAME_WIDTH = 34


def format_time(seconds: float) -> str:
    """Fixed-width (10 chars) time with a readable unit."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:8.2f}us"
    if seconds < 1.0:
        return f"{seconds * 1e3:8.2f}ms"
    return f"{seconds:8.2f} s"


def format_kernel_line(
    name: str, device: str, kind: str, *, num_bufs: int, kernel_number: int, mem_used: int,
    time_s: float | None, total_time_s: float, ops: int, mem: int,
) -> str:
    """The DEBUG=2 line for one kernel run (no trailing newline)."""
    shown_name = colored(name, KIND_COLORS.get(kind, "white"))
    pad = " " * max(0, NAME_WIDTH - ansilen(shown_name))
    line = f"*** {device:<10s} {kernel_number:4d} {shown_name}{pad} bufs {num_bufs:2d}  mem {mem_used / 1e9:6.2f} GB"
    if time_s is not None:
        line += f"  tm {format_time(time_s)}/{format_time(total_time_s)}"
        if time_s > 0:
            line += f" ({ops / time_s / 1e9:9.2f} GFLOPS {mem / time_s / 1e9:8.2f} GB/s)"
    return line


def update_stats(
    name: str, device: str, kind: str = "elementwise", *, num_bufs: int = 0, ops: int = 0, mem: int = 0,
    time_s: float | None = None, threads: int = 1, counters: dict[str, int] | None = None, jit: bool = False,
    start_ns: int | None = None,
) -> None:
    """Count one kernel run; print its line when DEBUG >= 2; hand it to the profile when one is recording.

    name: kernel name; device: device name ("CPU"); kind: "elementwise", "reduce", "copy" or
    "custom" (other kinds print uncoloured-white); num_bufs: buffers the kernel touches;
    ops / mem: estimated operations and bytes moved; time_s: measured seconds (None if the
    kernel was not timed: then no time, GFLOPS or GB/s are printed). For the profile: threads the kernel ran
    on, the device's counters over the run, whether a JIT replayed it, and when it started (default: it
    ended now).
    """
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += ops
    GlobalCounters.global_mem += mem
    if time_s is not None:
        GlobalCounters.time_sum_s += time_s
        for into in KernelTimes.active:
            into.append(KernelTime(name, device, kind, time_s, ops, mem))
        if profile.ACTIVE is not None:
            profile.ACTIVE.kernel(name, device, kind, time_s, ops=ops, mem=mem, threads=threads, counters=counters,
                                  jit=jit, start_ns=start_ns)
    if DEBUG >= 2:
        print(format_kernel_line(
            name, device, kind, num_bufs=num_bufs, kernel_number=GlobalCounters.kernel_count,
            mem_used=GlobalCounters.mem_used, time_s=time_s, total_time_s=GlobalCounters.time_sum_s,
            ops=ops, mem=mem,
        ))


profile.start_from_environment()

"""Linux performance counters of this process's threads, through perf_event_open(2) (ctypes, no dependency).

In:  counter names (``COUNTERS``: hardware ones from the PMU, software ones from the kernel's own accounting).
Out: ``ThreadCounters.read()``: each open counter's count summed over every thread of this process (the caller's
     thread and the kernel pool's workers), scaled when the kernel multiplexed the PMU; the difference of two
     reads is what ran in between.

Counters only count user space (``exclude_kernel``), which ``perf_event_paranoid`` 2 (a common default) allows for
one's own threads. Where the kernel or the VM refuses a counter (no PMU in a guest, paranoid 3, seccomp), it is
left out and the reason kept in ``refused`` (shown once by the profile): software counters usually still work.
Threads are found in ``/proc/self/task`` at each read, so workers started later are counted from then on.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_HW_CACHE = 0, 1, 3
_LLC_READ_MISS = 2 | (0 << 8) | (1 << 16)  # cache id LL, op READ, result MISS (linux/perf_event.h)


@dataclass(frozen=True)
class Counter:
    name: str
    type: int
    config: int
    what: str


COUNTERS: dict[str, Counter] = {c.name: c for c in (
    Counter("cycles", PERF_TYPE_HARDWARE, 0, "core clock cycles"),
    Counter("instructions", PERF_TYPE_HARDWARE, 1, "instructions retired"),
    Counter("cache-references", PERF_TYPE_HARDWARE, 2, "last-level cache accesses"),
    Counter("cache-misses", PERF_TYPE_HARDWARE, 3, "last-level cache misses"),
    Counter("branch-misses", PERF_TYPE_HARDWARE, 5, "mispredicted branches"),
    Counter("llc-load-misses", PERF_TYPE_HW_CACHE, _LLC_READ_MISS, "last-level cache read misses"),
    Counter("task-clock", PERF_TYPE_SOFTWARE, 1, "nanoseconds threads ran on a CPU"),
    Counter("page-faults", PERF_TYPE_SOFTWARE, 2, "page faults"),
    Counter("context-switches", PERF_TYPE_SOFTWARE, 3, "context switches"),
)}

_SYSCALL_NUMBERS = {"x86_64": 298, "aarch64": 241}
_ATTR_SIZE = 128                    # PERF_ATTR_SIZE_VER7 and later: the kernel accepts zeroed tails
_EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 5, 1 << 6
_READ_FORMAT = 1 | 2                # TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING: to scale multiplexed counts

OpenFn = Callable[[Counter, int], int]   # (counter, thread id) -> file descriptor; raises OSError when refused


def _attr(counter: Counter) -> bytes:
    head = struct.pack("=IIQQQQQ", counter.type, _ATTR_SIZE, counter.config, 0, 0, _READ_FORMAT,
                       _EXCLUDE_KERNEL | _EXCLUDE_HV)
    return head + bytes(_ATTR_SIZE - len(head))


def perf_event_open(counter: Counter, tid: int) -> int:
    """A file descriptor counting ``counter`` for thread ``tid`` on any CPU; OSError when the kernel refuses."""
    number = _SYSCALL_NUMBERS.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"perf_event_open is not wired up for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(_attr(counter), _ATTR_SIZE)
    fd = libc.syscall(ctypes.c_long(number), attr, ctypes.c_int(tid), ctypes.c_int(-1), ctypes.c_int(-1),
                      ctypes.c_ulong(0))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


def _read(fd: int) -> int:
    value, enabled, running = struct.unpack("=QQQ", os.read(fd, 24))
    return value if running in (0, enabled) else int(value * enabled / running)


def _threads() -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir("/proc/self/task"))
    except OSError:
        return [threading.get_native_id()]


def refusal_reason(error: OSError) -> str:
    """Why a counter could not be opened, in words a user can act on."""
    if error.errno in (errno.EACCES, errno.EPERM):
        return "not permitted (see /proc/sys/kernel/perf_event_paranoid)"
    if error.errno in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        return "not supported here (no PMU for it, e.g. in a virtual machine)"
    if error.errno == errno.ENOSYS:
        return "no perf_event_open on this system"
    return f"refused: {error.strerror or error}"


class ThreadCounters:
    """Counters over every thread of this process; ``read()`` sums them. ``close()`` releases the descriptors."""

    def __init__(self, names: Iterable[str] = COUNTERS, open_fn: OpenFn = perf_event_open) -> None:
        unknown = [n for n in names if n not in COUNTERS]
        if unknown:
            raise ValueError(f"unknown counter(s) {unknown}; known: {', '.join(COUNTERS)}")
        self._open = open_fn
        self.names: list[str] = list(names)
        self.refused: dict[str, str] = {}           # counter -> why it is not counted
        self._fds: dict[int, dict[str, int]] = {}   # thread -> counter -> descriptor
        self._last: dict[int, dict[str, int]] = {}  # counts of threads that have gone (kept in the sums)

    def _attach(self, tid: int) -> None:
        fds: dict[str, int] = {}
        for name in self.names:
            if name in self.refused:
                continue
            try:
                fds[name] = self._open(COUNTERS[name], tid)
            except OSError as e:
                if e.errno == errno.ESRCH:  # the thread ended between listing and opening
                    break
                self.refused[name] = refusal_reason(e)
        self._fds[tid] = fds

    def read(self) -> dict[str, int]:
        """Each counted counter's total over this process's threads so far."""
        for tid in _threads():
            if tid not in self._fds:
                self._attach(tid)
        totals = {n: 0 for n in self.names if n not in self.refused}
        for tid, fds in self._fds.items():
            last = self._last.setdefault(tid, {})
            for name, fd in fds.items():
                try:
                    last[name] = _read(fd)
                except OSError:  # a thread that ended keeps its final count
                    pass
                if name in totals:
                    totals[name] += last.get(name, 0)
        return totals

    def close(self) -> None:
        for fds in self._fds.values():
            for fd in fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fds.clear()


def difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: after[name] - before.get(name, 0) for name in after}

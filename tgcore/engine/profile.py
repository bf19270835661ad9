"""Profiles: what a process ran, recorded when ``PROFILE=1`` (or under ``tg profile``), for ``tg viz``.

In:  kernel runs (``engine.stats.update_stats`` hands each to the active profiler), compiles (``engine.realize``), JIT
     captures and replays (``engine.jit``); with ``PROFILE_COUNTERS=1`` (the default under ``PROFILE``) each
     device's counters around each kernel run (a device offers them as ``dev.profile_counters()``; the CPU device's
     are Linux perf counters, ``runtime.perfcounters``).
Out: one JSON file per process, written at exit to ``TG_PROFILE_OUT`` if set, else
     ``<cache_dir()>/profiles/<YYYYmmdd-HHMMSS>-<pid>[-rank<r>].json``.

File format (``format: "tgcore-profile"``, ``version: 1``)::

    {"format", "version", "pid", "rank" (MPI rank or null), "argv", "started" (unix seconds), "duration_ns",
     "tgcore", "devices": {device: {"counters": [names], "refused": {name: why}}},
     "events": [{"kind": "kernel"|"copy"|"compile"|"jit_capture"|"jit_replay", "name", "device", "start_ns"
                 (since "started"), "dur_ns", "ops", "mem" (bytes), "threads", "counters": {name: count}?}],
     "jit_kernels": [{"name", "device", "kind", "count", "total_ns", "min_ns", "max_ns", "ops", "mem",
                      "counters": {name: count}}]}

Kernels replayed by the JIT are not one event each (a decode loop replays thousands): each replay is one
``jit_replay`` event, and its kernels add up in ``jit_kernels``, one row per captured kernel. With ``PROFILE``
unset nothing here runs: ``ACTIVE`` is None and the engine checks only that.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tgcore
from tgcore.helpers import cache_dir, getenv, save_recording, write_atomically

FORMAT, VERSION = "tgcore-profile", 1


@dataclass
class JitKernel:
    """One captured kernel's replays, added up."""
    name: str
    device: str
    kind: str
    count: int = 0
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    ops: int = 0
    mem: int = 0
    counters: dict[str, int] = field(default_factory=dict)

    def add(self, dur_ns: int, ops: int, mem: int, counters: dict[str, int] | None) -> None:
        self.min_ns = dur_ns if self.count == 0 else min(self.min_ns, dur_ns)
        self.max_ns = max(self.max_ns, dur_ns)
        self.count += 1
        self.total_ns += dur_ns
        self.ops += ops
        self.mem += mem
        for name, value in (counters or {}).items():
            self.counters[name] = self.counters.get(name, 0) + value


class Profiler:
    """The recording of this process (the one owner of profile state)."""

    def __init__(self, counters: bool = True) -> None:
        self.started = time.time()
        self.t0 = time.perf_counter_ns()
        self.events: list[dict[str, Any]] = []
        self.jit_kernels: dict[tuple[str, str], JitKernel] = {}
        self.want_counters = counters
        self._counters: dict[str, Any] = {}  # device -> its counter source (None: the device has none)

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self.t0

    # ---- counters ----

    def counters_before(self, device: Any) -> tuple[Any, dict[str, int]] | None:
        """The device's counters now (None when it has none or counting is off): pass to ``counters_after``."""
        if not self.want_counters:
            return None
        name = device.name
        if name not in self._counters:
            make: Callable[[], Any] | None = getattr(device, "profile_counters", None)
            self._counters[name] = make() if make is not None else None
        source = self._counters[name]
        return None if source is None else (source, source.read())

    @staticmethod
    def counters_after(before: tuple[Any, dict[str, int]] | None) -> dict[str, int] | None:
        if before is None:
            return None
        source, start = before
        return {n: v - start.get(n, 0) for n, v in source.read().items()}

    # ---- events ----

    def kernel(self, name: str, device: str, kind: str, seconds: float, *, ops: int = 0, mem: int = 0,
               threads: int = 1, counters: dict[str, int] | None = None, jit: bool = False,
               start_ns: int | None = None) -> None:
        """A kernel (or copy) that ran for ``seconds`` and ended now (or started at ``start_ns``)."""
        dur = int(seconds * 1e9)
        if jit:
            row = self.jit_kernels.get((device, name))
            if row is None:
                row = self.jit_kernels[(device, name)] = JitKernel(name, device, kind)
            row.add(dur, ops, mem, counters)
            return
        start = self.now_ns() - dur if start_ns is None else start_ns
        event: dict[str, Any] = {"kind": "copy" if kind == "copy" else "kernel", "name": name, "device": device,
                                 "start_ns": start, "dur_ns": dur, "ops": ops, "mem": mem, "threads": threads}
        if counters:
            event["counters"] = counters
        self.events.append(event)

    def span(self, kind: str, name: str, device: str, start_ns: int) -> None:
        """A compile, JIT capture or JIT replay that started at ``start_ns`` and ended now."""
        self.events.append({"kind": kind, "name": name, "device": device, "start_ns": start_ns,
                            "dur_ns": self.now_ns() - start_ns, "ops": 0, "mem": 0, "threads": 1})

    # ---- the file ----

    def to_json(self) -> dict[str, Any]:
        devices = {name: {"counters": list(source.read()) if source else [],
                          "refused": dict(source.refused) if source else {}}
                   for name, source in self._counters.items()}
        return {"format": FORMAT, "version": VERSION, "pid": os.getpid(), "rank": mpi_rank(), "argv": sys.argv,
                "started": self.started, "duration_ns": self.now_ns(), "tgcore": tgcore.__version__,
                "devices": devices, "events": self.events,
                "jit_kernels": [vars(k) for k in self.jit_kernels.values()]}

    def save(self, path: str | os.PathLike[str] | None = None) -> str:
        """Write the profile (to ``path``, else the default place) and return where it went."""
        target = os.fspath(path) if path is not None else str(default_path(self.started))
        import pathlib
        write_atomically(pathlib.Path(target), json.dumps(self.to_json()).encode())
        return target


def mpi_rank() -> int | None:
    for var in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                pass
    return None


def default_path(started: float) -> Any:
    rank = mpi_rank()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started))
    return cache_dir() / "profiles" / (f"{stamp}-{os.getpid()}" + (f"-rank{rank}" if rank is not None else "")
                                       + ".json")


ACTIVE: Profiler | None = None


def start(counters: bool = True) -> Profiler:
    """Start recording (a profile already running is returned as it is)."""
    global ACTIVE
    if ACTIVE is None:
        ACTIVE = Profiler(counters)
    return ACTIVE


def stop() -> Profiler | None:
    """Stop recording and return what was recorded."""
    global ACTIVE
    profiler, ACTIVE = ACTIVE, None
    return profiler


def _save_at_exit() -> None:
    profiler = stop()
    if profiler is not None:
        save_recording("profile", profiler.save, "TG_PROFILE_OUT", "tg viz profile")


def start_from_environment() -> None:
    """``PROFILE=1``: record this process and save the profile at exit."""
    if getenv("PROFILE", 0) and ACTIVE is None:
        start(counters=bool(getenv("PROFILE_COUNTERS", 1)))
        atexit.register(_save_at_exit)

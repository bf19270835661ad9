"""Rewrite traces (``VIZ=1``): per kernel, the graph before and after each rewrite pass and how often each rule fired.

In:  ``graph_rewrite`` reports each pass it ran (``record_pass``) while a kernel's trace is open (``kernel_trace``:
     ``codegen.get_program`` opens one per kernel it lowers; passes outside one, e.g. the scheduler's, are not
     recorded); codegen adds whole steps that are not rewrites (``record_step``) and the generated code
     (``record_code``).
Out: at exit, one JSON file: ``TG_VIZ_OUT`` if set, else ``<cache_dir()>/viz/<YYYYmmdd-HHMMSS>-<pid>.json``,
     read by ``tg viz serve`` (``tgcore.vizserver``).

File format (``format: "tgcore-viz"``, ``version: 1``)::

    {"format", "version", "pid", "argv", "started",
     "kernels": [{"name", "renderer", "nodes": [[op, dtype, arg, [src node ids]], ...],
                  "passes": [{"name", "before", "after" (node ids of the roots), "rules": {rule: count}}],
                  "code": text, "language": "c" | "asm" | "text"}]}

A kernel's graphs share one node table (UOps are hash-consed, so a pass's result shares most nodes with its input);
a graph is the nodes reachable from its root. Graphs of more than ``MAX_NODES`` nodes are cut there (the node list
says so). With ``VIZ`` unset ``ACTIVE`` is None and ``graph_rewrite`` checks only that.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

from tgcore.helpers import cache_dir, getenv, save_recording, write_atomically
from tgcore.uop.uop import UOp

FORMAT, VERSION = "tgcore-viz", 1
MAX_NODES = 4000      # nodes kept per kernel: a trace of a huge kernel stays readable and small
MAX_ARG = 80          # characters of a node's arg kept


class KernelTrace:
    """The passes of one kernel, with one node table for all its graphs."""

    def __init__(self, name: str, renderer: str) -> None:
        self.name, self.renderer = name, renderer
        self.ids: dict[UOp, int] = {}
        self.nodes: list[list[Any]] = []
        self.passes: list[dict[str, Any]] = []
        self.code: str = ""
        self.language = "text"
        self.truncated = False

    def node_id(self, root: UOp) -> int:
        """The id of ``root`` in the node table, adding it and what it depends on (up to MAX_NODES)."""
        if root in self.ids:
            return self.ids[root]
        for u in root.toposort:
            if u in self.ids:
                continue
            if len(self.nodes) >= MAX_NODES:
                self.truncated = True
                return -1
            arg = repr(u.arg)
            self.ids[u] = len(self.nodes)
            self.nodes.append([u.op.name, repr(u.dtype), arg if len(arg) <= MAX_ARG else arg[:MAX_ARG - 3] + "...",
                               [self.ids.get(s, -1) for s in u.src]])
        return self.ids[root]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "renderer": self.renderer, "nodes": self.nodes, "passes": self.passes,
                "code": self.code, "language": self.language, "truncated": self.truncated}


class Tracer:
    """Every kernel traced in this process (the owner of trace state)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.kernels: list[KernelTrace] = []
        self.current: KernelTrace | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "pid": os.getpid(), "argv": sys.argv, "started": self.started,
                "kernels": [k.to_json() for k in self.kernels]}

    def save(self, path: str | None = None) -> str:
        if path is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.started))
            path = str(cache_dir() / "viz" / f"{stamp}-{os.getpid()}.json")
        write_atomically(pathlib.Path(path), json.dumps(self.to_json()).encode())
        return path


ACTIVE: Tracer | None = None


@contextlib.contextmanager
def kernel_trace(name: str, renderer: Any) -> Iterator[KernelTrace | None]:
    """Record the passes run inside the block as kernel ``name`` (nothing when no trace is active)."""
    tracer = ACTIVE
    if tracer is None:
        yield None
        return
    outer, tracer.current = tracer.current, KernelTrace(name, repr(renderer))
    tracer.kernels.append(tracer.current)
    try:
        yield tracer.current
    finally:
        tracer.current = outer


def recording() -> bool:
    """Whether a pass run now would be recorded."""
    return ACTIVE is not None and ACTIVE.current is not None


def record_pass(name: str, before: UOp, after: UOp, rules: dict[str, int]) -> None:
    """A rewrite pass of the current kernel: its input and output roots and the rules that fired."""
    trace = ACTIVE.current if ACTIVE is not None else None
    if trace is None or (before is after and not rules):
        return
    trace.passes.append({"name": name, "before": trace.node_id(before), "after": trace.node_id(after),
                         "rules": dict(sorted(rules.items(), key=lambda kv: -kv[1]))})


def record_step(name: str, before: UOp, after: UOp) -> None:
    """A step that is not a rewrite (applying the opts, adding accumulators) as a pass without rules."""
    record_pass(name, before, after, {})


def record_code(code: str, language: str) -> None:
    trace = ACTIVE.current if ACTIVE is not None else None
    if trace is not None:
        trace.code, trace.language = code, language


def _save_at_exit() -> None:
    global ACTIVE
    tracer, ACTIVE = ACTIVE, None
    if tracer is not None and tracer.kernels:
        save_recording("rewrite trace", tracer.save, "TG_VIZ_OUT", "tg viz serve")


def start() -> Tracer:
    global ACTIVE
    if ACTIVE is None:
        ACTIVE = Tracer()
    return ACTIVE


def start_from_environment() -> None:
    """``VIZ=1``: trace this process's kernels and save the trace at exit."""
    if getenv("VIZ", 0) and ACTIVE is None:
        start()
        atexit.register(_save_at_exit)


start_from_environment()

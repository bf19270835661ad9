"""Reuse a schedule for graphs of the same structure (the warm path of ``Tensor.realize``).

In:  the tensor-level UOps to realize and the default device.
Out: what ``create_schedule`` returns (kernels in order, each out's BUFFER uop), or None when the
     graph is not one this cache handles (then the caller schedules it from scratch).

How: a walk over the lazy graph stops at its leaves: BUFFERs, and nodes an earlier realize already
computed. The key lists every inner node as (op, dtype, arg, positions of its sources) and every
leaf as (dtype, size, device, shape, which distinct buffer). Loops that rebuild the same
expression every step (training without the JIT, small eager calls) produce the same key. On a
miss the graph is rebuilt over placeholder buffers, scheduled, and kept as a template: each
kernel's AST with the BUFFER uops it reads and writes. On a hit the template is filled in:
placeholders become the real buffers, every buffer the schedule made becomes a fresh one, and a
view of an input becomes the same view of the real input. Kernel ASTs do not depend on which
buffers they run on, so the compiled programs are shared as well.

Scalars that vary between calls: a constant (a Python scalar in an expression, possibly reshaped
and expanded) is part of the key by its position, not its value. A template first bakes each value
into its kernels (constant folding sees it); when the same structure comes back with a different
value at some position, the template is rebuilt with that position *lifted*: the kernels load it
from a one-element buffer that each call fills with its own value. So ``x * lr`` with a changing
``lr``, or a step number, compiles at most two kernels, not one per value.

Only plain compute graphs are cached, and one write alone (the ASSIGN a pending write runs, e.g. a KV-cache
write per layer and step): its target's views are keyed as they are, down to the written buffer. COPY, other
ASSIGNs and custom kernels have effects beyond their result, DISK buffers are files; graphs with those are
scheduled afresh every time.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from tgcore.schedule.kernelize import ScheduleItem, buffer_device, kernelize, new_buffer_uop, uop_buffer
from tgcore.schedule.state import REALIZATION
from tgcore.uop import Ops, UOp
from tgcore.uop.shape import shape_of

MAX_ENTRIES = 512
UNCACHEABLE = frozenset({Ops.COPY, Ops.ASSIGN, Ops.CUSTOM_KERNEL, Ops.AFTER})  # (except one write alone, below)
VIEWS = frozenset({Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP})


@dataclass
class _Template:
    placeholders: list[UOp]                        # one placeholder BUFFER per distinct leaf buffer
    baked: dict[int, str]                          # scalar position -> repr of the value folded into the kernels
    baked_consts: dict[int, UOp]                   # scalar position -> the CONST folded in
    lifted: dict[int, UOp]                         # scalar position -> its placeholder one-element BUFFER
    items: list[tuple[UOp, tuple[UOp, ...], str, str, dict[str, int]]]  # (ast, buffer uops, device, kind, vars)
    views: dict[UOp, tuple[UOp, int, int]]          # view uop -> (base uop, size, offset in bytes)
    results: list[UOp]                              # each out's BUFFER uop in the template


_templates: OrderedDict[tuple, _Template] = OrderedDict()


class CacheStats:
    """Hits and misses of the schedule cache since the last ``clear()`` (tests and benchmarks read them)."""
    hits = 0
    misses = 0


def is_constant(n: UOp) -> bool:
    """A constant, possibly reshaped and expanded: a subgraph with no buffer that stands for itself in the key."""
    while n.op is Ops.RESHAPE or n.op is Ops.EXPAND:
        n = n.src[0]
    return n.op is Ops.CONST


def _scalar_chain(n: UOp) -> tuple[UOp, tuple[tuple[Ops, Any], ...]] | None:
    """A constant node's CONST and the reshapes/expands above it (innermost first); None for any other node."""
    chain = []
    while n.op is Ops.RESHAPE or n.op is Ops.EXPAND:
        chain.append((n.op, n.arg))
        n = n.src[0]
    return (n, tuple(reversed(chain))) if n.op is Ops.CONST else None


class _Walk:
    """The structural key of a graph, its leaf buffers in order of first appearance and its scalar constants."""

    def __init__(self, outs: list[UOp], default_device: str) -> None:
        self.parts: list[Any] = []
        self.leaves: list[UOp] = []          # distinct leaf BUFFER uops
        self.scalars: list[UOp] = []         # the CONST of each scalar position
        self.binds: list[UOp] = []           # the BIND of each bound variable (its name is in the key, not its value)
        self.ok = True
        parts, index, leaf_index = self.parts, {}, {}  # type: ignore[var-annotated]
        # a write's target is the memory itself, never a value computed earlier: its views are walked as they are
        root_write = outs[0] if len(outs) == 1 and outs[0].op is Ops.ASSIGN else None
        target_views = set(_view_chain(root_write.src[0])) if root_write is not None else set()
        stack: list[tuple[UOp, bool]] = [(o, False) for o in reversed(outs)]
        while stack:
            n, ready = stack.pop()
            if n in index:
                continue
            if ready:
                index[n] = len(parts)
                parts.append((n.op, n.dtype, n.arg, tuple([index[s] for s in n.src])))
                continue
            if n.op is Ops.BIND:  # a kernel reads its value at run time: the template takes this call's values
                index[n] = len(parts)
                parts.append(("bind", len(self.binds), n.src[0]))
                self.binds.append(n)
                continue
            scalar = _scalar_chain(n)
            if scalar is not None:  # holds no buffer: its position, dtype and shape are its key, not its value
                const, chain = scalar
                index[n] = len(parts)
                if const.dtype.np is None or const.dtype.count != 1:  # (no one-element buffer for it: by value)
                    parts.append(n)
                    continue
                parts.append(("scalar", len(self.scalars), const.dtype, chain))
                self.scalars.append(const)
                continue
            buf = n if n.op is Ops.BUFFER else None if n in target_views else REALIZATION.cached(n)
            if buf is not None:
                # (a node computed earlier on another device is rescheduled by the kernelizer: not a leaf here)
                if REALIZATION.buffer(buf) is None or buffer_device(buf).startswith("DISK") or \
                        (buf is not n and buffer_device(buf) != default_device):
                    self.ok = False
                    return
                if buf not in leaf_index:
                    leaf_index[buf] = len(self.leaves)
                    self.leaves.append(buf)
                index[n] = len(parts)
                parts.append(("leaf", leaf_index[buf], n is buf, shape_of(n), buf.dtype, buf.arg,
                              buffer_device(buf)))
                continue
            if n.op in UNCACHEABLE and n is not root_write:
                self.ok = False
                return
            stack.append((n, True))
            for s in reversed(n.src):
                if s not in index:
                    stack.append((s, False))
        self.outs = tuple(index[o] for o in outs)
        if root_write is not None and _reads_written_memory(root_write, self.leaves):
            self.ok = False  # (placeholders are distinct memory: in-place checks need the real)


def _reads_written_memory(write: UOp, leaves: list[UOp]) -> bool:
    """Whether a leaf of the write's graph other than its target buffer is memory the write writes (a realized
    slice of it, say)."""
    written = next((n for n in _view_chain(write.src[0]) if n.op is Ops.BUFFER), None)
    return written is not None and any(leaf is not written and REALIZATION.share_memory(leaf, written)
                                       for leaf in leaves)


def _view_chain(n: UOp) -> list[UOp]:
    """``n`` and the nodes under it down to its BUFFER, while they are views or a take's table (an assign's
    target)."""
    chain = [n]
    while n.op in VIEWS or n.op is Ops.INDEX:
        n = n.src[0]
        chain.append(n)
    return chain


def _placeholder_graph(parts: list[Any], outs: tuple[int, ...], scalars: list[UOp], lifted: dict[int, UOp],
                       binds: list[UOp]) -> tuple[list[UOp], list[UOp]]:
    """The graph the key describes, over fresh placeholder buffers (and the scalars' values, or for lifted
    positions their placeholder buffers): (its outs, the placeholders)."""
    nodes: list[UOp] = []
    placeholders: dict[int, UOp] = {}
    for part in parts:
        if isinstance(part, UOp):
            nodes.append(part)
        elif part[0] == "bind":
            nodes.append(binds[part[1]])
        elif part[0] == "scalar":
            _, k, dtype, chain = part
            node = UOp(Ops.RESHAPE, dtype, (lifted[k],), ()) if k in lifted else scalars[k]
            for op, arg in chain:
                node = UOp(op, dtype, (node,), arg)
            nodes.append(node)
        elif part[0] == "leaf":
            _, leaf, is_buffer, shape, dtype, size, device = part
            if leaf not in placeholders:
                placeholders[leaf] = new_buffer_uop(device, size, dtype)
            ph = placeholders[leaf]
            nodes.append(ph if is_buffer else UOp(Ops.RESHAPE, dtype, (ph,), shape))
        else:
            op, dtype, arg, srcs = part
            nodes.append(UOp(op, dtype, tuple(nodes[i] for i in srcs), arg))
    return [nodes[i] for i in outs], [placeholders[i] for i in range(len(placeholders))]


def _make_template(walk: _Walk, default_device: str, lift: set[int]) -> _Template:
    lifted = {k: new_buffer_uop(default_device, 1, walk.scalars[k].dtype) for k in sorted(lift)}
    outs, placeholders = _placeholder_graph(walk.parts, walk.outs, walk.scalars, lifted, walk.binds)
    k, result = kernelize(outs, default_device)
    items = [(si.ast, si.buf_uops, si.device, si.kind, si.var_vals) for si in k.items]
    if any(len(bu) != len(si.bufs) for (_, bu, *_), si in zip(items, k.items, strict=True)):
        raise AssertionError("a cacheable schedule has kernels without buffer uops")
    baked = {i: repr(c.arg) for i, c in enumerate(walk.scalars) if i not in lift}  # (repr: -0.0 and nan exact)
    consts = {i: c for i, c in enumerate(walk.scalars) if i not in lift}
    return _Template(placeholders, baked, consts, lifted, items, dict(k.views), [result[o] for o in outs])


def _scalar_buffer(const: UOp, device: str) -> UOp:
    """A one-element buffer holding ``const``'s value, for a lifted scalar position."""
    u = new_buffer_uop(device, 1, const.dtype)
    assert const.dtype.np is not None
    value = np.array([const.arg], dtype=const.dtype.np)
    buf = REALIZATION.buffer(u)
    assert buf is not None
    buf.ensure_allocated().copyin(memoryview(value).cast("B"))  # type: ignore[arg-type]
    return u


def _real(u: UOp, t: _Template, env: dict[UOp, UOp]) -> UOp:
    """The buffer uop of this realize standing for template buffer ``u`` (made on first use)."""
    r = env.get(u)
    if r is None:
        if u in t.views:
            base, size, offset = t.views[u]
            r = REALIZATION.new_view(_real(base, t, env), size, offset)
        else:
            r = new_buffer_uop(buffer_device(u), u.arg, u.dtype)
        env[u] = r
    return r


def _instantiate(t: _Template, leaves: list[UOp], scalars: list[UOp], values: dict[str, int],
                 ) -> tuple[list[ScheduleItem], list[UOp]]:
    """The template's kernels on this call's buffers, scalars and bound variables' ``values`` (by name)."""
    env: dict[UOp, UOp] = dict(zip(t.placeholders, leaves, strict=True))
    for k, placeholder in t.lifted.items():
        env[placeholder] = _scalar_buffer(scalars[k], buffer_device(placeholder))
    items = []
    for ast, buf_uops, device, kind, var_vals in t.items:
        real_uops = tuple(_real(u, t, env) for u in buf_uops)
        var_vals = {name: values.get(name, value) for name, value in var_vals.items()}
        items.append(ScheduleItem(ast, [uop_buffer(u) for u in real_uops], device, kind, var_vals, real_uops))
    return items, [_real(r, t, env) for r in t.results]


def cached_schedule(outs: list[UOp], default_device: str) -> tuple[list[ScheduleItem], dict[UOp, UOp]] | None:
    walk = _Walk(outs, default_device)
    if not walk.ok:
        return None
    key: Any = (default_device, walk.outs, tuple(walk.parts))
    template = _templates.get(key)
    # (CONSTs are hash-consed: the same UOp is the same value, and only a new one needs its value compared)
    changed = set() if template is None else \
        {k for k, value in template.baked.items()
         if walk.scalars[k] is not template.baked_consts[k] and repr(walk.scalars[k].arg) != value}
    if template is None or changed:
        CacheStats.misses += 1
        lift = changed | set(template.lifted) if template is not None else set()  # a value that varied stays lifted
        template = _templates[key] = _make_template(walk, default_device, lift)
        if len(_templates) > MAX_ENTRIES:
            _templates.popitem(last=False)
    else:
        CacheStats.hits += 1
        _templates.move_to_end(key)
    values = {b.src[0].arg[0]: b.src[1].arg for b in walk.binds}
    items, results = _instantiate(template, walk.leaves, walk.scalars, values)
    return items, dict(zip(outs, results, strict=True))


def clear() -> None:
    """Forget every cached schedule (tests)."""
    _templates.clear()
    CacheStats.hits = CacheStats.misses = 0

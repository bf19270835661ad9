"""Order a kernel's graph into a list a renderer can emit top to bottom.

In:  a kernel SINK in loop form: RANGE loops closed by END, accumulators as DEFINE_REG with
     STOREs and LOADs ordered by AFTER (see ``accumulate.py``).
Out: a list of UOps in which every source comes before its users, each RANGE opens a loop
     that the matching END closes, loops nest properly, and every node sits in the
     outermost loop it can (loop-invariant work is hoisted for free).

The nesting of loops is read off the graph: the ranges an END closes are nested in the
order given, inside the innermost range still open at that END. A renderer may give a
``placement_priority(uop) -> int`` hook to break ties among nodes that are ready at the
same time (lower goes first); the default keeps graph order.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable

from tgcore.uop import Ops, UOp
from tgcore.uop.uop import consumer_map


class LinearizeError(RuntimeError):
    """The graph's loops cannot be nested (a bug in an earlier pass)."""


def range_sort_key(r: UOp) -> tuple:
    """Nesting order of ranges (``AxisArg.nesting_key``): threads, reduction tiles (their partial sums go to
    memory), output axes, reductions, each by axis."""
    return r.arg.nesting_key()


def loop_parents(sink: UOp) -> dict[UOp, UOp | None]:
    """For every RANGE, the range directly enclosing it (None at the top level)."""
    parent: dict[UOp, UOp | None] = {}
    for n in sink.toposort:
        if n.op is not Ops.END:
            continue
        closed = sorted(n.src[1:], key=range_sort_key)
        outer = sorted(n.ranges, key=range_sort_key)
        prev = outer[-1] if outer else None
        for r in closed:
            parent.setdefault(r, prev)
            prev = r
    return parent


def linearize(sink: UOp, placement_priority: Callable[[UOp], int] | None = None) -> list[UOp]:
    """Each step places the first of the placeable ready nodes in the order ordinary work, then closing
    loops, then opening loops (the loop that must close first opens first), ties broken by
    ``placement_priority`` then graph order.

    Ordinary ready nodes wait in a heap when all their loops are open, else in a blocked list that is
    checked again when a loop opens (a loop only closes when no ordinary node can be placed, so a node
    in the heap stays placeable); the few loop and SINK nodes are scanned each time."""
    nodes = list(sink.toposort)
    position = {n: i for i, n in enumerate(nodes)}
    users = consumer_map(sink)
    parent = loop_parents(sink)
    missing = {n: len(set(n.src)) for n in nodes}
    stack: list[UOp] = []
    open_set: set[UOp] = set()
    out: list[UOp] = []
    # among loops that could open, the one that must close first opens first (a reduction
    # whose result the other loop's body reads)
    closes_at: dict[UOp, int] = {}
    for i, n in enumerate(nodes):
        if n.op is Ops.END:
            for r in n.src[1:]:
                closes_at.setdefault(r, i)
    closed_order = {n: sorted(n.src[1:], key=range_sort_key) for n in nodes if n.op is Ops.END}

    work: list[tuple[int, int, UOp]] = []  # ordinary nodes whose loops are all open: (priority, position, node)
    blocked: list[UOp] = []                # ordinary nodes waiting for a loop to open
    structural: list[UOp] = []             # ready RANGE, END and SINK nodes

    def key(n: UOp) -> tuple[int, int]:
        return (placement_priority(n) if placement_priority else 0, position[n])

    def make_ready(n: UOp) -> None:
        if n.op in _STRUCTURAL:
            structural.append(n)
        elif all(r in open_set for r in n.ranges):
            heapq.heappush(work, (*key(n), n))
        else:
            blocked.append(n)

    def placeable(n: UOp) -> bool:
        if n.op is Ops.RANGE:
            return parent.get(n) is (stack[-1] if stack else None) and all(
                r in open_set for r in n.ranges if r is not n)
        if n.op is Ops.END:
            closed = closed_order[n]
            return len(stack) >= len(closed) and stack[len(stack) - len(closed):] == closed
        return not stack and not work and not blocked and len(structural) == 1  # SINK: last of all

    def order(n: UOp) -> tuple:  # closing loops before opening loops
        return (_RANK[n.op], closes_at.get(n, 0) if n.op is Ops.RANGE else 0, key(n))

    for n in nodes:
        if missing[n] == 0:
            make_ready(n)
    while work or blocked or structural:
        if work:
            best = heapq.heappop(work)[2]
        else:
            candidates = [n for n in structural if placeable(n)]
            if not candidates:
                ready = blocked + structural
                raise LinearizeError(f"cannot place any of {[n.op.name for n in ready]} with loops "
                                     f"{[r.arg for r in stack]} open")
            best = min(candidates, key=order)
            structural.remove(best)
        out.append(best)
        if best.op is Ops.RANGE:
            stack.append(best)
            open_set.add(best)
            still = []
            for n in blocked:
                if all(r in open_set for r in n.ranges):
                    heapq.heappush(work, (*key(n), n))
                else:
                    still.append(n)
            blocked = still
        elif best.op is Ops.END:
            for _ in range(len(best.src) - 1):
                open_set.discard(stack.pop())
        for u in users[best]:
            missing[u] -= 1
            if missing[u] == 0:
                make_ready(u)
    if len(out) != len(nodes):
        raise LinearizeError(f"linearized {len(out)} of {len(nodes)} nodes")
    return out


_STRUCTURAL = frozenset({Ops.RANGE, Ops.END, Ops.SINK})
_RANK = {Ops.END: 1, Ops.RANGE: 2, Ops.SINK: 3}


def drop_buffer_afters(uops: list[UOp]) -> list[UOp]:
    """The linear list without ``AFTER``s of a buffer argument: they only order a load after the work it follows
    (the read of a tiled reduction's earlier partial sums), which the list's order now says; each node that
    used one uses the buffer instead, so renderers see buffers only as ``PARAM``s."""
    if not any(u.op is Ops.AFTER and u.src[0].op is Ops.PARAM for u in uops):
        return uops
    new: dict[UOp, UOp] = {}
    out = []
    for u in uops:
        if u.op is Ops.AFTER and u.src[0].op is Ops.PARAM:
            new[u] = new.get(u.src[0], u.src[0])
            continue
        src = tuple(new.get(s, s) for s in u.src)
        new[u] = u if src == u.src else UOp(u.op, u.dtype, src, u.arg, u.tag)
        out.append(new[u])
    return out

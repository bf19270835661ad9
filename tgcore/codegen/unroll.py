"""Short innermost loops unrolled in codegen, for renderers whose output no compiler unrolls (machine code).

In:  a kernel SINK in loop form (``accumulate.add_accumulators_and_ends``: accumulators as DEFINE_REG updated by
     STOREs ordered by AFTER, loops closed by END) and the longest loop to unroll.
Out: the same kernel where each innermost loop over the steps inside a quantization block (``SplitPart.IN_BLOCK``)
     of at most that many iterations (a constant count) is gone: its body once per value of its RANGE, that value a
     constant, simplified (a copy's index math folds, a shift by a constant amount is a constant, loads the copies
     share are one load), unless the copies would hold more than ``MAX_UNROLLED_NODES`` nodes.

Accumulator updates stay in the loop's order: copy ``i`` reads what copy ``i - 1`` stored (its AFTER names that
store), so every sum adds the same values in the same order as the loop, and the results are bit-identical. The
C renderer leaves this to gcc/clang (``#pragma GCC unroll``: every innermost loop with a constant trip count up to
8, a wider rule than this one's).
"""
from __future__ import annotations

from tgcore.codegen.linearize import loop_parents, range_sort_key
from tgcore.uop import Ops, RangeKind, SplitPart, UOp

MAX_UNROLLED_NODES = 1024  # nodes a loop's copies may hold together (what depends on its index, times its trips)


def unroll_short_loops(sink: UOp, max_trips: int) -> UOp:
    """``sink`` with each innermost loop of 2..``max_trips`` iterations unrolled (see the module docstring)."""
    if max_trips < 2:
        return sink
    parents = loop_parents(sink)
    enclosing = {p for p in parents.values() if p is not None}
    # the steps inside a quantization block (a GEMV's hot loop: its scales, shifts and byte offsets fold); other short
    # loops stay loops: simplifying the copies of every short reduction (pooling windows, convolution taps) cost
    # ~20% more compile time in the nn tests
    short = [r for r, parent in parents.items() if r not in enclosing and parent is not None
             and r.arg.kind is RangeKind.REDUCE and r.arg.parts[-1:] == (SplitPart.IN_BLOCK,)
             and r.src[0].op is Ops.CONST and 1 < r.src[0].arg <= max_trips]
    for r in short:
        ends = [n for n in sink.toposort if n.op is Ops.END and r in n.src[1:]]
        if len(ends) == 1 and sorted(ends[0].src[1:], key=range_sort_key)[-1] is r:
            sink = _unrolled(sink, r, ends[0])
    return sink


def _accumulator(store: UOp) -> UOp | None:
    """The DEFINE_REG a STORE updates (``STORE(INDEX(AFTER(acc, ...), 0), value)``), None for a store to memory."""
    index = store.src[0]
    after = index.src[0] if index.op is Ops.INDEX else None
    if after is not None and after.op is Ops.AFTER and after.src[0].op is Ops.DEFINE_REG:
        return after.src[0]
    return None


def _unrolled(sink: UOp, r: UOp, end: UOp) -> UOp:
    """``sink`` with loop ``r`` (closed by ``end``, the innermost of the loops ``end`` closes) unrolled."""
    body = end.src[0]
    stores = body.src if body.op is Ops.GROUP else (body,)
    per_copy = sum(1 for u in body.toposort if r in u.ranges)
    if per_copy * r.src[0].arg > MAX_UNROLLED_NODES:
        return sink  # a big body (a register tile): its loop overhead is small, its copies cost compile time
    updated = [acc for acc in map(_accumulator, stores) if acc is not None]
    if len(updated) != len(set(updated)) or any(s.op is not Ops.STORE for s in stores):
        return sink  # two updates of one accumulator per iteration, or a body that is not stores: left as a loop
    # reads of an accumulator inside the loop: AFTER(acc, init, *ranges including r)
    reads = [u for u in body.toposort if u.op is Ops.AFTER and r in u.src and u.src[0].op is Ops.DEFINE_REG]
    last: dict[UOp, UOp] = {}   # accumulator -> the store of the copy before
    kept: list[UOp] = []        # memory stores of every copy
    for i in range(r.src[0].arg):
        mapping = {r: UOp.const(r.dtype, i)}
        for a in reads:
            reg = a.src[0]
            deps = tuple(s for s in a.src[1:] if s is not r) + ((last[reg],) if reg in last else ())
            mapping[a] = UOp(Ops.AFTER, a.dtype, (reg, *deps), a.arg)
        # the copy's stores substituted and simplified together (one walk of the graph they share each)
        copies = UOp.group(*stores).substitute(mapping).simplify().src
        if len(copies) != len(stores):
            return sink  # (simplification never merges stores; if it did, the loop is kept)
        for s, copy in zip(stores, copies, strict=True):
            updated_reg = _accumulator(s)
            if updated_reg is None:
                kept.append(copy)
            else:
                last[updated_reg] = copy
    done = [*kept, *last.values()]
    group = done[0] if len(done) == 1 else UOp.group(*done)
    outer = tuple(x for x in end.src[1:] if x is not r)
    return sink.substitute({end: group.end(*outer) if outer else group})

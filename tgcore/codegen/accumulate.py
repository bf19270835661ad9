"""Reductions as accumulator loops, and loops closed with END.

In:  a kernel SINK whose reductions are ``REDUCE(value, *ranges)`` and whose stores sit
     inside output RANGEs that nothing closes yet.
Out: the same kernel where each REDUCE is a register accumulator::

         acc  = DEFINE_REG                       (a 1-element register array)
         init = STORE(INDEX(AFTER(acc, *outer), 0), identity)   inside the enclosing loops
         upd  = STORE(INDEX(AFTER(acc, init, *ranges), 0), acc[0] <op> value)
         done = END(upd, *ranges)
         out  = LOAD(INDEX(AFTER(acc, done), 0))

     and every STORE to memory is wrapped in ``END(store, *its open ranges)``. The AFTER
     edges are what keeps the initialisation inside the right loops and the read after the
     loop ends; ``linearize`` only has to respect them.
"""
from __future__ import annotations

from typing import Any

from tgcore.codegen.linearize import range_sort_key
from tgcore.dtype import AddrSpace, DType, dtypes
from tgcore.uop import Ops, UOp


def reduce_identity(op: Ops, dtype: DType) -> Any:
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    if op is Ops.MAX:
        return dtype.scalar().min
    raise ValueError(f"no identity for reduce {op}")


NESTED_SUMS = (Ops.REDUCE, Ops.CUSTOMI)


def _terms(u: UOp) -> list[UOp]:
    return [t for s in u.src for t in _terms(s)] if u.op is Ops.ADD else [u]


def in_turn(red: UOp) -> list[UOp] | None:
    """The products a float sum adds to its accumulator one after the other, ``acc = (acc + p1) + p2``: the
    sums of quantization blocks ``blocks.factor_blocks`` made (each term a product with a block's sum: an inner
    REDUCE, or the renderer's inline call that replaced one, ``cbytedot``), else None. A C compiler that
    contracts ``a * b + c`` into one FMA (gcc's default) then has one product to fuse in each add, whereas in
    ``acc + (p1 + p2)`` which product it fuses changes with the code around it (rows unrolled or not), and with
    it the rounding: each row of a batch would no longer be summed as it is alone. One accumulator, not one per
    product: fewer registers and adds."""
    if red.arg is not Ops.ADD or not dtypes.is_float(red.dtype):
        return None
    terms = _terms(red.src[0])
    if len(terms) < 2 or not all(t.op is Ops.MUL and any(u.op in NESTED_SUMS for u in t.toposort) for t in terms):
        return None
    return terms


def _combine(op: Ops, acc: UOp, value: UOp, terms: list[UOp] | None) -> UOp:
    if terms is None:
        return acc.alu(op, value)
    for t in terms:
        acc = acc.alu(op, t)
    return acc


def loops_around(sink: UOp) -> dict[UOp, set[UOp]]:
    """For each reduced range, the open ranges of every reduction over it. The reductions over one range run in one
    loop (``merge_sibling_ends``), nested inside all of those: a sum whose value depends on none of them (a block's
    count) still runs once per iteration of each, so its accumulator must start from zero inside them too."""
    around: dict[UOp, set[UOp]] = {}
    for n in sink.toposort:
        if n.op is Ops.REDUCE:
            for r in n.src[1:]:
                around.setdefault(r, set()).update(n.ranges)
    return around


def _accumulator(red: UOp, src: tuple[UOp, ...], number: int, new: dict[UOp, UOp],
                 around: dict[UOp, set[UOp]]) -> UOp:
    value, ranges = src[0], src[1:]
    order = in_turn(red)
    terms = None if order is None else [new[t] for t in order]
    op: Ops = red.arg
    acc = UOp(Ops.DEFINE_REG, red.dtype.ptr(1, AddrSpace.REG), (), number)
    zero = UOp.const(dtypes.int32, 0)
    enclosing = set(red.ranges).union(*(around.get(r, set()) for r in red.src[1:])) - set(red.src[1:])
    outer = sorted(enclosing, key=range_sort_key)
    init = acc.after(*outer).index(zero).store(UOp.const(red.dtype, reduce_identity(op, red.dtype)))
    live = acc.after(init, *ranges).index(zero)  # read inside the loop, after the initialisation
    update = live.store(_combine(op, live.load(), value, terms))
    done = update.end(*sorted(ranges, key=range_sort_key))
    return acc.after(done).index(zero).load()


def _close_loops(effects: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """Stores inside the same loops share one END (one loop nest writes them all)."""
    by_loops: dict[tuple[UOp, ...], list[UOp]] = {}
    for s in effects:
        loops = tuple(sorted(s.ranges, key=range_sort_key)) if s.op is Ops.STORE else ()
        by_loops.setdefault(loops, []).append(s)
    out = []
    for loops, group in by_loops.items():
        body = group[0] if len(group) == 1 else UOp.group(*group)
        out.append(body.end(*loops) if loops else body)
    return tuple(out)


def merge_sibling_ends(sink: UOp) -> UOp:
    """ENDs of accumulator updates that close the same loops become one END of a GROUP.

    Unrolled reductions each have their own accumulator but run in one loop. A loop is one RANGE, so
    it has one END even when the updates it closes depend on different enclosing loops (a sum over a
    quantization block of the shared input next to one per output row, inside the same block loop).
    """
    while True:  # a merged END is built from the old stores: ENDs nested inside it merge on the next pass
        groups: dict[tuple[UOp, ...], list[UOp]] = {}
        for n in sink.toposort:
            if n.op is Ops.END and n.src[0].op is Ops.STORE:
                groups.setdefault(n.src[1:], []).append(n)
        mapping = {}
        for loops, ends in groups.items():
            if len(ends) > 1:
                merged = UOp.group(*(e.src[0] for e in ends)).end(*loops)
                mapping.update({e: merged for e in ends})
        if not mapping:
            return sink
        sink = sink.substitute(mapping)


def add_accumulators_and_ends(sink: UOp) -> UOp:
    new: dict[UOp, UOp] = {}
    count = 0
    around = loops_around(sink)
    for n in sink.toposort:
        src = tuple([new[s] for s in n.src])
        if n.op is Ops.REDUCE:
            new[n] = _accumulator(n, src, count, new, around)
            count += 1
        elif n.op is Ops.SINK:
            new[n] = n.replace(src=_close_loops(src))
        else:
            new[n] = n if src == n.src else UOp(n.op, n.dtype, src, n.arg, n.tag)
    return merge_sibling_ends(new[sink])

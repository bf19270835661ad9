"""Kernel optimizations as data: one record per change to a kernel's loops, one function that applies a list.

In:  a kernel SINK in REDUCE form (simplified), a list of ``Opt`` records (chosen by a policy:
     ``tgcore.codegen.heuristic`` or a search), the renderer.
Out: the kernel with the listed loops vectorized, unrolled, tiled and split over threads, and the number
     of threads it runs on.

An ``Opt`` names an axis of the kernel as it came from the scheduler (``kernel_axes``: the output axes in
order, then the reduced axes) and an amount. Each opt splits what is left of that axis (its remaining
loop, of size ``n``) in two:

- ``UPCAST``: the innermost ``amount`` iterations become the lanes of a vector (one axis per kernel).
- ``UNROLL``: the innermost ``amount`` iterations become copies of the loop body (registers: each copy of a
  reduction keeps its own accumulator).
- ``TILE``: a reduced axis: the loop keeps its innermost ``amount`` iterations, the outer ``n / amount`` run
  outside every output loop (after the thread split) and the partial sums add up in the output buffer:
  a GEMM's K blocks, so one block of B stays in cache while every row of A passes over it. An epilogue on
  the sum (a bias, a residual add) is applied after the last block.
- ``BLOCK``: a reduced axis that a quantization format divides into blocks of ``amount``: the loop becomes
  block and in-block loops, and factors constant over a block (its scales) multiply the block's partial
  sum instead of every element (``blocks.split_blocks``, ``blocks.factor_blocks``). A second BLOCK of the
  same axis, of an amount that divides the first's, splits the in-block loop again (a K-quant's 256-element
  super-block with its ``d`` and 32-element sub-blocks with their scales): each factor then leaves the
  innermost sum it is constant over.
- ``SPREAD``: the innermost ``BLOCK`` of a reduced axis inside another one (a K-quant's ``amount`` sub-blocks per
  super-block) unrolled, each factor that changes from sub-block to sub-block computed once per super-block as a
  vector of ``amount`` lanes (``blocks.spread_block_factors``: the scales unpacked in vector registers, not one
  sub-block at a time). It comes after the axis's BLOCKs, on a renderer with ``Renderer.vector_block_factors``.
- ``PAD``: an output axis of ``n`` iterations runs ``n`` rounded up to a multiple of ``amount``; the extra
  iterations read the last real one's inputs (a clamped index: no gate inside the loops) and store nothing
  (gated stores). It must come before any other opt of its axis: a tile that does not divide the axis.
- ``THREAD``: an output axis split over ``amount`` threads: the whole remaining loop chunked by thread, or,
  when the kernel has a ``TILE``, its outer ``amount`` iterations (so the tile loop can run inside).

Opts are applied in list order, so ``UPCAST(1, 16), UNROLL(1, 4)`` makes axis 1 ``outer*64 + copy*16 + lane``.
A list that cannot be applied raises ``OptError`` naming the opt and the reason.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum, auto

from tgcore.codegen.blocks import factor_blocks, plan_spread, split_blocks, spread_block_factors
from tgcore.codegen.upcast import MAX_LANES, _Expander, _size, _split_ranges, unroll
from tgcore.dtype import dtypes
from tgcore.helpers import prod, round_up
from tgcore.renderer import Renderer
from tgcore.uop import AxisArg, Ops, RangeKind, SplitPart, UOp


class OptOps(Enum):
    UPCAST = auto()
    UNROLL = auto()
    TILE = auto()
    BLOCK = auto()
    THREAD = auto()
    PAD = auto()
    SPREAD = auto()


@dataclass(frozen=True)
class Opt:
    op: OptOps
    axis: int    # index into ``kernel_axes`` of the kernel the list is applied to
    amount: int

    def __str__(self) -> str:
        return f"{self.op.name}({self.axis},{self.amount})"


class OptError(ValueError):
    """An optimization list that does not fit the kernel or the renderer."""


def kernel_axes(ast: UOp) -> list[UOp]:
    """The loops an ``Opt`` can name: output ranges by axis, then reduce ranges by number."""
    ranges = [u for u in ast.toposort if u.op is Ops.RANGE and u.arg.kind in (RangeKind.GLOBAL, RangeKind.REDUCE)]
    return sorted(ranges, key=lambda r: (r.arg.kind is not RangeKind.GLOBAL, r.arg.axis))


def _check(ast: UOp, axes: list[UOp], opts: list[Opt], renderer: Renderer) -> None:
    """Raise OptError for a list that cannot be applied: every opt must divide what is left of its axis."""
    left = {i: _size(r) for i, r in enumerate(axes)}
    upcasts = [o for o in opts if o.op is OptOps.UPCAST]
    if len(upcasts) > 1:
        raise OptError(f"{upcasts[1]}: one axis per kernel can be vectorized, {upcasts[0]} is already")
    threads = [o for o in opts if o.op is OptOps.THREAD]
    if len(threads) > 1:
        raise OptError(f"{threads[1]}: one axis per kernel runs on threads, {threads[0]} is already")
    blocked: dict[int, Opt] = {}  # apply_opts splits blocks after every other opt: BLOCKs end their axis's list
    for at, o in enumerate(opts):
        if not 0 <= o.axis < len(axes):
            raise OptError(f"{o}: the kernel has {len(axes)} axes")
        if o.op is OptOps.SPREAD:
            _check_spread(o, opts[:at], opts[at + 1:], renderer)
            continue
        if o.axis in blocked:
            outer = blocked[o.axis]
            if o.op is not OptOps.BLOCK:
                raise OptError(f"{o}: {outer} already divides axis {o.axis} into blocks; "
                               "BLOCK comes after the other opts of its axis")
            if not 1 < o.amount < outer.amount or outer.amount % o.amount:
                raise OptError(f"{o}: a BLOCK inside {outer} must divide its {outer.amount} iterations into smaller "
                               "blocks")
            blocked[o.axis] = o
            continue
        kind, n = axes[o.axis].arg.kind, left[o.axis]
        if o.amount < 1 or n < 1:
            raise OptError(f"{o}: amount must be positive and the axis of constant size")
        if o.op is OptOps.THREAD:
            if kind is not RangeKind.GLOBAL:
                raise OptError(f"{o}: only output axes run on threads")
            continue
        if o.op is OptOps.PAD:
            if kind is not RangeKind.GLOBAL or n != _size(axes[o.axis]):
                raise OptError(f"{o}: PAD applies to an output axis, before any other opt of it")
            left[o.axis] = round_up(n, o.amount)
            continue
        if o.op in (OptOps.TILE, OptOps.BLOCK) and kind is not RangeKind.REDUCE:
            raise OptError(f"{o}: {o.op.name} applies to reduced axes only")
        if n % o.amount:
            raise OptError(f"{o}: {o.amount} does not divide the {n} iterations left of axis {o.axis} "
                           "(pad the axis or choose a divisor)")
        left[o.axis] = o.amount if o.op is OptOps.TILE else n // o.amount
        if o.op is OptOps.BLOCK:
            blocked[o.axis] = o
    if upcasts and upcasts[0].amount > MAX_LANES:
        raise OptError(f"{upcasts[0]}: at most {MAX_LANES} lanes")
    if upcasts and upcasts[0].amount & (upcasts[0].amount - 1):
        raise OptError(f"{upcasts[0]}: a vector has a power-of-two number of lanes (pad the axis to a multiple of one, "
                       "or UNROLL it)")
    ordered = [o for o in opts if o.op in (OptOps.UPCAST, OptOps.TILE)]
    if ordered and not renderer.linear:
        raise OptError(f"{ordered[0]}: {type(renderer).__name__} takes the kernel in REDUCE form (linear = False) and "
                       "runs scalar loops in its own order: no vectors (UPCAST), no loop that must run first (TILE)")
    tiles = [o for o in opts if o.op is OptOps.TILE]
    if tiles and not tileable(ast):
        raise OptError(f"{tiles[0]}: TILE needs one store of one float sum (maybe under an epilogue) in its dtype")
    registers = renderer.vector_registers
    copies = prod(o.amount for o in opts if o.op is OptOps.UNROLL)
    if any(u.op is Ops.REDUCE for u in ast.toposort) and copies > registers:
        raise OptError(f"{[str(o) for o in opts]}: {copies} accumulators do not fit in {registers} vector registers")


def _check_spread(o: Opt, before: list[Opt], after: list[Opt], renderer: Renderer) -> None:
    """A SPREAD follows two BLOCKs of its axis, the inner dividing the outer into ``amount`` sub-blocks, and
    nothing else of that axis follows it."""
    if not renderer.vector_block_factors:
        raise OptError(f"{o}: {type(renderer).__name__} does not take a block's factors as vectors "
                       "(Renderer.vector_block_factors)")
    blocks = [b for b in before if b.op is OptOps.BLOCK and b.axis == o.axis]
    if len(blocks) < 2 or blocks[-2].amount != blocks[-1].amount * o.amount:
        raise OptError(f"{o}: SPREAD needs two BLOCKs of axis {o.axis} before it, {o.amount} inner blocks in the outer")
    if any(x.axis == o.axis for x in after):
        raise OptError(f"{o}: SPREAD ends the opts of its axis")


def tileable(ast: UOp) -> bool:
    """One store of one float ADD reduction in the stored dtype (the partial sums are kept in the output), or of an
    epilogue computed from it (a bias, a residual add: applied after the last K tile, ``_add_earlier_tiles``) that
    does not read the output."""
    stores = [s for s in ast.src if s.op is Ops.STORE]
    if len(stores) != 1 or len(ast.src) != 1:
        return False
    output, value = stores[0].src[0].src[0], stores[0].src[1]
    reduces = [u for u in value.toposort if u.op is Ops.REDUCE]
    # (an epilogue that reads the output itself, an in-place ``out += x @ w``, would read the partial sums)
    reads_output = any(u.op is Ops.INDEX and u.src[0] is output for u in value.toposort)
    return (len(reduces) == 1 and reduces[0].arg is Ops.ADD and dtypes.is_float(reduces[0].dtype)
            and reduces[0].dtype == value.dtype and not reads_output)


def _split(ast: UOp, r: UOp, amount: int, inner_arg: AxisArg, outer_arg: AxisArg) -> tuple[UOp, UOp | None, UOp]:
    """``r`` (size n) as ``outer*amount + inner``; returns the kernel, the outer range (None if n == amount) and the
    inner one. A reduction over ``r`` reduces over both."""
    n = _size(r)
    outer = UOp.range(n // amount, outer_arg, dtype=r.dtype) if n != amount else None
    inner = UOp.range(amount, inner_arg, dtype=r.dtype)
    parts = tuple(x for x in (outer, inner) if x is not None)
    ast = _split_ranges(ast, {r: outer * amount + inner if outer is not None else inner}, {r: parts})
    return ast, outer, inner


def _pad(ast: UOp, r: UOp, amount: int, gate_loads: bool) -> tuple[UOp, UOp]:
    """``r`` (size n) replaced by a loop of n rounded up to a multiple of ``amount``; the stores are gated on
    ``r' < n``. Loads read ``min(r', n - 1)`` (a clamped index: no gate inside the loops), or, with ``gate_loads``
    (a vectorized axis: a clamped index is no vector), are gated on ``r' < n`` too unless every padded iteration
    reads inside the buffer. Returns the kernel and the
    new loop."""
    n = _size(r)
    padded = UOp.range(round_up(n, amount), r.arg, dtype=r.dtype)
    valid = padded < n
    ast = _split_ranges(ast, {r: padded if gate_loads else valid.where(padded, n - 1)}, {})

    def gated(index: UOp) -> UOp:
        return UOp(Ops.INDEX, index.dtype, (*index.src[:2], valid if len(index.src) < 3 else index.src[2] & valid))

    def past_the_end(load: UOp) -> bool:
        """Whether a padded iteration may read outside the load's buffer. One that stays inside (a buffer with
        rows padded to whole vectors) needs no gate: the padded lanes are computed and never stored."""
        index = load.src[0]
        size = getattr(index.src[0].dtype, "size", -1)
        at = index.src[1]
        return padded in at.toposort and (size < 0 or at.vmin < 0 or at.vmax >= size)
    new: dict[UOp, UOp] = {}
    for u in ast.toposort:
        src = tuple(new[s] for s in u.src)
        if u.op is Ops.STORE or (gate_loads and u.op is Ops.LOAD and past_the_end(u)):
            src = (gated(src[0]), *src[1:])
        new[u] = u if src == u.src else u.replace(src=src)
    return new[ast], padded


def _and_gate(gate: UOp, extra: UOp) -> UOp:
    """``gate & extra``, lane by lane when ``gate`` is a vector of lane gates."""
    if gate.dtype.count == 1:
        return gate & extra
    if gate.op is not Ops.VECTORIZE:  # a range of lanes (``_Expander.range_gate``): one more lane-free term
        return gate & UOp.vectorize(*[extra] * gate.dtype.count)
    return UOp(Ops.VECTORIZE, gate.dtype, tuple(g & extra for g in gate.src))


def _add_earlier_tiles(ast: UOp, tiles: list[UOp], epilogue: bool) -> UOp:
    """Each store adds what the output holds from the earlier tiles (a gated load: nothing before the first) to its
    sum; with an ``epilogue`` around the sum (a bias, a residual add; ``_tile_sum`` finds the sum) that is applied
    to the total after the last tile only, the earlier ones store the total. The load comes AFTER the sum it is
    added to, so the reduction loop's registers hold accumulators, not old outputs."""
    later, last = tiles[0].ne(0), tiles[0].eq(_size(tiles[0]) - 1)
    for t in tiles[1:]:
        later, last = later | t.ne(0), last & t.eq(_size(t) - 1)

    def add(store: UOp) -> UOp:
        index, value = store.src
        gate = later if len(index.src) < 3 else _and_gate(index.src[2], later)
        partial = _tile_sum(value) if epilogue else value
        earlier_at = UOp(Ops.INDEX, index.dtype, (index.src[0].after(partial), index.src[1], gate))
        total = UOp(Ops.LOAD, partial.dtype, (earlier_at,)) + partial
        if partial is value:
            return index.store(total)
        lanes = value.dtype.count
        done = last if lanes == 1 else UOp.vectorize(*[last] * lanes)
        return index.store(done.where(value.substitute({partial: total}), total))
    return ast.replace(src=tuple(add(s) if s.op is Ops.STORE else s for s in ast.src))


def _tile_sum(value: UOp) -> UOp:
    """The node of a stored ``value`` (an epilogue of a sum) that is the sum: the lowest one that every path from
    ``value`` to a REDUCE passes through (a REDUCE, or the adds that combine its unrolled copies), when the
    epilogue above it works lane by lane on the same vector (else the list does not fit: ``OptError``)."""
    reduces = {u for u in value.toposort if u.op is Ops.REDUCE}
    above: set[UOp] = set()  # the nodes computed from a REDUCE
    for u in value.toposort:  # leaves first: the first that cuts every path is the lowest
        if u in reduces or any(s in above for s in u.src):
            above.add(u)
            if u is not value and not _reaches(value, reduces, u):
                between = [n for n in above if n is not u and u in n.toposort]
                if u.dtype == value.dtype and not any(n.op in (Ops.GEP, Ops.VECTORIZE) for n in between):
                    return u
                break
    raise OptError("TILE: the epilogue of a sum moves its lanes (no vector of the whole sum to add tiles to)")


def _reaches(root: UOp, targets: set[UOp], cut: UOp) -> bool:
    """Whether a path from ``root`` reaches one of ``targets`` without passing through ``cut``."""
    seen: set[UOp] = set()
    stack = [root]
    while stack:
        u = stack.pop()
        if u is cut or u in seen:
            continue
        if u in targets:
            return True
        seen.add(u)
        stack.extend(u.src)
    return False


def apply_opts(ast: UOp, opts: list[Opt], renderer: Renderer) -> tuple[UOp, int]:
    """The kernel with ``opts`` applied, and the number of threads it runs on (see the module docstring)."""
    axes = kernel_axes(ast)
    _check(ast, axes, opts, renderer)
    epilogue = any(s.op is Ops.STORE and s.src[1].op is not Ops.REDUCE for s in ast.src)
    current = dict(enumerate(axes))  # axis -> what is left of its loop
    splits = {i: 0 for i in current}
    unrolled: list[UOp] = []
    vector: UOp | None = None
    blocks: dict[UOp, list[int]] = {}  # a reduced loop -> its block sizes, outermost first
    tiles: list[UOp] = []
    spread: list[UOp] = []  # reduced loops whose sub-blocks' factors become vectors
    thread: Opt | None = None
    for o in opts:
        r = current[o.axis]
        if o.op is OptOps.THREAD:
            thread = o
            continue
        if o.op is OptOps.BLOCK:
            blocks.setdefault(r, []).append(o.amount)
            continue
        if o.op is OptOps.SPREAD:
            spread.append(r)
            continue
        if o.op is OptOps.PAD:
            if _size(r) % o.amount:
                lanes_here = any(x.op is OptOps.UPCAST and x.axis == o.axis for x in opts)
                ast, current[o.axis] = _pad(ast, r, o.amount, lanes_here)
                splits[o.axis] += 1
            continue
        nth = splits[o.axis]  # a second split of an axis names its loops apart
        splits[o.axis] += 1
        axis = r.arg.axis
        if o.op is OptOps.TILE:
            in_tile = replace(r.arg, parts=(*r.arg.parts, SplitPart.IN_TILE), split=nth)
            ast, outer, inner = _split(ast, r, o.amount, in_tile, AxisArg(axis, RangeKind.TILE, split=nth))
            tiles += [outer] if outer is not None else []
            current[o.axis] = inner
            continue
        lanes = AxisArg(axis, RangeKind.UPCAST, split=nth, lanes_of=r.arg.kind)
        ast, outer, lane = _split(ast, r, o.amount, lanes, r.arg)
        current[o.axis] = outer if outer is not None else lane
        if o.op is OptOps.UPCAST:
            vector = lane
        else:
            unrolled.append(lane)
    if any(splits.values()):
        ast = ast.simplify()
    if tiles:  # the tile loops leave the reductions (the stores sit inside them; _add_earlier_tiles adds them up)
        ast = _split_ranges(ast, {}, {t: () for t in tiles})
    for lane in unrolled:
        ast = unroll(ast, lane)
    sub_blocks: dict[UOp, UOp] = {}
    if blocks:
        ast, sub_blocks = _split_and_factor_blocks(ast, blocks)
    plans = [(sub_blocks[r], plan_spread(ast, sub_blocks[r])) for r in spread]
    expanded: dict[UOp, UOp] = {}
    if vector is not None:
        expander = _Expander([vector], renderer.masked_vectors, renderer.gathers, renderer.byte_table_lookups)
        ast = expander.expand(ast)
        expanded = expander.expanded
    for sub_block, plan in plans:  # on the vectors: a factor's value in every lane is one of its vector's permutes
        ast = spread_block_factors(ast, sub_block, plan, expanded)
    if tiles:  # on the final stores (vectors, unrolled copies)
        ast = _add_earlier_tiles(ast, tiles, epilogue)
    return _thread(ast, thread, current, bool(tiles))


def _split_and_factor_blocks(ast: UOp, blocks: dict[UOp, list[int]]) -> tuple[UOp, dict[UOp, UOp]]:
    """Each reduced loop split into its blocks (a nested block splits the in-block loop of the one before), then
    the factors constant over a block moved out of its sum, innermost blocks first: a sub-block's scale leaves
    the per-element sum, then a super-block's ``d`` leaves the sum over its sub-blocks. Returns the kernel and
    each reduced loop's innermost block loop (a super-block's sub-blocks)."""
    levels: list[dict[UOp, UOp]] = []  # per nesting level: block loop -> in-block loop (or the next level's blocks)
    loops = {r: r for r in blocks}     # the loop of each axis that the next level splits
    for depth in range(max(len(amounts) for amounts in blocks.values())):
        level: dict[UOp, UOp] = {}
        for r, amounts in blocks.items():
            if depth < len(amounts):
                ast, in_block = split_blocks(ast, {loops[r]: amounts[depth]})
                ((block, inner),) = in_block.items()
                if depth:  # the loop split here was the in-block loop of the level before: its blocks now
                    outer = next(b for b, i in levels[-1].items() if i is loops[r])
                    levels[-1][outer] = block
                level[block] = inner
                loops[r] = inner
        levels.append(level)
    innermost = {r: next(b for b, i in levels[len(amounts) - 1].items() if i is loops[r])
                 for r, amounts in blocks.items()}
    for level in reversed(levels):
        ast = factor_blocks(ast, level)
    return ast, innermost


def _thread(ast: UOp, o: Opt | None, current: dict[int, UOp], tiled: bool) -> tuple[UOp, int]:
    if o is None or o.amount <= 1:
        return ast, 1
    r = current[o.axis]
    if r not in ast.toposort:
        return ast, 1
    thread_arg = AxisArg(r.arg.axis, RangeKind.THREAD, threads=o.amount)
    if not tiled:  # the whole loop, chunked by thread
        return ast.substitute({r: r.replace(arg=thread_arg)}), o.amount
    n = _size(r)
    if n % o.amount:
        raise OptError(f"{o}: with a TILE the {n} iterations of axis {o.axis} must divide among the threads")
    per = n // o.amount
    core = UOp.range(o.amount, thread_arg, dtype=r.dtype)
    rest = UOp.range(per, r.arg, dtype=r.dtype)
    return ast.substitute({r: core * per + rest}).simplify(), o.amount

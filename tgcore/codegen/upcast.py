"""The loop mechanics that ``optimize.apply_opts`` composes: splitting ranges, unrolling, lanes as vectors, blocks.

In:  a kernel SINK in REDUCE form (simplified) and the ranges an optimization list chose.
Out: ``_split_ranges`` (a range as an index expression over new loops, reductions over the new loops),
     ``unroll`` (one copy of the stores per value of a range), ``_Expander`` (every value that depends on a
     lane range becomes a vector of all lanes: loads of consecutive addresses one vector load, stores likewise,
     reductions vector accumulators). Quantization blocks: ``codegen.blocks``.

How lanes are expanded: a lane axis is a RANGE of kind ``RangeKind.UPCAST``. For every
load and store, the scalar index is evaluated once per lane (the lane ranges substituted
by constants, then simplified); runs of consecutive indices become vector accesses, other
lanes are gathered with GEP/VECTORIZE. Everything else becomes the vector form of itself,
with scalar operands broadcast.
"""
from __future__ import annotations

import itertools
import random
from collections.abc import Mapping

from tgcore.dtype import dtypes
from tgcore.helpers import prod
from tgcore.uop import GroupOp, Ops, UOp
from tgcore.uop.rewrite import _spec_enabled
from tgcore.uop.sint import eval_at
from tgcore.uop.symbolic import conjuncts, plus_const

MAX_LANES = 32   # lanes of the vectorized axis


def _size(r: UOp) -> int:
    return r.src[0].arg if r.src[0].op is Ops.CONST else -1


def _stride(expr: UOp, r: UOp) -> int | None:
    """How much ``expr`` grows when ``r`` grows by one, if that is a constant."""
    from tgcore.uop.symbolic import stride  # read off the sum's terms when it can, else expr[r:=1] - expr[r:=0]
    return stride(expr, r)


def _difference(a: UOp, b: UOp) -> int | None:
    """``a - b`` if that is a constant."""
    from tgcore.uop.symbolic import difference  # read off the terms when it can, else (a - b).simplify()
    return difference(a, b)


def _coefficient(expr: UOp, node: UOp) -> int | None:
    """``c`` when the int ``expr`` is ``c * node + rest`` with ``rest`` free of ``node``, read off its sums and
    products by constants (no simplification); None when ``node`` is under anything else."""
    if expr is node:
        return 1
    if node not in expr.toposort:
        return 0
    if expr.op is Ops.ADD:
        a, b = (_coefficient(s, node) for s in expr.src)
        return None if a is None or b is None else a + b
    if expr.op is Ops.MUL and (k := next((s for s in expr.src if s.op is Ops.CONST), None)) is not None:
        c = _coefficient(expr.src[1] if expr.src[0] is k else expr.src[0], node)
        return None if c is None or not isinstance(k.arg, int) else c * k.arg
    return None


def _add_bound(kept: list[UOp], bound: UOp, suffix: bool) -> None:
    """Add a lane bound (``lanes < bound``, or ``bound < lanes`` for a ``suffix``): of two a constant apart only the
    tighter one counts."""
    for i, other in enumerate(kept):
        if (d := _difference(bound, other)) is not None:
            kept[i] = other if (d <= 0) == suffix else bound
            return
    kept.append(bound)


def _agree(a: UOp, b: UOp, points: int = 16) -> bool:
    """Whether ``a`` and ``b`` (equal up to the order of terms, say) have the same value at the corners of their
    ranges and variables and at random points between (``TG_SPEC=1`` checks of fast paths); identity when they
    read something else (a load)."""
    if a is b:
        return True
    leaves = sorted({u for e in (a, b) for u in e.toposort if u.op in (Ops.RANGE, Ops.DEFINE_VAR)},
                    key=lambda u: u.render())
    rng = random.Random(0)
    for i in range(points):
        values = {u: int(u.vmin if i == 0 else u.vmax if i == 1 else rng.randint(int(u.vmin), int(u.vmax)))
                  for u in leaves}
        try:
            if eval_at(a, values) != eval_at(b, values):
                return False
        except ValueError:
            return False
    return True


def _split_ranges(ast: UOp, mapping: Mapping[UOp, UOp], parts: Mapping[UOp, tuple[UOp, ...]]) -> UOp:
    """``ast`` with each RANGE in ``mapping`` replaced by its index expression over new loops, and every REDUCE
    over it reducing over those loops (``parts``) instead."""
    new: dict[UOp, UOp] = {}
    for n in ast.toposort:
        if n in mapping:
            new[n] = mapping[n]
            continue
        src = tuple(new[s] for s in n.src)
        if n.op is Ops.REDUCE:
            src = (src[0], *(p for r in n.src[1:] for p in parts.get(r, (new[r],))))
        new[n] = n if src == n.src else n.replace(src=src)
    return new[ast]


def _plus(base: UOp, c: int) -> UOp:
    """``base + c`` in normal form (``base`` simplified)."""
    if base.op is Ops.CONST:
        return base.const_like(base.arg + c)
    return base if c == 0 else plus_const(base, c)


def _byte_table(buf: UOp) -> bool:
    """A buffer of 16 bytes (a 4-bit code's values: one byte shuffle, ``Renderer.byte_table_lookups``)."""
    return getattr(buf.dtype, "size", 0) == 16 and buf.dtype.base is dtypes.uint8  # type: ignore[attr-defined]


_GateParts = tuple[list[UOp], dict[bool, list[UOp]]]  # a row piece's lane-free gates and lane bounds
_RowSplit = tuple[frozenset[UOp], UOp, int]  # a store index's row splits, their x and w (``_Expander.row_split``)


class _Expander:
    def __init__(self, lanes: list[UOp], masked: bool = False, gathers: bool = False,
                 byte_tables: bool = False) -> None:
        """``masked``: the renderer takes a vector access with one gate per lane (``Renderer.masked_vectors``);
        ``gathers``: a vector load at a vector of indices (``Renderer.gathers``); ``byte_tables``: such a load only
        from a table of 16 bytes (``Renderer.byte_table_lookups``)."""
        self.lanes = lanes
        self.masked = masked
        self.gathers = gathers
        self.byte_tables = byte_tables
        self.count = prod(_size(r) for r in lanes)
        # the lanes are one vector: a power of two within the last lane axis (a whole access, a row piece's store)
        self.one_vector = self.count <= _size(lanes[-1]) and not self.count & (self.count - 1)
        combos = list(itertools.product(*(range(_size(r)) for r in lanes)))  # last lane axis fastest
        self.lane_values = {r: [c[i] for c in combos] for i, r in enumerate(lanes)}
        self.lane_set = set(lanes)
        self.steps: dict[tuple[UOp, ...], int] = {}  # per-lane indices -> their constant step (affine ones)
        self.evaluated: dict[UOp, list[UOp]] = {}  # expr -> per_lane(expr): unrolled copies share gates and indices
        self.dependent: dict[UOp, bool] = {}  # expr -> whether it depends on a lane
        self.minus_lane: dict[int, UOp] = {}  # step -> -(lane*step) simplified (an affine index drops it)
        self.bases: dict[UOp, tuple[UOp, int] | None] = {}  # int expr -> (base, step) when affine in the lane
        self.lane_bounds: dict[UOp, tuple[UOp | None, bool] | None] = {}  # gate term -> its bound (lane_bound)
        self.rows: dict[tuple[UOp, int], tuple[UOp, UOp]] = {}  # (position, row length) -> (row, column) at lane 0
        self.row_splits: dict[UOp, _RowSplit | None] = {}  # store INDEX -> its row split (``row_split``)
        # (store gate, the splits of its position, carry) -> a row piece's gate parts (``_piece_gate``)
        self.piece_gates: dict[tuple[UOp | None, frozenset[UOp], int], _GateParts | None] = {}

    def per_lane(self, expr: UOp) -> list[UOp]:
        """``expr`` evaluated for each lane, each distinct ``expr`` once (the unrolled copies of a tile share their
        gates and many indices). An affine index (a constant step per lane, the usual case) is simplified once and
        offset per lane; an op on lane-dependent values (a gate ``index < n``, a clamp) takes its sources' lanes and
        simplifies only itself per lane. Both give the values of ``expr`` with the lane substituted, simplified
        (maybe with terms in another order; ``TG_SPEC=1`` checks the second way against the substitution), without
        simplifying the whole expression once per lane."""
        if (known := self.evaluated.get(expr)) is None:
            known = self.evaluated[expr] = self._per_lane(expr)
        return known

    def depends_on_lanes(self, expr: UOp) -> bool:
        if (known := self.dependent.get(expr)) is None:
            known = self.dependent[expr] = expr in self.lane_set or any(self.depends_on_lanes(s) for s in expr.src)
        return known

    def _per_lane(self, expr: UOp) -> list[UOp]:
        if not self.depends_on_lanes(expr):
            return [expr] * self.count
        if expr in self.lane_set:
            return [UOp.const(expr.dtype, v) for v in self.lane_values[expr]]
        if (affine := self._affine(expr)) is not None:
            return affine
        if expr.op not in GroupOp.ALU:
            return self._substituted(expr)
        if (same := self._uniform_bound(expr)) is not None:
            return same
        srcs = [self.per_lane(s) for s in expr.src]
        out = [UOp(expr.op, expr.dtype, tuple(s[i] for s in srcs), expr.arg, expr.tag).simplify()
               for i in range(self.count)]
        if _spec_enabled() and not all(map(_agree, out, slow := self._substituted(expr))):
            raise AssertionError(f"lanes of {expr.render()}: {[u.render() for u in out]}, "
                                 f"substituted {[u.render() for u in slow]}")
        return out

    def _uniform_bound(self, expr: UOp) -> list[UOp] | None:
        """The lanes of ``index < bound`` (an affine ``index`` over one lane axis, a ``bound`` the lanes do not change:
        a padded tile's gate) when they are all one value: the first and the last lane simplify to the same node.
        The index is monotone along the lane, so every lane between is implied by one end and implies the other:
        two simplifications instead of one per lane. None otherwise (then each lane is simplified)."""
        if expr.op is not Ops.CMPLT or self.depends_on_lanes(expr.src[1]):
            return None
        affine = self.affine(expr.src[0])
        if affine is None:
            return None
        base, step = affine
        last_lane = max(self.lane_values[self.lanes[0]])
        first = UOp(Ops.CMPLT, expr.dtype, (base, expr.src[1])).simplify()
        last = UOp(Ops.CMPLT, expr.dtype, (_plus(base, step * last_lane), expr.src[1])).simplify()
        if first is not last:
            return None
        out = [first] * self.count
        if _spec_enabled() and not all(map(_agree, out, slow := self._substituted(expr))):
            raise AssertionError(f"lanes of {expr.render()}: {first.render()}, substituted "
                                 f"{[u.render() for u in slow]}")
        return out

    def affine(self, expr: UOp) -> tuple[UOp, int] | None:
        """``(base, step)`` when the int ``expr`` is ``base + step*lane`` over the one lane axis (a constant ``step``,
        a ``base`` free of lanes, simplified once), else None. Lane 0 is ``base``."""
        if expr not in self.bases:
            self.bases[expr] = self._base_and_step(expr) if self.depends_on_lanes(expr) else None
        return self.bases[expr]

    def _base_and_step(self, expr: UOp) -> tuple[UOp, int] | None:
        lane = self.lanes[0]
        if len(self.lanes) > 1 or not dtypes.is_int(expr.dtype) or lane.dtype != expr.dtype:
            return None
        step = _stride(expr, lane)
        if step is None:
            return None
        if (minus := self.minus_lane.get(step)) is None:  # -(lane*step), simplified once per step
            minus = self.minus_lane[step] = (-(lane * step)).simplify()
        base = UOp(Ops.ADD, expr.dtype, (expr, minus)).simplify()  # expr - lane*step
        return None if self.depends_on_lanes(base) else (base, step)

    def _affine(self, expr: UOp) -> list[UOp] | None:
        """The lanes of an int ``expr = base + step*lane`` (see ``affine``): each lane's constant folded into
        ``base``."""
        if (affine := self.affine(expr)) is None:
            return None
        base, step = affine
        values = self.lane_values[self.lanes[0]]
        out = [_plus(base, o * step) for o in values]
        if values == list(range(self.count)):  # (a SPREAD's halves repeat values: not one run of addresses)
            self.steps[tuple(out)] = step
        return out

    def whole_vector(self, index: UOp) -> UOp | None:
        """The INDEX of one access to all lanes at once, when ``index``'s address is ``base + lane`` (the lanes fit
        one vector) and its gate, if any, is the same in every lane; else None. The common load or store of a
        vectorized axis, found without building each lane's address. (Not when the lanes take other values than
        0, 1, ..., count-1: a SPREAD's halves, ``plan_spread``.)"""
        if not self.one_vector or (affine := self.affine(index.src[1])) is None or affine[1] != 1 or \
                self.lane_values[self.lanes[0]] != list(range(self.count)):
            return None
        if len(index.src) == 2:
            return index.replace(src=(index.src[0], affine[0]))
        gate = self.per_lane(index.src[2])
        if any(g is not gate[0] for g in gate):
            return None
        return index.replace(src=(index.src[0], affine[0], gate[0]))

    def _substituted(self, expr: UOp) -> list[UOp]:
        """``expr`` with each lane's values substituted, simplified: once per lane."""
        return [expr.substitute({r: UOp.const(r.dtype, self.lane_values[r][i]) for r in self.lanes}).simplify()
                for i in range(self.count)]

    def widen(self, u: UOp) -> UOp:
        if u.dtype.count == self.count:
            return u
        return UOp(Ops.VECTORIZE, u.dtype.vec(self.count), (u,) * self.count)

    def runs(self, idx: list[UOp], gate: list[UOp | None]) -> list[tuple[int, int]]:
        """(first lane, length) of each run of consecutive addresses with one gate."""
        limit = _size(self.lanes[-1])
        if self.steps.get(tuple(idx)) == 1 and (self.masked or all(g is gate[0] for g in gate)):  # affine, step 1
            return _power_of_two_pieces(0, self.count) if self.count <= limit else [
                piece for start in range(0, self.count, limit) for piece in _power_of_two_pieces(start, limit)]
        out: list[tuple[int, int]] = []
        for i in range(self.count):
            if out:
                start, n = out[-1]
                if n < limit and (self.masked or gate[i] is gate[i - 1]) and _difference(idx[i], idx[i - 1]) == 1:
                    out[-1] = (start, n + 1)
                    continue
            out.append((i, 1))
        return [piece for start, n in out for piece in _power_of_two_pieces(start, n)]

    @staticmethod
    def piece_gate(gate: list[UOp | None], start: int, n: int) -> UOp | None:
        """The gate of lanes ``start..start+n``: one for all of them, or a vector of one per lane."""
        lanes = gate[start:start + n]
        if all(g is lanes[0] for g in lanes):
            return lanes[0]
        if any(g is None for g in lanes):  # some lanes ungated: always true
            lanes = [g if g is not None else UOp.const(dtypes.bool, True) for g in lanes]
        return UOp(Ops.VECTORIZE, dtypes.bool.vec(n), tuple(lanes))  # type: ignore[arg-type]

    def looked_up(self, index: UOp) -> bool:
        """Whether ``index`` (an ungated INDEX) is a lookup at a loaded value that differs per lane (a small table
        indexed by each lane's unpacked bits): a gather, on a renderer that has them, instead of one scalar load
        (and one scalar copy of the index arithmetic) per lane."""
        ungated = len(index.src) == 2 or (index.src[2].op is Ops.CONST and index.src[2].arg is True)
        if not ((self.gathers or (self.byte_tables and _byte_table(index.src[0]))) and ungated
                and self.depends_on_lanes(index.src[1])
                and any(u.op is Ops.LOAD for u in index.src[1].toposort)):
            return False
        # lanes at consecutive addresses (a grid row at ``index * 8 + lane``) stay vector loads
        return len(self.runs(self.per_lane(index.src[1]), [None] * self.count)) == self.count

    def uniform_comparison(self, cmp: UOp) -> UOp | None:
        """A comparison of index arithmetic (no loads) that simplifies to the same value in every lane, as that one
        scalar: the bounds of a concatenation's part along an axis the lanes do not cross (``row*16 + lane < 160``
        is ``row < 10`` for lanes 0..15), so its selects take whole vectors instead of comparing lane by lane."""
        if cmp.op not in GroupOp.Comparison or not dtypes.is_int(cmp.src[0].dtype):
            return None
        if any(u.op is Ops.LOAD for u in cmp.toposort):
            return None
        lanes = self.per_lane(cmp)
        first = lanes[0]
        if self.depends_on_lanes(first) or any(x is not first for x in lanes):
            return None
        return first

    def gather(self, load: UOp, index: UOp) -> UOp:
        """A load at ``index`` (expanded: a vector of indices, one per lane; a gate always true dropped)."""
        vector_index = self.widen(index.src[1])
        return UOp(Ops.LOAD, load.dtype.vec(self.count), (index.replace(src=(index.src[0], vector_index)),))

    def row_split(self, index: UOp) -> _RowSplit | None:
        """``(splits, x, w)`` when ``index`` (address and gate) depends on the lanes through ``x // w`` and ``x % w``
        (``splits``: those nodes; one ``x``, one constant ``w``) with ``x = base + lane`` (one lane axis, ``base >= 0``)
        and at most ``w`` lanes: a row piece's form (``row_stores``, ``row_pieces``); ``self.rows[(x, w)]`` is then
        its row and column at lane 0. None for another index. Found once per index, the row and column once per
        ``(x, w)`` (the unrolled copies of a tile, its channels, share their positions)."""
        if index in self.row_splits:
            return self.row_splits[index]
        self.row_splits[index] = None
        splits = frozenset(u for u in index.toposort if u.op in (Ops.IDIV, Ops.MOD) and u.src[1].op is Ops.CONST
                           and self.depends_on_lanes(u.src[0]))
        if not splits or len({(u.src[0], u.src[1].arg) for u in splits}) != 1 or len(self.lanes) > 1:
            return None
        x, w = next(iter(splits)).src[0], next(iter(splits)).src[1].arg
        if not isinstance(w, int) or self.count > w:
            return None
        affine = self.affine(x)
        if affine is None or affine[1] != 1 or affine[0].vmin < 0:
            return None
        if (x, w) not in self.rows:
            self.rows[(x, w)] = ((affine[0] // w).simplify(), (affine[0] % w).simplify())
        self.row_splits[index] = split = (splits, x, w)
        return split

    def row_pieces(self, index: UOp) -> list[UOp] | None:
        """A store index ``f(x // w, x % w)`` (a row ``x // w`` of ``w`` elements, with ``x = base + lane`` and at
        most ``w`` lanes: a flat convolution's positions stored into rows cropped from them) as two INDEXes
        affine in the lane: the lanes in ``base``'s row (``x // w = base // w``, ``x % w = base % w + lane``) and
        those in the next row (``+ 1`` and ``- w``), each gated on its own lanes. Then each is one vector access
        with a gate per lane (whole when every lane is on: most vectors lie within a row) instead of a scattered
        store lane by lane. None when the index is not of that form."""
        if (split := self.row_split(index)) is None:
            return None
        splits, x, w = split
        row, column = self.rows[(x, w)]
        lane = self.lanes[0]
        pieces = []
        for carry, in_piece in ((0, column + lane < w), (1, column + lane >= w)):
            mapping = {u: (row + carry if u.op is Ops.IDIV else column + lane - w * carry) for u in splits}
            gate = in_piece if len(index.src) == 2 else index.src[2].substitute(mapping) & in_piece
            pieces.append(UOp(Ops.INDEX, index.dtype, (index.src[0], index.src[1].substitute(mapping), gate)))
        return pieces

    def load(self, load: UOp) -> UOp:
        index = load.src[0]
        if (whole := self.whole_vector(index)) is not None:
            return UOp(Ops.LOAD, load.dtype.vec(self.count), (whole,))
        buf, idx = index.src[0], self.per_lane(index.src[1])
        gate: list[UOp | None] = list(self.per_lane(index.src[2])) if len(index.src) > 2 else [None] * self.count
        if len(index.src) == 2 and 1 < len(distinct := list(dict.fromkeys(idx))) < self.count:
            return self.repeated_load(load, buf, index, idx, distinct)
        lane_value: list[UOp] = []
        for start, n in self.runs(idx, gate):
            g = self.piece_gate(gate, start, n)
            src = (buf, idx[start]) if g is None else (buf, idx[start], g)
            value = UOp(Ops.LOAD, load.dtype.vec(n) if n > 1 else load.dtype, (UOp(Ops.INDEX, index.dtype, src),))
            lane_value += [value.gep(k) for k in range(n)] if n > 1 else [value]
            if n == self.count:
                return value
        if all(v is lane_value[0] for v in lane_value):
            return self.widen(lane_value[0])
        return UOp(Ops.VECTORIZE, load.dtype.vec(self.count), tuple(lane_value))

    def repeated_load(self, load: UOp, buf: UOp, index: UOp, idx: list[UOp], distinct: list[UOp]) -> UOp:
        """An ungated load whose lanes repeat addresses (a scale per 16 values in lanes of 8: 4 lanes each of two
        bytes): each distinct address read once, in runs of consecutive ones, and the lanes taken from them (a
        shuffle), not each run of lanes loaded again."""
        where: dict[UOp, UOp] = {}
        runs: list[tuple[int, int]] = []
        for i in range(len(distinct)):
            if runs and _difference(distinct[i], distinct[i - 1]) == 1:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((i, 1))
        for start, n in (piece for first, length in runs for piece in _power_of_two_pieces(first, length)):
            at = index.replace(src=(buf, distinct[start]))
            value = UOp(Ops.LOAD, load.dtype.vec(n) if n > 1 else load.dtype, (at,))
            where.update({distinct[start + k]: value.gep(k) if n > 1 else value for k in range(n)})
        return UOp(Ops.VECTORIZE, load.dtype.vec(self.count), tuple(where[i] for i in idx))

    def store(self, store: UOp, value: UOp) -> list[UOp]:
        index = store.src[0]
        if (direct := self.row_stores(index, value)) is not None:  # first: an index split in rows is no whole vector
            return direct
        if (whole := self.whole_vector(index)) is not None:
            return [whole.store(self.widen(value))]
        if (rows := self.row_pieces(index)) is not None:
            out = []
            for piece in rows:
                ranged = self.range_store(piece, value)
                out += [ranged] if ranged is not None else self.lane_store(piece, value)
            return out
        return self.lane_store(index, value)

    def row_stores(self, index: UOp, value: UOp) -> list[UOp] | None:
        """``row_pieces``' two stores, each gated by a range of lanes (``range_gate``), built without analysing each
        piece after the substitution: the address and every gate term are linear in ``x % w`` with coefficient 1
        (checked on their structure), so a piece's address and bounds are those at lane 0, one simplification each.
        None when the index is of another form (then ``row_pieces`` or the store lane by lane)."""
        if not self.masked or not self.one_vector or (split := self.row_split(index)) is None:
            return None
        splits, x, w = split
        mod = next((u for u in splits if u.op is Ops.MOD), None)
        if mod is None or self._lanes_outside(index.src[1], splits) or _coefficient(index.src[1], mod) != 1:
            return None
        row, column = self.rows[(x, w)]
        gate_of = index.src[2] if len(index.src) > 2 else None
        out = []
        pieces: list[tuple[UOp, list[UOp], dict[bool, list[UOp]]]] = []
        for carry in (0, 1):
            at = {u: (row + carry if u.op is Ops.IDIV else column - w * carry) for u in splits}
            key = (gate_of, splits, carry)
            if key not in self.piece_gates:
                self.piece_gates[key] = self._piece_gate(gate_of, splits, mod, at, column, w, carry)
            if (parts := self.piece_gates[key]) is None:
                return None
            scalars, bounds = parts
            gate = self.range_gate(scalars, bounds)
            address = index.src[1].substitute(at).simplify()
            pieces.append((address, scalars, bounds))
            out.append(UOp(Ops.INDEX, index.dtype, (index.src[0], address, gate)).store(self.widen(value)))
        if _spec_enabled():
            self._check_row_stores(index, pieces)
        return out

    def _check_row_stores(self, index: UOp, pieces: list[tuple[UOp, list[UOp], dict[bool, list[UOp]]]]) -> None:
        """``TG_SPEC=1``: in every lane, the two pieces of ``row_stores`` (address, lane-free gates, bounds) store
        where ``index`` does when its gate is on (one piece, never both), and nowhere when it is off."""
        lane = self.lanes[0]
        for k in self.lane_values[lane]:
            at = {lane: UOp.const(lane.dtype, k)}
            on = index.src[2].substitute(at) if len(index.src) > 2 else UOp.const(dtypes.bool, True)
            want = on.where(index.src[1].substitute(at), -1)
            gates = []
            for _, scalars, bounds in pieces:
                g = UOp.const(dtypes.bool, True)
                for t in scalars:
                    g = g & t
                for b in bounds[False]:
                    g = g & (UOp.const(lane.dtype, k) < b)
                for b in bounds[True]:
                    g = g & (b < UOp.const(lane.dtype, k))
                gates.append(g)
            got = gates[0].where(pieces[0][0] + k, gates[1].where(pieces[1][0] + k, -1))
            if not _agree(want, got) or not _agree(gates[0] & gates[1], UOp.const(dtypes.bool, False)):
                raise AssertionError(f"row stores of {index.render()} differ from it in lane {k}")

    def lane_bound(self, term: UOp) -> tuple[UOp | None, bool] | None:
        """``(b, suffix)`` for a gate term ``base + lane < bound`` (``lanes < b``) or its negation (``b < lanes``,
        ``suffix``), ``b`` None when every lane meets it; None for another term. Once per term (the unrolled
        copies of a tile share their padding gates)."""
        if term not in self.lane_bounds:
            self.lane_bounds[term] = None
            suffix = term.op is Ops.CMPNE and term.src[1].op is Ops.CONST and term.src[1].arg is True
            cmp = term.src[0] if suffix else term
            if cmp.op is Ops.CMPLT and not self.depends_on_lanes(cmp.src[1]) and \
                    (affine := self.affine(cmp.src[0])) is not None and affine[1] == 1:
                bound = (cmp.src[1] - affine[0] - (1 if suffix else 0)).simplify()
                every = (bound.vmax < 0) if suffix else (bound.vmin >= self.count)
                self.lane_bounds[term] = (None if every else bound, suffix)
        return self.lane_bounds[term]

    def _piece_gate(self, gate: UOp | None, splits: frozenset[UOp], mod: UOp, at: dict[UOp, UOp], column: UOp, w: int,
                    carry: int) -> _GateParts | None:
        """The lane-free gates and lane bounds of the piece of ``row_stores`` with ``carry`` (``at``: its
        substitution of ``splits``), for the store gate ``gate``; None when a term has no such form."""
        scalars: list[UOp] = []
        bounds: dict[bool, list[UOp]] = {False: [], True: []}  # suffix? -> (lanes < b) or (b < lanes)
        own = (w - column - 1).simplify() if carry else (w - column).simplify()  # the piece's own lanes
        _add_bound(bounds[bool(carry)], own, bool(carry))
        for t in conjuncts(gate) if gate is not None else []:
            suffix = t.op is Ops.CMPNE and t.src[1].op is Ops.CONST and t.src[1].arg is True
            cmp = t.src[0] if suffix else t
            if self._lanes_outside(t, splits):  # a bound on the lanes themselves (a padded tile's)
                if (lane_bound := self.lane_bound(t)) is None:
                    return None
                if lane_bound[0] is not None:
                    _add_bound(bounds[lane_bound[1]], lane_bound[0], lane_bound[1])
                continue
            if mod not in t.toposort:
                scalars.append(t.substitute(at).simplify())
                continue
            if cmp.op is not Ops.CMPLT or mod in cmp.src[1].toposort or _coefficient(cmp.src[0], mod) != 1:
                return None
            bound = (cmp.src[1] - cmp.src[0].substitute(at) - (1 if suffix else 0)).simplify()
            if not ((bound.vmax < 0) if suffix else (bound.vmin >= self.count)):  # else every lane is on
                _add_bound(bounds[suffix], bound, suffix)
        return scalars, bounds

    def _lanes_outside(self, expr: UOp, splits: frozenset[UOp]) -> bool:
        """Whether ``expr`` depends on a lane other than through ``splits``."""
        if expr in splits or not self.depends_on_lanes(expr):
            return False
        return expr in self.lane_set or any(self._lanes_outside(s, splits) for s in expr.src)

    def range_gate(self, scalars: list[UOp], bounds: dict[bool, list[UOp]]) -> UOp:
        """The bool vector of lane-free ``scalars`` (broadcast) and ``lanes < b`` (``bounds[False]``) and
        ``b < lanes`` (``bounds[True]``): a range of lanes from scalar bounds, which a renderer reads as such."""
        lane = self.lanes[0]
        lanes = UOp(Ops.VCONST, lane.dtype.vec(self.count), (), tuple(self.lane_values[lane]))
        parts = [self.widen(g) for g in scalars]
        parts += [UOp(Ops.CMPLT, dtypes.bool.vec(self.count), (self.widen(b), lanes)) for b in bounds[True]]
        parts += [UOp(Ops.CMPLT, dtypes.bool.vec(self.count), (lanes, self.widen(b))) for b in bounds[False]]
        out = parts[0]
        for part in parts[1:]:
            out = out & part
        return out

    def lane_range(self, gate: UOp) -> UOp | None:
        """``gate`` (a conjunction of lane-free bools and bounds ``base + lane < bound`` or ``base + lane >= bound``)
        as one bool vector: the lane-free part broadcast, each bound ``lanes < bound - base`` or
        ``bound - base - 1 < lanes`` (a prefix or a suffix of the lanes: a row piece's). One scalar bound per term,
        simplified once, instead of each lane's gate simplified on its own; a renderer stores such a piece whole
        when the bounds keep every lane (``CRenderer._range_store``, an opmask from one compare on X86). None when
        a term is of no such form."""
        terms, todo = [], [gate]
        while todo:
            t = todo.pop()
            if t.op is Ops.AND and t.dtype == dtypes.bool:
                todo += t.src
            else:
                terms.append(t)
        lane = self.lanes[0]
        lanes = UOp(Ops.VCONST, lane.dtype.vec(self.count), (), tuple(self.lane_values[lane]))
        scalars: list[UOp] = []
        bounds: dict[bool, list[UOp]] = {False: [], True: []}  # suffix? -> bounds (lanes < b, or b < lanes)
        for t in terms:
            if not self.depends_on_lanes(t):
                scalars.append(t)
                continue
            suffix = t.op is Ops.CMPNE and t.src[1].op is Ops.CONST and t.src[1].arg is True
            cmp = t.src[0] if suffix else t
            if cmp.op is not Ops.CMPLT or self.depends_on_lanes(cmp.src[1]):
                return None
            affine = self.affine(cmp.src[0])
            if affine is None or affine[1] != 1 or cmp.src[1].dtype != lane.dtype:
                return None
            bound = (cmp.src[1] - affine[0] - (1 if suffix else 0)).simplify()
            if (bound.vmax < 0) if suffix else (bound.vmin >= self.count):
                continue  # every lane is on
            kept = bounds[suffix]
            for i, other in enumerate(kept):  # of two bounds a constant apart only the tighter one counts
                if (d := _difference(bound, other)) is not None:
                    kept[i] = other if (d <= 0) == suffix else bound
                    break
            else:
                kept.append(bound)
        parts = [self.widen(g) for g in scalars]
        parts += [UOp(Ops.CMPLT, dtypes.bool.vec(self.count), (self.widen(b), lanes)) for b in bounds[True]]
        parts += [UOp(Ops.CMPLT, dtypes.bool.vec(self.count), (lanes, self.widen(b))) for b in bounds[False]]
        if not parts:
            return None
        out = parts[0]
        for part in parts[1:]:
            out = out & part
        return out

    def range_store(self, index: UOp, value: UOp) -> UOp | None:
        """The store of ``value`` at a row piece ``index`` (``row_pieces``) as one vector store gated by a range of
        lanes (``lane_range``); None when the lanes do not fit one vector or the gate has no such form."""
        if not self.masked or not self.one_vector:
            return None
        affine = self.affine(index.src[1])
        if affine is None or affine[1] != 1 or (gate := self.lane_range(index.src[2])) is None:
            return None
        return UOp(Ops.INDEX, index.dtype, (index.src[0], affine[0], gate)).store(self.widen(value))

    def lane_store(self, index: UOp, value: UOp) -> list[UOp]:
        """The store of ``value`` at ``index`` with each lane's address and gate: one store per run of consecutive
        addresses (with one gate, or a gate per lane on a renderer with masked vectors)."""
        buf, idx = index.src[0], self.per_lane(index.src[1])
        gate: list[UOp | None] = list(self.per_lane(index.src[2])) if len(index.src) > 2 else [None] * self.count
        value = self.widen(value)
        out = []
        for start, n in self.runs(idx, gate):
            part = value if n == self.count else value.gep(*range(start, start + n))
            g = self.piece_gate(gate, start, n)
            src = (buf, idx[start]) if g is None else (buf, idx[start], g)
            out.append(UOp(Ops.INDEX, index.dtype, src).store(part))
        return out

    def expand(self, ast: UOp) -> UOp:
        """``ast`` with its lanes expanded (``self.expanded``: each node's expanded form, for a later pass)."""
        new: dict[UOp, UOp] = {}
        self.expanded = new
        lane_dependent: dict[UOp, bool] = {}
        for n in ast.toposort:
            lane_dependent[n] = n in self.lane_set or any(lane_dependent[s] for s in n.src)
            if n.op is Ops.SINK:
                srcs: list[UOp] = []
                for s in n.src:
                    srcs += new[s].src if new[s].op is Ops.GROUP else [new[s]]
                new[n] = n.replace(src=tuple(srcs))
                continue
            if n in self.lane_set:
                new[n] = UOp(Ops.VCONST, n.dtype.vec(self.count), (), tuple(self.lane_values[n]))
                continue
            if n.op in (Ops.INDEX, Ops.RANGE) or not lane_dependent[n]:
                src = tuple(new[s] for s in n.src)  # sources may have changed (a reduction over the lanes)
                new[n] = n if src == n.src else n.replace(src=src)
                continue
            if n.op is Ops.LOAD and self.looked_up(n.src[0]):
                new[n] = self.gather(n, new[n.src[0]])
            elif n.op is Ops.LOAD:
                new[n] = self.load(n)
            elif n.op is Ops.STORE:
                stores = self.store(n, new[n.src[1]])
                new[n] = stores[0] if len(stores) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(stores))
            elif (uniform := self.uniform_comparison(n)) is not None:
                new[n] = uniform
                lane_dependent[n] = False
            elif n.op is Ops.REDUCE and any(r in self.lane_set for r in n.src[1:]):
                # a reduction over the lanes: vector accumulator, then the lanes combined
                value = self.widen(new[n.src[0]])
                rest = tuple(r for r in n.src[1:] if r not in self.lane_set)
                acc = UOp(Ops.REDUCE, value.dtype, (value, *rest), n.arg) if rest else value.from_identity(n.arg)
                lanes = [acc.gep(i) for i in range(self.count)]
                while len(lanes) > 1:
                    lanes = [lanes[i].alu(n.arg, lanes[i + 1]) if i + 1 < len(lanes) else lanes[i]
                             for i in range(0, len(lanes), 2)]
                new[n] = lanes[0]
                lane_dependent[n] = False
            elif n.op is Ops.REDUCE:
                value = self.widen(new[n.src[0]])
                new[n] = UOp(Ops.REDUCE, value.dtype, (value, *n.src[1:]), n.arg)
            else:
                srcs_ = tuple(self.widen(new[s]) for s in n.src)
                new[n] = UOp(n.op, n.dtype.vec(self.count), srcs_, n.arg)
        return new[ast]


def _power_of_two_pieces(start: int, n: int) -> list[tuple[int, int]]:
    """Split a run into runs of 4, 2, 1... lanes (vector types have power-of-two lengths)."""
    pieces = []
    while n:
        k = 1 << (n.bit_length() - 1)
        pieces.append((start, k))
        start, n = start + k, n - k
    return pieces


def unroll(ast: UOp, lane: UOp) -> UOp:
    """One copy of the kernel's stores per value of ``lane`` (work shared by the copies stays shared); for a
    reduced ``lane``, one copy of each reduction over it (``_unroll_reduce``)."""
    if any(u.op is Ops.REDUCE and lane in u.src[1:] for u in ast.toposort):
        return _unroll_reduce(ast, lane)
    copies = [ast.substitute({lane: UOp.const(lane.dtype, i)}) for i in range(_size(lane))]
    # simplified together: the work the copies share is walked once, not once per copy
    stores = UOp.sink(*(s for c in copies for s in c.src)).simplify().src
    return UOp.sink(*dict.fromkeys(stores))


def _unroll_reduce(ast: UOp, lane: UOp) -> UOp:
    """Each reduction over ``lane`` as one reduction per value of ``lane`` over the other ranges (a copy of the loop
    body and an accumulator each), combined after the loop."""
    new: dict[UOp, UOp] = {}
    for n in ast.toposort:
        src = tuple(new[s] for s in n.src)
        m = n if src == n.src else n.replace(src=src)
        if m.op is Ops.REDUCE and lane in m.src[1:]:
            rest = tuple(r for r in m.src[1:] if r is not lane)
            copies = [m.src[0].substitute({lane: UOp.const(lane.dtype, i)}) for i in range(_size(lane))]
            parts = [UOp(Ops.REDUCE, m.dtype, (c, *rest), m.arg) if rest else c for c in copies]
            m = parts[0] if rest else parts[0].from_identity(n.arg)
            for p in parts[1:]:
                m = m.alu(n.arg, p)
        new[n] = m
    return new[ast].simplify()

"""Quantization blocks in a reduction, as ``optimize.apply_opts`` applies them (BLOCK and SPREAD records).

In:  a kernel SINK in REDUCE form whose reduced range a quantized format divides into blocks (and super-blocks).
Out: ``split_blocks`` (block and in-block loops), ``factor_blocks`` (factors constant over a block leave the block's
     sum: the scales multiply a block's partial sum, not every element), ``plan_spread`` / ``spread_block_factors``
     (a super-block's sub-blocks unrolled, their packed factors unpacked once per super-block as vectors whose lanes
     the sub-blocks take).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from tgcore.codegen.upcast import _Expander, _size, _split_ranges
from tgcore.dtype import dtypes
from tgcore.helpers import prod
from tgcore.uop import GroupOp, Ops, RangeKind, SplitPart, UOp


def split_blocks(ast: UOp, sizes: Mapping[UOp, int]) -> tuple[UOp, dict[UOp, UOp]]:
    """Split each reduce range ``r`` in ``sizes`` into ``r = block * k + inner`` (``k = sizes[r]``: a quantization
    block, when ``r`` walks a quantized row): what depends on the block only (its scales) is then computed once per
    block in the outer loop, not once per step of the inner one. Returns the kernel and each new block range's
    in-block range."""
    mapping: dict[UOp, UOp] = {}
    parts: dict[UOp, tuple[UOp, UOp]] = {}
    for r, k in sizes.items():
        size = _size(r)
        block = UOp.range(size // k, replace(r.arg, parts=(*r.arg.parts, SplitPart.BLOCK)), dtype=r.dtype)
        inner = UOp.range(k, replace(r.arg, parts=(*r.arg.parts, SplitPart.IN_BLOCK)), dtype=r.dtype)
        mapping[r], parts[r] = block * k + inner, (block, inner)
    return _split_ranges(ast, mapping, parts).simplify(), dict(parts.values())


def block_divisors(ast: UOp, r: UOp) -> list[int]:
    """The constants ``k`` the kernel divides range ``r`` by (``r // k``) that split it into whole blocks."""
    size = _size(r)
    return sorted({u.src[1].arg for u in ast.toposort if u.op is Ops.IDIV and u.src[0] is r
                   and u.src[1].op is Ops.CONST and 1 < u.src[1].arg < size and size % u.src[1].arg == 0})


MAX_MONOMIALS = 8  # a reduced value expanded into more products than this is left alone


def _monomials(u: UOp) -> list[list[UOp]] | None:
    """``u`` as a sum of products (lists of factors), distributing multiplication over addition; None when that
    takes more than MAX_MONOMIALS products."""
    if u.op is Ops.ADD:
        a, b = _monomials(u.src[0]), _monomials(u.src[1])
        out = None if a is None or b is None else a + b
    elif u.op is Ops.MUL:
        a, b = _monomials(u.src[0]), _monomials(u.src[1])
        out = None if a is None or b is None else [x + y for x in a for y in b]
    else:
        out = [[u]]
    return out if out is None or len(out) <= MAX_MONOMIALS else None


def _product(factors: list[UOp], like: UOp) -> UOp:
    return prod(factors[1:], factors[0]) if factors else like.const_like(1)


EXACT_FLOAT_INT = 1 << 24  # integers up to this size are exact in float32, so are sums that stay below it


def _terms(u: UOp) -> list[UOp]:
    return [t for s in u.src for t in _terms(s)] if u.op is Ops.ADD else [u]


def _exact_int(term: UOp, trips: int) -> UOp | None:
    """The integer whose float32 conversion ``term`` is, when a sum of ``trips`` of them is exact in float32."""
    value = term.src[0] if term.op is Ops.CAST else None
    if (value is None or term.dtype is not dtypes.float32 or not dtypes.is_int(value.dtype) or trips <= 0
            or max(abs(value.vmin), abs(value.vmax)) * trips > EXACT_FLOAT_INT):
        return None
    return value.cast(dtypes.int32)


def _int_parts(value: UOp) -> list[tuple[UOp, int]]:
    """An integer value as ``(term, constant factor)`` pairs of its sum: ``u * x + x * -8`` ->
    ``[(u * x, 1), (x, -8)]`` (a constant factor leaves the in-block sum, so the term can stay a dot of bytes)."""
    out = []
    for t in _terms(value):
        c = next((s for s in t.src if s.op is Ops.CONST), None) if t.op is Ops.MUL else None
        other = next((s for s in t.src if s is not c), None) if c is not None else None
        out.append((t, 1) if c is None or other is None else (other, int(c.arg)))
    return out


def _repeated(term: UOp, i: UOp) -> UOp:
    """The sum over the in-block range ``i`` of ``term``, which does not depend on it (a block's offset ``m_b`` that
    no element multiplies): ``term * size``. Not a loop: a sum whose value depends on no open range would get its
    accumulator set to zero once, outside the block loop that holds its in-block loop, and add up every block's."""
    return (term * term.const_like(_size(i))).simplify()  # (a count alone, 1 * size, is a constant)


def _int_block_sum(term: UOp, i: UOp) -> UOp:
    """The int32 sum of ``term`` over the in-block range ``i``: a loop, or for a term that does not depend on it (an
    offset per block added to each of its products: ``tg_gguf.grid_lanes``) ``_repeated``'s product."""
    return UOp(Ops.REDUCE, dtypes.int32, (term, i), Ops.ADD) if i in term.toposort else _repeated(term, i)


def _block_sum(total: UOp, i: UOp) -> UOp:
    """The sum of ``total`` over the in-block range ``i``. Each float conversion of an integer in it (a quantized
    weight's integer times a quantized activation) is summed as integers and converted once: exact, because every
    partial sum of at most ``EXACT_FLOAT_INT`` in size is exact in float32 in any order. Each product of such an
    integer is a loop of its own (one product per accumulator), which the C compiler turns into multiply-adds of
    bytes (``vpdpbusd``); the sums of one conversion (``float(u * x - 8 * x)``: a weight's signed integers as
    unsigned bytes and an offset) are added as integers before their one conversion."""
    sums: list[UOp] = []
    rest: list[UOp] = []
    for term in _terms(total):
        if i not in term.toposort:
            sums.append(_repeated(term, i))
            continue
        value = _exact_int(term, _size(i))
        if value is None:
            rest.append(term)
            continue
        parts = [_int_block_sum(t, i) * c if c != 1 else _int_block_sum(t, i) for t, c in _int_parts(value)]
        sums.append(sum(parts[1:], parts[0]).cast(total.dtype))
    if rest:
        sums.append(UOp(Ops.REDUCE, total.dtype, (sum(rest[1:], rest[0]), i), Ops.ADD))
    return sum(sums[1:], sums[0])


def _integer_sum(u: UOp) -> bool:
    """Whether ``u`` is the float conversion of an integer block sum (a byte dot product's, from ``_block_sum``)."""
    return u.op is Ops.CAST and u.src[0].op is Ops.REDUCE and dtypes.is_int(u.src[0].dtype)


def _in_lanes(u: UOp) -> bool:
    """Whether ``u`` varies along a lane axis (a vector of its own after expansion: a per-16 scale)."""
    return any(r.op is Ops.RANGE and r.arg.kind is RangeKind.UPCAST for r in u.toposort)


def _factors_together(varying: list[UOp]) -> list[UOp]:
    """A sum over sub-blocks' products: each inner block sum (a nested REDUCE) times the product of its other
    factors (a sub-block's scale and its activation block's scale), multiplied together first: ``sum * (a * b)``,
    not ``(sum * a) * b``. SPREAD then unpacks the product ``a * b`` for all sub-blocks at once as one vector, and
    each sub-block adds its sum times one lane of it (one multiply-add instead of a multiply and a multiply-add)."""
    sums = [f for f in varying if any(x.op is Ops.REDUCE for x in f.toposort)]
    others = [f for f in varying if not any(x.op is Ops.REDUCE for x in f.toposort)]
    if not sums or len(others) < 2:
        return varying
    return [*sums, _product(others, others[0])]


def _count_first(count: UOp, outside: list[UOp]) -> list[UOp]:
    """The factors of a block's repeated offset (``m_b`` times the block's activation sum, counted ``size`` times:
    ``_repeated``), the count first with the factors in lanes (a weight row's offset), then the others (a batch row's
    activation sum): ``(m * 32) * s`` is one product per block shared by every unrolled batch row, and one multiply
    per row, where ``(s * m) * 32`` took two per row. A power-of-two count (the only one taken) scales exactly either
    way."""
    lanes = [f for f in outside if _in_lanes(f)]
    return [*lanes, count, *(f for f in outside if not _in_lanes(f))] if lanes else [*outside, count]


def _power_of_two(n: object) -> bool:
    """Whether ``n`` (a constant's value, maybe a float) is a positive power of two."""
    return isinstance(n, (int, float)) and n > 0 and float(n).is_integer() and int(n) & (int(n) - 1) == 0


def factor_blocks(ast: UOp, inner: dict[UOp, UOp]) -> UOp:
    """Factors that do not change inside a quantization block move out of the block's sum:
    ``sum_{b,i} (d_b * q_bi + m_b) * x_bi  ->  sum_b d_b * sum_i q_bi * x_bi + m_b * sum_i x_bi`` (``inner``:
    block range -> its in-block range, from ``split_blocks``). The in-block sums are reductions of their own
    inside the block loop, so the per-element work loses the dequantization's multiply-add; the sums over
    ``x`` are shared by every output row. Only float and int ADD reductions; a value that does not split into
    a few products, or whose products all depend on the in-block index, is left alone."""
    def rewrite(red: UOp) -> UOp | None:
        i = next((inner[r] for r in red.src[1:] if r in inner), None)
        if red.arg is not Ops.ADD or i is None or i not in red.src[1:]:
            return None
        terms = _monomials(red.src[0])
        if terms is None:
            return None
        groups: dict[tuple[UOp, ...], list[UOp]] = {}
        for factors in terms:
            constant: list[UOp] = []  # the factors that do not depend on the in-block index
            varying: list[UOp] = []
            for f in factors:
                (varying if i in f.toposort else constant).append(f)
            groups.setdefault(tuple(constant), []).append(_product(_factors_together(varying), red.src[0]))
        if all(not outside for outside in groups) and not any(u.op is Ops.REDUCE for u in red.src[0].toposort):
            return None  # (a sum of an inner level's block sums is nested all the same: its siblings are)
        # an integer block sum (a byte dot) is multiplied by its factors in their order (``(sum * a) * b``): a
        # product shared by several unrolled copies (an activation block's sum times its scale, the same for every
        # weight row) is computed once, and each copy adds only its own factor (one vector multiply-add instead of
        # a scalar product broadcast into lanes); with a factor that varies along the lanes (a per-16 scale) that
        # order was slower, so there, and for float block sums, the factors come first
        parts = []
        for outside, insides in groups.items():
            inside = _block_sum(sum(insides[1:], insides[0]), i)
            if inside.op is Ops.CONST and _power_of_two(inside.arg):  # a block's count: see ``_count_first``
                parts.append(_product(_count_first(inside, list(outside)), red.src[0]))
                continue
            first = _integer_sum(inside) and not any(_in_lanes(f) for f in outside)
            parts.append(_product([inside, *outside] if first else [*outside, inside], red.src[0]))
        ranges = tuple(r for r in red.src[1:] if r is not i)
        # one accumulator for the products (a float one adds them in turn: ``accumulate.in_turn``)
        return UOp(Ops.REDUCE, red.dtype, (sum(parts[1:], parts[0]), *ranges), red.arg)

    new: dict[UOp, UOp] = {}
    for n in ast.toposort:
        src = tuple(new[s] for s in n.src)
        m = n if src == n.src else n.replace(src=src)
        r = rewrite(m) if m.op is Ops.REDUCE else None
        new[n] = r if r is not None else m
    return new[ast]


def _computed(u: UOp) -> bool:
    """Whether ``u`` computes on what it loads (bits unpacked, a conversion), not only loads it (a plain load of one
    value per sub-block is a broadcast from memory already)."""
    return u.op is not Ops.LOAD and (u.op in GroupOp.ALU or any(_computed(s) for s in u.src))


def _spread_factors(value: UOp, j: UOp) -> list[UOp]:
    """The factors in ``value`` (a sum over the sub-block loop ``j``, outside its nested in-block sums, before the
    lanes are expanded) that depend on ``j`` and are computed from memory (``_computed``), and on no nested sum: a
    sub-block's scale unpacked from its super-block's bytes (maybe one per half of the lanes: per 16 values)."""
    found: list[UOp] = []
    seen: set[UOp] = set()

    def spreadable(u: UOp) -> bool:
        nodes = u.toposort
        # (an address is no factor: a table value's INDEX, spread, became a vector of pointers no renderer loads;
        # its index arithmetic below it is one)
        return (u.op is not Ops.INDEX and u.dtype.count == 1 and j in nodes and any(x.op is Ops.LOAD for x in nodes)
                and _computed(u) and not any(x.op is Ops.REDUCE for x in nodes))

    def walk(u: UOp) -> None:
        if u in seen or u.op is Ops.REDUCE:
            return
        seen.add(u)
        if spreadable(u):
            found.append(u)
            return
        for s in u.src:
            walk(s)
    walk(value)
    return found


WRAPPING = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.SHL)  # byte ops whose int32 result is taken mod 256


def _bytes_as_int32(u: UOp) -> UOp:
    """``u`` with its byte arithmetic done in int32 (the same values: results of wrapping ops taken mod 256). A
    vector of bytes is then shifted and masked in 32-bit lanes, which x86 has (a byte shift is three ops)."""
    new: dict[UOp, UOp] = {}
    for n in u.toposort:
        src = tuple(new[s] for s in n.src)
        widened = any(s.dtype is dtypes.int32 and o.dtype is dtypes.uint8 for s, o in zip(src, n.src, strict=True))
        if n.op in GroupOp.ALU and (n.dtype is dtypes.uint8 or widened):
            src = tuple(s.cast(dtypes.int32) if s.dtype is dtypes.uint8 else s for s in src)
            m = UOp(n.op, dtypes.int32 if n.dtype is dtypes.uint8 else n.dtype, src, n.arg)
            new[n] = m & 255 if n.op in WRAPPING and n.dtype is dtypes.uint8 else m
        elif n.op is Ops.CAST and n.src[0].dtype is dtypes.uint8 and src[0].dtype is dtypes.int32:
            new[n] = src[0].cast(n.dtype)
        else:
            new[n] = n if src == n.src else n.replace(src=src)
    return new[u]


def _half_lanes(f: UOp, lane: UOp) -> bool:
    """Whether ``f`` has one value in each half of ``lane``'s values (a scale per 16 values in lanes of 4)."""
    values = _Expander([lane]).per_lane(f)
    half = len(values) // 2
    return all(v is values[0] for v in values[:half]) and all(v is values[half] for v in values[half:])


SpreadPlan = dict[UOp, list[tuple[UOp, UOp]]]  # a factor -> per sub-block: (its value, its value in every lane)


def plan_spread(ast: UOp, j: UOp) -> SpreadPlan:
    """For the sums over the sub-block loop ``j`` (the blocks inside a super-block: a K-quant's 8 sub-blocks of
    32), before the lanes are expanded: each factor that changes from sub-block to sub-block but not inside one
    (``_spread_factors``) computed for all sub-blocks at once, as vectors whose lanes the sub-blocks take
    (``spread_block_factors`` puts them in). With as many sub-blocks as lanes, two vectors each holding half of the
    sub-blocks twice (``[0, 1, 2, 3, 0, 1, 2, 3]``), so a sub-block's value in every lane is a permute inside each
    half of the vector (one instruction on AVX, two across the halves); a factor with one value per half of the
    lanes (per 16 values: Q2_K, Q3_K, Q6_K) holds the first half's values in the vector's first half and the
    second's in its second. Other factors that depend on the lanes stay as they are."""
    n = _size(j)
    lane = next((r for r in ast.toposort if r.op is Ops.RANGE and r.arg.kind is RangeKind.UPCAST), None)
    halves = lane is not None and _size(lane) == n and n % 2 == 0
    half = n // 2 if halves else n
    plan: SpreadPlan = {}
    for red in ast.toposort:
        if red.op is not Ops.REDUCE or red.arg is not Ops.ADD or red.src[1:] != (j,):
            continue
        for f in _spread_factors(red.src[0], j):
            per_lane = lane if lane is not None and lane in f.toposort else None
            if f in plan or (per_lane is not None and not (halves and _half_lanes(f, per_lane))):
                continue
            wide = _bytes_as_int32(f)
            plan[f] = []
            for h in range(n // half):
                expander = _Expander([j] if per_lane is None else [j, per_lane])
                expander.count = n
                expander.lane_values[j] = [h * half + i for i in range(half)] * (n // half)
                if per_lane is not None:  # lane k * half of the lanes' halves: one value per half
                    expander.lane_values[per_lane] = [k * half for k in range(n // half) for _ in range(half)]
                vector = expander.expand(wide)
                for i in range(half):
                    every = vector.gep(*[i] * half, *[i + half] * half) if halves else vector.gep(*[i] * n)
                    plan[f].append((vector.gep(i), every))
    return plan


def spread_block_factors(ast: UOp, j: UOp, plan: SpreadPlan, expanded: Mapping[UOp, UOp]) -> UOp:
    """Each sum over the sub-block loop ``j`` unrolled, after the lanes were expanded (``expanded``: each node's
    expanded form), each copy taking its sub-block's lanes of the vectors ``plan_spread`` made: the scales'
    unpacking is vector work once per super-block instead of scalar work per sub-block. The copies' products are
    added in ``j``'s order, one after the other (as the loop added them)."""
    n = _size(j)
    new: dict[UOp, UOp] = {}
    for u in ast.toposort:
        src = tuple(new[s] for s in u.src)
        m = u if src == u.src else u.replace(src=src)
        if m.op is Ops.REDUCE and m.arg is Ops.ADD and m.src[1:] == (j,):
            taken: list[dict[UOp, UOp]] = [{} for _ in range(n)]
            nodes = m.src[0].toposort
            for f, values in plan.items():
                e = expanded.get(f, f)
                if e not in nodes:
                    continue
                broadcasts = [b for b in nodes if b.op is Ops.VECTORIZE and all(s is e for s in b.src)]
                for c, (value, every) in enumerate(values):
                    if e.dtype.count == 1:
                        taken[c][e] = value
                        taken[c].update({b: every for b in broadcasts if b.dtype == every.dtype})
                    elif e.dtype == every.dtype:
                        taken[c][e] = every
            total: UOp | None = None
            for c in range(n):
                copy = m.src[0].substitute({**taken[c], j: UOp.const(j.dtype, c)})
                for term in _terms(copy):
                    total = term.from_identity(Ops.ADD) if total is None else total + term
            assert total is not None
            m = total
        new[u] = m
    return new[ast].simplify()

"""Symbolic simplification: constant folding, identities, index arithmetic, range-decided comparisons.

In:  UOp graphs of ALU ops over constants, DEFINE_VARs, RANGEs, SPECIALs, loads, ...
Out: rule tables (PatternMatchers) for graph_rewrite: `symbolic_simple` (folding and identities) and
     `symbolic` (that, plus term collection, div/mod folding and comparison rewriting).

Semantics every rule preserves: integers wrap around in their dtype, `//` truncates toward zero and
`%` has the dividend's sign (C). Float rules are exact (no reassociation, x*0 is not folded). Rules
that reason about values (div/mod splitting, comparisons) first prove with `vmin`/`vmax` that the
sum they look at cannot wrap, so they are sound even near the dtype's limits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from tgcore.dtype import DType, dtypes
from tgcore.uop.alu import UndefinedOp, bitcast_value, cast_value, exec_alu
from tgcore.uop.bounds import dtype_bounds
from tgcore.uop.ops import GroupOp, Ops
from tgcore.uop.pattern import PatternMatcher, UPat
from tgcore.uop.uop import UOp

INTS = frozenset(dt for dt in dtypes.fields().values() if dtypes.is_int(dt))
INTS_BOOL = INTS | {dtypes.bool}
FLOATS = frozenset(dt for dt in dtypes.fields().values() if dtypes.is_float(dt))
MAX_TERMS = 256  # longer sums are left as they are (term collection is linear per node)

x, y, z = UPat.var("x"), UPat.var("y"), UPat.var("z")
ix, iy = UPat.var("x", INTS), UPat.var("y", INTS)
c1, c2 = UPat.cvar("c1"), UPat.cvar("c2")
cond = UPat.var("cond", dtypes.bool)


# ------------------------------------------------------------------------------------------------ folding

def fold_alu(x: UOp) -> UOp | None:
    """An ALU op whose sources are all constants becomes a constant."""
    if x.dtype.count != 1:
        return None
    try:
        value = exec_alu(x.op, x.dtype, tuple(s.arg for s in x.src))
    except (UndefinedOp, NotImplementedError):
        return None
    return x.const_like(value)


def fold_cast(x: UOp, c1: UOp) -> UOp | None:
    if x.dtype.count != 1:
        return None
    try:
        return x.const_like(cast_value(c1.arg, x.dtype))
    except (UndefinedOp, NotImplementedError):
        return None


def fold_bitcast(x: UOp, c1: UOp) -> UOp | None:
    if x.dtype.count != 1:
        return None
    try:
        return x.const_like(bitcast_value(c1.arg, c1.dtype, x.dtype))
    except (UndefinedOp, NotImplementedError):
        return None


def fold_by_range(x: UOp) -> UOp | None:
    """An integer or bool op whose range analysis pins it to one value becomes that constant."""
    lo, hi = x._min_max
    return x.const_like(lo) if lo == hi and x.dtype.count == 1 else None


def and_keeps(x: UOp, c1: UOp) -> UOp | None:
    """x & m -> x when x is never negative and m has every bit up to x's highest possible one."""
    if x.vmin < 0:
        return None
    low = (1 << int(x.vmax).bit_length()) - 1
    return x if c1.arg & low == low else None


def _all_ones(dtype: DType) -> int:
    """The constant with every bit set: -1 for signed ints, the maximum for unsigned ones."""
    return -1 if dtype_bounds(dtype)[0] < 0 else dtype_bounds(dtype)[1]


# ------------------------------------------------------------------------------------------------ sums

def _split_sum(u: UOp) -> tuple[list[tuple[UOp, int]], int] | None:
    """u as sum(base * coeff) + const, by flattening nested ADDs; None when too long."""
    terms: list[tuple[UOp, int]] = []
    const: int = 0
    stack = [u]
    while stack:
        n = stack.pop()
        if n.op is Ops.ADD:
            stack.append(n.src[1])
            stack.append(n.src[0])
        elif n.op is Ops.CONST:
            const += int(n.arg)
        elif n.op is Ops.MUL and n.src[1].op is Ops.CONST:
            terms.append((n.src[0], n.src[1].arg))
        else:
            terms.append((n, 1))
        if len(terms) > MAX_TERMS:
            return None
    return terms, const


def _build_sum(dtype: DType, terms: list[tuple[UOp, int]], const: int) -> UOp:
    out: UOp | None = None
    for base, coeff in terms:
        if coeff == 0:
            continue
        term = base if coeff == 1 else UOp(Ops.MUL, dtype, (base, UOp.const(dtype, coeff)))
        out = term if out is None else UOp(Ops.ADD, dtype, (out, term))
    if out is None:
        return UOp.const(dtype, const)
    return out if const == 0 else UOp(Ops.ADD, dtype, (out, UOp.const(dtype, const)))


def _exact_bounds(terms: list[tuple[UOp, int]], const: int) -> tuple[int, int]:
    """Bounds of the mathematical (unwrapped) value of sum(base * coeff) + const."""
    lo = hi = const
    for base, coeff in terms:
        a, b = coeff * int(base.vmin), coeff * int(base.vmax)
        lo, hi = lo + min(a, b), hi + max(a, b)
    return lo, hi


def _fits(dtype: DType, lo: int, hi: int) -> bool:
    full = dtype_bounds(dtype)
    return full[0] <= lo and hi <= full[1]


_TOO_MANY: frozenset = frozenset({None})  # marks sums too long to collect (shares no base with anything)


def _term_bases(u: UOp) -> frozenset[UOp]:
    """The bases of the terms of the sum u (cached on the node; sources are always asked first)."""
    d = u.__dict__
    found = d.get("_bases")
    if found is None:
        if u.op is Ops.ADD:
            a, b = _term_bases(u.src[0]), _term_bases(u.src[1])
            found = _TOO_MANY if a is _TOO_MANY or b is _TOO_MANY or len(a) + len(b) > MAX_TERMS else a | b
        elif u.op is Ops.CONST:
            found = frozenset()
        elif u.op is Ops.MUL and u.src[1].op is Ops.CONST:
            found = frozenset((u.src[0],))
        else:
            found = frozenset((u,))
        d["_bases"] = found
    return found


def merge_terms(x: UOp) -> UOp | None:
    """Merge the terms of a sum, also deep inside it: x*a + ... + x*b -> x*(a+b) (terms that share a base), and
    (a//c)*(c*m) + (a%c)*m -> a*m for a constant c > 0 (see ``_recombine_divmod``). The sources are already
    merged inside, so only a base in both sources, or a div/mod pair with a member in each, can change."""
    left, right = _term_bases(x.src[0]), _term_bases(x.src[1])
    if not (left & right):
        if left is _TOO_MANY or right is _TOO_MANY:
            return None
        small, big = (left, right) if len(left) <= len(right) else (right, left)
        for b in small:  # a div/mod pair across the sources?
            if (b.op is Ops.IDIV or b.op is Ops.MOD) and _divmod_partner(b, big) is not None:
                break
        else:
            return None
    split = _split_sum(x)
    if split is None:
        return None
    terms, const = split
    merged: dict[UOp, int] = {}
    for base, coeff in terms:
        merged[base] = merged.get(base, 0) + coeff
    recombined = _recombine_divmod(x.dtype, merged, const)
    if recombined is not None:
        return _build_sum(x.dtype, *recombined)
    if len(merged) == len(terms):
        return None
    return _build_sum(x.dtype, list(merged.items()), const)


def _recombine_divmod(dtype: DType, merged: dict[UOp, int], const: int) -> tuple[list[tuple[UOp, int]], int] | None:
    """The terms and constant of a sum (merged: base -> coefficient) after (a//c)*(c*m) + (a%c)*m -> a*m; None
    when no pair's coefficients agree. In C, a == (a//c)*c + a%c for every a (truncation, any sign), and
    wrapping * and + form a ring, so no bound is needed and the coefficients only have to agree modulo
    2**bits. The terms of a (when a is a sum) take the place of a//c."""
    pairs = _agreeing_pairs(merged, 1 << (8 * dtype.itemsize))
    if not pairs:
        return None
    dropped = set(pairs.values())
    out: dict[UOp, int] = {}
    for base, coeff in merged.items():
        if base in pairs:
            m = merged[pairs[base]]
            a = base.src[0]
            inner = _split_sum(a)
            for b, c in inner[0] if inner is not None else [(a, 1)]:
                out[b] = out.get(b, 0) + c * m
            const += inner[1] * m if inner is not None else 0
        elif base not in dropped:
            out[base] = out.get(base, 0) + coeff
    return list(out.items()), const


def _agreeing_pairs(terms: dict[UOp, int], ring: int) -> dict[UOp, UOp]:
    """The div/mod pairs of a sum's terms (base -> coefficient) that recombine: a // c -> a % c when the
    coefficient of a // c is c times that of a % c, modulo ``ring`` (2**bits)."""
    pairs: dict[UOp, UOp] = {}
    for q, coeff in terms.items():
        r = _divmod_partner(q, terms) if q.op is Ops.IDIV else None
        if r is not None and (coeff - terms[r] * q.src[1].arg) % ring == 0:
            pairs[q] = r
    return pairs


def _divmod_partner(b: UOp, bases: Iterable[UOp]) -> UOp | None:
    """For b = a // c (a % c) with a constant c > 0: a % c (a // c) when it is among bases, else None."""
    if b.op is Ops.IDIV:
        other = Ops.MOD
    elif b.op is Ops.MOD:
        other = Ops.IDIV
    else:
        return None
    if b.src[1].op is not Ops.CONST or b.src[1].arg <= 0:
        return None
    for o in bases:
        if o.op is other and o.src == b.src:
            return o
    return None


# ------------------------------------------------------------------------------------------------ div/mod

def _divmod_result(op: Ops, dtype: DType, quotient: UOp, rest: UOp, d: int) -> UOp:
    if op is Ops.IDIV:
        return quotient + (rest // d)
    return rest % d


def fold_divmod(x: UOp, c1: UOp, op: Ops) -> UOp | None:
    """x // d and x % d for a positive constant d, by splitting the sum x (see the cases below)."""
    d = c1.arg
    if d <= 0:
        return None
    split = _split_sum(x)
    if split is None:
        return None
    terms, const = split
    lo, hi = _exact_bounds(terms, const)
    if not _fits(x.dtype, lo, hi):
        return None  # x may wrap around; its value is not the sum we see
    dtype = x.dtype
    # common factor: (g*y) // (g*e) -> y // e and (g*y) % (g*e) -> (y % e) * g, for any sign of y
    g = math.gcd(d, const, *(c for _, c in terms))
    if g > 1:
        reduced = _build_sum(dtype, [(b, c // g) for b, c in terms], const // g)
        return reduced // (d // g) if op is Ops.IDIV else (reduced % (d // g)) * g
    if lo < 0:
        return None  # below, floor and truncation differ
    # whole multiples: (a*d*k + rest) // d -> a*k + rest // d when 0 <= rest
    moved, kept = [], []
    for base, coeff in terms:
        if coeff >= d:
            moved.append((base, coeff // d))
            kept.append((base, coeff % d))
        else:
            kept.append((base, coeff))
    const_q, const_r = (const // d, const % d) if const >= d else (0, const)
    if moved or const_q:
        rlo, rhi = _exact_bounds(kept, const_r)
        if rlo >= 0 and _fits(dtype, rlo, rhi):
            rest = _build_sum(dtype, kept, const_r)
            return _divmod_result(op, dtype, _build_sum(dtype, moved, const_q), rest, d)
    # partial factor: x = g*y + r with g | d and 0 <= r < g -> x // d = y // (d/g), x % d = (y % (d/g))*g + r
    for g in sorted({math.gcd(c, d) for _, c in terms if c > 0}, reverse=True):
        if g == 1:
            break
        small = [(b, c) for b, c in terms if c % g != 0]
        rlo, rhi = _exact_bounds(small, const % g)
        if rlo < 0 or rhi >= g:
            continue
        big = _build_sum(dtype, [(b, c // g) for b, c in terms if c % g == 0], const // g)
        if op is Ops.IDIV:
            return big // (d // g)
        return (big % (d // g)) * g + _build_sum(dtype, small, const % g)
    return None


def mod_small(x: UOp, c1: UOp) -> UOp | None:
    """x % d -> x when |x| < |d| (the remainder of a smaller magnitude is itself, in C)."""
    d = abs(c1.arg)
    return x if d > 0 and -d < x.vmin and x.vmax < d else None


def nested_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x // a) // b -> x // (a*b) for positive a, b (true for floor and truncation)."""
    a, b = c1.arg, c2.arg
    if a <= 0 or b <= 0 or a * b > dtype_bounds(x.dtype)[1]:
        return None
    return x // (a * b)


# ------------------------------------------------------------------------------------------------ comparisons

def lt_add_const(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """x + a < b -> x < b - a, when x + a cannot wrap."""
    a, b = c1.arg, c2.arg
    if _fits(x.dtype, x.vmin + a, x.vmax + a) and _fits(x.dtype, b - a, b - a):
        return x < (b - a)
    return None


def const_lt_add(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """b < x + a -> b - a < x, when x + a cannot wrap."""
    a, b = c1.arg, c2.arg
    if _fits(x.dtype, x.vmin + a, x.vmax + a) and _fits(x.dtype, b - a, b - a):
        return UOp.const(x.dtype, b - a) < x
    return None


def _factored_sum(x: UOp) -> tuple[UOp, int] | None:
    """``x`` = sum(base*coeff) with a common factor g > 1 of the coeffs: (sum(base*coeff/g), g), or None."""
    split = _split_sum(x)
    if split is None:
        return None
    terms, const = split
    if const != 0 or not terms:
        return None
    g = math.gcd(*(c for _, c in terms))
    if g <= 1 or not _fits(x.dtype, *_exact_bounds(terms, 0)):
        return None
    return _build_sum(x.dtype, [(b, c // g) for b, c in terms], 0), g


def lt_sum_factor(x: UOp, c1: UOp) -> UOp | None:
    """sum(base*coeff) < b -> sum(base*coeff/g) < ceil(b/g) for the common factor g > 1 of the coeffs."""
    factored = _factored_sum(x)
    if factored is None:
        return None
    reduced, g = factored
    return reduced < -((-c1.arg) // g)


def const_lt_sum_factor(c1: UOp, x: UOp) -> UOp | None:
    """b < sum(base*coeff) -> floor(b/g) < sum(base*coeff/g) for the common factor g > 1 of the coeffs."""
    factored = _factored_sum(x)
    if factored is None:
        return None
    reduced, g = factored
    return UOp.const(x.dtype, c1.arg // g) < reduced


def lt_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """x // d < c -> x < c*d for d > 0, c > 0 (trunc(x/d) <= c-1 exactly when x < c*d)."""
    d, c = c1.arg, c2.arg
    if d > 0 and c > 0 and _fits(x.dtype, c * d, c * d):
        return x < c * d
    return None


def not_lt(x: UOp, y: UOp) -> UOp | None:
    """not (x < y) -> y < x + 1 for integers, when x + 1 cannot wrap."""
    if x.dtype in INTS and x.vmax < dtype_bounds(x.dtype)[1]:
        return y < x + 1
    return None


# ------------------------------------------------------------------------------------------------ rule tables

def _negatable(c: UOp) -> bool:
    """A negative constant whose negation its dtype holds (every one but the type's minimum)."""
    return c.arg < 0 and -c.arg <= dtype_bounds(c.dtype)[1]


def _swap_const(x: UOp) -> UOp:
    """Put a constant operand of a commutative op on the right: c + y -> y + c."""
    return x.replace(src=(x.src[1], x.src[0]))


NOT_CONST = frozenset(Ops) - {Ops.CONST}
# ops whose range analysis can pin a non-constant result (ADD/MUL/SUB of variables rarely do; skipping them
# saves computing bounds for every sum)
RANGE_FOLDABLE = GroupOp.Comparison | {Ops.IDIV, Ops.MOD, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR, Ops.SHR, Ops.WHERE,
                                       Ops.CAST}


symbolic_simple = PatternMatcher([
    # constant folding: op(c), op(c, c), op(c, c, c) -> c
    (UPat(GroupOp.Unary, name="x", src=(UPat(Ops.CONST),)), fold_alu),
    (UPat(GroupOp.Binary, name="x", src=(UPat(Ops.CONST), UPat(Ops.CONST))), fold_alu),
    (UPat(GroupOp.Ternary, name="x", src=(UPat(Ops.CONST), UPat(Ops.CONST), UPat(Ops.CONST))), fold_alu),
    # cast / bitcast of a constant
    (UPat(Ops.CAST, name="x", src=(c1,)), fold_cast),
    (UPat(Ops.BITCAST, name="x", src=(c1,)), fold_bitcast),
    # an int/bool op pinned to one value by range analysis -> that constant
    (UPat(RANGE_FOLDABLE, INTS_BOOL, name="x"), fold_by_range),
    # c op y -> y op c for commutative ops
    (UPat(GroupOp.Commutative, name="x", src=(UPat(Ops.CONST), UPat(NOT_CONST)), ordered=True), _swap_const),
    # x + 0 -> x (ints, bools); x + -0.0 -> x, x - 0.0 -> x (floats, exact)
    (UPat(Ops.ADD, INTS_BOOL, src=(x, c1)), lambda x, c1: x if c1.arg == 0 else None),
    (UPat(Ops.ADD, FLOATS, src=(x, c1)), lambda x, c1: x if c1.arg == 0 and math.copysign(1, c1.arg) < 0 else None),
    (UPat(Ops.SUB, FLOATS, src=(x, c1)), lambda x, c1: x if c1.arg == 0 and math.copysign(1, c1.arg) > 0 else None),
    # x * 1 -> x (any dtype); x * 0 -> 0 (ints only: inf*0 is nan)
    (x * c1, lambda x, c1: x if c1.arg == 1 and x.dtype is c1.dtype else None),
    (UPat(Ops.MUL, INTS, src=(x, c1)), lambda x, c1: c1 if c1.arg == 0 else None),
    # x / 1.0 -> x
    (UPat(Ops.FDIV, src=(x, c1)), lambda x, c1: x if c1.arg == 1 else None),
    # x // 1 -> x, x // -1 -> -x, x % 1 -> 0, x % -1 -> 0
    (UPat(Ops.IDIV, src=(x, c1)), lambda x, c1: x if c1.arg == 1 else (x * -1 if c1.arg == -1 else None)),
    (UPat(Ops.MOD, src=(x, c1)), lambda x, c1: x.const_like(0) if c1.arg in (1, -1) else None),
    # integer canonical forms: x - y -> x + y*-1, NEG(x) -> x*-1
    (UPat(Ops.SUB, INTS, src=(x, y)), lambda x, y: x + y * -1),
    (UPat(Ops.NEG, INTS, src=(x,)), lambda x: x * -1),
    # -(-x) -> x for floats
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(x,)),)), lambda x: x),
    # x << c -> x * 2**c (ints)
    (UPat(Ops.SHL, INTS, src=(x, c1)),
     lambda x, c1: x * (1 << c1.arg) if 0 <= c1.arg < 8 * x.dtype.itemsize else None),
    # x >> 0 -> x (any int); x >> c -> x // 2**c when x >= 0 (an arithmetic shift of a negative x rounds down)
    (UPat(Ops.SHR, INTS, src=(x, c1)),
     lambda x, c1: x if c1.arg == 0 else
     x // (1 << c1.arg) if 0 < c1.arg < 8 * x.dtype.itemsize and x.vmin >= 0 else None),
    # boolean algebra: x & True -> x, x & False -> False, x | False -> x, x | True -> True, x ^ False -> x
    (UPat(Ops.AND, dtypes.bool, src=(x, c1)), lambda x, c1: x if c1.arg else c1),
    (UPat(Ops.OR, dtypes.bool, src=(x, c1)), lambda x, c1: c1 if c1.arg else x),
    (UPat(Ops.XOR, dtypes.bool, src=(x, c1)), lambda x, c1: x.logical_not() if c1.arg else x),
    # ints: x & -1 -> x, x | 0 -> x, x ^ 0 -> x, x & 0 -> 0
    # and x & m -> x when 0 <= x and m has every bit x can have (x & (2**k - 1) -> x for 0 <= x < 2**k)
    (UPat(Ops.AND, INTS, src=(x, c1)),
     lambda x, c1: x if c1.arg == _all_ones(x.dtype) else (c1 if c1.arg == 0 else and_keeps(x, c1))),
    (UPat((Ops.OR, Ops.XOR), INTS, src=(x, c1)), lambda x, c1: x if c1.arg == 0 else None),
    # x & x -> x, x | x -> x, max(x, x) -> x
    (UPat((Ops.AND, Ops.OR, Ops.MAX), src=(x, x)), lambda x: x),
    # x ^ x -> 0 (ints, bools)
    (UPat(Ops.XOR, INTS_BOOL, src=(x, x), name="u"), lambda u, x: u.const_like(0)),
    # x < x -> False, x != x -> False, x == x -> True (ints, bools: no nan)
    (UPat((Ops.CMPLT, Ops.CMPNE), src=(UPat.var("x", INTS_BOOL), UPat.var("x")), name="u"),
     lambda u, x: u.const_like(False)),
    (UPat(Ops.CMPEQ, src=(UPat.var("x", INTS_BOOL), UPat.var("x")), name="u"), lambda u, x: u.const_like(True)),
    # bool x != False -> x, x == True -> x, x == False -> x != True
    (UPat(Ops.CMPNE, src=(UPat.var("x", dtypes.bool), c1)), lambda x, c1: None if c1.arg else x),
    (UPat(Ops.CMPEQ, src=(UPat.var("x", dtypes.bool), c1)), lambda x, c1: x if c1.arg else x.logical_not()),
    # not not x -> x
    (UPat(Ops.CMPNE, src=(UPat(Ops.CMPNE, src=(x, UPat.const(dtypes.bool, True))), UPat.const(dtypes.bool, True))),
     lambda x: x),
    # where(True, a, b) -> a, where(False, a, b) -> b
    (UPat(Ops.WHERE, src=(c1, y, z)), lambda c1, y, z: y if c1.arg else z),
    # where(c, a, a) -> a
    (UPat(Ops.WHERE, src=(UPat.var(), y, y)), lambda y: y),
    # where(c, True, False) -> c; where(c, False, True) -> not c
    (UPat(Ops.WHERE, dtypes.bool, src=(cond, c1, c2)),
     lambda cond, c1, c2: (cond if c1.arg else cond.logical_not()) if bool(c1.arg) != bool(c2.arg) else None),
    # where(not c, a, b) -> where(c, b, a)
    (UPat(Ops.WHERE, src=(UPat(Ops.CMPNE, src=(cond, UPat.const(dtypes.bool, True))), y, z)),
     lambda cond, y, z: cond.where(z, y)),
    # cast to the same dtype -> x; cast of a cast that widened first -> x
    (UPat(Ops.CAST, name="u", src=(x,)), lambda u, x: x if u.dtype is x.dtype else None),
    (UPat(Ops.CAST, INTS, name="u", src=(UPat(Ops.CAST, INTS, src=(ix,), name="mid"),)),
     lambda u, mid, x: x if u.dtype is x.dtype and _fits(mid.dtype, *dtype_bounds(x.dtype)) else None),
])

symbolic = (symbolic_simple + PatternMatcher([
    # (x + c1) + c2 -> x + (c1 + c2), (x * c1) * c2 -> x * (c1 * c2)   (ints: wrap-around is a ring)
    (UPat(Ops.ADD, INTS, src=(UPat(Ops.ADD, src=(x, c1)), c2)), lambda x, c1, c2: x + (c1.arg + c2.arg)),
    (UPat(Ops.MUL, INTS, src=(UPat(Ops.MUL, src=(x, c1)), c2)), lambda x, c1, c2: x * (c1.arg * c2.arg)),
    # (x + c) + y -> (x + y) + c: constants move to the outside of sums
    (UPat(Ops.ADD, INTS, src=(UPat(Ops.ADD, src=(x, c1)), y)),
     lambda x, c1, y: (x + y) + c1 if y.op is not Ops.CONST else None),
    # (x + y) * c -> x*c + y*c: distribute constant factors over sums
    (UPat(Ops.MUL, INTS, src=(UPat(Ops.ADD, src=(x, y)), c1)), lambda x, y, c1: x * c1 + y * c1),
    # x*a + x*b -> x*(a+b); (a // c) * (c*m) + (a % c) * m -> a*m (m = 1: (a // c) * c + a % c -> a); also deep
    # inside a sum
    (UPat(Ops.ADD, INTS, name="x"), merge_terms),
    # max(x, y) -> x when x >= y always
    (UPat(Ops.MAX, INTS, src=(x, y)), lambda x, y: x if x.vmin >= y.vmax else (y if y.vmin >= x.vmax else None)),
    # x // -c -> -(x // c); x % -c -> x % c (truncating division; not for c = the type's minimum: -c wraps)
    (UPat(Ops.IDIV, INTS, src=(x, c1)), lambda x, c1: (x // -c1.arg) * -1 if _negatable(c1) else None),
    (UPat(Ops.MOD, INTS, src=(x, c1)), lambda x, c1: x % -c1.arg if _negatable(c1) else None),
    # x % d -> x when |x| < d
    (UPat(Ops.MOD, INTS, src=(x, c1)), mod_small),
    # (x // a) // b -> x // (a*b)
    (UPat(Ops.IDIV, INTS, src=(UPat(Ops.IDIV, src=(x, c1)), c2)), nested_div),
    # (x % m) % d -> x % d when d divides m (not m = 0: x % 0 is 0, not x)
    (UPat(Ops.MOD, INTS, src=(UPat(Ops.MOD, src=(x, c1)), c2)),
     lambda x, c1, c2: x % c2.arg if c2.arg > 0 and c1.arg != 0 and c1.arg % c2.arg == 0 else None),
    # sum // d, sum % d: common factors, whole multiples, partial factors
    (UPat(Ops.IDIV, INTS, src=(x, c1)), lambda x, c1: fold_divmod(x, c1, Ops.IDIV)),
    (UPat(Ops.MOD, INTS, src=(x, c1)), lambda x, c1: fold_divmod(x, c1, Ops.MOD)),
    # x + a < b -> x < b - a
    (UPat(Ops.CMPLT, src=(UPat(Ops.ADD, INTS, src=(x, c1)), c2)), lt_add_const),
    # b < x + a -> b - a < x
    (UPat(Ops.CMPLT, src=(c2, UPat(Ops.ADD, INTS, src=(x, c1)))), const_lt_add),
    # g*x + g*y < b -> x + y < ceil(b/g)
    (UPat(Ops.CMPLT, src=(UPat(Ops.ADD, INTS, name="x"), c1)), lt_sum_factor),
    (UPat(Ops.CMPLT, src=(UPat(Ops.MUL, INTS, name="x"), c1)), lt_sum_factor),
    # b < g*x + g*y -> floor(b/g) < x + y
    (UPat(Ops.CMPLT, src=(c1, UPat(Ops.ADD, INTS, name="x"))), const_lt_sum_factor),
    (UPat(Ops.CMPLT, src=(c1, UPat(Ops.MUL, INTS, name="x"))), const_lt_sum_factor),
    # x // d < c -> x < c*d
    (UPat(Ops.CMPLT, src=(UPat(Ops.IDIV, INTS, src=(x, c1)), c2)), lt_div),
    # not (x < y) -> y < x + 1 (ints)
    (UPat(Ops.CMPNE, src=(UPat(Ops.CMPLT, src=(x, y)), UPat.const(dtypes.bool, True))), not_lt),
])).remember_fixed_points()  # its rules read only the node: normal forms are marked on it


def simplify_sum(u: UOp) -> UOp | None:
    """The normal form of ``x + t`` (ints) when ``x`` already is one, without a rewrite, in the two cases the
    rules settle at once: ``t`` a constant (it folds into ``x``'s constant term: ``(y + c1) + c2 -> y + (c1 + c2)``,
    ``y + 0 -> y``: the lanes of an affine index) and ``t`` a term ``base*c`` whose base is a term of ``x``
    (the terms merge, as ``merge_terms`` does: an index without its lane). None for other nodes."""
    normal = symbolic.fixed_point_key
    if u.op is not Ops.ADD or u.dtype not in INTS or normal is None:
        return None
    x, t = u.src
    if x.op is Ops.CONST or normal not in x.__dict__:
        return None
    if t.op is Ops.CONST:
        return plus_const(x, t.arg)
    if normal not in t.__dict__:
        from tgcore.uop.rewrite import graph_rewrite
        t = graph_rewrite(t, symbolic, name="simplify")
    base = t.src[0] if t.op is Ops.MUL and t.src[1].op is Ops.CONST else t
    bases = _term_bases(x)
    if t.op in (Ops.ADD, Ops.CONST) or base.op in (Ops.ADD, Ops.CONST) or base not in bases:
        return None
    if _divmod_partner(base, bases) is not None:
        return None  # with the merged coefficient a div/mod pair may recombine: the rules decide
    split = _split_sum(x)
    if split is None:
        return None
    terms, const = split
    merged: dict[UOp, int] = {}
    for b, c in (*terms, (base, t.src[1].arg if base is not t else 1)):
        merged[b] = merged.get(b, 0) + c
    out = _build_sum(u.dtype, list(merged.items()), const)
    out.__dict__[normal] = True
    return out


def conjuncts(gate: UOp) -> list[UOp]:
    """The terms of ``gate`` as a chain of ANDs of bools (``a & b & c``), or ``[gate]``."""
    if gate.op is Ops.AND and gate.dtype == dtypes.bool:
        return [t for s in gate.src for t in conjuncts(s)]
    return [gate]


def plus_const(x: UOp, c: int) -> UOp:
    """The normal form of ``x + c`` for an int normal form ``x`` that is not a constant (``simplify_sum``'s first
    case, without building ``x + c`` first): the constant folds into ``x``'s constant term."""
    if x.op is Ops.ADD and x.src[1].op is Ops.CONST:
        x, t = x.src[0], x.src[0].const_like(x.src[1].arg + c)
    else:
        t = x.const_like(c)
    out = x if t.arg == 0 else UOp(Ops.ADD, x.dtype, (x, t))
    out.__dict__[symbolic.fixed_point_key] = True  # type: ignore[index]
    return out


def settled_by_range(u: UOp) -> UOp | None:
    """The constant an int or bool op folds to when its sources are normal forms, not all constants, and range
    analysis pins it to one value (a lane's gate ``i + 15 < 255``): what the rules give, since ``fold_by_range``
    is the first of them that can fire at such a node. None for other nodes."""
    normal = symbolic.fixed_point_key
    if u.op not in RANGE_FOLDABLE or u.dtype not in INTS_BOOL or normal is None or \
            all(s.op is Ops.CONST for s in u.src) or not all(normal in s.__dict__ for s in u.src):
        return None
    return fold_by_range(u)


def stride(expr: UOp, r: UOp) -> int | None:
    """How much the int ``expr`` grows when the RANGE ``r`` grows by one, if that is a constant (else None):
    ``simplify(expr[r:=1] - expr[r:=0])``. For a normal form in which ``r`` is only a term of the top sum
    (``... + r*c + ...``, the usual index) the answer is that term's coefficient, read off without a rewrite."""
    normal = symbolic.fixed_point_key
    if normal is not None and normal not in expr.__dict__ and expr.dtype in INTS:
        expr = expr.simplify()  # built without the rules (e.g. by substitute): its normal form, which has the mark
    fast = _term_stride(expr, r)
    if fast is not None and not _spec_enabled():
        return fast
    diff = (expr.substitute({r: UOp.const(r.dtype, 1)}) - expr.substitute({r: UOp.const(r.dtype, 0)})).simplify()
    slow = diff.arg if diff.op is Ops.CONST else None
    if fast is not None and fast != slow:
        raise AssertionError(f"stride of {expr.render()} along {r.render()}: terms say {fast}, the rules {slow}")
    return slow


def _term_stride(expr: UOp, r: UOp) -> int | None:
    """The coefficient of ``r`` in the normal-form sum ``expr`` when no other term depends on ``r``; None when
    that does not decide it."""
    if r.op is not Ops.RANGE or expr.dtype not in INTS or r.dtype is not expr.dtype or \
            symbolic.fixed_point_key not in expr.__dict__:
        return None
    split = _split_sum(expr)
    if split is None:
        return None
    coeff = 0
    for base, c in split[0]:
        if base is r:
            coeff += c
        elif r in base.ranges or base.op in (Ops.END, Ops.REDUCE):
            return None
    return int(UOp.const(expr.dtype, coeff).arg)


def difference(a: UOp, b: UOp) -> int | None:
    """``a - b`` when it is a constant, else None: what ``(a - b).simplify()`` finds. For two int normal forms
    (the indices of two loads) it is read off their terms without a rewrite (see ``_term_difference``)."""
    a, b = a.simplify(), b.simplify()  # (what simplifying a - b does first; at once for a node already simple)
    fast = _term_difference(a, b)
    if fast is not _UNDECIDED and not _spec_enabled():
        return fast  # type: ignore[return-value]
    d = (a - b).simplify()
    slow = d.arg if d.op is Ops.CONST else None
    if fast is not _UNDECIDED and fast != slow:
        raise AssertionError(f"{a.render()} - {b.render()}: the terms say {fast}, the rules {slow}")
    return slow


_UNDECIDED = object()


def _term_difference(a: UOp, b: UOp) -> int | None | object:
    """``a - b`` for normal forms of one int dtype: the constant when every term cancels, None when terms are left
    that no rule can combine (merge_terms only merges equal bases and div/mod pairs whose coefficients agree, and
    a normal form's bases are final); ``_UNDECIDED`` when that does not settle it (such a pair is left, or a node
    is not marked as a normal form)."""
    normal = symbolic.fixed_point_key
    if a.dtype not in INTS or b.dtype is not a.dtype or normal is None or normal not in a.__dict__ or \
            normal not in b.__dict__:
        return _UNDECIDED
    split_a, split_b = _split_sum(a), _split_sum(b)
    if split_a is None or split_b is None:
        return _UNDECIDED
    merged: dict[UOp, int] = {}
    for base, coeff in split_a[0]:
        merged[base] = merged.get(base, 0) + coeff
    for base, coeff in split_b[0]:
        merged[base] = merged.get(base, 0) - coeff
    ring = 1 << (8 * a.dtype.itemsize)
    left = {base: coeff for base, coeff in merged.items() if coeff % ring != 0}  # (a multiple of 2**bits wraps to 0)
    if not left:
        return UOp.const(a.dtype, split_a[1] - split_b[1]).arg
    return _UNDECIDED if _agreeing_pairs(left, ring) else None  # an agreeing div/mod pair would recombine


def _spec_enabled() -> bool:
    from tgcore.uop.rewrite import _spec_enabled as enabled
    return enabled()

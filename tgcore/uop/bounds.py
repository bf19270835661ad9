"""Range analysis: a sound [vmin, vmax] for every integer and bool node.

In:  a UOp whose sources already carry their bounds (`UOp._min_max` fills them in bottom-up).
Out: `node_bounds(u) -> (lo, hi)` with lo <= every value u can take <= hi.

"Sound" is under the IR's wrap-around semantics: when an op might overflow its dtype the bounds are
the whole dtype range. Division and remainder assume a non-zero divisor (zero is undefined, as in C).
Float nodes get their dtype's range (-inf, inf) unless they are constants.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from tgcore.dtype import DType, dtypes
from tgcore.uop.alu import c_div
from tgcore.uop.ops import Ops

if TYPE_CHECKING:
    from tgcore.uop.uop import UOp

Bounds = tuple[Any, Any]


@functools.cache
def dtype_bounds(dt: DType) -> Bounds:
    """The smallest and largest value of a dtype (of its lanes, for a vector)."""
    scalar = dt.scalar()
    if scalar is dtypes.bool:
        return (False, True)
    try:
        return (scalar.min, scalar.max)
    except Exception:  # void, pointers: no meaningful range
        return (-float("inf"), float("inf"))


def _fit(dt: DType, lo: Any, hi: Any) -> Bounds:
    """(lo, hi) if it fits the dtype, else the whole dtype range (the op may wrap around)."""
    full = dtype_bounds(dt)
    return (lo, hi) if full[0] <= lo and hi <= full[1] else full


def _div_bounds(a: Bounds, b: Bounds) -> list[int]:
    """Corner values of trunc(x / y) over x in a, y in b (extremes are at corners); x / 0 is 0."""
    zero = [0] if b[0] <= 0 <= b[1] else []
    parts = []
    if b[0] <= -1:
        parts.append((b[0], min(b[1], -1)))
    if b[1] >= 1:
        parts.append((max(b[0], 1), b[1]))
    return zero + [c_div(x, y) for lo, hi in parts for x in a for y in (lo, hi)]


def _mod_bounds(a: Bounds, b: Bounds) -> Bounds | None:
    m = max(abs(b[0]), abs(b[1]))  # the remainder's magnitude is below the divisor's
    if m == 0:
        return None
    limit = m - 1
    if b[0] == b[1]:  # constant divisor: exact when the dividend does not wrap around a multiple of it
        d = m
        if a[0] >= 0 and a[1] - a[0] < d and a[0] % d <= a[1] % d:
            return (a[0] % d, a[1] % d)
        if a[1] <= 0 and a[1] - a[0] < d and (-a[1]) % d <= (-a[0]) % d:
            return (-((-a[0]) % d), -((-a[1]) % d))
    if 0 <= a[0] and a[1] < min(abs(b[0]), abs(b[1])) and (b[0] > 0 or b[1] < 0):
        return a  # the dividend is always smaller than the divisor
    if a[0] >= 0:
        return (0, min(a[1], limit))
    if a[1] <= 0:
        return (max(a[0], -limit), 0)
    return (max(a[0], -limit), min(a[1], limit))


def _bitwise_bounds(op: Ops, dt: DType, a: Bounds, b: Bounds) -> Bounds:
    if a[0] < 0 or b[0] < 0:
        if op is Ops.AND and a[0] >= 0:
            return (0, a[1])
        if op is Ops.AND and b[0] >= 0:
            return (0, b[1])
        return dtype_bounds(dt)
    if op is Ops.AND:
        return (0, min(a[1], b[1]))
    top = (1 << max(a[1], b[1]).bit_length()) - 1  # no bit above the highest bit of either operand
    return _fit(dt, max(a[0], b[0]) if op is Ops.OR else 0, top)


def _bool_bounds(op: Ops, s: list[Bounds]) -> Bounds | None:
    if op is Ops.AND:
        return (s[0][0] and s[1][0], s[0][1] and s[1][1])
    if op in (Ops.OR, Ops.MAX):
        return (s[0][0] or s[1][0], s[0][1] or s[1][1])
    if op is Ops.XOR and s[0][0] == s[0][1] and s[1][0] == s[1][1]:
        v = bool(s[0][0]) != bool(s[1][0])
        return (v, v)
    return None


def _compare_bounds(op: Ops, a: Bounds, b: Bounds) -> Bounds:
    if op is Ops.CMPLT:
        if a[1] < b[0]:
            return (True, True)
        if a[0] >= b[1]:
            return (False, False)
        return (False, True)
    differ = a[1] < b[0] or b[1] < a[0]
    same = a[0] == a[1] == b[0] == b[1]
    if op is Ops.CMPNE:
        return (True, True) if differ else (False, False) if same else (False, True)
    return (False, False) if differ else (True, True) if same else (False, True)  # CMPEQ


def _cast_bounds(dt: DType, src_dt: DType, s: Bounds) -> Bounds:
    if dtypes.is_float(src_dt.scalar()):
        return dtype_bounds(dt)
    if dt.scalar() is dtypes.bool:
        if s[0] > 0 or s[1] < 0:
            return (True, True)
        return (False, False) if s[0] == s[1] == 0 else (False, True)
    if dtypes.is_float(dt.scalar()):
        return dtype_bounds(dt)
    return _fit(dt, int(s[0]), int(s[1]))


def node_bounds(u: UOp) -> Bounds:
    """Bounds of `u`, given bounds already computed for its sources."""
    op, dt = u.op, u.dtype
    if op is Ops.CONST:
        v = u.arg
        return (v, v) if v == v else dtype_bounds(dt)  # nan: no useful bound
    if op is Ops.VCONST:
        return (min(u.arg), max(u.arg)) if all(v == v for v in u.arg) else dtype_bounds(dt)
    scalar = dt.scalar()
    if not (dtypes.is_int(scalar) or scalar is dtypes.bool):
        return dtype_bounds(dt)
    if op is Ops.DEFINE_VAR:
        return (u.arg[1], u.arg[2])
    if op in (Ops.RANGE, Ops.SPECIAL):
        return (0, max(0, u.src[0].vmax - 1))
    s = [x.__dict__["_mm"] for x in u.src]
    if op in (Ops.BIND, Ops.GEP, Ops.TRUNC, Ops.AFTER):
        return s[0]
    if op is Ops.VECTORIZE:
        return (min(b[0] for b in s), max(b[1] for b in s))
    if op is Ops.WHERE:
        if s[0][0] == s[0][1]:
            return s[1] if s[0][0] else s[2]
        return (min(s[1][0], s[2][0]), max(s[1][1], s[2][1]))
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        return _compare_bounds(op, s[0], s[1])
    if op is Ops.CAST:
        return _cast_bounds(dt, u.src[0].dtype, s[0])
    if scalar is dtypes.bool:
        found = _bool_bounds(op, s) if len(s) == 2 else None
        return dtype_bounds(dt) if found is None else found
    if op is Ops.ADD:
        return _fit(dt, s[0][0] + s[1][0], s[0][1] + s[1][1])
    if op is Ops.SUB:
        return _fit(dt, s[0][0] - s[1][1], s[0][1] - s[1][0])
    if op is Ops.NEG:
        return _fit(dt, -s[0][1], -s[0][0])
    if op in (Ops.MUL, Ops.MULACC):
        products = [x * y for x in s[0] for y in s[1]]
        lo, hi = min(products), max(products)
        if op is Ops.MULACC:
            if not _fit(dt, lo, hi) == (lo, hi):
                return dtype_bounds(dt)
            lo, hi = lo + s[2][0], hi + s[2][1]
        return _fit(dt, lo, hi)
    if op is Ops.MAX:
        return (max(s[0][0], s[1][0]), max(s[0][1], s[1][1]))
    if op is Ops.IDIV:
        corners = _div_bounds(s[0], s[1])
        return _fit(dt, min(corners), max(corners)) if corners else dtype_bounds(dt)
    if op is Ops.MOD:
        found = _mod_bounds(s[0], s[1])
        return dtype_bounds(dt) if found is None else found
    if op in (Ops.AND, Ops.OR, Ops.XOR):
        return _bitwise_bounds(op, dt, s[0], s[1])
    if op in (Ops.SHL, Ops.SHR):
        shift = s[1]
        if shift[0] == shift[1] and 0 <= shift[0] < 8 * scalar.itemsize:
            k = shift[0]
            return _fit(dt, s[0][0] << k, s[0][1] << k) if op is Ops.SHL else (s[0][0] >> k, s[0][1] >> k)
        if op is Ops.SHR and s[0][0] >= 0 and shift[0] >= 0:
            return (0, s[0][1])
        return dtype_bounds(dt)
    return dtype_bounds(dt)

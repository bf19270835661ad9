"""Helpers for `sint` values: plain ints or symbolic integer UOps (symbolic shapes, strides, offsets).

In:  ints and integer UOps over DEFINE_VARs; for `sym_infer`, values for the variables.
Out: simplified sints, decided comparisons, and concrete values.

- `ssimplify(x)`: x simplified; a UOp that folds to a constant comes back as a Python int.
- `resolve(cond, default)`: the truth of a symbolic comparison when range analysis decides it, else `default`.
- `smax`, `smin`, `sprod`: max/min/product working on ints and UOps alike.
- `sym_infer(expr, {name or var: value})`: the value of an expression once its variables are known,
  computed with the IR's semantics (C truncating `//` and `%`, wrap-around).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Mapping
from typing import Any

from tgcore.uop.alu import bitcast_value, cast_value, exec_alu
from tgcore.uop.ops import GroupOp, Ops
from tgcore.uop.uop import UOp, sint


def ssimplify(x: sint) -> sint:
    """`x` simplified; constants come back as Python ints."""
    if not isinstance(x, UOp):
        return x
    s = x.simplify()
    return s.arg if s.op is Ops.CONST else s


def resolve(cond: Any, default: bool = True) -> bool:
    """The truth value of `cond` (bool or bool UOp) when it is decidable, else `default`."""
    if not isinstance(cond, UOp):
        return bool(cond)
    s = cond.simplify()
    lo, hi = s.vmin, s.vmax
    return bool(lo) if lo == hi else default


def smax(*xs: sint | Iterable[sint]) -> sint:
    return functools.reduce(_max2, _flatten(xs))


def smin(*xs: sint | Iterable[sint]) -> sint:
    return functools.reduce(_min2, _flatten(xs))


def sprod(xs: Iterable[sint]) -> sint:
    return functools.reduce(operator.mul, xs, 1)


def _flatten(xs: tuple) -> list[sint]:
    if len(xs) == 1 and not isinstance(xs[0], (int, UOp)):
        return list(xs[0])
    return list(xs)


def _max2(a: sint, b: sint) -> sint:
    if not isinstance(a, UOp) and not isinstance(b, UOp):
        return max(a, b)
    ua = a if isinstance(a, UOp) else b.const_like(a)  # type: ignore[union-attr]
    return ssimplify(ua.maximum(b))


def _min2(a: sint, b: sint) -> sint:
    if not isinstance(a, UOp) and not isinstance(b, UOp):
        return min(a, b)
    ua = a if isinstance(a, UOp) else b.const_like(a)  # type: ignore[union-attr]
    return ssimplify(ua.minimum(b))


def sym_infer(expr: sint, var_vals: Mapping[str, int] | Mapping[UOp, int]) -> Any:
    """The value of `expr` with every DEFINE_VAR set from `var_vals` (keyed by name or by the variable)."""
    if not isinstance(expr, UOp):
        return expr
    by_name = {(k.expr if isinstance(k, UOp) else k): v for k, v in var_vals.items()}
    vals: dict[UOp, Any] = {}
    for u in expr.toposort:
        vals[u] = _eval_node(u, vals, by_name)
    return vals[expr]


def eval_at(expr: UOp, values: Mapping[UOp, Any]) -> Any:
    """The value of ``expr`` with the nodes in ``values`` (ranges, variables) set to them (``ValueError`` when it
    reads anything else that is not a constant, a load for example)."""
    vals: dict[UOp, Any] = dict(values)
    for u in expr.toposort:
        if u not in vals:
            vals[u] = _eval_node(u, vals, {})
    return vals[expr]


def _eval_node(u: UOp, vals: dict[UOp, Any], by_name: dict[str, int]) -> Any:
    if u.op is Ops.CONST:
        return u.arg
    if u.op is Ops.DEFINE_VAR:
        if u.expr not in by_name:
            raise KeyError(f"sym_infer: no value given for variable {u.expr!r}")
        return by_name[u.expr]
    if u.op is Ops.BIND:
        return by_name.get(u.src[0].expr, vals[u.src[1]])
    if u.op in GroupOp.ALU:
        return exec_alu(u.op, u.dtype.scalar(), tuple(vals[s] for s in u.src))
    if u.op is Ops.CAST:
        return cast_value(vals[u.src[0]], u.dtype)
    if u.op is Ops.BITCAST:
        return bitcast_value(vals[u.src[0]], u.src[0].dtype, u.dtype)
    raise ValueError(f"sym_infer: cannot evaluate {u.op} ({u.render()})")

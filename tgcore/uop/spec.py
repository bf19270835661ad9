"""Specs: which UOp shapes may exist after a stage, and `type_verify` to check a graph against one.

In:  UOps (a root, whose whole graph is checked, or a list such as a linearised program) and a spec:
     a PatternMatcher whose rules return True (allowed) or False (malformed). A node no rule answers
     for is not allowed.
Out: nothing, or `SpecError` naming the first bad node.

`spec_alu` covers constants, variables, loop counters and ALU/cast/vector ops with their dtype rules.
`spec_ir` is `spec_alu` plus "anything else is allowed": the check every stage can share. Later stages
(scheduler, codegen, renderers) build stricter specs by adding their own tables: `spec_alu + mine`.
With env `TG_SPEC=1`, every graph_rewrite checks its result against `spec_ir` (tests turn it on).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from tgcore.dtype import dtypes
from tgcore.uop.axis import AxisArg
from tgcore.uop.bounds import dtype_bounds
from tgcore.uop.ops import GroupOp, Ops
from tgcore.uop.pattern import PatternMatcher, UPat
from tgcore.uop.uop import UOp


class SpecError(ValueError):
    """A UOp does not have a shape the stage's spec allows."""


def spec_enabled() -> bool:
    return os.environ.get("TG_SPEC", "0") not in ("", "0")


def _const_ok(x: UOp) -> bool:
    if x.src:
        return False
    scalar, v = x.dtype.scalar(), x.arg
    if scalar is dtypes.bool:
        return type(v) is bool
    if dtypes.is_int(scalar):
        lo, hi = dtype_bounds(scalar)
        return type(v) is int and lo <= v <= hi
    if dtypes.is_float(scalar):
        return type(v) is float
    return False


def _var_ok(x: UOp) -> bool:
    arg = x.arg
    return (not x.src and dtypes.is_int(x.dtype) and isinstance(arg, tuple) and len(arg) == 3
            and isinstance(arg[0], str) and isinstance(arg[1], int) and isinstance(arg[2], int) and arg[1] <= arg[2])


def _counter_ok(x: UOp) -> bool:
    return len(x.src) == 1 and dtypes.is_int(x.dtype) and x.src[0].dtype is x.dtype


def _same_dtype(x: UOp, n: int) -> bool:
    return len(x.src) == n and all(s.dtype is x.dtype for s in x.src)


def _binary_ok(x: UOp) -> bool:
    scalar = x.dtype.scalar()
    if x.op in GroupOp.Integer and not dtypes.is_int(scalar):
        return False
    if x.op in (Ops.FDIV, Ops.POW) and not dtypes.is_float(scalar):
        return False
    return _same_dtype(x, 2)


def _compare_ok(x: UOp) -> bool:
    return (len(x.src) == 2 and x.dtype.scalar() is dtypes.bool and x.src[0].dtype is x.src[1].dtype
            and x.src[0].dtype.count == x.dtype.count)


def _where_ok(x: UOp) -> bool:
    return (len(x.src) == 3 and x.src[0].dtype.scalar() is dtypes.bool
            and x.src[1].dtype is x.dtype and x.src[2].dtype is x.dtype)


def _gep_ok(x: UOp) -> bool:
    if len(x.src) != 1 or not isinstance(x.arg, tuple) or x.dtype.scalar() is not x.src[0].dtype.scalar():
        return False
    return len(x.arg) == x.dtype.count and all(isinstance(i, int) and 0 <= i < x.src[0].dtype.count for i in x.arg)


spec_alu = PatternMatcher([
    # constants: the arg's Python type matches the dtype, ints within range
    (UPat(Ops.CONST, name="x"), _const_ok),
    (UPat(Ops.VCONST, name="x"), lambda x: not x.src and isinstance(x.arg, tuple) and len(x.arg) == x.dtype.count),
    # DEFINE_VAR: arg = (name, lo, hi) with lo <= hi, integer dtype
    (UPat(Ops.DEFINE_VAR, name="x"), _var_ok),
    # BIND: a variable and a constant of its dtype within its range
    (UPat(Ops.BIND, name="x", src=(UPat(Ops.DEFINE_VAR, name="v"), UPat(Ops.CONST, name="c"))),
     lambda x, v, c: x.dtype is v.dtype is c.dtype and v.arg[1] <= c.arg <= v.arg[2]),
    # RANGE / SPECIAL: one integer end of the node's dtype; a loop's arg says which axis and kind (uop/axis.py)
    (UPat(Ops.RANGE, name="x"), lambda x: _counter_ok(x) and isinstance(x.arg, AxisArg)),
    (UPat(Ops.SPECIAL, name="x"), _counter_ok),
    # unary ALU: one source of the same dtype
    (UPat(GroupOp.Unary, name="x"), lambda x: _same_dtype(x, 1)),
    # comparisons: bool result, operands of one dtype
    (UPat(GroupOp.Comparison, name="x"), _compare_ok),
    # other binary ALU: operands of the result dtype; // % << >> need ints, / and ** floats
    (UPat(GroupOp.Binary - GroupOp.Comparison, name="x"), _binary_ok),
    # WHERE: bool condition, both branches of the result dtype
    (UPat(Ops.WHERE, name="x"), _where_ok),
    (UPat(Ops.MULACC, name="x"), lambda x: _same_dtype(x, 3)),
    # CAST: one source; BITCAST: one source of the same size
    (UPat(Ops.CAST, name="x"), lambda x: len(x.src) == 1),
    (UPat(Ops.BITCAST, name="x"), lambda x: len(x.src) == 1 and x.src[0].dtype.itemsize == x.dtype.itemsize),
    # VECTORIZE: n scalars of the lane dtype; GEP: lane indices within the source
    (UPat(Ops.VECTORIZE, name="x"),
     lambda x: len(x.src) == x.dtype.count and all(s.dtype is x.dtype.scalar() for s in x.src)),
    (UPat(Ops.GEP, name="x"), _gep_ok),
    # SINK: void
    (UPat(Ops.SINK, name="x"), lambda x: x.dtype is dtypes.void),
])

# every stage's baseline: the ALU rules above, anything else allowed
_checked = frozenset(op for rule in spec_alu.rules for op in (rule.pat.top_ops() or ()))
spec_ir = spec_alu + PatternMatcher([(UPat(frozenset(Ops) - _checked), lambda: True)])


def type_verify(uops: UOp | Iterable[UOp], spec: PatternMatcher = spec_ir, name: str = "spec") -> None:
    """Raise SpecError at the first node of `uops` (a root's graph, or a list) that `spec` does not allow."""
    nodes = uops.toposort if isinstance(uops, UOp) else uops
    for i, u in enumerate(nodes):
        if spec.rewrite(u) is not True:
            srcs = ", ".join(f"{s.op.name}:{s.dtype!r}" for s in u.src)
            raise SpecError(f"{name}: node {i} is not allowed: {u.op.name} dtype={u.dtype!r} arg={u.arg!r} "
                            f"src=({srcs})")

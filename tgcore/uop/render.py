"""A compact infix rendering of UOp expressions, for debugging and error messages.

In:  a UOp.
Out: a string such as `((gidx0*4+lidx0)//3)`, `max(x, 5)`, `(c ? a : b)`, `int64(x)`.

Integer `x + y*-1` prints as `x-y` and `-max(-a, -b)` as `min(a, b)`. Ops without an infix form print
as `OPNAME<arg>(sources)`. Iterative, so deep graphs do not hit the recursion limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tgcore.uop.axis import AxisArg
from tgcore.uop.ops import Ops

if TYPE_CHECKING:
    from tgcore.uop.uop import UOp

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.FDIV: "/", Ops.CMPLT: "<",
          Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>",
          Ops.POW: "**"}
_CALL = {Ops.MAX: "max", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt",
         Ops.RECIPROCAL: "recip", Ops.TRUNC: "trunc"}


def _is_neg_one(u: UOp) -> bool:
    return u.op is Ops.CONST and u.arg == -1 and not isinstance(u.arg, bool)


def _negated(u: UOp) -> UOp | None:
    """y when u is the integer negation y*-1."""
    return u.src[0] if u.op is Ops.MUL and _is_neg_one(u.src[1]) else None


def _leaf(u: UOp) -> str | None:
    if u.op is Ops.CONST:
        return repr(u.arg)
    if u.op is Ops.DEFINE_VAR:
        return str(u.arg[0])
    if u.op is Ops.RANGE:
        if isinstance(u.arg, AxisArg):
            return f"r{u.arg}"  # e.g. r0_global, r1_reduce_in tile_1
        return "r" + "_".join(str(a) for a in u.arg) if u.arg else "r"  # a tensor-level arange: rarange_8
    if u.op is Ops.SPECIAL:
        return str(u.arg)
    return None


def _render_node(u: UOp, s: dict[UOp, str]) -> str:
    leaf = _leaf(u)
    if leaf is not None:
        return leaf
    srcs = [s[x] for x in u.src]
    if u.op is Ops.ADD and (neg := _negated(u.src[1])) is not None:
        return f"({srcs[0]}-{s[neg]})"
    if u.op is Ops.MUL and _is_neg_one(u.src[1]):
        inner = u.src[0]
        if inner.op is Ops.MAX:
            a, b = _negated(inner.src[0]), _negated(inner.src[1])
            if a is not None and b is not None:
                return f"min({s[a]}, {s[b]})"
        return f"(-{srcs[0]})"
    if u.op in _INFIX and len(srcs) == 2:
        return f"({srcs[0]}{_INFIX[u.op]}{srcs[1]})"
    if u.op in _CALL:
        return f"{_CALL[u.op]}({', '.join(srcs)})"
    if u.op is Ops.NEG:
        return f"(-{srcs[0]})"
    if u.op is Ops.WHERE:
        return f"({srcs[0]} ? {srcs[1]} : {srcs[2]})"
    if u.op is Ops.CAST:
        return f"{u.dtype.name}({srcs[0]})"
    if u.op is Ops.BIND:
        return f"{srcs[0]}={srcs[1]}"
    arg = "" if u.arg is None else f"<{u.arg!r}>"
    return f"{u.op.name}{arg}({', '.join(srcs)})"


def render_expr(root: UOp) -> str:
    """The infix string of `root`."""
    s: dict[UOp, str] = {}
    for u in root.toposort:
        s[u] = _render_node(u, s)
    return s[root]

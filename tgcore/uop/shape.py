"""Shapes of tensor-level UOps.

In:  a tensor-graph UOp (BUFFER, CONST, movement ops, ALU, REDUCE_AXIS, CAST, CONTIGUOUS, ...).
Out: its shape as a tuple of ints, computed once per node (cached on the node).

Conventions of the tensor graph (the front end builds them, the scheduler reads them):
BUFFER is flat (shape ``(size,)``) and is reshaped to the tensor's shape; CONST and
DEFINE_VAR/BIND are scalars (shape ``()``), reshaped and expanded where used; ALU sources
all have the same shape (the front end broadcasts); REDUCE_AXIS keeps reduced axes as 1.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tgcore.uop.ops import Ops

if TYPE_CHECKING:
    from tgcore.uop.uop import UOp

Shape = tuple[int, ...]


def _movement_shape(u: UOp, src: Shape) -> Shape:
    if u.op in (Ops.RESHAPE, Ops.EXPAND):
        return tuple(u.arg)
    if u.op is Ops.PERMUTE:
        return tuple(src[i] for i in u.arg)
    if u.op is Ops.PAD:
        return tuple(s + b + a for s, (b, a) in zip(src, u.arg, strict=True))
    if u.op is Ops.SHRINK:  # a symbolic start comes with an end a constant distance away
        return tuple(e - b if isinstance(e, int) and isinstance(b, int) else int((e - b).simplify().arg)
                     for b, e in u.arg)
    if u.op is Ops.FLIP:
        return src
    raise AssertionError(u.op)


def _node_shape(u: UOp) -> Shape:
    op = u.op
    if op is Ops.BUFFER:
        return (u.arg,)
    if op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
        return ()
    if op is Ops.RANGE:  # tensor-level arange: ("arange", n)
        return (u.arg[1],)
    src = u.src[0].__dict__["_shape"] if u.src else ()
    if op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP):
        return _movement_shape(u, src)
    if op is Ops.REDUCE_AXIS:
        axes = u.arg[1]
        return tuple(1 if i in axes else s for i, s in enumerate(src))
    if op is Ops.WHERE:  # the condition may be bool of the same shape
        return u.src[1].__dict__["_shape"]
    if op is Ops.AFTER:  # a custom kernel's input ``arg`` once the kernel ran: src = (CUSTOM_KERNEL, *inputs)
        return u.src[1 + u.arg].__dict__["_shape"]
    if op is Ops.CUSTOM_KERNEL:
        return ()
    if op is Ops.INDEX:  # tensor-level gather: src = (1-D table, index tensor), the index's shape
        return u.src[1].__dict__["_shape"]
    return src


def shape_of(u: UOp) -> Shape:
    """The shape of a tensor-level UOp (cached on the node)."""
    d = u.__dict__
    if "_shape" in d:
        return d["_shape"]
    if all("_shape" in s.__dict__ for s in u.src):  # (a node just built on shaped ones: the common case)
        shape = d["_shape"] = _node_shape(u)
        return shape
    # fill in the nodes below that lack a shape, stopping at ones that have it (no full toposort)
    stack: list[tuple[UOp, bool]] = [(u, False)]
    while stack:
        n, ready = stack.pop()
        nd = n.__dict__
        if "_shape" in nd:
            continue
        if ready:
            nd["_shape"] = _node_shape(n)
            continue
        stack.append((n, True))
        stack.extend((s, False) for s in n.src if "_shape" not in s.__dict__)
    return d["_shape"]

"""Shapes of tensor-level UOps.

In:  a tensor-graph UOp (BUFFER, CONST, movement ops, ALU, REDUCE_AXIS, CAST, CONTIGUOUS, ...).
Out: its shape as a tuple of ints, computed once per node (cached on the node).

Conventions of the tensor graph (the front end builds them, the scheduler reads them):
BUFFER is flat (shape ``(size,)``) and is reshaped to the tensor's shape; CONST and
DEFINE_VAR/BIND are scalars (shape ``()``), reshaped and expanded where used; ALU sources
all have the same shape (the front end broadcasts); REDUCE_AXIS keeps reduced axes as 1.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tgcore.uop.ops import Ops

if TYPE_CHECKING:
    from tgcore.uop.uop import UOp

Shape = tuple[int, ...]


def _shrunk(u: UOp, src: Shape) -> Shape:
    """A shrink's extents; a symbolic start comes with an end a constant distance away."""
    return tuple(e - b if isinstance(e, int) and isinstance(b, int) else int((e - b).simplify().arg) for b, e in u.arg)


# op -> its shape from the node and its first source's shape: a table, since this runs once per node built
_SHAPE_RULES: dict[Ops, Callable[[UOp, Shape], Shape]] = {
    Ops.BUFFER: lambda u, src: (u.arg,),
    Ops.CONST: lambda u, src: (),
    Ops.DEFINE_VAR: lambda u, src: (),
    Ops.BIND: lambda u, src: (),
    Ops.CUSTOM_KERNEL: lambda u, src: (),
    Ops.RANGE: lambda u, src: (u.arg[1],),  # tensor-level arange: ("arange", n)
    Ops.RESHAPE: lambda u, src: tuple(u.arg),
    Ops.EXPAND: lambda u, src: tuple(u.arg),
    Ops.PERMUTE: lambda u, src: tuple(src[i] for i in u.arg),
    Ops.PAD: lambda u, src: tuple(s + b + a for s, (b, a) in zip(src, u.arg, strict=True)),
    Ops.SHRINK: _shrunk,
    Ops.FLIP: lambda u, src: src,
    Ops.REDUCE_AXIS: lambda u, src: tuple(1 if i in u.arg[1] else s for i, s in enumerate(src)),
    Ops.WHERE: lambda u, src: u.src[1].__dict__["_shape"],  # the condition may be bool of the same shape
    # a custom kernel's input ``arg`` once the kernel ran: src = (CUSTOM_KERNEL, *inputs)
    Ops.AFTER: lambda u, src: u.src[1 + u.arg].__dict__["_shape"],
    Ops.INDEX: lambda u, src: u.src[1].__dict__["_shape"],  # tensor-level gather: (1-D table, index tensor)
}


def _node_shape(u: UOp) -> Shape:
    src = u.src[0].__dict__.get("_shape", ()) if u.src else ()  # (a BUFFER's sources have none)
    rule = _SHAPE_RULES.get(u.op)
    return src if rule is None else rule(u, src)  # (elementwise ops: their sources' shape)


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

"""Reverse-mode gradients over the tensor-level UOp graph.

In:  a root UOp (a loss), the gradient flowing into it, and the UOps to differentiate for.
Out: for each of them, a UOp of its gradient (lazy, like everything else).

Every Tensor method is built from a handful of tensor-level ops (ALU, movement, reduce, cast),
so gradient rules exist only for those: composite ops (softmax, matmul, conv, ...) get their
gradients for free. ``GRADIENT_RULES`` maps an op to a function of (the node, the gradient of
its output, a small helper) returning one gradient per source (``None`` where no gradient
flows).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tgcore.dtype import dtypes
from tgcore.schedule.shape import shape_of
from tgcore.uop import Ops, UOp

LN2 = math.log(2)
Grads = tuple[UOp | None, ...]


def _reduce_to(g: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``g`` over the axes where ``shape`` has 1 and ``g`` does not (the adjoint of expand)."""
    axes = tuple(i for i, (a, b) in enumerate(zip(g.shape, shape, strict=True)) if a != b)
    return g.sum(axes, keepdim=True, dtype=g.dtype) if axes else g


def _inverse_permutation(order: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(order)
    for i, o in enumerate(order):
        inv[o] = i
    return tuple(inv)


def _max_grad(node: UOp, g: Any) -> Grads:
    """Elementwise max: the larger input gets the gradient; ties split it evenly."""
    a, b = g._new(node.src[0]), g._new(node.src[1])
    half = g * 0.5
    return (((a > b).where(g, 0) + (a == b).where(half, 0)).uop,
            ((b > a).where(g, 0) + (a == b).where(half, 0)).uop)


def _reduce_grad(node: UOp, g: Any) -> Grads:
    op, axes = node.arg
    src = g._new(node.src[0])
    expanded = g.expand(src.shape)
    if op is Ops.ADD:
        return (expanded.uop,)
    if op is Ops.MAX:  # spread evenly over every position that attains the maximum
        hit = (src == g._new(node).expand(src.shape)).cast(g.dtype)
        count = hit.sum(axes, keepdim=True, dtype=g.dtype).expand(src.shape)
        # computed once into a buffer (like torch's max-pool backward): a compare and a division per element
        # that every reader would repeat, and a pool's readers are the weight and bias gradients of the layer
        # before it, which read each element once per output channel and tap
        return ((expanded * hit / count).contiguous().uop,)
    if op is Ops.MUL:  # the product of the others: out / x where x != 0; at a single zero, the product without it
        out = g._new(node).expand(src.shape)
        zero = src == 0
        zeros = zero.sum(axes, keepdim=True, dtype=dtypes.int32).expand(src.shape)
        others = zero.where(1, src).prod(axes, keepdim=True, dtype=src.dtype).expand(src.shape)
        safe = zero.where(1, src)
        each = (zeros == 0).where(out / safe, (zero & (zeros == 1)).where(others, 0))
        return ((expanded * each).uop,)
    raise NotImplementedError(f"no gradient for a {op} reduction")


def _movement_grad(node: UOp, g: Any) -> Grads:
    src_shape = shape_of(node.src[0])
    op, arg = node.op, node.arg
    if op is Ops.RESHAPE:
        return (g.reshape(src_shape).uop,)
    if op is Ops.PERMUTE:
        return (g.permute(_inverse_permutation(arg)).uop,)
    if op is Ops.EXPAND:
        return (_reduce_to(g, src_shape).uop,)
    if op is Ops.PAD:
        return (g.shrink(tuple((b, b + s) for (b, _), s in zip(arg, src_shape, strict=True))).uop,)
    if op is Ops.SHRINK:
        return (g.pad(tuple((b, s - e) for (b, e), s in zip(arg, src_shape, strict=True))).uop,)
    if op is Ops.FLIP:
        return (g.flip(tuple(i for i, f in enumerate(arg) if f)).uop,)
    raise AssertionError(op)


def _detach_grad(node: UOp, g: Any) -> Grads:
    """A plain DETACH stops the gradient; one with extra sources has a rule for them (`with_gradient`)."""
    if len(node.src) == 1:
        return (None,)
    inputs = [g._new(s) for s in node.src[1:]]
    grads = node.arg(g, g._new(node.src[0]), *inputs)
    return (None, *(x.uop if x is not None and dtypes.is_float(s.dtype) else None
                    for x, s in zip(grads, node.src[1:], strict=True)))


def _custom_kernel_grad(node: UOp, g: Any) -> Grads:
    """Output ``node.arg`` of a hand-written kernel: its author's ``grad_fxn`` gives one gradient per input."""
    kernel = node.src[0]
    name = getattr(kernel.arg.fxn, "__name__", "custom kernel")
    if kernel.arg.grad_fxn is None:
        raise NotImplementedError(f"custom kernel {name} has no grad_fxn: pass one to Tensor.custom_kernel")
    inputs = [g._new(s) for s in kernel.src]
    grads = tuple(kernel.arg.grad_fxn(g, node.arg, *inputs))
    if len(grads) != len(inputs):
        raise ValueError(f"grad_fxn of {name} returned {len(grads)} gradients for {len(inputs)} inputs")
    for i, (x, t) in enumerate(zip(grads, inputs, strict=True)):
        if x is not None and tuple(x.shape) != tuple(t.shape):
            raise ValueError(f"grad_fxn of {name}: gradient {i} has shape {tuple(x.shape)}, input has {t.shape}")
    return (None, *(x.uop if x is not None else None for x in grads))


def _index_grad(node: UOp, g: Any) -> Grads:
    """A tensor-level gather ``table[index]`` (``Tensor.take``): each table entry gets the sum of the gradients of
    the outputs that read it (an index out of range reads 0 and sends nothing back); the index gets none."""
    size = shape_of(node.src[0])[0]
    index = g._new(node.src[1]).reshape(-1, 1)
    hits = index.eq(type(g).arange(size, device=g.device).cast(index.dtype).reshape(1, size))  # (outputs, table)
    return (hits.where(g.reshape(-1, 1), 0).sum(0).uop, None)


GRADIENT_RULES: dict[Ops, Callable[[UOp, Any], Grads]] = {
    Ops.ADD: lambda n, g: (g.uop, g.uop),                                     # d(a+b) = da + db
    Ops.SUB: lambda n, g: (g.uop, (-g).uop),                                  # d(a-b) = da - db
    Ops.MUL: lambda n, g: ((g * g._new(n.src[1])).uop, (g * g._new(n.src[0])).uop),   # d(ab) = b da + a db
    Ops.NEG: lambda n, g: ((-g).uop,),
    Ops.FDIV: lambda n, g: ((g / g._new(n.src[1])).uop,                            # d(a/b) = da/b - a db/b^2
                            (-g * g._new(n.src[0]) / (g._new(n.src[1]) * g._new(n.src[1]))).uop),
    Ops.RECIPROCAL: lambda n, g: ((-g * g._new(n) * g._new(n)).uop,),                 # d(1/x) = -dx/x^2
    Ops.SQRT: lambda n, g: ((g / (g._new(n) * 2)).uop,),                          # d sqrt(x) = dx / (2 sqrt(x))
    Ops.EXP2: lambda n, g: ((g * g._new(n) * LN2).uop,),                           # d 2^x = 2^x ln2 dx
    Ops.LOG2: lambda n, g: ((g / (g._new(n.src[0]) * LN2)).uop,),                  # d log2 x = dx / (x ln2)
    Ops.SIN: lambda n, g: ((g * g._new(n.src[0]).cos()).uop,),                   # d sin x = cos x dx
    Ops.POW: lambda n, g: ((g * g._new(n.src[1]) * g._new(n.src[0]) ** (g._new(n.src[1]) - 1)).uop,
                           (g * g._new(n) * g._new(n.src[0]).log()).uop),
    Ops.TRUNC: lambda n, g: (None,),
    Ops.MAX: _max_grad,
    Ops.WHERE: lambda n, g: (None, g._new(n.src[0]).where(g, 0).uop, g._new(n.src[0]).where(0, g).uop),
    Ops.CAST: lambda n, g: ((g.cast(n.src[0].dtype).uop,) if dtypes.is_float(n.src[0].dtype) else (None,)),
    Ops.CONTIGUOUS: lambda n, g: (g.uop,),
    Ops.COPY: lambda n, g: (g.uop, None),  # the gradient stays on the output's device (cross-device: not yet)
    Ops.REDUCE_AXIS: _reduce_grad,
    Ops.AFTER: _custom_kernel_grad,
    Ops.DETACH: _detach_grad,
    Ops.INDEX: _index_grad,
    **{op: _movement_grad for op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP)},
}

NO_GRADIENT = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV, Ops.MOD,
               Ops.BITCAST, Ops.BUFFER, Ops.CONST, Ops.RANGE, Ops.DEFINE_VAR, Ops.BIND}


def compute_gradients(root: UOp, root_grad: UOp, targets: list[UOp], device: str) -> dict[UOp, UOp]:
    """Gradients of ``root`` (seeded with ``root_grad``) with respect to each of ``targets`` reached."""
    from tgcore.tensor import Tensor
    nodes = root.toposort
    wanted = set(targets)
    # only walk nodes that lead to a target
    leads: dict[UOp, bool] = {}
    for n in nodes:
        through = n.src[1:] if n.op is Ops.DETACH else n.src  # (a DETACH's own value passes no gradient)
        leads[n] = n in wanted or (n.op not in NO_GRADIENT and any(leads[s] for s in through))
    grads: dict[UOp, UOp] = {root: root_grad}
    for n in reversed(list(nodes)):
        g = grads.get(n)
        if g is None or not leads[n] or n.op in NO_GRADIENT or not n.src:
            continue
        rule = GRADIENT_RULES.get(n.op)
        if rule is None:
            raise NotImplementedError(f"no gradient rule for {n.op}")
        for s, sg in zip(n.src, rule(n, Tensor(g, device=device)), strict=False):
            if sg is None or not leads.get(s, False):
                continue
            grads[s] = sg if s not in grads else (Tensor(grads[s], device=device) + Tensor(sg, device=device)).uop
    return {t: grads[t] for t in targets if t in grads}

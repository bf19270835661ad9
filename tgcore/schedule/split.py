"""Split large reductions with small outputs into two stages, so they use every core and SIMD lane.

In:  tensor-level UOps.
Out: the same graph where a ``REDUCE_AXIS`` over R elements with a small output becomes a
     reduction to ``(chunks, lanes)`` partial results (each chunk a contiguous run of the
     input, ``lanes`` neighbouring elements kept apart so they vectorize), followed by a
     reduction of the partials. Other nodes are untouched.
"""
from __future__ import annotations

from tgcore.helpers import prod
from tgcore.uop import Ops, UOp
from tgcore.uop.shape import shape_of

MIN_REDUCE = 1 << 15   # reductions smaller than this run fine in one loop
MAX_OUTPUT = 64        # outputs larger than this already have enough parallel work
LANES = 8
CHUNK_CHOICES = (64, 32, 16, 8, 4, 2)


def _movement(op: Ops, src: UOp, arg: tuple) -> UOp:
    return UOp(op, src.dtype, (src,), arg)


def split_reduce(node: UOp) -> UOp | None:
    """The two-stage form of ``node`` (a REDUCE_AXIS), or None when one stage is right."""
    op, axes = node.arg
    src = node.src[0]
    in_shape = shape_of(src)
    size = prod(in_shape[a] for a in axes)
    out_shape = shape_of(node)
    if size < MIN_REDUCE or prod(out_shape) > MAX_OUTPUT:
        return None
    lanes = LANES if size % LANES == 0 else 1
    chunks = next((c for c in CHUNK_CHOICES if size % (c * lanes) == 0), None)
    if chunks is None:
        return None
    kept = [i for i in range(len(in_shape)) if i not in axes]
    order = tuple(kept + list(axes))
    x = _movement(Ops.PERMUTE, src, order) if order != tuple(range(len(in_shape))) else src
    kept_shape = tuple(in_shape[i] for i in kept)
    x = _movement(Ops.RESHAPE, x, kept_shape + (chunks, size // (chunks * lanes), lanes))
    n = len(kept_shape)
    partial = UOp(Ops.REDUCE_AXIS, node.dtype, (x,), (op, (n + 1,)))          # (kept, chunks, 1, lanes)
    total = UOp(Ops.REDUCE_AXIS, node.dtype, (partial,), (op, (n, n + 2)))  # (kept, 1, 1, 1)
    return _movement(Ops.RESHAPE, total, out_shape)


def split_large_reductions(roots: list[UOp]) -> dict[UOp, UOp]:
    """For each root, the root of the rewritten graph (the root itself when nothing changed)."""
    sink = UOp.sink(*roots)
    mapping = {}
    for n in sink.toposort:
        if n.op is Ops.REDUCE_AXIS:
            split = split_reduce(n)
            if split is not None:
                mapping[n] = split
    if not mapping:
        return {r: r for r in roots}
    new_sink = sink.substitute(mapping)
    return dict(zip(roots, new_sink.src, strict=True))

"""Kernel-level rewrites chosen per renderer, and facts about a kernel.

- ``emulate_floats``: do float16/bfloat16 arithmetic in float32, rounding after every op,
  for renderers without native narrow-float arithmetic.
- ``kernel_name``, ``estimate_cost``: a readable name and ops/bytes estimates for stats.
"""
from __future__ import annotations

from tgcore.dtype import DType, dtypes
from tgcore.helpers import prod
from tgcore.uop import GroupOp, Ops, RangeKind, UOp


def _range_size(r: UOp) -> int:
    end = r.src[0]
    return int(end.arg if end.op is Ops.CONST else end.vmax)


def loop_ranges(ast: UOp) -> list[UOp]:
    return [u for u in ast.toposort if u.op is Ops.RANGE]


def emulate_floats(ast: UOp, emulated: frozenset[DType]) -> UOp:
    """ALU ops on ``emulated`` dtypes computed in float32, cast back after each op."""
    new: dict[UOp, UOp] = {}
    f32 = dtypes.float32
    for u in ast.toposort:
        src = tuple([new[s] for s in u.src])
        if u.op in GroupOp.ALU and any(s.dtype in emulated for s in u.src):
            wide = tuple(s.cast(f32) if s.dtype in emulated else s for s in src)
            out_dt = u.dtype
            if u.op is Ops.WHERE:
                res = UOp(u.op, f32, wide)
            elif u.op in GroupOp.Comparison:
                res = UOp(u.op, out_dt, wide)
            else:
                res = UOp(u.op, f32, wide, u.arg)
            new[u] = res.cast(out_dt) if res.dtype is not out_dt else res
        else:
            new[u] = u if src == u.src else u.replace(src=src)
    return new[ast]


def kernel_name(ast: UOp) -> str:
    """``E_<output dims>`` for elementwise kernels, ``r_<output dims>_<reduce dims>`` with reductions."""
    ranges = loop_ranges(ast)
    out = [str(_range_size(r)) for r in ranges if r.arg.kind in (RangeKind.GLOBAL, RangeKind.THREAD)]
    red = [str(_range_size(r)) for r in ranges if r.arg.kind is RangeKind.REDUCE]
    prefix = "r" if red else "E"
    return "_".join([prefix, *(out or ["1"]), *red])


def estimate_cost(ast: UOp) -> tuple[int, int]:
    """(arithmetic operations, bytes loaded and stored), counting each loop iteration."""
    ops = mem = 0
    for u in ast.toposort:
        trips = prod(_range_size(r) for r in u.ranges)
        if u.op in GroupOp.ALU:
            ops += trips
        elif u.op in (Ops.LOAD, Ops.STORE):
            dt: DType = u.dtype if u.op is Ops.LOAD else u.src[1].dtype
            mem += trips * dt.itemsize
    return ops, mem

"""Operands of the scalar rules: a UOp's value as a register, an immediate or a memory operand.

In:  the emitter (its values, the kernel's facts) and a UOp. Out: registers, immediates, ``VMem`` operands; constants
     are materialized and arguments reloaded where used, index sums only addresses read are made at the address
     (``mem``: ``[base + index*scale + disp]``).
"""
from __future__ import annotations

from typing import Any

from tg_x86.emitter import Emitter
from tg_x86.facts import CONST
from tg_x86.isa import Op
from tg_x86.lanes import (
    ARG_OPS,
    INT_RMW_OPS,
    SelectionError,
    canon_const,
    gbits,
    is_vec,
)
from tg_x86.machine import VMem
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp


def int_value(u: UOp) -> int:
    v = u.arg
    return int(bool(v)) if u.dtype is dtypes.bool else int(v)


def materialize(ctx: Emitter, u: UOp, into: VReg | None = None) -> VReg:
    """A CONST in a register (emitted here, at its use)."""
    d = into or ctx.newv(u.dtype)
    if is_vec(u.dtype):
        op = Op.VMOVSD if u.dtype is dtypes.float64 else Op.VMOVSS
        m = ctx.fconst(u.arg, u.dtype)
        ctx.emit(op, [d], [m], (("d", 0, 128), ("u", 0, None)))
    else:
        ctx.mov_imm(d, canon_const(u), gbits(u.dtype))
    return d


def reg(ctx: Emitter, u: UOp) -> VReg:
    v = ctx.val.get(u)
    if v is not None:   # constants, and arguments read where used, have no value
        return v
    if u.op is CONST:
        return materialize(ctx, u)
    if u in ctx.facts.in_address:   # only addresses read it (plan_addresses), yet one needs it: made here
        return int_binary(ctx, u, Op.ADD)
    if ctx.remat_args and u.op in ARG_OPS:
        key = (u, ctx.region)   # reloaded once per straight-line region (a label starts a new one)
        v = ctx.remat_cache.get(key)
        if v is None:
            v = ctx.remat_cache[key] = ctx.arg_value(u)
            ctx.remat_loads[v] = u
            ctx.reload_at.append(len(ctx.prog) - 1)
        return v
    raise SelectionError(f"x86: no value for {u.op.name} {u.dtype}")


def int_operand(ctx: Emitter, u: UOp, bits: int) -> Any:
    """An immediate when the constant fits the instruction, else a register."""
    if u.op is CONST and not is_vec(u.dtype):
        v = canon_const(u)
        if -(1 << 31) <= v < (1 << 31) or (bits == 32 and v < (1 << 32)):
            return v
    return reg(ctx, u)


def in_memory(ctx: Emitter, u: UOp) -> bool:
    """Is a float scalar read as a memory operand (a constant's frame slot, a folded load)?"""
    return u.op is Ops.CONST or u in ctx.facts.folded


def float_reg(ctx: Emitter, u: UOp) -> VReg:
    """A float scalar in a register (a constant or a folded load is loaded here)."""
    o = float_operand(ctx, u)
    return ctx.reg_from(o, u.dtype) if type(o) is VMem else o


def float_operand(ctx: Emitter, u: UOp) -> Any:
    """A constant's frame slot or a folded load (memory operands), else a register."""
    if u.op is Ops.CONST:
        return ctx.fconst(u.arg, u.dtype)
    if u in ctx.facts.folded:
        return mem(ctx, u.src[0], 64 if u.dtype is dtypes.float64 else 32)
    return reg(ctx, u)


def mem(ctx: Emitter, idx: UOp, bits: int) -> VMem:
    """The element ``idx`` points at (``lane_offset`` elements further: lane j of a lane-by-lane vector)."""
    buf, i = idx.src[0], idx.src[1]
    base = reg(ctx, buf)
    size = buf.dtype.base.itemsize  # type: ignore[attr-defined]
    extra = ctx.lane_offset * size
    if i.op is CONST:  # VMem's fields positionally: a class called with keywords costs twice as much
        return VMem(bits, base, None, 1, int_value(i) * size + extra)
    if i.op is Ops.ADD and i.src[1].op is CONST and i.src[0].vmin >= 0 and i.src[0].dtype.count == 1:
        disp = int_value(i.src[1]) * size + extra
        if -(1 << 31) <= disp < (1 << 31):
            return VMem(bits, base, index_reg(ctx, i.src[0]), size, disp)
    return VMem(bits, base, index_reg(ctx, i), size, extra)


def index_reg(ctx: Emitter, i: UOp) -> VReg:
    if i.dtype.itemsize < 4:
        raise SelectionError(f"x86: index of dtype {i.dtype}")
    return reg(ctx, i)


def int_binary(ctx: Emitter, u: UOp, xop: Op) -> VReg:
    """``d = a op b`` with ``xop``: ADD as lea, MUL by an immediate as three-operand imul, constants as
    immediates (a constant first operand swapped to the second where the op commutes)."""
    op, dt = u.op, u.dtype
    bits = gbits(dt)
    a, b = u.src
    if a.op is CONST and b.op is not CONST and op is not Ops.SUB:
        a, b = b, a
    d = ctx.new("gpr")
    rb = int_operand(ctx, b, bits)
    if xop is Op.ADD and op is Ops.ADD and (not isinstance(rb, int) or -(1 << 31) <= rb < (1 << 31)):
        m = VMem(None, reg(ctx, a), None, 1, rb) if isinstance(rb, int) else VMem(None, reg(ctx, a), rb)
        ctx.emit(Op.LEA, [d], [m], (("d", 0, bits), ("u", 0, None)))
    elif xop is Op.IMUL and isinstance(rb, int):
        if -(1 << 31) <= rb < (1 << 31):
            ctx.emit(Op.IMUL3, [d], [reg(ctx, a)], (("d", 0, bits), ("u", 0, bits), ("i", rb)))
        else:
            ctx.alu2(Op.IMUL, d, reg(ctx, a), reg(ctx, b), bits)
    else:
        ctx.alu2(xop, d, reg(ctx, a), rb, bits)
    if op in INT_RMW_OPS:
        ctx.canon(d, dt)
    return d

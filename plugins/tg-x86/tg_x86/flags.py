"""Comparisons and the flags: a compare's flags shared by the WHEREs and gates that read them while they hold.

In:  the emitter and a comparison (or a gate). Out: a cmp/vucomis when the flags do not hold it already, and
     the condition to read (``compare``: ("c", cond), or ("eq",)/("ne",) for float ==/!=); a bool where one is needed.
"""
from __future__ import annotations

from tg_x86.emitter import Emitter, operand_layout
from tg_x86.facts import gate_fuses
from tg_x86.isa import Cond, Op
from tg_x86.lanes import gbits, int_cond, is_vec
from tg_x86.machine import VMem
from tg_x86.values import float_operand, int_operand, int_value, reg
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp


def flags_to_bool(ctx: Emitter, kind: tuple) -> VReg:
    d = ctx.new("gpr")
    if kind[0] == "c":
        ctx.setcc(d, kind[1])
    else:
        t = ctx.new("gpr")
        ctx.setcc(d, Cond.E if kind[0] == "eq" else Cond.NE)
        ctx.setcc(t, Cond.NP if kind[0] == "eq" else Cond.P)
        ctx.alu2(Op.AND if kind[0] == "eq" else Op.OR, d, d, t, 8)
    ctx.emit(Op.MOVZX, [d], [d], (("d", 0, 32), ("u", 0, 8)))
    return d


def compare(ctx: Emitter, u: UOp) -> tuple:
    """The flags of comparison ``u``: the last compare's when it compared the same two values and nothing
    since wrote the flags (``flags_live``), else a new cmp/vucomis. Returns ("c", cond), or ("eq",)/("ne",)
    for float ==/!= (ZF and PF)."""
    a, b = u.src
    kind = shared_flags(ctx, u)
    if kind is not None:
        return kind
    dt = a.dtype
    if is_vec(dt):
        op = Op.VUCOMISD if dt is dtypes.float64 else Op.VUCOMISS
        if u.op is Ops.CMPLT:  # a < b  <=>  b > a (unordered: false)
            ra, rb = reg(ctx, a), float_operand(ctx, b)
            rb = rb if not isinstance(rb, VMem) else ctx.reg_from(rb, dt)
            ctx.emit(op, [], [rb, ra], (("u", 0, 128), ("u", 1, 128)))
            ctx.flags = (b, a, len(ctx.prog) - 1)
            return ("c", Cond.A)
        ra, rb = reg(ctx, a), float_operand(ctx, b)
        ctx.emit(op, [], [ra, rb], (("u", 0, 128), operand_layout(1, rb, 128)))
        ctx.flags = (a, b, len(ctx.prog) - 1)
        return ("eq",) if u.op is Ops.CMPEQ else ("ne",)
    bits = gbits(dt)
    swapped = a.op is Ops.CONST and b.op is not Ops.CONST  # c < x is compared as x > c: an immediate operand
    x, y = (b, a) if swapped else (a, b)
    rx = reg(ctx, x)
    ry = int_operand(ctx, y, bits)
    ctx.emit(Op.CMP, [], [rx] + ([] if isinstance(ry, int) else [ry]),
              (("u", 0, bits), operand_layout(1, ry, bits)))
    ctx.flags = (x, y, len(ctx.prog) - 1)
    return ("c", int_cond(u.op, dt, swapped))


def shared_flags(ctx: Emitter, u: UOp) -> tuple | None:
    """The kind ``compare`` returns for ``u`` read from the flags the last compare left, when they still hold
    and that compare compared u's two values (either way round for ints and float ==/!=; float < needs
    ``vucomis b, a``)."""
    st = ctx.flags
    if st is None:
        return None
    x, y, pos = st
    a, b = u.src
    if not ((x is a and y is b) or (x is b and y is a)) or not ctx.flags_live(pos):
        return None
    if is_vec(a.dtype):
        if u.op is Ops.CMPLT:
            return ("c", Cond.A) if x is b and y is a else None
        return ("eq",) if u.op is Ops.CMPEQ else ("ne",)
    return ("c", int_cond(u.op, a.dtype, x is not a))










def near_flags(ctx: Emitter, gate: UOp) -> Cond | None:
    """For a gate ``c < x`` or ``x < c`` (signed ints, c a constant): the condition that holds when it is false
    read from the live flags of a ``cmp x, k`` with k one nearer (``c < x`` is ``x >= c+1``, ``x < c`` is
    ``x <= c-1``): the lanes of a padded vector are gated by such neighbours (x > 2, x > 1, ...)."""
    st = ctx.flags
    if st is None or gate.op is not Ops.CMPLT:
        return None
    x, k, pos = st
    a, b = gate.src
    if k.op is not Ops.CONST or not (b is x and a.op is Ops.CONST or a is x and b.op is Ops.CONST):
        return None
    dt = x.dtype
    if dt not in (dtypes.int32, dtypes.int64) or not ctx.flags_live(pos):
        return None
    kv = int_value(k)
    if b is x and int_value(a) + 1 == kv:   # c < x: x >= k
        return Cond.L
    if a is x and int_value(b) - 1 == kv:   # x < c: x <= k
        return Cond.G
    return None


def gate_off(ctx: Emitter, gate: UOp) -> Cond:
    """The condition that holds when ``gate`` is false: its compare's flags (shared while they hold, see
    ``compare``) negated, else a test of the bool."""
    if gate_fuses(gate):
        near = near_flags(ctx, gate)
        return near if near is not None else compare(ctx, gate)[1].negate()
    tested = ctx.tested
    if tested is not None and tested[0] is gate and ctx.flags_live(tested[1]):
        return Cond.E   # the last test was of this gate and its flags still hold (accesses of one reduction)
    g = reg(ctx, gate)
    ctx.emit(Op.TEST, [], [g, g], (("u", 0, 32), ("u", 1, 32)))
    ctx.tested = (gate, len(ctx.prog) - 1)
    return Cond.E

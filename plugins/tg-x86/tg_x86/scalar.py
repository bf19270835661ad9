"""Scalar arithmetic and loops: the functions of the integer and float rules of ``isel.SCALAR_ISEL``.

In:  the emitter and one UOp. Out: its instructions, and the value's register (returned: the rule records it).
     Integers in gprs (idiv/div through rax/rdx, shifts by cl, max as cmp + cmov), floats in xmm lane 0 (memory
     operands for constants and folded loads), ``a*b + c`` as one FMA where the facts fused them; a RANGE opens a
     loop (counter, limit, guard; a thread range takes its core's chunk), END closes it.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Any

from tg_x86.divconst import const_divisor, divide_by_const
from tg_x86.emitter import Emitter, operand_layout
from tg_x86.facts import where_fuses
from tg_x86.flags import compare
from tg_x86.isa import Cond, Op
from tg_x86.lanes import (
    ADD_MUL,
    CMP_EQ_OQ,
    CMP_LT_OS,
    CMP_NEQ_UQ,
    CMP_OPS,
    CMP_UNORD_Q,
    FLOAT_ARITH,
    TRUNC_IMM,
    fop,
    frame_mem,
    gbits,
)
from tg_x86.machine import RAX, RCX, RDX, VMem
from tg_x86.operands import Label
from tg_x86.values import (
    float_operand,
    float_reg,
    in_memory,
    int_operand,
    int_value,
    materialize,
    reg,
)
from tgcore.codegen.regalloc import LoopEnd, LoopStart, VReg
from tgcore.dtype import DType, dtypes
from tgcore.uop import Ops, RangeKind, UOp


def fma_order(ctx: Emitter, a: UOp, b: UOp, c: UOp, mul: UOp, at: UOp,
              in_memory: Callable[[UOp], bool]) -> tuple[str, UOp, UOp, UOp]:
    """The vfmadd form computing ``a*b + c`` at line ``at`` (``mul``: the line reading a and b, ``at`` itself for
    MULACC) and the sources in its operand order. vfmadd132 is ``x = x*z + y``, 213 ``x = y*x + z``, 231
    ``x = y*z + x``. Only the last operand may be memory: a source ``in_memory`` (a constant or a folded load)
    goes there, a multiplicand first. The first is overwritten: a source whose value dies here when there is
    one (so no copy is made before the FMA), the addend first."""
    if in_memory(a) and not in_memory(b):
        a, b = b, a

    def free(x: UOp, user: UOp) -> bool:
        """May the FMA overwrite x's register with no copy first? A source in memory is loaded into a fresh
        one; a register must die here and be no other operand."""
        return in_memory(x) or (ctx.facts.dies_at(x, user, at) and sum(s is x for s in (a, b, c)) == 1)
    if in_memory(b):
        return ("231", c, a, b) if free(c, at) or not free(a, mul) else ("132", a, c, b)
    if in_memory(c):
        return ("213", b, a, c) if free(b, mul) and not free(a, mul) else ("213", a, b, c)
    if free(c, at):
        return "231", c, a, b
    if free(a, mul):
        return "213", a, b, c
    if free(b, mul):
        return "213", b, a, c
    return "231", c, a, b


# ---- loops ----
def thread_split(u: UOp) -> int | None:
    """How many cores RANGE ``u`` is split over when it is a thread range, else None. (The one place the plugin reads
    a RANGE's arg, a ``tgcore.uop.AxisArg``.)"""
    return u.arg.threads if u.arg.kind is RangeKind.THREAD else None


def open_loop(ctx: Emitter, u: UOp) -> None:
    """A loop's counter from 0 (a thread range: from this core's chunk) to its limit, guarded when the limit may be
    0 or less."""
    end = u.src[0]
    bits = gbits(u.dtype)
    i = ctx.new("gpr")
    top, exit_ = Label(f"loop{len(ctx.loops)}"), Label(f"exit{len(ctx.loops)}")
    guard = True
    n = thread_split(u)
    if n is not None:
        core = ctx.new("gpr")
        ctx.emit(Op.MOV, [core], [frame_mem((32, "arg", ctx.facts.core_arg))], (("d", 0, 32), ("u", 0, None)))
        if end.op is Ops.CONST:
            chunk: Any = (int_value(end) + n - 1) // n
            ctx.emit(Op.IMUL3, [i], [core], (("d", 0, bits), ("u", 0, bits), ("i", chunk)))
        else:
            rend = reg(ctx, end)
            ctx.emit(Op.MOV, [RAX], [rend], (("d", 0, 32), ("u", 0, 32)))
            ctx.alu2(Op.ADD, RAX, RAX, n - 1, 32)
            ctx.mov_imm(RCX, n, 32)
            ctx.mov_imm(RDX, 0, 32)
            ctx.emit(Op.DIV, [RAX, RDX], [RAX, RDX, RCX], (("u", 2, 32),))
            chunk = ctx.new("gpr")
            ctx.emit(Op.MOV, [chunk], [RAX], (("d", 0, 32), ("u", 0, 32)))
            ctx.copy(i, core)
            ctx.alu2(Op.IMUL, i, i, chunk, 32)
        stop = ctx.new("gpr")
        ctx.copy(stop, i)
        ctx.alu2(Op.ADD, stop, stop, chunk, bits)
        rend = reg(ctx, end)
        ctx.emit(Op.CMP, [], [stop, rend], (("u", 0, bits), ("u", 1, bits)))
        ctx.emit(Op.CMOVCC, [stop], [stop, rend], (("d", 0, bits), ("u", 1, bits)), two=True, cond=Cond.G)
        limit: Any = stop
    else:
        ctx.mov_imm(i, 0, bits)
        limit = int_operand(ctx, end, bits)
        guard = not (isinstance(limit, int) and limit > 0)
    if guard:
        cmp_limit(ctx, i, limit, bits)
        ctx.jump(exit_, Cond.GE)
    ctx.prog.append(LoopStart(top))
    ctx.label(top)
    ctx.val[u] = i
    ctx.loops.append((i, limit, top, exit_, bits))


def cmp_limit(ctx: Emitter, i: VReg, limit: Any, bits: int) -> None:
    uses = [i] if isinstance(limit, int) else [i, limit]
    ctx.emit(Op.CMP, [], uses, (("u", 0, bits), operand_layout(1, limit, bits)))


def close_loop(ctx: Emitter) -> None:
    i, limit, top, exit_, bits = ctx.loops.pop()
    ctx.alu2(Op.ADD, i, i, 1, bits)
    cmp_limit(ctx, i, limit, bits)
    ctx.jump(top, Cond.L)
    ctx.prog.append(LoopEnd(top))
    ctx.label(exit_)


# ---- integer ALU (one function per rule of SCALAR_ISEL) ----
def int_max(ctx: Emitter, u: UOp) -> VReg:
    dt = u.dtype
    bits = gbits(dt)
    a, b = reg(ctx, u.src[0]), reg(ctx, u.src[1])
    ctx.emit(Op.CMP, [], [a, b], (("u", 0, bits), ("u", 1, bits)))
    d = ctx.new("gpr")
    cond = Cond.A if dtypes.is_unsigned(dt) or dt is dtypes.bool else Cond.G
    ctx.emit(Op.CMOVCC, [d], [b, a], (("d", 0, bits), ("u", 1, bits)), two=True, cond=cond)
    return d


def int_neg(ctx: Emitter, u: UOp) -> VReg:
    dt = u.dtype
    d = ctx.new("gpr")
    if dt is dtypes.bool:
        ctx.alu2(Op.XOR, d, reg(ctx, u.src[0]), 1, 32)
    else:
        ctx.emit(Op.NEG, [d], [reg(ctx, u.src[0])], (("d", 0, gbits(dt)),), two=True)
        ctx.canon(d, dt)
    return d


def int_mulacc(ctx: Emitter, u: UOp) -> VReg:
    dt = u.dtype
    bits = gbits(dt)
    a, b, c = u.src
    t = ctx.new("gpr")
    ctx.alu2(Op.IMUL, t, reg(ctx, a), reg(ctx, b), bits)
    d = ctx.new("gpr")
    ctx.alu2(Op.ADD, d, t, int_operand(ctx, c, bits), bits)
    ctx.canon(d, dt)
    return d


def divide(ctx: Emitter, u: UOp) -> VReg:
    """x/0 = x%0 = 0; INT_MIN/-1 wraps. A constant divisor multiplies and shifts (``divconst``); else divisors 0
    and -1 divide by 1, and the quotient is then a*b."""
    if (c := const_divisor(u)) is not None:
        return divide_by_const(ctx, u, c)
    dt = u.dtype
    bits = gbits(dt)
    a, b = reg(ctx, u.src[0]), reg(ctx, u.src[1])
    d = ctx.new("gpr")
    r = (("d", 0, bits),)
    if dtypes.is_unsigned(dt) or dt is dtypes.bool:
        ctx.mov_imm(RCX, 1, bits)
        ctx.emit(Op.TEST, [], [b, b], (("u", 0, bits), ("u", 1, bits)))
        ctx.emit(Op.CMOVCC, [RCX], [RCX, b], (*r, ("u", 1, bits)), two=True, cond=Cond.NE)
        ctx.emit(Op.MOV, [RAX], [a], (*r, ("u", 0, bits)))
        ctx.mov_imm(RDX, 0, bits)
        ctx.emit(Op.DIV, [RAX, RDX], [RAX, RDX, RCX], (("u", 2, bits),))
        if u.op is Ops.IDIV:
            ctx.emit(Op.TEST, [], [b, b], (("u", 0, bits), ("u", 1, bits)))
            ctx.emit(Op.CMOVCC, [RAX], [RAX, b], (*r, ("u", 1, bits)), two=True, cond=Cond.E)
    else:
        def special() -> None:  # flags: below-or-equal when b is 0 or -1
            ctx.emit(Op.LEA, [RCX], [VMem(None, b, disp=1)], (*r, ("u", 0, None)))
            ctx.emit(Op.CMP, [], [RCX], (("u", 0, bits), ("i", 1)))
        special()
        ctx.mov_imm(RCX, 1, bits)
        ctx.emit(Op.CMOVCC, [RCX], [RCX, b], (*r, ("u", 1, bits)), two=True, cond=Cond.A)
        ctx.emit(Op.MOV, [RAX], [a], (*r, ("u", 0, bits)))
        ctx.emit(Op.CQO if bits == 64 else Op.CDQ, [RDX], [RAX], ())
        ctx.emit(Op.IDIV, [RAX, RDX], [RAX, RDX, RCX], (("u", 2, bits),))
        if u.op is Ops.IDIV:
            ctx.emit(Op.MOV, [RDX], [a], (*r, ("u", 0, bits)))
            ctx.emit(Op.IMUL, [RDX], [RDX, b], (*r, ("u", 1, bits)), two=True)
            special()
            ctx.emit(Op.CMOVCC, [RAX], [RAX, RDX], (*r, ("u", 1, bits)), two=True, cond=Cond.BE)
    ctx.emit(Op.MOV, [d], [RAX if u.op is Ops.IDIV else RDX], (*r, ("u", 0, bits)))
    ctx.canon(d, dt)
    return d


def shift(ctx: Emitter, u: UOp) -> VReg:
    """Shift amounts outside 0..width-1 give 0 (SHL, unsigned SHR) or the sign (signed SHR)."""
    dt = u.dtype
    bits = gbits(dt)
    width = dt.itemsize * 8
    signed = not dtypes.is_unsigned(dt) and dt is not dtypes.bool
    xop = Op.SHL if u.op is Ops.SHL else (Op.SAR if signed else Op.SHR)
    a, n = u.src
    ra = reg(ctx, a)
    d = ctx.new("gpr")
    if n.op is Ops.CONST and 0 <= int_value(n) < width:
        ctx.alu2(xop, d, ra, int_value(n), bits)
    else:
        rn = reg(ctx, n)
        nbits = gbits(n.dtype)
        ctx.emit(Op.MOV, [RCX], [rn], (("d", 0, nbits), ("u", 0, nbits)))
        ctx.emit(xop, [d], [ra, RCX], (("d", 0, bits), ("u", 1, 8)), two=True)
        if xop is Op.SAR:
            ctx.emit(Op.MOV, [RAX], [ra], (("d", 0, bits), ("u", 0, bits)))
            ctx.alu2(Op.SAR, RAX, RAX, bits - 1, bits)
        else:
            ctx.mov_imm(RAX, 0, bits)
        ctx.emit(Op.CMP, [], [rn], (("u", 0, nbits), ("i", width)))
        ctx.emit(Op.CMOVCC, [d], [d, RAX], (("d", 0, bits), ("u", 1, bits)), two=True, cond=Cond.AE)
    if u.op is Ops.SHL:
        ctx.canon(d, dt)
    return d


# ---- where ----
def where_blend(ctx: Emitter, u: UOp) -> VReg:
    """A float WHERE: a vcmp mask of its comparison (or the bool widened to a mask) and vblendv."""
    c, x, y = u.src
    dt = u.dtype
    rx, ry = reg(ctx, x), reg(ctx, y)
    m = ctx.new("vec")
    if where_fuses(dt, c):
        pred = {Ops.CMPLT: CMP_LT_OS, Ops.CMPEQ: CMP_EQ_OQ, Ops.CMPNE: CMP_NEQ_UQ}[c.op]
        ra, rb = reg(ctx, c.src[0]), float_operand(ctx, c.src[1])
        ctx.vop3(fop("VCMP", c.src[0].dtype), m, ra, rb, (("i", pred),))
    else:
        t = ctx.new("gpr")
        ctx.copy(t, reg(ctx, c))
        ctx.emit(Op.NEG, [t], [t], (("d", 0, 64),), two=True)
        ctx.emit(Op.VMOVQ, [m], [t], (("d", 0, 128), ("u", 0, 64)))
    d = ctx.new("vec")
    blend = Op.VBLENDVPD if dt is dtypes.float64 else Op.VBLENDVPS
    ctx.emit(blend, [d], [ry, rx, m], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128), ("u", 2, 128)))
    return d


def where_cmov(ctx: Emitter, u: UOp) -> VReg:
    """An integer WHERE: cmov on its comparison's flags (``compare``: the last cmp's while they hold, else
    compared again here, so no WHERE of a compare needs a bool), or on a test of the bool."""
    c, x, y = u.src
    dt = u.dtype
    bits = max(gbits(dt), 32)
    rx, ry = reg(ctx, x), reg(ctx, y)
    if c.op in CMP_OPS:
        kind = compare(ctx, c)
    else:
        rc = reg(ctx, c)
        ctx.emit(Op.TEST, [], [rc, rc], (("u", 0, 32), ("u", 1, 32)))
        kind = ("c", Cond.NE)
    d = ctx.new("gpr")
    lay = (("d", 0, bits), ("u", 1, bits))
    if kind[0] == "c":
        ctx.emit(Op.CMOVCC, [d], [ry, rx], lay, two=True, cond=kind[1])
    elif kind[0] == "eq":
        ctx.emit(Op.CMOVCC, [d], [ry, rx], lay, two=True, cond=Cond.E)
        ctx.emit(Op.CMOVCC, [d], [d, ry], lay, two=True, cond=Cond.P)
    else:
        ctx.emit(Op.CMOVCC, [d], [ry, rx], lay, two=True, cond=Cond.NE)
        ctx.emit(Op.CMOVCC, [d], [d, rx], lay, two=True, cond=Cond.P)
    return d


def where_minmax(ctx: Emitter, u: UOp, name: str) -> VReg:
    """``(p<q).where(a, b)`` with a, b the compared values: ``vminss a, b`` or ``vmaxss a, b`` (see min_or_max)."""
    _, a, b = u.src
    d = ctx.new("vec")
    ctx.vop3(fop(name, u.dtype), d, reg(ctx, a), float_operand(ctx, b))
    return d


# ---- float ALU (one function per rule of SCALAR_ISEL) ----
def float_arith(ctx: Emitter, u: UOp) -> VReg:
    """``d = a op b`` (vaddss ...): b may be a constant's frame slot or a folded load."""
    op, dt = u.op, u.dtype
    d = ctx.new("vec")
    a, b = u.src
    if (a.op is Ops.CONST or a in ctx.facts.folded) and b.op is not Ops.CONST and op in ADD_MUL:
        a, b = b, a
    ctx.vop3(fop(FLOAT_ARITH[op], dt), d, reg(ctx, a), float_operand(ctx, b))
    return d


def float_max(ctx: Emitter, u: UOp) -> VReg:
    """(a != a || a > b) ? a : b: NaN propagates."""
    dt = u.dtype
    d = ctx.new("vec")
    a = reg(ctx, u.src[0])
    t, m = ctx.new("vec"), ctx.new("vec")
    ctx.vop3(fop("VMAX", dt), t, a, float_operand(ctx, u.src[1]))
    ctx.vop3(fop("VCMP", dt), m, a, a, (("i", CMP_UNORD_Q),))
    blend = Op.VBLENDVPD if dt is dtypes.float64 else Op.VBLENDVPS
    ctx.emit(blend, [d], [t, a, m], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128), ("u", 2, 128)))
    return d


def float_neg(ctx: Emitter, u: UOp) -> VReg:
    dt = u.dtype
    d = ctx.new("vec")
    sign = struct.pack("<Q", 1 << 63) if dt is dtypes.float64 else struct.pack("<I", 1 << 31)
    ctx.vop3(Op.VXORPS, d, reg(ctx, u.src[0]), ctx.const_mem(sign, 128))
    return d


def float_sqrt(ctx: Emitter, u: UOp) -> VReg:
    d = ctx.new("vec")
    a = reg(ctx, u.src[0])
    ctx.vop3(fop("VSQRT", u.dtype), d, a, a)
    return d


def float_reciprocal(ctx: Emitter, u: UOp) -> VReg:
    dt = u.dtype
    d = ctx.new("vec")
    one = materialize(ctx, UOp.const(dt, 1.0))
    ctx.vop3(fop("VDIV", dt), d, one, reg(ctx, u.src[0]))
    return d


def float_trunc(ctx: Emitter, u: UOp) -> VReg:
    d = ctx.new("vec")
    a = reg(ctx, u.src[0])
    ctx.vop3(fop("VROUND", u.dtype), d, a, a, (("i", TRUNC_IMM),))
    return d


def float_fma(ctx: Emitter, u: UOp) -> VReg:
    """A fused ADD (``plan_fma``): its MUL's a*b + the other source, one FMA."""
    c, mul = ctx.facts.fma_adds[u]
    a, b = mul.src
    return fma(ctx, u.dtype, a, b, c, mul, u)


def float_mulacc(ctx: Emitter, u: UOp) -> VReg:
    a, b, c = u.src
    return fma(ctx, u.dtype, a, b, c, u, u)


def fma(ctx: Emitter, dt: DType, a: UOp, b: UOp, c: UOp, mul: UOp, at: UOp) -> VReg:
    """a*b + c rounded once: one vfmadd{132,213,231}s[sd] of the form ``fma_order`` picks."""
    form, x, y, z = fma_order(ctx, a, b, c, mul, at, partial(in_memory, ctx))
    d = ctx.new("vec")
    rx, ry, rz = float_reg(ctx, x), float_reg(ctx, y), float_operand(ctx, z)
    ctx.emit(fop("VFMADD" + form, dt), [d], [rx, ry, rz],
              (("d", 0, 128), ("u", 1, 128), operand_layout(2, rz, 128)), two=True)
    return d

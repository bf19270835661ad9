"""Scalar loads and stores, and gated accesses without a branch.

In:  the emitter and a LOAD/STORE (or an index and a dtype). Out: the moves, widening narrow types and narrow
     floats; a gated access goes through an address a cmov switches to a frame slot when the gate is false
     (``gated_mem``: zeros for loads, a sink for stores); a float load with one user folds into it.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable
from functools import partial

from tg_x86.emitter import Emitter
from tg_x86.facts import define_reg, is_reg_index
from tg_x86.flags import gate_off
from tg_x86.isa import Op
from tg_x86.lanes import (
    _SOURCES,
    F16_ROUND,
    GATED_SHARE,
    HELD_GPRS,
    NARROW_FLOATS,
    at_address,
    frame_mem,
    is_vec,
)
from tg_x86.machine import VMem
from tg_x86.operands import Label
from tg_x86.values import int_operand, materialize, mem, reg
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import DType, dtypes
from tgcore.uop import Ops, UOp


def prefetch(ctx: Emitter, x: UOp) -> None:
    """A prefetcht0 of the data the load ``x`` will read ``facts.prefetch[x]`` bytes further, where it has one;
    returns None either way, so the load rules select ``x`` itself next."""
    ahead = ctx.facts.prefetch.get(x)
    if ahead is not None:
        m = mem(ctx, x.src[0], 8)
        ctx.emit(Op.PREFETCHT0, [], [VMem(8, m.base, m.index, m.scale, m.disp + ahead)], (("u", 0, None),))


def load(ctx: Emitter, u: UOp) -> None:
    idx = u.src[0]
    if is_reg_index(idx):
        acc = ctx.val[idx.src[0]]
        if alias_ok(ctx, u):
            ctx.val[u] = acc
        else:
            d = ctx.newv(u.dtype)
            ctx.copy(d, acc)
            ctx.val[u] = d
        return
    if u in ctx.facts.bcast_loads:   # read by the broadcast that uses it
        return
    if u in ctx.facts.folded:   # its one user reads it from memory
        return
    dt = u.dtype
    d = ctx.newv(dt)
    gate = idx.src[2] if len(idx.src) > 2 else None
    if gate is None:
        load_into(ctx, d, idx, dt)
    elif len(u.src) > 1:  # an alternative value (hand-written programs only): kept by jumping over the load
        ctx.copy(d, reg(ctx, u.src[1]))
        skip = Label("gated")
        ctx.jump(skip, gate_off(ctx, gate))
        load_into(ctx, d, idx, dt)
        ctx.label(skip)
    else:
        load_into(ctx, d, idx, dt, gated_mem(ctx, gate, idx, dt.itemsize, False, None if is_vec(dt) else d))
    ctx.val[u] = d


# ---- gated accesses: no branch, the address is switched to a dummy frame slot ----
def gated_mem(ctx: Emitter, gate: UOp, idx: UOp, span: int, store: bool, into: VReg | None = None) -> VMem:
    """Where an access of ``span`` bytes at ``idx`` under ``gate`` goes: ``idx``'s element when the gate holds, else
    a frame slot (for a load the zero slot: reads 0; for a store the sink: nothing reads it, so a later gated-off
    load still reads 0). No jump: a lea of the element's address, then a cmov taking the slot's address (held in a
    register, or read from the frame: ``dummy_address``), and the access goes through the result unconditionally (a
    gated-off one never touches the buffer). An access under the same gate at a constant distance above an earlier
    one in the region shares its address (the slot grows to cover it): one lea and cmov for the lanes of a vector
    under one gate. A gate known false gives the slot itself, one known true the element. ``into``: a gpr the access
    writes, which may hold the address until then (one register fewer; not shared)."""
    if gate.op is Ops.CONST:
        return mem(ctx, idx, 8) if gate.arg else dummy_mem(ctx, span, store)
    m = mem(ctx, idx, 8)
    key = (gate, store, m.base, m.index, m.scale, ctx.region)
    shared = ctx.gated_addrs.get(key)
    if shared is not None and 0 <= m.disp - shared[1] <= GATED_SHARE - span:
        delta = m.disp - shared[1]
        dummy_mem(ctx, delta + span, store)
        return VMem(8, shared[0], disp=delta)
    a = ctx.new("gpr") if into is None else into
    element_address(ctx, a, m)
    dummy = dummy_address(ctx, span, store)
    ctx.emit(Op.CMOVCC, [a], [a, dummy], (("d", 0, 64), ("u", 1, 64 if type(dummy) is VReg else None)), two=True,
              cond=gate_off(ctx, gate))
    if into is None:
        ctx.gated_addrs[key] = (a, m.disp)
    return VMem(8, a)


def element_address(ctx: Emitter, a: VReg, m: VMem) -> None:
    """``lea a, m`` for a gated access. The first with an index register in the region computes the element's
    address into a register kept unpicked (a copies it); later ones with the same base, index and scale add
    their distance to it (``lea a, [b + disp]``, simpler than a scaled three-part lea): the lanes of a padded
    vector under different gates."""
    if m.index is None:
        ctx.emit(Op.LEA, [a], [m.sized(None)], (("d", 0, 64), ("u", 0, None)))
        return
    key = (m.base, m.index, m.scale, ctx.region)
    known = ctx.element_addrs.get(key)
    if known is not None and -(1 << 31) <= m.disp - known[1] < (1 << 31):
        ctx.emit(Op.LEA, [a], [VMem(None, known[0], disp=m.disp - known[1])], (("d", 0, 64), ("u", 0, None)))
        return
    b = ctx.new("gpr")
    ctx.emit(Op.LEA, [b], [m.sized(None)], (("d", 0, 64), ("u", 0, None)))
    ctx.element_addrs[key] = (b, m.disp)
    ctx.copy(a, b)


def dummy_mem(ctx: Emitter, span: int, store: bool) -> VMem:
    """The sink (``store``) or the zero slot, grown to ``span`` bytes (rounded up to 32, so a vector access reads
    or writes only the slot)."""
    size = -(-span // 32) * 32
    frame = ctx.frame
    if store:
        frame.sink = max(frame.sink, size)
        return frame_mem((8, "sink", 0))
    m = ctx.const_mem(bytes(32), 8)     # shared with a 32-byte zero constant, never written
    k = m.slot.k                         # type: ignore[union-attr]
    if len(frame.consts[k]) < size:      # wider zeros: a prefix of them is still that constant
        frame.consts[k] = bytes(size)
    return m


def hold_dummies(ctx: Emitter) -> None:
    """While few gprs are held throughout (``pressure``), the address of each dummy slot the gated accesses use
    is held in a register set at the start (an lea, before any line; dropped if no access reads it); else
    each cmov reads it from a frame slot (``dummy_address``)."""
    indexes = ctx.facts.lines(Ops.INDEX)
    if max(map(len, map(_SOURCES, indexes)), default=0) < 3:   # no gate (most kernels)
        return
    for idx in indexes:
        if len(idx.src) < 3 or idx.src[2].op is Ops.CONST:
            continue
        for user in ctx.users.get(idx, ()):
            if user.op is Ops.LOAD and len(user.src) > 1:
                continue   # a load with an alternative value jumps over it: no dummy slot
            store = user.op is Ops.STORE
            if store not in ctx.dummy_held and ctx.pressure < HELD_GPRS:
                r = ctx.dummy_held[store] = ctx.new("gpr")
                ctx.pressure += 1
                ctx.emit(Op.LEA, [r], [dummy_mem(ctx, 0, store).sized(None)], (("d", 0, 64), ("u", 0, None)))


def dummy_address(ctx: Emitter, span: int, store: bool) -> VReg | VMem:
    """The address of ``dummy_mem(span, store)`` for a cmov: the register holding it (``hold_dummies``), else the
    frame slot the prologue stores it in."""
    target = dummy_mem(ctx, span, store).slot
    r = ctx.dummy_held.get(store)
    if r is not None:
        return r
    pointers = ctx.frame.pointers
    if target not in pointers:
        pointers.append(target)   # type: ignore[arg-type]
    return frame_mem((64, "pointer", pointers.index(target)))   # type: ignore[arg-type]


def alias_ok(ctx: Emitter, u: UOp) -> bool:
    """A LOAD of an accumulator may be the accumulator itself if every use comes before the next STORE."""
    acc = define_reg(u.src[0])
    here = ctx.facts.pos[u]
    stores = ctx.facts.acc_stores.get(acc, [])
    i = bisect.bisect_right(stores, here)
    nxt = stores[i] if i < len(stores) else len(ctx.uops)
    users = ctx.users.get(u)
    return not users or ctx.facts.pos[users[-1]] <= nxt   # users come in line order: the last is the latest


def load_into(ctx: Emitter, d: VReg, idx: UOp, dt: DType, at: VMem | None = None) -> None:
    """Load ``idx``'s element into ``d`` (from ``at`` instead when given: a gated load, see ``gated_mem``)."""
    size = dt.itemsize
    element = partial(mem, ctx) if at is None else at_address(at)
    if dt is dtypes.float32:
        ctx.emit(Op.VMOVSS, [d], [element(idx, 32)], (("d", 0, 128), ("u", 0, None)))
    elif dt is dtypes.float64:
        ctx.emit(Op.VMOVSD, [d], [element(idx, 64)], (("d", 0, 128), ("u", 0, None)))
    elif dt in NARROW_FLOATS:
        t = ctx.new("gpr")
        ctx.emit(Op.MOVZX, [t], [element(idx, 16)], (("d", 0, 32), ("u", 0, None)))
        if dt is dtypes.bfloat16:
            ctx.alu2(Op.SHL, t, t, 16, 32)
        ctx.emit(Op.VMOVD, [d], [t], (("d", 0, 128), ("u", 0, 32)))
        if dt is dtypes.float16:
            ctx.emit(Op.VCVTPH2PS, [d], [d], (("d", 0, 128), ("u", 0, 128)))
    elif size == 8:
        ctx.emit(Op.MOV, [d], [element(idx, 64)], (("d", 0, 64), ("u", 0, None)))
    elif size == 4:
        ctx.emit(Op.MOV, [d], [element(idx, 32)], (("d", 0, 32), ("u", 0, None)))
    else:
        op = Op.MOVZX if dtypes.is_unsigned(dt) or dt is dtypes.bool else Op.MOVSX
        ctx.emit(op, [d], [element(idx, size * 8)], (("d", 0, 32), ("u", 0, None)))


def store(ctx: Emitter, u: UOp) -> None:
    idx, value = u.src[0], u.src[1]
    if is_reg_index(idx):
        acc = ctx.val[define_reg(idx)]
        if value.op is Ops.CONST:
            materialize(ctx, value, into=acc)
        else:
            ctx.copy(acc, reg(ctx, value))
        return
    gate = idx.src[2] if len(idx.src) > 2 else None
    dt = value.dtype
    element: Callable[[UOp, int], VMem] = partial(mem, ctx)
    if gate is not None:   # through the gated address: the buffer's element, or the sink
        element = at_address(gated_mem(ctx, gate, idx, dt.itemsize, store=True))
    if is_vec(dt):
        x = reg(ctx, value)
        if dt is dtypes.float32:
            ctx.emit(Op.VMOVSS, [], [element(idx, 32), x], (("u", 0, None), ("u", 1, 128)))
        elif dt is dtypes.float64:
            ctx.emit(Op.VMOVSD, [], [element(idx, 64), x], (("u", 0, None), ("u", 1, 128)))
        elif dt is dtypes.float16:
            t = ctx.new("vec")
            ctx.emit(Op.VCVTPS2PH, [t], [x], (("d", 0, 128), ("u", 0, 128), ("i", F16_ROUND)))
            ctx.emit(Op.VPEXTRW, [], [element(idx, 16), t], (("u", 0, None), ("u", 1, 128), ("i", 0)))
        else:
            t = ctx.new("gpr")
            ctx.emit(Op.VMOVD, [t], [x], (("d", 0, 32), ("u", 0, 128)))
            ctx.alu2(Op.SHR, t, t, 16, 32)
            ctx.emit(Op.MOV, [], [element(idx, 16), t], (("u", 0, None), ("u", 1, 16)))
    else:
        bits = dt.itemsize * 8
        v = int_operand(ctx, value, 32)
        m = element(idx, bits)
        if isinstance(v, int) and (bits < 64 or -(1 << 31) <= v < (1 << 31)):
            ctx.emit(Op.MOV, [], [m], (("u", 0, None), ("i", v & ((1 << bits) - 1) if bits < 64 else v)))
        else:
            r = v if isinstance(v, VReg) else reg(ctx, value)
            ctx.emit(Op.MOV, [], [m, r], (("u", 0, None), ("u", 1, bits)))

"""Vector loads and stores: consecutive elements from a scalar pointer, as ymm pieces.

In:  the emitter and a vector LOAD/STORE. Out: vmovups per piece (vmovsd/vmovss for a narrow tail; bool lanes
     widened from bytes with vpmovzxbd, narrowed with vpackus*), through the gated address of ``memory.gated_mem``
     under a gate; accumulator loads alias the accumulator's pieces where safe; a single-use load folds into its
     ALU user (``vfoldable``); lane-by-lane dtypes go through the scalar rules one lane at a time.
"""
from __future__ import annotations

from tg_x86.emitter import Emitter
from tg_x86.facts import define_reg, is_reg_index
from tg_x86.flags import gate_off
from tg_x86.isa import Op
from tg_x86.lanes import (
    lanes_per_piece,
    native,
    piece_lanes,
    scalar_of,
)
from tg_x86.machine import VMem
from tg_x86.memory import alias_ok, gated_mem
from tg_x86.operands import Label
from tg_x86.values import mem
from tg_x86.vpieces import (
    lane_line,
    lane_uop,
    load_piece,
    pieces,
    vpiece,
)
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import DType, dtypes
from tgcore.uop import Ops, UOp


def vload(ctx: Emitter, u: UOp) -> None:
    idx = u.src[0]
    if is_reg_index(idx):
        acc = ctx.val[idx.src[0]]
        ctx.val[u] = acc if alias_ok(ctx, u) else tuple(ctx.vcopy(r) for r in acc)
        return
    if not native(u.dtype):
        lanes = []
        for j in range(u.dtype.count):
            su = lane_line(Ops.LOAD, scalar_of(u.dtype), (idx, *(lane_uop(ctx, s, j) for s in u.src[1:])), None, j)
            ctx.lane_offset = j
            ctx.select_line(su)
            ctx.lane_offset = 0
            lanes.append(ctx.val[su])
        ctx.val[u] = tuple(lanes)
        return
    if u in ctx.facts.folded:   # its one user reads it from memory
        return
    counts = piece_lanes(u.dtype)
    gate = idx.src[2] if len(idx.src) > 2 else None
    out = tuple(ctx.vnew() for _ in counts)
    if gate is None:
        for p, d in enumerate(out):
            load_piece(ctx, d, u, p)
    elif len(u.src) == 1:  # every piece through the gated address: the buffer's elements or the zero slot
        m = gated_mem(ctx, gate, idx, u.dtype.itemsize, store=False)
        for p, d in enumerate(out):
            load_piece(ctx, d, u, p, m)
    else:  # an alternative value (hand-written programs only): kept by jumping over the loads
        for p, d in enumerate(out):
            vpiece(ctx, u.src[1], p, into=d)
        skip = Label("gated")
        ctx.jump(skip, gate_off(ctx, gate))
        for p, d in enumerate(out):
            load_piece(ctx, d, u, p)
        ctx.label(skip)
    ctx.val[u] = out


def vstore(ctx: Emitter, u: UOp) -> None:
    idx, value = u.src[0], u.src[1]
    if is_reg_index(idx):
        acc = ctx.val[define_reg(idx)]
        for p, r in enumerate(acc):
            vpiece(ctx, value, p, into=r)
        return
    if not native(value.dtype):
        for j in range(value.dtype.count):
            ctx.lane_offset = j
            ctx.select_line(lane_line(Ops.STORE, dtypes.void, (idx, lane_uop(ctx, value, j)), None, j))
            ctx.lane_offset = 0
        return
    gate = idx.src[2] if len(idx.src) > 2 else None
    regs = pieces(ctx, value)
    sdt = scalar_of(value.dtype)
    per = lanes_per_piece(sdt)
    if gate is None:
        m: VMem = mem(ctx, idx, 8)
    else:   # every piece through the gated address: the buffer's elements or the sink
        m = gated_mem(ctx, gate, idx, value.dtype.itemsize, store=True)
    for p, (r, n) in enumerate(zip(regs, piece_lanes(value.dtype), strict=True)):
        disp = m.disp + p * per * sdt.itemsize

        def at(bits: int | None, extra: int = 0, disp: int = disp) -> VMem:
            return VMem(bits, m.base, m.index, m.scale, disp + extra, m.slot)
        if sdt is dtypes.bool:
            if n in (4, 8):
                hi = ctx.upper(r) if n == 8 else r
                w, b = ctx.vnew(), ctx.vnew()
                ctx.vemit(Op.VPACKUSDW, w, [r, hi], 128)
                ctx.vemit(Op.VPACKUSWB, b, [w, w], 128)
                ctx.emit(Op.VMOVQ if n == 8 else Op.VMOVD, [], [at(n * 8), b], (("u", 0, None), ("u", 1, 128)))
            else:
                for k in range(n):
                    t = extract_piece_lane(ctx, r, sdt, k)
                    ctx.emit(Op.MOV, [], [at(8, k), t], (("u", 0, None), ("u", 1, 8)))
            continue
        nbytes = n * sdt.itemsize
        if nbytes >= 16:
            ctx.emit(Op.VMOVUPS, [], [at(nbytes * 8), r], (("u", 0, None), ("u", 1, nbytes * 8)))
        elif nbytes == 8:
            ctx.emit(Op.VMOVSD, [], [at(64), r], (("u", 0, None), ("u", 1, 128)))
        else:
            ctx.emit(Op.VMOVSS, [], [at(32), r], (("u", 0, None), ("u", 1, 128)))


def extract_piece_lane(ctx: Emitter, r: VReg, sdt: DType, k: int) -> VReg:
    """Lane k (< 4) of a 32-bit integer piece register into a gpr."""
    d = ctx.new("gpr")
    if k == 0:
        ctx.emit(Op.VMOVD, [d], [r], (("d", 0, 32), ("u", 0, 128)))
    else:
        ctx.emit(Op.VPEXTRD, [d], [r], (("d", 0, 32), ("u", 0, 128), ("i", k)))
    return d

"""Vector values as ymm pieces: operands, lanes, packing and scalarization.

In:  the emitter and vector UOps. Out: a vector's pieces in registers (``vpiece``; constants and folded loads are
     loaded where a register is needed) or as memory operands (``voperand``), single lanes as the scalar rules'
     values (``extract``, cached per loop body), scalar values packed back into pieces (``pack``, a broadcast when
     every lane is one value), and ``scalarize``: an op without a vector rule selected lane by lane with the scalar
     rules, then packed.
"""
from __future__ import annotations

from typing import Any

from tg_x86.emitter import Emitter
from tg_x86.isa import Op
from tg_x86.lanes import (
    const_lanes,
    esize,
    is_vector,
    lanes_per_piece,
    native,
    pbits,
    piece_bits,
    piece_lanes,
    piece_step,
    scalar_of,
)
from tg_x86.machine import VMem
from tg_x86.memory import load_into
from tg_x86.values import materialize, mem, reg
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import DType, dtypes
from tgcore.uop import GroupOp, Ops, UOp


def vpiece(ctx: Emitter, u: UOp, p: int, into: VReg | None = None) -> VReg:
    """Piece ``p`` of vector ``u`` in a register (constants and folded loads are loaded here)."""
    held = ctx.val.get(u)   # most pieces are values selected before (constants and folded loads have none)
    if held is not None:
        if into is not None:
            ctx.copy(into, held[p])
            return into
        return held[p]
    sdt = scalar_of(u.dtype)
    const = ctx.facts.is_vconst(u)
    if not const and u not in ctx.facts.folded and u not in ctx.facts.bcast_loads:
        raise KeyError(f"x86: no value for {u.op.name} {u.dtype}")
    if not native(sdt):   # a constant held lane by lane
        return materialize(ctx, UOp.const(sdt, const_lanes(u)[p]), into)
    bits = piece_bits(u.dtype)[p]
    d = into or ctx.vnew()
    if not const:
        load_piece(ctx, d, u, p)
    elif ctx.facts.is_vzero(u):
        zero = Op.VXORPS if bits < 512 else Op.VPXORD   # (vxorps has no EVEX form here)
        ctx.emit(zero, [d], [], (("d", 0, bits), ("d", 0, bits), ("d", 0, bits)))
    else:
        ctx.vemit(Op.VMOVUPS, d, [ctx.const_piece(u, p)], bits)
    return d


def voperand(ctx: Emitter, u: UOp, p: int) -> Any:
    """Piece ``p`` as a register or, for constants and folded loads, a memory operand."""
    held = ctx.val.get(u)   # constants and folded loads have no value
    if held is not None:
        return held[p]
    if ctx.facts.is_vconst(u):
        return ctx.const_piece(u, p)
    if u in ctx.facts.folded:
        return piece_mem(ctx, u, p)
    raise KeyError(f"x86: no value for {u.op.name} {u.dtype}")


def pieces(ctx: Emitter, u: UOp) -> tuple[VReg, ...]:
    return tuple(vpiece(ctx, u, p) for p in range(len(piece_lanes(u.dtype))))


def piece_mem(ctx: Emitter, u: UOp, p: int) -> VMem:
    """Piece ``p`` of vector load ``u`` as a memory operand."""
    sdt = scalar_of(u.dtype)
    m: VMem = mem(ctx, u.src[0], pbits(piece_lanes(u.dtype)[p], sdt))
    return VMem(m.bits, m.base, m.index, m.scale, m.disp + p * piece_step(u.dtype) * sdt.itemsize, m.slot)


def lane_key(ctx: Emitter, *key: Any) -> tuple:
    top = ctx.loops[-1][2] if ctx.loops else None
    return (*key, top)


def extract(ctx: Emitter, u: UOp, j: int) -> Any:
    """Lane ``j`` of vector ``u`` as a scalar value (the scalar rules' representation)."""
    sdt = scalar_of(u.dtype)
    if ctx.facts.is_vconst(u):
        return materialize(ctx, UOp.const(sdt, const_lanes(u)[j]))
    if u.op is Ops.VECTORIZE:
        lane = u.src[j]
        if lane in ctx.facts.shuffled_lanes:   # a lane of another vector that has no value of its own
            return extract(ctx, lane.src[0], lane.arg[0])
        if lane not in ctx.facts.bcast_loads:
            return reg(ctx, lane)
    if not native(sdt):
        return ctx.val[u][j]
    key = lane_key(ctx, u, j)
    if ctx.lane_cache is not None and key in ctx.lane_cache:
        return ctx.lane_cache[key]
    per = lanes_per_piece(sdt)
    p, k = divmod(j, per)
    half_lanes = 16 // esize(sdt)
    h, kk = divmod(k, half_lanes)
    x = half(ctx, u, p, h)
    if dtypes.is_float(sdt):
        if kk == 0:
            d = ctx.vcopy(x)
        else:
            d = ctx.vnew()
            if sdt is dtypes.float64:
                ctx.emit(Op.VMOVHLPS, [d], [x, x], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
            else:
                ctx.emit(Op.VPERMILPS, [d], [x], (("d", 0, 128), ("u", 0, 128), ("i", kk)))
    else:
        d = ctx.new("gpr")
        gb = 64 if esize(sdt) == 8 else 32
        if kk == 0:
            ctx.emit(Op.VMOVQ if gb == 64 else Op.VMOVD, [d], [x], (("d", 0, gb), ("u", 0, 128)))
        else:
            ctx.emit(Op.VPEXTRQ if gb == 64 else Op.VPEXTRD, [d], [x],
                      (("d", 0, gb), ("u", 0, 128), ("i", kk)))
    if ctx.lane_cache is not None:
        ctx.lane_cache[key] = d
    return d


def half(ctx: Emitter, u: UOp, p: int, h: int) -> VReg:
    """The 128-bit half ``h`` of piece ``p`` of ``u`` (half 0 is the piece register itself)."""
    key = lane_key(ctx, u, p, "half", h)
    if ctx.lane_cache is not None and key in ctx.lane_cache:
        return ctx.lane_cache[key]
    x = vpiece(ctx, u, p)
    if h:
        x = ctx.upper(x)
    if ctx.lane_cache is not None:
        ctx.lane_cache[key] = x
    return x


def slice128(ctx: Emitter, u: UOp, start: int) -> VReg:
    """An xmm holding lanes ``start..`` of ``u`` (``start`` on a 128-bit boundary)."""
    sdt = scalar_of(u.dtype)
    p, k = divmod(start, lanes_per_piece(sdt))
    return half(ctx, u, p, k // (16 // esize(sdt)))


def pack(ctx: Emitter, sdt: DType, regs: list) -> tuple[VReg, ...]:
    """Scalar values (the scalar rules' representation) -> pieces."""
    if not native(sdt):
        return tuple(regs)
    if all(r is regs[0] for r in regs):
        return broadcast_reg(ctx, sdt, regs[0], len(regs))
    per, half = lanes_per_piece(sdt), 16 // esize(sdt)
    out = []
    for start in range(0, len(regs), per):
        chunk = regs[start:start + per]
        xs = [pack128(ctx, sdt, chunk[i:i + half]) for i in range(0, len(chunk), half)]
        out.append(xs[0] if len(xs) == 1 else ctx.join(xs[0], xs[1]))
    return tuple(out)


def pack128(ctx: Emitter, sdt: DType, regs: list) -> VReg:
    d = ctx.vnew()
    if dtypes.is_float(sdt):
        if sdt is dtypes.float64:
            if len(regs) == 1:
                ctx.copy(d, regs[0])
            else:
                ctx.emit(Op.VMOVLHPS, [d], regs, (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
            return d
        ctx.copy(d, regs[0])
        for k, r in enumerate(regs[1:], 1):
            t = ctx.vnew()
            ctx.emit(Op.VINSERTPS, [t], [d, r], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128), ("i", k << 4)))
            d = t
        return d
    gb = 64 if esize(sdt) == 8 else 32
    ctx.emit(Op.VMOVQ if gb == 64 else Op.VMOVD, [d], [regs[0]], (("d", 0, 128), ("u", 0, gb)))
    for k, r in enumerate(regs[1:], 1):
        t = ctx.vnew()
        ctx.emit(Op.VPINSRQ if gb == 64 else Op.VPINSRD, [t], [d, r],
                  (("d", 0, 128), ("u", 0, 128), ("u", 1, gb), ("i", k)))
        d = t
    return d


def broadcast_reg(ctx: Emitter, sdt: DType, r: Any, count: int) -> tuple[VReg, ...]:
    """Every lane the scalar value ``r``: one register shared by all pieces."""
    counts = piece_lanes(sdt.vec(count))
    bits = pbits(counts[0], sdt)
    d = ctx.vnew()
    if sdt is dtypes.float32:
        ctx.emit(Op.VBROADCASTSS, [d], [r], (("d", 0, bits), ("u", 0, 128)))
    elif sdt is dtypes.float64:
        if bits == 256:
            ctx.emit(Op.VBROADCASTSD, [d], [r], (("d", 0, 256), ("u", 0, 128)))
        else:
            ctx.emit(Op.VMOVLHPS, [d], [r, r], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
    else:
        t = ctx.vnew()
        wide = esize(sdt) == 8
        ctx.emit(Op.VMOVQ if wide else Op.VMOVD, [t], [r], (("d", 0, 128), ("u", 0, 64 if wide else 32)))
        ctx.emit(Op.VPBROADCASTQ if wide else Op.VPBROADCASTD, [d], [t], (("d", 0, bits), ("u", 0, 128)))
    return (d,) * len(counts)


def lane_line(op: Ops, dtype: DType, src: tuple[UOp, ...], arg: Any, j: int) -> UOp:
    """Lane ``j`` of a vector line as a scalar line selected on its own (``select_line``). It is tagged, so it is
    never the same UOp as a line of the kernel: it must not overwrite that line's value, nor take its facts
    (a load folded into its user, a compare fused into a jump, ...), and lane j of a lane-by-lane load reads
    another address than the kernel's scalar load of the same index."""
    return UOp(op, dtype, src, arg, ("lane", j))


def lane_uop(ctx: Emitter, s: UOp, j: int) -> UOp:
    if not is_vector(s.dtype):
        return s
    sdt = scalar_of(s.dtype)
    if ctx.facts.is_vconst(s):
        return UOp.const(sdt, const_lanes(s)[j])
    if s.op is Ops.VECTORIZE:
        lane = s.src[j]
        if lane in ctx.facts.shuffled_lanes:   # a lane of another vector that has no value of its own
            return lane_uop(ctx, lane.src[0], lane.arg[0])
        if lane not in ctx.facts.bcast_loads:
            return lane
    g = lane_line(Ops.GEP, sdt, (s,), (j,), j)
    ctx.val[g] = extract(ctx, s, j)
    return g


# ops whose lane depends on its sources' lanes only (a load's lane j reads another address than lane i's)
PURE_LANES = frozenset(GroupOp.ALU | {Ops.CAST, Ops.BITCAST})


def scalar_lanes(ctx: Emitter, u: UOp) -> list:
    """``u``'s lanes by the scalar rules; a lane of a pure op whose sources are those of an earlier lane (a value
    repeated in several lanes: a scale shared by a group of lanes) is that lane's value, selected once."""
    out = []
    sdt = scalar_of(u.dtype)
    done: dict[tuple, Any] = {}
    pure = u.op in PURE_LANES
    for j in range(u.dtype.count):
        src = tuple(lane_uop(ctx, s, j) for s in u.src)
        # the sources by their registers where they have one (a lane taken out of a vector is a new UOp per lane)
        key = tuple(v if isinstance(v := ctx.val.get(x), VReg) else x for x in src)
        if pure and key in done:
            out.append(done[key])
            continue
        su = lane_line(u.op, sdt, src, u.arg, j)
        ctx.select_line(su)
        out.append(done.setdefault(key, ctx.val[su]))
    return out


def scalarize(ctx: Emitter, u: UOp) -> None:
    """No vector rule: the scalar rules lane by lane, then packed."""
    ctx.val[u] = pack(ctx, scalar_of(u.dtype), scalar_lanes(ctx, u))


def per_piece(ctx: Emitter, u: UOp, fn: Any) -> None:
    """u's value: ``fn(d, p, bits)`` writes each piece p into a new register d of ``bits``."""
    out = []
    for p, bits in enumerate(piece_bits(u.dtype)):
        d = ctx.new("vec")
        fn(d, p, bits)
        out.append(d)
    ctx.val[u] = tuple(out)


def vin_memory(ctx: Emitter, x: UOp) -> bool:
    """Is a vector read as a memory operand (a constant's frame slots, a folded load)? Neither has a value."""
    return x not in ctx.val and (ctx.facts.is_vconst(x) or x in ctx.facts.folded)


def load_piece(ctx: Emitter, d: VReg, u: UOp, p: int, where: VMem | None = None) -> None:
    """Load piece ``p`` of vector load ``u`` into ``d`` (from ``where`` and on when given: a gated load)."""
    idx, sdt = u.src[0], scalar_of(u.dtype)
    if u in ctx.facts.bcast_loads:  # a broadcast source asked for as a register: the scalar load
        load_into(ctx, d, idx, sdt)
        return
    n = piece_lanes(u.dtype)[p]
    per = piece_step(u.dtype)
    m: VMem = mem(ctx, idx, 8) if where is None else where
    disp = m.disp + p * per * sdt.itemsize

    def at(bits: int | None, extra: int = 0) -> VMem:
        return VMem(bits, m.base, m.index, m.scale, disp + extra, m.slot)
    if sdt is dtypes.bool:
        if n in (4, 8):
            ctx.emit(Op.VPMOVZXBD, [d], [at(n * 8)], (("d", 0, 256 if n == 8 else 128), ("u", 0, None)))
            return
        regs = []
        for k in range(n):
            t = ctx.new("gpr")
            ctx.emit(Op.MOVZX, [t], [at(8, k)], (("d", 0, 32), ("u", 0, None)))
            regs.append(t)
        ctx.copy(d, pack128(ctx, sdt, regs))
        return
    nbytes = n * sdt.itemsize
    if nbytes >= 16:
        ctx.emit(Op.VMOVUPS, [d], [at(nbytes * 8)], (("d", 0, nbytes * 8), ("u", 0, None)))
    elif nbytes == 8:
        ctx.emit(Op.VMOVSD, [d], [at(64)], (("d", 0, 128), ("u", 0, None)))
    else:
        ctx.emit(Op.VMOVSS, [d], [at(32)], (("d", 0, 128), ("u", 0, None)))

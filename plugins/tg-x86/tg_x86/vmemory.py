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
    F16_ROUND,
    esize,
    is_vector,
    is_wide,
    native,
    piece_lanes,
    piece_step,
    scalar_of,
)
from tg_x86.machine import VMem
from tg_x86.memory import alias_ok, gated_mem
from tg_x86.operands import Label
from tg_x86.values import mem
from tg_x86.vpieces import (
    lane_key,
    lane_line,
    lane_uop,
    load_piece,
    pack,
    per_piece,
    pieces,
    vpiece,
)
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import DType, dtypes
from tgcore.uop import Ops, UOp


def vload(ctx: Emitter, u: UOp) -> None:
    idx = u.src[0]
    if u in ctx.facts.widened or u in ctx.facts.assembled:   # its CAST/BITCAST reads the memory itself
        return
    if is_reg_index(idx):
        acc = ctx.val[idx.src[0]]
        ctx.val[u] = acc if alias_ok(ctx, u) else tuple(ctx.vcopy(r) for r in acc)
        return
    gate = idx.src[2] if len(idx.src) > 2 else None
    if gate is not None and is_vector(gate.dtype) and masked_load(ctx, u, gate):
        return
    if not native(u.dtype) or (gate is not None and is_vector(gate.dtype)):
        lanes = []
        for j in range(u.dtype.count):
            su = lane_line(Ops.LOAD, scalar_of(u.dtype),
                           (lane_index(ctx, idx, j), *(lane_uop(ctx, s, j) for s in u.src[1:])), None, j)
            ctx.lane_offset = j
            ctx.select_line(su)
            ctx.lane_offset = 0
            lanes.append(ctx.val[su])
        ctx.val[u] = tuple(lanes) if not native(u.dtype) else pack(ctx, scalar_of(u.dtype), lanes)
        return
    if u in ctx.facts.folded:   # its one user reads it from memory
        return
    counts = piece_lanes(u.dtype)
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
    if value in ctx.facts.narrowed:   # a float32 -> half CAST: converted here (narrowing_store)
        narrowing_store(ctx, u)
        return
    if is_reg_index(idx):
        acc = ctx.val[define_reg(idx)]
        for p, r in enumerate(acc):
            vpiece(ctx, value, p, into=r)
        return
    gate = idx.src[2] if len(idx.src) > 2 else None
    if gate is not None and is_vector(gate.dtype) and masked_store(ctx, u, gate):
        return
    if not native(value.dtype) or (gate is not None and is_vector(gate.dtype)):
        for j in range(value.dtype.count):
            ctx.lane_offset = j
            lane = (lane_index(ctx, idx, j), lane_uop(ctx, value, j))
            ctx.select_line(lane_line(Ops.STORE, dtypes.void, lane, None, j))
            ctx.lane_offset = 0
        return
    regs = pieces(ctx, value)
    sdt = scalar_of(value.dtype)
    per = piece_step(value.dtype)
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


# ---- accesses with one gate per lane (``Renderer.masked_vectors``: padded tails) ----
def lane_index(ctx: Emitter, idx: UOp, j: int) -> UOp:
    """The INDEX of lane ``j`` of a lane-by-lane access through ``idx`` (``lane_offset`` adds j): the same, or under
    the lane's own gate when the gate is a vector."""
    if len(idx.src) < 3 or not is_vector(idx.src[2].dtype):
        return idx
    return UOp(Ops.INDEX, idx.dtype, (idx.src[0], idx.src[1], lane_uop(ctx, idx.src[2], j)))


def _masked_width(dt: DType) -> bool:
    """Does a lane-gated access of ``dt`` have a masked form: zmm pieces (opmask) or 32-bit lanes in pieces of 4 or 8
    (vmaskmovps, whose mask the bool gate's pieces become)?"""
    if is_wide(dt):
        return True
    sdt = scalar_of(dt)
    return sdt is not dtypes.bool and esize(sdt) == 4 and all(n in (4, 8) for n in piece_lanes(dt))


def opmask(ctx: Emitter, gate: UOp, p: int) -> VReg:
    """An opmask of lanes 16p..16p+15 of bool vector ``gate`` (made where the gate is made when it gates a zmm access
    there, ``wide.sel_wide``; else once per loop body)."""
    made = ctx.opmasks.get((gate, p))
    if made is not None:
        return made
    key = lane_key(ctx, gate, "opmask", p)
    cache = ctx.lane_cache
    if cache is not None and key in cache:
        return cache[key]
    z, k = ctx.vnew(), ctx.new("k")
    ctx.emit(Op.VINSERTF32X8, [z], [vpiece(ctx, gate, 2 * p), vpiece(ctx, gate, 2 * p + 1)],
             (("d", 0, 512), ("u", 0, 512), ("u", 1, 256), ("i", 1)))
    ctx.emit(Op.VPTESTMD, [k], [z, z], (("d", 0, 64), ("u", 0, 512), ("u", 1, 512)))
    if cache is not None:
        cache[key] = k
    return k


def sign_mask(ctx: Emitter, gate: UOp, p: int, bits: int) -> VReg:
    """Piece ``p`` of bool vector ``gate`` as a vmaskmovps mask (each lane's sign bit)."""
    d = ctx.vnew()
    ctx.emit(Op.VPSLLD, [d], [vpiece(ctx, gate, p)], (("d", 0, bits), ("u", 0, bits), ("i", 31)))
    return d


def masked_mem(ctx: Emitter, idx: UOp) -> VMem:
    """Lane 0's element of a masked access through ``idx``. Lane 0 may be gated off, and then its index may be
    negative (a flipped or shifted view: one element before the buffer). An int32 index register is zero-extended
    by x86 addressing, which would put the lanes that are on gigabytes away; so an index that can be negative is
    sign-extended first (the lanes gated off never touch memory, wherever they point)."""
    m: VMem = mem(ctx, idx, 8)
    i = idx.src[1]
    if m.index is None or i.dtype.itemsize == 8:
        return m
    if (i.src[0] if m.disp else i).vmin >= 0:  # mem folds a constant addend into disp only when the rest is >= 0
        return m
    wide = ctx.new("gpr")
    ctx.emit(Op.MOVSXD, [wide], [m.index], (("d", 0, 64), ("u", 0, 32)))
    return VMem(m.bits, m.base, wide, m.scale, m.disp, m.slot)


def masked_load(ctx: Emitter, u: UOp, gate: UOp) -> bool:
    """A load whose lanes have gates of their own, with masked loads (lanes gated off read 0 and never touch memory);
    False when the dtype has no masked form (then it goes lane by lane)."""
    if not _masked_width(u.dtype) or len(u.src) > 1:
        return False
    m = masked_mem(ctx, u.src[0])
    sdt = scalar_of(u.dtype)
    step = piece_step(u.dtype) * sdt.itemsize
    out = []
    for p, n in enumerate(piece_lanes(u.dtype)):
        d = ctx.vnew()
        at = VMem(None, m.base, m.index, m.scale, m.disp + p * step, m.slot)
        if is_wide(u.dtype):
            ctx.emit(Op.VMOVUPS, [d], [at.sized(512), opmask(ctx, gate, p)], (("dk", 0, 512, 1, True), ("u", 0, None)))
        else:
            bits = n * 32
            ctx.emit(Op.VMASKMOVPS, [d], [sign_mask(ctx, gate, p, bits), at.sized(bits)],
                     (("d", 0, bits), ("u", 0, bits), ("u", 1, None)))
        out.append(d)
    ctx.val[u] = tuple(out)
    return True


def masked_store(ctx: Emitter, u: UOp, gate: UOp) -> bool:
    """A store whose lanes have gates of their own, with masked stores (lanes gated off are not written); False when
    the dtype has no masked form."""
    idx, value = u.src[0], u.src[1]
    if not _masked_width(value.dtype):
        return False
    m = masked_mem(ctx, idx)
    sdt = scalar_of(value.dtype)
    step = piece_step(value.dtype) * sdt.itemsize
    for p, n in enumerate(piece_lanes(value.dtype)):
        r = vpiece(ctx, value, p)
        at = VMem(None, m.base, m.index, m.scale, m.disp + p * step, m.slot)
        if is_wide(value.dtype):
            ctx.emit(Op.VMOVUPS, [], [at.sized(512), opmask(ctx, gate, p), r], (("uk", 0, None, 1), ("u", 2, 512)))
        else:
            bits = n * 32
            ctx.emit(Op.VMASKMOVPS, [], [at.sized(bits), sign_mask(ctx, gate, p, bits), r],
                     (("u", 0, None), ("u", 1, bits), ("u", 2, bits)))
    return True


def widening_cast(ctx: Emitter, u: UOp) -> None:
    """CAST of a narrow vector load (``facts.widened``) to 32-bit lanes, each piece read from memory: bytes by
    ``vpmovsxbd`` (int8: what the CAST reads after a BITCAST, if any) or ``vpmovzxbd``, then ``vcvtdq2ps`` for
    float32; float16 by ``vcvtph2ps``; bfloat16 by ``vpmovzxwd`` and a shift into the high half (exact)."""
    src = u.src[0]
    load = src.src[0] if src.op is Ops.BITCAST else src
    sdt = scalar_of(src.dtype)
    m = mem(ctx, load.src[0], 8)
    counts = piece_lanes(u.dtype)

    def piece(d: VReg, p: int, bits: int) -> None:
        n = counts[p]
        at = VMem(n * 8 * sdt.itemsize, m.base, m.index, m.scale, m.disp + sum(counts[:p]) * sdt.itemsize, m.slot)
        if sdt is dtypes.float16:
            ctx.emit(Op.VCVTPH2PS, [d], [at], (("d", 0, bits), ("u", 0, None)))
            return
        widen = {dtypes.int8: Op.VPMOVSXBD, dtypes.uint8: Op.VPMOVZXBD, dtypes.bfloat16: Op.VPMOVZXWD}[sdt]
        if sdt is dtypes.uint8 or sdt is dtypes.int8:
            if scalar_of(u.dtype) is not dtypes.float32:
                ctx.emit(widen, [d], [at], (("d", 0, bits), ("u", 0, None)))
                return
        i = ctx.vnew()
        ctx.emit(widen, [i], [at], (("d", 0, bits), ("u", 0, None)))
        if sdt is dtypes.bfloat16:
            ctx.emit(Op.VPSLLD, [d], [i], (("d", 0, bits), ("u", 0, bits), ("i", 16)))
        else:
            ctx.vemit(Op.VCVTDQ2PS, d, [i], bits)
    per_piece(ctx, u, piece)


def narrowing_store(ctx: Emitter, u: UOp) -> None:
    """STORE of a float32 -> float16/bfloat16 vector CAST (``facts.narrowed``): each float32 piece converted and
    written. float16: ``vcvtps2ph`` to memory (round to nearest even). bfloat16: round to nearest even in integer
    lanes (+0x7fff plus the kept lowest bit, the high half), a NaN kept quiet (|x| > inf: x | 0x400000), blended,
    then packed to 16 bits (``vpackusdw``: every lane is below 0x10000). int32 -> bytes: ``truncated_bytes``."""
    cast = u.src[1]
    x, half = cast.src[0], scalar_of(cast.dtype)
    m = mem(ctx, u.src[0], 8)
    if half.itemsize == 1:
        truncated_bytes(ctx, x, m)
        return
    counts = piece_lanes(x.dtype)
    for p, n in enumerate(counts):
        bits = 256 if n == 8 else 128
        r = vpiece(ctx, x, p)
        at = VMem(n * 16, m.base, m.index, m.scale, m.disp + sum(counts[:p]) * 2, m.slot)
        if half is dtypes.float16:
            ctx.emit(Op.VCVTPS2PH, [], [at, r], (("u", 0, None), ("u", 1, bits), ("i", F16_ROUND)))
            continue

        def op(o: Op, *uses: object, bits: int = bits) -> VReg:
            d = ctx.vnew()
            ctx.vemit(o, d, list(uses), bits)
            return d

        def shift(o: Op, a: VReg, k: int, bits: int = bits) -> VReg:
            d = ctx.vnew()
            ctx.emit(o, [d], [a], (("d", 0, bits), ("u", 0, bits), ("i", k)))
            return d

        def splat(v: int, bits: int = bits) -> VMem:
            return ctx.splat(v, dtypes.int32, bits)
        lsb = op(Op.VPAND, shift(Op.VPSRLD, r, 16), splat(1))
        rounded = shift(Op.VPSRLD, op(Op.VPADDD, op(Op.VPADDD, r, splat(0x7FFF)), lsb), 16)
        quiet = shift(Op.VPSRLD, op(Op.VPOR, r, splat(0x400000)), 16)
        is_nan = op(Op.VPCMPGTD, op(Op.VPAND, r, splat(0x7FFFFFFF)), splat(0x7F800000))
        lanes = op(Op.VBLENDVPS, rounded, quiet, is_nan)
        packed = ctx.vnew()
        ctx.vemit(Op.VPACKUSDW, packed, [lanes, ctx.upper(lanes) if n == 8 else lanes], 128)
        store = Op.VMOVUPS if n == 8 else Op.VMOVQ
        ctx.emit(store, [], [at, packed], (("u", 0, None), ("u", 1, 128)))


def truncated_bytes(ctx: Emitter, x: UOp, m: VMem) -> None:
    """The low byte of each of 8 int32 lanes (C's truncating cast) stored at ``m``: vpshufb gathers each 128-bit
    half's 4 low bytes into its low dword, stored by two vmovd."""
    r = vpiece(ctx, x, 0)
    t, hi = ctx.vnew(), ctx.vnew()
    ctx.vemit(Op.VPSHUFB, t, [r, ctx.const_mem(bytes([0, 4, 8, 12] + [0x80] * 12) * 2, 256)], 256)
    ctx.emit(Op.VEXTRACTI128, [hi], [t], (("d", 0, 128), ("u", 0, 256), ("i", 1)))
    for k, half in enumerate((t, hi)):
        at = VMem(32, m.base, m.index, m.scale, m.disp + 4 * k, m.slot)
        ctx.emit(Op.VMOVD, [], [at, half], (("u", 0, None), ("u", 1, 128)))

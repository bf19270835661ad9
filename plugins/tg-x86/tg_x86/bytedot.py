"""A quantization block's byte dot product per int32 lane as one ``vpdpbusd`` (AVX512-VNNI: EVEX; AVX-VNNI: VEX;
``Emitter.dot_op``) or, without VNNI, ``vpmaddubsw`` + ``vpmaddwd`` (exact: see ``_dot_avx2``), the byte vectors that
feed it, and small byte vectors widened to 32-bit lanes (any level).

In:  a kernel in REDUCE form (the renderer's ``pre_isel``), then its linear UOps (selection).
Out: ``byte_dot_rule``: the core's rule (``tgcore.renderer.cbytedot.byte_dot``: a lane's 4 byte products, summed
     over a loop of 4 steps, as a ``CUSTOMI`` of two 32-byte vectors) where every node of both operands has a rule
     here (``bytevec.selectable``), else nothing (the loop stays, lane by lane). ``BYTE_ISEL``: rules for the byte
     vectors those operands and the widening CASTs of ``bytevec.widened_bytes`` are made of (``facts.byte_dots``),
     one register each (32 lanes: a ymm; 2 to 16: the low bytes of an xmm), for the call and for those CASTs:

     LOAD                      vmovdqu (ungated, consecutive bytes); 2, 4, 8 bytes: vpbroadcastw, vmovd, vmovq
     AND OR XOR ADD SUB        vpand vpor vpxor vpaddb vpsubb (a constant operand from a frame slot)
     SHR, IDIV by 2**s         vpsrlw s + vpand (0xFF >> s): x86 has no byte shift (unsigned lanes)
     SHL, MUL by 2**s          vpsllw s + vpand
     SHR by a broadcast s      vpsrlw by s in an xmm + vpand with (0x00FF >> s) in both bytes of each word
     VECTORIZE of one byte     vmovd + vpbroadcastb (a K-quant's mask or shift of the sub-block in the loop)
     BITCAST                   the source's register (a byte vector, or one piece of 32- or 64-bit lanes)
     BITCAST of a repeated int vpbroadcastw/d/q from memory (2, 4, 8 bytes loaded, repeated: ``repeated_load``; the
                               load, the int and its VECTORIZE emit nothing)
     VECTORIZE of lanes        vinserti128 of two 16-byte sources and/or vpshufb within 128-bit halves
     CUSTOMI tg_dot4_u8i8      vpxor + vpdpbusd (exact: 4 products of a byte by a signed byte fit an int32, and
                               vpdpbusd does not saturate); AVX2: vpmaddubsw + vpmaddwd (per nibble from a >= 128)
     CUSTOMI tg_dot4_u8i8_acc  vpdpbusd into the accumulator (a chain of ``row_lanes_rule``); AVX2: + vpaddd
     CAST of 4 or 8 bytes      vpmovzxbd (vpmovsxbd: int8) to int32 lanes, + vcvtdq2ps for float32
     CONST, VCONST of 32 bytes an ALU operand: vmovdqu into a register where the constants are (before the loops)

The lanes a VECTORIZE takes (single-lane GEPs) emit nothing: only such VECTORIZEs read them.
"""
from __future__ import annotations

from typing import Any

from tg_x86.bytevec import (
    BYTE_VECTORS,
    LEFT,
    RIGHT,
    is_broadcast,
    is_bytes,
    lanes,
    register_bits,
    repeated_load,
    selectable,
    shift_amount,
    shuffle_plan,
)
from tg_x86.emitter import Emitter
from tg_x86.isa import Op
from tg_x86.machine import VMem
from tg_x86.values import mem, reg
from tg_x86.vpieces import vpiece
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import dtypes
from tgcore.renderer.cbytedot import DOT_ACC_HELPER, DOT_HELPER, byte_dot, byte_table_lookup, row_lanes_dot
from tgcore.uop import Ops, PatternMatcher, UOp, UPat
from tgcore.uop.rewrite import graph_rewrite

BYTE_ALU = {Ops.AND: Op.VPAND, Ops.OR: Op.VPOR, Ops.XOR: Op.VPXOR, Ops.ADD: Op.VPADDB, Ops.SUB: Op.VPSUBB}
EMITTED = ()
NARROW_LOADS = {2: Op.VPBROADCASTW, 4: Op.VMOVD, 8: Op.VMOVQ}   # bytes -> the load that reads exactly them
REPEATED_LOADS = {2: Op.VPBROADCASTW, 4: Op.VPBROADCASTD, 8: Op.VPBROADCASTQ}   # bytes -> their broadcast


def byte_dot_rule(red: UOp) -> UOp | None:
    """``byte_dot`` where this module selects both operands (else the REDUCE stays)."""
    out = byte_dot(red)
    return out if out is not None and all(selectable(s) for s in out.src) else None


def row_lanes_rule(red: UOp) -> UOp | None:
    """``row_lanes_dot`` (output rows in the lanes: a chain of dots, each added to the last) where this module
    selects every dot's two byte operands (else the REDUCE stays)."""
    out = row_lanes_dot(red)
    if out is None:
        return None
    dots = [u for u in out.toposort if u.op is Ops.CUSTOMI]
    return out if all(selectable(s) for u in dots for s in u.src[-2:]) else None


def _gather_lanes(x: UOp) -> UOp | None:
    """A load at a vector of indices (codegen gathers from 16-byte tables: ``Renderer.byte_table_lookups``) as one
    scalar load per lane, unless it is a byte dot's table lookup (one vpshufb)."""
    if len(x.src) != 1 or x.src[0].op is not Ops.INDEX or len(x.src[0].src) != 2 or x.dtype.count == 1:
        return None
    buf, at = x.src[0].src
    if at.dtype.count != x.dtype.count or (byte_table_lookup(x) is not None and selectable(x)):
        return None
    return UOp(Ops.VECTORIZE, x.dtype, tuple(UOp(Ops.LOAD, x.dtype.scalar(), (x.src[0].replace(src=(buf, at.gep(i))),))
                                             for i in range(x.dtype.count)))


LANE_BY_LANE = PatternMatcher([(UPat(Ops.LOAD, name="x"), _gather_lanes)])


def lane_by_lane_gathers(k: UOp) -> UOp | None:
    """The kernel (its SINK: rewritten last, after the byte dots took their table lookups) with every other gather
    lane by lane (``_gather_lanes``); None if it has none."""
    out = graph_rewrite(k, LANE_BY_LANE, name="gathers lane by lane")
    return None if out is k else out


# ---- selection ----
def _bits(u: UOp) -> int:
    return register_bits(u.dtype.count)


def _const(ctx: Emitter, u: UOp) -> VMem | None:
    values = lanes(u)
    return None if values is None else ctx.const_mem(bytes(v & 0xFF for v in values), _bits(u))


def operand(ctx: Emitter, u: UOp) -> Any:
    """A byte vector as a register, a constant as its frame slot."""
    held = ctx.val.get(u)
    if held is not None:
        return held[0]
    slot = _const(ctx, u)
    if slot is None:
        raise KeyError(f"x86: no value for {u.op.name} {u.dtype}")
    return slot


def register(ctx: Emitter, u: UOp) -> VReg:
    o = operand(ctx, u)
    if not isinstance(o, VMem):
        return o
    d = ctx.vnew()
    ctx.emit(Op.VMOVDQU, [d], [o], (("d", 0, _bits(u)), ("u", 0, None)))
    return d


def _dword(ctx: Emitter, scalar: UOp) -> VReg:
    """A scalar (a gpr, canonical: zero-extended) in the low 32 bits of an xmm, the others 0."""
    d = ctx.vnew()
    ctx.emit(Op.VMOVD, [d], [reg(ctx, scalar)], (("d", 0, 128), ("u", 0, 32)))
    return d


def _broadcasted(ctx: Emitter, u: UOp) -> VReg:
    d, bits = ctx.vnew(), _bits(u)
    ctx.emit(Op.VPBROADCASTB, [d], [_dword(ctx, u.src[0])], (("d", 0, bits), ("u", 0, 128)))
    return d


def _masked_by_users(ctx: Emitter, u: UOp, keep: int) -> bool:
    """Whether every line reading ``u`` is a byte AND (selected here) with constant lanes that keep only bits of
    ``keep``: then the bits outside it need no clearing before."""
    users = ctx.facts.users.get(u, [])
    for r in users:
        if r.op is not Ops.AND or r not in ctx.facts.byte_dots or r.src[0] is r.src[1]:
            return False
        values = lanes(r.src[1] if r.src[0] is u else r.src[0])
        if values is None or any(v & 0xFF & ~keep for v in values):
            return False
    return bool(users)


def _shifted_by_variable(ctx: Emitter, u: UOp) -> VReg:
    """Bytes shifted right by one amount ``s`` held in a register: words shifted, then the bits each byte got from
    its neighbour cleared by (0xFF >> s) in both bytes of each word (made from 0x00FF >> s; 0 from s = 8 on, as
    C's shift of the promoted byte gives). Not cleared where every reader masks them off anyway (a K-quant's field
    ``(q >> s) & 3``, with ``s`` at most 6)."""
    bits = _bits(u)
    x, amount = register(ctx, u.src[0]), u.src[1].src[0]
    count = _dword(ctx, amount)
    if isinstance(amount.vmax, int) and 0 <= amount.vmax < 8 and _masked_by_users(ctx, u, 0xFF >> amount.vmax):
        d = ctx.vnew()
        ctx.emit(Op.VPSRLW, [d], [x, count], (("d", 0, bits), ("u", 0, bits), ("u", 1, 128)))
        return d

    def op(o: Op, *uses: Any, extra: tuple = ()) -> VReg:
        d = ctx.vnew()
        ctx.emit(o, [d], list(uses), (("d", 0, bits), ("u", 0, bits),
                                      *((("u", 1, 128 if o is Op.VPSRLW else None if isinstance(uses[1], VMem)
                                          else bits),) if len(uses) > 1 else ()), *extra))
        return d
    low = ctx.vnew()
    ctx.emit(Op.VMOVDQU, [low], [ctx.const_mem(b"\xff\x00" * (bits // 16), bits)], (("d", 0, bits), ("u", 0, None)))
    low = op(Op.VPSRLW, low, count)
    mask = op(Op.VPOR, low, op(Op.VPSLLW, low, extra=(("i", 8),)))
    return op(Op.VPAND, op(Op.VPSRLW, x, count), mask)


def _shifted(ctx: Emitter, u: UOp) -> VReg:
    s, bits = shift_amount(u), _bits(u)
    if s is None:
        return _shifted_by_variable(ctx, u)
    x = register(ctx, u.src[0])
    if s == 0:
        return x
    if s >= 8:
        return ctx.zero(bits)
    left = u.op in LEFT
    t, d = ctx.vnew(), ctx.vnew()
    ctx.emit(Op.VPSLLW if left else Op.VPSRLW, [t], [x], (("d", 0, bits), ("u", 0, bits), ("i", s)))
    keep = (0xFF << s) & 0xFF if left else 0xFF >> s
    if _masked_by_users(ctx, u, keep):   # (its readers clear the bits from the neighbour byte)
        return t
    ctx.vemit(Op.VPAND, d, [t, ctx.const_mem(bytes([keep]) * (bits // 8), bits)], bits)
    return d


def _shuffled(ctx: Emitter, u: UOp) -> VReg:
    plan = shuffle_plan(u)
    assert plan is not None
    sources, picks = plan
    bits = _bits(u)
    base = register(ctx, sources[0])
    if bits == 256 and sources[0].dtype.count == 16:   # the high half: the second source, or the first again
        hi = register(ctx, sources[-1])
        joined = ctx.vnew()
        ctx.emit(Op.VINSERTI128, [joined], [base, hi], (("d", 0, 256), ("u", 0, 256), ("u", 1, 128), ("i", 1)))
        base = joined
    if picks == [i % 16 for i in range(len(picks))]:
        return base
    d = ctx.vnew()   # (lanes past a short vector's end: 0x80 picks a zero)
    ctx.vemit(Op.VPSHUFB, d, [base, ctx.const_mem(bytes(picks).ljust(bits // 8, b"\x80"), bits)], bits)
    return d


def sel_bytes(ctx: Emitter, x: UOp) -> tuple | None:
    """A byte vector of a dot product's operand (see the module doc); None for other byte vectors."""
    if x not in ctx.facts.byte_dots:
        return None
    op, bits = x.op, _bits(x)
    if op is Ops.LOAD and (at := byte_table_lookup(x)) is not None:
        d = _table_lookup(ctx, x, at)
    elif op is Ops.LOAD:
        d = ctx.vnew()
        n = x.dtype.count
        ctx.emit(NARROW_LOADS.get(n, Op.VMOVDQU), [d], [mem(ctx, x.src[0], n * 8)], (("d", 0, bits), ("u", 0, None)))
    elif op in BYTE_ALU:
        a, b = x.src
        if op is not Ops.SUB and x.src[0].op in (Ops.CONST, Ops.VCONST):
            a, b = b, a
        d = ctx.vnew()
        ctx.vemit(BYTE_ALU[op], d, [register(ctx, a), operand(ctx, b)], bits)
    elif op in RIGHT or op in LEFT:
        d = _shifted(ctx, x)
    elif op is Ops.BITCAST and (load := repeated_load(x)) is not None:
        if _read_by_broadcast_dots(ctx, x, load):
            return EMITTED   # (each dot reads the 4 bytes itself: ``sel_dot``)
        d = ctx.vnew()
        n = load.dtype.count
        ctx.emit(REPEATED_LOADS[n], [d], [mem(ctx, load.src[0], n * 8)], (("d", 0, bits), ("u", 0, None)))
    elif op is Ops.BITCAST:
        s = x.src[0]
        d = register(ctx, s) if is_bytes(s.dtype) else vpiece(ctx, s, 0)
    elif op is Ops.VECTORIZE:
        d = _broadcasted(ctx, x) if is_broadcast(x) else _shuffled(ctx, x)
    else:
        return None
    ctx.val[x] = (d,)
    return EMITTED


def _table_lookup(ctx: Emitter, load: UOp, at: UOp) -> VReg:
    """32 bytes of a 16-byte table at byte indices ``at`` (0..15: ungated, in range): the table in both 128-bit
    halves (vmovdqu + vinserti128), one vpshufb."""
    table, both, d = ctx.vnew(), ctx.vnew(), ctx.vnew()
    start = VMem(128, reg(ctx, load.src[0].src[0]), None, 1, 0)
    ctx.emit(Op.VMOVDQU, [table], [start], (("d", 0, 128), ("u", 0, None)))
    ctx.emit(Op.VINSERTI128, [both], [table, table], (("d", 0, 256), ("u", 0, 256), ("u", 1, 128), ("i", 1)))
    ctx.vemit(Op.VPSHUFB, d, [both, register(ctx, at)], 256)
    return d


def sel_dot(ctx: Emitter, x: UOp) -> tuple | None:
    """``tg_dot4_u8i8(a, b)``: int32 lane l = the sum over k < 4 of a[4l + k] (unsigned) * b[4l + k] (signed);
    ``tg_dot4_u8i8_acc(c, a, b)``: the same added to the int32 vector ``c`` (vpdpbusd's accumulator input: its
    destination; without VNNI one vpaddd after)."""
    if x.arg not in (DOT_HELPER, DOT_ACC_HELPER):
        return None
    *acc, a, b = x.src
    load = repeated_load(b)
    if load is not None and _read_by_broadcast_dots(ctx, b, load):
        d = ctx.vnew()
        ctx.emit(ctx.dot_op, [d], [vpiece(ctx, acc[0], 0) if acc else ctx.zero(256), register(ctx, a),
                                   mem(ctx, load.src[0], 32)], (("d", 0, 256), ("u", 1, 256), ("ub", 2, 8)), two=True)
        ctx.val[x] = (d,)
        return EMITTED
    rb = operand(ctx, b)
    if ctx.dot_op is Op.VPMADDUBSW:
        d = _dot_avx2(ctx, a, rb)
        if acc:
            summed = ctx.vnew()
            ctx.vemit(Op.VPADDD, summed, [vpiece(ctx, acc[0], 0), d], 256)
            d = summed
    else:
        d = ctx.vnew()
        ctx.emit(ctx.dot_op, [d], [vpiece(ctx, acc[0], 0) if acc else ctx.zero(256), register(ctx, a), rb],
                 (("d", 0, 256), ("u", 1, 256), ("u", 2, None if isinstance(rb, VMem) else 256)), two=True)
    ctx.val[x] = (d,)
    return EMITTED


def _read_by_broadcast_dots(ctx: Emitter, b: UOp, load: UOp) -> bool:
    """Whether the 4 repeated bytes ``b`` (of ``load``) are read only as the signed operand of EVEX ``vpdpbusd``s,
    each of which then reads them from memory as a broadcast ({1to8}) instead of a ``vpbroadcastd`` of its own: the
    8-row Q4_1 1536x576 row-lane kernel 329 -> 258 instructions, 69.9 -> 64.5 us (one core, medians, same run)."""
    users = ctx.facts.users.get(b, [])
    return (ctx.dot_op is Op.VPDPBUSD and load.dtype.count == 4 and b.dtype.count == 32 and bool(users)
            and all(u.op is Ops.CUSTOMI and u.arg in (DOT_HELPER, DOT_ACC_HELPER) and u.src[-1] is b
                    and b not in u.src[:-1] for u in users))


def _dot_avx2(ctx: Emitter, a: UOp, rb: Any) -> VReg:
    """The byte dot without VNNI, exact: vpmaddubsw's int16 pair sums saturate past 32767, so bytes of ``a`` below
    128 (by its bounds: 2 * 127 * 128 fits) go in whole, larger ones as their two nibbles (2 * 15 * 128 fits), the
    high one's pair sums weighted by 16 in vpmaddwd (int16 pairs -> int32 lanes)."""
    def op(o: Op, *uses: Any) -> VReg:
        d = ctx.vnew()
        ctx.vemit(o, d, list(uses), 256)
        return d

    def words(v: int) -> VMem:
        return ctx.const_mem(v.to_bytes(2, "little") * 16, 256)
    ra = register(ctx, a)
    if isinstance(a.vmax, int) and a.vmax < 128:
        return op(Op.VPMADDWD, op(Op.VPMADDUBSW, ra, rb), words(1))
    nibble = ctx.const_mem(b"\x0f" * 32, 256)
    low = op(Op.VPMADDUBSW, op(Op.VPAND, ra, nibble), rb)
    shifted = ctx.vnew()
    ctx.emit(Op.VPSRLW, [shifted], [ra], (("d", 0, 256), ("u", 0, 256), ("i", 4)))
    high = op(Op.VPMADDUBSW, op(Op.VPAND, shifted, nibble), rb)
    return op(Op.VPADDD, op(Op.VPMADDWD, low, words(1)), op(Op.VPMADDWD, high, words(16)))


def _table_address(ctx: Emitter, x: UOp) -> bool:
    """Whether ``x`` (int32 lanes of byte indices) is read only as the address of byte-dot table lookups (which
    ``_table_lookup`` selects from the bytes themselves)."""
    indexes = ctx.facts.users.get(x, [])
    loads = [u for i in indexes for u in ctx.facts.users.get(i, [])]
    return (bool(indexes) and all(i.op is Ops.INDEX for i in indexes) and bool(loads)
            and all(byte_table_lookup(u) is x.src[0] and selectable(u) for u in loads))


def sel_widen(ctx: Emitter, x: UOp) -> tuple | None:
    """A CAST of a byte vector of 4 or 8 lanes held in an xmm (``bytevec.widened_bytes``) to 32-bit lanes:
    ``vpmovzxbd`` (``vpmovsxbd`` for int8), then ``vcvtdq2ps`` for float32. A byte table's indices as int32
    (the address of ``_table_lookup``, which reads the bytes): no code."""
    if _table_address(ctx, x):
        return EMITTED
    if x not in ctx.facts.byte_dots:
        return None
    s, bits = x.src[0], 32 * x.dtype.count
    widen = Op.VPMOVSXBD if s.dtype.scalar() is dtypes.int8 else Op.VPMOVZXBD
    d = ctx.vnew()
    ctx.emit(widen, [d], [register(ctx, s)], (("d", 0, bits), ("u", 0, 128)))
    if x.dtype.scalar() is dtypes.float32:
        f = ctx.vnew()
        ctx.vemit(Op.VCVTDQ2PS, f, [d], bits)
        d = f
    ctx.val[x] = (d,)
    return EMITTED


def sel_held_constant(ctx: Emitter, x: UOp) -> tuple | None:
    """A 32-byte constant operand of byte-dot operands' ops (a nibble mask): loaded into a register once, where the
    kernel's constants are (before its loops), so the ops reading it in the loop read no memory (a load port each:
    the row lanes' 8 per block of 8 rows). Shift amounts are immediates: a constant only shifts read is not loaded.
    Not where it makes the allocator spill vectors (``X86Renderer.select`` selects again without)."""
    users = ctx.facts.users.get(x, [])
    if (not ctx.hold_constants or x not in ctx.facts.byte_dots or x.dtype.count != 32 or not users
            or any(u.op not in BYTE_ALU or u not in ctx.facts.byte_dots for u in users)
            or (slot := _const(ctx, x)) is None):
        return None
    d = ctx.vnew()
    ctx.emit(Op.VMOVDQU, [d], [slot], (("d", 0, 256), ("u", 0, None)))
    ctx.val[x] = (d,)
    ctx.holds_constants = True
    return EMITTED


BYTE_ISEL = PatternMatcher([
    (UPat((Ops.CONST, Ops.VCONST), BYTE_VECTORS, name="x"), sel_held_constant),
    (UPat((Ops.LOAD, Ops.BITCAST, Ops.VECTORIZE), name="x"),   # the parts of a repeated load (its broadcast reads it)
     lambda ctx, x: EMITTED if x in ctx.facts.repeated_parts else None),
    (UPat(Ops.CUSTOMI, name="x"), sel_dot),
    (UPat(Ops.GEP, src=(UPat(dtype=BYTE_VECTORS),), name="x"),   # lanes only an operand's byte VECTORIZEs read
     lambda ctx, x: EMITTED if x in ctx.facts.byte_dots else None),
    (UPat((Ops.LOAD, Ops.BITCAST, Ops.VECTORIZE, *BYTE_ALU, *RIGHT, *LEFT), BYTE_VECTORS, name="x"), sel_bytes),
    (UPat(Ops.CAST, src=(UPat(dtype=BYTE_VECTORS),), name="x"), sel_widen),
])

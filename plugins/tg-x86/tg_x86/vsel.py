"""Vector instruction selection: the vector UOps upcast makes -> AVX2 instructions on ymm pieces.

In:  vector UOps of a linear kernel (``dtype.count > 1``): VECTORIZE, GEP, VCONST and vector CONST,
     vector LOAD/STORE from a scalar pointer INDEX (consecutive elements), ALU ops, casts,
     comparisons and WHERE, vector accumulators (DEFINE_REG with a vector base).
Out: machine instructions appended by the ``emitter.Emitter`` the functions take; a vector value's
     entry in ``Emitter.val`` is a tuple of pieces (virtual vec registers). This module holds the rules
     (``VECTOR_ISEL``, ``HRED_ISEL``) and the arithmetic, compare, WHERE, cast and shuffle functions; pieces,
     lanes and scalarization are ``vpieces``, loads and stores ``vmemory``.

Legalization (wide vectors): a vector of n lanes is held as pieces of at most 8 lanes (32-bit
types and bool) or 4 lanes (64-bit types), one ymm register each (an xmm when the piece fits in
16 bytes); every op works piece by piece, so 16- and 32-lane vectors become 2 or 4 native ops.
bool lanes are 32-bit 0/1 integers (8 per piece; masks are made from them with a shift).

Constants (vector CONST, VCONST, VECTORIZE of CONSTs) are never held in registers: they are
frame slots read as memory operands, or loaded at the use that needs a register. Scalar loads
feeding only a broadcast are folded into it (``vbroadcastss ymm, [mem]``); single-use vector
loads fold into the memory operand of their ALU user; ``a*b + c`` on float vectors is one FMA where
``facts.plan_fma`` fused it (an accumulator update ``acc + a*b`` is a ``vfmadd231`` into the
accumulator).

Anything without a vector rule here is scalarized lane by lane (lanes extracted, the scalar
rules of ``isel`` applied, the results packed again): correct first. float -> int casts take the
vector path and branch to the scalar rules only when a lane is out of range (the wrap semantics).
"""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from tg_x86.emitter import Emitter
from tg_x86.isa import Cond, Op
from tg_x86.lanes import (
    _DTYPE,
    CMP_EQ_OQ,
    CMP_LT_OS,
    CMP_NEQ_UQ,
    CMP_UNORD_Q,
    COMMUTATIVE,
    DIV_OPS,
    HRED,
    HRED_OPS,
    SHIFT_OPS,
    TRUNC_IMM,
    VALU,
    VCMP_OPS,
    VECTOR_DTYPES,
    const_lanes,
    esize,
    is_vector,
    kind,
    lane_by_lane,
    lanes_per_piece,
    native,
    pbits,
    piece_bits,
    piece_lanes,
    scalar_of,
    shuffle_plan,
)
from tg_x86.machine import VMem
from tg_x86.operands import Label
from tg_x86.scalar import fma_order
from tg_x86.values import mem, reg
from tg_x86.vdivconst import vdivide_by_const
from tg_x86.vmemory import vload, vstore, widening_cast
from tg_x86.vpieces import (
    extract,
    pack,
    per_piece,
    pieces,
    scalar_lanes,
    scalarize,
    slice128,
    vin_memory,
    voperand,
    vpiece,
)
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import DType, PtrDType, dtypes
from tgcore.uop import GroupOp, Ops, PatternMatcher, UOp, UPat


def shuffle(ctx: Emitter, plan: list[tuple], dt: DType) -> tuple[VReg, ...]:
    """The pieces ``shuffle_plan`` planned: one vshufps/vshufpd each."""
    out = []
    for (op, (a, pa), (b, pb), imm), n in zip(plan, piece_lanes(dt), strict=True):
        d = ctx.vnew()
        ctx.vemit(op, d, [vpiece(ctx, a, pa), voperand(ctx, b, pb)], pbits(n, dt.scalar()), (("i", imm),))
        out.append(d)
    return tuple(out)


def hreduce(ctx: Emitter, u: UOp) -> Any:
    v, op, sdt = ctx.facts.hred_roots[u], u.op, u.dtype
    k = kind(sdt)

    def combine(a: VReg, b: VReg, bits: int) -> VReg:
        d = ctx.vnew()
        if op is Ops.MAX and k in ("f32", "f64"):
            pd = k == "f64"
            t, m = ctx.vnew(), ctx.vnew()
            ctx.vemit(Op.VMAXPD if pd else Op.VMAXPS, t, [a, b], bits)
            ctx.vemit(Op.VCMPPD if pd else Op.VCMPPS, m, [a, a], bits, (("i", CMP_UNORD_Q),))
            ctx.vemit(Op.VBLENDVPD if pd else Op.VBLENDVPS, d, [t, a, m], bits)
        else:
            xop = HRED[(op, k)]
            if xop is Op.VPMAXSD and dtypes.is_unsigned(sdt):
                xop = Op.VPMAXUD
            ctx.vemit(xop, d, [a, b], bits)
        return d
    counts = piece_lanes(v.dtype)
    bits = pbits(counts[0], sdt)
    acc = vpiece(ctx, v, 0)
    for p in range(1, len(counts)):
        acc = combine(acc, vpiece(ctx, v, p), bits)
    if bits == 256:
        acc = combine(acc, ctx.upper(acc), 128)
    if esize(sdt) == 4:
        t = ctx.vnew()
        ctx.emit(Op.VMOVHLPS, [t], [acc, acc], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
        acc = combine(acc, t, 128)
        t = ctx.vnew()
        ctx.emit(Op.VPERMILPS, [t], [acc], (("d", 0, 128), ("u", 0, 128), ("i", 1)))
    else:
        t = ctx.vnew()
        ctx.emit(Op.VMOVHLPS, [t], [acc, acc], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
    acc = combine(acc, t, 128)
    if k in ("f32", "f64"):
        return acc
    d = ctx.new("gpr")
    wide = esize(sdt) == 8
    ctx.emit(Op.VMOVQ if wide else Op.VMOVD, [d], [acc], (("d", 0, 64 if wide else 32), ("u", 0, 128)))
    return d


# ---- the vector rule of each op (see VECTOR_ISEL) ----
def vdefine_reg(ctx: Emitter, u: UOp) -> None:
    base = accumulator_dtype(u)
    if native(base):
        ctx.val[u] = tuple(ctx.vnew() for _ in piece_lanes(base))
    else:
        ctx.val[u] = tuple(ctx.newv(base.scalar()) for _ in range(base.count))


def vcompare(ctx: Emitter, u: UOp) -> None:
    if u not in ctx.facts.vfused_cmps:
        vcompare_bool(ctx, u)


def vbitcast(ctx: Emitter, u: UOp) -> None:
    src = u.src[0]
    if u in ctx.facts.widened:   # between a byte load and its widening CAST: nothing to do
        return
    s, t = scalar_of(src.dtype), scalar_of(u.dtype)
    if native(s) and native(t) and s.itemsize == t.itemsize and s is not dtypes.bool:
        ctx.val[u] = tuple(ctx.vcopy(r) for r in pieces(ctx, src))
    else:
        scalarize(ctx, u)


def gep(ctx: Emitter, u: UOp) -> None:
    v, lanes = u.src[0], u.arg
    if len(lanes) == 1:
        if u not in ctx.facts.shuffled_lanes:  # else only shuffled VECTORIZEs read it: nothing to extract
            ctx.val[u] = extract(ctx, v, lanes[0])
        return
    sdt = scalar_of(v.dtype)
    per = lanes_per_piece(sdt)
    start, n = lanes[0], len(lanes)
    if not native(sdt):
        ctx.val[u] = tuple(extract(ctx, v, j) for j in lanes)
    elif tuple(lanes) == tuple(range(start, start + n)) and start % per == 0 and n == per:
        ctx.val[u] = (ctx.vcopy(vpiece(ctx, v, start // per)),)
    elif tuple(lanes) == tuple(range(start, start + n)) and n * esize(sdt) == 16 and start % n == 0:
        ctx.val[u] = (ctx.vcopy(slice128(ctx, v, start)),)
    else:
        plan = shuffle_plan(u.dtype, [(v, j) for j in lanes])
        if plan is not None:
            ctx.val[u] = shuffle(ctx, plan, u.dtype)
        else:
            ctx.val[u] = pack(ctx, sdt, [extract(ctx, v, j) for j in lanes])


def vectorize(ctx: Emitter, u: UOp) -> None:
    if ctx.facts.is_vconst(u):
        return
    if not native(u.dtype):
        ctx.val[u] = tuple(reg(ctx, x) for x in u.src)
        return
    sdt = scalar_of(u.dtype)
    s = u.src[0]
    if all(x is s for x in u.src) and s in ctx.facts.bcast_loads:
        counts = piece_lanes(u.dtype)
        bits = pbits(counts[0], sdt)
        d = ctx.vnew()
        m = mem(ctx, s.src[0], esize(sdt) * 8)
        if sdt is dtypes.float64 and bits == 128:
            t = ctx.vnew()
            ctx.emit(Op.VMOVSD, [t], [m], (("d", 0, 128), ("u", 0, None)))
            ctx.emit(Op.VMOVLHPS, [d], [t, t], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128)))
        else:
            bop = {dtypes.float32: Op.VBROADCASTSS, dtypes.float64: Op.VBROADCASTSD}.get(
                sdt, Op.VPBROADCASTQ if esize(sdt) == 8 else Op.VPBROADCASTD)
            ctx.emit(bop, [d], [m], (("d", 0, bits), ("u", 0, None)))
        ctx.val[u] = (d,) * len(counts)
        return
    plan = ctx.facts.shuffles.get(u)
    if plan is not None:
        ctx.val[u] = shuffle(ctx, plan, u.dtype)
        return
    ctx.val[u] = pack(ctx, sdt, [reg(ctx, x) for x in u.src])


def binary(ctx: Emitter, xop: Op, u: UOp, a: UOp, b: UOp) -> None:
    """``d = a xop b`` piece by piece (per_piece written out: the most common vector op)."""
    in_memory = partial(vin_memory, ctx)
    if u.op in COMMUTATIVE and in_memory(a) and not in_memory(b):
        a, b = b, a
    out = []
    for p, bits in enumerate(piece_bits(u.dtype)):
        d = ctx.new("vec")
        ctx.vemit(xop, d, [vpiece(ctx, a, p), voperand(ctx, b, p)], bits)
        out.append(d)
    ctx.val[u] = tuple(out)


def _power_of_two_times(ctx: Emitter, u: UOp) -> bool:
    """Select int32 ``x * 2**s`` (the same constant in every lane; codegen's form of ``x << s``) as an immediate
    vpslld: vpmulld costs two uops and ten cycles. False (nothing emitted) for any other product."""
    for x, c in (u.src, u.src[::-1]):
        lanes = const_lanes(c) if ctx.facts.is_vconst(c) else None
        if lanes is None or any(v != lanes[0] for v in lanes):
            continue
        value = int(lanes[0]) & 0xFFFFFFFF
        if value and value & (value - 1) == 0:
            shift = value.bit_length() - 1
            def shl(d: VReg, p: int, bits: int, x: UOp = x, shift: int = shift) -> None:
                ctx.emit(Op.VPSLLD, [d], [vpiece(ctx, x, p)], (("d", 0, bits), ("u", 0, bits), ("i", shift)))
            per_piece(ctx, u, shl)
            return True
    return False


def valu(ctx: Emitter, u: UOp) -> None:
    if u in ctx.facts.fma_muls:   # its FMA is selected at the ADD
        return
    op, sdt = u.op, scalar_of(u.dtype)
    k = kind(sdt)
    if not native(u.dtype) or any(map(lane_by_lane, map(_DTYPE, u.src))):
        scalarize(ctx, u)
        return
    fused = ctx.facts.fma_adds.get(u)
    if fused is not None:
        c, mul = fused
        a, b = mul.src
        vfma(ctx, u, a, b, c, mul)
        return
    if op is Ops.MUL and k == "i32" and _power_of_two_times(ctx, u):
        return
    xop = VALU.get((op, k))
    if xop is not None:
        binary(ctx, xop, u, *u.src)
        return
    fl = k in ("f32", "f64")
    pd = k == "f64"
    if fl and op is Ops.MAX:  # (a != a || a > b) ? a : b
        a, b = u.src

        def vmax(d: VReg, p: int, bits: int) -> None:
            ra, t, m = vpiece(ctx, a, p), ctx.vnew(), ctx.vnew()
            ctx.vemit(Op.VMAXPD if pd else Op.VMAXPS, t, [ra, voperand(ctx, b, p)], bits)
            ctx.vemit(Op.VCMPPD if pd else Op.VCMPPS, m, [ra, ra], bits, (("i", CMP_UNORD_Q),))
            ctx.vemit(Op.VBLENDVPD if pd else Op.VBLENDVPS, d, [t, ra, m], bits)
        per_piece(ctx, u, vmax)
    elif fl and op is Ops.NEG:
        sign = -0.0
        per_piece(ctx, u, lambda d, p, bits: ctx.vemit(Op.VXORPS, d, [vpiece(ctx, u.src[0], p),
                                                                     ctx.splat(sign, sdt, bits)], bits))
    elif fl and op is Ops.SQRT:
        per_piece(ctx, u, lambda d, p, bits: ctx.vemit(Op.VSQRTPD if pd else Op.VSQRTPS, d,
                                                        [voperand(ctx, u.src[0], p)], bits))
    elif fl and op is Ops.RECIPROCAL:
        def recip(d: VReg, p: int, bits: int) -> None:
            one = ctx.vnew()
            ctx.vemit(Op.VMOVUPS, one, [ctx.splat(1.0, sdt, bits)], bits)
            ctx.vemit(Op.VDIVPD if pd else Op.VDIVPS, d, [one, voperand(ctx, u.src[0], p)], bits)
        per_piece(ctx, u, recip)
    elif fl and op is Ops.TRUNC:
        per_piece(ctx, u, lambda d, p, bits: ctx.vemit(Op.VROUNDPD if pd else Op.VROUNDPS, d,
                                                        [voperand(ctx, u.src[0], p)], bits, (("i", TRUNC_IMM),)))
    elif fl and op is Ops.MULACC:
        a, b, c = u.src
        vfma(ctx, u, a, b, c, u)
    elif k == "i32" and op is Ops.MAX:
        binary(ctx, Op.VPMAXUD if dtypes.is_unsigned(sdt) else Op.VPMAXSD, u, *u.src)
    elif k in ("i32", "i64") and op is Ops.NEG:
        sub = Op.VPSUBQ if k == "i64" else Op.VPSUBD
        per_piece(ctx, u, lambda d, p, bits: ctx.vemit(sub, d, [ctx.zero(bits), voperand(ctx, u.src[0], p)],
                                                        bits))
    elif k == "bool" and op is Ops.NEG:
        per_piece(ctx, u, lambda d, p, bits: ctx.vemit(Op.VPXOR, d, [vpiece(ctx, u.src[0], p),
                                                                    ctx.splat(1, dtypes.int32, bits)], bits))
    elif k in ("i32", "i64") and op in SHIFT_OPS:
        vshift(ctx, u)
    elif k == "i32" and op in DIV_OPS:
        vdivide(ctx, u)
    else:
        scalarize(ctx, u)


def vfma(ctx: Emitter, u: UOp, a: UOp, b: UOp, c: UOp, mul: UOp) -> None:
    """a*b + c rounded once, piece by piece: one vfmadd{132,213,231}p[sd] of the form ``fma_order`` picks."""
    form, x, y, z = fma_order(ctx, a, b, c, mul, u, partial(vin_memory, ctx))
    fma = Op["VFMADD" + form + ("PD" if esize(scalar_of(u.dtype)) == 8 else "PS")]

    def emit_fma(d: VReg, p: int, bits: int) -> None:
        rz = voperand(ctx, z, p)
        ctx.emit(fma, [d], [vpiece(ctx, x, p), vpiece(ctx, y, p), rz],
                  (("d", 0, bits), ("u", 1, bits), ("u", 2, None if isinstance(rz, VMem) else bits)), two=True)
    per_piece(ctx, u, emit_fma)


def vdivide(ctx: Emitter, u: UOp) -> None:
    """int32 division and remainder. By a constant (every lane the same): multiply and shift (``vdivconst``).
    Signed by a variable: through float64, which is exact here (operands below 2**31: a quotient never rounds
    across an integer); INT_MIN/-1 wraps by itself (vcvttpd2dq gives 0x80000000), lanes dividing by 0 are masked
    to 0. Unsigned by a variable: lane by lane."""
    a, b = u.src
    lanes = const_lanes(b) if ctx.facts.is_vconst(b) else None
    if lanes is not None and all(x == lanes[0] for x in lanes):
        vdivide_by_const(ctx, u, int(lanes[0]))
        return
    if dtypes.is_unsigned(scalar_of(u.dtype)):
        scalarize(ctx, u)
        return

    def div(d: VReg, p: int, bits: int) -> None:
        n = piece_lanes(u.dtype)[p]
        ra, rb = vpiece(ctx, a, p), vpiece(ctx, b, p)
        halves = []
        for h in range(2 if bits == 256 else 1):
            xa = ctx.upper(ra) if h else ra
            xb = ctx.upper(rb) if h else rb
            fa, fb, fq, q = ctx.vnew(), ctx.vnew(), ctx.vnew(), ctx.vnew()
            wide = 256 if n > 2 else 128
            ctx.emit(Op.VCVTDQ2PD, [fa], [xa], (("d", 0, wide), ("u", 0, 128)))
            ctx.emit(Op.VCVTDQ2PD, [fb], [xb], (("d", 0, wide), ("u", 0, 128)))
            ctx.vemit(Op.VDIVPD, fq, [fa, fb], wide)
            ctx.emit(Op.VCVTTPD2DQ, [q], [fq], (("d", 0, 128), ("u", 0, wide)))
            halves.append(q)
        q = halves[0] if len(halves) == 1 else ctx.join(*halves)
        if u.op is Ops.MOD:
            t, r = ctx.vnew(), ctx.vnew()
            ctx.vemit(Op.VPMULLD, t, [q, rb], bits)
            ctx.vemit(Op.VPSUBD, r, [ra, t], bits)
            q = r
        z = ctx.vnew()
        ctx.vemit(Op.VPCMPEQD, z, [rb, ctx.zero(bits)], bits)
        ctx.vemit(Op.VPANDN, d, [z, q], bits)
    per_piece(ctx, u, div)


def _reads_accumulator(u: UOp) -> bool:
    """Is ``u`` a read of an accumulator (``LOAD(INDEX(AFTER(DEFINE_REG, ...)))``), whose register is updated?"""
    return u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op in (Ops.AFTER, Ops.DEFINE_REG)


def vshift(ctx: Emitter, u: UOp) -> None:
    """Shift amounts outside 0..width-1 give 0 or the sign: exactly what vpsllv/vpsrlv/vpsrav do."""
    sdt = scalar_of(u.dtype)
    a, n = u.src
    wide = esize(sdt) == 8
    signed = not dtypes.is_unsigned(sdt)
    if u.op is Ops.SHL:
        imm_op, var_op = (Op.VPSLLQ, Op.VPSLLVQ) if wide else (Op.VPSLLD, Op.VPSLLVD)
    elif not signed:
        imm_op, var_op = (Op.VPSRLQ, Op.VPSRLVQ) if wide else (Op.VPSRLD, Op.VPSRLVD)
    elif not wide:
        imm_op, var_op = Op.VPSRAD, Op.VPSRAVD
    else:
        scalarize(ctx, u)
        return
    lanes = const_lanes(n) if ctx.facts.is_vconst(n) else None
    if lanes is not None and all(x == lanes[0] for x in lanes) and 0 <= int(lanes[0]) < sdt.itemsize * 8:
        amount = int(lanes[0])
        if amount == 0:  # the value itself (the first step of an unrolled loop over nibbles)
            held = ctx.val.get(a)
            if held is not None and not _reads_accumulator(a):  # (an accumulator's register changes later)
                ctx.val[u] = held
            else:
                per_piece(ctx, u, lambda d, p, bits: vpiece(ctx, a, p, into=d))
            return
        per_piece(ctx, u, lambda d, p, bits: ctx.emit(imm_op, [d], [vpiece(ctx, a, p)],
                                                       (("d", 0, bits), ("u", 0, bits), ("i", amount))))
    elif scalar_of(n.dtype) is sdt or esize(scalar_of(n.dtype)) == esize(sdt):
        per_piece(ctx, u, lambda d, p, bits: ctx.vemit(var_op, d, [vpiece(ctx, a, p), voperand(ctx, n, p)], bits))
    else:
        scalarize(ctx, u)


# ---- comparisons and WHERE ----
def compare_masks(ctx: Emitter, c: UOp) -> tuple[list[VReg], bool] | None:
    """All-ones lanes where comparison ``c`` holds, per piece of its sources; and whether the masks
    are inverted (hold where ``c`` is false). None when there is no vector compare for the dtype."""
    a, b = c.src
    sdt = scalar_of(a.dtype)
    k = kind(sdt)
    out: list[VReg] = []
    counts = piece_lanes(a.dtype)
    if k in ("f32", "f64"):
        pred = {Ops.CMPLT: CMP_LT_OS, Ops.CMPEQ: CMP_EQ_OQ, Ops.CMPNE: CMP_NEQ_UQ}[c.op]
        for p, n in enumerate(counts):
            m = ctx.vnew()
            ctx.vemit(Op.VCMPPD if k == "f64" else Op.VCMPPS, m, [vpiece(ctx, a, p), voperand(ctx, b, p)],
                       pbits(n, sdt), (("i", pred),))
            out.append(m)
        return out, False
    wide = k == "i64"
    eq, gt = (Op.VPCMPEQQ, Op.VPCMPGTQ) if wide else (Op.VPCMPEQD, Op.VPCMPGTD)
    for p, n in enumerate(counts):
        bits = pbits(n, sdt)
        m = ctx.vnew()
        if c.op is Ops.CMPEQ or c.op is Ops.CMPNE:
            ctx.vemit(eq, m, [vpiece(ctx, a, p), voperand(ctx, b, p)], bits)
        elif dtypes.is_unsigned(sdt):
            sign = ctx.splat(1 << (esize(sdt) * 8 - 1), sdt, bits)
            fa, fb = ctx.vnew(), ctx.vnew()
            ctx.vemit(Op.VPXOR, fa, [vpiece(ctx, a, p), sign], bits)
            ctx.vemit(Op.VPXOR, fb, [vpiece(ctx, b, p), sign], bits)
            ctx.vemit(gt, m, [fb, fa], bits)
        else:
            ctx.vemit(gt, m, [vpiece(ctx, b, p), voperand(ctx, a, p)], bits)
        out.append(m)
    return out, c.op is Ops.CMPNE


def narrow_masks(ctx: Emitter, masks: list[VReg], counts: tuple[int, ...]) -> list[VReg]:
    """64-bit lane masks (4 per piece) -> 32-bit lane masks (8 per piece)."""
    halves = []
    for m, n in zip(masks, counts, strict=True):
        if n > 2:
            d = ctx.vnew()
            ctx.vemit(Op.VSHUFPS, d, [m, ctx.upper(m)], 128, (("i", 0x88),))
        else:
            d = ctx.vnew()
            ctx.vemit(Op.VSHUFPS, d, [m, m], 128, (("i", 0x88),))
        halves.append(d)
    return [halves[i] if i + 1 >= len(halves) else ctx.join(halves[i], halves[i + 1])
            for i in range(0, len(halves), 2)]


def vcompare_bool(ctx: Emitter, c: UOp) -> None:
    if not native(c.src[0].dtype) or not native(c.src[1].dtype):
        scalarize(ctx, c)
        return
    res = compare_masks(ctx, c)
    assert res is not None   # (both sources native)
    masks, inverted = res
    src = c.src[0].dtype
    if esize(src.scalar()) == 8:
        masks = narrow_masks(ctx, masks, piece_lanes(src))
    out = []
    for m, n in zip(masks, piece_lanes(c.dtype), strict=True):
        bits = pbits(n, dtypes.int32)
        d = ctx.vnew()
        if inverted:  # mask + 1: 0 where equal, 1 elsewhere
            ctx.vemit(Op.VPADDD, d, [m, ctx.splat(1, dtypes.int32, bits)], bits)
        else:
            ctx.emit(Op.VPSRLD, [d], [m], (("d", 0, bits), ("u", 0, bits), ("i", 31)))
        out.append(d)
    ctx.val[c] = tuple(out)


def bool_mask(ctx: Emitter, c: UOp, p: int, sdt: DType) -> VReg:
    """A blend mask (sign bit per lane) for piece ``p`` of a WHERE of ``sdt`` from bool vector ``c``."""
    if esize(sdt) == 4:
        n = piece_lanes(c.dtype)[p]
        d = ctx.vnew()
        b = pbits(n, dtypes.int32)
        ctx.emit(Op.VPSLLD, [d], [vpiece(ctx, c, p)], (("d", 0, b), ("u", 0, b), ("i", 31)))
        return d
    x = slice128(ctx, c, p * 4)
    t, d = ctx.vnew(), ctx.vnew()
    ctx.emit(Op.VPSLLD, [t], [x], (("d", 0, 128), ("u", 0, 128), ("i", 31)))
    lanes = min(4, c.dtype.count - 4 * p)
    ctx.emit(Op.VPMOVSXDQ, [d], [t], (("d", 0, 256 if lanes > 2 else 128), ("u", 0, 128)))
    return d


def vwhere(ctx: Emitter, u: UOp) -> None:
    c, x, y = u.src
    sdt = scalar_of(u.dtype)
    if not (native(u.dtype) and native(c.dtype) and native(x.dtype) and native(y.dtype)):
        scalarize(ctx, u)
        return
    blend = Op.VBLENDVPD if esize(sdt) == 8 else Op.VBLENDVPS
    if c in ctx.facts.vfused_cmps:
        res = compare_masks(ctx, c)
        assert res is not None
        masks, inverted = res
    else:
        masks, inverted = [bool_mask(ctx, c, p, sdt) for p in range(len(piece_lanes(u.dtype)))], False
    if inverted:
        x, y = y, x
    per_piece(ctx, u, lambda d, p, bits: ctx.vemit(blend, d, [vpiece(ctx, y, p), voperand(ctx, x, p), masks[p]],
                                                     bits))


def vwhere_minmax(ctx: Emitter, u: UOp, name: str) -> None:
    """``(p<q).where(a, b)`` with a, b the compared values: vminps/vmaxps (``isel.min_or_max``)."""
    _, a, b = u.src
    xop = Op[name + ("PD" if esize(scalar_of(u.dtype)) == 8 else "PS")]
    per_piece(ctx, u, lambda d, p, bits: ctx.vemit(xop, d, [vpiece(ctx, a, p), voperand(ctx, b, p)], bits))


# ---- casts ----
def vcast(ctx: Emitter, u: UOp) -> None:
    src = u.src[0]
    if src in ctx.facts.widened:
        widening_cast(ctx, u)
        return
    if u in ctx.facts.narrowed:   # its STORE converts the source (narrowing_store)
        return
    s, t = scalar_of(src.dtype), scalar_of(u.dtype)
    ks, kt = kind(s), kind(t)
    if not (native(s) and native(t)):
        scalarize(ctx, u)
    elif s is t or (ks == kt and ks in ("i32", "i64")) or (ks == "bool" and kt == "i32"):
        ctx.val[u] = tuple(ctx.vcopy(r) for r in pieces(ctx, src))
    elif t is dtypes.bool:
        vto_bool(ctx, u)
    elif ks in ("i32", "bool") and kt == "f32" and (s is not dtypes.uint32):
        per_piece(ctx, u, lambda d, p, bits: ctx.vemit(Op.VCVTDQ2PS, d, [vpiece(ctx, src, p)], bits))
    elif ks in ("i32", "bool") and kt == "f64" and s is not dtypes.uint32:
        widen(ctx, u, Op.VCVTDQ2PD)
    elif ks == "f32" and kt == "f64":
        widen(ctx, u, Op.VCVTPS2PD)
    elif ks in ("i32", "bool") and kt == "i64":
        widen(ctx, u, Op.VPMOVSXDQ if s is dtypes.int32 else Op.VPMOVZXDQ)
    elif ks == "f64" and kt == "f32":
        narrow(ctx, u, lambda d, r, bits: ctx.emit(Op.VCVTPD2PS, [d], [r],
                                                    (("d", 0, 128), ("u", 0, bits))))
    elif ks == "i64" and kt == "i32":
        def low_dwords(d: VReg, r: VReg, bits: int) -> None:
            hi = ctx.upper(r) if bits == 256 else r
            ctx.vemit(Op.VSHUFPS, d, [r, hi], 128, (("i", 0x88),))
        narrow(ctx, u, low_dwords)
    elif ks in ("f32", "f64") and kt == "i32":
        float_to_i32(ctx, u)
    else:
        scalarize(ctx, u)


def widen(ctx: Emitter, u: UOp, op: Op) -> None:
    """32-bit lanes -> 64-bit lanes: output piece p reads the 128 bits at lane 4p."""
    src = u.src[0]
    per_piece(ctx, u, lambda d, p, bits: ctx.emit(op, [d], [slice128(ctx, src, 4 * p)],
                                                   (("d", 0, bits), ("u", 0, 128))))


def narrow(ctx: Emitter, u: UOp, fn: Any) -> None:
    """64-bit lanes -> 32-bit lanes: each source piece gives an xmm, two of them make a piece."""
    src = u.src[0]
    s = scalar_of(src.dtype)
    halves = []
    for p, n in enumerate(piece_lanes(src.dtype)):
        d = ctx.vnew()
        fn(d, vpiece(ctx, src, p), pbits(n, s))
        halves.append(d)
    ctx.val[u] = tuple(halves[i] if i + 1 >= len(halves) else ctx.join(halves[i], halves[i + 1])
                        for i in range(0, len(halves), 2))


def vto_bool(ctx: Emitter, u: UOp) -> None:
    src = u.src[0]
    s = scalar_of(src.dtype)
    k = kind(s)
    if k == "bool":
        ctx.val[u] = tuple(ctx.vcopy(r) for r in pieces(ctx, src))
        return
    ne = UOp(Ops.CMPNE, u.dtype, (src, UOp.const(src.dtype, 0)))
    vcompare_bool(ctx, ne)
    ctx.val[u] = ctx.val[ne]


def float_to_i32(ctx: Emitter, u: UOp) -> None:
    """vcvtt*2dq truncates; lanes out of int32 range (and NaN) give 0x80000000: when any lane does,
    the whole vector is redone lane by lane with the scalar rules (which wrap like C)."""
    src = u.src[0]
    s = scalar_of(src.dtype)
    if s is dtypes.float64:
        narrow(ctx, u, lambda d, r, bits: ctx.emit(Op.VCVTTPD2DQ, [d], [r], (("d", 0, 128), ("u", 0, bits))))
    else:
        per_piece(ctx, u, lambda d, p, bits: ctx.vemit(Op.VCVTTPS2DQ, d, [vpiece(ctx, src, p)], bits))
    out = ctx.val[u]
    counts = piece_lanes(u.dtype)
    any_bad = None
    for r, n in zip(out, counts, strict=True):
        bits = pbits(n, dtypes.int32)
        m = ctx.vnew()
        ctx.vemit(Op.VPCMPEQD, m, [r, ctx.splat(-(1 << 31), dtypes.int32, bits)], bits)
        if any_bad is None:
            any_bad = m
        else:
            o = ctx.vnew()
            ctx.vemit(Op.VPOR, o, [any_bad, m], bits)
            any_bad = o
    done = Label("f2i_ok")
    b = pbits(counts[0], dtypes.int32)
    ctx.emit(Op.VPTEST, [], [any_bad, any_bad], (("u", 0, b), ("u", 1, b)))
    ctx.jump(done, Cond.E)
    saved, ctx.lane_cache = ctx.lane_cache, None   # values made inside the branch do not outlive it
    packed = pack(ctx, scalar_of(u.dtype), scalar_lanes(ctx, u))
    ctx.lane_cache = saved
    for r, x in zip(out, packed, strict=True):
        ctx.copy(r, x)
    ctx.label(done)


# ---- the rules (see ``isel`` for the rule convention) ----
EMITTED = ()  # a rule's result: the UOp became the instructions the rule emitted into ctx.prog


def sel_horizontal(ctx: Any, x: UOp) -> tuple | None:
    """A node of a horizontal reduction tree (``plan_horizontal``): the root reduces the whole vector,
    the other nodes and the lane extractions emit nothing."""
    if x in ctx.facts.hred_skip:
        return EMITTED
    if x in ctx.facts.hred_roots:
        ctx.val[x] = hreduce(ctx, x)
        return EMITTED
    return None


def vector_rule(method: Callable[[Any, UOp], None], vector: Callable[[UOp], bool] | None = None) -> Callable:
    """A rule running ``method`` when ``vector(x)`` says the UOp is a vector one (default: its dtype has
    several lanes), else falling through to the scalar rules."""
    if vector is None:
        def rule(ctx: Any, x: UOp) -> tuple | None:
            if is_vector(x.dtype):
                method(ctx, x)
                return EMITTED
            return None
    else:
        test = vector

        def rule(ctx: Any, x: UOp) -> tuple | None:
            if test(x):
                method(ctx, x)
                return EMITTED
            return None
    return rule


def min_or_max(c: UOp, a: UOp, b: UOp) -> str | None:
    """The instruction computing ``(p<q).where(a, b)`` when a and b are the compared values: ``(p<q).where(p, q)``
    is ``vmin p, q`` and ``(p<q).where(q, p)`` is ``vmax q, p``. Exact: vmin(s1, s2) is ``s1 < s2 ? s1 : s2`` and
    vmax(s1, s2) ``s1 > s2 ? s1 : s2``, both giving s2 when either is NaN or both are zeros (of any sign),
    which is what the ordered compare of the WHERE picks too."""
    p, q = c.src
    if a is p and b is q:
        return "VMIN"
    if a is q and b is p:
        return "VMAX"
    return None


def sel_vminmax(ctx: Any, x: UOp, c: UOp, a: UOp, b: UOp) -> tuple | None:
    """A float WHERE picking between the values its less-than compares: vmin/vmax piece by piece."""
    dt = x.dtype
    if not is_vector(dt) or not native(dt) or not dtypes.is_float(dt.scalar()):
        return None
    name = min_or_max(c, a, b)
    if name is None:
        return None
    vwhere_minmax(ctx, x, name)
    return EMITTED


def accumulator_dtype(u: UOp) -> DType:
    """What a DEFINE_REG holds (its dtype is a pointer into registers)."""
    dt = u.dtype
    assert isinstance(dt, PtrDType), f"x86: DEFINE_REG of {dt}"
    return dt.base


def _always(x: UOp) -> bool:
    return True


# the nodes and leaves of a reduction tree are scalars of a vector lane dtype (the vector lines of these ops are
# not looked at: the generated matcher tests the dtype inline)
HRED_ISEL = PatternMatcher([(UPat((*HRED_OPS, Ops.GEP), VECTOR_DTYPES, name="x"), sel_horizontal)])

VECTOR_ISEL = PatternMatcher([
    # lanes of a vector (a one-lane GEP has a scalar dtype); VCONST is read from frame slots where used
    (UPat(Ops.GEP, name="x"), vector_rule(gep, _always)),
    (UPat(Ops.VCONST), lambda: EMITTED),
    # accumulators and stores by the dtype they hold
    (UPat(Ops.DEFINE_REG, name="x"), vector_rule(vdefine_reg, lambda x: accumulator_dtype(x).count > 1)),
    (UPat(Ops.STORE, name="x"), vector_rule(vstore, lambda x: is_vector(x.src[1].dtype))),
    # broadcasts (from memory when the load has no other use), lane packing
    (UPat(Ops.VECTORIZE, name="x"), vector_rule(vectorize)),
    (UPat(Ops.LOAD, name="x"), vector_rule(vload)),
    # compare + WHERE: a mask and a blend, no bool when WHEREs are the only users
    (UPat(VCMP_OPS, name="x"), vector_rule(vcompare)),
    (UPat(Ops.WHERE, src=(UPat(Ops.CMPLT, name="c"), UPat.var("a"), UPat.var("b")), name="x"), sel_vminmax),
    (UPat(Ops.WHERE, name="x"), vector_rule(vwhere)),
    (UPat(Ops.CAST, name="x"), vector_rule(vcast)),
    (UPat(Ops.BITCAST, name="x"), vector_rule(vbitcast)),
    # arithmetic piece by piece (FMA into accumulators, folded loads), else lane by lane
    (UPat(GroupOp.ALU - VCMP_OPS - {Ops.WHERE}, name="x"), vector_rule(valu)),
])

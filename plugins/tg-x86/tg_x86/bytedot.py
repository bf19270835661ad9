"""A quantization block's byte dot product per int32 lane as one ``vpdpbusd`` (AVX512-VNNI), and the byte vectors
that feed it.

In:  a kernel in REDUCE form (the renderer's ``pre_isel``), then its linear UOps (selection).
Out: ``byte_dot_rule``: the core's rule (``tgcore.renderer.cbytedot.byte_dot``: a lane's 4 byte products, summed
     over a loop of 4 steps, as a ``CUSTOMI`` of two 32-byte vectors) where every node of both operands has a rule
     here (``selectable``), else nothing (the loop stays, lane by lane). ``BYTE_ISEL``: rules for the byte vectors
     of 16 and 32 lanes those operands are made of, one xmm or ymm register each, and for the call:

     LOAD                      vmovdqu (ungated, consecutive bytes)
     AND OR XOR ADD SUB        vpand vpor vpxor vpaddb vpsubb (a constant operand from a frame slot)
     SHR, IDIV by 2**s         vpsrlw s + vpand (0xFF >> s): x86 has no byte shift (unsigned lanes)
     SHL, MUL by 2**s          vpsllw s + vpand
     SHR by a broadcast s      vpsrlw by s in an xmm + vpand with (0x00FF >> s) in both bytes of each word
     VECTORIZE of one byte     vmovd + vpbroadcastb (a K-quant's mask or shift of the sub-block in the loop)
     BITCAST                   the source's register (a byte vector, or one piece of 32- or 64-bit lanes)
     VECTORIZE of lanes        vinserti128 of two 16-byte sources and/or vpshufb within 128-bit halves
     CUSTOMI tg_dot4_u8i8      vpxor + vpdpbusd (exact: 4 products of a byte by a signed byte fit an int32, and
                               vpdpbusd does not saturate)

The lanes a VECTORIZE takes (single-lane GEPs) emit nothing: only such VECTORIZEs read them.
"""
from __future__ import annotations

from typing import Any

from tg_x86.emitter import Emitter
from tg_x86.isa import Op
from tg_x86.machine import VMem
from tg_x86.values import mem, reg
from tg_x86.vpieces import vpiece
from tgcore.codegen.regalloc import VReg
from tgcore.dtype import DType, PtrDType, dtypes
from tgcore.renderer.cbytedot import DOT_HELPER, byte_dot
from tgcore.uop import Ops, PatternMatcher, UOp, UPat

BYTES = (dtypes.uint8, dtypes.int8)
BYTE_VECTORS = tuple(dt.vec(n) for dt in BYTES for n in (16, 32))
BYTE_ALU = {Ops.AND: Op.VPAND, Ops.OR: Op.VPOR, Ops.XOR: Op.VPXOR, Ops.ADD: Op.VPADDB, Ops.SUB: Op.VPSUBB}
RIGHT, LEFT = (Ops.SHR, Ops.IDIV), (Ops.SHL, Ops.MUL)   # by a power of two (IDIV, MUL: by 2**s; SHR, SHL: by s)
EMITTED = ()


def is_bytes(dt: DType) -> bool:
    return dt in BYTE_VECTORS and not isinstance(dt, PtrDType)


def _lanes(u: UOp) -> list[int] | None:
    if u.op is Ops.CONST:
        return [int(u.arg)] * u.dtype.count
    return [int(v) for v in u.arg] if u.op is Ops.VCONST else None


def _shift(u: UOp) -> int | None:
    """The bits a byte shift moves (SHR/SHL by a constant, IDIV/MUL by a power of two, the same in every lane),
    None for anything else (or a right shift of signed bytes)."""
    lanes = _lanes(u.src[1])
    if lanes is None or any(v != lanes[0] for v in lanes) or lanes[0] < 0:
        return None
    if u.op in RIGHT and not dtypes.is_unsigned(u.dtype.scalar()):
        return None
    if u.op in (Ops.SHR, Ops.SHL):
        return lanes[0]
    v = lanes[0]
    return v.bit_length() - 1 if v and v & (v - 1) == 0 else None


def _broadcast(u: UOp) -> bool:
    """A VECTORIZE of one scalar byte in every lane."""
    return u.op is Ops.VECTORIZE and u.src[0].dtype in BYTES and all(x is u.src[0] for x in u.src)


def _variable_shift(u: UOp) -> bool:
    """An unsigned byte SHR by one amount (not a constant) in every lane."""
    return u.op is Ops.SHR and dtypes.is_unsigned(u.dtype.scalar()) and _broadcast(u.src[1])


def _period(u: UOp) -> int:
    """Bytes after which ``u``'s bytes repeat (a broadcast of one 2-, 4- or 8-byte value bitcast to bytes), else
    its size."""
    if u.op is Ops.BITCAST and u.src[0].op is Ops.VECTORIZE:
        lanes = u.src[0].src
        if all(x is lanes[0] for x in lanes) and lanes[0].dtype.itemsize in (2, 4, 8):
            return lanes[0].dtype.itemsize
    return u.dtype.count


def shuffle_plan(u: UOp) -> tuple[list[UOp], list[int]] | None:
    """A byte VECTORIZE of lanes of at most two byte vectors as (its sources, then: the first in the low 128 bits,
    the second in the high ones, or a 16-byte one in both; the byte of that each lane takes, within its half).
    None when some lane needs a byte from the other half."""
    if not all(x.op is Ops.GEP and len(x.arg) == 1 and is_bytes(x.src[0].dtype) for x in u.src):
        return None
    sources = list(dict.fromkeys(x.src[0] for x in u.src))
    if len(sources) > 2 or (len(sources) == 2 and any(s.dtype.count != 16 for s in sources)):
        return None
    picks = []
    for i, x in enumerate(u.src):
        s, j = x.src[0], x.arg[0]
        half = i // 16
        if s.dtype.count == 16:   # placed in the half it is needed in
            at = j if len(sources) == 1 or s is sources[half] else None
        elif j // 16 == half:
            at = j % 16
        else:
            period = _period(s)
            at = j % period if 16 % period == 0 else None
        if at is None:
            return None
        picks.append(at)
    return sources, picks


def selectable(u: UOp) -> bool:
    """Whether every byte vector ``u`` is computed from has a rule in ``BYTE_ISEL``."""
    if u.op in (Ops.CONST, Ops.VCONST):
        return True
    if not is_bytes(u.dtype):
        return False
    if u.op is Ops.LOAD:
        return (len(u.src) == 1 and u.src[0].op is Ops.INDEX and len(u.src[0].src) == 2
                and u.src[0].src[1].dtype.count == 1)
    if u.op in BYTE_ALU:
        return all(selectable(s) for s in u.src)
    if u.op in RIGHT or u.op in LEFT:
        return (_shift(u) is not None or _variable_shift(u)) and selectable(u.src[0])
    if u.op is Ops.BITCAST:
        s = u.src[0]
        whole = s.dtype.scalar().itemsize * s.dtype.count == u.dtype.count
        return whole and (selectable(s) if is_bytes(s.dtype) else
                          s.dtype.scalar() in (dtypes.uint32, dtypes.int32, dtypes.uint64, dtypes.int64))
    if u.op is Ops.VECTORIZE:
        if _broadcast(u):
            return True
        plan = shuffle_plan(u)
        return plan is not None and all(selectable(s) for s in plan[0])
    return False


def byte_dot_rule(red: UOp) -> UOp | None:
    """``byte_dot`` where this module selects both operands (else the REDUCE stays)."""
    out = byte_dot(red)
    return out if out is not None and all(selectable(s) for s in out.src) else None


# ---- selection ----
def _bits(u: UOp) -> int:
    return u.dtype.count * 8


def _const(ctx: Emitter, u: UOp) -> VMem | None:
    lanes = _lanes(u)
    return None if lanes is None else ctx.const_mem(bytes(v & 0xFF for v in lanes), _bits(u))


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


def _shifted_by_variable(ctx: Emitter, u: UOp) -> VReg:
    """Bytes shifted right by one amount ``s`` held in a register: words shifted, then the bits each byte got from
    its neighbour cleared by (0xFF >> s) in both bytes of each word (made from 0x00FF >> s; 0 from s = 8 on, as
    C's shift of the promoted byte gives)."""
    bits = _bits(u)
    x, count = register(ctx, u.src[0]), _dword(ctx, u.src[1].src[0])

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
    s, bits = _shift(u), _bits(u)
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
    d = ctx.vnew()
    ctx.vemit(Op.VPSHUFB, d, [base, ctx.const_mem(bytes(picks), bits)], bits)
    return d


def sel_bytes(ctx: Emitter, x: UOp) -> tuple | None:
    """A byte vector of a dot product's operand (see the module doc); None for other byte vectors."""
    if x not in ctx.facts.byte_dots:
        return None
    op, bits = x.op, _bits(x)
    if op is Ops.LOAD:
        d = ctx.vnew()
        ctx.emit(Op.VMOVDQU, [d], [mem(ctx, x.src[0], bits)], (("d", 0, bits), ("u", 0, None)))
    elif op in BYTE_ALU:
        a, b = x.src
        if op is not Ops.SUB and x.src[0].op in (Ops.CONST, Ops.VCONST):
            a, b = b, a
        d = ctx.vnew()
        ctx.vemit(BYTE_ALU[op], d, [register(ctx, a), operand(ctx, b)], bits)
    elif op in RIGHT or op in LEFT:
        d = _shifted(ctx, x)
    elif op is Ops.BITCAST:
        s = x.src[0]
        d = register(ctx, s) if is_bytes(s.dtype) else vpiece(ctx, s, 0)
    elif op is Ops.VECTORIZE:
        d = _broadcasted(ctx, x) if _broadcast(x) else _shuffled(ctx, x)
    else:
        return None
    ctx.val[x] = (d,)
    return EMITTED


def sel_dot(ctx: Emitter, x: UOp) -> tuple | None:
    """``tg_dot4_u8i8(a, b)``: int32 lane l = the sum over k < 4 of a[4l + k] (unsigned) * b[4l + k] (signed)."""
    if x.arg != DOT_HELPER:
        return None
    a, b = x.src
    d = ctx.vnew()
    acc = ctx.zero(256)
    rb = operand(ctx, b)
    ctx.emit(Op.VPDPBUSD, [d], [acc, register(ctx, a), rb],
             (("d", 0, 256), ("u", 1, 256), ("u", 2, None if isinstance(rb, VMem) else 256)), two=True)
    ctx.val[x] = (d,)
    return EMITTED


BYTE_ISEL = PatternMatcher([
    (UPat(Ops.CUSTOMI, name="x"), sel_dot),
    (UPat(Ops.GEP, src=(UPat(dtype=BYTE_VECTORS),), name="x"),   # lanes only an operand's byte VECTORIZEs read
     lambda ctx, x: EMITTED if x in ctx.facts.byte_dots else None),
    (UPat((Ops.LOAD, Ops.BITCAST, Ops.VECTORIZE, *BYTE_ALU, *RIGHT, *LEFT), BYTE_VECTORS, name="x"), sel_bytes),
])

"""Facts of dtypes and constants for selection: how scalars are held (gprs, xmm lanes, canonical integers) and
vectors (ymm pieces), instruction families per lane type, constants' lanes and bytes, and the one-byte op codes
selection finds lines with.

In:  dtypes and UOps. Out: pure functions (memoized per dtype: dtypes are interned) and tables; no state of a kernel.
"""
from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Callable
from typing import Any

from tg_x86.isa import Cond, Flag, Op
from tg_x86.machine import ALLOC_GPR, Slot, VMem
from tgcore.dtype import DType, PtrDType, dtypes
from tgcore.uop import Ops, UOp

# sets, not tuples: membership is a hash lookup (ops and dtypes hash by identity; a tuple compares each with ==)
VCMP_OPS = frozenset({Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE})
VFOLD_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR})
COMMUTATIVE = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR})
VECTOR_DTYPES = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64,
                           dtypes.bool})
BROADCASTABLE = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64})
BARRIER_OPS = frozenset({Ops.STORE, Ops.RANGE, Ops.END})   # no load is folded into a user across these
HRED_OPS = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})          # ops of horizontal reductions
CONST_OPS = frozenset({Ops.CONST, Ops.VCONST})
SHIFT_OPS = frozenset({Ops.SHL, Ops.SHR})
DIV_OPS = frozenset({Ops.IDIV, Ops.MOD})
# the ops the per-line helpers test, as module names: on Python 3.11 reading ``Ops.CONST`` goes through EnumType's
# __getattr__ hook (a Python-level call, ~0.1 us: five times a global read)
CONST, VCONST, VECTORIZE, GEP = Ops.CONST, Ops.VCONST, Ops.VECTORIZE, Ops.GEP

# (op, kind) -> instruction; kind is "f32", "f64", "i32", "i64" or "bool" (see ``kind``)
VALU: dict[tuple[Ops, str], Op] = {
    (Ops.ADD, "f32"): Op.VADDPS, (Ops.SUB, "f32"): Op.VSUBPS, (Ops.MUL, "f32"): Op.VMULPS, (Ops.FDIV, "f32"): Op.VDIVPS,
    (Ops.ADD, "f64"): Op.VADDPD, (Ops.SUB, "f64"): Op.VSUBPD, (Ops.MUL, "f64"): Op.VMULPD, (Ops.FDIV, "f64"): Op.VDIVPD,
    (Ops.ADD, "i32"): Op.VPADDD, (Ops.SUB, "i32"): Op.VPSUBD, (Ops.MUL, "i32"): Op.VPMULLD,
    (Ops.AND, "i32"): Op.VPAND, (Ops.OR, "i32"): Op.VPOR, (Ops.XOR, "i32"): Op.VPXOR,
    (Ops.ADD, "i64"): Op.VPADDQ, (Ops.SUB, "i64"): Op.VPSUBQ,
    (Ops.AND, "i64"): Op.VPAND, (Ops.OR, "i64"): Op.VPOR, (Ops.XOR, "i64"): Op.VPXOR,
    (Ops.ADD, "bool"): Op.VPOR, (Ops.MUL, "bool"): Op.VPAND, (Ops.MAX, "bool"): Op.VPOR,
    (Ops.AND, "bool"): Op.VPAND, (Ops.OR, "bool"): Op.VPOR, (Ops.XOR, "bool"): Op.VPXOR,
}


# horizontal reductions with a vector form: (op, kind) -> instruction combining two registers
HRED: dict[tuple[Ops, str], Op] = {
    (Ops.ADD, "f32"): Op.VADDPS, (Ops.ADD, "f64"): Op.VADDPD, (Ops.ADD, "i32"): Op.VPADDD, (Ops.ADD, "i64"): Op.VPADDQ,
    (Ops.MUL, "f32"): Op.VMULPS, (Ops.MUL, "f64"): Op.VMULPD, (Ops.MUL, "i32"): Op.VPMULLD,
    (Ops.MAX, "f32"): Op.VMAXPS, (Ops.MAX, "f64"): Op.VMAXPD, (Ops.MAX, "i32"): Op.VPMAXSD,
}


class _Memo(dict):
    """``fn``'s answer for each key, computed once. Callers use the bound ``__getitem__``: a lookup in C, no Python
    frame, on all but the first call."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.fn = fn

    def __missing__(self, key: Any) -> Any:
        found = self[key] = self.fn(key)
        return found


def memo(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn`` of one hashable argument, memoized (a ``_Memo``)."""
    return _Memo(fn).__getitem__


# a fact of dtypes (interned, so the answers hold for every kernel and the memo stays small)
by_dtype = memo


def _kind(dt: DType) -> str:
    """The instruction family of a scalar dtype's lanes."""
    if dt is dtypes.bool:
        return "bool"
    if dtypes.is_float(dt):
        return "f64" if dt.itemsize == 8 else "f32"
    return "i64" if dt.itemsize == 8 else "i32"


def _esize(dt: DType) -> int:
    """Bytes of one lane in a register (bool lanes are 32-bit)."""
    return 8 if dt.itemsize == 8 else 4


def lanes_per_piece(dt: DType) -> int:
    """Lanes of ``dt`` in a ymm piece (AVX2 layout; ``piece_lanes`` gives a vector's pieces at the kernel's level)."""
    return 32 // esize(dt)


# ---- the layout level: AVX2 (ymm pieces) or AVX-512 (float32 vectors of whole zmm pieces) ----
ZMM_LANES = 16   # float32 lanes of a zmm piece
_WIDE = [False]  # the level of the kernel being selected: float32 vectors of 16k lanes are zmm pieces


def _wide(dt: DType) -> bool:
    """Held as zmm pieces at the AVX-512 level: float32 vectors of a multiple of 16 lanes (anything else keeps the
    AVX2 layout, so the ymm rules hold for it)."""
    return dt.count % ZMM_LANES == 0 and dt.scalar() is dtypes.float32 and not isinstance(dt, PtrDType)


def _native(dt: DType) -> bool:
    """Lanes of this dtype live in ymm pieces; other vectors are held lane by lane as scalars."""
    return dt.scalar() in VECTOR_DTYPES


def _is_vector(dt: DType) -> bool:
    return dt.count > 1 and not isinstance(dt, PtrDType)


def _lane_by_lane(dt: DType) -> bool:
    """A vector held lane by lane as scalars (not native)."""
    return _is_vector(dt) and not _native(dt)


def _piece_lanes(dt: DType) -> tuple[int, ...]:
    """Lanes in each piece of a vector dtype (one lane per "piece" for lane-by-lane dtypes)."""
    if not native(dt):
        return (1,) * dt.count
    if _WIDE[0] and _wide(dt):
        return (ZMM_LANES,) * (dt.count // ZMM_LANES)
    n, per = dt.count, lanes_per_piece(dt.scalar())
    return tuple(min(per, n - i) for i in range(0, n, per))


def pbits(n: int, sdt: DType) -> int:
    """Register width of a piece of ``n`` lanes."""
    size = n * esize(sdt)
    return 128 if size <= 16 else 256 if size <= 32 else 512


def _piece_bits(dt: DType) -> tuple[int, ...]:
    """Register width of each piece of a native vector dtype."""
    sdt = dt.scalar()
    return tuple(pbits(n, sdt) for n in piece_lanes(dt))


kind, esize, native, is_vector, lane_by_lane, piece_lanes, piece_bits, scalar_of = map(
    by_dtype, (_kind, _esize, _native, _is_vector, _lane_by_lane, _piece_lanes, _piece_bits, DType.scalar))
is_wide = by_dtype(_wide)
# the memo tables whose answers depend on the level, and their entries at the other level
_LEVEL_MEMOS: tuple[dict, ...] = (piece_lanes.__self__, piece_bits.__self__)  # type: ignore[attr-defined]
_OTHER_LEVEL: list[list[dict]] = [[{} for _ in _LEVEL_MEMOS]]


def wide_level() -> bool:
    return _WIDE[0]


def set_wide_level(wide: bool) -> None:
    """Select the layout of the kernel about to be selected (``True``: AVX-512). The level's memo entries are
    swapped in (kept for the other level), so both levels stay as fast as one."""
    if wide == _WIDE[0]:
        return
    stash = _OTHER_LEVEL[0]
    _OTHER_LEVEL[0] = [dict(m) for m in _LEVEL_MEMOS]
    for m, kept in zip(_LEVEL_MEMOS, stash, strict=True):
        m.clear()
        m.update(kept)
    _WIDE[0] = wide


def piece_step(dt: DType) -> int:
    """Lanes between the starts of consecutive pieces of a native vector dtype (every piece but the last is full)."""
    return piece_lanes(dt)[0]


@memo
def vector_layout(key: tuple[int, tuple[type, ...]]) -> tuple:
    """The layout of ``d = op(x0, x1, ...)`` on registers of one width, a VMem source a memory operand: key (bits,
    the sources' types). Made once per key."""
    bits, types = key
    return (("d", 0, bits), *(("u", i, None if t is VMem else bits) for i, t in enumerate(types)))


def lane_bytes(value: Any, sdt: DType) -> bytes:
    if sdt is dtypes.float64:
        return struct.pack("<d", float(value))
    if sdt is dtypes.float32:
        return struct.pack("<f", float(value))
    v = int(bool(value)) if sdt is dtypes.bool else int(value)
    if esize(sdt) == 8:
        return (v & ((1 << 64) - 1)).to_bytes(8, "little")
    return (v & 0xFFFFFFFF).to_bytes(4, "little")


# a kernel's ops as bytes, one per line (``OP_CODE``): lines of an op are found with bytes.find and translate, in C.
# (A list of Ops searched with list.index, count or ``in`` compares them through the slow comparison slot of a class
# defining __lt__, and a list.index that misses formats the op's repr: a quarter of selection's time.)
OP_CODE = {op: i for i, op in enumerate(Ops)}
assert len(OP_CODE) <= 256, "an op code is one byte"


def op_table(ops: frozenset[Ops]) -> bytes:
    """A ``bytes.translate`` table: the code of each of ``ops`` to 1, every other to 0."""
    return bytes(op in ops for op in Ops).ljust(256, b"\0")


# the table of one op or a set of them (what ``facts.KernelLines.lines`` picks)
line_table = memo(lambda ops: op_table(ops if isinstance(ops, frozenset) else frozenset({ops})))


BARRIER_TABLE = op_table(BARRIER_OPS)

_DTYPE = operator.attrgetter("dtype")
_OP = operator.attrgetter("op")
_VECTOR, _LANE = operator.itemgetter(0), operator.itemgetter(1)   # of a (vector, lane) leaf of a reduction tree


def is_vconst(u: UOp) -> bool:
    return u.op in CONST_OPS or (u.op is VECTORIZE and set(map(_OP, u.src)) == {CONST})


def is_vzero(u: UOp) -> bool:
    """A constant vector of +0 in every lane (what vxorps makes)."""
    return all(v == 0 and not (isinstance(v, float) and str(v)[0] == "-") for v in const_lanes(u))


def uniform(u: UOp) -> Any:
    """The value of every lane of a constant vector that has one (else None)."""
    if u.op is CONST:
        return u.arg
    if u.op is VECTORIZE and len(set(u.src)) == 1:   # one CONST in every lane
        return u.src[0].arg
    return None

def const_lanes(u: UOp) -> list:
    if u.op is CONST:
        return [u.arg] * u.dtype.count
    if u.op is VCONST:
        return list(u.arg)
    return [s.arg for s in u.src]


def shuffle_plan(dt: DType, picks: list[tuple[UOp, int]]) -> list[tuple] | None:
    """How to build a vector of ``dt`` whose lane j is lane k of vector v (``picks[j] = (v, k)``) with one
    vshufps (32-bit lanes) or vshufpd (64-bit) per piece, or None. Per piece: (op, (v, piece) of the first
    source, of the second, immediate). vshufps takes result lanes 0-1 of each 128-bit half from the first
    source and 2-3 from the second, each any lane of the same half, one 2-bit selector per lane shared by
    both halves; vshufpd takes even lanes from the first source and odd ones from the second, each lane of
    the same half, one bit per lane."""
    sdt = dt.scalar()
    if sdt not in BROADCASTABLE:
        return None
    per, half = lanes_per_piece(sdt), 16 // esize(sdt)
    wide = esize(sdt) == 8
    out, start = [], 0
    for n in piece_lanes(dt):
        if n != per and n != half:
            return None
        srcs: list[Any] = [None, None]
        imm = 0
        for j, (v, k) in enumerate(picks[start:start + n]):
            vdt = v.dtype
            if not is_vector(vdt) or vdt.scalar() is not sdt:
                return None
            p, kk = divmod(k, per)
            if piece_lanes(vdt)[p] != n or kk // half != j // half:
                return None  # another register width, or a lane of the other 128-bit half
            role, sel = (j % 2, kk % 2) if wide else ((j % 4) // 2, kk % 4)
            if srcs[role] is None:
                srcs[role] = (v, p)
            elif srcs[role] != (v, p):
                return None
            shift = j if wide else 2 * (j % 4)
            if not wide and j >= 4:
                if (imm >> shift) & 3 != sel:
                    return None  # the upper half's selector is the lower half's
            else:
                imm |= sel << shift
        out.append((Op.VSHUFPD if wide else Op.VSHUFPS, srcs[0], srcs[1], imm))
        start += n
    return out


# ---- scalars: how values are held, instruction names, constant bytes ----
F16_ROUND = 0       # vcvtps2ph immediate: round to nearest even
TRUNC_IMM = 0xB     # vroundss immediate: toward zero, no precision exception
FLOOR_IMM = 0x9     # vroundss immediate: toward minus infinity, no precision exception
CMP_EQ_OQ, CMP_LT_OS, CMP_NEQ_UQ, CMP_UNORD_Q = 0, 1, 4, 3
# sets, not tuples: membership is a hash lookup (ops and dtypes hash by identity; a tuple compares each with ==)
CMP_OPS = frozenset({Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE})
_SOURCES = operator.attrgetter("src")
HELD_GPRS = len(ALLOC_GPR)   # gprs a kernel may hold throughout (choose_plan holds the arguments up to these)
GATED_SHARE = 64    # bytes from a gated access's address that later ones under its gate may reach through it
FOLD_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX})
# the ops the per-line helpers test, as module names: on Python 3.11 reading ``Ops.CONST`` goes through EnumType's
# __getattr__ hook (a Python-level call, ~0.1 us: five times a global read), and these run for most lines
CONST, AFTER, PARAM = Ops.CONST, Ops.AFTER, Ops.PARAM
ARG_OPS = frozenset({Ops.PARAM, Ops.DEFINE_VAR})                        # read from the argument slots
ADD_MUL = frozenset({Ops.ADD, Ops.MUL})
INT_RMW_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL})
FLOAT_ARITH = {Ops.ADD: "VADD", Ops.SUB: "VSUB", Ops.MUL: "VMUL", Ops.FDIV: "VDIV"}
INT_BINARY = {Ops.ADD: Op.ADD, Ops.SUB: Op.SUB, Ops.MUL: Op.IMUL, Ops.AND: Op.AND, Ops.OR: Op.OR, Ops.XOR: Op.XOR}
BOOL_BINARY = {**INT_BINARY, Ops.ADD: Op.OR, Ops.MUL: Op.AND}   # on 0/1: + is or, * is and
NARROW_FLOATS = frozenset({dtypes.float16, dtypes.bfloat16})   # held as float32


# what ends the flags a compare set: instructions writing them, labels (another path may jump there)
FLAG_BARRIERS = frozenset({*(o for o in Op if o.flags & Flag.WRITES_FLAGS), "label"})
# (comparison, unsigned, operands swapped) -> the condition of "cmp x, y" that holds when the comparison does
INT_CONDS = {(Ops.CMPLT, False, False): Cond.L, (Ops.CMPLT, True, False): Cond.B,
             (Ops.CMPLT, False, True): Cond.G, (Ops.CMPLT, True, True): Cond.A,
             **{(op, u, s): c for op, c in ((Ops.CMPEQ, Cond.E), (Ops.CMPNE, Cond.NE))
                for u in (False, True) for s in (False, True)}}


def int_cond(op: Ops, dt: DType, swapped: bool) -> Cond:
    """The condition of comparison ``op`` of two ``dt`` values after ``cmp a, b`` (``cmp b, a`` if swapped)."""
    return INT_CONDS[(op, dtypes.is_unsigned(dt) or dt is dtypes.bool, swapped)]


def at_address(m: VMem) -> Callable[[UOp, int], VMem]:
    """A stand-in for ``values.mem`` giving ``m`` whatever the index (the address of a gated access)."""
    return lambda _idx, bits: m.sized(bits)


class SelectionError(NotImplementedError):
    """A UOp (or dtype) the x86 renderer has no rule for."""


is_vec = by_dtype(dtypes.is_float)  # is a value of this dtype held in an xmm register (a float)?




def _gbits(dt: DType) -> int:
    """Width of the gpr operations on an integer dtype (narrow types work in 32 bits)."""
    return 64 if dt.itemsize == 8 else 32


gbits = by_dtype(_gbits)


def canon_const(u: UOp) -> int:
    """An integer constant as its canonical register value."""
    return canon_value(u.dtype, u.arg)


@functools.lru_cache(maxsize=1 << 12)   # constants recur across kernels; a UOp key would keep them alive
def canon_value(dt: DType, value: Any) -> int:
    """An integer value of ``dt`` as its canonical register value."""
    if dt is dtypes.bool:
        return int(bool(value))
    v = int(value)
    bits = dt.itemsize * 8
    v &= (1 << bits) - 1
    if not dtypes.is_unsigned(dt) and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def f32_bits(value: float, dt: DType) -> bytes:
    """The float32 bytes of ``value`` rounded to ``dt`` (the in-register form of f32/f16/bf16)."""
    import numpy as np
    if dt is dtypes.float16:
        value = float(np.float16(value))
    elif dt is dtypes.bfloat16:
        u = struct.unpack("<I", struct.pack("<f", value))[0]
        if (u & 0x7FFFFFFF) > 0x7F800000:
            u |= 0x400000
        else:
            u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFFFFFF
        return struct.pack("<I", u & 0xFFFF0000)
    return struct.pack("<f", float(np.float32(value)))


@memo
def frame_mem(key: tuple[int, str, int]) -> VMem:
    """The memory operand (bits, slot kind, slot number) of a frame slot: one per process (a VMem is never changed
    once made, so instructions share it)."""
    bits, kind, k = key
    return VMem(bits, slot=Slot(kind, k))


def fsuffix(dt: DType) -> str:
    return "SD" if dt is dtypes.float64 else "SS"


def fop(name: str, dt: DType) -> Op:
    return Op[name + fsuffix(dt)]

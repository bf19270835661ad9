"""Which byte vectors the X86 renderer computes whole, in one xmm or ymm register (``bytedot`` selects them).

In:  UOps of a kernel (in REDUCE form for ``selectable`` in ``pre_isel``; linear for ``widened_bytes``).
Out: ``selectable(u)``: every byte vector ``u`` is made of has a rule in ``bytedot.BYTE_ISEL``;
     ``widened_bytes(u)``: ``u`` is a CAST of such a byte vector of 4 or 8 lanes to 32-bit lanes (a K-quant's
     per-16 scales: two bytes of a block, each repeated in 4 lanes, masked or shifted, then converted), which
     ``bytedot`` selects as byte ops in an xmm and one ``vpmovzxbd``/``vpmovsxbd`` (+ ``vcvtdq2ps``) instead of lane
     by lane; ``shuffle_plan``: how a VECTORIZE of byte lanes is made with ``vinserti128``/``vpshufb``.

Byte vectors of 2, 4, 8 or 16 lanes live in the low bytes of an xmm (the other bytes are don't-care: every byte op
works lane by lane), 32 lanes in a ymm.
"""
from __future__ import annotations

from tgcore.dtype import DType, PtrDType, dtypes
from tgcore.renderer.cbytedot import byte_table_lookup, repeated_of
from tgcore.uop import Ops, UOp

BYTES = (dtypes.uint8, dtypes.int8)
BYTE_VECTORS = tuple(dt.vec(n) for dt in BYTES for n in (2, 4, 8, 16, 32))
BYTE_ALU_OPS = (Ops.AND, Ops.OR, Ops.XOR, Ops.ADD, Ops.SUB)
RIGHT, LEFT = (Ops.SHR, Ops.IDIV), (Ops.SHL, Ops.MUL)   # by a power of two (IDIV, MUL: by 2**s; SHR, SHL: by s)
WIDENED_TO = (dtypes.int32, dtypes.uint32, dtypes.float32)
REPEATED_BROADCASTS = (2, 4, 8)   # the bytes a broadcast from memory repeats (vpbroadcastw/d/q)


def is_bytes(dt: DType) -> bool:
    return dt in BYTE_VECTORS and not isinstance(dt, PtrDType)


def register_bits(count: int) -> int:
    """The register a byte vector of ``count`` lanes is held in: a ymm for 32, else an xmm."""
    return 256 if count == 32 else 128


def lanes(u: UOp) -> list[int] | None:
    """A constant vector's lanes (CONST, VCONST, or a VECTORIZE of CONSTs), else None."""
    if u.op is Ops.CONST:
        return [int(u.arg)] * u.dtype.count
    if u.op is Ops.VECTORIZE and all(s.op is Ops.CONST for s in u.src):
        return [int(s.arg) for s in u.src]
    return [int(v) for v in u.arg] if u.op is Ops.VCONST else None


def shift_amount(u: UOp) -> int | None:
    """The bits a byte shift moves (SHR/SHL by a constant, IDIV/MUL by a power of two, the same in every lane),
    None for anything else (or a right shift of signed bytes)."""
    values = lanes(u.src[1])
    if values is None or any(v != values[0] for v in values) or values[0] < 0:
        return None
    if u.op in RIGHT and not dtypes.is_unsigned(u.dtype.scalar()):
        return None
    if u.op in (Ops.SHR, Ops.SHL):
        return values[0]
    v = values[0]
    return v.bit_length() - 1 if v and v & (v - 1) == 0 else None


def is_broadcast(u: UOp) -> bool:
    """A VECTORIZE of one scalar byte in every lane."""
    return u.op is Ops.VECTORIZE and u.src[0].dtype in BYTES and all(x is u.src[0] for x in u.src)


def is_variable_shift(u: UOp) -> bool:
    """An unsigned byte SHR by one amount (not a constant) in every lane."""
    return u.op is Ops.SHR and dtypes.is_unsigned(u.dtype.scalar()) and is_broadcast(u.src[1])


def _period(u: UOp) -> int:
    """Bytes after which ``u``'s bytes repeat (a broadcast of one 2-, 4- or 8-byte value bitcast to bytes), else
    its size."""
    if u.op is Ops.BITCAST and u.src[0].op is Ops.VECTORIZE:
        srcs = u.src[0].src
        if all(x is srcs[0] for x in srcs) and srcs[0].dtype.itemsize in (2, 4, 8):
            return srcs[0].dtype.itemsize
    return u.dtype.count


def shuffle_plan(u: UOp) -> tuple[list[UOp], list[int]] | None:
    """A byte VECTORIZE of lanes of at most two byte vectors as (its sources, then: the first in the low 128 bits,
    the second in the high ones, or a 16-byte one in both; the byte of that each lane takes, within its half).
    A VECTORIZE of fewer than 16 lanes takes them from one source of at most 16. None when some lane needs a byte
    from the other half."""
    if not all(x.op is Ops.GEP and len(x.arg) == 1 and is_bytes(x.src[0].dtype) for x in u.src):
        return None
    sources = list(dict.fromkeys(x.src[0] for x in u.src))
    if u.dtype.count < 16:   # the low bytes of an xmm, from one source held in an xmm
        return (sources, [x.arg[0] for x in u.src]) if len(sources) == 1 and sources[0].dtype.count <= 16 else None
    if len(sources) > 2 or (len(sources) == 2 and any(s.dtype.count != 16 for s in sources)) \
            or (u.dtype.count == 32 and any(s.dtype.count < 16 for s in sources)):   # (no high half to pick from)
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


def repeated_load(u: UOp) -> UOp | None:
    """A byte vector that repeats the bytes of one 2-, 4- or 8-byte load (``BITCAST`` of a ``VECTORIZE`` of one
    ``BITCAST`` of an ungated byte-vector load: the core's ``cbytedot._repeated``, the activation bytes a row-lane dot
    broadcasts) -> that load; else None."""
    if not is_bytes(u.dtype) or (load := repeated_of(u)) is None:
        return None
    if (load.op is not Ops.LOAD or not is_bytes(load.dtype) or load.dtype.count not in REPEATED_BROADCASTS
            or u.dtype.count % load.dtype.count):
        return None
    ungated = len(load.src) == 1 and load.src[0].op is Ops.INDEX and len(load.src[0].src) == 2
    return load if ungated and load.src[0].src[1].dtype.count == 1 else None


def selectable(u: UOp) -> bool:
    """Whether every byte vector ``u`` is computed from has a rule in ``bytedot.BYTE_ISEL``."""
    if lanes(u) is not None:
        return True
    if not is_bytes(u.dtype):
        return False
    if u.op is Ops.LOAD and (at := byte_table_lookup(u)) is not None:   # 32 bytes of a 16-byte table: vpshufb
        return selectable(at)
    if u.op is Ops.LOAD:
        return (len(u.src) == 1 and u.src[0].op is Ops.INDEX and len(u.src[0].src) == 2
                and u.src[0].src[1].dtype.count == 1)
    if u.op in BYTE_ALU_OPS:
        return all(selectable(s) for s in u.src)
    if u.op in RIGHT or u.op in LEFT:
        return (shift_amount(u) is not None or is_variable_shift(u)) and selectable(u.src[0])
    if u.op is Ops.BITCAST:
        if repeated_load(u) is not None:   # one broadcast from memory
            return True
        s = u.src[0]
        whole = s.dtype.scalar().itemsize * s.dtype.count == u.dtype.count
        if is_bytes(s.dtype):
            return whole and selectable(s)
        # lanes of 32 or 64 bits: one piece of a vector held in pieces of 16 or 32 bytes
        return whole and u.dtype.count >= 16 and s.dtype.scalar() in (dtypes.uint32, dtypes.int32, dtypes.uint64,
                                                                      dtypes.int64)
    if u.op is Ops.VECTORIZE:
        if is_broadcast(u):
            return True
        plan = shuffle_plan(u)
        return plan is not None and all(selectable(s) for s in plan[0])
    return False


def widened_bytes(u: UOp) -> bool:
    """A CAST of a selectable byte vector of 4 or 8 lanes, not a plain load (``facts.plan_widened_loads`` reads
    those from memory), to int32/uint32/float32 lanes."""
    if u.op is not Ops.CAST or u.dtype.count not in (4, 8) or u.dtype.scalar() not in WIDENED_TO:
        return False
    s = u.src[0]
    plain = s.op is Ops.LOAD or (s.op is Ops.BITCAST and s.src[0].op is Ops.LOAD)
    return is_bytes(s.dtype) and s.dtype.count == u.dtype.count and not plain and selectable(s)

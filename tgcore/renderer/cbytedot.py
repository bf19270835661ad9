"""C renderer: a quantization block's byte dot product per vector lane as one multiply-add of bytes.

In:  a kernel in REDUCE form after the optimizations (vectorized): an int32 sum over a loop of 4 steps ``k`` of
     8-lane products of widened bytes, ``sum_k int(a_k) * int(b_k)`` (``a_k`` unsigned, ``b_k`` signed bytes; a
     sum of ``int(b_k)`` alone is one with ``a_k = 1``). tg-gguf's integer products sum each 32-element block so,
     lane ``l`` over the block's elements ``4l + k`` (``heuristic.BYTE_DOT_STEPS``): lanes 4 bytes apart, each
     step's vector gathered byte by byte.
Out: the 4 steps zipped into one 32-byte vector per operand (byte ``4l + k`` = lane ``l`` of step ``k``: the same
     elementwise ops on 32 lanes), whose bytes, read from consecutive addresses, are whole vector loads again, and
     the sum as a call of ``tg_dot4_u8i8(a, b)`` (a ``CUSTOMI``; a sum of such terms, each maybe times an integer
     constant (a weight's offset times its activations' sum), a call per term): one ``vpdpbusd`` with AVX512-VNNI
     or AVX-VNNI, the same sum in plain vector C elsewhere. A call added to another int32 vector (a symmetric type's
     offset times its activations' sum: the same for every weight row of a batch row) becomes
     ``tg_dot4_u8i8_acc(c, a, b)`` (``accumulated_dot``): that vector is ``vpdpbusd``'s accumulator input, one
     add fewer per (batch row, weight row) pair and block (integer sums: the order changes nothing). Exact either
     way: 4 products of a byte by a signed byte fit an int32, and ``vpdpbusd`` does not saturate. An operand looked
     up in a table (a gather per step) is zipped into one gather: rows of 8 or 4 consecutive bytes (an i-quant
     grid's rows) become one load per row, a table of 16 bytes at byte indices (IQ4_NL's values) one byte shuffle
     (``tg_table16_u8``, rendered by the C renderer). The high half of 16-bit products computed in 32-bit lanes
     (TQ1_0's trits) is one ``vpmulhuw`` (``high_product``).
"""
from __future__ import annotations

import functools

from tgcore.dtype import DType, dtypes
from tgcore.uop import GroupOp, Ops, UOp

DOT_STEPS = 4  # the bytes one lane multiplies and adds (vpdpbusd)
DOT_LANES = 8
DOT_HELPER = "tg_dot4_u8i8"
DOT_ACC_HELPER = "tg_dot4_u8i8_acc"  # the same, added to an int32 vector (vpdpbusd's accumulator input)
UNSIGNED, SIGNED, RESULT = dtypes.uint8.vec(DOT_LANES), dtypes.int8.vec(DOT_LANES), dtypes.int32.vec(DOT_LANES)
WIDE = DOT_STEPS * DOT_LANES
# the row-lane products' dots in 16 int32 lanes (a 512-bit vector: ``Renderer.row_lane_rows``), beside the 8-lane ones
WIDE_ROWS = 16
DOT16_HELPER, DOT16_ACC_HELPER = "tg_dot4_u8i8_x16", "tg_dot4_u8i8_x16_acc"
ROW_DOT_HELPERS = {dtypes.int32.vec(DOT_LANES): (DOT_HELPER, DOT_ACC_HELPER),
                   dtypes.int32.vec(WIDE_ROWS): (DOT16_HELPER, DOT16_ACC_HELPER)}  # by the result's type


def _byte_operands(value: UOp) -> tuple[UOp, UOp] | None:
    """``(a, b)`` when ``value`` is ``int32(a) * int32(b)`` (``a`` unsigned, ``b`` signed 8-lane bytes, either
    order) or ``int32(b)`` (then ``a`` is ones)."""
    if value.op is Ops.CAST and value.src[0].dtype == SIGNED:
        return UOp.const(UNSIGNED, 1), value.src[0]
    if value.op is not Ops.MUL or any(s.op is not Ops.CAST for s in value.src):
        return None
    x, y = (s.src[0] for s in value.src)
    if (x.dtype, y.dtype) == (SIGNED, UNSIGNED):
        x, y = y, x
    return (x, y) if (x.dtype, y.dtype) == (UNSIGNED, SIGNED) else None


def _scalar(u: UOp) -> UOp:
    """A lane taken from an ungated vector load (GEP) as the scalar load of its address."""
    at = _load_at(u.src[0], vector=True) if u.op is Ops.GEP and len(u.arg) == 1 else None
    if at is None:
        return u
    buf, index = at
    return UOp(Ops.LOAD, u.dtype, (UOp(Ops.INDEX, u.src[0].src[0].dtype, (buf, (index + u.arg[0]).simplify())),))


def _constant_lanes(u: UOp) -> list[object] | None:
    if u.op is Ops.CONST:
        return [u.arg] * u.dtype.count
    return list(u.arg) if u.op is Ops.VCONST else None


def _lanes(u: UOp) -> list[UOp] | None:
    """The scalar lanes of a VECTORIZE, or of a broadcast constant; None for anything else."""
    if u.op is Ops.VECTORIZE:
        return [_scalar(x) for x in u.src]
    if u.op is Ops.CONST:
        return [UOp.const(u.dtype.scalar(), u.arg)] * u.dtype.count
    if u.op is Ops.VCONST:
        return [UOp.const(u.dtype.scalar(), v) for v in u.arg]
    return None


def _zip(steps: list[UOp]) -> UOp | None:
    """One value of ``4n`` lanes (``n`` the steps' lanes, 8 or 16) whose lane ``4l + k`` is lane ``l`` of
    ``steps[k]``: elementwise ops of one shape zipped source by source, their lanes (VECTORIZE, constants)
    interleaved. None when the steps differ in shape."""
    first = steps[0]
    count = first.dtype.count
    dt = first.dtype.scalar().vec(DOT_STEPS * count)
    if all(s is first for s in steps) and first.op is Ops.CONST:
        return UOp.const(dt, first.arg)
    if (gathered := _zip_gathers(steps, dt)) is not None:
        return gathered
    lanes = [_lanes(s) for s in steps]
    if all(ls is not None for ls in lanes):
        zipped = [ls[lane] for lane in range(count) for ls in lanes if ls is not None]
        if all(x.op is Ops.CONST for x in zipped):
            return UOp(Ops.VCONST, dt, (), tuple(x.arg for x in zipped))
        return _vector_loads(zipped, dt)
    if first.op not in GroupOp.ALU and first.op is not Ops.CAST:
        return None
    if any(s.op is not first.op or s.arg != first.arg or len(s.src) != len(first.src) for s in steps):
        return None
    srcs = [_zip([s.src[i] for s in steps]) for i in range(len(first.src))]
    if any(s is None for s in srcs):
        return None
    known = [_constant_lanes(s) for s in srcs if s is not None]
    if all(k is not None for k in known):  # lane constants (shift amounts): folded
        folded = _fold(first.op, first.arg, dt.scalar(), tuple(s.dtype.scalar() for s in srcs if s is not None),
                       tuple(tuple(k) for k in known if k is not None))
        if folded is not None:
            return UOp(Ops.VCONST, dt, (), folded)
    if first.op in (Ops.SHR, Ops.SHL) and (split := _shift_pieces(first.op, srcs[0], srcs[1])) is not None:
        return split
    return UOp(first.op, dt, tuple(s for s in srcs if s is not None), first.arg)


def _zip_gathers(steps: list[UOp], dt: DType) -> UOp | None:
    """Ungated gathers from one buffer (a small table looked up at each lane's unpacked bits) -> one gather of all
    their lanes, at the zipped indices."""
    if any(s.op is not Ops.LOAD or len(s.src) != 1 or s.src[0].op is not Ops.INDEX or len(s.src[0].src) != 2
           or s.src[0].src[1].dtype.count != s.dtype.count for s in steps):
        return None
    buf = steps[0].src[0].src[0]
    if any(s.src[0].src[0] is not buf for s in steps):
        return None
    rows = _row_loads(buf, [_lane_of(s.src[0].src[1], lane) for lane in range(dt.count // DOT_STEPS) for s in steps],
                      dt)
    if rows is not None:
        return rows
    index = _zip([s.src[0].src[1] for s in steps])
    if index is None:
        return None
    return UOp(Ops.LOAD, dt, (steps[0].src[0].replace(src=(buf, index)),))


def _lane_of(u: UOp, lane: int) -> UOp | None:
    """Lane ``lane`` of a vector of index arithmetic as a scalar expression (None for what it cannot follow)."""
    if u.dtype.count == 1:
        return u
    if u.op is Ops.VECTORIZE:
        return _scalar(u.src[lane])
    if u.op is Ops.CONST:
        return UOp.const(u.dtype.scalar(), u.arg)
    if u.op is Ops.VCONST:
        return UOp.const(u.dtype.scalar(), u.arg[lane])
    if u.op is Ops.GEP:
        return _lane_of(u.src[0], u.arg[lane]) if len(u.arg) == u.dtype.count else None
    if u.op is Ops.LOAD and _load_at(u, vector=True) is not None:
        return _scalar(u.gep(lane))
    if u.op in GroupOp.ALU or u.op is Ops.CAST:
        srcs = [_lane_of(s, lane) for s in u.src]
        if any(s is None for s in srcs):
            return None
        return UOp(u.op, u.dtype.scalar(), tuple(s for s in srcs if s is not None), u.arg).simplify()
    return None


ROW_BYTES = (8, 4)  # a gather whose lanes are runs of this many consecutive bytes: one load per run


def _row_loads(buf: UOp, indices: list[UOp | None], dt: DType) -> UOp | None:
    """A gather of ``WIDE`` (or twice as many: 16 int32 lanes) bytes whose lanes are runs of ``n`` consecutive addresses
    (a grid row of 8 or 4 values per group): one ``n``-byte load per run, put together as ``count / n`` unsigned ints
    (the C compiler inserts them into a vector). None when the lanes do not form such runs."""
    from tgcore.uop.symbolic import difference
    if dt.scalar().itemsize != 1 or dt.count not in (WIDE, 2 * WIDE) or any(i is None for i in indices):
        return None
    for n in ROW_BYTES:
        starts = indices[::n]
        if all(difference(indices[r + j], indices[r]) == j  # type: ignore[arg-type]
               for r in range(0, dt.count, n) for j in range(1, n)):
            whole = SHORT_INTS[n]
            loads = [UOp(Ops.LOAD, dt.scalar().vec(n), (UOp(Ops.INDEX, buf.dtype, (buf, at)),))
                     for at in starts if at is not None]
            rows = [UOp(Ops.BITCAST, whole, (load,)) for load in loads]
            return UOp(Ops.BITCAST, dt, (UOp(Ops.VECTORIZE, whole.vec(dt.count // n), tuple(rows)),))
    return None


@functools.lru_cache(maxsize=256)
def _fold(op: Ops, arg: object, dt: DType, src_dts: tuple[DType, ...], lanes: tuple[tuple[object, ...], ...]
          ) -> tuple[object, ...] | None:
    """``op`` of constant lanes, lane by lane (the same lanes recur in every row's and block's sum: cached)."""
    out = []
    for values in zip(*lanes, strict=True):
        f = UOp(op, dt, tuple(UOp.const(d, v) for d, v in zip(src_dts, values, strict=True)), arg).simplify()
        if f.op is not Ops.CONST:
            return None
        out.append(f.arg)
    return tuple(out)


def _shift_pieces(op: Ops, value: UOp | None, amount: UOp | None) -> UOp | None:
    """A vector put together from lanes of (at most two) vectors, shifted by a constant per lane that is one
    constant per source vector (nibbles: 16 bytes as they are, then shifted by 4) -> the sources shifted by one
    amount each (x86 shifts whole vectors by one amount; by one per byte, lane by lane), then put together."""
    amounts = _constant_lanes(amount) if amount is not None else None
    if value is None or value.op is not Ops.VECTORIZE or amounts is None:
        return None
    if not all(x.op is Ops.GEP and len(x.arg) == 1 for x in value.src):
        return None
    pieces = list(dict.fromkeys((x.src[0], a) for x, a in zip(value.src, amounts, strict=True)))
    if len(pieces) > 2:
        return None
    shifted = {(v, a): UOp(op, v.dtype, (v, UOp.const(v.dtype, a))) for v, a in pieces}
    return UOp(Ops.VECTORIZE, value.dtype, tuple(shifted[(x.src[0], a)].gep(x.arg[0])
                                                 for x, a in zip(value.src, amounts, strict=True)))


def shift_in_words(x: UOp) -> UOp | None:
    """``(v >> c) & m`` on unsigned byte vectors (``v >> c`` maybe as pieces of a VECTORIZE, each piece shifted by
    its own ``c``: the nibbles of ``_shift_pieces``) where the mask keeps none of the top ``c`` bits of a byte -> the
    shift in wider lanes: the bits it brings into a byte from its neighbour (little-endian) are masked off anyway.
    x86 has no byte shift: a C compiler shifts words and masks each byte itself (``vpsrlw`` + ``vpand``), then the
    mask came again. The pieces must come from one vector and share a shift in every 4 lanes: that vector's bytes
    are put in place once (one broadcast of 16 bytes to 32, for nibbles) and shifted in 32-bit lanes by an amount
    per lane (``vpsrlvd``), where each piece was shifted on its own and the pieces put together. A shift left by 0
    around ``v >> c`` (a step's shifts written for every step, one of them 0: ``tg_gguf.lanes._unpack_third_bit``)
    is no shift."""
    value, mask = x.src
    if value.op is Ops.SHL and _constant_lanes(value.src[1]) == [0] * value.dtype.count:
        value = value.src[0]
    masks = _constant_lanes(mask)
    if masks is None or x.dtype.scalar() != dtypes.uint8 or x.dtype.count % 4:
        return None
    if value.op is Ops.SHR:
        taken = [(value, lane) for lane in range(value.dtype.count)]
    elif value.op is Ops.VECTORIZE and all(g.op is Ops.GEP and len(g.arg) == 1 for g in value.src):
        taken = [(g.src[0], g.arg[0]) for g in value.src]
    else:
        return None
    amounts: dict[UOp, int] = {}
    for piece, _ in taken:
        lanes = _constant_lanes(piece.src[1]) if piece.op is Ops.SHR else None
        if (lanes is None or len(set(lanes)) != 1 or piece.dtype.scalar() != dtypes.uint8 or piece.dtype.count % 4
                or not 0 <= int(lanes[0]) < 8):  # type: ignore[call-overload]
            return None
        amounts[piece] = int(lanes[0])  # type: ignore[call-overload]
    shifts = [amounts[piece] for piece, _ in taken]
    if any(int(m) & ~(0xFF >> c) for m, c in zip(masks, shifts, strict=True)):  # type: ignore[call-overload]
        return None
    shifted = _shifted_in_place(taken, shifts, value.dtype)
    return None if shifted is None else UOp(Ops.AND, x.dtype, (shifted, mask))


def shift_chain_in_words(x: UOp) -> UOp | None:
    """``((v >> r) << l) & m`` on unsigned byte vectors (``<< l`` maybe written ``* 2**l``; ``r`` and ``l`` one
    constant each for all lanes) where only ``l`` is not 0 and the mask keeps none of the low ``l`` bits of a byte
    (a K-quant's high bits moved into place: ``tg_gguf.intdot._bit_as``) -> one shift left of 32-bit lanes and the
    mask: the bits a byte gets from the one below are masked off. gcc made of a byte vector shifted left by ``l``
    ``l`` byte additions (x86 shifts no bytes); a shift right it makes a word shift and a mask already."""
    value, mask = x.src
    masks = _constant_lanes(mask)
    if masks is None or x.dtype.scalar() != dtypes.uint8 or x.dtype.count % 4 or x.dtype.count < 8:
        return None
    moves: list[tuple[Ops, int]] = []
    while value.op in (Ops.SHL, Ops.SHR, Ops.MUL) and value.dtype == x.dtype:
        lanes = _constant_lanes(value.src[1])
        if lanes is None or len(set(lanes)) != 1:
            return None
        by = int(lanes[0])  # type: ignore[call-overload]
        if value.op is Ops.MUL:  # a shift left as the symbolic rules write it: times a power of two
            if by <= 0 or by & (by - 1):
                return None
            by = by.bit_length() - 1
        if not 0 <= by < 8:
            return None
        if by:
            moves.append((Ops.SHR if value.op is Ops.SHR else Ops.SHL, by))
        value = value.src[0]
    if [op for op, _ in moves] != [Ops.SHL]:  # a byte shift right is a word shift and a mask already (gcc)
        return None
    (op, by), = moves
    if any(int(m) & ((1 << by) - 1) for m in masks):  # type: ignore[call-overload]  # bits from the byte below
        return None
    wide = dtypes.uint32.vec(x.dtype.count // 4)
    moved = UOp(op, wide, (UOp(Ops.BITCAST, wide, (value,)), UOp.const(wide, by)))
    return UOp(Ops.AND, x.dtype, (UOp(Ops.BITCAST, x.dtype, (moved,)), mask))


def _shifted_in_place(taken: list[tuple[UOp, int]], shifts: list[int], dt: DType) -> UOp | None:
    """Lanes ``v[j] >> c`` of one byte vector ``v`` (``taken``: the piece and ``j`` per lane), ``c`` the same for
    each 4 lanes: ``v``'s bytes put in place, shifted in 32-bit lanes (the bits brought in are masked later)."""
    sources = {piece.src[0] for piece, _ in taken}
    words = [shifts[w:w + 4] for w in range(0, len(shifts), 4)]
    if len(sources) != 1 or any(len(set(w)) != 1 for w in words) or len(words) < 2:
        return None
    (v,) = sources
    order = [j for _, j in taken]
    placed = v if order == list(range(v.dtype.count)) else UOp(Ops.VECTORIZE, dt, tuple(v.gep(j) for j in order))
    wide = dtypes.uint32.vec(len(words))
    by = UOp(Ops.VCONST, wide, (), tuple(w[0] for w in words)) if len({w[0] for w in words}) > 1 else \
        UOp.const(wide, words[0][0])
    return UOp(Ops.BITCAST, dt, (UOp(Ops.SHR, wide, (UOp(Ops.BITCAST, wide, (placed,)), by)),))


def _load_at(u: UOp, vector: bool = False) -> tuple[UOp, UOp] | None:
    """``(buffer, index)`` of an ungated scalar load (or vector load, with ``vector``)."""
    if (u.op is not Ops.LOAD or len(u.src) != 1 or u.src[0].op is not Ops.INDEX or len(u.src[0].src) != 2
            or (u.dtype.count > 1) != vector or u.src[0].src[1].dtype.count != 1):
        return None
    return u.src[0].src[0], u.src[0].src[1]


SHORT_INTS = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _repeated(short: UOp, dt: DType) -> UOp:
    """A vector load of 2, 4 or 8 bytes as one unsigned int, repeated to fill ``dt``'s bytes (its first lanes the
    loaded ones): C compilers move a short vector into a vector register through memory (a stalled store), an int
    they broadcast."""
    lane, total = short.dtype.scalar().itemsize, dt.scalar().itemsize * dt.count
    whole = SHORT_INTS[lane * short.dtype.count]
    copies = total // whole.itemsize
    value = UOp(Ops.BITCAST, whole, (short,))
    return UOp(Ops.BITCAST, short.dtype.scalar().vec(total // lane),
               (UOp(Ops.VECTORIZE, whole.vec(copies), (value,) * copies),))


def repeated_of(u: UOp) -> UOp | None:
    """The short vector ``u`` repeats, when ``u`` is what ``_repeated`` built; else None."""
    if u.op is not Ops.BITCAST or u.src[0].op is not Ops.VECTORIZE:
        return None
    value = u.src[0].src[0]
    if any(x is not value for x in u.src[0].src) or value.op is not Ops.BITCAST or value.dtype.count != 1:
        return None
    return value.src[0]


def _vector_loads(lanes: list[UOp], dt: DType) -> UOp:
    """``VECTORIZE(lanes)``, with the distinct scalar loads at consecutive addresses of one buffer read as vector
    loads (a lane a GEP of one): what byte-by-byte gathers of neighbouring bytes were."""
    from tgcore.uop.symbolic import difference
    distinct = list(dict.fromkeys(lanes))
    runs: list[list[UOp]] = []
    for u in distinct:
        at, last = _load_at(u), _load_at(runs[-1][-1]) if runs else None
        if (at is not None and last is not None and at[0] is last[0]
                and difference(at[1], last[1]) == 1 and len(runs[-1]) < dt.count):
            runs[-1].append(u)
        else:
            runs.append([u])
    where: dict[UOp, UOp] = {}
    for run in runs:
        n = 1 << (len(run).bit_length() - 1)  # vector loads have power-of-two lengths; the rest stay scalar
        if n > 1 and _load_at(run[0]) is not None:
            wide = UOp(Ops.LOAD, run[0].dtype.vec(n), (run[0].src[0],))
            if n * run[0].dtype.itemsize in SHORT_INTS:
                wide = _repeated(wide, dt)
            where.update({u: wide.gep(i) for i, u in enumerate(run[:n])})
    out = [where.get(u, u) for u in lanes]
    whole = out[0].src[0] if out[0].op is Ops.GEP else None
    if whole is not None and whole.dtype.count == len(out) and out == [whole.gep(i) for i in range(len(out))]:
        return whole  # all lanes one load, in order
    return UOp(Ops.VECTORIZE, dt, tuple(out))


def byte_dot(red: UOp) -> UOp | None:
    """An int32 sum over one loop of ``DOT_STEPS`` of byte products (see the module docstring) -> one call."""
    if red.arg is not Ops.ADD or red.dtype != RESULT or len(red.src) != 2:
        return None
    steps = red.src[1]
    if steps.op is not Ops.RANGE or steps.src[0].op is not Ops.CONST or steps.src[0].arg != DOT_STEPS:
        return None
    terms = [_scaled_byte_operands(t) for t in _summands(red.src[0])]
    if any(t is None for t in terms):
        return None
    at = [{steps: UOp.const(steps.dtype, k)} for k in range(DOT_STEPS)]
    total: UOp | None = None
    for term in terms:
        assert term is not None
        coefficient, operands = term
        zipped = [_zip([x.substitute(s).simplify() for s in at]) for x in operands]
        if any(z is None for z in zipped):
            return None
        call = UOp(Ops.CUSTOMI, RESULT, tuple(z for z in zipped if z is not None), DOT_HELPER)
        if coefficient != 1:
            call = call * UOp.const(RESULT, coefficient)
        total = call if total is None else total + call
    return total


def accumulated_dot(x: UOp) -> UOp | None:
    """``tg_dot4_u8i8(a, b) + c`` (either order) -> ``tg_dot4_u8i8_acc(c, a, b)`` (the 16-lane helpers alike)."""
    if x.dtype not in ROW_DOT_HELPERS:
        return None
    plain, accumulated = ROW_DOT_HELPERS[x.dtype]
    for call, c in (x.src, x.src[::-1]):
        if call.op is Ops.CUSTOMI and call.arg == plain:
            return UOp(Ops.CUSTOMI, x.dtype, (c, *call.src), accumulated)
    return None


# Output rows in the lanes (tg-gguf's row-interleaved weights, ``tg_gguf.lanes``): lane ``l`` is weight row ``l``,
# the block's bytes of the 8 rows interleaved by 4 (row ``l``'s elements ``4g + k`` at byte ``32g + 4l + k``), the
# activations the same in every lane. A block's int32 sum over its 32 elements is then 8 multiply-adds of 4 bytes,
# each against the same 4 activation bytes broadcast (one 4-byte load), each added to the last (the accumulator
# input): one dot per 4 elements of 8 rows, however many batch rows share the weight's bytes. With 16 rows in the
# lanes (``Renderer.row_lane_rows``: a 512-bit vector) the same, a block's bytes of 16 rows 64 to a dot.
ROW_DOT_MAX_STEPS = 64  # a longer in-block loop is left to the C compiler


def _broadcast_byte(u: UOp) -> UOp | None:
    """A signed byte as the same int32 in every lane (``VECTORIZE`` of one ``int32(b)``) -> ``b`` broadcast as an
    int8 vector of as many lanes."""
    if u.op is not Ops.VECTORIZE or u.dtype not in ROW_DOT_HELPERS or len({id(s) for s in u.src}) != 1:
        return None
    b = u.src[0]
    if b.op is not Ops.CAST or b.src[0].dtype != dtypes.int8:
        return None
    return UOp(Ops.VECTORIZE, dtypes.int8.vec(u.dtype.count), (b.src[0],) * u.dtype.count)


def _paired_bytes(u: UOp) -> UOp | None:
    """Signed bytes whose lanes repeat every 2 (a grid row's halves: ``tg_gguf.grid_lanes``), widened to int32 -> the
    bytes (zipped over 4 steps: 8 bytes repeated, ``_vector_loads``)."""
    if u.op is not Ops.CAST or u.dtype not in ROW_DOT_HELPERS or u.src[0].op is not Ops.VECTORIZE:
        return None
    lanes = u.src[0].src
    if u.src[0].dtype.scalar() != dtypes.int8 or any(x is not lanes[i % 2] for i, x in enumerate(lanes)):
        return None
    return u.src[0]


def _row_lane_operands(term: UOp) -> tuple[UOp, UOp] | None:
    """``(a, b)`` for ``int32(a) * broadcast(int32(b))`` (``a`` unsigned bytes, one per lane, ``b`` one signed
    byte, or two in turns: ``_paired_bytes``)."""
    if term.op is not Ops.MUL:
        return None
    for x, y in (term.src, term.src[::-1]):
        if x.op is not Ops.CAST or x.src[0].dtype != dtypes.uint8.vec(term.dtype.count):
            continue
        if (b := _broadcast_byte(y)) is not None or (b := _paired_bytes(y)) is not None:
            return x.src[0], b
    return None


def _unshuffled(u: UOp) -> UOp:
    """Lanes ``i % n`` of a vector that repeats its first ``n`` lanes (a broadcast of 4 bytes: ``_repeated``) -> the
    vector itself, not a shuffle of it."""
    if u.op is not Ops.VECTORIZE or any(s.op is not Ops.GEP for s in u.src):
        return u
    whole = u.src[0].src[0]
    if whole.dtype != u.dtype or whole.op is not Ops.BITCAST or whole.src[0].op is not Ops.VECTORIZE:
        return u
    n = whole.dtype.count // whole.src[0].dtype.count
    if any(s.src[0] is not whole or s.arg != (i % n,) for i, s in enumerate(u.src)):
        return u
    if len(set(whole.src[0].src)) != 1:  # lanes i % n equal the whole vector only when its words are one word
        return u
    return whole


def row_lanes_dot(red: UOp) -> UOp | None:
    """An int32 sum over a loop of ``4n`` steps of unsigned 8-lane (16-lane) bytes times one broadcast signed byte
    (see above) -> ``n`` chained calls, step ``4c + k`` byte ``k`` of call ``c``'s lanes."""
    if red.arg is not Ops.ADD or red.dtype not in ROW_DOT_HELPERS or len(red.src) != 2:
        return None
    plain, accumulated = ROW_DOT_HELPERS[red.dtype]
    steps = red.src[1]
    if steps.op is not Ops.RANGE or steps.src[0].op is not Ops.CONST:
        return None
    n = steps.src[0].arg
    if n % DOT_STEPS or n > ROW_DOT_MAX_STEPS:
        return None
    terms = [_row_lane_operands(t) for t in _summands(red.src[0])]
    if not terms or any(t is None for t in terms):
        return None
    total: UOp | None = None
    for term in terms:
        assert term is not None
        for c in range(n // DOT_STEPS):
            at = [{steps: UOp.const(steps.dtype, c * DOT_STEPS + k)} for k in range(DOT_STEPS)]
            zipped = [_zip([x.substitute(s).simplify() for s in at]) for x in term]
            if any(z is None for z in zipped):
                return None
            operands = tuple(_unshuffled(z) for z in zipped if z is not None)
            total = UOp(Ops.CUSTOMI, red.dtype, operands, plain) if total is None else \
                UOp(Ops.CUSTOMI, red.dtype, (total, *operands), accumulated)
    return total


def _summands(value: UOp) -> list[UOp]:
    """The terms of a sum (``a + b + ...``), or ``[value]``."""
    if value.op is Ops.ADD:
        return [t for s in value.src for t in _summands(s)]
    return [value]


def _scaled_byte_operands(term: UOp) -> tuple[int, tuple[UOp, UOp]] | None:
    """``(c, (a, b))`` for a term ``c * int32(a) * int32(b)`` (``_byte_operands``; ``c`` an integer constant, 1 if
    none): a weight's offset times its block's sum of activations, summed with its products."""
    operands = _byte_operands(term)
    if operands is not None:
        return 1, operands
    if term.op is Ops.MUL:
        for x, c in (term.src, term.src[::-1]):
            lanes = _lanes(c)
            if lanes is None or any(f.op is not Ops.CONST for f in lanes) or len({f.arg for f in lanes}) != 1:
                continue
            if (operands := _byte_operands(x)) is not None:
                return int(lanes[0].arg), operands
    return None


# lane l of the result: the sum of bytes 4l .. 4l+3 of a times those of b (a unsigned, b signed)
DOT_PREAMBLE = """\
static inline tg_int32x8 tg_dot4_u8i8(tg_uint8x32 a, tg_int8x32 b) {
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#if defined(__clang__)
  return __builtin_ia32_vpdpbusd256((tg_int32x8){0}, (tg_int32x8)a, (tg_int32x8)b);
#else
  return __builtin_ia32_vpdpbusd_v8si((tg_int32x8){0}, (tg_int32x8)a, (tg_int32x8)b);
#endif
#else
  tg_int32x8 s = {0};
  for (int k = 0; k < 4; k++) {
    tg_uint8x8 x = {a[k], a[4 + k], a[8 + k], a[12 + k], a[16 + k], a[20 + k], a[24 + k], a[28 + k]};
    tg_int8x8 y = {b[k], b[4 + k], b[8 + k], b[12 + k], b[16 + k], b[20 + k], b[24 + k], b[28 + k]};
    s += __builtin_convertvector(x, tg_int32x8) * __builtin_convertvector(y, tg_int32x8);
  }
  return s;
#endif
}
static inline tg_int32x8 tg_dot4_u8i8_acc(tg_int32x8 c, tg_uint8x32 a, tg_int8x32 b) {
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#if defined(__clang__)
  return __builtin_ia32_vpdpbusd256(c, (tg_int32x8)a, (tg_int32x8)b);
#else
  return __builtin_ia32_vpdpbusd_v8si(c, (tg_int32x8)a, (tg_int32x8)b);
#endif
#else
  return c + tg_dot4_u8i8(a, b);
#endif
}
"""
DOT_TYPES = (UNSIGNED, SIGNED, RESULT, dtypes.uint8.vec(WIDE), dtypes.int8.vec(WIDE))  # the helper's typedefs


# 32 byte lanes looked up in a table of 16 bytes (a 4-bit code's value table, e.g. IQ4_NL's): one byte shuffle
# (vpshufb) of the table repeated in both 128-bit halves, with AVX2; lane by lane elsewhere. The table's load is
# loop-invariant.
BYTE_TABLE_HELPER = "tg_table16_u8"
BYTE_TABLE_PREAMBLE = """\
typedef char tg_chars16 __attribute__((vector_size(16)));
typedef char tg_chars32 __attribute__((vector_size(32)));
static inline tg_chars32 tg_table16_twice(const unsigned char* t) {  /* in both 128-bit halves */
  tg_chars16 h; __builtin_memcpy(&h, t, 16);
  return __builtin_shufflevector(h, h, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
static inline tg_uint8x32 tg_table16_u8(const unsigned char* t, tg_uint8x32 i) {
#if defined(__AVX2__)
  return (tg_uint8x32)__builtin_ia32_pshufb256(tg_table16_twice(t), (tg_chars32)i);
#else
  tg_uint8x32 r;
  for (int k = 0; k < 32; k++) r[k] = t[i[k]];
  return r;
#endif
}
"""


def byte_table_lookup(load: UOp) -> UOp | None:
    """For a gather of ``WIDE`` unsigned bytes from a buffer of exactly 16 (ungated: the indices are in range) at the
    int32 conversion of byte indices, those byte indices (the helper's operand); else None."""
    if load.op is not Ops.LOAD or load.dtype != dtypes.uint8.vec(WIDE) or len(load.src) != 1:
        return None
    index = load.src[0]
    if index.op is not Ops.INDEX or len(index.src) != 2 or getattr(index.src[0].dtype, "size", 0) != 16:
        return None
    at = index.src[1]
    if at.op is Ops.CAST and at.src[0].dtype == dtypes.uint8.vec(WIDE):
        return at.src[0]
    return None


def uses_byte_dot(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg in (DOT_HELPER, DOT_ACC_HELPER) for u in kernel)



# ------------------------------------------------------------------------------------ C: high halves of 16-bit products
# ``(u16)((u32(a) * b) >> 16)`` for 32 lanes of 16 bits (TQ1_0's trits: the wrapped byte times 256, times 3, high half):
# C compilers widen it to 32-bit lanes (4 vectors of 16); x86 has the high half of a 16-bit product as one instruction
# (vpmulhuw: 32 lanes with AVX512BW, 16 with AVX2).
MULHI_HELPER = "tg_mulhi_u16x32"
HALF_WORDS, WIDE_WORDS = dtypes.uint16.vec(WIDE), dtypes.uint32.vec(WIDE)
MULHI_PREAMBLE = """\
static inline tg_uint16x32 tg_mulhi_u16x32(tg_uint16x32 a, tg_uint16x32 b) {
#if defined(__AVX512BW__)
  typedef short tg_s __attribute__((vector_size(64)));
#if defined(__clang__)
  return (tg_uint16x32)__builtin_ia32_pmulhuw512((tg_s)a, (tg_s)b);
#else
  return (tg_uint16x32)__builtin_ia32_pmulhuw512_mask((tg_s)a, (tg_s)b, (tg_s){0}, 0xFFFFFFFFu);
#endif
#elif defined(__AVX2__)
  typedef short tg_s __attribute__((vector_size(32)));
  typedef unsigned short tg_h __attribute__((vector_size(32)));
  tg_h al, ah, bl, bh; __builtin_memcpy(&al, &a, 32); __builtin_memcpy(&ah, (char*)&a + 32, 32);
  __builtin_memcpy(&bl, &b, 32); __builtin_memcpy(&bh, (char*)&b + 32, 32);
  tg_h lo = (tg_h)__builtin_ia32_pmulhuw256((tg_s)al, (tg_s)bl);
  tg_h hi = (tg_h)__builtin_ia32_pmulhuw256((tg_s)ah, (tg_s)bh);
  tg_uint16x32 r; __builtin_memcpy(&r, &lo, 32); __builtin_memcpy((char*)&r + 32, &hi, 32);
  return r;
#else
  return __builtin_convertvector((__builtin_convertvector(a, tg_uint32x32) * __builtin_convertvector(b, tg_uint32x32))
                                 >> 16, tg_uint16x32);
#endif
}
"""
MULHI_TYPES = (HALF_WORDS, WIDE_WORDS)


def high_product(x: UOp) -> UOp | None:
    """``u16((u32(a) * b) >> 16)`` (the shift maybe as ``// 65536``) on 32 lanes, ``b`` constants below 2**16 -> a
    call of ``tg_mulhi_u16x32(a, b)``."""
    if x.dtype != HALF_WORDS or x.src[0].op not in (Ops.SHR, Ops.IDIV) or x.src[0].dtype != WIDE_WORDS:
        return None
    product, by = x.src[0].src
    if _constant_lanes(by) != [16 if x.src[0].op is Ops.SHR else 1 << 16] * WIDE or product.op is not Ops.MUL:
        return None
    for wide, factor in (product.src, product.src[::-1]):
        found = _constant_lanes(factor)
        lanes = [v for v in found if isinstance(v, int)] if found is not None else []
        if (wide.op is Ops.CAST and wide.src[0].dtype == HALF_WORDS and len(lanes) == WIDE
                and all(0 <= v < 1 << 16 for v in lanes)):
            b = UOp(Ops.VCONST, HALF_WORDS, (), tuple(lanes)) if len(set(lanes)) > 1 else \
                UOp.const(HALF_WORDS, lanes[0])
            return UOp(Ops.CUSTOMI, HALF_WORDS, (wide.src[0], b), MULHI_HELPER)
    return None


def uses_high_product(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg == MULHI_HELPER for u in kernel)

"""Quantized matrix products with the weight's output rows in the vector lanes (row-interleaved weights).

In:  quantized activations (``intdot.quantize_activations``: int8 per element, a float scale per 32) and a weight
     repacked once (``repack``, from its raw GGUF bytes, in numpy): rows in groups of 8 (the last group padded
     with zero rows), each 32-element block's bytes of the 8 rows interleaved by 4 (row ``l``'s bytes ``4g .. 4g+3``
     at ``32g + 4l``), the blocks' scales (and Q4_1/Q5_1's mins) of the 8 rows side by side as float16; Q5's fifth
     bits as 4 bytes per row and block, interleaved the same way (``_fifth_bit_bytes``); Q4_K's sub-blocks packed
     as Q4_0's blocks, its scales and mins per sub-block unpacked to int16 (``_repack_k``); IQ4_XS's sub-blocks
     as they are (Q4_0's packing), its scales unpacked to int16, its values looked up in a 16-byte table; TQ2_0's
     2-bit values 4 to a byte (``_two_bit_steps``: a step is a shift and a mask), ``d`` per 256 as Q4_K's; TQ1_0's
     base-3 digits taken apart once, here, and held as TQ2_0's (66 bytes per 256 values against 54: +22%); IQ4_NL
     as Q4_0 with IQ4_XS's table; MXFP4 as Q4_0 with its own table, its e8m0 exponents side by side as uint16; Q2_K in
     blocks of 16 values (its scales and mins per 16), each row's 16 two-bit values in 4 bytes (``_repack_q2_k``);
     Q3_K in blocks of 16 too, its 2-bit values as Q2_K's and its third bits as compact as in the file, 4 bytes per
     row and pair of blocks (``_repack_q3_k``: 132 bytes per 256 values against 110); Q6_K in blocks of 16, 8
     bytes of nibbles per row and 4 of top bits (``_repack_q6_k``).
Out: ``x @ W.T`` (``(..., N)`` float32, lazy), equal to ``intdot.int_matmul``'s up to float rounding (the same
     integer block sums; the float sums over blocks in one row's order).

How: element ``(row 8r + l, 32b + 4g + k)`` times activation ``32b + 4g + k`` summed over ``g, k`` is, with the rows
as the vector's 8 int32 lanes, one multiply-add of 4 bytes (``vpdpbusd``) per ``g``: the 4 bytes of 8 rows against
the same 4 activation bytes broadcast (``tgcore.renderer.cbytedot.row_lanes_dot``; the codegen's choice:
``heuristic.row_lane_byte_dot_opts``). Per block and 8 rows: 8 dots (Q4: 4 loads of 32 bytes, each two nibble
halves; Q5: each OR-ed with its fifth bits), one conversion, one scale, one multiply-add per batch row (Q4_1/Q5_1:
one more for ``m * sum x``), against a dot, conversion, multiply and multiply-add per row in ``intdot``'s layout
(activations in the lanes). Each output row's sum runs over its blocks in order whatever the batch: batch-invariant
by construction.

``LANES`` (data: a ``LaneType`` per type) says how each type is repacked, unpacked and scaled; ``LANE_TYPES`` which
types take this path; ``QuantizedMatrix`` decides with ``uses_row_lanes``. The grid types (``grid_lanes.GRIDS``) have
a layout of their own: each row in two lanes, its grid rows gathered.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_gguf import grid_lanes
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.dequant import FIELDS, iota
from tg_gguf.grid_lanes import GRIDS

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

ROWS = 8  # output rows per vector (one int32 lane each) as the types repack them; ``regrouped`` makes groups of 16
STEP = 4  # bytes per lane and multiply-add
BLOCK = 32  # values per block (a scale each), but for the types in ``BLOCKS``


@dataclass(frozen=True)
class RowLanes:
    """A weight repacked with its rows in lanes: ``qs`` ``(groups, blocks, bytes per row-block)`` uint8, ``d`` (and
    for Q4_1/Q5_1 ``m``) ``(groups, blocks, 8)`` float16 (MXFP4: its exponents, uint16; Q3_K: ``d / 4`` as float32),
    Q5's ``qh`` ``(groups, blocks, 32)`` uint8 (Q3_K's ``(groups, blocks / 2, 32)``: one word per row and pair of
    blocks); ``rows`` the weight's rows before padding."""

    gtype: GGMLType
    rows: int
    cols: int
    qs: Tensor
    d: Tensor
    m: Tensor | None
    qh: Tensor | None = None  # Q5's fifth bits (``_fifth_bit_bytes``), Q6_K's top 2, Q3_K's third, interleaved
    # Q4_K: the super-blocks' ``dmin`` ``(groups, super-blocks, 8)`` float16 (``d`` likewise), the sub-blocks' 6-bit
    # scales and mins ``(groups, blocks of 32, 8)`` int16 (unpacked from the 12 packed bytes); Q2_K: ``sc`` its scale
    # bytes whole (scale | min << 4) per block of 16; Q6_K: ``sc`` its int8 scales per block of 16
    dmin: Tensor | None = None
    sc: Tensor | None = None
    mn: Tensor | None = None


def _interleave(per_row: np.ndarray) -> np.ndarray:
    """``(rows, blocks, B)`` bytes (``B`` a multiple of 4; the last axis contiguous) -> ``(rows / 8, blocks, 2B)``:
    row ``l``'s bytes ``4g .. 4g+3`` of a block at ``32g + 4l``. Moved as 4-byte words (one ``uint32`` per lane and
    step: a quarter of the element copies of a byte-wise transpose)."""
    rows, blocks, width = per_row.shape
    words = per_row.view(np.uint32)  # (rows, blocks, B / 4): no copy (numpy allows the unaligned view)
    out = np.empty((rows // ROWS, blocks, width // STEP, ROWS), np.uint32)
    out[...] = words.reshape(rows // ROWS, ROWS, blocks, width // STEP).transpose(0, 2, 3, 1)
    return out.view(np.uint8).reshape(rows // ROWS, blocks, width * ROWS)


def _side_by_side(field: np.ndarray) -> np.ndarray:
    """``(rows, blocks)`` -> ``(rows / 8, blocks, 8)``."""
    rows, blocks = field.shape
    return np.ascontiguousarray(field.reshape(rows // ROWS, ROWS, blocks).transpose(0, 2, 1))


def _float16s(data: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte ``at`` of every ``(rows, blocks, block bytes)`` block: ``(rows, blocks)``."""
    return data[:, :, at:at + 2].view(np.float16)[:, :, 0]


def _fifth_bit_bytes(qh: np.ndarray) -> np.ndarray:
    """Q5's ``(rows, blocks, 4)`` fifth bits (bit ``e`` of the little-endian word: element ``e``) -> 4 bytes per row
    and block whose byte ``k`` has bit ``g`` = element ``4g + k``'s: a lane's 4 bytes at step ``g`` are then
    ``(bytes >> g) & 1`` (the elements ``4g .. 4g+3`` the step multiplies)."""
    bits = np.unpackbits(qh, axis=-1, bitorder="little").reshape(*qh.shape[:2], 8, STEP)  # [., ., g, k]
    return np.packbits(bits.transpose(0, 1, 3, 2), axis=-1, bitorder="little").reshape(qh.shape)


def repack(raw: np.ndarray, gtype: GGMLType, shape: tuple[int, int], device: str, name: str | None = None,
           group: int | None = None) -> RowLanes:
    """The raw GGUF bytes of an ``(N, K)`` weight (host memory, e.g. a view of the mapped file) -> its row-lane form
    on ``device`` in groups of ``group`` rows (default ``group_rows(device, gtype)``: 8, or 16; padded to a multiple
    of it with zeros: zero scales, so the padded rows sum to 0 and are dropped). Vectorized numpy: one pass over the
    bytes per field (SmolLM2's 96 MB of weights: ~0.3 s; groups of 16 one more copy, +13-20% of it)."""
    what = f"tensor {name!r}: " if name else ""
    if gtype not in LAYOUT_TYPES:
        raise ValueError(f"{what}no row-lane layout for {gtype.name} "
                         f"(types: {', '.join(t.name for t in LAYOUT_TYPES)})")
    n, k = shape
    block, block_bytes = BLOCK_LAYOUT[gtype]
    blocks = k // block
    if k % block:
        raise ValueError(f"{what}{gtype.name} weight of shape {shape}: its {k} columns are not whole blocks of "
                         f"{block} values")
    if raw.size != n * blocks * block_bytes:
        raise ValueError(f"{what}{gtype.name} weight of shape {shape} does not match {raw.size} bytes")
    group = group_rows(device, gtype) if group is None else group
    if group % ROWS:
        raise ValueError(f"{what}row-lane groups of {group} rows: not a multiple of {ROWS}")
    padded = -(-n // group) * group
    data = raw.reshape(n, blocks, block_bytes)
    if padded != n:
        data = np.concatenate([data, np.zeros((padded - n, blocks, block_bytes), np.uint8)])
    if gtype in GRIDS:  # (groups of 8 rows: two lanes each, ``grid_lanes``)
        return grid_lanes.repack(data, gtype, n, k, device)
    w = LANES[gtype].repack(data, gtype, n, k, device)
    return w if group == ROWS else regrouped(w, group)


def group_rows(device: str, gtype: GGMLType) -> int:
    """Weight rows per group (per vector of the product) of a ``gtype`` weight on ``device``: its renderer's
    ``row_lane_rows`` (16 in a 512-bit vector where the C compiler targets AVX512-VNNI), else ``ROWS``. A type whose
    values come from a 16-byte table (IQ4_NL, IQ4_XS, MXFP4) keeps ``ROWS``: the C renderer looks a table up in one
    instruction over 32 bytes (``cbytedot.byte_table_lookup``), over 64 lane by lane (576x1536, one core: 12-42x
    slower)."""
    from tgcore.runtime.registry import open_device
    if gtype in GRIDS or LANES[gtype].table is not None:
        return ROWS
    return int(getattr(open_device(device).renderer, "row_lane_rows", ROWS))


def regrouped(w: RowLanes, group: int) -> RowLanes:
    """``w`` (groups of ``ROWS`` rows) in groups of ``group`` (a multiple of ``ROWS``; its row count padded to
    one): each field's consecutive groups side by side, per block and 4-byte word (interleaved bytes) or value
    (side-by-side fields): row ``l``'s word ``g`` of a block at ``4(group g + l)``, as ``_interleave`` puts 8 rows.
    The same values; done once, in numpy."""
    def fields(t: Tensor | None) -> Tensor | None:
        if t is None:
            return None
        a = t.numpy()
        per_row = 4 if a.dtype == np.uint8 else 1  # interleaved bytes move as 4-byte words, other fields as values
        groups, blocks, width = a.shape
        words = width // (ROWS * per_row)
        out = a.reshape(groups // (group // ROWS), group // ROWS, blocks, words, ROWS * per_row)
        return _put(out.transpose(0, 2, 3, 1, 4).reshape(groups * ROWS // group, blocks, width * group // ROWS),
                    t.device)
    tensors: dict[str, Any] = {f.name: fields(getattr(w, f.name)) for f in dataclasses.fields(w)[3:]}  # (every field
    return dataclasses.replace(w, **tensors)  # after gtype, rows, cols: a tensor or None)


def _interleaved_qs(data: np.ndarray, gtype: GGMLType) -> np.ndarray:
    """A block's ``qs`` bytes as they are, interleaved (``_interleave``)."""
    qs_at, qs_bytes = FIELDS[gtype]["qs"]
    return _interleave(data[:, :, qs_at:qs_at + qs_bytes])


def _repack_blocks(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL ``(rows padded to 8, blocks, block bytes)`` -> the row-lane form: ``qs``
    interleaved, ``d`` (and ``m``) side by side, Q5's fifth bits as ``_fifth_bit_bytes``, interleaved."""
    fields = FIELDS[gtype]
    qs = _interleaved_qs(data, gtype)
    qh = None
    if "qh" in fields:
        qh_at, _ = fields["qh"]
        qh = _interleave(_fifth_bit_bytes(data[:, :, qh_at:qh_at + 4]))

    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(qs), put(_side_by_side(_float16s(data, fields["d"][0]))),
                    put(_side_by_side(_float16s(data, fields["m"][0]))) if "m" in fields else None,
                    None if qh is None else put(qh))


def _repack_q8_0(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """Q8_0 ``(rows padded to 8, blocks, 34)`` -> the row-lane form: its int8 values as ``u = q + 128``,
    interleaved, ``d`` side by side."""
    qs = _interleaved_qs(data, gtype)
    qs.view(np.uint32)[...] ^= np.uint32(0x80808080)  # u = q + 128 (in place, 4 bytes at a time)
    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(qs), put(_side_by_side(_float16s(data, FIELDS[gtype]["d"][0]))), None)


def _repack_mxfp4(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """MXFP4 ``(rows padded to 8, blocks, 17)`` -> the row-lane form: ``qs`` interleaved as Q4_0's, its e8m0
    exponents in ``d``'s place, as uint16 (as bytes the row-lane plan would take them for a third byte input of the
    product)."""
    e_at, _ = FIELDS[gtype]["e"]
    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(_interleaved_qs(data, gtype)),
                    put(_side_by_side(data[:, :, e_at].astype(np.uint16))), None)


def _put(a: np.ndarray, device: str) -> Tensor:
    """A repacked field on ``device``, realized."""
    from tgcore.tensor import Tensor
    return Tensor(np.ascontiguousarray(a), device=device).realize()


def _k_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K's 12 packed bytes ``(..., 12)`` -> its 8 six-bit scales and 8 mins ``(..., 8)`` (``dequant.k_scales_mins``'s
    layout: scale ``j < 4`` the low 6 bits of byte ``j``, ``j >= 4`` the low nibble of byte ``j + 4`` and the top 2
    bits of byte ``j - 4`` as bits 4-5; the mins alike from bytes ``4..7`` and the high nibbles)."""
    low, mid, top = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    sc = np.concatenate([low & 63, (top & 0x0F) | ((low >> 6) << 4)], -1)
    mn = np.concatenate([mid & 63, (top >> 4) | ((mid >> 6) << 4)], -1)
    return sc, mn


def _repack_k(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """Q4_K/Q5_K ``(rows padded to 8, super-blocks, block bytes)`` -> the row-lane form: each sub-block of 32 values
    repacked as Q4_0 packs a block (16 bytes: values 0..15 the low nibbles, 16..31 the high ones; in Q4_K 32 bytes
    hold two sub-blocks, the low nibbles one, the high ones the next) and interleaved as Q4_0's, so the product
    takes the same nibbles (a block's halves chosen per lane, not per block: no byte shift by a run-time amount,
    and few enough operations on the weight that the scheduler never makes a kernel of them at a large batch);
    ``d``, ``dmin`` side by side per super-block; the scales and mins unpacked once, side by side per sub-block, as
    int16 (as bytes the codegen would take them for a third byte input of the product); Q5_K's fifth bits (bit ``j``
    of ``qh[l]``: value ``l`` of sub-block ``j``) as Q5_1's per block (``_fifth_bit_bytes``)."""
    rows, supers, _ = data.shape
    fields = FIELDS[gtype]
    qs_at, qs_bytes = fields["qs"]
    packed = data[:, :, qs_at:qs_at + qs_bytes].reshape(rows, supers, 4, 1, 32)
    values = np.concatenate([packed & 15, packed >> 4], 3).reshape(rows, supers * 8, 32)  # value 64c + 32h + l
    qs = _interleave(values[:, :, :16] | (values[:, :, 16:] << 4))
    scales_at, _ = fields["scales"]
    sc, mn = _k_scales_mins(data[:, :, scales_at:scales_at + 12])

    qh = None
    if "qh" in fields:
        qh_at, qh_bytes = fields["qh"]
        bits = (data[:, :, None, qh_at:qh_at + qh_bytes] >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # [., j, l]
        words = np.packbits(bits, axis=-1, bitorder="little").reshape(rows, supers * 8, 4)  # bit l: value l
        qh = _interleave(_fifth_bit_bytes(words))

    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(qs), put(_side_by_side(_float16s(data, fields["d"][0]))), None,
                    None if qh is None else put(qh), dmin=put(_side_by_side(_float16s(data, fields["dmin"][0]))),
                    sc=put(_side_by_side(sc.reshape(rows, supers * 8).astype(np.int16))),
                    mn=put(_side_by_side(mn.reshape(rows, supers * 8).astype(np.int16))))


def _repack_xs(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """IQ4_XS ``(rows padded to 8, super-blocks, 136)`` bytes -> its row-lane form: its sub-blocks' 16 bytes are
    packed as Q4_0's blocks already (interleaved as those), ``d`` side by side per super-block, the 6-bit scales
    minus 32 (``dequant.iq4_xs_scales``) unpacked once to int16, side by side per sub-block."""
    rows, supers, _ = data.shape
    fields = FIELDS[gtype]
    qs_at, qs_bytes = fields["qs"]
    qs = _interleave(np.ascontiguousarray(data[:, :, qs_at:qs_at + qs_bytes]).reshape(rows, supers * 8, 16))
    high_at, _ = fields["scales_h"]
    low_at, _ = fields["scales_l"]
    high = data[:, :, high_at:high_at + 2].copy().view(np.uint16).astype(np.int16)  # (rows, supers, 1)
    low = data[:, :, low_at:low_at + 4]
    scales = np.stack([low & 15, low >> 4], -1).reshape(rows, supers, 8).astype(np.int16)  # 2i: low nibble of i
    scales |= ((high >> (2 * np.arange(8, dtype=np.int16))) & 3) << 4
    scales -= 32

    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(qs), put(_side_by_side(_float16s(data, fields["d"][0]))), None,
                    sc=put(_side_by_side(scales.reshape(rows, supers * 8))))


def _two_bit_steps(values: np.ndarray) -> np.ndarray:
    """``(rows, blocks, 32)`` values below 4 -> ``(rows, blocks, 8)`` bytes, byte ``4v + k`` holding value ``8q + 4v +
    k`` in bits ``2q, 2q + 1``: interleaved (``_interleave``), step ``2q + v`` of a block of 8 rows (its values ``4(2q
    + v) + k``) is the block's 32 bytes ``v`` shifted right by ``2q`` in 32-bit lanes and masked with 3, two
    instructions as Q4_0's high nibbles (``_unsigned``)."""
    rows, blocks, _ = values.shape
    planes = values.reshape(rows, blocks, 4, 8).astype(np.uint8)  # [., ., q, 4v + k]
    return planes[:, :, 0] | (planes[:, :, 1] << 2) | (planes[:, :, 2] << 4) | (planes[:, :, 3] << 6)


def _trits(data: np.ndarray) -> np.ndarray:
    """TQ1_0 ``(rows, super-blocks, 54)`` bytes -> its 256 base-3 digits per super-block ``(rows, super-blocks, 256)``
    (0..2; ``q = u - 1``): element ``32t + l`` is trit ``t`` of ``qs[l]``, ``160 + 16t + l`` trit ``t`` of ``qs[32 +
    l]``, ``240 + 4t + j`` trit ``t`` of ``qh[j]``; trit ``t`` of a byte ``b`` is ``((b * 3^t mod 256) * 3) >> 8``."""
    fields = FIELDS[GGMLType.TQ1_0]
    qs_at, _ = fields["qs"]
    qh_at, _ = fields["qh"]

    def digits(raw: np.ndarray, count: int) -> np.ndarray:  # (rows, supers, width) -> (rows, supers, count * width)
        powers = (3 ** np.arange(count, dtype=np.uint16))[:, None]
        wrapped = (raw[:, :, None, :].astype(np.uint16) * powers) & 255
        return ((wrapped * 3) >> 8).astype(np.uint8).reshape(*raw.shape[:2], -1)
    return np.concatenate([digits(data[:, :, qs_at:qs_at + 32], 5), digits(data[:, :, qs_at + 32:qs_at + 48], 5),
                           digits(data[:, :, qh_at:qh_at + 4], 4)], -1)


def _repack_two_bit(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """TQ2_0 (TQ1_0) ``(rows padded to 8, super-blocks, block bytes)`` -> its row-lane form: the 2-bit values (TQ2_0's
    element ``128h + 32j + l`` is bits ``2j, 2j + 1`` of ``qs[32h + l]``; TQ1_0's base-3 digits, ``_trits``) packed
    per block of 32 by ``_two_bit_steps`` and interleaved, ``d`` side by side per super-block (as Q4_K's): 66 bytes
    per 256 values (TQ2_0's raw layout; TQ1_0's is 54)."""
    rows, supers, _ = data.shape
    fields = FIELDS[gtype]
    if gtype is GGMLType.TQ1_0:
        values = _trits(data)
    else:
        qs_at, qs_bytes = fields["qs"]
        values = _two_bit_values(data[:, :, qs_at:qs_at + qs_bytes])  # (the same 2-bit planes as Q2_K's)
    packed = _interleave(_two_bit_steps(values.reshape(rows, supers * 8, 32)))
    return RowLanes(gtype, n, k, _put(packed, device), _put(_side_by_side(_float16s(data, fields["d"][0])), device),
                    None)


def _two_bit_values(packed: np.ndarray) -> np.ndarray:
    """Q2_K/Q3_K's (TQ2_0's) ``(rows, super-blocks, 64)`` 2-bit planes (value ``128h + 32j + l`` at bits ``2j`` of byte
    ``32h + l``) -> ``(rows, blocks of 16, 4, 4)`` values (``[., b, g, k]``: value ``16b + 4g + k``)."""
    rows, supers, _ = packed.shape
    planes = packed.reshape(rows, supers, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 1, 4, 1)
    return (planes & 3).reshape(rows, supers * 16, 4, STEP)


def _two_bit_words(values: np.ndarray) -> np.ndarray:
    """``(rows, blocks of 16, 4, 4)`` values below 4 -> 4 bytes per row and block, byte ``k`` holding value ``4g + k``
    at bits ``2g`` (step ``g`` of the product: ``(bytes >> 2g) & 3``; as compact as the values)."""
    shifts = (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1)
    return np.bitwise_or.reduce(values << shifts, axis=2).astype(np.uint8)


def _nibble_words(values: np.ndarray) -> np.ndarray:
    """``(rows, blocks of 16, 4, 4)`` values below 16 -> 8 bytes per row and block, byte ``k`` of word ``w`` holding
    value ``8w + k`` low and ``8w + 4 + k`` high (step ``g`` of the product: nibble ``g % 2`` of word ``g // 2``)."""
    rows, blocks, _, _ = values.shape
    return (values[:, :, 0::2] | values[:, :, 1::2] << 4).reshape(rows, blocks, 8)


def _repack_q2_k(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """Q2_K ``(rows padded to 8, super-blocks, 84)`` bytes -> its row-lane form in blocks of 16 values (a scale and
    a min each): a block's 2-bit values as 4 bytes per row (``_two_bit_words``), interleaved as Q4_0's; ``d``,
    ``dmin`` side by side per super-block; the scale byte (scale ``| min << 4``) of each block kept whole as int16,
    side by side (as bytes the codegen would take them for a third byte input of the product): 100 bytes per 256
    values against 84."""
    rows, supers, _ = data.shape
    fields = FIELDS[gtype]
    qs_at, qs_bytes = fields["qs"]
    qs = _interleave(_two_bit_words(_two_bit_values(data[:, :, qs_at:qs_at + qs_bytes])))
    scales_at, scales_bytes = fields["scales"]
    sc = data[:, :, scales_at:scales_at + scales_bytes].reshape(rows, supers * 16).astype(np.int16)

    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(qs), put(_side_by_side(_float16s(data, fields["d"][0]))), None,
                    dmin=put(_side_by_side(_float16s(data, fields["dmin"][0]))), sc=put(_side_by_side(sc)))


def _repack_q3_k(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """Q3_K ``(rows padded to 8, super-blocks, 110)`` bytes -> its row-lane form in blocks of 16 values (a scale each):
    a block's 2-bit planes as Q2_K's (``_two_bit_words``: 4 bytes per row), its third bits (``hmask``) one per value
    as in the file, 4 bytes per row and pair of blocks (``_third_bit_words``), both interleaved as Q4_0's; ``d / 4``
    (exact: its values are held as ``4u``, ``_unpack_third_bit``) side by side per super-block as float32 (no
    conversion and no multiply by 1/4 per block), the 6-bit scales less 32 as int16 side by side per block: 132
    bytes per 256 values against 110 (+20%; Q2_K's form is +19%). Its values as nibbles (4 bits each: no third bit
    to take out, 162 bytes, +47%) made a shorter kernel (see ``LANE_TYPES``); the pair's bits take one shift by
    ``4p`` per block (one 32-bit shift by a count on C: ``cbytevectors.shift_by_one_amount``) and a shift and a mask
    per step."""
    rows, supers, _ = data.shape
    fields = FIELDS[gtype]
    qs_at, qs_bytes = fields["qs"]
    hm_at, hm_bytes = fields["hmask"]
    hmask = data[:, :, None, hm_at:hm_at + hm_bytes]  # bit j of byte l: value 32j + l
    third = ((hmask >> np.arange(8, dtype=np.uint8).reshape(1, 1, 8, 1)) & 1).reshape(rows, supers * 16, 4, STEP)
    sc_at, _ = fields["scales"]
    raw = data[:, :, sc_at:sc_at + 12].astype(np.int16)  # (dequant.q3_k_scales' layout)
    low = np.concatenate([raw[:, :, :8] & 15, raw[:, :, :8] >> 4], -1)  # scale i: nibble i // 8 of byte i % 8
    high = (raw[:, :, 8:12, None] >> (2 * np.arange(4, dtype=np.int16))) & 3  # [., byte i % 4, i // 4]
    scales = (low | (high.transpose(0, 1, 3, 2).reshape(rows, supers, 16) << 4)) - 32

    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(_interleave(_two_bit_words(_two_bit_values(data[:, :, qs_at:qs_at + qs_bytes])))),
                    put(_side_by_side(_float16s(data, fields["d"][0]).astype(np.float32) * np.float32(0.25))), None,
                    put(_interleave(_third_bit_words(third))),
                    sc=put(_side_by_side(scales.reshape(rows, supers * 16))))


def _third_bit_words(bits: np.ndarray) -> np.ndarray:
    """``(rows, blocks of 16, 4, 4)`` bits -> 4 bytes per row and pair of blocks, byte ``k`` holding the bit of value
    ``4g + k`` of the pair's block ``p`` at bit ``4p + g`` (step ``g`` of block ``2c + p``: ``(bytes >> 4p + g) &
    1``; as compact as the bits)."""
    rows, blocks, _, _ = bits.shape
    pairs = bits.reshape(rows, blocks // 2, 2 * 4, STEP).astype(np.uint8)  # [., c, 4p + g, k]
    shifts = np.arange(8, dtype=np.uint8).reshape(1, 1, 8, 1)
    return np.bitwise_or.reduce(pairs << shifts, axis=2).astype(np.uint8)


def _repack_q6_k(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """Q6_K ``(rows padded to 8, super-blocks, 210)`` bytes -> its row-lane form in blocks of 16 values (a scale each):
    a block's low nibbles as 8 bytes per row (``_nibble_words``), its top 2 bits as 4 (``_two_bit_words``), both
    interleaved as Q4_0's; ``d`` side by side per super-block, the int8 scales as int16 side by side per block: 226
    bytes per 256 values against 210."""
    rows, supers, _ = data.shape
    fields = FIELDS[gtype]
    ql_at, ql_bytes = fields["ql"]
    qh_at, qh_bytes = fields["qh"]
    ql = data[:, :, ql_at:ql_at + ql_bytes].reshape(rows, supers, 2, 1, 2, 32)  # (half, -, byte half, l)
    low = (ql >> (4 * np.arange(2, dtype=np.uint8)).reshape(1, 1, 1, 2, 1, 1)) & 15  # quarter 2 * nibble + byte half
    top = _two_bit_values(data[:, :, qh_at:qh_at + qh_bytes])
    scales_at, scales_bytes = fields["scales"]
    sc = data[:, :, scales_at:scales_at + scales_bytes].view(np.int8).reshape(rows, supers * 16).astype(np.int16)

    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(_interleave(_nibble_words(low.reshape(rows, supers * 16, 4, STEP)))),
                    put(_side_by_side(_float16s(data, fields["d"][0]))), None, put(_interleave(_two_bit_words(top))),
                    sc=put(_side_by_side(sc)))


def _unsigned(w: RowLanes, batch: int = 1) -> Tensor:
    """The weight's unsigned integers ``(batch, groups, 8 rows, blocks, 8, 4)``: ``[., r, l, b, g, k]`` is row
    ``8r + l``'s element ``32b + 4g + k`` (blocks of 16, ``LaneType.block``: ``(..., blocks, 4, 4)``, element ``16b +
    4g + k``); ``batch`` > 1: the packed bytes broadcast over a batch's rows before anything is computed from them (the
    scheduler then has no weight-side values to make a kernel of, which it does from 64 rows on where they cost
    ``READ_WORK``: IQ4_XS's nibbles and table lookup)."""
    lane = LANES[w.gtype]
    qs = lane.unpack(w, batch)  # (batch or 1, groups, blocks, steps, 8, 4)
    if lane.table is not None:  # the nibbles select IQ4_NL's (MXFP4's) values plus 128: a 16-byte table
        from tg_gguf.tables import TABLES
        qs = TABLES.get(lane.table, qs.device).take(qs.cast("int32"))
    return qs.permute(0, 1, 4, 2, 3, 5)


# ``LaneType.unpack``: a weight's packed bytes -> its unsigned values ``(batch or 1, groups, blocks, steps, 8, 4)``,
# step ``g`` the 4 bytes per lane of one multiply-add

def _unpack_bytes(w: RowLanes, batch: int) -> Tensor:
    """Q8_0: the bytes are the values (``u = q + 128``), never broadcast."""
    return w.qs.reshape(1, w.qs.shape[0], _blocks(w), 8, _group(w), STEP)


def _unpack_nibbles(w: RowLanes, batch: int) -> Tensor:
    """Q4_0's packing: ``g < 4`` the low nibbles (elements ``4g + k``), ``g >= 4`` the high ones (``16 + 4(g - 4) +
    k``)."""
    groups, blocks, rows = w.qs.shape[0], _blocks(w), _group(w)
    packed = w.qs.reshape(1, groups, blocks, 1, 4, rows, STEP).expand(batch, groups, blocks, 2, 4, rows, STEP)
    half = iota((1, 1, 1, 2, 1, 1, 1), 3, packed.device, "uint8")
    return ((packed >> (half * 4)) & 15).reshape(batch, groups, blocks, 8, rows, STEP)


def _unpack_fifth_bit(w: RowLanes, batch: int) -> Tensor:
    """Q5's nibbles and fifth bits: the fifth bit of element ``4g + k`` is bit ``g`` of its byte
    (``_fifth_bit_bytes``)."""
    assert w.qh is not None
    qs = _unpack_nibbles(w, batch)
    groups, blocks, rows = w.qs.shape[0], _blocks(w), _group(w)
    fifth = w.qh.reshape(1, groups, blocks, 1, rows, STEP).expand(batch, groups, blocks, 8, rows, STEP)
    step = iota((1, 1, 1, 8, 1, 1), 3, fifth.device, "uint8")
    return qs | (((fifth >> step) & 1) << 4)


def _unpack_two_bit_steps(w: RowLanes, batch: int) -> Tensor:
    """TQ2_0/TQ1_0: step ``2q + v`` is bits ``2q, 2q + 1`` of the 32 bytes ``v`` (``_two_bit_steps``)."""
    groups, blocks, rows = w.qs.shape[0], _blocks(w), _group(w)
    packed = w.qs.reshape(1, groups, blocks, 1, 2, rows, STEP).expand(batch, groups, blocks, 4, 2, rows, STEP)
    quarter = iota((1, 1, 1, 4, 1, 1, 1), 3, packed.device, "uint8")
    return ((packed >> (quarter * 2)) & 3).reshape(batch, groups, blocks, 8, rows, STEP)


def _unpack_two_bit_words(w: RowLanes, batch: int) -> Tensor:
    """Q2_K: step ``g`` is bits ``2g, 2g + 1`` of the block's 4 bytes (``_two_bit_words``)."""
    groups, blocks, rows = w.qs.shape[0], _blocks(w), _group(w)
    packed = w.qs.reshape(1, groups, blocks, 1, rows, STEP).expand(batch, groups, blocks, 4, rows, STEP)
    return (packed >> (iota((1, 1, 1, 4, 1, 1), 3, packed.device, "uint8") * 2)) & 3


def _unpack_nibble_words(w: RowLanes, batch: int) -> Tensor:
    """Q6_K's low nibbles: step ``g`` is nibble ``g % 2`` of word ``g // 2`` (``_nibble_words``)."""
    groups, blocks, rows = w.qs.shape[0], _blocks(w), _group(w)
    packed = w.qs.reshape(1, groups, blocks, 2, 1, rows, STEP).expand(batch, groups, blocks, 2, 2, rows, STEP)
    low = ((packed >> (iota((1, 1, 1, 1, 2, 1, 1), 4, packed.device, "uint8") * 4)) & 15)
    return low.reshape(batch, groups, blocks, 4, rows, STEP)


def _unpack_third_bit(w: RowLanes, batch: int) -> Tensor:
    """Q3_K, as 4 times its unsigned values (``4u``: the offset per value ``-16 / 16`` is then an integer, added in
    int32 as Q6_K's): Q2_K's 2-bit planes (``_two_bit_words``) moved to bits 2, 3 and their third bits to bit 4; those
    are the pair's 4 bytes (``_third_bit_words``) shifted by ``4p`` once per block (the block's 4 bits low in each
    byte), then bit ``g`` moved up per step."""
    assert w.qh is not None
    groups, blocks, rows = w.qs.shape[0], _blocks(w), _group(w)
    planes = w.qs.reshape(1, groups, blocks, 1, rows, STEP).expand(batch, groups, blocks, 4, rows, STEP)
    plane = iota((1, 1, 1, 4, 1, 1), 3, planes.device, "uint8") * 2
    at = plane.full_like(2)
    low = ((planes >> (plane >= at).where(plane - at, 0)) << (plane >= at).where(0, at - plane)) & 12
    pairs = w.qh.reshape(1, groups, blocks // 2, 1, 1, rows, STEP).expand(batch, groups, blocks // 2, 2, 1, rows, STEP)
    own = pairs >> (iota((1, 1, 1, 2, 1, 1, 1), 3, pairs.device, "uint8") * 4)
    step = iota((1, 1, 1, 1, 4, 1, 1), 4, pairs.device, "uint8")
    third = (own.expand(batch, groups, blocks // 2, 2, 4, rows, STEP) << (step.full_like(4) - step)) & 16
    return low | third.reshape(batch, groups, blocks, 4, rows, STEP)


def _unpack_top_bits(w: RowLanes, batch: int) -> Tensor:
    """Q6_K: the nibble words' low 4 bits and its top bits ``2g, 2g + 1`` (``_two_bit_words``) moved to bits 4, 5 by
    one shift each way and one mask (``cbytedot.shift_chain_in_words``: in 32-bit words; ``((t >> 2g) & 3) << 4``
    shifted bytes left, which gcc makes byte additions)."""
    assert w.qh is not None
    qs = _unpack_nibble_words(w, batch)
    groups, blocks, rows = w.qs.shape[0], _blocks(w), _group(w)
    top = w.qh.reshape(1, groups, blocks, 1, rows, STEP).expand(batch, groups, blocks, 4, rows, STEP)
    bit = iota((1, 1, 1, 4, 1, 1), 3, top.device, "uint8") * 2
    at = bit.full_like(4)
    return qs | (((top >> ((bit >= at).where(bit, at) - at)) << (at - (bit >= at).where(at, bit))) & 48)


def _group(w: RowLanes) -> int:
    """Rows per group (int32 lanes of the product's vectors): ``ROWS``, or ``regrouped``'s."""
    return int(w.d.shape[-1])


def _block(w: RowLanes) -> int:
    """Values per block (a scale each)."""
    return LANES[w.gtype].block


def _blocks(w: RowLanes) -> int:
    """Blocks per row."""
    return w.cols // _block(w)


def _per_row(field: Tensor, blocks: int | None = None) -> Tensor:
    """A ``(groups, blocks, 8)`` float16 field -> ``(1, groups, 8, blocks, 1, 1)`` float32 (``_unsigned``'s axes); a
    field per super-block (Q4_K's ``d``) repeated over its ``blocks`` blocks of 32."""
    groups, per, rows = field.shape
    t = field.permute(0, 2, 1).reshape(1, groups, rows, per, 1, 1, 1).cast("float32")
    repeat = (blocks or per) // per
    return t.expand(1, groups, rows, per, repeat, 1, 1).reshape(1, groups, rows, per * repeat, 1, 1)


def _mx_scale(w: RowLanes) -> Tensor:
    """MXFP4's per-block scale ``2**(e - 128)`` ``(1, groups, 8, blocks, 1, 1)`` float32 (``dequant.mxfp4_scale``)."""
    from tg_gguf.dequant import e8m0_halved
    groups, blocks = w.d.shape[0], w.d.shape[1]
    return e8m0_halved(w.d.permute(0, 2, 1).reshape(1, groups, _group(w), blocks, 1, 1))


def _xs_scale(w: RowLanes) -> Tensor:
    """IQ4_XS's per-block scale ``d * (s - 32)`` (Q6_K's ``d * s``) ``(1, groups, 8, blocks, 1, 1)`` float32 (as
    ``dequant`` computes it)."""
    assert w.sc is not None
    return _per_row(w.d, _blocks(w)) * _per_row(w.sc)


# ``LaneType.factors``: a block's scale ``(1, groups, 8, blocks, 1, 1)`` float32 and its min (or None: the type's
# ``zero`` is its offset)

def _k_factors(w: RowLanes, batch: int) -> tuple[Tensor, Tensor]:
    """Q4_K/Q5_K: ``d * sc``, ``dmin * mn`` (as ``dequant``'s ``_k_apply`` computes them)."""
    assert w.dmin is not None and w.sc is not None and w.mn is not None
    blocks = _blocks(w)
    return (_per_row(w.d, blocks) * _per_row(w.sc), _per_row(w.dmin, blocks) * _per_row(w.mn))


def _q2_k_factors(w: RowLanes, batch: int) -> tuple[Tensor, Tensor]:
    """Q2_K: ``d * sc``, ``dmin * mn`` (as ``dequant._q2_k``), its scale and min the nibbles of one byte, taken
    apart after its broadcast over a ``batch`` of rows (``(batch, ...)``): the unpacking then is no weight-side value
    for the scheduler to make a kernel of (from 65 rows on it did, and the product's bits changed with the batch)."""
    assert w.dmin is not None and w.sc is not None
    blocks = _blocks(w)
    groups = w.sc.shape[0]
    rows = _group(w)
    byte = w.sc.permute(0, 2, 1).reshape(1, groups, rows, blocks, 1, 1).expand(batch, groups, rows, blocks, 1, 1)
    sc, mn = (byte & 15).cast("float32"), (byte >> 4).cast("float32")
    return _per_row(w.d, blocks) * sc, _per_row(w.dmin, blocks) * mn


def _d(w: RowLanes, batch: int) -> tuple[Tensor, None]:
    """Q4_0/Q5_0/Q8_0/IQ4_NL: ``d`` per block."""
    return _per_row(w.d), None


def _d_and_m(w: RowLanes, batch: int) -> tuple[Tensor, Tensor]:
    """Q4_1/Q5_1: ``d`` and the min ``m`` per block."""
    assert w.m is not None
    return _per_row(w.d), _per_row(w.m)


def _d_per_super(w: RowLanes, batch: int) -> tuple[Tensor, None]:
    """TQ2_0/TQ1_0: ``d`` per 256, repeated over its blocks."""
    return _per_row(w.d, _blocks(w)), None


def _d_times_sc(w: RowLanes, batch: int) -> tuple[Tensor, None]:
    """IQ4_XS/Q3_K/Q6_K: ``d * s`` (``_xs_scale``)."""
    return _xs_scale(w), None


def _e8m0(w: RowLanes, batch: int) -> tuple[Tensor, None]:
    """MXFP4: ``2**(e - 128)`` (``_mx_scale``)."""
    return _mx_scale(w), None


def dequantize(w: RowLanes) -> Tensor:
    """The lazy float32 ``(N, K)`` weight from its row-lane form, with ``tg_gguf.dequant``'s formulas per type (the
    same float operations on the same values: the same bits as dequantizing the raw bytes)."""
    if w.gtype in GRIDS:
        return grid_lanes.dequantize(w)
    groups = w.qs.shape[0]
    lane = LANES[w.gtype]
    # the bit fields taken apart in int32 lanes, as ``tg_gguf.dequant``'s (the kernel's rows are 4 values wide per
    # step: 4-byte vectors, which gcc shifted in general registers and converted to float lane by lane)
    wide = dataclasses.replace(w, qs=w.qs.cast("int32"), qh=None if w.qh is None else w.qh.cast("int32"))
    u = _unsigned(wide).cast("float32")
    scale, minimum = lane.factors(w, 1)
    if minimum is None:  # (u + c) is the signed integer (or table value) exactly: Q8_0's ``float(int8)``, Q4_0's
        value = scale * (u + float(lane.zero))  # ``q - 8.0``, TQ2_0's ``q - 1``, IQ4's ``value`` (u - 128)
    elif lane.min_sign > 0:  # Q4_1, Q5_1: d * q + m
        value = scale * u + minimum
    else:  # the K types: d * sc * q - dmin * mn
        value = scale * u - minimum
    out = value.reshape(groups * _group(w), w.cols)
    return out if groups * _group(w) == w.rows else out.shrink(((0, w.rows), None))


def row_lanes_matmul(xq: Tensor, dx: Tensor, w: RowLanes) -> Tensor:
    """``xq`` ``(M, K)`` int8 and ``dx`` ``(M, K / 32)`` (``quantize_activations``) times the row-lane weight ``w``:
    ``(M, N)`` float32."""
    if w.gtype in GRIDS:
        return grid_lanes.matmul(xq, dx, w)
    m = xq.shape[0]
    lane = LANES[w.gtype]
    groups, blocks, block = w.qs.shape[0], _blocks(w), _block(w)
    x = xq.reshape(m, 1, 1, blocks, block // STEP, STEP).cast("int32")
    per = BLOCK // block  # blocks per activation scale
    scale_x = dx.reshape(m, 1, 1, blocks // per, 1).expand(m, 1, 1, blocks // per, per).reshape(m, 1, 1, blocks, 1, 1)

    # the block's offset term (a symmetric type's ``c * d``, Q4_1's ``m``) times the block's activation sum: summed
    # once per batch row and block (a kernel of its own), then spread over the block's 32 elements as a 32nd (a
    # power of two: exact), so the term is a block factor (``blocks.factor_blocks``), not a sum per row group
    # (in int32: 32 bytes cannot overflow it, and int64 accumulators took ~5x longer: 8x1536 5.0 -> 1.1 us)
    # a K-quant's offset is minus its min: the sign taken with the spread (``- sums / 32``, once per activation
    # block), not once per block and row group
    integer_sums = x.reshape(m, blocks, block).sum(-1, dtype="int32")
    u = _unsigned(w, m if lane.broadcast_first else 1)
    if lane.integer_offset:  # a path of its own (Q6_K), not a scale and offset as the other types':
        # Q6_K's offset ``-32 * sum x`` added to the block's integer sum before the one scaling: every term an integer
        # below 2**24 (exact in float32), so ``(float(sum u x) - 32 sum x) * (d s dx)``: one rounding, and one
        # conversion, addition and multiply-add per block and 8 rows where the offset's own product took four more
        # (as int16, so the codegen bounds the block's sum: |2 sum x| <= 4096)
        assert lane.zero % block == 0
        per_value = lane.zero // block  # (Q6_K: -2, an integer)
        spread_offset = (integer_sums * per_value).cast("int16").contiguous().reshape(m, 1, 1, blocks, 1, 1)
        value = (u.cast("int32") * x + spread_offset.cast("int32")).cast("float32") * (_xs_scale(w) * scale_x)
        return _rows(value.reshape(m, groups * _group(w), w.cols).sum(-1), w, m)
    sums = integer_sums.cast("float32") * scale_x.reshape(m, blocks)
    spread = lane.min_sign / block
    spread_sum = (sums * spread).contiguous().reshape(m, 1, 1, blocks, 1, 1)
    scale, minimum = lane.factors(w, m)
    offset = scale * float(lane.zero) if minimum is None else minimum
    value = (u.cast("int32") * x).cast("float32") * (scale * scale_x) + spread_sum * offset
    return _rows(value.reshape(m, groups * _group(w), w.cols).sum(-1), w, m)


def _rows(out: Tensor, w: RowLanes, m: int) -> Tensor:
    """The product's ``(M, groups * 8)`` sums cut to the weight's rows: a padded tail computed as whole groups in one
    kernel (a shrink fused into it would cut the lanes' axis), then cut."""
    return out if out.shape[1] == w.rows else out.contiguous().shrink(((0, m), (0, w.rows)))


@dataclass(frozen=True)
class LaneType:
    """How one type takes the row-lane path (``LANES``): adding a type is one entry."""

    repack: Callable[[np.ndarray, GGMLType, int, int, str], RowLanes]  # its raw blocks -> its ``RowLanes``
    unpack: Callable[[RowLanes, int], Tensor]  # its packed bytes -> its unsigned values (``_unsigned``)
    factors: Callable[[RowLanes, int], tuple[Tensor, Tensor | None]]  # a block's scale and min (or None)
    zero: int = 0  # without a min: ``q = u + zero`` (a float term ``zero * scale`` in the product)
    min_sign: float = 1.0  # with a min: ``q * scale + min_sign * min`` (the K types: minus)
    # values per block (a scale each): Q2_K's, Q3_K's and Q6_K's 16, 4 dots of 4 bytes per lane each (the codegen
    # blocks the reduction where the scales change: ``heuristic._factor_block``)
    block: int = BLOCK
    table: str | None = None  # its 4-bit codes select values from this 16-byte table (``tg_gguf.tables``: each
    #                           value plus 128, ``q = u - 128``): IQ4_NL's non-linear values, MXFP4's doubled e2m1
    broadcast_first: bool = False  # its packed bytes broadcast over the batch before its values are computed
    # its ``zero`` added to the block's integer sum before its one conversion, as ``zero / block`` per value (Q6_K;
    # Q3_K, whose values are held as ``4u`` for this: ``-16 / 16``)
    integer_offset: bool = False


_TWO_BIT = LaneType(_repack_two_bit, _unpack_two_bit_steps, _d_per_super, zero=-1)  # TQ: 2-bit values, d per 256

# the types with a row-lane layout (``repack``), taken by ``QuantizedMatrix`` wherever the renderer has
# ``row_lane_byte_dots`` (C): faster than the activations-in-lanes path at every batch size measured (one core,
# 1536x576, jitted with the activations' quantization, alternating in one process; intdot -> lanes at 1/4/8 rows):
# load ~4-5: Q4_1 46/100/192 -> 20/39/63 us, Q4_0 41/86/179 -> 21/40/65, Q8_0 35/83/165 -> 20/40/64; load ~10.5:
# Q5_0 56/112/185 -> 32/52/76, Q5_1 61/109/201 -> 32/51/74 (Q4_1 in that run 47/102/197 -> 20/40/64); load ~7:
# Q5_0 38/88/174 -> 33/52/78, Q5_1 43/99/193 -> 33/52/75. SmolLM2 Q4_K_M's Q5_0 products per decode step
# (``bench/batch_step.py``, kernel medians, 2 threads, load ~9-11, 3 runs each): 1/4/8 rows 5.2-5.6/8.1-9.0/15.1-16.6
# -> 4.6-4.8/5.1-5.5/6.4-6.6 ms. The choice is
# per weight, never per batch size: a row's sum has one order at any batch (batch invariance; Q5's unpacked values
# stay fused into the product however many rows share them: ``tgcore.schedule.kernelize._widened_bytes``).
# Q4_K (its scales and mins per 32 unpacked at load, as int16: 164 bytes per 256 values against 144): a 4096^2 GEMV,
# one thread, jitted, CPU time, alternating in one process (load ~7): 0.63 -> 0.42 ms (the activations-in-lanes
# kernel permutes each sub-block's scale and min into all lanes per row, the row lanes have them in the lanes); Q5_K
# the same with Q5_1's fifth bits (broadcast over the batch first, as IQ4_XS below: 0.72-0.75 -> 0.56-0.60 ms)
# TQ2_0 (2-bit values, 4 steps to a 32-byte load: ``_two_bit_steps``; 4096^2 GEMV, one thread, jitted, load ~9):
# 0.54 -> 0.27 ms against intdot's kernel (one conversion and multiply-add per block and 8 rows, not per row); TQ1_0
# held as TQ2_0 (its digits taken apart at load, +22% resident bytes): 0.79 -> 0.26 ms (intdot's kernel took the
# digits apart with 16-bit multiplies, ports 0 and 1 bound: ~140 cycles per 4 rows and 256 values by llvm-mca)
# IQ4_NL (Q4_0's packing, IQ4_XS's table; 4096^2, one thread, jitted, alternating with main's, load ~15): 0.61 ->
# 0.38 ms against intdot's kernel; MXFP4 (its exponents as uint16, the scale made in the kernel): 0.56 -> 0.37 ms
# Q2_K (blocks of 16, its scale byte kept whole as int16: 100 bytes per 256 values against 84; 4096^2 GEMV, one
# thread, jitted, best of 200): 0.645 -> 0.41 ms (the activations-in-lanes kernel: 451 instructions per super-block
# and 4 rows, a permute, a multiply-add and a conversion per 16 values and row for the scales and again for the mins)
LANES: dict[GGMLType, LaneType] = {
    GGMLType.Q4_0: LaneType(_repack_blocks, _unpack_nibbles, _d, zero=-8),
    GGMLType.Q4_1: LaneType(_repack_blocks, _unpack_nibbles, _d_and_m),
    GGMLType.Q5_0: LaneType(_repack_blocks, _unpack_fifth_bit, _d, zero=-16),
    GGMLType.Q5_1: LaneType(_repack_blocks, _unpack_fifth_bit, _d_and_m),
    GGMLType.Q8_0: LaneType(_repack_q8_0, _unpack_bytes, _d, zero=-128),
    GGMLType.Q2_K: LaneType(_repack_q2_k, _unpack_two_bit_words, _q2_k_factors, min_sign=-1.0, block=16),
    GGMLType.Q4_K: LaneType(_repack_k, _unpack_nibbles, _k_factors, min_sign=-1.0),
    GGMLType.Q5_K: LaneType(_repack_k, _unpack_fifth_bit, _k_factors, min_sign=-1.0, broadcast_first=True),
    GGMLType.Q3_K: LaneType(_repack_q3_k, _unpack_third_bit, _d_times_sc, zero=-16, block=16,
                            integer_offset=True),
    GGMLType.Q6_K: LaneType(_repack_q6_k, _unpack_top_bits, _d_times_sc, zero=-32, block=16, broadcast_first=True,
                            integer_offset=True),
    GGMLType.IQ4_XS: LaneType(_repack_xs, _unpack_nibbles, _d_times_sc, zero=-128, table="iq4nl_u8",
                              broadcast_first=True),
    GGMLType.TQ2_0: _TWO_BIT,
    GGMLType.TQ1_0: _TWO_BIT,
    GGMLType.IQ4_NL: LaneType(_repack_blocks, _unpack_nibbles, _d, zero=-128, table="iq4nl_u8", broadcast_first=True),
    GGMLType.MXFP4: LaneType(_repack_mxfp4, _unpack_nibbles, _e8m0, zero=-128, table="mxfp4_u8",
                             broadcast_first=True),
}
LAYOUT_TYPES: frozenset[GGMLType] = frozenset(LANES) | frozenset(GRIDS)
# Q6_K (blocks of 16, 226 bytes per 256 values against 210; its offset added in int32 before the conversion; 4096^2,
# one thread, best of 300, load ~15): 0.59-0.60 -> 0.55 ms; instructions per 1024 weights 415 -> 392, vector ones
# ~400 -> ~264 (the activations-in-lanes kernel permutes each sub-block's scale into the lanes per row)
# IQ4_XS (4096^2, one thread, CPU time, load ~10: 1.00 -> 0.53 ms against intdot's kernel): its table lookup is one
# read more on the weight's side, which reaches the scheduler's READ_WORK (``kernelize.worth_realizing_before_expand``:
# ops + reads = 5): from 64 activation rows on the weight's values got a kernel of their own and the product another
# plan (a row's bits changed with the batch), so its packed bytes are broadcast over the batch first (``_unsigned``)
# Q3_K (blocks of 16; 132 bytes per 256 values against the file's 110, +20% as Q2_K's +19%: ``_repack_q3_k``): 4096^2,
# one thread, jitted, min / 10th percentile of 600 alternating calls, load ~15: the activations-in-lanes kernel (main's
# policy) 0.90 / 1.16 ms, its values as nibbles (162 bytes, +47%) 0.78 / 0.86, this layout 0.74 / 0.76 (Q2_K 0.54 /
# 0.57); llvm-mca per block of 16 x 8 rows 13.3 cycles against the nibbles' 9.3 and Q2_K's 10.8 (the third bits'
# shift and mask per step): the nibbles' kernel is shorter, this one reads 19% fewer bytes. X86 (CPU:X86, same
# measure, load ~12): 2.06 -> 1.55 ms against the activations-in-lanes kernel
# each type with a row-lane layout measured faster in it (above); a grid type only where ``GridLanes.taken``
LANE_TYPES: frozenset[GGMLType] = frozenset(LANES) | frozenset(gtype for gtype, grid in GRIDS.items() if grid.taken)
# the types whose blocks are not of ``BLOCK`` values
BLOCKS: dict[GGMLType, int] = {gtype: lane.block for gtype, lane in LANES.items() if lane.block != BLOCK}


# the fewest columns a row-lane weight has: with one block per row the kernel has no block axis for the codegen to
# split (``heuristic.row_lane_byte_dot_opts`` declines it, and the generic byte-dot plan miscomputes this layout)
MIN_COLS = 2 * BLOCK


def uses_row_lanes(type_id: GGMLType | int, device: str, cols: int | None = None) -> bool:
    """Whether a product with a weight of this type (and ``cols`` columns) takes the row-lane layout on ``device``:
    the type is in ``LANE_TYPES``, the device's renderer has ``row_lane_byte_dots`` (for the grid types,
    ``grid_lanes``, also ``gathers_table_rows``: C, not X86) and the rows have ``MIN_COLS``."""
    from tgcore.runtime.registry import open_device
    try:
        gtype = GGMLType(type_id)
    except ValueError:
        return False
    renderer = open_device(device).renderer
    return gtype in LANE_TYPES and (cols is None or cols >= MIN_COLS) \
        and bool(getattr(renderer, "row_lane_byte_dots", False)) \
        and (gtype not in GRIDS or bool(getattr(renderer, "gathers_table_rows", False)))

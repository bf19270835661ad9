"""The grid types in the row lanes: a weight's rows in the vector lanes, its grid rows gathered 8 bytes at a time.

In:  the raw GGUF blocks of a grid type (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: ``GRIDS``) and
     quantized activations (``intdot.quantize_activations``: int8, a float scale per 32).
Out: its row-lane form (``lanes.RowLanes``: ``qs`` the table row numbers, ``(groups, blocks, 8-value chunks, 8
     rows)`` uint16, or ``(..., 8 rows x 2 halves)`` for tables of 4-byte rows (IQ3, IQ2_S); ``d`` each block's
     scale per row, ``(groups, blocks, 8)`` float32, the same float32 ``intdot`` multiplies), and ``x @ W.T`` from it
     (``matmul``), the integer sums per block the q8 path's (the weight's signs, or IQ1's delta, in the table's rows).

How: the 16 int32 lanes of a 512-bit vector hold 8 weight rows, each split in two halves: lane ``2l + h`` sums row
``l``'s values ``8c + 4h + k`` (``k < 4``) of each 8 values ``c`` of a block. Per 8 values and 8 rows: one gather of
the 8 rows' 8-byte grid rows (lane ``2l + h`` their bytes ``4h .. 4h + 3``; IQ3, IQ2_S: 16 rows of 4 bytes, a row
per lane), one ``vpdpbusd`` against the 8 activation bytes of ``c`` repeated (the C renderer's rule for this:
``cbytedot.row_lanes_dot`` with paired operands, ``cbytedot._row_loads`` with 64-byte gathers,
``crowgather.row_gather``; the codegen's choice: ``heuristic.half_lane_opts``). A block's sum per lane and its
offset (``_lane_offsets``) are added in int32, converted and scaled once, summed over blocks as floats, and each row's
two lanes added in a last small kernel. Each row's sum runs in one order at any batch. A hand-written peer of this
layout (``bench/grid_bound.py``) reached 58% of the streaming bandwidth for IQ1_S on two threads where ``intdot``'s
layout (activations in the lanes) reached 21-25%.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tg_gguf.constants import GGMLType
from tg_gguf.dequant import FIELDS

if TYPE_CHECKING:
    from tg_gguf.lanes import RowLanes
    from tgcore.tensor import Tensor

ROWS = 8  # weight rows per group: two lanes each in a 512-bit vector of int32
HALVES = 2  # lanes per weight row: a grid row's first and last 4 values
CHUNK = 8  # values per grid row (one table row number)
ACT_BLOCK = 32  # activations per scale (``intdot.quantize_activations``)


@dataclass(frozen=True)
class GridLanes:
    """How one grid type takes this path (``GRIDS``): adding a type is one entry."""

    rows_and_scales: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]  # its blocks -> row numbers, scales
    table: str  # the table of 8-byte rows (``tg_gguf.tables``), each value plus ``-zero``
    zero: int  # ``q = u + zero``: a multiple of ``block / 2``, an integer per value of a lane's block
    block: int = 32  # values per scale (IQ1_M, IQ2_XS: 16)
    row_bytes: int = 8  # bytes per table row: 8 (a row number per 8 values, two lanes), or 4 (one per lane: IQ3)
    taken: bool = True  # taken by ``QuantizedMatrix`` where the renderer gathers (``lanes.LANE_TYPES``)

    @property
    def chunks(self) -> int:
        """Grid rows per block."""
        return self.block // CHUNK


def _f16(data: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte ``at`` of each ``(rows, super-blocks, bytes)`` block, as float32 ``(rows, super-blocks,
    1)``."""
    return data[:, :, at:at + 2].copy().view(np.float16).astype(np.float32)


def _part(data: np.ndarray, field: tuple[int, int]) -> np.ndarray:
    """The bytes of one field (its offset and length in a block, ``FIELDS``) of every block: ``(rows, supers, n)``."""
    at, n = field
    return data[:, :, at:at + n]


def _iq2_xxs(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ2_XXS: per block of 32 4 grid bytes and a u32 of 4 seven-bit sign indices and a 4-bit scale ``s``; the rows
    of ``grid_signed_u8:IQ2XXS`` (``(sign << 8) | grid``), the scale ``d * odd_steps:0.25[s]``
    (``intdot._xxs_scale``)."""
    from tg_gguf.tables import BUILDERS
    rows, supers, _ = data.shape
    fields = FIELDS[GGMLType.IQ2_XXS]
    pairs = _part(data, fields["qs"]).reshape(rows, supers * 8, 2, 4)
    grid = pairs[:, :, 0].astype(np.uint16)
    aux = np.ascontiguousarray(pairs[:, :, 1]).view("<u4")  # (rows, blocks, 1)
    signs = (aux >> (7 * np.arange(4, dtype=np.uint32))) & 127
    steps = BUILDERS["odd_steps:0.25"]()[(aux[..., 0] >> 28) & 15]
    d = np.repeat(_f16(data, FIELDS[GGMLType.IQ2_XXS]["d"][0]), 8, axis=2).reshape(rows, supers * 8)
    return (grid | (signs.astype(np.uint16) << 8)), d * steps


def _iq1_s(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ1_S: per block of 32 4 grid bytes and a u16 ``qh`` (3 more index bits per 8 values, a 3-bit scale ``s``, the
    delta's sign); the rows of ``grid_u8:IQ1S+delta`` (the delta's sign as index bit 11), the scale ``d * (2s + 1) /
    8`` (``intdot._iq1_s``)."""
    rows, supers, _ = data.shape
    fields = FIELDS[GGMLType.IQ1_S]
    qs = _part(data, fields["qs"]).reshape(rows, supers * 8, 4).astype(np.uint16)
    qh = np.ascontiguousarray(_part(data, fields["qh"])).view("<u2").reshape(rows, supers * 8, 1)
    index = qs | (((qh >> (3 * np.arange(4, dtype=np.uint16))) & 7) << 8) | ((qh >> 15) << 11)
    odd = (2 * ((qh[..., 0] >> 12) & 7) + 1).astype(np.float32)
    d = np.repeat(_f16(data, fields["d"][0]), 8, axis=2).reshape(rows, supers * 8)
    return index, (d * odd) * np.float32(0.125)


def _iq1_m(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ1_M: per 8 values a grid byte and a nibble of ``qh`` (3 more index bits, the delta's sign as bit 11 of the
    row of ``grid_u8:IQ1S+delta``), per 16 a 3-bit scale ``s``, ``d`` from the scales' top nibbles: the scale ``d *
    (2s + 1) / 8`` (``intdot._iq1_m``)."""
    rows, supers, _ = data.shape
    fields = FIELDS[GGMLType.IQ1_M]
    qh = _part(data, fields["qh"])[..., None] >> np.array([0, 4], np.uint8)  # (rows, supers, 16, 2): nibbles
    nibbles = (qh.reshape(rows, supers, 32) & 15).astype(np.uint16)
    index = _part(data, fields["qs"]).astype(np.uint16) | (nibbles << 8)
    sc = np.ascontiguousarray(_part(data, fields["scales"])).view("<u2")  # (rows, supers, 4)
    d_bits = np.bitwise_or.reduce((sc >> 12) << (4 * np.arange(4, dtype=np.uint16)), axis=-1)
    d = d_bits.astype(np.uint16).view(np.float16).astype(np.float32)[..., None]  # (rows, supers, 1)
    odd = (2 * ((sc[..., None] >> (3 * np.arange(4, dtype=np.uint16))) & 7) + 1).reshape(rows, supers, 16)
    return index.reshape(rows, supers * 32), ((d * odd.astype(np.float32)) * np.float32(0.125)).reshape(rows, -1)


def _iq2_xs(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ2_XS: per 8 values a u16, a 9-bit grid index and a 7-bit sign index above it (the row of
    ``grid_signed_u8:IQ2XS``), per 16 a 4-bit scale ``s``: ``float(2s + 1) * (d * 0.125)`` (``intdot._half_steps``)."""
    rows, supers, _ = data.shape
    fields = FIELDS[GGMLType.IQ2_XS]
    index = np.ascontiguousarray(_part(data, fields["qs"])).view("<u2").reshape(rows, supers * 32)
    nibbles = _part(data, fields["scales"])[..., None] >> np.array([0, 4], np.uint8)
    odd = (2 * (nibbles & 15).astype(np.float32) + 1).reshape(rows, supers, 16)
    return index, (odd * (_f16(data, fields["d"][0]) * np.float32(0.125))).reshape(rows, -1)


def _iq3_xxs(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ3_XXS: per 4 values a grid byte, per 32 a u32 of 4 seven-bit sign indices (per 8 values: ``ksigns``, half
    ``h`` its bits ``4h .. 4h + 3``) and a 4-bit scale ``s``; the rows of ``grid_signed4_u8:IQ3XXS`` (``(signs << 8) |
    grid``), the scale ``d * odd_steps:0.5[s]`` (``intdot._xxs_scale``)."""
    from tg_gguf.quants import ksigns
    from tg_gguf.tables import BUILDERS
    rows, supers, _ = data.shape
    fields = FIELDS[GGMLType.IQ3_XXS]
    grid = _part(data, fields["qs"]).reshape(rows, supers * 8, 4, 2).astype(np.uint16)  # [., b, c, h]
    aux = np.ascontiguousarray(_part(data, fields["aux"])).view("<u4").reshape(rows, supers * 8, 1)
    pattern = ksigns(((aux >> (7 * np.arange(4, dtype=np.uint32))) & 127).astype(np.uint16))  # (rows, blocks, 4)
    halves = (pattern[..., None] >> np.array([0, 4], np.uint16)) & 15
    steps = BUILDERS["odd_steps:0.5"]()[(aux[..., 0] >> 28) & 15]
    d = np.repeat(_f16(data, fields["d"][0]), 8, axis=2).reshape(rows, supers * 8)
    return (grid | (halves << 8)).reshape(rows, -1), d * steps


def _iq3_s(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ3_S: per 4 values a grid byte and a 9th index bit from ``qh`` (bit ``k`` of the block's byte for its row
    ``k``), per 8 a sign byte (half ``h`` its bits ``4h .. 4h + 3``), per 32 a 4-bit scale ``s``: the rows of
    ``grid_signed4_u8:IQ3S`` (``(signs << 9) | grid``), the scale ``d * (2s + 1)`` (``intdot._iq3_s``)."""
    rows, supers, _ = data.shape
    fields = FIELDS[GGMLType.IQ3_S]
    qh = _part(data, fields["qh"]).reshape(rows, supers * 8, 1).astype(np.uint16)
    grid = _part(data, fields["qs"]).reshape(rows, supers * 8, 8).astype(np.uint16)
    grid |= ((qh >> np.arange(8, dtype=np.uint16)) & 1) << 8
    signs = _part(data, fields["signs"]).reshape(rows, supers * 8, 4, 1).astype(np.uint16)
    halves = ((signs >> np.array([0, 4], np.uint16)) & 15).reshape(rows, supers * 8, 8)
    nibbles = _part(data, fields["scales"])[..., None] >> np.array([0, 4], np.uint8)
    odd = (2 * (nibbles & 15).astype(np.float32) + 1).reshape(rows, supers * 8)
    d = np.repeat(_f16(data, fields["d"][0]), 8, axis=2).reshape(rows, supers * 8)
    return (grid | (halves << 9)).reshape(rows, -1), d * odd


def _iq2_s(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ2_S: per 8 values a grid byte, 2 more index bits from ``qh`` (bits ``2k, 2k + 1`` of the block's byte for
    its row ``k``) and a sign byte (half ``h`` its bits ``4h .. 4h + 3``), per 16 a 4-bit scale ``s``: the rows of
    ``grid_signed4_u8:IQ2S`` (``(signs << 11) | (grid << 1) | h``), the scale ``float(2s + 1) * (d * 0.125)``
    (``intdot._iq2_s``)."""
    rows, supers, _ = data.shape
    fields = FIELDS[GGMLType.IQ2_S]
    qh = _part(data, fields["qh"]).reshape(rows, supers * 8, 1).astype(np.uint16)
    grid = _part(data, fields["qs"]).reshape(rows, supers * 8, 4).astype(np.uint16)
    grid |= ((qh >> (2 * np.arange(4, dtype=np.uint16))) & 3) << 8
    signs = _part(data, fields["signs"]).reshape(rows, supers * 8, 4, 1).astype(np.uint16)
    halves = (signs >> np.array([0, 4], np.uint16)) & 15  # (rows, blocks, 4, 2)
    numbers = (halves << 11) | (grid[..., None] << 1) | np.arange(2, dtype=np.uint16)
    nibbles = _part(data, fields["scales"])[..., None] >> np.array([0, 4], np.uint8)
    odd = (2 * (nibbles & 15).astype(np.float32) + 1).reshape(rows, supers, 16)
    return numbers.reshape(rows, -1), (odd * (_f16(data, fields["d"][0]) * np.float32(0.125))).reshape(rows, -1)


# taken where the GEMV's speed-up is at least the memory the form adds (people pick these types to fit a model in
# memory): 4096^2, 2 threads, interleaved with intdot's kernel in one process (bench/grid_lanes.py, load ~5), speed-up
# against memory over the file's: IQ3_XXS 1.90x for 1.63x, IQ3_S 1.47x for 1.45x: taken; IQ1_S 1.58x for 1.92x,
# IQ2_XXS 1.12x for 1.45x, IQ1_M 1.24x for 2.29x: built, tested, not taken
GRIDS: dict[GGMLType, GridLanes] = {
    GGMLType.IQ2_XXS: GridLanes(_iq2_xxs, "grid_signed_u8:IQ2XXS", -64, taken=False),
    GGMLType.IQ1_S: GridLanes(_iq1_s, "grid_u8:IQ1S+delta+16", -16, taken=False),
    GGMLType.IQ1_M: GridLanes(_iq1_m, "grid_u8:IQ1S+delta+16", -16, block=16, taken=False),
    # IQ2_XS: its table of signed rows is 512 KiB (L2), its scales per 16 twice the float work and bytes per value
    # (+73% against the file); 4096^2, 2 threads, interleaved with intdot's kernel (load ~6): 1.18 vs 1.20 ms. Not
    # taken
    GGMLType.IQ2_XS: GridLanes(_iq2_xs, "grid_signed_u8:IQ2XS", -64, block=16, taken=False),
    GGMLType.IQ3_XXS: GridLanes(_iq3_xxs, "grid_signed4_u8:IQ3XXS", -64, row_bytes=4),
    GGMLType.IQ3_S: GridLanes(_iq3_s, "grid_signed4_u8:IQ3S", -64, row_bytes=4),
    # IQ2_S: its grid of 1024 rows of 8 as halves with 4 sign bits is a table of 128 KiB (L2, not L1) and 16 gathered
    # rows per 8 values and 8 rows; 4096^2, 2 threads, interleaved with intdot's kernel in one process (load ~6):
    # 1.99 vs 1.27 ms. Built, tested, not taken
    GGMLType.IQ2_S: GridLanes(_iq2_s, "grid_signed4_u8:IQ2S", -64, block=16, row_bytes=4, taken=False),
}


def repack(data: np.ndarray, gtype: GGMLType, n: int, k: int, device: str) -> RowLanes:
    """``(rows padded to 8, super-blocks, block bytes)`` -> the row-lane form: row numbers ``(groups, blocks, chunks,
    8)`` uint16, scales ``(groups, blocks, 8)`` float32 (96 bytes per 256 values and row, 128 with scales per 16:
    IQ2_XXS +45%, IQ1_S +92% of the file's)."""
    from tg_gguf.lanes import RowLanes, _put
    rows = data.shape[0]
    grid = GRIDS[gtype]
    index, scale = grid.rows_and_scales(data)  # (rows, grid rows), (rows, blocks)
    blocks, per_chunk = scale.shape[1], CHUNK // grid.row_bytes  # (row numbers per 8 values: 1, or 2 for 4-byte rows)
    qs = index.reshape(rows // ROWS, ROWS, blocks, grid.chunks, per_chunk).transpose(0, 2, 3, 1, 4)
    qs = qs.reshape(rows // ROWS, blocks, grid.chunks, ROWS * per_chunk)
    d = scale.astype(np.float32).reshape(rows // ROWS, ROWS, blocks).transpose(0, 2, 1)
    put = functools.partial(_put, device=device)
    return RowLanes(gtype, n, k, put(qs.astype(np.uint16)), put(d), None)


def _grid_bytes(w: RowLanes, batch: int = 1) -> Tensor:
    """The weight's unsigned bytes ``(1, groups, 8 rows, 2 halves, blocks, chunks, 4)``: ``[., r, l, h, b, c, k]`` is
    row ``8r + l``'s value ``block * b + 8c + 4h + k``, byte ``4h + k`` of its grid row."""
    from tg_gguf.dequant import iota
    from tg_gguf.tables import TABLES
    groups, blocks, chunks = w.qs.shape[0], w.qs.shape[1], w.qs.shape[2]
    width = GRIDS[w.gtype].row_bytes
    table = TABLES.get(GRIDS[w.gtype].table, w.qs.device)
    rows = table.shape[0] // width  # (a power of two: the mask bounds the row number, so its loads need no check)
    per_chunk = CHUNK // width
    numbers = w.qs.reshape(groups, blocks, chunks, ROWS, per_chunk).permute(0, 3, 4, 1, 2)
    at = (numbers.reshape(1, groups, ROWS, per_chunk, blocks, chunks, 1).cast("int32") & (rows - 1)) * width
    shape = (1, 1, 1, HALVES, 1, 1, 4)
    byte = iota(shape, 6, w.qs.device, "int32") + (iota(shape, 3, w.qs.device, "int32") * 4 if per_chunk == 1 else 0)
    return table.take(at + byte)


def _scales(w: RowLanes) -> Tensor:
    """Each block's scale ``(1, groups, 8, 1, blocks, 1, 1)`` float32."""
    groups, blocks = w.d.shape[0], w.d.shape[1]
    return w.d.permute(0, 2, 1).reshape(1, groups, ROWS, 1, blocks, 1, 1)


def _lane_offsets(xq: Tensor, grid: GridLanes) -> Tensor:
    """The type's offset per value (``zero`` over a lane's ``block / 2`` values) times each lane's sum of a block's
    activations, as the lanes of 8 rows take it ``(M, 1, 8, 2, blocks, 1, 1)`` int16 (a kernel of its own, once per
    batch row: 16 lanes side by side per block, one load; int16 bounds the block's sum for the codegen, as Q6_K's
    in ``lanes``)."""
    m, k = xq.shape
    blocks = k // grid.block
    per_value = grid.zero // (grid.block // HALVES)
    sums = xq.reshape(m, blocks, grid.chunks, HALVES, 4).cast("int32").sum((2, 4), dtype="int32") * per_value
    per_lane = sums.reshape(m, blocks, 1, HALVES).expand(m, blocks, ROWS, HALVES).cast("int16").contiguous()
    return per_lane.permute(0, 2, 3, 1).reshape(m, 1, ROWS, HALVES, blocks, 1, 1)


def matmul(xq: Tensor, dx: Tensor, w: RowLanes) -> Tensor:
    """``xq`` ``(M, K)`` int8 and ``dx`` ``(M, K / 32)`` times the grid weight ``w``: ``(M, N)`` float32. Per lane the
    integer sum of a block's 16 products and its offset (``_lane_offsets``: added in int32, one conversion), scaled;
    summed over blocks as floats, then the row's two lanes added."""
    m = xq.shape[0]
    grid = GRIDS[w.gtype]
    groups, blocks, chunks = w.qs.shape[0], w.qs.shape[1], w.qs.shape[2]
    x = xq.reshape(m, 1, 1, blocks, chunks, HALVES, 4).permute(0, 1, 2, 5, 3, 4, 6).cast("int32")  # [., ., ., h, b, c,
    # k]: value ``block * b + 8c + 4h + k``
    per = ACT_BLOCK // grid.block  # blocks per activation scale
    scale_x = dx.reshape(m, blocks // per, 1).expand(m, blocks // per, per).reshape(m, 1, 1, 1, blocks, 1, 1)
    offset = _lane_offsets(xq, grid).cast("int32")
    value = (_grid_bytes(w).cast("int32") * x + offset).cast("float32") * (_scales(w) * scale_x)
    lanes = value.reshape(m, groups * ROWS * HALVES, blocks * grid.block // HALVES).sum(-1).contiguous()
    out = lanes.reshape(m, groups * ROWS, HALVES).sum(-1)
    return out if out.shape[1] == w.rows else out.contiguous().shrink(((0, m), (0, w.rows)))


def dequantize(w: RowLanes) -> Tensor:
    """The lazy float32 ``(N, K)`` weight: ``scale * (u + zero)`` per value, ``intdot``'s values (``u + zero`` is the
    signed integer exactly, the scale the same float32)."""
    groups = w.qs.shape[0]
    u = _grid_bytes(w).cast("float32")  # (1, groups, 8, 2, blocks, chunks, 4)
    value = (_scales(w) * (u + float(GRIDS[w.gtype].zero))).permute(0, 1, 2, 4, 5, 3, 6)
    out = value.reshape(groups * ROWS, w.cols)
    return out if groups * ROWS == w.rows else out.shrink(((0, w.rows), None))

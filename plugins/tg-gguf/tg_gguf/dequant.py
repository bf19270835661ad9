"""Dequantization as tensor ops: the raw bytes of a ggml tensor (a lazy uint8 ``Tensor``) in, a lazy
float32 ``Tensor`` out.

Nothing here runs: every function only builds tensor ops (shrink, reshape, expand, shifts, ``&``,
``|``, bitcast, cast, ``where``), so the scheduler fuses the whole dequantization into whatever
consumes it. A matmul against a dequantized weight becomes one kernel that reads the quantized
bytes and decodes them in registers; no float copy of the weight is ever stored.

How a type is decoded:

- ``FIELDS`` (data) says where each field of a block is: ``name -> (start byte, length)``.
- The bytes are viewed as ``(n_blocks, block_bytes)``; a field is a shrink of that view.
- Multi-byte little-endian fields are OR-ed together from their bytes with shifts, then bitcast
  (``uint16 -> float16`` for scales); packed fields are unpacked by broadcasting the bytes along a
  new axis and shifting each copy by an amount computed from that axis' index (``arange``), so no
  concatenation or gather is needed.
- Small value tables (IQ4_NL's 16 values, MXFP4's e2m1 values), the grids of the i-quants (256 to 2048 entries,
  ``tg_gguf.iq_grids``) and their sign patterns are constant float32 tensors (``tg_gguf.tables``, one per device)
  read with an indexed load (``Tensor.take``) that fuses into the consumer: a group of 8 grid values is one load at
  ``index * 8 + lane``. (A one-hot gather, as ``Tensor.__getitem__`` does, costs O(table size) per value; a tree
  of selects on the index bits, ~30 vector operations per 8 values, was 2-10x slower.) TQ1_0's powers of 3 are a
  constant table too, read by a value's position in its block; its packed bytes are read with ``Tensor.take`` at
  a start that depends on the row of 16 values only (its three segments have three layouts).

Arithmetic is done in float32 in the order gguf-py / ggml define, so results are bit-exact.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tg_gguf import iq_grids
from tg_gguf.constants import BLOCK_LAYOUT, QK_K, GGMLType

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

# ---------------------------------------------------------------------------------------- block layouts

# name -> (first byte, number of bytes) of each field of a block, little-endian; "f16" fields are IEEE
# halves. These are facts of the ggml format (ggml-common.h).
FIELDS: dict[GGMLType, dict[str, tuple[int, int]]] = {
    GGMLType.Q4_0: {"d": (0, 2), "qs": (2, 16)},
    GGMLType.Q4_1: {"d": (0, 2), "m": (2, 2), "qs": (4, 16)},
    GGMLType.Q5_0: {"d": (0, 2), "qh": (2, 4), "qs": (6, 16)},
    GGMLType.Q5_1: {"d": (0, 2), "m": (2, 2), "qh": (4, 4), "qs": (8, 16)},
    GGMLType.Q8_0: {"d": (0, 2), "qs": (2, 32)},
    GGMLType.Q2_K: {"scales": (0, QK_K // 16), "qs": (16, QK_K // 4), "d": (80, 2), "dmin": (82, 2)},
    GGMLType.Q3_K: {"hmask": (0, QK_K // 8), "qs": (32, QK_K // 4), "scales": (96, 12), "d": (108, 2)},
    GGMLType.Q4_K: {"d": (0, 2), "dmin": (2, 2), "scales": (4, 12), "qs": (16, QK_K // 2)},
    GGMLType.Q5_K: {"d": (0, 2), "dmin": (2, 2), "scales": (4, 12), "qh": (16, QK_K // 8), "qs": (48, QK_K // 2)},
    GGMLType.Q6_K: {"ql": (0, QK_K // 2), "qh": (128, QK_K // 4), "scales": (192, QK_K // 16), "d": (208, 2)},
    GGMLType.IQ4_NL: {"d": (0, 2), "qs": (2, 16)},
    GGMLType.IQ4_XS: {"d": (0, 2), "scales_h": (2, 2), "scales_l": (4, QK_K // 64), "qs": (8, QK_K // 2)},
    GGMLType.TQ1_0: {"qs": (0, 48), "qh": (48, 4), "d": (52, 2)},
    GGMLType.TQ2_0: {"qs": (0, QK_K // 4), "d": (64, 2)},
    GGMLType.MXFP4: {"e": (0, 1), "qs": (1, 16)},
    GGMLType.IQ2_XXS: {"d": (0, 2), "qs": (2, QK_K // 4)},
    GGMLType.IQ2_XS: {"d": (0, 2), "qs": (2, QK_K // 4), "scales": (66, QK_K // 32)},
    GGMLType.IQ2_S: {"d": (0, 2), "qs": (2, QK_K // 8), "signs": (34, QK_K // 8), "qh": (66, QK_K // 32),
                     "scales": (74, QK_K // 32)},
    GGMLType.IQ3_XXS: {"d": (0, 2), "qs": (2, QK_K // 4), "aux": (66, QK_K // 8)},
    GGMLType.IQ3_S: {"d": (0, 2), "qs": (2, QK_K // 4), "qh": (66, QK_K // 32), "signs": (74, QK_K // 8),
                     "scales": (106, QK_K // 64)},
    GGMLType.IQ1_S: {"d": (0, 2), "qs": (2, QK_K // 8), "qh": (34, QK_K // 16)},
    GGMLType.IQ1_M: {"qs": (0, QK_K // 8), "qh": (32, QK_K // 16), "scales": (48, QK_K // 32)},
}

# the 16 values a 4-bit IQ4_NL / IQ4_XS index selects (ggml's kvalues_iq4nl)
IQ4_NL_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
# MXFP4: e2m1 values doubled (the scale is halved to match: ggml's kvalues_mxfp4)
MXFP4_VALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)

# plain (one element per "block") types: the dtype their little-endian bits are bitcast to
PLAIN: dict[GGMLType, str] = {
    GGMLType.F32: "float32",
    GGMLType.F16: "float16",
    GGMLType.BF16: "bfloat16",  # the top half of a float32: shifted into place, not bitcast
    GGMLType.F64: "float64",
    GGMLType.I8: "int8",
    GGMLType.I16: "int16",
    GGMLType.I32: "int32",
    GGMLType.I64: "int64",
}

UINTS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


# ---------------------------------------------------------------------------------------- building blocks

class Blocks:
    """A ``(n_blocks, block_bytes)`` uint8 tensor with named fields (from ``FIELDS``)."""

    def __init__(self, raw: Tensor, gtype: GGMLType) -> None:
        _, block_bytes = BLOCK_LAYOUT[gtype]
        self.gtype = gtype
        self.t = raw.reshape(-1, block_bytes)
        self.n = self.t.shape[0]
        self.fields = FIELDS.get(gtype, {})
        self.device = raw.device

    def bytes(self, name: str) -> Tensor:
        """The field's bytes, ``(n_blocks, length)`` uint8."""
        start, length = self.fields[name]
        return self.t.shrink(((0, self.n), (start, start + length)))

    def f16(self, name: str) -> Tensor:
        """A 2-byte IEEE half field as a float32 column ``(n_blocks, 1)``."""
        return le_uint(self.bytes(name), 2).bitcast("float16").cast("float32")

    def uint(self, name: str) -> Tensor:
        """A little-endian unsigned field as a column ``(n_blocks, 1)`` of the matching uint dtype."""
        return le_uint(self.bytes(name), self.fields[name][1])


def le_uint(b: Tensor, width: int) -> Tensor:
    """``(n, k * width)`` uint8 -> ``(n, k)`` little-endian unsigned ints of ``width`` bytes."""
    n, m = b.shape
    if width == 1:
        return b
    words = b.reshape(n, m // width, width)
    dt = UINTS[width]
    out = None
    for i in range(width):
        part = words.shrink(((0, n), (0, m // width), (i, i + 1))).reshape(n, m // width).cast(dt)
        part = part << (8 * i) if i else part
        out = part if out is None else out | part
    assert out is not None
    return out


def iota(shape: Sequence[int], axis: int, device: str, dtype: str = "uint8") -> Tensor:
    """A tensor of ``shape`` (broadcastable: other axes 1) holding its index along ``axis``."""
    from tgcore.tensor import Tensor
    n = shape[axis]
    t = Tensor.arange(n, dtype=dtype, device=device)
    return t.reshape(tuple(n if i == axis else 1 for i in range(len(shape))))


def spread(x: Tensor, axis: int, count: int, bits: int, step: int | None = None) -> Tensor:
    """Unpack ``count`` fields of ``bits`` bits from each element of ``x`` along a new axis at ``axis``.

    The result has ``x``'s shape with a new axis of size ``count`` inserted at ``axis``; copy ``k`` is
    ``(x >> (k * step)) & (2**bits - 1)`` (``step`` defaults to ``bits``).
    """
    step = bits if step is None else step
    shape = list(x.shape)
    shape.insert(axis, 1)
    xe = x.reshape(shape)
    shape[axis] = count
    shifts = iota(shape, axis, x.device, x.dtype.name)
    if step != 1:
        shifts = shifts * step
    out = xe.expand(shape) >> shifts
    return out & ((1 << bits) - 1)


def _wide(packed: Tensor) -> Tensor:
    """Packed bytes widened to int32 before their bit fields are shifted out: a vectorized kernel widens 8 loaded
    bytes in one instruction and shifts and masks whole 32-bit lanes (x86 has no shifts of byte lanes: a byte
    vector shifted by a per-lane amount is taken apart lane by lane)."""
    return packed.cast("int32")


def nibbles(qs: Tensor) -> Tensor:
    """``(..., m)`` bytes -> ``(..., 2 * m)`` 4-bit values (int32): all low nibbles, then all high nibbles.

    The bytes are widened to int32 before they are split: a vectorized kernel then widens 8 loaded bytes
    in one instruction and shifts and masks whole 32-bit lanes, which every SIMD unit has (byte lanes
    have no shifts on x86)."""
    shape = qs.shape
    return spread(_wide(qs), len(shape) - 1, 2, 4).reshape(*shape[:-1], 2 * shape[-1])


def _f32(x: Tensor) -> Tensor:
    return x.cast("float32")


def _cat(parts: Sequence[Tensor], axis: int) -> Tensor:
    """Concatenate integer tensors along ``axis`` (pad each to the full length and OR them)."""
    total = sum(p.shape[axis] for p in parts)
    out, at = None, 0
    for p in parts:
        pad = [(0, 0)] * p.ndim
        pad[axis] = (at, total - at - p.shape[axis])
        padded = p.pad(pad)
        out = padded if out is None else out | padded
        at += p.shape[axis]
    assert out is not None
    return out


# ---------------------------------------------------------------------------------------- one function per type
# Each takes Blocks and returns (n_blocks, elements per block) float32.

def _q4_0(b: Blocks) -> Tensor:
    q = _f32(nibbles(b.bytes("qs"))) - 8.0
    return q * b.f16("d")


def _q4_1(b: Blocks) -> Tensor:
    q = _f32(nibbles(b.bytes("qs")))
    return b.f16("d") * q + b.f16("m")


def _fifth_bits(qh: Tensor) -> Tensor:
    """A u32 column -> 32 bits per block, bit j as 0/16 for element j."""
    return (spread(qh, 1, 32, 1).reshape(qh.shape[0], 32) << 4).cast("int32")


def _q5_0(b: Blocks) -> Tensor:
    q = nibbles(b.bytes("qs")) | _fifth_bits(b.uint("qh"))
    return (_f32(q) - 16.0) * b.f16("d")


def _q5_1(b: Blocks) -> Tensor:
    q = nibbles(b.bytes("qs")) | _fifth_bits(b.uint("qh"))
    return b.f16("d") * _f32(q) + b.f16("m")


def _q8_0(b: Blocks) -> Tensor:
    return _f32(b.bytes("qs").bitcast("int8")) * b.f16("d")


def q2_k_scales(raw: Tensor) -> tuple[Tensor, Tensor]:
    """Q2_K's 16 scale bytes ``(n, 16)`` -> (scales, mins), one per 16 elements: the low and high nibbles."""
    return raw & 0x0F, raw >> 4


def q3_k_scales(raw: Tensor, n: int) -> Tensor:
    """Q3_K's 12 scale bytes ``(n, 12)`` -> 16 six-bit signed scales ``(n, 16)`` (int32): low 4 bits from bytes 0..7
    (low nibbles, then high), high 2 bits from bytes 8..11, less 32."""
    low = spread(raw.shrink(((0, n), (0, 8))), 1, 2, 4).reshape(n, 16)
    high = spread(raw.shrink(((0, n), (8, 12))), 1, 4, 2).reshape(n, 16)
    return (low | (high << 4)).cast("int32") - 32


def _q2_k(b: Blocks) -> Tensor:
    n = b.n
    sc, mn = q2_k_scales(b.bytes("scales"))
    dl = (b.f16("d") * _f32(sc)).reshape(n, 16, 1)
    ml = (b.f16("dmin") * _f32(mn)).reshape(n, 16, 1)
    # each 32 bytes of qs hold 128 elements: 4 two-bit planes (shift-major)
    q = spread(_wide(b.bytes("qs")).reshape(n, 2, 32), 2, 4, 2).reshape(n, 16, 16)
    return (dl * _f32(q) - ml).reshape(n, QK_K)


def _q3_k(b: Blocks) -> Tensor:
    n = b.n
    scales = _f32(q3_k_scales(b.bytes("scales"), n))
    dl = (b.f16("d") * scales).reshape(n, 16, 1)
    ql = spread(_wide(b.bytes("qs")).reshape(n, 2, 32), 2, 4, 2).reshape(n, 16, 16)
    hbit = spread(_wide(b.bytes("hmask")).reshape(n, 1, 32), 2, 8, 1).reshape(n, 16, 16)
    q = ql - ((hbit ^ 1) << 2)  # a clear mask bit subtracts 4
    return (dl * _f32(q)).reshape(n, QK_K)


def k_scales_mins(raw: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The 12 packed bytes of Q4_K/Q5_K -> 8 six-bit scales and 8 six-bit mins, each ``(n, 8)`` uint8.

    Scale i < 4 is the low 6 bits of byte i; scale i >= 4 is the low nibble of byte 8+i-4 plus
    the top 2 bits of byte i-4 as bits 4-5. Mins alike, from bytes 4..7 and the high nibbles.
    """
    def part(start: int) -> Tensor:
        return raw.shrink(((0, n), (start, start + 4))).reshape(n, 1, 4).expand(n, 2, 4)

    first = iota((1, 2, 1), 1, raw.device) == 0
    sc_lo, mn_lo, packed = part(0), part(4), part(8)
    sc = first.where(sc_lo & 63, (packed & 0x0F) | ((sc_lo >> 6) << 4))
    mn = first.where(mn_lo & 63, (packed >> 4) | ((mn_lo >> 6) << 4))
    return sc.reshape(n, 8), mn.reshape(n, 8)


def _k_apply(b: Blocks, q: Tensor) -> Tensor:
    n = b.n
    sc, mn = k_scales_mins(b.bytes("scales"), n)
    scale = (b.f16("d") * _f32(sc)).reshape(n, 8, 1)
    offset = (b.f16("dmin") * _f32(mn)).reshape(n, 8, 1)
    return (scale * _f32(q) - offset).reshape(n, QK_K)


def _q4_k(b: Blocks) -> Tensor:
    q = nibbles(b.bytes("qs").reshape(b.n, 4, 32))  # per 32 bytes: two sub-blocks (low, high nibbles)
    return _k_apply(b, q.reshape(b.n, 8, 32))


def _q5_k(b: Blocks) -> Tensor:
    n = b.n
    q = nibbles(b.bytes("qs").reshape(n, 4, 32)).reshape(n, 8, 32)
    high = spread(_wide(b.bytes("qh")), 1, 8, 1)  # bit i of qh[l]: 5th bit of element l of sub-block i
    return _k_apply(b, q | (high << 4))


def _q6_k(b: Blocks) -> Tensor:
    n = b.n
    # per 128-element half: 64 bytes of ql (quarters 0,1 low nibbles of bytes 0..31, 32..63; 2,3 high)
    ql = _wide(b.bytes("ql")).reshape(n, 2, 2, 32)  # (half, byte half, l)
    low = spread(ql, 2, 2, 4)  # (half, nibble, byte half, l): quarter = 2 * nibble + byte half
    qh = spread(_wide(b.bytes("qh")).reshape(n, 2, 32), 2, 4, 2)  # (half, quarter, l)
    # the offset after the (exact) conversion: a GEMV then sums it with the other rows' (scale * -32 * sum x)
    # instead of subtracting it from every element
    q = _f32((low.reshape(n, 2, 4, 32) | (qh << 4)).reshape(n, 16, 16)) - 32.0
    scale = (b.f16("d") * _f32(b.bytes("scales").bitcast("int8"))).reshape(n, 16, 1)
    return (scale * q).reshape(n, QK_K)


def _value_table(index: Tensor, table: str) -> Tensor:
    """``table[index]`` for a constant table of 16 float32 values (``tg_gguf.tables``): an indexed load, which a
    renderer that gathers does in registers (two permutes and a blend on AVX2; a tree of selects on the index
    bits took ~30 vector operations per 8 values)."""
    from tg_gguf.tables import TABLES
    return TABLES.get(table, index.device).take(index.cast("int32"))


def _iq4_nl(b: Blocks) -> Tensor:
    return b.f16("d") * _value_table(nibbles(b.bytes("qs")), "iq4nl")


def iq4_xs_scales(b: Blocks) -> Tensor:
    """IQ4_XS's 8 sub-block scales per super-block, ``(n, 8)`` float32 (6 bits minus 32)."""
    n = b.n
    low = spread(b.bytes("scales_l"), 2, 2, 4).reshape(n, 8)  # scale 2i: low nibble of byte i, 2i+1: high
    high = spread(b.uint("scales_h"), 2, 8, 2).reshape(n, 8).cast("uint8")
    return _f32((low | (high << 4)).cast("int32") - 32)


def _iq4_xs(b: Blocks) -> Tensor:
    n = b.n
    dl = (b.f16("d") * iq4_xs_scales(b)).reshape(n, 8, 1)
    q = nibbles(b.bytes("qs").reshape(n, 8, 16))
    return (dl * _value_table(q, "iq4nl")).reshape(n, QK_K)


def mxfp4_scale(b: Blocks) -> Tensor:
    """MXFP4's e8m0 exponent, halved (the value table is doubled): ``2**(e - 128)`` as float32, ``(n, 1)``."""
    return e8m0_halved(b.bytes("e"))


def e8m0_halved(exponents: Tensor) -> Tensor:
    """e8m0 exponent bytes ``e`` -> ``2**(e - 128)`` as float32 (the two smallest subnormal: bit 21 or 22, ``(e + 1)
    << 21``; shifts by constants only, so every lane is one vector op: a shift by ``e`` was lane by lane in C)."""
    e = exponents.cast("uint32")
    bits = (e < 2).where((e + 1) << 21, (e - 1) << 23)
    return bits.bitcast("float32")


def _mxfp4(b: Blocks) -> Tensor:
    return mxfp4_scale(b) * _value_table(nibbles(b.bytes("qs")), "mxfp4")


def _ternary(digits: Tensor) -> Tensor:
    """TQ1_0: base-3 digits scaled to 0..255 in the low byte of an int32 (a byte times a power of 3, not reduced) ->
    the trit at the top: 0, 1, 2 (the caller subtracts 1 after converting to float, where a GEMV factors it out).
    In int32 lanes: x86 has no byte multiplies, and a vector widens 8 loaded bytes to int32 in one instruction."""
    return ((digits & 255) * 3) >> 8


def _tq1_0(b: Blocks) -> Tensor:
    """A block's 256 values as 16 rows of 16: rows 2t and 2t+1 hold trit t of bytes 0..15 and 16..31 (elements
    32t + l), rows 10 + t trit t of bytes 32..47 (elements 160 + 16t + l), row 15 the 4 qh bytes' 4 trits (trit
    l // 4 of byte l % 4). Rows 0..14 read 16 consecutive bytes from a start that depends on the row only (an
    indexed load of the raw bytes: one vector load per vector of values); row 15 is put after them along the row
    axis (its load skipped elsewhere); each value's power of 3 is read from a constant table by its position in
    the block (``tq1_powers``: one vector load). (Concatenated along the flat 256 values instead, every lane had a
    byte index, power and part of its own: 1-3% of the streaming bandwidth.)"""
    from tg_gguf.tables import TABLES
    n = b.n
    _, block_bytes = BLOCK_LAYOUT[b.gtype]
    row = iota((1, 15, 1), 1, b.device, "int32")
    lane = iota((1, 1, 16), 2, b.device, "int32")
    start = (row < 10).where((row & 1) * 16, 32)  # the row's first byte in its block
    offset = iota((n, 1, 1), 0, b.device, "int32") * block_bytes + start + lane
    rows = _wide(b.t.take(offset)).pad(((0, 0), (0, 1), (0, 0)))
    qh = b.bytes("qh").reshape(n, 1, 1, 4).expand(n, 1, 4, 4).reshape(n, 1, 16)
    last = _wide(qh).pad(((0, 0), (15, 0), (0, 0)))
    position = iota((1, 16, 1), 1, b.device, "int32") * 16 + iota((1, 1, 16), 2, b.device, "int32")
    digits = (rows + last) * TABLES.get("tq1_powers", b.device).take(position)
    return b.f16("d") * (_f32(_ternary(digits).reshape(n, QK_K)) - 1.0)


def _tq2_0(b: Blocks) -> Tensor:
    n = b.n
    q = spread(_wide(b.bytes("qs")).reshape(n, 2, 32), 2, 4, 2).reshape(n, QK_K)
    return b.f16("d") * (_f32(q) - 1.0)


# ---------------------------------------------------------------------------------------- grid types (i-quants)
# A grid type picks 8 (IQ3: 4) values at once with one index into a constant grid (tg_gguf.iq_grids). The grid is
# a table of float32 values (tg_gguf.tables), so a group's values are one load of 8 (4) consecutive values at
# ``index * 8 + lane``; signs (8 bits per 8 values, or a 7-bit index whose 8th bit is the parity) are one load of
# 8 consecutive +-1.0 from a table of sign patterns. A GEMV vectorized along a group then decodes it with a few
# loads and a conversion, whatever the grid.

def table_rows(index: Tensor, table: str, width: int) -> Tensor:
    """``index`` ``(...)`` -> ``(..., width)``: row ``index`` of the constant table ``table`` (``width`` entries per
    row), an indexed load (``Tensor.take``) of ``index * width + j``."""
    from tg_gguf.tables import TABLES
    values = TABLES.get(table, index.device)
    lane = iota((*index.shape, width), index.ndim, index.device, "int32")
    return values.take(index.cast("int32").reshape(*index.shape, 1) * width + lane)


def _grid_values(index: Tensor, table: str) -> Tensor:
    """``index`` ``(..., k)`` -> the grid values ``(..., k, 8 or 4)`` (float32)."""
    width = 8 if len(getattr(iq_grids, f"{table}_VALUES")) < 4 else 4
    return table_rows(index, f"grid:{table}", width)


def _byte_signs(signs: Tensor) -> Tensor:
    """``(n, m)`` sign bytes -> ``(n, m, 8)`` +-1.0, bit j of byte i for element 8i + j."""
    return table_rows(signs, "byte_signs", 8)


def _ksigns(index: Tensor) -> Tensor:
    """7-bit sign indices ``(...)`` -> ``(..., 8)`` +-1.0: the 7 bits, then their parity (ggml's ksigns)."""
    return table_rows(index, "ksigns", 8)


def _half_scale(d: Tensor, nibble: Tensor, step: float) -> Tensor:
    """``d * (0.5 + s) * step`` (IQ2, IQ3_XXS), in gguf-py's order."""
    return d * (_f32(nibble) + 0.5) * step


def _nibble_pairs(b: Tensor) -> Tensor:
    """``(n, m)`` bytes -> ``(n, 2 * m)`` nibbles, low then high of each byte (int32)."""
    n, m = b.shape
    return spread(_wide(b), 2, 2, 4).reshape(n, 2 * m)


def _iq2_xxs(b: Blocks) -> Tensor:
    n = b.n
    pairs = b.bytes("qs").reshape(n, 8, 8)  # per 32 elements: 4 grid bytes, then a u32 of signs and scale
    index = pairs.shrink(((0, n), (0, 8), (0, 4)))
    aux = le_uint(pairs.shrink(((0, n), (0, 8), (4, 8))).reshape(n, 32), 4).bitcast("int32")  # (n, 8)
    return _xxs(b, index, aux, "IQ2XXS", 0.25)


def _iq3_xxs(b: Blocks) -> Tensor:
    n = b.n
    index = b.bytes("qs").reshape(n, 8, 8)
    aux = le_uint(b.bytes("aux"), 4).bitcast("int32")  # (n, 8); the scale's top bit is the sign: masked below
    return _xxs(b, index, aux, "IQ3XXS", 0.5)


def _xxs(b: Blocks, index: Tensor, aux: Tensor, table: str, step: float) -> Tensor:
    """IQ2_XXS / IQ3_XXS: per 32 elements grid indices ``index`` and a u32 of 4 sign indices and a 4-bit scale."""
    n = b.n
    scale = (aux >> 28) & 15
    db = _half_scale(b.f16("d"), scale, step).reshape(n, 8, 1, 1)
    sign_index = spread(aux, 2, 4, 7)  # (n, 8, 4)
    values = _grid_values(index, table).reshape(n, 8, 4, 8)
    return (db * values * _ksigns(sign_index)).reshape(n, QK_K)


def _iq2_xs(b: Blocks) -> Tensor:
    n = b.n
    qs = le_uint(b.bytes("qs"), 2).cast("int32")  # (n, 32): 9-bit grid index, 7-bit sign index
    db = _half_scale(b.f16("d"), _nibble_pairs(b.bytes("scales")), 0.25).reshape(n, 16, 1, 1)
    values = _grid_values(qs & 511, "IQ2XS").reshape(n, 16, 2, 8)
    signs = _ksigns(qs >> 9).reshape(n, 16, 2, 8)
    return (db * values * signs).reshape(n, QK_K)


def _iq2_s(b: Blocks) -> Tensor:
    n = b.n
    high = spread(_wide(b.bytes("qh")), 2, 4, 2)  # (n, 8, 4): 2 more index bits per 8 values
    index = _wide(b.bytes("qs")).reshape(n, 8, 4) | (high << 8)
    db = _half_scale(b.f16("d"), _nibble_pairs(b.bytes("scales")), 0.25).reshape(n, 16, 1, 1)
    values = _grid_values(index, "IQ2S").reshape(n, 16, 2, 8)
    signs = _byte_signs(b.bytes("signs")).reshape(n, 16, 2, 8)
    return (db * values * signs).reshape(n, QK_K)


def _iq3_s(b: Blocks) -> Tensor:
    n = b.n
    high = spread(_wide(b.bytes("qh")), 2, 8, 1).reshape(n, 64)
    index = _wide(b.bytes("qs")) | (high << 8)
    db = (b.f16("d") * _f32(_nibble_pairs(b.bytes("scales")) * 2 + 1)).reshape(n, 8, 1)
    values = _grid_values(index, "IQ3S").reshape(n, 8, 32)
    signs = _byte_signs(b.bytes("signs")).reshape(n, 8, 32)
    return (db * values * signs).reshape(n, QK_K)


def _iq1(dl: Tensor, row: Tensor, groups_per_scale: int) -> Tensor:
    """``dl * (grid + delta)``: ``dl`` one per scale; ``row`` one per 8 values (any shape ``(n, ...)`` in element
    order), the 11-bit grid index with the delta's sign as bit 11: the row of the grid with the delta added
    (``tg_gguf.tables``' ``grid:IQ1S+delta``), so a group's values are one load."""
    n = row.shape[0]
    scales = 32 // groups_per_scale
    values = table_rows(row, "grid:IQ1S+delta", 8).reshape(n, scales, groups_per_scale, 8)
    return (dl.reshape(n, scales, 1, 1) * values).reshape(n, QK_K)


def iq1_s_parts(b: Blocks) -> tuple[Tensor, Tensor]:
    """IQ1_S's scale per 32 values ``d * (2s + 1)`` ``(n, 8)`` float32, and its grid row per 8 values ``(n, 8, 4)``
    int32: the qs byte, 3 more index bits from qh, the delta's sign as bit 11 (``grid:IQ1S+delta``'s layout)."""
    n = b.n
    qh = le_uint(b.bytes("qh"), 2).cast("int32")  # (n, 8): 4 x 3 index bits, a 3-bit scale, the delta's sign
    index = _wide(b.bytes("qs")).reshape(n, 8, 4) | (spread(qh, 2, 4, 3) << 8)
    dl = b.f16("d") * _f32(((qh >> 12) & 7) * 2 + 1)
    return dl, index | (((qh >> 15) & 1) << 11).reshape(n, 8, 1)


def _iq1_s(b: Blocks) -> Tensor:
    dl, rows = iq1_s_parts(b)
    return _iq1(dl, rows, 4)


def iq1_m_scales(b: Blocks) -> Tensor:
    """IQ1_M's 16 scales per super-block (one per 16 values), ``d * (2s + 1)``: ``(n, 16)`` float32."""
    d, s = iq1_m_parts(b)
    return d * _f32(s * 2 + 1)


def iq1_m_parts(b: Blocks) -> tuple[Tensor, Tensor]:
    """IQ1_M's ``d`` ``(n, 1)`` float32 and its 16 three-bit scales ``s`` per super-block ``(n, 16)`` int32."""
    n = b.n
    sc = le_uint(b.bytes("scales"), 2).cast("int32")  # (n, 4) u16: 4 three-bit scales each; top nibbles: the f16 d
    d_bits = _or_columns(((sc >> 12) & 15) << (iota((1, 4), 1, b.device, "int32") * 4))  # nibble k: bits 4k..
    d = d_bits.cast("uint16").bitcast("float16").cast("float32")
    return d, spread(sc, 2, 4, 3).reshape(n, 16)


def iq1_m_rows(b: Blocks) -> Tensor:
    """IQ1_M's grid row per 8 values, ``(n, 16, 2)`` int32: the qs byte, 3 more index bits and the delta's sign as
    bit 11 from the qh nibble (``grid:IQ1S+delta``'s layout)."""
    n = b.n
    nib = spread(_wide(b.bytes("qh")), 2, 2, 4)  # (n, 16, 2): 3 index bits and the delta's sign per 8 values
    return _wide(b.bytes("qs")).reshape(n, 16, 2) | (nib << 8)


def _iq1_m(b: Blocks) -> Tensor:
    return _iq1(iq1_m_scales(b), iq1_m_rows(b), 2)


def _or_columns(x: Tensor) -> Tensor:
    """``(n, k)`` -> ``(n, 1)``: the OR of the k columns."""
    n, k = x.shape
    out = x.shrink(((0, n), (0, 1)))
    for i in range(1, k):
        out = out | x.shrink(((0, n), (i, i + 1)))
    return out


def _plain(gtype: GGMLType) -> Callable[[Blocks], Tensor]:
    target = PLAIN[gtype]

    def decode(b: Blocks) -> Tensor:
        bits = le_uint(b.t, BLOCK_LAYOUT[gtype][1])
        value = bits.bitcast(target) if target != "bfloat16" else (bits.cast("uint32") << 16).bitcast("float32")
        return _f32(value)
    decode.__name__ = f"_{gtype.name.lower()}"
    return decode


DEQUANTIZERS: dict[GGMLType, Callable[[Blocks], Tensor]] = {
    **{t: _plain(t) for t in PLAIN},
    GGMLType.Q4_0: _q4_0,
    GGMLType.Q4_1: _q4_1,
    GGMLType.Q5_0: _q5_0,
    GGMLType.Q5_1: _q5_1,
    GGMLType.Q8_0: _q8_0,
    GGMLType.Q2_K: _q2_k,
    GGMLType.Q3_K: _q3_k,
    GGMLType.Q4_K: _q4_k,
    GGMLType.Q5_K: _q5_k,
    GGMLType.Q6_K: _q6_k,
    GGMLType.IQ4_NL: _iq4_nl,
    GGMLType.IQ4_XS: _iq4_xs,
    GGMLType.TQ1_0: _tq1_0,
    GGMLType.TQ2_0: _tq2_0,
    GGMLType.MXFP4: _mxfp4,
    GGMLType.IQ2_XXS: _iq2_xxs,
    GGMLType.IQ2_XS: _iq2_xs,
    GGMLType.IQ2_S: _iq2_s,
    GGMLType.IQ3_XXS: _iq3_xxs,
    GGMLType.IQ3_S: _iq3_s,
    GGMLType.IQ1_S: _iq1_s,
    GGMLType.IQ1_M: _iq1_m,
}


# the types that read a grid (tg_gguf.iq_grids)
GRID_TYPES = (GGMLType.IQ1_S, GGMLType.IQ1_M, GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S, GGMLType.IQ3_XXS,
              GGMLType.IQ3_S)


class UnsupportedTypeError(NotImplementedError):
    """A tensor's ggml type has no tensor-op dequantization (yet)."""


def check_supported(type_id: int, tensor: str | None = None) -> GGMLType:
    """The ``GGMLType`` for ``type_id``; raises ``UnsupportedTypeError`` naming the type and the tensor."""
    what = f"tensor {tensor!r}: " if tensor is not None else ""
    try:
        gtype = GGMLType(type_id)
    except ValueError:
        raise UnsupportedTypeError(f"{what}unknown ggml type id {int(type_id)}") from None
    if gtype not in DEQUANTIZERS:
        supported = ", ".join(t.name for t in sorted(DEQUANTIZERS, key=int))
        raise UnsupportedTypeError(f"{what}dequantization of {gtype.name} (type {int(gtype)}) is not supported "
                                   f"(supported: {supported})")
    return gtype


def dequantize(raw: Tensor, type_id: GGMLType | int, shape: Sequence[int], dtype: str = "float32",
               name: str | None = None) -> Tensor:
    """The lazy dequantization of ``raw`` (the tensor's bytes: a 1-D uint8 Tensor) to ``shape`` (numpy order).

    ``dtype`` is ``"float32"`` (default) or ``"float16"``. Raises ``UnsupportedTypeError`` for a type
    with no dequantization and ``ValueError`` when the size does not match the shape.
    """
    from tgcore.tensor import Tensor
    gtype = check_supported(type_id, name)
    dtype = getattr(dtype, "name", dtype)  # a tgcore DType or its name
    if dtype not in ("float32", "float16"):
        raise ValueError(f"dequantize: dtype must be float32 or float16, not {dtype!r}")
    block, block_bytes = BLOCK_LAYOUT[gtype]
    shape = tuple(int(s) for s in shape)
    n = 1
    for s in shape:
        n *= s
    what = f"tensor {name!r}: " if name is not None else ""
    if (shape[-1] if shape else 1) % block:
        raise ValueError(f"{what}last dimension of shape {shape} is not a multiple of the {gtype.name} "
                         f"block size {block}")
    expected = n // block * block_bytes
    if raw.dtype.name != "uint8" or raw.shape != (expected,):
        raise ValueError(f"{what}{gtype.name} of shape {shape} needs {expected} uint8 bytes, got "
                         f"{raw.shape} {raw.dtype.name}")
    if n == 0:
        return Tensor.zeros(shape, dtype=dtype, device=raw.device)
    out = DEQUANTIZERS[gtype](Blocks(raw, gtype)).reshape(shape)
    return out.cast(dtype)

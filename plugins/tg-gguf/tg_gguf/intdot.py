"""Quantized matrix products as integer dot products: activations quantized to 8 bits per block of 32 (or of 256
for the types in ``ACT_BLOCKS``: none today).

In:  activations ``x`` (a lazy float ``Tensor``, ``(..., K)``) and a quantized weight: its raw bytes (a 1-D uint8
     ``Tensor``), its ggml type and its ``(N, K)`` shape.
Out: ``x @ W.T`` (``(..., N)`` float32, lazy), where each block of 32 activations (``activation_block``) is first
     replaced by 8-bit integers and one float scale (``quantize_activations``), as llama.cpp's q8 path does.

How: a weight's integers are read as unsigned bytes ``u`` (a type's signed range shifted up: Q4_0's ``q - 8`` is
``u = q`` with offset ``-8``), so one block's contribution is

    dx * (scale * sum_i u_i * xq_i + offset * sum_i xq_i)

with ``scale`` and ``offset`` the weight's per-(sub-)block factors and ``dx`` the activation block's scale. Where the
offset is an integer ``c`` times the scale (Q4_0, Q5_0, Q8_0, Q3_K, Q6_K, TQ1_0, TQ2_0, IQ4_NL, IQ4_XS, MXFP4), it is
``dx * scale * (sum_i u_i * xq_i + c * sum_i xq_i)``: one float factor per block, the offset summed in int32. Each
type below writes that sum as tensor ops over the weight's elements. The codegen takes it from there: it moves the
per-block factors out of the in-block sums and sums the byte products in int32
(``tgcore.codegen.blocks.factor_blocks``: exact, so the float and integer sums agree). On a renderer whose
compiler vectorizes byte dots (``Renderer.compiles_byte_dots``: the C renderer):

every type sums each block of 32 (a K-quant's sub-blocks of 32, ``_block32``) in the order ``[k, l]`` = element
``4l + k`` (``_by_lane``): vectorized by 8, lane ``l`` sums 4 neighbouring elements in int32 (one ``vpdpbusd`` per
block and row: ``tgcore.renderer.cbytedot``), scales it in its lane and keeps a float partial sum across blocks;
the lanes are added once per row, as llama.cpp's AVX2 ``ggml_vec_dot_q4_1_q8_1`` does. A K-quant's ``d`` leaves
the sum over its sub-blocks; codegen unrolls the 8 sub-blocks of a super-block and unpacks their scales and mins
once per super-block as vectors (``tgcore.codegen.optimize.OptOps.SPREAD``), so their bit-field shifts are
constants and a sub-block's scale is one permute of a vector.

TQ1_0 takes its base-3 digits apart with byte multiplies and compares (``_tq1_0``).

IQ4_NL, IQ4_XS and MXFP4 look their 4-bit codes up in a table of 16 bytes (their values plus 128): 32 lanes at once
with one byte shuffle on the C renderer (``tgcore.renderer.cbytedot``), then the same byte dot product. The grid
types IQ2_S, IQ3_XXS and IQ3_S read their grid rows as bytes (on the C renderer one gather of the 4 or 8 rows of a
block of 32, their offsets computed on int32 lanes) and flip the activations' signs with byte masks (``(x ^ m) -
m``: IQ3_XXS from a table; IQ2_S, IQ3_S from their sign bits, on the C renderer one masked subtraction), so the
weight's side stays unsigned; IQ2_XXS and IQ2_XS read their rows with the signs applied, plus 64, at the grid and
sign indices together (an integer offset of -64: one gather per block, ``_signed_grid_rows``); IQ1_S and IQ1_M read
rows of ``8 * (grid + delta) + 9`` (an integer offset of -9, one float factor ``dl / 8`` per block).

``INT_DOT_TYPES`` (data) says which types take this path where it is available; ``uses_int_dot`` decides.
Rounding: activations are rounded to nearest (ties to even), so results differ from the float path by the
activations' quantization error (a relative ~0.4% per block at worst), like llama.cpp's CPU backend.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.dequant import (
    Blocks,
    check_supported,
    iota,
    iq1_m_parts,
    iq1_s_parts,
    iq4_xs_scales,
    k_scales_mins,
    le_uint,
    mxfp4_scale,
    q2_k_scales,
    q3_k_scales,
    spread,
    table_rows,
)

if TYPE_CHECKING:
    import numpy as np

    from tg_gguf.lanes import RowLanes
    from tgcore.renderer import Renderer
    from tgcore.tensor import Tensor

ACT_BLOCK = 32   # activations share one scale per this many elements (but for the types in ``ACT_BLOCKS``)
ACT_MAX = 127.0  # the largest 8-bit activation
ROUNDING_MAGIC = 12582912.0      # 1.5 * 2**23
ROUNDING_MAGIC_BITS = 0x4B400000  # its float32 bits


def quantize_activations(x: Tensor, block: int = ACT_BLOCK) -> tuple[Tensor, Tensor]:
    """``x`` ``(..., K)`` float -> (``xq`` ``(..., K)`` int8, ``dx`` ``(..., K // block)`` float32) with
    ``x ~ dx * xq`` per block of ``block`` (32, or a type's ``ACT_BLOCKS``): ``dx = max|x| *
    float32(1 / 127)``, ``xq = round(x / dx)`` (to nearest, ties to even; an all-zero block has ``dx = 0``,
    ``xq = 0``). Two kernels: the block maxima scaled (a reduction), then the rounding; both results are buffers of
    their own (every weight row reads them)."""
    *lead, k = x.shape
    if k % block:
        raise ValueError(f"quantize_activations: the last dimension {k} is not a multiple of {block}")
    xb = x.cast("float32").reshape(*lead, k // block, block)
    # |x| as its bits with the sign cleared, the largest as an integer maximum: the float order of non-negative floats
    # (NaN's bits above infinity's: it stays the maximum), two integer ops per element where abs and a float max
    # keep signed zeros and NaNs apart lane by lane
    largest = (xb.bitcast("int32") & 0x7FFFFFFF).max(-1, keepdim=True).bitcast("float32")
    dx = (largest * (1.0 / ACT_MAX)).contiguous()
    # round to nearest even by adding 1.5 * 2**23: the sum's low mantissa bits are then the rounded integer
    # (exact for |v| < 2**22; a float -> int conversion is rendered with range checks, this is two int ops)
    scaled = (dx > 0).where(xb / dx, 0.0)
    rounded = ((scaled + ROUNDING_MAGIC).bitcast("int32") - ROUNDING_MAGIC_BITS).cast("int8")
    return rounded.reshape(*lead, k).contiguous(), dx.reshape(*lead, k // block)


def _i32(t: Tensor) -> Tensor:
    return t.cast("int32")


def _f32(t: Tensor) -> Tensor:
    return t.cast("float32")


def _dot(u: Tensor, xq: Tensor) -> Tensor:
    """Unsigned weight bytes times int8 activations, as int32 (what a C compiler turns into ``vpdpbusd``)."""
    return _i32(u) * _i32(xq)


class Operands:
    """What a type's sum is built from: the weight's blocks seen as ``(N, blocks per row, block bytes)``, the
    quantized activations per weight block ``(M, 1, blocks per row, block)`` and their scales per activation block
    (``activation_block``: 32, or the weight's block) ``(M, 1, blocks per row, block // activation block)``."""

    def __init__(self, b: Blocks, xq: Tensor, dx: Tensor, n: int, k: int) -> None:
        block, _ = BLOCK_LAYOUT[b.gtype]
        self.b, self.n, self.nb = b, n, k // block
        m = xq.shape[0]
        self.xq = xq.reshape(m, 1, self.nb, block)
        self.dx = dx.reshape(m, 1, self.nb, block // activation_block(b.gtype))

    def field(self, name: str) -> Tensor:
        """A field's bytes as ``(1, N, blocks per row, length)``."""
        t = self.b.bytes(name)
        return t.reshape(1, self.n, self.nb, t.shape[-1])

    def f16(self, name: str, ones: int = 1) -> Tensor:
        """A half field as ``(1, N, blocks per row)`` and ``ones`` axes of 1, float32."""
        return self.b.f16(name).reshape(1, self.n, self.nb, *(1,) * ones)

    def f16_looked_up(self, name: str) -> Tensor:
        """``f16(name)`` read from the table of every float16's float32 value (``tables``' ``f16_f32``): the same
        values, one load per block where a conversion was a load, a convert and a broadcast (port 5 on x86)."""
        from tg_gguf.tables import TABLES
        bits = le_uint(self.b.bytes(name), 2).cast("int32")
        return TABLES.get("f16_f32", self.b.device).take(bits).reshape(1, self.n, self.nb, 1)

    def x(self, *shape: int) -> Tensor:
        """The block's activations reshaped to ``(M, 1, blocks per row, *shape)``."""
        return self.xq.reshape(*self.xq.shape[:3], *shape)

    def scale(self, subs: int) -> Tensor:
        """The activation scales of ``subs`` blocks of 32 per weight block, ``(M, 1, blocks per row, subs, 1, 1)``:
        one per block of 32, or one per weight block for all its blocks (``activation_block``)."""
        per_block = self.dx.shape[3]
        return self.dx.reshape(*self.dx.shape[:3], per_block, 1, 1).expand(*self.dx.shape[:3], subs, 1, 1)


def _by_lane(t: Tensor) -> Tensor:
    """``(..., 32)`` -> ``(..., 4, 8)`` with ``[k, l]`` = element ``4l + k``: summed in this order and vectorized by 8
    (``heuristic.BYTE_DOT_STEPS``), lane ``l`` sums 4 neighbouring elements, one multiply-add of 4 bytes
    (``vpdpbusd``) per block on a renderer that has it, and keeps its float partial sum across blocks."""
    return t.reshape(*t.shape[:-1], 8, 4).permute(*range(t.ndim - 1), t.ndim, t.ndim - 1)


def _block32(o: Operands, u: Tensor, scale: Tensor, offset: Tensor | int | None, signs: Tensor | None = None) -> Tensor:
    """Blocks of 32 elements: ``u`` ``(1, N, nb, S, 32)`` their unsigned integers in element order (``S`` blocks of 32
    per weight block), a scale and an offset per block of 32 ``(1, N, nb, S)``, or per ``G`` groups of ``32 / G``
    elements ``(1, N, nb, S, G)`` (no offset: None; an int ``c``: the offset is ``c * scale``, summed with the
    products in int32: ``scale * (sum u x + c sum x)``, one float factor per block). One product over each block, in
    lanes of 4 neighbouring
    elements (``_by_lane``: a group's lanes share its factors). ``signs`` ``(1, N, nb, S, 32)`` int8 masks (0 or -1):
    the weight's signs, applied to the activations (``(x ^ m) - m``: ``u`` stays unsigned)."""
    subs = u.shape[3]
    x = _by_lane(o.x(subs, 32))
    dx = o.scale(subs)
    if signs is not None:
        mask = _by_lane(signs)
        x = (x ^ mask) - mask

    def per_lane(t: Tensor) -> Tensor:
        groups = t.shape[4] if t.ndim == 5 else 1
        t = t.reshape(1, o.n, o.nb, subs, 1, groups, 1).expand(1, o.n, o.nb, subs, 1, groups, 8 // groups)
        return t.reshape(1, o.n, o.nb, subs, 1, 8)
    if isinstance(offset, int):
        return _f32(_dot(_by_lane(u), x) + _i32(x) * offset) * (per_lane(scale) * dx)
    product = _f32(_dot(_by_lane(u), x)) * (per_lane(scale) * dx)
    return product if offset is None else product + _f32(_i32(x)) * (dx * per_lane(offset))


def _nibbles(o: Operands) -> Tensor:
    """Q4/Q5: the 16 bytes' low nibbles (elements 0..15), then their high ones (16..31), ``(1, N, nb, 1, 32)``."""
    return spread(o.field("qs"), 3, 2, 4).reshape(1, o.n, o.nb, 1, 32)


def _q4_0(o: Operands) -> Tensor:
    return _block32(o, _nibbles(o), o.f16_looked_up("d"), -8)


def _q4_1(o: Operands) -> Tensor:
    return _block32(o, _nibbles(o), o.f16_looked_up("d"), o.f16_looked_up("m"))


def _bit_tops(bytes_: Tensor) -> Tensor:
    """Bytes ``(..., k, 1)`` (or already ``(..., k, 8)``) uint8 -> ``(..., k, 8)``: ``(byte & m) + (128 - m)`` with
    ``m = 1 << j`` for bit j, whose top bit is set exactly when bit j of the byte is: no shift by an amount that
    changes from lane to lane (x86 has none for bytes)."""
    shape = (1,) * (bytes_.ndim - 1) + (8,)
    m = iota(shape, len(shape) - 1, bytes_.device, "uint8")
    m = m.full_like(1) << m
    return (bytes_ & m) + (m.full_like(128) - m)


def _fifth(o: Operands) -> Tensor:
    """Q5_0/Q5_1: bit j of the block's 32-bit ``qh`` (byte j // 8, bit j % 8) as 0 or 16 for element j,
    ``(1, N, nb, 32)`` uint8 (``_bit_tops``' top bit, shifted down to 16)."""
    top = _bit_tops(o.field("qh").reshape(1, o.n, o.nb, 4, 1))
    return ((top >> 3) & 16).reshape(1, o.n, o.nb, 1, 32)


def _q5_0(o: Operands) -> Tensor:
    return _block32(o, _nibbles(o) | _fifth(o), o.f16_looked_up("d"), -16)


def _q5_1(o: Operands) -> Tensor:
    return _block32(o, _nibbles(o) | _fifth(o), o.f16_looked_up("d"), o.f16_looked_up("m"))


def _q8_0(o: Operands) -> Tensor:
    return _block32(o, (o.field("qs") ^ 0x80).reshape(1, o.n, o.nb, 1, 32), o.f16("d"), -128)  # u = q + 128


def _bit_as(t: Tensor, bit: Tensor, place: int, width: int = 1) -> Tensor:
    """Bit ``bit`` of the bytes ``t`` (``width`` bits from there) moved to bit ``place`` (the rest 0), with ``bit`` the
    same in a block's bytes (a K-quant sub-block's). Where the renderer unrolls a super-block's sub-blocks
    (``Renderer.vector_block_factors``: ``bit`` is a constant in each copy), the bytes shifted right by
    ``bit - place`` (left by ``place - bit``) and masked: one shift in 32-bit lanes and one mask (the C renderer's
    ``cbytedot.shift_chain_in_words``; ``((t >> bit) & 1) << place`` took ``place`` byte additions more, x86 shifts
    no bytes; Q5_K 4096^2 GEMV, one thread: 0.87 -> 0.68 ms). Elsewhere ``((t >> bit) & mask) << place``: shift
    amounts chosen per sub-block at run time were 100x slower on the x86 backend."""
    from tgcore.runtime.registry import open_device
    field = (1 << width) - 1
    if not open_device(t.device).renderer.vector_block_factors:
        return ((t >> bit) & field) << place
    at = bit.full_like(place)
    right, left = (bit >= place).where(bit, at) - at, at - (bit >= place).where(at, bit)
    return ((t >> right) << left) & (field << place)


def _k_nibbles(o: Operands, fifth: bool) -> Tensor:
    """Q4_K/Q5_K: sub-block 2c + h (elements 64c + 32h + l) is nibble h of the 32 bytes c (chosen by masks: no
    shift by an amount that changes from block to block), plus for Q5_K bit 2c + h of ``qh[l]`` as 16 (``_bit_as``);
    each a block of 32 (``_block32``), ``d`` and ``dmin`` per super-block, 6-bit scales and mins per
    sub-block."""
    sc, mn = k_scales_mins(o.b.bytes("scales"), o.b.n)
    scale = o.f16("d", 1) * _f32(sc).reshape(1, o.n, o.nb, 8)
    offset = o.f16("dmin", 1) * -1.0 * _f32(mn).reshape(1, o.n, o.nb, 8)
    qs = o.field("qs").reshape(1, o.n, o.nb, 4, 1, 32)
    high = iota((1, 1, 1, 1, 2, 1), 4, qs.device)
    u = ((qs & ((high.full_like(1) - high) * 15)) | ((qs >> 4) & (high * 15))).reshape(1, o.n, o.nb, 8, 32)
    if fifth:
        sub = iota((1, 1, 1, 8, 1), 3, qs.device)
        qh = o.field("qh").reshape(1, o.n, o.nb, 1, 32).expand(1, o.n, o.nb, 8, 32)
        u = u | _bit_as(qh, sub, 4)
    return _block32(o, u, scale, offset)


def _q4_k(o: Operands) -> Tensor:
    return _k_nibbles(o, False)


def _q5_k(o: Operands) -> Tensor:
    return _k_nibbles(o, True)


def _two_bit_planes(o: Operands) -> Tensor:
    """Q2_K/Q3_K: quarter j of half h (elements 128h + 32j + l) from bits 2j, 2j+1 of ``qs[h, l]``,
    ``(1, N, nb, 2, 4, 32)``."""
    qs = o.field("qs").reshape(1, o.n, o.nb, 2, 1, 32)
    quarter = iota((1, 1, 1, 1, 4, 1), 4, qs.device)
    return (qs.expand(1, o.n, o.nb, 2, 4, 32) >> (quarter * 2)) & 3


def _q2_k(o: Operands) -> Tensor:
    """Each quarter a block of 32 (``_block32``), scales and mins per 16."""
    sc, mn = q2_k_scales(o.b.bytes("scales"))
    scale = o.f16("d", 2) * _f32(sc).reshape(1, o.n, o.nb, 8, 2)
    offset = o.f16("dmin", 2) * -1.0 * _f32(mn).reshape(1, o.n, o.nb, 8, 2)
    return _block32(o, _two_bit_planes(o).reshape(1, o.n, o.nb, 8, 32), scale, offset)


def _q3_k(o: Operands) -> Tensor:
    """Each quarter a block of 32 (``_block32``): its 2-bit plane and bit 4h + j of ``hmask[l]`` as 4 (q + 4);
    scales per 16."""
    scale = o.f16("d", 2) * _f32(q3_k_scales(o.b.bytes("scales"), o.b.n)).reshape(1, o.n, o.nb, 8, 2)
    hmask = o.field("hmask").reshape(1, o.n, o.nb, 1, 32).expand(1, o.n, o.nb, 8, 32)
    bit = iota((1, 1, 1, 8, 1), 3, hmask.device)  # 4h + j
    u = _two_bit_planes(o).reshape(1, o.n, o.nb, 8, 32) | _bit_as(hmask, bit, 2)
    return _block32(o, u, scale, -4)


def _q6_k(o: Operands) -> Tensor:
    """Quarter j of half h (elements 128h + 32j + l) a block of 32 (``_block32``): the low 4 bits from nibble j // 2
    of ``ql[h, j % 2, l]``, the top 2 from bits 2j, 2j+1 of ``qh[h, l]``; scales per 16."""
    ql = o.field("ql").reshape(1, o.n, o.nb, 2, 1, 2, 32)  # (half, -, byte half, l)
    qh = o.field("qh").reshape(1, o.n, o.nb, 2, 1, 32)  # (half, -, l)
    nibble = iota((1, 1, 1, 1, 2, 1, 1), 4, ql.device)
    low = (ql.expand(1, o.n, o.nb, 2, 2, 2, 32) >> (nibble * 4)) & 15  # (half, nibble, byte half, l): j = 2n + b
    quarter = iota((1, 1, 1, 1, 4, 1), 4, qh.device)
    top = _bit_as(qh.expand(1, o.n, o.nb, 2, 4, 32), quarter * 2, 4, width=2)
    u = low.reshape(1, o.n, o.nb, 2, 4, 32) | top  # q + 32
    scale = o.f16("d") * _f32(o.field("scales").bitcast("int8"))
    scale = scale.reshape(1, o.n, o.nb, 8, 2)
    return _block32(o, u.reshape(1, o.n, o.nb, 8, 32), scale, -32)


def _tq2_0(o: Operands) -> Tensor:
    """TQ2_0: the 2-bit planes of Q2_K (quarter j of half h from bits 2j, 2j+1 of ``qs[h, l]``), ``q = u - 1``, one
    scale per 256; each quarter a block of 32 (``_block32``)."""
    d = o.f16("d", 1).expand(1, o.n, o.nb, 8)
    return _block32(o, _two_bit_planes(o).reshape(1, o.n, o.nb, 8, 32), d, -1)


def _tq1_0(o: Operands) -> Tensor:
    """TQ1_0: base-3 digits, ``q = u - 1``, one scale per 256; elements 32t + l are trit t of ``qs[l]`` (t < 5),
    160 + 16t + l trit t of ``qs[32 + l]``, 240 + l trit ``l // 4`` of ``qh[l % 4]``. A trit is the byte times its
    power of 3 (``tq1_powers_u8``) modulo 256, then ``(b * 3) >> 8``, in 16-bit lanes: the byte times 256 times its
    power wraps to ``b * 256``, and ``(b * 256 * 3) >> 16`` is the high half of a 16-bit product (one ``vpmulhuw``
    on the C renderer: ``cbytedot.high_product``; the whole, widening to narrowing, in 256-bit vectors:
    ``renderer.chighbytes``, 0.86 -> 0.61-0.63 ms). Two byte compares, ``(b > 85) + (b > 170)``, took 7 instructions
    per 32 trits, the mask, multiply and shift of ``b`` 4, the high product 1 (4096^2 kernel, one thread: 1.06 ->
    1.02 -> 0.82 ms; the trits had been three quarters of the kernel's time). Each block of 32 a
    ``_block32``, its bytes chosen by a select between views (no padding: the byte-dot heuristic needs each load's
    index along the reduction): blocks 0..4 the 32 bytes ``qs[0:32]``, 5..7 ``qs[32:48]`` twice, the last 16
    elements ``qh`` (each byte for 4 neighbours, the same in every lane: ``heuristic.PER_STEP``)."""
    from tg_gguf.tables import TABLES
    qs, qh = o.field("qs"), o.field("qh")
    shape = (1, o.n, o.nb, 8, 2, 16)  # (block of 32, half, byte)
    first = qs.shrink(((0, 1), (0, o.n), (0, o.nb), (0, 32))).reshape(1, o.n, o.nb, 1, 2, 16).expand(shape)
    second = qs.shrink(((0, 1), (0, o.n), (0, o.nb), (32, 48))).reshape(1, o.n, o.nb, 1, 1, 16).expand(shape)
    last = qh.reshape(1, o.n, o.nb, 1, 1, 1, 4).expand(1, o.n, o.nb, 8, 2, 4, 4).reshape(shape)
    block = iota((1, 1, 1, 8, 1, 1), 3, qs.device, "int32")
    half = iota((1, 1, 1, 1, 2, 1), 4, qs.device, "int32")
    b = (block < 5).where(first, ((block == 7) & (half == 1)).where(last, second)).reshape(1, o.n, o.nb, 8, 32)
    powers = TABLES.get("tq1_powers_u8", qs.device).reshape(1, 1, 1, 8, 32)
    q = b.cast("uint16") * (powers.cast("uint16") << 8)  # the wrapped byte times 256, in 16 bits
    u = ((q.cast("uint32") * 3) >> 16).cast("uint16").cast("uint8")  # the high half of a 16-bit product
    d = o.f16("d", 1).expand(1, o.n, o.nb, 8)
    return _block32(o, u, d, -1)


def _looked_up(o: Operands, index: Tensor, table: str) -> Tensor:
    """``table[index]`` for a table of 16 bytes (``tg_gguf.tables``: a value plus 128): an indexed load, 32 lanes at
    once with one byte shuffle (``vpshufb``) on a renderer that has it."""
    from tg_gguf.tables import TABLES
    return TABLES.get(table, o.b.t.device).take(index.cast("int32"))


def _iq4_nl(o: Operands) -> Tensor:
    """IQ4_NL: Q4_0's nibbles select one of 16 non-linear values (``u`` = value + 128), one scale per 32."""
    d = o.f16("d")
    return _block32(o, _looked_up(o, _nibbles(o), "iq4nl_u8"), d, -128)


def _iq4_xs(o: Operands) -> Tensor:
    """IQ4_XS: sub-block j of 32 (its 16 bytes' low nibbles, then high) selects IQ4_NL's values; ``d`` per
    super-block, 6-bit scales (minus 32) per sub-block."""
    qs = spread(o.field("qs").reshape(1, o.n, o.nb, 8, 16), 4, 2, 4).reshape(1, o.n, o.nb, 8, 32)
    scale = o.f16("d", 1) * iq4_xs_scales(o.b).reshape(1, o.n, o.nb, 8)
    return _block32(o, _looked_up(o, qs, "iq4nl_u8"), scale, -128)


def _mxfp4(o: Operands) -> Tensor:
    """MXFP4: Q4_0's nibbles select e2m1 values (doubled, plus 128), a power of two per 32."""
    d = mxfp4_scale(o.b).reshape(1, o.n, o.nb, 1)
    return _block32(o, _looked_up(o, _nibbles(o), "mxfp4_u8"), d, -128)


def _half_steps(d: Tensor, s: Tensor, step: float) -> Tensor:
    """``d * (0.5 + s) * step`` (IQ2, IQ3_XXS) as ``float(2s + 1) * (d * step / 2)``: the same float32 (halving and
    ``step`` are exact powers of two), and one factor per block that is an integer's conversion (a sum of two would
    be two accumulators)."""
    return _f32(s * 2 + 1) * (d * (step * 0.5))


def _grid_rows(o: Operands, index: Tensor, grid: str) -> Tensor:
    """The byte rows of an i-quant grid at ``index`` ``(1, N, nb, S, groups)``: ``(1, N, nb, S, 32)`` uint8."""
    width = 32 // index.shape[-1]
    return table_rows(index, f"grid_u8:{grid}", width).reshape(*index.shape[:4], 32)


def _sign_masks(o: Operands, index: Tensor) -> Tensor:
    """7-bit sign indices (ggml's ksigns) ``(1, N, nb, S, 4)`` -> ``(1, N, nb, S, 32)`` int8 masks (-1 for minus)."""
    return table_rows(index, "ksign_masks", 8).reshape(*index.shape[:4], 32)


def _byte_sign_masks(signs: Tensor) -> Tensor:
    """Sign bytes ``(1, N, nb, S, 4)`` -> ``(1, N, nb, S, 32)`` int8 masks, -1 where bit ``j`` of byte ``i`` is set
    for value ``8i + j`` (``_bit_tops``' top bit, as 0 or -1). The C renderer takes ``(x ^ mask) - mask`` over a
    block's 32 values for one negation of the activations where the bits of the block's 32-bit sign word are set
    (``renderer.cnegatebits``: with AVX512BW one masked byte subtraction, where a gather of 4 rows of 8 mask bytes
    from a table of each byte's masks, its widened indices, an xor and a subtraction were; 4096^2 kernel, one
    thread: IQ2_S 1.18 -> 0.96 ms, IQ3_S 1.31 -> 1.02)."""
    top = _bit_tops(signs.reshape(*signs.shape, 1).expand((*signs.shape, 8)))
    return (top >> 7).cast("int8").mul(-1).reshape(*signs.shape[:4], 32)


def _xxs_scale(o: Operands, aux: Tensor, step: float) -> Tensor:
    """IQ2_XXS / IQ3_XXS: ``d * (0.5 + s) * step`` per 32 of the 4-bit scale ``s`` atop each u32 ``aux``, the
    ``(0.5 + s) * step`` read from a table of 16 floats (``odd_steps:<step>``): one load per block, where
    ``_half_steps``'s shift, multiply-add and conversion took four more instructions (4096^2 kernel, one thread:
    IQ2_XXS 1.06 -> 0.97-0.99 ms, IQ3_XXS 1.14 -> 1.10-1.14). The same float32 as ``_half_steps``: both are
    ``d * (2s + 1)`` rounded once, times a power of two."""
    from tg_gguf.tables import TABLES
    return o.f16("d", 1) * TABLES.get(f"odd_steps:{step}", aux.device).take((aux >> 28) & 15)


def _xxs(o: Operands, index: Tensor, aux: Tensor, grid: str, step: float) -> Tensor:
    """IQ3_XXS: per 32 elements grid indices ``index`` ``(1, N, nb, 8, groups)`` and a u32 ``aux``
    ``(1, N, nb, 8)`` of 4 sign indices and a 4-bit scale (``_xxs_scale``), no offset."""
    signs = _sign_masks(o, spread(aux, 4, 4, 7))
    return _block32(o, _grid_rows(o, index, grid), _xxs_scale(o, aux, step), None, signs)


SIGNED_ROWS_OFFSET = -64  # ``grid_signed_u8``'s rows are the signed values plus 64


def _signed_grid_rows(o: Operands, index: Tensor, grid: str) -> Tensor:
    """IQ2_XXS / IQ2_XS: per 8 values the grid row with the signs of its 7-bit sign index applied, plus 64
    (``grid_signed_u8:<grid>``), at ``index`` ``(1, N, nb, 8, 4)`` (the sign index above the grid index's bits):
    ``(1, N, nb, 8, 32)`` uint8, the block's sum ``sum u x - 64 sum x``. One row per 8 values where a grid row and a
    row of sign masks for the activations (``_sign_masks``, ``(x ^ m) - m``) were two gathers (4096^2 kernel, one
    thread, the C of both in one run: IQ2_XXS 5.48 -> 4.43, IQ2_XS 5.60 -> 4.33 TSC cycles per block of 32 and
    row), from a table of 256 / 512 KiB instead of 2 / 4 KiB and 1 KiB."""
    return table_rows(index, f"grid_signed_u8:{grid}", 8).reshape(*index.shape[:4], 32)


def _iq2_xxs(o: Operands) -> Tensor:
    """Per 32 elements 4 grid index bytes and a u32 ``aux``: 4 sign indices (``_signed_grid_rows``: above the grid
    index's 8 bits) and a 4-bit scale (``_xxs_scale``)."""
    pairs = o.field("qs").reshape(1, o.n, o.nb, 8, 2, 4)  # per 32 elements: 4 grid bytes, then a u32 of signs, scale
    index = pairs.shrink(((0, 1), (0, o.n), (0, o.nb), (0, 8), (0, 1), (0, 4))).reshape(1, o.n, o.nb, 8, 4)
    aux = le_uint(pairs.shrink(((0, 1), (0, o.n), (0, o.nb), (0, 8), (1, 2), (0, 4))).reshape(o.n * o.nb, 32), 4)
    aux = aux.bitcast("int32").reshape(1, o.n, o.nb, 8)
    rows = _signed_grid_rows(o, index.cast("int32") | (spread(aux, 4, 4, 7) << 8), "IQ2XXS")
    return _block32(o, rows, _xxs_scale(o, aux, 0.25), SIGNED_ROWS_OFFSET)


def _iq3_xxs(o: Operands) -> Tensor:
    index = o.field("qs").reshape(1, o.n, o.nb, 8, 8)
    aux = le_uint(o.b.bytes("aux"), 4).bitcast("int32").reshape(1, o.n, o.nb, 8)
    return _xxs(o, index, aux, "IQ3XXS", 0.5)


def _nibbles_per_16(o: Operands) -> Tensor:
    """IQ2_XS / IQ2_S: a 4-bit scale per 16 elements, low then high nibble of byte i for block i: ``(1, N, nb, 8,
    2)`` int32 (bit fields are taken apart in int32 lanes: x86 shifts no byte lanes, and a vector of bytes shifted
    by an amount per lane is taken apart lane by lane)."""
    return spread(o.field("scales").cast("int32"), 4, 2, 4)


def _high_index_bits(x: Tensor, count: int, bits: int) -> Tensor:
    """``spread(x, 4, count, bits) << 8`` (a grid index's bits above its byte, field ``k`` of ``x`` ``(1, N, nb, 8)``
    int32) as ``((x << 8) >> (k * bits)) & (mask << 8)``: where ``k * bits <= 8`` one shift left per lane (IQ2_S,
    IQ3_S; IQ1_M's last field a shift right too), then the mask and the index's byte or-ed in one instruction
    (``vpternlogd``), where each field was shifted down, masked and shifted back up. 4096^2 kernel, one thread,
    the C of both alternating: IQ2_S 0.95 -> 0.84 ms, IQ3_S 1.00 -> 0.90, IQ1_M 0.90 -> 0.86 (IQ1_S's 3-bit
    fields: no gain, not taken)."""
    shifts = iota((1, 1, 1, 1, count), 4, x.device, "int32") * bits
    return ((x << 8).reshape(*x.shape, 1) >> shifts) & (((1 << bits) - 1) << 8)


def _iq2_xs(o: Operands) -> Tensor:
    """Per 8 values a u16: a 9-bit grid index and a 7-bit sign index above it, the index of its signed row
    (``_signed_grid_rows``); scales per 16."""
    qs = le_uint(o.b.bytes("qs"), 2).cast("int32").reshape(1, o.n, o.nb, 8, 4)
    scale = _half_steps(o.f16("d", 2), _nibbles_per_16(o), 0.25)
    return _block32(o, _signed_grid_rows(o, qs, "IQ2XS"), scale, SIGNED_ROWS_OFFSET)


def _iq2_s(o: Operands) -> Tensor:
    """Per 8 values a grid index byte with 2 more bits from ``qh`` and a sign byte; scales per 16."""
    high = _high_index_bits(o.field("qh").cast("int32"), 4, 2)  # (1, N, nb, 8, 4)
    index = o.field("qs").reshape(1, o.n, o.nb, 8, 4).cast("int32") | high
    signs = _byte_sign_masks(o.field("signs").reshape(1, o.n, o.nb, 8, 4))
    scale = _half_steps(o.f16("d", 2), _nibbles_per_16(o), 0.25)
    return _block32(o, _grid_rows(o, index, "IQ2S"), scale, None, signs)


def _iq3_s(o: Operands) -> Tensor:
    """Per 4 values a grid index byte with a 9th bit from ``qh``; a sign byte per 8; ``d * (2s + 1)`` per 32, its
    ``2s + 1`` read from a table (``_xxs``'s way: 4096^2 kernel, one thread, 1.30 -> 1.25-1.28 ms)."""
    high = _high_index_bits(o.field("qh").cast("int32"), 8, 1)  # (1, N, nb, 8, 8)
    index = o.field("qs").reshape(1, o.n, o.nb, 8, 8).cast("int32") | high
    signs = _byte_sign_masks(o.field("signs").reshape(1, o.n, o.nb, 8, 4))
    from tg_gguf.tables import TABLES
    nibbles = spread(o.field("scales"), 4, 2, 4).reshape(1, o.n, o.nb, 8)
    scale = o.f16("d", 1) * TABLES.get("odd_steps:2", o.b.t.device).take(nibbles.cast("int32"))
    return _block32(o, _grid_rows(o, index, "IQ3S"), scale, None, signs)


def _iq1_rows(o: Operands, rows: Tensor, dl: Tensor) -> Tensor:
    """IQ1_S / IQ1_M: ``rows`` ``(1, N, nb, 8, 4)`` the grid row (with the delta's sign) per 8 values, ``dl`` the
    scales per 32 ``(1, N, nb, 8)`` or per 16 ``(1, N, nb, 8, 2)``. The bytes ``u = 8 * (grid + delta) + 9``
    (``grid_u8:IQ1S+delta``) make the block's sum ``(dl / 8) * (sum u x - 9 sum x)``: all integer up to one float
    factor (``dl / 8`` is exact: a power of two)."""
    u = table_rows(rows, "grid_u8:IQ1S+delta", 8).reshape(1, o.n, o.nb, 8, 32)
    return _block32(o, u, dl * 0.125, -9)


def _iq1_s(o: Operands) -> Tensor:
    """IQ1_S: a scale per 32, a grid row per 8 values with one delta sign per 32. The scale's ``2s + 1`` read from a
    table (``_xxs``'s way; 4096^2 kernel, one thread: 0.95 -> 0.83-0.85 ms)."""
    from tg_gguf.tables import TABLES
    _, rows = iq1_s_parts(o.b)
    qh = le_uint(o.b.bytes("qh"), 2).cast("int32").reshape(1, o.n, o.nb, 8)
    dl = o.f16("d", 1) * TABLES.get("odd_steps:2", o.b.t.device).take((qh >> 12) & 7)
    return _iq1_rows(o, rows.reshape(1, o.n, o.nb, 8, 4), dl)


def _iq1_m(o: Operands) -> Tensor:
    """IQ1_M: a scale per 16, a grid row and a delta sign per 8 values: the qs byte and a nibble of qh, its 2 bytes
    per 32 values read as one u16 (each row's nibble then a shift of the same word: the rows' offsets are computed
    together, ``crowgather.row_gather``). The scales' ``2s + 1`` read from a table (``_xxs``'s way; 4096^2 kernel, one
    thread: 0.95 -> 0.87 ms)."""
    qh = le_uint(o.b.bytes("qh"), 2).cast("int32").reshape(1, o.n, o.nb, 8)
    rows = o.field("qs").reshape(1, o.n, o.nb, 8, 4).cast("int32") | _high_index_bits(qh, 4, 4)
    from tg_gguf.tables import TABLES
    d, s = iq1_m_parts(o.b)
    dl = d.reshape(1, o.n, o.nb, 1, 1) * TABLES.get("odd_steps:2", o.b.t.device).take(s.reshape(1, o.n, o.nb, 8, 2))
    return _iq1_rows(o, rows, dl)


SUMS: dict[GGMLType, Callable[[Operands], Tensor]] = {
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
    GGMLType.TQ1_0: _tq1_0,
    GGMLType.TQ2_0: _tq2_0,
    GGMLType.IQ4_NL: _iq4_nl,
    GGMLType.IQ4_XS: _iq4_xs,
    GGMLType.MXFP4: _mxfp4,
    GGMLType.IQ2_XXS: _iq2_xxs,
    GGMLType.IQ3_XXS: _iq3_xxs,
    GGMLType.IQ2_XS: _iq2_xs,
    GGMLType.IQ2_S: _iq2_s,
    GGMLType.IQ3_S: _iq3_s,
    GGMLType.IQ1_S: _iq1_s,
    GGMLType.IQ1_M: _iq1_m,
}

# the types whose integer path is faster than the float one on a renderer that compiles byte dots (GEMVs of SmolLM2's
# shapes, jitted, int / float time in one process, alternating, load ~9-13): Q4_0 1.25-1.37x, Q4_1 1.27-1.33x,
# Q5_0 1.38-1.45x, Q5_1 1.35-1.40x, Q8_0 1.16-1.20x, Q2_K 1.82-1.84x, Q3_K 2.21-2.29x, Q4_K 2.12-2.21x,
# Q5_K 2.26-2.30x, Q6_K 2.35-2.45x. TQ2_0 (32-byte planes, one scale per 256; 4096^2 GEMV): 1.5x (CPU time
# 1.59-1.62 -> 1.03-1.06 ms, load ~10). IQ4_NL, IQ4_XS, MXFP4 (values from a byte table, one vpshufb per 32; 4096^2,
# alternating, load ~4-5): 1.22x, 1.43x, 1.25x (Q4_0 1.34x in the same run; in CPU time, load ~9: 1.15x, 1.38x,
# 1.39x, 1.32x). Grid types (rows of bytes, signs flipped on the activations; since session 12 the rows' offsets
# computed on int32 lanes and the rows gathered at once, ``tgcore.renderer.crowgather.row_gather``; 4096^2 kernel on
# one thread, best of 30, int vs float in one process, load ~7): IQ1_S 1.06 vs 1.37 ms, IQ1_M 1.08 vs 1.84,
# IQ2_XXS 1.15-1.24 vs 1.34, IQ2_XS 1.31-1.39 vs 1.76, IQ2_S 1.35-1.41 vs 2.60-2.71, IQ3_XXS 1.22-1.28 vs 1.75-1.87,
# IQ3_S 1.40-1.53 vs 2.73. TQ1_0 (trits as byte multiplies and compares; 4096^2, jitted, CPU time, one thread, load
# ~6-7): 1.12-1.18 vs 2.25-2.38 ms; in bench/gguf.py (two threads, int / float in one process) 1.83-1.96x.
INT_DOT_TYPES: frozenset[GGMLType] = frozenset({GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1,
                                                GGMLType.Q8_0, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K,
                                                GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.TQ1_0, GGMLType.TQ2_0,
                                                GGMLType.IQ4_NL, GGMLType.IQ4_XS, GGMLType.MXFP4, GGMLType.IQ2_XS,
                                                GGMLType.IQ2_XXS, GGMLType.IQ2_S, GGMLType.IQ3_XXS, GGMLType.IQ3_S,
                                                GGMLType.IQ1_S, GGMLType.IQ1_M})


# the types whose integer path reads its unsigned bytes as table rows at offsets computed per row (the grids): faster
# than float only where the renderer gathers such rows (``Renderer.gathers_table_rows``). On CPU:X86 (no gathers;
# 4096^2, load ~10) their integer kernels took 20-130 ms against 4-25 ms in float.
TABLE_ROW_TYPES: frozenset[GGMLType] = frozenset({GGMLType.IQ1_S, GGMLType.IQ1_M, GGMLType.IQ2_XXS, GGMLType.IQ2_XS,
                                                  GGMLType.IQ2_S, GGMLType.IQ3_XXS, GGMLType.IQ3_S})

# the types whose activations share one scale per 256 (a super-block of the weight) instead of per 32 (llama.cpp's
# q8_K, for its IQ kernels): none. Measured for the grid types (session 16): a block's factor is then the weight's
# alone (one broadcast into the multiply-add where a product of two broadcasts was, per block and row) and a
# super-block's sum an integer up to one float factor (what folding the scales in integers needs: ``bench/
# grid_bound.py``, +2% there). 4096^2 kernel, one thread, per 32 / per 256 in one process, interleaved, medians (load
# ~7-12): IQ1_S 1.016-1.018x, IQ1_M 1.052-1.056x, IQ2_XXS 1.006-1.012x, IQ2_XS 1.034-1.065x, IQ2_S 1.003-1.004x;
# IQ3_XXS, IQ3_S 0.92-0.99x with the per-256 step captured first, 1.12x and 1.05x captured second (placement). The
# rounding is coarser: rms relative error of a 2048-long product against float64 (IQ2_XS, IQ3_S weights) 0.5% ->
# 0.6-0.7% on gaussian activations, 1.1% -> 3.1% with 0.5% of them 30x larger; end to end (tg-llm's
# ``test_int_dot`` on an IQ3_S model, TG_FULL) the logits moved 2.05% of the largest against the float path, over
# that test's 2% bound (per 32: within it). Not worth its error for a few percent: the grid types stay per 32.
ACT_BLOCKS: dict[GGMLType, int] = {}


def activation_block(gtype: GGMLType) -> int:
    """How many activations share one scale in the integer product with a weight of type ``gtype``."""
    return ACT_BLOCKS.get(gtype, ACT_BLOCK)


# the types whose integer path multiplies vectors of bytes (TQ1_0's base-3 digits): faster than float only where the
# renderer multiplies byte vectors as vectors (``Renderer.multiplies_byte_vectors``). On CPU:X86 (lane by lane; 4096^2,
# one thread, load ~7) TQ1_0's integer kernel took 21.5 ms against 17.3 ms in float. Where the renderer has the row
# lanes (``Renderer.row_lane_byte_dots``) the digits are taken apart once, at load (``tg_gguf.lanes``), and the
# product multiplies none (CPU:X86, 4096^2, one thread, load ~9: 24.4 ms in float -> 0.31 ms in the row lanes).
BYTE_MULTIPLY_TYPES: frozenset[GGMLType] = frozenset({GGMLType.TQ1_0})

# what else an integer path needs of the renderer to beat the float one (a ``Renderer`` flag), measured where it was
# missing (CPU:X86 before it had byte_table_lookups: byte dots, no gathers; 4096^2 GEMV, jitted, float / int time in
# one run, two runs, load ~7-10): IQ4_XS and MXFP4 look their values up in a 16-byte table, one byte shuffle per 32
# with ``byte_table_lookups`` (C, X86), else lane by lane: int 0.55-0.60x, 0.88-0.97x the float path's speed;
# IQ2_XS's grid rows are one load each where the renderer gathers (C), else lane by lane (X86): int 0.07x (the
# grid types: ``TABLE_ROW_TYPES``).
# IQ4_NL needs nothing more: without the shuffle its integer path was still 1.19-1.38x the float one (whose 16-float
# table lookup is lane by lane too without gathers). With the shuffle on X86 (same bench, load ~8): IQ4_NL 28.9x,
# IQ4_XS 15.3x, MXFP4 21.5x the float path (1.13, 1.80, 1.34 ms)
INT_DOT_NEEDS: dict[GGMLType, Callable[[Renderer], bool]] = {
    GGMLType.IQ4_XS: lambda r: r.byte_table_lookups, GGMLType.MXFP4: lambda r: r.byte_table_lookups,
    **{t: lambda r: r.gathers_table_rows for t in TABLE_ROW_TYPES},
    **{t: lambda r: r.multiplies_byte_vectors or r.row_lane_byte_dots for t in BYTE_MULTIPLY_TYPES}}


def uses_int_dot(type_id: GGMLType | int, device: str) -> bool:
    """Whether a matrix product with a weight of this type runs as integer dot products on ``device``: the type is
    in ``INT_DOT_TYPES``, the device's renderer compiles byte dot products and has what ``INT_DOT_NEEDS`` asks."""
    from tgcore.runtime.registry import open_device
    try:
        gtype = GGMLType(type_id)
    except ValueError:
        return False
    if gtype not in INT_DOT_TYPES:
        return False
    renderer = open_device(device).renderer
    if renderer is None or not renderer.compiles_byte_dots:  # (a device without a renderer: DISK)
        return False
    return gtype not in INT_DOT_NEEDS or INT_DOT_NEEDS[gtype](renderer)


def int_matmul(x: Tensor, raw: Tensor, type_id: GGMLType | int, shape: tuple[int, int]) -> Tensor:
    """``x @ W.T`` for ``x`` ``(..., K)`` and a quantized weight ``W`` of ``shape`` ``(N, K)`` (its raw bytes ``raw``),
    with ``x`` quantized to 8 bits per block of 32, or of 256 for the types in ``ACT_BLOCKS``
    (``quantize_activations``). Returns ``(..., N)`` float32."""
    gtype = check_supported(type_id)
    if gtype not in SUMS:
        raise ValueError(f"no integer dot product for {gtype.name} (types: {', '.join(t.name for t in SUMS)})")
    n, k = (int(s) for s in shape)
    block, block_bytes = BLOCK_LAYOUT[gtype]
    if k % block or raw.shape != (n * k // block * block_bytes,):
        raise ValueError(f"{gtype.name} weight of shape {shape} does not match {raw.shape[0]} bytes")
    if x.shape[-1] != k:
        raise ValueError(f"int_matmul: x has {x.shape[-1]} columns, the weight {k}")
    *lead, _ = x.shape
    m = 1
    for s in lead:
        m *= s
    xq, dx = quantize_activations(x.reshape(m, k), activation_block(gtype))
    value = SUMS[gtype](Operands(Blocks(raw, gtype), xq, dx, n, k))
    return value.reshape(m, n, -1).sum(-1).reshape(*lead, n)


@dataclass(frozen=True, eq=False)
class QuantizedMatrix:
    """A quantized ``(N, K)`` weight on a device: its raw bytes (or, built by ``from_host`` where the product takes
    it, only its row-lane form ``lanes``), ggml type and shape. ``matmul_t(x)`` is ``x @ W.T`` as integer dot
    products where ``uses_int_dot`` says so (and ``int_dot`` allows it), else the float product with the lazy
    dequantization (``dequantized``) fused in."""

    raw: Tensor | None  # None: the weight is held as ``lanes`` only
    gtype: GGMLType
    shape: tuple[int, int]
    name: str | None = None
    int_dot: bool = True  # False: always the float path (a reference without the activations' quantization)
    lanes: RowLanes | None = None

    @classmethod
    def from_host(cls, data: np.ndarray, gtype: GGMLType, shape: tuple[int, int], device: str,
                  name: str | None = None, int_dot: bool = True) -> QuantizedMatrix:
        """From the raw bytes in host memory (e.g. a view of the mapped file): where the products take the row-lane
        layout, that form only, repacked now (the device never holds the raw bytes: one copy of the weight; it can
        be larger than the file's, up to +22% for TQ1_0: the tg-gguf README lists them); else the raw bytes copied
        to the device."""
        from tg_gguf.lanes import repack, uses_row_lanes
        from tgcore.tensor import Tensor
        if int_dot and uses_int_dot(gtype, device) and uses_row_lanes(gtype, device, shape[1]):
            return cls(None, gtype, shape, name, int_dot, repack(data, gtype, shape, device, name))
        return cls(Tensor(data, device=device).realize(), gtype, shape, name, int_dot)

    @property
    def device(self) -> str:
        if self.raw is not None:
            return self.raw.device
        assert self.lanes is not None, "a QuantizedMatrix holds its raw bytes or its row lanes"
        return self.lanes.qs.device

    @property
    def dequantized(self) -> Tensor:
        """The lazy float32 dequantization ``(N, K)`` (fuses into its consumer)."""
        if self.raw is None:
            from tg_gguf import lanes
            assert self.lanes is not None
            return lanes.dequantize(self.lanes)
        from tg_gguf.dequant import dequantize
        return dequantize(self.raw, self.gtype, self.shape, name=self.name)

    @functools.cached_property
    def integer_path(self) -> bool:
        """Whether ``matmul_t`` runs as integer dot products (decided once)."""
        return self.int_dot and uses_int_dot(self.gtype, self.device)

    @functools.cached_property
    def row_lanes(self) -> RowLanes | None:
        """The weight with its rows in the vector lanes (``tg_gguf.lanes``): ``lanes``, or repacked once from the raw
        bytes where ``uses_row_lanes`` says so; else None."""
        from tg_gguf.lanes import repack, uses_row_lanes
        if self.lanes is not None:
            return self.lanes
        if self.raw is None or not (self.integer_path and uses_row_lanes(self.gtype, self.device, self.shape[1])):
            return None
        return repack(self.raw.numpy(), self.gtype, self.shape, self.device, self.name)

    def matmul_t(self, x: Tensor) -> Tensor:
        """``x @ W.T``: ``(..., K)`` -> ``(..., N)``."""
        if x.shape[-1] != self.shape[1]:
            name = f"{self.name!r} " if self.name else ""
            raise ValueError(f"weight {name}of shape {self.shape} multiplies (..., {self.shape[1]}) inputs, "
                             f"got {tuple(x.shape)}")
        if self.row_lanes is not None:
            from tg_gguf.lanes import row_lanes_matmul
            *lead, k = x.shape
            xq, dx = quantize_activations(x.reshape(-1, k))
            return row_lanes_matmul(xq, dx, self.row_lanes).reshape(*lead, self.shape[0])
        assert self.raw is not None
        if self.integer_path:
            return int_matmul(x, self.raw, self.gtype, self.shape)
        return x @ self.dequantized.T

"""Quantized matrix products as integer dot products: activations quantized to 8 bits per block of 32.

In:  activations ``x`` (a lazy float ``Tensor``, ``(..., K)``) and a quantized weight: its raw bytes (a 1-D uint8
     ``Tensor``), its ggml type and its ``(N, K)`` shape.
Out: ``x @ W.T`` (``(..., N)`` float32, lazy), where each block of 32 activations is first replaced by 8-bit
     integers and one float scale (``quantize_activations``), as llama.cpp's q8 path does.

How: a weight's integers are read as unsigned bytes ``u`` (a type's signed range shifted up: Q4_0's ``q - 8`` is
``u = q`` with offset ``-8``), so one block's contribution is

    dx * (scale * sum_i u_i * xq_i + offset * sum_i xq_i)

with ``scale`` and ``offset`` the weight's per-(sub-)block factors and ``dx`` the activation block's scale. Each
type below writes that sum as tensor ops over the weight's elements. The codegen takes it from there: it moves the
per-block factors out of the in-block sums and sums the byte products in int32
(``tgcore.codegen.upcast.factor_blocks``: exact, so the float and integer sums agree). On a renderer whose
compiler vectorizes byte dots (``Renderer.compiles_byte_dots``: the C renderer):

every type sums each block of 32 (a K-quant's sub-blocks of 32, ``_block32``) in the order ``[k, l]`` = element
``4l + k`` (``_by_lane``): vectorized by 8, lane ``l`` sums 4 neighbouring elements in int32 (one ``vpdpbusd`` per
block and row: ``tgcore.renderer.cbytedot``), scales it in its lane and keeps a float partial sum across blocks;
the lanes are added once per row, as llama.cpp's AVX2 ``ggml_vec_dot_q4_1_q8_1`` does. A K-quant's ``d`` leaves
the sum over its sub-blocks; the C compiler unrolls the 8 sub-blocks of a super-block, so their bit-field shifts
are constants.

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
from tg_gguf.dequant import Blocks, check_supported, iota, k_scales_mins, q2_k_scales, q3_k_scales, spread

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

ACT_BLOCK = 32   # activations share one scale per this many elements
ACT_MAX = 127.0  # the largest 8-bit activation
ROUNDING_MAGIC = 12582912.0      # 1.5 * 2**23
ROUNDING_MAGIC_BITS = 0x4B400000  # its float32 bits


def quantize_activations(x: Tensor) -> tuple[Tensor, Tensor]:
    """``x`` ``(..., K)`` float -> (``xq`` ``(..., K)`` int8, ``dx`` ``(..., K // 32)`` float32) with
    ``x ~ dx * xq`` per block of 32: ``dx = max|x| * float32(1 / 127)``, ``xq = round(x / dx)`` (to nearest, ties to
    even; an all-zero block has ``dx = 0``, ``xq = 0``). Two kernels: the block maxima scaled (a reduction), then
    the rounding; both results are buffers of their own (every weight row reads them)."""
    *lead, k = x.shape
    if k % ACT_BLOCK:
        raise ValueError(f"quantize_activations: the last dimension {k} is not a multiple of {ACT_BLOCK}")
    xb = x.cast("float32").reshape(*lead, k // ACT_BLOCK, ACT_BLOCK)
    dx = (xb.abs().max(-1, keepdim=True) * (1.0 / ACT_MAX)).contiguous()
    # round to nearest even by adding 1.5 * 2**23: the sum's low mantissa bits are then the rounded integer
    # (exact for |v| < 2**22; a float -> int conversion is rendered with range checks, this is two int ops)
    scaled = (dx > 0).where(xb / dx, 0.0)
    rounded = ((scaled + ROUNDING_MAGIC).bitcast("int32") - ROUNDING_MAGIC_BITS).cast("int8")
    return rounded.reshape(*lead, k).contiguous(), dx.reshape(*lead, k // ACT_BLOCK)


def _i32(t: Tensor) -> Tensor:
    return t.cast("int32")


def _f32(t: Tensor) -> Tensor:
    return t.cast("float32")


def _dot(u: Tensor, xq: Tensor) -> Tensor:
    """Unsigned weight bytes times int8 activations, as int32 (what a C compiler turns into ``vpdpbusd``)."""
    return _i32(u) * _i32(xq)


class Operands:
    """What a type's sum is built from: the weight's blocks seen as ``(N, blocks per row, block bytes)``, the
    quantized activations per weight block ``(M, 1, blocks per row, block)`` and their scales per 32
    ``(M, 1, blocks per row, block // 32)``."""

    def __init__(self, b: Blocks, xq: Tensor, dx: Tensor, n: int, k: int) -> None:
        block, _ = BLOCK_LAYOUT[b.gtype]
        self.b, self.n, self.nb = b, n, k // block
        m = xq.shape[0]
        self.xq = xq.reshape(m, 1, self.nb, block)
        self.dx = dx.reshape(m, 1, self.nb, block // ACT_BLOCK)

    def field(self, name: str) -> Tensor:
        """A field's bytes as ``(1, N, blocks per row, length)``."""
        t = self.b.bytes(name)
        return t.reshape(1, self.n, self.nb, t.shape[-1])

    def f16(self, name: str, ones: int = 1) -> Tensor:
        """A half field as ``(1, N, blocks per row)`` and ``ones`` axes of 1, float32."""
        return self.b.f16(name).reshape(1, self.n, self.nb, *(1,) * ones)

    def x(self, *shape: int) -> Tensor:
        """The block's activations reshaped to ``(M, 1, blocks per row, *shape)``."""
        return self.xq.reshape(*self.xq.shape[:3], *shape)

    def scale(self, *shape: int) -> Tensor:
        """The activation scales per 32 reshaped to ``(M, 1, blocks per row, *shape)``."""
        return self.dx.reshape(*self.dx.shape[:3], *shape)


def _by_lane(t: Tensor) -> Tensor:
    """``(..., 32)`` -> ``(..., 4, 8)`` with ``[k, l]`` = element ``4l + k``: summed in this order and vectorized by 8
    (``heuristic.BYTE_DOT_STEPS``), lane ``l`` sums 4 neighbouring elements, one multiply-add of 4 bytes
    (``vpdpbusd``) per block on a renderer that has it, and keeps its float partial sum across blocks."""
    return t.reshape(*t.shape[:-1], 8, 4).permute(*range(t.ndim - 1), t.ndim, t.ndim - 1)


def _block32(o: Operands, u: Tensor, scale: Tensor, offset: Tensor) -> Tensor:
    """Blocks of 32 elements: ``u`` ``(1, N, nb, S, 32)`` their unsigned integers in element order (``S`` blocks of 32
    per weight block), a scale and an offset per block of 32 ``(1, N, nb, S)``, or per ``G`` groups of ``32 / G``
    elements ``(1, N, nb, S, G)``. One product over each block, in lanes of 4 neighbouring elements (``_by_lane``:
    a group's lanes share its factors)."""
    subs = u.shape[3]
    x = _by_lane(o.x(subs, 32))
    dx = o.scale(subs, 1, 1)

    def per_lane(t: Tensor) -> Tensor:
        groups = t.shape[4] if t.ndim == 5 else 1
        t = t.reshape(1, o.n, o.nb, subs, 1, groups, 1).expand(1, o.n, o.nb, subs, 1, groups, 8 // groups)
        return t.reshape(1, o.n, o.nb, subs, 1, 8)
    return _f32(_dot(_by_lane(u), x)) * (per_lane(scale) * dx) + _f32(_i32(x)) * (dx * per_lane(offset))


def _nibbles(o: Operands) -> Tensor:
    """Q4/Q5: the 16 bytes' low nibbles (elements 0..15), then their high ones (16..31), ``(1, N, nb, 1, 32)``."""
    return spread(o.field("qs"), 3, 2, 4).reshape(1, o.n, o.nb, 1, 32)


def _q4_0(o: Operands) -> Tensor:
    d = o.f16("d")
    return _block32(o, _nibbles(o), d, d * -8.0)


def _q4_1(o: Operands) -> Tensor:
    return _block32(o, _nibbles(o), o.f16("d"), o.f16("m"))


def _fifth(o: Operands) -> Tensor:
    """Q5_0/Q5_1: bit j of the block's 32-bit ``qh`` (byte j // 8, bit j % 8) as 0 or 16 for element j,
    ``(1, N, nb, 32)`` uint8. With ``m = 1 << (j % 8)``, ``(byte & m) + (128 - m)`` has its top bit set exactly when
    the bit is: no shift by an amount that changes from lane to lane (x86 has none for bytes)."""
    qh = o.field("qh").reshape(1, o.n, o.nb, 4, 1)
    mask = iota((1, 1, 1, 1, 8), 4, qh.device, "uint8").full_like(1) << iota((1, 1, 1, 1, 8), 4, qh.device, "uint8")
    top = (qh & mask) + (mask.full_like(128) - mask)
    return ((top >> 3) & 16).reshape(1, o.n, o.nb, 1, 32)


def _q5_0(o: Operands) -> Tensor:
    d = o.f16("d")
    return _block32(o, _nibbles(o) | _fifth(o), d, d * -16.0)


def _q5_1(o: Operands) -> Tensor:
    return _block32(o, _nibbles(o) | _fifth(o), o.f16("d"), o.f16("m"))


def _q8_0(o: Operands) -> Tensor:
    d = o.f16("d")
    return _block32(o, (o.field("qs") ^ 0x80).reshape(1, o.n, o.nb, 1, 32), d, d * -128.0)  # u = q + 128


def _k_nibbles(o: Operands, fifth: bool) -> Tensor:
    """Q4_K/Q5_K: sub-block 2c + h (elements 64c + 32h + l) is nibble h of the 32 bytes c (chosen by masks: no
    shift by an amount that changes from block to block), plus for Q5_K bit 2c + h of ``qh[l]`` as 16; each a block
    of 32 (``_block32``), ``d`` and ``dmin`` per super-block, 6-bit scales and mins per sub-block."""
    sc, mn = k_scales_mins(o.b.bytes("scales"), o.b.n)
    scale = o.f16("d", 1) * _f32(sc).reshape(1, o.n, o.nb, 8)
    offset = o.f16("dmin", 1) * -1.0 * _f32(mn).reshape(1, o.n, o.nb, 8)
    qs = o.field("qs").reshape(1, o.n, o.nb, 4, 1, 32)
    high = iota((1, 1, 1, 1, 2, 1), 4, qs.device)
    u = ((qs & ((high.full_like(1) - high) * 15)) | ((qs >> 4) & (high * 15))).reshape(1, o.n, o.nb, 8, 32)
    if fifth:
        sub = iota((1, 1, 1, 8, 1), 3, qs.device)
        qh = o.field("qh").reshape(1, o.n, o.nb, 1, 32).expand(1, o.n, o.nb, 8, 32)
        u = u | (((qh >> sub) & 1) << 4)
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
    u = _two_bit_planes(o).reshape(1, o.n, o.nb, 8, 32) | (((hmask >> bit) & 1) << 2)
    return _block32(o, u, scale, scale * -4.0)


def _q6_k(o: Operands) -> Tensor:
    """Quarter j of half h (elements 128h + 32j + l) a block of 32 (``_block32``): the low 4 bits from nibble j // 2
    of ``ql[h, j % 2, l]``, the top 2 from bits 2j, 2j+1 of ``qh[h, l]``; scales per 16."""
    ql = o.field("ql").reshape(1, o.n, o.nb, 2, 1, 2, 32)  # (half, -, byte half, l)
    qh = o.field("qh").reshape(1, o.n, o.nb, 2, 1, 32)  # (half, -, l)
    nibble = iota((1, 1, 1, 1, 2, 1, 1), 4, ql.device)
    low = (ql.expand(1, o.n, o.nb, 2, 2, 2, 32) >> (nibble * 4)) & 15  # (half, nibble, byte half, l): j = 2n + b
    quarter = iota((1, 1, 1, 1, 4, 1), 4, qh.device)
    top = ((qh.expand(1, o.n, o.nb, 2, 4, 32) >> (quarter * 2)) & 3) << 4
    u = low.reshape(1, o.n, o.nb, 2, 4, 32) | top  # q + 32
    scale = o.f16("d") * _f32(o.field("scales").bitcast("int8"))
    scale = scale.reshape(1, o.n, o.nb, 8, 2)
    return _block32(o, u.reshape(1, o.n, o.nb, 8, 32), scale, scale * -32.0)


def _tq2_0(o: Operands) -> Tensor:
    """TQ2_0: the 2-bit planes of Q2_K (quarter j of half h from bits 2j, 2j+1 of ``qs[h, l]``), ``q = u - 1``, one
    scale per 256; each quarter a block of 32 (``_block32``)."""
    d = o.f16("d", 1).expand(1, o.n, o.nb, 8)
    return _block32(o, _two_bit_planes(o).reshape(1, o.n, o.nb, 8, 32), d, d * -1.0)


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
    GGMLType.TQ2_0: _tq2_0,
}

# the types whose integer path is faster than the float one on a renderer that compiles byte dots (GEMVs of SmolLM2's
# shapes, jitted, int / float time in one process, alternating, load ~9-13): Q4_0 1.25-1.37x, Q4_1 1.27-1.33x,
# Q5_0 1.38-1.45x, Q5_1 1.35-1.40x, Q8_0 1.16-1.20x, Q2_K 1.82-1.84x, Q3_K 2.21-2.29x, Q4_K 2.12-2.21x,
# Q5_K 2.26-2.30x, Q6_K 2.35-2.45x. TQ2_0 (32-byte planes, one scale per 256; 4096^2 GEMV): 1.5x (CPU time
# 1.59-1.62 -> 1.03-1.06 ms, load ~10).
INT_DOT_TYPES: frozenset[GGMLType] = frozenset({GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1,
                                                GGMLType.Q8_0, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K,
                                                GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.TQ2_0})


def uses_int_dot(type_id: GGMLType | int, device: str) -> bool:
    """Whether a matrix product with a weight of this type runs as integer dot products on ``device``: the type is
    in ``INT_DOT_TYPES`` and the device's renderer compiles byte dot products."""
    from tgcore.runtime.registry import open_device
    try:
        gtype = GGMLType(type_id)
    except ValueError:
        return False
    return gtype in INT_DOT_TYPES and bool(getattr(open_device(device).renderer, "compiles_byte_dots", False))


def int_matmul(x: Tensor, raw: Tensor, type_id: GGMLType | int, shape: tuple[int, int]) -> Tensor:
    """``x @ W.T`` for ``x`` ``(..., K)`` and a quantized weight ``W`` of ``shape`` ``(N, K)`` (its raw bytes ``raw``),
    with ``x`` quantized to 8 bits per block of 32 (``quantize_activations``). Returns ``(..., N)`` float32."""
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
    xq, dx = quantize_activations(x.reshape(m, k))
    value = SUMS[gtype](Operands(Blocks(raw, gtype), xq, dx, n, k))
    return value.reshape(m, n, -1).sum(-1).reshape(*lead, n)


@dataclass(frozen=True, eq=False)
class QuantizedMatrix:
    """A quantized ``(N, K)`` weight on a device: its raw bytes, ggml type and shape. ``matmul_t(x)`` is ``x @ W.T``
    as integer dot products where ``uses_int_dot`` says so (and ``int_dot`` allows it), else the float product with
    the lazy dequantization (``dequantized``) fused in."""

    raw: Tensor
    gtype: GGMLType
    shape: tuple[int, int]
    name: str | None = None
    int_dot: bool = True  # False: always the float path (a reference without the activations' quantization)

    @property
    def dequantized(self) -> Tensor:
        """The lazy float32 dequantization ``(N, K)`` (fuses into its consumer)."""
        from tg_gguf.dequant import dequantize
        return dequantize(self.raw, self.gtype, self.shape, name=self.name)

    @functools.cached_property
    def integer_path(self) -> bool:
        """Whether ``matmul_t`` runs as integer dot products (decided once)."""
        return self.int_dot and uses_int_dot(self.gtype, self.raw.device)

    def matmul_t(self, x: Tensor) -> Tensor:
        """``x @ W.T``: ``(..., K)`` -> ``(..., N)``."""
        if self.integer_path:
            return int_matmul(x, self.raw, self.gtype, self.shape)
        return x @ self.dequantized.T

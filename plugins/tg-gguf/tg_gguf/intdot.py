"""Quantized matrix products as integer dot products: activations quantized to 8 bits per block of 32.

In:  activations ``x`` (a lazy float ``Tensor``, ``(..., K)``) and a quantized weight: its raw bytes (a 1-D uint8
     ``Tensor``), its ggml type and its ``(N, K)`` shape.
Out: ``x @ W.T`` (``(..., N)`` float32, lazy), where each block of 32 activations is first replaced by 8-bit
     integers and one float scale (``quantize_activations``), as llama.cpp's q8 path does.

How: a weight's integers are read as unsigned bytes ``u`` (a type's signed range shifted up: Q4_0's ``q - 8`` is
``u = q`` with offset ``-8``), so one block's contribution is

    dx * (scale * sum_i u_i * xq_i + offset * sum_i xq_i)

with ``scale`` and ``offset`` the weight's per-(sub-)block factors and ``dx`` the activation block's scale. Each
type below writes that sum as tensor ops over the weight's elements in the order its bytes hold them. The
codegen takes it from there: it moves the per-block factors out of the in-block sums and sums the byte products
in int32 (``tgcore.codegen.upcast.factor_blocks``: exact, so the float and integer sums agree), and on a renderer
whose compiler vectorizes such loops (``Renderer.compiles_byte_dots``: the C renderer) leaves them scalar for
gcc or clang to turn into multiply-adds of bytes (``vpdpbusd`` with AVX-VNNI, ``vpmaddubsw`` on AVX2).

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


def _halves(o: Operands, lo: Tensor, hi: Tensor, scale: Tensor, offset: Tensor) -> Tensor:
    """A 32-element block whose 16 bytes hold elements ``l`` (``lo``) and ``16 + l`` (``hi``), one scale/offset."""
    x = o.x(2, 16)
    xl, xh = x[..., 0, :], x[..., 1, :]
    dx = o.scale(1)
    # one product per conversion: each becomes an int32 accumulator of its own (a loop gcc turns into vpdpbusd)
    return ((_f32(_dot(lo, xl)) + _f32(_dot(hi, xh))) * (scale * dx)
            + (_f32(_i32(xl)) + _f32(_i32(xh))) * (offset * dx))


def _q4_0(o: Operands) -> Tensor:
    qs, d = o.field("qs"), o.f16("d")
    return _halves(o, qs & 15, qs >> 4, d, d * -8.0)


def _q4_1(o: Operands) -> Tensor:
    qs = o.field("qs")
    return _halves(o, qs & 15, qs >> 4, o.f16("d"), o.f16("m"))


def _fifth(o: Operands) -> tuple[Tensor, Tensor]:
    """Q5_0/Q5_1: the fifth bits of elements ``l`` and ``16 + l``, as 0 or 16 (uint8, ``(1, N, nb, 16)``)."""
    qh = o.b.uint("qh").reshape(1, o.n, o.nb)
    bits = spread(qh, 3, 32, 1).cast("uint8") << 4  # (1, N, nb, 32): bit j for element j
    return bits[..., :16], bits[..., 16:]


def _q5_0(o: Operands) -> Tensor:
    qs, d = o.field("qs"), o.f16("d")
    hl, hh = _fifth(o)
    return _halves(o, (qs & 15) | hl, (qs >> 4) | hh, d, d * -16.0)


def _q5_1(o: Operands) -> Tensor:
    qs = o.field("qs")
    hl, hh = _fifth(o)
    return _halves(o, (qs & 15) | hl, (qs >> 4) | hh, o.f16("d"), o.f16("m"))


def _q8_0(o: Operands) -> Tensor:
    d, x, dx = o.f16("d"), o.x(32), o.scale(1)
    u = o.field("qs") ^ 0x80  # q + 128
    return _f32(_dot(u, x)) * (d * dx) + _f32(_i32(x)) * (d * -128.0 * dx)


def _planes(o: Operands, planes: list[tuple[Tensor, Tensor, Tensor, Tensor, Tensor]]) -> Tensor:
    """The sum over several planes of a block, each ``(u, x, scale, offset, dx)`` of broadcastable shapes, read
    with constant shifts in the same loop over bytes (a shift by an amount that changes from one sub-block to the
    next is taken apart by the C compiler: x86 has no byte shifts): one int32 accumulator per plane and row."""
    out = None
    for u, x, scale, offset, dx in planes:
        term = _f32(_dot(u, x)) * (scale * dx) + _f32(_i32(x)) * (offset * dx)
        out = term if out is None else out + term
    assert out is not None
    return out


def _bit(byte: Tensor, index: Tensor) -> Tensor:
    """Bit ``index`` of each byte as 0 or 1 (uint8), by a mask: ``index`` changes per sub-block only, so the mask is
    computed once per sub-block and the loop over bytes has no variable shift."""
    return ((byte & (index.full_like(1) << index)) != 0).cast("uint8")


def _k_nibble_planes(o: Operands, high_bits: Tensor | None) -> list[Tensor]:
    """Q4_K/Q5_K: per 64 elements (``(1, N, nb, 4, 32)``) the low nibbles (sub-block 2c) and the high ones (2c+1),
    with the fifth bits of Q5_K (``high_bits``: qh ``(1, N, nb, 1, 32)``, bit i for sub-block i)."""
    qs = o.field("qs").reshape(1, o.n, o.nb, 4, 32)
    planes = [qs & 15, qs >> 4]
    if high_bits is None:
        return planes
    chunk = iota((1, 1, 1, 4, 1), 3, qs.device)
    return [p | (_bit(high_bits, chunk * 2 + h) << 4) for h, p in enumerate(planes)]


def _k_nibbles(o: Operands, high_bits: Tensor | None) -> Tensor:
    sc, mn = k_scales_mins(o.b.bytes("scales"), o.b.n)
    d, dmin = o.f16("d", 3), o.f16("dmin", 3)
    scale = (d * _f32(sc).reshape(1, o.n, o.nb, 4, 2, 1))
    offset = (dmin * -1.0 * _f32(mn).reshape(1, o.n, o.nb, 4, 2, 1))
    x, dx = o.x(4, 2, 32), o.scale(4, 2, 1)
    planes = _k_nibble_planes(o, high_bits)
    return _planes(o, [(planes[h], x[..., h, :], scale[..., h, :], offset[..., h, :], dx[..., h, :])
                       for h in range(2)])


def _q4_k(o: Operands) -> Tensor:
    return _k_nibbles(o, None)


def _q5_k(o: Operands) -> Tensor:
    return _k_nibbles(o, o.field("qh").reshape(1, o.n, o.nb, 1, 32))


def _quarters(o: Operands, u: list[Tensor], scale: Tensor, offset: Tensor) -> Tensor:
    """Q2_K/Q3_K/Q6_K: per 128 elements (half h) 4 quarters j of 32, ``u[j]`` ``(1, N, nb, 2, 32)``; sub-blocks of
    16 with ``scale`` and ``offset`` ``(1, N, nb, 16)`` (sub-block 8h + 2j + l // 16)."""
    x = o.x(2, 4, 2, 16)
    dx = o.scale(2, 4, 1, 1)
    scale = scale.reshape(1, o.n, o.nb, 2, 4, 2, 1)
    offset = offset.reshape(1, o.n, o.nb, 2, 4, 2, 1)
    return _planes(o, [(u[j].reshape(1, o.n, o.nb, 2, 2, 16), x[..., j, :, :], scale[..., j, :, :],
                        offset[..., j, :, :], dx[..., j, :, :]) for j in range(4)])


def _two_bit_planes(o: Operands) -> list[Tensor]:
    """Q2_K/Q3_K: per 32 bytes (half h) the 4 two-bit planes j (elements 128h + 32j + l), ``(1, N, nb, 2, 32)``."""
    qs = o.field("qs").reshape(1, o.n, o.nb, 2, 32)
    return [(qs >> (2 * j)) & 3 for j in range(4)]


def _q2_k(o: Operands) -> Tensor:
    sc, mn = q2_k_scales(o.b.bytes("scales"))
    scale = o.f16("d") * _f32(sc).reshape(1, o.n, o.nb, 16)
    offset = o.f16("dmin") * -1.0 * _f32(mn).reshape(1, o.n, o.nb, 16)
    return _quarters(o, _two_bit_planes(o), scale, offset)


def _q3_k(o: Operands) -> Tensor:
    scale = o.f16("d") * _f32(q3_k_scales(o.b.bytes("scales"), o.b.n)).reshape(1, o.n, o.nb, 16)
    hmask = o.field("hmask").reshape(1, o.n, o.nb, 1, 32)  # bit 4h + j of hmask[l]: element 128h + 32j + l
    half = iota((1, 1, 1, 2, 1), 3, hmask.device)
    u = [p | (_bit(hmask, half * 4 + j) << 2) for j, p in enumerate(_two_bit_planes(o))]  # q + 4
    return _quarters(o, u, scale, scale * -4.0)


def _q6_k(o: Operands) -> Tensor:
    ql = o.field("ql").reshape(1, o.n, o.nb, 2, 2, 32)  # (half, byte half, l): quarter j = 2 * nibble + byte half
    qh = o.field("qh").reshape(1, o.n, o.nb, 2, 32)  # (half, l): bits 2j, 2j+1 for quarter j
    u = [((ql[..., j % 2, :] >> (4 * (j // 2))) & 15) | (((qh >> (2 * j)) & 3) << 4) for j in range(4)]  # q + 32
    scale = o.f16("d") * _f32(o.field("scales").bitcast("int8"))
    return _quarters(o, u, scale, scale * -32.0)


def _tq2_0(o: Operands) -> Tensor:
    """TQ2_0: per 32 bytes (half h) 4 two-bit planes j (elements 128h + 32j + l), ``q = u - 1``, one scale per 256."""
    qs = o.field("qs").reshape(1, o.n, o.nb, 2, 32)
    d = o.f16("d", 2)
    x, dx = o.x(2, 4, 32), o.scale(2, 4, 1)
    return _planes(o, [((qs >> (2 * j)) & 3, x[..., j, :], d, d * -1.0, dx[..., j, :]) for j in range(4)])


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

# the types whose integer path is faster than the float one on a renderer that compiles byte dots (4096^2 GEMV,
# plugins/tg-gguf/bench/gguf.py, jitted int / float time, one run at load ~9-13: Q8_0 1.02x, Q2_K 1.15x,
# Q3_K 1.34x, Q4_K 1.29x, Q5_K 1.93x, Q6_K 1.38x). The 32-element types are not (Q4_0 0.96x, Q4_1 0.83x,
# Q5_0 0.36x, Q5_1 0.35x): a block's byte dot is 16 bytes (two nibble planes) whose int32 accumulators are summed
# across lanes every block, which costs what the float path's per-element work does; Q5's fifth bits are
# per-lane variable shifts. TQ2_0 (32-byte planes, one scale per 256): 1.5x (CPU time 1.59-1.62 -> 1.03-1.06 ms,
# load ~10).
INT_DOT_TYPES: frozenset[GGMLType] = frozenset({GGMLType.Q8_0, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K,
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

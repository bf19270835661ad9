"""Reference dequantization in numpy: raw ggml bytes in, a float32 array out.

This is the slow, obviously-correct version; the tensor-op dequantization that runs on devices
is ``tg_gguf.dequant`` (both are checked against gguf-py). Each function takes the blocks as a
``(n_blocks, block_bytes)`` uint8 array and returns ``(n_blocks, block_elements)`` float32;
arithmetic is done in float32 in the order ggml defines (``q * d`` then ``+ m``), so results are
bit-exact.

Block layouts (all little-endian, ``f16`` = IEEE half):

- Q4_0: ``d: f16, qs: u8[16]``; element j is ``(qs[j] & 15) - 8``, element j+16 is ``(qs[j] >> 4) - 8``; times d.
- Q4_1: ``d: f16, m: f16, qs: u8[16]``; nibbles as Q4_0 but unsigned; ``q * d + m``.
- Q5_0: ``d: f16, qh: u32, qs: u8[16]``; bit j of qh is the 5th bit of element j; ``(q - 16) * d``.
- Q5_1: ``d: f16, m: f16, qh: u32, qs: u8[16]``; as Q5_0 but unsigned; ``q * d + m``.
- Q8_0: ``d: f16, qs: i8[32]``; ``qs * d``.

K-quants use 256-element super-blocks of 8 (Q4_K, Q5_K: 32 elements) or 16 (Q6_K) sub-blocks:

- Q4_K: ``d: f16, dmin: f16, scales: u8[12], qs: u8[128]``; 8 six-bit scales and mins packed in
  ``scales``; each 32 bytes of qs hold two sub-blocks (low nibbles, then high nibbles);
  element = ``(d * sc) * q - dmin * m``.
- Q5_K: as Q4_K plus ``qh: u8[32]`` before qs; bit i of qh[l] is the 5th bit of element l of sub-block i.
- Q6_K: ``ql: u8[128], qh: u8[64], scales: i8[16], d: f16``; 6-bit values (4 from ql, 2 from qh)
  minus 32; element = ``(d * scale) * q``; each 128-element half uses 64 bytes of ql and 32 of qh.

I-quants (grid types) pick 4 or 8 values at once from a constant grid (``tg_gguf.iq_grids``) with one index;
signs come as 8 bits per 8 values (IQ2_S, IQ3_S) or as a 7-bit index into ``ksigns`` (8 bits whose 8th makes
the count of set bits even). Scales are 4 (3 for IQ1) bits per 16 or 32 elements:

- IQ2_XXS: ``d: f16, qs: u32[64]`` as 8 pairs per 32 elements: 4 grid bytes, then 4 seven-bit sign indices
  and a 4-bit scale ``s`` (top bits); element = ``d * (0.5 + s) * 0.25 * grid * sign``.
- IQ2_XS: ``d: f16, qs: u16[32]`` (9-bit grid index, 7-bit sign index), ``scales: u8[8]`` (a nibble per 16).
- IQ2_S: ``d: f16, qs: u8[32], signs: u8[32], qh: u8[8]`` (2 more index bits per 8), ``scales: u8[8]``.
- IQ3_XXS: ``d: f16, qs: u8[64]`` (an index per 4 values), ``u32[8]`` signs and scale as IQ2_XXS; ``* 0.5``.
- IQ3_S: ``d: f16, qs: u8[64], qh: u8[8]`` (9th index bit), ``signs: u8[32], scales: u8[4]``;
  element = ``d * (1 + 2 * s) * grid * sign``.
- IQ1_S: ``d: f16, qs: u8[32], qh: u16[8]``: per 32 elements 4 x 3 more index bits, a 3-bit scale and a
  delta sign (bit 15); element = ``d * (2 * s + 1) * (grid + delta)``, ``delta = -+0.125``.
- IQ1_M: ``qs: u8[32], qh: u8[16]`` (a nibble per 8: 3 index bits and the delta sign), ``scales: u16[4]``
  holding 16 three-bit scales and, in their top nibbles, the f16 ``d``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import numpy as np

from tg_gguf import iq_grids
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType

F32 = np.float32


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The f16 at byte ``start`` of each block, as a float32 column."""
    return blocks[:, start:start + 2].copy().view("<f2").astype(F32)


def _u32(blocks: np.ndarray, start: int) -> np.ndarray:
    return blocks[:, start:start + 4].copy().view("<u4")


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """16 bytes per block -> 32 values: low nibbles first, then high nibbles."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """A u32 per block -> its 32 bits as 0/16 values, bit j for element j."""
    return (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)


def _q4_0(b: np.ndarray) -> np.ndarray:
    d = _f16(b, 0)
    q = _nibbles(b[:, 2:18]).astype(np.int8) - np.int8(8)
    return q.astype(F32) * d


def _q4_1(b: np.ndarray) -> np.ndarray:
    d, m = _f16(b, 0), _f16(b, 2)
    q = _nibbles(b[:, 4:20])
    return q.astype(F32) * d + m


def _q5_0(b: np.ndarray) -> np.ndarray:
    d = _f16(b, 0)
    q = (_nibbles(b[:, 6:22]) | _fifth_bits(_u32(b, 2))).astype(np.int8) - np.int8(16)
    return q.astype(F32) * d


def _q5_1(b: np.ndarray) -> np.ndarray:
    d, m = _f16(b, 0), _f16(b, 2)
    q = _nibbles(b[:, 8:24]) | _fifth_bits(_u32(b, 4))
    return q.astype(F32) * d + m


def _q8_0(b: np.ndarray) -> np.ndarray:
    d = _f16(b, 0)
    return b[:, 2:34].view(np.int8).astype(F32) * d


def _k_scales_mins(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """12 bytes per super-block -> 8 six-bit scales and 8 six-bit mins (each (n, 8) uint8)."""
    s = scales
    sc = np.empty((s.shape[0], 8), dtype=np.uint8)
    mn = np.empty((s.shape[0], 8), dtype=np.uint8)
    sc[:, :4] = s[:, 0:4] & 63
    mn[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


def _k_nibbles(qs: np.ndarray) -> np.ndarray:
    """128 bytes -> 8 sub-blocks of 32 values: per 32 bytes, low nibbles then high nibbles."""
    q = qs.reshape(-1, 4, 1, 32)
    return np.concatenate([q & 0x0F, q >> 4], axis=2).reshape(-1, 8, 32)


def _k_apply(d: np.ndarray, dmin: np.ndarray, sc: np.ndarray, mn: np.ndarray, q: np.ndarray) -> np.ndarray:
    scale = (d * sc.astype(F32))[:, :, None]
    offset = (dmin * mn.astype(F32))[:, :, None]
    return (scale * q.astype(F32) - offset).reshape(-1, 256)


def _q4_k(b: np.ndarray) -> np.ndarray:
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, mn = _k_scales_mins(b[:, 4:16])
    return _k_apply(d, dmin, sc, mn, _k_nibbles(b[:, 16:144]))


def _q5_k(b: np.ndarray) -> np.ndarray:
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, mn = _k_scales_mins(b[:, 4:16])
    qh = b[:, 16:48]
    high = ((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4  # (n, 8 sub-blocks, 32)
    return _k_apply(d, dmin, sc, mn, _k_nibbles(b[:, 48:176]) | high)


def _q6_k(b: np.ndarray) -> np.ndarray:
    ql, qh = b[:, 0:128].reshape(-1, 2, 64), b[:, 128:192].reshape(-1, 2, 1, 32)
    scales = b[:, 192:208].view(np.int8).astype(F32)
    d = _f16(b, 208)
    low = np.stack([ql[:, :, :32] & 0x0F, ql[:, :, 32:] & 0x0F, ql[:, :, :32] >> 4, ql[:, :, 32:] >> 4], axis=2)
    high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]) & 3
    q = (low | (high << 4)).astype(np.int8) - np.int8(32)  # (n, 2 halves, 4 quarters, 32)
    scale = (d * scales).reshape(-1, 2, 4, 2, 1)  # 16 scales of 16 elements: half, quarter, 2 per quarter
    return (scale * q.reshape(-1, 2, 4, 2, 16).astype(F32)).reshape(-1, 256)


@cache
def grid(name: str) -> np.ndarray:
    """The grid ``name`` of ``tg_gguf.iq_grids`` (e.g. ``"IQ2XXS"``) as a float32 ``(entries, values)`` array."""
    values = np.array(getattr(iq_grids, f"{name}_VALUES"), dtype=F32)
    bits = getattr(iq_grids, f"{name}_BITS")
    codes = np.array(getattr(iq_grids, f"{name}_CODES"), dtype=np.uint32)
    width = 8 if len(values) < 4 else 4
    shifts = np.arange(width, dtype=np.uint32) * bits
    return values[(codes[:, None] >> shifts) & ((1 << bits) - 1)]


def ksigns(index: np.ndarray) -> np.ndarray:
    """The sign byte of a 7-bit sign index: the index plus an 8th bit that makes the count of set bits even."""
    parity = np.zeros_like(index)
    for k in range(7):
        parity ^= (index >> k) & 1
    return index | (parity << 7)


def _sign_bits(signs: np.ndarray, n: int) -> np.ndarray:
    """Sign bytes -> +-1.0 per bit (bit j of byte i for element 8i + j), ``(n, 8 * bytes)``."""
    bits = (signs.reshape(n, -1, 1) >> np.arange(8, dtype=signs.dtype)) & 1
    return np.where(bits == 0, F32(1), F32(-1)).reshape(n, -1)


def _half_scales(d: np.ndarray, nibbles: np.ndarray, step: float) -> np.ndarray:
    """``d * (0.5 + s) * step`` for 4-bit scales ``s`` (IQ2, IQ3_XXS)."""
    return d * (F32(0.5) + nibbles.astype(F32)) * F32(step)


def _u32s(b: np.ndarray, start: int, count: int) -> np.ndarray:
    return b[:, start:start + 4 * count].copy().view("<u4")


def _xxs(d: np.ndarray, idx: np.ndarray, aux: np.ndarray, table: str, step: float) -> np.ndarray:
    """IQ2_XXS / IQ3_XXS: grid indices ``idx`` and, per 32 elements, a u32 ``aux`` of 4 sign indices and a scale."""
    n = idx.shape[0]
    db = _half_scales(d, aux >> 28, step)  # (n, 8)
    sign_idx = (aux[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 0x7F
    signs = _sign_bits(ksigns(sign_idx).astype(np.uint8), n).reshape(n, 8, 32)
    values = grid(table)[idx].reshape(n, 8, 32)
    return (db[:, :, None] * values * signs).reshape(n, 256)


def _iq2_xxs(b: np.ndarray) -> np.ndarray:
    pairs = b[:, 2:66].reshape(-1, 8, 8)  # per 32 elements: 4 grid bytes, then the u32 of signs and scale
    aux = pairs[:, :, 4:].copy().view("<u4").reshape(-1, 8)
    return _xxs(_f16(b, 0), pairs[:, :, :4].reshape(-1, 32), aux, "IQ2XXS", 0.25)


def _iq3_xxs(b: np.ndarray) -> np.ndarray:
    return _xxs(_f16(b, 0), b[:, 2:66], _u32s(b, 66, 8), "IQ3XXS", 0.5)


def _nibble_scales(scales: np.ndarray) -> np.ndarray:
    """Bytes of two 4-bit scales each -> the scales, low nibble first."""
    return np.stack([scales & 0x0F, scales >> 4], axis=2).reshape(scales.shape[0], -1)


def _iq2_xs(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    d = _f16(b, 0)
    qs = b[:, 2:66].copy().view("<u2")  # (n, 32)
    db = _half_scales(d, _nibble_scales(b[:, 66:74]), 0.25)  # (n, 16): one per 16 elements
    signs = _sign_bits(ksigns(qs >> 9).astype(np.uint8), n)
    values = grid("IQ2XS")[qs & 511].reshape(n, 256)
    return (np.repeat(db, 16, axis=1) * values * signs).reshape(n, 256)


def _high_bits(qh: np.ndarray, bits: int) -> np.ndarray:
    """Bytes holding ``8 // bits`` fields of ``bits`` bits each -> the fields, lowest first (uint16)."""
    n = qh.shape[0]
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    return ((qh[:, :, None] >> shifts) & ((1 << bits) - 1)).astype(np.uint16).reshape(n, -1)


def _iq2_s(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    d = _f16(b, 0)
    idx = b[:, 2:34].astype(np.uint16) | (_high_bits(b[:, 66:74], 2) << 8)  # (n, 32)
    db = _half_scales(d, _nibble_scales(b[:, 74:82]), 0.25)
    signs = _sign_bits(b[:, 34:66], n)
    values = grid("IQ2S")[idx].reshape(n, 256)
    return (np.repeat(db, 16, axis=1) * values * signs).reshape(n, 256)


def _iq3_s(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    d = _f16(b, 0)
    idx = b[:, 2:66].astype(np.uint16) | (_high_bits(b[:, 66:74], 1) << 8)  # (n, 64)
    db = d * (1 + 2 * _nibble_scales(b[:, 106:110])).astype(F32)  # (n, 8): one per 32 elements
    signs = _sign_bits(b[:, 74:106], n)
    values = grid("IQ3S")[idx].reshape(n, 256)
    return (np.repeat(db, 32, axis=1) * values * signs).reshape(n, 256)


IQ1_DELTA = F32(0.125)


def _iq1(dl: np.ndarray, idx: np.ndarray, negative: np.ndarray, per_scale: int) -> np.ndarray:
    """``dl * (grid + delta)``: ``dl`` one per ``per_scale`` elements, ``idx``/``negative`` one per 8."""
    n = idx.shape[0]
    delta = np.where(negative, -IQ1_DELTA, IQ1_DELTA)
    values = grid("IQ1S")[idx] + delta[:, :, None]
    return (np.repeat(dl, per_scale, axis=1) * values.reshape(n, 256)).reshape(n, 256)


def _iq1_s(b: np.ndarray) -> np.ndarray:
    d = _f16(b, 0)
    qh = b[:, 34:50].copy().view("<u2")  # (n, 8): one per 32 elements
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7
    idx = b[:, 2:34].astype(np.uint16) | (high.reshape(-1, 32) << 8)
    dl = d * (2 * ((qh >> 12) & 7) + 1).astype(F32)
    negative = np.repeat((qh & 0x8000) != 0, 4, axis=1)
    return _iq1(dl, idx, negative, 32)


def _iq1_m(b: np.ndarray) -> np.ndarray:
    n = b.shape[0]
    sc = b[:, 48:56].copy().view("<u2")  # (n, 4)
    top = sc >> 12
    d_bits = top[:, 0] | (top[:, 1] << 4) | (top[:, 2] << 8) | (top[:, 3] << 12)
    d = d_bits.astype("<u2").view("<f2").astype(F32).reshape(n, 1)
    scales = ((sc[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7).reshape(n, 16)
    dl = d * (2 * scales + 1).astype(F32)  # one per 16 elements
    nib = _high_bits(b[:, 32:48], 4)  # (n, 32): one per 8 elements
    idx = b[:, 0:32].astype(np.uint16) | ((nib & 7) << 8)
    return _iq1(dl, idx, (nib & 8) != 0, 16)


def _f32(b: np.ndarray) -> np.ndarray:
    return b.copy().view("<f4").astype(F32)


def _f16_plain(b: np.ndarray) -> np.ndarray:
    return b.copy().view("<f2").astype(F32)


def _bf16(b: np.ndarray) -> np.ndarray:
    """bfloat16 is the top half of a float32."""
    return (b.copy().view("<u2").astype(np.uint32) << 16).view(F32)


DEQUANTIZERS: dict[GGMLType, Callable[[np.ndarray], np.ndarray]] = {
    GGMLType.F32: _f32,
    GGMLType.F16: _f16_plain,
    GGMLType.BF16: _bf16,
    GGMLType.Q4_0: _q4_0,
    GGMLType.Q4_1: _q4_1,
    GGMLType.Q5_0: _q5_0,
    GGMLType.Q5_1: _q5_1,
    GGMLType.Q8_0: _q8_0,
    GGMLType.Q4_K: _q4_k,
    GGMLType.Q5_K: _q5_k,
    GGMLType.Q6_K: _q6_k,
    GGMLType.IQ2_XXS: _iq2_xxs,
    GGMLType.IQ2_XS: _iq2_xs,
    GGMLType.IQ2_S: _iq2_s,
    GGMLType.IQ3_XXS: _iq3_xxs,
    GGMLType.IQ3_S: _iq3_s,
    GGMLType.IQ1_S: _iq1_s,
    GGMLType.IQ1_M: _iq1_m,
}


def row_dequantizer(type: GGMLType | int, row_len: int,
                    what: str = "") -> tuple[Callable[[np.ndarray], np.ndarray], int]:
    """(dequantize, row bytes) for rows of ``row_len`` values of ggml type ``type``, checked once here:
    ``dequantize(raw)`` turns whole rows of bytes (a uint8 array (rows, row bytes)) into float32 (rows, row_len).
    ``what`` names the rows in the error for a ``row_len`` that is no whole number of blocks."""
    gtype = GGMLType(type)
    fn = DEQUANTIZERS.get(gtype)
    if fn is None:
        supported = ", ".join(t.name for t in DEQUANTIZERS)
        raise NotImplementedError(f"dequantization of {gtype.name} is not implemented yet (supported: {supported})")
    block, block_bytes = BLOCK_LAYOUT[gtype]
    if row_len % block:
        raise ValueError(f"{what or f'a row of {row_len} values'} is not a multiple of the {gtype.name} block size "
                         f"{block}")

    def dequantize(raw: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):  # inf/nan scales give inf/nan, as in ggml
            return fn(raw.reshape(-1, block_bytes)).reshape(raw.shape[0], row_len)
    return dequantize, row_len // block * block_bytes


def dequantize_numpy(type: GGMLType | int, raw: bytes | memoryview | np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Dequantize ``raw`` (the bytes of a tensor of ggml type ``type``) to float32 of ``shape`` (numpy order)."""
    shape = tuple(int(s) for s in shape)
    n = 1
    for s in shape:
        n *= s
    row_len = shape[-1] if shape else 1
    dequantize, row_bytes = row_dequantizer(type, row_len, f"last dimension of shape {shape}")
    data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1).view(np.uint8)
    rows = n // row_len if row_len else 0
    expected = rows * row_bytes
    if data.size != expected:
        raise ValueError(f"{GGMLType(type).name} tensor of shape {shape} needs {expected} bytes, got {data.size}")
    return dequantize(data.reshape(rows, row_bytes)).reshape(shape)

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
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

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
}


def dequantize_numpy(type: GGMLType | int, raw: bytes | memoryview | np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Dequantize ``raw`` (the bytes of a tensor of ggml type ``type``) to float32 of ``shape`` (numpy order)."""
    gtype = GGMLType(type)
    fn = DEQUANTIZERS.get(gtype)
    if fn is None:
        supported = ", ".join(t.name for t in DEQUANTIZERS)
        raise NotImplementedError(f"dequantization of {gtype.name} is not implemented yet (supported: {supported})")
    block, block_bytes = BLOCK_LAYOUT[gtype]
    shape = tuple(int(s) for s in shape)
    n = 1
    for s in shape:
        n *= s
    if (shape[-1] if shape else 1) % block:
        raise ValueError(f"last dimension of shape {shape} is not a multiple of the {gtype.name} block size {block}")
    data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1).view(np.uint8)
    expected = n // block * block_bytes
    if data.size != expected:
        raise ValueError(f"{gtype.name} tensor of shape {shape} needs {expected} bytes, got {data.size}")
    with np.errstate(invalid="ignore", over="ignore"):  # inf/nan scales give inf/nan, as in ggml
        out = fn(data.reshape(n // block, block_bytes))
    return out.reshape(shape)

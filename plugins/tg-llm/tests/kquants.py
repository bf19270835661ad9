"""A writer-side quantizer for Q4_K and Q6_K (gguf-py only dequantizes them), for the synthetic test files.

In:  float32 rows whose length is a multiple of 256.
Out: the GGUF block bytes (uint8, one row of blocks per input row).

The encodings follow ggml's block layouts (the same ones gguf-py's ``dequantize`` reads); the scale choice
is plain min/max rounding, not llama.cpp's search, which is fine: the tests compare engines on the same
stored bytes, and ``test_quantizers_round_trip_through_gguf_py`` checks the bytes decode to the input
within the type's step.
"""
from __future__ import annotations

import numpy as np

QK_K = 256


def _f16_bytes(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).view(np.uint8).reshape(*x.shape, 2)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """Q4_K: per 256 values ``d, dmin: f16``, 8 six-bit (scale, min) pairs packed in 12 bytes, 128 nibble bytes;
    value = d * scale_i * q - dmin * min_i with q in 0..15 for sub-block i of 32 values."""
    rows, n = x.shape
    blocks = x.astype(np.float32).reshape(-1, 8, 32)
    lo = np.minimum(blocks.min(-1), 0.0)              # (b, 8): the sub-block offsets, <= 0
    step = (blocks.max(-1) - lo) / 15.0               # (b, 8): the sub-block steps
    d = step.max(-1) / 63.0
    dmin = (-lo).max(-1) / 63.0
    d = d.astype(np.float16).astype(np.float32)
    dmin = dmin.astype(np.float16).astype(np.float32)
    sc = np.clip(np.round(np.divide(step, d[:, None], out=np.zeros_like(step), where=d[:, None] > 0)), 0, 63)
    mn = np.clip(np.round(np.divide(-lo, dmin[:, None], out=np.zeros_like(lo), where=dmin[:, None] > 0)), 0, 63)
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    scale = (d[:, None] * sc)[..., None]
    offset = (dmin[:, None] * mn)[..., None]
    q = np.clip(np.round(np.divide(blocks + offset, scale, out=np.zeros_like(blocks), where=scale > 0)), 0, 15)
    q = q.astype(np.uint8)                            # (b, 8, 32)
    packed = np.zeros((blocks.shape[0], 12), np.uint8)
    packed[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    packed[:, 4:8] = mn[:, :4] | ((mn[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:] & 0xF) | ((mn[:, 4:] & 0xF) << 4)
    nibbles = q[:, 0::2] | (q[:, 1::2] << 4)          # (b, 4, 32): sub-block 2c low, 2c+1 high
    out = np.concatenate([_f16_bytes(d), _f16_bytes(dmin), packed, nibbles.reshape(-1, 128)], axis=1)
    return out.reshape(rows, n // QK_K * 144)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """Q6_K: per 256 values 128 low-nibble bytes, 64 high-2-bit bytes, 16 int8 scales, ``d: f16``;
    value = d * scale_i * (q - 32) with q in 0..63 for sub-block i of 16 values."""
    rows, n = x.shape
    blocks = x.astype(np.float32).reshape(-1, 16, 16)
    step = np.abs(blocks).max(-1) / 31.0              # (b, 16)
    d = (step.max(-1) / 127.0).astype(np.float16).astype(np.float32)
    sc = np.clip(np.round(np.divide(step, d[:, None], out=np.zeros_like(step), where=d[:, None] > 0)), -128, 127)
    scale = (d[:, None] * sc)[..., None]
    q = np.clip(np.round(np.divide(blocks, scale, out=np.zeros_like(blocks), where=scale > 0)), -32, 31) + 32
    q = q.astype(np.uint8).reshape(-1, 2, 4, 32)      # (b, half, quarter, l): value 128*half + 32*quarter + l
    ql = np.concatenate([(q[:, :, 0] & 0xF) | ((q[:, :, 2] & 0xF) << 4),
                         (q[:, :, 1] & 0xF) | ((q[:, :, 3] & 0xF) << 4)], axis=2)   # (b, half, 64)
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    out = np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.astype(np.int8).view(np.uint8),
                          _f16_bytes(d)], axis=1)
    return out.reshape(rows, n // QK_K * 210)


QUANTIZERS = {"Q4_K": quantize_q4_k, "Q6_K": quantize_q6_k}

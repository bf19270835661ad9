"""A writer-side quantizer for IQ3_S (gguf-py only dequantizes the grid types), for the synthetic test files.

In:  float32 rows whose length is a multiple of 256.
Out: the GGUF block bytes (uint8, one row of blocks per input row).

ggml's block_iq3_s: per 256 values ``d: f16``, 64 bytes of grid indices' low 8 bits (one per 4 values), 8 bytes
of their 9th bits (byte ``b``, bit ``g``: group ``g`` of block ``b``), 32 sign bytes (bit ``j`` of byte ``4b + l``:
value ``8l + j`` of block ``b``), a 4-bit scale ``s`` per block of 32 (low nibble: the even block);
value = ``d * (2s + 1) * grid[index][k] * sign`` with grid values 1, 3, ..., 15 (``tg_gguf.quants.grid``: ggml's
``iq3s_grid``). The choice: ``d`` so the largest block takes ``2s + 1 = 31``, each block's ``s`` from its largest
magnitude, each 4 values the nearest grid entry (not llama.cpp's search): the tests compare engines on the same
stored bytes, and ``test_iq3_s_writer_round_trips_through_gguf_py`` checks gguf-py decodes them to this layout.
"""
from __future__ import annotations

import numpy as np

QK_K = 256
CHUNK = 4096  # groups of 4 values matched against the 512 grid entries at once


def _nearest(groups: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``(G, 4)`` magnitudes -> the index of the nearest grid entry of ``(512, 4)`` for each."""
    out = np.empty(len(groups), np.int64)
    norms = (grid * grid).sum(-1)
    for at in range(0, len(groups), CHUNK):
        g = groups[at:at + CHUNK]
        out[at:at + CHUNK] = np.argmin(norms[None, :] - 2 * g @ grid.T, axis=-1)
    return out


def iq3_s_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``x`` ``(rows, n)`` -> per super-block ``d`` (float32, a float16's value), per block ``s`` (0..15), per 4
    values the grid index (0..511) and per value the sign (True: minus): what ``quantize_iq3_s`` packs."""
    from tg_gguf.quants import grid
    table = grid("IQ3S").astype(np.float64)
    blocks = x.astype(np.float64).reshape(-1, 8, 32)
    amax = np.abs(blocks).max(-1)                                    # (super-blocks, 8)
    d = (amax.max(-1) / (15.0 * 31.0)).astype(np.float16).astype(np.float32)
    step = np.divide(amax, 15.0 * d[:, None], out=np.zeros_like(amax), where=d[:, None] > 0)
    s = np.clip(np.round((step - 1.0) / 2.0), 0, 15).astype(np.int64)
    unit = (d[:, None] * (2 * s + 1)).astype(np.float64)[..., None]  # (super-blocks, 8, 1)
    magnitudes = np.divide(np.abs(blocks), unit, out=np.zeros_like(blocks), where=unit > 0)
    index = _nearest(magnitudes.reshape(-1, 4), table).reshape(-1, 8, 8)
    return d, s, index, blocks < 0


def quantize_iq3_s(x: np.ndarray) -> np.ndarray:
    """IQ3_S blocks of ``x`` ``(rows, n)`` (see the module docstring): ``(rows, n / 256 * 110)`` uint8."""
    rows, n = x.shape
    d, s, index, minus = iq3_s_parts(x)
    count = len(d)
    qs = (index & 255).astype(np.uint8).reshape(count, 64)
    high = ((index >> 8) & 1).astype(np.uint8)                      # (super-blocks, 8 blocks, 8 groups)
    qh = np.packbits(high, axis=-1, bitorder="little").reshape(count, 8)
    signs = np.packbits(minus.reshape(count, 8, 4, 8), axis=-1, bitorder="little").reshape(count, 32)
    nibbles = s.astype(np.uint8).reshape(count, 4, 2)
    scales = nibbles[..., 0] | nibbles[..., 1] << 4
    d16 = d.astype(np.float16).view(np.uint8).reshape(count, 2)
    return np.concatenate([d16, qs, qh, signs, scales], axis=-1).reshape(rows, n // QK_K * 110)


def dequantize_iq3_s_parts(x_shape: tuple[int, int], d: np.ndarray, s: np.ndarray, index: np.ndarray,
                           minus: np.ndarray) -> np.ndarray:
    """What the parts stand for: ``d * (2s + 1) * grid[index] * sign``, float32 ``x_shape``."""
    from tg_gguf.quants import grid
    values = grid("IQ3S")[index].reshape(-1, 8, 32)
    unit = d[:, None, None] * (2 * s[..., None] + 1).astype(np.float32)
    return (unit * values * np.where(minus, -1.0, 1.0).astype(np.float32)).astype(np.float32).reshape(x_shape)

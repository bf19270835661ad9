"""Byte vectors widened from memory: a CAST of an int8/uint8 vector load to 32-bit lanes (the quantized weights of
GGUF GEMVs: q8 bytes as int8, q4 nibbles from uint8) reads the bytes with vpmovsxbd/vpmovzxbd instead of loading them
lane by lane; results against numpy at both ISA levels' code shapes, and run on CPU:X86."""
from __future__ import annotations

import numpy as np
import pytest
from test_x86_vector import kernels, with_op
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Op
from tg_x86.listing import asm

from tgcore.dtype import dtypes
from tgcore.tensor import Tensor

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"
rng = np.random.default_rng(3)


def _bytes(rows: int, cols: int) -> np.ndarray:
    return np.concatenate([[0, 1, 127, 128, 255, 254], rng.integers(0, 256, rows * cols - 6)]).astype(np.uint8)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_int8_weights_times_a_vector_widen_from_memory(isa):
    raw = _bytes(64, 256)
    x = rng.standard_normal(256).astype(np.float32)
    w = Tensor(raw, device=X86).bitcast(dtypes.int8).reshape(64, 256).float()
    out = (w * Tensor(x, device=X86)).sum(axis=1)
    code = kernels(out, isa)
    assert any(with_op(k, Op.VPMOVSXBD) for k in code)
    ref = raw.view(np.int8).reshape(64, 256).astype(np.float32) @ x
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_nibbles_of_uint8_weights_widen_from_memory(isa):
    raw = _bytes(32, 128)
    x = rng.standard_normal(256).astype(np.float32)
    b = Tensor(raw, device=X86).reshape(32, 8, 1, 16).cast(dtypes.int32)   # q4 blocks: 16 bytes, low nibbles first
    nib = ((b >> (Tensor.arange(2, device=X86) * 4).reshape(1, 1, 2, 1)) & 15).reshape(32, 256).float()
    out = (nib * Tensor(x, device=X86)).sum(axis=1)
    code = kernels(out, isa)
    assert any(with_op(k, Op.VPMOVZXBD) for k in code)
    r = raw.reshape(32, 8, 16).astype(np.int32)
    ref = np.concatenate([r & 15, r >> 4], axis=2).reshape(32, 256).astype(np.float32) @ x
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8])
def test_byte_vector_casts_to_every_32_bit_type(dt):
    raw = _bytes(1, 96).view(dt.np)
    t = Tensor(raw, device=X86)
    for target in (dtypes.int32, dtypes.uint32, dtypes.float32):
        got = t.cast(target)
        np.testing.assert_array_equal(got.numpy(), raw.astype(target.np))


@pytest.mark.parametrize("dt", [dtypes.uint16, dtypes.uint32, dtypes.uint64])
def test_integer_assembled_from_bytes_is_one_load(dt):
    """``b[i] | b[i+1] << 8 | ...`` (a quantized file's 16-bit scale read from its byte buffer) is one load of that
    many bytes (the core's combine_byte_loads legalizer, then one mov/movzx)."""
    n = dt.itemsize
    raw = _bytes(1, 37 * n)
    b = Tensor(raw, device=X86).reshape(37, n).cast(dt)
    word = b[:, 0]
    for k in range(1, n):
        word = word | (b[:, k] << (8 * k))
    (code,) = kernels(word)
    assert "byte ptr" not in asm(code)
    np.testing.assert_array_equal(word.numpy(), raw.view(dt.np))

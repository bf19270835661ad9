"""float16/bfloat16 vectors: loads widened into float32 pieces (vcvtph2ps; vpmovzxwd + shift) and float32 pieces
converted by the stores (vcvtps2ph; bfloat16 rounded to nearest even in integer lanes, NaN kept quiet, vpackusdw),
not lane by lane. The code at both ISA levels; results against numpy (float16) and the bfloat16 definition
(round to nearest even on the float32 bits, a NaN quieted) at edge values: ties, overflow to inf, subnormals, NaNs."""
from __future__ import annotations

import numpy as np
import pytest
from test_x86_vector import kernels, with_op
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Op

from tgcore.dtype import dtypes
from tgcore.tensor import Tensor

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"
rng = np.random.default_rng(7)
SPECIAL_BITS = [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F817FFF, 0x7F7FFFFF,
                0x7F7F8000, 0x00000001, 0x00008000, 0x00018000, 0x477FE000, 0x477FF000, 0x33800000, 0x33000000]


def bf16_bits(f: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits: round to nearest even on the float32 bits; a NaN keeps its top bits, quieted."""
    b = f.view(np.uint32).astype(np.uint64)
    rounded = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
    quiet = ((b | 0x400000) >> 16) & 0xFFFF
    return np.where((b & 0x7FFFFFFF) > 0x7F800000, quiet, rounded).astype(np.uint16)


def _values(n: int) -> np.ndarray:
    special = np.array(SPECIAL_BITS, np.uint32).view(np.float32)
    return np.concatenate([special, (rng.standard_normal(n) * 3000).astype(np.float32)])[:max(n, len(special))]


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_half_casts_are_vector_conversions(isa):
    f16, bf16, f32 = dtypes.float16, dtypes.bfloat16, dtypes.float32
    for src, dst, op in ((f16, f32, Op.VCVTPH2PS), (bf16, f32, Op.VPMOVZXWD), (f32, f16, Op.VCVTPS2PH),
                         (f32, bf16, Op.VPACKUSDW)):
        (code,) = kernels(Tensor.empty(4096, dtype=src, device=X86).cast(dst), isa)
        assert with_op(code, op), (src, dst)
        assert not with_op(code, Op.VPINSRW) and not with_op(code, Op.VPEXTRW), (src, dst)


@pytest.mark.parametrize("n", [8, 13, 64, 1001])
def test_float32_to_halves_match_numpy(n):
    x = _values(n)
    t = Tensor(x, device=X86)
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16)
    got16 = t.cast(dtypes.float16).bitcast(dtypes.uint16).numpy()
    nan = np.isnan(x)   # a NaN's payload: vcvtps2ph quiets it (0x7e00 | sign), numpy keeps a bit of a signalling one
    np.testing.assert_array_equal(got16[~nan], want16.view(np.uint16)[~nan])
    np.testing.assert_array_equal(got16[nan] & 0x7E00, np.full(nan.sum(), 0x7E00, np.uint16))
    np.testing.assert_array_equal(got16[nan] >> 15, x[nan].view(np.uint32) >> 31)
    np.testing.assert_array_equal(t.cast(dtypes.bfloat16).bitcast(dtypes.uint16).numpy(), bf16_bits(x))


@pytest.mark.parametrize("n", [8, 13, 64, 1001])
def test_halves_to_float32_are_exact(n):
    bits16 = np.concatenate([[0, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF],
                             rng.integers(0, 1 << 16, n)]).astype(np.uint16)[:max(n, 10)]
    got = Tensor(bits16, device=X86).bitcast(dtypes.float16).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(got, bits16.view(np.float16).astype(np.float32))
    got = Tensor(bits16, device=X86).bitcast(dtypes.bfloat16).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(got.view(np.uint32), bits16.astype(np.uint32) << 16)


def test_half_arithmetic_rounds_per_op():
    """float16 math is float32 math rounded to float16 after each op, as numpy's float16 does."""
    a = (rng.standard_normal(77) * 100).astype(np.float16)
    b = (rng.standard_normal(77) * 100).astype(np.float16)
    got = (Tensor(a, device=X86) * Tensor(b, device=X86) + Tensor(a, device=X86)).numpy()
    np.testing.assert_array_equal(got, a * b + a)

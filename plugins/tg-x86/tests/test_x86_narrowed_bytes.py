"""int32 lanes stored as bytes on the X86 renderer (``Renderer.narrowing_stores``, ``vmemory.truncated_bytes``): the
activations' 8-bit rounding (tg-gguf's q8 quantization: round by adding 1.5 * 2**23, keep the low byte) vectorized,
each vector's 8 low bytes gathered by vpshufb and stored by two vmovd.

References: numpy's truncating casts (``astype`` of int32 to int8/uint8) and the kernel's instructions."""
from __future__ import annotations

import numpy as np
import pytest
from test_x86_bytedot import instructions
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Op

from tgcore.tensor import Tensor

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"


@pytest.mark.parametrize("dt", ["int8", "uint8"])
@pytest.mark.parametrize("n", [8, 1001, 4096])
def test_int32_lanes_stored_as_bytes_match_numpy(dt, n):
    """Truncating (C's cast): every int32 value, the extremes included, at lengths with and without a tail."""
    v = np.random.default_rng(n).integers(-2**31, 2**31 - 1, n).astype(np.int32)
    v[:4] = [-2**31, 2**31 - 1, -1, 255]
    out = (Tensor(v, device=X86) + 1).cast(dt).numpy()
    np.testing.assert_array_equal(out, (v + np.int32(1)).astype(dt))


def test_rounding_to_bytes_is_vectorized():
    """The q8 rounding of a row of blocks: vdivps and one vpshufb per 8 values, no division or byte store lane by
    lane; the same bytes as numpy's rounding (half to even: what adding 1.5 * 2**23 does)."""
    x = (np.random.default_rng(0).standard_normal((48, 32)) * 40).astype(np.float32)
    d = np.abs(x).max(-1, keepdims=True) / 127
    t = Tensor(x, device=X86)
    dt = Tensor(d, device=X86)
    q = ((t / dt + 12582912.0).bitcast("int32") - 0x4B400000).cast("int8")
    ops = [i.op for i in instructions(q)]
    assert Op.VDIVPS in ops and Op.VPSHUFB in ops and Op.VDIVSS not in ops and Op.VPEXTRB not in ops
    np.testing.assert_array_equal(q.numpy(), np.rint(x / d).astype(np.int8))

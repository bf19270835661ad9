"""Quantized matrix-vector products at small and odd shapes (one block per row, row counts that do and do not
fill the interleaved rows, several blocks): the codegen's block splitting and factoring must hold for each,
checked against gguf-py's dequantization and a float64 product."""
from __future__ import annotations

import numpy as np
import pytest
import tg_gguf
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf_testutil import gguf_with_tensor, random_blocks, reference_dequantize

from tgcore.tensor import Tensor

TYPES = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q6_K,
         GGMLType.IQ4_NL]


@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows,blocks", [(1, 1), (4, 1), (6, 3), (12, 2), (20, 5)])
def test_small_gemv_matches_numpy(gtype, rows, blocks):
    block = BLOCK_LAYOUT[gtype][0]
    shape = (rows, blocks * block)
    raw = random_blocks(gtype, rows * blocks, seed=rows * 31 + blocks, small=True)
    gf = tg_gguf.from_bytes(gguf_with_tensor("w", shape, gtype, raw.tobytes()))
    ref_w = reference_dequantize(gtype, raw, shape).astype(np.float64)
    x = np.random.default_rng(rows + blocks).standard_normal(shape[1]).astype(np.float32)
    out = (gf.tensors_as(device="CPU")["w"] @ Tensor(x, device="CPU")).numpy()
    ref = ref_w @ x
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * max(np.abs(ref).max(), 1e-6))


@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [13, 24])
def test_dequantized_transpose_is_bit_exact(gtype, rows):
    """A weight dequantized into its transpose (what a prefill's dense GEMM reads): the kernel's lanes run across
    rows and the heuristic unrolls it by the quantization block; the values are gguf-py's, bit for bit, at an
    odd row count."""
    from tg_gguf_testutil import assert_bits_equal

    from tgcore.codegen import default_policy, prepare_kernel
    from tgcore.codegen.optimize import OptOps
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    block = BLOCK_LAYOUT[gtype][0]
    shape = (rows, 2 * block)
    raw = random_blocks(gtype, 2 * rows, seed=rows)
    gf = tg_gguf.from_bytes(gguf_with_tensor("w", shape, gtype, raw.tobytes()))
    t = gf.tensors_as(device="CPU")["w"].T.contiguous()
    (item,) = [si for si in create_schedule([t.uop], "CPU")[0] if si.kind != "copy"]
    renderer = open_device("CPU").renderer
    opts = default_policy(prepare_kernel(item.ast, renderer), renderer, 1)
    assert any(o.op is OptOps.UNROLL and o.amount in (16, 32) for o in opts), opts
    assert_bits_equal(t.numpy(), reference_dequantize(gtype, raw, shape).T)

"""A weight of the float and lookup types (F16, BF16, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0) times a vector at odd
row counts on PYTHON, CPU and CPU:X86, against gguf-py's dequantization and a float64 product: the rows the
vectorized GEMV interleaves do not divide them, and the columns are not a power of two where the format allows."""
from __future__ import annotations

import numpy as np
import pytest
import tg_gguf
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf_testutil import gguf_with_tensor, random_blocks, reference_dequantize

from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

TYPES = (GGMLType.F16, GGMLType.BF16, GGMLType.IQ4_NL, GGMLType.IQ4_XS, GGMLType.MXFP4, GGMLType.TQ1_0,
         GGMLType.TQ2_0)
ROWS = {"PYTHON": (5,), "CPU": (37, 36), "CPU:X86": (37, 36)}  # 36: also the path that interleaves 4 rows


def columns(gtype: GGMLType, device: str) -> int:
    block = BLOCK_LAYOUT[gtype][0]
    if device == "PYTHON":
        return max(block, 64)
    return 2 * block if block == 256 else 17 * max(block, 32)  # 544 for 1- and 32-element blocks


@pytest.mark.parametrize("device,rows", [(d, r) for d, rows in ROWS.items() for r in rows])
@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_gemv_at_odd_rows_matches_numpy(gtype, device, rows):
    shape = (rows, columns(gtype, device))
    raw = random_blocks(gtype, shape[0] * shape[1] // BLOCK_LAYOUT[gtype][0], seed=11, small=True)
    gf = tg_gguf.from_bytes(gguf_with_tensor("w", shape, gtype, raw.tobytes()))
    ref_w = reference_dequantize(gtype, raw, shape)
    x = np.random.default_rng(13).standard_normal(shape[1]).astype(np.float32)
    out = gf.tensors_as(device=device)["w"] @ Tensor(x, device=device)
    items, _ = create_schedule([out.uop], out.device)
    assert [si.kind for si in items] == ["reduce"]  # one kernel on the raw bytes
    ref = ref_w.astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())

"""Quantized matmul: a weight from a GGUF file times a vector is ONE kernel reading the raw weight bytes.

Each type gets an in-memory GGUF file with one weight (small scales); ``w @ x`` and ``x @ w.T`` are
checked against numpy (gguf-py's dequantization, then a float64 matvec), the dequantized weight bit for
bit against gguf-py, and the schedule for one kernel whose buffers hold no float copy of the weight.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest
import tg_gguf
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.dequant import DEQUANTIZERS
from tg_gguf_testutil import assert_bits_equal, gguf_with_tensor, random_blocks, reference_dequantize

from tgcore.engine.stats import GlobalCounters
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

FULL = (8192, 2048)  # rows (outputs), columns (inputs): every type at full size (~45 s for all on 2 cores)
BF16_SHAPE = (1024, 512)


def weight_shape(gtype: GGMLType) -> tuple[int, int]:
    if gtype == GGMLType.BF16:
        return BF16_SHAPE
    return FULL


def open_weight(gtype: GGMLType, shape: tuple[int, int]) -> tuple[tg_gguf.GGUFFile, np.ndarray]:
    n_blocks = shape[0] * shape[1] // BLOCK_LAYOUT[gtype][0]
    raw = random_blocks(gtype, n_blocks, seed=3, small=True)
    gf = tg_gguf.from_bytes(gguf_with_tensor("w", shape, gtype, raw.tobytes()))
    return gf, raw


def assert_one_kernel_reading_raw_weight(out: Tensor, raw_nbytes: int, weight_elements: int) -> None:
    items, _ = create_schedule([out.uop], out.device)
    assert [si.kind for si in items] == ["reduce"]
    sizes = [b.nbytes for b in items[0].bufs]
    assert raw_nbytes in sizes  # reads the quantized bytes ...
    sizes.remove(raw_nbytes)
    assert all(s < weight_elements for s in sizes)  # ... and nothing else of the weight's size


@pytest.mark.parametrize("gtype", sorted(DEQUANTIZERS, key=int), ids=lambda t: t.name)
def test_gemv_matches_numpy(gtype):
    shape = weight_shape(gtype)
    gf, raw = open_weight(gtype, shape)
    ref_w = reference_dequantize(gtype, raw, shape)
    x = np.random.default_rng(4).standard_normal(shape[1]).astype(np.float32)
    ref = ref_w.astype(np.float64) @ x.astype(np.float64)

    w = gf.tensors_as(device="CPU")["w"]
    out = w @ Tensor(x, device="CPU")
    assert_one_kernel_reading_raw_weight(out, raw.size, w.numel())
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert_bits_equal(w.numpy(), ref_w)


@pytest.mark.parametrize("gtype", [GGMLType.Q4_K, GGMLType.Q8_0, GGMLType.IQ4_NL], ids=lambda t: t.name)
def test_vector_times_transposed_weight_and_batches(gtype):
    """``x @ w.T`` (a linear layer) for one vector and for a small batch."""
    shape = (512, 512)
    gf, raw = open_weight(gtype, shape)
    ref_w = reference_dequantize(gtype, raw, shape).astype(np.float64)
    w = gf.tensors["w"]
    x = np.random.default_rng(5).standard_normal((3, shape[1])).astype(np.float32)
    one = Tensor(x[0]) @ w.T
    assert_one_kernel_reading_raw_weight(one, raw.size, w.numel())
    np.testing.assert_allclose(one.numpy(), x[0] @ ref_w.T, rtol=1e-4, atol=1e-4 * np.abs(x[0] @ ref_w.T).max())
    batch = (Tensor(x) @ w.T).numpy()
    np.testing.assert_allclose(batch, x @ ref_w.T, rtol=1e-4, atol=1e-4 * np.abs(x @ ref_w.T).max())


@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.Q5_K, GGMLType.TQ1_0, GGMLType.MXFP4],
                         ids=lambda t: t.name)
def test_gemv_on_the_python_device(gtype):
    """The PYTHON interpreter runs the same fused kernel (small weight: it is slower)."""
    shape = (64, 512)
    gf, raw = open_weight(gtype, shape)
    ref_w = reference_dequantize(gtype, raw, shape).astype(np.float64)
    x = np.random.default_rng(6).standard_normal(shape[1]).astype(np.float32)
    w = gf.tensors_as(device="PYTHON")["w"]
    out = w @ Tensor(x, device="PYTHON")
    assert_one_kernel_reading_raw_weight(out, raw.size, w.numel())
    ref = ref_w @ x
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.Q6_K], ids=lambda t: t.name)
def test_gemv_allocates_no_float_copy_of_the_weight(gtype):
    """mem_used grows by the quantized bytes (loaded once) and the output, never by a float weight."""
    shape = FULL
    gf, raw = open_weight(gtype, shape)
    x = Tensor(np.ones(shape[1], np.float32), device="CPU").realize()
    gc.collect()
    gc.disable()
    try:
        base = GlobalCounters.mem_used
        w = gf.tensors_as(device="CPU")["w"]
        loaded = GlobalCounters.mem_used - base
        assert loaded == raw.size  # the quantized bytes, on the device
        kernels = GlobalCounters.kernel_count
        out = (w @ x).realize()
        assert GlobalCounters.kernel_count - kernels == 1
        assert GlobalCounters.mem_used - base == raw.size + shape[0] * 4  # + the float32 output
        again = gf.tensors_as(device="CPU")["w"]  # the bytes stay loaded: no second copy
        assert GlobalCounters.mem_used - base == raw.size + shape[0] * 4
        assert again.shape == w.shape
        del out
    finally:
        gc.enable()

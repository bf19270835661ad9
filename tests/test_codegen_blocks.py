"""Reductions over blocks (a per-block factor times per-element values, the shape of a quantized dot product):
factors constant over a block leave the block's sum (``upcast.factor_blocks``); values against numpy for
shapes that do and do not fill the vector lanes, on every CPU renderer."""
import os

import numpy as np
import pytest

from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.mark.parametrize("rows,blocks,k", [(1, 1, 8), (3, 5, 8), (8, 7, 32), (13, 3, 16), (12, 3, 16), (4, 40, 32)])
def test_blockwise_scaled_matvec_matches_numpy(rows, blocks, k):
    """out[n] = sum_j x[j] * (a[n, j // k] * y[n, j] + b[n, j // k])"""
    rng = np.random.default_rng(rows * blocks + k)
    y = rng.standard_normal((rows, blocks * k)).astype(np.float32)
    a = rng.standard_normal((rows, blocks)).astype(np.float32)
    b = rng.standard_normal((rows, blocks)).astype(np.float32)
    x = rng.standard_normal(blocks * k).astype(np.float32)
    scale = Tensor(a).reshape(rows, blocks, 1).expand(rows, blocks, k).reshape(rows, blocks * k)
    shift = Tensor(b).reshape(rows, blocks, 1).expand(rows, blocks, k).reshape(rows, blocks * k)
    out = ((scale * Tensor(y) + shift) * Tensor(x)).sum(-1).numpy()
    ref = ((np.repeat(a, k, 1).astype(np.float64) * y + np.repeat(b, k, 1)) * x).sum(-1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("rows,blocks", [(4, 3), (9, 2)])
def test_blockwise_integer_sum_is_exact(rows, blocks):
    rng = np.random.default_rng(rows)
    y = rng.integers(-50, 50, (rows, blocks * 32)).astype(np.int32)
    a = rng.integers(-9, 9, (rows, blocks)).astype(np.int32)
    x = rng.integers(-50, 50, blocks * 32).astype(np.int32)
    scale = Tensor(a).reshape(rows, blocks, 1).expand(rows, blocks, 32).reshape(rows, blocks * 32)
    out = (scale * Tensor(y) * Tensor(x) + Tensor(y)).sum(-1).numpy()
    np.testing.assert_array_equal(out, (np.repeat(a, 32, 1) * y * x + y).sum(-1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,blocks", [(7, 3), (12, 2)])
def test_block_sums_of_converted_byte_products_are_exact(rows, blocks, device):
    """out[n] = sum_b s[n, b] * sum_i float(u[n, b, i] * q[b, i]) for unsigned and signed bytes u, q (an integer
    quantized dot product): the in-block sums may run in int32 (exact: every partial sum is below 2**24), and with
    integer scales the whole result is an exact integer in float32, whatever the summation order."""
    rng = np.random.default_rng(rows + blocks)
    u = rng.integers(0, 256, (rows, blocks, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    dot = Tensor(u, device=device).cast("int32") * Tensor(q, device=device).cast("int32").reshape(1, blocks, 32)
    out = (dot.cast("float32") * Tensor(s, device=device)).reshape(rows, blocks * 32).sum(-1).numpy()
    ref = (s[..., 0].astype(np.int64) * (u.astype(np.int64) * q.astype(np.int64)).sum(-1)).sum(-1)
    np.testing.assert_array_equal(out, ref.astype(np.float32))


@pytest.mark.parametrize("device", [d for d in DEVICES if d.startswith("CPU")])
def test_byte_dot_blocks_are_left_to_the_c_compiler(device):
    """On a renderer whose compiler vectorizes byte dot products (C), such a block sum is blocked but not
    vectorized by codegen (gcc turns the scalar int32 loop into vpdpbusd); elsewhere it gets vector lanes."""
    from tgcore.codegen import default_policy, prepare_kernel
    from tgcore.codegen.optimize import OptOps
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    u = Tensor(np.zeros((8, 64), np.uint8), device=device).realize()
    q = Tensor(np.zeros((64,), np.int8), device=device).realize()
    s = Tensor(np.zeros((8, 2, 1), np.float32), device=device).realize()
    dot = (u.cast("int32") * q.cast("int32")).reshape(8, 2, 32).cast("float32") * s
    out = dot.reshape(8, 64).sum(-1)
    (item,) = [si for si in create_schedule([out.uop], device)[0] if si.kind != "copy"]
    renderer = open_device(device).renderer
    ops = {o.op for o in default_policy(prepare_kernel(item.ast, renderer), renderer, 1)}
    assert OptOps.BLOCK in ops
    assert (OptOps.UPCAST in ops) != renderer.compiles_byte_dots

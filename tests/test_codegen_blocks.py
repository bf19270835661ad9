"""Reductions over blocks (a per-block factor times per-element values, the shape of a quantized dot product):
factors constant over a block leave the block's sum (``upcast.factor_blocks``); values against numpy for
shapes that do and do not fill the vector lanes, on every CPU renderer."""
import numpy as np
import pytest

from tgcore.tensor import Tensor


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

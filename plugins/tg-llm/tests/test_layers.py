"""The building blocks of ``tg_llm.layers`` against numpy, on the CPU device."""
from __future__ import annotations

import numpy as np


def test_masked_exp_matches_numpy_softmax_numerators():
    """exp(x + mask - max) over the last axis; masked entries exactly 0; an allowed entry far below the row's
    largest clamped at EXP_FLOOR (its value beside the largest's 1 is nothing a float32 sum can tell apart)."""
    from tg_llm.layers import EXP_FLOOR, masked_exp

    from tgcore.tensor import Tensor
    rng = np.random.default_rng(3)
    x = rng.normal(0, 4, (3, 5, 12)).astype(np.float32)
    x[0, 0, 4] = -300.0  # allowed, below float32's normal exponential range
    mask = np.where(rng.random((3, 5, 12)) < 0.3, -np.inf, 0.0).astype(np.float32)
    mask[..., 0] = 0.0  # every row attends somewhere
    mask[0, 0, 4] = 0.0
    got = masked_exp(Tensor(x, device="CPU"), Tensor(mask, device="CPU")).numpy()
    shifted = x.astype(np.float64) + mask
    exponent = np.maximum(shifted - shifted.max(-1, keepdims=True), EXP_FLOOR)
    want = np.where(mask == 0, np.exp(exponent), 0.0)
    assert (got[mask != 0] == 0).all()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
    assert got[0, 0, 4] > 0
    probs = got / got.sum(-1, keepdims=True)
    ref = np.where(mask == 0, np.exp(shifted - shifted.max(-1, keepdims=True)), 0.0)
    np.testing.assert_allclose(probs, ref / ref.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_rope_rotates_pairs_as_numpy():
    """Interleaved pairs (2j, 2j+1) and halves (j, j + d/2), all dims or the first few, against numpy (float64)."""
    import pytest
    from tg_llm.layers import rope

    from tgcore.tensor import Tensor
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 16)).astype(np.float32)
    for rope_dims in (16, 8):
        c = rng.standard_normal((3, rope_dims // 2)).astype(np.float32)
        s = rng.standard_normal((3, rope_dims // 2)).astype(np.float32)
        for interleaved in (True, False):
            got = rope(Tensor(x, device="CPU"), Tensor(c, device="CPU"), Tensor(s, device="CPU"), rope_dims,
                       interleaved).numpy()
            rot, C, S = x[..., :rope_dims].astype(np.float64), c[:, None], s[:, None]
            a, b = (rot[..., 0::2], rot[..., 1::2]) if interleaved else np.split(rot, 2, axis=-1)
            want = x.astype(np.float64).copy()
            first, second = a * C - b * S, a * S + b * C
            if interleaved:
                want[..., 0:rope_dims:2], want[..., 1:rope_dims:2] = first, second
            else:
                want[..., :rope_dims] = np.concatenate([first, second], -1)
            assert got == pytest.approx(want, rel=1e-5, abs=1e-5), (rope_dims, interleaved)

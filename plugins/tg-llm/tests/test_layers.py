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

"""``HeldInputs``: a decode step's host inputs refilled in place, never under a lazy graph that still reads them."""
from __future__ import annotations

import numpy as np
from tg_llm.step_inputs import HeldInputs


def test_the_same_tensors_come_back_with_the_new_values() -> None:
    held = HeldInputs("CPU")
    a = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([3, 4], np.int32)]
    first = held.fill((2, 96), a)
    b = [np.full((2, 3), 7, np.float32), np.array([5, 6], np.int32)]
    second = held.fill((2, 96), b)
    assert all(x is y for x, y in zip(first, second, strict=True))
    for t, want in zip(second, b, strict=True):
        np.testing.assert_array_equal(t.numpy(), want)
    other = held.fill((1, 96), [np.ones((1, 3), np.float32)])  # another shape: tensors of its own
    assert other[0] is not second[0] and other[0].shape == (1, 3)


def test_a_lazy_graph_over_a_held_tensor_keeps_its_values() -> None:
    held = HeldInputs("CPU")
    (t,) = held.fill("k", [np.ones(4, np.float32)])
    lazy = t * 2  # (not realized: it reads t's memory when it runs)
    (u,) = held.fill("k", [np.full(4, 5, np.float32)])
    assert u is not t  # (refilling t would have changed what ``lazy`` computes)
    np.testing.assert_array_equal(lazy.numpy(), np.full(4, 2, np.float32))
    np.testing.assert_array_equal(u.numpy(), np.full(4, 5, np.float32))

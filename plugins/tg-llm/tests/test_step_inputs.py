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


def test_held_outputs_hand_out_arrays_over_the_tensors_memory() -> None:
    import tg_llm.step_inputs as step_inputs
    from tg_llm.step_inputs import HeldOutputs

    from tgcore.tensor import Tensor
    held = HeldOutputs("CPU")
    t, a = held.take("k", (2, 3), np.float32)
    assert a is not None and a.shape == (2, 3)
    t.assign(Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))).realize()
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))  # (no copy: the tensor's memory)
    view = a[1]  # the caller keeps a view: that array is not written again
    del a
    u, b = held.take("k", (2, 3), np.float32)
    assert u is not t and b is not None
    del view
    again, c = held.take("k", (2, 3), np.float32)
    assert again is t  # dropped with every view: its memory comes back
    kept = [c, b]
    kept += [held.take("k", (2, 3), np.float32)[1] for _ in range(step_inputs.OUTPUTS_KEPT - 2)]
    assert all(x is not None for x in kept)
    last, none = held.take("k", (2, 3), np.float32)  # all held: a tensor of its own, its values copied out
    assert none is None and last.shape == (2, 3)


def test_a_held_output_outlives_its_keeper() -> None:
    import gc

    from tg_llm.step_inputs import HeldOutputs

    from tgcore.tensor import Tensor
    held = HeldOutputs("CPU")
    t, a = held.take("k", (1024,), np.float32)
    t.assign(Tensor(np.full(1024, 3, np.float32))).realize()
    del held, t
    gc.collect()
    others = [Tensor(np.full(1024, 9, np.float32)).realize() for _ in range(4)]  # (memory freed would be reused)
    assert a is not None and others
    np.testing.assert_array_equal(a, np.full(1024, 3, np.float32))

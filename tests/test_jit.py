"""tgcore.jit: replays give the same results as plain calls, compile nothing, and key on input signatures."""
from __future__ import annotations

import numpy as np

import tgcore
from tgcore.engine.realize import CompileCounter
from tgcore.engine.stats import GlobalCounters
from tgcore.tensor import Tensor
from tgcore.uop import UOp


def model(x: Tensor, w: Tensor) -> Tensor:
    """About 20 kernels: a small stack of matmul + softmax layers."""
    for _ in range(5):
        y = x @ w
        e = (y - y.max(1, keepdim=True)).exp()
        x = e / e.sum(1, keepdim=True)
    return x


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    for _ in range(5):
        y = x @ w
        e = np.exp(y - y.max(1, keepdims=True))
        x = e / e.sum(1, keepdims=True)
    return x


def test_replay_matches_plain_calls_and_compiles_nothing():
    f = tgcore.jit(model)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    tw = Tensor(w)
    for i in range(6):
        x = rng.standard_normal((8, 16)).astype(np.float32)
        before_compiles, before_kernels = CompileCounter.count, GlobalCounters.kernel_count
        out = f(Tensor(x), tw).numpy()
        np.testing.assert_allclose(out, reference(x, w), rtol=1e-5, atol=1e-6)
        if i >= 2:  # replays
            assert CompileCounter.count == before_compiles
            assert GlobalCounters.kernel_count - before_kernels >= 10  # the kernels really ran
    assert len(f.captures) == 1


def test_new_shapes_capture_again_and_never_replay_the_wrong_kernels():
    f = tgcore.jit(lambda a, b: (a * b).sum(0))
    rng = np.random.default_rng(1)
    for shape in [(4, 3), (4, 3), (4, 3), (5, 2), (5, 2), (5, 2), (4, 3)]:
        a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), (a * b).sum(0), rtol=1e-5)
    assert len(f.captures) == 2
    f_int = tgcore.jit(lambda a: a + 1)
    for _ in range(3):
        assert f_int(Tensor([1, 2, 3])).tolist() == [2, 3, 4]
    assert f_int(Tensor([1.5, 2.5])).tolist() == [2.5, 3.5]  # a different dtype: not the int capture


def test_symbolic_variable_compiles_once_over_50_values():
    v = UOp.variable("start_pos", 0, 4095)
    f = tgcore.jit(lambda x, pos: x * Tensor(pos).float() + 1.0)
    x = Tensor(np.arange(4, dtype=np.float32))
    f(x, v.bind(0))  # warm-up compiles
    before = CompileCounter.count
    for p in range(1, 51):
        np.testing.assert_array_equal(f(x, v.bind(p)).numpy(), np.arange(4, dtype=np.float32) * p + 1)
    assert CompileCounter.count == before


def test_inputs_may_be_lazy_or_views():
    f = tgcore.jit(lambda a: a * 2)
    base = np.arange(12, dtype=np.float32)
    for k in range(4):
        t = Tensor(base + k).reshape(3, 4).permute(1, 0)  # a lazy, non-contiguous input
        np.testing.assert_array_equal(f(t).numpy(), (base + k).reshape(3, 4).T * 2)


def test_outputs_are_overwritten_by_the_next_replay_unless_copied():
    f = tgcore.jit(lambda a: a + 1)
    for _ in range(2):
        f(Tensor([0.0]))
    first = f(Tensor([1.0]))
    kept = first.numpy()
    f(Tensor([5.0]))
    assert kept.tolist() == [2.0]


def test_random_numbers_are_fresh_on_every_replay_and_compile_once():
    f = tgcore.jit(lambda a: (Tensor.rand(*a.shape) > 0.5).where(a, 0.0))
    x = Tensor(np.ones(64, np.float32))
    f(x)
    f(x)
    before = CompileCounter.count
    masks = [f(x).numpy().copy() for _ in range(4)]
    assert CompileCounter.count == before
    assert len({m.tobytes() for m in masks}) == 4  # a different draw each call
    Tensor.manual_seed(3)
    first = [Tensor.rand(8).numpy() for _ in range(2)]
    Tensor.manual_seed(3)
    again = [Tensor.rand(8).numpy() for _ in range(2)]
    np.testing.assert_array_equal(first, again)

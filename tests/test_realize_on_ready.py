"""``Tensor.realize(on_ready=...)``: a callback per tensor as soon as its value is computed, before the rest of the
work, and replayed in the same place by ``tgcore.jit`` (what a data-parallel wrapper starts its allreduces from)."""
from __future__ import annotations

import numpy as np

import tgcore
from tgcore.engine.stats import GlobalCounters, KernelTimes
from tgcore.runtime.buffer import Buffer
from tgcore.tensor import Tensor


def chain(x: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """``early`` needs one matmul; ``late`` needs early's work and three more matmuls."""
    early = (x @ w).relu()
    late = early
    for _ in range(3):
        late = (late @ w).tanh()
    return late.sum(0), early.sum(0)


def chain_np(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    early = np.maximum(x @ w, 0)
    late = early
    for _ in range(3):
        late = np.tanh(late @ w)
    return late.sum(0), early.sum(0)


def values(buf: Buffer) -> np.ndarray:
    return np.frombuffer(bytes(buf.as_buffer(allow_zero_copy=False)), dtype=np.float32).copy()


def test_each_callback_runs_once_its_value_is_ready_and_before_later_kernels():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 16)).astype(np.float32) / 4
    late, early = chain(Tensor(x), Tensor(w))
    seen: list[tuple[int, np.ndarray, int]] = []
    GlobalCounters.kernel_count = 0
    early.realize(late, on_ready=lambda i, buf: seen.append((i, values(buf), GlobalCounters.kernel_count)))
    want_late, want_early = chain_np(x, w)
    assert [i for i, _, _ in seen] == [0, 1]  # early's value is ready first
    np.testing.assert_allclose(seen[0][1], want_early, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(seen[1][1], want_late, rtol=1e-5, atol=1e-5)
    assert seen[0][2] < seen[1][2] <= GlobalCounters.kernel_count  # kernels ran between the two calls
    np.testing.assert_allclose(late.numpy(), want_late, rtol=1e-5, atol=1e-5)


def test_a_tensor_computed_before_gets_its_callback_first():
    a = Tensor(np.arange(4, dtype=np.float32)).realize()
    b = (a * 2).sum()
    seen: list[tuple[int, np.ndarray]] = []
    b.realize(a, on_ready=lambda i, buf: seen.append((i, values(buf))))
    assert [i for i, _ in seen] == [1, 0]
    np.testing.assert_array_equal(seen[0][1], np.arange(4))
    np.testing.assert_array_equal(seen[1][1], [12.0])


def test_jit_replays_the_callbacks_in_place_with_new_values():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 16)).astype(np.float32) / 4
    tw = Tensor(w).realize()
    seen: list[tuple[int, np.ndarray, int]] = []

    def step(x: Tensor) -> Tensor:
        late, early = chain(x, tw)
        early.realize(late, on_ready=lambda i, buf: seen.append((i, values(buf), GlobalCounters.kernel_count)))
        return late

    f = tgcore.jit(step)
    for n in range(4):  # plain, capture, two replays
        x = rng.standard_normal((8, 16)).astype(np.float32)
        seen.clear()
        with KernelTimes.record():  # (a timed replay counts its kernels one by one, as it runs them)
            out = f(Tensor(x)).numpy()
        want_late, want_early = chain_np(x, w)
        assert [i for i, _, _ in seen] == [0, 1], n
        assert seen[0][2] < seen[1][2], n
        np.testing.assert_allclose(seen[0][1], want_early, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(seen[1][1], want_late, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out, want_late, rtol=1e-5, atol=1e-5)
    assert f.captures, "the last calls were replays"

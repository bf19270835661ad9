"""Tensor.assign: in-place writes into realized buffers (optimizer steps, KV caches), against numpy."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tgcore
from tgcore.engine.stats import GlobalCounters
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def test_elementwise_update_is_in_place(device):
    w = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    alias = w.reshape(6)  # another view of the same buffer
    mem = GlobalCounters.mem_used
    w.assign(w * 2 + 1)
    assert GlobalCounters.mem_used <= mem  # no new buffer (cached results may even be dropped)
    np.testing.assert_array_equal(w.numpy(), np.arange(6).reshape(2, 3) * 2 + 1)
    np.testing.assert_array_equal(alias.numpy(), np.arange(6) * 2 + 1)


@pytest.mark.parametrize("how", ["flip", "transpose_square", "shift"])
def test_reads_of_other_elements_see_old_values(device, how):
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    w = Tensor(a, device=device)
    if how == "flip":
        w.assign(w.flip(1) + w)
        ref = a[:, ::-1] + a
    elif how == "transpose_square":
        w.assign(w.T)
        ref = a.T
    else:
        w.assign(w.pad(((0, 0), (1, 0))).shrink((None, (0, 4))))
        ref = np.pad(a, ((0, 0), (1, 0)))[:, :4]
    np.testing.assert_array_equal(w.numpy(), ref)


def test_slice_assign_like_a_kv_cache(device):
    cache = Tensor(np.zeros((5, 3), np.float32), device=device)
    ref = np.zeros((5, 3), np.float32)
    for pos in range(5):
        row = np.full((1, 3), pos + 1, np.float32)
        cache.shrink(((pos, pos + 1), None)).assign(Tensor(row, device=device))
        ref[pos:pos + 1] = row
    np.testing.assert_array_equal(cache.numpy(), ref)
    cache.shrink((None, (1, 2))).assign(-1.0)  # a strided column, from a scalar
    ref[:, 1] = -1
    np.testing.assert_array_equal(cache.numpy(), ref)


def test_assign_to_a_lazy_tensor_just_takes_the_value(device):
    t = Tensor(np.ones(3, np.float32), device=device) * 2
    t.assign(Tensor(np.array([1.0, 2.0, 3.0], np.float32), device=device))
    assert t.tolist() == [1.0, 2.0, 3.0]


def test_errors(device):
    w = Tensor(np.zeros((2, 3), np.float32), device=device)
    with pytest.raises(ValueError, match="shape"):
        w.assign(Tensor(np.zeros((3, 2), np.float32), device=device))
    other = "PYTHON" if device != "PYTHON" else "CPU"
    with pytest.raises(ValueError, match="to\\(\\)"):
        w.assign(Tensor(np.zeros((2, 3), np.float32), device=other))


def test_jitted_step_updates_weights_in_place():
    w = Tensor(np.zeros(4, np.float32))

    @tgcore.jit
    def step(g: Tensor) -> Tensor:
        w.assign(w - g * 0.5)
        return w.sum()

    total = np.zeros(4, np.float32)
    for i in range(5):
        g = np.full(4, i, np.float32)
        total -= g * 0.5
        step(Tensor(g))
    np.testing.assert_array_equal(w.numpy(), total)


def test_symbolic_position_write_compiles_once():
    """A KV-cache style write at a bound position: one compile serves every position under the JIT."""
    from tgcore.engine.realize import CompileCounter
    from tgcore.uop import UOp
    cache = Tensor(np.zeros((6, 2), np.float32))
    pos = UOp.variable("pos", 0, 5)

    @tgcore.jit
    def write(row: Tensor, p: UOp) -> Tensor:
        cache.shrink(((p, p + 1), None)).assign(row)
        return cache.sum()

    write(Tensor(np.full((1, 2), 1, np.float32)), pos.bind(0))
    before = CompileCounter.count
    for i in range(1, 6):
        write(Tensor(np.full((1, 2), i + 1, np.float32)), pos.bind(i))
    assert CompileCounter.count == before
    np.testing.assert_array_equal(cache.numpy(), np.repeat(np.arange(1, 7, dtype=np.float32)[:, None], 2, 1))
    with pytest.raises(ValueError, match="constant size"):
        cache.shrink(((pos.bind(1), pos.bind(1) * 2), None))

"""Tensor.assign: lazy in-place writes into realized buffers (optimizer steps, KV caches), against numpy.

Lazy tensors built before an assign keep the values they were built from; tensors realized into the
written memory see the new ones; cached values are dropped only where they depend on the written memory."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tgcore
from tgcore.engine.stats import GlobalCounters
from tgcore.schedule.state import REALIZATION
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def test_elementwise_update_is_in_place(device):
    w = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    alias = w.reshape(6).realize()  # a realized view: shares the buffer
    mem, copies = GlobalCounters.mem_used, REALIZATION.preserved
    w.assign(w * 2 + 1)
    np.testing.assert_array_equal(w.numpy(), np.arange(6).reshape(2, 3) * 2 + 1)
    assert GlobalCounters.mem_used <= mem and REALIZATION.preserved == copies  # nobody reads the old values
    np.testing.assert_array_equal(alias.numpy(), np.arange(6) * 2 + 1)


def test_assign_is_lazy_and_runs_when_read(device):
    w = Tensor(np.arange(4, dtype=np.float32), device=device)
    GlobalCounters.reset()
    w.assign(w + 1)
    assert GlobalCounters.kernel_count == 0
    w.assign(w * 3)  # reads the first write's result: that write runs now
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_array_equal(w.numpy(), (np.arange(4) + 1) * 3)
    assert GlobalCounters.kernel_count == 2
    for _ in range(3000):  # (a long chain of writes nothing reads stays one write long)
        w.assign(w + 1)
    np.testing.assert_array_equal(w.numpy(), (np.arange(4) + 1) * 3 + 3000)


@pytest.mark.parametrize("order", ["old_first", "new_first"])
def test_lazy_tensors_built_before_keep_the_old_values(device, order):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = Tensor(a, device=device)
    derived, view, row = w * 2 + 1, w.reshape(6), w.shrink(((1, 2), None))
    w.assign(w * 10)
    after = w + 1  # built after the assign: reads the new values
    if order == "new_first":  # the write runs before the old values are read: they are copied aside first
        np.testing.assert_array_equal(after.numpy(), a * 10 + 1)
    np.testing.assert_array_equal(derived.numpy(), a * 2 + 1)
    np.testing.assert_array_equal(view.numpy(), a.reshape(6))
    np.testing.assert_array_equal(row.numpy(), a[1:2])
    np.testing.assert_array_equal(after.numpy(), a * 10 + 1)
    np.testing.assert_array_equal(w.numpy(), a * 10)


def test_no_copy_when_nothing_reads_the_old_values(device):
    w = Tensor(np.ones(8, np.float32), device=device)
    copies = REALIZATION.preserved
    for i in range(3):
        derived = w * 2  # dies before the next write
        np.testing.assert_array_equal(derived.numpy(), np.full(8, 2.0 ** (i + 1)))
        del derived
        w.assign(w * 2)
    np.testing.assert_array_equal(w.numpy(), np.full(8, 8.0))
    assert REALIZATION.preserved == copies


def test_an_assign_drops_only_cached_values_that_depend_on_the_written_buffer(device):
    a = Tensor(np.arange(8, dtype=np.float32), device=device)
    b = Tensor(np.ones(8, np.float32), device=device)
    from_a, from_b, from_both = a * 2, b * 3, a + b  # (kept: the cache remembers the nodes they hold)
    # copies of the tensors are realized (the lazy nodes stay; the cache keeps a value while its buffer lives)
    values = [Tensor(t.uop, device=device).realize() for t in (from_a, from_b, from_both)]
    drops = REALIZATION.drops
    a.assign(a - 1)
    a.realize()
    GlobalCounters.reset()
    np.testing.assert_array_equal(from_b.numpy(), np.full(8, 3.0))
    assert GlobalCounters.kernel_count == 0 and REALIZATION.drops == drops  # from the cache
    np.testing.assert_array_equal(from_a.numpy(), np.arange(8) * 2)  # recomputed: the old values, copied aside
    np.testing.assert_array_equal(from_both.numpy(), np.arange(8) + 1)
    assert GlobalCounters.kernel_count == 2 and REALIZATION.drops - drops == 2  # a * 2 and a + b
    assert values[1].tolist() == [3.0] * 8


def test_buffer_versions_count_writes(device):
    w = Tensor(np.zeros(4, np.float32), device=device)
    buf = w._buffer()
    v = REALIZATION.version(buf)
    w.assign(w + 1)
    w.shrink(((0, 2),)).assign(5.0)
    w.realize()
    assert REALIZATION.version(buf) == v + 2
    assert w.tolist() == [5.0, 5.0, 1.0, 1.0]


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
    before = cache * 1  # a lazy reader of the cache as it is now
    cache.shrink((None, (1, 2))).assign(-1.0)  # a strided column, from a scalar
    np.testing.assert_array_equal(cache.numpy(), np.where(np.arange(3) == 1, -1, ref))
    np.testing.assert_array_equal(before.numpy(), ref)


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


def test_a_write_started_outside_the_scheduler_finishes_before_its_readers(device):
    """REALIZATION.prepare_write with finish= (a transport's non-blocking receive): reads of the tensor wait for
    the write, lazy tensors built before it keep the old values."""
    t = Tensor(np.zeros(4, np.float32), device=device)
    old = t + 1
    finished: list[bool] = []

    def finish() -> None:  # the data lands when waited for
        buf.copyin(np.arange(4, dtype=np.float32).data)
        finished.append(True)

    buf = REALIZATION.prepare_write(t, finish=finish)
    after = t * 2  # built after: reads the received values
    assert not finished
    np.testing.assert_array_equal(after.numpy(), np.arange(4) * 2)
    assert finished == [True]
    np.testing.assert_array_equal(old.numpy(), np.ones(4))
    np.testing.assert_array_equal(t.numpy(), np.arange(4))
    with pytest.raises(ValueError, match="contiguous buffer"):
        REALIZATION.prepare_write(t[1:3])


def test_a_parameter_written_outside_the_scheduler_still_gets_its_gradient():
    """prepare_write (a transport broadcasting into a parameter) moves the tensor to a new version of its memory;
    it stays the leaf backward() looks for (its node keeps the leaf's tag)."""
    from tgcore.nn import Linear
    layer = Linear(3, 2)
    layer.weight.requires_grad_(True)
    tgcore.realization.prepare_write(layer.weight)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    layer(Tensor(x)).sum().backward()
    assert layer.weight.grad is not None
    np.testing.assert_allclose(layer.weight.grad.numpy(), np.ones((2, 1), np.float32) * x.sum(0))


def test_in_place_buffer_says_when_a_write_may_go_straight_in(device):
    """REALIZATION.in_place_buffer: the tensor's own buffer when only its holders read it (a write there is what
    prepare_write would do: bump the version), None for a view, a lazy expression or memory a lazy graph reads;
    asking changes nothing (values, version)."""
    t = Tensor(np.arange(4, dtype=np.float32), device=device).realize()
    buf = REALIZATION.in_place_buffer(t)
    assert buf is not None and buf is REALIZATION.own_buffer(t)
    version = REALIZATION.version(buf)
    assert REALIZATION.in_place_buffer(t) is buf and REALIZATION.version(buf) == version
    assert REALIZATION.in_place_buffer(t[1:3]) is None and REALIZATION.own_buffer(t[1:3]) is None
    assert REALIZATION.in_place_buffer(t + 1) is None and REALIZATION.own_buffer(t + 1) is None
    lazy = t * 2  # reads the memory: a write must give t a new version instead
    assert REALIZATION.in_place_buffer(t) is None and REALIZATION.own_buffer(t) is buf
    del lazy
    assert REALIZATION.in_place_buffer(t) is buf
    np.testing.assert_array_equal(t.numpy(), np.arange(4))
    assert REALIZATION.version(buf) == version


def test_contiguous_of_a_realized_tensor_is_memory_of_its_own(device):
    """``contiguous()`` (and ``clone()``) of a realized tensor copies it: a write into either leaves the other alone,
    and a partial write into the copy is kept (was: a view of the same memory, so writes showed in both, or a write
    through a slice of the not-yet-used view was lost)."""
    src = Tensor(np.zeros((8, 2), np.float32), device=device).realize()
    copy = src.contiguous().realize()
    src.assign(Tensor(np.ones((8, 2), np.float32), device=device)).realize()
    np.testing.assert_array_equal(copy.numpy(), np.zeros((8, 2)))
    copy.shrink(((0, 1), None)).assign(Tensor(np.full((1, 2), 5, np.float32), device=device)).realize()
    np.testing.assert_array_equal(copy.numpy()[:2], [[5, 5], [0, 0]])
    np.testing.assert_array_equal(src.numpy(), np.ones((8, 2)))
    fresh = Tensor(np.zeros((8, 2), np.float32), device=device).contiguous().realize()
    fresh.shrink(((0, 1), None)).assign(Tensor(np.ones((1, 2), np.float32), device=device))
    np.testing.assert_array_equal(fresh.numpy()[:2], [[1, 1], [0, 0]])
    computed = (src.reshape(16) + 1).contiguous().realize()  # (a kernel's result: its own memory already)
    np.testing.assert_array_equal(computed.numpy(), np.full(16, 2))

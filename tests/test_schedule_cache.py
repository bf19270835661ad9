"""The schedule cache: graphs with the same structure reuse one schedule, filled in with their own buffers."""
from __future__ import annotations

import gc

import numpy as np
import pytest

from tgcore.engine.stats import GlobalCounters
from tgcore.schedule import cache
from tgcore.schedule.cache import CacheStats
from tgcore.tensor import Tensor
from tgcore.uop import UOp


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


def expression(t: Tensor) -> Tensor:
    for i in range(10):
        t = t * 1.5 + float(i)
    return t


def reference(a: np.ndarray) -> np.ndarray:
    for i in range(10):
        a = a * np.float32(1.5) + np.float32(i)
    return a


def test_same_structure_hits_and_uses_its_own_buffers():
    arrays = [np.arange(16, dtype=np.float32) * k for k in range(4)]
    outs = []
    for a in arrays:
        outs.append(expression(Tensor(a)).realize())
    assert (CacheStats.misses, CacheStats.hits) == (1, 3)
    for a, out in zip(arrays, outs, strict=True):  # every result lives in its own buffer
        np.testing.assert_allclose(out.numpy(), reference(a), rtol=1e-6)


def test_different_structure_or_shape_or_dtype_misses():
    expression(Tensor(np.ones(16, np.float32))).realize()
    expression(Tensor(np.ones(17, np.float32))).realize()
    expression(Tensor(np.ones(16, np.float64))).realize()
    (Tensor(np.ones(16, np.float32)) * 2).realize()
    assert (CacheStats.misses, CacheStats.hits) == (4, 0)


def test_constants_that_compare_equal_stay_distinct():
    x = Tensor(np.ones(4, np.float32))
    assert (1 / (x * 0.0)).tolist() == [np.inf] * 4
    assert (1 / (x * -0.0)).tolist() == [-np.inf] * 4
    assert (x + True).dtype == x.dtype and (x + 1).tolist() == [2.0] * 4


def test_shared_inputs_and_aliasing_are_part_of_the_key():
    a, b = Tensor(np.full(8, 2, np.float32)).realize(), Tensor(np.full(8, 3, np.float32)).realize()
    assert (a * b).tolist() == [6.0] * 8
    assert (a * a).tolist() == [4.0] * 8  # one buffer twice is not two buffers
    assert (b * a).tolist() == [6.0] * 8
    assert (CacheStats.misses, CacheStats.hits) == (2, 1)


def test_views_of_inputs_are_views_of_the_real_inputs():
    for k in range(3):
        base = Tensor(np.arange(64, dtype=np.float32) + k).realize()
        part = base[8:24].contiguous()  # a plain slice: a view of base, no copy kernel
        out = (part.reshape(4, 4).sum(1) * 2).realize()
        np.testing.assert_array_equal(out.numpy(), (np.arange(8, 24) + k).reshape(4, 4).sum(1) * 2)
    assert CacheStats.hits >= 2


def test_reductions_and_intermediate_buffers():
    for k in range(3):
        x = Tensor(np.arange(48, dtype=np.float32).reshape(6, 8) + k)
        y = (x - x.max(1, keepdim=True)).exp()
        out = (y / y.sum(1, keepdim=True)).realize()
        xn = np.arange(48, dtype=np.float32).reshape(6, 8) + k
        e = np.exp(xn - xn.max(1, keepdims=True))
        np.testing.assert_allclose(out.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)
    assert CacheStats.hits == 2


def test_earlier_results_become_leaves():
    x = Tensor(np.arange(8, dtype=np.float32))
    y = (x * 3).realize()
    before = GlobalCounters.kernel_count
    z = ((x * 3) + y).realize()  # x*3 is read from y's buffer, not recomputed
    assert GlobalCounters.kernel_count - before == 1
    np.testing.assert_array_equal(z.numpy(), np.arange(8) * 6)


def test_copies_are_not_cached():
    for _ in range(2):
        Tensor(np.ones(8, np.float32)).to("PYTHON").realize()
    assert CacheStats.hits == 0


def test_a_write_alone_is_cached_into_each_calls_memory():
    # (a KV-cache write per layer and step: the same write into a view of another buffer, at the step's bound slot)
    v = UOp.variable("write_slot", 0, 6)
    ref = [np.arange(24, dtype=np.float32).reshape(3, 8) * k for k in range(3)]
    caches = [Tensor(r.copy()).realize() for r in ref]
    for step in range(2):
        for k, cache_t in enumerate(caches):
            slot, value = 3 * step + 1, np.full((3, 2), 10.0 * k + step, np.float32)
            view = cache_t.shrink((None, (v.bind(slot), v.bind(slot) + 2)))
            view.assign(Tensor(value) * 2 + view)  # (reads the memory it writes)
            ref[k][:, slot:slot + 2] = value * 2 + ref[k][:, slot:slot + 2]
            np.testing.assert_array_equal(cache_t.numpy(), ref[k])
    assert CacheStats.hits >= 4  # (the later layers of each step)


def test_memory_returns_to_baseline_on_hits():
    expression(Tensor(np.ones(64, np.float32))).realize()  # fill the cache
    gc.collect()
    gc.disable()
    try:
        base = GlobalCounters.mem_used
        out = expression(Tensor(np.ones(64, np.float32))).realize()
        assert GlobalCounters.mem_used > base and CacheStats.hits == 1
        del out
        assert GlobalCounters.mem_used == base
    finally:
        gc.enable()


def test_a_value_realized_on_one_device_is_not_reused_on_another():
    a = Tensor.arange(6)  # no buffer below: the same lazy node on every device
    keep = a + 0  # keeps the lazy node alive, so the realized cache remembers it
    a.realize()
    b = (Tensor.arange(6, device="PYTHON") * 2).realize()
    c = Tensor.arange(6, device="PYTHON").realize()
    assert b.tolist() == [0, 2, 4, 6, 8, 10] and c.tolist() == list(range(6))
    assert c._buffer().device == "PYTHON" and b._buffer().device == "PYTHON"
    assert keep.tolist() == list(range(6))


def test_constants_realized_leave_no_buffer_behind():
    gc.collect()
    base = GlobalCounters.mem_used
    for _ in range(3):
        assert Tensor.ones(16, 16).contiguous().sum().item() == 256
        assert Tensor.full((8,), 3.0).tolist() == [3.0] * 8
    assert GlobalCounters.mem_used == base


DEVICES = [d for d in __import__("os").environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.mark.parametrize("device", DEVICES)
def test_a_scalar_that_varies_between_calls_is_a_kernel_input(device):
    """x * lr with a new lr each step: the first value is folded into the kernel, the second lifts the scalar into
    a one-element input buffer, and every later value reuses that kernel."""
    from tgcore.engine.realize import CompileCounter
    base = np.arange(8, dtype=np.float32)
    x = Tensor(base, device=device).realize()
    start = CompileCounter.count
    for step in range(12):
        lr = 0.1 * (step + 1)
        np.testing.assert_array_equal((x * lr).numpy(), base * np.float32(lr))
        np.testing.assert_array_equal((x.cast("int32") // (step - 5)).numpy(),  # int scalars too, 0 included
                                      np.where(step == 5, 0, base.astype(np.int32) // (step - 5 or 1)))
    assert CompileCounter.count - start <= 4 + 2  # two per structure (the cast may get its own kernel)
    assert CacheStats.hits >= 2 * 12 - 6


def test_a_scalar_that_does_not_vary_stays_folded():
    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    for _ in range(3):
        assert (x * 1.0 + 0.5).tolist() == [0.5, 1.5, 2.5, 3.5]
    assert (CacheStats.misses, CacheStats.hits) == (1, 2)
    template = next(iter(cache._templates.values()))
    assert not template.lifted and template.baked


def test_a_bound_variable_takes_each_calls_value():
    # (the template's kernels read the variable at run time: a later value must not run with the first one)
    v = UOp.variable("cache_pos", 0, 100)
    x = Tensor(np.arange(4, dtype=np.float32)).realize()
    for p in (0, 3, 7):
        hits = CacheStats.hits
        np.testing.assert_array_equal((x * Tensor(v.bind(p)).float() + 1.0).numpy(),
                                      np.arange(4, dtype=np.float32) * p + 1)
        assert CacheStats.hits == hits + (p != 0)

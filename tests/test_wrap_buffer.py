"""Memory written outside the scheduler (a transport receiving messages), against numpy.

``Tensor.from_buffer`` wraps an existing Buffer (or a view of one) as a realized tensor: its values are the
memory's, it keeps the memory alive (views counted on their base) until nothing built from it is left, it starts no
autograd graph, and a write announced with ``invalidate`` is seen by every value computed afterwards.
``REALIZATION.prepare_write`` of a tensor that nothing but its holders reads writes in place: the tensor keeps its
node and only the memory's version moves; when a lazy graph reads it, the old values stay with that graph.
``REALIZATION.sole_buffer`` tells when nothing but one node reads watched memory (every kind of reader is seen)."""
from __future__ import annotations

import gc
import os
import weakref

import numpy as np
import pytest

from tgcore.dtype import dtypes
from tgcore.runtime.buffer import Buffer
from tgcore.schedule.state import REALIZATION
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def filled(device: str, values: np.ndarray, header: int = 0) -> Buffer:
    """A base Buffer of ``header`` bytes of 0xEE followed by ``values``' bytes."""
    raw = np.concatenate([np.full(header, 0xEE, np.uint8), values.reshape(-1).view(np.uint8)])
    return Buffer(device, raw.size, dtypes.uint8).ensure_allocated().copyin(raw.data)


def write(buf: Buffer, values: np.ndarray) -> None:
    """Write ``values`` into ``buf``'s memory behind the scheduler's back, and say so."""
    buf.copyin(np.ascontiguousarray(values).reshape(-1).data)
    REALIZATION.invalidate(buf)


def test_from_buffer_reads_the_memory_of_a_view(device):
    values = np.arange(12, dtype=np.float32) - 3
    base = filled(device, values, header=64)
    t = Tensor.from_buffer(base.view(12, dtypes.float32, 64), (3, 4))
    assert t.shape == (3, 4) and t.dtype is dtypes.float32 and t.device == base.device
    assert t._is_realized()
    np.testing.assert_array_equal(t.numpy(), values.reshape(3, 4))
    np.testing.assert_array_equal((t * 2 + 1).sum(axis=0).numpy(), (values.reshape(3, 4) * 2 + 1).sum(axis=0))
    flat = Tensor.from_buffer(base.view(12, dtypes.float32, 64))
    assert flat.shape == (12,)
    np.testing.assert_array_equal(flat.numpy(), values)
    lower = Tensor.from_buffer(Buffer(device.lower(), 12, dtypes.float32).ensure_allocated().copyin(values.data))
    np.testing.assert_array_equal((lower + t.reshape(12)).numpy(), values * 2)  # (the device name is canonical)
    ints = Tensor.from_buffer(base.view(6, dtypes.int32, 64 + 24), (2, 3))
    np.testing.assert_array_equal(ints.numpy(), values[6:].view(np.int32).reshape(2, 3))


def test_from_buffer_keeps_its_view_counted_until_nothing_reads_it(device):
    base = filled(device, np.arange(16, dtype=np.float32), header=32)
    t = Tensor.from_buffer(base.view(16, dtypes.float32, 32))
    assert base.views_alive == 1
    lazy = t * 3  # a graph reading the memory
    sliced = t[4:8].realize()  # a realized slice: memory of the same base
    del t
    gc.collect()
    assert base.views_alive >= 1
    np.testing.assert_array_equal(lazy.numpy(), np.arange(16, dtype=np.float32) * 3)
    np.testing.assert_array_equal(sliced.numpy(), np.arange(4, 8, dtype=np.float32))
    del lazy, sliced
    gc.collect()
    assert base.views_alive == 0


def test_from_buffer_frees_a_buffer_handed_over(device):
    buf = filled(device, np.arange(8, dtype=np.int32)).view(8, dtypes.int32)
    t = Tensor.from_buffer(buf)
    gone = weakref.ref(buf)
    name = weakref.ref(t.uop.src[0])
    del buf
    np.testing.assert_array_equal(t.numpy(), np.arange(8))
    del t
    gc.collect()
    assert gone() is None and name() is None


def test_a_write_announced_with_invalidate_is_seen_by_later_values(device):
    base = filled(device, np.arange(6, dtype=np.float32))
    buf = base.view(6, dtypes.float32)
    t = Tensor.from_buffer(buf, (2, 3))
    doubled = (t * 2).uop  # a lazy node whose value the realize below caches (while that value's buffer lives)
    value = Tensor(doubled).realize()
    np.testing.assert_array_equal(value.numpy(), np.arange(6).reshape(2, 3) * 2)
    version, drops = REALIZATION.version(buf), REALIZATION.drops
    write(buf, np.full(6, 5, np.float32))
    assert REALIZATION.version(buf) == version + 1
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), 5))
    np.testing.assert_array_equal(Tensor(doubled).numpy(), np.full((2, 3), 10))  # not the cached 0, 2, 4, ...
    assert REALIZATION.drops == drops + 1


def test_from_buffer_starts_no_graph(device):
    t = Tensor.from_buffer(filled(device, np.arange(4, dtype=np.float32)).view(4, dtypes.float32))
    assert t.requires_grad is None and t.grad is None
    w = Tensor(np.array([1, -2, 3, -4], np.float32), device=device, requires_grad=True)
    ((t * w) ** 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.arange(4) ** 2 * np.array([1, -2, 3, -4]))
    assert t.grad is None


def test_from_buffer_rejects_bad_arguments(device):
    buf = filled(device, np.zeros(6, np.float32)).view(6, dtypes.float32)
    with pytest.raises(ValueError, match="6 elements|has 4 elements"):
        Tensor.from_buffer(buf, (2, 2))
    with pytest.raises(TypeError, match="tgcore dtype"):
        Tensor.from_buffer(Buffer(device, 4, np.dtype(np.float32)))


def test_a_write_into_a_tensor_nothing_else_reads_keeps_its_node(device):
    t = Tensor(np.arange(5, dtype=np.float32), device=device).realize()
    alias = t.reshape(5).realize()  # a tensor realized into the same memory: a holder
    node = t.uop
    value = (t + 1).realize()  # computed from the old contents (its lazy node is gone: nothing reads t now)
    for step in range(3):
        buf = REALIZATION.prepare_write(t)
        assert t.uop is node  # (the same name: no new graph node per write)
        write_values = np.full(5, step, np.float32)
        buf.copyin(write_values.data)
        np.testing.assert_array_equal(t.numpy(), write_values)
        np.testing.assert_array_equal((t * 2).numpy(), write_values * 2)
        np.testing.assert_array_equal(alias.numpy(), write_values)
        np.testing.assert_array_equal((t + 1).numpy(), write_values + 1)
    np.testing.assert_array_equal(value.numpy(), np.arange(5) + 1)  # computed before: kept its own values


def test_a_write_into_a_tensor_a_lazy_graph_reads_keeps_the_old_values_there(device):
    t = Tensor(np.arange(5, dtype=np.float32), device=device).realize()
    node = t.uop
    before = t * 10  # built before the write: keeps reading 0..4
    buf = REALIZATION.prepare_write(t)
    assert t.uop is not node  # (a new name: the old one keeps the old contents for ``before``)
    buf.copyin(np.full(5, 7, np.float32).data)
    np.testing.assert_array_equal(before.numpy(), np.arange(5) * 10)
    np.testing.assert_array_equal(t.numpy(), np.full(5, 7))
    del before
    gc.collect()
    node = t.uop
    REALIZATION.prepare_write(t).copyin(np.full(5, 8, np.float32).data)  # nothing reads it now: in place
    assert t.uop is node
    np.testing.assert_array_equal(t.numpy(), np.full(5, 8))


def test_sole_buffer_says_when_nothing_but_the_node_reads_the_memory(device):
    """The receive pool's check before writing a new value into memory it hands out again over the same node."""
    base = filled(device, np.zeros(8, np.float32), header=16)
    unwatched = Tensor.from_buffer(filled(device, np.zeros(2, np.float32)).view(2, dtypes.float32))
    REALIZATION.watch_memory(base)
    view = base.view(8, dtypes.float32, 16)
    node = Tensor.from_buffer(view, (2, 4)).uop
    gc.collect()
    assert REALIZATION.sole_buffer(node) is view
    assert REALIZATION.sole_buffer(unwatched.uop) is None  # (its other names are not known: never "unread")
    readers = [lambda t: t, lambda t: t * 2, lambda t: t.T, lambda t: t[1:].realize(),
               lambda t: Tensor.from_buffer(base.view(2, dtypes.float32, 16)), lambda t: t.reshape(8)]
    for i, read in enumerate(readers):
        t = Tensor(node, device=view.device)
        REALIZATION.hold(t)
        kept = read(t)
        del t
        gc.collect()
        assert REALIZATION.sole_buffer(node) is None, f"reader {i} is not seen"
        del kept
        gc.collect()
        assert REALIZATION.sole_buffer(node) is view, f"reader {i} is still seen"
    t = Tensor(node, device=view.device)
    REALIZATION.hold(t)
    t.assign(t + 1)  # a pending write
    del t
    gc.collect()
    assert REALIZATION.sole_buffer(node) is None
    assert REALIZATION.sole_buffer(node) is None  # (the write's new name is alive: the write is pending)
    np.testing.assert_array_equal(Tensor(node, device=view.device).numpy(), np.zeros((2, 4)))  # (built before it)


def test_over_is_a_tensor_of_the_node_that_reads_it(device):
    """``Tensor.over(node, device)`` (a transport's pooled results) has the node's values, no graph, and reads the
    node as ``Tensor(node, device)`` does: ``sole_buffer`` says no while it is alive."""
    base = filled(device, np.arange(8, dtype=np.float32), header=16)
    REALIZATION.watch_memory(base)
    view = base.view(8, dtypes.float32, 16)
    node = Tensor.from_buffer(view, (2, 4)).uop
    gc.collect()
    t = Tensor.over(node, view.device)
    assert (t.uop, t.device, t.requires_grad, t.grad) == (node, Tensor(node, device=device).device, None, None)
    gc.collect()
    assert REALIZATION.sole_buffer(node) is None
    np.testing.assert_array_equal((t * 2).numpy(), np.arange(8, dtype=np.float32).reshape(2, 4) * 2)
    del t
    gc.collect()
    assert REALIZATION.sole_buffer(node) is view


def test_a_lease_is_returned_only_when_nothing_else_read_the_memory(device):
    """``lend``/``returned``: the constant-time check the receive pool asks before ``sole_buffer``. While the lent
    tensor or anything that read the memory after it (every reader kind of the test above, a JIT capture, a write
    under way) is alive, ``returned`` says no; when it says yes, ``sole_buffer`` says the same, and the tensor lent
    follows writes into its memory like any held tensor."""
    import tgcore

    def pooled() -> tuple[Buffer, Buffer, object]:
        base = filled(device, np.zeros(8, np.float32), header=16)
        REALIZATION.watch_memory(base)
        view = base.view(8, dtypes.float32, 16)
        return base, view, Tensor.from_buffer(view, (2, 4)).uop
    base, view, node = pooled()
    gc.collect()
    assert REALIZATION.sole_buffer(node) is view
    x = Tensor(np.ones((2, 4), np.float32), device=device).realize()
    readers = [lambda t: t, lambda t: t * 2, lambda t: t.T, lambda t: t[1:].realize(),
               lambda t: Tensor.from_buffer(base.view(2, dtypes.float32, 16)), lambda t: t.reshape(8),
               lambda t: tgcore.jit(lambda y: (y + t).realize()), lambda t: Tensor(t)]
    lease = None
    for i, read in enumerate(readers):
        t = Tensor(node, device=view.device)
        lease = REALIZATION.lend(node, t, lease)
        assert REALIZATION.returned(lease) is None, "the tensor lent is alive"
        kept = read(t)
        if i == 6:  # (the jitted function: called, captured, replayed)
            for _ in range(3):
                kept(x)
        del t
        gc.collect()
        assert REALIZATION.returned(lease) is None, f"reader {i} is not seen"
        assert REALIZATION.sole_buffer(node) is None, f"reader {i} is not seen"
        del kept
        gc.collect()
        assert REALIZATION.sole_buffer(node) is view, f"reader {i} is still seen"
    for _ in range(3):  # nothing but the tensor lent: returned, and the memory takes the next value in place
        t = Tensor(node, device=view.device)
        lease = REALIZATION.lend(node, t, lease)
        write(view, np.full(8, 5, np.float32))
        np.testing.assert_array_equal(t.numpy(), np.full((2, 4), 5))
        del t
        gc.collect()
        assert REALIZATION.returned(lease) is view
        assert REALIZATION.sole_buffer(node) is view
    t = Tensor(node, device=view.device)  # a write through a view of it: the lent tensor follows it (held) ...
    lease = REALIZATION.lend(node, t, lease)
    t[0:1].assign(Tensor(np.full((1, 4), 7, np.float32), device=device)).realize()
    np.testing.assert_array_equal(t.numpy(), [[7] * 4, [5] * 4])
    del t
    gc.collect()
    assert REALIZATION.returned(lease) is not view  # ... and the node keeps the old values, in a copy
    assert REALIZATION.sole_buffer(node) is not view
    np.testing.assert_array_equal(Tensor(node, device=view.device).numpy(), np.full((2, 4), 5))
    base, view, node = pooled()  # a write under way (a receive into the tensor lent) outlives it
    t = Tensor(node, device=view.device)
    lease = REALIZATION.lend(node, t)
    REALIZATION.prepare_write(t, finish=lambda: None)
    del t
    gc.collect()
    assert REALIZATION.returned(lease) is None
    assert REALIZATION.sole_buffer(node) is None

def test_sole_buffer_sees_a_jit_capture_that_reads_the_memory_as_a_constant(device):
    """A pooled result used inside a jitted function (captured, not an argument), then dropped by the user: the
    capture's kernels still read the memory, so the pool must not take it for the next message while the capture
    lives (its replays would read that message)."""
    import tgcore
    old = np.arange(8, dtype=np.float32)
    base = filled(device, np.zeros(8, np.float32), header=16)
    REALIZATION.watch_memory(base)
    view = base.view(8, dtypes.float32, 16)
    node = Tensor.from_buffer(view, (8,)).uop
    write(view, old)  # the first message
    weights = [Tensor(node, device=view.device)]  # (the user's reference to the result)
    REALIZATION.hold(weights[0])
    f = tgcore.jit(lambda x: (x + weights[0]).realize())
    x = Tensor(np.ones(8, np.float32), device=device).realize()
    for _ in range(3):  # plain call, capture, replay
        np.testing.assert_array_equal(f(x).numpy(), old + 1)
    weights.clear()
    gc.collect()
    if REALIZATION.sole_buffer(node) is not None:  # the pool's take: the next message lands in free memory
        write(view, -old)
    np.testing.assert_array_equal(f(x).numpy(), old + 1)  # (the replay still reads the first message)
    assert REALIZATION.sole_buffer(node) is None
    del f
    gc.collect()
    assert REALIZATION.sole_buffer(node) is view  # (nothing reads it once the capture is gone)

"""The receive pool (``RecvPool``) without MPI: a result's memory is handed out again only once nothing reads it.

Each round takes a result, writes the round's "message" into it, and keeps the result (or something that reads
its memory) or drops it; at the end everything kept must still hold its round's values (numpy reference), while
dropped results' memory was reused. A pool that handed out memory something still reads fails here.
"""
from __future__ import annotations

import numpy as np
from tg_mlx_rdma.transport import RecvPool, as_dtype

from tgcore import Tensor

N = 256


def fill(mv: memoryview, value: int) -> None:
    np.frombuffer(mv, dtype=np.float32)[:] = value


def keep(kind: int, t: Tensor, i: int) -> tuple[object, np.ndarray] | None:
    """Something that reads round ``i``'s result ``t`` (or None: the result is dropped), and its expected value."""
    want = np.full(N, i, np.float32)
    if kind == 0:
        return t, want  # the tensor itself
    if kind == 1:
        return t * 2 + 1, want * 2 + 1  # a lazy graph of it
    if kind == 2:
        return t[3:9].realize(), want[3:9]  # a realized slice: a view of the same memory
    if kind == 3:
        return t.reshape(16, 16).T, want.reshape(16, 16).T  # a movement view, lazy
    if kind == 4:
        t.assign(t + 1)  # a pending write into its memory (runs when something reads t)
        return t * 1, want + 1
    return None


def test_pool_never_hands_out_memory_still_read() -> None:
    pool = RecvPool()
    dt = as_dtype("float32")
    kept: list[tuple[int, object, np.ndarray]] = []
    for i in range(60):
        if i % 3 == 0:
            pool.prepare((N,), dt, None)  # a result made ahead must not alias one in use either
        t, mv, commit = pool.take((N,), dt, None)
        fill(mv, i)
        commit()
        np.testing.assert_array_equal(t.numpy(), np.full(N, i, np.float32), err_msg=f"round {i}")
        held = keep(i % 7, t, i)
        if held is not None:
            kept.append((i, *held))
        del t, mv, held
        while kept and kept[0][0] <= i - 3:  # checked (and dropped) after three more results were written
            j, obj, want = kept.pop(0)
            np.testing.assert_array_equal(obj.numpy(), want,  # type: ignore[attr-defined]
                                          err_msg=f"what was kept of round {j} was overwritten by round {i}")
            del obj
    assert pool.hits >= 20, (pool.hits, pool.misses)  # dropped results' memory was reused


def test_pool_result_is_its_buffer() -> None:
    """A pooled result's elements are its buffer's whole memory (nothing in front: MPI's single copy is slower into
    memory at another offset in its page than the sender's); empty and oversized messages are not pooled."""
    pool = RecvPool()
    dt = as_dtype("int32")
    got = pool.take_key(((5, 3), dt, None))
    assert got is not None
    t, pooled = got
    assert pooled.elements.nbytes == 15 * 4
    np.frombuffer(pooled.elements, dtype=np.int32)[:] = np.arange(15)
    np.testing.assert_array_equal(t.numpy(), np.arange(15, dtype=np.int32).reshape(5, 3))
    assert pool.take_key(((0,), dt, None)) is None
    assert pool.take_key(((RecvPool.MAX_MESSAGE // 4 + 1,), dt, None)) is None


def test_pool_rewrites_a_reused_buffer_as_a_write() -> None:
    """A value computed from a dropped result and realized is not served from the cache after its memory is reused."""
    pool = RecvPool()
    dt = as_dtype("float32")
    t, mv, _ = pool.take((N,), dt, None)
    fill(mv, 7)
    doubled = (t * 2).realize()
    np.testing.assert_array_equal(doubled.numpy(), np.full(N, 14, np.float32))
    del t, doubled
    for i in range(4):
        t, mv, _ = pool.take((N,), dt, None)
        fill(mv, i)
        np.testing.assert_array_equal((t * 2).numpy(), np.full(N, 2 * i, np.float32))
        del t, mv


def test_send_view_follows_writes_into_the_tensor() -> None:
    """``tensor_bytes`` remembers the memory of tensors sent recently; a write gives the tensor a new node, and the
    bytes sent next are the new values (numpy reference)."""
    from tg_mlx_rdma.transport import tensor_bytes
    t = Tensor(np.arange(8, dtype=np.float32)).realize()
    for step in range(3):
        mv, keep = tensor_bytes(t)
        np.testing.assert_array_equal(np.frombuffer(mv, np.float32), np.arange(8, dtype=np.float32) * 2 ** step)
        assert keep is t
        t.assign(t * 2).realize()
    lazy = t + 1  # not realized: sent as its values
    mv, keep = tensor_bytes(lazy)
    np.testing.assert_array_equal(np.frombuffer(mv, np.float32), np.arange(8, dtype=np.float32) * 8 + 1)


def test_send_view_of_a_view_keeps_the_values_it_was_built_from() -> None:
    """A view sent, then its base written by an assign (which copies the old values aside for the view): the view is
    still its old values, and so are the bytes sent next (review: the remembered memoryview was the written memory)."""
    from tg_mlx_rdma.transport import message_of, tensor_bytes
    a = Tensor(np.arange(8, dtype=np.float32)).realize()
    x = a.reshape(2, 4)
    tensor_bytes(x)
    a.assign(Tensor(np.full(8, -1, np.float32))).realize()
    np.testing.assert_array_equal(x.numpy().ravel(), np.arange(8, dtype=np.float32))
    for send in (tensor_bytes, message_of):
        np.testing.assert_array_equal(np.frombuffer(send(x)[0], np.float32), np.arange(8, dtype=np.float32))


def test_send_view_is_forgotten_with_its_tensor() -> None:
    """The remembered memoryview goes when the tensor's node does: it never keeps freed memory alive."""
    import gc

    from tg_mlx_rdma import transport
    t = Tensor(np.arange(1000, dtype=np.float32)).realize()
    transport.tensor_bytes(t)
    key = id(t.uop)
    assert key in transport._SEND_VIEWS
    del t
    gc.collect()
    assert key not in transport._SEND_VIEWS


def test_pool_keeps_memory_a_jit_capture_reads() -> None:
    """A result used inside a jitted function as a constant (not an argument) and then dropped: the capture's
    replays read its memory, so the pool must not write the next messages there while the capture lives."""
    import gc

    import tgcore
    pool = RecvPool()
    dt = as_dtype("float32")
    t, mv, commit = pool.take((N,), dt, None)
    fill(mv, 5)
    commit()
    weights = [t]
    f = tgcore.jit(lambda x: (x + weights[0]).realize())
    x = Tensor(np.ones(N, np.float32)).realize()
    del t, mv
    for _ in range(3):  # plain call, capture, replay
        np.testing.assert_array_equal(f(x).numpy(), np.full(N, 6, np.float32))
    weights.clear()
    gc.collect()
    for i in range(RecvPool.PER_KEY + 1):  # the next messages land elsewhere
        t, mv, commit = pool.take((N,), dt, None)
        fill(mv, 100 + i)
        commit()
        del t, mv
        np.testing.assert_array_equal(f(x).numpy(), np.full(N, 6, np.float32), err_msg=f"message {i}")


def test_pool_gives_back_a_buffer_an_assign_copied_aside_at_the_next_take() -> None:
    """An assign into a result copies the old contents aside for the pool's node, so that buffer can never be handed
    out again: it leaves the pool at the next take of its key, also when another buffer is free (a hit)."""
    pool = RecvPool()
    dt = as_dtype("float32")
    t, mv, _ = pool.take((N,), dt, None)
    fill(mv, 3)
    u, mv2, _ = pool.take((N,), dt, None)  # a second buffer (t is alive)
    del u, mv2
    t.assign(t + 1).realize()  # the pool's node still names the old contents: they go to a copy
    np.testing.assert_array_equal(t.numpy(), np.full(N, 4, np.float32))
    held = pool._bytes
    hits = pool.hits
    v, mv3, _ = pool.take((N,), dt, None)  # the second buffer, free again: a hit
    assert pool.hits == hits + 1
    assert pool._bytes == held - N * 4, "the copied-aside buffer is still counted in the pool"
    fill(mv3, 9)
    np.testing.assert_array_equal(t.numpy(), np.full(N, 4, np.float32))  # (t's own memory untouched)
    np.testing.assert_array_equal(v.numpy(), np.full(N, 9, np.float32))

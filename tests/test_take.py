"""Tensor.take (an indexed load: torch.take) against numpy's take, on every test device."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def test_take_reads_the_flattened_table_at_each_index(device):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((4, 8)).astype(np.float32)
    index = rng.integers(0, 32, (3, 5)).astype(np.int32)
    out = Tensor(table, device=device).take(Tensor(index, device=device))
    assert out.shape == (3, 5) and out.dtype.name == "float32"
    np.testing.assert_array_equal(out.numpy(), np.take(table, index))


def test_take_with_a_computed_index_fuses_into_the_consumer(device):
    """The index is computed in the kernel (bytes masked and shifted), the gathered values feed a reduction."""
    rng = np.random.default_rng(1)
    table = rng.integers(-1000, 1000, 256).astype(np.int32)
    raw = rng.integers(0, 256, (7, 16)).astype(np.uint8)
    index = (Tensor(raw, device=device).cast("int32") ^ 0x5A) & 0xFF
    out = Tensor(table, device=device).take(index).sum(axis=1)
    np.testing.assert_array_equal(out.numpy(), np.take(table, (raw.astype(np.int32) ^ 0x5A) & 0xFF).sum(axis=1))


@pytest.mark.parametrize("size", [16, 10, 64])
@pytest.mark.parametrize("rows", [8, 5])
def test_take_of_unpacked_bits_in_a_matvec(device, size, rows):
    """A matrix-vector product whose weights are a table looked up at the nibbles of bytes (IQ4_NL's pattern): a
    vectorized reduction gathers its lanes (in registers from a 16-float table on the C renderer); a gate stays
    where a nibble can fall outside a smaller table."""
    rng = np.random.default_rng(size + rows)
    table = rng.integers(-127, 128, size).astype(np.float32)
    raw = rng.integers(0, 256, (rows, 64)).astype(np.uint8)
    x = rng.standard_normal(128).astype(np.float32)
    b = Tensor(raw, device=device).cast("int32")
    bits = 6 if size == 64 else 4
    nibbles = ((b.reshape(rows, 64, 1) >> Tensor([0, 4], dtype="int32", device=device).reshape(1, 1, 2))
               & ((1 << bits) - 1)).reshape(rows, 128)
    out = Tensor(table, device=device).take(nibbles) @ Tensor(x, device=device)
    ref_bits = ((raw.astype(np.int32)[:, :, None] >> np.array([0, 4])) & ((1 << bits) - 1)).reshape(rows, 128)
    ref = np.where(ref_bits < size, table[np.minimum(ref_bits, size - 1)], 0).astype(np.float64) @ x
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-4)


def test_take_out_of_range_reads_zero(device):
    table = np.arange(1, 9, dtype=np.int32)
    index = np.array([-1, 0, 7, 8, 1000], np.int32)
    out = Tensor(table, device=device).take(Tensor(index, device=device) * 1)  # lazy: not checked up front
    assert out.numpy().tolist() == [0, 1, 8, 0, 0]


def test_take_refuses_non_integer_indices():
    with pytest.raises(TypeError, match="integer index tensor"):
        Tensor(np.zeros(4, np.float32)).take(Tensor(np.zeros(2, np.float32)))
    with pytest.raises(TypeError, match="integer index tensor"):
        Tensor(np.zeros(4, np.float32)).take(np.zeros(2, np.int32))


def test_take_gradient_sums_into_each_read_entry(device):
    """Repeated indices add up, an index out of range sends nothing back (numpy's add.at as the reference)."""
    rng = np.random.default_rng(4)
    table_np = rng.standard_normal((3, 4)).astype(np.float32)
    index_np = np.array([[0, 5, 5], [11, 12, -1]], np.int32)  # 12 and -1: out of range, read 0
    weights = rng.standard_normal(index_np.shape).astype(np.float32)
    table = Tensor(table_np, device=device, requires_grad=True)
    (table.take(Tensor(index_np, device=device)) * Tensor(weights, device=device)).sum().backward()
    want = np.zeros(12, np.float32)
    inside = (index_np >= 0) & (index_np < 12)
    np.add.at(want, index_np[inside], weights[inside])
    np.testing.assert_allclose(table.grad.numpy(), want.reshape(3, 4), rtol=1e-6)


# ---- assign into a take: a scatter into the table's memory ----

def test_assign_into_a_take_writes_the_indexed_entries_in_place(device):
    rng = np.random.default_rng(7)
    table = rng.standard_normal((6, 8)).astype(np.float32)
    t = Tensor(table, device=device).realize()
    index = rng.permutation(48)[:10].reshape(2, 5).astype(np.int32)
    values = rng.standard_normal((2, 5)).astype(np.float32)
    t.take(Tensor(index, device=device)).assign(Tensor(values, device=device))
    expected = table.copy().reshape(-1)
    expected[index.reshape(-1)] = values.reshape(-1)
    np.testing.assert_array_equal(t.numpy(), expected.reshape(6, 8))


def test_assign_into_a_take_skips_indices_outside_the_table(device):
    t = Tensor(np.zeros(8, np.int32), device=device).realize()
    index = Tensor(np.array([-1, 2, 8, 1000, 7], np.int32), device=device)
    t.take(index).assign(Tensor(np.array([1, 2, 3, 4, 5], np.int32), device=device))
    np.testing.assert_array_equal(t.numpy(), [0, 0, 2, 0, 0, 0, 0, 5])


def test_assign_into_a_take_keeps_what_was_read_before(device):
    """A lazy tensor built from the table before the write keeps the old values (as for a view's assign)."""
    t = Tensor(np.arange(6, dtype=np.float32), device=device).realize()
    before = t * 1
    t.take(Tensor(np.array([1, 4], np.int32), device=device)).assign(Tensor([10.0, 40.0], device=device))
    np.testing.assert_array_equal(before.numpy(), np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(t.numpy(), [0, 10, 2, 3, 40, 5])


def test_assign_into_a_take_of_a_lazy_table_is_an_error(device):
    from tgcore.errors import TensorValueError
    lazy = Tensor(np.zeros(4, np.float32), device=device) + 1
    with pytest.raises(TensorValueError, match="realize the table"):
        lazy.take(Tensor(np.array([0], np.int32), device=device)).assign(Tensor([2.0], device=device))


def test_rows_scattered_into_a_cache_per_step_under_jit(device):
    """The KV-cache pattern: each step writes one row per sequence at that sequence's own slot, in one kernel
    computed from a small per-row base index; a jitted step replays with new slots and values (numpy reference)."""
    import tgcore
    seqs, heads, slots, dim = 3, 2, 16, 4
    cache = Tensor(np.zeros((seqs, heads, slots, dim), np.float32), device=device).realize()
    within = Tensor((np.arange(heads)[:, None] * slots * dim + np.arange(dim)[None, :]).astype(np.int32),
                    device=device).realize()  # (heads, dim): an element's offset from its row's first

    def step(base: Tensor, rows: Tensor) -> None:
        cache.reshape(-1).take(base.reshape(seqs, 1, 1) + within.reshape(1, heads, dim)).assign(rows * 2)

    jitted = tgcore.jit(step)
    expected = np.zeros((seqs, heads, slots, dim), np.float32)
    rng = np.random.default_rng(3)
    for _ in range(5):
        slot = rng.integers(0, slots, seqs)
        rows = rng.standard_normal((seqs, heads, dim)).astype(np.float32)
        base = ((np.arange(seqs) * heads * slots + slot) * dim).astype(np.int32)
        jitted(Tensor(base, device=device), Tensor(rows, device=device))
        expected[np.arange(seqs), :, slot, :] = rows * 2
        np.testing.assert_array_equal(cache.numpy(), expected)


@pytest.mark.parametrize("indices", ["lazy_slice", "realized_slice", "square", "transposed"])
def test_assign_into_a_take_whose_indices_read_the_table(device, indices):
    """The indices are read before any element is written (numpy's ``t[t[:2]] = v``), also when they are a slice of
    the table itself (lazy, or realized: a view of the same memory)."""
    ref = np.array([1, 0, 3, 2, 0, 0, 0, 0], np.int32)
    t = Tensor(ref, device=device).contiguous().realize()
    index, ref_index, values = {"lazy_slice": (t[:2], ref[:2], [5, 6]),
                                "realized_slice": (t[:2].realize(), ref[:2], [5, 6]),
                                "square": (t[:4].reshape(2, 2), ref[:4].reshape(2, 2), [[5, 6], [7, 8]]),
                                "transposed": (t[:4].reshape(2, 2).permute(1, 0), ref[:4].reshape(2, 2).T,
                                               [[5, 6], [7, 8]])}[indices]
    t.take(index).assign(Tensor(np.array(values, np.int32), device=device))
    ref[ref_index.copy()] = values
    np.testing.assert_array_equal(t.numpy(), ref)


def test_assign_of_a_realized_overlapping_slice_reads_the_old_values(device):
    """``t[1:201] = t[0:200]`` through a realized view of the source (memory it overwrites): numpy's result."""
    ref = np.arange(300, dtype=np.int32)
    t = Tensor(ref, device=device).contiguous().realize()
    t[1:201].assign(t[0:200].realize())
    ref[1:201] = ref[0:200].copy()
    np.testing.assert_array_equal(t.numpy(), ref)


def test_assign_into_a_view_of_a_take_is_refused_at_once(device):
    """Refused when asked, with the table unchanged (it used to be accepted and then fail on the next read, the write
    lost); a take of an expanded table names the real cause."""
    from tgcore.errors import TensorValueError
    t = Tensor(np.arange(6, dtype=np.float32), device=device).contiguous().realize()
    index = Tensor(np.array([0, 1, 2, 3], np.int32), device=device)
    with pytest.raises(TensorValueError, match="view of a take"):
        t.take(index).reshape(2, 2).assign(Tensor(np.ones((2, 2), np.float32), device=device))
    with pytest.raises(TensorValueError, match="view of a take"):
        t.take(index)[1:3].assign(Tensor(np.ones(2, np.float32), device=device))
    np.testing.assert_array_equal(t.numpy(), np.arange(6, dtype=np.float32))
    wide = t.reshape(1, 6).expand(2, 6).reshape(12)
    with pytest.raises(TensorValueError, match="expanded or padded"):
        wide.take(index).assign(Tensor(np.ones(4, np.float32), device=device))

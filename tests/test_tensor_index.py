"""Indexing, joining, splitting and padding modes against numpy (with torch's rule for where advanced-index axes go),
on every device in ``TG_TEST_DEVICES``."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tgcore.dtype import dtypes
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]

A = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5) - 20.5
MASK = (A.astype(np.int64) % 3) == 0


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def check(t: Tensor, ref: np.ndarray) -> None:
    got = t.numpy()
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_array_equal(got, ref)


def kernels_for(t: Tensor) -> int:
    """Kernels a realize of ``t`` would run (counted from the schedule, nothing runs)."""
    from tgcore.schedule.kernelize import create_schedule
    items, _ = create_schedule([t.uop], t.device)
    return len([i for i in items if i.kind != "copy"])


# ---------------------------------------------------------------- __getitem__

BASIC = [
    (1,), (-1,), (-1, 2), (0, -1, -5), (slice(None, None, 2),), (slice(1, None, 3),), (slice(None, None, -1),),
    (slice(None, None, -1), slice(1, None, 3)), (Ellipsis, slice(4, 0, -2)), (slice(-2, None), Ellipsis, 0),
    (None, 1, None, slice(1, 3)), (Ellipsis, None), (slice(5, 1),), (slice(1, 1), 0), (slice(-100, 100, 7),),
    (1, slice(None, None, -3), slice(None, None, 2)), (), (Ellipsis,), (None,),
]
ADVANCED = [
    (np.array([0, 2, 1, 2]),), ([-1, 0],), (np.array([[0, 1], [2, 0]]), slice(None), np.array([1, 4])),
    (0, slice(None), [1, 2]), (slice(None), [0, 3], [1, 2]), (Ellipsis, [-1, 0]),
    (1, [[0], [3]], slice(None, None, -2)), (slice(None, None, 2), [1, 1, 0], None), (np.array([], np.int64),),
    (MASK[..., 0],), (MASK,), (slice(1, None), MASK[0, :, 0]), (MASK[:, :, 0], 3), (MASK[:, 0, 0], None, 1),
]


@pytest.mark.parametrize("index", BASIC, ids=repr)
def test_getitem_basic(device, index):
    check(Tensor(A, device=device)[index], A[index])


def _split_ints(index):
    """torch's rule as two numpy steps: the ints first (basic indexing, a view), then the rest. (numpy counts ints
    next to arrays as advanced when placing the result axes: ``x[0, :, [1, 2]]`` differs; tgcore follows torch.)"""
    items = index if isinstance(index, tuple) else (index,)
    first = []
    for it in items:
        if isinstance(it, (int, np.integer)) or it is Ellipsis:
            first.append(it)
        elif isinstance(it, np.ndarray) and it.dtype == np.bool_:
            first.extend([slice(None)] * it.ndim)
        elif it is not None:
            first.append(slice(None))
    return tuple(first), tuple(it for it in items if not isinstance(it, (int, np.integer)))


def ref_getitem(arr: np.ndarray, index) -> np.ndarray:
    ints, rest = _split_ints(index)
    return arr[ints][rest]


@pytest.mark.parametrize("index", ADVANCED, ids=lambda i: repr(i).replace("\n", ""))
def test_getitem_advanced(device, index):
    check(Tensor(A, device=device)[index], ref_getitem(A, index))


def test_getitem_non_contiguous_input(device):
    t = Tensor(A, device=device).permute(2, 0, 1).flip(1)[1:]
    ref = A.transpose(2, 0, 1)[:, ::-1][1:]
    check(t[::2, -1], ref[::2, -1])
    check(t[:, [2, 0], 1::2], ref[:, [2, 0], 1::2])
    check(t[..., ::-1][[0, 3]], ref[..., ::-1][[0, 3]])


def test_getitem_index_tensor(device):
    t = Tensor(A, device=device)
    idx = Tensor(np.array([[2, 0], [-1, 1]], np.int32), device=device)
    check(t[idx], A[np.array([[2, 0], [-1, 1]])])
    check(t[:, idx.realize(), 4], A[:, np.array([[2, 0], [-1, 1]]), 4])
    lazy = Tensor.arange(3, device=device) + 1  # a lazy index tensor is fused into the same kernel
    check(t[1, lazy], A[1, np.arange(3) + 1])


def test_getitem_bool_tensor_mask(device):
    t = Tensor(A, device=device)
    check(t[t > 10], A[A > 10])
    check(t[Tensor(MASK[:, 0, 0], device=device)], A[MASK[:, 0, 0]])


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.bool, dtypes.float16, dtypes.int64], ids=str)
def test_getitem_dtypes(device, dt):
    a = np.arange(-10, 14).reshape(4, 6).astype(dt.np)
    t = Tensor(a, device=device)
    check(t[::-2, 1::2], a[::-2, 1::2])
    check(t[[3, 0, 3], -1], a[[3, 0, 3], -1])
    check(t[[1, 2]][:, [5, 0]], a[[1, 2]][:, [5, 0]])


def test_strided_slices_are_views(device):
    t = Tensor(A, device=device)
    assert kernels_for(t[::2, ::-1, 1::3] * 2) == 1  # the view fuses into the consumer: no copy kernel
    assert kernels_for(t[1]) == 0  # a contiguous slice of a buffer is a view of it
    assert kernels_for(t[Tensor([0, 2], device=device)] + 1) == 1  # the one-hot gather fuses too


def test_getitem_errors(device):
    t = Tensor(A, device=device)
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="index -6 is out of range for axis 2 with size 5"):
        t[0, 0, -6]
    with pytest.raises(IndexError, match="index 4 is out of range for axis 1 with size 4"):
        t[:, [0, 4]]
    with pytest.raises(IndexError, match="index 7 is out of range for axis 0"):
        t[Tensor([1, 7], device=device).realize()]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        t[..., 0, ...]
    with pytest.raises(IndexError, match="does not match"):
        t[MASK[0]]
    with pytest.raises(IndexError, match="integer or bool"):
        t[Tensor([0.5], device=device)]
    with pytest.raises(TypeError, match="unsupported index"):
        t["a"]
    with pytest.raises(ValueError, match="step"):
        t[::0]


# ---------------------------------------------------------------- __setitem__

@pytest.mark.parametrize("index", [(1,), (-1, 2), (slice(None, None, 2),), (slice(None, None, -1), slice(1, None, 3)),
                                   (Ellipsis, slice(4, 0, -2)), (None, 1, None, slice(1, 3)), (slice(5, 1),),
                                   (np.array([0, 2]),), (0, slice(None), [1, 2]), (slice(None), [0, 3], [1, 2]),
                                   (MASK,), (1, [[0], [3]], slice(None, None, -2))],
                         ids=lambda i: repr(i).replace("\n", ""))
def test_setitem(device, index):
    ref = A.copy()
    ints, rest = _split_ints(index)
    value = np.arange(ref[ints][rest].size, dtype=np.float32).reshape(ref[ints][rest].shape) * 10
    ref[ints][rest] = value  # (ref[ints] is a view)
    t = Tensor(A, device=device)
    t[index] = Tensor(value, device=device)
    check(t, ref)
    ref[ints][rest] = -7
    t[index] = -7
    check(t, ref)


def test_setitem_broadcast_value_and_repeats(device):
    ref, t = A.copy(), Tensor(A, device=device)
    row = np.array([1, 2, 3, 4, 5], np.float32)
    ref[:, 1:3] = row
    t[:, 1:3] = Tensor(row, device=device)
    check(t, ref)
    ref[[0, 2, 0]] = np.float32(9)  # repeated index: the last write wins (all equal here)
    t[[0, 2, 0]] = 9
    check(t, ref)
    ref, t = np.zeros(4, np.float32), Tensor.zeros(4, device=device)
    t[[1, 3, 1]] = Tensor([5.0, 6.0, 7.0], device=device)
    ref[[1, 3]] = [7.0, 6.0]  # numpy's documented outcome for repeats: the last value
    check(t, ref)


def test_setitem_is_functional(device):
    t = Tensor(A, device=device)
    before = t + 0  # derived before the assignment: keeps the old values
    t[0] = 0.0
    check(before, A)
    t[t < 0] = 1.5  # a mask read from the tensor itself
    ref = A.copy()
    ref[0] = 0
    ref[ref < 0] = 1.5
    check(t, ref)
    t[1, 2] = Tensor(3, device=device).cast(dtypes.int32)  # other dtypes are cast to the tensor's
    ref[1, 2] = 3
    assert t.dtype is dtypes.float32
    check(t, ref)
    with pytest.raises(ValueError, match="cannot assign a value of shape"):
        t[0] = Tensor.ones(3, device=device)


# ---------------------------------------------------------------- gather / scatter / masked_fill / one_hot

def test_gather(device):
    rng = np.random.default_rng(0)
    idx = rng.integers(-4, 4, size=(3, 2, 5))  # negative indices count from the end
    check(Tensor(A, device=device).gather(1, idx), np.take_along_axis(A, idx % 4, 1))
    idx2 = rng.integers(0, 5, size=(2, 4, 3))
    check(Tensor(A, device=device).gather(-1, Tensor(idx2.astype(np.int32), device=device)),
          np.take_along_axis(A[:2], idx2, 2))
    with pytest.raises(ValueError, match="larger than the tensor"):
        Tensor(A, device=device).gather(1, np.zeros((4, 1, 1), np.int64))
    with pytest.raises(IndexError, match="out of range for axis 1"):
        Tensor(A, device=device).gather(1, np.full((1, 1, 1), 4))


def test_scatter(device):
    idx = np.array([[1, 0, 3, 1]])  # repeated index 1 in the first row; index is smaller than x on axis 0
    src = np.arange(12, dtype=np.float32).reshape(3, 4) + 100
    x = np.zeros((3, 5), np.float32)
    t = Tensor(x, device=device)
    ref = x.copy()
    ref[0, [1, 0, 3]] = [103, 101, 102]  # last write wins at [0, 1]
    check(t.scatter(1, idx, Tensor(src, device=device)), ref)
    ref_add = x.copy()
    np.add.at(ref_add, (np.zeros(4, int), idx[0]), src[0])
    check(t.scatter(1, idx, Tensor(src, device=device), reduce="add"), ref_add)
    ref_mul = np.ones((3, 5), np.float32)
    np.multiply.at(ref_mul, (np.zeros(4, int), idx[0]), src[0])
    check((t + 1).scatter(1, idx, Tensor(src, device=device), reduce="multiply"), ref_mul)
    ref2 = x.copy()
    ref2[2, 0], ref2[0, 1] = 7, 7
    check(t.scatter(0, np.array([[2, 0]]), 7.0), ref2)


def test_masked_fill_and_one_hot(device):
    t = Tensor(A, device=device)
    check(t.masked_fill(Tensor(MASK, device=device), -1.0), np.where(MASK, np.float32(-1), A))
    ti = Tensor(A.astype(np.int32), device=device)
    check(ti.masked_fill(Tensor(MASK, device=device), 2.9), np.where(MASK, 2, A.astype(np.int32)))
    labels = np.array([[0, 3], [2, 2]])
    check(Tensor(labels, device=device).one_hot(5), np.eye(5, dtype=np.int32)[labels])
    check(Tensor(labels, device=device).one_hot(), np.eye(4, dtype=np.int32)[labels])
    with pytest.raises(TypeError, match="integer tensor"):
        t.one_hot(3)


# ---------------------------------------------------------------- shape helpers, joining and splitting

def test_unflatten_repeat(device):
    t = Tensor(A, device=device)
    check(t.unflatten(2, (5, 1)), A.reshape(3, 4, 5, 1))
    check(t.unflatten(-2, (2, -1)), A.reshape(3, 2, 2, 5))
    check(t.repeat(2, 1, 3), np.tile(A, (2, 1, 3)))
    check(t.repeat(2, 1, 1, 1), np.tile(A, (2, 1, 1, 1)))
    check(t[:, ::-1].repeat((1, 2, 1)), np.tile(A[:, ::-1], (1, 2, 1)))
    check(t.repeat_interleave(2, 1), np.repeat(A, 2, 1))
    check(t.T.repeat_interleave(3), np.repeat(A.T, 3))
    check(t.repeat(1, 0, 1), np.tile(A, (1, 0, 1)))
    with pytest.raises(ValueError, match="one count per axis"):
        t.repeat(2, 2)


def test_cat_stack(device):
    a, b = A[:, :1], A[:, 1:]
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    check(ta.cat(tb, dim=1), A)
    check(Tensor.cat([tb, ta, tb], dim=-2), np.concatenate([b, a, b], -2))
    check(Tensor.cat([ta[:, :0], tb], dim=1), b)
    ti = Tensor(np.ones((3, 1, 5), np.int8), device=device)
    out = ta.cat(ti, dim=1)
    assert out.dtype is dtypes.float32
    check(out, np.concatenate([a, np.ones((3, 1, 5), np.float32)], 1))
    bools = [Tensor(MASK[0], device=device), Tensor(~MASK[1], device=device)]
    check(Tensor.cat(bools), np.concatenate([MASK[0], ~MASK[1]]))
    check(Tensor.stack([ta, ta * 2], dim=1), np.stack([a, a * 2], 1))
    check(ta.stack(ta, ta, dim=-1), np.stack([a, a, a], -1))
    check(Tensor.stack([Tensor(1.0, device=device), Tensor(2.0, device=device)]), np.array([1.0, 2.0], np.float32))
    assert kernels_for(ta.cat(tb, dim=1)) == 1
    with pytest.raises(ValueError, match="differ off that axis"):
        ta.cat(tb, dim=0)
    with pytest.raises(ValueError, match="one shape"):
        ta.stack(tb)


def test_cat_uneven_contiguous_axis(device):
    a = np.arange(8, dtype=np.float32)
    t = Tensor(a, device=device)
    check(Tensor.cat([t[:3], t[3:]]), a)


def test_split_chunk(device):
    t = Tensor(A, device=device)
    for got, ref in zip(t.split(2, dim=1), np.split(A, [2], 1), strict=True):
        check(got, ref)
    parts = t.split([1, 3, 1], dim=-1)
    for got, ref in zip(parts, np.split(A, [1, 4], -1), strict=True):
        check(got, ref)
    assert [p.shape for p in t.split(2)] == [(2, 4, 5), (1, 4, 5)]
    assert [p.shape for p in t.chunk(3, dim=1)] == [(3, 2, 5), (3, 2, 5)]  # torch.chunk: ceil(4/3) = 2 per piece
    for got, ref in zip(t.chunk(3, dim=2), np.array_split(A, [2, 4], 2), strict=True):
        check(got, ref)
    with pytest.raises(ValueError, match="add up"):
        t.split([1, 1])


# ---------------------------------------------------------------- padding modes

NP_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@pytest.mark.parametrize("mode", list(NP_MODE))
@pytest.mark.parametrize("pads", [((0, 0), (1, 2), (3, 0)), ((2, 1), (0, 0), (4, 4)), ((1, 1), (3, 3), (0, 1))])
def test_pad_modes(device, mode, pads):
    if mode == "reflect" and max(max(p) for p in pads) > 2:
        pads = tuple((min(b, 2), min(a, 2)) for b, a in pads)
    t = Tensor(A, device=device)
    check(t.pad_nd(pads, mode=mode), np.pad(A, pads, mode=NP_MODE[mode]))


def test_pad_modes_more(device):
    t = Tensor(A, device=device)
    check(t.pad_nd(((1, 1), None, (2, 0)), value=3.5), np.pad(A, ((1, 1), (0, 0), (2, 0)), constant_values=3.5))
    check(t.T.pad_nd(((1, 1), (0, 2), (1, 0)), mode="reflect"), np.pad(A.T, ((1, 1), (0, 2), (1, 0)), "reflect"))
    check(t.pad_nd(((-1, 1), (0, 0), (1, -2)), mode="replicate"),
          np.pad(A[1:, :, :3], ((0, 1), (0, 0), (1, 0)), "edge"))
    assert kernels_for(t.pad_nd(((1, 1), (2, 2), (1, 1)), mode="reflect")) == 1
    with pytest.raises(ValueError, match="got 2 pairs for a tensor with 3 axes"):
        t.pad_nd(((1, 1), (1, 1)), mode="reflect")
    with pytest.raises(ValueError, match="got 2 for 3 axes"):
        t.pad(((1, 1), (1, 1)))
    with pytest.raises(ValueError, match="at most 2 per side"):
        t.pad_nd(((3, 0), (0, 0), (0, 0)), mode="reflect")
    with pytest.raises(ValueError, match="pad mode must be"):
        t.pad_nd(((1, 0), (0, 0), (0, 0)), mode="mirror")


# ---------------------------------------------------------------- edge cases and a randomized sweep

def test_index_edge_cases(device):
    a = A[0]
    t = Tensor(a, device=device)
    check(t[Tensor(1, device=device)], a[1])  # a 0-d index tensor
    assert t[np.int64(2), np.int32(-1)].item() == a[2, -1]
    z = Tensor(np.zeros((0, 3), np.float32), device=device)
    assert z[1:].shape == (0, 3) and z[:, [0, 2]].shape == (0, 2) and z[np.zeros(0, bool)].shape == (0, 3)
    ref = a.copy()
    t[np.zeros((4, 5), bool)] = 5  # an empty mask writes nothing
    check(t, ref)
    tp = Tensor(a, device=device).T  # assignment into a non-contiguous tensor
    tp[1:, ::2] = 0
    tp[[0, 3], 1] = Tensor([7.0, 8.0], device=device)
    ref = a.T.copy()
    ref[1:, ::2] = 0
    ref[[0, 3], 1] = [7, 8]
    check(tp, ref)
    col = np.arange(3, dtype=np.float32).reshape(3, 1)
    wide = Tensor(col, device=device).expand(3, 4)  # a gather whose value ignores an output axis
    check(wide[:, [0, 2]], np.broadcast_to(col, (3, 4))[:, [0, 2]])
    check(Tensor.ones(2, 3, device=device)[[1, 0, 1]], np.ones((3, 3), np.float32))


def _random_slice(rng: np.random.Generator, size: int) -> slice | int:
    if rng.random() < 0.2:
        return int(rng.integers(-size, size))
    pick = lambda: None if rng.random() < 0.3 else int(rng.integers(-size - 2, size + 3))
    step = int(rng.choice([-3, -2, -1, 1, 2, 3, 4]))
    return slice(pick(), pick(), step)


def test_random_basic_indices_match_numpy(device):
    rng = np.random.default_rng(2024)
    t = Tensor(A, device=device)
    for _ in range(25):
        index = tuple(_random_slice(rng, s) for s in A.shape)
        check(t[index], A[index])
        ref, t2 = A.copy(), Tensor(A, device=device)
        ref[index] = -1
        t2[index] = -1
        check(t2, ref)

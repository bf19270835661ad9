"""Tensor ops against numpy, on every core compute device (CPU through C, PYTHON interpreter).

The device list comes from ``TG_TEST_DEVICES`` (comma-separated) so a backend plugin can run
this same suite on its device (``TG_TEST_DEVICES=CPU:X86``).
"""
from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from tgcore.dtype import DType, dtypes
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]

FLOATS = [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64]
INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32]
ALL = FLOATS + INTS + [dtypes.bool]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def np_dtype(dt: DType):
    return ml_dtypes.bfloat16 if dt is dtypes.bfloat16 else dt.np


def sample(dt: DType, shape, seed=0, low=None, high=None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt is dtypes.bool:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtypes.is_float(dt):
        lo, hi = (-3.0, 3.0) if low is None else (low, high)
        return rng.uniform(lo, hi, size=shape).astype(np_dtype(dt))
    info = np.iinfo(dt.np)
    lo = max(info.min, -100 if low is None else low)
    hi = min(info.max, 100 if high is None else high)
    return rng.integers(lo, hi + 1, size=shape).astype(dt.np)


def to_tensor(arr: np.ndarray, dt: DType, device: str) -> Tensor:
    if dt is dtypes.bfloat16:
        return Tensor(arr.astype(np.float32), device=device, dtype=dt)
    return Tensor(arr, device=device, dtype=dt)


def check(t: Tensor, ref: np.ndarray, dt: DType | None = None) -> None:
    got = t.numpy()
    assert got.shape == ref.shape, (got.shape, ref.shape)
    dt = dt or t.dtype
    if dt is dtypes.bfloat16:
        np.testing.assert_array_equal(got, ref.astype(np.float32))
    elif dtypes.is_float(dt):
        tol = {dtypes.float16: 1e-3, dtypes.float32: 1e-6, dtypes.float64: 1e-12}.get(dt, 1e-6)
        np.testing.assert_allclose(got, ref.astype(got.dtype), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, ref)


# ---------------------------------------------------------------- elementwise

BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "max": (lambda a, b: a.maximum(b), np.maximum),
    "lt": (lambda a, b: a < b, np.less),
    "eq": (lambda a, b: a == b, np.equal),
    "ne": (lambda a, b: a != b, np.not_equal),
}


@pytest.mark.parametrize("dt", ALL, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary(device, dt, name):
    if dt is dtypes.bool and name in ("sub",):
        pytest.skip("numpy has no bool subtraction")
    fn, ref = BINARY[name]
    a, b = sample(dt, (7, 9), 1), sample(dt, (7, 9), 2)
    if dt is dtypes.bool and name in ("add", "mul"):
        ref = {"add": np.logical_or, "mul": np.logical_and}[name]
    check(fn(to_tensor(a, dt, device), to_tensor(b, dt, device)), ref(a, b))


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_floordiv_mod_python_semantics(device, dt):
    a = sample(dt, (50,), 3)
    b = sample(dt, (50,), 4)
    b[b == 0] = 3
    ta, tb = to_tensor(a, dt, device), to_tensor(b, dt, device)
    check(ta // tb, a // b)
    check(ta % tb, a % b)


def test_integer_division_by_zero_does_not_crash(device):
    a = Tensor([7, -7, 0], device=device)
    z = Tensor([0, 0, 0], device=device)
    np.testing.assert_array_equal((a // z).numpy(), np.array([0, 0, 0]))


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_true_div_and_unary(device, dt):
    a, b = sample(dt, (33,), 5, 0.5, 4.0), sample(dt, (33,), 6, 0.5, 4.0)
    ta, tb = to_tensor(a, dt, device), to_tensor(b, dt, device)
    check(ta / tb, (a / b).astype(np_dtype(dt)))
    check(-ta, -a)
    check(ta.sqrt(), np.sqrt(a.astype(np.float32)).astype(np_dtype(dt)) if dt is not dtypes.float64 else np.sqrt(a))


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.int64], ids=str)
def test_scalar_operands_keep_dtype(device, dt):
    a = sample(dt, (10,), 7, 0, 50)
    t = to_tensor(a, dt, device)
    out = t + 3
    assert out.dtype is dt
    check(out, a + np.array(3, dtype=dt.np))
    check(3 * t, np.array(3, dtype=dt.np) * a)


def test_int_tensor_with_float_scalar_promotes(device):
    t = Tensor([1, 2, 3], device=device)
    out = t * 0.5
    assert out.dtype is dtypes.float32
    check(out, np.array([0.5, 1.0, 1.5], dtype=np.float32))


def test_where_and_comparisons(device):
    a, b = sample(dtypes.float32, (4, 5), 8), sample(dtypes.float32, (4, 5), 9)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    check((ta < tb).where(ta, tb), np.where(a < b, a, b))
    check((ta >= 0).where(ta, 0.0), np.where(a >= 0, a, 0).astype(np.float32))


@pytest.mark.parametrize("src", ALL, ids=str)
@pytest.mark.parametrize("dst", [dtypes.float32, dtypes.int32, dtypes.uint8, dtypes.bool, dtypes.float16,
                                 dtypes.bfloat16, dtypes.int64], ids=str)
def test_cast(device, src, dst):
    a = sample(src, (17,), 10, -100, 100)
    if dtypes.is_float(src) and dtypes.is_unsigned(dst):
        a = np.abs(a)
    ref = a.astype(np.float32).astype(np_dtype(dst)) if src is dtypes.bfloat16 else a.astype(np_dtype(dst))
    check(to_tensor(a, src, device).cast(dst), ref, dst)


def test_bitcast(device):
    a = np.array([1.0, -2.5, 3.25], dtype=np.float32)
    check(Tensor(a, device=device).bitcast(dtypes.int32), a.view(np.int32))
    check(Tensor(a.view(np.uint32), device=device).bitcast(dtypes.float32), a)


# ---------------------------------------------------------------- shapes and movement

@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 0, 2), (1, 1), (7,), (3, 5, 7), (2**20 + 3,)])
def test_shapes_elementwise(device, shape):
    a, b = sample(dtypes.float32, shape, 11), sample(dtypes.float32, shape, 12)
    check(Tensor(a, device=device) * Tensor(b, device=device) + 1.0, a * b + np.float32(1.0))


def test_broadcasting(device):
    a, b = sample(dtypes.float32, (4, 1, 3), 13), sample(dtypes.float32, (5, 1), 14)
    check(Tensor(a, device=device) + Tensor(b, device=device), a + b)


def test_movement_ops(device):
    a = sample(dtypes.float32, (3, 4, 5), 15)
    t = Tensor(a, device=device)
    check(t.reshape(12, 5), a.reshape(12, 5))
    check(t.permute(2, 0, 1), a.transpose(2, 0, 1))
    check(t.permute(2, 0, 1).reshape(5, 12), a.transpose(2, 0, 1).reshape(5, 12))
    check(t.shrink(((1, 3), None, (2, 5))), a[1:3, :, 2:5])
    check(t.flip(0, 2), a[::-1, :, ::-1])
    check(t.shrink((None, (0, 1), None)).expand(3, 4, 5), np.broadcast_to(a[:, :1], (3, 4, 5)))


@pytest.mark.parametrize("pads", [((1, 2), (0, 0)), ((0, 0), (3, 1)), ((-1, 2), (1, -2)), ((0, -2), (-1, -1)),
                                  ((2, 0), (0, 0))])
def test_pad(device, pads):
    a = sample(dtypes.float32, (4, 5), 16)
    t = Tensor(a, device=device)
    ref = a
    for axis, (b, e) in enumerate(pads):
        sl = [slice(None)] * 2
        sl[axis] = slice(max(-b, 0), a.shape[axis] - max(-e, 0))
        ref = ref[tuple(sl)]
    ref = np.pad(ref, [(max(b, 0), max(e, 0)) for b, e in pads])
    check(t.pad(pads), ref)
    inside = np.pad(np.ones(_shrunk(a.shape, pads), bool), [(max(b, 0), max(e, 0)) for b, e in pads])
    check(t.pad(pads, value=2.5), np.where(inside, ref, np.float32(2.5)))


def _shrunk(shape, pads):
    return tuple(s - max(-b, 0) - max(-e, 0) for s, (b, e) in zip(shape, pads, strict=True))


def test_shrink_pad_combo_and_reduce(device):
    a = sample(dtypes.float32, (6, 6), 17)
    t = Tensor(a, device=device)
    out = t.shrink(((1, 5), (2, 6))).pad(((2, 1), (0, 3))).sum(1)
    ref = np.pad(a[1:5, 2:6], ((2, 1), (0, 3))).sum(1)
    check(out, ref)


def test_non_contiguous_views_compute(device):
    a = sample(dtypes.int32, (8, 6), 18)
    t = Tensor(a, device=device)
    check(t.permute(1, 0).flip(0) * 2 + t.T, a.T[::-1] * 2 + a.T)


# ---------------------------------------------------------------- reductions

@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint8, dtypes.bool,
                                dtypes.float16], ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), -1])
def test_sum_max(device, dt, axis):
    a = sample(dt, (4, 5, 6), 19)
    t = to_tensor(a, dt, device)
    ref_sum = a.sum(axis=axis, dtype=np.int64 if not dtypes.is_float(dt) and not dtypes.is_unsigned(dt) else None)
    if dt is dtypes.float16:
        ref_sum = a.astype(np.float32).sum(axis=axis).astype(np.float16)
    check(t.sum(axis), np.asarray(ref_sum))
    check(t.max(axis), np.asarray(a.max(axis=axis)))
    check(t.sum(axis, keepdim=True), np.asarray(ref_sum).reshape(np.sum(a, axis=axis, keepdims=True).shape))


def test_min_and_mean(device):
    a = sample(dtypes.float32, (5, 7), 20)
    t = Tensor(a, device=device)
    check(t.min(1), a.min(1))
    check(t.mean(0), a.mean(0))
    check(Tensor(np.array([3, 200, 7], dtype=np.uint8), device=device).min(), np.uint8(3))


def test_seed_sum_expression(device):
    x = Tensor.arange(768, device=device).reshape(3, 256).float()
    xn = np.arange(768).reshape(3, 256).astype(np.float32)
    check(x.sum(axis=1) + x.sum(axis=1).sum(), xn.sum(axis=1) + xn.sum(axis=1).sum())


def test_seed_cumsum(device):
    check(Tensor.arange(513, device=device).cumsum(0), np.arange(513).cumsum())


def test_cumsum_axis(device):
    a = sample(dtypes.float32, (4, 9), 21)
    check(Tensor(a, device=device).cumsum(1), np.cumsum(a, 1))
    check(Tensor(a, device=device).cumsum(0), np.cumsum(a, 0))


def test_large_sum(device):
    a = sample(dtypes.float32, (2**20 + 7,), 22)
    np.testing.assert_allclose(Tensor(a, device=device).sum().numpy(), a.astype(np.float64).sum(), rtol=1e-4)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((1, 7), (7, 1)), ((7,), (7, 3)), ((2, 3, 4), (4, 6)),
                                    ((5,), (5,)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul(device, shapes):
    a = sample(dtypes.int32, shapes[0], 23, -5, 5).astype(np.float32)
    b = sample(dtypes.int32, shapes[1], 24, -5, 5).astype(np.float32)
    check(Tensor(a, device=device) @ Tensor(b, device=device), a @ b)


def test_matmul_shape_error(device):
    with pytest.raises(ValueError, match="do not line up"):
        Tensor.ones(2, 3, device=device) @ Tensor.ones(4, 2, device=device)


# ---------------------------------------------------------------- creation and reading

def test_creation(device):
    check(Tensor.zeros(2, 3, device=device), np.zeros((2, 3), np.float32))
    check(Tensor.ones((4,), device=device, dtype="int32"), np.ones(4, np.int32))
    check(Tensor.full((2, 2), 7, device=device), np.full((2, 2), 7, np.int32))
    check(Tensor.arange(2, 11, 3, device=device), np.arange(2, 11, 3))
    check(Tensor.arange(0.5, 3.0, 0.5, device=device), np.arange(0.5, 3.0, 0.5, dtype=np.float32))
    check(Tensor.arange(5, 0, -1, device=device), np.arange(5, 0, -1))
    assert Tensor([[1, 2], [3, 4]], device=device).tolist() == [[1, 2], [3, 4]]
    assert Tensor(2.5, device=device).item() == 2.5
    assert Tensor([True, False], device=device).dtype is dtypes.bool


def test_numpy_input_is_copied(device):
    a = np.arange(4, dtype=np.float32)
    t = Tensor(a, device=device)
    a[0] = 100
    assert t.numpy()[0] == 0
    out = t.numpy()
    out[1] = 50
    assert t.numpy()[1] == 1


def test_errors_are_clear(device):
    t = Tensor.ones(2, 3, device=device)
    with pytest.raises(ValueError, match="cannot reshape"):
        t.reshape(4, 2)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        t + Tensor.ones(4, device=device)
    with pytest.raises(ValueError, match="only size-1 dimensions expand"):
        t.expand(4, 3)
    with pytest.raises(IndexError, match="out of range"):
        t.sum(5)
    with pytest.raises(ValueError, match="one element"):
        t.item()

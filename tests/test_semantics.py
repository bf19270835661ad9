"""Regression tests for the semantics `tgcore.runtime.python`'s docstring states, on every device in
``TG_TEST_DEVICES``, each against numpy or torch (issue 26: the bugs the program fuzzer found).
"""
from __future__ import annotations

import math
import operator
import os

import numpy as np
import pytest

from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]
NAN = math.nan
OPERATORS = {"+": operator.add, "*": operator.mul, "&": operator.and_, "|": operator.or_, "^": operator.xor,
             "<<": operator.lshift, ">>": operator.rshift, "//": operator.floordiv, "%": operator.mod}


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


# ------------------------------------------------------------------------------------------------ min / max / arg

@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32, np.int64])
def test_min_at_the_type_minimum(device, dt):
    a = np.array([np.iinfo(dt).min, 5, 3], dtype=dt)
    t = Tensor(a, device=device)
    assert t.min().item() == a.min()
    assert t.argmin().item() == np.argmin(a)
    assert t.reshape(1, 3).min(1).numpy().tolist() == [a.min()]


@pytest.mark.parametrize("dt", [np.int8, np.int32, np.int64])
def test_min_of_an_empty_axis_is_the_type_maximum(device, dt):
    got = Tensor(np.zeros((3, 0), dtype=dt), device=device).min(1).numpy()
    np.testing.assert_array_equal(got, np.full(3, np.iinfo(dt).max, dtype=dt))


@pytest.mark.parametrize("values", [[1, NAN, 3], [NAN, 1, NAN], [3, 2, NAN], [1, 2, 3]])
@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_argmax_argmin_with_nan_give_the_first_nan(device, values, dt):
    import torch
    a = np.array(values, dtype=dt)
    t = Tensor(a, device=device)
    assert t.argmax().item() == torch.tensor(a).argmax().item()
    assert t.argmin().item() == torch.tensor(a).argmin().item()
    m = np.array([values, values[::-1]], dtype=dt)
    np.testing.assert_array_equal(Tensor(m, device=device).argmax(1).numpy(), torch.tensor(m).argmax(1).numpy())


# ------------------------------------------------------------------------------------------------ comparisons

@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_nan_comparisons_are_false_except_ne(device, dt):
    a = np.array([NAN, 0, 1, -1, NAN], dtype=dt)
    b = np.array([0, NAN, 1, 2, NAN], dtype=dt)
    x, y = Tensor(a, device=device), Tensor(b, device=device)
    for got, want in [(x < y, a < b), (x <= y, a <= b), (x > y, a > b), (x >= y, a >= b), (x == y, a == b),
                      (x != y, a != b), (x <= 0, a <= 0), (x >= 0, a >= 0), (0 <= x, 0 <= a), (0 >= x, 0 >= a)]:
        np.testing.assert_array_equal(got.numpy(), want)


# ------------------------------------------------------------------------------------------------ crashes

def test_realize_the_same_tensor_twice(device):
    t = Tensor(np.array([1.0, 2.0], np.float32), device=device) + 1
    t.realize(t)
    np.testing.assert_array_equal(t.numpy(), [2.0, 3.0])
    u = Tensor(np.array([1, 2], np.int32), device=device) * 3
    u.realize(u.cast(u.dtype))  # a no-op cast is the same tensor
    np.testing.assert_array_equal(u.numpy(), [3, 6])


@pytest.mark.parametrize("shape", [(4, 0), (0,), (2, 0, 3)])
def test_empty_outputs_realized_together(device, shape):
    a = Tensor(np.zeros(shape, np.int8), device=device)
    b = a + 1
    c = (a * 2).sum(-1)
    b.realize(a, c)
    assert b.numpy().shape == shape
    np.testing.assert_array_equal(c.numpy(), np.zeros(shape[:-1], np.int64))


def test_empty_outputs_schedule_no_kernel():
    """An output with no element gets a buffer and no kernel: no kernel can read outside an empty input."""
    from tgcore.schedule.kernelize import create_schedule
    a = Tensor(np.zeros((4, 0), np.int8), device="PYTHON")
    items, _ = create_schedule([(a + 1).uop, (a.cast("float32") * 2).reshape(0, 4).uop], "PYTHON")
    assert [i.kind for i in items if i.kind != "copy"] == []


@pytest.mark.parametrize("op", ["&", "|", "^", "<<", ">>"])
def test_bitwise_ops_on_floats_are_type_errors(device, op):
    x = Tensor(np.array([1.0, 2.0], np.float32), device=device)
    for other in (x, 1, Tensor(np.array([1, 2], np.int32), device=device)):
        with pytest.raises(TypeError, match="integer or bool"):
            OPERATORS[op](x, other)


# ------------------------------------------------------------------------------------------------ bool arithmetic

BOOL_A = np.array([True, False, True, False])
BOOL_B = np.array([True, True, False, False])


@pytest.mark.parametrize("op", ["//", "%", "<<", ">>"])
def test_bool_operators_torch_rejects_are_type_errors(device, op):
    import torch
    with pytest.raises(RuntimeError):
        OPERATORS[op](torch.tensor(BOOL_A), torch.tensor(BOOL_B))
    a, b = Tensor(BOOL_A, device=device), Tensor(BOOL_B, device=device)
    with pytest.raises(TypeError, match="not defined on bool"):
        OPERATORS[op](a, b)


@pytest.mark.parametrize("op", ["+", "*", "&", "|", "^"])
def test_bool_arithmetic_like_torch(device, op):
    import torch
    want = OPERATORS[op](torch.tensor(BOOL_A), torch.tensor(BOOL_B)).numpy()
    a, b = Tensor(BOOL_A, device=device), Tensor(BOOL_B, device=device)
    got = OPERATORS[op](a, b).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_bool_with_int_scalar_promotes(device):
    a = Tensor(BOOL_A, device=device)
    np.testing.assert_array_equal((a // 2).numpy(), BOOL_A.astype(np.int32) // 2)
    np.testing.assert_array_equal((a << 3).numpy(), BOOL_A.astype(np.int32) << 3)
    np.testing.assert_array_equal((5 // a).numpy(), [5, 0, 5, 0])  # x // 0 = 0


# ------------------------------------------------------------------------------------------------ integer division

def test_division_by_a_value_that_may_be_zero(device):
    """x // 0 = 0 and x % 0 = 0 (the documented choice), also where the divisor's range is {0, 1}."""
    b = Tensor(np.array([False, True]), device=device)
    np.testing.assert_array_equal((5 // b).numpy(), [0, 5])
    np.testing.assert_array_equal((5 // b.int()).numpy(), [0, 5])
    np.testing.assert_array_equal((5 % b.int()).numpy(), [0, 0])
    u = Tensor(np.array([0, 7], np.uint8), device=device) >> 7  # always 0
    np.testing.assert_array_equal((5 // u).numpy(), [0, 0])


@pytest.mark.parametrize("d", [-128, 128, 3, -4])
def test_remainder_by_zero_then_divided(device, d):
    """(x % 0) is 0 before it is divided again (the simplifier once made (x % 0) % d into x % d: fuzzer seed 24004)."""
    a = np.array([6, -2**31, 2**31 - 2, 1, -7], np.int32)
    t = Tensor(a, device=device)
    zero = (t > t).int()   # 0 everywhere, known to the simplifier
    np.testing.assert_array_equal((t % zero).numpy(), np.zeros(5, np.int32))
    np.testing.assert_array_equal((t % zero // d).numpy(), np.zeros(5, np.int32))
    np.testing.assert_array_equal((t % zero % d).numpy(), np.zeros(5, np.int32))


@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32])
def test_floordiv_and_mod_by_the_type_minimum(device, dt):
    import torch
    lo = int(np.iinfo(dt).min)
    a = np.array([lo, lo + 1, -1, 0, 5, int(np.iinfo(dt).max)], dtype=dt)
    t = Tensor(a, device=device)
    np.testing.assert_array_equal((t // lo).numpy(), (torch.tensor(a) // lo).numpy())
    np.testing.assert_array_equal((t % lo).numpy(), torch.remainder(torch.tensor(a), lo).numpy())


# ------------------------------------------------------------------------------------------------ C backend

@pytest.mark.parametrize("fn", ["exp", "sqrt", "exp2", "sigmoid"])
@pytest.mark.parametrize("shape", [(2, 2, 8), (2, 1, 8), (2, 2, 4), (3, 2, 16)])
def test_cumsum_after_a_transcendental(device, fn, shape):
    """A masked vector sum with lane-wise selects that gcc 12's SLP vectorizer (AVX-512, -O2) miscompiled."""
    import torch
    x = np.zeros(shape, np.float32)
    want = getattr(torch, fn)(torch.tensor(x)).cumsum(0).numpy()
    np.testing.assert_allclose(getattr(Tensor(x, device=device), fn)().cumsum(0).numpy(), want, rtol=1e-6)


def test_where_with_a_broadcast_condition(device):
    """A loop-invariant condition broadcast into a vector select: gcc 12 crashed (internal compiler error in reload)
    on the mask built with __builtin_convertvector (fuzzer seed 16506)."""
    a = np.array([9, 0, 7, 114, 3, 36, 3, 6, 6, 1, 7, 3, 215, 1, 3, 135], np.uint8).reshape(2, 8)
    for c in (-4, 0):
        cond = Tensor(np.array(c, np.int32), device=device)
        np.testing.assert_array_equal(cond.where(Tensor(a, device=device), cond).numpy(),
                                      np.where(c != 0, a.astype(np.int32), np.int32(c)))


def test_signed_overflow_wraps(device):
    """+ - * and negation wrap around (two's complement), also where C would call them undefined."""
    import torch
    y = np.array([-2**31, 7, 2**31 - 1, -1], np.int32)
    t, ty = Tensor(y, device=device), torch.tensor(y)
    np.testing.assert_array_equal(((-t) < 0).numpy(), ((-ty) < 0).numpy())
    assert (-t).max().item() == (-ty).max().item()
    np.testing.assert_array_equal((t + (2**31 - 1)).numpy(), (ty + (2**31 - 1)).numpy())
    np.testing.assert_array_equal((t * 3 > t).numpy(), (ty * 3 > ty).numpy())
    np.testing.assert_array_equal((t - 5 < t).numpy(), (ty - 5 < ty).numpy())


def test_max_reduction_of_a_quotient(device):
    """gcc 12 -O2 -fwrapv -msse4.1 miscompiled this char max-reduction (fuzzer seed 1382): the C backend wraps
    signed arithmetic by rendering it unsigned, not with -fwrapv."""
    import torch
    a = np.array([5, -5, 108, 7], np.int8).reshape(1, 1, 4)
    q, tq = Tensor(a, device=device) // Tensor(a, device=device), torch.tensor(a) // torch.tensor(a)
    assert q.min().item() == tq.min().item()
    assert q.argmin().item() == tq.argmin().item()


# ------------------------------------------------------------------------------------------------ float16 reductions

@pytest.mark.parametrize("n", [1, 2, 8, 16, 33])
def test_a_sum_of_negative_zeros_is_positive_zero(device, n):
    """A float sum starts from +0.0 (numpy, torch) also where no accumulator is left: over size-1 axes (fuzzer seed
    44595: 1 // x.sum(1) was -inf) and fully unrolled or vectorized sums (8 and 16 lanes gave -0.0 on CPU, CPU:X86)."""
    import torch
    a = np.full((3, n), -0.0, np.float32)
    t, tt = Tensor(a, device=device), torch.tensor(a)
    ones = np.ones((3, 2), np.float32)
    for got, want in ((t.sum(1), tt.sum(1)), (t.sum(), tt.sum()), (t.mean(1), tt.mean(1)), (t.cumsum(1), tt.cumsum(1)),
                      (t.half().sum(1), tt.half().sum(1)), (t.half().cumsum(1), tt.half().cumsum(1)),
                      (t.T @ Tensor(ones, device=device), None)):   # torch's matmul keeps -0.0 for some shapes
        assert not np.signbit(got.numpy()).any()
        if want is not None:
            assert not np.signbit(want.float().numpy()).any()
    np.testing.assert_array_equal((1 // t.sum(1)).numpy(), np.full(3, np.inf, np.float32))


def test_float16_sums_accumulate_in_float32_and_round_once(device):
    import torch
    x = np.full(3000, 1.0, np.float16)
    x[::7] = 0.3
    t, tx = Tensor(x, device=device), torch.tensor(x)
    assert t.sum(dtype="float16").item() == tx.sum(dtype=torch.float16).item()
    assert t.sum().item() == tx.sum().item()
    np.testing.assert_array_equal(t.cumsum(0).numpy(), tx.cumsum(0).numpy())


def test_float16_cumsum_is_rounded_once_for_every_use(device):
    c = Tensor(np.array([[1.0], [0.1]], np.float16), device=device).cumsum(0)
    np.testing.assert_array_equal((c - c).numpy(), np.zeros((2, 1), np.float16))
    assert c.isfinite().numpy().all()


@pytest.mark.parametrize("shape", [(4,), (12,), (8,), (4, 8), (2, 4)])
def test_cat_int64_and_float32(device, shape):
    """tg_x86 once read lanes of an int64 vector built by a shuffle as values of their own (they have none)."""
    a, b = np.arange(np.prod(shape), dtype=np.int64).reshape(shape), np.ones(shape, np.float32)
    for x, y in ((a, b), (b, a)):
        got = Tensor(x, device=device).cat(Tensor(y, device=device)).numpy()
        np.testing.assert_array_equal(got, np.concatenate([x, y]).astype(np.float32))


@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int8])
def test_sigmoid_underflows_like_torch(device, dt):
    """sigmoid is 1 / (1 + exp(-x)) in float32, like torch: 0 where exp(-x) overflows float32 (x < -88.7), not the
    subnormal float64 gives (the fuzzer's reference once expected that: seeds 20047, 20112, 22354)."""
    import torch
    a = np.array([-128, -99, -91, -89, -88, -87, -80, -20, 0, 20, 100], dt)
    got = Tensor(a, device=device).sigmoid().numpy()
    want = torch.tensor(a).float().sigmoid().numpy().astype(got.dtype)   # float16 rounds once
    np.testing.assert_allclose(got, want, rtol=1e-6 if dt is not np.float16 else 1e-3, atol=0)


# ---------------------------------------------------------------------------------------- once wrong on CPU:X86 only

def wrapped(x: np.ndarray, dt) -> np.ndarray:
    """Truncate toward zero, then wrap modulo 2**bits (NaN and inf give 0): the documented float -> int cast."""
    info = np.iinfo(dt)
    span = 1 << (8 * np.dtype(dt).itemsize)
    out = [((int(v) - int(info.min)) % span + int(info.min)) if math.isfinite(v) else 0 for v in x.tolist()]
    return np.array(out, dtype=object).astype(dt)


OUT_OF_RANGE = [-2.0**63, 2.0**63, 3e19, -1e19, 1e30, 2.0**64 + 2**40, -5.5, 4e9, -3e9, 2.0**64 - 2**11, -2.0**64,
                -(2.0**63 + 2**11), 2.0**63 + 2**12 + 2**11, 1.5 * 2**84, -(2.0**84 + 2**32), 2.0**53 + 2, -0.0]
NOT_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("src", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("dt", [np.int64, np.uint64, np.int32, np.uint32, np.int16, np.uint16, np.int8])
def test_float_to_int_casts_out_of_range_wrap(device, src, dt):
    with np.errstate(over="ignore"):   # float16 rounds most of them to inf
        x = np.array(OUT_OF_RANGE + NOT_FINITE, src)
    np.testing.assert_array_equal(Tensor(x, device=device).cast(np.dtype(dt).name).numpy(), wrapped(x, dt))
    many = np.tile(x, 5)   # long enough for vector code, with in-range and out-of-range lanes side by side
    np.testing.assert_array_equal(Tensor(many, device=device).cast(np.dtype(dt).name).numpy(), wrapped(many, dt))


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_narrow_float_comparison_with_a_broadcast_operand(device, dt):
    """A lane-by-lane vector load of b[0:2] next to the scalar load of b[0] (tg_x86 once gave the scalar load the
    value of the vector's last lane: both were selected as the same UOp)."""
    import torch
    a = np.array([1, 2, 3, 4], np.float32)
    b = np.array([[1], [100]], np.float32)
    want = (torch.tensor(a) > torch.tensor(b)).reshape(-1).int().argmax().item()
    ta, tb = (Tensor(x, device=device).cast(dt).realize() for x in (a, b))   # float16/bfloat16 buffers
    assert (ta > tb).argmax().item() == want
    np.testing.assert_array_equal((ta > tb).numpy(), a > b)
    np.testing.assert_array_equal((tb < ta).max(1).numpy(), (b < a).max(1))


def test_float16_round_trip_rounds(device):
    """float32 -> float16 -> float32 rounds to float16 (gcc 12 with -mavx512fp16 dropped the round trip)."""
    import torch
    x = np.array([15.0, -21.0, 0.0999755859375, -16.0, 3.75], np.float16).reshape(1, 5)
    v1 = (-Tensor(x, device=device)).cumsum(1)
    v5 = v1.cast("float32")
    v5.realize(v1)
    want = (-torch.tensor(x)).cumsum(1)
    np.testing.assert_array_equal(v1.numpy(), want.numpy())
    np.testing.assert_array_equal(v5.numpy(), want.float().numpy())
    a = np.array([5.9000244, 1.0001, -3.14159], np.float32)
    got = Tensor(a, device=device).half().float().numpy()
    np.testing.assert_array_equal(got, a.astype(np.float16).astype(np.float32))


def test_float16_compare_and_select_compiles(device):
    """gcc 12 with -mavx512fp16 emitted masked vmovsh, which the assembler rejected, for this kernel."""
    a, b = np.zeros((8, 5, 2), np.float16), np.zeros((8, 1, 2), np.float16)
    a[0, 0, 0], b[1, 0, 1] = -1, 2
    x, y = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal((x < y).where(y, 0.0).numpy(), np.where(a < b, b, np.float16(0)))
    np.testing.assert_array_equal((x >= y).where(y, 0.0).numpy(), np.where(a >= b, b, np.float16(0)))

"""Elementwise math against numpy / math, on every device in ``TG_TEST_DEVICES`` (default CPU,PYTHON).

Transcendentals are decomposed into basic ALU ops by codegen (tgcore.codegen.transcendental), so the
float32 ulp checks here test that math on every backend. ulp distance: float32 bit patterns mapped to
ordered integers (so -0.0 and 0.0 are 0 apart and the distance counts representable floats between).
"""
from __future__ import annotations

import math
import os

import ml_dtypes
import numpy as np
import pytest

from tgcore.codegen.transcendental import SIN_ACCURATE_LIMIT
from tgcore.dtype import DType, dtypes
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]
MAX_ULP = 4


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def ordered(a: np.ndarray) -> np.ndarray:
    i = np.asarray(a, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_distance(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """ulps between float32 arrays; nan matches only nan (else a huge distance)."""
    nan_got, nan_ref = np.isnan(got), np.isnan(ref)
    d = np.abs(ordered(got) - ordered(ref))
    return np.where(nan_got & nan_ref, 0, np.where(nan_got | nan_ref, 1 << 40, d))


SPECIALS = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754942e-38, 1.1754944e-38, 1e-30, 1.0, -1.0,
                     0.5, 2.0, 3e38, -3e38, 3.4028235e38, np.inf, -np.inf, np.nan], dtype=np.float32)


def dense(lo: float, hi: float, n: int, seed: int, log: bool = False, signed: bool = False) -> np.ndarray:
    """Uniform (or log-uniform in magnitude) float32 samples plus the special values."""
    rng = np.random.default_rng(seed)
    if log:
        x = np.exp(rng.uniform(math.log(lo), math.log(hi), n))
        if signed:
            x *= rng.choice([-1.0, 1.0], n)
    else:
        x = rng.uniform(lo, hi, n)
    return np.concatenate([x.astype(np.float32), SPECIALS])


N = 1 << 17
# name: (method, numpy function, inputs)
ULP_CASES = {
    "exp2": ("exp2", np.exp2, lambda: dense(-151, 129, N, 1)),
    "exp": ("exp", np.exp, lambda: dense(-105, 89, N, 2)),
    "exp_small": ("exp", np.exp, lambda: dense(1e-30, 1, N, 3, log=True, signed=True)),
    "log2": ("log2", np.log2, lambda: dense(1e-45, 3e38, N, 4, log=True)),
    "log": ("log", np.log, lambda: dense(1e-45, 3e38, N, 5, log=True)),
    "log_near_1": ("log", np.log, lambda: dense(0.5, 2.0, N, 6)),
    "log2_near_1": ("log2", np.log2, lambda: dense(0.5, 2.0, N, 7)),
    "sqrt": ("sqrt", np.sqrt, lambda: dense(1e-45, 3e38, N, 8, log=True)),
    "sin": ("sin", np.sin, lambda: dense(-1e5, 1e5, N, 9)),
    "sin_small": ("sin", np.sin, lambda: dense(1e-30, 10, N, 10, log=True, signed=True)),
    "cos": ("cos", np.cos, lambda: dense(-1e5, 1e5, N, 11)),
    "cos_small": ("cos", np.cos, lambda: dense(1e-30, 10, N, 12, log=True, signed=True)),
    "tan": ("tan", np.tan, lambda: dense(-1e5, 1e5, N, 13)),
    "tan_small": ("tan", np.tan, lambda: dense(1e-30, 10, N, 14, log=True, signed=True)),
    # beyond Cody-Waite's exact range (2**16 * pi/2): the Payne-Hanek reduction
    "sin_large": ("sin", np.sin, lambda: dense(1e5, 3.4e38, N // 4, 15, log=True, signed=True)),
    "cos_large": ("cos", np.cos, lambda: dense(1e5, 3.4e38, N // 4, 16, log=True, signed=True)),
    "tan_large": ("tan", np.tan, lambda: dense(1e5, 3.4e38, N // 4, 17, log=True, signed=True)),
}


@pytest.mark.parametrize("case", list(ULP_CASES))
def test_float32_within_4_ulp_of_numpy(device, case):
    method, ref_fn, gen = ULP_CASES[case]
    x = gen()
    if method in ("sin", "cos", "tan"):
        x = x[~(np.abs(x) > SIN_ACCURATE_LIMIT[dtypes.float32])]  # the documented accurate range
    with np.errstate(all="ignore"):
        ref = ref_fn(x)
        truth = ref_fn(x.astype(np.float64)).astype(np.float32)
    got = getattr(Tensor(x, device=device), method)().numpy()
    assert got.dtype == np.float32
    d = ulp_distance(got, ref)
    worst = int(np.argmax(d))
    assert d.max() <= MAX_ULP, f"{case}: {d.max()} ulp from numpy at x={x[worst]!r}: {got[worst]!r} vs {ref[worst]!r}"
    # and close to the float64 reference rounded to float32 (numpy's float32 itself can be 2-3 ulp off)
    assert ulp_distance(got, truth).max() <= 2


def test_sin_cos_near_multiples_of_half_pi(device):
    """The float32s closest to multiples of pi/2 (below 1e5) need the full extended-precision reduction."""
    ks = np.arange(1, 65000, dtype=np.float64)
    near = (ks * (math.pi / 2)).astype(np.float32)
    x = np.concatenate([near, np.nextafter(near, np.float32(0)), np.nextafter(near, np.float32(np.inf)),
                        np.array([252.89820861816406, 4.71238899230957, 52516.43359375, 1011.5928344726562],
                                 dtype=np.float32)])
    x = np.concatenate([x, -x])
    for method, fn in (("sin", np.sin), ("cos", np.cos), ("tan", np.tan)):
        got = getattr(Tensor(x, device=device), method)().numpy()
        truth = fn(x.astype(np.float64)).astype(np.float32)
        assert ulp_distance(got, truth).max() <= 2, method


def test_sin_beyond_accurate_range_is_bounded(device):
    x = np.array([2e5, -3e6, 1e10, 3e38, -3e38], dtype=np.float32)
    for method in ("sin", "cos"):
        got = getattr(Tensor(x, device=device), method)().numpy()
        assert np.all(np.abs(got) <= 1), (method, got)


@pytest.mark.parametrize("method", ["exp2", "exp", "log2", "log", "sin", "cos", "tan", "sqrt"])
def test_float64_transcendentals(device, method):
    rng = np.random.default_rng(20)
    lo, hi = {"exp2": (-1070, 1020), "exp": (-740, 705), "log2": (1e-300, 1e300), "log": (1e-300, 1e300),
              "sqrt": (0, 1e300)}.get(method, (-1e6, 1e6))
    x = rng.uniform(lo, hi, 4096) if method not in ("log2", "log") else np.exp(rng.uniform(-690, 690, 4096))
    x = np.concatenate([x, rng.uniform(-2, 2, 1024), [0.0, -0.0, 5e-324, np.inf, -np.inf, np.nan]])
    with np.errstate(all="ignore"):
        ref = getattr(np, method)(x)
    got = getattr(Tensor(x, device=device, dtype=dtypes.float64), method)().numpy()
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=4e-16 if method != "tan" else 1e-15, atol=1e-300)


@pytest.mark.parametrize("method", ["sin", "cos", "tan"])
def test_float64_trig_over_the_whole_range(device, method):
    """Beyond 2**20 * pi/2 float64 takes the Payne-Hanek reduction: numpy's values up to the largest float64, at
    every power of two, and at the rounded multiples of pi/2."""
    rng = np.random.default_rng(21)
    mag = np.exp(rng.uniform(np.log(1.6e6), np.log(1.79e308), 6000))
    k = np.exp(rng.uniform(np.log(1e6), np.log(1e15), 500)).round()
    near = np.concatenate([k * (np.pi / 2), np.nextafter(k * (np.pi / 2), np.inf)])  # (within 0.25 of k*pi/2)
    powers = 2.0 ** np.arange(21, 1024)
    x = np.concatenate([mag, -mag, near, -near, powers, np.nextafter(powers, 0), [1.79e308, -1.79e308,
                                                                                  np.inf, -np.inf, np.nan]])
    with np.errstate(all="ignore"):
        ref = getattr(np, method)(x)
    got = getattr(Tensor(x, device=device, dtype=dtypes.float64), method)().numpy()
    np.testing.assert_allclose(got, ref, rtol=4e-16 if method != "tan" else 1e-15, atol=0)


def test_float64_trig_at_the_hardest_argument(device):
    """6381956970095103 * 2**797 is the float64 closest to a multiple of pi/2 (2**-60.9 from it). The reference
    values are mpmath's at 2000 bits (numpy's cos is 8 ulp off here)."""
    x = np.array([6381956970095103 * 2.0**797, -6381956970095103 * 2.0**797])
    t = Tensor(x, device=device, dtype=dtypes.float64)
    np.testing.assert_array_equal(t.cos().numpy(), [-4.687165924254628e-19] * 2)
    np.testing.assert_array_equal(t.sin().numpy(), np.sin(x))  # (+-1 rounded)


# ---------------------------------------------------------------- narrow floats and int promotion

def np_dtype(dt: DType):
    return ml_dtypes.bfloat16 if dt is dtypes.bfloat16 else dt.np


NARROW = [dtypes.float16, dtypes.bfloat16]


@pytest.mark.parametrize("dt", NARROW, ids=str)
@pytest.mark.parametrize("method", ["exp", "log", "exp2", "log2", "sin", "cos", "tan", "sqrt", "sigmoid", "tanh"])
def test_narrow_floats_keep_dtype_and_round_once(device, dt, method):
    rng = np.random.default_rng(30)
    x = rng.uniform(0.05, 6, 257).astype(np.float32).astype(np_dtype(dt)).astype(np.float32)
    t = Tensor(x, device=device, dtype=dt)
    out = getattr(t, method)()
    assert out.dtype is dt
    ref_fn = (lambda v: 1 / (1 + np.exp(-v))) if method == "sigmoid" else getattr(np, method)
    ref64 = ref_fn(x.astype(np.float64))
    ref = ref64.astype(np.float32).astype(np_dtype(dt)).astype(np.float32)
    got = out.numpy().astype(np.float32)
    # at most one unit in the last place of the narrow dtype
    mant = 10 if dt is dtypes.float16 else 7
    spacing = 2.0 ** (np.floor(np.log2(np.abs(ref64))) - mant)
    assert np.all(np.abs(got - ref) <= spacing), method


@pytest.mark.parametrize("method", ["exp", "log", "sin", "cos", "sqrt", "sigmoid", "erf", "rsqrt"])
def test_int_inputs_promote_to_default_float(device, method):
    x = np.arange(1, 9, dtype=np.int32)
    out = getattr(Tensor(x, device=device), method)()
    assert out.dtype is dtypes.default_float
    assert out.numpy().dtype == np.float32


# ---------------------------------------------------------------- activations and other functions

def _erf(v):
    return np.vectorize(math.erf)(v)


def _softplus(v, beta=1.0, threshold=20.0):
    return np.where(v * beta > threshold, v, np.log1p(np.exp(v * beta)) / beta)


ACTIVATIONS = {
    "sigmoid": (lambda t: t.sigmoid(), lambda v: 1 / (1 + np.exp(-v))),
    "tanh": (lambda t: t.tanh(), np.tanh),
    "relu": (lambda t: t.relu(), lambda v: np.maximum(v, 0)),
    "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda v: np.where(v < 0, v * 0.1, v)),
    "elu": (lambda t: t.elu(0.7), lambda v: np.where(v > 0, v, 0.7 * np.expm1(v))),
    "gelu": (lambda t: t.gelu(), lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2)))),
    "gelu_tanh": (lambda t: t.gelu(approximate="tanh"),
                  lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))),
    "quick_gelu": (lambda t: t.quick_gelu(), lambda v: v / (1 + np.exp(-1.702 * v))),
    "silu": (lambda t: t.silu(), lambda v: v / (1 + np.exp(-v))),
    "softplus": (lambda t: t.softplus(), _softplus),
    "softplus_beta": (lambda t: t.softplus(beta=2.0, threshold=5.0), lambda v: _softplus(v, 2.0, 5.0)),
    "mish": (lambda t: t.mish(), lambda v: v * np.tanh(_softplus(v))),
    "erf": (lambda t: t.erf(), _erf),
    "expm1": (lambda t: t.expm1(), np.expm1),
    "log1p": (lambda t: t.log1p(), np.log1p),
    "rsqrt": (lambda t: t.rsqrt(), lambda v: 1 / np.sqrt(v)),
    "reciprocal": (lambda t: t.reciprocal(), lambda v: 1 / v),
}


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation_float32(device, name):
    fn, ref = ACTIVATIONS[name]
    rng = np.random.default_rng(40)
    x = np.concatenate([rng.uniform(-8, 8, 2000), rng.uniform(-0.5, 0.5, 500), np.geomspace(1e-8, 1, 50),
                        -np.geomspace(1e-8, 1, 50), [0.0, -30.0, 30.0, 90.0, -90.0]]).astype(np.float32)
    if name in ("log1p", "rsqrt"):
        x = np.abs(x) if name == "rsqrt" else np.maximum(x, -0.99)
    with np.errstate(all="ignore"):
        want = ref(x.astype(np.float64))
    got = fn(Tensor(x, device=device)).numpy()
    assert got.dtype == np.float32
    # gelu's 1 + erf / 1 + tanh cancels for negative x (as in torch): an absolute tolerance there
    atol = 1e-7 if name.startswith("gelu") else 1e-37
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=2e-6, atol=atol)


@pytest.mark.parametrize("dt", NARROW + [dtypes.float64], ids=str)
def test_activations_other_floats(device, dt):
    rng = np.random.default_rng(41)
    x = rng.uniform(-5, 5, 300).astype(np.float32).astype(np_dtype(dt))
    t = Tensor(x.astype(np.float32) if dt is dtypes.bfloat16 else x, device=device, dtype=dt)
    tol = {dtypes.float16: 2e-3, dtypes.bfloat16: 1.6e-2, dtypes.float64: 1e-13}[dt]
    for name, (fn, ref) in ACTIVATIONS.items():
        if name in ("log1p", "rsqrt", "reciprocal"):
            continue
        out = fn(t)
        assert out.dtype is dt, name
        want = ref(x.astype(np.float64))
        np.testing.assert_allclose(out.numpy().astype(np.float64), want, rtol=tol, atol=tol, err_msg=name)


# ---------------------------------------------------------------- rounding, sign, abs, specials

ROUND_INPUT = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 2.4, -2.6, 3.7, 1e8 + 1,
                        -0.0, 0.0, 8388607.5, -8388608.5, 1e30, np.inf, -np.inf, np.nan], dtype=np.float32)


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64], ids=str)
def test_rounding_sign_abs(device, dt):
    x = ROUND_INPUT.astype(np_dtype(dt))
    t = Tensor(x.astype(np.float32) if dt is dtypes.bfloat16 else x, device=device, dtype=dt)
    xf = x.astype(np.float64)
    for name, ref in (("round", np.round), ("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc),
                      ("abs", np.abs), ("sign", np.sign)):
        got = getattr(t, name)()
        assert got.dtype is dt, name
        np.testing.assert_array_equal(got.numpy().astype(np.float64), ref(xf), err_msg=name)
    np.testing.assert_array_equal(t.abs().numpy().astype(np.float64)[12], 0.0)
    assert not np.signbit(t.abs().numpy()[12])  # abs(-0.0) = +0.0
    np.testing.assert_array_equal(t.isnan().numpy(), np.isnan(xf))
    np.testing.assert_array_equal(t.isinf().numpy(), np.isinf(xf))
    np.testing.assert_array_equal(t.isfinite().numpy(), np.isfinite(xf))


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32], ids=str)
def test_int_rounding_sign_abs(device, dt):
    info = np.iinfo(dt.np)
    x = np.array([0, 1, -1, 5, -7, info.max, info.min, 100 % (info.max + 1)], dtype=np.int64).astype(dt.np)
    t = Tensor(x, device=device, dtype=dt)
    for name, ref in (("abs", np.abs), ("sign", np.sign), ("round", np.round), ("floor", np.floor),
                      ("ceil", np.ceil), ("trunc", np.trunc)):
        got = getattr(t, name)()
        assert got.dtype is dt, name
        np.testing.assert_array_equal(got.numpy(), ref(x), err_msg=name)
    assert not t.isnan().numpy().any() and not t.isinf().numpy().any() and t.isfinite().numpy().all()


def test_clip_maximum_minimum_broadcast(device):
    rng = np.random.default_rng(50)
    a = rng.uniform(-3, 3, (4, 1, 5)).astype(np.float32)
    b = rng.uniform(-3, 3, (3, 1)).astype(np.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal(ta.maximum(tb).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(ta.minimum(tb).numpy(), np.minimum(a, b))
    np.testing.assert_array_equal(ta.clip(-1, 0.5).numpy(), np.clip(a, -1, 0.5))
    np.testing.assert_array_equal(ta.clip(max_=tb).numpy(), np.minimum(a, b))
    np.testing.assert_array_equal(ta.clamp(min_=0).numpy(), np.maximum(a, 0))
    n = Tensor([np.nan, 2.0, -2.0], device=device)
    np.testing.assert_array_equal(n.clip(-1, 1).numpy(), np.array([np.nan, 1, -1], dtype=np.float32))
    i = Tensor(np.array([-5, 0, 7], dtype=np.int32), device=device)
    np.testing.assert_array_equal(i.clip(-2, 3).numpy(), np.array([-2, 0, 3]))
    assert i.clip(-2, 3).dtype is dtypes.int32
    with pytest.raises(ValueError):
        i.clip()


# ---------------------------------------------------------------- pow

def test_pow_float_tensor_and_scalar(device):
    rng = np.random.default_rng(60)
    a = rng.uniform(0.1, 10, (6, 7)).astype(np.float32)
    b = rng.uniform(-4, 4, (1, 7)).astype(np.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_allclose((ta ** tb).numpy(), np.power(a, b), rtol=1e-6)
    for y in (0, 1, 2, 3, -1, 0.5, -0.5, 2.5, -3.25, 10):
        np.testing.assert_allclose((ta ** y).numpy(), np.power(a, np.float32(y)), rtol=1e-6, err_msg=str(y))
    np.testing.assert_allclose((2 ** tb).numpy(), np.power(np.float32(2), b), rtol=1e-6)
    np.testing.assert_allclose(ta.pow(tb).numpy(), np.power(a, b), rtol=1e-6)


def test_pow_negative_bases_and_specials(device):
    x = np.array([-2, -2, -2, -0.5, -3, 0, 0, 0, -0.0, 1, 1, -1, -1, np.inf, -np.inf, -np.inf, np.nan, 2, 5],
                 dtype=np.float32)
    y = np.array([2, 3, 0.5, -3, -2, 0, 2, -1, 3, np.nan, np.inf, np.inf, 5, -1, 3, 2, 0, np.nan, -np.inf],
                 dtype=np.float32)
    with np.errstate(all="ignore"):
        ref = np.power(x, y)
    got = (Tensor(x, device=device) ** Tensor(y, device=device)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    h = Tensor(np.array([-2, 3], dtype=np.float16), device=device, dtype=dtypes.float16) ** 3
    assert h.dtype is dtypes.float16
    np.testing.assert_array_equal(h.numpy(), np.array([-8, 27], dtype=np.float16))
    f64 = Tensor(np.array([1.5, -2.0, 10.0]), device=device, dtype=dtypes.float64) ** 7.0
    np.testing.assert_allclose(f64.numpy(), np.array([1.5, -2.0, 10.0]) ** 7.0, rtol=1e-14)


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.int8], ids=str)
def test_pow_ints(device, dt):
    rng = np.random.default_rng(61)
    lo = 0 if dtypes.is_unsigned(dt) else -5
    a = rng.integers(lo, 6, 40).astype(dt.np)
    e = rng.integers(0, 9, 40).astype(dt.np)
    ta, te = Tensor(a, device=device, dtype=dt), Tensor(e, device=device, dtype=dt)
    np.testing.assert_array_equal((ta ** te).numpy(), np.power(a, e))
    assert (ta ** te).dtype is dt
    np.testing.assert_array_equal((ta ** 3).numpy(), np.power(a, np.dtype(dt.np).type(3)))
    np.testing.assert_allclose((ta ** 0.5).numpy(), np.power(a.astype(np.float32), 0.5), rtol=1e-6)
    assert (ta ** 0.5).dtype is dtypes.default_float
    with pytest.raises(ValueError):
        ta ** -1


def test_pow_int_negative_tensor_exponent(device):
    a = Tensor(np.array([1, -1, -1, 2, 0], dtype=np.int32), device=device)
    e = Tensor(np.array([-3, -3, -2, -1, 2], dtype=np.int32), device=device)
    np.testing.assert_array_equal((a ** e).numpy(), np.array([1, -1, 1, 0, 0]))


# ---------------------------------------------------------------- bitwise and logical

BIT_INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32]


@pytest.mark.parametrize("dt", BIT_INTS + [dtypes.bool], ids=str)
def test_bitwise(device, dt):
    rng = np.random.default_rng(70)
    if dt is dtypes.bool:
        a, b = rng.integers(0, 2, (5, 6)).astype(bool), rng.integers(0, 2, (1, 6)).astype(bool)
    else:
        info = np.iinfo(dt.np)
        a = rng.integers(info.min, info.max, (5, 6), dtype=dt.np, endpoint=True)
        b = rng.integers(info.min, info.max, (1, 6), dtype=dt.np, endpoint=True)
    ta, tb = Tensor(a, device=device, dtype=dt), Tensor(b, device=device, dtype=dt)
    np.testing.assert_array_equal(ta.bitwise_and(tb).numpy(), a & b)
    np.testing.assert_array_equal(ta.bitwise_or(tb).numpy(), a | b)
    np.testing.assert_array_equal(ta.bitwise_xor(tb).numpy(), a ^ b)
    np.testing.assert_array_equal(ta.bitwise_not().numpy(), ~a)
    np.testing.assert_array_equal(ta.logical_and(tb).numpy(), np.logical_and(a, b))
    np.testing.assert_array_equal(ta.logical_or(tb).numpy(), np.logical_or(a, b))
    np.testing.assert_array_equal(ta.logical_xor(tb).numpy(), np.logical_xor(a, b))
    np.testing.assert_array_equal(ta.logical_and(True).numpy(), a.astype(bool))
    if dt is not dtypes.bool:
        bits = 8 * dt.itemsize
        s = rng.integers(0, bits, (5, 6)).astype(dt.np)
        ts = Tensor(s, device=device, dtype=dt)
        np.testing.assert_array_equal(ta.lshift(ts).numpy(), np.left_shift(a, s))
        np.testing.assert_array_equal(ta.rshift(ts).numpy(), np.right_shift(a, s))
        np.testing.assert_array_equal(ta.bitwise_left_shift(3).numpy(), np.left_shift(a, np.dtype(dt.np).type(3)))
        np.testing.assert_array_equal(ta.bitwise_right_shift(2).numpy(), np.right_shift(a, np.dtype(dt.np).type(2)))


def test_bitwise_rejects_floats(device):
    t = Tensor([1.0, 2.0], device=device)
    for method in ("bitwise_and", "bitwise_or", "bitwise_xor", "lshift", "rshift"):
        with pytest.raises(TypeError):
            getattr(t, method)(1)
    with pytest.raises(TypeError):
        t.bitwise_not()
    np.testing.assert_array_equal(t.logical_not().numpy(), [False, False])
    np.testing.assert_array_equal(Tensor([0.0, 2.0], device=device).logical_or(0).numpy(), [False, True])


def test_floordiv_mod_keep_python_semantics(device):
    a = np.array([7, -7, 7, -7], dtype=np.int32)
    b = np.array([2, 2, -2, -2], dtype=np.int32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    np.testing.assert_array_equal((ta // tb).numpy(), a // b)
    np.testing.assert_array_equal((ta % tb).numpy(), a % b)
    f = np.array([7.5, -7.5], dtype=np.float32)
    np.testing.assert_array_equal((Tensor(f, device=device) // 2).numpy(), f // 2)
    np.testing.assert_array_equal((Tensor(f, device=device) % 2).numpy(), f % 2)


# ---------------------------------------------------------------- the codegen pass itself

def test_decomposition_leaves_no_transcendental_ops():
    from tgcore.codegen.transcendental import decompose_transcendentals
    from tgcore.uop import Ops, UOp
    for dt in (dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16):
        x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 0, 10)).cast(dt)
        sink = UOp.sink(x.exp2() + x.log2() + x.sin())
        out = decompose_transcendentals(sink)
        ops = {u.op for u in out.toposort}
        assert not ops & {Ops.EXP2, Ops.LOG2, Ops.SIN}, dt
        assert ops <= {Ops.SINK, Ops.DEFINE_VAR, Ops.CONST, Ops.CAST, Ops.BITCAST, Ops.ADD, Ops.SUB, Ops.MUL,
                       Ops.FDIV, Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE, Ops.WHERE, Ops.TRUNC, Ops.NEG, Ops.SHL, Ops.SHR,
                       Ops.AND, Ops.OR}, ops


def test_gradients_flow_through_lifted_formulas(device):
    """exp/log/cos/tan are built from formulas with detached integer parts: d/dx must still be right."""
    x0 = np.array([-2.0, -0.3, 0.7, 1.5, 3.0], dtype=np.float32)
    derivs = {"exp": np.exp, "log": lambda v: 1 / v, "cos": lambda v: -np.sin(v), "tan": lambda v: 1 / np.cos(v)**2,
              "tanh": lambda v: 1 - np.tanh(v)**2, "erf": lambda v: 2 / np.sqrt(np.pi) * np.exp(-v * v)}
    for name, d in derivs.items():
        xv = np.abs(x0) if name == "log" else x0
        x = Tensor(xv, device=device, requires_grad=True)
        getattr(x, name)().sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), d(xv.astype(np.float64)), rtol=2e-6, atol=1e-7, err_msg=name)


def test_exp_clamps_and_scales_once():
    """exp's remainder 2**(r*log2(e)) (|r*log2(e)| <= ~0.51) takes exp2's steps without exp2's clamps and scaling: the
    input's two clamps and one two-factor scaling by 2**(n + m) are the only ones (the values, bit for bit, are the
    accuracy tests' above)."""
    from tgcore.uop import Ops, UOp
    for dt in (dtypes.float32, dtypes.float64):
        x = UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("n", 0, 10)).cast(dt)
        ops = [u.op for u in x.exp().toposort]
        assert ops.count(Ops.CMPLT) == 2 and ops.count(Ops.SHR) == 1 and Ops.EXP2 not in ops, dt

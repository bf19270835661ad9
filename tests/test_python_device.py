"""The PYTHON device (reference interpreter) on hand-built kernel ASTs, checked against numpy,
ml_dtypes and small pure-Python C-semantics references."""

from __future__ import annotations

import math
import pickle

import ml_dtypes
import numpy as np
import pytest

from tgcore.dtype import DType, dtypes, truncate
from tgcore.renderer.python import PythonCompiler, PythonRenderer
from tgcore.runtime import python as pyrt
from tgcore.runtime.buffer import Buffer
from tgcore.runtime.python import KernelError, PythonDevice, PythonProgram
from tgcore.uop import AxisArg, Ops, RangeKind, UOp

DEV = PythonDevice()
RENDERER = PythonRenderer()
RNG = np.random.default_rng(0)

INTS = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
        dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]


# ------------------------------------------------------------------------------------------ helpers

_ML_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "fp8e4m3": ml_dtypes.float8_e4m3fn, "fp8e5m2": ml_dtypes.float8_e5m2}


def np_dtype(dt: DType) -> np.dtype:
    return np.dtype(_ML_DTYPES[dt.name]) if dt.name in _ML_DTYPES else dt.np


def out_axis(axis: int) -> AxisArg:
    return AxisArg(axis, RangeKind.GLOBAL)


def reduced_axis(axis: int) -> AxisArg:
    return AxisArg(axis, RangeKind.REDUCE)


def param(slot: int, dt: DType, n: int) -> UOp:
    return UOp(Ops.PARAM, dt.ptr(n), (), slot)


def run(sink: UOp, outs: list[tuple[DType, int]], ins: list[tuple[DType, np.ndarray]],
        vals: tuple[int, ...] = ()) -> list[np.ndarray]:
    """Render, compile and run `sink`; PARAM slots are outs then ins. Returns the outputs."""
    lib = RENDERER.compiler.compile(RENDERER.render("k", sink))
    prg = DEV.program("k", lib)
    out_bufs = [Buffer(DEV, n, dt).copyin(np.zeros(n * dt.itemsize, np.uint8)) for dt, n in outs]
    in_bufs = [Buffer(DEV, a.size, dt).copyin(np.ascontiguousarray(a, dtype=np_dtype(dt)).view(np.uint8))
               for dt, a in ins]
    prg(*[b.handle for b in out_bufs + in_bufs], vals=vals)
    return [b.numpy() for b in out_bufs]


def elementwise(fn, ins: list[tuple[DType, np.ndarray]], out_dtype: DType) -> np.ndarray:
    """out[i] = fn(in0[i], in1[i], ...) over one global range."""
    n = ins[0][1].size
    r = UOp.range(n, out_axis(0))
    loads = [param(k + 1, dt, n).index(r).load() for k, (dt, _) in enumerate(ins)]
    sink = UOp.sink(param(0, out_dtype, n).index(r).store(fn(*loads)))
    return run(sink, [(out_dtype, n)], ins)[0]


def sample(dt: DType, n: int = 257) -> np.ndarray:
    if dtypes.is_int(dt):
        info = np.iinfo(dt.np)
        edges = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], dtype=dt.np)
        return np.concatenate([edges, RNG.integers(info.min, info.max, n - len(edges), dtype=dt.np, endpoint=True)])
    if dt is dtypes.bool:
        return RNG.integers(0, 2, n).astype(bool)
    x = (RNG.standard_normal(n) * 8).astype(np.float64)
    x[:6] = [0.0, -0.0, 1.0, -3.5, np.inf, np.nan]
    return x.astype(np_dtype(dt))


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    """Exact equality (NaN == NaN, and -0.0 differs from 0.0) by comparing storage bits."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype.kind == "f" or a.dtype in [np.dtype(t) for t in _ML_DTYPES.values()]:
        bits = f"u{a.dtype.itemsize}"
        nan = np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
        np.testing.assert_array_equal(np.where(nan, 0, a.view(bits)), np.where(nan, 0, b.view(bits)))
    else:
        np.testing.assert_array_equal(a, b)


def wrap(dt: DType, v: int) -> int:
    bits = 8 * dt.itemsize
    v &= (1 << bits) - 1
    return v - (1 << bits) if not dtypes.is_unsigned(dt) and v >= 1 << (bits - 1) else v


def c_div(a: int, b: int) -> int:
    """C integer division (toward zero); b == 0 -> 0, the documented choice."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_mod(a: int, b: int) -> int:
    return 0 if b == 0 else a - b * c_div(a, b)


# ------------------------------------------------------------------------------------------ renderer / device

def test_renderer_and_compiler_contract():
    assert (RENDERER.device, RENDERER.name, RENDERER.linear, RENDERER.has_threads) == ("PYTHON", "PY", False, False)
    assert isinstance(RENDERER.compiler, PythonCompiler) and RENDERER.compiler.cache_key is None
    r = UOp.range(4, out_axis(0))
    sink = UOp.sink(param(0, dtypes.int32, 4).index(r).store(r))
    lib = RENDERER.compiler.compile_cached(RENDERER.render("k", sink))
    assert isinstance(lib, bytes) and pickle.loads(lib) is sink
    with pytest.raises(TypeError):
        RENDERER.render("k", [sink])


def test_program_returns_time_only_when_waited_on():
    r = UOp.range(4, out_axis(0))
    sink = UOp.sink(param(0, dtypes.int32, 4).index(r).store(r * 3))
    prg = PythonProgram("k", RENDERER.render("k", sink))
    out = Buffer(DEV, 4, dtypes.int32)
    assert prg(out.handle) is None
    elapsed = prg(out.handle, wait=True)
    assert isinstance(elapsed, float) and elapsed >= 0
    np.testing.assert_array_equal(out.numpy(), [0, 3, 6, 9])


def test_device_registry_opens_python_device():
    from tgcore.runtime.registry import open_device
    dev = open_device("PYTHON")
    assert isinstance(dev, PythonDevice) and isinstance(dev.renderer, PythonRenderer)
    assert dev.compiler is dev.renderer.compiler


def test_wrong_argument_counts_raise():
    r = UOp.range(4, out_axis(0))
    v = UOp.variable("v", 0, 9)
    prg = PythonProgram("k", RENDERER.render("k", UOp.sink(param(0, dtypes.int32, 4).index(r).store(r + v))))
    out = Buffer(DEV, 4, dtypes.int32)
    with pytest.raises(KernelError, match="buffers"):
        prg(out.handle, out.handle, vals=(1,))
    with pytest.raises(KernelError, match="values"):
        prg(out.handle)


# ------------------------------------------------------------------------------------------ elementwise ALU

_INT_BINARY = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
               Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
               Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_binary_ops_wrap_like_numpy(dt):
    a, b = sample(dt), sample(dt)[::-1].copy()
    for op, ref in _INT_BINARY.items():
        out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
        got = elementwise(lambda x, y, op=op: x.alu(op, y), [(dt, a), (dt, b)], out_dt)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(got, ref(a, b), err_msg=f"{op} {dt}")
    got = elementwise(lambda x: x.alu(Ops.NEG), [(dt, a)], dt)
    np.testing.assert_array_equal(got, np.negative(a))
    got = elementwise(lambda x, y: (x < y).where(x, y), [(dt, a), (dt, b)], dt)
    np.testing.assert_array_equal(got, np.where(a < b, a, b))
    got = elementwise(lambda x, y: x.alu(Ops.MULACC, y, x), [(dt, a), (dt, b)], dt)
    np.testing.assert_array_equal(got, a * b + a)


def test_integer_wraparound():
    cases = [(dtypes.int8, 127, 1, -128), (dtypes.uint8, 255, 1, 0), (dtypes.int32, 2**31 - 1, 1, -2**31),
             (dtypes.uint32, 0, 2**32 - 1, 2**32 - 1), (dtypes.int64, 2**63 - 1, 2, -2**63 + 1)]
    for dt, x, y, want in cases:
        a, b = np.array([x], dt.np), np.array([y], dt.np)
        assert elementwise(lambda p, q: p + q, [(dt, a), (dt, b)], dt)[0] == want
    a = np.array([2**31 - 1, -2**31], np.int32)
    np.testing.assert_array_equal(elementwise(lambda p: p * 2, [(dtypes.int32, a)], dtypes.int32), [-2, 0])


_FLOAT_BINARY = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide,
                 Ops.MAX: np.maximum}
_FLOAT_UNARY = {Ops.NEG: np.negative, Ops.SQRT: np.sqrt, Ops.RECIPROCAL: np.reciprocal, Ops.TRUNC: np.trunc}


@pytest.mark.parametrize("dt", FLOATS + [dtypes.bfloat16], ids=str)
def test_float_ops_exact_against_numpy(dt):
    # numpy's float16 and ml_dtypes' bfloat16 compute in float32 and round: the documented semantics
    a, b = sample(dt), sample(dt)[::-1].copy()
    with np.errstate(all="ignore"):
        for op, ref in _FLOAT_BINARY.items():
            same_bits(elementwise(lambda x, y, op=op: x.alu(op, y), [(dt, a), (dt, b)], dt), ref(a, b))
        for op, ref in _FLOAT_UNARY.items():
            same_bits(elementwise(lambda x, op=op: x.alu(op), [(dt, a)], dt), ref(a))
        for op, ref in {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal}.items():
            got = elementwise(lambda x, y, op=op: x.alu(op, y), [(dt, a), (dt, b)], dtypes.bool)
            np.testing.assert_array_equal(got, ref(a, b))
        same_bits(elementwise(lambda x, y: (x < y).where(x, y), [(dt, a), (dt, b)], dt), np.where(a < b, a, b))


@pytest.mark.parametrize("dt", FLOATS + [dtypes.bfloat16], ids=str)
def test_transcendental_ops_round_once_from_float64(dt):
    a = np.abs(sample(dt)) + np.array(0.5, np_dtype(dt))
    b = sample(dt)
    with np.errstate(all="ignore"):
        for op, ref in {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}.items():
            got = elementwise(lambda x, op=op: x.alu(op), [(dt, a)], dt)
            same_bits(got, ref(a.astype(np.float64)).astype(np_dtype(dt)))
            if dt is dtypes.float32:  # and within an ulp of numpy's own float32 routine
                np.testing.assert_allclose(got, ref(a), rtol=3e-7)
        got = elementwise(lambda x, y: x.alu(Ops.POW, y), [(dt, a), (dt, b)], dt)
        same_bits(got, np.power(a.astype(np.float64), b.astype(np.float64)).astype(np_dtype(dt)))


def test_mulacc_rounds_the_product_first():
    dt = dtypes.float16
    a, b, c = (np.array([1 + 2**-10], np.float16), np.array([1 + 2**-10], np.float16), np.array([-1], np.float16))
    got = elementwise(lambda x, y, z: x.alu(Ops.MULACC, y, z), [(dt, a), (dt, b), (dt, c)], dt)
    same_bits(got, a * b + c)  # a*b rounds to 1 + 2**-9 in float16 before the add


def test_bool_ops():
    a, b = sample(dtypes.bool), sample(dtypes.bool)[::-1].copy()
    refs = {Ops.AND: np.logical_and, Ops.OR: np.logical_or, Ops.XOR: np.logical_xor, Ops.MUL: np.logical_and,
            Ops.ADD: np.logical_or, Ops.MAX: np.logical_or, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
            Ops.CMPLT: np.less}
    for op, ref in refs.items():
        got = elementwise(lambda x, y, op=op: x.alu(op, y), [(dtypes.bool, a), (dtypes.bool, b)], dtypes.bool)
        np.testing.assert_array_equal(got, ref(a, b), err_msg=str(op))


# ------------------------------------------------------------------------------------------ C integer semantics

@pytest.mark.parametrize("dt", INTS, ids=str)
def test_idiv_mod_truncate_toward_zero(dt):
    info = np.iinfo(dt.np)
    small = [v for v in (-9, -7, -3, -2, -1, 0, 1, 2, 3, 7, 9) if info.min <= v <= info.max]
    values = sorted(set(small + [info.min, info.max, info.min + 1, info.max - 1]))
    pairs = [(x, y) for x in values for y in values]
    a = np.array([p[0] for p in pairs], dt.np)
    b = np.array([p[1] for p in pairs], dt.np)
    quo = elementwise(lambda x, y: x.alu(Ops.IDIV, y), [(dt, a), (dt, b)], dt)
    rem = elementwise(lambda x, y: x.alu(Ops.MOD, y), [(dt, a), (dt, b)], dt)
    # INT_MIN / -1 wraps to INT_MIN (remainder 0); division by zero gives 0 (documented choices)
    np.testing.assert_array_equal(quo, [wrap(dt, c_div(x, y)) for x, y in pairs])
    np.testing.assert_array_equal(rem, [wrap(dt, c_mod(x, y)) for x, y in pairs])


def test_division_by_zero_does_not_crash():
    a = np.array([5, -5, 0, 2**31 - 1], np.int32)
    z = np.zeros(4, np.int32)
    np.testing.assert_array_equal(elementwise(lambda x, y: x // y, [(dtypes.int32, a), (dtypes.int32, z)],
                                              dtypes.int32), 0)
    np.testing.assert_array_equal(elementwise(lambda x, y: x % y, [(dtypes.int32, a), (dtypes.int32, z)],
                                              dtypes.int32), 0)
    f = np.array([1.0, -1.0, 0.0], np.float32)
    got = elementwise(lambda x, y: x / y, [(dtypes.float32, f), (dtypes.float32, np.zeros(3, np.float32))],
                      dtypes.float32)
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_shifts(dt):
    bits = 8 * dt.itemsize
    a = sample(dt, 64)
    amounts = (np.arange(64) % bits).astype(dt.np)
    shl = elementwise(lambda x, y: x << y, [(dt, a), (dt, amounts)], dt)
    shr = elementwise(lambda x, y: x >> y, [(dt, a), (dt, amounts)], dt)
    # Python's >> on ints is arithmetic: the signed reference; unsigned values are non-negative
    np.testing.assert_array_equal(shl, [wrap(dt, int(x) << int(s)) for x, s in zip(a, amounts, strict=True)])
    np.testing.assert_array_equal(shr, [wrap(dt, int(x) >> int(s)) for x, s in zip(a, amounts, strict=True)])
    # amounts outside [0, bits): as if shifted one bit at a time (documented choice)
    x = np.array([-5 if not dtypes.is_unsigned(dt) else 5, 5], dt.np)
    big = np.array([bits, bits + 3], dt.np)
    np.testing.assert_array_equal(elementwise(lambda p, q: p << q, [(dt, x), (dt, big)], dt), [0, 0])
    want = [-1 if not dtypes.is_unsigned(dt) else 0, 0]
    np.testing.assert_array_equal(elementwise(lambda p, q: p >> q, [(dt, x), (dt, big)], dt), want)


# ------------------------------------------------------------------------------------------ casts and bitcasts

@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("src", FLOATS, ids=str)
def test_float_to_int_truncates(src, dt):
    vals = [-2.75, -0.5, -0.0, 0.5, 2.9, 100.99, 7.0]
    if dtypes.is_unsigned(dt):
        vals = [abs(v) for v in vals]
    a = np.array(vals, src.np)
    got = elementwise(lambda x: x.cast(dt), [(src, a)], dt)
    np.testing.assert_array_equal(got, [math.trunc(float(v)) for v in a])


@pytest.mark.parametrize("dt", INTS, ids=str)
def test_out_of_range_float_to_int_wraps_and_nan_is_zero(dt):
    vals = np.array([1e10, -1e10, 3e9, 1e30, -1e30, 2.0**64 + 2**20, np.nan, np.inf, -np.inf, 2.0**63], np.float64)
    got = elementwise(lambda x: x.cast(dt), [(dtypes.float64, vals)], dt)
    # documented: truncate, then wrap modulo 2**bits (what tgcore.dtype.truncate does); NaN/inf -> 0
    np.testing.assert_array_equal(got, [truncate(dt, float(v)) for v in vals])


@pytest.mark.parametrize("dt", INTS + FLOATS + [dtypes.bfloat16, dtypes.bool], ids=str)
def test_casts_to_and_from_bool(dt):
    a = sample(dt, 64)
    got = elementwise(lambda x: x.cast(dtypes.bool), [(dt, a)], dtypes.bool)
    np.testing.assert_array_equal(got, a.astype(np.float64) != 0 if dt is dtypes.bfloat16 else a != 0)
    b = sample(dtypes.bool, 64)
    got = elementwise(lambda x: x.cast(dt), [(dtypes.bool, b)], dt)
    np.testing.assert_array_equal(got, b.astype(np_dtype(dt)))


@pytest.mark.parametrize("dst", FLOATS + [dtypes.bfloat16], ids=str)
@pytest.mark.parametrize("src", INTS, ids=str)
def test_int_to_float_rounds_once(src, dst):
    a = sample(src, 128)
    if src.itemsize == 8:  # just off a rounding tie of every narrow format after float64 rounding
        a[:4] = np.array([2**62 + 2**38 + 1, 2**60 + 2**36 + 2**20 + 1, 2**55 + 2**31 + 1, 2**53 + 1]).astype(src.np)
    got = elementwise(lambda x: x.cast(dst), [(src, a)], dst)
    want = np.array([truncate(dst, int(v)) for v in a]).astype(np_dtype(dst))
    same_bits(got, want)


@pytest.mark.parametrize("dst", FLOATS + [dtypes.bfloat16], ids=str)
@pytest.mark.parametrize("src", FLOATS + [dtypes.bfloat16], ids=str)
def test_float_to_float_casts(src, dst):
    a = sample(src, 200)
    if src is dtypes.float64:
        a[6:9] = [1 + 2**-8 + 2**-30, 1 + 2**-11 + 2**-40, 1e300]  # double rounding through float32 would fail
    got = elementwise(lambda x: x.cast(dst), [(src, a)], dst)
    want = np.array([truncate(dst, float(v)) for v in a.astype(np.float64)]).astype(np_dtype(dst))
    same_bits(got, want)
    if src is not dtypes.float64:  # ml_dtypes agrees wherever it does not round through float32 first
        same_bits(got, a.astype(np_dtype(dst)))


@pytest.mark.parametrize("dt", [dtypes.fp8e4m3, dtypes.fp8e5m2], ids=str)
def test_fp8_casts_and_arithmetic_match_ml_dtypes(dt):
    x = np.concatenate([RNG.standard_normal(100) * 20, [0.0, -0.0, 1e6, -1e6, np.nan]]).astype(np.float32)
    got = elementwise(lambda v: v.cast(dt), [(dtypes.float32, x)], dt)
    same_bits(got, x.astype(np_dtype(dt)))
    a, b = got, got[::-1].copy()
    same_bits(elementwise(lambda p, q: p * q + p, [(dt, a), (dt, b)], dt), a * b + a)
    same_bits(elementwise(lambda v: v.cast(dtypes.float32), [(dt, a)], dtypes.float32), a.astype(np.float32))


def test_bitcasts():
    f = np.array([1.0, -2.5, np.inf, 0.0, -0.0], np.float32)
    np.testing.assert_array_equal(elementwise(lambda x: x.bitcast(dtypes.int32), [(dtypes.float32, f)], dtypes.int32),
                                  f.view(np.int32))
    u = np.array([0x3F800000, 0x7FC00001, 0xFF800000], np.uint32)
    same_bits(elementwise(lambda x: x.bitcast(dtypes.float32), [(dtypes.uint32, u)], dtypes.float32),
              u.view(np.float32))
    h = np.array([0x3C00, 0x7E01, 0x8001], np.uint16)
    got = elementwise(lambda x: x.bitcast(dtypes.float16).bitcast(dtypes.int16), [(dtypes.uint16, h)], dtypes.int16)
    np.testing.assert_array_equal(got, h.view(np.int16))
    d = np.array([1.5, -0.0, np.nan], np.float64)
    np.testing.assert_array_equal(elementwise(lambda x: x.bitcast(dtypes.uint64), [(dtypes.float64, d)],
                                              dtypes.uint64), d.view(np.uint64))
    # bfloat16 bit patterns, NaN payloads included, survive a round trip through bfloat16
    bits = np.array([0x3F80, 0x7FC1, 0xFF81, 0x0001, 0x8000], np.uint16)
    got = elementwise(lambda x: x.bitcast(dtypes.bfloat16), [(dtypes.uint16, bits)], dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16), bits)
    back = elementwise(lambda x: x.bitcast(dtypes.bfloat16).bitcast(dtypes.int16), [(dtypes.uint16, bits)],
                       dtypes.int16)
    np.testing.assert_array_equal(back, bits.view(np.int16))


# ------------------------------------------------------------------------------------------ memory access

def test_gated_load_pads_without_reading_out_of_bounds():
    n, pad = 10, 3
    a = np.arange(1, n + 1, dtype=np.float32)
    r = UOp.range(n + 2 * pad, out_axis(0))
    j = r - pad
    valid = (j >= 0) & (j < n)
    load = param(1, dtypes.float32, n).index(j, valid).load()
    sink = UOp.sink(param(0, dtypes.float32, n + 2 * pad).index(r).store(valid.where(load, 0.0)))
    got = run(sink, [(dtypes.float32, n + 2 * pad)], [(dtypes.float32, a)])[0]
    np.testing.assert_array_equal(got, np.pad(a, pad))
    # a gated load with no WHERE around it yields 0 where the gate is false
    sink = UOp.sink(param(0, dtypes.float32, n + 2 * pad).index(r).store(load + 1.0))
    got = run(sink, [(dtypes.float32, n + 2 * pad)], [(dtypes.float32, a)])[0]
    np.testing.assert_array_equal(got, np.pad(a, pad) + 1)


def test_gated_load_alternative_value_and_gated_store():
    n = 8
    a = np.arange(n, dtype=np.int32) * 10
    r = UOp.range(n, out_axis(0))
    gate = r < 5
    alt = UOp.const(dtypes.int32, -1)
    load = UOp(Ops.LOAD, dtypes.int32, (param(1, dtypes.int32, n).index(r + 100, r >= 100), alt))
    loaded = run(UOp.sink(param(0, dtypes.int32, n).index(r).store(load)), [(dtypes.int32, n)],
                 [(dtypes.int32, a)])[0]
    np.testing.assert_array_equal(loaded, -1)
    sink = UOp.sink(param(0, dtypes.int32, n).index(r, gate).store(param(1, dtypes.int32, n).index(r).load() + 1))
    got = run(sink, [(dtypes.int32, n)], [(dtypes.int32, a)])[0]
    np.testing.assert_array_equal(got, np.where(np.arange(n) < 5, a + 1, 0))


def test_out_of_bounds_access_raises():
    r = UOp.range(8, out_axis(0))
    sink = UOp.sink(param(0, dtypes.int32, 8).index(r).store(param(1, dtypes.int32, 4).index(r).load()))
    with pytest.raises(IndexError, match="outside its 4 elements"):
        run(sink, [(dtypes.int32, 8)], [(dtypes.int32, np.arange(4, dtype=np.int32))])


def test_thread_ranges_are_output_ranges():
    t, r = UOp.range(4, AxisArg(0, RangeKind.THREAD, threads=4)), UOp.range(8, out_axis(1))
    sink = UOp.sink(param(0, dtypes.int32, 32).index(t * 8 + r).store(t * 100 + r))
    got = run(sink, [(dtypes.int32, 32)], [])[0]
    np.testing.assert_array_equal(got, (np.arange(4)[:, None] * 100 + np.arange(8)).reshape(-1))


def test_several_stores_and_dtype_storage():
    n = 16
    r = UOp.range(n, out_axis(0))
    x = param(2, dtypes.float32, n).index(r).load()
    sink = UOp.sink(param(0, dtypes.bfloat16, n).index(r).store(x.cast(dtypes.bfloat16)),
                    param(1, dtypes.int16, n).index(r).store(x.cast(dtypes.int16)))
    a = (RNG.standard_normal(n) * 100).astype(np.float32)
    bf, i16 = run(sink, [(dtypes.bfloat16, n), (dtypes.int16, n)], [(dtypes.float32, a)])
    same_bits(bf, a.astype(ml_dtypes.bfloat16))
    np.testing.assert_array_equal(i16, np.trunc(a).astype(np.int16))


# ------------------------------------------------------------------------------------------ reductions

def reduce_rows(op: Ops, dt: DType, m: np.ndarray) -> np.ndarray:
    """out[i] = REDUCE_k m[i, k]."""
    rows, cols = m.shape
    i, k = UOp.range(rows, out_axis(0)), UOp.range(cols, reduced_axis(0))
    value = param(1, dt, m.size).index(i * cols + k).load().reduce(k, op=op)
    return run(UOp.sink(param(0, dt, rows).index(i).store(value)), [(dt, rows)], [(dt, m.reshape(-1))])[0]


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.uint64, dtypes.float32, dtypes.float64],
                         ids=str)
def test_reduce_one_axis(dt):
    m = sample(dt, 7 * 33).reshape(7, 33)
    if dtypes.is_float(dt):
        m = np.where(np.isfinite(m), m, 1).astype(dt.np)
        np.testing.assert_allclose(reduce_rows(Ops.ADD, dt, m), m.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-3)
        np.testing.assert_allclose(reduce_rows(Ops.MUL, dt, m / 8), np.prod(m.astype(np.float64) / 8, axis=1),
                                   rtol=1e-5)
    else:  # wrapping sums and products in the dtype are exact
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(reduce_rows(Ops.ADD, dt, m), m.sum(1, dtype=dt.np))
            np.testing.assert_array_equal(reduce_rows(Ops.MUL, dt, m), np.prod(m, axis=1, dtype=dt.np))
    same_bits(reduce_rows(Ops.MAX, dt, m), m.max(1))


def test_reduce_narrow_floats():
    m = RNG.integers(-8, 8, (5, 40)).astype(np.float16)
    np.testing.assert_array_equal(reduce_rows(Ops.ADD, dtypes.float16, m), m.astype(np.float32).sum(1))
    b = m.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(reduce_rows(Ops.ADD, dtypes.bfloat16, b), b.astype(np.float32).sum(1))
    same_bits(reduce_rows(Ops.MAX, dtypes.bfloat16, b), b.max(1))


def test_reduce_two_axes_and_to_a_scalar():
    a = RNG.integers(-100, 100, (6, 5, 7)).astype(np.int32)
    i, k1, k2 = UOp.range(6, out_axis(0)), UOp.range(5, reduced_axis(0)), UOp.range(7, reduced_axis(1))
    src = param(1, dtypes.int32, a.size)
    value = src.index(i * 35 + k1 * 7 + k2).load().reduce(k1, k2, op=Ops.ADD)
    got = run(UOp.sink(param(0, dtypes.int32, 6).index(i).store(value)), [(dtypes.int32, 6)],
              [(dtypes.int32, a.reshape(-1))])[0]
    np.testing.assert_array_equal(got, a.sum((1, 2)))
    # a max over everything, stored at index 0 of a one-element buffer; nested reductions
    k = UOp.range(a.size, reduced_axis(2))
    total = src.index(k).load().reduce(k, op=Ops.MAX)
    zero = UOp.const(dtypes.int32, 0)
    got = run(UOp.sink(param(0, dtypes.int32, 1).index(zero).store(total)), [(dtypes.int32, 1)],
              [(dtypes.int32, a.reshape(-1))])[0]
    assert got[0] == a.max()
    inner = src.index(i * 35 + k1 * 7 + k2).load().reduce(k2, op=Ops.MAX)
    value = inner.reduce(k1, op=Ops.ADD)
    got = run(UOp.sink(param(0, dtypes.int32, 6).index(i).store(value)), [(dtypes.int32, 6)],
              [(dtypes.int32, a.reshape(-1))])[0]
    np.testing.assert_array_equal(got, a.max(2).sum(1))


def test_reduce_counts_values_that_ignore_the_range_and_empty_ranges():
    k = UOp.range(37, reduced_axis(0))
    count = UOp.const(dtypes.int32, 1).reduce(k, op=Ops.ADD)
    zero = UOp.const(dtypes.int32, 0)
    assert run(UOp.sink(param(0, dtypes.int32, 1).index(zero).store(count)), [(dtypes.int32, 1)], [])[0][0] == 37
    empty = UOp.range(0, reduced_axis(1))
    sinks = {Ops.ADD: 0.0, Ops.MUL: 1.0, Ops.MAX: -np.inf}
    for op, want in sinks.items():
        value = UOp.const(dtypes.float32, 5.0).reduce(empty, op=op)
        got = run(UOp.sink(param(0, dtypes.float32, 1).index(zero).store(value)), [(dtypes.float32, 1)], [])[0]
        assert got[0] == want


def matmul_kernel(m: int, k: int, n: int, dt: DType = dtypes.float32) -> UOp:
    i, j, r = UOp.range(m, out_axis(0)), UOp.range(n, out_axis(1)), UOp.range(k, reduced_axis(0))
    a = param(1, dt, m * k).index(i * k + r).load()
    b = param(2, dt, k * n).index(r * n + j).load()
    return UOp.sink(param(0, dt, m * n).index(i * n + j).store((a * b).reduce(r, op=Ops.ADD)))


def test_matmul_exact_on_integer_valued_floats():
    a = RNG.integers(-8, 8, (64, 64)).astype(np.float32)
    b = RNG.integers(-8, 8, (64, 64)).astype(np.float32)
    got = run(matmul_kernel(64, 64, 64), [(dtypes.float32, 64 * 64)], [(dtypes.float32, a), (dtypes.float32, b)])[0]
    np.testing.assert_array_equal(got.reshape(64, 64), a @ b)


def test_chunked_evaluation_matches(monkeypatch):
    monkeypatch.setattr(pyrt, "CHUNK_ELEMENTS", 100)  # forces chunks of one or two rows
    a = RNG.integers(-8, 8, (19, 13)).astype(np.float32)
    b = RNG.integers(-8, 8, (13, 11)).astype(np.float32)
    got = run(matmul_kernel(19, 13, 11), [(dtypes.float32, 19 * 11)], [(dtypes.float32, a), (dtypes.float32, b)])[0]
    np.testing.assert_array_equal(got.reshape(19, 11), a @ b)
    # the chunks run along the biggest output range, here the second one
    b2 = RNG.integers(-8, 8, (13, 23)).astype(np.float32)
    got = run(matmul_kernel(3, 13, 23), [(dtypes.float32, 3 * 23)], [(dtypes.float32, a[:3]), (dtypes.float32, b2)])[0]
    np.testing.assert_array_equal(got.reshape(3, 23), a[:3] @ b2)
    m = sample(dtypes.int32, 30 * 40).reshape(30, 40)
    np.testing.assert_array_equal(reduce_rows(Ops.MAX, dtypes.int32, m), m.max(1))


def test_large_elementwise_kernel():
    n = 1 << 20
    a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    r = UOp.range(n, out_axis(0))
    x, y = param(1, dtypes.float32, n).index(r).load(), param(2, dtypes.float32, n).index(r).load()
    sink = UOp.sink(param(0, dtypes.float32, n).index(r).store((x * y + x).maximum(y) * 0.5))
    prg = DEV.program("big", RENDERER.render("big", sink))
    bufs = [Buffer(DEV, n, dtypes.float32).allocate()] + [Buffer(DEV, n, dtypes.float32).copyin(v) for v in (a, b)]
    prg(*[buf.handle for buf in bufs])
    same_bits(bufs[0].numpy(), np.maximum(a * b + a, b) * np.float32(0.5))


# ------------------------------------------------------------------------------------------ variables

def test_define_var_values_in_name_order():
    n = 12
    r = UOp.range(n, out_axis(0))
    scale, shift = UOp.variable("scale", 0, 100), UOp.variable("a_shift", -50, 50)
    sink = UOp.sink(param(0, dtypes.int32, n).index(r).store(param(1, dtypes.int32, n).index(r).load() * scale
                                                             + shift))
    a = np.arange(n, dtype=np.int32)
    got = run(sink, [(dtypes.int32, n)], [(dtypes.int32, a)], vals=(-7, 3))[0]  # a_shift, then scale
    np.testing.assert_array_equal(got, a * 3 - 7)


def test_define_var_as_a_loop_bound():
    count = UOp.variable("count", 1, 16)
    r = UOp.range(count, out_axis(0))
    sink = UOp.sink(param(0, dtypes.int32, 16).index(r).store(r * r))
    got = run(sink, [(dtypes.int32, 16)], [], vals=(5,))[0]
    np.testing.assert_array_equal(got, [0, 1, 4, 9, 16] + [0] * 11)


# ------------------------------------------------------------------------------------------ agreement with folding

_CHECKED_OPS = [Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC, Ops.ADD, Ops.SUB, Ops.MUL,
                Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.POW, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR,
                Ops.XOR, Ops.SHL, Ops.SHR]


@pytest.mark.parametrize("dt", INTS + FLOATS + [dtypes.bfloat16, dtypes.bool], ids=str)
def test_agrees_with_constant_folding(dt):
    """Where `tgcore.uop.alu.exec_alu` (the constant folder's semantics) defines a result, the interpreter
    computes the same bits."""
    from tgcore.uop.alu import UndefinedOp, exec_alu
    a, b = sample(dt, 48), sample(dt, 48)[::-1].copy()
    if dtypes.is_int(dt):
        b[::3] = (np.arange(16) % (8 * dt.itemsize)).astype(dt.np)  # some in-range shift amounts
    py = (lambda v: float(v)) if dtypes.is_float(dt) else (lambda v: bool(v)) if dt is dtypes.bool else int
    for op in _CHECKED_OPS:
        unary = op in (Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC)
        out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
        want, keep = [], []
        for x, y in zip(a, b, strict=True):
            try:
                want.append(exec_alu(op, out_dt, (py(x),) if unary else (py(x), py(y))))
                keep.append(True)
            except (UndefinedOp, NotImplementedError, TypeError, ValueError, OverflowError):
                want.append(0)
                keep.append(False)
        if not any(keep):
            continue
        fn = (lambda x, op=op: x.alu(op)) if unary else (lambda x, y, op=op: x.alu(op, y))
        got = elementwise(fn, [(dt, a)] if unary else [(dt, a), (dt, b)], out_dt)
        mask = np.array(keep)
        same_bits(got[mask], np.array(want, dtype=np_dtype(out_dt))[mask])

"""Tests for tgcore.dtype against independent references.

References: numpy (int wrap-around, float16, ranges, numpy dtypes), the struct module (float32/float16
rounding), ml_dtypes (bfloat16, float8_e4m3fn, float8_e5m2), exact rational arithmetic (fractions), and a
hand-written table of torch.promote_types answers (torch is not installed).
"""

from __future__ import annotations

import itertools
import math
import pickle
import struct
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tgcore.dtype import AddrSpace, DType, PtrDType, dtypes, least_upper_dtype, least_upper_float, to_dtype, truncate

SCALARS = dtypes.all
INTS = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16, dtypes.uint32,
        dtypes.uint64)
ML_DTYPES = {dtypes.bfloat16: ml_dtypes.bfloat16, dtypes.fp8e4m3: ml_dtypes.float8_e4m3fn,
             dtypes.fp8e5m2: ml_dtypes.float8_e5m2}
SMALL_FLOATS = {dtypes.float16: np.float16, **ML_DTYPES}  # dtype -> reference numpy scalar type
STORAGE = {dtypes.float16: np.uint16, dtypes.bfloat16: np.uint16, dtypes.fp8e4m3: np.uint8, dtypes.fp8e5m2: np.uint8}
RNG_SEED = 1234

# ----------------------------------------------------------------------------------------------- DType basics


def test_scalar_fields():
    expected = {  # name: (itemsize, struct fmt)
        "bool": (1, "?"), "int8": (1, "b"), "uint8": (1, "B"), "int16": (2, "h"), "uint16": (2, "H"),
        "int32": (4, "i"), "uint32": (4, "I"), "int64": (8, "q"), "uint64": (8, "Q"), "float16": (2, "e"),
        "float32": (4, "f"), "float64": (8, "d"), "bfloat16": (2, None), "fp8e4m3": (1, None),
        "fp8e5m2": (1, None)}
    assert {dt.name for dt in SCALARS} == set(expected)
    for dt in SCALARS:
        assert (dt.itemsize, dt.fmt, dt.count) == (*expected[dt.name], 1)
        if dt.fmt is not None:
            assert struct.calcsize("=" + dt.fmt) == dt.itemsize
    assert dtypes.void.itemsize == 0 and dtypes.void.name == "void"


def test_aliases():
    assert dtypes.half is dtypes.float16 and dtypes.float is dtypes.float32 and dtypes.double is dtypes.float64
    assert dtypes.int is dtypes.int32 and dtypes.long is dtypes.int64 and dtypes.char is dtypes.int8
    assert dtypes.uchar is dtypes.uint8 and dtypes.short is dtypes.int16 and dtypes.ushort is dtypes.uint16
    assert dtypes.uint is dtypes.uint32 and dtypes.ulong is dtypes.uint64
    assert dtypes.default_float is dtypes.float32 and dtypes.default_int is dtypes.int32


def test_vectors_are_interned_and_round_trip():
    for dt in SCALARS:
        v = dt.vec(4)
        assert v is dt.vec(4) and v == dt.vec(4) and hash(v) == hash(dt.vec(4))
        assert v.count == 4 and v.itemsize == 4 * dt.itemsize and v.fmt == dt.fmt
        assert v.scalar() is dt and dt.scalar() is dt and dt.vec(1) is dt
        assert v != dt.vec(2) and v != dt
    assert dtypes.float32.vec(4).name == "float32x4"
    assert len({dtypes.float32, dtypes.float32.vec(2), dtypes.float32.vec(4), dtypes.int32.vec(4)}) == 4


def test_direct_construction_is_interned():
    assert DType("float32", 4, 1, "f", 13) is dtypes.float32


def test_vec_errors():
    with pytest.raises(ValueError):
        dtypes.float32.vec(4).vec(2)
    with pytest.raises(ValueError):
        dtypes.float32.vec(0)
    with pytest.raises(ValueError):
        dtypes.void.vec(4)


def test_immutable():
    with pytest.raises(AttributeError):
        dtypes.float32.name = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        dtypes.float32.ptr().size = 3  # type: ignore[misc]


def test_repr():
    assert repr(dtypes.float32) == "dtypes.float32"
    assert repr(dtypes.half) == "dtypes.float16"
    assert repr(dtypes.int8.vec(4)) == "dtypes.int8.vec(4)"
    assert repr(dtypes.float32.ptr()) == "dtypes.float32.ptr()"
    assert repr(dtypes.float32.ptr(16, AddrSpace.LOCAL)) == "dtypes.float32.ptr(size=16, addrspace=AddrSpace.LOCAL)"
    assert repr(dtypes.float32.ptr().vec(4)) == "dtypes.float32.ptr().vec(4)"


def test_sortable():
    assert sorted([dtypes.float32, dtypes.bool, dtypes.float32.ptr(), dtypes.int8])[0] is dtypes.bool


def test_pointers():
    p = dtypes.float32.ptr()
    assert isinstance(p, PtrDType) and isinstance(p, DType)
    assert p.base is dtypes.float32 and p.addrspace is AddrSpace.GLOBAL and p.size == -1
    assert p.itemsize == 8 and p.count == 1 and p is dtypes.float32.ptr()
    assert p.scalar() is p and p.vec(1) is p
    assert p != dtypes.float32.ptr(16) and p != dtypes.float32.ptr(addrspace=AddrSpace.LOCAL)
    local = dtypes.half.vec(4).ptr(64, AddrSpace.REG)
    assert local.base is dtypes.half.vec(4) and local.size == 64 and local.addrspace is AddrSpace.REG
    assert not dtypes.is_float(p) and not dtypes.is_int(p)


def test_vector_of_pointers():
    p = dtypes.int32.ptr(32, AddrSpace.LOCAL)
    pv = p.vec(4)
    assert isinstance(pv, PtrDType) and pv is p.vec(4)
    assert pv.count == 4 and pv.itemsize == 32 and pv.base is dtypes.int32
    assert pv.addrspace is AddrSpace.LOCAL and pv.size == 32
    assert pv.scalar() is p and pv != p
    with pytest.raises(ValueError):
        pv.vec(2)
    with pytest.raises(TypeError):
        p.ptr()


@pytest.mark.parametrize("dt", [*SCALARS, dtypes.void, dtypes.float32.vec(8), dtypes.bfloat16.ptr(),
                                dtypes.half.vec(2).ptr(7, AddrSpace.LOCAL), dtypes.int8.ptr().vec(4)])
def test_pickle_keeps_identity(dt):
    assert pickle.loads(pickle.dumps(dt)) is dt


def test_addrspace():
    assert {a.name for a in AddrSpace} == {"GLOBAL", "LOCAL", "REG"}


# ----------------------------------------------------------------------------------------------- ranges, numpy

@pytest.mark.parametrize("dt", INTS)
def test_int_min_max_match_numpy(dt):
    info = np.iinfo(dt.np)
    assert (dt.min, dt.max) == (int(info.min), int(info.max))
    assert dt.vec(4).min == dt.min and dt.vec(4).max == dt.max


def test_bool_and_float_ranges():
    assert dtypes.bool.min is False and dtypes.bool.max is True
    for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.fp8e4m3, dtypes.fp8e5m2):
        assert dt.min == -math.inf and dt.max == math.inf
    with pytest.raises(TypeError):
        dtypes.void.max  # noqa: B018


@pytest.mark.parametrize("dt", SCALARS)
def test_numpy_round_trip(dt):
    if dt in ML_DTYPES:
        assert dt.np is None
        assert dtypes.from_numpy(ML_DTYPES[dt]) is dt  # ml_dtypes' numpy extension types are understood
    else:
        assert dt.np == np.dtype(dt.fmt) and dt.np.itemsize == dt.itemsize
        assert dtypes.from_numpy(dt.np) is dt
        assert dtypes.from_numpy(np.zeros(1, dtype=dt.np).dtype) is dt


def test_numpy_misc():
    assert dtypes.from_numpy(np.float32) is dtypes.float32 and dtypes.from_numpy("int16") is dtypes.int16
    assert dtypes.float32.vec(4).np is None and dtypes.float32.ptr().np is None and dtypes.void.np is None
    with pytest.raises(ValueError, match="complex64"):
        dtypes.from_numpy(np.complex64)


# ----------------------------------------------------------------------------------------------- namespace

def test_predicates():
    floats = {dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.fp8e4m3, dtypes.fp8e5m2}
    unsigned = {dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64}
    for dt in SCALARS:
        for lanes in (1, 4):
            v = dt.vec(lanes)
            assert dtypes.is_float(v) == (dt in floats)
            assert dtypes.is_int(v) == (dt in INTS)
            assert dtypes.is_unsigned(v) == (dt in unsigned)
            assert dtypes.is_bool(v) == (dt is dtypes.bool)
            if dt.np is not None:  # numpy as the reference where it has the type
                assert dtypes.is_float(dt) == np.issubdtype(dt.np, np.floating)
                assert dtypes.is_int(dt) == np.issubdtype(dt.np, np.integer)
                assert dtypes.is_unsigned(dt) == np.issubdtype(dt.np, np.unsignedinteger)


def test_fields_and_to_dtype():
    fields = dtypes.fields()
    for dt in SCALARS:
        assert fields[dt.name] is dt and to_dtype(dt.name) is dt and to_dtype(dt) is dt
    assert to_dtype("half") is dtypes.float16 and to_dtype("void") is dtypes.void and fields["long"] is dtypes.int64
    assert to_dtype(dtypes.float32.vec(4)) is dtypes.float32.vec(4)
    with pytest.raises(ValueError, match="float32"):  # the message lists the valid names
        to_dtype("floot32")
    with pytest.raises(ValueError):
        to_dtype(3)  # type: ignore[arg-type]


def test_from_py():
    assert dtypes.from_py(True) is dtypes.bool
    assert dtypes.from_py(3) is dtypes.default_int
    assert dtypes.from_py(3.0) is dtypes.default_float
    assert dtypes.from_py([True, False]) is dtypes.bool
    assert dtypes.from_py([1, True]) is dtypes.int32
    assert dtypes.from_py([1, 2.5]) is dtypes.float32
    assert dtypes.from_py([[1, 2], [3, 4.0]]) is dtypes.float32
    assert dtypes.from_py((1, 2)) is dtypes.int32
    with pytest.raises(TypeError):
        dtypes.from_py("x")


# ----------------------------------------------------------------------------------------------- promotion

# torch.promote_types for the dtypes torch's classic promotion table covers (torch.{bool, uint8, int8, int16,
# int32, int64, float16, bfloat16, float32, float64}), written down from torch's documented rules: bool is
# below everything; ints widen, uint8 + a signed int -> the smallest signed int holding both; any int + any
# float -> that float; float16 + bfloat16 -> float32; otherwise the wider float.
_T = ["b1", "u1", "i1", "i2", "i4", "i8", "f2", "bf", "f4", "f8"]
_TORCH_TABLE = [
    # b1    u1    i1    i2    i4    i8    f2    bf    f4    f8
    ["b1", "u1", "i1", "i2", "i4", "i8", "f2", "bf", "f4", "f8"],  # b1
    ["u1", "u1", "i2", "i2", "i4", "i8", "f2", "bf", "f4", "f8"],  # u1
    ["i1", "i2", "i1", "i2", "i4", "i8", "f2", "bf", "f4", "f8"],  # i1
    ["i2", "i2", "i2", "i2", "i4", "i8", "f2", "bf", "f4", "f8"],  # i2
    ["i4", "i4", "i4", "i4", "i4", "i8", "f2", "bf", "f4", "f8"],  # i4
    ["i8", "i8", "i8", "i8", "i8", "i8", "f2", "bf", "f4", "f8"],  # i8
    ["f2", "f2", "f2", "f2", "f2", "f2", "f2", "f4", "f4", "f8"],  # f2
    ["bf", "bf", "bf", "bf", "bf", "bf", "f4", "bf", "f4", "f8"],  # bf
    ["f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f4", "f8"],  # f4
    ["f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8", "f8"],  # f8
]
_TORCH_NAMES = {"b1": dtypes.bool, "u1": dtypes.uint8, "i1": dtypes.int8, "i2": dtypes.int16, "i4": dtypes.int32,
                "i8": dtypes.int64, "f2": dtypes.float16, "bf": dtypes.bfloat16, "f4": dtypes.float32,
                "f8": dtypes.float64}


def torch_promote_types(a: DType, b: DType) -> DType | None:
    """torch's answer, or None where torch raises (fp8 with anything else, uint16/32/64 with a non-float)."""
    if a is b:
        return a
    names = {v: k for k, v in _TORCH_NAMES.items()}
    if a in names and b in names:
        return _TORCH_NAMES[_TORCH_TABLE[_T.index(names[a])][_T.index(names[b])]]
    barebones_unsigned = (dtypes.uint16, dtypes.uint32, dtypes.uint64)
    torch_floats = (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
    if a in barebones_unsigned and b in torch_floats:
        return b
    if b in barebones_unsigned and a in torch_floats:
        return a
    return None


# where the module docstring documents a deliberate difference from torch
TORCH_DEVIATIONS = {frozenset({dtypes.uint64, dtypes.float16}): dtypes.float32,
                    frozenset({dtypes.uint64, dtypes.bfloat16}): dtypes.float32}


def test_torch_table_is_symmetric():
    assert all(_TORCH_TABLE[i][j] == _TORCH_TABLE[j][i] for i in range(len(_T)) for j in range(len(_T)))


@pytest.mark.parametrize("a,b", list(itertools.product(SCALARS, SCALARS)))
def test_promotion_matches_torch(a, b):
    expected = torch_promote_types(a, b)
    if frozenset({a, b}) in TORCH_DEVIATIONS:
        assert least_upper_dtype(a, b) is TORCH_DEVIATIONS[frozenset({a, b})]
    elif expected is not None:
        assert least_upper_dtype(a, b) is expected


def test_torch_covers_most_pairs():
    defined = sum(torch_promote_types(a, b) is not None for a in SCALARS for b in SCALARS)
    assert defined >= 120  # guard against the reference silently shrinking


@pytest.mark.parametrize("pair,expected", [
    ((dtypes.uint16, dtypes.int8), dtypes.int32),
    ((dtypes.uint16, dtypes.int16), dtypes.int32),
    ((dtypes.uint32, dtypes.int8), dtypes.int64),
    ((dtypes.uint32, dtypes.int32), dtypes.int64),
    ((dtypes.uint64, dtypes.int8), dtypes.float32),
    ((dtypes.uint64, dtypes.int64), dtypes.float32),
    ((dtypes.uint16, dtypes.uint32), dtypes.uint32),
    ((dtypes.uint8, dtypes.uint64), dtypes.uint64),
    ((dtypes.bool, dtypes.uint64), dtypes.uint64),
    ((dtypes.fp8e4m3, dtypes.fp8e5m2), dtypes.float16),
    ((dtypes.fp8e4m3, dtypes.float16), dtypes.float16),
    ((dtypes.fp8e5m2, dtypes.bfloat16), dtypes.float32),
    ((dtypes.fp8e4m3, dtypes.float64), dtypes.float64),
    ((dtypes.int64, dtypes.fp8e5m2), dtypes.fp8e5m2),
    ((dtypes.bool, dtypes.fp8e4m3), dtypes.fp8e4m3),
    ((dtypes.uint64, dtypes.fp8e4m3), dtypes.float32),
])
def test_documented_choices_where_torch_raises(pair, expected):
    assert least_upper_dtype(*pair) is expected


def test_lattice_laws():
    for a, b in itertools.product(SCALARS, SCALARS):
        join = least_upper_dtype(a, b)
        assert join is least_upper_dtype(b, a)  # symmetric
        assert least_upper_dtype(a, join) is join and least_upper_dtype(b, join) is join  # an upper bound
        assert join.priority >= max(a.priority, b.priority)  # priority is compatible with the order
    for a in SCALARS:
        assert least_upper_dtype(a) is a and least_upper_dtype(a, a) is a
        assert least_upper_dtype(dtypes.bool, a) is a  # bool is the bottom
        assert least_upper_dtype(dtypes.float64, a) is dtypes.float64  # float64 is the top
    for a, b, c in itertools.product(SCALARS, SCALARS, SCALARS):
        left = least_upper_dtype(least_upper_dtype(a, b), c)
        assert left is least_upper_dtype(a, least_upper_dtype(b, c))  # associative
        assert left is least_upper_dtype(a, b, c)


def test_join_is_least():
    # no common upper bound is strictly below the join
    for a, b in itertools.product(SCALARS, SCALARS):
        join = least_upper_dtype(a, b)
        for c in SCALARS:
            if least_upper_dtype(a, c) is c and least_upper_dtype(b, c) is c:
                assert least_upper_dtype(join, c) is c


def test_promotion_of_vectors_and_errors():
    assert least_upper_dtype(dtypes.int8.vec(4), dtypes.uint8.vec(4)) is dtypes.int16.vec(4)
    with pytest.raises(TypeError):
        least_upper_dtype(dtypes.int8.vec(4), dtypes.int8)
    with pytest.raises(TypeError):
        least_upper_dtype(dtypes.float32.ptr(), dtypes.float32)
    with pytest.raises(TypeError):
        least_upper_dtype(dtypes.void, dtypes.float32)
    with pytest.raises(ValueError):
        least_upper_dtype()


def test_least_upper_float():
    for dt in SCALARS:
        assert least_upper_float(dt) is (dt if dtypes.is_float(dt) else dtypes.float32)
    assert least_upper_float(dtypes.half.vec(2)) is dtypes.half.vec(2)


# ----------------------------------------------------------------------------------------------- truncate: ints

NUMPY_INT_SOURCE_RANGE = st.integers(min_value=-(2**63), max_value=2**64 - 1)


@settings(derandomize=True, max_examples=300)
@given(value=NUMPY_INT_SOURCE_RANGE, dt=st.sampled_from(INTS))
def test_truncate_int_wraps_like_numpy(value, dt):
    source = np.array([value], dtype=np.int64 if value < 2**63 else np.uint64)
    expected = int(source.astype(dt.np)[0])  # numpy integer casts wrap modulo 2**bits
    assert truncate(dt, value) == expected
    assert type(truncate(dt, value)) is int


@settings(derandomize=True, max_examples=200)
@given(value=st.integers(min_value=-(2**200), max_value=2**200), dt=st.sampled_from(INTS))
def test_truncate_int_wraps_big_python_ints(value, dt):
    got = truncate(dt, value)
    assert dt.min <= got <= dt.max and (got - value) % (1 << (8 * dt.itemsize)) == 0


@settings(derandomize=True, max_examples=200)
@given(value=st.floats(min_value=-2.0**31 + 1, max_value=2.0**31 - 1), dt=st.sampled_from([dtypes.int32,
                                                                                           dtypes.int64]))
def test_truncate_float_to_int_rounds_toward_zero(value, dt):
    assert truncate(dt, value) == int(np.array([value]).astype(dt.np)[0])


def test_truncate_int_special_cases():
    assert truncate(dtypes.uint8, 256) == 0 and truncate(dtypes.uint8, -1) == 255
    assert truncate(dtypes.int8, 128) == -128 and truncate(dtypes.int64, 2**63) == -(2**63)
    assert truncate(dtypes.int32, -3.7) == -3
    assert truncate(dtypes.int32, math.nan) == 0 and truncate(dtypes.int32, math.inf) == 0  # documented choice
    assert truncate(dtypes.int16, True) == 1


def test_truncate_bool():
    assert truncate(dtypes.bool, 0) is False and truncate(dtypes.bool, 2) is True
    assert truncate(dtypes.bool, 0.0) is False and truncate(dtypes.bool, -0.5) is True
    assert truncate(dtypes.bool, math.nan) is True  # like C: NaN != 0


def test_truncate_vector_and_errors():
    assert truncate(dtypes.uint8.vec(3), (1, 256, -1)) == (1, 0, 255)
    with pytest.raises(TypeError):
        truncate(dtypes.void, 1)
    with pytest.raises(TypeError):
        truncate(dtypes.float32.ptr(), 1)


# ----------------------------------------------------------------------------------------------- truncate: floats

def struct_round(fmt: str, value: float) -> float:
    """Round through the struct module; it refuses values whose rounded result overflows."""
    try:
        return struct.unpack(fmt, struct.pack(fmt, value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def same_float(a: float, b: float) -> bool:
    """Equal, treating NaN == NaN and telling -0.0 from 0.0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@settings(derandomize=True, max_examples=500)
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_truncate_float32_matches_struct(value):
    got = truncate(dtypes.float32, value)
    assert same_float(got, struct_round("<f", value))
    with np.errstate(over="ignore"):
        assert same_float(got, float(np.float32(value)))


@settings(derandomize=True, max_examples=500)
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_truncate_float16_matches_numpy_and_struct(value):
    got = truncate(dtypes.float16, value)
    assert same_float(got, struct_round("<e", value))
    with np.errstate(over="ignore"):
        assert same_float(got, float(np.float16(value)))


def test_truncate_float64_and_huge_ints():
    assert truncate(dtypes.float64, 0.1) == 0.1 and truncate(dtypes.float64, 3) == 3.0
    assert truncate(dtypes.float64, 10**400) == math.inf and truncate(dtypes.float32, -(10**400)) == -math.inf
    assert truncate(dtypes.float32, 16777217) == 16777216.0  # 2**24 + 1 is a tie, rounds to even


def ml_round(dt: DType, value: float) -> float:
    """ml_dtypes' rounding of a float32 value."""
    return float(np.array([value], dtype=np.float32).astype(ML_DTYPES[dt])[0].astype(np.float32))


@pytest.mark.parametrize("dt", list(ML_DTYPES))
@settings(derandomize=True, max_examples=500)
@given(value=st.floats(width=32, allow_nan=True, allow_infinity=True))
def test_truncate_small_floats_match_ml_dtypes(dt, value):
    assert same_float(truncate(dt, value), ml_round(dt, value))


# value, bfloat16, fp8e4m3, fp8e5m2 -- each checked against ml_dtypes too
SPECIAL_CASES = [
    0.0, -0.0, 1.0, -1.5, math.inf, -math.inf, math.nan,
    1 + 2**-8, 1 + 3 * 2**-8,  # bfloat16 ties: to even (down, then up)
    1 + 2**-4, 1 + 3 * 2**-4,  # e4m3 ties
    1 + 2**-3, 1 + 3 * 2**-3,  # e5m2 ties
    448.0, 464.0, 464.5, 480.0, 1e4,  # e4m3 max, tie below NaN, above the tie, NaN range
    57344.0, 61440.0, 61441.0, 1e6,  # e5m2 max, tie to inf, beyond
    3.3895313892515355e38, 3.3961775292304744e38, 3.4e38,  # bfloat16 max, overflow tie, beyond
    2**-6, 2**-9, 2**-10, 1.5 * 2**-10, 2**-11, 2**-14, 2**-16, 2**-17, 1.5 * 2**-17, 3 * 2**-18,  # subnormals
    2**-126, 2**-133, 2**-134, 2**-149, 1e-40,  # bfloat16 subnormals
]


@pytest.mark.parametrize("dt", list(ML_DTYPES))
@pytest.mark.parametrize("value", SPECIAL_CASES + [-v for v in SPECIAL_CASES])
def test_truncate_special_cases_match_ml_dtypes(dt, value):
    assert same_float(truncate(dt, value), ml_round(dt, value))


def test_truncate_documented_fp8_overflow():
    # e4m3 "fn" has no infinity: overflow and inf become NaN (ml_dtypes' non-saturating conversion)
    assert truncate(dtypes.fp8e4m3, 448.0) == 448.0 and truncate(dtypes.fp8e4m3, 464.0) == 448.0
    assert math.isnan(truncate(dtypes.fp8e4m3, 465.0)) and math.isnan(truncate(dtypes.fp8e4m3, math.inf))
    assert truncate(dtypes.fp8e5m2, 1e6) == math.inf and truncate(dtypes.fp8e5m2, -61440.0) == -math.inf
    assert truncate(dtypes.fp8e5m2, 61439.0) == 57344.0
    assert truncate(dtypes.bfloat16, 1 + 2**-8) == 1.0 and math.isnan(truncate(dtypes.bfloat16, math.nan))


def exact_round(value: float, mantissa_bits: int, min_exponent: int) -> float:
    """Round-to-nearest-even of a finite value, computed with exact fractions (no overflow handling)."""
    exact = Fraction(value)
    if exact == 0:
        return value
    exponent = max(math.floor(math.log2(abs(exact))), min_exponent)
    while Fraction(2) ** exponent > abs(exact) and exponent > min_exponent:  # guard log2 rounding
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= abs(exact):
        exponent += 1
    quantum = Fraction(2) ** (exponent - mantissa_bits)
    rounded = float(round(exact / quantum) * quantum)  # Fraction.__round__ rounds ties to even
    return math.copysign(rounded, value)  # a value rounding to zero keeps its sign


FORMATS = {dtypes.float16: (10, -14), dtypes.bfloat16: (7, -126), dtypes.fp8e4m3: (3, -6), dtypes.fp8e5m2: (2, -14)}


@pytest.mark.parametrize("dt", list(FORMATS))
@settings(derandomize=True, max_examples=300)
@given(value=st.floats(min_value=-400.0, max_value=400.0, allow_subnormal=True))
def test_truncate_float64_rounds_once_exactly(dt, value):
    # float64 inputs round once, straight to the target (ml_dtypes goes through float32 first)
    assert same_float(truncate(dt, value), exact_round(value, *FORMATS[dt]))


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.bfloat16])
@settings(derandomize=True, max_examples=300)
@given(value=st.integers(min_value=-(2**120), max_value=2**120))
def test_truncate_big_ints_round_once_exactly(dt, value):
    mantissa_bits, min_exponent = FORMATS.get(dt, (23, -126))
    assert same_float(truncate(dt, value), exact_round(value, mantissa_bits, min_exponent))


def test_double_rounding_is_avoided():
    x = 1 + 2**-8 + 2**-30  # just above a bfloat16 tie; float32 would round it onto the tie
    assert truncate(dtypes.bfloat16, x) == 1 + 2**-7
    assert ml_round(dtypes.bfloat16, x) == 1.0  # what rounding via float32 gives
    big = 2**60 + 2**36 + 1  # just above a float32 tie; float64 would round it onto the tie
    assert truncate(dtypes.float32, big) == 2**60 + 2**37 and truncate(dtypes.float32, -big) == -(2**60 + 2**37)
    assert truncate(dtypes.bfloat16, 2**60 + 2**52 + 1) == 2**60 + 2**53


# ----------------------------------------------------------------------------------------------- bit codecs

@pytest.mark.parametrize("dt", list(SMALL_FLOATS))
def test_bits_to_float_all_patterns(dt):
    bits = np.arange(1 << (8 * dt.itemsize), dtype=np.uint32).astype(STORAGE[dt])
    expected = bits.view(SMALL_FLOATS[dt]).astype(np.float32)
    got = dtypes.bits_to_float(bits, dt)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)  # NaNs compare equal here
    assert np.array_equal(np.signbit(got), np.signbit(expected))


@pytest.mark.parametrize("dt", list(SMALL_FLOATS))
def test_float_to_bits_random_float32_patterns(dt):
    rng = np.random.default_rng(RNG_SEED)
    values = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = values.astype(SMALL_FLOATS[dt])
    got = dtypes.float_to_bits(values, dt)
    assert got.dtype == STORAGE[dt]
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(got[~nan], expected.view(STORAGE[dt])[~nan])
    assert np.isnan(dtypes.bits_to_float(got[nan], dt)).all()


@pytest.mark.parametrize("dt", list(SMALL_FLOATS))
def test_float_to_bits_random_float32_in_range(dt):
    # random patterns are mostly huge or tiny; these exercise the format's own normal and subnormal range
    rng = np.random.default_rng(RNG_SEED + 1)
    mantissa_bits, min_exponent = FORMATS[dt]
    exponents = rng.integers(min_exponent - mantissa_bits - 2, 17, size=200_000)
    values = np.ldexp(rng.uniform(-2, 2, size=exponents.size), exponents).astype(np.float32)
    with np.errstate(over="ignore"):
        expected = values.astype(SMALL_FLOATS[dt])
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(dtypes.float_to_bits(values, dt)[~nan], expected.view(STORAGE[dt])[~nan])


def test_float16_bits_from_random_float64_match_numpy():
    # numpy converts float64 -> float16 directly, so float64 inputs can be compared bit for bit
    rng = np.random.default_rng(RNG_SEED + 2)
    values = np.ldexp(rng.uniform(-2, 2, size=200_000), rng.integers(-30, 18, size=200_000))
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(dtypes.float_to_bits(values, dtypes.float16), expected)


@pytest.mark.parametrize("dt", list(SMALL_FLOATS))
def test_bits_round_trip(dt):
    bits = np.arange(1 << (8 * dt.itemsize), dtype=np.uint32).astype(STORAGE[dt])
    values = dtypes.bits_to_float(bits, dt)
    finite_or_inf = ~np.isnan(values)
    np.testing.assert_array_equal(dtypes.float_to_bits(values, dt)[finite_or_inf], bits[finite_or_inf])


def test_bit_codec_shapes_and_errors():
    grid = np.array([[1.0, 2.0], [3.0, -0.0]])
    assert dtypes.float_to_bits(grid, dtypes.bfloat16).shape == (2, 2)
    assert dtypes.float_to_bits(1.0, dtypes.bfloat16) == 0x3F80
    assert dtypes.float_to_bits(-0.0, dtypes.fp8e4m3) == 0x80
    with pytest.raises(ValueError, match="float32"):
        dtypes.float_to_bits(grid, dtypes.float32)

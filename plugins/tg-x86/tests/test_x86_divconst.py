"""Integer division and remainder by a constant as multiply and shift: the magic numbers against exact Python
integer division, and the kernels (scalar and vector lanes, every integer dtype, at the AVX2 and AVX-512 levels)
against numpy at edge values: IDIV truncates, MOD takes the dividend's sign, x/0 = 0, INT_MIN/-1 wraps; ``//`` and
``%`` (floor, built on them) against numpy's floor_divide and remainder. No div/idiv/vdivpd is left in the code."""
from __future__ import annotations

import numpy as np
import pytest
from tg_x86.cpu import unavailable_reason
from tg_x86.divconst import signed_magic, unsigned_magic
from tg_x86.isa import Inst, Op

from tgcore.codegen import get_program
from tgcore.dtype import DType, dtypes
from tgcore.runtime.cpufeatures import AVX512, cpu_features
from tgcore.schedule import cache as schedule_cache
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.uop import Ops

X86 = "CPU:X86"
rng = np.random.default_rng(11)
DIVIDING = (Op.DIV, Op.IDIV, Op.VDIVPD)
INT_DTYPES = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
              dtypes.uint64)


def _edge_dividends(bits: int, signed: bool) -> list[int]:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    near = [lo, lo + 1, lo + 2, hi, hi - 1, hi - 2, 0, 1, 2, 3, -1, -2, -3, 6, 7, 8, 9, 99, 100, -100, 641, -641]
    return [v for v in near if lo <= v <= hi] + [int(v) for v in rng.integers(lo, hi, 40, dtype=np.int64 if signed
                                                                            else np.uint64, endpoint=True)]


def _divisors(bits: int, signed: bool) -> list[int]:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    d = [0, 1, 2, 3, 5, 6, 7, 9, 10, 12, 25, 641, 1000, 3306, 3248, 1 << (bits // 2), (1 << (bits // 2)) + 1,
         hi, hi - 1, hi // 3, (1 << (bits - 1)) + (0 if signed else 1), 1 << (bits - 2)]
    if signed:
        d += [-1, -2, -3, -7, -8, -641, lo, lo + 1]
    return sorted({v for v in d if lo <= v <= hi})


def _trunc(a: int, d: int) -> tuple[int, int]:
    if d == 0:
        return 0, 0
    q = abs(a) // abs(d) * (1 if (a < 0) == (d < 0) else -1)
    return q, a - q * d


@pytest.mark.parametrize("bits", [32, 64])
def test_magic_numbers_divide_exactly(bits):
    for d in _divisors(bits, False):
        if d < 3 or d & (d - 1) == 0:
            continue
        m, s = unsigned_magic(d, bits)
        assert m < 1 << (bits + 1)
        for n in _edge_dividends(bits, False):
            assert (n * m) >> s == n // d, (n, d)
    for d in _divisors(bits, True):
        ad = abs(d)
        if ad < 3 or ad & (ad - 1) == 0:
            continue
        m, s = signed_magic(ad, bits)
        assert m < 1 << bits
        for n in _edge_dividends(bits, True) + [-(1 << (bits - 1))]:
            fl = (n * m) >> s  # floor
            assert fl + (n < 0) == _trunc(n, ad)[0], (n, d)


def _wrap(v: int, dt: DType) -> int:
    bits = dt.itemsize * 8
    v &= (1 << bits) - 1
    return v - (1 << bits) if not dtypes.is_unsigned(dt) and v >= 1 << (bits - 1) else v


def _levels() -> list[str]:
    if unavailable_reason() is not None:
        return []
    return ["avx2"] + (["avx512"] if AVX512.required <= cpu_features().features else [])


@pytest.fixture(autouse=True)
def _fresh_schedules():
    """The schedule cache lifts a constant that changes between graphs of one structure into a buffer (so ``x // d``
    for many d would divide by a loaded value): every graph here is scheduled afresh, and none is left behind."""
    schedule_cache.clear()
    yield
    schedule_cache.clear()


def _run(t: Tensor, x: np.ndarray, isa: str) -> tuple[np.ndarray, list]:
    """Run ``t`` (one kernel reading the one input ``x``, a constant divisor) rendered at ``isa``; also its
    instructions."""
    from tg_x86.renderer import X86Renderer
    r = X86Renderer(isa=isa)
    schedule_cache.clear()
    items, _ = create_schedule([t.uop], X86)
    (si,) = [si for si in items if si.kind != "copy"]
    spec = get_program(si.ast, r, 1)
    uops = list(spec.uops)
    store = next(u for u in uops if u.op is Ops.STORE)  # (a short padded row is unrolled: a store per vector)
    out_param = next(n.arg for n in store.src[0].toposort if n.op is Ops.PARAM)
    out = np.zeros(len(x), t.dtype.np)
    assert len(si.bufs) == 2, si.bufs
    bufs = [out if k == out_param else x for k in range(2)]
    prg = r.program(spec.name, r.compiler.compile(r.render(spec.name, uops)))
    prg(*[b.ctypes.data for b in bufs])
    return out, r.lower(spec.name, uops)


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
@pytest.mark.parametrize("isa", _levels())
@pytest.mark.parametrize("dt", INT_DTYPES, ids=str)
@pytest.mark.parametrize("n", [13, 64], ids=["scalar", "vector"])
def test_division_by_a_constant_matches_numpy(dt, isa, n):
    bits, signed = dt.itemsize * 8, not dtypes.is_unsigned(dt)
    values = _edge_dividends(bits, signed)
    x = np.array((values * 2)[:n] if n <= len(values) else (values * (n // len(values) + 1))[:n],
                 dtype=np.int64 if signed else np.uint64).astype(dt.np)
    for d in _divisors(bits, signed):
        src = Tensor.empty(n, dtype=dt, device=X86)
        for kind, op in (("idiv", Ops.IDIV), ("mod", Ops.MOD)):
            t = src._new(src.uop.alu(op, src.uop.const_like(d)))  # the raw op on a CONST divisor
            got, insts = _run(t, x, isa)
            want = [_wrap(_trunc(int(a), d)[0 if kind == "idiv" else 1], dt) for a in x.tolist()]
            np.testing.assert_array_equal(got, np.array(want, dtype=object).astype(dt.np), err_msg=f"{kind} {d}")
            assert not [i for i in insts if isinstance(i, Inst) and i.op in DIVIDING], (kind, d)


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
@pytest.mark.parametrize("dt", (dtypes.int32, dtypes.int64, dtypes.uint32), ids=str)
def test_floor_division_by_a_constant_matches_numpy(dt):
    info = np.iinfo(dt.np)
    x = np.concatenate([[info.min, info.min + 1, info.max, -1 if info.min else 1, 0, 7, 8],
                        rng.integers(info.min, info.max, 57, dtype=dt.np)]).astype(dt.np)
    for d in (3, 7, 8, 1000) + ((-3, -8, -1) if info.min else ()):
        schedule_cache.clear()
        t = Tensor(x, device=X86)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal((t // d).numpy(), np.floor_divide(x, np.array(d, dt.np)), err_msg=str(d))
            np.testing.assert_array_equal((t % d).numpy(), np.remainder(x, np.array(d, dt.np)), err_msg=str(d))


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
@pytest.mark.parametrize("n", [13, 1000])
def test_never_negative_dividends_divide_as_unsigned(n):
    """Index arithmetic (a loop index is never negative): signed division by a positive constant takes the unsigned
    sequence; a negative divisor still the signed one."""
    from test_x86_vector import kernels
    ref = np.arange(n, dtype=np.int64)
    for d in (7, 2, 8, 3306, -7, -8):
        schedule_cache.clear()
        idx = Tensor.arange(n, dtype=dtypes.int32, device=X86)
        q, r = idx.div(d, rounding_mode="trunc"), idx.fmod(d)
        np.testing.assert_array_equal(q.numpy(), np.trunc(ref / d).astype(np.int32), err_msg=str(d))
        np.testing.assert_array_equal(r.numpy(), np.fmod(ref, d).astype(np.int32), err_msg=str(d))
        for t in (q, r):
            assert not [i for k in kernels(t) for i in k if isinstance(i, Inst) and i.op in DIVIDING]

"""Symbolic simplification: identities, div/mod folding, comparisons, range analysis, constant folding
checked against numpy in the same dtype, and the sint helpers."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tgcore.dtype import dtypes
from tgcore.uop import AxisArg, Ops, RangeKind, UOp, resolve, smax, smin, ssimplify, sym_infer
from tgcore.uop.symbolic import difference

pytestmark = pytest.mark.usefixtures("spec_on")  # every rewrite checks its spec


a = UOp.variable("a", 0, 10)
b = UOp.variable("b", 0, 3)
n = UOp.variable("n", -8, 8)
flag = UOp.variable("f", 0, 1) < 1  # an undecided bool


def simp(e: UOp) -> str:
    return e.simplify().render()


@pytest.mark.parametrize("expr, want", [
    (lambda: a + 0, "a"), (lambda: 0 + a, "a"), (lambda: a * 1, "a"), (lambda: a * 0, "0"),
    (lambda: a - a, "0"), (lambda: a // 1, "a"), (lambda: a % 1, "0"), (lambda: (a * -1).__neg__(), "a"),
    (lambda: a // -1, "(-a)"), (lambda: (a + 3) + 4, "(a+7)"), (lambda: (a * 2) * 3, "(a*6)"),
    (lambda: 3 + a + a, "((a*2)+3)"), (lambda: a * 2 + b * 3 + a * 5, "((a*7)+(b*3))"),
    (lambda: (a + 1) * 4, "((a*4)+4)"), (lambda: a - 0, "a"), (lambda: a ^ 0, "a"), (lambda: a | 0, "a"),
    (lambda: a & 0, "0"), (lambda: a ^ a, "0"), (lambda: a.maximum(a), "a"), (lambda: a << 2, "(a*4)"),
    (lambda: a >> 1, "(a//2)"), (lambda: n >> 0, "n"), (lambda: n << 0, "n"), (lambda: n >> 1, "(n>>1)"),
])
def test_identities(expr, want):
    assert simp(expr()) == want


def test_boolean_algebra():
    assert (flag & True).simplify() is flag
    assert (flag & False).simplify().arg is False
    assert (flag | True).simplify().arg is True
    assert (flag | False).simplify() is flag
    assert (flag ^ False).simplify() is flag
    assert flag.logical_not().logical_not().simplify() is flag
    assert (flag & flag).simplify() is flag
    assert (flag ^ flag).simplify().arg is False
    assert flag.where(True, False).simplify() is flag
    assert flag.eq(True).simplify() is flag


@pytest.mark.parametrize("expr, want", [
    (lambda: (a * 4 + b) // 4, "a"),  # 0 <= b < 4
    (lambda: (a * 4 + b) % 4, "b"),
    (lambda: (a * 4 + b) // 8, "(a//2)"),
    (lambda: (a * 4 + b) % 8, "(((a%2)*4)+b)"),
    (lambda: (a * 6 + 4) // 2, "((a*3)+2)"),  # common factor
    (lambda: (a * 6 + 4) % 4, "((a%2)*2)"),
    (lambda: (a + 12) // 4, "((a//4)+3)"),  # whole multiples of the constant
    (lambda: (a // 2) // 3, "(a//6)"),
    (lambda: (a % 12) % 4, "(a%4)"),
    (lambda: (a % 4) // 4, "0"),
    (lambda: b % 4, "b"),
    (lambda: b // 4, "0"),
    (lambda: a // -2, "(-(a//2))"),
    (lambda: a % -3, "(a%3)"),
])
def test_div_mod_folding(expr, want):
    assert simp(expr()) == want


@pytest.mark.parametrize("expr, want", [
    (lambda: (a // 8) * 64 + (a % 8) * 8, "(a*8)"),
    (lambda: (a % 8) * 8 + (a // 8) * 64, "(a*8)"),  # either order
    (lambda: (a // 3) * 3 + a % 3, "a"),  # m = 1
    (lambda: a % 3 + (a // 3) * 3, "a"),
    (lambda: (a // 4) * 4 + b + a % 4, "(a+b)"),  # the pair apart inside a longer sum
    (lambda: (n // 4) * 4 + n % 4, "n"),  # negative dividends: C's n == (n//4)*4 + n%4 holds for every sign
    (lambda: (n // 4) * -12 + (n % 4) * -3 + 5, "((n*-3)+5)"),  # negative m, and a constant term
    (lambda: ((a + b) // 3) * 6 + ((a + b) % 3) * 2 + b, "((a*2)+(b*3))"),  # a sum as the dividend
    (lambda: (a // 8) * 64 + (a % 8) * 4 + (a % 8) * 4, "(a*8)"),  # the coefficients agree once merged
])
def test_div_mod_pairs_recombine(expr, want):
    assert simp(expr()) == want


def test_div_mod_pairs_with_other_coefficients_stay():
    for e in [(a // 8) * 63 + (a % 8) * 8, (a // 8) * 64 + (a % 8) * 7, (a // 8) * 64 + (a % 4) * 8,
              (n // 4) * 4 + (n % 3)]:
        s = e.simplify()
        assert any(u.op is Ops.IDIV for u in s.toposort), s.render()
        for v in range(-8, 11):
            env = {"a": max(v, 0), "n": max(min(v, 8), -8)}
            assert sym_infer(s, env) == sym_infer(e, env)


@pytest.mark.parametrize("expr, want", [
    (lambda: a & 15, "a"), (lambda: b & 3, "b"), (lambda: a & 255, "a"),
    (lambda: a & 0x7F0F, "a"),  # every bit a can have (0..3) is set
    (lambda: a & 7, "(a&7)"),  # a can be 8..10
    (lambda: a & 0x7F0E, "(a&32526)"),  # bit 0 is not set
    (lambda: n & 15, "(n&15)"),  # n can be negative: -1 & 15 == 15
    (lambda: (a % 4) & 3, "(a%4)"),
    (lambda: (a & 15) & 7, "(a&7)"),
])
def test_mask_that_keeps_every_bit(expr, want):
    assert simp(expr()) == want


def test_mask_unsigned():
    u = a.cast(dtypes.uint32)
    assert (u & 255).simplify() is u.simplify()
    assert (u & 7).simplify().op is Ops.AND


@pytest.mark.parametrize("spec", ["0", "1"])  # the terms alone, and checked against the rules
def test_difference_of_normal_forms(spec, monkeypatch):
    monkeypatch.setenv("TG_SPEC", spec)
    x = UOp.variable("x", -50, 100)
    assert difference((a * 4 + b + 3).simplify(), (a * 4 + b).simplify()) == 3
    assert difference((a * 4 + b).simplify(), (b + a * 4 + 7).simplify()) == -7
    assert difference((a * 4).simplify(), b) is None
    assert difference((a * 4 + b * 2).simplify(), (a * 4 + b).simplify()) is None
    # a div/mod pair across the two: (x//4)*4 + 3 - (x - x%4) is 3 only once (x//4)*4 + x%4 -> x
    assert difference(((x // 4) * 4 + 3).simplify(), (x - x % 4).simplify()) == 3
    assert difference(((x // 4) * 4 + 3).simplify(), (x - x % 8).simplify()) is None
    assert difference(a + 5, a + 2) == 3  # not simplified yet


def test_codegen_style_index():
    g, l, r = UOp.special(32, "gidx0"), UOp.special(4, "lidx0"), UOp.range(8, AxisArg(0, RangeKind.GLOBAL))
    e = ((g * 4 + l) * 16 + r) // 8 % 4
    assert simp(e) == "((lidx0%2)*2)"
    assert simp(((g * 4 + l) * 16 + r) % 8) == "r0_global"


def test_negative_dividends_keep_c_semantics():
    # -7 // 2 == -3 and -7 % 2 == -1 in C (Python would say -4 and 1)
    assert UOp.const(dtypes.int32, -7).__floordiv__(2).simplify().arg == -3
    assert (UOp.const(dtypes.int32, -7) % 2).simplify().arg == -1
    assert (UOp.const(dtypes.int32, 7) % -2).simplify().arg == 1
    # n in [-8, 8]: (n*4 + 1) // 4 is not n (e.g. n = -1 gives 0), so it must stay unfolded or be exact
    e = (n * 4 + 1) // 4
    for v in range(-8, 9):
        assert sym_infer(e.simplify(), {"n": v}) == int((v * 4 + 1) / 4)


@pytest.mark.parametrize("expr, want", [
    (lambda: a < 11, "True"), (lambda: a < 0, "False"), (lambda: a < 10, "(a<10)"), (lambda: a >= 0, "True"),
    (lambda: a.ne(11), "True"), (lambda: a.eq(-1), "False"), (lambda: a >= 5, "(4<a)"),
    (lambda: a + 3 < 7, "(a<4)"), (lambda: a * 4 < 10, "(a<3)"), (lambda: a // 4 < 2, "(a<8)"),
    (lambda: a * 2 + b * 4 < 7, "((a+(b*2))<4)"), (lambda: a < a, "False"),
    (lambda: a * 8 + b * 16 >= 57, "(7<(a+(b*2)))"), (lambda: a * 8 + n * 8 > -11, "(-2<(a+n))"),
])
def test_comparisons(expr, want):
    assert simp(expr()) == want


@pytest.mark.parametrize("expr, lo, hi", [
    (lambda: a + b, 0, 13), (lambda: a - b, -3, 10), (lambda: a * n, -80, 80), (lambda: n // 3, -2, 2),
    (lambda: n % 3, -2, 2), (lambda: a % 3, 0, 2), (lambda: n % -5, -4, 4), (lambda: a // (b + 1), 0, 10),
    (lambda: n // (b - 4), -8, 8), (lambda: a.maximum(n), 0, 10), (lambda: a.minimum(n), -8, 8),
    (lambda: (a < 5).where(a, n), -8, 10), (lambda: b.cast(dtypes.int8), 0, 3), (lambda: a & 6, 0, 6),
    (lambda: b | 8, 8, 15), (lambda: (a + 5) % 8, 0, 7), (lambda: (b + 4) % 8, 4, 7),
    (lambda: UOp.range(16, AxisArg(0, RangeKind.GLOBAL)) * 2, 0, 30),
    (lambda: UOp.variable("big", 0, 2**31 - 1) + 1, -2**31, 2**31 - 1),
])
def test_range_analysis(expr, lo, hi):
    e = expr()
    assert (e.vmin, e.vmax) == (lo, hi)


def test_bool_ranges():
    assert (a < 11).vmin is True and (a < 5).vmin is False and (a < 5).vmax is True


def test_int_constant_folding_wraps_like_numpy():
    for dt, npdt in [(dtypes.int8, np.int8), (dtypes.uint8, np.uint8), (dtypes.int32, np.int32),
                     (dtypes.uint32, np.uint32), (dtypes.int64, np.int64)]:
        for x, y in [(100, 100), (-128 if dtypes.is_unsigned(dt) is False else 200, 3), (7, 250)]:
            cx, cy = UOp.const(dt, x), UOp.const(dt, y)
            nx, ny = np.array(cx.arg, npdt), np.array(cy.arg, npdt)
            with np.errstate(all="ignore"):
                assert (cx + cy).simplify().arg == int(nx + ny)
                assert (cx * cy).simplify().arg == int(nx * ny)
                assert (cx ^ cy).simplify().arg == int(nx ^ ny)
                assert (cx < cy).simplify().arg == bool(nx < ny)


FLOAT_TYPES = [(dtypes.float16, np.float16), (dtypes.bfloat16, ml_dtypes.bfloat16), (dtypes.float32, np.float32),
               (dtypes.float64, np.float64)]
SPECIAL_VALUES = [0.0, -0.0, 1.0, -1.5, 3.140625, 1e-3, 65504.0, 1e30, float("inf"), -float("inf"), float("nan"),
                  2.0**-24, 123.456]


def _same(got: float, want) -> bool:
    want = float(want)
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


@pytest.mark.parametrize("dt, npdt", FLOAT_TYPES, ids=lambda v: getattr(v, "name", str(v)))
def test_float_folding_matches_numpy(dt, npdt):
    binops = [(Ops.ADD, np.add), (Ops.SUB, np.subtract), (Ops.MUL, np.multiply), (Ops.FDIV, np.divide),
              (Ops.MAX, np.maximum)]
    unops = [(Ops.NEG, np.negative), (Ops.SQRT, np.sqrt), (Ops.RECIPROCAL, np.reciprocal), (Ops.TRUNC, np.trunc)]
    with np.errstate(all="ignore"):
        for x in SPECIAL_VALUES:
            cx = UOp.const(dt, x)
            nx = np.array([x]).astype(npdt)
            for op, fn in unops:
                got = cx.alu(op).simplify()
                assert got.op is Ops.CONST and _same(got.arg, fn(nx)[0].astype(np.float64)), (op, x)
            for y in SPECIAL_VALUES:
                cy = UOp.const(dt, y)
                ny = np.array([y]).astype(npdt)
                for op, fn in binops:
                    got = cx.alu(op, cy).simplify()
                    want = fn(nx, ny).astype(npdt)[0].astype(np.float64)
                    if op is Ops.MAX and x == y == 0:  # the sign of max(0.0, -0.0) is unspecified (numpy varies)
                        assert got.arg == 0
                        continue
                    assert got.op is Ops.CONST and _same(got.arg, want), (op, x, y, got.arg, want)
                assert (cx < cy).simplify().arg == bool((nx < ny)[0])
                assert cx.ne(cy).simplify().arg == bool((nx != ny)[0])


@pytest.mark.parametrize("dt, npdt", FLOAT_TYPES, ids=lambda v: getattr(v, "name", str(v)))
def test_float_transcendentals_close_to_numpy(dt, npdt):
    with np.errstate(all="ignore"):
        for x in [0.0, 0.5, 1.0, 2.5, -3.0, 10.0, float("inf"), float("nan")]:
            cx = UOp.const(dt, x)
            nx = np.array([x]).astype(npdt)
            for op, fn in [(Ops.EXP2, np.exp2), (Ops.LOG2, np.log2), (Ops.SIN, np.sin)]:
                got = cx.alu(op).simplify().arg
                want = float(fn(nx.astype(np.float32)).astype(npdt)[0]) if npdt is not np.float64 else float(fn(nx)[0])
                if math.isnan(want):
                    assert math.isnan(got)
                else:  # libm and numpy may differ by one unit in the last place
                    assert got == pytest.approx(want, rel=1e-2 if dt.itemsize == 2 else 1e-6, abs=1e-300)


def test_float_rules_stay_exact():
    f = UOp.variable("f", 0, 1).cast(dtypes.float32)
    assert (f * 0.0).simplify().op is Ops.MUL  # inf * 0 is nan: not folded
    assert (f + 0.0).simplify().op is Ops.ADD  # -0.0 + 0.0 is 0.0: not folded
    assert (f + -0.0).simplify() is f
    assert (f * 1.0).simplify() is f
    assert f.__neg__().__neg__().simplify() is f


def test_casts_fold():
    assert UOp.const(dtypes.float32, -2.7).cast(dtypes.int32).simplify().arg == -2
    assert UOp.const(dtypes.int32, 300).cast(dtypes.uint8).simplify().arg == 44
    assert UOp.const(dtypes.int32, 3).cast(dtypes.bool).simplify().arg is True
    assert UOp.const(dtypes.float32, 1.0).bitcast(dtypes.int32).simplify().arg == 0x3F800000
    assert a.cast(dtypes.int64).cast(dtypes.int32).simplify() is a


def test_sym_infer_and_helpers():
    e = (a * 4 + b) // 3 - n
    assert sym_infer(e, {"a": 5, "b": 2, "n": -7}) == 22 // 3 + 7
    assert sym_infer(e, {a: 5, b: 2, n: -7}) == 22 // 3 + 7
    assert sym_infer(7, {}) == 7
    with pytest.raises(KeyError, match="n"):
        sym_infer(n + 1, {})
    assert ssimplify(a - a) == 0 and ssimplify(3) == 3
    assert resolve(a < 11) is True and resolve(a < 5, default=False) is False and resolve(True)
    assert smax(3, 5) == 5 and smin([3, 5, 1]) == 1
    assert smax(a, 20) == 20 and smax(a, -1) is a
    assert smin(a, 20) is a

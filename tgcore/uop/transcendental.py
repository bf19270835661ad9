"""Transcendental functions from basic ALU ops, so every backend gets the same math without libm.

In:  a float value of either kind that shares `tgcore.uop.mixins.ElementwiseMixin`: a UOp (codegen's
     ``decompose_transcendentals`` replaces EXP2 / LOG2 / SIN nodes with these) or a Tensor (the front end builds
     ``exp``, ``log``, ``cos`` and ``tan`` from them).
Out: the same kind of value, built only from ADD, SUB, MUL, FDIV, CMPLT, CMPEQ, WHERE, TRUNC, CAST, BITCAST and
     integer ADD / MUL / SHL / SHR / AND. float32 and float64 have their own constants;
     float16, bfloat16 and fp8 are computed in float32 and rounded once at the end.

Methods
-------
- exp2(x): clamp, n = nearest integer to x (the 1.5*2**23 add trick, whose bit pattern also gives n as an
  int), f = x - n in [-1/2, 1/2] exactly, 2**f = 1 + f*E(f), then scale by 2**(n//2) and 2**(n - n//2)
  built from exponent bits (two factors so that subnormal results round once and 2**128 * 0.9 is fine).
- log2(x): subnormals scaled by 2**24 (2**54 for float64); x = 2**e * m with m in [sqrt(1/2), sqrt(2))
  from the bits; f = m - 1 exactly; ln(1+f) = f - Y with s = f/(2+f), z = s*s,
  Y = f*f/2 - s*(f*f/2 + z*T(z)) (an identity of 2*atanh(s), so the rounding of the division only
  touches the small part); log2 = e + log2(e)*(f - Y) with log2(e)*f as an exact split product so the
  leading term carries no rounding. Special values: 0 -> -inf, < 0 -> nan, inf -> inf, nan -> nan.
- sin/cos/tan(x): k = nearest integer to x*2/pi, r = x - k*pi/2 by a Cody-Waite reduction with pi/2 in
  pieces of w bits (w = 8 for float32, 33 for float64) so every k*piece is exact while |k| < 2**16
  (2**20 for float64); the first pieces subtract exactly, the rest are accumulated as a two-float
  (hi, lo) with TwoSum, the last piece is a full-precision constant. This reaches ~2**-72 absolute
  accuracy of r, enough because the float32 closest to a multiple of pi/2 below 1e5 is 2**-27.8 away.
  sin(r) = r + r*z*S(z), cos(r) = 1 - z/2 + z*z*C(z) (with the rounding of 1 - z/2 recovered), picked and
  negated by the quadrant k mod 4 (computed in float). |x| < 2**-12 returns x (keeps -0.0, subnormals).
  float32 beyond that range (Payne-Hanek): |x| times 2/pi in 29-bit chunks is exact in float64 (24 + 29 bits),
  each product is taken mod 4 exactly and the eight are summed with TwoSum, which gives y = |x|*2/pi mod 4 to
  ~2**-100; k = nearest integer to y, r = (y - k)*pi/2 as two float32s (negated for x < 0). Both reductions
  are computed and one is selected (straight-line code): float32 sin/cos cost ~2-2.5x what Cody-Waite alone
  did (4M elements: CPU 46 -> 120 ms, CPU:X86 50 -> 97 ms, on the shared 2-core machine).
  float64 beyond 2**20 * pi/2 (Payne-Hanek without a wider type): |x| in one of 11 bins by exponent is scaled
  by 2**(-96 b) (exact; the bits of 2/pi it skips only contribute multiples of 4), split into two 27-bit halves
  by masking, and multiplied by eleven 24-bit chunks of 2/pi picked for the bin (all products exact), each
  product taken mod 4 exactly, cut in three at fixed bits and summed exactly per piece (~2**-112, so even the
  float64 closest to a multiple of pi/2, 6381956970095103 * 2**797 at 2**-60.9 from it, comes out correctly
  rounded); r = (y - k) * pi/2 with pi/2 in 26-bit pieces against a 27-bit split of y - k. It is computed for
  every element and selected: float64 sin/cos cost ~6x what Cody-Waite alone did (2M elements, CPU: 29 ->
  179 ms, loaded machine).
- exp(x): n = nearest integer to x/ln2, r = x - n*ln2 (ln2 in two pieces, the first with few bits so
  n*piece is exact), exp(x) = exp2(r*log2(e)) * 2**n: no error amplification for large |x| (exp2's steps for a
  small argument, its scaling joined with 2**n's: the same values in fewer operations).

Accurate ranges (measured against numpy in tests/test_tensor_math.py, see there for the ulp figures):
exp2/log2/exp everywhere (incl. subnormal inputs and results, inf, nan); float32 and float64 sin/cos/tan
everywhere (Cody-Waite up to 2**16 * pi/2 for float32, 2**20 * pi/2 for float64, Payne-Hanek beyond).

Coefficients: fitted by ``fit_coefficients()`` below (needs mpmath): weighted least squares on 400
Chebyshev nodes of the reduced interval, refined toward minimax by Lawson's reweighting, weights chosen so
the error measured is the relative error of the final function; then rounded to the target precision
and re-checked. ``python -m tgcore.uop.transcendental`` prints the tables. The Cody-Waite pieces of
pi/2 and the split of ln2 and log2(e) are computed at import from pi and logs evaluated with Python ints.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, TypeVar

from tgcore.dtype import DType, dtypes
from tgcore.uop.ops import Ops

if TYPE_CHECKING:
    from tgcore.uop.mixins import ElementwiseMixin

__all__ = ["exp2", "log2", "sin", "cos", "tan", "exp", "log", "SIN_ACCURATE_LIMIT"]

V = TypeVar("V", bound="ElementwiseMixin")  # a UOp (codegen) or a Tensor (the front end)

# ------------------------------------------------------------------------------------------------ coefficients
# Generated by fit_coefficients() (see the module docstring). Max relative error of the polynomial part
# with the rounded coefficients: float32 exp2 2.3e-9, log 4.4e-10, sin 3.6e-9, cos 7.4e-10 (ulp = 6e-8);
# float64 exp2 1.8e-17, log 4.4e-19, sin 6.6e-18, cos 1.4e-18 (ulp = 1.1e-16).

# 2**f = 1 + f*E(f) on [-1/2, 1/2]; E(f) = sum(E[i] * f**i)
EXP2_F32 = (0.6931471824645996, 0.24022650718688965, 0.055504102259874344, 0.009618038311600685,
            0.0013333936221897602, 0.00015466773766092956, 1.5195932974165771e-05)
EXP2_F64 = (0.6931471805599453, 0.24022650695910072, 0.05550410866482169, 0.009618129107628335,
            0.0013333558146392413, 0.00015403530393631656, 1.525273385453931e-05, 1.3215486601695109e-06,
            1.0178051861677261e-07, 7.054972130300305e-09, 4.45658137165737e-10, 2.5628481767531334e-11)
# ln(1+f) = 2s + s*z*T(z), s = f/(2+f), z = s*s in [0, 0.0300]
LOG_F32 = (0.6666666269302368, 0.4000035524368286, 0.2853587567806244, 0.23610764741897583)
LOG_F64 = (0.6666666666666666, 0.40000000000007196, 0.28571428568783164, 0.2222222269213851,
           0.18181772056427514, 0.15387247757958725, 0.13246595705032788, 0.13283201438661707)
# sin(r) = r + r*z*S(z), z = r*r in [0, 0.64]
SIN_F32 = (-0.1666666716337204, 0.008333329111337662, -0.00019839161541312933, 2.7167043299414217e-06)
SIN_F64 = (-0.16666666666666666, 0.008333333333333333, -0.00019841269841269825, 2.7557319223971417e-06,
           -2.505210837877404e-08, 1.6059042045091905e-10, -7.646884207285607e-13, 2.7879852783391688e-15)
# cos(r) = 1 - z/2 + z*z*C(z)
COS_F32 = (0.0416666679084301, -0.0013888883404433727, 2.4799293896649033e-05, -2.7192314178137167e-07)
COS_F64 = (0.041666666666666664, -0.001388888888888889, 2.480158730158728e-05, -2.7557319223972563e-07,
           2.0876756982701414e-09, -1.1470744390700595e-11, 4.7793096619361305e-14, -1.5491557630261063e-16)


def fit_coefficients(prec: int = 160) -> dict[str, tuple[list[float], float]]:  # pragma: no cover - offline tool
    """Refit the tables above (needs mpmath): {name: (coefficients, max relative error after rounding)}."""
    import mpmath as mp
    import numpy as np
    mp.mp.prec = prec

    def fit(fn, weight, lo, hi, deg, rnd, n=400, iters=6):  # type: ignore[no-untyped-def]
        xs = [(lo + hi) / 2 + (hi - lo) / 2 * mp.cos(mp.pi * (i + 0.5) / n) for i in range(n)]
        ys, ws, lw = [fn(x) for x in xs], [weight(x) for x in xs], [mp.mpf(1)] * n
        for _ in range(iters):  # Lawson: reweight by the error, which drives least squares toward minimax
            a, b = mp.matrix(n, deg + 1), mp.matrix(n, 1)
            for i, x in enumerate(xs):
                sw = mp.sqrt(lw[i])
                for j in range(deg + 1):
                    a[i, j] = ws[i] * x**j * sw
                b[i] = ws[i] * ys[i] * sw
            c = mp.lu_solve(a.T * a, a.T * b)
            errs = [abs(ws[i] * (sum(c[j] * xs[i]**j for j in range(deg + 1)) - ys[i])) for i in range(n)]
            total = sum(lw[i] * errs[i] for i in range(n))
            lw = [lw[i] * errs[i] / total for i in range(n)]
        cs = [rnd(c[j]) for j in range(deg + 1)]
        grid = [lo + (hi - lo) * i / 3000 for i in range(1, 3001)]
        worst = max(abs(weight(x) * (sum(mp.mpf(cs[j]) * x**j for j in range(deg + 1)) - fn(x))) for x in grid)
        return cs, float(worst)

    out = {}
    zlog = (1 - mp.sqrt(2) / 2)**2 / (1 + mp.sqrt(2) / 2)**2 * mp.mpf(1.02)
    tiny, r2 = mp.mpf(1e-30), mp.mpf(0.8)**2
    for suffix, rnd, degs in (("F32", lambda v: float(np.float32(float(v))), (6, 3, 3, 3)),
                              ("F64", float, (11, 7, 7, 7))):
        out["EXP2_" + suffix] = fit(lambda f: (mp.power(2, f) - 1) / f if f else mp.log(2),
                                    lambda f: abs(f) / mp.power(2, f), mp.mpf(-0.5), mp.mpf(0.5), degs[0], rnd)
        out["LOG_" + suffix] = fit(lambda z: (2 * mp.atanh(mp.sqrt(z)) / mp.sqrt(z) - 2) / z, lambda z: z / 2,
                                   tiny, zlog, degs[1], rnd)
        out["SIN_" + suffix] = fit(lambda z: (mp.sin(mp.sqrt(z)) - mp.sqrt(z)) / z**1.5,
                                   lambda z: z * mp.sqrt(z) / mp.sin(mp.sqrt(z)), tiny, r2, degs[2], rnd)
        out["COS_" + suffix] = fit(lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z**2,
                                   lambda z: z * z / mp.cos(mp.sqrt(z)), tiny, r2, degs[3], rnd)
    return out


# ------------------------------------------------------------------------------------------------ exact constants

def _pi_fraction(bits: int = 320) -> Fraction:
    """pi to `bits` bits (Machin: pi = 16 atan(1/5) - 4 atan(1/239), in scaled integers)."""
    one = 1 << (bits + 16)

    def atan_inv(n: int) -> int:
        total, term, k, sign = 0, one // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total

    return Fraction(16 * atan_inv(5) - 4 * atan_inv(239), one)


def _ln2_fraction(bits: int = 320) -> Fraction:
    """ln 2 = sum 1/(k 2**k), in scaled integers."""
    one = 1 << (bits + 16)
    return Fraction(sum(one // (k << k) for k in range(1, bits + 20)), one)


def _truncate_bits(v: Fraction, lsb_exp: int) -> Fraction:
    """v truncated toward zero to a multiple of 2**lsb_exp."""
    scale = Fraction(2) ** -lsb_exp
    return Fraction(math.trunc(v * scale)) / scale


def _round_to(v: Fraction | float, dt: DType) -> float:
    f = float(v)
    return struct.unpack("f", struct.pack("f", f))[0] if dt is dtypes.float32 else f


@dataclass(frozen=True)
class _Format:
    """What the formulas need to know about one IEEE binary format."""

    dt: DType
    int_dt: DType
    mant: int                # stored mantissa bits
    bias: int
    magic: float             # 1.5 * 2**mant: adding it rounds to an integer, whose bits then hold the integer
    exp2: tuple[float, ...]
    log: tuple[float, ...]
    sin: tuple[float, ...]
    cos: tuple[float, ...]
    pieces: tuple[float, ...]  # pi/2 = sum(pieces); every piece but the last has `piece_bits` bits
    exact_pieces: int        # how many leading pieces subtract exactly (the others go through TwoSum)
    two_over_pi: float
    ln2_hi: float            # few bits: n*ln2_hi is exact for |n| < 2**11
    ln2_lo: float
    log2e: float
    log2e_hi: float          # half the bits, so (f with half the bits) * log2e_hi is exact
    log2e_lo: float
    half_mask: int           # keeps the top half of the mantissa bits
    tiny: float              # |x| below this: sin(x) = tan(x) = x to within half an ulp


def _make_format(dt: DType, int_dt: DType, mant: int, bias: int, piece_bits: int, exact_pieces: int,
                 coeffs: tuple[tuple[float, ...], ...], tiny: float) -> _Format:
    prec = mant + 1
    half_pi = _pi_fraction() / 2
    pieces, rest = [], half_pi
    for i in range(1, 7 if dt is dtypes.float32 else 4):  # w-bit pieces, then the rest rounded
        piece = _truncate_bits(rest, -(piece_bits * i - 1))
        pieces.append(float(piece))
        rest -= piece
    pieces.append(_round_to(rest, dt))
    ln2 = _ln2_fraction()
    ln2_hi = _truncate_bits(ln2, -(prec - 12))  # n has at most 11 bits: n*ln2_hi is exact
    log2e = 1 / ln2
    log2e_hi = _truncate_bits(log2e, -(prec // 2 - 1))
    half_bits = mant - (prec // 2 - 1)
    exp2_c, log_c, sin_c, cos_c = coeffs
    return _Format(dt, int_dt, mant, bias, 1.5 * 2.0**mant, exp2_c, log_c, sin_c, cos_c, tuple(pieces), exact_pieces,
                   _round_to(2 / _pi_fraction(), dt), float(ln2_hi), _round_to(ln2 - ln2_hi, dt),
                   _round_to(log2e, dt), float(log2e_hi), _round_to(log2e - log2e_hi, dt),
                   ((1 << (8 * int_dt.itemsize)) - 1) ^ ((1 << half_bits) - 1), tiny)


_F32 = _make_format(dtypes.float32, dtypes.int32, 23, 127, 8, 3, (EXP2_F32, LOG_F32, SIN_F32, COS_F32), 2.0**-12)
_F64 = _make_format(dtypes.float64, dtypes.int64, 52, 1023, 33, 1, (EXP2_F64, LOG_F64, SIN_F64, COS_F64),
                    2.0**-27)
_FORMATS = {dtypes.float32: _F32, dtypes.float64: _F64}

# |x| up to which the Cody-Waite reduction is exact: k*piece is exact while |k| < 2**16 (float32), 2**20 (float64).
# float32 beyond it takes the Payne-Hanek reduction (exact for every float32); float64 stays approximate there.
# Beyond it both take a Payne-Hanek reduction, exact for every float32 and every float64.
SIN_ACCURATE_LIMIT = {dtypes.float32: math.inf, dtypes.float64: math.inf}
_CODY_WAITE_LIMIT = {dtypes.float32: 2**16 * math.pi / 2, dtypes.float64: 2**20 * math.pi / 2}


def _two_over_pi_chunks(n: int = 8, bits: int = 29) -> tuple[float, ...]:
    """2/pi as n chunks of ``bits`` bits, c_i * 2**(-bits i): a float32 (24 bits) times a chunk is exact in
    float64 (53 bits)."""
    v = 2 / _pi_fraction(bits * n + 64)
    chunks = []
    for i in range(1, n + 1):
        c = math.floor(v * 2 ** (bits * i)) % (1 << bits)
        chunks.append(float(Fraction(c, 1 << (bits * i))))
    return tuple(chunks)


# 232 bits of 2/pi: for the largest float32 (2**128), bits down to 2**-212 still reach 2**-84 of x * 2/pi mod 4
TWO_OVER_PI_F32_CHUNKS = _two_over_pi_chunks()


# float64 Payne-Hanek: 2/pi = sum C_n 2**(-24(n+1)) with 24-bit integer chunks C_n. |x| is scaled by 2**(-96 b)
# for its bin b (|x| >= 2**(54 + 96 b)), which drops only terms that are multiples of 4; the 11 chunks from 4b on
# then reach 2**-113 of |x| * 2/pi mod 4. A chunk times either 27-bit half of the scaled |x| is exact.
_PH64_BINS, _PH64_CHUNKS, _PH64_BIN_CHUNKS = 11, 11, 4


def _two_over_pi_f64_table() -> tuple[tuple[float, ...], ...]:
    """[j][b]: chunk 4b + j of 2/pi, scaled by 2**(-24(j+1)) (relative to the bin's scaling of |x|)."""
    count = _PH64_BIN_CHUNKS * (_PH64_BINS - 1) + _PH64_CHUNKS
    v = 2 / _pi_fraction(24 * count + 96)
    chunks = [math.floor(v * 2 ** (24 * (n + 1))) % (1 << 24) for n in range(count)]
    return tuple(tuple(float(Fraction(chunks[_PH64_BIN_CHUNKS * b + j], 1 << (24 * (j + 1))))
                       for b in range(_PH64_BINS)) for j in range(_PH64_CHUNKS))


TWO_OVER_PI_F64_TABLE = _two_over_pi_f64_table()
_PIO2_PIECES_F64 = (lambda p: (float(_truncate_bits(p, -25)), float(_truncate_bits(p, -51) - _truncate_bits(p, -25)),
                               float(p - _truncate_bits(p, -51))))(_pi_fraction(400) / 2)


# ------------------------------------------------------------------------------------------------ small helpers
# The formulas take and return any ElementwiseMixin (a UOp in codegen, a Tensor in the front end) and use only
# its shared surface. Subtraction is spelled ``_sub`` (one SUB op): Tensor's ``-`` adds the negation instead.

def _c(like: V, value: float | int) -> V:
    return like.const_like(value)


def _sub(a: V | float, b: V | float) -> V:
    """a - b as one SUB op (either side may be a Python scalar)."""
    if isinstance(a, (int, float)):
        assert not isinstance(b, (int, float))
        return b.const_like(a).alu(Ops.SUB, b)
    return a.alu(Ops.SUB, a.const_like(b) if isinstance(b, (int, float)) else b)


def _poly(x: V, coeffs: tuple[float, ...]) -> V:
    """sum(coeffs[i] * x**i) by Horner's rule."""
    acc = _c(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * x + c
    return acc


def _abs(x: V) -> V:
    return (x < 0.0).where(-x, x)


def _int_neg(n: V) -> V:
    return n * -1


def _pow2(n: V, fmt: _Format) -> V:
    """2.0**n for an integer n whose result is a normal number (exponent bits only)."""
    return ((n + fmt.bias) << fmt.mant).bitcast(fmt.dt)


def _bits_of(value: float, fmt: _Format) -> int:
    code = "<f" if fmt.dt is dtypes.float32 else "<d"
    return int.from_bytes(struct.pack(code, value), "little", signed=True)


def _round_to_int(x: V, fmt: _Format) -> tuple[V, V]:
    """(nearest integer as a float, the same as an int) for |x| < 2**(mant-1), by the 1.5*2**mant trick."""
    t = x + fmt.magic
    return _sub(t, fmt.magic), t.bitcast(fmt.int_dt) + (-_bits_of(fmt.magic, fmt))


def _narrow(fn: Callable[[V, _Format], V]) -> Callable[[V], V]:
    """Compute narrow floats (float16, bfloat16, fp8) in float32 and round the result once.

    The formulas mark the values that are piecewise constant in x (nearest integers, quadrants) with
    ``_cut_gradient()``: a Tensor detaches them so gradients only flow through the smooth parts, a UOp keeps them.
    """
    def wrapper(x: V) -> V:
        if x.dtype in _FORMATS:
            return fn(x, _FORMATS[x.dtype])
        if not dtypes.is_float(x.dtype):
            raise TypeError(f"{fn.__name__} needs a float UOp, got {x.dtype!r}")
        return fn(x.cast(dtypes.float32), _F32).cast(x.dtype)
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


# ------------------------------------------------------------------------------------------------ exp2, exp

def _scale(p: V, n: V, fmt: _Format) -> V:
    """p * 2**n for an int n within about +-(2 * max exponent): two normal factors, one rounding."""
    n1 = n >> 1
    return p * _pow2(n1, fmt) * _pow2(n + _int_neg(n1), fmt)


@_narrow
def exp2(x: V, fmt: _Format) -> V:
    """2**x (see the module docstring)."""
    lo, hi = -float(fmt.bias + fmt.mant + 2), float(fmt.bias + 2)
    xc = (x < float(lo)).where(_c(x, lo), x)
    xc = (_c(x, hi) < xc).where(_c(x, hi), xc)  # nan passes both clamps
    nf, n = _round_to_int(xc, fmt)
    f = _sub(xc, nf)  # exact, in [-1/2, 1/2]
    p = f * _poly(f, fmt.exp2) + 1.0
    return _scale(p, n, fmt)


@_narrow
def exp(x: V, fmt: _Format) -> V:
    """e**x = 2**n * 2**(r*log2(e)) with r = x - n*ln2 reduced exactly (Cody-Waite, two pieces of ln2).

    2**y for y = r*log2(e) is ``exp2``'s steps without its clamps, and its 2**m (m = the integer nearest y) is folded
    into the one scaling by 2**(n + m): |y| <= ~0.51, so the clamps never act and m is -1, 0 or 1; p * 2**m is exact,
    and ``_scale`` rounds the exact p * 2**(n + m) once either way: the same values in fewer operations (C, float32:
    60 -> 47 per element). (A C compiler may now contract y into a multiply-add where the clamps' compare kept it
    rounded: gcc 12 gives 4 of the 2**32 float32 inputs 1 ulp apart from before.)"""
    limit = (fmt.bias + fmt.mant + 4) * 0.6931471805599453
    xc = (x < -limit).where(_c(x, -limit), x)
    xc = (_c(x, limit) < xc).where(_c(x, limit), xc)
    nf, n = _round_to_int(xc * fmt.log2e, fmt)
    nf = nf._cut_gradient()
    r = _sub(_sub(xc, nf * fmt.ln2_hi), nf * fmt.ln2_lo)
    y = r * fmt.log2e
    mf, m = _round_to_int(y, fmt)
    f = _sub(y, mf._cut_gradient())  # exact, in [-1/2, 1/2]
    return _scale(f * _poly(f, fmt.exp2) + 1.0, n + m, fmt)


# ------------------------------------------------------------------------------------------------ log2

def _log_parts(x: V, fmt: _Format) -> tuple[V, V, V]:
    """(e, f, y) with x = 2**e * (1 + f), 1 + f in [sqrt(1/2), sqrt(2)) and ln(1 + f) = f - y."""
    min_normal = 2.0 ** (1 - fmt.bias)
    subnormal = x < min_normal
    scale_bits = fmt.mant + 1
    xs = subnormal.where(x * 2.0**scale_bits, x)
    bits = xs.bitcast(fmt.int_dt)
    e = (bits + (-_bits_of(math.sqrt(0.5), fmt))) >> fmt.mant  # m = x / 2**e in [sqrt(1/2), sqrt(2))
    # m by exact scaling (two normal powers of two) rather than by bits, so gradients flow through x
    e1 = e >> 1
    m = xs * _pow2(_int_neg(e1), fmt)._cut_gradient() * _pow2(e1 + _int_neg(e), fmt)._cut_gradient()
    ef = (e.cast(fmt.dt) + subnormal.where(_c(x, -float(scale_bits)), _c(x, 0.0)))._cut_gradient()
    f = _sub(m, 1.0)  # exact
    s = f / (f + 2.0)
    z = s * s
    hfsq = f * f * 0.5
    return ef, f, _sub(hfsq, s * (hfsq + z * _poly(z, fmt.log)))


def _log_specials(x: V, out: V) -> V:
    """0 -> -inf, < 0 -> nan, inf -> inf, nan -> nan."""
    out = (x < 0.0).where(_c(x, math.nan), out)
    out = x.eq(0.0).where(_c(x, -math.inf), out)
    out = x.eq(math.inf).where(_c(x, math.inf), out)
    return x.ne(x).where(x, out)


@_narrow
def log2(x: V, fmt: _Format) -> V:
    """log2(x) = e + log2(e)*(f - y), the leading log2(e)*f as an exact split product."""
    ef, f, y = _log_parts(x, fmt)
    bits = f.bitcast(fmt.int_dt)
    f_hi = (bits & bits.const_like(fmt.half_mask)).bitcast(fmt.dt)._cut_gradient()
    lead = f_hi * fmt.log2e_hi  # exact
    tail = _sub(_sub(f, f_hi) * fmt.log2e_hi + f * fmt.log2e_lo, y * fmt.log2e)
    total = ef + lead
    err = _sub(lead, _sub(total, ef))  # Fast2Sum: |ef| >= |lead| unless ef == 0, where total is exact
    return _log_specials(x, total + (tail + err))


@_narrow
def log(x: V, fmt: _Format) -> V:
    """ln(x) = e*ln2 + f - y, with e*ln2_hi exact and the sum e*ln2_hi + f kept as two floats."""
    ef, f, y = _log_parts(x, fmt)
    lead = ef * fmt.ln2_hi  # exact
    total = lead + f
    err = _sub(f, _sub(total, lead))  # Fast2Sum: |lead| >= |f| unless e == 0, where total is exact
    return _log_specials(x, total + (_sub(err, y) + ef * fmt.ln2_lo))


# ------------------------------------------------------------------------------------------------ sin, cos, tan

def _two_sum(a: V, b: V) -> tuple[V, V]:
    """a + b = s + err exactly (Knuth's TwoSum: additions only, so FMA contraction cannot change it)."""
    s = a + b
    bb = _sub(s, a)
    return s, _sub(a, _sub(s, bb)) + _sub(b, bb)


def _reduce_half_pi(x: V, fmt: _Format) -> tuple[V, V, V]:
    """(hi, lo, k): x = k*pi/2 + hi + lo with |hi + lo| <= pi/4 (slightly more where k rounds)."""
    y = x * fmt.two_over_pi
    k = (y + (x < 0.0).where(_c(x, -0.5), _c(x, 0.5))).trunc()._cut_gradient()
    hi = x
    for piece in fmt.pieces[:fmt.exact_pieces]:
        hi = _sub(hi, k * piece)
    lo = _c(x, 0.0)
    for piece in fmt.pieces[fmt.exact_pieces:-1]:
        hi, err = _two_sum(hi, -(k * piece))
        lo = lo + err
    lo = _sub(lo, k * fmt.pieces[-1])
    return _clamp(hi, 0.8), lo, k  # |hi| <= pi/4 where the reduction is exact; beyond, keep it bounded


def _reduce_payne_hanek_f32(x: V) -> tuple[V, V, V]:
    """(hi, lo, k) as ``_reduce_half_pi`` gives them, for any float32 x: y = |x| * 2/pi mod 4 from the exact
    float64 products of |x| with 29-bit chunks of 2/pi, each taken mod 4 exactly and summed with TwoSum; k =
    nearest integer to y, r = (y - k) * pi/2 split into two float32s; both negated for x < 0."""
    neg = x < 0.0
    ax = neg.where(-x, x).cast(dtypes.float64)
    hi, lo = _c(ax, 0.0), _c(ax, 0.0)
    for i, chunk in enumerate(TWO_OVER_PI_F32_CHUNKS):
        t = ax * chunk  # exact, >= 0
        m = _sub(t, (t * 0.25).trunc() * 4.0)  # t mod 4, exact
        if i == 0:
            hi = m
        else:
            hi, err = _two_sum(hi, m)
            lo = lo + err
    k = (hi + 0.5).trunc()._cut_gradient()
    r = (_sub(hi, k) + lo) * (math.pi / 2)
    r_hi = r.cast(dtypes.float32)
    r_lo = _sub(r, r_hi.cast(dtypes.float64)).cast(dtypes.float32)
    kf = k.cast(dtypes.float32)
    return neg.where(-r_hi, r_hi), neg.where(-r_lo, r_lo), neg.where(-kf, kf)


def _split27(v: V) -> tuple[V, V]:
    """(top 27 significant bits of v, the rest) by masking the low 26 mantissa bits: exact, no multiplication."""
    bits = v.bitcast(dtypes.int64)
    top = (bits & bits.const_like(-(1 << 26))).bitcast(dtypes.float64)
    return top, _sub(v, top)


def _mod4(t: V) -> V:
    """t mod 4 for an exact t >= 0 (every step is exact)."""
    return _sub(t, (t * 0.25).trunc() * 4.0)


def _reduce_payne_hanek_f64(x: V) -> tuple[V, V, V]:
    """(hi, lo, k) as ``_reduce_half_pi`` gives them, for any float64 x: y = |x| * 2/pi mod 4 from exact products
    of the two halves of the binned |x| with 24-bit chunks of 2/pi (each taken mod 4 exactly), summed exactly in
    three pieces (the adversarial x within 2**-61 of a multiple of pi/2 keep full precision); k =
    nearest integer to y; r = (y - k) * pi/2 with pi/2 in three pieces; both negated for x < 0."""
    neg = x < 0.0
    ax = neg.where(-x, x)
    in_bin = [_c(ax, 2.0 ** (54 + 96 * b)) < ax for b in range(1, _PH64_BINS)]  # (ax >= 2**(54+96b), for finite ax)

    def by_bin(values: tuple[float, ...]) -> V:
        out = _c(ax, values[0])
        for b in range(1, _PH64_BINS):
            out = in_bin[b - 1].where(_c(ax, values[b]), out)
        return out

    scaled = ax * by_bin(tuple(2.0 ** (-96 * b) for b in range(_PH64_BINS)))  # exact
    halves = _split27(scaled)
    # Each term is cut at 2**-45 and at 2**-94 (adding and subtracting 1.5 * 2**(52 - bit) rounds to a multiple
    # of 2**-bit, exactly) and the pieces are summed in three floats: 22 terms below 4 that are multiples of 2**-45
    # fit in 53 bits, and so do the middle pieces (below 2**-46, multiples of 2**-94); the last ones are tiny.
    coarse = mid = fine = _c(ax, 0.0)
    for j in range(_PH64_CHUNKS):
        chunk = by_bin(TWO_OVER_PI_F64_TABLE[j])
        for half in halves:
            m = half * chunk  # exact; below 2**(151 - 24j) (the scaled |x| is below 2**151)
            if 151 - 24 * j >= 2:
                m = _mod4(m)
            top = _sub(m + 1.5 * 2.0**7, 1.5 * 2.0**7)
            rest = _sub(m, top)
            middle = _sub(rest + 1.5 * 2.0**-42, 1.5 * 2.0**-42)
            coarse, mid, fine = coarse + top, mid + middle, fine + _sub(rest, middle)
    k = (coarse + 0.5).trunc()._cut_gradient()
    f, e = _two_sum(_sub(coarse, k), mid)  # (coarse - k is exact)
    f_lo = e + fine
    f1, f2 = _split27(f)
    p0, p1, p2 = _PIO2_PIECES_F64  # (26, 26 and 53 bits: f1*p0, f2*p0, f1*p1 and f2*p1 are exact)
    r, e1 = _two_sum(f1 * p0, f2 * p0)
    r, e2 = _two_sum(r, f1 * p1)
    r_lo = (e1 + e2) + (f2 * p1 + (f * p2 + f_lo * (p0 + p1)))
    r_hi, r_lo = _two_sum(r, r_lo)
    return neg.where(-r_hi, r_hi), neg.where(-r_lo, r_lo), neg.where(-k, k)


def _reduce(x: V, fmt: _Format) -> tuple[V, V, V]:
    """Cody-Waite where it is exact; beyond it, Payne-Hanek."""
    hi, lo, k = _reduce_half_pi(x, fmt)
    big = _c(x, _CODY_WAITE_LIMIT[fmt.dt]) < _abs(x)
    x_big = big.where(x, _c(x, 0.0))  # (each branch sees only inputs it is meant for)
    ph_hi, ph_lo, ph_k = (_reduce_payne_hanek_f32 if fmt.dt is dtypes.float32 else _reduce_payne_hanek_f64)(x_big)
    return big.where(ph_hi, hi), big.where(ph_lo, lo), big.where(ph_k, k)


def _sin_cos_kernels(hi: V, lo: V, fmt: _Format) -> tuple[V, V]:
    """(sin(hi + lo), cos(hi + lo)) for |hi + lo| <= ~pi/4, |lo| tiny next to |hi|."""
    z = hi * hi
    sin_r = hi + (hi * z * _poly(z, fmt.sin) + lo * _sub(1.0, z * 0.5))
    hz = z * 0.5
    w = _sub(1.0, hz)
    cos_r = w + (_sub(_sub(1.0, w), hz) + _sub(z * z * _poly(z, fmt.cos), hi * lo))
    return sin_r, cos_r


def _quadrant(k: V, offset: int) -> tuple[V, V]:
    """(odd, negative) for quadrant (k + offset) mod 4, in float arithmetic (k may exceed any int)."""
    q = (k + float(offset)) * 0.25
    frac = _sub(q, q.trunc())  # 0, +-1/4, +-1/2, +-3/4 exactly
    frac = (frac < 0.0).where(frac + 1.0, frac)
    odd = frac.eq(0.25) | frac.eq(0.75)
    return odd, (frac < 0.5).logical_not()


def _clamp(v: V, bound: float) -> V:
    """v limited to [-bound, bound] (nan passes): a no-op in the accurate range, a bound beyond it."""
    v = (v < -bound).where(_c(v, -bound), v)
    return (_c(v, bound) < v).where(_c(v, bound), v)


def _trig(x: V, fmt: _Format, offset: int) -> V:
    hi, lo, k = _reduce(x, fmt)
    sin_r, cos_r = _sin_cos_kernels(hi, lo, fmt)
    odd, negative = _quadrant(k, offset)
    v = odd.where(cos_r, sin_r)
    return _clamp(negative.where(-v, v), 1.0)


@_narrow
def sin(x: V, fmt: _Format) -> V:
    """sin(x) (see the module docstring for the accurate range)."""
    return (_abs(x) < fmt.tiny).where(x, _trig(x, fmt, 0))


@_narrow
def cos(x: V, fmt: _Format) -> V:
    """cos(x) = sin(x + pi/2), with the quarter turn added to the quadrant instead of to x."""
    return _trig(x, fmt, 1)


@_narrow
def tan(x: V, fmt: _Format) -> V:
    """tan(x) = sin/cos of the same reduced argument (one division)."""
    hi, lo, k = _reduce(x, fmt)
    sin_r, cos_r = _sin_cos_kernels(hi, lo, fmt)
    odd, _ = _quadrant(k, 0)
    t = odd.where(cos_r, sin_r) / odd.where(-sin_r, cos_r)
    return (_abs(x) < fmt.tiny).where(x, t)


if __name__ == "__main__":  # pragma: no cover - prints freshly fitted tables
    for name, (coeffs, err) in fit_coefficients().items():
        print(f"{name} = {tuple(coeffs)}  # max rel err {err:.2g}")

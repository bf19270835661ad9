"""Storage bits of small binary float formats (float16, bfloat16, fp8), vectorised with numpy.

In:  an array of numbers and a `FloatFormat` (exponent bits, mantissa bits, how inf/NaN are stored).
Out: `encode` gives the format's storage bits (uint8 or uint16 array), rounded to nearest, ties to even,
     straight from float64 (no double rounding through float32); `decode` turns bits back into float32,
     which holds every value of these formats exactly.

float32 inputs give the same bits as ml_dtypes. For float64 inputs ml_dtypes rounds to float32 first, so on
the rare float64 value just off a tie of the target (e.g. 1 + 2**-8 + 2**-30 for bfloat16) the two differ by
one unit in the last place; this module gives the correctly rounded one.

Overflow follows the non-saturating conversion of ml_dtypes (and IEEE 754): a value whose rounded magnitude
exceeds the largest finite number becomes inf when the format has one, NaN otherwise (fp8 e4m3 "fn").
NaN stays NaN (canonical quiet NaN, sign kept); -0.0 stays -0.0; subnormals are kept, not flushed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FloatFormat:
    """A binary float format: 1 sign bit, `exponent_bits`, `mantissa_bits` (without the implicit 1).

    `has_inf=True` is the IEEE layout: an all-ones exponent means inf (mantissa 0) or NaN.
    `has_inf=False` is the OCP "fn" layout (finite + NaN): an all-ones exponent holds normal numbers,
    except the all-ones mantissa there, which is the only NaN.
    """

    exponent_bits: int
    mantissa_bits: int
    has_inf: bool

    @property
    def total_bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - 1

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal number (subnormals share it)."""
        return 1 - self.bias

    @property
    def max_finite(self) -> float:
        all_ones_exponent = (1 << self.exponent_bits) - 1
        if self.has_inf:  # top exponent is reserved; largest mantissa is all ones
            return float(np.ldexp(2.0 - 2.0**-self.mantissa_bits, all_ones_exponent - 1 - self.bias))
        # fn layout: top exponent is usable, but its all-ones mantissa is NaN
        return float(np.ldexp(2.0 - 2.0 ** (1 - self.mantissa_bits), all_ones_exponent - self.bias))

    @property
    def storage(self) -> type[np.unsignedinteger]:
        return np.uint8 if self.total_bits <= 8 else np.uint16

    @property
    def inf_bits(self) -> int:
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits

    @property
    def nan_bits(self) -> int:
        if self.has_inf:  # quiet NaN: all-ones exponent, top mantissa bit set
            return self.inf_bits | (1 << (self.mantissa_bits - 1))
        return (1 << (self.exponent_bits + self.mantissa_bits)) - 1


FLOAT16 = FloatFormat(exponent_bits=5, mantissa_bits=10, has_inf=True)
BFLOAT16 = FloatFormat(exponent_bits=8, mantissa_bits=7, has_inf=True)
FP8E4M3 = FloatFormat(exponent_bits=4, mantissa_bits=3, has_inf=False)  # OCP E4M3 ("float8_e4m3fn")
FP8E5M2 = FloatFormat(exponent_bits=5, mantissa_bits=2, has_inf=True)  # OCP E5M2


def encode(values: object, fmt: FloatFormat) -> np.ndarray:
    """Round `values` to `fmt` (nearest, ties to even) and return the storage bits."""
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises the invalid flag; it stays NaN
        x = np.asarray(values, dtype=np.float64)
    magnitude = np.abs(x)
    finite = np.isfinite(magnitude)
    magnitude = np.where(finite, magnitude, 0.0)
    mb = fmt.mantissa_bits

    # binade of each value (magnitude = m * 2**e2 with m in [0.5, 1)), subnormals share the lowest one
    _, e2 = np.frexp(magnitude)
    exponent = np.maximum(e2.astype(np.int64) - 1, fmt.min_exponent)
    # count the value in units of its last place; scaling by a power of two is exact
    units = np.rint(np.ldexp(magnitude, (mb - exponent).astype(np.int32)))  # rint rounds ties to even
    # rounding up may reach the next binade: 2**(mb+1) units is 2**mb units one exponent higher
    carried = units >= (1 << (mb + 1))
    units = np.where(carried, units / 2, units)
    exponent = exponent + carried

    with np.errstate(over="ignore"):  # near float64's top a rounded value may itself overflow: still too big
        rounded = np.ldexp(units, (exponent - mb).astype(np.int32))
    overflow = rounded > fmt.max_finite
    normal = units >= (1 << mb)
    exponent_field = np.where(normal, exponent + fmt.bias, 0)
    mantissa_field = np.where(normal, units - (1 << mb), units).astype(np.int64)
    bits = (exponent_field << mb) | mantissa_field

    too_big = overflow | np.isinf(x)
    bits = np.where(too_big, fmt.inf_bits if fmt.has_inf else fmt.nan_bits, bits)
    bits = np.where(np.isnan(x), fmt.nan_bits, bits)
    sign = np.signbit(x).astype(np.int64) << (fmt.total_bits - 1)
    return (bits | sign).astype(fmt.storage)


def decode(bits: object, fmt: FloatFormat) -> np.ndarray:
    """The float32 values stored as `bits` in `fmt`."""
    b = np.asarray(bits).astype(np.int64)
    mb = fmt.mantissa_bits
    all_ones_exponent = (1 << fmt.exponent_bits) - 1
    all_ones_mantissa = (1 << mb) - 1
    negative = ((b >> (fmt.total_bits - 1)) & 1).astype(bool)
    exponent_field = (b >> mb) & all_ones_exponent
    mantissa_field = b & all_ones_mantissa

    subnormal = exponent_field == 0
    units = np.where(subnormal, mantissa_field, mantissa_field + (1 << mb)).astype(np.float64)
    exponent = np.where(subnormal, fmt.min_exponent, exponent_field - fmt.bias)
    magnitude = np.ldexp(units, (exponent - mb).astype(np.int32))

    top = exponent_field == all_ones_exponent
    if fmt.has_inf:
        magnitude = np.where(top, np.where(mantissa_field == 0, np.inf, np.nan), magnitude)
    else:
        magnitude = np.where(top & (mantissa_field == all_ones_mantissa), np.nan, magnitude)
    return np.where(negative, -magnitude, magnitude).astype(np.float32)

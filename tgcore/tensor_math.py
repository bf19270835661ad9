"""Elementwise math only tensors have: the formulas with a gradient rule of their own, and those built on them.

A mixin of `tgcore.tensor.Tensor`. The compositions without a gradient rule (hardtanh, relu6, hardsigmoid,
hardswish, softsign, leaky_relu, abs, sign, floor, ceil, round, isnan, isinf, isfinite, clip, add, sub, mul, neg,
fmod, copysign, lerp, isclose, the bitwise / shift / logical names, rsqrt, log10) are written once for Tensor and
UOp in `tgcore.uop.mixins.ElementwiseMixin`. These stay here:

- exp, log, pow (and ``**``), atan, asin, acos, sinh, cosh, asinh, acosh, atanh: each has its own gradient rule
  (``with_gradient``), which only autograd on a Tensor reads.
- expm1, log1p, sigmoid, tanh, elu, selu, celu, gelu, quick_gelu, silu, softplus, mish, logsigmoid, erf, logaddexp:
  built on exp / log / expm1 / log1p, which on a UOp are the kernel-level formulas of `tgcore.uop.transcendental`
  (Python scalars as unshaped constants, no gradient rule), so the same formula would not build a Tensor's graph
  on a UOp.
- relu: its gradient at 0 comes from a ``detach`` (autograd only).
- div (``rounding_mode="floor"`` is ``//``) and mod / remainder (``%``): a Tensor's ``//`` and ``%`` follow Python,
  a UOp's follow C, so these are per-class operators.
- bitwise_not: it is ``~``, whose shared definition makes a UOp's constant unshaped (kernel-level).
(logsumexp, cummax and cummin stay in `tgcore.tensor_reduce` for the same reasons as exp and log.)

In:  tensors (and Python scalars, broadcast like the arithmetic operators).
Out: lazy tensors. Float functions promote int and bool inputs to the default float (like torch);
     float16 / bfloat16 inputs return their own dtype, composite functions computing in float32 and
     rounding once.

`exp2`, `log2`, `sin`, `sqrt` and `reciprocal` are single ops (EXP2, LOG2, SIN, ...) that codegen
decomposes into basic ALU ops for renderers without native ones; they, `trunc`, `cos` and `tan` come from the
operator surface Tensor shares with UOp (`tgcore.uop.mixins`). `exp`, `log`, `cos` and `tan` are the formulas
of `tgcore.uop.transcendental` applied to tensors directly, which need a more careful reduction than a
composition would give (``exp(x) = exp2(x * log2(e))`` is ~40 ulp off at x = 88; ``cos(x) = sin(x + pi/2)`` is
far off near the zeros of cos for large x); their piecewise-constant parts (nearest integers, quadrants) are
detached so gradients only flow through the smooth parts.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tgcore.dtype import DType, dtypes, least_upper_dtype, least_upper_float
from tgcore.errors import TensorValueError
from tgcore.tensor_autograd import with_gradient
from tgcore.uop import Ops
from tgcore.uop import transcendental as tr

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

LN2 = math.log(2)
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

# erf(x) = x * P(x*x) for |x| <= 1; erfc(x) * exp(x*x) = Q(v), v = (1/x - 7/12) * 12/5, for 1 < x < 6.
# Fitted like the tables of tgcore.uop.transcendental (weighted least squares on Chebyshev nodes +
# Lawson reweighting, mpmath): max relative error 4.6e-16 (P), 8.4e-13 (Q).
ERF_P = (1.1283791670955121, -0.3761263890317468, 0.11283791670589631, -0.026866170587674168,
         0.005223977161750244, -0.0008548305156955388, 0.00012054688394824906, -1.4913391947058105e-05,
         1.631112993000997e-06, -1.5191919056751578e-07, 9.435869367310504e-09)
ERFC_Q = (0.28972211632324724, 0.16536269001415402, -0.030831050477261816, 0.0028211318343536827,
          0.0010344314947105765, -0.0007383859355760695, 0.00026561202024211894, -5.529145628746652e-05,
          -4.0756119876097205e-06, 1.09003450133685e-05, -6.4277385015127795e-06, 2.543533152917035e-06,
          -7.590405845045157e-07, 5.719709893341525e-08, 1.939771995176841e-07, -1.413544877394529e-07,
          3.103097388984751e-08)


class MathMixin:
    __slots__ = ()

    # ---------------------------------------------------------------- helpers
    def _t(self) -> Tensor:
        return self  # type: ignore[return-value]

    def _as_float(self) -> Tensor:
        """This tensor in the float dtype float functions compute in (ints and bool -> default float)."""
        t = self._t()
        return t.cast(least_upper_float(t.dtype))


    # ---------------------------------------------------------------- exponentials and logs
    # exp2, log2, sqrt, reciprocal, sin, cos and tan come from the shared surface (tgcore.uop.mixins)
    def exp(self) -> Tensor:
        """e**x: exact reduction by ln2, then EXP2 of the small remainder (accurate for every x)."""
        x = self._t()._float()
        return with_gradient(tr.exp(x), (x,), _exp_grad)

    def log(self) -> Tensor:
        """ln(x) from the same reduction as log2, with ln2 split so e*ln2 carries no rounding."""
        x = self._t()._float()
        return with_gradient(tr.log(x), (x,), _log_grad)

    def expm1(self) -> Tensor:
        """exp(x) - 1, accurate near 0 (u = exp(x): (u - 1) * x / log(u) cancels the rounding of u)."""
        def f(x: Tensor) -> Tensor:
            u = x.exp()
            um1 = u - 1
            # the accurate form is only used where it is finite; elsewhere it sees harmless inputs, so its
            # (unused) gradient is 0 rather than 0 * inf = NaN
            ok = (um1 != 0) & (u != math.inf) & (um1 != -1)
            us, xs = ok.where(u, math.e), ok.where(x, 1.0)
            accurate = (us - 1) * xs / us.log()
            return (um1 == 0).where(x, (u == math.inf).where(u, (um1 == -1).where(-1.0, accurate)))
        return self._t()._in_f32(f)

    def log1p(self) -> Tensor:
        """log(1 + x), accurate near 0 (w = 1 + x: log(w) * x / (w - 1) cancels the rounding of w)."""
        def f(x: Tensor) -> Tensor:
            w = x + 1
            ok = (w != 1) & (w != math.inf)  # (as in expm1: the unused branch gets harmless inputs)
            ws, xs = ok.where(w, 2.0), ok.where(x, 1.0)
            accurate = ws.log() * xs / (ws - 1)
            return (w == 1).where(x, (w == math.inf).where(w, accurate))
        return self._t()._in_f32(f)

    # ---------------------------------------------------------------- activations
    def sigmoid(self) -> Tensor:
        return self._t()._in_f32(lambda x: 1 / (1 + (-x).exp()))

    def tanh(self) -> Tensor:
        """tanh(|x|) = -m / (m + 2) with m = expm1(-2|x|): no cancellation near 0, no overflow."""
        def f(x: Tensor) -> Tensor:
            m = ((x < 0).where(x, -x) * 2).expm1()  # (-|x| with slope -1 at 0, so tanh'(0) is 1; abs'(0) is 0)
            t = -m / (m + 2)
            return (x < 0).where(-t, t)
        return self._t()._in_f32(f)

    def relu(self) -> Tensor:
        """max(x, 0); the gradient at 0 is 0 (like torch)."""
        t = self._t()
        return (t < 0).where(0, (t == 0).where(t.detach(), t))

    def elu(self, alpha: float = 1.0) -> Tensor:
        def f(x: Tensor) -> Tensor:
            return (x > 0).where(x, x.expm1() * alpha)
        return self._t()._in_f32(f)

    def gelu(self, approximate: str = "none") -> Tensor:
        """x * Phi(x): ``approximate="none"`` with erf, ``"tanh"`` with the tanh approximation."""
        if approximate == "tanh":
            # 0.5 * (1 + tanh(u)) = sigmoid(2u), which does not cancel for negative x
            return self._t()._in_f32(
                lambda x: x * ((x + 0.044715 * x * x * x) * (2 * math.sqrt(2 / math.pi))).sigmoid())
        if approximate != "none":
            raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
        return self._t()._in_f32(lambda x: 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf()))

    def quick_gelu(self) -> Tensor:
        return self._t()._in_f32(lambda x: x * (x * 1.702).sigmoid())

    def silu(self) -> Tensor:
        return self._t()._in_f32(lambda x: x * x.sigmoid())

    swish = silu

    def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
        """log(1 + exp(beta*x)) / beta, and x itself where beta*x > threshold (like torch)."""
        def f(x: Tensor) -> Tensor:
            bx = x * beta
            return (bx > threshold).where(x, bx.exp().log1p() * (1 / beta))
        return self._t()._in_f32(f)

    def mish(self) -> Tensor:
        return self._t()._in_f32(lambda x: x * x.softplus().tanh())

    def erf(self) -> Tensor:
        """x * P(x^2) for |x| <= 1, 1 - exp(-x^2) * Q(1/|x|) up to 6, +-1 beyond (sign kept)."""
        def f(x: Tensor) -> Tensor:
            ax = x.abs()
            near = ax <= 1
            xs = near.where(x, 0.0)  # each branch sees only inputs it is valid for: no inf in unused gradients
            small = xs * _horner(xs * xs, ERF_P)
            axs = near.where(1.0, ax)
            z = axs * axs
            v = ((1 / axs) - 7 / 12) * (12 / 5)
            big = 1 - (-z).exp() * _horner(v, ERFC_Q)
            big = (ax < 6).where(big, 1.0)
            big = (x < 0).where(-big, big)
            return (ax <= 1).where(small, big)
        return self._t()._in_f32(f)

    # ---------------------------------------------------------------- named arithmetic (torch names)
    def div(self, other: Any, rounding_mode: str | None = None) -> Tensor:
        """``/``; ``rounding_mode="trunc"`` rounds toward zero, ``"floor"`` down (``//``); ints stay ints then."""
        t = self._t()
        if rounding_mode is None:
            return t / other
        if rounding_mode == "floor":
            return t // other
        if rounding_mode != "trunc":
            raise TensorValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                             f"{rounding_mode!r}")
        a, b = t._broadcast_pair(other)
        if dtypes.is_float(a.dtype):
            return (a / b).trunc()
        return a._new(a.uop.alu(Ops.IDIV, b.uop))  # (C division truncates)

    def mod(self, other: Any) -> Tensor:
        """Python's ``%``: the remainder has the divisor's sign (torch.remainder)."""
        return self._t() % other

    remainder = mod

    def logaddexp(self, other: Any) -> Tensor:
        """log(exp(a) + exp(b)) = max + log1p(exp(-|a - b|)), exact where both are the same infinity."""
        a, b = self._t()._float()._broadcast_pair(other)
        m = a.maximum(b)
        d = a - b
        same_inf = (a == b) & (m.abs() == math.inf)
        safe = same_inf.where(0.0, d)
        out = m + (-safe.abs()).exp().log1p()
        return same_inf.where(a, out)

    # ---------------------------------------------------------------- inverse trigonometry, hyperbolic (torch names)
    # Computed in float64 for float32 and narrower (one rounding at the end), with the derivative as the gradient
    # rule (the formulas' own graphs break at their branch points).
    def _wide(self, fn: Callable[[Tensor], Tensor], rule: Callable[..., tuple[Tensor]]) -> Tensor:
        x = self._t()._float()
        work = dtypes.float64 if x.dtype.itemsize < 8 else x.dtype
        return with_gradient(fn(x.cast(work)).cast(x.dtype), (x,), rule)

    def atan(self) -> Tensor:
        """atan by argument reduction: 1/x above 1, then two half-angle steps to |x| <= tan(pi/16), then a series."""
        def f(x: Tensor) -> Tensor:
            ax = (x < 0).where(-x, x)
            big = ax > 1
            r = big.where(1 / ax, ax)
            for _ in range(2):  # atan(r) = 2 atan(r / (1 + sqrt(1 + r^2)))
                r = r / (1 + (1 + r * r).sqrt())
            z = r * r
            series = r * _horner(z, tuple((-1) ** k / (2 * k + 1) for k in range(13)))
            a = series * 4
            a = big.where(math.pi / 2 - a, a)
            return (x < 0).where(-a, a)
        return self._wide(f, _atan_grad)

    def asin(self) -> Tensor:
        return self._wide(lambda x: (x / ((1 - x) * (1 + x)).sqrt()).atan(), _asin_grad)

    def acos(self) -> Tensor:
        """pi/2 - asin(x), written as 2 atan(sqrt((1 - x) / (1 + x))) so it stays accurate near 1."""
        return self._wide(lambda x: (((1 - x) / (1 + x)).sqrt()).atan() * 2, _acos_grad)

    def sinh(self) -> Tensor:
        return self._wide(lambda x: (x.expm1() - (-x).expm1()) * 0.5, _sinh_grad)

    def cosh(self) -> Tensor:
        return self._wide(lambda x: (x.exp() + (-x).exp()) * 0.5, _cosh_grad)

    def asinh(self) -> Tensor:
        """sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), no cancellation near 0; log(2|x|) where x^2 overflows."""
        def f(x: Tensor) -> Tensor:
            ax = (x < 0).where(-x, x)
            huge = ax > 1e150
            s = huge.where(1.0, ax)
            a = huge.where((ax * 2).log(), (s + s * s / (1 + (1 + s * s).sqrt())).log1p())
            return (x < 0).where(-a, a)
        return self._wide(f, _asinh_grad)

    def acosh(self) -> Tensor:
        """log1p((x - 1) + sqrt((x - 1)(x + 1))), accurate near 1; log(2x) where x^2 overflows; nan below 1."""
        def f(x: Tensor) -> Tensor:
            huge = x > 1e150
            s = huge.where(2.0, x)
            a = huge.where((x * 2).log(), ((s - 1) + ((s - 1) * (s + 1)).sqrt()).log1p())
            return (x < 1).where(math.nan, a)
        return self._wide(f, _acosh_grad)

    def atanh(self) -> Tensor:
        """0.5 log1p(2x / (1 - x)); +-inf at +-1, nan beyond."""
        return self._wide(lambda x: (x * 2 / (1 - x)).log1p() * 0.5, _atanh_grad)

    arcsin, arccos, arctan, arcsinh, arccosh, arctanh = asin, acos, atan, asinh, acosh, atanh

    # ---------------------------------------------------------------- more activations (torch's definitions)
    def selu(self) -> Tensor:
        return self.elu(SELU_ALPHA) * SELU_SCALE

    def celu(self, alpha: float = 1.0) -> Tensor:
        """x for x > 0, alpha * (exp(x / alpha) - 1) otherwise."""
        return self._t()._in_f32(lambda x: (x > 0).where(x, (x / alpha).expm1() * alpha))

    def logsigmoid(self) -> Tensor:
        """log(sigmoid(x)) = -softplus(-x), without overflow."""
        return -((-self._t()._float()).softplus())

    # ---------------------------------------------------------------- sign, abs, rounding

    # ---------------------------------------------------------------- pow
    def pow(self, exponent: Any) -> Tensor:
        """self ** exponent, like torch: negative bases with integer exponents keep their sign, other
        negative bases give nan; ints to non-negative int powers stay ints (wrapping)."""
        t = self._t()
        if isinstance(exponent, (bool, int, float)) and not isinstance(exponent, bool):
            return t._pow_scalar(exponent)
        base, e = t._broadcast_pair(exponent)
        if base is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        return base._pow_tensor(e)

    def __pow__(self, exponent: Any) -> Tensor:
        return self.pow(exponent)

    def __rpow__(self, base: Any) -> Tensor:
        b, e = self._t()._broadcast_pair(base, True)
        if b is NotImplemented:
            return NotImplemented  # type: ignore[return-value]
        return b._pow_tensor(e)

    def _pow_scalar(self, y: int | float) -> Tensor:
        t = self._t()
        if dtypes.is_int(t.dtype) or t.dtype is dtypes.bool:
            if isinstance(y, int):
                if y < 0:
                    raise TensorValueError("integers to negative integer powers are not allowed; cast to float "
                                           "first")
                return _int_pow_scalar(t if t.dtype is not dtypes.bool else t.cast(dtypes.default_int), y)
            t = t._float()
        if y == 0:  # 1 everywhere (nan and inf included), with zero gradients
            return with_gradient(t.ones_like(), (t,), _zero_grad)
        if y == 1:
            return t
        if y == 2:
            return t * t
        if y == -1:
            return t.reciprocal()
        if y == 0.5:  # (like torch: sqrt, so -inf gives nan and -0.0 stays -0.0)
            return t.sqrt()
        if y == -0.5:
            return with_gradient(t.rsqrt(), (t, t._const(y, t.dtype)), _pow_grad)
        return t._pow_tensor(t._const(y, t.dtype))

    def _pow_tensor(self, e: Tensor) -> Tensor:
        b = self._t()
        if (dtypes.is_int(b.dtype) or b.dtype is dtypes.bool) and (dtypes.is_int(e.dtype) or e.dtype is dtypes.bool):
            if b.dtype is dtypes.bool:
                b, e = b.cast(dtypes.default_int), e.cast(dtypes.default_int)
            return _int_pow_tensor(b, e)
        dt = least_upper_float(least_upper_dtype(b.dtype, e.dtype))
        work = dtypes.float64  # float32 and narrower compute in float64: y*log2|x| carries no visible error
        x, y = b.cast(work), e.cast(work)
        ax = x.abs()
        mag = (y * ax.log2()).exp2()
        y_int = y.trunc() == y
        y_odd = y_int & ((y * 0.5).trunc() != y * 0.5)
        neg = x < 0
        out = (neg & y_odd).where(-mag, mag)
        out = (neg & y_int.logical_not() & (x != -math.inf)).where(math.nan, out)
        out = ((ax == 1) & (y.abs() == math.inf)).where(1.0, out)
        out = ((y == 0) | (x == 1)).where(1.0, out)
        return with_gradient(out.cast(dt), (b, e), _pow_grad)

    # ---------------------------------------------------------------- bitwise and logical
    def bitwise_not(self) -> Tensor:
        self._t()._check_int("bitwise_not")
        return ~self._t()


# ---------------------------------------------------------------- gradient rules (see with_gradient)
# A zero upstream gradient gives exactly zero (not 0 * inf = nan): formulas that pick a branch with where()
# pass zeros into the branch not taken, which must not poison the gradient.
def _times(g: Tensor, d: Tensor) -> Tensor:
    return (g == 0).where(0.0, g * d.cast(g.dtype))


def _exp_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (_times(g, out),)  # (inf at inf: the formula's own graph gives 0 there)


def _log_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (_times(g, x.reciprocal()),)  # (also below 0, like torch: the formula's graph gives nan there)


def _zero_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g.zeros_like(),)


def _pow_grad(g: Tensor, out: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """torch's rules: d/dx = y * x**(y-1) (0 where y == 0), d/dy = x**y * log(x) (0 where x == 0 and y >= 0)."""
    dx = (y == 0).where(0.0, y * x.pow(y - 1))
    dy = ((x == 0) & (y >= 0)).where(0.0, out * x.log())
    return _times(g, dx), _times(g, dy)


def _atan_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g / (1 + x * x),)


def _asin_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g * ((1 - x) * (1 + x)).rsqrt(),)


def _acos_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (-g * ((1 - x) * (1 + x)).rsqrt(),)


def _sinh_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (_times(g, x.cosh()),)


def _cosh_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (_times(g, x.sinh()),)


def _asinh_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g * (x * x + 1).rsqrt(),)


def _acosh_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g * ((x - 1) * (x + 1)).rsqrt(),)


def _atanh_grad(g: Tensor, out: Tensor, x: Tensor) -> tuple[Tensor]:
    return (g / ((1 - x) * (1 + x)),)



def _horner(x: Tensor, coeffs: tuple[float, ...]) -> Tensor:
    acc = x * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        acc = acc * x + c
    return acc


def _int_pow_scalar(x: Tensor, n: int) -> Tensor:
    """x**n for an int n >= 0 by repeated squaring (wraps like the dtype)."""
    result: Tensor | None = None
    square = x
    while n:
        if n & 1:
            result = square if result is None else result * square
        n >>= 1
        if n:
            square = square * square
    return result if result is not None else x.ones_like()


def _int_pow_tensor(x: Tensor, e: Tensor) -> Tensor:
    """x**e elementwise for int tensors: square-and-multiply over every bit of e. A negative e gives
    1/x**|e| truncated: 1 for x = 1, +-1 for x = -1, 0 otherwise (numpy refuses these)."""
    dt: DType = x.dtype
    bits = 8 * dt.itemsize - (0 if dtypes.is_unsigned(dt) else 1)
    result = x.ones_like()
    square = x
    for i in range(bits):
        bit = (e >> i) & 1
        result = (bit != 0).where(result * square, result)
        if i + 1 < bits:
            square = square * square
    if dtypes.is_unsigned(dt):
        return result
    odd = (e & 1) != 0
    negative_power = (x == 1).where(1, (x == -1).where(odd.where(-1, 1), 0)).cast(dt)
    return (e < 0).where(negative_power, result)

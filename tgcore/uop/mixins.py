"""The operator surface UOp and Tensor share: elementwise arithmetic, comparisons, bitwise ops, the math
formulas (exp, log, cos, tan, ...), and the rules that pair operands (dtype promotion and broadcasting), written
once on ``Self``.

In:  a class that provides the small abstract surface below: ``dtype``, ``shape`` (from `tgcore.uop.movement`),
     ``alu(op, *src)`` (the op on operands of the same kind whose shapes and dtypes already match),
     ``_scalar_like(value, dtype=None)`` (a constant of this value's shape, in this dtype or ``dtype``), ``cast``,
     ``bitcast``, ``_check_operand(other)`` (a pair this class refuses, e.g. tensors on two devices) and
     ``_cut_gradient()`` (how the math formulas mark their piecewise-constant parts). ``const_like(value)`` is the
     constant an operator with a Python scalar uses (a Tensor's is ``_scalar_like``, a UOp's has no shape).
     ``_binop`` (pair, check, apply) has a generic definition here; Tensor fuses it into one frame, as every
     operator goes through it.
Out: the operators both UOp and Tensor mean the same way (``+``, ``*``, ``<``, ``>``, ``&``, ``|``, ``^``,
     ``<<``, ``>>``, ``~``, ``eq``, ``ne``, ``maximum``, ``logical_not``), the float unary ops and the formulas of
     `tgcore.uop.transcendental` as methods; ``_broadcasted(x)`` (two operands promoted with
     ``least_upper_dtype`` / ``scalar_dtype`` and broadcast with ``broadcast_shape``) and the broadcasting
     ``where``, which the shared formulas (`tgcore.uop.reduction`, `tgcore.uop.movement`) call explicitly; and the
     elementwise formulas that are compositions of other ops with no gradient rule of their own: hardtanh,
     relu6, hardsigmoid, hardswish, softsign, leaky_relu, abs, sign, floor, ceil, round, isnan, isinf, isfinite,
     clip, the torch names add, sub, mul, neg, fmod, copysign, lerp, isclose, the bitwise_* / shift / logical_*
     names, rsqrt and log10. (What stays on Tensor, and why: `tgcore.tensor_math`.)

How the two implementations differ, on purpose: a UOp is a typed IR node, so its operators (``_operands``) refuse
mixed dtypes and never broadcast (codegen must not convert silently), its ``where`` is as strict, and its
operators keep the meanings index math and codegen rely on: C's truncating ``//`` and ``%``, ``-`` as SUB (ints:
``a + b * -1``), ``<=`` as ``not (b < a)``, ``minimum`` as ``-max(-a, -b)`` (range analysis stays exact). A
Tensor's operators go through ``_broadcasted`` and follow torch: Python's floor ``//`` and ``%``, ``-`` as
``a + NEG(b)``, ``/`` always a float, NaN-aware ``<=`` / ``>=``. Those operators (``__neg__``, ``__sub__``,
``__truediv__``, ``__floordiv__``, ``__mod__``, ``__le__``, ``__ge__``, ``minimum``) stay on each class; everything
here is one definition. Autograd stays on Tensor.

Constants: a Tensor's operators make a Python scalar a constant of the tensor's shape; a UOp's make it an unshaped
CONST (what kernel-level nodes need). Formulas shared by both on tensor-level values (`tgcore.uop.reduction`,
``pad``, the elementwise formulas here) therefore build their constants with ``_scalar_like`` and pair operands
with ``_broadcasted``, through the named steps ``_op``, ``_subtract``, ``_divide``, ``_negate`` and ``_at_most`` (a
Tensor's ``op``, ``-``, ``/``, unary ``-`` and ``<=``): on a tensor-level UOp they build exactly the Tensor's graph.
The math formulas of `tgcore.uop.transcendental` take Python scalars, so on a UOp they serve kernel-level (scalar)
nodes.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from tgcore.dtype import DType, dtypes, least_upper_dtype, least_upper_float
from tgcore.errors import TensorValueError
from tgcore.uop import transcendental as tr
from tgcore.uop.ops import Ops


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's broadcasting rule: align the shapes on the right; each pair of sizes must agree or hold a 1."""
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            raise TensorValueError(f"shapes {a} and {b} cannot be broadcast together")
        out.append(y if x == 1 else x)
    return tuple(out)


def scalar_dtype(dtype: DType, value: bool | int | float) -> DType:
    """The dtype a value of ``dtype`` and a Python scalar compute in: the value's own, unless the scalar needs a
    wider kind (a float with ints or bools gives the default float, an int with bools the default int)."""
    if isinstance(value, float) and not dtypes.is_float(dtype):
        return dtypes.default_float
    if isinstance(value, int) and not isinstance(value, bool) and dtype is dtypes.bool:
        return dtypes.default_int
    return dtype


class ElementwiseMixin:
    """Operators and math written once for UOp and Tensor (see the module docstring for the surface)."""

    __slots__ = ()
    if TYPE_CHECKING:  # (a slot of UOp, a property of Tensor)
        @property
        def dtype(self) -> DType: ...

        @property
        def shape(self) -> tuple[int, ...]: ...

        def _broadcast_to(self, shape: tuple[int, ...]) -> Self: ...

        def __neg__(self) -> Self: ...

        def __truediv__(self, x: Any) -> Self: ...
    # operators whose operand dtypes an implementation checks (``_check_operator``) before applying them
    _checked_operators: frozenset[Ops] = frozenset()

    # ---------------------------------------------------------------- the abstract surface
    def alu(self, op: Ops, *src: Self) -> Self:
        raise NotImplementedError

    def const_like(self, value: Any) -> Self:
        raise NotImplementedError

    def _scalar_like(self, value: Any, dtype: DType | None = None) -> Self:
        """``value`` as a constant of this value's shape, in this dtype (or ``dtype``)."""
        raise NotImplementedError

    def _check_operand(self, other: Self) -> None:
        """Raise for an operand of this kind that cannot pair with this one (a Tensor: another device)."""

    def cast(self, dtype: DType) -> Self:
        raise NotImplementedError

    def bitcast(self, dtype: DType) -> Self:
        raise NotImplementedError

    def _operands(self, x: Any, reverse: bool = False, op: Ops | None = None) -> tuple[Self, Self]:
        """(self, x) made to match (x, self with ``reverse``), or NotImplemented for an operand of another kind:
        promoted and broadcast (``_broadcasted``) unless a class pairs its operators more strictly (UOp)."""
        return self._broadcasted(x, reverse)

    def _check_operator(self, op: Ops) -> None:
        """Raise for an op in ``_checked_operators`` that this (promoted) operand's dtype has no meaning for."""

    def _cut_gradient(self) -> Self:
        """A value the formulas use only piecewise (nearest integers, quadrants): no gradient flows through it."""
        return self

    def _as_float(self) -> Self:
        """This value in the float dtype float functions compute in."""
        return self

    # ---------------------------------------------------------------- promotion and broadcasting
    def _broadcasted(self, x: Any, reverse: bool = False) -> tuple[Self, Self]:
        """(self, x) promoted to one dtype and broadcast to one shape, (x, self) with ``reverse``; NotImplemented
        for an operand of another kind. Two values promote with ``least_upper_dtype``; a Python scalar takes this
        value's dtype unless it needs a wider kind (``scalar_dtype``) and becomes a constant of its shape."""
        if isinstance(x, type(self)):
            self._check_operand(x)
            dt = least_upper_dtype(self.dtype, x.dtype)
            a, b = self.cast(dt), x.cast(dt)
            shape = broadcast_shape(a.shape, b.shape)
            a, b = a._broadcast_to(shape), b._broadcast_to(shape)
        elif isinstance(x, (bool, int, float, np.generic)):
            value = x.item() if isinstance(x, np.generic) else x
            a = self.cast(scalar_dtype(self.dtype, value))
            b = a._scalar_like(value)  # (already a's shape)
        else:
            return NotImplemented
        return (b, a) if reverse else (a, b)

    def _broadcast_pair(self, x: Any, reverse: bool = False) -> tuple[Self, Self]:
        """``_broadcasted`` for operators that go on with the pair: (NotImplemented, NotImplemented) for an operand
        of another kind."""
        pair = self._broadcasted(x, reverse)
        return (NotImplemented, NotImplemented) if pair is NotImplemented else pair  # type: ignore[return-value]

    def _where(self, x: Any, y: Any) -> Self:
        """``x`` where this value is true (nonzero), else ``y``: the three broadcast to one shape, ``x`` and ``y``
        promoted (two Python scalars to ``least_upper_dtype`` of their own dtypes). A Tensor's ``where``; the
        shared formulas call it as ``_where`` (a UOp's own ``where`` is strict)."""
        cond = self.cast(dtypes.bool)
        if isinstance(x, type(self)):
            a, b = x._broadcast_pair(y)
        elif isinstance(y, type(self)):
            b, a = y._broadcast_pair(x)
        else:
            dt = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
            a, b = cond._scalar_like(x, dt), cond._scalar_like(y, dt)
        shape = broadcast_shape(broadcast_shape(cond.shape, a.shape), b.shape)
        c, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
        return c.alu(Ops.WHERE, a, b)

    where = _where

    # ---------------------------------------------------------------- binary operators
    def _binop(self, op: Ops, x: Any, reverse: bool = False) -> Self:
        pair = self._operands(x, reverse, op)
        if pair is NotImplemented:
            return NotImplemented
        a, b = pair
        if op in self._checked_operators:
            a._check_operator(op)
        return a.alu(op, b)

    def __add__(self, x: Any) -> Self:
        return self._binop(Ops.ADD, x)

    def __radd__(self, x: Any) -> Self:
        return self._binop(Ops.ADD, x, True)

    def __mul__(self, x: Any) -> Self:
        return self._binop(Ops.MUL, x)

    def __rmul__(self, x: Any) -> Self:
        return self._binop(Ops.MUL, x, True)

    def __lt__(self, x: Any) -> Self:
        return self._binop(Ops.CMPLT, x)

    def __gt__(self, x: Any) -> Self:
        return self._binop(Ops.CMPLT, x, True)

    def eq(self, x: Any) -> Self:
        return self._binop(Ops.CMPEQ, x)

    def ne(self, x: Any) -> Self:
        return self._binop(Ops.CMPNE, x)

    def __and__(self, x: Any) -> Self:
        return self._binop(Ops.AND, x)

    def __rand__(self, x: Any) -> Self:
        return self._binop(Ops.AND, x, True)

    def __or__(self, x: Any) -> Self:
        return self._binop(Ops.OR, x)

    def __ror__(self, x: Any) -> Self:
        return self._binop(Ops.OR, x, True)

    def __xor__(self, x: Any) -> Self:
        return self._binop(Ops.XOR, x)

    def __rxor__(self, x: Any) -> Self:
        return self._binop(Ops.XOR, x, True)

    def __lshift__(self, x: Any) -> Self:
        return self._binop(Ops.SHL, x)

    def __rshift__(self, x: Any) -> Self:
        return self._binop(Ops.SHR, x)

    def maximum(self, x: Any) -> Self:
        return self._binop(Ops.MAX, x)

    def __invert__(self) -> Self:
        """Bitwise not: ``x ^ -1`` for signed ints (all ones), ``x ^ max`` for unsigned, logical not for bools."""
        dt = self.dtype.scalar()
        if dt is dtypes.bool:
            return self.logical_not()
        if not dtypes.is_int(dt):
            raise TypeError(f"~ needs an integer or bool value, got {self.dtype!r}")
        return self ^ (int(dt.max) if dtypes.is_unsigned(dt) else -1)

    def logical_not(self) -> Self:
        """not x, as x != True (after a cast to bool)."""
        b = self if self.dtype.scalar() is dtypes.bool else self.cast(dtypes.bool)
        return b._binop(Ops.CMPNE, True)

    # ---------------------------------------------------------------- float unary ops (single ALU ops)
    def exp2(self) -> Self:
        return self._as_float().alu(Ops.EXP2)

    def log2(self) -> Self:
        return self._as_float().alu(Ops.LOG2)

    def sqrt(self) -> Self:
        return self._as_float().alu(Ops.SQRT)

    def sin(self) -> Self:
        return self._as_float().alu(Ops.SIN)

    def reciprocal(self) -> Self:
        return self._as_float().alu(Ops.RECIPROCAL)

    def trunc(self) -> Self:
        """Round toward zero (integers are their own)."""
        return self.alu(Ops.TRUNC) if dtypes.is_float(self.dtype.scalar()) else self

    # ---------------------------------------------------------------- math formulas (tgcore.uop.transcendental)
    def exp(self) -> Self:
        """e**x with an exact reduction by ln2 (see `tgcore.uop.transcendental`)."""
        return tr.exp(self._as_float())

    def log(self) -> Self:
        return tr.log(self._as_float())

    def cos(self) -> Self:
        return tr.cos(self._as_float())

    def tan(self) -> Self:
        return tr.tan(self._as_float())

    # ---------------------------------------------------------------- a Tensor's operator meanings, by name
    # The formulas below are written once for both classes; they pair operands as a Tensor's operators do (a
    # UOp's own operators are strict and make Python scalars unshaped constants), so on a tensor-level UOp they
    # build exactly the Tensor's graph.
    def _paired(self, x: Any, reverse: bool = False) -> tuple[Self, Self]:
        """``_broadcasted``, with a TypeError for an operand of another kind."""
        pair = self._broadcasted(x, reverse)
        if pair is NotImplemented:
            raise TypeError(f"unsupported operand type {type(x).__name__} for a {type(self).__name__}")
        return pair

    def _op(self, op: Ops, x: Any, reverse: bool = False) -> Self:
        """A Tensor's binary operator ``op`` on (self, x), (x, self) with ``reverse``."""
        a, b = self._paired(x, reverse)
        return a.alu(op, b)

    def _negate(self) -> Self:
        """A Tensor's ``-x``: NEG (logical not for bools)."""
        return self._op(Ops.CMPNE, True) if self.dtype is dtypes.bool else self.alu(Ops.NEG)

    def _subtract(self, x: Any, reverse: bool = False) -> Self:
        """A Tensor's ``-``: ``a + (-b)``."""
        a, b = self._paired(x, reverse)
        return a.alu(Ops.ADD, b._negate())

    def _divide(self, x: Any, reverse: bool = False) -> Self:
        """A Tensor's ``/``: always a float."""
        a, b = self._paired(x, reverse)
        dt = least_upper_float(a.dtype)
        return a.cast(dt).alu(Ops.FDIV, b.cast(dt))

    def _at_most(self, x: Any) -> Self:
        """A Tensor's ``<=``: false where either side is NaN."""
        a, b = self._paired(x)
        if dtypes.is_float(a.dtype):
            return a._op(Ops.CMPLT, b) | a._op(Ops.CMPEQ, b)
        return a._op(Ops.CMPLT, b, True)._op(Ops.CMPNE, True)

    def _float(self) -> Self:
        """This value in the float dtype float functions compute in (ints and bool -> default float)."""
        return self.cast(least_upper_float(self.dtype))

    def _in_f32(self, fn: Callable[[Self], Self]) -> Self:
        """``fn`` of this value as a float; float16 / bfloat16 are computed in float32 and rounded once."""
        x = self._float()
        if x.dtype in (dtypes.float16, dtypes.bfloat16):
            return fn(x.cast(dtypes.float32)).cast(x.dtype)
        return fn(x)

    def _check_int(self, what: str) -> None:
        if not (dtypes.is_int(self.dtype) or self.dtype is dtypes.bool):
            raise TypeError(f"{what} needs integer or bool tensors, got {self.dtype!r}")

    # ---------------------------------------------------------------- activations (torch's definitions)
    def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Self:
        """x limited to [min_val, max_val] (nan stays nan); the gradient is 0 at and beyond the bounds (like torch)."""
        above_min = self._op(Ops.CMPLT, min_val, True)
        inside = (above_min & self._op(Ops.CMPLT, max_val)) | self.isnan()
        # the bounds in x's dtype: Python floats would promote a float16 or integer x to float32 (torch keeps it)
        return inside._where(self, above_min._where(self._scalar_like(max_val), self._scalar_like(min_val)))

    def relu6(self) -> Self:
        return self.hardtanh(0.0, 6.0)

    def hardsigmoid(self) -> Self:
        """relu6(x + 3) / 6."""
        return self._float()._op(Ops.ADD, 3).hardtanh(0.0, 6.0)._divide(6)

    def hardswish(self) -> Self:
        """x * relu6(x + 3) / 6 (gradient x/3 + 1/2 inside (-3, 3), 0 at -3 and 1 at 3, like torch)."""
        x = self._float()
        return x._op(Ops.MUL, x._op(Ops.ADD, 3).hardtanh(0.0, 6.0))._divide(6)  # (-inf gives nan, as torch's)

    def softsign(self) -> Self:
        x = self._float()
        return x._divide(x.abs()._op(Ops.ADD, 1, True))

    def leaky_relu(self, negative_slope: float = 0.01) -> Self:
        # (the gradient at 0 is the slope, like torch)
        return self._op(Ops.CMPLT, 0, True)._where(self, self._op(Ops.MUL, negative_slope))

    # ---------------------------------------------------------------- sign, abs, rounding, classification
    def abs(self) -> Self:
        if dtypes.is_unsigned(self.dtype) or self.dtype is dtypes.bool:
            return self
        # (-0.0 -> +0.0; the gradient at 0 is 0, like torch)
        return self._op(Ops.CMPLT, 0)._where(self._negate(), self._op(Ops.CMPEQ, 0)._where(0, self))

    def sign(self) -> Self:
        """-1, 0 or 1 (nan stays nan, zeros keep their sign); bool stays bool."""
        if self.dtype is dtypes.bool:
            return self
        zero = self._op(Ops.MUL, 0) if dtypes.is_float(self.dtype) else self._scalar_like(0)
        minus_one = zero if dtypes.is_unsigned(self.dtype) else self._scalar_like(-1)
        return self._op(Ops.CMPLT, 0, True)._where(self._scalar_like(1), self._op(Ops.CMPLT, 0)._where(minus_one, zero))

    def floor(self) -> Self:
        whole = self.trunc()
        return (whole > self)._where(whole._subtract(1), whole) if dtypes.is_float(self.dtype) else whole

    def ceil(self) -> Self:
        whole = self.trunc()
        return (whole < self)._where(whole._op(Ops.ADD, 1), whole) if dtypes.is_float(self.dtype) else whole

    def round(self) -> Self:
        """Round half to even (like numpy and torch); every step is exact, so any float dtype works."""
        if not dtypes.is_float(self.dtype):
            return self
        whole = self.trunc()
        frac = self._subtract(whole).abs()
        half = whole._op(Ops.MUL, 0.5)
        odd = half.trunc().ne(half)
        away = frac._op(Ops.CMPLT, 0.5, True) | (frac._op(Ops.CMPEQ, 0.5) & odd)
        return away._where(self._op(Ops.CMPLT, 0)._where(whole._subtract(1), whole._op(Ops.ADD, 1)), whole)

    def isnan(self) -> Self:
        return self.ne(self) if dtypes.is_float(self.dtype) else self._scalar_like(False, dtypes.bool)

    def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
        if not dtypes.is_float(self.dtype) or not (detect_positive or detect_negative):
            return self._scalar_like(False, dtypes.bool)
        if detect_positive and detect_negative:
            return self.abs()._op(Ops.CMPEQ, math.inf)
        return self._op(Ops.CMPEQ, math.inf if detect_positive else -math.inf)

    def isfinite(self) -> Self:
        if not dtypes.is_float(self.dtype):
            return self._scalar_like(True, dtypes.bool)
        return self._subtract(self)._op(Ops.CMPEQ, 0)

    def clip(self, min_: Any = None, max_: Any = None) -> Self:
        """Limit to [min_, max_] (either may be None); nan stays nan."""
        if min_ is None and max_ is None:
            raise ValueError("clip needs min_ or max_")
        out = self
        if min_ is not None:
            out = out._op(Ops.CMPLT, min_)._where(min_, out)
        if max_ is not None:
            out = out._op(Ops.CMPLT, max_, True)._where(max_, out)
        return out

    clamp = clip

    # ---------------------------------------------------------------- named arithmetic (torch names)
    def add(self, other: Any, alpha: Any = 1) -> Self:
        return self._op(Ops.ADD, self._scaled(other, alpha))

    def sub(self, other: Any, alpha: Any = 1) -> Self:
        return self._subtract(self._scaled(other, alpha))

    def _scaled(self, other: Any, alpha: Any) -> Any:
        if alpha == 1:
            return other
        return other._op(Ops.MUL, alpha) if isinstance(other, type(self)) else other * alpha

    def mul(self, other: Any) -> Self:
        return self._op(Ops.MUL, other)

    def neg(self) -> Self:
        return self._negate()

    def fmod(self, other: Any) -> Self:
        """C's fmod: the remainder has the dividend's sign."""
        a, b = self._paired(other)
        if dtypes.is_float(a.dtype):
            return a._subtract(a._divide(b).trunc()._op(Ops.MUL, b))
        return a.alu(Ops.MOD, b)  # (C remainder)

    def copysign(self, other: Any) -> Self:
        """|self| with the sign of ``other`` (-0.0 counts as negative); always a float."""
        a, b = self._float()._paired(other)
        a, b = a.cast(least_upper_float(a.dtype)), b.cast(least_upper_float(a.dtype))
        negative = b._op(Ops.CMPLT, 0) | (b._op(Ops.CMPEQ, 0) & b._divide(1, True)._op(Ops.CMPLT, 0))
        mag = a.abs()
        return negative._where(mag._negate(), mag)

    def lerp(self, end: Any, weight: Any) -> Self:
        """self + weight * (end - self), computed from the nearer end (like torch, exact at weight 0 and 1)."""
        diff = self._subtract(end, True)
        w = weight if isinstance(weight, type(self)) else self._scalar_like(weight, self.dtype)
        near_self = self._op(Ops.ADD, w._op(Ops.MUL, diff))
        near_end = diff._op(Ops.MUL, w._subtract(1, True))._subtract(end, True)
        return w.abs()._op(Ops.CMPLT, 0.5)._where(near_self, near_end)

    def isclose(self, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Self:
        """|a - b| <= atol + rtol * |b| (and equal values, infinities included); nan only with ``equal_nan``."""
        a, b = self._paired(other)
        within = a._subtract(b).abs()._at_most(b.abs()._op(Ops.MUL, rtol, True)._op(Ops.ADD, atol, True))
        close = a._op(Ops.CMPEQ, b) | (within & a.isfinite() & b.isfinite())
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    # ---------------------------------------------------------------- bitwise and logical (torch names)
    def bitwise_and(self, x: Any) -> Self:
        self._check_int("bitwise_and")
        return self._op(Ops.AND, x)

    def bitwise_or(self, x: Any) -> Self:
        self._check_int("bitwise_or")
        return self._op(Ops.OR, x)

    def bitwise_xor(self, x: Any) -> Self:
        self._check_int("bitwise_xor")
        return self._op(Ops.XOR, x)

    def lshift(self, x: Any) -> Self:
        self._check_int("lshift")
        return self._op(Ops.SHL, x)

    def rshift(self, x: Any) -> Self:
        """Arithmetic shift for signed ints, logical for unsigned."""
        self._check_int("rshift")
        return self._op(Ops.SHR, x)

    bitwise_left_shift = lshift
    bitwise_right_shift = rshift

    def _as_bool(self, x: Any) -> Any:
        return x.cast(dtypes.bool) if isinstance(x, type(self)) else bool(x)

    def logical_and(self, x: Any) -> Self:
        return self.cast(dtypes.bool)._op(Ops.AND, self._as_bool(x))

    def logical_or(self, x: Any) -> Self:
        return self.cast(dtypes.bool)._op(Ops.OR, self._as_bool(x))

    def logical_xor(self, x: Any) -> Self:
        return self.cast(dtypes.bool)._op(Ops.XOR, self._as_bool(x))

    # ---------------------------------------------------------------- single-op compositions
    def rsqrt(self) -> Self:
        return self._float().sqrt().reciprocal()

    def log10(self) -> Self:
        return self._in_f32(lambda x: x.log2()._op(Ops.MUL, math.log10(2)))

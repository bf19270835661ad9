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
     ``where``, which the shared formulas (`tgcore.uop.reduction`, `tgcore.uop.movement`) call explicitly.

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
``pad``) therefore build their constants with ``_scalar_like`` and pair operands with ``_broadcasted``; the math
formulas of `tgcore.uop.transcendental` take Python scalars, so on a UOp they serve kernel-level (scalar) nodes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

import numpy as np

from tgcore.dtype import DType, dtypes, least_upper_dtype
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

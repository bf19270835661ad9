"""The operator surface UOp and Tensor share: elementwise arithmetic, comparisons, bitwise ops and the math
formulas (exp, log, cos, tan, ...), written once on ``Self``.

In:  a class that provides the small abstract surface below: ``dtype``, ``alu(op, *src)`` (the op on operands
     of the same kind whose shapes and dtypes already match), ``const_like(value)`` (a constant with this
     dtype, and this shape where there is one), ``cast``, ``bitcast``, ``_operands(x, reverse)`` (this value and
     another operand made to match, or ``NotImplemented``) and ``_cut_gradient()`` (how the math formulas mark
     their piecewise-constant parts). ``_binop`` (pair, check, apply) has a generic definition here; Tensor
     fuses it into one frame, as every operator goes through it.
Out: the operators both UOp and Tensor mean the same way (``+``, ``*``, ``<``, ``>``, ``&``, ``|``, ``^``,
     ``<<``, ``>>``, ``eq``, ``ne``, ``maximum``, ``logical_not``), the float unary ops and the formulas of
     `tgcore.uop.transcendental` as methods.

How the two implementations differ, on purpose: a UOp is a typed IR node, so ``_operands`` refuses mixed dtypes
and never broadcasts (codegen must not convert silently), and its ``//``, ``%`` and ``-`` keep their C-like
meanings for index math; a Tensor promotes dtypes and broadcasts with the rules below (``broadcast_shape``,
``scalar_dtype``) and has Python's floor ``//`` and ``%``. Those operators stay on each class; everything here
is one definition. Autograd stays on Tensor.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from tgcore.dtype import DType, dtypes
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

        def where(self, a: Any, b: Any) -> Self: ...

        def __neg__(self) -> Self: ...

        def __truediv__(self, x: Any) -> Self: ...
    # operators whose operand dtypes an implementation checks (``_check_operator``) before applying them
    _checked_operators: frozenset[Ops] = frozenset()

    # ---------------------------------------------------------------- the abstract surface
    def alu(self, op: Ops, *src: Self) -> Self:
        raise NotImplementedError

    def const_like(self, value: Any) -> Self:
        raise NotImplementedError

    def cast(self, dtype: DType) -> Self:
        raise NotImplementedError

    def bitcast(self, dtype: DType) -> Self:
        raise NotImplementedError

    def _operands(self, x: Any, reverse: bool = False, op: Ops | None = None) -> tuple[Self, Self]:
        """(self, x) made to match (x, self with ``reverse``), or NotImplemented for an operand of another kind."""
        raise NotImplementedError

    def _check_operator(self, op: Ops) -> None:
        """Raise for an op in ``_checked_operators`` that this (promoted) operand's dtype has no meaning for."""

    def _cut_gradient(self) -> Self:
        """A value the formulas use only piecewise (nearest integers, quadrants): no gradient flows through it."""
        return self

    def _as_float(self) -> Self:
        """This value in the float dtype float functions compute in."""
        return self

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

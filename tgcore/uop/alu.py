"""What each ALU op computes on constants: the semantics constant folding and `sym_infer` use.

In:  an op, the result dtype, and Python operand values (already stored as their dtypes hold them).
Out: the Python result value, stored as `dtype` holds it (`tgcore.dtype.truncate`).

Integers wrap around in their dtype; `IDIV` truncates toward zero and `MOD` takes the dividend's
sign, like C. Division or remainder by zero, and shifts by a negative amount or by the bit width or
more, are undefined in C: they raise `UndefinedOp` so callers leave the op unfolded. Floats follow
IEEE 754: each op is computed in float64 and rounded once to the result dtype, which is exact for
+ - * / and sqrt of float32 and narrower formats.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tgcore.dtype import DType, dtypes, truncate
from tgcore.uop.ops import Ops


class UndefinedOp(ArithmeticError):
    """The op has no defined result for these operands (e.g. integer division by zero)."""


def c_div(a: int, b: int) -> int:
    """Integer division truncating toward zero."""
    if b == 0:
        raise UndefinedOp("integer division by zero")
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_mod(a: int, b: int) -> int:
    """Integer remainder with the sign of the dividend (a == c_div(a, b) * b + c_mod(a, b))."""
    return a - b * c_div(a, b)


def _int_alu(op: Ops, dtype: DType, x: tuple[Any, ...]) -> Any:
    if op is Ops.ADD:
        return x[0] + x[1]
    if op is Ops.SUB:
        return x[0] - x[1]
    if op is Ops.MUL:
        return x[0] * x[1]
    if op is Ops.NEG:
        return -x[0]
    if op is Ops.IDIV:
        return c_div(x[0], x[1])
    if op is Ops.MOD:
        return c_mod(x[0], x[1])
    if op is Ops.MAX:
        return max(x[0], x[1])
    if op is Ops.AND:
        return x[0] & x[1]
    if op is Ops.OR:
        return x[0] | x[1]
    if op is Ops.XOR:
        return x[0] ^ x[1]
    if op in (Ops.SHL, Ops.SHR):
        if not 0 <= x[1] < 8 * dtype.itemsize:
            raise UndefinedOp(f"shift by {x[1]} in {dtype!r}")
        return x[0] << x[1] if op is Ops.SHL else x[0] >> x[1]
    if op is Ops.MULACC:
        return x[0] * x[1] + x[2]
    if op is Ops.TRUNC:
        return x[0]
    raise NotImplementedError(f"no integer semantics for {op}")


_FLOAT_UNARY = {Ops.NEG: np.negative, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt,
                Ops.RECIPROCAL: np.reciprocal, Ops.TRUNC: np.trunc}
_FLOAT_BINARY = {Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide,
                 Ops.MAX: np.maximum, Ops.POW: np.power}


def _float_alu(op: Ops, dtype: DType, x: tuple[Any, ...]) -> Any:
    with np.errstate(all="ignore"):
        v = [np.float64(a) for a in x]
        if op in _FLOAT_UNARY:
            return float(_FLOAT_UNARY[op](v[0]))
        if op in _FLOAT_BINARY:
            return float(_FLOAT_BINARY[op](v[0], v[1]))
        # float MULACC and a*b + c may round once (backends contract, like C compilers) or twice (here and the
        # interpreter: a separate multiply and add); tests compare across them with a tolerance
        if op is Ops.MULACC:
            return float(np.float64(truncate(dtype, float(v[0] * v[1]))) + v[2])
    raise NotImplementedError(f"no float semantics for {op}")


def exec_alu(op: Ops, dtype: DType, operands: tuple[Any, ...]) -> Any:
    """The value of `op(*operands)` as stored in `dtype` (a scalar dtype)."""
    if op is Ops.CMPLT:
        return operands[0] < operands[1]
    if op is Ops.CMPNE:
        return operands[0] != operands[1]
    if op is Ops.CMPEQ:
        return operands[0] == operands[1]
    if op is Ops.WHERE:
        return operands[1] if operands[0] else operands[2]
    if dtypes.is_float(dtype):
        return truncate(dtype, _float_alu(op, dtype, operands))
    if dtype is dtypes.bool:  # bool arithmetic: and/or/xor/max on 0/1, then back to bool
        if op in (Ops.AND, Ops.MUL):
            return bool(operands[0] and operands[1])
        if op in (Ops.OR, Ops.MAX, Ops.ADD):
            return bool(operands[0] or operands[1])
        if op in (Ops.XOR, Ops.CMPNE):
            return bool(operands[0]) != bool(operands[1])
        raise NotImplementedError(f"no bool semantics for {op}")
    return truncate(dtype, _int_alu(op, dtype, tuple(int(a) for a in operands)))


def cast_value(value: Any, to: DType) -> Any:
    """A C-style value conversion (float -> int truncates toward zero, then wraps)."""
    if to is dtypes.bool:
        return value != 0
    if dtypes.is_int(to) and isinstance(value, float):
        if not math.isfinite(value):
            raise UndefinedOp(f"cast of {value} to {to!r}")
        return truncate(to, math.trunc(value))
    return truncate(to, value)


def _bits_of(value: Any, dt: DType) -> int:
    if dt.np is not None:
        return int(np.array([value], dtype=dt.np).view(f"u{dt.itemsize}")[0])
    if dtypes.is_float(dt):  # bfloat16, fp8: storage bits from the dtype module's codec
        return int(np.asarray(dtypes.float_to_bits(value, dt)).reshape(-1)[0])
    raise NotImplementedError(f"no bit layout for {dt!r}")


def bitcast_value(value: Any, frm: DType, to: DType) -> Any:
    """Reinterpret the bits of `value` (a `frm`) as a `to` of the same size."""
    if frm.itemsize != to.itemsize:
        raise UndefinedOp(f"bitcast between sizes {frm.itemsize} and {to.itemsize}")
    bits = _bits_of(value, frm)
    if to.np is not None:
        return to.np.type(np.array([bits], dtype=f"u{to.itemsize}").view(to.np)[0]).item()
    if dtypes.is_float(to):
        return float(np.asarray(dtypes.bits_to_float(np.array([bits], dtype=f"u{to.itemsize}"), to)).reshape(-1)[0])
    raise NotImplementedError(f"no bit layout for {to!r}")

"""The PYTHON device: the reference interpreter of kernels, in numpy. Slow, exact, no compiler.

In:  bytes from `tgcore.renderer.python.PythonRenderer`: a pickled kernel SINK in REDUCE form, i.e.
     `SINK(STORE(INDEX(PARAM k, index[, gate]), value), ...)` with loops as RANGE uops and reductions
     as `REDUCE(value, *ranges)` (see `tgcore.schedule.kernelize`).
Out: `PythonProgram(name, lib)`, called like `CPUProgram`: `prg(*bufs, vals=(), threads=1, wait=False)`
     with allocator handles in PARAM slot order and DEFINE_VAR values in the order of their names.

How it runs: every RANGE gets its own numpy axis (output ranges first, then the ranges reductions
close), so a node that depends on ranges {r0, r2} is an array broadcastable to the whole loop shape.
Nodes are evaluated once each in graph order; REDUCE is a numpy reduction over its ranges' axes
(kept as size-1 axes). A kernel whose loop space has more than `CHUNK_ELEMENTS` iterations runs in
chunks of its biggest output range; nodes that do not depend on that range are computed once and shared
by the chunks, so memory stays bounded for matmul-like kernels. (A kernel with no output range, e.g. a
full reduction, is evaluated in one piece.)

Semantics (the meaning every backend is checked against):
- Integers are C's: + - * wrap around; IDIV truncates toward zero, MOD takes the dividend's sign.
  Where C is undefined we choose: x IDIV 0 = 0 and x MOD 0 = 0; INT_MIN IDIV -1 = INT_MIN (wraps),
  INT_MIN MOD -1 = 0. SHR is arithmetic for signed, logical for unsigned. A shift by a negative amount
  or by the bit width or more gives what shifting one bit at a time would: SHL -> 0, SHR -> 0 or -1
  (the sign, for signed values). The Tensor's `//` and `%` round toward minus infinity (Python, torch), built
  from IDIV and MOD, so x // 0 = 0 and x % 0 = 0 there too; range analysis keeps a divisor that may be 0.
- Comparisons give bool and follow IEEE: with a NaN operand CMPLT and CMPEQ are false and CMPNE is true (the
  Tensor's `<=` and `>=` on floats are `a < b | a == b`, so they are false too). MAX propagates NaN (numpy
  `maximum`); so do the Tensor's `min`, `minimum` and `clip`, and `argmax`/`argmin` return the index of the first
  NaN when there is one, else of the first extreme. Casts to bool are `!= 0` (NaN -> True).
- bool: ADD is OR, MUL is AND, AND/OR/XOR are logical, MAX is OR; no other op is defined on bool (the Tensor's
  `-x` of a bool is `logical_not`). At the Tensor level (like torch) `//`, `%`, `<<` and `>>` of two bools and
  `&`, `|`, `^`, `<<`, `>>` of floats are TypeErrors; a bool with a Python int promotes to int32 (the default
  int), with a float to float32.
- Compiled backends implement exactly this: the C renderer does signed + - * and negation that may overflow in
  unsigned arithmetic (C leaves signed overflow undefined) and guards // and % against 0 and INT_MIN / -1.
- Floats: float64 ops run in float64. For float32, + - * / sqrt reciprocal neg trunc max run in
  float32 (IEEE correctly rounded). Every other float op (and every op on float16, bfloat16, fp8) is
  computed in float64 and rounded once to the result dtype, which is what `tgcore.uop.alu` (constant
  folding) does; for + - * / sqrt this equals computing in float32 and rounding. MULACC rounds twice
  (a*b, then + c), like a separate multiply and add. Float MULACC and a*b + c may round once on a
  compiled backend (it contracts them to an FMA, like C compilers do by default) or twice (here and in
  constant folding); tests comparing backends with this device use a tolerance there.
- float -> int casts truncate toward zero, then wrap modulo 2**bits (like `tgcore.dtype.truncate`);
  NaN and +-inf give 0. int -> narrow float casts round once (no double rounding through float32).
- BITCAST reinterprets storage bits (bfloat16 NaN payloads survive; fp8 NaNs become the canonical NaN).
- A gated load reads nothing where its gate is false (the index is clipped) and yields its alternative
  value there (0 when none is given). An ungated out-of-bounds access raises IndexError.
- Reductions: ADD/MUL/MAX over the node's dtype (ints wrap, so sums are exact). float16, bfloat16 and
  fp8 ADD/MUL reductions accumulate in float32 and round the result once; float32 sums use numpy's
  pairwise summation (within float tolerance of a sequential sum). A reduction over an empty range
  gives the identity (0, 1, or the dtype's minimum). A float sum starts from +0.0, however it is lowered (over
  size-1 axes, unrolled, vectorized), so a sum of -0.0s is +0.0 (numpy's and torch's `sum`). The Tensor's
  sums, `cumsum`, `mean` and `matmul` of float16/bfloat16 (also with an explicit `dtype=float16`) cast to
  float32 first and round the result once, so every backend accumulates in float32 (like torch); ints and
  bools sum in int64 (uint64 for unsigned ints).
  The Tensor's `min` of signed ints is `~max(~x)` (exact at the type's minimum): over an empty range it gives
  the dtype's maximum.

bfloat16 values are held as float32 arrays (exactly) and stored as uint16 bit patterns; fp8 likewise
(uint8). Vector dtypes and the linear/accumulator form are not supported.
"""

from __future__ import annotations

import ctypes
import math
import pickle
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tgcore.dtype import DType, PtrDType, dtypes
from tgcore.runtime.cpu import CPUAllocator
from tgcore.runtime.device import Device
from tgcore.uop import AxisArg, Ops, UOp

__all__ = ["PythonDevice", "PythonProgram", "CHUNK_ELEMENTS"]

# most loop iterations evaluated at once; bigger kernels are chunked along their outermost output range
CHUNK_ELEMENTS = 1 << 23

_NARROW_FLOATS = ("bfloat16", "fp8e4m3", "fp8e5m2")  # held as float32 arrays, stored as raw bits
_F32_NATIVE = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC,
                         Ops.MAX})


class KernelError(RuntimeError):
    """The kernel cannot be interpreted (unsupported node, bad arguments)."""


# ------------------------------------------------------------------------------------------ dtypes

def compute_dtype(dt: DType) -> np.dtype:
    """The numpy dtype of the arrays that hold values of `dt` while interpreting."""
    if dt.count != 1 or isinstance(dt, PtrDType):
        raise KernelError(f"PYTHON device: vector or pointer value dtype {dt!r} is not supported")
    if dt.np is not None:
        return dt.np
    if dt.name in _NARROW_FLOATS:
        return np.dtype(np.float32)
    raise KernelError(f"PYTHON device: no numpy representation for {dt!r}")


def storage_dtype(dt: DType) -> np.dtype:
    """The numpy dtype of a buffer of `dt` in memory (raw bits for bfloat16 and fp8)."""
    if dt.np is not None:
        return dt.np
    if dt.name == "bfloat16":
        return np.dtype(np.uint16)
    if dt.name in _NARROW_FLOATS:
        return np.dtype(np.uint8)
    raise KernelError(f"PYTHON device: no storage layout for {dt!r}")


def from_storage(bits: np.ndarray, dt: DType) -> np.ndarray:
    """Stored elements -> their compute representation."""
    if dt.np is not None:
        return bits
    if dt.name == "bfloat16":  # bfloat16 is the top half of a float32: exact, NaN payloads kept
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return dtypes.bits_to_float(bits, dt)


def to_storage(x: np.ndarray, dt: DType) -> np.ndarray:
    """Compute representation (exactly representable values) -> stored elements."""
    if dt.np is not None:
        return x
    if dt.name == "bfloat16":
        return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return dtypes.float_to_bits(x, dt)


def round_float(x: np.ndarray, dt: DType) -> np.ndarray:
    """Float values (float32 or float64) rounded once, to nearest even, to the float dtype `dt`."""
    if dt.np is not None:
        return x.astype(dt.np, copy=False)
    return from_storage(dtypes.float_to_bits(x, dt), dt)


def _int_to_float64_for_narrow(x: np.ndarray) -> np.ndarray:
    """64-bit ints as float64 rounded "to odd" (a sticky bit below bit 17), so that a second rounding to
    a format of <= 24 significant bits is the correct single rounding of the integer."""
    if x.dtype.itemsize < 8:
        return x.astype(np.float64)
    signed = x.dtype.kind == "i"
    negative = x < 0 if signed else np.zeros(x.shape, dtype=bool)
    magnitude = np.where(negative, np.negative(x), x).astype(np.uint64)  # -INT64_MIN wraps to 2**63: right
    low = np.uint64((1 << 17) - 1)
    sticky = (magnitude & low != 0).astype(np.uint64) << np.uint64(16)
    big = magnitude >= np.uint64(1 << 41)
    magnitude = np.where(big, (magnitude & ~low) | sticky, magnitude)  # at most 48 significant bits: exact
    f = magnitude.astype(np.float64)
    return np.where(negative, -f, f)


def _float_to_int(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """C-style truncation toward zero, wrapping modulo 2**bits; NaN and +-inf give 0."""
    f = x.astype(np.float64)
    t = np.trunc(np.where(np.isfinite(f), f, 0.0))
    if np.any(np.abs(t) >= 2.0**63):
        t = np.fmod(t, 2.0**64)
        t = np.where(t >= 2.0**63, t - 2.0**64, t)  # both exact (Sterbenz)
        t = np.where(t < -(2.0**63), t + 2.0**64, t)
    return t.astype(np.int64).astype(to)


def cast(x: np.ndarray, frm: DType, to: DType) -> np.ndarray:
    """The CAST op: a C-style value conversion (see the module docstring)."""
    if to is dtypes.bool:
        return x != 0
    target = compute_dtype(to)
    if dtypes.is_int(to):
        if dtypes.is_float(frm):
            return _float_to_int(x, target)
        return x.astype(target)
    if not dtypes.is_float(to):
        raise KernelError(f"PYTHON device: cannot cast {frm!r} to {to!r}")
    if dtypes.is_float(frm):  # numpy rounds float64 -> float32/float16 directly (no double rounding)
        return x.astype(target) if to.np is not None else round_float(x.astype(np.float64), to)
    # int or bool source
    if to in (dtypes.float64, dtypes.float32):
        return x.astype(target)
    return round_float(_int_to_float64_for_narrow(x), to)


def bitcast(x: np.ndarray, frm: DType, to: DType) -> np.ndarray:
    """The BITCAST op: the same storage bits read as another dtype of the same size."""
    if frm.itemsize != to.itemsize:
        raise KernelError(f"PYTHON device: bitcast from {frm!r} to {to!r} changes the size")
    bits = to_storage(x, frm).view(storage_dtype(to))
    if to is dtypes.bool:
        return bits.view(np.uint8) != 0
    return from_storage(bits, to)


# ------------------------------------------------------------------------------------------ ALU

def _c_idiv_mod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C quotient and remainder; both are 0 where b == 0."""
    zero = b == 0
    safe = np.where(zero, np.ones((), dtype=b.dtype), b)
    rem = np.fmod(a, safe)  # integer fmod is C's %: the sign of the dividend
    quo = np.floor_divide(a - rem, safe)  # an exact division, so floor == trunc
    return np.where(zero, 0, quo).astype(a.dtype), np.where(zero, 0, rem).astype(a.dtype)


def _shift(op: Ops, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = 8 * a.dtype.itemsize
    amount = b.astype(np.int64)  # huge unsigned amounts become negative: out of range either way
    valid = (amount >= 0) & (amount < bits)
    safe = np.where(valid, amount, 0).astype(a.dtype)
    if op is Ops.SHL:
        return np.where(valid, np.left_shift(a, safe), np.zeros((), dtype=a.dtype))
    fill = np.where(a < 0, -1, 0).astype(a.dtype) if a.dtype.kind == "i" else np.zeros((), dtype=a.dtype)
    return np.where(valid, np.right_shift(a, safe), fill)


_FLOAT_FNS: dict[Ops, Callable[..., np.ndarray]] = {
    Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt, Ops.RECIPROCAL: np.reciprocal,
    Ops.NEG: np.negative, Ops.TRUNC: np.trunc, Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply,
    Ops.FDIV: np.divide, Ops.POW: np.power, Ops.MAX: np.maximum,
}
_INT_FNS: dict[Ops, Callable[..., np.ndarray]] = {
    Ops.NEG: np.negative, Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
    Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
}
_BOOL_FNS: dict[Ops, Callable[..., np.ndarray]] = {
    Ops.AND: np.logical_and, Ops.MUL: np.logical_and, Ops.OR: np.logical_or, Ops.ADD: np.logical_or,
    Ops.MAX: np.logical_or, Ops.XOR: np.logical_xor,
}
_COMPARE: dict[Ops, Callable[..., np.ndarray]] = {Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal,
                                                  Ops.CMPEQ: np.equal}


def _float_alu(op: Ops, dt: DType, xs: list[np.ndarray]) -> np.ndarray:
    if op is Ops.MULACC:
        return _float_alu(Ops.ADD, dt, [_float_alu(Ops.MUL, dt, xs[:2]), xs[2]])
    fn = _FLOAT_FNS.get(op)
    if fn is None:
        raise KernelError(f"PYTHON device: {op} is not defined on {dt!r}")
    if dt is dtypes.float64 or (dt is dtypes.float32 and op in _F32_NATIVE):
        return fn(*xs)
    return round_float(fn(*(x.astype(np.float64) for x in xs)), dt)


def _int_alu(op: Ops, dt: DType, xs: list[np.ndarray]) -> np.ndarray:
    if op in _INT_FNS:
        return _INT_FNS[op](*xs)
    if op is Ops.IDIV:
        return _c_idiv_mod(xs[0], xs[1])[0]
    if op is Ops.MOD:
        return _c_idiv_mod(xs[0], xs[1])[1]
    if op in (Ops.SHL, Ops.SHR):
        return _shift(op, xs[0], xs[1])
    if op is Ops.MULACC:
        return xs[0] * xs[1] + xs[2]
    if op is Ops.TRUNC:
        return xs[0]
    raise KernelError(f"PYTHON device: {op} is not defined on {dt!r}")


def alu(op: Ops, dt: DType, xs: list[np.ndarray]) -> np.ndarray:
    """An ALU op on arrays in compute representation; `dt` is the result dtype."""
    if op in _COMPARE:
        return _COMPARE[op](xs[0], xs[1])
    if op is Ops.WHERE:
        return np.where(xs[0], xs[1], xs[2])
    if dtypes.is_float(dt):
        out = _float_alu(op, dt, xs)
    elif dt is dtypes.bool:
        if op not in _BOOL_FNS:
            raise KernelError(f"PYTHON device: {op} is not defined on bool")
        out = _BOOL_FNS[op](*xs)
    else:
        out = _int_alu(op, dt, xs)
    return out.astype(compute_dtype(dt), copy=False)


def reduce(op: Ops, dt: DType, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """REDUCE over `axes` (kept as size-1 axes); `x` is already broadcast along them."""
    held = compute_dtype(dt)
    if op is Ops.MAX:
        if dt is dtypes.bool:
            return np.logical_or.reduce(x, axis=axes, keepdims=True)
        initial = -np.inf if dtypes.is_float(dt) else np.iinfo(held).min
        return np.maximum.reduce(x, axis=axes, keepdims=True, initial=held.type(initial))
    if op not in (Ops.ADD, Ops.MUL):
        raise KernelError(f"PYTHON device: no reduction {op}")
    if dt is dtypes.bool:
        logical = np.logical_or if op is Ops.ADD else np.logical_and
        return logical.reduce(x, axis=axes, keepdims=True)
    ufunc = np.add if op is Ops.ADD else np.multiply
    if dtypes.is_float(dt) and dt not in (dtypes.float32, dtypes.float64):
        return round_float(ufunc.reduce(x, axis=axes, keepdims=True, dtype=np.float32), dt)
    return ufunc.reduce(x, axis=axes, keepdims=True, dtype=held)


# ------------------------------------------------------------------------------------------ the interpreter

class _Index:
    """An evaluated INDEX: which buffer, the element index array, and the gate array (or None)."""

    __slots__ = ("param", "idx", "gate")

    def __init__(self, param: UOp, idx: np.ndarray, gate: np.ndarray | None):
        self.param, self.idx, self.gate = param, idx, gate


class _Split:
    """Nodes that depend on the chunked range are evaluated per chunk (their arrays freed after their last
    user), the others once, shared by all chunks."""

    def __init__(self, order: list[UOp], chunked: UOp | None):
        self.chunked = chunked
        varies: set[UOp] = set()
        if chunked is not None:
            for n in order:
                if n is chunked or any(s in varies for s in n.src):
                    varies.add(n)
        self.once = [n for n in order if n not in varies]
        self.per_chunk = [n for n in order if n in varies]
        last_use: dict[UOp, int] = {}
        for i, n in enumerate(self.per_chunk):
            for s in n.src:
                if s in varies:
                    last_use[s] = i
        self.dies_after: list[list[UOp]] = [[] for _ in self.per_chunk]
        for n, i in last_use.items():
            self.dies_after[i].append(n)


class Kernel:
    """A kernel SINK prepared for interpretation: ranges mapped to axes, evaluation order, lifetimes."""

    def __init__(self, name: str, sink: UOp):
        self.name = name
        self.sink = sink
        order = list(sink.toposort)
        for n in order:
            if n.op in (Ops.DEFINE_REG, Ops.END, Ops.VCONST, Ops.VECTORIZE, Ops.GEP) or (
                    n.dtype.count > 1 and not isinstance(n.dtype, PtrDType)):
                raise KernelError(f"PYTHON device: kernel {name!r} has a {n.op} node ({n.dtype!r}); "
                                  "it interprets the scalar REDUCE form only (renderer linear = False)")
            if n.op is Ops.RANGE and not isinstance(n.arg, AxisArg):
                raise KernelError(f"PYTHON device: kernel {name!r} has a loop whose arg is {n.arg!r}, not an AxisArg")
        closed = {r for n in order if n.op is Ops.REDUCE for r in n.src[1:]}
        ranges = [n for n in order if n.op is Ops.RANGE]
        # each group in loop nesting order: threads, then outputs by axis; the reductions by axis
        outer = sorted((r for r in ranges if r not in closed), key=lambda r: r.arg.nesting_key())
        inner = sorted((r for r in ranges if r in closed), key=lambda r: r.arg.nesting_key())
        self.ranges = outer + inner
        self.axis = {r: i for i, r in enumerate(self.ranges)}
        self.ndim = len(self.ranges)
        self.params = sorted({n.arg: n for n in order if n.op is Ops.PARAM}.items())
        self.var_names = sorted({n.arg[0] for n in order if n.op is Ops.DEFINE_VAR})
        self.outer = outer
        self.order = order
        self._splits: dict[UOp | None, _Split] = {}

    def split(self, chunked: UOp | None) -> _Split:
        """The evaluation plan when chunking along the output range `chunked` (None: no chunking)."""
        plan = self._splits.get(chunked)
        if plan is None:
            plan = self._splits[chunked] = _Split(self.order, chunked)
        return plan

    def run(self, handles: tuple[Any, ...], vals: tuple[int, ...]) -> None:
        """Run the kernel on these buffers (PARAM slot order) and DEFINE_VAR values (name order)."""
        if len(handles) != len(self.params):
            raise KernelError(f"kernel {self.name!r} takes {len(self.params)} buffers, got {len(handles)}")
        if len(vals) != len(self.var_names):
            raise KernelError(f"kernel {self.name!r} takes {len(self.var_names)} values "
                              f"({', '.join(self.var_names)}), got {len(vals)}")
        if [slot for slot, _ in self.params] != list(range(len(self.params))):
            raise KernelError(f"kernel {self.name!r}: PARAM slots {[s for s, _ in self.params]} are not 0..n-1")
        memory = {p: _as_array(h, p.dtype) for (_, p), h in zip(self.params, handles, strict=True)}
        _Run(self, memory, dict(zip(self.var_names, vals, strict=True))).go()


class _Run:
    """One call of a kernel: the buffers, the variable values and the arrays of evaluated nodes."""

    def __init__(self, kernel: Kernel, memory: dict[UOp, np.ndarray], values: dict[str, int]):
        self.k, self.memory, self.values = kernel, memory, values
        self.name, self.ndim, self.axis = kernel.name, kernel.ndim, kernel.axis

    def go(self) -> None:
        k = self.k
        env: dict[UOp, Any] = {}
        sizes = {r: self._range_size(r, env) for r in k.ranges}
        total_elements = math.prod(sizes.values())
        # chunk along the biggest output range when the whole loop space is too big at once
        chunked = max(k.outer, key=lambda r: sizes[r]) if k.outer and total_elements > CHUNK_ELEMENTS else None
        plan = k.split(chunked)
        for r in k.ranges:
            env[r] = self._arange(r, 0, sizes[r] if r is not chunked else 1)  # for `chunked`: a stand-in
        self._evaluate(plan.once, env, None)  # `once` nodes never read the chunked range
        if chunked is None:
            return
        total = sizes[chunked]
        per_row = total_elements // total if total else 0
        step = max(1, CHUNK_ELEMENTS // max(1, per_row))
        for start in range(0, total, step):
            chunk_env = dict(env)
            chunk_env[chunked] = self._arange(chunked, start, min(total, start + step))
            self._evaluate(plan.per_chunk, chunk_env, plan.dies_after)

    def _range_size(self, r: UOp, env: dict[UOp, Any]) -> int:
        end = r.src[0]
        self._evaluate([n for n in end.toposort if n not in env], env, None)
        return max(0, int(np.asarray(env[end]).reshape(-1)[0]))

    def _arange(self, r: UOp, start: int, stop: int) -> np.ndarray:
        shape = [1] * self.ndim
        shape[self.axis[r]] = stop - start
        return np.arange(start, stop, dtype=compute_dtype(r.dtype)).reshape(shape)

    def _scalar(self, value: Any, dt: DType) -> np.ndarray:
        return np.array(value).astype(compute_dtype(dt)).reshape((1,) * self.ndim)

    def _evaluate(self, nodes: list[UOp], env: dict[UOp, Any], dies_after: list[list[UOp]] | None) -> None:
        with np.errstate(all="ignore"):
            for i, n in enumerate(nodes):
                if n not in env:
                    env[n] = self._node(n, env)
                if dies_after is not None:
                    for dead in dies_after[i]:
                        env.pop(dead, None)

    def _node(self, n: UOp, env: dict[UOp, Any]) -> Any:
        op = n.op
        if op in _ALU_OPS:
            return alu(op, n.dtype, [env[s] for s in n.src])
        if op is Ops.CONST:
            return self._scalar(n.arg, n.dtype)
        if op is Ops.DEFINE_VAR:
            name = n.arg[0]
            return self._scalar(self.values[name], n.dtype)
        if op is Ops.CAST:
            return cast(env[n.src[0]], n.src[0].dtype, n.dtype)
        if op is Ops.BITCAST:
            return bitcast(env[n.src[0]], n.src[0].dtype, n.dtype)
        if op is Ops.PARAM:
            return self.memory[n]
        if op is Ops.INDEX:
            return self._index(n, env)
        if op is Ops.LOAD:
            return self._load(n, env)
        if op is Ops.STORE:
            self._store(n, env)
            return None
        if op is Ops.REDUCE:
            return self._reduce(n, env)
        if op is Ops.AFTER:
            return env[n.src[0]]
        if op in (Ops.SINK, Ops.GROUP, Ops.NOOP):
            return None
        if op is Ops.RANGE:
            raise KernelError(f"kernel {self.name!r}: a loop bound depends on another loop ({n.render()})")
        raise KernelError(f"PYTHON device: kernel {self.name!r} has a {op} node, which it cannot interpret")

    def _index(self, n: UOp, env: dict[UOp, Any]) -> _Index:
        buf = n.src[0]
        while buf.op is Ops.AFTER:
            buf = buf.src[0]
        rest = n.src[1:]
        gate = None
        if len(rest) == 2 and rest[1].dtype is dtypes.bool:
            gate = env[rest[1]]
            rest = rest[:1]
        if len(rest) != 1 or buf.op is not Ops.PARAM:
            raise KernelError(f"kernel {self.name!r}: INDEX must be (PARAM, linear index[, gate]), got "
                              f"({', '.join(s.op.name for s in n.src)})")
        return _Index(buf, env[rest[0]], gate)

    def _checked(self, index: _Index, where: str) -> tuple[np.ndarray, np.ndarray | None]:
        """The index array, clipped to 0 where gated off, after a bounds check of the live elements."""
        idx, gate = index.idx, index.gate
        size = self.memory[index.param].shape[0]
        if gate is not None:
            idx, gate = np.broadcast_arrays(idx, gate)
            idx = np.where(gate, idx, np.zeros((), dtype=idx.dtype))
        if idx.size and (idx.min() < 0 or idx.max() >= size):
            bad = idx[(idx < 0) | (idx >= size)].reshape(-1)[0]
            raise IndexError(f"kernel {self.name!r}: {where} of buffer {index.param.arg} at index {bad}, "
                             f"outside its {size} elements")
        return idx, gate

    def _load(self, n: UOp, env: dict[UOp, Any]) -> np.ndarray:
        index: _Index = env[n.src[0]]
        idx, gate = self._checked(index, "load")
        element = _element_dtype(index.param.dtype)
        if n.dtype is not element:
            raise KernelError(f"kernel {self.name!r}: LOAD of {n.dtype!r} from a buffer of {element!r}")
        values = from_storage(self.memory[index.param][idx], element)
        if gate is None:
            return values
        alt = env[n.src[1]] if len(n.src) > 1 else np.zeros((), dtype=values.dtype)
        return np.where(gate, values, alt)

    def _store(self, n: UOp, env: dict[UOp, Any]) -> None:
        index: _Index = env[n.src[0]]
        element = _element_dtype(index.param.dtype)
        if n.src[1].dtype is not element:
            raise KernelError(f"kernel {self.name!r}: STORE of {n.src[1].dtype!r} into a buffer of {element!r}")
        value = to_storage(np.asarray(env[n.src[1]]), element)
        idx, gate = self._checked(index, "store")
        idx, value = np.broadcast_arrays(idx, value)
        if gate is not None:
            gate = np.broadcast_to(gate, idx.shape)
            idx, value = idx[gate], value[gate]
        self.memory[index.param][idx.reshape(-1)] = value.reshape(-1)

    def _reduce(self, n: UOp, env: dict[UOp, Any]) -> np.ndarray:
        value = env[n.src[0]]
        axes = tuple(self.axis[r] for r in n.src[1:])
        shape = list(value.shape) + [1] * (self.ndim - value.ndim)
        for r, a in zip(n.src[1:], axes, strict=True):
            shape[a] = env[r].shape[a]  # a value that does not use a range still counts once per iteration
        value = np.broadcast_to(value, tuple(shape))
        return reduce(n.arg, n.dtype, value, axes)


_ALU_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC, Ops.ADD, Ops.SUB,
                      Ops.MUL, Ops.IDIV, Ops.MOD, Ops.FDIV, Ops.POW, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
                      Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.WHERE, Ops.MULACC})


def _element_dtype(ptr: DType) -> DType:
    return ptr.base if isinstance(ptr, PtrDType) else ptr


def _as_array(handle: Any, ptr: DType) -> np.ndarray:
    """A writable numpy view of a buffer handle (allocator handle or raw address) for a PARAM."""
    base = _element_dtype(ptr)
    store = storage_dtype(base)
    count = ptr.size if isinstance(ptr, PtrDType) else -1
    if isinstance(handle, int):
        if count < 0:
            raise KernelError("a raw address needs a PARAM with a known size")
        handle = (ctypes.c_uint8 * (count * store.itemsize)).from_address(handle)
    mem = memoryview(handle).cast("B")
    available = mem.nbytes // store.itemsize
    if count < 0:
        count = available
    if count > available:
        raise KernelError(f"buffer of {mem.nbytes} bytes is too small for {count} x {base!r}")
    return np.frombuffer(mem, dtype=store, count=count)


# ------------------------------------------------------------------------------------------ program and device

class PythonProgram:
    """`PythonProgram(name, lib)`: lib is a pickled kernel SINK (from `PythonRenderer`).

    `prg(*bufs, vals=(), threads=1, wait=False)`: bufs are allocator handles (or raw addresses) in PARAM
    slot order, vals the DEFINE_VAR values in the order of their names. `threads` is ignored. Returns the
    elapsed seconds if wait, else None.
    """

    def __init__(self, name: str, lib: bytes):
        self.name = name
        sink = pickle.loads(lib)  # our own renderer's output: the kernel graph
        if not isinstance(sink, UOp) or sink.op is not Ops.SINK:
            raise KernelError(f"PYTHON program {name!r}: lib is not a pickled kernel SINK")
        self.kernel = Kernel(name, sink)

    def __call__(self, *bufs: Any, vals: tuple[int, ...] = (), threads: int = 1, wait: bool = False) -> float | None:
        start = time.perf_counter()
        self.kernel.run(bufs, tuple(vals))
        return time.perf_counter() - start if wait else None

    def __repr__(self) -> str:
        return f"<PythonProgram {self.name}>"


class PythonDevice(Device):
    """Host memory (the CPU allocator) and kernels interpreted by `PythonProgram`."""

    def __init__(self, name: str = "PYTHON", variant: str | None = None):
        super().__init__(name, variant, allocator=CPUAllocator(), program=PythonProgram)
        self.threads = 1

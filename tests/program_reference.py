"""The reference for tests/test_program_fuzz.py: every op of a random program computed in numpy from the semantics
`tgcore.runtime.python`'s docstring states (torch's where it is silent), with no tgcore code involved.

In:  reference values (`Ref`: array, dtype name, and for floats that are not deterministic an error bound).
Out: the op's `Ref`; `mismatch(got, ref)` says how a device's array differs from one, or None.

How values compare:
- ints and bools exactly (computed with Python ints, wrapped to the dtype);
- a float is *deterministic* when every step to it is exact or correctly rounded (+ - * / sqrt, casts, floor,
  reductions and products whose sums are exact in any order): compared exactly (NaN equals NaN, -0.0 equals 0.0);
- otherwise it carries a per-element error bound built from the documented ulp bounds: each transcendental (exp,
  exp2, sigmoid) <= ULP_TRANSCENDENTAL ulp of float32, one extra ulp of the result dtype per rounding, sums
  reordered <= n * 2**-24 * sum|x| (float32 accumulators), and products that may contract into an FMA one ulp.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

ULP_TRANSCENDENTAL = 4  # float32 exp/exp2 (tests/test_tensor_math.py); a composite (sigmoid) gets two of them

INTS = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
        "uint64": np.uint64}
FLOATS = {"float16": np.float16, "float32": np.float32}
NP = {**INTS, **FLOATS, "bool": np.bool_}
INPUT_DTYPES = ["float32", "float16", "int64", "int32", "int8", "uint8", "bool"]
FLOAT_ORDER = ["float16", "float32"]


# ------------------------------------------------------------------------------------------------ dtypes

def is_float(dt: str) -> bool:
    return dt in FLOATS


def is_int(dt: str) -> bool:
    return dt in INTS


def bits(dt: str) -> int:
    return np.dtype(NP[dt]).itemsize * 8


def int_range(dt: str) -> tuple[int, int]:
    info = np.iinfo(NP[dt])
    return int(info.min), int(info.max)


def promote(a: str, b: str) -> str:
    """Type promotion of two tensors (torch's for these dtypes): bool < ints < floats; a signed and an unsigned
    int meet in the smallest signed type holding both; any float beats any int. uint64 (from sums of unsigned
    ints; torch has no such promotion) follows tgcore's lattice: with a signed int or a float16 it gives float32."""
    if a == b:
        return a
    if a == "bool" or b == "bool":
        return b if a == "bool" else a
    if is_float(a) or is_float(b):
        if is_float(a) and is_float(b):
            return max(a, b, key=FLOAT_ORDER.index)
        if "uint64" in (a, b):
            return "float32"  # tgcore's lattice: uint64 promotes to float32 only (torch has no uint64 promotion)
        return a if is_float(a) else b
    if "uint64" in (a, b) and (a.startswith("int") or b.startswith("int")):
        return "float32"  # tgcore's lattice: no int holds both
    sa, sb = a.startswith("int"), b.startswith("int")
    if sa == sb:
        return max(a, b, key=bits)
    signed, unsigned = (a, b) if sa else (b, a)
    need = max(bits(signed), 2 * bits(unsigned))
    return f"int{min(64, need)}"


def scalar_dtype(t: str, s: Any) -> str:
    """A Python scalar meets a tensor: the tensor's dtype, except float scalar on an int or bool tensor -> float32
    and int scalar on a bool tensor -> int32 (tgcore's default float and int)."""
    if isinstance(s, float) and not is_float(t):
        return "float32"
    if isinstance(s, int) and not isinstance(s, bool) and t == "bool":
        return "int32"
    return t


# ------------------------------------------------------------------------------------------------ reference values

@dataclass
class Ref:
    """A reference value: its array, dtype name, and for floats that are not deterministic an error bound."""
    arr: np.ndarray
    dt: str
    err: np.ndarray | None = None  # per-element bound on |device - reference|; None: exact comparison

    @property
    def det(self) -> bool:
        return self.err is None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.arr.shape)


def wrap(vals: np.ndarray, dt: str) -> np.ndarray:
    """Python ints (object array) wrapped modulo 2**bits into dtype `dt`."""
    if dt == "bool":
        return np.asarray(vals != 0, dtype=np.bool_)
    lo, hi = int_range(dt)
    span = hi - lo + 1
    out = np.frompyfunc(lambda v: (int(v) - lo) % span + lo, 1, 1)(vals)
    return np.asarray(out, dtype=object).astype(NP[dt]).reshape(np.shape(vals))


def pyints(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(object) if a.dtype != np.bool_ else np.asarray(a).astype(np.int64).astype(object)


def f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def ulp(x: np.ndarray, dt: str) -> np.ndarray:
    """Spacing of the dtype's floats at |x| (as float64)."""
    with np.errstate(all="ignore"):
        return f64(np.spacing(np.abs(np.asarray(x, dtype=np.float64)).astype(NP[dt])))


def int_to_float(a: np.ndarray, dt: str) -> np.ndarray:
    """Ints rounded once to float dtype `dt` (double rounded "to odd" first so the second rounding is exact)."""
    def one(v: int) -> float:
        f = float(v)
        if int(f) != v and (np.float64(f).view(np.int64) & 1) == 0:
            f = float(np.nextafter(f, math.inf if v > int(f) else -math.inf))
        return f
    vals = np.frompyfunc(one, 1, 1)(pyints(a)) if a.size else np.zeros(a.shape)
    with np.errstate(over="ignore"):
        return np.asarray(vals, dtype=np.float64).astype(NP[dt]).reshape(a.shape)


def float_to_int(a: np.ndarray, dt: str) -> np.ndarray:
    """Truncate toward zero then wrap; NaN and +-inf give 0."""
    vals = np.frompyfunc(lambda v: int(v) if math.isfinite(v) else 0, 1, 1)(f64(a))
    return wrap(np.asarray(vals, dtype=object).reshape(a.shape), dt)


def cast(r: Ref, dt: str) -> Ref:
    if dt == r.dt:
        return r
    a = r.arr
    if dt == "bool":
        return Ref(a != 0, dt)
    if is_float(dt):
        with np.errstate(all="ignore"):
            out = int_to_float(a, dt) if not is_float(r.dt) else a.astype(NP[dt])
        err = None if r.det else r.err + ulp(out, dt)
        return Ref(out, dt, err)
    if is_float(r.dt):
        return Ref(float_to_int(a, dt), dt)
    return Ref(wrap(pyints(a), dt), dt)


def bcast(*refs: Ref) -> list[Ref]:
    arrs = np.broadcast_arrays(*[r.arr for r in refs])
    out = []
    for r, a in zip(refs, arrs, strict=True):
        err = None if r.err is None else np.broadcast_to(r.err, a.shape)
        out.append(Ref(np.array(a), r.dt, None if err is None else np.array(err)))
    return out


def errs(*refs: Ref) -> list[np.ndarray]:
    return [np.zeros(r.shape) if r.err is None else r.err for r in refs]


def int_binop(op: str, a: np.ndarray, b: np.ndarray, dt: str) -> np.ndarray:
    x, y = pyints(a), pyints(b)
    if op == "+":
        return wrap(x + y, dt)
    if op == "*":
        return wrap(x * y, dt)
    if op == "-":
        return wrap(x - y, dt)
    safe = np.where(y == 0, 1, y)
    if op == "//":  # floor division; x // 0 = 0
        return wrap(np.where(y == 0, 0, x // safe), dt)
    if op == "%":  # the divisor's sign; x % 0 = 0
        return wrap(np.where(y == 0, 0, x % safe), dt)
    n, signed = bits(dt), dt.startswith("int")
    if op == "<<":
        return wrap(np.frompyfunc(lambda v, s: v << s if 0 <= s < n else 0, 2, 1)(x, y), dt)
    if op == ">>":
        def shr(v: int, s: int) -> int:
            if 0 <= s < n:
                return v >> s if signed or v >= 0 else (v % (1 << n)) >> s
            return -1 if signed and v < 0 else 0
        return wrap(np.frompyfunc(shr, 2, 1)(x, y), dt)
    return wrap({"&": x & y, "|": x | y, "^": x ^ y}[op], dt)


def float_binop(op: str, a: Ref, b: Ref, dt: str) -> Ref:
    x, y, t = a.arr, b.arr, NP[dt]
    with np.errstate(all="ignore"):
        if op == "+":
            out = (x + y).astype(t)
        elif op == "-":
            out = (x - y).astype(t)
        elif op == "*":
            out = (x * y).astype(t)
        elif op == "/":
            out = (x / y).astype(t)
        elif op == "//":
            out = np.floor((x / y).astype(t))
        else:  # "%": a - floor(a / b) * b, the product may contract into an FMA with the subtraction
            q = np.floor((x / y).astype(t))
            p = (q * y).astype(t)
            out = (x - p).astype(t)
            exact = (f64(q) * f64(y) == f64(p)) | ~np.isfinite(f64(p))
            if not exact.all():
                return Ref(out, dt, np.where(exact, 0.0, ulp(p, dt)) + ulp(out, dt))
    if a.det and b.det:
        return Ref(out, dt)
    ea, eb = errs(a, b)
    ax, ay = np.abs(f64(x)), np.abs(f64(y))
    with np.errstate(all="ignore"):
        if op in "+-":
            err = ea + eb
        elif op == "*":
            err = ax * eb + ay * ea + ea * eb
        else:  # "/"
            err = np.where(ay > eb, (ea + np.abs(f64(out)) * eb) / (ay - eb), math.inf)
    return Ref(out, dt, err + ulp(out, dt))


def product_contracts(a: Ref, b: Ref, out: np.ndarray, dt: str) -> np.ndarray:
    """Where a float product is not exact in `dt` (so an FMA with a following add rounds differently)."""
    with np.errstate(all="ignore"):
        exact = (f64(a.arr) * f64(b.arr) == f64(out)) | ~np.isfinite(f64(out))
    return ~exact


def sum_is_exact(x: np.ndarray, axis: Any) -> np.ndarray | bool:
    """A float32-accumulated sum is the same in any order when every value is a multiple of 2**-g and the sum
    of magnitudes, in units of 2**-g, stays below 2**24 (no partial sum rounds)."""
    fin = np.where(np.isfinite(f64(x)), f64(x), 0.0)
    if fin.size == 0:
        return True
    for g in range(0, 40):
        scaled = fin * 2.0 ** g
        if np.all(scaled == np.round(scaled)):
            return np.sum(np.abs(scaled), axis=axis) < 2.0 ** 24
    return False


# ------------------------------------------------------------------------------------------------ the ops

def ref_binop(op: str, a: Ref, b: Ref | Any) -> Ref:
    """a OP b with promotion; b may be a Python scalar."""
    if isinstance(b, Ref):
        dt = promote(a.dt, b.dt)
        a, b = bcast(cast(a, dt), cast(b, dt))
    else:
        dt = scalar_dtype(a.dt, b)
        a = cast(a, dt)
        b = Ref(np.full(a.shape, b, dtype=NP[dt]), dt)
    if op in ("<", "<=", ">", ">=", "==", "!="):
        fn = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
              "!=": np.not_equal}[op]
        return Ref(fn(a.arr, b.arr), "bool")
    if op in ("max", "min"):
        fn = np.maximum if op == "max" else np.minimum
        ea, eb = errs(a, b)
        return Ref(fn(a.arr, b.arr), dt, None if a.det and b.det else np.maximum(ea, eb))
    if op == "/":
        fdt = dt if is_float(dt) else "float32"
        return float_binop("/", cast(a, fdt), cast(b, fdt), fdt)
    if dt == "bool":
        return Ref({"+": a.arr | b.arr, "*": a.arr & b.arr, "&": a.arr & b.arr, "|": a.arr | b.arr,
                    "^": a.arr ^ b.arr}[op], "bool")
    if is_float(dt):
        out = float_binop(op, a, b, dt)
        if op == "*":
            out.contracts = product_contracts(a, b, out.arr, dt)  # type: ignore[attr-defined]
        return out
    return Ref(int_binop(op, a.arr, b.arr, dt), dt)


def ref_add_after_product(op: str, a: Ref, b: Ref | Any) -> Ref:
    """+ / - whose operand is a fresh float product: where that product was rounded, an FMA may differ."""
    out = ref_binop(op, a, b)
    if not is_float(out.dt):
        return out
    extra = np.zeros(out.shape)
    for r in (a, b):
        m = getattr(r, "contracts", None) if isinstance(r, Ref) else None
        if m is not None and m.any():
            extra = extra + np.where(np.broadcast_to(m, out.shape), np.broadcast_to(ulp(r.arr, out.dt), out.shape), 0)
    if not extra.any():
        return out
    base = errs(out)[0]
    return Ref(out.arr, out.dt, base + extra + ulp(out.arr, out.dt))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) the way torch computes it in float32: exp(-x) beyond float32's range is inf, so x below
    about -88.7 gives 0 (float64 throughout would give a subnormal float32 there)."""
    e = np.exp(-x)
    return 1 / (1 + np.where(e > np.finfo(np.float32).max, np.inf, e))


UNARY_FLOAT = {"exp": np.exp, "exp2": np.exp2, "sigmoid": sigmoid}
DERIV_BOUND = {"exp": lambda x, e: np.abs(np.exp(x)) * np.expm1(e), "exp2": lambda x, e: np.exp2(x) * np.expm1(e),
               "sigmoid": lambda x, e: e / 4}


def ref_unary(op: str, a: Ref) -> Ref:
    if op == "neg":
        if a.dt == "bool":
            return Ref(~a.arr, "bool")
        if is_int(a.dt):
            return Ref(wrap(-pyints(a.arr), a.dt), a.dt)
        return Ref(-a.arr, a.dt, a.err)
    if op == "abs":
        if is_int(a.dt):
            return Ref(wrap(abs(pyints(a.arr)), a.dt), a.dt)
        return Ref(np.abs(a.arr), a.dt, a.err)
    if op == "relu":
        return Ref(np.where(a.arr > 0, a.arr, np.where(a.arr != a.arr, a.arr, np.zeros_like(a.arr))), a.dt, a.err)
    if op == "not":
        return Ref(a.arr == 0, "bool")
    if op == "invert":
        return Ref(~a.arr, a.dt)
    if op == "isnan":
        return Ref(np.isnan(a.arr), "bool")
    if op in ("floor", "trunc"):
        return Ref(np.floor(a.arr) if op == "floor" else np.trunc(a.arr), a.dt)
    dt = a.dt if is_float(a.dt) else "float32"
    x = cast(a, dt)
    with np.errstate(all="ignore"):
        if op == "sqrt":  # correctly rounded
            out = np.sqrt(x.arr)
            return Ref(out, dt, None if x.det else np.sqrt(x.err) + ulp(out, dt))
        exact = UNARY_FLOAT[op](f64(x.arr))
        out = exact.astype(NP[dt])
        k = ULP_TRANSCENDENTAL * (2 if op == "sigmoid" else 1)
        err = k * ulp(exact, "float32") + (ulp(out, dt) if dt != "float32" else 0)
        if not x.det:
            err = err + DERIV_BOUND[op](f64(x.arr), x.err)
    return Ref(out, dt, err)


def sum_dtype(dt: str) -> str:
    if dt == "bool" or is_int(dt):
        return "uint64" if dt.startswith("uint") else "int64"
    return dt


def float_sum(x: Ref, axis: Any, keepdim: bool, out_dt: str) -> Ref:
    """Sum accumulated in float32 (float16 inputs too), rounded once to `out_dt`."""
    v = f64(x.arr)
    with np.errstate(all="ignore"):
        total = np.sum(v, axis=axis, keepdims=keepdim)
        out = np.asarray(total).astype(np.float32).astype(NP[out_dt])
        exact = sum_is_exact(x.arr, axis)
        if keepdim and not isinstance(exact, bool):
            exact = np.expand_dims(exact, axis) if axis is not None else exact.reshape(out.shape)
        n = v.size // max(1, out.size)
        bound = np.sum(errs(x)[0], axis=axis, keepdims=keepdim) + \
            n * 2.0 ** -24 * np.sum(np.abs(np.where(np.isfinite(v), v, 0)), axis=axis, keepdims=keepdim) + \
            ulp(out, out_dt)
    if x.det and np.all(exact):
        return Ref(out, out_dt)
    return Ref(out, out_dt, np.where(exact, 0.0, bound) if x.det else bound)


def ref_sum(a: Ref, axis: Any, keepdim: bool) -> Ref:
    dt = sum_dtype(a.dt)
    if is_float(dt):
        return float_sum(a, axis, keepdim, dt)
    return Ref(wrap(np.sum(pyints(a.arr), axis=axis, keepdims=keepdim), dt).reshape(
        np.sum(np.zeros(a.shape), axis=axis, keepdims=keepdim).shape), dt)


def identity(dt: str, is_max: bool) -> Any:
    if dt == "bool":
        return not is_max
    if is_float(dt):
        return -math.inf if is_max else math.inf
    lo, hi = int_range(dt)
    return lo if is_max else hi


def ref_max(a: Ref, axis: Any, keepdim: bool, is_max: bool) -> Ref:
    """max/min propagate NaN; an empty range gives the identity (the dtype's lowest / highest value)."""
    fn = np.max if is_max else np.min
    arr = fn(a.arr, axis=axis, keepdims=keepdim, initial=identity(a.dt, is_max))
    err = None if a.det else np.max(a.err, axis=axis, keepdims=keepdim, initial=0.0)
    return Ref(np.asarray(arr, dtype=NP[a.dt]), a.dt, err)


def ref_argmax(a: Ref, axis: int | None, keepdim: bool, is_max: bool) -> Ref:
    """The first NaN, else the first extreme; int32."""
    x = a.arr.reshape(-1) if axis is None else a.arr
    ax = 0 if axis is None else axis
    key = x.astype(np.float64) if is_float(a.dt) else pyints(x) if is_int(a.dt) else x.astype(np.int64)
    if is_float(a.dt):
        nan = np.isnan(key)
        key = np.where(nan, math.inf if is_max else -math.inf, key)
        idx = np.where(nan.any(axis=ax), np.argmax(nan, axis=ax),
                       np.argmax(key, axis=ax) if is_max else np.argmin(key, axis=ax))
    else:
        idx = np.argmax(key, axis=ax) if is_max else np.argmin(key, axis=ax)
    idx = np.asarray(idx, dtype=np.int32)
    if keepdim:
        idx = idx.reshape((1,) * a.arr.ndim) if axis is None else np.expand_dims(idx, axis)
    return Ref(idx, "int32")


def ref_cumsum(a: Ref, axis: int) -> Ref:
    dt = sum_dtype(a.dt)
    if not is_float(dt):
        return Ref(wrap(np.cumsum(pyints(a.arr), axis=axis), dt).reshape(a.shape), dt)
    n = a.shape[axis]
    parts = [float_sum(Ref(np.take(a.arr, range(i + 1), axis=axis), a.dt,
                           None if a.det else np.take(a.err, range(i + 1), axis=axis)), axis, True, dt)
             for i in range(n)]
    if not parts:
        return Ref(a.arr.astype(NP[dt]), dt)
    arr = np.concatenate([p.arr for p in parts], axis=axis)
    if all(p.det for p in parts):
        return Ref(arr, dt)
    return Ref(arr, dt, np.concatenate(errs(*parts), axis=axis))


def ref_matmul(a: Ref, b: Ref) -> Ref:
    dt = promote(a.dt, b.dt)
    a, b = cast(a, dt), cast(b, dt)
    x = a.arr[None, :] if a.arr.ndim == 1 else a.arr
    y = b.arr[:, None] if b.arr.ndim == 1 else b.arr
    if is_int(dt):
        out = wrap(np.matmul(pyints(x), pyints(y)), dt)
    else:
        # float16 products and sums in float32 (like torch), rounded once; float32 products may contract (FMA)
        acc = "float32"
        ex, ey = errs(Ref(x, dt, None if a.det else (a.err[None, :] if a.err.ndim == 1 else a.err)),
                      Ref(y, dt, None if b.det else (b.err[:, None] if b.err.ndim == 1 else b.err)))
        with np.errstate(all="ignore"):
            p64 = f64(x)[..., :, None, :] * np.swapaxes(f64(y), -1, -2)[..., None, :, :]
            prods = p64.astype(np.float32)
            perr = np.abs(f64(x))[..., :, None, :] * np.swapaxes(ey, -1, -2)[..., None, :, :] + \
                np.swapaxes(np.abs(f64(y)), -1, -2)[..., None, :, :] * ex[..., :, None, :]
            rounded = (p64 != f64(prods)) & np.isfinite(p64)
            perr = perr + np.where(rounded, ulp(prods, acc), 0.0)
        det = a.det and b.det and not rounded.any()
        s = float_sum(Ref(prods, acc, None if det else perr), -1, False, acc)
        with np.errstate(over="ignore"):
            out = s.arr.astype(NP[dt])
        res = Ref(out, dt, None if s.det else s.err + (ulp(out, dt) if dt != acc else 0))
        if a.arr.ndim == 1:
            res = Ref(res.arr[..., 0, :], dt, None if res.det else res.err[..., 0, :])
        if b.arr.ndim == 1:
            res = Ref(res.arr[..., 0], dt, None if res.det else res.err[..., 0])
        return res
    if a.arr.ndim == 1:
        out = out[..., 0, :]
    if b.arr.ndim == 1:
        out = out[..., 0]
    return Ref(out, dt)


def ref_where(c: Ref, a: Ref | Any, b: Ref | Any) -> Ref:
    if isinstance(a, Ref) and isinstance(b, Ref):
        dt = promote(a.dt, b.dt)
        a, b = cast(a, dt), cast(b, dt)
    elif isinstance(a, Ref):
        dt = scalar_dtype(a.dt, b)
        a, b = cast(a, dt), Ref(np.array(b, dtype=NP[dt]), dt)
    else:
        assert isinstance(b, Ref)
        dt = scalar_dtype(b.dt, a)
        a, b = Ref(np.array(a, dtype=NP[dt]), dt), cast(b, dt)
    cond = c.arr != 0
    cc, aa, bb = bcast(Ref(cond, "bool"), a, b)
    arr = np.where(cc.arr, aa.arr, bb.arr)
    if aa.det and bb.det:
        return Ref(arr, dt)
    ea, eb = errs(aa, bb)
    return Ref(arr, dt, np.where(cc.arr, ea, eb))


def ref_clip(a: Ref, lo: Any, hi: Any) -> Ref:
    t = ref_where(ref_binop("<", a, lo), lo, a)
    return ref_where(ref_binop(">", t, hi), hi, t)


def movement(a: Ref, fn: Any) -> Ref:
    return Ref(np.array(fn(a.arr)), a.dt, None if a.det else np.array(fn(a.err)))


def mismatch(got: np.ndarray, ref: Ref) -> str | None:
    """Why `got` is not the reference value, or None."""
    want = ref.arr
    if got.shape != want.shape:
        return f"shape {got.shape}, reference {want.shape}"
    if got.dtype != np.dtype(NP[ref.dt]):
        return f"dtype {got.dtype}, reference {ref.dt}"
    if not is_float(ref.dt):
        bad = got != want
    else:
        g, w = f64(got), f64(want)
        both_nan = np.isnan(g) & np.isnan(w)
        if ref.det:
            bad = ~(both_nan | (g == w))
        else:
            with np.errstate(all="ignore"):
                huge = np.abs(w) > 0.5 * float(np.finfo(NP[ref.dt]).max)
                skip = ~np.isfinite(w) | ~np.isfinite(ref.err) | huge
                bad = ~skip & ~both_nan & ~(np.abs(g - w) <= ref.err)
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    extra = "" if ref.det else f" (bound {ref.err[idx]:.3g})"
    return f"{int(bad.sum())} of {bad.size} elements differ; first at {idx}: got {got[idx]!r}, " \
           f"reference {want[idx]!r}{extra}"

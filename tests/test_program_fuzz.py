"""Differential fuzzing: random small tensor programs on every device in ``TG_TEST_DEVICES`` against a numpy
reference written from the semantics `tgcore.runtime.python`'s docstring states (torch's where it is silent).

A program has 1-3 inputs (rank <= 4, empty and size-1 broadcast dims included; float32, float16, int64, int32,
int8, uint8, bool) and 2-8 steps among elementwise ops, casts, comparisons, ``where``, reductions, movement ops,
``//``, ``%``, matmul, ``cumsum`` and ``clip``; each step is one line of Python, so a program is its own
reproduction. Its last value (sometimes with an earlier one, realized together) is compared with the reference.

Values are compared as `program_reference` (next to this file) says: ints, bools and deterministic floats
exactly, other floats within a propagated ulp bound. Steps whose result jumps with a tiny input change
(comparisons, casts to int, floor, ``//``, ``%``, argmax, ``where``'s condition) only take deterministic values.

``TG_FUZZ_PROGRAMS`` programs per device (default 500; ``nox -s full`` runs 20,000), seeds ``TG_FUZZ_SEED`` ..
``TG_FUZZ_SEED + n - 1``. A failure is shrunk (fewer steps, then simpler inputs) and printed as a standalone
script. Each run goes in a child process, so a program that crashes the process is reported by its seed. Run one
program: ``python tests/test_program_fuzz.py SEED [DEVICE]``.
"""
# ruff: noqa: UP031  (step templates keep {0}-style slots for str.format, so their parameters go in with %)
from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from program_reference import (
    INPUT_DTYPES,
    NP,
    Ref,
    bits,
    cast,
    errs,
    int_range,
    is_float,
    mismatch,
    movement,
    promote,
    ref_add_after_product,
    ref_argmax,
    ref_binop,
    ref_clip,
    ref_cumsum,
    ref_matmul,
    ref_max,
    ref_sum,
    ref_unary,
    ref_where,
)

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]
PROGRAMS = int(os.environ.get("TG_FUZZ_PROGRAMS", "500"))
SEED = int(os.environ.get("TG_FUZZ_SEED", "0"))


# ------------------------------------------------------------------------------------------------ programs

@dataclass
class Step:
    """One line ``v{k} = <code>``: `code` is Python over earlier names; `ref` computes it from their Refs."""
    code: str
    args: tuple[int, ...]  # indices of the values it reads
    ref: Any = field(repr=False)  # (list[Ref]) -> Ref


@dataclass
class Program:
    seed: int
    inputs: list[np.ndarray]
    input_dtypes: list[str]
    steps: list[Step]
    outputs: list[int]  # value indices realized together (the first is the tensor .realize() is called on)

    def names(self) -> list[str]:
        return [f"x{i}" for i in range(len(self.inputs))] + [f"v{i}" for i in range(len(self.steps))]

    def source(self, device: str) -> str:
        """The program as a standalone script."""
        names = self.names()
        lines = ["import numpy as np", "from tgcore.tensor import Tensor", ""]
        for i, (arr, dt) in enumerate(zip(self.inputs, self.input_dtypes, strict=True)):
            lines.append(f"x{i} = Tensor({array_source(arr, dt)}, device={device!r})")
        for k, st in enumerate(self.steps):
            lines.append(f"v{k} = " + st.code.format(*[names[i] for i in st.args]))
        outs = [names[i] for i in self.outputs]
        lines.append(f"{outs[0]}.realize({', '.join(outs[1:])})")
        lines += [f"print({o}.numpy())" for o in outs]
        return "\n".join(lines)

    def reference(self) -> list[Ref]:
        vals = [Ref(np.array(a), dt) for a, dt in zip(self.inputs, self.input_dtypes, strict=True)]
        for st in self.steps:
            vals.append(st.ref([vals[i] for i in st.args]))
        return vals


def array_source(arr: np.ndarray, dt: str) -> str:
    def item(v: Any) -> str:
        if dt == "bool":
            return str(bool(v))
        if is_float(dt):
            f = float(v)
            return repr(f) if math.isfinite(f) else f"float('{f}')"
        return str(int(v))
    body = "[" + ", ".join(item(v) for v in arr.reshape(-1)) + "]"
    return f"np.array({body}, dtype=np.{dt}).reshape({tuple(arr.shape)})"


def run_on_device(prog: Program, device: str) -> list[np.ndarray]:
    from tgcore.dtype import dtypes
    from tgcore.tensor import Tensor
    env: dict[str, Any] = {"np": np, "Tensor": Tensor, "float": float}
    names = prog.names()
    for i, (arr, dt) in enumerate(zip(prog.inputs, prog.input_dtypes, strict=True)):
        env[f"x{i}"] = Tensor(arr, device=device, dtype=getattr(dtypes, dt))
    for k, st in enumerate(prog.steps):
        env[f"v{k}"] = eval(st.code.format(*[names[i] for i in st.args]), env)  # noqa: S307
    outs = [env[names[i]] for i in prog.outputs]
    outs[0].realize(*outs[1:])
    return [o.numpy() for o in outs]


def check(prog: Program, device: str) -> str | None:
    """None if the device matches the reference, else what went wrong."""
    refs = prog.reference()
    try:
        got = run_on_device(prog, device)
    except Exception as e:  # noqa: BLE001 - any crash is a finding
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}\n" + \
            "".join(traceback.format_exception(e)[-3:])
    for out, g in zip(prog.outputs, got, strict=True):
        why = mismatch(g, refs[out])
        if why:
            return f"output {prog.names()[out]}: {why}"
    return None


# ------------------------------------------------------------------------------------------------ generator

SHAPE_DIMS = [1, 1, 2, 2, 3, 4, 5, 8, 0]


def gen_values(rng: random.Random, dt: str, shape: tuple[int, ...]) -> np.ndarray:
    n = math.prod(shape)
    if dt == "bool":
        return np.array([rng.random() < 0.5 for _ in range(n)], dtype=np.bool_).reshape(shape)
    if is_float(dt):
        special = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0, 65504.0 if dt == "float16" else 3e38, 0.1]
        p = rng.choice([0.0, 0.05, 0.2])
        vals = [rng.choice(special) if rng.random() < p else rng.randint(-32, 32) / rng.choice([1, 1, 2, 4])
                for _ in range(n)]
        return np.array(vals, dtype=np.float64).astype(NP[dt]).reshape(shape)
    lo, hi = int_range(dt)
    edge = [lo, lo + 1, hi, hi - 1, 0, -1 if lo < 0 else 1]
    p = rng.choice([0.0, 0.1, 0.3])
    vals = [rng.choice(edge) if rng.random() < p else
            (rng.randint(max(lo, -6), min(hi, 9)) if rng.random() < 0.8 else rng.randint(lo, hi)) for _ in range(n)]
    return np.array(vals, dtype=object).astype(NP[dt]).reshape(shape)


def gen_scalar(rng: random.Random, dt: str, nonzero: bool = False) -> Any:
    if is_float(dt):
        v = rng.choice([0.5, 2.0, -1.5, 3.0, 0.0, -4.0, 0.25])
        return v if not (nonzero and v == 0) else 1.0
    if dt == "bool":
        return rng.choice([0, 1, 2, -1, 3])  # int scalar on bool: int32
    lo, hi = int_range(dt)
    v = rng.choice([0, 1, 2, 3, -1, -2, 5, 7, lo, hi, -128])
    v = min(max(v, lo), hi)
    return v


def broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y and x != 1 and y != 1:
            return False
    return True


class Generator:
    """Builds a random program step by step, evaluating the reference as it goes (to know shapes, dtypes and
    which values are deterministic)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed

    def program(self) -> Program:
        rng = self.rng
        rank = rng.choice([0, 1, 1, 2, 2, 3, 4])
        base = tuple(rng.choice(SHAPE_DIMS) for _ in range(rank))
        while math.prod(base) > 96:
            base = tuple(max(1, s // 2) for s in base)
        inputs, dts = [], []
        for _ in range(rng.choice([1, 1, 2, 2, 3])):
            shape = tuple(s if rng.random() < 0.75 else 1 for s in base)
            if shape and rng.random() < 0.2:
                shape = shape[rng.randint(0, len(shape)):]
            dt = rng.choice(INPUT_DTYPES)
            inputs.append(gen_values(rng, dt, shape))
            dts.append(dt)
        self.prog = Program(self.seed, inputs, dts, [], [])
        self.vals = self.prog.reference()
        for _ in range(rng.randint(2, 8)):
            for _attempt in range(20):
                step = self.step()
                if step is not None:
                    break
            else:
                continue
            self.prog.steps.append(step)
            self.vals.append(step.ref([self.vals[i] for i in step.args]))
        last = len(self.vals) - 1
        self.prog.outputs = [last]
        if rng.random() < 0.25 and last > 0:
            self.prog.outputs.append(rng.randrange(last))
        return self.prog

    def pick(self, pred: Any = None) -> int | None:
        """A value index, recent ones favoured."""
        cands = [i for i, v in enumerate(self.vals) if pred is None or pred(v)]
        if not cands:
            return None
        return cands[-1] if self.rng.random() < 0.5 else self.rng.choice(cands)

    def step(self) -> Step | None:
        rng = self.rng
        kind = rng.choices(["binary", "unary", "cast", "compare", "where", "reduce", "move", "divmod", "matmul",
                            "cumsum", "clip", "cat"], weights=[14, 8, 6, 6, 5, 7, 8, 5, 3, 3, 3, 2])[0]
        return getattr(self, "gen_" + kind)()

    def gen_binary(self) -> Step | None:
        rng = self.rng
        ops = ["+", "-", "*", "/", "max", "min", "&", "|", "^", "<<", ">>"]
        op = rng.choice(ops)
        bitwise = op in ("&", "|", "^", "<<", ">>")
        i = self.pick((lambda v: not is_float(v.dt)) if bitwise else None)
        if i is None:
            return None
        a = self.vals[i]
        if op in ("<<", ">>") and a.dt == "bool" or op == "-" and a.dt == "bool":
            return None
        use_scalar = rng.random() < 0.35
        if use_scalar:
            s = gen_scalar(rng, a.dt)
            if bitwise and a.dt == "bool":
                return None
            if op in ("<<", ">>"):
                s = rng.choice([0, 1, 3, 7, bits(a.dt) - 1])
            fn = {"max": "{0}.maximum(%r)", "min": "{0}.minimum(%r)"}.get(op, "({0} %s %%r)" % op) % (s,)
            return Step(fn, (i,), lambda v, op=op, s=s: self._add(op, v[0], s))
        j = self.pick(lambda v: broadcastable(v.shape, a.shape) and (not bitwise or not is_float(v.dt)))
        if j is None:
            return None
        dt = promote(a.dt, self.vals[j].dt)
        if op in ("<<", ">>", "-") and dt == "bool" or bitwise and is_float(dt):
            return None
        fn = {"max": "{0}.maximum({1})", "min": "{0}.minimum({1})"}.get(op, "({0} %s {1})" % op)
        return Step(fn, (i, j), lambda v, op=op: self._add(op, v[0], v[1]))

    @staticmethod
    def _add(op: str, a: Ref, b: Any) -> Ref:
        return ref_add_after_product(op, a, b) if op in "+-" else ref_binop(op, a, b)

    def gen_unary(self) -> Step | None:
        rng = self.rng
        op = rng.choice(["neg", "abs", "relu", "not", "invert", "isnan", "floor", "trunc", "exp", "exp2", "sqrt",
                         "sigmoid"])
        need_det = op in ("not", "isnan", "floor", "trunc")
        i = self.pick(lambda v: (v.det or not need_det) and
                      (op not in ("floor", "trunc", "isnan") or is_float(v.dt)) and
                      (op != "invert" or not is_float(v.dt)) and
                      (op not in ("neg", "abs", "relu") or v.dt != "bool") and
                      (op not in ("exp", "exp2", "sigmoid") or is_float(v.dt) or v.det))
        if i is None:
            return None
        code = {"neg": "(-{0})", "not": "{0}.logical_not()", "invert": "(~{0})"}.get(op, "{0}.%s()" % op)
        return Step(code, (i,), lambda v, op=op: ref_unary(op, v[0]))

    def gen_cast(self) -> Step | None:
        dt = self.rng.choice(INPUT_DTYPES)
        i = self.pick(lambda v: v.det or is_float(dt))
        if i is None:
            return None
        return Step("{0}.cast(%r)" % dt, (i,), lambda v, dt=dt: cast(v[0], dt))

    def gen_compare(self) -> Step | None:
        op = self.rng.choice(["<", "<=", ">", ">=", "==", "!="])
        i = self.pick(lambda v: v.det)
        if i is None:
            return None
        a = self.vals[i]
        if self.rng.random() < 0.4:
            s = gen_scalar(self.rng, a.dt)
            return Step("({0} %s %r)" % (op, s), (i,), lambda v, op=op, s=s: ref_binop(op, v[0], s))
        j = self.pick(lambda v: v.det and broadcastable(v.shape, a.shape))
        if j is None:
            return None
        return Step("({0} %s {1})" % op, (i, j), lambda v, op=op: ref_binop(op, v[0], v[1]))

    def gen_where(self) -> Step | None:
        c = self.pick(lambda v: v.det)
        if c is None:
            return None
        shape = self.vals[c].shape
        i = self.pick(lambda v: broadcastable(v.shape, shape))
        if i is None:
            return None
        if self.rng.random() < 0.4:
            s = gen_scalar(self.rng, self.vals[i].dt)
            if self.vals[i].dt == "bool":
                s = bool(s)
            if self.rng.random() < 0.5:
                return Step("{0}.where({1}, %r)" % (s,), (c, i), lambda v, s=s: ref_where(v[0], v[1], s))
            return Step("{0}.where(%r, {1})" % (s,), (c, i), lambda v, s=s: ref_where(v[0], s, v[1]))
        j = self.pick(lambda v: broadcastable(v.shape, shape) and broadcastable(v.shape, self.vals[i].shape))
        if j is None:
            return None
        return Step("{0}.where({1}, {2})", (c, i, j), lambda v: ref_where(v[0], v[1], v[2]))

    def gen_reduce(self) -> Step | None:
        rng = self.rng
        op = rng.choice(["sum", "max", "min", "argmax", "argmin"])
        i = self.pick(lambda v: v.det or op in ("sum", "max", "min"))
        if i is None:
            return None
        a = self.vals[i]
        keepdim = rng.random() < 0.3
        if op in ("argmax", "argmin"):
            axis = None if a.arr.ndim == 0 or rng.random() < 0.3 else rng.randrange(a.arr.ndim)
            if (a.arr.size if axis is None else a.shape[axis]) == 0:
                return None
            is_max = op == "argmax"
            return Step("{0}.%s(%r, keepdim=%r)" % (op, axis, keepdim), (i,),
                        lambda v, axis=axis, k=keepdim, m=is_max: ref_argmax(v[0], axis, k, m))
        if a.arr.ndim == 0 or rng.random() < 0.3:
            axis: Any = None
        elif rng.random() < 0.3 and a.arr.ndim >= 2:
            axis = tuple(sorted(rng.sample(range(a.arr.ndim), 2)))
        else:
            axis = rng.randrange(a.arr.ndim)
        if op == "sum":
            return Step("{0}.sum(%r, keepdim=%r)" % (axis, keepdim), (i,),
                        lambda v, axis=axis, k=keepdim: ref_sum(v[0], axis, k))
        return Step("{0}.%s(%r, keepdim=%r)" % (op, axis, keepdim), (i,),
                    lambda v, axis=axis, k=keepdim, m=(op == "max"): ref_max(v[0], axis, k, m))

    def gen_move(self) -> Step | None:
        rng = self.rng
        i = self.pick()
        assert i is not None
        shape = self.vals[i].shape
        nd = len(shape)
        op = rng.choice(["reshape", "permute", "expand", "pad", "shrink", "flip", "transpose", "unsqueeze"])
        if op == "reshape":
            n = math.prod(shape)
            opts = [(n,), (1, n)] + ([(n // 2, 2)] if n % 2 == 0 else []) + ([shape[::-1]] if n else [])
            new = rng.choice(opts)
            return Step("{0}.reshape(%r)" % (new,), (i,), lambda v, s=new: movement(v[0], lambda x: x.reshape(s)))
        if op == "unsqueeze":
            d = rng.randint(0, nd)
            return Step("{0}.unsqueeze(%d)" % d, (i,), lambda v, d=d: movement(v[0], lambda x: np.expand_dims(x, d)))
        if nd == 0:
            return None
        if op == "permute":
            order = tuple(rng.sample(range(nd), nd))
            return Step("{0}.permute(%r)" % (order,), (i,),
                        lambda v, o=order: movement(v[0], lambda x: np.transpose(x, o)))
        if op == "transpose":
            a, b = rng.randrange(nd), rng.randrange(nd)
            return Step("{0}.transpose(%d, %d)" % (a, b), (i,),
                        lambda v, a=a, b=b: movement(v[0], lambda x: np.swapaxes(x, a, b)))
        if op == "expand":
            new = tuple(rng.choice([2, 3]) if s == 1 else s for s in shape)
            if rng.random() < 0.3:
                new = (2,) + new
            return Step("{0}.expand(%r)" % (new,), (i,),
                        lambda v, s=new: movement(v[0], lambda x: np.broadcast_to(x, s)))
        if op == "pad":
            pads = tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in shape)
            return Step("{0}.pad(%r)" % (pads,), (i,), lambda v, p=pads: movement(v[0], lambda x: np.pad(x, p)))
        if op == "shrink":
            arg = []
            for s in shape:
                lo = rng.randint(0, s)
                arg.append((lo, rng.randint(lo, s)))
            arg_t = tuple(arg)
            return Step("{0}.shrink(%r)" % (arg_t,), (i,),
                        lambda v, a=arg_t: movement(v[0], lambda x: x[tuple(slice(lo, hi) for lo, hi in a)]))
        axes = tuple(sorted(rng.sample(range(nd), rng.randint(1, nd))))
        return Step("{0}.flip(%r)" % (axes,), (i,), lambda v, a=axes: movement(v[0], lambda x: np.flip(x, a)))

    def gen_divmod(self) -> Step | None:
        rng = self.rng
        op = rng.choice(["//", "%"])
        i = self.pick(lambda v: v.det and v.dt != "bool")
        if i is None:
            return None
        a = self.vals[i]
        r = rng.random()
        if r < 0.3:
            s = gen_scalar(rng, a.dt)
            return Step("({0} %s %r)" % (op, s), (i,), lambda v, op=op, s=s: ref_binop(op, v[0], s))
        if r < 0.4 and not is_float(a.dt):
            s = rng.choice([5, 1, 100] if a.dt.startswith("uint") else [5, 1, -7, 100])
            return Step("(%r %s {0})" % (s, op), (i,),
                        lambda v, op=op, s=s: ref_binop(op, Ref(np.full(v[0].shape, s, NP[v[0].dt]), v[0].dt), v[0]))
        j = self.pick(lambda v: v.det and broadcastable(v.shape, a.shape) and promote(v.dt, a.dt) != "bool")
        if j is None:
            return None
        return Step("({0} %s {1})" % op, (i, j), lambda v, op=op: ref_binop(op, v[0], v[1]))

    def gen_matmul(self) -> Step | None:
        i = self.pick(lambda v: v.arr.ndim in (1, 2, 3) and v.dt != "bool")
        if i is None:
            return None
        a = self.vals[i]
        k = a.shape[-1]
        j = self.pick(lambda v: v.dt != "bool" and v.arr.ndim in (1, 2) and v.shape[0] == k)
        if j is not None and self.rng.random() < 0.6:
            return Step("({0} @ {1})", (i, j), lambda v: ref_matmul(v[0], v[1]))
        if a.arr.ndim == 1:
            return Step("({0} @ {0})", (i,), lambda v: ref_matmul(v[0], v[0]))
        return Step("({0} @ {0}.transpose(-1, -2))", (i,),
                    lambda v: ref_matmul(v[0], movement(v[0], lambda x: np.swapaxes(x, -1, -2))))

    def gen_cumsum(self) -> Step | None:
        i = self.pick(lambda v: v.arr.ndim >= 1)
        if i is None:
            return None
        ax = self.rng.randrange(self.vals[i].arr.ndim)
        return Step("{0}.cumsum(%d)" % ax, (i,), lambda v, ax=ax: ref_cumsum(v[0], ax))

    def gen_clip(self) -> Step | None:
        i = self.pick(lambda v: v.det and v.dt != "bool")
        if i is None:
            return None
        dt = self.vals[i].dt
        lo, hi = sorted([gen_scalar(self.rng, dt), gen_scalar(self.rng, dt)])
        return Step("{0}.clip(%r, %r)" % (lo, hi), (i,), lambda v, lo=lo, hi=hi: ref_clip(v[0], lo, hi))

    def gen_cat(self) -> Step | None:
        i = self.pick(lambda v: v.arr.ndim >= 1)
        if i is None:
            return None
        a = self.vals[i]
        d = self.rng.randrange(a.arr.ndim)
        j = self.pick(lambda v: v.arr.ndim == a.arr.ndim and
                      all(x == y for n, (x, y) in enumerate(zip(v.shape, a.shape, strict=True)) if n != d))
        assert j is not None

        def ref(v: list[Ref], d: int = d) -> Ref:
            dt = promote(v[0].dt, v[1].dt)
            x, y = cast(v[0], dt), cast(v[1], dt)
            arr = np.concatenate([x.arr, y.arr], axis=d)
            return Ref(arr, dt, None if x.det and y.det else np.concatenate(errs(x, y), axis=d))
        return Step("{0}.cat({1}, dim=%d)" % d, (i, j), ref)


def generate(seed: int) -> Program:
    return Generator(seed).program()


# ------------------------------------------------------------------------------------------------ shrinking

def needed(prog: Program, outputs: list[int]) -> Program:
    """The program cut down to what `outputs` depend on (steps renumbered)."""
    n_in = len(prog.inputs)
    keep: set[int] = set(outputs)
    for k in range(len(prog.steps) - 1, -1, -1):
        if n_in + k in keep:
            keep.update(prog.steps[k].args)
    used_inputs = [i for i in range(n_in) if i in keep]
    kept_steps = [k for k in range(len(prog.steps)) if n_in + k in keep]
    index = {old: new for new, old in enumerate(used_inputs)}
    index.update({n_in + old: len(used_inputs) + new for new, old in enumerate(kept_steps)})
    steps = [replace(prog.steps[k], args=tuple(index[a] for a in prog.steps[k].args)) for k in kept_steps]
    return Program(prog.seed, [prog.inputs[i] for i in used_inputs], [prog.input_dtypes[i] for i in used_inputs],
                   steps, [index[o] for o in outputs])


def shrink(prog: Program, device: str, budget: int = 80) -> Program:
    """A smaller program that still fails: fewer steps (each value alone as the output), then simpler inputs."""
    def fails(p: Program) -> bool:
        nonlocal budget
        budget -= 1
        try:
            return check(p, device) is not None
        except Exception:  # noqa: BLE001 - a reference that cannot evaluate the cut program
            return False
    n_values = len(prog.inputs) + len(prog.steps)
    candidates = sorted({needed(prog, [o]).steps.__len__(): o for o in range(len(prog.inputs), n_values)}.items())
    for _, o in candidates:
        cut = needed(prog, [o])
        if budget > 0 and len(cut.steps) <= len(prog.steps) and fails(cut):
            prog = cut
            break
    for i, arr in enumerate(prog.inputs):  # zero whole inputs, then single elements
        for value in (0, 1):
            trial = replace(prog, inputs=[*prog.inputs[:i], np.full_like(arr, value), *prog.inputs[i + 1:]])
            if budget > 0 and fails(trial):
                prog = trial
                break
        flat = prog.inputs[i].reshape(-1).copy()
        for e in range(min(flat.size, 32)):
            if budget <= 0 or flat[e] == 0:
                continue
            trial_flat = flat.copy()
            trial_flat[e] = 0
            trial = replace(prog, inputs=[*prog.inputs[:i], trial_flat.reshape(arr.shape), *prog.inputs[i + 1:]])
            if fails(trial):
                flat = trial_flat
                prog = trial
    return prog


# ------------------------------------------------------------------------------------------------ the tests

BATCH_LINE = "fuzz-result "


def failures(device: str, seeds: range) -> list[tuple[int, str]]:
    """(seed, what went wrong) for each failing program. The programs run in a child process (``--batch``), so one
    that kills the process (a segfault in generated code) is reported by its seed and the run goes on after it."""
    found: list[tuple[int, str]] = []
    start = seeds.start
    while start < seeds.stop:
        cmd = [sys.executable, "-X", "faulthandler", os.path.abspath(__file__), "--batch",
               str(start), str(seeds.stop), device]
        child = subprocess.run(cmd, capture_output=True, text=True, check=False)
        done = start
        for line in child.stdout.splitlines():
            if not line.startswith(BATCH_LINE):  # e.g. DEBUG output
                continue
            seed, why = json.loads(line[len(BATCH_LINE):])
            done = seed + 1
            if why is not None:
                found.append((seed, why))
        if child.returncode == 0 and done == seeds.stop:
            break
        died = f"signal {-child.returncode}" if child.returncode < 0 else f"exit status {child.returncode}"
        found.append((done, f"the process died ({died}) running this program; stderr ends:\n{child.stderr[-2000:]}"))
        start = done + 1
    return found


def run_batch(start: int, stop: int, device: str) -> None:
    """The child side of `failures`: one line ``BATCH_LINE [seed, why]`` per program, flushed before the next starts."""
    for seed in range(start, stop):
        print(BATCH_LINE + json.dumps([seed, check(generate(seed), device)]), flush=True)


@pytest.mark.parametrize("device", DEVICES)
def test_random_programs_match_reference(device):
    found = failures(device, range(SEED, SEED + PROGRAMS))
    if not found:
        return
    reports = []
    for seed, why in found[:3]:
        if why.startswith("the process died"):  # shrinking would run it in this process
            reports.append(f"--- seed {seed}: {why}\n{generate(seed).source(device)}\n")
            continue
        small = shrink(generate(seed), device)
        reports.append(f"--- seed {seed}: {why}\n--- shrunk ({check(small, device)}):\n{small.source(device)}\n")
    pytest.fail(f"{len(found)} of {PROGRAMS} programs differ from the reference on {device} "
                f"(seeds {[s for s, _ in found[:20]]}).\n" + "\n".join(reports))


def test_reference_catches_a_wrong_result():
    """The comparison can fail: a program whose device result is tampered with is reported."""
    prog = generate(SEED)
    refs = prog.reference()
    out = refs[prog.outputs[0]]
    wrong = out.arr.copy()
    if wrong.size == 0:
        wrong = np.zeros((1,), dtype=wrong.dtype)
    flat = wrong.reshape(-1)
    flat[0] = (not flat[0]) if out.dt == "bool" else flat[0] + (1 if not is_float(out.dt) else 1000)
    assert mismatch(wrong, out) is not None


if __name__ == "__main__" and sys.argv[1:2] == ["--batch"]:
    run_batch(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
elif __name__ == "__main__":
    seed = int(sys.argv[1])
    dev = sys.argv[2] if len(sys.argv) > 2 else "PYTHON"
    p = generate(seed)
    print(p.source(dev))
    print(check(p, dev) or "matches the reference")

"""Property tests for symbolic simplification and range analysis.

Random integer expression trees (depth <= 6) over 1-3 bounded variables are simplified; for random
in-range assignments the simplified expression must give the same value as the original, and every
node's value must lie in [vmin, vmax]. The reference evaluator below is written independently of
tgcore's constant folder: Python ints, C truncating // and %, wrap-around to int32 after each op.

TG_FUZZ_EXAMPLES=<n> raises the number of examples (nightly runs).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp, sym_infer
from tgcore.uop.symbolic import difference

EXAMPLES = int(os.environ.get("TG_FUZZ_EXAMPLES", "2500"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ_HALF = settings(FUZZ, max_examples=max(1, EXAMPLES // 2))  # properties of one rule or helper


pytestmark = pytest.mark.usefixtures("spec_on")  # every rewrite checks its spec


# ------------------------------------------------------------------------------------------------ reference

def wrap32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def ref_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def ref_mod(a: int, b: int) -> int:
    return a - b * ref_div(a, b)


def ref_eval(u: UOp, env: dict[str, int]) -> dict[UOp, int | bool]:
    """Values of every node of u's graph (int32 / bool), from first principles."""
    vals: dict[UOp, int | bool] = {}
    for n in u.toposort:
        s = [vals[x] for x in n.src]
        op = n.op
        if op is Ops.CONST:
            v = n.arg
        elif op is Ops.DEFINE_VAR:
            v = env[n.arg[0]]
        elif op is Ops.ADD:
            v = s[0] + s[1]
        elif op is Ops.SUB:
            v = s[0] - s[1]
        elif op is Ops.MUL:
            v = s[0] * s[1]
        elif op is Ops.NEG:
            v = -s[0]
        elif op is Ops.IDIV:
            v = ref_div(s[0], s[1])
        elif op is Ops.MOD:
            v = ref_mod(s[0], s[1])
        elif op is Ops.MAX:
            v = max(s[0], s[1])
        elif op is Ops.CMPLT:
            v = s[0] < s[1]
        elif op is Ops.CMPNE:
            v = s[0] != s[1]
        elif op is Ops.CMPEQ:
            v = s[0] == s[1]
        elif op is Ops.WHERE:
            v = s[1] if s[0] else s[2]
        elif op is Ops.AND:
            v = s[0] & s[1]
        elif op is Ops.OR:
            v = s[0] | s[1]
        elif op is Ops.XOR:
            v = s[0] ^ s[1]
        elif op is Ops.CAST:
            v = bool(s[0]) if n.dtype is dtypes.bool else int(s[0])
        else:
            raise AssertionError(f"reference evaluator has no {op}")
        if n.dtype is dtypes.bool:
            v = bool(v)
        else:
            v = wrap32(int(v))
        vals[n] = v
    return vals


# ------------------------------------------------------------------------------------------------ generators

LO = [0, 0, 0, 1, -1, -5, -20, 3]
WIDTH = [0, 1, 3, 7, 15, 31, 63]
KINDS = ["leaf", "add", "sub", "mul", "div", "mod", "min", "max", "where", "neg", "div", "mod", "divmod", "mask"]
MASKS = [0, 1, 3, 7, 15, 31, 63, 127, 255, 0x7FFF, 0x7F0F, -1, -2, -16]
DIVISORS = [1, 2, 3, 4, 5, 8, 16, -1, -2, -3, -4, 7, 12]
CMPS = ["lt", "ne", "eq", "le", "gt", "ge"]


class Builder:
    """Builds a random expression tree from a drawn byte string (one hypothesis draw keeps generation
    fast; zero bytes mean leaves and small constants, so shrinking gives small trees)."""

    def __init__(self, blob: bytes, vs: list[UOp]):
        self.blob, self.pos, self.vs = blob, 0, vs

    def byte(self) -> int:
        if self.pos >= len(self.blob):
            return 0
        self.pos += 1
        return self.blob[self.pos - 1]

    def pick(self, options):
        return options[self.byte() % len(options)]

    def booleans(self) -> bool:
        return self.byte() % 2 == 1

    def leaf(self) -> UOp:
        if self.booleans():
            return self.pick(self.vs)
        return UOp.const(dtypes.int32, self.byte() % 25 - 12)

    def int_expr(self, depth: int) -> UOp:
        if depth == 0:
            return self.leaf()
        kind = self.pick(KINDS)
        if kind == "leaf":
            return self.leaf()
        return self.node(kind, depth)

    def node(self, kind: str, depth: int) -> UOp:
        a = self.int_expr(depth - 1)
        if kind == "neg":
            return -a
        if kind in ("div", "mod"):
            if self.booleans():  # a non-zero constant divisor
                divisor = UOp.const(dtypes.int32, self.pick(DIVISORS))
            else:  # a symbolic divisor that can never be zero: max(e, 1), possibly negated
                divisor = self.int_expr(depth - 1).maximum(1)
                if self.booleans():
                    divisor = -divisor
            return a // divisor if kind == "div" else a % divisor
        if kind == "divmod":  # (a // c) * (c*m) + (a % c) * m (+ rest), sometimes with a coefficient that differs
            c = self.pick([d for d in DIVISORS if d > 1])
            m = self.byte() % 7 - 3
            k = c * m + (self.byte() % 3 - 1 if self.booleans() else 0)
            q, r = (a // c) * k, (a % c) * m
            rest = self.int_expr(depth - 1)
            return (r + rest) + q if self.booleans() else (q + rest) + r
        if kind == "mask":  # a & m, a sometimes made non-negative first
            if self.booleans():
                a = a.maximum(0)
            return a & self.pick(MASKS)
        b = self.int_expr(depth - 1)
        if kind == "add":
            return a + b
        if kind == "sub":
            return a - b
        if kind == "mul":
            return a * b
        if kind == "min":
            return a.minimum(b)
        if kind == "max":
            return a.maximum(b)
        return self.bool_expr(depth - 1).where(a, b)

    def bool_expr(self, depth: int) -> UOp:
        a, b = self.int_expr(depth), self.int_expr(depth)
        kind = self.pick(CMPS)
        return {"lt": a < b, "ne": a.ne(b), "eq": a.eq(b), "le": a <= b, "gt": a > b, "ge": a >= b}[kind]


def variables(draw) -> list[UOp]:
    vs = []
    for i in range(draw(st.integers(1, 3))):
        lo = LO[draw(st.integers(0, len(LO) - 1))]
        vs.append(UOp.variable(f"v{i}", lo, lo + WIDTH[draw(st.integers(0, len(WIDTH) - 1))]))
    return vs


def assignments(draw, vs: list[UOp]) -> list[dict[str, int]]:
    envs = [{v.arg[0]: draw(st.integers(v.arg[1], v.arg[2])) for v in vs} for _ in range(4)]
    return envs + [{v.arg[0]: v.arg[1] for v in vs}, {v.arg[0]: v.arg[2] for v in vs}]  # the corners


@st.composite
def case(draw):
    vs = variables(draw)
    b = Builder(draw(st.binary(min_size=8, max_size=160)), vs)
    depth = draw(st.integers(1, 6))
    e = b.int_expr(depth)
    if draw(st.integers(0, 5)) == 0:  # sometimes a comparison at the root
        e = b.bool_expr(min(depth, 3)) & (e < draw(st.integers(-20, 40)))
    return e, assignments(draw, vs)


@st.composite
def pair_or_mask_case(draw):
    """A divmod pair sum or a mask at the root (inside a tree, a wrong value there is often hidden by a
    min/max/where above it)."""
    vs = variables(draw)
    b = Builder(draw(st.binary(min_size=8, max_size=120)), vs)
    root = b.node("divmod" if draw(st.booleans()) else "mask", draw(st.integers(1, 4)))
    return root, assignments(draw, vs)


@st.composite
def two_sums_case(draw):
    """Two sums sharing terms (the indices of neighbouring loads): base + pair + terms, with some terms the same."""
    vs = variables(draw)
    b = Builder(draw(st.binary(min_size=8, max_size=120)), vs)
    shared = b.int_expr(draw(st.integers(0, 3)))
    sums = []
    for _ in range(2):
        e = shared
        for _ in range(draw(st.integers(0, 3))):
            e = e + b.int_expr(draw(st.integers(0, 2))) * draw(st.sampled_from([1, 2, -1, 4, 2**31]))
        if draw(st.booleans()):
            e = e + b.node("divmod", 2)
        sums.append(e + draw(st.integers(-40, 40)))
    return sums[0], sums[1], assignments(draw, vs)


# ------------------------------------------------------------------------------------------------ properties

def check_simplify(e: UOp, envs: list[dict[str, int]]) -> None:
    s = e.simplify()
    for env in envs:
        want = ref_eval(e, env)
        got = ref_eval(s, env)[s]
        assert got == want[e], f"{e.render()} -> {s.render()} at {env}: {got} != {want[e]}"
        for n, v in want.items():  # soundness of range analysis on every node of the original
            assert n.vmin <= v <= n.vmax, f"{n.render()} = {v} outside [{n.vmin}, {n.vmax}] at {env}"
        assert s.vmin <= got <= s.vmax, f"{s.render()} = {got} outside [{s.vmin}, {s.vmax}] at {env}"
        assert sym_infer(e, env) == want[e]


@FUZZ
@given(case())
def test_simplify_preserves_value_and_bounds(c):
    check_simplify(*c)


@FUZZ_HALF
@given(pair_or_mask_case())
def test_divmod_pairs_and_masks_preserve_value(c):
    """(a // c)*(c*m) + (a % c)*m -> a*m and x & (2**k - 1) -> x, checked where nothing above hides them."""
    check_simplify(*c)


@FUZZ_HALF
@given(two_sums_case())
def test_difference_of_two_sums(c):
    """symbolic.difference: a constant only when a - b is one (TG_SPEC also checks it against the rules)."""
    a, b, envs = c
    a, b = a.simplify(), b.simplify()
    d = difference(a, b)
    for env in envs:
        if d is not None:
            assert wrap32(ref_eval(a, env)[a] - ref_eval(b, env)[b]) == d, f"{a.render()} - {b.render()} != {d}"

"""UPat and PatternMatcher: matching features, ctx, composition, compiled path == interpreter path."""

from __future__ import annotations

import random

import pytest

from tgcore.dtype import dtypes
from tgcore.uop import AxisArg, Ops, PatternMatcher, RangeKind, UOp, UPat, symbolic

x_ = UOp.variable("x", 0, 10)
y_ = UOp.variable("y", 0, 10)
BOTH = [pytest.param(True, id="compiled"), pytest.param(False, id="interpreted")]


@pytest.mark.parametrize("compiled", BOTH)
def test_commutative_ops_try_both_orders(compiled):
    pm = PatternMatcher([(UPat.var("a") + UPat.cvar("c"), lambda a, c: a * c)], compiled=compiled)
    assert pm.rewrite(x_ + 3) is x_ * 3
    assert pm.rewrite(3 + x_) is x_ * 3
    sub = PatternMatcher([(UPat(Ops.IDIV, src=(UPat.var("a"), UPat.cvar("c"))), lambda a, c: a)], compiled=compiled)
    assert sub.rewrite(x_ // 3) is x_
    assert sub.rewrite(UOp(Ops.IDIV, dtypes.int32, (x_.const_like(3), x_))) is None  # not commutative


@pytest.mark.parametrize("compiled", BOTH)
def test_same_name_must_bind_the_same_node(compiled):
    pm = PatternMatcher([(UPat.var("a") + UPat.var("a"), lambda a: a * 2)], compiled=compiled)
    assert pm.rewrite(x_ + x_) is x_ * 2
    assert pm.rewrite(x_ + y_) is None


@pytest.mark.parametrize("compiled", BOTH)
def test_allow_any_len_and_exact_len(compiled):
    pm = PatternMatcher([
        (UPat(Ops.SINK, src=(UPat.var("first"),), allow_any_len=True, name="s"), lambda s, first: first),
    ], compiled=compiled)
    assert pm.rewrite(UOp.sink(x_, y_, x_ + 1)) is x_
    exact = PatternMatcher([(UPat(Ops.SINK, src=(UPat.var("a"),)), lambda a: a)], compiled=compiled)
    assert exact.rewrite(UOp.sink(x_, y_)) is None
    assert exact.rewrite(UOp.sink(y_)) is y_


@pytest.mark.parametrize("compiled", BOTH)
def test_dtype_sets_op_sets_and_args(compiled):
    pm = PatternMatcher([
        (UPat((Ops.ADD, Ops.MUL), (dtypes.int8, dtypes.int16), name="u"), lambda u: u.const_like(1)),
        (UPat(Ops.CONST, arg=7, name="u"), lambda u: u.const_like(8)),
    ], compiled=compiled)
    a8 = UOp.variable("a", 0, 3, dtypes.int8)
    a32 = UOp.variable("a", 0, 3)
    assert pm.rewrite(a8 + 1).arg == 1 and pm.rewrite(a8 * 2).arg == 1
    assert pm.rewrite(a32 + 1) is None
    assert pm.rewrite(UOp.const(dtypes.int32, 7)).arg == 8 and pm.rewrite(UOp.const(dtypes.int32, 6)) is None


@pytest.mark.parametrize("compiled", BOTH)
def test_ctx_is_passed_only_when_asked(compiled):
    seen = []

    def with_ctx(ctx, a):
        ctx.append(a)
        return None

    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="a"), with_ctx),
                         (UPat(Ops.DEFINE_VAR, name="a"), lambda a: a + 1)], compiled=compiled)
    assert pm.rewrite(x_, ctx=seen) is x_ + 1
    assert seen == [x_]


@pytest.mark.parametrize("compiled", BOTH)
def test_first_non_none_rule_wins_and_returning_self_is_no_change(compiled):
    pm = PatternMatcher([
        (UPat(Ops.ADD, name="u"), lambda u: u),
        (UPat(Ops.ADD, name="u"), lambda u: None),
        (UPat(Ops.ADD, name="u"), lambda u: u.src[0]),
        (UPat(Ops.ADD, name="u"), lambda u: u.src[1]),
    ], compiled=compiled)
    assert pm.rewrite(x_ + y_) is x_


@pytest.mark.parametrize("compiled", BOTH)
def test_alternatives_and_repeated_sources(compiled):
    pm = PatternMatcher([
        (UPat.any(UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar())), UPat(Ops.IDIV, src=(UPat.var("a"), UPat.cvar()))),
         lambda a: a),
        (UPat(Ops.SINK, src=UPat(Ops.CONST), name="s"), lambda s: s.src[0]),  # every source a CONST
    ], compiled=compiled)
    assert pm.rewrite(x_ * 3) is x_ and pm.rewrite(x_ // 3) is x_ and pm.rewrite(x_ + 3) is None
    c = x_.const_like(1)
    assert pm.rewrite(UOp.sink(c, c.const_like(2))) is c
    assert pm.rewrite(UOp.sink(c, x_)) is None


def test_upat_operators_build_patterns():
    p = UPat.var("a") * 2 + 1
    assert p.op == {Ops.ADD} and p.orders is not None and len(p.orders) == 2
    inner = p.orders[0][0]
    assert inner.op == {Ops.MUL}
    assert "ADD" in repr(p)


def test_rule_parameters_must_be_bound():
    with pytest.raises(TypeError, match="not bound"):
        PatternMatcher([(UPat(Ops.ADD), lambda missing: None)])


def test_matchers_compose_with_plus():
    a = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda u: u.src[0])])
    b = PatternMatcher([(UPat(Ops.MUL, name="u"), lambda u: u.src[1])])
    both = a + b
    assert len(both) == 2
    assert both.rewrite(x_ + y_) is x_ and both.rewrite(x_ * y_) is y_


def test_rules_are_compiled_to_python():
    pm = PatternMatcher([(UPat.var("a") + UPat.cvar("c"), lambda a, c: a)])
    pm.rewrite(x_ + 1)
    source = pm.rules[0].compiled.source  # type: ignore[attr-defined]
    assert "def match" in source and ".src" in source


def _random_int_graph(rng: random.Random, depth: int) -> UOp:
    vs = [UOp.variable("a", 0, 7), UOp.variable("b", -4, 4), UOp.range(16, AxisArg(0, RangeKind.GLOBAL))]
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(vs) if rng.random() < 0.6 else UOp.const(dtypes.int32, rng.randint(-8, 8))
    a, b = _random_int_graph(rng, depth - 1), _random_int_graph(rng, depth - 1)
    kind = rng.randrange(8)
    if kind == 0:
        return a + b
    if kind == 1:
        return a - b
    if kind == 2:
        return a * b
    if kind == 3:
        return a // rng.choice([1, 2, 3, 4, -2, 8])
    if kind == 4:
        return a % rng.choice([1, 2, 3, 4, -3, 16])
    if kind == 5:
        return a.maximum(b)
    if kind == 6:
        return (a < b).where(a, b)
    return (a.ne(b) & (a < 3)).where(a, b)


def test_compiled_matcher_agrees_with_interpreter():
    """Every node of random graphs: the symbolic rules give the same answer on both paths."""
    rng = random.Random(1234)
    interp = symbolic.interpreted()
    checked = 0
    for _ in range(150):
        g = _random_int_graph(rng, 5)
        for n in g.toposort:
            assert symbolic.rewrite(n) is interp.rewrite(n), n.render()
            checked += 1
    assert checked > 1000

"""graph_rewrite: order of visits, fixed points, cycles, deep graphs, logging."""

from __future__ import annotations

import pytest

from tgcore.dtype import dtypes
from tgcore.uop import Ops, PatternMatcher, RewriteCycleError, UOp, UPat, graph_rewrite
from tgcore.uop.rewrite import graph_rewrite_map

x_ = UOp.variable("x", 0, 10)
y_ = UOp.variable("y", 0, 10)


def _recorder(order: list[str]) -> PatternMatcher:
    def record(u):
        order.append(u.render())
        return None
    return PatternMatcher([(UPat((Ops.ADD, Ops.MUL), name="u"), record)])


def test_default_visits_sources_first():
    order: list[str] = []
    graph_rewrite((x_ + 1) * (y_ + 2), _recorder(order))
    assert order == ["(x+1)", "(y+2)", "((x+1)*(y+2))"]


def test_bottom_up_visits_the_node_first():
    order: list[str] = []
    graph_rewrite((x_ + 1) * (y_ + 2), _recorder(order), bottom_up=True)
    assert order == ["((x+1)*(y+2))", "(x+1)", "(y+2)"]


def test_bottom_up_sees_the_parent_before_its_sources_change():
    # rule on MUL(ADD(..), c) only matches before the ADD below is rewritten away
    pm = PatternMatcher([
        (UPat(Ops.MUL, src=(UPat(Ops.ADD, name="a"), UPat.cvar("c"))), lambda a, c: a.src[0]),
        (UPat(Ops.ADD, src=(UPat.var("v"), UPat.cvar())), lambda v: v),
    ])
    e = (x_ + 1) * 3
    assert graph_rewrite(e, pm, bottom_up=True) is x_
    assert graph_rewrite(e, pm) is x_ * 3


def test_rewrites_reach_a_fixed_point():
    # x + c -> x + (c - 1) until c == 0, then x + 0 -> x: many steps on the same node
    pm = PatternMatcher([
        (UPat.var("a") + UPat.cvar("c"), lambda a, c: a if c.arg == 0 else a + (c.arg - 1)),
    ])
    for bottom_up in (False, True):
        out = graph_rewrite(UOp.sink(x_ + 50, (y_ + 3) * (x_ + 2)), pm, bottom_up=bottom_up)
        assert out is UOp.sink(x_, y_ * x_)


def test_new_sources_are_rewritten_too():
    # the rule creates nodes that themselves need rewriting
    pm = PatternMatcher([
        (UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c"))),
         lambda a, c: (a * (c.arg // 2)) + (a * (c.arg - c.arg // 2)) if c.arg > 1 else None),
        (UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c"))), lambda a, c: a if c.arg == 1 else None),
    ])
    out = graph_rewrite(x_ * 4, pm)
    assert out.render() == "((x+x)+(x+x))"


def test_ctx_reaches_rules():
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: ctx.get(v))])
    assert graph_rewrite(x_ + y_, pm, ctx={x_: y_}) is y_ + y_


def test_cycle_is_detected_with_a_clear_error():
    a, b = UOp.variable("a", 0, 1), UOp.variable("b", 0, 1)
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: b if v is a else a)])
    with pytest.raises(RewriteCycleError, match="cycle"):
        graph_rewrite(a + 1, pm)
    with pytest.raises(RewriteCycleError, match="cycle"):
        graph_rewrite(a + 1, pm, bottom_up=True)


def test_growing_rewrite_is_a_cycle():
    # x -> x + 0 contains x again: rewriting would never end
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: v.cast(dtypes.int64))])
    with pytest.raises(RewriteCycleError) as info:
        graph_rewrite(x_ * 2, pm)
    assert "test_rewrite.py" in str(info.value)  # names the rule


def test_200k_node_chain_does_not_recurse():
    e = x_
    for i in range(200_000):
        e = e + (i % 3)
    pm = PatternMatcher([  # fold (a + c1) + c2 -> a + (c1 + c2) while walking the chain
        (UPat(Ops.ADD, src=(UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("c1"))), UPat.cvar("c2"))),
         lambda a, c1, c2: a + (c1.arg + c2.arg)),
    ])
    out = graph_rewrite(e, pm)
    assert out is x_ + sum(i % 3 for i in range(200_000))
    assert graph_rewrite(e, PatternMatcher([]), bottom_up=True) is e


def test_rewrite_log(monkeypatch, capsys):
    monkeypatch.setenv("TG_REWRITE_LOG", "1")
    pm = PatternMatcher([(UPat.var("a") + 0, lambda a: a)])
    graph_rewrite((x_ + 0) * 2, pm, name="demo")
    err = capsys.readouterr().err
    assert "[demo]" in err and "test_rewrite.py" in err and "(x+0) -> x" in err


def test_graph_rewrite_map_shares_work():
    pm = PatternMatcher([(UPat.var("a") * 1, lambda a: a)])
    out = graph_rewrite_map([x_ * 1, (x_ * 1) + y_], pm)
    assert out == {x_ * 1: x_, (x_ * 1) + y_: x_ + y_}


def test_rules_must_return_uops():
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR), lambda: 3)])
    with pytest.raises(TypeError, match="not a UOp"):
        graph_rewrite(x_ + 1, pm)

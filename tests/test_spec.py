"""type_verify with the shared specs: well-formed graphs pass, malformed nodes are named."""

from __future__ import annotations

import pytest

from tgcore.dtype import dtypes
from tgcore.uop import Ops, PatternMatcher, SpecError, UOp, UPat, graph_rewrite, spec_alu, spec_ir, type_verify

x = UOp.variable("x", 0, 10)


def test_well_formed_graphs_pass():
    g = UOp.special(16, "gidx0")
    e = ((g * 4 + x) // 3 % 5 < 2).where(x.cast(dtypes.float32), 1.5)
    type_verify(e, spec_alu)
    type_verify(list(e.toposort), spec_alu)
    type_verify(UOp.sink(e.cast(dtypes.int32), x.bind(3)), spec_alu)
    type_verify(UOp(Ops.RESHAPE, dtypes.float32, (e,), (4, 4)), spec_ir)  # spec_ir allows other ops


@pytest.mark.parametrize("bad", [
    lambda: UOp(Ops.ADD, dtypes.int32, (x, UOp.const(dtypes.int64, 1))),  # operand dtypes differ
    lambda: UOp(Ops.CMPLT, dtypes.int32, (x, x)),  # comparison not bool
    lambda: UOp(Ops.IDIV, dtypes.float32, (x.cast(dtypes.float32), x.cast(dtypes.float32))),  # // on floats
    lambda: UOp(Ops.WHERE, dtypes.int32, (x, x, x)),  # condition not bool
    lambda: UOp(Ops.CONST, dtypes.int32, (), 1.5),  # float arg for an int constant
    lambda: UOp(Ops.CONST, dtypes.int8, (), 300),  # out of range
    lambda: UOp(Ops.DEFINE_VAR, dtypes.int32, (), ("v", 5, 1)),  # empty range
    lambda: UOp(Ops.BIND, dtypes.int32, (x, x)),  # bound to a non-constant
    lambda: UOp(Ops.BITCAST, dtypes.int64, (x,)),  # size change
    lambda: UOp(Ops.VECTORIZE, dtypes.int32.vec(3), (x, x)),  # wrong lane count
    lambda: UOp(Ops.GEP, dtypes.int32, (UOp.vectorize(x, x),), (5,)),  # lane out of range
    lambda: UOp(Ops.SINK, dtypes.int32, (x,)),
])
def test_malformed_nodes_are_rejected(bad):
    with pytest.raises(SpecError, match="not allowed"):
        type_verify(UOp.sink(bad()) if bad().op is not Ops.SINK else bad(), spec_ir)


def test_stage_specs_compose():
    no_div = PatternMatcher([(UPat(Ops.IDIV), lambda: False)]) + spec_alu
    type_verify(x + 1, no_div)
    with pytest.raises(SpecError, match="IDIV"):
        type_verify(x // 2 + 1, no_div)


def test_graph_rewrite_checks_its_output_when_spec_is_on(monkeypatch):
    bad_rule = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda u: UOp(Ops.CMPLT, dtypes.int32, u.src))])
    monkeypatch.setenv("TG_SPEC", "1")
    with pytest.raises(SpecError):
        graph_rewrite(x + 1, bad_rule)
    monkeypatch.setenv("TG_SPEC", "0")
    graph_rewrite(x + 1, bad_rule)

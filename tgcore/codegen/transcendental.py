"""The pass that replaces EXP2 / LOG2 / SIN by basic ALU ops, for renderers without native ones.

In:  a kernel SINK (or any UOp graph) that may hold EXP2 / LOG2 / SIN nodes on float dtypes.
Out: ``decompose_transcendentals(sink)``: the same graph with those nodes replaced by the formulas of
     `tgcore.uop.transcendental` (range reduction and polynomials from ADD, SUB, MUL, FDIV, CMPLT, CMPEQ, WHERE,
     TRUNC, CAST, BITCAST and integer ADD / MUL / SHL / SHR / AND), which the tensor front end shares.
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.uop import Ops, PatternMatcher, UOp, UPat, graph_rewrite
from tgcore.uop.transcendental import SIN_ACCURATE_LIMIT, exp2, log2, sin

__all__ = ["decompose_transcendentals", "transcendental_rules", "SIN_ACCURATE_LIMIT"]

FLOAT_DTYPES = tuple(dt for dt in dtypes.fields().values() if dtypes.is_float(dt) and dt.count == 1)

transcendental_rules = PatternMatcher([
    # EXP2(x) -> exponent bits * polynomial of the fraction
    (UPat(Ops.EXP2, FLOAT_DTYPES, src=(UPat.var("x"),)), lambda x: exp2(x)),
    # LOG2(x) -> exponent from the bits + log of the mantissa
    (UPat(Ops.LOG2, FLOAT_DTYPES, src=(UPat.var("x"),)), lambda x: log2(x)),
    # SIN(x) -> Cody-Waite reduction by pi/2 + sin/cos polynomials by quadrant
    (UPat(Ops.SIN, FLOAT_DTYPES, src=(UPat.var("x"),)), lambda x: sin(x)),
])


def decompose_transcendentals(sink: UOp) -> UOp:
    """``sink`` with every scalar EXP2 / LOG2 / SIN replaced by basic ALU ops."""
    if not any(u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN) for u in sink.toposort):
        return sink
    return graph_rewrite(sink, transcendental_rules, name="decompose transcendentals")

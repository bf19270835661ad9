"""The graph IR: Ops, UOp, patterns, graph rewriting, symbolic simplification and specs.

In:  nothing at import time (pure Python, no devices).
Out: the public names below; see each module's docstring for what comes in and goes out:
     ops.py (Ops, GroupOp), axis.py (AxisArg, RangeKind: a RANGE's arg), uop.py (UOp), pattern.py (UPat,
     PatternMatcher), rewrite.py (graph_rewrite),
     symbolic.py (simplification rules), bounds.py (vmin/vmax), alu.py (constant semantics),
     sint.py (symbolic-int helpers), spec.py (type_verify), render.py (debug strings), shape.py (shapes of
     tensor-level nodes), and the op surface UOp shares with Tensor: mixins.py (elementwise), movement.py,
     reduction.py, transcendental.py (math formulas).
"""

from tgcore.uop.alu import UndefinedOp, c_div, c_mod, exec_alu
from tgcore.uop.axis import AxisArg, RangeKind, SplitPart
from tgcore.uop.ops import GroupOp, Ops
from tgcore.uop.pattern import PatternMatcher, UPat
from tgcore.uop.rewrite import RewriteCycleError, graph_rewrite, graph_rewrite_map
from tgcore.uop.sint import resolve, smax, smin, sprod, ssimplify, sym_infer
from tgcore.uop.spec import SpecError, spec_alu, spec_ir, type_verify
from tgcore.uop.symbolic import symbolic, symbolic_simple
from tgcore.uop.uop import UOp, consumer_map, sint

__all__ = ["AxisArg", "GroupOp", "Ops", "PatternMatcher", "RangeKind", "RewriteCycleError", "SpecError", "SplitPart",
           "UOp", "UPat", "UndefinedOp", "c_div", "c_mod", "consumer_map", "exec_alu", "graph_rewrite",
           "graph_rewrite_map", "resolve", "sint", "smax", "smin", "spec_alu", "spec_ir", "sprod", "ssimplify",
           "sym_infer", "symbolic", "symbolic_simple", "type_verify"]

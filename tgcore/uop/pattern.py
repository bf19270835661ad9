"""UPat (patterns over UOps) and PatternMatcher (a table of rewrite rules).

In:  rules as data: a list of `(UPat, fn)`. `fn` receives the names the pattern bound as keyword
     arguments (plus `ctx` when it has a parameter of that name) and returns a replacement or None.
Out: `PatternMatcher.rewrite(uop, ctx)`: the first non-None result of a rule matching `uop`, or None.

A UPat matches on op (one or a set), dtype (one or a set), arg (equality), sources (a tuple matched
in order; a two-source commutative op also tries the swapped order unless `ordered=True`;
`allow_any_len` matches a prefix; a single UPat matches every source), and binds names; a name used
twice must bind the same node.

Rules are indexed by op. In compiled mode (the default) all rules of an op are fused into one
generated Python function (nested `if`s, one per check) — the fast path. `compiled=False`, or env
`TG_PM_INTERP=1`, runs the plain recursive interpreter instead; both must agree (tests check it).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tgcore.dtype import DType
from tgcore.uop.ops import GroupOp, Ops
from tgcore.uop.uop import UOp

RuleFn = Callable[..., Any]
Store = dict[str, UOp]


def _as_set(x: Any) -> frozenset | None:
    if x is None:
        return None
    if isinstance(x, (Ops, DType)):
        return frozenset((x,))
    return frozenset(x)


class UPat:
    """A pattern over UOps. Fields left as None match anything."""

    def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
                 src: UPat | Sequence[UPat] | None = None, arg: Any = None, name: str | None = None,
                 allow_any_len: bool = False, alternatives: Sequence[UPat] | None = None, ordered: bool = False):
        self.op: frozenset[Ops] | None = _as_set(op)
        self.dtype: frozenset[DType] | None = _as_set(dtype)
        self.arg = arg
        self.name = name
        self.allow_any_len = allow_any_len
        self.alternatives = tuple(alternatives) if alternatives is not None else None
        # src is stored as: None (any), a UPat (every source matches it), or a list of orders to try
        self.repeat: UPat | None = src if isinstance(src, UPat) else None
        self.orders: list[tuple[UPat, ...]] | None = None
        if src is not None and not isinstance(src, UPat):
            order = tuple(src)
            self.orders = [order]
            commutative = self.op is not None and self.op <= GroupOp.Commutative
            if commutative and not ordered and len(order) == 2 and order[0] is not order[1]:
                self.orders.append((order[1], order[0]))

    # -- constructors --

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any node, bound to `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """A CONST, bound to `name`."""
        return UPat(Ops.CONST, dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat:
        """A CONST with this value (`==`, so 1 also matches 1.0 and True)."""
        return UPat(Ops.CONST, dtype, arg=value)

    @staticmethod
    def any(*pats: UPat, name: str | None = None) -> UPat:
        """Matches when any of `pats` matches (each is tried)."""
        if name is not None:
            pats = tuple(p.named(name) for p in pats)
        return UPat(alternatives=pats)

    def named(self, name: str) -> UPat:
        """A copy of this pattern that binds `name`."""
        out = UPat.__new__(UPat)
        out.__dict__.update(self.__dict__)
        out.name = name
        return out

    # -- pattern building with operators (only for readability of rule tables) --

    @staticmethod
    def _lift(x: Any) -> UPat:
        return x if isinstance(x, UPat) else UPat.const(None, x)

    def alu(self, op: Ops, *src: Any) -> UPat:
        return UPat(op, None, (self, *(UPat._lift(s) for s in src)))

    def __add__(self, x: Any) -> UPat:
        return self.alu(Ops.ADD, x)

    def __radd__(self, x: Any) -> UPat:
        return UPat._lift(x).alu(Ops.ADD, self)

    def __mul__(self, x: Any) -> UPat:
        return self.alu(Ops.MUL, x)

    def __rmul__(self, x: Any) -> UPat:
        return UPat._lift(x).alu(Ops.MUL, self)

    def __floordiv__(self, x: Any) -> UPat:
        return self.alu(Ops.IDIV, x)

    def __mod__(self, x: Any) -> UPat:
        return self.alu(Ops.MOD, x)

    def __lt__(self, x: Any) -> UPat:
        return self.alu(Ops.CMPLT, x)

    def __and__(self, x: Any) -> UPat:
        return self.alu(Ops.AND, x)

    def __or__(self, x: Any) -> UPat:
        return self.alu(Ops.OR, x)

    def __xor__(self, x: Any) -> UPat:
        return self.alu(Ops.XOR, x)

    def ne(self, x: Any) -> UPat:
        return self.alu(Ops.CMPNE, x)

    def eq(self, x: Any) -> UPat:
        return self.alu(Ops.CMPEQ, x)

    def maximum(self, x: Any) -> UPat:
        return self.alu(Ops.MAX, x)

    def where(self, a: Any, b: Any) -> UPat:
        return self.alu(Ops.WHERE, a, b)

    def cast(self, dtype: DType | Iterable[DType] | None = None, name: str | None = None) -> UPat:
        return UPat(Ops.CAST, dtype, (self,), name=name)

    def __repr__(self) -> str:
        if self.alternatives is not None:
            return f"UPat.any({', '.join(map(repr, self.alternatives))})"
        parts = []
        if self.op is not None:
            parts.append("{" + ", ".join(sorted(o.name for o in self.op)) + "}")
        if self.dtype is not None:
            parts.append("dtype=" + "|".join(sorted(repr(d) for d in self.dtype)))
        if self.arg is not None:
            parts.append(f"arg={self.arg!r}")
        if self.name is not None:
            parts.append(f"name={self.name!r}")
        if self.orders is not None:
            parts.append(f"src={self.orders[0]!r}" + ("+" if self.allow_any_len else ""))
        if self.repeat is not None:
            parts.append(f"src=*{self.repeat!r}")
        return f"UPat({', '.join(parts)})"

    # -- the interpreter --

    def match(self, u: UOp, store: Store) -> list[Store]:
        """Every way this pattern matches `u`, as name -> node maps extending `store`."""
        if self.alternatives is not None:
            return [found for alt in self.alternatives for found in alt.match(u, store)]
        if self.op is not None and u.op not in self.op:
            return []
        if self.dtype is not None and u.dtype not in self.dtype:
            return []
        if self.arg is not None and not _arg_equal(u.arg, self.arg):
            return []
        if self.name is not None:
            bound = store.get(self.name)
            if bound is not None and bound is not u:
                return []
            store = {**store, self.name: u}
        if self.repeat is not None:
            stores = [store]
            for s in u.src:
                stores = [found for st in stores for found in self.repeat.match(s, st)]
            return stores
        if self.orders is None:
            return [store]
        out: list[Store] = []
        for order in self.orders:
            if len(u.src) != len(order) and not (self.allow_any_len and len(u.src) >= len(order)):
                continue
            stores = [store]
            for p, s in zip(order, u.src, strict=False):
                stores = [found for st in stores for found in p.match(s, st)]
                if not stores:
                    break
            out.extend(stores)
        return out

    def required_names(self) -> set[str]:
        """Names bound on every successful match."""
        if self.alternatives is not None:
            sets = [a.required_names() for a in self.alternatives]
            return set.intersection(*sets) if sets else set()
        names = {self.name} if self.name is not None else set()
        if self.orders is not None:
            for p in self.orders[0]:
                names |= p.required_names()
        return names

    def top_ops(self) -> frozenset[Ops] | None:
        """The ops a node must have for this pattern to match it (None: any op)."""
        if self.alternatives is None:
            return self.op
        found: set[Ops] = set()
        for alt in self.alternatives:
            ops = alt.top_ops()
            if ops is None:
                return None
            found |= ops
        return frozenset(found)


def _arg_equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


# ------------------------------------------------------------------------------------------------ compiling

class _CannotCompile(Exception):
    pass


class _MatchCompiler:
    """Generates the source of a `match(u, ctx)` function running one or more rules in order.

    Each rule becomes nested `if`s (one per pattern node: op, dtype, arg, same-name and source-count
    checks), ending in a call of the rule function; a result other than None or `u` is returned.
    The op of the top node is not checked: callers only run a function on nodes of the right op.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.globals: dict[str, Any] = {"_arg_equal": _arg_equal}
        self.count = 0

    def add_rule(self, rule: Rule) -> None:
        """Append the code of `rule`; a pattern the compiler cannot express calls the interpreter instead."""
        mark = len(self.lines)
        self.fn = self.constant(rule.fn)
        self.params = rule.signature
        try:
            self.emit(rule.pat, "u", {}, 1, top=True)
        except _CannotCompile:
            del self.lines[mark:]
            self.line(1, f"r = {self.constant(rule.interpret)}(u, ctx)")
            self.line(1, "if r is not None and r is not u:")
            self.line(2, "return r")

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def constant(self, value: Any) -> str:
        name = self.fresh("K")
        self.globals[name] = value
        return name

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def emit(self, pat: UPat, var: str, bound: dict[str, str], depth: int, top: bool = False,
             rest: Callable[[dict[str, str], int], None] | None = None) -> None:
        """Emit checks of `pat` against the local `var`, then `rest` (the remaining checks) inside them."""
        if pat.alternatives is not None:
            for alt in pat.alternatives:
                self.emit(alt, var, bound, depth, False, rest)
            return
        if pat.repeat is not None:
            raise _CannotCompile("a single pattern for all sources")
        conds = []
        if pat.op is not None and not top:
            conds.append(f"{var}.op is {self.constant(next(iter(pat.op)))}" if len(pat.op) == 1
                         else f"{var}.op in {self.constant(pat.op)}")
        if pat.dtype is not None:
            conds.append(f"{var}.dtype is {self.constant(next(iter(pat.dtype)))}" if len(pat.dtype) == 1
                         else f"{var}.dtype in {self.constant(pat.dtype)}")
        if pat.arg is not None:
            arg = self.constant(pat.arg)
            plain = type(pat.arg) in (int, bool, str) or isinstance(pat.arg, Ops)
            conds.append(f"{var}.arg == {arg}" if plain else f"_arg_equal({var}.arg, {arg})")
        if pat.name is not None:
            if pat.name in bound:
                conds.append(f"{var} is {bound[pat.name]}")
            else:
                bound = {**bound, pat.name: var}
        if pat.orders is not None:
            srcs = self.fresh("s")
            self.line(depth, f"{srcs} = {var}.src")
            compare = ">=" if pat.allow_any_len else "=="
            conds.append(f"len({srcs}) {compare} {len(pat.orders[0])}")
        if conds:
            self.line(depth, f"if {' and '.join(conds)}:")
            depth += 1
        if pat.orders is None:
            self.finish(bound, depth, rest)
            return
        for order in pat.orders:
            self.emit_sources(order, srcs, 0, bound, depth, rest)

    def emit_sources(self, order: tuple[UPat, ...], srcs: str, i: int, bound: dict[str, str], depth: int,
                     rest: Callable[[dict[str, str], int], None] | None) -> None:
        if i == len(order):
            self.finish(bound, depth, rest)
            return
        child = self.fresh("v")
        self.line(depth, f"{child} = {srcs}[{i}]")
        self.emit(order[i], child, bound, depth, False,
                  lambda b, d: self.emit_sources(order, srcs, i + 1, b, d, rest))

    def finish(self, bound: dict[str, str], depth: int, rest: Callable[[dict[str, str], int], None] | None) -> None:
        if rest is not None:
            rest(bound, depth)
            return
        missing = [p for p in self.params if p not in bound and p != "ctx"]
        if missing:
            raise _CannotCompile(f"names {missing} not bound on every path")
        args = ["ctx" if p == "ctx" else bound[p] for p in self.params]  # positional, in the signature's order
        self.line(depth, f"r = {self.fn}({', '.join(args)})")
        self.line(depth, "if r is not None and r is not u:")
        self.line(depth + 1, "return r")

    def build(self, name: str = "match") -> Callable[[UOp, Any], Any]:
        body = "\n".join(self.lines) if self.lines else "    pass"
        source = f"def {name}(u, ctx):\n{body}\n    return None\n"
        namespace = dict(self.globals)
        exec(compile(source, f"<{name}>", "exec"), namespace)  # noqa: S102 - generated from our own templates
        fn = namespace[name]
        fn.source = source
        return fn


# ------------------------------------------------------------------------------------------------ matcher

class Rule:
    """One `(UPat, fn)` entry of a PatternMatcher, with both ways of running it."""

    def __init__(self, pat: UPat, fn: RuleFn):
        self.pat, self.fn = pat, fn
        sig = inspect.signature(fn)
        self.wants_ctx = "ctx" in sig.parameters
        self.signature = list(sig.parameters)
        self.params = [p for p in self.signature if p != "ctx"]
        unknown = set(self.params) - pat.required_names()
        if unknown:
            raise TypeError(f"rule {self.where()}: parameters {sorted(unknown)} are not bound by {pat!r}")
        self._compiled: Callable[[UOp, Any], Any] | None = None

    def where(self) -> str:
        code = getattr(self.fn, "__code__", None)
        if code is None:
            return repr(self.fn)
        return f"{getattr(self.fn, '__name__', 'fn')} at {os.path.basename(code.co_filename)}:{code.co_firstlineno}"

    def interpret(self, u: UOp, ctx: Any) -> Any:
        for store in self.pat.match(u, {}):
            args = {p: store[p] for p in self.params}
            r = self.fn(**args, ctx=ctx) if self.wants_ctx else self.fn(**args)
            if r is not None:
                return r
        return None

    @property
    def compiled(self) -> Callable[[UOp, Any], Any]:
        """This rule alone as generated code (used for tracing which rule fired)."""
        if self._compiled is None:
            mc = _MatchCompiler()
            mc.add_rule(self)
            self._compiled = mc.build()
        return self._compiled


_matcher_ids = itertools.count()


def _default_compiled() -> bool:
    return os.environ.get("TG_PM_INTERP", "0") in ("", "0")


class PatternMatcher:
    """An ordered table of rewrite rules, indexed by the op of the node they match."""

    def __init__(self, rules: Iterable[Any], compiled: bool | None = None):
        """`rules`: `(UPat, fn)` pairs (or `Rule`s); `compiled=None` follows env TG_PM_INTERP."""
        self.rules: list[Rule] = [r if isinstance(r, Rule) else Rule(*r) for r in rules]
        self.compiled = _default_compiled() if compiled is None else compiled
        self.fixed_point_key: str | None = None  # see remember_fixed_points
        self._by_op: dict[Ops, Callable[[UOp, Any], Any]] | None = None
        self._by_op_traced: dict[Ops, list[int]] | None = None

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules, self.compiled)

    def __len__(self) -> int:
        return len(self.rules)

    def remember_fixed_points(self) -> PatternMatcher:
        """Let graph_rewrite mark the nodes it finds in normal form under this matcher, on the node, so
        a later rewrite with this matcher skips them and everything under them (simplifying ``x + 1``
        where ``x`` is already simple looks at one node). Only for matchers whose rules read nothing but
        the node (no ``ctx``): then a normal form stays one. Returns self."""
        wants_ctx = [rule.where() for rule in self.rules if rule.wants_ctx]
        if wants_ctx:
            raise ValueError(f"rules reading ctx can not remember fixed points: {wants_ctx}")
        self.fixed_point_key = f"_normal{next(_matcher_ids)}"
        return self

    def interpreted(self) -> PatternMatcher:
        """The same rules, run by the plain interpreter (for debugging and comparison)."""
        return PatternMatcher(self.rules, compiled=False)

    def _rules_for(self, op: Ops) -> list[int]:
        return [i for i, rule in enumerate(self.rules) if (ops := rule.pat.top_ops()) is None or op in ops]

    def _index(self) -> dict[Ops, Callable[[UOp, Any], Any]]:
        """One function per op, built on first use. Compiled: all that op's rules fused into generated code."""
        self._by_op = _OpIndex(self)
        return self._by_op

    def _build(self, op: Ops) -> Callable[[UOp, Any], Any]:
        rules = [self.rules[i] for i in self._rules_for(op)]
        if not self.compiled:
            return functools.partial(_interpret_rules, rules)
        mc = _MatchCompiler()
        for rule in rules:
            mc.add_rule(rule)
        return mc.build(f"match_{op.name}")

    def _traced_index(self) -> dict[Ops, list[int]]:
        if self._by_op_traced is None:
            self._by_op_traced = {op: self._rules_for(op) for op in Ops}
        return self._by_op_traced

    def rewrite(self, u: UOp, ctx: Any = None) -> Any:
        """The result of the first rule that matches `u` and returns something other than None or `u`."""
        by_op = self._by_op if self._by_op is not None else self._index()
        return by_op[u.op](u, ctx)

    def rewrite_traced(self, u: UOp, ctx: Any = None) -> tuple[Rule, Any] | None:
        """Like `rewrite`, but also says which rule fired (slower: one rule at a time)."""
        for i in self._traced_index()[u.op]:
            rule = self.rules[i]
            r = rule.compiled(u, ctx) if self.compiled else rule.interpret(u, ctx)
            if r is not None and r is not u:
                return rule, r
        return None


class _OpIndex(dict):
    """op -> match function, building each op's function the first time a node of that op is seen."""

    def __init__(self, pm: PatternMatcher):
        super().__init__()
        self.pm = pm

    def __missing__(self, op: Ops) -> Callable[[UOp, Any], Any]:
        fn = self[op] = self.pm._build(op)
        return fn


def _interpret_rules(rules: list[Rule], u: UOp, ctx: Any) -> Any:
    for rule in rules:
        r = rule.interpret(u, ctx)
        if r is not None and r is not u:
            return r
    return None

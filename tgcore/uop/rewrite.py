"""graph_rewrite: apply a PatternMatcher to a whole graph until nothing changes.

In:  a root UOp (usually a SINK), a PatternMatcher, an optional `ctx` passed to rules that ask for it.
Out: the rewritten root. Every node of the result is a fixed point: no rule fires on it.

Order. By default a node's sources are rewritten before the node (leaves first), then the rules are
tried on the rebuilt node; when one fires, its result is rewritten the same way. With
`bottom_up=True` the rules are first applied to a node until none fires, and only then are its
sources visited ("bottom" is the SINK end of the graph, where printing starts); the rebuilt node is
then visited again. Both walks use an explicit stack, so deep graphs are fine.

A rule whose result leads back to a node still being rewritten is a cycle: it raises
`RewriteCycleError` naming the rules involved. `TG_REWRITE_LOG=1` prints every rule that fires; with `VIZ=1`
each pass run while a kernel is lowered is recorded with the rules that fired (`tgcore.uop.trace`).
"""

from __future__ import annotations

import os
import sys
from collections import deque
from typing import Any

from tgcore.helpers import cyclic_gc_paused
from tgcore.uop import trace
from tgcore.uop.pattern import PatternMatcher
from tgcore.uop.uop import UOp


class RewriteCycleError(RuntimeError):
    """graph_rewrite found rules that keep rewriting a node into itself."""


def _spec_enabled() -> bool:
    return os.environ.get("TG_SPEC", "0") not in ("", "0")


def _log_enabled() -> bool:
    return os.environ.get("TG_REWRITE_LOG", "0") not in ("", "0")


class GraphRewriter:
    """One rewrite session: a memo of finished nodes shared by every `run`; `count` = rules fired."""

    def __init__(self, pm: PatternMatcher, ctx: Any, bottom_up: bool, name: str, count_rules: bool = False):
        self.pm, self.ctx, self.bottom_up, self.name = pm, ctx, bottom_up, name
        self.print_rules = _log_enabled()
        self.rules: dict[str, int] | None = {} if count_rules else None  # rule -> times it fired (VIZ)
        self.log = self.print_rules or count_rules  # find out which rule fired (the slower path)
        self.fired: deque[tuple[UOp, UOp]] = deque(maxlen=8)  # the latest firings, for cycle reports
        self.count = 0
        self.done: dict[UOp, UOp] = {}  # node -> its final rewrite
        self.active: set[UOp] = set()  # nodes whose rewrite is in progress
        # nodes known to be in normal form carry this key in their __dict__ (PatternMatcher.remember_fixed_points)
        self.normal = pm.fixed_point_key if not self.log else None

    def apply(self, u: UOp) -> UOp | None:
        """One rule application at `u` (None when nothing fires)."""
        if self.log:
            traced = self.pm.rewrite_traced(u, self.ctx)
            if traced is None:
                return None
            rule, r = traced
            if self.print_rules:
                print(f"[{self.name}] {rule.where()}: {u.render()} -> {r.render()}", file=sys.stderr)
            if self.rules is not None:
                where = rule.where()
                self.rules[where] = self.rules.get(where, 0) + 1
        else:
            r = self.pm.rewrite(u, self.ctx)
            if r is None:
                return None
        if not isinstance(r, UOp):
            raise TypeError(f"graph_rewrite({self.name}): a rule returned {type(r).__name__}, not a UOp")
        self.count += 1
        self.fired.append((u, r))
        return r

    def cycle(self, u: UOp) -> RewriteCycleError:
        lines = []
        for before, after in self.fired:
            traced = self.pm.rewrite_traced(before, self.ctx)
            rule = traced[0].where() if traced is not None else "?"
            lines.append(f"  {rule}: {_short(before)} -> {_short(after)}")
        return RewriteCycleError(f"graph_rewrite({self.name}): rewrite cycle at {_short(u)}: the rules rewrite it "
                                 "into a graph that contains it again. Latest rewrites:\n" + "\n".join(lines))

    def run(self, root: UOp) -> UOp:
        done, active, normal, bottom_up = self.done, self.active, self.normal, self.bottom_up
        # the matcher's per-op functions, called here directly (``apply`` when logging)
        by_op = None if self.log else (self.pm._by_op if self.pm._by_op is not None else self.pm._index())
        ctx = self.ctx
        # stack entries: (node, stage, current). stage 0: enter; 1: sources done; 2: result of `current` is ours
        stack: list[tuple[UOp, int, UOp]] = [(root, 0, root)]
        while stack:
            n, stage, cur = stack.pop()
            if stage == 0:
                if n in done:
                    continue
                if normal is not None and normal in n.__dict__:
                    done[n] = n
                    continue
                if n in active:
                    raise self.cycle(n)
                active.add(n)
                if bottom_up:
                    cur = self.fixed_point_here(n)
                    if cur is not n and cur in active:
                        raise self.cycle(cur)
                    if cur is not n and cur in done:
                        stack.append((n, 2, cur))
                        continue
                stack.append((n, 1, cur))
                for s in reversed(cur.src):
                    if s not in done:
                        stack.append((s, 0, s))
            elif stage == 1:
                new_src = tuple([done[s] for s in cur.src])
                if new_src == cur.src:  # UOps compare by identity, so this is a C-level identity check
                    if bottom_up:
                        r = None
                    elif by_op is None:
                        r = self.apply(cur)
                    else:  # apply() without the call
                        r = by_op[cur.op](cur, ctx)
                        if r is not None:
                            if not isinstance(r, UOp):
                                raise TypeError(f"graph_rewrite({self.name}): a rule returned {type(r).__name__}, "
                                                "not a UOp")
                            self.count += 1
                            self.fired.append((cur, r))
                    if r is None:  # finish(n, cur)
                        done[n] = cur
                        done[cur] = cur
                        active.discard(n)
                        if normal is not None:  # no rule fires here and the sources are normal forms
                            cur.__dict__[normal] = True
                        continue
                else:
                    r = UOp(cur.op, cur.dtype, new_src, cur.arg, cur.tag)
                if r in done:
                    self.finish(n, done[r], done, active)
                    continue
                stack.append((n, 2, r))
                stack.append((r, 0, r))
            else:
                self.finish(n, done[cur], done, active)
        return done[root]

    def fixed_point_here(self, n: UOp) -> UOp:
        """Apply rules at `n` (not its sources) until none fires."""
        seen = {n}
        cur = n
        while (r := self.apply(cur)) is not None:
            if r in seen:
                raise self.cycle(r)
            seen.add(r)
            cur = r
        return cur

    @staticmethod
    def finish(n: UOp, result: UOp, done: dict[UOp, UOp], active: set[UOp]) -> None:
        done[n] = result
        done[result] = result  # a final node is its own rewrite
        active.discard(n)


def _short(u: UOp, limit: int = 120) -> str:
    text = u.render() if len(u.toposort) <= 200 else f"{u.op.name}<{len(u.toposort)} nodes>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False,
                  name: str | None = None) -> UOp:
    """Rewrite `root` with `pm` to a fixed point (see the module docstring for the order)."""
    traced = trace.recording()
    with cyclic_gc_paused():   # its repeated full scans of a growing graph made rewrites about 2x slower
        rewriter = GraphRewriter(pm, ctx, bottom_up, name or "graph_rewrite", count_rules=traced)
        out = rewriter.run(root)
    if traced:
        trace.record_pass(rewriter.name, root, out, rewriter.rules or {})
    if _spec_enabled():
        from tgcore.uop.spec import type_verify
        type_verify(out, name=f"after graph_rewrite({name or 'graph_rewrite'})")
    return out


def graph_rewrite_map(roots: list[UOp], pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False,
                      name: str | None = None) -> dict[UOp, UOp]:
    """Rewrite several roots sharing one memo; returns {root: rewritten root}."""
    rw = GraphRewriter(pm, ctx, bottom_up, name or "graph_rewrite")
    return {r: rw.run(r) for r in roots}

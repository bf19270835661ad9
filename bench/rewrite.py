"""Benchmark: simplify 10,000 random index expressions with the compiled matcher and with the interpreter.

The expressions look like what codegen produces, e.g. ((gidx0*4+lidx0)*stride + r0 + off) // k % m over
bounded GPU ids, loop counters and a symbolic variable. Both paths run the same `symbolic` rule table on
freshly built expressions (nothing cached from the other run). Prints rewrites/s side by side and the
ratio, then the matcher alone (pm.rewrite on every node, no graph walk); never asserts.

    python bench/rewrite.py [--count 10000] [--seed 0] [--repeat 2]
"""

from __future__ import annotations

import argparse
import gc
import random
import time

from tgcore.uop import AxisArg, PatternMatcher, RangeKind, UOp, symbolic
from tgcore.uop.rewrite import GraphRewriter


def index_expressions(count: int, seed: int) -> list[UOp]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        lsize = rng.choice([2, 4, 8, 16])
        g = UOp.special(rng.choice([16, 32, 64, 128, 256]), "gidx0")
        lid = UOp.special(lsize, "lidx0")
        r = UOp.range(rng.choice([2, 3, 4, 8, 16]), AxisArg(0, RangeKind.GLOBAL))
        v = UOp.variable("start_pos", 0, rng.choice([63, 127, 1023]))
        stride = rng.choice([1, 2, 3, 4, 8, 12, 16, 24, 32])
        k, m = rng.choice([1, 2, 3, 4, 5, 8, 16]), rng.choice([2, 3, 4, 8, 16, 32, 64])
        idx = (g * lsize + lid) * stride + r + rng.randint(0, 40)
        if rng.random() < 0.3:
            idx = idx + v * rng.choice([1, 4, 64])
        e = idx // k % m
        if rng.random() < 0.3:
            e = (e < rng.randint(1, 40)).where(e, e * 2 + r)
        if rng.random() < 0.3:
            e = e + (r * rng.choice([1, 2, 4]) + rng.randint(0, 9)) // rng.choice([2, 4, 8]) - r // 2
        out.append(e)
    return out


def run(pm: PatternMatcher, count: int, seed: int) -> tuple[float, int]:
    exprs = index_expressions(count, seed)
    gc.collect()
    fired = 0
    start = time.perf_counter()
    for e in exprs:
        rw = GraphRewriter(pm, None, False, "bench")
        rw.run(e)
        fired += rw.count
    elapsed = time.perf_counter() - start
    del exprs
    gc.collect()
    return elapsed, fired


def match_only(pm: PatternMatcher, count: int, seed: int) -> tuple[float, int]:
    """Time `pm.rewrite` alone on every node of the (unsimplified) expressions: the matcher's own speed."""
    exprs = index_expressions(count, seed)
    nodes = list(UOp.sink(*exprs).toposort)
    for n in nodes:  # range analysis is shared work; compute it before timing
        _ = n.vmin
    start = time.perf_counter()
    for n in nodes:
        pm.rewrite(n)
    return time.perf_counter() - start, len(nodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    compiled = PatternMatcher(symbolic.rules, compiled=True)
    interpreted = PatternMatcher(symbolic.rules, compiled=False)
    run(compiled, 200, args.seed + 1)  # warm up: compile the rules, import everything
    run(interpreted, 200, args.seed + 1)

    best: dict[str, tuple[float, int]] = {}
    for _ in range(args.repeat):  # alternate, keep the best of each
        for name, pm in (("interpreted", interpreted), ("compiled", compiled)):
            elapsed, fired = run(pm, args.count, args.seed)
            if name not in best or elapsed < best[name][0]:
                best[name] = (elapsed, fired)

    print(f"symbolic simplify of {args.count} index expressions ({len(symbolic.rules)} rules), best of {args.repeat}")
    print(f"{'path':<12} {'time (s)':>9} {'rewrites':>9} {'rewrites/s':>11} {'exprs/s':>9}")
    for name in ("compiled", "interpreted"):
        elapsed, fired = best[name]
        print(f"{name:<12} {elapsed:>9.3f} {fired:>9} {fired / elapsed:>11.0f} {args.count / elapsed:>9.0f}")
    ratio = best["interpreted"][0] / best["compiled"][0]
    print(f"compiled / interpreted speed (whole graph_rewrite): {ratio:.2f}x")
    print()
    print("matcher alone: pm.rewrite on every node of the same expressions (rule bodies run when they match)")
    times = {}
    for name, pm in (("compiled", compiled), ("interpreted", interpreted)):
        elapsed, nodes = min(match_only(pm, args.count, args.seed) for _ in range(args.repeat))
        times[name] = elapsed
        print(f"{name:<12} {elapsed:>9.3f} s {nodes:>9} nodes {nodes / elapsed:>11.0f} matches/s")
    print(f"compiled / interpreted speed (matching): {times['interpreted'] / times['compiled']:.2f}x")
    if best["compiled"][1] != best["interpreted"][1]:
        print("note: the two paths fired a different number of rules")


if __name__ == "__main__":
    main()

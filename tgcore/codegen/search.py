"""What a BEAM search tries, and how its answers are written down: candidate lists, stable names for kernels and opts.

In:  a prepared kernel's AST (``tgcore.codegen.prepare_kernel``), its renderer, the threads the device offers and
     the kernel's work; a limit on how many lists to try.
Out: ``candidates``: up to ``limit`` distinct optimization lists that ``apply_opts`` accepts, the heuristic's list
     first and the empty list second, then variations around the heuristic. ``kernel_fingerprint``: a text that
     names the kernel graph the same way in every process (for cache keys). ``opts_to_data`` / ``opts_from_data``:
     an opts list as JSON-ready data and back.

How the variations are made (each a change of one choice of the heuristic's list, the changes of different choices
taking turns, so a small limit still sees every kind; then combinations):

- A matrix product (``gemmplan.gemm_shape``, at any size): other register tiles, rows x vectors that fit the
  renderer's vector registers, best first by the heuristic's FMAs-per-load score; other K tile sizes, or none;
  the rows over the device's threads or on one; rows padded to whole tiles per thread or not. Then the plain
  vector path (``vector_opts``) too.
- Any other kernel: other UPCAST amounts of the vectorized axis (powers of two that divide), another axis
  vectorized instead, UNROLL amounts of the unrolled axes changed or dropped, an UNROLL of another axis added;
  with threads or without.

Timing them is not done here (see ``tgcore.engine.beam``): this module only reads the kernel and the renderer.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from enum import Enum
from typing import Any

from tgcore.codegen.gemmplan import (
    GemmShape,
    gemm_block_k,
    gemm_k_blocks,
    gemm_list,
    gemm_shape,
    gemm_speed,
    gemm_tiles,
)
from tgcore.codegen.heuristic import MAX_UNROLL, heuristic_opts, vector_opts
from tgcore.codegen.optimize import Opt, OptError, OptOps, apply_opts, kernel_axes
from tgcore.codegen.threadsplit import thread_opt
from tgcore.codegen.upcast import _size, _stride
from tgcore.dtype import DType
from tgcore.helpers import ceildiv, dedup, prod
from tgcore.renderer import Renderer
from tgcore.uop import AxisArg, Ops, UOp

GEMM_TILES = 6           # register tiles tried, best scored first
LANE_CHOICES = (2, 4, 8, 16, 32)
UNROLL_CHOICES = (2, 4, 8)


# ---- candidates ----

def candidates(ast: UOp, renderer: Renderer, threads: int, work: int, limit: int) -> list[list[Opt]]:
    """Up to ``limit`` distinct lists ``apply_opts`` accepts for ``ast``: the heuristic's, the empty one, then the
    variations (see the module docstring)."""
    heuristic = heuristic_opts(ast, renderer, threads, work)
    threads = threads if renderer.has_threads else 1
    found: list[list[Opt]] = []
    seen: set[tuple[Opt, ...]] = set()
    for opts in itertools.chain([heuristic, []], _variations(ast, renderer, threads, work, heuristic)):
        if len(found) >= limit:
            break
        if tuple(opts) in seen:
            continue
        seen.add(tuple(opts))
        if fits(ast, opts, renderer):
            found.append(opts)
    return found


def fits(ast: UOp, opts: list[Opt], renderer: Renderer) -> bool:
    """Whether ``apply_opts`` accepts ``opts`` for ``ast``."""
    try:
        apply_opts(ast, opts, renderer)
    except OptError:
        return False
    return True


def _turns(*choices: Iterable[list[Opt]]) -> Iterator[list[Opt]]:
    """The lists of each choice taking turns: the first of every choice, then the second of every choice, ..."""
    for row in itertools.zip_longest(*choices):
        yield from (opts for opts in row if opts is not None)


def _variations(ast: UOp, renderer: Renderer, threads: int, work: int, heuristic: list[Opt]) -> Iterator[list[Opt]]:
    linear = renderer.linear  # a renderer that takes the REDUCE form vectorizes by itself
    g = gemm_shape(ast, renderer, threads, min_flops=0) if linear else None
    if g is not None:
        yield from _gemm_variations(g)
    plain = vector_opts(ast, renderer.simd_widths, registers=renderer.vector_registers) if linear else []
    yield from _vector_variations(ast, renderer, threads, work, plain if g is not None else _core(heuristic))


def _core(opts: list[Opt]) -> list[Opt]:
    return [o for o in opts if o.op is not OptOps.THREAD]


def _gemm_variations(g: GemmShape) -> Iterator[list[Opt]]:
    """Register tiles, K blocks, threads and row padding: each varied alone from the best-scored choice, then all
    combinations."""
    tiles = sorted(gemm_tiles(g), key=lambda t: (gemm_speed(g, t), t[0] * t[1]), reverse=True)[:GEMM_TILES]
    if not tiles:
        return
    blocks = gemm_k_blocks(g)
    k_choices = dedup([gemm_block_k(g), max(blocks, default=0), 0, *blocks[len(blocks) // 2:][::-1][:2]])

    def thread_choices(rows: int) -> list[int]:
        return dedup([min(g.threads, ceildiv(g.m, rows)), 1])
    (rows, vectors), block_k = tiles[0], k_choices[0]
    n_threads = thread_choices(rows)[0]
    yield from _turns(
        (gemm_list(g, r, v, block_k, min(g.threads, ceildiv(g.m, r))) for r, v in tiles[1:]),
        (gemm_list(g, rows, vectors, k, n_threads) for k in k_choices[1:]),
        (gemm_list(g, rows, vectors, block_k, t) for t in thread_choices(rows)[1:]),
        [gemm_list(g, rows, vectors, block_k, n_threads, pad_rows_per_thread=True)],
    )
    for (r, v), k in itertools.product(tiles, k_choices):
        for t in thread_choices(r):
            yield gemm_list(g, r, v, k, t)
            if not k and t > 1:  # (with a K tile rows are padded per thread anyway)
                yield gemm_list(g, r, v, k, t, pad_rows_per_thread=True)


def _vector_variations(ast: UOp, renderer: Renderer, threads: int, work: int, base: list[Opt]) -> Iterator[list[Opt]]:
    """UPCAST and UNROLL amounts around ``base`` (a list without THREAD), each with and without threads."""
    axes = kernel_axes(ast)
    sizes = [_size(r) for r in axes]
    upcast = next((o for o in base if o.op is OptOps.UPCAST), None)
    unrolls = [o for o in base if o.op is OptOps.UNROLL]

    def replaced(old: Opt, new: Opt | None) -> list[Opt]:
        """``base`` with ``old`` changed to ``new`` (None: dropped)."""
        changed = [new if o == old else o for o in base]
        return [o for o in changed if o is not None]
    lanes = [replaced(upcast, Opt(OptOps.UPCAST, upcast.axis, n)) for n in LANE_CHOICES
             if n != upcast.amount and sizes[upcast.axis] % n == 0] if upcast is not None else []
    others = [i for i in _contiguous_axes(ast, axes) if upcast is None or i != upcast.axis]
    moved = [[Opt(OptOps.UPCAST, i, n)] for i in others for n in (8, 4, 16) if sizes[i] % n == 0]
    amounts = [replaced(u, Opt(OptOps.UNROLL, u.axis, n) if n else None) for u in unrolls
               for n in (*UNROLL_CHOICES, 0) if n != u.amount]
    taken = {o.axis for o in base}
    added = [[Opt(OptOps.UNROLL, i, n), *base] for n in UNROLL_CHOICES for i, size in enumerate(sizes)
             if i not in taken and size > n and size % n == 0 and n * _copies(base) <= MAX_UNROLL]
    for opts in _turns(lanes, moved, amounts, added, [base]):
        yield from _with_and_without_threads(ast, renderer, threads, work, opts)


def _with_and_without_threads(ast: UOp, renderer: Renderer, threads: int, work: int,
                              opts: list[Opt]) -> list[list[Opt]]:
    thread = thread_opt(ast, opts, threads, work)
    return [opts + thread, opts] if thread else [opts]


def _copies(opts: list[Opt]) -> int:
    return prod(o.amount for o in opts if o.op is OptOps.UNROLL)


def _contiguous_axes(ast: UOp, axes: list[UOp]) -> list[int]:
    """Axes some load or store walks with stride 1 (the ones worth vectors)."""
    indices = [u.src[0].src[1] for u in ast.toposort
               if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and len(u.src[0].src) > 1]
    return [i for i, r in enumerate(axes) if any(_stride(index, r) == 1 for index in indices)]


# ---- stable names ----

def kernel_fingerprint(ast: UOp) -> str | None:
    """One line per node of ``ast`` in topological order: op, dtype, arg, tag and the positions of its sources.
    The same kernel gives the same text in every process (the graph's structure, not object identities); None
    when some arg has no stable spelling (an object that prints its address)."""
    index: dict[UOp, int] = {}
    lines = []
    for u in ast.toposort:
        arg, tag = _stable(u.arg), _stable(u.tag)
        if arg is None or tag is None:
            return None
        index[u] = len(index)
        lines.append(f"{u.op.name} {u.dtype!r} {arg} {tag} {[index[s] for s in u.src]}")
    return "\n".join(lines)


def _stable(x: Any) -> str | None:
    """A spelling of an arg that does not depend on the process, or None."""
    if x is None or isinstance(x, bool | int | str):
        return repr(x)
    if isinstance(x, float):
        return x.hex()
    if isinstance(x, Enum):
        return f"{type(x).__name__}.{x.name}"
    if isinstance(x, DType | AxisArg):  # (their repr spells every field, no address)
        return repr(x)
    if isinstance(x, tuple | list):
        parts = [_stable(a) for a in x]
        return None if any(p is None for p in parts) else f"({','.join(parts)})"  # type: ignore[arg-type]
    return None


def opts_to_data(opts: list[Opt]) -> list[list[Any]]:
    """``[[op name, axis, amount], ...]``: what a JSON file holds."""
    return [[o.op.name, o.axis, o.amount] for o in opts]


def opts_from_data(data: Any) -> list[Opt]:
    """The list ``opts_to_data`` wrote; ValueError naming the first entry that is not ``[op name, axis, amount]``
    with a known op."""
    if not isinstance(data, list):
        raise ValueError(f"opts must be a list, got {type(data).__name__}")
    opts = []
    for entry in data:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and all(type(v) is int for v in entry[1:])):
            raise ValueError(f"opt {entry!r} is not [op name, axis, amount]")
        if entry[0] not in OptOps.__members__:
            raise ValueError(f"opt {entry!r}: unknown op {entry[0]!r} (known: {', '.join(OptOps.__members__)})")
        opts.append(Opt(OptOps[entry[0]], entry[1], entry[2]))
    return opts

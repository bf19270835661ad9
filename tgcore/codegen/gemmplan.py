"""Register-tiled plans for matrix products large enough to be compute bound (``gemm_opts``: rows unrolled, several
vectors of columns, the reduction tiled so one block of the right-hand matrix stays in cache) and the tile of scalar
accumulators for products with nothing to vectorize (``nt_gemm_opts``).

In:  a kernel SINK in REDUCE form, the renderer, the threads and the kernel's work.
Out: a list of ``Opt`` records, or [] when the kernel is not such a product (the vector path of ``heuristic`` then).
"""
from __future__ import annotations

from dataclasses import dataclass

from tgcore.codegen.invariance import INVARIANT_ROWS, reduce_lanes
from tgcore.codegen.optimize import Opt, OptOps, kernel_axes, tileable
from tgcore.codegen.threadsplit import thread_opt
from tgcore.codegen.upcast import MAX_LANES, _size, _stride
from tgcore.dtype import DType, dtypes
from tgcore.helpers import ceildiv, prod, round_up
from tgcore.renderer import Renderer
from tgcore.uop import Ops, RangeKind, UOp

GEMM_MIN_FLOPS = 1 << 19        # smaller products stay on the plain vector path (the tile's set-up costs more)
MAX_TILE_ROWS = 12
TILE_K_SHARE = 4                # one K block of B fills at most this fraction of L2 (the rest: A, C, the other thread)
MIN_TILE_K = 32                 # shorter K blocks cost more in partial sums than they save in cache misses


def _operand_index(u: UOp) -> UOp | None:
    """The index that says how a factor of a product moves along each loop: a load's, or for a value computed from
    loads (a gradient through a fused relu mask) the index of the load that depends on the most loops, when no other
    part of the value depends on a loop that one does not."""
    if u.op is Ops.LOAD:
        return u.src[0].src[1]
    loads = [n for n in u.toposort if n.op is Ops.LOAD]
    if not loads or any(n.dtype != u.dtype for n in loads):
        # a decoded weight (packed integers, half scales) stays on the per-row vector path: its reduction order
        # is then the same for any row count, which batched LLM decode relies on (batch invariance)
        return None
    main = max((n.src[0].src[1] for n in loads), key=lambda idx: len(idx.ranges))
    return main if set(u.ranges) <= set(main.ranges) else None


def _product(ast: UOp) -> tuple[UOp, UOp, UOp, UOp, list[UOp]] | None:
    """(the store's index, the reduction, A's index, B's index, the output ranges) when ``ast`` stores one ADD
    reduction of a product of two loaded values (``_operand_index``), maybe under an epilogue (bias, relu)."""
    if len(ast.src) != 1 or ast.src[0].op is not Ops.STORE:
        return None
    store = ast.src[0]
    reduces = [u for u in store.src[1].toposort if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].arg is not Ops.ADD or reduces[0].src[0].op is not Ops.MUL:
        return None
    red = reduces[0]
    a_idx, b_idx = (_operand_index(u) for u in red.src[0].src)
    if a_idx is None or b_idx is None:
        return None
    index = store.src[0].src[1]
    outputs = [r for r in index.toposort if r.op is Ops.RANGE and r.arg.kind is RangeKind.GLOBAL]
    return index, red, a_idx, b_idx, outputs


def _gemm_axes(ast: UOp) -> tuple[UOp, UOp, tuple[UOp, ...], UOp] | None:
    """(rows, columns, reduced ranges, B's index) when ``ast`` stores one sum of products ``A[.., k] * B[k, ..]`` in a
    contiguous column axis that B runs along with stride 1 and A does not, over rows that A runs along and B does
    not (a matmul, batched or not; a convolution over output channels and flattened positions)."""
    found = _product(ast)
    if found is None:
        return None
    index, red, a_idx, b_idx, outputs = found

    def along(r: UOp) -> bool:  # one factor runs along r in vectors, the other is the same along it
        return {_stride(a_idx, r), _stride(b_idx, r)} == {0, 1}
    # the contiguous output axis, unless another one the loads run along is more than twice as long (then the
    # stores are scattered, once per tile after the reduction): a convolution's input gradient, whose windows lie
    # across the output, runs along the image's columns, not the kernel's three
    cols = sorted((r for r in outputs if along(r)), key=_size)
    if not cols:
        return None
    contiguous = [r for r in cols if _stride(index, r) == 1]
    scattered = not contiguous or 2 * _size(contiguous[0]) < _size(cols[-1])
    col = cols[-1] if scattered else contiguous[0]
    if _stride(a_idx, col) == 1:  # the loads the other way round
        a_idx, b_idx = b_idx, a_idx
    rows = [r for r in outputs if r is not col and _stride(b_idx, r) == 0 and _stride(a_idx, r)]
    # the longest row axis (the innermost of equals): a weight gradient's input channels, not its taps
    rows = sorted(rows, key=_size)
    return (rows[-1], col, red.src[1:], b_idx) if rows else None


def _lanes(renderer: Renderer, dtype: DType) -> int:
    """Elements of ``dtype`` in one of the renderer's vector registers."""
    return min(renderer.vector_bits // (8 * dtype.itemsize), MAX_LANES)


def _filled(size: int, tile: int) -> float:
    """The share of ``size`` rounded up to whole tiles that is real work."""
    return size / round_up(size, tile)


@dataclass(frozen=True)
class GemmShape:
    """A matrix product's facts the register tile is chosen from: the axes (numbers into ``kernel_axes``), their
    sizes, and the renderer's vectors, registers and L2."""
    row: int
    col: int
    k: int              # the reduced axis a K tile splits (the longest, when there are several)
    m: int
    n: int
    kk: int             # iterations of all reduced axes together
    lanes: int          # elements of the output dtype per vector register
    registers: int      # vector registers
    masked: bool        # columns can be padded: lane-gated loads and stores
    itemsize: int
    l2: int
    tileable: bool      # the K loop can be tiled (partial sums kept in the output)
    threads: int        # threads the rows can be split over (1 without renderer threads)
    flops: int          # of the whole kernel (every output axis, a batch's too)
    k_size: int         # iterations of the axis ``k`` (a K block keeps the other reduced axes inside: with the
                        # batch of a weight gradient, its block of B is that many times longer)
    b_cost: float = 1.0  # what loading one vector of B costs, in broadcasts of A (``SHIFTED_B_COST``)


def gemm_shape(ast: UOp, renderer: Renderer, threads: int, min_flops: int = GEMM_MIN_FLOPS) -> GemmShape | None:
    """The facts of ``ast`` as a matrix product, or None when it is not one, its vectors hold fewer than 2 lanes or
    it has fewer than ``min_flops`` operations. ``threads``: what the renderer can use (1 without threads)."""
    found = _gemm_axes(ast)
    if found is None:
        return None
    row, col, ks, b_idx = found
    dtype = ast.src[0].src[1].dtype
    lanes = _lanes(renderer, dtype)
    m, n, kk = _size(row), _size(col), prod(_size(k) for k in ks)
    axes = kernel_axes(ast)
    outputs = prod(_size(r) for r in axes if r.arg.kind is RangeKind.GLOBAL)
    if lanes < 2 or min(m, n, kk) < 1 or 2 * outputs * kk < min_flops:  # (a batch's axes count too)
        return None
    number = {r: i for i, r in enumerate(axes)}
    k = max(ks, key=_size)  # (the first of equals)
    return GemmShape(number[row], number[col], number[k], m, n, kk, lanes, renderer.vector_registers,
                     renderer.masked_vectors, dtype.itemsize, renderer.cache_sizes.l2, tileable(ast),
                     threads, 2 * outputs * kk, _size(k),
                     SHIFTED_B_COST if any(_stride(b_idx, r) == 1 for r in ks) else 1.0)


def gemm_tiles(g: GemmShape) -> list[tuple[int, int]]:
    """Every (rows, vectors) register tile the register file holds with B's vectors and a broadcast, and the
    columns allow (divided, or padded on a renderer with lane-gated vectors); for a small batch (``_gate_free``) only
    tiles that divide both axes."""
    spare = g.registers // 16  # left to the compiler (a 5x5 zmm tile measured slower than 6x4)
    gate_free = _gate_free(g)
    return [(r, v) for r in range(1, min(g.m, MAX_TILE_ROWS) + 1) for v in range(1, g.registers)
            if r * v + v + 1 + spare <= g.registers and r * v >= 4 and v * g.lanes <= 2 * g.n
            and ((g.masked and not gate_free) or g.n % (v * g.lanes) == 0) and (not gate_free or g.m % r == 0)]


def _gate_free(g: GemmShape) -> bool:
    """Whether the tile must pad neither axis: a product inside the batch invariance property (at most
    ``INVARIANT_ROWS`` rows or columns, more than 4x that many on the other side: ``heuristic``'s module docstring).
    A padded tile gates the loads of its last rows or columns; the C compiler threads the loop's branches on that
    gate, so some row's product reaches its add by two paths and is not contracted into an FMA there, while the
    row alone (no gate) is: the same order of terms, rounded differently (3 rows x 512 columns at AVX2, 3 vectors
    of 8 padded to 528: row 0's columns 16-23 of every tile were summed unfused)."""
    return min(g.m, g.n) <= INVARIANT_ROWS and max(g.m, g.n) > 4 * INVARIANT_ROWS


# a vector of B read at an offset that a reduced axis moves by single elements (a convolution's taps along the
# flattened positions) mostly straddles two cache lines, and B streams from L2 while A's broadcasts stay in L1: it
# costs about this many broadcasts (measured, 3x3 convolutions at AVX-512: 8 rows x 3 vectors 3-5% faster than 6 x 4
# at 96 output channels, ~9% at 64, where 6 rows are padded)
SHIFTED_B_COST = 2.5
PARTIAL_TILE_COST = 4  # a column tile with padded lanes reads them lane by lane: it costs about this many full tiles


def gemm_speed(g: GemmShape, tile: tuple[int, int]) -> float:
    """FMAs per load (each step loads v vectors of B, each costing ``b_cost``, and broadcasts r elements of A for r*v
    FMAs), less the share of padded rows computed for nothing and the cost of a last column tile whose padded lanes
    are gated."""
    r, v = tile
    col_tiles = ceildiv(g.n, v * g.lanes)
    partial = PARTIAL_TILE_COST - 1 if g.n % (v * g.lanes) else 0
    return r * v / (r + g.b_cost * v) * _filled(g.m, r) * col_tiles / (col_tiles + partial)


def gemm_k_blocks(g: GemmShape) -> list[int]:
    """K block sizes (divisors of the axis ``k``, at least ``MIN_TILE_K``) whose block of B (with the other reduced
    axes: ``kk / k_size`` times the block) fits its share of L2, shortest first."""
    if not g.tileable:
        return []
    others = g.kk // g.k_size
    return [d for d in range(MIN_TILE_K, g.k_size)
            if g.k_size % d == 0 and d * others * g.n * g.itemsize * TILE_K_SHARE <= g.l2]


def gemm_block_k(g: GemmShape) -> int:
    """The K tile of the default choice: none when all of B fits its share of L2 or the product has at most
    ``INVARIANT_ROWS`` rows or columns (a K tile's partial sums add up in another order than one row's), else the
    longest K block."""
    if g.kk * g.n * g.itemsize * TILE_K_SHARE <= g.l2 or min(g.m, g.n) <= INVARIANT_ROWS:
        return 0
    return max(gemm_k_blocks(g), default=0)


def gemm_tile(g: GemmShape) -> tuple[int, int] | None:
    """The default choice of (rows, vectors): the best scored, the larger on a tie."""
    return max(gemm_tiles(g), key=lambda t: (gemm_speed(g, t), t[0] * t[1]), default=None)


def gemm_list(g: GemmShape, rows: int, vectors: int, block_k: int, n_threads: int,
              pad_rows_per_thread: bool = False) -> list[Opt]:
    """The opts of one register tile: columns padded to whole tiles when needed, vectorized and unrolled by
    ``vectors``, rows padded and unrolled by ``rows``, K tiled by ``block_k`` (0: not), rows over ``n_threads``. With
    a K tile (or ``pad_rows_per_thread``) rows are padded to a multiple of every thread's tiles."""
    cols = vectors * g.lanes
    multiple = rows * n_threads if block_k or pad_rows_per_thread else rows
    return [*([Opt(OptOps.PAD, g.col, cols)] if g.n % cols else []),
            Opt(OptOps.UPCAST, g.col, g.lanes), *([Opt(OptOps.UNROLL, g.col, vectors)] if vectors > 1 else []),
            *([Opt(OptOps.PAD, g.row, multiple)] if g.m % multiple else []), Opt(OptOps.UNROLL, g.row, rows),
            *([Opt(OptOps.TILE, g.k, block_k)] if block_k else []),
            *([Opt(OptOps.THREAD, g.row, n_threads)] if n_threads > 1 else [])]


def gemm_opts(ast: UOp, renderer: Renderer, threads: int) -> list[Opt]:
    """A register tile for a matrix product: ``rows`` output rows times ``vectors`` vectors of columns, each an
    accumulator in a vector register, so each loaded vector of B feeds ``rows`` FMAs and each broadcast of A
    ``vectors``; the largest tile the register file holds (with B's vectors and a broadcast) and the shape
    divides. A long K is tiled so that one K block of B stays in L2 while every row of A passes over it; the
    rows are split over threads (each thread keeps its own copy of the B block in its own L2)."""
    g = gemm_shape(ast, renderer, threads)
    tile = gemm_tile(g) if g is not None else None
    if g is None or tile is None:
        return []
    rows, vectors = tile
    block_k = gemm_block_k(g)
    if block_k:  # each thread takes whole row tiles: rows are padded to a multiple of every thread's tiles
        return gemm_list(g, rows, vectors, block_k, min(g.threads, ceildiv(g.m, rows)))
    # else the outermost output loop left (a batch, else the row tiles) is chunked over the threads
    opts = gemm_list(g, rows, vectors, 0, 1)
    return opts + thread_opt(ast, opts, g.threads, g.flops)


def nt_gemm_opts(ast: UOp, renderer: Renderer, threads: int, work: int, scalar: bool = False) -> list[Opt]:
    """A register tile for a product of two matrices that both run along the reduced axis (``x @ W.T``, a weight
    gradient): the reduced axis in vectors, ``rows x cols`` accumulators (one vector each, summed across lanes
    after the loop), so each step loads ``rows + cols`` vectors for ``rows * cols`` FMAs. With ``scalar``, when no
    reduced axis both run along in whole vectors, the same tile of scalar accumulators."""
    found = _product(ast)
    if found is None:
        return []
    _, red, a_idx, b_idx, outputs = found
    if not dtypes.is_float(red.dtype) or red.src[0].src[0].dtype != red.dtype:
        return []
    k = next((r for r in red.src[1:] if _stride(a_idx, r) == 1 and _stride(b_idx, r) == 1), None)
    rows = [r for r in outputs if _stride(a_idx, r) and _stride(b_idx, r) == 0]
    cols = [r for r in outputs if _stride(b_idx, r) and _stride(a_idx, r) == 0]
    if not rows or not cols or work < GEMM_MIN_FLOPS // 2:
        return []
    row, col = max(rows, key=_size), max(cols, key=_size)
    m, n = _size(row), _size(col)
    lanes = _lanes(renderer, red.dtype)
    if min(m, n) <= INVARIANT_ROWS and k is not None:
        # few rows (batched decode): K in the lanes one row alone gets on the vector path; a long K's several
        # vectors per accumulator are left to that path
        lanes = reduce_lanes(_size(k), red.dtype, renderer.simd_widths)
        if lanes > renderer.simd_widths.get(red.dtype, 0) > 1:
            return []
    if k is None or lanes < 2 or _size(k) % lanes:
        if not scalar:
            return []
        lanes, k = 1, None
    registers = renderer.vector_registers
    tiles = [(r, c) for r in range(1, min(m, MAX_TILE_ROWS) + 1) for c in range(1, min(n, MAX_TILE_ROWS) + 1)
             if r * c + r + c <= registers and r * c >= 4]
    if not tiles:
        return []
    # FMAs per load, less the padded share
    tr, tc = max(tiles, key=lambda t: (t[0] * t[1] / (t[0] + t[1]) * _filled(m, t[0]) * _filled(n, t[1]),
                                       t[0] * t[1]))
    number = {r: i for i, r in enumerate(kernel_axes(ast))}
    opts = [*([Opt(OptOps.PAD, number[row], tr)] if m % tr else []), Opt(OptOps.UNROLL, number[row], tr),
            *([Opt(OptOps.PAD, number[col], tc)] if n % tc else []), Opt(OptOps.UNROLL, number[col], tc),
            *([Opt(OptOps.UPCAST, number[k], lanes)] if k is not None else [])]
    return opts + thread_opt(ast, opts, threads, work)

"""The default policy: which optimizations a kernel gets on a renderer, without timing anything.

In:  a kernel SINK in REDUCE form (simplified), the renderer, the threads the device offers and the
     kernel's work (operations, or bytes / 4 when that is larger).
Out: a list of ``Opt`` records for ``tgcore.codegen.optimize.apply_opts``.

- Elementwise kernels and reductions along an output axis (a matmul's, a column sum): the output axis that
  is contiguous in memory becomes vector lanes, and in reductions a second output axis is unrolled, or that axis's
  next vectors; runs of them that read the same rows of the streamed input (grouped-query attention's value rows,
  shared by the query heads of one KV head) are unrolled together, so each row is loaded once (``_shared_runs``).
- Matrix products large enough to be compute bound get a register tile (``gemm_opts``): rows unrolled,
  several vectors of columns, and the reduction tiled so one block of the right-hand matrix stays in cache.
- Reductions along their input's contiguous axis (a matrix-vector product, dequantize-and-dot): the reduced
  axis becomes vector lanes, summed across lanes at the end; the finest quantization blocks get ``BLOCK``,
  nested in the coarsest when a format has two levels of scales (K-quants). A small batch (2 to ``INVARIANT_ROWS``
  rows, a batched decode step) times such a weight has every batch row unrolled beside a few weight rows, so each
  weight load feeds all rows and the threads split the weight, not the batch (``batch_unrolls``).
- Elementwise kernels whose contiguous output axis is shorter than a vector (a row-lane weight dequantized: 4 values
  per step of a row): that axis as a narrower vector, the next output axis unrolled (``short_row_opts``).
- Elementwise kernels whose lanes gather packed bytes (a quantized weight dequantized into its transpose):
  the axis the bytes run along is unrolled by its quantization block (``gather_unroll``).
- Products with nothing to vectorize (a small convolution's weight gradient): a tile of scalar accumulators,
  two output axes unrolled (``nt_gemm_opts`` with ``scalar``).
- The outermost output loop left is split over threads when the kernel has enough work for them.

Batch invariance (a stated property, tested over the policy): in a sum of products with at most ``INVARIANT_ROWS``
rows on its shorter output side (and more than 4x as many on the other, so the weight, not the rows, is the input
the kernel streams), each output element is summed in the same order whatever that number of rows, so
an LLM decoding several sequences at once gets each one's logits bit for bit as it would alone. The order of one
element's terms is what the list does to the reduced axes (``reduction_order``): the vector path and the ``x @ W.T``
tile split them only by ``reduce_lanes``, which reads the reduction alone (its length, the accumulator's dtype, the
renderer), the register tile's K blocks (whose partial sums add up in the output) wait for more rows, its tile
pads neither axis for a small batch (the rounding matters too: a gated load let the C compiler leave one row's
multiply-add unfused, ``gemmplan._gate_free``), and a factor decoded from another dtype is no operand of a register
tile (``_operand_index``: its quantization BLOCKs, which set the order too, live on the vector path). Outside the
property: reductions the scheduler splits in two kernels by their output count (``schedule.split``: long ones with
few outputs) and lists found by ``BEAM``.
"""
from __future__ import annotations

import random

from tgcore.codegen.blocks import block_divisors
from tgcore.codegen.gemmplan import gemm_opts, nt_gemm_opts
from tgcore.codegen.invariance import INVARIANT_ROWS, reduce_lanes
from tgcore.codegen.optimize import Opt, OptOps, kernel_axes
from tgcore.codegen.threadsplit import thread_opt
from tgcore.codegen.upcast import _difference, _size, _stride
from tgcore.dtype import DType, dtypes
from tgcore.helpers import ceildiv, dedup, prod
from tgcore.renderer import Renderer
from tgcore.runtime.cpufeatures import CACHE_LINE
from tgcore.uop import Ops, RangeKind, UOp
from tgcore.uop.sint import eval_at

MAX_UNROLL = 8   # copies made by unrolling on the plain vector path
REDUCE_ROWS = 4  # output rows computed together by a vectorized reduction (each load of the shared input reused)
BATCH_COPIES = 8  # a small batch's float product computes at most this many (batch row, weight row) pairs together
BATCH_BYTE_COPIES = 32  # ... its scalar byte-dot product (scalar int32 accumulators), and its lane byte-dot
# product: there each pair costs a dot, a conversion and 3 multiply-adds, and an activation block's sum times its
# scale is shared by every weight row (``factor_blocks``), so 4 weight rows beside up to 8 batch rows are faster
# than fewer even where the accumulators spill (Q4_1/Q8_0 at 4 and 8 rows: 1.1-1.2x over 8 pairs)
BYTE_DOT_STEPS = 4  # a block of this many int32 vector steps sums bytes in lanes (4 byte products per lane and block)
OUTPUT_CHAINS = (8, 4)  # a long reduction into vectors of one output axis unrolls the most of these of its vectors
LONG_CHAIN = 64         # that divide it (independent accumulator chains) from this many reduced steps on
MAX_BLOCK_STEPS = 8  # a quantization block's inner loop longer than this many vector steps is split again (a loop
# this short is unrolled by the C compiler: its index arithmetic folds)


def _main_inputs(ast: UOp) -> list[UOp]:
    """Index expressions of the loads from the largest input buffer (what the kernel mostly streams). A table looked
    up at indices read from the largest of the other inputs (a quantized weight's float16 scale converted by a table
    of every half's float32 value) serves that input: it does not count, however big."""
    loads = [u for u in ast.toposort if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
    if not loads:
        return []

    def size(u: UOp) -> int:
        return getattr(u.src[0].src[0].dtype, "size", 0) * u.dtype.itemsize
    direct = [u for u in loads if not _indirect(u)]
    if direct:
        streamed = max(size(u) for u in direct)
        loads = [u for u in loads if not any(x.op is Ops.LOAD and x in direct and size(x) == streamed
                                             for x in u.src[0].src[1].toposort)]
    biggest = max(size(u) for u in loads)
    return dedup(u.src[0].src[1] for u in loads if size(u) == biggest)


def _load_indices(value: UOp) -> list[UOp]:
    """Index expressions of the loads ``value`` computes from."""
    return [u.src[0].src[1] for u in value.toposort if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]


def _byte_inputs(ast: UOp) -> list[UOp]:
    """Index expressions of the direct loads of bytes (a byte dot's weight and activations, whichever is larger: the
    row-lane plan must not depend on the batch size, ``row_lane_byte_dot_opts``)."""
    return dedup(u.src[0].src[1] for u in ast.toposort if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM
                 and u.dtype.scalar() in (dtypes.uint8, dtypes.int8) and not _indirect(u))


def _indirect(load: UOp) -> bool:
    """Whether ``load``'s index depends on another load."""
    return any(u.op is Ops.LOAD for u in load.src[0].src[1].toposort)


def reduction_order(ast: UOp, opts: list[Opt]) -> tuple[tuple[OptOps, int], ...]:
    """What ``opts`` do to ``ast``'s reduced axes, in order: with the reduction itself, the order in which each output
    element's terms are added up (lanes, copies, blocks, K tiles), whatever the list does to the output axes."""
    axes = kernel_axes(ast)
    return tuple((o.op, o.amount) for o in opts if axes[o.axis].arg.kind is RangeKind.REDUCE)


def _bytes_per_step(mains: list[UOp], r: UOp) -> int:
    """``s`` when the main input's loads read each step of ``r`` as ``s`` consecutive bytes (a 16-bit float
    assembled from its two bytes: loads at ``s*r + 0 .. s-1``), else 0. Such a row runs along ``r`` as contiguously
    as one of stride 1 (the C renderer loads the lanes' bytes as one vector)."""
    s = _stride(mains[0], r) if mains else None
    if s is None or s < 2 or len(mains) != s:
        return 0
    offsets = [_difference(m, mains[0]) for m in mains]
    if any(o is None for o in offsets):
        return 0
    low = min(o for o in offsets if o is not None)
    return s if sorted(o - low for o in offsets if o is not None) == list(range(s)) else 0


GROUP_SAMPLES = 8  # random points at which a main index is checked to be constant over a group of steps


def _grouped(ast: UOp, mains: list[UOp], r: UOp, lanes: int) -> bool:
    """Whether the main input is read once per aligned group of ``lanes / 2`` steps of ``r`` or more (its indices
    see ``r`` only through ``r // k``-like terms) while another input runs along ``r``: a grid-quantized weight,
    one index byte per 8 (or 4) values and the values decoded from a table. Vectorized along ``r`` by ``lanes``,
    each group's index, signs and scale are then loaded and decoded once for all its lanes.

    Checked at ``GROUP_SAMPLES`` random points (a choice of speed, not of meaning: any index vectorizes)."""
    group = lanes // 2
    if group < 2 or _size(r) % lanes or not mains:
        return False
    if not any(_stride(idx, r) == 1 for idx in _load_indices(ast)):
        return False
    rng = random.Random(0)
    for index in dedup(i for m in mains for i in _address_indices(m)):
        leaves = [u for u in index.toposort if u.op in (Ops.RANGE, Ops.DEFINE_VAR) and u is not r]
        for _ in range(GROUP_SAMPLES):
            values = {u: rng.randint(int(u.vmin), int(u.vmax)) for u in leaves}
            start = rng.randrange(_size(r) // group) * group
            try:
                if len({eval_at(index, {**values, r: start + j}) for j in range(group)}) != 1:
                    return False
            except (ValueError, KeyError):  # something a random point cannot give (a variable by name)
                return False
    return True


def _address_indices(index: UOp) -> list[UOp]:
    """``index``, or when it reads loads itself (a table looked up at a loaded value) the indices of those loads,
    down to indices that read none: what decides which memory a lookup depends on."""
    inner = [u for u in index.toposort if u.op is Ops.LOAD]
    if not inner:
        return [index]
    return [i for load in inner for i in _address_indices(load.src[0].src[1])]


def _byte_dot(red: UOp) -> bool:
    """Whether the reduction sums a float conversion of a product of integers loaded as bytes (a quantized weight's
    integers times an 8-bit quantized activation): inside a quantization block that is an int8 dot product."""
    for u in red.src[0].toposort:
        if u.op is not Ops.CAST or not dtypes.is_float(u.dtype) or not dtypes.is_int(u.src[0].dtype):
            continue
        for product in (n for n in u.src[0].toposort if n.op is Ops.MUL):  # (plus maybe an integer offset: Q6_K's)
            loads = [n for n in product.toposort if n.op is Ops.LOAD and n not in _index_loads(product)]
            if len({n.src[0].src[0] for n in loads}) >= 2 and all(n.dtype.itemsize == 1 for n in loads):
                return True
    return False


def _index_loads(ast: UOp) -> set[UOp]:
    """The loads that index other loads (a table row's number: read to find the row, not a factor of the sum)."""
    loads = [u for u in ast.toposort if u.op is Ops.LOAD]
    return {n for load in loads for n in load.src[0].src[1].toposort if n.op is Ops.LOAD}


def _batch_rows(ranges: list[UOp], mains: list[UOp]) -> UOp | None:
    """The output axis of a small batch (2 to ``INVARIANT_ROWS`` rows) that the main input (a weight) does not run
    along, when there is one such axis and another output axis the weight runs along: the rows of a batched
    decode step, which share every load of the weight."""
    shared = [r for r in ranges if all(_stride(m, r) == 0 for m in mains)]
    if len(shared) != 1 or not 2 <= _size(shared[0]) <= INVARIANT_ROWS or len(shared) == len(ranges):
        return None
    return shared[0]


def batch_unrolls(ranges: list[UOp], mains: list[UOp], number: dict[UOp, int], copies: int,
                  most: int = REDUCE_ROWS) -> list[Opt]:
    """UNROLLs for a small batch times a weight (``_batch_rows``): every batch row in one pass (each weight load
    feeds all of them; the batch axis is then gone, so threads split the weight rows, not the batch), and beside
    them up to ``most`` weight rows (a dividing power of two, at most ``copies`` pairs of rows in all),
    which share each load of a batch row's activations and their block sums. Output axes only: each element's
    sum keeps its order (batch invariance). [] when the kernel is no such product."""
    batch = _batch_rows(ranges, mains)
    if batch is None:
        return []
    rows = _size(batch)
    weight = next(r for r in ranges if r is not batch)
    weight_rows = max(1, min(most, copies // rows))
    while _size(weight) % weight_rows:
        weight_rows //= 2
    return [Opt(OptOps.UNROLL, number[batch], rows),
            *([Opt(OptOps.UNROLL, number[weight], weight_rows)] if weight_rows > 1 else [])]


def _lane_steps(indices: list[UOp], r: UOp, lanes: int) -> set[tuple[int, int]] | None:
    """How far each index moves from step ``r`` to ``r + 1`` and to ``r + lanes`` (the other loops at 0); None when
    one cannot be evaluated (it reads a load)."""
    steps = set()
    try:
        for index in indices:
            leaves = {u: 0 for u in index.toposort if u.op in (Ops.RANGE, Ops.DEFINE_VAR) and u is not r}
            at = [eval_at(index, {**leaves, r: v}) for v in (0, 1, lanes)]
            steps.add((at[1] - at[0], at[2] - at[0]))
    except (ValueError, KeyError):
        return None
    return steps


PER_STEP = (0, 1)  # a main byte that moves one byte per step of a lane's 4 and is the same in every lane


def _neighbours_in_lanes(mains: list[UOp], r: UOp, lanes: int, red: UOp) -> bool:
    """Whether the main input's bytes along ``r`` are read in lanes of ``BYTE_DOT_STEPS`` neighbours: step ``r + 1``
    ``BYTE_DOT_STEPS`` bytes on, step ``r + lanes`` one byte on (a block summed as ``[k, l]`` = element ``4l + k``),
    the other loops at 0. Its per-block fields (scales) stay put; beside bytes in that order, bytes read one per
    step of a lane's 4 and the same in every lane (``PER_STEP``: TQ1_0's ``qh``, 4 bytes of 4 trits for 16
    elements, broadcast to the lanes). A main input read once per group of elements
    (a grid type's indices: once per 8 elements, every step 0, or per 4, one byte per lane) qualifies when another
    byte operand of the sum is read in that order."""
    lane_order, per_group = (BYTE_DOT_STEPS, 1), {(0, 0), (1, 0)}
    steps = _lane_steps(mains, r, lanes)
    if steps is None or not steps <= {lane_order, PER_STEP} | per_group:
        return False
    if lane_order in steps:
        return (1, 0) not in steps
    if PER_STEP in steps:
        return False
    others = [u.src[0].src[1] for u in red.src[0].toposort if u.op is Ops.LOAD and u.dtype.itemsize == 1
              and u.src[0].src[1] not in mains and not _indirect(u)]
    return any(_lane_steps([index], r, lanes) == {lane_order} for index in others)


def _byte_dot_opts(ast: UOp, red: UOp, reduce_ranges: list[UOp], rows: list[UOp], number: dict[UOp, int],
                   simd_widths: dict[DType, int], mains: list[UOp], outputs: list[UOp],
                   registers: int, batch_weight_rows: int = REDUCE_ROWS) -> list[Opt] | None:
    """A sum of byte products in quantization blocks (``_byte_dot``), with ``REDUCE_ROWS`` output rows together:

    - blocks of ``BYTE_DOT_STEPS`` int32 vectors whose bytes are read in lanes of 4 neighbours
      (``_neighbours_in_lanes``; tg-gguf's blocks of 32): the reduced axis vectorized and blocked (a super-block
      around them, when its factor can leave the sum over its blocks), each lane's int32 sum over a block one
      multiply-add of 4 bytes on a renderer that has it (``vpdpbusd``), scaled in its lane and summed across lanes
      after the last block;
    - else (blocks of elements in order): the blocks only, each in-block sum a scalar loop that the C compiler
      vectorizes (``Renderer.compiles_byte_dots``), its int32 lanes added per block.
    None when the reduction runs over several axes."""
    ranges = reduce_ranges or list(red.src[1:])
    if len(ranges) != 1:
        return None
    r = ranges[0]
    copies = min(BATCH_BYTE_COPIES, registers)  # (each pair's accumulator unrolled: what the registers allow)
    unroll = [Opt(OptOps.UNROLL, number[rows[0]], REDUCE_ROWS)] if rows else []
    sizes = block_divisors(ast, r)
    native = simd_widths.get(dtypes.int32, 0)
    if native * BYTE_DOT_STEPS in sizes and _neighbours_in_lanes(mains, r, native, red):
        # a second output axis (the other input's rows: sequences decoded at once) by 2: each block decoded once for
        # both (vector code: which axes are unrolled does not change an element's rounding)
        cols = [c for c in outputs if rows and c is not rows[0] and _size(c) % 2 == 0][:1]
        # (beside 2-4 batch rows, where the renderer says more weight rows pay: ``Renderer.batch_weight_rows``)
        most = batch_weight_rows if registers >= BATCH_BYTE_COPIES else REDUCE_ROWS
        unrolls = batch_unrolls(outputs, mains, number, copies, most) or \
            [*unroll, *(Opt(OptOps.UNROLL, number[c], 2) for c in cols)]
        # a super-block's factor (a K-quant's d) leaves the sum over its blocks
        outer = [Opt(OptOps.BLOCK, number[r], max(sizes) // native)] if max(sizes) > native * BYTE_DOT_STEPS else []
        return [*unrolls, Opt(OptOps.UPCAST, number[r], native), *outer, Opt(OptOps.BLOCK, number[r], BYTE_DOT_STEPS)]
    if not reduce_ranges:
        return None
    # the weight's rows unrolled whatever the number of the other input's rows: unrolling those instead changes how
    # the C compiler vectorizes the scalar block loops, and with it the rounding (batch invariance)
    rows = sorted(rows, key=lambda c: all(_stride(m, c) == 0 for m in mains))
    unrolls = batch_unrolls(outputs, mains, number, copies) or \
        ([Opt(OptOps.UNROLL, number[rows[0]], REDUCE_ROWS)] if rows else [])
    nested = sorted({max(sizes), min(sizes)}, reverse=True) if sizes else []
    return [*unrolls, *(Opt(OptOps.BLOCK, number[r], k) for k in nested if nested[0] % k == 0)]


def row_lane_byte_dot_opts(ast: UOp, red: UOp, ranges: list[UOp], mains: list[UOp], number: dict[UOp, int],
                           native: int, store_index: UOp) -> list[Opt] | None:
    """A byte-dot product with its output rows in the lanes (tg-gguf's row-interleaved weights,
    ``tg_gguf.lanes``): an output axis (of whole native int32 vectors) that the weight's bytes step
    ``BYTE_DOT_STEPS`` along (8 rows interleaved by 4 bytes), one reduced axis in blocks of ``BYTE_DOT_STEPS *
    lanes`` elements. That axis vectorized, the reduction blocked (each block's sum in int32:
    ``cbytedot.row_lanes_dot``, 8 multiply-adds of 4 bytes per block of 8 rows), a small batch's rows unrolled
    beside it. Every choice is on output axes or from the reduction alone: a row's sum has one order at any batch
    size. ``native``: the int32 lanes per vector (the rows of a group of the weight). None for any other kernel."""
    reduced = list(red.src[1:])
    if native < 2 or len(reduced) != 1 or not mains:
        return None
    def weights_in_lanes(r: UOp) -> list[UOp]:
        """The byte inputs whose next output row's bytes are 4 on along ``r`` (within a group of 8 rows): the
        weight's; [] unless there are some and every other byte input (the activations) stays."""
        moving = []
        for m in mains:  # (the step to the last lane: one group's rows, not two groups' halves)
            steps = _lane_steps([m], r, native - 1)
            if steps is None or len(steps) != 1 or (step := next(iter(steps))[0]) not in (0, BYTE_DOT_STEPS) \
                    or next(iter(steps))[1] != step * (native - 1):
                return []
            if step:
                moving.append(m)
        return moving
    lanes = {r: w for r in ranges if _size(r) % native == 0 and _stride(store_index, r) == 1
             and (w := weights_in_lanes(r))}
    block = _factor_block(ast, reduced[0], BYTE_DOT_STEPS * native)
    if len(lanes) != 1 or block not in block_divisors(ast, reduced[0]):
        return None
    (lane, weights), = lanes.items()
    batch, rows = _row_groups(ranges, weights)
    unroll = [Opt(OptOps.UNROLL, number[batch], rows)] if batch is not None else []
    return [*unroll, Opt(OptOps.UPCAST, number[lane], native), Opt(OptOps.BLOCK, number[reduced[0]], block)]


HALF_LANES = 16  # a half-lane product's lanes: 8 weight rows, two lanes each (a 512-bit vector of int32)
HALF_STEP = (BYTE_DOT_STEPS, BYTE_DOT_STEPS)  # the activations' move to lanes 1 and 15: 4 bytes on (the odd lanes)


def half_lane_opts(ast: UOp, red: UOp, ranges: list[UOp], mains: list[UOp], number: dict[UOp, int],
                   store_index: UOp) -> list[Opt] | None:
    """A byte-dot product with each weight row in two neighbouring lanes (tg-gguf's grid types, ``tg_gguf.grid_lanes``:
    lane ``2l + h`` sums row ``l``'s values ``8c + 4h + k``): an output axis (``HALF_LANES`` lanes at stride 1 in the
    store) along which the only direct byte input, the activations, moves ``HALF_STEP`` (the weight's bytes are table
    rows, read indirectly), one reduced axis in blocks of at most ``BYTE_DOT_STEPS * 4`` per lane. That axis vectorized
    (``cbytedot.row_lanes_dot``: the activation operand 8 bytes repeated, the weight's a gather of 8-byte rows), the
    reduction blocked where the scales change, a small batch's rows unrolled beside it. Output axes and the reduction
    alone: a row's sum has one order at any batch size. None for any other kernel."""
    reduced = list(red.src[1:])
    if len(reduced) != 1 or len(mains) != 1:
        return None
    lanes = [r for r in ranges if _size(r) % HALF_LANES == 0 and _stride(store_index, r) == 1
             and _lane_steps(mains, r, HALF_LANES - 1) == {HALF_STEP}]
    block = _factor_block(ast, reduced[0], BYTE_DOT_STEPS * 4)
    if len(lanes) != 1 or block not in block_divisors(ast, reduced[0]):
        return None
    batch, rows = _row_groups(ranges, lanes)  # (the weight runs along the lanes' axis alone: the others are batch)
    unroll = [Opt(OptOps.UNROLL, number[batch], rows)] if batch is not None else []
    return [*unroll, Opt(OptOps.UPCAST, number[lanes[0]], HALF_LANES), Opt(OptOps.BLOCK, number[reduced[0]], block)]


def _factor_block(ast: UOp, r: UOp, widest: int) -> int:
    """The row-lane product's block along its reduced range ``r``: ``widest`` (a block of 32 bytes per lane), unless a
    factor of the products (a load of anything but bytes: a scale) changes within it every ``k`` steps, ``k`` a
    whole number of dot steps (Q2_K: a scale per 16 values): then the smallest such ``k``."""
    factors = [u for u in ast.toposort if u.op is Ops.LOAD and u.dtype.scalar() not in (dtypes.uint8, dtypes.int8)
               and u not in _index_loads(ast)]
    steps = {d.src[1].arg for f in factors for d in f.src[0].src[1].toposort
             if d.op is Ops.IDIV and d.src[0] is r and d.src[1].op is Ops.CONST}
    return min((k for k in steps if k < widest and widest % k == 0 and k % BYTE_DOT_STEPS == 0), default=widest)


def _row_groups(ranges: list[UOp], weights: list[UOp]) -> tuple[UOp | None, int]:
    """The batch axis of a row-lane product and how many of its rows share each weight load: all of a small batch
    (``_batch_rows``), groups of ``INVARIANT_ROWS`` of a larger one that they divide (a prefill's rows: the weight is
    read once per group, not per row). Output axes only: a row's sum has one order at any batch."""
    batch = _batch_rows(ranges, weights)
    if batch is not None:
        return batch, _size(batch)
    shared = [r for r in ranges if all(_stride(w, r) == 0 for w in weights)]
    if len(shared) == 1 and len(shared) < len(ranges) and _size(shared[0]) % INVARIANT_ROWS == 0:
        return shared[0], INVARIANT_ROWS
    return None, 0


def row_lane_plan(ast: UOp, simd_widths: dict[DType, int], wide_rows: int = 0) -> list[Opt] | None:
    """``row_lane_byte_dot_opts`` for a kernel of one store and one byte-dot reduction, else None: with
    ``wide_rows`` lanes (``Renderer.row_lane_rows``, a weight interleaved in groups of that many rows) when the
    weight's layout has them, else the native int32 vector's. Asked before the GEMM plans: at a batch of rows larger
    than the weight those took the row-lane product (and gave wrong sums: the generic block plan on this layout, noted
    in the session-13 review)."""
    stores = [s for s in ast.src if s.op is Ops.STORE]
    reduces = [u for u in ast.toposort if u.op is Ops.REDUCE]
    if len(stores) != 1 or len(reduces) != 1 or not simd_widths or not _byte_dot(reduces[0]):
        return None
    number = {r: i for i, r in enumerate(kernel_axes(ast))}
    index = stores[0].src[0].src[1]
    ranges = [r for r in index.toposort if r.op is Ops.RANGE and r in number and r.arg.kind is RangeKind.GLOBAL]
    for lanes in dict.fromkeys((wide_rows, simd_widths.get(dtypes.int32, 0))):
        if lanes and (opts := row_lane_byte_dot_opts(ast, reduces[0], ranges, _byte_inputs(ast), number, lanes,
                                                     index)) is not None:
            return opts
    return half_lane_opts(ast, reduces[0], ranges, _byte_inputs(ast), number, index)


def store_width(value: UOp, simd_widths: dict[DType, int],
                narrowing: frozenset[tuple[DType, DType]] = frozenset()) -> int:
    """Vector lanes for storing ``value``: its dtype's, or for a CAST the renderer narrows in the store
    (``Renderer.narrowing_stores``) its source's."""
    width = simd_widths.get(value.dtype, 0)
    if not width and value.op is Ops.CAST and (value.src[0].dtype, value.dtype) in narrowing:
        width = simd_widths.get(value.src[0].dtype, 0)
    return width


def vector_opts(ast: UOp, simd_widths: dict[DType, int], masked: bool = False, byte_dots: bool = False,
                registers: int = 16, narrowing: frozenset[tuple[DType, DType]] = frozenset(),
                batch_weight_rows: int = REDUCE_ROWS, elementwise_widths: dict[DType, int] | None = None) -> list[Opt]:
    """UPCAST and UNROLL records (see the module docstring) for ``ast``'s loops.

    In a reduction along its main input, the reduced axis is vectorized by ``reduce_lanes``: one native vector of
    the accumulator (wider ones make C compilers split every operation, and inside a quantization block an 8-lane
    slice sees one nibble shift, not a mix), or from ``WIDE_REDUCE_MIN`` on 32 lanes (16 or 8) so several native
    adds overlap. With one native vector, an output axis is unrolled by ``REDUCE_ROWS`` (sharing the loads; the
    rows' accumulators are independent) and a second one, if any (the other input's rows in a matrix product),
    by 2.
    """
    stores = [s for s in ast.src if s.op is Ops.STORE]
    if len(stores) != 1 or not simd_widths:
        return []
    axes = kernel_axes(ast)
    number = {r: i for i, r in enumerate(axes)}
    store = stores[0]
    width = store_width(store.src[1], simd_widths, narrowing)
    index = store.src[0].src[1]
    ranges = [r for r in index.toposort if r.op is Ops.RANGE and r in number and r.arg.kind is RangeKind.GLOBAL]
    reduces = [u for u in ast.toposort if u.op is Ops.REDUCE]
    mains = _main_inputs(ast)
    contiguous = [r for r in ranges if _stride(index, r) == 1]
    # the output axis is the one to vectorize when the inputs run along it too, and it has the lanes for a vector
    runs_along = bool(contiguous) and all(_stride(m, contiguous[0]) in (0, 1) for m in mains)
    along_output = runs_along and (not reduces or width < 2 or _size(contiguous[0]) % width == 0)
    if not reduces and along_output and elementwise_widths:
        width = _elementwise_width(ast, store, contiguous[0], width, elementwise_widths)
    if reduces and mains and not along_output and len(reduces) == 1:
        acc = reduces[0].dtype.scalar()
        acc_native = simd_widths.get(acc, 0)
        row_candidates = [r for r in ranges if _size(r) % REDUCE_ROWS == 0]
        reduce_ranges = [r for r in reduces[0].src[1:]
                         if any(_stride(m, r) == 1 for m in mains) or _bytes_per_step(mains, r) > 1
                         or (row_candidates and _grouped(ast, mains, r, acc_native))]
        lanes = reduce_lanes(_size(reduce_ranges[0]), acc, simd_widths) if reduce_ranges else 0
        # rows to interleave (the rows are the independent accumulators), unless the lanes are already several
        # native vectors (a long reduction)
        wide = lanes > acc_native > 1
        rows = row_candidates if not wide else []
        if byte_dots and _byte_dot(reduces[0]):
            opts = _byte_dot_opts(ast, reduces[0], reduce_ranges, row_candidates, number, simd_widths, mains, ranges,
                                  registers, batch_weight_rows)
            if opts is not None:
                return opts
        if lanes:
            red = reduce_ranges[0]
            vector = Opt(OptOps.UPCAST, number[red], lanes)
            # the finest block takes a sub-block's scale out of the per-element work; a format with scales at two
            # levels (K-quants: a super-block's d and dmin) nests the coarsest around it, so d leaves the sum
            # over sub-blocks too
            blocks = [k // lanes for k in block_divisors(ast, red) if k % lanes == 0 and k // lanes > 1]
            nested = sorted({max(blocks), min(blocks)}, reverse=True) if blocks else []
            if nested and nested[-1] > MAX_BLOCK_STEPS and nested[-1] % MAX_BLOCK_STEPS == 0:
                nested.append(MAX_BLOCK_STEPS)  # one scale per 256 values (TQ2_0): the steps in an unrolled loop
            block = [Opt(OptOps.BLOCK, number[red], k) for k in nested if nested[0] % k == 0]
            batch = batch_unrolls(ranges, mains, number, BATCH_COPIES) if not wide else []
            if batch:
                return [*batch, vector, *block]
            if not rows:
                return [vector, *block]
            # a second output axis (a matrix product: rows of both inputs) by 2: each loaded vector of either
            # input then feeds 2 or 4 accumulators instead of one
            cols = [r for r in ranges if r is not rows[0] and _size(r) % 2 == 0]
            return [Opt(OptOps.UNROLL, number[rows[0]], REDUCE_ROWS),
                    *(Opt(OptOps.UNROLL, number[c], 2) for c in cols[:1]), vector, *block]
    if not (contiguous and width > 1):
        return []
    size = _size(contiguous[0])
    gather = gather_unroll(ast, mains, ranges, contiguous[0], number) if not reduces and not along_output else []
    if not reduces and not along_output and not gather:
        gather = transpose_unroll(ast, mains, ranges, contiguous[0], number)
    if size % width:
        # rows that whole vectors do not fill (a padded copy; one row times a matrix of a prime width): padded,
        # their last vector gated lane by lane, on a renderer that has such accesses
        if masked and (not reduces or runs_along) and size >= 2 * width:
            # a short row of an elementwise kernel is unrolled: each copy's lane gates are constants (a renderer
            # that unrolls no loop by itself, X86, built them lane by lane on every iteration)
            vectors = ceildiv(size, width)
            short = not reduces and vectors <= MAX_UNROLL
            unrolled = [Opt(OptOps.UNROLL, number[contiguous[0]], vectors)] if short else []
            return [*gather, Opt(OptOps.PAD, number[contiguous[0]], width),
                    Opt(OptOps.UPCAST, number[contiguous[0]], width), *unrolled]
        if not reduces and along_output and size < width:
            return short_row_opts(index, ranges, contiguous[0], number, store.src[1].dtype.itemsize)
        return gather
    chosen = [*gather, Opt(OptOps.UPCAST, number[contiguous[0]], width)]
    if reduces:
        others = [r for r in ranges if r is not contiguous[0] and _size(r) % 4 == 0 and _size(r) >= 8]
        # rows some input of the sum does not run along: its loads then feed every unrolled row (a bias or scale
        # applied after the sum shares nothing: it is read once per output either way)
        shared = [r for r in others if any(_stride(idx, r) == 0 for idx in _load_indices(reduces[0].src[0]))]
        chains = next((n for n in OUTPUT_CHAINS if _size(contiguous[0]) % (width * n) == 0), 0) \
            if prod(_size(r) for r in reduces[0].src[1:]) >= LONG_CHAIN else 0
        if shared or (others and not chains):
            row = max(shared or others, key=lambda r: _stride(index, r) or 0)
            chosen.insert(0, Opt(OptOps.UNROLL, number[row], 8 if _size(row) % 8 == 0 and _size(row) >= 64 else 4))
        elif chains:
            # one output axis (attention's weights times values: out[h, d] = sum_t w[h, t] v[t, d]), or rows that
            # share no input (the sequences of a batched decode step: each reads its own cache; unrolled, their loads
            # were 32 bytes of each cache row, 8 rows 174 -> 55-65 us per weights-times-values kernel): the output
            # axis's next vectors unrolled, so several independent accumulator chains overlap on contiguous memory
            # (8 of 8 floats: a head of 64, each step reads a float16 value row's whole 128 bytes, not every other
            # line; SmolLM2's 8-row step, one thread: 4.1 -> 3.2 ms for its 30 weights-times-values kernels); where
            # consecutive runs of those vectors read the same rows of the streamed input (the query heads of one
            # grouped-query head: one value row), the runs unrolled together: each row loaded and converted once
            copies = _shared_runs(mains, contiguous[0], width * chains, (registers - SPARE_REGISTERS) // chains)
            chosen.append(Opt(OptOps.UNROLL, number[contiguous[0]], chains * copies))
    return chosen


def _elementwise_width(ast: UOp, store: UOp, lanes: UOp, width: int, wide: dict[DType, int]) -> int:
    """The renderer's wider lanes (``Renderer.elementwise_widths``) for a kernel with no reduction whose loads and
    store all have them (no conversion or narrowing the renderer does in narrower vectors: a float16 cache write's,
    a table lookup's) and whose contiguous output axis they divide; else ``width``. SmolLM2's decode step at 4 rows,
    one thread, C renderer with AVX-512, 8 -> 16 lanes: silu times up (E_4_1536) 3.78 -> 2.85 us, the softmax's masked
    exponent (E_4_3_3_192) 4.73 -> 2.99 us per layer (data in cache). A kernel that follows tens of microseconds of
    256-bit code pays the 512-bit units' warm-up (C harness, one row's masked exponent after 50-1000 us of ymm FMAs:
    0.78 -> 2.5-3.0 us, 8 lanes 1.2-1.3 us either way): in SmolLM2's step the softmax's exponent follows the ymm
    attention kernels (1 row: 1.7x slower, 4 rows 0.94x, 8 rows 0.79x), silu x up the zmm product (0.77-0.89x)."""
    dts = {u.dtype.scalar() for u in ast.toposort if u.op is Ops.LOAD} | {store.src[1].dtype.scalar()}
    lanes_of = {wide.get(dt, 0) for dt in dts}
    if len(lanes_of) != 1 or (n := lanes_of.pop()) <= width or _size(lanes) % n:
        return width
    return n


SHARED_RUNS = (4, 3, 2)  # runs of an output axis's vectors tried for reading the same streamed rows, most first
SPARE_REGISTERS = 4     # vector registers kept for loads and broadcasts beside the unrolled accumulators


def _shared_runs(mains: list[UOp], r: UOp, run: int, most: int) -> int:
    """How many consecutive runs of ``run`` steps of the output axis ``r`` (at most ``most``, one of ``SHARED_RUNS``)
    read the same addresses of a main input at the same step within each run: grouped-query attention's weights
    times values, where the query heads of one KV head (runs of head_dim outputs) read one value row. 1 when none do.
    Checked at ``GROUP_SAMPLES`` random points (as ``_grouped``). Only where a run is one head (head_dim = the
    vector width times the chains: 64 with 8 lanes and 8 chains; 128 or 32 gets no sharing). The X86 renderer keeps
    ymm values in ymm0-15, so at the AVX-512 level (32 registers counted) most of the 24 accumulators spill there;
    measured still faster than unshared (one thread: r_8_576_512 104 -> 91 us, review1 session 18)."""
    rng = random.Random(0)
    for runs in SHARED_RUNS:
        if runs > most or _size(r) % (run * runs):
            continue
        for index in dedup(i for m in mains for i in _address_indices(m)):
            if _stride(index, r) == 0:
                continue  # (not read along r at all: nothing to share by unrolling)
            leaves = [u for u in index.toposort if u.op in (Ops.RANGE, Ops.DEFINE_VAR) and u is not r]
            try:
                for _ in range(GROUP_SAMPLES):
                    values = {u: rng.randint(int(u.vmin), int(u.vmax)) for u in leaves}
                    start = rng.randrange(_size(r) // (run * runs)) * run * runs + rng.randrange(run)
                    if len({eval_at(index, {**values, r: start + j * run}) for j in range(runs)}) != 1:
                        break
                else:
                    return runs
            except (ValueError, KeyError):  # something a random point cannot give (a variable by name)
                continue
    return 1


MIN_VECTOR_BYTES = 16  # the narrowest vector worth its lanes (an SSE or NEON register)


def short_row_opts(index: UOp, ranges: list[UOp], lanes: UOp, number: dict[UOp, int], itemsize: int) -> list[Opt]:
    """For an elementwise kernel whose contiguous output axis ``lanes`` is shorter than a native vector (a row-lane
    weight dequantized: 4 values per step of each row, the steps other bits of the same bytes, so the two axes do not
    merge): the axis whole as a narrower vector of at least ``MIN_VECTOR_BYTES``, and the output axis whose stores
    continue its run unrolled (at most ``MAX_UNROLL`` copies: each copy's shift a constant). Before it every element
    was scalar code. [] when the axis is too short for such a vector."""
    size = _size(lanes)
    if size * itemsize < MIN_VECTOR_BYTES or size & (size - 1):
        return []
    vector = Opt(OptOps.UPCAST, number[lanes], size)
    after = next((r for r in ranges if _stride(index, r) == size), None)
    if after is None:
        return [vector]
    copies = max((c for c in range(2, MAX_UNROLL + 1) if _size(after) % c == 0), default=0)
    return [Opt(OptOps.UNROLL, number[after], copies), vector] if copies else [vector]


MAX_GATHER_UNROLL = 32  # copies of a transposed dequantization's loop body (one 32-element quantization block)


def gather_unroll(ast: UOp, mains: list[UOp], ranges: list[UOp], lanes: UOp, number: dict[UOp, int]) -> list[Opt]:
    """An UNROLL for an elementwise kernel whose vector lanes gather from packed bytes that run along another output
    axis (a quantized weight dequantized into its transpose): that axis unrolled by the largest quantization block
    it is divided into (at most ``MAX_GATHER_UNROLL``), so a block's scales and the bytes shared by neighbouring
    elements are loaded once per block for every copy instead of once per element."""
    packed = [u for u in ast.toposort if u.op is Ops.LOAD and u.src[0].src[1] in mains and u.dtype.itemsize == 1]
    if not packed:
        return []
    for r in ranges:
        blocks = [k for k in block_divisors(ast, r) if k <= MAX_GATHER_UNROLL and _size(r) % k == 0]
        if r is not lanes and blocks:
            return [Opt(OptOps.UNROLL, number[r], max(blocks))]
    return []


def transpose_unroll(ast: UOp, mains: list[UOp], ranges: list[UOp], lanes: UOp, number: dict[UOp, int]) -> list[Opt]:
    """An UNROLL for a copy whose main input runs contiguously along another output axis than the stores (a
    transpose, e.g. a matrix product's operand packed by ``schedule.pack``): that axis unrolled by one cache line of
    elements, so each line read is used up within one iteration. Otherwise every vector of the stores reads one
    element from each of its lanes' lines and the next iteration the next ones: with rows a power of two apart
    (a 512x512 transpose) those lines share a few cache sets and are evicted before their next element is read
    (measured 270 -> 70 us on one core)."""
    loads = [u for u in ast.toposort if u.op is Ops.LOAD and u.src[0].src[1] in mains]
    if not loads:
        return []
    line = CACHE_LINE // loads[0].dtype.itemsize
    for r in ranges:
        if r is not lanes and _size(r) % line == 0 and all(_stride(m, r) == 1 for m in mains):
            return [Opt(OptOps.UNROLL, number[r], line)]
    return []


MAX_SPREAD = 8  # sub-blocks per super-block whose factors are unpacked as one vector (a K-quant's 8 of 32)


def spread_opts(ast: UOp, opts: list[Opt], renderer: Renderer) -> list[Opt]:
    """A SPREAD for a byte-dot sum in sub-blocks of super-blocks (two BLOCKs of one axis: a K-quant's 8 sub-blocks
    of 32, each with a 6-bit scale and min unpacked from the super-block's bytes) on a renderer that takes vectors of
    block factors: the sub-blocks unrolled, their scales unpacked once per super-block as one vector (Q4_K 4096^2
    integer GEMV: the kernel loop over 4 rows and a super-block 827 -> 530 instructions). [] otherwise."""
    reduces = [u for u in ast.toposort if u.op is Ops.REDUCE]
    if not renderer.vector_block_factors or len(reduces) != 1 or not _byte_dot(reduces[0]):
        return []
    looked_up = [u for u in ast.toposort if u.op is Ops.LOAD and _indirect(u)]
    if any(getattr(u.src[0].src[0].dtype, "size", 0) == 16 and u.dtype.itemsize == 1 for u in looked_up):
        # values looked up in a table (IQ4_XS: a byte shuffle per 32 values, on the port the spread's permutes use):
        # 3-8% slower with it (jitted 4096^2 GEMV, one thread, alternating)
        return []
    blocks: dict[int, list[int]] = {}
    for o in opts:
        if o.op is OptOps.BLOCK:
            blocks.setdefault(o.axis, []).append(o.amount)
    spreads = [Opt(OptOps.SPREAD, axis, b[-2] // b[-1]) for axis, b in blocks.items()
               if len(b) >= 2 and b[-2] // b[-1] <= MAX_SPREAD]
    block = BYTE_DOT_STEPS * renderer.simd_widths.get(dtypes.int32, 0)
    if looked_up and spreads and not _factors_byte_by_byte(ast, reduces[0], block, spreads[0].amount):
        # rows gathered from a grid (the i-quants): the spread pays only where the sub-blocks' factors are one byte
        # each, side by side (IQ2_XS, IQ2_S: 4096^2 kernel, one thread 1.24 -> 1.16 ms); strided fields put
        # together byte by byte cost more than they save (IQ2_XXS 1.06 -> 1.52, IQ1_M 0.95 -> 1.15 ms)
        return []
    return spreads


def _factors_byte_by_byte(ast: UOp, red: UOp, block: int, subs: int) -> bool:
    """Whether the main input's loads that stay put inside a block of ``block`` reduced elements and move from one
    block to the next (a sub-block's packed factors) move one byte per block over the ``subs`` sub-blocks."""
    r = red.src[1] if len(red.src) == 2 else None
    if r is None or block <= 0 or _size(r) < block * subs:
        return False
    moving = []
    try:
        for index in _main_inputs(ast):
            leaves = {u: 0 for u in index.toposort if u.op in (Ops.RANGE, Ops.DEFINE_VAR) and u is not r}
            inside = {eval_at(index, {**leaves, r: v}) for v in range(block)}
            starts = [eval_at(index, {**leaves, r: j * block}) for j in range(subs)]
            if len(inside) == 1 and len(set(starts)) > 1:
                moving.append(starts)
    except (ValueError, KeyError):
        return False
    return bool(moving) and all(b - a == 1 for starts in moving for a, b in zip(starts, starts[1:], strict=False))


def heuristic_opts(ast: UOp, renderer: Renderer, threads: int = 1, work: int = 0) -> list[Opt]:
    """The default optimization list for ``ast`` on ``renderer`` (see the module docstring)."""
    threads = threads if renderer.has_threads else 1
    if not renderer.linear:  # a renderer that takes the REDUCE form vectorizes by itself
        return thread_opt(ast, [], threads, work)
    if renderer.compiles_byte_dots and (lanes := row_lane_plan(ast, renderer.simd_widths,
                                                                     renderer.row_lane_rows)) is not None:
        return lanes + thread_opt(ast, lanes, threads, work)
    if gemm := gemm_opts(ast, renderer, threads) or nt_gemm_opts(ast, renderer, threads, work):
        return gemm
    opts = vector_opts(ast, renderer.simd_widths, renderer.masked_vectors, renderer.compiles_byte_dots,
                       renderer.vector_registers, renderer.narrowing_stores, renderer.batch_weight_rows,
                       renderer.elementwise_widths)
    opts += spread_opts(ast, opts, renderer)
    if not opts:
        # nothing to vectorize (a convolution's weight or input gradient: no reduced axis both factors run along in
        # whole vectors, no contiguous output axis they run along): the register tile of nt_gemm_opts with scalar
        # accumulators, so each loaded element still feeds a row or a column of them
        opts = nt_gemm_opts(ast, renderer, threads, work, scalar=True)
        if opts:
            return opts
    return opts + thread_opt(ast, opts, threads, work)

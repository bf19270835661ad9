"""Explicit optimization lists (``tgcore.codegen.optimize``): every legal list computes what numpy computes, every
illegal one raises ``OptError`` naming the opt and the reason.

Kernels run end to end with one list for their compute kernel (``engine.realize.compile_runner(..., opts=)``), on
every device in ``TG_TEST_DEVICES`` (default CPU, PYTHON, and CPU:X86 when the tg-x86 plugin runs here). Inputs are
small integers in float32, so GEMMs and sums are exact whatever the order of the additions: results must equal
numpy's bit for bit. The output buffer is filled with NaN before the kernel runs, so an output the kernel forgets
to write shows.

Hypothesis draws shapes (1, primes, powers of two and their neighbours) and lists that fit them: each opt divides
what earlier opts left of its axis. TG_OPT_EXAMPLES=<n> sets the number of examples per property (default 25).
"""
from __future__ import annotations

import contextlib
import io
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tgcore.codegen import simplify_kernel
from tgcore.codegen.optimize import Opt, OptError, OptOps, apply_opts, kernel_axes
from tgcore.codegen.upcast import MAX_LANES
from tgcore.engine.realize import Runner, compile_runner, run_schedule
from tgcore.helpers import Context
from tgcore.runtime.registry import open_device
from tgcore.schedule.kernelize import ScheduleItem, create_schedule
from tgcore.tensor import Tensor
from tgcore.uop import Ops, RangeKind, SplitPart

UPCAST, UNROLL, TILE, BLOCK, THREAD = OptOps.UPCAST, OptOps.UNROLL, OptOps.TILE, OptOps.BLOCK, OptOps.THREAD


def _x86_reason() -> str | None:
    try:
        from tg_x86.cpu import unavailable_reason
    except ImportError as e:
        return f"tg-x86 is not importable ({e})"
    return unavailable_reason()


def _devices() -> list[str]:
    listed = os.environ.get("TG_TEST_DEVICES")
    if listed:
        return [d for d in listed.split(",") if d]
    return ["CPU", "PYTHON"] + (["CPU:X86"] if _x86_reason() is None else [])


DEVICES = _devices()
EXAMPLES = int(os.environ.get("TG_OPT_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
SIZES = [1, 2, 3, 7, 16, 64, 127, 128, 129, 13, 31, 12, 24]  # shrinks toward the front
SMALL_SIZES = [1, 2, 3, 7, 16, 5, 12, 32]


pytestmark = pytest.mark.usefixtures("spec_on")  # every rewrite checks its spec


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


# ------------------------------------------------------------------------------ running a list

def compute_kernel(t: Tensor, device: str) -> tuple[list[ScheduleItem], ScheduleItem]:
    """The schedule of ``t`` on ``device``: the kernels before the last one, and the last (the compute kernel)."""
    items, _ = create_schedule([t.uop], device)
    *before, last = items
    assert last.kind != "copy"
    return before, last


def axes_of(t: Tensor, device: str) -> list[tuple[RangeKind, int]]:
    """(kind, size) of each axis an ``Opt`` can name in ``t``'s compute kernel (GLOBAL or REDUCE)."""
    _, last = compute_kernel(t, device)
    return [(r.arg.kind, r.src[0].arg) for r in kernel_axes(simplify_kernel(last.ast))]


def run_with_opts(t: Tensor, opts: list[Opt], device: str) -> np.ndarray:
    """``t`` computed on ``device`` with ``opts`` for its compute kernel (the default policy for any kernel
    before it), as a numpy array."""
    before, last = compute_kernel(t, device)
    run_schedule(before)
    runner: Runner = compile_runner(last.device, last.ast, opts)
    out = last.bufs[0]  # outputs come first
    out.copyin(np.full(out.size, np.nan, out.dtype.np))
    handles = [last.bufs[i].ensure_allocated().handle for i in runner.spec.buf_slots]
    runner.program(*handles, vals=tuple(last.var_vals[v] for v in runner.spec.vars), threads=runner.spec.threads)
    return out.numpy().reshape(t.shape)


def small_ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-3, 4, shape).astype(np.float32)


def linear(device: str) -> bool:
    """Whether ``device``'s renderer takes UPCAST and TILE: it gets loops in the order codegen lists them and
    vectors; a renderer that takes the REDUCE form (PYTHON) interprets scalar loops in its own order."""
    return bool(open_device(device).renderer.linear)


# ------------------------------------------------------------------------------ legal lists

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def legal_opts(draw: st.DrawFn, axes: list[tuple[RangeKind, int]], *, vector: bool, tile: bool,
               registers: int) -> list[Opt]:
    """A list ``apply_opts`` must accept for a kernel with ``axes``: each opt divides what is left of its axis;
    one UPCAST (2..16 lanes); UNROLL copies (at most ``registers``, the accumulator limit) times lanes at most 64,
    so programs stay small; TILE (when ``tile``) and BLOCK (the last opt of its axis) on reduced axes; THREAD
    last, on an output axis."""
    left = [n for _, n in axes]
    reduced = any(kind is RangeKind.REDUCE for kind, _ in axes)
    opts: list[Opt] = []
    lanes = copies = 1
    tiled = False
    blocked: set[int] = set()
    for _ in range(draw(st.integers(0, 4))):
        choices: dict[OptOps, list[Opt]] = {UPCAST: [], UNROLL: [], TILE: [], BLOCK: []}
        for i, (kind, _) in enumerate(axes):
            if i in blocked:
                continue
            if vector and lanes == 1:
                choices[UPCAST] += [Opt(UPCAST, i, k) for k in (2, 4, 8, 16) if left[i] % k == 0 and k * copies <= 64]
            cap = min(registers if reduced else 64, 64 // lanes, 8 * copies) // copies
            choices[UNROLL] += [Opt(UNROLL, i, k) for k in _divisors(left[i]) if 1 < k <= cap]
            if kind is RangeKind.REDUCE:
                choices[TILE] += [Opt(TILE, i, k) for k in _divisors(left[i])] if tile else []
                choices[BLOCK] += [Opt(BLOCK, i, k) for k in _divisors(left[i]) if k > 1]
        kinds = [op for op, c in choices.items() if c]
        if not kinds:
            break
        o = draw(st.sampled_from(choices[draw(st.sampled_from(kinds))]))
        opts.append(o)
        if o.op is UPCAST:
            lanes = o.amount
        if o.op is UNROLL:
            copies *= o.amount
        if o.op is BLOCK:
            blocked.add(o.axis)
        tiled = tiled or o.op is TILE
        left[o.axis] = o.amount if o.op is TILE else left[o.axis] // o.amount
    outputs = [i for i, (kind, _) in enumerate(axes) if kind is RangeKind.GLOBAL and left[i] > 1]
    if outputs and draw(st.booleans()):
        i = draw(st.sampled_from(outputs))
        amounts = [k for k in (2, 3, 4) if not tiled or left[i] % k == 0]
        if amounts:
            opts.append(Opt(THREAD, i, draw(st.sampled_from(amounts))))
    return opts


def check_list(data: st.DataObject, t: Tensor, ref: np.ndarray, device: str, *, tile: bool = True,
               exact: bool = True) -> None:
    renderer = open_device(device).renderer
    axes = axes_of(t, device)
    opts = data.draw(legal_opts(axes, vector=linear(device), tile=tile and linear(device),
                                registers=renderer.vector_registers), label="opts")
    got = run_with_opts(t, opts, device)
    if exact:
        np.testing.assert_array_equal(got, ref, err_msg=f"{device} {axes} {[str(o) for o in opts]}")
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{device} {axes} {[str(o) for o in opts]}")


# ------------------------------------------------------------------------------ lists that once went wrong

def gemm_case(m: int, n: int, k: int, device: str) -> tuple[Tensor, np.ndarray]:
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = small_ints(rng, (m, k)), small_ints(rng, (k, n))
    return Tensor(a, device=device) @ Tensor(b, device=device), a @ b


@pytest.mark.parametrize("shape, opts", [
    ((1, 1, 2), [Opt(UNROLL, 0, 1)]),                                       # the only axis is the reduced one
    ((8, 8, 16), [Opt(UNROLL, 2, 4)]),
    ((8, 8, 16), [Opt(UNROLL, 2, 16)]),                                     # the whole reduction: no loop left
    ((8, 8, 16), [Opt(UNROLL, 2, 2), Opt(UNROLL, 2, 4), Opt(UNROLL, 0, 2)]),
], ids=lambda x: " ".join(map(str, x)))
def test_unrolling_a_reduced_axis_keeps_an_accumulator_per_copy(device, shape, opts):
    """UNROLL of a reduced axis used to substitute the copy number into the REDUCE's ranges (LinearizeError)."""
    t, ref = gemm_case(*shape, device)
    np.testing.assert_array_equal(run_with_opts(t, opts, device), ref)


def test_reduced_axis_unroll_with_upcast(device):
    if not linear(device):
        pytest.skip(f"{device} takes the REDUCE form: no UPCAST")
    t, ref = gemm_case(8, 8, 16, device)
    for opts in ([Opt(UPCAST, 2, 4), Opt(UNROLL, 2, 4)], [Opt(UNROLL, 2, 4), Opt(UPCAST, 1, 4)]):
        np.testing.assert_array_equal(run_with_opts(t, opts, device), ref)


@pytest.mark.parametrize("opts", [
    [Opt(UNROLL, 0, 2), Opt(TILE, 2, 4)],                    # a GEMM's register tile: rows unrolled, K tiled
    [Opt(UNROLL, 0, 4), Opt(UNROLL, 1, 2), Opt(TILE, 2, 8), Opt(UPCAST, 1, 4)],
    [Opt(TILE, 2, 4), Opt(UNROLL, 2, 4)],                    # the tile's whole inner loop unrolled
    [Opt(TILE, 2, 8), Opt(TILE, 2, 4)],                      # tiles of tiles
    [Opt(TILE, 2, 8), Opt(TILE, 2, 2), Opt(UNROLL, 0, 4), Opt(UPCAST, 1, 8), Opt(THREAD, 0, 2)],
], ids=lambda opts: " ".join(map(str, opts)))
def test_tile_with_unrolled_copies_and_more_tiles(device, opts):
    """TILE after an output UNROLL used to keep only the first copy's store (NaN rows); two TILEs raised
    ValueError("no identity for reduce None")."""
    if not linear(device):
        pytest.skip(f"{device} takes the REDUCE form: no TILE")
    t, ref = gemm_case(8, 8, 16, device)
    np.testing.assert_array_equal(run_with_opts(t, opts, device), ref)


@pytest.mark.parametrize("opts", [[Opt(TILE, 2, 4)], [Opt(UNROLL, 0, 2), Opt(TILE, 2, 8)], [Opt(UPCAST, 1, 4)]],
                         ids=lambda opts: " ".join(map(str, opts)))
def test_a_renderer_of_the_reduce_form_rejects_upcast_and_tile(opts):
    """PYTHON interprets scalar loops in its own order: TILE used to give wrong sums (every tile read the output
    before any wrote it), UPCAST a KernelError when the program ran."""
    from tgcore.renderer.python import PythonRenderer
    t, _ = gemm_case(8, 8, 16, "PYTHON")
    _, last = compute_kernel(t, "PYTHON")
    with pytest.raises(OptError, match=rf"{re.escape(str(opts[-1]))}: PythonRenderer takes the kernel in REDUCE form"):
        apply_opts(simplify_kernel(last.ast), opts, PythonRenderer())
    with pytest.raises(OptError):
        run_with_opts(t, opts, "PYTHON")


# ------------------------------------------------------------------------------ legal lists agree with numpy

@FUZZ
@given(data=st.data(), m=st.sampled_from(SIZES), n=st.sampled_from(SIZES), k=st.sampled_from(SIZES))
def test_gemm_with_any_legal_list_matches_numpy(device, data, m, n, k):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = small_ints(rng, (m, k)), small_ints(rng, (k, n))
    check_list(data, Tensor(a, device=device) @ Tensor(b, device=device), a @ b, device)


@FUZZ
@given(data=st.data(), batch=st.sampled_from([1, 2, 3, 4]), m=st.sampled_from(SMALL_SIZES),
       n=st.sampled_from(SMALL_SIZES), k=st.sampled_from(SMALL_SIZES))
def test_batched_matmul_with_any_legal_list_matches_numpy(device, data, batch, m, n, k):
    rng = np.random.default_rng(batch * 1000003 + m * 10007 + n * 101 + k)
    a, b = small_ints(rng, (batch, m, k)), small_ints(rng, (batch, k, n))
    check_list(data, Tensor(a, device=device) @ Tensor(b, device=device), a @ b, device)


@FUZZ
@given(data=st.data(), rows=st.sampled_from(SIZES), cols=st.sampled_from(SIZES), axis=st.sampled_from([0, 1]))
def test_reduction_with_an_epilogue_with_any_legal_list_matches_numpy(device, data, rows, cols, axis):
    """sqrt(sum(x*x) + 1) along either axis: the store's value is not the sum, so no TILE."""
    x = small_ints(np.random.default_rng(rows * 101 + cols), (rows, cols))
    t = ((Tensor(x, device=device) * Tensor(x, device=device)).sum(axis) + 1).sqrt()
    check_list(data, t, np.sqrt((x * x).sum(axis) + np.float32(1)), device, tile=False, exact=False)


# ------------------------------------------------------------------------------ BLOCK

def block_matvec(rows: int, blocks: int, k: int, device: str) -> tuple[Tensor, np.ndarray]:
    """out[n] = sum_j x[j] * (a[n, j // k] * y[n, j] + b[n, j // k]): a dequantize-and-dot of ``blocks`` blocks of
    ``k`` with a scale and an offset per block (see tests/test_codegen_blocks.py)."""
    rng = np.random.default_rng(rows * blocks + k)
    y, x = small_ints(rng, (rows, blocks * k)), small_ints(rng, (blocks * k,))
    a, b = small_ints(rng, (rows, blocks)), small_ints(rng, (rows, blocks))

    def per_block(v: np.ndarray) -> Tensor:
        return Tensor(v, device=device).reshape(rows, blocks, 1).expand(rows, blocks, k).reshape(rows, blocks * k)
    t = ((per_block(a) * Tensor(y, device=device) + per_block(b)) * Tensor(x, device=device)).sum(-1)
    return t, ((np.repeat(a, k, 1) * y + np.repeat(b, k, 1)) * x).sum(-1)


def block_lists(rows: int, k: int) -> tuple[list[list[Opt]], list[list[Opt]]]:
    """Lists without and with BLOCK for the matvec (axis 0: rows, then the reduction; no rows axis when rows = 1)."""
    r = 1 if rows > 1 else 0
    unroll_rows = [Opt(UNROLL, 0, rows)] if rows > 1 else []
    plain = [[], [Opt(UPCAST, r, 8)], [*unroll_rows, Opt(UPCAST, r, 8)], [Opt(UNROLL, r, 2)], [Opt(TILE, r, 2 * k)]]
    blocked = [
        [Opt(BLOCK, r, k)],
        [Opt(UPCAST, r, 8), Opt(BLOCK, r, k // 8)],
        [*unroll_rows, Opt(UPCAST, r, 8), Opt(BLOCK, r, k // 8)],           # the default policy's form
        [Opt(UNROLL, r, 2), Opt(BLOCK, r, k // 2)],
        [Opt(TILE, r, 2 * k), Opt(BLOCK, r, k)],
        [Opt(UPCAST, r, 4), Opt(BLOCK, r, k // 8)],                         # half blocks: no scale moves out
        [Opt(BLOCK, r, 2 * k)],                                             # pairs of blocks: likewise
    ]
    return plain, blocked


BLOCK_SHAPES = [(4, 6, 32), (13, 4, 16), (1, 2, 8)]


@pytest.mark.parametrize("rows, blocks, k", BLOCK_SHAPES)
def test_lists_with_block_give_the_numbers_of_lists_without(device, rows, blocks, k):
    t, ref = block_matvec(rows, blocks, k, device)
    plain, blocked = block_lists(rows, k)
    for opts in plain + blocked:
        if not linear(device) and any(o.op in (UPCAST, TILE) for o in opts):
            continue
        np.testing.assert_array_equal(run_with_opts(t, opts, device), ref, err_msg=" ".join(map(str, opts)))


@pytest.mark.parametrize("rows, blocks, k", BLOCK_SHAPES)
def test_block_offsets_that_no_element_multiplies(device, rows, blocks, k):
    """out[n] = sum_j a[n, j // k] * y[n, j] + c[j // k]: the offset ``c`` is constant over a block and depends on
    no output row, so its block sum depends on no loop. It once was a loop whose accumulator was zeroed once at the
    top of the kernel, outside the block and row loops, so every block of every row added all earlier blocks' sums
    too (tg-gguf's Q5_0/Q5_1 row-lane products at large batch: relative error 1e2..1e5)."""
    rng = np.random.default_rng(rows + blocks + k)
    y, a, c = small_ints(rng, (rows, blocks * k)), small_ints(rng, (rows, blocks)), small_ints(rng, (blocks,))
    scale = Tensor(a, device=device).reshape(rows, blocks, 1).expand(rows, blocks, k).reshape(rows, blocks * k)
    offset = Tensor(c, device=device).reshape(1, blocks, 1).expand(rows, blocks, k).reshape(rows, blocks * k)
    t = (scale * Tensor(y, device=device) + offset).sum(-1)
    ref = (np.repeat(a, k, 1) * y + np.repeat(c, k)[None]).sum(-1)
    plain, blocked = block_lists(rows, k)
    for opts in plain + blocked:
        if not linear(device) and any(o.op in (UPCAST, TILE) for o in opts):
            continue
        np.testing.assert_array_equal(run_with_opts(t, opts, device), ref, err_msg=" ".join(map(str, opts)))


@pytest.mark.parametrize("rows, blocks, k", BLOCK_SHAPES)
def test_block_is_applied_not_dropped(rows, blocks, k):
    """Each BLOCK list makes a block loop and an in-block loop."""
    renderer = open_device("CPU").renderer
    t, _ = block_matvec(rows, blocks, k, "CPU")
    _, last = compute_kernel(t, "CPU")
    ast = simplify_kernel(last.ast)
    for opts in block_lists(rows, k)[1]:
        optimized, _ = apply_opts(ast, opts, renderer)
        parts = {u.arg.parts[-1] for u in optimized.toposort if u.op is Ops.RANGE and u.arg.parts}
        assert {SplitPart.BLOCK, SplitPart.IN_BLOCK} <= parts, (opts, parts)


@pytest.mark.parametrize("opts", [[Opt(BLOCK, 1, 32), Opt(UPCAST, 1, 2)], [Opt(BLOCK, 1, 32), Opt(UNROLL, 1, 3)],
                                  [Opt(BLOCK, 1, 32), Opt(TILE, 1, 2)]],
                         ids=lambda opts: " ".join(map(str, opts)))
def test_an_opt_after_block_on_its_axis_is_rejected(opts):
    """apply_opts splits blocks last, on the loop left when the BLOCK came: a later split of the axis used to make
    it drop the BLOCK without a word."""
    t, _ = block_matvec(4, 6, 32, "CPU")
    _, last = compute_kernel(t, "CPU")
    with pytest.raises(OptError, match=rf"^{re.escape(str(opts[1]))}: BLOCK\(1,\d+\) already divides axis 1"):
        apply_opts(simplify_kernel(last.ast), opts, open_device("CPU").renderer)


def nested_block_matvec(rows: int, supers: int, per: int, k: int, device: str) -> tuple[Tensor, np.ndarray]:
    """A K-quant's shape of dequantize-and-dot: super-blocks of ``per`` sub-blocks of ``k``, a scale ``d`` and an
    offset scale ``e`` per super-block, a scale ``a`` and an offset ``b`` per sub-block:
    out[n] = sum_j x[j] * (d[n, s] * a[n, j // k] * y[n, j] - e[n, s] * b[n, j // k]), s = j // (per * k)."""
    rng = np.random.default_rng(rows * supers + per * k)
    n = supers * per * k
    y, x = small_ints(rng, (rows, n)), small_ints(rng, (n,))
    a, b = small_ints(rng, (rows, supers * per)), small_ints(rng, (rows, supers * per))
    d, e = small_ints(rng, (rows, supers)), small_ints(rng, (rows, supers))

    def spread(v: np.ndarray, size: int) -> Tensor:
        count = v.shape[1]
        return Tensor(v, device=device).reshape(rows, count, 1).expand(rows, count, size).reshape(rows, n)
    t = ((spread(d, per * k) * spread(a, k) * Tensor(y, device=device) - spread(e, per * k) * spread(b, k))
         * Tensor(x, device=device)).sum(-1)
    ref = ((np.repeat(d, per * k, 1) * np.repeat(a, k, 1) * y - np.repeat(e, per * k, 1) * np.repeat(b, k, 1))
           * x).sum(-1)
    return t, ref


NESTED_SHAPES = [(4, 3, 4, 16), (5, 2, 8, 16)]


@pytest.mark.parametrize("rows, supers, per, k", NESTED_SHAPES)
def test_nested_blocks_give_the_numbers_and_factor_each_scale_out(device, rows, supers, per, k):
    """Two BLOCKs on one axis (a super-block around sub-blocks, as the heuristic gives K-quants): exact against
    numpy, and the super-block's scale leaves the sum over its sub-blocks (a reduction over the sub-block loop
    whose value does not read ``d``)."""
    t, ref = nested_block_matvec(rows, supers, per, k, device)
    lists = [[Opt(BLOCK, 1, per * k), Opt(BLOCK, 1, k)],
             [*([] if rows % 4 else [Opt(UNROLL, 0, 4)]), Opt(UPCAST, 1, 8), Opt(BLOCK, 1, per * k // 8),
              Opt(BLOCK, 1, k // 8)]]
    for opts in lists:
        if not linear(device) and any(o.op is UPCAST for o in opts):
            continue
        np.testing.assert_array_equal(run_with_opts(t, opts, device), ref, err_msg=" ".join(map(str, opts)))
    _, last = compute_kernel(t, "CPU")
    optimized, _ = apply_opts(simplify_kernel(last.ast), lists[0], open_device("CPU").renderer)
    loops = {u.arg.parts: u for u in optimized.toposort if u.op is Ops.RANGE and u.arg.parts}
    assert set(loops) == {(SplitPart.BLOCK,), (SplitPart.IN_BLOCK, SplitPart.BLOCK),
                          (SplitPart.IN_BLOCK, SplitPart.IN_BLOCK)}
    over_subblocks = [u for u in optimized.toposort if u.op is Ops.REDUCE
                      and u.src[1:] == (loops[(SplitPart.IN_BLOCK, SplitPart.BLOCK)],)]
    assert len(over_subblocks) == 2  # d's sum and e's sum, each a reduction over the sub-blocks of its own


@pytest.mark.parametrize("opts", [[Opt(BLOCK, 1, 16), Opt(BLOCK, 1, 32)], [Opt(BLOCK, 1, 16), Opt(BLOCK, 1, 3)],
                                  [Opt(BLOCK, 1, 16), Opt(BLOCK, 1, 16)]], ids=lambda opts: " ".join(map(str, opts)))
def test_a_nested_block_must_divide_the_outer_one(opts):
    t, _ = nested_block_matvec(4, 3, 4, 16, "CPU")
    _, last = compute_kernel(t, "CPU")
    with pytest.raises(OptError, match=rf"^{re.escape(str(opts[1]))}: a BLOCK inside BLOCK\(1,16\) must divide"):
        apply_opts(simplify_kernel(last.ast), opts, open_device("CPU").renderer)


# ------------------------------------------------------------------------------ lists that do not fit

def gemm_ast(m: int, n: int, k: int, device: str = "CPU", dtype: type = np.float32) -> object:
    """The simplified compute kernel of an (m, k) @ (k, n) product: axes 0 (m), 1 (n), 2 (k, reduced)."""
    a, b = np.ones((m, k), dtype), np.ones((k, n), dtype)
    _, last = compute_kernel(Tensor(a, device=device) @ Tensor(b, device=device), device)
    return simplify_kernel(last.ast)


@pytest.mark.parametrize("opts, message", [
    ([Opt(UPCAST, 0, 5)], r"UPCAST\(0,5\): 5 does not divide the 12 iterations left of axis 0"),
    ([Opt(UNROLL, 1, 3)], r"UNROLL\(1,3\): 3 does not divide the 16 iterations left of axis 1"),
    ([Opt(TILE, 2, 3)], r"TILE\(2,3\): 3 does not divide the 20 iterations left of axis 2"),
    ([Opt(BLOCK, 2, 8)], r"BLOCK\(2,8\): 8 does not divide the 20 iterations"),
    ([Opt(UNROLL, 1, 4), Opt(UPCAST, 1, 8)], r"UPCAST\(1,8\): 8 does not divide the 4 iterations left of axis 1"),
    ([Opt(TILE, 2, 10), Opt(UNROLL, 2, 4)], r"UNROLL\(2,4\): 4 does not divide the 10 iterations"),  # in the tile
    ([Opt(UPCAST, 0, 4), Opt(UPCAST, 1, 4)], r"UPCAST\(1,4\): one axis per kernel can be vectorized, UPCAST\(0,4\)"),
    ([Opt(UPCAST, 2, 2), Opt(UPCAST, 2, 2)], r"UPCAST\(2,2\): one axis per kernel can be vectorized"),
    ([Opt(TILE, 0, 4)], r"TILE\(0,4\): TILE applies to reduced axes only"),
    ([Opt(BLOCK, 1, 4)], r"BLOCK\(1,4\): BLOCK applies to reduced axes only"),
    ([Opt(THREAD, 2, 2)], r"THREAD\(2,2\): only output axes run on threads"),
    ([Opt(UPCAST, 3, 2)], r"UPCAST\(3,2\): the kernel has 3 axes"),
    ([Opt(UNROLL, -1, 2)], r"UNROLL\(-1,2\): the kernel has 3 axes"),
    ([Opt(UNROLL, 0, 0)], r"UNROLL\(0,0\): amount must be positive"),
    ([Opt(TILE, 2, 4), Opt(THREAD, 0, 5)], r"THREAD\(0,5\): with a TILE the 12 iterations of axis 0 must divide"),
    ([Opt(THREAD, 0, 2), Opt(THREAD, 1, 2)], r"THREAD\(1,2\): one axis per kernel runs on threads, THREAD\(0,2\)"),
], ids=lambda x: " ".join(map(str, x)) if isinstance(x, list) else "")
def test_a_list_that_does_not_fit_raises_opt_error(opts, message):
    with pytest.raises(OptError, match=f"^{message}"):
        apply_opts(gemm_ast(12, 16, 20), opts, open_device("CPU").renderer)


def test_upcast_above_max_lanes_raises():
    lanes = 2 * MAX_LANES
    with pytest.raises(OptError, match=rf"^UPCAST\(1,{lanes}\): at most {MAX_LANES} lanes"):
        apply_opts(gemm_ast(4, lanes, 8), [Opt(UPCAST, 1, lanes)], open_device("CPU").renderer)
    apply_opts(gemm_ast(4, lanes, 8), [Opt(UPCAST, 1, MAX_LANES)], open_device("CPU").renderer)


@pytest.mark.parametrize("lanes", [3, 13, 24])
def test_upcast_of_lanes_not_a_power_of_two_raises(lanes):
    """A 13-lane vector (a pooled row of 13) used to pass the check and fail in the C compiler."""
    with pytest.raises(OptError, match=rf"^UPCAST\(1,{lanes}\): a vector has a power-of-two number of lanes"):
        apply_opts(gemm_ast(4, lanes, 8), [Opt(UPCAST, 1, lanes)], open_device("CPU").renderer)


def test_more_accumulators_than_vector_registers_raise(device):
    """UNROLL copies of a reduction each keep an accumulator: their product may not pass the renderer's
    ``vector_registers``; exactly that many is fine."""
    registers = open_device(device).renderer.vector_registers
    ast = gemm_ast(registers, 4, 8, device)
    with pytest.raises(OptError, match=rf"{2 * registers} accumulators do not fit in {registers} vector registers"):
        apply_opts(ast, [Opt(UNROLL, 0, registers), Opt(UNROLL, 1, 2)], open_device(device).renderer)
    with pytest.raises(OptError, match=rf"{2 * registers} accumulators do not fit"):
        apply_opts(ast, [Opt(UNROLL, 0, registers // 2), Opt(UNROLL, 2, 4)], open_device(device).renderer)
    apply_opts(ast, [Opt(UNROLL, 0, registers // 2), Opt(UNROLL, 1, 2)], open_device(device).renderer)


@pytest.mark.parametrize("what", ["cast", "int", "max"])
def test_tile_needs_a_float_sum_stored_in_its_dtype(what):
    """The output holds the partial sums of K tiles: not a float sum stored as half, an int sum or a max (an
    epilogue in the sum's dtype is fine: ``test_gemm.test_k_tiles_apply_an_epilogue_once``)."""
    x = np.ones((8, 16), np.float32)
    if what == "cast":
        t = (Tensor(x) @ Tensor(x.T)).cast("float16")
    elif what == "int":
        t = Tensor(x.astype(np.int32)) @ Tensor(x.T.astype(np.int32))
    else:
        t = Tensor(x).max(-1)
    _, last = compute_kernel(t, "CPU")
    reduced = len(kernel_axes(simplify_kernel(last.ast))) - 1
    with pytest.raises(OptError, match=rf"^TILE\({reduced},4\): TILE needs one store of one float sum"):
        apply_opts(simplify_kernel(last.ast), [Opt(TILE, reduced, 4)], open_device("CPU").renderer)


# ------------------------------------------------------------------------------ DEBUG=3

def test_debug_3_prints_the_explicit_list(device):
    t, ref = gemm_case(8, 16, 12, device)
    opts = [Opt(UNROLL, 0, 2), *([Opt(UPCAST, 1, 8), Opt(TILE, 2, 4)] if linear(device) else []), Opt(THREAD, 0, 2)]
    with Context(DEBUG=3), contextlib.redirect_stdout(io.StringIO()) as out:
        np.testing.assert_array_equal(run_with_opts(t, opts, device), ref)
    assert re.search(rf"^\w+: opts \[{re.escape(', '.join(map(str, opts)))}\]$", out.getvalue(), re.M), out.getvalue()


def test_debug_3_prints_the_default_list_and_it_applies(device):
    t, ref = gemm_case(24, 40, 33, device)  # a shape no other test compiles: the default list is chosen here
    with Context(DEBUG=3), contextlib.redirect_stdout(io.StringIO()) as out:
        np.testing.assert_array_equal(t.numpy(), ref)
    lists = re.findall(r"^\w+: opts \[(.*)\]$", out.getvalue(), re.M)
    assert len(lists) == 1, out.getvalue()
    printed = [m.groups() for m in re.finditer(r"(\w+)\((-?\d+),(\d+)\)", lists[0])]
    opts = [Opt(OptOps[op], int(axis), int(amount)) for op, axis, amount in printed]
    assert ", ".join(map(str, opts)) == lists[0]
    t2, _ = gemm_case(24, 40, 33, device)
    np.testing.assert_array_equal(run_with_opts(t2, opts, device), ref)


@settings(max_examples=80, deadline=None)
@given(step=st.integers(1, 70), bound=st.integers(-20, 400), lanes=st.sampled_from([4, 8, 16]),
       size=st.integers(1, 9), divisor=st.integers(2, 9))
def test_lanes_of_gates_clamps_and_divisions_are_their_values(step, bound, lanes, size, divisor):
    """``_Expander.per_lane`` (the per-lane forms of a vectorized kernel's indices and gates: an affine index offset per
    lane, other ops rebuilt from their sources' lanes) against Python arithmetic at every value of the loop: a padded
    tile's gate ``r*step + lane < bound``, a clamp and a division of that index."""
    from tgcore.codegen.upcast import _Expander
    from tgcore.uop import AxisArg, UOp
    from tgcore.uop.sint import eval_at
    r = UOp.range(size, AxisArg(0, RangeKind.GLOBAL))
    lane = UOp.range(lanes, AxisArg(0, RangeKind.UPCAST, split=1, lanes_of=RangeKind.GLOBAL))
    index = r * step + lane
    exprs = {"gate": (index < bound).simplify(), "clamp": (index < bound).where(index, bound - 1).simplify(),
             "division": (index // divisor).simplify(), "affine": index.simplify()}
    expected = {"gate": lambda x: x < bound, "clamp": lambda x: x if x < bound else bound - 1,
                "division": lambda x: x // divisor, "affine": lambda x: x}
    expander = _Expander([lane])
    for name, expr in exprs.items():
        per_lane = expander.per_lane(expr)
        assert len(per_lane) == lanes
        for o, e in enumerate(per_lane):
            assert lane not in e.toposort, (name, e.render())
            for v in range(size):
                assert eval_at(e, {r: v}) == expected[name](v * step + o), (name, o, v, e.render())


@pytest.mark.parametrize("table_dtype,size,flags,gathered", [
    ("uint8", 16, (False, True), True),     # byte_table_lookups: a 16-byte table only
    ("uint8", 32, (False, True), False),
    ("float32", 16, (False, True), False),
    ("uint8", 16, (False, False), False),
    ("float32", 16, (True, False), True),   # gathers: any table
])
def test_lookups_gathered_per_renderer_flags(table_dtype, size, flags, gathered):
    """``_Expander.looked_up``: a load at a value loaded per lane (a table at each lane's nibble) is a gather where the
    renderer ``gathers``, or only from a 16-byte table where it has ``byte_table_lookups`` (one byte shuffle)."""
    from tgcore.codegen.upcast import _Expander
    from tgcore.dtype import dtypes
    from tgcore.uop import AxisArg, UOp
    table_dtype = getattr(dtypes, table_dtype)
    r = UOp.range(4, AxisArg(0, RangeKind.GLOBAL))
    lane = UOp.range(8, AxisArg(0, RangeKind.UPCAST, split=1, lanes_of=RangeKind.GLOBAL))
    codes = UOp(Ops.PARAM, dtypes.uint8.ptr(32), (), 0)
    code = UOp(Ops.LOAD, dtypes.uint8, (UOp(Ops.INDEX, codes.dtype, (codes, r * 8 + lane)),))
    table = UOp(Ops.PARAM, table_dtype.ptr(size), (), 1)
    index = UOp(Ops.INDEX, table.dtype, (table, (code & 15).cast(dtypes.int32)))
    gathers, byte_tables = flags
    assert _Expander([lane], gathers=gathers, byte_tables=byte_tables).looked_up(index) is gathered

"""Batch invariance of the default policy (``tgcore.codegen.heuristic``, module docstring): a sum of products with at
most ``INVARIANT_ROWS`` rows sums each output element in the order one row alone does, so a model decoding several
sequences at once gives each the logits it gets alone, bit for bit.

Checked two ways: over the policy (the list's effect on the reduced axes, ``reduction_order``, is the same for 1 to
8 rows, for GEMV/GEMM-shaped kernels with float32, float16 and int8-with-scale weights, on the renderers the
machine has and on model register files), and by running them (each row of an R-row product bitwise equal to the
same row computed alone) on every device in ``TG_TEST_DEVICES``."""
import os

import numpy as np
import pytest

from tgcore.codegen import prepare_kernel
from tgcore.codegen.heuristic import heuristic_opts, reduction_order
from tgcore.codegen.invariance import INVARIANT_ROWS
from tgcore.codegen.optimize import Opt, OptOps, kernel_axes
from tgcore.dtype import dtypes
from tgcore.engine import realize
from tgcore.renderer import Renderer
from tgcore.runtime.cpufeatures import AVX512, CacheSizes, chosen_isa_level
from tgcore.runtime.registry import close_devices, open_device
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]
ROWS = range(1, INVARIANT_ROWS + 1)


def _weight(kind: str, n: int, k: int, device: str, transposed: bool) -> Tensor:
    """An (n, k) weight (``x @ W.T``), or (k, n) when not ``transposed`` (``x @ W``), as float32 values: stored so, or
    decoded from float16, or from int8 times a float32 scale per output."""
    shape = (n, k) if transposed else (k, n)
    if kind == "float32":
        return Tensor.empty(*shape, device=device)
    if kind == "float16":
        return Tensor.empty(*shape, dtype=dtypes.float16, device=device).float()
    scale = Tensor.empty(n, 1, device=device) if transposed else Tensor.empty(1, n, device=device)
    return Tensor.empty(*shape, dtype=dtypes.int8, device=device).float() * scale


def _product(rows: int, n: int, k: int, kind: str, transposed: bool, device: str = "CPU") -> Tensor:
    w = _weight(kind, n, k, device, transposed)
    return Tensor.empty(rows, k, device=device) @ (w.T if transposed else w)


class _Machine(Renderer):
    """A renderer as the policy sees it (it renders nothing here): AVX2- or AVX-512-sized vector registers."""
    has_threads = True
    masked_vectors = True
    simd_widths = {dtypes.float32: 8, dtypes.int32: 8, dtypes.float64: 4}


def _machine(bits: int, registers: int) -> Renderer:
    r = _Machine()
    r.vector_bits, r.vector_registers, r.cache_sizes = bits, registers, CacheSizes(48 << 10, 2 << 20)
    return r


def _x86_available() -> bool:
    try:
        from tg_x86.cpu import unavailable_reason
    except ImportError:
        return False
    return unavailable_reason() is None


def _renderers() -> dict[str, Renderer]:
    """The model register files, the machine's C renderer and, where it runs, the x86 one."""
    found = {"avx2-like": _machine(256, 16), "avx512-like": _machine(512, 32), "CPU": open_device("CPU").renderer}
    if _x86_available():
        found["CPU:X86"] = open_device("CPU:X86").renderer
    return found


RENDERERS = _renderers()
# (N outputs, K): an LLM's projections and head at small sizes, a K no vector divides, a long K (several vectors
# per accumulator), shapes big enough for the register tiles once there are rows. N > 4 * INVARIANT_ROWS: the
# weight, even in bytes, is the input the kernel streams (the policy's bound)
SHAPES = [(40, 64), (576, 576), (1536, 576), (576, 1000), (49, 4104), (512, 1024), (576, 1 << 16)]


def _compute_ast(t: Tensor, renderer: Renderer):
    kernel = prepare_kernel(create_schedule([t.uop], "CPU")[0][-1].ast, renderer)
    return kernel.ast, kernel.work


@pytest.mark.parametrize("name", list(RENDERERS))
@pytest.mark.parametrize("kind", ["float32", "float16", "int8"])
@pytest.mark.parametrize("transposed", [True, False], ids=["x@W.T", "x@W"])
@pytest.mark.parametrize("n,k", SHAPES)
def test_the_policy_sums_a_row_in_the_same_order_for_1_to_8_rows(name, kind, transposed, n, k):
    renderer = RENDERERS[name]
    orders, lists = {}, {}
    for rows in ROWS:
        ast, work = _compute_ast(_product(rows, n, k, kind, transposed), renderer)
        opts = heuristic_opts(ast, renderer, threads=2, work=work)
        orders[rows], lists[rows] = reduction_order(ast, opts), [str(o) for o in opts]
    differing = {r: (orders[r], lists[r]) for r in ROWS if orders[r] != orders[1]}
    assert not differing, f"1 row: {orders[1]} {lists[1]}; differs: {differing}"


def test_reduction_order_reads_the_reduced_axes_only():
    """The order a list gives: its opts of reduced axes (lanes, copies, K tiles), not those of the output axes."""
    renderer = RENDERERS["avx512-like"]
    ast, work = _compute_ast(_product(128, 1024, 1024, "float32", transposed=False), renderer)
    opts = heuristic_opts(ast, renderer, threads=2, work=work)
    assert any(o.op is OptOps.UNROLL for o in opts)  # a register tile: rows and columns unrolled
    assert reduction_order(ast, opts) == tuple((o.op, o.amount) for o in opts if o.op is OptOps.TILE)


@pytest.mark.parametrize("rows", [2, 3, 5, 8])
def test_a_small_batch_shares_each_weight_load(rows):
    """Rows times a decoded weight (``batch_unrolls``): every batch row is unrolled (each load of the weight feeds all
    of them) and the threads split the weight's rows, never the batch (each thread would stream the whole weight)."""
    renderer = RENDERERS["CPU"]
    ast, work = _compute_ast(_product(rows, 1536, 576, "int8", transposed=True), renderer)
    opts = heuristic_opts(ast, renderer, threads=2, work=work)
    sizes = [r.src[0].arg for r in kernel_axes(ast)]
    batch = sizes.index(rows)
    assert Opt(OptOps.UNROLL, batch, rows) in opts, [str(o) for o in opts]
    threads = [o for o in opts if o.op is OptOps.THREAD]
    assert threads and all(o.axis != batch for o in threads), [str(o) for o in opts]


# executed: (N, K) where 2+ rows take a register tile (x @ W.T's tile, or x @ W's with K blocks before)
RUN_SHAPES = [(576, 1024, True), (512, 1024, False), (49, 4104, True)]


def _stored(kind: str, w_np: np.ndarray, device: str) -> Tensor:
    """A weight as float32 values: stored so, as float16, or as int8 times a float32 scale per row of ``w_np``."""
    if kind != "int8":
        return Tensor(w_np.astype(np.float16) if kind == "float16" else w_np, device=device).realize().float()
    scale = np.abs(w_np).max(1, keepdims=True) / np.float32(127)
    q = Tensor(np.round(w_np / scale).astype(np.int8), device=device).realize()
    return q.float() * Tensor(scale, device=device).realize()


def _stored_np(kind: str, w_np: np.ndarray) -> np.ndarray:
    """The values ``_stored`` holds, computed by numpy (the reference)."""
    if kind == "float16":
        return w_np.astype(np.float16).astype(np.float32)
    if kind == "int8":
        scale = np.abs(w_np).max(1, keepdims=True) / np.float32(127)
        return np.round(w_np / scale).astype(np.int8).astype(np.float32) * scale
    return w_np


@pytest.mark.parametrize("name", list(RENDERERS))
@pytest.mark.parametrize("n,k", [(n, k) for n, k in SHAPES if n % 8 == 0])
def test_a_small_batch_pads_no_axis(name, n, k):
    """A small batch times a weight whose columns fill whole vectors gets a register tile that pads neither axis
    (``gemmplan._gate_free``): a padded tile gates its last loads, and the C compiler then left a row's multiply-add
    unfused where the row alone (no gate) has it fused (3 rows x 512 at AVX2: 3 vectors of 8 padded to 528)."""
    renderer = RENDERERS[name]
    for rows in ROWS:
        ast, work = _compute_ast(_product(rows, n, k, "float32", transposed=False), renderer)
        opts = heuristic_opts(ast, renderer, threads=2, work=work)
        assert not any(o.op is OptOps.PAD for o in opts), (rows, [str(o) for o in opts])


def _isas() -> list[str | None]:
    """The C renderer's levels to run: the machine's (None), and AVX2 too when it chose AVX-512 (``TG_ISA``)."""
    return [None, "avx2"] if chosen_isa_level() is AVX512 else [None]


@pytest.fixture(params=_isas(), ids=lambda isa: isa or "default-isa")
def isa(request, monkeypatch):
    """CPU devices opened at the ISA level ``TG_ISA`` names (the machine's when None), closed again after, and
    kernels compiled for them (the in-memory runners are keyed by the device's name, not its level)."""
    if request.param is not None:
        monkeypatch.setenv("TG_ISA", request.param)
    monkeypatch.setattr(realize, "_runners", {})
    close_devices()
    yield request.param
    close_devices()  # (before monkeypatch restores TG_ISA: the next test opens the machine's devices again)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["float32", "float16", "int8"])
@pytest.mark.parametrize("n,k,transposed", RUN_SHAPES)
def test_each_row_of_a_batch_is_bitwise_the_row_alone(device, kind, n, k, transposed, isa):
    if isa is not None and device != "CPU":
        pytest.skip("TG_ISA sets the C renderer's level only")
    rng = np.random.default_rng(n + k)
    x_np = rng.standard_normal((INVARIANT_ROWS, k), dtype=np.float32)
    w_np = rng.standard_normal((n, k) if transposed else (k, n), dtype=np.float32) / np.float32(np.sqrt(k))
    stored = _stored(kind, w_np, device)  # a weight
    w = stored.T if transposed else stored
    alone = [(Tensor(x_np[i:i + 1], device=device) @ w).numpy()[0] for i in range(INVARIANT_ROWS)]
    w_ref = _stored_np(kind, w_np)
    ref = x_np @ (w_ref.T if transposed else w_ref)
    np.testing.assert_allclose(np.stack(alone), ref, rtol=1e-4, atol=1e-4)  # the rows are right, not only equal
    for rows in range(2, INVARIANT_ROWS + 1):
        together = (Tensor(x_np[:rows], device=device) @ w).numpy()
        for i in range(rows):
            np.testing.assert_array_equal(together[i], alone[i], err_msg=f"row {i} of {rows}")

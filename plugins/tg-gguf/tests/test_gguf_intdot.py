"""Integer dot products (tg_gguf.intdot): activations quantized to 8 bits per block of 32 (or 256:
``activation_block``), multiplied with the weight's integers and summed in int32.

References: numpy's round-to-nearest-even for the activations' quantization (``q8_reference``), gguf-py's
dequantization for the weights, and a float64 product of the two. With unit weight scales and activation blocks
whose largest value is 127, every term and partial sum is an integer below 2**24: the result is exact in any
summation order, so it must match bit for bit. Random values are compared within float32 rounding of the
per-block sums."""
from __future__ import annotations

import os

import numpy as np
import pytest
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.dequant import FIELDS
from tg_gguf.intdot import (
    INT_DOT_TYPES,
    SUMS,
    TABLE_ROW_TYPES,
    activation_block,
    int_matmul,
    quantize_activations,
    uses_int_dot,
)
from tg_gguf_testutil import assert_bits_equal, random_blocks, reference_dequantize

from tgcore.tensor import Tensor

TYPES = list(SUMS)
ROWS = 7       # weight rows: not a multiple of the 4 rows a kernel interleaves
BATCH = 3      # activation rows


def q8_reference(x: np.ndarray, block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """numpy's version of quantize_activations: per ``block``, dx = max|x| * float32(1/127), xq = round(x / dx) with
    ties to even (np.round), zero blocks to zero."""
    xb = x.reshape(*x.shape[:-1], -1, block).astype(np.float32)
    dx = np.abs(xb).max(-1, keepdims=True) * np.float32(1 / 127)
    with np.errstate(divide="ignore", invalid="ignore"):
        xq = np.where(dx > 0, np.round(xb / dx), np.float32(0)).astype(np.int8).reshape(x.shape)
    return xq, dx.reshape(*x.shape[:-1], -1).astype(np.float32)


def unit_scale_blocks(gtype: GGMLType, n_blocks: int, seed: int) -> np.ndarray:
    """Random blocks whose half-precision scales are 1.0 (mins of Q4_1/Q5_1: -3.0; MXFP4's exponent 1.0): integer-valued
    weights (IQ1_S / IQ1_M: multiples of 1/8, as exact)."""
    raw = random_blocks(gtype, n_blocks, seed=seed).reshape(n_blocks, -1)
    for name, value in (("d", 1.0), ("dmin", 1.0), ("m", -3.0)):
        if name in FIELDS[gtype]:
            start, _ = FIELDS[gtype][name]
            raw[:, start:start + 2] = np.full(n_blocks, value, "<f2").view(np.uint8).reshape(n_blocks, 2)
    if gtype is GGMLType.IQ1_M:  # its d is the top nibbles of the 4 scale words: nibble k of 1.0's bits 0x3c00
        start, _ = FIELDS[gtype]["scales"]
        for k, nibble in enumerate((0x0, 0x0, 0xC, 0x3)):
            raw[:, start + 2 * k + 1] = (raw[:, start + 2 * k + 1] & 0x0F) | (nibble << 4)
    if "e" in FIELDS[gtype]:  # MXFP4's e8m0 exponent: 128 is a (halved) scale of 1.0 for its doubled values
        raw[:, FIELDS[gtype]["e"][0]] = 128
    return raw.reshape(-1)


def exact_activations(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    """Integers in [-3, 3] with one +-127 per block of 32: the quantization leaves them as they are (scale 1)."""
    x = rng.integers(-3, 4, (rows, k)).astype(np.float32)
    blocks = x.reshape(rows, -1, 32)
    blocks[:, :, 5] = rng.choice([-127.0, 127.0], blocks.shape[:2])
    return x


def float64_reference(gtype: GGMLType, raw: np.ndarray, shape: tuple[int, int], x: np.ndarray) -> np.ndarray:
    block = activation_block(gtype)  # (32, or 256 for a type in ``ACT_BLOCKS``)
    xq, dx = q8_reference(x, block)
    xd = (xq.reshape(*x.shape[:-1], -1, block).astype(np.float64) * dx[..., None]).reshape(x.shape)
    return xd @ reference_dequantize(gtype, raw, shape).astype(np.float64).T


@pytest.mark.parametrize("block", [32, 256])
def test_activations_match_numpy_bit_for_bit(block):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((5, 768)) * rng.uniform(0.01, 100, (5, 1))).astype(np.float32)
    x[1, 256:512] = 0.0                                 # an all-zero block
    x[2, :32] = np.arange(32, dtype=np.float32) - 15.5  # max 15.5: 127 / 15.5 * (k + 0.5) lands on ties
    x[2, 32:256] = 0.0
    x[3, :256] = 0.0
    x[3, :6] = [127.0, 0.5, 1.5, 2.5, -0.5, -2.5]       # scale 1: ties to even
    xq, dx = quantize_activations(Tensor(x, device="CPU"), block)
    ref_q, ref_d = q8_reference(x, block)
    np.testing.assert_array_equal(xq.numpy(), ref_q)
    assert_bits_equal(dx.numpy(), ref_d)
    assert xq.numpy()[3, :6].tolist() == [127, 0, 2, 2, 0, -2]


def _x86_missing() -> str | None:
    try:
        from tg_x86.cpu import unavailable_reason
    except ImportError:
        return "tg-x86 is not installed"
    return unavailable_reason()


@pytest.mark.parametrize("device", ["CPU", pytest.param("CPU:X86", marks=pytest.mark.skipif(
    _x86_missing() is not None, reason=f"X86 backend: {_x86_missing()}"))])
def test_activation_scales_of_special_values(device):
    """The block scales' bits as numpy's ``max|x| / 127`` where the largest magnitude is a negative zero, a subnormal,
    an infinity of either sign, the largest finite float or a NaN of either sign (the maximum is taken over the
    magnitudes' bits as integers: a NaN's are above infinity's)."""
    x = np.zeros((2, 8 * 32), np.float32)
    x[0, 0:32] = -0.0
    x[0, 32:64] = np.float32(1e-40) * np.arange(32, dtype=np.float32) * -1
    x[0, 64 + 5], x[0, 64 + 6] = -np.inf, 3.0
    x[0, 96 + 31] = np.inf
    x[0, 128:160] = -np.finfo(np.float32).max
    x[0, 160 + 7], x[0, 160 + 8] = np.nan, -np.inf
    x[0, 192 + 3] = -np.float32(np.nan)
    x[1] = np.random.default_rng(3).standard_normal(256).astype(np.float32) * -1e30
    xq, dx = quantize_activations(Tensor(x, device=device))
    with np.errstate(invalid="ignore", over="ignore"):
        ref_q, ref = q8_reference(x)
    assert_bits_equal(dx.numpy(), ref)
    finite = np.repeat(np.isfinite(ref), 32, axis=-1)  # (an infinite or NaN scale's quotients have no int8 value)
    np.testing.assert_array_equal(xq.numpy()[finite], ref_q[finite])


@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_int_matmul_exact(gtype):
    """Unit scales and exactly quantized activations: the integer path equals the float64 reference exactly, at an
    odd row count, three activation rows and two blocks (K-quants) or eight (the 32-blocks) per row."""
    block = BLOCK_LAYOUT[gtype][0]
    k = 2 * block if block > 32 else 256
    raw = unit_scale_blocks(gtype, ROWS * k // block, seed=int(gtype))
    x = exact_activations(np.random.default_rng(int(gtype)), BATCH, k)
    out = int_matmul(Tensor(x, device="CPU"), Tensor(raw, device="CPU"), gtype, (ROWS, k)).numpy()
    ref = float64_reference(gtype, raw, (ROWS, k), x)
    assert np.abs(ref).max() < 2 ** 24
    assert_bits_equal(out, ref.astype(np.float32))


@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1], ids=lambda t: t.name)
def test_subnormal_half_scales_are_exact(gtype):
    """Scales that are float16 subnormals (``d`` = 2**-24, Q4_1/Q5_1's ``m`` = -3 * 2**-24), read through the table
    of every half's float32 value: still exact against the float64 reference (integers times a power of two)."""
    k = 256
    raw = unit_scale_blocks(gtype, ROWS * k // 32, seed=11).reshape(ROWS * k // 32, -1)
    for name, value in (("d", 2.0 ** -24), ("m", -3 * 2.0 ** -24)):
        if name in FIELDS[gtype]:
            start, _ = FIELDS[gtype][name]
            raw[:, start:start + 2] = np.full(raw.shape[0], value, "<f2").view(np.uint8).reshape(-1, 2)
    raw = raw.reshape(-1)
    x = exact_activations(np.random.default_rng(11), BATCH, k)
    out = int_matmul(Tensor(x, device="CPU"), Tensor(raw, device="CPU"), gtype, (ROWS, k)).numpy()
    ref = float64_reference(gtype, raw, (ROWS, k), x)
    assert np.all(ref != 0) and np.abs(ref).max() < 1e-2  # (the scales did arrive: tiny, non-zero sums)
    assert_bits_equal(out, ref.astype(np.float32))


@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_int_matmul_random(gtype):
    """Random blocks and activations: within float32 rounding of the per-block sums of the reference."""
    block = BLOCK_LAYOUT[gtype][0]
    k = 2 * block if block > 32 else 320
    raw = random_blocks(gtype, ROWS * k // block, seed=3, small=True)
    x = np.random.default_rng(1).standard_normal((BATCH, k)).astype(np.float32)
    out = int_matmul(Tensor(x, device="CPU"), Tensor(raw, device="CPU"), gtype, (ROWS, k)).numpy()
    ref = float64_reference(gtype, raw, (ROWS, k), x)
    xq, dx = q8_reference(x, activation_block(gtype))
    scale = np.abs(xq.astype(np.float64)).reshape(BATCH, dx.shape[-1], -1) * dx[..., None]
    magnitude = scale.reshape(BATCH, k) @ np.abs(reference_dequantize(gtype, raw, (ROWS, k)).astype(np.float64)).T
    assert np.all(np.abs(out - ref) <= 1e-6 * magnitude + 1e-30)


# (Q4_K, Q6_K, TQ1_0 and IQ2_XS compile for ~20 s each here: under ``nox -s full``; the row lanes, which every
# byte-dot renderer takes for the first three, have their own batch-invariance tests in test_gguf_lanes.py, and the
# grid types are IQ1_M's and IQ3_XXS's kernels here)
@pytest.mark.parametrize("n", [48, 50])
@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.IQ4_NL,
                                   GGMLType.IQ4_XS, GGMLType.IQ1_M, GGMLType.IQ3_XXS,
                                   *((GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.IQ2_XS, GGMLType.TQ1_0)
                                     if os.environ.get("TG_FULL") else ())],
                         ids=lambda t: t.name)
def test_rows_do_not_depend_on_the_batch(gtype, n):
    """Each row's result is the same bits alone and in a batch of 2, 3, 4 or 8 (batched LLM decode relies on it).
    The shape is a small model's down projection: its kernels unroll the rows (and gcc's contraction of a * b + c
    into an FMA once changed with them, see ``tgcore.codegen.blocks.factor_blocks``), beside 4 weight rows (48) or
    2 (50: 4 do not divide it); the rows alone are also checked against the float64 reference."""
    k = 1536
    block = BLOCK_LAYOUT[gtype][0]
    raw = Tensor(random_blocks(gtype, n * k // block, seed=5, small=True), device="CPU")
    x = np.random.default_rng(2).standard_normal((8, k)).astype(np.float32)
    alone = [int_matmul(Tensor(x[i:i + 1], device="CPU"), raw, gtype, (n, k)).numpy()[0] for i in range(8)]
    expected = float64_reference(gtype, raw.numpy(), (n, k), x)
    np.testing.assert_allclose(np.stack(alone), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    for rows in (2, 3, 4, 8):
        together = int_matmul(Tensor(x[:rows], device="CPU"), raw, gtype, (n, k)).numpy()
        for i in range(rows):
            assert_bits_equal(alone[i], together[i])


@pytest.mark.parametrize("batch", [BATCH, 4])
@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.Q5_1, GGMLType.Q4_K, GGMLType.Q6_K], ids=lambda t: t.name)
def test_short_rows_do_not_depend_on_the_batch(gtype, batch):
    """A row's result is the same bits alone and in a batch (batched LLM decode relies on it; 4 rows: the batch's
    rows are unrolled too)."""
    block = BLOCK_LAYOUT[gtype][0]
    k = 2 * block if block > 32 else 256
    raw = Tensor(random_blocks(gtype, 12 * k // block, seed=5, small=True), device="CPU")
    x = np.random.default_rng(2).standard_normal((batch, k)).astype(np.float32)
    together = int_matmul(Tensor(x, device="CPU"), raw, gtype, (12, k)).numpy()
    alone = int_matmul(Tensor(x[1:2], device="CPU"), raw, gtype, (12, k)).numpy()
    assert_bits_equal(alone[0], together[1])


@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.IQ4_NL, GGMLType.IQ4_XS, GGMLType.MXFP4,
                                   GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S, GGMLType.IQ3_XXS,
                                   GGMLType.IQ3_S, GGMLType.IQ1_S, GGMLType.IQ1_M, GGMLType.TQ1_0],
                         ids=lambda t: t.name)
@pytest.mark.parametrize("device", ["PYTHON", "CPU:X86"])
def test_other_devices_compute_the_same(device, gtype):
    """The integer path is tensor ops: the interpreter and the x86 backend give the exact result too (the types
    whose values are looked up in a byte table or a grid among them)."""
    block = BLOCK_LAYOUT[gtype][0]
    k = max(64, block)
    raw = unit_scale_blocks(gtype, 5 * k // block, seed=1)
    x = exact_activations(np.random.default_rng(3), 2, k)
    out = int_matmul(Tensor(x, device=device), Tensor(raw, device=device), gtype, (5, k)).numpy()
    assert_bits_equal(out, float64_reference(gtype, raw, (5, k), x).astype(np.float32))


@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_x86_int_matmul_exact(gtype):
    """Every type on the x86 backend (vpdpbusd where it has AVX512-VNNI: ``tg_x86.bytedot``), as
    ``test_int_matmul_exact`` on CPU: odd row count, three activation rows."""
    pytest.importorskip("tg_x86")
    from tg_x86.cpu import unavailable_reason
    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason())
    block = BLOCK_LAYOUT[gtype][0]
    k = 2 * block if block > 32 else 256
    raw = unit_scale_blocks(gtype, ROWS * k // block, seed=int(gtype))
    x = exact_activations(np.random.default_rng(int(gtype)), BATCH, k)
    out = int_matmul(Tensor(x, device="CPU:X86"), Tensor(raw, device="CPU:X86"), gtype, (ROWS, k)).numpy()
    assert_bits_equal(out, float64_reference(gtype, raw, (ROWS, k), x).astype(np.float32))


def test_which_devices_and_types_use_it():
    assert uses_int_dot(GGMLType.Q4_K, "CPU")
    assert not uses_int_dot(GGMLType.Q4_K, "PYTHON")  # the interpreter: no compiler to vectorize byte dots
    assert not uses_int_dot(GGMLType.F16, "CPU")
    assert uses_int_dot(GGMLType.Q4_0, "CPU") == (GGMLType.Q4_0 in INT_DOT_TYPES)
    assert not uses_int_dot(9999, "CPU")
    assert uses_int_dot(GGMLType.IQ1_S, "CPU") == (GGMLType.IQ1_S in INT_DOT_TYPES)  # the C renderer gathers rows


def test_grid_types_take_the_float_path_without_row_gathers():
    """A grid type's integer path pays only where its table rows are gathered (``Renderer.gathers_table_rows``): not
    on the x86 backend (there its integer kernels were 5-20x slower than the float ones)."""
    pytest.importorskip("tg_x86")
    from tg_x86.cpu import unavailable_reason
    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason())
    assert not uses_int_dot(GGMLType.IQ1_S, "CPU:X86")
    assert not uses_int_dot(GGMLType.IQ2_XS, "CPU:X86")


@pytest.mark.parametrize("gtype,flag", [(GGMLType.IQ4_XS, "byte_table_lookups"), (GGMLType.MXFP4, "byte_table_lookups"),
                                        (GGMLType.IQ2_XS, "gathers_table_rows")])
def test_types_whose_integer_path_needs_more(gtype: GGMLType, flag: str, monkeypatch):
    """A type in ``INT_DOT_NEEDS`` takes the integer path only where the renderer also has that flag (C: a byte
    shuffle per 16-byte table lookup, grid rows gathered; X86: the shuffle, no gathers); without it, float."""
    from tgcore.runtime.registry import open_device
    cpu = open_device("CPU").renderer
    assert uses_int_dot(gtype, "CPU") and getattr(cpu, flag)
    with monkeypatch.context() as patched:
        patched.setattr(cpu, flag, False)
        assert not uses_int_dot(gtype, "CPU")  # the need is that flag
    assert uses_int_dot(gtype, "CPU")
    pytest.importorskip("tg_x86")
    from tg_x86.cpu import unavailable_reason
    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason())
    renderer = open_device("CPU:X86").renderer
    assert renderer.compiles_byte_dots
    assert uses_int_dot(gtype, "CPU:X86") == bool(getattr(renderer, flag))
    monkeypatch.setattr(renderer, flag, False)
    assert not uses_int_dot(gtype, "CPU:X86")
    assert uses_int_dot(GGMLType.Q4_0, "CPU:X86") and uses_int_dot(GGMLType.IQ4_NL, "CPU:X86")  # nothing more needed


def test_tq1_0_needs_byte_vector_multiplies_or_the_row_lanes(monkeypatch):
    """TQ1_0's integer path multiplies byte vectors (``Renderer.multiplies_byte_vectors``) unless its digits are taken
    apart once at load (the row lanes, ``Renderer.row_lane_byte_dots``): the C renderer has both, the x86 backend the
    row lanes only (its byte multiplies, lane by lane, were slower than its float kernel); without either, the float
    path."""
    from tgcore.runtime.registry import open_device
    assert uses_int_dot(GGMLType.TQ1_0, "CPU") == (GGMLType.TQ1_0 in INT_DOT_TYPES)
    cpu = open_device("CPU").renderer
    with monkeypatch.context() as patched:
        patched.setattr(cpu, "row_lane_byte_dots", False)
        assert uses_int_dot(GGMLType.TQ1_0, "CPU")  # the byte multiplies
        patched.setattr(cpu, "multiplies_byte_vectors", False)
        assert not uses_int_dot(GGMLType.TQ1_0, "CPU")
    pytest.importorskip("tg_x86")
    from tg_x86.cpu import unavailable_reason
    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason())
    x86 = open_device("CPU:X86").renderer
    assert not x86.multiplies_byte_vectors
    assert uses_int_dot(GGMLType.TQ1_0, "CPU:X86") == x86.row_lane_byte_dots
    monkeypatch.setattr(x86, "row_lane_byte_dots", False)
    assert not uses_int_dot(GGMLType.TQ1_0, "CPU:X86")


def test_bad_input_is_refused():
    raw = Tensor(np.zeros(18 * 2, np.uint8), device="CPU")
    with pytest.raises(ValueError, match="columns"):
        int_matmul(Tensor(np.zeros((1, 32), np.float32), device="CPU"), raw, GGMLType.Q4_0, (1, 64))
    with pytest.raises(ValueError, match="does not match"):
        int_matmul(Tensor(np.zeros((1, 64), np.float32), device="CPU"), raw, GGMLType.Q4_0, (2, 64))
    with pytest.raises(ValueError, match="no integer dot product for F16"):
        int_matmul(Tensor(np.zeros((1, 32), np.float32), device="CPU"), raw, GGMLType.F16, (2, 18))
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_activations(Tensor(np.zeros((1, 40), np.float32), device="CPU"))
    with pytest.raises(ValueError, match="multiple of 256"):
        quantize_activations(Tensor(np.zeros((1, 288), np.float32), device="CPU"), 256)


@pytest.mark.parametrize("k", [256, 512])
@pytest.mark.parametrize("gtype", sorted(TABLE_ROW_TYPES), ids=lambda t: t.name)
def test_an_activation_scale_per_256(gtype, k, monkeypatch):
    """A type in ``ACT_BLOCKS`` with 256 (the policy's data: the grid types measured so, not taken) has its
    activations quantized per 256 (llama.cpp's q8_K): with a block of 32 that is 100x larger than the rest of its 256,
    the small values round to a few steps of the large one's scale (the per-256 reference), which a scale per 32
    would not (that reference is far off). One super-block per row (k = 256: IQ3_S's kernel then unpacks its
    sub-blocks' scales as a vector, whose table address the codegen once took for a factor and no renderer could
    load) and two."""
    from tg_gguf import intdot
    assert activation_block(gtype) == 32  # (none is taken today)
    monkeypatch.setitem(intdot.ACT_BLOCKS, gtype, 256)
    assert activation_block(gtype) == 256 and activation_block(GGMLType.Q4_K) == 32
    raw = random_blocks(gtype, ROWS * k // 256, seed=4, small=True)
    x = np.random.default_rng(4).standard_normal((BATCH, k)).astype(np.float32)
    x[:, 64:96] *= 100.0
    out = int_matmul(Tensor(x, device="CPU"), Tensor(raw, device="CPU"), gtype, (ROWS, k)).numpy()
    ref = float64_reference(gtype, raw, (ROWS, k), x)
    xq, dx = q8_reference(x, 32)
    per_32 = (xq.reshape(BATCH, -1, 32) * dx[..., None].astype(np.float64)).reshape(BATCH, k)
    per_32 = per_32 @ reference_dequantize(gtype, raw, (ROWS, k)).astype(np.float64).T
    tolerance = 1e-5 * np.abs(ref).max()
    assert np.abs(out - ref).max() <= tolerance < np.abs(per_32 - ref).max()


@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q8_0], ids=lambda t: t.name)
def test_a_batch_of_8_rows_fits_16_vector_registers(gtype):
    """On a renderer with AVX2's 16 vector registers the small-batch policy unrolls at most 16 (batch row, weight
    row) pairs of an integer product: 8 batch rows beside 4 weight rows (32 accumulators) were refused by the
    applier (OptError), so batched decode failed to compile on AVX2 machines."""
    import copy

    from tgcore.codegen import prepare_kernel
    from tgcore.codegen.heuristic import heuristic_opts
    from tgcore.codegen.optimize import apply_opts
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    from tgcore.uop import Ops
    n, k = 48, 1536
    raw = Tensor(random_blocks(gtype, n * k // BLOCK_LAYOUT[gtype][0], seed=5, small=True), device="CPU")
    out = int_matmul(Tensor.empty(8, k, device="CPU"), raw, gtype, (n, k))
    renderer = copy.copy(open_device("CPU").renderer)
    renderer.vector_registers = 16
    products = [item.ast for item in create_schedule([out.uop], "CPU")[0]
                if any(u.op is Ops.REDUCE for u in item.ast.toposort) and len(item.ast.src) == 1]
    assert products
    for ast in products:
        kernel = prepare_kernel(ast, renderer)
        opts = heuristic_opts(kernel.ast, renderer, threads=2, work=kernel.work)
        apply_opts(kernel.ast, opts, renderer)  # (raises OptError for more accumulators than registers)


@pytest.mark.parametrize("registers,allowed,batch,weight_rows",
                         [(32, 8, 2, 8), (32, 8, 4, 8), (32, 8, 8, 4), (16, 8, 4, 4), (16, 8, 2, 4), (32, 4, 4, 4)])
def test_a_small_batch_shares_its_block_sums_with_8_weight_rows(registers, allowed, batch, weight_rows):
    """With 32 vector registers a batch of 2-4 rows times a Q4_1 weight unrolls as many weight rows beside its rows as
    the renderer allows (``batch_weight_rows``: 8 on the C renderer, each batch row's activation block sum and scale
    serving 8 of them), 8 batch rows keep 4 (32 pairs); with 16 registers 4 at most, as before. Output axes only:
    the rows' values stay exact against numpy on this device."""
    import copy

    from tgcore.codegen import prepare_kernel
    from tgcore.codegen.heuristic import heuristic_opts
    from tgcore.codegen.optimize import OptOps, kernel_axes
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    from tgcore.uop import Ops
    gtype, n, k = GGMLType.Q4_1, 48, 256
    raw = unit_scale_blocks(gtype, n * k // 32, seed=9)
    x = exact_activations(np.random.default_rng(9), batch, k)
    out = int_matmul(Tensor(x, device="CPU"), Tensor(raw, device="CPU"), gtype, (n, k))
    renderer = copy.copy(open_device("CPU").renderer)
    renderer.vector_registers, renderer.batch_weight_rows = registers, allowed
    (ast,) = [item.ast for item in create_schedule([out.uop], "CPU")[0]
              if any(u.op is Ops.REDUCE for u in item.ast.toposort) and len(item.ast.src) == 1
              and any(u.op is Ops.LOAD and u.dtype.itemsize == 1 for u in item.ast.toposort)]
    kernel = prepare_kernel(ast, renderer)
    opts = heuristic_opts(kernel.ast, renderer, threads=2, work=kernel.work)
    axes = kernel_axes(kernel.ast)
    weight_axis = next(i for i, r in enumerate(axes) if r.vmax + 1 == n)
    assert [o.amount for o in opts if o.op is OptOps.UNROLL and o.axis == weight_axis] == [weight_rows]
    assert_bits_equal(out.numpy(), float64_reference(gtype, raw, (n, k), x).astype(np.float32))


def test_tq1_0_sums_its_blocks_in_lanes():
    """TQ1_0's ``qh`` bytes (each for 4 neighbouring elements, the same in every lane: ``heuristic.PER_STEP``) beside
    ``qs`` in lane order: the C renderer's policy vectorizes the blocks of 32 in lanes of 4 neighbours (an UPCAST of
    the reduced axis by the int32 lanes), not the scalar block loops (12x slower)."""
    from tgcore.codegen import prepare_kernel
    from tgcore.codegen.heuristic import heuristic_opts, reduction_order
    from tgcore.codegen.optimize import OptOps
    from tgcore.dtype import dtypes
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    from tgcore.uop import Ops
    gtype, n, k = GGMLType.TQ1_0, 16, 512
    raw = Tensor(random_blocks(gtype, n * k // 256, seed=5, small=True), device="CPU")
    out = int_matmul(Tensor.empty(1, k, device="CPU"), raw, gtype, (n, k))
    renderer = open_device("CPU").renderer
    (ast,) = [item.ast for item in create_schedule([out.uop], "CPU")[0]
              if any(u.op is Ops.REDUCE for u in item.ast.toposort) and len(item.ast.src) == 1
              and any(u.op is Ops.LOAD and u.dtype.itemsize == 1 for u in item.ast.toposort)]
    kernel = prepare_kernel(ast, renderer)
    opts = heuristic_opts(kernel.ast, renderer, threads=1, work=kernel.work)
    assert (OptOps.UPCAST, renderer.simd_widths[dtypes.int32]) in reduction_order(kernel.ast, opts)


@pytest.mark.parametrize("gtype,spread", [(GGMLType.IQ2_XS, True), (GGMLType.IQ2_S, True), (GGMLType.IQ2_XXS, False),
                                          (GGMLType.IQ3_XXS, False), (GGMLType.IQ1_M, False)],
                         ids=lambda v: v.name if isinstance(v, GGMLType) else str(v))
def test_grid_types_spread_scales_packed_byte_by_byte(gtype, spread):
    """Beside grid rows gathered per block, the C renderer's policy unpacks the sub-blocks' scales once per
    super-block (``OptOps.SPREAD``) where each sub-block's scales are one byte and the bytes side by side (IQ2_XS,
    IQ2_S: 4-bit scales per 16), not where a sub-block's scale sits in a strided word (IQ2_XXS, IQ3_XXS, IQ1_M:
    there the spread was 20-45% slower). Exactness either way: ``test_int_matmul_exact``."""
    from tgcore.codegen import default_policy, prepare_kernel
    from tgcore.codegen.optimize import OptOps
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    from tgcore.uop import Ops
    n, k = 64, 512  # (16 rows are vectorized along the rows, not in byte dots)
    raw = Tensor(random_blocks(gtype, n * k // 256, seed=5, small=True), device="CPU")
    out = int_matmul(Tensor.empty(1, k, device="CPU"), raw, gtype, (n, k))
    renderer = open_device("CPU").renderer
    (ast,) = [item.ast for item in create_schedule([out.uop], "CPU")[0]
              if any(u.op is Ops.REDUCE for u in item.ast.toposort)
              and any(u.op is Ops.LOAD and u.src[0].src[0].dtype.size == raw.numel() for u in item.ast.toposort)]
    opts = default_policy(prepare_kernel(ast, renderer), renderer, 1)
    assert (OptOps.SPREAD in {o.op for o in opts}) == spread


@pytest.mark.parametrize("gtype", [GGMLType.Q5_0, GGMLType.Q5_1], ids=lambda t: t.name)
def test_fifth_bits_are_spread_at_once_on_the_c_renderer(gtype):
    """Q5's fifth bits (``_fifth``) reach the C renderer as one spread of the block's 32-bit ``qh``
    (``tgcore.renderer.cbytevectors.bits_as_sixteen``: one multishift with AVX512-VBMI), and stay exact."""
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    k = 256
    raw = unit_scale_blocks(gtype, ROWS * k // 32, seed=7)
    x = exact_activations(np.random.default_rng(7), 1, k)
    out = int_matmul(Tensor(x, device="CPU"), Tensor(raw, device="CPU"), gtype, (ROWS, k))
    sources = [get_program(si.ast, open_device("CPU").renderer).src
               for si in create_schedule([out.uop], "CPU")[0] if si.kind != "copy"]
    assert any("tg_bits_as16(" in src for src in sources)
    assert_bits_equal(out.numpy(), float64_reference(gtype, raw, (ROWS, k), x).astype(np.float32))

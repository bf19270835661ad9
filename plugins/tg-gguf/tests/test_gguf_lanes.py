"""Row-lane products (``tg_gguf.lanes``): exact against the float64 reference of the q8 path with unit scales, within
rounding with random ones, a row's bits the same at any batch size, rows not a multiple of 8 (a padded tail). On the
C renderer (CPU) and the X86 one (CPU:X86, ``tg_x86.bytedot.row_lanes_rule``): both have ``row_lane_byte_dots``."""
from __future__ import annotations

import os

import numpy as np
import pytest
from test_gguf_intdot import exact_activations, float64_reference, q8_reference, unit_scale_blocks
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.grid_lanes import GRIDS
from tg_gguf.intdot import QuantizedMatrix, quantize_activations
from tg_gguf.lanes import BLOCK, BLOCKS, LANE_TYPES, LAYOUT_TYPES, repack, row_lanes_matmul, uses_row_lanes
from tg_gguf_testutil import assert_bits_equal, random_blocks, reference_dequantize

from tgcore.tensor import Tensor

TYPES = sorted(LAYOUT_TYPES, key=int)
TAKEN = sorted(LANE_TYPES, key=int)  # (the types QuantizedMatrix takes the row lanes for)
# (Q3_K's larger batches and from_host under ``nox -s full``: ~14 s of compiles with a cold cache; its kernels have
# the exact, random and batch-invariance tests of every layout here)
# the grid types (``grid_lanes``) beyond one per kind (scales per 32: IQ1_S, per 16: IQ2_XS, rows of 4 bytes: IQ3_S)
# likewise (~10 s each)
LONG = set() if os.environ.get("TG_FULL") else {GGMLType.Q3_K, GGMLType.IQ2_XXS, GGMLType.IQ1_M, GGMLType.IQ3_XXS,
                                                GGMLType.IQ2_S}
TAKEN_SESSION = [t for t in TAKEN if t not in LONG]


def _cols(gtype: GGMLType, k: int) -> int:
    """``k`` columns, or for a type of larger blocks (Q4_K: 256) the next multiple of its block."""
    block = BLOCK_LAYOUT[gtype][0]
    return -(-k // block) * block


def _blocks(gtype: GGMLType, rows: int, k: int) -> int:
    return rows * k // BLOCK_LAYOUT[gtype][0]


def _x86_missing() -> str | None:
    try:
        from tg_x86.cpu import unavailable_reason
    except ImportError:
        return "tg-x86 is not installed"
    return unavailable_reason()


DEVICES = ["CPU", pytest.param("CPU:X86", marks=pytest.mark.skipif(_x86_missing() is not None,
                                                                   reason=f"X86 backend: {_x86_missing()}"))]


def _needs_gathers(gtype: GGMLType, device: str) -> None:
    """Skip a grid type where the renderer does not gather table rows (its row lanes do, ``grid_lanes``: X86 does
    not)."""
    from tgcore.runtime.registry import open_device
    if gtype in GRIDS and not open_device(device).renderer.gathers_table_rows:
        pytest.skip(f"{gtype.name}'s row lanes gather table rows: not on {device} (it keeps intdot's layout)")


def _product(x: np.ndarray, raw: np.ndarray, gtype: GGMLType, shape: tuple[int, int], device: str = "CPU"
             ) -> tuple[np.ndarray, int]:
    """The row-lane product on ``device`` and how many of its kernels' byte dots are chained (each added to the last:
    ``tg_dot4_u8i8_acc``, what the renderer makes a vpdpbusd into its accumulator; on C ``tg_dot4_bcst_acc``, the
    same reading its activation bytes from memory; their 16-lane forms where the renderer puts 16 rows in a vector)."""
    from tgcore.codegen import get_program
    from tgcore.renderer.cbroadcastdot import BCST16_ACC_HELPER, BCST_ACC_HELPER
    from tgcore.renderer.cbytedot import DOT16_ACC_HELPER, DOT_ACC_HELPER
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    from tgcore.uop import Ops
    _needs_gathers(gtype, device)
    xq, dx = quantize_activations(Tensor(x, device=device))
    out = row_lanes_matmul(xq, dx, repack(raw, gtype, shape, device))
    items = [si for si in create_schedule([out.uop], device)[0] if si.kind != "copy"]
    programs = [get_program(si.ast, open_device(device).renderer) for si in items]
    helpers = (DOT_ACC_HELPER, BCST_ACC_HELPER, DOT16_ACC_HELPER, BCST16_ACC_HELPER)
    chained = sum(u.op is Ops.CUSTOMI and u.arg in helpers for p in programs for u in p.uops)
    return out.numpy(), chained


def _near_reference(gtype: GGMLType, rows: int, k: int, batch: int, seed: int, x_seed: int, device: str = "CPU"
                    ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Random blocks times ``batch`` random activation rows through the row lanes, checked within rounding of the
    float64 reference; (raw, activations, chained dots, product)."""
    k = _cols(gtype, k)
    raw = random_blocks(gtype, _blocks(gtype, rows, k), seed=seed, small=True)
    x = np.random.default_rng(x_seed).standard_normal((batch, k)).astype(np.float32)
    out, chained = _product(x, raw, gtype, (rows, k), device)
    ref = float64_reference(gtype, raw, (rows, k), x)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    return raw, x, chained, out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [8, 13])
@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_row_lanes_exact(gtype, rows, device):
    """Unit scales, exactly quantized activations: bit-exact against the float64 reference; 13 rows: a padded tail.
    Each block of 8 rows is 8 byte multiply-adds (the helper's call chained through its accumulator: 7 per block;
    Q2_K's blocks of 16 values 4, 3 chained; a grid type's 4 of 8 values, 3 chained, or per 16 values 2, 1)."""
    k = 256
    raw = unit_scale_blocks(gtype, _blocks(gtype, rows, k), seed=int(gtype))
    x = exact_activations(np.random.default_rng(int(gtype)), 3, k)
    out, chained = _product(x, raw, gtype, (rows, k), device)
    assert_bits_equal(out, float64_reference(gtype, raw, (rows, k), x).astype(np.float32))
    # (a grid type's lane takes half its block's values: ``grid_lanes``, 8 per dot)
    assert chained >= (GRIDS[gtype].block // 8 if gtype in GRIDS else BLOCKS.get(gtype, BLOCK) // 4) - 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_row_lanes_random(gtype, device):
    """Random blocks and activations: within float32 rounding of the reference's per-block sums."""
    rows, k, batch = 11, _cols(gtype, 320), 3
    raw = random_blocks(gtype, _blocks(gtype, rows, k), seed=3, small=True)
    x = np.random.default_rng(1).standard_normal((batch, k)).astype(np.float32)
    out, _ = _product(x, raw, gtype, (rows, k), device)
    ref = float64_reference(gtype, raw, (rows, k), x)
    xq, dx = q8_reference(x)
    scale = np.abs(xq.astype(np.float64)).reshape(batch, -1, 32) * dx[..., None]
    magnitude = scale.reshape(batch, k) @ np.abs(reference_dequantize(gtype, raw, (rows, k)).astype(np.float64)).T
    assert np.all(np.abs(out - ref) <= 1e-6 * magnitude + 1e-30)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gtype", [t for t in TYPES if t is GGMLType.Q3_K or t not in LONG], ids=lambda t: t.name)
def test_row_lanes_do_not_depend_on_the_batch(gtype, device):
    """A row's bits alone and in batches of 3, 4 and 8 (21 rows: two whole groups of 8 and a padded one), 12 (every
    row reads the weight), 16 (groups of 8 rows share each weight load: a prefill) and 65 (65 rows share the weight's
    unpacked values more than the scheduler's ``MIN_BROADCAST`` times: Q5's were once materialized there, a kernel
    without byte dots and another order)."""
    rows, k = 21, 1536
    raw = random_blocks(gtype, _blocks(gtype, rows, k), seed=5, small=True)
    x = np.random.default_rng(2).standard_normal((65, k)).astype(np.float32)
    alone = {i: _product(x[i:i + 1], raw, gtype, (rows, k), device)[0][0] for i in (*range(9), 15, 64)}
    for batch in (3, 4, 8, 12, 16, 65):
        together, _ = _product(x[:batch], raw, gtype, (rows, k), device)
        for i in (i for i in alone if i < batch):
            assert_bits_equal(alone[i], together[i])


@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_row_lanes_dequantize_to_the_raw_bytes_bits(gtype):
    """Every layout's dequantization (the dense prefill's, taken or not) has the bits of the raw bytes' (13 rows: a
    padded tail) and gguf-py's values."""
    from tg_gguf import lanes
    from tg_gguf.dequant import dequantize
    rows, k = 13, _cols(gtype, 128)
    raw = random_blocks(gtype, _blocks(gtype, rows, k), seed=12, small=True)
    dense = lanes.dequantize(repack(raw, gtype, (rows, k), "CPU")).numpy()
    assert_bits_equal(dense, dequantize(Tensor(raw, device="CPU"), gtype, (rows, k)).numpy())
    np.testing.assert_allclose(dense, reference_dequantize(gtype, raw, (rows, k)), rtol=1e-6, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gtype", TAKEN_SESSION, ids=lambda t: t.name)
def test_row_lanes_with_more_activation_rows_than_weight_rows(gtype, device):
    """A batch larger than the weight (9 rows times 7, 64 times 16): within rounding of the reference, still chained
    byte dots, and a row's bits as alone (review: the GEMM plans took these products, and rows changed with the batch;
    Q5's five-bit values were materialized as int32 at 64 rows)."""
    for rows, k, batch in ((7, 64, 9), (16, 64, 64)):
        raw, x, chained, out = _near_reference(gtype, rows, k, batch, seed=9, x_seed=6, device=device)
        assert chained
        assert_bits_equal(_product(x[:1], raw, gtype, (rows, _cols(gtype, k)), device)[0][0], out[0])


def test_q3_k_keeps_its_third_bits_compact():
    """Q3_K's row-lane form: 132 bytes per 256 values (its 2-bit values as Q2_K's, its third bits one per value as in
    the file, ``d / 4`` as float32, the scales as int16), +20% over the file's 110 (its values as nibbles took 162)."""
    rows, k = 16, 512
    w = repack(random_blocks(GGMLType.Q3_K, _blocks(GGMLType.Q3_K, rows, k), seed=2), GGMLType.Q3_K, (rows, k), "CPU")
    held = sum(t.numel() * t.dtype.itemsize for t in (w.qs, w.d, w.qh, w.sc) if t is not None)
    assert held == rows * k // 256 * 132 and w.m is None and w.dmin is None and w.mn is None
    assert uses_row_lanes(GGMLType.Q3_K, "CPU")  # taken by default (the layout's cost is in the README)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="no row-lane layout"):
        repack(np.zeros(64, np.uint8), GGMLType.F16, (1, 32), "CPU")
    with pytest.raises(ValueError, match="does not match"):
        repack(np.zeros(143, np.uint8), GGMLType.Q4_K, (1, 256), "CPU")
    with pytest.raises(ValueError, match="does not match"):
        repack(np.zeros(35, np.uint8), GGMLType.Q8_0, (1, 32), "CPU")
    with pytest.raises(ValueError, match="tensor 'blk.0.attn_q.weight': Q8_0 weight of shape"):
        repack(np.zeros(35, np.uint8), GGMLType.Q8_0, (1, 32), "CPU", name="blk.0.attn_q.weight")
    with pytest.raises(ValueError, match="576 columns are not whole blocks of 256"):  # (the right byte count)
        repack(np.zeros(576 // 256 * 144 + 72, np.uint8), GGMLType.Q4_K, (1, 576), "CPU")
    w = QuantizedMatrix.from_host(random_blocks(GGMLType.Q4_0, 8 * 2, seed=1), GGMLType.Q4_0, (8, 64), "CPU", "w")
    with pytest.raises(ValueError, match=r"'w' of shape \(8, 64\) multiplies \(\.\.\., 64\) inputs, got \(2, 32\)"):
        w.matmul_t(Tensor(np.zeros((2, 32), np.float32), device="CPU"))


def test_which_devices_and_types_use_it():
    """The C renderer has the row-lane dots, and so has the X86 one wherever it has byte dots; the interpreter does
    not (it keeps ``intdot``). The grid types take them where the renderer gathers table rows (C)."""
    assert uses_row_lanes(GGMLType.Q4_1, "CPU") == (GGMLType.Q4_1 in LANE_TYPES)
    assert uses_row_lanes(GGMLType.Q4_K, "CPU") == (GGMLType.Q4_K in LANE_TYPES)
    assert uses_row_lanes(GGMLType.Q6_K, "CPU") == (GGMLType.Q6_K in LANE_TYPES)
    assert uses_row_lanes(GGMLType.Q3_K, "CPU") == (GGMLType.Q3_K in LANE_TYPES)
    assert not uses_row_lanes(GGMLType.F16, "CPU")
    assert not uses_row_lanes(GGMLType.Q4_1, "PYTHON")
    assert not uses_row_lanes(9999, "CPU")
    if _x86_missing() is None:
        from tgcore.runtime.registry import open_device
        x86 = open_device("CPU:X86").renderer
        assert x86.row_lane_byte_dots == x86.compiles_byte_dots
        assert uses_row_lanes(GGMLType.Q4_1, "CPU:X86") == (GGMLType.Q4_1 in LANE_TYPES and x86.row_lane_byte_dots)
        assert not any(uses_row_lanes(gtype, "CPU:X86") for gtype in GRIDS)  # (no gathers: intdot's layout)
    assert all(uses_row_lanes(gtype, "CPU") == grid.taken for gtype, grid in GRIDS.items())  # (C: gathers)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gtype", TAKEN, ids=lambda t: t.name)
def test_quantized_matrix_takes_the_row_lanes(gtype, device):
    """``QuantizedMatrix.matmul_t``: the repacked weight (made once), any leading shape, the same bits as the
    row-lane product of the flattened rows and within rounding of the float64 reference; the float path (no
    ``int_dot``) never repacks."""
    _needs_gathers(gtype, device)
    rows, k = 12, _cols(gtype, 128)
    raw = random_blocks(gtype, _blocks(gtype, rows, k), seed=7, small=True)
    w = QuantizedMatrix(Tensor(raw, device=device), gtype, (rows, k))
    assert w.row_lanes is not None and w.row_lanes is w.row_lanes
    x = np.random.default_rng(3).standard_normal((2, 3, k)).astype(np.float32)
    out = w.matmul_t(Tensor(x, device=device)).numpy()
    assert out.shape == (2, 3, rows)
    flat, _ = _product(x.reshape(6, k), raw, gtype, (rows, k), device)
    assert_bits_equal(out.reshape(6, rows), flat)
    ref = float64_reference(gtype, raw, (rows, k), x.reshape(6, k))
    np.testing.assert_allclose(flat, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert QuantizedMatrix(Tensor(raw, device=device), gtype, (rows, k), int_dot=False).row_lanes is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [16, 13])
@pytest.mark.parametrize("gtype", TAKEN_SESSION, ids=lambda t: t.name)
def test_from_host_keeps_the_row_lanes_only(gtype, rows, device):
    """``QuantizedMatrix.from_host`` holds the row-lane form only (no raw bytes on the device); its
    dequantization (the dense prefill's) has the bits of the raw bytes' (and gguf-py's values), its product those
    of the repacked raw weight's. Where the renderer has no row lanes (PYTHON) or without ``int_dot``, it keeps
    the raw bytes."""
    _needs_gathers(gtype, device)
    k = _cols(gtype, 128)
    raw = random_blocks(gtype, _blocks(gtype, rows, k), seed=11, small=True)
    w = QuantizedMatrix.from_host(raw, gtype, (rows, k), device, "w")
    assert w.raw is None and w.lanes is not None and w.row_lanes is w.lanes and w.device == device
    from_raw = QuantizedMatrix(Tensor(raw, device=device), gtype, (rows, k))
    dense = w.dequantized.numpy()
    assert_bits_equal(dense, from_raw.dequantized.numpy())
    np.testing.assert_allclose(dense, reference_dequantize(gtype, raw, (rows, k)), rtol=1e-6, atol=0)
    x = np.random.default_rng(4).standard_normal((3, k)).astype(np.float32)
    assert_bits_equal(w.matmul_t(Tensor(x, device=device)).numpy(),
                      from_raw.matmul_t(Tensor(x, device=device)).numpy())
    for kept_on, int_dot in (("PYTHON", True), (device, False)):
        kept = QuantizedMatrix.from_host(raw, gtype, (rows, k), kept_on, "w", int_dot)
        assert kept.raw is not None and kept.lanes is None and kept.row_lanes is None
        np.testing.assert_array_equal(kept.raw.numpy(), raw)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.Q5_1], ids=lambda t: t.name)
def test_row_lanes_with_activations_as_large_as_the_weight(gtype, device):
    """32 rows x 160 columns times 16 activation rows (a tiny model's attn_k in a prefill): the activations' bytes
    as many as the weight's (both the kernel's main inputs), still the row-lane plan (it once fell to the generic
    byte-dot plan, which dropped the offset term), within rounding of the float64 reference."""
    _, _, chained, _ = _near_reference(gtype, 32, 160, 16, seed=9, x_seed=6, device=device)
    assert chained


@pytest.mark.parametrize("device", DEVICES)
def test_one_block_rows_keep_the_raw_bytes(device):
    """A weight of 32 columns (one block per row: no block axis to split) does not take the row lanes."""
    raw = random_blocks(GGMLType.Q4_0, 16, seed=1, small=True)
    w = QuantizedMatrix.from_host(raw, GGMLType.Q4_0, (16, 32), device)
    assert w.raw is not None and w.row_lanes is None
    assert not uses_row_lanes(GGMLType.Q4_0, device, 32) and uses_row_lanes(GGMLType.Q4_0, device, 64)


# every type under ``nox -s full`` (TG_FULL: ~6 s of compiles each); one per unpacking rule (nibbles, fifth bits, a
# K-quant's scales and mins, blocks of 16 with an integer offset) in the 5-minute session
SIXTEEN_ROW_TYPES = TAKEN if os.environ.get("TG_FULL") else [GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q4_K,
                                                              GGMLType.Q6_K]


@pytest.mark.parametrize("gtype", SIXTEEN_ROW_TYPES, ids=lambda t: t.name)
def test_sixteen_row_groups_give_the_eight_row_bits(gtype):
    """A weight repacked in groups of 16 rows (a 512-bit vector per group where the C renderer targets AVX512-VNNI:
    ``Renderer.row_lane_rows``) gives the bits of groups of 8, random scales, 40 rows (a padded tail) times 5 rows;
    where CPU's renderer takes 16 rows the product's dots are its 16-lane ones."""
    from tgcore.renderer.cbroadcastdot import BCST16_ACC_HELPER
    from tgcore.renderer.cbytedot import DOT16_ACC_HELPER
    from tgcore.runtime.registry import open_device
    rows, k = 40, _cols(gtype, 128)
    raw = random_blocks(gtype, _blocks(gtype, rows, k), seed=int(gtype), small=True)
    xq, dx = quantize_activations(Tensor(np.random.default_rng(3).standard_normal((5, k)).astype(np.float32)))
    eight, sixteen = (row_lanes_matmul(xq, dx, repack(raw, gtype, (rows, k), "CPU", group=g)) for g in (8, 16))
    if open_device("CPU").renderer.row_lane_rows == 16:
        from tgcore.codegen import get_program
        from tgcore.schedule.kernelize import create_schedule
        from tgcore.uop import Ops
        items = [si for si in create_schedule([sixteen.uop], "CPU")[0] if si.kind != "copy"]
        uops = [u for si in items for u in get_program(si.ast, open_device("CPU").renderer).uops]
        assert any(u.op is Ops.CUSTOMI and u.arg in (DOT16_ACC_HELPER, BCST16_ACC_HELPER) for u in uops)
    assert_bits_equal(sixteen.numpy(), eight.numpy())


def test_row_groups_must_be_whole_groups_of_eight():
    raw = random_blocks(GGMLType.Q4_0, 16, seed=1, small=True)
    with pytest.raises(ValueError, match="groups of 12 rows"):
        repack(raw, GGMLType.Q4_0, (8, 64), "CPU", group=12)


def test_table_types_keep_groups_of_eight():
    """IQ4_NL/IQ4_XS/MXFP4 (values from a 16-byte table) stay in groups of 8 rows on every device (a 64-byte lookup is
    lane by lane in the C renderer), and so do the grid types (two lanes per row, ``grid_lanes``); the other types
    follow the renderer's ``row_lane_rows``."""
    from tg_gguf.lanes import LANES, group_rows

    from tgcore.runtime.registry import open_device
    wide = open_device("CPU").renderer.row_lane_rows
    for gtype in TYPES:
        assert group_rows("CPU", gtype) == (8 if gtype in GRIDS or LANES[gtype].table is not None else wide)
    raw = random_blocks(GGMLType.IQ4_NL, 16 * 2, seed=1, small=True)
    assert repack(raw, GGMLType.IQ4_NL, (16, 64), "CPU").d.shape[-1] == 8

"""The grid types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) in a GGUF file: a weight times a vector
at odd row counts on PYTHON, CPU and CPU:X86, against gguf-py's dequantization and a float64 product; the
dequantized weight bit for bit against gguf-py.

Their grid lookup is an indexed load from a constant tensor of packed codes (``Tensor.take``), so the product is
one kernel reading the raw bytes and the grid, with no float copy of the weight."""
from __future__ import annotations

import numpy as np
import pytest
import tg_gguf
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.dequant import GRID_TYPES
from tg_gguf_testutil import assert_bits_equal, gguf_with_tensor, random_blocks, reference_dequantize

from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

# rows (odd; 36 also takes the path that interleaves 4 rows, vectorized along each group of values), columns
SHAPES = {"PYTHON": [(5, 256)], "CPU": [(37, 512), (36, 512)], "CPU:X86": [(37, 512), (36, 512)]}


@pytest.mark.parametrize("device,shape", [(d, s) for d, shapes in SHAPES.items() for s in shapes])
@pytest.mark.parametrize("gtype", GRID_TYPES, ids=lambda t: t.name)
def test_grid_gemv_matches_numpy(gtype, device, shape):
    raw = random_blocks(gtype, shape[0] * shape[1] // BLOCK_LAYOUT[gtype][0], seed=5, small=True)
    gf = tg_gguf.from_bytes(gguf_with_tensor("w", shape, gtype, raw.tobytes()))
    ref_w = reference_dequantize(gtype, raw, shape)
    x = np.random.default_rng(7).standard_normal(shape[1]).astype(np.float32)
    w = gf.tensors_as(device=device)["w"]
    out = w @ Tensor(x, device=device)
    items, _ = create_schedule([out.uop], out.device)
    assert [si.kind for si in items] == ["reduce"]
    assert raw.size in [b.nbytes for b in items[0].bufs]
    assert all(b.nbytes not in (2 * w.numel(), 4 * w.numel()) for b in items[0].bufs)  # no float weight
    ref = ref_w.astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    assert_bits_equal(w.numpy(), ref_w)


def test_constant_tables_are_built_once_per_device():
    """Two weights of a grid type read the same grid and sign tables (one owner per device), and the tables are the
    format's: every grid row is gguf-py's (via the numpy reference's grids, checked against gguf-py elsewhere)."""
    from tg_gguf.quants import grid
    from tg_gguf.tables import TABLES
    raw = random_blocks(GRID_TYPES[2], 4, seed=1, small=True)
    gf = tg_gguf.from_bytes(gguf_with_tensor("w", (4, 256), GRID_TYPES[2], raw.tobytes()))
    first, second = (gf.tensors_as(device="CPU")["w"] for _ in range(2))
    bufs = [{id(b) for b in create_schedule([t.sum().uop], "CPU")[0][-1].bufs} for t in (first, second)]
    assert len(bufs[0] & bufs[1]) >= 3  # the raw bytes, the grid and the sign table
    assert TABLES.get("grid:IQ2XXS", "CPU") is TABLES.get("grid:IQ2XXS", "CPU")
    np.testing.assert_array_equal(TABLES.get("grid:IQ2XXS", "CPU").numpy().reshape(-1, 8), grid("IQ2XXS"))
    with pytest.raises(KeyError, match="no constant table"):
        TABLES.get("grid:NOPE", "CPU")


def _signed_row_blocks(gtype: GGMLType, index_bits: int) -> np.ndarray:
    """Super-blocks whose groups of 8 take every grid entry ``e`` with every sign index ``s`` in turn (group ``k``:
    ``e = k % 2**index_bits``, ``s = k >> index_bits``), ``d`` 1.0 and scales 0 (a factor 1/8 on each value)."""
    k = np.arange(128 << index_bits)
    if gtype is GGMLType.IQ2_XS:  # per group a u16: the grid index, the sign index above it
        qs = k.astype("<u2").view(np.uint8).reshape(-1, 64)
    else:  # IQ2_XXS: per 4 groups their 4 grid bytes, then a u32 of their 4 sign indices (and a scale of 0)
        e, s = (k & 255).reshape(-1, 4), (k >> 8).reshape(-1, 4)
        aux = (s[:, 0] | s[:, 1] << 7 | s[:, 2] << 14 | s[:, 3] << 21).astype("<u4")
        qs = np.concatenate([e.astype(np.uint8), aux.view(np.uint8).reshape(-1, 4)], axis=1).reshape(-1, 64)
    raw = np.zeros((qs.shape[0], BLOCK_LAYOUT[gtype][1]), np.uint8)
    raw[:, :2] = np.full(qs.shape[0], 1.0, "<f2").view(np.uint8).reshape(-1, 2)
    raw[:, 2:66] = qs
    return raw.reshape(-1)


@pytest.mark.parametrize("gtype,grid,index_bits", [(GGMLType.IQ2_XXS, "IQ2XXS", 8), (GGMLType.IQ2_XS, "IQ2XS", 9)],
                         ids=lambda v: getattr(v, "name", None))
def test_signed_grid_tables_hold_every_signed_row(gtype, grid, index_bits):
    """The integer path's rows of IQ2_XXS / IQ2_XS (``grid_signed_u8``: row ``(s << index_bits) | e``, signs applied,
    plus 64), every one of them, against gguf-py: 8 times its dequantization of a group with grid entry ``e`` and
    sign index ``s`` (``d`` 1.0, scale 0: each value times 1/8)."""
    from tg_gguf.tables import TABLES
    rows = 128 << index_bits
    ref = reference_dequantize(gtype, _signed_row_blocks(gtype, index_bits), (rows // 32, 256)).reshape(rows, 8) * 8
    table = TABLES.get(f"grid_signed_u8:{grid}", "CPU").numpy().reshape(rows, 8).astype(np.int32) - 64
    np.testing.assert_array_equal(table, ref)

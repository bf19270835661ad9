"""dequantize_numpy against gguf-py's gguf.quants.dequantize, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import tg_gguf
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.quants import DEQUANTIZERS, dequantize_numpy, grid, ksigns
from tg_gguf_testutil import random_blocks, require_gguf, smollm2_reader

TYPES = sorted(DEQUANTIZERS, key=int)


def reference(gtype: GGMLType, raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    gguf = require_gguf()
    rows = raw.reshape(-1, raw.size // max(1, int(np.prod(shape[:-1]))))
    with np.errstate(invalid="ignore", over="ignore"):
        return gguf.quants.dequantize(rows, gguf.GGMLQuantizationType(int(gtype))).reshape(shape)


def assert_bits_equal(ours: np.ndarray, ref: np.ndarray) -> None:
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    ref = ref.astype(np.float32)
    same = ours.view(np.uint32) == ref.view(np.uint32)
    both_nan = np.isnan(ours) & np.isnan(ref)
    assert np.all(same | both_nan), f"{np.count_nonzero(~(same | both_nan))} elements differ"


@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_random_bytes_match_gguf_py(gtype):
    """Arbitrary bit patterns, including inf/nan scales and subnormals."""
    block, block_bytes = BLOCK_LAYOUT[gtype]
    shape = (3, 4 * block)
    raw = np.random.default_rng(int(gtype)).integers(0, 256, size=3 * 4 * block_bytes, dtype=np.uint8)
    assert_bits_equal(dequantize_numpy(gtype, raw.tobytes(), shape), reference(gtype, raw, shape))


# types gguf-py can quantize (it only dequantizes the K-quants)
QUANTIZABLE = [GGMLType.F16, GGMLType.BF16, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0]


@pytest.mark.parametrize("gtype", QUANTIZABLE, ids=lambda t: t.name)
def test_quantized_weights_match_gguf_py(gtype):
    """Realistic data: quantized by gguf-py, dequantized by both."""
    gguf = require_gguf()
    block, _ = BLOCK_LAYOUT[gtype]
    x = np.random.default_rng(1).standard_normal((5, 8 * block)).astype(np.float32)
    q = gguf.quants.quantize(x, gguf.GGMLQuantizationType(int(gtype)))
    ours = dequantize_numpy(gtype, memoryview(np.ascontiguousarray(q)).cast("B"), x.shape)
    assert_bits_equal(ours, reference(gtype, q.view(np.uint8), x.shape))
    assert np.allclose(ours, x, atol=0.2 * np.abs(x).max())


IQ_TYPES = [GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S, GGMLType.IQ3_XXS, GGMLType.IQ3_S, GGMLType.IQ1_S,
            GGMLType.IQ1_M]


@pytest.mark.parametrize("gtype", IQ_TYPES, ids=lambda t: t.name)
def test_grid_types_with_sane_scales_match_gguf_py(gtype):
    """The grid types at an odd row count, with finite f16 scales (gguf-py cannot quantize them: random blocks)."""
    shape = (7, 3 * 256)
    raw = random_blocks(gtype, 21, seed=3, small=True)
    ours = dequantize_numpy(gtype, raw.tobytes(), shape)
    assert np.isfinite(ours).all() and np.count_nonzero(ours) > shape[0] * shape[1] // 2
    assert_bits_equal(ours, reference(gtype, raw, shape))


@pytest.mark.parametrize("name", ["IQ2XXS", "IQ2XS", "IQ2S", "IQ3XXS", "IQ3S", "IQ1S"])
def test_grids_are_gguf_py_grids(name):
    gguf = require_gguf()
    cls = getattr(gguf.quants, {"IQ2XXS": "IQ2_XXS", "IQ2XS": "IQ2_XS", "IQ2S": "IQ2_S", "IQ3XXS": "IQ3_XXS",
                                "IQ3S": "IQ3_S", "IQ1S": "IQ1_S"}[name])
    cls.init_grid()
    assert np.array_equal(grid(name), cls.grid.reshape(cls.grid_shape))


def test_ksigns_are_gguf_py_ksigns():
    gguf = require_gguf()
    assert ksigns(np.arange(128, dtype=np.uint8)).tobytes() == gguf.quants.IQ2_XXS.ksigns


def test_smollm2_tensors_match_gguf_py():
    gguf = require_gguf()
    path, reader = smollm2_reader()
    seen = set()
    with tg_gguf.load(path) as gf:
        for t in reader.tensors:
            info = gf.tensor_info[t.name]
            if info.type in seen or info.type not in DEQUANTIZERS:
                continue
            seen.add(info.type)
            ours = dequantize_numpy(info.type, gf.tensor_bytes(t.name), info.shape)
            ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(info.shape)
            assert_bits_equal(ours, ref)
    assert {GGMLType.Q4_1, GGMLType.Q8_0, GGMLType.F32} <= seen


def test_wrong_size_and_unsupported_type():
    with pytest.raises(ValueError, match="needs 36 bytes, got 35"):
        dequantize_numpy(GGMLType.Q4_0, bytes(35), (2, 32))
    with pytest.raises(ValueError, match="not a multiple of the Q8_0 block size 32"):
        dequantize_numpy(GGMLType.Q8_0, bytes(34), (1, 31))
    with pytest.raises(NotImplementedError, match="Q8_K"):
        dequantize_numpy(GGMLType.Q8_K, bytes(292), (256,))
    assert tg_gguf.dequantize_numpy is dequantize_numpy

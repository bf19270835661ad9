"""Dequantization as tensor ops (tg_gguf.dequant) against gguf-py's gguf.quants.dequantize, bit for bit,
on the CPU (C), CPU:X86 (our machine code; the tg-x86 plugin is a test dependency) and PYTHON devices."""
from __future__ import annotations

import numpy as np
import pytest
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.dequant import DEQUANTIZERS, UnsupportedTypeError, dequantize
from tg_gguf_testutil import assert_bits_equal, random_blocks, reference_dequantize

from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

TYPES = sorted(DEQUANTIZERS, key=int)
REQUIRED = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
            "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "MXFP4", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0",
            "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S"}


def shape_for(gtype: GGMLType) -> tuple[int, ...]:
    block, _ = BLOCK_LAYOUT[gtype]
    return (3, 2, max(4 * block, 64)) if block == 1 else (3, 4 * block)  # 12 blocks of the quantized types


def blocks_for(shape: tuple[int, ...], gtype: GGMLType) -> int:
    return int(np.prod(shape)) // BLOCK_LAYOUT[gtype][0]


def test_every_required_type_is_supported():
    assert {t.name for t in TYPES} >= REQUIRED


@pytest.mark.parametrize("device", ["CPU", "PYTHON", "CPU:X86"])
@pytest.mark.parametrize("gtype", TYPES, ids=lambda t: t.name)
def test_matches_gguf_py_bit_for_bit(gtype, device):
    shape = shape_for(gtype)
    raw = random_blocks(gtype, blocks_for(shape, gtype))
    ours = dequantize(Tensor(raw, device=device), gtype, shape).numpy()
    assert_bits_equal(ours, reference_dequantize(gtype, raw, shape))


@pytest.mark.parametrize("gtype", [GGMLType.Q4_K, GGMLType.Q8_0, GGMLType.F32, GGMLType.BF16, GGMLType.MXFP4],
                         ids=lambda t: t.name)
def test_float16_result_is_the_rounded_reference(gtype):
    shape = shape_for(gtype)
    raw = random_blocks(gtype, blocks_for(shape, gtype), seed=1)
    out = dequantize(Tensor(raw, device="CPU"), gtype, shape, dtype="float16")
    assert out.dtype.name == "float16"
    with np.errstate(over="ignore"):
        assert_bits_equal(out.numpy(), reference_dequantize(gtype, raw, shape).astype(np.float16))


@pytest.mark.parametrize("gtype", [GGMLType.Q4_0, GGMLType.Q6_K, GGMLType.IQ4_XS], ids=lambda t: t.name)
def test_realistic_sizes_and_row_shapes(gtype):
    """Many rows of several blocks each, as in a weight matrix."""
    block, _ = BLOCK_LAYOUT[gtype]
    shape = (37, 3 * block)
    raw = random_blocks(gtype, blocks_for(shape, gtype), seed=2, small=True)
    assert_bits_equal(dequantize(Tensor(raw), gtype, shape).numpy(), reference_dequantize(gtype, raw, shape))


def test_dequantization_is_one_fused_kernel():
    """Dequantizing is one elementwise kernel over the raw bytes, whatever the number of fields."""
    raw = Tensor(random_blocks(GGMLType.Q5_K, 4)).realize()
    out = dequantize(raw, GGMLType.Q5_K, (4, 256))
    items, _ = create_schedule([out.uop], out.device)
    assert [si.kind for si in items] == ["elementwise"]
    assert items[0].bufs[1].nbytes == 4 * BLOCK_LAYOUT[GGMLType.Q5_K][1]


def test_unsupported_and_unknown_types_name_type_and_tensor():
    raw = Tensor(np.zeros(66, np.uint8))
    with pytest.raises(UnsupportedTypeError, match=r"'blk\.0\.w'.*NVFP4 \(type 40\)"):
        dequantize(raw, GGMLType.NVFP4, (256,), name="blk.0.w")
    with pytest.raises(UnsupportedTypeError, match=r"'x'.*unknown ggml type id 99"):
        dequantize(raw, 99, (256,), name="x")
    with pytest.raises(NotImplementedError, match="Q8_K"):  # UnsupportedTypeError is a NotImplementedError
        dequantize(raw, GGMLType.Q8_K, (256,))


def test_bad_sizes_and_dtypes():
    with pytest.raises(ValueError, match="needs 36 uint8 bytes"):
        dequantize(Tensor(np.zeros(35, np.uint8)), GGMLType.Q4_0, (2, 32))
    with pytest.raises(ValueError, match="not a multiple of the Q8_0 block size 32"):
        dequantize(Tensor(np.zeros(34, np.uint8)), GGMLType.Q8_0, (1, 31))
    with pytest.raises(ValueError, match="float32 or float16"):
        dequantize(Tensor(np.zeros(18, np.uint8)), GGMLType.Q4_0, (32,), dtype="int8")
    assert dequantize(Tensor(np.zeros(0, np.uint8)), GGMLType.Q4_0, (0, 32)).numpy().shape == (0, 32)


@pytest.mark.parametrize("device", ["CPU", "PYTHON", "CPU:X86"])
def test_mxfp4_every_exponent_matches_gguf_py(device):
    """MXFP4 blocks with each of the 256 e8m0 exponents (the two smallest give subnormal scales, made with shifts by
    constants: ``dequant.e8m0_halved``) and random codes: gguf-py's values, bit for bit."""
    gtype = GGMLType.MXFP4
    raw = random_blocks(gtype, 256).reshape(256, BLOCK_LAYOUT[gtype][1])
    raw[:, 0] = np.arange(256, dtype=np.uint8)  # the exponent byte
    shape = (8, 256 * BLOCK_LAYOUT[gtype][0] // 8)
    ours = dequantize(Tensor(raw.reshape(-1), device=device), gtype, shape).numpy()
    assert_bits_equal(ours, reference_dequantize(gtype, raw.reshape(-1), shape))

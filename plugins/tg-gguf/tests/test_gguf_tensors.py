"""GGUFFile.tensors: name -> lazy dequantized Tensor, from files (DISK device) and from bytes."""
from __future__ import annotations

import numpy as np
import pytest
import tg_gguf
from tg_gguf.constants import BLOCK_LAYOUT, GGMLType
from tg_gguf.dequant import UnsupportedTypeError
from tg_gguf_testutil import (
    Builder,
    V,
    assert_bits_equal,
    random_blocks,
    reference_dequantize,
    require_gguf,
    smollm2_reader,
    write,
)

from tgcore.engine.stats import GlobalCounters
from tgcore.schedule.kernelize import create_schedule


def mixed_file() -> tuple[bytes, dict[str, tuple[GGMLType, tuple[int, ...], np.ndarray]]]:
    """A GGUF file with tensors of several types and shapes (numpy order), and their raw bytes."""
    specs = {"tok.weight": (GGMLType.Q4_K, (3, 512)), "a.weight": (GGMLType.Q8_0, (2, 4, 64)),
             "b.bias": (GGMLType.F32, (48,)), "c.weight": (GGMLType.Q5_0, (5, 96)),
             "n.weight": (GGMLType.BF16, (7,)), "iq.weight": (GGMLType.IQ3_S, (3, 256)),
             "fp4.weight": (GGMLType.NVFP4, (256,))}
    b = Builder()
    b.add("general.architecture", V.STRING, "test")
    out = {}
    for i, (name, (gtype, shape)) in enumerate(specs.items()):
        n_blocks = int(np.prod(shape)) // BLOCK_LAYOUT[gtype][0]
        raw = random_blocks(gtype, n_blocks, seed=10 + i) if gtype != GGMLType.NVFP4 else \
            np.zeros(n_blocks * BLOCK_LAYOUT[gtype][1], np.uint8)
        b.tensor(name, tuple(reversed(shape)), int(gtype), raw.tobytes())
        out[name] = (gtype, shape, raw)
    return b.build().data, out


def check_all(gf: tg_gguf.GGUFFile, expected: dict, device: str = "CPU") -> None:
    tensors = gf.tensors_as(device=device)
    for name, (gtype, shape, raw) in expected.items():
        if gtype == GGMLType.NVFP4:
            continue
        t = tensors[name]
        assert t.shape == shape and t.dtype.name == "float32" and t.device == device
        assert_bits_equal(t.numpy(), reference_dequantize(gtype, raw, shape))


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_tensors_from_a_file_read_through_disk(tmp_path, device):
    data, expected = mixed_file()
    path = write(tmp_path, data)
    with tg_gguf.load(path) as gf:
        tensors = gf.tensors_as(device=device)
        assert list(tensors) == list(expected) and len(tensors) == len(expected)
        assert "a.weight" in tensors and "nope" not in tensors
        raw = tensors.raw("tok.weight")
        assert raw.dtype.name == "uint8" and raw.shape == (gf.tensor_info["tok.weight"].nbytes,)
        assert raw.device == device
        assert raw.numpy().tobytes() == bytes(gf.tensor_bytes("tok.weight"))
        check_all(gf, expected, device)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_tensors_from_bytes(device):
    data, expected = mixed_file()
    gf = tg_gguf.from_bytes(data)
    check_all(gf, expected, device)


def test_disk_copy_reads_only_the_tensor_bytes(tmp_path):
    """The raw bytes come from a DISK view of exactly the tensor: a single copy, no compute kernel."""
    data, _ = mixed_file()
    with tg_gguf.load(write(tmp_path, data)) as gf:
        info = gf.tensor_info["c.weight"]
        view = gf._disk_tensor().shrink(((info.offset, info.offset + info.nbytes),)).to("CPU")
        items, _ = create_schedule([view.uop], "CPU")
        assert [si.kind for si in items] == ["copy"] and items[0].bufs[0].nbytes == info.nbytes


def test_bytes_are_loaded_once_and_dequantization_stays_lazy(tmp_path):
    data, expected = mixed_file()
    with tg_gguf.load(write(tmp_path, data)) as gf:
        first = gf.tensors["tok.weight"]
        kernels, mem = GlobalCounters.kernel_count, GlobalCounters.mem_used
        second = gf.tensors["tok.weight"]  # no copy, no kernel, no memory: the same bytes
        assert GlobalCounters.kernel_count == kernels and GlobalCounters.mem_used == mem
        assert gf.tensors.raw("tok.weight") is gf.tensors.raw("tok.weight")
        items, _ = create_schedule([(second * 2).uop], "CPU")
        assert [si.kind for si in items] == ["elementwise"]  # dequantization fused into the consumer
        assert first.uop is not None


def test_float16_option():
    data, expected = mixed_file()
    gf = tg_gguf.from_bytes(data)
    gtype, shape, raw = expected["tok.weight"]
    t = gf.tensors_as(dtype="float16")["tok.weight"]
    assert t.dtype.name == "float16"
    with np.errstate(over="ignore"):
        assert_bits_equal(t.numpy(), reference_dequantize(gtype, raw, shape).astype(np.float16))
    with pytest.raises(ValueError, match="float32 or float16"):
        gf.tensors_as(dtype="int8")


def test_errors_name_the_tensor():
    data, _ = mixed_file()
    gf = tg_gguf.from_bytes(data)
    with pytest.raises(UnsupportedTypeError, match=r"'fp4\.weight'.*NVFP4"):
        gf.tensors["fp4.weight"]
    with pytest.raises(KeyError, match="nope"):
        gf.tensors["nope"]
    gf.close()
    with pytest.raises(ValueError, match="closed"):
        gf.tensors["a.weight"]


def test_smollm2_every_tensor_matches_gguf_py():
    gguf = require_gguf()
    path, reader = smollm2_reader()
    types = set()
    with tg_gguf.load(path) as gf:
        tensors = gf.tensors_as(device="CPU")
        for t in reader.tensors:
            info = gf.tensor_info[t.name]
            ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(info.shape)
            assert_bits_equal(tensors[t.name].numpy(), ref)
            types.add(info.type)
    assert {GGMLType.Q4_1, GGMLType.Q8_0, GGMLType.F32} <= types

"""The reader against gguf-py: files written by gguf.GGUFWriter, the builder's files, and a real model."""
from __future__ import annotations

import mmap
import struct

import numpy as np
import pytest
import tg_gguf
from tg_gguf.constants import BLOCK_LAYOUT
from tg_gguf_testutil import (
    assert_same_as_reader,
    require_gguf,
    small_builder,
    smollm2_reader,
    write,
)


def write_with_gguf_py(path, alignment: int | None = None):
    """A file with every metadata value type (incl. nested arrays) and F32/F16/Q8_0 tensors."""
    gguf = require_gguf()
    V = gguf.GGUFValueType
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_name("writer test")
    w.add_context_length(2048)
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 2**32 - 1)
    w.add_int32("t.i32", -(2**31))
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float32("t.f32", 3.140000104904175)
    w.add_float64("t.f64", -2.718281828459045)
    w.add_bool("t.true", True)
    w.add_bool("t.false", False)
    w.add_string("t.str", "héllo ✓ wörld")
    w.add_string("t.empty", "")
    w.add_key_value("t.arr.u8", [0, 1, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.arr.i16", [-1, 2, -3], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("t.arr.u64", [2**64 - 1, 0], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("t.arr.f64", [0.1, -0.2], V.ARRAY, sub_type=V.FLOAT64)
    w.add_array("t.arr.i32", [1, -2, 3])
    w.add_array("t.arr.f32", [0.5, -0.25])
    w.add_array("t.arr.bool", [True, False, True])
    w.add_array("t.arr.str", ["a", "", "ünï"])
    w.add_array("t.arr.nested", [[1, 2], [3, 4, 5]])
    w.add_array("t.arr.nested.str", [["x", "y"], ["z"]])
    w.add_array("t.arr.nested3", [[[1], [2, 3]], [[4]]])
    rng = np.random.default_rng(0)
    w.add_tensor("f32.weight", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("f16.weight", rng.standard_normal((7,)).astype(np.float16))
    q8 = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q8.weight", q8, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("scalar.f32", np.array(1.5, dtype=np.float32).reshape(1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("alignment", [None, 64])
def test_gguf_writer_file_reads_back_like_gguf_reader(tmp_path, alignment):
    gguf = require_gguf()
    path = write_with_gguf_py(tmp_path / "w.gguf", alignment)
    with tg_gguf.load(path) as gf:
        assert_same_as_reader(gf, gguf.GGUFReader(path))
        assert gf.version == 3
        assert gf.alignment == (alignment or 32)
        assert gf.metadata["t.arr.nested"] == [[1, 2], [3, 4, 5]]
        assert gf.metadata["t.arr.nested3"] == [[[1], [2, 3]], [[4]]]
        assert gf.metadata["t.u64"] == 2**64 - 1
        assert gf.metadata["t.true"] is True
        assert gf.tensor_info["f32.weight"].shape == (3, 5)
        assert gf.tensor_info["q8.weight"].shape == (4, 64)
        assert gf.tensor_info["q8.weight"].type == tg_gguf.GGMLType.Q8_0
        for info in gf.tensor_info.values():
            assert info.offset % gf.alignment == 0


def test_builder_file_reads_back_like_gguf_reader(tmp_path):
    gguf = require_gguf()
    path = write(tmp_path, small_builder().build().data)
    with tg_gguf.load(path) as gf:
        assert_same_as_reader(gf, gguf.GGUFReader(path))
        assert gf.metadata["nested"] == [[1, 2], [3]]


def test_version_2_file(tmp_path):
    gguf = require_gguf()
    b = small_builder()
    b.version = 2
    path = write(tmp_path, b.build().data)
    with tg_gguf.load(path) as gf:
        assert gf.version == 2
        assert_same_as_reader(gf, gguf.GGUFReader(path))


def test_smollm2_matches_gguf_reader():
    path, reader = smollm2_reader()
    with tg_gguf.load(path) as gf:
        assert_same_as_reader(gf, reader, check_bytes=False)
        assert gf.metadata["general.architecture"] == "llama"
        assert len(gf.metadata["tokenizer.ggml.tokens"]) == 49152
        for name in ("token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"):
            t = next(t for t in reader.tensors if t.name == name)
            assert gf.tensor_bytes(name) == t.data.tobytes()


def test_type_table_matches_gguf_py():
    gguf = require_gguf()
    for t in tg_gguf.GGMLType:
        ref = gguf.GGMLQuantizationType[t.name]
        assert int(ref) == int(t)
        assert BLOCK_LAYOUT[t] == tuple(gguf.GGML_QUANT_SIZES[ref]), t.name
    assert {t.name: int(t) for t in tg_gguf.GGUFValueType} == {t.name: int(t) for t in gguf.GGUFValueType}


def test_tensor_bytes_is_a_zero_copy_view_of_the_mapping(tmp_path):
    path = write(tmp_path, small_builder().build().data)
    gf = tg_gguf.load(path)
    view = gf.tensor_bytes("b.weight")
    assert isinstance(view, memoryview) and view.readonly
    assert isinstance(view.obj, mmap.mmap)
    assert len(view) == gf.tensor_info["b.weight"].nbytes == 2 * 34
    with pytest.raises(KeyError, match="no tensor 'missing'"):
        gf.tensor_bytes("missing")
    gf.close()  # the view stays valid until released
    assert len(bytes(view)) == 68
    view.release()
    with pytest.raises(ValueError, match="closed"):
        gf.tensor_bytes("b.weight")


def test_huge_sparse_file_opens_without_reading_tensor_data(tmp_path):
    """A 3 GiB tensor: opening and taking its view must not read (or allocate) the data."""
    b = small_builder()
    b.tensors = []
    b.tensor("big", (2**28, 3), 0, data=b"")  # 3 GiB of F32 declared; the data is a sparse hole
    built = b.build().data
    path = tmp_path / "big.gguf"
    with open(path, "wb") as f:
        f.write(built)
        f.truncate(len(built) + 3 * 2**30)
    import resource
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tg_gguf.load(path) as gf:
        view = gf.tensor_bytes("big")
        assert len(view) == 3 * 2**30
        assert view[-1] == 0  # touch one page only
        view.release()
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 200 * 1024


def test_from_bytes_and_repr():
    gf = tg_gguf.from_bytes(small_builder().build().data, "mem")
    assert "3 tensors" in repr(gf)
    assert bytes(gf.tensor_bytes("a.weight")) == bytes((i * 7) % 251 for i in range(32))
    assert gf.tensor_info["a.weight"].dims == (4, 2)
    assert struct.unpack("<f", struct.pack("<f", gf.metadata["f32"]))[0] == 0.5


def test_tgcore_load_uses_the_installed_entry_point(tmp_path):
    import importlib_metadata

    import tgcore
    from tgcore.plugins.manager import PluginHost
    eps = [ep for ep in importlib_metadata.entry_points(group="tgcore") if ep.name == "gguf"]
    assert eps and eps[0].value == "tg_gguf.plugin", "pip install -e plugins/tg-gguf first"
    host = PluginHost(entry_points=eps, env={"TG_STRICT_PLUGINS": "1"}).load()
    assert host.plugins["gguf"].ok
    path = write(tmp_path, small_builder().build().data, name="no_suffix.bin")  # found by magic
    from tgcore.loading import find_loader
    assert find_loader(path, host).plugin == "gguf"
    gf = tgcore.load(write(tmp_path, small_builder().build().data))  # the process-wide host
    assert isinstance(gf, tg_gguf.GGUFFile)
    assert gf.metadata["general.architecture"] == "llama"
    gf.close()

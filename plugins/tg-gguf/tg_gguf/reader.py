"""Reading GGUF files: bytes in, a ``GGUFFile`` (metadata, tensor infos, zero-copy tensor bytes) out.

``load(path)`` maps the file read-only and parses only the header, the metadata and the tensor
infos; a tensor's bytes are touched only when ``tensor_bytes(name)`` is read. Every length read
from the file is checked against what is left of the file before anything is allocated, and
every problem raises ``GGUFError`` with the byte offset and the reason.

File layout (little-endian): magic ``GGUF``, u32 version, u64 tensor count, u64 kv count,
the kv pairs (string key, u32 value type, value), the tensor infos (string name, u32 n_dims,
u64 dims[n_dims] in ggml order, u32 ggml type, u64 offset relative to the data section), then
padding to ``general.alignment`` and the data section. A string is a u64 length and UTF-8
bytes; an array is a u32 element type, a u64 count and the elements.

This module imports no numpy, so ``import tg_gguf`` stays cheap.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn

from tg_gguf.constants import (
    BLOCK_LAYOUT,
    DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    MAX_DIMS,
    SCALAR_FORMATS,
    SUPPORTED_VERSIONS,
    GGMLType,
    GGUFValueType,
)

MAX_ARRAY_DEPTH = 8  # nested arrays deeper than this are rejected (real files use depth 1)
INT64_MAX = 2**63 - 1

# The fewest bytes one item can take, used to reject absurd counts before looping over them.
MIN_KV_BYTES = 8 + 4 + 1  # key length, value type, a one-byte value
MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # name length, n_dims, type, offset


def _min_value_bytes(vtype: GGUFValueType) -> int:
    if vtype == GGUFValueType.STRING:
        return 8  # the length of an empty string
    if vtype == GGUFValueType.ARRAY:
        return 4 + 8  # element type and count of an empty array
    return struct.calcsize("<" + SCALAR_FORMATS[vtype])


class GGUFError(ValueError):
    """A file is not a valid GGUF file (or uses a GGUF feature this reader does not support).

    ``offset`` is the byte offset in the file where the problem is, ``reason`` says what it is,
    ``path`` is the file (or ``None`` for an in-memory buffer).
    """

    def __init__(self, reason: str, offset: int, path: str | None = None) -> None:
        self.reason = reason
        self.offset = offset
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}invalid GGUF at byte {offset}: {reason}")


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor is and what it holds.

    ``shape`` is in numpy order (the file's ggml ``dims`` reversed: rows last); ``offset`` is
    absolute in the file; ``nbytes`` is the size of its (possibly quantized) data.
    """
    name: str
    type: GGMLType
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def dims(self) -> tuple[int, ...]:
        """The dimensions in ggml order, as stored in the file (fastest-varying first)."""
        return tuple(reversed(self.shape))

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class _RawInfo(NamedTuple):
    """A tensor info as read, before its data range is checked."""
    at: int  # where the info starts in the file
    name: str
    dims: list[int]  # ggml order
    type: GGMLType
    rel_offset: int  # relative to the data section
    nbytes: int


class _Cursor:
    """A read position over the file's bytes that checks every read against the file's end."""

    def __init__(self, buf: memoryview, path: str | None) -> None:
        self.buf = buf
        self.size = len(buf)
        self.pos = 0
        self.path = path

    @property
    def left(self) -> int:
        return self.size - self.pos

    def fail(self, reason: str, offset: int | None = None) -> NoReturn:
        raise GGUFError(reason, self.pos if offset is None else offset, self.path)

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        n = struct.calcsize("<" + fmt)
        if n > self.left:
            self.fail(f"file truncated: {what} needs {n} bytes but only {self.left} are left")
        values = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += n
        return values

    def u32(self, what: str) -> int:
        return self.unpack("I", what)[0]

    def u64(self, what: str) -> int:
        return self.unpack("Q", what)[0]

    def string(self, what: str) -> str:
        start = self.pos
        n = self.u64(f"{what} length")
        if n > self.left:
            self.fail(f"{what} length {n} runs past the end of the file ({self.left} bytes left)", start)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start} of the string)", start)

    def value_type(self, what: str) -> GGUFValueType:
        start = self.pos
        raw = self.u32(what)
        try:
            return GGUFValueType(raw)
        except ValueError:
            self.fail(f"unknown {what} {raw} (known: 0..{max(GGUFValueType)})", start)

    def value(self, vtype: GGUFValueType, depth: int = 0) -> tuple[Any, tuple[GGUFValueType, ...]]:
        """Read one value of type ``vtype``; return it and its type path, e.g. ``(ARRAY, INT32)``."""
        if vtype == GGUFValueType.STRING:
            return self.string("string value"), (vtype,)
        if vtype == GGUFValueType.ARRAY:
            return self.array(depth + 1)
        start = self.pos
        (v,) = self.unpack(SCALAR_FORMATS[vtype], f"{vtype.name} value")
        if vtype == GGUFValueType.BOOL:
            if v not in (0, 1):
                self.fail(f"bool value {v} is neither 0 nor 1", start)
            v = bool(v)
        return v, (vtype,)

    def array(self, depth: int) -> tuple[list[Any], tuple[GGUFValueType, ...]]:
        start = self.pos
        if depth > MAX_ARRAY_DEPTH:
            self.fail(f"arrays nested deeper than {MAX_ARRAY_DEPTH} levels")
        etype = self.value_type("array element type")
        count_at = self.pos
        n = self.u64("array length")
        if n * _min_value_bytes(etype) > self.left:
            self.fail(f"array of {n} {etype.name} values runs past the end of the file "
                      f"({self.left} bytes left)", count_at)
        if etype in SCALAR_FORMATS:
            fmt = f"{n}{SCALAR_FORMATS[etype]}"
            values = list(self.unpack(fmt, "array"))
            if etype == GGUFValueType.BOOL:
                bad = [v for v in values if v not in (0, 1)]
                if bad:
                    self.fail(f"bool array holds {bad[0]}, neither 0 nor 1", start)
                values = [bool(v) for v in values]
            return values, (GGUFValueType.ARRAY, etype)
        if etype == GGUFValueType.STRING:
            return [self.string("array string") for _ in range(n)], (GGUFValueType.ARRAY, etype)
        items = []
        inner: tuple[GGUFValueType, ...] = (etype,)
        for i in range(n):
            item, types = self.array(depth + 1)
            items.append(item)
            if i == 0:
                inner = types
        return items, (GGUFValueType.ARRAY, *inner)


def _check_version(cur: _Cursor) -> int:
    start = cur.pos
    version = cur.u32("version")
    if version in SUPPORTED_VERSIONS:
        return version
    swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
    if version == 1:
        cur.fail("GGUF version 1 is not supported (only versions 2 and 3 are); convert the file with a "
                 "current llama.cpp", start)
    if swapped in (1, *SUPPORTED_VERSIONS):
        cur.fail(f"big-endian GGUF files are not supported (version field is {swapped} big-endian)", start)
    cur.fail(f"unsupported GGUF version {version} (supported: {', '.join(map(str, SUPPORTED_VERSIONS))})", start)


def _read_alignment(cur: _Cursor, metadata: dict[str, Any], types: dict[str, tuple[GGUFValueType, ...]],
                    key_offsets: dict[str, int]) -> int:
    if "general.alignment" not in metadata:
        return DEFAULT_ALIGNMENT
    at = key_offsets["general.alignment"]
    if types["general.alignment"] != (GGUFValueType.UINT32,):
        cur.fail(f"general.alignment must be a UINT32, not {types['general.alignment'][0].name}", at)
    alignment = metadata["general.alignment"]
    if alignment == 0 or alignment & (alignment - 1):
        cur.fail(f"general.alignment {alignment} is not a power of two", at)
    return alignment


def _read_tensor_info(cur: _Cursor, alignment: int) -> _RawInfo:
    """One tensor info: name, ggml dims, type, offset relative to the data section, nbytes."""
    at = cur.pos
    name = cur.string("tensor name")
    dims_at = cur.pos
    n_dims = cur.u32(f"n_dims of tensor {name!r}")
    if n_dims > MAX_DIMS:
        cur.fail(f"tensor {name!r} has {n_dims} dimensions; at most {MAX_DIMS} are supported", dims_at)
    dims = list(cur.unpack(f"{n_dims}Q", f"dims of tensor {name!r}"))
    n_elements = 1
    for d in dims:
        n_elements *= d
    if any(d > INT64_MAX for d in dims) or n_elements > INT64_MAX:
        cur.fail(f"dims {dims} of tensor {name!r} overflow: {n_elements} elements do not fit in int64", dims_at)
    type_at = cur.pos
    raw_type = cur.u32(f"type of tensor {name!r}")
    try:
        gtype = GGMLType(raw_type)
    except ValueError:
        cur.fail(f"tensor {name!r} has unknown ggml type id {raw_type}", type_at)
    offset_at = cur.pos
    offset = cur.u64(f"offset of tensor {name!r}")
    block, block_bytes = BLOCK_LAYOUT[gtype]
    first = dims[0] if dims else 1
    if first % block:
        cur.fail(f"tensor {name!r}: first dimension {first} is not a multiple of the {gtype.name} "
                 f"block size {block}", dims_at)
    if offset % alignment:
        cur.fail(f"tensor {name!r} data offset {offset} is not a multiple of the alignment {alignment}",
                 offset_at)
    return _RawInfo(at, name, dims, gtype, offset, n_elements // block * block_bytes)


def parse(buf: memoryview, path: str | None = None) -> GGUFFile:
    """Parse the GGUF file held in ``buf`` (any bytes-like object); raise ``GGUFError`` if it is not one."""
    cur = _Cursor(buf, path)
    head = bytes(buf[:4])
    if head != GGUF_MAGIC:
        if len(head) < 4 and GGUF_MAGIC.startswith(head):
            cur.fail(f"file truncated: {len(head)} bytes, too short for the GGUF magic" if head
                     else "file is empty", 0)
        cur.fail(f"bad magic {head!r} (expected {GGUF_MAGIC!r}): not a GGUF file", 0)
    cur.pos = 4
    version = _check_version(cur)
    tcount_at = cur.pos
    tensor_count = cur.u64("tensor count")
    kv_at = cur.pos
    kv_count = cur.u64("kv count")
    if kv_count * MIN_KV_BYTES > cur.left:
        cur.fail(f"kv count {kv_count} is absurd (or the file is truncated): at least "
                 f"{kv_count * MIN_KV_BYTES} bytes needed, {cur.left} left", kv_at)
    needed = tensor_count * MIN_TENSOR_INFO_BYTES + kv_count * MIN_KV_BYTES
    if needed > cur.left:
        cur.fail(f"tensor count {tensor_count} is absurd (or the file is truncated): its tensor infos and the "
                 f"{kv_count} kv pairs need at least {needed} bytes, {cur.left} left", tcount_at)

    metadata: dict[str, Any] = {}
    types: dict[str, tuple[GGUFValueType, ...]] = {}
    key_offsets: dict[str, int] = {}
    for _ in range(kv_count):
        start = cur.pos
        key = cur.string("key")
        if key in metadata:
            cur.fail(f"duplicate key {key!r}", start)
        metadata[key], types[key] = cur.value(cur.value_type(f"value type of {key!r}"))
        key_offsets[key] = start
    alignment = _read_alignment(cur, metadata, types, key_offsets)

    raw_infos: list[_RawInfo] = []
    seen: set[str] = set()
    for _ in range(tensor_count):
        info = _read_tensor_info(cur, alignment)
        if info.name in seen:
            cur.fail(f"duplicate tensor name {info.name!r}", info.at)
        seen.add(info.name)
        raw_infos.append(info)
    data_offset = -(-cur.pos // alignment) * alignment

    tensor_info: dict[str, TensorInfo] = {}
    for info in raw_infos:
        begin = data_offset + info.rel_offset
        if info.nbytes and begin + info.nbytes > cur.size:
            cur.fail(f"data of tensor {info.name!r} (bytes {begin}..{begin + info.nbytes}) lies outside the file "
                     f"({cur.size} bytes)", info.at)
        tensor_info[info.name] = TensorInfo(info.name, info.type, tuple(reversed(info.dims)), begin, info.nbytes)
    by_offset = sorted((i for i in raw_infos if i.nbytes), key=lambda i: i.rel_offset)
    for prev, nxt in zip(by_offset, by_offset[1:], strict=False):
        if prev.rel_offset + prev.nbytes > nxt.rel_offset:
            cur.fail(f"data of tensor {nxt.name!r} (from data offset {nxt.rel_offset}) overlaps tensor "
                     f"{prev.name!r} (data offsets {prev.rel_offset}..{prev.rel_offset + prev.nbytes})", nxt.at)
    return GGUFFile(buf, path, version, alignment, data_offset, metadata, types, tensor_info)


class GGUFFile:
    """An opened GGUF file.

    - ``metadata``: key -> value (int, float, bool, str or a possibly nested list of them).
    - ``metadata_types``: key -> type path of the value, e.g. ``(GGUFValueType.ARRAY, GGUFValueType.STRING)``.
    - ``tensor_info``: tensor name -> ``TensorInfo`` (type, shape in numpy order, absolute offset, nbytes),
      in file order.
    - ``tensor_bytes(name)``: the tensor's raw (possibly quantized) bytes, a zero-copy view of the file.
    - ``tensors``: tensor name -> lazy float32 ``tgcore`` Tensor, dequantized on use (fused into its
      consumer); ``tensors_as(dtype="float16", device="PYTHON")`` for another dtype or device. A tensor's
      raw bytes are copied to the device once and kept there until ``close()``.
    - ``version``, ``alignment``, ``data_offset`` (absolute start of the data section), ``path``.

    Use as a context manager, or call ``close()``, to unmap the file early.
    """

    def __init__(self, buf: memoryview, path: str | None, version: int, alignment: int, data_offset: int,
                 metadata: dict[str, Any], metadata_types: dict[str, tuple[GGUFValueType, ...]],
                 tensor_info: dict[str, TensorInfo]) -> None:
        self._buf: memoryview | None = buf
        self._mmap: mmap.mmap | None = None
        self.path = path
        self.version = version
        self.alignment = alignment
        self.data_offset = data_offset
        self.metadata = metadata
        self.metadata_types = metadata_types
        self.tensor_info = tensor_info
        self._device_bytes: dict[tuple[str, str], Any] = {}  # (tensor, device) -> realized uint8 Tensor
        self._disk: Any = None  # the whole file as a DISK uint8 Tensor, made on first use

    @property
    def file_size(self) -> int:
        return len(self._view())

    def _view(self) -> memoryview:
        if self._buf is None:
            raise ValueError(f"GGUF file {self.path or '<buffer>'} is closed")
        return self._buf

    def tensor_bytes(self, name: str) -> memoryview:
        """The raw bytes of tensor ``name`` as a read-only view of the file (no copy)."""
        try:
            info = self.tensor_info[name]
        except KeyError:
            raise KeyError(f"no tensor {name!r} in {self.path or 'this GGUF file'}") from None
        return self._view()[info.offset:info.offset + info.nbytes]

    @property
    def tensors(self) -> Any:
        """Tensor name -> lazy float32 Tensor on the default device (a ``tg_gguf.tensors.GGUFTensors``)."""
        return self.tensors_as()

    def tensors_as(self, dtype: str = "float32", device: str | None = None) -> Any:
        """Like ``tensors``, dequantized to ``dtype`` (float32 or float16) on ``device`` (default: ``DEV``)."""
        from tg_gguf.tensors import GGUFTensors
        self._view()  # fail early on a closed file
        return GGUFTensors(self, dtype, device)

    def _disk_tensor(self) -> Any:
        """The mapped file as a 1-D uint8 Tensor on the DISK device (slices of it read only their bytes)."""
        if self._mmap is None or self.path is None:
            raise ValueError(f"GGUF file {self.path or '<buffer>'} is not backed by a file (or is closed)")
        if self._disk is None:
            from tgcore.tensor import Tensor
            self._disk = Tensor.empty(self.file_size, dtype="uint8", device=f"DISK:{self.path}")
        return self._disk

    def close(self) -> None:
        """Release the file mapping and the tensor bytes loaded on devices (Tensors already handed out keep
        theirs). Views from ``tensor_bytes`` keep the mapping alive until they are released."""
        self._device_bytes.clear()
        self._disk = None
        if self._buf is not None:
            self._buf.release()
            self._buf = None
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:  # a tensor_bytes view is still alive; the mapping goes when it does
                pass
            self._mmap = None

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<GGUFFile {self.path or '<buffer>'} v{self.version}: {len(self.metadata)} keys, "
                f"{len(self.tensor_info)} tensors>")


def load(path: str | os.PathLike[str]) -> GGUFFile:
    """Open a GGUF file: map it read-only and parse its header, metadata and tensor infos."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise GGUFError("file is empty", 0, path)
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapping)
    try:
        gf = parse(view, path)
    except BaseException:
        view.release()
        mapping.close()
        raise
    gf._mmap = mapping
    return gf


def from_bytes(data: bytes | bytearray | memoryview, name: str | None = None) -> GGUFFile:
    """Parse a GGUF file held in memory (tests, fuzzing, files fetched over a network)."""
    return parse(memoryview(data).cast("B"), name)

"""Model state: safetensors files and state dicts.

In:  a path to a ``.safetensors`` file, or a dict of name -> Tensor, or an object tree (attributes,
     lists, tuples, dicts) holding Tensors.
Out: lazy Tensors viewing the file (`safe_load`), a file written atomically (`safe_save`), the parsed
     header (`safe_load_metadata`), or name -> Tensor maps of an object tree (`get_state_dict`) and
     that tree with its tensors replaced (`load_state_dict`).

The safetensors format, as implemented here:

    bytes [0, 8)        N, the header length: an unsigned 64-bit little-endian integer
    bytes [8, 8 + N)    the header: a UTF-8 JSON object
                          {name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
                        plus an optional "__metadata__": {str: str}. Writers pad it with spaces so
                        that 8 + N is a multiple of 8.
    bytes [8 + N, ...)  the data: tensor `name` is the row-major, little-endian bytes [begin, end) of
                        this region; end - begin = prod(shape) * itemsize(dtype).

Reading checks every field and raises `SafetensorsError` (a ValueError) naming the file, the tensor
and the problem; it reads only the header, so opening a multi-GB file is instant. Tensor bytes stay
in the file (a DISK device mapping) until a tensor is used. Accepted beyond the strict reference
reader: gaps between tensors and bytes after the last tensor (they are ignored, never read).
"""
from __future__ import annotations

import json
import os
import struct
import sys
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tgcore.dtype import DType, dtypes
from tgcore.helpers import prod
from tgcore.runtime.buffer import Buffer
from tgcore.runtime.disk import DiskDevice
from tgcore.runtime.registry import canonical
from tgcore.schedule.state import REALIZATION
from tgcore.tensor import Tensor
from tgcore.uop import Ops, UOp

PathLike = str | os.PathLike[str]

METADATA_KEY = "__metadata__"
# the reference reader refuses headers above 100 MB; so do we (and never allocate a declared length first)
MAX_HEADER_BYTES = 100_000_000

# safetensors dtype name -> tgcore dtype
SAFETENSORS_DTYPES: dict[str, DType] = {
    "F64": dtypes.float64, "F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
    "I64": dtypes.int64, "I32": dtypes.int32, "I16": dtypes.int16, "I8": dtypes.int8,
    "U64": dtypes.uint64, "U32": dtypes.uint32, "U16": dtypes.uint16, "U8": dtypes.uint8,
    "BOOL": dtypes.bool, "F8_E4M3": dtypes.fp8e4m3, "F8_E5M2": dtypes.fp8e5m2,
}
_TG_TO_SAFETENSORS: dict[DType, str] = {v: k for k, v in SAFETENSORS_DTYPES.items()}
# safetensors dtypes that exist in the format but that tgcore has no dtype for
UNSUPPORTED_DTYPES: dict[str, str] = {
    "C64": "complex64", "F8_E8M0": "8-bit exponent-only float", "F8_E4M3FNUZ": "8-bit float without -0/inf",
    "F8_E5M2FNUZ": "8-bit float without -0/inf", "F6_E2M3": "6-bit float", "F6_E3M2": "6-bit float",
    "F4": "4-bit float",
}


class SafetensorsError(ValueError):
    """A malformed safetensors file, or one tgcore cannot hold; the message names the file, tensor and problem."""


class StateDictError(ValueError):
    """A state dict that does not fit an object: missing or unexpected keys, or shape/dtype mismatches."""


# ------------------------------------------------------------------------------------------ reading the header

@dataclass(frozen=True)
class _Entry:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    begin: int
    end: int


class _DuplicateKeys:
    """json object hook building dicts and noting keys that appear twice (json.loads would keep the last)."""

    def __init__(self) -> None:
        self.found: list[tuple[str, dict[str, Any]]] = []  # (key, the object it repeats in)

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                self.found.append((key, out))
            out[key] = value
        return out


def _json_kind(x: Any) -> str:
    """The JSON name of a decoded value's type (for messages)."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if x is None else kinds.get(type(x), type(x).__name__)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _parse_entry(path: str, name: str, info: Any, data_size: int) -> _Entry:
    def fail(problem: str) -> SafetensorsError:
        return SafetensorsError(f"{path}: tensor {name!r}: {problem}")

    if not isinstance(info, dict):
        raise fail(f"header entry is a JSON {_json_kind(info)}, expected an object with dtype, shape, "
                   "data_offsets")
    for field in ("dtype", "shape", "data_offsets"):
        if field not in info:
            raise fail(f"header entry has no {field!r} field")
    st_dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(st_dtype, str):
        raise fail(f"dtype must be a string, got {st_dtype!r}")
    if st_dtype in UNSUPPORTED_DTYPES:
        raise fail(f"dtype {st_dtype} ({UNSUPPORTED_DTYPES[st_dtype]}) has no tgcore equivalent; "
                   f"tgcore reads {', '.join(SAFETENSORS_DTYPES)}")
    if st_dtype not in SAFETENSORS_DTYPES:
        raise fail(f"unknown dtype {st_dtype!r}; safetensors dtypes tgcore reads: {', '.join(SAFETENSORS_DTYPES)}")
    if not isinstance(shape, list) or not all(_is_int(s) and s >= 0 for s in shape):
        raise fail(f"shape must be a list of non-negative integers, got {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)):
        raise fail(f"data_offsets must be a list of two integers [begin, end], got {offsets!r}")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise fail(f"data_offsets [{begin}, {end}] are out of order or negative (need 0 <= begin <= end)")
    dtype = SAFETENSORS_DTYPES[st_dtype]
    needed = prod(shape) * dtype.itemsize
    if end - begin != needed:
        raise fail(f"data_offsets [{begin}, {end}] span {end - begin} bytes, but shape {shape} of {st_dtype} "
                   f"needs {needed} bytes")
    if end > data_size:
        raise fail(f"data_offsets [{begin}, {end}] go past the end of the data ({data_size} bytes after the "
                   "header): the file is truncated or the offsets are wrong")
    return _Entry(name, dtype, tuple(shape), begin, end)


def _check_overlaps(path: str, entries: list[_Entry]) -> None:
    laid_out = sorted((e for e in entries if e.end > e.begin), key=lambda e: (e.begin, e.end))
    for prev, cur in zip(laid_out, laid_out[1:], strict=False):
        if cur.begin < prev.end:
            raise SafetensorsError(f"{path}: tensor {cur.name!r}: data_offsets [{cur.begin}, {cur.end}] overlap "
                                   f"those of tensor {prev.name!r} [{prev.begin}, {prev.end}]")


@dataclass(frozen=True)
class _Header:
    raw: dict[str, Any]          # the tensors' JSON entries, in file order (no __metadata__)
    metadata: dict[str, str]
    entries: list[_Entry]
    data_start: int              # 8 + header length
    file_size: int


def _read_header(path: str) -> _Header:
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise IsADirectoryError(f"{path} is a directory, not a safetensors file") from None
    with f:
        file_size = os.fstat(f.fileno()).st_size
        if file_size < 8:
            raise SafetensorsError(f"{path}: file is {file_size} bytes, too short for the 8-byte header length; "
                                   "not a safetensors file")
        (n,) = struct.unpack("<Q", f.read(8))
        if n < 2:
            raise SafetensorsError(f"{path}: header length is {n} bytes, too short for a JSON object; "
                                   "not a safetensors file")
        if n > MAX_HEADER_BYTES:
            raise SafetensorsError(f"{path}: header length {n} bytes is over the {MAX_HEADER_BYTES} byte limit; "
                                   "the file is corrupt or not a safetensors file")
        if 8 + n > file_size:
            raise SafetensorsError(f"{path}: header length {n} bytes goes past the end of the file "
                                   f"({file_size} bytes); the file is truncated or not a safetensors file")
        raw_bytes = f.read(n)
    if len(raw_bytes) != n:
        raise SafetensorsError(f"{path}: file shrank while reading its {n} byte header")
    duplicates = _DuplicateKeys()
    try:
        header = json.loads(raw_bytes.decode("utf-8"), object_pairs_hook=duplicates)
    except UnicodeDecodeError as e:
        raise SafetensorsError(f"{path}: header is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise SafetensorsError(f"{path}: header is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") \
            from None
    except RecursionError:
        raise SafetensorsError(f"{path}: header JSON is nested too deeply") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is a JSON {_json_kind(header)}, expected an object "
                               "of tensor entries")
    for key, where in duplicates.found:
        if where is header:
            raise SafetensorsError(f"{path}: tensor {key!r}: the name appears twice in the header")
        owner = next((name for name, info in header.items() if info is where), None)
        if owner == METADATA_KEY:
            raise SafetensorsError(f"{path}: {METADATA_KEY} key {key!r} appears twice")
        if owner is None:
            raise SafetensorsError(f"{path}: key {key!r} appears twice in a JSON object of the header")
        raise SafetensorsError(f"{path}: tensor {owner!r}: field {key!r} appears twice in its header entry")
    metadata = header.pop(METADATA_KEY, None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise SafetensorsError(f"{path}: {METADATA_KEY} is a JSON {_json_kind(metadata)}, expected an object "
                               "of strings")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise SafetensorsError(f"{path}: {METADATA_KEY}[{key!r}] is {value!r}; metadata values must be strings")
    data_start = 8 + n
    entries = [_parse_entry(path, name, info, file_size - data_start) for name, info in header.items()]
    _check_overlaps(path, entries)
    return _Header(header, metadata, entries, data_start, file_size)


def safe_load_metadata(path: PathLike) -> tuple[dict[str, Any], dict[str, str], int]:
    """The validated header of a safetensors file, reading only the header.

    Returns ``(tensors, metadata, data_offset)``: ``tensors`` maps each name to its JSON entry
    (``{"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}``), ``metadata`` is the
    ``__metadata__`` object (``{}`` if absent), and tensor bytes sit at ``data_offset + begin``.
    Raises `SafetensorsError` for a malformed file or a dtype tgcore cannot hold.
    """
    header = _read_header(os.fspath(path))
    return header.raw, header.metadata, header.data_start


# ------------------------------------------------------------------------------------------ loading

def safe_load(path: PathLike, device: str | None = None) -> dict[str, Tensor]:
    """Lazy Tensors for every tensor in a safetensors file, by name (in file order).

    Only the header is read now. Each tensor views its bytes in the file through a DISK device
    and is moved to ``device`` (default: the default device) lazily: a tensor's bytes are read
    when it is realized, and only its own bytes. ``device="DISK"`` returns the file views
    themselves; slice one and ``.to()`` the slice to read just that part.

    The file is mapped now (which reads nothing), so the tensors keep seeing this version of
    the file even if it is later replaced (as `safe_save` does). Each call maps the file
    afresh: DISK devices opened by name are cached per path and would keep an older mapping.
    """
    _check_byteorder()
    path = os.path.abspath(os.fspath(path))
    header = _read_header(path)
    keep_on_disk = device is not None and canonical(device) == "DISK"
    target = canonical(device) if not keep_on_disk else None
    disk = DiskDevice(f"DISK:{path}")
    disk_name = canonical(disk.name)
    base = Buffer(disk, header.file_size, dtypes.uint8)
    if any(e.end > e.begin for e in header.entries):
        base.allocate()  # maps the file: no bytes are read until a view is copied
        if disk.allocator.file_size != header.file_size:
            raise SafetensorsError(f"{path}: file changed size while loading ({header.file_size} -> "
                                   f"{disk.allocator.file_size} bytes)")
    out: dict[str, Tensor] = {}
    for e in header.entries:
        numel = prod(e.shape)
        if numel == 0:  # nothing to read
            out[e.name] = Tensor.empty(e.shape, dtype=e.dtype, device=target or disk_name)
            continue
        buf = REALIZATION.new_buffer(disk_name, numel, e.dtype, base.view(numel, e.dtype, header.data_start + e.begin))
        on_disk = Tensor(UOp(Ops.RESHAPE, e.dtype, (buf,), e.shape), device=disk_name)
        out[e.name] = on_disk if target is None else on_disk.to(target)
    return out


# ------------------------------------------------------------------------------------------ saving

def _check_byteorder() -> None:
    if sys.byteorder != "little":
        raise NotImplementedError("safetensors data is little-endian; tgcore's safetensors support needs a "
                                  "little-endian host")


def _raw_bytes(t: Tensor) -> memoryview:
    """The realized tensor's bytes, row-major (zero-copy where the device allows it)."""
    buf = t._buffer()  # (realized row-major: a slice of memory is a view of it, a permute a kernel's result)
    mv = buf.as_buffer()
    return mv.cast("B") if mv.format != "B" else mv


def _header_bytes(header: dict[str, Any]) -> bytes:
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    raw = text.encode("utf-8")
    return raw + b" " * (-len(raw) % 8)  # 8 + len stays a multiple of 8, as the reference writer does


def safe_save(tensors: Mapping[str, Tensor], path: PathLike, metadata: Mapping[str, str] | None = None) -> None:
    """Realize ``tensors`` and write them to a safetensors file at ``path``, atomically.

    Each tensor is computed as it is written and its buffer dropped after, so saving lazily loaded
    tensors streams them instead of holding them all in memory; the Tensors passed in are not
    changed. The file is written to a temporary file in the same folder and renamed over ``path``,
    so a reader never sees a half-written file, a failed save leaves any old file as it was, and
    tensors lazily loaded from the old file (even the ones being saved) keep their data. Tensors
    are laid out by decreasing item size, then name, so each one is aligned to its item size.
    """
    _check_byteorder()
    path = os.fspath(path)
    if not isinstance(tensors, Mapping):
        raise TypeError(f"safe_save takes a dict of name -> Tensor, got {type(tensors).__name__}")
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"safe_save: tensor names must be strings, got {name!r}")
        if name == METADATA_KEY:
            raise ValueError(f"safe_save: {METADATA_KEY!r} is reserved for metadata; pick another tensor name")
        if not isinstance(t, Tensor):
            raise TypeError(f"safe_save: {name!r} is a {type(t).__name__}, not a Tensor")
        if t.dtype not in _TG_TO_SAFETENSORS:
            raise TypeError(f"safe_save: tensor {name!r} has dtype {t.dtype!r}, which safetensors cannot store; "
                            "cast it first")
    meta = dict(metadata or {})
    for key, value in meta.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"safe_save: metadata must map strings to strings, got {key!r}: {value!r}")
    order = sorted(tensors, key=lambda n: (-tensors[n].dtype.itemsize, n))
    header: dict[str, Any] = {METADATA_KEY: meta} if meta else {}
    offset = 0
    for name in order:
        t = tensors[name]
        nbytes = t.numel() * t.dtype.itemsize
        header[name] = {"dtype": _TG_TO_SAFETENSORS[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    try:
        head = _header_bytes(header)
    except UnicodeEncodeError as e:
        raise ValueError(f"safe_save: a tensor name or metadata string is not valid Unicode: {e}") from None
    _write_atomically(path, struct.pack("<Q", len(head)) + head, [tensors[n] for n in order])


def _write_atomically(path: str, prefix: bytes, tensors: list[Tensor]) -> None:
    folder, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(folder, f".{base}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # mode as umask allows, like open()
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(prefix)
            for t in tensors:
                if t.numel():
                    f.write(_raw_bytes(t))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


# ------------------------------------------------------------------------------------------ state dicts

# objects never walked into: they are code or values, not containers of model state
_LEAF_TYPES = (type(None), bool, int, float, complex, str, bytes, bytearray, range, type, types.ModuleType,
               types.FunctionType, types.BuiltinFunctionType, types.MethodType)


@dataclass
class _Slot:
    """Where a tensor sits in an object tree, so it can be replaced."""

    name: str
    tensor: Tensor
    container: Any
    key: Any
    kind: str  # "attr", "item" (dict or list), "tuple" (cannot replace), "root" (the object itself)

    def assign(self, value: Tensor) -> None:
        if self.kind == "attr":
            setattr(self.container, self.key, value)
        elif self.kind == "item":
            self.container[self.key] = value
        else:
            raise AssertionError(self.kind)  # checked before assigning


def _join(prefix: str, key: Any) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _slots(obj: Any, prefix: str, on_path: set[int]) -> Iterator[_Slot]:
    """Every tensor under ``obj`` with its dotted name; objects already on the path are skipped (cycles)."""
    if isinstance(obj, Tensor) or isinstance(obj, _LEAF_TYPES) or id(obj) in on_path:
        return
    children: list[tuple[Any, Any, str]]  # (key, value, kind)
    if isinstance(obj, dict):
        children = [(k, v, "item") for k, v in obj.items()]
    elif isinstance(obj, list):
        children = [(i, v, "item") for i, v in enumerate(obj)]
    elif isinstance(obj, tuple):
        keys = getattr(obj, "_fields", None) or range(len(obj))  # namedtuples by field name
        children = [(k, v, "tuple") for k, v in zip(keys, obj, strict=True)]
    elif hasattr(obj, "__dict__"):
        children = [(k, v, "attr") for k, v in vars(obj).items()]
    else:
        return
    on_path.add(id(obj))
    try:
        for key, value, kind in children:
            name = _join(prefix, key)
            if isinstance(value, Tensor):
                yield _Slot(name, value, obj, key, kind)
            else:
                yield from _slots(value, name, on_path)
    finally:
        on_path.discard(id(obj))


def _all_slots(obj: Any, prefix: str = "") -> list[_Slot]:
    prefix = prefix.rstrip(".")
    if isinstance(obj, Tensor):
        return [_Slot(prefix, obj, None, None, "root")]
    return list(_slots(obj, prefix, set()))


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from ``obj`` through attributes, lists, tuples and dicts, by dotted name.

    ``model.layers[0].bias`` is named ``"layers.0.bias"``; ``prefix`` (``"model"`` or ``"model."``)
    is put in front of every name. A tensor reachable by two paths (tied weights) appears under
    both names. Reference cycles are followed once.
    """
    return {s.name: s.tensor for s in _all_slots(obj, prefix)}


def get_parameters(obj: Any) -> list[Tensor]:
    """The tensors of `get_state_dict(obj)`, each once (tied weights are not repeated)."""
    seen: set[int] = set()
    out: list[Tensor] = []
    for t in get_state_dict(obj).values():
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def load_state_dict(obj: Any, state_dict: Mapping[str, Tensor], strict: bool = True) -> None:
    """Put the tensors of ``state_dict`` into ``obj`` by name (see `get_state_dict`).

    Each tensor must match the shape and dtype of the one it replaces (else `StateDictError`
    naming the key); it is moved lazily to the old tensor's device. With ``strict`` the keys must
    match exactly; otherwise missing and unexpected keys are skipped. Everything is checked
    before anything is replaced, so a failed load leaves ``obj`` unchanged.

    Tensor has no in-place ``assign`` yet, so the object's attribute, list item or dict item is
    replaced by the loaded tensor: other references to the old tensor (e.g. an optimizer's list)
    keep the old one. A tensor inside a tuple cannot be replaced and raises.
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"load_state_dict takes a dict of name -> Tensor, got {type(state_dict).__name__}")
    slots = _all_slots(obj)
    names = {s.name for s in slots}
    if strict:
        missing = [s.name for s in slots if s.name not in state_dict]
        unexpected = [k for k in state_dict if k not in names]
        if missing or unexpected:
            parts = ([f"missing keys: {', '.join(map(repr, missing))}"] if missing else []) + \
                    ([f"unexpected keys: {', '.join(map(repr, unexpected))}"] if unexpected else [])
            raise StateDictError(f"load_state_dict: {'; '.join(parts)} (pass strict=False to skip them)")
    plan: list[tuple[_Slot, Tensor]] = []
    for s in slots:
        if s.name not in state_dict:
            continue
        new = state_dict[s.name]
        if not isinstance(new, Tensor):
            raise StateDictError(f"load_state_dict: {s.name!r} is a {type(new).__name__}, not a Tensor")
        if new.shape != s.tensor.shape:
            raise StateDictError(f"load_state_dict: {s.name!r} has shape {new.shape} in the state dict but "
                                 f"{s.tensor.shape} in the object")
        if new.dtype is not s.tensor.dtype:
            raise StateDictError(f"load_state_dict: {s.name!r} has dtype {new.dtype.name} in the state dict but "
                                 f"{s.tensor.dtype.name} in the object; cast it first")
        if s.kind == "tuple":
            raise StateDictError(f"load_state_dict: {s.name!r} sits in a tuple, which cannot be changed; "
                                 "use a list")
        if s.kind == "root":
            raise StateDictError("load_state_dict: the object is itself a Tensor; there is nothing to assign into")
        plan.append((s, new if new.device == s.tensor.device else new.to(s.tensor.device)))
    for s, new in plan:
        s.assign(new)


__all__ = ["METADATA_KEY", "SAFETENSORS_DTYPES", "SafetensorsError", "StateDictError", "get_parameters",
           "get_state_dict", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save"]

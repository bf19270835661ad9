"""MessagePack, the subset the AMDGPU metadata note uses: ``pack(value) -> bytes``, ``unpack(data) -> value``.

In (pack): None, bool, int (-2**63 .. 2**64-1), str, bytes, list/tuple, dict. Out: the shortest
MessagePack encoding of each value, as the format spec (msgpack/msgpack spec.md) lays it out.
In (unpack): one encoded value. Out: the Python value (arrays as lists); anything else -- floats,
extension types, truncated data, trailing bytes -- raises ``ValueError``.
"""
from __future__ import annotations

import struct
from typing import Any

# (largest length, first byte, struct format of the length) per container kind, smallest first
STR_HEADS = ((31, 0xA0, ""), (0xFF, 0xD9, "B"), (0xFFFF, 0xDA, ">H"), (0xFFFFFFFF, 0xDB, ">I"))
BIN_HEADS = ((0xFF, 0xC4, "B"), (0xFFFF, 0xC5, ">H"), (0xFFFFFFFF, 0xC6, ">I"))
ARRAY_HEADS = ((15, 0x90, ""), (0xFFFF, 0xDC, ">H"), (0xFFFFFFFF, 0xDD, ">I"))
MAP_HEADS = ((15, 0x80, ""), (0xFFFF, 0xDE, ">H"), (0xFFFFFFFF, 0xDF, ">I"))
# integer encodings: (lowest, highest, first byte, struct format), tried in order
INT_FORMS = ((0, 0x7F, None, ""), (-32, -1, None, ""),
             (0, 0xFF, 0xCC, "B"), (0, 0xFFFF, 0xCD, ">H"), (0, 0xFFFFFFFF, 0xCE, ">I"), (0, 2**64 - 1, 0xCF, ">Q"),
             (-128, 127, 0xD0, "b"), (-(2**15), 2**15 - 1, 0xD1, ">h"), (-(2**31), 2**31 - 1, 0xD2, ">i"),
             (-(2**63), 2**63 - 1, 0xD3, ">q"))


def _head(n: int, heads: tuple[tuple[int, int, str], ...], what: str) -> bytes:
    for limit, first, fmt in heads:
        if n <= limit:
            return bytes([first | n]) if not fmt else bytes([first]) + struct.pack(fmt, n)
    raise ValueError(f"msgpack: {what} of length {n} is too long")


def _pack_int(value: int) -> bytes:
    for low, high, first, fmt in INT_FORMS:
        if low <= value <= high:
            if first is None:
                return struct.pack("b", value) if value < 0 else bytes([value])
            return bytes([first]) + struct.pack(fmt, value)
    raise ValueError(f"msgpack: integer {value} does not fit 64 bits")


def pack(value: Any) -> bytes:
    """The MessagePack encoding of ``value`` (see module docstring)."""
    if value is None:
        return b"\xc0"
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        return _pack_int(value)
    if isinstance(value, str):
        raw = value.encode()
        return _head(len(raw), STR_HEADS, "string") + raw
    if isinstance(value, bytes | bytearray):
        return _head(len(value), BIN_HEADS, "binary") + bytes(value)
    if isinstance(value, list | tuple):
        return _head(len(value), ARRAY_HEADS, "array") + b"".join(pack(x) for x in value)
    if isinstance(value, dict):
        return _head(len(value), MAP_HEADS, "map") + b"".join(pack(k) + pack(v) for k, v in value.items())
    raise ValueError(f"msgpack: cannot encode {type(value).__name__} {value!r}")


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"msgpack: data ends at byte {len(self.data)}, needed {self.pos + n}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def number(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def value(self) -> Any:
        first = self.take(1)[0]
        if first <= 0x7F:
            return first
        if first >= 0xE0:
            return first - 0x100
        if first & 0xF0 == 0x80:
            return self.items_map(first & 0x0F)
        if first & 0xF0 == 0x90:
            return [self.value() for _ in range(first & 0x0F)]
        if first & 0xE0 == 0xA0:
            return self.take(first & 0x1F).decode()
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if first in simple:
            return simple[first]
        ints = {0xCC: "B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: "b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
        if first in ints:
            return self.number(ints[first])
        lengths = {0xD9: "B", 0xDA: ">H", 0xDB: ">I", 0xC4: "B", 0xC5: ">H", 0xC6: ">I",
                   0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
        if first not in lengths:
            raise ValueError(f"msgpack: unsupported type byte {first:#04x} at {self.pos - 1}")
        n = self.number(lengths[first])
        if first in (0xD9, 0xDA, 0xDB):
            return self.take(n).decode()
        if first in (0xC4, 0xC5, 0xC6):
            return self.take(n)
        if first in (0xDC, 0xDD):
            return [self.value() for _ in range(n)]
        return self.items_map(n)

    def items_map(self, n: int) -> dict[Any, Any]:
        out = {}
        for _ in range(n):
            key = self.value()
            if isinstance(key, list | dict):
                raise ValueError(f"msgpack: a map key is an {type(key).__name__} (at byte {self.pos})")
            out[key] = self.value()
        return out


def unpack(data: bytes) -> Any:
    """The value encoded in ``data`` (see module docstring)."""
    reader = _Reader(bytes(data))
    value = reader.value()
    if reader.pos != len(reader.data):
        raise ValueError(f"msgpack: {len(reader.data) - reader.pos} trailing bytes after the value")
    return value

"""C-struct records for PRM layouts: named fields at byte offsets, bit fields, arrays, pointers.

In:  a layout (a ``Record`` subclass with ``SIZE``, ``ENDIAN`` and ``FIELDS``) and a byte buffer
     (new zeroed bytes, ``bytes`` to copy, or any writable buffer to map in place, e.g. DMA memory).
Out: attribute access that reads and writes the fields in that buffer with C semantics.

A ``Field(name, offset, kind, bit=, width=, count=)`` sits at byte ``offset``; ``kind`` is one of
``u8 u16 u32 u64 s8 s16 s32 s64 ptr``. A bit field occupies bits ``bit .. bit+width-1`` (counted
from the least significant bit) of the ``kind``-sized container at ``offset``, read in the record's
byte order: the PRM's "offset 0x08, bits 23:0" is ``Field("qpn", 0x08, "u32", bit=0, width=24)``
in a big-endian record. ``Field.ifc(name, bit_offset, width)`` places a field the way
``mlx5_ifc.h`` does (bit offset from the start of the struct, most significant bit first).

Semantics, as in C: unsigned fields wrap (writing -1 to a u8 reads 255), signed fields read back
sign-extended (writing 200 to an s8 reads -56), bit fields wrap to their width. ``ptr`` is a u64
address: it accepts ``None`` (stored as 0), an int, a ctypes object or pointer (its address), and
reads back ``None`` for 0. An array field (``count=n``) reads as a live ``FieldArray`` view and is
assigned from a tuple, list, bytes or ctypes array (shorter initialisers zero the rest, as in C).
"""
from __future__ import annotations

import ctypes
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = ["Field", "FieldArray", "Record", "KINDS"]

# kind -> (size in bytes, signed)
KINDS: dict[str, tuple[int, bool]] = {
    "u8": (1, False), "u16": (2, False), "u32": (4, False), "u64": (8, False),
    "s8": (1, True), "s16": (2, True), "s32": (4, True), "s64": (8, True),
    "ptr": (8, False),
}


@dataclass(frozen=True)
class Field:
    """One field of a record; see the module docstring."""

    name: str
    offset: int
    kind: str = "u32"
    bit: int = 0
    width: int | None = None  # None: the whole container
    count: int = 1  # > 1: an array of ``count`` consecutive containers (or bit fields, see stride)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"field {self.name}: unknown kind {self.kind!r}; use one of {', '.join(KINDS)}")
        if self.offset < 0:
            raise ValueError(f"field {self.name}: negative offset {self.offset}")
        if self.count < 1:
            raise ValueError(f"field {self.name}: count must be >= 1, got {self.count}")
        bits = 8 * self.size
        width = bits if self.width is None else self.width
        if not (0 < width <= bits and 0 <= self.bit and self.bit + width <= bits):
            raise ValueError(f"field {self.name}: bits {self.bit}..{self.bit + width - 1} do not fit in a {self.kind}")
        if self.kind == "ptr" and width != 64:
            raise ValueError(f"field {self.name}: a ptr cannot be a bit field")

    @classmethod
    def ifc(cls, name: str, bit_offset: int, width: int, signed: bool = False, count: int = 1) -> Field:
        """A field placed as in ``mlx5_ifc.h``: ``bit_offset`` from the struct start, MSB first.

        Fields of up to 32 bits live in the big-endian dword that holds them; 64-bit fields must
        be 64-bit aligned. Use it in big-endian records.
        """
        prefix = "s" if signed else "u"
        if width == 64:
            if bit_offset % 64:
                raise ValueError(f"field {name}: a 64-bit field must start on a 64-bit boundary")
            return cls(name, bit_offset // 8, prefix + "64", count=count)
        if width in (8, 16, 32) and bit_offset % width == 0:  # a whole byte / half / dword
            return cls(name, bit_offset // 8, f"{prefix}{width}", count=count)
        dword, within = divmod(bit_offset, 32)
        if within + width > 32:
            raise ValueError(f"field {name}: {width} bits at bit {bit_offset} cross a dword boundary")
        return cls(name, 4 * dword, prefix + "32", bit=32 - within - width, width=width, count=count)

    @property
    def size(self) -> int:
        """Bytes of one container."""
        return KINDS[self.kind][0]

    @property
    def signed(self) -> bool:
        return KINDS[self.kind][1]

    @property
    def bits(self) -> int:
        return 8 * self.size if self.width is None else self.width

    @property
    def is_bitfield(self) -> bool:
        return self.bits != 8 * self.size

    @property
    def end(self) -> int:
        """One past the last byte the field (all its elements) touches."""
        return self.offset + self.count * self.size

    def mask_bytes(self, endian: str) -> dict[int, int]:
        """byte offset -> bits of that byte this field owns (to find overlapping fields)."""
        owned: dict[int, int] = {}
        mask = ((1 << self.bits) - 1) << self.bit
        for i in range(self.count):
            raw = mask.to_bytes(self.size, endian)  # type: ignore[arg-type]
            for j, b in enumerate(raw):
                if b:
                    owned[self.offset + i * self.size + j] = b
        return owned


def _to_address(value: Any, name: str) -> int:
    """What a pointer field stores for ``value``."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise TypeError(f"field {name}: a pointer cannot be a bool")
    if isinstance(value, int):
        return value
    if isinstance(value, ctypes._Pointer) or isinstance(value, ctypes.c_void_p | ctypes.c_char_p):
        return ctypes.cast(value, ctypes.c_void_p).value or 0
    if isinstance(value, ctypes._SimpleCData | ctypes.Array | ctypes.Structure | ctypes.Union):
        return ctypes.addressof(value)
    raise TypeError(f"field {name}: a pointer takes None, an int or a ctypes object, got {type(value).__name__}")


class FieldArray:
    """A live view of an array field: indexing reads and writes the record's bytes."""

    __slots__ = ("_record", "_field")

    def __init__(self, record: Record, field: Field) -> None:
        self._record, self._field = record, field

    def __len__(self) -> int:
        return self._field.count

    def _index(self, i: int) -> int:
        n = self._field.count
        if not -n <= i < n:
            raise IndexError(f"{self._field.name}[{i}] is out of range (length {n})")
        return i % n

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._record._get(self._field, k) for k in range(*i.indices(self._field.count))]
        return self._record._get(self._field, self._index(i))

    def __setitem__(self, i: int, value: Any) -> None:
        self._record._set(self._field, self._index(i), value)

    def __iter__(self) -> Iterator[Any]:
        return (self._record._get(self._field, k) for k in range(self._field.count))

    def tolist(self) -> list[Any]:
        return list(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FieldArray | list | tuple):
            return self.tolist() == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"{self._field.name}{self.tolist()}"


class _Accessor:
    """The descriptor behind each field attribute."""

    def __init__(self, field: Field) -> None:
        self.field = field

    def __get__(self, record: Record | None, owner: type) -> Any:
        if record is None:
            return self.field
        if self.field.count > 1:
            return FieldArray(record, self.field)
        return record._get(self.field, 0)

    def __set__(self, record: Record, value: Any) -> None:
        f = self.field
        if f.count == 1:
            record._set(f, 0, value)
            return
        if isinstance(value, str) or not isinstance(value, Iterable | ctypes.Array):
            raise TypeError(f"field {f.name} is an array of {f.count}: assign a tuple, list, bytes or ctypes array")
        items = list(value)
        if len(items) > f.count:
            raise ValueError(f"field {f.name} holds {f.count} elements, got {len(items)}")
        items += [None if f.kind == "ptr" else 0] * (f.count - len(items))  # C: the rest is zeroed
        for k, v in enumerate(items):
            record._set(f, k, v)


class Record:
    """Base of record layouts. Subclasses set ``SIZE`` (bytes), ``ENDIAN`` and ``FIELDS``.

    ``Record()`` is all zeros, ``Record(buf)`` maps a writable buffer in place (or copies ``bytes``),
    ``Record(**values)`` sets fields; ``bytes(r)`` is the layout's bytes.
    """

    SIZE: ClassVar[int] = 0
    ENDIAN: ClassVar[str] = "little"
    FIELDS: ClassVar[tuple[Field, ...]] = ()
    _fields: ClassVar[dict[str, Field]] = {}

    __slots__ = ("_buf", "_base")

    if TYPE_CHECKING:  # fields are descriptors set per subclass from FIELDS: tell the type checker they exist
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.ENDIAN not in ("little", "big"):
            raise ValueError(f"{cls.__name__}: ENDIAN must be 'little' or 'big', got {cls.ENDIAN!r}")
        fields = {**getattr(cls, "_fields", {})}
        owned: dict[int, tuple[int, str]] = {}
        for name, f in fields.items():
            for off, m in f.mask_bytes(cls.ENDIAN).items():
                owned[off] = (owned.get(off, (0, ""))[0] | m, name)
        for f in cls.FIELDS:
            if f.name in fields or f.name.startswith("_") or hasattr(Record, f.name):
                raise ValueError(f"{cls.__name__}: field name {f.name!r} is taken or reserved")
            if f.end > cls.SIZE:
                raise ValueError(f"{cls.__name__}: field {f.name} ends at byte {f.end}, past SIZE {cls.SIZE}")
            for off, m in f.mask_bytes(cls.ENDIAN).items():
                prev, other = owned.get(off, (0, ""))
                if prev & m:
                    raise ValueError(f"{cls.__name__}: field {f.name} overlaps field {other} at byte {off:#x}")
                owned[off] = (prev | m, f.name)
            fields[f.name] = f
            setattr(cls, f.name, _Accessor(f))
        cls._fields = fields

    def __init__(self, buf: Any = None, offset: int = 0, **values: Any) -> None:
        if buf is None:
            self._buf: memoryview = memoryview(bytearray(self.SIZE))
        else:
            mv = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(bytearray(buf))
            if mv.readonly:
                mv = memoryview(bytearray(mv))
            if offset < 0 or offset + self.SIZE > mv.nbytes:
                raise ValueError(f"{type(self).__name__} needs {self.SIZE} bytes at offset {offset}, "
                                 f"the buffer has {mv.nbytes}")
            self._buf = mv[offset:offset + self.SIZE]
        self._base = buf
        for name, v in values.items():
            if name not in self._fields:
                raise AttributeError(f"{type(self).__name__} has no field {name!r}")
            setattr(self, name, v)

    @classmethod
    def fields(cls) -> tuple[Field, ...]:
        return tuple(cls._fields.values())

    # ---- raw access ----
    def _get(self, f: Field, k: int) -> Any:
        start = f.offset + k * f.size
        raw = int.from_bytes(self._buf[start:start + f.size], self.ENDIAN)  # type: ignore[arg-type]
        value = (raw >> f.bit) & ((1 << f.bits) - 1)
        if f.signed and value >> (f.bits - 1):
            value -= 1 << f.bits
        if f.kind == "ptr":
            return value or None
        return value

    def _set(self, f: Field, k: int, value: Any) -> None:
        if f.kind == "ptr":
            value = _to_address(value, f.name)
        elif isinstance(value, bool | int):
            value = int(value)
        elif hasattr(value, "__index__"):  # numpy integers
            value = value.__index__()
        elif isinstance(value, ctypes._SimpleCData) and isinstance(value.value, int):
            value = value.value
        elif isinstance(value, bytes) and len(value) == 1:  # an element of a c_char array
            value = value[0]
        else:
            raise TypeError(f"field {f.name} takes an int, got {type(value).__name__}")
        start = f.offset + k * f.size
        mask = ((1 << f.bits) - 1) << f.bit
        raw = int.from_bytes(self._buf[start:start + f.size], self.ENDIAN)  # type: ignore[arg-type]
        raw = (raw & ~mask) | ((value << f.bit) & mask)  # wraps to the field's width, like C
        self._buf[start:start + f.size] = raw.to_bytes(f.size, self.ENDIAN)  # type: ignore[arg-type]

    # ---- whole record ----
    def __bytes__(self) -> bytes:
        return self._buf.tobytes()

    @property
    def buffer(self) -> memoryview:
        """The record's bytes (a live view of the mapped buffer)."""
        return self._buf

    def to_dict(self) -> dict[str, Any]:
        return {name: (list(v) if isinstance(v := getattr(self, name), FieldArray) else v) for name in self._fields}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return bytes(self) == bytes(other)  # type: ignore[arg-type]

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v if not isinstance(v, int) or v < 10 else hex(v)}" for k, v in self.to_dict().items())
        return f"{type(self).__name__}({inner})"

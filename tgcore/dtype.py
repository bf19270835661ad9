"""Data types of tgcore: scalar, vector and pointer dtypes, promotion, and constant truncation.

Provides
- `DType`: an immutable, interned value type (`name`, `itemsize`, `count`, `fmt`, `priority`). Building
  the same dtype twice gives the same object, so `is`, `==` and `hash` agree and pickling keeps identity.
  `.vec(n)` makes an n-lane vector (name "float32x4"), `.scalar()` goes back, `.ptr()` makes a pointer.
- `PtrDType`: a pointer to `base` (a scalar or vector DType) in an `AddrSpace`, with a `size` in elements
  (-1 = unknown). Its itemsize is 8; `.vec(n)` gives n pointers (one per lane) to the same base.
- `dtypes`: the namespace of scalar dtypes (+ C-style aliases), predicates, numpy/Python conversions and the
  float16/bfloat16/fp8 storage-bit codecs (`dtypes.float_to_bits`, `dtypes.bits_to_float`).
- `least_upper_dtype(*dts)` / `least_upper_float(dt)`: type promotion (below).
- `truncate(dtype, value)`: a Python value as it would be stored in `dtype` (for constant folding): ints wrap
  around, floats round once to nearest-even (fp8 e4m3 overflow -> NaN, e5m2/bfloat16/float16 -> inf).
- `to_dtype(x)`: a DType from a DType or a name ("float32", "half").

Promotion lattice
-----------------
`least_upper_dtype` returns the least upper bound (join) in this partial order; `a -> b` means a < b:

    bool -> uint8, int8          int8 -> int16 -> int32 -> int64
    uint8 -> uint16, int16       uint16 -> uint32, int32       uint32 -> uint64, int64
    int64 -> fp8e4m3, fp8e5m2, bfloat16       uint64 -> float32
    fp8e4m3, fp8e5m2 -> float16 -> float32    bfloat16 -> float32 -> float64

It agrees with `torch.promote_types` on every pair of bool, (u)int8..int64, float16, bfloat16, float32,
float64 (e.g. uint8 + int8 -> int16, int64 + float16 -> float16, float16 + bfloat16 -> float32), and on
uint16/uint32 mixed with floats. Where torch raises we choose:
- unsigned + signed -> the next wider signed int (uint16 + int8 -> int32, uint32 + int32 -> int64);
  uint64 + any signed int -> float32 (the default float; no wider int exists).
- uint64 + float16 / bfloat16 -> float32. Torch answers float16 / bfloat16, but a lattice cannot: the join
  of uint64 and int64 would then have to lie below both float16 and bfloat16.
- fp8 e4m3 and e5m2 are sub-formats of float16 (float16 holds each exactly): fp8 + fp8' -> float16,
  fp8 + float16 -> float16, fp8 + bfloat16 -> float32, and any int except uint64 + fp8 -> that fp8
  (like int + float -> float).
`priority` numbers the dtypes in an order compatible with this lattice (a < b implies a.priority < b.priority).
"""

from __future__ import annotations

import builtins
import math
import struct
from enum import Enum, auto
from functools import cache
from typing import Any, ClassVar, Final

import numpy as np

from tgcore import dtype_bits


class AddrSpace(Enum):
    """Where a pointer points: device memory, workgroup-shared memory, or registers."""

    GLOBAL = auto()
    LOCAL = auto()
    REG = auto()

    def __repr__(self) -> str:
        return f"AddrSpace.{self.name}"


class DType:
    """A scalar or vector data type. Interned: equal fields give the same object."""

    __slots__ = ("name", "itemsize", "count", "fmt", "priority", "_scalar")
    _interned: ClassVar[dict[tuple[Any, ...], DType]] = {}

    name: str
    itemsize: int
    count: int
    fmt: str | None
    priority: int
    _scalar: DType | None  # the lane type of a vector, None for a scalar

    def __new__(cls, name: str, itemsize: int, count: int = 1, fmt: str | None = None, priority: int = 0,
                scalar: DType | None = None) -> DType:
        key = (cls, name, itemsize, count, fmt, priority, scalar)
        if (found := DType._interned.get(key)) is not None:
            return found
        self = object.__new__(cls)
        for field, value in zip(DType.__slots__, (name, itemsize, count, fmt, priority, scalar), strict=True):
            object.__setattr__(self, field, value)
        return DType._interned.setdefault(key, self)  # setdefault: two racing threads still agree

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (DType, (self.name, self.itemsize, self.count, self.fmt, self.priority, self._scalar))

    def __repr__(self) -> str:
        if self._scalar is not None:
            return f"{self._scalar!r}.vec({self.count})"
        return f"dtypes.{self.name}"

    def __lt__(self, other: DType) -> bool:
        """An arbitrary but stable order, so dtypes can be sorted."""
        return _sort_key(self) < _sort_key(other)

    def vec(self, n: int) -> DType:
        """The n-lane vector of this scalar (itself when n == 1)."""
        if self.count != 1:
            raise ValueError(f"cannot make a vector of the vector {self!r}; use .scalar().vec(n)")
        if n < 1:
            raise ValueError(f"vector width must be >= 1, got {n}")
        if n == 1:
            return self
        if self.name == "void":
            raise ValueError("cannot make a vector of dtypes.void")
        return DType(f"{self.name}x{n}", self.itemsize * n, n, self.fmt, self.priority, self)

    def scalar(self) -> DType:
        """The lane type of a vector; a scalar is its own scalar."""
        return self if self._scalar is None else self._scalar

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to this dtype, `size` elements long (-1 = unknown)."""
        return PtrDType(self, addrspace, size)

    @property
    def min(self) -> bool | int | float:
        """The smallest representable value (-inf for floats)."""
        return _value_range(self.scalar())[0]

    @property
    def max(self) -> bool | int | float:
        """The largest representable value (inf for floats)."""
        return _value_range(self.scalar())[1]

    @property
    def np(self) -> np.dtype | None:
        """The numpy dtype of a scalar, or None (vectors, pointers, void, bfloat16, fp8)."""
        if self.count != 1 or self._scalar is not None:
            return None
        numpy_name = _NUMPY_NAMES.get(self.name)
        return None if numpy_name is None else np.dtype(numpy_name)


class PtrDType(DType):
    """A pointer (or, with count > 1, a vector of pointers) to `base` in `addrspace`."""

    __slots__ = ("base", "addrspace", "size")

    base: DType
    addrspace: AddrSpace
    size: int

    def __new__(cls, base: DType, addrspace: AddrSpace = AddrSpace.GLOBAL, size: int = -1,  # type: ignore[misc]
                count: int = 1) -> PtrDType:
        if isinstance(base, PtrDType):
            raise TypeError(f"pointers to pointers are not supported: {base!r}")
        key = (cls, base, addrspace, size, count)
        if (found := DType._interned.get(key)) is not None:
            return found  # type: ignore[return-value]
        self = object.__new__(cls)
        name = f"{base.name}*" if count == 1 else f"{base.name}*x{count}"
        fields = (name, 8 * count, count, None, base.priority, None, base, addrspace, size)
        for field, value in zip(DType.__slots__ + PtrDType.__slots__, fields, strict=True):
            object.__setattr__(self, field, value)
        return DType._interned.setdefault(key, self)  # type: ignore[return-value]

    def __reduce__(self) -> tuple[Any, ...]:
        return (PtrDType, (self.base, self.addrspace, self.size, self.count))

    def __repr__(self) -> str:
        args = [] if self.size == -1 else [f"size={self.size}"]
        if self.addrspace is not AddrSpace.GLOBAL:
            args.append(f"addrspace={self.addrspace!r}")
        text = f"{self.base!r}.ptr({', '.join(args)})"
        return text if self.count == 1 else f"{text}.vec({self.count})"

    def vec(self, n: int) -> PtrDType:
        """n pointers to the same base, one per lane (itself when n == 1)."""
        if self.count != 1:
            raise ValueError(f"cannot make a vector of the pointer vector {self!r}")
        if n < 1:
            raise ValueError(f"vector width must be >= 1, got {n}")
        return self if n == 1 else PtrDType(self.base, self.addrspace, self.size, n)

    def scalar(self) -> PtrDType:
        """A single pointer (the lane type of a pointer vector)."""
        return self if self.count == 1 else PtrDType(self.base, self.addrspace, self.size)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        raise TypeError(f"pointers to pointers are not supported: {self!r}")


def _sort_key(dt: DType) -> tuple[Any, ...]:
    if isinstance(dt, PtrDType):
        return (1, _sort_key(dt.base), dt.addrspace.value, dt.size, dt.count)
    return (0, dt.priority, dt.itemsize, dt.name, dt.count)


# ---------------------------------------------------------------------------------------------- scalar tables

_SIGNED: Final = ("int8", "int16", "int32", "int64")
_UNSIGNED: Final = ("uint8", "uint16", "uint32", "uint64")
_FLOATS: Final = ("fp8e4m3", "fp8e5m2", "float16", "bfloat16", "float32", "float64")

# numpy's name for each scalar dtype numpy has
_NUMPY_NAMES: Final = {"bool": "bool", **{n: n for n in _SIGNED + _UNSIGNED}, "float16": "float16",
                       "float32": "float32", "float64": "float64"}
# numpy dtype names (incl. ml_dtypes' extension types) -> our names
_FROM_NUMPY_NAMES: Final = {**{v: k for k, v in _NUMPY_NAMES.items()}, "bfloat16": "bfloat16",
                            "float8_e4m3fn": "fp8e4m3", "float8_e5m2": "fp8e5m2"}

# storage format of the floats numpy cannot round to (float16 is listed too, for the bit helpers)
_BIT_FORMATS: Final = {"float16": dtype_bits.FLOAT16, "bfloat16": dtype_bits.BFLOAT16,
                       "fp8e4m3": dtype_bits.FP8E4M3, "fp8e5m2": dtype_bits.FP8E5M2}


def _value_range(dt: DType) -> tuple[bool | int | float, bool | int | float]:
    if dt.name == "bool":
        return False, True
    if dt.name in _SIGNED:
        half = 1 << (8 * dt.itemsize - 1)
        return -half, half - 1
    if dt.name in _UNSIGNED:
        return 0, (1 << (8 * dt.itemsize)) - 1
    if dt.name in _FLOATS:
        return -math.inf, math.inf
    raise TypeError(f"{dt!r} has no value range")


# ---------------------------------------------------------------------------------------------- the namespace

class dtypes:  # lower case: a namespace, spelled like the values it holds
    """All scalar dtypes, their aliases, predicates and conversions."""

    void: Final = DType("void", 0, 1, None, -1)
    bool: Final = DType("bool", 1, 1, "?", 0)
    int8: Final = DType("int8", 1, 1, "b", 1)
    uint8: Final = DType("uint8", 1, 1, "B", 2)
    int16: Final = DType("int16", 2, 1, "h", 3)
    uint16: Final = DType("uint16", 2, 1, "H", 4)
    int32: Final = DType("int32", 4, 1, "i", 5)
    uint32: Final = DType("uint32", 4, 1, "I", 6)
    int64: Final = DType("int64", 8, 1, "q", 7)
    uint64: Final = DType("uint64", 8, 1, "Q", 8)
    fp8e4m3: Final = DType("fp8e4m3", 1, 1, None, 9)
    fp8e5m2: Final = DType("fp8e5m2", 1, 1, None, 10)
    float16: Final = DType("float16", 2, 1, "e", 11)
    bfloat16: Final = DType("bfloat16", 2, 1, None, 12)
    float32: Final = DType("float32", 4, 1, "f", 13)
    float64: Final = DType("float64", 8, 1, "d", 14)

    # C-style aliases
    half: Final = float16
    float: Final = float32
    double: Final = float64
    char: Final = int8
    uchar: Final = uint8
    short: Final = int16
    ushort: Final = uint16
    int: Final = int32
    uint: Final = uint32
    long: Final = int64
    ulong: Final = uint64

    default_float: ClassVar[DType] = float32
    default_int: ClassVar[DType] = int32

    all: Final = (bool, int8, uint8, int16, uint16, int32, uint32, int64, uint64,
                  fp8e4m3, fp8e5m2, float16, bfloat16, float32, float64)

    @staticmethod
    def fields() -> dict[str, DType]:
        """Every dtype name and alias (incl. void) -> its DType."""
        return {name: value for name, value in vars(dtypes).items() if isinstance(value, DType)
                and not name.startswith("default_")}

    @staticmethod
    def is_float(dt: DType) -> builtins.bool:
        return dt.scalar().name in _FLOATS

    @staticmethod
    def is_int(dt: DType) -> builtins.bool:
        """Signed or unsigned integer (not bool)."""
        return dt.scalar().name in _SIGNED + _UNSIGNED

    @staticmethod
    def is_unsigned(dt: DType) -> builtins.bool:
        return dt.scalar().name in _UNSIGNED

    @staticmethod
    def is_bool(dt: DType) -> builtins.bool:
        return dt.scalar().name == "bool"

    @staticmethod
    def from_numpy(np_dtype: Any) -> DType:
        """The DType of a numpy dtype (also ml_dtypes' bfloat16, float8_e4m3fn, float8_e5m2)."""
        numpy_name = np.dtype(np_dtype).name
        if numpy_name not in _FROM_NUMPY_NAMES:
            raise ValueError(f"numpy dtype {numpy_name!r} has no tgcore dtype; "
                             f"supported: {', '.join(sorted(_FROM_NUMPY_NAMES))}")
        return getattr(dtypes, _FROM_NUMPY_NAMES[numpy_name])

    @staticmethod
    def from_py(value: Any) -> DType:
        """The dtype a Python value gets: bool, default_int, default_float; lists/tuples promote their items."""
        if isinstance(value, bool):
            return dtypes.bool
        if isinstance(value, int):
            return dtypes.default_int
        if isinstance(value, float):
            return dtypes.default_float
        if isinstance(value, list | tuple):
            if len(value) == 0:
                return dtypes.default_float
            return least_upper_dtype(*(dtypes.from_py(item) for item in value))
        raise TypeError(f"cannot infer a dtype from a {type(value).__name__}: {value!r}")

    @staticmethod
    def float_to_bits(values: Any, dt: DType) -> np.ndarray:
        """Storage bits (uint16 / uint8 array) of `values` rounded to float16, bfloat16 or fp8 (ties to even)."""
        return dtype_bits.encode(values, _bit_format(dt))

    @staticmethod
    def bits_to_float(bits: Any, dt: DType) -> np.ndarray:
        """float32 array of the float16, bfloat16 or fp8 values stored as `bits`."""
        return dtype_bits.decode(bits, _bit_format(dt))


def _bit_format(dt: DType) -> dtype_bits.FloatFormat:
    if dt.name not in _BIT_FORMATS:
        raise ValueError(f"no storage-bit codec for {dt!r}; supported: {', '.join(_BIT_FORMATS)}")
    return _BIT_FORMATS[dt.name]


_BY_NAME: dict[str, DType] = {}


def to_dtype(x: DType | str) -> DType:
    """A DType given a DType or a dtype name / alias ("float32", "half")."""
    if isinstance(x, DType):
        return x
    if not _BY_NAME:  # built on first use (dtypes.fields() walks the class: ~15 us)
        _BY_NAME.update(dtypes.fields())
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    raise ValueError(f"unknown dtype {x!r}; expected a DType or one of: {', '.join(sorted(_BY_NAME))}")


# ---------------------------------------------------------------------------------------------- promotion

# immediate parents of each scalar dtype in the promotion lattice (see the module docstring)
_PROMOTES_TO: Final[dict[str, tuple[str, ...]]] = {
    "bool": ("uint8", "int8"),
    "uint8": ("uint16", "int16"), "uint16": ("uint32", "int32"), "uint32": ("uint64", "int64"),
    "uint64": ("float32",),
    "int8": ("int16",), "int16": ("int32",), "int32": ("int64",),
    "int64": ("fp8e4m3", "fp8e5m2", "bfloat16"),
    "fp8e4m3": ("float16",), "fp8e5m2": ("float16",),
    "float16": ("float32",), "bfloat16": ("float32",), "float32": ("float64",), "float64": (),
}


@cache
def _upper_set(name: str) -> frozenset[str]:
    """`name` and every dtype it promotes to."""
    return frozenset({name}).union(*(_upper_set(parent) for parent in _PROMOTES_TO[name]))


@cache
def _join(a: str, b: str) -> str:
    common = _upper_set(a) & _upper_set(b)
    least = [c for c in common if _upper_set(c) == common]
    assert len(least) == 1, f"promotion lattice has no unique join for {a}, {b}: {sorted(common)}"
    return least[0]


def least_upper_dtype(*dts: DType) -> DType:
    """The smallest dtype every argument promotes to. Vectors of one width promote lane-wise."""
    if not dts:
        raise ValueError("least_upper_dtype needs at least one dtype")
    widths = {dt.count for dt in dts}
    if len(widths) != 1 or any(isinstance(dt, PtrDType) for dt in dts):
        raise TypeError(f"cannot promote {', '.join(map(repr, dts))}: only scalars or vectors of one width")
    names = [dt.scalar().name for dt in dts]
    for name in names:
        if name not in _PROMOTES_TO:
            raise TypeError(f"{name} does not take part in type promotion")
    result = names[0]
    for name in names[1:]:
        result = _join(result, name)
    return getattr(dtypes, result).vec(widths.pop())


def least_upper_float(dt: DType) -> DType:
    """`dt` itself if it is a float, else the default float."""
    return dt if dtypes.is_float(dt) else dtypes.default_float


# ---------------------------------------------------------------------------------------------- truncate

def truncate(dtype: DType, value: Any) -> Any:
    """`value` as stored in `dtype`: ints wrap around (two's complement), floats round to nearest even.

    A float given to an int dtype is first truncated toward zero (like a C cast); NaN and +-inf, which C
    leaves undefined, give 0. Vector dtypes take a tuple and truncate each lane.
    """
    if dtype.count > 1 and not isinstance(dtype, PtrDType):
        return tuple(truncate(dtype.scalar(), lane) for lane in value)
    if dtypes.is_bool(dtype):
        return bool(value)
    if dtypes.is_int(dtype):
        return _wrap_int(dtype, value)
    if dtype is dtypes.float64:
        return _as_float(value)
    if dtype is dtypes.float32:
        if type(value) is float:  # fast path (constant folding and graph building call this a lot)
            try:
                return _F32.unpack(_F32.pack(value))[0]
            except OverflowError:  # beyond float32's range: numpy rounds it to +-inf
                pass
        return _round_with_numpy(np.float32, value)
    if dtypes.is_float(dtype):  # float16, bfloat16, fp8
        bits = dtypes.float_to_bits(_as_narrow_float(value), dtype)
        return float(dtypes.bits_to_float(bits, dtype))
    raise TypeError(f"cannot truncate a value to {dtype!r}")


_F32 = struct.Struct("f")


def _as_float(value: Any) -> float:
    """float(value), with ints too large for float64 becoming +-inf."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _as_narrow_float(value: Any) -> float:
    """`value` as a float64 that rounds to any format of <= 51 significant bits exactly as `value` itself does.

    A big int rounded to float64 and then again to float32 can land on a float32 tie and round the wrong way.
    Rounding to 53 bits "to odd" (keep the top 53 bits, set the last one if anything nonzero was cut off)
    keeps the information a later, narrower rounding needs.
    """
    if not isinstance(value, int | np.integer):
        return _as_float(value)
    magnitude = abs(int(value))
    if magnitude < 2**53 or magnitude.bit_length() > 1024:
        return _as_float(value)  # exact, or beyond every float format
    dropped_bits = magnitude.bit_length() - 53
    top = magnitude >> dropped_bits
    if magnitude & ((1 << dropped_bits) - 1):
        top |= 1
    rounded = math.ldexp(top, dropped_bits)
    return -rounded if value < 0 else rounded


def _round_with_numpy(numpy_type: type[np.floating], value: Any) -> float:
    with np.errstate(over="ignore"):
        return float(numpy_type(_as_narrow_float(value)))


def _wrap_int(dt: DType, value: Any) -> int:
    if not isinstance(value, int | np.integer) and not math.isfinite(value):
        return 0
    bits = 8 * dt.itemsize
    wrapped = int(value) & ((1 << bits) - 1)
    if dt.name in _SIGNED and wrapped >= 1 << (bits - 1):
        wrapped -= 1 << bits
    return wrapped

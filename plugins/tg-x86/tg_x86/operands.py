"""Operands of x86-64 instructions: registers, memory references, immediates and labels.

In: register names (``"eax"``, ``"r12b"``, ``"xmm9"``, ``"ymm15"``, ``"zmm31"``, ``"k1"``) or numbers and sizes.
Out: small frozen values the encoder and the listing read: ``Reg`` (kind, number 0-15, 0-31 for zmm, 0-7 for the
opmask registers k, size in bits), ``Mem`` (``[base + index*scale + disp]`` with an access size, and how ModRM/SIB
encode that address), ``Imm`` and ``Label``; for AVX-512 (EVEX) forms, ``Masked`` (a destination or store under
an opmask, merging or zeroing) and ``Bcst`` (one memory element broadcast to every lane).

Every register is also a module attribute (``operands.eax``, ``operands.xmm3``) and is
found by name with ``reg("r9d")``; ``gpr(num, bits)``, ``xmm(num)``, ``ymm(num)`` build
them by number, which is what a register allocator wants.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

RegKind = Literal["gpr", "xmm", "ymm", "zmm", "k"]

# Every operand carries a shape: the facts an encoding form's choice depends on (register class and size and
# whether it is cl; memory size; which immediate ranges hold the value; a label), as a small int so that the
# encoder's cache key is cheap to hash.
_SHAPE_IDS: dict[tuple, int] = {}


def shape_id(facts: tuple) -> int:
    found = _SHAPE_IDS.get(facts)
    if found is None:
        found = _SHAPE_IDS[facts] = len(_SHAPE_IDS)
    return found


# GPR names by number for each size (Intel names; 8-bit 4..7 are spl..dil, which need a REX prefix)
GPR_NAMES: dict[int, tuple[str, ...]] = {
    64: ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", *(f"r{i}" for i in range(8, 16))),
    32: ("eax", "ecx", "edx", "ebx", "esp", "ebp", "esi", "edi", *(f"r{i}d" for i in range(8, 16))),
    16: ("ax", "cx", "dx", "bx", "sp", "bp", "si", "di", *(f"r{i}w" for i in range(8, 16))),
    8: ("al", "cl", "dl", "bl", "spl", "bpl", "sil", "dil", *(f"r{i}b" for i in range(8, 16))),
}
VEC_BITS: dict[str, int] = {"xmm": 128, "ymm": 256, "zmm": 512}
# access sizes of memory operands, as Intel syntax names them
PTR_NAMES: dict[int, str] = {8: "byte", 16: "word", 32: "dword", 64: "qword", 128: "xmmword", 256: "ymmword",
                             512: "zmmword"}


@dataclass(frozen=True)
class Reg:
    """A register: ``kind`` is "gpr", "xmm", "ymm", "zmm" or "k" (an AVX-512 opmask), ``num`` 0-15 (zmm: 0-31, k:
    0-7), ``bits`` its width."""
    kind: RegKind
    num: int
    bits: int
    if TYPE_CHECKING:  # set by __post_init__, not fields (read-only properties to mypy: an annotation is a field)
        @property
        def shape(self) -> int: ...

    def __post_init__(self) -> None:
        # what the encoder's form choice depends on (register class, size, is it cl), read for every instruction
        is_cl = self.kind == "gpr" and self.bits == 8 and self.num == 1
        object.__setattr__(self, "shape", shape_id((self.kind, self.bits, is_cl)))

    @property
    def name(self) -> str:
        return GPR_NAMES[self.bits][self.num] if self.kind == "gpr" else f"{self.kind}{self.num}"

    @property
    def needs_rex(self) -> bool:
        """spl, bpl, sil, dil: only reachable with a REX prefix (without one, 4-7 mean ah..bh)."""
        return self.kind == "gpr" and self.bits == 8 and 4 <= self.num <= 7

    @property
    def is_vec(self) -> bool:
        return self.kind != "gpr"

    def view(self, bits: int) -> Reg:
        """The same register number at another width: ``rax.view(8)`` is al, ``xmm1.view(256)`` is ymm1."""
        if self.kind == "gpr":
            return gpr(self.num, bits)
        return xmm(self.num) if bits == 128 else ymm(self.num)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Mem:
    """A memory operand ``[base + index*scale + disp]`` accessing ``bits`` bits (None: no size, e.g. lea).

    ``base`` and ``index`` are 64-bit GPRs or None; rsp cannot be an index. Neither base nor
    index is an absolute address (the displacement, sign-extended).
    """
    bits: int | None
    base: Reg | None = None
    index: Reg | None = None
    scale: int = 1
    disp: int = 0
    if TYPE_CHECKING:  # set by __post_init__, not fields (read-only properties to mypy: an annotation is a field)
        @property
        def shape(self) -> int: ...   # what the encoder's form choice reads
        @property
        def address(self) -> tuple[int, int, bytes]: ...   # ``address(...)``, for the encoder

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", shape_id(("mem", self.bits)))
        for r in (self.base, self.index):
            if r is not None and (r.kind != "gpr" or r.bits != 64):
                raise ValueError(f"memory operands address with 64-bit registers, got {r.name}")
        if self.index is not None and self.index.num == 4:
            raise ValueError("rsp cannot be an index register")
        if self.scale not in (1, 2, 4, 8):
            raise ValueError(f"scale must be 1, 2, 4 or 8, got {self.scale}")
        if not -(1 << 31) <= self.disp < (1 << 31):
            raise ValueError(f"displacement {self.disp:#x} does not fit in 32 bits")
        if self.bits is not None and self.bits not in PTR_NAMES:
            raise ValueError(f"memory access size must be one of {sorted(PTR_NAMES)}, got {self.bits}")
        if self.index is None and self.scale != 1:
            object.__setattr__(self, "scale", 1)  # a scale without an index means nothing
        object.__setattr__(self, "address", address(self.base.num if self.base is not None else None,
                                                    self.index.num if self.index is not None else None,
                                                    self.scale, self.disp))

    @classmethod
    def of(cls, bits: int | None, base: Reg | None, index: Reg | None, scale: int, disp: int) -> Mem:
        """``Mem(...)`` without the checks, for a register allocator's output (base and index are 64-bit gprs,
        index not rsp, scale 1 without an index, the access size valid): a third of the time."""
        if not -(1 << 31) <= disp < (1 << 31):
            raise ValueError(f"displacement {disp:#x} does not fit in 32 bits")
        m = object.__new__(cls)
        d = m.__dict__  # frozen: fields are set once, here
        d["bits"] = bits
        d["base"] = base
        d["index"] = index
        d["scale"] = scale
        d["disp"] = disp
        d["shape"] = _MEM_SHAPES[bits]
        d["address"] = address(base.num if base is not None else None, index.num if index is not None else None,
                               scale, disp)
        return m

    def sized(self, bits: int | None) -> Mem:
        return Mem(bits, self.base, self.index, self.scale, self.disp)

    def __repr__(self) -> str:
        from tg_x86.listing import format_operand
        return format_operand(self)


def address(base: int | None, index: int | None, scale: int, disp: int, n: int = 1) -> tuple[int, int, bytes]:
    """How ``[base + index*scale + disp]`` (register numbers) is encoded: (REX.X << 1 | REX.B, the ModRM byte
    with reg 0, the SIB and displacement bytes). The SDM's special cases: rsp/r12 as base need a SIB byte,
    rbp/r13 as base need a displacement (disp8 0), no base is SIB base 101 with disp32, and SIB index 100
    means "no index" (so rsp can never be an index). ``n``: EVEX's compressed displacement (disp8*N): a disp8
    counts units of n bytes, so a displacement takes one byte when it is a multiple of n within 127 units."""
    if index is not None:
        xb, sib = (index >> 3) << 1, _SCALE_BITS[scale] << 6 | (index & 7) << 3
    else:
        xb, sib = 0, 0b100 << 3  # no index: SIB index 100, scale 00 (as assemblers emit it)
    if base is None:  # [index*scale + disp32] or [disp32]: SIB with base 101 and mod 00
        return xb, 0b100, bytes((sib | 0b101,)) + (disp & 0xFFFFFFFF).to_bytes(4, "little")
    low = base & 7
    xb |= base >> 3
    with_sib = index is not None or low == 0b100  # rsp/r12 as base need a SIB byte
    if disp == 0 and low != 0b101:  # rbp/r13 as base need a displacement
        return (xb, 0b100, bytes((sib | low,))) if with_sib else (xb, low, b"")
    if -128 <= disp <= 127 if n == 1 else disp % n == 0 and -128 <= disp // n <= 127:
        disp8 = (disp if n == 1 else disp // n) & 0xFF
        return (xb, 0x44, bytes((sib | low, disp8))) if with_sib else (xb, 0x40 | low, bytes((disp8,)))
    disp32 = (disp & 0xFFFFFFFF).to_bytes(4, "little")
    return (xb, 0x84, bytes((sib | low,)) + disp32) if with_sib else (xb, 0x80 | low, disp32)


_SCALE_BITS = {1: 0, 2: 1, 4: 2, 8: 3}
_MEM_SHAPES = {bits: shape_id(("mem", bits)) for bits in (None, *PTR_NAMES)}


@dataclass(frozen=True)
class Imm:
    """An immediate value; the encoder checks it fits the form's immediate width."""
    value: int
    if TYPE_CHECKING:  # set by __post_init__, not a field (a read-only property to mypy: an annotation is a field)
        @property
        def shape(self) -> int: ...   # which immediate ranges hold the value

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", shape_id(imm_shape(self.value)))

    def __repr__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, eq=False)
class Label:
    """A position in an instruction list; jumps name it. Identity, not the name, tells labels apart."""
    name: str = ""
    shape = shape_id(("label",))  # not a field (no annotation): what the encoder's form choice reads

    def __repr__(self) -> str:
        return self.name or f"L{id(self) & 0xffff:04x}"


@dataclass(frozen=True)
class Masked:
    """An AVX-512 destination or store under an opmask: ``zmm1 {k1}`` keeps the lanes k1 leaves out (merging),
    ``zmm1 {k1} {z}`` zeroes them; a store (``target`` memory) only merges. k0 means "no mask" in the encoding,
    so the mask is k1-k7 (an unmasked operand is the register or memory itself)."""
    target: Reg | Mem
    mask: Reg
    zero: bool = False
    if TYPE_CHECKING:  # set by __post_init__, not a field (a read-only property to mypy: an annotation is a field)
        @property
        def shape(self) -> int: ...

    def __post_init__(self) -> None:
        if self.mask.kind != "k" or self.mask.num == 0:
            raise ValueError(f"an opmask is k1-k7, got {self.mask.name}")
        if self.zero and isinstance(self.target, Mem):
            raise ValueError("a masked store merges: {z} needs a register destination")
        object.__setattr__(self, "shape", shape_id(("masked", self.target.shape, self.zero)))


@dataclass(frozen=True)
class Bcst:
    """An EVEX embedded broadcast: the element at ``mem`` (32 or 64 bits) read into each of ``count`` lanes
    (``dword ptr [rax]{1to16}``)."""
    mem: Mem
    count: int
    if TYPE_CHECKING:  # set by __post_init__, not a field (a read-only property to mypy: an annotation is a field)
        @property
        def shape(self) -> int: ...

    def __post_init__(self) -> None:
        if self.mem.bits not in (32, 64) or self.count * self.mem.bits not in (128, 256, 512):
            raise ValueError(f"a broadcast is of a 32- or 64-bit element to a vector, got {self.mem.bits} x "
                             f"{self.count}")
        object.__setattr__(self, "shape", shape_id(("bcst", self.mem.bits, self.count)))


Operand = Reg | Mem | Imm | Label | Masked | Bcst

# the immediate ranges of instruction forms (simm8 imm8 imm16 simm32 imm32 imm64, see forms.IMM_TYPES)
IMM_RANGES: tuple[tuple[int, int], ...] = ((-(1 << 7), (1 << 7) - 1), (-(1 << 7), (1 << 8) - 1),
                                           (-(1 << 15), (1 << 16) - 1), (-(1 << 31), (1 << 31) - 1),
                                           (-(1 << 31), (1 << 32) - 1), (-(1 << 63), (1 << 64) - 1))
_IN_EVERY_RANGE = (True,) * len(IMM_RANGES)


def imm_shape(value: int) -> tuple[bool, ...]:
    """Which of ``IMM_RANGES`` hold ``value``."""
    if -128 <= value <= 127:  # in every range (the common case)
        return _IN_EVERY_RANGE
    return tuple([lo <= value <= hi for lo, hi in IMM_RANGES])


def imm(value: int) -> Imm:
    """``Imm(value)``, one object per value (immediates repeat: loop steps, sizes, shuffle masks)."""
    found = _IMMS.get(value)
    if found is None:
        found = Imm(value)
        if len(_IMMS) < 4096:  # bounded: a long-lived process compiles many kernels
            _IMMS[value] = found
    return found


_IMMS: dict[int, Imm] = {}


def mem(bits: int | None, base: int | None, index: int | None, scale: int, disp: int) -> Mem:
    """``Mem.of`` by register numbers (64-bit gprs), one object per operand: addresses repeat (frame slots,
    the same buffer walked by several kernels), and each object works out its encoding once."""
    return MEMS[(bits, base, index, scale, disp)]


class _MemTable(dict):
    """``mem``'s objects by (bits, base, index, scale, disp); a missing one is made, and kept while the table is not
    full (bounded: a long-lived process compiles many kernels)."""

    def __missing__(self, key: tuple[int | None, int | None, int | None, int, int]) -> Mem:
        bits, base, index, scale, disp = key
        found = Mem.of(bits, GPRS64[base] if base is not None else None, GPRS64[index] if index is not None else None,
                       scale, disp)
        if len(self) < 4096:
            self[key] = found
        return found


MEMS: dict[tuple[int | None, int | None, int | None, int, int], Mem] = _MemTable()


def gpr(num: int, bits: int = 64) -> Reg:
    return _GPRS[(num, bits)]


def xmm(num: int) -> Reg:
    return _VECS[("xmm", num)]


def ymm(num: int) -> Reg:
    return _VECS[("ymm", num)]


def reg(name: str) -> Reg:
    """A register by its Intel name."""
    try:
        return REGS[name]
    except KeyError:
        raise ValueError(f"unknown register {name!r}") from None


def ptr(bits: int | None, base: Reg | None = None, index: Reg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    return Mem(bits, base, index, scale, disp)


def byte(base: Reg | None = None, index: Reg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    return Mem(8, base, index, scale, disp)


def word(base: Reg | None = None, index: Reg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    return Mem(16, base, index, scale, disp)


def dword(base: Reg | None = None, index: Reg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    return Mem(32, base, index, scale, disp)


def qword(base: Reg | None = None, index: Reg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    return Mem(64, base, index, scale, disp)


def xmmword(base: Reg | None = None, index: Reg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    return Mem(128, base, index, scale, disp)


def ymmword(base: Reg | None = None, index: Reg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    return Mem(256, base, index, scale, disp)


def zmmword(base: Reg | None = None, index: Reg | None = None, scale: int = 1, disp: int = 0) -> Mem:
    return Mem(512, base, index, scale, disp)


def zmm(num: int) -> Reg:
    return _ZMMS[num]


def kreg(num: int) -> Reg:
    """Opmask register k0-k7."""
    return _KREGS[num]


_GPRS: dict[tuple[int, int], Reg] = {(n, b): Reg("gpr", n, b) for b in GPR_NAMES for n in range(16)}
_VEC_KINDS: tuple[RegKind, ...] = ("xmm", "ymm")
_VECS: dict[tuple[str, int], Reg] = {(k, n): Reg(k, n, VEC_BITS[k])
                                     for k, n in itertools.product(_VEC_KINDS, range(16))}
_ZMMS: tuple[Reg, ...] = tuple(Reg("zmm", n, 512) for n in range(32))   # EVEX only
_KREGS: tuple[Reg, ...] = tuple(Reg("k", n, 64) for n in range(8))
REGS: dict[str, Reg] = {r.name: r for r in itertools.chain(_GPRS.values(), _VECS.values(), _ZMMS, _KREGS)}
GPRS64: tuple[Reg, ...] = tuple(gpr(n) for n in range(16))
GPR_VIEWS: dict[int, tuple[Reg, ...]] = {bits: tuple(gpr(n, bits) for n in range(16)) for bits in GPR_NAMES}
XMMS: tuple[Reg, ...] = tuple(xmm(n) for n in range(16))
YMMS: tuple[Reg, ...] = tuple(ymm(n) for n in range(16))
ZMMS: tuple[Reg, ...] = _ZMMS
KREGS: tuple[Reg, ...] = _KREGS

globals().update(REGS)  # operands.rax, operands.xmm0, ... for hand-written code and tests

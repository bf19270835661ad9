"""Operands: registers (``s[4:7]``, ``v[0:7]``, ``ttmp[9]``, ``a[0:3]``, ``vcc_lo``, ``m0``, ...),
immediates, neg/abs modifiers, labels and ``off``.

Python values in, operand objects out; ``operand_text`` gives the LLVM spelling back, and
``source_code`` the 9-bit source-operand code (plus the literal, if one is needed) an encoder
writes into an instruction.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from tg_amd.arch import Arch, AsmError

# register kinds that are numbered files; everything else is a named special register
FILES = ("s", "v", "a", "ttmp")
# named special registers: name -> (dwords, code on RDNA, code on CDNA); None: absent there
SPECIALS: dict[str, tuple[int, int | None, int | None]] = {
    "vcc": (2, 106, 106), "vcc_lo": (1, 106, 106), "vcc_hi": (1, 107, 107),
    "exec": (2, 126, 126), "exec_lo": (1, 126, 126), "exec_hi": (1, 127, 127),
    "m0": (1, 125, 124), "null": (1, 124, None), "src_scc": (1, 253, 253), "scc": (1, 253, 253),
    "src_vccz": (1, None, 251), "src_execz": (1, None, 252), "src_shared_base": (1, 235, 235),
    "src_shared_limit": (1, 236, 236), "src_private_base": (1, 237, 237), "src_private_limit": (1, 238, 238),
    "src_pops_exiting_wave_id": (1, None, 239),
    "flat_scratch": (2, None, 102), "flat_scratch_lo": (1, None, 102), "flat_scratch_hi": (1, None, 103),
}
# named operands that stand for a 32- or 64-bit value alike (s_mov_b64 s[0:1], src_shared_base)
ANY_WIDTH = {"null", "src_shared_base", "src_shared_limit", "src_private_base", "src_private_limit"}
# inline float constants: value -> source code (the same code means f16, f32 or f64 by operand type)
INLINE_FLOATS = {0.5: 240, -0.5: 241, 1.0: 242, -1.0: 243, 2.0: 244, -2.0: 245, 4.0: 246, -4.0: 247}
INV_2PI = 0.15915494309189535  # 1/(2*pi): code 248
FLOAT_TEXT = {240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0", 245: "-2.0", 246: "4.0", 247: "-4.0",
              248: "0.15915494"}
# bit patterns of the inline floats, per operand width: an integer with such bits is encoded inline
INLINE_BITS = {
    32: {0x3F000000: 240, 0xBF000000: 241, 0x3F800000: 242, 0xBF800000: 243, 0x40000000: 244, 0xC0000000: 245,
         0x40800000: 246, 0xC0800000: 247, 0x3E22F983: 248},
    16: {0x3800: 240, 0xB800: 241, 0x3C00: 242, 0xBC00: 243, 0x4000: 244, 0xC000: 245, 0x4400: 246, 0xC400: 247,
         0x3118: 248},
}
LITERAL = 255


@dataclass(frozen=True)
class Reg:
    """``count`` consecutive registers of file ``kind`` from ``index``; or a named special register."""
    kind: str
    index: int = 0
    count: int = 1
    half: str = ""  # true16: "l" or "h", the low or high 16 bits of one VGPR (v8.l)

    def __neg__(self) -> Mod:
        return Mod(self, neg=True)

    def __abs__(self) -> Mod:
        return Mod(self, abs=True)

    @property
    def special(self) -> bool:
        return self.kind not in FILES

    def __str__(self) -> str:
        return operand_text(self)


@dataclass(frozen=True)
class Mod:
    """A source operand with float input modifiers: ``-v1``, ``|v1|``, ``-|v1|``."""
    value: Reg | int | float
    neg: bool = False
    abs: bool = False

    def __neg__(self) -> Mod:
        return Mod(self.value, not self.neg, self.abs)

    def __abs__(self) -> Mod:
        return Mod(self.value, False, True)


@dataclass(frozen=True)
class Label:
    name: str


@dataclass(frozen=True)
class Sext:
    """An SDWA source sign-extended from its selected byte or word, or v_ldexp's exponent with its neg bit
    set: ``sext(v1)``."""
    value: Reg | int | float

    def __str__(self) -> str:
        return f"sext({operand_text(self.value)})"


@dataclass(frozen=True)
class Attr:
    """An interpolation attribute channel: ``attr3.z`` (``lds_param_load``, ``ds_param_load``)."""
    index: int
    chan: int

    def __str__(self) -> str:
        return f"attr{self.index}.{'xyzw'[self.chan]}"


class Hex(int):
    """An immediate llvm-mc prints in hex (``s_clause 0x6``, SMEM offsets)."""


class Dec(int):
    """An immediate llvm-mc prints in decimal however large (branch offsets: ``s_branch 65442``)."""


class _Off:
    def __repr__(self) -> str:
        return "off"


OFF = _Off()  # "no SGPR address" for global memory instructions


class RegFile:
    """``s[10]`` is one register, ``s[4:7]`` four (LLVM's inclusive range)."""

    def __init__(self, kind: str):
        self.kind = kind

    def __getitem__(self, key: int | slice) -> Reg:
        if isinstance(key, slice):
            if key.step is not None or key.start is None or key.stop is None:
                raise AsmError(f"register range {self.kind}[{key.start}:{key.stop}] needs both ends, no step")
            lo, hi = int(key.start), int(key.stop)
            if hi < lo:
                raise AsmError(f"register range {self.kind}[{lo}:{hi}] is empty")
            return Reg(self.kind, lo, hi - lo + 1)
        return Reg(self.kind, int(key), 1)

    def __repr__(self) -> str:
        return f"RegFile({self.kind!r})"


s, v, a, ttmp = RegFile("s"), RegFile("v"), RegFile("a"), RegFile("ttmp")
vcc, vcc_lo, vcc_hi = Reg("vcc", 0, 2), Reg("vcc_lo"), Reg("vcc_hi")
exec_, exec_lo, exec_hi = Reg("exec", 0, 2), Reg("exec_lo"), Reg("exec_hi")
m0, null, scc = Reg("m0"), Reg("null"), Reg("scc")
NAMED = {name: Reg(name, 0, SPECIALS[name][0]) for name in SPECIALS}


def operand_text(op: object) -> str:
    """The LLVM spelling of a register, label, ``off`` or modified register."""
    if isinstance(op, Reg):
        if op.special:
            return op.kind
        if op.half:
            return f"{op.kind}{op.index}.{op.half}"
        if op.count == 1:
            return f"{op.kind}{op.index}"
        return f"{op.kind}[{op.index}:{op.index + op.count - 1}]"
    if isinstance(op, Mod):
        inner = operand_text(op.value) if isinstance(op.value, Reg) else str(op.value)
        if op.abs:
            inner = f"|{inner}|"
        return "-" + inner if op.neg else inner
    if isinstance(op, Label):
        return op.name
    if isinstance(op, Attr | Sext):
        return str(op)
    if op is OFF:
        return "off"
    return str(op)


def scalar_code(reg: Reg, arch: Arch, what: str, inst: str) -> int:
    """Code of an SGPR-like register (s, ttmp, vcc, exec, m0, null, ...) in a scalar operand field."""
    if reg.kind == "s":
        if reg.index + reg.count > arch.max_sgpr:
            raise AsmError(f"SGPR {operand_text(reg)} out of range (s0..s{arch.max_sgpr - 1})", inst, what, arch.name)
        return reg.index
    if reg.kind == "ttmp":
        if reg.index + reg.count > 16:
            raise AsmError(f"{operand_text(reg)} out of range (ttmp0..ttmp15)", inst, what, arch.name)
        return 108 + reg.index
    if reg.kind in SPECIALS:
        code = SPECIALS[reg.kind][1 if arch.rdna else 2]
        if code is None:
            raise AsmError(f"register {reg.kind} does not exist", inst, what, arch.name)
        return code
    raise AsmError(f"expected a scalar register, got {operand_text(reg)}", inst, what, arch.name)


def _int_inline(value: int) -> int | None:
    if 0 <= value <= 64:
        return 128 + value
    if -16 <= value <= -1:
        return 192 - value
    return None


def float_bits(value: float, bits: int) -> int:
    if bits == 16:
        return struct.unpack("<H", struct.pack("<e", value))[0]
    if bits == 64:
        return struct.unpack("<Q", struct.pack("<d", value))[0]
    return struct.unpack("<I", struct.pack("<f", value))[0]


def float_fits(value: float, bits: int) -> bool:
    """llvm-mc's test for a float constant on a 16- or 32-bit operand: rounded to that float format it
    may lose precision, but not overflow nor underflow (turn inexactly into a subnormal or zero)."""
    fmt, smallest_normal = ("<e", 2.0 ** -14) if bits == 16 else ("<f", 2.0 ** -126)
    try:
        rounded = struct.unpack(fmt, struct.pack(fmt, value))[0]
    except OverflowError:
        return False
    return rounded == value or not abs(rounded) < smallest_normal


def bf16_bits(value: float) -> int:
    """bfloat16 bits of a float: its f32 bits rounded to the upper half (to nearest, ties to even)."""
    x = float_bits(value, 32)
    return (x + 0x7FFF + (x >> 16 & 1)) >> 16


def constant_code(value: int | float, bits: int, is_float: bool, inst: str, what: str,
                  arch: Arch, bf16: bool = False) -> tuple[int, int | None]:
    """Source code of a constant: an inline constant ``(code, None)`` or a literal ``(255, dword)``.

    ``bits`` is the operand width (16, 32, 64); ``is_float`` whether the operand is a float, ``bf16``
    whether it is a bfloat16 (a literal then holds its bf16 bits).
    """
    if isinstance(value, float):
        if value in INLINE_FLOATS:
            return INLINE_FLOATS[value], None
        if math.isclose(value, INV_2PI, rel_tol=1e-7):
            return 248, None
        if bf16:
            raw = bf16_bits(value) if float_fits(value, 32) else 0x7F80
            if raw & 0x7F80 == 0x7F80:
                raise AsmError(f"invalid operand for instruction ({value} overflows or underflows bf16)",
                               inst, what, arch.name)
            return LITERAL, raw
        if bits in (16, 32) and not float_fits(value, bits):
            raise AsmError(f"invalid operand for instruction ({value} overflows or underflows f{bits})",
                           inst, what, arch.name)
        if not is_float and bits in (16, 32):  # llvm-mc: an integer operand takes the float's f32 bits
            return LITERAL, float_bits(value, 32)
        if not is_float:  # llvm-mc has no literal form of a float for a 64-bit integer
            raise AsmError("invalid operand for instruction (a float constant on a 64-bit integer operand "
                           "must be inline)", inst, what, arch.name)
        raw = float_bits(value, bits)
        if bits == 64:
            if raw & 0xFFFFFFFF:
                raise AsmError(f"literal {value} has low 32 bits set: f64 literals hold only the high dword",
                               inst, what, arch.name)
            raw >>= 32
        return LITERAL, raw
    code = _int_inline(value)
    if code is not None:
        return code, None
    if not -(1 << 31) <= value <= 0xFFFFFFFF:
        raise AsmError(f"immediate {value} does not fit 32 bits", inst, what, arch.name)
    if bits == 16 and not -(1 << 15) <= value <= 0xFFFF:
        raise AsmError(f"immediate {value} does not fit the 16-bit operand", inst, what, arch.name)
    raw = value & (0xFFFF if bits == 16 else 0xFFFFFFFF)
    pattern_bits = 16 if bits == 16 and is_float else 32 if bits != 64 else 0
    if pattern_bits and raw in INLINE_BITS[pattern_bits]:
        return INLINE_BITS[pattern_bits][raw], None
    return LITERAL, raw


def constant_text(code: int) -> str:
    """Text of an inline constant code (128..248)."""
    if 128 <= code <= 192:
        return str(code - 128)
    if 193 <= code <= 208:
        return str(192 - code)
    return FLOAT_TEXT[code]

"""Operands of the emulator's instructions: where an instruction sits, and readers/writers of its registers.

In: decoded operands (``tg_amd.operands`` objects and ints/floats) and the operand's type. Out: closures
over a ``Wave``: ``sread``/``swriter`` for scalar operands (Python ints), ``vread`` for vector sources (a
numpy array of 32 lanes, or a 0-d array for a scalar or constant, of the operand's type) and ``to_bits``
for results; ``Context`` (arch, byte position, branch targets, memory counter names) and ``unsupported``
(an op that raises, naming the instruction, the arch and the byte offset).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tg_amd.emu_state import NULL, EmulatorError, Wave
from tg_amd.inst import Inst
from tg_amd.operands import SPECIALS, Mod, Reg, float_bits

Op = Callable[[Wave], Any]
BLOCK, END = -1, -2
M32, M64 = 0xFFFFFFFF, (1 << 64) - 1
U64_32 = np.uint64(32)
ALL_LANES = np.arange(32)

u32, i32, f32, f16, u64 = "u32", "i32", "f32", "f16", "u64"
NP = {u32: np.uint32, i32: np.int32, f32: np.float32, f16: np.float16, u64: np.uint64}


class Context:
    """Where an instruction sits: arch family, byte position, branch targets, memory counter names, and the
    counts its op adds to."""

    def __init__(self, arch: Any, pos: int, index_of: dict[int, int], memory: Any, counts: Any = None):
        self.arch, self.gen, self.pos, self.index_of, self.memory = arch, arch.gen, pos, index_of, memory
        self.counts = counts  # the launch's EmuCounts (tg_amd.emu_counters): LDS bank conflicts, waits
        rdna4 = self.gen == 12
        self.load_counter = "load" if rdna4 else "vm"
        self.ds_counter = "ds" if rdna4 else "lgkm"
        self.smem_counter = "km" if rdna4 else "lgkm"

    def fail(self, inst: Inst, why: str) -> EmulatorError:
        return EmulatorError(f"{inst.name}: {why} (arch {self.arch.name}, byte {self.pos})")


# ------------------------------------------------------------------------------------------ operands

def scalar_code(reg: Reg) -> int:
    if reg.kind == "s":
        return reg.index
    if reg.kind == "ttmp":
        return 108 + reg.index
    code = SPECIALS[reg.kind][1]
    if code is None or reg.kind == "scc":
        raise EmulatorError(f"register {reg.kind} cannot be read as a scalar operand")
    return code


def _const_bits(value: int | float, kind: str) -> int:
    """The bits an inline constant or literal stands for in an operand of ``kind``."""
    if isinstance(value, float):
        return float_bits(value, 16 if kind == f16 else 64 if kind == "f64" else 32)
    return value & (M64 if kind == u64 else M32)


def sread(op: Any, bits: int = 32) -> Callable[[Wave], int]:
    """Reader of a scalar operand as an unsigned int of ``bits`` bits."""
    if isinstance(op, Reg):
        code = scalar_code(op)
        if bits == 64:
            return lambda w: w.s[code] | w.s[code + 1] << 32
        return lambda w: w.s[code]
    value = _const_bits(op, u64 if bits == 64 else u32)
    return lambda w: value


def swriter(op: Any, bits: int = 32) -> Callable[[Wave, int], None]:
    code = scalar_code(op)
    if code == NULL:
        return lambda w, x: None
    if bits == 64:
        def write64(w: Wave, x: int) -> None:
            w.s[code], w.s[code + 1] = x & M32, x >> 32 & M32
        return write64

    def write(w: Wave, x: int) -> None:
        w.s[code] = x & M32
    return write


def vread(op: Any, kind: str) -> Callable[[Wave], Any]:
    """Reader of a vector-instruction source as a numpy array of 32 lanes (or a 0-d array) of ``kind``."""
    neg = absolute = False
    if isinstance(op, Mod):
        neg, absolute, op = op.neg, op.abs, op.value
        if kind not in (f32, f16):
            raise EmulatorError(f"neg/abs modifiers on a {kind} operand")
    read = _vread_plain(op, kind)
    if absolute and neg:
        return lambda w: -np.abs(read(w))
    if absolute:
        return lambda w: np.abs(read(w))
    if neg:
        return lambda w: -read(w)
    return read


def _vread_plain(op: Any, kind: str) -> Callable[[Wave], Any]:
    if isinstance(op, Reg) and op.kind == "v":
        i = op.index
        if kind == u32:
            return lambda w: w.v[i]
        if kind == f16:
            return lambda w: w.v[i].view(np.float16)[::2]
        if kind == u64:
            return lambda w: w.v[i].astype(np.uint64) | (w.v[i + 1].astype(np.uint64) << U64_32)
        view = NP[kind]
        return lambda w: w.v[i].view(view)
    if isinstance(op, Reg):
        code = scalar_code(op)
        if kind == u64:
            return lambda w: np.array(w.s[code] | w.s[code + 1] << 32, dtype=np.uint64)
        if kind == f16:
            return lambda w: np.array(w.s[code] & 0xFFFF, dtype=np.uint16).view(np.float16)
        view = NP[kind]
        return lambda w: np.array(w.s[code], dtype=np.uint32).view(view)
    bits = _const_bits(op, kind)
    if kind == f16:
        value = np.array(bits & 0xFFFF, dtype=np.uint16).view(np.float16)
    elif kind == u64:
        value = np.array(bits, dtype=np.uint64)
    else:
        value = np.array(bits, dtype=np.uint32).view(NP[kind])
    return lambda w: value


def as_f64(x: Any) -> Any:
    """Values as float64 (exact for f16/f32/i32/u32): arithmetic in it is rounded once to the result type."""
    return np.asarray(x, dtype=np.float64)


def cvt_f_to_int(x: Any, lo: float, hi: float, dtype: Any) -> Any:
    """Float -> int as the ISA converts: truncate, NaN -> 0, saturate at the type's range."""
    t = np.trunc(np.nan_to_num(as_f64(x), nan=0.0, posinf=hi, neginf=lo))
    return np.clip(t, lo, hi).astype(dtype)


def to_bits(kind: str, x: Any) -> Any:
    """Lane values of ``kind`` -> uint32 register bits (f16: the low half, high half zero)."""
    if kind == f32:
        return np.asarray(x, dtype=np.float32).view(np.uint32)
    if kind == f16:
        return np.asarray(x, dtype=np.float16).view(np.uint16).astype(np.uint32)
    return np.asarray(x).astype(np.uint32)


def vreg(op: Any, inst: Inst, ctx: Context) -> int:
    if not isinstance(op, Reg) or op.kind != "v":
        raise ctx.fail(inst, f"expected a VGPR, got {op!r}")
    return op.index


def unsupported(inst: Inst, ctx: Context, what: str | None = None) -> Op:
    error = ctx.fail(inst, f"{what or 'this instruction'} is not supported by the emulator")

    def op(w: Wave) -> None:
        raise error
    op.unsupported = str(error)  # type: ignore[attr-defined]
    return op

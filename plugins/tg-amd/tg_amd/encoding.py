"""The encoder's working state for one instruction: ``_Encoder``.

In: an ``Inst``, its arch and ``OpInfo`` (and, for branches, its address and the labels). The format
encoders (``tg_amd.encoder``, ``tg_amd.encode_mem``, ``tg_amd.image``) check each operand through it
(register file, count and alignment, scalar codes, constants and the one literal), fill its ``fields``
and ``emit`` the bytes of the layout. Failures raise ``AsmError`` naming the instruction, the operand
and the arch.
"""
from __future__ import annotations

from typing import Any, NoReturn

from tg_amd.arch import Arch, AsmError
from tg_amd.inst import Inst
from tg_amd.isa import OpInfo
from tg_amd.layouts import LAYOUTS, Layout
from tg_amd.operands import ANY_WIDTH, SPECIALS, Mod, Reg, Sext, constant_code, operand_text, scalar_code

PACKED = ("v_pk_", "v_dot")  # 16-bit pairs in one 32-bit operand: any VGPR, 32-bit integer literals
TRUE16 = ("v_mov_b16",)  # instructions whose VGPR operands are 16-bit halves (v8.l, v8.h): v0..v127 only


class NoFit(Exception):
    """The 32-bit VOP encoding cannot hold these operands; the caller falls back to VOP3."""


def _signed(value: int, bits: int, what: str, enc: _Encoder, unsigned_ok: bool = False) -> int:
    lo, hi = -(1 << (bits - 1)), (1 << bits) - 1 if unsigned_ok else (1 << (bits - 1)) - 1
    if not isinstance(value, int) or not lo <= value <= hi:
        enc.fail(f"{value!r} out of range [{lo}, {hi}]", what)
    return value & ((1 << bits) - 1)


def _unsigned(value: Any, bits: int, what: str, enc: _Encoder) -> int:
    if not isinstance(value, int) or not 0 <= value < 1 << bits:
        enc.fail(f"{value!r} out of range [0, {(1 << bits) - 1}]", what)
    return value


class _Encoder:
    def __init__(self, inst: Inst, arch: Arch, info: OpInfo, pc: int, labels: dict[str, int] | None):
        self.inst, self.arch, self.info, self.pc, self.labels = inst, arch, info, pc, labels
        self.fields: dict[str, int] = {}
        self.literal: int | None = None
        self.extra: int | None = None  # the DPP dword
        self.layout_name = info.fmt  # the encoding being built (VOP3 for a promoted VOP1/VOP2/VOPC)

    # ---- errors and operand checks
    def fail(self, message: str, what: str | None = None) -> NoReturn:
        raise AsmError(message, self.inst.name, what, self.arch.name)

    def what(self, i: int, role: str) -> str:
        return f"{i} ({role})"

    def check_count(self, reg: Reg, count: int, what: str) -> None:
        if reg.count != count:
            unit = {"v": "VGPR", "a": "AGPR"}.get(reg.kind, "SGPR")
            self.fail(f"needs {count} {unit}{'s' if count > 1 else ''}, got {operand_text(reg)} ({reg.count})",
                      what)

    def check_align(self, reg: Reg, what: str) -> None:
        if reg.kind in ("s", "ttmp") and reg.count >= 2:
            align = 2 if reg.count == 2 else 4
            if reg.index % align:
                self.fail(f"register tuple {operand_text(reg)} must start at a multiple of {align}", what)
        if reg.kind in ("v", "a") and reg.count >= 2 and not self.arch.rdna and reg.index % 2:
            self.fail(f"register tuple {operand_text(reg)} must start at an even register", what)

    def vreg(self, op: Any, count: int, what: str, kinds: tuple[str, ...] = ("v",)) -> Reg:
        if isinstance(op, Reg) and op.half:
            self.fail(f"register halves ({operand_text(op)}) are operands of {', '.join(TRUE16)} only", what)
        if not isinstance(op, Reg) or op.kind not in kinds:
            self.fail(f"expected {' or '.join({'v': 'a VGPR', 'a': 'an AGPR'}[k] for k in kinds)}, "
                      f"got {operand_text(op)}", what)
        self.check_count(op, count, what)
        if op.index + op.count > 256:
            self.fail(f"{operand_text(op)} out of range ({op.kind}0..{op.kind}255)", what)
        self.check_align(op, what)
        return op

    def sreg(self, op: Any, count: int, what: str) -> int:
        if not isinstance(op, Reg) or op.kind in ("v", "a"):
            self.fail(f"expected a scalar register, got {operand_text(op)}", what)
        if op.kind in SPECIALS:
            if SPECIALS[op.kind][0] != count and op.kind not in ANY_WIDTH:  # null, src_shared_base, ...
                self.fail(f"needs {count} SGPR{'s' if count > 1 else ''}, got {op.kind} ({op.count})", what)
        else:
            self.check_count(op, count, what)
            self.check_align(op, what)
        return scalar_code(op, self.arch, what, self.inst.name)

    def set_literal(self, value: int, what: str) -> None:
        if self.literal is not None and self.literal != value:
            self.fail("only one 32-bit literal per instruction", what)
        self.literal = value

    def src(self, op: Any, slot: int, what: str, vgpr: bool = True, agpr: bool = False,
            literal: bool = True) -> tuple[int, bool, bool]:
        """Source code (8 or 9 bits), neg, abs of a source operand in ``slot``."""
        neg = ab = False
        exponent = self.info.exponent_mods(slot, self.arch.rdna)
        if isinstance(op, Sext) and exponent:
            op, neg = op.value, True
        elif isinstance(op, Mod):
            if not (self.info.is_float(slot) or exponent == "negabs"):
                self.fail("neg/abs modifiers need a float operand", what)
            op, neg, ab = op.value, op.neg, op.abs
        count = self.info.count(slot)
        if isinstance(op, Reg):
            if op.kind in ("v", "a"):
                if not (vgpr if op.kind == "v" else agpr):
                    self.fail(f"{operand_text(op)} is not allowed here", what)
                self.vreg(op, count, what, (op.kind,))
                return 256 + op.index, neg, ab
            return self.sreg(op, count, what), neg, ab
        if isinstance(op, bool) or not isinstance(op, int | float):
            self.fail(f"expected a register or constant, got {operand_text(op)}", what)
        width = self.info.width(slot)
        if width == 16 and isinstance(op, int) and self.info.name.startswith(PACKED):
            width = 32  # an integer literal fills the whole packed pair
        # llvm-mc writes v_ldexp_f16's i16 exponent constants as f16, like its float source
        as_float = self.info.is_float(slot) or self.info.name == "v_ldexp_f16"
        code, lit = constant_code(op, width, as_float, self.inst.name, what, self.arch,
                                  bf16=self.info.types[slot] == "bf16")
        if lit is not None:
            if not literal:
                self.fail("a literal constant is not allowed here (only inline constants)", what)
            self.set_literal(lit, what)
        return code, neg, ab

    # ---- output
    def emit(self, layout: Layout) -> bytes:
        try:
            word = layout.pack(self.fields)
        except ValueError as e:
            self.fail(str(e))
        out = word.to_bytes(layout.bits // 8, "little")
        if self.literal is not None:
            out += self.literal.to_bytes(4, "little")
        if self.extra is not None:
            out += self.extra.to_bytes(4, "little")
        return out

    def layout(self, name: str) -> Layout:
        return LAYOUTS[self.arch.gen][name]


def _operands(enc: _Encoder, sig: tuple[str, ...]) -> tuple[Any, ...]:
    ops = enc.inst.operands
    if len(ops) != len(sig):
        enc.fail(f"takes {len(sig)} operands ({', '.join(sig) or 'none'}), got {len(ops)}")
    return ops


def _no_mods(enc: _Encoder, allowed: tuple[str, ...] = ()) -> None:
    extra = [m for m in enc.inst.mods if m not in allowed]
    if extra:
        enc.fail(f"modifier {extra[0]} is not valid here", extra[0])

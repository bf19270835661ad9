"""Helpers for the tg-x86 tests: capstone as the reference decoder, listing normalisation."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tg_x86.forms import Form
from tg_x86.isa import Op

from tgcore.testing import require

# forms capstone 5 decodes wrongly or not at all: checked against llvm-mc instead (test_x86_llvm)
LLVM_ONLY = (Op.VPDPBUSD_VEX,)   # VEX-encoded AVX-VNNI


def require_capstone() -> Any:
    """The capstone module; skip the test without it, except in CI (CI=true), where that is a failure."""
    return require("capstone", "pip install 'tg-x86[test]'")


def decoder() -> Any:
    capstone = require_capstone()
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.syntax = capstone.CS_OPT_SYNTAX_INTEL
    return md


def decode_one(md: Any, code: bytes) -> tuple[str, int, int]:
    """(text, size, number of instructions) of what capstone decodes from ``code``."""
    insts = list(md.disasm(code, 0))
    if not insts:
        return "<undecodable>", 0, 0
    first = insts[0]
    return f"{first.mnemonic} {first.op_str}".strip(), first.size, len(insts)


_NUMBER = re.compile(r"-?(0x[0-9a-f]+|\d+)")


def _split(text: str) -> tuple[str, list[str]]:
    mnemonic, _, rest = text.partition(" ")
    return mnemonic, [o.strip() for o in rest.split(",")] if rest else []


def _number(text: str) -> int | None:
    return int(text, 0) if _NUMBER.fullmatch(text) else None


def same_listing(ours: str, theirs: str, form: Form, code_len: int = 0) -> bool:
    """Do two Intel-syntax lines say the same thing? Immediates compare by their encoded bits
    (capstone prints ``-1`` or ``0xff`` for the same byte); jump targets modulo 2**64."""
    m1, ops1 = _split(ours)
    m2, ops2 = _split(theirs)
    if m1 != m2 or len(ops1) != len(ops2):
        return False
    types = [t for t in form.operands if not (t.imm and m1.startswith("vcmp") and len(ops1) < len(form.operands))]
    for i, (a, b) in enumerate(zip(ops1, ops2, strict=True)):
        if a == b:
            continue
        na, nb = _number(a), _number(b)
        if na is None or nb is None or i >= len(types):
            return False
        bits = types[i].imm_bits or 64
        if types[i].rel:
            na += code_len  # ours is the displacement, capstone prints the target address
        if (na - nb) % (1 << bits):
            return False
    return True


# ---------------------------------------------------------------- capstone detail mode, for selection tests

@dataclass(frozen=True)
class Operand:
    """One operand as capstone decodes it: kind "reg", "imm" or "mem"; ``size`` in bytes."""
    kind: str
    size: int
    reg: str | None = None
    imm: int | None = None
    base: str | None = None
    index: str | None = None
    scale: int = 1
    disp: int = 0


@dataclass(frozen=True)
class Decoded:
    """One instruction: ``disp_size`` is the byte count of its displacement field (0, 1 or 4)."""
    address: int
    mnemonic: str
    operands: tuple[Operand, ...]
    disp_size: int
    text: str

    def mem(self) -> Operand | None:
        return next((o for o in self.operands if o.kind == "mem"), None)

    def regs(self) -> list[str]:
        return [o.reg for o in self.operands if o.kind == "reg" and o.reg is not None]


def disassemble(code: bytes) -> list[Decoded]:
    """Every instruction of ``code``, decoded by capstone with operand details (fails on undecodable bytes)."""
    capstone = require_capstone()
    from capstone import x86
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.syntax = capstone.CS_OPT_SYNTAX_INTEL
    md.detail = True

    def name(insn: Any, reg: int) -> str | None:
        return insn.reg_name(reg) if reg else None

    out, end = [], 0
    for insn in md.disasm(code, 0):
        ops = []
        for o in insn.operands:
            if o.type == x86.X86_OP_REG:
                ops.append(Operand("reg", o.size, reg=name(insn, o.reg)))
            elif o.type == x86.X86_OP_IMM:
                ops.append(Operand("imm", o.size, imm=o.imm))
            else:
                m = o.mem
                ops.append(Operand("mem", o.size, base=name(insn, m.base), index=name(insn, m.index), scale=m.scale,
                                   disp=m.disp))
        out.append(Decoded(insn.address, insn.mnemonic, tuple(ops), insn.disp_size,
                           f"{insn.mnemonic} {insn.op_str}".strip()))
        end = insn.address + insn.size
    assert end == len(code), f"capstone stops decoding at byte {end} of {len(code)}"
    return out

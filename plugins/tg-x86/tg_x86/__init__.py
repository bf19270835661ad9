"""tg-x86: x86-64 machine code for tgcore's CPU device.

Build instructions with ``Inst(Op.ADD, reg("eax"), 1)``, place ``Label``s between them,
``assemble(program).code`` gives the bytes, ``asm(program)`` the Intel-syntax listing and
``ExecutableCode(code).function(restype, *argtypes)`` a callable. Modules:

    operands   registers, memory operands, immediates, labels
    isa        Op (instructions with groups and flags), Cond, Inst
    forms      encoding forms of every Op (the SDM's opcode tables as data)
    encoder    one Inst -> bytes
    assembler  instructions + labels -> bytes, jump relaxation
    listing    Intel-syntax text, capstone disassembly
    runtime    executable memory and ctypes calls
    cpu        CPU feature detection, unavailable_reason()

Names below load their module on first use, so ``import tg_x86`` stays cheap.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "operands": ("Reg", "Mem", "Imm", "Label", "reg", "gpr", "xmm", "ymm", "ptr", "byte", "word", "dword", "qword",
                 "xmmword", "ymmword"),
    "isa": ("Op", "Cond", "Flag", "Group", "Inst"),
    "encoder": ("encode", "EncodeError", "select_form"),
    "assembler": ("assemble", "Assembly"),
    "listing": ("asm", "disassemble"),
    "runtime": ("ExecutableCode", "load_function"),
    "cpu": ("features", "unavailable_reason"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'tg_x86' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tg_x86.{_WHERE[name]}"), name)
    globals()[name] = value
    return value

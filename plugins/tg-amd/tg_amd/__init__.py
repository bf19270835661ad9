"""tg-amd: an AMD GPU assembler for RDNA3 (gfx1100), RDNA4 (gfx1200/gfx1201) and CDNA3 (gfx942).

``assemble(text_or_insts, arch) -> bytes`` and ``disassemble(data, arch) -> text`` speak LLVM's
syntax; ``tg_amd.dsl`` builds the same instructions from Python. Encodings match llvm-mc byte for
byte (the tests check). Modules:

    arch        archs, AsmError
    operands    registers, constants, modifiers, labels
    tables/     opcode tables (data, from the ISA guides)
    isa         the tables parsed: OpInfo per mnemonic
    layouts     bit layouts of every encoding format
    inst        Inst: one instruction
    encoder     Inst -> bytes
    decoder     bytes -> Inst
    syntax      text <-> Inst
    assembler   programs: labels, branches, disassembly listings
    dsl         Python builders named like the mnemonics
    emulator    runs RDNA3/RDNA4 machine code (emu_state: registers and memory; emu_operands, emu_ops,
                emu_salu, emu_mem: what instructions do)
    kernels/    hand-written kernels (gemm: WMMA GEMMs for gfx1200 and gfx1100)
    device      the AMD:EMU device (plugin.py registers it)
    gemm        asm_gemm(a, b): the WMMA GEMM from Tensor code, with backward
    codeobj     AMDHSA code objects (ELF, kernel descriptor, metadata note); elf, msgpack
    kernel_text a whole kernel in LLVM syntax (code + .amdhsa_kernel block) -> code object

Names below load their module on first use, so ``import tg_amd`` stays cheap.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "arch": ("Arch", "ARCHS", "AsmError", "get_arch"),
    "inst": ("Inst",),
    "operands": ("Reg", "Mod", "Label", "OFF", "s", "v", "a", "ttmp"),
    "encoder": ("encode",),
    "decoder": ("decode",),
    "syntax": ("parse_inst", "format_inst"),
    "assembler": ("assemble", "disassemble", "parse_program"),
    "isa": ("lookup", "mnemonics"),
    "codeobj": ("code_object", "read_code_object", "KernArg", "register_usage"),
    "emulator": ("run_kernel", "EmulatorError"),
    "gemm": ("asm_gemm",),
    "kernel_text": ("kernel_object",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f"tg_amd.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tg_amd' has no attribute {name!r}")

"""SDWA (gfx9): a VOP1/VOP2/VOPC instruction on bytes or words of its operands (``dst_sel:WORD_1``,
``dst_unused:UNUSED_PRESERVE``, ``src0_sel:BYTE_0``, ``src1_sel:DWORD``, ``sext(v1)``).

In: the instruction's modifiers and its sources (code, neg, abs, sext, whether a scalar). Out: the
SDWA dword that follows the instruction (src0 [7:0]; dst_sel [10:8], dst_unused [12:11], clamp [13],
omod [15:14] -- or, for VOPC, sdst [14:8] and sd [15]; src0_sel [18:16], sext [19], neg [20],
abs [21], s0 [23]; src1 the same from bit 24, s1 [31]) -- ``encode``; ``decode`` is the reverse.
Layout from the CDNA3 ISA guide and llvm-mc's encodings.
"""
from __future__ import annotations

from typing import Any

from tg_amd.arch import Arch, AsmError

MARKER = 0xF9
SELECT = {"BYTE_0": 0, "BYTE_1": 1, "BYTE_2": 2, "BYTE_3": 3, "WORD_0": 4, "WORD_1": 5, "DWORD": 6}
UNUSED = {"UNUSED_PAD": 0, "UNUSED_SEXT": 1, "UNUSED_PRESERVE": 2}
KEYS = ("dst_sel", "dst_unused", "src0_sel", "src1_sel")
OMOD = {"mul:2": 1, "mul:4": 2, "div:2": 3}


def has_sdwa(mods: dict[str, Any]) -> bool:
    return any(k in mods for k in KEYS)


def _pick(table: dict[str, int], value: Any, key: str, arch: Arch) -> int:
    if isinstance(value, int) and value in table.values():
        return value
    if value not in table:
        raise AsmError(f"{key} is one of {', '.join(table)}", None, key, arch.name)
    return table[value]


def encode(mods: dict[str, Any], src: list[tuple[int, int, int, int, bool]], vopc: bool, vopc_sdst: int | None,
           arch: Arch) -> int:
    """The SDWA dword. ``src``: per source (code, neg, abs, sext, scalar); ``vopc_sdst``: the SGPR code a
    VOPC writes (None: VCC)."""
    word = 0
    for k, (code, neg, ab, sext, scalar) in enumerate(src):
        shift = 16 + 8 * k
        sel = _pick(SELECT, mods.get(f"src{k}_sel", "DWORD"), f"src{k}_sel", arch)
        word |= (sel | sext << 3 | neg << 4 | ab << 5 | int(scalar) << 7) << shift
        if k == 0:
            word |= code & 0xFF
    if vopc:
        if vopc_sdst is not None:
            word |= (vopc_sdst | 0x80) << 8
    else:
        word |= _pick(SELECT, mods.get("dst_sel", "DWORD"), "dst_sel", arch) << 8
        word |= _pick(UNUSED, mods.get("dst_unused", "UNUSED_PRESERVE"), "dst_unused", arch) << 11
        word |= int(bool(mods.get("clamp"))) << 13
        if "omod" in mods:
            word |= OMOD[mods["omod"]] << 14
    return word


def decode(word: int, vopc: bool, nsrc: int) -> tuple[list[tuple[int, int, int, int, bool]], int | None,
                                                      dict[str, Any]]:
    """(per source (code, neg, abs, sext, scalar), VOPC sdst code or None, modifiers) of an SDWA dword."""
    names = {v: k for k, v in SELECT.items()}
    mods: dict[str, Any] = {}
    sdst = None
    if vopc:
        if word >> 15 & 1:
            sdst = word >> 8 & 0x7F
    else:
        if word >> 13 & 1:
            mods["clamp"] = True
        if word >> 14 & 3:
            mods["omod"] = {v: k for k, v in OMOD.items()}[word >> 14 & 3]
        mods["dst_sel"] = names.get(word >> 8 & 7, word >> 8 & 7)
        mods["dst_unused"] = {v: k for k, v in UNUSED.items()}.get(word >> 11 & 3, word >> 11 & 3)
    src = []
    for k in range(nsrc):
        byte = word >> (16 + 8 * k) & 0xFF
        src.append((word & 0xFF if k == 0 else -1, byte >> 4 & 1, byte >> 5 & 1, byte >> 3 & 1, bool(byte >> 7)))
        mods[f"src{k}_sel"] = names.get(byte & 7, byte & 7)
    return src, sdst, mods

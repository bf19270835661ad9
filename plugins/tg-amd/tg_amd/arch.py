"""Target architectures: a name like ``"gfx1200"`` in, an ``Arch`` (family, wave size, register codes) out."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    name: str        # gfx1200
    family: str      # "rdna4", "rdna3", "cdna3"
    wave: int        # default wave size of the assembler: 32 (RDNA) or 64 (CDNA)
    m0: int          # scalar operand code of M0
    null: int | None  # code of NULL (none on CDNA)
    max_sgpr: int    # number of addressable SGPRs (s0..s{max_sgpr-1})
    vop3_literal: bool  # VOP3/VOP3P may carry a 32-bit literal

    @property
    def rdna(self) -> bool:
        return self.family in ("rdna3", "rdna4")

    @property
    def gen(self) -> int:
        """11 for RDNA3, 12 for RDNA4, 9 for CDNA3 (the gfx generation the encodings follow)."""
        return {"rdna3": 11, "rdna4": 12, "cdna3": 9}[self.family]


ARCHS: dict[str, Arch] = {
    "gfx1100": Arch("gfx1100", "rdna3", 32, 125, 124, 106, True),
    "gfx1200": Arch("gfx1200", "rdna4", 32, 125, 124, 106, True),
    "gfx1201": Arch("gfx1201", "rdna4", 32, 125, 124, 106, True),
    "gfx942": Arch("gfx942", "cdna3", 64, 124, None, 102, False),
}
FAMILIES = {"rdna3": "gfx1100", "rdna4": "gfx1200", "cdna3": "gfx942"}


class AsmError(ValueError):
    """An instruction that cannot be encoded: names the instruction, the operand and the arch."""

    def __init__(self, message: str, inst: str | None = None, operand: str | None = None,
                 arch: str | None = None, line: int | None = None):
        parts = [message]
        if inst:
            parts.append(f"instruction {inst!r}")
        if operand:
            parts.append(f"operand {operand}")
        if arch:
            parts.append(f"arch {arch}")
        if line is not None:
            parts.append(f"line {line}")
        super().__init__(parts[0] + (" (" + ", ".join(parts[1:]) + ")" if len(parts) > 1 else ""))
        self.inst, self.operand, self.arch, self.line = inst, operand, arch, line


def get_arch(arch: str | Arch) -> Arch:
    if isinstance(arch, Arch):
        return arch
    key = FAMILIES.get(arch, arch)
    if key not in ARCHS:
        raise AsmError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    return ARCHS[key]

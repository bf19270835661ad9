"""The instruction set of each arch, built from the opcode tables (``tg_amd.tables``).

In: an arch and a mnemonic. Out: an ``OpInfo`` (format, opcode, operand roles in assembly
order, operand widths) -- ``lookup(arch, name)`` -- and the reverse map from (format, opcode)
to ``OpInfo`` the decoder uses -- ``by_opcode(arch, fmt, op)``.

Operand roles: ``sdst ssrc0 ssrc1 simm16 label waitcnt`` (scalar ALU), ``sdata sbase sbuf soff``
(scalar memory), ``vdst src0 src1 src2 vsrc0 vsrc1 vcc mask k sdst`` (vector ALU; ``vcc`` is the
implicit VCC of the 32-bit encodings, ``mask`` a lane mask in SGPRs, ``k`` an inline literal),
``adst asrc0`` (AGPRs), ``mdst msrc0 msrc1 msrc2`` (MFMA: VGPR or AGPR), ``addr data0 data1``
(LDS), ``vaddr vdata saddr`` (global/flat memory).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from tg_amd.arch import ARCHS, Arch, AsmError, get_arch

TYPE_RE = re.compile(r"^(?:b|f|i|u|bf|iu)(\d+)$")
GFX9_WIDTH = {"dword": 32, "dwordx2": 64, "dwordx3": 96, "dwordx4": 128, "dwordx8": 256, "dwordx16": 512}
DEFAULT_SIG = {
    "SOP1": "sdst,ssrc0", "SOP2": "sdst,ssrc0,ssrc1", "SOPC": "ssrc0,ssrc1", "SOPK": "sdst,simm16", "SOPP": "",
    "SMEM": "sdata,sbase,soff", "VOP1": "vdst,src0", "VOP2": "vdst,src0,vsrc1", "VOPC": "vcc,src0,vsrc1",
    "MAI": "mdst,msrc0,msrc1,msrc2", "VOPD_X": "vdst,src0,vsrc1", "VOPD_Y": "vdst,src0,vsrc1",
}
DST_ROLES = {"sdst", "sdata", "vdst", "adst", "mdst"}
SRC_INDEX = {"ssrc0": 1, "src0": 1, "vsrc0": 1, "asrc0": 1, "msrc0": 1, "ssrc1": 2, "src1": 2, "vsrc1": 2,
             "msrc1": 2, "src2": 3, "msrc2": 3, "data0": 3, "data1": 3, "vdata": 3}


@dataclass(frozen=True)
class OpInfo:
    name: str
    fmt: str                  # table: SOP1 ... VOP3SD, VOP3P, MAI, VOPD_X, VOPD_Y, DS, GLOBAL, FLAT
    op: int
    sig: tuple[str, ...]
    types: tuple[str, str, str, str]  # dst, src0, src1, src2
    regs: tuple[int, ...] | None = None  # register counts dst, src0, src1, src2 (override)
    e64: int | None = None    # VOP3 opcode of a VOP1/VOP2/VOPC instruction
    flags: frozenset[str] = field(default_factory=frozenset)

    def width(self, slot: int) -> int:
        m = TYPE_RE.match(self.types[slot])
        if m:
            bits = int(m.group(1))
            return bits if bits == 16 or bits % 32 == 0 else 32
        return GFX9_WIDTH.get(self.types[slot], 32)

    def is_float(self, slot: int) -> bool:
        return self.types[slot].startswith(("f", "bf"))

    def count(self, slot: int) -> int:
        """Registers the operand in ``slot`` (0 dst, 1..3 sources/data) spans."""
        if self.regs is not None and slot < len(self.regs):
            return self.regs[slot]
        return max(1, self.width(slot) // 32)

    @property
    def layout(self) -> str:
        if self.fmt in ("GLOBAL", "FLAT"):
            return "FLAT"
        if self.fmt.startswith("VOPD"):
            return "VOPD"
        return self.fmt


def _types(name: str, given: str | None) -> tuple[str, str, str, str]:
    if given:
        parts = given.split(",")
    else:
        parts = [p for p in name.split("_") if TYPE_RE.match(p) or p in GFX9_WIDTH]
        if not parts:
            parts = ["b32"]
        parts = [parts[0], parts[-1]]
    parts = parts + [parts[-1]] * (4 - len(parts))
    return (parts[0], parts[1], parts[2], parts[3])


def _default_sig(fmt: str, name: str, keys: dict[str, str], gen: int) -> str:
    if fmt in DEFAULT_SIG:
        if fmt == "VOPC" and name.startswith("v_cmpx") and gen >= 11:
            return "src0,vsrc1"
        return DEFAULT_SIG[fmt]
    if fmt in ("VOP3", "VOP3P"):
        n = int(keys.get("n", "2"))
        return "vdst," + ",".join(f"src{i}" for i in range(n))
    if fmt == "GLOBAL":
        if "_store_" in name or keys.get("atomic"):
            return "vaddr,vdata,saddr"
        return "vdst,vaddr,saddr"
    if fmt == "FLAT":
        return "vaddr,vdata" if "_store_" in name else "vdst,vaddr"
    raise ValueError(f"{name}: format {fmt} needs sig=")


def parse_table(fmt: str, text: str, gen: int) -> list[OpInfo]:
    """Rows of one table text for generation ``gen`` (rows tagged for another generation are skipped)."""
    rows = []
    for line in text.strip().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        tags = [w for w in words if w.startswith("@")]
        if tags and f"@{gen}" not in tags:
            continue
        name, op = words[0], int(words[1], 0)
        keys = dict(w.split("=", 1) for w in words[2:] if "=" in w)
        sig = keys["sig"] if "sig" in keys else _default_sig(fmt, name, keys, gen)
        regs = tuple(int(x) for x in keys["regs"].split(",")) if "regs" in keys else None
        e64 = None
        if fmt in ("VOP1", "VOP2", "VOPC") and keys.get("e64") != "no":
            base = {"VOPC": 0, "VOP2": 256, "VOP1": 384 if gen >= 11 else 320}[fmt]
            e64 = int(keys["e64"], 0) if "e64" in keys else base + op
        flags = frozenset(k for k in ("wmma", "atomic", "nomods", "regsrc") if keys.get(k))
        rows.append(OpInfo(name, fmt, op, tuple(r for r in sig.split(",") if r), _types(name, keys.get("t")),
                           regs, e64, flags))
    return rows


@cache
def _isa(gen: int) -> tuple[dict[str, OpInfo], dict[tuple[str, int], OpInfo]]:
    from tg_amd.tables import cdna, rdna
    tables = cdna.TABLES if gen == 9 else {**rdna.TABLES, "VOPD_X": rdna.VOPD_X, "VOPD_Y": rdna.VOPD_Y}
    by_name: dict[str, OpInfo] = {}
    by_op: dict[tuple[str, int], OpInfo] = {}
    for fmt, text in tables.items():
        for info in parse_table(fmt, text, gen):
            if fmt.startswith("VOPD"):
                by_op[(fmt, info.op)] = info
                by_name.setdefault(info.name, info)
                continue
            if info.name in by_name:
                raise ValueError(f"duplicate mnemonic {info.name} in gfx{gen} tables")
            by_name[info.name] = info
            key = {"VOP3SD": "VOP3", "MAI": "VOP3P"}.get(fmt, fmt)
            if (key, info.op) in by_op:
                raise ValueError(f"duplicate opcode {fmt} {info.op:#x} in gfx{gen} tables ({info.name})")
            by_op[(key, info.op)] = info
            if info.e64 is not None:
                by_op[("VOP3", info.e64)] = info
    return by_name, by_op


def vopd_info(arch: Arch, name: str, half: str) -> OpInfo | None:
    """The VOPD X or Y half named ``name`` (``half`` is ``"X"`` or ``"Y"``)."""
    _, by_op = _isa(arch.gen)
    for (fmt, _op), info in by_op.items():
        if fmt == f"VOPD_{half}" and info.name == name:
            return info
    return None


def lookup(arch: str | Arch, name: str) -> OpInfo:
    """The instruction ``name`` on ``arch``; an ``AsmError`` naming the archs that have it if absent."""
    arch = get_arch(arch)
    info = _isa(arch.gen)[0].get(name)
    if info is None or info.fmt.startswith("VOPD"):
        others = [a for a, spec in ARCHS.items() if name in _isa(spec.gen)[0] and spec.gen != arch.gen]
        hint = f"; it exists on {', '.join(others)}" if others else ""
        raise AsmError(f"no such instruction on this arch{hint}", name, None, arch.name)
    return info


def by_opcode(arch: Arch, fmt: str, op: int) -> OpInfo | None:
    return _isa(arch.gen)[1].get((fmt, op))


def mnemonics(arch: str | Arch) -> list[OpInfo]:
    """Every instruction of ``arch`` (VOPD halves included), in table order."""
    arch = get_arch(arch)
    by_name, by_op = _isa(arch.gen)
    seen = {id(i) for i in by_name.values()}
    return list(by_name.values()) + [i for i in by_op.values() if id(i) not in seen]


def all_names() -> set[str]:
    return {name for spec in ARCHS.values() for name in _isa(spec.gen)[0]}

"""Programs: ``assemble(text_or_insts, arch) -> bytes`` and ``disassemble(data, arch) -> text``.

In (assemble): LLVM-syntax text -- one instruction per line, ``name:`` labels, ``//`` and ``;``
comments, ``.text`` -- or a list of ``Inst`` and ``Label`` objects from the DSL. Branches to
labels become signed dword offsets. Out: the machine code. Errors carry the line number.
In (disassemble): machine code. Out: text that ``assemble`` and llvm-mc turn back into the same
bytes, with ``L_<offset>:`` labels at branch targets.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from tg_amd.arch import Arch, AsmError, get_arch
from tg_amd.decoder import decode
from tg_amd.encoder import encode
from tg_amd.inst import Inst
from tg_amd.operands import Dec, Label
from tg_amd.syntax import format_inst, parse_inst

LABEL_RE = re.compile(r"^\s*([A-Za-z_.$][\w.$]*):(?!:)\s*(.*)$")
BRANCH_PREFIXES = ("s_branch", "s_cbranch_")


def _strip_comment(line: str) -> str:
    for marker in ("//", ";"):
        line = line.split(marker, 1)[0]
    return line.strip()


def parse_program(text: str) -> list[tuple[int, Inst | Label]]:
    """(line number, item) for every instruction and label definition in ``text``."""
    items: list[tuple[int, Inst | Label]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        while line:
            m = LABEL_RE.match(line)
            if not m:
                break
            items.append((n, Label(m.group(1))))
            line = m.group(2).strip()
        if not line:
            continue
        if line.startswith("."):
            if line.split()[0] in (".text", ".p2align"):
                continue
            raise AsmError(f"directive {line.split()[0]} is not supported", None, None, None, n)
        try:
            items.append((n, parse_inst(line)))
        except AsmError as e:
            raise AsmError(str(e), None, None, None, n) from None
    return items


def assemble(program: str | Sequence[Inst | Label], arch: str | Arch) -> bytes:
    """Machine code of a program (see module docstring)."""
    arch = get_arch(arch)
    if isinstance(program, str):
        items = parse_program(program)
    else:
        items = [(i + 1, item) for i, item in enumerate(program)]
    names = [item.name for _, item in items if isinstance(item, Label)]
    if len(set(names)) != len(names):
        dup = next(x for x in names if names.count(x) > 1)
        raise AsmError(f"label {dup} defined twice", None, None, arch.name)
    # pass 1: sizes (branch offsets do not change an instruction's size)
    labels: dict[str, int] = {}
    pc = 0
    sizes = []
    for line, item in items:
        if isinstance(item, Label):
            labels[item.name] = pc
            continue
        size = len(_encode_at(item, arch, pc, {name: pc + 4 for name in names}, line, program))
        sizes.append(size)
        pc += size
    # pass 2: bytes
    out = bytearray()
    for line, item in items:
        if isinstance(item, Inst):
            out += _encode_at(item, arch, len(out), labels, line, program)
    return bytes(out)


def _encode_at(inst: Inst, arch: Arch, pc: int, labels: dict[str, int], line: int, program: object) -> bytes:
    try:
        return encode(inst, arch, pc, labels)
    except AsmError as e:
        if isinstance(program, str):
            raise AsmError(str(e), None, None, None, line) from None
        raise


def decode_all(data: bytes, arch: str | Arch) -> list[tuple[int, Inst]]:
    """(byte offset, instruction) for every instruction in ``data``."""
    arch = get_arch(arch)
    out = []
    pos = 0
    while pos < len(data):
        inst, size = decode(data, arch, pos)
        out.append((pos, inst))
        pos += size
    return out


def disassemble(data: bytes, arch: str | Arch) -> str:
    """LLVM-syntax text of machine code (see module docstring)."""
    insts = decode_all(data, arch)
    starts = {pos for pos, _ in insts} | {len(data)}
    targets: dict[int, str] = {}
    for pos, inst in insts:
        if inst.name.startswith(BRANCH_PREFIXES) and len(inst.operands) == 1 and isinstance(inst.operands[0], Dec):
            offset = inst.operands[0] & 0xFFFF
            target = pos + 4 + 4 * (offset - (offset >> 15 << 16))  # signed dwords
            if target in starts:
                targets[target] = f"L_{target:x}"
                inst.operands = (Label(targets[target]),)
    lines = []
    for pos, inst in insts:
        if pos in targets:
            lines.append(f"{targets[pos]}:")
        lines.append("  " + format_inst(inst))
    if len(data) in targets:
        lines.append(f"{targets[len(data)]}:")
    return "\n".join(lines) + "\n"

"""A small assembler: a list of instructions and labels -> machine code.

In: ``Inst``s and ``Label``s in program order (a label marks the position of the next
instruction). Out: ``Assembly`` with the code bytes and each label's offset.

Jumps to labels start short (rel8) and are widened to rel32 when their target is out of
reach; offsets are recomputed until nothing changes. Jumps only ever grow, so this
reaches a fixed point (at most once per jump).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tg_x86.encoder import EncodeError, encode, select_form
from tg_x86.forms import Form
from tg_x86.isa import Inst
from tg_x86.operands import Label


@dataclass(frozen=True)
class Assembly:
    code: bytes
    labels: dict[Label, int]      # label -> byte offset
    offsets: tuple[int, ...]      # byte offset of each instruction, in order


def assemble(program: Iterable[Inst | Label]) -> Assembly:
    """Encode ``program``; jumps get the shortest displacement that reaches their label."""
    items = list(program)
    insts = [x for x in items if isinstance(x, Inst)]
    defined: set[Label] = set()
    for x in items:
        if isinstance(x, Label):
            if x in defined:
                raise EncodeError(f"label {x!r} is defined twice")
            defined.add(x)
    for inst in insts:
        if inst.label is not None and inst.label not in defined:
            raise EncodeError(f"{inst.mnemonic} jumps to label {inst.label!r}, which is not in the program")

    # sizes of everything but jumps are fixed; jumps start as rel8
    jumps: dict[int, Form] = {}             # instruction number of each jump to a label -> its form
    fixed: list[bytes] = []                 # the final bytes of everything that is not a jump to a label
    sizes: list[int] = []
    for i, inst in enumerate(insts):
        if inst.label is not None:
            jumps[i] = select_form(inst, rel_bits=8)
            fixed.append(b"")
            sizes.append(len(encode(inst, jumps[i])))
        else:
            code = encode(inst)
            fixed.append(code)
            sizes.append(len(code))

    while True:
        offsets, labels = _layout(items, sizes)
        widened = False
        for i, form in jumps.items():
            if form.encoding.rel != 1:
                continue
            inst = insts[i]
            disp = labels[inst.label] - (offsets[i] + sizes[i])  # type: ignore[index]
            if not -128 <= disp <= 127:
                jumps[i] = select_form(inst, rel_bits=32)
                sizes[i] = len(encode(inst, jumps[i]))
                widened = True
        if not widened:
            break

    for i, form in jumps.items():
        inst = insts[i]
        fixed[i] = encode(inst, form, labels[inst.label] - (offsets[i] + sizes[i]))  # type: ignore[index]
    return Assembly(b"".join(fixed), labels, tuple(offsets))


def _layout(items: list[Inst | Label], sizes: list[int]) -> tuple[list[int], dict[Label, int]]:
    offsets: list[int] = []
    labels: dict[Label, int] = {}
    pos = 0
    for x in items:
        if type(x) is Label:
            labels[x] = pos
        else:
            offsets.append(pos)
            pos += sizes[len(offsets) - 1]
    return offsets, labels

"""A small assembler: a list of instructions and labels -> machine code.

In: ``Inst``s and ``Label``s in program order (a label marks the position of the next
instruction). Out: ``Assembly`` with the code bytes and each label's offset.

Jumps to labels start short (rel8) and are widened to rel32 when their target is out of
reach; offsets are recomputed until nothing changes. Jumps only ever grow, so this
reaches a fixed point (at most once per jump).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from tg_x86.encoder import EncodeError, encode, encode_all, select_form
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
    insts: list[Inst] = []
    at: dict[Label, int] = {}  # label -> number of the instruction it marks (len(insts) at the end)
    for x in program:
        if type(x) is Inst:
            insts.append(x)
        elif isinstance(x, Label):
            if x in at:
                raise EncodeError(f"label {x!r} is defined twice")
            at[x] = len(insts)
        else:
            insts.append(x)
    # everything but jumps to labels is encoded once, here; jumps start as rel8
    codes = encode_all(insts)
    return link(codes, {i: insts[i] for i, code in enumerate(codes) if code is None}, at)


def link(codes: list[bytes | None], jumps: dict[int, Inst], at: dict[Label, int]) -> Assembly:
    """The ``Assembly`` of encoded instructions ``codes`` where ``codes[i]`` is None for a jump to a label
    (``jumps[i]``, not encoded yet); ``at`` maps each label to the number of the instruction it marks."""
    forms: dict[int, Form] = {}  # instruction number of each jump to a label -> its form
    for i, inst in jumps.items():
        if inst.label not in at:
            raise EncodeError(f"{inst.mnemonic} jumps to label {inst.label!r}, which is not in the program")
        forms[i] = select_form(inst, rel_bits=8)
        codes[i] = encode(inst, forms[i])  # a placeholder of the right size
    sizes = list(map(len, codes))  # type: ignore[arg-type]
    while True:
        offsets = list(itertools.accumulate(sizes, initial=0))  # offsets[len(codes)] is the end
        widened = False
        for i, form in forms.items():
            if form.encoding.rel != 1:
                continue
            inst = jumps[i]
            disp = offsets[at[inst.label]] - offsets[i + 1]  # type: ignore[index]
            if not -128 <= disp <= 127:
                forms[i] = select_form(inst, rel_bits=32)
                sizes[i] = len(encode(inst, forms[i]))
                widened = True
        if not widened:
            break
    for i, form in forms.items():
        inst = jumps[i]
        codes[i] = encode(inst, form, offsets[at[inst.label]] - offsets[i + 1])  # type: ignore[index]
    labels = {label: offsets[k] for label, k in at.items()}
    return Assembly(b"".join(codes), labels, tuple(offsets[:-1]))  # type: ignore[arg-type]

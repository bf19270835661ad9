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

from tg_x86.encoder import EncodeError, FormEncoder, encode_all, select_by_shape
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
    offsets = resolve_jumps(codes, jumps, at)
    labels = {label: offsets[k] for label, k in at.items()}
    return Assembly(b"".join(codes), labels, tuple(offsets[:-1]))  # type: ignore[arg-type]


def resolve_jumps(codes: list[bytes | None], jumps: dict[int, Inst], at: dict[Label, int]) -> list[int]:
    """Encode the jumps of ``link`` into ``codes``, each with the shortest displacement that reaches its label;
    the offset of each instruction (and of the end)."""
    target: dict[int, int] = {}  # jump -> the number of the instruction its label marks
    encoder: dict[int, FormEncoder] = {}  # jump -> the encoder of its form (rel8 until it must be rel32)
    for i, inst in jumps.items():
        k = at.get(inst.label)  # type: ignore[arg-type]
        if k is None:
            raise EncodeError(f"{inst.mnemonic} jumps to label {inst.label!r}, which is not in the program")
        target[i] = k
        fn = encoder[i] = select_by_shape(inst.op, inst.operands, inst.cond, 8)[1]
        codes[i] = fn(inst.operands, inst.cond, 0)  # a placeholder of the right size
    sizes = list(map(len, codes))  # type: ignore[arg-type]
    short = list(jumps)
    while True:
        offsets = list(itertools.accumulate(sizes, initial=0))  # offsets[len(codes)] is the end
        far = [i for i in short if not -128 <= offsets[target[i]] - offsets[i + 1] <= 127]
        if not far:
            break
        for i in far:
            inst = jumps[i]
            fn = encoder[i] = select_by_shape(inst.op, inst.operands, inst.cond, 32)[1]
            sizes[i] = len(fn(inst.operands, inst.cond, 0))
            short.remove(i)
    for i, inst in jumps.items():
        codes[i] = encoder[i](inst.operands, inst.cond, offsets[target[i]] - offsets[i + 1])
    return offsets

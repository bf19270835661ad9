"""machine's operand readers (the generated code that builds an instruction's operands from its layout in
``encode_plan``) against the item-by-item way (``machine._operands``) and the staged way (``machine._lower``)."""
from __future__ import annotations

from typing import Any

import pytest
from tg_x86 import machine
from tg_x86.encoder import encode_all
from tg_x86.isa import Cond, Op
from tg_x86.machine import GPR, VEC, Slot, VMem, minst
from tg_x86.operands import Label

from tgcore.codegen.regalloc import MInst, VReg

A, B, X = VReg(0, "gpr"), VReg(1, "gpr"), VReg(2, "vec")
REG_OF = {A: GPR["rbx"], B: GPR["r12"], X: VEC[9]}
SLOT_DISP = {("const", 0): 96, ("arg", 1): 200}

INSTRUCTIONS = [
    minst(Op.ADD, [A], [A, B], (("d", 0, 64), ("u", 1, 64)), two=True),
    minst(Op.MOV, [A], [], (("d", 0, 32), ("i", 7))),
    minst(Op.MOV, [A], [], (("d", 0, 32), ("i", 70000))),  # the same layout kind, another immediate
    minst(Op.VADDPS, [X], [X, VMem(256, A, B, 4, -8)], (("d", 0, 256), ("u", 0, 256), ("u", 1, None))),
    minst(Op.VMOVUPS, [X], [VMem(256, slot=Slot("const", 0))], (("d", 0, 256), ("u", 0, None))),
    minst(Op.MOV, [A], [VMem(64, slot=Slot("arg", 1), disp=8)], (("d", 0, 64), ("u", 0, None))),
    minst(Op.MOV, [], [VMem(32, GPR["rsp"], disp=16), B], (("u", 0, None), ("u", 1, 32))),
    minst(Op.SHL, [A], [A, GPR["rcx"]], (("d", 0, 32), ("u", 1, 8)), two=True),  # a physical register (cl)
    minst(Op.VPSRLD, [X], [X], (("d", 0, 128), ("u", 0, 128), ("i", 3))),
    minst(Op.CMOVCC, [A], [A, B], (("d", 0, 64), ("u", 1, 64)), two=True, cond=Cond.L),
]


def _tables() -> tuple[dict, object]:
    views = dict(machine._PHYSICAL_VIEWS)
    views.update((v, machine._VIEWS_BY_NAME[r.name]) for v, r in REG_OF.items())
    return views, machine._memory_reader(REG_OF, SLOT_DISP)


def _substituted(ins: MInst) -> MInst:
    """``ins`` on physical registers, as the plan's rewrite gives it."""
    def one(o: Any) -> Any:
        return o.with_regs(REG_OF) if type(o) is VMem else REG_OF.get(o, o)
    return MInst(ins.op, [one(o) for o in ins.defs], [one(o) for o in ins.uses], ins.arg)


@pytest.mark.parametrize("ins", INSTRUCTIONS, ids=lambda ins: f"{ins.op.name} {ins.arg.layout}")
def test_reader_gives_the_operands_of_the_item_by_item_and_staged_ways(ins: MInst) -> None:
    views, mem = _tables()
    read = machine._reader(ins.arg.layout)
    assert read is not None
    operands = read(ins.defs, ins.uses, views, mem)
    assert operands == machine._operands(ins, views, mem)
    staged: list = []
    machine._lower([_substituted(ins)], SLOT_DISP, staged)
    assert operands == staged[0].operands


def test_encode_body_gives_the_bytes_of_the_staged_way() -> None:
    views, mem = _tables()
    top = Label("top")
    program = [machine.label_inst(top), *INSTRUCTIONS,
               minst(Op.JCC, [], [], (("l", top),), cond=Cond.NE),
               MInst(Op.MOV, [A], [B], machine.Spec((("d", 0, 64), ("u", 0, 64))))]
    codes: list = []
    jumps: dict = {}
    at: dict = {}
    machine._encode_body(program, None, REG_OF, views, set(), mem, codes, jumps, at)
    staged: list = []
    machine._lower([_substituted(i) if type(i.arg) is machine.Spec else i for i in program], SLOT_DISP, staged)
    assert codes == encode_all([i for i in staged if i is not top])
    assert at == {top: 0} and list(jumps) == [len(INSTRUCTIONS)] and jumps[len(INSTRUCTIONS)].label is top


def test_an_operand_the_layout_does_not_expect_goes_the_item_by_item_way() -> None:
    """A memory operand where the layout names a register of some bits: the reader fails, the item-by-item way
    reads it (as the staged way does)."""
    views, mem = _tables()
    ins = minst(Op.VMOVUPS, [X], [VMem(256, A)], (("d", 0, 256), ("u", 0, 256)))
    codes: list = []
    machine._encode_body([ins], None, REG_OF, views, set(), mem, codes, {}, {})
    staged: list = []
    machine._lower([_substituted(ins)], SLOT_DISP, staged)
    assert codes == encode_all(staged)


def test_layouts_of_one_kind_share_their_code_and_the_caches_clear() -> None:
    machine.clear_encoding_caches()
    seven, big = (machine._reader((("d", 0, 32), ("i", v))) for v in (7, 70000))
    assert seven is not big and seven.__code__ is big.__code__  # type: ignore[union-attr]
    assert machine._reader((("l", Label()),)) is None  # a jump's layout: not cached
    assert len(machine._READER_CODE) == 1 and len(machine._READERS) == 2
    machine.clear_encoding_caches()
    assert not machine._READER_CODE and not machine._READERS

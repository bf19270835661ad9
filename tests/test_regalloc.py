"""The generic linear-scan allocator, on a toy register machine simulated in Python.

A program on virtual registers is run twice: directly (every virtual register its own
variable) and after allocation on 4 registers + 2 scratch registers with a stack. Results
must agree; random programs with loops and many live values check it broadly.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tgcore.codegen.regalloc import (
    AllocationError,
    AllocTarget,
    LoopEnd,
    LoopStart,
    MInst,
    Register,
    VReg,
    allocate,
    instruction_registers,
    plan_registers,
)

REGS = [Register(f"r{i}", i, "gpr") for i in range(6)]
TARGET = AllocTarget(
    registers={"gpr": REGS[:4]},
    scratch={"gpr": REGS[4:]},
    two_address=lambda ins: ins.op in ("add", "mul"),
    copy=lambda dst, src: MInst("mov", [dst], [src]),
    spill=lambda reg, slot: MInst("store", [], [reg], slot),
    fill=lambda reg, slot: MInst("load", [reg], [], slot),
    slot_size=lambda cls: 8,
)


def run(program: list, physical: bool) -> dict:
    """Execute; ``out`` instructions append their operand's value to the result list."""
    regs: dict = {}
    stack: dict[int, int] = {}
    outputs: list[int] = []
    starts = {ins.label: i for i, ins in enumerate(program) if isinstance(ins, LoopStart)}
    pc, steps = 0, 0
    while pc < len(program):
        steps += 1
        assert steps < 100_000
        ins = program[pc]
        pc += 1
        if isinstance(ins, (LoopStart, LoopEnd)):
            continue
        if physical:
            assert all(isinstance(r, Register) for r in (*ins.defs, *ins.uses))
        if ins.op == "li":
            regs[ins.defs[0]] = ins.arg
        elif ins.op in ("mov", "copy"):
            regs[ins.defs[0]] = regs[ins.uses[0]]
        elif ins.op == "add":
            if physical:
                assert ins.defs[0] == ins.uses[0], "two-address violated"
            regs[ins.defs[0]] = (regs[ins.uses[0]] + regs[ins.uses[1]]) & 0xFFFFFFFF
        elif ins.op == "mul":
            if physical:
                assert ins.defs[0] == ins.uses[0], "two-address violated"
            regs[ins.defs[0]] = (regs[ins.uses[0]] * regs[ins.uses[1]]) & 0xFFFFFFFF
        elif ins.op == "add3":  # three-address
            regs[ins.defs[0]] = (regs[ins.uses[0]] + regs[ins.uses[1]]) & 0xFFFFFFFF
        elif ins.op == "store":
            stack[ins.arg] = regs[ins.uses[0]]
        elif ins.op == "load":
            regs[ins.defs[0]] = stack[ins.arg]
        elif ins.op == "dec":
            regs[ins.defs[0]] = regs[ins.uses[0]] - 1
        elif ins.op == "jnz":  # branches write no register, so spill code never lands after a taken jump
            if regs[ins.uses[0]] != 0:
                pc = starts[ins.arg]
        elif ins.op == "out":
            outputs.append(regs[ins.uses[0]])
        else:
            raise AssertionError(ins.op)
    return {"out": outputs}


def both(program: list):
    allocated, frame = allocate(program, TARGET)
    return run(program, physical=False), run(allocated, physical=True), allocated, frame


def test_many_live_values_spill_and_compute_right():
    ids = itertools.count()
    vs = [VReg(next(ids), "gpr") for _ in range(12)]
    prog: list = [MInst("li", [v], [], i + 1) for i, v in enumerate(vs)]
    acc = VReg(next(ids), "gpr")
    prog.append(MInst("li", [acc], [], 0))
    for v in vs:
        nxt = VReg(next(ids), "gpr")
        prog.append(MInst("add", [nxt], [acc, v]))
        acc = nxt
    prog.append(MInst("out", [], [acc]))
    direct, allocated, code, frame = both(prog)
    assert direct == allocated == {"out": [78]}
    assert frame > 0 and any(i.op == "store" for i in code)


def test_value_live_into_a_loop_survives_its_back_edge():
    ids = itertools.count()
    v = lambda: VReg(next(ids), "gpr")  # noqa: E731
    base, acc, cnt = v(), v(), v()
    prog: list = [MInst("li", [base], [], 5), MInst("li", [acc], [], 0), MInst("li", [cnt], [], 4), LoopStart("L")]
    tmps = [v() for _ in range(5)]
    for t in tmps:  # pressure inside the loop
        prog.append(MInst("li", [t], [], 1))
    s = v()
    prog.append(MInst("add3", [s], [tmps[0], tmps[1]]))
    prog += [MInst("add", [acc], [acc, base]), MInst("add", [acc], [acc, s])]
    prog += [MInst("out", [], [t]) for t in tmps[2:]]
    prog += [MInst("dec", [cnt], [cnt]), MInst("jnz", [], [cnt], "L"), LoopEnd("L"), MInst("out", [], [acc])]
    direct, allocated, _, _ = both(prog)
    assert direct == allocated
    assert direct["out"][-1] == 4 * (5 + 2)


def test_values_the_inner_loop_reads_keep_their_registers():
    """More values live across an inner loop than registers: the ones only the outer loop reads are spilled, not
    the ones the inner loop reads every step (though those, live across the outer loop, end last): the inner loop
    has no fill or spill store."""
    ids = itertools.count()
    v = lambda: VReg(next(ids), "gpr")  # noqa: E731
    used, acc, outer = v(), v(), v()
    later = [v(), v()]  # made in the outer loop, read after the inner one
    cnt = v()
    prog: list = [MInst("li", [used], [], 5), MInst("li", [acc], [], 0), MInst("li", [outer], [], 2), LoopStart("O"),
                  *(MInst("li", [x], [], 10 + i) for i, x in enumerate(later)), MInst("li", [cnt], [], 3),
                  LoopStart("I"), MInst("add", [acc], [acc, used]), MInst("dec", [cnt], [cnt]),
                  MInst("jnz", [], [cnt], "I"), LoopEnd("I"),
                  *(MInst("add", [acc], [acc, x]) for x in later), MInst("dec", [outer], [outer]),
                  MInst("jnz", [], [outer], "O"), LoopEnd("O"), MInst("out", [], [acc])]
    direct, allocated, code, _ = both(prog)
    assert direct == allocated == {"out": [2 * (3 * 5 + 10 + 11)]}
    inner = code[next(i for i, ins in enumerate(code) if getattr(ins, "label", None) == "I"):]
    inner = inner[:next(i for i, ins in enumerate(inner) if isinstance(ins, LoopEnd))]
    assert any(ins.op in ("load", "store") for ins in code if isinstance(ins, MInst)), "nothing spilled: no test"
    assert not [ins for ins in inner if isinstance(ins, MInst) and ins.op in ("load", "store")]


def test_two_address_coalesces_when_the_source_dies():
    ids = itertools.count()
    a, b, c = (VReg(next(ids), "gpr") for _ in range(3))
    prog = [MInst("li", [a], [], 2), MInst("li", [b], [], 3), MInst("add", [c], [a, b]), MInst("out", [], [c])]
    direct, allocated, code, _ = both(prog)
    assert direct == allocated == {"out": [5]}
    assert not any(i.op == "mov" for i in code)  # a dies at the add: c takes its register, no copy
    prog2 = [*prog[:3], MInst("out", [], [a]), MInst("out", [], [c])]  # a lives on: a copy is needed
    direct, allocated, code, _ = both(prog2)
    assert direct == allocated and any(i.op == "mov" for i in code)



def test_two_address_named_by_an_attribute_of_arg():
    """``AllocTarget.two_address`` may name a boolean attribute of ``arg`` (absent: not two-address) instead of
    being a predicate: the same allocation."""
    class Flags:
        def __init__(self, two: bool) -> None:
            self.two = two

    ids = itertools.count()
    a, b, c, d = (VReg(next(ids), "gpr") for _ in range(4))
    prog = [MInst("li", [a], [], 2), MInst("li", [b], [], 3), MInst("add", [c], [a, b], Flags(True)),
            MInst("add", [d], [a, c], Flags(True)), MInst("out", [], [a]), MInst("out", [], [d])]
    by_name = AllocTarget(**{**TARGET.__dict__, "two_address": "two"})
    assert allocate(prog, by_name) == allocate(prog, TARGET)
    flagged_off = [*prog[:3], MInst("add", [d], [a, c], Flags(False)), *prog[4:]]
    code, _ = allocate(flagged_off, by_name)
    assert sum(i.op == "mov" for i in code) == 1  # only the first add got a copy (a lives on past it)

def test_pinned_registers():
    ids = itertools.count()
    a = VReg(next(ids), "gpr", allowed=(REGS[0],))
    b = VReg(next(ids), "gpr")
    prog = [MInst("li", [b], [], 7), MInst("li", [a], [], 1), MInst("add3", [b], [a, b]), MInst("out", [], [b])]
    _, _, code, _ = both(prog)
    assert any(i.op == "li" and i.defs[0] == REGS[0] and i.arg == 1 for i in code)
    c = VReg(next(ids), "gpr", allowed=(REGS[0],))
    clash = [MInst("li", [a], [], 1), MInst("li", [c], [], 2), MInst("add3", [a], [a, c])]
    with pytest.raises(AllocationError, match="pinned"):
        allocate(clash, TARGET)


def test_values_pinned_to_a_set_spill_each_other():
    """More values live at once than the registers they are pinned to (a set, with a scratch register in it): the
    allocator spills some of them and the program computes the same."""
    ids = itertools.count()
    low = (REGS[0], REGS[1], REGS[4])   # two allocatable registers and a scratch one
    vs = [VReg(next(ids), "gpr", allowed=low) for _ in range(4)]
    prog: list = [MInst("li", [v], [], i + 1) for i, v in enumerate(vs)]
    prog += [MInst("out", [], [v]) for v in vs]
    direct, allocated, code, frame = both(prog)
    assert direct == allocated == {"out": [1, 2, 3, 4]}
    assert frame > 0 and all(r in low for i in code for r in (*i.defs, *i.uses) if isinstance(r, Register))


class Mem:
    """A memory operand: its registers are read (``regs``), also when it is a destination."""
    def __init__(self, *regs):
        self.regs = regs


def test_instruction_registers():
    ids = itertools.count()
    a, b, c = (VReg(next(ids), "gpr") for _ in range(3))
    prog = [MInst("add3", [c], [a, a, Mem(b, a)]), LoopStart("L"), MInst("store", [Mem(c, REGS[5])], [b, None]),
            MInst("li", [REGS[4]], [], 1), LoopEnd("L")]
    assert instruction_registers(prog) == [
        ([a, b], [c]),            # read once each, in operand order; a memory operand's registers are read
        ([], []),                 # loop marker
        ([b, c, REGS[5]], []),    # a memory destination is read; None is no register
        ([], [REGS[4]]),          # physical registers count too
        ([], [])]


def test_known_registers_are_reused():
    ids = itertools.count()
    a, b = VReg(next(ids), "gpr"), VReg(next(ids), "gpr")
    prog = [MInst("li", [a], [], 1), MInst("li", [b], [], 2), MInst("add3", [b], [a, b]), MInst("out", [], [b])]
    known = dict(zip(map(id, prog), instruction_registers(prog), strict=True))
    other = [prog[0], MInst("li", [b], [], 3), *prog[2:]]
    regs = instruction_registers(other, known)
    assert regs == instruction_registers(other)
    assert regs[0] is known[id(prog[0])] and regs[3] is known[id(prog[3])]  # looked up, not looked at again


@settings(max_examples=100, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.deferred(lambda: programs()))
def test_plan_with_given_registers_is_the_same_plan(prog):
    """Registers handed in, half of them looked up from another program sharing those instructions (as the x86
    renderer's second plan does), give the plan the allocator makes by itself."""
    shared = prog[::2]
    known = dict(zip(map(id, shared), instruction_registers(shared), strict=True))
    given_regs = plan_registers(prog, TARGET, instruction_registers(prog, known))
    plan = plan_registers(prog, TARGET)
    assert given_regs.assignment() == plan.assignment() and given_regs.rewrite() == plan.rewrite()


def test_spill_code_counts_fills_and_stores():
    ids = itertools.count()
    vs = [VReg(next(ids), "gpr") for _ in range(6)]  # 6 values live at once on 4 registers: 2 spilled
    prog = [*(MInst("li", [v], [], i) for i, v in enumerate(vs)), *(MInst("out", [], [v]) for v in vs)]
    plan = plan_registers(prog, TARGET)
    allocated, _ = plan.rewrite()
    assert plan.spill_code("gpr") == sum(i.op in ("load", "store") for i in allocated) == 4
    assert plan.spill_code("vec") == 0


@settings(max_examples=100, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.deferred(lambda: programs()))
def test_spill_registers_is_what_rewrite_one_makes(prog):
    """``spill_registers`` (for renderers encoding spill code themselves) says what ``rewrite_one`` builds: its fills
    before, the instruction on the registers it gives, its stores after."""
    plan = plan_registers(prog, TARGET)
    reg_of = plan.assignment()
    for i, ins in enumerate(plan.program):
        if type(ins) is not MInst:
            continue
        on, fills, stores = plan.spill_registers(i, reg_of)
        made = [MInst("load", [r], [], slot) for r, slot in fills]
        if ins.op == "copy":  # a copy to its own register vanishes
            dst, src = on[ins.defs[0]], on[ins.uses[0]]
            made += [MInst("mov", [dst], [src])] if dst != src else []
        else:
            made.append(MInst(ins.op, [on.get(o, o) for o in ins.defs], [on.get(o, o) for o in ins.uses], ins.arg))
        made += [MInst("store", [], [r], slot) for r, slot in stores]
        assert plan.rewrite_one(i, reg_of) == made


@st.composite
def programs(draw):
    ids = itertools.count()
    live: list[VReg] = []
    prog: list = []
    for _ in range(draw(st.integers(1, 4))):
        v = VReg(next(ids), "gpr")
        prog.append(MInst("li", [v], [], draw(st.integers(0, 50))))
        live.append(v)
    loops = 0
    for _ in range(draw(st.integers(5, 40))):
        kind = draw(st.sampled_from(["li", "add", "mul", "add3", "out", "loop"]))
        if kind == "li":
            v = VReg(next(ids), "gpr")
            prog.append(MInst("li", [v], [], draw(st.integers(0, 9))))
            live.append(v)
        elif kind in ("add", "mul", "add3"):
            a, b = draw(st.sampled_from(live)), draw(st.sampled_from(live))
            v = VReg(next(ids), "gpr")
            prog.append(MInst(kind, [v], [a, b]))
            live.append(v)
        elif kind == "out":
            prog.append(MInst("out", [], [draw(st.sampled_from(live))]))
        elif loops < 2:  # a loop body that reads outer values and accumulates into one
            loops += 1
            label = f"L{loops}"
            acc, cnt = draw(st.sampled_from(live)), VReg(next(ids), "gpr")
            prog += [MInst("li", [cnt], [], draw(st.integers(1, 3))), LoopStart(label)]
            inner = [VReg(next(ids), "gpr") for _ in range(draw(st.integers(0, 6)))]
            prog += [MInst("li", [t], [], i) for i, t in enumerate(inner)]
            for t in inner:
                prog.append(MInst("add", [acc], [acc, t]))
            prog.append(MInst("add", [acc], [acc, draw(st.sampled_from(live))]))
            prog += [MInst("dec", [cnt], [cnt]), MInst("jnz", [], [cnt], label), LoopEnd(label)]
    for v in live[-3:]:
        prog.append(MInst("out", [], [v]))
    return prog


@settings(max_examples=300, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_agree(prog):
    direct, allocated, _, _ = both(prog)
    assert direct == allocated

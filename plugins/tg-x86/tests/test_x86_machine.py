"""plan_code.encode_plan: machine code straight from the register plan, against the staged way (the plan's
rewritten program through finish and the assembler, which the fuzz tests check against capstone) and capstone."""
from __future__ import annotations

import numpy as np
import pytest
from tg_x86 import assembler, machine, plan_code
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Inst
from tg_x86.renderer import X86Renderer
from tg_x86_testutil import decoder

from tgcore.codegen import get_program
from tgcore.dtype import dtypes
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"
rng = np.random.default_rng(0)


def f32(*shape: int) -> Tensor:
    return Tensor(rng.standard_normal(shape).astype(np.float32), device=X86)


def many_buffers() -> Tensor:  # 21 pointers: more than the allocatable gprs (spill code, arguments on the stack)
    out = f32(33)
    for _ in range(20):
        out = out * 0.5 + f32(33)
    return out


CASES = {
    "elementwise": lambda: (f32(1000) * 2 + f32(1000)).sqrt(),
    "sum rows": lambda: f32(7, 7).sum(1),
    "softmax": lambda: (f32(16, 100) - f32(16, 100).max(-1, keepdim=True)).exp(),
    "matmul": lambda: f32(64, 48) @ f32(48, 32),
    "where and compare": lambda: (f32(77) < f32(77)).where(f32(77), 3.0),
    "int division": lambda: Tensor(rng.integers(-99, 99, 50).astype(np.int32), device=X86) // 7,
    "gather": lambda: f32(40, 8)[Tensor(rng.integers(0, 40, 9).astype(np.int32), device=X86)],
    "half": lambda: f32(64).cast(dtypes.float16) * 3,
    "many buffers": many_buffers,
}


@pytest.mark.parametrize("case", list(CASES))
def test_encode_plan_gives_the_bytes_of_the_staged_way(case: str) -> None:
    x = X86Renderer()
    items, _ = create_schedule([CASES[case]().uop], X86)
    for si in items:
        if si.kind == "copy":
            continue
        uops = list(get_program(si.ast, x, 2).uops)
        ctx = x.select(uops)
        plan = x.choose_plan(ctx)
        program, stack_bytes = plan.rewrite()
        insts = machine.finish(program, ctx.frame, (program, stack_bytes))
        staged = assembler.assemble(insts).code
        code = plan_code.encode_plan(plan, ctx.frame)
        assert code == staged
        # capstone decodes the whole of it as the same number of instructions
        assert len(list(decoder().disasm(code, 0))) == sum(1 for i in insts if isinstance(i, Inst))


def test_cleanup_removes_dead_chains_keeps_stores_and_takes_the_registers_found() -> None:
    from tg_x86.isa import Op
    from tg_x86.machine import VMem, cleanup, minst

    from tgcore.codegen.regalloc import VReg, instruction_registers
    a, b, c, d, p = (VReg(i, "gpr") for i in range(5))
    prog = [
        minst(Op.MOV, [p], [VMem(64, index=None, disp=0)], (("d", 0, 64), ("u", 0, None))),
        minst(Op.MOV, [a], [p], (("d", 0, 64), ("u", 0, 64))),
        minst(Op.ADD, [b], [a, a], (("d", 0, 64), ("u", 1, 64)), two=True),   # only c reads b
        minst(Op.ADD, [c], [b, b], (("d", 0, 64), ("u", 1, 64)), two=True),   # nobody reads c: b, then a go too
        minst(Op.MOV, [d], [p], (("d", 0, 64), ("u", 0, 64))),
        minst(Op.MOV, [], [VMem(64, base=p), d], (("u", 0, None), ("u", 1, 64))),  # a store: never dead
    ]
    kept, regs = cleanup(prog)
    assert kept == [prog[0], prog[4], prog[5]]
    assert regs == instruction_registers(kept)
    # the registers handed in are used as they are (the second plan of choose_plan hands in those it knows)
    found = instruction_registers(prog)
    kept2, regs2 = cleanup(prog, found)
    assert kept2 == kept and regs2[0] is found[0] and regs2[2] is found[5]

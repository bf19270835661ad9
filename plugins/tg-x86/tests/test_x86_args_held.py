"""Selector.args_held: the program holding pointers in registers, derived from the selection that reads them from
their argument slots where used (what the renderer selects), must be the program selecting without reloads makes,
up to the numbering of virtual registers (choose_plan allocates either)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tg_x86.isel import Selector, select_both
from tg_x86.machine import VMem
from tg_x86.renderer import X86Renderer

from tgcore.codegen import get_program
from tgcore.codegen.regalloc import MInst, VReg
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

rng = np.random.default_rng(0)


def f32(*shape: int) -> Tensor:
    return Tensor(rng.standard_normal(shape).astype(np.float32), device="CPU:X86")


def canonical(program: list[Any]) -> list[Any]:
    """The program with each virtual register named by its first appearance."""
    names: dict[VReg, int] = {}

    def name(o: Any) -> Any:
        if type(o) is VReg:
            return ("vreg", o.cls, names.setdefault(o, len(names)))
        if type(o) is VMem:
            return ("mem", o.bits, name(o.base), name(o.index), o.scale, o.disp, o.slot)
        return o
    return [(ins.op, [name(o) for o in ins.defs], [name(o) for o in ins.uses], repr(ins.arg))
            if type(ins) is MInst else repr(ins) for ins in program]


KERNELS: dict[str, Callable[[], Tensor]] = {
    "elementwise, four buffers": lambda: f32(64) * f32(64) + f32(64) - f32(64),
    "row sums (two loops)": lambda: f32(16, 24).sum(axis=1),
    "padded (gated loads)": lambda: f32(30).pad(((3, 5),)) * 2,
    "matmul": lambda: f32(8, 12) @ f32(12, 16),
    "where of a compare": lambda: (f32(40) < f32(40)).where(f32(40), 1.0),
}


@pytest.mark.parametrize("make", list(KERNELS.values()), ids=list(KERNELS))
def test_args_held_is_the_program_selected_holding_the_arguments(make):
    items, _ = create_schedule([make().uop], "CPU:X86")
    for si in items:
        if si.kind == "copy":
            continue
        uops = list(get_program(si.ast, X86Renderer(), 1).uops)
        held, reloading, _ = select_both(uops)
        direct, _ = Selector(uops).select()
        assert canonical(held) == canonical(direct)
        assert len(reloading) != len(direct) or canonical(reloading) != canonical(direct)  # the reloads differ

"""The analysis before selection (``facts.analyze``): a frozen ``KernelFacts`` that selection reads and never
changes, and the fusions it decides, checked on kernels whose lines are known."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tg_x86.facts import KernelFacts, analyze
from tg_x86.isel import Selector
from tg_x86.renderer import X86Renderer

from tgcore.codegen import get_program
from tgcore.dtype import dtypes
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.uop import Ops, UOp

rng = np.random.default_rng(0)


def f32(*shape: int) -> Tensor:
    return Tensor(rng.standard_normal(shape).astype(np.float32), device="CPU:X86")


def kernel_lines(out: Tensor) -> list[UOp]:
    """The linear program of the one kernel computing ``out``."""
    items = [si for si in create_schedule([out.uop], "CPU:X86")[0] if si.kind != "copy"]
    assert len(items) == 1
    return list(get_program(items[0].ast, X86Renderer(), 1).uops)


def snapshot(facts: KernelFacts) -> dict:
    """Every field but the memoized predicates, as plain values (sets and dicts copied)."""
    out = {}
    for f in dataclasses.fields(facts):
        v = getattr(facts, f.name)
        if not callable(v):
            out[f.name] = {k: list(x) if isinstance(x, list) else x for k, x in v.items()} if isinstance(v, dict) \
                else (list(v) if isinstance(v, list) else v)
    return out


KERNELS = {
    "a*b + c (float32 scalars)": lambda: f32(3) * f32(3) + f32(3),
    "a*b + c (vectors)": lambda: f32(64) * f32(64) + f32(64),
    "matmul": lambda: f32(8, 12) @ f32(12, 16),
    "padded (gated loads)": lambda: f32(30).pad(((3, 5),)) * 2,
    "where of a compare": lambda: (f32(40) < f32(40)).where(f32(40), 1.0),
    "row max (horizontal reduction)": lambda: f32(4, 64).max(axis=1),
}


@pytest.mark.parametrize("make", list(KERNELS.values()), ids=list(KERNELS))
def test_selection_leaves_the_facts_as_analysis_found_them(make):
    uops = kernel_lines(make())
    sel = Selector(uops)
    before = snapshot(sel.facts)
    sel.select()
    assert snapshot(sel.facts) == before == snapshot(analyze(uops, Selector(uops).users))
    with pytest.raises(dataclasses.FrozenInstanceError):
        sel.facts.pressure = 0  # type: ignore[misc]


def test_fma_pairs():
    """Each float ADD of a MUL only it reads is one FMA: the MUL emits nothing, and the program has one vfmadd per
    pair and no separate multiply."""
    uops = kernel_lines(f32(3) * f32(3) + f32(3))
    facts = Selector(uops).facts
    adds = [u for u in uops if u.op is Ops.ADD and u.dtype.scalar() is dtypes.float32]
    assert adds and set(facts.fma_adds) == set(adds)
    assert facts.fma_muls == {mul for _, mul in facts.fma_adds.values()}
    program, _ = Selector(uops).select()
    names = [ins.op.name for ins in program if hasattr(ins, "op") and not isinstance(ins.op, str)]
    assert sum(n.startswith("VFMADD") for n in names) == len(adds) and not any(n.startswith("VMUL") for n in names)


def test_compare_read_only_as_flags_makes_no_bool():
    """A compare whose only user is a WHERE choosing on it is a flag compare: no setcc makes a bool."""
    a = Tensor(rng.integers(-5, 5, 40).astype(np.int32), device="CPU:X86")
    uops = kernel_lines((a < 2).where(a, -1))
    sel = Selector(uops)
    compares = [u for u in uops if u.op is Ops.CMPLT]
    assert compares and set(compares) <= sel.facts.flag_compares
    program, _ = sel.select()
    assert not any(getattr(ins, "op", None) is not None and getattr(ins.op, "name", "") == "SETCC" for ins in program)

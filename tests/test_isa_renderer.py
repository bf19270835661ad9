"""The generic ISA pipeline (``tgcore.renderer.isa``): ``line_rewrite``, and a toy backend written only
as ISARenderer stages (isel rules, an AllocTarget, the regalloc hooks, encode) that compiles real kernels.

The toy machine has 7 registers holding Python numbers (4 allocatable, 3 scratch for spill code, r3
callee-saved), a stack of spill slots, and 8-byte instructions run by ``run`` below: kernels with more
live values than registers spill, and their results are checked against numpy.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest

from tgcore.codegen import get_program
from tgcore.dtype import dtypes
from tgcore.renderer import (
    AllocTarget,
    ISARenderer,
    ISelContext,
    LineRewriteError,
    LoopEnd,
    LoopStart,
    MInst,
    Register,
    RegisterPlan,
    callee_saved_used,
    isa_spec,
    line_rewrite,
)
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor
from tgcore.uop import GroupOp, Ops, PatternMatcher, SpecError, UOp, UPat

# ------------------------------------------------------------------------------------------ line_rewrite


def test_line_rewrite_keeps_replaces_and_drops_lines():
    a, b = UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)
    s = a + b
    seen = []
    pm = PatternMatcher([
        # an ADD becomes two lines; the context sees every rule that fires
        (UPat(Ops.ADD, name="x"), lambda ctx, x: seen.append(x) or ["add-lo", "add-hi"]),
        # a rule returning None falls through to the next one; the constant 2 goes
        (UPat(Ops.CONST, name="x"), lambda x: None),
        (UPat(Ops.CONST, arg=2), lambda: ()),
    ])
    assert line_rewrite([a, b, s], pm, ctx=None) == [a, "add-lo", "add-hi"]
    assert seen == [s]
    out = ["already"]
    assert line_rewrite([a], pm, out=out) is out and out == ["already", a]
    with pytest.raises(LineRewriteError, match="CONST"):
        line_rewrite([a], pm, strict=True)


def test_line_rewrite_agrees_with_the_interpreted_matcher():
    x = UOp.variable("x", 0, 10)
    lines = [x, x + 1, x * 3, (x + 1) * 3]
    pm = PatternMatcher([(UPat(Ops.MUL, src=(UPat(Ops.ADD, name="a"), UPat.cvar("c"))), lambda a, c: [("fma", c.arg)]),
                         (UPat(GroupOp.ALU, name="x"), lambda x: [x.op.name])])
    assert line_rewrite(lines, pm) == line_rewrite(lines, pm.interpreted()) == [x, "ADD", "MUL", ("fma", 3)]


def test_isel_context_lists_users_per_source_slot():
    x = UOp.const(dtypes.float32, 2.0)
    y = UOp(Ops.MUL, dtypes.float32, (x, x))
    z = UOp(Ops.ADD, dtypes.float32, (y, x))
    ctx = ISelContext([x, y, z], PatternMatcher([]))
    assert ctx.users[x] == [y, y, z] and ctx.users[y] == [z]   # once per source slot, in line order
    assert ctx.users.get(z) is None and ctx.users[z] == []      # nothing reads the last line
    assert list(ctx.selected_lines()) == [x, y, z]               # every line, unless a backend leaves some out


# ------------------------------------------------------------------------------------------ the toy backend

REGS = [Register(f"r{i}", i, "r") for i in range(7)]
TWO_ADDRESS = frozenset({"fadd", "fmul", "iadd", "imul"})
OPCODES = ["arg", "lif", "lii", "ld", "st", "mov", "spill", "fill", "fadd", "fsub", "fmul", "fmax", "fneg",
           "iadd", "imul", "inc", "blt", "label", "ret"]
FLOAT_ALU = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.MAX: "fmax"}
INT_ALU = {Ops.ADD: "iadd", Ops.MUL: "imul"}


def ins(op: str, defs: list, uses: list, arg: object = None) -> MInst:
    return MInst(op, defs, uses, arg)


def value(ctx: ISelContext, x: UOp, op: str, uses: list, arg: object = None) -> list:
    d = ctx.val[x] = ctx.new("r")
    return [ins(op, [d], uses, arg)]


def alias(ctx: ISelContext, x: UOp, v: object) -> tuple:
    """``x`` is the value ``v`` (no instruction)."""
    ctx.val[x] = v
    return ()


def open_loop(ctx: ISelContext, x: UOp) -> list:
    i = ctx.val[x] = ctx.new("r")
    return [ins("lii", [i], [], 0), LoopStart(x), ins("label", [], [], x)]


def close_loops(ctx: ISelContext, x: UOp) -> list:
    out: list = []
    for r in reversed(x.src[1:]):  # innermost first
        i = ctx.val[r]
        out += [ins("inc", [i], [i]), ins("blt", [], [i, ctx.val[r.src[0]]], r), LoopEnd(r)]
    return out


ACC = UPat((Ops.DEFINE_REG, Ops.AFTER), name="acc")
BUF = UPat(Ops.PARAM, name="buf")

TOY_ISEL = PatternMatcher([
    (UPat(Ops.PARAM, name="x"), lambda ctx, x: value(ctx, x, "arg", [], x.arg)),
    (UPat(Ops.CONST, dtypes.float32, name="x"), lambda ctx, x: value(ctx, x, "lif", [], x.arg)),
    (UPat(Ops.CONST, dtypes.int32, name="x"), lambda ctx, x: value(ctx, x, "lii", [], x.arg)),
    # accumulators are registers: DEFINE_REG makes one, AFTER names it, stores and loads copy it
    (UPat(Ops.DEFINE_REG, name="x"), lambda ctx, x: alias(ctx, x, ctx.new("r"))),
    (UPat(Ops.AFTER, name="x"), lambda ctx, x: alias(ctx, x, ctx.val[x.src[0]])),
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, src=(ACC, UPat())), UPat.var("v"))),
     lambda ctx, acc, v: [ins("copy", [ctx.val[acc]], [ctx.val[v]])]),
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, src=(ACC, UPat())),), name="x"),
     lambda ctx, x, acc: value(ctx, x, "copy", [ctx.val[acc]])),
    # memory: a buffer register and an index register; INDEX itself emits nothing
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX, src=(BUF, UPat.var("i"))),), name="x"),
     lambda ctx, x, buf, i: value(ctx, x, "ld", [ctx.val[buf], ctx.val[i]])),
    (UPat(Ops.STORE, src=(UPat(Ops.INDEX, src=(BUF, UPat.var("i"))), UPat.var("v"))),
     lambda ctx, buf, i, v: [ins("st", [], [ctx.val[buf], ctx.val[i], ctx.val[v]])]),
    (UPat((Ops.INDEX, Ops.SINK, Ops.GROUP, Ops.NOOP)), lambda: ()),
    (UPat(Ops.RANGE, name="x"), open_loop),
    (UPat(Ops.END, name="x"), close_loops),
    # arithmetic by dtype
    (UPat(Ops.NEG, dtypes.float32, src=(UPat.var("a"),), name="x"),
     lambda ctx, x, a: value(ctx, x, "fneg", [ctx.val[a]])),
    (UPat(tuple(FLOAT_ALU), dtypes.float32, src=(UPat.var("a"), UPat.var("b")), name="x"),
     lambda ctx, x, a, b: value(ctx, x, FLOAT_ALU[x.op], [ctx.val[a], ctx.val[b]])),
    (UPat(tuple(INT_ALU), dtypes.int32, src=(UPat.var("a"), UPat.var("b")), name="x"),
     lambda ctx, x, a, b: value(ctx, x, INT_ALU[x.op], [ctx.val[a], ctx.val[b]])),
])

TOY_TARGET = AllocTarget(
    registers={"r": REGS[:4]},
    scratch={"r": REGS[4:]},
    two_address=lambda m: m.op in TWO_ADDRESS,
    copy=lambda dst, src: ins("mov", [dst], [src]),
    spill=lambda reg, off: ins("spill", [], [reg], off),
    fill=lambda reg, off: ins("fill", [reg], [], off),
    slot_size=lambda cls: 1,
)


class ToyRenderer(ISARenderer[ISelContext]):
    """Everything a backend writes: data and the stage hooks, nothing else."""
    device, name = "TOY", "TOY"
    isel = TOY_ISEL
    target = TOY_TARGET
    callee_saved = (REGS[3],)
    spec = PatternMatcher([(UPat(Ops.FDIV), lambda: False)]) + isa_spec  # the toy cannot divide

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pre_regalloc(self, program: list, ctx: ISelContext) -> list:
        self.calls.append("pre_regalloc")
        return program

    def late_regalloc(self, program: list, ctx: ISelContext) -> list:
        self.calls.append("late_regalloc")
        return [m for m in program if not isinstance(m, (LoopStart, LoopEnd))]

    def post_regalloc(self, program: list, stack_bytes: int, ctx: ISelContext) -> list:
        """The frame: callee-saved registers saved above the spill slots; labels become positions."""
        self.calls.append("post_regalloc")
        saved = callee_saved_used(program, self.callee_saved)
        body = [ins("spill", [], [r], stack_bytes + k) for k, r in enumerate(saved)] + program
        body += [ins("fill", [r], [], stack_bytes + k) for k, r in enumerate(saved)] + [ins("ret", [], [])]
        out, labels = [], {}
        for m in body:
            if m.op == "label":
                labels[m.arg] = len(out)
            else:
                out.append(m)
        return [(m.op, [r.index for r in m.defs], [r.index for r in m.uses],
                 labels[m.arg] if m.op == "blt" else m.arg) for m in out]

    def asm(self, program: list) -> str:
        return "\n".join(f"{op} {','.join(f'r{r}' for r in (*d, *u))} {arg if arg is not None else ''}".rstrip()
                         for op, d, u, arg in program)

    def encode(self, program: list) -> bytes:
        code = b""
        for op, defs, uses, arg in program:
            regs = (defs + uses + [0, 0, 0])[:3]
            imm = struct.pack("<f", arg) if op == "lif" else struct.pack("<i", int(arg or 0))
            code += struct.pack("<BBBB", OPCODES.index(op), *regs) + imm
        return code


def run(code: bytes, bufs: list[np.ndarray]) -> None:
    """Execute toy machine code on numpy buffers (argument k is buffer k)."""
    regs: list = [None] * 7
    regs[3] = "caller's r3"
    stack: dict[int, object] = {}
    prog = [struct.unpack("<BBBB4s", code[i:i + 8]) for i in range(0, len(code), 8)]
    pc = 0
    while True:
        opc, a, b, c, raw = prog[pc]
        op, imm = OPCODES[opc], struct.unpack("<i", raw)[0]
        pc += 1
        if op == "ret":
            assert regs[3] == "caller's r3", "a callee-saved register was not restored"
            return
        if op == "arg":
            regs[a] = imm
        elif op == "lif":
            regs[a] = np.float32(struct.unpack("<f", raw)[0])
        elif op == "lii":
            regs[a] = imm
        elif op == "ld":
            regs[a] = bufs[regs[b]][regs[c]]
        elif op == "st":
            bufs[regs[a]][regs[b]] = regs[c]
        elif op == "mov":
            regs[a] = regs[b]
        elif op == "spill":
            stack[imm] = regs[a]
        elif op == "fill":
            regs[a] = stack[imm]
        elif op in TWO_ADDRESS:
            assert a == b, f"two-address {op} got different registers"
            regs[a] = regs[b] + regs[c] if op in ("fadd", "iadd") else regs[b] * regs[c]
        elif op == "fsub":
            regs[a] = regs[b] - regs[c]
        elif op == "fmax":
            regs[a] = max(regs[b], regs[c])
        elif op == "fneg":
            regs[a] = -regs[b]
        elif op == "inc":
            regs[a] = regs[b] + 1
        elif op == "blt":
            if regs[a] < regs[b]:
                pc = imm
        else:
            raise AssertionError(op)


def toy_kernels(t: Tensor, renderer: ToyRenderer) -> list[tuple[bytes, list[np.ndarray]]]:
    """(code, buffers by argument) of every kernel computing ``t``; outputs start as zeros."""
    items, _ = create_schedule([t.uop], t.device)
    out = []
    for si in items:
        if si.kind == "copy":
            continue
        spec = get_program(si.ast, renderer, 1)
        bufs = [si.bufs[slot] for slot in spec.buf_slots]
        out.append((spec.src, [b.numpy().copy() if b.is_allocated() else np.zeros(b.size, np.float32) for b in bufs]))
    return out


@pytest.fixture
def inputs():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)
    return a, b, Tensor(a).realize(), Tensor(b).realize()


@pytest.mark.parametrize("name", ["elementwise", "sum", "max"])
def test_toy_backend_compiles_kernels_through_the_stages(name, inputs):
    a, b, ta, tb = inputs
    make = {"elementwise": (lambda x, y: (x + y) * 2.5 - x), "sum": (lambda x, y: (x * y).sum(1)),
            "max": (lambda x, y: x.max(1))}[name]
    renderer = ToyRenderer()
    [(code, bufs)] = toy_kernels(make(ta, tb), renderer)
    assert renderer.calls[-3:] == ["pre_regalloc", "late_regalloc", "post_regalloc"]
    run(code, bufs)
    np.testing.assert_allclose(bufs[0].reshape(make(a, b).shape), make(a, b), rtol=1e-6)


def test_toy_backend_spills_and_saves_callee_saved_registers(inputs):
    _, _, ta, tb = inputs
    renderer = ToyRenderer()
    spec = get_program(create_schedule([((ta + tb) * 2.5 - ta).uop], ta.device)[0][0].ast, renderer, 1)
    listing = renderer.asm(renderer.lower(spec.name, list(spec.uops)))
    # 3 pointers, 2 loop counters and limits, a constant: more than 4 registers
    assert "fill" in listing and "spill" in listing
    assert listing.startswith("spill r3")  # r3 is used, so the prologue saves it (run() checks the restore)


def test_spec_and_isel_name_the_line_the_backend_cannot_take(inputs, monkeypatch):
    _, _, ta, tb = inputs
    ast = create_schedule([(ta / tb).uop], ta.device)[0][0].ast
    monkeypatch.setenv("TG_SPEC", "1")  # render checks its input against the renderer's spec
    with pytest.raises(SpecError, match="FDIV"):
        get_program(ast, ToyRenderer(), 1)
    monkeypatch.setenv("TG_SPEC", "0")  # without the check, isel finds no rule
    with pytest.raises(LineRewriteError, match="FDIV"):
        get_program(ast, ToyRenderer(), 1)


def test_legalize_is_the_pre_isel_matcher():
    class Legalized(ToyRenderer):
        pre_isel = PatternMatcher([(UPat(Ops.SUB, name="x"), lambda x: x.src[0] + (-x.src[1]))])
    assert ToyRenderer().legalize is None and Legalized().legalize is Legalized.pre_isel


def test_a_backend_may_encode_straight_from_the_plan(inputs):
    """``emit`` is what ``render`` runs after choosing the plan: a backend overriding it with the plan's assignment
    and ``rewrite_one`` (spill code included: the toy has 4 registers) gives the bytes of the staged way."""
    a, _, ta, tb = inputs

    class Direct(ToyRenderer):
        def emit(self, plan: RegisterPlan, ctx: ISelContext) -> bytes:
            self.calls.append("emit")
            reg_of = plan.assignment()
            program = [x for i, m in enumerate(plan.program)
                       for x in (plan.rewrite_one(i, reg_of) if isinstance(m, MInst) else [m])]
            return self.encode(self.post_regalloc(self.late_regalloc(program, ctx), plan.frame, ctx))

    t = (ta + tb) * 2.5 - ta
    renderer = Direct()
    [(code, bufs)] = toy_kernels(t, renderer)
    assert renderer.calls[-3:] == ["emit", "late_regalloc", "post_regalloc"]
    spec = get_program(create_schedule([t.uop], ta.device)[0][0].ast, ToyRenderer(), 1)
    staged = ToyRenderer()
    assert code == staged.encode(staged.lower(spec.name, list(spec.uops)))
    run(code, bufs)
    np.testing.assert_allclose(bufs[0].reshape(4, 8), (a + inputs[1]) * 2.5 - a, rtol=1e-6)


@pytest.mark.parametrize("enabled", [True, False])
def test_render_pauses_the_cyclic_collector_and_restores_it(inputs, enabled):
    """The render runs with the cyclic garbage collector off (its allocations are short-lived and acyclic), and
    leaves it as the caller had it, also when the render fails."""
    import gc
    _, _, ta, tb = inputs
    seen = []

    class Watching(ToyRenderer):
        def choose_plan(self, ctx: ISelContext) -> RegisterPlan:
            seen.append(gc.isenabled())
            return super().choose_plan(ctx)

    class Failing(ToyRenderer):
        def choose_plan(self, ctx: ISelContext) -> RegisterPlan:
            raise RuntimeError("boom")
    spec = get_program(create_schedule([(ta + tb).uop], ta.device)[0][0].ast, ToyRenderer(), 1)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        Watching().render(spec.name, list(spec.uops))
        assert seen == [False] and gc.isenabled() is enabled
        with pytest.raises(RuntimeError, match="boom"):
            Failing().render(spec.name, list(spec.uops))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_overlapping_renders_keep_the_collector_paused_until_the_last_ends():
    """Renders on two threads overlap: the first to end must not turn the collector on under the other."""
    import gc

    from tgcore.helpers import cyclic_gc_paused
    was = gc.isenabled()
    gc.enable()
    try:
        first, second = cyclic_gc_paused(), cyclic_gc_paused()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        assert not gc.isenabled()
        second.__exit__(None, None, None)
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()

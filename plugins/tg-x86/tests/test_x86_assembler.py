"""Jumps and labels: forward/backward, rel8 vs rel32 at the boundaries, widening cascades,
random programs checked against capstone, and loops run for real."""
from __future__ import annotations

import ctypes

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tg_x86 import Cond, EncodeError, Inst, Label, Op, asm, assemble, dword, reg, unavailable_reason
from tg_x86.runtime import load_function
from tg_x86_testutil import decoder

r = reg
NOP = Inst(Op.NOP)


def _hex(code: bytes) -> str:
    return code.hex(" ").upper()


def test_forward_and_backward_short():
    top, end = Label("top"), Label("end")
    out = assemble([top, NOP, Inst(Op.JMP, end), Inst(Op.JCC, top, cond=Cond.NE), end, Inst(Op.RET)])
    assert _hex(out.code) == "90 EB 02 75 FB C3"
    assert out.labels == {top: 0, end: 5}
    assert out.offsets == (0, 1, 3, 5)


@pytest.mark.parametrize("gap, short", [(127, True), (128, False)])
def test_forward_boundary(gap, short):
    end = Label("end")
    code = assemble([Inst(Op.JMP, end), *[NOP] * gap, end, Inst(Op.RET)]).code
    expected = f"EB {gap:02X}" if short else "E9 " + _hex(gap.to_bytes(4, "little"))
    assert _hex(code).startswith(expected)


@pytest.mark.parametrize("gap, short", [(126, True), (127, False)])
def test_backward_boundary(gap, short):
    """A backward jcc is 2 bytes short: with 126 bytes before it, rel8 = -128 still fits."""
    top = Label("top")
    code = assemble([top, *[NOP] * gap, Inst(Op.JCC, top, cond=Cond.E), Inst(Op.RET)]).code
    tail = code[gap:-1]
    if short:
        assert _hex(tail) == "74 80"
    else:
        assert _hex(tail) == "0F 84 " + _hex((-(gap + 6) & 0xFFFFFFFF).to_bytes(4, "little"))


def test_widening_cascades():
    """The second jump fits only while the first is short; widening the first pushes it out."""
    a, b = Label("a"), Label("b")
    prog = [Inst(Op.JMP, a), Inst(Op.JMP, b), *[NOP] * 125, a, NOP, NOP, NOP, b, Inst(Op.RET)]
    # first pass: jmp a needs 2+125 = 127 (fits), jmp b needs 125+3 = 128: widened to 5 bytes, which
    # pushes label a to 127 + 3 = 130 bytes away from the end of jmp a: widened too
    code = assemble(prog).code
    assert code[0] == 0xE9 and code[5] == 0xE9
    assert _check_targets(prog) == []


def test_unknown_and_duplicate_labels():
    with pytest.raises(EncodeError, match="not in the program"):
        assemble([Inst(Op.JMP, Label("nowhere"))])
    x = Label("x")
    with pytest.raises(EncodeError, match="defined twice"):
        assemble([x, NOP, x])


def test_listing_shows_labels():
    top = Label("top")
    assert asm([top, Inst(Op.DEC, r("edi")), Inst(Op.JCC, top, cond=Cond.NE)]) == "top:\ndec edi\njne top"


def _check_targets(program: list) -> list[str]:
    """Decode with capstone; every jump must land on its label, and every rel32 jump must need it."""
    out = assemble(program)
    insts = [x for x in program if isinstance(x, Inst)]
    decoded = list(decoder().disasm(out.code, 0))
    errors = []
    if [d.address for d in decoded] != list(out.offsets):
        return ["capstone's instruction boundaries differ from the assembler's offsets"]
    for inst, d in zip(insts, decoded, strict=True):
        if inst.label is None:
            continue
        target = out.labels[inst.label]
        if int(d.op_str, 0) != target:
            errors.append(f"{d.mnemonic} at {d.address} goes to {d.op_str}, label is at {target}")
        disp = target - (d.address + d.size)
        if d.size > 2:  # rel32: shrinking it alone must not fit (backward jumps would gain size - 2)
            short_disp = disp + (d.size - 2 if disp < 0 else 0)
            if -128 <= short_disp <= 127:
                errors.append(f"{d.mnemonic} at {d.address} is rel32 but rel8 would reach {target}")
    return errors


@st.composite
def programs(draw):
    n_labels = draw(st.integers(1, 6))
    labels = [Label(f"L{i}") for i in range(n_labels)]
    filler = st.sampled_from([NOP, Inst(Op.MOV, r("eax"), 1), Inst(Op.MOVABS, r("rax"), 1 << 40),
                              Inst(Op.MOV, r("eax"), dword(r("rdi"), r("rsi"), 4, 1000))])
    items = []
    for label in labels:
        items.append(label)
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["fill", "block", "jmp", "jcc"]))
            if kind == "fill":
                items.append(draw(filler))
            elif kind == "block":
                items += [NOP] * draw(st.integers(1, 140))
            else:
                target = draw(st.sampled_from(labels))
                cond = draw(st.sampled_from(list(Cond))) if kind == "jcc" else None
                items.append(Inst(Op.JCC if cond else Op.JMP, target, cond=cond))
    return items


@settings(max_examples=150, deadline=None, derandomize=True)
@given(programs())
def test_random_programs_jump_to_their_labels(program):
    assert _check_targets(program) == []


# ---- loops run for real ----

def _sum_to(padding: int):
    """int f(int n): n + (n-1) + ... + 1, looping backwards; ``padding`` nops make the jumps long."""
    loop, done = Label("loop"), Label("done")
    prog = [Inst(Op.XOR, r("eax"), r("eax")),
            Inst(Op.TEST, r("edi"), r("edi")),
            Inst(Op.JCC, done, cond=Cond.LE),
            loop,
            Inst(Op.ADD, r("eax"), r("edi")),
            *[NOP] * padding,
            Inst(Op.DEC, r("edi")),
            Inst(Op.JCC, loop, cond=Cond.NE),
            done,
            Inst(Op.RET)]
    out = assemble(prog)
    return load_function(out.code, ctypes.c_int32, ctypes.c_int32), out.code


@pytest.mark.skipif(unavailable_reason() is not None and "x86-64" in (unavailable_reason() or ""),
                    reason="not an x86-64 machine")
@pytest.mark.parametrize("padding, long_jumps", [(0, False), (300, True)])
def test_loop_runs(padding, long_jumps):
    fn, code = _sum_to(padding)
    assert (b"\x0f\x85" in code) == long_jumps and (b"\x0f\x8e" in code) == long_jumps
    for n in (0, 1, 2, 10, 1000, -5):
        assert fn(n) == (n * (n + 1) // 2 if n > 0 else 0)

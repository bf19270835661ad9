"""The encoder's work-once paths give the bytes of the plain ones: memory operands carry their address encoding
(``operands.address``, interned by ``operands.mem``), forms are chosen by operand shape, ``encode_plan`` looks
instructions (with their spill code) up by their operands' keys, and writes constant stores, prologue and epilogue
from cached pieces.
Each is compared with an independent way to the same bytes (hand-checked SDM bytes and capstone, or the
staged ``Inst`` path)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from tg_x86 import Inst, Op, asm, assembler, byte, encode, machine, operands, plan_code, qword, reg, select_form
from tg_x86.encoder import compile_form, encode_all
from tg_x86.forms import FORMS
from tg_x86.operands import GPRS64, IMM_RANGES, REGS, Bcst, Imm, Label, Masked, Mem, kreg, xmm, ymm, zmm
from tg_x86.renderer import X86Renderer
from tg_x86_testutil import decode_one, decoder, same_listing

r = reg

# REX for spl..dil depends on which operand is a byte register: a cache keyed by register numbers must
# still tell "movzx esi, al" (no REX: esi is a 32-bit destination) from "movzx eax, sil" (REX)
BYTE_REGISTERS = [
    (Inst(Op.MOVZX, r("esi"), r("al")), "movzx esi, al", "0F B6 F0"),
    (Inst(Op.MOVZX, r("eax"), r("sil")), "movzx eax, sil", "40 0F B6 C6"),
    (Inst(Op.MOV, r("sil"), r("dl")), "mov sil, dl", "40 88 D6"),
    (Inst(Op.MOV, r("dl"), r("bl")), "mov dl, bl", "88 DA"),
    (Inst(Op.MOV, byte(r("rax")), r("sil")), "mov byte ptr [rax], sil", "40 88 30"),
    (Inst(Op.MOV, byte(r("rax")), r("dl")), "mov byte ptr [rax], dl", "88 10"),
    (Inst(Op.MOVZX, r("esi"), byte(r("rax"))), "movzx esi, byte ptr [rax]", "0F B6 30"),
]


@pytest.mark.parametrize("inst, text, expected", BYTE_REGISTERS, ids=[t for _, t, _ in BYTE_REGISTERS])
def test_byte_registers_through_the_caches(inst, text, expected):
    for _ in range(2):  # the second time from the caches
        assert encode(inst).hex(" ").upper() == expected
    decoded, size, _ = decode_one(decoder(), bytes.fromhex(expected))
    assert size == len(bytes.fromhex(expected)) and same_listing(text, decoded, select_form(inst))
    assert asm([inst]) == text


def _vex_cases() -> list[Inst]:
    """Register-only and memory forms of a few VEX instructions over registers that need VEX3 or not."""
    regs = (0, 7, 8, 15)
    mems = [Mem(256, GPRS64[b], None, 1, d) for b, d in ((0, 0), (4, 8), (13, 0), (12, -300))]
    mems.append(Mem(256, GPRS64[1], GPRS64[9], 8, 64))
    out = []
    for a, b, c in itertools.product(regs, repeat=3):
        out.append(Inst(Op.VADDPS, ymm(a), ymm(b), ymm(c)))
        out.append(Inst(Op.VPSLLD, xmm(a), xmm(b), c))  # vvvv and rm, a /digit in ModRM.reg
    for a, b in itertools.product(regs, repeat=2):
        out += [Inst(Op.VADDPS, ymm(a), ymm(b), m) for m in mems]
        out += [Inst(Op.VMOVUPS, m, ymm(a)) for m in mems]
        out.append(Inst(Op.VMOVQ, r(GPRS64[a].name), xmm(b)))
    return out


def test_cached_encodings_agree_with_a_fresh_encoder_and_capstone():
    md = decoder()
    for inst in _vex_cases():
        form = select_form(inst)
        first, cached, fresh = encode(inst), encode(inst), compile_form(form)(inst.operands, inst.cond, 0)
        assert first == cached == fresh
        decoded, size, _ = decode_one(md, first)
        assert size == len(first) and same_listing(asm([inst]), decoded, form), f"{inst!r}: capstone {decoded!r}"


def test_memory_operands_carry_their_address_encoding(monkeypatch):
    # an empty table (the real one stops keeping operands at 4096: full after the kernels of earlier tests in the
    # same process, and then `mem` makes a new object each time)
    monkeypatch.setattr(operands, "MEMS", type(operands.MEMS)())
    for base, index, scale, disp in [(0, None, 1, 0), (4, None, 1, 0), (5, None, 1, 0), (13, None, 1, 0),
                                     (12, 9, 4, -8), (None, 3, 8, 0x40), (None, None, 1, 0x1234), (7, 14, 2, 1 << 20)]:
        b = GPRS64[base] if base is not None else None
        x = GPRS64[index] if index is not None else None
        made = Mem(64, b, x, scale, disp)
        assert Mem.of(64, b, x, scale, disp).address == made.address
        interned = operands.mem(64, base, index, scale, disp)
        assert interned == made and interned.address == made.address
        assert operands.mem(64, base, index, scale, disp) is interned  # one object per operand
        inst = Inst(Op.MOV, r("rax"), interned)  # its address bytes, checked by capstone
        code = encode(inst)
        decoded, size, _ = decode_one(decoder(), code)
        assert size == len(code) and same_listing(asm([inst]), decoded, select_form(inst)), decoded


@pytest.mark.parametrize("disp", [0, 4, 112, 124, 128, 4096, (1 << 20) + 4])
@pytest.mark.parametrize("size", [16, 32])
def test_constant_stores_are_the_staged_stores(disp, size):
    data = np.random.default_rng(disp + size).integers(0, 256, size, dtype=np.uint8).tobytes()
    assert plan_code._const_stores_code(disp, data) == b"".join(encode_all(machine._const_stores(disp, data)))  # type: ignore[arg-type]


def test_prologue_and_epilogue_are_the_staged_ones():
    for saved, saved_vec, size, homes in [((), (), 0, ()), (("rbx", "r12"), (), 40, (("rdi", 16), ("rsi", 24))),
                                          (("rbp", "rdi"), ((6, 32), (7, 48)), 200, ())]:
        lay = machine.Layout(saved, saved_vec, size, homes, [], {})
        staged = b"".join(encode_all(machine._prologue(lay)))  # type: ignore[arg-type]
        assert plan_code._prologue_code(saved, saved_vec, size, homes) == staged
        assert plan_code._epilogue_code(saved, saved_vec, size) == b"".join(encode_all(machine._epilogue(lay)))  # type: ignore[arg-type]


def test_mem_rejects_what_mem_of_rejects():
    with pytest.raises(ValueError):
        operands.mem(32, 4, None, 1, 1 << 31)
    assert qword(r("rax")).address == (0, 0, b"")  # [rax]: mod 00, rm 000, no SIB or displacement


def test_forms_accept_by_shape_what_they_accept():
    """A form is chosen by its operand types' ``shapes``: each holds the shape of an operand exactly when the type
    accepts it (registers, memory of every size, labels, immediates around every range's ends and random ones)."""
    rng = np.random.default_rng(0)
    values = {v + d for lo, hi in IMM_RANGES for v in (lo, hi) for d in (-2, -1, 0, 1, 2)}
    values |= {int(v) for v in rng.integers(-(1 << 62), 1 << 62, 200)} | {1 << 70, -(1 << 70)}
    samples = [*REGS.values(), *(Mem(bits, GPRS64[3]) for bits in (None, 8, 16, 32, 64, 128, 256, 512)), Label(),
               *map(Imm, values)]
    # AVX-512: registers and stores under an opmask, embedded broadcasts of every element size and length
    samples += [Masked(o, kreg(k), z) for o in (zmm(0), zmm(31), ymm(3), xmm(9)) for k in (1, 7) for z in (False, True)]
    samples += [Masked(Mem(bits, GPRS64[3]), kreg(2)) for bits in (32, 256, 512)]
    samples += [Bcst(Mem(bits, GPRS64[3]), vec // bits) for bits in (32, 64) for vec in (128, 256, 512)]
    for t in {t for forms in FORMS.values() for form in forms for t in form.operands}:
        for o in samples:
            assert (o.shape in t.shapes) == t.accepts(o), (t.text, o)


def _plans():
    """The register plans and frames of a kernel of 21 buffers and of a conv2d (spilled gprs)."""
    from tgcore.codegen import get_program
    from tgcore.nn.functional import conv2d
    from tgcore.schedule.kernelize import create_schedule
    from tgcore.tensor import Tensor
    x = X86Renderer()
    rng = np.random.default_rng(1)
    many = Tensor(rng.standard_normal(33).astype(np.float32), device="CPU:X86")
    for _ in range(20):
        many = many * 0.5 + Tensor(rng.standard_normal(33).astype(np.float32), device="CPU:X86")
    a = Tensor(rng.standard_normal((2, 16, 12, 12)).astype(np.float32), device="CPU:X86")
    w = Tensor(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), device="CPU:X86")
    for out in (many, conv2d(a, w, padding=1)):
        for si in create_schedule([out.uop], "CPU:X86")[0]:
            if si.kind != "copy":
                ctx = x.select(list(get_program(si.ast, x, 2).uops))
                yield x.choose_plan(ctx), ctx.frame


def test_instructions_looked_up_by_their_keys_are_the_staged_ones():
    """``encode_plan`` with no instruction known yet, then from its table of instructions by key (spill code
    included), gives the bytes of the staged way (the rewritten program through ``finish`` and the assembler)."""
    plans = list(_plans())
    assert any(iv.reg is None for plan, _ in plans for iv in plan.by_vreg.values()), "no spill code to check"
    for plan, frame in plans:
        program, stack_bytes = plan.rewrite()
        staged = assembler.assemble(machine.finish(program, frame, (program, stack_bytes))).code
        plan_code.clear_encoding_caches()
        assert plan_code.encode_plan(plan, frame) == staged
        assert plan_code.encode_plan(plan, frame) == staged


def test_a_full_instruction_table_is_emptied_when_a_kernel_starts():
    """The table of instructions by key stays bounded: full, it is emptied before the next kernel is encoded (with
    the operand plans of its layouts), and the kernel's bytes do not change."""
    plan, frame = next(_plans())
    plan_code.clear_encoding_caches()
    expected = plan_code.encode_plan(plan, frame)
    plan_code._ENCODED.update(((k,), b"") for k in range(plan_code._ENCODED_LIMIT))
    assert plan_code.encode_plan(plan, frame) == expected
    assert (0,) not in plan_code._ENCODED and len(plan_code._ENCODED) < plan_code._ENCODED_LIMIT
    plan_code.clear_encoding_caches()

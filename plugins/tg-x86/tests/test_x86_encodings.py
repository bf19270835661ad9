"""Exact encodings (bytes from the Intel SDM's rules, as GNU as / llvm-mc emit them) and the
addressing special cases, each also decoded by capstone and compared with ``asm``."""
from __future__ import annotations

import pytest
from tg_x86 import Cond, EncodeError, Inst, Op, asm, byte, dword, encode, reg, select_form, xmmword, ymmword
from tg_x86.operands import Mem, gpr, xmm, ymm
from tg_x86_testutil import decode_one, decoder, same_listing

r = reg
MEM_A = dword(r("rdi"), r("rsi"), 4, 0xA)          # [rdi+rsi*4+0xa]
MEM_B = dword(r("rdi"), r("rsi"), 4, 0x2710)       # [rdi+rsi*4+0x2710]

# the encodings issue 6 requires: (instruction, Intel syntax as capstone prints it, bytes)
REQUIRED = [
    (Inst(Op.MOV, r("edi"), dword(r("rdi"))), "mov edi, dword ptr [rdi]", "8B 3F"),
    (Inst(Op.MOV, r("esp"), dword(r("rsp"))), "mov esp, dword ptr [rsp]", "8B 24 24"),
    (Inst(Op.MOV, r("ebp"), dword(r("rbp"), disp=0)), "mov ebp, dword ptr [rbp]", "8B 6D 00"),
    (Inst(Op.MOV, r("eax"), dword(r("rax"), r("rdx"), 4)), "mov eax, dword ptr [rax + rdx*4]", "8B 04 90"),
    (Inst(Op.MOV, r("eax"), dword(r("rax"))), "mov eax, dword ptr [rax]", "8B 00"),
    (Inst(Op.MOV, r("eax"), dword(r("rax"), r("r12"), 4)), "mov eax, dword ptr [rax + r12*4]", "42 8B 04 A0"),
    (Inst(Op.MOV, r("edi"), MEM_A), "mov edi, dword ptr [rdi + rsi*4 + 0xa]", "8B 7C B7 0A"),
    (Inst(Op.MOV, r("edi"), MEM_B), "mov edi, dword ptr [rdi + rsi*4 + 0x2710]", "8B BC B7 10 27 00 00"),
    (Inst(Op.MOVSX, r("eax"), r("dl")), "movsx eax, dl", "0F BE C2"),
    (Inst(Op.MOVSX, r("eax"), r("dil")), "movsx eax, dil", "40 0F BE C7"),
    (Inst(Op.MOVSX, r("ax"), r("dl")), "movsx ax, dl", "66 0F BE C2"),
    (Inst(Op.MOVSX, r("rax"), r("dl")), "movsx rax, dl", "48 0F BE C2"),
    (Inst(Op.VADDSS, xmm(0), xmm(0), xmm(1)), "vaddss xmm0, xmm0, xmm1", "C5 FA 58 C1"),
    (Inst(Op.VADDSS, xmm(0), xmm(0), xmm(8)), "vaddss xmm0, xmm0, xmm8", "C4 C1 7A 58 C0"),
    (Inst(Op.VADDPS, ymm(0), ymm(0), ymm(1)), "vaddps ymm0, ymm0, ymm1", "C5 FC 58 C1"),
    (Inst(Op.VBLENDVPS, xmm(0), xmm(0), xmm(1), xmm(2)), "vblendvps xmm0, xmm0, xmm1, xmm2", "C4 E3 79 4A C1 20"),
    (Inst(Op.VPEXTRD, MEM_A, xmm(0), 0), "vpextrd dword ptr [rdi + rsi*4 + 0xa], xmm0, 0", "C4 E3 79 16 44 B7 0A 00"),
    (Inst(Op.CMOVCC, r("eax"), MEM_A, cond=Cond.E), "cmove eax, dword ptr [rdi + rsi*4 + 0xa]", "0F 44 44 B7 0A"),
    (Inst(Op.MOV, byte(r("rdi"), r("rsi"), 1, 0xA), 0xA), "mov byte ptr [rdi + rsi + 0xa], 0xa", "C6 44 37 0A 0A"),
    (Inst(Op.MOV, byte(r("r13"), r("rsi")), 0xA), "mov byte ptr [r13 + rsi], 0xa", "41 C6 44 35 00 0A"),
    (Inst(Op.IMUL3, r("edi"), MEM_A, 0xA), "imul edi, dword ptr [rdi + rsi*4 + 0xa], 0xa", "6B 7C B7 0A 0A"),
    (Inst(Op.IMUL3, r("edi"), MEM_B, 0x2710), "imul edi, dword ptr [rdi + rsi*4 + 0x2710], 0x2710",
     "69 BC B7 10 27 00 00 10 27 00 00"),
    (Inst(Op.CMOVCC, r("edx"), r("eax"), cond=Cond.E), "cmove edx, eax", "0F 44 D0"),
]

# more hand-checked encodings: prefixes, immediates, VEX fields, implicit operands
MORE = [
    (Inst(Op.ADD, r("eax"), -1), "add eax, -1", "83 C0 FF"),                      # imm8 sign-extended
    (Inst(Op.ADD, r("eax"), 0x80), "add eax, 0x80", "81 C0 80 00 00 00"),          # does not fit simm8
    (Inst(Op.ADD, r("r9w"), 2), "add r9w, 2", "66 41 83 C1 02"),                    # 66 before REX
    (Inst(Op.MOV, r("eax"), 1), "mov eax, 1", "B8 01 00 00 00"),
    (Inst(Op.MOV, r("rax"), -1), "mov rax, -1", "48 C7 C0 FF FF FF FF"),
    (Inst(Op.MOVABS, r("r10"), 0x123456789ABCDEF0), "movabs r10, 0x123456789abcdef0", "49 BA F0 DE BC 9A 78 56 34 12"),
    (Inst(Op.MOV, r("sil"), 1), "mov sil, 1", "40 B6 01"),                          # REX for sil
    (Inst(Op.MOV, r("esi"), r("r8d")), "mov esi, r8d", "44 89 C6"),                # reg,reg takes the MR form
    (Inst(Op.MOV, r("eax"), dword(r("r12"))), "mov eax, dword ptr [r12]", "41 8B 04 24"),
    (Inst(Op.MOV, r("eax"), dword(r("r13"))), "mov eax, dword ptr [r13]", "41 8B 45 00"),
    (Inst(Op.MOV, r("eax"), dword(None, r("rcx"), 8, 0x10)), "mov eax, dword ptr [rcx*8 + 0x10]",
     "8B 04 CD 10 00 00 00"),
    (Inst(Op.MOV, r("eax"), dword(disp=0x10)), "mov eax, dword ptr [0x10]", "8B 04 25 10 00 00 00"),
    (Inst(Op.MOV, r("eax"), dword(disp=-5)), "mov eax, dword ptr [0xfffffffffffffffb]", "8B 04 25 FB FF FF FF"),
    (Inst(Op.MOV, r("eax"), dword(r("rdi"), disp=-128)), "mov eax, dword ptr [rdi - 0x80]", "8B 47 80"),
    (Inst(Op.MOV, r("eax"), dword(r("rdi"), disp=-129)), "mov eax, dword ptr [rdi - 0x81]", "8B 87 7F FF FF FF"),
    (Inst(Op.LEA, r("rax"), Mem(None, r("rdi"), r("rsi"), 2, 8)), "lea rax, [rdi + rsi*2 + 8]", "48 8D 44 77 08"),
    (Inst(Op.MOVSXD, r("rax"), r("ecx")), "movsxd rax, ecx", "48 63 C1"),
    (Inst(Op.MOVZX, r("eax"), byte(r("rdi"))), "movzx eax, byte ptr [rdi]", "0F B6 07"),
    (Inst(Op.SHL, r("rdx"), 32), "shl rdx, 0x20", "48 C1 E2 20"),
    (Inst(Op.SAR, r("eax"), r("cl")), "sar eax, cl", "D3 F8"),
    (Inst(Op.IDIV, r("rcx")), "idiv rcx", "48 F7 F9"),
    (Inst(Op.CQO), "cqo", "48 99"),
    (Inst(Op.MUL, r("r9")), "mul r9", "49 F7 E1"),                                # rdx:rax = rax * r9
    (Inst(Op.IMUL1, r("rcx")), "imul rcx", "48 F7 E9"),                           # signed, one operand
    (Inst(Op.VPMULDQ, ymm(0), ymm(1), ymm(2)), "vpmuldq ymm0, ymm1, ymm2", "C4 E2 75 28 C2"),
    (Inst(Op.VPMULUDQ, ymm(0), ymm(1), ymm(2)), "vpmuludq ymm0, ymm1, ymm2", "C5 F5 F4 C2"),
    (Inst(Op.VPBLENDD, xmm(8), xmm(1), xmm(12), 0xA), "vpblendd xmm8, xmm1, xmm12, 0xa", "C4 43 71 02 C4 0A"),
    (Inst(Op.SETCC, r("dil"), cond=Cond.L), "setl dil", "40 0F 9C C7"),
    (Inst(Op.PUSH, r("r12")), "push r12", "41 54"),
    (Inst(Op.RET), "ret", "C3"),
    (Inst(Op.VMOVUPS, ymm(8), ymmword(r("rdi"))), "vmovups ymm8, ymmword ptr [rdi]", "C5 7C 10 07"),  # VEX2 with R
    (Inst(Op.VMOVUPS, xmm(0), xmmword(r("r8"))), "vmovups xmm0, xmmword ptr [r8]", "C4 C1 78 10 00"),  # B: VEX3
    (Inst(Op.VFMADD231PS, ymm(0), ymm(1), ymm(2)), "vfmadd231ps ymm0, ymm1, ymm2", "C4 E2 75 B8 C2"),
    (Inst(Op.VCVTSI2SD, xmm(1), xmm(1), r("rax")), "vcvtsi2sd xmm1, xmm1, rax", "C4 E1 F3 2A C8"),  # W1: VEX3
    (Inst(Op.VCMPPS, ymm(0), ymm(1), ymm(2), 1), "vcmpltps ymm0, ymm1, ymm2", "C5 F4 C2 C2 01"),
    (Inst(Op.VPSRLDQ, xmm(1), xmm(2), 8), "vpsrldq xmm1, xmm2, 8", "C5 F1 73 DA 08"),
    (Inst(Op.VPBLENDVB, ymm(1), ymm(2), ymm(3), ymm(12)), "vpblendvb ymm1, ymm2, ymm3, ymm12", "C4 E3 6D 4C CB C0"),
    (Inst(Op.VCVTPS2PH, xmm(1), ymm(2), 4), "vcvtps2ph xmm1, ymm2, 4", "C4 E3 7D 1D D1 04"),
    (Inst(Op.PREFETCHT0, byte(r("rdi"), r("rsi"), 1, 0x5A0)), "prefetcht0 byte ptr [rdi + rsi + 0x5a0]",
     "0F 18 8C 37 A0 05 00 00"),                                                  # ModRM reg field /1
    (Inst(Op.PREFETCHT0, byte(r("r9"), r("r10"), 1, 8)), "prefetcht0 byte ptr [r9 + r10 + 8]", "43 0F 18 4C 11 08"),
]


def _hex(code: bytes) -> str:
    return code.hex(" ").upper()


@pytest.mark.parametrize("inst, text, expected", REQUIRED + MORE, ids=[t for _, t, _ in REQUIRED + MORE])
def test_encoding(inst, text, expected):
    assert _hex(encode(inst)) == expected
    assert asm([inst]) == text


@pytest.mark.parametrize("inst, text, expected", REQUIRED + MORE, ids=[t for _, t, _ in REQUIRED + MORE])
def test_capstone_agrees(inst, text, expected):
    decoded, size, _ = decode_one(decoder(), bytes.fromhex(expected))
    assert size == len(bytes.fromhex(expected))
    assert same_listing(text, decoded, select_form(inst)), f"{text!r} != capstone {decoded!r}"


def test_sib_index_100_means_no_index():
    """8B 04 20 is [rax + (no index)] (capstone names the missing index riz); so rsp can never be an
    index, and [rax] encodes without a SIB."""
    assert decode_one(decoder(), bytes.fromhex("8B0420"))[0] == "mov eax, dword ptr [rax + riz]"
    assert _hex(encode(Inst(Op.MOV, r("eax"), dword(r("rax"))))) == "8B 00"
    with pytest.raises(ValueError, match="rsp cannot be an index"):
        dword(r("rax"), r("rsp"))


def test_every_special_base():
    """The four bases whose low bits are 100 (SIB) or 101 (needs a displacement)."""
    expect = {"rsp": "8B 04 24", "r12": "41 8B 04 24", "rbp": "8B 45 00", "r13": "41 8B 45 00"}
    for name, code in expect.items():
        assert _hex(encode(Inst(Op.MOV, r("eax"), dword(r(name))))) == code


def test_imul_picks_short_immediate():
    assert _hex(encode(Inst(Op.IMUL3, r("eax"), r("ecx"), -128))) == "6B C1 80"
    assert _hex(encode(Inst(Op.IMUL3, r("eax"), r("ecx"), 128))) == "69 C1 80 00 00 00"
    assert select_form(Inst(Op.IMUL3, r("rax"), r("rcx"), 127)).encoding.imms == (1,)


def test_errors_name_the_problem():
    with pytest.raises(EncodeError, match="no form of vaddss takes"):
        encode(Inst(Op.VADDSS, r("eax"), xmm(0), xmm(1)))
    with pytest.raises(EncodeError, match="no form of mov takes"):
        encode(Inst(Op.MOV, r("eax"), r("rcx")))                      # size mismatch
    with pytest.raises(EncodeError, match="no form of mov takes"):
        encode(Inst(Op.MOV, r("rax"), 1 << 40))                       # needs movabs
    with pytest.raises(ValueError, match="needs condition"):
        Inst(Op.JCC, r("rax"))
    with pytest.raises(ValueError, match="64-bit registers"):
        dword(r("eax"))
    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        dword(r("rax"), disp=1 << 31)


def test_all_registers_round_trip():
    """Every GPR at every width as destination and source, every xmm/ymm in every VEX field."""
    md = decoder()
    for bits in (8, 16, 32, 64):
        for a in range(16):
            for b in range(16):
                inst = Inst(Op.MOV, gpr(a, bits), gpr(b, bits))
                assert decode_one(md, encode(inst))[0] == asm([inst])
    for a in range(16):
        for b in range(16):
            for inst in (Inst(Op.VADDPS, ymm(a), ymm(b), ymm(15 - a)), Inst(Op.VMULSS, xmm(a), xmm(b), xmm(b))):
                assert decode_one(md, encode(inst))[0] == asm([inst])


def test_disassemble_matches_asm():
    decoder()  # skips (or fails in CI) without capstone
    program = [inst for inst, _, _ in REQUIRED]
    from tg_x86 import assemble, disassemble
    out = assemble(program)
    lines = disassemble(out.code)
    assert [offset for offset, _, _ in lines] == list(out.offsets)
    for (inst, text, _), (_, size, decoded) in zip(REQUIRED, lines, strict=True):
        assert decoded == text
        assert size == len(encode(inst))
    assert disassemble(bytes.fromhex("C3"), address=0x1000) == [(0x1000, 1, "ret")]

"""Hand-written forms where llvm-mc-19's rules are subtle, checked against llvm-mc in both directions.

- v_ldexp_*'s integer exponent: ``sext(x)`` (its neg bit) on every target; on RDNA v_ldexp_f16 also takes
  -x and |x|; a VOP2 with DPP8 and modifiers becomes the VOP3 form; llvm-objdump prints the bits back as
  -x / |x| (RDNA VOP3 v_ldexp_f16) or ``sext(x)`` (neg) and nothing (abs) elsewhere.
- Float constants on integer operands: not inline, they are written as their f32 bits (also on 16-bit
  operands, v_mov_b16 included), if rounding to the operand's float width neither overflows nor
  underflows; llvm-objdump prints a 16-bit integer operand's constants as the 16 bits it reads. On
  64-bit integer operands only inline floats are taken. fmamk/fmaak's K is a literal of the op's width;
  a bf16 operand's literal holds its bf16 bits. Operand widths as LLVM's classes have them (v_sad_u16
  all 32-bit, v_mad_u32_u16's accumulator and v_cmp*_class_f16's mask 32-bit).

Lines llvm-mc refuses must be refused by us too (same list, so the refusal rules are pinned as well).
"""
from __future__ import annotations

import os
import subprocess

import pytest
import tg_amd
from tg_amd_cases import assembly_mismatches, llvm_encode, llvm_mc

LDEXP_RDNA = """
v_ldexp_f16_e64 v1, v2, -v3
v_ldexp_f16_e64 v1, v2, |v3|
v_ldexp_f16_e64 v1, -v2, -|v3| clamp
v_ldexp_f16_e64 v1, v2, -|s3|
v_ldexp_f16_e64 v1, v2, |1|
v_ldexp_f16_e64 v1, v2, -|0x1234|
v_ldexp_f16 v1, v2, -v3
v_ldexp_f16 v1, v2, |v3| row_shl:1
v_ldexp_f16_dpp v1, v2, -v3 row_shl:1
v_ldexp_f16 v1, v2, -|v3| quad_perm:[1,0,3,2] bound_ctrl:1 fi:1
v_ldexp_f16_e64_dpp v1, v2, |v3| row_shl:1
v_ldexp_f16_e64_dpp v1, v2, -v3 dpp8:[7,6,5,4,3,2,1,0]
v_ldexp_f16 v1, v2, -v3 dpp8:[7,6,5,4,3,2,1,0]
v_ldexp_f16 v1, v2, sext(v3) row_shl:1
v_ldexp_f16 v1, v2, sext(v3) dpp8:[7,6,5,4,3,2,1,0]
v_ldexp_f16_e64 v1, v2, sext(s3)
v_ldexp_f32 v1, v2, sext(v3) clamp
v_ldexp_f32 v1, v2, sext(v3) row_shl:1
v_ldexp_f32 v1, v2, sext(0x1234)
v_ldexp_f64 v[2:3], v[4:5], sext(v3)
v_ldexp_f16 v1, v2, 3.5
v_ldexp_f32 v1, v2, 3.5
v_ldexp_f32 v1, v2, -v3
v_ldexp_f32_e64 v1, v2, -|v3|
v_ldexp_f16 v1, sext(v2), v3 row_shl:1
v_add_f16 v1, -v2, v3 dpp8:[7,6,5,4,3,2,1,0]
"""

LDEXP_GFX942 = """
v_ldexp_f16_e64 v1, v2, sext(v3)
v_ldexp_f16_e64 v1, v2, sext(1)
v_ldexp_f16 v1, v2, sext(v3) quad_perm:[0,1,2,3]
v_ldexp_f16_sdwa v1, v2, sext(v3) dst_sel:DWORD src0_sel:DWORD src1_sel:DWORD
v_ldexp_f32 v1, v2, sext(v3) clamp
v_ldexp_f64 v[2:3], v[4:5], sext(v3)
v_ldexp_f16_e64 v1, v2, -v3
v_ldexp_f16_e64 v1, v2, |v3|
v_ldexp_f16 v1, v2, -v3 row_shl:1
"""

FLOATS_RDNA = """
v_mov_b16 v1.l, 3.5
v_mov_b16 v1.h, -3.5
v_mov_b16 v1.l, 0.1
v_mov_b16 v1.l, 65504.0
v_mov_b16 v1.l, 65519.0
v_mov_b16 v1.l, 65520.0
v_mov_b16 v1.l, 5.960464477539063e-08
v_mov_b16 v1.l, 2.9802322387695312e-08
v_mov_b16 v1.l, 6.103515625e-05
v_mov_b16 v1.l, 6.1e-05
v_mov_b16 v1.l, 1.0000001
v_mov_b16 v1.l, 0.5
v_mov_b16 v1.l, 0.15915494
v_add_nc_u16 v1, 3.5, v2
v_add_nc_u16 v1, v2, 2.0e4
v_add_nc_u16 v1, -4.0, v2
v_add_nc_u16 v1, 1e10, v2
v_mul_lo_u16 v1, 0.1, v2
v_cvt_f16_u16 v1, 1.0
v_cvt_f16_u16_e64 v1, 3.5
v_cmp_eq_u16 vcc_lo, 3.5, v2
v_mad_u16 v1, 1.0, v2, 3.5
v_mad_u32_u16 v1, 1.0, v2, v3
v_add_nc_u32 v1, 5.0, v2
v_add_nc_u32 v1, 1e39, v2
v_add_nc_u32 v1, 1e-39, v2
v_mov_b32 v1, 2.0e4
s_mov_b32 s0, 2.0e4
s_pack_ll_b32_b16 s0, 3.5, s1
v_pk_add_u16 v1, 3.5, v2
v_pk_add_f16 v1, 3.5, v2
v_add_f16 v1, 1e-5, v2
v_add_f16 v1, 65519.0, v2
v_fmamk_f16 v1, v2, -0.5, v3
v_fmaak_f16 v1, s2, v3, 1.0
v_cmp_ne_i64_e32 vcc_lo, 5.0, v[2:3]
v_cmp_ne_i64_e32 vcc_lo, 1.0, v[2:3]
v_lshlrev_b64 v[0:1], v2, 2.0e4
s_mov_b64 s[0:1], 3.5
s_mov_b64 s[0:1], -4.0
v_dot2_bf16_bf16 v1, v2, v3, 0.1
v_dot2_f32_bf16 v1, 3.5, v3, v4
v_dot2_f32_bf16 v1, 3.38e38, v3, v4
v_dot2_bf16_bf16 v1, v2, v3, 1e39
v_sad_u16 v1, 0x12345, v2, v3
v_sad_u16 v1, 1.0, v2, v3
v_sad_u16 v1, v2, v3, 3.5
v_cmp_class_f16_e64 vcc_lo, v1, 3.5
v_cmpx_class_f16_e64 v1, 0x12345
v_cmp_class_f16 vcc_lo, v1, v200
v_cmpx_class_f16 v1, v100
"""

FLOATS_GFX942 = """
v_add_u16 v1, 3.5, v2
v_add_u16 v1, 65520.0, v2
v_add_u16_e64 v1, 1.0, v2
v_add_u16_sdwa v1, 1.0, v2 dst_sel:DWORD src0_sel:DWORD src1_sel:DWORD
v_lshlrev_b16 v1, 0.5, v2
v_add_u32 v1, 5.0, v2
v_madmk_f16 v1, v2, -0.5, v3
v_mad_u64_u32 v[2:3], vcc, v1, v6, 5.0
v_cmp_ge_u64_e32 vcc, 0.5, v[2:3]
v_sad_u16 v1, 1.0, v2, v3
v_mad_u32_u16 v1, v2, v3, 1.0
v_cmp_class_f16_e64 vcc, v1, 1.0
"""

FORMS = {
    "gfx1100": LDEXP_RDNA + FLOATS_RDNA,
    "gfx1200": LDEXP_RDNA + FLOATS_RDNA,
    "gfx942": LDEXP_GFX942 + FLOATS_GFX942,
}


@pytest.fixture(scope="module")
def have_llvm() -> None:
    if llvm_mc() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("llvm-mc-19 not found; CI must install Debian's llvm-19")
        pytest.skip("llvm-mc-19 not installed (apt-get install llvm-19)")


def _llvm_text(code: bytes, arch: str) -> str:
    """llvm-mc's disassembly of one instruction."""
    proc = subprocess.run([str(llvm_mc()), "--disassemble", "-arch=amdgcn", f"-mcpu={arch}"],
                          input=" ".join(f"0x{b:02x}" for b in code), capture_output=True, text=True, timeout=60)
    return proc.stdout.strip().splitlines()[-1].strip()


@pytest.mark.parametrize("arch", sorted(FORMS))
def test_forms_assemble_and_disassemble_as_llvm_mc(have_llvm: None, arch: str) -> None:
    lines = [line for line in FORMS[arch].splitlines() if line]
    ref = llvm_encode(lines, arch)
    assert sum(isinstance(r, bytes) for r in ref) > len(lines) // 2, "mostly forms llvm-mc accepts"
    wrong = assembly_mismatches(lines, ref, arch)
    norm = lambda t: " ".join(t.replace(",", " ").split())  # noqa: E731
    for code in (r for r in ref if isinstance(r, bytes)):
        text = _llvm_text(code, arch)
        ours = tg_amd.disassemble(code, arch).strip()
        if norm(ours) != norm(text):
            wrong.append(f"{code.hex(' ')}: ours {ours!r}, llvm-mc {text!r}")
    assert not wrong, "\n".join(wrong)

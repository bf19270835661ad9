"""Encodings without LLVM: the issue's reference table (bytes from llvm-mc-19) and the frozen golden
files (tests/data/golden_<arch>.txt, made by make_golden.py from llvm-mc-19). Each is assembled
from text, and its bytes are disassembled and assembled again."""
from __future__ import annotations

import pathlib

import pytest
import tg_amd

REFERENCE = [
    ("gfx1200", "v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]", "00 40 40 cc 08 19 02 1c"),
    ("gfx1200", "v_dual_mov_b32 v0, 0 :: v_dual_mov_b32 v1, 0", "80 00 10 ca 80 00 00 00"),
    ("gfx1200", "ds_load_b128 v[4:7], v1 offset:512", "00 02 fc db 01 00 00 04"),
    ("gfx1200", "ds_store_b128 v1, v[4:7]", "00 00 7c db 01 04 00 00"),
    ("gfx1200", "global_load_b128 v[4:7], v6, s[4:5] offset:16", "04 c0 05 ee 04 00 00 00 06 10 00 00"),
    ("gfx1200", "s_barrier_signal -1", "c1 4e 80 be"),
    ("gfx1200", "s_barrier_wait 0xffff", "ff ff 94 bf"),
    ("gfx1200", "s_wait_dscnt 0", "00 00 c6 bf"),
    ("gfx1200", "s_load_b128 s[4:7], s[0:1], 0x0", "00 41 00 f4 00 00 00 f8"),
    ("gfx1200", "v_mul_lo_u32 v6, v48, 8192", "06 00 2c d7 30 ff 01 00 00 20 00 00"),
    ("gfx1200", "v_cvt_f16_f32_e32 v17, v60", "3c 15 22 7e"),
    ("gfx1200", "global_store_b16 v14, v17, s[8:9]", "08 40 06 ee 00 00 80 08 0e 00 00 00"),
    ("gfx1200", "s_endpgm", "00 00 b0 bf"),
    ("gfx1100", "v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]", "00 40 40 cc 08 21 02 1c"),
    ("gfx942", "v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[2:3], a[0:3]", "00 80 cd d3 00 05 02 04"),
    # the syntax list (bytes from llvm-mc-19)
    ("gfx1100", "s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)", "03 00 b6 bf"),
    ("gfx1100", "s_getreg_b32 s8, hwreg(HW_REG_MODE, 0, 32)", "01 f8 88 b8"),
    ("gfx1200", "s_delay_alu instid0(VALU_DEP_1) | instskip(NEXT) | instid1(SALU_CYCLE_1)", "91 04 87 bf"),
    ("gfx1100", "v_add_f32_dpp v0, v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf", "fa 04 00 06 01 b1 00 ff"),
    ("gfx1100", "v_add_f32 v0, v1, v2 dpp8:[7,6,5,4,3,2,1,0]", "e9 04 00 06 01 77 39 05"),
    ("gfx942", "v_add_f32 v0, v1, v2 row_bcast:15", "fa 04 00 02 01 42 01 ff"),
    ("gfx1200", "v_add3_u32 v5, exec_hi, null, vcc_lo", "05 00 55 d6 7f f8 a8 01"),
    ("gfx1100", "buffer_load_b32 v1, v[2:3], s[4:7], s9 idxen offen offset:4095", "ff 0f 50 e0 02 01 c1 09"),
    ("gfx1100", "buffer_load_dword v1, off, s[4:7], 0 glc", "00 40 50 e0 00 01 01 80"),
    ("gfx942", "buffer_load_dword a1, off, s[4:7], 0", "00 00 50 e0 00 01 81 80"),
    ("gfx1200", "buffer_load_b32 v1, off, s[4:7], s9 th:TH_LOAD_HT scope:SCOPE_DEV",
     "09 00 05 c4 01 08 a8 00 00 00 00 00"),
    ("gfx1200", "global_load_b32 v1, v[2:3], off th:TH_LOAD_NT scope:SCOPE_SE", "7c 00 05 ee 01 00 14 00 02 00 00 00"),
    ("gfx1200", "scratch_load_b32 v1, v2, s3 offset:-16", "03 00 05 ed 01 00 02 00 02 f0 ff ff"),
    ("gfx1100", "global_atomic_add_u32 v1, v[2:3], v3, off glc", "00 40 d6 dc 02 03 7c 01"),
    ("gfx1100", "tbuffer_store_format_xy v[1:2], v2, s[4:7], s3 format:77 idxen", "00 80 6a ea 02 01 81 03"),
    ("gfx1100", "v_add_f32_e32 v0, src_scc, v1", "fd 02 00 06"),
    ("gfx1200", "s_wait_alu depctr_va_vdst(0) depctr_sa_sdst(0)", "9e 0f 88 bf"),
    ("gfx1100", "exp mrt3 v0, off, v2, off done", "35 08 00 f8 00 00 02 00"),
    ("gfx1100", "exp pos0 v1, v2, v3, v4 done row_en", "cf 28 00 f8 01 02 03 04"),
    ("gfx1100", "exp dual_src_blend1 v1, v2, v3, v4", "6f 01 00 f8 01 02 03 04"),
    ("gfx1200", "export mrt0 v0, v1, v2, v3 done", "0f 08 00 f8 00 01 02 03"),
    ("gfx1100", "s_waitcnt_depctr depctr_vm_vsrc(0)", "83 ff 88 bf"),
    ("gfx1100", "s_mov_b32 s0, (1<<4)|3", "93 00 80 be"),   # integer expressions, as llvm-mc evaluates them
    ("gfx1100", "s_mov_b32 s0, 0x100*4", "ff 00 80 be 00 04 00 00"),
    ("gfx1100", "v_add_f32 v0, 2-3, v1", "c1 02 00 06"),
    ("gfx1100", "global_load_b32 v1, v[2:3], off offset:4*4", "10 00 52 dc 02 00 7c 01"),
    ("gfx1100", "s_mov_b32 s0, (7 - 1) / 2", "83 00 80 be"),
    ("gfx1200", "s_mov_b64 s[0:1], src_shared_base", "eb 01 80 be"),
    ("gfx942", "s_mov_b32 s0, src_execz", "fc 00 80 be"),
    ("gfx942", "v_add_f32_sdwa v0, -v1, |v2| clamp dst_sel:DWORD src0_sel:BYTE_2 src1_sel:WORD_0",
     "f9 04 00 02 01 36 12 24"),
    ("gfx942", "v_cmp_lt_f32_sdwa s[4:5], v1, v2 src0_sel:WORD_1", "f9 04 82 7c 01 84 05 06"),
    ("gfx1100", "lds_param_load v1, attr3.z wait_vdst:2", "01 0e 02 ce"),
    ("gfx1100", "v_interp_p10_f32 v1, -v2, v3, v4 wait_exp:5", "01 05 00 cd 02 07 12 24"),
    ("gfx1200", "tbuffer_load_format_x v1, off, s[4:7], null format:[BUF_FMT_32_FLOAT]",
     "7c 00 20 c4 01 08 00 0b 00 00 00 00"),
    ("gfx942", "tbuffer_load_format_x v1, off, s[4:7], 0 format:[BUF_DATA_FORMAT_32,BUF_NUM_FORMAT_FLOAT]",
     "00 00 a0 eb 00 01 01 80"),
    # image instructions and the operand shapes of issue 25's last refusals (bytes from llvm-mc-19)
    ("gfx1100", "image_load v0, [v1, v5], s[4:11] dmask:0x1 dim:SQ_RSRC_IMG_2D", "05 01 00 f0 01 00 01 00 05 00 00 00"),
    ("gfx1100", "image_sample v[0:3], v1, s[4:11], s[100:103] dmask:0xf dim:SQ_RSRC_IMG_2D a16",
     "04 0f 6d f0 01 00 01 64"),
    ("gfx1100", "image_sample_c_d_o v0, v[1:8], s[4:11], s[100:103] dmask:0x1 dim:SQ_RSRC_IMG_1D",
     "00 01 ac f0 01 00 01 64"),
    ("gfx1100", "image_atomic_cmpswap v[0:1], v1, s[4:11] dmask:0x3 dim:SQ_RSRC_IMG_1D glc", "00 43 2c f0 01 00 01 00"),
    ("gfx1100", "image_bvh_intersect_ray v[4:7], [v9, v10, v[11:13], v[14:16], v[17:19]], s[4:7]",
     "81 8f 64 f0 09 04 01 00 0a 0b 0e 11"),
    ("gfx1200", "image_sample_c_d_o v0, [v1, v2, v3, v[4:5]], s[4:11], s[100:103] dmask:0x1 dim:SQ_RSRC_IMG_1D",
     "00 c0 4a e4 00 08 00 32 01 02 03 04"),
    ("gfx1200", "image_store v[0:3], v1, s[4:11] dmask:0xf dim:SQ_RSRC_IMG_1D th:TH_STORE_NT",
     "00 80 c1 d3 00 08 10 00 01 00 00 00"),
    ("gfx1200", "image_sample v[0:1], v1, s[4:11], s[100:103] dmask:0x1 dim:SQ_RSRC_IMG_1D unorm th:TH_LOAD_HT "
     "scope:SCOPE_SE r128 a16 tfe lwe d16", "78 e0 46 e4 00 09 24 32 01 00 00 00"),
    ("gfx1200", "s_prefetch_data s[16:17], 0x10, m0, 31", "c8 c7 04 f4 10 00 00 fa"),
    ("gfx1200", "s_get_barrier_state s8, m0", "7d 50 88 be"),
    ("gfx1100", "s_sendmsg_rtn_b32 s8, sendmsg(MSG_RTN_GET_DOORBELL)", "80 4c 88 be"),
    ("gfx1100", "v_mov_b16_e32 v8.h, v16.l", "10 39 10 7f"),
    ("gfx942", "v_smfmac_f32_16x16x32_f16 a[8:11], v[16:17], a[24:27], v32 cbsz:3 abid:15", "08 fb e2 d3 10 31 82 14"),
    ("gfx942", "s_set_gpr_idx_on s16, gpr_idx(SRC0,DST)", "10 09 11 bf"),
]
DATA = pathlib.Path(__file__).parent / "data"
ARCHS = ("gfx1100", "gfx1200", "gfx942")


@pytest.mark.parametrize("arch,text,want", REFERENCE, ids=[f"{a}:{t.split()[0]}" for a, t, _ in REFERENCE])
def test_reference_encoding(arch: str, text: str, want: str) -> None:
    code = tg_amd.assemble(text, arch)
    assert code.hex(" ") == want
    assert tg_amd.assemble(tg_amd.disassemble(code, arch), arch) == code


def _golden(arch: str) -> list[tuple[str, str]]:
    rows = []
    for line in (DATA / f"golden_{arch}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            hexbytes, text = line.split("\t")
            rows.append((hexbytes, text))
    return rows


@pytest.mark.parametrize("arch", ARCHS)
def test_golden_encodings(arch: str) -> None:
    rows = _golden(arch)
    assert len(rows) >= 300
    wrong = []
    for want, text in rows:
        got = tg_amd.assemble(text, arch).hex(" ")
        if got != want:
            wrong.append(f"{text}: ours {got}, llvm-mc {want}")
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("arch", ARCHS)
def test_golden_disassembly_round_trip(arch: str) -> None:
    wrong = []
    for want, text in _golden(arch):
        code = bytes.fromhex(want.replace(" ", ""))
        listing = tg_amd.disassemble(code, arch)
        if tg_amd.assemble(listing, arch) != code:
            wrong.append(f"{text} -> {listing.strip()}")
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("arch", ARCHS)
def test_whole_golden_program_decodes_in_one_stream(arch: str) -> None:
    """Concatenated, the golden bytes decode back instruction by instruction (sizes and literals right)."""
    rows = _golden(arch)
    code = b"".join(bytes.fromhex(h.replace(" ", "")) for h, _ in rows)
    from tg_amd.assembler import decode_all
    assert len(decode_all(code, arch)) == len(rows)


def test_dsl_builds_the_symbolic_and_dpp_forms() -> None:
    from tg_amd.dsl import (
        OFF,
        delay_alu,
        global_load_b32,
        hwreg,
        s,
        s_delay_alu,
        s_getreg_b32,
        s_sendmsg,
        sendmsg,
        v,
        v_add_f32,
    )
    program = [s_sendmsg(sendmsg("MSG_DEALLOC_VGPRS")), s_getreg_b32(s[8], hwreg("HW_REG_MODE", 0, 32)),
               v_add_f32(v[0], v[1], v[2], quad_perm=(1, 0, 3, 2))]
    assert tg_amd.assemble(program, "gfx1100").hex(" ") == "03 00 b6 bf 01 f8 88 b8 fa 04 00 06 01 b1 00 ff"
    assert tg_amd.assemble([s_delay_alu(delay_alu("VALU_DEP_1", "NEXT", "SALU_CYCLE_1")),
                            global_load_b32(v[1], v[2:3], OFF, th="TH_LOAD_NT", scope="SCOPE_SE")],
                           "gfx1200").hex(" ") == "91 04 87 bf 7c 00 05 ee 01 00 14 00 02 00 00 00"


def test_dsl_builds_image_instructions() -> None:
    """Address lists are Python lists; dmask/dim/a16/... are keywords (same bytes as the text form)."""
    from tg_amd.dsl import image_load, image_sample, s, v
    assert tg_amd.assemble([image_load(v[0], [v[1], v[5]], s[4:11], dmask=1, dim="SQ_RSRC_IMG_2D")],
                           "gfx1100").hex(" ") == "05 01 00 f0 01 00 01 00 05 00 00 00"
    assert tg_amd.assemble([image_sample(v[0:3], v[1], s[4:11], s[100:103], dmask=15, dim="2D", a16=True)],
                           "gfx1100").hex(" ") == "04 0f 6d f0 01 00 01 64"


@pytest.mark.parametrize("text,arch,message", [
    ("s_getreg_b32 s8, hwreg(HW_REG_NOPE)", "gfx1100", "unknown hardware register"),
    ("s_sendmsg sendmsg(MSG_NOPE)", "gfx1200", "unknown message"),
    ("v_add_f32 v0, v1, v2 row_bcast:15", "gfx1100", "row_bcast"),
    ("v_add_f32 v0, s1, v2 row_shl:1", "gfx1100", "DPP sources are VGPRs"),
    ("v_add_f64 v[0:1], v[2:3], v[4:5] row_shl:1", "gfx1200", "DPP"),
    ("global_load_b32 v1, v[2:3], off th:TH_LOAD_BYPASS", "gfx1200", "scope and th combination"),
    ("global_atomic_add_u32 v1, v[2:3], v3, off", "gfx1100", "must use glc"),
    ("buffer_load_b32 v1, v2, s[4:7], 0", "gfx1100", "off without offen/idxen"),
    ("image_load v0, v0, s[0:7]", "gfx1100", "dim: is required"),
    ("image_load v[0:1], v1, s[4:11] dmask:0x1 dim:SQ_RSRC_IMG_1D", "gfx1100", "image data size does not match"),
    ("image_sample v0, v[1:2], s[4:11], s[0:3] dmask:0x1 dim:SQ_RSRC_IMG_1D", "gfx1100",
     "image address size does not match dim and a16"),
    ("image_sample_c_d_o v0, v[1:12], s[4:11], s[0:3] dmask:0x1 dim:SQ_RSRC_IMG_3D", "gfx1100", "invalid operand"),
    ("image_gather4 v[0:3], v1, s[4:11], s[0:3] dmask:0x3 dim:SQ_RSRC_IMG_1D", "gfx1100", "only one bit must be set"),
    ("image_atomic_add v0, v1, s[4:11] dmask:0x2 dim:SQ_RSRC_IMG_1D", "gfx1100", "invalid atomic image dmask"),
    ("image_msaa_load v[0:3], v[1:2], s[4:11] dmask:0x1 dim:SQ_RSRC_IMG_2D", "gfx1100", "must be MSAA type"),
    ("image_load v0, v1, s[4:11] dim:SQ_RSRC_IMG_1D dmask:0x1", "gfx1100", "invalid operand"),
    ("image_load v0, v[1:2], s[4:11] dmask:0x1 dim:SQ_RSRC_IMG_2D", "gfx1200", "operands are not valid"),
    ("image_load v0, v1, s[4:11] dmask:0x1 dim:SQ_RSRC_IMG_1D unorm", "gfx1200", "unorm"),
    ("image_load v0, v1, s[4:11] dmask:0x1 dim:SQ_RSRC_IMG_1D th:3", "gfx1200", "expected an identifier"),
    ("image_sample v0, [v1, v2, v3, v4, v5], s[4:11], s[0:3] dmask:0x1 dim:SQ_RSRC_IMG_1D", "gfx1200",
     "at most 4 addresses"),
    ("exp null off, off, off, off", "gfx1100", "unknown export target"),
    ("s_mov_b32 s0, src_execz", "gfx1100", "does not exist"),
    ("lds_param_load v1, attr40.x", "gfx1100", "out of bounds interpolation attribute"),
    ("v_add_f32 v0, v1, v2 row_shl:1 row_shl:2", "gfx1100", "given twice"),
])
def test_refusals_say_why(text: str, arch: str, message: str) -> None:
    """Each is refused with its reason, and (where llvm-mc is at hand) llvm-mc refuses it too."""
    with pytest.raises(tg_amd.AsmError, match=message):
        tg_amd.assemble(text, arch)
    from tg_amd_cases import llvm_encode, llvm_mc
    if llvm_mc() is not None:
        assert isinstance(llvm_encode([text], arch)[0], str)

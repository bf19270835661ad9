"""Errors name the instruction, the operand and the arch; the DSL builds the same bytes as the text."""
from __future__ import annotations

import pytest
import tg_amd
from tg_amd import AsmError
from tg_amd.dsl import (
    Label,
    ds_load_b128,
    dual,
    global_load_b128,
    s,
    s_add_co_u32,
    s_branch,
    s_cbranch_scc1,
    s_cmp_lt_u32,
    s_endpgm,
    s_mov_b32,
    ttmp,
    v,
    v_add_f32,
    v_dual_mov_b32,
    v_mfma_f32_16x16x16_f16,
    v_wmma_f32_16x16x16_f16,
)


@pytest.mark.parametrize("text,arch,operand,fragment", [
    ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[12:15], v[0:7]", "gfx1200", "src0", "needs 4 VGPRs"),
    ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]", "gfx1100", "src0", "needs 8 VGPRs"),
    ("s_load_b128 s[4:6], s[0:1], 0x0", "gfx1200", "sdata", "needs 4 SGPRs"),
    ("s_mov_b64 s[1:2], 0", "gfx1100", "sdst", "multiple of 2"),
    ("ds_load_b128 v[4:7], v1 offset:65536", "gfx1200", "offset", "out of range"),
    ("global_load_b32 v1, v2, s[4:5] offset:4096", "gfx1100", "offset", "out of range"),
    ("s_movk_i32 s0, 0x10000", "gfx1200", "simm16", "out of range"),
    ("v_mov_b32 v1, 0x100000000", "gfx1200", "src0", "does not fit 32 bits"),
    ("v_mul_lo_u32 v1, v2, 0x1234", "gfx942", "src1", "literal"),
    ("v_add_f32 v300, v1, v2", "gfx1200", "vdst", "out of range"),
])
def test_bad_operand_names_instruction_operand_and_arch(text: str, arch: str, operand: str, fragment: str) -> None:
    with pytest.raises(AsmError) as info:
        tg_amd.encode(tg_amd.parse_inst(text), arch)
    message = str(info.value)
    assert fragment in message
    assert text.split()[0] in message and operand in message and arch in message


@pytest.mark.parametrize("text,arch,elsewhere", [
    ("s_barrier_wait 0xffff", "gfx1100", "gfx1200"),
    ("s_cmpk_eq_i32 s0, 1", "gfx1200", "gfx1100"),
    ("v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[2:3], a[0:3]", "gfx1200", "gfx942"),
    ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]", "gfx942", "gfx1100"),
])
def test_instruction_absent_on_arch(text: str, arch: str, elsewhere: str) -> None:
    with pytest.raises(AsmError) as info:
        tg_amd.assemble(text, arch)
    message = str(info.value)
    assert text.split()[0] in message and arch in message and elsewhere in message


def test_errors_in_text_carry_the_line() -> None:
    with pytest.raises(AsmError, match="line 3"):
        tg_amd.assemble("s_nop 0\ns_nop 0\nv_add_f32 v1, v2\n", "gfx1200")
    with pytest.raises(AsmError, match="undefined label nowhere"):
        tg_amd.assemble("s_branch nowhere", "gfx1200")
    with pytest.raises(AsmError, match="unknown arch"):
        tg_amd.assemble("s_endpgm", "gfx90000")


def test_vopd_rules() -> None:
    with pytest.raises(AsmError, match="one even and one odd"):
        tg_amd.assemble("v_dual_mov_b32 v0, v1 :: v_dual_mov_b32 v2, v3", "gfx1200")
    with pytest.raises(AsmError, match="banks"):
        tg_amd.assemble("v_dual_mov_b32 v0, v1 :: v_dual_mov_b32 v1, v5", "gfx1200")


def test_dsl_matches_text() -> None:
    program = [
        s_mov_b32(s[10], ttmp[9]),
        Label("loop"),
        s_add_co_u32(s[0], s[0], 1),
        v_add_f32(v[1], -v[2], abs(v[3]), clamp=True),
        s_cmp_lt_u32(s[0], 10),
        s_cbranch_scc1(Label("loop")),
        v_wmma_f32_16x16x16_f16(v[0:7], v[8:11], v[12:15], v[0:7]),
        dual(v_dual_mov_b32(v[0], 0), v_dual_mov_b32(v[1], 0)),
        ds_load_b128(v[4:7], v[1], offset=512),
        global_load_b128(v[4:7], v[6], s[4:5], offset=16),
        s_branch(Label("end")),
        Label("end"),
        s_endpgm(),
    ]
    text = """
        s_mov_b32 s10, ttmp9
    loop:
        s_add_co_u32 s0, s0, 1
        v_add_f32_e64 v1, -v2, |v3| clamp
        s_cmp_lt_u32 s0, 10
        s_cbranch_scc1 loop        // back 4 dwords
        v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]
        v_dual_mov_b32 v0, 0 :: v_dual_mov_b32 v1, 0
        ds_load_b128 v[4:7], v1 offset:512
        global_load_b128 v[4:7], v6, s[4:5] offset:16
        s_branch end
    end:
        s_endpgm
    """
    code = tg_amd.assemble(program, "gfx1200")
    assert code == tg_amd.assemble(text, "gfx1200")
    # the backward branch: from the dword after s_cbranch_scc1 back to `loop` (s_add, v_add(2), s_cmp, s_cbranch)
    assert code[4 + 4 + 8 + 4: 4 + 4 + 8 + 4 + 2] == (-5 & 0xFFFF).to_bytes(2, "little")
    listing = tg_amd.disassemble(code, "gfx1200")
    assert "s_cbranch_scc1 L_4" in listing and tg_amd.assemble(listing, "gfx1200") == code


def test_dsl_mfma_and_unknown_name() -> None:
    code = tg_amd.assemble([v_mfma_f32_16x16x16_f16(tg_amd.a[0:3], v[0:1], v[2:3], tg_amd.a[0:3])], "gfx942")
    assert code.hex(" ") == "00 80 cd d3 00 05 02 04"
    import importlib
    dsl = importlib.import_module("tg_amd.dsl")
    with pytest.raises(AttributeError, match="not a known mnemonic"):
        dsl.v_frobnicate_b32  # noqa: B018


def test_plugin_module_is_cheap_and_registers_the_amd_device() -> None:
    import subprocess
    import sys
    code = ("import sys, tg_amd.plugin as p; assert p.TG_HOOKSPEC_VERSION == 1; "
            "print(sorted(m for m in sys.modules if m.startswith('tg_amd.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['tg_amd.plugin']"   # the device and emulator load when a device is opened
    import tg_amd.plugin
    devices: list[str] = []
    renderers: list[tuple[str, str]] = []
    tg_amd.plugin.tg_register_devices(lambda name, *a, **k: devices.append(name))
    tg_amd.plugin.tg_register_renderers(lambda dev, name, *a, **k: renderers.append((dev, name)))
    assert devices == ["AMD"] and renderers == [("AMD", "HW"), ("AMD", "EMU")]

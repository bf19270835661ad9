"""The emulator's exact counts (tg_amd.emu_counters) on kernels written to have known counts: instructions by class,
LDS bank conflicts under the stated model (32 dword banks; 32 lanes per pass for b32, halves for b64, quarters for
b128), waits executed and how many had to wait. Every expected figure is derived by hand in the test."""
from __future__ import annotations

import numpy as np
import pytest
import tg_amd
from tg_amd.emu_counters import LDS_MODELS, bank_conflicts, instruction_class
from tg_amd.emulator import run_kernel

RDNA = ["gfx1100", "gfx1200"]
MODEL = LDS_MODELS["rdna3"]
LANES = np.arange(32)


def ds_wait(arch: str) -> str:
    return "s_wait_dscnt 0" if arch == "gfx1200" else "s_waitcnt lgkmcnt(0)"


def run(src: str, arch: str, threads: int = 32):
    out = np.zeros(1, dtype=np.uint32)
    return run_kernel(tg_amd.assemble(src + "\ns_endpgm", arch), arch, [out], global_size=(1, 1, 1),
                      local_size=(threads, 1, 1))


def test_the_model_by_hand() -> None:
    assert bank_conflicts(LANES * 4, LANES, 4, MODEL) == 0        # one dword per bank
    assert bank_conflicts(LANES * 0, LANES, 4, MODEL) == 0        # all lanes read one dword: a broadcast
    assert bank_conflicts(LANES * 8, LANES, 4, MODEL) == 1        # stride 2 dwords: 16 banks, 2 dwords each
    assert bank_conflicts(LANES * 128, LANES, 4, MODEL) == 31     # stride 32 dwords: one bank, 32 dwords
    assert bank_conflicts(LANES * 8, LANES, 8, MODEL) == 0        # b64: two passes of 16 lanes x 2 dwords
    assert bank_conflicts(LANES * 16, LANES, 16, MODEL) == 0      # b128: four passes of 8 lanes x 4 dwords
    # b128 at a stride of 8 dwords: in each pass of 8 lanes, lanes i and i+4 share 4 banks: 1 extra cycle x 4 passes
    assert bank_conflicts(LANES * 32, LANES, 16, MODEL) == 4
    # only the active lanes ask: lanes 0 and 16 at stride 32 dwords share bank 0 in the one b32 pass
    assert bank_conflicts(np.array([0, 16 * 128]), np.array([0, 16]), 4, MODEL) == 1
    # ... but in a b64 access they are in different halves
    assert bank_conflicts(np.array([0, 16 * 128]), np.array([0, 16]), 8, MODEL) == 0


def test_classes_by_mnemonic() -> None:
    cases = {"v_wmma_f32_16x16x16_f16": "WMMA", "v_add_f32": "VALU", "v_dual_mul_f32 :: v_dual_add_f32": "VALU",
             "s_add_u32": "SALU", "s_load_b128": "scalar memory", "ds_load_b32": "LDS",
             "global_store_b32": "global memory", "buffer_load_b32": "global memory", "s_waitcnt": "wait",
             "s_wait_dscnt": "wait", "s_cbranch_scc1": "branch", "s_endpgm": "other", "s_barrier_wait": "other"}
    assert {name: instruction_class(name) for name in cases} == cases


@pytest.mark.parametrize("arch", RDNA)
def test_a_kernel_with_known_counts(arch: str) -> None:
    """Per wave: 3 VALU (2 shifts, 1 mov), 2 SALU, 3 LDS, 2 waits, 1 other (s_endpgm); the stores conflict as
    derived above: stride 2 dwords b32 -> 1, stride 32 dwords b32 -> 31, consecutive b64 -> 0. The first wait has
    the three stores to complete; the second has nothing left."""
    src = f"""
    v_lshlrev_b32 v1, 3, v0
    v_lshlrev_b32 v2, 7, v0
    v_mov_b32 v3, v0
    s_mov_b32 s8, 1
    s_add_u32 s8, s8, 2
    ds_store_b32 v1, v0
    ds_store_b32 v2, v0
    ds_store_b64 v1, v[2:3] offset:8192
    {ds_wait(arch)}
    {ds_wait(arch)}"""
    stats = run(src, arch, threads=64)   # two waves: every count doubles
    assert stats.waves == 2
    assert dict(stats.by_class) == {"VALU": 6, "SALU": 4, "LDS": 6, "wait": 4, "other": 2}
    assert stats.lds_accesses == 6
    assert stats.lds_bank_conflicts == 2 * (1 + 31 + 0)
    assert (stats.waits, stats.waits_that_waited) == (4, 2)


@pytest.mark.parametrize("arch", RDNA)
def test_partial_wave_counts_only_live_lanes(arch: str) -> None:
    # 17 live lanes at stride 32 dwords: one bank asked for 17 dwords -> 16 extra cycles
    stats = run(f"v_lshlrev_b32 v1, 7, v0\nds_store_b32 v1, v0\n{ds_wait(arch)}", arch, threads=17)
    assert stats.lds_bank_conflicts == 16


def test_the_device_offers_the_counts_to_a_profile() -> None:
    from tg_amd.device import AmdEmuDevice, EmuProgram, record_run
    source = AmdEmuDevice("AMD:EMU").profile_counters()
    before = source.read()
    stats = run(f"v_lshlrev_b32 v1, 7, v0\nds_store_b32 v1, v0\n{ds_wait('gfx1200')}", "gfx1200")
    record_run(stats)
    after = source.read()
    assert after["lds-bank-conflicts"] - before.get("lds-bank-conflicts", 0) == 31
    assert after["instructions-lds"] - before.get("instructions-lds", 0) == 1
    assert after["waits-that-waited"] - before.get("waits-that-waited", 0) == 1
    assert source.refused == {}
    assert EmuProgram  # (the loader records every emulator run it makes)

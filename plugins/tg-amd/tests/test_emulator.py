"""Emulator, one instruction at a time: results against the ISA's definition of each instruction,
computed independently here with Python integers or numpy (not with the emulator's own tables).

Programs are assembled with ``tg_amd.assemble`` and run from their bytes; registers are seeded with
``Program.run_wave`` and read back from the wave.
"""
from __future__ import annotations

import numpy as np
import pytest
import tg_amd
from tg_amd.emu_state import EmulatorError
from tg_amd.emulator import Program, run_kernel

RDNA = ["gfx1200", "gfx1100"]
M32 = 0xFFFFFFFF
RNG = np.random.default_rng(1234)


def run(src: str, arch: str, v=None, s=None, exec_mask=M32, buffers=(), waves=1):
    code = tg_amd.assemble(src + "\ns_endpgm", arch)
    return Program(code, arch).run_wave(v, s, exec_mask, tuple(buffers), waves)


def rand_u32(n=32):
    vals = RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    vals[:4] = [0, 1, M32, 0x80000000]
    return vals


def load_wait(arch):
    return "s_wait_loadcnt 0" if arch == "gfx1200" else "s_waitcnt vmcnt(0)"


def ds_wait(arch):
    return "s_wait_dscnt 0" if arch == "gfx1200" else "s_waitcnt lgkmcnt(0)"


def km_wait(arch):
    return "s_wait_kmcnt 0" if arch == "gfx1200" else "s_waitcnt lgkmcnt(0)"


# -------------------------------------------------------------------------------- vector integer ALU

def _sext(x):
    return x - (1 << 32) if x >> 31 else x


INT_CASES = {   # instruction text, reference per lane on Python ints a=v1, b=v2, c=v3
    "v_add_nc_u32 v0, v1, v2": lambda a, b, c: (a + b) & M32,
    "v_sub_nc_u32 v0, v1, v2": lambda a, b, c: (a - b) & M32,
    "v_subrev_nc_u32 v0, v1, v2": lambda a, b, c: (b - a) & M32,
    "v_mul_lo_u32 v0, v1, v2": lambda a, b, c: (a * b) & M32,
    "v_mul_hi_u32 v0, v1, v2": lambda a, b, c: (a * b) >> 32,
    "v_mul_u32_u24 v0, v1, v2": lambda a, b, c: ((a & 0xFFFFFF) * (b & 0xFFFFFF)) & M32,
    "v_mad_u32_u24 v0, v1, v2, v3": lambda a, b, c: ((a & 0xFFFFFF) * (b & 0xFFFFFF) + c) & M32,
    "v_lshlrev_b32 v0, v1, v2": lambda a, b, c: (b << (a & 31)) & M32,
    "v_lshrrev_b32 v0, v1, v2": lambda a, b, c: b >> (a & 31),
    "v_ashrrev_i32 v0, v1, v2": lambda a, b, c: (_sext(b) >> (a & 31)) & M32,
    "v_and_b32 v0, v1, v2": lambda a, b, c: a & b,
    "v_or_b32 v0, v1, v2": lambda a, b, c: a | b,
    "v_xor_b32 v0, v1, v2": lambda a, b, c: a ^ b,
    "v_not_b32 v0, v1": lambda a, b, c: ~a & M32,
    "v_min_u32 v0, v1, v2": lambda a, b, c: min(a, b),
    "v_max_i32 v0, v1, v2": lambda a, b, c: a if _sext(a) > _sext(b) else b,
    "v_bfe_u32 v0, v1, v2, v3": lambda a, b, c: (a >> (b & 31)) & ((1 << (c & 31)) - 1),
    "v_lshl_add_u32 v0, v1, v2, v3": lambda a, b, c: ((a << (b & 31)) + c) & M32,
    "v_lshl_or_b32 v0, v1, v2, v3": lambda a, b, c: ((a << (b & 31)) | c) & M32,
    "v_add3_u32 v0, v1, v2, v3": lambda a, b, c: (a + b + c) & M32,
    "v_and_or_b32 v0, v1, v2, v3": lambda a, b, c: (a & b) | c,
}


@pytest.mark.parametrize("arch", RDNA)
@pytest.mark.parametrize("text", list(INT_CASES))
def test_vector_integer_ops(text, arch):
    a, b, c = rand_u32(), rand_u32(), rand_u32()
    w = run(text, arch, {1: a, 2: b, 3: c})[0]
    expect = [INT_CASES[text](int(x), int(y), int(z)) for x, y, z in zip(a, b, c, strict=True)]
    assert w.v[0].tolist() == expect


@pytest.mark.parametrize("arch", RDNA)
def test_inline_constants_and_literals(arch):
    a = rand_u32()
    w = run("v_add_nc_u32 v0, -1, v1\nv_add_nc_u32 v2, 0x12345, v1\nv_mul_lo_u32 v3, v1, 8192\n"
            "v_mov_b32 v4, 0.5\nv_mov_b32 v5, s7", arch, {1: a}, {7: 0xDEADBEEF})[0]
    assert w.v[0].tolist() == [(int(x) - 1) & M32 for x in a]
    assert w.v[2].tolist() == [(int(x) + 0x12345) & M32 for x in a]
    assert w.v[3].tolist() == [(int(x) * 8192) & M32 for x in a]
    assert set(w.v[4].tolist()) == {0x3F000000} and set(w.v[5].tolist()) == {0xDEADBEEF}


@pytest.mark.parametrize("arch", RDNA)
def test_exec_masks_vector_writes(arch):
    old, new = rand_u32(), rand_u32()
    w = run("v_mov_b32 v0, v1", arch, {0: old, 1: new}, exec_mask=0x0000FF0F)[0]
    on = [(0x0000FF0F >> lane) & 1 for lane in range(32)]
    assert w.v[0].tolist() == [int(n) if e else int(o) for o, n, e in zip(old, new, on, strict=True)]


# -------------------------------------------------------------------------------- float ALU

def _f32(x):
    return np.asarray(x, np.float32).view(np.uint32)


@pytest.mark.parametrize("arch", RDNA)
def test_float_ops(arch):
    a = RNG.standard_normal(32).astype(np.float32) * 100
    b = RNG.standard_normal(32).astype(np.float32)
    c = RNG.standard_normal(32).astype(np.float32)
    w = run("v_add_f32 v0, v1, v2\nv_mul_f32 v4, v1, v2\nv_fma_f32 v5, v1, v2, v3\nv_fma_f32 v6, -v1, |v2|, v3\n"
            "v_sub_f32 v7, v1, v2\nv_max_num_f32 v8, v1, v2" if arch == "gfx1200" else
            "v_add_f32 v0, v1, v2\nv_mul_f32 v4, v1, v2\nv_fma_f32 v5, v1, v2, v3\nv_fma_f32 v6, -v1, |v2|, v3\n"
            "v_sub_f32 v7, v1, v2\nv_max_f32 v8, v1, v2", arch, {1: _f32(a), 2: _f32(b), 3: _f32(c)})[0]
    f = w.v.view(np.float32)
    np.testing.assert_array_equal(f[0], a + b)
    np.testing.assert_array_equal(f[4], a * b)
    # a*b is exact in float64 for float32 inputs, so fma = one rounding of the exact a*b + c
    np.testing.assert_array_equal(f[5], (a.astype(np.float64) * b + c).astype(np.float32))
    np.testing.assert_array_equal(f[6], (-a.astype(np.float64) * np.abs(b) + c).astype(np.float32))
    np.testing.assert_array_equal(f[7], a - b)
    np.testing.assert_array_equal(f[8], np.maximum(a, b))


@pytest.mark.parametrize("arch", RDNA)
def test_conversions(arch):
    x = np.array([0.0, -0.0, 1.5, -1.5, 65504.0, 1e6, -1e10, np.nan, 2.5, 3.5, 1e10, 4294967295.0, 0.1, 1 / 3,
                  -7.9, 7.9] * 2, dtype=np.float32)
    w = run("v_cvt_f16_f32 v1, v0\nv_cvt_f32_f16 v2, v1\nv_cvt_u32_f32 v3, v0\nv_cvt_i32_f32 v4, v0\n"
            "v_cvt_f32_u32 v5, v6", arch, {0: _f32(x), 6: rand_u32()})[0]
    with np.errstate(over="ignore"):
        half = x.astype(np.float16)
    assert w.v[1].tolist() == half.view(np.uint16).astype(np.uint32).tolist()   # high half zero
    np.testing.assert_array_equal(w.v[2].view(np.float32), half.astype(np.float32))
    # ISA: truncate toward zero, NaN -> 0, out of range saturates
    u = [0 if np.isnan(v) or v <= 0 else M32 if v >= 2**32 else int(v) for v in x.astype(np.float64)]
    i = [0 if np.isnan(v) else 2**31 - 1 if v >= 2**31 else -(2**31) if v <= -(2**31) else int(v)
         for v in x.astype(np.float64)]
    assert w.v[3].tolist() == u
    assert w.v[4].view(np.int32).tolist() == i
    np.testing.assert_array_equal(w.v[5].view(np.float32), w.v[6].astype(np.float32))


# -------------------------------------------------------------------------------- compares, carries, VOPD

@pytest.mark.parametrize("arch", RDNA)
def test_compare_cndmask_and_64bit_add(arch):
    a, b, c, d = rand_u32(), rand_u32(), rand_u32(), rand_u32()
    w = run("v_cmp_lt_u32 vcc_lo, v1, v2\nv_cndmask_b32 v0, v3, v4, vcc_lo\n"
            "v_cmp_gt_i32_e64 s20, v1, v2\n"
            "v_add_co_u32 v5, vcc_lo, v1, v3\nv_add_co_ci_u32_e32 v6, vcc_lo, v2, v4, vcc_lo\n"
            "v_sub_co_u32 v7, s21, v1, v2", arch, {1: a, 2: b, 3: c, 4: d})[0]
    lt = [int(x) < int(y) for x, y in zip(a, b, strict=True)]
    assert w.v[0].tolist() == [int(y) if t else int(x) for x, y, t in zip(c, d, lt, strict=True)]
    assert w.s[20] == sum(1 << lane for lane in range(32) if _sext(int(a[lane])) > _sext(int(b[lane])))
    total = [(int(x) | int(y) << 32) + (int(z) | int(t) << 32) for x, y, z, t in zip(a, b, c, d, strict=True)]
    got = [int(lo) | int(hi) << 32 for lo, hi in zip(w.v[5], w.v[6], strict=True)]
    assert got == [t & (2**64 - 1) for t in total]
    assert w.s[106] == sum(1 << lane for lane in range(32) if total[lane] >> 64)   # carry out of the high add
    assert w.s[21] == sum(1 << lane for lane in range(32) if int(a[lane]) < int(b[lane]))   # borrow


@pytest.mark.parametrize("arch", RDNA)
def test_vopd_reads_both_sources_before_writing(arch):
    a, b = rand_u32(), rand_u32()
    w = run("v_dual_mov_b32 v0, v1 :: v_dual_mov_b32 v1, v0", arch, {0: a, 1: b})[0]
    assert w.v[0].tolist() == b.tolist() and w.v[1].tolist() == a.tolist()


@pytest.mark.parametrize("arch", RDNA)
def test_readfirstlane(arch):
    a = rand_u32()
    w = run("v_readfirstlane_b32 s9, v1", arch, {1: a}, exec_mask=0xFFFF0000)[0]
    assert w.s[9] == int(a[16])


# -------------------------------------------------------------------------------- scalar ALU and branches

@pytest.mark.parametrize("arch", RDNA)
def test_scalar_carry_chain_and_compares(arch):
    add, addc = ("s_add_co_u32", "s_add_co_ci_u32") if arch == "gfx1200" else ("s_add_u32", "s_addc_u32")
    sub = "s_sub_co_u32" if arch == "gfx1200" else "s_sub_u32"
    x, y = 0xFFFFFFF0_00000010, 0x00000020_FFFFFFF5
    w = run(f"{add} s10, s2, s4\n{addc} s11, s3, s5\ns_cselect_b32 s12, 7, 9\n"
            f"{sub} s13, 1, 2\ns_cselect_b32 s14, 7, 9\ns_lshl_b32 s15, s2, 4\ns_bfe_u32 s16, s4, 0x40004\n"
            "s_mul_i32 s17, s2, -3\ns_cmp_lt_i32 s17, 0\ns_cselect_b32 s18, 1, 2", arch,
            s={2: x & M32, 3: x >> 32, 4: y & M32, 5: y >> 32})[0]
    assert w.s[10] | w.s[11] << 32 == (x + y) & (2**64 - 1)
    assert w.s[12] == (7 if (x + y) >> 64 else 9)          # SCC = carry out of the high half
    assert w.s[13] == M32 and w.s[14] == 7                 # 1 - 2 borrows
    assert w.s[15] == (0x10 << 4) and w.s[16] == (y & M32) >> 4 & 0xF
    assert w.s[17] == (0x10 * -3) & M32 and w.s[18] == 1


@pytest.mark.parametrize("arch", RDNA)
def test_branch_loop(arch):
    add = "s_add_co_i32" if arch == "gfx1200" else "s_add_i32"
    w = run(f"s_mov_b32 s1, 0\ns_mov_b32 s2, 10\nloop:\n{add} s1, s1, s2\n{add} s2, s2, -1\n"
            "s_cmp_lg_u32 s2, 0\ns_cbranch_scc1 loop\nv_mov_b32 v0, s1", arch)[0]
    assert w.s[1] == 55 and set(w.v[0].tolist()) == {55}


@pytest.mark.parametrize("arch", RDNA)
def test_saveexec_and_execz_branch(arch):
    w = run("v_cmp_gt_u32 vcc_lo, 4, v0\ns_and_saveexec_b32 s8, vcc_lo\nv_mov_b32 v1, 1\ns_mov_b32 exec_lo, s8\n"
            "s_mov_b32 exec_lo, 0\ns_cbranch_execz skip\nv_mov_b32 v2, 5\nskip:\ns_mov_b32 exec_lo, s8",
            arch, {1: np.zeros(32), 2: np.zeros(32)})[0]
    assert w.v[1].tolist() == [1] * 4 + [0] * 28
    assert w.s[8] == M32 and w.v[2].tolist() == [0] * 32


# -------------------------------------------------------------------------------- memory

@pytest.mark.parametrize("arch", RDNA)
def test_global_loads_and_stores(arch):
    src = np.arange(256, dtype=np.uint32) * 0x01010101 + 0x80007000
    dst = np.zeros(512, dtype=np.uint32)
    w = run(f"s_load_b128 s[4:7], s[0:1], 0x0\n{km_wait(arch)}\n"
            "v_lshlrev_b32 v1, 4, v0\n"
            "global_load_b128 v[4:7], v1, s[6:7] offset:16\nglobal_load_b32 v8, v1, s[6:7]\n"
            "global_load_u16 v9, v1, s[6:7] offset:2\nglobal_load_i16 v10, v1, s[6:7] offset:2\n"
            f"{load_wait(arch)}\n"
            "global_store_b128 v1, v[4:7], s[4:5]\nglobal_store_b16 v1, v8, s[4:5] offset:1024\n"
            "global_store_b32 v1, v9, s[4:5] offset:1028\nglobal_store_b32 v1, v10, s[4:5] offset:1032",
            arch, buffers=(dst, src))[0]
    rows = np.arange(32)
    np.testing.assert_array_equal(dst[:128].reshape(32, 4), src[4 * rows[:, None] + 4 + np.arange(4)])
    hi16 = src[4 * rows] >> 16
    assert (dst[256 + 4 * rows] == src[4 * rows] & 0xFFFF).all()              # b16 store: low half, rest kept
    assert (dst[257 + 4 * rows] == hi16).all()                                # u16 zero-extends
    assert (dst[258 + 4 * rows] == (hi16.astype(np.int16).astype(np.int64) & M32)).all()   # i16 sign-extends
    assert w.v[8].tolist() == src[4 * rows].tolist()


@pytest.mark.parametrize("arch", RDNA)
def test_load_lands_at_the_wait(arch):
    src = np.arange(32, dtype=np.uint32) + 100
    w = run(f"s_load_b64 s[4:5], s[0:1], 0x0\n{km_wait(arch)}\nv_lshlrev_b32 v1, 2, v0\nv_mov_b32 v2, 7\n"
            f"global_load_b32 v2, v1, s[4:5]\nv_mov_b32 v3, v2\n{load_wait(arch)}\nv_mov_b32 v4, v2",
            arch, buffers=(src,))[0]
    assert w.v[3].tolist() == [7] * 32            # read before the wait: the old value
    assert w.v[4].tolist() == src.tolist()


@pytest.mark.parametrize("arch", RDNA)
def test_lds_store_load_and_16bit_halves(arch):
    vals = rand_u32()
    w = run("v_lshlrev_b32 v1, 3, v0\nds_store_b32 v1, v2 offset:4\nds_store_b16 v1, v2\n"
            "ds_store_b16_d16_hi v1, v2 offset:2\nds_load_b64 v[4:5], v1\nds_load_u16_d16_hi v6, v1 offset:2\n"
            f"{ds_wait(arch)}", arch, {2: vals, 6: np.full(32, 0xAAAABBBB)})[0]
    assert w.v[4].tolist() == vals.tolist() and w.v[5].tolist() == vals.tolist()
    assert w.v[6].tolist() == [(int(x) & 0xFFFF0000) | 0xBBBB for x in vals]


@pytest.mark.parametrize("arch", RDNA)
def test_out_of_bounds_access_is_an_error(arch):
    buf = np.zeros(16, np.uint32)
    with pytest.raises(EmulatorError, match="outside every buffer"):
        run(f"s_load_b64 s[4:5], s[0:1], 0x0\n{km_wait(arch)}\nv_lshlrev_b32 v1, 2, v0\n"
            "global_store_b32 v1, v0, s[4:5]", arch, buffers=(buf,))
    with pytest.raises(EmulatorError, match="outside the 65536 bytes of LDS"):
        run(f"v_mov_b32 v1, 0xfffe\nds_store_b32 v1, v0\n{ds_wait(arch)}", arch)


# -------------------------------------------------------------------------------- waves, barriers, launch state

def _barrier(arch):
    return "s_barrier_signal -1\ns_barrier_wait -1" if arch == "gfx1200" else "s_barrier"


@pytest.mark.parametrize("arch", RDNA)
@pytest.mark.parametrize("wait_before_barrier", [True, False])
def test_barrier_orders_lds_between_waves(arch, wait_before_barrier):
    """Every wave stores its ids to LDS, then reads the next wave's. Without the wait before the barrier
    the stores are still in flight (as on hardware) and the other waves see zeros."""
    wait = ds_wait(arch) + "\n" if wait_before_barrier else ""
    src = (f"v_lshlrev_b32 v1, 2, v0\nds_store_b32 v1, v0\n{wait}{_barrier(arch)}\n"
           f"v_add_nc_u32 v2, 128, v1\nv_and_b32 v2, 0xff, v2\nds_load_b32 v3, v2\n{ds_wait(arch)}")
    waves = run(src, arch, waves=2)
    got = np.concatenate([w.v[3] for w in waves])
    expect = (np.arange(64) + 32) % 64
    if wait_before_barrier:
        assert got.tolist() == expect.tolist()
    else:
        assert got[32:].tolist() == [0] * 32   # wave 1 passed the barrier while wave 0's stores were pending


@pytest.mark.parametrize("arch", RDNA)
def test_launch_state(arch):
    """Workgroup ids where the hardware puts them, packed thread ids in v0, the kernarg pointer in s[0:1]."""
    grid, block = (2, 3, 2), (4, 2, 5)
    out = np.zeros((12, 64), np.uint32)
    ids = ("s_mov_b32 s10, ttmp9\ns_and_b32 s11, ttmp7, 0xffff\ns_lshr_b32 s12, ttmp7, 16" if arch == "gfx1200"
           else "s_mov_b32 s10, s2\ns_mov_b32 s11, s3\ns_mov_b32 s12, s4")
    add = "s_add_co_u32" if arch == "gfx1200" else "s_add_u32"
    # thread (x, y, z) of workgroup (gx, gy, gz) stores v0 at out[(gz*3 + gy)*2 + gx, x + 4y + 8z]
    src = f"""
    {ids}
    s_load_b64 s[4:5], s[0:1], 0x0
    s_mul_i32 s13, s12, 3
    {add} s13, s13, s11
    s_lshl_b32 s13, s13, 1
    {add} s13, s13, s10
    s_lshl_b32 s13, s13, 6
    v_and_b32 v1, 0x3ff, v0
    v_bfe_u32 v2, v0, 10, 10
    v_lshl_add_u32 v1, v2, 2, v1
    v_lshrrev_b32 v2, 20, v0
    v_lshl_add_u32 v1, v2, 3, v1
    v_add_nc_u32 v1, s13, v1
    v_lshlrev_b32 v1, 2, v1
    {km_wait(arch)}
    global_store_b32 v1, v0, s[4:5]
    s_endpgm
    """
    stats = run_kernel(tg_amd.assemble(src, arch), arch, [out], grid, block)
    assert stats.workgroups == 12 and stats.waves == 12 * 2
    expect = np.zeros((12, 64), np.uint32)
    for z in range(5):
        for y in range(2):
            for x in range(4):
                expect[:, x + 4 * y + 8 * z] = x | y << 10 | z << 20
    np.testing.assert_array_equal(out, expect)


# -------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("arch", RDNA)
def test_unsupported_instruction_names_instruction_and_arch(arch):
    code = tg_amd.assemble("v_mov_b32 v0, 1\nv_sin_f32 v1, v0\ns_endpgm", arch)
    prog = Program(code, arch)
    assert len(prog.unsupported) == 1
    with pytest.raises(EmulatorError, match=f"v_sin_f32.*not supported by the emulator.*arch {arch}, byte 4"):
        prog.run_wave()


def test_cdna_code_is_refused():
    with pytest.raises(EmulatorError, match="RDNA3/RDNA4 wave32 code, not gfx942"):
        Program(tg_amd.assemble("s_endpgm", "gfx942"), "gfx942")


def test_undecodable_bytes_are_an_error():
    with pytest.raises(EmulatorError, match="cannot decode"):
        Program(b"\xff\xff\xff\xff", "gfx1200")


@pytest.mark.parametrize("arch", RDNA)
def test_runaway_loop_and_missing_endpgm(arch, monkeypatch):
    import tg_amd.emulator as emu
    monkeypatch.setattr(emu, "MAX_INSTRUCTIONS", 1000)
    with pytest.raises(EmulatorError, match="runaway loop"):
        Program(tg_amd.assemble("loop:\ns_branch loop", arch), arch).run_wave()
    with pytest.raises(EmulatorError, match="no s_endpgm"):
        Program(tg_amd.assemble("s_nop 0", arch), arch).run_wave()


# -------------------------------------------------------------------------------- code objects

def _ids_kernel() -> str:
    """Stores s2, s3, s4 and ttmp9 at out[0:4] (RDNA3 code: where its workgroup ids may be)."""
    return """
    s_load_b64 s[8:9], s[0:1], 0x0
    v_mov_b32 v1, s2
    v_mov_b32 v2, s3
    v_mov_b32 v3, s4
    v_mov_b32 v4, ttmp9
    v_mov_b32 v5, ttmp7
    v_mov_b32 v6, 0
    s_waitcnt lgkmcnt(0)
    global_store_b128 v6, v[1:4], s[8:9]
    s_endpgm
    """


def test_code_object_descriptor_places_workgroup_ids_on_rdna3():
    """Only y and z enabled: y lands in s2 and z in s3, right after the two kernarg-pointer user SGPRs."""
    from tg_amd.emulator import load_code_object, run_code_object
    co = tg_amd.code_object("ids", _ids_kernel(), "gfx1100", kernargs=["out"], workgroup_id=(False, True, True))
    _, launch = load_code_object(co)
    assert launch.user_sgprs == 2 and launch.workgroup_id == (False, True, True)
    out = np.zeros(4, np.uint32)
    run_code_object(co, [out], (1, 5, 7), (32,))   # every workgroup writes the same place: the last wins
    assert out[:2].tolist() == [4, 6]


def test_code_object_lds_size_is_enforced():
    from tg_amd.emulator import run_code_object
    src = "v_mov_b32 v1, 2000\nds_store_b32 v1, v0\ns_wait_dscnt 0\ns_endpgm"
    run_code_object(tg_amd.code_object("lds", src, "gfx1200", lds_size=4096), [], (1,), (32,))
    with pytest.raises(EmulatorError, match="outside the 1024 bytes of LDS"):
        run_code_object(tg_amd.code_object("lds", src, "gfx1200", lds_size=1024), [], (1,), (32,))


def test_code_objects_the_emulator_cannot_honour_are_refused():
    from tg_amd.emulator import load_code_object
    with pytest.raises(EmulatorError, match="dispatch_ptr"):
        load_code_object(tg_amd.code_object("k", "s_endpgm", "gfx1200", dispatch_ptr=True))
    with pytest.raises(EmulatorError, match="wave64"):
        load_code_object(tg_amd.code_object("k", "s_endpgm", "gfx1100", wave32=False))
    with pytest.raises(EmulatorError, match="cannot load the code object"):
        load_code_object(b"\x7fELF" + bytes(60))


@pytest.mark.parametrize("arch", ["gfx1100"])
def test_global_16bit_halves(arch):
    """d16 loads replace one half of the VGPR and keep the other; d16_hi stores write the high half."""
    src = np.arange(64, dtype=np.uint16) * 0x0101 + 0x1000
    dst = np.zeros(64, dtype=np.uint16)
    w = run("s_load_b128 s[4:7], s[0:1], 0x0\ns_waitcnt lgkmcnt(0)\nv_lshlrev_b32 v1, 1, v0\n"
            "global_load_d16_b16 v2, v1, s[6:7]\nglobal_load_d16_hi_b16 v3, v1, s[6:7]\ns_waitcnt vmcnt(0)\n"
            "global_store_d16_hi_b16 v1, v4, s[4:5]", arch, {2: np.full(32, 0xAAAABBBB), 3: np.full(32, 0xAAAABBBB),
                                                          4: np.arange(32) << 16}, buffers=(dst, src))[0]
    assert w.v[2].tolist() == [0xAAAA0000 | int(x) for x in src[:32]]
    assert w.v[3].tolist() == [int(x) << 16 | 0xBBBB for x in src[:32]]
    assert dst[:32].tolist() == list(range(32)) and not dst[32:].any()


@pytest.mark.parametrize("arch", RDNA)
def test_unsupported_modifier_is_refused_when_reached(arch):
    prog = Program(tg_amd.assemble("v_add_nc_u32_e64 v0, v1, v2 clamp\ns_endpgm", arch), arch)
    with pytest.raises(EmulatorError, match=f"v_add_nc_u32: modifier clamp is not supported.*arch {arch}"):
        prog.run_wave()


def test_the_emulator_runs_the_bytes():
    """Patching the literal in the machine code changes what runs: nothing is taken from the DSL objects."""
    code = bytearray(tg_amd.assemble("v_mul_lo_u32 v1, v0, 0x12345\ns_endpgm", "gfx1200"))
    assert code[8:12] == (0x12345).to_bytes(4, "little")
    code[8:12] = (7).to_bytes(4, "little")
    w = Program(bytes(code), "gfx1200").run_wave()[0]
    assert w.v[1].tolist() == [7 * lane for lane in range(32)]


@pytest.mark.parametrize("arch", RDNA)
def test_shift_add_sets_scc_on_carry(arch):
    w = run("s_lshl2_add_u32 s3, s1, s2\ns_cselect_b32 s4, 1, 0\ns_lshl4_add_u32 s5, s1, s2\n"
            "s_lshl1_add_u32 s6, s2, s2\ns_cselect_b32 s7, 1, 0", arch, s={1: 0x40000001, 2: 5})[0]
    assert (w.s[3], w.s[4], w.s[5]) == (((0x40000001 << 2) + 5) & M32, 1, ((0x40000001 << 4) + 5) & M32)
    assert (w.s[6], w.s[7]) == (15, 0)


# -------------------------------------------------------------------------------- DPP lane movement

def _dpp_expected(ctrl: str, a: np.ndarray, old: np.ndarray, exec_mask: int = M32) -> np.ndarray:
    """v_mov_b32 v0, v1 <ctrl> per the ISA's lane tables, written out lane by lane."""
    out = old.copy()
    parts = dict(p.split(":", 1) if ":" in p else (p, "1") for p in ctrl.split())
    bound = parts.get("bound_ctrl") == "1"
    row_mask, bank_mask = int(parts.get("row_mask", "0xf"), 0), int(parts.get("bank_mask", "0xf"), 0)
    for lane in range(32):
        if not exec_mask >> lane & 1:
            continue
        base, pos = lane - lane % 16, lane % 16
        if "quad_perm" in parts:
            src = lane - lane % 4 + [int(x) for x in parts["quad_perm"].strip("[]").split(",")][lane % 4]
        elif "row_shl" in parts:
            src = base + pos + int(parts["row_shl"]) if pos + int(parts["row_shl"]) < 16 else None
        elif "row_shr" in parts:
            src = base + pos - int(parts["row_shr"]) if pos - int(parts["row_shr"]) >= 0 else None
        elif "row_ror" in parts:
            src = base + (pos - int(parts["row_ror"])) % 16
        elif "row_mirror" in parts:
            src = base + 15 - pos
        elif "row_half_mirror" in parts:
            src = lane - lane % 8 + 7 - lane % 8
        elif "row_share" in parts:
            src = base + int(parts["row_share"])
        elif "row_xmask" in parts:
            src = base + (pos ^ int(parts["row_xmask"]))
        else:
            src = lane - lane % 8 + [int(x) for x in parts["dpp8"].strip("[]").split(",")][lane % 8]
        if "dpp8" not in parts and not (row_mask >> (lane // 16) & 1 and bank_mask >> (pos // 4) & 1):
            continue
        if src is None or not exec_mask >> src & 1:
            if bound or "dpp8" in parts:
                out[lane] = 0
            continue
        out[lane] = a[src]
    return out


DPP_CTRLS = ["quad_perm:[1,0,3,2]", "quad_perm:[3,3,0,1]", "row_shl:1", "row_shr:3", "row_shr:3 bound_ctrl:1",
             "row_ror:5", "row_mirror", "row_half_mirror", "row_share:7", "row_xmask:9",
             "row_shl:2 row_mask:0x1 bank_mask:0x5", "dpp8:[7,6,5,4,3,2,1,0]", "dpp8:[1,1,0,0,3,3,2,2]"]


@pytest.mark.parametrize("arch", RDNA)
@pytest.mark.parametrize("ctrl", DPP_CTRLS)
@pytest.mark.parametrize("exec_mask", [M32, 0xF0F0FF7F])
def test_dpp_moves_lanes(arch: str, ctrl: str, exec_mask: int) -> None:
    a, old = rand_u32(), rand_u32()
    (w,) = run(f"v_mov_b32 v0, v1 {ctrl}", arch, v={0: old, 1: a}, exec_mask=exec_mask)
    assert w.v[0].tolist() == _dpp_expected(ctrl, a, old, exec_mask).tolist()


@pytest.mark.parametrize("arch", RDNA)
def test_dpp_add_with_modifiers(arch: str) -> None:
    a = RNG.standard_normal(32).astype(np.float32)
    b = RNG.standard_normal(32).astype(np.float32)
    (w,) = run("v_add_f32 v0, -v1, |v2| row_xmask:1", arch, v={1: a.view(np.uint32), 2: b.view(np.uint32)})
    moved = a[np.arange(32) ^ 1]
    assert w.v[0].view(np.float32).tolist() == (-moved + np.abs(b)).tolist()


@pytest.mark.parametrize("arch", RDNA)
def test_dpp_row_reduction_kernel_sums_exactly(arch: str) -> None:
    """A whole kernel in assembly: each row of 16 lanes adds its values with row_shr 1/2/4/8 (the classic
    scan); lane 15 of each row then holds the row's sum, which lane 31's row adds to (v_readlane)."""
    wait = load_wait(arch)
    src = f"""
    s_load_b128 s[4:7], s[0:1], 0x0
    {km_wait(arch)}
    v_lshlrev_b32 v1, 2, v0
    global_load_b32 v2, v1, s[6:7]
    {wait}
    v_add_f32 v2, v2, v2 row_shr:1 bound_ctrl:1
    v_add_f32 v2, v2, v2 row_shr:2 bound_ctrl:1
    v_add_f32 v2, v2, v2 row_shr:4 bound_ctrl:1
    v_add_f32 v2, v2, v2 row_shr:8 bound_ctrl:1
    v_readlane_b32 s8, v2, 15
    v_readlane_b32 s9, v2, 31
    v_mov_b32 v3, s8
    v_add_f32 v3, s9, v3
    v_mov_b32 v4, 0
    global_store_b32 v4, v3, s[4:5]
    s_endpgm
    """
    x = RNG.integers(-1000, 1000, 32).astype(np.float32)
    out = np.zeros(1, dtype=np.float32)
    run_kernel(tg_amd.assemble(src, arch), arch, [out, x], global_size=(1, 1, 1), local_size=(32, 1, 1))
    assert out[0] == x.sum()


# -------------------------------------------------------------------------------- scalar float (RDNA4)

def _f32_bits(x) -> int:
    return int(np.float32(x).view(np.uint32))


def _f16_bits(x) -> int:
    return int(np.float16(x).view(np.uint16))


SFLOAT_CASES = {  # text, reference on numpy scalars a=s1, b=s2, c=s0 (f32 or f16)
    "s_add_f32 s0, s1, s2": lambda a, b, c: np.float32(a) + np.float32(b),
    "s_sub_f32 s0, s1, s2": lambda a, b, c: np.float32(a) - np.float32(b),
    "s_mul_f32 s0, s1, s2": lambda a, b, c: np.float32(a) * np.float32(b),
    "s_min_num_f32 s0, s1, s2": lambda a, b, c: np.fmin(np.float32(a), np.float32(b)),
    "s_max_num_f32 s0, s1, s2": lambda a, b, c: np.fmax(np.float32(a), np.float32(b)),
    "s_fmac_f32 s0, s1, s2": lambda a, b, c: np.float32(np.float64(a) * np.float64(b) + np.float64(c)),
    "s_floor_f32 s0, s1": lambda a, b, c: np.floor(np.float32(a)),
    "s_ceil_f32 s0, s1": lambda a, b, c: np.ceil(np.float32(a)),
    "s_trunc_f32 s0, s1": lambda a, b, c: np.trunc(np.float32(a)),
    "s_rndne_f32 s0, s1": lambda a, b, c: np.rint(np.float32(a)),
    "s_add_f16 s0, s1, s2": lambda a, b, c: np.float16(a) + np.float16(b),
    "s_mul_f16 s0, s1, s2": lambda a, b, c: np.float16(a) * np.float16(b),
    "s_rndne_f16 s0, s1": lambda a, b, c: np.rint(np.float16(a)),
}


@pytest.mark.parametrize("text", list(SFLOAT_CASES))
def test_scalar_float_ops(text: str) -> None:
    half = text.split()[0].endswith("f16")
    bits, ftype = (_f16_bits, np.float16) if half else (_f32_bits, np.float32)
    for a, b, c in [(1.5, -2.25, 0.5), (3.7, 1e-3, -8.0), (-0.5, 2.5, 1.0), (np.inf, 1.0, 0.0), (np.nan, 1.0, 2.0)]:
        (w,) = run(text, "gfx1200", s={1: bits(a), 2: bits(b), 0: bits(c)})
        want = ftype(SFLOAT_CASES[text](ftype(a), ftype(b), ftype(c)))
        got = np.uint16(w.s[0]).view(np.float16) if half else np.uint32(w.s[0]).view(np.float32)
        assert (np.isnan(got) and np.isnan(want)) or got == want, (text, a, b, c, got, want)


@pytest.mark.parametrize("cond,fn", [("lt", np.less), ("ge", np.greater_equal), ("eq", np.equal),
                                     ("u", lambda a, b: np.isnan(a) | np.isnan(b)),
                                     ("nlt", lambda a, b: ~np.less(a, b)), ("lg", lambda a, b: (a < b) | (a > b))])
def test_scalar_float_compares(cond: str, fn) -> None:
    for a, b in [(1.0, 2.0), (2.0, 1.0), (1.0, 1.0), (np.nan, 1.0)]:
        (w,) = run(f"s_cmp_{cond}_f32 s1, s2", "gfx1200", s={1: _f32_bits(a), 2: _f32_bits(b)})
        assert w.scc == int(bool(fn(np.float32(a), np.float32(b)))), (cond, a, b)


def test_scalar_float_conversions() -> None:
    (w,) = run("s_cvt_f32_i32 s0, s1\ns_cvt_i32_f32 s3, s2\ns_cvt_u32_f32 s4, s2\ns_cvt_f16_f32 s5, s2\n"
               "s_cvt_f32_f16 s6, s7", "gfx1200",
               s={1: (-7) & M32, 2: _f32_bits(-3.75), 7: _f16_bits(0.375)})
    assert np.uint32(w.s[0]).view(np.float32) == np.float32(-7)
    assert w.s[3] == (-3) & M32 and w.s[4] == 0
    assert w.s[5] == _f16_bits(-3.75) and np.uint32(w.s[6]).view(np.float32) == np.float32(0.375)


# -------------------------------------------------------------------------------- buffer loads and stores

def _descriptor_setup(arch: str, buffer_pair: str, records: int, stride: int = 0) -> str:
    """s[8:11] = a descriptor over the buffer whose address is in ``buffer_pair`` (s[6:7] or s[4:5])."""
    lo, hi = buffer_pair[2:-1].split(":")
    return f"""
    s_mov_b32 s8, s{lo}
    s_and_b32 s9, s{hi}, 0xffff
    s_or_b32 s9, s9, {stride << 16:#x}
    s_mov_b32 s10, {records:#x}
    s_mov_b32 s11, 0
    """


@pytest.mark.parametrize("arch", RDNA)
@pytest.mark.parametrize("records", [0, 6, 82, 128, 4096])
def test_buffer_load_bounds(arch: str, records: int) -> None:
    """Lane i loads dword i + 3 (offen, offset:12); lanes whose 4 bytes end past num_records read 0."""
    soff = "null" if arch == "gfx1200" else "0"
    src = f"""
    s_load_b128 s[4:7], s[0:1], 0x0
    {km_wait(arch)}
    {_descriptor_setup(arch, "s[6:7]", records)}
    v_lshlrev_b32 v1, 2, v0
    buffer_load_b32 v2, v1, s[8:11], {soff} offen offset:12
    {load_wait(arch)}
    global_store_b32 v1, v2, s[4:5]
    s_endpgm
    """
    x = RNG.integers(1, 1 << 30, 64).astype(np.uint32)
    out = np.full(32, 7, dtype=np.uint32)
    run_kernel(tg_amd.assemble(src, arch), arch, [out, x], global_size=(1, 1, 1), local_size=(32, 1, 1))
    lane = np.arange(32)
    want = np.where(lane * 4 + 12 + 4 <= records, x[lane + 3], 0)
    assert out.tolist() == want.tolist()


@pytest.mark.parametrize("arch", RDNA)
def test_buffer_store_drops_out_of_range_and_idxen_strides(arch: str) -> None:
    """idxen with a 8-byte stride: lane i writes i + 100 at byte 8 * i + 4 of ``out``; indices >= 10 are out
    of range and write nothing."""
    soff = "null" if arch == "gfx1200" else "0"
    src = f"""
    s_load_b128 s[4:7], s[0:1], 0x0
    {km_wait(arch)}
    {_descriptor_setup(arch, "s[4:5]", 10, stride=8)}
    v_add_nc_u32 v2, 0x64, v0
    buffer_store_b32 v2, v0, s[8:11], {soff} idxen offset:4
    s_endpgm
    """
    out = np.zeros(64, dtype=np.uint32)
    run_kernel(tg_amd.assemble(src, arch), arch, [out, np.zeros(1, np.uint32)], global_size=(1, 1, 1),
               local_size=(32, 1, 1))
    want = np.zeros(64, dtype=np.uint32)
    want[2 * np.arange(10) + 1] = np.arange(10) + 100
    assert out.tolist() == want.tolist()


@pytest.mark.parametrize("arch", RDNA)
def test_sopk_immediates_sign_extend(arch: str) -> None:
    """The disassembler prints SOPK immediates unsigned, as llvm-mc does; the instructions still sign-extend."""
    (w,) = run("s_movk_i32 s0, -5\ns_movk_i32 s1, 0x8000\ns_mulk_i32 s1, -1", arch)
    assert (w.s[0], w.s[1]) == ((-5) & M32, 0x8000)

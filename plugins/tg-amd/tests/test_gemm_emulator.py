"""The hand-written WMMA GEMMs (RDNA4 gfx1200, RDNA3 gfx1100) run in the emulator from their machine code.

Exact checks: integer-valued float16 inputs small enough that every product and every partial sum is an
integer below 2**24, so float32 accumulation is exact in any order and the result must equal numpy's
bit for bit. A kernel that pairs the wrong K blocks of A and B, or transposes B, fails these.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from tg_amd.emulator import run_kernel
from tg_amd.kernels.gemm import LDS_BYTES, ShapeError, check_shape, gemm_kernel

ARCHS = ["gfx1200", "gfx1100"]


def emulate(a: np.ndarray, b: np.ndarray, arch: str) -> tuple[np.ndarray, object]:
    (m, k), n = a.shape, b.shape[1]
    kern = gemm_kernel(m, n, k, arch)
    c = np.full((m, n), np.nan, np.float32)   # every element must be written
    stats = run_kernel(kern.code, arch, [c, np.ascontiguousarray(a, np.float16), np.ascontiguousarray(b, np.float16)],
                       kern.global_size, kern.local_size)
    return c, stats


def small_ints(shape: tuple[int, int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-8, 9, shape).astype(np.float16)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("size", [256, 384])
def test_gemm_exact_integers(arch, size):
    a, b = small_ints((size, size), 1), small_ints((size, size), 2)
    c, stats = emulate(a, b, arch)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))
    # 16 WMMAs per wave per K step of 16, 4 waves per 128x128 tile
    assert stats.by_name["v_wmma_f32_16x16x16_f16"] == (size // 128) ** 2 * 4 * 16 * (size // 16)


@pytest.mark.parametrize("arch", ARCHS)
def test_gemm_rectangular_exact(arch):
    """M, N, K all different: a transposed operand or swapped block index cannot hide behind symmetry."""
    a, b = small_ints((128, 96), 3), small_ints((96, 256), 4)
    c, _ = emulate(a, b, arch)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("arch", ARCHS)
def test_gemm_identity_gives_b(arch):
    b = np.random.default_rng(5).standard_normal((256, 256)).astype(np.float16)
    c, _ = emulate(np.eye(256, dtype=np.float16), b, arch)
    np.testing.assert_array_equal(c, b.astype(np.float32))


@pytest.mark.parametrize("arch", ARCHS)
def test_gemm_random_normal(arch):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((256, 384)).astype(np.float16)
    b = rng.standard_normal((384, 256)).astype(np.float16)
    c, _ = emulate(a, b, arch)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    # f32 accumulation of exact f16 products: far inside float16 tolerance
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)
    assert np.abs(c - ref).max() < 1e-4 * np.sqrt(384)


def test_kernel_uses_padded_lds_and_prefetch():
    kern = gemm_kernel(256, 256, 256, "gfx1200")
    names = [getattr(i, "name", None) for i in kern.program]
    assert LDS_BYTES == 2 * 128 * (32 + 8) * 2   # two 128-row tiles, rows of 32 halves + 8 halves padding
    # the next block's global loads are issued between the LDS stores and the WMMAs of the current block
    loop = names.index("s_barrier_wait")
    first_wmma = names.index("v_wmma_f32_16x16x16_f16")
    assert "global_load_b128" in names[loop:first_wmma]
    assert kern.global_size == (2, 2, 1) and kern.local_size == (128, 1, 1)


@pytest.mark.parametrize("shape", [(100, 128, 128), (128, 130, 128), (128, 128, 40), (0, 128, 32)])
def test_bad_shapes_are_refused(shape):
    with pytest.raises(ShapeError, match="multiple of"):
        check_shape(*shape)


@pytest.mark.parametrize("arch", ARCHS)
def test_gemm_from_its_code_object(arch):
    """The same kernel packaged as an AMDHSA code object; the emulator takes the launch state from its
    descriptor (workgroup ids x and y only, 20 KiB of LDS)."""
    import tg_amd
    from tg_amd.emulator import load_code_object, run_code_object
    kern = gemm_kernel(256, 128, 64, arch)
    co = tg_amd.code_object(kern.name, kern.code, arch, kernargs=["c", "a", "b"], lds_size=kern.lds_bytes,
                            workgroup_id=(True, True, False), max_workgroup_size=128)
    assert load_code_object(co)[1].lds_bytes == LDS_BYTES
    a, b = small_ints((256, 64), 8), small_ints((64, 128), 9)
    c = np.zeros((256, 128), np.float32)
    run_code_object(co, [c, a, b], kern.global_size, kern.local_size)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))


def test_exact_check_catches_k_block_mispairing():
    """The upstream bug, injected: A's base advanced one K block before the first loads, so A's block k+1
    meets B's block k. (A gets a spare row so the kernel still reads valid memory.) The exact check fails,
    and the emulator computes precisely what the broken kernel asks for: A shifted by 32 columns."""
    import tg_amd
    from tg_amd.inst import Inst
    from tg_amd.operands import s
    kern = gemm_kernel(256, 256, 256, "gfx1200")
    program = list(kern.program)
    first_load = next(i for i, x in enumerate(program) if getattr(x, "name", "") == "global_load_b128")
    program[first_load:first_load] = [Inst("s_add_co_u32", (s[6], s[6], 64)),
                                      Inst("s_add_co_ci_u32", (s[7], s[7], 0))]
    broken = tg_amd.assemble(program, "gfx1200")
    a, b = small_ints((257, 256), 10), small_ints((256, 256), 11)
    c = np.zeros((256, 256), np.float32)
    run_kernel(broken, "gfx1200", [c, a, b], kern.global_size, kern.local_size)
    assert not np.array_equal(c, a[:256].astype(np.float32) @ b.astype(np.float32))
    shifted = a.reshape(-1)[32:32 + 256 * 256].reshape(256, 256)
    np.testing.assert_array_equal(c, shifted.astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("arch", ARCHS)
def test_every_gemm_instruction_is_emulated(arch):
    from tg_amd.emulator import Program
    kern = gemm_kernel(256, 256, 256, arch)
    assert Program(kern.code, arch).unsupported == []


@pytest.mark.skipif(not os.environ.get("TG_FULL"), reason="bigger GEMMs run under nox -s full (TG_FULL=1)")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("shape", [(512, 512, 512), (384, 640, 224), (1024, 256, 128)])
def test_gemm_exact_bigger_shapes(arch, shape):
    m, n, k = shape
    a, b = small_ints((m, k), 12), small_ints((k, n), 13)
    c, _ = emulate(a, b, arch)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))

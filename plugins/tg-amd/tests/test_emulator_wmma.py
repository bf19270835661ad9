"""WMMA in the emulator: operands placed in VGPRs by the ISA's documented lane/register layout, the result
read back by the documented layout and compared with numpy.

RDNA4 (gfx12) v_wmma_f32_16x16x16_f16, wave32: lane l holds row l%16 of A and column l%16 of B, K values
8*(l//16)..8*(l//16)+7, two halves per VGPR (4 VGPRs); result VGPR r of lane l holds D[r + 8*(l//16)][l%16].
RDNA3 (gfx11): lane l holds row l%16 of A / column l%16 of B with all 16 K values (8 VGPRs), lanes 16-31
repeating lanes 0-15; result VGPR r of lane l holds D[2r + l//16][l%16].
"""
from __future__ import annotations

import numpy as np
import pytest
import tg_amd
from tg_amd.emu_state import EmulatorError
from tg_amd.emulator import Program

RNG = np.random.default_rng(7)


def pack(halves: np.ndarray) -> np.ndarray:
    """(32 lanes, 2n) float16 -> n VGPRs of (32,) uint32, halves (2r, 2r+1) in VGPR r (low half first)."""
    bits = halves.astype(np.float16).view(np.uint16).astype(np.uint32)
    return np.stack([bits[:, 2 * r] | bits[:, 2 * r + 1] << 16 for r in range(halves.shape[1] // 2)])


def rdna4_operands(a, b, c):
    la = np.zeros((32, 8), np.float16)
    lb = np.zeros((32, 8), np.float16)
    for lane in range(32):
        ks = range(8 * (lane // 16), 8 * (lane // 16) + 8)
        la[lane] = [a[lane % 16, k] for k in ks]
        lb[lane] = [b[k, lane % 16] for k in ks]
    lc = np.zeros((8, 32), np.float32)
    for lane in range(32):
        for r in range(8):
            lc[r, lane] = c[r + 8 * (lane // 16), lane % 16]
    return pack(la), pack(lb), lc.view(np.uint32)


def rdna4_result(regs):
    d = np.zeros((16, 16), np.float32)
    f = regs.view(np.float32)
    for lane in range(32):
        for r in range(8):
            d[r + 8 * (lane // 16), lane % 16] = f[r, lane]
    return d


def rdna3_operands(a, b, c):
    la = np.stack([a[lane % 16, :] for lane in range(32)])
    lb = np.stack([b[:, lane % 16] for lane in range(32)])
    lc = np.zeros((8, 32), np.float32)
    for lane in range(32):
        for r in range(8):
            lc[r, lane] = c[2 * r + lane // 16, lane % 16]
    return pack(la), pack(lb), lc.view(np.uint32)


def rdna3_result(regs):
    d = np.zeros((16, 16), np.float32)
    f = regs.view(np.float32)
    for lane in range(32):
        for r in range(8):
            d[2 * r + lane // 16, lane % 16] = f[r, lane]
    return d


CASES = {
    "gfx1200": ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[16:23]", 8, 12, 16, rdna4_operands, rdna4_result),
    "gfx1100": ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[24:31]", 8, 16, 24, rdna3_operands,
                rdna3_result),
}


def run_wmma(arch, a, b, c, mutate=None, exec_mask=0xFFFFFFFF):
    text, ra, rb, rc, operands, result = CASES[arch]
    va, vb, vc = operands(a, b, c)
    regs = {ra + i: va[i] for i in range(len(va))}
    regs.update({rb + i: vb[i] for i in range(len(vb))})
    regs.update({rc + i: vc[i] for i in range(8)})
    if mutate:
        mutate(regs)
    wave = Program(tg_amd.assemble(text + "\ns_endpgm", arch), arch).run_wave(regs, exec_mask=exec_mask)[0]
    return result(wave.v[0:8])


@pytest.mark.parametrize("arch", list(CASES))
def test_wmma_layout_integers_exact(arch):
    """Distinct small integers everywhere: a misplaced row, column or K value changes the result."""
    a = RNG.integers(-8, 9, (16, 16)).astype(np.float16)
    b = RNG.integers(-8, 9, (16, 16)).astype(np.float16)
    c = RNG.integers(-100, 100, (16, 16)).astype(np.float32)
    np.testing.assert_array_equal(run_wmma(arch, a, b, c), a.astype(np.float32) @ b.astype(np.float32) + c)


@pytest.mark.parametrize("arch", list(CASES))
def test_wmma_layout_single_entries(arch):
    """A one-hot A and B: D is zero except D[i][j] = 1 for A[i][k] = B[k][j] = 1, plus C."""
    for i, k, j in [(0, 0, 0), (3, 9, 12), (15, 15, 15), (8, 7, 1), (9, 8, 14)]:
        a = np.zeros((16, 16), np.float16)
        b = np.zeros((16, 16), np.float16)
        a[i, k] = 1
        b[k, j] = 1
        c = np.arange(256, dtype=np.float32).reshape(16, 16) * 1000
        expect = c.copy()
        expect[i, j] += 1
        np.testing.assert_array_equal(run_wmma(arch, a, b, c), expect)


@pytest.mark.parametrize("arch", list(CASES))
def test_wmma_random_normal(arch):
    a = RNG.standard_normal((16, 16)).astype(np.float16)
    b = RNG.standard_normal((16, 16)).astype(np.float16)
    c = RNG.standard_normal((16, 16)).astype(np.float32)
    expect = (a.astype(np.float64) @ b.astype(np.float64) + c).astype(np.float32)
    np.testing.assert_allclose(run_wmma(arch, a, b, c), expect, rtol=1e-6, atol=1e-6)


def test_rdna3_wmma_requires_replicated_halves():
    a = np.ones((16, 16), np.float16)

    def break_replication(regs):
        regs[8] = regs[8].copy()
        regs[8][20] ^= 1
    with pytest.raises(EmulatorError, match="lanes 16-31 must repeat lanes 0-15.*gfx1100"):
        run_wmma("gfx1100", a, a, np.zeros((16, 16), np.float32), break_replication)


@pytest.mark.parametrize("arch", list(CASES))
def test_wmma_requires_full_exec(arch):
    a = np.ones((16, 16), np.float16)
    with pytest.raises(EmulatorError, match="all 32 lanes"):
        run_wmma(arch, a, a, np.zeros((16, 16), np.float32), exec_mask=0xFFFF)

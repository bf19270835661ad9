"""``tg_amd.asm_gemm`` from Tensor code on AMD:EMU: forward and backward through the hand-written kernel
(counted: the emulator really runs), checked exactly against numpy on integer-valued inputs; shapes the
kernel cannot take fall back to the ordinary matmul; bad arguments are clear errors."""
from __future__ import annotations

import numpy as np
import pytest
import tg_amd.emulator
from tg_amd.gemm import asm_gemm, asm_gemm_plan

from tgcore.runtime.registry import close_devices
from tgcore.tensor import Tensor

RNG = np.random.default_rng(11)


@pytest.fixture
def emulator_runs(monkeypatch):
    """How many machine-code kernels the emulator ran (wraps Program.run)."""
    runs: list[str] = []
    real = tg_amd.emulator.Program.run

    def counting(self, *args, **kwargs):
        runs.append(self.arch.name)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(tg_amd.emulator.Program, "run", counting)
    close_devices()
    yield runs
    close_devices()


def ints(shape, lo=-4, hi=5):
    return RNG.integers(lo, hi, shape).astype(np.float32)


@pytest.mark.parametrize("arch", ["gfx1200", "gfx1100"])
def test_forward_exact(arch, emulator_runs):
    a, b = ints((256, 384)), ints((384, 256))
    c = asm_gemm(Tensor(a, device="AMD:EMU"), Tensor(b, device="AMD:EMU"), arch=arch)
    assert c.dtype.name == "float32" and c.shape == (256, 256)
    np.testing.assert_array_equal(c.numpy(), a @ b)
    assert emulator_runs == [arch]


def test_forward_feeds_ordinary_kernels(emulator_runs):
    a, b = ints((128, 64)), ints((64, 256))
    ta, tb = Tensor(a, device="AMD:EMU"), Tensor(b, device="AMD:EMU")
    out = (asm_gemm(ta * 2, tb) + 1).sum(0)
    np.testing.assert_array_equal(out.numpy(), ((2 * a) @ b + 1).sum(0))
    assert len(emulator_runs) == 1


def test_backward_through_the_asm_kernel(emulator_runs):
    a, b, w = ints((256, 128)), ints((128, 256)), ints((256, 256), -2, 3)
    ta = Tensor(a, device="AMD:EMU", requires_grad=True)
    tb = Tensor(b, device="AMD:EMU", requires_grad=True)
    c = asm_gemm(ta, tb)
    (c * Tensor(w, device="AMD:EMU")).sum().backward()
    np.testing.assert_array_equal(c.numpy(), a @ b)
    np.testing.assert_array_equal(ta.grad.numpy(), w @ b.T)     # grad_a = g @ b.T (small: exact in f16)
    np.testing.assert_array_equal(tb.grad.numpy(), a.T @ w)     # grad_b = a.T @ g
    assert np.abs(w @ b.T).max() <= 2048 and np.abs(a.T @ w).max() <= 2048
    assert len(emulator_runs) == 3                               # forward, grad_a, grad_b all in asm


def test_backward_falls_back_where_the_shape_does_not_fit(emulator_runs):
    """Forward (128x128x32) fits; grad_a = g @ b.T has N = 32 and grad_b = a.T @ g has M = 32: matmul."""
    a, b = ints((128, 32)), ints((32, 128))
    ta = Tensor(a, device="AMD:EMU", requires_grad=True)
    tb = Tensor(b, device="AMD:EMU", requires_grad=True)
    (asm_gemm(ta, tb) ** 2).sum().backward()
    ta.grad.realize(tb.grad)   # in one schedule, so the forward kernel runs once
    g = 2 * (a @ b)
    # the kernel's inputs are a.half() and b.half(): their gradients are float16 (as in torch), then widened
    np.testing.assert_array_equal(ta.grad.numpy(), (g @ b.T).astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(tb.grad.numpy(), (a.T @ g).astype(np.float16).astype(np.float32))
    assert len(emulator_runs) == 1


def test_random_normal_within_f16_tolerance(emulator_runs):
    a = RNG.standard_normal((128, 256)).astype(np.float32)
    b = RNG.standard_normal((256, 128)).astype(np.float32)
    c = asm_gemm(Tensor(a, device="AMD:EMU"), Tensor(b, device="AMD:EMU")).numpy()
    np.testing.assert_allclose(c, a @ b, rtol=2e-2, atol=2e-2 * np.sqrt(256))   # inputs rounded to f16
    ref16 = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(c, ref16, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(100, 64, 128), (128, 48, 128), (128, 64, 100)])
def test_shapes_the_kernel_cannot_take_fall_back(shape, emulator_runs):
    m, k, n = shape
    a, b = ints((m, k)), ints((k, n))
    arch, why = asm_gemm_plan(m, n, k, "AMD:EMU")
    assert arch is None and "multiple of" in why
    c = asm_gemm(Tensor(a, device="AMD:EMU"), Tensor(b, device="AMD:EMU"))
    np.testing.assert_array_equal(c.numpy(), a @ b)
    assert emulator_runs == []


def test_other_devices_fall_back(emulator_runs):
    a, b = ints((128, 32)), ints((32, 128))
    assert asm_gemm_plan(128, 128, 32, "PYTHON")[1] == "device PYTHON is not AMD:EMU"
    np.testing.assert_array_equal(asm_gemm(Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON")).numpy(), a @ b)
    assert emulator_runs == []


def test_bad_arguments_are_clear_errors():
    a = Tensor(np.ones((128, 64), np.float32), device="AMD:EMU")
    with pytest.raises(ValueError, match="inner dimensions differ"):
        asm_gemm(a, Tensor(np.ones((32, 128), np.float32), device="AMD:EMU"))
    with pytest.raises(ValueError, match="2-D"):
        asm_gemm(a.reshape(2, 64, 64), a)
    with pytest.raises(ValueError, match="is on"):
        asm_gemm(a, Tensor(np.ones((64, 128), np.float32), device="PYTHON"))


def test_jit_replays_asm_gemm(emulator_runs):
    import tgcore

    @tgcore.jit
    def step(a, b):
        return (asm_gemm(a, b) * 2).realize()

    for _ in range(3):
        a, b = ints((128, 64)), ints((64, 128))
        out = step(Tensor(a, device="AMD:EMU").realize(), Tensor(b, device="AMD:EMU").realize())
        np.testing.assert_array_equal(out.numpy(), 2 * (a @ b))
    assert len(emulator_runs) == 3


def test_gfx1201_and_env_arch(emulator_runs, monkeypatch):
    a, b = ints((128, 64)), ints((64, 128))
    c = asm_gemm(Tensor(a, device="AMD:EMU"), Tensor(b, device="AMD:EMU"), arch="gfx1201")
    np.testing.assert_array_equal(c.numpy(), a @ b)
    close_devices()
    monkeypatch.setenv("AMD_ARCH", "gfx1100")
    c = asm_gemm(Tensor(a, device="AMD:EMU"), Tensor(b, device="AMD:EMU"))
    np.testing.assert_array_equal(c.numpy(), a @ b)
    assert emulator_runs == ["gfx1201", "gfx1100"]

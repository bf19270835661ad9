"""Random tensors and creation helpers: the generator against an independent numpy Threefry and the Random123
known-answer vectors, same numbers on every device, statistics with fixed seeds and loose bounds, initialiser
bounds, eye/linspace against numpy."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

from tgcore.dtype import dtypes
from tgcore.tensor import Tensor
from tgcore.tensor_random import threefry2x32

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def np_threefry(x0: np.ndarray, x1: np.ndarray, k0: int, k1: int) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32-20 in numpy, written from the paper (rotations R_{0..7}, key injection every 4 rounds)."""
    rot = [13, 15, 26, 6, 17, 29, 16, 24]
    ks = [np.uint32(k0), np.uint32(k1), np.uint32(k0 ^ k1 ^ 0x1BD11BDA)]
    x0, x1 = x0.astype(np.uint32) + ks[0], x1.astype(np.uint32) + ks[1]
    for r in range(20):
        x0 = x0 + x1
        x1 = ((x1 << np.uint32(rot[r % 8])) | (x1 >> np.uint32(32 - rot[r % 8]))) ^ x0
        if r % 4 == 3:
            s = r // 4 + 1
            x0 = x0 + ks[s % 3]
            x1 = x1 + ks[(s + 1) % 3] + np.uint32(s)
    return x0, x1


# Random123's known-answer vectors for threefry2x32_20: (counter, key) -> output
KAT = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
       ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
       ((0x243F6A88, 0x85A308D3), (0x13198A2E, 0x03707344), (0xC4923A9C, 0x483DF7A0))]


def test_threefry_known_answers(device):
    x0 = Tensor(np.array([c[0] for c, _, _ in KAT], np.uint32), device=device)
    x1 = Tensor(np.array([c[1] for c, _, _ in KAT], np.uint32), device=device)
    for i, (_, key, want) in enumerate(KAT):
        y0, y1 = threefry2x32(x0[i], x1[i], key)
        assert (y0.item(), y1.item()) == want


def test_rand_matches_numpy_reference(device):
    Tensor.manual_seed(1234)
    got = Tensor.rand(7, 9, device=device).numpy()
    w0, _ = np_threefry(np.arange(63), np.zeros(63), 1234, 0)
    np.testing.assert_array_equal(got.reshape(-1), (w0 >> 8).astype(np.float32) * np.float32(2.0 ** -24))


def test_same_numbers_on_every_device():
    outs = []
    for dev in DEVICES:
        Tensor.manual_seed(7)
        outs.append([Tensor.rand(5, 6, device=dev).numpy(), Tensor.randn(33, device=dev).numpy(),
                     Tensor.randint(4, 4, low=-3, high=90, device=dev).numpy(),
                     Tensor.rand(3, dtype=dtypes.float64, device=dev).numpy()])
    for other in outs[1:]:
        for a, b in zip(outs[0], other, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)  # randn: sin/log may differ in the last ulp


def test_seed_determinism_and_fresh_numbers(device):
    Tensor.manual_seed(42)
    a, b = Tensor.rand(100, device=device).numpy(), Tensor.rand(100, device=device).numpy()
    Tensor.manual_seed(42)
    np.testing.assert_array_equal(Tensor.rand(100, device=device).numpy(), a)
    assert not np.array_equal(a, b)  # the counter advanced between calls
    Tensor.manual_seed(43)
    assert not np.array_equal(Tensor.rand(100, device=device).numpy(), a)
    Tensor.manual_seed(2**40 + 42)  # the seed's high 32 bits are used too
    assert not np.array_equal(Tensor.rand(100, device=device).numpy(), a)


def test_rand_uniform_statistics(device):
    Tensor.manual_seed(0)
    x = Tensor.rand(200, 500, device=device).numpy()
    assert x.dtype == np.float32 and x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.005 and abs(x.std() - math.sqrt(1 / 12)) < 0.005
    hist = np.histogram(x, bins=20, range=(0, 1))[0] / x.size
    assert np.abs(hist - 0.05).max() < 0.003
    np.testing.assert_allclose(np.corrcoef(x[:, :-1].ravel(), x[:, 1:].ravel())[0, 1], 0, atol=0.01)
    u = Tensor.uniform(50_000, low=-2.0, high=3.0, device=device).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.05


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float64], ids=str)
def test_rand_dtypes_stay_below_one(device, dt):
    Tensor.manual_seed(5)
    t = Tensor.rand(4096, dtype=dt, device=device)
    assert t.dtype is dt
    x = t.numpy()
    assert x.min() >= 0 and x.max() < 1 and 0.45 < x.mean() < 0.55
    if dt is dtypes.float64:
        assert len(np.unique(x)) == x.size and np.any(x * 2**24 % 1 != 0)  # more than float32's 24 bits


def test_randn_normal_statistics(device):
    Tensor.manual_seed(1)
    z = Tensor.randn(100_000, device=device).numpy()
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    assert abs(np.mean(z ** 3)) < 0.05 and abs(np.mean(z ** 4) - 3) < 0.1  # skew 0, kurtosis 3
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.01
    n = Tensor.normal(20_000, mean=3.0, std=0.5, device=device).numpy()
    assert abs(n.mean() - 3) < 0.02 and abs(n.std() - 0.5) < 0.02


def test_randint(device):
    Tensor.manual_seed(3)
    r = Tensor.randint(60_000, low=-5, high=7, device=device)
    assert r.dtype is dtypes.int32
    x = r.numpy()
    assert x.min() == -5 and x.max() == 6
    counts = np.bincount(x + 5) / x.size
    assert np.abs(counts - 1 / 12).max() < 0.01
    big = Tensor.randint(1000, low=0, high=2**40, dtype=dtypes.int64, device=device).numpy()
    assert big.min() >= 0 and big.max() < 2**40 and big.max() > 2**39
    u8 = Tensor.randint(2, 3, low=250, high=256, dtype="uint8", device=device).numpy()
    assert u8.dtype == np.uint8 and u8.min() >= 250


def test_randint_errors():
    with pytest.raises(TypeError, match="high must be an int"):
        Tensor.randint(3, low=0, high=2.5)
    with pytest.raises(TypeError, match="low must be an int"):
        Tensor.randint(3, low=True, high=2)
    with pytest.raises(TypeError, match="integer dtype"):
        Tensor.randint(3, low=0, high=5, dtype=dtypes.float32)
    with pytest.raises(ValueError, match="low < high"):
        Tensor.randint(3, low=5, high=5)
    with pytest.raises(ValueError, match="does not fit"):
        Tensor.randint(3, low=0, high=300, dtype=dtypes.uint8)
    with pytest.raises(TypeError, match="float dtype"):
        Tensor.rand(3, dtype=dtypes.int32)


def test_initialisers(device):
    Tensor.manual_seed(11)
    w = Tensor.glorot_uniform(64, 32, device=device).numpy()
    bound = math.sqrt(6 / (32 + 64))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound * 3
    conv = Tensor.kaiming_uniform(16, 8, 3, 3, a=0.2, device=device).numpy()  # fan_in = 8 * 3 * 3
    kb = math.sqrt(6 / ((1 + 0.04) * 72))
    assert np.abs(conv).max() <= kb and np.abs(conv).max() > 0.95 * kb
    kn = Tensor.kaiming_normal(256, 128, a=0.0, device=device).numpy()
    assert abs(kn.std() - math.sqrt(2 / 128)) < 0.03 * math.sqrt(2 / 128)
    s = Tensor.scaled_uniform(30, 40, device=device).numpy()
    assert np.abs(s).max() <= 1200 ** -0.5 and abs(s.mean()) < 0.01
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        Tensor.glorot_uniform(5)


def test_like(device):
    base = Tensor.ones(3, 4, dtype="float16", device=device)
    Tensor.manual_seed(0)
    r = base.rand_like()
    assert r.shape == (3, 4) and r.dtype is dtypes.float16 and r.device == base.device
    assert base.randn_like(dtype=dtypes.float32).dtype is dtypes.float32
    ri = Tensor.zeros(5, dtype="int8", device=device).randint_like(low=-2, high=2)
    assert ri.dtype is dtypes.int8 and set(ri.numpy().tolist()) <= {-2, -1, 0, 1}
    u = base.uniform_like(low=5, high=6).numpy()
    assert u.min() >= 5 and u.max() <= 6
    assert base.empty_like().shape == (3, 4)
    np.testing.assert_array_equal(base.zeros_like().numpy(), np.zeros((3, 4), np.float16))


def test_eye_linspace(device):
    np.testing.assert_array_equal(Tensor.eye(4, device=device).numpy(), np.eye(4, dtype=np.float32))
    np.testing.assert_array_equal(Tensor.eye(3, 5, dtype="int32", device=device).numpy(), np.eye(3, 5, dtype=np.int32))
    np.testing.assert_array_equal(Tensor.eye(0, device=device).numpy(), np.eye(0, dtype=np.float32))
    for args in [(0.0, 1.0, 5), (-3.0, 7.5, 11), (2.0, -2.0, 4), (1.0, 1.0, 3), (0.0, 10.0, 1), (0.0, 1.0, 0)]:
        got = Tensor.linspace(*args, device=device).numpy()
        ref = np.linspace(*args, dtype=np.float32)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
        if args[2] > 1:
            assert got[-1] == np.float32(args[1]) and got[0] == np.float32(args[0])
    np.testing.assert_allclose(Tensor.linspace(0, 1, 7, dtype="float64", device=device).numpy(), np.linspace(0, 1, 7),
                               rtol=1e-15)
    with pytest.raises(ValueError, match="non-negative"):
        Tensor.linspace(0, 1, -1)

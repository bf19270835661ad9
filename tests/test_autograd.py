"""Gradients against torch: every differentiable tensor-level op, composites, accumulation, detach."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tgcore.tensor import Tensor

torch = pytest.importorskip("torch") if os.environ.get("CI") != "true" else __import__("torch")

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def data(shape, seed, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


def check_grads(fn_tg, fn_torch, arrays, device, rtol=1e-4, atol=1e-5):
    """Forward values and the gradients of sum(out * probe) match torch for every input."""
    ts = [Tensor(a, device=device, requires_grad=True) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    out_tg, out_tt = fn_tg(*ts), fn_torch(*tt)
    probe = data(tuple(out_tt.shape), 99)  # a non-uniform upstream gradient catches transposed rules
    (out_tg * Tensor(probe, device=device)).sum().backward()
    (out_tt * torch.tensor(probe)).sum().backward()
    np.testing.assert_allclose(out_tg.numpy(), out_tt.detach().numpy(), rtol=rtol, atol=atol)
    for t, ref in zip(ts, tt, strict=True):
        assert t.grad is not None
        np.testing.assert_allclose(t.grad.numpy(), ref.grad.numpy(), rtol=rtol, atol=atol)


UNARY = {
    "neg": (lambda x: -x, lambda x: -x),
    "relu": (lambda x: x.relu(), lambda x: x.relu()),
    "exp": (lambda x: x.exp(), lambda x: x.exp()),
    "log": (lambda x: (x * x + 0.5).log(), lambda x: (x * x + 0.5).log()),
    "sqrt": (lambda x: (x * x + 0.5).sqrt(), lambda x: (x * x + 0.5).sqrt()),
    "sin": (lambda x: x.sin(), lambda x: x.sin()),
    "reciprocal": (lambda x: (x * x + 0.5).reciprocal(), lambda x: (x * x + 0.5).reciprocal()),
    "square": (lambda x: x * x, lambda x: x * x),
    "sum_axis": (lambda x: x.sum(1), lambda x: x.sum(1)),
    "sum_all": (lambda x: x.sum(), lambda x: x.sum()),
    "mean": (lambda x: x.mean(0), lambda x: x.mean(0)),
    "max_axis": (lambda x: x.max(1), lambda x: x.amax(1)),
    "min_all": (lambda x: x.min(), lambda x: x.amin()),
    "reshape": (lambda x: x.reshape(4, 3) * 2, lambda x: x.reshape(4, 3) * 2),
    "permute": (lambda x: x.permute(1, 0) * 3, lambda x: x.permute(1, 0) * 3),
    "expand": (lambda x: x.reshape(3, 1, 4).expand(3, 5, 4), lambda x: x.reshape(3, 1, 4).expand(3, 5, 4)),
    "pad": (lambda x: x.pad(((1, 2), (0, 1))), lambda x: torch.nn.functional.pad(x, (0, 1, 1, 2))),
    "shrink": (lambda x: x.shrink(((1, 3), (0, 2))), lambda x: x[1:3, 0:2]),
    "flip": (lambda x: x.flip(0, 1), lambda x: x.flip(0, 1)),
    "cast_roundtrip": (lambda x: x.cast("float64").cast("float32") * 2, lambda x: x.double().float() * 2),
    "softmax": (lambda x: (x - x.max(1, keepdim=True)).exp() / (x - x.max(1, keepdim=True)).exp().sum(1, keepdim=True),
                lambda x: torch.softmax(x, 1)),
    "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1)),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_gradients(device, name):
    fn_tg, fn_torch = UNARY[name]
    check_grads(fn_tg, fn_torch, [data((3, 4), 1)], device)


BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / (b * b + 0.5), lambda a, b: a / (b * b + 0.5)),
    "maximum": (lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b)),
    "where": (lambda a, b: (a > b).where(a, b * 2), lambda a, b: torch.where(a > b, a, b * 2)),
    "broadcast": (lambda a, b: a * b.sum(0, keepdim=True), lambda a, b: a * b.sum(0, keepdim=True)),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_gradients(device, name):
    fn_tg, fn_torch = BINARY[name]
    check_grads(fn_tg, fn_torch, [data((3, 4), 2), data((3, 4), 3)], device)


def test_matmul_and_mlp_gradients(device):
    check_grads(lambda x, w1, w2: ((x @ w1).relu() @ w2).sum(1),
                lambda x, w1, w2: ((x @ w1).relu() @ w2).sum(1),
                [data((5, 6), 4), data((6, 7), 5), data((7, 3), 6)], device)


def test_gradients_accumulate_and_detach_stops_them():
    x = Tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1, 2, 3]) + 3)
    y = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    ((y * y).detach() * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), np.array([1.0, 4.0]))  # only the outer factor


def test_backward_errors_are_clear():
    x = Tensor(np.ones((2, 2), np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="needs a gradient argument"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="requires_grad"):
        Tensor(np.ones(2, np.float32)).sum().backward()


def test_leaf_updated_in_place_keeps_its_gradient_identity():
    w = Tensor(np.array([1.0, -1.0], np.float32), requires_grad=True)
    for _ in range(3):
        w.grad = None
        (w * w).sum().backward()
        new = (w - w.grad * 0.25).realize()
        w.uop = new.uop
        w.requires_grad_(True)
    np.testing.assert_allclose(w.numpy(), np.array([0.125, -0.125]))


def test_reading_the_loss_keeps_its_graph():
    x = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    loss = (x * x).sum()
    assert loss.item() == 5.0  # realizes the loss
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_half_matmul_accumulates_wide():
    a = np.random.default_rng(0).standard_normal((4, 2048)).astype(np.float16)
    b = np.random.default_rng(1).standard_normal((2048, 4)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    got = (Tensor(a) @ Tensor(b)).numpy().astype(np.float64)
    assert np.abs(got - ref).max() / np.abs(ref).max() < 2e-3


@pytest.mark.parametrize("name", ["tanh", "gelu", "erf", "expm1", "softplus", "mish", "elu", "log1p"])
def test_gradients_stay_finite_where_a_formula_switches_branches(name):
    """Accuracy tricks select between formulas with where(); the branch not taken must not poison the
    gradient (0 * inf = NaN). Checked against torch at the switch points and in the tails."""
    vals = np.array([0.0, 1e-10, 1e-3, -1e-3, -40.0, 40.0, 3.0, -0.5, 100.0], np.float32)
    if name == "log1p":
        vals = vals[vals > -1]  # outside the domain the value is NaN anyway
    x = Tensor(vals.copy(), requires_grad=True)
    getattr(x, name)().sum().backward()
    xt = torch.tensor(vals.copy(), requires_grad=True)
    fn = getattr(torch.nn.functional, name, None) or getattr(torch, name)
    fn(xt).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_backward_through_realized_intermediates_matches_torch():
    a = np.array([0.5, -1.5, 2.0], np.float32)
    x = Tensor(a, requires_grad=True)
    y = (x * 2).realize()  # an intermediate computed before the loss is built
    z = (y.exp() * x).realize()
    (z.sum() + y.sum()).backward()
    xt = torch.tensor(a, requires_grad=True)
    yt = xt * 2
    ((yt.exp() * xt).sum() + yt.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
    assert y.grad is None  # (not a leaf, as in torch)


def test_graphs_kept_for_backward_through_realized_tensors_free_their_buffers():
    import gc

    from tgcore.engine.stats import GlobalCounters
    x = Tensor(np.ones(1000, np.float32), requires_grad=True)
    gc.collect()
    base = GlobalCounters.mem_used
    for _ in range(3):
        y = (x * 2).realize()
        (y.exp() * x).realize().sum().backward()
        x.grad = None
    del y
    gc.collect()
    assert GlobalCounters.mem_used == base

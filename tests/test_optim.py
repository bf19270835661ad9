"""tgcore.nn.optim against torch.optim: the same parameters after every one of 10 steps from the same start,
in-place updates (other references and jitted steps see them), learning-rate changes, argument checks."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tgcore
from tgcore import nn
from tgcore.tensor import Tensor

torch = pytest.importorskip("torch") if os.environ.get("CI") != "true" else __import__("torch")


def data(shape, seed, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


def loss_tg(w: Tensor, b: Tensor, x: Tensor) -> Tensor:
    """A small non-quadratic loss, so gradients change from step to step."""
    d = (x @ w + b).tanh() - 0.3
    return (d * d).sum()


def loss_torch(w, b, x):
    return (((x @ w + b).tanh() - 0.3) ** 2).sum()


def run_both(make_tg, make_torch, steps: int = 10, device: str = "CPU", rtol=1e-5, atol=1e-6):
    w0, b0, x = data((5, 3), 1), data((3,), 2), data((4, 5), 3, -2, 2)
    w, b, xt = Tensor(w0, device=device), Tensor(b0, device=device), Tensor(x, device=device)
    wr, br = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    opt, ref = make_tg([w, b]), make_torch([wr, br])
    for step in range(steps):
        opt.zero_grad()
        loss = loss_tg(w, b, xt)
        loss.backward()
        opt.step(loss)
        ref.zero_grad()
        loss_torch(wr, br, torch.tensor(x)).backward()
        ref.step()
        np.testing.assert_allclose(w.numpy(), wr.detach().numpy(), rtol=rtol, atol=atol, err_msg=f"step {step}")
        np.testing.assert_allclose(b.numpy(), br.detach().numpy(), rtol=rtol, atol=atol, err_msg=f"step {step}")


SGD_CASES = {
    "plain": {"lr": 0.1},
    "momentum": {"lr": 0.05, "momentum": 0.9},
    "nesterov_decay": {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 0.1},
}


@pytest.mark.parametrize("name", list(SGD_CASES))
def test_sgd_matches_torch(name):
    kw = SGD_CASES[name]
    run_both(lambda p: nn.SGD(p, **kw), lambda p: torch.optim.SGD(p, **kw))


ADAM_CASES = {
    "adam": (nn.Adam, torch.optim.Adam, {"lr": 0.05}),
    "adam_l2": (nn.Adam, torch.optim.Adam, {"lr": 0.02, "betas": (0.8, 0.99), "weight_decay": 0.1, "eps": 1e-6}),
    "adamw": (nn.AdamW, torch.optim.AdamW, {"lr": 0.05, "weight_decay": 0.2}),
}


@pytest.mark.parametrize("name", list(ADAM_CASES))
def test_adam_matches_torch(name):
    ours, theirs, kw = ADAM_CASES[name]
    run_both(lambda p: ours(p, **kw), lambda p: theirs(p, **kw))


def test_adam_on_python_device():
    run_both(lambda p: nn.Adam(p, lr=0.05), lambda p: torch.optim.Adam(p, lr=0.05), steps=3, device="PYTHON")


def test_updates_are_in_place_and_lr_is_a_tensor():
    w = Tensor(np.ones(3, np.float32))
    alias = w.reshape(3, 1).realize()  # a realized view shares the buffer (a lazy one keeps the old values)
    opt = nn.SGD([w], lr=0.5)
    assert w.requires_grad  # the optimizer asks for gradients
    (w * Tensor(np.array([1.0, 2.0, 3.0], np.float32))).sum().backward()
    opt.step()
    np.testing.assert_allclose(alias.numpy().ravel(), [0.5, 0.0, -0.5])
    opt.lr.assign(0.0)
    opt.step()  # the same (stale) gradient, but lr 0 now
    np.testing.assert_allclose(w.numpy(), [0.5, 0.0, -0.5])
    opt.zero_grad()
    assert w.grad is None
    opt.step()  # no gradients: nothing to do


def _adam_run(jitted: bool, w0: np.ndarray, x: np.ndarray) -> tuple[list[float], np.ndarray]:
    w, b = Tensor(w0), Tensor(np.zeros(3, np.float32))
    opt = nn.Adam([w, b], lr=0.05)

    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = loss_tg(w, b, x)
        loss.backward()
        opt.step(loss)
        return loss

    fn = tgcore.jit(step) if jitted else step
    losses = [fn(Tensor(x)).item() for _ in range(5)]  # jit: runs, captures, then replays three times
    return losses, w.numpy()


def test_jitted_train_step_matches_eager_adam():
    w0, x = data((5, 3), 1), data((4, 5), 3, -2, 2)
    eager, jitted = _adam_run(False, w0, x), _adam_run(True, w0, x)
    np.testing.assert_allclose(jitted[0], eager[0], rtol=1e-6)
    np.testing.assert_allclose(jitted[1], eager[1], rtol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="no parameters"):
        nn.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        nn.Adam([Tensor(np.zeros(2, np.float32))], lr=-1.0)
    with pytest.raises(TypeError, match="cannot optimize"):
        nn.SGD([Tensor(np.zeros(2, np.int32))], lr=0.1)
    with pytest.raises(ValueError, match="betas"):
        nn.Adam([Tensor(np.zeros(2, np.float32))], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="nesterov"):
        nn.SGD([Tensor(np.zeros(2, np.float32))], nesterov=True)
    frozen = Tensor(np.zeros(2, np.float32)).requires_grad_(False)
    trained = Tensor(np.zeros(2, np.float32))
    assert nn.SGD([frozen, trained, trained], lr=0.1).params == [trained]  # frozen skipped, duplicates once


def test_lazy_tensors_built_before_a_step_keep_the_old_parameters():
    w0, c = data((3,), 4), data((3,), 5)
    w = Tensor(w0, requires_grad=True)
    wr = torch.tensor(w0, requires_grad=True)
    opt, ref = nn.SGD([w], lr=0.5, momentum=0.9), torch.optim.SGD([wr], lr=0.5, momentum=0.9)
    before = w * 2  # lazy: built from the parameter before the step
    loss = (w * Tensor(c)).sin().sum()
    loss.backward()
    opt.step(loss)
    (wr * torch.tensor(c)).sin().sum().backward()
    ref.step()
    np.testing.assert_allclose(w.numpy(), wr.detach().numpy(), rtol=1e-6)
    np.testing.assert_array_equal(before.numpy(), w0 * 2)  # torch would have computed it before the step


def test_a_step_copies_nothing_aside_when_nothing_reads_the_old_parameters():
    from tgcore.schedule.state import REALIZATION
    w0, b0, x = data((5, 3), 1), data((3,), 2), data((4, 5), 3, -2, 2)
    w, b, xt = Tensor(w0), Tensor(b0), Tensor(x)
    opt = nn.Adam([w, b], lr=0.05)
    copies = REALIZATION.preserved
    for _ in range(3):
        opt.zero_grad()
        loss = loss_tg(w, b, xt)
        loss.backward()
        opt.step(loss)
        loss.item()
    assert REALIZATION.preserved == copies and not REALIZATION.pending

"""End-to-end training on synthetic data (CPU): a small MLP (Adam) and a small convnet with BatchNorm (SGD with
momentum, jitted train step) start from the same weights as a torch copy and must reach a loss at most 1.1x
torch's after the same steps."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tgcore
import tgcore.nn.functional as F
from tgcore import nn
from tgcore.tensor import Tensor

torch = pytest.importorskip("torch") if os.environ.get("CI") != "true" else __import__("torch")
TF = torch.nn.functional


def copy_into_torch(model, module) -> None:
    ours, theirs = nn.get_state_dict(model), module.state_dict()
    assert sorted(ours) == sorted(theirs)
    with torch.no_grad():
        for k, v in ours.items():
            theirs[k].copy_(torch.tensor(v.numpy()))


def teacher_data(n: int, shape: tuple[int, ...], classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and labels from a fixed random linear teacher, so there is something to learn."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n,) + shape).astype(np.float32)
    teacher = rng.standard_normal((int(np.prod(shape)), classes)).astype(np.float32)
    return x, (x.reshape(n, -1) @ teacher).argmax(1).astype(np.int32)


class MLP:
    def __init__(self) -> None:
        self.fc1, self.fc2 = nn.Linear(20, 32), nn.Linear(32, 5)

    def __call__(self, x: Tensor) -> Tensor:
        return self.fc2(self.fc1(x).silu())


class TorchMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(20, 32), torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(TF.silu(self.fc1(x)))


def test_mlp_adam_trains_like_torch():
    x, y = teacher_data(64, (20,), 5, 0)
    Tensor.manual_seed(0)  # the initial weights (whatever other tests drew before)
    model, ref = MLP(), TorchMLP()
    copy_into_torch(model, ref)
    opt, ref_opt = nn.Adam(nn.get_parameters(model), lr=0.01), torch.optim.Adam(ref.parameters(), lr=0.01)
    xt, yt = Tensor(x), Tensor(y)
    losses, ref_losses = [], []
    for _ in range(15):
        opt.zero_grad()
        loss = F.cross_entropy(model(xt), yt, label_smoothing=0.05)
        loss.backward()
        opt.step(loss)
        losses.append(loss.item())
        ref_opt.zero_grad()
        ref_loss = TF.cross_entropy(ref(torch.tensor(x)), torch.tensor(y).long(), label_smoothing=0.05)
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    print(f"mlp: loss {losses[0]:.4f} -> {losses[-1]:.4f}, torch -> {ref_losses[-1]:.4f}, "
          f"ratio {losses[-1] / ref_losses[-1]:.5f}")
    assert losses[-1] < 0.8 * losses[0]  # it learned something
    assert losses[-1] <= 1.1 * ref_losses[-1]
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4)


class ConvNet:
    def __init__(self) -> None:
        self.conv1, self.bn1 = nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc = nn.Linear(8 * 2 * 2, 3)

    def __call__(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(self.bn1(self.conv1(x)).relu(), 2)
        x = F.avg_pool2d(self.conv2(x).relu(), 2)
        return self.fc(x.flatten(1))


class TorchConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 8, 3)
        self.fc = torch.nn.Linear(8 * 2 * 2, 3)

    def forward(self, x):
        x = TF.max_pool2d(TF.relu(self.bn1(self.conv1(x))), 2)
        x = TF.avg_pool2d(TF.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def test_convnet_sgd_jitted_trains_like_torch():
    x, y = teacher_data(16, (1, 12, 12), 3, 1)
    Tensor.manual_seed(0)
    model, ref = ConvNet(), TorchConvNet()
    copy_into_torch(model, ref)
    opt = nn.SGD(nn.get_parameters(model), lr=0.1, momentum=0.9, weight_decay=1e-4)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)

    @tgcore.jit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss)
        return loss

    losses, ref_losses = [], []
    for _ in range(10):
        losses.append(train_step(Tensor(x), Tensor(y)).item())
        ref_opt.zero_grad()
        ref_loss = TF.cross_entropy(ref(torch.tensor(x)), torch.tensor(y).long())
        ref_loss.backward()
        ref_opt.step()
        ref_losses.append(ref_loss.item())
    print(f"convnet: loss {losses[0]:.4f} -> {losses[-1]:.4f}, torch -> {ref_losses[-1]:.4f}, "
          f"ratio {losses[-1] / ref_losses[-1]:.5f}")
    assert losses[-1] < 0.9 * losses[0]  # it learned something
    assert losses[-1] <= 1.1 * ref_losses[-1]
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-3)
    # the running statistics were updated in place by every (replayed) step
    ours, theirs = nn.get_state_dict(model), ref.state_dict()
    for k in ("bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked"):
        np.testing.assert_allclose(ours[k].numpy(), theirs[k].numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    # evaluation with the running statistics
    model.bn1.training = False
    ref.eval()
    np.testing.assert_allclose(model(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-3,
                               atol=1e-4)

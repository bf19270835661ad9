"""tgcore.nn layers against torch.nn modules: state-dict keys and shapes, default initialisation ranges, and
outputs (and gradients) for the same weights; BatchNorm's running statistics over several steps."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tgcore import nn
from tgcore.tensor import Tensor

torch = pytest.importorskip("torch") if os.environ.get("CI") != "true" else __import__("torch")


def data(shape, seed, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


def copy_into_torch(layer, module) -> None:
    """Give the torch module our layer's values, checking that both have the same state-dict keys and shapes."""
    ours = nn.get_state_dict(layer)
    theirs = module.state_dict()
    assert sorted(ours) == sorted(theirs)
    with torch.no_grad():
        for k, v in ours.items():
            assert tuple(theirs[k].shape) == v.shape, k
            theirs[k].copy_(torch.tensor(v.numpy()))


def compare(layer, module, x: np.ndarray, rtol=1e-5, atol=1e-5, grad=True) -> None:
    """Same output and parameter gradients (of sum(out * probe)) as the torch module."""
    copy_into_torch(layer, module)
    xt = torch.tensor(x) if x.dtype != np.int32 else torch.tensor(x).long()
    params = [p for p in nn.get_parameters(layer) if p.requires_grad]
    assert len(params) == len(list(module.parameters()))  # parameters want gradients from the start
    out_tg, out_tt = layer(Tensor(x)), module(xt)
    assert out_tg.shape == tuple(out_tt.shape)
    if grad:
        probe = data(tuple(out_tt.shape), 9)
        (out_tg * Tensor(probe)).sum().backward()
        (out_tt * torch.tensor(probe)).sum().backward()
        out_tg.realize(*[p.grad for p in params])
        named = dict(module.named_parameters())
        for k, p in nn.get_state_dict(layer).items():
            if not p.requires_grad:
                continue
            np.testing.assert_allclose(p.grad.numpy(), named[k].grad.numpy(), rtol=rtol, atol=atol, err_msg=k)
    np.testing.assert_allclose(out_tg.numpy(), out_tt.detach().numpy(), rtol=rtol, atol=atol)


def test_linear():
    layer = nn.Linear(6, 4)
    compare(layer, torch.nn.Linear(6, 4), data((3, 6), 1))
    assert nn.Linear(6, 4, bias=False).bias is None
    bound = 1 / np.sqrt(6)
    w = layer.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > bound * 0.5  # torch's kaiming-uniform range


def test_conv2d():
    layer = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    compare(layer, torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), data((2, 4, 7, 6), 1))
    bound = 1 / np.sqrt(2 * 9)
    assert np.abs(layer.weight.numpy()).max() <= bound


def test_conv1d_and_conv_transpose2d():
    compare(nn.Conv1d(3, 4, 3, padding="same", bias=False), torch.nn.Conv1d(3, 4, 3, padding="same", bias=False),
            data((2, 3, 8), 1))
    compare(nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
            torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), data((1, 3, 4, 5), 2))


def test_embedding():
    layer = nn.Embedding(7, 3)
    compare(layer, torch.nn.Embedding(7, 3), np.array([[1, 6, 1], [0, 2, 5]], np.int32))


def test_layer_norm_and_rms_norm():
    ln = nn.LayerNorm((3, 4))
    ln.weight.assign(Tensor(data((3, 4), 3)))  # non-trivial affine parameters
    ln.bias.assign(Tensor(data((3, 4), 4)))
    compare(ln, torch.nn.LayerNorm((3, 4)), data((2, 3, 4), 1))
    rms = nn.RMSNorm(4, eps=1e-4)
    rms.weight.assign(Tensor(data((4,), 5)))
    compare(rms, torch.nn.RMSNorm(4, eps=1e-4), data((2, 3, 4), 2))
    assert nn.LayerNorm(4, elementwise_affine=False).weight is None


def test_batch_norm_running_statistics_then_eval():
    bn, ref = nn.BatchNorm2d(3, momentum=0.3), torch.nn.BatchNorm2d(3, momentum=0.3)
    copy_into_torch(bn, ref)
    for step in range(3):
        x = data((4, 3, 3, 2), 10 + step, -1 + step, 2 + step)
        np.testing.assert_allclose(bn(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                                   atol=1e-5)
    ours, theirs = nn.get_state_dict(bn), ref.state_dict()
    for k in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(ours[k].numpy(), theirs[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    bn.training = False
    ref.eval()
    x = data((2, 3, 3, 2), 20)
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    # running statistics stay out of the optimizer's way
    assert all(p.requires_grad is False for p in (bn.running_mean, bn.running_var, bn.num_batches_tracked))
    assert len(nn.SGD(nn.get_parameters(bn), lr=0.1).params) == 2


def test_batch_norm_gradients_in_training_mode():
    bn = nn.BatchNorm2d(2)
    bn.weight.assign(Tensor(data((2,), 1)))
    compare(bn, torch.nn.BatchNorm2d(2), data((3, 2, 2, 3), 2), rtol=1e-4)


def test_dropout_layer():
    d = nn.Dropout(0.5)
    x = Tensor(np.ones((32, 32), np.float32))
    assert 0.4 < (d(x).numpy() == 0).mean() < 0.6
    d.training = False
    assert d(x) is x


def test_layers_work_with_state_dict_round_trip(tmp_path):
    a, b = nn.Conv2d(2, 3, 3), nn.Conv2d(2, 3, 3)
    nn.safe_save(nn.get_state_dict(a), tmp_path / "conv.safetensors")
    nn.load_state_dict(b, nn.safe_load(tmp_path / "conv.safetensors"))
    x = Tensor(data((1, 2, 5, 5), 1))
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())

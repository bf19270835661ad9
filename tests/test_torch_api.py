"""The Tensor API people know from torch (issue 21, "missing API"): each op's values and gradients against torch,
on every device in TG_TEST_DEVICES, with odd shapes, 0-d and empty tensors where they mean something."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch_ref import DEVICES, arrays, compare, is_tg, raises_like_torch

from tgcore.dtype import dtypes
from tgcore.errors import TensorValueError
from tgcore.tensor import Tensor

F = np.float32


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


# ------------------------------------------------------------------------------------------ math and activations

SPECIAL = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan]
# name: (torch function, inputs: uniform range, specials to add)
UNARY = {
    "asin": (torch.asin, (-0.999, 0.999)), "acos": (torch.acos, (-0.999, 0.999)), "atan": (torch.atan, (-30, 30)),
    "sinh": (torch.sinh, (-20, 20)), "cosh": (torch.cosh, (-20, 20)), "asinh": (torch.asinh, (-1e3, 1e3)),
    "acosh": (torch.acosh, (1.001, 1e3)), "atanh": (torch.atanh, (-0.999, 0.999)), "log10": (torch.log10, (1e-3, 1e4)),
    "relu6": (TF.relu6, (-8, 8)), "hardtanh": (TF.hardtanh, (-3, 3)), "hardsigmoid": (TF.hardsigmoid, (-5, 5)),
    "hardswish": (TF.hardswish, (-5, 5)), "selu": (TF.selu, (-5, 5)), "celu": (TF.celu, (-5, 5)),
    "softsign": (TF.softsign, (-5, 5)), "logsigmoid": (TF.logsigmoid, (-30, 30)),
}
BOUNDARIES = {"relu6": [0.0, 6.0], "hardtanh": [-1.0, 1.0], "hardsigmoid": [-3.0, 3.0], "hardswish": [-3.0, 3.0],
              "selu": [0.0], "celu": [0.0], "softsign": [0.0], "atan": [0.0, 1.0, -1.0]}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_against_torch(device, name):
    fn, (lo, hi) = UNARY[name]
    x = np.concatenate([np.random.default_rng(1).uniform(lo, hi, 37), BOUNDARIES.get(name, [])]).astype(F)
    compare(lambda t: getattr(t, name)(), fn, x, device=device, rtol=2e-6, atol=1e-6, grad_rtol=1e-5, grad_atol=1e-5)


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_special_values(device, name):
    fn = UNARY[name][0]
    compare(lambda t: getattr(t, name)(), fn, np.array(SPECIAL, F), device=device, grad=False)


@pytest.mark.parametrize("name", ["atan", "asinh", "sinh", "logsigmoid", "hardswish"])
def test_unary_float64_empty_and_0d(device, name):
    fn = UNARY[name][0]
    compare(lambda t: getattr(t, name)(), fn, np.linspace(-3, 3, 11), device=device, rtol=1e-12, atol=1e-13,
            grad_rtol=1e-11, grad_atol=1e-12)
    compare(lambda t: getattr(t, name)(), fn, np.zeros((0, 3), F), device=device)
    compare(lambda t: getattr(t, name)(), fn, np.array(0.25, F), device=device)


def test_unary_half_and_int_inputs(device):
    compare(lambda t: t.atan(), None, np.linspace(-4, 4, 9).astype(np.float16), device=device, grad=False,
            rtol=1e-3, atol=1e-3)
    compare(lambda t: t.asinh(), None, np.arange(-3, 4, dtype=np.int32), device=device, grad=False)


# ------------------------------------------------------------------------------------------ named arithmetic

BINARY = {
    "add": (lambda a, b: a.add(b, alpha=2.5), None), "sub": (lambda a, b: a.sub(b, alpha=-1.5), None),
    "mul": (lambda a, b: a.mul(b), None), "div": (lambda a, b: a.div(b), None),
    "div_trunc": (lambda a, b: a.div(b, rounding_mode="trunc"), None),
    "div_floor": (lambda a, b: a.div(b, rounding_mode="floor"), None),
    "fmod": (lambda a, b: a.fmod(b), None), "mod": (lambda a, b: a.mod(b) if is_tg(a) else a.remainder(b), None),
    "copysign": (lambda a, b: a.copysign(b), None), "logaddexp": (lambda a, b: a.logaddexp(b), None),
    "lerp": (lambda a, b: a.lerp(b, 0.3), None), "lerp_t": (lambda a, b: a.lerp(b, b.sigmoid()), None),
}


@pytest.mark.parametrize("name", list(BINARY))
def test_named_binary_against_torch(device, name):
    fn, ref = BINARY[name]
    a, b = arrays((3, 1, 5), (4, 5), seed=2, lo=-5, hi=5)
    grad = name not in ("div_trunc", "div_floor", "mod")
    compare(fn, ref, a, b, device=device, grad=grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["div_trunc", "div_floor", "fmod", "mod", "add", "mul"])
def test_named_binary_ints(device, name):
    fn, ref = BINARY[name] if name != "add" else (lambda a, b: a.add(b, alpha=3), None)
    a = np.array([7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], np.int32)
    compare(fn, ref, a, b, device=device, grad=False, check_dtype=False)


def test_named_binary_specials(device):
    a = np.array([math.inf, -math.inf, math.inf, -math.inf, 0.0, -0.0, math.nan, 2.0], F)
    b = np.array([math.inf, -math.inf, -math.inf, 1.0, -0.0, 0.0, 1.0, -0.0], F)
    for fn in (lambda x, y: x.logaddexp(y), lambda x, y: x.copysign(y)):
        compare(fn, None, a, b, device=device, grad=False)


def test_neg_clone_isclose(device):
    a, b = arrays((2, 3), (2, 3), seed=3)
    compare(lambda x: x.neg(), None, a, device=device)
    compare(lambda x: x.clone() * 2, None, a, device=device)
    b[0, 0] = a[0, 0] + 1e-7
    a[1, 1], b[1, 1] = math.nan, math.nan
    a[1, 2], b[1, 2] = math.inf, math.inf
    compare(lambda x, y: x.isclose(y), None, a, b, device=device, grad=False)
    compare(lambda x, y: x.isclose(y, equal_nan=True), None, a, b, device=device, grad=False)
    t = Tensor(a, device=device).realize()
    c = t.clone().realize()
    c.assign(Tensor.zeros(2, 3, device=device))
    np.testing.assert_array_equal(t.numpy(), a)


# ------------------------------------------------------------------------------------------ extended methods

@pytest.mark.parametrize("pad", [(1, 2), (2, 0, 1, 1), (1, -1, 0, 2), (0, 0, 0, 0, 1, 1)])
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_torch_style(device, pad, mode):
    x = arrays((2, 3, 4), seed=4)[0]
    if mode != "constant" and (any(p < 0 for p in pad) or len(pad) == 6):
        pytest.skip("torch allows negative amounts only in constant mode, and 3 padded axes only from 4-d up")
    kw = {"value": 1.5} if mode == "constant" else {}
    compare(lambda t: t.pad(pad, mode=mode, **kw) if is_tg(t) else TF.pad(t, pad, mode=mode, **kw), None, x,
            device=device)


def test_pad_mode_as_second_argument(device):
    x = arrays((3, 4), seed=5)[0]
    compare(lambda t: t.pad((1, 2), "reflect") if is_tg(t) else TF.pad(t[None], (1, 2), "reflect")[0], None, x,
            device=device)


@pytest.mark.parametrize("dims", [(0, -1), (1, 2), (1, -1), (2, 2), (0, 1)])
def test_flatten_range(device, dims):
    compare(lambda t: t.flatten(*dims), None, arrays((2, 3, 0, 5), seed=6)[0], device=device)
    compare(lambda t: t.flatten(*dims), None, arrays((2, 3, 4, 5), seed=6)[0], device=device)


def test_flatten_0d_and_bad_dims(device):
    compare(lambda t: t.flatten(), None, np.array(3.0, F), device=device)
    raises_like_torch(lambda: Tensor.ones(2, 3, device=device).flatten(1, 0), lambda: torch.ones(2, 3).flatten(1, 0))


def test_reshape_with_none_and_minus_one(device):
    x = Tensor.ones(2, 3, 4, device=device)
    assert x.reshape(None, -1).shape == (2, 12)
    assert x.reshape((None, None, 2, 2)).shape == (2, 3, 2, 2)
    compare(lambda t: t.reshape(-1, 4), None, arrays((2, 3, 4), seed=7)[0], device=device)


@pytest.mark.parametrize("pos,neg", [(True, True), (True, False), (False, True), (False, False)])
def test_isinf_arguments(device, pos, neg):
    x = np.array(SPECIAL, F)
    compare(lambda t: t.isinf(detect_positive=pos, detect_negative=neg) if is_tg(t) else
            ((t == math.inf) & pos) | ((t == -math.inf) & neg), None, x, device=device, grad=False)


@pytest.mark.parametrize("which", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cummax_cummin_values_and_indices(device, which, dim):
    x = np.random.default_rng(8).integers(-3, 3, (4, 7)).astype(F)  # many ties
    x[2, 3] = math.nan
    compare(lambda t: tuple(getattr(t, which)(dim)), None, x, device=device)
    x[2, 3] = 5
    compare(lambda t: tuple(getattr(t, which)(dim)), None, x.astype(np.int32), device=device, grad=False)


def test_cummax_0d_and_empty(device):
    compare(lambda t: tuple(t.cummax(0)), None, np.array(2.0, F), device=device)
    compare(lambda t: tuple(t.cummin(1)), None, np.zeros((2, 0), F), device=device)


# ------------------------------------------------------------------------------------------ Tensor.gradient

def test_gradient_like_autograd_grad(device):
    a, b = arrays((3, 4), (4,), seed=9)
    x, y = Tensor(a, device=device).requires_grad_(), Tensor(b, device=device).requires_grad_()
    loss = ((x * y).exp().sum(1) ** 2).mean()
    gx, gy = loss.gradient(x, y)
    assert x.grad is None
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    rx, ry = torch.autograd.grad(((tx * ty).exp().sum(1) ** 2).mean(), (tx, ty))
    np.testing.assert_allclose(gx.numpy(), rx.numpy(), rtol=1e-5)
    np.testing.assert_allclose(gy.numpy(), ry.numpy(), rtol=1e-5)
    seed = np.arange(4, dtype=F)
    (g2,) = (x * 3).sum(0).gradient(x, gradient=Tensor(seed, device=device))
    np.testing.assert_allclose(g2.numpy(), np.broadcast_to(seed * 3, (3, 4)))


def test_gradient_errors(device):
    x = Tensor([1.0, 2.0], device=device).requires_grad_()
    with pytest.raises(RuntimeError):
        (x * 2).gradient(x)  # not a scalar, no gradient given
    with pytest.raises(RuntimeError):
        (x * 2).sum().gradient(Tensor([1.0], device=device))  # not used


# ------------------------------------------------------------------------------------------ softmax family, losses

@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
@pytest.mark.parametrize("dim", [0, -1])
def test_softmax_family(device, name, dim):
    x = arrays((3, 5), seed=10, lo=-20, hi=20)[0]
    compare(lambda t: getattr(t, name)(dim), lambda t: getattr(TF, name)(t, dim), x, device=device, rtol=1e-5,
            atol=1e-6)


def test_softmax_0d_and_empty(device):
    compare(lambda t: t.softmax(0), lambda t: t.softmax(0), np.array(1.5, F), device=device)
    compare(lambda t: t.log_softmax(1), lambda t: t.log_softmax(1), np.zeros((0, 3), F), device=device)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_method(device, smoothing, reduction):
    x = arrays((4, 5, 3), seed=11)[0]
    y = np.array([[0, 4, 2], [1, 1, -100], [3, 0, 4], [2, 2, 2]], np.int64)
    compare(lambda t, tt: t.cross_entropy(tt, reduction=reduction, label_smoothing=smoothing) if is_tg(t) else
            TF.cross_entropy(t, tt, reduction=reduction, label_smoothing=smoothing), None, x, y, device=device,
            check_dtype=False, rtol=1e-5, atol=1e-6)
    p = np.random.default_rng(12).dirichlet(np.ones(5), (4, 3)).transpose(0, 2, 1).astype(F)
    compare(lambda t, tt: t.cross_entropy(tt, reduction=reduction, label_smoothing=smoothing) if is_tg(t) else
            TF.cross_entropy(t, tt, reduction=reduction, label_smoothing=smoothing), None, x, p, device=device,
            rtol=1e-5, atol=1e-6)


def test_nll_and_sparse_categorical(device):
    x = arrays((6, 4), seed=13)[0]
    y = np.array([0, 3, 1, -1, 2, 3], np.int64)
    compare(lambda t, tt: t.log_softmax(-1).nll_loss(tt, ignore_index=-1) if is_tg(t) else
            TF.nll_loss(t.log_softmax(-1), tt, ignore_index=-1), None, x, y, device=device, check_dtype=False)
    compare(lambda t, tt: t.sparse_categorical_crossentropy(tt, label_smoothing=0.1) if is_tg(t) else
            TF.cross_entropy(t, tt, ignore_index=-1, label_smoothing=0.1), None, x, y, device=device,
            check_dtype=False)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_binary_crossentropy_methods(device, reduction):
    p, y, pw = arrays((3, 4), (3, 4), (4,), seed=14, lo=0.01, hi=0.99)
    compare(lambda a, b: a.binary_crossentropy(b, reduction=reduction) if is_tg(a) else
            TF.binary_cross_entropy(a, b, reduction=reduction), None, p, y, device=device, rtol=1e-5, atol=1e-6)
    x = arrays((3, 4), seed=15, lo=-30, hi=30)[0]
    pos = pw * 3
    compare(lambda a, b: a.binary_crossentropy_logits(b, reduction=reduction, pos_weight=Tensor(pos, device=device))
            if is_tg(a) else TF.binary_cross_entropy_with_logits(a, b, reduction=reduction,
                                                                  pos_weight=torch.tensor(pos)), None, x, y,
            device=device, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_scaled_dot_product_attention_method(device, mask):
    q, k, v = arrays((2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 7), seed=16)
    m = np.random.default_rng(17).random((5, 6)) > 0.3
    m[:, 0] = True

    def fn(a, b, c):
        arr = m if mask == "bool" else m.astype(F)
        as_mask = Tensor(arr, device=device) if is_tg(a) else torch.tensor(arr)
        extra = {"none": {}, "causal": {"is_causal": True}, "bool": {"attn_mask": as_mask},
                 "float": {"attn_mask": as_mask}}[mask]
        return a.scaled_dot_product_attention(b, c, **extra) if is_tg(a) else TF.scaled_dot_product_attention(
            a, b, c, **extra)
    compare(fn, None, q, k, v, device=device, rtol=1e-5, atol=1e-6)


def test_scaled_dot_product_attention_dropout_keeps_shape_and_scale(device):
    q = Tensor.ones(1, 1, 4, 8, device=device)
    out = q.scaled_dot_product_attention(q, q, dropout_p=0.5)
    vals = np.unique(np.round(out.numpy(), 5))
    assert out.shape == (1, 1, 4, 8) and set(vals) <= {0.0, 0.5, 1.0, 1.5, 2.0}


# ------------------------------------------------------------------------------------------ convolution and pooling

@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_method_picks_rank_from_weight(device, nd):
    x, w, b = arrays((2, 4) + (5,) * nd, (6, 2) + (3,) * nd, (6,), seed=18)
    tfn = [TF.conv1d, TF.conv2d, TF.conv3d][nd - 1]
    compare(lambda a, ww, bb: a.conv2d(ww, bb, stride=2, padding=1, groups=2) if is_tg(a) else
            tfn(a, ww, bb, stride=2, padding=1, groups=2), None, x, w, b, device=device, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_transpose_method(device, nd):
    x, w = arrays((1, 4) + (3,) * nd, (4, 3) + (2,) * nd, seed=19)
    tfn = [TF.conv_transpose1d, TF.conv_transpose2d, TF.conv_transpose3d][nd - 1]
    compare(lambda a, ww: a.conv_transpose2d(ww, stride=2, padding=1, output_padding=1) if is_tg(a) else
            tfn(a, ww, stride=2, padding=1, output_padding=1), None, x, w, device=device, rtol=1e-4, atol=1e-5)


def test_conv_flat_torch_style_padding(device):
    x, w = arrays((1, 2, 5, 6), (3, 2, 3, 3), seed=20)
    # (left, right, top, bottom) = (2, 0, 1, 1): torch needs an explicit F.pad for asymmetric padding
    compare(lambda a, ww: a.conv2d(ww, padding=(2, 0, 1, 1)) if is_tg(a) else TF.conv2d(TF.pad(a, (2, 0, 1, 1)), ww),
            None, x, w, device=device, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("args", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                  dict(kernel_size=(2, 3), stride=1, dilation=2), dict(kernel_size=3, ceil_mode=True)])
def test_max_pool2d_with_indices_and_unpool(device, args):
    x = np.random.default_rng(21).integers(-4, 4, (2, 3, 7, 8)).astype(F)  # ties: the first maximum wins
    compare(lambda a: tuple(a.max_pool2d(**args, return_indices=True)) if is_tg(a) else
            TF.max_pool2d(a, **args, return_indices=True), None, x, device=device, grad=False)
    if args.get("dilation", 1) == 1 and not args.get("ceil_mode"):
        un = {k: v for k, v in args.items() if k in ("kernel_size", "stride", "padding")}

        def roundtrip(a):
            if is_tg(a):
                v, i = a.max_pool2d(**args, return_indices=True)
                return v.max_unpool2d(i, **un, output_size=(7, 8))
            v, i = TF.max_pool2d(a, **args, return_indices=True)
            return TF.max_unpool2d(v, i, **un, output_size=(7, 8))
        compare(roundtrip, None, arrays((2, 3, 7, 8), seed=22)[0], device=device)


def test_pool_3d_methods(device):
    x = arrays((1, 2, 5, 6, 4), seed=23)[0]
    compare(lambda a: a.max_pool3d(2) if is_tg(a) else TF.max_pool3d(a, 2), None, x, device=device)
    compare(lambda a: a.avg_pool3d(3, 2, 1) if is_tg(a) else TF.avg_pool3d(a, 3, 2, 1), None, x, device=device)
    compare(lambda a: tuple(a.max_pool3d((2, 3, 2), return_indices=True)) if is_tg(a) else
            TF.max_pool3d(a, (2, 3, 2), return_indices=True), None, x, device=device, grad=False)


def test_avg_pool2d_dilation_is_a_dilated_mean(device):
    x = arrays((2, 3, 9, 8), seed=24)[0]
    ones = np.full((3, 1, 2, 3), 1 / 6, F)
    compare(lambda a: a.avg_pool2d((2, 3), stride=2, dilation=2) if is_tg(a) else
            TF.conv2d(a, torch.tensor(ones), stride=2, dilation=2, groups=3), None, x, device=device, rtol=1e-5,
            atol=1e-6)


def test_normalize_linear_dropout_methods(device):
    x, w, b = arrays((3, 5), (4, 5), (4,), seed=25)
    compare(lambda a: a.normalize(dim=1), lambda a: TF.normalize(a, dim=1), x, device=device)
    compare(lambda a: a.normalize(p=1.0, dim=0), lambda a: TF.normalize(a, p=1.0, dim=0), x, device=device)
    compare(lambda a, ww, bb: a.linear(ww, bb) if is_tg(a) else TF.linear(a, ww, bb), None, x, w, b, device=device)
    assert Tensor.ones(4, device=device).dropout(0.5, training=False).numpy().tolist() == [1.0] * 4


def test_bad_arguments_raise_like_torch(device):
    raises_like_torch(lambda: Tensor.ones(3, device=device).div(2, rounding_mode="up"),
                      lambda: torch.ones(3).div(2, rounding_mode="up"))
    raises_like_torch(lambda: Tensor.ones(2, 3, device=device).conv2d(Tensor.ones(3, 3, device=device)),
                      lambda: TF.conv2d(torch.ones(1, 2, 3), torch.ones(3, 3)))
    with pytest.raises(TensorValueError):
        Tensor.ones(2, 3, device=device).pad((1, 2, 3))
    assert dtypes.int64 is Tensor.ones(1, 1, 2, 2, device=device).max_pool2d(2, return_indices=True)[1].dtype


# ------------------------------------------------------------------------------------------ exception types

BAD_CALLS = {  # name: (tgcore call, torch call); shapes that do not fit raise RuntimeError in torch
    "broadcast": (lambda d: Tensor.ones(2, 3, device=d) + Tensor.ones(4, device=d),
                  lambda: torch.ones(2, 3) + torch.ones(4)),
    "reshape": (lambda d: Tensor.ones(2, 3, device=d).reshape(4, 2), lambda: torch.ones(2, 3).reshape(4, 2)),
    "reshape_two_minus_one": (lambda d: Tensor.ones(2, 3, device=d).reshape(-1, -1),
                              lambda: torch.ones(2, 3).reshape(-1, -1)),
    "expand": (lambda d: Tensor.ones(2, 3, device=d).expand(4, 3), lambda: torch.ones(2, 3).expand(4, 3)),
    "permute": (lambda d: Tensor.ones(2, 3, device=d).permute(0, 0), lambda: torch.ones(2, 3).permute(0, 0)),
    "matmul": (lambda d: Tensor.ones(2, 3, device=d) @ Tensor.ones(2, 3, device=d),
               lambda: torch.ones(2, 3) @ torch.ones(2, 3)),
    "matmul_0d": (lambda d: Tensor(1.0, device=d) @ Tensor.ones(2, device=d),
                  lambda: torch.tensor(1.0) @ torch.ones(2)),
    "cat": (lambda d: Tensor.cat([Tensor.ones(2, 3, device=d), Tensor.ones(2, 4, device=d)]),
            lambda: torch.cat([torch.ones(2, 3), torch.ones(2, 4)])),
    "stack": (lambda d: Tensor.stack([Tensor.ones(2, device=d), Tensor.ones(3, device=d)]),
              lambda: torch.stack([torch.ones(2), torch.ones(3)])),
    "item": (lambda d: Tensor.ones(2, device=d).item(), lambda: torch.ones(2).item()),
    "bool": (lambda d: bool(Tensor.ones(2, device=d)), lambda: bool(torch.ones(2))),
    "split": (lambda d: Tensor.ones(5, device=d).split([2, 2]), lambda: torch.ones(5).split([2, 2])),
    "chunk": (lambda d: Tensor.ones(3, device=d).chunk(0), lambda: torch.ones(3).chunk(0)),
    "repeat": (lambda d: Tensor.ones(2, 3, device=d).repeat(2), lambda: torch.ones(2, 3).repeat(2)),
    "negative_shape": (lambda d: Tensor.zeros(-1, device=d), lambda: torch.zeros(-1)),
    "arange_step_0": (lambda d: Tensor.arange(0, 5, 0, device=d), lambda: torch.arange(0, 5, 0)),
    "conv_channels": (lambda d: Tensor.ones(1, 2, 5, 5, device=d).conv2d(Tensor.ones(3, 4, 3, 3, device=d)),
                      lambda: TF.conv2d(torch.ones(1, 2, 5, 5), torch.ones(3, 4, 3, 3))),
    "linear": (lambda d: Tensor.ones(2, 3, device=d).linear(Tensor.ones(4, 5, device=d)),
               lambda: TF.linear(torch.ones(2, 3), torch.ones(4, 5))),
    "transpose_dim": (lambda d: Tensor.ones(2, device=d).transpose(0, 3), lambda: torch.ones(2).transpose(0, 3)),
    "softmax_dim": (lambda d: Tensor.ones(2, device=d).softmax(2), lambda: torch.ones(2).softmax(2)),
    "backward_non_scalar": (lambda d: (Tensor.ones(2, device=d).requires_grad_() * 2).backward(),
                            lambda: (torch.ones(2, requires_grad=True) * 2).backward()),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_bad_calls_raise_torchs_exception_type(device, name):
    tg_call, torch_call = BAD_CALLS[name]
    raises_like_torch(lambda: tg_call(device), torch_call)
    try:
        torch_call()
    except RuntimeError:  # where torch says RuntimeError, tgcore's exception is a ValueError as well (as it was)
        with pytest.raises(ValueError):
            tg_call(device)
    except Exception:  # noqa: BLE001,S110 (IndexError, TypeError: the same class as torch's, checked above)
        pass

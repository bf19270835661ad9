"""tgcore.nn.functional against torch.nn.functional: forward values and gradients (CPU and PYTHON), float16
forwards for a few ops, and the error messages of bad arguments."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tgcore.nn.functional as F
from tgcore.dtype import dtypes
from tgcore.tensor import Tensor

torch = pytest.importorskip("torch") if os.environ.get("CI") != "true" else __import__("torch")
TF = torch.nn.functional

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def data(shape, seed, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


def check(fn_tg, fn_torch, arrays, device, grads=None, rtol=1e-4, atol=1e-5, consts=()):
    """Forward values and the gradients of sum(out * probe) for every float input in ``grads`` (default: all of
    ``arrays``) match torch. ``consts`` are extra non-differentiable arguments (numpy arrays), passed last."""
    grads = list(range(len(arrays))) if grads is None else grads
    ts = [Tensor(a, device=device, requires_grad=i in grads) for i, a in enumerate(arrays)]
    tt = [torch.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    cs_tg = [Tensor(c, device=device) for c in consts]
    cs_tt = [torch.tensor(c) for c in consts]
    out_tg, out_tt = fn_tg(*ts, *cs_tg), fn_torch(*tt, *cs_tt)
    assert out_tg.shape == tuple(out_tt.shape)
    probe = data(tuple(out_tt.shape), 99)  # a non-uniform upstream gradient catches transposed rules
    (out_tg * Tensor(probe, device=device)).sum().backward()
    (out_tt * torch.tensor(probe)).sum().backward()
    wanted = [t.grad for i, t in enumerate(ts) if i in grads]
    assert all(g is not None for g in wanted)
    out_tg.realize(*wanted)  # one schedule: the forward work is shared
    np.testing.assert_allclose(out_tg.numpy(), out_tt.detach().numpy(), rtol=rtol, atol=atol)
    for i in grads:
        np.testing.assert_allclose(ts[i].grad.numpy(), tt[i].grad.numpy(), rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i}")


# ------------------------------------------------------------------------------------------ linear, matmul

MATMUL_SHAPES = [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((2, 1, 3, 5), (4, 5, 2)), ((5,), (2, 5, 3))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES)
def test_matmul_batch_broadcast(device, shapes):
    a, b = data(shapes[0], 1), data(shapes[1], 2)
    check(lambda x, y: x @ y, lambda x, y: x @ y, [a, b], device)


@pytest.mark.parametrize("bias", [True, False])
def test_linear(device, bias):
    arrays = [data((2, 3, 6), 1), data((4, 6), 2)] + ([data((4,), 3)] if bias else [])
    check(F.linear, TF.linear, arrays, device)


# ------------------------------------------------------------------------------------------ convolutions

CONV2D = {
    "plain": ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    "stride_pad": ((2, 3, 8, 7), (4, 3, 3, 2), {"stride": 2, "padding": 1}),
    "dilation": ((1, 2, 9, 8), (3, 2, 3, 3), {"dilation": (2, 1), "padding": (2, 0)}),
    "groups": ((2, 4, 6, 6), (6, 2, 3, 3), {"groups": 2, "stride": (1, 2), "padding": 1}),
    "depthwise_same": ((1, 3, 5, 5), (3, 1, 3, 3), {"groups": 3, "padding": "same"}),
    "1x1_stride3": ((2, 3, 7, 7), (2, 3, 1, 1), {"stride": 3}),
    "patches": ((2, 3, 8, 7), (4, 3, 2, 2), {"stride": (2, 3)}),  # windows that do not overlap
}


@pytest.mark.parametrize("name", list(CONV2D))
def test_conv2d(device, name):
    xs, ws, kw = CONV2D[name]
    check(lambda x, w, b: F.conv2d(x, w, b, **kw), lambda x, w, b: TF.conv2d(x, w, b, **kw),
          [data(xs, 1), data(ws, 2), data((ws[0],), 3)], device)


def test_conv2d_unbatched_without_bias(device):
    check(lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: TF.conv2d(x, w, padding=1),
          [data((2, 5, 4), 1), data((3, 2, 3, 3), 2)], device)


@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 2, "dilation": 2}, {"groups": 2, "padding": "same"}])
def test_conv1d(device, kw):
    check(lambda x, w, b: F.conv1d(x, w, b, **kw), lambda x, w, b: TF.conv1d(x, w, b, **kw),
          [data((2, 4, 11), 1), data((6, 4 // kw.get("groups", 1), 3), 2), data((6,), 3)], device)


CONV_T2D = {
    "plain": ((2, 3, 4, 5), (3, 2, 3, 3), {}),
    "stride_pad": ((1, 3, 4, 4), (3, 4, 3, 2), {"stride": 2, "padding": 1, "output_padding": 1}),
    "groups_dilation": ((2, 4, 3, 4), (4, 1, 2, 3), {"groups": 2, "dilation": (2, 1), "stride": (1, 3)}),
}


@pytest.mark.parametrize("name", list(CONV_T2D))
def test_conv_transpose2d(device, name):
    xs, ws, kw = CONV_T2D[name]
    cout = ws[1] * kw.get("groups", 1)
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), lambda x, w, b: TF.conv_transpose2d(x, w, b, **kw),
          [data(xs, 1), data(ws, 2), data((cout,), 3)], device)


def test_conv_transpose1d(device):
    kw = {"stride": 3, "padding": 2, "output_padding": 1}
    check(lambda x, w: F.conv_transpose1d(x, w, **kw), lambda x, w: TF.conv_transpose1d(x, w, **kw),
          [data((2, 3, 5), 1), data((3, 2, 4), 2)], device)


# ------------------------------------------------------------------------------------------ pooling

def distinct(shape, seed):
    """Values without ties, so every max has one position (torch and tgcore route tied gradients differently)."""
    rng = np.random.default_rng(seed)
    return (rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 3.0).astype(np.float32)


MAXPOOL = {
    "k2": (2, {}),
    "k3_s2_p1": (3, {"stride": 2, "padding": 1}),
    "dilation": ((2, 3), {"stride": 1, "dilation": (2, 1)}),
    "ceil": (3, {"stride": 2, "ceil_mode": True}),
    "k2_s3": (2, {"stride": 3}),  # gaps between windows; along 8 the last row of 3 is cut by the end
}


@pytest.mark.parametrize("name", list(MAXPOOL))
def test_max_pool2d(device, name):
    k, kw = MAXPOOL[name]
    check(lambda x: F.max_pool2d(x, k, **kw), lambda x: TF.max_pool2d(x, k, **kw), [distinct((2, 2, 7, 8), 1)],
          device)


AVGPOOL = {
    "k2": (2, {}),
    "k3_s2_p1": (3, {"stride": 2, "padding": 1}),
    "exclude_pad": ((3, 2), {"stride": (2, 1), "padding": 1, "count_include_pad": False}),
    "ceil": (3, {"stride": 2, "ceil_mode": True, "padding": 1}),
    "ceil_exclude_pad": (2, {"stride": 2, "ceil_mode": True, "padding": 1, "count_include_pad": False}),
    "divisor": (2, {"divisor_override": 3}),
    "k2_s3_p1_exclude_pad": (2, {"stride": 3, "padding": 1, "count_include_pad": False}),
}


@pytest.mark.parametrize("name", list(AVGPOOL))
def test_avg_pool2d(device, name):
    k, kw = AVGPOOL[name]
    check(lambda x: F.avg_pool2d(x, k, **kw), lambda x: TF.avg_pool2d(x, k, **kw), [data((2, 2, 7, 8), 1)], device)


def test_pool1d(device):
    check(lambda x: F.max_pool1d(x, 3, 2, 1) + F.avg_pool1d(x, 3, 2, 1),
          lambda x: TF.max_pool1d(x, 3, 2, 1) + TF.avg_pool1d(x, 3, 2, 1), [distinct((2, 3, 9), 2)], device)


def test_max_pool_tied_window_splits_gradient():
    x = Tensor(np.ones((1, 1, 2, 2), np.float32), requires_grad=True)
    F.max_pool2d(x, 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((1, 1, 2, 2), 0.25, np.float32))


# ------------------------------------------------------------------------------------------ softmax and norms

@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_and_log_softmax(device, dim):
    check(lambda x: F.softmax(x, dim) + F.log_softmax(x, dim) * 0.5,
          lambda x: TF.softmax(x, dim) + TF.log_softmax(x, dim) * 0.5, [data((3, 5, 4), 1, -5, 5)], device)


def test_softmax_large_values_do_not_overflow():
    x = Tensor(np.array([[1000.0, 1001.0, -1000.0]], np.float32))
    ref = TF.log_softmax(torch.tensor(x.numpy()), -1).numpy()
    np.testing.assert_allclose(F.log_softmax(x).numpy(), ref, rtol=1e-6)
    assert np.isfinite(F.softmax(x).numpy()).all()


def test_layer_norm(device):
    check(lambda x, w, b: F.layer_norm(x, (3, 4), w, b), lambda x, w, b: TF.layer_norm(x, (3, 4), w, b),
          [data((2, 3, 4), 1), data((3, 4), 2), data((3, 4), 3)], device)


@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rms_norm(device, eps):
    check(lambda x, w: F.rms_norm(x, 4, w, eps), lambda x, w: TF.rms_norm(x, (4,), w, eps),
          [data((2, 3, 4), 1), data((4,), 2)], device)


def test_batch_norm_training_updates_running_stats(device):
    x = data((4, 3, 2, 5), 1)
    rm_np, rv_np = data((3,), 2), data((3,), 3, 0.5, 2.0)
    rm, rv = Tensor(rm_np, device=device).contiguous().realize(), Tensor(rv_np, device=device).contiguous().realize()
    rm_t, rv_t = torch.tensor(rm_np), torch.tensor(rv_np)
    check(lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2),
          lambda x, w, b: TF.batch_norm(x, rm_t, rv_t, w, b, training=True, momentum=0.2),
          [x, data((3,), 4), data((3,), 5)], device)
    np.testing.assert_allclose(rm.numpy(), rm_t.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv.numpy(), rv_t.numpy(), rtol=1e-5, atol=1e-6)


def test_batch_norm_eval(device):
    rm, rv = data((3,), 2), data((3,), 3, 0.5, 2.0)
    check(lambda x, w, b: F.batch_norm(x, Tensor(rm, device=device), Tensor(rv, device=device), w, b, eps=1e-3),
          lambda x, w, b: TF.batch_norm(x, torch.tensor(rm), torch.tensor(rv), w, b, eps=1e-3),
          [data((4, 3, 5), 1), data((3,), 4), data((3,), 5)], device)


# ------------------------------------------------------------------------------------------ dropout, embedding

def test_dropout_statistics_and_gradient():
    Tensor.manual_seed(3)
    x = Tensor(np.ones((64, 64), np.float32), requires_grad=True)
    out = F.dropout(x, 0.25)
    out.sum().backward()
    vals, g = out.numpy(), x.grad.numpy()
    kept = vals != 0
    assert abs(kept.mean() - 0.75) < 0.03
    np.testing.assert_allclose(vals[kept], 1 / 0.75, rtol=1e-6)
    np.testing.assert_array_equal(g, vals)  # d(out)/dx is the same mask and scale
    assert F.dropout(x, 0.5, training=False) is x
    assert (F.dropout(x, 1.0).numpy() == 0).all()
    with pytest.raises(ValueError, match="dropout probability"):
        F.dropout(x, 1.5)


def test_dropout_masks_are_fresh_under_jit_and_repeatable_with_a_seed():
    import tgcore
    from tgcore.engine.realize import CompileCounter
    x = Tensor(np.ones((8, 16), np.float32))
    Tensor.manual_seed(7)
    eager = [F.dropout(x, 0.5).numpy() for _ in range(3)]
    before = CompileCounter.count
    eager.append(F.dropout(x, 0.5).numpy())
    assert CompileCounter.count == before  # the counter is data, not a constant in the kernel
    assert not any(np.array_equal(eager[i], eager[i + 1]) for i in range(3))
    Tensor.manual_seed(7)
    np.testing.assert_array_equal(F.dropout(x, 0.5).numpy(), eager[0])
    step = tgcore.jit(lambda a: F.dropout(a, 0.5) * 1.0)
    replays = [step(x).numpy() for _ in range(5)]  # run, capture, then three replays
    assert not any(np.array_equal(replays[i], replays[i + 1]) for i in range(4))


def test_embedding(device):
    idx = np.array([[0, 3, 3], [1, 0, 4]], np.int32)
    check(lambda w, i: F.embedding(i, w), lambda w, i: TF.embedding(i.long(), w), [data((5, 3), 1)], device,
          consts=[idx])


# ------------------------------------------------------------------------------------------ losses

CE = {
    "plain": {},
    "smoothing": {"label_smoothing": 0.2},
    "ignore_index": {"ignore_index": 2},
    "ignore_smoothing_sum": {"ignore_index": 1, "label_smoothing": 0.1, "reduction": "sum"},
    "weight": {"weight": True},
    "weight_smoothing_ignore": {"weight": True, "label_smoothing": 0.3, "ignore_index": 0},
    "none": {"reduction": "none", "label_smoothing": 0.1},
}


@pytest.mark.parametrize("name", list(CE))
def test_cross_entropy(device, name):
    kw = dict(CE[name])
    target = np.array([2, 0, 4, 1, 2, 3], np.int32)
    arrays = [data((6, 5), 1, -3, 3)]
    if kw.pop("weight", False):
        arrays.append(data((5,), 2, 0.2, 2.0))
        check(lambda x, w, t: F.cross_entropy(x, t, w, **kw), lambda x, w, t: TF.cross_entropy(x, t.long(), w, **kw),
              arrays, device, grads=[0], consts=[target])
    else:
        check(lambda x, t: F.cross_entropy(x, t, **kw), lambda x, t: TF.cross_entropy(x, t.long(), **kw),
              arrays, device, consts=[target])


def test_cross_entropy_spatial_and_probabilities(device):
    target = np.array([[0, 2, 1], [1, 1, 0]], np.int32)
    check(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), lambda x, t: TF.cross_entropy(x, t.long(),
          label_smoothing=0.1), [data((2, 3, 3), 1)], device, consts=[target])
    probs = np.random.default_rng(5).dirichlet(np.ones(4), size=3).astype(np.float32)
    check(lambda x, p: F.cross_entropy(x, p, label_smoothing=0.2), lambda x, p: TF.cross_entropy(x, p,
          label_smoothing=0.2), [data((3, 4), 2)], device, consts=[probs])


def test_nll_loss(device):
    target = np.array([1, 0, 2, 2], np.int32)
    check(lambda x, t: F.nll_loss(F.log_softmax(x), t, ignore_index=0),
          lambda x, t: TF.nll_loss(TF.log_softmax(x, -1), t.long(), ignore_index=0), [data((4, 3), 1)], device,
          consts=[target])


def test_binary_cross_entropy(device):
    p = data((3, 4), 1, 0.02, 0.98)
    y = (data((3, 4), 2, 0, 1) > 0.5).astype(np.float32)
    check(lambda p, w, y: F.binary_cross_entropy(p, y, w), lambda p, w, y: TF.binary_cross_entropy(p, y, w),
          [p, data((4,), 3, 0.5, 1.5)], device, grads=[0], consts=[y])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits(device, reduction):
    y = data((3, 4), 2, 0, 1)  # soft labels
    check(lambda x, pw, y: F.binary_cross_entropy_with_logits(x, y, reduction=reduction, pos_weight=pw),
          lambda x, pw, y: TF.binary_cross_entropy_with_logits(x, y, reduction=reduction, pos_weight=pw),
          [data((3, 4), 1, -30, 30), data((4,), 3, 0.5, 3.0)], device, grads=[0], consts=[y])


def test_mse_and_l1(device):
    check(lambda a, b: F.mse_loss(a, b) + F.l1_loss(a, b, "sum"), lambda a, b: TF.mse_loss(a, b) + TF.l1_loss(a, b,
          reduction="sum"), [data((3, 4), 1), data((3, 4), 2)], device)


# ------------------------------------------------------------------------------------------ attention

SDPA = {
    "plain": ({}, None),
    "causal": ({"is_causal": True}, None),
    "bool_mask": ({}, "bool"),
    "float_mask_scale": ({"scale": 0.3}, "float"),
    "gqa_causal": ({"is_causal": True, "enable_gqa": True}, None),
}


@pytest.mark.parametrize("name", list(SDPA))
def test_scaled_dot_product_attention(device, name):
    kw, mask = SDPA[name]
    hk = 2 if kw.get("enable_gqa") else 4
    q, k, v = data((2, 4, 3, 5), 1), data((2, hk, 6, 5), 2), data((2, hk, 6, 5), 3)
    if mask is None:
        check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw),
              lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, **kw), [q, k, v], device)
        return
    m = data((3, 6), 4, 0, 1) > 0.3 if mask == "bool" else data((3, 6), 4)
    m[:, 0] = True if mask == "bool" else m[:, 0]  # every query sees at least one key
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m, **kw),
          lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m, **kw), [q, k, v], device, consts=[m])


# ------------------------------------------------------------------------------------------ float16 forwards

FP16 = {
    "linear": (lambda x, w: F.linear(x, w), lambda x, w: TF.linear(x, w), [(4, 32), (8, 32)]),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: TF.conv2d(x, w, padding=1),
               [(2, 3, 6, 6), (4, 3, 3, 3)]),
    "softmax": (lambda x: F.softmax(x), lambda x: TF.softmax(x, -1), [(4, 7)]),
    "layer_norm": (lambda x: F.layer_norm(x, 7), lambda x: TF.layer_norm(x, (7,)), [(4, 7)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), lambda x: TF.max_pool2d(x, 2), [(1, 2, 4, 6)]),
}


@pytest.mark.parametrize("name", list(FP16))
def test_float16_forward(name):
    fn_tg, fn_torch, shapes = FP16[name]
    arrays = [data(s, i).astype(np.float16) for i, s in enumerate(shapes)]
    out = fn_tg(*[Tensor(a) for a in arrays])
    ref = fn_torch(*[torch.tensor(a) for a in arrays])
    assert out.dtype is dtypes.float16
    scale = max(1.0, float(np.abs(ref.float().numpy()).max()))  # one float16 ulp at the outputs' magnitude
    np.testing.assert_allclose(out.numpy().astype(np.float32), ref.float().numpy(), rtol=2e-3, atol=1e-3 * scale)


def test_float64_conv_and_softmax():
    x, w = data((1, 2, 5, 5), 1).astype(np.float64), data((3, 2, 2, 2), 2).astype(np.float64)
    out = F.softmax(F.conv2d(Tensor(x), Tensor(w)), 1)
    assert out.dtype is dtypes.float64
    np.testing.assert_allclose(out.numpy(), TF.softmax(TF.conv2d(torch.tensor(x), torch.tensor(w)), 1).numpy(),
                               rtol=1e-12)


# ------------------------------------------------------------------------------------------ errors

def test_bad_arguments_raise_clear_errors():
    x = Tensor(np.zeros((1, 4, 5, 5), np.float32))
    with pytest.raises(ValueError, match="groups=3"):
        F.conv2d(x, Tensor(np.zeros((3, 4, 3, 3), np.float32)), groups=3)
    with pytest.raises(ValueError, match="expects 2"):
        F.conv2d(x, Tensor(np.zeros((3, 2, 3, 3), np.float32)))
    with pytest.raises(ValueError, match="does not fit"):
        F.conv2d(x, Tensor(np.zeros((3, 4, 7, 7), np.float32)))
    with pytest.raises(ValueError, match="2 spatial axes"):
        F.conv2d(Tensor(np.zeros((5,), np.float32)), Tensor(np.zeros((3, 4, 3, 3), np.float32)))
    with pytest.raises(ValueError, match="'same' needs stride 1"):
        F.conv2d(x, Tensor(np.zeros((3, 4, 3, 3), np.float32)), stride=2, padding="same")
    with pytest.raises(ValueError, match="at most half"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match="target shape"):
        F.cross_entropy(Tensor(np.zeros((3, 4), np.float32)), Tensor(np.zeros((4,), np.int32)))
    with pytest.raises(TypeError, match="class indices"):
        F.cross_entropy(Tensor(np.zeros((3, 4), np.float32)), Tensor(np.zeros((3,), bool)))
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(x, x, "avg")
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(x, (4,))
    with pytest.raises(ValueError, match="multiple of the key/value heads"):
        q = Tensor(np.zeros((1, 3, 2, 4), np.float32))
        F.scaled_dot_product_attention(q, Tensor(np.zeros((1, 2, 2, 4), np.float32)),
                                       Tensor(np.zeros((1, 2, 2, 4), np.float32)), enable_gqa=True)

"""Reductions of ReduceMixin (var, std, prod, argmax/argmin, any/all, logsumexp, cummax/cummin) against numpy, on
every device in ``TG_TEST_DEVICES``: each axis form (None, int, negative, tuple) and keepdim."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tgcore.dtype import dtypes
from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]
AXES = [None, 0, -1, (0, 2), (1, -1)]
RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 5, 6)).astype(np.float32)
XI = RNG.integers(-3, 4, size=(4, 5, 6)).astype(np.int32)  # small ints: many ties


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def close(t: Tensor, ref, rtol=1e-5, atol=1e-5) -> None:
    got = t.numpy()
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


def equal(t: Tensor, ref) -> None:
    got = t.numpy()
    ref = np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_var_std(device, axis, keepdim):
    t = Tensor(X, device=device)
    for correction in (1, 0):
        close(t.var(axis, keepdim, correction=correction), X.var(axis, ddof=correction, keepdims=keepdim))
        close(t.std(axis, keepdim, correction=correction), X.std(axis, ddof=correction, keepdims=keepdim))
    close(Tensor(XI, device=device).var(axis, keepdim), XI.var(axis, ddof=1, keepdims=keepdim, dtype=np.float64))


def test_var_edge_cases(device):
    big = (X + 1e4).astype(np.float32)  # two-pass: subtracting the mean first keeps precision
    close(Tensor(big, device=device).var(), big.astype(np.float64).var(ddof=1), rtol=1e-3)
    assert np.isnan(Tensor([1.0], device=device).var().item())  # one element, correction 1: numpy gives nan
    close(Tensor([1.0, 3.0], device=device).var(correction=2.0 - 1.5), np.var([1.0, 3.0], ddof=0.5))
    v, m = Tensor(X, device=device).var_mean(1)
    close(v, X.var(1, ddof=1))
    close(m, X.mean(1))


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_prod(device, axis, keepdim):
    small = (X / 2 + 1).astype(np.float32)
    close(Tensor(small, device=device).prod(axis, keepdim), np.prod(small, axis, keepdims=keepdim), rtol=1e-4)
    out = Tensor(XI, device=device).prod(axis, keepdim)
    assert out.dtype is dtypes.int64
    equal(out, np.prod(XI, axis, keepdims=keepdim, dtype=np.int64))


def test_prod_dtypes_and_empty(device):
    u8 = np.array([[3, 200], [7, 2]], np.uint8)
    equal(Tensor(u8, device=device).prod(0), np.prod(u8, 0))  # uint64 accumulation, no uint8 wrap
    equal(Tensor(np.zeros((2, 0), np.float32), device=device).prod(1), np.ones(2, np.float32))
    h = np.array([1.5, 2.0, -3.0], np.float16)
    out = Tensor(h, device=device).prod()
    assert out.dtype is dtypes.float16
    close(out, np.prod(h.astype(np.float32)).astype(np.float16))
    close(Tensor(XI, device=device).prod(1, dtype="float32"), np.prod(XI, 1).astype(np.float32))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin_first_on_ties(device, axis, keepdim):
    for a in (X, XI, XI.astype(np.uint8), XI > 0):
        t = Tensor(a, device=device)
        equal(t.argmax(axis, keepdim), np.argmax(a, axis, keepdims=keepdim))
        equal(t.argmin(axis, keepdim), np.argmin(a, axis, keepdims=keepdim))


def test_argmax_non_contiguous_and_errors(device):
    t = Tensor(XI, device=device).permute(2, 0, 1).flip(1)[:, 1:]
    ref = XI.transpose(2, 0, 1)[:, ::-1][:, 1:]
    equal(t.argmax(1), ref.argmax(1))
    equal(t.argmin(), ref.argmin())
    equal(Tensor([-np.inf, 2.0, np.inf, np.inf], device=device).argmax(), 2)
    with pytest.raises(ValueError, match="empty axis"):
        Tensor(np.zeros((2, 0), np.float32), device=device).argmax(1)
    with pytest.raises(IndexError, match="out of range"):
        Tensor(X, device=device).argmax(3)


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all(device, axis, keepdim):
    for a in (XI > 2, XI, X > -2, (XI != 0) | (XI == 0)):
        t = Tensor(a, device=device)
        equal(t.any(axis, keepdim), np.any(a, axis, keepdims=keepdim))
        equal(t.all(axis, keepdim), np.all(a, axis, keepdims=keepdim))
    empty = np.zeros((3, 0), np.bool_)
    equal(Tensor(empty, device=device).any(1), np.any(empty, 1))
    equal(Tensor(empty, device=device).all(1), np.all(empty, 1))


def np_logsumexp(a, axis, keepdims):
    a64 = a.astype(np.float64)
    m = np.max(a64, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(a64 - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(device, axis, keepdim):
    close(Tensor(X, device=device).logsumexp(axis, keepdim), np_logsumexp(X, axis, keepdim).astype(np.float32))


def test_logsumexp_stable(device):
    a = np.array([[1000.0, 1000.0, -5.0], [-1000.0, -1001.0, -1002.0], [-np.inf, -np.inf, -np.inf],
                  [np.inf, 1.0, 2.0]], np.float32)
    with np.errstate(all="ignore"):
        ref = np_logsumexp(a, 1, False).astype(np.float32)
    assert np.isfinite(ref[:2]).all()
    close(Tensor(a, device=device).logsumexp(1), ref, rtol=1e-6)
    close(Tensor(XI, device=device).logsumexp(0), np_logsumexp(XI, 0, False).astype(np.float32))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cummax_cummin(device, axis):
    for a in (X, XI, XI.astype(np.uint8)):
        t = Tensor(a, device=device)
        equal(t.cummax(axis)[0], np.maximum.accumulate(a, axis))
        equal(t.cummin(axis)[0], np.minimum.accumulate(a, axis))
    t = Tensor(X, device=device).T[::-1]
    ref = X.T[::-1]
    equal(t.cummax(axis)[0], np.maximum.accumulate(ref, axis))
    w = np.array([1.0, -np.inf, 3.0, np.inf, 2.0], np.float32)
    equal(Tensor(w, device=device).cummax()[0], np.maximum.accumulate(w))


def test_existing_reductions_keep_their_signatures(device):
    t = Tensor(X, device=device)
    close(t.sum((0, -1), keepdim=True), X.sum((0, -1), keepdims=True), rtol=1e-5)
    close(t.max(-2), X.max(-2))
    close(t.min(axis=(0, 1), keepdim=True), X.min((0, 1), keepdims=True))
    close(t.mean(-1, True), X.mean(-1, keepdims=True))

"""tril/triu, diag/diagonal, roll, meshgrid, unfold, einsum, sort/argsort/topk, nonzero/masked_select, scatter_reduce,
cumprod/logcumsumexp, interpolate and torch-style advanced indexing: values and gradients against torch (issue 21),
on every device in TG_TEST_DEVICES."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch_ref import DEVICES, arrays, compare, is_tg, library, raises_like_torch

from tgcore.tensor import Tensor

F = np.float32


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param



# ------------------------------------------------------------------------------------------ layout

@pytest.mark.parametrize("k", [0, 1, -2, 5])
@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 3), (0, 3)])
def test_tril_triu(device, k, shape):
    x = arrays(shape, seed=1)[0]
    compare(lambda t: t.tril(k), None, x, device=device)
    compare(lambda t: t.triu(k), None, x, device=device)


@pytest.mark.parametrize("args", [(0, 0, 1), (1, 0, 1), (-2, 0, 1), (1, 2, 0), (0, -1, 1), (9, 0, 1)])
def test_diagonal(device, args):
    compare(lambda t: t.diagonal(*args), None, arrays((4, 3, 5), seed=2)[0], device=device)


@pytest.mark.parametrize("k", [0, 2, -1])
def test_diag(device, k):
    compare(lambda t: t.diag(k), None, arrays((4,), seed=3)[0], device=device)
    compare(lambda t: t.diag(k), None, arrays((3, 5), seed=3)[0], device=device)
    compare(lambda t: t.diag(k), None, np.zeros(0, F), device=device)


@pytest.mark.parametrize("shifts,dims", [(2, None), (-1, 0), ((1, -3), (0, 2)), (7, 1), (0, 1)])
def test_roll(device, shifts, dims):
    compare(lambda t: t.roll(shifts, dims), None, arrays((3, 4, 5), seed=4)[0], device=device)


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(device, indexing):
    a, b, c = arrays((3,), (4,), (2,), seed=5)
    compare(lambda x, y, z: tuple(library(x).meshgrid(x, y, z, indexing=indexing)), None, a, b, c, device=device)
    compare(lambda x, y: tuple(library(x).meshgrid(x, y, indexing=indexing)), None, a, b, device=device)


@pytest.mark.parametrize("args", [(0, 3, 2), (1, 2, 1), (-1, 4, 3), (1, 0, 1), (2, 5, 5)])
def test_unfold(device, args):
    compare(lambda t: t.unfold(*args), None, arrays((4, 5, 5), seed=6)[0], device=device)


@pytest.mark.parametrize("formula,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,kj", [(3, 4), (5, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 1)]),
    ("ii->i", [(4, 4)]), ("ii", [(3, 3)]), ("i,i->", [(5,), (5,)]), ("i,j->ij", [(3,), (2,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]), ("ijk->kji", [(2, 3, 4)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4)] * 2),
])
def test_einsum(device, formula, shapes):
    ins = arrays(*shapes, seed=7)
    compare(lambda *t: library(t[0]).einsum(formula, *t), None, *ins, device=device, rtol=1e-5, atol=1e-5)


def test_einsum_ints_and_errors(device):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    compare(lambda t: library(t).einsum("ij->j", t), None, a, device=device, grad=False, check_dtype=False)
    ones = Tensor.ones(2, 3, device=device), Tensor.ones(4, 2, device=device)
    raises_like_torch(lambda: Tensor.einsum("ij,jk", *ones), lambda: torch.einsum("ij,jk", torch.ones(2, 3),
                                                                                  torch.ones(4, 2)))


# ------------------------------------------------------------------------------------------ sorting and selection

@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_sort_argsort_with_ties_and_nan(device, descending, dim):
    x = np.random.default_rng(8).integers(-3, 3, (5, 7)).astype(F)
    x[1, 2] = x[3, 4] = math.nan
    x[0, 0] = -math.inf
    compare(lambda t: tuple(t.sort(dim=dim, descending=descending, stable=True)), None, x, device=device)
    compare(lambda t: t.argsort(dim=dim, descending=descending, stable=True), None, x, device=device, grad=False)


def test_sort_ints_0d_and_empty(device):
    compare(lambda t: tuple(t.sort(0)), None, np.array([3, -1, 2, -1, 7], np.int32), device=device, grad=False)
    compare(lambda t: tuple(t.sort(0)), None, np.array(1.5, F), device=device)
    compare(lambda t: tuple(t.sort(1)), None, np.zeros((2, 0), F), device=device)


@pytest.mark.parametrize("k,largest", [(1, True), (3, True), (3, False), (0, True), (6, False)])
def test_topk(device, k, largest):
    x = np.random.default_rng(9).permutation(24).reshape(4, 6).astype(F) * 0.5  # distinct: the order is defined
    compare(lambda t: tuple(t.topk(k, 1, largest)), lambda t: t.topk(k, 1, largest), x, device=device)
    compare(lambda t: tuple(t.topk(min(k, 4), 0, largest)), lambda t: t.topk(min(k, 4), 0, largest), x,
            device=device)


def test_topk_bad_k(device):
    raises_like_torch(lambda: Tensor.ones(3, device=device).topk(4), lambda: torch.ones(3).topk(4))


def test_nonzero_masked_select(device):
    x = np.array([[0, 1.5, 0], [-2, 0, 3]], F)
    compare(lambda t: t.nonzero(), None, x, device=device, grad=False)
    compare(lambda t: tuple(t.nonzero(as_tuple=True)), None, x, device=device, grad=False)
    compare(lambda t: t.nonzero(), None, np.zeros((2, 0), F), device=device, grad=False)
    mask = np.array([True, False, True])
    compare(lambda t: t.masked_select(Tensor(mask, device=device) if is_tg(t) else torch.tensor(mask)), None, x,
            device=device)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(device, reduce, include_self):
    x, src = arrays((3, 5), (3, 4), seed=10)
    idx = np.array([[0, 2, 2, 4], [1, 1, 1, 1], [3, 0, 3, 0]], np.int64)
    compare(lambda t, s: t.scatter_reduce(1, Tensor(idx, device=device) if is_tg(t) else torch.tensor(idx), s,
                                          reduce, include_self=include_self), None, x, src, device=device,
            grad=reduce in ("sum", "mean", "prod"), rtol=1e-5, atol=1e-6)


def test_scatter_reduce_ints(device):
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    src = np.array([[5, -1, 2], [4, 4, 9]], np.int32)
    idx = np.array([[0, 0, 2], [1, 1, 1]], np.int64)
    for reduce in ("sum", "amax", "amin", "prod"):
        compare(lambda t, s, r=reduce: t.scatter_reduce(1, Tensor(idx, device=device) if is_tg(t) else
                                                         torch.tensor(idx), s, r), None, x, src, device=device,
                grad=False)


# ------------------------------------------------------------------------------------------ running products

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod_with_zeros(device, dim):
    x = arrays((4, 5), seed=11)[0]
    x[1, 2] = x[2, 0] = x[2, 3] = 0.0
    compare(lambda t: t.cumprod(dim), None, x, device=device, rtol=1e-5, atol=1e-6)


def test_cumprod_ints_and_0d(device):
    compare(lambda t: t.cumprod(0), None, np.array([2, -3, 4, 0, 5], np.int32), device=device, grad=False)
    compare(lambda t: t.cumprod(0), None, np.array(3.0, F), device=device)


@pytest.mark.parametrize("dim", [0, -1])
def test_logcumsumexp(device, dim):
    x = arrays((5, 6), seed=12, lo=-50, hi=50)[0]
    x[0, 0], x[2, 3], x[3, 0] = -math.inf, 90.0, -200.0
    compare(lambda t: t.logcumsumexp(dim), None, x, device=device, rtol=1e-5, atol=1e-5)
    compare(lambda t: t.logcumsumexp(0), None, np.array(-math.inf, F), device=device, grad=False)


# ------------------------------------------------------------------------------------------ interpolate

@pytest.mark.parametrize("kw", [dict(size=(8, 4)), dict(scale_factor=1.7), dict(size=(8, 4), mode="bilinear"),
                                dict(size=(9, 11), mode="bilinear", align_corners=True),
                                dict(scale_factor=(2.5, 0.5), mode="bilinear")])
def test_interpolate_2d(device, kw):
    x = arrays((2, 3, 5, 7), seed=13)[0]
    compare(lambda t: t.interpolate(**kw) if is_tg(t) else TF.interpolate(t, **kw), None, x, device=device,
            rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode,shape", [("linear", (1, 2, 6)), ("nearest", (1, 2, 6)), ("trilinear", (1, 1, 3, 4, 2))])
def test_interpolate_1d_3d(device, mode, shape):
    x = arrays(shape, seed=14)[0]
    size = tuple(2 * s + 1 for s in shape[2:])
    compare(lambda t: t.interpolate(size=size, mode=mode) if is_tg(t) else TF.interpolate(t, size=size, mode=mode),
            None, x, device=device, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------ advanced indexing

INDICES = [
    (slice(None), 0, slice(None), [1, 2]),   # torch: the list's axis stays in place (numpy moves it first)
    (0, slice(None), [1, 2], [0, 1]), ((0, 1),), (slice(None), (1, 2)), ([[0], [1]], [0, 2]), (Ellipsis, [1, 2], 0),
    ([0, 1], slice(None), [1, 2]), (1, [0, 2], slice(None), [1, 3]), (slice(None), 1, [0, 1], 2), ([1, -2], 0),
]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_advanced_indexing_like_torch(device, index):
    x = arrays((2, 3, 4, 5), seed=15)[0]
    compare(lambda t: t[index], None, x, device=device)
    value = arrays(tuple(torch.tensor(x)[index].shape), seed=16)[0]

    def setitem(t, v):
        t = t.clone() if is_tg(t) else t.clone()
        t[index] = v
        return t
    compare(setitem, None, x, value, device=device)


def test_advanced_indexing_with_tensor_and_slices(device):
    x = arrays((4, 5, 6), seed=17)[0]
    i = np.array([[0, 3], [2, 2]])
    compare(lambda t: t[1:, Tensor(i, device=device) if is_tg(t) else torch.tensor(i), ::2], None, x, device=device)
    compare(lambda t: t[Tensor(i, device=device) if is_tg(t) else torch.tensor(i), 1, [0, 5]], None, x, device=device)

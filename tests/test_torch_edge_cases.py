"""Results torch gets right at the edges (issue 21, "wrong results"): gradients at 0 and inf, empty and 0-d
tensors, corrections past the count, int64 ranges; checked against torch on every device in TG_TEST_DEVICES."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
from torch_ref import compare, raises_like_torch

from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


F = np.float32
EDGES = np.array([0.0, -0.0, 1.0, -1.5, 2.0, math.inf, -math.inf], F)


@pytest.mark.parametrize("name", ["abs", "relu", "exp", "log", "sqrt", "leaky_relu"])
def test_unary_gradient_at_edges(device, name):
    compare(lambda x: getattr(x, name)(), lambda x: getattr(torch.nn.functional if name == "leaky_relu" else x,
                                                              name)(*([x] if name == "leaky_relu" else [])),
            EDGES, device=device)


def test_relu_keeps_nan_and_negative_zero(device):
    compare(lambda x: x.relu(), None, np.array([math.nan, -0.0, 0.0, -3.0, 3.0], F), device=device, grad=False)


@pytest.mark.parametrize("values", [[0.0, 2.0, 3.0], [2.0, 0.0, 0.0, 5.0], [1.5, -2.0, 4.0], [0.0]])
def test_prod_gradient_with_zeros(device, values):
    a = np.array(values, F)
    compare(lambda x: x.prod(), None, a, device=device)
    compare(lambda x: x.reshape(1, -1).expand(2, -1).prod(1), lambda x: x.reshape(1, -1).expand(2, -1).prod(1), a,
            device=device)


def test_prod_gradient_along_an_axis_with_zeros(device):
    a = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 4.0]], F)
    compare(lambda x: x.prod(0), lambda x: x.prod(0), a, device=device)
    compare(lambda x: x.prod(1, keepdim=True), lambda x: x.prod(1, keepdim=True), a, device=device)


def test_pow_tensor_gradients_at_edges(device):
    base = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 1.0, math.inf, -math.inf, -2.0, -2.0, 2.0, 0.5], F)
    expo = np.array([0.5, 2.5, -1.0, 0.0, 2.5, math.inf, 2.0, 3.0, 3.0, 0.5, -math.inf, 0.0], F)
    compare(lambda x, y: x ** y, None, base, expo, device=device)


@pytest.mark.parametrize("e", [0, 0.0, 1, 2, -1, 0.5, 2.5, -0.5, 3])
def test_pow_scalar_gradients_at_edges(device, e):
    vals = [0.0, -0.0, 1.0, -2.0, 3.0, math.inf, -math.inf]
    if e == -0.5:  # (torch's gradient of x**-0.5 at -0.0 is +inf, against its own rule -0.5 * (-0.0)**-1.5)
        vals.remove(-0.0)
    compare(lambda x: x ** e, None, np.array(vals, F), device=device)


def test_rpow_gradient(device):
    compare(lambda y: 2.0 ** y, None, np.array([0.0, -1.0, 3.5, -math.inf], F), device=device)


def test_pow_zero_has_zero_gradient_for_nan_and_inf(device):
    compare(lambda x: x ** 0, None, np.array([math.nan, math.inf, 0.0, 2.0], F), device=device)


def test_cat_with_empty_inputs_gives_them_zero_gradients(device):
    compare(lambda a, b, c: Tensor.cat([b, a, c]) if isinstance(a, Tensor) else torch.cat([b, a, c]), None,
            np.array([1.0, 2.0], F), np.zeros(0, F), np.zeros(0, F), device=device)
    compare(lambda a, b: Tensor.cat([a, b], dim=1) if isinstance(a, Tensor) else torch.cat([a, b], dim=1), None,
            np.ones((2, 3), F), np.zeros((2, 0), F), device=device)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")
@pytest.mark.parametrize("correction", [0, 1, 2, 3, 5])
@pytest.mark.parametrize("axis", [None, 1])
def test_var_std_with_large_correction(device, correction, axis):
    a = np.array([[1.0, 2.0], [3.0, 3.0]], F)
    compare(lambda x: x.var(axis, correction=correction), None, a, device=device, grad=False)
    compare(lambda x: x.std(axis, correction=correction), None, a, device=device, grad=False)


def test_int_to_negative_power_raises_like_torch(device):
    raises_like_torch(lambda: Tensor([2, 3], device=device) ** -1, lambda: torch.tensor([2, 3]) ** -1)
    with pytest.raises(ValueError):  # (what tgcore raised before)
        Tensor([2, 3], device=device) ** -2


@pytest.mark.parametrize("args", [(2**31, 2**31 + 3), (-2**31 - 2, -2**31 + 1), (2**31 - 2, 2**31 + 3, 2),
                                  (2**40, 2**40 - 6, -2)])
def test_arange_beyond_int32_is_int64(device, args):
    compare(lambda: Tensor.arange(*args, device=device), lambda: torch.arange(*args), device=device, grad=False)


@pytest.mark.parametrize("dim", [0, -1])
def test_zero_d_cumsum_and_squeeze(device, dim):
    a = np.array(2.5, F)
    compare(lambda x: x.cumsum(dim), None, a, device=device)
    compare(lambda x: x.squeeze(dim), None, a, device=device)
    compare(lambda x: x.cumsum(dim), None, np.array(3, np.int32), device=device, grad=False)


@pytest.mark.parametrize("dim", [1, -2])
def test_zero_d_dims_out_of_range_raise_index_error(device, dim):
    with pytest.raises(IndexError):
        Tensor(2.0, device=device).cumsum(dim)
    with pytest.raises(IndexError):
        Tensor(2.0, device=device).squeeze(dim)


def test_argmin_of_int_min(device):
    a = np.array([[5, -2**31, 3, -2**31], [7, 7, -2**31 + 1, 0]], np.int32)
    for fn in (lambda x: x.argmin(1), lambda x: x.argmin(), lambda x: x.argmax(0)):
        compare(fn, None, a, device=device, grad=False, check_dtype=False)  # (tgcore's indices are int32)


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_trig_of_large_arguments(device, name):
    """float32 beyond 2**16 * pi/2 takes the Payne-Hanek reduction (was Cody-Waite: sin(1e6) = -0.379)."""
    a = np.array([1e6, -3.3e6, 1e7, 123456.7, 1e30, -3.4e38, 102943.7, 102944.0], F)
    compare(lambda x: getattr(x, name)(), None, a, device=device, grad=False, rtol=1e-5, atol=1e-6)

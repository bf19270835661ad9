"""Every public Tensor op against torch (issue 21, "tests and done when"): forward values and dtypes, and the
gradient of each float input, on every device in TG_TEST_DEVICES, for a regular shape, a 0-d and an empty tensor
wherever torch accepts them. ``test_every_public_name_is_covered`` keeps the table complete: a new public method
joins ``OPS`` or, if it is not an op with a torch counterpart to compare against, ``NOT_COMPARED`` with the reason.

The deeper suites (special values, dtypes, odd shapes, errors) are test_torch_api.py, test_torch_edge_cases.py,
test_torch_layout_select.py, test_tensor_*.py; this file is the one place that names every op, and
docs/gen_support.py builds the support matrix's per-op table from its outcome.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from torch_ref import DEVICES, compare, is_tg, library

from tgcore.tensor import Tensor

F = np.float32
_rng = np.random.default_rng(21)


def a(*shape: int, lo: float = -2.0, hi: float = 2.0, dtype: Any = F) -> np.ndarray:
    return _rng.uniform(lo, hi, shape).astype(dtype)


def ints(*shape: int, lo: int = 0, hi: int = 3) -> np.ndarray:
    return _rng.integers(lo, hi, shape).astype(np.int64)


R, Z, E = (3, 4), (), (0, 4)  # a regular, a 0-d and an empty shape
Case = tuple[Callable[..., Any], Callable[..., Any] | None, tuple[np.ndarray, ...], dict[str, Any]]


def case(fn: Callable[..., Any], *arrays: np.ndarray, torch_fn: Callable[..., Any] | None = None,
         **opts: Any) -> Case:
    return fn, torch_fn, arrays, opts


def unary(name: str, lo: float = -2.0, hi: float = 2.0, **opts: Any) -> list[Case]:
    """``x.name()`` on a regular, a 0-d and an empty tensor with values in [lo, hi]."""
    def fn(x: Any) -> Any:
        return getattr(x, name)()
    return [case(fn, a(*s, lo=lo, hi=hi), **opts) for s in (R, Z, E)]


def shapes(fn: Callable[..., Any], *shape_list: tuple[int, ...], torch_fn: Callable[..., Any] | None = None,
           lo: float = -2.0, hi: float = 2.0, **opts: Any) -> list[Case]:
    """``fn`` of one float tensor of each shape."""
    return [case(fn, a(*s, lo=lo, hi=hi), torch_fn=torch_fn, **opts) for s in shape_list]


def binary(fn: Callable[..., Any], lo: float = -2.0, hi: float = 2.0, **opts: Any) -> list[Case]:
    """``fn(x, y)`` with broadcasting (3, 4) and (4,), two 0-d tensors, and an empty with a (1, 4)."""
    return [case(fn, a(*s, lo=lo, hi=hi), a(*t, lo=lo, hi=hi), **opts) for s, t in ((R, (4,)), (Z, Z), (E, (1, 4)))]


def reduction(name: str, torch_name: str | None = None, **opts: Any) -> list[Case]:
    """``x.name(axis)``: all axes, one axis keeping it, and over an empty axis (0-d: axis 0)."""
    tn = torch_name or name

    def call(*args: Any, **kw: Any) -> Callable[[Any], Any]:
        return lambda x: getattr(x, name if is_tg(x) else tn)(*args, **kw)
    return [case(call(), a(*R), **opts), case(call(1, keepdim=True), a(*R), **opts),
            case(call(0), a(*Z), **opts), case(call(1), a(*E), **opts)]


def both(tg: Callable[..., Any], th: Callable[..., Any]) -> Callable[..., Any]:
    """One function for both libraries where the spelling differs."""
    return lambda *xs: tg(*xs) if is_tg(xs[0]) else th(*xs)


IDX = dict(check_dtype=False)  # index outputs: tgcore's default int is int32, torch's int64

OPS: dict[str, list[Case]] = {
    # ------------------------------------------------------------------ elementwise math
    **{n: unary(n) for n in ("abs", "neg", "exp", "exp2", "sin", "cos", "tan", "sigmoid", "tanh", "relu", "ceil",
                             "floor", "round", "trunc", "sign", "atan", "sinh", "cosh", "asinh", "erf", "expm1")},
    **{n: unary(n, 0.1, 3.0) for n in ("log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal")},
    **{n: unary(n, -0.9, 0.9) for n in ("asin", "acos", "atanh", "arcsin", "arccos", "arctanh")},
    "arctan": unary("arctan"), "arcsinh": unary("arcsinh"),
    "acosh": unary("acosh", 1.1, 4.0), "arccosh": unary("arccosh", 1.1, 4.0),
    "isnan": unary("isnan"), "isinf": unary("isinf"), "isfinite": unary("isfinite"),
    "logical_not": unary("logical_not"),
    **{n: shapes(lambda x, n=n: getattr(x, n)() if is_tg(x) else getattr(TF, n)(x), R, Z, E)
       for n in ("relu6", "hardtanh", "hardsigmoid", "hardswish", "selu", "celu", "softsign", "logsigmoid", "mish",
                 "silu", "elu", "gelu")},
    "leaky_relu": shapes(both(lambda x: x.leaky_relu(0.1), lambda x: TF.leaky_relu(x, 0.1)), R, Z, E),
    "softplus": shapes(both(lambda x: x.softplus(2.0), lambda x: TF.softplus(x, 2.0)), R, Z, E),
    "quick_gelu": shapes(lambda x: x * (x * 1.702).sigmoid() if not is_tg(x) else x.quick_gelu(), R, Z, E),
    "swish": shapes(both(lambda x: x.swish(), TF.silu), R, Z, E),
    "clip": shapes(lambda x: x.clip(-0.5, 1.0), R, Z, E), "clamp": shapes(lambda x: x.clamp(-0.5, 1.0), R, Z, E),
    # ------------------------------------------------------------------ binary
    **{n: binary(lambda x, y, n=n: getattr(x, n)(y)) for n in
       ("add", "sub", "mul", "maximum", "minimum", "copysign", "logaddexp", "eq", "ne", "isclose")},
    "div": binary(lambda x, y: x.div(y, rounding_mode="floor")) + binary(lambda x, y: x.div(y)),
    "mod": binary(lambda x, y: x.remainder(y) if not is_tg(x) else x.mod(y), lo=0.5),
    "remainder": binary(lambda x, y: x.remainder(y), lo=0.5), "fmod": binary(lambda x, y: x.fmod(y), lo=0.5),
    "pow": binary(lambda x, y: x.pow(y), lo=0.5) + shapes(lambda x: x.pow(3), R, Z, E),
    "lerp": [case(lambda x, y: x.lerp(y, 0.3), a(*s), a(*s)) for s in (R, Z, E)],
    "where": [case(lambda c, x, y: library(x).where(c > 0, x, y) if not is_tg(x) else (c > 0).where(x, y),
                   a(*s), a(*s), a(4)) for s in (R, Z, E)],
    "masked_fill": [case(lambda x, m: x.masked_fill(m > 0, 2.5), a(*s), a(*s)) for s in (R, Z, E)],
    **{n: [case(lambda x, y, n=n: getattr(x, n)(y), ints(*s, hi=16), ints(*s, hi=4)) for s in (R, Z, E)]
       for n in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
                 "logical_and", "logical_or", "logical_xor")},
    "lshift": [case(both(lambda x, y: x.lshift(y), lambda x, y: x.bitwise_left_shift(y)), ints(*R), ints(*R))],
    "rshift": [case(both(lambda x, y: x.rshift(y), lambda x, y: x.bitwise_right_shift(y)), ints(*R, hi=64),
                    ints(*R))],
    "bitwise_not": [case(lambda x: x.bitwise_not(), ints(*s, lo=-9, hi=9)) for s in (R, Z, E)],
    # ------------------------------------------------------------------ casts
    **{n: [case(lambda x, n=n: getattr(x, n)(), a(*s)) for s in (R, Z, E)]
       for n in ("float", "half", "double", "int", "long", "bool")},
    "cast": [case(both(lambda x: x.cast("float16"), lambda x: x.to(torch.float16)), a(*s)) for s in (R, Z, E)],
    "bitcast": [case(both(lambda x: x.bitcast("int32"), lambda x: x.view(torch.int32)), a(*s), grad=False)
                for s in (R, Z, E)],
    "clone": unary("clone"), "contiguous": unary("contiguous"), "detach": unary("detach"),
    # ------------------------------------------------------------------ reductions
    **{n: reduction(n) for n in ("sum", "prod", "mean")},
    "logsumexp": shapes(both(lambda x: x.logsumexp(), lambda x: x.logsumexp(tuple(range(x.ndim)))), R, Z, E)
    + shapes(lambda x: x.logsumexp(1), R, E),
    "max": reduction("max", "amax"), "min": reduction("min", "amin"),
    "std": reduction("std"), "var": reduction("var"),
    "var_mean": shapes(both(lambda x: x.var_mean(1), lambda x: torch.var_mean(x, 1)), R, E),
    "std_mean": shapes(both(lambda x: x.std_mean(), lambda x: torch.std_mean(x)), R, Z),
    "any": [case(lambda x: (x > 0).any(1), a(*s)) for s in (R, E)] + [case(lambda x: (x > 0).any(), a())],
    "all": [case(lambda x: (x > 0).all(1), a(*s)) for s in (R, E)] + [case(lambda x: (x > 0).all(), a())],
    "argmax": [case(lambda x: x.argmax(1), a(*R), **IDX), case(lambda x: x.argmax(), a(), **IDX)],
    "argmin": [case(lambda x: x.argmin(0, keepdim=True), a(*R), **IDX), case(lambda x: x.argmin(), a(), **IDX)],
    "cumsum": shapes(lambda x: x.cumsum(-1 if x.ndim else 0), R, Z, E),
    "cumprod": shapes(lambda x: x.cumprod(0), R, Z, E),
    "logcumsumexp": shapes(lambda x: x.logcumsumexp(0), R, Z, E),
    "cummax": shapes(lambda x: tuple(x.cummax(0)), R, Z, E, check_dtype=False),
    "cummin": shapes(lambda x: tuple(x.cummin(-1 if x.ndim else 0)), R, Z, E, check_dtype=False),
    "matmul": [case(lambda x, y: x.matmul(y), a(3, 4), a(4, 2)), case(lambda x, y: x.matmul(y), a(2, 3, 4), a(4)),
               case(lambda x, y: x.matmul(y), a(0, 4), a(4, 2))],
    "dot": [case(lambda x, y: x.dot(y), a(4), a(4)), case(lambda x, y: x.dot(y), a(0), a(0))],
    "einsum": [case(lambda x, y: library(x).einsum("ij,jk->ik", x, y), a(3, 4), a(4, 2)),
               case(lambda x: library(x).einsum("ii->", x), a(3, 3))],
    "softmax": shapes(lambda x: x.softmax(-1), R, E), "log_softmax": shapes(lambda x: x.log_softmax(-1), R, E),
    "softmin": shapes(both(lambda x: x.softmin(-1), lambda x: TF.softmin(x, -1)), R, E),
    "normalize": shapes(both(lambda x: x.normalize(dim=1), lambda x: TF.normalize(x, dim=1)), R, E),
    "layernorm": shapes(both(lambda x: x.layernorm(), lambda x: TF.layer_norm(x, x.shape[-1:])), R, E),
    # ------------------------------------------------------------------ movement and layout
    "reshape": shapes(lambda x: x.reshape(-1), R, Z, E), "view": shapes(lambda x: x.view(-1), R, Z, E),
    "flatten": shapes(lambda x: x.flatten(), R, Z, E),
    "unflatten": shapes(lambda x: x.unflatten(1, (2, 2)), R, E),
    "permute": shapes(lambda x: x.permute(1, 0), R, E), "transpose": shapes(lambda x: x.transpose(0, 1), R, E),
    "T": shapes(lambda x: x.T, R, E),
    "expand": shapes(lambda x: x.reshape(1, *x.shape).expand(2, *x.shape), R, Z, E),
    "squeeze": shapes(lambda x: x.squeeze(), (3, 1), Z, (0, 1)),
    "unsqueeze": shapes(lambda x: x.unsqueeze(0), R, Z, E),
    "flip": shapes(lambda x: x.flip(-1), R, E),
    "shrink": shapes(both(lambda x: x.shrink(((1, 3), None)), lambda x: x[1:3]), R),
    "pad": shapes(both(lambda x: x.pad((1, 2), value=0.5), lambda x: TF.pad(x, (1, 2), value=0.5)), R, E)
    + shapes(both(lambda x: x.pad((1, 2), mode="reflect"), lambda x: TF.pad(x, (1, 2), mode="reflect")), R),
    "pad_nd": shapes(both(lambda x: x.pad_nd([(2, 1), (1, 1)], mode="replicate"),
                          lambda x: TF.pad(x[None], (1, 1, 2, 1), mode="replicate")[0]), R),
    "repeat": shapes(lambda x: x.repeat(2, 1), R, E),
    "repeat_interleave": shapes(lambda x: x.repeat_interleave(2, 0), R, E),
    "roll": shapes(lambda x: x.roll(1, 1), R, E),
    "tril": shapes(lambda x: x.tril(), R, E), "triu": shapes(lambda x: x.triu(1), R, E),
    "diag": shapes(lambda x: x.diag(), (4,), (0,)), "diagonal": shapes(lambda x: x.diagonal(), R, E),
    "unfold": shapes(lambda x: x.unfold(1, 2, 1), R, E),
    "cat": [case(lambda x, y: library(x).cat([x, y], dim=0), a(*s), a(*s)) for s in (R, E)],
    "stack": [case(lambda x, y: library(x).stack([x, y], dim=0), a(*s), a(*s)) for s in (R, Z, E)],
    "split": shapes(lambda x: tuple(x.split(2, 1)), R, E), "chunk": shapes(lambda x: tuple(x.chunk(2, 1)), R, E),
    "meshgrid": [case(lambda x, y: tuple(library(x).meshgrid(x, y, indexing="ij")), a(3), a(4))],
    # ------------------------------------------------------------------ indexing and selection
    "gather": [case(lambda x, i: x.gather(1, i), a(*R), ints(3, 2, hi=4))],
    "take": [case(lambda x, i: x.take(i), a(*R), ints(5, hi=12))],
    "scatter": [case(lambda x, i, s: x.scatter(1, i, s), a(*R), np.array([[0, 1], [2, 3], [1, 0]]), a(3, 2))],
    "scatter_reduce": [case(lambda x, i, s: x.scatter_reduce(1, i, s, "sum"), a(*R), ints(3, 2, hi=4), a(3, 2))],
    "masked_select": [case(lambda x: x.masked_select(x > 0), a(*R))],
    "nonzero": [case(lambda x: x.nonzero(), a(*R) > 0, **IDX)],
    "sort": shapes(lambda x: tuple(x.sort(-1)), R, E, check_dtype=False),
    "argsort": shapes(lambda x: x.argsort(-1), R, E, **IDX),
    "topk": shapes(lambda x: tuple(x.topk(2, -1)), R, check_dtype=False),
    "one_hot": [case(both(lambda i: i.one_hot(4), lambda i: TF.one_hot(i, 4)), ints(5, hi=4), **IDX)],
    "interpolate": [case(both(lambda x: x.interpolate(scale_factor=2, mode="bilinear"),
                              lambda x: TF.interpolate(x, scale_factor=2, mode="bilinear")), a(1, 1, 3, 4))],
    # ------------------------------------------------------------------ nn as methods
    "linear": [case(lambda x, w, b: x.linear(w, b) if is_tg(x) else TF.linear(x, w, b), a(2, 4), a(3, 4), a(3))],
    "conv2d": [case(lambda x, w: x.conv2d(w, padding=1) if is_tg(x) else TF.conv2d(x, w, padding=1), a(1, 2, 5, 5),
                    a(3, 2, 3, 3), rtol=1e-4, atol=1e-5)],
    "conv_transpose2d": [case(lambda x, w: x.conv_transpose2d(w, stride=2) if is_tg(x)
                              else TF.conv_transpose2d(x, w, stride=2), a(1, 2, 3, 3), a(2, 3, 2, 2), rtol=1e-4,
                              atol=1e-5)],
    "max_pool2d": [case(both(lambda x: x.max_pool2d(2), lambda x: TF.max_pool2d(x, 2)), a(1, 2, 4, 4))],
    "avg_pool2d": [case(both(lambda x: x.avg_pool2d(2), lambda x: TF.avg_pool2d(x, 2)), a(1, 2, 4, 4))],
    "max_pool3d": [case(both(lambda x: x.max_pool3d(2), lambda x: TF.max_pool3d(x, 2)), a(1, 1, 4, 4, 4))],
    "avg_pool3d": [case(both(lambda x: x.avg_pool3d(2), lambda x: TF.avg_pool3d(x, 2)), a(1, 1, 4, 4, 4))],
    "max_unpool2d": [case(both(lambda x: (lambda v, i: v.max_unpool2d(i, 2))(*x.max_pool2d(2, return_indices=True)),
                               lambda x: TF.max_unpool2d(*TF.max_pool2d(x, 2, return_indices=True), 2)),
                          a(1, 1, 4, 4))],
    "scaled_dot_product_attention": [case(lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True)
                                          if is_tg(q) else TF.scaled_dot_product_attention(q, k, v, is_causal=True),
                                          a(1, 3, 4), a(1, 3, 4), a(1, 3, 4), rtol=1e-5, atol=1e-5)],
    "cross_entropy": [case(both(lambda x, y: x.cross_entropy(y), lambda x, y: TF.cross_entropy(x, y)), a(3, 4),
                           ints(3, hi=4))],
    "nll_loss": [case(both(lambda x, y: x.log_softmax(-1).nll_loss(y),
                           lambda x, y: TF.nll_loss(x.log_softmax(-1), y)), a(3, 4), ints(3, hi=4))],
    "sparse_categorical_crossentropy": [case(both(lambda x, y: x.sparse_categorical_crossentropy(y),
                                                  lambda x, y: TF.cross_entropy(x, y)), a(3, 4), ints(3, hi=4))],
    "binary_crossentropy": [case(both(lambda x, y: x.sigmoid().binary_crossentropy(y),
                                      lambda x, y: TF.binary_cross_entropy(x.sigmoid(), y)), a(3, 4),
                                 a(3, 4, lo=0, hi=1))],
    "binary_crossentropy_logits": [case(both(lambda x, y: x.binary_crossentropy_logits(y),
                                             lambda x, y: TF.binary_cross_entropy_with_logits(x, y)), a(3, 4),
                                        a(3, 4, lo=0, hi=1))],
    # ------------------------------------------------------------------ creation (no inputs to differentiate)
    "zeros_like": shapes(lambda x: x.zeros_like() if is_tg(x) else torch.zeros_like(x), R, Z, E),
    "ones_like": shapes(lambda x: x.ones_like() if is_tg(x) else torch.ones_like(x), R, Z, E),
    "full_like": shapes(lambda x: x.full_like(2.5) if is_tg(x) else torch.full_like(x, 2.5), R, Z, E),
}
CREATION = {  # static constructors: (tgcore call, torch call)
    "zeros": (lambda: Tensor.zeros(2, 3), lambda: torch.zeros(2, 3)),
    "ones": (lambda: Tensor.ones(0, 3), lambda: torch.ones(0, 3)),
    "full": (lambda: Tensor.full((2, 2), 7), lambda: torch.full((2, 2), 7, dtype=torch.int32)),  # (default int32)
    "arange": (lambda: Tensor.arange(2, 11, 3), lambda: torch.arange(2, 11, 3).int()),
    "linspace": (lambda: Tensor.linspace(-1, 2, 7), lambda: torch.linspace(-1, 2, 7)),
    "eye": (lambda: Tensor.eye(3, 4), lambda: torch.eye(3, 4)),
}

# public names that are not ops with a torch counterpart to compare values against, and where they are tested
NOT_COMPARED = {
    # reading, moving and writing tensors (test_runtime_*, test_assign.py, test_realize_on_ready.py)
    "realize", "numpy", "tolist", "item", "to", "assign", "device", "dtype", "shape", "ndim", "numel", "uop",
    "requires_grad", "requires_grad_", "grad", "backward", "gradient",  # autograd (test_autograd.py)
    "empty", "empty_like",  # uninitialised memory
    "from_buffer", "over",  # wrapping memory that exists, a tensor over a realized node (test_wrap_buffer.py)
    "alu", "const_like", "custom_kernel",  # the shared surface and hand-written kernels (test_custom_kernel.py)
    # random numbers and initialisers: distributions, not values (test_tensor_random.py)
    "manual_seed", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "uniform", "uniform_like",
    "normal", "glorot_uniform", "kaiming_normal", "kaiming_uniform", "scaled_uniform", "dropout",
}


def test_every_public_name_is_covered() -> None:
    public = {n for n in dir(Tensor) if not n.startswith("_")}
    covered = set(OPS) | set(CREATION) | NOT_COMPARED
    assert public - covered == set(), "public Tensor names without a torch comparison here"
    assert covered - public == set(), "names here that Tensor does not have"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(OPS))
def test_op_matches_torch(op: str, device: str) -> None:
    for fn, torch_fn, arrays, opts in OPS[op]:
        compare(fn, torch_fn, *arrays, device=device, **opts)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(CREATION))
def test_creation_matches_torch(op: str, device: str) -> None:
    tg, th = CREATION[op]
    got, want = tg().to(device), th()
    assert got.numpy().dtype == want.numpy().dtype
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)

"""The operator surface UOp and Tensor share (tgcore.uop.mixins): one definition of each operator and formula.

References: numpy (broadcasting, float64 math), torch (dtype promotion) and Python's ast (what the mixins import).
"""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

import tgcore
from tgcore.dtype import dtypes
from tgcore.tensor import Tensor
from tgcore.uop import UOp
from tgcore.uop.mixins import ElementwiseMixin, broadcast_shape
from tgcore.uop.movement import MovementMixin
from tgcore.uop.reduction import ReductionMixin

SHARED = ("__add__", "__radd__", "__mul__", "__rmul__", "__lt__", "__gt__", "__and__", "__or__", "__xor__",
          "__lshift__", "__rshift__", "__invert__", "eq", "ne", "maximum", "logical_not", "exp2", "log2", "sqrt", "sin",
          "trunc", "reciprocal", "cos", "tan")


# promotion and broadcasting: Tensor's operators pair operands with these; a UOp's operators do not broadcast
# (its own _operands and where are strict), but the shared formulas call _broadcasted on both
PAIRING = ("_broadcasted", "_broadcast_pair", "where", "_operands")


@pytest.mark.parametrize("name", SHARED)
def test_operators_are_defined_once(name: str) -> None:
    assert getattr(UOp, name) is getattr(ElementwiseMixin, name)
    assert getattr(Tensor, name) is getattr(ElementwiseMixin, name)


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.uint8, dtypes.uint32, dtypes.bool,
                                   dtypes.float32])
def test_invert_is_numpys_on_uop_constants_and_tensors(dtype) -> None:
    values = [0, 1, 5, 100] if dtype is not dtypes.bool else [False, True]
    if dtype is dtypes.float32:
        for x in (UOp.const(dtype, 1.0), Tensor([1.0])):
            with pytest.raises(TypeError):
                x.__invert__()
        return
    want = ~np.array(values, dtype=dtype.np)
    got = [(~UOp.const(dtype, v)).simplify().arg for v in values]
    np.testing.assert_array_equal(np.array(got, dtype=dtype.np), want)
    np.testing.assert_array_equal((~Tensor(np.array(values, dtype=dtype.np), device="PYTHON")).numpy(), want)


@pytest.mark.parametrize("name", PAIRING)
def test_promotion_and_broadcasting_are_defined_once(name: str) -> None:
    assert name not in Tensor.__dict__
    assert getattr(Tensor, name) is getattr(ElementwiseMixin, name)
    if name in ("_broadcasted", "_broadcast_pair"):
        assert getattr(UOp, name) is getattr(ElementwiseMixin, name)


@pytest.mark.parametrize(("shape_a", "dt_a", "shape_b", "dt_b"), [
    ((3, 1), np.int32, (4,), np.float16), ((2, 3), np.uint8, (), np.int8), ((), np.bool_, (2, 2), np.int64),
    ((0, 3), np.float32, (1, 3), np.float32)])
def test_uop_pairs_like_tensor_when_asked(shape_a: tuple, dt_a: type, shape_b: tuple, dt_b: type) -> None:
    """_broadcasted on two UOps gives the nodes a Tensor operator pairs, with numpy's dtype and shape."""
    a = Tensor(np.ones(shape_a, dt_a), device="PYTHON")
    b = Tensor(np.ones(shape_b, dt_b), device="PYTHON")
    want = torch.promote_types(torch.from_numpy(np.ones(1, dt_a)).dtype, torch.from_numpy(np.ones(1, dt_b)).dtype)
    ta, tb = a._broadcasted(b)
    ua, ub = a.uop._broadcasted(b.uop)
    assert (ta.uop, tb.uop) == (ua, ub)
    assert ua.shape == ub.shape == np.broadcast_shapes(shape_a, shape_b)
    assert ua.dtype is ub.dtype and torch.from_numpy(np.ones(1, ua.dtype.np)).dtype == want
    for value in (2, 0.5, True):  # a Python scalar: a constant of the promoted value's shape
        (ta, tb), (ua, ub) = a._broadcasted(value, True), a.uop._broadcasted(value, True)
        assert (ta.uop, tb.uop) == (ua, ub) and ua.shape == ub.shape == shape_a


MOVEMENT = ("reshape", "view", "permute", "transpose", "T", "expand", "shrink", "flip", "squeeze", "unsqueeze",
            "flatten", "_broadcast_to", "ndim", "numel", "pad", "pad_nd", "_pad_axis", "_join")
REDUCTIONS = ("sum", "prod", "max", "any", "_reduce", "min", "all", "mean", "var", "std", "var_mean", "std_mean",
              "argmax", "argmin", "cumsum", "matmul", "__matmul__", "dot")


@pytest.mark.parametrize("name", MOVEMENT + REDUCTIONS)
def test_movement_ops_and_reductions_are_defined_once(name: str) -> None:
    mixin = MovementMixin if name in MOVEMENT else ReductionMixin
    assert UOp.__dict__.get(name) is None and Tensor.__dict__.get(name) is None
    assert getattr(UOp, name) is getattr(mixin, name) is getattr(Tensor, name)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_])
def test_uop_and_tensor_reductions_build_the_same_graph_and_match_numpy(dtype: type) -> None:
    """Each shared reduction on a Tensor and on its UOp gives the same node, and numpy's values (and dtype)."""
    rng = np.random.default_rng(3)
    a = (rng.integers(0, 2, (3, 4, 5)) if dtype is np.bool_ else rng.integers(-3, 9, (3, 4, 5))).astype(dtype)
    t = Tensor(a, device="PYTHON")
    for name, ref in (("sum", np.sum), ("prod", np.prod), ("max", np.max), ("any", np.any)):
        for axis, keepdim in ((None, False), (1, True), ((0, -1), False)):
            got, node = getattr(t, name)(axis, keepdim), getattr(t.uop, name)(axis, keepdim)
            assert got.uop is node and node.shape == got.shape
            want = ref(a, axis=axis, keepdims=keepdim)
            if name in ("sum", "prod") and dtype is not np.float32:  # (torch's accumulation dtypes)
                want = want.astype(np.uint64 if dtype is np.uint8 else np.int64)
            np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name} {axis} {keepdim}")


FORMULAS = {  # name: (the call, numpy's)
    "min": (lambda x: x.min(1, True), lambda a: a.min(1, keepdims=True)),
    "all": (lambda x: x.all((0, 2)), lambda a: a.all((0, 2))),
    "mean": (lambda x: x.mean(-1), lambda a: a.mean(-1)),
    "var": (lambda x: x.var(1, correction=0), lambda a: a.var(1)),
    "std": (lambda x: x.std(None, True), lambda a: a.std(ddof=1, keepdims=True)),
    "argmax": (lambda x: x.argmax(1), lambda a: a.argmax(1)),
    "argmin": (lambda x: x.argmin(None, True), lambda a: a.argmin().reshape(1, 1, 1)),
    "cumsum": (lambda x: x.cumsum(1), lambda a: a.cumsum(1)),
    "matmul": (lambda x: x @ x.transpose(-1, -2), lambda a: a @ a.swapaxes(-1, -2)),
}


@pytest.mark.parametrize("name", FORMULAS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.bool_])
def test_uop_and_tensor_formulas_build_the_same_graph_and_match_numpy(name: str, dtype: type) -> None:
    """The formulas built on the reductions (min, mean, var, argmax, cumsum, ...) give a Tensor's graph on its
    UOp, and numpy's values when that UOp is run."""
    fn, ref = FORMULAS[name]
    if name in ("var", "std", "matmul") and dtype is np.bool_:
        pytest.skip("numpy has no float reduction / product of bools that torch's promotion matches")
    rng = np.random.default_rng(5)
    a = (rng.integers(0, 2, (2, 3, 4)) if dtype is np.bool_ else rng.integers(0, 9, (2, 3, 4))).astype(dtype)
    t = Tensor(a, device="PYTHON")
    got, node = fn(t), fn(t.uop)
    assert got.uop is node
    want = ref(a)
    for out in (got, Tensor(node, device="PYTHON")):
        np.testing.assert_allclose(out.numpy().astype(np.float64), np.asarray(want, np.float64), rtol=1e-6,
                                   atol=1e-6, err_msg=name)


F = torch.nn.functional
ELEMENTWISE = {  # name: (the call, torch's on the same values; numpy's sign, which keeps nan as tgcore does)
    "hardtanh": (lambda x: x.hardtanh(-2.0, 5.5), lambda a: F.hardtanh(a, -2.0, 5.5)),
    "relu6": (lambda x: x.relu6(), F.relu6),
    "hardsigmoid": (lambda x: x.hardsigmoid(), F.hardsigmoid),
    "hardswish": (lambda x: x.hardswish(), F.hardswish),
    "softsign": (lambda x: x.softsign(), F.softsign),
    "leaky_relu": (lambda x: x.leaky_relu(0.2), lambda a: F.leaky_relu(a, 0.2)),
    "abs": (lambda x: x.abs(), torch.abs),
    "sign": (lambda x: x.sign(), lambda a: a if a.dtype is torch.bool else torch.from_numpy(np.sign(a.numpy()))),
    "floor": (lambda x: x.floor(), torch.floor),
    "ceil": (lambda x: x.ceil(), torch.ceil),
    "round": (lambda x: x.mul(0.5).round(), lambda a: (a * 0.5).round()),
    "isnan": (lambda x: x.isnan(), torch.isnan),
    "isinf": (lambda x: x.isinf(), torch.isinf),
    "isfinite": (lambda x: x.isfinite(), torch.isfinite),
    "clip": (lambda x: x.clip(1, x.add(2, alpha=-1)), lambda a: a.clamp(torch.tensor(1, dtype=a.dtype), a - 2)),
    "clamp": (lambda x: x.clamp(None, 6), lambda a: a.clamp(None, 6)),
    "add": (lambda x: x.add(x.mul(3), alpha=2), lambda a: a.add(a * 3, alpha=2)),
    "sub": (lambda x: x.sub(1.5), lambda a: a.sub(1.5)),
    "mul": (lambda x: x.mul(x), lambda a: a.mul(a)),
    "neg": (lambda x: x.neg(), lambda a: a.neg() if a.dtype is not torch.bool else a.logical_not()),
    "fmod": (lambda x: x.sub(4).fmod(3), lambda a: a.sub(4).fmod(3)),
    "copysign": (lambda x: x.copysign(x.sub(4)), lambda a: a.copysign(a - 4)),
    "lerp": (lambda x: x.lerp(x.mul(2.5), 0.75), lambda a: a.lerp(a * 2.5, 0.75)),
    "isclose": (lambda x: x.isclose(x.add(1e-3), rtol=1e-3), lambda a: a.isclose(a + 1e-3, rtol=1e-3)),
    "bitwise_and": (lambda x: x.bitwise_and(6), lambda a: a.bitwise_and(6)),
    "bitwise_or": (lambda x: x.bitwise_or(x), lambda a: a.bitwise_or(a)),
    "bitwise_xor": (lambda x: x.bitwise_xor(5), lambda a: a.bitwise_xor(5)),
    "lshift": (lambda x: x.lshift(2), lambda a: a.bitwise_left_shift(2)),
    "rshift": (lambda x: x.rshift(1), lambda a: a.bitwise_right_shift(1)),
    "logical_and": (lambda x: x.logical_and(x.mul(2)), lambda a: a.logical_and(a * 2)),
    "logical_or": (lambda x: x.logical_or(0), lambda a: a.logical_or(torch.tensor(False))),
    "logical_xor": (lambda x: x.logical_xor(True), lambda a: a.logical_xor(torch.tensor(True))),
    "rsqrt": (lambda x: x.add(1).rsqrt(), lambda a: (a + 1).rsqrt()),
    "log10": (lambda x: x.add(1).log10(), lambda a: (a + 1).log10()),
}
ELEMENTWISE_NAMES = (*ELEMENTWISE, "bitwise_left_shift", "bitwise_right_shift")
FLOAT_ONLY = {"hardtanh", "relu6", "hardsigmoid", "hardswish", "softsign", "leaky_relu", "floor", "ceil", "round",
              "copysign", "lerp", "isclose", "rsqrt", "log10"}  # (torch refuses ints here, or rounds them)
INT_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor", "lshift", "rshift"}


@pytest.mark.parametrize("name", ELEMENTWISE_NAMES)
def test_elementwise_formulas_are_defined_once(name: str) -> None:
    assert UOp.__dict__.get(name) is None and Tensor.__dict__.get(name) is None
    assert getattr(UOp, name) is getattr(ElementwiseMixin, name) is getattr(Tensor, name)


@pytest.mark.parametrize("name", ELEMENTWISE)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.bool_])
def test_uop_and_tensor_elementwise_formulas_build_the_same_graph_and_match_torch(name: str, dtype: type) -> None:
    """Each shared elementwise formula on a Tensor and on its UOp gives the same node, and torch's values and
    dtype when that UOp is run."""
    fn, ref = ELEMENTWISE[name]
    if dtype is np.bool_ and name not in ("sign", "isnan", "isinf", "isfinite", "neg", "mul") \
            and not name.startswith("logical") or (name in FLOAT_ONLY and dtype not in (np.float32, np.float16)) \
            or (name in INT_ONLY and dtype in (np.float32, np.float16)):
        pytest.skip("torch refuses this dtype for this op")
    a = np.array([[-3, -1, 0, 2], [7, 1, 5, -6]]) if dtype is not np.uint8 else np.array([[3, 0, 1, 2], [7, 9, 5, 6]])
    a = (a % 2 if dtype is np.bool_ else a * (1.25 if dtype in (np.float32, np.float16) else 1)).astype(dtype)
    if dtype is np.float32:
        a[0, 0], a[1, 3] = np.nan, -np.inf
    t = Tensor(a, device="PYTHON")
    got, node = fn(t), fn(t.uop)
    assert got.uop is node and node.shape == got.shape
    want = ref(torch.from_numpy(a))
    for out in (got, Tensor(node, device="PYTHON")):
        assert str(want.dtype) == f"torch.{out.dtype.name}", (name, out.dtype, want.dtype)
        np.testing.assert_allclose(out.numpy().astype(np.float64), want.double().numpy(), rtol=1e-3, atol=1e-6,
                                   err_msg=name)


def test_uop_and_tensor_movement_build_the_same_graph_and_match_numpy() -> None:
    """The same chain of movement ops on a Tensor and on its UOp gives the same node, and numpy's values."""
    a = np.arange(24, dtype=np.float32)
    t = Tensor(a, device="PYTHON")
    chains = [  # (the chain, numpy's)
        (lambda x: x.reshape(2, -1, 4).permute(2, 0, 1).flip(1),
         lambda n: n.reshape(2, 3, 4).transpose(2, 0, 1)[:, ::-1]),
        (lambda x: x.reshape(4, 6).unsqueeze(1), lambda n: n.reshape(4, 1, 6)),
        (lambda x: x.reshape(2, 3, 4).transpose(0, 2).reshape(None, 6), lambda n: n.reshape(2, 3, 4).swapaxes(0, 2)
         .reshape(4, 6)),
        (lambda x: x.reshape(1, 24).expand(3, 24).flatten(), lambda n: np.broadcast_to(n, (3, 24)).reshape(-1)),
        (lambda x: x.reshape(4, 6).shrink(((1, 3), (2, 6))).T, lambda n: n.reshape(4, 6)[1:3, 2:].T),
        (lambda x: x.reshape(24, 1).squeeze(), lambda n: n),
        (lambda x: x.reshape(4, 6).pad(((1, -2), (0, 3))), lambda n: np.pad(n.reshape(4, 6)[:-2], ((1, 0), (0, 3)))),
        (lambda x: x.reshape(4, 6).pad((2, 1), 7.5), lambda n: np.pad(n.reshape(4, 6), ((0, 0), (2, 1)),
                                                                      constant_values=7.5)),
        (lambda x: x.reshape(2, 3, 4).pad((1, 2, 0, 2), "reflect"),
         lambda n: np.pad(n.reshape(2, 3, 4), ((0, 0), (0, 2), (1, 2)), mode="reflect")),
        (lambda x: x.reshape(4, 6).pad(((2, 1), (3, 0)), mode="replicate"),
         lambda n: np.pad(n.reshape(4, 6), ((2, 1), (3, 0)), mode="edge")),
        (lambda x: x.reshape(4, 6).pad((1, 4), mode="circular"),
         lambda n: np.pad(n.reshape(4, 6), ((0, 0), (1, 4)), mode="wrap")),
    ]
    for chain, reference in chains:
        got, node = chain(t), chain(t.uop)
        assert got.uop is node and node.shape == got.shape
        np.testing.assert_array_equal(got.numpy(), reference(a))


@pytest.mark.parametrize("fn", ["cos", "tan", "exp", "log"])
def test_formulas_on_uop_constants_match_numpy(fn: str) -> None:
    """The formulas Tensor uses, applied to UOp constants, fold to numpy's float64 values (within 2 ulp)."""
    for v in (0.1, 0.5, 1.0, 3.0, 10.0, 100.0, 1234.5):
        got = getattr(UOp.const(dtypes.float64, v), fn)().simplify()
        assert got.op.name == "CONST"
        want = getattr(np, fn)(np.float64(v))
        assert got.arg == want or abs(got.arg - want) <= 2 * np.spacing(abs(want)), (fn, v, got.arg, want)


def test_tensor_and_uop_formulas_agree() -> None:
    xs = np.array([0.1, 0.5, 1.0, 3.0, 10.0, 100.0, 1234.5])
    for fn in ("cos", "tan", "exp", "log"):
        t = getattr(Tensor(xs, device="PYTHON"), fn)().numpy()
        u = [getattr(UOp.const(dtypes.float64, float(v)), fn)().simplify().arg for v in xs]
        np.testing.assert_array_max_ulp(t, np.array(u), maxulp=2)


def test_broadcast_shape_matches_numpy() -> None:
    sizes = (0, 1, 2, 3)
    shapes = [s for n in range(3) for s in itertools.product(sizes, repeat=n)]
    for a, b in itertools.product(shapes, repeat=2):
        try:
            want = np.broadcast_shapes(a, b)
        except ValueError:
            with pytest.raises(ValueError):
                broadcast_shape(a, b)
            continue
        assert broadcast_shape(a, b) == want


def _runtime_imports_of_tensor(path: Path) -> list[int]:
    """Lines importing tgcore.tensor outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                 and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                 for n in ast.walk(node)}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "tgcore.tensor"
            and id(n) not in type_only]


def test_no_mixin_imports_tensor() -> None:
    """Tensor's mixins and the shared surface build tensors through ``type(self)``, never by importing Tensor."""
    root = Path(tgcore.__file__).parent
    mixins = [*root.glob("tensor_*.py"), root / "uop" / "mixins.py", root / "uop" / "movement.py",
              root / "uop" / "reduction.py", root / "uop" / "transcendental.py"]
    found = {p.name: lines for p in mixins if (lines := _runtime_imports_of_tensor(p))}
    assert found == {}

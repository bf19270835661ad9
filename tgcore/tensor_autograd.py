"""Autograd on tensors: ``requires_grad``, ``backward()``, ``.grad``, ``detach()``.

A mixin of ``tgcore.tensor.Tensor``. Gradients are lazy tensors built by the rules in
``tgcore.gradient`` from the forward graph; ``backward()`` accumulates them into ``.grad`` of
every tensor created with ``requires_grad=True`` (or marked with ``requires_grad_()``) that the
loss depends on.
"""
from __future__ import annotations

import itertools
import weakref
from typing import TYPE_CHECKING, Any

from tgcore.errors import TensorValueError
from tgcore.uop import Ops, UOp

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

# tensors that want gradients, by id (a WeakSet would compare tensors with ==, which is elementwise)
_wanting_grad: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_leaf_ids = itertools.count()


def leaf_uops() -> set[UOp]:
    """The current nodes of every tensor that wants a gradient."""
    return {t.uop for t in list(_wanting_grad.values()) if t.requires_grad}


# BUFFER uop of a realized tensor -> the lazy graph that computed it (when that graph reads a leaf), so that
# backward() through a tensor computed from a realized one reaches the leaves as torch's does
_computed_by: weakref.WeakKeyDictionary[UOp, UOp] = weakref.WeakKeyDictionary()


def remember_graph(buf: UOp, graph: UOp) -> None:
    """``buf`` holds the value of ``graph`` (a realize just computed it)."""
    _computed_by[buf] = graph


def forget_graph(t: Any) -> None:
    """Drop ``t``'s graph (it holds the values of every leaf it read: an assign then copies them aside)."""
    t._graph = None
    base = t.uop.src[0] if t.uop.op is Ops.RESHAPE else t.uop
    _computed_by.pop(base, None)


def _through_realized(root: UOp, leaves: set[UOp]) -> UOp:
    """``root`` with each realized buffer it reads replaced by the graph that computed it, until none is left
    (never inside a leaf: a tensor that wants a gradient is where the graph ends)."""
    while _computed_by:
        found: dict[UOp, UOp] = {}
        stack, seen = [root], set()
        while stack:
            n = stack.pop()
            if n in seen or n in leaves:
                continue
            seen.add(n)
            graph = _computed_by.get(n) if n.op is Ops.BUFFER else None
            if graph is not None:
                found[n] = UOp(Ops.RESHAPE, graph.dtype, (graph,), (n.arg,))
            stack.extend(n.src)
        if not found:
            break
        root = root.substitute({**found, **{leaf: leaf for leaf in leaves}})
    return root


def mark_leaf(t: Any) -> None:
    """Give a leaf's node a tag of its own, so graphs keep it as a distinct node (reshapes are not folded
    through it) and backward() can find exactly the uses of this tensor."""
    t.uop = t.uop.replace(tag=("leaf", next(_leaf_ids)))


def with_gradient(out: Any, inputs: tuple[Any, ...], rule: Any) -> Any:
    """``out`` with its gradient given by ``rule(g, out, *inputs)`` (one gradient or None per input) instead of
    the one its own graph gives: for composed formulas whose chain rule breaks at edge points (0 * inf where
    the true derivative is finite or infinite). ``rule`` must be a module-level function (it is part of the
    node, so the schedule cache sees one rule per formula).

    The node is a DETACH of ``out`` (no gradient flows through out's own graph; the scheduler computes
    ``src[0]`` only) with the inputs as extra sources and the rule as its argument."""
    return out._new(UOp(Ops.DETACH, out.dtype, (out.uop, *(x.uop for x in inputs)), rule))


def _seed(t: Any, gradient: Any) -> Any:
    """The gradient flowing into ``t``: ones for a one-element tensor, else the given tensor of t's shape."""
    tensor_type = type(t)
    if gradient is None:
        if t.numel() != 1:
            raise TensorValueError(f"the gradient of a tensor with shape {t.shape} needs a gradient argument "
                                   "(only one-element tensors have an implicit one)")
        return tensor_type.full(t.shape, 1.0, dtype=t.dtype, device=t.device)
    if not isinstance(gradient, tensor_type) or gradient.shape != t.shape:
        raise TensorValueError(f"gradient must be a Tensor of shape {t.shape}")
    return gradient.cast(t.dtype)


class AutogradMixin:
    __slots__ = ()
    requires_grad: bool | None  # (the storage is Tensor's: these only declare the types)
    grad: Any
    _graph: UOp | None

    def requires_grad_(self, requires_grad: bool = True) -> Any:
        """Mark this tensor as a leaf whose gradient ``backward()`` computes. Returns self."""
        self.requires_grad = requires_grad  # type: ignore[misc]  # (a slot of Tensor)
        if requires_grad:
            _wanting_grad[id(self)] = self
            mark_leaf(self)
        else:
            _wanting_grad.pop(id(self), None)
        return self

    def detach(self) -> Any:
        """The same values, cut off from the graph: no gradient flows through it."""
        t: Tensor = self  # type: ignore[assignment]
        return t._new(UOp(Ops.DETACH, t.dtype, (t.uop,)))

    def gradient(self, *targets: Any, gradient: Any = None) -> list[Any]:
        """d(self)/d(target) for each of ``targets``, as new lazy tensors; ``.grad`` is left alone (like
        ``torch.autograd.grad``). ``self`` must be a scalar unless ``gradient`` (a tensor of its shape) is given.
        RuntimeError when a target is not used to compute this tensor."""
        from tgcore.gradient import compute_gradients
        t: Tensor = self  # type: ignore[assignment]
        seed = _seed(t, gradient)
        root = t._graph if t._graph is not None else t.uop
        root = _through_realized(root, {x.uop for x in targets})  # (as backward: into realized intermediates)
        grads = compute_gradients(root, seed.uop, [x.uop for x in targets], t.device)
        out = []
        for x in targets:
            g = grads.get(x.uop)
            if g is None:
                raise RuntimeError(f"gradient(): a target of shape {x.shape} is not used to compute this tensor "
                                   "(targets are found by identity: give them requires_grad before using them)")
            out.append(x._new(g))
        return out

    def backward(self, gradient: Any = None) -> Any:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires a gradient.

        ``self`` must be a scalar unless ``gradient`` (a tensor of self's shape) is given.
        """
        from tgcore.gradient import compute_gradients
        t: Tensor = self  # type: ignore[assignment]
        tensor_type = type(t)
        gradient = _seed(t, gradient)
        wanting = [x for x in list(_wanting_grad.values()) if x.requires_grad]
        root = t._graph if t._graph is not None else t.uop  # (a realized loss keeps its graph)
        root = _through_realized(root, {x.uop for x in wanting})
        nodes = root.toposort
        leaves = [x for x in wanting if x.uop in nodes]
        if not leaves:
            raise RuntimeError("backward(): nothing this tensor depends on has requires_grad=True")
        grads = compute_gradients(root, gradient.cast(t.dtype).uop, [x.uop for x in leaves], t.device)
        for leaf in leaves:
            g = grads.get(leaf.uop)
            if g is None:
                continue
            g_t = tensor_type(g, device=leaf.device)
            leaf.grad = g_t if leaf.grad is None else leaf.grad + g_t
        return self

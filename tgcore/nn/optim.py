"""Optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW, updating parameters in place.

In:  the parameters to train (e.g. ``get_parameters(model)``; tensors created with ``requires_grad=False``
     are left out, and the others are marked ``requires_grad``), hyper-parameters named like torch.optim's.
Out: ``step()`` writes the new values into the parameters' own buffers with ``Tensor.assign``, so
     anything holding a parameter (a model, a ``tgcore.jit`` capture of a whole train step) sees them.

A step first realizes every gradient together (plus any tensors passed to ``step``, typically the loss,
whose forward pass is shared with the gradients), then assigns each parameter and its state their new
values and realizes the parameters, which runs those writes: one elementwise kernel per tensor. The
realized gradients and the tensors passed to ``step`` drop their autograd graphs (as torch frees a
graph after backward): those graphs read the old parameters, which would otherwise be copied aside.
The learning rate and all step-dependent quantities (Adam's bias corrections) live in device buffers, not
Python numbers, so a jitted train step replays correctly and ``opt.lr.assign(new_lr)`` changes the rate of
later steps, jitted or not.

The arithmetic follows the published algorithms in the order torch computes them, so results agree
with torch to float32 rounding.
"""
from __future__ import annotations

from collections.abc import Iterable

from tgcore.dtype import dtypes
from tgcore.tensor import Tensor
from tgcore.tensor_autograd import forget_graph

__all__ = ["SGD", "Adam", "AdamW", "Optimizer"]


def _buffer(value: float, dtype: object, device: str) -> Tensor:
    """A 0-d tensor with its own buffer, updatable with ``assign``."""
    return Tensor.full((), value, dtype=dtype, device=device).contiguous().realize()  # type: ignore[arg-type]


class Optimizer:
    """Holds the parameters and the learning rate; subclasses define `_update` for one parameter."""

    def __init__(self, params: Iterable[Tensor], lr: float) -> None:
        if lr < 0:
            raise ValueError(f"learning rate must not be negative, got {lr}")
        seen: set[int] = set()
        self.params: list[Tensor] = []
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer parameters must be Tensors, got {type(p).__name__}")
            if p.requires_grad is False or id(p) in seen:
                continue
            if not dtypes.is_float(p.dtype):
                raise TypeError(f"cannot optimize a {p.dtype!r} tensor of shape {p.shape}; create it with "
                                "requires_grad=False to leave it out")
            seen.add(id(p))
            p.realize()  # updates are written into the parameter's buffer
            if p.requires_grad is None:
                p.requires_grad_(True)
            self.params.append(p)
        if not self.params:
            raise ValueError("optimizer got no parameters to optimize")
        self.device = self.params[0].device
        self.lr = _buffer(lr, dtypes.float32, self.device)

    def zero_grad(self) -> None:
        """Forget the gradients (``backward`` accumulates into ``.grad``)."""
        for p in self.params:
            p.grad = None

    def step(self, *also_realize: Tensor) -> None:
        """Update every parameter that has a gradient. Tensors given here (e.g. the loss) are computed in the same
        pass as the gradients, sharing the forward work."""
        todo = [p for p in self.params if p.grad is not None]
        for p in todo:
            if p.grad.shape != p.shape:
                raise ValueError(f"gradient of shape {p.grad.shape} for a parameter of shape {p.shape}")
        pending = [p.grad for p in todo] + list(also_realize)
        if pending:
            pending[0].realize(*pending[1:])
            for t in pending:
                forget_graph(t)
        self._before_step()
        for i, p in enumerate(self.params):
            if p.grad is not None:
                self._update(i, p, p.grad.cast(p.dtype))
        if todo:  # runs the assigns (each parameter's update reads its state's new value: those run first)
            todo[0].realize(*todo[1:])

    def _before_step(self) -> None:
        """Update state shared by all parameters (step counters)."""

    def _update(self, i: int, p: Tensor, g: Tensor) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """p -= lr * (g + weight_decay * p), with optional (Nesterov) momentum: buf = momentum * buf + g."""

    def __init__(self, params: Iterable[Tensor], lr: float = 0.001, momentum: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(params, lr)
        if nesterov and momentum <= 0:
            raise ValueError("nesterov momentum needs momentum > 0")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        # the first step's buffer is g itself: with zeros to start from, momentum * 0 + g gives exactly that
        self.bufs = [p.zeros_like().contiguous().realize() for p in self.params] if momentum else []

    def _update(self, i: int, p: Tensor, g: Tensor) -> None:
        if self.weight_decay:
            g = g + p * self.weight_decay
        if self.momentum:
            buf = self.bufs[i]
            buf.assign(buf * self.momentum + g)
            g = g + buf * self.momentum if self.nesterov else buf
        p.assign(p - g * self.lr.cast(p.dtype))


class Adam(Optimizer):
    """Adam (Kingma & Ba): moving averages of g and g^2 with bias correction; L2 ``weight_decay`` is added to
    the gradient (AdamW decays the weights instead)."""

    decoupled = False

    def __init__(self, params: Iterable[Tensor], lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr)
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay
        self.m = [p.zeros_like().contiguous().realize() for p in self.params]
        self.v = [p.zeros_like().contiguous().realize() for p in self.params]
        # beta ** step, kept in float64 so 1 - beta2 ** step has no visible cancellation error
        self.b1_t = _buffer(1.0, dtypes.float64, self.device)
        self.b2_t = _buffer(1.0, dtypes.float64, self.device)

    def _before_step(self) -> None:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)

    def _update(self, i: int, p: Tensor, g: Tensor) -> None:
        lr = self.lr.cast(dtypes.float64)
        if self.weight_decay and not self.decoupled:
            g = g + p * self.weight_decay
        m, v = self.m[i], self.v[i]
        m.assign(m + (g - m) * (1 - self.b1))
        v.assign(v * self.b2 + g * g * (1 - self.b2))
        step_size = (lr / (1 - self.b1_t)).cast(p.dtype)
        bias2_sqrt = (1 - self.b2_t).sqrt().cast(p.dtype)
        denom = v.sqrt() / bias2_sqrt + self.eps
        base = p * (1 - lr * self.weight_decay).cast(p.dtype) if self.weight_decay and self.decoupled else p
        p.assign(base - step_size * (m / denom))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): p *= 1 - lr * weight_decay before the Adam step."""

    decoupled = True

    def __init__(self, params: Iterable[Tensor], lr: float = 0.001, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)

"""Random tensors from a counter-based generator (same numbers on every device for the same seed), and initialisers.

A mixin of `tgcore.tensor.Tensor`: methods here build on Tensor's core ops only.

In:  a shape, a dtype, a device, the generator state (a 64-bit seed and a call counter).
Out: lazy tensors whose values are a pure function of (seed, counter, element index).

The generator is Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as
easy as 1, 2, 3", SC 2011), written with tensor integer ops only (uint32 add, xor, shifts,
or), so it fuses into the consuming kernel and runs on any device. Element ``i`` of the
``c``-th random tensor since ``manual_seed(seed)`` is the block ``threefry((i, c), seed)``:
two 32-bit words. ``rand`` uses the first word, ``randn`` both (Box-Muller), ``float64``
both (53 random bits). Every call that makes a random tensor advances the counter by one,
so successive calls give independent numbers. The default seed is 0.
"""
# mypy: disable-error-code="misc"
# (methods annotate ``self: Tensor``: a mixin is only ever used as a base of Tensor)
from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tgcore.dtype import DType, dtypes, to_dtype
from tgcore.helpers import prod
from tgcore.uop import Ops

if TYPE_CHECKING:
    from tgcore.tensor import Tensor

_MASK32 = 0xFFFFFFFF
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)  # Threefry-2x32 rotation constants (the paper's table 4)
_PARITY = 0x1BD11BDA  # key-schedule parity constant of Threefish/Threefry-32
# random bits that fit the significand of each float dtype, so u = bits * 2**-n stays below 1 after rounding
_UNIFORM_BITS = {dtypes.float16: 11, dtypes.bfloat16: 8, dtypes.float32: 24, dtypes.float64: 53}


class _State:
    """The generator state: a seed, and per device a counter of random tensors made since (kept in a
    device buffer, so a jitted function draws fresh numbers on every replay and nothing recompiles)."""

    seed = 0
    counters: dict[str, Tensor] = {}


def _next_call(tensor_type: type[Tensor], device: str | None) -> Tensor:
    """This call's counter value (a realized 1-element uint32 tensor) on ``device``; advances the counter."""
    from tgcore.runtime.registry import canonical
    dev = canonical(device)
    counter = _State.counters.get(dev)
    if counter is None:
        counter = _State.counters[dev] = tensor_type(np.zeros(1, np.uint32), device=dev)
    call = counter.contiguous().realize() if counter.uop.op is not Ops.RESHAPE else (counter * 1).realize()
    counter.assign(counter + 1)
    return call


def _shape(args: tuple[Any, ...]) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for a in args:
        if not isinstance(a, int) or isinstance(a, bool):
            raise TypeError(f"shape entries must be ints, got {a!r}")
        if a < 0:
            raise ValueError(f"negative dimension in shape {args}")
    return tuple(args)


def _rotl(x: Tensor, r: int) -> Tensor:
    return (x << r) | (x >> (32 - r))


def threefry2x32(x0: Tensor, x1: Tensor, key: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Threefry-2x32-20 of the counter words ``(x0, x1)`` (uint32 tensors) under a 64-bit ``key``."""
    ks = (key[0] & _MASK32, key[1] & _MASK32, (key[0] ^ key[1] ^ _PARITY) & _MASK32)
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for r in range(20):
        x0 = x0 + x1
        x1 = _rotl(x1, _ROTATIONS[r % 8]) ^ x0
        if r % 4 == 3:  # key injection after every four rounds
            s = r // 4 + 1
            x0 = x0 + ks[s % 3]
            x1 = x1 + ((ks[(s + 1) % 3] + s) & _MASK32)
    return x0, x1


def _random_bits(tensor_type: type[Tensor], shape: tuple[int, ...], device: str | None) -> tuple[Tensor, Tensor]:
    """Two uint32 words per element of ``shape``, fresh for this call (the counter advances)."""
    n = prod(shape)
    if n >= 2**31:
        raise ValueError(f"random tensors are limited to 2**31 - 1 elements, {shape} has {n}")
    call = _next_call(tensor_type, device)
    index = tensor_type.arange(n, device=device).cast(dtypes.uint32)
    x0, x1 = threefry2x32(index, call.reshape(()).expand(()) if n == 0 else call.reshape((1,)).expand((n,)),
                          (_State.seed & _MASK32, (_State.seed >> 32) & _MASK32))
    return x0.reshape(shape), x1.reshape(shape)


def _float_dtype(dtype: DType | str | None) -> DType:
    dt = dtypes.default_float if dtype is None else to_dtype(dtype)
    if not dtypes.is_float(dt):
        raise TypeError(f"random floats need a float dtype, got {dt!r}")
    return dt


def _unit(w0: Tensor, w1: Tensor, dt: DType) -> Tensor:
    """Uniform floats in [0, 1) of dtype ``dt`` from the random words: a multiple of 2**-bits."""
    bits = _UNIFORM_BITS.get(dt, 24)
    if bits <= 32:
        return ((w0 >> (32 - bits)).cast(dtypes.float32) * (2.0 ** -bits)).cast(dt)
    hi = (w0 >> (64 - bits)).cast(dtypes.float64)  # the top bits - 32 bits of the value from w0
    return (hi * 2.0 ** 32 + w1.cast(dtypes.float64)) * (2.0 ** -bits)


class RandomMixin:
    __slots__ = ()

    # ------------------------------------------------------------------ the generator
    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Reset the generator: the same seed gives the same sequence of random tensors on every device."""
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"manual_seed needs an int, got {seed!r}")
        _State.seed = seed & (2**64 - 1)
        for counter in _State.counters.values():
            counter.assign(0)

    # ------------------------------------------------------------------ uniform and normal
    @classmethod
    def rand(cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Uniform floats in [0, 1)."""
        shp = _shape(shape)
        dt = _float_dtype(dtype)
        w0, w1 = _random_bits(cls, shp, device)
        return _unit(w0, w1, dt)

    @classmethod
    def uniform(cls: type[Tensor], *shape: Any, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None,
                device: str | None = None) -> Tensor:
        """Uniform floats in [low, high)."""
        dt = _float_dtype(dtype)
        u = cls.rand(*shape, dtype=dtypes.float64 if dt is dtypes.float64 else dtypes.float32, device=device)
        return (u * (high - low) + low).cast(dt)

    @classmethod
    def randn(cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Standard normal floats (Box-Muller on the two random words of each element)."""
        shp = _shape(shape)
        dt = _float_dtype(dtype)
        w0, w1 = _random_bits(cls, shp, device)
        work = dtypes.float64 if dt is dtypes.float64 else dtypes.float32
        u1 = ((w0 >> 8) + 1).cast(work) * 2.0 ** -24  # in (0, 1]: log is finite
        u2 = (w1 >> 8).cast(work) * 2.0 ** -24
        # sin and cos of a uniform angle are both standard-normal partners; sin needs no other op
        z = (u1.log() * -2.0).sqrt() * (u2 * (2 * math.pi)).sin()
        return z.cast(dt)

    @classmethod
    def normal(cls: type[Tensor], *shape: Any, mean: float = 0.0, std: float = 1.0, dtype: DType | str | None = None,
               device: str | None = None) -> Tensor:
        dt = _float_dtype(dtype)
        z = cls.randn(*shape, dtype=dtypes.float64 if dt is dtypes.float64 else dtypes.float32, device=device)
        return (z * std + mean).cast(dt)

    @classmethod
    def randint(cls: type[Tensor], *shape: Any, low: int = 0, high: int = 10, dtype: DType | str = dtypes.int32,
                device: str | None = None) -> Tensor:
        """Uniform integers in [low, high)."""
        for name, v in (("low", low), ("high", high)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"randint {name} must be an int, got {v!r}")
        dt = to_dtype(dtype)
        if not dtypes.is_int(dt) or dt is dtypes.bool:
            raise TypeError(f"randint needs an integer dtype, got {dt!r}")
        if high <= low:
            raise ValueError(f"randint needs low < high, got low={low}, high={high}")
        if low < dt.min or high - 1 > dt.max:
            raise ValueError(f"randint range [{low}, {high}) does not fit {dt!r}")
        shp = _shape(shape)
        w0, w1 = _random_bits(cls, shp, device)
        span = high - low
        if span <= 2**32:  # modulo bias is at most span / 2**32
            r = (w0 % span if span < 2**32 else w0).cast(dtypes.int64)
        else:
            wide = (w0.cast(dtypes.uint64) << 32) | w1.cast(dtypes.uint64)
            r = (wide % span).cast(dtypes.int64)
        return (r + low).cast(dt)

    @classmethod
    def scaled_uniform(cls: type[Tensor], *shape: Any, dtype: DType | str | None = None,
                       device: str | None = None) -> Tensor:
        """Uniform in [-1, 1) scaled by 1/sqrt(number of elements)."""
        shp = _shape(shape)
        scale = prod(shp) ** -0.5 if prod(shp) else 1.0
        return cls.uniform(shp, low=-scale, high=scale, dtype=dtype, device=device)

    # ------------------------------------------------------------------ initialisers
    @classmethod
    def glorot_uniform(cls: type[Tensor], *shape: Any, dtype: DType | str | None = None,
                       device: str | None = None) -> Tensor:
        """Uniform in ±sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio, 2010)."""
        shp = _shape(shape)
        fan_in, fan_out = _fans(shp)
        bound = math.sqrt(6.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
        return cls.uniform(shp, low=-bound, high=bound, dtype=dtype, device=device)

    @classmethod
    def kaiming_uniform(cls: type[Tensor], *shape: Any, a: float = 0.01, dtype: DType | str | None = None,
                        device: str | None = None) -> Tensor:
        """Uniform in ±sqrt(6 / ((1 + a^2) fan_in)) (He et al., 2015; ``a`` is the leaky-ReLU slope)."""
        shp = _shape(shape)
        fan_in = _fans(shp)[0]
        bound = math.sqrt(6.0 / ((1 + a * a) * fan_in)) if fan_in else 0.0
        return cls.uniform(shp, low=-bound, high=bound, dtype=dtype, device=device)

    @classmethod
    def kaiming_normal(cls: type[Tensor], *shape: Any, a: float = 0.01, dtype: DType | str | None = None,
                       device: str | None = None) -> Tensor:
        """Normal with std sqrt(2 / ((1 + a^2) fan_in))."""
        shp = _shape(shape)
        fan_in = _fans(shp)[0]
        std = math.sqrt(2.0 / ((1 + a * a) * fan_in)) if fan_in else 0.0
        return cls.normal(shp, mean=0.0, std=std, dtype=dtype, device=device)

    # ------------------------------------------------------------------ deterministic creation
    @classmethod
    def eye(cls: type[Tensor], n: int, m: int | None = None, dtype: DType | str | None = None,
            device: str | None = None) -> Tensor:
        """``n`` x ``m`` identity (ones on the main diagonal)."""
        m = n if m is None else m
        _shape((n, m))
        rows = cls.arange(n, device=device).reshape(n, 1)
        cols = cls.arange(m, device=device).reshape(1, m)
        return (rows == cols).cast(dtype or dtypes.default_float)

    @classmethod
    def linspace(cls: type[Tensor], start: float, stop: float, steps: int, dtype: DType | str | None = None,
                 device: str | None = None) -> Tensor:
        """``steps`` evenly spaced values from ``start`` to ``stop``, both included."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise ValueError(f"linspace steps must be a non-negative int, got {steps!r}")
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        work = dtypes.float64 if dt is dtypes.float64 else dtypes.float32
        if steps <= 1:
            return cls.full((steps,), start, dtype=work, device=device).cast(dt)
        i = cls.arange(steps, device=device)
        delta = (stop - start) / (steps - 1)
        vals = i.cast(work) * delta + start
        # the last value is exactly ``stop`` (as numpy does), whatever the rounding of start + (n-1) * delta
        return (i == steps - 1).where(vals._const(stop, work), vals).cast(dt)

    # ------------------------------------------------------------------ *_like
    def rand_like(self: Tensor, dtype: DType | str | None = None) -> Tensor:
        return type(self).rand(self.shape, dtype=dtype or _like_float(self.dtype), device=self.device)

    def randn_like(self: Tensor, dtype: DType | str | None = None) -> Tensor:
        return type(self).randn(self.shape, dtype=dtype or _like_float(self.dtype), device=self.device)

    def uniform_like(self: Tensor, low: float = 0.0, high: float = 1.0, dtype: DType | str | None = None) -> Tensor:
        return type(self).uniform(self.shape, low=low, high=high, dtype=dtype or _like_float(self.dtype),
                              device=self.device)

    def randint_like(self: Tensor, low: int = 0, high: int = 10, dtype: DType | str | None = None) -> Tensor:
        dt = dtype or (self.dtype if dtypes.is_int(self.dtype) and self.dtype is not dtypes.bool
                       else dtypes.default_int)
        return type(self).randint(self.shape, low=low, high=high, dtype=dt, device=self.device)

    def empty_like(self: Tensor, dtype: DType | str | None = None) -> Tensor:
        return type(self).empty(self.shape, dtype=dtype or self.dtype, device=self.device)


def _like_float(dt: DType) -> DType:
    return dt if dtypes.is_float(dt) else dtypes.default_float


def _fans(shape: Sequence[int]) -> tuple[builtins.int, builtins.int]:
    """(fan_in, fan_out) of a weight of ``shape`` laid out (out, in, *receptive field)."""
    if len(shape) < 2:
        raise ValueError(f"fan in/out need a weight with at least 2 dimensions (out, in, ...), "
                         f"got shape {tuple(shape)}")
    receptive = prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive

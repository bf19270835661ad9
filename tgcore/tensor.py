"""Tensor: the lazy front end.

In:  Python scalars, (nested) lists, numpy arrays, or other Tensors.
Out: a graph of tensor-level UOps; nothing runs until ``realize()`` or a read
     (``numpy()``, ``tolist()``, ``item()``), which schedules, compiles and runs kernels.

Copy semantics: ``Tensor(ndarray)`` copies the array's data into a device buffer when the
tensor is created, so later changes to the array do not show in the tensor (and vice
versa); ``numpy()`` always returns a fresh array.

Type promotion and broadcasting (the shared rules of `tgcore.uop.mixins`): two tensors promote
with ``least_upper_dtype``; a Python scalar takes the tensor's dtype unless it needs a wider kind
(a float with an int tensor gives the default float, an int with a bool tensor the default int).
``//`` and ``%`` follow Python (floor) semantics; ``/`` always gives a float.
"""
from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tgcore.dtype import DType, dtypes, least_upper_float, to_dtype
from tgcore.errors import TensorValueError
from tgcore.helpers import prod
from tgcore.runtime.registry import canonical
from tgcore.schedule.cache import is_constant
from tgcore.schedule.kernelize import create_schedule, new_buffer_uop
from tgcore.schedule.state import REALIZATION
from tgcore.tensor_autograd import AutogradMixin, leaf_uops, mark_leaf, remember_graph
from tgcore.tensor_index import IndexMixin
from tgcore.tensor_layout import LayoutMixin
from tgcore.tensor_math import MathMixin
from tgcore.tensor_nn import NNMixin
from tgcore.tensor_random import RandomMixin
from tgcore.tensor_reduce import ReduceMixin
from tgcore.tensor_select import SelectMixin
from tgcore.uop import Ops, UOp
from tgcore.uop.mixins import ElementwiseMixin, broadcast_shape
from tgcore.uop.movement import MovementMixin, check_shape, shape_args
from tgcore.uop.reduction import ReductionMixin
from tgcore.uop.shape import shape_of
from tgcore.uop.uop import add_reader

if TYPE_CHECKING:
    from tgcore.engine.realize import HostCalls
    from tgcore.runtime.buffer import Buffer

Scalar = bool | int | float
ShapeArg = int | Sequence[int]
Axis = int | Sequence[int] | None  # (Tensor has methods named int/bool/float: annotate with these aliases)


# operators defined on integers only (no float operands) and those with no bool meaning either (like torch)
_INT_OPERATORS = {Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.IDIV: "//",
                  Ops.MOD: "%"}
_NOT_ON_BOOL = (Ops.SHL, Ops.SHR, Ops.IDIV, Ops.MOD)
_CHECKED_OPERATORS = frozenset(_INT_OPERATORS)


def _check_operands(op: Ops, dtype: DType) -> None:
    """A clear TypeError for an operator the (promoted) operand dtype has no meaning for."""
    if op in _NOT_ON_BOOL and dtype is dtypes.bool:
        raise TypeError(f"{_INT_OPERATORS[op]} is not defined on bool tensors; cast one operand to an int dtype")
    if op in (Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR) and dtypes.is_float(dtype):
        raise TypeError(f"{_INT_OPERATORS[op]} needs integer or bool tensors, got {dtype!r}")


class Tensor(AutogradMixin, MathMixin, IndexMixin, RandomMixin, ReduceMixin, NNMixin, LayoutMixin, SelectMixin,
             ElementwiseMixin, MovementMixin, ReductionMixin):
    """A lazily evaluated n-dimensional array on a device."""

    __slots__ = ("uop", "device", "requires_grad", "grad", "_graph", "__weakref__")
    uop: UOp
    device: str
    requires_grad: bool | None  # True: backward() fills .grad; None: only if something asks for it
    grad: Any  # Tensor | None
    __hash__ = object.__hash__  # == is elementwise, so hashing is by identity

    def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
                 requires_grad: bool | None = None) -> None:
        self.grad = None
        self.requires_grad = None
        self._graph = None
        self._set_data(data, device, None if dtype is None else to_dtype(dtype))
        if requires_grad:
            self.requires_grad_(True)

    def _set_data(self, data: Any, device: str | None, dt: DType | None) -> None:
        if isinstance(data, Tensor):
            self.uop, self.device = data.uop, data.device
            add_reader(self.uop, self)  # (an alias of a realized tensor reads its memory: a JIT replay must know)
            if dt is not None and dt is not data.dtype:
                self.uop = data.cast(dt).uop
            if device is not None and canonical(device) != self.device:
                self.uop = self.to(device).uop
                self.device = canonical(device)
            return
        self.device = canonical(device)
        if isinstance(data, UOp):
            self.uop = data
            add_reader(data, self)
            return
        if isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, np.ndarray):
            if isinstance(data, np.generic):
                dt = dt or dtypes.from_numpy(data.dtype)
                data = data.item()
            dt = dt or dtypes.from_py(data)
            self.uop = UOp.const(dt, data)
            return
        if isinstance(data, (list, tuple)):
            dt = dt or dtypes.from_py(data)
            np_dt = dt.np if dt.np is not None else np.float32
            data = np.array(data, dtype=np_dt)
        if not isinstance(data, np.ndarray):
            raise TypeError(f"cannot make a Tensor from {type(data).__name__}")
        if dt is None:
            dt = dtypes.from_numpy(data.dtype)
        self.uop = self._from_numpy(data, dt)
        REALIZATION.hold(self)

    def _from_numpy(self, arr: np.ndarray, dt: DType) -> UOp:
        shape = tuple(arr.shape)  # ascontiguousarray turns 0-d arrays into 1-d ones
        if dt.np is not None:
            arr = np.ascontiguousarray(arr, dtype=dt.np)
        else:  # no numpy dtype (bfloat16, fp8): store the bit patterns
            arr = np.ascontiguousarray(dtypes.float_to_bits(np.asarray(arr, dtype=np.float32), dt))
        buf = new_buffer_uop(self.device, arr.size, dt)
        if arr.size:
            data = memoryview(arr.reshape(-1)).cast("B")  # type: ignore[arg-type]
            REALIZATION.buffer(buf).ensure_allocated().copyin(data)  # type: ignore[union-attr]
        return UOp(Ops.RESHAPE, dt, (buf,), shape)

    # ---------------------------------------------------------------- properties
    @property
    def shape(self) -> tuple[int, ...]:
        shape = self.uop.__dict__.get("_shape")  # (on every op's path: the cached shape without a call)
        return shape if shape is not None else shape_of(self.uop)

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype!r} on {self.device}>"

    def _new(self, uop: UOp) -> Tensor:
        t = Tensor.__new__(Tensor)
        t.uop, t.device, t.requires_grad, t.grad, t._graph = uop, self.device, None, None, None
        if uop.readers is not None:  # (the op gave a view of memory back: the tensor reads that memory)
            add_reader(uop, t)
        return t

    # ---------------------------------------------------------------- creation
    @staticmethod
    def full(shape: ShapeArg, fill_value: Scalar, dtype: DType | str | None = None,
             device: str | None = None) -> Tensor:
        shp = check_shape(shape_args((shape,)))
        dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
        t = Tensor(UOp.const(dt, fill_value), device=device)
        return t.reshape((1,) * len(shp)).expand(shp) if shp else t

    @staticmethod
    def zeros(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(shape_args(shape), 0.0, dtype or dtypes.default_float, device)

    @staticmethod
    def ones(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(shape_args(shape), 1.0, dtype or dtypes.default_float, device)

    @staticmethod
    def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
        """Uninitialised memory of ``shape``; read it only after writing it."""
        shp = check_shape(shape_args(shape))
        dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
        dev = canonical(device)
        buf = new_buffer_uop(dev, prod(shp), dt)
        t = Tensor(UOp(Ops.RESHAPE, dt, (buf,), shp), device=dev)
        REALIZATION.hold(t)
        return t

    @staticmethod
    def from_buffer(buf: Buffer, shape: ShapeArg | None = None) -> Tensor:
        """A realized tensor of ``shape`` (default: flat) whose elements are ``buf``'s: no copy, no kernel.

        ``buf`` is a runtime Buffer (or a view of one, ``buf.view(size, dtype, offset)``) with a tgcore dtype,
        allocated now if it is not yet. The tensor keeps it alive: a view counts in its base's ``views_alive``
        while the tensor, or anything built from it, exists. It starts no autograd graph (``requires_grad``
        None). Bytes written into the memory outside tgcore (a transport receiving into it) must be announced
        with ``tgcore.realization.invalidate(buf)``: values cached from the old contents are then dropped.
        Cheap (a few microseconds): for wrapping memory per message."""
        if not isinstance(buf.dtype, DType):
            raise TypeError(f"from_buffer needs a Buffer with a tgcore dtype, got {buf.dtype!r}")
        shp = (buf.size,) if shape is None else check_shape(shape_args((shape,)))
        if prod(shp) != buf.size:
            raise TensorValueError(f"shape {shp} has {prod(shp)} elements, the buffer {buf.size}")
        buf.ensure_allocated()
        dev = canonical(buf.device)
        t = Tensor.over(UOp(Ops.RESHAPE, buf.dtype, (REALIZATION.new_buffer(dev, buf.size, buf.dtype, buf),), shp), dev)
        REALIZATION.hold(t)  # (it follows writes into its memory)
        return t

    @staticmethod
    def over(node: UOp, device: str) -> Tensor:
        """A new tensor over ``node`` (a realized node: movement ops over a BUFFER uop) on the canonical ``device``,
        without checks and without an autograd graph: half the cost of ``Tensor(node, device)``, for a transport
        handing out a pooled result per message (``tgcore.realization.lend``)."""
        t = Tensor.__new__(Tensor)
        t.uop, t.device, t.requires_grad, t.grad, t._graph = node, device, None, None, None
        add_reader(node, t)
        return t

    @staticmethod
    def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: DType | str | None = None,
               device: str | None = None) -> Tensor:
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise TensorValueError("arange step must not be zero")
        n = max(0, math.ceil((stop - start) / step))
        is_float = any(isinstance(v, float) for v in (start, stop, step))
        fits_int32 = all(-2**31 <= v < 2**31 for v in (start, start + step * max(n - 1, 0)))
        dt = to_dtype(dtype) if dtype is not None else (dtypes.default_float if is_float else
                                                        dtypes.default_int if fits_int32 else dtypes.int64)
        idx = Tensor(UOp.arange_node(n), device=device)
        out = idx.cast(dt) if dt is not dtypes.int32 else idx
        if step != 1:
            out = out * step
        return out + start if start != 0 else out

    def full_like(self, fill_value: Scalar, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(self.shape, fill_value, dtype or self.dtype, self.device)

    def zeros_like(self, dtype: DType | str | None = None) -> Tensor:
        return self.full_like(0, dtype)

    def ones_like(self, dtype: DType | str | None = None) -> Tensor:
        return self.full_like(1, dtype)

    # ---------------------------------------------------------------- realization
    def realize(self, *others: Tensor, on_ready: Callable[[int, Buffer], None] | None = None) -> Tensor:
        """Compute this tensor (and ``others``) now; work shared between them is done once.

        ``on_ready(i, buffer)``: called for the i-th of (self, *others) as soon as the kernel that finishes its
        value has run, before the rest of the work (e.g. to start sending a gradient while the backward pass
        goes on); a JIT capture replays these calls in their places. ``buffer`` holds the value contiguously."""
        from tgcore.engine.realize import run_schedule
        if REALIZATION.pending:  # assigns whose new values these tensors read run first
            from tgcore.engine.assign import run_pending
            run_pending([t.uop for t in (self, *others)])
        todo = [t for t in (self, *others) if t.uop.op is not Ops.BUFFER and not _is_realized(t.uop)]
        if len(todo) <= len(others):  # tensors already in a buffer share its memory from now on: they see writes
            computing = {id(t) for t in todo}
            for t in (self, *others):
                if id(t) not in computing:
                    REALIZATION.hold(t)
        if not todo and on_ready is None:
            return self
        todo = list({id(t): t for t in todo}.values())  # t.realize(t): each tensor once
        outs = list(dict.fromkeys(t.uop for t in todo))
        items, result = create_schedule(outs, self.device) if outs else ([], {})
        run_schedule(items, _ready_calls((self, *others), items, result, on_ready) if on_ready else None)
        for si in items:
            if si.kind == "custom":  # a hand-written kernel may have written any of its buffers
                for b in si.bufs:
                    REALIZATION.invalidate(b)
        reads = list({b.base: None for si in items for b in si.bufs})
        leaves = leaf_uops()
        for t in todo:
            lazy = t.uop
            buf = result[lazy]
            if leaves and any(n in leaves for n in lazy.toposort):
                t._graph = lazy  # reading a value must not cut the graph backward() walks
                if not t.requires_grad:  # (nor the graph of a tensor computed from it; not cached: the
                    remember_graph(buf, lazy)  # cache maps the graph to buf, this buf to the graph)
            elif not is_constant(lazy):  # (constants are cheap to recompute and their nodes are shared)
                REALIZATION.remember(lazy, buf, reads)
            t.uop = UOp(Ops.RESHAPE, buf.dtype, (buf,), t.shape)
            if t.requires_grad:
                mark_leaf(t)
            REALIZATION.hold(t)
        return self

    def _is_realized(self) -> builtins.bool:
        """Whether this tensor's values are in an allocated buffer already (reading them runs nothing)."""
        return _is_realized(self.uop)

    def _buffer(self):  # noqa: ANN202
        self.realize()
        base = self.uop.src[0] if self.uop.op is Ops.RESHAPE else self.uop
        return REALIZATION.buffer(base)

    def numpy(self) -> np.ndarray:
        """A new numpy array with the tensor's values (bfloat16/fp8 come back as float32)."""
        if self.dtype.np is None and self.dtype not in (dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2):
            raise TypeError(f"no numpy equivalent for {self.dtype!r}")
        if self.numel() == 0:
            np_dt = self.dtype.np if self.dtype.np is not None else np.float32
            return np.zeros(self.shape, dtype=np_dt)
        buf = self._buffer()
        if self.dtype.np is None:
            bits_dt = np.uint16 if self.dtype.itemsize == 2 else np.uint8
            bits = np.frombuffer(bytes(buf.as_buffer(allow_zero_copy=False)), dtype=bits_dt)
            return dtypes.bits_to_float(bits, self.dtype).astype(np.float32).reshape(self.shape)
        out = np.empty(self.shape, dtype=self.dtype.np)
        buf.copyout(out.reshape(-1).view(np.uint8).data)  # (one copy, straight into the new array)
        return out

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Scalar:
        if self.numel() != 1:
            raise TensorValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def to(self, device: str) -> Tensor:
        dev = canonical(device)
        if dev == self.device:
            return self
        t = Tensor.__new__(Tensor)
        t.requires_grad, t.grad, t._graph = None, None, None
        t.uop = UOp(Ops.COPY, self.dtype, (self.contiguous().uop, UOp(Ops.DEVICE, dtypes.void, (), dev)))
        t.device = dev
        return t

    def assign(self, value: Any) -> Tensor:
        """Write ``value`` into this tensor's memory (optimizer steps, caches). Returns self.

        ``value`` is broadcast and cast to this tensor's shape and dtype. A realized tensor (or a
        reshape/shrink/permute/flip view of one) is updated in place: the tensors realized into that
        memory and captured JIT kernels see the new values. The write is lazy: it runs when something
        reads the new values (or at ``realize()``), and lazy tensors built before the assign keep the
        values they were built from. A lazy tensor simply takes the new value.

        An assign into ``table.take(index)`` writes the value's elements into the (realized) table's
        elements that ``index`` names, in one kernel: a scatter in place. An index outside the table
        writes nothing; when two indices name one element, which of their values it keeps is not defined.
        """
        v = value if isinstance(value, Tensor) else self._const(value, self.dtype)
        if v.device != self.device:
            raise TensorValueError(f"assign from {v.device} to {self.device}: move the value with .to() first")
        v = v.cast(self.dtype)._broadcast_to(broadcast_shape(self.shape, v.shape))
        if v.shape != self.shape:
            raise TensorValueError(f"assign of shape {v.shape} into a tensor of shape {self.shape}")
        base, chain = self.uop, []
        while base.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP, Ops.INDEX):  # (INDEX: a take's table)
            chain.append(base)
            base = base.src[0]
        if any(n.op is Ops.INDEX for n in chain[1:]):
            raise TensorValueError("assign into a view of a take is not supported: assign into the take itself "
                                   "(reshape or slice the index and the value instead)")
        buf = REALIZATION.buffer(base) if base.op is Ops.BUFFER else None
        if buf is None or not buf.is_allocated():
            if self.uop.op is Ops.INDEX:
                if base.op in (Ops.EXPAND, Ops.PAD):  # (elements there are no memory of their own to write)
                    raise TensorValueError("assign into a take needs a table that is a realized buffer or a "
                                           "reshape/shrink/permute/flip of one, not an expanded or padded one")
                raise TensorValueError("assign into a take writes the table's memory: realize the table first")
            self.uop = v.uop  # nothing materialized to write into
            return self
        from tgcore.engine.assign import defer
        target = self.uop.replace(tag=None) if self.uop.tag is not None else self.uop
        defer(self, target, v.uop)
        if self.requires_grad:
            mark_leaf(self)  # a new version of the leaf: graphs built from now on refer to it
        return self

    def contiguous(self) -> Tensor:
        return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def clone(self) -> Tensor:
        """A copy in memory of its own (assigning into it leaves this tensor alone); gradients flow through."""
        return self.contiguous()

    @staticmethod
    def custom_kernel(*tensors: Tensor, fxn: Any, grad_fxn: Any = None) -> list[Tensor]:
        """Run a hand-written kernel on ``tensors``; returns each tensor as it is after the kernel ran.

        ``fxn(*params)`` gets one PARAM per tensor (pointer dtype with the element count) and returns
        ``tgcore.custom.custom_program(name, instructions, global_size, local_size, ops, mem)`` for the
        device's renderer. The kernel may write any of its buffers in place. ``grad_fxn(grad, index,
        *inputs)``, if given, returns one gradient (or None) per input for the gradient of output
        ``index``. Scheduled lazily like any other kernel (see ``tgcore.custom``).
        """
        from tgcore.custom import CustomKernel
        if not tensors:
            raise ValueError("custom_kernel needs at least one tensor")
        if not callable(fxn) or (grad_fxn is not None and not callable(grad_fxn)):
            raise TypeError("custom_kernel: fxn (and grad_fxn, if given) must be callable")
        devices = {t.device for t in tensors}
        if len(devices) > 1:
            raise ValueError(f"custom_kernel: all tensors must be on one device, got {sorted(devices)}")
        kernel = UOp(Ops.CUSTOM_KERNEL, dtypes.void, tuple(t.uop for t in tensors), CustomKernel(fxn, grad_fxn))
        return [t._new(UOp(Ops.AFTER, t.dtype, (kernel, *kernel.src), i)) for i, t in enumerate(tensors)]

    # ---------------------------------------------------------------- movement (the rest: MovementMixin)
    def _movement(self, op: Ops, arg: Any) -> Tensor:
        return self._new(self.uop._movement(op, arg))

    def _reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> Tensor:
        return self._new(self.uop._reduce_axis(op, axes))

    def _arange(self, n: int) -> Tensor:
        return self._new(UOp.arange_node(n))

    # ---------------------------------------------------------------- elementwise
    def _scalar_like(self, value: Scalar, dtype: DType | None = None) -> Tensor:
        """``value`` broadcast to this tensor's shape, in its dtype (or ``dtype``). Built once per (value, dtype,
        shape) and then reused: this is on every scalar operation's path, and loops use the same few constants."""
        shape = self.shape
        dt = self.uop.dtype if dtype is None else dtype
        key = (dt, shape, value.hex() if type(value) is float else (type(value), value))  # -0.0 is not 0.0
        u = _const_uops.get(key)
        if u is None:
            u = UOp.const(dt, value)._shaped(shape)
            if len(_const_uops) >= 4096:
                _const_uops.clear()
            _const_uops[key] = u
        return self._new(u)

    _const = const_like = _scalar_like

    # the shared operator surface (tgcore.uop.mixins): how a Tensor applies an op, makes constants, checks operands
    def alu(self, op: Ops, *src: Tensor) -> Tensor:
        """``op`` on this tensor and ``src`` (same shape and dtype already)."""
        if len(src) == 1:  # (binary ops: on every operator's path, so without building a list)
            return self._new(self.uop.alu(op, src[0].uop))
        return self._new(self.uop.alu(op, *[s.uop for s in src]))

    def _check_operand(self, other: Tensor) -> None:
        if other.device != self.device:
            raise TensorValueError(f"tensors on different devices: {self.device} and {other.device}; use .to()")

    def _cut_gradient(self) -> Tensor:
        return self.detach()

    def _binop(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
        """What ElementwiseMixin._binop does, in one frame: every operator goes through here."""
        pair = self._broadcasted(x, reverse)
        if pair is NotImplemented:
            return NotImplemented
        a, b = pair
        if op in _CHECKED_OPERATORS:
            _check_operands(op, a.dtype)
        return a._new(a.uop.alu(op, b.uop))

    def __sub__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x)
        return a + (-b)

    def __rsub__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x, True)
        return a + (-b)

    def __truediv__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x)
        dt = least_upper_float(a.dtype)
        return a._new(a.cast(dt).uop.alu(Ops.FDIV, b.cast(dt).uop))

    def __rtruediv__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x, True)
        return a / b

    def __neg__(self) -> Tensor:
        if self.dtype is dtypes.bool:
            return self.logical_not()
        return self._new(self.uop.alu(Ops.NEG))

    def __floordiv__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x)
        return a._floordiv(b)

    def __rfloordiv__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x, True)
        return a._floordiv(b)

    def _floordiv(self, b: Tensor) -> Tensor:
        _check_operands(Ops.IDIV, self.dtype)
        if dtypes.is_float(self.dtype):
            return (self / b).floor()
        q = self._new(self.uop.alu(Ops.IDIV, b.uop))
        if dtypes.is_unsigned(self.dtype) or self.dtype is dtypes.bool:
            return q
        r = self._new(self.uop.alu(Ops.MOD, b.uop))
        adjust = (r != 0) & ((r < 0) != (b < 0))
        return adjust.where(q - 1, q)

    def __mod__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x)
        return a._mod(b)

    def __rmod__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x, True)
        return a._mod(b)

    def _mod(self, b: Tensor) -> Tensor:
        _check_operands(Ops.MOD, self.dtype)
        if dtypes.is_float(self.dtype):
            return self - (self / b).floor() * b
        r = self._new(self.uop.alu(Ops.MOD, b.uop))
        if dtypes.is_unsigned(self.dtype):
            return r
        adjust = (r != 0) & ((r < 0) != (b < 0))
        return adjust.where(r + b, r)

    def __le__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x)
        if dtypes.is_float(a.dtype):  # NaN compares false, so "not greater" is not "less or equal"
            return (a < b) | (a == b)
        return (a > b).logical_not()

    def __ge__(self, x: Any) -> Tensor:
        a, b = self._broadcast_pair(x)
        if dtypes.is_float(a.dtype):
            return (a > b) | (a == b)
        return (a < b).logical_not()

    def __eq__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._binop(Ops.CMPEQ, x)

    def __ne__(self, x: Any) -> Tensor:  # type: ignore[override]
        return self._binop(Ops.CMPNE, x)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise TensorValueError("the truth value of a tensor with more than one element is ambiguous")
        return bool(self.item())

    def minimum(self, x: Any) -> Tensor:
        """Elementwise min; a NaN in either input gives NaN (like numpy.minimum)."""
        a, b = self._broadcast_pair(x)
        if dtypes.is_float(a.dtype):
            return -((-a).maximum(-b))
        return (a < b).where(a, b)

    def cast(self, dtype: DType | str) -> Tensor:
        dt = to_dtype(dtype)
        return self if dt is self.dtype else self._new(UOp(Ops.CAST, dt, (self.uop,)))

    def bitcast(self, dtype: DType | str) -> Tensor:
        dt = to_dtype(dtype)
        if dt.itemsize != self.dtype.itemsize:
            raise TensorValueError(f"bitcast {self.dtype!r} -> {dt!r}: item sizes differ ({self.dtype.itemsize} vs "
                                   f"{dt.itemsize})")
        return self if dt is self.dtype else self._new(UOp(Ops.BITCAST, dt, (self.uop,)))

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    def double(self) -> Tensor:
        return self.cast(dtypes.float64)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)


def _ready_calls(tensors: Sequence[Tensor], items: list[Any], result: dict[UOp, UOp],
                 on_ready: Callable[[int, Buffer], None]) -> HostCalls:
    """For ``Tensor.realize(on_ready=)``: each tensor's ``on_ready`` call, placed after the last schedule item that
    touches its buffer (before every item when this realize does not compute it)."""
    from tgcore.engine.realize import HostCall
    after: HostCalls = {}
    for i, t in enumerate(tensors):
        buf_uop = result.get(t.uop)
        buf = REALIZATION.buffer(buf_uop) if buf_uop is not None else REALIZATION.buffer_of(t)
        if buf is None:
            raise ValueError(f"realize(on_ready=...) needs tensors it computes or that own a contiguous buffer; "
                             f"tensor {i} ({t.shape}) is a view: pass t.contiguous()")
        last = -1 if buf_uop is None else \
            max((k for k, si in enumerate(items) if any(b.base is buf.base for b in si.bufs)), default=-1)
        after.setdefault(last, []).append((HostCall(f"on_ready {i}", _call_with_index(on_ready, i)), [buf]))
    return after


def _call_with_index(on_ready: Callable[[int, Buffer], None], i: int) -> Callable[[list[Buffer]], None]:
    def call(bufs: list[Buffer]) -> None:
        on_ready(i, bufs[0])
    return call


# (dtype, shape, value) -> the constant broadcast to that shape; see Tensor._scalar_like
_const_uops: dict[tuple, UOp] = {}


def _is_realized(u: UOp) -> bool:
    base = u.src[0] if u.op is Ops.RESHAPE else u
    buf = REALIZATION.buffer(base) if base.op is Ops.BUFFER else None
    return buf is not None and buf.is_allocated()

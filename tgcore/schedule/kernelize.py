"""Cut a tensor graph into kernels and lower each kernel to loops over indices.

In:  tensor-level UOps to realize (BUFFER, CONST, movement ops, ALU, REDUCE_AXIS, CAST,
     CONTIGUOUS, COPY, DEFINE_VAR/BIND).
Out: ``ScheduleItem``s in dependency order. Each kernel's AST is
     ``SINK(STORE(INDEX(PARAM 0, out_index), value))`` where the value reads inputs with
     ``LOAD(INDEX(PARAM k, index[, gate]))``, loops are ``RANGE`` uops (one per output axis,
     arg ``AxisArg(axis, GLOBAL)``; one per reduced axis, arg ``AxisArg(n, REDUCE)``) and reductions are
     ``REDUCE(value, *ranges)``.

Movement ops never copy: walking from a kernel's output towards its inputs, each movement
op rewrites the tuple of index expressions (reshape regroups, permute reorders, expand pins
to 0, shrink offsets, flip mirrors, pad offsets and adds a validity gate). Fusion policy:
elementwise work is recomputed wherever it is used; a reduction fuses into its consumer
only when it is reached without broadcasting or padding, has a single consumer and every use of its
value is inside that one kernel (not also read, through shared elementwise work, by another
kernel), otherwise it gets a kernel (and a buffer) of its own. ``CONTIGUOUS`` and ``COPY`` always end a kernel.
A realized crop (reshapes and shrinks) of a reduction's ``CONTIGUOUS`` result is stored by the reduction's own kernel,
which loops over the whole result and stores only what the crop keeps (no copy kernel after it).

The runtime Buffer behind each BUFFER uop, and the values earlier realizes computed, are read from
``tgcore.schedule.state.REALIZATION`` (their one owner); scheduling writes nothing there but new buffers.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tgcore.custom import build_program
from tgcore.dtype import DType, dtypes
from tgcore.helpers import prod
from tgcore.runtime.buffer import Buffer
from tgcore.schedule.pack import packed_product
from tgcore.schedule.split import split_large_reductions
from tgcore.schedule.state import REALIZATION
from tgcore.uop import AxisArg, GroupOp, Ops, RangeKind, UOp
from tgcore.uop.shape import shape_of
from tgcore.uop.symbolic import conjuncts

INT32_LIMIT = 2**31 - 1
MIN_BROADCAST = 64   # copies an expand makes of an elementwise input from which it may get a kernel of its own ...
EXPENSIVE_OPS = 12   # ... when it has this many ALU ops (a silu, a dequantization) ...
READ_WORK = 5        # ... or reads a buffer and its ALU ops plus the buffers it reads reach this (relu(x + b))


def new_buffer_uop(device: str, size: int, dtype: DType) -> UOp:
    """A fresh BUFFER uop (distinct from every other) with a lazily allocated Buffer behind it."""
    return REALIZATION.new_buffer(device, size, dtype)


def uop_buffer(u: UOp) -> Buffer:
    """The runtime Buffer behind a BUFFER uop the schedule uses."""
    buf = REALIZATION.buffer(u)
    if buf is None:
        raise RuntimeError(f"no buffer behind {u!r}")
    return buf


def buffer_device(u: UOp) -> str:
    return u.src[1].arg


@dataclass
class ScheduleItem:
    ast: UOp                 # SINK(...) in loop form, or COPY
    bufs: list[Buffer]       # by PARAM slot; outputs first
    device: str
    kind: str                # "elementwise", "reduce", "copy", "custom"
    var_vals: dict[str, int] = field(default_factory=dict)
    buf_uops: tuple[UOp, ...] = ()  # the BUFFER uops behind ``bufs`` (compute kernels; the schedule cache maps them)


def _node_device(n: UOp, src_devices: list[str | None]) -> str | None:
    """The device a lazy node computes on: a copy's target, a buffer's own, else its first source's."""
    if n.op is Ops.COPY:
        return n.src[1].arg
    if n.op is Ops.BUFFER:
        return buffer_device(n)
    return next((d for d in src_devices if d is not None), None)


# ------------------------------------------------------------------------------------------ index math

def _strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return out[::-1]


def output_index(shape: tuple[int, ...], idt: DType) -> tuple[UOp, ...]:
    """One output loop per axis of ``shape`` (a constant 0 for an axis of size 1): a kernel's store index."""
    return tuple(UOp.range(s, AxisArg(i, RangeKind.GLOBAL), dtype=idt) if s != 1 else UOp.const(idt, 0)
                 for i, s in enumerate(shape))


def linear_index(idx: tuple[UOp, ...], shape: tuple[int, ...], idt: DType) -> UOp:
    """Row-major offset of ``idx`` in ``shape``."""
    total = UOp.const(idt, 0)
    for i, st, s in zip(idx, _strides(shape), shape, strict=True):
        if s != 1:
            total = total + i * st
    return total


def _reshape_groups(old: tuple[int, ...], new: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Pair up runs of old and new axes with equal products: ([old axes], [new axes]) each."""
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        oi, nj, po, pn = [], [], 1, 1
        while True:
            if po <= pn and i < len(old):
                oi.append(i)
                po *= old[i]
                i += 1
            elif j < len(new):
                nj.append(j)
                pn *= new[j]
                j += 1
            else:
                break
            if po == pn and (i == len(old) or old[i] != 1 or j == len(new)) and (
                    j == len(new) or new[j] != 1 or i == len(old)) and oi and nj:
                break
        groups.append((oi, nj))
    return groups


def reshape_index(idx: tuple[UOp, ...], old: tuple[int, ...], new: tuple[int, ...], idt: DType) -> tuple[UOp, ...]:
    """Index into ``old`` for an index into ``new`` (same number of elements)."""
    if 0 in old:
        return tuple(UOp.const(idt, 0) for _ in old)
    out: list[UOp] = [UOp.const(idt, 0)] * len(old)
    for old_axes, new_axes in _reshape_groups(old, new):
        lin = linear_index(tuple(idx[j] for j in new_axes), tuple(new[j] for j in new_axes), idt)
        sub = tuple(old[i] for i in old_axes)
        for i, st, s in zip(old_axes, _strides(sub), sub, strict=True):
            if s == 1:
                continue
            v = lin if st == 1 else lin // st
            out[i] = v if st * s == prod(sub) else v % s
    return tuple(out)


def _and(a: UOp | None, b: UOp) -> UOp:
    return b if a is None else a & b


def _reads_zero_unless(value: UOp, valid: UOp) -> bool:
    """Whether ``value`` is a load gated on ``valid`` (among the conjuncts of its gate) with no other value to
    read, or such a load converted to another type (0 stays 0; a concatenation of widened packed bytes): where
    ``valid`` is false it reads 0 already (a gated load's meaning, ``runtime.python``)."""
    while value.op is Ops.CAST:
        value = value.src[0]
    if value.op is not Ops.LOAD or len(value.src) != 1 or len(value.src[0].src) != 3:
        return False
    return set(conjuncts(valid)) <= set(conjuncts(value.src[0].src[2]))


# ------------------------------------------------------------------------------------------ lowering

class Kernelizer:
    """Builds the kernels for one schedule. One instance per ``create_schedule`` call."""

    def __init__(self, default_device: str, sink: UOp) -> None:
        self.default_device = default_device
        # one pass over the graph: users of each node, each node's device, and whether any buffer or shape
        # is too large for int32 index math (then every kernel of this schedule indexes with int64)
        self.consumers: dict[UOp, list[UOp]] = {}
        self.device: dict[UOp, str | None] = {}
        huge = False
        for n in sink.toposort:
            self.consumers[n] = []
            # (a DETACH computes only its first source; the others are its gradient rule's inputs, not uses)
            for s in dict.fromkeys(n.src[:1] if n.op is Ops.DETACH else n.src):
                self.consumers[s].append(n)
            self.device[n] = _node_device(n, [self.device[s] for s in n.src])
            if not huge and n.op is not Ops.SINK:
                huge = (n.arg if n.op is Ops.BUFFER else prod(shape_of(n))) > INT32_LIMIT
        self.index_dtype = dtypes.int64 if huge else dtypes.int32
        self.items: list[ScheduleItem] = []
        self.done: dict[UOp, UOp] = {}  # lazy node -> BUFFER uop computed in this schedule
        self._expand_cost: dict[UOp, bool] = {}  # whether an elementwise input is worth a kernel before an expand
        self._read_only_by: dict[tuple[UOp, UOp | None], bool] = {}
        self.var_vals: dict[str, int] = {}
        self.custom: dict[UOp, list[UOp]] = {}  # CUSTOM_KERNEL -> its buffers, once scheduled
        self.views: dict[UOp, tuple[UOp, int, int]] = {}  # view BUFFER -> (base BUFFER, size, offset in bytes)
        self.made: set[UOp] = set()  # the BUFFERs this schedule's kernels compute (no other tensor names them yet)
        self._packed: dict[UOp, UOp] = {}  # a matrix product -> the same reading its B from a packed copy

    def worth_realizing_before_expand(self, node: UOp, factor: int) -> bool:
        """Whether ``node`` should get a kernel of its own rather than be recomputed for every copy an
        expand makes of it: when it is broadcast many times over, as a matmul broadcasts each input over the
        other's rows, and each copy would redo real work: a dozen ALU ops (an activation like silu, a
        dequantization), or fewer on buffers it reads (relu(x + b) on a matmul's output: 3 ops, 2 buffers; relu's
        gradient: 3 ops, 3 buffers), where one load of the result replaces several. Per-block scales (an op or
        two on one buffer, broadcast over a quantization block) and tables of constants stay fused, and so do
        bytes widened to larger integers (``_widened_bytes``) whatever their work."""
        if factor < MIN_BROADCAST or node.op is Ops.BUFFER or self.cached(node) is not None or node in self.done:
            return False
        worth = self._expand_cost.get(node)
        if worth is None and _widened_bytes(node, self.is_read):
            worth = self._expand_cost[node] = False
        if worth is None:
            ops, reads, stack, seen = 0, 0, [node], set()
            while stack and ops < EXPENSIVE_OPS and not (reads and ops + reads >= READ_WORK):
                n = stack.pop()
                if n in seen:
                    continue
                seen.add(n)
                if self.is_read(n):
                    reads += 1  # a load where it is fused
                    continue
                ops += n.op in GroupOp.ALU
                stack.extend(n.src)
            worth = self._expand_cost[node] = ops >= EXPENSIVE_OPS or (reads > 0 and ops + reads >= READ_WORK)
        return worth

    def is_read(self, node: UOp) -> bool:
        """Whether a kernel that uses ``node`` loads it (a buffer, a reduction's or copy's result, or a value already
        given a kernel) rather than computing it."""
        return node.op in (Ops.BUFFER, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.COPY) or node in self.done or \
            self.cached(node) is not None

    def used_once(self, node: UOp) -> bool:
        """Whether ``node`` (looking through reshapes of it) has a single user in this schedule."""
        while True:
            users = self.consumers.get(node, [])
            if len(users) != 1:
                return len(users) == 0
            if users[0].op is not Ops.RESHAPE:
                return True
            node = users[0]

    def read_only_by(self, node: UOp, root: UOp | None) -> bool:
        """Whether every use of ``node``'s value is inside the kernel rooted at ``root``: each path of users
        from ``node`` reaches ``root`` (or a node an earlier kernel already computed) before another
        reduction, a kernel boundary or an output. A reduction fused into a kernel whose elementwise work
        other kernels also read (logits + bias feeding both the loss and its gradient) would be computed
        again in each of them."""
        key = (node, root)
        known = self._read_only_by.get(key)
        if known is not None:
            return known
        ok, stack, seen = True, [node], {node}
        while stack and ok:
            for user in self.consumers.get(stack.pop(), []):
                if user is root or user in seen or user in self.done or self.cached(user) is not None:
                    continue
                if user.op in (Ops.SINK, Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN, Ops.CUSTOM_KERNEL):
                    ok = False
                    break
                seen.add(user)
                stack.append(user)
        self._read_only_by[key] = ok
        return ok

    def cached(self, node: UOp) -> UOp | None:
        """The buffer an earlier realize left ``node``'s value in, if it is on the device ``node`` computes on
        (a graph of constants has no device of its own: the same node may be realized on several)."""
        buf = REALIZATION.cached(node)
        if buf is None or buffer_device(buf) != (self.device.get(node) or self.default_device):
            return None
        return buf

    def packed(self, node: UOp) -> UOp:
        """``node`` (a REDUCE_AXIS), or when it is a large matrix product whose B is laid out badly the same
        reading B from a packed copy (``tgcore.schedule.pack``)."""
        if node not in self._packed:
            packed = packed_product(node, self.element_strides)
            self._packed[node] = node if packed is None else packed
        return self._packed[node]

    def element_strides(self, node: UOp) -> tuple[int, ...] | None:
        """The element stride of ``node``'s buffer index along each of its axes, when ``node`` is a view of data
        already in a buffer (or in one an earlier kernel of this schedule computes), read ungated at an affine
        index; else None."""
        base = node
        while base.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK):
            base = base.src[0]
        if not (base.op is Ops.BUFFER or base in self.done or self.cached(base) is not None):
            return None  # (lowering it could fuse or realize work)
        shape = shape_of(node)
        builder = _KernelBuilder(self, self.index_dtype)
        idx = output_index(shape, builder.idt)
        value = builder.lower(node, idx, None, direct=False)
        if value.op is not Ops.LOAD or len(value.src[0].src) != 2:
            return None
        index = value.src[0].src[1]
        ranges = [r for r in idx if r.op is Ops.RANGE]

        def at(point: dict[UOp, int]) -> int | None:
            v = index.substitute({r: UOp.const(builder.idt, point.get(r, 0)) for r in ranges}).simplify()
            return v.arg if v.op is Ops.CONST else None
        origin = at({})
        strides = []
        for r, s in zip(idx, shape, strict=True):
            if r.op is not Ops.RANGE:
                strides.append(0)
                continue
            one, last = at({r: 1}), at({r: s - 1})
            if origin is None or one is None or last is None or last - origin != (one - origin) * (s - 1):
                return None
            strides.append(one - origin)
        return tuple(strides)

    def view_of_buffer(self, u: UOp) -> UOp | None:
        """The BUFFER under ``u`` when ``u`` is that buffer's data, merely reshaped; else None."""
        while u.op is Ops.RESHAPE:
            u = u.src[0]
        u = self.cached(u) or u
        return u if u.op is Ops.BUFFER else None

    # ---- kernels ----
    def realize(self, node: UOp) -> UOp:
        """Make sure ``node``'s value sits in a buffer; returns the BUFFER uop."""
        cached = self.cached(node)
        if cached is not None:
            return cached
        if node in self.done:
            return self.done[node]
        base = self.view_of_buffer(node)
        if base is not None and prod(shape_of(node)) == base.arg:
            return base
        crop = self.cropped_reduction(node)
        if crop is not None:
            return self._store_through_crop(node, crop)
        contiguous = node.op is Ops.CONTIGUOUS
        view = self.contiguous_view(node.src[0] if contiguous else node, of_memory_that_exists=not contiguous)
        if view is not None:  # already laid out contiguously in a buffer: nothing to copy
            self.done[node] = view
            return view
        if node.op is Ops.COPY:
            return self._copy_kernel(node)
        if node.op is Ops.ASSIGN:
            return self._assign_kernel(node)
        if node.op is Ops.AFTER:
            return self._custom_kernel(node.src[0])[node.arg]
        return self._compute_kernel(node)

    def cropped_reduction(self, node: UOp) -> list[UOp] | None:
        """The views from a reduction's CONTIGUOUS up to ``node`` (that CONTIGUOUS first), when ``node`` crops the
        reduction's result (reshapes and shrinks of it, at least one shrink, with no other user on the way) and
        the reduction is computed nowhere else: then ``node``'s kernel computes the whole reduction and stores
        only what the crop keeps (``_store_through_crop``), with no copy of the cropped elements afterwards. A
        flat convolution's product over its padded grid of positions, of which each row's last ones are cut."""
        chain = [node.src[0] if node.op is Ops.DETACH else node]  # (a gradient rule's node computes its first source)
        if prod(shape_of(node)) == 0:  # (nothing kept: no kernel at all, as for any empty result)
            return None
        if chain[0] is not node and not self._only_here(chain[0]):
            return None
        while chain[-1].op in (Ops.RESHAPE, Ops.SHRINK):
            below = chain[-1].src[0]
            if not self._only_here(below):
                return None
            chain.append(below)
        contiguous = chain[-1]
        if contiguous.op is not Ops.CONTIGUOUS or not any(n.op is Ops.SHRINK for n in chain):
            return None
        reduced = contiguous.src[0]
        while reduced.op is Ops.RESHAPE:
            reduced = reduced.src[0]
        if reduced.op is not Ops.REDUCE_AXIS or any(not isinstance(bound, int) for n in chain if n.op is Ops.SHRINK
                                                    for pair in n.arg for bound in pair):
            return None
        return chain[::-1]

    def _only_here(self, node: UOp) -> bool:
        """``node`` has one reader and is neither scheduled nor cached: a kernel may compute it inline."""
        return len(self.consumers.get(node, ())) == 1 and node not in self.done and self.cached(node) is None

    def _store_through_crop(self, node: UOp, chain: list[UOp]) -> UOp:
        """``node``'s kernel when it crops a reduction (``chain``: see ``cropped_reduction``): the loops run over the
        reduction's own shape (its register tiles as they would be for the whole result), and each element is
        stored where the crop puts it, gated on the crop keeping it."""
        contiguous = chain[0]
        shape, dtype = shape_of(contiguous), node.dtype
        device = self.device.get(node) or self.default_device
        kernel = _KernelBuilder(self, self.index_dtype)
        out = new_buffer_uop(device, prod(shape_of(node)), dtype)
        self.made.add(out)
        kernel.param(out)
        ranges = output_index(shape, kernel.idt)
        kernel.root, kernel.root_idx = contiguous, ranges
        value = kernel.lower(contiguous.src[0], ranges, None, direct=True)
        idx, gate = ranges, None
        for view in chain[1:]:  # the source's index carried up to the view's, the way the view goes
            before = shape_of(view.src[0])
            if view.op is Ops.RESHAPE:
                idx = reshape_index(idx, tuple(view.arg), before, kernel.idt)
                continue
            moved = []
            for i, (begin, end), size in zip(idx, view.arg, before, strict=True):
                if begin > 0:
                    gate = _and(gate, i >= begin)
                if end < size:
                    gate = _and(gate, i < end)
                moved.append(i - begin if begin else i)
            idx = tuple(moved)
        at = linear_index(idx, shape_of(chain[-1]), kernel.idt)
        target = kernel.params[0].index(at) if gate is None else kernel.params[0].index(at, gate)
        ast = UOp.sink(target.store(value))
        self.items.append(ScheduleItem(ast, [uop_buffer(b) for b in kernel.param_bufs], device, "reduce",
                                       dict(kernel.var_vals), tuple(kernel.param_bufs)))
        self.done[node] = out
        return out

    def contiguous_view(self, node: UOp, of_memory_that_exists: bool = True) -> UOp | None:
        """A BUFFER uop viewing ``node``'s elements in place, when movement ops made them a plain slice.

        Lowers the movement ops with symbolic indices and checks that the buffer index is the
        row-major index of ``node`` plus a constant offset, with no gate. ``of_memory_that_exists=False`` (a
        ``contiguous()``: a copy of its own): only a view of memory this schedule makes, not of allocated memory
        other tensors name (a write into either would show in the other; a JIT replay overwrites its outputs).
        """
        chain, reshapes_only = node, True
        while chain.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.EXPAND, Ops.FLIP, Ops.PAD):
            reshapes_only = reshapes_only and chain.op is Ops.RESHAPE
            chain = chain.src[0]
        # a contiguous() is a kernel anyway, and a reshape is its source's elements in order: the source's own
        # buffer may do (and other kernels that read the source find it)
        if chain.op is Ops.CONTIGUOUS or (reshapes_only and chain is not node and chain.op is not Ops.BUFFER):
            chain = self.realize(chain)
        chain = self.cached(chain) or self.done.get(chain, chain)
        if chain.op is not Ops.BUFFER or chain is node or REALIZATION.buffer(chain) is None:
            return None
        if not of_memory_that_exists and self._names_memory_that_exists(chain):
            return None
        shape = shape_of(node)
        if prod(shape) == 0:
            return None
        builder = _KernelBuilder(self, dtypes.int64 if chain.arg > INT32_LIMIT else dtypes.int32)
        idx = output_index(shape, builder.idt)
        value = builder.lower(node, idx, None, direct=True)
        if value.op is not Ops.LOAD or len(value.src[0].src) != 2:
            return None
        offset = (value.src[0].src[1] - linear_index(idx, shape, builder.idt)).simplify()
        if offset.op is not Ops.CONST:
            return None
        view = REALIZATION.new_view(chain, prod(shape), offset.arg * chain.dtype.itemsize)
        self.views[view] = (chain, prod(shape), offset.arg * chain.dtype.itemsize)
        return view

    def _names_memory_that_exists(self, buf: UOp) -> bool:
        """Whether the BUFFER ``buf`` (or the one it views) is memory from before this schedule: an input, a cached
        value, not a kernel's result here."""
        while buf in self.views:
            buf = self.views[buf][0]
        return buf not in self.made

    def _copy_kernel(self, node: UOp) -> UOp:
        src = node.src[0]
        view = None
        if src.op is Ops.CONTIGUOUS and len(self.consumers.get(src, ())) == 1 and src not in self.done:
            view = self.contiguous_view(src.src[0])  # (the copy is the copy: it may read a slice of memory in place)
        src_buf = view if view is not None else self.realize(src)
        out = new_buffer_uop(node.src[1].arg, src_buf.arg, src_buf.dtype)
        self.made.add(out)
        self.items.append(ScheduleItem(node, [uop_buffer(out), uop_buffer(src_buf)], node.src[1].arg, "copy"))
        self.done[node] = out
        return out

    def _compute_kernel(self, node: UOp) -> UOp:
        shape, dtype = shape_of(node), node.dtype
        device = self.device.get(node) or self.default_device
        kernel = _KernelBuilder(self, self.index_dtype)
        out = new_buffer_uop(device, prod(shape), dtype)
        self.made.add(out)
        if prod(shape) == 0:  # no element to compute: no kernel (its loads could only read outside empty inputs)
            self.done[node] = out
            return out
        kernel.param(out)
        ranges = output_index(shape, kernel.idt)
        kernel.root, kernel.root_idx = node, ranges  # the kernel's own reduction always fuses
        value = kernel.lower(node.src[0] if node.op is Ops.CONTIGUOUS else node, ranges, None, direct=True)
        store = kernel.params[0].index(linear_index(ranges, shape, kernel.idt)).store(value)
        ast = UOp.sink(store)
        kind = "reduce" if any(n.op is Ops.REDUCE for n in ast.toposort) else "elementwise"
        self.items.append(ScheduleItem(ast, [uop_buffer(b) for b in kernel.param_bufs], device, kind,
                                       dict(kernel.var_vals), tuple(kernel.param_bufs)))
        self.done[node] = out
        return out


    def _custom_kernel(self, kernel: UOp) -> list[UOp]:
        """Schedule a hand-written kernel once: every input realized into a whole buffer, which the
        kernel may write in place; returns those buffers (see ``tgcore.custom``)."""
        if kernel in self.custom:
            return self.custom[kernel]
        bufs = [self.realize(s) for s in kernel.src]
        devices = {buffer_device(b) for b in bufs}
        if len(devices) != 1:
            raise ValueError(f"a custom kernel's buffers must be on one device, got {sorted(devices)}")
        params = [UOp(Ops.PARAM, b.dtype.ptr(b.arg), (), i) for i, b in enumerate(bufs)]
        program = build_program(kernel.arg, params)
        self.items.append(ScheduleItem(program, [uop_buffer(b) for b in bufs], devices.pop(), "custom"))
        self.custom[kernel] = bufs
        return bufs

    def _assign_kernel(self, node: UOp) -> UOp:
        """Write ``value`` into the buffer elements ``target`` views (in place; returns that buffer)."""
        target, value = node.src
        base = target
        while base.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP, Ops.INDEX):  # (INDEX: a take's table)
            base = base.src[0]
        base = self.cached(base) or self.done.get(base, base)
        if base.op is not Ops.BUFFER:
            raise ValueError("assign needs a target that is (a view of) a realized buffer; realize it first")
        shape = shape_of(target)
        device = buffer_device(base)
        kernel = _KernelBuilder(self, dtypes.int64 if base.arg > INT32_LIMIT else dtypes.int32)
        param = kernel.param(base)
        ranges = output_index(shape, kernel.idt)
        where = kernel.lower(target, ranges, None, direct=True)
        # (a take's index is gated to the table: an element whose index falls outside is not written)
        gated_ok = target.op is Ops.INDEX
        if where.op is not Ops.LOAD or len(where.src[0].src) != (3 if gated_ok else 2) or \
                where.src[0].src[0] is not param:
            raise ValueError("assign target must be a view of a buffer made by reshape/shrink/permute/flip, "
                             "or a take of one")
        index = where.src[0]
        overlapping = kernel.params_over(base)
        if gated_ok and any(u.op is Ops.INDEX and u.src[0] in overlapping for s in index.src[1:] for u in s.toposort):
            # a take's indices read the table it writes: a copy of them first, else an element written early moves
            # where a later one goes
            indices = target.src[1]
            staged = self.realize(UOp(Ops.CONTIGUOUS, indices.dtype, (indices,)))  # (a flat buffer: its shape back)
            staged = UOp(Ops.RESHAPE, staged.dtype, (staged,), shape_of(indices))
            written = self._assign_kernel(node.replace(src=(target.replace(src=(target.src[0], staged)), value)))
            self.done[node] = written
            return written
        kernel.root, kernel.root_idx = value, ranges
        result = kernel.lower(value, ranges, None, direct=True)
        # in place is safe when every read of the target buffer reads the element being written
        overlapping = kernel.params_over(base)
        if any(u.op is Ops.INDEX and u.src[0] in overlapping and u is not index for u in result.toposort):
            staged = self.realize(UOp(Ops.CONTIGUOUS, value.dtype, (value,)))  # read the old values from a copy
            kernel = _KernelBuilder(self, kernel.idt)
            param = kernel.param(base)
            index = kernel.lower(target, ranges, None, direct=True).src[0]
            result = kernel.load(staged, ranges, shape, None)
        ast = UOp.sink(index.store(result))
        kind = "reduce" if any(n.op is Ops.REDUCE for n in ast.toposort) else "elementwise"
        self.items.append(ScheduleItem(ast, [uop_buffer(b) for b in kernel.param_bufs], device, kind,
                                       dict(kernel.var_vals), tuple(kernel.param_bufs)))
        self.done[node] = base
        return base


class _KernelBuilder:
    """Lowers the nodes of one kernel; inputs become PARAM slots in order of first use."""

    def __init__(self, owner: Kernelizer, idt: DType) -> None:
        self.owner, self.idt = owner, idt
        self.params: list[UOp] = []
        self.param_bufs: list[UOp] = []
        self.slot: dict[UOp, int] = {}
        self.memo: dict[tuple[Any, ...], UOp] = {}
        self.reduce_count = 0
        self.var_vals: dict[str, int] = {}
        self.root: UOp | None = None
        self.root_idx: tuple[UOp, ...] = ()

    def unbind(self, expr: UOp) -> UOp:
        """``expr`` with each bound variable replaced by its DEFINE_VAR (the value becomes a kernel argument)."""
        binds = [u for u in expr.toposort if u.op is Ops.BIND]
        for b in binds:
            var, value = b.unbind()
            self.var_vals[var.arg[0]] = value
        return expr.substitute({b: b.src[0] for b in binds}) if binds else expr

    def params_over(self, base: UOp) -> set[UOp]:
        """The PARAMs so far whose buffers are (views of) memory that ``base``'s overlaps."""
        return {p for p, b in zip(self.params, self.param_bufs, strict=True) if REALIZATION.share_memory(b, base)}

    def param(self, buf: UOp) -> UOp:
        if buf not in self.slot:
            self.slot[buf] = len(self.params)
            self.param_bufs.append(buf)
            self.params.append(UOp(Ops.PARAM, buf.dtype.ptr(buf.arg), (), len(self.params)))
        return self.params[self.slot[buf]]

    def load(self, buf: UOp, idx: tuple[UOp, ...], shape: tuple[int, ...], gate: UOp | None) -> UOp:
        lin = linear_index(idx, shape, self.idt)
        p = self.param(buf)
        index = p.index(lin) if gate is None else p.index(lin, gate)
        return index.load()

    def lower(self, node: UOp, idx: tuple[UOp, ...], gate: UOp | None, direct: bool) -> UOp:
        key = (node, idx, gate, direct)
        if key not in self.memo:
            self.memo[key] = self._lower(node, idx, gate, direct)
        return self.memo[key]

    def _lower(self, node: UOp, idx: tuple[UOp, ...], gate: UOp | None, direct: bool) -> UOp:
        op, owner = node.op, self.owner
        if node in owner.done or owner.cached(node) is not None:
            return self.load(owner.realize(node), idx, shape_of(node), gate)
        if op is Ops.BUFFER:
            return self.load(node, idx, shape_of(node), gate)
        if op is Ops.CONST:
            return node
        if op is Ops.RANGE:  # tensor-level arange: the index along its only axis
            return idx[0] if idx[0].dtype is node.dtype else idx[0].cast(node.dtype)
        if op is Ops.DEFINE_VAR:
            return node
        if op is Ops.BIND:
            var, value = node.unbind()
            self.var_vals[var.arg[0]] = value
            return var
        if op in (Ops.CONTIGUOUS, Ops.COPY, Ops.AFTER):
            return self.load(owner.realize(node), idx, shape_of(node), gate)
        if op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.PAD):
            return self._movement(node, idx, gate, direct)
        if op is Ops.REDUCE_AXIS:
            if (direct and owner.used_once(node) and owner.read_only_by(node, self.root)) or (
                    node is self.root and idx is self.root_idx):
                return self._reduce(node, idx, gate)
            return self.load(owner.realize(node), idx, shape_of(node), gate)
        if op is Ops.DETACH:
            return self.lower(node.src[0], idx, gate, direct)
        if op is Ops.INDEX:  # Tensor.take: the table read at the index's value (a data-dependent load)
            at = self.lower(node.src[1], idx, gate, direct)
            at = at if at.dtype is self.idt else at.cast(self.idt)
            size = shape_of(node.src[0])[0]
            inside = (at >= 0) & (at < size)  # out of range reads 0, never outside the table
            return self.lower(node.src[0], (at,), inside if gate is None else gate & inside, False)
        # ALU, CAST, BITCAST: same index for every source
        src = tuple([self.lower(s, idx, gate, direct) for s in node.src])  # (a list: no C frame per level)
        return node.replace(src=src)

    def _movement(self, node: UOp, idx: tuple[UOp, ...], gate: UOp | None, direct: bool) -> UOp:
        src, op, arg = node.src[0], node.op, node.arg
        if src.op is Ops.CONST and op is not Ops.PAD:  # a broadcast constant is the same everywhere
            return src
        old = shape_of(src)
        if op is Ops.RESHAPE:
            return self.lower(src, reshape_index(idx, old, tuple(arg), self.idt), gate, direct)
        if op is Ops.EXPAND:
            new_idx = tuple(UOp.const(self.idt, 0) if o == 1 and n != 1 else i
                            for i, o, n in zip(idx, old, arg, strict=True))
            if self.owner.worth_realizing_before_expand(src, prod(arg) // max(1, prod(old))):
                return self.load(self.owner.realize(src), new_idx, old, gate)
            return self.lower(src, new_idx, gate, direct and tuple(old) == tuple(arg))
        if op is Ops.PERMUTE:
            inv = [0] * len(arg)
            for new_axis, old_axis in enumerate(arg):
                inv[old_axis] = new_axis
            return self.lower(src, tuple(idx[inv[a]] for a in range(len(arg))), gate, direct)
        if op is Ops.SHRINK:
            starts = [self.unbind(b) if isinstance(b, UOp) else b for b, _ in arg]
            return self.lower(src, tuple(i + (b.cast(i.dtype) if isinstance(b, UOp) and b.dtype != i.dtype else b)
                                         if not isinstance(b, int) or b else i
                                         for i, b in zip(idx, starts, strict=True)), gate, direct)
        if op is Ops.FLIP:
            return self.lower(src, tuple((s - 1) - i if f and s > 1 else i
                                         for i, f, s in zip(idx, arg, old, strict=True)), gate, direct)
        # PAD: shift, and only read where the index falls inside the source
        if any(s == 0 for s in old):
            return UOp.const(node.dtype, 0)
        valid: UOp | None = None
        shifted: list[UOp] = []
        for i, (b, _), s in zip(idx, arg, old, strict=True):
            j = i - b if b else i
            if j.vmin < 0:
                valid = _and(valid, j >= 0)
            if j.vmax >= s:
                valid = _and(valid, j < s)
            shifted.append(j)
        if valid is None:
            return self.lower(src, tuple(shifted), gate, direct)
        # a reduction under a padding gets a kernel of its own: fused, its loop would run at every output, padding
        # included (a concatenation of two products would compute both at every output of it)
        inner = self.lower(src, tuple(shifted), _and(gate, valid), direct=False)
        if _reads_zero_unless(inner, valid):  # (a select around it would pick between the load and its own 0.0)
            return inner
        return valid.where(inner, UOp.const(node.dtype, 0))

    def _reduce(self, node: UOp, idx: tuple[UOp, ...], gate: UOp | None) -> UOp:
        node = self.owner.packed(node)
        op, axes = node.arg
        src = node.src[0]
        in_shape = shape_of(src)
        new_idx, ranges = list(idx), []
        for a in axes:
            if in_shape[a] == 0:
                return UOp.const(node.dtype, _identity(op, node.dtype))
            if in_shape[a] == 1:
                new_idx[a] = UOp.const(self.idt, 0)
                continue
            r = UOp.range(in_shape[a], AxisArg(self.reduce_count, RangeKind.REDUCE), dtype=self.idt)
            self.reduce_count += 1
            new_idx[a] = r
            ranges.append(r)
        value = self.lower(src, tuple(new_idx), gate, direct=False)
        return value.reduce(*ranges, op=op) if ranges else value.from_identity(op)


def _widened_bytes(node: UOp, is_read: Callable[[UOp], bool]) -> bool:
    """Whether ``node`` (through reshapes and permutes) casts 8-bit integers to a wider integer, the bytes computed
    from what it reads by integer operations only: a byte dot's operand (a quantized weight's unpacked values). It
    stays fused into its product at any broadcast: the codegen multiplies it as bytes from the packed ones
    (``vpdpbusd``: 4 per lane and instruction), which a materialized copy (4 bytes a value, in another layout) would
    lose, and a row's sum keeps one kernel and one order however many rows share the weight (batch invariance: a
    materialization decided by the broadcast factor would change it with the batch). Materialized, a 576x1536 Q4_K
    integer product at 64 rows took 10.4 ms against 1.6 fused (one core). Float work rounded to bytes is no such
    operand: recomputed for every row it cost 70x (review), so it keeps the cost rule."""
    while node.op in (Ops.RESHAPE, Ops.PERMUTE):
        node = node.src[0]
    if not (node.op is Ops.CAST and dtypes.is_int(node.dtype) and dtypes.is_int(node.src[0].dtype)
            and node.src[0].dtype.itemsize == 1 < node.dtype.itemsize):
        return False
    stack, seen = [node.src[0]], set()
    while stack:
        n = stack.pop()
        if n in seen or is_read(n):
            continue
        seen.add(n)
        if dtypes.is_float(n.dtype):
            return False
        stack.extend(n.src)
    return True


def _identity(op: Ops, dtype: DType) -> Any:
    if op is Ops.ADD:
        return 0
    if op is Ops.MUL:
        return 1
    return dtype.min


@contextlib.contextmanager
def _deep_recursion(nodes: int) -> Iterator[None]:
    """Lowering recurses along the graph's longest path (a few Python frames per node): a long lazy chain
    needs more than Python's default limit. The calls are Python-to-Python, so they use no C stack."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 1000 + 4 * nodes))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def kernelize(outs: list[UOp], default_device: str) -> tuple[Kernelizer, dict[UOp, UOp]]:
    """Cut the graph of ``outs`` into kernels: the Kernelizer (its items and views) and each out's BUFFER uop."""
    rewritten = split_large_reductions(outs)
    sink = UOp.sink(*rewritten.values())
    k = Kernelizer(default_device, sink)
    with _deep_recursion(len(k.consumers)):
        return k, {u: k.realize(rewritten[u]) for u in outs}


def create_schedule(outs: list[UOp], default_device: str) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    """Kernels computing ``outs`` (in dependency order) and, for each out, its BUFFER uop.

    A graph whose structure was scheduled before reuses that schedule (``tgcore.schedule.cache``), also inside a
    JIT capture: there the realized cache is off, so the walk's leaves are BUFFERs only and every kernel runs."""
    from tgcore.schedule.cache import cached_schedule
    cached = cached_schedule(outs, default_device)
    if cached is not None:
        return cached
    k, result = kernelize(outs, default_device)
    return k.items, result

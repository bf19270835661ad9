"""UOp: the immutable, hash-consed node of the graph IR.

In:  an op (`Ops`), a dtype, a tuple of source UOps, a free-form hashable `arg` and an optional `tag`.
Out: a `UOp`. Building a UOp whose fields equal a live one returns that same object, so identity is
     structural equality: `a is b`, `a == b` and dict lookups are all cheap and agree.

Cached per node (computed iteratively, so a 200k-node chain is fine): `toposort`, `backward_slice`,
`ranges` (the RANGE loops a node depends on) and `vmin`/`vmax` (range analysis, see `bounds.py`).
Builders: Python operators (integer `//` and `%` truncate toward zero like C), `.alu`, `.cast`,
`.where`, `.maximum`, `UOp.const`, `UOp.variable`, `UOp.range`, ...; rewriting helpers `.replace`,
`.substitute`, `.simplify`; `.render()` gives a compact infix string for debugging.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tgcore.dtype import DType, dtypes, truncate
from tgcore.uop.axis import AxisArg
from tgcore.uop.mixins import ElementwiseMixin
from tgcore.uop.movement import MovementMixin
from tgcore.uop.ops import GroupOp, Ops
from tgcore.uop.reduction import ReductionMixin
from tgcore.uop.shape import shape_of

# ------------------------------------------------------------------------------------------------ interning

_interned: dict[tuple, weakref.ref] = {}
_INT_BOUNDS = {dt: (dt.min, dt.max) for dt in dtypes.fields().values() if dtypes.is_int(dt)}


def _arg_key(op: Ops, arg: Any) -> Any:
    """The part of the interning key that stands for `arg`.

    Floats need care: 0.0 == -0.0 and nan != nan in Python, but they are different constants.
    """
    if type(arg) is float:
        return (float, arg.hex())
    if op is Ops.VCONST and type(arg) is tuple:
        return tuple((float, a.hex()) if type(a) is float else a for a in arg)
    return arg


class _Ref(weakref.ref):
    """A weak reference that remembers its interning key, so the callback can drop the entry."""

    __slots__ = ("key",)
    key: tuple


def _forget(ref: weakref.ref) -> None:
    key = ref.key  # type: ignore[attr-defined]
    if _interned.get(key) is ref:
        del _interned[key]


class _UOpMeta(type):
    """Hash-consing: `UOp(...)` returns the live UOp with the same fields when there is one."""

    def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                 tag: Any = None) -> UOp:
        if type(src) is not tuple:
            src = tuple(src)
        key = (op, dtype, src, arg if type(arg) is not float and op is not Ops.VCONST else _arg_key(op, arg), tag)
        ref = _interned.get(key)
        if ref is not None and (found := ref()) is not None:
            return found
        u: UOp = object.__new__(cls)  # type: ignore[arg-type]
        _set_op(u, op)
        _set_dtype(u, dtype)
        _set_src(u, src)
        _set_arg(u, arg)
        _set_tag(u, tag)
        _set_readers(u, None)
        r = _Ref(u, _forget)
        r.key = key
        _interned[key] = r
        for s in src:  # (a node built on a watched one is one of its readers)
            if s.readers is not None:
                _add_reader(s.readers, u)
        return u


# ------------------------------------------------------------------------------------------------ readers

class Readers(list):
    """Weak references to the readers of a watched node (dead ones among them until pruned). ``changes`` is a
    one-element list counting the readers added to this node and to its views (they share it), so a watcher
    can tell that nothing new reads a node by comparing it with the count it saw (``mark``, its to set)."""

    __slots__ = ("changes", "mark", "limit")

    def __init__(self, changes: list[int]) -> None:
        super().__init__()
        self.changes = changes
        self.mark = -1
        self.limit = 64  # (prune the dead at this length; then at twice what is left: amortized O(1) per add)


def watch_readers(node: UOp) -> None:
    """From now on, keep (weakly) every node built with ``node`` as a source, and every object passed to
    ``add_reader(node, x)``: ``node.readers`` lists them. A view of a watched node (a movement op over it)
    is watched as well, so reads through views are found. Watch a node before anything reads it: nodes built on
    it earlier are not found."""
    if node.readers is None:
        _set_readers(node, Readers([0]))


def add_reader(node: UOp, reader: Any) -> None:
    """Record ``reader`` (anything weakly referable, e.g. a tensor whose node is ``node``) as reading a watched
    ``node``; nothing happens for a node nobody watches."""
    if node.readers is not None:
        _append(node.readers, reader)


def _append(readers: Readers, reader: Any) -> None:
    if len(readers) >= readers.limit:  # (graphs built and dropped again: forget the dead ones)
        readers[:] = [r for r in readers if r() is not None]
        readers.limit = max(64, 2 * len(readers))
    readers.append(weakref.ref(reader))
    readers.changes[0] += 1


def _add_reader(readers: Readers, u: UOp) -> None:
    """``u`` was built on a watched node (whose readers are ``readers``)."""
    _append(readers, u)
    if u.op in _VIEWS and u.readers is None:
        _set_readers(u, Readers(readers.changes))


_VIEWS = GroupOp.Movement


def _rebuild_graph(nodes: list[tuple]) -> UOp:
    """Unpickle: rebuild a graph from its flat toposorted form (no recursion)."""
    built: list[UOp] = []
    for op, dtype, src_idx, arg, tag in nodes:
        built.append(UOp(op, dtype, tuple(built[i] for i in src_idx), arg, tag))
    return built[-1]


def _fill_bottom_up(root: UOp, attr: str, compute: Callable[[UOp], Any]) -> Any:
    """Set `node.__dict__[attr] = compute(node)` for every node under `root` lacking it, sources first.

    Iterative, and it never caches a toposort on intermediate nodes, so it is linear in the new nodes.
    """
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        n, ready = stack.pop()
        d = n.__dict__
        if attr in d:
            continue
        if ready:
            d[attr] = compute(n)
            continue
        stack.append((n, True))
        for s in n.src:
            if attr not in s.__dict__:
                stack.append((s, False))
    return root.__dict__[attr]


_NO_RANGES: dict[UOp, None] = {}


def _ranges_of(u: UOp) -> dict[UOp, None]:
    # (read only: a node whose sources bring one set of loops shares that dict, most nodes of an index or a tile)
    if u.op not in (Ops.END, Ops.REDUCE, Ops.RANGE):
        only: dict[UOp, None] | None = None
        for s in u.src:
            d = s.__dict__["ranges"]
            if d and d is not only:
                if only is not None:
                    break
                only = d
        else:
            return _NO_RANGES if only is None else only
    out: dict[UOp, None] = {}
    for s in u.src:
        out.update(s.__dict__["ranges"])
    if u.op in (Ops.END, Ops.REDUCE):  # these close the loops listed after their first source
        for r in u.src[1:]:
            out.pop(r, None)
    elif u.op is Ops.RANGE:
        out[u] = None
    return out


# ------------------------------------------------------------------------------------------------ UOp

ConstType = bool | int | float


class UOp(ElementwiseMixin, MovementMixin, ReductionMixin, metaclass=_UOpMeta):
    """An immutable IR node. Construct with `UOp(op, dtype, src, arg, tag)`; equal fields give the same object."""

    # The five fields are slots because every pass reads them very often: CPython 3.11 reads a slot in ~7 ns,
    # but a field kept in a __dict__ that code fills directly (as caches must) in ~30 ns. Facts derived later
    # (toposort, ranges, bounds, normal-form marks, ...) stay in __dict__, where clear_derived_caches drops them.
    __slots__ = ("op", "dtype", "src", "arg", "tag", "readers", "__dict__", "__weakref__")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    tag: Any
    readers: Readers | None  # not a field: what reads a watched node (see watch_readers), None for most nodes

    if TYPE_CHECKING:  # construction goes through _UOpMeta.__call__; this only tells type checkers the signature
        def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                     tag: Any = None) -> None: ...

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("UOp is immutable; use .replace(...)")

    # -- the movement and reduction surface (MovementMixin, ReductionMixin): tensor-level nodes have shapes --

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of a tensor-level node (see `tgcore.uop.shape`; cached on the node)."""
        return shape_of(self)

    def _movement(self, op: Ops, arg: Any) -> UOp:
        if op is Ops.RESHAPE and self.op is Ops.RESHAPE and self.tag is None:  # a reshape of a reshape is one
            src = self.src[0]  # (not of a tagged node: a leaf's tag marks it for backward)
            return src if shape_of(src) == arg else UOp(Ops.RESHAPE, self.dtype, (src,), arg)
        return UOp(op, self.dtype, (self,), arg)

    def _reduce_axis(self, op: Ops, axes: tuple[int, ...]) -> UOp:
        return UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axes))

    @staticmethod
    def arange_node(n: int) -> UOp:
        """0, 1, ..., n-1 (int32) as a tensor-level node: the index of its single axis."""
        return UOp(Ops.RANGE, dtypes.int32, (), ("arange", n))

    def _arange(self, n: int) -> UOp:
        return UOp.arange_node(n)

    def __reduce__(self) -> tuple:
        index = {n: i for i, n in enumerate(self.toposort)}
        nodes = [(n.op, n.dtype, tuple(index[s] for s in n.src), n.arg, n.tag) for n in index]
        return (_rebuild_graph, (nodes,))

    def __copy__(self) -> UOp:
        return self

    def __deepcopy__(self, memo: dict) -> UOp:
        return self

    def __bool__(self) -> bool:
        """A bool UOp is truthy when it simplifies to a constant True; undecidable conditions raise."""
        if self.dtype is not dtypes.bool:
            raise TypeError(f"truth value of a {self.dtype!r} UOp is ambiguous; compare it or use `is not None`")
        folded = self.simplify()
        if folded.op is Ops.CONST:
            return bool(folded.arg)
        raise TypeError(f"cannot decide {self.render()} symbolically; use tgcore.uop.resolve(cond, default)")

    def __repr__(self) -> str:
        body = self.render() if len(self.toposort) <= 64 else f"<{len(self.toposort)} nodes>"
        arg = "" if self.arg is None else f", arg={self.arg!r}"
        return f"<UOp {self.op.name} {self.dtype!r}{arg}: {body}>"

    # -- cached graph facts --

    @property
    def toposort(self) -> dict[UOp, None]:
        """Every node this one depends on, and itself last; sources always come before their users.

        Returns a fresh dict. The cache on the node holds only the nodes *before* it: a node that held
        itself would be a reference cycle, and then its device buffers would wait for the cyclic garbage
        collector instead of being freed when the last tensor using them goes.
        """
        out = dict(self._slice())
        out[self] = None
        return out

    def _slice(self) -> dict[UOp, None]:
        d = self.__dict__
        if "_slice_cache" not in d:
            order: dict[UOp, None] = {}
            stack: list[tuple[UOp, bool]] = [(s, False) for s in reversed(self.src)]
            while stack:
                n, ready = stack.pop()
                if n in order:
                    continue
                if ready:
                    order[n] = None
                    continue
                stack.append((n, True))
                for s in reversed(n.src):
                    if s not in order:
                        stack.append((s, False))
            d["_slice_cache"] = order
        return d["_slice_cache"]

    @property
    def backward_slice(self) -> dict[UOp, None]:
        """Every node this one depends on (not itself), in toposort order."""
        return dict(self._slice())

    @property
    def ranges(self) -> dict[UOp, None]:
        """The RANGE loops this node depends on and that are still open here (not closed by END/REDUCE)."""
        d = self.__dict__
        if "ranges" in d:
            return d["ranges"]
        return _fill_bottom_up(self, "ranges", _ranges_of)

    @property
    def _min_max(self) -> tuple[ConstType, ConstType]:
        d = self.__dict__
        if "_mm" in d:
            return d["_mm"]
        from tgcore.uop.bounds import node_bounds
        return _fill_bottom_up(self, "_mm", node_bounds)

    @property
    def vmin(self) -> ConstType:
        """A lower bound of every value this node can take (exact for constants and variables)."""
        return self._min_max[0]

    @property
    def vmax(self) -> ConstType:
        """An upper bound of every value this node can take."""
        return self._min_max[1]

    # -- construction helpers --

    def replace(self, **kwargs: Any) -> UOp:
        """This node with some of op/dtype/src/arg/tag changed."""
        if len(kwargs) == 1 and "src" in kwargs:  # the common case, without building a dict
            return UOp(self.op, self.dtype, tuple(kwargs["src"]), self.arg, self.tag)
        fields = {"op": self.op, "dtype": self.dtype, "src": self.src, "arg": self.arg, "tag": self.tag}
        fields.update(kwargs)
        return UOp(fields["op"], fields["dtype"], tuple(fields["src"]), fields["arg"], fields["tag"])

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        """Replace every occurrence of each key by its value (values are not substituted again)."""
        new: dict[UOp, UOp] = {}
        for n in self.toposort:
            if n in mapping:
                new[n] = mapping[n]
                continue
            src = tuple([new[s] for s in n.src])
            new[n] = n if src == n.src else UOp(n.op, n.dtype, src, n.arg, n.tag)  # UOps compare by identity
        return new[self]

    def simplify(self) -> UOp:
        """Constant folding, identities and index-math folding (see `symbolic.py`)."""
        from tgcore.uop.rewrite import _spec_enabled, graph_rewrite
        from tgcore.uop.symbolic import settled_by_range, simplify_sum, symbolic
        if symbolic.fixed_point_key in self.__dict__:  # a normal form already (marked by an earlier rewrite)
            return self
        fast = simplify_sum(self)
        if fast is None:
            fast = settled_by_range(self)
        if fast is None:
            return graph_rewrite(self, symbolic, name="simplify")
        if _spec_enabled() and fast is not (slow := graph_rewrite(self, symbolic, name="simplify")):
            raise AssertionError(f"simplify({self.render()}) fast path gave {fast.render()}, the rules {slow.render()}")
        return fast

    def render(self) -> str:
        """A compact infix string, e.g. `((gidx0*4+lidx0)//3)`, for debugging."""
        from tgcore.uop.render import render_expr
        return render_expr(self)

    def variables(self) -> list[UOp]:
        """The DEFINE_VAR nodes this node depends on, sorted by name."""
        found = [n for n in self.toposort if n.op is Ops.DEFINE_VAR]
        return sorted(found, key=lambda v: v.arg)

    # -- constants and leaves --

    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        """A constant; the value is stored as `dtype` would hold it (ints wrap, floats round)."""
        if type(value) is int:  # fast path: an int already in the range of an int dtype
            bounds = _INT_BOUNDS.get(dtype)
            if bounds is not None and bounds[0] <= value <= bounds[1]:
                return UOp(Ops.CONST, dtype, (), value)
        if isinstance(value, UOp):
            return value
        if isinstance(value, tuple):
            return UOp(Ops.VCONST, dtype, (), tuple(truncate(dtype.scalar(), v) for v in value))
        return UOp(Ops.CONST, dtype, (), truncate(dtype.scalar(), value))

    def const_like(self, value: Any) -> UOp:
        """A constant with this node's dtype."""
        return UOp.const(self.dtype, value)

    def _shaped(self, shape: tuple[int, ...]) -> UOp:
        """This scalar (a CONST) broadcast to ``shape`` in the tensor graph: reshaped to ones, then expanded."""
        if not shape:
            return self
        out = UOp(Ops.RESHAPE, self.dtype, (self,), (1,) * len(shape))
        return UOp(Ops.EXPAND, self.dtype, (out,), shape) if any(s != 1 for s in shape) else out

    def _scalar_like(self, value: Any, dtype: DType | None = None) -> UOp:
        """A constant of this tensor-level node's shape (the shared formulas' constants, as a Tensor makes them)."""
        return UOp.const(self.dtype if dtype is None else dtype, value)._shaped(shape_of(self))

    @staticmethod
    def variable(name: str, lo: int, hi: int, dtype: DType = dtypes.int32) -> UOp:
        """A symbolic integer `name` known to lie in [lo, hi] (inclusive)."""
        if lo > hi:
            raise ValueError(f"variable {name!r}: empty range [{lo}, {hi}]")
        return UOp(Ops.DEFINE_VAR, dtype, (), (name, lo, hi))

    def bind(self, value: int) -> UOp:
        """Bind a DEFINE_VAR to a concrete value (a BIND node, used by the JIT)."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"only a DEFINE_VAR can be bound, not {self.op}")
        name, lo, hi = self.arg
        if not lo <= value <= hi:
            raise ValueError(f"value {value} for variable {name!r} is outside its range [{lo}, {hi}]")
        return UOp(Ops.BIND, self.dtype, (self, self.const_like(value)))

    def unbind(self) -> tuple[UOp, int]:
        """(the DEFINE_VAR, the bound value) of a BIND."""
        if self.op is not Ops.BIND:
            raise TypeError(f"unbind needs a BIND, not {self.op}")
        return self.src[0], self.src[1].arg

    @property
    def expr(self) -> str:
        """The name of a DEFINE_VAR."""
        return self.arg[0]

    @staticmethod
    def range(end: sint, arg: AxisArg, dtype: DType = dtypes.int32) -> UOp:
        """A loop counter 0 .. end-1; `arg` says which axis it walks and what kind of loop it is."""
        return UOp(Ops.RANGE, dtype, (_as_uop(end, dtype),), arg)

    @staticmethod
    def special(end: sint, name: str, dtype: DType = dtypes.int32) -> UOp:
        """A GPU grid/thread id `name` (e.g. "gidx0") in 0 .. end-1."""
        return UOp(Ops.SPECIAL, dtype, (_as_uop(end, dtype),), name)

    @staticmethod
    def sink(*srcs: UOp, arg: Any = None) -> UOp:
        return UOp(Ops.SINK, dtypes.void, srcs, arg)

    @staticmethod
    def group(*srcs: UOp) -> UOp:
        return UOp(Ops.GROUP, dtypes.void, srcs)

    def after(self, *deps: UOp) -> UOp:
        return UOp(Ops.AFTER, self.dtype, (self, *deps))

    def end(self, *ranges: UOp) -> UOp:
        return UOp(Ops.END, dtypes.void, (self, *ranges))

    def index(self, *idx: UOp, dtype: DType | None = None) -> UOp:
        return UOp(Ops.INDEX, self.dtype if dtype is None else dtype, (self, *idx))

    def load(self, *src: UOp, dtype: DType | None = None) -> UOp:
        base = self.dtype
        out = getattr(base, "base", base) if dtype is None else dtype
        return UOp(Ops.LOAD, out, (self, *src))

    def store(self, value: UOp) -> UOp:
        return UOp(Ops.STORE, dtypes.void, (self, value))

    def reduce(self, *ranges: UOp, op: Ops = Ops.ADD) -> UOp:
        return UOp(Ops.REDUCE, self.dtype, (self, *ranges), op)

    def from_identity(self, op: Ops) -> UOp:
        """``self``, a term a reduction with ``op`` combines with the others without an accumulator (over size-1
        axes, or unrolled), as if the reduction started from ``op``'s identity: a float sum adds +0.0, so a sum of
        -0.0s is +0.0 however it is lowered (as numpy and torch sum). Other reductions are unchanged."""
        return self + 0.0 if op is Ops.ADD and dtypes.is_float(self.dtype) else self

    def gep(self, *lanes: int) -> UOp:
        return UOp(Ops.GEP, self.dtype.scalar().vec(len(lanes)), (self,), tuple(lanes))

    @staticmethod
    def vectorize(*lanes: UOp) -> UOp:
        return UOp(Ops.VECTORIZE, lanes[0].dtype.vec(len(lanes)), lanes)

    # -- ALU builders --

    def alu(self, op: Ops, *src: UOp) -> UOp:
        """`op` applied to (self, *src); comparisons give bool, WHERE takes the dtype of its branches."""
        if op in GroupOp.Comparison:
            out = dtypes.bool.vec(self.dtype.count) if self.dtype.count > 1 else dtypes.bool
        elif op is Ops.WHERE:
            out = src[0].dtype
        else:
            out = self.dtype
        return UOp(op, out, (self, *src))

    def _operand(self, x: Any, what: Any) -> UOp:
        if isinstance(x, UOp):
            if x.dtype is not self.dtype:
                raise TypeError(f"dtype mismatch in {what}: {self.dtype!r} and {x.dtype!r}; .cast() one side")
            return x
        if isinstance(x, float) and not dtypes.is_float(self.dtype):
            raise TypeError(f"float constant {x!r} used with a {self.dtype!r} UOp in {what}; cast first")
        if not isinstance(x, (bool, int, float)):
            raise TypeError(f"cannot use {type(x).__name__} as an operand of {what}")
        return self.const_like(x)

    def _operands(self, x: Any, reverse: bool = False, op: Ops | None = None) -> tuple[UOp, UOp]:
        """UOps are typed exactly: the other operand must have this dtype (a Python scalar becomes a constant)."""
        other = self._operand(x, op)
        return (other, self) if reverse else (self, other)

    def _is_int(self) -> bool:
        return dtypes.is_int(self.dtype.scalar())

    def __neg__(self) -> UOp:
        if self.dtype.scalar() is dtypes.bool:
            return self.logical_not()
        return self * -1 if self._is_int() else self.alu(Ops.NEG)

    def __sub__(self, x: Any) -> UOp:
        other = self._operand(x, "SUB")
        return self + (-other) if self._is_int() else self.alu(Ops.SUB, other)

    def __rsub__(self, x: Any) -> UOp:
        return self._operand(x, "SUB") - self

    def _need_int(self, what: str) -> None:
        if not self._is_int():
            raise TypeError(f"{what} needs an integer UOp, got {self.dtype!r}")

    def __floordiv__(self, x: Any) -> UOp:
        """Integer division truncating toward zero (C semantics, not Python's floor)."""
        self._need_int("//")
        return self._binop(Ops.IDIV, x)

    def __rfloordiv__(self, x: Any) -> UOp:
        self._need_int("//")
        return self._binop(Ops.IDIV, x, True)

    def __mod__(self, x: Any) -> UOp:
        """Integer remainder with the sign of the dividend (C semantics, not Python's)."""
        self._need_int("%")
        return self._binop(Ops.MOD, x)

    def __rmod__(self, x: Any) -> UOp:
        self._need_int("%")
        return self._binop(Ops.MOD, x, True)

    def __truediv__(self, x: Any) -> UOp:
        if not dtypes.is_float(self.dtype.scalar()):
            raise TypeError(f"/ needs a float UOp, got {self.dtype!r}; use // for C integer division")
        return self._binop(Ops.FDIV, x)

    def __rtruediv__(self, x: Any) -> UOp:
        return self._operand(x, "FDIV") / self

    def __le__(self, x: Any) -> UOp:  # type: ignore[override]
        return self._binop(Ops.CMPLT, x, True).logical_not()

    def __ge__(self, x: Any) -> UOp:  # type: ignore[override]
        return self._binop(Ops.CMPLT, x).logical_not()

    def __rlshift__(self, x: Any) -> UOp:
        return self._binop(Ops.SHL, x, True)

    def __rrshift__(self, x: Any) -> UOp:
        return self._binop(Ops.SHR, x, True)

    def where(self, a: Any, b: Any) -> UOp:
        """`a` where this bool is true, else `b`."""
        if isinstance(a, UOp):
            return self.alu(Ops.WHERE, a, a._operand(b, "WHERE"))
        if isinstance(b, UOp):
            return self.alu(Ops.WHERE, b._operand(a, "WHERE"), b)
        dt = dtypes.from_py(a)  # two Python scalars: the dtype of the first (bool, default int or float)
        return self.alu(Ops.WHERE, UOp.const(dt, a), UOp.const(dt, b))

    def minimum(self, x: Any) -> UOp:
        """min(a, b) as -max(-a, -b), which keeps range analysis exact."""
        return -((-self).maximum(-self._operand(x, "min")))

    def cast(self, dtype: DType) -> UOp:
        return self if dtype is self.dtype else UOp(Ops.CAST, dtype, (self,))

    def bitcast(self, dtype: DType) -> UOp:
        return self if dtype is self.dtype else UOp(Ops.BITCAST, dtype, (self,))


# ------------------------------------------------------------------------------------------------ helpers

sint = int | UOp  # a size that may be symbolic


def _as_uop(x: sint, dtype: DType) -> UOp:
    return x if isinstance(x, UOp) else UOp.const(dtype, x)


def consumer_map(root: UOp) -> dict[UOp, list[UOp]]:
    """For every node under `root`, the nodes that use it as a source (in toposort order)."""
    users: dict[UOp, list[UOp]] = {n: [] for n in root.toposort}
    for n in root.toposort:
        for s in dict.fromkeys(n.src):
            users[s].append(n)
    return users


def clear_derived_caches() -> int:
    """Drop every fact cached on live nodes (toposort, ranges, bounds, normal-form marks, ...), as if each
    node were new; benchmarks call it so each kernel compiles like a never-seen one. Returns the node count."""
    count = 0
    for ref in list(_interned.values()):
        u = ref()
        if u is None:
            continue
        u.__dict__.clear()  # only derived facts live there; the fields are slots
        count += 1
    return count


def all_nodes(roots: Iterable[UOp]) -> dict[UOp, None]:
    """The union of the toposorts of several roots, in a valid order."""
    out: dict[UOp, None] = {}
    for r in roots:
        out.update(r.toposort)
    return out


# UOp.__setattr__ refuses every write, so _UOpMeta sets the fields once through the slot descriptors themselves.
_set_op, _set_dtype, _set_src, _set_arg, _set_tag, _set_readers = (
    UOp.__dict__[f].__set__ for f in ("op", "dtype", "src", "arg", "tag", "readers"))

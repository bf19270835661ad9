"""UOp: hash-consing, immutability, builders, cached graph facts, pickling, rendering."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref

import pytest

from tgcore.dtype import dtypes
from tgcore.uop import AxisArg, GroupOp, Ops, RangeKind, UOp, consumer_map


def test_hash_consing_gives_the_same_object():
    x = UOp.variable("x", 0, 10)
    assert UOp.variable("x", 0, 10) is x
    assert (x + 1) is (x + 1)
    assert (x + 1) is not (x + 2)
    assert UOp.variable("x", 0, 11) is not x
    assert {x + 1: "a"}[x + 1] == "a"


def test_float_constants_keep_sign_of_zero_and_nan():
    pz, nz = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.float32, -0.0)
    assert pz is not nz
    assert UOp.const(dtypes.float32, float("nan")) is UOp.const(dtypes.float32, float("nan"))
    assert UOp.const(dtypes.int32, 0) is not pz


def test_const_is_stored_as_the_dtype_holds_it():
    assert UOp.const(dtypes.int8, 200).arg == -56
    assert UOp.const(dtypes.uint8, -1).arg == 255
    assert UOp.const(dtypes.float16, 1e6).arg == float("inf")
    assert type(UOp.const(dtypes.float32, 1).arg) is float
    assert UOp.const(dtypes.bool, 3).arg is True


def test_unused_nodes_are_freed():
    x = UOp.variable("freed", 0, 3)
    ref = weakref.ref(x * 12345)
    gc.collect()
    assert ref() is None
    assert (x * 12345).src[1].arg == 12345


def test_immutable():
    x = UOp.variable("x", 0, 10)
    with pytest.raises(AttributeError):
        x.arg = 3  # type: ignore[misc]
    assert copy.copy(x) is x and copy.deepcopy(x + 1) is x + 1


def test_operators_and_reverse_operators():
    x = UOp.variable("x", 0, 10)
    assert (3 + x).op is Ops.ADD and (3 + x).src[0].arg == 3
    assert (x * 2).op is Ops.MUL and (2 * x).src == (x.const_like(2), x)
    assert (x // 2).op is Ops.IDIV and (x % 3).op is Ops.MOD
    assert (x < 3).dtype is dtypes.bool and (x < 3).op is Ops.CMPLT
    assert (x > 3).src == (x.const_like(3), x)
    assert x.ne(3).op is Ops.CMPNE and x.eq(3).op is Ops.CMPEQ
    for op, fn in [(Ops.AND, lambda a: a & 3), (Ops.OR, lambda a: a | 3), (Ops.XOR, lambda a: a ^ 3),
                   (Ops.SHL, lambda a: a << 1), (Ops.SHR, lambda a: a >> 1)]:
        assert fn(x).op is op
    assert (10 - x).render() == "(10-x)"
    assert (-x).render() == "(-x)" and (-x).op is Ops.MUL
    assert (x < 3).where(x, 2).op is Ops.WHERE and (x < 3).where(2, x).src[1].arg == 2
    assert x.maximum(4).op is Ops.MAX
    assert x.cast(dtypes.int64).dtype is dtypes.int64 and x.cast(dtypes.int32) is x
    assert x.bitcast(dtypes.float32).op is Ops.BITCAST
    assert x.alu(Ops.CMPLT, x).dtype is dtypes.bool
    f = UOp.variable("f", 0, 1).cast(dtypes.float32)
    assert (-f).op is Ops.NEG and (f - 1.0).op is Ops.SUB and (f / 2.0).op is Ops.FDIV


def test_builder_errors_are_clear():
    x = UOp.variable("x", 0, 10)
    y = UOp.variable("y", 0, 10, dtypes.int64)
    with pytest.raises(TypeError, match="dtype mismatch"):
        x + y
    with pytest.raises(TypeError, match="float constant"):
        x * 0.5
    with pytest.raises(TypeError, match="integer"):
        x.cast(dtypes.float32) // 2
    with pytest.raises(ValueError, match="empty range"):
        UOp.variable("z", 3, 2)
    with pytest.raises(TypeError, match="ambiguous"):
        bool(x)
    with pytest.raises(TypeError, match="cannot decide"):
        bool(x < 5)
    assert bool(x < 11) and not bool(x < 0)


def test_bind_and_unbind():
    n = UOp.variable("n", 1, 64)
    b = n.bind(7)
    assert b.op is Ops.BIND and b.unbind() == (n, 7)
    with pytest.raises(ValueError, match="outside"):
        n.bind(100)
    with pytest.raises(TypeError):
        (n + 1).bind(3)


def test_toposort_backward_slice_and_consumers():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    a = x + y
    b = a * a
    order = list(b.toposort)
    assert order[-1] is b and set(order) == {x, y, a, b}
    for n in order:
        assert all(order.index(s) < order.index(n) for s in n.src)
    assert b not in b.backward_slice and a in b.backward_slice
    users = consumer_map(b)
    assert users[a] == [b] and users[x] == [a] and users[b] == []


def test_ranges_open_and_closed():
    r0 = UOp.range(4, AxisArg(0, RangeKind.GLOBAL))
    r1 = UOp.range(8, AxisArg(1, RangeKind.GLOBAL))
    idx = r0 * 8 + r1
    assert set(idx.ranges) == {r0, r1}
    red = idx.reduce(r1)
    assert set(red.ranges) == {r0}
    assert set(red.end(r0).ranges) == set()
    inner = UOp.range(r0 + 1, AxisArg(2, RangeKind.GLOBAL))  # a range whose end depends on an outer one
    assert set(inner.ranges) == {r0, inner}
    assert r0.vmin == 0 and r0.vmax == 3


def test_replace_and_substitute():
    x, y = UOp.variable("x", 0, 10), UOp.variable("y", 0, 10)
    e = (x + 1) * x
    assert e.substitute({x: y}) is (y + 1) * y
    assert e.replace(op=Ops.ADD) is UOp(Ops.ADD, dtypes.int32, e.src)
    assert e.substitute({}) is e


def test_pickle_keeps_identity_and_handles_deep_graphs():
    x = UOp.variable("x", 0, 10)
    e = ((x * 4 + 3) // 2) % 5
    assert pickle.loads(pickle.dumps(e)) is e
    deep = x
    for i in range(50_000):
        deep = deep + (i % 7)
    assert pickle.loads(pickle.dumps(deep)) is deep


def test_render_is_compact():
    g, l = UOp.special(16, "gidx0"), UOp.special(4, "lidx0")
    assert ((g * 4 + l) // 3).render() == "(((gidx0*4)+lidx0)//3)"
    x = UOp.variable("x", 0, 10)
    assert x.minimum(5).render() == "min(x, 5)"
    assert (x < 3).where(x, 1).render() == "((x<3) ? x : 1)"
    assert x.cast(dtypes.int64).render() == "int64(x)"
    assert "x" in repr(x + 1)


def test_groups_are_consistent():
    assert GroupOp.Commutative <= GroupOp.Binary
    assert GroupOp.Comparison <= GroupOp.Binary
    assert GroupOp.ALU == GroupOp.Unary | GroupOp.Binary | GroupOp.Ternary
    assert not (GroupOp.Unary & GroupOp.Binary)
    assert Ops.SUB not in GroupOp.Commutative and Ops.RESHAPE in GroupOp.Movement


def test_deep_chain_facts_are_iterative():
    x = UOp.variable("x", 0, 1)
    e = x
    for _ in range(200_000):
        e = e + 1
    assert len(e.toposort) > 200_000
    assert e.vmin == 200_000 and e.vmax == 200_001
    assert e.ranges == {}


def test_readers_of_a_watched_node_and_its_views():
    """watch_readers: nodes built on a watched node or on a view of it are its readers (weakly: the dead are
    dropped as the list grows, so it stays bounded by the live ones); ``changes`` counts additions to both."""
    import gc

    from tgcore.uop.uop import add_reader, watch_readers
    buf = UOp(Ops.BUFFER, dtypes.float32, (UOp(Ops.UNIQUE, dtypes.void, (), "readers-test"),
                                          UOp(Ops.DEVICE, dtypes.void, (), "CPU")), 8)
    assert buf.readers is None
    watch_readers(buf)
    view = UOp(Ops.RESHAPE, dtypes.float32, (buf,), (2, 4))
    assert [r() for r in buf.readers] == [view] and view.readers is not None  # a view is watched in turn
    before = buf.readers.changes[0]
    kept = [UOp(Ops.ADD, dtypes.float32, (view, UOp.const(dtypes.float32, float(i)))) for i in range(3)]
    for i in range(1000):  # readers built and dropped again
        UOp(Ops.MUL, dtypes.float32, (view, UOp.const(dtypes.float32, float(i))))
    gc.collect()
    assert view.readers.changes is buf.readers.changes and buf.readers.changes[0] == before + 1003
    assert {r() for r in view.readers} - {None} == set(kept) and len(view.readers) <= 2 * len(kept) + 64

    class Holder:
        pass
    h = Holder()
    add_reader(view, h)
    assert view.readers[-1]() is h and buf.readers.changes[0] == before + 1004
    unwatched = UOp.const(dtypes.float32, 1.0)
    add_reader(unwatched, h)  # (nothing happens for a node nobody watches)
    assert unwatched.readers is None

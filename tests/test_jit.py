"""tgcore.jit: replays give the same results as plain calls, compile nothing, and key on input signatures."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import tgcore
from tgcore.engine.jit import JitError
from tgcore.engine.realize import CompileCounter
from tgcore.engine.stats import GlobalCounters, KernelTimes
from tgcore.runtime.buffer import Buffer
from tgcore.runtime.cpu import native_pool
from tgcore.tensor import Tensor
from tgcore.uop import UOp


def model(x: Tensor, w: Tensor) -> Tensor:
    """About 20 kernels: a small stack of matmul + softmax layers."""
    for _ in range(5):
        y = x @ w
        e = (y - y.max(1, keepdim=True)).exp()
        x = e / e.sum(1, keepdim=True)
    return x


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    for _ in range(5):
        y = x @ w
        e = np.exp(y - y.max(1, keepdims=True))
        x = e / e.sum(1, keepdims=True)
    return x


def test_replay_matches_plain_calls_and_compiles_nothing():
    f = tgcore.jit(model)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    tw = Tensor(w)
    for i in range(6):
        x = rng.standard_normal((8, 16)).astype(np.float32)
        before_compiles, before_kernels = CompileCounter.count, GlobalCounters.kernel_count
        out = f(Tensor(x), tw).numpy()
        np.testing.assert_allclose(out, reference(x, w), rtol=1e-5, atol=1e-6)
        if i >= 2:  # replays
            assert CompileCounter.count == before_compiles
            assert GlobalCounters.kernel_count - before_kernels >= 10  # the kernels really ran
    assert len(f.captures) == 1


def test_capture_first_captures_on_the_first_call_and_replays_from_the_second():
    f = tgcore.jit(model, capture_first=True)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    tw = Tensor(w)  # (the state the function reads exists before its first call)
    tw.realize()
    for i in range(4):
        x = rng.standard_normal((8, 16)).astype(np.float32)
        before_compiles, before_kernels = CompileCounter.count, GlobalCounters.kernel_count
        out = f(Tensor(x), tw).numpy()
        np.testing.assert_allclose(out, reference(x, w), rtol=1e-5, atol=1e-6)
        assert len(f.captures) == 1  # captured by the first call
        if i >= 1:  # replays
            assert CompileCounter.count == before_compiles
            assert GlobalCounters.kernel_count - before_kernels >= 10


def test_a_timed_replay_reports_each_kernel_of_the_plain_call():
    """Under KernelTimes.record a replay reports the kernels a plain call runs, in order, with their times, and
    still counts them and computes the same result."""
    rng = np.random.default_rng(2)
    w, x = rng.standard_normal((16, 16)).astype(np.float32), rng.standard_normal((8, 16)).astype(np.float32)
    tw = Tensor(w)
    with KernelTimes.record() as plain:
        model(Tensor(x), tw).realize()
    f = tgcore.jit(model)
    for _ in range(2):
        f(Tensor(x), tw)
    before = GlobalCounters.kernel_count
    with KernelTimes.record() as replayed:
        out = f(Tensor(x), tw).numpy()
    np.testing.assert_allclose(out, reference(x, w), rtol=1e-5, atol=1e-6)
    assert [k.name for k in replayed] == [k.name for k in plain] and len(plain) >= 10
    assert GlobalCounters.kernel_count - before == len(replayed)
    assert all(k.seconds >= 0 for k in replayed)
    recorded, before = len(replayed), GlobalCounters.kernel_count
    f(Tensor(x), tw).realize()  # outside the recording: it runs, and nothing is added to what was recorded
    assert GlobalCounters.kernel_count - before == len(plain) and len(replayed) == recorded


def test_new_shapes_capture_again_and_never_replay_the_wrong_kernels():
    f = tgcore.jit(lambda a, b: (a * b).sum(0))
    rng = np.random.default_rng(1)
    for shape in [(4, 3), (4, 3), (4, 3), (5, 2), (5, 2), (5, 2), (4, 3)]:
        a, b = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), (a * b).sum(0), rtol=1e-5)
    assert len(f.captures) == 2
    f_int = tgcore.jit(lambda a: a + 1)
    for _ in range(3):
        assert f_int(Tensor([1, 2, 3])).tolist() == [2, 3, 4]
    assert f_int(Tensor([1.5, 2.5])).tolist() == [2.5, 3.5]  # a different dtype: not the int capture


def test_symbolic_variable_compiles_once_over_50_values():
    v = UOp.variable("start_pos", 0, 4095)
    f = tgcore.jit(lambda x, pos: x * Tensor(pos).float() + 1.0)
    x = Tensor(np.arange(4, dtype=np.float32))
    f(x, v.bind(0))  # warm-up compiles
    before = CompileCounter.count
    for p in range(1, 51):
        np.testing.assert_array_equal(f(x, v.bind(p)).numpy(), np.arange(4, dtype=np.float32) * p + 1)
    assert CompileCounter.count == before


def test_inputs_may_be_lazy_or_views():
    f = tgcore.jit(lambda a: a * 2)
    base = np.arange(12, dtype=np.float32)
    for k in range(4):
        t = Tensor(base + k).reshape(3, 4).permute(1, 0)  # a lazy, non-contiguous input
        np.testing.assert_array_equal(f(t).numpy(), (base + k).reshape(3, 4).T * 2)


def test_outputs_are_overwritten_by_the_next_replay_unless_copied():
    f = tgcore.jit(lambda a: a + 1)
    for _ in range(2):
        f(Tensor([0.0]))
    first = f(Tensor([1.0]))
    kept = first.numpy()
    f(Tensor([5.0]))
    assert kept.tolist() == [2.0]
    copies = [f(Tensor([float(i)])).contiguous().realize() for i in range(4)]  # the copy the module docs name
    assert [c.numpy().tolist() for c in copies] == [[1.0], [2.0], [3.0], [4.0]]  # (was a view: all [4.0])


def test_random_numbers_are_fresh_on_every_replay_and_compile_once():
    f = tgcore.jit(lambda a: (Tensor.rand(*a.shape) > 0.5).where(a, 0.0))
    x = Tensor(np.ones(64, np.float32))
    f(x)
    f(x)
    before = CompileCounter.count
    masks = [f(x).numpy().copy() for _ in range(4)]
    assert CompileCounter.count == before
    assert len({m.tobytes() for m in masks}) == 4  # a different draw each call
    Tensor.manual_seed(3)
    first = [Tensor.rand(8).numpy() for _ in range(2)]
    Tensor.manual_seed(3)
    again = [Tensor.rand(8).numpy() for _ in range(2)]
    np.testing.assert_array_equal(first, again)



@pytest.fixture(params=["CPU", "PYTHON"])
def device(request) -> str:
    """CPU replays through one NativeGraph call (when the native pool is there), PYTHON kernel by kernel."""
    return request.param


def _check_replay_path(f, device: str) -> None:
    graphs = [c.graph is not None for c in f.captures.values()]
    assert graphs and all(graphs) == (device == "CPU" and native_pool() is not None)


def test_inputs_at_a_byte_offset_into_a_bigger_buffer(device):
    """Inputs that are slices of one realized buffer are views at byte offsets into it (not copies); a replay
    reads each input's own bytes, wherever the next call's inputs sit."""
    f = tgcore.jit(lambda a, b: a * 2 + b)
    rng = np.random.default_rng(2)
    for lo in [4, 0, 12, 8, 20, 3]:  # a different offset every call; both inputs in one buffer
        big = rng.standard_normal(40).astype(np.float32)
        t = Tensor(big, device=device).realize()
        a, b = t[lo:lo + 8], t[lo + 8:lo + 16]
        np.testing.assert_array_equal(f(a, b).numpy(), big[lo:lo + 8] * 2 + big[lo + 8:lo + 16])
    other = rng.standard_normal((2, 8)).astype(np.float32)  # then inputs in buffers of their own
    np.testing.assert_array_equal(f(Tensor(other[0], device=device), Tensor(other[1], device=device)).numpy(),
                                  other[0] * 2 + other[1])
    big = rng.standard_normal(40).astype(np.float32)  # and back to one buffer, the other way round
    t = Tensor(big, device=device).realize()
    np.testing.assert_array_equal(f(t[20:28], t[2:10]).numpy(), big[20:28] * 2 + big[2:10])
    _check_replay_path(f, device)


def test_a_slice_of_an_input_inside_the_function(device):
    """A kernel argument that is part of an input (a slice the function took, a view at a byte offset into the
    input) follows the input on replay."""
    f = tgcore.jit(lambda a: a[2:6].realize() * 2 + a[4:8].realize())  # (a realized slice: a view of a)
    rng = np.random.default_rng(3)
    for lo in [0, 5, 1, 7]:
        big = rng.standard_normal(20).astype(np.float32)
        x = big[lo:lo + 10]
        np.testing.assert_array_equal(f(Tensor(big, device=device).realize()[lo:lo + 10]).numpy(),
                                      x[2:6] * 2 + x[4:8])
    offsets = {offset for c in f.captures.values() for p in c.plan for _, _, offset, _ in p.inputs}
    assert offsets == {8, 16}
    _check_replay_path(f, device)


def test_one_tensor_in_several_argument_slots(device):
    """A capture made with one tensor in two slots is not replayed for two different tensors (it would read
    the first for both), and the other way round."""
    f = tgcore.jit(lambda a, b: a * 3 - b)
    x = np.arange(6, dtype=np.float32)
    tx = Tensor(x, device=device)
    for _ in range(3):
        np.testing.assert_array_equal(f(tx, tx).numpy(), x * 3 - x)
    for k in range(3):
        y, z = x + k, x * (k + 2)
        np.testing.assert_array_equal(f(Tensor(y, device=device), Tensor(z, device=device)).numpy(), y * 3 - z)
        tz = Tensor(z, device=device)
        np.testing.assert_array_equal(f(tz, tz).numpy(), z * 3 - z)
    assert len(f.captures) == 2
    _check_replay_path(f, device)


def test_a_variable_bound_inside_the_function_is_named(device):
    """The replay takes variable values from the arguments only; one bound inside the function has none."""
    v = UOp.variable("n", 0, 9)
    f = tgcore.jit(lambda x: x + Tensor(v.bind(2), device=x.device).float())
    x = Tensor(np.zeros(3, np.float32), device=device)
    for _ in range(2):
        np.testing.assert_array_equal(f(x).numpy(), [2] * 3)
    with pytest.raises(JitError, match="needs variable 'n', which this call did not bind"):
        f(x)


def test_a_capture_keeps_the_buffers_its_kernels_use(device):
    """A replay passes the captured intermediate and output buffers by handle: the capture must keep those
    buffers alive, else their memory goes back to the allocator and is handed to the next tensor."""
    f = tgcore.jit(lambda a: ((a * 2).contiguous() + 1).sum())
    x = Tensor(np.ones(256, np.float32), device=device)
    for _ in range(3):
        assert f(x).item() == 768
    gc.collect()
    live = [b._handle for b in gc.get_objects() if isinstance(b, Buffer) and b.is_allocated()]
    plan = next(iter(f.captures.values())).plan
    handles = [a for p in plan for a in p.args if a is not None]
    assert handles and all(any(h is a for h in live) for a in handles)
    others = [Tensor(np.full(256, 7, np.float32), device=device).realize() for _ in range(4)]
    assert f(x).item() == 768 and others[0].numpy()[0] == 7


# ---------------------------------------------------------------- lazy assign inside and around a capture

def test_a_function_reading_a_value_before_and_after_assigning_it():
    """The old value is read after the write ran (one realize reads both): the copy kept for it is part of the
    capture, so replays read the values from before each call's write, as the plain calls do."""
    from tgcore.schedule.state import REALIZATION
    w = Tensor(np.zeros(4, np.float32))

    @tgcore.jit
    def step(g: Tensor) -> Tensor:
        old = w * 1
        w.assign(w + g)
        return old + w * 10

    ref_w = np.zeros(4, np.float32)
    copies = REALIZATION.preserved
    for i in range(6):
        g = np.arange(4, dtype=np.float32) + i
        out = step(Tensor(g)).numpy()
        np.testing.assert_allclose(out, ref_w + (ref_w + g) * 10)
        ref_w = ref_w + g
    np.testing.assert_array_equal(w.numpy(), ref_w)
    assert REALIZATION.preserved - copies == 2  # the plain call and the capture; replays copy in a kernel


def test_a_write_nothing_reads_is_still_captured():
    w = Tensor(np.zeros(3, np.float32))

    @tgcore.jit
    def step(g: Tensor) -> Tensor:
        w.assign(w - g)
        return g * 2

    for i in range(5):
        np.testing.assert_array_equal(step(Tensor(np.full(3, i, np.float32))).numpy(), np.full(3, 2.0 * i))
    np.testing.assert_array_equal(w.numpy(), np.full(3, -10.0))


def test_an_assign_before_a_call_is_not_captured():
    scale = Tensor(np.ones(1, np.float32))

    @tgcore.jit
    def f(x: Tensor) -> Tensor:
        return x * scale

    x = np.arange(3, dtype=np.float32)
    for i in range(5):
        scale.assign(Tensor(np.full(1, i + 1, np.float32)))  # pending until the call reads it
        np.testing.assert_array_equal(f(Tensor(x)).numpy(), x * (i + 1))



def test_an_assign_into_a_fresh_empty_input_writes_each_calls_input():
    """A function that assigns its result into an output tensor passed in (a caller's preallocated result): each
    call's own tensor gets the values, also when it is a ``Tensor.empty`` whose memory was not allocated yet."""
    @tgcore.jit
    def f(x: Tensor, out: Tensor) -> None:
        out.assign(x * 2)

    for i in range(5):
        out = Tensor.empty(4, dtype="float32")
        f(Tensor(np.full(4, i, np.float32)), out)
        np.testing.assert_array_equal(out.numpy(), np.full(4, 2.0 * i), err_msg=f"call {i}")

def chain(x: Tensor, w: Tensor) -> Tensor:
    """Intermediates of one size whose lives overlap (``a`` is read again after ``b`` and ``c`` are made), then a
    stack of layers whose intermediates die one after another."""
    a = (x @ w).contiguous().realize()
    b = (a * 2 + 1).contiguous().realize()
    c = (b.exp() * 0.01).contiguous().realize()
    x = (a + b - c).contiguous().realize()
    for _ in range(6):
        x = ((x @ w).tanh() + x).contiguous().realize()
    return x


def chain_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    a = x @ w
    b = a * 2 + 1
    x = a + b - np.exp(b) * 0.01
    for _ in range(6):
        x = np.tanh(x @ w) + x
    return x


def test_replays_share_scratch_memory_and_still_match():
    """The buffers a capture allocates and does not return are shared by intermediates whose lives do not
    overlap: a replay keeps fewer than one buffer per intermediate, and still matches numpy on new inputs (an
    intermediate read after others of its size were made keeps its own memory)."""
    f = tgcore.jit(chain)
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((16, 16)) * 0.2).astype(np.float32)
    tw = Tensor(w)
    for _ in range(5):
        x = (rng.standard_normal((8, 16)) * 0.2).astype(np.float32)
        np.testing.assert_allclose(f(Tensor(x), tw).numpy(), chain_reference(x, w), rtol=1e-4, atol=1e-5)
    (capture,) = f.captures.values()
    scratch = {id(b.base) for step in capture.plan for b in step.bufs if b.nbytes == 8 * 16 * 4}
    assert len(scratch) < 10  # 11 intermediates and the output, each 8x16 floats


def test_the_capturing_calls_intermediates_are_freed_not_cached():
    """The intermediates of the call a capture is made in (the replays have scratch memory of their own) go back to
    the device once dropped, not to its freed-buffer cache (a server's warm-ups cached GBs of them)."""
    f = tgcore.jit(chain, capture_first=True)
    rng = np.random.default_rng(7)
    x = Tensor((rng.standard_normal((8, 24)) * 0.2).astype(np.float32))
    w = Tensor((rng.standard_normal((24, 24)) * 0.2).astype(np.float32))
    x.realize(), w.realize()
    allocator = tgcore.Device(x.device).allocator
    size = 8 * 24 * 4  # (every intermediate's)

    def cached() -> int:
        return sum(len(handles) for (nbytes, _), handles in allocator.cache.items() if nbytes == size)
    before = cached()
    out = f(x, w)  # (the capture)
    np.testing.assert_allclose(out.numpy(), chain_reference(x.numpy(), w.numpy()), rtol=1e-4, atol=1e-5)
    gc.collect()
    assert f.captures and cached() == before


def test_lazy_tensors_built_before_a_replay_keep_their_values():
    """A replay writes in place like a plain call's assign does: lazy tensors built before a call from memory the
    call writes (a state tensor, or an input the function assigns into) see the values they were built against,
    not the values after the call; the written tensors themselves see the new values."""
    from tgcore.schedule.state import REALIZATION
    w = Tensor(np.zeros(4, np.float32))
    ref_w = np.zeros(4, np.float32)

    @tgcore.jit
    def step(g: Tensor, acc: Tensor) -> Tensor:
        w.assign(w + g)
        acc.assign(acc * 2)
        return g * 1

    acc = Tensor(np.ones(4, np.float32))
    ref_acc = np.ones(4, np.float32)
    for i in range(6):
        before_w, before_acc = w * 3 + 1, acc - 0.5  # lazy, built against the values now
        other_view = w.reshape(2, 2)[1] * 1  # reads the memory through a node of its own
        g = np.arange(4, dtype=np.float32) + i
        step(Tensor(g), acc)
        np.testing.assert_array_equal(before_w.numpy(), ref_w * 3 + 1)
        np.testing.assert_array_equal(before_acc.numpy(), ref_acc - 0.5)
        np.testing.assert_array_equal(other_view.numpy(), ref_w[2:])
        ref_w, ref_acc = ref_w + g, ref_acc * 2
        np.testing.assert_array_equal(w.numpy(), ref_w)
        np.testing.assert_array_equal(acc.numpy(), ref_acc)
    copies = REALIZATION.preserved
    for _ in range(3):  # without lazy readers a replay copies nothing
        step(Tensor(np.ones(4, np.float32)), acc)
    assert REALIZATION.preserved == copies
    np.testing.assert_array_equal(w.numpy(), ref_w + 3)


def test_aliases_and_readers_made_after_quiet_replays_keep_their_values():
    """Tensors naming the written memory without being realized into it (``Tensor(w)``, a view that folds back to
    ``w``'s own node, a slice, ``detach``) are readers too; and a reader built after replays that had none (which
    skip the check) is still found."""
    w = Tensor(np.zeros(4, np.float32))

    @tgcore.jit
    def step(g: Tensor) -> Tensor:
        w.assign(w + g)
        return g * 1

    makers = {"alias": lambda: Tensor(w), "folded": lambda: w.reshape(2, 2).reshape(4), "slice": lambda: w[::-1],
              "detach": lambda: w.detach(), "lazy": lambda: w + 1}
    ref = np.zeros(4, np.float32)
    for i, name in enumerate(["lazy", "lazy", None, None, *[k for k in makers for _ in range(2)], None, "alias"]):
        reader = makers[name]() if name is not None else None  # one kind per call, after quiet calls too
        g = np.full(4, i + 1, np.float32)
        step(Tensor(g))
        if reader is not None:
            want = {"slice": ref[::-1], "lazy": ref + 1}.get(name, ref)
            np.testing.assert_array_equal(reader.numpy(), want, err_msg=f"call {i}: {name}")
        ref = ref + g
        np.testing.assert_array_equal(w.numpy(), ref)


def test_a_replayed_cache_write_leaves_earlier_lazy_reads_alone():
    """KV-cache style: each call writes one row at a bound position through a view of the cache. A lazy read of
    the cache taken before a replay sees the rows as they were; the cache itself sees every write."""
    pos_var = UOp.variable("pos", 0, 7)
    cache = Tensor(np.zeros((8, 2), np.float32))

    @tgcore.jit
    def step(x: Tensor, pos: UOp) -> Tensor:
        cache.shrink(((pos, pos + 1), None)).assign(x.reshape(1, 2))
        return cache.sum(0)

    ref = np.zeros((8, 2), np.float32)
    for p in range(8):
        snapshot = cache * 1  # lazy
        row = np.full(2, p + 1, np.float32)
        total = step(Tensor(row), pos_var.bind(p)).numpy()
        np.testing.assert_array_equal(snapshot.numpy(), ref)
        ref[p] = row
        np.testing.assert_array_equal(total, ref.sum(0))
        np.testing.assert_array_equal(cache.numpy(), ref)


def test_a_replay_renames_each_name_of_its_memory_once():
    """A replay writing memory that a second tensor names through the bare BUFFER (an alias, not its holder's view):
    that name is given a new version once per replay (renaming loops over the memory's names while new versions
    join them: it once renamed the new ones again, forever), and both tensors see every step's write."""
    w = Tensor(np.zeros(4, np.float32)).realize()
    alias = Tensor(w.uop.src[0], device=w.device).realize()
    step = tgcore.jit(lambda g: (w.assign(w + g), g * 1)[1])
    for i in range(1, 5):
        step(Tensor(np.ones(4, np.float32)))
        assert w.numpy().tolist() == alias.numpy().tolist() == [float(i)] * 4

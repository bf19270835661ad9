"""Short inner loops unrolled by codegen for X86 (``Renderer.unrolled_trips``) and prefetches of streamed weights:
same values as numpy and as the kernel with its loop kept, constant shift amounts as immediates, prefetcht0 where the
C renderer prefetches."""
from __future__ import annotations

import numpy as np
import pytest
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Inst, Op

from tgcore.tensor import Tensor

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"


def compiled(t: Tensor, unrolled_trips: int | None = None) -> list[tuple[list, object, list]]:
    """(the kernel's buffer sizes in argument order, program, instructions) of each kernel computing ``t``
    (``unrolled_trips``: the renderer's, else its default)."""
    from tg_x86.renderer import X86Renderer

    from tgcore.codegen import get_program
    from tgcore.schedule.kernelize import create_schedule
    r = X86Renderer()
    if unrolled_trips is not None:
        r.unrolled_trips = unrolled_trips
    items, _ = create_schedule([t.uop], t.device)
    out = []
    for si in items:
        if si.kind == "copy":
            continue
        spec = get_program(si.ast, r, 1)
        prg = r.program(spec.name, r.compiler.compile(r.render(spec.name, list(spec.uops))))
        sizes = [si.bufs[slot].size for slot in spec.buf_slots]
        out.append((sizes, prg, [i for i in r.lower(spec.name, list(spec.uops)) if isinstance(i, Inst)]))
    return out


def run(t: Tensor, arrays: list[np.ndarray], unrolled_trips: int | None = None) -> list:
    """Run the one kernel computing ``t`` by hand on ``arrays`` (told apart by size; the output first, zeroed) and
    return its instructions."""
    ((sizes, prg, insts),) = compiled(t, unrolled_trips)
    by_size = {a.size: a for a in arrays}
    assert len(by_size) == len(arrays)
    arrays[0][...] = 0
    prg(*[by_size[n].ctypes.data for n in sizes])
    return insts


def run_matvec(w: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, list]:
    """``w @ x`` on X86 and its instructions."""
    out = np.zeros(w.shape[0], np.float32)
    insts = run(Tensor(w, device=X86) @ Tensor(x, device=X86), [out, w, x])
    return out, insts


def nibble_matvec(rows: int, blocks: int, seed: int = 0) -> tuple[Tensor, list[np.ndarray], np.ndarray]:
    """A Q4-like product: per row and block of 32, 16 bytes holding 32 4-bit values (the low nibbles, then the high
    ones) times one float scale, times x. Returns the lazy product, its arrays (output, bytes, scales, x) and
    numpy's result."""
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, (rows, blocks, 16), dtype=np.uint8)
    scale = rng.standard_normal((rows, blocks, 1)).astype(np.float32)
    x = rng.standard_normal(blocks * 32).astype(np.float32)
    q = Tensor(packed, device=X86).cast("int32").reshape(rows, blocks, 1, 16)
    shifts = (Tensor.arange(2, device=X86, dtype="int32") * 4).reshape(1, 1, 2, 1)   # from the loop index
    w = ((q >> shifts) & 15).cast("float32").reshape(rows, blocks, 32) * Tensor(scale, device=X86)
    t = w.reshape(rows, blocks * 32) @ Tensor(x, device=X86)
    nib = np.concatenate([packed & 15, packed >> 4], axis=2).astype(np.float64) * scale
    return t, [np.zeros(rows, np.float32), packed, scale, x], nib.reshape(rows, -1) @ x


def jumps(insts: list) -> int:
    return sum(i.op in (Op.JCC, Op.JMP) for i in insts)


@pytest.mark.parametrize("blocks", [2, 3, 5])
def test_steps_of_a_quantization_block_are_unrolled_with_the_same_sums(blocks):
    """12 rows of ``blocks`` quantization blocks (4 steps of 8 lanes each) times x: the steps are unrolled (one
    loop fewer), each row's sum is bit for bit the one the loop computes (the copies add in the loop's order), and
    both are numpy's."""
    t, arrays, want = nibble_matvec(12, blocks, seed=blocks)
    insts = run(t, arrays)
    unrolled = arrays[0].copy()
    loop_insts = run(t, arrays, unrolled_trips=0)
    np.testing.assert_allclose(unrolled, want, rtol=1e-5, atol=1e-4)
    assert unrolled.tobytes() == arrays[0].tobytes()
    assert jumps(insts) < jumps(loop_insts)


def test_nibble_shifts_of_an_unrolled_block_are_immediates():
    """With the steps of a block unrolled, each nibble shift amount is a constant (an immediate vpsrad of 4, none
    at all for the low nibbles), not a vector shift by a per-step amount."""
    t, arrays, want = nibble_matvec(12, 2)
    insts = run(t, arrays)
    loop_insts = [i for _, _, ins in compiled(t, unrolled_trips=0) for i in ins]
    np.testing.assert_allclose(arrays[0], want, rtol=1e-5, atol=1e-4)
    assert any(i.op in (Op.VPSRAVD, Op.VPSRLVD) for i in loop_insts)   # the loop shifts by its index
    assert not any(i.op in (Op.VPSRAVD, Op.VPSRLVD) for i in insts)
    assert {i.operands[-1].value for i in insts if i.op is Op.VPSRAD} == {4}


@pytest.mark.parametrize("rows,k", [(260, 320), (64, 1000)])
def test_streamed_matvec_prefetches_and_matches_numpy(rows, k):
    """A weight of 64 KiB or more is prefetched a row block ahead (prefetcht0, as the C renderer's
    __builtin_prefetch); values unchanged."""
    rng = np.random.default_rng(rows)
    w, x = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    out, insts = run_matvec(w, x)
    np.testing.assert_allclose(out, w.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)
    assert any(i.op is Op.PREFETCHT0 for i in insts)


def test_streamed_matvec_with_a_residual_prefetches():
    """``w @ x + r`` (a decoder's projection added to its residual): the same prefetches, in a kernel whose
    selection has no horizontal-reduction rules to try first; values as numpy's."""
    rng = np.random.default_rng(5)
    w, x = rng.standard_normal((96, 1024)).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    r = rng.standard_normal(96).astype(np.float32)
    t = Tensor(w, device=X86) @ Tensor(x, device=X86) + Tensor(r, device=X86)
    insts = [i for _, _, ins in compiled(t) for i in ins]
    assert any(i.op is Op.PREFETCHT0 for i in insts)
    np.testing.assert_allclose(t.numpy(), w.astype(np.float64) @ x + r, rtol=1e-4, atol=1e-4)


def test_small_inputs_do_not_prefetch():
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    out, insts = run_matvec(w, x)
    np.testing.assert_allclose(out, w.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
    assert not any(i.op is Op.PREFETCHT0 for i in insts)


@pytest.fixture
def fresh_schedules():
    """The schedule cache lifts a constant that changes between graphs of one structure into a buffer (``x * 16``
    after ``x * 6`` would multiply by a loaded value): these graphs are scheduled afresh, and none is left behind
    for later tests of the same shape."""
    from tgcore.schedule import cache as schedule_cache
    schedule_cache.clear()
    yield
    schedule_cache.clear()


@pytest.mark.usefixtures("fresh_schedules")
@pytest.mark.parametrize("factor", [16, 1 << 20, -8, 6])
def test_int_vector_times_a_power_of_two_is_a_shift(factor):
    """int32 lanes times a constant power of two (codegen writes ``x << 4`` as ``x * 16``; Q5 formats put their
    fifth bits in place so) is one vpslld by an immediate, not a vpmulld; other factors stay a multiply. Values as
    numpy's (wrapping)."""
    a = np.random.default_rng(7).integers(-(1 << 31), 1 << 31, 64, dtype=np.int64).astype(np.int32)
    t = Tensor(a, device=X86) * factor
    insts = [i for _, _, ins in compiled(t) for i in ins]
    with np.errstate(over="ignore"):
        want = (a.astype(np.int64) * factor).astype(np.int32)
    np.testing.assert_array_equal(t.numpy(), want)
    shift = factor & 0xFFFFFFFF
    if shift & (shift - 1) == 0:
        assert any(i.op is Op.VPSLLD for i in insts) and not any(i.op is Op.VPMULLD for i in insts)
    else:
        assert any(i.op is Op.VPMULLD for i in insts)

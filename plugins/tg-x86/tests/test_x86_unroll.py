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


def run_matvec(w: np.ndarray, x: np.ndarray, unrolled_trips: int | None = None) -> tuple[np.ndarray, list]:
    """``w @ x`` on X86 (one kernel, run by hand on numpy arrays: buffers told apart by size) and its
    instructions."""
    t = Tensor(w, device=X86) @ Tensor(x, device=X86)
    ((sizes, prg, insts),) = compiled(t, unrolled_trips)
    out = np.zeros(w.shape[0], np.float32)
    arrays = {a.size: a for a in (out, w, x)}
    assert len(arrays) == 3
    prg(*[arrays[n].ctypes.data for n in sizes])
    return out, insts


def jumps(insts: list) -> int:
    return sum(i.op in (Op.JCC, Op.JMP) for i in insts)


@pytest.mark.parametrize("k", [24, 40, 64])
def test_short_inner_loop_is_unrolled_with_the_same_sums(k):
    """12 rows times a vector of k (3, 5 or 8 steps of 8 lanes inside each row): the steps are unrolled (one loop
    fewer), and every row's sum is bit for bit the one the loop computes (the copies add in the loop's order)."""
    rng = np.random.default_rng(k)
    w, x = rng.standard_normal((12, k)).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    unrolled, insts = run_matvec(w, x)
    looped, loop_insts = run_matvec(w, x, unrolled_trips=0)
    np.testing.assert_allclose(unrolled, w.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
    assert unrolled.tobytes() == looped.tobytes()
    assert jumps(insts) < jumps(loop_insts)


def test_nibble_shifts_of_an_unrolled_loop_are_immediates():
    """Packed 4-bit values (low nibbles of 8 bytes, then high nibbles) times x: with the loop over the two halves
    unrolled, each shift amount is a constant (an immediate vpsrad, none at all for 0), not a per-iteration
    vector shift; values as numpy's."""
    rng = np.random.default_rng(1)
    packed = rng.integers(0, 256, (64, 2, 8), dtype=np.uint8)     # rows, 2 groups of 8 bytes
    x = rng.standard_normal(32).astype(np.float32)
    q = Tensor(packed, device=X86).cast("int32").reshape(64, 2, 1, 8)
    shifts = (Tensor.arange(2, device=X86, dtype="int32") * 4).reshape(1, 1, 2, 1)   # from the loop index
    w = ((q >> shifts) & 15).cast("float32").reshape(64, 32)
    t = (w * Tensor(x, device=X86)).sum(1)
    insts = [i for _, _, ins in compiled(t) for i in ins]
    loop_insts = [i for _, _, ins in compiled(t, unrolled_trips=0) for i in ins]
    nib = np.stack([packed & 15, packed >> 4], axis=2).reshape(64, 32).astype(np.float64)
    np.testing.assert_allclose(t.numpy(), nib @ x, rtol=1e-5, atol=1e-4)
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

"""Gated loads and stores are branch-free: the access address is computed (lea), a cmov on the gate's flags (its
compare's, or a test of the bool) switches it to a dummy frame slot when the gate is false, and the access goes
through that register unconditionally. Loads use a zero slot (a gated-off load reads 0, never the buffer), stores
a separate sink (a gated-off store leaves the buffer alone, and a later gated-off load still reads 0). The cmov reads
the slot's address from a register set once at the start (kernels holding few gprs) or from a frame slot the
prologue fills; accesses under one gate a few bytes apart share one lea and cmov."""
from __future__ import annotations

import numpy as np
import pytest
from test_x86_isel import X86, disassemble, edit, program, render, run, starting
from tg_x86.cpu import unavailable_reason
from tg_x86_testutil import Decoded

from tgcore.dtype import DType, dtypes
from tgcore.nn import functional as F
from tgcore.tensor import Tensor
from tgcore.uop import Ops, UOp

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
rng = np.random.default_rng(1)


def values(shape: tuple[int, ...], dt: DType) -> np.ndarray:
    if dt is dtypes.bool:
        return rng.random(shape) < 0.5
    if dtypes.is_float(dt):
        return (rng.standard_normal(shape) * 4).astype(dt.np)
    return rng.integers(1, 100, shape).astype(dt.np)


def forward_jumps(insts: list[Decoded]) -> list[Decoded]:
    """Conditional jumps forward: what a jump around a gated access would be (a loop's back edge jumps back)."""
    return [i for i in starting(insts, "j") if i.mnemonic != "jmp" and i.operands[0].imm > i.address]


def dummy_picks(insts: list[Decoded]) -> list[Decoded]:
    """The cmovs that pick the address of a frame slot: from a register set by ``lea r, [rsp + ...]``, or from the
    frame slot the prologue stores such an address in (``lea rax, [rsp + ...]``, ``mov [rsp + d], rax``)."""
    frame_addrs = {i.operands[0].reg for i in starting(insts, "lea") if i.mem().base == "rsp"}
    pointers = {i.mem().disp for i, prev in zip(insts[1:], insts[:-1], strict=True)
                if i.mnemonic == "mov" and i.mem() is not None and i.mem().base == "rsp" and i.operands[1].reg == "rax"
                and prev.mnemonic == "lea" and prev.operands[0].reg == "rax" and prev.mem().base == "rsp"}

    def dummy(o) -> bool:
        return o.reg in frame_addrs if o.kind == "reg" else o.kind == "mem" and o.base == "rsp" and o.disp in pointers
    return [i for i in starting(insts, "cmov") if dummy(i.operands[1])]


def assert_branch_free(t: Tensor, gated: int = 1) -> None:
    insts = disassemble(render(*program(t)))
    assert not forward_jumps(insts), [i.text for i in forward_jumps(insts)]
    assert len(dummy_picks(insts)) >= gated


# ---------------------------------------------------------------- padding: scalar and vector gated loads

# (shape, padding): 1-d is scalar code (one compare gate); padding the outer axis of a 64-wide row vectorizes the
# inner one (the gate is an AND of two compares: a bool, tested)
PADS = {"scalar": ((5,), ((3, 2),)), "vector": ((6, 64), ((2, 3), (0, 0)))}
PAD_DTYPES = [dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64, dtypes.bool, dtypes.uint8, dtypes.int16,
              dtypes.float16]


@pytest.mark.parametrize("dt", PAD_DTYPES, ids=str)
@pytest.mark.parametrize("form", list(PADS))
def test_padded_load_picks_the_zero_slot_without_a_jump(form, dt):
    shape, pad = PADS[form]
    a = values(shape, dt)
    t = Tensor(a, device=X86).pad(pad)
    assert_branch_free(t)
    np.testing.assert_array_equal(t.numpy(), np.pad(a, pad))


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int32], ids=str)
@pytest.mark.parametrize("cin, size", [(1, 5), (3, 9)], ids=["small", "vector"])
def test_conv2d_with_padding_is_branch_free(cin, size, dt):
    x = values((2, cin, size, size), dt)
    w = values((4, cin, 3, 3), dt)
    t = F.conv2d(Tensor(x, device=X86), Tensor(w, device=X86), padding=1)
    for name, uops in [program(t)]:
        insts = disassemble(render(name, uops))
        assert not forward_jumps(insts) and dummy_picks(insts)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 4, size, size))
    for i in range(3):
        for j in range(3):
            ref += np.einsum("nchw,oc->nohw", xp[:, :, i:i + size, j:j + size], w[:, :, i, j].astype(np.float64))
    got = t.numpy()
    if dt is dtypes.int32:
        np.testing.assert_array_equal(got, ref.astype(np.int32))
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------- gated-off loads far out of bounds

FAR = [1 << 30, -(1 << 30), (1 << 31) - 1]


@pytest.mark.parametrize("far", FAR)
@pytest.mark.parametrize("form", list(PADS))
def test_gated_off_load_far_out_of_bounds_reads_zero(form, far):
    """The padded program with the load's index replaced by ``gate ? index : far`` (gigabytes away from the
    buffer): the gated-off lanes must not fault and read 0."""
    shape, pad = PADS[form]
    a = values(shape, dtypes.float32)
    name, uops = program(Tensor(a, device=X86).pad(pad))
    (idx,) = [u for u in uops if u.op is Ops.INDEX and len(u.src) > 2]
    gate = idx.src[2]

    def far_index(i: UOp) -> UOp:
        return i.replace(src=(i.src[0], gate.where(i.src[1], UOp.const(dtypes.int32, far)), gate))
    edited = edit(uops, {idx: far_index})
    ref = np.pad(a, pad)
    out = np.full(ref.shape, np.nan, np.float32)
    code = run(name, edited, {0: out, 1: a})
    assert not forward_jumps(disassemble(code))
    np.testing.assert_array_equal(out, ref)


# ---------------------------------------------------------------- gated stores

def test_gated_off_store_leaves_the_buffer_and_the_zero_slot_alone():
    """x padded by 3 in front, computing x[i-3] + 1 (the gated load without its WHERE: a gated-off load reads 0)
    and storing it only where i != 1: out[1] keeps its old value; at i = 2 the gated-off load still reads 0
    (the store of 1 at i = 1 went to the sink, not to the zero slot)."""
    a = np.arange(10, 14).astype(np.int32)     # 7 outputs: scalar code
    name, uops = program(Tensor(a, device=X86).pad(((3, 0),)) * 3)
    (load,) = [u for u in uops if u.op is Ops.LOAD]
    (store,) = [u for u in uops if u.op is Ops.STORE]
    i = store.src[0].src[1]

    def gated(s: UOp) -> UOp:
        idx = s.src[0]
        return s.replace(src=(idx.replace(src=(*idx.src[:2], i.ne(1))), load + 1))
    out = np.full(7, -7, np.int32)
    code = run(name, edit(uops, {store: gated}), {0: out, 1: a})
    insts = disassemble(code)
    assert not forward_jumps(insts) and len(dummy_picks(insts)) == 2    # the load's and the store's
    assert out.tolist() == [1, -7, 1, 11, 12, 13, 14]


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64], ids=str)
def test_gated_vector_store_skips_its_row(dt):
    """Rows of 64 padded by 2 above and 3 below (the padded read is the (vector) gated load itself: the scheduler
    puts no WHERE around it), and the row store gated by row != 7 (its load is on, its values nonzero): row 7
    keeps its old values, rows 8..10 (loads gated off) read 0 from the zero slot the store did not write."""
    a = values((6, 64), dt)
    a[a == 0] = 1
    name, uops = program(Tensor(a, device=X86).pad(((2, 3), (0, 0))))
    (load,) = [u for u in uops if u.op is Ops.LOAD]
    (store,) = [u for u in uops if u.op is Ops.STORE]
    assert store.src[1].dtype.count > 1 and not [u for u in uops if u.op is Ops.WHERE]
    row = [u for u in uops if u.op is Ops.RANGE][0]

    def gated(s: UOp) -> UOp:
        idx, value = s.src
        assert value is load   # stores the load itself
        return s.replace(src=(idx.replace(src=(*idx.src[:2], row.ne(7))), value))
    edited = edit(uops, {store: gated})
    old = values((11, 64), dt)
    out = old.copy()
    code = run(name, edited, {0: out, 1: a})
    assert not forward_jumps(disassemble(code))
    ref = np.pad(a, ((2, 3), (0, 0)))
    ref[7] = old[7]
    np.testing.assert_array_equal(out, ref)


def test_gated_bool_vector_load_reads_false():
    """A padded bool mask feeding a float WHERE: the gated load of 8 bools (vpmovzxbd) goes through the gated
    address too."""
    m = rng.random((6, 64)) < 0.5
    t = Tensor(m, device=X86).pad(((2, 3), (0, 0))).where(1.0, 2.0)
    insts = disassemble(render(*program(t)))
    assert not forward_jumps(insts) and dummy_picks(insts)
    assert any(i.mnemonic == "vpmovzxbd" and i.mem().index is None for i in insts)
    np.testing.assert_array_equal(t.numpy(), np.where(np.pad(m, ((2, 3), (0, 0))), 1.0, 2.0).astype(np.float32))


@pytest.mark.parametrize("lanes", [16, 32])
def test_wide_gated_vector_access_gets_a_wide_dummy_slot(lanes):
    """The padded rows of 64 float32 edited to load and store ``lanes`` at a time (2 or 4 ymm pieces through one
    gated address), the store gated by row != 7: the zero slot and the sink are as wide as the access, so
    gated-off rows read 0 in every piece and row 7 keeps its old values."""
    a = values((6, 64), dtypes.float32)
    name, uops = program(Tensor(a, device=X86).pad(((2, 3), (0, 0))))
    (load,) = [u for u in uops if u.op is Ops.LOAD]
    (store,) = [u for u in uops if u.op is Ops.STORE]
    row, col = [u for u in uops if u.op is Ops.RANGE]
    (step,) = [u for u in uops if u.op is Ops.MUL and u.src[0] is col]
    n = UOp.const(dtypes.int32, lanes)

    def gated(s: UOp) -> UOp:
        idx, _ = s.src
        return s.replace(src=(idx.replace(src=(*idx.src[:2], row.ne(7))), new_load))
    new_load = None

    def widen(u: UOp) -> UOp:
        nonlocal new_load
        new_load = u.replace(dtype=dtypes.float32.vec(lanes))
        return new_load
    edited = edit(uops, {col: lambda r: r.replace(src=(UOp.const(dtypes.int32, 64 // lanes),)),
                         step: lambda m: m.replace(src=(m.src[0], n)), load: widen, store: gated})
    old = values((11, 64), dtypes.float32)
    out = old.copy()
    code = run(name, edited, {0: out, 1: a})
    insts = disassemble(code)
    assert not forward_jumps(insts) and len(dummy_picks(insts)) == 2
    ref = np.pad(a, ((2, 3), (0, 0)))
    ref[7] = old[7]
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("on", [True, False])
def test_constant_gate_needs_no_cmov(on):
    """A gate that is a constant (codegen leaves some on lanes of unrolled accesses): always on reads the element,
    always off reads the zero slot (and computes no buffer address); no compare, test or cmov either way."""
    a = values((7,), dtypes.float32)
    name, uops = program(Tensor(a, device=X86) * 3)
    (idx,) = [u for u in uops if u.op is Ops.INDEX and u.src[0].arg == 1]
    edited = edit(uops, {idx: lambda i: i.replace(src=(*i.src, UOp.const(dtypes.bool, on)))})
    out = np.full(7, np.nan, np.float32)
    insts = disassemble(run(name, edited, {0: out, 1: a}))
    assert not starting(insts, "cmov") and not starting(insts, "test") and len(starting(insts, "cmp")) == 1  # loop
    np.testing.assert_array_equal(out, a * np.float32(3) if on else np.zeros(7, np.float32))


def test_lanes_gated_by_one_bool_share_its_test():
    """conv2d with padding loads some vectors lane by lane under one bool gate (an AND of compares): one test of
    it serves every lane while its flags hold (no test right after the same test)."""
    from test_x86_isel import flags_written
    x, w = values((1, 8, 32, 32), dtypes.float32), values((16, 8, 3, 3), dtypes.float32)
    code = render(*program(F.conv2d(Tensor(x, device=X86), Tensor(w, device=X86), padding=1)))
    insts, writes = disassemble(code), flags_written(code)
    tests = [k for k, i in enumerate(insts) if i.mnemonic == "test"]
    assert tests
    for k in tests:
        last = next(j for j in reversed(insts[:k]) if writes[j.address])
        assert last.text != insts[k].text


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int32], ids=str)
def test_gated_load_with_an_alternative_value(dt):
    """A LOAD with an alternative value (hand-written programs; codegen makes none) still reads it where the gate
    is off: that form keeps its jump over the load."""
    a = values((4,), dt)
    name, uops = program(Tensor(a, device=X86).pad(((3, 0),)) * 3)
    (load,) = [u for u in uops if u.op is Ops.LOAD]
    (mul,) = [u for u in uops if u.op is Ops.MUL]
    alt = UOp.const(dt, 5)
    with_alt = load.replace(src=(load.src[0], alt))
    edited = edit(uops, {mul: lambda m: m.replace(src=(with_alt, m.src[1]))}, drop=frozenset({load}))
    out = np.zeros(7, dt.np)
    run(name, edited, {0: out, 1: a})
    np.testing.assert_array_equal(out, np.concatenate([np.full(3, 5, dt.np), a]) * np.array(3, dt.np))


# ---------------------------------------------------------------- the cost of a gated access

def test_padded_lanes_share_compares_and_addresses():
    """A 1-d pad vectorized by 8: lanes gated by neighbouring compares (i > 2, i > 1, ...) read one cmp's flags
    (fewer compares than cmovs), the lanes after a vector piece under the same gate load through its address
    (a displacement on the cmov'd register, no lea of their own), and the dummy's address is held in a register
    (few gprs held: no frame slot read per cmov)."""
    a = values((1024,), dtypes.float32)
    t = Tensor(a, device=X86).pad(((3, 5),))
    insts = disassemble(render(*program(t)))
    picks = dummy_picks(insts)
    assert not forward_jumps(insts) and all(p.operands[1].kind == "reg" for p in picks)
    compares = [i for i in insts if i.mnemonic == "cmp" and i.operands[1].kind == "imm"]
    assert len(compares) < len(picks) + 2     # (+ the loop's bound)
    picked = {p.operands[0].reg for p in picks}
    assert any(i.mem() is not None and i.mem().base in picked and i.mem().disp > 0 for i in insts
               if i.mnemonic.startswith("vmov"))
    np.testing.assert_array_equal(t.numpy(), np.pad(a, (3, 5)))


def test_many_held_gprs_read_the_dummy_address_from_the_frame():
    """conv2d with padding holds many gprs (pointers, loop counters): the cmovs read the zero slot's address from
    the frame slot the prologue fills instead of holding it in a register."""
    x, w = values((1, 8, 16, 16), dtypes.float32), values((16, 8, 3, 3), dtypes.float32)
    insts = disassemble(render(*program(F.conv2d(Tensor(x, device=X86), Tensor(w, device=X86), padding=1))))
    picks = dummy_picks(insts)
    assert picks and all(p.operands[1].kind == "mem" for p in picks)


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int64, dtypes.int16], ids=str)
def test_gated_gpr_load_goes_through_its_destination(dt):
    """A gated integer load into a gpr picks its address in the register it loads into (no other register)."""
    a = values((5,), dt)
    t = Tensor(a, device=X86).pad(((3, 2),))
    insts = disassemble(render(*program(t)))
    (pick,) = dummy_picks(insts)
    (load,) = [i for i in insts if i.mem() is not None and i.mem().base == pick.operands[0].reg]
    def family(r: str) -> str:   # rbx/ebx -> bx, r13/r13d -> 13
        return r.lstrip("re").rstrip("dwb")
    assert family(load.operands[0].reg) == family(pick.operands[0].reg)
    np.testing.assert_array_equal(t.numpy(), np.pad(a, (3, 2)))

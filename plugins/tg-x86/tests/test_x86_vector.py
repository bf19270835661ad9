"""Vector instruction selection on CPU:X86: which AVX2 forms kernels get (ps/pd/epi32/epi64 by dtype,
broadcasts, constants, lane extraction and insertion, wide vectors split into ymm pieces, FMA on
vector accumulators, horizontal reductions), each checked for its result against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Inst, Op
from tg_x86.operands import Mem, Reg

from tgcore.dtype import dtypes
from tgcore.tensor import Tensor

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"
rng = np.random.default_rng(0)


def kernels(t: Tensor, isa: str = "avx2", opts: list | None = None) -> list[list]:
    """The allocated programs of ``t``'s kernels at ISA level ``isa`` (the shapes asserted here are AVX2's unless a
    test asks for another level, whatever TG_ISA says); ``opts``: an optimization list instead of the policy's."""
    from tg_x86.renderer import X86Renderer

    from tgcore.codegen import get_program
    from tgcore.schedule.kernelize import create_schedule
    items, _ = create_schedule([t.uop], t.device)
    r = X86Renderer(isa=isa)
    programs = (get_program(si.ast, r, 1, opts=opts) for si in items if si.kind != "copy")
    return [r.lower(s.name, list(s.uops)) for s in programs]


def ops(insts: list) -> list[Op]:
    return [i.op for i in insts if isinstance(i, Inst)]


def with_op(insts: list, op: Op) -> list[Inst]:
    return [i for i in insts if isinstance(i, Inst) and i.op is op]


def loop_body(insts: list, name: str) -> list:
    """The instructions between label ``name`` and its back edge."""
    labels = [repr(i) for i in insts]
    start = labels.index(name)
    end = next(k for k in range(len(insts) - 1, start, -1)
               if isinstance(insts[k], Inst) and insts[k].label is not None and repr(insts[k].label) == name)
    return insts[start + 1:end + 1]


def is_ymm(o) -> bool:
    return isinstance(o, Reg) and o.kind == "ymm"


@pytest.mark.parametrize("dt, op", [(dtypes.float32, Op.VADDPS), (dtypes.float64, Op.VADDPD),
                                    (dtypes.int32, Op.VPADDD), (dtypes.uint32, Op.VPADDD),
                                    (dtypes.int64, Op.VPADDQ)], ids=str)
def test_add_picks_the_packed_form_of_the_dtype(dt, op):
    a = (rng.standard_normal(256) * 100).astype(dt.np)
    b = (rng.standard_normal(256) * 100).astype(dt.np)
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    (insts,) = kernels(x + y)
    adds = with_op(insts, op)
    assert adds and all(is_ymm(i.operands[0]) for i in adds)
    assert not with_op(insts, Op.VADDSS) and not with_op(insts, Op.VADDSD)
    np.testing.assert_array_equal((x + y).numpy(), a + b)


@pytest.mark.parametrize("dt, mul", [(dtypes.float32, Op.VMULPS), (dtypes.float64, Op.VMULPD),
                                     (dtypes.int32, Op.VPMULLD)], ids=str)
def test_multiply_by_a_constant_reads_a_constant_slot(dt, mul):
    a = (rng.standard_normal(64) * 100).astype(dt.np)
    t = Tensor(a, device=X86) * 3
    (insts,) = kernels(t)
    (m,) = with_op(insts, mul)
    assert isinstance(m.operands[2], Mem) and m.operands[2].base.name == "rsp"   # a frame constant
    np.testing.assert_array_equal(t.numpy(), a * np.array(3, dt.np))


def test_int64_multiply_has_no_vector_form_and_goes_lane_by_lane():
    a = rng.integers(-2**40, 2**40, 64).astype(np.int64)
    t = Tensor(a, device=X86) * Tensor(a, device=X86)
    (insts,) = kernels(t)
    assert with_op(insts, Op.IMUL) and with_op(insts, Op.VPINSRQ) and with_op(insts, Op.VPEXTRQ)
    np.testing.assert_array_equal(t.numpy(), a * a)


def test_matmul_inner_loop_broadcasts_from_memory_and_uses_fma():
    a = rng.integers(-4, 5, (64, 64)).astype(np.float32)
    b = rng.integers(-4, 5, (64, 64)).astype(np.float32)
    t = Tensor(a, device=X86) @ Tensor(b, device=X86)
    (insts,) = kernels(t)
    body = loop_body(insts, "loop2")
    bcasts = with_op(body, Op.VBROADCASTSS)
    fmas = with_op(body, Op.VFMADD231PS)
    # one broadcast of A per row of the register tile, feeding one FMA per vector of columns (codegen's choice)
    assert len(bcasts) >= 4 and len(fmas) % len(bcasts) == 0
    assert all(isinstance(i.operands[1], Mem) for i in bcasts)  # load folded
    assert all(is_ymm(i.operands[0]) for i in fmas)
    assert not with_op(body, Op.VMOVSS) and not with_op(body, Op.VMOVAPS)   # accumulators stay put
    assert not [i for i in body if isinstance(i, Inst) and i.op is Op.VMOVUPS and isinstance(i.operands[0], Mem)]
    np.testing.assert_array_equal(t.numpy(), a @ b)   # integer values: exact


def test_wide_vector_accumulators_are_split_into_ymm_pieces():
    """sum over 4096 with 32-lane accumulators (the heuristic gives a reduction this short one native vector, so
    that its order does not depend on the row count): four ymm adds per iteration reading 32-byte apart memory."""
    from tgcore.codegen.optimize import Opt, OptOps
    a = rng.standard_normal(1 << 12).astype(np.float32)
    t = Tensor(a, device=X86).sum()
    first = kernels(t, opts=[Opt(OptOps.UPCAST, 0, 32)])[0]
    loops = [repr(i) for i in first if repr(i).startswith("loop")]
    body = loop_body(first, loops[-1])
    adds = with_op(body, Op.VADDPS)
    assert len(adds) == 4 and all(is_ymm(i.operands[0]) for i in adds)
    disps = sorted(i.operands[2].disp for i in adds)
    assert all(isinstance(i.operands[2], Mem) for i in adds) and [d - disps[0] for d in disps] == [0, 32, 64, 96]
    np.testing.assert_allclose(t.numpy(), a.sum(), rtol=1e-4)


def test_horizontal_reduction_is_shuffles_not_scalar_code():
    a = rng.standard_normal((16, 256)).astype(np.float32)
    a[3, 17] = np.nan
    t = Tensor(a, device=X86).max(1)
    insts = kernels(t)[0]
    assert with_op(insts, Op.VEXTRACTF128) and with_op(insts, Op.VMOVHLPS) and with_op(insts, Op.VPERMILPS)
    assert not with_op(insts, Op.VMAXSS)
    np.testing.assert_array_equal(t.numpy(), a.max(1))
    ints = (np.nan_to_num(a[:, :128]) * 1000).astype(np.int32)
    s = Tensor(ints, device=X86).sum(1)      # int64 accumulators
    insts = kernels(s)[0]
    assert len(with_op(insts, Op.VPADDQ)) > 8 and not with_op(insts, Op.VPEXTRQ)
    np.testing.assert_array_equal(s.numpy(), ints.sum(1))


def test_where_is_one_compare_and_a_blend():
    a, b = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    t = (x < y).where(x, 2.5)
    (insts,) = kernels(t)
    assert len(with_op(insts, Op.VCMPPS)) == 1 and len(with_op(insts, Op.VBLENDVPS)) == 1
    np.testing.assert_array_equal(t.numpy(), np.where(a < b, a, np.float32(2.5)))
    ints = Tensor(rng.integers(-9, 9, 64).astype(np.int32), device=X86)
    u = (ints < 3).where(ints, -ints)
    (insts,) = kernels(u)
    assert with_op(insts, Op.VPCMPGTD) and with_op(insts, Op.VBLENDVPS)
    np.testing.assert_array_equal(u.numpy(), np.where(ints.numpy() < 3, ints.numpy(), -ints.numpy()))


def test_gathered_lanes_are_inserted_and_stored_as_one_vector():
    a = rng.standard_normal((64, 64)).astype(np.float32)
    t = Tensor(a, device=X86).T.contiguous()
    (insts,) = kernels(t)
    assert with_op(insts, Op.VINSERTPS) and with_op(insts, Op.VINSERTF128)
    stores = [i for i in insts if isinstance(i, Inst) and i.op is Op.VMOVUPS and isinstance(i.operands[0], Mem)]
    assert stores and all(is_ymm(i.operands[1]) for i in stores)
    np.testing.assert_array_equal(t.numpy(), a.T)


def test_casts_between_vector_dtypes():
    f = np.array([1e10, np.nan, -3.5, 3e9, 2.5, -1e12, np.inf, 7.0] * 8, np.float32)
    for dst in (dtypes.int32, dtypes.uint32):
        got = Tensor(f, device=X86).cast(dst)
        (insts,) = kernels(got)
        assert with_op(insts, Op.VCVTTPS2DQ) and with_op(insts, Op.VPTEST)   # fast path, checked
        np.testing.assert_array_equal(got.numpy(), Tensor(f, device="CPU").cast(dst).numpy())
    ok = np.arange(-32, 32, dtype=np.float32) * 1.75
    np.testing.assert_array_equal(Tensor(ok, device=X86).cast(dtypes.int32).numpy(), ok.astype(np.int32))
    i = np.arange(-32, 32, dtype=np.int32) * 1000003
    for dst, op in ((dtypes.float32, Op.VCVTDQ2PS), (dtypes.float64, Op.VCVTDQ2PD), (dtypes.int64, Op.VPMOVSXDQ)):
        t = Tensor(i, device=X86).cast(dst)
        assert with_op(kernels(t)[0], op)
        np.testing.assert_array_equal(t.numpy(), i.astype(dst.np))
    d = Tensor(f.astype(np.float64) / 3, device=X86).cast(dtypes.float32)
    assert with_op(kernels(d)[0], Op.VCVTPD2PS)
    np.testing.assert_array_equal(d.numpy(), (f.astype(np.float64) / 3).astype(np.float32))


def test_bool_vectors_load_as_bytes():
    a = rng.standard_normal(64).astype(np.float32)
    mask = Tensor(a < 0, device=X86)
    t = mask.where(Tensor(a, device=X86), 0.0)
    assert with_op(kernels(t)[0], Op.VPMOVZXBD)
    np.testing.assert_array_equal(t.numpy(), np.where(a < 0, a, np.float32(0)))


def test_shifts_by_a_constant_use_the_immediate_form():
    i = rng.integers(-2**31, 2**31, 64).astype(np.int32)
    t = Tensor(i, device=X86) >> 3
    assert with_op(kernels(t)[0], Op.VPSRAD)
    np.testing.assert_array_equal(t.numpy(), i >> 3)
    n = Tensor((i % 40).astype(np.int32), device=X86)
    v = Tensor(i, device=X86) << n     # variable amounts, 32..39 give 0
    assert with_op(kernels(v)[0], Op.VPSLLVD)
    np.testing.assert_array_equal(v.numpy(), np.where(i % 40 < 32, i << (i % 40 % 32), 0))


def test_int32_division_and_remainder():
    i = np.concatenate([rng.integers(-2**31, 2**31, 56), [-2**31, -2**31, 7, -7, 0, 2**31 - 1, -1, 5]]).astype(np.int32)
    j = np.concatenate([rng.integers(-50, 50, 56), [-1, 1, 0, 0, 3, -1, 7, -2]]).astype(np.int32)
    x, y = Tensor(i, device=X86), Tensor(j, device=X86)
    px, py = Tensor(i, device="PYTHON"), Tensor(j, device="PYTHON")
    for got, want in ((x // y, px // py), (x % y, px % py)):
        assert with_op(kernels(got)[0], Op.VDIVPD) and not with_op(kernels(got)[0], Op.IDIV)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for got, want in ((x // 7, px // 7), (x % -3, px % -3)):   # by a constant: multiply-high (test_x86_divconst)
        assert with_op(kernels(got)[0], Op.VPMULDQ) and not with_op(kernels(got)[0], Op.VDIVPD)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    u = Tensor(i.view(np.uint32), device=X86)
    for got, want in ((u >> 5, i.view(np.uint32) >> 5), (u // 16, i.view(np.uint32) // 16),
                      (u % 8, i.view(np.uint32) % 8)):
        assert not with_op(kernels(got)[0], Op.DIV)
        np.testing.assert_array_equal(got.numpy(), want)

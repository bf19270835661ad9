"""The X86 renderer at the AVX-512 level: float32 vectors of 16k lanes in zmm pieces, 32 zmm registers, opmasks for
padded tails.

The code shapes are checked on the listing the renderer makes at ``isa="avx512"`` (no AVX-512 CPU needed); results
against numpy and torch on the CPU:X86 device when its renderer runs at that level (the CPU has AVX-512 and TG_ISA
does not ask for less). The machine code of zmm spills is checked against capstone's reading of it.
"""
from __future__ import annotations

import numpy as np
import pytest
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Inst, Op
from tg_x86.operands import Masked, Mem, Reg

import tgcore.nn.functional as F
from tgcore.codegen import get_program
from tgcore.codegen.optimize import Opt, OptOps
from tgcore.schedule.kernelize import create_schedule
from tgcore.tensor import Tensor

X86 = "CPU:X86"
rng = np.random.default_rng(5)


def _device_is_wide() -> bool:
    if unavailable_reason() is not None:
        return False
    from tgcore.runtime.registry import open_device
    return bool(getattr(open_device(X86).renderer, "wide", False))


needs_wide = pytest.mark.skipif(not _device_is_wide(), reason="CPU:X86 does not run at the AVX-512 level here")


def listings(t: Tensor, isa: str = "avx512") -> list[list]:
    from tg_x86.renderer import X86Renderer
    items, _ = create_schedule([t.uop], "CPU")
    r = X86Renderer(isa=isa)
    return [r.lower(s.name, list(s.uops)) for s in (get_program(si.ast, r, 1) for si in items if si.kind != "copy")]


def innermost_loop(insts: list) -> list:
    """The instructions of the last loop opened (between its label and its closing jump)."""
    labels = [i for i, x in enumerate(insts) if not isinstance(x, Inst) and repr(x).startswith("loop")]
    start = labels[-1]
    end = next(i for i in range(start, len(insts)) if isinstance(insts[i], Inst) and insts[i].op is Op.JCC)
    return insts[start + 1:end]


def is_zmm(o: object) -> bool:
    return isinstance(o, Reg) and o.kind == "zmm"


def test_matmul_register_tile_is_zmm_fmas():
    """The K loop of a 256^3 product: zmm FMAs into accumulators that stay in registers, B's vectors loaded as zmm,
    A broadcast from memory into zmm; more accumulators than AVX2's 16 registers could hold."""
    (insts,) = listings(Tensor.empty(256, 256) @ Tensor.empty(256, 256))
    body = innermost_loop(insts)
    fmas = [i for i in body if i.op is Op.VFMADD231PS]
    assert len(fmas) > 16 and all(is_zmm(i.operands[0]) for i in fmas)
    assert len({i.operands[0].num for i in fmas}) == len(fmas)          # one accumulator each
    assert any(i.operands[0].num >= 16 for i in fmas)                   # zmm16-31 in use
    bcasts = [i for i in body if i.op is Op.VBROADCASTSS]
    assert bcasts and all(is_zmm(i.operands[0]) and isinstance(i.operands[1], Mem) for i in bcasts)
    assert not [i for i in body if any(is_zmm(o) for o in i.operands) and any(
        isinstance(o, Mem) and o.base is not None and o.base.num == 4 for o in i.operands)]   # no vector spills


def test_padded_columns_load_and_store_under_opmasks():
    """1000 columns are not a multiple of a 16-lane tile: the last vectors load and store under an opmask made
    (vptestmd) before the K loop, not lane by lane."""
    (listed,) = listings(Tensor.empty(64, 100) @ Tensor.empty(100, 1000))
    insts = [i for i in listed if isinstance(i, Inst)]
    masked_loads = [i for i in insts if i.op is Op.VMOVUPS and isinstance(i.operands[0], Masked)
                    and is_zmm(i.operands[0].target) and i.operands[0].zero]
    masked_stores = [i for i in insts if i.op is Op.VMOVUPS and isinstance(i.operands[0], Masked)
                     and isinstance(i.operands[0].target, Mem)]
    assert masked_loads and masked_stores
    assert not [i for i in innermost_loop(listed) if i.op is Op.VPTESTMD]
    assert not [i for i in insts if i.op is Op.VMOVSS]


def test_avx2_level_names_no_zmm():
    for insts in listings(Tensor.empty(256, 256) @ Tensor.empty(256, 256), isa="avx2"):
        assert not [i for i in insts if isinstance(i, Inst) for o in i.operands if is_zmm(o)]


def test_zmm_spills_are_what_capstone_reads():
    """A 5x6 tile of zmm accumulators (30, with 6 vectors of B and a broadcast) spills: the spill code the plan
    encodes directly is the staged way's (rewrite, finish, assemble; its encoder is fuzzed against capstone, EVEX's
    disp8*64 included) and capstone reads zmm moves to and from the stack."""
    from tg_x86 import plan_code
    from tg_x86.listing import disassemble
    from tg_x86.renderer import X86Renderer

    from tgcore.renderer.isa import ISARenderer
    t = Tensor.empty(80, 64) @ Tensor.empty(64, 96)
    items, _ = create_schedule([t.uop], "CPU")
    r = X86Renderer(isa="avx512")
    opts = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UNROLL, 1, 6), Opt(OptOps.UNROLL, 0, 5)]
    captured: dict = {}

    def emit(plan, ctx):  # noqa: ANN001, ANN202
        captured["bytes"] = (plan_code.encode_plan(plan, ctx.frame), ISARenderer.emit(r, plan, ctx))
        return captured["bytes"][0]
    r.emit = emit  # type: ignore[method-assign]
    get_program(items[-1].ast, r, 1, opts)
    direct, staged = captured["bytes"]
    assert direct == staged
    text = [t for _, _, t in disassemble(direct)]
    spills = [t for t in text if t.startswith("vmovups zmmword ptr [rsp")]
    fills = [t for t in text if t.startswith("vmovups zmm") and "ptr [rsp" in t and not t.startswith("vmovups zmmw")]
    assert spills and fills


def _masked_accesses(insts: list) -> list[tuple[int, Mem]]:
    """(position, memory operand) of the masked loads and stores: vmaskmovps, or a zmm move under an opmask."""
    found = []
    for k, i in enumerate(insts):
        if not isinstance(i, Inst) or i.op not in (Op.VMASKMOVPS, Op.VMOVUPS):
            continue
        if i.op is Op.VMOVUPS and not isinstance(i.operands[0], Masked):
            continue
        found += [(k, o.target if isinstance(o, Masked) else o) for o in i.operands
                  if isinstance(o, Mem) or (isinstance(o, Masked) and isinstance(o.target, Mem))]
    return found


def _writer(insts: list, before: int, reg: Reg) -> Inst:
    """The last instruction before position ``before`` that writes gpr ``reg`` (its first operand)."""
    return next(i for i in reversed(insts[:before]) if isinstance(i, Inst) and i.operands
                and isinstance(i.operands[0], Reg) and i.operands[0].kind == "gpr" and i.operands[0].num == reg.num)


@pytest.mark.parametrize("upcast", [8, 16])
def test_masked_access_with_negative_lane0_index_sign_extends_it(upcast):
    """Regression (#26, fuzz seed 33328): a front-padded then flipped view gates off lane 0 of a vector whose index
    is ``11 - 3*i``-like, -1 on the last row. That int32 index, used in an address as it is, was zero-extended (16
    GiB past the buffer) and the lanes that are on faulted; it must be sign-extended (movsxd) before the masked
    vmaskmovps (8 lanes) or zmm opmask move (16 lanes)."""
    from tg_x86.renderer import X86Renderer
    t = Tensor.empty(9, 31).pad(((0, 0), (1, 0))).flip(0) * 3
    items, _ = create_schedule([t.uop], "CPU")
    r = X86Renderer(isa="avx512")
    insts = r.lower("k", list(get_program(items[-1].ast, r, 1, [Opt(OptOps.UPCAST, 1, upcast)]).uops))
    masked = [(k, m) for k, m in _masked_accesses(insts) if m.index is not None]
    assert masked
    for k, m in masked:
        writer = _writer(insts, k, m.index)
        assert writer.op is Op.MOVSXD and writer.operands[0].bits == 64, writer


FLIPPED_PAD = """
import numpy as np
from tgcore.tensor import Tensor
for rows, cols, dt in [(5, 7, "int32"), (9, 31, "float32"), (33, 63, "float32")]:
    x = np.arange(rows * cols).astype(dt).reshape(rows, cols) + 1
    got = (Tensor(x, device="CPU:X86").pad(((0, 0), (1, 0))).flip(0) * 3).numpy()
    assert got.tolist() == (np.pad(x, ((0, 0), (1, 0)))[::-1] * 3).tolist(), (rows, cols, dt)
x1 = Tensor(np.array([1, 7, -4, 1, 3], dtype=np.int64).reshape((1, 5, 1)), device="CPU:X86")
x2 = np.array([1304, 1755, -1, -6, -5, -1758, -5, 1, 2, 4, 0, 0, -3, -1338, 0], np.int32).reshape((1, 5, 3))
v = Tensor(x1.numpy(), device="CPU:X86").cat(Tensor(x2, device="CPU:X86").maximum(7), dim=2).clip(-2**63, 5)
want = np.clip(np.concatenate([x1.numpy(), np.maximum(x2, 7).astype(np.int64)], 2), -2**63, 5)
assert ((v @ v.transpose(-1, -2)).flip((2,)).numpy() == (want @ want.transpose(0, 2, 1))[:, :, ::-1]).all()
print("ok")
"""


@needs_wide
def test_flipped_front_pad_runs_in_bounds():
    """The programs of the test above (and the fuzzer's seed 33328) run and match numpy; in a child process, since
    the old code killed the process with a segfault."""
    import subprocess
    import sys
    child = subprocess.run([sys.executable, "-c", FLIPPED_PAD], capture_output=True, text=True, timeout=300,
                           check=False)
    assert child.returncode == 0 and child.stdout.strip() == "ok", (child.returncode, child.stderr[-2000:])


@needs_wide
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 7, 7), (1, 129, 3), (127, 129, 131), (64, 1000, 20), (33, 100, 65)])
def test_matmul_odd_shapes_exact(m, n, k):
    a, b = rng.integers(-3, 4, (m, k)).astype(np.float32), rng.integers(-3, 4, (k, n)).astype(np.float32)
    np.testing.assert_array_equal((Tensor(a, device=X86) @ Tensor(b, device=X86)).numpy(), a @ b)


@needs_wide
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64, np.float16])
@pytest.mark.parametrize("n", [1, 7, 17, 100, 1003])
def test_padded_elementwise_tails(dtype, n):
    """Sizes that are no multiple of the vector: the tail lanes are loaded and stored under masks (or lane by lane)
    and nothing past the end is written."""
    a = (rng.standard_normal(n) * 8).astype(dtype)
    b = (rng.standard_normal(n) * 8).astype(dtype)
    out = (Tensor(a, device=X86) * 2 + Tensor(b, device=X86)).numpy()
    np.testing.assert_allclose(out, a * 2 + b, rtol=1e-3 if dtype is np.float16 else 1e-6)


@needs_wide
def test_conv2d_forward_and_backward_match_torch():
    torch = pytest.importorskip("torch")
    x_np = rng.standard_normal((2, 8, 13, 11)).astype(np.float32)
    w_np = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    x, w = Tensor(x_np, device=X86, requires_grad=True), Tensor(w_np, device=X86, requires_grad=True)
    out = F.conv2d(x, w, padding=1).relu()
    out.sum().backward()
    xt, wt = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
    ot = torch.nn.functional.conv2d(xt, wt, padding=1).relu()
    ot.sum().backward()
    np.testing.assert_allclose(out.numpy(), ot.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-4)

"""The X86 renderer's integer dot path (``tg_x86.bytedot``): the byte products of a block of 32, summed per int32
lane of 4 neighbouring bytes, as one vpdpbusd (EVEX or VEX; without VNNI vpmaddubsw + vpmaddwd), with the byte
unpacking (nibbles, bit masks, a broadcast field) in byte vectors.

References: numpy (the same sums in int64 and float64: every value is an integer or a power-of-two fraction below
2**24, so any order of summation gives the same float32), and the kernel's instructions (vpdpbusd is there with
AVX512-VNNI; the byte vectors are not taken apart lane by lane)."""
from __future__ import annotations

import numpy as np
import pytest
from tg_x86.cpu import unavailable_reason
from tg_x86.isa import Inst, Op
from tg_x86.operands import Bcst, Label, Mem
from tg_x86.renderer import DOT_OPS, X86Renderer

from tgcore.tensor import Tensor

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"


def by_lane(t: Tensor) -> Tensor:
    """``(..., 32)`` -> ``(..., 4, 8)``, ``[k, l]`` = element ``4l + k`` (the order tg-gguf sums a block in)."""
    return t.reshape(*t.shape[:-1], 8, 4).permute(*range(t.ndim - 1), t.ndim, t.ndim - 1)


def nibbles(raw: Tensor) -> Tensor:
    """``(N, nb, 16)`` bytes -> ``(N, nb, 32)``: the low nibbles, then the high ones (Q4's order)."""
    n, nb, _ = raw.shape
    shifts = Tensor.arange(2, dtype="uint8", device=raw.device).reshape(1, 1, 2, 1) * 4
    return ((raw.reshape(n, nb, 1, 16).expand(n, nb, 2, 16) >> shifts) & 15).reshape(n, nb, 32)


def fifth_bits(qh: Tensor) -> Tensor:
    """``(N, nb, 4)`` bytes -> ``(N, nb, 32)``: bit ``j`` of the 32-bit field as 0 or 16 (Q5's form: the top bit of
    ``(byte & m) + (128 - m)``, no per-lane shift)."""
    n, nb, _ = qh.shape
    mask = Tensor.arange(8, dtype="uint8", device=qh.device).reshape(1, 1, 1, 8)
    mask = mask.full_like(1) << mask
    top = (qh.reshape(n, nb, 4, 1) & mask) + (mask.full_like(128) - mask)
    return ((top >> 3) & 16).reshape(n, nb, 32)


def block_dot(u: Tensor, x: Tensor, scale: Tensor) -> Tensor:
    """``u`` ``(N, nb, 32)`` uint8, ``x`` ``(nb, 32)`` int8, ``scale`` ``(N, nb)``: the sum over blocks of
    ``scale * sum(u * x)``, each block's products in int32 (tg-gguf's integer product, without its offsets)."""
    n, nb, _ = u.shape
    prod = (by_lane(u).cast("int32") * by_lane(x.reshape(1, nb, 32)).cast("int32")).cast("float32")
    return (prod * scale.reshape(n, nb, 1, 1)).reshape(n, -1).sum(-1)


def data(rows: int, blocks: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows, blocks, 16), dtype=np.uint8)
    qh = rng.integers(0, 256, (rows, blocks, 4), dtype=np.uint8)
    x = rng.integers(-127, 128, (blocks, 32)).astype(np.int8)
    scale = rng.choice([0.25, 0.5, 1.0, 2.0], (rows, blocks)).astype(np.float32)
    return raw, qh, x, scale


def numpy_nibbles(raw: np.ndarray) -> np.ndarray:
    return np.concatenate([raw & 15, raw >> 4], axis=-1)


def numpy_fifth(qh: np.ndarray) -> np.ndarray:
    bits = (qh[..., :, None] >> np.arange(8, dtype=np.uint8)) & 1
    return (bits.reshape(*qh.shape[:-1], 32) * 16).astype(np.uint8)


def reference(u: np.ndarray, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    sums = (u.astype(np.int64) * x.astype(np.int64)).sum(-1)
    return (sums * scale.astype(np.float64)).sum(-1).astype(np.float32)


def instructions(t: Tensor) -> list[Inst]:
    """The instructions of the kernels computing ``t`` on the X86 renderer."""
    from tgcore.codegen import get_program
    from tgcore.schedule.kernelize import create_schedule
    r = X86Renderer()
    items, _ = create_schedule([t.uop], t.device)
    out: list[Inst] = []
    for si in items:
        if si.kind != "copy":
            spec = get_program(si.ast, r, 1)
            out += [i for i in r.lower(spec.name, list(spec.uops)) if isinstance(i, Inst)]
    return out


def sub_block_fields(raw: Tensor) -> Tensor:
    """``(N, nb, 16)`` bytes -> ``(N, nb, 32)`` as 2-bit fields: block ``b`` takes bits ``2(b % 4)`` and up of each
    byte (Q2_K's planes: the shift depends on the block, so it is one amount per block in a register)."""
    n, nb, _ = raw.shape
    plane = (Tensor.arange(nb, dtype="uint8", device=raw.device) % 4).reshape(1, nb, 1, 1) * 2
    return ((raw.reshape(n, nb, 1, 16).expand(n, nb, 2, 16) >> plane) & 3).reshape(n, nb, 32)


def sub_block_masks(raw: Tensor) -> Tensor:
    """``(N, nb, 16)`` bytes -> ``(N, nb, 32)``: even blocks keep the low nibble, odd ones the high (Q4_K's masks:
    one mask per block, a byte broadcast)."""
    n, nb, _ = raw.shape
    high = (Tensor.arange(nb, dtype="uint8", device=raw.device) % 2).reshape(1, nb, 1, 1)
    wide = raw.reshape(n, nb, 1, 16).expand(n, nb, 2, 16)
    return ((wide & ((high.full_like(1) - high) * 15)) | ((wide >> 4) & (high * 15))).reshape(n, nb, 32)


def numpy_fields(raw: np.ndarray) -> np.ndarray:
    shifts = (np.arange(raw.shape[1]) % 4 * 2).astype(np.uint8)[None, :, None]
    return np.concatenate([(raw >> shifts) & 3] * 2, axis=-1)


def numpy_masks(raw: np.ndarray) -> np.ndarray:
    odd = (np.arange(raw.shape[1]) % 2 == 1)[None, :, None]
    return np.concatenate([np.where(odd, raw >> 4, raw & 15)] * 2, axis=-1)


TABLE16 = np.random.default_rng(16).integers(0, 256, 16, dtype=np.uint8)   # a 4-bit code's values (IQ4_NL's + 128)


CASES = {  # name -> (the unsigned bytes from (raw, qh) as tensor ops, the same in numpy)
    "bytes": (lambda raw, qh: (raw.reshape(raw.shape[0], raw.shape[1], 1, 16) ^ 0x80).expand(
        raw.shape[0], raw.shape[1], 2, 16).reshape(raw.shape[0], raw.shape[1], 32),
        lambda raw, qh: np.concatenate([raw ^ 0x80] * 2, axis=-1)),
    "nibbles": (lambda raw, qh: nibbles(raw), lambda raw, qh: numpy_nibbles(raw)),
    "nibbles and fifth bits": (lambda raw, qh: nibbles(raw) | fifth_bits(qh),
                               lambda raw, qh: numpy_nibbles(raw) | numpy_fifth(qh)),
    "fields shifted per block": (lambda raw, qh: sub_block_fields(raw), lambda raw, qh: numpy_fields(raw)),
    "nibbles masked per block": (lambda raw, qh: sub_block_masks(raw), lambda raw, qh: numpy_masks(raw)),
    "nibbles looked up in a 16-byte table": (
        lambda raw, qh: Tensor(TABLE16, device=raw.device).take(nibbles(raw).cast("int32")),
        lambda raw, qh: TABLE16[numpy_nibbles(raw)]),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("rows", [1, 7, 13])
def test_block_dot_products_match_numpy(case, rows):
    """Odd row counts (the kernel takes 4 rows together), 5 blocks per row."""
    raw, qh, x, scale = data(rows, 5, seed=rows)
    ours, theirs = CASES[case]
    out = block_dot(ours(Tensor(raw, device=X86), Tensor(qh, device=X86)), Tensor(x, device=X86),
                    Tensor(scale, device=X86)).numpy()
    np.testing.assert_array_equal(out, reference(theirs(raw, qh), x, scale))


@pytest.mark.parametrize("n", [64, 1000])
def test_table_lookups_outside_byte_dots_go_lane_by_lane(n):
    """Codegen gathers from a 16-byte table on X86 (``byte_table_lookups``); where no byte dot takes the lookup
    (an elementwise kernel) it is one load per lane, exact."""
    raw = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    r, table = Tensor(raw, device=X86), Tensor(TABLE16, device=X86)
    np.testing.assert_array_equal(table.take((r & 15).cast("int32")).numpy(), TABLE16[raw & 15])
    out = (table.take((r >> 4).cast("int32")).cast("float32") * 2).numpy()
    np.testing.assert_array_equal(out, TABLE16[raw >> 4].astype(np.float32) * 2)


@pytest.mark.parametrize("case", CASES)
def test_block_dots_are_vpdpbusd_on_byte_vectors(case):
    """One byte dot (vpdpbusd where there is VNNI) per block and row, and no byte taken out of or put into a vector
    one at a time."""
    raw, qh, x, scale = data(4, 3, seed=0)
    ours, _ = CASES[case]
    t = block_dot(ours(Tensor(raw, device=X86), Tensor(qh, device=X86)), Tensor(x, device=X86),
                  Tensor(scale, device=X86))
    ops = [i.op for i in instructions(t)]
    assert DOT_OPS[X86Renderer().dot_instruction] in ops
    assert Op.VPEXTRB not in ops and Op.VPINSRB not in ops
    if "table" in case:   # 32 bytes of the table: one vpshufb (Renderer.byte_table_lookups)
        assert Op.VPSHUFB in ops and X86Renderer().byte_table_lookups


def test_byte_dots_follow_the_cpu_probe():
    """The instruction is what the CPU and the chosen level allow: the EVEX vpdpbusd with AVX512-VNNI at the AVX-512
    level, else the VEX one with AVX-VNNI, else vpmaddubsw."""
    from tgcore.runtime.cpufeatures import cpu_features
    features = cpu_features().features
    for isa in ("avx2", "avx512"):
        r = X86Renderer(isa=isa)
        want = ("vpdpbusd" if isa == "avx512" and "avx512_vnni" in features
                else "{vex} vpdpbusd" if "avx_vnni" in features else "vpmaddubsw")
        assert r.dot_instruction == want and r.compiles_byte_dots
    assert not X86Renderer(dots="").compiles_byte_dots


def run_elsewhere(script: str, dots: str | None = None) -> list[str]:
    """``script`` in a process of its own (the device's renderer is made once per process) at the AVX2 level, with
    the byte dots' instruction forced to ``dots`` when given; its output's words."""
    import os
    import subprocess
    import sys
    force = ("import tg_x86.renderer as R\n_init = R.X86Renderer.__init__\n"
             f"R.X86Renderer.__init__ = lambda self, abi=R.HOST, isa=None, dots={dots!r}: _init(self, abi, isa, dots)\n"
             if dots is not None else "")
    env = {**os.environ, "TG_ISA": "avx2", "TG_PROGRAM_CACHE": "0",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", force + script], env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


AVX2_RUN = """
import numpy as np, test_x86_bytedot as t
from tgcore.tensor import Tensor
for case, (ours, theirs) in t.CASES.items():
    raw, qh, x, scale = t.data(7, 5, seed=7)
    x[0, :4] = -128   # (vpmaddubsw's worst pair: 2 * 255 * -128 saturates an int16)
    out = t.block_dot(ours(Tensor(raw, device=t.X86), Tensor(qh, device=t.X86)), Tensor(x, device=t.X86),
                      Tensor(scale, device=t.X86))
    print(sorted({i.op.name for i in t.instructions(out) if i.op.name.startswith(("VPDPBUSD", "VPMADD"))}))
    np.testing.assert_array_equal(out.numpy(), t.reference(theirs(raw, qh), x, scale))
"""


@pytest.mark.skipif(X86Renderer(isa="avx2").dot_instruction != "{vex} vpdpbusd", reason="no AVX-VNNI")
def test_avx2_level_dots_are_the_vex_vpdpbusd():
    """At the AVX2 level (TG_ISA=avx2) on an AVX-VNNI CPU: the VEX form only, the same sums as numpy."""
    assert set(run_elsewhere(AVX2_RUN)) == {"['VPDPBUSD_VEX']"}


def test_dots_without_vnni_are_exact():
    """Without VNNI: vpmaddubsw + vpmaddwd (vpmaddubsw saturates: bytes from 128 up go in as two nibbles), the same
    sums as numpy for every case, with -128 activations."""
    assert set(run_elsewhere(AVX2_RUN, dots="vpmaddubsw")) == {"['VPMADDUBSW',", "'VPMADDWD']"}


def test_repeated_lanes_are_computed_once():
    """A vector held lane by lane whose lanes repeat (a byte field shared by 4 lanes, as a K-quant's per-16 scale
    is; here a comparison reads the bytes too, so they are not widened in a vector): each distinct lane's and and
    int -> float conversion once (was once per lane), same values as numpy."""
    rng = np.random.default_rng(0)
    u = rng.integers(0, 256, (64, 2), dtype=np.uint8)
    y = rng.standard_normal((64, 8)).astype(np.float32)
    b = Tensor(u, device=X86).reshape(64, 2, 1).expand(64, 2, 4).reshape(64, 8) & 15
    t = b.cast("float32") * Tensor(y, device=X86) + (b < 3).cast("float32")
    ops = [i.op for i in instructions(t)]
    assert ops.count(Op.VCVTSI2SS) == ops.count(Op.AND) <= 4   # 8 when each lane was computed
    want = np.repeat(u, 4, axis=1) & 15
    np.testing.assert_array_equal(t.numpy(), want.astype(np.float32) * y + (want < 3).astype(np.float32))


# ---- output rows in the lanes (tg-gguf's row-interleaved weights: ``bytedot.row_lanes_rule``) ----
def row_lane_product(u: Tensor, x: Tensor, scale: Tensor) -> Tensor:
    """``u`` ``(groups, nb, 8, 8, 4)`` uint8 (``[r, b, g, l, k]``: row ``8r + l``'s element ``32b + 4g + k``, the
    bytes of a block's 8 rows interleaved by 4), ``x`` ``(M, nb, 32)`` int8, ``scale`` ``(groups, 8, nb)``: ``(M,
    8 groups)``, each block's products summed in int32, then scaled (tg-gguf's ``lanes.row_lanes_matmul`` without
    its offsets)."""
    groups, nb = u.shape[0], u.shape[1]
    m = x.shape[0]
    w = u.reshape(1, groups, nb, 8, 8, 4).permute(0, 1, 4, 2, 3, 5).cast("int32")
    prod = (w * x.reshape(m, 1, 1, nb, 8, 4).cast("int32")).cast("float32")
    return (prod * scale.reshape(1, groups, 8, nb, 1, 1)).reshape(m, groups * 8, nb * 32).sum(-1)


def row_lane_data(groups: int, nb: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, (groups, nb, 4, 8, 4), dtype=np.uint8)   # a Q4 block's nibbles, 2 per byte
    x = rng.integers(-128, 128, (m, nb, 32)).astype(np.int8)
    scale = rng.choice([0.25, 0.5, 1.0, 2.0], (groups, 8, nb)).astype(np.float32)
    return packed, x, scale


def row_lane_nibbles(packed: Tensor) -> Tensor:
    """``(groups, nb, 4, 8, 4)`` bytes -> ``(groups, nb, 8, 8, 4)``: steps ``g < 4`` the low nibbles, the others
    the high ones (the Q4 row-lane layout)."""
    groups, nb = packed.shape[0], packed.shape[1]
    half = Tensor.arange(2, dtype="uint8", device=packed.device).reshape(1, 1, 2, 1, 1, 1) * 4
    wide = packed.reshape(groups, nb, 1, 4, 8, 4).expand(groups, nb, 2, 4, 8, 4)
    return ((wide >> half) & 15).reshape(groups, nb, 8, 8, 4)


def row_lane_reference(u: np.ndarray, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The same sums in int64 and float64 (``u`` ``[r, b, g, l, k]``)."""
    rows = u.transpose(0, 3, 1, 2, 4).reshape(-1, u.shape[1], 32).astype(np.int64)   # [row, b, 4g + k]
    sums = np.einsum("rbe,mbe->mrb", rows, x.astype(np.int64))
    return (sums * scale.reshape(-1, u.shape[1]).astype(np.float64)).sum(-1).astype(np.float32)


ROW_LANE_CASES = {  # name -> (the unsigned bytes from the packed ones as tensor ops, the same in numpy)
    "bytes": (lambda p: p.reshape(p.shape[0], p.shape[1], 1, 4, 8, 4).expand(
        p.shape[0], p.shape[1], 2, 4, 8, 4).reshape(p.shape[0], p.shape[1], 8, 8, 4),
        lambda p: np.concatenate([p, p], axis=2)),
    "nibbles": (row_lane_nibbles, lambda p: np.concatenate([p & 15, p >> 4], axis=2)),
}


@pytest.mark.parametrize("case", ROW_LANE_CASES)
@pytest.mark.parametrize("groups,m", [(1, 1), (3, 3), (2, 5)])
def test_row_lane_dots_match_numpy(case, groups, m):
    """8, 24 and 16 output rows times 1, 3 and 5 activation rows, 9 blocks each: exact against numpy (sums of
    integers times powers of two)."""
    packed, x, scale = row_lane_data(groups, 9, m, seed=groups + m)
    ours, theirs = ROW_LANE_CASES[case]
    out = row_lane_product(ours(Tensor(packed, device=X86)), Tensor(x, device=X86), Tensor(scale, device=X86))
    np.testing.assert_array_equal(out.numpy(), row_lane_reference(theirs(packed), x, scale))


@pytest.mark.parametrize("case", ROW_LANE_CASES)
def test_row_lane_dots_are_chained_vpdpbusd(case):
    """Each block of 8 rows is 8 byte dots chained through vpdpbusd's accumulator (no zeroing between), each against
    4 activation bytes broadcast from memory (with AVX512-VNNI the EVEX vpdpbusd's own {1to8} memory operand, else a
    vpbroadcastd); no byte taken out of or put into a vector one at a time. Every instruction of the kernel is what
    capstone decodes from its bytes."""
    from tg_x86 import encode, select_form
    from tg_x86.listing import asm
    from tg_x86_testutil import LLVM_ONLY, decode_one, decoder, same_listing
    packed, x, scale = row_lane_data(2, 4, 1, seed=0)
    ours, _ = ROW_LANE_CASES[case]
    t = row_lane_product(ours(Tensor(packed, device=X86)), Tensor(x, device=X86), Tensor(scale, device=X86))
    insts = instructions(t)
    ops = [i.op for i in insts]
    dot = DOT_OPS[X86Renderer().dot_instruction]
    if dot is not Op.VPMADDUBSW:
        assert ops.count(dot) == 8 and ops.count(Op.VPXOR) + ops.count(Op.VXORPS) <= 2   # one zeroed start per block
    if dot is Op.VPDPBUSD:
        assert Op.VPBROADCASTD not in ops
        assert all(isinstance(i.operands[-1], Bcst) and i.operands[-1].count == 8 for i in insts if i.op is dot)
    else:
        assert ops.count(Op.VPBROADCASTD) == 8
        assert all(isinstance(i.operands[1], Mem) for i in insts if i.op is Op.VPBROADCASTD)
    assert Op.VPEXTRB not in ops and Op.VPINSRB not in ops
    # the nibble mask held in a register (bytedot.sel_held_constant), not read from memory by each vpand
    assert not [i for i in insts if i.op is Op.VPAND and isinstance(i.operands[-1], Mem)]
    md = decoder()
    for i in insts:
        if i.op not in LLVM_ONLY and not (i.operands and isinstance(i.operands[-1], Label)):
            decoded, size, _ = decode_one(md, encode(i))
            assert size == len(encode(i)) and same_listing(asm([i]), decoded, select_form(i)), (asm([i]), decoded)


def _vector_spills(insts: list[Inst]) -> list[Inst]:
    """Stores of vector registers to the stack (what the allocator's vector spills are: constants are stored by gpr
    moves, arguments are gprs)."""
    return [i for i in insts if i.op in (Op.VMOVUPS, Op.VMOVDQU) and isinstance(i.operands[0], Mem)
            and i.operands[0].base is not None and i.operands[0].base.name == "rsp"]


def test_held_constants_give_way_under_register_pressure():
    """5 activation rows (5 accumulators, each block's unpacked weight bytes shared by them): holding the nibble mask
    in a register made the allocator spill vectors; the renderer then selects the kernel again with the mask read
    from memory (no vector spill), exact against numpy."""
    from tgcore.codegen import get_program
    from tgcore.schedule.kernelize import create_schedule
    packed, x, scale = row_lane_data(2, 9, 5, seed=8)
    ours, theirs = ROW_LANE_CASES["nibbles"]
    t = row_lane_product(ours(Tensor(packed, device=X86)), Tensor(x, device=X86), Tensor(scale, device=X86))
    r = X86Renderer()
    items, _ = create_schedule([t.uop], t.device)
    kernels = [list(get_program(si.ast, r, 1).uops) for si in items if si.kind != "copy"]
    held = [ctx for ctx in (r.select_at_level(uops, hold_constants=True) for uops in kernels) if ctx.holds_constants]
    assert held and any(iv.vreg.cls != "gpr" for ctx in held for iv in r.choose_plan(ctx).spilled)  # the case arises
    assert not any(r.select(uops).holds_constants for uops in kernels)   # and select gave the mask up
    assert not _vector_spills(instructions(t))
    np.testing.assert_array_equal(t.numpy(), row_lane_reference(theirs(packed), x, scale))


AVX2_ROW_LANES_RUN = """
import numpy as np, test_x86_bytedot as t
from tgcore.tensor import Tensor
for case, (ours, theirs) in t.ROW_LANE_CASES.items():
    packed, x, scale = t.row_lane_data(3, 5, 2, seed=4)
    x[:, 0, :4] = -128   # (vpmaddubsw's worst pair: 2 * 255 * -128 saturates an int16)
    out = t.row_lane_product(ours(Tensor(packed, device=t.X86)), Tensor(x, device=t.X86), Tensor(scale, device=t.X86))
    print(sorted({i.op.name for i in t.instructions(out) if i.op.name.startswith(("VPDPBUSD", "VPMADD"))}))
    np.testing.assert_array_equal(out.numpy(), t.row_lane_reference(theirs(packed), x, scale))
"""


@pytest.mark.skipif(X86Renderer(isa="avx2").dot_instruction != "{vex} vpdpbusd", reason="no AVX-VNNI")
def test_avx2_level_row_lane_dots_are_the_vex_vpdpbusd():
    """The row lanes at the AVX2 level on an AVX-VNNI CPU: the VEX form only, the same sums as numpy."""
    assert set(run_elsewhere(AVX2_ROW_LANES_RUN)) == {"['VPDPBUSD_VEX']"}


def test_row_lane_dots_without_vnni_are_exact():
    """The row lanes without VNNI: vpmaddubsw + vpmaddwd, each block's dots added with vpaddd, exact with -128
    activations."""
    assert set(run_elsewhere(AVX2_ROW_LANES_RUN, dots="vpmaddubsw")) == {"['VPMADDUBSW',", "'VPMADDWD']"}

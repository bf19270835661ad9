"""Byte-dot products with the output rows in the vector lanes (``heuristic.row_lane_byte_dot_opts``,
``cbytedot.row_lanes_dot``): a weight's rows interleaved by 4 bytes, the activations' bytes the same in every lane.
Against numpy (integer scales: exact in float32), at odd batch sizes, and on the C renderer one chained byte
multiply-add per 4 elements of 8 rows."""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


def _kernel_sources(t: Tensor, device: str) -> list[str]:
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    items = [si for si in create_schedule([t.uop], device)[0] if si.kind != "copy"]
    return [get_program(si.ast, open_device(device).renderer).src for si in items]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch,groups,blocks", [(1, 2, 3), (3, 3, 2), (8, 2, 2)])
def test_rows_in_lanes_are_exact(batch, groups, blocks, device):
    """``out[m, 8r + l] = sum_b s[r, b, l] * t[m, b] * sum_{g,k} (u[r, b, g, l, k] - 8) * x[m, 32b + 4g + k]``: exact
    against numpy; the C renderer sums each block in int32 with 8 calls of the byte-dot helper, each added to the
    last (its accumulator input)."""
    rng = np.random.default_rng(batch * 100 + groups * 10 + blocks)
    u = rng.integers(0, 256, (groups, blocks, 8, 8, 4)).astype(np.uint8)  # (group, block, g, lane, k)
    s = rng.integers(-4, 5, (groups, blocks, 8)).astype(np.float32)
    x = rng.integers(-128, 128, (batch, blocks * 32)).astype(np.int8)
    t = rng.integers(1, 4, (batch, blocks)).astype(np.float32)
    ut, st, xt, tt = (Tensor(a, device=device).realize() for a in (u, s, x, t))

    def product() -> Tensor:
        w = ut.reshape(1, groups, blocks, 8, 8, 4).permute(0, 1, 4, 2, 3, 5).cast("int32")  # (1, group, lane, b, g, k)
        xi = xt.reshape(batch, 1, 1, blocks, 8, 4).cast("int32")
        scale = st.permute(0, 2, 1).reshape(1, groups, 8, blocks, 1, 1) * tt.reshape(batch, 1, 1, blocks, 1, 1)
        value = (w * xi + xi * -8).cast("float32") * scale
        return value.reshape(batch, groups * 8, blocks * 32).sum(-1)
    sums = np.einsum("rbglk,mbgk->mrlb", u.astype(np.int64) - 8, x.reshape(batch, blocks, 8, 4).astype(np.int64))
    ref = (sums * s.transpose(0, 2, 1)[None] * t[:, None, None, :]).sum(-1).reshape(batch, groups * 8)
    assert np.abs(ref).max() < 2 ** 24
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device == "CPU":
        (source,) = _kernel_sources(product(), device)
        # 7 chained calls per block and batch row, each reading its 4 activation bytes from memory (``cbroadcastdot``)
        assert source.count("tg_dot4_bcst_acc(") >= 7 + 1  # (+ the helper's macro)


def _chained_dots(source: str) -> int:
    """Calls of the chained byte-dot helpers in a kernel's C (each adds to its accumulator: ``tg_dot4_u8i8_acc``, or
    ``tg_dot4_bcst_acc`` where the activation bytes are a broadcast from memory: ``cbroadcastdot``), with their
    definitions."""
    return source.count("tg_dot4_u8i8_acc(") + source.count("tg_dot4_bcst_acc(")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("batch", [1, 3])
def test_rows_in_lanes_with_a_scale_per_16_are_exact(batch, device):
    """A scale per 16 elements of each row (Q2_K's): the reduction is blocked by 16 (``heuristic._factor_block``), each
    block's sum in int32 from 4 chained byte multiply-adds, then scaled; exact against numpy. Blocked by 32 as before,
    the scales stayed inside the block's sum and no byte dot was made."""
    groups, blocks = 2, 6  # blocks of 16
    rng = np.random.default_rng(batch)
    u = rng.integers(0, 256, (groups, blocks, 4, 8, 4)).astype(np.uint8)  # (group, block, g, lane, k)
    s = rng.integers(-4, 5, (groups, blocks, 8)).astype(np.float32)
    x = rng.integers(-128, 128, (batch, blocks * 16)).astype(np.int8)
    t = rng.integers(1, 4, (batch, blocks // 2)).astype(np.float32)  # an activation scale per 32
    ut, st, xt, tt = (Tensor(a, device=device).realize() for a in (u, s, x, t))

    def product() -> Tensor:
        w = ut.reshape(1, groups, blocks, 4, 8, 4).permute(0, 1, 4, 2, 3, 5).cast("int32")
        xi = xt.reshape(batch, 1, 1, blocks, 4, 4).cast("int32")
        per_32 = tt.reshape(batch, blocks // 2, 1).expand(batch, blocks // 2, 2).reshape(batch, 1, 1, blocks, 1, 1)
        scale = st.permute(0, 2, 1).reshape(1, groups, 8, blocks, 1, 1) * per_32
        return ((w * xi).cast("float32") * scale).reshape(batch, groups * 8, blocks * 16).sum(-1)
    sums = np.einsum("rbglk,mbgk->mrlb", u.astype(np.int64), x.reshape(batch, blocks, 4, 4).astype(np.int64))
    ref = (sums * s.transpose(0, 2, 1)[None] * np.repeat(t, 2, 1)[:, None, None, :]).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.reshape(batch, groups * 8).astype(np.float32))
    if device == "CPU":
        (source,) = _kernel_sources(product(), device)
        assert _chained_dots(source) >= 3 * batch + 1  # 3 chained calls per block and batch row


@pytest.mark.parametrize("device", DEVICES)
def test_rows_in_lanes_with_an_integer_offset_per_block_are_exact(device):
    """An integer per block and batch row added to the byte products before their one conversion (tg-gguf's Q6_K:
    ``-32 sum x`` spread as ``-2 sum x`` per element, int16): still a byte dot (``heuristic._byte_dot`` looks at the
    products, not every integer in the sum), the row-lane plan's chained multiply-adds; exact against numpy."""
    batch, groups, blocks = 3, 2, 4  # blocks of 16
    rng = np.random.default_rng(11)
    u = rng.integers(0, 64, (groups, blocks, 4, 8, 4)).astype(np.uint8)
    s = rng.integers(-4, 5, (groups, blocks, 8)).astype(np.float32)
    x = rng.integers(-128, 128, (batch, blocks * 16)).astype(np.int8)
    c = (x.reshape(batch, blocks, 16).astype(np.int64).sum(-1) * -2).astype(np.int16)
    ut, st, xt, ct = (Tensor(a, device=device).realize() for a in (u, s, x, c))

    def product() -> Tensor:
        w = ut.reshape(1, groups, blocks, 4, 8, 4).permute(0, 1, 4, 2, 3, 5).cast("int32")
        xi = xt.reshape(batch, 1, 1, blocks, 4, 4).cast("int32")
        value = (w * xi + ct.reshape(batch, 1, 1, blocks, 1, 1).cast("int32")).cast("float32")
        return (value * st.permute(0, 2, 1).reshape(1, groups, 8, blocks, 1, 1)).reshape(batch, groups * 8, -1).sum(-1)
    sums = np.einsum("rbglk,mbgk->mrlb", u.astype(np.int64) - 32, x.reshape(batch, blocks, 4, 4).astype(np.int64))
    ref = (sums * s.transpose(0, 2, 1)[None]).sum(-1).reshape(batch, groups * 8)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device == "CPU":
        (source,) = _kernel_sources(product(), device)
        assert _chained_dots(source) >= 3 * batch + 1  # 3 chained calls per block and batch row


def test_unshuffled_only_drops_a_shuffle_of_one_repeated_word():
    """``cbytedot._unshuffled``: lanes ``i % 4`` of 8 bytes are the bytes themselves when the 8 bytes are one word
    twice (``_repeated``'s broadcast), and stay a shuffle when the two words differ."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytedot import _unshuffled
    from tgcore.uop import Ops, UOp
    a, b = (UOp(Ops.DEFINE_VAR, dtypes.uint32, (), (name, 0, 9)) for name in ("a", "b"))

    def first_word_repeated(words: tuple[UOp, UOp]) -> tuple[UOp, UOp]:
        whole = UOp(Ops.BITCAST, dtypes.uint8.vec(8), (UOp(Ops.VECTORIZE, dtypes.uint32.vec(2), words),))
        return whole, UOp(Ops.VECTORIZE, whole.dtype, tuple(UOp(Ops.GEP, dtypes.uint8, (whole,), (i % 4,))
                                                            for i in range(8)))
    whole, shuffled = first_word_repeated((a, a))
    assert _unshuffled(shuffled) is whole
    whole, shuffled = first_word_repeated((a, b))
    assert _unshuffled(shuffled) is shuffled


HELPER_FLAGS = [["-mavx2", "-mfma"], ["-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]]


def _built_dot(src: str, flags: list[str], vnni_needs: set[str], tmp_path: Any, args: int) -> Any:
    """``src``'s C function ``dot`` (``args`` pointers) built with ``flags`` as a shared library, through ctypes;
    skipped where the CPU lacks what the flags target (``vnni_needs`` besides AVX2/FMA with -mavx512vnni)."""
    import ctypes

    from tgcore.runtime.compiler import ClangCompiler, CompilerNotFoundError
    from tgcore.runtime.cpufeatures import cpu_features
    needed = {"avx2", "fma"} | (vnni_needs if "-mavx512vnni" in flags else set())
    if not needed <= cpu_features().features:
        pytest.skip(f"needs {sorted(needed)}")
    try:
        library = ClangCompiler(flags=["-O2", *flags, "-shared", "-fPIC"]).compile(src)
    except CompilerNotFoundError:
        pytest.skip("no C compiler")
    (tmp_path / "dot.so").write_bytes(library)
    dot = ctypes.CDLL(str(tmp_path / "dot.so")).dot
    dot.argtypes = [ctypes.c_void_p] * args
    return dot


# the helpers' int32 starting sums, the first and last a dot of 4 extreme bytes (4 * 255 * 128 = 130560) from overflow
ACC_START = [-2147483647 + 130560, -128 * 127, -1, 0, 1, 5000, 65535, 2147483647 - 130560]


def _extreme_cases(size: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Unsigned and signed operands of ``size`` bytes: all 255 times all -128, all 255 times all 127 (the largest
    products of either sign) and one random pair."""
    rng = np.random.default_rng(seed)
    return [(np.full(size, 255, np.uint8), np.full(size, -128, np.int8)),
            (np.full(size, 255, np.uint8), np.full(size, 127, np.int8)),
            (rng.integers(0, 256, size).astype(np.uint8), rng.integers(-128, 128, size).astype(np.int8))]


@pytest.mark.parametrize("flags", HELPER_FLAGS, ids=["plain", "vnni"])
def test_broadcast_dot_helper_matches_numpy(flags, tmp_path):
    """``cbroadcastdot``'s helpers, built without and with AVX512-VNNI (the plain helper on the broadcast word, one
    ``vpdpbusd`` reading it): lane l sums bytes 4l .. 4l+3 of an unsigned 32-byte vector times the same 4 signed bytes
    of memory, at the extremes of both ranges, alone and added to an int32 vector."""
    from tgcore.renderer.cbroadcastdot import BCST_PREAMBLE, BCST_TYPES
    from tgcore.renderer.cbytedot import DOT_PREAMBLE
    from tgcore.renderer.cstyle import vector_typedef
    src = "".join(vector_typedef(d) + "\n" for d in BCST_TYPES) + DOT_PREAMBLE + BCST_PREAMBLE + (
        "void dot(const unsigned char* a, const signed char* b, int* out) {\n"
        "  tg_uint8x32 x; __builtin_memcpy(&x, a, 32);\n"
        "  tg_int32x8 r = tg_dot4_bcst(x, b[1]); __builtin_memcpy(out, &r, 32);\n"
        "  tg_int32x8 c = {-2147483647 + 130560, -128 * 127, -1, 0, 1, 5000, 65535, 2147483647 - 130560};\n"
        "  r = tg_dot4_bcst_acc(c, x, b[1]); __builtin_memcpy(out + 8, &r, 32); }\n")
    dot = _built_dot(src, flags, {"avx512_vnni", "avx512vl"}, tmp_path, 3)
    c = np.array(ACC_START, np.int64)
    for a, b in _extreme_cases(32, seed=len(flags)):
        out = np.zeros(16, np.int32)
        dot(a.ctypes.data, b.ctypes.data, out.ctypes.data)
        expected = (a.astype(np.int64).reshape(8, 4) * b[1:5]).sum(-1)  # (the word at byte 1: no alignment)
        np.testing.assert_array_equal(out[:8], expected)
        np.testing.assert_array_equal(out[8:], c + expected)


@pytest.mark.parametrize("device", DEVICES)
def test_rows_in_lanes_with_bits_shifted_per_block_are_exact(device):
    """A weight's bit per element kept 8 to a byte for a pair of blocks of 16 (tg-gguf's Q3_K third bits: element
    ``4g + k`` of block ``2c + p`` at bit ``4p + g`` of byte ``k``), taken out by a shift that changes with the block
    (``>> 4p``), then per step moved to bit 4 (``<< 4 - g``, masked) beside 2-bit values: exact against numpy; on the
    C renderer each block's bytes are shifted as 32-bit lanes by that amount (``cbytevectors.shift_by_one_amount``),
    no byte vector by a variable (gcc widened each half to 16-bit lanes)."""
    import re
    batch, groups, pairs = 2, 2, 3
    rng = np.random.default_rng(29)
    bits = rng.integers(0, 256, (groups, pairs, 8, 4)).astype(np.uint8)  # (group, pair, lane, k)
    low = rng.integers(0, 4, (groups, pairs * 2, 4, 8, 4)).astype(np.uint8)  # (group, block, g, lane, k)
    s = rng.integers(-4, 5, (groups, pairs * 2, 8)).astype(np.float32)
    x = rng.integers(-128, 128, (batch, pairs * 32)).astype(np.int8)
    bt, lt, st, xt = (Tensor(a, device=device).realize() for a in (bits, low, s, x))

    def product() -> Tensor:
        shifted = bt.reshape(1, groups, pairs, 1, 1, 8, 4) >> (Tensor.arange(2, dtype="uint8", device=device)
                                                                .reshape(1, 1, 1, 2, 1, 1, 1) * 4)
        step = Tensor.arange(4, dtype="uint8", device=device).reshape(1, 1, 1, 1, 4, 1, 1)
        third = ((shifted.expand(1, groups, pairs, 2, 4, 8, 4) << (step.full_like(4) - step)) & 16)
        u = lt.reshape(1, groups, pairs * 2, 4, 8, 4) | third.reshape(1, groups, pairs * 2, 4, 8, 4)
        w = u.permute(0, 1, 4, 2, 3, 5).cast("int32")  # (1, group, lane, block, g, k)
        xi = xt.reshape(batch, 1, 1, pairs * 2, 4, 4).cast("int32")
        scale = st.permute(0, 2, 1).reshape(1, groups, 8, pairs * 2, 1, 1)
        return ((w * xi).cast("float32") * scale).reshape(batch, groups * 8, pairs * 32).sum(-1)
    p, g = np.arange(2).reshape(1, 1, 2, 1, 1, 1), np.arange(4).reshape(1, 1, 1, 4, 1, 1)
    third = ((bits[:, :, None, None].astype(np.int64) >> (4 * p + g)) & 1) * 16  # (group, pair, p, g, lane, k)
    u = low.astype(np.int64) + third.reshape(groups, pairs * 2, 4, 8, 4)
    sums = np.einsum("rbglk,mbgk->mrlb", u, x.reshape(batch, pairs * 2, 4, 4).astype(np.int64))
    ref = (sums * s.transpose(0, 2, 1)[None]).sum(-1).reshape(batch, groups * 8)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device == "CPU":
        (source,) = _kernel_sources(product(), device)
        assert _chained_dots(source) >= 3 * batch + 1  # 3 chained calls per block and batch row
        variable = re.compile(r"tg_uint8x32 \w+ = \(\w+>>vec\d+\)")  # bytes shifted by a vector of one variable
        assert not variable.search(source) and re.search(r"tg_uint32x8 \w+ = \(\w+>>vec\d+\)", source)


@pytest.mark.parametrize("flags", HELPER_FLAGS, ids=["plain", "vnni"])
def test_sixteen_lane_dot_helpers_match_numpy(flags, tmp_path):
    """``cbroadcastdot``'s 16-lane helpers (16 weight rows per 512-bit vector), built without AVX512-VNNI (lane by
    lane) and with it (a zmm ``vpdpbusd``, the broadcast one reading its word {1to16}): lane l sums bytes 4l .. 4l+3 of
    an unsigned 64-byte vector times a signed one (or the same 4 bytes of memory), alone and added to an int32
    vector, at the extremes of both ranges."""
    from tgcore.renderer.cbroadcastdot import BCST16_PREAMBLE, DOT16_PREAMBLE, DOT16_TYPES
    from tgcore.renderer.cstyle import vector_typedef
    src = "".join(vector_typedef(d) + "\n" for d in DOT16_TYPES) + DOT16_PREAMBLE + BCST16_PREAMBLE + (
        "void dot(const unsigned char* a, const signed char* b, const int* c, int* out) {\n"
        "  tg_uint8x64 x; __builtin_memcpy(&x, a, 64); tg_int8x64 y; __builtin_memcpy(&y, b, 64);\n"
        "  tg_int32x16 z; __builtin_memcpy(&z, c, 64);\n"
        "  tg_int32x16 r = tg_dot4_u8i8_x16(x, y); __builtin_memcpy(out, &r, 64);\n"
        "  r = tg_dot4_u8i8_x16_acc(z, x, y); __builtin_memcpy(out + 16, &r, 64);\n"
        "  r = tg_dot4_bcst_x16(x, b[1]); __builtin_memcpy(out + 32, &r, 64);\n"
        "  r = tg_dot4_bcst_x16_acc(z, x, b[1]); __builtin_memcpy(out + 48, &r, 64); }\n")
    dot = _built_dot(src, flags, {"avx512_vnni", "avx512f"}, tmp_path, 4)
    c = np.array(ACC_START * 2, np.int32)
    for a, b in _extreme_cases(64, seed=len(flags)):
        out = np.zeros(64, np.int32)
        dot(a.ctypes.data, b.ctypes.data, c.ctypes.data, out.ctypes.data)
        wide = a.astype(np.int64).reshape(16, 4)
        expected = (wide * b.reshape(16, 4)).sum(-1)
        broadcast = (wide * b[1:5]).sum(-1)  # (the word at byte 1: no alignment)
        for got, want in zip(np.split(out, 4), (expected, c + expected, broadcast, c + broadcast), strict=True):
            np.testing.assert_array_equal(got, want)


def test_block_offsets_are_scaled_by_the_block_count_once_per_block():
    """A row-lane product with an offset per weight row and block times each batch row's activation sum spread over
    the block (tg-gguf's Q4_1: ``m * sum x``, the sum a 32nd per element): exact against numpy at 8 batch rows, and the
    block's count (32) multiplies the weight row's offsets once per block, shared by the 8 unrolled batch rows
    (``blocks._count_first``), not each row's product."""
    from tgcore.codegen import get_program
    from tgcore.dtype import dtypes
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    from tgcore.uop import Ops, UOp
    batch, groups, blocks = 8, 2, 3
    rng = np.random.default_rng(5)
    u = rng.integers(0, 16, (groups, blocks, 8, 8, 4)).astype(np.uint8)
    s = rng.integers(-4, 5, (groups, blocks, 8)).astype(np.float32)
    m = rng.integers(-6, 7, (groups, blocks, 8)).astype(np.float32)
    x = rng.integers(-128, 128, (batch, blocks * 32)).astype(np.int8)
    t = (2.0 ** rng.integers(-2, 3, (batch, blocks))).astype(np.float32)
    ut, st, mt, xt, tt = (Tensor(a).realize() for a in (u, s, m, x, t))
    sums = (xt.reshape(batch, blocks, 32).sum(-1, dtype="int32").cast("float32") * tt * (1 / 32)).contiguous().realize()
    w = ut.reshape(1, groups, blocks, 8, 8, 4).permute(0, 1, 4, 2, 3, 5).cast("int32")
    xi = xt.reshape(batch, 1, 1, blocks, 8, 4).cast("int32")
    scale = st.permute(0, 2, 1).reshape(1, groups, 8, blocks, 1, 1) * tt.reshape(batch, 1, 1, blocks, 1, 1)
    offset = mt.permute(0, 2, 1).reshape(1, groups, 8, blocks, 1, 1)
    value = (w * xi).cast("float32") * scale + sums.reshape(batch, 1, 1, blocks, 1, 1) * offset
    out = value.reshape(batch, groups * 8, blocks * 32).sum(-1)
    dots = np.einsum("rbglk,mbgk->mrlb", u.astype(np.int64), x.reshape(batch, blocks, 8, 4).astype(np.int64))
    xsum = x.reshape(batch, blocks, 32).astype(np.int64).sum(-1)
    ref = (dots * s.transpose(0, 2, 1)[None] * t[:, None, None, :]
           + m.transpose(0, 2, 1)[None] * (xsum * t)[:, None, None, :]).sum(-1).reshape(batch, groups * 8)
    (item,) = [si for si in create_schedule([out.uop], "CPU")[0] if si.kind != "copy"]
    uops = get_program(item.ast, open_device("CPU").renderer).uops

    def count(c: UOp) -> bool:  # the block count 32.0, maybe broadcast into the lanes
        return (c.op is Ops.CONST and c.arg == 32.0) or (c.op is Ops.VCONST and set(c.arg) == {32.0}) or (
            c.op is Ops.VECTORIZE and all(count(x) for x in c.src))
    assert len([x for x in uops if x.op is Ops.MUL and x.dtype.scalar() == dtypes.float32
                and any(count(c) for c in x.src)]) == 1
    np.testing.assert_array_equal(out.numpy(), ref.astype(np.float32))

"""Reductions over blocks (a per-block factor times per-element values, the shape of a quantized dot product):
factors constant over a block leave the block's sum (``blocks.factor_blocks``); values against numpy for
shapes that do and do not fill the vector lanes, on every CPU renderer."""
import os
import re
from typing import Any

import numpy as np
import pytest

from tgcore.tensor import Tensor

DEVICES = [d for d in os.environ.get("TG_TEST_DEVICES", "CPU,PYTHON").split(",") if d]


@pytest.mark.parametrize("rows,blocks,k", [(1, 1, 8), (3, 5, 8), (8, 7, 32), (13, 3, 16), (12, 3, 16), (4, 40, 32)])
def test_blockwise_scaled_matvec_matches_numpy(rows, blocks, k):
    """out[n] = sum_j x[j] * (a[n, j // k] * y[n, j] + b[n, j // k])"""
    rng = np.random.default_rng(rows * blocks + k)
    y = rng.standard_normal((rows, blocks * k)).astype(np.float32)
    a = rng.standard_normal((rows, blocks)).astype(np.float32)
    b = rng.standard_normal((rows, blocks)).astype(np.float32)
    x = rng.standard_normal(blocks * k).astype(np.float32)
    scale = Tensor(a).reshape(rows, blocks, 1).expand(rows, blocks, k).reshape(rows, blocks * k)
    shift = Tensor(b).reshape(rows, blocks, 1).expand(rows, blocks, k).reshape(rows, blocks * k)
    out = ((scale * Tensor(y) + shift) * Tensor(x)).sum(-1).numpy()
    ref = ((np.repeat(a, k, 1).astype(np.float64) * y + np.repeat(b, k, 1)) * x).sum(-1)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@pytest.mark.parametrize("rows,blocks", [(4, 3), (9, 2)])
def test_blockwise_integer_sum_is_exact(rows, blocks):
    rng = np.random.default_rng(rows)
    y = rng.integers(-50, 50, (rows, blocks * 32)).astype(np.int32)
    a = rng.integers(-9, 9, (rows, blocks)).astype(np.int32)
    x = rng.integers(-50, 50, blocks * 32).astype(np.int32)
    scale = Tensor(a).reshape(rows, blocks, 1).expand(rows, blocks, 32).reshape(rows, blocks * 32)
    out = (scale * Tensor(y) * Tensor(x) + Tensor(y)).sum(-1).numpy()
    np.testing.assert_array_equal(out, (np.repeat(a, 32, 1) * y * x + y).sum(-1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,blocks", [(7, 3), (12, 2)])
def test_block_sums_of_converted_byte_products_are_exact(rows, blocks, device):
    """out[n] = sum_b s[n, b] * sum_i float(u[n, b, i] * q[b, i]) for unsigned and signed bytes u, q (an integer
    quantized dot product): the in-block sums may run in int32 (exact: every partial sum is below 2**24), and with
    integer scales the whole result is an exact integer in float32, whatever the summation order."""
    rng = np.random.default_rng(rows + blocks)
    u = rng.integers(0, 256, (rows, blocks, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    dot = Tensor(u, device=device).cast("int32") * Tensor(q, device=device).cast("int32").reshape(1, blocks, 32)
    out = (dot.cast("float32") * Tensor(s, device=device)).reshape(rows, blocks * 32).sum(-1).numpy()
    ref = (s[..., 0].astype(np.int64) * (u.astype(np.int64) * q.astype(np.int64)).sum(-1)).sum(-1)
    np.testing.assert_array_equal(out, ref.astype(np.float32))


@pytest.mark.parametrize("device", [d for d in DEVICES if d.startswith("CPU")])
def test_byte_dot_blocks_are_left_to_the_c_compiler(device):
    """On a renderer whose compiler vectorizes byte dot products (C), such a block sum is blocked but not
    vectorized by codegen (gcc turns the scalar int32 loop into vpdpbusd); elsewhere it gets vector lanes."""
    from tgcore.codegen import default_policy, prepare_kernel
    from tgcore.codegen.optimize import OptOps
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    u = Tensor(np.zeros((8, 64), np.uint8), device=device).realize()
    q = Tensor(np.zeros((64,), np.int8), device=device).realize()
    s = Tensor(np.zeros((8, 2, 1), np.float32), device=device).realize()
    dot = (u.cast("int32") * q.cast("int32")).reshape(8, 2, 32).cast("float32") * s
    out = dot.reshape(8, 64).sum(-1)
    (item,) = [si for si in create_schedule([out.uop], device)[0] if si.kind != "copy"]
    renderer = open_device(device).renderer
    ops = {o.op for o in default_policy(prepare_kernel(item.ast, renderer), renderer, 1)}
    assert OptOps.BLOCK in ops
    assert (OptOps.UPCAST in ops) != renderer.compiles_byte_dots


def _lane_ordered(t: Tensor) -> Tensor:
    """(rows, blocks, 32) -> (rows, blocks * 32) summed as [k, l] = element 4l + k per block (tg-gguf's order)."""
    rows, blocks, _ = t.shape
    return t.reshape(rows, blocks, 8, 4).permute(0, 1, 3, 2).reshape(rows, blocks * 32)


def _kernel_source(t: Tensor, device: str) -> str:
    """The generated source of the one compute kernel that realizes ``t``."""
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    (item,) = [si for si in create_schedule([t.uop], device)[0] if si.kind != "copy"]
    return get_program(item.ast, open_device(device).renderer).src


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,blocks", [(7, 3), (12, 5)])
def test_byte_dots_in_lanes_of_neighbours_are_exact(rows, blocks, device):
    """The integer dot product tg-gguf writes for 32-element blocks (each block summed in lanes of 4 neighbouring
    bytes, a per-block scale and a per-block sum of the signed bytes): exact against numpy with integer scales. On
    the C renderer each lane's 4 byte products become one call of the byte-dot helper (vpdpbusd), the lanes keep
    their partial sums across blocks."""
    rng = np.random.default_rng(rows * blocks)
    u = rng.integers(0, 256, (rows, blocks, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    m = rng.integers(-3, 4, (rows, blocks, 1)).astype(np.float32)
    ut, qt = Tensor(u, device=device).realize(), Tensor(q, device=device).realize()
    st, mt = Tensor(s, device=device).realize(), Tensor(m, device=device).realize()

    def product() -> Tensor:
        value = (ut.cast("int32") * qt.cast("int32")).cast("float32") * st + qt.cast("int32").cast("float32") * mt
        return _lane_ordered(value).sum(-1)
    ref = (s[..., 0].astype(np.int64) * (u.astype(np.int64) * q.astype(np.int64)).sum(-1)
           + m[..., 0].astype(np.int64) * q.astype(np.int64).sum(-1)).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    assert "tg_dot4_u8i8(" in _kernel_source(product(), device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,blocks,offset", [(4, 3, -8), (9, 2, -128)])
def test_symmetric_byte_dots_start_from_the_offset_term(rows, blocks, offset, device):
    """A symmetric type's block sum (tg-gguf's Q4_0/Q8_0 form: ``sum u q + c sum q`` in int32, times the block's
    scale) against numpy; on the C renderer the offset term is the byte-dot call's accumulator input
    (``tg_dot4_u8i8_acc``), not an add per weight row."""
    rng = np.random.default_rng(rows * blocks - offset)
    u = rng.integers(0, 256, (rows, blocks, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    ut, qt, st = (Tensor(a, device=device).realize() for a in (u, q, s))

    def product() -> Tensor:
        q32 = qt.cast("int32")
        return _lane_ordered((ut.cast("int32") * q32 + q32 * offset).cast("float32") * st).sum(-1)
    ref = (s[..., 0].astype(np.int64) * ((u.astype(np.int64) + offset) * q.astype(np.int64)).sum(-1)).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    assert _kernel_source(product(), device).count("tg_dot4_u8i8_acc(") >= 2  # helper + call


def _c_function(src: str, name: str, flags: list[str], tmp_path: Any) -> Any:
    """Function ``name`` of three pointers from ``src`` compiled with ``flags`` (skips without a C compiler)."""
    import ctypes

    from tgcore.runtime.compiler import ClangCompiler, CompilerNotFoundError
    try:
        lib_bytes = ClangCompiler(flags=["-O2", *flags, "-shared", "-fPIC"]).compile(src)
    except CompilerNotFoundError:
        pytest.skip("no C compiler")
    path = tmp_path / "helpers.so"
    path.write_bytes(lib_bytes)
    fn = getattr(ctypes.CDLL(str(path)), name)
    fn.argtypes = [ctypes.c_void_p] * 3
    return fn


@pytest.mark.parametrize("flags", [["-mavx2", "-mfma"], ["-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl",
                                                         "-mavx512vnni"]], ids=["plain", "vnni"])
def test_byte_dot_helper_matches_numpy(flags, tmp_path):
    """The C renderer's byte-dot helpers, built without and with VNNI (their two branches): lane l sums bytes
    4l .. 4l+3 of an unsigned times a signed 32-byte vector, at the extremes of both ranges; the accumulating one
    adds that to an int32 vector (up to the int32 extremes)."""

    from tgcore.renderer.cbytedot import DOT_PREAMBLE, DOT_TYPES
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if "-mavx512vnni" in flags and not {"avx512_vnni", "avx512vl"} <= cpu_features().features:
        pytest.skip("no AVX512-VNNI here")
    if not {"avx2", "fma"} <= cpu_features().features:
        pytest.skip("no AVX2 here")
    src = "".join(vector_typedef(d) + "\n" for d in DOT_TYPES) + DOT_PREAMBLE + (
        "void dot(const unsigned char* a, const signed char* b, int* out) {\n"
        "  tg_uint8x32 x; tg_int8x32 y; __builtin_memcpy(&x, a, 32); __builtin_memcpy(&y, b, 32);\n"
        "  tg_int32x8 r = tg_dot4_u8i8(x, y); __builtin_memcpy(out, &r, 32);\n"
        "  tg_int32x8 c = {-2147483647 + 130560, -128 * 127, -1, 0, 1, 5000, 65535, 2147483647 - 130560};\n"
        "  r = tg_dot4_u8i8_acc(c, x, y); __builtin_memcpy(out + 8, &r, 32); }\n")
    dot = _c_function(src, "dot", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    c = np.array([-2147483647 + 130560, -128 * 127, -1, 0, 1, 5000, 65535, 2147483647 - 130560], np.int64)
    for a, b in [(np.full(32, 255, np.uint8), np.full(32, -128, np.int8)),
                 (np.full(32, 255, np.uint8), np.full(32, 127, np.int8)),
                 (rng.integers(0, 256, 32).astype(np.uint8), rng.integers(-128, 128, 32).astype(np.int8))]:
        out = np.zeros(16, np.int32)
        dot(a.ctypes.data, b.ctypes.data, out.ctypes.data)
        expected = (a.astype(np.int64) * b).reshape(8, 4).sum(-1)
        np.testing.assert_array_equal(out[:8], expected)
        np.testing.assert_array_equal(out[8:], c + expected)


@pytest.mark.parametrize("device", DEVICES)
def test_byte_table_lookups_in_lanes_are_exact(device):
    """A 4-bit code looked up in a table of 16 bytes (IQ4_NL's values plus 128) as the unsigned side of a byte dot
    product, in lanes of 4 neighbours: exact against numpy; on the C renderer the 32 lookups of a block are one
    call of the byte-shuffle helper feeding the byte-dot one."""
    rows, blocks = 5, 3
    rng = np.random.default_rng(11)
    table = rng.integers(0, 256, 16).astype(np.uint8)
    codes = rng.integers(0, 256, (rows, blocks, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    tt, ct = Tensor(table, device=device).realize(), Tensor(codes, device=device).realize()
    qt, st = Tensor(q, device=device).realize(), Tensor(s, device=device).realize()

    def product() -> Tensor:
        u = tt.take((ct & 15).cast("int32"))  # 4-bit codes: the lookup needs no bounds check
        return _lane_ordered((u.cast("int32") * qt.cast("int32")).cast("float32") * st).sum(-1)
    ref = (s[..., 0].astype(np.int64) * (table[codes & 15].astype(np.int64) * q.astype(np.int64)).sum(-1)).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    src = _kernel_source(product(), device)
    assert "tg_table16_u8(" in src and "tg_dot4_u8i8(" in src


def _table_lookup_function(preamble: str, helper: str, flags: list[str], tmp_path) -> Any:  # noqa: ANN001
    """``look(table, index, out)``: 32 index bytes through the C helper ``helper`` (defined by ``preamble``) into
    ``out``, built with ``flags``."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cstyle import vector_typedef
    src = vector_typedef(dtypes.uint8.vec(32)) + "\n" + preamble + (
        "void look(const unsigned char* t, const unsigned char* i, unsigned char* out) {\n"
        "  tg_uint8x32 x; __builtin_memcpy(&x, i, 32);\n"
        f"  tg_uint8x32 r = {helper}(t, x); __builtin_memcpy(out, &r, 32); }}\n")
    return _c_function(src, "look", flags, tmp_path)


@pytest.mark.parametrize("flags", [[], ["-mavx2"]], ids=["plain", "avx2"])
def test_byte_table_helper_matches_numpy(flags, tmp_path):
    """The C renderer's byte-table helper, built without and with AVX2 (its two branches): lane i is
    ``table[index[i]]`` for a table of 16 bytes."""

    from tgcore.renderer.cbytedot import BYTE_TABLE_PREAMBLE
    from tgcore.runtime.cpufeatures import cpu_features
    if flags and "avx2" not in cpu_features().features:
        pytest.skip("no AVX2 here")
    look = _table_lookup_function(BYTE_TABLE_PREAMBLE, "tg_table16_u8", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    table = rng.integers(0, 256, 16).astype(np.uint8)
    index = np.concatenate([np.arange(16), rng.integers(0, 16, 16)]).astype(np.uint8)
    out = np.zeros(32, np.uint8)
    look(table.ctypes.data, index.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out, table[index])


@pytest.mark.parametrize("flags", [["-mavx2"], ["-mavx2", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vbmi"]],
                         ids=["avx2", "vbmi"])
def test_byte_table_at_low_nibbles_helper_matches_numpy(flags, tmp_path):
    """The C renderer's helper that looks a 16-byte table up at the low 4 bits of each index byte, built without and
    with AVX512-VBMI (its two branches): lane i is ``table[index[i] & 15]`` for any index byte."""
    from tgcore.renderer.cbytedot import BYTE_TABLE_PREAMBLE
    from tgcore.renderer.cbytevectors import LOW4_TABLE_PREAMBLE
    from tgcore.runtime.cpufeatures import cpu_features
    if "-mavx512vbmi" in flags and not {"avx512vbmi", "avx512vl", "avx512bw"} <= cpu_features().features:
        pytest.skip("no AVX512-VBMI here")
    if "avx2" not in cpu_features().features:
        pytest.skip("no AVX2 here")
    look = _table_lookup_function(BYTE_TABLE_PREAMBLE + LOW4_TABLE_PREAMBLE, "tg_table16_u8_low4", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    table = rng.integers(0, 256, 16).astype(np.uint8)
    for index in (np.arange(32, dtype=np.uint8) * 8 + 3, rng.integers(0, 256, 32).astype(np.uint8)):
        out = np.zeros(32, np.uint8)
        look(table.ctypes.data, index.ctypes.data, out.ctypes.data)
        np.testing.assert_array_equal(out, table[index & 15])


@pytest.mark.parametrize("device", DEVICES)
def test_grid_rows_in_lanes_are_exact(device):
    """Rows of 8 bytes looked up at loaded indices (an i-quant grid: one index per 8 values) as the unsigned side of a
    byte dot product in lanes of 4 neighbours, the signed side's signs flipped by looked-up masks: exact against
    numpy; on the C renderer each block's 4 rows are one gather of 8-byte rows (``crowgather.row_gather``: not 32 byte
    loads)."""
    rows, blocks = 3, 2
    rng = np.random.default_rng(12)
    grid = rng.integers(0, 256, (32, 8)).astype(np.uint8)
    masks = -rng.integers(0, 2, (32, 8)).astype(np.int8)
    codes = rng.integers(0, 256, (rows, blocks, 4)).astype(np.uint8)
    q = rng.integers(-127, 128, (1, blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    weight = rng.integers(0, 256, (rows, 4096)).astype(np.uint8)  # the biggest input, as a weight is
    gt, mt = Tensor(grid.reshape(-1), device=device).realize(), Tensor(masks.reshape(-1), device=device).realize()
    ct, qt = Tensor(codes, device=device).realize(), Tensor(q, device=device).realize()
    wt, st = Tensor(weight, device=device).realize(), Tensor(s, device=device).realize()

    def product() -> Tensor:
        lane = Tensor.arange(8, device=device).reshape(1, 1, 1, 8)
        at = ((ct & 31).cast("int32") * 8).reshape(rows, blocks, 4, 1) + lane
        u, m = gt.take(at).reshape(rows, blocks, 32), mt.take(at).reshape(rows, blocks, 32)
        x = (qt ^ m) - m
        dot = _lane_ordered((u.cast("int32") * x.cast("int32")).cast("float32") * st).sum(-1)
        return dot + wt.shrink(((0, rows), (0, 1))).reshape(rows).cast("float32")
    code = codes.astype(np.int64) & 31
    signed = np.where(masks[code].reshape(rows, blocks, 32) < 0, -q.astype(np.int64), q.astype(np.int64))
    ref = (s[..., 0].astype(np.int64) * (grid[code].reshape(rows, blocks, 32).astype(np.int64) * signed).sum(-1)
           ).sum(-1) + weight[:, 0]
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    src = _kernel_source(product(), device)
    assert "tg_dot4_u8i8(" in src and len(re.findall(r"tg_rows8(_at)?\(data", src)) == 2  # grid rows, mask rows


@pytest.mark.parametrize("device", DEVICES)
def test_rows_at_offsets_from_shared_bits_are_gathered(device):
    """Rows of 8 bytes at an index made of a byte per row and 3 bits per row of a 16-bit word shared by the block's 4
    rows (IQ1_S's layout: ``qs | ((qh >> 3j) & 7) << 8``, plus a bit shared by all 4), or a nibble per row (IQ1_M's:
    ``(qh >> 4j) & 15``), and rows of 4 bytes at a byte per row (IQ3_XXS's): exact against numpy; on the C renderer
    the offsets are computed on int32 lanes (lane 0 has no shift, ``x & 7`` next to ``(x // 8) & 7``; the last
    nibble no mask, ``x // 4096``) and read by one gather per block."""
    rows, blocks = 3, 2
    rng = np.random.default_rng(13)
    grid8 = rng.integers(0, 256, (4096, 8)).astype(np.uint8)
    grid4 = rng.integers(0, 256, (256, 4)).astype(np.uint8)
    codes4, codes8 = (rng.integers(0, 256, (rows, blocks, n)).astype(np.uint8) for n in (4, 8))
    high = rng.integers(0, 1 << 16, (rows, blocks, 1)).astype(np.uint16)  # stored as 2 bytes (loads of bytes only)
    q = rng.integers(-127, 128, (1, blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    weight = rng.integers(0, 256, (rows, 16384)).astype(np.uint8)  # the biggest input, as a weight is
    st = Tensor(s, device=device).realize()
    g8, g4 = Tensor(grid8.reshape(-1), device=device).realize(), Tensor(grid4.reshape(-1), device=device).realize()
    c4, c8 = Tensor(codes4, device=device).realize(), Tensor(codes8, device=device).realize()
    ht = Tensor(high.view(np.uint8), device=device).realize()
    qt, wt = Tensor(q, device=device).realize(), Tensor(weight, device=device).realize()

    def product(wide: bool, bits: int = 3) -> Tensor:
        if wide:
            shifts = (Tensor.arange(4, device=device) * bits).reshape(1, 1, 4)
            h = ht[:, :, 0:1].cast("int32") | (ht[:, :, 1:2].cast("int32") << 8)
            index = c4.cast("int32") | (((h >> shifts) & ((1 << bits) - 1)) << 8)
            index = index | ((h >> 15) << 11) if bits == 3 else index
            at = (index * 8).reshape(rows, blocks, 4, 1) + Tensor.arange(8, device=device).reshape(1, 1, 1, 8)
            u = g8.take(at).reshape(rows, blocks, 32)
        else:
            lane = Tensor.arange(4, device=device).reshape(1, 1, 1, 4)
            at = (c8.cast("int32") * 4).reshape(rows, blocks, 8, 1) + lane
            u = g4.take(at).reshape(rows, blocks, 32)
        dot = _lane_ordered((u.cast("int32") * qt.cast("int32")).cast("float32") * st).sum(-1)
        return dot + wt.shrink(((0, rows), (0, 1))).reshape(rows).cast("float32")
    h = high.astype(np.int64)
    index = codes4.astype(np.int64) | (((h >> np.array([0, 3, 6, 9])) & 7) << 8) | ((h >> 15) << 11)
    nibbles = codes4.astype(np.int64) | (((h >> np.array([0, 4, 8, 12])) & 15) << 8)
    for wide, bits, u in ((True, 3, grid8[index]), (True, 4, grid8[nibbles]), (False, 3, grid4[codes8])):
        ref = (s[..., 0].astype(np.int64) * (u.reshape(rows, blocks, 32).astype(np.int64) * q.astype(np.int64)
                                             ).sum(-1)).sum(-1) + weight[:, 0]
        out = product(wide, bits)
        np.testing.assert_array_equal(out.numpy(), ref.astype(np.float32))
        if device == "CPU":
            from tgcore.codegen import get_program
            from tgcore.runtime.registry import open_device
            from tgcore.schedule.kernelize import create_schedule
            (item,) = [si for si in create_schedule([product(wide, bits).uop], device)[0] if si.kind != "copy"]
            src = get_program(item.ast, open_device(device).renderer).src
            assert len(re.findall(r"tg_rows8_at\(data" if wide else r"tg_rows4_at\(data", src)) == 1  # row numbers


@pytest.mark.parametrize("flags", [[], ["-mavx2"], ["-mavx2", "-mavx512f"]], ids=["plain", "avx2", "avx512f"])
def test_row_gather_helpers_match_numpy(flags, tmp_path):
    """The C renderer's row-gather helpers, built without and with AVX2 (and AVX512F: the 512-bit gather, their
    branches): 4 and 8 rows of 8 bytes and 8 and 16 rows of 4 bytes at byte offsets and at row numbers, and 4 bytes
    widened to int32 lanes."""
    from tgcore.renderer.crowgather import ROWS_PREAMBLE, ROWS_TYPES
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if any(f[2:] not in cpu_features().features for f in flags):
        pytest.skip(f"{' '.join(flags)}: not here")
    src = "".join(vector_typedef(d) + "\n" for d in ROWS_TYPES) + ROWS_PREAMBLE + (
        "void rows(const unsigned char* t, const int* at, unsigned char* out) {\n"
        "  tg_int32x4 a4; tg_int32x8 a8; __builtin_memcpy(&a4, at, 16); __builtin_memcpy(&a8, at + 4, 32);\n"
        "  tg_uint64x4 r8 = tg_rows8(t, a4); tg_uint32x8 r4 = tg_rows4(t, a8); __builtin_memcpy(out, &r8, 32);\n"
        "  __builtin_memcpy(out + 32, &r4, 32); tg_uint8x4 b; __builtin_memcpy(&b, t + at[0], 4);\n"
        "  tg_int32x4 w = tg_widen_u8x4(b); __builtin_memcpy(out + 64, &w, 16);\n"
        "  r8 = tg_rows8_at(t, a4 / 8); r4 = tg_rows4_at(t, a8 / 4); __builtin_memcpy(out + 80, &r8, 32);\n"
        "  __builtin_memcpy(out + 112, &r4, 32); tg_uint16x4 h; __builtin_memcpy(&h, t + at[1], 8);\n"
        "  w = tg_widen_u16x4(h); __builtin_memcpy(out + 144, &w, 16);\n"
        "  tg_uint64x8 r88 = tg_rows8x8(t, a8); __builtin_memcpy(out + 160, &r88, 64);\n"
        "  r88 = tg_rows8x8_at(t, a8 / 8); __builtin_memcpy(out + 224, &r88, 64); tg_int32x16 a16;\n"
        "  __builtin_memcpy(&a16, at, 64); tg_uint32x16 r416 = tg_rows4x16(t, a16);\n"
        "  __builtin_memcpy(out + 288, &r416, 64);\n"
        "  r416 = tg_rows4x16_at(t, a16 / 4); __builtin_memcpy(out + 352, &r416, 64); }\n")
    rows = _c_function(src, "rows", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    table = rng.integers(0, 256, 4096).astype(np.uint8)
    at = rng.integers(0, 4096 - 8, 16).astype(np.int32)
    out = np.zeros(416, np.uint8)
    rows(table.ctypes.data, at.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out[:32], np.concatenate([table[a:a + 8] for a in at[:4]]))
    np.testing.assert_array_equal(out[32:64], np.concatenate([table[a:a + 4] for a in at[4:12]]))
    np.testing.assert_array_equal(out[64:80].view(np.int32), table[at[0]:at[0] + 4].astype(np.int32))
    np.testing.assert_array_equal(out[80:112], np.concatenate([table[a // 8 * 8:a // 8 * 8 + 8] for a in at[:4]]))
    np.testing.assert_array_equal(out[112:144], np.concatenate([table[a // 4 * 4:a // 4 * 4 + 4] for a in at[4:12]]))
    np.testing.assert_array_equal(out[144:160].view(np.int32), table[at[1]:at[1] + 8].view("<u2").astype(np.int32))
    np.testing.assert_array_equal(out[160:224], np.concatenate([table[a:a + 8] for a in at[4:12]]))
    np.testing.assert_array_equal(out[224:288], np.concatenate([table[a // 8 * 8:a // 8 * 8 + 8] for a in at[4:12]]))
    np.testing.assert_array_equal(out[288:352], np.concatenate([table[a:a + 4] for a in at]))
    np.testing.assert_array_equal(out[352:], np.concatenate([table[a // 4 * 4:a // 4 * 4 + 4] for a in at]))


@pytest.mark.parametrize("flags", [[], ["-mavx2"], ["-mavx512bw"]], ids=["plain", "avx2", "avx512bw"])
def test_high_product_helper_matches_numpy(flags, tmp_path):
    """The C renderer's high half of 32 products of 16-bit lanes (``cbytedot.MULHI_PREAMBLE``), built without AVX2,
    with it and with AVX512BW (its three branches): ``(a * b) >> 16`` in numpy."""
    from tgcore.renderer.cbytedot import MULHI_PREAMBLE, MULHI_TYPES
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    needed = {"-mavx2": "avx2", "-mavx512bw": "avx512bw"}
    if any(needed[f] not in cpu_features().features for f in flags):
        pytest.skip(f"no {flags[0]} here")
    src = "".join(vector_typedef(d) + "\n" for d in MULHI_TYPES) + MULHI_PREAMBLE + (
        "void mulhi(const unsigned short* a, const unsigned short* b, unsigned short* out) {\n"
        "  tg_uint16x32 x, y; __builtin_memcpy(&x, a, 64); __builtin_memcpy(&y, b, 64);\n"
        "  tg_uint16x32 r = tg_mulhi_u16x32(x, y); __builtin_memcpy(out, &r, 64); }\n")
    mulhi = _c_function(src, "mulhi", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    a, b = (rng.integers(0, 1 << 16, 32).astype(np.uint16) for _ in range(2))
    a[:2], b[:2] = 0xFFFF, 0xFFFF  # the largest product
    out = np.zeros(32, np.uint16)
    mulhi(a.ctypes.data, b.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out, (a.astype(np.uint64) * b.astype(np.uint64)) >> 16)


def test_high_product_is_one_call():
    """``cbytedot.high_product`` on UOps: ``u16((u32(a) * 3) >> 16)`` and ``u16((u32(a) * 3) // 65536)`` on 32 lanes
    are one call of the helper at ``a`` and 3; a shift by another amount is left alone."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytedot import MULHI_HELPER, high_product
    from tgcore.uop import Ops, UOp
    half, wide = dtypes.uint16.vec(32), dtypes.uint32.vec(32)
    a = UOp(Ops.LOAD, half, (UOp(Ops.PARAM, dtypes.uint16.ptr(64), (), 1).index(UOp.const(dtypes.int32, 0)),))
    product = UOp(Ops.MUL, wide, (UOp(Ops.CAST, wide, (a,)), UOp.const(wide, 3)))
    for op, by in ((Ops.SHR, 16), (Ops.IDIV, 1 << 16)):
        call = high_product(UOp(Ops.CAST, half, (UOp(op, wide, (product, UOp.const(wide, by))),)))
        assert call is not None and call.op is Ops.CUSTOMI and call.arg == MULHI_HELPER and call.src[0] is a
        assert call.src[1].op is Ops.CONST and call.src[1].arg == 3
    assert high_product(UOp(Ops.CAST, half, (UOp(Ops.SHR, wide, (product, UOp.const(wide, 15))),))) is None


@pytest.mark.parametrize("device", DEVICES)
def test_byte_dot_with_an_integer_offset_is_exact(device):
    """A block's int32 sum of ``u * q + c * q`` (a weight's offset ``c`` times its scale, summed with the products
    under one float factor per block): exact against numpy; on the C renderer each term is one byte-dot call, the
    offset's scaled in int32."""
    rows, blocks = 5, 3
    rng = np.random.default_rng(13)
    u = rng.integers(0, 256, (rows, blocks, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    ut, qt = Tensor(u, device=device).realize(), Tensor(q, device=device).realize()
    st = Tensor(s, device=device).realize()

    def product() -> Tensor:
        value = ut.cast("int32") * qt.cast("int32") + qt.cast("int32") * -128
        return _lane_ordered(value.cast("float32") * st).sum(-1)
    q64 = q.astype(np.int64)
    ref = (s[..., 0].astype(np.int64) * ((u.astype(np.int64) - 128) * q64).sum(-1)).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    assert _kernel_source(product(), device).count("tg_dot4_u8i8(") >= 3  # helper + 2 calls


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,supers", [(7, 2), (12, 3)])
def test_sub_block_scales_unpacked_as_vectors_are_exact(rows, supers, device):
    """K-quant-shaped byte dots: super-blocks of 8 sub-blocks of 32, a float factor per super-block, and per
    sub-block a 4-bit scale and a 4-bit min packed two to a byte (nibble ``j % 2`` of byte ``j // 2``). Exact against
    numpy with integer factors; on the C renderer the policy spreads the sub-blocks (``OptOps.SPREAD``: the nibbles
    unpacked once per super-block as vectors, the sub-blocks unrolled)."""
    rng = np.random.default_rng(rows * supers)
    u = rng.integers(0, 16, (rows, supers, 8, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, supers, 8, 32)).astype(np.int8)
    packed = rng.integers(0, 256, (rows, supers, 2, 4)).astype(np.uint8)  # scales, then mins
    d = rng.integers(-3, 4, (rows, supers, 1)).astype(np.float32)
    ut, qt, pt, dt = (Tensor(a, device=device).realize() for a in (u, q, packed, d))

    def product() -> Tensor:
        shift = Tensor(np.array([0, 4] * 4, np.uint8), device=device).reshape(1, 1, 1, 8)
        nibbles = (pt.reshape(rows, supers, 2, 4, 1).expand(rows, supers, 2, 4, 2).reshape(rows, supers, 2, 8)
                   >> shift) & 15
        scale = nibbles[:, :, 0].cast("float32").reshape(rows, supers, 8, 1)
        minimum = nibbles[:, :, 1].cast("float32").reshape(rows, supers, 8, 1)
        dot = (ut.cast("int32") * qt.cast("int32")).cast("float32") * scale
        value = (dot - qt.cast("int32").cast("float32") * minimum) * dt.reshape(rows, supers, 1, 1)
        return _lane_ordered(value.reshape(rows, supers * 8, 32)).sum(-1)
    nib = np.stack([packed & 15, packed >> 4], -1).reshape(rows, supers, 2, 8).astype(np.int64)
    u64, q64 = u.astype(np.int64), q.astype(np.int64)
    ref = (d[..., 0].astype(np.int64)[..., None] * (nib[:, :, 0] * (u64 * q64).sum(-1)
                                                     - nib[:, :, 1] * q64.sum(-1))).sum((1, 2))
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    from tgcore.codegen import default_policy, prepare_kernel
    from tgcore.codegen.optimize import OptOps
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    (item,) = [si for si in create_schedule([product().uop], device)[0] if si.kind != "copy"]
    renderer = open_device(device).renderer
    assert OptOps.SPREAD in {o.op for o in default_policy(prepare_kernel(item.ast, renderer), renderer, 1)}


@pytest.mark.parametrize("device", DEVICES)
def test_one_scale_byte_per_sub_block_spread_is_exact(device):
    """As above with one 6-bit scale byte per sub-block (read at ``base + sub-block``): a SPREAD in halves gives
    the lanes the values 0-3, 0-3 and 4-7, 4-7, so the scales' read is not one vector load at ``base`` (review: it
    was, and every row summed the wrong scales)."""
    rows, supers = 7, 2
    rng = np.random.default_rng(1)
    u = rng.integers(0, 16, (rows, supers, 8, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, supers, 8, 32)).astype(np.int8)
    packed = rng.integers(0, 256, (rows, supers, 8)).astype(np.uint8)
    d = rng.integers(-3, 4, (rows, supers, 1)).astype(np.float32)
    ut, qt, pt, dt = (Tensor(a, device=device).realize() for a in (u, q, packed, d))
    scale = (pt & 63).cast("float32").reshape(rows, supers, 8, 1)
    dot = (ut.cast("int32") * qt.cast("int32")).cast("float32") * scale
    out = _lane_ordered((dot * dt.reshape(rows, supers, 1, 1)).reshape(rows, supers * 8, 32)).sum(-1)
    scales = (packed & 63).astype(np.int64)
    ref = (d[..., 0].astype(np.int64)[..., None] * (scales * (u.astype(np.int64) * q.astype(np.int64)).sum(-1)))
    np.testing.assert_array_equal(out.numpy(), ref.sum((1, 2)).astype(np.float32))


def test_row_gather_takes_rows_at_offsets_that_differ_only():
    """``crowgather.row_gather`` on UOps: 4 rows of 8 bytes at 8 times 4 consecutive loaded codes are one gather at
    the codes (row numbers, widened from one 4-byte load); the same 8 bytes in every lane (a broadcast: Q5's qh,
    ``_repeated``) are left alone (a gather of 4 equal rows would be slower than the broadcast)."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.crowgather import row_gather
    from tgcore.uop import Ops, UOp
    table, codes = UOp(Ops.PARAM, dtypes.uint8.ptr(4096), (), 1), UOp(Ops.PARAM, dtypes.uint8.ptr(64), (), 2)

    def row(at: UOp) -> UOp:
        return UOp(Ops.BITCAST, dtypes.uint64, (UOp(Ops.LOAD, dtypes.uint8.vec(8), (table.index(at),)),))

    def code(k: int) -> UOp:
        return UOp(Ops.LOAD, dtypes.uint8, (codes.index(UOp.const(dtypes.int32, k)),)).cast(dtypes.int32)
    assert row_gather(UOp(Ops.VECTORIZE, dtypes.uint64.vec(4), (row(UOp.const(dtypes.int32, 8)),) * 4)) is None
    gather = row_gather(UOp(Ops.VECTORIZE, dtypes.uint64.vec(4), tuple(row(code(k) * 8) for k in range(4))))
    assert gather is not None and gather.op is Ops.CUSTOMI and gather.arg == "tg_rows8_at"
    assert gather.src[0] is table and gather.src[1].dtype == dtypes.int32.vec(4)
    widened = gather.src[1]
    assert widened.op is Ops.CUSTOMI and widened.src[0].op is Ops.LOAD and widened.src[0].dtype == dtypes.uint8.vec(4)

    def word(k: int) -> UOp:  # a u16 code read as its 2 bytes (IQ2_XS: 9 bits of grid index, 7 of signs)
        two = UOp(Ops.LOAD, dtypes.uint8.vec(2), (codes.index(UOp.const(dtypes.int32, 2 * k)),))
        return UOp(Ops.BITCAST, dtypes.uint16, (two,)).cast(dtypes.int32)
    gather = row_gather(UOp(Ops.VECTORIZE, dtypes.uint64.vec(4), tuple(row((word(k) & 511) * 8) for k in range(4))))
    assert gather is not None and gather.arg == "tg_rows8_at"
    words = gather.src[1].src[0]  # (the codes masked, widened from one 8-byte load)
    assert words.op is Ops.CUSTOMI and words.arg == "tg_widen_u16x4"
    assert words.src[0].op is Ops.BITCAST and words.src[0].src[0].dtype == dtypes.uint8.vec(8)


@pytest.mark.parametrize("flags", [["-mavx2"], ["-mavx2", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vbmi"]],
                         ids=["plain", "vbmi"])
def test_bits_as_sixteen_helper_matches_numpy(flags, tmp_path):
    """The C renderer's helper that spreads a 32-bit word's bits over 32 bytes as 16 (Q5's fifth bits), built
    without and with AVX512-VBMI (its two branches): byte p is 16 exactly when bit p is set."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytevectors import BITS_PREAMBLE
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if "-mavx512vbmi" in flags and not {"avx512vbmi", "avx512vl", "avx512bw"} <= cpu_features().features:
        pytest.skip("no AVX512-VBMI here")
    if not {"avx2"} <= cpu_features().features:
        pytest.skip("no AVX2 here")
    src = vector_typedef(dtypes.uint8.vec(32)) + "\n" + BITS_PREAMBLE + (
        "void bits(const unsigned int* a, unsigned char* out, void* unused) {\n"
        "  tg_uint8x32 r = tg_bits_as16(*a); __builtin_memcpy(out, &r, 32); }\n")
    spread = _c_function(src, "bits", flags, tmp_path)
    for word in (0, 0xFFFFFFFF, 0x80000001, 0x12345678, 0xA5C3F00F):
        a = np.array([word], np.uint32)
        out = np.zeros(32, np.uint8)
        spread(a.ctypes.data, out.ctypes.data, None)
        np.testing.assert_array_equal(out, ((word >> np.arange(32)) & 1).astype(np.uint8) * 16)


def test_nearby_byte_loads_are_one_load_and_a_shuffle():
    """``cbytevectors.nearby_byte_loads`` on UOps: 8 bytes at offsets 96, 98, .., 103 from a row's index (a K-quant's
    scale bytes in its sub-blocks' order) are one load of the 8 bytes and a shuffle; bytes over more than 16, or
    whose first or last would be loaded without being read (a span of 5), are left alone."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytevectors import nearby_byte_loads
    from tgcore.uop import Ops, UOp
    buf, rows = UOp(Ops.PARAM, dtypes.uint8.ptr(4096), (), 1), UOp(Ops.PARAM, dtypes.int32.ptr(16), (), 2)
    row = UOp(Ops.LOAD, dtypes.int32, (rows.index(UOp.const(dtypes.int32, 3)),)) * 110  # a row's first byte

    def gathered(offsets: list[int]) -> UOp:
        return UOp(Ops.VECTORIZE, dtypes.uint8.vec(len(offsets)),
                   tuple(UOp(Ops.LOAD, dtypes.uint8, (buf.index(row + o),)) for o in offsets))
    order = [96, 98, 100, 102, 97, 99, 101, 103]
    combined = nearby_byte_loads(gathered(order))
    assert combined is not None and all(s.op is Ops.GEP for s in combined.src)
    (load,) = {s.src[0] for s in combined.src}
    assert load.op is Ops.LOAD and load.dtype == dtypes.uint8.vec(8)
    assert [s.arg[0] for s in combined.src] == [o - 96 for o in order]
    assert nearby_byte_loads(gathered([0, 2, 4, 1])) is None      # 5 bytes: the 4th would be read unasked
    assert nearby_byte_loads(gathered([0, 17, 4, 1])) is None     # over 16 bytes
    assert nearby_byte_loads(gathered([5] * 4)) is None           # one byte in every lane: a broadcast


@pytest.mark.parametrize("device", DEVICES)
def test_nibble_byte_dots_shift_words_and_mask_once(device):
    """A block's 16 bytes as 32 nibbles (low ones, then high ones: Q4_0's layout) in a byte dot product: exact
    against numpy; on the C renderer the 16 bytes are put in both halves and shifted in 32-bit lanes by 0 and 4 (a
    byte shift would mask each byte itself before the nibble mask), no byte vector is shifted."""
    rows, blocks = 6, 3
    rng = np.random.default_rng(17)
    packed = rng.integers(0, 256, (rows, blocks, 16)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    pt, qt = Tensor(packed, device=device).realize(), Tensor(q, device=device).realize()
    st = Tensor(s, device=device).realize()

    def product() -> Tensor:
        shifts = Tensor.arange(2, dtype="uint8", device=device).reshape(1, 1, 2, 1) * 4
        nibbles = ((pt.reshape(rows, blocks, 1, 16).expand(rows, blocks, 2, 16) >> shifts) & 15)
        value = nibbles.reshape(rows, blocks, 32).cast("int32") * qt.cast("int32")
        return _lane_ordered(value.cast("float32") * st).sum(-1)
    u = np.concatenate([packed & 15, packed >> 4], -1).astype(np.int64)
    ref = (s[..., 0].astype(np.int64) * (u * q.astype(np.int64)).sum(-1)).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    src = _kernel_source(product(), device)
    assert "tg_dot4_u8i8(" in src and "tg_uint32x8){0u, 0u, 0u, 0u, 4u, 4u, 4u, 4u}" in src
    assert "tg_uint8x16){4u" not in src and "tg_uint8x32){4u" not in src
    assert src.count("tg_repeat16(") >= 2  # the helper and its call: the 16 bytes in both halves, one broadcast


@pytest.mark.parametrize("device", DEVICES)
def test_byte_shifts_left_are_word_shifts(device):
    """A block's 32 bytes with two bits moved up by a left shift and masked (Q6_K's high bits, ``((q >> r) << l) &
    m`` with ``r`` 0) next to its low nibbles, in a byte dot product: exact against numpy; on the C renderer the
    left shift is one of 32-bit lanes (``cbytedot.shift_chain_in_words``: the bits a byte gets from the one below
    are masked off), no byte vector is shifted left."""
    rows, blocks = 6, 3
    rng = np.random.default_rng(19)
    packed = rng.integers(0, 256, (rows, blocks, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, blocks, 32)).astype(np.int8)
    s = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    pt, qt = Tensor(packed, device=device).realize(), Tensor(q, device=device).realize()
    st = Tensor(s, device=device).realize()

    def product() -> Tensor:
        u = (((pt >> 0) << 4) & 0x30) | (pt & 15)
        value = u.cast("int32") * qt.cast("int32")
        return _lane_ordered(value.cast("float32") * st).sum(-1)
    u = ((packed.astype(np.int64) << 4) & 0x30) | (packed & 15)
    ref = (s[..., 0].astype(np.int64) * (u * q.astype(np.int64)).sum(-1)).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    src = _kernel_source(product(), device)
    assert "tg_dot4_u8i8(" in src and "<<((tg_uint32x8){4u" in src.replace(" ", "")
    assert "<<((tg_uint8x32)" not in src.replace(" ", "") and "<<4)" not in src.replace(" ", "")


@pytest.mark.parametrize("flags", [["-msse4.2"], ["-mavx2"]], ids=["plain", "avx2"])
def test_repeat16_helper_matches_numpy(flags, tmp_path):
    """The C renderer's helper that puts 16 bytes in both halves of 32, built without and with AVX2 (its two
    branches)."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytevectors import REPEAT16_PREAMBLE
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if not {"avx2"} <= cpu_features().features:
        pytest.skip("no AVX2 here")
    types = "".join(vector_typedef(d) + "\n" for d in (dtypes.uint8.vec(16), dtypes.uint8.vec(32)))
    src = types + REPEAT16_PREAMBLE + (
        "void repeat(const unsigned char* a, unsigned char* out, void* unused) {\n"
        "  tg_uint8x16 h; __builtin_memcpy(&h, a, 16);\n"
        "  tg_uint8x32 r = tg_repeat16(h); __builtin_memcpy(out, &r, 32); }\n")
    repeat = _c_function(src, "repeat", flags, tmp_path)
    a = np.random.default_rng(5).integers(0, 256, 16).astype(np.uint8)
    out = np.zeros(32, np.uint8)
    repeat(a.ctypes.data, out.ctypes.data, None)
    np.testing.assert_array_equal(out, np.concatenate([a, a]))


def _half_of(b: Tensor) -> Tensor:
    """``(..., 2)`` bytes -> ``(...)``: their little-endian float16 as float32 (a quantized block's scale)."""
    return (b[..., 0].cast("uint16") | (b[..., 1].cast("uint16") << 8)).bitcast("float16").cast("float32")


@pytest.mark.parametrize("device", DEVICES)
def test_neighbouring_half_scales_are_read_as_one_pair(device):
    """A block's float16 scale and minimum at neighbouring bytes (Q4_1's d and m, then 16 bytes of data): both
    values exact against numpy (a float16 converts to float32 exactly), on the C renderer one 4-byte read converted
    at once instead of two."""
    rows, blocks = 5, 3
    rng = np.random.default_rng(23)
    halves = rng.integers(-8, 9, (rows, blocks, 2)).astype(np.float16) / np.float16(4)
    raw = np.concatenate([halves.view(np.uint8), rng.integers(0, 256, (rows, blocks, 16)).astype(np.uint8)], -1)
    a = rng.integers(-4, 5, (blocks,)).astype(np.float32)
    b = rng.integers(-4, 5, (blocks,)).astype(np.float32)
    rt, at, bt = (Tensor(v, device=device).realize() for v in (raw, a, b))

    def product() -> Tensor:
        d, m = _half_of(rt[:, :, 0:2]), _half_of(rt[:, :, 2:4])
        return (d * at + m * bt).sum(-1)
    h = halves.astype(np.float64)
    np.testing.assert_array_equal(product().numpy(), (h[..., 0] * a + h[..., 1] * b).sum(-1).astype(np.float32))
    if device != "CPU":
        return
    src = _kernel_source(product(), device)
    assert src.count("tg_half2_to_f32(") >= 2 and "tg_uint8x2 val" not in src  # the helper and its call


@pytest.mark.parametrize("flags", [["-mavx2"], ["-mavx2", "-mf16c"]], ids=["plain", "f16c"])
def test_half_pair_helper_matches_numpy(flags, tmp_path):
    """The C renderer's float16-pair helper, built without and with F16C (its two branches): normal, subnormal,
    infinite and NaN halves."""
    from tgcore.renderer.chalfpairs import HALF2_PREAMBLE
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if not {"avx2", "f16c"} <= cpu_features().features:
        pytest.skip("no AVX2 and F16C here")
    from tgcore.dtype import dtypes
    src = "".join(vector_typedef(d) + "\n" for d in (dtypes.float16.vec(2), dtypes.float32.vec(2))) + HALF2_PREAMBLE + (
        "void pair(const unsigned char* a, float* out, void* unused) {\n"
        "  tg_float16x2 h; __builtin_memcpy(&h, a, 4);\n"
        "  tg_float32x2 r = tg_half2_to_f32(h); __builtin_memcpy(out, &r, 8); }\n")
    pair = _c_function(src, "pair", flags, tmp_path)
    for values in ([1.5, -0.25], [6e-8, 65504.0], [np.inf, -np.inf]):
        h = np.array(values, np.float16)
        out = np.zeros(2, np.float32)
        pair(h.ctypes.data, out.ctypes.data, None)
        np.testing.assert_array_equal(out, h.astype(np.float32))
    h = np.array([np.nan, 2.0], np.float16)
    out = np.zeros(2, np.float32)
    pair(h.ctypes.data, out.ctypes.data, None)
    assert np.isnan(out[0]) and out[1] == 2.0


@pytest.mark.parametrize("flags", [[], ["-mavx2"], ["-mavx2", "-mavx512f"]], ids=["plain", "avx2", "avx512f"])
def test_widening_helpers_match_numpy(flags, tmp_path):
    """The C renderer's widenings of 8 lanes to int32 (``cwiden.WIDEN_PREAMBLE``), built without and with AVX2 (and
    AVX-512F: the 16-lane ones; their branches): unsigned and signed bytes, signed and unsigned 16-bit ints (negative
    ones and those past 32767 included), 8 and 16 of them."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.renderer.cwiden import WIDEN_PREAMBLE
    from tgcore.runtime.cpufeatures import cpu_features
    if any(f[2:] not in cpu_features().features for f in flags):
        pytest.skip(f"{' '.join(flags)}: not here")
    types = (dtypes.uint8.vec(8), dtypes.int8.vec(8), dtypes.int16.vec(8), dtypes.uint16.vec(8), dtypes.int16.vec(16),
             dtypes.uint16.vec(16))
    src = "".join(vector_typedef(d) + "\n" for d in types) + WIDEN_PREAMBLE + (
        "void widen(const unsigned char* b, const short* h, int* out) {\n"
        "  tg_uint8x8 u; tg_int8x8 s; tg_int16x8 w; __builtin_memcpy(&u, b, 8); __builtin_memcpy(&s, b, 8);\n"
        "  __builtin_memcpy(&w, h, 16); tg_widened8 r = tg_widen_u8x8(u); __builtin_memcpy(out, &r, 32);\n"
        "  r = tg_widen_i8x8(s); __builtin_memcpy(out + 8, &r, 32);\n"
        "  r = tg_widen_i16x8(w); __builtin_memcpy(out + 16, &r, 32);\n"
        "  tg_uint16x8 v; __builtin_memcpy(&v, h, 16); r = tg_widen_u16x8(v); __builtin_memcpy(out + 24, &r, 32);\n"
        "  tg_int16x16 w16; tg_uint16x16 v16; __builtin_memcpy(&w16, h, 32); __builtin_memcpy(&v16, h, 32);\n"
        "  tg_widened16 r16 = tg_widen_i16x16(w16); __builtin_memcpy(out + 32, &r16, 64);\n"
        "  r16 = tg_widen_u16x16(v16); __builtin_memcpy(out + 48, &r16, 64); }\n")
    widen = _c_function(src, "widen", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    b = rng.integers(0, 256, 8).astype(np.uint8)
    h = np.array([-32768, -1, 0, 1, 255, -256, 32767, -12345, *rng.integers(-32768, 32768, 8)], np.int16)
    out = np.zeros(64, np.int32)
    widen(b.ctypes.data, h.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out[:8], b.astype(np.int32))
    np.testing.assert_array_equal(out[8:16], b.view(np.int8).astype(np.int32))
    np.testing.assert_array_equal(out[16:24], h[:8].astype(np.int32))
    np.testing.assert_array_equal(out[24:32], h[:8].view(np.uint16).astype(np.int32))
    np.testing.assert_array_equal(out[32:48], h.astype(np.int32))
    np.testing.assert_array_equal(out[48:], h.view(np.uint16).astype(np.int32))


def test_sixteen_bit_lanes_widen_in_one_call(device="CPU"):
    """Eight int16 lanes converted to float32 go through ``tg_widen_i16x8`` (gcc 12 widens a 16-byte vector of them
    in two halves: four instructions where AVX2 has one) and keep numpy's values."""
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    h = np.random.default_rng(3).integers(-32768, 32768, (16, 64)).astype(np.int16)
    out = Tensor(h, device=device).cast("float32") * 0.5
    (item,) = [si for si in create_schedule([out.uop], device)[0] if si.kind != "copy"]
    assert "tg_widen_i16x8(" in get_program(item.ast, open_device(device).renderer).src
    np.testing.assert_array_equal(out.numpy(), h.astype(np.float32) * 0.5)

"""Reductions over blocks (a per-block factor times per-element values, the shape of a quantized dot product):
factors constant over a block leave the block's sum (``upcast.factor_blocks``); values against numpy for
shapes that do and do not fill the vector lanes, on every CPU renderer."""
import os
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
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    (item,) = [si for si in create_schedule([product().uop], device)[0] if si.kind != "copy"]
    assert "tg_dot4_u8i8(" in get_program(item.ast, open_device(device).renderer).src


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
    """The C renderer's byte-dot helper, built without and with VNNI (its two branches): lane l sums bytes
    4l .. 4l+3 of an unsigned times a signed 32-byte vector, at the extremes of both ranges."""

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
        "  tg_int32x8 r = tg_dot4_u8i8(x, y); __builtin_memcpy(out, &r, 32); }\n")
    dot = _c_function(src, "dot", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    for a, b in [(np.full(32, 255, np.uint8), np.full(32, -128, np.int8)),
                 (rng.integers(0, 256, 32).astype(np.uint8), rng.integers(-128, 128, 32).astype(np.int8))]:
        out = np.zeros(8, np.int32)
        dot(a.ctypes.data, b.ctypes.data, out.ctypes.data)
        np.testing.assert_array_equal(out, (a.astype(np.int64) * b).reshape(8, 4).sum(-1))


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
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    (item,) = [si for si in create_schedule([product().uop], device)[0] if si.kind != "copy"]
    src = get_program(item.ast, open_device(device).renderer).src
    assert "tg_table16_u8(" in src and "tg_dot4_u8i8(" in src


@pytest.mark.parametrize("flags", [[], ["-mavx2"]], ids=["plain", "avx2"])
def test_byte_table_helper_matches_numpy(flags, tmp_path):
    """The C renderer's byte-table helper, built without and with AVX2 (its two branches): lane i is
    ``table[index[i]]`` for a table of 16 bytes."""

    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytedot import BYTE_TABLE_PREAMBLE
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if flags and "avx2" not in cpu_features().features:
        pytest.skip("no AVX2 here")
    src = vector_typedef(dtypes.uint8.vec(32)) + "\n" + BYTE_TABLE_PREAMBLE + (
        "void look(const unsigned char* t, const unsigned char* i, unsigned char* out) {\n"
        "  tg_uint8x32 x; __builtin_memcpy(&x, i, 32);\n"
        "  tg_uint8x32 r = tg_table16_u8(t, x); __builtin_memcpy(out, &r, 32); }\n")
    look = _c_function(src, "look", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    table = rng.integers(0, 256, 16).astype(np.uint8)
    index = np.concatenate([np.arange(16), rng.integers(0, 16, 16)]).astype(np.uint8)
    out = np.zeros(32, np.uint8)
    look(table.ctypes.data, index.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out, table[index])


@pytest.mark.parametrize("device", DEVICES)
def test_grid_rows_in_lanes_are_exact(device):
    """Rows of 8 bytes looked up at loaded indices (an i-quant grid: one index per 8 values) as the unsigned side of a
    byte dot product in lanes of 4 neighbours, the signed side's signs flipped by looked-up masks: exact against
    numpy; on the C renderer each block's 4 rows are 4 loads of 8 bytes (not 32 byte loads)."""
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
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    (item,) = [si for si in create_schedule([product().uop], device)[0] if si.kind != "copy"]
    src = get_program(item.ast, open_device(device).renderer).src
    assert "tg_dot4_u8i8(" in src and src.count("tg_uint64x4 vec") == 2  # the grid's rows and the masks' rows


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
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    (item,) = [si for si in create_schedule([product().uop], device)[0] if si.kind != "copy"]
    assert get_program(item.ast, open_device(device).renderer).src.count("tg_dot4_u8i8(") >= 3  # helper + 2 calls


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
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    (item,) = [si for si in create_schedule([product().uop], device)[0] if si.kind != "copy"]
    src = get_program(item.ast, open_device(device).renderer).src
    assert "tg_dot4_u8i8(" in src and "tg_uint32x8){0u, 0u, 0u, 0u, 4u, 4u, 4u, 4u}" in src
    assert "tg_uint8x16){4u" not in src and "tg_uint8x32){4u" not in src


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
    from tgcore.codegen import get_program
    from tgcore.runtime.registry import open_device
    from tgcore.schedule.kernelize import create_schedule
    (item,) = [si for si in create_schedule([product().uop], device)[0] if si.kind != "copy"]
    src = get_program(item.ast, open_device(device).renderer).src
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

"""C renderer kernels for quantized data: values against numpy, and the shape of the C that carries the speed
(one wide load for an int assembled from bytes, unrolled short loops)."""
import re
import sys

import numpy as np
import pytest

from tgcore.engine import realize as engine
from tgcore.schedule.state import REALIZATION
from tgcore.tensor import Tensor


def run(t: Tensor) -> tuple[np.ndarray, list[str]]:
    """``t``'s values and the C source of every kernel that computed them (compiled afresh, not from a cache)."""
    recorded: list = []
    with engine.capturing(recorded), REALIZATION.no_cache():
        out = t.numpy()
    return out, [r.spec.src for r, *_ in recorded if r is not None and isinstance(r.spec.src, str)]


def le_uint(b: Tensor, width: int) -> Tensor:
    """(n, k * width) bytes -> (n, k) little-endian unsigned ints, OR-ed together from shifted bytes."""
    n, m = b.shape
    words = b.reshape(n, m // width, width)
    dt = {2: "uint16", 4: "uint32", 8: "uint64"}[width]
    out = None
    for i in range(width):
        part = words.shrink(((0, n), (0, m // width), (i, i + 1))).reshape(n, m // width).cast(dt)
        part = part << (8 * i) if i else part
        out = part if out is None else out | part
    return out


@pytest.mark.parametrize("width,dtype", [(2, np.uint16), (4, np.uint32), (8, np.uint64)])
@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 3), (37, 5)])
def test_int_from_bytes_matches_numpy(width, dtype, rows, cols):
    raw = np.random.default_rng(width * rows).integers(0, 256, (rows, cols * width)).astype(np.uint8)
    out, srcs = run(le_uint(Tensor(raw, device="CPU"), width))
    np.testing.assert_array_equal(out, raw.view(dtype))
    if sys.byteorder == "little":  # one load of `width` bytes, not `width` byte loads
        assert any(f"tg_uint8x{width} val" in s for s in srcs)


def test_half_scale_from_bytes_matches_numpy():
    """The Q4_0/Q4_1 scale pattern: two bytes of each 20-byte block form a float16."""
    raw = np.random.default_rng(1).integers(0, 256, (53, 20)).astype(np.uint8)
    raw[:, 1] &= 0x3F  # finite halves
    t = le_uint(Tensor(raw, device="CPU").shrink(((0, 53), (2, 4))), 2).bitcast("float16").cast("float32")
    out, _ = run(t)
    np.testing.assert_array_equal(out, raw[:, 2:4].copy().view(np.float16).astype(np.float32))


@pytest.mark.parametrize("rows,k,half", [(12, 64, True), (13, 40, True), (8, 48, False)])
def test_matvec_of_words_from_bytes_matches_numpy(rows, k, half):
    """A matrix-vector product whose weight rows are float16 (or bfloat16) assembled from their two bytes: the
    reduction is vectorized along the words, the lanes' bytes are one vector load, float16 lanes convert at once."""
    rng = np.random.default_rng(rows * k)
    w = rng.standard_normal((rows, k)).astype(np.float32)
    x = rng.standard_normal(k).astype(np.float32)
    if half:
        raw, w = w.astype(np.float16).view(np.uint8), w.astype(np.float16).astype(np.float32)
    else:  # bfloat16: the top half of a float32
        bits = (w.view(np.uint32) >> 16).astype(np.uint16)
        raw, w = bits.view(np.uint8), (bits.astype(np.uint32) << 16).view(np.float32)
    words = le_uint(Tensor(raw, device="CPU"), 2)
    weight = words.bitcast("float16").cast("float32") if half else (words.cast("uint32") << 16).bitcast("float32")
    out, srcs = run(weight @ Tensor(x, device="CPU"))
    np.testing.assert_allclose(out, w.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
    if sys.byteorder == "little":
        assert any("tg_uint8x16 val" in s or "tg_uint8x64 val" in s for s in srcs)
        assert not half or any("tg_half8_to_f32(" in s for s in srcs)


def test_bytes_not_consecutive_are_left_alone():
    """bytes 0 and 2 (not 1) OR-ed into a uint16: no combined load, still the right value."""
    raw = np.random.default_rng(2).integers(0, 256, (9, 4)).astype(np.uint8)
    b = Tensor(raw, device="CPU")
    lo = b.shrink(((0, 9), (0, 1))).cast("uint16")
    hi = b.shrink(((0, 9), (2, 3))).cast("uint16") << 8
    out, srcs = run(lo | hi)
    np.testing.assert_array_equal(out, raw[:, :1].astype(np.uint16) | (raw[:, 2:3].astype(np.uint16) << 8))
    assert not any("tg_uint8x2 val" in s for s in srcs)


@pytest.mark.parametrize("k, short_loop", [(24, True), (36, False), (200, False)])
def test_short_loops_unrolled_matvec_matches_numpy(k, short_loop):
    """A matrix-vector product whose vectorized reduction leaves a short inner loop (k=24: 3 steps of 8 lanes) is
    unrolled by the C compiler; other sizes get no hint; same values either way."""
    rng = np.random.default_rng(k)
    w, x = rng.standard_normal((12, k)).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    out, srcs = run(Tensor(w, device="CPU") @ Tensor(x, device="CPU"))
    np.testing.assert_allclose(out, w @ x, rtol=1e-5, atol=1e-5)
    hints = [int(line.split()[-1]) for s in srcs for line in s.splitlines()
             if line.strip().startswith("#pragma GCC unroll")]
    assert bool(hints) == short_loop and all(1 < n <= 8 for n in hints)


@pytest.mark.parametrize("rows,k", [(260, 320), (64, 1000)])
def test_streamed_matvec_prefetches_and_matches_numpy(rows, k):
    """A matrix-vector product over a weight of 64 KiB or more prefetches the next rows' data (a plain float
    weight here; quantized ones go the same way) into L2 only (locality 2: ``prefetcht1``), and the values are
    unchanged."""
    rng = np.random.default_rng(rows)
    w, x = rng.standard_normal((rows, k)).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    out, srcs = run(Tensor(w, device="CPU") @ Tensor(x, device="CPU"))
    np.testing.assert_allclose(out, w @ x, rtol=1e-4, atol=1e-4)
    fetches = [line.strip() for s in srcs for line in s.splitlines() if "__builtin_prefetch" in line]
    assert fetches and all(re.search(r"__builtin_prefetch\(&data\d+\[\w+\+\d+\], 0, 2\);", f) for f in fetches)


def test_far_rows_prefetch_along_their_window_and_match_numpy():
    """Attention's weights times values at several rows, each row reading its own window of a float16 cache whose
    rows are further apart than the next-rows prefetch reaches (a sequence's whole cache): the loads prefetch
    ``STREAM_AHEAD`` bytes on along the window, one slot's row at a time; the values are unchanged."""
    from tgcore.renderer.prefetch import PREFETCH_MAX_AHEAD, STREAM_AHEAD
    rng = np.random.default_rng(5)
    rows, slots, window, hd = 4, 1024, 192, 64
    assert slots * hd * 2 > PREFETCH_MAX_AHEAD
    cache = rng.standard_normal((rows, slots, hd)).astype(np.float16)
    p = rng.standard_normal((rows, 1, window)).astype(np.float32)
    values = Tensor(cache, device="CPU").shrink((None, (0, window), None)).cast("float32")
    out, srcs = run(Tensor(p, device="CPU") @ values)
    np.testing.assert_allclose(out, p @ cache[:, :window].astype(np.float32), rtol=1e-4, atol=1e-4)
    ahead = {int(m) for s in srcs for m in re.findall(r"__builtin_prefetch\(&data\d+\[\w+\+(\d+)\]\)", s)}
    assert ahead == {STREAM_AHEAD // 2}  # (float16 elements: whole slot rows of 64)


def test_far_rows_with_kv_heads_prefetch_the_next_heads_run_into_l2():
    """Grouped-query attention's weights times values at several rows (3 KV heads of 3 query heads): a row's next
    data is a whole sequence's cache on (too far), but the next KV head's run of value rows is 64 KiB on: the loads
    prefetch that run, into L2 only, while this one streams (two streams in flight); the values are unchanged."""
    from tgcore.renderer.prefetch import PREFETCH_MAX_AHEAD
    rng = np.random.default_rng(8)
    rows, heads, group, slots, window, hd = 4, 3, 3, 512, 192, 64
    assert heads * slots * hd * 2 > PREFETCH_MAX_AHEAD >= slots * hd * 2
    cache = rng.standard_normal((rows, heads, slots, hd)).astype(np.float16)
    p = rng.standard_normal((rows, heads, group, 1, window)).astype(np.float32)
    values = Tensor(cache, device="CPU").shrink((None, None, (0, window), None)).cast("float32")
    # (each row's heads side by side, as the model's attention output: one output axis of 3 x 3 x 64)
    attn = (Tensor(p, device="CPU") @ values.reshape(rows, heads, 1, window, hd)).permute(0, 3, 1, 2, 4)
    out, srcs = run(attn.reshape(rows, heads * group * hd))
    want = p @ cache[:, :, None, :window].astype(np.float32)
    np.testing.assert_allclose(out, want.reshape(rows, -1), rtol=1e-4, atol=1e-4)
    fetches = [line.strip() for s in srcs for line in s.splitlines() if "__builtin_prefetch" in line]
    next_head = re.compile(rf"__builtin_prefetch\(&data\d+\[\w+\+{slots * hd}\], 0, 2\);")  # (float16 elements)
    assert fetches and all(next_head.search(f) for f in fetches)


def test_window_rows_read_by_vectors_prefetch_once_per_cache_line():
    """Attention's scores at several rows (3 query heads per cache head): each float16 key row (64 values, 2 cache
    lines) is read 16 bytes at a time by a loop the compiler unrolls; the window prefetch then fires on every 4th trip
    of that loop (once per line), not on every trip; the values are unchanged."""
    from tgcore.runtime.cpufeatures import CACHE_LINE
    rng = np.random.default_rng(6)
    rows, heads, group, slots, window, hd = 4, 2, 3, 512, 96, 64
    cache = rng.standard_normal((rows, heads, slots, hd)).astype(np.float16)
    q = rng.standard_normal((rows, heads, group, 1, hd)).astype(np.float32)
    keys = Tensor(cache, device="CPU").shrink((None, None, (0, window), None)).cast("float32")
    out, srcs = run(Tensor(q, device="CPU") @ keys.reshape(rows, heads, 1, window, hd).transpose(-1, -2))
    want = q @ cache[:, :, None, :window].astype(np.float32).transpose(0, 1, 2, 4, 3)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    fetches = [line.strip() for s in srcs for line in s.splitlines() if "__builtin_prefetch" in line]
    once = re.compile(rf"if \(ridx\d+ % {CACHE_LINE // 16} == 0\) __builtin_prefetch")  # (16 bytes per trip)
    assert fetches and all(once.match(f) for f in fetches)


def test_long_float_rows_are_not_prefetched_along_the_row():
    """A float matrix-vector product with rows over 64 KiB (each row one sequential stream, which the hardware
    prefetcher follows): the kernel that reads the weight has no window prefetch; the values are unchanged."""
    rng = np.random.default_rng(7)
    w, x = rng.standard_normal((16, 32768)).astype(np.float32), rng.standard_normal(32768).astype(np.float32)
    out, srcs = run(Tensor(w, device="CPU") @ Tensor(x, device="CPU"))
    np.testing.assert_allclose(out, w.astype(np.float64) @ x, rtol=1e-3, atol=1e-3)
    weight_kernels = [s for s in srcs if "data2" in s]  # (out, weight, x; the partial sums' own kernel reads 1 input)
    assert weight_kernels and not any("__builtin_prefetch" in s for s in weight_kernels)


def test_small_inputs_do_not_prefetch():
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    out, srcs = run(Tensor(w, device="CPU") @ Tensor(x, device="CPU"))
    np.testing.assert_allclose(out, w @ x, rtol=1e-5, atol=1e-5)
    assert not any("__builtin_prefetch" in s for s in srcs)


def test_signed_bytes_are_not_combined():
    """int8 bytes cast to uint16 sign-extend: OR-ing them is not a 2-byte load."""
    raw = np.random.default_rng(3).integers(-128, 128, (11, 2)).astype(np.int8)
    b = Tensor(raw, device="CPU")
    lo = b.shrink(((0, 11), (0, 1))).cast("uint16")
    hi = b.shrink(((0, 11), (1, 2))).cast("uint16") << 8
    out, _ = run(lo | hi)
    want = raw[:, :1].astype(np.uint16) | (raw[:, 1:2].astype(np.uint16) << 8)
    np.testing.assert_array_equal(out, want)


def test_matmul_does_not_prefetch():
    """A matrix product reuses each row of its inputs across the other's columns: cached, no prefetch."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((160, 192)).astype(np.float32), rng.standard_normal((192, 136)).astype(np.float32)
    out, srcs = run(Tensor(a, device="CPU") @ Tensor(b, device="CPU"))
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert not any("__builtin_prefetch" in s for s in srcs)


def test_table_rows_looked_up_per_group_are_vector_loads():
    """A matrix-vector product whose weights are rows of 8 from a table, one row index per 8 values (a grid
    quantization): each row is one vector load of the table (the lanes are consecutive), not a gather lane by lane;
    values as numpy's."""
    rng = np.random.default_rng(5)
    table = rng.standard_normal((256, 8)).astype(np.float32)  # a row per byte value: every index in range
    index = rng.integers(0, 256, (8, 16)).astype(np.uint8)
    x = rng.standard_normal(128).astype(np.float32)
    lane = Tensor.arange(8, dtype="int32", device="CPU").reshape(1, 1, 8)
    rows = Tensor(index, device="CPU").cast("int32").reshape(8, 16, 1) * 8 + lane
    w = Tensor(table, device="CPU").take(rows).reshape(8, 128)
    out, srcs = run(w @ Tensor(x, device="CPU"))
    np.testing.assert_allclose(out, table[index].reshape(8, 128).astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
    assert not any("[0]]" in s for s in srcs)  # no lane-by-lane gather ({t[i[0]], t[i[1]], ...})


@pytest.mark.parametrize("blocks", [2, 5])
def test_loops_unrolled_by_codegen_add_in_the_loops_order(blocks, monkeypatch):
    """``Renderer.unrolled_trips`` (set for a machine-code renderer; tried here on the C one): the steps inside each
    quantization block of a matrix-vector product (one scale per 32 weights: 4 steps of 8 lanes) are unrolled by
    codegen instead of gcc (one loop fewer in the C), and each row's sum is bit for bit the loop's (copy i adds
    after copy i - 1); both are numpy's."""
    from tgcore.runtime.registry import open_device
    rng = np.random.default_rng(blocks)
    q = rng.integers(0, 16, (12, blocks, 32)).astype(np.uint8)
    scale = rng.standard_normal((12, blocks, 1)).astype(np.float32)
    x = rng.standard_normal(blocks * 32).astype(np.float32)

    def product() -> Tensor:
        w = Tensor(q, device="CPU").cast("float32") * Tensor(scale, device="CPU")
        return w.reshape(12, blocks * 32) @ Tensor(x, device="CPU")
    looped, loop_srcs = run(product())
    monkeypatch.setattr(open_device("CPU").renderer, "unrolled_trips", 8, raising=False)
    monkeypatch.setattr(engine, "_runners", {})  # compiled again, not the looped kernel from the runner cache
    unrolled, srcs = run(product())
    np.testing.assert_allclose(unrolled, (q * scale).reshape(12, -1).astype(np.float64) @ x, rtol=1e-5, atol=1e-4)
    assert unrolled.tobytes() == looped.tobytes()
    assert sum(s.count("for (") for s in srcs) < sum(s.count("for (") for s in loop_srcs)


def test_concatenation_along_rows_in_a_matvec_selects_whole_vectors():
    """A matrix-vector product whose weight rows of 16 are put together from two parts of one byte array along a
    row axis the lanes do not cross (TQ1_0's layout): which part a vector reads is one comparison per vector (no
    comparison lane by lane), each part one gated vector load; values as numpy's."""
    rng = np.random.default_rng(6)
    raw = rng.integers(0, 256, (36, 320), dtype=np.uint8)
    x = rng.standard_normal(256).astype(np.float32)
    t = Tensor(raw, device="CPU").cast("int32")
    first = t.shrink(((0, 36), (0, 160))).reshape(36, 10, 16)
    second = t.shrink(((0, 36), (224, 320))).reshape(36, 6, 16) * 3
    w = first.cat(second, dim=1).cast("float32").reshape(36, 256)
    out, srcs = run(w @ Tensor(x, device="CPU"))
    ref = np.concatenate([raw[:, :160], raw[:, 224:] * 3.0], 1) @ x
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-3)
    assert any("tg_float32x" in s for s in srcs)  # vectorized
    comparisons = [line.strip() for s in srcs for line in s.splitlines()
                   if re.search(r"[^<]<[^<=]", line) and "for (" not in line and not line.lstrip().startswith("#")]
    assert comparisons, srcs
    # each comparison a scalar (_Bool) once per vector, never a vector compared lane by lane
    assert all(line.startswith("const _Bool ") and "{" not in line for line in comparisons), comparisons


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_vector_max_is_one_blend_and_matches_numpy(dtype):
    """maximum and a max reduction on float vectors, NaN in either operand kept, -0/+0 and infinities as numpy: each
    vector's max is one compare and blend, with no lane-by-lane NaN test (which gcc turned into branches)."""
    edge = np.array([1, -2, np.nan, 0.0, -0.0, np.inf, -np.inf, 3, -1, np.nan, 2, -0.0], dtype)
    other = np.array([0, np.nan, 1, -0.0, 0.0, 2, -1, 3, np.nan, np.nan, np.inf, -0.0], dtype)
    a = np.tile(edge, 16).reshape(12, 16)
    b = np.tile(other, 16).reshape(12, 16)
    out, srcs = run(Tensor(a, device="CPU").maximum(Tensor(b, device="CPU")))
    np.testing.assert_array_equal(out.view(np.uint8), np.maximum(a, b).view(np.uint8))
    rows = np.random.default_rng(3).standard_normal((16, 96)).astype(dtype)
    rows[2, 5] = np.nan
    reduced, reduce_srcs = run(Tensor(rows, device="CPU").max(-1))
    np.testing.assert_array_equal(reduced, rows.max(-1))
    for src in srcs + reduce_srcs:
        if "vector_size" in src:  # (a vectorized kernel)
            assert not re.search(r"\[0\]!=\w+\[0\]", src), src  # no per-lane NaN test
    assert any("(tg_x!=tg_x)|(tg_x>tg_y)" in s for s in srcs + reduce_srcs)


@pytest.mark.parametrize("rows", [1, 4])
def test_grouped_query_values_are_converted_once_per_group(rows):
    """Attention's weights times values with 3 query heads per KV head (SmolLM2's 9/3, head_dim 64, a float16
    cache): the values against numpy, and where the registers hold the three heads' accumulators, each value vector is
    loaded and converted once for the three (three accumulators per conversion, not one)."""
    from tgcore.runtime.registry import open_device
    heads, kv, dim, window = 9, 3, 64, 96
    rng = np.random.default_rng(rows)
    w = rng.random((rows, heads, window)).astype(np.float32)
    v = rng.standard_normal((rows, kv, window, dim)).astype(np.float16)
    values = Tensor(v, device="CPU").cast("float32").reshape(rows, kv, 1, window, dim)
    t = Tensor(w, device="CPU").reshape(rows, kv, heads // kv, 1, window) @ values
    out, srcs = run(t.permute(0, 3, 1, 2, 4).reshape(rows, heads * dim).contiguous())  # (as tg_llm's model)
    ref = np.einsum("bkgt,bktd->bkgd", w.reshape(rows, kv, heads // kv, window), v.astype(np.float32))
    np.testing.assert_allclose(out, ref.reshape(rows, heads * dim), rtol=1e-5, atol=1e-5)
    (src,) = [s for s in srcs if "_Float16" in s and "acc0" in s]
    conversions = len(re.findall(r"= tg_half8_to_f32\(", src))
    accumulators = len(re.findall(r"^\s*tg_float32x8 acc\d+;", src, re.M))
    if open_device("CPU").renderer.vector_registers < 3 * 8 + 4:
        pytest.skip("the three heads' 24 accumulators do not fit this ISA's registers: nothing shared to check")
    assert accumulators == 3 * conversions, src


def test_float_lane_sum_is_the_pairwise_tree_bit_for_bit():
    """A float32 vector's 8 lanes summed at the end of a vectorized reduction: in codegen's pairwise order
    ((0+1)+(2+3))+((4+5)+(6+7)), bit for bit (numpy computing that order; the values span 8 decades so another order
    rounds differently), by the shuffling helper rather than 7 extracted scalar adds."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((256, 8)) * 10.0 ** rng.integers(-4, 5, (256, 8))).astype(np.float32)
    c = [x[:, i] for i in range(8)]
    pairwise = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]))
    in_order = c[0]
    for i in range(1, 8):
        in_order = in_order + c[i]
    assert (pairwise != in_order).any()  # (the data tells the orders apart)
    out, srcs = run(Tensor(x, device="CPU").sum(-1))
    np.testing.assert_array_equal(out.view(np.uint32), pairwise.view(np.uint32))
    assert any("tg_hadd_f32x8(" in s for s in srcs)

"""The C renderer's rewrites of byte vectors in tg-gguf's integer products (``tgcore.renderer``'s ``chighbytes``,
``cnegatebits``, ``cscalebroadcast``, ``cbytevectors.shift_by_one_amount``): each helper compiled in its branches
against numpy, each match on UOps (and what it leaves alone), and a kernel that takes it exact against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from test_codegen_blocks import DEVICES, _c_function, _kernel_source, _lane_ordered

from tgcore.tensor import Tensor


@pytest.mark.parametrize("flags", [[], ["-mavx2"]], ids=["plain", "avx2"])
def test_wrapped_high_bytes_helper_matches_numpy(flags, tmp_path):
    """The C renderer's high bytes of wrapped byte products in 256-bit vectors (``chighbytes``), built without AVX2
    and with it (its two branches): ``(((b * p) & 255) * m) >> 8`` in numpy, every byte ``b`` against ``p`` and
    ``m`` drawn, and the largest values."""
    from tgcore.renderer.chighbytes import WRAPPED_HIGH_PREAMBLE, WRAPPED_HIGH_TYPES
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if flags and "avx2" not in cpu_features().features:
        pytest.skip("no AVX2 here")
    src = "".join(vector_typedef(d) + "\n" for d in WRAPPED_HIGH_TYPES) + WRAPPED_HIGH_PREAMBLE + (
        "void high(const unsigned char* b, const unsigned char* p, unsigned short m, unsigned char* out) {\n"
        "  tg_uint8x32 x, y; __builtin_memcpy(&x, b, 32); __builtin_memcpy(&y, p, 32);\n"
        "  tg_uint8x32 r = tg_wrapped_high_u8x32(x, y, m); __builtin_memcpy(out, &r, 32); }\n")
    import ctypes
    high = _c_function(src, "high", flags, tmp_path)
    high.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ushort, ctypes.c_void_p]
    rng = np.random.default_rng(len(flags))
    b = np.arange(256, dtype=np.uint8).reshape(8, 32)
    for m in (1, 3, 255, *rng.integers(2, 255, 3)):
        p = rng.integers(0, 256, (8, 32)).astype(np.uint8)
        p[0] = 255
        out = np.zeros((8, 32), np.uint8)
        for row in range(8):
            high(b[row].ctypes.data, p[row].ctypes.data, int(m), out[row].ctypes.data)
        expected = (((b.astype(np.int64) * p) & 255) * int(m)) >> 8
        np.testing.assert_array_equal(out, expected, err_msg=f"m={m}")


def test_wrapped_high_bytes_is_one_call():
    """``chighbytes.wrapped_high_bytes`` on UOps: ``u8(tg_mulhi_u16x32(u16(b) * (u16(p) << 8), 3))`` (and the product's
    factor as ``* 256`` or as constants that are multiples of 256) on 32 lanes is one call at ``b``, ``p`` and 3; a
    factor that is no multiple of 256, or a multiplier of 256 or more, is left alone."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytedot import MULHI_HELPER
    from tgcore.renderer.chighbytes import WRAPPED_HIGH_HELPER, wrapped_high_bytes
    from tgcore.uop import Ops, UOp
    byte, half = dtypes.uint8.vec(32), dtypes.uint16.vec(32)

    def load(i: int) -> UOp:
        return UOp(Ops.LOAD, byte, (UOp(Ops.PARAM, dtypes.uint8.ptr(64), (), i).index(UOp.const(dtypes.int32, 0)),))

    b, p = load(1), load(2)
    wide_b, wide_p = UOp(Ops.CAST, half, (b,)), UOp(Ops.CAST, half, (p,))

    def narrowed(factor: UOp, by: int = 3) -> UOp:
        high = UOp(Ops.CUSTOMI, half, (UOp(Ops.MUL, half, (wide_b, factor)), UOp.const(half, by)), MULHI_HELPER)
        return UOp(Ops.CAST, byte, (high,))

    shifted = UOp(Ops.SHL, half, (wide_p, UOp.const(half, 8)))
    for factor in (shifted, UOp(Ops.MUL, half, (wide_p, UOp.const(half, 256)))):
        call = wrapped_high_bytes(narrowed(factor))
        assert call is not None and call.arg == WRAPPED_HIGH_HELPER and call.src[:2] == (b, p)
        assert call.src[2].arg == 3
    powers = UOp(Ops.VCONST, half, (), tuple(256 * (k % 5) for k in range(32)))
    call = wrapped_high_bytes(narrowed(powers))
    assert call is not None and call.src[1].op is Ops.VCONST and call.src[1].arg == tuple(k % 5 for k in range(32))
    assert wrapped_high_bytes(narrowed(UOp(Ops.SHL, half, (wide_p, UOp.const(half, 7))))) is None
    assert wrapped_high_bytes(narrowed(powers, by=256)) is None


@pytest.mark.parametrize("flags", [[], ["-mavx512bw", "-mavx512vl"]], ids=["plain", "avx512bw"])
def test_negate_bits_helper_matches_numpy(flags, tmp_path):
    """The C renderer's negation of 32 signed bytes where a word's bits are set (``cnegatebits``), built without
    AVX512BW and with it (its two branches): numpy's wrapping negation (-128 stays -128) under bit ``p``."""
    from tgcore.renderer.cnegatebits import NEGATE_BITS_PREAMBLE, NEGATE_BITS_TYPES
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if flags and not {"avx512bw", "avx512vl"} <= set(cpu_features().features):
        pytest.skip("no AVX512BW/VL here")
    src = "".join(vector_typedef(d) + "\n" for d in NEGATE_BITS_TYPES) + NEGATE_BITS_PREAMBLE + (
        "void negate(const signed char* x, const unsigned int* bits, signed char* out) {\n"
        "  tg_int8x32 v; __builtin_memcpy(&v, x, 32);\n"
        "  tg_int8x32 r = tg_negate_bits(v, *bits); __builtin_memcpy(out, &r, 32); }\n")
    negate = _c_function(src, "negate", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    for word in (0, 0xFFFFFFFF, 0x80000001, *rng.integers(0, 1 << 32, 5, dtype=np.uint64)):
        x = rng.integers(-128, 128, 32).astype(np.int8)
        x[[5, 30]] = -128
        bits = np.array([word], np.uint32)
        out = np.zeros(32, np.int8)
        negate(x.ctypes.data, bits.ctypes.data, out.ctypes.data)
        flip = (int(word) >> np.arange(32)) & 1 == 1
        np.testing.assert_array_equal(out, np.where(flip, (-x.astype(np.int16)).astype(np.int8), x))


@pytest.mark.parametrize("device", DEVICES)
def test_activations_negated_by_sign_bits_are_exact(device):
    """tg-gguf's IQ2_S/IQ3_S sign bytes: bit ``j`` of byte ``i`` negates activation ``8i + j`` of a block of 32, the
    mask taken apart by byte ops (``(byte & b) + (128 - b)``, its top bit) and applied as ``(x ^ m) - m`` before the
    byte dot, a scale per block: exact against numpy with integer scales; on the C renderer one negation call per
    block (``cnegatebits``)."""
    rows, blocks = 7, 3
    rng = np.random.default_rng(23)
    u = rng.integers(0, 256, (rows, blocks, 32)).astype(np.uint8)
    q = rng.integers(-128, 128, (1, blocks, 32)).astype(np.int8)
    signs = rng.integers(0, 256, (rows, blocks, 4)).astype(np.uint8)
    scale = rng.integers(-4, 5, (rows, blocks, 1)).astype(np.float32)
    ut, qt, st, dt = (Tensor(a, device=device).realize() for a in (u, q, signs, scale))

    def product() -> Tensor:
        j = Tensor.arange(8, dtype="uint8", device=device).reshape(1, 1, 1, 8)
        b = j.full_like(1) << j
        top = (st.reshape(rows, blocks, 4, 1).expand(rows, blocks, 4, 8) & b) + (b.full_like(128) - b)
        t = (top >> 7).cast("int8").reshape(rows, blocks, 32)
        mask = t * -1
        x = (qt ^ mask) - mask
        return _lane_ordered((ut.cast("int32") * x.cast("int32")).cast("float32") * dt).sum(-1)
    flip = ((signs[..., None] >> np.arange(8)) & 1).reshape(rows, blocks, 32) == 1
    x = np.where(flip, -q.astype(np.int64), q.astype(np.int64))
    ref = (scale[..., 0].astype(np.int64) * (u.astype(np.int64) * x).sum(-1)).sum(-1)
    np.testing.assert_array_equal(product().numpy(), ref.astype(np.float32))
    if device != "CPU":
        return
    assert "tg_negate_bits(" in _kernel_source(product(), device)


@pytest.mark.parametrize("flags", [[], ["-mavx"]], ids=["plain", "avx"])
def test_broadcast_product_helper_matches_numpy(flags, tmp_path):
    """The C renderer's product of two floats broadcast to 8 lanes (``cscalebroadcast``), built without AVX and with
    it (its two branches): numpy's float32 product in every lane (one rounding)."""
    from tgcore.renderer.cscalebroadcast import BROADCAST_PRODUCT_PREAMBLE, LANES
    from tgcore.renderer.cstyle import vector_typedef
    from tgcore.runtime.cpufeatures import cpu_features
    if flags and "avx" not in cpu_features().features:
        pytest.skip("no AVX here")
    src = vector_typedef(LANES) + "\n" + BROADCAST_PRODUCT_PREAMBLE + (
        "void product(const float* a, const float* b, float* out) {\n"
        "  tg_float32x8 r = tg_broadcast_product8(a[1], b[2]); __builtin_memcpy(out, &r, 32); }\n")
    product = _c_function(src, "product", flags, tmp_path)
    rng = np.random.default_rng(len(flags))
    for _ in range(5):
        a, b = (rng.standard_normal(4).astype(np.float32) * 1e3 for _ in range(2))
        out = np.zeros(8, np.float32)
        product(a.ctypes.data, b.ctypes.data, out.ctypes.data)
        np.testing.assert_array_equal(out, np.full(8, a[1] * b[2], np.float32))


def test_broadcast_product_is_one_call():
    """``cscalebroadcast.broadcast_product`` on UOps: 8 float32 lanes of one product of two scalar loads (one gated by
    the constant true) are one call at the two elements; a product with a constant, lanes that differ, or a load
    under a gate that is not constant are left alone."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cscalebroadcast import BROADCAST_PRODUCT_HELPER, LANES, broadcast_product
    from tgcore.uop import Ops, UOp
    at = UOp.const(dtypes.int32, 3)

    def load(i: int, gate: UOp | None = None) -> UOp:
        index = UOp(Ops.PARAM, dtypes.float32.ptr(16), (), i).index(at)
        if gate is not None:
            index = UOp(Ops.INDEX, index.dtype, (*index.src, gate))
        return UOp(Ops.LOAD, dtypes.float32, (index,))

    a, b = load(1), load(2, UOp.const(dtypes.bool, True))
    y = UOp(Ops.DEFINE_VAR, LANES, (), ("y", 0, 1))

    def times_y(lanes: tuple[UOp, ...]) -> UOp | None:
        return broadcast_product(y * UOp(Ops.VECTORIZE, LANES, lanes))
    product = times_y((a * b,) * 8)
    assert product is not None and product.op is Ops.MUL and product.src[0] is y
    call = product.src[1]
    assert call.arg == BROADCAST_PRODUCT_HELPER and call.src == (a.src[0], b.src[0])
    assert times_y((a * 2.0,) * 8) is None
    assert times_y((a * b,) * 7 + (b * a,)) is None
    gated = load(2, UOp(Ops.PARAM, dtypes.int32.ptr(1), (), 3).index(at).load() < 1)
    assert times_y((a * gated,) * 8) is None
    # an addend is left alone (its vector product would be contracted into a fused multiply-add: other bits)
    assert broadcast_product(y + UOp(Ops.VECTORIZE, LANES, (a * b,) * 8)) is None


def test_a_broadcast_product_added_keeps_its_bits():
    """``a * b + c`` with ``a``, ``b`` one float per row broadcast over ``c``'s 64 columns: the bits of numpy's (review:
    as a broadcast vector product gcc fused the multiply into the add, 203 of 1024 values differed)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((16, 1)).astype(np.float32) for _ in range(2))
    c = rng.standard_normal((16, 64)).astype(np.float32)
    out = (Tensor(a, device="CPU") * Tensor(b, device="CPU") + Tensor(c, device="CPU")).numpy()
    np.testing.assert_array_equal(out, a * b + c)


def test_bytes_shifted_by_one_amount_are_one_word_shift():
    """``cbytevectors.shift_by_one_amount`` on UOps: ``((v >> s) << l) & m`` on 32 unsigned bytes, ``s`` one
    non-constant value in every lane (at most 4 here), is a shift of 32-bit lanes by ``s`` (then by ``l``) and the
    mask when the mask keeps none of the bits a byte gets from its neighbours; left alone otherwise (a mask keeping
    a top bit the shift fills from the next byte, or a low bit ``<< l`` fills from the one below), for a constant
    ``s`` (``shift_in_words``'s) or one that differs by lane."""
    from tgcore.dtype import dtypes
    from tgcore.renderer.cbytevectors import shift_by_one_amount
    from tgcore.uop import Ops, UOp
    byte, words = dtypes.uint8.vec(32), dtypes.uint32.vec(8)
    v = UOp(Ops.LOAD, byte, (UOp(Ops.PARAM, dtypes.uint8.ptr(64), (), 1).index(UOp.const(dtypes.int32, 0)),))
    s = UOp.variable("s", 0, 4, dtypes.uint8)

    def masked(amount: UOp, mask: int, left: int = 0) -> UOp:
        shifted = UOp(Ops.SHR, byte, (v, amount))
        if left:
            shifted = UOp(Ops.SHL, byte, (shifted, UOp.const(byte, left)))
        return UOp(Ops.AND, byte, (shifted, UOp.const(byte, mask)))

    every = UOp(Ops.VECTORIZE, byte, (s,) * 32)
    for mask, left in ((15, 0), (16, 4), (16, 1), (0x3C, 2)):
        out = shift_by_one_amount(masked(every, mask, left))
        assert out is not None and out.src[1].arg == mask
        moved = out.src[0].src[0]
        word_shift = moved.src[0] if left else moved
        assert moved.dtype == words and word_shift.op is Ops.SHR and word_shift.src[0].src[0] is v
        assert word_shift.src[1].src[0].src[0] is s and (not left or moved.src[1].arg == left)
    assert shift_by_one_amount(masked(every, 31)) is None  # bit 4: the next byte's after a shift by 4
    assert shift_by_one_amount(masked(every, 16 | 1, 1)) is None  # bit 0: the byte below's top bit after << 1
    assert shift_by_one_amount(masked(UOp.const(byte, 4), 15)) is None
    other = UOp.variable("t", 0, 4, dtypes.uint8)
    assert shift_by_one_amount(masked(UOp(Ops.VECTORIZE, byte, (s, other) * 16), 15)) is None

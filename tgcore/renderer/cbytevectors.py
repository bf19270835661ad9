"""C renderer: vectors of bytes put together from one load.

In:  a kernel in REDUCE form after the optimizations (the C renderer's legalizer), and the rendering of shuffles.
Out: ``nearby_byte_loads``: a vector of scalar byte loads from one buffer at constant offsets from one index, all
     inside 4, 8 or 16 bytes of which the first and last are read (a K-quant's scale bytes taken in the order of
     their sub-blocks: 96, 98, 100, 102, 97, ...) -> one load of those bytes and a shuffle of its lanes (gcc put the
     scalar bytes together with a shift and an or each). ``repeats_16_bytes`` / ``REPEAT16_PREAMBLE``: a vector of
     16 bytes twice over (a block's 16 nibble bytes in both halves of 32 lanes) as one broadcast, which gcc folds
     into the load (``vbroadcasti128``; its own shuffle of the halves is a load and a ``vpermq`` on the shuffle
     port). ``shift_by_one_amount``: unsigned bytes shifted right by one amount that is no constant (it changes with
     the block: Q3_K's third bits, ``tg_gguf.lanes._unpack_third_bit``) and masked -> the shift in 32-bit lanes. The
     same values either way.
"""
from __future__ import annotations

from tgcore.dtype import DType, dtypes
from tgcore.renderer.cbytedot import _constant_lanes, _load_at
from tgcore.uop import Ops, UOp

SPANS = (4, 8, 16)  # bytes one load may take (vector types the renderer declares)


def _byte_load_at(u: UOp) -> tuple[UOp, UOp] | None:
    """``(buffer, index)`` of an ungated scalar load of one byte."""
    return _load_at(u) if u.op is Ops.LOAD and u.dtype in (dtypes.uint8, dtypes.int8) else None


def nearby_byte_loads(vec: UOp) -> UOp | None:
    """A VECTORIZE of byte loads (see the module docstring) as one vector load and a shuffle of it; else None. Only
    bytes whose first and last are read are loaded (no read past what the kernel reads)."""
    if vec.op is not Ops.VECTORIZE or len(vec.src) < 2 or all(s is vec.src[0] for s in vec.src):
        return None  # (one value in every lane: a broadcast)
    places = [_byte_load_at(s) for s in vec.src]
    if any(p is None for p in places) or any(s.dtype != vec.src[0].dtype for s in vec.src):
        return None
    buf, base = places[0]  # type: ignore[misc]
    from tgcore.uop.symbolic import difference
    found = [difference(p[1], base) if p[0] is buf else None for p in places]  # type: ignore[index]
    offsets = [o for o in found if isinstance(o, int)]
    if len(offsets) != len(found):
        return None
    low, high = min(offsets), max(offsets)
    span = high - low + 1
    if span not in SPANS or len(set(offsets)) < 2:
        return None
    first = vec.src[offsets.index(low)]
    wide = UOp(Ops.LOAD, vec.dtype.scalar().vec(span), (first.src[0],))
    return UOp(Ops.VECTORIZE, vec.dtype, tuple(wide.gep(o - low) for o in offsets))


def repeats_16_bytes(u: UOp) -> bool:
    """Whether ``u`` is a 16-byte vector twice over (lanes ``0..15, 0..15`` of one 16-byte vector)."""
    if u.op is not Ops.VECTORIZE or u.dtype.itemsize != 32 or not u.src or not all(
            x.op is Ops.GEP and len(x.arg) == 1 for x in u.src):
        return False
    source = u.src[0].src[0]
    return (source.dtype.itemsize == 16 and all(x.src[0] is source for x in u.src)
            and [x.arg[0] for x in u.src] == list(range(source.dtype.count)) * 2)


REPEAT16_HELPER = "tg_repeat16"
REPEAT16_PREAMBLE = """\
static inline tg_uint8x32 tg_repeat16(tg_uint8x16 v) {
#if defined(__AVX2__) && !defined(__clang__)
  typedef long long tg_words2 __attribute__((vector_size(16)));
  return (tg_uint8x32)__builtin_ia32_vbroadcastsi256((tg_words2)v);
#else
  return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                                 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#endif
}
"""



BITS_HELPER = "tg_bits_as16"
# C lines: the bytes of a 32-bit word ``bits`` spread over 32 lanes (byte p // 8 in lane p) beside the masks of bit
# p % 8 (``(spread & masks) != 0``: bit p of the word per lane), for helpers without a mask-register instruction
SPREAD_WORD_BITS = """\
  typedef unsigned int tg_w8 __attribute__((vector_size(32)));
  tg_uint8x32 word = (tg_uint8x32)(tg_w8){bits, bits, bits, bits, bits, bits, bits, bits};
  tg_uint8x32 spread = __builtin_shufflevector(word, word, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                               2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  tg_uint8x32 masks = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128,
                       1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
"""
# byte p of 32: bit p of a 32-bit word as 16 (Q5_0/Q5_1's fifth bits). With AVX512-VBMI one multishift (byte p takes
# the word's 8 bits from bit p - 4 on, rotating) and a mask; else the word's bytes spread, tested and masked
BITS_PREAMBLE = """\
static inline tg_uint8x32 tg_bits_as16(unsigned int bits) {
#if defined(__AVX512VBMI__) && defined(__AVX512VL__) && !defined(__clang__)
  typedef unsigned int tg_w8 __attribute__((vector_size(32)));
  typedef char tg_c32 __attribute__((vector_size(32)));
  tg_c32 from = {60, 61, 62, 63, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
                 20, 21, 22, 23, 24, 25, 26, 27};  /* each 8-byte lane holds the word twice: bit p at p and 32 + p */
  tg_c32 words = (tg_c32)(tg_w8){bits, bits, bits, bits, bits, bits, bits, bits};
  return (tg_uint8x32)__builtin_ia32_vpmultishiftqb256_mask(from, words, (tg_c32){0}, 0xFFFFFFFFu) & 16;
#else
""" + SPREAD_WORD_BITS + """\
  return (tg_uint8x32)((spread & masks) != (tg_uint8x32){0}) & 16;
#endif
}
"""
BYTE_OPS = {Ops.ADD: lambda a, b: (a + b) & 255, Ops.SUB: lambda a, b: (a - b) & 255, Ops.AND: lambda a, b: a & b,
            Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b, Ops.SHR: lambda a, b: a >> b,
            Ops.SHL: lambda a, b: (a << b) & 255, Ops.IDIV: lambda a, b: a // b, Ops.MUL: lambda a, b: (a * b) & 255}


def lane_function(u: UOp, leaf: UOp, lane: int, b: int, signed: DType | None = None) -> int | None:
    """Lane ``lane`` of the byte vector ``u`` (as its byte 0..255) when ``leaf``'s lane is ``b``: ``u`` built from
    ``leaf`` and constants by the byte ops of ``BYTE_OPS`` in ``leaf``'s type or, where given, in ``signed`` (the
    signed bytes of as many lanes) and by casts between the two; None for anything else (a signed shift or division
    too: of a negative byte, it is not a byte function of the unsigned value)."""
    if u is leaf:
        return b
    if u.op in (Ops.CONST, Ops.VCONST):
        value = u.arg if u.op is Ops.CONST else u.arg[lane]
        return int(value) & 255 if isinstance(value, int) else None
    types = (leaf.dtype,) if signed is None else (leaf.dtype, signed)
    if u.dtype not in types:
        return None
    if signed is not None and u.op in (Ops.CAST, Ops.BITCAST) and u.src[0].dtype in types:
        return lane_function(u.src[0], leaf, lane, b, signed)
    if u.op not in BYTE_OPS or len(u.src) != 2:
        return None
    x, y = (lane_function(s, leaf, lane, b, signed) for s in u.src)
    if x is None or y is None or (u.op in (Ops.SHR, Ops.SHL) and not 0 <= y < 8) or (u.op is Ops.IDIV and y <= 0):
        return None
    if u.op in (Ops.SHR, Ops.IDIV) and u.dtype == signed:
        return None
    return BYTE_OPS[u.op](x, y)


def _word_bytes(leaf: UOp) -> tuple[UOp, list[int]] | None:
    """``(w, [byte of w per lane])`` when ``leaf`` takes each lane from the bytes of a 32-bit word ``w`` (lanes of the
    bitcast of ``w`` broadcast: Q5's ``qh``)."""
    if leaf.op is not Ops.VECTORIZE or not all(g.op is Ops.GEP and len(g.arg) == 1 for g in leaf.src):
        return None
    (source,) = {g.src[0] for g in leaf.src} if len({g.src[0] for g in leaf.src}) == 1 else (None,)
    if source is None or source.op is not Ops.BITCAST or source.src[0].op is not Ops.VECTORIZE:
        return None
    words = source.src[0]
    if words.dtype.scalar() != dtypes.uint32 or any(w is not words.src[0] for w in words.src):
        return None
    return words.src[0], [g.arg[0] % 4 for g in leaf.src]


def word_bits(u: UOp, scale: int, leaf_type: DType, signed: DType | None = None) -> UOp | None:
    """The 32-bit word ``w`` when lane ``p`` of the 32 bytes ``u`` is bit ``p`` of ``w`` times ``scale`` (as a byte),
    ``u`` a ``lane_function`` of one vector of ``leaf_type`` taken from the bytes of ``w``: checked lane by lane on
    all 256 values of the lane's byte; else None."""
    leaves = [v for v in u.toposort if v.op is Ops.VECTORIZE and v.dtype == leaf_type]
    found = _word_bytes(leaves[0]) if len(leaves) == 1 else None
    if found is None:
        return None
    word, byte_of = found
    for lane in range(32):
        bit = lane - 8 * byte_of[lane]
        if not 0 <= bit < 8 or any(lane_function(u, leaves[0], lane, b, signed) != (((b >> bit) & 1) * scale) & 255
                                   for b in range(256)):
            return None
    return word


def bits_as_sixteen(x: UOp) -> UOp | None:
    """``f(bytes of w) & 16`` over 32 bytes whose lane ``p`` is bit ``p`` of a 32-bit word ``w`` as 16 (Q5's fifth
    bits, ``((qh & m) + (128 - m)) >> 3 & 16`` per byte, however the constants were folded: ``word_bits``)
    -> ``tg_bits_as16(w)``; else None."""
    if x.op is not Ops.AND or x.dtype != dtypes.uint8.vec(32) or x.src[1].op not in (Ops.CONST, Ops.VCONST):
        return None
    word = word_bits(x, 16, x.dtype)
    return None if word is None else UOp(Ops.CUSTOMI, x.dtype, (word,), BITS_HELPER)


LOW4_TABLE_HELPER = "tg_table16_u8_low4"
# a 16-byte table looked up at the low 4 bits of each index byte (cbytedot's tg_table16_u8 at ``i & 15``): with
# AVX512-VBMI one vpermb of the table twice over, which reads bits 0-4 of an index only, so the mask is not needed
# (after BYTE_TABLE_PREAMBLE: its tg_table16_twice and fallback)
LOW4_TABLE_PREAMBLE = """\
static inline tg_uint8x32 tg_table16_u8_low4(const unsigned char* t, tg_uint8x32 i) {
#if defined(__AVX512VBMI__) && defined(__AVX512VL__) && !defined(__clang__)
  return (tg_uint8x32)__builtin_ia32_permvarqi256_mask(tg_table16_twice(t), (tg_chars32)i, (tg_chars32){0},
                                                       0xFFFFFFFFu);
#else
  return tg_table16_u8(t, i & 15);
#endif
}
"""


def low4_index(index: UOp) -> UOp | None:
    """``x`` when a 16-byte table's byte indices ``index`` are ``x & 15`` (a nibble taken out of packed bytes)."""
    if index.op is not Ops.AND or index.src[1].op not in (Ops.CONST, Ops.VCONST):
        return None
    lanes = [index.src[1].arg] * index.dtype.count if index.src[1].op is Ops.CONST else list(index.src[1].arg)
    return index.src[0] if all(v == 15 for v in lanes) else None


def shift_by_one_amount(x: UOp) -> UOp | None:
    """``((v >> s) << l) & m`` on unsigned byte vectors (``<< l`` maybe absent or written ``* 2**l``), ``s`` one value
    (no constant: ``cbytedot.shift_in_words`` takes those) in every lane and ``l`` one constant, ``m`` keeping none of
    the bits a byte gets from its neighbours (those a 32-bit shift right by ``max(s)`` brings in at its top, then
    moved up by ``l``; the low ``l``) -> ``v`` shifted in 32-bit lanes by ``s`` (one ``vpsrld`` by a count), then by
    ``l``, and masked. gcc shifted the bytes by ``s`` as 16-bit lanes, each half of the vector widened, shifted and
    the halves put back (6 instructions), then each ``<< l`` as ``l`` byte additions."""
    value, mask = x.src
    masks = _constant_lanes(mask)
    if masks is None or x.dtype.scalar() != dtypes.uint8 or x.dtype.count % 4:
        return None
    left = 0
    moves = _constant_lanes(value.src[1]) if value.op in (Ops.SHL, Ops.MUL) else None
    if moves is not None and len(set(moves)) == 1:
        move = int(moves[0])  # type: ignore[call-overload]
        left = move if value.op is Ops.SHL else move.bit_length() - 1
        if not 0 <= left < 8 or (value.op is Ops.MUL and move != 1 << left):
            return None
        value = value.src[0]
    if value.op is not Ops.SHR:
        return None
    bytes_, amount = value.src
    if amount.op is not Ops.VECTORIZE or any(a is not amount.src[0] for a in amount.src):
        return None
    by = amount.src[0]
    if by.op is Ops.CONST or not 0 <= int(by.vmin) <= int(by.vmax) < 8:
        return None
    kept = ((0xFF >> int(by.vmax)) << left) & 0xFF  # the bits that stay the byte's own (from bit ``l`` up)
    if any(int(m) & ~kept for m in masks):  # type: ignore[call-overload]
        return None
    wide = dtypes.uint32.vec(x.dtype.count // 4)
    count = UOp(Ops.VECTORIZE, wide, (by.cast(dtypes.uint32),) * wide.count)
    moved = UOp(Ops.SHR, wide, (UOp(Ops.BITCAST, wide, (bytes_,)), count))
    if left:
        moved = UOp(Ops.SHL, wide, (moved, UOp.const(wide, left)))
    return UOp(Ops.AND, x.dtype, (UOp(Ops.BITCAST, x.dtype, (moved,)), mask))

"""C renderer: an i-quant grid's table rows gathered at once (one ``vpgatherdq`` / ``vpgatherdd``), their offsets
computed together on int32 lanes.

In:  a VECTORIZE of table rows as ``cbytedot._row_loads`` makes them (bitcast loads of 8 or 4 bytes from one buffer).
Out: a call of a gather helper (``ROW_GATHERS``, ``ROW_NUMBERS``) at the rows' offsets (``lanes_together``).
"""
from __future__ import annotations

from tgcore.dtype import DType, dtypes
from tgcore.renderer.cbytedot import WIDE, _constant_lanes, _load_at
from tgcore.uop import GroupOp, Ops, UOp

# ---------------------------------------------------------------------------------------- C: rows gathered at once
# An i-quant grid's rows (and sign-mask rows) come out of ``_row_loads`` as one 8- or 4-byte load per row at an offset
# that each row computes with the same scalar arithmetic from its own bytes (the grid index bits). The C renderer
# computes those offsets on int32 lanes instead (the rows' bytes one vector load) and reads the rows with one gather
# (vpgatherdq / vpgatherdd with AVX2): per block of 32, a few vector ops and a gather instead of ~6 scalar ops, a
# load and an insert per row.
# at byte offsets; 8 rows of 8 bytes: the grid types' row lanes (``tg_gguf.grid_lanes``: 8 weight rows, two lanes each)
# (and 16 rows of 4: IQ3's, one per lane)
ROW_GATHERS = {dtypes.uint64.vec(4): "tg_rows8", dtypes.uint32.vec(8): "tg_rows4", dtypes.uint64.vec(8): "tg_rows8x8",
               dtypes.uint32.vec(16): "tg_rows4x16"}
ROW_NUMBERS = {"tg_rows8": "tg_rows8_at", "tg_rows4": "tg_rows4_at", "tg_rows8x8": "tg_rows8x8_at",
               "tg_rows4x16": "tg_rows4x16_at"}  # at row numbers
FOUR_BYTES, WIDEN4_HELPER = dtypes.uint8.vec(4), "tg_widen_u8x4"
FOUR_WORDS, WIDEN_WORDS_HELPER = dtypes.uint16.vec(4), "tg_widen_u16x4"
IDENTITIES = {Ops.ADD: 0, Ops.OR: 0, Ops.XOR: 0, Ops.SHR: 0, Ops.SHL: 0, Ops.MUL: 1, Ops.IDIV: 1, Ops.AND: -1}


def row_gather(vec: UOp) -> UOp | None:
    """A VECTORIZE of table rows (``_row_loads``: bitcast loads of 8 or 4 bytes from one buffer) whose offsets are one
    arithmetic in every lane (``lanes_together``) -> a call of the gather helper at those offsets; else None."""
    helper = ROW_GATHERS.get(vec.dtype)
    if vec.op is not Ops.VECTORIZE or helper is None or all(s is vec.src[0] for s in vec.src):
        return None  # (one value in every lane: a broadcast, ``_repeated``)
    if any(s.op is not Ops.BITCAST or s.src[0].dtype.scalar().itemsize != 1 or s.src[0].dtype.count != s.dtype.itemsize
           for s in vec.src):
        return None  # (rows of bytes: the helpers take the loads' indices as byte offsets)
    places = [_load_at(s.src[0], vector=True) for s in vec.src]
    if any(p is None for p in places) or len({p[0] for p in places if p is not None}) != 1:
        return None
    offsets = lanes_together([p[1] for p in places if p is not None])
    if offsets is None or offsets.dtype.scalar() is not dtypes.int32:
        return None
    width = vec.dtype.scalar().itemsize
    if offsets.op is Ops.SHL and _constant_lanes(offsets.src[1]) == [width.bit_length() - 1] * offsets.dtype.count:
        return UOp(Ops.CUSTOMI, vec.dtype, (places[0][0], offsets.src[0]), ROW_NUMBERS[helper])  # type: ignore[index]
    return UOp(Ops.CUSTOMI, vec.dtype, (places[0][0], offsets), helper)  # type: ignore[index]


def _with_identity(xs: list[UOp]) -> list[UOp] | None:
    """Lanes where most apply an op with a constant (``x // 8``, ``x & 15``) and others not (``x``): the others with
    the op's identity (``x // 1``, ``x & -1``)."""
    ops = [x.op for x in xs if x.op in IDENTITIES and x.src[1].op is Ops.CONST]
    if not ops:
        return None
    op = max(dict.fromkeys(ops), key=ops.count)
    return [x if x.op is op else UOp(op, x.dtype, (x, UOp.const(x.dtype, _identity(op, x.dtype)))) for x in xs]


def _identity(op: Ops, dt: DType) -> int:
    if op is Ops.AND and dtypes.is_unsigned(dt):
        return int(dt.max)  # every bit set
    return IDENTITIES[op]


def _powers_of_two(xs: list[UOp]) -> list[int] | None:
    values = [x.arg for x in xs] if all(x.op is Ops.CONST for x in xs) else None
    if values is None or any(not isinstance(v, int) or v <= 0 or v & (v - 1) for v in values):
        return None
    return [v.bit_length() - 1 for v in values]


def lanes_together(xs: list[UOp]) -> UOp | None:
    """Scalar int expressions of one shape, one per lane -> one vector expression: a value every lane shares
    broadcast, constants one vector constant, consecutive loads of one buffer one vector load, an op some lanes lack
    taken with its identity (``x`` as ``x // 1``), a division (multiplication) of non-negative ints by powers of two a
    shift by each lane's amount (vpsravd / vpsllvd). None when the lanes differ in shape."""
    from tgcore.uop.symbolic import difference
    first = xs[0]
    if first.dtype.count != 1 or any(x.dtype != first.dtype for x in xs):
        return None
    dt = first.dtype.vec(len(xs))
    if all(x is first for x in xs):
        return UOp(Ops.VECTORIZE, dt, tuple(xs))
    if all(x.op is Ops.CONST for x in xs):
        return UOp(Ops.VCONST, dt, (), tuple(x.arg for x in xs))
    places = [_load_at(x) for x in xs]
    if all(p is not None for p in places):
        buf, at = places[0]  # type: ignore[misc]
        if all(p[0] is buf and difference(p[1], at) == k for k, p in enumerate(places)):  # type: ignore[index]
            return UOp(Ops.LOAD, dt, (first.src[0],))
        return None
    if (words := _consecutive_words(xs)) is not None:
        return words
    if any(x.op is not first.op for x in xs):
        same = _with_identity(xs)
        return None if same is None else lanes_together(same)
    if any(x.arg != first.arg or len(x.src) != len(first.src) for x in xs) or first.op not in (
            *GroupOp.ALU, Ops.CAST, Ops.BITCAST):
        return None
    if first.op in (Ops.IDIV, Ops.MUL) and (shifts := _powers_of_two([x.src[1] for x in xs])) is not None:
        if first.op is Ops.MUL or all(x.src[0].vmin >= 0 for x in xs):
            value = lanes_together([x.src[0] for x in xs])
            if value is None:
                return None
            op = Ops.SHR if first.op is Ops.IDIV else Ops.SHL
            return UOp(op, dt, (value, UOp(Ops.VCONST, dt, (), tuple(shifts))))
    srcs = [lanes_together([x.src[i] for x in xs]) for i in range(len(first.src))]
    if any(s is None for s in srcs):
        return None
    if first.op is Ops.CAST and dt == dtypes.int32.vec(4) and srcs[0] is not None and srcs[0].dtype == FOUR_BYTES:
        return UOp(Ops.CUSTOMI, dt, (srcs[0],), WIDEN4_HELPER)  # (gcc takes 4 bytes apart in scalar registers)
    if first.op is Ops.CAST and dt == dtypes.int32.vec(4) and srcs[0] is not None and srcs[0].dtype == FOUR_WORDS:
        return UOp(Ops.CUSTOMI, dt, (srcs[0],), WIDEN_WORDS_HELPER)  # (gcc widens each 2 words on its own)
    return UOp(first.op, dt, tuple(s for s in srcs if s is not None), first.arg)


def _consecutive_words(xs: list[UOp]) -> UOp | None:
    """Lanes that are ints read as a vector load of their bytes each (a u16 as 2 bytes), at consecutive places of one
    buffer -> one load of all their bytes as a vector of those ints (IQ2_XS's u16 per 8 values)."""
    from tgcore.uop.symbolic import difference
    if any(x.op is not Ops.BITCAST or x.dtype.count != 1 for x in xs):
        return None
    places = [_load_at(x.src[0], vector=True) for x in xs]
    width = xs[0].src[0].dtype.count
    if any(p is None or x.src[0].dtype.scalar().itemsize != 1 or x.src[0].dtype.count != width
           for p, x in zip(places, xs, strict=True)):
        return None
    buf, at = places[0]  # type: ignore[misc]
    if any(p[0] is not buf or difference(p[1], at) != width * k for k, p in enumerate(places)):  # type: ignore[index]
        return None
    load = UOp(Ops.LOAD, xs[0].src[0].dtype.scalar().vec(width * len(xs)), (xs[0].src[0].src[0],))
    return UOp(Ops.BITCAST, xs[0].dtype.vec(len(xs)), (load,))


# 4 int32 lanes of bytes widened; rows of 8 (4) bytes at 4 (8) byte offsets (tg_rows8, tg_rows4) or row numbers
# (tg_rows8_at, tg_rows4_at) into a table: one vpgatherdq (vpgatherdd) with AVX2 and gcc's builtins, else row by row
ROWS_PREAMBLE = """\
static inline tg_int32x4 tg_widen_u8x4(tg_uint8x4 v) {
#if defined(__AVX2__) && !defined(__clang__)
  unsigned int b; __builtin_memcpy(&b, &v, 4);
  return (tg_int32x4)__builtin_ia32_pmovzxbd128((char __attribute__((vector_size(16))))(tg_int32x4){(int)b, 0, 0, 0});
#else
  return __builtin_convertvector(v, tg_int32x4);
#endif
}
static inline tg_int32x4 tg_widen_u16x4(tg_uint16x4 v) {
#if defined(__AVX2__)
  typedef unsigned long long tg_w __attribute__((vector_size(16)));
  unsigned long long b; __builtin_memcpy(&b, &v, 8);
  return (tg_int32x4)__builtin_ia32_pmovzxwd128((short __attribute__((vector_size(16))))(tg_w){b, 0});
#else
  return __builtin_convertvector(v, tg_int32x4);
#endif
}
"""


def _rows_helper(name: str, rows: int, width: int, scale: int) -> str:
    """A helper gathering ``rows`` rows of ``width`` bytes at ``scale`` times the int32 lanes ``at`` (a gather's scale
    is an immediate: one helper per scale)."""
    vec, whole, gather = {8: ("tg_uint64x4", "long long", "gathersiv4di"),
                          4: ("tg_uint32x8", "int", "gathersiv8si")}[width]
    return f"""\
static inline {vec} {name}(const void* t, tg_int32x{rows} at) {{
#if defined(__AVX2__) && !defined(__clang__)
  typedef {whole} tg_w __attribute__((vector_size(32)));
  const tg_w all = {{{", ".join(["-1"] * rows)}}};
  return ({vec})__builtin_ia32_{gather}((tg_w){{0}}, t, at, all, {scale});
#else
  {vec} r;
  for (int k = 0; k < {rows}; k++) __builtin_memcpy((char*)&r + {width} * k, (const char*)t + {scale} * at[k], {width});
  return r;
#endif
}}
"""


ROWS_PREAMBLE += "".join(_rows_helper(name, WIDE // width, width, scale)
                         for width, bytes_name in ((8, "tg_rows8"), (4, "tg_rows4"))
                         for name, scale in ((bytes_name, 1), (ROW_NUMBERS[bytes_name], width)))
# 8 rows of 8 bytes, 16 rows of 4 (a 512-bit vector): one vpgatherdq / vpgatherdd zmm with AVX512F
ROWS_PREAMBLE += "".join(f"""\
static inline tg_uint{8 * width}x{rows} {name}(const void* t, tg_int32x{rows} at) {{
#if defined(__AVX512F__) && !defined(__clang__)
  typedef {whole} tg_w __attribute__((vector_size(64)));
  return (tg_uint{8 * width}x{rows})__builtin_ia32_{gather}((tg_w){{0}}, t, at, {(1 << rows) - 1}, {scale});
#else
  tg_uint{8 * width}x{rows} r;
  for (int k = 0; k < {rows}; k++) __builtin_memcpy((char*)&r + {width} * k, (const char*)t + {scale} * at[k], {width});
  return r;
#endif
}}
""" for rows, width, whole, gather, name, scale in (
    (8, 8, "long long", "gathersiv8di", "tg_rows8x8", 1), (8, 8, "long long", "gathersiv8di", "tg_rows8x8_at", 8),
    (16, 4, "int", "gathersiv16si", "tg_rows4x16", 1), (16, 4, "int", "gathersiv16si", "tg_rows4x16_at", 4)))
ROWS_TYPES = (dtypes.uint64.vec(8), dtypes.uint32.vec(16), dtypes.int32.vec(16), dtypes.uint64.vec(4),
              dtypes.uint32.vec(8), dtypes.int32.vec(4), dtypes.int32.vec(8), FOUR_BYTES, FOUR_WORDS)


def uses_row_gather(kernel: list[UOp]) -> bool:
    return any(u.op is Ops.CUSTOMI and u.arg in (*ROW_GATHERS.values(), *ROW_NUMBERS.values()) for u in kernel)

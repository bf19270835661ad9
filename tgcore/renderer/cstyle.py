"""C renderer: a linearized kernel -> one C11 function for the system compiler.

In:  the linear UOp list of a kernel (loops as RANGE/END, accumulators as DEFINE_REG).
Out: C source of ``void name(T* data0, ..., int var, ..., int core_id)``.

Every value gets its own ``const`` local; the C compiler does the rest. Integer division and
remainder by a non-constant divisor go through helpers that define x/0 = 0 and x%0 = 0 (and
INT_MIN/-1 wrapping), so a kernel can never raise SIGFPE. float16 and bfloat16 arithmetic is
done in float32 (a legalization rule rounds after every op); bfloat16 is stored as uint16.

For speed: an unsigned int OR-ed together from consecutive bytes becomes one load (``legalize``), loops of a
few iterations carry an unroll hint, and a reduction streaming a big input prefetches the next output rows' data.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from tgcore.dtype import AddrSpace, DType, PtrDType, dtypes
from tgcore.renderer import Renderer
from tgcore.renderer.cbroadcastdot import broadcast_dot
from tgcore.renderer.cbytedot import (
    BYTE_TABLE_HELPER,
    WIDE_ROWS,
    accumulated_dot,
    byte_dot,
    byte_table_lookup,
    high_product,
    row_lanes_dot,
    shift_chain_in_words,
    shift_in_words,
)
from tgcore.renderer.cbytevectors import (
    LOW4_TABLE_HELPER,
    REPEAT16_HELPER,
    bits_as_sixteen,
    low4_index,
    nearby_byte_loads,
    repeats_16_bytes,
    shift_by_one_amount,
)
from tgcore.renderer.chalfpairs import HALF2_HELPER, HALF2_PREAMBLE, pair_half_reads
from tgcore.renderer.chighbytes import wrapped_high_bytes
from tgcore.renderer.chorizontal import horizontal_reduction
from tgcore.renderer.clanerange import range_gated_load, range_gated_store
from tgcore.renderer.cnarrow import NARROWING
from tgcore.renderer.cnegatebits import negate_bits
from tgcore.renderer.cpreamble import byte_helpers
from tgcore.renderer.crowgather import row_gather
from tgcore.renderer.cscalebroadcast import broadcast_product
from tgcore.renderer.cwiden import WIDEN_BYTES, WIDEN_PREAMBLE, WIDEN_TYPES
from tgcore.renderer.prefetch import Prefetcher, loop_nest
from tgcore.runtime.cpufeatures import chosen_isa_level, cpu_features
from tgcore.uop import Ops, RangeKind, UOp
from tgcore.uop.pattern import PatternMatcher, UPat

C_TYPES: dict[DType, str] = {
    dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char",
    dtypes.int16: "short", dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
    dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16",
    dtypes.bfloat16: "unsigned short", dtypes.float32: "float", dtypes.float64: "double",
}

PREAMBLE = """\
typedef unsigned int tg_u32;
static inline float tg_bf16_to_f32(unsigned short x) { union { tg_u32 u; float f; } v; v.u = (tg_u32)x << 16; \
return v.f; }
static inline unsigned short tg_f32_to_bf16(float f) { union { tg_u32 u; float f; } v; v.f = f;
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((v.u >> 16) | 0x40);
  return (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16); }
static inline unsigned short tg_f64_to_bf16(double d) { /* round to odd in float, then to nearest: one rounding */
  float f = (float)d; if (f == f && (double)f != d && __builtin_fabsf(f) != __builtin_inff()) {
    union { tg_u32 u; float f; } v; v.f = f; if (__builtin_fabs((double)f) > __builtin_fabs(d)) v.u -= 1; v.u |= 1;
    f = v.f; }
  return tg_f32_to_bf16(f); }
static inline unsigned short tg_u64_to_bf16(unsigned long long m, int negative) { /* 64-bit ints: round once */
  int shift = m ? 40 - __builtin_clzll(m) : 0; float f;
  if (shift > 0) { unsigned long long r = (m >> shift) | ((m & ((1ull << shift) - 1)) != 0);
    f = __builtin_ldexpf((float)r, shift); } else f = (float)m;
  return tg_f32_to_bf16(negative ? -f : f); }
"""

BINARY_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.CMPLT: "<", Ops.CMPNE: "!=",
                Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
FLOAT_SUFFIX = {dtypes.float32: "f", dtypes.float64: "", dtypes.float16: "f"}
MATH_FN = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}


def c_type(dt: DType) -> str:
    if isinstance(dt, PtrDType):
        return c_type(dt.base) + "*"
    if dt.count > 1:
        return f"tg_{dt.scalar().name}x{dt.count}"
    if dt not in C_TYPES:
        raise NotImplementedError(f"the C renderer does not support {dt!r} yet")
    return C_TYPES[dt]


MASK_LANE = {1: "signed char", 2: "short", 4: "int", 8: "long long"}


def _vector_select(dt: DType, cond: str, a: str, b: str) -> str:
    """cond ? a : b per lane, as a bitwise blend under a 0/-1 mask. (Lane-by-lane ``c[i] ? a[i] : b[i]`` lists
    miscompile: gcc 12's SLP vectorizer at -O2 with AVX-512 (issue 26: exp().cumsum(0) on (2, 2, 8) zeros).)"""
    size = dt.scalar().itemsize * dt.count
    lanes = ", ".join(f"-({MASK_LANE[dt.scalar().itemsize]})({cond}[{i}]!=0)" for i in range(dt.count))
    return (f"({{ typedef {MASK_LANE[dt.scalar().itemsize]} tg_mask __attribute__((vector_size({size}))); "
            f"union {{ {c_type(dt)} v; tg_mask m; }} tg_a, tg_b; tg_mask tg_s = {{{lanes}}}; "
            f"tg_a.v = {a}; tg_b.v = {b}; tg_a.m = (tg_a.m & tg_s) | (tg_b.m & ~tg_s); tg_a.v; }})")


def _vector_max(dt: DType, a: str, b: str) -> str:
    """max(a, b) per lane as one vector compare and a bitwise blend (a NaN in ``a`` wins, as the scalar rule), where a
    list of per-lane ternaries became scalar code (gcc 12: an extract, compare, conditional move and insert per lane;
    the activations' block maxima took ~5 us for 8 rows of 576)."""
    size = dt.scalar().itemsize * dt.count
    pick = "(tg_x!=tg_x)|(tg_x>tg_y)" if dtypes.is_float(dt.scalar()) else "tg_x>tg_y"
    return (f"({{ typedef {MASK_LANE[dt.scalar().itemsize]} tg_mask __attribute__((vector_size({size}))); "
            f"{c_type(dt)} tg_x = {a}, tg_y = {b}; tg_mask tg_s = (tg_mask)({pick}); "
            f"union {{ {c_type(dt)} v; tg_mask m; }} tg_a, tg_b; tg_a.v = tg_x; tg_b.v = tg_y; "
            f"tg_a.m = (tg_a.m & tg_s) | (tg_b.m & ~tg_s); tg_a.v; }})")


def vector_typedef(dt: DType) -> str:
    lane = "signed char" if dt.scalar() is dtypes.bool else c_type(dt.scalar())
    return f"typedef {lane} {c_type(dt)} __attribute__((vector_size({dt.scalar().itemsize * dt.count})));"


def c_const(value: Any, dt: DType) -> str:
    if dt.count > 1:
        return f"(({c_type(dt)}){{{', '.join([c_const(value, dt.scalar())] * dt.count)}}})"
    if dt is dtypes.bool:
        return "1" if value else "0"
    if dtypes.is_float(dt):
        calc = dtypes.float64 if dt is dtypes.float64 else dtypes.float32
        suffix = FLOAT_SUFFIX.get(calc, "f")
        if math.isnan(value):
            text = f"__builtin_nan{suffix}(\"\")"
        elif math.isinf(value):
            text = ("-" if value < 0 else "") + f"__builtin_inf{suffix}()"
        else:
            text = f"{float(value).hex()}{suffix}" if suffix else float(value).hex()
        if dt is dtypes.bfloat16:
            return f"tg_f32_to_bf16({text})"
        return f"(({c_type(dt)}){text})" if dt is dtypes.float16 else text
    if dtypes.is_unsigned(dt):
        return f"{int(value)}u" + ("ll" if dt.itemsize == 8 else "")
    if dt.itemsize == 8:
        return f"{int(value)}ll" if value != dt.min else "(-9223372036854775807ll-1)"
    if dt is dtypes.int32 and value == dt.min:
        return "(-2147483647-1)"
    return f"(({c_type(dt)}){int(value)})" if dt.itemsize < 4 else str(int(value))


def _unsigned_work_type(dt: DType) -> str:
    """An unsigned type at least as wide as int, so arithmetic on it wraps instead of overflowing."""
    return "unsigned long long" if dt.itemsize == 8 else "unsigned int"


UNSIGNED_LANE = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


def _accumulated_bound(u: UOp) -> int | None:
    """For an accumulator update ``acc[0] + value`` (``tgcore.codegen.accumulate``), a bound on ``|acc[0] + value|``:
    the initial value plus one ``value`` per iteration of the loops the accumulator runs over, or None for any other
    ADD. (A quantization block's byte dot product, summed in int32, then stays a plain C ``+``, which the C
    compiler can turn into multiply-adds of bytes.)"""
    acc, value = u.src
    if acc.op is not Ops.LOAD or acc.src[0].op is not Ops.INDEX or acc.src[0].src[0].op is not Ops.AFTER:
        return None
    after = acc.src[0].src[0]
    if after.src[0].op is not Ops.DEFINE_REG or len(after.src) < 3 or after.src[1].op is not Ops.STORE:
        return None
    init, ranges = after.src[1].src[1], after.src[2:]
    if (init.op is not Ops.CONST or not isinstance(init.arg, int)
            or any(r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST for r in ranges)):
        return None
    trips = math.prod(r.src[0].arg for r in ranges)
    return abs(init.arg) + trips * max(abs(value.vmin), abs(value.vmax))


def _may_wrap(u: UOp) -> bool:
    """Whether an int + - * or negation can leave its dtype's range. C leaves signed overflow undefined (gcc uses
    that, e.g. to fold (-x) < 0 into x > 0); the semantics wrap, so such an op is rendered in unsigned arithmetic.
    (Index arithmetic, whose bounds are known, keeps plain C.)"""
    dt = u.dtype.scalar()
    if not dtypes.is_int(dt) or u.op not in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG):
        return False
    lo, hi = [x.vmin for x in u.src], [x.vmax for x in u.src]
    if u.op is Ops.ADD and (total := _accumulated_bound(u)) is not None:
        return total > min(-dt.min, dt.max)
    if u.op is Ops.NEG:
        corners = [-lo[0], -hi[0]]
    elif u.op is Ops.ADD:
        corners = [lo[0] + lo[1], hi[0] + hi[1]]
    elif u.op is Ops.SUB:
        corners = [lo[0] - hi[1], hi[0] - lo[1]]
    else:
        corners = [x * y for x in (lo[0], hi[0]) for y in (lo[1], hi[1])]
    return min(corners) < dt.min or max(corners) > dt.max


def _wrapping_vector_op(op: Ops, dt: DType, a: list[str]) -> str:
    """A vector + - * or negation in unsigned lanes of the same width (they wrap), as ``dt`` again."""
    size = dt.scalar().itemsize * dt.count
    unsigned = [f"(tg_u){x}" for x in a]
    expr = f"-{unsigned[0]}" if op is Ops.NEG else f"{unsigned[0]}{BINARY_INFIX[op]}{unsigned[1]}"
    return (f"({{ typedef {UNSIGNED_LANE[dt.scalar().itemsize]} tg_u __attribute__((vector_size({size}))); "
            f"({c_type(dt)})({expr}); }})")


def _shift(op: Ops, dt: DType, x: str, n: str) -> str:
    """Shifts by a negative amount or by the bit width or more give 0 (or the sign, for >> of a signed value)."""
    bits = dt.itemsize * 8
    if op is Ops.SHR:
        out_of_range = f"({x}<0?({c_type(dt)})-1:0)" if not dtypes.is_unsigned(dt) else "0"
        return f"(({n})<0||({n})>={bits}?{out_of_range}:({c_type(dt)})({x}>>({n})))"
    return f"(({n})<0||({n})>={bits}?0:({c_type(dt)})(({_unsigned_work_type(dt)}){x}<<({n})))"


def _plain_shift(op: Ops, dt: DType, x: str, n: str) -> str:
    """A scalar shift whose amount is known to be in 0 .. bits-1 (``_shift_in_range``)."""
    if op is Ops.SHR:
        return f"(({c_type(dt)})({x}>>({n})))"
    return f"(({c_type(dt)})(({_unsigned_work_type(dt)}){x}<<({n})))"


def _shift_in_range(u: UOp) -> bool:
    """A shift whose amount is always in 0 .. bits-1: C's vector shift means the same as ours then."""
    lo, hi = u.src[1].vmin, u.src[1].vmax
    return isinstance(lo, int) and isinstance(hi, int) and 0 <= lo and hi < u.dtype.scalar().itemsize * 8


def _convertvector_exact(src: DType, dst: DType) -> bool:
    """__builtin_convertvector converts each lane like our scalar cast: floats to floats, ints to ints or floats
    (not bool, whose lanes hold 0/1 in a char, and not float -> int, which must wrap instead of being undefined)."""
    plain = (dtypes.bool, dtypes.bfloat16)
    if src in plain or dst in plain:
        return False
    return dtypes.is_float(dst) or (dtypes.is_int(src) and dtypes.is_int(dst))


# 8 float16 lanes -> 8 float32 lanes: one F16C instruction (vcvtph2ps); gcc 12 converts a _Float16 vector lane by lane;
# 16 lanes (a row-lane product's scales of 16 rows) one AVX-512F vcvtph2ps into a zmm
HALF_TO_FLOAT = {(dtypes.float16.vec(8), dtypes.float32.vec(8)): "tg_half8_to_f32",
                 (dtypes.float16.vec(16), dtypes.float32.vec(16)): "tg_half16_to_f32",
                 (dtypes.float16.vec(2), dtypes.float32.vec(2)): HALF2_HELPER}
HALF_PREAMBLE = """\
static inline tg_float32x8 tg_half8_to_f32(tg_float16x8 v) {
#if defined(__F16C__)
  typedef short tg_halfbits8 __attribute__((vector_size(16)));
  return (tg_float32x8)__builtin_ia32_vcvtph2ps256((tg_halfbits8)v);
#else
  return __builtin_convertvector(v, tg_float32x8);
#endif
}
"""
HALF16_PREAMBLE = """\
static inline tg_float32x16 tg_half16_to_f32(tg_float16x16 v) {
#if defined(__AVX512F__)
  typedef short tg_halfbits16 __attribute__((vector_size(32)));
  return __builtin_ia32_vcvtph2ps512_mask((tg_halfbits16)v, (tg_float32x16){0}, (unsigned short)-1, 4);
#else
  return __builtin_convertvector(v, tg_float32x16);
#endif
}
"""


# 8 lanes looked up in a table of 16 float32 (an IQ4_NL or MXFP4 value table): one two-table permute with AVX-512VL
# (vpermt2ps; gcc's builtin), two in-register permutes and a blend on AVX2 (vpermps, vblendvps on index bit 3), lane
# by lane elsewhere. The table's loads are loop-invariant.
TABLE16_PREAMBLE = """\
static inline tg_float32x8 tg_table16_f32(const float* t, tg_int32x8 i) {
#if defined(__AVX512VL__) && defined(__GNUC__) && !defined(__clang__)
  tg_float32x8 lo, hi; __builtin_memcpy(&lo, t, 32); __builtin_memcpy(&hi, t + 8, 32);
  return __builtin_ia32_vpermt2varps256_mask(i, lo, hi, (unsigned char)-1);
#elif defined(__AVX2__)
  tg_float32x8 lo, hi; __builtin_memcpy(&lo, t, 32); __builtin_memcpy(&hi, t + 8, 32);
  tg_float32x8 a = __builtin_ia32_permvarsf256(lo, i), b = __builtin_ia32_permvarsf256(hi, i);
  return __builtin_ia32_blendvps256(a, b, (tg_float32x8)(i << 28));
#else
  return (tg_float32x8){t[i[0]], t[i[1]], t[i[2]], t[i[3]], t[i[4]], t[i[5]], t[i[6]], t[i[7]]};
#endif
}
"""


def _table_lookup(load: UOp) -> bool:
    """A gather of 8 float32 lanes from a buffer of exactly 16 (indices in range: the load is ungated)."""
    if load.src[0].op is not Ops.INDEX or len(load.src[0].src) != 2:
        return False
    buf = load.src[0].src[0]
    return (load.dtype == dtypes.float32.vec(8) and load.src[0].src[1].dtype == dtypes.int32.vec(8)
            and getattr(buf.dtype, "size", 0) == 16)


# innermost loops of at most this many iterations (a vectorized reduction's steps inside a quantization block) are
# unrolled by the C compiler (gcc and clang read ``#pragma GCC unroll``)
UNROLL_TRIPS = 8


def _byte_term(u: UOp, dt: DType) -> tuple[int, list[UOp]] | None:
    """``(k, loads)`` when ``u`` is ``cast(load of one byte) << 8k`` (the shift may be a multiply) of type ``dt``;
    for a vector ``dt``, the cast of a vector of such loads (``loads``: one per lane)."""
    shift = 0
    amount = _const_value(u.src[1]) if u.op in (Ops.MUL, Ops.SHL) else None
    if amount is not None:
        bits = amount.bit_length() - 1 if u.op is Ops.MUL and amount > 0 and amount & (amount - 1) == 0 else (
            amount if u.op is Ops.SHL else -1)
        if bits < 0 or bits % 8:
            return None
        shift, u = bits // 8, u.src[0]
    if u.op is not Ops.CAST or u.dtype != dt:
        return None
    loads = list(u.src[0].src) if dt.count > 1 and u.src[0].op is Ops.VECTORIZE else [u.src[0]]
    if len(loads) != dt.count or any(load.op is not Ops.LOAD or load.dtype is not dtypes.uint8
                                     or len(load.src) != 1 or len(load.src[0].src) != 2 for load in loads):
        return None  # (ungated loads only)
    return shift, loads


def _const_value(u: UOp) -> Any:
    """The value of a constant, or of a vector of one constant in every lane; else None."""
    if u.op is Ops.VECTORIZE and all(s is u.src[0] for s in u.src):
        u = u.src[0]
    if u.op is Ops.VCONST and all(x == u.arg[0] for x in u.arg):
        return u.arg[0]
    return u.arg if u.op is Ops.CONST else None


def _or_terms(u: UOp) -> list[UOp]:
    return [t for s in u.src for t in _or_terms(s)] if u.op is Ops.OR else [u]


def combine_byte_loads(x: UOp) -> UOp | None:
    """``b[i] | b[i+1] << 8 | ...`` over all the bytes of a 2/4/8-byte unsigned int -> one little-endian load of
    that many bytes, bitcast (how a quantized file's 16-bit scales are read out of a byte buffer). A vector of such
    ints whose lanes are consecutive in memory (a row of float16 weights) -> one load of all their bytes."""
    n, lanes = x.dtype.scalar().itemsize, x.dtype.count
    if not dtypes.is_unsigned(x.dtype.scalar()) or n not in (2, 4, 8):
        return None
    terms = [_byte_term(t, x.dtype) for t in _or_terms(x)]
    if len(terms) != n or any(t is None for t in terms):
        return None
    by_shift = dict(t for t in terms if t is not None)
    if sorted(by_shift) != list(range(n)):
        return None
    first = by_shift[0][0].src[0]
    buf, base = first.src
    from tgcore.uop.symbolic import difference
    for k in range(n):
        for lane, load in enumerate(by_shift[k]):
            index = load.src[0]
            if (k or lane) and (index.src[0] is not buf or difference(index.src[1], base) != n * lane + k):
                return None
    wide = UOp(Ops.LOAD, dtypes.uint8.vec(n * lanes), (first,))
    return UOp(Ops.BITCAST, x.dtype, (wide,))


# innermost loops of scalar loads up to this long are left to the C compiler's vectorizer (codegen leaves a
# quantization block's byte dot product scalar: Renderer.compiles_byte_dots); a prefetch in one stops it
COMPILER_VECTORIZED_TRIPS = 32
ROW_LANE_WIDE_FLAG = "-mavx512vnni"  # a C target with it takes 16 rows per row-lane vector (``row_lane_rows``)


def _shuffle(u: UOp, names: dict[UOp, str]) -> str | None:
    """A vector built from lanes of one or two vectors of one type (two 4-byte grid rows into 8 lanes) as one
    ``__builtin_shufflevector`` (gcc >= 12, clang): a list of lanes is put together lane by lane."""
    if not all(x.op is Ops.GEP and len(x.arg) == 1 for x in u.src):
        return None
    sources = list(dict.fromkeys(x.src[0] for x in u.src))
    if len(sources) > 2 or any(x.dtype != sources[0].dtype for x in sources) or sources[0].dtype.count < 2:
        return None
    count = sources[0].dtype.count
    order = [sources.index(x.src[0]) * count + x.arg[0] for x in u.src]
    if len(set(order)) == 1:  # one lane everywhere: a broadcast of the scalar (a shuffle of a short vector into a
        return None           # wider one went through memory in gcc)
    a, b = names[sources[0]], names[sources[-1]]
    half_bytes = sources[0].dtype.scalar().itemsize * count
    if len(sources) == 2 and order == list(range(2 * count)) and half_bytes % 8 == 0 and count * 8 > half_bytes:
        # two halves of small lanes (the low and high nibbles of 16 bytes) put side by side: in 8-byte lanes, which
        # gcc joins with one insert (with byte lanes it moves and permutes whole registers)
        words = half_bytes // 8
        return (f"({{ typedef long long tg_words __attribute__((vector_size({half_bytes}))); ({c_type(u.dtype)})"
                f"__builtin_shufflevector((tg_words){a}, (tg_words){b}, {', '.join(map(str, range(2 * words)))}); }})")
    if repeats_16_bytes(u):
        return f"(({c_type(u.dtype)}){REPEAT16_HELPER}((tg_uint8x16){a}))"
    return f"__builtin_shufflevector({a}, {b}, {', '.join(map(str, order))})"


def _float_fn(name: str, dt: DType) -> str:
    return f"__builtin_{name}" + ("" if dt is dtypes.float64 else "f")


class CRenderer(Renderer):
    device = "CPU"
    name = "C"
    has_threads = True
    masked_vectors = True  # lane-gated accesses: the whole vector when every lane is on, else lane by lane
    gathers = True  # a load at a vector of indices: lane by lane, or in registers from a 16-float table
    vector_block_factors = True  # gcc and clang take a lane of a vector variable as a shuffle or a broadcast
    compiles_byte_dots = True  # gcc and clang vectorize int8 dot-product loops (vpdpbusd / vpmaddubsw, sdot)
    # 8 weight rows beside 2-4 batch rows share each batch row's activation block sum and scale (a dot, a conversion,
    # a multiply per block): C harness, one core, 4 -> 8 weight rows: Q4_1 3072x576 at 2/3/4 rows 70/91/112 ->
    # 69/87/107 us, Q5_0 69/88/105 -> 68/84/101, Q8_0 960x576 at 4 rows 26.1 -> 25.2 (X86 keeps the default 4: no
    # gain measured there, within the noise of a loaded machine)
    batch_weight_rows = 8
    row_lane_byte_dots = True  # legalize's row_lanes_dot
    # 16 weight rows per 512-bit vector where the C compiler targets AVX512-VNNI (``__init__``): a zmm vpdpbusd per 4
    # elements of 16 rows, its 4 activation bytes {1to16}, and the block's conversion, scale and multiply-adds once
    # per 16 rows where two 256-bit vectors took two of each
    row_lane_rows = 8
    gathers_table_rows = True  # legalize's row_gather (vpgatherdq / vpgatherdd with AVX2)
    byte_table_lookups = True  # cbytedot's tg_table16_u8: one vpshufb with AVX2
    multiplies_byte_vectors = True  # gcc and clang: a byte vector multiply as 16-bit ones (TQ1_0's trits)
    simd_widths = {dtypes.float32: 8, dtypes.int32: 8, dtypes.uint32: 8, dtypes.float64: 4, dtypes.int64: 4,
                   dtypes.uint64: 4}
    emulated_floats = frozenset({dtypes.float16, dtypes.bfloat16})  # computed in float32, rounded per op
    # float32 lanes stored as float16 (a KV cache's writes): one vector conversion per store (vcvtps2ph: cnarrow), where
    # each element was a scalar loop's
    narrowing_stores = frozenset({(dtypes.float32, dtypes.float16)})
    # a lane's sum of 4 byte products (a quantization block's, in int32 lanes) is one multiply-add of bytes (added to
    # an int32 vector: that vector as its accumulator), table rows at offsets computed per row one gather; with the
    # host's byte order (little-endian hosts only): an int assembled from consecutive bytes is one load, a byte shift
    # whose carried-in bits are masked off a shift of 16-bit lanes, bytes negated where a word's bits are set one masked
    # subtraction (cnegatebits), two neighbouring float16 reads one converted pair;
    # the high half of a 16-bit product computed in 32-bit lanes one multiply of 16-bit lanes (vpmulhuw), and where it
    # is the high byte of a wrapped byte product narrowed back to bytes, the whole in 256-bit vectors (chighbytes)
    legalize = PatternMatcher([(UPat(Ops.REDUCE, name="red"), byte_dot), (UPat(Ops.REDUCE, name="red"), row_lanes_dot),
                               (UPat(Ops.VECTORIZE, name="vec"), row_gather),
                               (UPat(Ops.VECTORIZE, name="vec"), nearby_byte_loads),
                               (UPat(Ops.MUL, name="x"), broadcast_product),
                               (UPat(Ops.ADD, name="x"), accumulated_dot), (UPat(Ops.CUSTOMI, name="x"), broadcast_dot),
                               (UPat(Ops.CAST, name="x"), wrapped_high_bytes), (UPat(Ops.CAST, name="x"), high_product),
                               (UPat((Ops.MAX, Ops.ADD), name="x"), horizontal_reduction)]
                              + ([(UPat(Ops.OR, name="x"), combine_byte_loads),
                                  (UPat(Ops.AND, name="x"), bits_as_sixteen), (UPat(Ops.AND, name="x"), shift_in_words),
                                  (UPat(Ops.AND, name="x"), shift_chain_in_words),
                                  (UPat(Ops.AND, name="x"), shift_by_one_amount),
                                  (UPat(Ops.ADD, name="x"), negate_bits), (UPat(Ops.SUB, name="x"), negate_bits),
                                  (UPat(Ops.SINK, name="sink"), pair_half_reads)] if sys.byteorder == "little" else []))

    def __init__(self, compiler: Any = None) -> None:
        """``compiler``: what builds the C (default: a ``ClangCompiler``). The machine facts (``vector_bits``,
        ``vector_registers``, ``cache_sizes``) come from the CPU probe, at the ISA level the C compiler targets
        (TG_ISA or the widest the CPU allows, checked once per machine; see ``tgcore.runtime.archflags``)."""
        from tgcore.runtime.compiler import ClangCompiler, CompilerNotFoundError
        self.compiler = ClangCompiler() if compiler is None else compiler
        cpu = cpu_features()
        self.cache_sizes = cpu.caches
        try:
            target = self.compiler.target() if isinstance(self.compiler, ClangCompiler) else None
        except CompilerNotFoundError:  # reported when a kernel is compiled; the probe alone decides the facts
            target = None
        level = target.level if target is not None else chosen_isa_level(cpu)
        if level is not None:
            self.vector_bits, self.vector_registers = level.vector_bits, level.vector_registers
        if self.vector_bits >= 512:
            self.elementwise_widths = {dtypes.float32: 16, dtypes.int32: 16, dtypes.uint32: 16}
        flags = target.flags if target is not None else level.c_flags_for(cpu.features) if level is not None else ()
        if ROW_LANE_WIDE_FLAG in flags:
            self.row_lane_rows = WIDE_ROWS

    # ---- expressions ----
    def _alu(self, u: UOp, a: list[str]) -> str:
        """One ALU op; vectors use C's vector operators where they mean the same, else go lane by lane."""
        dt, sdt = u.dtype, (u.src[0].dtype if u.src else u.dtype)
        const_div = _const_value(u.src[1]) if u.op in (Ops.IDIV, Ops.MOD) else None
        overflow = _may_wrap(u)
        if dt.count == 1:
            if u.op in (Ops.SHL, Ops.SHR) and _shift_in_range(u):  # no guard: a loop with it is not vectorized
                return _plain_shift(u.op, dt, a[0], a[1])
            return self._scalar_alu(u.op, dt, sdt, a, const_div, overflow)
        # an unsigned vector times or by one power of two, or a non-negative one by it (a shift the simplifier made a
        # division): a vector shift or mask (x86 has no byte multiply, and no vector division at all)
        power = _const_value(u.src[1]) if u.op in (Ops.MUL, Ops.IDIV, Ops.MOD) else None
        if isinstance(power, int) and power > 0 and power & (power - 1) == 0 and (
                dtypes.is_unsigned(dt.scalar()) or (u.op is not Ops.MUL and u.src[0].vmin >= 0)):
            shift = power.bit_length() - 1
            return {Ops.MUL: f"({a[0]}<<{shift})", Ops.IDIV: f"({a[0]}>>{shift})"}.get(u.op, f"({a[0]}&{power - 1})")
        native = u.op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.AND, Ops.OR, Ops.XOR, Ops.NEG) or (
            u.op in (Ops.SHL, Ops.SHR) and _shift_in_range(u))
        if native and dt.scalar() is not dtypes.bool and all(s.dtype == dt for s in u.src):
            if overflow:
                return _wrapping_vector_op(u.op, dt, a)
            return f"(-{a[0]})" if u.op is Ops.NEG else f"({a[0]}{BINARY_INFIX[u.op]}{a[1]})"
        if u.op is Ops.WHERE and u.src[0].dtype.count == dt.count:
            return _vector_select(dt, *a)
        if (u.op is Ops.MAX and dt.scalar() is not dtypes.bool and dt.scalar().itemsize in MASK_LANE
                and all(s.dtype == dt for s in u.src)):
            return _vector_max(dt, *a)
        lanes = [self._scalar_alu(u.op, dt.scalar(), sdt.scalar(), [f"{x}[{i}]" for x in a], const_div, overflow)
                 for i in range(dt.count)]
        return f"(({c_type(dt)}){{{', '.join(lanes)}}})"

    @staticmethod
    def _scalar_alu(op: Ops, dt: DType, sdt: DType, a: list[str], const_div: Any, overflow: bool) -> str:
        if op in (Ops.IDIV, Ops.MOD):
            sym = "/" if op is Ops.IDIV else "%"
            if const_div is not None and const_div != 0 and (const_div != -1 or dtypes.is_unsigned(dt)):
                return f"({a[0]}{sym}{a[1]})"
            if dtypes.is_unsigned(dt):
                return f"({a[1]}==0?0:{a[0]}{sym}{a[1]})"
            u_t = "unsigned " + c_type(dt).replace("signed ", "")
            by_minus_one = f"({c_type(dt)})(0u-({u_t}){a[0]})" if op is Ops.IDIV else "0"  # INT_MIN/-1 wraps
            return f"({a[1]}==0?0:({a[1]}==-1?{by_minus_one}:{a[0]}{sym}{a[1]}))"
        if op in BINARY_INFIX:
            if sdt is dtypes.bool and op in (Ops.ADD, Ops.MUL):  # bool add/mul are or/and
                return f"({a[0]}{'|' if op is Ops.ADD else '&'}{a[1]})"
            if op in (Ops.SHL, Ops.SHR):
                return _shift(op, dt, a[0], a[1])
            if op in (Ops.ADD, Ops.SUB, Ops.MUL) and overflow and dtypes.is_int(dt):
                # signed overflow is undefined in C (and small types promote to int): wrap in unsigned arithmetic
                u_t = _unsigned_work_type(dt)
                return f"(({c_type(dt)})(({u_t}){a[0]}{BINARY_INFIX[op]}({u_t}){a[1]}))"
            return f"({a[0]}{BINARY_INFIX[op]}{a[1]})"
        if op is Ops.NEG:
            if dtypes.is_int(dt) and not dtypes.is_unsigned(dt):
                u_t = "unsigned " + c_type(dt).replace("signed ", "")
                return f"(({c_type(dt)})(0u-({u_t}){a[0]}))"
            return f"(!{a[0]})" if dt is dtypes.bool else f"(-{a[0]})"
        if op is Ops.RECIPROCAL:
            return f"(1/{a[0]})"
        if op in MATH_FN:
            return f"{_float_fn(MATH_FN[op], dt)}({a[0]})"
        if op is Ops.POW:
            return f"{_float_fn('pow', dt)}({a[0]},{a[1]})"
        if op is Ops.MAX:
            if dtypes.is_float(dt):  # propagate NaN like numpy.maximum
                return f"(({a[0]}!={a[0]}||{a[0]}>{a[1]})?{a[0]}:{a[1]})"
            return f"({a[0]}>{a[1]}?{a[0]}:{a[1]})"
        if op is Ops.WHERE:
            return f"({a[0]}?{a[1]}:{a[2]})"
        if op is Ops.MULACC:
            return f"(({a[0]}*{a[1]})+{a[2]})"
        raise NotImplementedError(f"C renderer: no rule for {op}")

    def _cast(self, u: UOp, x: str) -> str:
        src, dst = u.src[0].dtype, u.dtype
        if dst.count == 1:
            return self._scalar_cast(src, dst, x)
        widen = WIDEN_BYTES.get((src.scalar(), dst.count))
        if widen is not None and dst.scalar() in (dtypes.int32, dtypes.uint32):
            return f"(({c_type(dst)}){widen}({x}))"
        if widen is not None and dtypes.is_float(dst.scalar()) and dst.scalar() is not dtypes.bfloat16:
            return f"__builtin_convertvector({widen}({x}), {c_type(dst)})"  # (exact widening: one rounding)
        if (half := HALF_TO_FLOAT.get((src, dst))) is not None:
            return f"{half}({x})"
        if (narrow := NARROWING.get((src, dst))) is not None:
            return f"{narrow}({x})"
        if _convertvector_exact(src.scalar(), dst.scalar()):
            return f"__builtin_convertvector({x}, {c_type(dst)})"
        lanes = [self._scalar_cast(src.scalar(), dst.scalar(), f"{x}[{i}]") for i in range(dst.count)]
        return f"(({c_type(dst)}){{{', '.join(lanes)}}})"

    @staticmethod
    def _scalar_cast(src: DType, dst: DType, x: str) -> str:
        if src is dtypes.bfloat16:
            x, src = f"tg_bf16_to_f32({x})", dtypes.float32
        if dst is dtypes.bfloat16 and src in (dtypes.int64, dtypes.uint64):
            if src is dtypes.uint64:
                return f"tg_u64_to_bf16({x}, 0)"
            return f"tg_u64_to_bf16(({x})<0?0ull-(unsigned long long)({x}):(unsigned long long)({x}), ({x})<0)"
        if dst is dtypes.bfloat16:
            return f"tg_f32_to_bf16({x})" if src in (dtypes.float32, dtypes.float16) or (
                dtypes.is_int(src) and src.itemsize <= 2) or src is dtypes.bool else f"tg_f64_to_bf16((double)({x}))"
        if dst is dtypes.bool:
            return f"({x}!=0)"
        if dtypes.is_float(src) and dtypes.is_int(dst):
            # C leaves out-of-range float->int undefined; we truncate toward zero and wrap modulo 2^bits,
            # like constant folding (NaN and inf give 0). fmod by 2^64 is exact.
            y = f"__builtin_fmod((double)({x}),18446744073709551616.0)"
            wrapped = f"(({y})<0?(0ull-(unsigned long long)(-({y}))):(unsigned long long)({y}))"
            return f"(({x})!=({x})||__builtin_isinf({x})?({c_type(dst)})0:({c_type(dst)}){wrapped})"
        return f"(({c_type(dst)})({x}))"

    def _bitcast(self, u: UOp, x: str) -> str:
        src, dst = c_type(u.src[0].dtype), c_type(u.dtype)
        return f"({{ union {{ {src} a; {dst} b; }} tg_v; tg_v.a = {x}; tg_v.b; }})"

    def _vector(self, u: UOp, lanes: list[str]) -> str:
        return f"(({c_type(u.dtype)}){{{', '.join(lanes)}}})"

    # ---- the function ----
    def listing(self, output: str | bytes) -> tuple[str, str]:
        return (output if isinstance(output, str) else output.decode(errors="replace")), "c"

    def render(self, name: str, kernel: list[UOp] | UOp) -> str:
        assert isinstance(kernel, list)
        names: dict[UOp, str] = {}
        lane_gates: dict[UOp, list[str]] = {}  # bool vectors that gate accesses lane by lane: each lane's name
        params: list[tuple[int, str]] = []
        body: list[str] = []
        depth = 1
        counter: dict[str, int] = {}
        reg_decls: list[str] = []

        def fresh(prefix: str) -> str:
            counter[prefix] = counter.get(prefix, 0) + 1
            return f"{prefix}{counter[prefix] - 1}"

        def line(text: str) -> None:
            body.append("  " * depth + text)

        prefetch = Prefetcher(kernel, UNROLL_TRIPS, COMPILER_VECTORIZED_TRIPS, to_l2=True)
        innermost, loops_at = loop_nest(kernel)

        for u in kernel:
            op = u.op
            if op is Ops.PARAM:
                names[u] = f"data{u.arg}"
                params.append((u.arg, f"{c_type(u.dtype)} restrict data{u.arg}"))
            elif op is Ops.DEFINE_VAR:
                names[u] = u.arg[0]
                params.append((1 << 30, f"int {u.arg[0]}"))
            elif op is Ops.CONST:
                names[u] = c_const(u.arg, u.dtype)
            elif op is Ops.RANGE:
                r = fresh("ridx")
                names[u] = r
                end = names[u.src[0]]
                if u.arg.kind is RangeKind.THREAD:
                    chunk = f"(({end}+{u.arg.threads - 1})/{u.arg.threads})"
                    line(f"int {r}_end = (core_id+1)*{chunk} < {end} ? (core_id+1)*{chunk} : {end};")
                    line(f"for (int {r} = core_id*{chunk}; {r} < {r}_end; {r}++) {{")
                else:
                    trips = u.src[0].arg if u.src[0].op is Ops.CONST else 0
                    if 1 < trips <= UNROLL_TRIPS and u in innermost:  # unrolled: each copy's index math folds
                        line(f"#pragma GCC unroll {trips}")
                    line(f"for ({c_type(u.dtype)} {r} = 0; {r} < {end}; {r}++) {{")
                depth += 1
            elif op is Ops.END:
                for _ in u.src[1:]:
                    depth -= 1
                    line("}")
            elif op is Ops.DEFINE_REG:  # accumulators: plain locals so the compiler keeps them in registers
                names[u] = fresh("acc")
                reg_decls.append(f"{c_type(u.dtype.base)} {names[u]};")  # type: ignore[attr-defined]
            elif op is Ops.AFTER:
                names[u] = names[u.src[0]]
            elif op is Ops.INDEX:
                ptr, idx = names[u.src[0]], names[u.src[1]]
                names[u] = ptr if not self._in_memory(u) else f"{ptr}[{idx}]"
            elif op is Ops.LOAD:
                ahead = prefetch.distance(u, loops_at[u])
                if ahead is not None:
                    gate = prefetch.once_per_line.get(u)  # (in a loop the compiler unrolls: the condition folds)
                    hint = ", 0, 2" if u in prefetch.to_l2 else ""  # (read, locality 2: gcc's prefetcht1)
                    line(("" if gate is None else f"if ({names[gate[0]]} % {gate[1]} == 0) ")
                         + f"__builtin_prefetch(&{names[u.src[0].src[0]]}[{names[u.src[0].src[1]]}+{ahead}]{hint});")
                line(self._load(u, names, v := fresh("val"), lane_gates))
                names[u] = v
            elif op is Ops.STORE:
                line(self._store(u, names, lane_gates))
            elif op is Ops.VCONST:
                names[u] = self._vector(u, [c_const(x, u.dtype.scalar()) for x in u.arg])
            elif op in (Ops.VECTORIZE, Ops.GEP):
                if op is Ops.VECTORIZE and u.dtype.scalar() is dtypes.bool:  # maybe a gate per lane of an access
                    lane_gates[u] = [names[x] for x in u.src]
                lanes = [names[x] for x in u.src] if op is Ops.VECTORIZE else [f"{names[u.src[0]]}[{i}]" for i in u.arg]
                v = fresh("vec")
                shuffle = _shuffle(u, names) if op is Ops.VECTORIZE else None
                value = shuffle or (lanes[0] if u.dtype.count == 1 else self._vector(u, lanes))
                line(f"const {c_type(u.dtype)} {v} = {value};")
                names[u] = v
            elif op is Ops.GROUP:
                pass
            elif op is Ops.SINK:
                pass
            else:
                if op is Ops.CUSTOMI:  # a call of a helper of the preamble
                    expr = f"{u.arg}({', '.join(names[s] for s in u.src)})"
                elif op is Ops.CAST:
                    expr = self._cast(u, names[u.src[0]])
                elif op is Ops.BITCAST:
                    expr = self._bitcast(u, names[u.src[0]])
                else:
                    expr = self._alu(u, [names[s] for s in u.src])
                v = fresh("alu")
                line(f"const {c_type(u.dtype)} {v} = {expr};")
                names[u] = v
        args = [p for _, p in sorted(params)] + ["int core_id"]
        head = f"void {name}({', '.join(args)}) {{"
        decls = ["  " + d for d in reg_decls]
        vectors = sorted({d for u in kernel for d in (u.dtype, getattr(u.dtype, "base", u.dtype)) if d.count > 1},
                         key=lambda d: d.name)
        if any(u.op is Ops.CAST and (u.src[0].dtype.scalar(), u.dtype.count) in WIDEN_BYTES and u.dtype.count > 1
               for u in kernel):  # the widening helpers need their 8-lane source types
            vectors = sorted(set(vectors) | WIDEN_TYPES, key=lambda d: d.name)
            helpers = WIDEN_PREAMBLE
        else:
            helpers = ""
        if any(u.op is Ops.LOAD and _table_lookup(u) for u in kernel):
            vectors = sorted(set(vectors) | {dtypes.float32.vec(8), dtypes.int32.vec(8)}, key=lambda d: d.name)
            helpers += TABLE16_PREAMBLE
        halves = {(u.src[0].dtype, u.dtype) for u in kernel if u.op is Ops.CAST} & set(HALF_TO_FLOAT)
        for (half, single), preamble in (((dtypes.float16.vec(8), dtypes.float32.vec(8)), HALF_PREAMBLE),
                                         ((dtypes.float16.vec(16), dtypes.float32.vec(16)), HALF16_PREAMBLE),
                                         ((dtypes.float16.vec(2), dtypes.float32.vec(2)), HALF2_PREAMBLE)):
            if (half, single) in halves:
                vectors = sorted(set(vectors) | {half, single}, key=lambda d: d.name)
                helpers += preamble
        byte_vectors, byte_preambles = byte_helpers(kernel, names, lane_gates)
        vectors = sorted(set(vectors) | byte_vectors, key=lambda d: d.name)
        helpers += byte_preambles
        typedefs = "".join(vector_typedef(d) + "\n" for d in vectors)
        return PREAMBLE + typedefs + helpers + head + "\n" + "\n".join(decls + body) + "\n}\n"

    @staticmethod
    def _in_memory(index: UOp) -> bool:
        """A vector access to memory (not to an accumulator) goes through memcpy: no alignment assumed."""
        ptr = index.src[0].dtype
        return getattr(ptr, "addrspace", AddrSpace.GLOBAL) is not AddrSpace.REG

    @staticmethod
    def _lanewise(index: UOp, names: dict[UOp, str], gates: list[str], piece: Callable[[int, int, str], str],
                  whole: str) -> str:
        """An access gated lane by lane: the whole vector when every gate is true (the usual case: only a loop's
        last, padded iteration has false lanes), nothing when none is (a vector wholly in the padding), else each
        run of neighbouring lanes with one gate as one piece (``piece(first lane, lanes, address)``: a padded row's
        last vector copies its real lanes at once, not one by one)."""
        ptr, idx = names[index.src[0]], names[index.src[1]]
        runs: list[list] = []  # [first lane, lanes, gate]
        for i, g in enumerate(gates):
            if runs and runs[-1][2] == g:
                runs[-1][1] += 1
            else:
                runs.append([i, 1, g])
        pieces = " ".join(f"if ({g}) {{ {piece(first, n, f'{ptr}[{idx}+{first}]')} }}" for first, n, g in runs)
        return f"if ({' & '.join(gates)}) {{ {whole} }} else if ({' | '.join(gates)}) {{ {pieces} }}"

    def _load(self, u: UOp, names: dict[UOp, str], v: str, lane_gates: dict[UOp, list[str]]) -> str:
        index, t = u.src[0], c_type(u.dtype)
        if index.src[1].dtype.count > 1:  # a gather: one index per lane
            ptr, idx = names[index.src[0]], names[index.src[1]]
            if _table_lookup(u):
                return f"const {t} {v} = tg_table16_f32({ptr}, {idx});"
            if (byte_index := byte_table_lookup(u)) is not None:
                if (nibble_bits := low4_index(byte_index)) is not None:
                    return f"const {t} {v} = {LOW4_TABLE_HELPER}({ptr}, {names[nibble_bits]});"
                return f"const {t} {v} = {BYTE_TABLE_HELPER}({ptr}, {names[byte_index]});"
            return f"const {t} {v} = (({t}){{{', '.join(f'{ptr}[{idx}[{i}]]' for i in range(u.dtype.count))}}});"
        if len(index.src) > 2 and index.src[2] in lane_gates:
            copy = f"__builtin_memcpy(&{v}, &{names[index]}, sizeof({v}));"
            def load_piece(first: int, n: int, at: str) -> str:
                if n == 1:
                    return f"{v}[{first}] = {at};"
                return f"__builtin_memcpy((char*)&{v} + {first}*sizeof({v}[0]), &{at}, {n}*sizeof({v}[0]));"
            return f"{t} {v} = {c_const(0, u.dtype)}; " + self._lanewise(
                index, names, lane_gates[index.src[2]], load_piece, copy)
        if (ranged := range_gated_load(u, names, v, t, c_const(0, u.dtype))) is not None:  # a row piece's lanes
            return ranged
        gate = names[index.src[2]] if len(index.src) > 2 else None
        if u.dtype.count > 1 and self._in_memory(index):
            copy = f"__builtin_memcpy(&{v}, &{names[index]}, sizeof({v}));"
            if gate is None:
                return f"{t} {v}; {copy}"
            return f"{t} {v} = {c_const(0, u.dtype)}; if ({gate}) {{ {copy} }}"
        if gate is None:
            return f"const {t} {v} = {names[index]};"
        return f"const {t} {v} = {gate} ? {names[index]} : {c_const(0, u.dtype)};"  # read nothing when gated off

    def _store(self, u: UOp, names: dict[UOp, str], lane_gates: dict[UOp, list[str]]) -> str:
        index, value = u.src[0], u.src[1]
        if len(index.src) > 2 and index.src[2] in lane_gates:
            copy = (f"{c_type(value.dtype)} tg_t = {names[value]}; "
                    f"__builtin_memcpy(&{names[index]}, &tg_t, sizeof(tg_t));")
            def store_piece(first: int, n: int, at: str) -> str:
                # lane by lane: a memcpy from the address of a copy of the vector made gcc keep the value (a
                # register tile's accumulator, through the copies) in memory, in the whole reduction loop too
                ptr, idx = names[index.src[0]], names[index.src[1]]
                return " ".join(f"{ptr}[{idx}+{first + j}] = {names[value]}[{first + j}];" for j in range(n))
            return self._lanewise(index, names, lane_gates[index.src[2]], store_piece, copy)
        if (ranged := range_gated_store(u, names, c_type(value.dtype))) is not None:  # a row piece's lanes
            return ranged
        if value.dtype.count > 1 and self._in_memory(index):
            text = (f"{{ {c_type(value.dtype)} tg_t = {names[value]}; "
                    f"__builtin_memcpy(&{names[index]}, &tg_t, sizeof(tg_t)); }}")
        else:
            text = f"{names[index]} = {names[value]};"
        return f"if ({names[index.src[2]]}) {text}" if len(index.src) > 2 else text


__all__ = ["CRenderer", "c_type", "AddrSpace"]

"""C renderer: a vector access gated by a range of lanes (a row piece's), from one scalar bound per term.

In:  a LOAD or STORE whose INDEX gate is a bool vector made of lane ranges (``_Expander.lane_range``: a conjunction
     of broadcast bools, ``lanes < bound`` and ``bound < lanes``, lanes the VCONST ``0..n-1``), names of the
     rendered values.
Out: the access as C: the whole vector when every lane is on, nothing when a term alone leaves no lane on, else
     lane by lane (a compare per bound, not one per lane); a 16-lane float32 store as one masked store (AVX-512F,
     ``RANGE_STORE_PREAMBLE``'s ``tg_store_f32x16_masked``). Any other gate: None (the caller renders it).
"""
from __future__ import annotations

from tgcore.dtype import dtypes
from tgcore.uop import Ops, UOp

# a store of the lanes of a range (``lane_range``: a row piece's) that is neither whole nor empty: one masked
# store with AVX-512F (gcc's builtin), else lane by lane (constant lanes: the vector stays in its register)
RANGE_STORE_PREAMBLE = """\
static inline unsigned tg_lanes_below(long long n) { return n >= 32 ? ~0u : n <= 0 ? 0u : (1u << n) - 1u; }
static inline void tg_store_f32x16_masked(float* p, tg_float32x16 v, unsigned m) {
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_ia32_storeups512_mask(p, v, (unsigned short)m);
#else
  for (int j = 0; j < 16; j++) if (m >> j & 1u) p[j] = v[j];
#endif
}
"""


def lane_range(gate: UOp, names: dict[UOp, str]) -> tuple[str, str, list[str], str] | None:
    """A bool vector gate made of lane ranges (``_Expander.lane_range``: a conjunction of broadcast bools,
    ``lanes < bound`` and ``bound < lanes``) as C conditions on scalars (a compare per bound, not one per lane):
    that every lane is on, that some may be (false when each range alone is empty), each lane's condition, and the
    lanes as a bit mask (``RANGE_STORE_PREAMBLE``); None for another gate."""
    terms, todo = [], [gate]
    while todo:
        t = todo.pop()
        if t.op is Ops.AND:
            todo += t.src
        else:
            terms.append(t)
    whole: list[str] = []
    some: list[str] = []
    masks: list[str] = []
    lanes: list[list[str]] = [[] for _ in range(gate.dtype.count)]
    for t in terms:
        if t.op is Ops.VECTORIZE and all(x is t.src[0] for x in t.src):
            whole.append(names[t.src[0]])
            some.append(names[t.src[0]])
            masks.append(f"({names[t.src[0]]} ? ~0u : 0u)")
            for c in lanes:
                c.append(names[t.src[0]])
            continue
        if t.op is not Ops.CMPLT or {s.op for s in t.src} != {Ops.VCONST, Ops.VECTORIZE}:
            return None
        prefix = t.src[0].op is Ops.VCONST
        consts, bound = (t.src[0], t.src[1]) if prefix else (t.src[1], t.src[0])
        if any(x is not bound.src[0] for x in bound.src):
            return None
        b = names[bound.src[0]]
        whole.append(f"({max(consts.arg)} < {b})" if prefix else f"({b} < {min(consts.arg)})")
        some.append(f"({min(consts.arg)} < {b})" if prefix else f"({b} < {max(consts.arg)})")
        if list(consts.arg) != list(range(len(consts.arg))):
            return None
        masks.append(f"tg_lanes_below({b})" if prefix else f"~tg_lanes_below({b} + 1)")
        for c, k in zip(lanes, consts.arg, strict=True):
            c.append(f"({k} < {b})" if prefix else f"({b} < {k})")
    return " && ".join(whole), " && ".join(some), [" && ".join(c) for c in lanes], " & ".join(masks)


def _ranged(index: UOp, names: dict[UOp, str]) -> tuple[str, str, list[str], str] | None:
    """``lane_range`` of the INDEX's gate when it is a bool vector of that form."""
    if len(index.src) > 2 and index.src[2].dtype.count > 1:
        return lane_range(index.src[2], names)
    return None


def range_gated_load(u: UOp, names: dict[UOp, str], v: str, t: str, zero: str) -> str | None:
    """The LOAD ``u`` into the new local ``v`` (C type ``t``, ``zero`` its zero) when its gate is a range of lanes
    (the earlier K tiles' sum, read at a row piece's store index); None for another gate."""
    if (ranged := _ranged(index := u.src[0], names)) is None:
        return None
    whole, some, lanes, _ = ranged
    ptr, idx = names[index.src[0]], names[index.src[1]]
    each = " ".join(f"if ({c}) {v}[{j}] = {ptr}[{idx}+{j}];" for j, c in enumerate(lanes))
    return (f"{t} {v} = {zero}; if ({whole}) {{ __builtin_memcpy(&{v}, &{names[index]}, "
            f"sizeof({v})); }} else if ({some}) {{ {each} }}")


def range_gated_store(u: UOp, names: dict[UOp, str], t: str) -> str | None:
    """The STORE ``u`` (its value of C type ``t``) when its gate is a range of lanes (a row piece's); None for
    another gate."""
    index, value = u.src[0], u.src[1]
    if (ranged := _ranged(index, names)) is None:
        return None
    whole, some, lanes, mask = ranged
    copy = f"{t} tg_t = {names[value]}; __builtin_memcpy(&{names[index]}, &tg_t, sizeof(tg_t));"
    ptr, idx = names[index.src[0]], names[index.src[1]]
    if value.dtype == dtypes.float32.vec(16):  # one masked store (AVX-512F) of the lanes in range
        each = f"tg_store_f32x16_masked(&{ptr}[{idx}], {names[value]}, {mask});"
    else:
        each = " ".join(f"if ({c}) {ptr}[{idx}+{j}] = {names[value]}[{j}];" for j, c in enumerate(lanes))
    return f"if ({whole}) {{ {copy} }} else if ({some}) {{ {each} }}"


def uses_range_store(kernel: list[UOp], names: dict[UOp, str], lane_gates: dict[UOp, list[str]]) -> bool:
    """Whether a 16-lane float32 store of ``kernel`` is range-gated (not gated lane by lane: ``lane_gates``), so
    ``RANGE_STORE_PREAMBLE`` is needed."""
    return any(u.op is Ops.STORE and u.src[1].dtype == dtypes.float32.vec(16) and len(u.src[0].src) > 2
               and u.src[0].src[2].dtype.count > 1 and u.src[0].src[2] not in lane_gates
               and lane_range(u.src[0].src[2], names) is not None for u in kernel)

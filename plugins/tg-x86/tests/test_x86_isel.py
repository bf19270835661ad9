"""Instruction selection on CPU:X86, seen in the machine code: each test builds a small Tensor expression,
renders its kernel to bytes, decodes them with capstone (the reference decoder, detail mode) and checks
which instructions were selected (mnemonics, operand kinds, registers, address parts, displacement sizes),
then checks the values against numpy.

The code is reached only through entry points that survive a refactor of the selector: codegen's
``get_program``, ``X86Renderer().render(name, uops)`` (bytes) and the renderer's ``compiler``/``program``
attributes (to run edited kernels). Rules no Tensor expression reaches today (MULACC; GEPs that permute
lanes) are tested on a real kernel's linear UOps edited at one node (``edit``), rendered and run the same way.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from tg_x86.cpu import unavailable_reason
from tg_x86_testutil import Decoded, disassemble

from tgcore.dtype import DType, dtypes
from tgcore.tensor import Tensor
from tgcore.uop import Ops, UOp

pytestmark = pytest.mark.skipif(unavailable_reason() is not None, reason=f"X86 backend: {unavailable_reason()}")
X86 = "CPU:X86"
rng = np.random.default_rng(0)


# ---------------------------------------------------------------- helpers

def program(t: Tensor) -> tuple[str, list[UOp]]:
    """(name, linear UOps) of the one kernel that computes ``t``, as codegen makes it for the X86 renderer (at the
    AVX2 level, whatever TG_ISA says: the code shapes these tests assert are AVX2's; ``test_x86_avx512`` has the
    other level's)."""
    from tg_x86.renderer import X86Renderer

    from tgcore.codegen import get_program
    from tgcore.schedule.kernelize import create_schedule
    items, _ = create_schedule([t.uop], t.device)
    (spec,) = [get_program(si.ast, X86Renderer(isa="avx2"), 1) for si in items if si.kind != "copy"]
    return spec.name, list(spec.uops)


def render(name: str, uops: list[UOp]) -> bytes:
    from tg_x86.renderer import X86Renderer
    return X86Renderer(isa="avx2").render(name, uops)


def machine_code(t: Tensor) -> list[Decoded]:
    """The decoded instructions of the one kernel that computes ``t``."""
    return disassemble(render(*program(t)))


def named(insts: list[Decoded], *mnemonics: str) -> list[Decoded]:
    return [i for i in insts if i.mnemonic in mnemonics]


def starting(insts: list[Decoded], prefix: str) -> list[Decoded]:
    return [i for i in insts if i.mnemonic.startswith(prefix)]


def value_compares(insts: list[Decoded]) -> list[Decoded]:
    """The cmps of two values (a loop's counter is compared with an immediate)."""
    return [i for i in named(insts, "cmp") if all(o.kind != "imm" for o in i.operands)]


def buffer_reads(insts: list[Decoded]) -> list[Decoded]:
    """Instructions reading a buffer element (an indexed memory source; frame slots are rsp-based)."""
    return [i for i in insts if any(o.kind == "mem" and o.index and o.base != "rsp" for o in i.operands[1:])]


def is_ymm(i: Decoded) -> bool:
    return any(o.kind == "reg" and o.reg.startswith("ymm") for o in i.operands)


def edit(uops: list[UOp], replace: dict[UOp, Callable[[UOp], UOp]], drop: frozenset = frozenset()) -> list[UOp]:
    """The linear list with each key of ``replace`` rebuilt by its function (which gets the node with its sources
    already edited) and the nodes in ``drop`` left out; new nodes a replacement needs go right before it."""
    new: dict[UOp, UOp] = {}
    out: list[UOp] = []
    for u in uops:
        if u in drop:
            continue
        v = u.replace(src=tuple(new.get(s, s) for s in u.src)) if any(s in new for s in u.src) else u
        if u in replace:
            v = replace[u](v)
            placed = set(out)
            out.extend(n for n in v.toposort if n not in placed and n is not v)
        new[u] = v
        out.append(v)
    return out


def run(name: str, uops: list[UOp], buffers: dict[int, np.ndarray]) -> bytes:
    """Render ``uops``, load the code and call it on ``buffers`` (by PARAM number); returns the code."""
    from tg_x86.renderer import X86Renderer
    r = X86Renderer(isa="avx2")
    code = render(name, uops)
    prg = r.program(name, r.compiler.compile(code))
    prg(*[buffers[k].ctypes.data for k in range(len(buffers))])
    return code


def param_of(u: UOp) -> int:
    """The buffer number a LOAD reads (or a STORE writes)."""
    (p,) = [n for n in u.toposort if n.op is Ops.PARAM]
    return p.arg


def output_param(uops: list[UOp]) -> int:
    (store,) = [u for u in uops if u.op is Ops.STORE]
    return param_of(store.src[0])


def ints(values: list[int], dt: DType) -> np.ndarray:
    return np.array(values, np.int64).astype(dt.np)   # wraps negative values for unsigned dtypes


# ---------------------------------------------------------------- cmov shares the compare's flags

CMOV_CASES = [("<", dtypes.int32, "cmovl"), ("<", dtypes.uint32, "cmovb"), ("<", dtypes.int64, "cmovl"),
              ("!=", dtypes.int32, "cmovne"), ("!=", dtypes.uint32, "cmovne"), ("!=", dtypes.int64, "cmovne"),
              ("==", dtypes.int32, "cmove")]
COMPARE = {"<": lambda a, b: a < b, "!=": lambda a, b: a != b, "==": lambda a, b: a == b}


@pytest.mark.parametrize("cmp, dt, cmov", CMOV_CASES, ids=lambda v: str(v))
def test_where_of_a_compare_is_one_cmp_and_a_cmov(cmp, dt, cmov):
    """7 elements (scalar code): the where reads the flags of the compare; no bool is made (setcc) or tested."""
    a, b = ints([3, -2, 5, 5, 0, -7, 9], dt), ints([1, 4, 5, -5, 0, 8, -9], dt)
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    t = COMPARE[cmp](x, y).where(x, y)
    insts = machine_code(t)
    (c,) = value_compares(insts)
    (mov,) = starting(insts, "cmov")
    assert mov.mnemonic == cmov and c.address < mov.address
    assert mov.regs()[1] in c.regs()     # it moves one of the compared values
    assert not starting(insts, "set") and not named(insts, "test")
    np.testing.assert_array_equal(t.numpy(), np.where(COMPARE[cmp](a, b), a, b))


# (x compared with the constant 3 on either side, the cmov of the WHERE): the constant is cmp's immediate
CONST_COMPARES = [(lambda x: 3 < x, lambda a: 3 < a, "cmovg"), (lambda x: x < 3, lambda a: a < 3, "cmovl"),
                  (lambda x: 3 == x, lambda a: 3 == a, "cmove"), (lambda x: x != 3, lambda a: a != 3, "cmovne")]
UNSIGNED_CMOV = {"cmovg": "cmova", "cmovl": "cmovb"}   # above/below instead of greater/less


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint32, dtypes.int64], ids=str)
@pytest.mark.parametrize("cmp, ref, cmov", CONST_COMPARES, ids=["3<x", "x<3", "3==x", "x!=3"])
def test_compare_with_a_constant_takes_an_immediate(cmp, ref, cmov, dt):
    a, b = ints([3, -2, 5, 5, 0, -7, 9], dt), ints([1, 4, 5, -5, 0, 8, -9], dt)
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    t = cmp(x).where(x, y)
    insts = machine_code(t)
    (c,) = [i for i in named(insts, "cmp") if i.operands[1].kind == "imm" and i.operands[1].imm == 3]
    (m,) = starting(insts, "cmov")
    assert m.mnemonic == (UNSIGNED_CMOV.get(cmov, cmov) if dtypes.is_unsigned(dt) else cmov)
    assert not value_compares(insts) and c.address < m.address
    np.testing.assert_array_equal(t.numpy(), np.where(ref(a), a, b))


# flag users of one "cmp a, b": (kind, cmovs expected, setccs expected)
SHARED_FLAGS = {"two wheres": (2, 0), "where and value": (1, 1), "< and != of the same values": (2, 0),
                "> and == of the same values": (2, 0), "value then where": (1, 1)}


def _flag_users(kind: str) -> tuple[Tensor, np.ndarray]:
    a, b = ints([3, -2, 5, 5, 0, -7, 9], dtypes.int32), ints([1, 4, 5, -5, 0, 8, -9], dtypes.int32)
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    c = x != y
    if kind == "two wheres":
        return c.where(x, y) + c.where(y, x), np.where(a != b, a, b) + np.where(a != b, b, a)
    if kind == "where and value":
        return c.where(x, y) + c.cast(dtypes.int32), np.where(a != b, a, b) + (a != b)
    if kind == "value then where":
        return c.cast(dtypes.int32) - c.where(x, y), (a != b) - np.where(a != b, a, b)
    if kind == "> and == of the same values":   # x > y is y < x: the same cmp, the condition swapped
        return (x > y).where(x, y) + (y == x).where(y, x), np.where(a > b, a, b) + np.where(b == a, b, a)
    return (x < y).where(x, y) + c.where(x, y), np.where(a < b, a, b) + np.where(a != b, a, b)


FLAG_READERS = ("cmov", "set", "j")


def flags_written(code: bytes) -> dict[int, bool]:
    """Address -> does the instruction write any status flag, as capstone's flag tables say."""
    import capstone
    from capstone import x86
    writes = 0
    for name in dir(x86):
        if name.startswith("X86_EFLAGS_") and not name.startswith("X86_EFLAGS_TEST_"):
            writes |= getattr(x86, name)
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    return {i.address: bool(i.eflags & writes) for i in md.disasm(code, 0)}


def flag_sources(code: bytes, mnemonics: tuple[str, ...]) -> list[Decoded]:
    """For each instruction named in ``mnemonics`` (flag readers): the instruction that last wrote the flags
    before it, in straight-line code (asserted: no jump lands in between)."""
    insts = disassemble(code)
    writes = flags_written(code)
    targets = {o.imm for i in insts if i.mnemonic.startswith("j") for o in i.operands if o.kind == "imm"}
    out = []
    for k, i in enumerate(insts):
        if i.mnemonic in mnemonics:
            w = next(j for j in reversed(insts[:k]) if writes[j.address])
            assert not any(w.address < t <= i.address for t in targets), f"a jump lands between {w.text} and {i.text}"
            out.append(w)
    return out


@pytest.mark.parametrize("kind", list(SHARED_FLAGS))
def test_flag_users_of_the_same_values_share_one_cmp(kind):
    """Every cmov and setcc of the kernel reads the flags of one cmp of the two values: nothing between them
    writes the flags, and no bool is tested."""
    t, ref = _flag_users(kind)
    code = render(*program(t))
    insts = disassemble(code)
    cmovs, sets = SHARED_FLAGS[kind]
    (c,) = value_compares(insts)
    assert len(starting(insts, "cmov")) == cmovs and len(starting(insts, "set")) == sets and not named(insts, "test")
    readers = tuple(i.mnemonic for i in starting(insts, "cmov") + starting(insts, "set"))
    assert all(w == c for w in flag_sources(code, readers))
    np.testing.assert_array_equal(t.numpy(), ref)


def test_compare_is_made_again_when_the_flags_are_overwritten():
    """c.where(x, y) + (x >> (y & 7)) + c.where(y, x): the shift between the two WHEREs writes the flags (its
    range check too), so the second cmov needs the cmp again: each cmovl reads a cmp of the two values."""
    a, b = ints([3, -2, 5, 5, 0, -7, 9], dtypes.int32), ints([1, 4, 5, -5, 0, 8, -9], dtypes.int32)
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    c = x < y
    t = c.where(x, y) + (x >> (y & 7)) + c.where(y, x)
    code = render(*program(t))
    sources = flag_sources(code, ("cmovl", "cmovge"))
    assert len(sources) == 2 and all(w.mnemonic == "cmp" and w in value_compares(disassemble(code)) for w in sources)
    np.testing.assert_array_equal(t.numpy(), np.where(a < b, a, b) + (a >> (b & 7)) + np.where(a < b, b, a))


# gates: (padding in front, dtype); x padded reads x[i-k] only where k <= i
GATES = [(3, dtypes.float32), (3, dtypes.int32), (40, dtypes.float32)]


@pytest.mark.parametrize("k, dt", GATES, ids=str)
def test_gated_load_picks_its_address_on_the_flags_of_its_compare(k, dt):
    """x padded by k in front (k + 4 elements: scalar code): no jump around the load; a cmov reading the flags of
    a cmp of the index with the immediate k-1 (no bool made and tested, no constant in a register) switches the
    load's address to the frame's zero slot."""
    a = np.arange(1, 5).astype(dt.np)
    t = Tensor(a, device=X86).pad(((k, 0),)) * 3
    code = render(*program(t))
    insts = disassemble(code)
    np.testing.assert_array_equal(t.numpy(), np.pad(a, (k, 0)) * np.array(3, dt.np))
    assert [i.mnemonic for i in starting(insts, "j")] == ["jl"] and not named(insts, "test")   # the back edge only
    dummy = {i.operands[0].reg for i in named(insts, "lea") if i.mem().base == "rsp"}
    picks = [i for i in starting(insts, "cmov") if i.operands[1].reg in dummy]   # (the int WHERE shares the flags)
    assert len(picks) == 1
    (w,) = flag_sources(code, (picks[0].mnemonic,))
    assert w.mnemonic == "cmp" and w.operands[1].kind == "imm" and w.operands[1].imm == k - 1


# ---------------------------------------------------------------- max/min/fma forms by dtype

FORMS = [(dtypes.float32, 7, "ss"), (dtypes.float64, 7, "sd"), (dtypes.float32, 64, "ps"), (dtypes.float64, 64, "pd")]
FORM_IDS = ["float32-scalar", "float64-scalar", "float32-vector", "float64-vector"]


def _with_specials(dt: DType, n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(n).astype(dt.np)
    # pairs (seed 1, seed 2): NaN on either side, zeros of both signs both ways, infinities equal and opposite
    v[:7] = [np.nan, 0.0, -0.0, 1.5, np.inf, -np.inf, np.inf] if seed == 1 else [2.0, -0.0, 0.0, np.nan, np.inf,
                                                                                  np.inf, -np.inf]
    return v


@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_max_and_min_pick_the_form_of_the_dtype(dt, n, suffix):
    """The front end makes float minimum -max(-a, -b), so both are the vmax form of the dtype (NaN propagates
    through a vcmpunord blend); vector kernels work on ymm registers."""
    a, b = _with_specials(dt, n, 1), _with_specials(dt, n, 2)
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    for t, ref in ((x.maximum(y), np.maximum(a, b)), (x.minimum(y), np.minimum(a, b))):
        insts = machine_code(t)
        picks = starting(insts, "vmax") + starting(insts, "vmin")
        assert picks and {i.mnemonic for i in picks} == {"vmax" + suffix}
        assert all(is_ymm(i) == (suffix[0] == "p") for i in picks)
        np.testing.assert_array_equal(t.numpy(), ref)


# the four WHEREs picking between the two values one comparison compares: (tensor expression, numpy's, the
# instruction: vmin(s1, s2) is s1 < s2 ? s1 : s2, vmax(s1, s2) is s1 > s2 ? s1 : s2, both s2 on NaN or two zeros)
MINMAX_WHERES = [
    (lambda x, y: (x < y).where(x, y), lambda a, b: np.where(a < b, a, b), "vmin"),
    (lambda x, y: (x < y).where(y, x), lambda a, b: np.where(a < b, b, a), "vmax"),
    (lambda x, y: (x > y).where(x, y), lambda a, b: np.where(a > b, a, b), "vmax"),
    (lambda x, y: (x > y).where(y, x), lambda a, b: np.where(a > b, b, a), "vmin"),
]
MINMAX_IDS = ["(x<y).where(x,y)", "(x<y).where(y,x)", "(x>y).where(x,y)", "(x>y).where(y,x)"]


@pytest.mark.parametrize("expr, ref, form", MINMAX_WHERES, ids=MINMAX_IDS)
@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_where_of_a_less_than_matches_numpy(dt, n, suffix, expr, ref, form):
    """Bit for bit: which zero (0.0 or -0.0), which NaN and which infinity is picked matters here."""
    a, b = _with_specials(dt, n, 1), _with_specials(dt, n, 2)
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    bits = np.uint32 if dt is dtypes.float32 else np.uint64
    for (p, q), (u, v) in (((x, y), (a, b)), ((y, x), (b, a))):
        np.testing.assert_array_equal(expr(p, q).numpy().view(bits), ref(u, v).view(bits))


@pytest.mark.parametrize("expr, ref, form", MINMAX_WHERES, ids=MINMAX_IDS)
@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_where_of_a_less_than_selects_min_and_max(dt, n, suffix, expr, ref, form):
    """The WHERE is one vmin or vmax of the dtype's form (no compare, no blend, no bool), in ymm registers for
    vector kernels; the order of its operands is what the bit-exact test above checks (NaN, zeros)."""
    x, y = (Tensor(_with_specials(dt, n, s), device=X86) for s in (1, 2))
    insts = machine_code(expr(x, y))
    (pick,) = starting(insts, "vmin") + starting(insts, "vmax")
    assert pick.mnemonic == form + suffix and is_ymm(pick) == (suffix[0] == "p")
    assert not starting(insts, "vblendv") and not starting(insts, "vcmp") and not starting(insts, "vucomi")


@pytest.mark.parametrize("dt, fma", [(dtypes.float32, "vfmadd231ps"), (dtypes.float64, "vfmadd231pd")], ids=str)
def test_vector_accumulator_update_is_an_fma_of_the_dtype(dt, fma):
    """sum over rows: the 16 outputs are vector accumulators and acc + a*b is one packed FMA into the
    accumulator."""
    a = rng.integers(-8, 9, (16, 16)).astype(dt.np)
    b = rng.integers(-8, 9, (16, 16)).astype(dt.np)
    t = (Tensor(a, device=X86) * Tensor(b, device=X86)).sum(0)
    insts = machine_code(t)
    fmas = starting(insts, "vfmadd")
    assert fmas and {i.mnemonic for i in fmas} == {fma} and all(is_ymm(i) for i in fmas)
    assert not starting(insts, "vmul")
    np.testing.assert_array_equal(t.numpy(), (a * b).sum(0))   # small integers: exact in any order


def _mulacc_kernel(dt: DType, n: int) -> tuple[str, list[UOp], list[int]]:
    """The kernel of x*y+z with its MUL and ADD replaced by one MULACC (no Tensor expression makes MULACC);
    returns the buffer numbers of MULACC's three sources."""
    x, y, z = (Tensor(rng.standard_normal(n).astype(dt.np), device=X86) for _ in range(3))
    name, uops = program(x * y + z)
    (add,) = [u for u in uops if u.op is Ops.ADD and Ops.MUL in (u.src[0].op, u.src[1].op)]
    mul, acc = add.src if add.src[0].op is Ops.MUL else add.src[::-1]
    srcs = (mul.src[0], mul.src[1], acc)
    edited = edit(uops, {add: lambda v: UOp(Ops.MULACC, v.dtype, srcs)}, frozenset({mul}))
    return name, edited, [param_of(s) for s in srcs]


@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_mulacc_picks_the_fma_form_of_the_dtype(dt, n, suffix):
    """Selection level (MULACC is unreachable from Tensor code): the scalar and vector MULACC rules."""
    name, uops, params = _mulacc_kernel(dt, n)
    a, b, c = (rng.integers(-50, 50, n).astype(dt.np) for _ in range(3))
    out = np.zeros(n, dt.np)
    code = run(name, uops, {output_param(uops): out, **dict(zip(params, (a, b, c), strict=True))})
    fmas = starting(disassemble(code), "vfmadd")
    assert fmas and {i.mnemonic for i in fmas} == {"vfmadd231" + suffix}
    assert all(is_ymm(i) == (suffix[0] == "p") for i in fmas)
    np.testing.assert_array_equal(out, a * b + c)   # small integers: exact with one rounding or two


def _one_rounding_inputs(dt: DType, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(a, c, the exact a*a + c): a*a + c is e*e rounded once (fused) and 0 rounded twice (a*a = 1 + 2e + e*e,
    where e*e is half an ulp of 1, rounded off to even)."""
    e = 2.0 ** (-12 if dt is dtypes.float32 else -27)
    a, c = np.full(n, 1 + e, dt.np), np.full(n, -(1 + 2 * e), dt.np)
    assert not (a * a + c).any()    # numpy rounds the product, then the sum
    return a, c, e * e


@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_mulacc_rounds_once(dt, n, suffix):
    """Float MULACC is contracted on X86, like the C path's a*b + c (gcc contracts by default): one rounding (the
    interpreter and constant folding round twice; tests across backends compare with a tolerance)."""
    name, uops, params = _mulacc_kernel(dt, n)
    a, c, exact = _one_rounding_inputs(dt, n)
    out = np.zeros(n, dt.np)
    run(name, uops, {output_param(uops): out, **dict(zip(params, (a, a, c), strict=True))})
    np.testing.assert_array_equal(out, np.full(n, exact, dt.np))


# ---------------------------------------------------------------- a*b + c contracted to one FMA

MULADDS = {"x*y+z": lambda x, y, z: x * y + z, "z+x*y": lambda x, y, z: z + x * y}


@pytest.mark.parametrize("expr", list(MULADDS))
@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_multiply_add_is_one_fma_of_the_dtype(dt, n, suffix, expr):
    """A float add of a product nothing else reads is one vfmadd of the dtype (ss/sd, ps/pd on ymm), in either
    operand order: no separate multiply or add, and no copy (the form overwrites a source that dies there)."""
    a, b, c = (rng.integers(-50, 50, n).astype(dt.np) for _ in range(3))
    t = MULADDS[expr](*(Tensor(v, device=X86) for v in (a, b, c)))
    insts = machine_code(t)
    fmas = starting(insts, "vfmadd")
    (form,) = {i.mnemonic for i in fmas}
    assert form in {f"vfmadd{order}{suffix}" for order in ("132", "213", "231")}
    assert all(is_ymm(i) == (suffix[0] == "p") for i in fmas) and (len(fmas) == 1 or suffix[0] == "p")
    assert not starting(insts, "vmul") and not starting(insts, "vadd") and not named(insts, "vmovaps")
    np.testing.assert_array_equal(t.numpy(), MULADDS[expr](a, b, c))   # small integers: exact either way


@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_product_read_twice_is_not_fused(dt, n, suffix):
    """(x*y + z) * (x*y): the product has two users, so it is one multiply and the add rounds on its own."""
    a, b, c = (rng.standard_normal(n).astype(dt.np) for _ in range(3))
    x, y, z = (Tensor(v, device=X86) for v in (a, b, c))
    t = (x * y + z) * (x * y)
    insts = machine_code(t)
    assert not starting(insts, "vfmadd") and named(insts, "vadd" + suffix)
    np.testing.assert_array_equal(t.numpy(), (a * b + c) * (a * b))   # numpy rounds every op, as X86 does here


@pytest.mark.parametrize("expr", list(MULADDS))
@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_multiply_add_rounds_once_like_the_c_path(dt, n, suffix, expr):
    """On inputs where one rounding and two differ, X86 gives the exactly rounded a*b + c, bit for bit what the C
    renderer's kernel gives (the C compiler contracts a*b + c to an FMA too)."""
    a, c, exact = _one_rounding_inputs(dt, n)
    got = {dev: MULADDS[expr](*(Tensor(v, device=dev) for v in (a, a.copy(), c))).numpy() for dev in (X86, "CPU")}
    np.testing.assert_array_equal(got[X86], np.full(n, exact, dt.np))
    np.testing.assert_array_equal(got[X86], got["CPU"])


# ---------------------------------------------------------------- broadcasts of an int

BROADCASTS = [(dtypes.int32, "vmovd", "vpbroadcastd"), (dtypes.uint32, "vmovd", "vpbroadcastd"),
              (dtypes.int64, "vmovq", "vpbroadcastq")]


@pytest.mark.parametrize("dt, mov, bcast", BROADCASTS, ids=str)
def test_int_broadcast_of_a_register_goes_through_xmm(dt, mov, bcast):
    """s*3 is computed once in a gpr; broadcasting it to 8 (or 4) lanes is a move to xmm, then vpbroadcast."""
    a, s = ints(list(range(-32, 32)), dt), ints([5], dt)
    t = Tensor(a, device=X86) + (Tensor(s, device=X86) * 3).expand(64)
    insts = machine_code(t)
    (b,) = named(insts, bcast)
    dst, src = b.operands
    assert dst.kind == "reg" and dst.reg.startswith("ymm") and src.kind == "reg" and src.reg.startswith("xmm")
    (m,) = [i for i in named(insts, mov) if i.operands[0].reg == src.reg]
    assert m.address < b.address and m.operands[1].kind == "reg" and m.operands[1].reg[0] in "re"  # from a gpr
    np.testing.assert_array_equal(t.numpy(), a + s * np.array(3, dt.np))


@pytest.mark.parametrize("dt, mov, bcast", BROADCASTS, ids=str)
def test_int_broadcast_of_a_single_use_load_reads_memory(dt, mov, bcast):
    a, s = ints(list(range(-32, 32)), dt), ints([-5], dt)
    t = Tensor(a, device=X86) + Tensor(s, device=X86).expand(64)
    insts = machine_code(t)
    (b,) = named(insts, bcast)
    src = b.operands[1]
    assert b.operands[0].reg.startswith("ymm")
    assert src.kind == "mem" and src.base != "rsp" and src.index is None and src.disp == 0 and src.size == dt.itemsize
    assert not named(insts, mov)   # the scalar never visits a gpr
    np.testing.assert_array_equal(t.numpy(), a + s)


# ---------------------------------------------------------------- shuffles and the vinsertps fallback

# (dtype, lanes of the second operand of x + y, expected shuffle, immediate): "yK" is lane K of y's vector
# load, "xK" lane K of x's. One source: y's lanes permuted; two: lanes of x and y interleaved. Valid patterns
# take, in each 128-bit half, the low result lanes from the first source and the high ones from the second,
# with one selector for both halves.
SHUFFLES = [
    (dtypes.float32, "y1 y0 y3 y2 y5 y4 y7 y6", "vshufps", 0xB1),
    (dtypes.float32, "x0 x2 y0 y2 x4 x6 y4 y6", "vshufps", 0x88),
    (dtypes.float32, "y2 y1 x3 x0 y6 y5 x7 x4", "vshufps", 0x36),   # y first, lanes in any order
    (dtypes.float64, "y1 y0 y3 y2", "vshufpd", 0b0101),
    (dtypes.float64, "x1 y0 x3 y2", "vshufpd", 0b0101),
    (dtypes.float64, "y0 x1 y3 x2", "vshufpd", 0b0110),
    (dtypes.int32, "x1 x3 y2 y0 x5 x7 y6 y4", "vshufps", 0x2D),     # integer lanes are moved as bits
    (dtypes.int64, "x1 y0 x2 y3", "vshufpd", 0b1001),
]
NO_SHUFFLES = [  # lanes cross a 128-bit half, or one half takes a lane its pattern cannot
    (dtypes.float32, "y7 y6 y5 y4 y3 y2 y1 y0"),
    (dtypes.float32, "x0 y5 y2 x7 x4 y1 y6 x3"),
    (dtypes.float32, "y1 y0 y3 y2 y4 y5 y7 y6"),   # the halves' selectors differ
    (dtypes.float64, "y3 y2 y1 y0"),
    (dtypes.float64, "x0 x2 y1 y3"),
    (dtypes.int32, "x0 x1 y2 x3 x4 x5 y6 y7"),     # lanes 2-3 from two sources
]
FALLBACK_INSERT = {dtypes.float32: "vinsertps", dtypes.float64: "vmovlhps", dtypes.int32: "vpinsrd",
                   dtypes.int64: "vpinsrq"}


def _lanes_kernel(dt: DType, lanes: str) -> tuple[list[Decoded], np.ndarray, np.ndarray]:
    """Selection level (codegen makes no lane-permuting GEP from Tensor code; strided reads are scalar loads,
    see test_vector_of_strided_scalars_is_built_with_vinsertps): the vector kernel of x + y, its second
    operand replaced by the lanes named in ``lanes``, run on 64 elements; returns the code, the result and
    numpy's."""
    n, per = 64, len(lanes.split())
    a, b = rng.standard_normal(n).astype(dt.np), rng.standard_normal(n).astype(dt.np)
    name, uops = program(Tensor(a, device=X86) + Tensor(b, device=X86))
    (add,) = [u for u in uops if u.op is Ops.ADD and u.dtype.count == per]
    picks = [(s[0], int(s[1:])) for s in lanes.split()]
    if all(src == "y" for src, _ in picks):
        def build(v: UOp) -> UOp:
            return v.replace(src=(v.src[0], v.src[1].gep(*[k for _, k in picks])))
    else:
        def build(v: UOp) -> UOp:
            return v.replace(src=(v.src[0], UOp.vectorize(*[v.src["xy".index(s)].gep(k) for s, k in picks])))
    uops = edit(uops, {add: build})
    ax, ay = (add.src[0], add.src[1])
    bufs = {param_of(ax): a, param_of(ay): b}
    out = np.zeros(n, dt.np)
    code = run(name, uops, {output_param(uops): out, **bufs})
    blocks = {"x": a.reshape(-1, per), "y": b.reshape(-1, per)}
    other = np.stack([blocks[s][:, k] for s, k in picks], axis=1).reshape(-1)
    return disassemble(code), out, a + other


@pytest.mark.parametrize("dt, lanes, shuffle, imm", SHUFFLES, ids=lambda v: str(v).replace(" ", ""))
def test_vector_build_is_one_shuffle_when_lanes_allow(dt, lanes, shuffle, imm):
    """One vshufps/vshufpd on whole ymm registers builds the vector: no lane is extracted or inserted."""
    insts, got, want = _lanes_kernel(dt, lanes)
    np.testing.assert_array_equal(got, want)
    shuffles = named(insts, shuffle)
    assert len(shuffles) == 1
    s = shuffles[0]
    assert s.operands[-1].kind == "imm" and s.operands[-1].imm == imm and is_ymm(s)
    assert not named(insts, "vinsertps", "vmovlhps", "vextractf128", "vpinsrd", "vpinsrq", "vpextrd", "vpextrq")


@pytest.mark.parametrize("dt, lanes", [c[:2] for c in SHUFFLES] + NO_SHUFFLES, ids=lambda v: str(v).replace(" ", ""))
def test_every_lane_pattern_computes_right(dt, lanes):
    _, got, want = _lanes_kernel(dt, lanes)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt, lanes", NO_SHUFFLES, ids=lambda v: str(v).replace(" ", ""))
def test_vector_build_falls_back_when_lanes_do_not_allow_a_shuffle(dt, lanes):
    """The fallback: lanes extracted and inserted one by one (vinsertps for float32; float64 lanes go in
    pairs with vmovlhps, its two-lane analogue; vpinsrd/q for integers), the two 128-bit halves joined."""
    insts, got, want = _lanes_kernel(dt, lanes)
    np.testing.assert_array_equal(got, want)
    assert not named(insts, "vshufps", "vshufpd")
    assert named(insts, FALLBACK_INSERT[dt]) and named(insts, "vinsertf128")


def test_vector_of_strided_scalars_is_built_with_vinsertps():
    """x[::3]: 8 float32 lanes from 8 scalar loads, inserted at lanes 1..3 of each 128-bit half, then joined."""
    a = rng.standard_normal(192).astype(np.float32)
    t = Tensor(a, device=X86)[::3] * 2
    insts = machine_code(t)
    inserts = named(insts, "vinsertps")
    assert len(inserts) == 6 and sorted(i.operands[-1].imm for i in inserts) == [0x10, 0x10, 0x20, 0x20, 0x30, 0x30]
    assert all(o.kind == "reg" and o.reg.startswith("xmm") for i in inserts for o in i.operands[:3])
    assert len(named(insts, "vinsertf128")) == 1 and not named(insts, "vshufps")
    (mul,) = named(insts, "vmulps")
    assert is_ymm(mul)
    np.testing.assert_array_equal(t.numpy(), a[::3] * np.float32(2))


# ---------------------------------------------------------------- complex addresses

DISPS = [(dtypes.float32, 3, 7), (dtypes.float32, 3, 64), (dtypes.float32, 31, 7), (dtypes.float32, 32, 7),
         (dtypes.float32, 1000, 7), (dtypes.float32, 1000, 64), (dtypes.float64, 15, 7), (dtypes.float64, 16, 64),
         (dtypes.int16, 63, 7), (dtypes.int16, 64, 7), (dtypes.int8, 127, 7), (dtypes.int8, 128, 7)]


@pytest.mark.parametrize("dt, k, n", DISPS, ids=str)
def test_constant_index_offset_is_a_scaled_displacement(dt, k, n):
    """x[i+k]: [base + index*size + k*size], the displacement one byte when it fits in int8, else four
    (e.g. float32 x[i+3] -> disp8 12, x[i+1000] -> disp32 4000)."""
    a = (np.arange(1200) % 100).astype(dt.np)
    t = Tensor(a, device=X86)[k:k + n] * 3
    insts = machine_code(t)
    (load,) = [i for i in buffer_reads(insts) if i.mem().disp != 0]
    m = load.mem()
    assert m.disp == k * dt.itemsize and m.scale == dt.itemsize and m.index is not None
    assert load.disp_size == (1 if m.disp <= 127 else 4)
    assert not named(insts, "lea")   # the offset is not added to the index separately
    np.testing.assert_array_equal(t.numpy(), a[k:k + n] * np.array(3, dt.np))


@pytest.mark.parametrize("dt, k", [(dtypes.float32, 3), (dtypes.float32, 32), (dtypes.float32, 33),
                                   (dtypes.float32, 40), (dtypes.int16, 64), (dtypes.int16, 65)], ids=str)
def test_negative_index_offset_is_a_signed_displacement(dt, k):
    """x padded by k in front reads x[i-k] under a gate: disp -k*size, one byte down to -128."""
    a = (np.arange(21) % 100).astype(dt.np)
    t = Tensor(a, device=X86).pad(((k, 0),)) * 3
    insts = machine_code(t)
    reads = buffer_reads(insts)    # one per lane when codegen vectorizes the padded output (lanes one by one)
    assert min(i.mem().disp for i in reads) == -k * dt.itemsize
    assert all(i.mem().scale == dt.itemsize and i.disp_size == (1 if -128 <= i.mem().disp <= 127 else 4)
               for i in reads if i.mem().disp != 0)
    np.testing.assert_array_equal(t.numpy(), np.pad(a, (k, 0)) * np.array(3, dt.np))


# ---------------------------------------------------------------- load folding

FOLDS = {"x*y": True, "x*y/y": False, "x*x": False}


@pytest.mark.parametrize("expr", list(FOLDS))
@pytest.mark.parametrize("dt, n, suffix", FORMS, ids=FORM_IDS)
def test_loads_fold_only_into_their_single_use(dt, n, suffix, expr):
    """x*y: y's load is the multiply's memory operand. x*y / y: y has two users, loaded once into a register.
    x*x: one instruction uses x twice: loaded once into a register that is both operands."""
    a, b = rng.standard_normal(n).astype(dt.np), rng.standard_normal(n).astype(dt.np)
    x, y = Tensor(a, device=X86), Tensor(b, device=X86)
    t, ref = {"x*y": (x * y, a * b), "x*y/y": (x * y / y, a * b / b), "x*x": (x * x, a * a)}[expr]
    insts = machine_code(t)
    (m,) = named(insts, "vmul" + suffix)
    reads = buffer_reads(insts)
    if FOLDS[expr]:
        assert m in reads and len(reads) == 2     # x loaded, y read by the multiply
    else:
        assert m not in reads and len(reads) == (1 if expr == "x*x" else 2)
    if expr == "x*x":
        assert m.operands[1].reg == m.operands[2].reg
    np.testing.assert_array_equal(t.numpy(), ref)

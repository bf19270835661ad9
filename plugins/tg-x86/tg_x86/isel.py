"""Instruction selection: a kernel's linear UOps -> machine instructions on virtual registers.

In:  the linear UOp list codegen hands a ``linear`` renderer.
Out: a list of ``MInst`` (see ``machine.py``) with ``LoopStart``/``LoopEnd`` markers, and the
     ``Frame`` (constants, argument count) the prologue needs.

Selection is the rule table ``ISEL`` (horizontal reductions, ``vsel.VECTOR_ISEL`` for vector UOps,
then ``SCALAR_ISEL``), run line by line by the core's ``line_rewrite`` with a ``Selector`` as the
isel context (``tgcore.renderer.isa``). Analysis comes first (``facts.analyze``: a frozen ``KernelFacts``); the
``Selector`` is the ``emitter.Emitter`` (the only mutable state) the rules pass to the selection functions, by family:
``values`` (operands), ``flags`` (compares), ``memory`` (loads, stores, gated accesses), ``scalar`` (ALU, loops),
``casts`` and ``vsel`` (vector UOps).

Value representation:
    integers and bool  a gpr; types narrower than 32 bits are kept sign- or zero-extended to
                       32 bits ("canonical"), 32-bit values have the upper half zero (so an
                       int32 index is also a valid 64-bit index)
    float32/float64    the low lane of an xmm register
    float16/bfloat16   the low lane of an xmm register as the float32 with the same value
                       (loads widen, stores narrow, casts to them round)
Constants are immediates where an instruction takes one, float constants live in 16-byte
frame slots written by the prologue (memory operands, or a load where a register is needed).

Semantics are the C renderer's: x/0 = 0, INT_MIN/-1 wraps, shifts out of range give 0 or the
sign, float->int truncates and wraps (NaN/inf give 0), max propagates NaN, gated loads read 0
(and never touch memory), gated stores are skipped. Both without a branch: the access goes through an address
a cmov switches to a frame slot when the gate is false (``gated_mem``: zeros for loads, a sink for stores).
"""
from __future__ import annotations

from collections.abc import Callable
from itertools import chain, compress, repeat
from operator import not_
from typing import Any

from tg_x86.bytedot import BYTE_ISEL
from tg_x86.casts import bitcast, float_to_float, float_to_int, int_to_float, int_to_int
from tg_x86.emitter import Emitter
from tg_x86.facts import NO_CODE_OPS
from tg_x86.flags import compare, flags_to_bool
from tg_x86.isa import Op
from tg_x86.lanes import (
    ADD_MUL,
    ARG_OPS,
    BOOL_BINARY,
    CMP_OPS,
    DIV_OPS,
    FLOAT_ARITH,
    INT_BINARY,
    SHIFT_OPS,
    SelectionError,
    is_vector,
)
from tg_x86.machine import Frame, VMem
from tg_x86.memory import hold_dummies, load, prefetch, store
from tg_x86.scalar import (
    close_loop,
    divide,
    float_arith,
    float_fma,
    float_max,
    float_mulacc,
    float_neg,
    float_reciprocal,
    float_sqrt,
    float_trunc,
    int_max,
    int_mulacc,
    int_neg,
    open_loop,
    shift,
    where_blend,
    where_cmov,
    where_minmax,
)
from tg_x86.values import int_binary, reg
from tg_x86.vsel import EMITTED, HRED_ISEL, VECTOR_ISEL, accumulator_dtype, min_or_max
from tgcore.codegen.regalloc import MInst, VReg
from tgcore.dtype import DType, dtypes
from tgcore.renderer.isa import line_rewrite
from tgcore.uop import Ops, PatternMatcher, UOp, UPat


class Selector(Emitter):
    """The isel context of one kernel: the emitter the rules (``ISEL``) emit through, and the two programs made from
    one selection (``select``, ``args_held``)."""

    def __init__(self, uops: list[UOp], remat_args: bool = False, isel: PatternMatcher | None = None) -> None:
        super().__init__(uops, ISEL if isel is None else isel, remat_args)
        hold_dummies(self)
        if isel is None and not self.facts.hred_roots:  # no horizontal reduction: its rule would only fall through
            self.isel = LINE_ISEL

    # ---- the program ----
    def select(self) -> tuple[list[Any], Frame]:
        """Run the rules over the lines (what ``ISARenderer.select`` does)."""
        line_rewrite(self.facts.selected_lines(), self.isel, self, self.prog, strict=True)
        return self.prog, self.frame

    def args_held(self) -> list[Any]:
        """After selecting with ``remat_args``: the program selecting without it makes (each pointer and
        variable read once, where its UOp stands, into one register held throughout), derived instead of
        selected again: the reloads go and their registers become the one read at the argument's place."""
        held = {u: self.new("gpr") for _, u in self.arg_sites}
        # each reload's register -> the held one, then each memory operand reading one -> the same on the held one
        renamed: dict[Any, Any] = {v: held[u] for v, u in self.remat_loads.items()}
        replaced = renamed.keys()   # a live view: the memory operands count once added
        out = list(self.prog)
        drop = self.reload_at
        # only its reload writes a reload's register; nothing before the first reload reads one
        start = drop[0] if drop else len(out)
        uses = list(map(getattr, out[start:], repeat("uses"), repeat(())))   # () for a loop marker
        # selection puts memory operands among the uses only
        for m in filter(VMem.__instancecheck__, chain.from_iterable(uses)):
            if not replaced.isdisjoint((m.base, m.index)):
                renamed[m] = m.with_regs(renamed)
        # the instructions with an operand to replace (found in C: most have none)
        for i in compress(range(start, len(out)), map(not_, map(replaced.isdisjoint, uses))):
            ins = out[i]
            out[i] = MInst(ins.op, ins.defs, list(map(renamed.get, ins.uses, ins.uses)), ins.arg)
        # from the back, so positions ahead still count the selected program: the reloads go, the loads come in
        # (a load at a reload's position comes before it: deleted first)
        sites = self.arg_sites
        k = len(sites)
        for i in reversed(drop):
            while k and sites[k - 1][0] > i:
                k = self._insert_loads(out, held, k)
            del out[i]
        while k:
            k = self._insert_loads(out, held, k)
        return out

    def _insert_loads(self, out: list[Any], held: dict[UOp, VReg], k: int) -> int:
        """Insert the argument loads of the sites before ``k`` at the last of their positions; the sites left."""
        sites = self.arg_sites
        pos = sites[k - 1][0]
        j = k - 1
        while j and sites[j - 1][0] == pos:
            j -= 1
        out[pos:pos] = [self.arg_load(held[u], u) for _, u in sites[j:k]]
        return j


# ---- the rules ----
# Each rule takes the isel context (a ``Selector``: the emitter) and the UOp, emits its instructions into
# ``ctx.prog`` through the selection functions (values, flags, memory, scalar, casts), records the UOp's value in
# ``ctx.val`` and returns EMITTED; None falls through to the next rule of the op. Vector UOps are taken first by
# ``vsel.VECTOR_ISEL``.

def value_rule(method: Callable[[Selector, UOp], Any]) -> Callable[[Selector, UOp], tuple]:
    """A rule whose UOp's value is what ``method(ctx, x)`` returns."""
    def rule(ctx: Selector, x: UOp) -> tuple:
        ctx.val[x] = method(ctx, x)
        return EMITTED
    return rule


def effect_rule(method: Callable[[Selector, UOp], Any]) -> Callable[[Selector, UOp], tuple]:
    """A rule for a UOp that has no value of its own (stores, loop boundaries)."""
    def rule(ctx: Selector, x: UOp) -> tuple:
        method(ctx, x)
        return EMITTED
    return rule


def cast_rule(convert: Callable[[Selector, VReg, DType, DType], VReg]) -> Callable[[Selector, UOp], tuple]:
    """A CAST rule: ``convert(ctx, source register, source dtype, dtype)`` makes the value."""
    def rule(ctx: Selector, x: UOp) -> tuple:
        src = x.src[0]
        ctx.val[x] = convert(ctx, reg(ctx, src), src.dtype, x.dtype)
        return EMITTED
    return rule


def binary_rule(table: dict[Ops, Op]) -> Callable[[Selector, UOp], tuple]:
    """A two-operand integer rule with the instruction ``table[op]``."""
    def rule(ctx: Selector, x: UOp) -> tuple:
        if x not in ctx.facts.in_address:   # (else the addresses reading it compute it: see plan_addresses)
            ctx.val[x] = int_binary(ctx, x, table[x.op])
        return EMITTED
    return rule


def sel_argument(ctx: Selector, x: UOp) -> tuple:
    if ctx.remat_args:  # read from its argument slot where used (see args_held)
        ctx.arg_sites.append((len(ctx.prog), x))
    else:
        ctx.val[x] = ctx.arg_value(x)
    return EMITTED


def sel_define_reg(ctx: Selector, x: UOp) -> VReg:
    if getattr(x.dtype, "size", 1) not in (1, -1):
        raise SelectionError(f"x86: accumulator {x.dtype} (only scalar 1-element registers)")
    return ctx.newv(accumulator_dtype(x))


def sel_after(ctx: Selector, x: UOp) -> tuple:
    """AFTER is the value of what it follows (an accumulator's register, or its pieces for a vector)."""
    if x.src[0] in ctx.val:
        ctx.val[x] = ctx.val[x.src[0]]
    return EMITTED


def sel_end(ctx: Selector, x: UOp) -> None:
    for _ in x.src[1:]:
        close_loop(ctx)


def sel_compare(ctx: Selector, x: UOp) -> tuple:
    if x not in ctx.facts.flag_compares:  # else its WHEREs and gates read the flags (see compare): no bool
        ctx.val[x] = flags_to_bool(ctx, compare(ctx, x))
    return EMITTED


def sel_where_minmax(ctx: Selector, x: UOp, c: UOp, a: UOp, b: UOp) -> tuple | None:
    name = min_or_max(c, a, b)
    if name is None:
        return None
    ctx.val[x] = where_minmax(ctx, x, name)
    return EMITTED


def sel_fused(ctx: Selector, x: UOp) -> tuple | None:
    """A float MUL or ADD ``plan_fma`` fused: the MUL emits nothing, the ADD one FMA."""
    if x in ctx.facts.fma_muls:
        return EMITTED
    if x not in ctx.facts.fma_adds:
        return None
    ctx.val[x] = float_fma(ctx, x)
    return EMITTED


def sel_unknown(x: UOp) -> tuple:
    kind = "vector " if is_vector(x.dtype) else ""
    raise SelectionError(f"x86: no rule for {kind}{x.op.name} {x.dtype}")


SCALAR_FLOATS = frozenset(dt for dt in dtypes.all if dtypes.is_float(dt))       # in xmm registers
SCALAR_INTS = frozenset(dt for dt in dtypes.all if not dtypes.is_float(dt))     # in gprs (bool too)
F, I = SCALAR_FLOATS, SCALAR_INTS

SCALAR_ISEL = PatternMatcher([
    # buffer pointers and variables: read from the argument slots
    (UPat(ARG_OPS, name="x"), sel_argument),
    # constants and addresses are selected where they are used (immediates, memory operands); SINK etc. emit nothing
    (UPat(NO_CODE_OPS), lambda: EMITTED),
    # an accumulator is a register; AFTER is its value at that point
    (UPat(Ops.DEFINE_REG, name="x"), value_rule(sel_define_reg)),
    (UPat(Ops.AFTER, name="x"), sel_after),
    # loops: counter, limit and guard; END closes as many loops as it names
    (UPat(Ops.RANGE, name="x"), effect_rule(open_loop)),
    (UPat(Ops.END, name="x"), effect_rule(sel_end)),
    # memory: [base + index*scale + disp]; a gated access goes through an address a cmov (on the gate compare's
    # flags) switches to a frame slot, no branch; a float load with one user folds into it
    (UPat(Ops.LOAD, name="x"), effect_rule(load)),
    (UPat(Ops.STORE, name="x"), effect_rule(store)),
    # casts by register file; bitcasts move bits between them
    (UPat(Ops.CAST, I, src=(UPat(dtype=I),), name="x"), cast_rule(int_to_int)),
    (UPat(Ops.CAST, F, src=(UPat(dtype=I),), name="x"), cast_rule(int_to_float)),
    (UPat(Ops.CAST, I, src=(UPat(dtype=F),), name="x"), cast_rule(float_to_int)),
    (UPat(Ops.CAST, F, src=(UPat(dtype=F),), name="x"), cast_rule(float_to_float)),
    (UPat(Ops.BITCAST, name="x"), value_rule(lambda ctx, x: bitcast(ctx, x.src[0], x.dtype))),
    # comparisons: flags, shared by the cmovs of its WHEREs and of its gates while no instruction
    # in between writes them (else compared again there); a bool (setcc) only when something else reads it
    (UPat(CMP_OPS, name="x"), sel_compare),
    # WHERE: cmov on a compare's flags; floats: vmin/vmax when it picks between the values a < compared, else
    # a vcmp mask + vblendv
    (UPat(Ops.WHERE, I, name="x"), value_rule(where_cmov)),
    (UPat(Ops.WHERE, F, src=(UPat(Ops.CMPLT, name="c"), UPat.var("a"), UPat.var("b")), name="x"), sel_where_minmax),
    (UPat(Ops.WHERE, F, name="x"), value_rule(where_blend)),
    # integer ALU in gprs: idiv/div through rax/rdx (x/0 = 0), shifts by cl (out of range: 0 or the sign),
    # max as cmp + cmov, a*b+c as imul + add, the rest two-address (add as lea, imul by an immediate)
    (UPat(DIV_OPS, I, name="x"), value_rule(divide)),
    (UPat(SHIFT_OPS, I, name="x"), value_rule(shift)),
    (UPat(Ops.MAX, I, name="x"), value_rule(int_max)),
    (UPat(Ops.NEG, I, name="x"), value_rule(int_neg)),
    (UPat(Ops.MULACC, I, name="x"), value_rule(int_mulacc)),
    (UPat(tuple(BOOL_BINARY), dtypes.bool, name="x"), binary_rule(BOOL_BINARY)),
    (UPat(tuple(INT_BINARY), I, name="x"), binary_rule(INT_BINARY)),
    # float ALU in xmm lane 0 (memory operands for constants and single-use loads); a*b + c as one FMA where
    # plan_fma fused them
    (UPat(ADD_MUL, F, name="x"), sel_fused),
    (UPat(tuple(FLOAT_ARITH), F, name="x"), value_rule(float_arith)),
    (UPat(Ops.MAX, F, name="x"), value_rule(float_max)),          # vmax + unordered blend: NaN propagates
    (UPat(Ops.NEG, F, name="x"), value_rule(float_neg)),          # xor with the sign bit
    (UPat(Ops.SQRT, F, name="x"), value_rule(float_sqrt)),
    (UPat(Ops.RECIPROCAL, F, name="x"), value_rule(float_reciprocal)),
    (UPat(Ops.TRUNC, F, name="x"), value_rule(float_trunc)),      # vround toward zero
    (UPat(Ops.MULACC, F, name="x"), value_rule(float_mulacc)),    # one vfmadd: one rounding
    (UPat(name="x"), sel_unknown),
])

# a load streaming a big input first prefetches what a later iteration reads (then falls through to the load rules)
PREFETCH_ISEL = PatternMatcher([(UPat(Ops.LOAD, name="x"), prefetch)])

# the x86 isel table: horizontal reductions, then prefetches, byte dot products (``bytedot``), vector UOps and scalar
# ones
LINE_ISEL = PREFETCH_ISEL + BYTE_ISEL + VECTOR_ISEL + SCALAR_ISEL
ISEL = HRED_ISEL + LINE_ISEL


# selection outside the renderer (tools, benches); X86Renderer selects through ISARenderer.select
def select(uops: list[UOp], remat_args: bool = False) -> tuple[list[Any], Frame]:
    return Selector(uops, remat_args).select()


def select_both(uops: list[UOp]) -> tuple[list[Any], list[Any], Frame]:
    """(the program holding pointers and variables in registers, the one reading them where used, the frame),
    from one selection."""
    sel = Selector(uops, remat_args=True)
    remat, frame = sel.select()
    return sel.args_held(), remat, frame

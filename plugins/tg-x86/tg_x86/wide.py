"""AVX-512 selection: float32 vectors of 16k lanes held as zmm pieces.

In:  the emitter of a kernel selected at the AVX-512 level (``lanes.set_wide_level(True)``: ``lanes.is_wide`` dtypes
     are zmm pieces) and its lines; after selection, its program.
Out: ``select_wide``, the selection of a kernel at that level. The lines with zmm forms (``zmm_native``: loads,
     stores, accumulators, broadcasts, add/sub/mul/div and FMA) go to the ordinary rules, which make zmm pieces.
     Any other line touching a zmm-held vector is selected by the AVX2 rules on ymm halves (``narrowed``): the zmm
     values it reads are split (vextractf32x8), its result is joined (vinsertf32x8).
     ``zmm_program``: the program with its vector registers in the "zmm" class (``machine.ZMM_TARGETS``: 32
     registers), pinned to zmm0-15 where some instruction names them as an xmm or ymm (only EVEX encodes registers
     16-31, and the forms of those widths here are VEX ones).
"""
from __future__ import annotations

from typing import Any

from tg_x86.emitter import Emitter
from tg_x86.isa import Op
from tg_x86.lanes import ZMM_LANES, is_wide, set_wide_level
from tg_x86.machine import LOW_ZMM
from tg_x86.vmemory import opmask
from tg_x86.vpieces import lane_key
from tgcore.codegen.regalloc import MInst, VReg
from tgcore.dtype import dtypes
from tgcore.renderer.isa import line_rewrite
from tgcore.uop import Ops, PatternMatcher, UOp

# ops whose vector rules work on zmm pieces as they are (the instructions they emit have EVEX zmm forms)
ZMM_OPS = frozenset({Ops.LOAD, Ops.STORE, Ops.DEFINE_REG, Ops.AFTER, Ops.INDEX, Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV,
                     Ops.MULACC, Ops.VCONST, Ops.CONST})
_DTYPE_WIDE = is_wide


def touches_wide(ctx: Emitter, x: UOp) -> bool:
    """Does line ``x`` make or read a zmm-held vector (the root of a horizontal reduction reads the vector)?"""
    if _DTYPE_WIDE(x.dtype) or any(_DTYPE_WIDE(s.dtype) for s in x.src):
        return True
    root = ctx.facts.hred_roots.get(x)
    return root is not None and _DTYPE_WIDE(root.dtype)


def zmm_native(ctx: Emitter, x: UOp) -> bool:
    """Do the ordinary rules select ``x`` on zmm pieces (else it is ``narrowed``)?"""
    if x in ctx.facts.hred_skip:   # the lanes of a horizontal reduction: its root selects them
        return True
    if x in ctx.facts.hred_roots:
        return False
    if x.op is Ops.VECTORIZE:      # a broadcast (one value in every lane)
        return all(s is x.src[0] for s in x.src)
    return x.op in ZMM_OPS


def _read_values(ctx: Emitter, x: UOp) -> list[UOp]:
    """The zmm-held values selecting ``x`` may read: its sources, the sources of those that have no value of their
    own (a compare fused into a WHERE, a multiply fused into an FMA), the vector a horizontal reduction reduces."""
    out = []
    for s in x.src:
        out.append(s)
        if s not in ctx.val:
            out += s.src
    root = ctx.facts.hred_roots.get(x)
    if root is not None:
        out.append(root)
    return [s for s in dict.fromkeys(out) if _DTYPE_WIDE(s.dtype) and s in ctx.val]


def halves(ctx: Emitter, s: UOp) -> tuple[VReg, ...]:
    """Value ``s`` (zmm pieces) as ymm pieces: both halves of each zmm (made once per loop body)."""
    key = lane_key(ctx, s, "ymm halves")
    cache = ctx.lane_cache
    if cache is not None and key in cache:
        return cache[key]
    out = []
    for z in ctx.val[s]:
        for h in (0, 1):
            d = ctx.vnew()
            ctx.emit(Op.VEXTRACTF32X8, [d], [z], (("d", 0, 256), ("u", 0, 512), ("i", h)))
            out.append(d)
    if cache is not None:
        cache[key] = tuple(out)
    return tuple(out)


def joined(ctx: Emitter, pieces: tuple) -> tuple[VReg, ...]:
    """ymm pieces -> zmm pieces (each pair of ymm halves in one zmm)."""
    out = []
    for lo, hi in zip(pieces[::2], pieces[1::2], strict=True):
        d = ctx.vnew()
        ctx.emit(Op.VINSERTF32X8, [d], [lo, hi], (("d", 0, 512), ("u", 0, 512), ("u", 1, 256), ("i", 1)))
        out.append(d)
    return tuple(out)


def narrowed(ctx: Emitter, x: UOp, rules: PatternMatcher) -> None:
    """Select ``x`` with ``rules`` at the AVX2 layout: the zmm values it reads split into ymm halves for it, its result
    (when a zmm-held vector) joined again."""
    reads = _read_values(ctx, x)
    kept = {s: ctx.val[s] for s in reads}
    for s in reads:
        ctx.val[s] = halves(ctx, s)
    set_wide_level(False)
    try:
        line_rewrite((x,), rules, ctx, ctx.prog, strict=True)
    finally:
        set_wide_level(True)
        ctx.val.update(kept)
    if _DTYPE_WIDE(x.dtype) and x in ctx.val and x not in kept:
        ctx.val[x] = joined(ctx, ctx.val[x])


def gates_zmm_access(ctx: Emitter, gate: UOp) -> bool:
    """Is bool vector ``gate`` the gate of a load or store of zmm pieces (whose opmasks are made from it)?"""
    return any(i.op is Ops.INDEX and len(i.src) > 2 and i.src[2] is gate and
               any(_DTYPE_WIDE(a.dtype if a.op is Ops.LOAD else a.src[1].dtype) for a in ctx.users.get(i, ())
                   if a.op in (Ops.LOAD, Ops.STORE))
               for i in ctx.users.get(gate, ()))


def is_zmm_gate(ctx: Emitter, x: UOp) -> bool:
    """Is line ``x`` a bool vector gating zmm accesses (its opmasks are made right after it)?"""
    dt = x.dtype
    return dt.count % ZMM_LANES == 0 and dt.scalar() is dtypes.bool and gates_zmm_access(ctx, x)


def select_wide(ctx: Emitter) -> None:
    """Select the kernel's lines at the AVX-512 level (``lanes.set_wide_level(True)`` is the caller's): runs of lines
    touching no zmm-held vector by the rules as they are, each other line as ``zmm_native`` says (on zmm pieces, or
    ``narrowed``); the opmasks of a zmm access's bool gate are made right after the gate."""
    rules = ctx.isel
    run: list[UOp] = []
    for x in ctx.selected_lines():
        wide = touches_wide(ctx, x)
        gate = not wide and is_zmm_gate(ctx, x)
        if not (wide or gate):
            run.append(x)
            continue
        if run:
            line_rewrite(run, rules, ctx, ctx.prog, strict=True)
            run = []
        if wide:
            ctx.zmm_used = True
            if not zmm_native(ctx, x):
                narrowed(ctx, x, rules)
                continue
        line_rewrite((x,), rules, ctx, ctx.prog, strict=True)
        if gate and x in ctx.val:
            for p in range(x.dtype.count // ZMM_LANES):   # made here, where the gate is: not in the loop using it
                ctx.opmasks[(x, p)] = opmask(ctx, x, p)
    if run:
        line_rewrite(run, rules, ctx, ctx.prog, strict=True)


def zmm_program(program: list[Any]) -> list[Any]:
    """``program`` with every vector register in the "zmm" class, pinned to zmm0-15 when an instruction names it at
    another width than 512 bits (the program's instructions are replaced in place, positions kept)."""
    narrow: set[VReg] = set()
    for ins in program:
        if type(ins) is not MInst or ins.op in ("label", "copy"):
            continue
        for kind, i, *rest in (item for item in ins.arg.layout if item[0] in ("d", "u")):
            bits = rest[0]
            o = (ins.defs if kind == "d" else ins.uses)[i]
            if bits is not None and bits != 512 and type(o) is VReg and o.cls == "vec":
                narrow.add(o)
    renamed: dict[VReg, VReg] = {}

    def zmm(o: Any) -> Any:
        if type(o) is not VReg or o.cls != "vec":
            return o
        r = renamed.get(o)
        if r is None:
            r = renamed[o] = VReg(o.id, "zmm", LOW_ZMM if o in narrow else None)
        return r
    for n, ins in enumerate(program):
        if type(ins) is MInst and any(type(o) is VReg and o.cls == "vec" for o in (*ins.defs, *ins.uses)):
            program[n] = MInst(ins.op, [zmm(o) for o in ins.defs], [zmm(o) for o in ins.uses], ins.arg)
    return program

"""Instruction selection: a kernel's linear UOps -> machine instructions on virtual registers.

In:  the linear UOp list codegen hands a ``linear`` renderer.
Out: a list of ``MInst`` (see ``machine.py``) with ``LoopStart``/``LoopEnd`` markers, and the
     ``Frame`` (constants, argument count) the prologue needs.

Selection is the rule table ``ISEL`` (horizontal reductions, ``vsel.VECTOR_ISEL`` for vector UOps,
then ``SCALAR_ISEL``), run line by line by the core's ``line_rewrite`` with a ``Selector`` as the
isel context (``tgcore.renderer.isa``). The rules call the selector's emit helpers; the vector ones
live in ``vsel.VectorSelection``, which the selector mixes in.

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

import bisect
import functools
import operator
import struct
from collections.abc import Callable, Iterable
from itertools import chain, compress, repeat
from operator import not_
from typing import Any

from tg_x86.isa import Cond, Flag, Op
from tg_x86.machine import ALLOC_GPR, RAX, RCX, RDX, Frame, Slot, Spec, VMem, label_inst
from tg_x86.operands import Label
from tg_x86.vsel import (
    _OP,
    BARRIER_TABLE,
    DIV_OPS,
    EMITTED,
    HRED_ISEL,
    OP_CODE,
    SHIFT_OPS,
    VECTOR_ISEL,
    VectorSelection,
    by_dtype,
    is_vector,
    line_table,
    memo,
    min_or_max,
    op_table,
)
from tgcore.codegen.regalloc import LoopEnd, LoopStart, MInst, VReg
from tgcore.dtype import AddrSpace, DType, PtrDType, dtypes
from tgcore.renderer.isa import ISelContext, line_rewrite
from tgcore.uop import Ops, PatternMatcher, RangeKind, UOp, UPat

F16_ROUND = 0       # vcvtps2ph immediate: round to nearest even
TRUNC_IMM = 0xB     # vroundss immediate: toward zero, no precision exception
CMP_EQ_OQ, CMP_LT_OS, CMP_NEQ_UQ, CMP_UNORD_Q = 0, 1, 4, 3
# sets, not tuples: membership is a hash lookup (ops and dtypes hash by identity; a tuple compares each with ==)
CMP_OPS = frozenset({Ops.CMPLT, Ops.CMPEQ, Ops.CMPNE})
_SOURCES = operator.attrgetter("src")
HELD_GPRS = len(ALLOC_GPR)   # gprs a kernel may hold throughout (choose_plan holds the arguments up to these)
GATED_SHARE = 64    # bytes from a gated access's address that later ones under its gate may reach through it
FOLD_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX})
# the ops the per-line helpers test, as module names: on Python 3.11 reading ``Ops.CONST`` goes through EnumType's
# __getattr__ hook (a Python-level call, ~0.1 us: five times a global read), and these run for most lines
CONST, AFTER, PARAM = Ops.CONST, Ops.AFTER, Ops.PARAM
ARG_OPS = frozenset({Ops.PARAM, Ops.DEFINE_VAR})                        # read from the argument slots
NO_CODE_OPS = frozenset({Ops.CONST, Ops.SINK, Ops.GROUP, Ops.NOOP, Ops.INDEX})  # selected where used, or nothing
CODE_OPS = frozenset(Ops) - NO_CODE_OPS - {Ops.VCONST}   # the lines selection visits (selected_lines)
CODE_TABLE = op_table(CODE_OPS)
RANGE_CODE = OP_CODE[Ops.RANGE]
ADD_MUL = frozenset({Ops.ADD, Ops.MUL})
INT_RMW_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL})
FLOAT_ARITH = {Ops.ADD: "VADD", Ops.SUB: "VSUB", Ops.MUL: "VMUL", Ops.FDIV: "VDIV"}
INT_BINARY = {Ops.ADD: Op.ADD, Ops.SUB: Op.SUB, Ops.MUL: Op.IMUL, Ops.AND: Op.AND, Ops.OR: Op.OR, Ops.XOR: Op.XOR}
BOOL_BINARY = {**INT_BINARY, Ops.ADD: Op.OR, Ops.MUL: Op.AND}   # on 0/1: + is or, * is and
FOLDABLE_LOADS = frozenset({dtypes.float32, dtypes.float64})   # float loads an ALU op can read from memory
NARROW_FLOATS = frozenset({dtypes.float16, dtypes.bfloat16})   # held as float32


# what ends the flags a compare set: instructions writing them, labels (another path may jump there)
FLAG_BARRIERS = frozenset({*(o for o in Op if o.flags & Flag.WRITES_FLAGS), "label"})
# (comparison, unsigned, operands swapped) -> the condition of "cmp x, y" that holds when the comparison does
INT_CONDS = {(Ops.CMPLT, False, False): Cond.L, (Ops.CMPLT, True, False): Cond.B,
             (Ops.CMPLT, False, True): Cond.G, (Ops.CMPLT, True, True): Cond.A,
             **{(op, u, s): c for op, c in ((Ops.CMPEQ, Cond.E), (Ops.CMPNE, Cond.NE))
                for u in (False, True) for s in (False, True)}}


def int_cond(op: Ops, dt: DType, swapped: bool) -> Cond:
    """The condition of comparison ``op`` of two ``dt`` values after ``cmp a, b`` (``cmp b, a`` if swapped)."""
    return INT_CONDS[(op, dtypes.is_unsigned(dt) or dt is dtypes.bool, swapped)]


def at_address(m: VMem) -> Callable[[UOp, int], VMem]:
    """A stand-in for ``Selector.mem`` giving ``m`` whatever the index (the address of a gated access)."""
    return lambda _idx, bits: m.sized(bits)


class SelectionError(NotImplementedError):
    """A UOp (or dtype) the x86 renderer has no rule for."""


is_vec = by_dtype(dtypes.is_float)  # is a value of this dtype held in an xmm register (a float)?




def _gbits(dt: DType) -> int:
    """Width of the gpr operations on an integer dtype (narrow types work in 32 bits)."""
    return 64 if dt.itemsize == 8 else 32


gbits = by_dtype(_gbits)


def canon_const(u: UOp) -> int:
    """An integer constant as its canonical register value."""
    return canon_value(u.dtype, u.arg)


@functools.lru_cache(maxsize=1 << 12)   # constants recur across kernels; a UOp key would keep them alive
def canon_value(dt: DType, value: Any) -> int:
    """An integer value of ``dt`` as its canonical register value."""
    if dt is dtypes.bool:
        return int(bool(value))
    v = int(value)
    bits = dt.itemsize * 8
    v &= (1 << bits) - 1
    if not dtypes.is_unsigned(dt) and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def f32_bits(value: float, dt: DType) -> bytes:
    """The float32 bytes of ``value`` rounded to ``dt`` (the in-register form of f32/f16/bf16)."""
    import numpy as np
    if dt is dtypes.float16:
        value = float(np.float16(value))
    elif dt is dtypes.bfloat16:
        u = struct.unpack("<I", struct.pack("<f", value))[0]
        if (u & 0x7FFFFFFF) > 0x7F800000:
            u |= 0x400000
        else:
            u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFFFFFF
        return struct.pack("<I", u & 0xFFFF0000)
    return struct.pack("<f", float(np.float32(value)))


@memo
def frame_mem(key: tuple[int, str, int]) -> VMem:
    """The memory operand (bits, slot kind, slot number) of a frame slot: one per process (a VMem is never changed
    once made, so instructions share it)."""
    bits, kind, k = key
    return VMem(bits, slot=Slot(kind, k))


def fsuffix(dt: DType) -> str:
    return "SD" if dt is dtypes.float64 else "SS"


def fop(name: str, dt: DType) -> Op:
    return Op[name + fsuffix(dt)]


class Selector(ISelContext, VectorSelection):
    """The isel context of one kernel: the emit helpers the rules (``ISEL``) call, and selection state."""

    def __init__(self, uops: list[UOp], remat_args: bool = False, isel: PatternMatcher | None = None) -> None:
        super().__init__(uops, ISEL if isel is None else isel)
        self.pos = dict(zip(uops, range(len(uops)), strict=True))
        self.codes = codes = bytes(map(OP_CODE.__getitem__, map(_OP, uops)))   # each line's op (see OP_CODE)
        self.barriers = codes.translate(BARRIER_TABLE)
        # buffer k is argument k; a buffer no UOp reads still takes its place, so the variables and
        # core_id follow the highest buffer number
        params = self.lines(Ops.PARAM)
        nbufs = max([u.arg + 1 for u in params], default=0)
        variables = self.lines(Ops.DEFINE_VAR)
        names = {u.arg[0] for u in variables}
        nparams, nvars, nranges = len(params), len(variables), codes.count(RANGE_CODE)
        self.nparams = nparams  # PARAM lines
        # gprs values hold for long (choose_plan): pointers and variables, a loop's counter and limit
        self.pressure = nparams + nvars + 2 * nranges
        self.frame = Frame()
        self.loops: list[tuple[VReg, Any, Label, Label, int]] = []
        self.const_slots: dict[bytes, int] = {}
        self.folded: set[UOp] = set()
        self.remat_args = remat_args  # buffer pointers and variables loaded from their argument slot where used
        self.remat_cache: dict[tuple[UOp, int], VReg] = {}
        self.tested: tuple[UOp, int] | None = None           # (gate, position) of the last test of a bool gate
        # (gate, store, base, index, scale, region) of a gated access -> (its address register, displacement)
        self.gated_addrs: dict[tuple, tuple[VReg, int]] = {}
        self.element_addrs: dict[tuple, tuple[VReg, int]] = {}   # (base, index, scale, region) -> (address, disp)
        self.dummy_held: dict[bool, VReg] = {}   # store -> the register holding the dummy slot's address, if held
        self.arg_sites: list[tuple[int, UOp]] = []   # with remat_args: (program position, PARAM/DEFINE_VAR)
        self.remat_loads: dict[VReg, UOp] = {}        # with remat_args: register of each reload -> its UOp
        self.reload_at: list[int] = []                # with remat_args: program position of each reload
        self.region = 0               # counts labels: values made in one region are reused only there
        self.lane_offset = 0   # elements added to every address (lane j of a lane-by-lane vector access)
        self._acc_stores: dict[UOp, list[int]] | None = None
        # flags: (x, y, position) of the last cmp x, y (vucomis x, y); see compare and flags_live
        self.flags: tuple[UOp, UOp, int] | None = None
        self.flags_scanned, self.flags_barrier = 0, -1
        self.flag_reads: dict[int, int] = {}   # with TG_SPEC=1: renderer.flag_sources before allocation
        self.var_arg = {n: nbufs + i for i, n in enumerate(sorted(names))}
        self.core_arg = nbufs + len(names)
        self.frame.nargs = self.core_arg + 1
        self.plan_vectors()
        self.plan_fma()
        self.plan_addresses()
        self.hold_dummies()
        if isel is None and not self.hred_roots:  # no horizontal reduction: its rule would only fall through
            self.isel = LINE_ISEL

    def plan_fma(self) -> None:
        """Decide which float ``a*b + c`` become one FMA (contraction, as C compilers do by default: one rounding
        instead of two): an ADD of float32/float64 (a scalar, or a vector held in pieces) one of whose sources is a
        MUL of its dtype read only by this ADD, once (``fuses``); when both are, the second. The MUL emits nothing,
        the ADD the FMA (``fma_order``). Found from the MULs: most ADDs are index math. Runs after
        ``plan_vectors``: the root of a horizontal reduction is not a multiply to fuse."""
        self.fma_adds: dict[UOp, tuple[UOp, UOp]] = {}   # ADD -> (addend, MUL)
        self.fma_muls: set[UOp] = set()
        for mul in self.lines(Ops.MUL):
            if not fma_dtype(mul.dtype):
                continue
            users = self.users.get(mul)
            if not users or not self.fuses(mul, users[0]):  # fuses: the ADD is its only user
                continue
            u = users[0]
            if u.src[1] is mul:
                c = u.src[0]
            elif self.fuses(u.src[1], u):
                continue   # u fuses its second source
            else:
                c = u.src[1]
            self.fma_adds[u] = (c, mul)
            self.fma_muls.add(mul)

    def plan_addresses(self) -> None:
        """Find the index sums ``x + c`` that only addresses read: ``mem`` folds each into its address (the index
        register x, c scaled into the displacement), so selecting one at its line would make a lea nothing reads.
        The test is ``mem``'s (x never negative, one lane), asked of every user, with a narrower constant so that
        the displacement always fits; where ``mem`` still asks for the sum, ``reg`` makes it there."""
        self.in_address: set[UOp] = set()
        for u in self.lines(Ops.ADD):
            c = u.src[1]
            if c.op is not CONST or u.src[0].dtype.count != 1 or not -(1 << 27) < c.arg < (1 << 27):
                continue   # (the displacement: c times an element size, with room for a lane offset)
            users = self.users.get(u)
            if users and all(x.op is Ops.INDEX and x.src[1] is u for x in users) and u.src[0].vmin >= 0:
                self.in_address.add(u)

    def fuses(self, mul: UOp, add: UOp) -> bool:
        """Can ``add`` (of a float dtype) and its source ``mul`` be one FMA? A MUL of its dtype that only it reads,
        once, with no store or loop boundary in between (a load folded into the MUL is read at the ADD), and not
        the root of a horizontal reduction."""
        return (mul.op is Ops.MUL and add.op is Ops.ADD and mul.dtype is add.dtype and self.users.get(mul) == [add]
                and mul not in self.hred_roots and self.no_barrier(mul, add))

    def fma_order(self, a: UOp, b: UOp, c: UOp, mul: UOp, at: UOp,
                  in_memory: Callable[[UOp], bool]) -> tuple[str, UOp, UOp, UOp]:
        """The vfmadd form computing ``a*b + c`` at line ``at`` (``mul``: the line reading a and b, ``at`` itself for
        MULACC) and the sources in its operand order. vfmadd132 is ``x = x*z + y``, 213 ``x = y*x + z``, 231
        ``x = y*z + x``. Only the last operand may be memory: a source ``in_memory`` (a constant or a folded load)
        goes there, a multiplicand first. The first is overwritten: a source whose value dies here when there is
        one (so no copy is made before the FMA), the addend first."""
        if in_memory(a) and not in_memory(b):
            a, b = b, a

        def free(x: UOp, user: UOp) -> bool:
            """May the FMA overwrite x's register with no copy first? A source in memory is loaded into a fresh
            one; a register must die here and be no other operand."""
            return in_memory(x) or (self.dies_at(x, user, at) and sum(s is x for s in (a, b, c)) == 1)
        if in_memory(b):
            return ("231", c, a, b) if free(c, at) or not free(a, mul) else ("132", a, c, b)
        if in_memory(c):
            return ("213", b, a, c) if free(b, mul) and not free(a, mul) else ("213", a, b, c)
        if free(c, at):
            return "231", c, a, b
        if free(a, mul):
            return "213", a, b, c
        if free(b, mul):
            return "213", b, a, c
        return "231", c, a, b

    def dies_at(self, x: UOp, user: UOp, at: UOp) -> bool:
        """Is the instruction selected at line ``at`` the last to read x's value? Its last user is ``user`` (selected
        at ``at``) and no loop starts in between (a value made before a loop and read inside it lives on)."""
        users, i = self.users.get(x), self.pos.get(x)
        if not users or i is None:
            return False
        return users[-1] is user and self.codes.find(RANGE_CODE, i + 1, self.pos[at]) < 0

    # ---- helpers ----
    def positions(self, ops: Ops | frozenset[Ops]) -> list[int]:
        """The positions of the lines of ``ops`` (one op or a set of them), in order."""
        return list(compress(range(len(self.uops)), self.codes.translate(line_table(ops))))

    def selected_lines(self) -> Iterable[UOp]:
        """The lines the rules run on: not constants and addresses (selected where they are used), nor lines
        that make no code (their rules would only return EMITTED). Filtered in C: a quarter of the lines."""
        return compress(self.uops, self.codes.translate(CODE_TABLE))

    def lines(self, ops: Ops | frozenset[Ops]) -> list[UOp]:
        """The lines of ``ops`` (one op or a set of them), in order. Picked in C (most lines are none of them)."""
        return list(compress(self.uops, self.codes.translate(line_table(ops))))

    def newv(self, dt: DType) -> VReg:
        return self.new("vec" if is_vec(dt) else "gpr")

    def emit(self, op: Op, defs: list, uses: list, layout: tuple, two: bool = False, cond: Cond | None = None) -> None:
        """Append ``op`` (what ``machine.minst`` builds, without its copies: rules pass new lists, layouts are
        tuples, and no stage changes an instruction's lists in place)."""
        self.prog.append(MInst(op, defs, uses, Spec(layout, two, cond)))

    def label(self, lab: Label) -> None:
        self.region += 1
        self.prog.append(label_inst(lab))

    def jump(self, lab: Label, cond: Cond | None = None) -> None:
        self.emit(Op.JCC if cond else Op.JMP, [], [], (("l", lab),), cond=cond)

    def copy(self, d: VReg, s: Any) -> None:
        self.prog.append(MInst("copy", [d], [s]))

    def const_mem(self, data: bytes, bits: int) -> VMem:
        data = data.ljust(16 if len(data) <= 16 else 32, b"\0")
        k = self.const_slots.get(data)
        if k is None:
            k = self.const_slots[data] = len(self.frame.consts)
            self.frame.consts.append(data)
        return frame_mem((bits, "const", k))

    def fconst(self, value: float, dt: DType) -> VMem:
        if dt is dtypes.float64:
            return self.const_mem(struct.pack("<d", float(value)), 64)
        return self.const_mem(f32_bits(value, dt), 32)

    def mov_imm(self, d: Any, value: int, bits: int) -> None:
        value &= (1 << bits) - 1
        if bits == 64 and value >= 1 << 63:
            value -= 1 << 64
        if bits == 64 and not -(1 << 31) <= value < (1 << 31):
            self.emit(Op.MOVABS, [d], [], (("d", 0, 64), ("i", value & ((1 << 64) - 1))))
        else:
            self.emit(Op.MOV, [d], [], (("d", 0, bits), ("i", value)))

    def int_value(self, u: UOp) -> int:
        v = u.arg
        return int(bool(v)) if u.dtype is dtypes.bool else int(v)

    def materialize(self, u: UOp, into: VReg | None = None) -> VReg:
        """A CONST in a register (emitted here, at its use)."""
        d = into or self.newv(u.dtype)
        if is_vec(u.dtype):
            op = Op.VMOVSD if u.dtype is dtypes.float64 else Op.VMOVSS
            m = self.fconst(u.arg, u.dtype)
            self.emit(op, [d], [m], (("d", 0, 128), ("u", 0, None)))
        else:
            self.mov_imm(d, canon_const(u), gbits(u.dtype))
        return d

    def reg(self, u: UOp) -> VReg:
        v = self.val.get(u)
        if v is not None:   # constants, and arguments read where used, have no value
            return v
        if u.op is CONST:
            return self.materialize(u)
        if u in self.in_address:   # only addresses read it (plan_addresses), yet one needs it: made here, for here
            return self.int_binary(u, Op.ADD)
        if self.remat_args and u.op in ARG_OPS:
            key = (u, self.region)   # reloaded once per straight-line region (a label starts a new one)
            v = self.remat_cache.get(key)
            if v is None:
                v = self.remat_cache[key] = self.arg_value(u)
                self.remat_loads[v] = u
                self.reload_at.append(len(self.prog) - 1)
            return v
        raise SelectionError(f"x86: no value for {u.op.name} {u.dtype}")

    def int_operand(self, u: UOp, bits: int) -> Any:
        """An immediate when the constant fits the instruction, else a register."""
        if u.op is CONST and not is_vec(u.dtype):
            v = canon_const(u)
            if -(1 << 31) <= v < (1 << 31) or (bits == 32 and v < (1 << 32)):
                return v
        return self.reg(u)

    def in_memory(self, u: UOp) -> bool:
        """Is a float scalar read as a memory operand (a constant's frame slot, a folded load)?"""
        return u.op is Ops.CONST or u in self.folded

    def float_reg(self, u: UOp) -> VReg:
        """A float scalar in a register (a constant or a folded load is loaded here)."""
        o = self.float_operand(u)
        return self.reg_from(o, u.dtype) if type(o) is VMem else o

    def float_operand(self, u: UOp) -> Any:
        """A constant's frame slot or a folded load (memory operands), else a register."""
        if u.op is Ops.CONST:
            return self.fconst(u.arg, u.dtype)
        if u in self.folded:
            return self.mem(u.src[0], 64 if u.dtype is dtypes.float64 else 32)
        return self.reg(u)

    def foldable(self, u: UOp) -> bool:
        """A float32/64 load from memory whose only user is a float op that can read it from memory,
        with no store, loop boundary or gate in between: the user reads memory instead of a register."""
        if u.op is not Ops.LOAD or u.dtype not in FOLDABLE_LOADS or len(u.src) != 1:
            return False
        idx = u.src[0]
        if len(idx.src) != 2 or self.is_reg_index(idx):
            return False
        users = self.users.get(u, [])
        if len(users) != 1:
            return False
        user = users[0]
        if user.dtype.count != 1 or user.dtype is not u.dtype or user.op not in FOLD_OPS:
            return False
        if user.src[1] is not u and not (user.op in ADD_MUL and user.src[0] is u and
                                          user.src[1].op is not Ops.CONST and user.src[1].op is not Ops.LOAD):
            return False
        return self.no_barrier(u, user)

    @staticmethod
    def operand_layout(i: int, o: Any, bits: int) -> tuple:
        if isinstance(o, int):
            return ("i", o)
        return ("u", i, None if isinstance(o, VMem) else bits)

    def alu2(self, op: Op, d: Any, a: Any, b: Any, bits: int) -> None:
        """Two-address ``d = a op b`` (b a register, immediate or memory)."""
        if isinstance(b, int):
            self.emit(op, [d], [a], (("d", 0, bits), ("i", b)), two=True)
        else:
            self.emit(op, [d], [a, b], (("d", 0, bits), self.operand_layout(1, b, bits)), two=True)

    def vop3(self, op: Op, d: Any, a: Any, b: Any, extra: tuple = ()) -> None:
        """Three-operand VEX ``d = a op b`` on xmm registers (b may be memory)."""
        self.emit(op, [d], [a, b], (("d", 0, 128), ("u", 0, 128), self.operand_layout(1, b, 128), *extra))

    def canon(self, d: VReg, dt: DType) -> None:
        """Sign- or zero-extend a narrow integer's low bits to 32 bits."""
        if dt.itemsize >= 4 or dt is dtypes.bool:
            return
        op = Op.MOVZX if dtypes.is_unsigned(dt) else Op.MOVSX
        self.emit(op, [d], [d], (("d", 0, 32), ("u", 0, dt.itemsize * 8)))

    def setcc(self, d: VReg, cond: Cond) -> None:
        self.emit(Op.SETCC, [d], [], (("d", 0, 8),), cond=cond)

    def flags_to_bool(self, kind: tuple) -> VReg:
        d = self.new("gpr")
        if kind[0] == "c":
            self.setcc(d, kind[1])
        else:
            t = self.new("gpr")
            self.setcc(d, Cond.E if kind[0] == "eq" else Cond.NE)
            self.setcc(t, Cond.NP if kind[0] == "eq" else Cond.P)
            self.alu2(Op.AND if kind[0] == "eq" else Op.OR, d, d, t, 8)
        self.emit(Op.MOVZX, [d], [d], (("d", 0, 32), ("u", 0, 8)))
        return d

    def compare(self, u: UOp) -> tuple:
        """The flags of comparison ``u``: the last compare's when it compared the same two values and nothing
        since wrote the flags (``flags_live``), else a new cmp/vucomis. Returns ("c", cond), or ("eq",)/("ne",)
        for float ==/!= (ZF and PF)."""
        a, b = u.src
        kind = self.shared_flags(u)
        if kind is not None:
            return kind
        dt = a.dtype
        if is_vec(dt):
            op = Op.VUCOMISD if dt is dtypes.float64 else Op.VUCOMISS
            if u.op is Ops.CMPLT:  # a < b  <=>  b > a (unordered: false)
                ra, rb = self.reg(a), self.float_operand(b)
                rb = rb if not isinstance(rb, VMem) else self.reg_from(rb, dt)
                self.emit(op, [], [rb, ra], (("u", 0, 128), ("u", 1, 128)))
                self.flags = (b, a, len(self.prog) - 1)
                return ("c", Cond.A)
            ra, rb = self.reg(a), self.float_operand(b)
            self.emit(op, [], [ra, rb], (("u", 0, 128), self.operand_layout(1, rb, 128)))
            self.flags = (a, b, len(self.prog) - 1)
            return ("eq",) if u.op is Ops.CMPEQ else ("ne",)
        bits = gbits(dt)
        swapped = a.op is Ops.CONST and b.op is not Ops.CONST  # c < x is compared as x > c: an immediate operand
        x, y = (b, a) if swapped else (a, b)
        rx = self.reg(x)
        ry = self.int_operand(y, bits)
        self.emit(Op.CMP, [], [rx] + ([] if isinstance(ry, int) else [ry]),
                  (("u", 0, bits), self.operand_layout(1, ry, bits)))
        self.flags = (x, y, len(self.prog) - 1)
        return ("c", int_cond(u.op, dt, swapped))

    def shared_flags(self, u: UOp) -> tuple | None:
        """The kind ``compare`` returns for ``u`` read from the flags the last compare left, when they still hold
        and that compare compared u's two values (either way round for ints and float ==/!=; float < needs
        ``vucomis b, a``)."""
        st = self.flags
        if st is None:
            return None
        x, y, pos = st
        a, b = u.src
        if not ((x is a and y is b) or (x is b and y is a)) or not self.flags_live(pos):
            return None
        if is_vec(a.dtype):
            if u.op is Ops.CMPLT:
                return ("c", Cond.A) if x is b and y is a else None
            return ("eq",) if u.op is Ops.CMPEQ else ("ne",)
        return ("c", int_cond(u.op, a.dtype, x is not a))

    def flags_live(self, pos: int) -> bool:
        """Are the flags the instruction at ``pos`` wrote still the flags now? Nothing since wrote them (the
        instructions in FLAG_BARRIERS), and no label or loop boundary came (another path may reach it). Scans
        each instruction once per kernel: the last barrier seen is kept. Register allocation adds only moves
        (copies, spills, fills), so what holds here holds in the allocated code."""
        prog, last = self.prog, self.flags_barrier
        for i in range(self.flags_scanned, len(prog)):
            ins = prog[i]
            if type(ins) is not MInst or ins.op in FLAG_BARRIERS:
                last = i
        self.flags_scanned, self.flags_barrier = len(prog), last
        return last == pos

    def reg_from(self, m: VMem, dt: DType) -> VReg:
        d = self.new("vec")
        self.emit(Op.VMOVSD if dt is dtypes.float64 else Op.VMOVSS, [d], [m], (("d", 0, 128), ("u", 0, None)))
        return d

    def fusable_compare(self, c: UOp) -> bool:
        """A comparison whose only users read its flags (or mask) instead of a bool: WHEREs, and gates of
        loads and stores that pick their address on them. No bool is made; each user asks ``compare``, which shares
        one cmp among them while the flags hold."""
        users = self.users.get(c, [])
        return bool(users) and all(self.reads_flags(x, c) for x in users)

    def reads_flags(self, x: UOp, c: UOp) -> bool:
        if x.op is Ops.WHERE:
            return x.src[0] is c and x.src[1] is not c and x.src[2] is not c and self.where_fuses(x.dtype, c)
        return x.op is Ops.INDEX and len(x.src) > 2 and x.src[2] is c and c not in x.src[:2] and self.gate_fuses(c)

    @staticmethod
    def gate_fuses(c: UOp) -> bool:
        """Can a gate pick its address on comparison ``c``'s flags with one cmov (not float ==/!=: ZF and PF)?"""
        return c.op in CMP_OPS and c.dtype.count == 1 and (c.op is Ops.CMPLT or not is_vec(c.src[0].dtype))

    @staticmethod
    def where_fuses(dt: DType, c: UOp) -> bool:
        """Can a WHERE of ``dt`` use comparison ``c`` directly (flags for gprs, a vcmp mask for floats)?"""
        if c.op not in CMP_OPS:
            return False
        if not is_vec(dt):
            return True
        return is_vec(c.src[0].dtype) and (c.src[0].dtype is dtypes.float64) == (dt is dtypes.float64)

    # ---- the program ----
    def select(self) -> tuple[list[Any], Frame]:
        """Run the rules over the lines (what ``ISARenderer.select`` does)."""
        line_rewrite(self.selected_lines(), self.isel, self, self.prog, strict=True)
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

    def arg_value(self, u: UOp) -> VReg:
        """A buffer pointer or variable read from its argument slot."""
        d = self.new("gpr")
        self.prog.append(self.arg_load(d, u))
        return d

    def arg_load(self, d: VReg, u: UOp) -> MInst:
        if u.op is PARAM:
            return MInst(Op.MOV, [d], [frame_mem((64, "arg", u.arg))], Spec((("d", 0, 64), ("u", 0, None))))
        slot = self.var_arg[u.arg[0]]
        return MInst(Op.MOV, [d], [frame_mem((32, "arg", slot))], Spec((("d", 0, 32), ("u", 0, None))))

    # ---- loops ----
    def open_loop(self, u: UOp) -> None:
        end = u.src[0]
        bits = gbits(u.dtype)
        i = self.new("gpr")
        top, exit_ = Label(f"loop{len(self.loops)}"), Label(f"exit{len(self.loops)}")
        guard = True
        if u.arg.kind is RangeKind.THREAD:
            n = u.arg.threads
            core = self.new("gpr")
            self.emit(Op.MOV, [core], [frame_mem((32, "arg", self.core_arg))], (("d", 0, 32), ("u", 0, None)))
            if end.op is Ops.CONST:
                chunk: Any = (self.int_value(end) + n - 1) // n
                self.emit(Op.IMUL3, [i], [core], (("d", 0, bits), ("u", 0, bits), ("i", chunk)))
            else:
                rend = self.reg(end)
                self.emit(Op.MOV, [RAX], [rend], (("d", 0, 32), ("u", 0, 32)))
                self.alu2(Op.ADD, RAX, RAX, n - 1, 32)
                self.mov_imm(RCX, n, 32)
                self.mov_imm(RDX, 0, 32)
                self.emit(Op.DIV, [RAX, RDX], [RAX, RDX, RCX], (("u", 2, 32),))
                chunk = self.new("gpr")
                self.emit(Op.MOV, [chunk], [RAX], (("d", 0, 32), ("u", 0, 32)))
                self.copy(i, core)
                self.alu2(Op.IMUL, i, i, chunk, 32)
            stop = self.new("gpr")
            self.copy(stop, i)
            self.alu2(Op.ADD, stop, stop, chunk, bits)
            rend = self.reg(end)
            self.emit(Op.CMP, [], [stop, rend], (("u", 0, bits), ("u", 1, bits)))
            self.emit(Op.CMOVCC, [stop], [stop, rend], (("d", 0, bits), ("u", 1, bits)), two=True, cond=Cond.G)
            limit: Any = stop
        else:
            self.mov_imm(i, 0, bits)
            limit = self.int_operand(end, bits)
            guard = not (isinstance(limit, int) and limit > 0)
        if guard:
            self.cmp_limit(i, limit, bits)
            self.jump(exit_, Cond.GE)
        self.prog.append(LoopStart(top))
        self.label(top)
        self.val[u] = i
        self.loops.append((i, limit, top, exit_, bits))

    def cmp_limit(self, i: VReg, limit: Any, bits: int) -> None:
        uses = [i] if isinstance(limit, int) else [i, limit]
        self.emit(Op.CMP, [], uses, (("u", 0, bits), self.operand_layout(1, limit, bits)))

    def close_loop(self) -> None:
        i, limit, top, exit_, bits = self.loops.pop()
        self.alu2(Op.ADD, i, i, 1, bits)
        self.cmp_limit(i, limit, bits)
        self.jump(top, Cond.L)
        self.prog.append(LoopEnd(top))
        self.label(exit_)

    # ---- memory ----
    def is_reg_index(self, idx: UOp) -> bool:
        return in_registers(idx.src[0].dtype)

    def mem(self, idx: UOp, bits: int) -> VMem:
        """The element ``idx`` points at (``lane_offset`` elements further: lane j of a lane-by-lane vector)."""
        buf, i = idx.src[0], idx.src[1]
        base = self.reg(buf)
        size = buf.dtype.base.itemsize  # type: ignore[attr-defined]
        extra = self.lane_offset * size
        if i.op is CONST:  # VMem's fields positionally: a class called with keywords costs twice as much
            return VMem(bits, base, None, 1, self.int_value(i) * size + extra)
        if i.op is Ops.ADD and i.src[1].op is CONST and i.src[0].vmin >= 0 and i.src[0].dtype.count == 1:
            disp = self.int_value(i.src[1]) * size + extra
            if -(1 << 31) <= disp < (1 << 31):
                return VMem(bits, base, self.index_reg(i.src[0]), size, disp)
        return VMem(bits, base, self.index_reg(i), size, extra)

    def index_reg(self, i: UOp) -> VReg:
        if i.dtype.itemsize < 4:
            raise SelectionError(f"x86: index of dtype {i.dtype}")
        return self.reg(i)

    def load(self, u: UOp) -> None:
        idx = u.src[0]
        if self.is_reg_index(idx):
            acc = self.val[idx.src[0]]
            if self.alias_ok(u):
                self.val[u] = acc
            else:
                d = self.newv(u.dtype)
                self.copy(d, acc)
                self.val[u] = d
            return
        if u in self.bcast_loads:   # read by the broadcast that uses it
            return
        if self.foldable(u):
            self.folded.add(u)
            return
        dt = u.dtype
        d = self.newv(dt)
        gate = idx.src[2] if len(idx.src) > 2 else None
        if gate is None:
            self.load_into(d, idx, dt)
        elif len(u.src) > 1:  # an alternative value (hand-written programs only): kept by jumping over the load
            self.copy(d, self.reg(u.src[1]))
            skip = Label("gated")
            self.jump(skip, self.gate_off(gate))
            self.load_into(d, idx, dt)
            self.label(skip)
        else:
            self.load_into(d, idx, dt, self.gated_mem(gate, idx, dt.itemsize, False, None if is_vec(dt) else d))
        self.val[u] = d

    # ---- gated accesses: no branch, the address is switched to a dummy frame slot ----
    def gated_mem(self, gate: UOp, idx: UOp, span: int, store: bool, into: VReg | None = None) -> VMem:
        """Where an access of ``span`` bytes at ``idx`` under ``gate`` goes: ``idx``'s element when the gate holds, else
        a frame slot (for a load the zero slot: reads 0; for a store the sink: nothing reads it, so a later gated-off
        load still reads 0). No jump: a lea of the element's address, then a cmov taking the slot's address (held in a
        register, or read from the frame: ``dummy_address``), and the access goes through the result unconditionally (a
        gated-off one never touches the buffer). An access under the same gate at a constant distance above an earlier
        one in the region shares its address (the slot grows to cover it): one lea and cmov for the lanes of a vector
        under one gate. A gate known false gives the slot itself, one known true the element. ``into``: a gpr the access
        writes, which may hold the address until then (one register fewer; not shared)."""
        if gate.op is Ops.CONST:
            return self.mem(idx, 8) if gate.arg else self.dummy_mem(span, store)
        m = self.mem(idx, 8)
        key = (gate, store, m.base, m.index, m.scale, self.region)
        shared = self.gated_addrs.get(key)
        if shared is not None and 0 <= m.disp - shared[1] <= GATED_SHARE - span:
            delta = m.disp - shared[1]
            self.dummy_mem(delta + span, store)
            return VMem(8, shared[0], disp=delta)
        a = self.new("gpr") if into is None else into
        self.element_address(a, m)
        dummy = self.dummy_address(span, store)
        self.emit(Op.CMOVCC, [a], [a, dummy], (("d", 0, 64), ("u", 1, 64 if type(dummy) is VReg else None)), two=True,
                  cond=self.gate_off(gate))
        if into is None:
            self.gated_addrs[key] = (a, m.disp)
        return VMem(8, a)

    def element_address(self, a: VReg, m: VMem) -> None:
        """``lea a, m`` for a gated access. The first with an index register in the region computes the element's
        address into a register kept unpicked (a copies it); later ones with the same base, index and scale add
        their distance to it (``lea a, [b + disp]``, simpler than a scaled three-part lea): the lanes of a padded
        vector under different gates."""
        if m.index is None:
            self.emit(Op.LEA, [a], [m.sized(None)], (("d", 0, 64), ("u", 0, None)))
            return
        key = (m.base, m.index, m.scale, self.region)
        known = self.element_addrs.get(key)
        if known is not None and -(1 << 31) <= m.disp - known[1] < (1 << 31):
            self.emit(Op.LEA, [a], [VMem(None, known[0], disp=m.disp - known[1])], (("d", 0, 64), ("u", 0, None)))
            return
        b = self.new("gpr")
        self.emit(Op.LEA, [b], [m.sized(None)], (("d", 0, 64), ("u", 0, None)))
        self.element_addrs[key] = (b, m.disp)
        self.copy(a, b)

    def dummy_mem(self, span: int, store: bool) -> VMem:
        """The sink (``store``) or the zero slot, grown to ``span`` bytes (rounded up to 32, so a vector access reads
        or writes only the slot)."""
        size = -(-span // 32) * 32
        frame = self.frame
        if store:
            frame.sink = max(frame.sink, size)
            return frame_mem((8, "sink", 0))
        m = self.const_mem(bytes(32), 8)     # shared with a 32-byte zero constant, never written
        k = m.slot.k                         # type: ignore[union-attr]
        if len(frame.consts[k]) < size:      # wider zeros: a prefix of them is still that constant
            frame.consts[k] = bytes(size)
        return m

    def hold_dummies(self) -> None:
        """While few gprs are held throughout (``pressure``), the address of each dummy slot the gated accesses use
        is held in a register set at the start (an lea, before any line; dropped if no access reads it); else
        each cmov reads it from a frame slot (``dummy_address``)."""
        indexes = self.lines(Ops.INDEX)
        if max(map(len, map(_SOURCES, indexes)), default=0) < 3:   # no gate (most kernels)
            return
        for idx in indexes:
            if len(idx.src) < 3 or idx.src[2].op is Ops.CONST:
                continue
            for user in self.users.get(idx, ()):
                if user.op is Ops.LOAD and len(user.src) > 1:
                    continue   # a load with an alternative value jumps over it: no dummy slot
                store = user.op is Ops.STORE
                if store not in self.dummy_held and self.pressure < HELD_GPRS:
                    r = self.dummy_held[store] = self.new("gpr")
                    self.pressure += 1
                    self.emit(Op.LEA, [r], [self.dummy_mem(0, store).sized(None)], (("d", 0, 64), ("u", 0, None)))

    def near_flags(self, gate: UOp) -> Cond | None:
        """For a gate ``c < x`` or ``x < c`` (signed ints, c a constant): the condition that holds when it is false
        read from the live flags of a ``cmp x, k`` with k one nearer (``c < x`` is ``x >= c+1``, ``x < c`` is
        ``x <= c-1``): the lanes of a padded vector are gated by such neighbours (x > 2, x > 1, ...)."""
        st = self.flags
        if st is None or gate.op is not Ops.CMPLT:
            return None
        x, k, pos = st
        a, b = gate.src
        if k.op is not Ops.CONST or not (b is x and a.op is Ops.CONST or a is x and b.op is Ops.CONST):
            return None
        dt = x.dtype
        if dt not in (dtypes.int32, dtypes.int64) or not self.flags_live(pos):
            return None
        kv = self.int_value(k)
        if b is x and self.int_value(a) + 1 == kv:   # c < x: x >= k
            return Cond.L
        if a is x and self.int_value(b) - 1 == kv:   # x < c: x <= k
            return Cond.G
        return None

    def dummy_address(self, span: int, store: bool) -> VReg | VMem:
        """The address of ``dummy_mem(span, store)`` for a cmov: the register holding it (``hold_dummies``), else the
        frame slot the prologue stores it in."""
        target = self.dummy_mem(span, store).slot
        r = self.dummy_held.get(store)
        if r is not None:
            return r
        pointers = self.frame.pointers
        if target not in pointers:
            pointers.append(target)   # type: ignore[arg-type]
        return frame_mem((64, "pointer", pointers.index(target)))   # type: ignore[arg-type]

    def gate_off(self, gate: UOp) -> Cond:
        """The condition that holds when ``gate`` is false: its compare's flags (shared while they hold, see
        ``compare``) negated, else a test of the bool."""
        if self.gate_fuses(gate):
            near = self.near_flags(gate)
            return near if near is not None else self.compare(gate)[1].negate()
        tested = self.tested
        if tested is not None and tested[0] is gate and self.flags_live(tested[1]):
            return Cond.E   # the last test was of this gate and its flags still hold (accesses of one reduction)
        g = self.reg(gate)
        self.emit(Op.TEST, [], [g, g], (("u", 0, 32), ("u", 1, 32)))
        self.tested = (gate, len(self.prog) - 1)
        return Cond.E

    def alias_ok(self, u: UOp) -> bool:
        """A LOAD of an accumulator may be the accumulator itself if every use comes before the next STORE."""
        acc = self.define_reg(u.src[0])
        here = self.pos[u]
        stores = self.acc_stores().get(acc, [])
        i = bisect.bisect_right(stores, here)
        nxt = stores[i] if i < len(stores) else len(self.uops)
        users = self.users.get(u)
        return not users or self.pos[users[-1]] <= nxt   # users come in line order: the last is the latest

    def acc_stores(self) -> dict[UOp, list[int]]:
        """For each accumulator, the positions of the STOREs to it, in order (found once)."""
        if self._acc_stores is None:
            self._acc_stores = {}
            for i in self.positions(Ops.STORE):
                s = self.uops[i]
                if self.is_reg_index(s.src[0]):
                    self._acc_stores.setdefault(self.define_reg(s.src[0]), []).append(i)
        return self._acc_stores

    @staticmethod
    def define_reg(idx: UOp) -> UOp:
        p = idx.src[0]
        while p.op is AFTER:
            p = p.src[0]
        return p

    def load_into(self, d: VReg, idx: UOp, dt: DType, at: VMem | None = None) -> None:
        """Load ``idx``'s element into ``d`` (from ``at`` instead when given: a gated load, see ``gated_mem``)."""
        size = dt.itemsize
        mem = self.mem if at is None else at_address(at)
        if dt is dtypes.float32:
            self.emit(Op.VMOVSS, [d], [mem(idx, 32)], (("d", 0, 128), ("u", 0, None)))
        elif dt is dtypes.float64:
            self.emit(Op.VMOVSD, [d], [mem(idx, 64)], (("d", 0, 128), ("u", 0, None)))
        elif dt in NARROW_FLOATS:
            t = self.new("gpr")
            self.emit(Op.MOVZX, [t], [mem(idx, 16)], (("d", 0, 32), ("u", 0, None)))
            if dt is dtypes.bfloat16:
                self.alu2(Op.SHL, t, t, 16, 32)
            self.emit(Op.VMOVD, [d], [t], (("d", 0, 128), ("u", 0, 32)))
            if dt is dtypes.float16:
                self.emit(Op.VCVTPH2PS, [d], [d], (("d", 0, 128), ("u", 0, 128)))
        elif size == 8:
            self.emit(Op.MOV, [d], [mem(idx, 64)], (("d", 0, 64), ("u", 0, None)))
        elif size == 4:
            self.emit(Op.MOV, [d], [mem(idx, 32)], (("d", 0, 32), ("u", 0, None)))
        else:
            op = Op.MOVZX if dtypes.is_unsigned(dt) or dt is dtypes.bool else Op.MOVSX
            self.emit(op, [d], [mem(idx, size * 8)], (("d", 0, 32), ("u", 0, None)))

    def store(self, u: UOp) -> None:
        idx, value = u.src[0], u.src[1]
        if self.is_reg_index(idx):
            acc = self.val[self.define_reg(idx)]
            if value.op is Ops.CONST:
                self.materialize(value, into=acc)
            else:
                self.copy(acc, self.reg(value))
            return
        gate = idx.src[2] if len(idx.src) > 2 else None
        dt = value.dtype
        mem: Callable[[UOp, int], VMem] = self.mem
        if gate is not None:   # through the gated address: the buffer's element, or the sink
            mem = at_address(self.gated_mem(gate, idx, dt.itemsize, store=True))
        if is_vec(dt):
            x = self.reg(value)
            if dt is dtypes.float32:
                self.emit(Op.VMOVSS, [], [mem(idx, 32), x], (("u", 0, None), ("u", 1, 128)))
            elif dt is dtypes.float64:
                self.emit(Op.VMOVSD, [], [mem(idx, 64), x], (("u", 0, None), ("u", 1, 128)))
            elif dt is dtypes.float16:
                t = self.new("vec")
                self.emit(Op.VCVTPS2PH, [t], [x], (("d", 0, 128), ("u", 0, 128), ("i", F16_ROUND)))
                self.emit(Op.VPEXTRW, [], [mem(idx, 16), t], (("u", 0, None), ("u", 1, 128), ("i", 0)))
            else:
                t = self.new("gpr")
                self.emit(Op.VMOVD, [t], [x], (("d", 0, 32), ("u", 0, 128)))
                self.alu2(Op.SHR, t, t, 16, 32)
                self.emit(Op.MOV, [], [mem(idx, 16), t], (("u", 0, None), ("u", 1, 16)))
        else:
            bits = dt.itemsize * 8
            v = self.int_operand(value, 32)
            m = mem(idx, bits)
            if isinstance(v, int) and (bits < 64 or -(1 << 31) <= v < (1 << 31)):
                self.emit(Op.MOV, [], [m], (("u", 0, None), ("i", v & ((1 << bits) - 1) if bits < 64 else v)))
            else:
                r = v if isinstance(v, VReg) else self.reg(value)
                self.emit(Op.MOV, [], [m, r], (("u", 0, None), ("u", 1, bits)))

    # ---- integer ALU (one method per rule of SCALAR_ISEL) ----
    def int_max(self, u: UOp) -> VReg:
        dt = u.dtype
        bits = gbits(dt)
        a, b = self.reg(u.src[0]), self.reg(u.src[1])
        self.emit(Op.CMP, [], [a, b], (("u", 0, bits), ("u", 1, bits)))
        d = self.new("gpr")
        cond = Cond.A if dtypes.is_unsigned(dt) or dt is dtypes.bool else Cond.G
        self.emit(Op.CMOVCC, [d], [b, a], (("d", 0, bits), ("u", 1, bits)), two=True, cond=cond)
        return d

    def int_neg(self, u: UOp) -> VReg:
        dt = u.dtype
        d = self.new("gpr")
        if dt is dtypes.bool:
            self.alu2(Op.XOR, d, self.reg(u.src[0]), 1, 32)
        else:
            self.emit(Op.NEG, [d], [self.reg(u.src[0])], (("d", 0, gbits(dt)),), two=True)
            self.canon(d, dt)
        return d

    def int_mulacc(self, u: UOp) -> VReg:
        dt = u.dtype
        bits = gbits(dt)
        a, b, c = u.src
        t = self.new("gpr")
        self.alu2(Op.IMUL, t, self.reg(a), self.reg(b), bits)
        d = self.new("gpr")
        self.alu2(Op.ADD, d, t, self.int_operand(c, bits), bits)
        self.canon(d, dt)
        return d

    def int_binary(self, u: UOp, xop: Op) -> VReg:
        """``d = a op b`` with ``xop``: ADD as lea, MUL by an immediate as three-operand imul, constants as
        immediates (a constant first operand swapped to the second where the op commutes)."""
        op, dt = u.op, u.dtype
        bits = gbits(dt)
        a, b = u.src
        if a.op is CONST and b.op is not CONST and op is not Ops.SUB:
            a, b = b, a
        d = self.new("gpr")
        rb = self.int_operand(b, bits)
        if xop is Op.ADD and op is Ops.ADD and (not isinstance(rb, int) or -(1 << 31) <= rb < (1 << 31)):
            m = VMem(None, self.reg(a), None, 1, rb) if isinstance(rb, int) else VMem(None, self.reg(a), rb)
            self.emit(Op.LEA, [d], [m], (("d", 0, bits), ("u", 0, None)))
        elif xop is Op.IMUL and isinstance(rb, int):
            if -(1 << 31) <= rb < (1 << 31):
                self.emit(Op.IMUL3, [d], [self.reg(a)], (("d", 0, bits), ("u", 0, bits), ("i", rb)))
            else:
                self.alu2(Op.IMUL, d, self.reg(a), self.reg(b), bits)
        else:
            self.alu2(xop, d, self.reg(a), rb, bits)
        if op in INT_RMW_OPS:
            self.canon(d, dt)
        return d

    def divide(self, u: UOp) -> VReg:
        """x/0 = x%0 = 0; INT_MIN/-1 wraps. Divisors 0 and -1 divide by 1; the quotient is then a*b."""
        dt = u.dtype
        bits = gbits(dt)
        a, b = self.reg(u.src[0]), self.reg(u.src[1])
        d = self.new("gpr")
        r = (("d", 0, bits),)
        if dtypes.is_unsigned(dt) or dt is dtypes.bool:
            self.mov_imm(RCX, 1, bits)
            self.emit(Op.TEST, [], [b, b], (("u", 0, bits), ("u", 1, bits)))
            self.emit(Op.CMOVCC, [RCX], [RCX, b], (*r, ("u", 1, bits)), two=True, cond=Cond.NE)
            self.emit(Op.MOV, [RAX], [a], (*r, ("u", 0, bits)))
            self.mov_imm(RDX, 0, bits)
            self.emit(Op.DIV, [RAX, RDX], [RAX, RDX, RCX], (("u", 2, bits),))
            if u.op is Ops.IDIV:
                self.emit(Op.TEST, [], [b, b], (("u", 0, bits), ("u", 1, bits)))
                self.emit(Op.CMOVCC, [RAX], [RAX, b], (*r, ("u", 1, bits)), two=True, cond=Cond.E)
        else:
            def special() -> None:  # flags: below-or-equal when b is 0 or -1
                self.emit(Op.LEA, [RCX], [VMem(None, b, disp=1)], (*r, ("u", 0, None)))
                self.emit(Op.CMP, [], [RCX], (("u", 0, bits), ("i", 1)))
            special()
            self.mov_imm(RCX, 1, bits)
            self.emit(Op.CMOVCC, [RCX], [RCX, b], (*r, ("u", 1, bits)), two=True, cond=Cond.A)
            self.emit(Op.MOV, [RAX], [a], (*r, ("u", 0, bits)))
            self.emit(Op.CQO if bits == 64 else Op.CDQ, [RDX], [RAX], ())
            self.emit(Op.IDIV, [RAX, RDX], [RAX, RDX, RCX], (("u", 2, bits),))
            if u.op is Ops.IDIV:
                self.emit(Op.MOV, [RDX], [a], (*r, ("u", 0, bits)))
                self.emit(Op.IMUL, [RDX], [RDX, b], (*r, ("u", 1, bits)), two=True)
                special()
                self.emit(Op.CMOVCC, [RAX], [RAX, RDX], (*r, ("u", 1, bits)), two=True, cond=Cond.BE)
        self.emit(Op.MOV, [d], [RAX if u.op is Ops.IDIV else RDX], (*r, ("u", 0, bits)))
        self.canon(d, dt)
        return d

    def shift(self, u: UOp) -> VReg:
        """Shift amounts outside 0..width-1 give 0 (SHL, unsigned SHR) or the sign (signed SHR)."""
        dt = u.dtype
        bits = gbits(dt)
        width = dt.itemsize * 8
        signed = not dtypes.is_unsigned(dt) and dt is not dtypes.bool
        xop = Op.SHL if u.op is Ops.SHL else (Op.SAR if signed else Op.SHR)
        a, n = u.src
        ra = self.reg(a)
        d = self.new("gpr")
        if n.op is Ops.CONST and 0 <= self.int_value(n) < width:
            self.alu2(xop, d, ra, self.int_value(n), bits)
        else:
            rn = self.reg(n)
            nbits = gbits(n.dtype)
            self.emit(Op.MOV, [RCX], [rn], (("d", 0, nbits), ("u", 0, nbits)))
            self.emit(xop, [d], [ra, RCX], (("d", 0, bits), ("u", 1, 8)), two=True)
            if xop is Op.SAR:
                self.emit(Op.MOV, [RAX], [ra], (("d", 0, bits), ("u", 0, bits)))
                self.alu2(Op.SAR, RAX, RAX, bits - 1, bits)
            else:
                self.mov_imm(RAX, 0, bits)
            self.emit(Op.CMP, [], [rn], (("u", 0, nbits), ("i", width)))
            self.emit(Op.CMOVCC, [d], [d, RAX], (("d", 0, bits), ("u", 1, bits)), two=True, cond=Cond.AE)
        if u.op is Ops.SHL:
            self.canon(d, dt)
        return d

    # ---- where ----
    def where_blend(self, u: UOp) -> VReg:
        """A float WHERE: a vcmp mask of its comparison (or the bool widened to a mask) and vblendv."""
        c, x, y = u.src
        dt = u.dtype
        rx, ry = self.reg(x), self.reg(y)
        m = self.new("vec")
        if self.where_fuses(dt, c):
            pred = {Ops.CMPLT: CMP_LT_OS, Ops.CMPEQ: CMP_EQ_OQ, Ops.CMPNE: CMP_NEQ_UQ}[c.op]
            ra, rb = self.reg(c.src[0]), self.float_operand(c.src[1])
            self.vop3(fop("VCMP", c.src[0].dtype), m, ra, rb, (("i", pred),))
        else:
            t = self.new("gpr")
            self.copy(t, self.reg(c))
            self.emit(Op.NEG, [t], [t], (("d", 0, 64),), two=True)
            self.emit(Op.VMOVQ, [m], [t], (("d", 0, 128), ("u", 0, 64)))
        d = self.new("vec")
        blend = Op.VBLENDVPD if dt is dtypes.float64 else Op.VBLENDVPS
        self.emit(blend, [d], [ry, rx, m], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128), ("u", 2, 128)))
        return d

    def where_cmov(self, u: UOp) -> VReg:
        """An integer WHERE: cmov on its comparison's flags (``compare``: the last cmp's while they hold, else
        compared again here, so no WHERE of a compare needs a bool), or on a test of the bool."""
        c, x, y = u.src
        dt = u.dtype
        bits = max(gbits(dt), 32)
        rx, ry = self.reg(x), self.reg(y)
        if c.op in CMP_OPS:
            kind = self.compare(c)
        else:
            rc = self.reg(c)
            self.emit(Op.TEST, [], [rc, rc], (("u", 0, 32), ("u", 1, 32)))
            kind = ("c", Cond.NE)
        d = self.new("gpr")
        lay = (("d", 0, bits), ("u", 1, bits))
        if kind[0] == "c":
            self.emit(Op.CMOVCC, [d], [ry, rx], lay, two=True, cond=kind[1])
        elif kind[0] == "eq":
            self.emit(Op.CMOVCC, [d], [ry, rx], lay, two=True, cond=Cond.E)
            self.emit(Op.CMOVCC, [d], [d, ry], lay, two=True, cond=Cond.P)
        else:
            self.emit(Op.CMOVCC, [d], [ry, rx], lay, two=True, cond=Cond.NE)
            self.emit(Op.CMOVCC, [d], [d, rx], lay, two=True, cond=Cond.P)
        return d

    def where_minmax(self, u: UOp, name: str) -> VReg:
        """``(p<q).where(a, b)`` with a, b the compared values: ``vminss a, b`` or ``vmaxss a, b`` (see min_or_max)."""
        _, a, b = u.src
        d = self.new("vec")
        self.vop3(fop(name, u.dtype), d, self.reg(a), self.float_operand(b))
        return d

    # ---- float ALU (one method per rule of SCALAR_ISEL) ----
    def float_arith(self, u: UOp) -> VReg:
        """``d = a op b`` (vaddss ...): b may be a constant's frame slot or a folded load."""
        op, dt = u.op, u.dtype
        d = self.new("vec")
        a, b = u.src
        if (a.op is Ops.CONST or a in self.folded) and b.op is not Ops.CONST and op in ADD_MUL:
            a, b = b, a
        self.vop3(fop(FLOAT_ARITH[op], dt), d, self.reg(a), self.float_operand(b))
        return d

    def float_max(self, u: UOp) -> VReg:
        """(a != a || a > b) ? a : b: NaN propagates."""
        dt = u.dtype
        d = self.new("vec")
        a = self.reg(u.src[0])
        t, m = self.new("vec"), self.new("vec")
        self.vop3(fop("VMAX", dt), t, a, self.float_operand(u.src[1]))
        self.vop3(fop("VCMP", dt), m, a, a, (("i", CMP_UNORD_Q),))
        blend = Op.VBLENDVPD if dt is dtypes.float64 else Op.VBLENDVPS
        self.emit(blend, [d], [t, a, m], (("d", 0, 128), ("u", 0, 128), ("u", 1, 128), ("u", 2, 128)))
        return d

    def float_neg(self, u: UOp) -> VReg:
        dt = u.dtype
        d = self.new("vec")
        sign = struct.pack("<Q", 1 << 63) if dt is dtypes.float64 else struct.pack("<I", 1 << 31)
        self.vop3(Op.VXORPS, d, self.reg(u.src[0]), self.const_mem(sign, 128))
        return d

    def float_sqrt(self, u: UOp) -> VReg:
        d = self.new("vec")
        a = self.reg(u.src[0])
        self.vop3(fop("VSQRT", u.dtype), d, a, a)
        return d

    def float_reciprocal(self, u: UOp) -> VReg:
        dt = u.dtype
        d = self.new("vec")
        one = self.materialize(UOp.const(dt, 1.0))
        self.vop3(fop("VDIV", dt), d, one, self.reg(u.src[0]))
        return d

    def float_trunc(self, u: UOp) -> VReg:
        d = self.new("vec")
        a = self.reg(u.src[0])
        self.vop3(fop("VROUND", u.dtype), d, a, a, (("i", TRUNC_IMM),))
        return d

    def float_fma(self, u: UOp) -> VReg:
        """A fused ADD (``plan_fma``): its MUL's a*b + the other source, one FMA."""
        c, mul = self.fma_adds[u]
        a, b = mul.src
        return self.fma(u.dtype, a, b, c, mul, u)

    def float_mulacc(self, u: UOp) -> VReg:
        a, b, c = u.src
        return self.fma(u.dtype, a, b, c, u, u)

    def fma(self, dt: DType, a: UOp, b: UOp, c: UOp, mul: UOp, at: UOp) -> VReg:
        """a*b + c rounded once: one vfmadd{132,213,231}s[sd] of the form ``fma_order`` picks."""
        form, x, y, z = self.fma_order(a, b, c, mul, at, self.in_memory)
        d = self.new("vec")
        rx, ry, rz = self.float_reg(x), self.float_reg(y), self.float_operand(z)
        self.emit(fop("VFMADD" + form, dt), [d], [rx, ry, rz],
                  (("d", 0, 128), ("u", 1, 128), self.operand_layout(2, rz, 128)), two=True)
        return d

    # ---- casts (by register file: the four CAST rules of SCALAR_ISEL) ----
    def int_to_int(self, x: VReg, sdt: DType, dst: DType) -> VReg:
        d = self.new("gpr")
        if dst is dtypes.bool:
            bits = gbits(sdt)
            self.emit(Op.CMP, [], [x], (("u", 0, bits), ("i", 0)))
            self.setcc(d, Cond.NE)
            self.emit(Op.MOVZX, [d], [d], (("d", 0, 32), ("u", 0, 8)))
        elif dst.itemsize == 8:
            if dtypes.is_unsigned(sdt) or sdt is dtypes.bool or sdt.itemsize == 8:
                self.emit(Op.MOV, [d], [x], (("d", 0, gbits(sdt)), ("u", 0, gbits(sdt))))
            else:
                self.emit(Op.MOVSXD, [d], [x], (("d", 0, 64), ("u", 0, 32)))
        elif dst.itemsize == 4:
            self.emit(Op.MOV, [d], [x], (("d", 0, 32), ("u", 0, 32)))
        else:
            op = Op.MOVZX if dtypes.is_unsigned(dst) else Op.MOVSX
            self.emit(op, [d], [x], (("d", 0, 32), ("u", 0, dst.itemsize * 8)))
        return d

    def cvt_int(self, d: VReg, x: Any, bits: int, to64: bool) -> None:
        op = Op.VCVTSI2SD if to64 else Op.VCVTSI2SS
        self.emit(op, [d], [x], (("d", 0, 128), ("d", 0, 128), ("u", 0, bits)))

    def int_to_float(self, x: VReg, sdt: DType, dst: DType) -> VReg:
        wide = dst is dtypes.float64 or (dst is dtypes.bfloat16 and sdt.itemsize >= 4)
        d = self.new("vec")
        if sdt is dtypes.uint64:
            done = Label("u64")
            self.cvt_int(d, x, 64, wide)
            self.emit(Op.TEST, [], [x, x], (("u", 0, 64), ("u", 1, 64)))
            self.jump(done, Cond.NS)
            self.emit(Op.MOV, [RAX], [x], (("d", 0, 64), ("u", 0, 64)))
            self.alu2(Op.SHR, RAX, RAX, 1, 64)
            self.emit(Op.MOV, [RCX], [x], (("d", 0, 32), ("u", 0, 32)))
            self.alu2(Op.AND, RCX, RCX, 1, 32)
            self.alu2(Op.OR, RAX, RAX, RCX, 64)
            self.cvt_int(d, RAX, 64, wide)
            self.vop3(Op.VADDSD if wide else Op.VADDSS, d, d, d)
            self.label(done)
        else:
            bits = 64 if sdt.itemsize == 8 or sdt is dtypes.uint32 else 32
            self.cvt_int(d, x, bits, wide)
        if dst is dtypes.float16:
            return self.round_f16(d)
        if dst is dtypes.bfloat16:
            return self.round_bf16(self.f64_to_f32_odd(d) if wide else d)
        return d

    def float_to_int(self, x: VReg, sdt: DType, dst: DType) -> VReg:
        d = self.new("gpr")
        f64 = sdt is dtypes.float64
        if dst is dtypes.bool:
            z = self.new("vec")
            self.emit(Op.VXORPS, [z], [], (("d", 0, 128), ("d", 0, 128), ("d", 0, 128)))
            self.emit(Op.VUCOMISD if f64 else Op.VUCOMISS, [], [x, z], (("u", 0, 128), ("u", 1, 128)))
            return self.flags_to_bool(("ne",))
        cvt = Op.VCVTTSD2SI if f64 else Op.VCVTTSS2SI
        self.emit(cvt, [d], [x], (("d", 0, 64), ("u", 0, 128)))
        if dst.itemsize == 8:  # 2**63 <= x < 2**64 (and NaN, inf): convert x - 2**63, flip the top bit
            done = Label("f2i")
            self.emit(Op.MOV, [RAX], [d], (("d", 0, 64), ("u", 0, 64)))
            self.emit(Op.NEG, [RAX], [RAX], (("d", 0, 64),), two=True)
            self.jump(done, Cond.NO)
            t = self.new("vec")
            self.vop3(Op.VSUBSD if f64 else Op.VSUBSS, t, x, self.fconst(2.0 ** 63, sdt if f64 else dtypes.float32))
            self.emit(cvt, [d], [t], (("d", 0, 64), ("u", 0, 128)))
            self.mov_imm(RAX, 1 << 63, 64)
            self.alu2(Op.XOR, d, d, RAX, 64)
            self.label(done)
        elif dst.itemsize == 4:
            self.emit(Op.MOV, [d], [d], (("d", 0, 32), ("u", 0, 32)))
        else:
            self.canon(d, dst)
        return d

    def float_to_float(self, x: VReg, sdt: DType, dst: DType) -> VReg:
        if sdt is dst or (sdt in NARROW_FLOATS and dst is dtypes.float32):
            d = self.new("vec")
            self.copy(d, x)
            return d
        if dst is dtypes.float64:
            d = self.new("vec")
            self.vop3(Op.VCVTSS2SD, d, x, x)
            return d
        if sdt is dtypes.float64:
            f = self.f64_to_f32_odd(x) if dst in NARROW_FLOATS else None
            if f is None:
                d = self.new("vec")
                self.vop3(Op.VCVTSD2SS, d, x, x)
                return d
            x = f
        if dst is dtypes.float16:
            return self.round_f16(x)
        if dst is dtypes.bfloat16:
            return self.round_bf16(x)
        d = self.new("vec")
        self.copy(d, x)
        return d

    def round_f16(self, x: VReg) -> VReg:
        t, d = self.new("vec"), self.new("vec")
        self.emit(Op.VCVTPS2PH, [t], [x], (("d", 0, 128), ("u", 0, 128), ("i", F16_ROUND)))
        self.emit(Op.VCVTPH2PS, [d], [t], (("d", 0, 128), ("u", 0, 128)))
        return d

    def round_bf16(self, x: VReg) -> VReg:
        """float32 -> bfloat16 (as float32), round to nearest even; NaN stays a quiet NaN."""
        d = self.new("vec")
        g = (("d", 0, 32), ("u", 0, 32))
        self.emit(Op.VMOVD, [RAX], [x], (("d", 0, 32), ("u", 0, 128)))
        self.emit(Op.MOV, [RCX], [RAX], g)
        self.alu2(Op.SHR, RCX, RCX, 16, 32)
        self.alu2(Op.AND, RCX, RCX, 1, 32)
        self.alu2(Op.ADD, RCX, RCX, 0x7FFF, 32)
        self.alu2(Op.ADD, RCX, RCX, RAX, 32)
        self.alu2(Op.AND, RCX, RCX, 0xFFFF0000, 32)
        self.emit(Op.MOV, [RDX], [RAX], g)
        self.alu2(Op.OR, RDX, RDX, 0x400000, 32)
        self.alu2(Op.AND, RDX, RDX, 0xFFFF0000, 32)
        self.alu2(Op.AND, RAX, RAX, 0x7FFFFFFF, 32)
        self.emit(Op.CMP, [], [RAX], (("u", 0, 32), ("i", 0x7F800000)))
        self.emit(Op.CMOVCC, [RCX], [RCX, RDX], (("d", 0, 32), ("u", 1, 32)), two=True, cond=Cond.A)
        self.emit(Op.VMOVD, [d], [RCX], (("d", 0, 128), ("u", 0, 32)))
        return d

    def f64_to_f32_odd(self, x: VReg) -> VReg:
        """float64 -> float32 rounded to odd: rounding that again to a narrower float rounds once."""
        f, t = self.new("vec"), self.new("vec")
        done = Label("odd")
        self.vop3(Op.VCVTSD2SS, f, x, x)
        self.vop3(Op.VCVTSS2SD, t, f, f)
        self.emit(Op.VUCOMISD, [], [t, x], (("u", 0, 128), ("u", 1, 128)))
        self.jump(done, Cond.E)           # exact (or NaN: unordered sets ZF)
        self.emit(Op.VMOVD, [RAX], [f], (("d", 0, 32), ("u", 0, 128)))
        self.emit(Op.MOV, [RCX], [RAX], (("d", 0, 32), ("u", 0, 32)))
        self.alu2(Op.AND, RCX, RCX, 0x7FFFFFFF, 32)
        self.emit(Op.CMP, [], [RCX], (("u", 0, 32), ("i", 0x7F800000)))
        self.jump(done, Cond.E)           # overflowed to inf: stays inf
        self.emit(Op.VMOVQ, [RCX], [t], (("d", 0, 64), ("u", 0, 128)))
        self.alu2(Op.SHL, RCX, RCX, 1, 64)
        self.emit(Op.VMOVQ, [RDX], [x], (("d", 0, 64), ("u", 0, 128)))
        self.alu2(Op.SHL, RDX, RDX, 1, 64)
        self.emit(Op.CMP, [], [RDX, RCX], (("u", 0, 64), ("u", 1, 64)))   # below: |x| < |f|
        self.emit(Op.LEA, [RCX], [VMem(None, RAX, disp=-1)], (("d", 0, 32), ("u", 0, None)))
        self.emit(Op.CMOVCC, [RAX], [RAX, RCX], (("d", 0, 32), ("u", 1, 32)), two=True, cond=Cond.B)
        self.alu2(Op.OR, RAX, RAX, 1, 32)
        self.emit(Op.VMOVD, [f], [RAX], (("d", 0, 128), ("u", 0, 32)))
        self.label(done)
        return f

    # ---- bitcast ----
    def bitcast(self, src: UOp, dst: DType) -> VReg:
        sdt = src.dtype
        x = self.reg(src)
        if sdt.itemsize != dst.itemsize or sdt.count != 1 or dst.count != 1:
            raise SelectionError(f"x86: bitcast {sdt} -> {dst}")
        bits = dst.itemsize * 8
        if is_vec(sdt):   # float -> its bits in a gpr
            d = self.new("gpr")
            if sdt is dtypes.float16:
                t = self.new("vec")
                self.emit(Op.VCVTPS2PH, [t], [x], (("d", 0, 128), ("u", 0, 128), ("i", F16_ROUND)))
                self.emit(Op.VMOVD, [d], [t], (("d", 0, 32), ("u", 0, 128)))
            else:
                self.emit(Op.VMOVQ if bits == 64 else Op.VMOVD, [d], [x], (("d", 0, max(bits, 32)), ("u", 0, 128)))
                if sdt is dtypes.bfloat16:
                    self.alu2(Op.SHR, d, d, 16, 32)
            if is_vec(dst):
                return self.bits_to_float(d, dst)
            self.canon(d, dst)
            return d
        if is_vec(dst):
            return self.bits_to_float(x, dst)
        d = self.new("gpr")
        self.copy(d, x)
        self.canon(d, dst)
        return d

    def bits_to_float(self, x: VReg, dst: DType) -> VReg:
        d = self.new("vec")
        if dst is dtypes.float64:
            self.emit(Op.VMOVQ, [d], [x], (("d", 0, 128), ("u", 0, 64)))
        elif dst is dtypes.float32:
            self.emit(Op.VMOVD, [d], [x], (("d", 0, 128), ("u", 0, 32)))
        else:
            t = self.new("gpr")
            self.emit(Op.MOVZX, [t], [x], (("d", 0, 32), ("u", 0, 16)))
            if dst is dtypes.bfloat16:
                self.alu2(Op.SHL, t, t, 16, 32)
            self.emit(Op.VMOVD, [d], [t], (("d", 0, 128), ("u", 0, 32)))
            if dst is dtypes.float16:
                self.emit(Op.VCVTPH2PS, [d], [d], (("d", 0, 128), ("u", 0, 128)))
        return d


# ---- the rules ----
# Each rule takes the isel context (a ``Selector``) and the UOp, emits its instructions into ``ctx.prog``
# through the selector's helpers, records the UOp's value in ``ctx.val`` and returns EMITTED; None
# falls through to the next rule of the op. Vector UOps are taken first by ``vsel.VECTOR_ISEL``.

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
        ctx.val[x] = convert(ctx, ctx.reg(src), src.dtype, x.dtype)
        return EMITTED
    return rule


def binary_rule(table: dict[Ops, Op]) -> Callable[[Selector, UOp], tuple]:
    """A two-operand integer rule with the instruction ``table[op]``."""
    def rule(ctx: Selector, x: UOp) -> tuple:
        if x not in ctx.in_address:   # (else the addresses reading it compute it: see plan_addresses)
            ctx.val[x] = ctx.int_binary(x, table[x.op])
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
    return ctx.newv(x.dtype.base)  # type: ignore[attr-defined]


def sel_after(ctx: Selector, x: UOp) -> tuple:
    """AFTER is the value of what it follows (an accumulator's register, or its pieces for a vector)."""
    if x.src[0] in ctx.val:
        ctx.val[x] = ctx.val[x.src[0]]
    return EMITTED


def sel_end(ctx: Selector, x: UOp) -> None:
    for _ in x.src[1:]:
        ctx.close_loop()


def sel_compare(ctx: Selector, x: UOp) -> tuple:
    if not ctx.fusable_compare(x):  # else its WHEREs and gates read the flags (see Selector.compare): no bool
        ctx.val[x] = ctx.flags_to_bool(ctx.compare(x))
    return EMITTED


def sel_where_minmax(ctx: Selector, x: UOp, c: UOp, a: UOp, b: UOp) -> tuple | None:
    name = min_or_max(c, a, b)
    if name is None:
        return None
    ctx.val[x] = ctx.where_minmax(x, name)
    return EMITTED


def sel_fused(ctx: Selector, x: UOp) -> tuple | None:
    """A float MUL or ADD ``plan_fma`` fused: the MUL emits nothing, the ADD one FMA."""
    if x in ctx.fma_muls:
        return EMITTED
    if x not in ctx.fma_adds:
        return None
    ctx.val[x] = ctx.float_fma(x)
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
    (UPat(Ops.RANGE, name="x"), effect_rule(Selector.open_loop)),
    (UPat(Ops.END, name="x"), effect_rule(sel_end)),
    # memory: [base + index*scale + disp]; a gated access goes through an address a cmov (on the gate compare's
    # flags) switches to a frame slot, no branch; a float load with one user folds into it
    (UPat(Ops.LOAD, name="x"), effect_rule(Selector.load)),
    (UPat(Ops.STORE, name="x"), effect_rule(Selector.store)),
    # casts by register file; bitcasts move bits between them
    (UPat(Ops.CAST, I, src=(UPat(dtype=I),), name="x"), cast_rule(Selector.int_to_int)),
    (UPat(Ops.CAST, F, src=(UPat(dtype=I),), name="x"), cast_rule(Selector.int_to_float)),
    (UPat(Ops.CAST, I, src=(UPat(dtype=F),), name="x"), cast_rule(Selector.float_to_int)),
    (UPat(Ops.CAST, F, src=(UPat(dtype=F),), name="x"), cast_rule(Selector.float_to_float)),
    (UPat(Ops.BITCAST, name="x"), value_rule(lambda ctx, x: ctx.bitcast(x.src[0], x.dtype))),
    # comparisons: flags, shared by the cmovs of its WHEREs and of its gates while no instruction
    # in between writes them (else compared again there); a bool (setcc) only when something else reads it
    (UPat(CMP_OPS, name="x"), sel_compare),
    # WHERE: cmov on a compare's flags; floats: vmin/vmax when it picks between the values a < compared, else
    # a vcmp mask + vblendv
    (UPat(Ops.WHERE, I, name="x"), value_rule(Selector.where_cmov)),
    (UPat(Ops.WHERE, F, src=(UPat(Ops.CMPLT, name="c"), UPat.var("a"), UPat.var("b")), name="x"), sel_where_minmax),
    (UPat(Ops.WHERE, F, name="x"), value_rule(Selector.where_blend)),
    # integer ALU in gprs: idiv/div through rax/rdx (x/0 = 0), shifts by cl (out of range: 0 or the sign),
    # max as cmp + cmov, a*b+c as imul + add, the rest two-address (add as lea, imul by an immediate)
    (UPat(DIV_OPS, I, name="x"), value_rule(Selector.divide)),
    (UPat(SHIFT_OPS, I, name="x"), value_rule(Selector.shift)),
    (UPat(Ops.MAX, I, name="x"), value_rule(Selector.int_max)),
    (UPat(Ops.NEG, I, name="x"), value_rule(Selector.int_neg)),
    (UPat(Ops.MULACC, I, name="x"), value_rule(Selector.int_mulacc)),
    (UPat(tuple(BOOL_BINARY), dtypes.bool, name="x"), binary_rule(BOOL_BINARY)),
    (UPat(tuple(INT_BINARY), I, name="x"), binary_rule(INT_BINARY)),
    # float ALU in xmm lane 0 (memory operands for constants and single-use loads); a*b + c as one FMA where
    # plan_fma fused them
    (UPat(ADD_MUL, F, name="x"), sel_fused),
    (UPat(tuple(FLOAT_ARITH), F, name="x"), value_rule(Selector.float_arith)),
    (UPat(Ops.MAX, F, name="x"), value_rule(Selector.float_max)),          # vmax + unordered blend: NaN propagates
    (UPat(Ops.NEG, F, name="x"), value_rule(Selector.float_neg)),          # xor with the sign bit
    (UPat(Ops.SQRT, F, name="x"), value_rule(Selector.float_sqrt)),
    (UPat(Ops.RECIPROCAL, F, name="x"), value_rule(Selector.float_reciprocal)),
    (UPat(Ops.TRUNC, F, name="x"), value_rule(Selector.float_trunc)),      # vround toward zero
    (UPat(Ops.MULACC, F, name="x"), value_rule(Selector.float_mulacc)),    # one vfmadd: one rounding
    (UPat(name="x"), sel_unknown),
])

# the x86 isel table: horizontal reductions, then vector UOps, then scalar ones
LINE_ISEL = VECTOR_ISEL + SCALAR_ISEL
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


# a dtype whose a*b + c may fuse into one FMA: float32/float64 scalars and vectors
fma_dtype = by_dtype(lambda dt: dt.scalar() in FOLDABLE_LOADS and not isinstance(dt, PtrDType))
# a pointer into DEFINE_REG storage (accumulators held in registers)
in_registers = by_dtype(lambda dt: getattr(dt, "addrspace", AddrSpace.GLOBAL) is AddrSpace.REG)

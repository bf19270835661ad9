"""The emitter: the only mutable state of selecting one kernel, and the instructions it appends.

In:  a kernel's lines, the rule table, and the kernel's ``facts.KernelFacts`` (made here, never changed).
Out: ``prog`` (``MInst``s on virtual registers, loop markers, labels), ``val`` (each UOp's value: a register, or a
     tuple of pieces for a vector), the ``Frame`` (constant slots, argument count, pointer slots), and what
     selection remembers while it goes: the flags the last compare left, the current loops and label region,
     constants' slots, addresses shared by gated accesses, arguments reloaded where used, lanes extracted.

The selection functions (``values``, ``flags``, ``memory``, ``scalar``, ``casts``, ``vsel``) take an ``Emitter``
as their context; the rules of ``isel.ISEL`` call them.
"""
from __future__ import annotations

import struct
from typing import Any

from tg_x86.facts import analyze
from tg_x86.isa import Cond, Op
from tg_x86.lanes import (
    FLAG_BARRIERS,
    PARAM,
    const_lanes,
    esize,
    f32_bits,
    frame_mem,
    is_vec,
    lane_bytes,
    pbits,
    piece_step,
    scalar_of,
    uniform,
    vector_layout,
)
from tg_x86.machine import Frame, Spec, VMem, label_inst
from tg_x86.operands import Label
from tgcore.codegen.regalloc import MInst, RegisterPlan, VReg
from tgcore.dtype import DType, dtypes
from tgcore.renderer.isa import ISelContext
from tgcore.uop import PatternMatcher, UOp


def operand_layout(i: int, o: Any, bits: int) -> tuple:
    if isinstance(o, int):
        return ("i", o)
    return ("u", i, None if isinstance(o, VMem) else bits)


class Emitter(ISelContext):
    """The selection state of one kernel (see the module doc) and the emit helpers."""

    def __init__(self, uops: list[UOp], isel: PatternMatcher, remat_args: bool = False) -> None:
        super().__init__(uops, isel)
        self.facts = facts = analyze(uops, self.users)
        # gprs values hold for long (choose_plan): pointers and variables, a loop's counter and limit (and the dummy
        # slots' addresses hold_dummies holds)
        self.pressure = facts.pressure
        self.frame = Frame()
        self.loops: list[tuple[VReg, Any, Label, Label, int]] = []
        self.const_slots: dict[bytes, int] = {}
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
        # flags: (x, y, position) of the last cmp x, y (vucomis x, y); see compare and flags_live
        self.flags: tuple[UOp, UOp, int] | None = None
        self.flags_scanned, self.flags_barrier = 0, -1
        self.flag_reads: dict[int, int] = {}   # with TG_SPEC=1: renderer.flag_sources before allocation
        self.const_pieces: dict[tuple[UOp, int], VMem] = {}   # (vector constant, piece) -> its frame slot
        self.lane_cache: dict[tuple, Any] | None = {}   # lanes and halves extracted (None: inside a branch)
        self.zmm_used = False   # a line made or read a vector held in zmm pieces (``wide.sel_wide``)
        self.opmasks: dict[tuple[UOp, int], VReg] = {}   # (bool vector gate, zmm piece) -> its opmask
        # the byte dots' instruction: vpdpbusd (EVEX: AVX512-VNNI), its VEX form (AVX-VNNI) or vpmaddubsw (AVX2)
        self.dot_op = Op.VPDPBUSD
        # byte-dot constants held in registers (``bytedot.sel_held_constant``): allowed, and whether any is
        self.hold_constants = True
        self.holds_constants = False
        self.chosen_plan: RegisterPlan | None = None   # the register plan, when chosen during selection
        self.frame.nargs = facts.core_arg + 1

    # ---- helpers ----
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

    def alu2(self, op: Op, d: Any, a: Any, b: Any, bits: int) -> None:
        """Two-address ``d = a op b`` (b a register, immediate or memory)."""
        if isinstance(b, int):
            self.emit(op, [d], [a], (("d", 0, bits), ("i", b)), two=True)
        else:
            self.emit(op, [d], [a, b], (("d", 0, bits), operand_layout(1, b, bits)), two=True)

    def vop3(self, op: Op, d: Any, a: Any, b: Any, extra: tuple = ()) -> None:
        """Three-operand VEX ``d = a op b`` on xmm registers (b may be memory)."""
        self.emit(op, [d], [a, b], (("d", 0, 128), ("u", 0, 128), operand_layout(1, b, 128), *extra))

    def canon(self, d: VReg, dt: DType) -> None:
        """Sign- or zero-extend a narrow integer's low bits to 32 bits."""
        if dt.itemsize >= 4 or dt is dtypes.bool:
            return
        op = Op.MOVZX if dtypes.is_unsigned(dt) else Op.MOVSX
        self.emit(op, [d], [d], (("d", 0, 32), ("u", 0, dt.itemsize * 8)))

    def setcc(self, d: VReg, cond: Cond) -> None:
        self.emit(Op.SETCC, [d], [], (("d", 0, 8),), cond=cond)

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

    def arg_value(self, u: UOp) -> VReg:
        """A buffer pointer or variable read from its argument slot."""
        d = self.new("gpr")
        self.prog.append(self.arg_load(d, u))
        return d

    def arg_load(self, d: VReg, u: UOp) -> MInst:
        if u.op is PARAM:
            return MInst(Op.MOV, [d], [frame_mem((64, "arg", u.arg))], Spec((("d", 0, 64), ("u", 0, None))))
        slot = self.facts.var_arg[u.arg[0]]
        return MInst(Op.MOV, [d], [frame_mem((32, "arg", slot))], Spec((("d", 0, 32), ("u", 0, None))))

    # ---- emission helpers ----
    def vnew(self) -> VReg:
        return self.new("vec")

    def vemit(self, op: Op, d: Any, uses: list, bits: int, extra: tuple = ()) -> None:
        """``d = op(uses...)``, every register at ``bits``; a VMem use becomes a memory operand."""
        self.emit(op, [d], uses, vector_layout((bits, tuple(map(type, uses)))) + extra)

    def zero(self, bits: int) -> VReg:
        d = self.vnew()
        self.emit(Op.VXORPS, [d], [], (("d", 0, bits), ("d", 0, bits), ("d", 0, bits)))
        return d

    def upper(self, x: VReg) -> VReg:
        """The high 128 bits of a ymm register, as an xmm."""
        d = self.vnew()
        self.emit(Op.VEXTRACTF128, [d], [x], (("d", 0, 128), ("u", 0, 256), ("i", 1)))
        return d

    def join(self, lo: VReg, hi: VReg) -> VReg:
        d = self.vnew()
        self.emit(Op.VINSERTF128, [d], [lo, hi], (("d", 0, 256), ("u", 0, 256), ("u", 1, 128), ("i", 1)))
        return d

    def vcopy(self, x: VReg) -> VReg:
        d = self.new(x.cls)
        self.copy(d, x)
        return d

    def const_piece(self, u: UOp, p: int) -> VMem:
        hit = self.const_pieces.get((u, p))
        if hit is None:
            hit = self.const_pieces[(u, p)] = self._const_piece(u, p)
        return hit

    def _const_piece(self, u: UOp, p: int) -> VMem:
        sdt = scalar_of(u.dtype)
        per = piece_step(u.dtype)
        value = uniform(u)
        if value is not None:
            n = min(per, u.dtype.count - p * per)
            return self.const_mem(lane_bytes(value, sdt) * n, pbits(n, sdt))
        lanes = const_lanes(u)[p * per:(p + 1) * per]
        data = b"".join(lane_bytes(v, sdt) for v in lanes)
        return self.const_mem(data, pbits(len(lanes), sdt))

    def splat(self, value: Any, sdt: DType, bits: int) -> VMem:
        """A constant with every lane ``value``, as a memory operand of ``bits``."""
        n = bits // 8 // esize(sdt)
        return self.const_mem(lane_bytes(value, sdt) * n, bits)

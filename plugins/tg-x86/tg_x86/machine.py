"""Machine instructions on virtual registers, and the way from them to bytes.

In:  a list of ``MInst`` (the core allocator's instruction type) whose ``op`` is an x86 ``Op``
     (or ``"label"``), whose ``defs``/``uses`` hold ``VReg``s, physical ``Register``s, ``VMem``
     memory operands or nothing, and whose ``arg`` is a ``Spec`` saying how the operands are
     laid out in the encoded instruction; ``LoopStart``/``LoopEnd`` markers around loop bodies.
Out: ``finish()``: register allocation (``tgcore.codegen.regalloc.allocate``), a prologue
     and epilogue for the frame's ABI (``abi.py``; System V: callee-saved registers pushed, a
     16-byte aligned frame holding spill slots, constants and the incoming register arguments;
     Windows x64 also saves xmm6-xmm15 and homes its register arguments in the caller's home
     area), ``Inst``s and ``Label``s ready for ``assemble``.

Register roles (whatever the ABI; ``TARGETS``):
    gpr allocatable  rsi rdi r8 rbx rbp r12 r13 r14 r15   (callee-saved ones cost a push or a save),
                     and rax rcx rdx in a kernel that does not name them
    gpr fixed temps  rax rcx rdx   used inside one selection sequence (idiv, shifts by cl)
    gpr scratch      r9 r10 r11    fills of spilled values (a store reads at most three)
    vec allocatable  xmm0-xmm15 when no vector spills, else xmm0-xmm12 and scratch xmm13-xmm15;
                     rsp is never allocated.
    zmm allocatable  (a kernel selected at the AVX-512 level, ``wide.zmm_program``) zmm16-31 first, then zmm0-15
                     when no vector spills, else zmm0-12 and scratch zmm13-15; copies, spills and fills move
                     whole zmm registers (EVEX); values some instruction names as an xmm or ymm stay in zmm0-15.
"""
from __future__ import annotations

import functools
import operator
from collections import Counter
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import chain, compress, count, repeat
from typing import Any, NamedTuple

from tg_x86.abi import HOST, Abi
from tg_x86.isa import Cond, Inst, Op
from tg_x86.operands import (
    GPR_VIEWS,
    GPRS64,
    KREGS,
    XMMS,
    YMMS,
    ZMMS,
    Bcst,
    Label,
    Masked,
    Mem,
    Operand,
    Reg,
    gpr,
    imm,
    xmm,
    ymm,
)
from tgcore.codegen.regalloc import AllocTarget, MInst, Register, VReg, allocate, instruction_registers

GPR = {name: Register(name, i, "gpr") for i, name in enumerate(
    ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"))}
VEC = {i: Register(f"xmm{i}", i, "vec") for i in range(16)}
RAX, RCX, RDX = GPR["rax"], GPR["rcx"], GPR["rdx"]
ALLOC_GPR = [GPR[n] for n in ("rsi", "rdi", "r8", "rbx", "rbp", "r12", "r13", "r14", "r15")]
SCRATCH_GPR = [GPR[n] for n in ("r9", "r10", "r11")]
ALLOC_VEC = [VEC[i] for i in range(13)]
SCRATCH_VEC = [VEC[i] for i in (13, 14, 15)]
VEC_SLOT = 32  # bytes of a vector spill slot (a whole ymm)
ZMM = {i: Register(f"zmm{i}", i, "zmm") for i in range(32)}
LOW_ZMM = tuple(ZMM[i] for i in range(16))   # what a value named as an xmm or ymm may use (VEX encodes no more)
ZMM_SLOT = 64
KREG = {i: Register(f"k{i}", i, "k") for i in range(8)}   # opmasks (k0 masks nothing: never allocated)
_GPR_NUM = {r.name: r.index for r in GPR.values()}
_VEC_NUM = {r.name: r.index for r in (*VEC.values(), *ZMM.values())}


class Slot(NamedTuple):  # a tuple: the key of its offset in a frame's ``slot_disp``, hashed in C
    """A frame location whose offset is known only after allocation: a constant, an argument, ..."""
    kind: str     # "const" (constant slot k), "arg" (argument k of the call), "sink" (0: gated-off stores) or
    k: int        # "pointer" (slot k holding the address of frame.pointers[k])


@dataclass(eq=False, slots=True)  # never changed once made (not frozen: frozen ones take ~4x longer to build)
class VMem:
    """``[base + index*scale + disp]`` whose base/index may be virtual registers, or a ``Slot``."""
    bits: int | None
    base: Any = None
    index: Any = None
    scale: int = 1
    disp: int = 0
    slot: Slot | None = None

    @property
    def regs(self) -> tuple[Any, ...]:
        base, index = self.base, self.index
        if index is None:
            return () if base is None else (base,)
        return (index,) if base is None else (base, index)

    def with_regs(self, mapping: dict) -> VMem:
        base, index = self.base, self.index
        new_base = mapping.get(base, base) if type(base) is VReg else base  # only virtual registers are mapped
        new_index = mapping.get(index, index) if type(index) is VReg else index
        if new_base is base and new_index is index:
            return self  # nothing to substitute (e.g. rsp-based or a frame slot): never changed, so shared
        return VMem(self.bits, new_base, new_index, self.scale, self.disp, self.slot)

    def sized(self, bits: int | None) -> VMem:
        return VMem(bits, self.base, self.index, self.scale, self.disp, self.slot)


# layout items: ("d", i, bits) defs[i] as a register of ``bits``; ("u", i, bits) uses[i] (a register
# at ``bits``, or a memory operand when bits is None); ("i", value) an immediate; ("l", label); AVX-512 opmasks:
# ("dk", i, bits, j, zero) defs[i] under the opmask uses[j] (zeroing or merging), ("uk", i, None, j) the memory
# operand uses[i] under the opmask uses[j] (a masked store); an opmask register alone is a register of 64 bits;
# ("ub", i, count) the memory operand uses[i], one element read into each of ``count`` lanes (an EVEX broadcast)
@dataclass(slots=True)  # never changed once made (not frozen: one is built per instruction)
class Spec:
    layout: tuple[tuple, ...]
    two_address: bool = False
    cond: Cond | None = None


def minst(op: Op, defs: list, uses: list, layout: tuple, two: bool = False, cond: Cond | None = None) -> MInst:
    return MInst(op, list(defs), list(uses), Spec(tuple(layout), two, cond))


def label_inst(label: Label) -> MInst:
    return MInst("label", [], [], label)


def _reg(r: Register, bits: int) -> Reg:
    if r.cls == "gpr":
        return gpr(r.index, bits)
    if r.cls == "k":
        return KREGS[r.index]
    if bits == 512:
        return ZMMS[r.index]
    return ymm(r.index) if bits == 256 else xmm(r.index)


# the moves of copies and of spill code, by register class: (op, bits, layout). A spill slot is addressed as
# ``[rsp + offset]``; the encoder of spill code (``_move_code``) looks their bytes up by the same keys as any other
# instruction's, so these tables say what both ways encode
_COPY_MOVE = {"gpr": (Op.MOV, 64, (("d", 0, 64), ("u", 0, 64))),
              "vec": (Op.VMOVAPS, 256, (("d", 0, 256), ("u", 0, 256))),
              "zmm": (Op.VMOVUPS, 512, (("d", 0, 512), ("u", 0, 512))),
              "k": (Op.KMOVW, 16, (("d", 0, 64), ("u", 0, 64)))}
_FILL_MOVE = {"gpr": (Op.MOV, 64, (("d", 0, 64), ("u", 0, None))),
              "vec": (Op.VMOVUPS, 256, (("d", 0, 256), ("u", 0, None))),
              "zmm": (Op.VMOVUPS, 512, (("d", 0, 512), ("u", 0, None))),
              "k": (Op.KMOVW, 16, (("d", 0, 64), ("u", 0, None)))}
_SPILL_MOVE = {"gpr": (Op.MOV, 64, (("u", 0, None), ("u", 1, 64))),
               "vec": (Op.VMOVUPS, 256, (("u", 0, None), ("u", 1, 256))),
               "zmm": (Op.VMOVUPS, 512, (("u", 0, None), ("u", 1, 512))),
               "k": (Op.KMOVW, 16, (("u", 0, None), ("u", 1, 64)))}
_SLOT_SIZE = {"gpr": 8, "vec": VEC_SLOT, "zmm": ZMM_SLOT, "k": 8}


def _copy(dst: Register, src: Register) -> MInst:
    op, _, layout = _COPY_MOVE[dst.cls]
    return minst(op, [dst], [src], layout)


def _spill(reg: Register, off: int) -> MInst:
    op, bits, layout = _SPILL_MOVE[reg.cls]
    return minst(op, [], [VMem(bits, GPR["rsp"], disp=off), reg], layout)


def _fill(reg: Register, off: int) -> MInst:
    op, bits, layout = _FILL_MOVE[reg.cls]
    return minst(op, [reg], [VMem(bits, GPR["rsp"], disp=off)], layout)


TARGET = AllocTarget(
    registers={"gpr": ALLOC_GPR, "vec": ALLOC_VEC},
    scratch={"gpr": SCRATCH_GPR, "vec": SCRATCH_VEC},
    two_address="two_address",  # Spec.two_address (only a Spec has one)
    copy=_copy, spill=_spill, fill=_fill,
    slot_size=lambda cls: 8 if cls == "gpr" else VEC_SLOT,
)
_ZMM_SCRATCH = [ZMM[i] for i in (13, 14, 15)]
FIXED_TEMPS = frozenset((RAX, RCX, RDX))
ALL_VEC = [VEC[i] for i in range(16)]


def _target(gprs: list[Register], vecs: list[Register]) -> AllocTarget:
    return AllocTarget(registers={"gpr": gprs, "vec": vecs}, scratch=TARGET.scratch, two_address=TARGET.two_address,
                       copy=_copy, spill=_spill, fill=_fill, slot_size=TARGET.slot_size)


# A kernel whose selection named none of the fixed temps (no division, shift by a variable, ...) may allocate them
# too: 12 gprs instead of 9 (a register-tiled matmul otherwise reloads its row offsets from the stack every step);
# last in the list, so kernels that need no more than 9 keep their registers. And a kernel whose vectors all fit
# in 16 registers needs no vector scratch (only fills of spilled vectors use it): the renderer plans with all 16
# first and with 13 + 3 scratch when that spills a vector (``vector_targets``)
TARGETS = {(all_gprs, all_vecs): TARGET if not (all_gprs or all_vecs) else
           _target([*ALLOC_GPR, RAX, RCX, RDX] if all_gprs else ALLOC_GPR, ALL_VEC if all_vecs else ALLOC_VEC)
           for all_gprs in (False, True) for all_vecs in (False, True)}


def _zmm_target(gprs: list[Register], zmms: list[Register]) -> AllocTarget:
    return AllocTarget(registers={"gpr": gprs, "zmm": zmms, "k": [KREG[i] for i in range(1, 7)]},
                       scratch={"gpr": SCRATCH_GPR, "zmm": _ZMM_SCRATCH, "k": [KREG[7]]},
                       two_address=TARGET.two_address, copy=_copy, spill=_spill, fill=_fill,
                       slot_size=_SLOT_SIZE.__getitem__)


# the targets of a kernel selected at the AVX-512 level (``wide.zmm_program``), as ``TARGETS``: zmm16-31 come first,
# so the values pinned to zmm0-15 (named as an xmm or ymm somewhere) find them free
_HIGH_ZMM = [ZMM[i] for i in range(16, 32)]
ZMM_TARGETS = {(all_gprs, all_vecs): _zmm_target([*ALLOC_GPR, RAX, RCX, RDX] if all_gprs else ALLOC_GPR,
                                                 _HIGH_ZMM + [ZMM[i] for i in range(16 if all_vecs else 13)])
               for all_gprs in (False, True) for all_vecs in (False, True)}


def vector_targets(regs: list[tuple[list, list]], zmm: bool = False) -> tuple[AllocTarget, AllocTarget]:
    """(the target to plan with first: all 16 vector registers allocatable; the one to plan with when that spills a
    vector: 13 + 3 scratch), both with 12 gprs when no instruction reads or writes rax, rcx or rdx (``regs``: each
    instruction's registers, as ``instruction_registers`` gives them), else 9."""
    named = FIXED_TEMPS.intersection
    all_gprs = not any(named(d) or named(u) for d, u in regs)
    targets = ZMM_TARGETS if zmm else TARGETS
    return targets[(all_gprs, True)], targets[(all_gprs, False)]


@dataclass
class Frame:
    """What the prologue must set up: constants (16 or 32 bytes each), the number of arguments, and the calling
    convention they arrive by."""
    consts: list[bytes] = field(default_factory=list)
    nargs: int = 0
    sink: int = 0   # bytes of Slot("sink", 0): where gated-off stores write; never written by the prologue, never read
    pointers: list[Slot] = field(default_factory=list)  # Slot("pointer", k) holds the address of slot pointers[k]
    abi: Abi = HOST


def _const_offsets(sizes: tuple[int, ...]) -> list[int]:
    """Byte offset of each constant (of these sizes) inside the constant area: the ones of 32 bytes or a multiple
    of 32 first, so all stay aligned (the gated loads' zero slot may be wider than 32)."""
    out, pos = [0] * len(sizes), 0
    for k, n in enumerate(sizes):
        if n != 16:
            out[k], pos = pos, pos + n
    for k, n in enumerate(sizes):
        if n == 16:
            out[k], pos = pos, pos + 16
    return out


def finish(program: list, frame: Frame, allocation: tuple[list, int] | None = None) -> list[Inst | Label]:
    """Allocate registers (unless ``allocation`` is given), add prologue and epilogue, lower to ``Inst``s."""
    allocated, spill_bytes = allocation or allocate(program, TARGET)
    gprs, vecs = _registers_named(allocated)
    lay = _frame_layout(frame, spill_bytes, gprs, _with_scratch(vecs, not vecs.isdisjoint(_SCRATCH_VEC_NUMS)))
    out: list[Inst | Label] = list(_prologue(lay))
    for disp, data in lay.consts:
        out += _const_stores(disp, data)
    out += _pointer_stores(lay.pointers)
    _lower(allocated, lay.slot_disp, out)
    return out + _epilogue(lay)


class Layout(NamedTuple):
    """A kernel's frame (offsets from rsp after the prologue)."""
    saved: tuple[str, ...]                  # callee-saved gprs pushed, in push order
    saved_vec: tuple[tuple[int, int], ...]  # (xmm number, offset) of each callee-saved xmm the body uses
    size: int                               # bytes rsp goes down by after the pushes
    homes: tuple[tuple[str, int], ...]      # (argument register, offset) where the prologue stores it
    consts: list[tuple[int, bytes]]         # (offset, bytes) of each constant
    slot_disp: dict[tuple[str, int], int]   # the offset of each ``Slot``
    pointers: tuple[tuple[int, int], ...] = ()  # (offset, offset it points at) of each pointer slot


def _frame_layout(frame: Frame, spill_bytes: int, used: AbstractSet[int], used_vec: AbstractSet[int] = frozenset()
                  ) -> Layout:
    """The frame of a body with ``spill_bytes`` of spill slots naming the gprs numbered ``used`` and the xmm
    registers numbered ``used_vec`` (only read when the ABI preserves some)."""
    abi = frame.abi
    saved = tuple(compress(abi.callee_saved, map(used.__contains__, map(_GPR_NUM.__getitem__, abi.callee_saved))))
    saved_vec_nums = tuple(compress(abi.callee_saved_vec, map(used_vec.__contains__, abi.callee_saved_vec)))
    saved_vec, size, homes, slot_disp, const_disp, pointers = _frame_shape(
        abi.arg_regs, abi.home_area, frame.nargs, tuple(map(len, frame.consts)), spill_bytes, len(saved),
        saved_vec_nums, frame.sink, tuple(frame.pointers))
    return Layout(saved, saved_vec, size, homes, list(zip(const_disp, frame.consts, strict=True)), slot_disp,
                  pointers)


# kernels share frames; the slot_disp dict it returns is shared too: read only, never changed
@functools.lru_cache(maxsize=1024)
def _frame_shape(arg_regs: tuple[str, ...], home_area: int, nargs: int, const_sizes: tuple[int, ...],
                 spill_bytes: int, pushes: int, saved_vec_nums: tuple[int, ...], sink: int,
                 pointer_targets: tuple[Slot, ...]) -> tuple[tuple[tuple[int, int], ...], int,
                                                            tuple[tuple[str, int], ...], dict, tuple[int, ...],
                                                            tuple[tuple[int, int], ...]]:
    """The numbers of a frame for an ABI passing arguments in ``arg_regs`` (``home_area``: see ``Abi``), after
    ``pushes`` callee-saved gprs, saving the xmm registers ``saved_vec_nums``, with a ``sink`` of that many bytes and
    pointer slots holding the addresses of ``pointer_targets``: ``Layout``'s saved_vec, size, homes and slot_disp,
    the offset of each constant, and ``Layout.pointers``."""
    spill_bytes = -(-spill_bytes // 16) * 16
    const_base = -(-spill_bytes // 32) * 32
    const_off = _const_offsets(const_sizes)
    sink_base = const_base + sum(const_sizes)  # 16-aligned: constants are 16 or 32*k bytes
    pointer_base = sink_base + sink             # the sink is 32*k bytes
    vec_base = pointer_base + -(-8 * len(pointer_targets) // 16) * 16
    saved_vec = tuple((n, vec_base + 16 * k) for k, n in enumerate(saved_vec_nums))
    home_base = vec_base + 16 * len(saved_vec)
    nreg = min(nargs, len(arg_regs))
    # System V: the register arguments are homed in this frame; Windows: in the caller's home area
    size = home_base + (0 if home_area else 8 * nreg)
    # at entry rsp = 8 mod 16 (the return address); after the pushes and the frame it is 0 mod 16
    if (size + 8 * pushes + 8) % 16:
        size += 8
    arg_base = size + 8 * pushes + 8  # the caller's part of the stack, above the return address
    slot_disp = {("const", k): const_base + off for k, off in enumerate(const_off)}
    slot_disp[("sink", 0)] = sink_base
    if home_area:  # every argument k at arg_base + 8k: the first ones homed in the caller's area
        slot_disp.update((("arg", k), arg_base + 8 * k) for k in range(nargs))
    else:  # the homes in the frame, then the stack arguments right above the return address
        slot_disp.update((("arg", k), home_base + 8 * k if k < nreg else arg_base + 8 * (k - nreg))
                         for k in range(nargs))
    homes = tuple((arg_regs[k], slot_disp[("arg", k)]) for k in range(nreg))
    slot_disp.update((("pointer", k), pointer_base + 8 * k) for k in range(len(pointer_targets)))
    pointers = tuple((pointer_base + 8 * k, slot_disp[t]) for k, t in enumerate(pointer_targets))
    return saved_vec, size, homes, slot_disp, tuple(const_base + off for off in const_off), pointers


def _prologue(lay: Layout) -> list[Inst]:
    """Push the callee-saved gprs, make the frame, save the callee-saved xmm registers, home the argument
    registers."""
    return [make(*args) for make, args in _prologue_steps(lay.saved, lay.saved_vec, lay.size, lay.homes)]


def _prologue_steps(saved: tuple[str, ...], saved_vec: tuple[tuple[int, int], ...], size: int,
                    homes: tuple[tuple[str, int], ...]) -> list[tuple[Callable[..., Inst], tuple]]:
    """``_prologue``'s instructions as (maker, its arguments)."""
    steps: list[tuple[Callable[..., Inst], tuple]] = [(_push, (name,)) for name in saved]
    if size:
        steps.append((_frame_down, (size,)))
    steps += [(_save_xmm, nums) for nums in saved_vec]
    return steps + [(_home, reg_off) for reg_off in homes]


def _push(name: str) -> Inst:
    return Inst.of(Op.PUSH, (GPRS64[GPR[name].index],), None, None)


def _pop(name: str) -> Inst:
    return Inst.of(Op.POP, (GPRS64[GPR[name].index],), None, None)


def _frame_down(size: int) -> Inst:
    return Inst.of(Op.SUB, (GPRS64[4], imm(size)), None, None)


def _frame_up(size: int) -> Inst:
    return Inst.of(Op.ADD, (GPRS64[4], imm(size)), None, None)


def _save_xmm(num: int, off: int) -> Inst:
    return Inst.of(Op.VMOVUPS, (Mem.of(128, GPRS64[4], None, 1, off), XMMS[num]), None, None)


def _restore_xmm(num: int, off: int) -> Inst:
    return Inst.of(Op.VMOVUPS, (XMMS[num], Mem.of(128, GPRS64[4], None, 1, off)), None, None)


def _home(reg: str, off: int) -> Inst:
    return Inst.of(Op.MOV, (Mem.of(64, GPRS64[4], None, 1, off), GPRS64[GPR[reg].index]), None, None)


def _const_stores(disp: int, data: bytes) -> list[Inst]:
    """Store a constant into the frame at ``disp``, 4 bytes at a time."""
    return [Inst.of(Op.MOV, ops, None, None) for ops in _const_store_operands(disp, data)]


def _const_store_operands(disp: int, data: bytes) -> list[tuple[Operand, ...]]:
    rsp = GPRS64[4]
    return [(Mem.of(32, rsp, None, 1, disp + off), imm(int.from_bytes(data[off:off + 4], "little")))
            for off in range(0, len(data), 4)]


def _pointer_stores(pointers: tuple[tuple[int, int], ...]) -> list[Inst]:
    """Store the address of a frame slot into each pointer slot (rax is free: no argument arrives in it)."""
    rsp, rax = GPRS64[4], GPRS64[0]
    out = []
    for disp, target in pointers:
        out.append(Inst.of(Op.LEA, (rax, Mem.of(None, rsp, None, 1, target)), None, None))
        out.append(Inst.of(Op.MOV, (Mem.of(64, rsp, None, 1, disp), rax), None, None))
    return out


def _epilogue(lay: Layout) -> list[Inst]:
    return [make(*args) for make, args in _epilogue_steps(lay.saved, lay.saved_vec, lay.size)]


def _epilogue_steps(saved: tuple[str, ...], saved_vec: tuple[tuple[int, int], ...], size: int
                    ) -> list[tuple[Callable[..., Inst], tuple]]:
    """``_epilogue``'s instructions as (maker, its arguments): ``_prologue``'s undone, then return."""
    steps: list[tuple[Callable[..., Inst], tuple]] = [(_restore_xmm, nums) for nums in saved_vec]
    if size:
        steps.append((_frame_up, (size,)))
    steps += [(_pop, (name,)) for name in reversed(saved)]
    return steps + _RETURN


_RETURN: list[tuple[Callable[..., Inst], tuple]] = [(Inst, (Op.VZEROUPPER,)), (Inst, (Op.RET,))]


def _registers_named(allocated: list) -> tuple[set[int], set[int]]:
    """Numbers of the gprs (registers, memory bases and indices) and of the xmm/ymm registers the allocated program
    names."""
    operands: list = []
    for ins in allocated:
        if type(ins) is MInst:
            operands += ins.defs
            operands += ins.uses
    gprs: set[int] = set()
    vecs: set[int] = set()
    for o in operands:
        t = type(o)
        if t is Register:
            if o.cls != "k":
                (gprs if o.cls == "gpr" else vecs).add(o.index)
        elif t is VMem:
            if o.base is not None:
                gprs.add(o.base.index)
            if o.index is not None:
                gprs.add(o.index.index)
    return gprs, vecs


_SCRATCH_VEC_NUMS = frozenset(r.index for r in SCRATCH_VEC)


def _with_scratch(vecs: set[int], vectors_spilled: bool) -> set[int]:
    """The xmm registers a body uses: fills of spilled vectors may use any scratch one, so all of them count."""
    return vecs | _SCRATCH_VEC_NUMS if vectors_spilled else vecs


# a register operand by (register class, layout bits): the view of each register number
_VIEWS: dict[tuple[str, int], tuple[Any, ...]] = {("gpr", bits): views for bits, views in GPR_VIEWS.items()}
_VIEWS.update({("vec", bits): YMMS if bits == 256 else XMMS for bits in (8, 16, 32, 64, 128, 256)})
# a zmm-class register at a narrower width: registers 0-15 only (``wide.zmm_program`` pins the others)
_VIEWS.update({("zmm", bits): ZMMS if bits == 512 else _VIEWS[("vec", bits)] + (None,) * 16
               for bits in (8, 16, 32, 64, 128, 256, 512)})
_VIEWS[("k", 64)] = KREGS


def _memory(o: VMem, slot_disp: dict[tuple[str, int], int]) -> Mem:
    """An allocated memory operand's ``Mem``: a ``Slot`` at its frame offset from rsp, else its (now physical) base
    and index registers."""
    if o.slot is not None:
        return Mem.of(o.bits, GPRS64[4], None, 1, slot_disp[o.slot] + o.disp)
    base, index = o.base, o.index
    return Mem.of(o.bits, GPRS64[base.index] if base is not None else None,
                  GPRS64[index.index] if index is not None else None, o.scale if index is not None else 1, o.disp)


def _lower(allocated: list, slot_disp: dict[tuple[str, int], int], out: list) -> None:
    """Append the ``Inst`` (or ``Label``) of every allocated instruction to ``out``; ``slot_disp`` is the frame
    offset of each ``Slot`` (constants and arguments)."""
    views, make_imm, make_inst = _VIEWS, imm, Inst.of
    for ins in allocated:
        if type(ins) is not MInst:  # loop markers
            continue
        spec = ins.arg
        if ins.op == "label":
            out.append(spec)
            continue
        if spec.two_address:
            assert ins.defs[0] is ins.uses[0] or ins.defs[0] == ins.uses[0], f"two-address violated in {ins}"
        ops: list[Operand] = []
        label = None
        for item in spec.layout:
            kind = item[0]
            if kind == "u" or kind == "d":
                o = (ins.uses if kind == "u" else ins.defs)[item[1]]
                if type(o) is VMem:
                    ops.append(_memory(o, slot_disp))
                else:
                    ops.append(views[(o.cls, item[2])][o.index])
            elif kind == "i":
                ops.append(make_imm(item[1]))
            elif kind == "ub":  # a memory element broadcast
                ops.append(Bcst(_memory(ins.uses[item[1]], slot_disp), item[2]))
            elif kind == "dk" or kind == "uk":  # under an opmask
                o = (ins.uses if kind == "uk" else ins.defs)[item[1]]
                if type(o) is VMem:
                    target: Reg | Mem = _memory(o, slot_disp)
                else:
                    target = views[(o.cls, item[2])][o.index]
                ops.append(Masked(target, KREGS[ins.uses[item[3]].index], kind == "dk" and item[4]))
            else:
                label = item[1]
                ops.append(label)
        out.append(make_inst(ins.op, tuple(ops), spec.cond, label))


def _register_facts(program: list, regs: list[tuple[list, list]] | None = None
                    ) -> tuple[list[tuple[list, list]], Counter, Counter]:
    """(``instruction_registers(program)``: for each instruction the registers it reads, each once, and the ones
    it writes; how many instructions read each register; how many write it). ``regs``: the first when the caller
    has it."""
    if regs is None:
        regs = instruction_registers(program)
    reads = Counter(chain.from_iterable(map(operator.itemgetter(0), regs)))  # counted in C
    writes = Counter(chain.from_iterable(map(operator.itemgetter(1), regs)))
    return regs, reads, writes


def _retarget(program: list, regs: list[tuple[list, list]], reads: dict, writes: dict
              ) -> tuple[list, list[tuple[list, list]]]:
    """``t = op(...); ...; copy acc <- t`` with ``t`` used nowhere else and ``acc`` not mentioned in between: the op
    writes ``acc`` directly and the copy goes (accumulator updates, one per piece). The program and its registers."""
    out, out_regs = program, regs
    drop: list[int] = []
    ops = map(getattr, program, repeat("op"), repeat(None))
    for i in compress(count(), map(operator.eq, ops, repeat("copy"))):
        ins = program[i]
        t, acc = ins.uses[0], ins.defs[0]
        if type(t) is not VReg or type(acc) is not VReg or reads[t] + writes[t] != 2 or t.cls != acc.cls:
            continue
        if t.allowed is not None and acc.allowed is None and t.cls == "zmm":
            continue  # t is named as an xmm or ymm (zmm0-15 only): its op may not write acc, which may be zmm16-31
        j = _def_to_retarget(program, regs, i, t, acc)
        if j is None:
            continue
        a = out[j]
        if a.arg.two_address and any(_mentions(o, acc) for o in a.uses[1:]):
            continue  # two-address: acc would get the first source before the op reads acc as another
        if out is program:  # the first change: the lists are copied
            out, out_regs = list(program), list(regs)
        out[j] = MInst(a.op, [acc], a.uses, a.arg)
        out_regs[j] = (out_regs[j][0], [acc])
        drop.append(i)
    for i in reversed(drop):
        del out[i]
        del out_regs[i]
    return out, out_regs


def _def_to_retarget(program: list, regs: list[tuple[list, list]], i: int, t: VReg, acc: VReg) -> int | None:
    """Looking back from the copy ``acc <- t`` at ``i``: where ``t`` is written, by an instruction writing only it,
    when no label or loop boundary and no mention of ``acc`` come in between (None otherwise). Short: the op is
    usually right before its copy."""
    for j in range(i - 1, -1, -1):
        ins = program[j]
        if type(ins) is not MInst or ins.op == "label":
            return None
        read, written = regs[j]
        if t in written:
            return j if len(ins.defs) == 1 and type(ins.arg) is Spec else None
        if acc in read or acc in written:
            return None
    return None


def cleanup(program: list, regs: list[tuple[list, list]] | None = None) -> tuple[list, list[tuple[list, list]]]:
    """Drop instructions whose only effect is writing virtual registers nobody reads (``_live_mask``: lanes nobody
    extracted...), then retarget copies (``_retarget``), reading each instruction's registers once: the program and its
    ``instruction_registers`` (for ``plan_registers``). ``regs``: ``instruction_registers(program)`` when the caller
    has them."""
    regs, reads, writes = _register_facts(program, regs)
    keep = _live_mask(program, regs, reads, writes)
    if keep is not None:
        program, regs = list(compress(program, keep)), list(compress(regs, keep))
    return _retarget(program, regs, reads, writes)


def _live_mask(program: list, regs: list[tuple[list, list]], reads: dict, writes: dict) -> list[bool] | None:
    """Which instructions stay (None: all); ``reads`` and ``writes`` are updated for the ones that go."""
    unread = {v for v in writes.keys() - reads.keys() if type(v) is VReg}  # written, never read
    if not unread:
        return None
    keep = [True] * len(program)
    # dead: only writes virtual registers nobody reads (a label, a loop marker or a store is never dead). From the
    # back, visiting only the instructions writing registers all unread: the test runs in C, lazily, so it sees the
    # registers that became unread after it
    writers = list(compress(count(), map(operator.itemgetter(1), regs)))[::-1]
    all_unread = map(unread.issuperset, map(operator.itemgetter(1), map(regs.__getitem__, writers)))
    for i in compress(writers, all_unread):
        read, written = regs[i]
        ins = program[i]
        op = ins.op  # checked only now: writes_mem is a property
        if len(written) != len(ins.defs) or op == "label" or (
                op != "copy" and op.writes_mem and ins.uses and type(ins.uses[0]) is VMem):
            continue
        keep[i] = False
        for r in read:
            reads[r] -= 1
            if not reads[r] and type(r) is VReg:
                unread.add(r)
        for r in written:
            writes[r] -= 1
    return keep


def _mentions(o: Any, r: VReg) -> bool:
    return o is r or (isinstance(o, VMem) and r in o.regs)


Emit = Callable[[MInst], None]

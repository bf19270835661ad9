"""From a register plan to bytes without building the program: ``encode_plan`` looks each instruction's bytes up by
its operands' keys (registers through the plan's assignment) and encodes an instruction the first time it is seen;
the memo tables behind it (``clear_encoding_caches``) and the code of frames, spills and fills. ``machine.finish``
followed by ``assembler.assemble`` gives the same bytes the slow way (the tests compare the two)."""
from __future__ import annotations

import functools
import operator
import struct
from collections.abc import Callable
from itertools import repeat
from typing import Any

from tg_x86 import assembler, encoder, operands
from tg_x86.isa import Inst, Op
from tg_x86.machine import (
    _COPY_MOVE,
    _FILL_MOVE,
    _GPR_NUM,
    _SCRATCH_VEC_NUMS,
    _SPILL_MOVE,
    _VEC_NUM,
    _VIEWS,
    GPR,
    KREG,
    TARGETS,
    VEC,
    ZMM,
    ZMM_SLOT,
    ZMM_TARGETS,
    Frame,
    Spec,
    VMem,
    _epilogue_steps,
    _frame_layout,
    _frame_shape,
    _pointer_stores,
    _prologue_steps,
    _with_scratch,
)
from tg_x86.operands import KREGS, Bcst, Label, Masked, Operand, Reg, address, imm
from tgcore.codegen.regalloc import MInst, Register, RegisterPlan, VReg


def encode_plan(plan: RegisterPlan, frame: Frame) -> bytes:
    """``assemble(finish(rewritten, frame, ...)).code`` for the plan's rewritten program, without building it or
    its ``Inst``s: each instruction's bytes are looked up by its operands' keys (registers through the plan's
    assignment) and encoded the first time only (copies and instructions with spill code through
    ``plan.rewrite_one``); only jumps to labels become ``Inst``s, for ``assembler.resolve_jumps``."""
    # spill code is looked up by what it depends on, for the scratch registers and spill builders of TARGET (which
    # every target of TARGETS shares)
    assert plan.target in TARGETS.values() or plan.target in ZMM_TARGETS.values(), \
        "encode_plan encodes plans made for machine.TARGETS or ZMM_TARGETS"
    # the assignment (as plan.assignment() gives it) and each virtual register's operand key, made in C
    by_vreg = plan.by_vreg
    vregs = list(by_vreg)
    assigned = list(map(_ASSIGNED, by_vreg.values()))
    reg_of: dict[VReg, Register | None] = dict(zip(vregs, assigned, strict=True))
    names: list[Any] = list(map(getattr, assigned, repeat("name"), repeat(None)))  # None: spilled
    key_of: dict[VReg, Any] = dict(zip(vregs, map(_CODE_BY_NAME.get, names), strict=True))
    spilled = [iv.vreg for iv in plan.spilled]
    for iv in plan.spilled:  # what its spill code depends on (each spilled register has a slot of its own)
        key_of[iv.vreg] = (iv.slot, iv.vreg.cls, iv.vreg.allowed)
    # the registers the rewritten program names, as far as the prologue cares (callee-saved gprs are never scratch)
    names += map(getattr, plan.physical, repeat("name"))
    used, vecs = set(map(_GPR_NUM.get, names)), set(map(_VEC_NUM.get, names))
    used.discard(None)
    vecs.discard(None)
    # as finish() infers it from the registers named (a vector scratch register named: maybe vectors spilled)
    scratch = any(v.cls != "gpr" for v in spilled) or not vecs.isdisjoint(_SCRATCH_VEC_NUMS)
    lay = _frame_layout(frame, plan.frame, used, _with_scratch(vecs, scratch))  # type: ignore[arg-type]
    if len(_ENCODED) >= _ENCODED_LIMIT:  # bounded (a long-lived process compiles many kernels, and the ones it
        _ENCODED.clear()                 # compiles now are the ones worth keeping); checked once per kernel
        _OPERAND_PLANS.clear()
    codes: list[bytes | None] = []
    jumps: dict[int, Inst] = {}
    at: dict[Label, int] = {}
    _encode_body(plan, reg_of, key_of, set(spilled), lay.slot_disp, codes, jumps, at)
    head = _prologue_code(lay.saved, lay.saved_vec, lay.size, lay.homes)
    stores = [_const_stores_code(disp, data) for disp, data in lay.consts]
    if lay.pointers:
        stores.append(b"".join(map(encoder.encode, _pointer_stores(lay.pointers))))
    assembler.resolve_jumps(codes, jumps, at)
    return b"".join((head, *stores, *codes, _epilogue_code(lay.saved, lay.saved_vec, lay.size)))  # type: ignore[arg-type]


_ASSIGNED = operator.attrgetter("reg")
_JUMPS = frozenset((Op.JMP, Op.JCC))


# The prologue and the epilogue depend on a few numbers only, and kernels share them: each is encoded once, from
# the code of its instructions, which recur from kernel to kernel more often still.
@functools.lru_cache(maxsize=1024)
def _prologue_code(saved: tuple[str, ...], saved_vec: tuple[tuple[int, int], ...], size: int,
                   homes: tuple[tuple[str, int], ...]) -> bytes:
    return b"".join([_frame_inst_code(*step) for step in _prologue_steps(saved, saved_vec, size, homes)])


@functools.lru_cache(maxsize=1024)
def _epilogue_code(saved: tuple[str, ...], saved_vec: tuple[tuple[int, int], ...], size: int) -> bytes:
    return b"".join([_frame_inst_code(*step) for step in _epilogue_steps(saved, saved_vec, size)])


@functools.lru_cache(maxsize=1024)
def _frame_inst_code(make: Callable[..., Inst], args: tuple) -> bytes:
    """The code of the prologue or epilogue instruction ``make(*args)``."""
    return encoder.encode(make(*args))


def _const_stores_code(disp: int, data: bytes) -> bytes:
    """The code of ``_const_stores(disp, data)``: each store is a head that depends on the offset only, then its
    immediate, which is 4 bytes of the constant as they are (little-endian)."""
    heads, words = _store32_heads(disp, len(data))
    return b"".join(map(operator.add, heads, words.unpack(data)))


@functools.lru_cache(maxsize=1024)
def _store32_heads(disp: int, size: int) -> tuple[tuple[bytes, ...], struct.Struct]:
    """The heads of the stores of a ``size``-byte constant at ``disp``, and the split of it into 4-byte words."""
    return tuple(_store32_head(disp + off) for off in range(0, size, 4)), struct.Struct(f"{size // 4 * '4s'}")


@functools.lru_cache(maxsize=1024)  # frame offsets repeat from kernel to kernel
def _store32_head(disp: int) -> bytes:
    """``mov dword ptr [rsp + disp], imm32`` without its immediate (the last 4 bytes): C7 /0, the only form
    storing an immediate to an m32, then the address (no REX: rsp is below r8)."""
    _, modrm, rest = address(4, None, 1, disp)
    return bytes((0xC7, modrm)) + rest


def clear_encoding_caches() -> None:
    """Forget every memo table of the encoding (the forms chosen by operand shape, the compiled form encoders,
    interned memory operands, frame code, the heads of spill code, the bytes of whole instructions and the operand
    plans of their layouts): the state of a fresh process. For benchmarks of first compiles; nothing else needs it
    (every table is bounded)."""
    encoder._form_cache.clear()
    encoder._ENCODERS.clear()
    _ENCODED.clear()
    _OPERAND_PLANS.clear()
    _FILL_HEADS.clear()
    _SPILL_HEADS.clear()
    operands.MEMS.clear()
    for cached in (_frame_shape, _prologue_code, _epilogue_code, _frame_inst_code, _store32_heads,
                   _store32_head, _rsp_address):
        cached.cache_clear()


def _encode_body(plan: RegisterPlan, reg_of: dict, key_of: dict, spilled: set[VReg],
                 slot_disp: dict[tuple[str, int], int], codes: list[bytes | None], jumps: dict[int, Inst],
                 at: dict[Label, int]) -> None:
    """Append the code of each instruction of ``plan.program`` to ``codes`` (None for a jump to a label, kept in
    ``jumps``) and each label's instruction number to ``at``. An instruction's bytes depend only on its op, its
    ``Spec`` and its operands' keys (``key_of``: each virtual register's; ``_operand_keys``): they are looked up by
    those (``_ENCODED``) and encoded the first time only. Copies and the instructions naming ``spilled`` registers are
    encoded as ``plan.rewrite_one`` rewrites them (with the same keys: a spilled register's key says how)."""
    encoded, key_get = _ENCODED, key_of.get
    for i, ins in enumerate(plan.program):
        spec = getattr(ins, "arg", None)  # None for a loop marker or a copy, the Label of a label
        if type(spec) is not Spec:
            if type(spec) is Label:
                if spec in at:
                    raise encoder.EncodeError(f"label {spec!r} is defined twice")
                at[spec] = len(codes)
            elif type(ins) is MInst:  # a copy
                operand_keys = list(map(key_get, ins.defs + ins.uses))
                if None in operand_keys:
                    operand_keys = _operand_keys(ins.defs + ins.uses, operand_keys, key_of, slot_disp)
                key = ("copy", *operand_keys)
                code = encoded.get(key)
                codes.append(code if code is not None else _encode_rewritten(plan, i, reg_of, slot_disp, key))
            continue
        defs = ins.defs
        if not defs and ins.op in _JUMPS:  # encoded by assembler.resolve_jumps, which knows the displacement
            ((_, label),) = spec.layout  # a jump's one operand is its label
            jumps[len(codes)] = Inst.of(ins.op, (label,), spec.cond, label)
            codes.append(None)
            continue
        operand_keys = list(map(key_get, defs + ins.uses))
        if None in operand_keys:  # memory operands and physical registers
            operand_keys = _operand_keys(defs + ins.uses, operand_keys, key_of, slot_disp)
        key = (ins.op, spec.cond, spec.two_address, spec.layout, len(defs), *operand_keys)
        code = encoded.get(key)
        if code is None:  # whether it has spill code is asked on a miss only, not of every instruction
            if spilled and _names_any(plan.regs[i], spilled):
                code = _encode_rewritten(plan, i, reg_of, slot_disp, key)
            else:
                code = _encode_new(key, ins)
        codes.append(code)


def _names_any(regs: tuple[list, list], registers: set[VReg]) -> bool:
    """Whether an instruction reading and writing ``regs`` (as ``instruction_registers`` gives them) names one of
    ``registers``."""
    read, written = regs
    return not (registers.isdisjoint(read) and registers.isdisjoint(written))


def _encode_rewritten(plan: RegisterPlan, i: int, reg_of: dict, slot_disp: dict[tuple[str, int], int], key: tuple
                      ) -> bytes:
    """The code of what ``plan.rewrite_one`` makes of instruction ``i`` (a copy, or an instruction with its spill
    code), remembered by ``key``. Made from ``plan.spill_registers`` without building the rewritten instructions:
    each part (fill, the instruction on physical registers, spill store) is looked up by its own key, as any other
    instruction is, and encoded the first time only."""
    on, fills, stores = plan.spill_registers(i, reg_of)
    ins = plan.program[i]
    code_of = dict(zip(on, map(_CODE_BY_NAME.__getitem__, map(_NAME, on.values())), strict=True))
    parts = [_move_code(True, reg, off) for reg, off in fills]
    if ins.op == "copy":
        dst, src = code_of[ins.defs[0]], code_of[ins.uses[0]]
        if dst != src:  # a copy to its own register vanishes
            op, _, layout = _COPY_MOVE["k" if dst >= 64 else "zmm" if dst >= 32 else "vec" if dst >= 16 else "gpr"]
            parts.append(_code_of_key((op, None, False, layout, 1, dst, src), ins))
    else:
        operands_ = ins.defs + ins.uses
        operand_keys = list(map(code_of.get, operands_))
        if None in operand_keys:  # memory operands
            operand_keys = _operand_keys(operands_, operand_keys, code_of, slot_disp)
        spec = ins.arg
        parts.append(_code_of_key((ins.op, spec.cond, spec.two_address, spec.layout, len(ins.defs), *operand_keys),
                                  ins))
    parts += [_move_code(False, reg, off) for reg, off in stores]
    code = _ENCODED[key] = b"".join(parts)
    return code


_NAME = operator.attrgetter("name")


def _move_code(loads: bool, reg: Register, off: int) -> bytes:
    """The code of a fill (``loads``) or spill store of ``reg`` at stack offset ``off``: its head (see
    ``_move_head``), then the address of ``[rsp + off]`` with the register in the ModRM's reg field."""
    head = (_FILL_HEADS if loads else _SPILL_HEADS).get(reg.name)
    if head is None:
        head = _move_head(loads, reg)
    _, modrm, rest = _rsp_address(off) if reg.cls != "zmm" else _rsp_address(off, ZMM_SLOT)
    return head[0] + bytes((head[1] | modrm,)) + rest


def _move_head(loads: bool, reg: Register) -> tuple[bytes, int]:
    """(the bytes before the ModRM, the ModRM's reg field) of a fill or spill store of ``reg``: what the move at
    ``[rsp]`` encodes to (as any other instruction, by its key), without its ModRM and SIB. Neither depends on the
    offset: rsp needs no REX.B/VEX.B bit, so prefixes and opcode stay (remembered by register, as few are scratch)."""
    op, bits, layout = (_FILL_MOVE if loads else _SPILL_MOVE)[reg.cls]
    at, code = (bits, 4, None, 1, 0), _CODE_BY_NAME[reg.name]  # the key of [rsp], the register's
    whole = _code_of_key((op, None, False, layout, 1, code, at) if loads else (op, None, False, layout, 0, at, code),
                         reg)
    assert whole[-1] == 0x24 and whole[-2] & 0xC7 == 0x04, "[rsp] ends a move as ModRM (mod 00, rm 100), SIB 24"
    head = (_FILL_HEADS if loads else _SPILL_HEADS)[reg.name] = (whole[:-2], whole[-2] & 0x38)
    return head


@functools.lru_cache(maxsize=1024)  # spill slot offsets repeat from kernel to kernel
def _rsp_address(off: int, n: int = 1) -> tuple[int, int, bytes]:
    """``operands.address`` of ``[rsp + off]`` (``n``: an EVEX move's disp8 unit, the bytes of a zmm)."""
    return address(4, None, 1, off, n)


# the heads of fills and spill stores by register name (see ``_move_head``)
_FILL_HEADS: dict[str, tuple[bytes, int]] = {}
_SPILL_HEADS: dict[str, tuple[bytes, int]] = {}


def _code_of_key(key: tuple, what: Any) -> bytes:
    """The bytes of the instruction of ``key`` (``what``: for messages), encoded the first time only."""
    code = _ENCODED.get(key)
    return code if code is not None else _encode_new(key, what)


# An operand's key is what its encoding depends on: a register's code (its number, plus 16 for a vector register,
# 32 for a zmm-class one, 64 for an opmask; the layout gives the size), a memory operand's (bits, base key, index key,
# scale, disp); a spilled virtual register's is (its slot, class, allowed registers): what its fills and spill stores
# depend on
_CODE_BY_NAME: dict[Any, int] = {r.name: r.index + {"gpr": 0, "vec": 16, "zmm": 32, "k": 64}[r.cls]
                                 for r in (*GPR.values(), *VEC.values(), *ZMM.values(), *KREG.values())}
# the bytes of each instruction by its key (op, cond, two-address, layout, number of defs, operand keys; a copy's:
# "copy", operand keys), with its spill code: instructions repeat within a kernel and from kernel to kernel
_ENCODED: dict[tuple, bytes] = {}
_ENCODED_LIMIT = 1 << 14  # a few dozen new instructions per kernel: a full table is emptied when a kernel starts


def _operand_keys(operands_: list, keys: list, key_of: dict, slot_disp: dict[tuple[str, int], int]) -> list:
    """``keys`` with the ones a lookup in ``key_of`` did not find (None) filled in: those of memory operands (their
    registers' keys from ``key_of``; a ``Slot`` at its frame offset) and of physical registers."""
    for k, o in enumerate(operands_):
        if keys[k] is not None:
            continue
        if type(o) is not VMem:
            keys[k] = _physical_key(o)
        elif o.slot is not None:  # rsp-based
            keys[k] = (o.bits, 4, None, 1, slot_disp[o.slot] + o.disp)
        else:
            base = key_of[o.base] if type(o.base) is VReg else _physical_key(o.base)
            if o.index is None:
                keys[k] = (o.bits, base, None, 1, o.disp)
            else:
                index = key_of[o.index] if type(o.index) is VReg else _physical_key(o.index)
                keys[k] = (o.bits, base, index, o.scale, o.disp)
    return keys


def _physical_key(r: Any) -> int | None:
    """The key of a physical register (None: no register, e.g. a memory operand without a base)."""
    if r is None:
        return None
    if type(r) is not Register:
        raise encoder.EncodeError(f"cannot encode operand {r!r}")
    return _CODE_BY_NAME[r.name]


def _encode_new(key: tuple, ins: MInst) -> bytes:
    """Encode the instruction of ``key`` (see ``_encode_body``; ``ins`` for messages) and remember its bytes."""
    op, cond, two_address, layout, ndefs = key[:5]
    plan = _OPERAND_PLANS.get((layout, ndefs))
    if plan is None:
        plan = _operand_plan(layout, ndefs)
    ops: list[Operand] = []
    for entry in plan:  # a loop: cheaper than maps for two or three operands
        if len(entry) == 2:
            ops.append(entry[1][key[entry[0]]])
        elif len(entry) == 3:  # a memory element broadcast: (where, table, lanes)
            ops.append(Bcst(entry[1][key[entry[0]]], entry[2]))
        else:  # under an opmask: (where, table, where the opmask's key is, zeroing)
            ops.append(Masked(entry[1][key[entry[0]]], KREGS[key[entry[2]] - 64], entry[3]))
    if two_address and key[5] != key[5 + ndefs]:
        raise AssertionError(f"two-address violated in {ins}")
    args = tuple(ops)
    if None in args:
        raise encoder.EncodeError(f"x86: {op.name} names a register at a width it has no view at: {ins}")
    found = encoder._form_cache.get((op, None, *map(_SHAPE, args)))
    if found is None:  # the first instruction of this shape: choose its form
        found = encoder.select_by_shape(op, args, cond, None)
    code = found[1](args, cond, 0)
    _ENCODED[key] = code
    return code


def _operand_plan(layout: tuple, ndefs: int) -> tuple[tuple, ...]:
    """How ``_encode_new`` makes the operands of a ``layout`` from an instruction's key: for each operand, where in
    the key to look and the table giving the operand by what is there. A register operand's key is its code, and
    its table the views of every code at the layout's bits; a memory operand's key is looked up in
    ``operands.MEMS``; an immediate is fixed by the layout, so it is read from a table of one entry, looked up by the
    key's number of defs (fixed by the plan too). Made once per layout, as layouts repeat far more than
    instructions do."""
    plan: list[tuple] = []
    for item in layout:
        kind = item[0]
        if kind == "i":
            plan.append((4, {ndefs: imm(item[1])}))
        elif kind == "ub":
            plan.append((5 + item[1] + ndefs, operands.MEMS, item[2]))
        elif kind == "dk" or kind == "uk":
            plan.append((5 + item[1] + (ndefs if kind == "uk" else 0),
                         operands.MEMS if item[2] is None else _REGS_BY_CODE[item[2]], 5 + ndefs + item[3],
                         kind == "dk" and item[4]))
        else:
            plan.append((5 + item[1] + (ndefs if kind == "u" else 0),
                         operands.MEMS if item[2] is None else _REGS_BY_CODE[item[2]]))
    found = _OPERAND_PLANS[(layout, ndefs)] = tuple(plan)
    return found


# the operand plan of each (layout, number of defs), see ``_operand_plan``; as bounded as ``_ENCODED`` (cleared with
# it when full: every layout here is one of an instruction there)
_OPERAND_PLANS: dict[tuple[tuple, int], tuple[tuple, ...]] = {}
# the register of each operand key (code: see ``_CODE_BY_NAME``) at each layout size (None: no gpr that wide)
_REGS_BY_CODE: dict[int, tuple[Reg | None, ...]] = {
    bits: (*_VIEWS.get(("gpr", bits), (None,) * 16), *_VIEWS.get(("vec", bits), (None,) * 16), *_VIEWS[("zmm", bits)],
           *_VIEWS.get(("k", bits), (None,) * 8))
    for bits in (8, 16, 32, 64, 128, 256, 512)}


_SHAPE = operator.attrgetter("shape")

"""Encode one instruction into x86-64 machine code.

In: an ``Inst`` (op, operands, condition) and optionally the ``Form`` to use and, for a
jump, its displacement. Out: the instruction's bytes.

The layout is: legacy prefixes (66/F2/F3), REX or VEX (VEX2 ``C5`` when the map is 0F,
W is 0 and neither X nor B is needed, else VEX3 ``C4``), opcode, ModRM, SIB,
displacement, immediates. Memory addressing follows the SDM's special cases: rsp/r12 as
base need a SIB byte, rbp/r13 as base need a displacement (disp8 0), no base is SIB base
101 with disp32, and SIB index 100 means "no index" (so rsp can never be an index).
"""
from __future__ import annotations

from tg_x86.forms import IMM_TYPES, Form
from tg_x86.isa import Inst
from tg_x86.operands import Imm, Label, Mem, Operand, Reg


class EncodeError(ValueError):
    """No form of the instruction accepts these operands, or an operand cannot be encoded."""


def select_form(inst: Inst, rel_bits: int | None = None) -> Form:
    """The first form of ``inst.op`` accepting its operands (for jumps: with a ``rel_bits`` displacement)."""
    key = (inst.op, rel_bits, *[o.shape if type(o) is Reg else _shape(o) for o in inst.operands])
    form = _form_cache.get(key)
    if form is not None:
        return form
    for form in inst.op.forms:
        if form.accepts(inst.operands) and (rel_bits is None or form.encoding.rel * 8 == rel_bits):
            _form_cache[key] = form
            return form
    accepted = "; ".join(f.text.split("|")[1].strip() or "(none)" for f in inst.op.forms)
    raise EncodeError(f"no form of {inst.mnemonic} takes {_describe(inst.operands)} (forms: {accepted})")


# Which form fits depends only on each operand's shape: register class (and whether it is cl),
# memory size, which immediate ranges hold the value. Selection is cached by shape.
_form_cache: dict[tuple, Form] = {}
_IMM_RANGES = tuple(rng for rng, _ in IMM_TYPES.values())


def _shape(o: Operand) -> tuple:
    if isinstance(o, Reg):
        return (o.kind, o.bits, o.bits == 8 and o.num == 1 and o.kind == "gpr")  # the last: is it cl
    if isinstance(o, Mem):
        return ("mem", o.bits)
    if isinstance(o, Imm):
        return tuple(lo <= o.value <= hi for lo, hi in _IMM_RANGES)
    return ("label",)


def encode(inst: Inst, form: Form | None = None, rel: int = 0) -> bytes:
    """Machine code for ``inst``; ``rel`` is a jump's displacement from the end of the instruction."""
    form = form or select_form(inst)
    enc = form.encoding
    # which operand goes into which field, by the form's Op/En letters
    reg_field: Operand | None = None
    rm: Operand | None = None
    vvvv: Operand | None = None
    opreg: Operand | None = None
    is4: Operand | None = None
    imms: list[Imm] = []
    for letter, o in zip(form.op_en, inst.operands, strict=True):
        if letter == "R":
            reg_field = o
        elif letter == "M":
            rm = o
        elif letter == "V":
            vvvv = o
        elif letter == "I":
            assert isinstance(o, Imm)
            imms.append(o)
        elif letter == "O":
            opreg = o
        elif letter == "L":
            is4 = o

    # the ModRM.reg field holds a register (R) or an opcode extension (/digit)
    reg_num = reg_field.num if isinstance(reg_field, Reg) else max(enc.modrm or 0, 0)
    rex_r = reg_num >> 3
    rm_is_mem = isinstance(rm, Mem)
    rex_x = rm.index.num >> 3 if rm_is_mem and rm.index is not None else 0  # type: ignore[union-attr]
    if rm_is_mem:
        rex_b = rm.base.num >> 3 if rm.base is not None else 0  # type: ignore[union-attr]
    elif isinstance(rm, Reg):
        rex_b = rm.num >> 3
    elif isinstance(opreg, Reg):
        rex_b = opreg.num >> 3
    else:
        rex_b = 0

    opcode = enc.opcode
    if enc.plus_r or enc.plus_cc:
        last = opcode[-1]
        if enc.plus_r:
            last |= opreg.num & 7  # type: ignore[union-attr]
        if enc.plus_cc:
            if inst.cond is None:
                raise EncodeError(f"{inst.op.name} needs a condition code")
            last += inst.cond.code
        opcode = bytes(opcode[:-1]) + bytes((last,))
    v = enc.vex
    if v is None:
        out = bytearray(enc.prefixes)
        force_rex = any(isinstance(o, Reg) and o.needs_rex for o in inst.operands)
        if enc.rex_w or rex_r or rex_x or rex_b or force_rex:
            out.append(0x40 | enc.rex_w << 3 | rex_r << 2 | rex_x << 1 | rex_b)
        out += opcode
    else:
        out = bytearray(enc.prefixes)
        inv_vvvv = (~vvvv.num & 0xF) if isinstance(vvvv, Reg) else 0xF
        if v.map == 1 and v.w == 0 and not rex_x and not rex_b:
            out += bytes((0xC5, (rex_r ^ 1) << 7 | inv_vvvv << 3 | v.l << 2 | v.pp))
        else:
            out += bytes((0xC4, (rex_r ^ 1) << 7 | (rex_x ^ 1) << 6 | (rex_b ^ 1) << 5 | v.map,
                          v.w << 7 | inv_vvvv << 3 | v.l << 2 | v.pp))
        out += opcode
    if enc.modrm is not None:
        out += _modrm(reg_num & 7, rm)
    if enc.imms or imms:
        if len(enc.imms) != len(imms):
            raise EncodeError("missing immediate")
        for size, imm in zip(enc.imms, imms, strict=True):
            out += _le(imm.value, size)
    if enc.is4:
        out.append((is4.num & 0xF) << 4)  # type: ignore[union-attr]
    if enc.rel:
        if not -(1 << (enc.rel * 8 - 1)) <= rel < 1 << (enc.rel * 8 - 1):
            raise EncodeError(f"jump displacement {rel} does not fit in {enc.rel * 8} bits")
        out += (rel & ((1 << (enc.rel * 8)) - 1)).to_bytes(enc.rel, "little")
    return bytes(out)


def _modrm(reg: int, rm: Operand | None) -> bytes:
    """ModRM (+ SIB + displacement) for a register or memory rm operand."""
    if isinstance(rm, Reg):
        return bytes([0xC0 | reg << 3 | rm.num & 7])
    if not isinstance(rm, Mem):
        raise EncodeError(f"ModRM.rm needs a register or memory operand, got {rm!r}")
    if rm.index is not None:
        scale_bits, index = {1: 0, 2: 1, 4: 2, 8: 3}[rm.scale], rm.index.num & 7
    else:
        scale_bits, index = 0, 0b100  # no index: SIB index 100, scale 00 (as assemblers emit it)
    if rm.base is None:  # [index*scale + disp32] or [disp32]: SIB with base 101 and mod 00
        return bytes([reg << 3 | 0b100, scale_bits << 6 | index << 3 | 0b101]) + _le(rm.disp, 4)
    base = rm.base.num & 7
    if rm.disp == 0 and base != 0b101:
        mod, disp = 0b00, b""
    elif -128 <= rm.disp <= 127:
        mod, disp = 0b01, _le(rm.disp, 1)
    else:
        mod, disp = 0b10, _le(rm.disp, 4)
    if rm.index is None and base != 0b100:
        return bytes([mod << 6 | reg << 3 | base]) + disp
    return bytes([mod << 6 | reg << 3 | 0b100, scale_bits << 6 | index << 3 | base]) + disp


def _le(value: int, size: int) -> bytes:
    return (value & ((1 << (size * 8)) - 1)).to_bytes(size, "little")


def _describe(operands: tuple[Operand, ...]) -> str:
    def one(o: Operand) -> str:
        if isinstance(o, Reg):
            return f"{o.name} ({o.kind}{o.bits if o.kind == 'gpr' else ''})"
        if isinstance(o, Mem):
            return f"m{o.bits or ''}"
        if isinstance(o, Imm):
            return f"imm {o.value}"
        return f"label {o!r}" if isinstance(o, Label) else repr(o)
    return ", ".join(map(one, operands)) or "no operands"

"""Encode one instruction into x86-64 machine code.

In: an ``Inst`` (op, operands, condition) and optionally the ``Form`` to use and, for a
jump, its displacement. Out: the instruction's bytes.

The layout is: legacy prefixes (66/F2/F3), REX or VEX (VEX2 ``C5`` when the map is 0F,
W is 0 and neither X nor B is needed, else VEX3 ``C4``) or EVEX (``62`` and three payload bytes: register
extensions to 32 zmm registers, the opmask and zeroing, vector length, embedded broadcast), opcode, ModRM, SIB,
displacement (EVEX: disp8*N, see ``forms``), immediates. A memory operand's ModRM, SIB and displacement come from
``Mem.address`` (``operands.address``, which follows the SDM's special cases), worked out
when the operand is made.
"""
from __future__ import annotations

import operator
from collections.abc import Callable

from tg_x86.forms import FORMS, Form
from tg_x86.isa import Cond, Inst, Op
from tg_x86.operands import Bcst, Imm, Label, Masked, Mem, Operand, Reg, address


class EncodeError(ValueError):
    """No form of the instruction accepts these operands, or an operand cannot be encoded."""


def select_form(inst: Inst, rel_bits: int | None = None) -> Form:
    """The first form of ``inst.op`` accepting its operands (for jumps: with a ``rel_bits`` displacement)."""
    return _selected(inst, rel_bits)[0]


def _selected(inst: Inst, rel_bits: int | None) -> tuple[Form, FormEncoder]:
    return select_by_shape(inst.op, inst.operands, inst.cond, rel_bits)


def select_by_shape(op: Op, operands: tuple[Operand, ...], cond: Cond | None, rel_bits: int | None
                    ) -> tuple[Form, FormEncoder]:
    """The first form of ``op`` accepting ``operands`` (for jumps: with a ``rel_bits`` displacement) and its
    encoder, by the operands' shapes (``cond``: for messages)."""
    shapes = tuple(map(_SHAPE, operands))
    found = _form_cache.get((op, rel_bits, *shapes))
    if found is not None:
        return found
    n, accepts = len(shapes), frozenset.__contains__
    for form in FORMS[op]:  # a form accepts an operand whose shape is among its type's: most are turned down
        if len(form.shapes) == n and all(map(accepts, form.shapes, shapes)) and (
                rel_bits is None or form.encoding.rel * 8 == rel_bits):
            found = _form_cache[(op, rel_bits, *shapes)] = (form, _encoder(form))
            return found
    accepted = "; ".join(f.text.split("|")[1].strip() or "(none)" for f in op.forms)
    mnemonic = Inst.of(op, operands, cond, None).mnemonic
    raise EncodeError(f"no form of {mnemonic} takes {_describe(operands)} (forms: {accepted})")


# Which form fits depends only on each operand's shape (every operand carries one): register class and size
# (and whether it is cl), memory size, which immediate ranges hold the value. Selection is cached by shape.
_form_cache: dict[tuple, tuple[Form, FormEncoder]] = {}
_SHAPE = operator.attrgetter("shape")


def encode(inst: Inst, form: Form | None = None, rel: int = 0) -> bytes:
    """Machine code for ``inst``; ``rel`` is a jump's displacement from the end of the instruction."""
    fn = _selected(inst, None)[1] if form is None else _encoder(form)
    return fn(inst.operands, inst.cond, rel)


def encode_all(insts: list[Inst]) -> list[bytes | None]:
    """``[encode(i) for i in insts]`` with the form lookup inlined, except that a jump to a label gives None
    (its displacement is not known yet)."""
    cache, shape = _form_cache, _SHAPE
    out: list[bytes | None] = []
    for inst in insts:
        if inst.label is not None:
            out.append(None)
            continue
        ops = inst.operands
        found = cache.get((inst.op, None, *map(shape, ops)))
        if found is None:
            found = _selected(inst, None)
        out.append(found[1](ops, inst.cond, 0))
    return out


def _encoder(form: Form) -> FormEncoder:
    fn = _ENCODERS.get(id(form))
    if fn is None:
        fn = _ENCODERS[id(form)] = compile_form(form)
    return fn


FormEncoder = Callable[[tuple[Operand, ...], Cond | None, int], bytes]
# the forms live as long as the process (``FORMS``): one encoder per form, by identity
_ENCODERS: dict[int, FormEncoder] = {}


def compile_form(form: Form) -> FormEncoder:
    """An encoder of ``form``'s instructions: ``fn(operands, cond, rel) -> bytes``. Which operand goes into
    which field (the Op/En letters), the prefixes and the fixed bits of REX/VEX are worked out once, here;
    the returned function only reads register numbers, memory fields and immediates."""
    enc = form.encoding
    letters = form.op_en
    at_reg, at_rm, at_vvvv, at_opreg, at_is4 = map(letters.find, "RMVOL")
    imms = tuple(zip([i for i, c in enumerate(letters) if c == "I"], enc.imms, strict=True))
    digit = max(enc.modrm or 0, 0)  # the ModRM.reg field holds a register (R) or an opcode extension (/digit)
    has_modrm = enc.modrm is not None
    plus_r, plus_cc = enc.plus_r, enc.plus_cc
    opcode = enc.opcode
    prefixes = enc.prefixes
    rex_w = 8 if enc.rex_w else 0
    rel_size = enc.rel
    if enc.evex is not None:
        return _compile_evex(form)
    v = enc.vex
    vex_tail = (v.l << 2 | v.pp) if v is not None else 0
    vex2 = v is not None and v.map == 1 and v.w == 0
    vex3_map = v.map if v is not None else 0
    vex3_w = v.w << 7 if v is not None else 0
    has_tail = bool(imms or at_is4 >= 0 or rel_size)

    if v is not None and has_modrm and not (plus_r or plus_cc or rel_size) and len(opcode) == 1:
        # the common case (every vector instruction): VEX prefix, one opcode byte, ModRM
        opc = opcode[0]

        vvvv_none = 0x78 | vex_tail  # VEX.vvvv 1111 (no register there), then L and pp

        def encode_vex(ops: tuple[Operand, ...], cond: Cond | None, rel: int) -> bytes:
            reg_num = ops[at_reg].num if at_reg >= 0 else digit  # type: ignore[union-attr]
            vvvv = (~ops[at_vvvv].num & 0xF) << 3 | vex_tail if at_vvvv >= 0 else vvvv_none  # type: ignore[union-attr]
            rm = ops[at_rm]
            if type(rm) is Mem:
                xb, modrm, rest = rm.address
                modrm |= (reg_num & 7) << 3
            else:
                rm_num = rm.num  # type: ignore[union-attr]
                xb, modrm, rest = rm_num >> 3, 0xC0 | (reg_num & 7) << 3 | rm_num & 7, b""
            if vex2 and not xb:  # the 2-byte prefix: map 0F, W0, no REX.X or REX.B
                out = bytes((0xC5, (reg_num >> 3 ^ 1) << 7 | vvvv, opc, modrm)) + rest
            else:
                out = bytes((0xC4, (reg_num >> 3 ^ 1) << 7 | (xb ^ 3) << 5 | vex3_map, vex3_w | vvvv, opc, modrm)
                            ) + rest
            if has_tail:
                for i, size in imms:
                    out += (ops[i].value & _MASKS[size]).to_bytes(size, "little")  # type: ignore[union-attr]
                if at_is4 >= 0:
                    out += bytes(((ops[at_is4].num & 0xF) << 4,))  # type: ignore[union-attr]
            return out
        return encode_vex

    if v is None and has_modrm and not (plus_r or plus_cc or rel_size):
        # the other common case (scalar integer instructions): legacy prefixes, REX if needed, opcode, ModRM
        # (spl..dil need a REX prefix: which of the reg and rm operands are byte registers is fixed by the form)
        reg_is_byte = at_reg >= 0 and form.operands[at_reg].reg == ("gpr", 8)
        rm_is_byte = form.operands[at_rm].reg == ("gpr", 8)

        def encode_legacy(ops: tuple[Operand, ...], cond: Cond | None, rel: int) -> bytes:
            reg_num = ops[at_reg].num if at_reg >= 0 else digit  # type: ignore[union-attr]
            rm = ops[at_rm]
            if type(rm) is Mem:
                xb, modrm, rest = rm.address
                modrm |= (reg_num & 7) << 3
                byte_needs_rex = reg_is_byte and 4 <= reg_num <= 7
            else:
                rm_num = rm.num  # type: ignore[union-attr]
                xb, modrm, rest = rm_num >> 3, 0xC0 | (reg_num & 7) << 3 | rm_num & 7, b""
                byte_needs_rex = (reg_is_byte and 4 <= reg_num <= 7) or (rm_is_byte and 4 <= rm_num <= 7)
            rex = rex_w | (reg_num >> 3) << 2 | xb
            if rex or byte_needs_rex:
                out = prefixes + bytes((0x40 | rex,)) + opcode + bytes((modrm,)) + rest
            else:
                out = prefixes + opcode + bytes((modrm,)) + rest
            if has_tail:
                for i, size in imms:
                    out += (ops[i].value & _MASKS[size]).to_bytes(size, "little")  # type: ignore[union-attr]
            return out
        return encode_legacy

    # what only the jump and the general encoders read (the two above are most forms: they are made first)
    byte_regs = ("gpr", 8) in map(_REG_KIND, form.operands)  # spl..dil need a REX prefix
    head, last = opcode[:-1], opcode[-1]
    name = form.op.name
    rel_lo, rel_hi = -(1 << (rel_size * 8 - 1)) if rel_size else 0, (1 << (rel_size * 8 - 1)) if rel_size else 0

    if rel_size and not (has_modrm or imms or prefixes or rex_w or v is not None or plus_r):
        # jumps (a hot path of the assembler, which encodes each jump two or three times): opcode, displacement
        def encode_jump(ops: tuple[Operand, ...], cond: Cond | None, rel: int) -> bytes:
            if not rel_lo <= rel < rel_hi:
                raise EncodeError(f"jump displacement {rel} does not fit in {rel_size * 8} bits")
            if plus_cc:
                if cond is None:
                    raise EncodeError(f"{name} needs a condition code")
                # cond._value_ is (code, suffix): Cond.code without its two property calls
                return head + bytes((last + cond._value_[0],)) + (rel & _MASKS[rel_size]).to_bytes(rel_size, "little")
            return opcode + (rel & _MASKS[rel_size]).to_bytes(rel_size, "little")
        return encode_jump

    def encode_form(ops: tuple[Operand, ...], cond: Cond | None, rel: int) -> bytes:
        reg_num = ops[at_reg].num if at_reg >= 0 else digit  # type: ignore[union-attr]
        # xb: REX.X << 1 | REX.B (the extension bits of the rm, index or opcode register)
        if has_modrm:
            rm = ops[at_rm]
            if type(rm) is Mem:
                xb, rm_bits, rest = rm.address
                modrm = bytes((rm_bits | (reg_num & 7) << 3,)) + rest
            else:
                rm_num = rm.num  # type: ignore[union-attr]
                xb, modrm = rm_num >> 3, bytes((0xC0 | (reg_num & 7) << 3 | rm_num & 7,))
        else:
            modrm = b""
            xb = ops[at_opreg].num >> 3 if at_opreg >= 0 else 0  # type: ignore[union-attr]
        op_bytes = opcode
        if plus_r or plus_cc:
            low = last
            if plus_r:
                low |= ops[at_opreg].num & 7  # type: ignore[union-attr]
            if plus_cc:
                if cond is None:
                    raise EncodeError(f"{name} needs a condition code")
                low += cond._value_[0]  # Cond.code without its two property calls
            op_bytes = head + bytes((low,))
        if v is None:
            rex = rex_w | (reg_num >> 3) << 2 | xb
            if rex or (byte_regs and any(type(o) is Reg and o.bits == 8 and 4 <= o.num <= 7  # type: ignore[union-attr]
                                         for o in ops)):
                out = prefixes + bytes((0x40 | rex,)) + op_bytes + modrm
            else:
                out = prefixes + op_bytes + modrm
        else:
            inv_vvvv = (~ops[at_vvvv].num & 0xF) if at_vvvv >= 0 else 0xF  # type: ignore[union-attr]
            if vex2 and not xb:
                out = bytes((0xC5, (reg_num >> 3 ^ 1) << 7 | inv_vvvv << 3 | vex_tail)) + op_bytes + modrm
            else:
                out = bytes((0xC4, (reg_num >> 3 ^ 1) << 7 | (xb ^ 3) << 5 | vex3_map,
                             vex3_w | inv_vvvv << 3 | vex_tail)) + op_bytes + modrm
        if has_tail:
            for i, size in imms:
                out += (ops[i].value & _MASKS[size]).to_bytes(size, "little")  # type: ignore[union-attr]
            if at_is4 >= 0:
                out += bytes(((ops[at_is4].num & 0xF) << 4,))  # type: ignore[union-attr]
            if rel_size:
                if not rel_lo <= rel < rel_hi:
                    raise EncodeError(f"jump displacement {rel} does not fit in {rel_size * 8} bits")
                out += (rel & _MASKS[rel_size]).to_bytes(rel_size, "little")
        return out
    return encode_form


def _compile_evex(form: Form) -> FormEncoder:
    """An encoder of an EVEX form: ``62``, P0 = R X B R' 0 0 m m (R, X, B, R' inverted), P1 = W vvvv 1 p p (vvvv
    inverted), P2 = z L'L b V' a a a (V' inverted), opcode, ModRM, SIB, displacement, immediates. R' and V' are the
    fifth bits of the ModRM.reg and vvvv registers, X the fifth of an rm register (for memory: the index's
    fourth); ``aaa`` is the opmask of a ``Masked`` first operand and z its zeroing, b an embedded broadcast. A
    memory displacement is compressed by N, the memory operand's (or the broadcast element's) size."""
    enc, letters = form.encoding, form.op_en
    ev = enc.evex
    assert ev is not None and enc.modrm is not None and not (enc.plus_r or enc.plus_cc or enc.rel or enc.is4)
    at_reg, at_rm, at_vvvv = map(letters.find, "RMV")
    imms = tuple(zip([i for i, c in enumerate(letters) if c == "I"], enc.imms, strict=True))
    digit = max(enc.modrm, 0)  # the ModRM.reg field holds a register (R) or an opcode extension (/digit)
    opcode = enc.opcode
    p1_fixed = ev.w << 7 | 1 << 2 | ev.pp
    p2_length = ev.l << 5

    def encode_evex(ops: tuple[Operand, ...], cond: Cond | None, rel: int) -> bytes:
        aaa = zero = 0
        first = ops[0]
        if type(first) is Masked:   # the destination (or the store) under an opmask
            aaa, zero = first.mask.num, first.zero
            ops = (first.target, *ops[1:])
        reg_num = ops[at_reg].num if at_reg >= 0 else digit  # type: ignore[union-attr]
        v = ops[at_vvvv].num if at_vvvv >= 0 else 0  # type: ignore[union-attr]
        rm = ops[at_rm]
        broadcast = type(rm) is Bcst
        if broadcast:
            rm = rm.mem  # type: ignore[union-attr]
        if type(rm) is Mem:
            xb, modrm, rest = address(rm.base.num if rm.base is not None else None,
                                      rm.index.num if rm.index is not None else None, rm.scale, rm.disp,
                                      (rm.bits or 8) // 8)
            x, b = xb >> 1, xb & 1
            modrm |= (reg_num & 7) << 3
        else:
            rm_num = rm.num  # type: ignore[union-attr]
            x, b, modrm, rest = rm_num >> 4 & 1, rm_num >> 3 & 1, 0xC0 | (reg_num & 7) << 3 | rm_num & 7, b""
        p0 = (~reg_num >> 3 & 1) << 7 | (x ^ 1) << 6 | (b ^ 1) << 5 | (~reg_num >> 4 & 1) << 4 | ev.map
        p1 = p1_fixed | (~v & 0xF) << 3
        p2 = zero << 7 | p2_length | broadcast << 4 | (~v >> 4 & 1) << 3 | aaa
        out = bytes((0x62, p0, p1, p2)) + opcode + bytes((modrm,)) + rest
        for i, size in imms:
            out += (ops[i].value & _MASKS[size]).to_bytes(size, "little")  # type: ignore[union-attr]
        return out
    return encode_evex


_REG_KIND = operator.attrgetter("reg")
_MASKS = {1: 0xFF, 2: 0xFFFF, 4: 0xFFFFFFFF, 8: (1 << 64) - 1}


def _describe(operands: tuple[Operand, ...]) -> str:
    def one(o: Operand) -> str:
        if isinstance(o, Reg):
            return f"{o.name} ({o.kind}{o.bits if o.kind == 'gpr' else ''})"
        if isinstance(o, Mem):
            return f"m{o.bits or ''}"
        if isinstance(o, Masked):
            return f"{one(o.target)} {{{o.mask.name}}}{' {z}' if o.zero else ''}"
        if isinstance(o, Bcst):
            return f"m{o.mem.bits} broadcast to {o.count}"
        if isinstance(o, Imm):
            return f"imm {o.value}"
        return f"label {o!r}" if isinstance(o, Label) else repr(o)
    return ", ".join(map(one, operands)) or "no operands"

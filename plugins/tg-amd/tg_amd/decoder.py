"""Decoder: ``decode(data, arch, offset) -> (Inst, size)``, the inverse of ``tg_amd.encoder``.

In: machine code bytes and the offset of one instruction. Out: the ``Inst`` (operands as
``tg_amd.operands`` objects, constants as ints/floats, literals as their 32-bit value; branch
targets as signed dword offsets) and its size in bytes. Unknown encodings raise ``AsmError``.
"""
from __future__ import annotations

from typing import Any

from tg_amd import dpp, image, sdwa
from tg_amd.arch import Arch, AsmError, get_arch
from tg_amd.encode_mem import returns
from tg_amd.encoder import OMOD, PERMLANE_OP_SEL, TRUE16, _e64_sig
from tg_amd.encoding import PACKED
from tg_amd.inst import Inst
from tg_amd.isa import SRC_INDEX, OpInfo, by_opcode, ds_count, two_offsets
from tg_amd.layouts import LAYOUTS, Layout, match
from tg_amd.llvm_table import dpp_forms, hex_immediates
from tg_amd.operands import FILES, INV_2PI, LITERAL, OFF, SPECIALS, Attr, Dec, Hex, Label, Mod, Reg, Sext
from tg_amd.symbols import (
    Sym,
    delay_sym,
    depctr_sym,
    format_name,
    gpr_idx_sym,
    hwreg_sym,
    msg_sym,
    policy_name,
    swizzle_sym,
)

FLOAT_CODES = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0, 248: INV_2PI}
OMOD_NAMES = {v: k for k, v in OMOD.items()}


def _sext(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


class _Decoder:
    def __init__(self, arch: Arch, info: OpInfo, fields: dict[str, int], literal: int | None):
        self.arch, self.info, self.f, self.literal = arch, info, fields, literal

    def scalar(self, code: int, count: int) -> Any:
        arch = self.arch
        if code < arch.max_sgpr:
            return Reg("s", code, count)
        if 108 <= code <= 123:
            return Reg("ttmp", code - 108, count)
        for name, (n, rdna, cdna) in SPECIALS.items():
            if (rdna if arch.rdna else cdna) == code and n == count:
                return Reg(name, 0, n)
        for name, (n, rdna, cdna) in SPECIALS.items():
            if (rdna if arch.rdna else cdna) == code:
                return Reg(name, 0, n)
        if 128 <= code <= 192:
            return code - 128
        if 193 <= code <= 208:
            return 192 - code
        if code in FLOAT_CODES:
            return FLOAT_CODES[code]
        if code == LITERAL:
            if self.literal is None:
                raise AsmError("literal operand without literal dword", self.info.name, None, arch.name)
            return self.literal
        raise AsmError(f"unknown operand code {code}", self.info.name, None, arch.name)

    def src(self, code: int, count: int, kind: str = "v") -> Any:
        if code >= 256:
            return Reg(kind, code - 256, count)
        return self.scalar(code, count)


def _has_literal(layout: Layout, info: OpInfo, fields: dict[str, int], sig: tuple[str, ...]) -> bool:
    if "k" in sig:
        return True
    names = ("src0", "src1", "src2", "ssrc0", "ssrc1", "srcx0", "srcy0")
    used = [n for n in names if n in layout.fields]
    if layout.name in ("SOPK", "SOPP", "SMEM", "DS", "FLAT", "MUBUF", "VBUFFER", "MTBUF", "VINTERP", "LDSDIR", "EXP"):
        return False
    return any(fields.get(n) == LITERAL for n in used)


def _vop_operands(d: _Decoder, sig: tuple[str, ...], layout: Layout) -> list[Any]:
    info, f, arch = d.info, d.f, d.arch
    mask = 1 if arch.wave == 32 else 2
    out: list[Any] = []
    for role in sig:
        if role == "vdst":
            out.append(Reg("v", f["vdst"], info.count(0)))
        elif role == "adst":
            out.append(Reg("a", f["vdst"], info.count(0)))
        elif role == "sdst":
            field = "sdst" if "sdst" in layout.fields else "vdst"
            count = mask if info.fmt in ("VOP2", "VOP3SD") else 1
            out.append(d.scalar(f[field], count))
        elif role == "cdst":
            out.append(d.scalar(f["vdst"], mask))
        elif role in ("src0", "src1", "src2"):
            k = int(role[-1])
            op = d.src(f[role], info.count(k + 1))
            if _b16_source(info, k + 1) and layout.name in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD"):
                op = _b16_constant(op)
            neg = f.get("neg", 0) >> k & 1 if layout.name in ("VOP3", "VOP3SD") else 0
            ab = f.get("abs", 0) >> k & 1
            out.append(Mod(op, bool(neg), bool(ab)) if neg or ab else op)
        elif role in ("ssrc0", "ssrc1", "ssrc2"):
            k = int(role[-1])
            out.append(d.scalar(f[f"src{k}"], info.count(k + 1)))
        elif role in ("vsrc0", "asrc0"):
            out.append(Reg("a" if role == "asrc0" else "v", f["src0"] - 256, info.count(1)))
        elif role == "vsrc1" and "vsrc1" not in f:  # a VGPR-only source of a VOP3
            out.append(Reg("v", f["src1"] - 256, info.count(2)))
        elif role == "vsrc2":
            out.append(Reg("v", f["src2"] - 256, info.count(3)))
        elif role == "vsrc1":
            out.append(Reg("v", f["vsrc1"], info.count(2)))
        elif role == "vcc":
            out.append(Reg("vcc_lo") if arch.wave == 32 else Reg("vcc", 0, 2))
        elif role == "mask":
            out.append(d.scalar(f["src2"], mask))
        elif role == "k":
            out.append(d.literal)
    return out


def _waitcnt_counters(imm: int, arch: Arch) -> Any:
    """``s_waitcnt``'s immediate as llvm-mc prints it: the counters below their maximum (all three if none
    is), or the number when it has bits no counter owns."""
    from tg_amd.encoder import WAITCNT_FIELDS, waitcnt_value
    counters = {}
    for name, (lo, width) in WAITCNT_FIELDS[arch.rdna].items():
        value = imm >> lo & ((1 << width) - 1)
        if name == "vmcnt" and not arch.rdna:
            value |= (imm >> 14 & 3) << 4
        counters[name] = value
    if waitcnt_value(counters, arch) != imm:
        return imm
    limits = {"vmcnt": 63, "expcnt": 7, "lgkmcnt": 63 if arch.rdna else 15}
    shown = {k: v for k, v in counters.items() if v != limits[k]}
    order = ("vmcnt", "expcnt", "lgkmcnt")
    return {k: (shown or counters)[k] for k in order if k in (shown or counters)}


def _decode_fields(arch: Arch, layout: Layout, info: OpInfo, f: dict[str, int], literal: int | None,
                   enc: str | None, sig: tuple[str, ...]) -> Inst:
    d = _Decoder(arch, info, f, literal)
    name, lay = info.name, layout.name
    mods: dict[str, Any] = {}
    ops: list[Any] = []
    if lay in ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP"):
        for role in sig:
            if role == "sdst":
                ops.append(d.scalar(f["sdst"], info.count(0)))
            elif role in ("ssrc0", "ssrc1"):
                ops.append(d.scalar(f[role], info.count(SRC_INDEX[role])))
            elif role == "gpridx":
                ops.append(gpr_idx_sym(f["ssrc1"]))
            elif role == "simm16":
                imm = f["simm16"]
                if "reg" in name and lay == "SOPK" and name.startswith(("s_getreg", "s_setreg")):
                    ops.append(hwreg_sym(imm, arch))
                elif name in ("s_sendmsg", "s_sendmsghalt"):
                    ops.append(msg_sym(imm, arch))
                elif name == "s_delay_alu":
                    ops.append(delay_sym(imm))
                elif name in ("s_waitcnt_depctr", "s_wait_alu"):
                    ops.append(depctr_sym(imm))
                elif name == "s_set_gpr_idx_mode":
                    ops.append(gpr_idx_sym(imm))
                elif name == "s_version":
                    ops.append(Sym("version", (imm,)))
                elif name in hex_immediates(arch.gen):
                    ops.append(Hex(imm))
                else:  # llvm-mc prints the 16 bits unsigned (SOPK's sign extension is the instruction's business)
                    ops.append(imm)
            elif role == "k":
                ops.append(literal)
            elif role == "label":
                ops.append(Dec(f["simm16"]))
            elif role == "waitcnt":
                ops.append(_waitcnt_counters(f["simm16"], arch))
            elif role == "msg":
                ops.append(msg_sym(f["ssrc0"], arch))
    elif lay == "SMEM":
        bits = {11: 21, 12: 24, 9: 21}[arch.gen]
        for role in sig:
            if role == "sdata":
                ops.append(d.scalar(f["sdata"], info.count(0)))
            elif role == "probe":
                ops.append(f["sdata"] & (0x1F if arch.gen == 12 else 0x7F))
            elif role == "plen":
                ops.append(f["sdata"] & 0x1F)
            elif role == "ioffset":
                ops.append(Hex(_sext(f["offset"], bits)))
            elif role == "soffset":
                ops.append(d.scalar(f["soffset"], 1))
            elif role in ("sbase", "sbuf"):
                ops.append(d.scalar(f["sbase"] << 1, 2 if role == "sbase" else 4))
            elif role == "soff" and arch.gen == 9:
                if f["imm"] and not f["soe"]:
                    ops.append(Hex(_sext(f["offset"], bits)))
                elif not f["imm"]:
                    ops.append(d.scalar(f["offset"], 1))
                else:
                    ops.append(d.scalar(f["soffset"], 1))
                    mods["offset"] = Hex(_sext(f["offset"], bits))
            elif role == "soff" and f["soffset"] == arch.null:  # gfx11 prints a zero offset as null
                off = _sext(f["offset"], bits)
                ops.append(Reg("null") if off == 0 and arch.gen == 11 else Hex(off))
            elif role == "soff":
                ops.append(d.scalar(f["soffset"], 1))
                if f["offset"] or arch.gen == 12:  # gfx12 prints offset:0x0 too
                    mods["offset"] = Hex(_sext(f["offset"], bits))
        for flag in ("glc", "dlc"):
            if f.get(flag):
                mods[flag] = True
    elif lay in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD"):
        ops = _vop_operands(d, sig, layout)
        if lay in ("VOP3", "VOP3SD"):
            if f.get("clamp"):
                mods["clamp"] = True
            if f.get("omod"):
                mods["omod"] = OMOD_NAMES[f["omod"]]
            if f.get("op_sel") and name.startswith(PERMLANE_OP_SEL):
                mods["op_sel"] = (f["op_sel"] & 1, f["op_sel"] >> 1 & 1)
            elif f.get("op_sel"):
                nsrc = sum(r in ("src0", "src1", "src2", "mask") for r in sig)
                sel = [f["op_sel"] >> k & 1 for k in range(nsrc)] + [f["op_sel"] >> 3 & 1]
                mods["op_sel"] = tuple(sel)
    elif lay == "VOP3P":
        ops = _vop_operands(d, sig, layout)
        mix = "mix" in info.flags
        nsrc = sum(r.startswith(("src", "asrc")) for r in sig)
        op_sel = [f["op_sel"] >> k & 1 for k in range(3)]
        op_sel_hi = [f["op_sel_hi"] & 1, f["op_sel_hi"] >> 1 & 1, f["op_sel_hi2"]]
        negs = [("neg_lo", [f["neg"] >> k & 1 for k in range(3)], 0),
                ("neg_hi", [f["neg_hi"] >> k & 1 for k in range(3)], 0)]
        if mix:  # fma_mix: neg_lo/neg_hi are the -x / |x| of each source
            for k in range(nsrc):
                n, a = f["neg"] >> k & 1, f["neg_hi"] >> k & 1
                if n or a:
                    ops[k + 1] = Mod(ops[k + 1], bool(n), bool(a))
            negs = []
        for key, flags, default in (("op_sel", op_sel, 0), ("op_sel_hi", op_sel_hi, 0 if mix else 1), *negs):
            if any(b != default for b in flags[:nsrc]):
                mods[key] = tuple(flags[:nsrc])
        if f.get("clamp"):
            mods["clamp"] = True
    elif lay == "MAI":
        dk = "a" if f["acc_cd"] else "v"
        ops = [Reg(dk, f["vdst"], info.count(0)),
               Reg("a" if f["acc"] & 1 else "v", f["src0"] - 256, info.count(1)),
               Reg("a" if f["acc"] & 2 else "v", f["src1"] - 256, info.count(2)),
               d.src(f["src2"], 1, "v") if "vidx" in sig else d.src(f["src2"], info.count(3), dk)]
        for key in ("cbsz", "abid", "blgp"):
            if f[key]:
                mods[key] = f[key]
    elif lay == "DS":
        kind = "a" if f.get("acc") else "v"
        for role in sig:
            ops.append(Reg("v" if role == "addr" else kind, f[role], ds_count(info, role)))
        if two_offsets(name):
            for key in ("offset0", "offset1"):
                if f[key]:
                    mods[key] = f[key]
        elif f["offset0"] | f["offset1"] << 8:
            offset = f["offset0"] | f["offset1"] << 8
            mods["offset"] = swizzle_sym(offset) if name == "ds_swizzle_b32" else offset
        if f.get("gds"):
            mods["gds"] = True
    elif lay == "FLAT":
        glob = info.fmt == "GLOBAL"
        scratch = info.fmt == "SCRATCH"
        names = {"vaddr": "vaddr", "vdata": "vdata"} if arch.gen == 12 else {"vaddr": "addr", "vdata": "data"}
        off_code = 0x7F if arch.gen == 9 else 0x7C
        kind = "a" if f.get("acc") else "v"
        for role in sig:
            if role == "saddr":
                ops.append(OFF if f["saddr"] == off_code else d.scalar(f["saddr"], 1 if scratch else 2))
            elif role == "vaddr" and scratch:
                ops.append(Reg("v", f[names["vaddr"]], 1) if f["sve"] else OFF)
            elif role == "vaddr":
                count = 1 if glob and f["saddr"] != off_code else 2
                ops.append(Reg("v", f[names["vaddr"]], count))
            else:
                ops.append(Reg(kind, f[names.get(role, role)], info.count(0 if role == "vdst" else 3)))
        bit = f.get("th", 0) if arch.gen == 12 else f.get("glc" if arch.gen == 11 else "sc0", 0)
        if returns(info, bit, arch) and "vdst" not in sig:  # a returning atomic names its destination first
            count = info.count(3) // 2 if "cmpswap" in name else info.count(3)
            ops.insert(0, Reg(kind, f["vdst"], count))
        off = f["offset"]
        off = _sext(off, 24) if arch.gen == 12 else _sext(off, 13) if glob or scratch else off
        if off:
            mods["offset"] = off
        for flag in ("glc", "slc", "dlc", "sc0", "sc1", "nt"):
            if f.get(flag):
                mods[flag] = True
    elif lay in ("MUBUF", "VBUFFER", "MTBUF"):
        kind = "a" if f.get("acc") else "v"
        if name.startswith("tbuffer") and f["format"] != 1:
            mods["format"] = format_name(f["format"], arch)
        naddr = f["offen"] + f["idxen"]
        for role in sig:
            if role == "vdata":
                ops.append(Reg(kind, f["vdata"], info.count(3) + f.get("tfe", 0)))
            elif role == "vaddr":
                ops.append(Reg("v", f["vaddr"], naddr) if naddr else OFF)
            elif role == "srsrc":
                ops.append(Reg("s", f["srsrc"] if arch.gen == 12 else f["srsrc"] << 2, 4))
            elif role == "soffset":
                ops.append(d.scalar(f["soffset"], 1))
        for flag in ("idxen", "offen"):
            if f[flag]:
                mods[flag] = True
        if f["offset"]:
            mods["offset"] = f["offset"]
        for flag in ("glc", "slc", "dlc", "sc0", "sc1", "nt", "tfe", "lds"):
            if f.get(flag):
                mods[flag] = True
    elif lay == "VINTERP":
        for k, role in enumerate(sig[1:]):
            reg = Reg("v", f[role] - 256)
            ops.append(Mod(reg, True) if f["neg"] >> k & 1 else reg)
        ops.insert(0, Reg("v", f["vdst"]))
        if f["op_sel"]:
            mods["op_sel"] = tuple(f["op_sel"] >> k & 1 for k in range(4))
        if f["clamp"]:
            mods["clamp"] = True
        mods["wait_exp"] = f["wait_exp"]  # llvm-mc always prints it
    elif lay == "EXP":
        from tg_amd.encode_mem import EXP_TARGETS
        name_of = {v: k for k, v in EXP_TARGETS.items()}
        ops.append(Label(name_of.get(f["target"], f"target{f['target']}")))
        ops += [Reg("v", f[f"vsrc{k}"]) if f["en"] >> k & 1 else OFF for k in range(4)]
        for flag in ("done", "row_en"):
            if f[flag]:
                mods[flag] = True
    elif lay == "LDSDIR":
        ops.append(Reg("v", f["vdst"]))
        if "attr" in sig:
            ops.append(Attr(f["attr"], f["chan"]))
        if arch.gen == 12:
            mods.update(wait_va_vdst=f["wait_vdst"], wait_vm_vsrc=f["wait_vm_vsrc"])
        else:
            mods["wait_vdst"] = f["wait_vdst"]
    if arch.gen == 12 and lay in ("FLAT", "VBUFFER"):
        kind = "th_atomic" if "_atomic_" in name else "th_store" if "_store_" in name else "th_load"
        for key, table in (("th", kind), ("scope", "scope")):
            if f.get(key):
                mods[key] = policy_name(table, f[key], arch, f["scope"]) or f[key]
    return Inst(name, tuple(ops), mods, enc)


def decode(data: bytes, arch: str | Arch, offset: int = 0) -> tuple[Inst, int]:
    """Decode the instruction at ``data[offset:]``: ``(inst, size in bytes)``."""
    arch = get_arch(arch)
    if offset + 4 > len(data):
        raise AsmError(f"truncated instruction at byte {offset}", None, None, arch.name)
    dword0 = int.from_bytes(data[offset:offset + 4], "little")
    for layout in match(arch.gen, dword0):
        size = layout.bits // 8
        if offset + size > len(data):
            raise AsmError(f"truncated {layout.name} instruction at byte {offset}", None, None, arch.name)
        word = int.from_bytes(data[offset:offset + size], "little")
        f = layout.unpack(word)
        enc = None
        if layout.name == "VOPD":
            return _decode_vopd(data, arch, offset, layout, f)
        key = layout.name
        if layout.name == "FLAT":
            key = {2: "GLOBAL", 1: "SCRATCH", 0: "FLAT"}[f["seg"]]
        if layout.name == "VBUFFER":
            key = "MUBUF"
        info = by_opcode(arch, key, f.get("op", 0))  # EXP has no opcode field
        if info is None:
            continue
        if layout.name in image.FAMILIES:
            return image.decode(data, arch, offset, layout, info, f)
        sig = info.sig
        if layout.name == "VOP3SD":
            continue  # VOP3 and VOP3SD share encoding bits; the opcode's table decides below
        if layout.name == "VOP3":
            if info.fmt in ("VOP1", "VOP2", "VOPC"):
                sig, enc = _e64_sig(info, arch), "e64"
            if info.fmt == "VOP3SD" or ("sdst" in sig and "vdst" in sig):
                layout = LAYOUTS[arch.gen]["VOP3SD"]
                f = layout.unpack(word)
        elif layout.name in ("VOP1", "VOP2", "VOPC"):
            enc = "e32" if info.e64 is not None and sig else None  # named only when there are two (not v_nop)
        if layout.name == "VOP3P" and info.fmt == "MAI":
            layout = LAYOUTS[arch.gen]["MAI"]
            f = layout.unpack(word)
        literal = None
        markers = (dpp.DPP16, dpp.DPP8, dpp.DPP8_FI) if arch.rdna else (dpp.DPP16,)
        if layout.name in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD") and f.get("src0") in markers:
            if offset + size + 4 > len(data):
                raise AsmError(f"truncated DPP dword at byte {offset + size}", info.name, None, arch.name)
            word = int.from_bytes(data[offset + size:offset + size + 4], "little")
            inst = _decode_dpp(arch, layout, info, f, enc, sig, word)
            return _exponent_text(_true16(inst) if info.name in TRUE16 else inst, info, arch), size + 4
        if not arch.rdna and layout.name in ("VOP1", "VOP2", "VOPC") and f.get("src0") == sdwa.MARKER:
            if offset + size + 4 > len(data):
                raise AsmError(f"truncated SDWA dword at byte {offset + size}", info.name, None, arch.name)
            word = int.from_bytes(data[offset + size:offset + size + 4], "little")
            return _decode_sdwa(arch, layout, info, f, sig, word), size + 4
        if _has_literal(layout, info, f, sig):
            if offset + size + 4 > len(data):
                raise AsmError(f"truncated literal at byte {offset + size}", info.name, None, arch.name)
            literal = int.from_bytes(data[offset + size:offset + size + 4], "little")
            size += 4
        inst = _decode_fields(arch, layout, info, f, literal, enc, sig)
        return _exponent_text(_true16(inst) if info.name in TRUE16 else inst, info, arch), size
    raise AsmError(f"unknown instruction encoding 0x{dword0:08x} at byte {offset}", None, None, arch.name)


F16_BITS = {0.5: 0x3800, -0.5: 0xB800, 1.0: 0x3C00, -1.0: 0xBC00, 2.0: 0x4000, -2.0: 0xC000, 4.0: 0x4400,
            -4.0: 0xC400, INV_2PI: 0x3118}


def _b16_constant(op: Any) -> Any:
    """A constant of a 16-bit integer VALU source as llvm-objdump prints it: inline floats as their f16 bits,
    literals as their low 16 bits (what the operand reads)."""
    if isinstance(op, float):
        return Hex(F16_BITS[op])
    if isinstance(op, int) and not -16 <= op <= 64:
        return Hex(op & 0xFFFF)
    return op


def _b16_source(info: OpInfo, slot: int) -> bool:
    """Whether source ``slot`` is a 16-bit integer VALU operand (not packed, not v_ldexp_f16's exponent)."""
    return (info.width(slot) == 16 and not info.is_float(slot) and not info.name.startswith(PACKED)
            and info.name != "v_ldexp_f16")


def _true16(inst: Inst) -> Inst:
    """v_mov_b16's VGPR numbers back to halves (128 and up: the high half); constants as ``_b16_constant``."""
    ops: list[Any] = []
    for op in inst.operands:
        if isinstance(op, Reg) and op.kind == "v":
            op = Reg("v", op.index & 127, 1, "h" if op.index >= 128 else "l")
        else:
            op = _b16_constant(op)
        ops.append(op)
    inst.operands = tuple(ops)
    inst.enc = inst.enc or "e32"  # llvm-objdump names the encoding (v_mov_b16_e32)
    return inst


def _exponent_text(inst: Inst, info: OpInfo, arch: Arch) -> Inst:
    """v_ldexp_*'s exponent as llvm-objdump prints its modifier bits: -x / |x| in RDNA's VOP3 v_ldexp_f16,
    elsewhere ``sext(x)`` for the neg bit and nothing for abs."""
    if info.exponent_mods(2, arch.rdna) is None or len(inst.operands) < 3:
        return inst
    op = inst.operands[2]
    vop3 = inst.enc in ("e64", "e64_dpp") or info.fmt == "VOP3"
    if isinstance(op, Mod) and not (vop3 and info.exponent_mods(2, arch.rdna) == "negabs"):
        op = Sext(op.value) if op.neg else op.value
        inst.operands = (*inst.operands[:2], op, *inst.operands[3:])
    return inst


def _decode_dpp(arch: Arch, layout: Layout, info: OpInfo, f: dict[str, int], enc: str | None,
                sig: tuple[str, ...], word: int) -> Inst:
    """A VALU instruction whose src0 is a DPP marker: src0 and the DPP modifiers come from ``word``."""
    src0, negabs, mods = dpp.decode(f["src0"], word, arch)
    inst = _decode_fields(arch, layout, info, {**f, "src0": 256 + src0}, None, enc, sig)
    ops = list(inst.operands)
    if layout.name in ("VOP1", "VOP2", "VOPC"):  # neg/abs of src0 and src1 live in the DPP dword
        for k, role in ((0, "src0"), (1, "vsrc1")):
            bits = negabs >> (2 * k) & 3
            if bits and role in sig:
                i = sig.index(role)
                ops[i] = Mod(ops[i], bool(bits & 1), bool(bits & 2))
        inst.enc = None if info.fmt == "VOPC" else "dpp"
    else:
        inst.enc = "e64_dpp"
    inst.operands = tuple(ops)
    inst.mods.update(mods)
    return inst


def _decode_sdwa(arch: Arch, layout: Layout, info: OpInfo, f: dict[str, int], sig: tuple[str, ...],
                 word: int) -> Inst:
    """A gfx9 VOP1/VOP2/VOPC whose src0 is the SDWA marker: sources, selectors and modifiers from ``word``."""
    nsrc = sum(r in ("src0", "vsrc1") for r in sig)
    srcs, sdst, mods = sdwa.decode(word, info.fmt == "VOPC", nsrc)
    inst = _decode_fields(arch, layout, info, {**f, "src0": 256}, None, None, sig)
    d = _Decoder(arch, info, f, None)
    ops = list(inst.operands)
    for (_code, neg, ab, sext, scalar), role in zip(srcs, ("src0", "vsrc1"), strict=False):
        i = sig.index(role)
        raw = (word & 0xFF) if role == "src0" else f["vsrc1"]
        op: Any = d.scalar(raw, 1) if scalar else Reg("v", raw)
        if _b16_source(info, 1 if role == "src0" else 2):
            op = _b16_constant(op)
        if neg or ab:
            op = Mod(op, bool(neg), bool(ab))
        ops[i] = Sext(op) if sext else op
    if info.fmt == "VOPC" and sdst is not None:
        ops[0] = d.scalar(sdst, 2)
    if (False, "sdwa_src") in dpp_forms(arch.gen).get(info.name, ()):  # llvm-mc prints no dst selectors here
        mods.pop("dst_sel", None)
        mods.pop("dst_unused", None)
    inst.operands, inst.enc = tuple(ops), "sdwa"
    inst.mods.update(mods)
    return inst


def _decode_vopd(data: bytes, arch: Arch, offset: int, layout: Layout, f: dict[str, int]) -> tuple[Inst, int]:
    size = layout.bits // 8
    halves = []
    literal = None
    x, y = by_opcode(arch, "VOPD_X", f["opx"]), by_opcode(arch, "VOPD_Y", f["opy"])
    if x is None or y is None:
        raise AsmError(f"unknown VOPD opcodes {f['opx']}/{f['opy']} at byte {offset}", None, None, arch.name)
    infos = [x, y]
    needs = any("k" in i.sig for i in infos) or f["srcx0"] == LITERAL or f["srcy0"] == LITERAL
    if needs:
        literal = int.from_bytes(data[offset + size:offset + size + 4], "little")
        size += 4
    vdsty = f["vdsty"] << 1 | (1 - (f["vdstx"] & 1))
    for info, (src0, vsrc1, vdst) in zip(infos, ((f["srcx0"], f["vsrcx1"], f["vdstx"]),
                                                 (f["srcy0"], f["vsrcy1"], vdsty)), strict=True):
        d = _Decoder(arch, info, {}, literal)
        ops: list[Any] = []
        for role in info.sig:
            if role == "vdst":
                ops.append(Reg("v", vdst))
            elif role == "src0":
                ops.append(d.src(src0, 1))
            elif role == "vsrc1":
                ops.append(Reg("v", vsrc1))
            elif role == "vcc":
                ops.append(Reg("vcc_lo"))
            elif role == "k":
                ops.append(literal)
        halves.append(Inst(info.name, tuple(ops)))
    halves[0].dual = halves[1]
    return halves[0], size


__all__ = ["decode", "FILES"]

"""Encoders of the vector memory, interpolation and export formats: DS, FLAT/GLOBAL/SCRATCH,
MUBUF/MTBUF (VBUFFER on gfx12), VINTERP, LDSDIR and EXP.

In: an ``_Encoder`` (``tg_amd.encoding``) holding the instruction. Out: its bytes; ``AsmError`` for
operands or modifiers llvm-mc would refuse. ``tg_amd.encoder.encode`` picks the function by format.
"""
from __future__ import annotations

from tg_amd.arch import Arch, AsmError
from tg_amd.encoding import _Encoder, _no_mods, _operands, _signed, _unsigned
from tg_amd.inst import Inst
from tg_amd.isa import OpInfo, ds_count, two_offsets
from tg_amd.operands import OFF, Attr, Label, Mod, Reg, constant_code
from tg_amd.symbols import Sym, format_value, policy_value
from tg_amd.symbols import value as symbol_value


def _ds(enc: _Encoder) -> bytes:
    info, f, mods, arch = enc.info, enc.fields, enc.inst.mods, enc.arch
    two = two_offsets(info.name)
    allowed = ("offset0", "offset1") if two else ("offset",)
    _no_mods(enc, allowed + (("gds",) if arch.gen != 12 else ()))
    f["op"] = info.op
    kinds = ("v", "a") if arch.gen == 9 else ("v",)
    acc = set()
    for i, (role, o) in enumerate(zip(info.sig, _operands(enc, info.sig), strict=True)):
        what = enc.what(i, role)
        r = enc.vreg(o, ds_count(info, role), what, ("v",) if role == "addr" else kinds)
        if role != "addr":
            acc.add(r.kind)
        f[role] = r.index
    if len(acc) > 1:
        enc.fail("data and destination must all be VGPRs or all AGPRs")
    if "a" in acc:
        f["acc"] = 1
    if two:
        f["offset0"] = _unsigned(mods.get("offset0", 0), 8, "offset0", enc)
        f["offset1"] = _unsigned(mods.get("offset1", 0), 8, "offset1", enc)
    else:
        off = mods.get("offset", 0)
        off = _unsigned(symbol_value(off, arch) if isinstance(off, Sym) else off, 16, "offset", enc)
        f["offset0"], f["offset1"] = off & 0xFF, off >> 8
    if mods.get("gds"):
        f["gds"] = 1
    return enc.emit(enc.layout("DS"))


RETURN_FLAG = {11: "glc", 9: "sc0", 12: "th:TH_ATOMIC_RETURN"}


def returns(info: OpInfo, bit: int, arch: Arch) -> bool:
    """Whether an atomic returns the old value: glc (gfx11), sc0 (gfx942), an odd th (gfx12)."""
    return "atomic" in info.flags and bool(bit & 1)


def _return_bit(enc: _Encoder) -> int:
    mods, arch = enc.inst.mods, enc.arch
    if arch.gen == 12:
        th = mods.get("th", 0)
        return policy_value("th_atomic", th, arch) if isinstance(th, str) else int(th)
    return int(bool(mods.get(RETURN_FLAG[arch.gen])))


def _flat(enc: _Encoder) -> bytes:
    info, f, mods, arch = enc.info, enc.fields, enc.inst.mods, enc.arch
    flags = {11: ("glc", "slc", "dlc"), 9: ("sc0", "sc1", "nt"), 12: ("th", "scope")}[arch.gen]
    _no_mods(enc, ("offset",) + flags)
    glob = info.fmt == "GLOBAL"
    scratch = info.fmt == "SCRATCH"
    names = {"vaddr": "vaddr", "vdata": "vdata"} if arch.gen == 12 else {"vaddr": "addr", "vdata": "data"}
    if "atomic" in info.flags and len(enc.inst.operands) == len(info.sig) + 1:  # the returning form
        if not returns(info, _return_bit(enc), arch):
            enc.fail(f"instruction must use {RETURN_FLAG[arch.gen]}")
        count = info.count(3) // 2 if "cmpswap" in info.name else info.count(3)
        kinds = ("v", "a") if arch.gen == 9 else ("v",)
        f["vdst"] = enc.vreg(enc.inst.operands[0], count, enc.what(0, "vdst"), kinds).index
        enc.inst = Inst(enc.inst.name, enc.inst.operands[1:], enc.inst.mods, enc.inst.enc)
    ops = _operands(enc, info.sig)
    off_code = 0x7F if arch.gen == 9 else 0x7C
    saddr = ops[info.sig.index("saddr")] if "saddr" in info.sig else None
    kinds = ("v", "a") if arch.gen == 9 else ("v",)
    acc = set()
    for i, (role, o) in enumerate(zip(info.sig, ops, strict=True)):
        what = enc.what(i, role)
        if role == "saddr":
            if o is OFF:
                f["saddr"] = off_code
            else:
                f["saddr"] = enc.sreg(o, 1 if scratch else 2, what)
        elif role == "vaddr" and scratch:  # off, or one VGPR (then SVE is set)
            if o is not OFF:
                f[names["vaddr"]] = enc.vreg(o, 1, what).index
                f["sve"] = 1
        elif role == "vaddr":
            count = 1 if glob and saddr is not OFF else 2
            f[names["vaddr"]] = enc.vreg(o, count, what).index
        else:
            r = enc.vreg(o, info.count(0 if role == "vdst" else 3), what, kinds)
            acc.add(r.kind)
            f[names.get(role, role)] = r.index
    if not glob and not scratch:
        f["saddr"] = 0 if arch.gen == 9 else 0x7C
    elif "saddr" not in info.sig:  # global_inv, global_wb, ...: no address at all
        f["saddr"] = off_code
    if "a" in acc:
        if len(acc) > 1:
            enc.fail("data and destination must all be VGPRs or all AGPRs")
        f["acc"] = 1
    f["seg"] = 2 if glob else 1 if scratch else 0
    off = mods.get("offset", 0)
    if arch.gen == 12:
        f["offset"] = _signed(off, 24, "offset", enc)
    elif glob or scratch:
        f["offset"] = _signed(off, 13, "offset", enc)
    else:
        f["offset"] = _unsigned(off, 12, "offset", enc)
    for flag in flags:
        if mods.get(flag) is True:
            f[flag] = 1
    if arch.gen == 12:
        _policy(enc)
    return enc.emit(enc.layout("FLAT"))


def _policy(enc: _Encoder) -> None:
    """gfx12 cache policy: ``th:TH_LOAD_NT`` (names per loads, stores and atomics) and ``scope:SCOPE_SYS``."""
    mods, name = enc.inst.mods, enc.info.name
    kind = "th_atomic" if "_atomic_" in name else "th_store" if "_store_" in name else "th_load"
    for key, table in (("th", kind), ("scope", "scope")):
        if key in mods:
            value = mods[key]
            enc.fields[key] = (policy_value(table, value, enc.arch) if isinstance(value, str)
                               else _unsigned(value, 3 if key == "th" else 2, key, enc))
    # th 3 at system scope is BYPASS (loads, stores) and needs that name; BYPASS needs system scope
    bypass = str(mods.get("th", "")).endswith("_BYPASS")
    th3_system = enc.fields.get("th") == 3 and enc.fields.get("scope") == 3
    if bypass != th3_system:
        enc.fail("scope and th combination is not valid", "th")


def _buffer(enc: _Encoder) -> bytes:
    """buffer_* (MUBUF; VBUFFER on gfx12): vdata, vaddr (off, or VGPRs for idxen/offen), srsrc, soffset."""
    info, f, mods, arch = enc.info, enc.fields, enc.inst.mods, enc.arch
    flags = {11: ("glc", "slc", "dlc", "tfe"), 9: ("sc0", "sc1", "nt", "lds"), 12: ("tfe", "th", "scope")}[arch.gen]
    typed = info.name.startswith("tbuffer")
    if typed:
        flags = tuple(x for x in flags if x != "tfe")  # llvm-mc takes no tfe on tbuffer_*
    _no_mods(enc, ("offset", "offen", "idxen") + flags + (("format",) if typed else ()))
    f["op"] = info.op
    kinds = ("v", "a") if arch.gen == 9 else ("v",)
    naddr = int(bool(mods.get("offen"))) + int(bool(mods.get("idxen")))
    for i, (role, o) in enumerate(zip(info.sig, _operands(enc, info.sig), strict=True)):
        what = enc.what(i, role)
        if role == "vdata":
            r = enc.vreg(o, info.count(3) + int(bool(mods.get("tfe"))), what, kinds)
            f["vdata"] = r.index
            if r.kind == "a":
                f["acc"] = 1
        elif role == "vaddr":
            if naddr == 0:
                if o is not OFF:
                    enc.fail("the address is off without offen/idxen", what)
            else:
                f["vaddr"] = enc.vreg(o, naddr, what).index
        elif role == "srsrc":
            code = enc.sreg(o, 4, what)
            f["srsrc"] = code if arch.gen == 12 else code >> 2
        elif role == "soffset":
            if isinstance(o, Reg):
                f["soffset"] = enc.sreg(o, 1, what)
            elif arch.gen == 12:
                enc.fail("soffset is an SGPR, m0 or null", what)
            else:
                code, lit = constant_code(o, 32, False, info.name, what, arch)
                if lit is not None:
                    enc.fail("soffset takes an SGPR or an inline constant", what)
                f["soffset"] = code
    if "soffset" not in info.sig:
        f["soffset"] = (arch.null or 0) if arch.gen == 12 else 0  # gfx12: NULL
    for flag in ("offen", "idxen") + flags:
        if mods.get(flag) is True:
            f[flag] = 1
    f["offset"] = _unsigned(mods.get("offset", 0), 23 if arch.gen == 12 else 12, "offset", enc)
    if typed or arch.gen == 12:  # untyped buffer_* on gfx12 carry LLVM's default format too
        try:
            f["format"] = format_value(mods.get("format", 1), arch)
        except AsmError as e:
            enc.fail(str(e).split(" (")[0], "format")
    if arch.gen == 12:
        _policy(enc)
    return enc.emit(enc.layout("MTBUF" if info.fmt == "MTBUF" else "MUBUF"))


def _vinterp(enc: _Encoder) -> bytes:
    """v_interp_*: VGPR sources (neg only), clamp, op_sel (f16 forms), wait_exp:0..7."""
    info, f, mods = enc.info, enc.fields, enc.inst.mods
    _no_mods(enc, ("clamp", "op_sel", "wait_exp"))
    neg = 0
    for i, (role, o) in enumerate(zip(info.sig, _operands(enc, info.sig), strict=True)):
        what = enc.what(i, role)
        if role == "vdst":
            f["vdst"] = enc.vreg(o, 1, what).index
            continue
        k = int(role[-1])
        if isinstance(o, Mod):  # llvm-mc takes |v| here and drops the abs (the encoding has no abs bits)
            neg |= int(o.neg) << k
            o = o.value
        f[role] = 256 + enc.vreg(o, 1, what).index
    f["neg"] = neg
    f["wait_exp"] = _unsigned(mods.get("wait_exp", 0), 3, "wait_exp", enc)
    if mods.get("clamp"):
        f["clamp"] = 1
    if "op_sel" in mods:
        bits = list(mods["op_sel"])
        if len(bits) != 4 or "f16" not in info.name:
            enc.fail("op_sel takes 4 bits, on the f16 forms only", "op_sel")
        f["op_sel"] = sum(b << k for k, b in enumerate(bits))
    return enc.emit(enc.layout("VINTERP"))


def _ldsdir(enc: _Encoder) -> bytes:
    """lds_param_load / lds_direct_load (ds_* on gfx12): vdst, attrN.c, wait counters."""
    info, f, mods, arch = enc.info, enc.fields, enc.inst.mods, enc.arch
    waits = ("wait_va_vdst", "wait_vm_vsrc") if arch.gen == 12 else ("wait_vdst",)
    _no_mods(enc, waits)
    for i, (role, o) in enumerate(zip(info.sig, _operands(enc, info.sig), strict=True)):
        what = enc.what(i, role)
        if role == "vdst":
            f["vdst"] = enc.vreg(o, 1, what).index
        elif not isinstance(o, Attr):
            enc.fail("expected an attribute channel attr0.x .. attr32.w", what)
        elif o.index > 32:  # llvm-mc's limit
            enc.fail("out of bounds interpolation attribute number (attr0 .. attr32)", what)
        else:
            f["attr"], f["chan"] = o.index, o.chan
    f["wait_vdst"] = _unsigned(mods.get(waits[0], 0), 4, waits[0], enc)
    if arch.gen == 12:
        f["wait_vm_vsrc"] = _unsigned(mods.get("wait_vm_vsrc", 0), 1, "wait_vm_vsrc", enc)
    return enc.emit(enc.layout("LDSDIR"))


# export targets (RDNA): mrt0..7, mrtz, pos0..4, prim, dual_src_blend0/1
EXP_TARGETS = {**{f"mrt{i}": i for i in range(8)}, "mrtz": 8, **{f"pos{i}": 12 + i for i in range(5)}, "prim": 20,
               "dual_src_blend0": 21, "dual_src_blend1": 22}


def _exp(enc: _Encoder) -> bytes:
    """exp / export <target> v0, v1, off, v3 [done] [row_en]: ``off`` leaves a channel disabled."""
    info, f, mods = enc.info, enc.fields, enc.inst.mods
    _no_mods(enc, ("done", "row_en"))
    f.pop("op", None)  # one instruction: no opcode field
    ops = _operands(enc, info.sig)
    target = ops[0].name if isinstance(ops[0], Label) else None
    if target not in EXP_TARGETS:
        enc.fail(f"unknown export target (known: {', '.join(EXP_TARGETS)})", enc.what(0, "target"))
    f["target"] = EXP_TARGETS[target]
    en = 0
    for k, o in enumerate(ops[1:]):
        if o is not OFF:
            f[f"vsrc{k}"] = enc.vreg(o, 1, enc.what(k + 1, f"vsrc{k}")).index
            en |= 1 << k
    f["en"] = en
    for flag in ("done", "row_en"):
        if mods.get(flag):
            f[flag] = 1
    return enc.emit(enc.layout("EXP"))

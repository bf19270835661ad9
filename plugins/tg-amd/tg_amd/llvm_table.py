"""The opcodes LLVM's disassembler lists (``tables/llvm19_<arch>.txt``) turned into ``OpInfo`` rows.

In: one listing row -- encoding family, opcode, the instruction word, LLVM's text of it -- where the
word holds distinct registers in its operand fields (destination 8, sources 16/24/32, SGPR address
40; see ``tests/llvm_opcodes.py``). Out: the mnemonic's ``OpInfo``: operand roles in LLVM's order
(which field each printed register came from), register counts from the printed ranges, operand
types from the mnemonic. ``isa`` adds these rows for every mnemonic the hand-written tables lack;
a row of a family tg-amd cannot encode yet is listed in ``unsupported`` with the reason.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tg_amd.operands import SPECIALS

TABLES = Path(__file__).parent / "tables"
GEN_ARCH = {11: "gfx1100", 12: "gfx1200", 9: "gfx942"}
MOD_RE = re.compile(r"^[a-z_0-9]+:")  # offset:16, wait_exp:0, ...
REG_RE = re.compile(r"^(s|v|a|ttmp)(?:(\d+)|\[(\d+):(\d+)\])$")
# families tg-amd encodes; the others are listed as unsupported
ENCODED = {"SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "DS",
           "FLAT", "GLOBAL", "MUBUF", "VBUFFER", "SCRATCH", "MTBUF", "VINTERP", "LDSDIR", "MIMG", "VIMAGE", "VSAMPLE"}


# mnemonics whose operands the listing's fields do not tell apart: their roles and register counts
SHAPES: dict[str, tuple[tuple[str, ...], tuple[int, int, int, int]]] = {
    "s_atc_probe": (("probe", "sbase", "soff"), (1, 1, 1, 1)),  # a 7-bit immediate in the SDATA field
    "s_atc_probe_buffer": (("probe", "sbuf", "soff"), (1, 1, 1, 1)),
    "s_sendmsg_rtn_b32": (("sdst", "msg"), (1, 1, 1, 1)),  # the message id in the SSRC0 field
    "s_sendmsg_rtn_b64": (("sdst", "msg"), (2, 1, 1, 1)),
    # gfx12 prefetch: address, 24-bit offset, SGPR/m0/null offset, length (SDATA field)
    "s_prefetch_data": (("sbase", "ioffset", "soffset", "plen"), (1, 1, 1, 1)),
    "s_prefetch_inst": (("sbase", "ioffset", "soffset", "plen"), (1, 1, 1, 1)),
    "s_buffer_prefetch_data": (("sbuf", "ioffset", "soffset", "plen"), (1, 1, 1, 1)),
    "s_prefetch_data_pc_rel": (("ioffset", "soffset", "plen"), (1, 1, 1, 1)),
    "s_prefetch_inst_pc_rel": (("ioffset", "soffset", "plen"), (1, 1, 1, 1)),
    "v_mqsad_u32_u8": (("vdst", "src0", "src1", "vsrc2"), (4, 2, 1, 4)),  # VGPR-only 128-bit accumulator
    "v_permlane16_var_b32": (("vdst", "vsrc0", "vsrc1"), (1, 1, 1, 1)),
    "v_permlanex16_var_b32": (("vdst", "vsrc0", "vsrc1"), (1, 1, 1, 1)),
    "ds_bvh_stack_rtn_b32": (("vdst", "addr", "data0", "data1"), (1, 1, 1, 1)),  # data1: 4 VGPRs (isa.DS_DATA1)
    "s_set_gpr_idx_on": (("ssrc0", "gpridx"), (1, 1, 1, 1)),  # gpr_idx(SRC0,DST): a 4-bit mode in SSRC1
}
# operand types (dst,src0,src1,src2) the mnemonic does not spell
TYPES = {
    "v_sat_pk_u8_i16": "b16,b32", "v_trig_preop_f64": "f64,f64,u32", "v_cvt_pk_u8_f32": "b32,f32,u32,u32",
    "v_cvt_pkaccum_u8_f32": "b32,f32,u32", "v_cvt_pk_fp8_f32": "b32,f32,f32", "v_cvt_pk_bf8_f32": "b32,f32,f32",
    "v_cvt_sr_fp8_f32": "b32,f32,u32", "v_cvt_sr_bf8_f32": "b32,f32,u32",
    # LLVM's operand classes: v_sad_u16 is all 32-bit; v_mad_u32_u16 accumulates a u32
    "v_sad_u16": "u32,u32,u32,u32", "v_mad_u32_u16": "u32,u16,u16,u32",
}
# VOP1 instructions whose source must be a VGPR
VGPR_SOURCE = ("v_movrel", "v_swap", "v_permlane64", "v_swaprel", "v_permlane16_b32", "v_permlanex16_b32")


@dataclass(frozen=True)
class Row:
    family: str
    op: int
    word: int
    text: str

    @property
    def name(self) -> str:
        return self.text.split()[0]


@cache
def listing(gen: int) -> tuple[Row, ...]:
    """The rows of the arch the generation's encodings follow."""
    rows = []
    for line in (TABLES / f"llvm19_{GEN_ARCH[gen]}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            family, op, word, text = line.split("\t")
            rows.append(Row(family, int(op, 0), int.from_bytes(bytes.fromhex(word), "little"), text))
    return tuple(rows)


@cache
def dpp_forms(gen: int) -> dict[str, frozenset[tuple[bool, str]]]:
    """mnemonic -> its DPP forms as (VOP3?, "dpp16" | "dpp8"), as llvm-mc reads them (``llvm19_dpp.txt``)."""
    forms: dict[str, set[tuple[bool, str]]] = {}
    for line in (TABLES / "llvm19_dpp.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            arch, family, kind, name = line.split("\t")
            if arch == GEN_ARCH[gen]:
                forms.setdefault(name, set()).add((family == "VOP3", kind))
    return {name: frozenset(v) for name, v in forms.items()}


@cache
def hex_immediates(gen: int) -> frozenset[str]:
    """SOPP/SOPK mnemonics whose immediate llvm-mc prints in hex (``s_clause 0x3`` but ``s_nop 3``)."""
    return frozenset(r.name for r in listing(gen)
                     if r.family in ("SOPP", "SOPK") and r.text.split()[-1].startswith("0x"))


def _fields(gen: int, family: str) -> list[tuple[str, int, int, str]]:
    """(role, low bit, width, kind) of the operand fields: kind ``s`` SGPR code, ``v`` VGPR number,
    ``src`` 9-bit source code (>= 256: VGPR), ``sbase`` SGPR pair / 2."""
    if family in ("SOP1", "SOP2", "SOPK"):
        base = [("sdst", 16, 7, "s"), ("ssrc0", 0, 8, "s")]
        return base + [("ssrc1", 8, 8, "s")] if family == "SOP2" else base[:1] if family == "SOPK" else base
    if family == "SOPC":
        return [("ssrc0", 0, 8, "s"), ("ssrc1", 8, 8, "s")]
    if family == "SMEM":
        soff = [] if gen == 9 else [("soff", 57, 7, "s")]
        return [("sdata", 6, 7, "s"), ("sbase", 0, 6, "sbase"), *soff]
    if family == "VOP1":
        return [("vdst", 17, 8, "v"), ("src0", 0, 9, "src")]
    if family == "VOP2":
        return [("vdst", 17, 8, "v"), ("src0", 0, 9, "src"), ("vsrc1", 9, 8, "v")]
    if family == "VOPC":
        return [("src0", 0, 9, "src"), ("vsrc1", 9, 8, "v")]
    if family in ("VOP3", "VOP3P"):
        sd = [("sdst", 8, 7, "s")] if family == "VOP3" else []
        return [("vdst", 0, 8, "v"), ("src0", 32, 9, "src"), ("src1", 41, 9, "src"), ("src2", 50, 9, "src"), *sd]
    if family == "DS":
        return [("vdst", 56, 8, "v"), ("addr", 32, 8, "v"), ("data0", 40, 8, "v"), ("data1", 48, 8, "v")]
    if family in ("FLAT", "GLOBAL"):
        if gen == 12:
            return [("vdst", 32, 8, "v"), ("vaddr", 64, 8, "v"), ("vdata", 55, 8, "v"), ("saddr", 0, 7, "s")]
        return [("vdst", 56, 8, "v"), ("vaddr", 32, 8, "v"), ("vdata", 40, 8, "v"), ("saddr", 48, 7, "s")]
    return []


def _operand_tokens(rest: str) -> list[str]:
    """The operands of LLVM's text (modifiers such as ``glc`` or ``wait_exp:0`` dropped)."""
    if not rest:
        return []
    depth, cur, parts = 0, "", []
    for ch in rest:
        depth += ch in "[(" and 1 or (ch in "])" and -1 or 0)
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    parts[-1] = parts[-1].split(" ")[0] if not parts[-1].startswith(("hwreg(", "sendmsg(")) else parts[-1]
    return [p for p in parts if p and not MOD_RE.match(p)]


def _reg(tok: str) -> tuple[str, int, int] | None:
    m = REG_RE.match(tok)
    if not m:
        return None
    kind, one, lo, hi = m.groups()
    if one is not None:
        return kind, int(one), 1
    return kind, int(lo), int(hi) - int(lo) + 1


def _sgpr_index(code: int) -> tuple[str, int]:
    return ("ttmp", code - 108) if 108 <= code <= 123 else ("s", code)


@dataclass(frozen=True)
class Derived:
    name: str
    family: str
    op: int
    sig: tuple[str, ...]
    regs: tuple[int, int, int, int]


SLOT = {"vdst": 0, "sdst": 0, "sdata": 0, "src0": 1, "ssrc0": 1, "vsrc0": 1, "addr": 1, "vaddr": 1, "sbase": 1,
        "sbuf": 1, "src1": 2, "ssrc1": 2, "vsrc1": 2, "src2": 3, "ssrc2": 3, "data0": 3, "data1": 3, "vdata": 3}


def derive(gen: int, row: Row) -> Derived | str:
    """The roles and register counts of ``row``; or why tg-amd cannot encode it."""
    if row.family not in ENCODED:
        return f"{row.family} instructions are not supported yet"
    name, _, rest = row.text.partition(" ")
    name = name.removesuffix("_e32").removesuffix("_e64")
    if name in SHAPES:
        return Derived(name, row.family, row.op, *SHAPES[name])
    if row.family in ("MUBUF", "VBUFFER", "MTBUF"):
        return _buffer(name, row, rest)
    if row.family == "SCRATCH":
        return _scratch(name, row, rest)
    if row.family in ("MIMG", "VIMAGE", "VSAMPLE"):  # counts follow dmask, dim and a16 (tg_amd.image)
        sampler = len(_operand_tokens(rest.strip())) == 4
        return Derived(name, row.family, row.op, ("vdata", "vaddr", "srsrc") + (("ssamp",) if sampler else ()),
                       (1, 1, 1, 1))
    if row.family == "VINTERP":
        return Derived(name, "VINTERP", row.op, ("vdst", "src0", "src1", "src2"), (1, 1, 1, 1))
    if row.family == "LDSDIR":
        return Derived(name, "LDSDIR", row.op, ("vdst", "attr") if "attr" in rest else ("vdst",), (1, 1, 1, 1))
    if name.startswith("v_smfmac"):  # D (accumulated), A, B as printed; the index VGPR in C's field
        printed = [r for r in map(_reg, _operand_tokens(rest.strip())) if r is not None]
        return Derived(name, row.family, row.op, ("mdst", "msrc0", "msrc1", "vidx"),
                       (printed[0][2], printed[1][2], printed[2][2], 1))
    if re.search(r"\bv\d+\.[lh]\b", rest):  # true16 halves (v_mov_b16): tg_amd.encoder.TRUE16
        return Derived(name, row.family, row.op, ("vdst", "src0"), (1, 1, 1, 1))
    tokens = _operand_tokens(rest.strip())
    fields = _fields(gen, row.family)
    values = {}
    for field, lo, width, kind in fields:
        raw = row.word >> lo & ((1 << width) - 1)
        if kind == "src":
            values[field] = ("v", raw - 256) if raw >= 256 else _sgpr_index(raw)
        elif kind == "v":
            values[field] = ("v", raw)
        elif kind == "sbase":
            values[field] = _sgpr_index(raw << 1)
        else:
            values[field] = _sgpr_index(raw)
    sig: list[str] = []
    regs = [1, 1, 1, 1]
    used: set[str] = set()
    for tok in tokens:
        reg = _reg(tok)
        if reg is not None:
            kind, index, count = reg
            want = ("s", index) if kind in ("s", "ttmp") else ("v", index)
            if kind == "ttmp":
                want = ("ttmp", index)
            if kind == "a":
                want = ("v", index)
            role = next((r for r, v in values.items() if r not in used and v == want), None)
            if role is None and kind in ("s", "ttmp") and values.get("vdst", ("", -1))[1] == index:
                role = "vdst"  # v_s_exp_f32 and the like: a scalar result in the VDST field
            if role is None:
                return f"cannot tell which field operand {tok} of {row.text!r} comes from"
            used.add(role)
            if kind in ("s", "ttmp") and role in ("vdst",):
                role = "sdst"
            elif kind in ("s", "ttmp") and role in ("src0", "src1", "src2") and row.family in ("VOP3", "VOP3P"):
                role = "s" + role  # the field decoded only with an SGPR: a scalar-only source
            elif kind in ("s", "ttmp") and role == "src0" and row.family in ("VOP1", "VOP2", "VOPC"):
                pass
            elif role == "sbase" and count == 4:
                role = "sbuf"
            if role == "src0" and row.family == "VOP1" and values["vdst"][0] == "v" and "sdst" in sig:
                role = "vsrc0"
            sig.append(role)
            regs[SLOT.get(role, 1)] = count
        elif tok in ("vcc_lo", "vcc"):
            sig.append("vcc")
        elif tok in SPECIALS or tok == "off":
            role = "saddr" if tok == "off" and row.family in ("FLAT", "GLOBAL") else None
            if role is None:
                return f"fixed operand {tok} in {row.text!r}"
            used.add(role)
            sig.append(role)
        elif tok == "0x11223344":
            sig.append("k")
        elif row.family in ("SOPK", "SOPP", "SMEM") or tok.startswith(("hwreg(", "sendmsg(")):
            if row.family == "SMEM":
                sig.append("soff")
            elif name.startswith(("s_branch", "s_cbranch", "s_call", "s_subvector_loop")):
                sig.append("label")
            elif name == "s_waitcnt":
                sig.append("waitcnt")
            else:
                sig.append("simm16")
        else:
            return f"operand {tok} of {row.text!r} not understood"
    if row.family == "SOPP" and sig == ["simm16"] and not _takes_imm(name):
        sig = []
    if name.startswith("v_readfirstlane") or (row.family == "VOP1" and sig[:1] == ["sdst"]):
        sig = ["sdst", "vsrc0"][: len(sig)]
    if name.startswith(VGPR_SOURCE) and "src0" in sig:
        sig[sig.index("src0")] = "vsrc0"
    return Derived(name, row.family, row.op, tuple(sig), (regs[0], regs[1], regs[2], regs[3]))


def _buffer(name: str, row: Row, rest: str) -> Derived | str:
    """``buffer_*``: vdata (count as printed), vaddr (off or VGPRs, by offen/idxen), srsrc, soffset."""
    family = "MTBUF" if row.family == "MTBUF" else "MUBUF"  # gfx12's tbuffer_* are VBUFFER opcodes
    tokens = _operand_tokens(rest.strip())
    if not tokens:
        return Derived(name, family, row.op, (), (1, 1, 1, 1))
    if len(tokens) == 3:  # buffer_load_lds_*: no data register
        return Derived(name, family, row.op, ("vaddr", "srsrc", "soffset"), (1, 1, 1, 1))
    reg = _reg(tokens[0])
    if reg is None or len(tokens) != 4:
        return f"cannot read the operands of {row.text!r}"
    return Derived(name, family, row.op, ("vdata", "vaddr", "srsrc", "soffset"), (1, 1, 1, reg[2]))


def _scratch(name: str, row: Row, rest: str) -> Derived | str:
    """``scratch_*``: loads vdst, vaddr, saddr; stores vaddr, vdata, saddr (addresses: off or one register)."""
    regs = [r for r in map(_reg, _operand_tokens(rest.strip())) if r is not None]
    count = regs[0][2] if regs else 1
    if "_lds_" in name:
        return Derived(name, "SCRATCH", row.op, ("vaddr", "saddr"), (1, 1, 1, 1))
    if "_store_" in name:
        return Derived(name, "SCRATCH", row.op, ("vaddr", "vdata", "saddr"), (1, 1, 1, count))
    return Derived(name, "SCRATCH", row.op, ("vdst", "vaddr", "saddr"), (count, 1, 1, 1))


def _takes_imm(name: str) -> bool:
    """SOPP instructions whose immediate is an operand in LLVM syntax (the others print it only when
    nonzero: ``s_endpgm``, ``s_barrier``, ``s_icache_inv``, ...)."""
    bare = ("s_endpgm", "s_barrier", "s_wakeup", "s_icache_inv", "s_code_end", "s_endpgm_saved",
            "s_endpgm_ordered_ps_done", "s_ttracedata", "s_wait_idle", "s_barrier_leave", "s_set_inst_prefetch")
    return name not in bare

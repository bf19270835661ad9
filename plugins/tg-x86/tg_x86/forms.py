"""Encoding forms of every ``Op``, written the way the Intel SDM writes them.

In: the text table below, one row per form: ``OP | operand types | opcode | Op/En``.
Out: ``FORMS[op]``, the op's ``Form``s in preference order (the encoder takes the first
whose operand types accept the operands, so short immediates and reg,reg MR forms come
first), each with its operand types (``OpType``) and parsed opcode (``Encoding``).

Opcode column (SDM notation): legacy prefixes ``66``/``F2``/``F3``, ``REX.W``, opcode bytes,
``+r`` (register in the low 3 bits), ``+cc`` (condition code added), ``/r`` or ``/0``..``/7``
(ModRM), ``ib iw id io`` (immediates), ``cb cd`` (jump displacements), ``/is4`` (register
in imm8[7:4]); VEX forms start with ``VEX.{128,256,LIG}.{66,F2,F3}.{0F,0F38,0F3A}.{W0,W1,WIG}``, AVX-512
forms with ``EVEX.512...`` the same way (only 512-bit EVEX forms so far: the xmm/ymm forms are the VEX ones).

AVX-512 operand types: ``zmm`` (zmm0-31), ``k`` (opmask k0-7), ``zmm{k}{z}`` (a zmm destination that may be
``Masked``, merging or zeroing), ``m512{k}`` (a store that may be masked, merging), ``m32bcst``/``m64bcst`` (an
embedded broadcast ``Bcst`` filling the form's vector). An EVEX memory operand's disp8 counts units of N bytes
(disp8*N): N is the memory operand's size (the SDM's tuple types Full, Full Mem and Tuple1 Scalar of the forms
here), or the element's for a broadcast.

Op/En column, one letter per operand: R ModRM.reg, M ModRM.rm, V VEX.vvvv, I immediate,
O opcode+r, L is4 register, D jump displacement, C implied (not encoded, e.g. cl).
``ZO`` means no operands.

Row templates: ``v`` in a type (``rv``, ``r/mv``) expands to 16/32/64-bit rows (prefix 66,
none, REX.W) and ``iz`` to iw/id/id; ``X``, ``X/M``, ``M`` with ``VEX.L`` expand to a
128-bit (xmm, xmm/m128) and a 256-bit (ymm, ymm/m256) row.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from tg_x86.isa import Op
from tg_x86.operands import IMM_RANGES, PTR_NAMES, REGS, Bcst, Imm, Label, Masked, Mem, Operand, Reg, imm, kreg, ptr


@dataclass(frozen=True)
class OpType:
    """What one operand of a form accepts: a register class, a memory size, or both; or an immediate."""
    text: str
    reg: tuple[str, int] | None = None   # (kind, bits) of an accepted register
    mem: int | None = None               # accepted memory size in bits, 0: any size (lea)
    imm: tuple[int, int] | None = None   # accepted immediate range [lo, hi]
    imm_bits: int = 0                    # bits of the immediate field
    fixed: str | None = None             # an implied register, by name
    rel: int = 0                         # bits of a jump displacement (matches labels)
    masked: str = ""                     # AVX-512: "k" may be Masked (merging), "kz" (merging or zeroing)
    bcst: tuple[int, int] | None = None  # AVX-512: an accepted broadcast (element bits, lanes)
    # the shapes of the operands it accepts (``accepts`` tried on an operand of each shape), set by __post_init__
    shapes: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shapes", frozenset(s for s, o in _SAMPLES.items() if self.accepts(o)))

    @property
    def allows_mem(self) -> bool:
        return self.mem is not None

    def accepts(self, o: Operand) -> bool:
        if isinstance(o, Masked):
            return bool(self.masked) and (not o.zero or self.masked == "kz") and self.accepts(o.target)
        if isinstance(o, Bcst):
            return self.bcst == (o.mem.bits, o.count)
        if isinstance(o, Reg):
            if self.fixed is not None:
                return o.name == self.fixed
            return self.reg == (o.kind, o.bits)
        if isinstance(o, Mem):
            return self.mem is not None and (self.mem == 0 or o.bits == self.mem)
        if isinstance(o, Imm):
            return self.imm is not None and self.imm[0] <= o.value <= self.imm[1]
        return isinstance(o, Label) and self.rel != 0


def _samples() -> dict[int, Operand]:
    """An operand of each shape there is (what a form's choice depends on, ``operands.shape_id``): every register,
    a memory operand of each size, a label, and immediates on both sides of each range's ends (which ranges hold
    a value changes only there)."""
    imms = {v for lo, hi in IMM_RANGES for v in (lo - 1, lo, hi, hi + 1)}
    samples: list[Operand] = [*REGS.values(), *(ptr(bits) for bits in (None, *PTR_NAMES)), Label()]
    samples += map(imm, sorted(imms))
    k1 = kreg(1)
    samples += [Masked(r, k1, z) for r in REGS.values() if r.kind != "gpr" for z in (False, True)]
    samples += [Masked(ptr(bits), k1) for bits in (128, 256, 512)]
    samples += [Bcst(ptr(bits), vec // bits) for bits in (32, 64) for vec in (128, 256, 512)]
    return {o.shape: o for o in samples}


_SAMPLES = _samples()


IMM_TYPES = {  # name: (range, field bits); simm forms are sign-extended to the operand size
    "imm8": ((-(1 << 7), (1 << 8) - 1), 8), "simm8": ((-(1 << 7), (1 << 7) - 1), 8),
    "imm16": ((-(1 << 15), (1 << 16) - 1), 16),
    "imm32": ((-(1 << 31), (1 << 32) - 1), 32), "simm32": ((-(1 << 31), (1 << 31) - 1), 32),
    "imm64": ((-(1 << 63), (1 << 64) - 1), 64),
}
# the encoder picks forms by operand shape: an immediate's shape says which of IMM_RANGES hold it
assert {rng for rng, _ in IMM_TYPES.values()} <= set(IMM_RANGES), "operands.IMM_RANGES misses a range"


@functools.cache  # a few dozen types, each in many rows
def parse_type(text: str) -> OpType:
    if text in IMM_TYPES:
        rng, bits = IMM_TYPES[text]
        return OpType(text, imm=rng, imm_bits=bits)
    if text in ("rel8", "rel32"):
        return OpType(text, rel=int(text[3:]))
    if text == "cl":
        return OpType(text, fixed="cl")
    if text == "m":
        return OpType(text, mem=0)
    if m := re.fullmatch(r"r/m(\d+)", text):
        return OpType(text, reg=("gpr", int(m[1])), mem=int(m[1]))
    reg: tuple[str, int] | None = None
    mem = None
    bcst = None
    masked = "kz" if text.endswith("{k}{z}") else "k" if text.endswith("{k}") else ""
    for alt in text.removesuffix("{z}").removesuffix("{k}").split("/"):
        if m := re.fullmatch(r"r(\d+)", alt):
            reg = ("gpr", int(m[1]))
        elif alt in VEC_TYPES:
            reg = (alt, VEC_TYPES[alt])
        elif alt == "k":
            reg = ("k", 64)
        elif m := re.fullmatch(r"m(\d+)", alt):
            mem = int(m[1])
        elif m := re.fullmatch(r"m(32|64)bcst", alt):
            if reg is None:
                raise ValueError(f"a broadcast needs the vector it fills: {text!r}")
            bcst = (int(m[1]), reg[1] // int(m[1]))
        else:
            raise ValueError(f"bad operand type {text!r}")
    return OpType(text, reg=reg, mem=mem, masked=masked, bcst=bcst)


VEC_TYPES = {"xmm": 128, "ymm": 256, "zmm": 512}


@dataclass(frozen=True)
class Vex:
    l: int      # VEX.L: 0 for 128-bit and scalar, 1 for 256-bit
    pp: int     # implied prefix: 0 none, 1 66, 2 F3, 3 F2
    map: int    # opcode map: 1 0F, 2 0F38, 3 0F3A
    w: int      # VEX.W


@dataclass(frozen=True)
class Encoding:
    prefixes: bytes            # legacy (mandatory) prefixes, emitted before REX
    rex_w: bool
    vex: Vex | None            # a VEX form (``l``: VEX.L)
    evex: Vex | None           # an EVEX form (``l``: EVEX.L'L, 2 for 512 bits)
    opcode: bytes
    plus_r: bool               # low 3 bits of the last opcode byte hold a register
    plus_cc: bool              # the condition code is added to the last opcode byte
    modrm: int | None          # None: no ModRM; -1: /r; 0..7: /digit in ModRM.reg
    imms: tuple[int, ...]      # immediate field sizes in bytes, in order
    rel: int                   # jump displacement size in bytes (0: none)
    is4: bool                  # an imm8 whose high nibble names a register


_PP = {"": 0, "66": 1, "F3": 2, "F2": 3}
_LENGTHS = {"256": 1, "512": 2}   # VEX.L / EVEX.L'L; 128, LIG and L0 are 0
_MAP = {"0F": 1, "0F38": 2, "0F3A": 3}
_IMM_BYTES = {"ib": 1, "iw": 2, "id": 4, "io": 8}


def parse_encoding(text: str) -> Encoding:
    tokens = text.split()
    prefixes, opcode, imms = bytearray(), bytearray(), []
    rex_w = plus_r = plus_cc = is4 = False
    vex, evex, modrm, rel = None, None, None, 0
    for tok in tokens:
        if tok.startswith(("VEX.", "EVEX.")):
            fields = tok.split(".")[1:]
            length = fields.pop(0)
            w = fields.pop() if fields[-1].startswith("W") else "WIG"
            mapname = fields.pop()
            pp = fields[0] if fields else ""
            prefix = Vex(_LENGTHS.get(length, 0), _PP[pp], _MAP[mapname], 1 if w == "W1" else 0)
            if tok.startswith("EVEX."):
                evex = prefix
            else:
                vex = prefix
        elif tok == "REX.W":
            rex_w = True
        elif tok in ("66", "F2", "F3") and not opcode and vex is None and evex is None:
            prefixes.append(int(tok, 16))
        elif tok == "/r":
            modrm = -1
        elif tok == "/is4":
            is4 = True
        elif re.fullmatch(r"/[0-7]", tok):
            modrm = int(tok[1])
        elif tok in _IMM_BYTES:
            imms.append(_IMM_BYTES[tok])
        elif tok in ("cb", "cd"):
            rel = 1 if tok == "cb" else 4
        elif m := re.fullmatch(r"([0-9A-F]{2})(\+r|\+cc)?", tok):
            opcode.append(int(m[1], 16))
            plus_r, plus_cc = m[2] == "+r", m[2] == "+cc"
        else:
            raise ValueError(f"bad opcode token {tok!r} in {text!r}")
    return Encoding(bytes(prefixes), rex_w, vex, evex, bytes(opcode), plus_r, plus_cc, modrm, tuple(imms), rel,
                    is4)


@dataclass(frozen=True)
class Form:
    op: Op
    operands: tuple[OpType, ...]
    encoding: Encoding
    op_en: str      # one letter per operand (see module docstring)
    text: str       # the table row, for messages
    shapes: tuple[frozenset[int], ...] = field(init=False, repr=False, compare=False)  # each operand type's

    def __post_init__(self) -> None:
        object.__setattr__(self, "shapes", tuple(t.shapes for t in self.operands))

    def accepts(self, operands: tuple[Operand, ...]) -> bool:
        if len(operands) != len(self.operands):
            return False
        return all(t.accepts(o) for t, o in zip(self.operands, operands, strict=True))


# ---- the table ---------------------------------------------------------------------------------

_ALU = {"ADD": (0x00, 0), "OR": (0x08, 1), "AND": (0x20, 4), "SUB": (0x28, 5), "XOR": (0x30, 6), "CMP": (0x38, 7)}
_UNARY = {"NOT": ("F6", "F7", 2), "NEG": ("F6", "F7", 3), "INC": ("FE", "FF", 0), "DEC": ("FE", "FF", 1),
          "MUL": ("F6", "F7", 4), "IMUL1": ("F6", "F7", 5), "DIV": ("F6", "F7", 6), "IDIV": ("F6", "F7", 7)}
_SHIFTS = {"SHL": 4, "SHR": 5, "SAR": 7}
# vpmov{zx,sx}: suffix -> (opcode low nibble, source memory bits for the 128-bit form)
_PMOV = {"BW": (0, 64), "BD": (1, 32), "BQ": (2, 16), "WD": (3, 64), "WQ": (4, 32), "DQ": (5, 64)}
# float arithmetic: name -> opcode (0F map), for ss/sd/ps/pd
_FARITH = {"VADD": "58", "VMUL": "59", "VSUB": "5C", "VMIN": "5D", "VDIV": "5E", "VMAX": "5F"}
# packed integer ops, VEX.L.66.<map>.<W> <opcode> /r, RVM
_PINT = {"VPADDB": "0F.WIG FC", "VPADDW": "0F.WIG FD", "VPADDD": "0F.WIG FE", "VPADDQ": "0F.WIG D4",
         "VPSUBB": "0F.WIG F8", "VPSUBW": "0F.WIG F9", "VPSUBD": "0F.WIG FA", "VPSUBQ": "0F.WIG FB",
         "VPMULLW": "0F.WIG D5", "VPMULLD": "0F38.WIG 40", "VPMULDQ": "0F38.WIG 28", "VPMULUDQ": "0F.WIG F4",
         "VPAND": "0F.WIG DB", "VPANDN": "0F.WIG DF",
         "VPOR": "0F.WIG EB", "VPXOR": "0F.WIG EF", "VPMAXSD": "0F38.WIG 3D", "VPMINSD": "0F38.WIG 39",
         "VPMAXUD": "0F38.WIG 3F", "VPMINUD": "0F38.WIG 3B",
         "VPCMPEQB": "0F.WIG 74", "VPCMPEQW": "0F.WIG 75", "VPCMPEQD": "0F.WIG 76", "VPCMPEQQ": "0F38.WIG 29",
         "VPCMPGTB": "0F.WIG 64", "VPCMPGTW": "0F.WIG 65", "VPCMPGTD": "0F.WIG 66", "VPCMPGTQ": "0F38.WIG 37",
         "VPSLLVD": "0F38.W0 47", "VPSLLVQ": "0F38.W1 47", "VPSRLVD": "0F38.W0 45", "VPSRLVQ": "0F38.W1 45",
         "VPSRAVD": "0F38.W0 46", "VPSHUFB": "0F38.WIG 00", "VPACKUSDW": "0F38.WIG 2B",
         "VPACKUSWB": "0F.WIG 67", "VPMADDUBSW": "0F38.WIG 04", "VPMADDWD": "0F.WIG F5"}
# packed shifts by an immediate: VEX.L.66.0F.WIG <opcode> /<digit> ib, VMI
_PSHIFT_IMM = {"VPSLLW": "71 /6", "VPSLLD": "72 /6", "VPSLLQ": "73 /6", "VPSRLW": "71 /2", "VPSRLD": "72 /2",
               "VPSRLQ": "73 /2", "VPSRAW": "71 /4", "VPSRAD": "72 /4", "VPSRLDQ": "73 /3", "VPSLLDQ": "73 /7"}
# float logic, VEX.L.0F.WIG <opcode> /r, RVM
_FLOGIC = {"VANDPS": "54", "VANDNPS": "55", "VORPS": "56", "VXORPS": "57", "VUNPCKLPS": "14", "VUNPCKHPS": "15"}


def _evex_rows() -> list[str]:
    """AVX-512 (EVEX, 512-bit) forms of what GEMM, conv and elementwise kernels need: masked (merging or zeroing)
    destinations, loads and stores; arithmetic and FMA with a memory operand or an embedded broadcast."""
    rows = []
    for op, opc in _FARITH.items():
        rows += [f"{op}PS | zmm{{k}}{{z}}, zmm, zmm/m512/m32bcst | EVEX.512.0F.W0 {opc} /r | RVM",
                 f"{op}PD | zmm{{k}}{{z}}, zmm, zmm/m512/m64bcst | EVEX.512.66.0F.W1 {opc} /r | RVM"]
    for order, base in (("132", 0x98), ("213", 0xA8), ("231", 0xB8)):
        rows += [f"VFMADD{order}PS | zmm{{k}}{{z}}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F38.W0 {base:02X} /r | RVM",
                 f"VFMADD{order}PD | zmm{{k}}{{z}}, zmm, zmm/m512/m64bcst | EVEX.512.66.0F38.W1 {base:02X} /r | RVM"]
    for op, pp, w in (("VMOVUPS", "", "W0"), ("VMOVUPD", "66.", "W1")):
        rows += [f"{op} | zmm{{k}}{{z}}, zmm/m512 | EVEX.512.{pp}0F.{w} 10 /r | RM",
                 f"{op} | m512{{k}}, zmm | EVEX.512.{pp}0F.{w} 11 /r | MR"]
    rows += ["VBROADCASTSS | zmm{k}{z}, xmm/m32 | EVEX.512.66.0F38.W0 18 /r | RM",
             "VBROADCASTSD | zmm{k}{z}, xmm/m64 | EVEX.512.66.0F38.W1 19 /r | RM",
             "VPXORD | zmm{k}{z}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F.W0 EF /r | RVM",
             "VPANDD | zmm{k}{z}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F.W0 DB /r | RVM",
             "VPORD | zmm{k}{z}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F.W0 EB /r | RVM",
             "VPADDD | zmm{k}{z}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F.W0 FE /r | RVM",
             "VPSUBD | zmm{k}{z}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F.W0 FA /r | RVM",
             "VPMULLD | zmm{k}{z}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F38.W0 40 /r | RVM",
             # compares into an opmask (itself maskable), and blends by one (WHERE, NaN-propagating max, remainders)
             "VCMPPS | k{k}, zmm, zmm/m512/m32bcst, imm8 | EVEX.512.0F.W0 C2 /r ib | RVMI",
             "VCMPPD | k{k}, zmm, zmm/m512/m64bcst, imm8 | EVEX.512.66.0F.W1 C2 /r ib | RVMI",
             "VBLENDMPS | zmm{k}{z}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F38.W0 65 /r | RVM",
             "VBLENDMPD | zmm{k}{z}, zmm, zmm/m512/m64bcst | EVEX.512.66.0F38.W1 65 /r | RVM",
             # the 256-bit halves of a zmm (horizontal reductions)
             "VEXTRACTF32X8 | ymm/m256, zmm, imm8 | EVEX.512.66.0F3A.W0 1B /r ib | MRI",
             "VINSERTF32X8 | zmm{k}{z}, zmm, ymm/m256, imm8 | EVEX.512.66.0F3A.W0 1A /r ib | RVMI",
             # an opmask from a vector: the lanes where a & b is not 0 (a remainder's lanes from its bool gate)
             "VPTESTMD | k{k}, zmm, zmm/m512/m32bcst | EVEX.512.66.0F38.W0 27 /r | RVM",
             # AVX512-VNNI + VL: a quantization block's byte dot products (tg_x86.bytedot); 256 bits, EVEX (capstone 5
             # decodes no VEX AVX-VNNI form to check one against)
             "VPDPBUSD | ymm{k}{z}, ymm, ymm/m256/m32bcst | EVEX.256.66.0F38.W0 50 /r | RVM",
             # opmask registers (VEX-encoded): a remainder's mask from a gpr
             "KMOVW | k, r32 | VEX.L0.0F.W0 92 /r | RM", "KMOVW | r32, k | VEX.L0.0F.W0 93 /r | RM",
             "KMOVW | k, k/m16 | VEX.L0.0F.W0 90 /r | RM", "KMOVW | m16, k | VEX.L0.0F.W0 91 /r | MR"]
    return rows


def _generated_rows() -> list[str]:
    rows = []
    for op, (base, digit) in _ALU.items():
        rows += [f"{op} | r/m8, r8 | {base:02X} /r | MR", f"{op} | r/mv, rv | {base + 1:02X} /r | MR",
                 f"{op} | r8, r/m8 | {base + 2:02X} /r | RM", f"{op} | rv, r/mv | {base + 3:02X} /r | RM",
                 f"{op} | r/mv, simm8 | 83 /{digit} ib | MI", f"{op} | r/m8, imm8 | 80 /{digit} ib | MI",
                 f"{op} | r/mv, iz | 81 /{digit} iz | MI"]
    for op, (op8, opv, digit) in _UNARY.items():
        rows += [f"{op} | r/m8 | {op8} /{digit} | M", f"{op} | r/mv | {opv} /{digit} | M"]
    for op, digit in _SHIFTS.items():
        rows += [f"{op} | r/m8, imm8 | C0 /{digit} ib | MI", f"{op} | r/mv, imm8 | C1 /{digit} ib | MI",
                 f"{op} | r/m8, cl | D2 /{digit} | MC", f"{op} | r/mv, cl | D3 /{digit} | MC"]
    for ext, base in (("ZX", 0x30), ("SX", 0x20)):
        for suffix, (low, bits) in _PMOV.items():
            opc = f"{base + low:02X}"
            rows += [f"VPMOV{ext}{suffix} | xmm, xmm/m{bits} | VEX.128.66.0F38.WIG {opc} /r | RM",
                     f"VPMOV{ext}{suffix} | ymm, xmm/m{bits * 2} | VEX.256.66.0F38.WIG {opc} /r | RM"]
    for op, opc in _FARITH.items():
        rows += [f"{op}SS | xmm, xmm, xmm/m32 | VEX.LIG.F3.0F.WIG {opc} /r | RVM",
                 f"{op}SD | xmm, xmm, xmm/m64 | VEX.LIG.F2.0F.WIG {opc} /r | RVM",
                 f"{op}PS | X, X, X/M | VEX.L.0F.WIG {opc} /r | RVM",
                 f"{op}PD | X, X, X/M | VEX.L.66.0F.WIG {opc} /r | RVM"]
    for op, enc in _PINT.items():
        rows.append(f"{op} | X, X, X/M | VEX.L.66.{enc} /r | RVM")
    for op, enc in _PSHIFT_IMM.items():
        rows.append(f"{op} | X, X, imm8 | VEX.L.66.0F.WIG {enc} ib | VMI")
    for op, opc in _FLOGIC.items():
        rows.append(f"{op} | X, X, X/M | VEX.L.0F.WIG {opc} /r | RVM")
    for order, base in (("132", 0x98), ("213", 0xA8), ("231", 0xB8)):
        rows += [f"VFMADD{order}SS | xmm, xmm, xmm/m32 | VEX.LIG.66.0F38.W0 {base + 1:02X} /r | RVM",
                 f"VFMADD{order}SD | xmm, xmm, xmm/m64 | VEX.LIG.66.0F38.W1 {base + 1:02X} /r | RVM",
                 f"VFMADD{order}PS | X, X, X/M | VEX.L.66.0F38.W0 {base:02X} /r | RVM",
                 f"VFMADD{order}PD | X, X, X/M | VEX.L.66.0F38.W1 {base:02X} /r | RVM"]
    for op, (mnem_pp, opc) in {"VMOVUPS": ("", "10"), "VMOVUPD": ("66.", "10"), "VMOVAPS": ("", "28"),
                                "VMOVAPD": ("66.", "28"), "VMOVDQU": ("F3.", "6F")}.items():
        store = {"10": "11", "28": "29", "6F": "7F"}[opc]
        rows += [f"{op} | X, X/M | VEX.L.{mnem_pp}0F.WIG {opc} /r | RM",
                 f"{op} | M, X | VEX.L.{mnem_pp}0F.WIG {store} /r | MR"]
    rows += _evex_rows()   # after the VEX forms: a form is picked by its operands' shapes, zmm only here
    return rows


_TABLE = """
# moves
MOV | r/m8, r8 | 88 /r | MR
MOV | r/mv, rv | 89 /r | MR
MOV | r8, r/m8 | 8A /r | RM
MOV | rv, r/mv | 8B /r | RM
MOV | r8, imm8 | B0+r ib | OI
MOV | r16, imm16 | 66 B8+r iw | OI
MOV | r32, imm32 | B8+r id | OI
MOV | r/m64, simm32 | REX.W C7 /0 id | MI
MOV | r/m8, imm8 | C6 /0 ib | MI
MOV | r/m16, imm16 | 66 C7 /0 iw | MI
MOV | r/m32, imm32 | C7 /0 id | MI
MOVABS | r64, imm64 | REX.W B8+r io | OI
MOVZX | rv, r/m8 | 0F B6 /r | RM
MOVZX | r32, r/m16 | 0F B7 /r | RM
MOVZX | r64, r/m16 | REX.W 0F B7 /r | RM
MOVSX | rv, r/m8 | 0F BE /r | RM
MOVSX | r32, r/m16 | 0F BF /r | RM
MOVSX | r64, r/m16 | REX.W 0F BF /r | RM
MOVSXD | r64, r/m32 | REX.W 63 /r | RM
LEA | rv, m | 8D /r | RM
VMOVSS | xmm, m32 | VEX.LIG.F3.0F.WIG 10 /r | RM
VMOVSS | m32, xmm | VEX.LIG.F3.0F.WIG 11 /r | MR
VMOVSS | xmm, xmm, xmm | VEX.LIG.F3.0F.WIG 10 /r | RVM
VMOVSD | xmm, m64 | VEX.LIG.F2.0F.WIG 10 /r | RM
VMOVSD | m64, xmm | VEX.LIG.F2.0F.WIG 11 /r | MR
VMOVSD | xmm, xmm, xmm | VEX.LIG.F2.0F.WIG 10 /r | RVM
VMOVD | xmm, r/m32 | VEX.128.66.0F.W0 6E /r | RM
VMOVD | r/m32, xmm | VEX.128.66.0F.W0 7E /r | MR
VMOVQ | xmm, xmm/m64 | VEX.128.F3.0F.WIG 7E /r | RM
VMOVQ | m64, xmm | VEX.128.66.0F.WIG D6 /r | MR
VMOVQ | xmm, r64 | VEX.128.66.0F.W1 6E /r | RM
VMOVQ | r64, xmm | VEX.128.66.0F.W1 7E /r | MR
# casts
VCVTSI2SS | xmm, xmm, r/m32 | VEX.LIG.F3.0F.W0 2A /r | RVM
VCVTSI2SS | xmm, xmm, r/m64 | VEX.LIG.F3.0F.W1 2A /r | RVM
VCVTSI2SD | xmm, xmm, r/m32 | VEX.LIG.F2.0F.W0 2A /r | RVM
VCVTSI2SD | xmm, xmm, r/m64 | VEX.LIG.F2.0F.W1 2A /r | RVM
VCVTTSS2SI | r32, xmm/m32 | VEX.LIG.F3.0F.W0 2C /r | RM
VCVTTSS2SI | r64, xmm/m32 | VEX.LIG.F3.0F.W1 2C /r | RM
VCVTTSD2SI | r32, xmm/m64 | VEX.LIG.F2.0F.W0 2C /r | RM
VCVTTSD2SI | r64, xmm/m64 | VEX.LIG.F2.0F.W1 2C /r | RM
VCVTSS2SD | xmm, xmm, xmm/m32 | VEX.LIG.F3.0F.WIG 5A /r | RVM
VCVTSD2SS | xmm, xmm, xmm/m64 | VEX.LIG.F2.0F.WIG 5A /r | RVM
VCVTDQ2PS | X, X/M | VEX.L.0F.WIG 5B /r | RM
VCVTTPS2DQ | X, X/M | VEX.L.F3.0F.WIG 5B /r | RM
VCVTPS2DQ | X, X/M | VEX.L.66.0F.WIG 5B /r | RM
VCVTDQ2PD | xmm, xmm/m64 | VEX.128.F3.0F.WIG E6 /r | RM
VCVTDQ2PD | ymm, xmm/m128 | VEX.256.F3.0F.WIG E6 /r | RM
VCVTTPD2DQ | xmm, xmm/m128 | VEX.128.66.0F.WIG E6 /r | RM
VCVTTPD2DQ | xmm, ymm/m256 | VEX.256.66.0F.WIG E6 /r | RM
VCVTPS2PD | xmm, xmm/m64 | VEX.128.0F.WIG 5A /r | RM
VCVTPS2PD | ymm, xmm/m128 | VEX.256.0F.WIG 5A /r | RM
VCVTPD2PS | xmm, xmm/m128 | VEX.128.66.0F.WIG 5A /r | RM
VCVTPD2PS | xmm, ymm/m256 | VEX.256.66.0F.WIG 5A /r | RM
VCVTPH2PS | xmm, xmm/m64 | VEX.128.66.0F38.W0 13 /r | RM
VCVTPH2PS | ymm, xmm/m128 | VEX.256.66.0F38.W0 13 /r | RM
VCVTPS2PH | xmm/m64, xmm, imm8 | VEX.128.66.0F3A.W0 1D /r ib | MRI
VCVTPS2PH | xmm/m128, ymm, imm8 | VEX.256.66.0F3A.W0 1D /r ib | MRI
# compares
TEST | r/m8, r8 | 84 /r | MR
TEST | r/mv, rv | 85 /r | MR
TEST | r/m8, imm8 | F6 /0 ib | MI
TEST | r/mv, iz | F7 /0 iz | MI
VUCOMISS | xmm, xmm/m32 | VEX.LIG.0F.WIG 2E /r | RM
VUCOMISD | xmm, xmm/m64 | VEX.LIG.66.0F.WIG 2E /r | RM
VCMPSS | xmm, xmm, xmm/m32, imm8 | VEX.LIG.F3.0F.WIG C2 /r ib | RVMI
VCMPSD | xmm, xmm, xmm/m64, imm8 | VEX.LIG.F2.0F.WIG C2 /r ib | RVMI
VCMPPS | X, X, X/M, imm8 | VEX.L.0F.WIG C2 /r ib | RVMI
VCMPPD | X, X, X/M, imm8 | VEX.L.66.0F.WIG C2 /r ib | RVMI
# flags -> registers, blends
SETCC | r/m8 | 0F 90+cc /0 | M
CMOVCC | rv, r/mv | 0F 40+cc /r | RM
VBLENDVPS | X, X, X/M, X | VEX.L.66.0F3A.W0 4A /r /is4 | RVML
VBLENDVPD | X, X, X/M, X | VEX.L.66.0F3A.W0 4B /r /is4 | RVML
VPBLENDVB | X, X, X/M, X | VEX.L.66.0F3A.W0 4C /r /is4 | RVML
VPBLENDD | X, X, X/M, imm8 | VEX.L.66.0F3A.W0 02 /r ib | RVMI
# jumps: the assembler picks rel8 when the target is near
JMP | rel8 | EB cb | D
JMP | rel32 | E9 cd | D
JCC | rel8 | 70+cc cb | D
JCC | rel32 | 0F 80+cc cd | D
# shuffles
VSHUFPS | X, X, X/M, imm8 | VEX.L.0F.WIG C6 /r ib | RVMI
VSHUFPD | X, X, X/M, imm8 | VEX.L.66.0F.WIG C6 /r ib | RVMI
VINSERTPS | xmm, xmm, xmm/m32, imm8 | VEX.128.66.0F3A.WIG 21 /r ib | RVMI
VPEXTRB | r32/m8, xmm, imm8 | VEX.128.66.0F3A.W0 14 /r ib | MRI
VPEXTRW | r32, xmm, imm8 | VEX.128.66.0F.W0 C5 /r ib | RMI
VPEXTRW | m16, xmm, imm8 | VEX.128.66.0F3A.W0 15 /r ib | MRI
VPEXTRD | r/m32, xmm, imm8 | VEX.128.66.0F3A.W0 16 /r ib | MRI
VPEXTRQ | r/m64, xmm, imm8 | VEX.128.66.0F3A.W1 16 /r ib | MRI
VPINSRB | xmm, xmm, r32/m8, imm8 | VEX.128.66.0F3A.W0 20 /r ib | RVMI
VPINSRW | xmm, xmm, r32/m16, imm8 | VEX.128.66.0F.W0 C4 /r ib | RVMI
VPINSRD | xmm, xmm, r/m32, imm8 | VEX.128.66.0F3A.W0 22 /r ib | RVMI
VPINSRQ | xmm, xmm, r/m64, imm8 | VEX.128.66.0F3A.W1 22 /r ib | RVMI
VBROADCASTSS | X, xmm/m32 | VEX.L.66.0F38.W0 18 /r | RM
VBROADCASTSD | ymm, xmm/m64 | VEX.256.66.0F38.W0 19 /r | RM
VPBROADCASTB | X, xmm/m8 | VEX.L.66.0F38.W0 78 /r | RM
# AVX-VNNI: vpdpbusd VEX-encoded (tg_x86.bytedot on CPUs without AVX512-VNNI; checked against llvm-mc: capstone 5
# decodes no VEX AVX-VNNI form)
VPDPBUSD_VEX | X, X, X/M | VEX.L.66.0F38.W0 50 /r | RVM
VPBROADCASTW | X, xmm/m16 | VEX.L.66.0F38.W0 79 /r | RM
VPBROADCASTD | X, xmm/m32 | VEX.L.66.0F38.W0 58 /r | RM
VPBROADCASTQ | X, xmm/m64 | VEX.L.66.0F38.W0 59 /r | RM
VEXTRACTF128 | xmm/m128, ymm, imm8 | VEX.256.66.0F3A.W0 19 /r ib | MRI
VPSRLW | xmm, xmm, xmm/m128 | VEX.128.66.0F.WIG D1 /r | RVM
VPSRLW | ymm, ymm, xmm/m128 | VEX.256.66.0F.WIG D1 /r | RVM
VINSERTF128 | ymm, ymm, xmm/m128, imm8 | VEX.256.66.0F3A.W0 18 /r ib | RVMI
VEXTRACTI128 | xmm/m128, ymm, imm8 | VEX.256.66.0F3A.W0 39 /r ib | MRI
VINSERTI128 | ymm, ymm, xmm/m128, imm8 | VEX.256.66.0F3A.W0 38 /r ib | RVMI
VPERMILPS | X, X, X/M | VEX.L.66.0F38.W0 0C /r | RVM
VPERMILPS | X, X/M, imm8 | VEX.L.66.0F3A.W0 04 /r ib | RMI
VPERMPS | ymm, ymm, ymm/m256 | VEX.256.66.0F38.W0 16 /r | RVM
VPERMD | ymm, ymm, ymm/m256 | VEX.256.66.0F38.W0 36 /r | RVM
VPSHUFD | X, X/M, imm8 | VEX.L.66.0F.WIG 70 /r ib | RMI
VMOVHLPS | xmm, xmm, xmm | VEX.128.0F.WIG 12 /r | RVM
VMOVLHPS | xmm, xmm, xmm | VEX.128.0F.WIG 16 /r | RVM
VHADDPS | X, X, X/M | VEX.L.F2.0F.WIG 7C /r | RVM
VPTEST | X, X/M | VEX.L.66.0F38.WIG 17 /r | RM
VMASKMOVPS | X, X, M | VEX.L.66.0F38.W0 2C /r | RVM
VMASKMOVPS | M, X, X | VEX.L.66.0F38.W0 2E /r | MVR
VMASKMOVPD | X, X, M | VEX.L.66.0F38.W0 2D /r | RVM
VMASKMOVPD | M, X, X | VEX.L.66.0F38.W0 2F /r | MVR
# scalar integer ALU (add/or/and/sub/xor/cmp, not/neg/inc/dec/div/idiv and shifts are generated)
IMUL | rv, r/mv | 0F AF /r | RM
IMUL3 | rv, r/mv, simm8 | 6B /r ib | RMI
IMUL3 | rv, r/mv, iz | 69 /r iz | RMI
CDQ | | 99 | ZO
CQO | | REX.W 99 | ZO
# float ALU (add/sub/mul/div/min/max and logic are generated)
VSQRTSS | xmm, xmm, xmm/m32 | VEX.LIG.F3.0F.WIG 51 /r | RVM
VSQRTSD | xmm, xmm, xmm/m64 | VEX.LIG.F2.0F.WIG 51 /r | RVM
VSQRTPS | X, X/M | VEX.L.0F.WIG 51 /r | RM
VSQRTPD | X, X/M | VEX.L.66.0F.WIG 51 /r | RM
VROUNDSS | xmm, xmm, xmm/m32, imm8 | VEX.LIG.66.0F3A.WIG 0A /r ib | RVMI
VROUNDSD | xmm, xmm, xmm/m64, imm8 | VEX.LIG.66.0F3A.WIG 0B /r ib | RVMI
VROUNDPS | X, X/M, imm8 | VEX.L.66.0F3A.WIG 08 /r ib | RMI
VROUNDPD | X, X/M, imm8 | VEX.L.66.0F3A.WIG 09 /r ib | RMI
# stack and system
PUSH | r64 | 50+r | O
POP | r64 | 58+r | O
RET | | C3 | ZO
CPUID | | 0F A2 | ZO
XGETBV | | 0F 01 D0 | ZO
VZEROUPPER | | VEX.128.0F.WIG 77 | ZO
NOP | | 90 | ZO
PREFETCHT0 | m8 | 0F 18 /1 | M
"""


def _expand(row: str) -> list[tuple[str, list[str], str, str]]:
    """One table row -> rows with the ``v`` and ``L`` templates filled in."""
    name, types, enc, op_en = (part.strip() for part in row.split("|"))
    type_list = [t.strip() for t in types.split(",")] if types else []
    if any(t in ("rv", "r/mv") for t in type_list):
        out = []
        for bits, prefix in ((16, "66 "), (32, ""), (64, "REX.W ")):
            iz = {16: "imm16", 32: "imm32", 64: "simm32"}[bits]
            ts = [{"rv": f"r{bits}", "r/mv": f"r/m{bits}", "iz": iz}.get(t, t) for t in type_list]
            out.append((name, ts, prefix + enc.replace("iz", "iw" if bits == 16 else "id"), op_en))
        return out
    if "VEX.L." in enc:
        out = []
        for length, vec in ((128, "xmm"), (256, "ymm")):
            ts = [{"X": vec, "X/M": f"{vec}/m{length}", "M": f"m{length}"}.get(t, t) for t in type_list]
            out.append((name, ts, enc.replace("VEX.L.", f"VEX.{length}."), op_en))
        return out
    return [(name, type_list, enc, op_en)]


def _check(form: Form) -> None:
    """The opcode column and the Op/En column must describe the same fields."""
    e, letters = form.encoding, form.op_en
    agree = [(e.modrm is not None) == ("M" in letters),   # ModRM exactly when an operand goes in rm
             (e.modrm == -1) == ("R" in letters),         # /r exactly when an operand goes in reg
             e.plus_r == ("O" in letters),
             bool(e.rel) == ("D" in letters),
             e.is4 == ("L" in letters),
             len(e.imms) == letters.count("I"),
             e.vex is not None or e.evex is not None or "V" not in letters]     # vvvv only exists in (E)VEX
    if not all(agree):
        raise ValueError(f"opcode and Op/En columns disagree in {form.text!r}")


def _build() -> dict[Op, tuple[Form, ...]]:
    lines = [line for line in _TABLE.splitlines() if line.strip() and not line.startswith("#")]
    forms: dict[Op, list[Form]] = {op: [] for op in Op}
    for row in lines + _generated_rows():
        for name, types, enc, op_en in _expand(row):
            op_en = "" if op_en == "ZO" else op_en
            if len(op_en) != len(types):
                raise ValueError(f"Op/En {op_en!r} does not match the operands of {row!r}")
            form = Form(Op[name], tuple(map(parse_type, types)), parse_encoding(enc), op_en, row)
            _check(form)
            forms[Op[name]].append(form)
    missing = [op.name for op, fs in forms.items() if not fs]
    if missing:
        raise ValueError(f"ops without encoding forms: {missing}")
    return {op: tuple(fs) for op, fs in forms.items()}


FORMS: dict[Op, tuple[Form, ...]] = _build()

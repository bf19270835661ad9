"""The x86-64 instruction set as data: which instructions exist and what they do to operands.

In: nothing (tables). Out: ``Op`` (one member per instruction, with its mnemonic, group,
flags and implicit registers), ``Cond`` (condition codes of jcc/setcc/cmovcc), ``Flag``,
``Group`` and ``Inst`` (an op with operands, what the encoder and the listing take).

How each op is encoded lives in ``forms.py``; the memory facts an instruction selector
asks (may operand i be memory, does the op store) are derived from those forms.

Flags say what a register allocator and a scheduler must know:
    TWO_ADDRESS   operand 0 is read as well as written (add, shl, cmov, FMA accumulators)
    NO_DEST       operand 0 is only read (cmp, test, ucomiss, push, jumps)
    READS_FLAGS   reads RFLAGS (jcc, setcc, cmovcc)
    WRITES_FLAGS  writes RFLAGS (ALU ops, compares)
    COMMUTATIVE   the two sources may be swapped (for picking which one is in memory)
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from tg_x86.operands import Bcst, Imm, Label, Masked, Mem, Operand, Reg

if TYPE_CHECKING:
    from tg_x86.forms import Form


class Flag(enum.Flag):
    NONE = 0
    TWO_ADDRESS = enum.auto()
    NO_DEST = enum.auto()
    READS_FLAGS = enum.auto()
    WRITES_FLAGS = enum.auto()
    COMMUTATIVE = enum.auto()


class Group(enum.Enum):
    MOVE = "move"
    CAST = "cast"
    COMPARE = "compare"
    SETCC = "setcc"
    CMOV = "cmov"
    BLEND = "blend"
    JUMP = "jump"
    SHUFFLE = "shuffle"
    INT_ALU = "int alu"
    VEC_INT_ALU = "packed int alu"
    FLOAT_ALU = "float alu"
    FMA = "fma"
    STACK = "stack"
    SYSTEM = "system"


class Cond(enum.Enum):
    """Condition codes (the low nibble of jcc/setcc/cmovcc opcodes) and their mnemonic suffixes."""
    O = (0x0, "o")
    NO = (0x1, "no")
    B = (0x2, "b")     # unsigned <, carry
    AE = (0x3, "ae")   # unsigned >=
    E = (0x4, "e")
    NE = (0x5, "ne")
    BE = (0x6, "be")   # unsigned <=
    A = (0x7, "a")     # unsigned >
    S = (0x8, "s")
    NS = (0x9, "ns")
    P = (0xA, "p")     # parity: unordered after ucomiss
    NP = (0xB, "np")
    L = (0xC, "l")     # signed <
    GE = (0xD, "ge")
    LE = (0xE, "le")
    G = (0xF, "g")

    @property
    def code(self) -> int:
        return self.value[0]

    @property
    def suffix(self) -> str:
        return self.value[1]

    def negate(self) -> Cond:
        return _COND_BY_CODE[self.code ^ 1]


_COND_BY_CODE = {c.code: c for c in Cond}

_TA, _ND, _RF, _WF, _CO = Flag.TWO_ADDRESS, Flag.NO_DEST, Flag.READS_FLAGS, Flag.WRITES_FLAGS, Flag.COMMUTATIVE
_G = Group


@enum.unique
class Op(enum.Enum):
    """One member per instruction: ``(mnemonic, group, flags, implicit uses, implicit defs)``.

    Implicit registers are 64-bit GPR names. ``{cc}`` in a mnemonic is the condition suffix.
    """
    # moves
    MOV = ("mov", _G.MOVE)
    MOVABS = ("movabs", _G.MOVE)
    MOVZX = ("movzx", _G.MOVE)
    MOVSX = ("movsx", _G.MOVE)
    MOVSXD = ("movsxd", _G.MOVE)
    LEA = ("lea", _G.MOVE)
    VMOVSS = ("vmovss", _G.MOVE)
    VMOVSD = ("vmovsd", _G.MOVE)
    VMOVUPS = ("vmovups", _G.MOVE)
    VMOVUPD = ("vmovupd", _G.MOVE)
    VMOVAPS = ("vmovaps", _G.MOVE)
    VMOVAPD = ("vmovapd", _G.MOVE)
    VMOVDQU = ("vmovdqu", _G.MOVE)
    VMOVD = ("vmovd", _G.MOVE)
    VMOVQ = ("vmovq", _G.MOVE)
    KMOVW = ("kmovw", _G.MOVE)   # AVX-512 opmask registers
    VMASKMOVPS = ("vmaskmovps", _G.MOVE)   # loads and stores of the lanes whose mask sign bit is set
    VMASKMOVPD = ("vmaskmovpd", _G.MOVE)
    # casts
    VPMOVZXBW = ("vpmovzxbw", _G.CAST)
    VPMOVZXBD = ("vpmovzxbd", _G.CAST)
    VPMOVZXBQ = ("vpmovzxbq", _G.CAST)
    VPMOVZXWD = ("vpmovzxwd", _G.CAST)
    VPMOVZXWQ = ("vpmovzxwq", _G.CAST)
    VPMOVZXDQ = ("vpmovzxdq", _G.CAST)
    VPMOVSXBW = ("vpmovsxbw", _G.CAST)
    VPMOVSXBD = ("vpmovsxbd", _G.CAST)
    VPMOVSXBQ = ("vpmovsxbq", _G.CAST)
    VPMOVSXWD = ("vpmovsxwd", _G.CAST)
    VPMOVSXWQ = ("vpmovsxwq", _G.CAST)
    VPMOVSXDQ = ("vpmovsxdq", _G.CAST)
    VCVTSI2SS = ("vcvtsi2ss", _G.CAST)
    VCVTSI2SD = ("vcvtsi2sd", _G.CAST)
    VCVTTSS2SI = ("vcvttss2si", _G.CAST)
    VCVTTSD2SI = ("vcvttsd2si", _G.CAST)
    VCVTSS2SD = ("vcvtss2sd", _G.CAST)
    VCVTSD2SS = ("vcvtsd2ss", _G.CAST)
    VCVTDQ2PS = ("vcvtdq2ps", _G.CAST)
    VCVTTPS2DQ = ("vcvttps2dq", _G.CAST)
    VCVTPS2DQ = ("vcvtps2dq", _G.CAST)
    VCVTDQ2PD = ("vcvtdq2pd", _G.CAST)
    VCVTTPD2DQ = ("vcvttpd2dq", _G.CAST)
    VCVTPS2PD = ("vcvtps2pd", _G.CAST)
    VCVTPD2PS = ("vcvtpd2ps", _G.CAST)
    VCVTPH2PS = ("vcvtph2ps", _G.CAST)
    VCVTPS2PH = ("vcvtps2ph", _G.CAST)
    # compares (vcmp* take the predicate as an immediate; the listing prints it as capstone does)
    CMP = ("cmp", _G.COMPARE, _ND | _WF)
    TEST = ("test", _G.COMPARE, _ND | _WF | _CO)
    VUCOMISS = ("vucomiss", _G.COMPARE, _ND | _WF)
    VUCOMISD = ("vucomisd", _G.COMPARE, _ND | _WF)
    VCMPSS = ("vcmpss", _G.COMPARE)
    VCMPSD = ("vcmpsd", _G.COMPARE)
    VCMPPS = ("vcmpps", _G.COMPARE)
    VCMPPD = ("vcmppd", _G.COMPARE)
    VPCMPEQB = ("vpcmpeqb", _G.COMPARE, _CO)
    VPCMPEQW = ("vpcmpeqw", _G.COMPARE, _CO)
    VPCMPEQD = ("vpcmpeqd", _G.COMPARE, _CO)
    VPCMPEQQ = ("vpcmpeqq", _G.COMPARE, _CO)
    VPCMPGTB = ("vpcmpgtb", _G.COMPARE)
    VPCMPGTW = ("vpcmpgtw", _G.COMPARE)
    VPCMPGTD = ("vpcmpgtd", _G.COMPARE)
    VPCMPGTQ = ("vpcmpgtq", _G.COMPARE)
    # flags -> register
    SETCC = ("set{cc}", _G.SETCC, _RF)
    CMOVCC = ("cmov{cc}", _G.CMOV, _TA | _RF)
    # blends (the mask register is encoded in the immediate's high nibble)
    VBLENDVPS = ("vblendvps", _G.BLEND)
    VBLENDMPS = ("vblendmps", _G.BLEND)   # AVX-512: picks by an opmask
    VBLENDMPD = ("vblendmpd", _G.BLEND)
    VBLENDVPD = ("vblendvpd", _G.BLEND)
    VPBLENDVB = ("vpblendvb", _G.BLEND)
    VPBLENDD = ("vpblendd", _G.BLEND)
    # jumps
    JMP = ("jmp", _G.JUMP, _ND)
    JCC = ("j{cc}", _G.JUMP, _ND | _RF)
    # shuffles, inserts, extracts, broadcasts
    VSHUFPS = ("vshufps", _G.SHUFFLE)
    VSHUFPD = ("vshufpd", _G.SHUFFLE)
    VINSERTPS = ("vinsertps", _G.SHUFFLE)
    VPSRLDQ = ("vpsrldq", _G.SHUFFLE)
    VPSLLDQ = ("vpslldq", _G.SHUFFLE)
    VPEXTRB = ("vpextrb", _G.SHUFFLE)
    VPEXTRW = ("vpextrw", _G.SHUFFLE)
    VPEXTRD = ("vpextrd", _G.SHUFFLE)
    VPEXTRQ = ("vpextrq", _G.SHUFFLE)
    VPINSRB = ("vpinsrb", _G.SHUFFLE)
    VPINSRW = ("vpinsrw", _G.SHUFFLE)
    VPINSRD = ("vpinsrd", _G.SHUFFLE)
    VPINSRQ = ("vpinsrq", _G.SHUFFLE)
    VBROADCASTSS = ("vbroadcastss", _G.SHUFFLE)
    VBROADCASTSD = ("vbroadcastsd", _G.SHUFFLE)
    VPBROADCASTB = ("vpbroadcastb", _G.SHUFFLE)
    VPBROADCASTW = ("vpbroadcastw", _G.SHUFFLE)
    VPBROADCASTD = ("vpbroadcastd", _G.SHUFFLE)
    VPBROADCASTQ = ("vpbroadcastq", _G.SHUFFLE)
    VEXTRACTF128 = ("vextractf128", _G.SHUFFLE)
    VINSERTF128 = ("vinsertf128", _G.SHUFFLE)
    VEXTRACTF32X8 = ("vextractf32x8", _G.SHUFFLE)   # AVX-512DQ: the 256-bit halves of a zmm
    VINSERTF32X8 = ("vinsertf32x8", _G.SHUFFLE)
    VEXTRACTI128 = ("vextracti128", _G.SHUFFLE)
    VINSERTI128 = ("vinserti128", _G.SHUFFLE)
    VPERMILPS = ("vpermilps", _G.SHUFFLE)
    VPERMPS = ("vpermps", _G.SHUFFLE)
    VPERMD = ("vpermd", _G.SHUFFLE)
    VPSHUFD = ("vpshufd", _G.SHUFFLE)
    VPSHUFB = ("vpshufb", _G.SHUFFLE)
    VUNPCKLPS = ("vunpcklps", _G.SHUFFLE)
    VUNPCKHPS = ("vunpckhps", _G.SHUFFLE)
    VMOVHLPS = ("vmovhlps", _G.SHUFFLE)
    VMOVLHPS = ("vmovlhps", _G.SHUFFLE)
    VHADDPS = ("vhaddps", _G.SHUFFLE)
    # scalar integer ALU
    ADD = ("add", _G.INT_ALU, _TA | _WF | _CO)
    SUB = ("sub", _G.INT_ALU, _TA | _WF)
    AND = ("and", _G.INT_ALU, _TA | _WF | _CO)
    OR = ("or", _G.INT_ALU, _TA | _WF | _CO)
    XOR = ("xor", _G.INT_ALU, _TA | _WF | _CO)
    IMUL = ("imul", _G.INT_ALU, _TA | _WF | _CO)      # imul r, r/m
    IMUL3 = ("imul", _G.INT_ALU, _WF)                 # imul r, r/m, imm
    NOT = ("not", _G.INT_ALU, _TA)
    NEG = ("neg", _G.INT_ALU, _TA | _WF)
    INC = ("inc", _G.INT_ALU, _TA | _WF)
    DEC = ("dec", _G.INT_ALU, _TA | _WF)
    SHL = ("shl", _G.INT_ALU, _TA | _WF)
    SHR = ("shr", _G.INT_ALU, _TA | _WF)
    SAR = ("sar", _G.INT_ALU, _TA | _WF)
    IDIV = ("idiv", _G.INT_ALU, _ND | _WF, ("rax", "rdx"), ("rax", "rdx"))
    DIV = ("div", _G.INT_ALU, _ND | _WF, ("rax", "rdx"), ("rax", "rdx"))
    MUL = ("mul", _G.INT_ALU, _ND | _WF, ("rax",), ("rax", "rdx"))      # rdx:rax = rax * r/m (unsigned)
    IMUL1 = ("imul", _G.INT_ALU, _ND | _WF, ("rax",), ("rax", "rdx"))   # rdx:rax = rax * r/m (signed)
    CDQ = ("cdq", _G.INT_ALU, Flag.NONE, ("rax",), ("rdx",))
    CQO = ("cqo", _G.INT_ALU, Flag.NONE, ("rax",), ("rdx",))
    # packed integer ALU
    VPADDB = ("vpaddb", _G.VEC_INT_ALU, _CO)
    VPADDW = ("vpaddw", _G.VEC_INT_ALU, _CO)
    VPADDD = ("vpaddd", _G.VEC_INT_ALU, _CO)
    VPADDQ = ("vpaddq", _G.VEC_INT_ALU, _CO)
    VPSUBB = ("vpsubb", _G.VEC_INT_ALU)
    VPSUBW = ("vpsubw", _G.VEC_INT_ALU)
    VPSUBD = ("vpsubd", _G.VEC_INT_ALU)
    VPSUBQ = ("vpsubq", _G.VEC_INT_ALU)
    VPMULLW = ("vpmullw", _G.VEC_INT_ALU, _CO)
    VPMULLD = ("vpmulld", _G.VEC_INT_ALU, _CO)
    VPMULDQ = ("vpmuldq", _G.VEC_INT_ALU, _CO)     # even int32 lanes -> int64 products
    VPMULUDQ = ("vpmuludq", _G.VEC_INT_ALU, _CO)   # even uint32 lanes -> uint64 products
    VPAND = ("vpand", _G.VEC_INT_ALU, _CO)
    VPANDD = ("vpandd", _G.VEC_INT_ALU, _CO)   # AVX-512F (vpand/vpor have no EVEX form)
    VPANDN = ("vpandn", _G.VEC_INT_ALU)
    VPOR = ("vpor", _G.VEC_INT_ALU, _CO)
    VPORD = ("vpord", _G.VEC_INT_ALU, _CO)
    VPXOR = ("vpxor", _G.VEC_INT_ALU, _CO)
    VPXORD = ("vpxord", _G.VEC_INT_ALU, _CO)   # AVX-512F (vpxor has no EVEX form)
    VPMAXSD = ("vpmaxsd", _G.VEC_INT_ALU, _CO)
    VPMINSD = ("vpminsd", _G.VEC_INT_ALU, _CO)
    VPMAXUD = ("vpmaxud", _G.VEC_INT_ALU, _CO)
    VPMINUD = ("vpminud", _G.VEC_INT_ALU, _CO)
    VPSLLVD = ("vpsllvd", _G.VEC_INT_ALU)
    VPSLLVQ = ("vpsllvq", _G.VEC_INT_ALU)
    VPSRLVD = ("vpsrlvd", _G.VEC_INT_ALU)
    VPSRLVQ = ("vpsrlvq", _G.VEC_INT_ALU)
    VPSRAVD = ("vpsravd", _G.VEC_INT_ALU)
    VPSLLW = ("vpsllw", _G.VEC_INT_ALU)
    VPSLLD = ("vpslld", _G.VEC_INT_ALU)
    VPSLLQ = ("vpsllq", _G.VEC_INT_ALU)
    VPSRLW = ("vpsrlw", _G.VEC_INT_ALU)
    VPSRLD = ("vpsrld", _G.VEC_INT_ALU)
    VPSRLQ = ("vpsrlq", _G.VEC_INT_ALU)
    VPSRAW = ("vpsraw", _G.VEC_INT_ALU)
    VPSRAD = ("vpsrad", _G.VEC_INT_ALU)
    # AVX512-VNNI: each int32 lane += the sum of its 4 unsigned bytes (operand 1) times the 4 signed bytes (operand 2)
    VPDPBUSD = ("vpdpbusd", _G.VEC_INT_ALU, _TA)
    VPDPBUSD_VEX = ("{vex} vpdpbusd", _G.VEC_INT_ALU, _TA)   # the same, AVX-VNNI (VEX-encoded: no AVX-512 needed)
    # AVX2: int16 lanes = the sums of 2 unsigned bytes times 2 signed bytes (saturated); int32 lanes = the sums of 2
    # int16 products
    VPMADDUBSW = ("vpmaddubsw", _G.VEC_INT_ALU)
    VPMADDWD = ("vpmaddwd", _G.VEC_INT_ALU, _CO)
    VPACKUSDW = ("vpackusdw", _G.VEC_INT_ALU)
    VPACKUSWB = ("vpackuswb", _G.VEC_INT_ALU)
    VPTEST = ("vptest", _G.COMPARE, _ND | _WF)
    VPTESTMD = ("vptestmd", _G.COMPARE, _CO)   # AVX-512: an opmask of the dword lanes where a & b is not 0
    # float ALU, scalar and packed
    VADDSS = ("vaddss", _G.FLOAT_ALU, _CO)
    VADDSD = ("vaddsd", _G.FLOAT_ALU, _CO)
    VADDPS = ("vaddps", _G.FLOAT_ALU, _CO)
    VADDPD = ("vaddpd", _G.FLOAT_ALU, _CO)
    VSUBSS = ("vsubss", _G.FLOAT_ALU)
    VSUBSD = ("vsubsd", _G.FLOAT_ALU)
    VSUBPS = ("vsubps", _G.FLOAT_ALU)
    VSUBPD = ("vsubpd", _G.FLOAT_ALU)
    VMULSS = ("vmulss", _G.FLOAT_ALU, _CO)
    VMULSD = ("vmulsd", _G.FLOAT_ALU, _CO)
    VMULPS = ("vmulps", _G.FLOAT_ALU, _CO)
    VMULPD = ("vmulpd", _G.FLOAT_ALU, _CO)
    VDIVSS = ("vdivss", _G.FLOAT_ALU)
    VDIVSD = ("vdivsd", _G.FLOAT_ALU)
    VDIVPS = ("vdivps", _G.FLOAT_ALU)
    VDIVPD = ("vdivpd", _G.FLOAT_ALU)
    VMINSS = ("vminss", _G.FLOAT_ALU)   # not commutative: NaN and signed-zero handling favour operand 3
    VMINSD = ("vminsd", _G.FLOAT_ALU)
    VMINPS = ("vminps", _G.FLOAT_ALU)
    VMINPD = ("vminpd", _G.FLOAT_ALU)
    VMAXSS = ("vmaxss", _G.FLOAT_ALU)
    VMAXSD = ("vmaxsd", _G.FLOAT_ALU)
    VMAXPS = ("vmaxps", _G.FLOAT_ALU)
    VMAXPD = ("vmaxpd", _G.FLOAT_ALU)
    VSQRTSS = ("vsqrtss", _G.FLOAT_ALU)
    VSQRTSD = ("vsqrtsd", _G.FLOAT_ALU)
    VSQRTPS = ("vsqrtps", _G.FLOAT_ALU)
    VSQRTPD = ("vsqrtpd", _G.FLOAT_ALU)
    VROUNDSS = ("vroundss", _G.FLOAT_ALU)
    VROUNDSD = ("vroundsd", _G.FLOAT_ALU)
    VROUNDPS = ("vroundps", _G.FLOAT_ALU)
    VROUNDPD = ("vroundpd", _G.FLOAT_ALU)
    VANDPS = ("vandps", _G.FLOAT_ALU, _CO)
    VANDNPS = ("vandnps", _G.FLOAT_ALU)
    VORPS = ("vorps", _G.FLOAT_ALU, _CO)
    VXORPS = ("vxorps", _G.FLOAT_ALU, _CO)
    # fused multiply-add: 213 is op0 = op1*op0 + op2, 231 is op0 = op1*op2 + op0, 132 is op0 = op0*op2 + op1
    VFMADD132SS = ("vfmadd132ss", _G.FMA, _TA)
    VFMADD132SD = ("vfmadd132sd", _G.FMA, _TA)
    VFMADD132PS = ("vfmadd132ps", _G.FMA, _TA)
    VFMADD132PD = ("vfmadd132pd", _G.FMA, _TA)
    VFMADD213SS = ("vfmadd213ss", _G.FMA, _TA)
    VFMADD213SD = ("vfmadd213sd", _G.FMA, _TA)
    VFMADD213PS = ("vfmadd213ps", _G.FMA, _TA)
    VFMADD213PD = ("vfmadd213pd", _G.FMA, _TA)
    VFMADD231SS = ("vfmadd231ss", _G.FMA, _TA)
    VFMADD231SD = ("vfmadd231sd", _G.FMA, _TA)
    VFMADD231PS = ("vfmadd231ps", _G.FMA, _TA)
    VFMADD231PD = ("vfmadd231pd", _G.FMA, _TA)
    # stack and system
    PUSH = ("push", _G.STACK, _ND, ("rsp",), ("rsp",))
    POP = ("pop", _G.STACK, Flag.NONE, ("rsp",), ("rsp",))
    RET = ("ret", _G.STACK, Flag.NONE, ("rsp",), ("rsp",))
    CPUID = ("cpuid", _G.SYSTEM, Flag.NONE, ("rax", "rcx"), ("rax", "rbx", "rcx", "rdx"))
    XGETBV = ("xgetbv", _G.SYSTEM, Flag.NONE, ("rcx",), ("rax", "rdx"))
    VZEROUPPER = ("vzeroupper", _G.SYSTEM)
    NOP = ("nop", _G.SYSTEM)
    PREFETCHT0 = ("prefetcht0", _G.SYSTEM, _ND)   # a hint: the cache line at its address into every cache level

    def __init__(self, mnemonic: str, group: Group, flags: Flag = Flag.NONE,
                 uses: tuple[str, ...] = (), defs: tuple[str, ...] = ()) -> None:
        self.mnemonic = mnemonic
        self.group = group
        self.flags = flags
        self.uses = uses    # implicit register reads (64-bit GPR names)
        self.defs = defs    # implicit register writes
        self.takes_cond = "{cc}" in mnemonic  # jcc/setcc/cmovcc: the mnemonic ends in a condition code

    def __repr__(self) -> str:
        return f"Op.{self.name}"

    # members are singletons: the identity hash is correct and, unlike Enum's, runs in C
    __hash__ = object.__hash__

    @property
    def forms(self) -> tuple[Form, ...]:
        from tg_x86.forms import FORMS
        return FORMS[self]

    @cached_property
    def mem_operands(self) -> frozenset[int]:
        """Operand positions that may be a memory reference in some form."""
        return frozenset(i for f in self.forms for i, t in enumerate(f.operands) if t.allows_mem)

    @cached_property
    def reads_mem(self) -> bool:
        """Some form loads from memory (a memory source, or a memory destination it also reads)."""
        dest_read = bool(self.flags & (Flag.TWO_ADDRESS | Flag.NO_DEST))
        return any(i > 0 or dest_read for i in self.mem_operands)

    @cached_property
    def writes_mem(self) -> bool:
        """Some form stores to memory (operand 0 may be memory and is a destination)."""
        return 0 in self.mem_operands and not self.flags & Flag.NO_DEST


@dataclass(frozen=True, init=False)
class Inst:
    """One instruction: ``Inst(Op.ADD, eax, 1)``, ``Inst(Op.JCC, loop, cond=Cond.NE)``.

    Plain ints among the operands become ``Imm``.
    """
    op: Op
    operands: tuple[Operand, ...] = field(default=())
    cond: Cond | None = None
    if TYPE_CHECKING:  # set by __init__, not a field (a read-only property to mypy: an annotation is a field)
        @property
        def label(self) -> Label | None: ...

    def __init__(self, op: Op, *operands: Operand | int, cond: Cond | None = None) -> None:
        ops: list[Operand] = []
        label = None  # the jump target, if this is a jump to a label (not a field: it follows from the operands)
        for o in operands:
            if isinstance(o, int):
                o = Imm(o)
            elif label is None and isinstance(o, Label):
                label = o
            ops.append(o)
        d = self.__dict__  # frozen: fields are set once, here
        d["op"] = op
        d["operands"] = tuple(ops)
        d["cond"] = cond
        d["label"] = label
        if op.takes_cond != (cond is not None):
            raise ValueError(f"{op.name} {'needs' if op.takes_cond else 'takes no'} condition code")

    @classmethod
    def of(cls, op: Op, operands: tuple[Operand, ...], cond: Cond | None, label: Label | None) -> Inst:
        """An instruction from operands already built (no ints among them), ``label`` the first ``Label``."""
        inst = object.__new__(cls)
        d = inst.__dict__
        d["op"] = op
        d["operands"] = operands
        d["cond"] = cond
        d["label"] = label
        if op.takes_cond != (cond is not None):
            raise ValueError(f"{op.name} {'needs' if op.takes_cond else 'takes no'} condition code")
        return inst

    @property
    def mnemonic(self) -> str:
        return self.op.mnemonic.replace("{cc}", self.cond.suffix) if self.cond is not None else self.op.mnemonic

    def regs(self) -> list[Reg]:
        """Registers named by the operands, including memory base and index."""
        out: list[Reg] = []
        for o in self.operands:
            if isinstance(o, Masked):
                out.append(o.mask)
                o = o.target
            elif isinstance(o, Bcst):
                o = o.mem
            if isinstance(o, Reg):
                out.append(o)
            elif isinstance(o, Mem):
                out += [r for r in (o.base, o.index) if r is not None]
        return out

    def __repr__(self) -> str:
        from tg_x86.listing import format_inst
        return format_inst(self)

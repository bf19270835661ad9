"""Intel-syntax text for instructions, printed the way capstone prints them, and a disassembler.

In: ``Inst``s and ``Label``s (``asm``), or machine code (``disassemble``).
Out: one line per instruction, ``mnemonic op, op`` with ``dword ptr [rdi + rsi*4 + 0xa]``
memory operands; labels print as ``name:`` lines and as jump targets.

Capstone prints vcmp{ss,sd,ps,pd} with a predicate below 32 as a pseudo-op
(``vcmpltps xmm0, xmm1, xmm2``) and so does ``asm``. Immediates print in decimal up to 9
and in hex above, like capstone; capstone may print the same bits as a different number
(``-1`` vs ``0xff``), which comparisons should normalise.

``disassemble`` imports capstone when called (pip install capstone).
"""
from __future__ import annotations

from collections.abc import Iterable

from tg_x86.isa import Inst, Op
from tg_x86.operands import PTR_NAMES, Bcst, Imm, Label, Masked, Mem, Operand, Reg

# vcmp predicates 0..31, as the pseudo-op infix (SDM table "Comparison Predicate for VCMPPS")
CMP_PREDICATES = ("eq", "lt", "le", "unord", "neq", "nlt", "nle", "ord",
                  "eq_uq", "nge", "ngt", "false", "neq_oq", "ge", "gt", "true",
                  "eq_os", "lt_oq", "le_oq", "unord_s", "neq_us", "nlt_uq", "nle_uq", "ord_s",
                  "eq_us", "nge_uq", "ngt_uq", "false_os", "neq_os", "ge_oq", "gt_oq", "true_us")
_VCMP = {Op.VCMPSS: "ss", Op.VCMPSD: "sd", Op.VCMPPS: "ps", Op.VCMPPD: "pd"}


def format_number(value: int) -> str:
    if -9 <= value <= 9:
        return str(value)
    return f"-{-value:#x}" if value < 0 else f"{value:#x}"


def format_operand(o: Operand) -> str:
    if isinstance(o, Reg):
        return o.name
    if isinstance(o, Imm):
        return format_number(o.value)
    if isinstance(o, Label):
        return repr(o)
    if isinstance(o, Masked):   # as capstone prints them: "zmm1 {k1} {z}", "zmmword ptr [rax] {k1}"
        return f"{format_operand(o.target)} {{{o.mask.name}}}" + (" {z}" if o.zero else "")
    if isinstance(o, Bcst):     # "dword ptr [rax]{1to16}"
        return f"{format_operand(o.mem)}{{1to{o.count}}}"
    terms = []
    if o.base is not None:
        terms.append(o.base.name)
    if o.index is not None:
        terms.append(o.index.name if o.scale == 1 else f"{o.index.name}*{o.scale}")
    text = " + ".join(terms)
    if not terms:  # an absolute address: the sign-extended disp32, printed unsigned
        text = format_number(o.disp & ((1 << 64) - 1))
    elif o.disp:
        text += f" - {format_number(-o.disp)}" if o.disp < 0 else f" + {format_number(o.disp)}"
    size = f"{PTR_NAMES[o.bits]} ptr " if o.bits is not None else ""
    return f"{size}[{text}]"


def format_inst(inst: Inst) -> str:
    mnemonic, operands = inst.mnemonic, list(inst.operands)
    last = operands[-1] if operands else None
    if inst.op in _VCMP and isinstance(last, Imm) and 0 <= last.value < 32:
        operands.pop()
        mnemonic = f"vcmp{CMP_PREDICATES[last.value]}{_VCMP[inst.op]}"
    if inst.op is Op.LEA:  # lea's memory operand is an address computation: capstone prints no size
        operands = [o.sized(None) if isinstance(o, Mem) else o for o in operands]
    text = ", ".join(map(format_operand, operands))
    return f"{mnemonic} {text}" if text else mnemonic


def asm(program: Iterable[Inst | Label]) -> str:
    """Intel-syntax listing of instructions and labels, one per line."""
    lines = []
    for item in program:
        lines.append(f"{item!r}:" if isinstance(item, Label) else format_inst(item))
    return "\n".join(lines)


def disassemble(code: bytes, address: int = 0) -> list[tuple[int, int, str]]:
    """``(offset, size, "mnemonic operands")`` per instruction, decoded by capstone."""
    try:
        import capstone
    except ImportError as e:
        raise ImportError("disassemble() needs capstone: pip install capstone (or tg-x86[test])") from e
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.syntax = capstone.CS_OPT_SYNTAX_INTEL
    return [(i.address, i.size, f"{i.mnemonic} {i.op_str}".strip()) for i in md.disasm(code, address)]

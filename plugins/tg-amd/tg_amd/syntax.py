"""LLVM assembly syntax: ``parse_inst(text) -> Inst`` and ``format_inst(inst) -> text``.

In: one instruction in the syntax llvm-mc accepts (``v_add_f32_e64 v1, -v2, |v3| clamp``,
``global_load_b128 v[4:7], v6, s[4:5] offset:16``, ``v_dual_mov_b32 v0, 0 :: v_dual_mov_b32 v1, 0``,
``s_waitcnt vmcnt(0) lgkmcnt(0)``). Out: an ``Inst``; ``format_inst`` prints it back the way
llvm-mc reads it. Label definitions, comments and whole programs are ``tg_amd.assembler``'s job.
"""
from __future__ import annotations

import ast
import re
from typing import Any

from tg_amd import image
from tg_amd.arch import AsmError
from tg_amd.inst import Inst
from tg_amd.operands import (
    FLOAT_TEXT,
    INLINE_FLOATS,
    INV_2PI,
    NAMED,
    OFF,
    Attr,
    Dec,
    Hex,
    Label,
    Mod,
    Reg,
    Sext,
    operand_text,
)
from tg_amd.symbols import Sym, version_names

FLAGS = ("clamp", "glc", "slc", "dlc", "gds", "sc0", "sc1", "nt", "offen", "idxen", "tfe", "lds", "row_mirror",
         "row_half_mirror", "done", "row_en")
EXP_FLAGS = ("done", "row_en")  # modifiers of exp/export only
NAME_MODS = ("th", "scope", "dim", "dst_sel", "dst_unused", "src0_sel", "src1_sel")  # th:TH_LOAD_NT, dst_sel:WORD_1
INT_MODS = ("offset", "offset0", "offset1", "cbsz", "abid", "blgp", "row_shl", "row_shr", "row_ror", "wave_shl",
            "wave_rol", "wave_shr", "wave_ror", "row_bcast", "row_share", "row_xmask", "row_mask", "bank_mask",
            "bound_ctrl", "fi", "wait_exp", "wait_vdst", "wait_va_vdst", "wait_vm_vsrc", "dmask")
LIST_MODS = ("op_sel", "op_sel_hi", "neg_lo", "neg_hi", "quad_perm", "dpp8")
HEX_MODS = ("row_mask", "bank_mask", "dmask")
MOD_ORDER = ("format", "idxen", "offen", "offset", "offset0", "offset1", "op_sel", "op_sel_hi", "neg_lo", "neg_hi",
             "cbsz", "abid", "blgp", "clamp", "omod", "dmask", "dim", "unorm", "glc", "slc", "dlc", "sc0", "nt", "sc1",
             "th", "scope", "r128", "a16", "lds", "tfe", "lwe", "d16", "gds", "quad_perm", "row_shl", "row_shr",
             "row_ror", "wave_shl", "wave_rol", "wave_shr", "wave_ror",
             "row_mirror", "row_half_mirror", "row_bcast", "row_share", "row_xmask", "dpp8", "row_mask", "bank_mask",
             "bound_ctrl", "fi", "wait_exp", "wait_vdst", "wait_va_vdst", "wait_vm_vsrc", "dst_sel", "dst_unused",
             "src0_sel", "src1_sel", "done", "row_en")
REG_RE = re.compile(r"^(s|v|a|ttmp)(?:(\d+)|\[(\d+)(?::(\d+))?\])$")
HALF_RE = re.compile(r"^v(\d+)\.([lh])$")  # true16: v8.l, v8.h
NUM_RE = re.compile(r"^-?(0x[0-9a-fA-F]+|\d+)$")
FLOAT_RE = re.compile(r"^-?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)$")
WAITCNT_RE = re.compile(r"(vmcnt|expcnt|lgkmcnt)\((\d+)\)")
ATTR_RE = re.compile(r"^attr(\d+)\.([xyzw])$")
IDENT_RE = re.compile(r"^[A-Za-z_.$][\w.$]*$")


def _split_top(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def parse_operand(tok: str) -> Any:
    """One operand: register, ``off``, integer, float, ``-x``/``|x|``/``abs(x)``/``neg(x)``, or label."""
    t = tok.strip()
    low = t.lower()
    if t.startswith("[") and t.endswith("]"):  # an image address list: [v1, v5, v[7:8]]
        return tuple(parse_operand(x) for x in _split_top(t[1:-1], ","))
    if low == "off":
        return OFF
    m = HALF_RE.match(low)
    if m:
        return Reg("v", int(m.group(1)), 1, m.group(2))
    m = REG_RE.match(low)
    if m:
        kind, single, lo, hi = m.groups()
        if single is not None:
            return Reg(kind, int(single), 1)
        lo_i = int(lo)
        hi_i = int(hi) if hi is not None else lo_i
        if hi_i < lo_i:
            raise AsmError(f"empty register range {t}")
        return Reg(kind, lo_i, hi_i - lo_i + 1)
    if low in NAMED:
        return NAMED[low]
    m = ATTR_RE.match(low)
    if m:
        return Attr(int(m.group(1)), "xyzw".index(m.group(2)))
    if NUM_RE.match(low):
        neg = low.startswith("-")
        value = int(low.lstrip("-"), 0)
        return -value if neg else value
    if FLOAT_RE.match(low):
        return float(low)
    if low.startswith("-") and len(low) > 1:
        inner = parse_operand(t[1:])
        if isinstance(inner, Reg | Mod):
            return -inner
        if isinstance(inner, int) and not isinstance(inner, bool):  # -(4)
            return -inner
        raise AsmError(f"cannot negate {t}")
    if low.startswith("|") and low.endswith("|") and len(low) > 2:
        return Mod(parse_operand(t[1:-1]), abs=True)
    if low.startswith("sext(") and low.endswith(")"):
        return Sext(parse_operand(t[5:-1]))
    for fn in ("abs", "neg"):
        if low.startswith(fn + "(") and low.endswith(")"):
            inner = parse_operand(t[len(fn) + 1:-1])
            return abs(inner) if fn == "abs" else -inner
    if low.startswith("gpr_idx(") and low.endswith(")"):
        return Sym("gpr_idx", tuple(a.strip().upper() for a in t[8:-1].split(",") if a.strip()))
    for kind in ("hwreg", "sendmsg"):
        if low.startswith(kind + "(") and low.endswith(")"):
            args = [a.strip() for a in t[len(kind) + 1:-1].split(",")]
            return Sym(kind, tuple(_sym_arg(a) for a in args))
    if IDENT_RE.match(t):
        return Label(t)
    if EXPR_RE.match(low):
        return integer_expression(low)
    raise AsmError(f"cannot parse operand {t!r}")


EXPR_RE = re.compile(r"^[-+~(]*(0x[0-9a-fA-F]+|\d+)([-+*/%&|^~<>()]+(0x[0-9a-fA-F]+|\d+)?\)*)*$")
BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
          ast.Div: lambda a, b: int(a / b), ast.Mod: lambda a, b: a - b * int(a / b),
          ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
          ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b}
UNARY = {ast.USub: lambda a: -a, ast.UAdd: lambda a: a, ast.Invert: lambda a: ~a}


def integer_expression(text: str) -> int:
    """An absolute expression of integers (``(1<<4)|3``, ``0x100*4``, ``-(4)``), as llvm-mc evaluates it
    (64-bit, division truncating)."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div | ast.Mod) and b == 0:
                raise AsmError(f"division by zero in {text!r}")
            result = BINARY[type(node.op)](a, b)
        elif isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
            result = UNARY[type(node.op)](value(node.operand))
        else:
            raise AsmError(f"not an integer expression: {text!r}")
        result &= (1 << 64) - 1
        return result - (1 << 64) if result >> 63 else result
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise AsmError(f"cannot parse expression {text!r}") from None
    return value(tree.body)


def _sym_arg(text: str) -> int | str:
    if NUM_RE.match(text.lower()):
        return int(text, 0)
    if not IDENT_RE.match(text):
        raise AsmError(f"cannot parse {text!r} in a symbolic operand")
    return text.upper()


DELAY_RE = re.compile(r"(instid0|instskip|instid1)\(\s*(\w+)\s*\)")


def _parse_delay(rest: str) -> Sym:
    """``instid0(VALU_DEP_1) | instskip(NEXT) | instid1(SALU_CYCLE_1)``."""
    pairs = tuple((f, v.upper()) for f, v in DELAY_RE.findall(rest))
    if DELAY_RE.sub("", rest).replace("|", "").strip() or not pairs:
        raise AsmError(f"cannot parse s_delay_alu operand {rest!r}", "s_delay_alu")
    return Sym("delay", pairs)


DEPCTR_RE = re.compile(r"(depctr_\w+)\(\s*(\w+)\s*\)")


def _parse_depctr(rest: str) -> Sym:
    """``depctr_va_vdst(0) depctr_sa_sdst(0)`` (s_waitcnt_depctr, s_wait_alu)."""
    pairs = tuple((f, int(v, 0)) for f, v in DEPCTR_RE.findall(rest))
    if DEPCTR_RE.sub("", rest).replace("&", "").replace(",", "").strip() or not pairs:
        raise AsmError(f"cannot parse depctr operand {rest!r}")
    return Sym("depctr", pairs)


def _parse_mod(tok: str, mods: dict[str, Any]) -> bool:
    low = tok.lower()
    if low in FLAGS:
        mods[low] = True
        return True
    if low in ("mul:2", "mul:4", "div:2"):
        mods["omod"] = low
        return True
    if ":" not in low or low.startswith(("s[", "v[", "a[", "ttmp[")):
        return False
    key, _, value = low.partition(":")
    if key == "offset" and value.startswith("swizzle(") and value.endswith(")"):  # ds_swizzle_b32
        args = _split_top(tok.partition(":")[2][8:-1], ",")
        mods[key] = Sym("swizzle", tuple(int(a, 0) if NUM_RE.match(a) else a.upper() if '"' not in a else a
                                         for a in args))
        return True
    if key in INT_MODS:
        mods[key] = int(value, 0) if NUM_RE.match(value) and not value.startswith("-") else \
            -int(value[1:], 0) if NUM_RE.match(value) else integer_expression(value)
        return True
    if key == "format":  # format:[BUF_FMT_32_FLOAT] or format:22
        raw = tok.partition(":")[2]
        mods[key] = raw.strip("[]").upper() if raw.startswith("[") else int(raw, 0)
        return True
    if key in NAME_MODS:
        raw = tok.partition(":")[2]
        mods[key] = int(raw, 0) if NUM_RE.match(raw) else raw.upper()
        return True
    if key in LIST_MODS:
        if not (value.startswith("[") and value.endswith("]")):
            raise AsmError(f"{key} takes a list like [0,1]: {tok}")
        mods[key] = tuple(int(x, 0) for x in value[1:-1].split(","))
        return True
    return False


def _squeeze_brackets(text: str) -> str:
    """Whitespace inside brackets removed (``[v1, v[2:3]]`` -> ``[v1,v[2:3]]``, ``op_sel:[0, 1]``)."""
    out, depth = [], 0
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if not (depth > 0 and ch.isspace()):
            out.append(ch)
    return "".join(out)


def parse_inst(text: str) -> Inst:
    """One instruction in LLVM syntax (no label, no comment) -> ``Inst``."""
    text = text.strip()
    if "::" in text:
        x_text, y_text = text.split("::", 1)
        x = parse_inst(x_text)
        x.dual = parse_inst(y_text)
        return x
    text = _squeeze_brackets(text)
    name, _, rest = text.partition(" ")
    name = name.lower()
    enc = None
    for suffix in ("_e64_dpp", "_dpp", "_sdwa", "_e32", "_e64"):
        if name.endswith(suffix):
            name, enc = name[: -len(suffix)], suffix[1:]
            break
    rest = rest.strip()
    if name == "s_version":
        rest = version_names(rest)
    if name == "s_delay_alu" and "(" in rest:
        return Inst(name, (_parse_delay(rest),), {}, enc)
    if name in ("s_waitcnt_depctr", "s_wait_alu") and "depctr_" in rest:
        return Inst(name, (_parse_depctr(rest),), {}, enc)
    rest = re.sub(r"\(([^)]*)\)", lambda m: "(" + re.sub(r"\s+", "", m.group(1)) + ")", rest)
    if WAITCNT_RE.search(rest):
        counts = {k: int(v) for k, v in WAITCNT_RE.findall(rest)}
        leftover = WAITCNT_RE.sub("", rest).replace("&", "").replace(",", "").strip()
        if leftover:
            raise AsmError(f"cannot parse waitcnt operand {rest!r}", name)
        return Inst(name, (counts,), {}, enc)
    operands: list[Any] = []
    mods: dict[str, Any] = {}
    if rest:
        for piece in _split_top(rest, ","):
            if not piece:
                raise AsmError(f"empty operand in {text!r}", name)
            piece = re.sub(r"\s*([-+*/%&^~<>()])\s*(?=[-+~(\d])", r"\1", piece)  # 1 + 2 -> 1+2
            for tok in piece.split():
                before = len(mods)
                key = tok.lower().partition(":")[0]
                if key in mods:
                    raise AsmError(f"modifier {key} given twice", name)
                if key in EXP_FLAGS and name not in ("exp", "export"):  # a label called done
                    operands.append(parse_operand(tok))
                elif key in image.FLAGS and name.startswith("image_"):
                    mods[key] = True
                elif not _parse_mod(tok, mods):
                    operands.append(parse_operand(tok))
                elif len(mods) == before:
                    raise AsmError(f"modifier {tok} given twice", name)
    if name.startswith("image_"):
        image.check_order(name, mods)
    keys = list(mods)
    if name.startswith("v_interp_") and "clamp" in mods and "op_sel" in mods and \
            keys.index("op_sel") < keys.index("clamp"):
        raise AsmError("invalid operand for instruction (clamp comes before op_sel here)", name, "clamp")
    return Inst(name, tuple(operands), mods, enc)


# ---------------------------------------------------------------- printing

def value_text(op: Any) -> str:
    if isinstance(op, bool):
        raise AsmError(f"bad operand {op!r}")
    if isinstance(op, float):
        if op in INLINE_FLOATS:
            return FLOAT_TEXT[INLINE_FLOATS[op]]
        if abs(op - INV_2PI) < 1e-8:
            return FLOAT_TEXT[248]
        return repr(op)
    if isinstance(op, Hex):
        return hex(op) if op >= 0 else "-" + hex(-op)
    if isinstance(op, Dec):
        return str(int(op))
    if isinstance(op, int):
        return str(op) if -16 <= op <= 64 else hex(op) if op >= 0 else "-" + hex(-op)
    if isinstance(op, dict):
        return " ".join(f"{k}({v})" for k, v in op.items())
    if isinstance(op, Sym):
        return str(op)
    if isinstance(op, tuple):  # image address list
        return "[" + ", ".join(value_text(o) for o in op) + "]"
    if isinstance(op, Mod) and not isinstance(op.value, Reg):
        inner = value_text(op.value)
        inner = f"|{inner}|" if op.abs else inner
        return "-" + inner if op.neg else inner
    if isinstance(op, Sext) and not isinstance(op.value, Reg):
        return f"sext({value_text(op.value)})"
    return operand_text(op)


def _mod_text(key: str, value: Any) -> str:
    if key in FLAGS or key in image.FLAGS:
        return key
    if key == "omod":
        return str(value)
    if key in LIST_MODS:
        return f"{key}:[{','.join(str(int(b)) for b in value)}]"
    if key == "format" and isinstance(value, str):
        return f"format:[{value}]"
    if key in HEX_MODS or isinstance(value, Hex):
        return f"{key}:{value:#x}"
    return f"{key}:{value}"


def format_inst(inst: Inst) -> str:
    """LLVM text of an instruction (``_e32``/``_e64`` suffix as given in ``inst.enc``)."""
    name = inst.name + (f"_{inst.enc}" if inst.enc else "")
    parts = [name]
    if inst.name in ("exp", "export") and inst.operands:  # the target is not comma-separated: exp mrt0 v0, ...
        parts.append(value_text(inst.operands[0]) + " " + ", ".join(value_text(o) for o in inst.operands[1:]))
    elif inst.operands:
        parts.append(", ".join(value_text(o) for o in inst.operands))
    order: tuple[str, ...] = MOD_ORDER
    if "wait_exp" in inst.mods:  # v_interp_*: llvm-mc reads clamp before op_sel there
        order = ("clamp", *(k for k in MOD_ORDER if k != "clamp"))
    for key in order:
        if key in inst.mods and inst.mods[key] is not False:
            parts.append(_mod_text(key, inst.mods[key]))
    text = " ".join(parts)
    if inst.dual is not None:
        text += " :: " + format_inst(inst.dual)
    return text

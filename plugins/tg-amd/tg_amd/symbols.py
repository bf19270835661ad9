"""Symbolic immediates: ``hwreg(...)``, ``sendmsg(...)`` and ``s_delay_alu``'s ``instid0(...) | ...``.

In: a ``Sym`` (what the text or the DSL wrote) and an arch. Out: the 16-bit immediate -- ``value`` --
and, the other way, the ``Sym`` llvm-objdump prints for an immediate -- ``hwreg_sym``, ``msg_sym``,
``delay_sym``. Register and message names per arch come from ``tables/llvm19_symbols.txt``
(listed by llvm-mc-19's disassembler, ``tests/llvm_symbols.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tg_amd.arch import Arch, AsmError
from tg_amd.operands import Hex

DELAY_IDS = {"NO_DEP": 0, "VALU_DEP_1": 1, "VALU_DEP_2": 2, "VALU_DEP_3": 3, "VALU_DEP_4": 4, "TRANS32_DEP_1": 5,
             "TRANS32_DEP_2": 6, "TRANS32_DEP_3": 7, "FMA_ACCUM_CYCLE_1": 8, "SALU_CYCLE_1": 9, "SALU_CYCLE_2": 10,
             "SALU_CYCLE_3": 11}
DELAY_SKIPS = {"SAME": 0, "NEXT": 1, "SKIP_1": 2, "SKIP_2": 3, "SKIP_3": 4, "SKIP_4": 5}
# s_delay_alu: instid0 bits [3:0], instskip [6:4], instid1 [10:7]
DELAY_FIELDS = {"instid0": (0, DELAY_IDS), "instskip": (4, DELAY_SKIPS), "instid1": (7, DELAY_IDS)}


# s_waitcnt_depctr / s_wait_alu counters: name -> (low bit, width); unnamed counters stay at DEPCTR_BASE
# (their maximum; bits 5 and 6 clear). Positions read off llvm-mc's encodings of depctr_<name>(0).
DEPCTR = {"depctr_sa_sdst": (0, 1), "depctr_va_vcc": (1, 1), "depctr_vm_vsrc": (2, 3), "depctr_hold_cnt": (7, 1),
          "depctr_va_ssrc": (8, 1), "depctr_va_sdst": (9, 3), "depctr_va_vdst": (12, 4)}
DEPCTR_BASE = 0xFF9F


# s_version: the version in bits [7:0] (named ones as llvm-objdump names them), wave-size and MDP flag bits
UC_VERSIONS = {"UC_VERSION_GFX7": 0, "UC_VERSION_GFX10": 4, "UC_VERSION_GFX11": 6, "UC_VERSION_GFX12": 9}
UC_FLAGS = {"UC_VERSION_W64_BIT": 0x2000, "UC_VERSION_W32_BIT": 0x4000, "UC_VERSION_MDP_BIT": 0x8000}


def version_text(imm: int) -> str:
    """``s_version``'s immediate as llvm-objdump prints it: ``(123|UC_VERSION_W64_BIT)|UC_VERSION_MDP_BIT``,
    or hex when bits outside the version and flags are set."""
    if imm & 0x1F00:
        return hex(imm)
    names = {v: k for k, v in UC_VERSIONS.items()}
    text = names.get(imm & 0xFF, str(imm & 0xFF))
    flags = [name for name, bit in UC_FLAGS.items() if imm & bit]
    for k, name in enumerate(flags):
        text = f"({text}|{name})" if k < len(flags) - 1 else f"{text}|{name}"
    return text


def version_names(text: str) -> str:
    """``UC_VERSION_*`` names in ``text`` replaced by their values (so integer expressions can read them)."""
    for name, value in sorted({**UC_VERSIONS, **UC_FLAGS}.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(name, str(value)).replace(name.lower(), str(value))
    return text


GPR_IDX = {"SRC0": 1, "SRC1": 2, "SRC2": 4, "DST": 8}  # s_set_gpr_idx_on / _mode: which operands are indexed


def gpr_idx_sym(imm: int) -> Sym | Hex:
    """``gpr_idx(SRC0,DST)`` for a 4-bit mode, as llvm-objdump prints it (other values in hex)."""
    if imm > 15:
        return Hex(imm)
    return Sym("gpr_idx", tuple(name for name, bit in GPR_IDX.items() if imm & bit))


@dataclass(frozen=True)
class Sym:
    """``kind`` is ``hwreg``, ``sendmsg`` or ``delay``; ``args`` the names/numbers inside the parentheses
    (for ``delay``: ``(field, name)`` pairs)."""
    kind: str
    args: tuple

    def __str__(self) -> str:
        if self.kind == "version":
            return version_text(self.args[0])
        if self.kind in ("gpr_idx", "swizzle"):
            return f"{self.kind}({','.join(str(a) for a in self.args)})"
        if self.kind == "delay":
            return " | ".join(f"{field}({name})" for field, name in self.args)
        if self.kind == "depctr":
            return " ".join(f"{field}({n})" for field, n in self.args)
        return f"{self.kind}({', '.join(str(a) for a in self.args)})"


@cache
def _names(arch: str) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {"hwreg": {}, "msg": {}, "msgop": {}, "th_load": {}, "th_store": {},
                                        "th_atomic": {}, "scope": {}, "format": {}}
    for line in (Path(__file__).parent / "tables" / "llvm19_symbols.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            a, kind, name, value = line.split("\t")
            if a == arch:
                table[kind][name] = int(value, 0)
    return table


# the defaults llvm-mc never prints
DEFAULT_POLICY = {"th_load": {"TH_LOAD_RT": 0, "TH_LOAD_BYPASS": 3},
                  "th_store": {"TH_STORE_RT": 0, "TH_STORE_BYPASS": 3},
                  "th_atomic": {"TH_ATOMIC_RT": 0}, "scope": {"SCOPE_CU": 0}}


DEFAULT_FORMAT = {True: "BUF_FMT_8_UNORM", False: "BUF_DATA_FORMAT_8,BUF_NUM_FORMAT_UNORM"}  # value 1


def format_value(fmt: str | int, arch: Arch) -> int:
    """``format:[BUF_FMT_32_FLOAT]`` (gfx11/12), ``format:[BUF_DATA_FORMAT_32,BUF_NUM_FORMAT_FLOAT]`` (gfx9), or
    ``format:N``: the 7-bit format field of tbuffer_*."""
    if isinstance(fmt, int):
        return _number(fmt, "format", 0, 127, arch)
    names = {DEFAULT_FORMAT[arch.rdna]: 1, **_names(arch.name).get("format", {})}
    if fmt not in names:
        raise AsmError(f"unknown buffer format {fmt}", None, "format", arch.name)
    return names[fmt]


def format_name(value: int, arch: Arch) -> str | int:
    names = _names(arch.name).get("format", {})
    return next((n for n, v in names.items() if v == value), value)


def policy_value(kind: str, name: str, arch: Arch) -> int:
    """``th:``/``scope:`` of a gfx12 memory instruction: ``kind`` is th_load, th_store, th_atomic or scope."""
    names = {**DEFAULT_POLICY[kind], **_names(arch.name).get(kind, {})}
    if name not in names:
        raise AsmError(f"unknown {kind.split('_')[0]} value {name} (known: {', '.join(names)})", None,
                       kind.split("_")[0], arch.name)
    return names[name]


def policy_name(kind: str, value: int, arch: Arch, scope: int = 0) -> str | None:
    if value == 0:
        return None
    if value == 3 and scope == 3 and kind in ("th_load", "th_store"):
        return f"TH_{kind[3:].upper()}_BYPASS"
    names = _names(arch.name).get(kind, {})
    return next((n for n, v in names.items() if v == value), None)


def _number(x: object, what: str, lo: int, hi: int, arch: Arch) -> int:
    if not isinstance(x, int) or not lo <= x <= hi:
        raise AsmError(f"{what} must be in {lo}..{hi}, got {x!r}", None, what, arch.name)
    return x


def value(sym: Sym, arch: Arch) -> int:
    """The immediate a symbolic operand stands for on ``arch``."""
    names = _names(arch.name)
    if sym.kind == "version":
        return int(sym.args[0])
    if sym.kind == "swizzle":
        return swizzle_value(sym.args, arch)
    if sym.kind == "gpr_idx":
        bits = 0
        for name in sym.args:
            if name not in GPR_IDX or bits & GPR_IDX[name]:
                raise AsmError(f"{'duplicate' if name in GPR_IDX else 'unknown'} VGPR index mode {name} "
                               f"(known: {', '.join(GPR_IDX)})", None, "gpr_idx", arch.name)
            bits |= GPR_IDX[name]
        return bits
    if sym.kind == "hwreg":
        rid, *rest = sym.args
        if isinstance(rid, str):
            if rid not in names["hwreg"]:
                raise AsmError(f"unknown hardware register {rid}", None, "hwreg", arch.name)
            rid = names["hwreg"][rid]
        rid = _number(rid, "hwreg id", 0, 63, arch)
        if rest and len(rest) != 2:
            raise AsmError("hwreg takes (register) or (register, offset, size)", None, "hwreg", arch.name)
        offset = _number(rest[0], "hwreg offset", 0, 31, arch) if rest else 0
        size = _number(rest[1], "hwreg size", 1, 32, arch) if rest else 32
        return rid | offset << 6 | (size - 1) << 11
    if sym.kind == "sendmsg":
        msg, *rest = sym.args
        if len(rest) > 2:
            raise AsmError("sendmsg takes (message[, operation[, stream]])", None, "sendmsg", arch.name)
        op = rest[0] if rest else 0
        stream = _number(rest[1], "sendmsg stream", 0, 3, arch) if len(rest) > 1 else 0
        if isinstance(op, str):
            key = f"{msg},{op}"
            if key not in names["msgop"]:
                raise AsmError(f"unknown operation {op} of {msg}", None, "sendmsg", arch.name)
            return names["msgop"][key] | stream << 8
        if isinstance(msg, str):
            ids = {**names["msg"], **{k.split(",")[0]: v & 0xF for k, v in names["msgop"].items()}}
            if msg not in ids:
                raise AsmError(f"unknown message {msg}", None, "sendmsg", arch.name)
            msg = ids[msg]
        msg = _number(msg, "sendmsg message", 0, 255 if arch.rdna else 15, arch)
        return msg | _number(op, "sendmsg operation", 0, 7, arch) << 4 | stream << 8
    if sym.kind == "delay":
        out = 0
        for field, name in sym.args:
            if field not in DELAY_FIELDS:
                raise AsmError(f"unknown s_delay_alu field {field}", None, "delay", arch.name)
            shift, codes = DELAY_FIELDS[field]
            if name not in codes:
                raise AsmError(f"unknown {field} value {name}", None, "delay", arch.name)
            out |= codes[name] << shift
        return out
    if sym.kind == "depctr":
        if not arch.rdna:
            raise AsmError("depctr counters exist on RDNA only", None, "depctr", arch.name)
        out = DEPCTR_BASE
        for field, n in sym.args:
            if field not in DEPCTR:
                raise AsmError(f"unknown counter {field} (known: {', '.join(DEPCTR)})", None, "depctr", arch.name)
            lo, width = DEPCTR[field]
            n = _number(n, field, 0, (1 << width) - 1, arch)
            out = out & ~(((1 << width) - 1) << lo) | n << lo
        return out
    raise AsmError(f"unknown symbolic operand {sym.kind}", None, None, arch.name)


def hwreg_sym(imm: int, arch: Arch) -> Sym:
    rid, offset, size = imm & 63, imm >> 6 & 31, (imm >> 11 & 31) + 1
    name: str | int = next((n for n, v in _names(arch.name)["hwreg"].items() if v == rid), rid)
    return Sym("hwreg", (name,) if offset == 0 and size == 32 else (name, offset, size))


def msg_sym(imm: int, arch: Arch) -> Sym | int:
    names = _names(arch.name)
    for key, v in names["msgop"].items():
        if v == imm & 0xFF and not imm >> 10:
            msg, op = key.split(",")
            return Sym("sendmsg", (msg, op) if not imm >> 8 & 3 else (msg, op, imm >> 8 & 3))
    for name, v in names["msg"].items():
        if v == imm:
            return Sym("sendmsg", (name,))
    if imm <= (0xFF if arch.rdna else 0xF):  # an unnamed message: its number
        return Sym("sendmsg", (imm, 0, 0))
    return imm


DEPCTR_ORDER = ("depctr_hold_cnt", "depctr_sa_sdst", "depctr_va_vdst", "depctr_va_sdst", "depctr_va_ssrc",
                "depctr_va_vcc", "depctr_vm_vsrc")  # the order llvm-objdump prints them in


def depctr_sym(imm: int) -> Sym | Hex:
    """``s_waitcnt_depctr`` / ``s_wait_alu``'s immediate as llvm-objdump prints it: the counters below their
    maximum (all of them if none is), or hex when a bit no counter owns differs from its default."""
    owned = sum(((1 << w) - 1) << lo for lo, w in DEPCTR.values())
    if imm & ~owned & 0xFFFF != DEPCTR_BASE & ~owned & 0xFFFF:
        return Hex(imm)
    values = {name: imm >> DEPCTR[name][0] & ((1 << DEPCTR[name][1]) - 1) for name in DEPCTR_ORDER}
    waiting = [(n, v) for n, v in values.items() if v != (1 << DEPCTR[n][1]) - 1]
    return Sym("depctr", tuple(waiting or values.items()))


# ds_swizzle_b32 offset:swizzle(...): QUAD_PERM mode is 0x80 in bits [15:8] and four 2-bit lane selects;
# otherwise (bit 15 clear) the new lane is ((lane & and) | or) ^ xor, masks in bits [4:0], [9:5], [14:10]
def swizzle_value(args: tuple, arch: Arch) -> int:
    """The offset of ``swizzle(QUAD_PERM,0,1,2,3)``, ``swizzle(BITMASK_PERM,"01pip")``, ``swizzle(BROADCAST,8,1)``,
    ``swizzle(SWAP,4)`` or ``swizzle(REVERSE,8)``."""
    def fail(why: str) -> AsmError:
        return AsmError(why, None, "swizzle", arch.name)
    mode, *rest = args
    if mode == "QUAD_PERM":
        if len(rest) != 4 or not all(isinstance(x, int) and 0 <= x <= 3 for x in rest):
            raise fail("QUAD_PERM takes four lane ids in [0, 3]")
        return 0x8000 | sum(x << 2 * k for k, x in enumerate(rest))
    if mode == "BITMASK_PERM":
        pattern = str(rest[0]).strip('"') if len(rest) == 1 else ""
        if len(pattern) != 5 or set(pattern) - set("01pi"):
            raise fail('BITMASK_PERM takes a 5-character mask of 0, 1, p, i ("01pip")')
        masks = [0, 0, 0]
        for k, ch in enumerate(reversed(pattern)):
            bits = {"0": (0, 0, 0), "1": (0, 1, 0), "p": (1, 0, 0), "i": (1, 0, 1)}[ch]
            for m in range(3):
                masks[m] |= bits[m] << k
        return masks[0] | masks[1] << 5 | masks[2] << 10
    sizes = {"BROADCAST": (2, 2), "SWAP": (1, 1), "REVERSE": (1, 2)}  # operands, smallest group
    if mode not in sizes or len(rest) != sizes[mode][0] or not all(isinstance(x, int) for x in rest):
        raise fail("expected QUAD_PERM, BITMASK_PERM, BROADCAST, SWAP or REVERSE and their operands")
    n = rest[0]
    if not (sizes[mode][1] <= n <= (16 if mode == "SWAP" else 32) and n & (n - 1) == 0):
        raise fail(f"{'group' if mode != 'SWAP' else 'swap'} size must be a power of two")
    if mode == "BROADCAST":
        if not 0 <= rest[1] < n:
            raise fail("lane id must be in the interval [0,group size - 1]")
        return (0x20 - n) | rest[1] << 5
    return 0x1F | (n if mode == "SWAP" else n - 1) << 10


def swizzle_sym(imm: int) -> Sym | int:
    """The ``swizzle(...)`` llvm-objdump prints for a ds_swizzle_b32 offset (the number when it has none)."""
    if imm >> 8 == 0x80:
        return Sym("swizzle", ("QUAD_PERM", *(imm >> 2 * k & 3 for k in range(4))))
    if imm >> 15:
        return imm
    and_, or_, xor = imm & 0x1F, imm >> 5 & 0x1F, imm >> 10 & 0x1F
    if and_ == 0x1F and or_ == 0 and xor and xor & (xor - 1) == 0:
        return Sym("swizzle", ("SWAP", xor))
    if and_ == 0x1F and or_ == 0 and xor and (xor + 1) & xor == 0:
        return Sym("swizzle", ("REVERSE", xor + 1))
    group = 0x20 - and_
    if group > 1 and group & (group - 1) == 0 and or_ < group and xor == 0:
        return Sym("swizzle", ("BROADCAST", group, or_))
    chars = ""
    for k in range(4, -1, -1):
        a, o, x = and_ >> k & 1, or_ >> k & 1, xor >> k & 1
        chars += ("i" if x else "p") if a and not o else str(o ^ x)
    return Sym("swizzle", ("BITMASK_PERM", f'"{chars}"'))


def delay_sym(imm: int) -> Sym | int:
    args = []
    for field, (shift, codes) in DELAY_FIELDS.items():
        code = imm >> shift & (15 if field != "instskip" else 7)
        name = next((n for n, c in codes.items() if c == code), None)
        if name is None or imm >> 11:
            return imm
        if code:
            args.append((field, name))
    return Sym("delay", tuple(args) or (("instid0", "NO_DEP"),))

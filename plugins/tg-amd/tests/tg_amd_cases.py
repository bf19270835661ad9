"""Test helpers: representative instructions for every opcode, and llvm-mc as the reference.

``cases(arch, seed, per_op)`` yields LLVM-syntax lines covering every table entry of an arch with
random registers (counts and alignment as the entry says), inline constants vs literals,
neg/abs, clamp, op_sel, offsets and ``off``. ``llvm_encode(lines, arch)`` runs llvm-mc-19 once
for a whole batch and returns the bytes (or the error) of each line.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import subprocess

from tg_amd.arch import Arch, get_arch
from tg_amd.isa import OpInfo, mnemonics, two_offsets

LLVM_MC_NAMES = ("llvm-mc-19", "/usr/lib/llvm-19/bin/llvm-mc")


def llvm_mc() -> str | None:
    for name in LLVM_MC_NAMES:
        path = shutil.which(name) or (name if os.path.exists(name) else None)
        if path:
            return path
    return None


ENC_RE = re.compile(r"encoding: \[([^\]]*)\]")
ERR_RE = re.compile(r"<stdin>:(\d+):\d+: error: (.*)")


def assembly_mismatches(lines: list[str], ref: list[bytes | str], arch: str) -> list[str]:
    """The lines tg-amd assembles differently from llvm-mc's ``ref`` (``llvm_encode``): other bytes, or accepted by
    one side and refused by the other."""
    import tg_amd
    wrong = []
    for line, want in zip(lines, ref, strict=True):
        try:
            got: bytes | str = tg_amd.assemble(line, arch)
        except tg_amd.AsmError as e:
            got = f"refused: {e}"
        if isinstance(want, str) != isinstance(got, str) or (isinstance(want, bytes) and got != want):
            wrong.append(f"{line}: ours {got!r}, llvm-mc {want!r}")
    return wrong


def llvm_encode(lines: list[str], arch: str) -> list[bytes | str]:
    """llvm-mc's bytes for each line, or its error message (one llvm-mc run for the batch)."""
    exe = llvm_mc()
    assert exe is not None
    proc = subprocess.run([exe, "-arch=amdgcn", f"-mcpu={arch}", "-show-encoding"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=120)
    errors = {int(m.group(1)) - 1: m.group(2) for m in ERR_RE.finditer(proc.stderr)}
    encodings = [bytes(int(x, 16) for x in m.group(1).split(",") if x) for m in ENC_RE.finditer(proc.stdout)]
    out: list[bytes | str] = []
    it = iter(encodings)
    for i in range(len(lines)):
        out.append(f"llvm-mc: {errors[i]}" if i in errors else next(it))
    return out


def llvm_object_text(text: str, arch: str) -> bytes:
    """The .text bytes llvm-mc assembles from a whole program (labels resolved by its linker-free fixups)."""
    import tempfile
    exe = llvm_mc()
    assert exe is not None
    objcopy = exe.replace("llvm-mc", "llvm-objcopy")
    with tempfile.TemporaryDirectory() as tmp:
        obj, raw = os.path.join(tmp, "a.o"), os.path.join(tmp, "a.bin")
        subprocess.run([exe, "-arch=amdgcn", f"-mcpu={arch}", "-filetype=obj", "-o", obj], input=text, text=True,
                       check=True, capture_output=True)
        subprocess.run([objcopy, "-O", "binary", "--only-section=.text", obj, raw], check=True, capture_output=True)
        with open(raw, "rb") as f:
            return f.read()


# ---------------------------------------------------------------- random operands

class Gen:
    def __init__(self, arch: str, rng: random.Random):
        self.arch, self.rng = get_arch(arch), rng

    def sgpr(self, count: int) -> str:
        r = self.rng
        align = 1 if count == 1 else 2 if count == 2 else 4
        if count == 1 and r.random() < 0.25:
            return r.choice(["vcc_lo", "vcc_hi", "m0", "exec_lo", "exec_hi", f"ttmp{r.randrange(16)}"])
        if count == 2 and r.random() < 0.2:
            return r.choice(["vcc", "exec", "ttmp[4:5]"])
        top = self.arch.max_sgpr - count
        lo = r.randrange(0, top + 1, align)
        return f"s{lo}" if count == 1 else f"s[{lo}:{lo + count - 1}]"

    def vgpr(self, count: int, kind: str = "v", top: int = 256) -> str:
        align = 2 if count > 1 and not self.arch.rdna else 1
        lo = self.rng.randrange(0, top - count + 1, align)
        return f"{kind}{lo}" if count == 1 else f"{kind}[{lo}:{lo + count - 1}]"

    def const(self, info: OpInfo, slot: int, literal: bool) -> str:
        r = self.rng
        choices = [str(r.randint(0, 64)), str(r.randint(-16, -1))]
        width = info.width(slot)
        if info.is_float(slot) or width == 32:
            choices += ["0.5", "-1.0", "2.0", "-4.0"]
        if literal and width == 16:
            choices += [hex(r.randint(65, 0xFFFF))]
        elif literal and width != 64:
            choices += [hex(r.randint(65, 0xFFFF)), hex(r.randint(0x10000, 0xFFFFFFFF))]
            if info.is_float(slot) and width == 32:
                choices.append("3.5")
        return r.choice(choices)

    def src(self, info: OpInfo, slot: int, literal: bool, vgpr: bool = True, mods: bool = False) -> str:
        r = self.rng
        count = info.count(slot)
        roll = r.random()
        if vgpr and roll < 0.45:
            text = self.vgpr(count)
        elif roll < 0.75:
            text = self.sgpr(count)
        else:
            return self.const(info, slot, literal)
        if mods and info.is_float(slot):
            m = r.random()
            if m < 0.2:
                text = f"-{text}"
            elif m < 0.35:
                text = f"|{text}|"
            elif m < 0.45:
                text = f"-|{text}|"
        return text


def _mask(g: Gen) -> str:
    if g.arch.wave == 32:
        return g.rng.choice(["vcc_lo", g.sgpr(1)])
    return g.rng.choice(["vcc", g.sgpr(2)])


def _salu(g: Gen, info: OpInfo) -> str:
    r = g.rng
    ops = []
    for role in info.sig:
        if role == "sdst":
            ops.append("null" if info.name.startswith("s_waitcnt_") else g.sgpr(info.count(0)))
        elif role in ("ssrc0", "ssrc1"):
            slot = 1 if role == "ssrc0" else 2
            if info.name.startswith(("s_barrier_signal", "s_barrier_init", "s_barrier_join", "s_wakeup_barrier",
                                     "s_get_barrier_state")):
                ops.append(r.choice(["-1", "m0", str(r.randint(0, 15))]))
                continue
            if info.sig == ("ssrc0",) or "regsrc" in info.flags:
                ops.append(g.sgpr(info.count(1)))
                continue
            text = g.src(info, slot, literal=not any(o.startswith("0x") for o in ops), vgpr=False)
            ops.append(text)
        elif role == "k":
            ops.append(hex(r.randint(0x10000, 0xFFFFFFFF)))
        elif role == "simm16":
            if info.name.startswith(("s_getreg", "s_setreg")):
                ops.append(r.choice([str(r.randint(0, 0xFFFF)), f"hwreg({r.randint(1, 7)})",
                                     f"hwreg(HW_REG_MODE, {r.randint(0, 31)}, 1)", "hwreg(HW_REG_STATUS)"]))
            elif info.name in ("s_sendmsg", "s_sendmsghalt"):
                ops.append(r.choice([str(r.randint(0, 15)), "sendmsg(MSG_INTERRUPT)", "sendmsg(MSG_GS_ALLOC_REQ)"]))
            elif info.name == "s_delay_alu":
                ops.append(r.choice(["instid0(VALU_DEP_1)", "instid0(VALU_DEP_2) | instskip(NEXT) | "
                                     "instid1(SALU_CYCLE_1)", "instid0(TRANS32_DEP_3) | instskip(SKIP_2)",
                                     str(r.randint(0, 0x7FF))]))
            elif info.fmt == "SOPK":
                ops.append(str(r.randint(0, 0xFFFF)) if "_u32" in info.name else str(r.randint(-32768, 32767)))
            elif info.name == "s_barrier_wait":
                ops.append(r.choice(["-1", "0xffff", "0"]))
            else:
                ops.append(str(r.randint(0, 15)))
        elif role == "label":
            ops.append(str(r.randint(-200, 200)))
        elif role == "gpridx":
            modes = r.sample(["SRC0", "SRC1", "SRC2", "DST"], r.randint(0, 4))
            ops.append(r.choice([f"gpr_idx({','.join(modes)})", str(r.randint(0, 15))]))
        elif role == "msg":
            ops.append(r.choice(["sendmsg(MSG_RTN_GET_DOORBELL)", "sendmsg(MSG_RTN_GET_REALTIME)",
                                 f"sendmsg({r.randint(0, 255)})", str(r.randint(0x80, 0x8A))]))
        elif role == "waitcnt":
            parts = [f"vmcnt({r.randint(0, 63)})", f"expcnt({r.randint(0, 7)})",
                     f"lgkmcnt({r.randint(0, 63 if g.arch.rdna else 15)})"]
            ops.append(" ".join(r.sample(parts, r.randint(1, 3))))
    return " ".join([info.name, ", ".join(ops)]).strip()


def _smem(g: Gen, info: OpInfo) -> str:
    r = g.rng
    ops = []
    offset_mod = False
    for role in info.sig:
        if role == "sdata":
            count = info.count(0)
            lo = r.randrange(0, g.arch.max_sgpr - count + 1, 1 if count == 1 else 2 if count == 2 else 4)
            ops.append(f"s{lo}" if count == 1 else f"s[{lo}:{lo + count - 1}]")
        elif role in ("sbase", "sbuf"):
            base = 2 if role == "sbase" else 4
            lo = r.randrange(0, g.arch.max_sgpr - base + 1, 2 if base == 2 else 4)
            ops.append(f"s[{lo}:{lo + base - 1}]")
        elif role == "probe":
            ops.append(str(r.randint(0, 127)))
        elif role == "plen":
            ops.append(str(r.randint(0, 31)))
        elif role == "ioffset":
            ops.append(hex(r.randint(-0x800000, 0x7FFFFF)) if r.random() < 0.3 else hex(r.randint(0, 0xFFFF)))
        elif role == "soffset":
            ops.append(r.choice(["null", "m0", f"s{r.randrange(g.arch.max_sgpr)}"]))
        elif role == "soff":
            top = 0xFFFFF if g.arch.gen != 12 else 0x7FFFFF
            if r.random() < 0.5:
                ops.append(hex(r.choice([0, 4, 16, 0x100, r.randint(0, top)])))
            else:
                ops.append(f"s{r.randrange(g.arch.max_sgpr)}")
                offset_mod = r.random() < 0.5 and "sbase" in info.sig
    text = f"{info.name} {', '.join(ops)}".strip()
    if offset_mod:
        text += f" offset:{hex(r.randint(1, 0xFFFF))}"
    return text


def _valu(g: Gen, info: OpInfo, force: str | None) -> str:
    """VOP1/VOP2/VOPC/VOP3/VOP3SD; ``force`` 'e32'/'e64' picks the encoding of VOP1/2/C."""
    r = g.rng
    arch = g.arch
    e64 = force == "e64" or info.fmt in ("VOP3", "VOP3SD")
    lit_ok = (not e64) or arch.vop3_literal
    ops: list[str] = []
    used_literal = ["k" in info.sig]  # fmaak/fmamk: the constant is the one literal
    scalar_used = ["k" in info.sig and not arch.rdna]  # and on CDNA the one constant-bus read
    scalar_reads = [int("k" in info.sig)]

    reads_mask = (not arch.rdna and ("mask" in info.sig or info.sig[-1:] == ("vcc",))) or \
        info.name.startswith("v_div_fmas")  # reads all of VCC
    # 16-bit operands of a 32-bit-only encoding reach v0..v127 only
    top = 128 if (info.e64 is None or force == "e32") and info.fmt in ("VOP1", "VOP2", "VOPC") and \
        16 in (info.width(0), info.width(1)) else 256

    def src(slot: int, vgpr: bool = True) -> str:
        if reads_mask:  # CDNA's constant bus holds only the mask: other sources are VGPRs or inline
            return g.vgpr(info.count(slot), top=top) if r.random() < 0.7 else str(r.randint(-16, 64))
        if not arch.rdna and scalar_used[0]:  # CDNA: one SGPR per instruction
            return g.vgpr(info.count(slot)) if r.random() < 0.7 else str(r.randint(-16, 64))
        if arch.rdna and scalar_reads[0] >= 2:  # RDNA: two scalar values (SGPRs, literal) per instruction
            return g.vgpr(info.count(slot), top=top) if r.random() < 0.7 else str(r.randint(-16, 64))
        allow = lit_ok and not used_literal[0]
        mods = e64 and "nomods" not in info.flags and info.fmt != "VOP3SD"
        text = g.src(info, slot, allow, vgpr=vgpr, mods=mods)
        if text.startswith("0x") or text == "3.5":
            used_literal[0] = True
        if text.lstrip("-|").startswith(("s", "ttmp", "vcc", "exec", "m0", "0x", "3.5")):
            scalar_used[0] = True
            scalar_reads[0] += 1
        return text

    sig = info.sig
    for i, role in enumerate(sig):
        if role == "vdst":
            ops.append(g.vgpr(info.count(0), top=top))
        elif role == "adst":
            ops.append(g.vgpr(info.count(0), "a"))
        elif role == "asrc0":
            ops.append(g.vgpr(info.count(1), "a"))
        elif role in ("vsrc0", "vsrc2") or (role == "vsrc1" and info.fmt == "VOP3"):  # VGPR-only sources
            ops.append(g.vgpr(info.count(int(role[-1]) + 1)))
        elif role in ("ssrc0", "ssrc1", "ssrc2"):
            ops.append(g.sgpr(1) if r.random() < 0.5 else str(r.randint(0, 31)))
        elif role == "sdst":
            if info.fmt in ("VOP2", "VOP3SD"):
                ops.append(_mask(g) if e64 else ("vcc_lo" if arch.wave == 32 else "vcc"))
            else:
                ops.append(f"s{r.randrange(arch.max_sgpr)}")
        elif role == "src0":
            ops.append(src(1) if top == 256 or r.random() < 0.5 else g.vgpr(info.count(1), top=top))
        elif role in ("src1", "src2"):
            ops.append(src(int(role[-1]) + 1))
        elif role == "vsrc1":
            ops.append(src(2) if e64 else g.vgpr(info.count(2), top=top))
        elif role == "vcc":
            if info.fmt == "VOPC" and e64:
                ops.append(_mask(g))
            elif e64 and i == 1:
                ops.append(_mask(g))
            elif e64:
                ops.append(_mask(g))
            else:
                ops.append("vcc_lo" if arch.wave == 32 else "vcc")
        elif role == "mask":
            ops.append(_mask(g))
        elif role == "k":
            ops.append(hex(r.randint(0x41, 0xFFFF if info.width(0) == 16 else 0xFFFFFFFF)))
    suffix = f"_{force}" if force and info.fmt in ("VOP1", "VOP2", "VOPC") else ""
    text = f"{info.name}{suffix} {', '.join(ops)}".strip()
    if (e64 and info.is_float(1) and not {"nomods", "noclamp"} & info.flags and info.fmt != "VOPC"
            and "sdst" not in sig):
        if r.random() < 0.2:
            text += " clamp"
    if info.fmt == "VOP3" and info.name.startswith(("v_permlane16_", "v_permlanex16_")) and r.random() < 0.5:
        text += f" op_sel:[{r.randint(0, 1)},{r.randint(0, 1)}]"  # fi, bound_ctrl
    return text


def _vop3p(g: Gen, info: OpInfo) -> str:
    r = g.rng
    ops = []
    nsrc = 0
    for role in info.sig:
        if role == "vdst":
            ops.append(g.vgpr(info.count(0)))
        elif role == "adst":
            ops.append(g.vgpr(info.count(0), "a"))
        elif role == "asrc0":
            ops.append(g.vgpr(info.count(1), "a"))
            nsrc += 1
        elif role.startswith("src"):
            slot = int(role[-1]) + 1
            nsrc += 1
            if "wmma" in info.flags:
                ops.append(g.vgpr(info.count(slot)) if slot < 3 or r.random() < 0.8 or "swmmac" in info.name
                           else "1.0")
            elif r.random() < 0.7:
                ops.append(g.vgpr(info.count(slot)))
            else:
                ops.append(g.sgpr(info.count(slot)) if info.count(slot) <= 2 and r.random() < 0.5
                           else str(r.randint(0, 64)))
    text = f"{info.name} {', '.join(ops)}"
    if "wmma" not in info.flags and "accvgpr" not in info.name and r.random() < 0.4 and "nomods" not in info.flags:
        bits = ",".join(str(r.randint(0, 1)) for _ in range(nsrc))
        text += f" op_sel:[{bits}]"
    return text


def _mai(g: Gen, info: OpInfo) -> str:
    r = g.rng
    dk = r.choice("va")
    dst = g.vgpr(info.count(0), dk)
    if "vidx" in info.sig:  # sparse: D accumulates; the index VGPR; cbsz/abid select the index bits
        ops = [dst, g.vgpr(info.count(1), r.choice("va")), g.vgpr(info.count(2), r.choice("va")), g.vgpr(1)]
        mods = [f"cbsz:{r.randint(1, 7)}"] * (r.random() < 0.3) + [f"abid:{r.randint(1, 15)}"] * (r.random() < 0.4)
        return f"{info.name} {', '.join(ops)} {' '.join(mods)}".strip()
    roll = r.random()
    src2 = dst if roll < 0.5 else "0" if roll < 0.6 else g.vgpr(info.count(3), dk)
    ops = [dst, g.vgpr(info.count(1), r.choice("va")), g.vgpr(info.count(2), r.choice("va")), src2]
    return f"{info.name} {', '.join(ops)}"


def _ds(g: Gen, info: OpInfo) -> str:
    r = g.rng
    ops = []
    for role in info.sig:
        slot = 0 if role == "vdst" else 3
        count = 4 if role == "data1" and info.name == "ds_bvh_stack_rtn_b32" else info.count(slot)
        ops.append(g.vgpr(1 if role == "addr" else count))
    text = f"{info.name} {', '.join(ops)}"
    if not ops:
        return info.name
    if two_offsets(info.name):
        text += f" offset0:{r.randint(0, 255)} offset1:{r.randint(0, 255)}"
    elif info.name == "ds_swizzle_b32":  # as llvm-objdump prints them (a raw mask may not read back the same)
        n = 1 << r.randint(1, 5)
        text += " offset:" + r.choice([
            f"swizzle(QUAD_PERM,{','.join(str(r.randint(0, 3)) for _ in range(4))})",
            f'swizzle(BITMASK_PERM,"{"".join(r.choice("01pi") for _ in range(5))}")',
            f"swizzle(BROADCAST,{n},{r.randrange(n)})", f"swizzle(SWAP,{n // 2})", f"swizzle(REVERSE,{n})"])
    elif r.random() < 0.6:
        text += f" offset:{r.randint(1, 65535)}"
    return text


def _global(g: Gen, info: OpInfo) -> str:
    r = g.rng
    arch = g.arch
    glob = info.fmt == "GLOBAL"
    scratch = info.fmt == "SCRATCH"
    saddr = (r.choice(["off", "sgpr"]) if glob or scratch else None)
    if saddr == "sgpr":
        lo = r.randrange(0, arch.max_sgpr - 1, 2)
        saddr = f"s{lo}" if scratch else f"s[{lo}:{lo + 1}]"
    ops = []
    for role in info.sig:
        if role == "saddr":
            ops.append(saddr)
        elif role == "vaddr" and scratch:  # at most one of the two addresses may be off... or both
            ops.append(g.vgpr(1) if saddr == "off" or r.random() < 0.5 else "off")
        elif role == "vaddr":
            ops.append(g.vgpr(1 if saddr not in (None, "off") else 2))
        else:
            ops.append(g.vgpr(info.count(0 if role == "vdst" else 3)))
    returning = "atomic" in info.flags and info.sig[:1] == ("vaddr",) and r.random() < 0.3
    if returning:  # glc / sc0 / th:TH_ATOMIC_RETURN, the old value into a leading vdst
        ops.insert(0, g.vgpr(info.count(3) // 2 if "cmpswap" in info.name else info.count(3)))
    text = f"{info.name} {', '.join(ops)}"
    if not ops:
        return info.name
    if arch.gen == 12:
        lo, hi = -(1 << 23), (1 << 23) - 1
    elif glob or scratch:
        lo, hi = -4096, 4095
    else:
        lo, hi = 0, 4095
    if r.random() < 0.7:
        off = r.randint(lo, hi)
        if off:
            text += f" offset:{off}"
    flags = {11: ["glc", "slc", "dlc"], 9: ["sc0", "sc1", "nt"], 12: []}[arch.gen]
    for flag in flags if "atomic" not in info.flags else []:
        if r.random() < 0.2:
            text += f" {flag}"
    if returning:
        text += {11: " glc", 9: " sc0", 12: " th:TH_ATOMIC_RETURN"}[arch.gen]
    return text


def _vopd(g: Gen, x: OpInfo, y: OpInfo) -> str:
    r = g.rng

    def half(info: OpInfo, parity: int, avoid: dict[str, int], literal: list[str | None]) -> tuple[str, dict[str, int]]:
        got: dict[str, int] = {}
        ops = []
        for role in info.sig:
            if role == "vdst":
                d = r.randrange(parity, 256, 2)
                got["vdst"] = d
                ops.append(f"v{d}")
            elif role in ("src0", "vsrc1"):
                banned = avoid.get(role)
                if role == "src0" and r.random() < 0.35:
                    ops.append(r.choice([str(r.randint(-16, 64)), "1.0", f"s{r.randrange(100)}"]))
                    continue
                v = r.randrange(256)
                while banned is not None and v % 4 == banned % 4:
                    v = r.randrange(256)
                got[role] = v
                ops.append(f"v{v}")
            elif role == "vcc":
                ops.append("vcc_lo")
            elif role == "k":
                if literal[0] is None:
                    literal[0] = hex(r.randint(0x41, 0xFFFFFFFF))
                ops.append(literal[0])
        return f"{info.name} {', '.join(ops)}", got

    literal: list[str | None] = [None]
    for _ in range(50):
        px = r.randint(0, 1)
        tx, gx = half(x, px, {}, literal)
        ty, gy = half(y, 1 - px, gx, literal)
        s2 = [g.get("vdst") if i.name.startswith(("v_dual_fmac", "v_dual_dot2acc")) else
              g.get("vsrc1") if i.name == "v_dual_fmamk_f32" else None for i, g in ((x, gx), (y, gy))]
        if None in s2 or s2[0] % 2 != s2[1] % 2:
            break
    return f"{tx} :: {ty}"


def _policy(g: Gen, info: OpInfo) -> str:
    """gfx12 ``th:``/``scope:`` names (sometimes)."""
    from tg_amd.symbols import DEFAULT_POLICY, _names
    r = g.rng
    kind = "th_atomic" if "_atomic_" in info.name else "th_store" if "_store_" in info.name else "th_load"
    text = ""
    if r.random() < 0.3:
        text += " th:" + r.choice(sorted({**DEFAULT_POLICY[kind], **_names(g.arch.name)[kind]}))
    if r.random() < 0.3:
        text += " scope:" + r.choice(sorted({**DEFAULT_POLICY["scope"], **_names(g.arch.name)["scope"]}))
    return text


def _buffer(g: Gen, info: OpInfo) -> str:
    r = g.rng
    arch = g.arch
    if not info.sig:
        return info.name
    load = "_load_" in info.name and "_lds_" not in info.name
    tfe = load and arch.gen != 9 and r.random() < 0.15 and not info.name.startswith("tbuffer")
    addr = r.choice(["", "offen", "idxen", "idxen offen"])
    naddr = len(addr.split())
    ops = []
    for role in info.sig:
        if role == "vdata":
            ops.append(g.vgpr(info.count(3) + int(tfe)))
        elif role == "vaddr":
            ops.append(g.vgpr(naddr) if naddr else "off")
        elif role == "srsrc":
            lo = r.randrange(0, arch.max_sgpr - 3, 4)
            ops.append(f"s[{lo}:{lo + 3}]")
        elif role == "soffset":
            choices = [f"s{r.randrange(arch.max_sgpr)}", "m0"]
            choices.append("null" if arch.gen == 12 else str(r.randint(0, 64)))
            ops.append(r.choice(choices))
    text = f"{info.name} {', '.join(ops)}"
    if info.name.startswith("tbuffer") and r.random() < 0.7:
        from tg_amd.symbols import _names
        names = sorted(_names(arch.name)["format"])
        text += f" format:{r.randint(1, 127)}" if r.random() < 0.4 else f" format:[{r.choice(names)}]"
    if addr:
        text += " " + addr
    if r.random() < 0.5:
        text += f" offset:{r.randint(1, 0x7FFFFF if arch.gen == 12 else 4095)}"
    flags = {11: ["glc", "slc", "dlc"], 9: ["sc0", "sc1", "nt"], 12: []}[arch.gen]
    for flag in flags:
        if r.random() < 0.2:
            text += f" {flag}"
    if arch.gen == 12:
        text += _policy(g, info)
    if tfe:
        text += " tfe"
    return text


def _dpp_ctrl(g: Gen) -> str:
    r = g.rng
    choices = [f"quad_perm:[{','.join(str(r.randint(0, 3)) for _ in range(4))}]", f"row_shl:{r.randint(1, 15)}",
               f"row_shr:{r.randint(1, 15)}", f"row_ror:{r.randint(1, 15)}", "row_mirror", "row_half_mirror"]
    if g.arch.rdna:
        choices += [f"row_share:{r.randint(0, 15)}", f"row_xmask:{r.randint(0, 15)}"]
    else:
        choices += ["row_bcast:15", "row_bcast:31", "wave_shl:1", "wave_ror:1", "wave_shr:1", "wave_rol:1"]
    text = r.choice(choices)
    if r.random() < 0.3:
        text += f" row_mask:{hex(r.randint(0, 15))} bank_mask:{hex(r.randint(0, 15))}"
    if r.random() < 0.2:
        text += " bound_ctrl:1"
    if g.arch.rdna and r.random() < 0.2:
        text += " fi:1"
    if g.arch.rdna and r.random() < 0.25:
        text = f"dpp8:[{','.join(str(r.randint(0, 7)) for _ in range(8))}]" + (" fi:1" if r.random() < 0.3 else "")
    return text


def _dpp_case(g: Gen, info: OpInfo) -> str:
    """A VOP1/VOP2/VOPC instruction with DPP: VGPR sources, float ones sometimes negated or absolute."""
    r = g.rng
    top = 128 if 16 in (info.width(0), info.width(1)) else 256
    ops = []
    dpp8 = _dpp_ctrl(g)
    for role in info.sig:
        if role == "vdst":
            ops.append(g.vgpr(1, top=top))
        elif role in ("src0", "vsrc1", "src1", "src2"):
            text = g.vgpr(1, top=top)
            slot = {"src0": 1, "vsrc1": 2, "src1": 2, "src2": 3}[role]
            if info.is_float(slot) and not dpp8.startswith("dpp8") and r.random() < 0.3 and \
                    "nomods" not in info.flags:
                text = r.choice([f"-{text}", f"|{text}|"])
            ops.append(text)
        elif role == "vcc":
            ops.append("vcc_lo" if g.arch.wave == 32 else "vcc")
    return f"{info.name} {', '.join(ops)} {dpp8}"


def _dpp_ok(info: OpInfo, arch: Arch) -> bool:
    """Instructions llvm-mc reads with DPP (its listing), with operands the DPP generator writes."""
    from tg_amd.llvm_table import dpp_forms
    vop3 = info.fmt == "VOP3"
    return ((vop3, "dpp16") in dpp_forms(arch.gen).get(info.name, ()) and all(info.count(k) == 1 for k in range(4))
            and set(info.sig) <= {"vdst", "src0", "vsrc1", "src1", "src2", "vcc"} and "src0" in info.sig
            and not info.name.startswith(("v_cmpx", "v_permlane")))


def _vinterp(g: Gen, info: OpInfo) -> str:
    r = g.rng
    ops = [g.vgpr(1)] + [(r.choice(["-", ""]) + g.vgpr(1)) for _ in range(3)]
    text = f"{info.name} {', '.join(ops)}"
    if r.random() < 0.3:
        text += " clamp"  # llvm-mc wants clamp before op_sel here
    if "f16" in info.name and r.random() < 0.3:
        text += f" op_sel:[{','.join(str(r.randint(0, 1)) for _ in range(4))}]"
    return text + f" wait_exp:{r.randint(0, 7)}"


def _ldsdir(g: Gen, info: OpInfo) -> str:
    r = g.rng
    ops = [g.vgpr(1)] + ([f"attr{r.randint(0, 32)}.{r.choice('xyzw')}"] if "attr" in info.sig else [])
    waits = f" wait_va_vdst:{r.randint(0, 15)} wait_vm_vsrc:{r.randint(0, 1)}" if g.arch.gen == 12 else \
        f" wait_vdst:{r.randint(0, 15)}"
    return f"{info.name} {', '.join(ops)}{waits}"


SELS = ("BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD")


def _sdwa_case(g: Gen, info: OpInfo) -> str:
    """gfx942 SDWA: selectors, sext on integer sources, neg/abs on float ones, an SGPR or constant src0."""
    from tg_amd.llvm_table import dpp_forms
    r = g.rng
    ops = []
    for role in info.sig:
        if role == "vdst":
            ops.append(g.vgpr(1))
        elif role == "vcc":
            ops.append("vcc" if ops or r.random() < 0.5 else g.sgpr(2))
        elif role in ("src0", "vsrc1"):
            slot = 1 if role == "src0" else 2
            text = g.vgpr(1) if role == "vsrc1" or r.random() < 0.7 else r.choice([g.sgpr(1), str(r.randint(0, 64))])
            if info.is_float(slot) and r.random() < 0.3 and not text.isdigit():
                text = r.choice([f"-{text}", f"|{text}|"])
            elif not info.is_float(slot) and r.random() < 0.2 and text.startswith("v") and \
                    (False, "sdwa") in dpp_forms(g.arch.gen).get(info.name, ()):
                text = f"sext({text})"
            ops.append(text)
    text = f"{info.name}_sdwa {', '.join(ops)}"
    if info.fmt != "VOPC" and (False, "sdwa") in dpp_forms(g.arch.gen).get(info.name, ()):
        text += f" dst_sel:{r.choice(SELS)} dst_unused:{r.choice(['UNUSED_PAD', 'UNUSED_SEXT', 'UNUSED_PRESERVE'])}"
    text += f" src0_sel:{r.choice(SELS)}"
    if "vsrc1" in info.sig:
        text += f" src1_sel:{r.choice(SELS)}"
    return text


def _sdwa_ok(info: OpInfo, arch: Arch) -> bool:
    from tg_amd.llvm_table import dpp_forms
    forms = dpp_forms(arch.gen).get(info.name, ())
    return (((False, "sdwa") in forms or (False, "sdwa_src") in forms) and all(info.count(k) == 1 for k in range(4))
            and set(info.sig) <= {"vdst", "src0", "vsrc1", "vcc"} and "src0" in info.sig)


def _exp_case(g: Gen, info: OpInfo) -> str:
    r = g.rng
    target = r.choice(["mrt0", "mrt7", "mrtz", "pos0", "pos3", "prim", "dual_src_blend0"])
    srcs = [g.vgpr(1) if r.random() < 0.7 else "off" for _ in range(4)]
    return f"{info.name} {target} {', '.join(srcs)}" + (" done" if r.random() < 0.5 else "") + \
        (" row_en" if r.random() < 0.3 else "")


IMAGE_TH = {"th_load": ["TH_LOAD_NT", "TH_LOAD_HT", "TH_LOAD_RT_NT"], "th_store": ["TH_STORE_NT", "TH_STORE_HT"],
            "th_atomic": ["TH_ATOMIC_RETURN", "TH_ATOMIC_NT", "TH_ATOMIC_NT_RETURN"]}


def _image_vaddr(g: Gen, info: OpInfo, words: int) -> str:
    """An address of ``words`` VGPRs: a range or (gfx11, 2..5 words) a list; gfx12: always a list (the last of its
    4 or 5 fields holding the rest as a range)."""
    from tg_amd.image import NSA_FIELDS, _sizes
    r = g.rng
    if words == 1:
        return g.vgpr(1)
    if g.arch.gen == 11 and (words > 5 or r.random() < 0.5):
        if 5 <= words <= 7 and max(_sizes(info.name)) >= 8 and r.random() < 0.3:
            words = 8  # the oversized form llvm-mc still takes
        return g.vgpr(words)
    fields = NSA_FIELDS[info.fmt]
    singles = words if words <= fields else fields - 1
    regs = [g.vgpr(1) for _ in range(singles)]
    if words > fields:
        regs.append(g.vgpr(words - singles))
    return "[" + ", ".join(regs) + "]"


def _image(g: Gen, info: OpInfo) -> str:
    """image_*: dmask, dim, a16/d16/tfe/lwe, cache policy; data and address counts as LLVM computes them."""
    from tg_amd.image import BVH, DIMS, _sizes, address_words, bvh_groups, data_count, is_store, shape
    r, gen = g.rng, g.arch.gen
    rsrc = r.choice(["ttmp[8:15]", *(f"s[{lo}:{lo + 7}]" for lo in (0, 4, 8, 40, 96))])
    if info.name in BVH:
        a16 = r.random() < 0.4
        groups = bvh_groups(info.name, a16)
        if gen == 11 and r.random() < 0.5:
            vaddr = g.vgpr(sum(groups))
        else:
            vaddr = "[" + ", ".join(g.vgpr(n) for n in groups) + "]"
        srsrc = r.choice(["s[4:7]", "s[100:103]", "ttmp[4:7]"])
        return f"{info.name} {g.vgpr(4)}, {vaddr}, {srsrc}" + (" a16" if a16 else "")
    s = shape(info.name)
    dims = [6, 7] if s.msaa else list(range(6)) if s.sampler else list(range(8))
    a16 = r.random() < 0.3
    dim = r.choice(dims)
    if address_words(s, dim, a16) not in _sizes(info.name):
        dim, a16 = 0, False
    if s.atomic:
        dmask = r.choice([3, 15]) if "cmpswap" in info.name else r.choice([1, 3])
    elif s.gather:
        dmask = r.choice([1, 2, 4, 8])
    else:
        dmask = r.randint(1, 15)
    d16 = s.d16 and r.random() < 0.3
    tfe = r.random() < 0.2 and (not s.atomic or (dmask == 1 and "cmpswap" not in info.name))
    tfe = tfe and not (s.gather and d16)  # llvm has no 3-VGPR gather
    # vdata below v252: llvm-mc's disassembler first reads 4 data VGPRs and refuses ones past v255
    ops = [g.vgpr(data_count(s, dmask, d16, tfe), top=252), _image_vaddr(g, info, address_words(s, dim, a16)), rsrc]
    if s.sampler:
        ops.append(r.choice(["ttmp[4:7]", *(f"s[{lo}:{lo + 3}]" for lo in (0, 8, 20, 100))]))
    mods = [f"dmask:{dmask:#x}", f"dim:SQ_RSRC_IMG_{DIMS[dim][0]}" if r.random() < 0.8 else f"dim:{DIMS[dim][0]}"]
    sampled = gen == 11 or info.fmt == "VSAMPLE"
    if sampled and r.random() < 0.2:
        mods.append("unorm")
    if gen == 11:
        mods += [f for f in ("glc", "slc", "dlc") if r.random() < 0.2]
    else:
        kind = "th_store" if is_store(info.name) else s.policy
        if r.random() < 0.4:
            mods.append(f"th:{r.choice(IMAGE_TH[kind])}")
        if r.random() < 0.3:
            mods.append(f"scope:{r.choice(['SCOPE_SE', 'SCOPE_DEV', 'SCOPE_SYS'])}")
    mods += ["r128"] * (r.random() < 0.15) + ["a16"] * a16 + ["tfe"] * tfe
    mods += ["lwe"] * (sampled and r.random() < 0.15) + ["d16"] * d16
    return f"{info.name} {', '.join(ops)} {' '.join(mods)}"


def _true16_case(g: Gen, info: OpInfo) -> str:
    """v_mov_b16: VGPR halves of v0..v127, SGPRs, inline and 16-bit literal constants; DPP16/DPP8 sometimes."""
    r = g.rng
    half = lambda: f"v{r.randrange(128)}.{r.choice('lh')}"  # noqa: E731
    if r.random() < 0.25:
        return f"{info.name} {half()}, {half()} {_dpp_ctrl(g)}"
    # no float constants: llvm-objdump prints an inline 0.5 as 0x3800, which llvm-mc reads as a literal
    src = r.choice([half(), half(), g.sgpr(1), str(r.randint(-16, 64)), hex(r.randint(65, 0xFFFF))])
    return f"{info.name}{r.choice(['', '_e32'])} {half()}, {src}"


def case_for(g: Gen, info: OpInfo) -> str:
    fmt = info.fmt
    if info.name == "v_mov_b16":
        return _true16_case(g, info)
    if fmt in ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP"):
        return _salu(g, info)
    if fmt == "SMEM":
        return _smem(g, info)
    if fmt in ("VOP1", "VOP2", "VOPC"):
        if _dpp_ok(info, g.arch) and g.rng.random() < 0.2:
            return _dpp_case(g, info)
        if _sdwa_ok(info, g.arch) and g.rng.random() < 0.25:
            return _sdwa_case(g, info)
        force = g.rng.choice([None, "e32", "e64"]) if info.e64 is not None else None
        return _valu(g, info, force)
    if fmt in ("VOP3", "VOP3SD"):
        if _dpp_ok(info, g.arch) and g.rng.random() < 0.15:
            return _dpp_case(g, info)
        return _valu(g, info, None)
    if fmt == "VOP3P":
        return _vop3p(g, info)
    if fmt == "MAI":
        return _mai(g, info)
    if fmt == "DS":
        return _ds(g, info)
    if fmt in ("GLOBAL", "FLAT", "SCRATCH"):
        text = _global(g, info)
        return text + (_policy(g, info) if g.arch.gen == 12 and "th:" not in text else "")
    if fmt in ("MUBUF", "MTBUF"):
        return _buffer(g, info)
    if fmt == "VINTERP":
        return _vinterp(g, info)
    if fmt == "EXP":
        return _exp_case(g, info)
    if fmt == "LDSDIR":
        return _ldsdir(g, info)
    if fmt in ("MIMG", "VIMAGE", "VSAMPLE"):
        return _image(g, info)
    raise ValueError(fmt)


def cases(arch: str, seed: int, per_op: int) -> list[str]:
    """``per_op`` random instances of every instruction of ``arch`` (VOPD: every X with random Ys)."""
    rng = random.Random(f"{arch}:{seed}")
    g = Gen(arch, rng)
    infos = mnemonics(arch)
    plain = [i for i in infos if not i.fmt.startswith("VOPD")]
    xs = [i for i in infos if i.fmt == "VOPD_X"]
    ys = [i for i in infos if i.fmt == "VOPD_Y"]
    out = [case_for(g, info) for info in plain for _ in range(per_op)]
    for x in xs:
        for _ in range(per_op):
            y = rng.choice(ys)
            if "k" in x.sig and "k" in y.sig and rng.random() < 0.5:
                y = rng.choice([i for i in ys if "k" not in i.sig])
            out.append(_vopd(g, x, y))
    for y in ys:
        for _ in range(per_op):
            out.append(_vopd(g, rng.choice([x for x in xs if "k" not in x.sig]), y))
    return out

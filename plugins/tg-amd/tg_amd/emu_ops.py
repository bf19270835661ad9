"""What each instruction does: one decoded ``Inst`` in, one Python closure ``op(wave) -> next`` out.

In: an ``Inst`` from ``tg_amd.decoder`` (so from the encoded bytes), the arch, its byte position and the
map from byte positions to instruction indices. Out: a closure that executes the instruction on a
``Wave`` and returns ``None`` (fall through), an instruction index (branch taken), ``BLOCK`` (wait at a
barrier; call again later) or ``END``.

How: operands are resolved once, here, into small reader/writer closures (a VGPR row, an SGPR slot, a
precomputed constant); a vector instruction is then one numpy operation over the 32 lanes. Semantics are
tables keyed by mnemonic (``VALU``, ``SOP2``, ...) written from the RDNA3/RDNA4 ISA guides. Instructions
not in the tables compile to an op that raises ``EmulatorError`` naming the instruction, arch and byte
offset when reached.

Numerics: f32 add/mul are numpy's (IEEE, round to nearest even); FMA and f16 arithmetic are computed in
float64 and rounded once to the result type (FMA may differ from a fused op in the last bit in rare
double-rounding cases); WMMA sums the 16 exact f16 products in float64 and rounds once to f32.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tg_amd.emu_state import EXEC, FULL, NULL, VCC, EmulatorError, Wave, lanes, lds_check, mask_of
from tg_amd.inst import Inst
from tg_amd.operands import OFF, SPECIALS, Mod, Reg, float_bits

Op = Callable[[Wave], Any]
BLOCK, END = -1, -2
M32, M64 = 0xFFFFFFFF, (1 << 64) - 1
U64_32 = np.uint64(32)
ALL_LANES = np.arange(32)

u32, i32, f32, f16, u64 = "u32", "i32", "f32", "f16", "u64"
NP = {u32: np.uint32, i32: np.int32, f32: np.float32, f16: np.float16, u64: np.uint64}


class Context:
    """Where an instruction sits: arch family, byte position, branch targets, memory counter names."""

    def __init__(self, arch: Any, pos: int, index_of: dict[int, int], memory: Any):
        self.arch, self.gen, self.pos, self.index_of, self.memory = arch, arch.gen, pos, index_of, memory
        rdna4 = self.gen == 12
        self.load_counter = "load" if rdna4 else "vm"
        self.ds_counter = "ds" if rdna4 else "lgkm"
        self.smem_counter = "km" if rdna4 else "lgkm"

    def fail(self, inst: Inst, why: str) -> EmulatorError:
        return EmulatorError(f"{inst.name}: {why} (arch {self.arch.name}, byte {self.pos})")


# ------------------------------------------------------------------------------------------ operands

def scalar_code(reg: Reg) -> int:
    if reg.kind == "s":
        return reg.index
    if reg.kind == "ttmp":
        return 108 + reg.index
    code = SPECIALS[reg.kind][1]
    if code is None or reg.kind == "scc":
        raise EmulatorError(f"register {reg.kind} cannot be read as a scalar operand")
    return code


def _const_bits(value: int | float, kind: str) -> int:
    """The bits an inline constant or literal stands for in an operand of ``kind``."""
    if isinstance(value, float):
        return float_bits(value, 16 if kind == f16 else 64 if kind == "f64" else 32)
    return value & (M64 if kind == u64 else M32)


def sread(op: Any, bits: int = 32) -> Callable[[Wave], int]:
    """Reader of a scalar operand as an unsigned int of ``bits`` bits."""
    if isinstance(op, Reg):
        code = scalar_code(op)
        if bits == 64:
            return lambda w: w.s[code] | w.s[code + 1] << 32
        return lambda w: w.s[code]
    value = _const_bits(op, u64 if bits == 64 else u32)
    return lambda w: value


def swriter(op: Any, bits: int = 32) -> Callable[[Wave, int], None]:
    code = scalar_code(op)
    if code == NULL:
        return lambda w, x: None
    if bits == 64:
        def write64(w: Wave, x: int) -> None:
            w.s[code], w.s[code + 1] = x & M32, x >> 32 & M32
        return write64

    def write(w: Wave, x: int) -> None:
        w.s[code] = x & M32
    return write


def vread(op: Any, kind: str) -> Callable[[Wave], Any]:
    """Reader of a vector-instruction source as a numpy array of 32 lanes (or a 0-d array) of ``kind``."""
    neg = absolute = False
    if isinstance(op, Mod):
        neg, absolute, op = op.neg, op.abs, op.value
        if kind not in (f32, f16):
            raise EmulatorError(f"neg/abs modifiers on a {kind} operand")
    read = _vread_plain(op, kind)
    if absolute and neg:
        return lambda w: -np.abs(read(w))
    if absolute:
        return lambda w: np.abs(read(w))
    if neg:
        return lambda w: -read(w)
    return read


def _vread_plain(op: Any, kind: str) -> Callable[[Wave], Any]:
    if isinstance(op, Reg) and op.kind == "v":
        i = op.index
        if kind == u32:
            return lambda w: w.v[i]
        if kind == f16:
            return lambda w: w.v[i].view(np.float16)[::2]
        if kind == u64:
            return lambda w: w.v[i].astype(np.uint64) | (w.v[i + 1].astype(np.uint64) << U64_32)
        view = NP[kind]
        return lambda w: w.v[i].view(view)
    if isinstance(op, Reg):
        code = scalar_code(op)
        if kind == u64:
            return lambda w: np.array(w.s[code] | w.s[code + 1] << 32, dtype=np.uint64)
        if kind == f16:
            return lambda w: np.array(w.s[code] & 0xFFFF, dtype=np.uint16).view(np.float16)
        view = NP[kind]
        return lambda w: np.array(w.s[code], dtype=np.uint32).view(view)
    bits = _const_bits(op, kind)
    if kind == f16:
        value = np.array(bits & 0xFFFF, dtype=np.uint16).view(np.float16)
    elif kind == u64:
        value = np.array(bits, dtype=np.uint64)
    else:
        value = np.array(bits, dtype=np.uint32).view(NP[kind])
    return lambda w: value


def to_bits(kind: str, x: Any) -> Any:
    """Lane values of ``kind`` -> uint32 register bits (f16: the low half, high half zero)."""
    if kind == f32:
        return np.asarray(x, dtype=np.float32).view(np.uint32)
    if kind == f16:
        return np.asarray(x, dtype=np.float16).view(np.uint16).astype(np.uint32)
    return np.asarray(x).astype(np.uint32)


def vreg(op: Any, inst: Inst, ctx: Context) -> int:
    if not isinstance(op, Reg) or op.kind != "v":
        raise ctx.fail(inst, f"expected a VGPR, got {op!r}")
    return op.index


# ------------------------------------------------------------------------------------------ vector ALU

def _f64(x: Any) -> Any:
    return np.asarray(x, dtype=np.float64)


def _fma(a: Any, b: Any, c: Any) -> Any:
    return _f64(a) * _f64(b) + _f64(c)


def _cvt_f_to_int(x: Any, lo: float, hi: float, dtype: Any) -> Any:
    """Float -> int as the ISA converts: truncate, NaN -> 0, saturate at the type's range."""
    t = np.trunc(np.nan_to_num(_f64(x), nan=0.0, posinf=hi, neginf=lo))
    return np.clip(t, lo, hi).astype(dtype)


M24 = np.uint32(0xFFFFFF)
S31 = np.uint32(31)
S63 = np.uint64(63)

# name -> (dst kind, source kinds, fn over the sources in assembly order); "acc": the dst is also read last
VALU: dict[str, tuple[str, tuple[str, ...], Callable[..., Any]]] = {
    "v_mov_b32": (u32, (u32,), lambda a: a),
    "v_not_b32": (u32, (u32,), lambda a: ~a),
    "v_add_nc_u32": (u32, (u32, u32), lambda a, b: a + b),
    "v_sub_nc_u32": (u32, (u32, u32), lambda a, b: a - b),
    "v_subrev_nc_u32": (u32, (u32, u32), lambda a, b: b - a),
    "v_add_nc_i32": (u32, (u32, u32), lambda a, b: a + b),
    "v_sub_nc_i32": (u32, (u32, u32), lambda a, b: a - b),
    "v_and_b32": (u32, (u32, u32), lambda a, b: a & b),
    "v_or_b32": (u32, (u32, u32), lambda a, b: a | b),
    "v_xor_b32": (u32, (u32, u32), lambda a, b: a ^ b),
    "v_xnor_b32": (u32, (u32, u32), lambda a, b: ~(a ^ b)),
    "v_lshlrev_b32": (u32, (u32, u32), lambda a, b: b << (a & S31)),
    "v_lshrrev_b32": (u32, (u32, u32), lambda a, b: b >> (a & S31)),
    "v_ashrrev_i32": (i32, (u32, i32), lambda a, b: b >> (a & S31).astype(np.int32)),
    "v_lshlrev_b64": (u64, (u32, u64), lambda a, b: b << (a.astype(np.uint64) & S63)),
    "v_lshrrev_b64": (u64, (u32, u64), lambda a, b: b >> (a.astype(np.uint64) & S63)),
    "v_mul_lo_u32": (u32, (u32, u32), lambda a, b: a * b),
    "v_mul_hi_u32": (u32, (u32, u32), lambda a, b: (a.astype(np.uint64) * b.astype(np.uint64)) >> U64_32),
    "v_mul_u32_u24": (u32, (u32, u32), lambda a, b: (a & M24) * (b & M24)),
    "v_mul_hi_u32_u24": (u32, (u32, u32),
                         lambda a, b: ((a & M24).astype(np.uint64) * (b & M24).astype(np.uint64)) >> U64_32),
    "v_mad_u32_u24": (u32, (u32, u32, u32), lambda a, b, c: (a & M24) * (b & M24) + c),
    "v_lshl_add_u32": (u32, (u32, u32, u32), lambda a, b, c: (a << (b & S31)) + c),
    "v_add_lshl_u32": (u32, (u32, u32, u32), lambda a, b, c: (a + b) << (c & S31)),
    "v_lshl_or_b32": (u32, (u32, u32, u32), lambda a, b, c: (a << (b & S31)) | c),
    "v_and_or_b32": (u32, (u32, u32, u32), lambda a, b, c: (a & b) | c),
    "v_or3_b32": (u32, (u32, u32, u32), lambda a, b, c: a | b | c),
    "v_xor3_b32": (u32, (u32, u32, u32), lambda a, b, c: a ^ b ^ c),
    "v_add3_u32": (u32, (u32, u32, u32), lambda a, b, c: a + b + c),
    "v_bfe_u32": (u32, (u32, u32, u32),
                  lambda a, b, c: (a >> (b & S31)) & ((np.uint32(1) << (c & S31)) - np.uint32(1))),
    "v_bfi_b32": (u32, (u32, u32, u32), lambda a, b, c: (a & b) | (~a & c)),
    "v_min_u32": (u32, (u32, u32), np.minimum),
    "v_max_u32": (u32, (u32, u32), np.maximum),
    "v_min_i32": (i32, (i32, i32), np.minimum),
    "v_max_i32": (i32, (i32, i32), np.maximum),
    "v_cvt_f32_u32": (f32, (u32,), lambda a: a.astype(np.float32)),
    "v_cvt_f32_i32": (f32, (i32,), lambda a: a.astype(np.float32)),
    "v_cvt_u32_f32": (u32, (f32,), lambda a: _cvt_f_to_int(a, 0.0, 4294967295.0, np.uint32)),
    "v_cvt_i32_f32": (i32, (f32,), lambda a: _cvt_f_to_int(a, -2147483648.0, 2147483647.0, np.int32)),
    "v_cvt_f16_f32": (f16, (f32,), lambda a: a.astype(np.float16)),
    "v_cvt_f32_f16": (f32, (f16,), lambda a: a.astype(np.float32)),
    "v_add_f32": (f32, (f32, f32), lambda a, b: a + b),
    "v_sub_f32": (f32, (f32, f32), lambda a, b: a - b),
    "v_subrev_f32": (f32, (f32, f32), lambda a, b: b - a),
    "v_mul_f32": (f32, (f32, f32), lambda a, b: a * b),
    "v_max_num_f32": (f32, (f32, f32), np.fmax),
    "v_min_num_f32": (f32, (f32, f32), np.fmin),
    "v_max_f32": (f32, (f32, f32), np.fmax),
    "v_min_f32": (f32, (f32, f32), np.fmin),
    "v_fma_f32": (f32, (f32, f32, f32), _fma),
    "v_fmaak_f32": (f32, (f32, f32, f32), _fma),   # src0 * src1 + K
    "v_fmamk_f32": (f32, (f32, f32, f32), _fma),   # src0 * K + src1 (K is the middle operand)
    "v_fmac_f32": (f32, (f32, f32, "acc"), _fma),
    "v_add_f16": (f16, (f16, f16), lambda a, b: _f64(a) + _f64(b)),
    "v_sub_f16": (f16, (f16, f16), lambda a, b: _f64(a) - _f64(b)),
    "v_mul_f16": (f16, (f16, f16), lambda a, b: _f64(a) * _f64(b)),
    "v_fma_f16": (f16, (f16, f16, f16), _fma),
    "v_fmac_f16": (f16, (f16, f16, "acc"), _fma),
    "v_pack_b32_f16": (u32, (f16, f16), lambda a, b: a.view(np.uint16).astype(np.uint32)
                       | (b.view(np.uint16).astype(np.uint32) << np.uint32(16))),
}


def _valu_compute(inst: Inst, ctx: Context) -> tuple[list[int], Callable[[Wave], list[Any]]]:
    """(destination VGPRs, fn computing their new bits) of a table VALU instruction."""
    dkind, skinds, fn = VALU[inst.name]
    dst = vreg(inst.operands[0], inst, ctx)
    srcs = list(inst.operands[1:])
    kinds = list(skinds)
    if kinds and kinds[-1] == "acc":
        kinds[-1] = dkind
        srcs.append(inst.operands[0])
    if len(srcs) != len(kinds):
        raise ctx.fail(inst, f"expected {len(kinds)} sources, got {len(srcs)}")
    readers = [vread(op, k) for op, k in zip(srcs, kinds, strict=True)]
    if dkind == u64:
        def compute64(w: Wave) -> list[Any]:
            x = np.asarray(fn(*[r(w) for r in readers]), dtype=np.uint64)
            return [(x & np.uint64(M32)).astype(np.uint32), (x >> U64_32).astype(np.uint32)]
        return [dst, dst + 1], compute64
    if len(readers) == 1:
        (r0,) = readers
        return [dst], lambda w: [to_bits(dkind, fn(r0(w)))]
    if len(readers) == 2:
        r0, r1 = readers
        return [dst], lambda w: [to_bits(dkind, fn(r0(w), r1(w)))]
    r0, r1, r2 = readers
    return [dst], lambda w: [to_bits(dkind, fn(r0(w), r1(w), r2(w)))]


def _cndmask_compute(inst: Inst, ctx: Context) -> tuple[list[int], Callable[[Wave], list[Any]]]:
    dst = vreg(inst.operands[0], inst, ctx)
    r0, r1 = vread(inst.operands[1], u32), vread(inst.operands[2], u32)
    mask = sread(inst.operands[3])
    return [dst], lambda w: [np.where(lanes(mask(w)), r1(w), r0(w))]


def _no_vop3_mods(inst: Inst, ctx: Context) -> None:
    for key in inst.mods:
        raise ctx.fail(inst, f"modifier {key} is not supported by the emulator")


def _valu(inst: Inst, ctx: Context) -> Op:
    _no_vop3_mods(inst, ctx)
    regs, compute = (_cndmask_compute if inst.name == "v_cndmask_b32" else _valu_compute)(inst, ctx)
    if len(regs) == 1:
        (d,) = regs

        def op1(w: Wave) -> None:
            w.vwrite(d, compute(w)[0])
        return op1

    def op(w: Wave) -> None:
        for reg, value in zip(regs, compute(w), strict=True):
            w.vwrite(reg, value)
    return op


def _vopd(inst: Inst, ctx: Context) -> Op:
    """A dual-issue pair: both halves read their sources before either writes."""
    halves = []
    for half in (inst, inst.dual):
        assert half is not None
        plain = Inst("v_" + half.name.removeprefix("v_dual_"), half.operands, half.mods)
        if plain.name not in VALU and plain.name != "v_cndmask_b32":
            return _unsupported(inst, ctx, f"VOPD half {half.name}")
        halves.append((_cndmask_compute if plain.name == "v_cndmask_b32" else _valu_compute)(plain, ctx))
    (rx, cx), (ry, cy) = halves

    def op(w: Wave) -> None:
        x, y = cx(w), cy(w)
        w.vwrite(rx[0], x[0])
        w.vwrite(ry[0], y[0])
    return op


def _readfirstlane(inst: Inst, ctx: Context) -> Op:
    write, src = swriter(inst.operands[0]), vread(inst.operands[1], u32)

    def op(w: Wave) -> None:
        ex = w.s[EXEC]
        lane = (ex & -ex).bit_length() - 1 if ex else 0
        write(w, int(np.broadcast_to(src(w), (32,))[lane]))
    return op


# ---- compares: v_cmp_<cond>_<type> writes a lane mask to VCC or an SGPR; v_cmpx_* writes EXEC
CMP: dict[str, Callable[[Any, Any], Any]] = {
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal, "lg": lambda a, b: (a < b) | (a > b), "neq": lambda a, b: ~(a == b),
    "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
}
CMP_RE = re.compile(r"^v_cmp(x?)_([a-z]+)_([uif](?:16|32|64))$")
CMP_KIND = {"u32": u32, "i32": i32, "f32": f32, "f16": f16, "u64": u64}


def _vcmp(inst: Inst, ctx: Context) -> Op:
    _no_vop3_mods(inst, ctx)
    m = CMP_RE.match(inst.name)
    if not m or m.group(2) not in CMP or m.group(3) not in CMP_KIND:
        return _unsupported(inst, ctx)
    to_exec, cond, kind = m.group(1) == "x", CMP[m.group(2)], CMP_KIND[m.group(3)]
    ops = inst.operands if to_exec else inst.operands[1:]
    a, b = vread(ops[0], kind), vread(ops[1], kind)
    write = (lambda w, x: w.s.__setitem__(EXEC, x)) if to_exec else swriter(inst.operands[0])

    def op(w: Wave) -> None:
        hit = np.broadcast_to(cond(a(w), b(w)), (32,)) & lanes(w.s[EXEC])
        write(w, mask_of(hit))
    return op


def _carry(inst: Inst, ctx: Context) -> Op:
    """v_add_co_u32 / v_sub_co_u32 / v_subrev_co_u32 and the *_co_ci_u32 forms: a lane mask of carries."""
    _no_vop3_mods(inst, ctx)
    dst = vreg(inst.operands[0], inst, ctx)
    write_carry = swriter(inst.operands[1])
    a, b = vread(inst.operands[2], u32), vread(inst.operands[3], u32)
    carry_in = sread(inst.operands[4]) if "_ci_" in inst.name else None
    kind = inst.name.split("_")[1]  # add, sub, subrev

    def op(w: Wave) -> None:
        x, y = a(w).astype(np.int64), b(w).astype(np.int64)
        if kind == "subrev":
            x, y = y, x
        cin = lanes(carry_in(w)).astype(np.int64) if carry_in else 0
        full = x + y + cin if kind == "add" else x - y - cin
        out = np.broadcast_to(full, (32,))
        carries = (out > M32) if kind == "add" else (out < 0)
        w.vwrite(dst, out.astype(np.uint32))
        write_carry(w, mask_of(carries & lanes(w.s[EXEC])))
    return op


# ---- WMMA
# Register blocks viewed as float16: VGPR r, lane l, half h is element [r, 2l + h] of v[reg:reg+n].view(f16).
def _rdna4_operand(w: Wave, reg: int) -> np.ndarray:
    """4 VGPRs -> the 16x16 matrix [i][k] held by lanes i and i+16: k = 8*(l//16) + 2r + h."""
    x = w.v[reg:reg + 4].view(np.float16).reshape(4, 2, 16, 2)     # [r, l//16, l%16, h]
    return x.transpose(2, 1, 0, 3).astype(np.float64).reshape(16, 16)


def _rdna3_operand(w: Wave, reg: int) -> np.ndarray | None:
    """8 VGPRs -> [i][k] with k = 2r + h from lanes 0-15; None if lanes 16-31 do not repeat them."""
    regs = w.v[reg:reg + 8]
    if not np.array_equal(regs[:, :16], regs[:, 16:]):
        return None
    x = regs.view(np.float16).reshape(8, 2, 16, 2)[:, 0]              # [r, l, h], lanes 0-15
    return x.transpose(1, 0, 2).astype(np.float64).reshape(16, 16)


def _wmma(inst: Inst, ctx: Context) -> Op:
    if inst.name != "v_wmma_f32_16x16x16_f16":
        return _unsupported(inst, ctx)
    if inst.mods:
        raise ctx.fail(inst, f"modifiers {sorted(inst.mods)} are not supported by the emulator")
    d, a, b, c = (vreg(op, inst, ctx) for op in inst.operands)

    def rdna4(w: Wave) -> None:
        if w.s[EXEC] != FULL:
            raise ctx.fail(inst, f"WMMA needs all 32 lanes enabled, EXEC is 0x{w.s[EXEC]:08x}")
        am, bt = _rdna4_operand(w, a), _rdna4_operand(w, b)
        cm = w.v[c:c + 8].view(np.float32).reshape(8, 2, 16).transpose(1, 0, 2).reshape(16, 16)  # C[r + 8*hi][n]
        dm = (am @ bt.T + cm).astype(np.float32)
        w.v[d:d + 8] = dm.reshape(2, 8, 16).transpose(1, 0, 2).reshape(8, 32).view(np.uint32)

    def rdna3(w: Wave) -> None:
        if w.s[EXEC] != FULL:
            raise ctx.fail(inst, f"WMMA needs all 32 lanes enabled, EXEC is 0x{w.s[EXEC]:08x}")
        am, bt = _rdna3_operand(w, a), _rdna3_operand(w, b)
        if am is None or bt is None:
            raise ctx.fail(inst, f"RDNA3 wave32 WMMA: {'A' if am is None else 'B'} lanes 16-31 must repeat lanes 0-15")
        cm = w.v[c:c + 8].view(np.float32).reshape(16, 16)                # VGPR r, lane l: C[2r + l//16][l%16]
        dm = (am @ bt.T + cm).astype(np.float32)
        w.v[d:d + 8] = dm.reshape(8, 32).view(np.uint32)
    return rdna3 if ctx.gen == 11 else rdna4


# ------------------------------------------------------------------------------------------ scalar ALU

def _sext(x: int, bits: int) -> int:
    x &= (1 << bits) - 1
    return x - (1 << bits) if x >> (bits - 1) else x


def _add_overflow(a: int, b: int, r: int) -> int:
    sa, sb, sr = a >> 31 & 1, b >> 31 & 1, r >> 31 & 1
    return int(sa == sb and sr != sa)


def _sub_overflow(a: int, b: int, r: int) -> int:
    sa, sb, sr = a >> 31 & 1, b >> 31 & 1, r >> 31 & 1
    return int(sa != sb and sr != sa)


def _bfe(a: int, b: int, bits: int) -> int:
    off, width = b & (bits - 1), b >> 16 & 0x7F
    return a >> off & ((1 << width) - 1)


# name -> (fn(a, b, scc) -> (result, new scc or None), dst bits, src0 bits, src1 bits)
SOP2: dict[str, tuple[Callable[[int, int, int], tuple[int, int | None]], int, int, int]] = {}


def _sop2(names: str, fn: Callable[[int, int, int], tuple[int, int | None]], bits: tuple[int, int, int] = (32,) * 3
          ) -> None:
    for name in names.split():
        SOP2[name] = (fn, *bits)


_sop2("s_add_u32 s_add_co_u32", lambda a, b, c: (a + b, (a + b) >> 32))
_sop2("s_sub_u32 s_sub_co_u32", lambda a, b, c: (a - b, int(a < b)))
_sop2("s_addc_u32 s_add_co_ci_u32", lambda a, b, c: (a + b + c, (a + b + c) >> 32))
_sop2("s_subb_u32 s_sub_co_ci_u32", lambda a, b, c: (a - b - c, int(a < b + c)))
_sop2("s_add_i32 s_add_co_i32", lambda a, b, c: (a + b, _add_overflow(a, b, a + b)))
_sop2("s_sub_i32 s_sub_co_i32", lambda a, b, c: (a - b, _sub_overflow(a, b, a - b)))
_sop2("s_mul_i32", lambda a, b, c: (a * b, None))
_sop2("s_mul_hi_u32", lambda a, b, c: (a * b >> 32, None))
_sop2("s_lshl_b32", lambda a, b, c: (r := a << (b & 31) & M32, int(r != 0)))
_sop2("s_lshr_b32", lambda a, b, c: (r := a >> (b & 31), int(r != 0)))
_sop2("s_ashr_i32", lambda a, b, c: (r := _sext(a, 32) >> (b & 31) & M32, int(r != 0)))
_sop2("s_and_b32", lambda a, b, c: (r := a & b, int(r != 0)))
_sop2("s_or_b32", lambda a, b, c: (r := a | b, int(r != 0)))
_sop2("s_xor_b32", lambda a, b, c: (r := a ^ b, int(r != 0)))
_sop2("s_and_not1_b32", lambda a, b, c: (r := a & ~b & M32, int(r != 0)))
_sop2("s_or_not1_b32", lambda a, b, c: (r := (a | ~b) & M32, int(r != 0)))
_sop2("s_min_u32", lambda a, b, c: (min(a, b), int(a < b)))
_sop2("s_max_u32", lambda a, b, c: (max(a, b), int(a > b)))
_sop2("s_min_i32", lambda a, b, c: (a if _sext(a, 32) < _sext(b, 32) else b, int(_sext(a, 32) < _sext(b, 32))))
_sop2("s_max_i32", lambda a, b, c: (a if _sext(a, 32) > _sext(b, 32) else b, int(_sext(a, 32) > _sext(b, 32))))
_sop2("s_cselect_b32", lambda a, b, c: (a if c else b, None))
_sop2("s_bfe_u32", lambda a, b, c: (r := _bfe(a, b, 32), int(r != 0)))
_sop2("s_bfm_b32", lambda a, b, c: (((1 << (a & 31)) - 1) << (b & 31), None))
_sop2("s_pack_ll_b32_b16", lambda a, b, c: (a & 0xFFFF | (b & 0xFFFF) << 16, None))
for _n in (1, 2, 3, 4):
    _sop2(f"s_lshl{_n}_add_u32", lambda a, b, c, n=_n: (r := (a << n) + b, r >> 32))
_sop2("s_and_b64", lambda a, b, c: (r := a & b, int(r != 0)), (64, 64, 64))
_sop2("s_or_b64", lambda a, b, c: (r := a | b, int(r != 0)), (64, 64, 64))
_sop2("s_xor_b64", lambda a, b, c: (r := a ^ b, int(r != 0)), (64, 64, 64))
_sop2("s_cselect_b64", lambda a, b, c: (a if c else b, None), (64, 64, 64))
_sop2("s_lshl_b64", lambda a, b, c: (r := a << (b & 63) & M64, int(r != 0)), (64, 64, 32))
_sop2("s_lshr_b64", lambda a, b, c: (r := a >> (b & 63), int(r != 0)), (64, 64, 32))
_sop2("s_add_nc_u64", lambda a, b, c: (a + b, None), (64, 64, 64))
_sop2("s_sub_nc_u64", lambda a, b, c: (a - b, None), (64, 64, 64))
_sop2("s_mul_u64", lambda a, b, c: (a * b, None), (64, 64, 64))


def _salu2(inst: Inst, ctx: Context) -> Op:
    fn, dbits, abits, bbits = SOP2[inst.name]
    write, a, b = swriter(inst.operands[0], dbits), sread(inst.operands[1], abits), sread(inst.operands[2], bbits)
    mask = M64 if dbits == 64 else M32

    def op(w: Wave) -> None:
        result, scc = fn(a(w), b(w), w.scc)
        write(w, result & mask)
        if scc is not None:
            w.scc = scc
    return op


SCMP: dict[str, Callable[[int, int], bool]] = {
    "eq": lambda a, b: a == b, "lg": lambda a, b: a != b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
}
SCMP_RE = re.compile(r"^s_cmpk?_([a-z]+)_([iu])(32|64)$")


def _scmp(inst: Inst, ctx: Context) -> Op:
    m = SCMP_RE.match(inst.name)
    if not m or m.group(1) not in SCMP:
        return _unsupported(inst, ctx)
    cond, signed, bits = SCMP[m.group(1)], m.group(2) == "i", int(m.group(3))
    a, b = sread(inst.operands[0], bits), sread(inst.operands[1], bits)
    if signed:
        def op_signed(w: Wave) -> None:
            w.scc = int(cond(_sext(a(w), bits), _sext(b(w), bits)))
        return op_signed

    def op(w: Wave) -> None:
        w.scc = int(cond(a(w), b(w)))
    return op


def _salu1(inst: Inst, ctx: Context) -> Op:
    name = inst.name
    if name in ("s_mov_b32", "s_mov_b64", "s_cmov_b32", "s_cmov_b64", "s_not_b32", "s_brev_b32",
                "s_bcnt1_i32_b32"):
        bits = 64 if name.endswith("b64") else 32
        write, src = swriter(inst.operands[0], bits), sread(inst.operands[1], bits)
        if name.startswith("s_cmov"):
            def cmov(w: Wave) -> None:
                if w.scc:
                    write(w, src(w))
            return cmov
        if name == "s_not_b32":
            def snot(w: Wave) -> None:
                r = ~src(w) & M32
                write(w, r)
                w.scc = int(r != 0)
            return snot
        if name == "s_bcnt1_i32_b32":
            def bcnt(w: Wave) -> None:
                r = src(w).bit_count()
                write(w, r)
                w.scc = int(r != 0)
            return bcnt
        if name == "s_brev_b32":
            return lambda w: write(w, int(f"{src(w):032b}"[::-1], 2))
        return lambda w: write(w, src(w))
    saveexec = {"s_and_saveexec_b32": lambda s, e: s & e, "s_or_saveexec_b32": lambda s, e: s | e,
                "s_and_not1_saveexec_b32": lambda s, e: s & ~e & M32}
    if name in saveexec:
        fn, write, src = saveexec[name], swriter(inst.operands[0]), sread(inst.operands[1])

        def op(w: Wave) -> None:
            old = w.s[EXEC]
            new = fn(src(w), old)
            write(w, old)
            w.s[EXEC] = new
            w.scc = int(new != 0)
        return op
    if name == "s_barrier_signal":
        def signal(w: Wave) -> None:
            w.barriers += 1
        return signal
    return _unsupported(inst, ctx)


def _sopk(inst: Inst, ctx: Context) -> Op:
    name = inst.name
    if name.startswith("s_cmpk_"):
        return _scmp(inst, ctx)
    code_dst = inst.operands[0]
    write, cur, imm = swriter(code_dst), sread(code_dst), inst.operands[1]
    if name == "s_movk_i32":
        return lambda w: write(w, imm & M32)
    if name == "s_cmovk_i32":
        def cmovk(w: Wave) -> None:
            if w.scc:
                write(w, imm & M32)
        return cmovk
    if name in ("s_addk_i32", "s_addk_co_i32"):
        def addk(w: Wave) -> None:
            a, b = cur(w), imm & M32
            write(w, (a + b) & M32)
            w.scc = _add_overflow(a, b, a + b)
        return addk
    if name == "s_mulk_i32":
        return lambda w: write(w, cur(w) * imm & M32)
    return _unsupported(inst, ctx)


# ------------------------------------------------------------------------------------------ program flow

def _branch(inst: Inst, ctx: Context) -> Op:
    target_pos = ctx.pos + 4 + 4 * inst.operands[0]
    if target_pos not in ctx.index_of:
        raise ctx.fail(inst, f"branch target byte {target_pos} is not the start of an instruction")
    target = ctx.index_of[target_pos]
    conds: dict[str, Callable[[Wave], bool]] = {
        "s_branch": lambda w: True, "s_cbranch_scc0": lambda w: w.scc == 0, "s_cbranch_scc1": lambda w: w.scc == 1,
        "s_cbranch_vccz": lambda w: w.s[VCC] == 0, "s_cbranch_vccnz": lambda w: w.s[VCC] != 0,
        "s_cbranch_execz": lambda w: w.s[EXEC] == 0, "s_cbranch_execnz": lambda w: w.s[EXEC] != 0,
    }
    if inst.name not in conds:
        return _unsupported(inst, ctx)
    cond = conds[inst.name]
    return lambda w: target if cond(w) else None


def _barrier_wait(w: Wave) -> int | None:
    """Pass once every other live wave of the workgroup has signalled as many barriers as this one."""
    if all(x.done or x.barriers >= w.barriers for x in w.group.waves):
        return None
    return BLOCK


def _rdna3_barrier(w: Wave) -> int | None:
    if not w.in_barrier:
        w.barriers += 1
        w.in_barrier = True
    if _barrier_wait(w) is None:
        w.in_barrier = False
        return None
    return BLOCK


def _end(w: Wave) -> int:
    w.drain()
    return END


NOPS = {"s_nop", "s_clause", "s_setprio", "s_sleep", "s_wait_idle", "s_wait_expcnt", "s_wait_samplecnt",
        "s_wait_bvhcnt", "s_wait_storecnt", "s_icache_inv", "s_dcache_inv", "v_nop"}


def _sopp(inst: Inst, ctx: Context) -> Op:
    name = inst.name
    if name.startswith(("s_branch", "s_cbranch_")):
        return _branch(inst, ctx)
    if name in NOPS:
        return lambda w: None
    if name in ("s_endpgm", "s_code_end"):
        return _end
    if name == "s_barrier":
        return _rdna3_barrier
    if name == "s_barrier_wait":
        return _barrier_wait
    if name == "s_waitcnt":   # RDNA3: vmcnt [15:10], lgkmcnt [9:4]
        value = inst.operands[0]
        vm, lgkm = value >> 10 & 0x3F, value >> 4 & 0x3F

        def waitcnt(w: Wave) -> None:
            w.wait("vm", vm)
            w.wait("lgkm", lgkm)
        return waitcnt
    counters = {"s_wait_loadcnt": ("load",), "s_wait_dscnt": ("ds",), "s_wait_kmcnt": ("km",),
                "s_wait_loadcnt_dscnt": ("load", "ds"), "s_wait_storecnt_dscnt": ("ds",)}
    if name in counters:
        value = inst.operands[0]
        if len(counters[name]) == 2:   # [13:8] loadcnt, [5:0] dscnt
            load, ds = value >> 8 & 0x3F, value & 0x3F

            def wait2(w: Wave) -> None:
                w.wait("load", load)
                w.wait("ds", ds)
            return wait2
        (counter,) = counters[name]
        if name == "s_wait_storecnt_dscnt":
            value &= 0x3F
        return lambda w: w.wait(counter, value)
    return _unsupported(inst, ctx)


# ------------------------------------------------------------------------------------------ memory

MEM_RE = re.compile(r"^(?:global|ds|s)_(load|store)(?:_2addr(?:_stride64)?)?_([biu])(8|16|32|64|96|128|256|512)$")


def _mem_shape(name: str) -> tuple[bool, int, bool, str]:
    """(is load, bytes, sign-extend, d16 part '' / 'lo' / 'hi') of a memory instruction name.

    16-bit halves: ``ds_load_u16_d16(_hi)``, ``ds_store_b16_d16_hi`` (suffix) and ``global_load_d16(_hi)_b16``,
    ``global_store_d16_hi_b16`` (infix)."""
    d16 = ""
    for marker, part in (("_d16_hi", "hi"), ("_d16", "lo")):
        if marker in name:
            d16, name = part, name.replace(marker, "", 1)
            break
    m = MEM_RE.match(name)
    if m is None:
        raise KeyError(name)
    return m.group(1) == "load", int(m.group(3)) // 8, m.group(2) == "i", d16


def _bytes_to_regs(data: np.ndarray, nbytes: int, signed: bool) -> np.ndarray:
    """(lanes, nbytes) uint8 -> (dwords, lanes) uint32 register values (sub-dword loads extended)."""
    if nbytes >= 4:
        return np.ascontiguousarray(data).view("<u4").T
    dtype = {(1, False): np.uint8, (1, True): np.int8, (2, False): "<u2", (2, True): "<i2"}[(nbytes, signed)]
    return data.view(dtype).astype(np.int64).astype(np.uint32).T


def _regs_to_bytes(regs: np.ndarray, nbytes: int, high: bool) -> np.ndarray:
    """(dwords, lanes) uint32 -> (lanes, nbytes) uint8 to store (sub-dword stores take the low or high half)."""
    if nbytes >= 4:
        return np.ascontiguousarray(regs.T).view(np.uint8)
    words = regs[0] >> np.uint32(16) if high else regs[0]
    return np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(-1, 4)[:, :nbytes]


def _write_loaded(w: Wave, dst: int, act: np.ndarray | None, values: np.ndarray, d16: str) -> None:
    """Write loaded dwords (dwords, active lanes) to VGPRs dst.. in the lanes ``act`` (None: all)."""
    cols = ALL_LANES if act is None else act
    if d16:
        old = w.v[dst, cols]
        lo16 = values[0] & np.uint32(0xFFFF)
        values = ((old & np.uint32(0xFFFF0000)) | lo16 if d16 == "lo"
                  else (old & np.uint32(0xFFFF)) | (lo16 << np.uint32(16)))[None]
    if act is None:
        w.v[dst:dst + len(values)] = values
    else:
        w.v[dst:dst + len(values), act] = values


def _active(w: Wave) -> np.ndarray | None:
    ex = w.s[EXEC]
    return None if ex == FULL else np.flatnonzero(lanes(ex))


def _global(inst: Inst, ctx: Context) -> Op:
    try:
        load, nbytes, signed, d16 = _mem_shape(inst.name)
    except KeyError:
        return _unsupported(inst, ctx)
    for key in inst.mods:
        if key != "offset":
            raise ctx.fail(inst, f"modifier {key} is not supported by the emulator")
    offset = inst.mods.get("offset", 0)
    vaddr_op, saddr_op = (inst.operands[1] if load else inst.operands[0]), inst.operands[2]
    data_reg = vreg(inst.operands[0] if load else inst.operands[1], inst, ctx)
    vaddr = vreg(vaddr_op, inst, ctx)
    what = f"{inst.name} at byte {ctx.pos}"
    if saddr_op is OFF:
        def addresses(w: Wave, cols: Any) -> np.ndarray:
            lo, hi = w.v[vaddr, cols].astype(np.uint64), w.v[vaddr + 1, cols].astype(np.uint64)
            return (lo | hi << U64_32) + np.uint64(offset & M64)
    else:
        base = sread(saddr_op, 64)

        def addresses(w: Wave, cols: Any) -> np.ndarray:
            return w.v[vaddr, cols].astype(np.uint64) + np.uint64((base(w) + offset) & M64)
    memory = ctx.memory
    dwords = max(1, nbytes // 4)
    if load:
        counter = ctx.load_counter

        def do_load(w: Wave) -> None:
            act = _active(w)
            if act is not None and not len(act):
                w.queues[counter].append(lambda: None)
                return
            addrs = addresses(w, ALL_LANES if act is None else act)
            values = _bytes_to_regs(memory.read(addrs, nbytes, what), nbytes, signed)  # read now, land at the wait
            w.queues[counter].append(lambda: _write_loaded(w, data_reg, act, values, d16))
        return do_load

    def do_store(w: Wave) -> None:
        act = _active(w)
        cols = ALL_LANES if act is None else act
        if not len(cols):
            return
        memory.write(addresses(w, cols), _regs_to_bytes(w.v[data_reg:data_reg + dwords, cols], nbytes, d16 == "hi"),
                     what)
    return do_store


def _ds(inst: Inst, ctx: Context) -> Op:
    try:
        load, nbytes, signed, d16 = _mem_shape(inst.name)
    except KeyError:
        return _unsupported(inst, ctx)
    two = "_2addr" in inst.name
    stride = (64 if "stride64" in inst.name else 1) * nbytes
    offsets = ([inst.mods.get("offset0", 0) * stride, inst.mods.get("offset1", 0) * stride] if two
               else [inst.mods.get("offset", 0)])
    if load:
        dst, addr = vreg(inst.operands[0], inst, ctx), vreg(inst.operands[1], inst, ctx)
        datas = [dst + i * max(1, nbytes // 4) for i in range(len(offsets))]
    else:
        addr = vreg(inst.operands[0], inst, ctx)
        datas = [vreg(op, inst, ctx) for op in inst.operands[1:]]
    dwords = max(1, nbytes // 4)
    span = np.arange(nbytes)
    word_span = np.arange(dwords)
    what = f"{inst.name} at byte {ctx.pos}"
    counter = ctx.ds_counter
    # fast paths: whole aligned dwords through a uint32 view of LDS, aligned 16-bit through a uint16 view
    unit = 4 if nbytes % 4 == 0 else 2 if nbytes == 2 else 1
    if any(off % unit for off in offsets):
        unit = 1

    def op(w: Wave) -> None:
        act = _active(w)
        cols = ALL_LANES if act is None else act
        base = (w.v[addr] if act is None else w.v[addr, cols]).astype(np.int64)
        lds = w.group.lds
        if len(base):
            lo, hi = int(base.min()) + min(offsets), int(base.max()) + max(offsets)
            lds_check(w.group.lds_bytes, lo, hi, nbytes, what)
        step = unit if unit == 1 or not (base & (unit - 1)).any() else 1
        if load:
            stores: list[Any] = []
        elif step == 4:
            stores = [w.v[d:d + dwords, cols].T.copy() for d in datas]
        elif step == 2:
            stores = [(w.v[d, cols] >> np.uint32(16) if d16 == "hi" else w.v[d, cols]).astype(np.uint16)
                      for d in datas]
        else:
            stores = [_regs_to_bytes(w.v[d:d + dwords, cols], nbytes, d16 == "hi") for d in datas]

        def complete() -> None:   # LDS operations of a wave happen in order, when the wave waits for them
            for i, (off, reg) in enumerate(zip(offsets, datas, strict=True)):
                addrs = base + off
                if step == 4:
                    where = (addrs >> 2)[:, None] + word_span
                    if load:
                        _write_loaded(w, reg, act, lds.view(np.uint32)[where].T, d16)
                    else:
                        lds.view(np.uint32)[where] = stores[i]
                elif step == 2:
                    if load:
                        halves = lds.view("<i2" if signed else "<u2")[addrs >> 1]
                        _write_loaded(w, reg, act, halves.astype(np.int64).astype(np.uint32)[None], d16)
                    else:
                        lds.view(np.uint16)[addrs >> 1] = stores[i]
                else:
                    where = addrs[:, None] + span
                    if load:
                        _write_loaded(w, reg, act, _bytes_to_regs(lds[where], nbytes, signed), d16)
                    else:
                        lds[where] = stores[i]
        w.queues[counter].append(complete)
    return op


def _smem(inst: Inst, ctx: Context) -> Op:
    m = re.match(r"^s_load_b(32|64|96|128|256|512)$", inst.name)
    if not m:
        return _unsupported(inst, ctx)
    dwords = int(m.group(1)) // 32
    dst = scalar_code(inst.operands[0])
    base = sread(inst.operands[1], 64)
    third = inst.operands[2]
    imm = inst.mods.get("offset", 0) + (third if isinstance(third, int) else 0)
    soff = sread(third) if isinstance(third, Reg) else (lambda w: 0)
    memory, counter, what = ctx.memory, ctx.smem_counter, f"{inst.name} at byte {ctx.pos}"

    def op(w: Wave) -> None:
        addr = (base(w) + imm + soff(w)) & M64
        data = memory.read(np.array([addr], dtype=np.uint64), 4 * dwords, what).view("<u4")[0]
        values = [int(x) for x in data]

        def complete() -> None:
            w.s[dst:dst + dwords] = values
        w.queues[counter].append(complete)
    return op


# ------------------------------------------------------------------------------------------ dispatch

def _unsupported(inst: Inst, ctx: Context, what: str | None = None) -> Op:
    error = ctx.fail(inst, f"{what or 'this instruction'} is not supported by the emulator")

    def op(w: Wave) -> None:
        raise error
    op.unsupported = str(error)  # type: ignore[attr-defined]
    return op


SOPP_NAMES = NOPS | {"s_endpgm", "s_code_end", "s_barrier", "s_barrier_wait", "s_waitcnt", "s_wait_loadcnt",
                     "s_wait_dscnt", "s_wait_kmcnt", "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt"}
SPECIAL_VALU = {"v_readfirstlane_b32": _readfirstlane}


def compile_inst(inst: Inst, ctx: Context) -> Op:
    """The closure that executes ``inst`` (see the module docstring)."""
    name = inst.name
    if inst.dual is not None:
        return _vopd(inst, ctx)
    if name in VALU or name == "v_cndmask_b32":
        return _valu(inst, ctx)
    if name in SPECIAL_VALU:
        return SPECIAL_VALU[name](inst, ctx)
    if name.startswith("v_cmp"):
        return _vcmp(inst, ctx)
    if re.match(r"^v_(add|sub|subrev)_co(_ci)?_u32$", name):
        return _carry(inst, ctx)
    if name.startswith("v_wmma_"):
        return _wmma(inst, ctx)
    if name in SOP2:
        return _salu2(inst, ctx)
    if name.startswith("s_cmp_"):
        return _scmp(inst, ctx)
    if name.startswith(("s_movk", "s_cmovk", "s_addk", "s_mulk", "s_cmpk")):
        return _sopk(inst, ctx)
    if name.startswith(("s_branch", "s_cbranch_")) or name in SOPP_NAMES:
        return _sopp(inst, ctx)
    if name.startswith("global_"):
        return _global(inst, ctx)
    if name.startswith("ds_"):
        return _ds(inst, ctx)
    if name.startswith("s_load_"):
        return _smem(inst, ctx)
    if name.startswith("s_"):
        return _salu1(inst, ctx)
    return _unsupported(inst, ctx)

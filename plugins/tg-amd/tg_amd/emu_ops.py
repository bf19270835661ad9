"""What each instruction does: one decoded ``Inst`` in, one Python closure ``op(wave) -> next`` out.

In: an ``Inst`` from ``tg_amd.decoder`` (so from the encoded bytes), the arch, its byte position and the
map from byte positions to instruction indices. Out: a closure that executes the instruction on a
``Wave`` and returns ``None`` (fall through), an instruction index (branch taken), ``BLOCK`` (wait at a
barrier; call again later) or ``END``. Memory instructions live in ``tg_amd.emu_mem``, the scalar ALU
(integer and RDNA4 scalar float) in ``tg_amd.emu_salu``.

How: operands are resolved once (``tg_amd.emu_operands``) into small reader/writer closures (a
VGPR row, an SGPR slot, a precomputed constant); a vector instruction is then one numpy operation
over the 32 lanes. Semantics are tables keyed by mnemonic (``VALU``, ``CMP``, ...) written from the
RDNA3/RDNA4 ISA guides. Instructions not in the tables compile to an op that raises
``EmulatorError`` naming the instruction, arch and byte offset when reached.

Numerics: f32 add/mul are numpy's (IEEE, round to nearest even); FMA and f16 arithmetic are computed in
float64 and rounded once to the result type (FMA may differ from a fused op in the last bit in rare
double-rounding cases); WMMA sums the 16 exact f16 products in float64 and rounds once to f32.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from tg_amd import dpp
from tg_amd.emu_mem import buffer_op, ds_op, global_op, smem_op
from tg_amd.emu_operands import (
    BLOCK,
    END,
    M32,
    U64_32,
    Context,
    Op,
    as_f64,
    cvt_f_to_int,
    f16,
    f32,
    i32,
    sread,
    swriter,
    to_bits,
    u32,
    u64,
    unsupported,
    vread,
    vreg,
)
from tg_amd.emu_salu import salu1, salu_op
from tg_amd.emu_state import EXEC, FULL, VCC, EmulatorError, Wave, lanes, mask_of
from tg_amd.inst import Inst
from tg_amd.operands import Mod

__all__ = ["BLOCK", "END", "Context", "compile_inst"]


# ------------------------------------------------------------------------------------------ vector ALU

def _fma(a: Any, b: Any, c: Any) -> Any:
    return as_f64(a) * as_f64(b) + as_f64(c)


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
    "v_cvt_u32_f32": (u32, (f32,), lambda a: cvt_f_to_int(a, 0.0, 4294967295.0, np.uint32)),
    "v_cvt_i32_f32": (i32, (f32,), lambda a: cvt_f_to_int(a, -2147483648.0, 2147483647.0, np.int32)),
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
    "v_add_f16": (f16, (f16, f16), lambda a, b: as_f64(a) + as_f64(b)),
    "v_sub_f16": (f16, (f16, f16), lambda a, b: as_f64(a) - as_f64(b)),
    "v_mul_f16": (f16, (f16, f16), lambda a, b: as_f64(a) * as_f64(b)),
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


def _no_vop3_mods(inst: Inst, ctx: Context, allow_dpp: bool = False) -> None:
    for key in inst.mods:
        if not (allow_dpp and key in dpp.KEYS):
            raise ctx.fail(inst, f"modifier {key} is not supported by the emulator")


LANE = np.arange(32)


def dpp_lanes(mods: dict[str, Any]) -> tuple[Any, Any]:
    """(source lane of each lane, whether that source lies inside the row) for a DPP control (wave32:
    two rows of 16 lanes; DPP8 picks within groups of 8)."""
    row, pos = LANE & ~15, LANE & 15
    if "dpp8" in mods:
        return (LANE & ~7) | np.array(mods["dpp8"])[LANE & 7], np.ones(32, dtype=bool)
    if "quad_perm" in mods:
        return (LANE & ~3) | np.array(mods["quad_perm"])[LANE & 3], np.ones(32, dtype=bool)
    if "row_shl" in mods:
        src = pos + mods["row_shl"]
        return row + (src & 15), src < 16
    if "row_shr" in mods:
        src = pos - mods["row_shr"]
        return row + (src & 15), src >= 0
    if "row_ror" in mods:
        return row + ((pos - mods["row_ror"]) & 15), np.ones(32, dtype=bool)
    if "row_mirror" in mods:
        return row + 15 - pos, np.ones(32, dtype=bool)
    if "row_half_mirror" in mods:
        return (LANE & ~7) + 7 - (LANE & 7), np.ones(32, dtype=bool)
    if "row_share" in mods:
        return row + mods["row_share"], np.ones(32, dtype=bool)
    if "row_xmask" in mods:
        return row + (pos ^ mods["row_xmask"]), np.ones(32, dtype=bool)
    raise EmulatorError(f"DPP control {sorted(mods)} is not supported by the emulator")


def _dpp_move(inst: Inst, read: Callable[[Wave], Any]) -> Callable[[Wave], tuple[Any, Any]]:
    """src0 after DPP lane movement, and the lanes the instruction writes. A source lane outside its row
    or inactive (without fi) reads 0 with bound_ctrl:1 and disables its lane otherwise (DPP8: reads 0);
    row_mask/bank_mask disable whole rows / banks of 4 lanes."""
    mods = inst.mods
    src, inside = dpp_lanes(mods)
    dpp8 = "dpp8" in mods
    bound_zero = bool(mods.get("bound_ctrl")) or dpp8
    fetch_inactive = bool(mods.get("fi"))
    row_mask, bank_mask = mods.get("row_mask", 15), mods.get("bank_mask", 15)
    enabled = np.ones(32, dtype=bool) if dpp8 else \
        ((row_mask >> (LANE >> 4) & 1) & (bank_mask >> ((LANE >> 2) & 3) & 1)).astype(bool)

    def move(w: Wave) -> tuple[Any, Any]:
        value = np.broadcast_to(read(w), (32,))[src]
        valid = inside & (lanes(w.s[EXEC])[src] | fetch_inactive)
        if bound_zero:
            return np.where(valid, value, np.zeros_like(value)), enabled
        return value, enabled & valid
    return move


def _valu(inst: Inst, ctx: Context) -> Op:
    _no_vop3_mods(inst, ctx, allow_dpp=True)
    if dpp.has_dpp(inst.mods):
        return _valu_dpp(inst, ctx)
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


def _valu_dpp(inst: Inst, ctx: Context) -> Op:
    """A table VALU instruction whose src0 moves across lanes first (DPP16 / DPP8)."""
    if inst.name not in VALU or VALU[inst.name][0] == u64:
        return unsupported(inst, ctx, "DPP on this instruction")
    dkind, skinds, fn = VALU[inst.name]
    dst = vreg(inst.operands[0], inst, ctx)
    kinds = [dkind if k == "acc" else k for k in skinds]
    srcs = list(inst.operands[1:]) + ([inst.operands[0]] if skinds[-1:] == ("acc",) else [])
    readers = [vread(op, k) for op, k in zip(srcs, kinds, strict=True)]
    raw = _vread_raw(srcs[0], kinds[0])
    move = _dpp_move(inst, raw)
    mod0 = srcs[0] if isinstance(srcs[0], Mod) else None

    def op(w: Wave) -> None:
        moved, enabled = move(w)
        if mod0 is not None:
            moved = -np.abs(moved) if mod0.abs and mod0.neg else np.abs(moved) if mod0.abs else -moved
        result = to_bits(dkind, fn(moved, *[r(w) for r in readers[1:]]))
        w.vwrite(dst, np.where(enabled, result, w.v[dst]))
    return op


def _vread_raw(op: Any, kind: str) -> Callable[[Wave], Any]:
    """The register behind a DPP source, without its neg/abs (applied after the lane movement)."""
    return vread(op.value if isinstance(op, Mod) else op, kind)


def _vopd(inst: Inst, ctx: Context) -> Op:
    """A dual-issue pair: both halves read their sources before either writes."""
    halves = []
    for half in (inst, inst.dual):
        assert half is not None
        plain = Inst("v_" + half.name.removeprefix("v_dual_"), half.operands, half.mods)
        if plain.name not in VALU and plain.name != "v_cndmask_b32":
            return unsupported(inst, ctx, f"VOPD half {half.name}")
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
        return unsupported(inst, ctx)
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
        return unsupported(inst, ctx)
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


# ------------------------------------------------------------------------------------------ program flow

def _branch(inst: Inst, ctx: Context) -> Op:
    offset = inst.operands[0] & 0xFFFF
    target_pos = ctx.pos + 4 + 4 * (offset - (offset >> 15 << 16))  # signed dwords (printed 0..65535)
    if target_pos not in ctx.index_of:
        raise ctx.fail(inst, f"branch target byte {target_pos} is not the start of an instruction")
    target = ctx.index_of[target_pos]
    conds: dict[str, Callable[[Wave], bool]] = {
        "s_branch": lambda w: True, "s_cbranch_scc0": lambda w: w.scc == 0, "s_cbranch_scc1": lambda w: w.scc == 1,
        "s_cbranch_vccz": lambda w: w.s[VCC] == 0, "s_cbranch_vccnz": lambda w: w.s[VCC] != 0,
        "s_cbranch_execz": lambda w: w.s[EXEC] == 0, "s_cbranch_execnz": lambda w: w.s[EXEC] != 0,
    }
    if inst.name not in conds:
        return unsupported(inst, ctx)
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
        if isinstance(value, dict):  # the decoder gives the counters a wait names
            vm, lgkm = value.get("vmcnt", 0x3F), value.get("lgkmcnt", 0x3F)
        else:
            vm, lgkm = value >> 10 & 0x3F, value >> 4 & 0x3F

        counts = ctx.counts

        def waitcnt(w: Wave) -> None:
            completed = w.wait("vm", vm) + w.wait("lgkm", lgkm)
            if counts is not None:
                counts.wait(completed)
        return waitcnt
    counters = {"s_wait_loadcnt": ("load",), "s_wait_dscnt": ("ds",), "s_wait_kmcnt": ("km",),
                "s_wait_loadcnt_dscnt": ("load", "ds"), "s_wait_storecnt_dscnt": ("ds",)}
    if name in counters:
        value = inst.operands[0]
        if len(counters[name]) == 2:   # [13:8] loadcnt, [5:0] dscnt
            load, ds = value >> 8 & 0x3F, value & 0x3F

            def wait2(w: Wave) -> None:
                completed = w.wait("load", load) + w.wait("ds", ds)
                if ctx.counts is not None:
                    ctx.counts.wait(completed)
            return wait2
        (counter,) = counters[name]
        if name == "s_wait_storecnt_dscnt":
            value &= 0x3F

        def wait1(w: Wave) -> None:
            completed = w.wait(counter, value)
            if ctx.counts is not None:
                ctx.counts.wait(completed)
        return wait1
    return unsupported(inst, ctx)


# ------------------------------------------------------------------------------------------ dispatch

SOPP_NAMES = NOPS | {"s_endpgm", "s_code_end", "s_barrier", "s_barrier_wait", "s_waitcnt", "s_wait_loadcnt",
                     "s_wait_dscnt", "s_wait_kmcnt", "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt"}
def _readlane(inst: Inst, ctx: Context) -> Op:
    """v_readlane_b32 sdst, vsrc, lane: one lane's value (lane number modulo 32), whatever EXEC says."""
    write, src, lane = swriter(inst.operands[0]), vread(inst.operands[1], u32), sread(inst.operands[2])

    def op(w: Wave) -> None:
        write(w, int(np.broadcast_to(src(w), (32,))[lane(w) & 31]))
    return op


SPECIAL_VALU = {"v_readfirstlane_b32": _readfirstlane, "v_readlane_b32": _readlane}


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
    scalar = salu_op(inst, ctx)
    if scalar is not None:
        return scalar
    if name.startswith(("s_branch", "s_cbranch_")) or name in SOPP_NAMES:
        return _sopp(inst, ctx)
    if name.startswith("global_"):
        return global_op(inst, ctx)
    if name.startswith("buffer_"):
        return buffer_op(inst, ctx)
    if name.startswith("ds_"):
        return ds_op(inst, ctx)
    if name.startswith("s_load_"):
        return smem_op(inst, ctx)
    if name.startswith("s_"):
        return salu1(inst, ctx)
    return unsupported(inst, ctx)

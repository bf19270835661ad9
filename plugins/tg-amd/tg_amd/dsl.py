"""The Python front end: instruction builders named like the mnemonics.

``from tg_amd.dsl import s, v, ttmp, s_mov_b32, v_wmma_f32_16x16x16_f16`` then
``s_mov_b32(s[10], ttmp[9])`` returns an ``Inst``; keywords become modifiers
(``ds_load_b128(v[4:7], v[1], offset=512)``, ``v_add_f32(v[1], -v[2], abs(v[3]), clamp=True)``);
``e32=True``/``e64=True`` force an encoding; ``dual(x, y)`` pairs two ``v_dual_*`` halves; DPP and
other modifiers are keywords too (``v_add_f32(v[0], v[1], v[2], quad_perm=(1, 0, 3, 2))``,
``global_load_b32(v[1], v[2:3], OFF, th="TH_LOAD_NT")``); ``hwreg(...)``, ``sendmsg(...)`` and
``delay_alu(...)`` build the symbolic immediates.
A list of these and ``Label``s goes to ``tg_amd.assemble(program, arch)``. Builders exist for every
mnemonic of any supported arch; whether it exists on *your* arch is checked when encoding.
"""
from __future__ import annotations

from typing import Any

from tg_amd.inst import Inst
from tg_amd.operands import OFF, Label, Reg, a, exec_, exec_hi, exec_lo, m0, null, s, scc, ttmp, v, vcc, vcc_hi, vcc_lo
from tg_amd.symbols import Sym

__all__ = ["Inst", "Label", "OFF", "Reg", "a", "exec_", "exec_hi", "exec_lo", "m0", "null", "s", "scc", "ttmp", "v",
           "vcc", "vcc_hi", "vcc_lo", "dual", "builder", "hwreg", "sendmsg", "delay_alu", "Sym"]


def builder(name: str) -> Any:
    def build(*operands: Any, e32: bool = False, e64: bool = False, **mods: Any) -> Inst:
        return Inst(name, operands, dict(mods), "e32" if e32 else "e64" if e64 else None)
    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"Build a {name} instruction."
    return build


def hwreg(register: str | int, offset: int | None = None, size: int | None = None) -> Sym:
    """``hwreg(HW_REG_MODE)`` or ``hwreg(HW_REG_MODE, 0, 8)`` (name or number)."""
    return Sym("hwreg", (register,) if offset is None else (register, offset, size))


def sendmsg(message: str | int, operation: str | int | None = None, stream: int | None = None) -> Sym:
    """``sendmsg(MSG_DEALLOC_VGPRS)``, ``sendmsg(MSG_GS, GS_OP_EMIT, 1)``."""
    return Sym("sendmsg", tuple(a for a in (message, operation, stream) if a is not None))


def delay_alu(instid0: str = "NO_DEP", instskip: str | None = None, instid1: str | None = None) -> Sym:
    """``s_delay_alu``'s operand: ``delay_alu("VALU_DEP_1", "NEXT", "SALU_CYCLE_1")``."""
    fields = [("instid0", instid0), ("instskip", instskip), ("instid1", instid1)]
    return Sym("delay", tuple((k, v) for k, v in fields if v is not None))


def dual(x: Inst, y: Inst) -> Inst:
    """The VOPD pair ``x :: y``."""
    return Inst(x.name, x.operands, dict(x.mods), None, y)


def __getattr__(name: str) -> Any:
    from tg_amd.isa import all_names
    if name in all_names() or name.startswith("v_dual_"):
        return builder(name)
    raise AttributeError(f"module 'tg_amd.dsl' has no attribute {name!r} (not a known mnemonic)")

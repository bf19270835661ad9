"""The Python front end: instruction builders named like the mnemonics.

``from tg_amd.dsl import s, v, ttmp, s_mov_b32, v_wmma_f32_16x16x16_f16`` then
``s_mov_b32(s[10], ttmp[9])`` returns an ``Inst``; keywords become modifiers
(``ds_load_b128(v[4:7], v[1], offset=512)``, ``v_add_f32(v[1], -v[2], abs(v[3]), clamp=True)``);
``e32=True``/``e64=True`` force an encoding; ``dual(x, y)`` pairs two ``v_dual_*`` halves.
A list of these and ``Label``s goes to ``tg_amd.assemble(program, arch)``. Builders exist for every
mnemonic of any supported arch; whether it exists on *your* arch is checked when encoding.
"""
from __future__ import annotations

from typing import Any

from tg_amd.inst import Inst
from tg_amd.operands import OFF, Label, Reg, a, exec_, exec_hi, exec_lo, m0, null, s, scc, ttmp, v, vcc, vcc_hi, vcc_lo

__all__ = ["Inst", "Label", "OFF", "Reg", "a", "exec_", "exec_hi", "exec_lo", "m0", "null", "s", "scc", "ttmp", "v",
           "vcc", "vcc_hi", "vcc_lo", "dual", "builder"]


def builder(name: str) -> Any:
    def build(*operands: Any, e32: bool = False, e64: bool = False, **mods: Any) -> Inst:
        return Inst(name, operands, dict(mods), "e32" if e32 else "e64" if e64 else None)
    build.__name__ = build.__qualname__ = name
    build.__doc__ = f"Build a {name} instruction."
    return build


def dual(x: Inst, y: Inst) -> Inst:
    """The VOPD pair ``x :: y``."""
    return Inst(x.name, x.operands, dict(x.mods), None, y)


def __getattr__(name: str) -> Any:
    from tg_amd.isa import all_names
    if name in all_names() or name.startswith("v_dual_"):
        return builder(name)
    raise AttributeError(f"module 'tg_amd.dsl' has no attribute {name!r} (not a known mnemonic)")

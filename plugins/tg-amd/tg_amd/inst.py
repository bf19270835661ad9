"""``Inst``: one instruction as the front ends build it and the encoder consumes it.

Operands are in LLVM assembly order (``tg_amd.operands`` objects or Python ints/floats);
``mods`` holds the trailing modifiers (``offset=16``, ``clamp=True``, ``op_sel=(1, 0)``, ...);
``enc`` forces the 32-bit (``"e32"``) or 64-bit (``"e64"``) encoding of a VOP1/VOP2/VOPC
instruction; ``dual`` is the Y half of a VOPD pair (``v_dual_X ... :: v_dual_Y ...``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Inst:
    name: str
    operands: tuple[Any, ...] = ()
    mods: dict[str, Any] = field(default_factory=dict)
    enc: str | None = None
    dual: Inst | None = None

    def __str__(self) -> str:
        from tg_amd.syntax import format_inst
        return format_inst(self)

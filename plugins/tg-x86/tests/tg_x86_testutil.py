"""Helpers for the tg-x86 tests: capstone as the reference decoder, listing normalisation."""
from __future__ import annotations

import os
import re
from typing import Any

import pytest
from tg_x86.forms import Form


def require_capstone() -> Any:
    """The capstone module; skip the test without it, except in CI (CI=true), where that is a failure."""
    try:
        import capstone
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("capstone is not installed but CI=true: install tg-x86[test]")
        pytest.skip("capstone is not installed (pip install capstone)")
    return capstone


def decoder() -> Any:
    capstone = require_capstone()
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.syntax = capstone.CS_OPT_SYNTAX_INTEL
    return md


def decode_one(md: Any, code: bytes) -> tuple[str, int, int]:
    """(text, size, number of instructions) of what capstone decodes from ``code``."""
    insts = list(md.disasm(code, 0))
    if not insts:
        return "<undecodable>", 0, 0
    first = insts[0]
    return f"{first.mnemonic} {first.op_str}".strip(), first.size, len(insts)


_NUMBER = re.compile(r"-?(0x[0-9a-f]+|\d+)")


def _split(text: str) -> tuple[str, list[str]]:
    mnemonic, _, rest = text.partition(" ")
    return mnemonic, [o.strip() for o in rest.split(",")] if rest else []


def _number(text: str) -> int | None:
    return int(text, 0) if _NUMBER.fullmatch(text) else None


def same_listing(ours: str, theirs: str, form: Form, code_len: int = 0) -> bool:
    """Do two Intel-syntax lines say the same thing? Immediates compare by their encoded bits
    (capstone prints ``-1`` or ``0xff`` for the same byte); jump targets modulo 2**64."""
    m1, ops1 = _split(ours)
    m2, ops2 = _split(theirs)
    if m1 != m2 or len(ops1) != len(ops2):
        return False
    types = [t for t in form.operands if not (t.imm and m1.startswith("vcmp") and len(ops1) < len(form.operands))]
    for i, (a, b) in enumerate(zip(ops1, ops2, strict=True)):
        if a == b:
            continue
        na, nb = _number(a), _number(b)
        if na is None or nb is None or i >= len(types):
            return False
        bits = types[i].imm_bits or 64
        if types[i].rel:
            na += code_len  # ours is the displacement, capstone prints the target address
        if (na - nb) % (1 << bits):
            return False
    return True

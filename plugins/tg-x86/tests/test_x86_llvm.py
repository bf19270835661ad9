"""The encoding forms capstone 5 cannot decode (``LLVM_ONLY``: VEX-encoded AVX-VNNI), fuzzed against llvm-mc-19's
disassembler: random operands as in ``test_x86_fuzz`` (every xmm/ymm register, memory operands with every base,
index, scale and the disp8/disp32 boundaries), encoded by us, decoded by llvm-mc; each line must decode to the one
instruction we meant (same mnemonic, registers, and memory operand as base/index/scale/displacement).

Without llvm-mc-19 the tests skip, except under CI=true, where they fail (CI installs Debian's llvm-19).
"""
from __future__ import annotations

import os
import random
import re
import shutil
import subprocess

import pytest
from test_x86_fuzz import random_operand
from tg_x86.encoder import encode
from tg_x86.forms import FORMS
from tg_x86.isa import Inst
from tg_x86.listing import format_inst
from tg_x86_testutil import LLVM_ONLY

# random instances: 3000 by default (one llvm-mc run, ~1 s), 30000 in nox -s full
CASES = int(os.environ.get("TG_LLVM_FUZZ_EXAMPLES", "30000" if os.environ.get("TG_FULL") else "3000"))


@pytest.fixture(scope="module")
def llvm_mc() -> str:
    path = shutil.which("llvm-mc-19") or shutil.which("llvm-mc")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("llvm-mc-19 not found; CI must install Debian's llvm-19")
        pytest.skip("llvm-mc-19 not installed (apt-get install llvm-19)")
    return path


def disassemble(llvm_mc: str, codes: list[bytes]) -> list[str]:
    """One llvm-mc run: each code on its own line (a line llvm-mc cannot decode as one instruction gives an error
    or a different number of lines, which the caller sees)."""
    text = "\n".join(",".join(f"0x{b:02x}" for b in code) for code in codes) + "\n"
    out = subprocess.run([llvm_mc, "--disassemble", "-triple=x86_64", "-output-asm-variant=1"], input=text,
                         capture_output=True, text=True, check=False)
    assert not out.stderr.strip(), out.stderr[:2000]
    return [line.strip() for line in out.stdout.splitlines() if line.strip() and not line.strip().startswith(".")]


_TERM = re.compile(r"\s*([+-])?\s*([^+-]+)")


def _number(text: str) -> int:
    return int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text)


def _memory(text: str) -> tuple:
    """``ymmword ptr [base + index*scale + disp]`` (either order of index and scale, riz = no index) -> its parts
    (the address they make, and the size)."""
    size, _, inner = text.partition("[")
    base = index = None
    scale, disp = 1, 0
    for sign, term in _TERM.findall(inner.rstrip("]").strip()):
        term = term.strip()
        if "*" in term:
            a, b = term.split("*")
            reg, k = (b, a) if a.isdigit() else (a, b)
            if reg != "riz":
                index, scale = reg, int(k)
        elif term[0].isdigit():
            disp += -_number(term) if sign == "-" else _number(term)
        elif term != "riz":
            base = term
    if base is None and scale == 1:   # [index*1 + disp] (an index with no base) is [base + disp]
        base, index = index, None
    return size.split()[0] if size.strip() else None, base, index, scale if index else 1, disp % (1 << 64)


def normalized(line: str) -> tuple:
    """An Intel-syntax line as (mnemonic, operands), each memory operand by its parts."""
    line = re.sub(r"\s+", " ", line.strip())
    head, *rest = re.split(r"(?<=vpdpbusd) ", line, maxsplit=1)
    ops = [o.strip() for o in rest[0].split(",")] if rest else []
    return head, tuple(_memory(o) if "[" in o else o for o in ops)


def test_llvm_only_forms_against_llvm_mc(llvm_mc: str) -> None:
    rng = random.Random(20261206)
    forms = [f for op in LLVM_ONLY for f in FORMS[op]]
    insts, codes = [], []
    for i in range(CASES):
        form = forms[i % len(forms)]
        inst = Inst(form.op, *(random_operand(rng, t) for t in form.operands))
        insts.append(inst)
        codes.append(encode(inst, form))
    theirs = disassemble(llvm_mc, codes)
    assert len(theirs) == len(codes), f"llvm-mc decoded {len(theirs)} lines from {len(codes)} encodings"
    bad = [f"{format_inst(i)} ({c.hex()}) -> {t}" for i, c, t in zip(insts, codes, theirs, strict=True)
           if normalized(format_inst(i)) != normalized(t)]
    assert not bad, f"{len(bad)} of {len(codes)} differ:\n" + "\n".join(bad[:20])


def test_normalized_memory_operands_compare_parts() -> None:
    """The comparison itself: llvm-mc's and our spelling of one operand agree, a different one does not."""
    ours = normalized("{vex} vpdpbusd ymm1, ymm2, ymmword ptr [rbp + rbx*4 + 0x10]")
    assert ours == normalized("{vex}\tvpdpbusd\tymm1, ymm2, ymmword ptr [rbp + 4*rbx + 16]")
    assert ours != normalized("{vex}\tvpdpbusd\tymm1, ymm2, ymmword ptr [rbp + 4*rbx + 17]")
    assert ours != normalized("{vex}\tvpdpbusd\tymm1, ymm3, ymmword ptr [rbp + 4*rbx + 16]")

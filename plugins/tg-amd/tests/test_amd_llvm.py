"""Differential check against llvm-mc-19: every opcode of every table, random operands.

For each arch, several random instances of every table entry (registers, inline constants vs
literals, neg/abs, clamp, op_sel, offsets, ``off``, VOPD pairs) are assembled by us and by
llvm-mc (one llvm-mc run per batch). Where llvm-mc accepts a line our bytes must equal its
bytes; where it rejects one (the generator sometimes breaks a rule such as the constant bus
limit) we must reject it too. Then our disassembly of our bytes must reassemble -- by llvm-mc
and by us -- to the same bytes. Without llvm-mc the tests skip, except under CI=true, where
they fail (CI installs Debian's llvm-19).
"""
from __future__ import annotations

import os
import re

import pytest
import tg_amd
from tg_amd.isa import mnemonics
from tg_amd_cases import cases, llvm_encode, llvm_mc, llvm_object_text

ARCHS = ("gfx1100", "gfx1200", "gfx942")
# random instances of every mnemonic per seed: 3 by default (about 6,000 lines per arch), 12 in nox -s full
PER_OP = int(os.environ.get("TG_AMD_CASES_PER_OP", "12" if os.environ.get("TG_FULL") else "3"))


@pytest.fixture(scope="module")
def have_llvm() -> None:
    if llvm_mc() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("llvm-mc-19 not found; CI must install Debian's llvm-19")
        pytest.skip("llvm-mc-19 not installed (apt-get install llvm-19)")


def _ours(line: str, arch: str) -> bytes | str:
    try:
        return tg_amd.assemble(line, arch)
    except tg_amd.AsmError as e:
        return f"ours: {e}"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("seed", [1, 2])
def test_every_opcode_matches_llvm_mc(have_llvm: None, arch: str, seed: int) -> None:
    lines = cases(arch, seed, PER_OP)
    ref = llvm_encode(lines, arch)
    accepted = [line for line, want in zip(lines, ref, strict=True) if isinstance(want, bytes)]
    assert len(accepted) > 0.9 * len(lines), "the case generator mostly produces valid instructions"
    covered = {re.sub(r"_(e32|e64|dpp|e64_dpp|sdwa)$", "", half.split()[0]) for line in accepted
               for half in line.split("::")}
    missing = {i.name for i in mnemonics(arch)} - covered
    assert not missing, f"table entries never accepted by llvm-mc: {sorted(missing)[:20]}"
    wrong = []
    for line, want in zip(lines, ref, strict=True):
        got = _ours(line, arch)
        if isinstance(want, str) and isinstance(got, str):
            continue
        if got != want:
            show = lambda b: b.hex(" ") if isinstance(b, bytes) else b  # noqa: E731
            wrong.append(f"{line}\n    ours:    {show(got)}\n    llvm-mc: {show(want)}")
    assert not wrong, f"{len(wrong)} mismatches:\n" + "\n".join(wrong[:25])


@pytest.mark.parametrize("arch", ARCHS)
def test_disassembly_reassembles_with_llvm_mc(have_llvm: None, arch: str) -> None:
    lines = cases(arch, 3, PER_OP)
    ref = llvm_encode(lines, arch)
    # llvm-mc leaves the label of s_cbranch_cdbg* to a relocation: those are checked by their bytes above only
    codes = [tg_amd.assemble(line, arch) for line, want in zip(lines, ref, strict=True)
             if isinstance(want, bytes) and not line.startswith("s_cbranch_cdbg")]
    listings = [tg_amd.disassemble(code, arch).strip() for code in codes]
    plain = [text if ":\n" not in text else "s_nop 0" for text in listings]
    again = llvm_encode(plain, arch)
    again = [r if ":\n" not in text else llvm_object_text(text, arch)  # a branch to itself gets a label
             for text, r in zip(listings, again, strict=True)]
    wrong = [f"{text}: llvm-mc {r if isinstance(r, str) else r.hex(' ')}, ours {c.hex(' ')}"
             for text, r, c in zip(listings, again, codes, strict=True) if r != c]
    assert not wrong, "\n".join(wrong[:25])


def test_program_with_labels_matches_llvm_mc(have_llvm: None) -> None:
    text = """
    s_mov_b32 s0, 0
    loop:
      s_add_co_u32 s0, s0, 1
      v_add_f32 v1, 0x40490fdb, v1
      s_cmp_lt_u32 s0, 10
      s_cbranch_scc1 loop
      s_branch done
      s_nop 0
    done:
      s_endpgm
    """
    ours = tg_amd.assemble(text, "gfx1200")
    assert ours == llvm_object_text(text, "gfx1200")



@pytest.mark.parametrize("arch", ARCHS)
def test_disassembly_text_matches_llvm_mc(have_llvm: None, arch: str) -> None:
    """Our disassembly of llvm-mc's bytes reads as llvm-mc's own disassembly of them (commas and spaces aside)."""
    from llvm_opcodes import disassemble
    # llvm-mc 19 cannot read back its gfx12 s_cmp_*_f16 encodings (it loses its place in the stream)
    lines = [line for line in cases(arch, 4, 1) if not (line.startswith("s_cmp_") and "_f16 " in line)]
    codes = [c for c in llvm_encode(lines, arch) if isinstance(c, bytes)]
    words = [tuple(int.from_bytes(c[i:i + 4], "little") for i in range(0, len(c), 4)) for c in codes]
    theirs = disassemble(words, arch)
    norm = lambda t: " ".join(t.replace(",", " ").split())  # noqa: E731
    compared, wrong = 0, []
    for code, text in zip(codes, theirs, strict=True):
        ours = tg_amd.disassemble(code, arch).strip()
        if not isinstance(text, str) or "\n" in ours or "invalid" in text.lower():
            continue  # a branch to itself gets a label; fields llvm-mc calls invalid
        compared += 1
        if norm(ours) != norm(text) and not (text.endswith("_e32" + text.split("_e32", 1)[-1]) and
                                             norm(ours) == norm(text.replace("_e32", "", 1))):
            wrong.append(f"ours {ours!r}, llvm-mc {text!r}")
    assert compared > 0.9 * len(codes)
    assert not wrong, f"{len(wrong)} of {compared} differ:\n" + "\n".join(wrong[:25])


@pytest.mark.parametrize("arch", ("gfx1100", "gfx1200"))
def test_every_image_form_disassembles_as_llvm_mc(have_llvm: None, arch: str) -> None:
    """Every image opcode x dim x dmask x a16 x tfe x d16 (2,048 words an opcode under TG_FULL, one in 16 of them
    by default): our text of the bytes is llvm-mc's, including the forms its disassembler falls back on."""
    import itertools
    import random

    from llvm_opcodes import disassemble
    from tg_amd.layouts import LAYOUTS
    gen = tg_amd.get_arch(arch).gen
    forms = list(itertools.product(range(8), range(16), (0, 1), (0, 1), (0, 1)))
    if not os.environ.get("TG_FULL"):
        forms = random.Random(arch).sample(forms, len(forms) // 16)
    words, names = [], []
    for info in mnemonics(arch):
        if info.fmt not in ("MIMG", "VIMAGE", "VSAMPLE") or "bvh" in info.name:
            continue
        layout = LAYOUTS[gen][info.fmt]
        for dim, dmask, a16, tfe, d16 in forms:
            f = {"op": info.op, "dim": dim, "dmask": dmask, "a16": a16, "tfe": tfe, "d16": d16, "vdata": 8}
            f.update({"srsrc": 1, "vaddr": 1} if gen == 11 else
                     {"srsrc": 4, "vaddr0": 1, "vaddr1": 2, "vaddr2": 3, "vaddr3": 4})
            word = layout.pack(f)
            words.append(tuple(word >> (32 * k) & 0xFFFFFFFF for k in range(layout.bits // 32)))
            names.append(info.name)
    assert len(set(names)) > 80
    theirs = disassemble(words, arch)
    norm = lambda t: " ".join(t.replace(",", " ").split())  # noqa: E731
    wrong = []
    for word, text in zip(words, theirs, strict=True):
        if not isinstance(text, str):
            continue
        ours = tg_amd.disassemble(b"".join(w.to_bytes(4, "little") for w in word), arch).strip()
        if norm(ours) != norm(text):
            wrong.append(f"ours {ours!r}, llvm-mc {text!r}")
    assert not wrong, f"{len(wrong)} of {len(words)} differ:\n" + "\n".join(wrong[:20])


"""Every mnemonic LLVM knows for gfx1100, gfx1200, gfx1201 and gfx942 is known to tg-amd.

The listing (``tg_amd/tables/llvm19_<arch>.txt``, one row per opcode, written by
``tests/llvm_opcodes.py`` from llvm-mc-19's disassembler) is the reference. Every listed mnemonic
must be encodable (``isa.lookup`` finds it; VOPD halves by ``isa.vopd_info``): none may be refused,
whatever the reason. With llvm-mc at hand the stored
listing is checked against llvm-mc itself: every stored word still disassembles to the stored text
(and under ``TG_FULL=1`` the whole opcode space is enumerated again and must give the same listing).
"""
from __future__ import annotations

import os

import pytest
import tg_amd
from llvm_opcodes import disassemble, enumerate_opcodes, table_path
from tg_amd.isa import UNSUPPORTED, lookup
from tg_amd_cases import llvm_mc

ARCHS = ("gfx1100", "gfx1200", "gfx1201", "gfx942")


def _rows(arch: str) -> list[tuple[str, int, str, str]]:
    rows = []
    for line in table_path(arch).read_text().splitlines():
        if line and not line.startswith("#"):
            family, op, word, text = line.split("\t")
            rows.append((family, int(op, 0), word, text))
    return rows


def _mnemonic(family: str, text: str) -> str:
    if family == "VOPD_X":
        text = text.split("::")[0]
    elif family == "VOPD_Y":
        text = text.split("::")[1]
    return text.split()[0].removesuffix("_e32").removesuffix("_e64")


@pytest.fixture(scope="module")
def have_llvm() -> None:
    if llvm_mc() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("llvm-mc-19 not found; CI must install Debian's llvm-19")
        pytest.skip("llvm-mc-19 not installed (apt-get install llvm-19)")


@pytest.mark.parametrize("arch", ARCHS)
def test_every_llvm_mnemonic_is_known(arch: str) -> None:
    rows = _rows(arch)
    assert len(rows) > 1000
    unknown = []
    for family, _, _, text in rows:
        name = _mnemonic(family, text)
        if family.startswith("VOPD"):
            if tg_amd.isa.vopd_info(tg_amd.get_arch(arch), name, family[-1]) is None:
                unknown.append(f"{family} {name}")
            continue
        try:
            lookup(arch, name)
        except tg_amd.AsmError as e:
            unknown.append(f"{family} {name}: {e}")
    assert not unknown, f"{len(unknown)} listed mnemonics not encodable by tg-amd: {unknown[:20]}"
    assert not UNSUPPORTED.get(tg_amd.get_arch(arch).gen), "no listed mnemonic may be refused"


@pytest.mark.parametrize("arch", ARCHS)
def test_listing_matches_llvm_mc(have_llvm: None, arch: str) -> None:
    rows = _rows(arch)
    words = [tuple(int.from_bytes(bytes.fromhex(w[i:i + 8]), "little") for i in range(0, len(w), 8))
             for _, _, w, _ in rows]
    texts = disassemble(words, arch)
    wrong = [f"{f} {op:#x} {w}: stored {t!r}, llvm-mc {got!r}" for (f, op, w, t), got in zip(rows, texts, strict=True)
             if not isinstance(got, str) or " ".join(got.split()) != t]
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.skipif(not os.environ.get("TG_FULL"), reason="enumerates every opcode of every family (nox -s full)")
@pytest.mark.parametrize("arch", ARCHS)
def test_listing_is_complete(have_llvm: None, arch: str) -> None:
    stored = [(f, op, t) for f, op, _, t in _rows(arch)]
    fresh = [(f, op, t) for f, op, t, _ in enumerate_opcodes(arch)]
    assert fresh == stored


@pytest.mark.parametrize("arch", ARCHS)
def test_aliases_match_llvm_mc(have_llvm: None, arch: str) -> None:
    """The older names llvm-mc accepts (buffer_load_dword on gfx1100, s_add_u32 on gfx1200) give its bytes."""
    from llvm_aliases import _texts, aliases
    from tg_amd_cases import llvm_encode
    texts = {name: text for other in ARCHS for name, text in _texts(other).items()}
    rows = aliases(arch)
    assert (len(rows) > 200) == (arch != "gfx942")
    lines = [texts[alias] for alias, _ in rows]
    unsupported = UNSUPPORTED.get(tg_amd.get_arch(arch).gen, {})
    wrong = []
    for (_, name), line, want in zip(rows, lines, llvm_encode(lines, arch), strict=True):
        try:
            got: bytes | str = tg_amd.assemble(line, arch)
        except tg_amd.AsmError as e:
            got = str(e)
            if name in unsupported:  # refused for a listed reason
                continue
        if isinstance(want, bytes) and got != want:
            wrong.append(f"{line}: ours {got if isinstance(got, str) else got.hex(' ')}, llvm-mc {want.hex(' ')}")
    assert not wrong, f"{len(wrong)} of {len(lines)}:\n" + "\n".join(wrong[:20])


def test_derived_listings_are_current(have_llvm: None) -> None:
    """The symbol names, DPP/SDWA forms and aliases committed under tg_amd/tables are what the scripts in
    tests/ get from this llvm-mc now (they are quick: a few llvm-mc runs)."""
    from llvm_aliases import aliases
    from llvm_dpp import dpp_forms
    from llvm_opcodes import TABLES
    from llvm_symbols import symbols
    stored = {name: set((TABLES / name).read_text().splitlines()[2:]) for name in
              ("llvm19_symbols.txt", "llvm19_dpp.txt", "llvm19_aliases.txt")}
    fresh = {
        "llvm19_symbols.txt": {f"{a}\t{k}\t{n}\t{v:#x}" for a in ARCHS for k, n, v in symbols(a)},
        "llvm19_dpp.txt": {f"{a}\t{f}\t{k}\t{n}" for a in ARCHS for f, k, n in dpp_forms(a)},
        "llvm19_aliases.txt": {f"{a}\t{x}\t{n}" for a in ARCHS for x, n in aliases(a)},
    }
    for name in stored:
        assert fresh[name] == stored[name], f"{name}: rerun tests/{name.replace('llvm19_', 'llvm_')[:-4]}.py"

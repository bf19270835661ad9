"""Encodings without LLVM: the issue's reference table (bytes from llvm-mc-19) and the frozen golden
files (tests/data/golden_<arch>.txt, made by make_golden.py from llvm-mc-19). Each is assembled
from text, and its bytes are disassembled and assembled again."""
from __future__ import annotations

import pathlib

import pytest
import tg_amd

REFERENCE = [
    ("gfx1200", "v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]", "00 40 40 cc 08 19 02 1c"),
    ("gfx1200", "v_dual_mov_b32 v0, 0 :: v_dual_mov_b32 v1, 0", "80 00 10 ca 80 00 00 00"),
    ("gfx1200", "ds_load_b128 v[4:7], v1 offset:512", "00 02 fc db 01 00 00 04"),
    ("gfx1200", "ds_store_b128 v1, v[4:7]", "00 00 7c db 01 04 00 00"),
    ("gfx1200", "global_load_b128 v[4:7], v6, s[4:5] offset:16", "04 c0 05 ee 04 00 00 00 06 10 00 00"),
    ("gfx1200", "s_barrier_signal -1", "c1 4e 80 be"),
    ("gfx1200", "s_barrier_wait 0xffff", "ff ff 94 bf"),
    ("gfx1200", "s_wait_dscnt 0", "00 00 c6 bf"),
    ("gfx1200", "s_load_b128 s[4:7], s[0:1], 0x0", "00 41 00 f4 00 00 00 f8"),
    ("gfx1200", "v_mul_lo_u32 v6, v48, 8192", "06 00 2c d7 30 ff 01 00 00 20 00 00"),
    ("gfx1200", "v_cvt_f16_f32_e32 v17, v60", "3c 15 22 7e"),
    ("gfx1200", "global_store_b16 v14, v17, s[8:9]", "08 40 06 ee 00 00 80 08 0e 00 00 00"),
    ("gfx1200", "s_endpgm", "00 00 b0 bf"),
    ("gfx1100", "v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]", "00 40 40 cc 08 21 02 1c"),
    ("gfx942", "v_mfma_f32_16x16x16_f16 a[0:3], v[0:1], v[2:3], a[0:3]", "00 80 cd d3 00 05 02 04"),
]
DATA = pathlib.Path(__file__).parent / "data"
ARCHS = ("gfx1100", "gfx1200", "gfx942")


@pytest.mark.parametrize("arch,text,want", REFERENCE, ids=[f"{a}:{t.split()[0]}" for a, t, _ in REFERENCE])
def test_reference_encoding(arch: str, text: str, want: str) -> None:
    code = tg_amd.assemble(text, arch)
    assert code.hex(" ") == want
    assert tg_amd.assemble(tg_amd.disassemble(code, arch), arch) == code


def _golden(arch: str) -> list[tuple[str, str]]:
    rows = []
    for line in (DATA / f"golden_{arch}.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            hexbytes, text = line.split("\t")
            rows.append((hexbytes, text))
    return rows


@pytest.mark.parametrize("arch", ARCHS)
def test_golden_encodings(arch: str) -> None:
    rows = _golden(arch)
    assert len(rows) >= 300
    wrong = []
    for want, text in rows:
        got = tg_amd.assemble(text, arch).hex(" ")
        if got != want:
            wrong.append(f"{text}: ours {got}, llvm-mc {want}")
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("arch", ARCHS)
def test_golden_disassembly_round_trip(arch: str) -> None:
    wrong = []
    for want, text in _golden(arch):
        code = bytes.fromhex(want.replace(" ", ""))
        listing = tg_amd.disassemble(code, arch)
        if tg_amd.assemble(listing, arch) != code:
            wrong.append(f"{text} -> {listing.strip()}")
    assert not wrong, "\n".join(wrong[:20])


@pytest.mark.parametrize("arch", ARCHS)
def test_whole_golden_program_decodes_in_one_stream(arch: str) -> None:
    """Concatenated, the golden bytes decode back instruction by instruction (sizes and literals right)."""
    rows = _golden(arch)
    code = b"".join(bytes.fromhex(h.replace(" ", "")) for h, _ in rows)
    from tg_amd.assembler import decode_all
    assert len(decode_all(code, arch)) == len(rows)

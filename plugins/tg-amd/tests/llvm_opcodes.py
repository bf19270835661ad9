"""Every opcode LLVM knows, listed by LLVM's own disassembler (llvm-mc-19 --disassemble).

For each arch and encoding family, one instruction word per opcode value is built (the other
fields hold distinct registers: VGPR destinations v8.., sources v16/v24/v32, SGPR destinations
s8.., sources s16/s24/s32) and the whole batch is disassembled by one llvm-mc run. An opcode
whose word llvm-mc cannot read is tried again with other operand fields (scalar sources,
another segment); one that never decodes is absent on that arch. The result is a list of
``(family, opcode, text)``: the mnemonic and LLVM's operand syntax of that opcode.

    python plugins/tg-amd/tests/llvm_opcodes.py      # rewrites tg_amd/tables/llvm19_<arch>.txt

The tables written are facts about LLVM 19 (which opcode is which mnemonic, with which operands);
``test_amd_coverage.py`` checks tg-amd knows every mnemonic listed, and (with llvm-mc at hand)
that the listing still matches what llvm-mc says.
"""
from __future__ import annotations

import itertools
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from tg_amd_cases import llvm_mc  # noqa: E402

ARCHS = ("gfx1100", "gfx1200", "gfx1201", "gfx942")
TABLES = pathlib.Path(__file__).parent.parent / "tg_amd" / "tables"
V = 256  # VGPR n is source code 256 + n
NULL_RDNA, OFF_GFX9 = 124, 0x7F

Word = tuple[int, ...]  # little-endian dwords
# an operand field: (bit position in the whole word, width, values to try, the first preferred)
Field = tuple[int, int, tuple[int, ...]]


@dataclass(frozen=True)
class Family:
    """An encoding family: ``count`` opcodes at ``op_at`` (bit, width) of a ``dwords``-long word whose fixed
    bits are ``base``; ``fields`` are the operand fields, filled with distinct registers (or zero, the value
    LLVM wants in a field the opcode does not use)."""
    name: str
    dwords: int
    base: int
    op_at: tuple[int, int]
    count: int
    fields: tuple[Field, ...] = ()

    def words(self, op: int) -> Iterator[Word]:
        """Words to try for ``op``: preferred operand values first, then with more fields changed."""
        choices = [f[2] for f in self.fields]
        combos = sorted(itertools.product(*[range(len(c)) for c in choices]),
                        key=lambda ix: (sum(i > 0 for i in ix), ix))
        for ix in combos:
            word = self.base | op << self.op_at[0]
            for (lo, width, values), i in zip(self.fields, ix, strict=True):
                word |= (values[i] & ((1 << width) - 1)) << lo
            yield tuple(word >> (32 * k) & 0xFFFFFFFF for k in range(self.dwords))


def _f(lo: int, width: int, *values: int) -> Field:
    return (lo, width, values)


VSRC = (V + 16, 16, 0)  # a VGPR, an SGPR, or unused
VSRC2 = (V + 24, 24, 0)
VSRC3 = (V + 32, 32, 0)
VDST = (8, 0)
DS_FIELDS = (_f(32, 8, 16, 0), _f(40, 8, 24, 0), _f(48, 8, 32, 0), _f(56, 8, 8, 0))  # addr, data0, data1, vdst


def _rdna_common(gen: int) -> list[Family]:
    smem_op = (18, 8) if gen == 11 else (13, 8)
    return [
        Family("SOP1", 1, 0xBE800000, (8, 8), 256, (_f(16, 7, 8, 0), _f(0, 8, 16, 0))),
        Family("SOP2", 1, 0x80000000, (23, 7), 96, (_f(16, 7, 8, 0), _f(0, 8, 16, 0), _f(8, 8, 24, 0))),
        Family("SOPC", 1, 0xBF000000, (16, 7), 128, (_f(0, 8, 16, 0), _f(8, 8, 24, 0))),
        Family("SOPK", 1, 0xB0000000, (23, 5), 29, (_f(16, 7, 8, 0), _f(0, 16, 3, 0))),
        Family("SOPP", 1, 0xBF800000, (16, 7), 128, (_f(0, 16, 3, 0),)),
        Family("SMEM", 2, 0xF4000000, smem_op, 256,
               (_f(6, 7, 8, 16, 0), _f(0, 6, 8, 0), _f(57, 7, NULL_RDNA, 40, 0), _f(32, 8, 0x10, 0))),
        Family("VOP1", 1, 0x7E000000, (9, 8), 256, (_f(17, 8, *VDST), _f(0, 9, *VSRC))),
        Family("VOP2", 1, 0, (25, 6), 62, (_f(17, 8, *VDST), _f(0, 9, *VSRC), _f(9, 8, 24, 0))),
        Family("VOPC", 1, 0x7C000000, (17, 8), 256, (_f(0, 9, *VSRC), _f(9, 8, 24, 0))),
        Family("VOP3", 2, 0xD4000000, (16, 10), 1024,
               (_f(0, 8, *VDST), _f(32, 9, *VSRC), _f(41, 9, *VSRC2), _f(50, 9, *VSRC3), _f(8, 7, 0, 40))),
        Family("VOP3P", 2, 0xCC000000 | 1 << 14 | 3 << 59, (16, 7), 128,
               (_f(0, 8, *VDST), _f(32, 9, *VSRC), _f(41, 9, *VSRC2), _f(50, 9, *VSRC3))),
        Family("VOPD_X", 2, 0xC8000000 | 8 << 17 | (9 >> 1) << 49 | (V + 18) << 32, (22, 4), 16,
               (_f(56, 8, 8), _f(0, 9, V + 17, 17), _f(9, 8, 24, 0))),
        Family("VOPD_Y", 2, 0xC8000000 | 8 << 22 | (V + 17) | 8 << 56, (17, 5), 32,
               (_f(49, 7, 9 >> 1), _f(32, 9, V + 18, 18), _f(41, 8, 25, 0))),
        Family("DS", 2, 0xD8000000, (18, 8), 256, DS_FIELDS),
        Family("VINTERP", 2, 0xCD000000, (16, 7), 128,
               (_f(0, 8, 8), _f(32, 9, V + 16), _f(41, 9, V + 24), _f(50, 9, V + 32))),
        Family("LDSDIR", 1, 0xCE000000, (20, 2), 4, (_f(0, 8, 8),)),
    ]


def _rdna3() -> list[Family]:
    flat = (_f(32, 8, 16, 0), _f(40, 8, 24, 0), _f(48, 7, 0x7C, 40), _f(56, 8, 8, 0), _f(55, 1, 0, 1))
    buf = (_f(32, 8, 16, 0), _f(40, 8, 8, 0), _f(48, 5, 40 >> 2), _f(56, 8, 0x80))
    return [*_rdna_common(11),
            Family("FLAT", 2, 0xDC000000, (18, 7), 128, flat),
            Family("SCRATCH", 2, 0xDC000000 | 1 << 16, (18, 7), 128, flat),
            Family("GLOBAL", 2, 0xDC000000 | 2 << 16, (18, 7), 128, flat),
            Family("MUBUF", 2, 0xE0000000, (18, 8), 256, buf),
            Family("MTBUF", 2, 0xE8000000 | 1 << 19, (15, 4), 16, buf),
            Family("MIMG", 2, 0xF0000000 | (48 >> 2) << 53, (18, 8), 256,
                   (_f(8, 4, 1, 0xF), _f(32, 8, 16), _f(40, 8, 8), _f(48, 5, 40 >> 2), _f(15, 1, 0, 1)))]


def _rdna4() -> list[Family]:
    flat = (_f(0, 7, NULL_RDNA, 40), _f(32, 8, 8, 0), _f(55, 8, 24, 0), _f(64, 8, 16, 0), _f(49, 1, 0, 1))
    buf = (_f(0, 7, NULL_RDNA), _f(32, 8, 8, 0), _f(41, 7, 40 >> 2), _f(64, 8, 0, 16), _f(62, 2, 0, 1))
    return [*_rdna_common(12),
            Family("FLAT", 3, 0xEC000000, (14, 8), 256, flat),
            Family("SCRATCH", 3, 0xED000000, (14, 8), 256, flat),
            Family("GLOBAL", 3, 0xEE000000, (14, 8), 256, flat),
            Family("VBUFFER", 3, 0xC4000000 | 1 << 55, (14, 8), 256, buf),
            Family("VIMAGE", 3, 0xD0000000, (14, 8), 256,
                   (_f(22, 4, 1, 0xF), _f(32, 8, 8), _f(41, 7, 40 >> 2), _f(64, 8, 16), _f(55, 7, 0, 48 >> 2),
                    _f(72, 8, 0, 17))),
            Family("VSAMPLE", 3, 0xE4000000 | (48 >> 2) << 55, (14, 8), 256,
                   (_f(22, 4, 1, 0xF), _f(32, 8, 8), _f(41, 7, 40 >> 2), _f(64, 8, 16), _f(72, 8, 0, 17)))]


def _cdna3() -> list[Family]:
    flat = (_f(32, 8, 16, 0), _f(40, 8, 24, 0), _f(48, 7, OFF_GFX9, 40, 0), _f(56, 8, 8, 0))
    buf = (_f(32, 8, 16, 0), _f(40, 8, 8, 0), _f(48, 5, 40 >> 2), _f(56, 8, 0x80))
    return [
        Family("SOP1", 1, 0xBE800000, (8, 8), 256, (_f(16, 7, 8, 0), _f(0, 8, 16, 0))),
        Family("SOP2", 1, 0x80000000, (23, 7), 96, (_f(16, 7, 8, 0), _f(0, 8, 16, 0), _f(8, 8, 24, 0))),
        Family("SOPC", 1, 0xBF000000, (16, 7), 128, (_f(0, 8, 16, 0), _f(8, 8, 24, 0))),
        Family("SOPK", 1, 0xB0000000, (23, 5), 29, (_f(16, 7, 8, 0), _f(0, 16, 3, 0))),
        Family("SOPP", 1, 0xBF800000, (16, 7), 128, (_f(0, 16, 3, 0),)),
        Family("SMEM", 2, 0xC0000000 | 1 << 17, (18, 8), 256, (_f(6, 7, 8, 16, 0), _f(0, 6, 8, 0), _f(32, 8, 0x10, 0))),
        Family("VOP1", 1, 0x7E000000, (9, 8), 256, (_f(17, 8, *VDST), _f(0, 9, *VSRC))),
        Family("VOP2", 1, 0, (25, 6), 62, (_f(17, 8, *VDST), _f(0, 9, *VSRC), _f(9, 8, 24, 0))),
        Family("VOPC", 1, 0x7C000000, (17, 8), 256, (_f(0, 9, *VSRC), _f(9, 8, 24, 0))),
        Family("VOP3", 2, 0xD0000000, (16, 10), 0x380,  # 0x380..: the VOP3P encoding
               (_f(0, 8, *VDST), _f(32, 9, *VSRC), _f(41, 9, *VSRC2), _f(50, 9, *VSRC3), _f(8, 7, 0, 40))),
        Family("VOP3P", 2, 0xD3800000, (16, 7), 128,
               (_f(0, 8, *VDST), _f(32, 9, *VSRC), _f(41, 9, *VSRC2), _f(50, 9, *VSRC3), _f(14, 1, 1, 0),
                _f(59, 2, 3, 0))),
        Family("DS", 2, 0xD8000000, (17, 8), 256, DS_FIELDS),
        Family("FLAT", 2, 0xDC000000, (18, 7), 128, flat),
        Family("SCRATCH", 2, 0xDC000000 | 1 << 14, (18, 7), 128, flat),
        Family("GLOBAL", 2, 0xDC000000 | 2 << 14, (18, 7), 128, flat),
        Family("MUBUF", 2, 0xE0000000, (18, 7), 128, buf),
        Family("MTBUF", 2, 0xE8000000 | 1 << 19, (15, 4), 16, buf),
    ]


def families(arch: str) -> list[Family]:
    return _cdna3() if arch == "gfx942" else _rdna3() if arch == "gfx1100" else _rdna4()


LINE_RE = re.compile(r"^\s*(.*?)\s*; encoding: \[([^\]]*)\]")
WARN_RE = re.compile(r"<stdin>:(\d+):(\d+): warning")
LITERAL = 0x11223344  # appended to a word whose opcode needs a literal


SEPARATOR = (0xBF800000,)  # s_nop 0 between the words: an instruction that wants a literal eats it, not the next word


def disassemble(words: list[Word], arch: str) -> list[str | bool]:
    """llvm-mc's text of each word; False where it reads no instruction of exactly that length."""
    exe = llvm_mc()
    assert exe is not None, "llvm-mc-19 not installed"
    stream = [w for word in words for w in (word, SEPARATOR)]
    lines = [",".join(f"0x{b:02x}" for w in word for b in w.to_bytes(4, "little")) for word in stream]
    proc = subprocess.run([exe, "--disassemble", "-triple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-show-encoding"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600)
    starts = [0]
    for word in stream:
        starts.append(starts[-1] + 4 * len(word))
    failed = {starts[int(m.group(1)) - 1] + (int(m.group(2)) - 1) // 5 for m in WARN_RE.finditer(proc.stderr)}
    # the encodings shown are llvm-mc's re-encoding (ignored bits cleared): only their lengths are used
    decoded = [(m.group(1), len(m.group(2).split(","))) for m in map(LINE_RE.match, proc.stdout.splitlines()) if m]
    at: dict[int, tuple[str, int]] = {}
    pos, k = 0, 0
    while pos < starts[-1] and k < len(decoded):
        if pos in failed:  # llvm-mc skips 4 bytes after a word it cannot read
            pos += 4
            continue
        at[pos] = decoded[k]
        pos += decoded[k][1]
        k += 1
    out: list[str | bool] = []
    for i, word in enumerate(words):
        text, size = at.get(starts[2 * i], ("", 0))
        out.append(text if size == 4 * len(word) else False)
    return out


def _with_literals(words: Iterator[Word]) -> Iterator[Word]:
    tried = list(words)
    yield from tried
    for word in tried:
        yield (*word, LITERAL)


def enumerate_opcodes(arch: str, per_round: int = 24) -> list[tuple[str, int, str, Word]]:
    """``(family, opcode, llvm text, word)`` for every opcode llvm-mc decodes on ``arch``: each round
    disassembles the next ``per_round`` variants of every opcode not yet read."""
    result: dict[tuple[str, int], tuple[str, Word]] = {}
    pending = {(fam.name, op): _with_literals(fam.words(op)) for fam in families(arch) for op in range(fam.count)}
    while pending:
        batch = [(key, word) for key, words in pending.items() for word in itertools.islice(words, per_round)]
        if not batch:
            break
        texts = disassemble([w for _, w in batch], arch)
        for (key, word), text in zip(batch, texts, strict=True):
            if isinstance(text, str) and key not in result and not text.startswith(("v_illegal", "s_illegal")) \
                    and "/*Invalid" not in text:
                result[key] = (" ".join(text.split()), word)
        pending = {key: words for key, words in pending.items() if key not in result}
        exhausted = [key for key, words in pending.items() if not any(k == key for k, _ in batch)]
        for key in exhausted:
            del pending[key]
    return [(f.name, op, *result[(f.name, op)]) for f in families(arch) for op in range(f.count)
            if (f.name, op) in result]


def _hex(word: Word) -> str:
    return "".join(w.to_bytes(4, "little").hex() for w in word)


def table_path(arch: str) -> pathlib.Path:
    return TABLES / f"llvm19_{arch}.txt"


def main() -> None:
    for arch in ARCHS:
        rows = enumerate_opcodes(arch)
        header = (f"# Every opcode llvm-mc-19 --disassemble reads on {arch}: family, opcode, one instruction word\n"
                  "# (hex bytes) and LLVM's text of it. Written by tests/llvm_opcodes.py; do not edit.\n")
        table_path(arch).write_text(header + "".join(f"{f}\t{op:#x}\t{_hex(w)}\t{t}\n" for f, op, t, w in rows))
        print(arch, len(rows), "opcodes,", len({t.split()[0] for _, _, t, _ in rows}), "mnemonics")


if __name__ == "__main__":
    main()

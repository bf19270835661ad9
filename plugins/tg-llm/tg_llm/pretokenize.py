"""Pre-tokenizers for byte-level BPE: text in, a list of pieces ("pre-tokens") out.

BPE merges never cross a piece boundary, so the split decides much of the tokenization. A GGUF file
names its split rule in ``tokenizer.ggml.pre``; each rule is a *sequence* of regular expressions
(the patterns come from the models' own ``tokenizer.json`` files, as llama.cpp's converter records
them). The sequence is applied the way llama.cpp applies it:

- the first pattern splits the text into its matches and the gaps between them (gaps are kept:
  no text is ever dropped);
- each later pattern splits every piece from the step before in the same way.

So ``["\\p{N}", gpt2]`` first isolates each digit, then runs the GPT-2 pattern inside each remaining
piece. The patterns need Unicode property classes (``\\p{L}``, ``\\p{N}``, ``\\p{P}``), which the
stdlib ``re`` lacks: that is why this module uses the ``regex`` package.

``split(text, pre)`` is the whole interface; ``PRE_TOKENIZERS`` lists the names it knows.
"""
from __future__ import annotations

from functools import cache

import regex

# ---- the patterns, by what they do ----

# GPT-2: contractions, optional space + letters / digits / other symbols, whitespace runs that do not
# swallow the space in front of the next word, and any other whitespace.
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# Llama 3: case-insensitive contractions, one optional non-letter before letters, numbers in groups of
# at most three digits, symbols keep trailing newlines, newline runs with the spaces before them.
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
          r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

# Qwen2: Llama 3's pattern with single digits.
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
         r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")

# DeepSeek LLM: letters of the Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, ... scripts (an
# explicit list of ranges, not \p{L}), ASCII/full-width punctuation, trailing whitespace, CJK runs.
# Code point ranges (hex) of the DeepSeek LLM letter class. Written as numbers, not characters: several
# (U+1F7D, U+1FBE, U+2126, U+212A, ...) are canonical singletons that editors silently normalize away.
_DEEPSEEK_LLM_LETTER_RANGES = """
41-5A 61-7A B5 C0-D6 D8-F6 F8-1BA 1BC-1BF 1C4-293 295-2AF 370-373 376-377 37B-37D 37F 386 388-38A 38C
38E-3A1 3A3-3F5 3F7-481 48A-52F 531-556 10A0-10C5 13A0-13F5 13F8-13FD 1C90-1CBA 1CBD-1CBF 1D00-1D2B 1D6B-1D77
1D79-1D9A 1E00-1F15 1F18-1F1D 1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE
1FC2-1FC4 1FC6-1FCC 1FD0-1FD3 1FD6-1FDB 1FE0-1FEC 1FF2-1FF4 1FF6-1FFC 2102 2107 210A-2113 2115 2119-211D 2124 2126
2128 212A-212D 212F-2134 2139 213C-213F 2145-2149 214E 2183-2184 2C00-2C7B 2C7E-2CE4 2CEB-2CEE 2CF2-2CF3 A640-A66D
A680-A69B A722-A76F A771-A787 A78B-A78E AB70-ABBF FB00-FB06 FB13-FB17 FF21-FF3A FF41-FF5A 10400-1044F 104B0-104D3
104D8-104FB 10C80-10CB2 10CC0-10CF2 118A0-118DF 1E900-1E943
"""


def _char_class(ranges: str) -> str:
    """``"41-5A B5"`` -> ``"A-Zµ"``: the body of a regex character class from hex code point ranges."""
    out = []
    for item in ranges.split():
        lo, _, hi = item.partition("-")
        out.append(chr(int(lo, 16)) + ("-" + chr(int(hi, 16)) if hi else ""))
    return "".join(out)


DEEPSEEK_LLM_LETTERS = _char_class(_DEEPSEEK_LLM_LETTER_RANGES)
CJK = "[一-龥ࠀ-一가-퟿]+"
DEEPSEEK_LLM = (
    r"[\r\n]",
    r"\s?[" + DEEPSEEK_LLM_LETTERS + r"]+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+\Z",  # trailing whitespace of a piece ("$" in the original; \Z so a final "\n" is not special)
    CJK,
    r"\p{N}+",
)

# DeepSeek Coder: newlines alone, letters, punctuation, CJK runs, single digits.
DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}")

# Falcon: punctuation (and $+<=>^~|`) runs first, then GPT-2, then numbers in groups of three from the left.
FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]")

# StarCoder family (also SmolLM, Command-R, Refact, CodeShell, EXAONE): every digit alone, then GPT-2.
STARCODER = (r"\p{N}", GPT2)

PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    # "default" is GPT-2's pattern (what Hugging Face's ByteLevel pre-tokenizer does). llama.cpp's
    # "default" also isolates punctuation and groups digits by three; files written by its converter
    # never name "default", it is only a fallback for old files without tokenizer.ggml.pre.
    "default": (GPT2,),
    "gpt-2": (GPT2,),
    "gpt2": (GPT2,),
    "mpt": (GPT2,),
    "olmo": (GPT2,),
    "jais": (GPT2,),
    "llama-bpe": (LLAMA3,),
    "llama3": (LLAMA3,),
    "dbrx": (LLAMA3,),
    "smaug-bpe": (LLAMA3,),
    "chatglm-bpe": (LLAMA3,),
    "qwen2": (QWEN2,),
    "stablelm2": (QWEN2,),
    "deepseek-llm": DEEPSEEK_LLM,
    "deepseek-coder": DEEPSEEK_CODER,
    "falcon": FALCON,
    "starcoder": STARCODER,
    "smollm": STARCODER,
    "command-r": STARCODER,
    "refact": STARCODER,
    "codeshell": STARCODER,
    "exaone": STARCODER,
    "minerva-7b": STARCODER,
}

# Pre-tokenizers whose Hugging Face BPE model sets ignore_merges: a piece that is itself a token is not merged.
IGNORE_MERGES = frozenset({"llama-bpe", "llama3"})


class UnknownPreTokenizerError(ValueError):
    """``tokenizer.ggml.pre`` names a split rule this module does not know."""


@cache
def _compiled(pre: str) -> tuple[regex.Pattern[str], ...]:
    patterns = PRE_TOKENIZERS.get(pre)
    if patterns is None:
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise UnknownPreTokenizerError(
            f"unknown pre-tokenizer {pre!r} (tokenizer.ggml.pre); known: {known}. "
            f"Pass pre='<name>' to Tokenizer.from_gguf to choose one explicitly.")
    return tuple(regex.compile(p) for p in patterns)


def check(pre: str) -> None:
    """Raise ``UnknownPreTokenizerError`` when ``pre`` is not a known pre-tokenizer name."""
    _compiled(pre)


def _split_one(pattern: regex.Pattern[str], piece: str, out: list[str]) -> None:
    """Append the matches of ``pattern`` in ``piece`` and the non-empty gaps between them to ``out``."""
    pos = 0
    for m in pattern.finditer(piece):
        start, end = m.span()
        if start == end:
            continue
        if start > pos:
            out.append(piece[pos:start])
        out.append(piece[start:end])
        pos = end
    if pos < len(piece):
        out.append(piece[pos:])


def split(text: str, pre: str) -> list[str]:
    """Split ``text`` into pre-tokens with the rule named ``pre`` (a ``tokenizer.ggml.pre`` value).

    The pieces concatenate back to ``text``.
    """
    pieces = [text] if text else []
    for pattern in _compiled(pre):
        out: list[str] = []
        for piece in pieces:
            _split_one(pattern, piece, out)
        pieces = out
    return pieces

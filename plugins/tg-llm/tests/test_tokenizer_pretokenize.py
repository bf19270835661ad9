"""Pre-tokenizer splits, per ``tokenizer.ggml.pre`` type.

Expected pieces are derived by hand from the pattern definitions (each comment walks through the
patterns in order); random texts are then checked against the ``tokenizers`` package running the same
patterns with its own regex engine (Oniguruma), as a sequence of ``Split(..., "isolated")`` steps.
"""
from __future__ import annotations

import random
import zlib
from typing import Any

import pytest
from llm_testutil import require
from tg_llm import Tokenizer, TokenizerError
from tg_llm.pretokenize import PRE_TOKENIZERS, UnknownPreTokenizerError, split

S = "I'm 12345 ab\n\n  c!?"

HAND_DERIVED = {
    # GPT-2: letters, 'm, " 12345" (space joins the digits), " ab", whitespace before " c" keeps its
    # last space for the word: "\n\n " then " c", then the symbols
    "gpt-2": ["I", "'m", " 12345", " ab", "\n\n ", " c", "!?"],
    "default": ["I", "'m", " 12345", " ab", "\n\n ", " c", "!?"],
    "mpt": ["I", "'m", " 12345", " ab", "\n\n ", " c", "!?"],
    # StarCoder family: each digit isolated first, so GPT-2 then sees "I'm " (trailing " " alone)
    "starcoder": ["I", "'m", " ", "1", "2", "3", "4", "5", " ab", "\n\n ", " c", "!?"],
    "smollm": ["I", "'m", " ", "1", "2", "3", "4", "5", " ab", "\n\n ", " c", "!?"],
    "command-r": ["I", "'m", " ", "1", "2", "3", "4", "5", " ab", "\n\n ", " c", "!?"],
    # Llama 3: " " before digits is plain whitespace, digits in threes, "\n\n" via \s*[\r\n]+, then one
    # space alone (\s+(?!\S)) and " c" (one non-letter may lead letters)
    "llama-bpe": ["I", "'m", " ", "123", "45", " ab", "\n\n", " ", " c", "!?"],
    # Qwen2: Llama 3 with single digits
    "qwen2": ["I", "'m", " ", "1", "2", "3", "4", "5", " ab", "\n\n", " ", " c", "!?"],
    # Falcon: punctuation runs ("'", "!?") first, then GPT-2 inside "m 12345 ab\n\n  c", then [0-9]{3}
    # splits " 12345" into " ", "123", "45"
    "falcon": ["I", "'", "m", " ", "123", "45", " ab", "\n\n ", " c", "!?"],
    # DeepSeek Coder: [\r\n] alone; \s?\p{L}+ leaves "'" and " 12345" as gaps; \s?\p{P}+; \p{N} alone
    "deepseek-coder": ["I", "'", "m", " ", "1", "2", "3", "4", "5", " ab", "\n", "\n", " ", " c", "!?"],
    # DeepSeek LLM: like Coder, but the letter class is explicit and digits stay together (\p{N}+)
    "deepseek-llm": ["I", "'", "m", " ", "12345", " ab", "\n", "\n", " ", " c", "!?"],
}


@pytest.mark.parametrize("pre", sorted(HAND_DERIVED))
def test_split_hand_derived(pre):
    assert split(S, pre) == HAND_DERIVED[pre]


def test_cjk_and_letters():
    text = "你好 world, Ελλάδα"
    # DeepSeek LLM: CJK is not in the letter class (a gap, later kept whole by the CJK pattern); Greek is
    assert split(text, "deepseek-llm") == ["你好", " world", ",", " Ελλάδα"]
    # DeepSeek Coder: \p{L} covers CJK too
    assert split(text, "deepseek-coder") == ["你好", " world", ",", " Ελλάδα"]
    # Llama 3: the space joins the following letters; "," alone
    assert split(text, "llama-bpe") == ["你好", " world", ",", " Ελλάδα"]


def test_deepseek_llm_ascii_punctuation_class_includes_letters():
    # [!-/:-~] spans ':'..'~', which includes A-Z and a-z: "é" (not in it) is cut off " caf"
    assert split(" café", "deepseek-llm") == [" caf", "é"]


def test_pieces_concatenate_to_text():
    rng = random.Random(3)
    alphabet = "aZ é1 9\n\r\t '!?.-_你😀ß\u00a0\u2028"
    for pre in PRE_TOKENIZERS:
        for _ in range(30):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
            pieces = split(text, pre)
            assert "".join(pieces) == text and all(pieces)


def test_unknown_pre_tokenizer():
    with pytest.raises(UnknownPreTokenizerError, match="unknown pre-tokenizer 'nope'.*llama-bpe"):
        split("x", "nope")
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "nope", "tokenizer.ggml.tokens": ["a", "b", "ab"],
            "tokenizer.ggml.merges": ["a b"]}
    with pytest.raises(TokenizerError, match="unknown pre-tokenizer 'nope'"):
        Tokenizer.from_metadata(meta)
    assert Tokenizer.from_metadata(meta, pre="gpt-2").encode("ab") == [2]


def onig_splitter(pre: str) -> Any:
    tk = require("tokenizers", "pip install tokenizers")
    steps = []
    for pattern in PRE_TOKENIZERS[pre]:
        pattern = pattern.replace(r"\s+\Z", r"\s+$")  # the original spelling
        steps.append(tk.pre_tokenizers.Split(tk.Regex(pattern), behavior="isolated"))
    seq = tk.pre_tokenizers.Sequence(steps)
    return lambda text: [piece for piece, _ in seq.pre_tokenize_str(text)]


@pytest.mark.parametrize("pre", ["gpt-2", "smollm", "llama-bpe", "qwen2", "falcon", "deepseek-coder",
                                 "deepseek-llm"])
def test_split_matches_oniguruma(pre):
    onig = onig_splitter(pre)
    rng = random.Random(zlib.crc32(pre.encode()))
    alphabet = "abcXYZ éüΩж 0123456789 \n\r\t '\"!?.,;:-_()<>你好한😀 'll 's 'RE "
    for _ in range(150):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert split(text, pre) == onig(text), repr(text)

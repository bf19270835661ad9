"""SentencePiece-style (``tokenizer.ggml.model = llama``) vocabularies, written with gguf-py's GGUFWriter.

Three references: token ids derived by hand from the rule (merge the adjacent pair whose concatenation
has the highest score, leftmost on ties; unknown characters as <0xNN> byte tokens), a deliberately
naive implementation of that rule, and the ``tokenizers`` package's BPE with byte fallback over merges
ordered by score (how Hugging Face converts Llama vocabularies).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from llm_testutil import require
from tg_llm import Tokenizer

UNKNOWN, NORMAL, CONTROL, USER_DEFINED, BYTE = 2, 1, 3, 4, 6


# (text, score) of the normal tokens; scores are distinct so the order of merges is fixed
NORMAL_TOKENS = [
    ("▁", -1.0), ("h", -2.0), ("e", -2.1), ("l", -2.2), ("o", -2.3), ("w", -2.4), ("r", -2.5), ("d", -2.6),
    ("a", -3.0), ("b", -3.1),
    ("ll", -10.0), ("he", -11.0), ("▁h", -12.0), ("▁w", -13.0), ("or", -14.0), ("ld", -15.0), ("llo", -16.0),
    ("▁hello", -17.0), ("▁he", -18.0), ("▁wor", -19.0), ("hell", -20.0), ("▁world", -21.0), ("orld", -22.0),
    ("ab", -30.0),
]


def vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    scores = [0.0] * len(tokens)
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    for text, score in NORMAL_TOKENS:
        tokens.append(text)
        scores.append(score)
        types.append(NORMAL)
    for text, kind in (("<|user|>", CONTROL), ("<tool>", USER_DEFINED)):
        tokens.append(text)
        scores.append(0.0)
        types.append(kind)
    return tokens, scores, types


def write_spm(path: Path, **options: Any) -> Path:
    gguf = require("gguf", "pip install gguf")
    tokens, scores, types = vocab()
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    if "add_space_prefix" in options:
        w.add_add_space_prefix(options["add_space_prefix"])
    if "add_eos" in options:
        w.add_add_eos_token(options["add_eos"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def spm(tmp_path_factory) -> Tokenizer:
    return Tokenizer.from_gguf(write_spm(tmp_path_factory.mktemp("spm") / "spm.gguf"))


def ids(tok: Tokenizer, *texts: str) -> list[int]:
    return [tok.token_to_id[t] for t in texts]


def test_defaults_of_a_llama_vocabulary(spm):
    assert spm.model == "llama" and spm.add_bos and not spm.add_eos and spm.add_space_prefix
    assert (spm.bos_id, spm.eos_id, spm.unk_id) == (1, 2, 0)
    assert spm.eot_ids == {2}


def test_merges_by_score_hand_derived(spm):
    # ▁ h e l l o ▁ w o r l d: ll(-10), he(-11), ▁w(-13), or(-14), ld(-15), llo(-16), ▁he(-18) gives
    # ▁he+llo -> ▁hello(-17), then ▁w+or -> ▁wor(-19), then ▁wor+ld -> ▁world(-21)
    assert spm.encode("hello world", add_special=False) == ids(spm, "▁hello", "▁world")
    assert spm.encode("hello world") == [1, *ids(spm, "▁hello", "▁world")]
    # ties go to the leftmost pair: ▁ l l l -> ▁ [ll] l
    assert spm.encode("lll", add_special=False) == ids(spm, "▁", "ll", "l")
    assert spm.encode("ab", add_special=False) == ids(spm, "▁", "ab")
    # two spaces: the first joins nothing (no "▁▁" token)
    assert spm.encode(" hello", add_special=False) == ids(spm, "▁", "▁hello")


def test_byte_fallback_hand_derived(spm):
    # é is not a token: its UTF-8 bytes C3 A9 as byte tokens; 😀 is F0 9F 98 80
    assert spm.encode("hé", add_special=False) == ids(spm, "▁h", "<0xC3>", "<0xA9>")
    assert spm.encode("😀", add_special=False) == ids(spm, "▁", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>")
    assert spm.encode("\n", add_special=False) == ids(spm, "▁", "<0x0A>")


def test_decode_spaces_bytes_and_specials(spm):
    tok = spm
    assert tok.decode(tok.encode("hello world")) == "<s> hello world"
    assert tok.decode(tok.encode("hello world"), skip_special=True) == "hello world"
    for text in ["hé 😀 world", "a\nb\tc", "  two spaces", "日本語", "hello"]:
        assert tok.decode(tok.encode(text, add_special=False)) == text
        assert tok.decode(tok.encode(text), skip_special=True) == text


def test_stream_decoder_buffers_byte_tokens(spm):
    ids_ = spm.encode("😀é", add_special=False)
    dec = spm.stream_decoder()
    chunks = [dec.add(i) for i in ids_]
    # ▁ alone is the leading space (dropped), then 4 bytes of 😀, 2 of é
    assert chunks == ["", "", "", "", "😀", "", "é"]
    assert dec.flush() == ""


def test_special_tokens_and_space_prefix(spm):
    user = spm.token_to_id["<|user|>"]
    tool = spm.token_to_id["<tool>"]
    # control tokens only with parse_special; the text after a special token gets the space prefix
    assert spm.encode("<|user|>hello", add_special=False, parse_special=True) == [user, *ids(spm, "▁hello")]
    plain = spm.encode("<|user|>", add_special=False)
    assert user not in plain and plain[0] == spm.token_to_id["▁"]
    # user-defined tokens are always recognised
    assert spm.encode("ab<tool>ab", add_special=False) == [*ids(spm, "▁", "ab"), tool, *ids(spm, "▁", "ab")]


def test_no_space_prefix_and_add_eos(tmp_path):
    tok = Tokenizer.from_gguf(write_spm(tmp_path / "v.gguf", add_space_prefix=False, add_eos=True))
    # ll(-10) first: h e [ll] o; then he(-11): [he] ll o; then llo(-16): he [llo]; "hello" is no token
    assert tok.encode("hello") == [1, *ids(tok, "he", "llo"), 2]
    assert tok.encode("hello", add_special=False) == ids(tok, "he", "llo")
    assert tok.decode(ids(tok, "▁h", "e")) == " he"  # no prefix, so no space is dropped


def naive_spm(tok: Tokenizer, text: str) -> list[int]:
    """The rule as written: rescan every adjacent pair each step, merge the best-scoring (leftmost)."""
    scores = dict(zip(*vocab()[:2], strict=True))
    syms = list(text.replace(" ", "▁"))
    while True:
        best = None
        for i in range(len(syms) - 1):
            s = scores.get(syms[i] + syms[i + 1])
            if s is not None and (best is None or s > best[0]):
                best = (s, i)
        if best is None:
            break
        i = best[1]
        syms[i:i + 2] = [syms[i] + syms[i + 1]]
    out = []
    for s in syms:
        if s in tok.token_to_id:
            out.append(tok.token_to_id[s])
        else:
            out.extend(tok.token_to_id[f"<0x{b:02X}>"] for b in s.encode())
    return out


def test_random_texts_match_naive_rule(spm):
    rng = random.Random(99)
    alphabet = "helowrdab  é😀\n"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        assert spm.encode(text, add_special=False) == naive_spm(spm, " " + text), repr(text)
        assert spm.decode(spm.encode(text, add_special=False)) == text
        for skip in (False, True):  # streaming gives the same text as a whole decode
            dec = spm.stream_decoder(skip_special=skip)
            with_bos = spm.encode(text)
            assert dec.add_many(with_bos) + dec.flush() == spm.decode(with_bos, skip_special=skip)


def test_matches_tokenizers_bpe_with_byte_fallback(spm):
    tk = require("tokenizers", "pip install tokenizers")
    tokens, scores, types = vocab()
    vocab_map = {t: i for i, t in enumerate(tokens)}
    normal = {t for t, k in zip(tokens, types, strict=True) if k == NORMAL}
    merges = []
    for t in sorted(normal, key=lambda t: -scores[vocab_map[t]]):  # best score = first merge
        for cut in range(1, len(t)):
            if t[:cut] in normal and t[cut:] in normal:
                merges.append((t[:cut], t[cut:]))
    ref = tk.Tokenizer(tk.models.BPE(vocab=vocab_map, merges=merges, byte_fallback=True, unk_token="<unk>"))
    ref.normalizer = tk.normalizers.Sequence([tk.normalizers.Prepend("▁"), tk.normalizers.Replace(" ", "▁")])
    rng = random.Random(5)
    words = ["hello", "world", "held", "or", "ab", "lo", "hé", "😀", "wold", "dear", "bread"]
    for _ in range(200):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        assert spm.encode(text, add_special=False) == ref.encode(text, add_special_tokens=False).ids, text

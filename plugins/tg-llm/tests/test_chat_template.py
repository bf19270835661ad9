"""Chat templates: SmolLM2's own template against a hand-written ChatML string and against jinja2 set up
the way Hugging Face ``transformers`` sets it up; the ChatML default; errors; the sandbox."""
from __future__ import annotations

import json

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from llm_testutil import smollm2_path
from tg_llm import ChatTemplate, ChatTemplateError, Tokenizer, render_chat


@pytest.fixture(scope="module")
def smollm2() -> Tokenizer:
    return Tokenizer.from_gguf(smollm2_path())


CONVERSATION = [
    {"role": "user", "content": "Hi! What's 2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And in français, with ünïcödé? 🤖"},
]

SMOLLM2_EXPECTED = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nHi! What's 2+2?<|im_end|>\n"
    "<|im_start|>assistant\n4.<|im_end|>\n"
    "<|im_start|>user\nAnd in français, with ünïcödé? 🤖<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def hf_style_render(source: str, messages, **kwargs) -> str:
    """jinja2 configured as transformers does: sandbox, trim/lstrip blocks, loopcontrols, json.dumps tojson."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, **kwargs)


def test_smollm2_template_hand_derived(smollm2):
    assert smollm2.chat_template is not None
    assert smollm2.apply_chat_template(CONVERSATION, add_generation_prompt=True) == SMOLLM2_EXPECTED
    without = smollm2.apply_chat_template(CONVERSATION, add_generation_prompt=False)
    assert without == SMOLLM2_EXPECTED.removesuffix("<|im_start|>assistant\n")


def test_smollm2_template_matches_hf_style_jinja(smollm2):
    with_system = [{"role": "system", "content": "Be brief."}, *CONVERSATION]
    for messages in (CONVERSATION, with_system):
        for gen in (True, False):
            ours = render_chat(smollm2.chat_template, messages, add_generation_prompt=gen,
                               bos_token="<|im_start|>", eos_token="<|im_end|>")
            ref = hf_style_render(smollm2.chat_template, messages, add_generation_prompt=gen,
                                  bos_token="<|im_start|>", eos_token="<|im_end|>")
            assert ours == ref
    assert "You are a helpful AI" not in render_chat(smollm2.chat_template, with_system)


def test_rendered_prompt_tokenizes_with_special_tokens(smollm2):
    prompt = smollm2.apply_chat_template(CONVERSATION)
    ids = smollm2.encode(prompt, parse_special=True)
    assert ids.count(smollm2.token_to_id["<|im_start|>"]) == 5
    assert smollm2.decode(ids) == prompt


def test_missing_template_is_chatml():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    expected = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert render_chat(None, messages, add_generation_prompt=True) == expected
    assert ChatTemplate(None).is_default
    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
            "tokenizer.ggml.merges": ["a b"]}
    assert Tokenizer.from_metadata(meta).chat_template is None
    assert Tokenizer.from_metadata(meta).apply_chat_template(messages) == expected


def test_hf_features_whitespace_tojson_strftime_loopcontrols():
    source = (
        "{% for m in messages %}\n"
        "    {% if m.role == 'skip' %}{% continue %}{% endif %}\n"
        "[{{ m.role }}]{{ m.content | tojson }}\n"
        "{% endfor %}\n"
        "{{ tools | tojson(indent=1) }}|{{ bos_token }}{{ eos_token }}|{{ strftime_now('%Y') | length }}"
        "{% generation %}G{% endgeneration %}"
    )
    messages = [{"role": "user", "content": "é <b>&"}, {"role": "skip", "content": "x"}]
    out = render_chat(source, messages, tools=[{"name": "f"}], bos_token="<s>", eos_token="</s>")
    # trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before one;
    # tojson keeps non-ASCII and HTML characters as they are (json.dumps(ensure_ascii=False))
    assert out == '[user]"é <b>&"\n[\n {\n  "name": "f"\n }\n]|<s></s>|4G'


def test_broken_templates_raise_chat_template_error():
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for m in messages %}no end")
    with pytest.raises(ChatTemplateError, match="does not compile"):
        render_chat("{{ unclosed ", [])
    with pytest.raises(ChatTemplateError, match="raised: roles must alternate"):
        render_chat("{{ raise_exception('roles must alternate') }}", [])
    with pytest.raises(ChatTemplateError, match="failed"):
        render_chat("{{ messages[0]['content'] + 1 }}", [{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError):
        render_chat("{{ messages[5].content.upper() }}", [])
    assert isinstance(ChatTemplateError("x"), ValueError)


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__.__init__.__globals__ }}",
    "{{ raise_exception.__globals__['os'] }}",
    "{{ cycler.__init__.__globals__.os.popen('echo pwned').read() }}",
])
def test_sandbox_blocks_python_internals(source):
    with pytest.raises(ChatTemplateError, match="blocked by the sandbox"):
        render_chat(source, [{"role": "user", "content": "x"}])


def test_sandbox_is_immutable():
    messages = [{"role": "user", "content": "x"}]
    with pytest.raises(ChatTemplateError, match="sandbox"):
        render_chat("{{ messages.append({'role': 'evil'}) }}", messages)
    with pytest.raises(ChatTemplateError, match="sandbox"):
        render_chat("{% set _ = messages[0].update({'content': 'y'}) %}", messages)
    assert messages == [{"role": "user", "content": "x"}]
    # private attributes print as nothing instead of leaking
    assert render_chat("{{ ''.__class__ }}", []) == ""


# ---- built-in templates, --chat-template, BOS once, end-of-turn ids (Gemma's SentencePiece file) ----

GEMMA_EXPECTED = ("<bos><start_of_turn>user\nBe brief.\n\nHi! What's 2+2?<end_of_turn>\n"
                  "<start_of_turn>model\n4.<end_of_turn>\n<start_of_turn>user\nAnd you?<end_of_turn>\n"
                  "<start_of_turn>model\n")


def gemma_tokenizer(tmp_path):
    from llm_testutil import require_gguf
    from tiny_gguf import TinySpec, write_tiny_gguf
    require_gguf()
    path = tmp_path / "gemma3.gguf"
    write_tiny_gguf(TinySpec("gemma3", sliding_window=4, head_dim=32), path)
    return Tokenizer.from_gguf(path), path


def test_builtin_gemma_template_hand_derived():
    from tg_llm.chat_template import chat_template_source
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi! What's 2+2?"},
                {"role": "assistant", "content": "4."}, {"role": "user", "content": " And you? "}]
    got = render_chat(chat_template_source("gemma"), messages, add_generation_prompt=True, bos_token="<bos>")
    assert got == GEMMA_EXPECTED


def test_builtin_llama3_and_phi3_templates_hand_derived():
    from tg_llm.chat_template import chat_template_source
    messages = [{"role": "user", "content": "Hi"}]
    assert render_chat(chat_template_source("llama3"), messages, add_generation_prompt=True,
                       bos_token="<|begin_of_text|>") == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>"
                                                          "\n\nHi<|eot_id|><|start_header_id|>assistant"
                                                          "<|end_header_id|>\n\n")
    assert render_chat(chat_template_source("phi3"), messages, add_generation_prompt=True) == \
        "<|user|>\nHi<|end|>\n<|assistant|>\n"


def test_chat_template_option_reads_files_and_names_the_builtins(tmp_path):
    from tg_llm.chat_template import BUILTIN_TEMPLATES, chat_template_source
    file = tmp_path / "t.jinja"
    file.write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}", encoding="utf-8")
    assert render_chat(chat_template_source(str(file)), [{"role": "user", "content": "x"}]) == "[x]"
    with pytest.raises(ChatTemplateError, match="'nope' is neither a file nor a built-in.*gemma"):
        chat_template_source("nope")
    file.write_text("{% for %}", encoding="utf-8")
    with pytest.raises(ChatTemplateError, match="does not compile"):
        chat_template_source(str(file))
    assert set(BUILTIN_TEMPLATES) == {"chatml", "gemma", "llama3", "phi3"}


def test_bos_added_exactly_once(tmp_path):
    """Gemma's vocabulary says add_bos_token: a template that writes BOS and one that does not give one BOS."""
    from tg_llm.chat_template import chat_template_source
    tok, _ = gemma_tokenizer(tmp_path)
    messages = [{"role": "user", "content": "hi"}]
    tok.chat_template = chat_template_source("gemma")  # writes {{ bos_token }}
    with_bos = tok.encode_chat(messages)
    tok.chat_template = chat_template_source("phi3")  # does not
    without = tok.encode_chat(messages)
    for ids in (with_bos, without):
        assert ids[0] == tok.bos_id and ids.count(tok.bos_id) == 1
    assert with_bos[1] == tok.token_to_id["<start_of_turn>"]


def test_end_of_turn_ids_come_from_metadata(tmp_path):
    """tokenizer.ggml.eot_token_id (and EOS) end a turn; a token's text alone does not when the file names them."""
    tok, _ = gemma_tokenizer(tmp_path)
    assert tok.eot_ids == {tok.token_to_id["<end_of_turn>"], tok.eos_id}
    renamed = Tokenizer(["<unk>", "<s>", "</s>", "<|im_end|>", "<turn_end>", "a"], model="llama",
                        token_types=[2, 3, 3, 3, 3, 1], bos_id=1, eos_id=2, eot_ids=[4])
    assert renamed.eot_ids == {2, 4}  # <|im_end|> is not named by the metadata
    fallback = Tokenizer(["<unk>", "<s>", "</s>", "<|im_end|>", "a"], model="llama", token_types=[2, 3, 3, 3, 1],
                         bos_id=1, eos_id=2)
    assert fallback.eot_ids == {2, 3}  # no eot/eom ids in the metadata: the known end-of-turn texts

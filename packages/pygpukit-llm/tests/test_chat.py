"""Chat templates rendered as transformers renders them; every expected prompt
is written out by hand."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from tokenizer_testing import CHATML, CONVO, LLAMA3, MISTRAL, byte_level_json, model_dir

from pygpukit_llm import ChatTemplateError, Tokenizer, TokenizerError
from pygpukit_llm.chat import render_chat_template


@pytest.fixture(scope="module")
def tok_json():
    return byte_level_json()


def qwen(tmp_path, tok_json, **files):
    cfg = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": CHATML}
    cfg.update(files.pop("tokenizer_config", {}))
    return Tokenizer.load(model_dir(tmp_path / "qwen", tok_json, tokenizer_config=cfg, **files))


def test_chatml_template(tmp_path, tok_json):
    tok = qwen(tmp_path, tok_json)
    assert tok.apply_chat_template(CONVO) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi! Caf\u00e9?<|im_end|>\n"
        "<|im_start|>assistant\nOui. \U0001f600<|im_end|>\n"
        "<|im_start|>user\n\u6771\u4eac\u306e\u5929\u6c17\u306f?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    user_only = [{"role": "user", "content": "x"}]
    assert tok.apply_chat_template(user_only, add_generation_prompt=False) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n"
    )
    ids = tok.apply_chat_template(user_only, tokenize=True)
    expected = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    assert ids == tok.encode(expected, add_special_tokens=False)
    assert ids[0] == tok.token_to_id("<|im_start|>") and tok.decode(ids, skip_special_tokens=False) == expected


def test_enable_thinking_passed_only_when_given(tmp_path, tok_json):
    tok = qwen(tmp_path, tok_json)
    msgs = [{"role": "user", "content": "q"}]
    head = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(msgs) == head
    assert tok.apply_chat_template(msgs, enable_thinking=True) == head
    assert tok.apply_chat_template(msgs, enable_thinking=False) == head + "<think>\n\n</think>\n\n"


def test_tools_through_tojson_keep_non_ascii(tmp_path, tok_json):
    tok = qwen(tmp_path, tok_json)
    tools = [
        {
            "type": "function",
            "function": {"name": "\u5929\u6c17", "description": "a<b & c>d \U0001f600", "parameters": {"city": "Z\u00fcrich"}},
        }
    ]
    out = tok.apply_chat_template([{"role": "user", "content": "Wetter?"}], tools=tools)
    assert out == (
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\n<tools>\n"
        '{"type": "function", "function": {"name": "\u5929\u6c17", "description": "a<b & c>d \U0001f600", "parameters": {"city": "Z\u00fcrich"}}}'
        "\n</tools><|im_end|>\n<|im_start|>user\nWetter?<|im_end|>\n<|im_start|>assistant\n"
    )
    docs = [{"title": "\u00dcn\u00efcode", "text": "\u6771\u4eac"}]
    template = "{{ documents | tojson(indent=2) }}|{{ x | tojson }}|{{ x | tojson(ensure_ascii=True) }}"
    assert render_chat_template(template, [{"role": "user", "content": ""}], documents=docs, x="\u00e9") == (
        '[\n  {\n    "title": "\u00dcn\u00efcode",\n    "text": "\u6771\u4eac"\n  }\n]|"\u00e9"|"\\u00e9"'
    )


def test_llama3_template_has_one_bos(tmp_path, tok_json):
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_bos_token": True, "chat_template": LLAMA3}
    tok = Tokenizer.load(model_dir(tmp_path / "l3", tok_json, tokenizer_config=cfg, generation_config={"eos_token_id": [0, 6]}))
    msgs = [{"role": "system", "content": "  You answer. \n"}, {"role": "user", "content": "\u00c7a va?"}]
    text = tok.apply_chat_template(msgs)
    assert text == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou answer.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n\u00c7a va?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    bos = tok.token_to_id("<|begin_of_text|>")
    ids = tok.apply_chat_template(msgs, tokenize=True)
    assert ids[0] == bos and ids[1] != bos
    assert tok.encode(text) == ids  # encode() of a prompt that has BOS does not add a second one
    assert tok.stop_ids == frozenset({tok.token_to_id("<|eot_id|>"), 0, 6})


def test_raise_exception_and_alternating_roles(tmp_path, tok_json):
    cfg = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": MISTRAL}
    tok = Tokenizer.load(model_dir(tmp_path / "m", tok_json, tokenizer_config=cfg))
    ok = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}, {"role": "user", "content": "Et 3+3 ?"}]
    assert tok.apply_chat_template(ok) == "<|begin_of_text|>[INST] 2+2? [/INST]4<|eot_id|> [INST] Et 3+3 ? [/INST]"
    with pytest.raises(ChatTemplateError, match=r"^Conversation roles must alternate user/assistant/user/assistant/\.\.\.$"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    with pytest.raises(ChatTemplateError, match="Only user and assistant roles"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}])


def test_trim_and_lstrip_blocks_loopcontrols_generation_block(tmp_path, tok_json):
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"}]
    template = """{% for m in messages %}
    {% if m.role == 'system' %}
        {% continue %}
    {% endif %}
    {% if m.role == 'assistant' %}
{% generation %}A: {{ m.content }}{% endgeneration %}

    {% else %}
U: {{ m.content }}
    {% endif %}
    {% if loop.index > 5 %}{% break %}{% endif %}
{% endfor %}"""
    assert render_chat_template(template, msgs) == "U: u1\nA: a1\n"


def test_globals_and_extra_variables(tmp_path, tok_json):
    tok = qwen(tmp_path, tok_json)
    template = "{{ strftime_now('%Y-%m-%d') }}|{{ custom }}|{{ bos_token is defined }}|{{ eos_token }}|{{ pad_token }}"
    before = datetime.now().strftime("%Y-%m-%d")
    out = tok.apply_chat_template([{"role": "user", "content": "q"}], chat_template=template, custom=[1, "\u00fc"])
    after = datetime.now().strftime("%Y-%m-%d")
    assert out in (f"{before}|[1, '\u00fc']|False|<|im_end|>|<|endoftext|>", f"{after}|[1, '\u00fc']|False|<|im_end|>|<|endoftext|>")


def test_continue_final_message(tmp_path, tok_json):
    tok = qwen(tmp_path, tok_json)
    msgs = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2, "}]
    assert tok.apply_chat_template(msgs, add_generation_prompt=False, continue_final_message=True) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n1, 2, "
    )
    with pytest.raises(ChatTemplateError, match="exclude each other"):
        tok.apply_chat_template(msgs, continue_final_message=True)


def test_list_of_named_templates(tmp_path, tok_json):
    named = [
        {"name": "default", "template": "D:{{ messages[0].content }}"},
        {"name": "tool_use", "template": "T:{{ tools | length }}:{{ messages[0].content }}"},
        {"name": "rag", "template": "R:{{ documents[0].text }}"},
    ]
    tok = qwen(tmp_path, tok_json, tokenizer_config={"chat_template": named})
    msgs = [{"role": "user", "content": "h\u00e9"}]
    assert tok.apply_chat_template(msgs) == "D:h\u00e9"
    assert tok.apply_chat_template(msgs, tools=[{"name": "f"}, {"name": "g"}]) == "T:2:h\u00e9"
    assert tok.apply_chat_template(msgs, chat_template="rag", documents=[{"text": "doc"}]) == "R:doc"
    assert tok.apply_chat_template(msgs, chat_template="X{{ messages | length }}") == "X1"
    with pytest.raises(ChatTemplateError, match="no chat template named 'nope'; this model has: default, tool_use, rag"):
        tok.apply_chat_template(msgs, chat_template="nope")
    no_default = qwen(tmp_path / "nd", tok_json, tokenizer_config={"chat_template": named[1:]})
    with pytest.raises(ChatTemplateError, match="no default chat template"):
        no_default.apply_chat_template(msgs)
    with pytest.raises(ChatTemplateError, match="list items must be"):
        qwen(tmp_path / "bad", tok_json, tokenizer_config={"chat_template": [{"name": "default"}]})


def test_template_files_in_the_directory(tmp_path, tok_json):
    tok = qwen(tmp_path, tok_json, chat_template_jinja="J:{{ messages[-1].content }}")
    assert tok.apply_chat_template([{"role": "user", "content": "z"}]) == "J:z"
    proc = qwen(
        tmp_path / "p", tok_json, tokenizer_config={"chat_template": None}, chat_template={"chat_template": "P:{{ messages | length }}"}
    )
    assert proc.apply_chat_template([{"role": "user", "content": "z"}]) == "P:1"
    extra = tmp_path / "qwen" / "additional_chat_templates"
    extra.mkdir()
    (extra / "rag.jinja").write_text("RAG:{{ documents | length }}", encoding="utf-8")
    again = Tokenizer.load(tmp_path / "qwen")
    assert sorted(again.chat_templates) == ["default", "rag"]
    assert again.apply_chat_template([{"role": "user", "content": "z"}], chat_template="rag", documents=[{}, {}]) == "RAG:2"


def test_missing_template_names_the_directory(tmp_path, tok_json):
    d = model_dir(tmp_path / "base-model", tok_json, tokenizer_config={"eos_token": "<|endoftext|>"})
    tok = Tokenizer.load(d)
    with pytest.raises(ChatTemplateError, match=re.escape(f"model directory {d} has no chat template")) as info:
        tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert isinstance(info.value, TokenizerError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "messages, match",
    [
        ("hello", "must be a list"),
        ({"role": "user", "content": "x"}, "must be a list"),
        ([], "empty"),
        (["hi"], r"messages\[0\] must be a dict"),
        ([{"content": "x"}], r"messages\[0\] needs a non-empty str 'role'"),
        (
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": 3}],
            r"messages\[1\] \(assistant\) needs a str 'content', got int",
        ),
        ([{"role": "user"}], r"needs a str 'content', got NoneType"),
    ],
)
def test_messages_are_validated(tmp_path, tok_json, messages, match):
    with pytest.raises(ChatTemplateError, match=match):
        qwen(tmp_path, tok_json).apply_chat_template(messages)


def test_tool_call_message_without_content(tmp_path, tok_json):
    template = "{% for m in messages %}{{ m.role }}:{{ m.content if m.content is not none else m.tool_calls | tojson }};{% endfor %}"
    msgs = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": {"q": "\u00fc"}}]},
    ]
    assert (
        render_chat_template(template, msgs, add_generation_prompt=False)
        == 'user:x;assistant:[{"name": "f", "arguments": {"q": "\u00fc"}}];'
    )


def test_sandbox_and_template_errors(tmp_path, tok_json):
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(ChatTemplateError, match="failed"):
        render_chat_template("{{ messages.append(1) }}", msgs)
    with pytest.raises(ChatTemplateError, match="failed"):
        render_chat_template("{{ messages[0].content.__class__.__subclasses__() }}", msgs)
    with pytest.raises(ChatTemplateError, match="does not compile: line 1"):
        render_chat_template("{% if %}", msgs)
    with pytest.raises(ChatTemplateError, match="failed"):
        render_chat_template("{{ bos_token + 'x' }}", msgs)  # undefined, as transformers leaves a missing special token
    with pytest.raises(ChatTemplateError, match="tools must be a list of dicts"):
        render_chat_template("x", msgs, tools="f")

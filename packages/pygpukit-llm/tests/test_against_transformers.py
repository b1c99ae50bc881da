"""The reference library: transformers loading the same model directories must
render the same chat prompts and encode/decode the same ids. (Where the
tokenizer_config.json flags add_bos_token/add_eos_token are set, or a text
begins with the BOS token, this package deliberately differs: it honours the
flags and never doubles BOS; those cases are tested in test_tokenizer.py.)"""

from __future__ import annotations

import random

import pytest
from tokenizer_testing import CHATML, CONVO, LLAMA3, MISTRAL, byte_fallback_json, byte_level_json, corpus, model_dir, random_text

from pygpukit_llm import ChatTemplateError, Tokenizer

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    bl = byte_level_json()
    chatml = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": CHATML}
    llama3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3}
    mistral = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": MISTRAL}
    llama2 = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    return {
        "chatml": model_dir(base / "chatml", bl, tokenizer_config=chatml),
        "llama3": model_dir(base / "llama3", bl, tokenizer_config=llama3),
        "mistral": model_dir(base / "mistral", bl, tokenizer_config=mistral),
        "metaspace": model_dir(base / "metaspace", byte_fallback_json("metaspace"), tokenizer_config=llama2),
        "legacy": model_dir(base / "legacy", byte_fallback_json("legacy"), tokenizer_config=llama2),
    }


def both(path):
    return Tokenizer.load(path), transformers.AutoTokenizer.from_pretrained(str(path))


def hf_ids(result):
    return list(result["input_ids"]) if hasattr(result, "keys") else list(result)


@pytest.mark.parametrize("name", ["chatml", "llama3", "mistral"])
def test_chat_prompts_match_transformers(dirs, name):
    ours, ref = both(dirs[name])
    user_assistant = [m for m in CONVO if m["role"] != "system"]
    convos = [CONVO, user_assistant, user_assistant[:1], [{"role": "user", "content": "  spaces  \n"}]]
    tools = [{"type": "function", "function": {"name": "\u5929\u6c17", "description": "a<b & c>d \U0001f600", "parameters": {"x": [1, 2]}}}]
    for messages in convos:
        for gen in (True, False):
            kwargs = [{}, {"tools": tools}, {"enable_thinking": False}, {"enable_thinking": True}]
            for kw in kwargs:
                try:
                    expected = ref.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False, **kw)
                except Exception as exc:  # the template's raise_exception
                    with pytest.raises(ChatTemplateError, match=str(exc)[:30].replace(".", r"\.")):
                        ours.apply_chat_template(messages, add_generation_prompt=gen, **kw)
                    continue
                assert ours.apply_chat_template(messages, add_generation_prompt=gen, **kw) == expected
                ids = ours.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True, **kw)
                assert ids == hf_ids(ref.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True, **kw))


def test_continue_final_message_matches_transformers(dirs):
    ours, ref = both(dirs["chatml"])
    messages = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "1, 2, "}]
    expected = ref.apply_chat_template(messages, add_generation_prompt=False, continue_final_message=True, tokenize=False)
    assert ours.apply_chat_template(messages, add_generation_prompt=False, continue_final_message=True) == expected


@pytest.mark.parametrize("name", ["chatml", "metaspace", "legacy"])
def test_encode_decode_match_transformers(dirs, name):
    ours, ref = both(dirs[name])
    rng = random.Random(2)
    texts = corpus(20, seed=9) + [random_text(rng) for _ in range(40)]
    for text in texts:
        for special in (True, False):
            assert ours.encode(text, add_special_tokens=special) == ref.encode(text, add_special_tokens=special)
    for _ in range(60):
        ids = [rng.randrange(ours.vocab_size) for _ in range(rng.randint(1, 30))]
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(
                ids, skip_special_tokens=skip, clean_up_tokenization_spaces=False
            )
    assert ours.bos_token_id == ref.bos_token_id and ours.eos_token_id == ref.eos_token_id

"""Tokenizer loading, encode/decode, special tokens and stop ids, and streaming
decode, on tokenizers trained in tokenizer_testing.py (byte-level BPE as in
GPT-2/Qwen/Llama-3, byte-fallback BPE as in Llama-2/Mistral)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from tokenizer_testing import byte_fallback_json, byte_level_json, corpus, model_dir, random_text

import pygpukit as gp
from pygpukit_llm import StopStrings, StreamDecoder, ThinkingStream, Tokenizer, TokenizerError, split_thinking

FAMILIES = ["byte_level", "metaspace", "legacy"]


@pytest.fixture(scope="module")
def jsons():
    return {
        "byte_level": byte_level_json(),
        "metaspace": byte_fallback_json("metaspace"),
        "legacy": byte_fallback_json("legacy"),
        "no_post": byte_fallback_json("metaspace", bos_post_processor=False),
    }


def load(tmp_path, jsons, family, **files):
    cfg = files.pop("tokenizer_config", None)
    if cfg is None:
        cfg = {"bos_token": None, "eos_token": "<|endoftext|>"} if family == "byte_level" else {"bos_token": "<s>", "eos_token": "</s>"}
    return Tokenizer.load(model_dir(tmp_path / family, jsons[family], tokenizer_config=cfg, **files))


# ---- encode / decode


@pytest.mark.parametrize("family", FAMILIES)
def test_round_trip(tmp_path, jsons, family):
    tok = load(tmp_path, jsons, family)
    rng = random.Random(11)
    texts = corpus(40, seed=5) + [random_text(rng).lstrip() for _ in range(60)]
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert all(isinstance(i, int) for i in ids)
        assert tok.decode(ids) == text
    assert tok.encode_batch(texts[:7], add_special_tokens=False) == [tok.encode(t, add_special_tokens=False) for t in texts[:7]]
    assert tok.encode_batch(texts[:7]) == [tok.encode(t) for t in texts[:7]]


def test_special_tokens_in_text_and_skipping(tmp_path, jsons):
    tok = load(tmp_path, jsons, "byte_level")
    start, end = tok.token_to_id("<|im_start|>"), tok.token_to_id("<|im_end|>")
    ids = tok.encode("<|im_start|>user\nhi \U0001f600<|im_end|>")
    assert ids[0] == start and ids[-1] == end and len(ids) > 3
    assert tok.decode(ids) == "user\nhi \U0001f600"
    assert tok.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhi \U0001f600<|im_end|>"
    # <think> is an added token that is not special: it stays in decoded text
    think = tok.encode("<think>x</think>")
    assert think[0] == tok.token_to_id("<think>") and tok.decode(think) == "<think>x</think>"
    assert tok.id_to_token(start) == "<|im_start|>"


def test_padding_and_truncation_of_tokenizer_json_are_off(tmp_path, jsons):
    data = json.loads(jsons["byte_level"])
    data["padding"] = {
        "strategy": {"Fixed": 64},
        "direction": "Right",
        "pad_to_multiple_of": None,
        "pad_id": 0,
        "pad_type_id": 0,
        "pad_token": "<|endoftext|>",
    }
    data["truncation"] = {"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 0}
    tok = Tokenizer.load(model_dir(tmp_path / "p", json.dumps(data), tokenizer_config={"eos_token": "<|endoftext|>"}))
    text = "the quick brown fox jumps over the lazy dog"
    ids = tok.encode(text)
    assert 3 < len(ids) < 64 and tok.decode(ids) == text
    assert [len(x) for x in tok.encode_batch([text, "a"])] == [len(ids), 1]


def test_bad_input_raises(tmp_path, jsons):
    tok = load(tmp_path, jsons, "byte_level")
    with pytest.raises(TokenizerError, match="must be a str"):
        tok.encode(b"bytes")
    with pytest.raises(TokenizerError, match="list of str"):
        tok.encode_batch("one string")
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([1, tok.vocab_size])
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode([-1])


# ---- BOS / EOS


def test_bos_from_post_processor_is_not_doubled(tmp_path, jsons):
    tok = load(tmp_path, jsons, "metaspace", tokenizer_config={"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True})
    plain = tok.encode("hello world", add_special_tokens=False)
    assert plain[0] != 1
    assert tok.encode("hello world") == [1, *plain]
    # a text that starts with the BOS token itself (a rendered chat prompt) keeps one
    own = tok.encode("<s>hello world", add_special_tokens=False)
    assert own[0] == 1 and own[1] != 1
    assert tok.encode("<s>hello world") == own


def test_bos_added_when_post_processor_does_not(tmp_path, jsons):
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": True}
    tok = load(tmp_path, jsons, "no_post", tokenizer_config=cfg)
    plain = tok.encode("caf\u00e9 \U0001f600", add_special_tokens=False)
    assert tok.encode("caf\u00e9 \U0001f600") == [1, *plain, 2]
    own = tok.encode("<s>caf\u00e9 \U0001f600</s>", add_special_tokens=False)
    assert own[0] == 1 and own[-1] == 2 and own[1] != 1 and own[-2] != 2
    assert tok.encode("<s>caf\u00e9 \U0001f600</s>") == own
    assert tok.encode_batch(["caf\u00e9 \U0001f600", "x"]) == [[1, *plain, 2], [1, *tok.encode("x", add_special_tokens=False), 2]]
    assert tok.add_bos_token and tok.add_eos_token


def test_add_bos_token_false_overrides_post_processor(tmp_path, jsons):
    tok = load(tmp_path, jsons, "metaspace", tokenizer_config={"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": False})
    assert tok.encode("hello") == tok.encode("hello", add_special_tokens=False)
    assert 1 not in tok.encode("hello")
    # without the flag the post-processor decides
    default = load(tmp_path / "d", jsons, "metaspace")
    assert default.add_bos_token and default.encode("hello")[0] == 1


def test_stop_ids_union_of_three_files(tmp_path, jsons):
    eos = {"content": "<|im_end|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    tok = load(
        tmp_path,
        jsons,
        "byte_level",
        tokenizer_config={"bos_token": None, "eos_token": eos, "pad_token": "<|endoftext|>"},
        config={"model_type": "qwen2", "eos_token_id": 3, "bos_token_id": 0},
        generation_config={"eos_token_id": [6, 2], "pad_token_id": 0},
    )
    im_end = tok.token_to_id("<|im_end|>")
    assert im_end == 2
    assert tok.stop_ids == tok.eos_token_ids == frozenset({2, 3, 6})
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == im_end
    assert tok.bos_token is None and tok.bos_token_id is None  # config.json's bos id does not make a tokenizer BOS
    assert tok.pad_token_id == tok.token_to_id("<|endoftext|>")
    assert tok.encode("hi") == tok.encode("hi", add_special_tokens=False)


def test_stop_ids_int_forms_and_pad_fallback(tmp_path, jsons):
    tok = load(
        tmp_path,
        jsons,
        "metaspace",
        special_tokens_map={"bos_token": "<s>", "eos_token": {"content": "</s>"}},
        tokenizer_config={},
        config={"eos_token_id": [2, 9]},
        generation_config={"eos_token_id": 7},
    )
    assert tok.bos_token_id == 1 and tok.eos_token_id == 2
    assert tok.stop_ids == frozenset({2, 7, 9})
    assert tok.pad_token_id == 2  # no pad token anywhere: the EOS
    only_files = load(tmp_path / "b", jsons, "byte_level", tokenizer_config={}, generation_config={"eos_token_id": 5, "pad_token_id": 4})
    assert only_files.stop_ids == frozenset({5}) and only_files.eos_token_id == 5 and only_files.pad_token_id == 4


def test_load_errors(tmp_path, jsons):
    with pytest.raises(TokenizerError, match="not a directory"):
        Tokenizer.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerError, match=r"tokenizer\.json is missing"):
        Tokenizer.load(tmp_path / "empty")
    (tmp_path / "empty" / "tokenizer.model").write_bytes(b"\x0a\x0b")
    with pytest.raises(TokenizerError, match=r"tokenizer\.model \(SentencePiece\) alone is not read"):
        Tokenizer.load(tmp_path / "empty")
    bad = model_dir(tmp_path / "corrupt", '{"version": "1.0", "model": {"type": "BPE", "vocab": ')
    with pytest.raises(TokenizerError, match="cannot read") as info:
        Tokenizer.load(bad)
    assert isinstance(info.value, gp.PyGPUkitError) and isinstance(info.value, ValueError)
    d = model_dir(tmp_path / "cfg", jsons["byte_level"])
    (d / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(TokenizerError, match=r"tokenizer_config\.json: cannot read it as JSON"):
        Tokenizer.load(d)
    with pytest.raises(TokenizerError, match="'<bos>' is not in the vocabulary"):
        load(tmp_path / "v", jsons, "byte_level", tokenizer_config={"bos_token": "<bos>"})
    with pytest.raises(TokenizerError, match="eos_token_id"):
        load(tmp_path / "e", jsons, "byte_level", config={"eos_token_id": "2"})
    with pytest.raises(TokenizerError, match="eos_token"):
        load(tmp_path / "t", jsons, "byte_level", tokenizer_config={"eos_token": 5})


# ---- streaming decode


def stream_all(tok, ids, skip=True):
    stream, pieces, emitted = StreamDecoder(tok, skip_special_tokens=skip), [], ""
    full = tok.decode(ids, skip_special_tokens=skip)
    for i in ids:
        piece = stream.push(i)
        emitted += piece
        assert full.startswith(emitted), (emitted, full)  # never ahead of, never different from the whole decode
        pieces.append(piece)
    pieces.append(stream.flush())
    return pieces, full


@pytest.mark.parametrize("family", FAMILIES)
def test_stream_of_random_ids_equals_decode(tmp_path, jsons, family):
    tok = load(tmp_path, jsons, family)
    rng = random.Random(FAMILIES.index(family))
    for trial in range(120):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 40))]
        skip = trial % 2 == 0
        pieces, full = stream_all(tok, ids, skip)
        assert "".join(pieces) == full


@pytest.mark.parametrize("family", FAMILIES)
def test_stream_of_multibyte_text_never_splits_a_character(tmp_path, jsons, family):
    tok = load(tmp_path, jsons, family)
    rng = random.Random(3)
    texts = [random_text(rng, 12).lstrip() for _ in range(60)] + [
        "\u9f98\U0001f984\U0001d518 \U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001f1ef\U0001f1f5 na\u00efve \u65e5\u672c\u8a9e \u01c5"
    ]
    for text in texts:
        ids = tok.encode(text)
        pieces, full = stream_all(tok, ids)
        assert full == text and "".join(pieces) == text
        assert not any("\ufffd" in p for p in pieces)
    # byte tokens that make one character come out together, once it is complete
    ids = tok.encode("a\u9f98", add_special_tokens=False)
    stream = StreamDecoder(tok)
    assert "".join(stream.push(i) for i in ids) + stream.flush() == "a\u9f98"


def test_stream_tokens_one_at_a_time_keep_leading_spaces(tmp_path, jsons):
    for family in ("metaspace", "legacy"):
        tok = load(tmp_path, jsons, family)
        ids = tok.encode("hello world  the fox", add_special_tokens=False)
        assert len(ids) >= 4
        stream = StreamDecoder(tok)
        pieces = [stream.push(i) for i in ids]
        assert "".join(pieces) + stream.flush() == "hello world  the fox"
        assert any(p.startswith(" ") for p in pieces[1:])  # a later word keeps its space
        # after a flush the stream starts a new text
        assert "".join(stream.push(i) for i in ids) + stream.flush() == "hello world  the fox"


def test_stream_decodes_a_bounded_window(tmp_path, jsons):
    tok = load(tmp_path, jsons, "byte_level")
    lengths = []

    class Recorder:
        def __getattr__(self, name):
            return getattr(backend, name)

        def decode(self, ids, skip_special_tokens=True):
            lengths.append(len(ids))
            return backend.decode(ids, skip_special_tokens=skip_special_tokens)

    backend = tok.backend
    tok.backend = Recorder()
    ids = tok.encode(" ".join(corpus(60)), add_special_tokens=False)
    assert len(ids) > 500
    stream = StreamDecoder(tok)
    out = "".join(stream.push(i) for i in ids) + stream.flush()
    tok.backend = backend
    assert out == tok.decode(ids)
    assert max(lengths) <= 12  # a few tokens, not the whole sequence
    assert stream.ids == ids


def generation_loop(tok, ids, stop_strings):
    """ids -> StreamDecoder -> StopStrings -> ThinkingStream, as a generation loop chains them."""
    stream, stops, think = StreamDecoder(tok), StopStrings(stop_strings), ThinkingStream()
    routed = {"thinking": "", "reply": ""}
    chunks = []
    for i in ids:
        if i in tok.stop_ids:
            break
        chunks.append(stops.feed(stream.push(i)))
        if stops.stopped:
            break
    if not stops.stopped:
        chunks.append(stops.feed(stream.flush()) + stops.flush())
    for chunk in chunks:
        for channel, piece in think.feed(chunk):
            routed[channel] += piece
    for channel, piece in think.flush():
        routed[channel] += piece
    return routed["thinking"], routed["reply"], stops.matched


@pytest.mark.parametrize("family", FAMILIES)
def test_generation_loop_pattern(tmp_path, jsons, family):
    tok = load(tmp_path, jsons, family)
    rng = random.Random(8)
    for _ in range(20):
        thought, reply, tail = (random_text(rng, 6).strip() for _ in range(3))
        text = f"<think>\n{thought}\n</think>\n\n{reply}\nUser: {tail}"
        ids = tok.encode(text, add_special_tokens=False)
        shown = tok.decode(ids)
        expected = split_thinking(shown[: shown.index("\nUser:")])
        # stopped by a stop string
        assert generation_loop(tok, [*ids, tok.eos_token_id], ["\nUser:", "\n\nUser:"]) == (*expected, "\nUser:")
        # stopped by the EOS id: everything held back comes out
        assert generation_loop(tok, [*ids, tok.eos_token_id, *ids], ["never"]) == (*split_thinking(shown), None)


def test_stream_rejects_bad_ids(tmp_path, jsons):
    tok = load(tmp_path, jsons, "byte_level")
    stream = StreamDecoder(tok)
    with pytest.raises(TokenizerError):
        stream.push(tok.vocab_size)
    with pytest.raises(TokenizerError, match="must be an integer"):
        stream.push("5")
    with pytest.raises(TokenizerError, match="must be an integer"):
        stream.push(5.0)
    ids = tok.encode("na\u00efve \u65e5\u672c\u8a9e", add_special_tokens=False)
    assert "".join(stream.push(np.int64(i)) for i in ids) + stream.flush() == "na\u00efve \u65e5\u672c\u8a9e"  # a sampler's NumPy ints
    assert tok.decode(np.array(ids, dtype=np.int32)) == "na\u00efve \u65e5\u672c\u8a9e"
    with pytest.raises(TokenizerError, match="must be integers"):
        tok.decode([1.0])


def test_byte_token_ids(tmp_path, jsons):
    assert load(tmp_path, jsons, "byte_level").byte_token_ids == frozenset()
    tok = load(tmp_path, jsons, "legacy")
    assert tok.byte_token_ids == frozenset(range(3, 259))
    assert tok.id_to_token(3 + 0xE9) == "<0xE9>"


def test_vocab_size_and_config_copy(tmp_path, jsons):
    tok = load(tmp_path, jsons, "byte_level")
    assert tok.vocab_size == len(json.loads(jsons["byte_level"])["model"]["vocab"]) + 2  # + <think>, </think>
    assert tok.config["eos_token"] == "<|endoftext|>"

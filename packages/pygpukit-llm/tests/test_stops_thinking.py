"""Stop strings over streamed text and <think> blocks, checked against
whole-text references on random texts cut into random chunks."""

from __future__ import annotations

import itertools
import random

import pytest

from pygpukit_llm import StopStrings, ThinkingStream, TokenizerError, split_thinking


def chunks(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 8)))) if len(text) > 1 else []
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def first_stop(text: str, stops: list[str]) -> tuple[str, str | None]:
    """Reference: scan the text as it grows; the first stop string to complete (the longest of those completing together)."""
    for end in range(1, len(text) + 1):
        done = [s for s in stops if text[:end].endswith(s)]
        if done:
            s = max(done, key=len)
            return text[: end - len(s)], s
    return text, None


def test_stop_held_back_across_chunks():
    stops = StopStrings(["</s>", "\nUser:"])
    assert stops.feed("Hello <") == "Hello "
    assert stops.feed("/") == ""
    assert stops.feed("b") == "</b"  # no longer the start of a stop string
    assert stops.feed(" and \nUs") == " and "
    assert not stops.stopped
    assert stops.feed("er: more") == ""
    assert stops.stopped and stops.matched == "\nUser:"
    assert stops.feed("ignored") == "" and stops.flush() == ""


def test_stop_flush_releases_the_tail():
    stops = StopStrings(["STOP"])
    assert stops.feed("ends with ST") == "ends with "
    assert stops.flush() == "ST" and not stops.stopped and stops.matched is None


@pytest.mark.parametrize("seed", range(4))
def test_stops_on_random_chunkings_match_whole_text(seed):
    rng = random.Random(seed)
    alphabet = "ab</s>\u00e9\U0001f600 \n"
    stop_sets = [["</s>"], ["ab", "bab", "\U0001f600a"], ["aa", "a"], ["<", "</s>"], ["abc", "c"], ["\u00e9\U0001f600\u00e9", "\n\n"]]
    for _ in range(250):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        stops = rng.choice(stop_sets)
        expected, matched = first_stop(text, stops)
        m, emitted, fed = StopStrings(stops), "", ""
        for c in chunks(text, rng):
            emitted += m.feed(c)
            fed += c
            if m.stopped:
                break
            held = fed[len(emitted) :]
            assert fed.startswith(emitted)
            # only a tail that may still become a stop string is held back
            assert held == "" or any(s.startswith(held) and s != held for s in stops)
        emitted += m.flush()
        assert emitted == expected and m.matched == matched and m.stopped == (matched is not None)


def test_stop_strings_validated():
    with pytest.raises(TokenizerError, match="not one string"):
        StopStrings("</s>")
    with pytest.raises(TokenizerError, match="non-empty"):
        StopStrings(["a", ""])
    with pytest.raises(TokenizerError, match="must be a str"):
        StopStrings(["a"]).feed(3)


@pytest.mark.parametrize(
    "text, start_inside, expected",
    [
        ("<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.", False, ("Let me see: 2+2.", "It is 4.")),
        ("  <think>a < b</think>b", False, ("a < b", "b")),
        ("<think></think>\n\nAnswer.\n", False, ("", "Answer.\n")),
        ("reasoning already open\n</think>\n\nAnswer", False, ("reasoning already open", "Answer")),
        ("still thinking", True, ("still thinking", "")),
        ("<think>\nnever closed ", False, ("never closed", "")),
        ("Plain answer, no block.", False, ("", "Plain answer, no block.")),
        ("An answer that mentions <think> later", False, ("", "An answer that mentions <think> later")),
        ("\n<think>x</think>y</think>z", False, ("x", "y</think>z")),
    ],
)
def test_split_thinking(text, start_inside, expected):
    assert split_thinking(text, start_inside=start_inside) == expected


def stream_channels(text: str, start_inside: bool, rng: random.Random) -> tuple[str, str]:
    s = ThinkingStream(start_inside=start_inside)
    got = {"thinking": "", "reply": ""}
    for c in chunks(text, rng):
        for channel, piece in s.feed(c):
            assert piece
            got[channel] += piece
    for channel, piece in s.flush():
        got[channel] += piece
    return got["thinking"], got["reply"]


def test_thinking_stream_matches_split_on_random_chunkings():
    rng = random.Random(5)
    parts = ["<think>", "</think>", "<", "</", "</th", "<thi", " ", "\n", "a", "bc", "\u00e9", "\U0001f600", "think>"]
    cases = [
        ("<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.", False),
        ("<think>a < b </thinking> c</think>  reply with <think> inside", False),
        ("in the block \n</think>\nreply", True),
        ("<think>\n unclosed <", False),
        ("  plain  ", False),
        ("<thin", False),
    ]
    for _ in range(300):
        start = "<think>" if rng.random() < 0.5 else ""
        cases.append((start + "".join(rng.choice(parts) for _ in range(rng.randint(0, 14))), rng.random() < 0.3))
    for text, inside in cases:
        for _ in range(3):
            expected = split_thinking(text, start_inside=inside)
            if not inside and not text.lstrip().startswith("<think>") and "</think>" in text:
                expected = ("", text)  # a stream cannot wait for a closing tag that may never come
            assert stream_channels(text, inside, rng) == expected, text


def test_thinking_streams_before_the_block_closes():
    s = ThinkingStream()
    assert s.feed("<thi") == []
    assert s.feed("nk>\nStep one") == [("thinking", "Step one")]
    assert s.feed(", step two </thi") == [("thinking", ", step two")]
    assert s.feed("nk>\n\nDone") == [("reply", "Done")]
    assert s.feed(" now.") == [("reply", " now.")]
    assert s.flush() == []
    opened = ThinkingStream(start_inside=True)
    assert opened.feed("\nhmm") == [("thinking", "hmm")]
    assert opened.feed("</think>ok") == [("reply", "ok")]


def test_thinking_input_validated():
    with pytest.raises(TokenizerError, match="text must be a str"):
        split_thinking(b"<think>")
    with pytest.raises(TokenizerError, match="chunk must be a str"):
        ThinkingStream().feed(None)
    with pytest.raises(TokenizerError, match="non-empty strings"):
        ThinkingStream(open_tag="")


def test_other_tags():
    tags = {"open_tag": "<reasoning>", "close_tag": "</reasoning>"}
    text = "<reasoning> a <think> b </reasoning>\nreply"
    assert split_thinking(text, **tags) == ("a <think> b", "reply")
    s = ThinkingStream(**tags)
    got = [p for c in ("<reas", "oning> a <think> b </reas", "oning>\nreply") for p in s.feed(c)] + s.flush()
    assert got == [("thinking", "a <think> b"), ("reply", "reply")]

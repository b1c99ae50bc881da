"""Text out of a token stream: incremental detokenizing that never splits a
UTF-8 character, and stop strings matched across chunk boundaries.

A generation loop::

    stream = StreamDecoder(tok)
    stops = StopStrings(["\\nUser:"])
    for each new id:
        if id in tok.stop_ids:
            break
        print(stops.feed(stream.push(id)), end="")
        if stops.stopped:
            break
    if not stops.stopped:  # what both still hold back
        print(stops.feed(stream.flush()) + stops.flush(), end="")
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .tokenizer import TokenizerError

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

__all__ = ["StopStrings", "StreamDecoder"]


class StreamDecoder:
    """Decode one token id at a time; ``push`` returns only newly complete text.

    The concatenation of everything ``push`` and ``flush`` return is exactly
    ``tokenizer.decode(all ids, skip_special_tokens)``. Each step decodes a small
    window, not the whole sequence (the prefix/read offsets of the incremental
    detokenizers of text-generation-inference and vLLM): the window starts at
    tokens already emitted, so a decoder that treats the first token specially
    (Metaspace / SentencePiece strip the leading space of the first word) treats
    both decodes alike, and the text they differ by is the new text. Text that
    ends in U+FFFD is held back: a multi-byte character is incomplete (byte-level
    BPE or ``<0xNN>`` byte tokens). A byte-fallback tokenizer's run of ``<0xNN>``
    tokens is held until it ends, because its decoder turns a whole run into
    U+FFFDs when any byte in it is invalid.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._ids: list[int] = []
        self._prefix = 0  # start of the window: tokens already emitted, decoded again for context
        self._read = 0  # tokens before this are emitted
        self._byte_ids = tokenizer.byte_token_ids
        self._in_byte_run = False
        self._vocab_size = tokenizer.vocab_size

    def _decode(self, start: int, stop: int | None = None) -> str:
        return self.tokenizer.backend.decode(self._ids[start:stop], skip_special_tokens=self.skip_special_tokens)

    def push(self, token_id: int) -> str:
        """Add one generated id (an int or a NumPy integer); return the text it completes
        ("" while a character is incomplete)."""
        try:
            token_id = operator.index(token_id)
        except TypeError:
            raise TokenizerError(f"token id must be an integer, got {type(token_id).__name__}") from None
        if not 0 <= token_id < self._vocab_size:
            raise TokenizerError(f"token id {token_id} is outside the vocabulary (size {self._vocab_size})")
        self._ids.append(token_id)
        if token_id in self._byte_ids:
            self._in_byte_run = True
        elif not (self.skip_special_tokens and token_id in self.tokenizer.special_ids):
            self._in_byte_run = False
        if self._in_byte_run:
            return ""
        return self._advance()

    def _advance(self) -> str:
        before = self._decode(self._prefix, self._read)
        text = self._decode(self._prefix)
        if len(text) <= len(before) or text.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return text[len(before) :]

    def flush(self) -> str:
        """The text still held back at the end of generation (an incomplete character
        comes out as U+FFFD, as a whole decode writes it). Ids pushed after a flush
        start a new text, decoded as if they came first."""
        before = self._decode(self._prefix, self._read)
        text = self._decode(self._prefix)
        self._prefix = self._read = len(self._ids)
        self._in_byte_run = False
        return text[len(before) :]

    @property
    def ids(self) -> list[int]:
        """Every id pushed so far."""
        return list(self._ids)


class StopStrings:
    """Find stop strings in streamed text.

    ``feed(chunk)`` returns the text that is safe to show now: it holds back the
    longest tail that could still become a stop string. When a stop string
    completes, ``feed`` returns the text before it, ``stopped`` becomes True and
    ``matched`` names the stop string; the stop string and anything after it are
    dropped. ``flush()`` returns the held-back tail at the end of generation.
    The stop string that completes first wins (of two ending at the same place,
    the longer), so the result does not depend on how the text was chunked.
    """

    def __init__(self, stops: Iterable[str]) -> None:
        if isinstance(stops, str):
            raise TokenizerError("stops must be a list of strings, not one string")
        self.stops = sorted(set(stops), key=len, reverse=True)
        if not all(isinstance(s, str) and s for s in self.stops):
            raise TokenizerError(f"stop strings must be non-empty strings, got {list(stops)!r}")
        self._held = ""
        self.stopped = False
        self.matched: str | None = None

    def feed(self, chunk: str) -> str:
        if not isinstance(chunk, str):
            raise TokenizerError(f"chunk must be a str, got {type(chunk).__name__}")
        if self.stopped:
            return ""
        # a stop string that crosses the boundary starts inside the held tail
        text = self._held + chunk
        best_end, start = -1, 0
        for s in self.stops:  # longest first: a tie keeps the longer one
            at = text.find(s)
            if at >= 0 and (best_end < 0 or at + len(s) < best_end):
                best_end, start, self.matched = at + len(s), at, s
        if best_end >= 0:
            self.stopped, self._held = True, ""
            return text[:start]
        keep = self._partial_tail(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def _partial_tail(self, text: str) -> int:
        """Length of the longest tail of ``text`` that is a proper prefix of some stop string."""
        longest = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(text)), longest, -1):
                if text.endswith(s[:n]):
                    longest = n
                    break
        return longest

    def flush(self) -> str:
        """Held-back text at the end of generation (nothing once a stop string matched)."""
        out, self._held = ("" if self.stopped else self._held), ""
        return out

"""Reasoning blocks of Qwen3 / DeepSeek-R1 style output: ``<think>...</think>``
before the reply, split off whole or routed chunk by chunk while streaming.

The block is recognized only at the start of the output (after whitespace).
Some templates open it in the prompt (the generation prompt ends with
``<think>\\n``); then the output starts inside the block: pass
``start_inside=True`` (``split_thinking`` also notices a ``</think>`` without
an opening tag; an opening tag the model repeats anyway is dropped). The
thinking text is stripped of surrounding whitespace, the reply of the
whitespace after ``</think>``. An unclosed block is all thinking.

In a generation loop: ``start_inside = prompt.rstrip().endswith("<think>")``.
"""

from __future__ import annotations

from .tokenizer import TokenizerError

__all__ = ["ThinkingStream", "split_thinking"]

OPEN, CLOSE = "<think>", "</think>"


def split_thinking(text: str, start_inside: bool = False, open_tag: str = OPEN, close_tag: str = CLOSE) -> tuple[str, str]:
    """``(thinking, reply)`` of a whole output; ``thinking`` is "" when there is no block."""
    _check_str(text, "text")
    _check_tags(open_tag, close_tag)
    body = text.lstrip()
    if body.startswith(open_tag):
        body = body[len(open_tag) :]
    elif not start_inside and close_tag not in text:
        return "", text
    else:
        body = text
    thinking, found, reply = body.partition(close_tag)
    return thinking.strip(), reply.lstrip() if found else ""


def _check_str(value: object, name: str) -> None:
    if not isinstance(value, str):
        raise TokenizerError(f"{name} must be a str, got {type(value).__name__}")


def _check_tags(open_tag: object, close_tag: object) -> None:
    if not (isinstance(open_tag, str) and open_tag and isinstance(close_tag, str) and close_tag):
        raise TokenizerError(f"open_tag and close_tag must be non-empty strings, got {open_tag!r} and {close_tag!r}")


def _partial_tail(text: str, tag: str) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class ThinkingStream:
    """Route streamed text to "thinking" or "reply" as it comes, tags split across chunks included.

    ``feed(chunk)`` and ``flush()`` return a list of ``(channel, text)`` pairs
    (channel "thinking" or "reply", text never empty). Their concatenation per
    channel equals ``split_thinking`` of the whole text, except that a block
    closed without an opening tag is only recognized with ``start_inside=True``:
    a stream cannot wait for a ``</think>`` that may never come.
    """

    def __init__(self, start_inside: bool = False, open_tag: str = OPEN, close_tag: str = CLOSE) -> None:
        _check_tags(open_tag, close_tag)
        self.open_tag, self.close_tag = open_tag, close_tag
        # start: before any non-space text; think_lead: inside the block, before its text;
        # think: inside; reply_lead: after </think>, before the reply's text; reply
        self.state = "think_lead" if start_inside else "start"
        self._buf = ""
        self._may_open = start_inside  # an opening tag repeated at the start of a block opened in the prompt

    def feed(self, chunk: str) -> list[tuple[str, str]]:
        _check_str(chunk, "chunk")
        self._buf += chunk
        out: list[tuple[str, str]] = []
        while self._step(out):
            pass
        return out

    def _step(self, out: list[tuple[str, str]]) -> bool:
        """Consume what can be decided from the buffer; True when the state changed."""
        buf = self._buf
        if self.state == "start":
            body = buf.lstrip()
            if body.startswith(self.open_tag):
                self._buf, self.state = body[len(self.open_tag) :], "think_lead"
                return True
            if body and not self.open_tag.startswith(body):
                self._buf, self.state = "", "reply"
                out.append(("reply", buf))
            return False
        if self.state in ("think_lead", "reply_lead"):
            body = buf.lstrip()
            self._buf = body
            if self._may_open and body:
                if body.startswith(self.open_tag):
                    self._buf, self._may_open = body[len(self.open_tag) :], False
                    return True
                if self.open_tag.startswith(body):
                    return False
                self._may_open = False
            if body:
                self.state = "think" if self.state == "think_lead" else "reply"
                return True
            return False
        if self.state == "think":
            at = buf.find(self.close_tag)
            if at >= 0:
                text = buf[:at].rstrip()
                if text:
                    out.append(("thinking", text))
                self._buf, self.state = buf[at + len(self.close_tag) :], "reply_lead"
                return True
            # hold a tail that may be the start of </think>, and trailing space that may precede it
            keep = _partial_tail(buf, self.close_tag)
            ready = buf[: len(buf) - keep].rstrip()
            if ready:
                out.append(("thinking", ready))
            self._buf = buf[len(ready) :]
            return False
        if buf:  # reply
            out.append(("reply", buf))
            self._buf = ""
        return False

    def flush(self) -> list[tuple[str, str]]:
        """What is held back at the end of the output."""
        buf, self._buf = self._buf, ""
        if self.state in ("start", "reply") and buf:
            return [("reply", buf)]
        if self.state in ("think_lead", "think") and buf.strip():
            return [("thinking", buf.rstrip())]
        return []

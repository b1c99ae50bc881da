"""A model directory's tokenizer: tokenizer.json through the ``tokenizers``
library, plus the special tokens, BOS/EOS rules, stop ids and chat template
that Hugging Face keeps in the files around it.

Use from a generation loop::

    tok = Tokenizer.load(model_dir)
    ids = tok.apply_chat_template(messages, tokenize=True)  # the template writes BOS itself
    stream = StreamDecoder(tok)                             # pygpukit_llm.streaming
    for each new id: if id in tok.stop_ids: break; print(stream.push(id), end="")
    print(stream.flush())

A rendered chat prompt is encoded with ``add_special_tokens=False`` (that is
what ``apply_chat_template(tokenize=True)`` does, as in transformers): the
templates write the BOS token themselves, and EOS must not follow a
generation prompt. ``encode(prompt)`` with the default
``add_special_tokens=True`` still never doubles the BOS token, but it appends
EOS where the tokenizer adds one (``add_eos_token``). A plain prompt for a base
model (no template) is ``tok.encode(text)``: BOS is added where the model wants
one. Ids at or above ``tok.vocab_size`` (the padded rows of a model's
embedding) decode to nothing; mask those logits before sampling.
"""

from __future__ import annotations

import json
import operator
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tokenizers

import pygpukit as gp

__all__ = ["Tokenizer", "TokenizerError"]

_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


class TokenizerError(gp.PyGPUkitError, ValueError):
    """tokenizer.json or one of the files beside it is missing or wrong, or bad input to the tokenizer."""


def _read_json(path: Path, required: bool = False) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if required:
            raise TokenizerError(f"{path} is missing") from None
        return None
    except (OSError, ValueError) as exc:
        raise TokenizerError(f"{path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _token_content(value: Any, where: str) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise TokenizerError(f"{where}: expected a string or {{'content': ...}}, got {value!r}")


def _id_list(value: Any, where: str) -> list[int]:
    """``eos_token_id`` of config.json / generation_config.json: absent, an int or a list of ints."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    for v in items:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TokenizerError(f"{where}: expected a non-negative int or a list of them, got {value!r}")
    return list(items)


class Tokenizer:
    """Encode, decode and chat-template rendering for one model directory; see the module docstring."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        tokenizer_config: dict[str, Any] | None = None,
        special_tokens_map: dict[str, Any] | None = None,
        model_config: dict[str, Any] | None = None,
        generation_config: dict[str, Any] | None = None,
        chat_templates: dict[str, str] | None = None,
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        # as transformers does per call: a tokenizer.json may carry padding or truncation settings
        backend.no_padding()
        backend.no_truncation()
        self.backend = backend
        self.directory = None if directory is None else Path(directory)
        self.config = dict(tokenizer_config or {})
        self.chat_templates = dict(chat_templates or {})
        where = str(self.directory / "tokenizer_config.json") if self.directory else "tokenizer_config.json"
        stmap = special_tokens_map or {}

        # tokenizer_config.json wins over special_tokens_map.json, as in transformers
        def token(name: str) -> str | None:
            if self.config.get(name) is not None:
                return _token_content(self.config[name], f"{where}: {name}")
            return _token_content(stmap.get(name), f"special_tokens_map.json: {name}")

        self.bos_token, self.eos_token = token("bos_token"), token("eos_token")
        self.pad_token, self.unk_token = token("pad_token"), token("unk_token")
        self.bos_token_id = self._required_id(self.bos_token, "bos_token", where)
        tokenizer_eos = self._required_id(self.eos_token, "eos_token", where)

        stops: list[int] = [] if tokenizer_eos is None else [tokenizer_eos]
        for name, cfg in (("generation_config.json", generation_config), ("config.json", model_config)):
            stops += _id_list((cfg or {}).get("eos_token_id"), f"{name}: eos_token_id")
        # the first one is the tokenizer's own EOS where it has one, else generation_config's
        self.eos_token_id: int | None = stops[0] if stops else None
        self.eos_token_ids: frozenset[int] = frozenset(stops)

        pad = None if self.pad_token is None else backend.token_to_id(self.pad_token)
        if pad is None:
            for cfg in (generation_config, model_config):
                ids = _id_list((cfg or {}).get("pad_token_id"), "pad_token_id")
                if ids:
                    pad = ids[0]
                    break
        self.pad_token_id: int | None = pad if pad is not None else self.eos_token_id

        # the post-processor of tokenizer.json may add BOS/EOS itself; the config flags, when set, decide
        with_special = backend.encode("a", add_special_tokens=True).ids
        plain = backend.encode("a", add_special_tokens=False).ids
        self._post_bos = self.bos_token_id is not None and with_special[:1] == [self.bos_token_id] and plain[:1] != [self.bos_token_id]
        self._post_eos = tokenizer_eos is not None and with_special[-1:] == [tokenizer_eos] and plain[-1:] != [tokenizer_eos]
        self._tokenizer_eos = tokenizer_eos
        self.add_bos_token = bool(self.config.get("add_bos_token", self._post_bos)) and self.bos_token_id is not None
        self.add_eos_token = bool(self.config.get("add_eos_token", self._post_eos)) and tokenizer_eos is not None

        added = backend.get_added_tokens_decoder()
        self.special_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        self._id_limit = max(backend.get_vocab_size(with_added_tokens=True), max(added, default=-1) + 1)
        # SentencePiece-style models spell unknown characters as <0xNN> byte tokens
        byte_fallback = bool(getattr(backend.model, "byte_fallback", False))
        vocab = backend.get_vocab(with_added_tokens=False) if byte_fallback else {}
        self.byte_token_ids: frozenset[int] = frozenset(i for t, i in vocab.items() if _BYTE_TOKEN.fullmatch(t))

    def _required_id(self, token: str | None, name: str, where: str) -> int | None:
        if token is None:
            return None
        tid = self.backend.token_to_id(token)
        if tid is None:
            raise TokenizerError(f"{where}: {name} {token!r} is not in the vocabulary of tokenizer.json")
        return tid

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Tokenizer:
        """Read tokenizer.json (required), tokenizer_config.json, special_tokens_map.json,
        config.json, generation_config.json and chat_template.jinja / chat_template.json
        (all optional) from a Hugging Face model directory."""
        d = Path(directory)
        if not d.is_dir():
            raise TokenizerError(f"{d} is not a directory")
        path = d / "tokenizer.json"
        if not path.is_file():
            hint = ""
            if (d / "tokenizer.model").is_file():
                hint = "; tokenizer.model (SentencePiece) alone is not read: transformers writes tokenizer.json with AutoTokenizer.from_pretrained(dir).save_pretrained(dir)"
            raise TokenizerError(f"{path} is missing: a model directory needs tokenizer.json (the 'fast' tokenizer format){hint}")
        try:
            backend = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust library raises plain Exception
            raise TokenizerError(f"{path}: the tokenizers library cannot read it ({exc})") from None
        from .chat import find_chat_templates

        config = _read_json(d / "tokenizer_config.json")
        return cls(
            backend,
            tokenizer_config=config,
            special_tokens_map=_read_json(d / "special_tokens_map.json"),
            model_config=_read_json(d / "config.json"),
            generation_config=_read_json(d / "generation_config.json"),
            chat_templates=find_chat_templates(d, config),
            directory=d,
        )

    @property
    def stop_ids(self) -> frozenset[int]:
        """Token ids that end generation: the union of the EOS ids of tokenizer_config.json,
        generation_config.json and config.json (same as ``eos_token_ids``)."""
        return self.eos_token_ids

    @property
    def vocab_size(self) -> int:
        """One past the largest token id, added tokens included. config.json's vocab_size (the
        model's logits) may be larger: ids in between decode to nothing, so a sampler should
        mask ``logits[vocab_size:]``; ``decode`` and ``StreamDecoder.push`` reject them."""
        return self._id_limit

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend.id_to_token(token_id)

    def _specials(self, ids: list[int]) -> list[int]:
        """Make BOS/EOS follow add_bos_token/add_eos_token whatever the post-processor did, and never double them."""
        bos, eos = self.bos_token_id, self._tokenizer_eos
        if self._post_bos and not self.add_bos_token and ids[:1] == [bos]:
            ids = ids[1:]
        elif self.add_bos_token and not self._post_bos:
            ids = [bos, *ids]
        if self.add_bos_token and ids[:2] == [bos, bos]:  # the text began with the BOS token itself
            ids = ids[1:]
        if self._post_eos and not self.add_eos_token and ids[-1:] == [eos]:
            ids = ids[:-1]
        elif self.add_eos_token and not self._post_eos:
            ids = [*ids, eos]
        if self.add_eos_token and len(ids) >= 2 and ids[-2:] == [eos, eos]:
            ids = ids[:-1]
        return ids

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``. With ``add_special_tokens``, BOS/EOS are added as
        tokenizer_config.json's add_bos_token/add_eos_token say (or, where they are
        not set, as tokenizer.json's post-processor does), at most once each.
        Special tokens written in the text (``<|im_start|>``) are always recognized."""
        if not isinstance(text, str):
            raise TokenizerError(f"text must be a str, got {type(text).__name__}")
        ids = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        return self._specials(ids) if add_special_tokens else ids

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[list[int]]:
        """``encode`` of each text (the library encodes them in parallel), no padding."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TokenizerError("texts must be a list of str")
        encs = self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return [self._specials(e.ids) if add_special_tokens else e.ids for e in encs]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` as tokenizer.json's decoder writes it (no clean_up_tokenization_spaces:
        it would make a streamed text differ from the whole one). Ids outside the vocabulary raise."""
        try:
            ids = [operator.index(i) for i in ids]
        except TypeError:
            raise TokenizerError("token ids must be integers") from None
        n = self.vocab_size
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            raise TokenizerError(f"token ids {bad[:5]} are outside the vocabulary (size {n})")
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        *,
        chat_template: str | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        documents: Sequence[dict[str, Any]] | None = None,
        enable_thinking: bool | None = None,
        continue_final_message: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        """Render ``messages`` (a list of {"role": str, "content": str}) with the model's
        chat template, as transformers does (sandboxed jinja2, trim_blocks, lstrip_blocks,
        ``raise_exception``, ``strftime_now``, a ``tojson`` that keeps non-ASCII).

        ``add_generation_prompt`` appends the assistant's turn header. ``chat_template``
        names one of the directory's templates ("default", "tool_use", ...) or is a
        template string itself. ``enable_thinking`` is passed only when given (Qwen3
        templates test ``enable_thinking is defined``); other keyword arguments become
        template variables. ``continue_final_message`` leaves the last message open for
        the model to continue (no end-of-turn after it). With ``tokenize`` the ids are
        returned, encoded with ``add_special_tokens=False`` since the template writes BOS.
        """
        from .chat import render_chat_template, select_template

        template = select_template(self.chat_templates, chat_template, tools, self.directory)
        specials = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "pad_token": self.pad_token,
            "unk_token": self.unk_token,
        }
        variables = {k: v for k, v in specials.items() if v is not None}
        if enable_thinking is not None:
            variables["enable_thinking"] = enable_thinking
        variables.update(kwargs)
        text = render_chat_template(
            template,
            messages,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
            documents=documents,
            continue_final_message=continue_final_message,
            **variables,
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text

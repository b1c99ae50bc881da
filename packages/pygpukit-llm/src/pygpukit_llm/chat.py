"""Chat templates: where a model directory keeps them, and rendering them the
way transformers does, so that a prompt is byte for byte what the model saw in
training.

The environment matches transformers': an immutable sandbox (a template cannot
mutate the messages or reach Python internals), ``trim_blocks`` and
``lstrip_blocks``, the loopcontrols extension (``{% break %}``), the globals
``raise_exception(message)`` and ``strftime_now(format)``, a ``tojson`` filter
that keeps non-ASCII characters and takes ``indent``, and a
``{% generation %}`` block (used by some templates to mark assistant text;
rendered as its body).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .tokenizer import TokenizerError, _read_json

__all__ = ["ChatTemplateError", "check_messages", "find_chat_templates", "render_chat_template", "select_template"]


class ChatTemplateError(TokenizerError):
    """No chat template, a template that does not compile, a template's own
    ``raise_exception``, or messages of the wrong shape."""


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class _GenerationBlock(Extension):
    """``{% generation %}...{% endgeneration %}``: transformers tracks these spans
    for training masks; for rendering a prompt only the body matters."""

    tags = {"generation"}  # noqa: RUF012  (jinja2 reads a class attribute)

    def parse(self, parser: Any) -> Any:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


@functools.lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@functools.lru_cache(maxsize=32)
def _compile(template: str) -> jinja2.Template:
    try:
        return _environment().from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"the chat template does not compile: line {exc.lineno}: {exc.message}") from None


def _templates_from(value: Any, where: str) -> dict[str, str]:
    """A ``chat_template`` value: one template string, or a list of {"name", "template"}."""
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list):
        out: dict[str, str] = {}
        for item in value:
            if not (isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("template"), str)):
                raise ChatTemplateError(f"{where}: chat_template list items must be {{'name': str, 'template': str}}, got {item!r}")
            out[item["name"]] = item["template"]
        return out
    raise ChatTemplateError(f"{where}: chat_template must be a string or a list of {{'name', 'template'}}, got {type(value).__name__}")


def find_chat_templates(directory: str | Path, tokenizer_config: dict[str, Any] | None = None) -> dict[str, str]:
    """The directory's chat templates by name. Later sources win, as in recent transformers:
    tokenizer_config.json's ``chat_template``, then chat_template.json, then a
    chat_template.jinja file (the default) and additional_chat_templates/NAME.jinja."""
    d = Path(directory)
    found: dict[str, str] = {}
    if tokenizer_config and tokenizer_config.get("chat_template") is not None:
        found.update(_templates_from(tokenizer_config["chat_template"], str(d / "tokenizer_config.json")))
    processor = _read_json(d / "chat_template.json")
    if processor and processor.get("chat_template") is not None:
        found.update(_templates_from(processor["chat_template"], str(d / "chat_template.json")))
    jinja_file = d / "chat_template.jinja"
    if jinja_file.is_file():
        found["default"] = jinja_file.read_text(encoding="utf-8")
    extra = d / "additional_chat_templates"
    if extra.is_dir():
        for f in sorted(extra.glob("*.jinja")):
            found[f.stem] = f.read_text(encoding="utf-8")
    return found


def select_template(templates: dict[str, str], chat_template: str | None, tools: Any = None, directory: str | Path | None = None) -> str:
    """The template to render: ``chat_template`` by name or as a template string, else
    "tool_use" when tools are given and the model has one, else "default"."""
    if chat_template is not None:
        if chat_template in templates:
            return templates[chat_template]
        if "{" not in chat_template:  # a name, not a template
            raise ChatTemplateError(f"no chat template named {chat_template!r}; this model has: {', '.join(templates) or 'none'}")
        return chat_template
    if not templates:
        where = f"model directory {directory}" if directory is not None else "this tokenizer"
        raise ChatTemplateError(
            f"{where} has no chat template (no chat_template in tokenizer_config.json, no chat_template.jinja); "
            "pass chat_template=... or use a chat/instruct model"
        )
    if tools is not None and "tool_use" in templates:
        return templates["tool_use"]
    if "default" in templates:
        return templates["default"]
    raise ChatTemplateError(f"no default chat template; pass chat_template= one of: {', '.join(templates)}")


def check_messages(messages: Any) -> None:
    """Messages are a list of dicts with a non-empty str "role" and a str "content"
    (an assistant message that carries "tool_calls" may have no content)."""
    if isinstance(messages, (str, dict)) or not isinstance(messages, Sequence):
        raise ChatTemplateError(f"messages must be a list of {{'role': ..., 'content': ...}} dicts, got {type(messages).__name__}")
    if not messages:
        raise ChatTemplateError("messages is empty")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ChatTemplateError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise ChatTemplateError(f"messages[{i}] needs a non-empty str 'role', got {role!r}")
        content = m.get("content")
        if content is None and m.get("tool_calls"):
            continue
        if not isinstance(content, str):
            raise ChatTemplateError(f"messages[{i}] ({role}) needs a str 'content', got {type(content).__name__}")


def _cut_after_final_message(text: str, final: str) -> str:
    """Keep ``text`` up to the end of the last message's content: the model continues it."""
    stripped = final.strip()
    at = text.rfind(stripped)
    if not stripped or at < 0:
        raise ChatTemplateError("continue_final_message: the last message's content does not appear in the rendered template")
    end = at + (len(final) if text[at : at + len(final)] == final else len(stripped))
    return text[:end]


def render_chat_template(
    template: str,
    messages: Sequence[dict[str, Any]],
    add_generation_prompt: bool = True,
    tools: Sequence[dict[str, Any]] | None = None,
    documents: Sequence[dict[str, Any]] | None = None,
    continue_final_message: bool = False,
    **variables: Any,
) -> str:
    """Render a chat template string; ``variables`` (bos_token, eos_token,
    enable_thinking, anything else) are passed to the template as they are."""
    check_messages(messages)
    if continue_final_message and add_generation_prompt:
        raise ChatTemplateError("continue_final_message and add_generation_prompt exclude each other: pass add_generation_prompt=False")
    for name, value in (("tools", tools), ("documents", documents)):
        if value is not None and (isinstance(value, (str, dict)) or not all(isinstance(x, dict) for x in value)):
            raise ChatTemplateError(f"{name} must be a list of dicts (JSON schemas / documents)")
    compiled = _compile(template)
    try:
        text = compiled.render(
            messages=list(messages), tools=tools, documents=documents, add_generation_prompt=add_generation_prompt, **variables
        )
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"the chat template failed: {exc}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise ChatTemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from None
    if continue_final_message:
        text = _cut_after_final_message(text, messages[-1].get("content") or "")
    return text

"""``pygpukit chat`` and ``pygpukit generate`` (``pygpukit bench-llm`` is in bench.py).

Errors a user can cause (a missing directory or file, an unsupported
architecture, a corrupt checkpoint, a context longer than the model allows,
bad options) end the command with a one-line message and exit status 2, never
a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .config import ConfigError
from .generate import GenerationConfig
from .model import QUANTIZE, LoadError, load
from .safetensors import SafetensorsError
from .tokenizer import TokenizerError

USER_ERRORS = (ConfigError, LoadError, SafetensorsError, TokenizerError, FileNotFoundError, ValueError, TypeError)


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--model", required=True, help="a Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--quantize", choices=QUANTIZE, help="store the layers' projections weight-only quantized (needs pygpukit-gemm)")
    p.add_argument("--group-size", type=int, default=128, help="weights per quantization scale (default 128)")
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--temperature", type=float, default=0.7, help="0: greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-graph", action="store_true", help="decode eagerly instead of replaying a CUDA graph")
    return p


def _config(args: argparse.Namespace) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
        repetition_penalty=args.repetition_penalty, stop=tuple(args.stop), seed=args.seed, cuda_graph=not args.no_graph,
    )  # fmt: skip


def _fail(exc: BaseException) -> int:
    print(f"pygpukit: error: {exc}", file=sys.stderr)
    return 2


def _load(args: argparse.Namespace) -> Any:
    model = load(args.model, args.dtype, max_seq_len=args.max_new_tokens + 1, quantize=args.quantize, group_size=args.group_size)
    if model.tokenizer is None:
        raise TokenizerError(f"{args.model} has no tokenizer.json")
    return model


def _show(pieces: Any) -> str:
    """Write streamed (channel, text) pieces as they come: a thinking block to
    stderr, the reply to stdout; returns the reply."""
    reply = []
    for channel, text in pieces:
        if channel == "reply":
            reply.append(text)
        (sys.stdout if channel == "reply" else sys.stderr).write(text)
        sys.stdout.flush()
    return "".join(reply)


def generate_main(argv: list[str] | None = None) -> int:
    """``pygpukit generate --model DIR --prompt TEXT`` (or the prompt on stdin): the completion, streamed."""
    p = _parser("pygpukit generate", "Complete a prompt with a model directory, streaming the text.")
    p.add_argument("--prompt", help="the prompt (default: read stdin)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message in the model's chat template")
    args = p.parse_args(argv)
    try:
        cfg = _config(args)
        model = _load(args)
        prompt = sys.stdin.read() if args.prompt is None else args.prompt
        pieces = (
            model.stream_chat([{"role": "user", "content": prompt}], cfg)
            if args.chat
            else (("reply", t) for t in model.stream(prompt, cfg))
        )
        _show(pieces)
        sys.stdout.write("\n")
    except USER_ERRORS as exc:
        return _fail(exc)
    return 0


def chat_main(argv: list[str] | None = None) -> int:
    """``pygpukit chat --model DIR``: talk to a model. Lines starting with / are
    commands: /reset forgets the conversation, /exit (or end of input) leaves.
    A thinking model's <think> block goes to stderr, the reply to stdout."""
    p = _parser("pygpukit chat", "Chat with a model directory in the terminal.")
    p.add_argument("--system", help="a system prompt")
    p.add_argument("--no-thinking", action="store_true", help="ask a thinking model (Qwen3) not to think")
    args = p.parse_args(argv)
    try:
        cfg = _config(args)
        model = _load(args)
    except USER_ERRORS as exc:
        return _fail(exc)
    template = {"enable_thinking": False} if args.no_thinking else {}
    start = [{"role": "system", "content": args.system}] if args.system else []
    history = list(start)
    print(f"{model} - /reset to start over, /exit to leave", file=sys.stderr)
    while True:
        try:
            line = input("> ")
        except EOFError:
            return 0
        if line.strip() in ("/exit", "/quit"):
            return 0
        if line.strip() == "/reset":
            history = list(start)
            continue
        if not line.strip():
            continue
        history.append({"role": "user", "content": line})
        try:
            reply = _show(model.stream_chat(history, cfg, template=template))
        except USER_ERRORS as exc:  # e.g. the conversation outgrew the context: say so, keep the session
            history.pop()
            print(f"\npygpukit: {exc}", file=sys.stderr)
            continue
        print()
        history.append({"role": "assistant", "content": reply})

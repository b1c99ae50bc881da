"""``pygpukit serve --model DIR [model options] [--model DIR2 ...] [--host H] [--port P]``.

Options after a ``--model`` apply to that model: its name in the API, dtype,
scheduler terms (a partition of its own with ``--memory`` / ``--compute``, a
QoS tier) and engine limits. Bad options, a missing directory or a model that
does not load end the command with one line and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import pygpukit as gp

from .engine import Engine, EngineConfig

_GLOBAL = {"--host", "--port", "--log-level"}


def _global_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pygpukit serve", description="serve models over an OpenAI-compatible HTTP API",
                                epilog="model options (after each --model): " + " ".join(_model_parser().format_usage().split()[2:]))  # fmt: skip
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


def _model_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pygpukit serve --model", add_help=False)
    p.add_argument("--model", required=True, help="a Hugging Face model directory (config.json, *.safetensors, tokenizer.json)")
    p.add_argument("--name", help="the model's name in the API (default: the directory's name)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--qos", default="burstable", choices=list(gp.scheduler.QOS))
    p.add_argument(
        "--memory",
        help="a partition of its own with this quota, also the model's reservation (e.g. 20GiB; "
        "the KV cache and activations: the weights load before); needed by --qos guaranteed",
    )
    p.add_argument("--compute", type=float, default=1.0, help="the partition's compute share in (0, 1]")
    p.add_argument("--max-num-seqs", type=int, default=EngineConfig.max_num_seqs)
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--block-size", type=int, default=EngineConfig.block_size)
    p.add_argument("--num-blocks", type=int)
    p.add_argument("--max-num-batched-tokens", type=int, default=EngineConfig.max_num_batched_tokens)
    p.add_argument("--max-waiting", type=int, default=EngineConfig.max_waiting)
    p.add_argument("--no-prefix-caching", action="store_true")
    return p


def split_argv(argv: list[str]) -> tuple[list[str], list[list[str]]]:
    """(the global options, one list per ``--model`` with the options after it)."""
    glob: list[str] = []
    models: list[list[str]] = []
    it = iter(argv)
    for arg in it:
        key = arg.split("=", 1)[0]
        if key in _GLOBAL:
            glob.append(arg)
            if "=" not in arg:
                glob.append(next(it, ""))
        elif key == "--model":
            models.append([arg])
        elif models:
            models[-1].append(arg)
        else:
            glob.append(arg)
    return glob, models


def _load(opts: argparse.Namespace) -> tuple[str, Engine, dict[str, Any]]:
    from pygpukit_llm import load

    if opts.qos == "guaranteed" and opts.memory is None:
        raise ValueError("--qos guaranteed needs --memory: the model's reservation (and its partition's quota)")
    path = Path(opts.model)
    name = opts.name or path.name
    cfg = EngineConfig(max_num_seqs=opts.max_num_seqs, max_model_len=opts.max_model_len, block_size=opts.block_size, num_blocks=opts.num_blocks,
                       max_num_batched_tokens=opts.max_num_batched_tokens, max_waiting=opts.max_waiting,
                       prefix_caching=not opts.no_prefix_caching)  # fmt: skip
    model = load(path, opts.dtype, max_seq_len=cfg.max_model_len, progress=False)
    # a partition of its own (pygpukit top lists it), whose quota is also the task's reservation
    gp.scheduler.partition(f"serve:{name}", memory=opts.memory, compute=opts.compute)
    memory = None if opts.qos == "best_effort" else opts.memory
    return name, Engine(model, name, cfg), {"qos": opts.qos, "partition": f"serve:{name}", "memory": memory}


def main(argv: list[str]) -> int:
    from pygpukit_llm.cli import USER_ERRORS

    from .api import create_app, run

    glob, groups = split_argv(argv)
    g = _global_parser().parse_args(glob)
    if not groups:
        print("pygpukit serve: give at least one --model DIR", file=sys.stderr)
        return 2
    engines: dict[str, Engine] = {}
    try:
        for group in groups:
            opts = _model_parser().parse_args(group)
            name, engine, task = _load(opts)
            if name in engines:
                raise ValueError(f"two models are named {name!r}: give one of them --name")
            engine.start(**task)
            engines[name] = engine
    except (*USER_ERRORS, gp.PyGPUkitError) as exc:
        print(f"pygpukit serve: {exc}", file=sys.stderr)
        for engine in engines.values():
            engine.stop()
        return 2
    logging.basicConfig(level=g.log_level.upper())
    try:
        run(create_app(engines), g.host, g.port, g.log_level)
    finally:
        for engine in engines.values():
            engine.stop()
    return 0

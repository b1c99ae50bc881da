"""Two models in one process, each loaded and run in its own partition and
task, generating concurrently from asyncio: the same text as run alone, and
the scheduler charged each task in its partition."""

from __future__ import annotations

import asyncio
import itertools

from llm_testing import write_tiny_model
from tokenizer_testing import byte_level_json, model_dir

import pygpukit as gp
import pygpukit_llm

_names = itertools.count()


def _model(path, arch, seed):
    write_tiny_model(path, arch, seed=seed, hidden=128, heads=2, kv_heads=1, intermediate=192, vocab=512, layers=2)
    model_dir(path, byte_level_json(), tokenizer_config={"eos_token": "<|endoftext|>"})
    return path


def test_models_generate_concurrently_in_their_partitions(tmp_path):
    n = next(_names)
    parts = [gp.scheduler.partition(f"llm-a{n}", memory="1GiB"), gp.scheduler.partition(f"llm-b{n}", memory="1GiB")]
    dirs = [_model(tmp_path / "a", "llama", 1), _model(tmp_path / "b", "qwen2", 2)]
    models = []
    for part, d in zip(parts, dirs):
        with gp.task(f"load-{part.name}", partition=part, memory="64MiB"):
            models.append(pygpukit_llm.load(d, "float32"))
    kw = dict(max_new_tokens=24, greedy=True, ignore_eos=True)
    alone = [m.generate("concurrent models", **kw).text for m in models]
    seen: dict[str, int] = {}
    together: list[int] = []

    async def serve(model, part):
        async with gp.task(f"gen-{part.name}", qos="guaranteed", partition=part, memory="64MiB"):
            pieces = []
            async for text in model.astream("concurrent models", **kw):
                pieces.append(text)
                running = [t for t in gp.scheduler.snapshot().tasks if t.name.startswith("gen-") and t.state == "running"]
                together.append(len(running))
                for t in running:
                    seen[t.name] = max(seen.get(t.name, 0), t.used)
            return "".join(pieces)

    async def both():
        return await asyncio.gather(*(serve(m, p) for m, p in zip(models, parts)))

    assert asyncio.run(both()) == alone
    # both tasks ran at once, each charged for its own work in its partition
    assert max(together) == 2
    assert set(seen) == {f"gen-{p.name}" for p in parts} and all(v > 0 for v in seen.values())

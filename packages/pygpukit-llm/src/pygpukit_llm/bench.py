"""LLM throughput, measured side by side with transformers where it is installed.

``pygpukit bench-llm --model DIR`` (or ``--shape qwen2-0.5b`` / ``llama-1.1b``:
a random-weight checkpoint of that shape is written to a temporary directory
first) measures, in one run:

- load: ``load(DIR)`` from the page cache (the files are read once before);
- decode: greedy generation of ``new`` tokens after a random ``prompt``-token
  prompt at each batch size, end to end (prefill, every step, the token ids
  read back each step): tokens per second over the batch; and the steady
  decode rate (``decode_b*_steady_tok_s``): the ``new - 1`` tokens after the
  first over the time from the first token on the host to the last, which
  leaves out the prefill and the per-call setup (the time per output token);
- prefill: one forward of ``prefill`` tokens into an empty cache: ms per token;
- with ``--breakdown``: the device time of each op of a decode step, each
  timed alone at the step's shapes (``breakdown``), and the captured step's
  kernel count: where a step's time goes, and how much of it is the gaps
  between kernels (the replay time minus the ops' sum).

The bandwidth limit of batch-1 decode is the weight bytes over the device's
copy rate (each step reads every weight once; a quantized projection its
packed weight and scales: ``step_bytes``); it is reported beside the
figures. transformers runs the same checkpoint (eager generate, dynamic
cache, sdpa attention); with ``compile=True`` also with a static cache and
torch.compile.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import pygpukit as gp

from .generate import GenerationConfig, generate_ids
from .model import QUANTIZE, QuantizedLinear, load
from .safetensors import Checkpoint, save_file

__all__ = ["SHAPES", "breakdown", "checkpoint_nbytes", "main", "measure", "random_checkpoint", "step_bytes"]

# config.json of the reference shapes (Qwen2-0.5B and TinyLlama-1.1B), as transformers writes them
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2-0.5b": {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151643, "use_sliding_window": False,
    },
    "llama-1.1b": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False, "mlp_bias": False,
    },
    "llama-8b": {  # Llama-3-8B
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "hidden_act": "silu", "bos_token_id": 128000, "eos_token_id": 128001, "attention_bias": False, "mlp_bias": False,
    },
    "tiny-llama": {  # for the CPU backend
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 512,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
    },
}  # fmt: skip


def _tensor_shapes(cfg: dict[str, Any]) -> list[dict[str, tuple[int, ...]]]:
    """The checkpoint's tensor shapes: embeddings, final norm and head, then one group per layer."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or h // heads
    first: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not cfg["tie_word_embeddings"]:
        first["lm_head.weight"] = (v, h)
    groups = [first]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        layer = {p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,)}
        layer |= {p + "self_attn.q_proj.weight": (heads * d, h), p + "self_attn.k_proj.weight": (kv * d, h)}
        layer |= {p + "self_attn.v_proj.weight": (kv * d, h), p + "self_attn.o_proj.weight": (h, heads * d)}
        if cfg["model_type"] == "qwen2":
            layer |= {p + f"self_attn.{x}_proj.bias": (n_ * d,) for x, n_ in (("q", heads), ("k", kv), ("v", kv))}
        layer |= {p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h), p + "mlp.down_proj.weight": (h, i)}
        groups.append(layer)
    return groups


def checkpoint_nbytes(shape: str | dict[str, Any]) -> int:
    """The bfloat16 weights' bytes of ``shape`` (a key of SHAPES or a config.json dict)."""
    cfg = SHAPES[shape] if isinstance(shape, str) else shape
    return 2 * sum(math.prod(s) for group in _tensor_shapes(cfg) for s in group.values())


# a checkpoint above this is written one file per layer (host memory holds one layer at a time), and its
# large tensors are windows of one pool of normals: drawing billions would take minutes, and no timing
# depends on the values
_ONE_FILE_BYTES = 1 << 31
_POOL = 1 << 22


def random_checkpoint(directory: str | os.PathLike[str], shape: str | dict[str, Any], seed: int = 0, std: float = 0.02) -> Path:
    """A bfloat16 checkpoint of ``shape`` (a key of SHAPES, or a config.json dict
    of a Llama or Qwen2 model) with random weights (N(0, std); norms 1),
    written as config.json + model.safetensors (one file per layer when it is
    over 2 GiB)."""
    if isinstance(shape, str) and shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)} or a config dict, got {shape!r}")
    cfg = dict(SHAPES[shape] if isinstance(shape, str) else shape, torch_dtype="bfloat16")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    groups = _tensor_shapes(cfg)
    large = checkpoint_nbytes(cfg) > _ONE_FILE_BYTES
    pool = (rng.standard_normal(_POOL, dtype=np.float32) * std).astype(gp.bfloat16) if large else None
    files = [groups] if not large else [[g] for g in groups]
    for n, file_groups in enumerate(files):
        tensors = {}
        for name, shp in ((k, v) for g in file_groups for k, v in g.items()):
            if name.endswith("norm.weight"):
                tensors[name] = np.ones(shp, gp.bfloat16)
            elif pool is not None and math.prod(shp) > _POOL:
                tensors[name] = np.resize(np.roll(pool, int(rng.integers(_POOL))), shp)
            else:
                tensors[name] = (rng.standard_normal(shp, dtype=np.float32) * std).astype(gp.bfloat16)
        save_file(tensors, out / ("model.safetensors" if not large else f"model-{n:05d}-of-{len(files):05d}.safetensors"), {"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def copy_rate_gbs() -> float | None:
    """Device-to-device copy rate (GB/s, read + write) of a 1 GiB buffer; None on the CPU."""
    if gp.backend() != "cuda":
        return None
    a = gp.zeros((1 << 28,), gp.float32)
    times = []
    for _ in range(6):  # as the core benchmark's bandwidth suite measures it
        start, end = gp.Event(timing=True), gp.Event(timing=True)
        start.record()
        a.copy()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * a.nbytes / statistics.median(times[1:]) / 1e6


def _read_files(directory: Path) -> None:
    for f in directory.glob("*.safetensors"):
        with open(f, "rb") as fh:
            while fh.read(64 << 20):
                pass


def _timed(run: Callable[[], Any], reps: int, sync: Callable[[], None] = gp.synchronize) -> tuple[float, list[Any]]:
    """The median seconds of ``run()`` over ``reps`` calls (``sync`` around each), and what each call returned."""
    times, results = [], []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        results.append(run())
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), results


def decode_rates(model: Any, prompts: list[list[int]], cfg: GenerationConfig, reps: int) -> tuple[float, float | None]:
    """(tokens/s end to end, the steady rate) of ``generate_ids`` over ``reps``
    runs (medians); the steady rate counts the tokens after the first over the
    time from the first on the host to the last (None for a single token)."""

    def run() -> tuple[int, float]:
        n, first = 0, 0.0
        for _ in generate_ids(model, prompts, cfg):
            n += 1
            if n == 1:
                first = time.perf_counter()
        return n, time.perf_counter() - first

    total, runs = _timed(run, reps)
    n = runs[0][0]
    steady = statistics.median(t for _, t in runs)
    return len(prompts) * n / total, (len(prompts) * (n - 1) / steady if n > 1 and steady > 0 else None)


def step_bytes(model: Any, ckpt: Checkpoint) -> int:
    """The bytes a batch-1 decode step reads: every weight of the checkpoint
    once in the model's dtype, except that a quantized projection
    (``load(quantize=...)``) reads its packed weight and scales instead. An
    untied input embedding counts whole although a step reads only its
    tokens' rows (Llama-1.1B: 131 MB of 2.2 GB), as the figures always have."""
    size = model.dtype.itemsize
    total = sum(math.prod(ckpt.info(n).shape) for n in ckpt.keys()) * size
    for layer in model.layers:
        for block in (layer.attn, layer.mlp):
            for part in vars(block).values():
                if isinstance(part, QuantizedLinear):
                    qw = part.weight
                    total -= math.prod(qw.shape) * size - qw.q.nbytes - qw.scales.nbytes
    return total


def measure(
    directory: str | os.PathLike[str], dtype: str = "bfloat16", batches: Sequence[int] = (1, 8), prompt: int = 16, new: int = 128,
    prefill: int = 2048, reps: int = 3, cuda_graph: bool = True, quantize: str | None = None, per_op: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """pygpukit's figures for one checkpoint (see the module doc)."""
    path = Path(directory)
    _read_files(path)
    before = gp.memory.stats()["allocated_bytes"]
    t0 = time.perf_counter()
    model = load(path, dtype, progress=False, quantize=quantize)
    gp.synchronize()
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0, "device_bytes": gp.memory.stats()["allocated_bytes"] - before}
    out["weight_bytes"] = step_bytes(model, Checkpoint(path))
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    cfg = GenerationConfig(max_new_tokens=new, greedy=True, cuda_graph=cuda_graph)
    for b in batches:
        prompts = rng.integers(0, vocab, (b, prompt)).tolist()

        decode_rates(model, prompts, cfg, 1)  # compiles the kernels, plans the launches
        out[f"decode_b{b}_tok_s"], steady = decode_rates(model, prompts, cfg, reps)
        if steady is not None:
            out[f"decode_b{b}_steady_tok_s"] = steady
    if cuda_graph and gp.backend() == "cuda":
        out["decode_b1_replay_ms"], out["decode_b1_graph_nodes"] = _replay_ms(model, rng.integers(0, vocab, (1, prompt)).tolist(), cfg)
    if per_op:
        out["decode_breakdown_us"] = {f"b{b}": breakdown(model, b, prompt + new // 2) for b in batches}
    if prefill:
        ids = gp.from_numpy(rng.integers(0, vocab, (1, prefill)).astype(np.int32))

        def run() -> None:
            cache = model.new_cache(1, prefill)
            model.logits(model.hidden_states(ids, None, cache, check_ids=False)[:, -1])

        run()
        out["prefill_ms_per_token"] = _timed(run, reps)[0] * 1e3 / prefill
    return out


def _replay_ms(model: Any, prompts: list[list[int]], cfg: GenerationConfig, reps: int = 50) -> tuple[float | None, int | None]:
    """Device time of one replay of the captured decode step (the part of a
    step that is not sampling and reading the token back), median over reps,
    and the graph's node count (its kernels and copies)."""
    from .generate import _Decoder

    dec = _Decoder(model, [np.asarray(p, np.int32) for p in prompts], cfg)
    dec.decode(dec.sample(dec.prefill()))
    graph = dec.state.graph
    if graph is None:
        return None, None
    times = []
    for _ in range(reps):  # each replay appends one token, up to the cache's capacity
        start, end = gp.Event(timing=True), gp.Event(timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        dec.cache.advance(1)
        times.append(start.elapsed_time(end))
        if dec.cache.max_length() + 1 >= dec.cache.max_seq:
            break
    dec.finish(keep=True)  # whole: later calls reset the cache
    return statistics.median(times), graph.num_nodes


def breakdown(model: Any, batch: int = 1, context: int = 16, reps: int = 10) -> dict[str, float]:
    """Device microseconds of each op of a decode step of ``batch`` rows over a
    ``context``-token cache, each timed alone (back-to-back calls, median) at
    the step's shapes: the first layer's ops (``layer.*``; every layer has the
    same shapes), then ``final_norm``, ``lm_head`` and ``argmax``.
    ``step_estimate`` = layers x the layer's sum + the rest: the step with no
    gaps between its kernels."""
    from pygpukit.benchmark.harness import median_time_ms
    from pygpukit.benchmark.peers import gp_timer
    from pygpukit_nn import decode_attn

    cfg, layer = model.config, model.layers[0]
    attn, mlp = layer.attn, layer.mlp
    hq, hk, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> gp.GPUArray:
        return gp.from_numpy((rng.standard_normal(shape) * 0.1).astype(model.dtype))

    x, residual = rand(batch, 1, cfg.hidden_size), rand(batch, 1, cfg.hidden_size)
    h = layer.attn_norm.add(x, residual)[0]
    q, k, v = attn.split_qkv(attn.qkv(h))
    positions = gp.from_numpy(np.full((batch, 1), context, np.int32))
    filled = model.new_cache(batch, context + 1)  # the context, then the step's token
    filled.append(rand(batch, context + 1, hk, d), rand(batch, context + 1, hk, d), 0)
    room = min(4096, cfg.max_position_embeddings)
    growing = model.new_cache(batch, room)  # emptied when full: one fill per `room` appends

    def append() -> None:
        if growing.max_length() == room:
            growing.reset()
        growing.append(k, v, 0)

    out = decode_attn.decode_attention(q, filled, 0, attn.scale, attn.window).reshape(batch, 1, hq * d)
    ops: dict[str, Callable[[], Any]] = {
        "layer.attn_norm": lambda: layer.attn_norm.add(x, residual),
        "layer.qkv": lambda: attn.qkv(h),
    }
    if attn.q_norm is not None:
        ops["layer.qk_norm"] = lambda: (attn.q_norm(q), attn.k_norm(k))
    if attn.rope is not None:
        ops["layer.rope"] = lambda: attn.rope(q, k, positions)
    ops["layer.kv_append"] = append
    ops["layer.attention"] = lambda: decode_attn.decode_attention(q, filled, 0, attn.scale, attn.window)
    ops["layer.o"] = lambda: attn.o(out)
    ops["layer.mlp_norm"] = lambda: layer.mlp_norm.add(x, residual)
    if model.spec.moe:
        ops["layer.moe"] = lambda: mlp(h.reshape(batch, -1))
    else:
        up = mlp.up(h)
        activation = _activation(mlp)
        act = activation(up)
        ops["layer.up"] = lambda: mlp.up(h)
        ops["layer.act"] = lambda: activation(up)
        ops["layer.down"] = lambda: mlp.down(act)
    logits = model.logits(h)
    ops["final_norm"] = lambda: model.final_norm(h)
    ops["lm_head"] = lambda: model.logits(h)
    ops["argmax"] = lambda: gp.argmax(logits, axis=-1)
    result = {name: 1e3 * median_time_ms(run, gp_timer(), 2, reps, min_ms=0.5) for name, run in ops.items()}
    per_layer = sum(t for name, t in result.items() if name.startswith("layer."))
    result["step_estimate"] = cfg.num_layers * per_layer + sum(t for name, t in result.items() if not name.startswith("layer."))
    return result


def _activation(mlp: Any) -> Callable[[gp.GPUArray], gp.GPUArray]:
    """``act`` of an nn MLP's ``down(act(up(x)))``, by its public ``gated`` and ``activation``."""
    from pygpukit_nn import activations as a

    if mlp.gated:
        table = {"silu": a.swiglu, "gelu": a.geglu, "gelu_tanh": lambda u: a.geglu(u, None, "tanh")}
    else:
        table = {"silu": a.silu, "gelu": a.gelu, "gelu_tanh": lambda u: a.gelu(u, "tanh"), "relu": a.relu, "relu_squared": a.relu_squared}
    return table[mlp.activation]  # type: ignore[return-value]


def measure_transformers(
    directory: str | os.PathLike[str], batches: Sequence[int] = (1, 8), prompt: int = 16, new: int = 128, prefill: int = 2048,
    reps: int = 3, compile: bool = False,
) -> dict[str, Any] | None:  # fmt: skip
    """transformers' figures on the same checkpoint (bfloat16, sdpa), or None when it is not installed."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
    try:
        with torch.no_grad():
            return _transformers_figures(torch, model, batches, prompt, new, prefill, reps, compile)
    finally:
        del model
        torch.cuda.empty_cache()


def _transformers_figures(torch: Any, model: Any, batches: Sequence[int], prompt: int, new: int, prefill: int, reps: int,
                          compile: bool) -> dict[str, Any]:  # fmt: skip
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    out: dict[str, Any] = {}

    def timed(run: Callable[[], Any]) -> tuple[float, list[Any]]:
        run()
        return _timed(run, reps, torch.cuda.synchronize)

    def generate(ids: Any) -> float | None:
        """Generates; the seconds from the first new token on the host to the last
        (None unless the streamer saw the prompt and every new token)."""
        clock = _TokenClock()
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0, streamer=clock)
        return clock.times[-1] - clock.times[1] if len(clock.times) == new + 1 else None

    def decode(key: str) -> None:
        for b in batches:
            ids = torch.from_numpy(rng.integers(0, vocab, (b, prompt))).cuda()
            total, steady = timed(lambda ids=ids: generate(ids))
            out[f"{key}_b{b}_tok_s"] = b * new / total
            if new > 1 and None not in steady:
                out[f"{key}_b{b}_steady_tok_s"] = b * (new - 1) / statistics.median(steady)

    decode("decode")
    if prefill:
        ids = torch.from_numpy(rng.integers(0, vocab, (1, prefill))).cuda()
        out["prefill_ms_per_token"] = timed(lambda: model(ids, logits_to_keep=1))[0] * 1e3 / prefill
    if compile:
        # with a static cache, generate compiles the decoding forward itself (its
        # CompileConfig, CUDA graphs included); a forward wrapped by hand instead
        # reads outputs that the next graph replay has overwritten
        model.generation_config.cache_implementation = "static"
        decode("compiled_decode")
    return out


class _TokenClock:
    """A transformers streamer that notes when each put arrives: the prompt's
    ids first, then each step's new tokens (read back to the host)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def main(argv: list[str] | None = None) -> int:
    """``pygpukit bench-llm``."""
    import argparse

    p = argparse.ArgumentParser(prog="pygpukit bench-llm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a model directory (config.json, safetensors)")
    src.add_argument("--shape", choices=sorted(SHAPES), help="a random-weight checkpoint of this shape, written to a temporary directory")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--batch", default="1,8", help="batch sizes, comma-separated (default 1,8)")
    p.add_argument("--prompt", type=int, default=16, help="prompt tokens (default 16)")
    p.add_argument("--new", type=int, default=128, help="new tokens (default 128)")
    p.add_argument("--prefill", type=int, default=2048, help="prefill tokens (default 2048; 0 skips)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quantize", choices=QUANTIZE, help="weight-only quantized projections (pygpukit only)")
    p.add_argument("--no-graph", action="store_true", help="decode eagerly instead of replaying a CUDA graph")
    p.add_argument("--no-transformers", action="store_true", help="skip the transformers comparison")
    p.add_argument("--compile", action="store_true", help="also run transformers with a static cache and torch.compile")
    p.add_argument("--breakdown", action="store_true", help="also time each op of a decode step alone at the step's shapes")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        p.error(f"--batch must be comma-separated ints, got {args.batch!r}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(args.model) if args.model else random_checkpoint(Path(tmp) / args.shape, args.shape)
        info = gp.info()
        result: dict[str, Any] = {"model": str(args.model or args.shape), "device": info.device_name or "cpu", "dtype": args.dtype,
                                  "batches": batches, "prompt": args.prompt, "new": args.new, "prefill": args.prefill}  # fmt: skip
        result["quantize"] = args.quantize
        result["pygpukit"] = measure(
            directory, args.dtype, batches, args.prompt, args.new, args.prefill, args.reps, not args.no_graph, args.quantize, args.breakdown
        )
        rate = copy_rate_gbs()
        if rate:
            result["copy_rate_gbs"] = rate
            result["batch1_limit_tok_s"] = rate * 1e9 / result["pygpukit"]["weight_bytes"]
        if not args.no_transformers:
            result["transformers"] = measure_transformers(directory, batches, args.prompt, args.new, args.prefill, args.reps, args.compile)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0

"""A decoder-only language model built from a checkpoint through its ModelSpec.

Every supported family is the same pre-norm decoder: embed (plus learned
positions for GPT-2), then per layer ``x += attn(norm(x))``, ``x += mlp(norm(x))``
(the residual add fused into the next norm), a final norm and the output
projection (tied to the embedding where the checkpoint has no lm_head). The
layers are pygpukit-nn's; their matmuls go to pygpukit-gemm when installed.

``load(directory, dtype)`` checks config.json and the tensor names before
allocating, then moves each weight to the device once, converting its dtype
there; the checkpoint's memory-mapped bytes are never written.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

from .config import ConfigError, ModelConfig, estimate
from .generate import DecodeStates
from .safetensors import Checkpoint, SafetensorsError
from .spec import SPECS, ModelSpec, Sources
from .text import text_generator
from .tokenizer import Tokenizer

__all__ = ["QUANTIZE", "CausalLM", "DecoderLayer", "LoadError", "QuantizedLinear", "load"]

DTYPES = {"bfloat16": gp.bfloat16, "float16": gp.float16, "float32": gp.float32}
_FLOATS = {np.dtype(d) for d in (gp.bfloat16, gp.float16, gp.float32, gp.float64)}
_FP8 = {np.dtype(gp.float8_e4m3fn), np.dtype(gp.float8_e5m2)}


class LoadError(gp.PyGPUkitError, ValueError):
    """The checkpoint does not hold what its config.json describes, or will not fit."""


def _nn() -> Any:
    try:
        import pygpukit_nn.layers as layers
    except ImportError as exc:  # pragma: no cover - a dependency of this package
        raise ImportError("pygpukit-llm needs pygpukit-nn: pip install pygpukit-nn") from exc
    return layers


@dataclass
class DecoderLayer:
    attn_norm: Any
    attn: Any
    mlp_norm: Any
    mlp: Any


class CausalLM:
    """A loaded model: ``forward(ids, positions, cache, counts)`` gives logits.

    ids (batch, seq) int32 on the device; positions (seq,) or (batch, seq)
    (default 0..seq-1); with a cache, tokens are appended to it (``counts``:
    how many of each row's tokens are real in a right-padded batch)."""

    def __init__(
        self, config: ModelConfig, spec: ModelSpec, dtype: Any, embed: Any, pos_embed: gp.GPUArray | None,
        layers: list[DecoderLayer], final_norm: Any, lm_head: Any, directory: Path | None = None,
    ) -> None:  # fmt: skip
        self.config, self.spec, self.dtype = config, spec, np.dtype(dtype)
        self.embed, self.pos_embed, self.layers = embed, pos_embed, layers
        self.final_norm, self.lm_head, self.directory = final_norm, lm_head, directory
        self.tokenizer: Tokenizer | None = None
        self._decode_states = DecodeStates()  # what generation keeps for later calls (generate.py)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def hidden_states(
        self, ids: gp.GPUArray, positions: Any = None, cache: Any = None, counts: Any = None, check_ids: bool = True
    ) -> gp.GPUArray:
        """The final normed hidden states (batch, seq, hidden). ``check_ids=False``
        skips the range check of the ids (a synchronization) for ids known good."""
        b, s = ids.shape
        if positions is None:
            positions = gp.arange(s, dtype=gp.int32)
        x = self.embed(ids, check_ids)
        if self.pos_embed is not None:
            pos = positions if isinstance(positions, gp.GPUArray) else gp.from_numpy(np.asarray(positions, np.int32))
            x = x + _nn().embedding.embedding(pos.astype(gp.int32), self.pos_embed)
        pending, residual = x, None  # the next norm's input, before the residual add; the residual stream
        for i, layer in enumerate(self.layers):
            qkv, residual = self._norm_project(layer.attn_norm, layer.attn.qkv, pending, residual)
            a = layer.attn.attend(qkv, positions, cache, i, counts)
            if self.spec.moe:
                h, residual = layer.mlp_norm.add(a, residual)
                pending = layer.mlp(h.reshape(b * s, -1)).reshape(b, s, -1)
            else:
                up, residual = self._norm_project(layer.mlp_norm, layer.mlp.up, a, residual)
                pending = self._down(layer.mlp, up)
        return self.final_norm(pending) if residual is None else self.final_norm.add(pending, residual)[0]

    # An RMSNorm before a linear layer, and swiglu before the down projection, are
    # pygpukit-nn's fused ops add_rms_norm_linear / swiglu_linear: the registry
    # picks a fused kernel where one takes the call (pygpukit-gemm's decode GEMV
    # for a few rows), else their reference, which is the unfused ops (same results).

    def _norm_project(self, norm: Any, linear: Any, x: gp.GPUArray, residual: Any) -> tuple[gp.GPUArray, gp.GPUArray]:
        """``(linear(norm(h)), h)`` with ``h = x + residual`` (x when residual is None)."""
        nn = _nn()
        if isinstance(norm, nn.RMSNorm) and isinstance(linear, nn.Linear):
            return ext.op("add_rms_norm_linear")(x, residual, norm.weight, norm.eps, linear.weight, linear.bias)  # type: ignore[no-any-return]
        normed, h = (norm(x), x) if residual is None else norm.add(x, residual)
        return linear(normed), h

    def _down(self, mlp: Any, up: gp.GPUArray) -> gp.GPUArray:
        if mlp.gated and mlp.activation == "silu" and isinstance(mlp.down, _nn().Linear):
            return ext.op("swiglu_linear")(up, mlp.down.weight, mlp.down.bias)  # type: ignore[no-any-return]
        return mlp.down_proj(up)  # type: ignore[no-any-return]

    def logits(self, hidden: gp.GPUArray) -> gp.GPUArray:
        return self.lm_head(hidden)

    def forward(
        self, ids: gp.GPUArray, positions: Any = None, cache: Any = None, counts: Any = None, check_ids: bool = True
    ) -> gp.GPUArray:
        """Logits (batch, seq, vocab) in the model's dtype."""
        return self.logits(self.hidden_states(ids, positions, cache, counts, check_ids))

    __call__ = forward

    # -- text (needs the directory's tokenizer.json; see text.py) --------------------------

    def generate(self, prompt: Any, config: Any = None, **kw: Any) -> Any:
        """Complete a prompt (or a list of prompts): a Completion (or a list)."""
        return text_generator(self).generate(prompt, config, **kw)

    def stream(self, prompt: str, config: Any = None, **kw: Any) -> Iterator[str]:
        """The completion of a prompt, piece by piece."""
        return text_generator(self).stream(prompt, config, **kw)

    def chat(self, messages: Any, config: Any = None, **kw: Any) -> Any:
        """The assistant's reply to a list of {"role", "content"} messages (a Completion)."""
        return text_generator(self).chat(messages, config, **kw)

    def stream_chat(self, messages: Any, config: Any = None, **kw: Any) -> Iterator[tuple[str, str]]:
        """The reply as ("thinking" | "reply", text) pieces."""
        return text_generator(self).stream_chat(messages, config, **kw)

    def astream(self, prompt: str, config: Any = None, **kw: Any) -> AsyncIterator[str]:
        """``stream`` for asyncio."""
        return text_generator(self).astream(prompt, config, **kw)

    async def agenerate(self, prompt: Any, config: Any = None, **kw: Any) -> Any:
        """``generate`` for asyncio."""
        return await text_generator(self).agenerate(prompt, config, **kw)

    def release_decode_states(self) -> int:
        """Free what generation keeps for later calls (KV caches, decode buffers
        and captured decode graphs; at most ``generate.DECODE_STATES``) and
        return how many states that was. A call under way is not touched: it
        gives its state back when it ends. The next call allocates (and
        captures) anew."""
        return self._decode_states.clear()

    def new_cache(self, batch: int, max_seq: int, paged: bool = False, block_size: int = 16, kv_dtype: Any = None) -> Any:
        """A KV cache for ``batch`` sequences of up to ``max_seq`` tokens (all layers)."""
        cfg = self.config
        if max_seq > cfg.max_position_embeddings:
            raise ConfigError(f"a context of {max_seq} tokens is longer than the model allows ({cfg.max_position_embeddings})")
        from pygpukit_nn.kv_cache import KVCache, PagedKVCache

        kw = {"num_layers": cfg.num_layers, "kv_dtype": kv_dtype}
        if not paged:
            return KVCache(batch, max_seq, cfg.num_kv_heads, cfg.head_dim, self.dtype, **kw)
        blocks_per_seq = -(-max_seq // block_size)
        return PagedKVCache(
            batch * blocks_per_seq, block_size, cfg.num_kv_heads, cfg.head_dim, self.dtype, batch=batch, max_seq=max_seq, **kw
        )

    def __repr__(self) -> str:
        c = self.config
        return (f"CausalLM({c.model_type}, layers={c.num_layers}, hidden={c.hidden_size}, heads={c.num_heads}/{c.num_kv_heads}, "
                f"vocab={c.vocab_size}, dtype={self.dtype})")  # fmt: skip


# -- loading ---------------------------------------------------------------------------


class _Weights:
    """Resolves a spec's logical weights to checkpoint tensors and loads them,
    keeping the names it used (what is left over is reported)."""

    def __init__(self, ckpt: Checkpoint, spec: ModelSpec, dtype: np.dtype, num_experts: int, progress: Callable[[int], None]) -> None:
        self.ckpt, self.spec, self.dtype, self.num_experts = ckpt, spec, dtype, num_experts
        self.used: set[str] = set()
        self.progress = progress
        self.quantize: str | None = None  # weight-only quantization of the layers' projections
        self.fp8_block: tuple[int, int] | None = None  # an fp8 checkpoint's scale blocks (config.json)
        self.group_size = 128

    def names(self, logical: str, i: int = 0) -> list[list[str]] | None:
        """The tensors of ``logical`` (layer i): per expert when it has {e}, else one list."""
        sources: Sources = self.spec.weights.get(logical, ())
        for prefix in self.spec.prefixes:
            for alternative in sources:
                experts = range(self.num_experts) if any("{e}" in t for t in alternative) else [None]
                groups = [[prefix + t.format(i=i, e=e) for t in alternative] for e in experts]
                if all(n in self.ckpt for g in groups for n in g):
                    return groups
        return None

    def get(self, logical: str, i: int = 0, required: bool = True) -> gp.GPUArray | None:
        groups = self.names(logical, i)
        if groups is None:
            if required:
                where = "" if "{i}" not in str(self.spec.weights.get(logical)) else f" of layer {i}"
                alts = " or ".join("+".join(a) for a in self.spec.weights.get(logical, ()))
                raise LoadError(f"the checkpoint has no {logical}{where} (looked for {alts.format(i=i, e=0)})")
            return None
        t = logical in self.spec.transposed
        parts = [gp.concatenate([self._tensor(n, t) for n in g], axis=0) if len(g) > 1 else self._tensor(g[0], t) for g in groups]
        return parts[0] if len(parts) == 1 else gp.stack(parts, axis=0)

    def _tensor(self, name: str, transposed: bool = False) -> gp.GPUArray:
        info = self.ckpt.info(name)
        kind = np.dtype(info.dtype)
        if kind in _FP8:
            a = self._fp8(name, info.shape)
        elif kind in _FLOATS:
            a = self.ckpt.to_device(name, self.dtype)
        else:
            raise LoadError(f"tensor {name!r} is {info.dtype}; weights must be float8, bfloat16, float16, float32 or float64")
        if transposed:
            a = gp.ascontiguousarray(a.T)
        self.used.add(name)
        self.progress(info.nbytes)
        return a

    def _fp8(self, name: str, shape: tuple[int, ...]) -> gp.GPUArray:
        """An fp8 checkpoint's weight, dequantized to the model's dtype on the device:
        times its block scales (``<name>_scale_inv``, one per block of the 2-D
        weight, the block size from the scales' shape, as transformers' FP8 format
        stores them: blocks of ``quantization_config.weight_block_size``, or the
        weight's size over the scales' when config.json has none) or its
        per-tensor ``<name>_scale``; neither: the values as they are."""
        q = self.ckpt.to_device(name).astype(gp.float32)
        for suffix in ("_scale_inv", "_scale"):
            if name + suffix not in self.ckpt:
                continue
            scale = self.ckpt.to_device(name + suffix).astype(gp.float32)
            self.used.add(name + suffix)
            if scale.size == 1:
                return (q * scale.reshape(())).astype(self.dtype)
            if scale.ndim != 2 or q.ndim != 2:
                raise LoadError(f"{name + suffix}: block scales must be 2-D for a 2-D weight, got {scale.shape} for {shape}")
            (n, k), (sn, sk) = q.shape, scale.shape
            bn, bk = self.fp8_block or (n // sn, k // sk)
            if sn * bn < n or sk * bk < k or (sn - 1) * bn >= n or (sk - 1) * bk >= k:
                raise LoadError(f"{name + suffix}: {scale.shape} scales do not tile a {q.shape} weight in blocks of {bn} x {bk}"
                                " (quantization_config.weight_block_size in config.json)")  # fmt: skip
            full = gp.repeat(gp.repeat(scale, bn, axis=0), bk, axis=1)[:n, :k]
            return (q * full).astype(self.dtype)
        return q.astype(self.dtype)

    def unused(self) -> list[str]:
        ignored = self.spec.ignored_suffixes
        return sorted(n for n in self.ckpt.keys() if n not in self.used and not n.endswith(ignored))


def _check_shapes(cfg: ModelConfig, layer: DecoderLayer, i: int) -> None:
    a = layer.attn
    if a.qkv.in_features != cfg.hidden_size:
        raise LoadError(f"layer {i}: the qkv projection takes {a.qkv.in_features} inputs, config.json says hidden_size {cfg.hidden_size}")


def _progress_bar(total: int, enabled: bool) -> Callable[[int], None]:
    done = [0, time.perf_counter()]

    def step(nbytes: int) -> None:
        done[0] += nbytes
        if enabled and total:
            frac = done[0] / total
            bar = "#" * int(30 * frac)
            sys.stderr.write(f"\rloading [{bar:<30}] {100 * frac:5.1f}% {done[0] / 2**30:6.2f} GiB")
            if done[0] >= total:
                sys.stderr.write(f" in {time.perf_counter() - done[1]:.1f} s\n")
            sys.stderr.flush()

    return step


class QuantizedLinear:
    """A Linear over weight-only quantized weights (pygpukit-gemm's
    ``quantize_weight``: int8 / int4 / fp8 with group scales): ``gp.ops.qlinear``,
    the decode GEMV that reads the packed weights once on the GPU."""

    def __init__(self, weight: Any, bias: gp.GPUArray | None) -> None:
        self.weight, self.bias = weight, bias

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[1])

    def __call__(self, x: gp.GPUArray) -> gp.GPUArray:
        return gp.ops.qlinear(x, self.weight, self.bias)

    def __repr__(self) -> str:
        return f"QuantizedLinear({self.in_features} -> {self.out_features}, {self.weight.format}, group {self.weight.group_size})"


QUANTIZE = ("int8", "int4", "fp8")


def load(
    directory: str | os.PathLike[str], dtype: Any = "bfloat16", *, max_seq_len: int | None = None, batch: int = 1,
    progress: bool | None = None, quantize: str | None = None, group_size: int = 128,
) -> CausalLM:  # fmt: skip
    """Load a Hugging Face model directory (config.json and safetensors) onto the device.

    ``dtype``: "bfloat16", "float16" or "float32" (weights are converted on the
    device). Before any allocation the memory estimate for (dtype,
    max_seq_len, batch) is checked against the free device memory (with full
    precision weights: conservative when quantizing), and every tensor the
    architecture needs is looked up; a missing or misshapen tensor, or one the
    architecture does not use, is an error naming it. ``quantize`` ("int8",
    "int4" or "fp8", with ``group_size`` weights per scale) stores the decoder
    layers' projections weight-only quantized as they load (W8A16 / W4A16;
    embeddings, the output head and MoE experts stay in ``dtype``); needs
    pygpukit-gemm."""
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(f"quantize must be None or one of {', '.join(QUANTIZE)}, got {quantize!r}")
    if quantize is not None:
        try:
            import pygpukit_gemm  # noqa: F401
        except ImportError:
            raise ImportError("quantize= needs pygpukit-gemm: pip install pygpukit-gemm") from None
    path = Path(directory)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is not a model directory")
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    dt = np.dtype(DTYPES[name])
    cfg = ModelConfig.load(path)
    spec = SPECS[cfg.model_type]  # ModelConfig accepts only model types with a spec
    try:
        ckpt = Checkpoint(path)
    except SafetensorsError as exc:
        raise LoadError(str(exc)) from None
    need = estimate(path, name, min(max_seq_len or 4096, cfg.max_position_embeddings), batch)
    free = gp.memory.available_bytes()
    if free is not None and need.total_bytes > free:
        raise LoadError(f"{path.name} needs {need} but the device has only {free / 2**30:.2f} GiB free; nothing was allocated")
    total = sum(ckpt.info(n).nbytes for n in ckpt.keys())
    w = _Weights(ckpt, spec, dt, cfg.num_experts, _progress_bar(total, sys.stderr.isatty() if progress is None else progress))
    _check_names(cfg, w)
    if quantize is not None and (cfg.hidden_size % group_size or cfg.intermediate_size % group_size):
        raise ValueError(f"group_size {group_size} must divide hidden_size {cfg.hidden_size} and intermediate_size {cfg.intermediate_size}")
    w.quantize, w.group_size = quantize, group_size
    block = (cfg.raw.get("quantization_config") or {}).get("weight_block_size")
    if block is not None:
        if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
            raise ConfigError(f"config.json: quantization_config.weight_block_size must be two positive ints, got {block!r}")
        w.fp8_block = (block[0], block[1])
    tokenizer = Tokenizer.load(path) if (path / "tokenizer.json").is_file() else None  # before allocating: a broken one fails fast
    model = _build(cfg, spec, dt, w, path)
    extra = w.unused()
    if extra:
        raise LoadError(f"{path.name}: {len(extra)} tensors are not used by the {cfg.model_type} architecture, e.g. {extra[:3]}")
    model.tokenizer = tokenizer
    return model


def _check_names(cfg: ModelConfig, w: _Weights) -> None:
    """Every required tensor exists, before anything is allocated."""
    glob = ["embed", "final_norm.weight"]
    per_layer = ["attn_norm.weight", "mlp_norm.weight", "qkv.weight", "o.weight"]
    per_layer += ["router.weight", "experts.gate_up", "experts.down"] if w.spec.moe else ["up.weight", "down.weight"]
    per_layer += ["q_norm.weight", "k_norm.weight"] if w.spec.qk_norm else []
    missing = [g for g in glob if w.names(g) is None]
    missing += [f"{p} (layer {i})" for i in range(cfg.num_layers) for p in per_layer if w.names(p, i) is None]
    if missing:
        raise LoadError(f"the checkpoint lacks {len(missing)} tensors of a {cfg.model_type} model with {cfg.num_layers} layers, "
                        f"e.g. {missing[:3]}")  # fmt: skip


def _norm(nn: Any, spec: ModelSpec, cfg: ModelConfig, w: _Weights, prefix: str, i: int = 0) -> Any:
    weight = w.get(prefix + ".weight", i)
    if spec.norm == "layer":
        return nn.LayerNorm(weight, w.get(prefix + ".bias", i, required=False), cfg.norm_eps)
    return nn.RMSNorm(weight, cfg.norm_eps)


def _linear(nn: Any, w: _Weights, name: str, i: int) -> Any:
    weight, bias = w.get(name + ".weight", i), w.get(name + ".bias", i, required=False)
    if w.quantize is None:
        return nn.Linear(weight, bias)
    from pygpukit_gemm.quant import quantize_weight

    try:
        return QuantizedLinear(quantize_weight(weight, w.quantize, w.group_size), bias)
    except ValueError as exc:
        raise LoadError(f"layer {i} {name}: cannot quantize to {w.quantize}: {exc}") from None


def _build(cfg: ModelConfig, spec: ModelSpec, dt: np.dtype, w: _Weights, path: Path) -> CausalLM:
    nn = _nn()
    from pygpukit_nn.positional import RotaryEmbedding

    embed = nn.Embedding(w.get("embed"))
    if embed.weight.shape != (cfg.vocab_size, cfg.hidden_size):
        raise LoadError(f"the embedding is {embed.weight.shape}, config.json says ({cfg.vocab_size}, {cfg.hidden_size})")
    pos_embed = None if spec.rotary else w.get("pos_embed")
    rope = RotaryEmbedding.from_config(cfg.raw) if spec.rotary else None
    layers = []
    for i in range(cfg.num_layers):
        q_norm = k_norm = None
        if spec.qk_norm:
            q_norm, k_norm = nn.RMSNorm(w.get("q_norm.weight", i), cfg.norm_eps), nn.RMSNorm(w.get("k_norm.weight", i), cfg.norm_eps)
        try:
            attn = nn.Attention(
                _linear(nn, w, "qkv", i), _linear(nn, w, "o", i), cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                rope=rope, q_norm=q_norm, k_norm=k_norm, window=cfg.layer_windows[i],
            )  # fmt: skip
            if spec.moe:
                mlp = nn.MoE(nn.Linear(w.get("router.weight", i)), w.get("experts.gate_up", i), w.get("experts.down", i),
                             cfg.num_experts_per_tok, renormalize=True, activation=cfg.activation)  # fmt: skip
            else:
                mlp = nn.MLP(_linear(nn, w, "up", i), _linear(nn, w, "down", i), cfg.activation, gated=spec.gated)
        except ValueError as exc:
            if isinstance(exc, LoadError):
                raise
            raise LoadError(f"layer {i} does not match config.json: {exc}") from None
        layer = DecoderLayer(_norm(nn, spec, cfg, w, "attn_norm", i), attn, _norm(nn, spec, cfg, w, "mlp_norm", i), mlp)
        _check_shapes(cfg, layer, i)
        layers.append(layer)
    final_norm = _norm(nn, spec, cfg, w, "final_norm")
    head = w.get("lm_head", required=not cfg.tie_word_embeddings)
    lm_head = nn.Linear(head) if head is not None else nn.Linear(embed.weight)
    return CausalLM(cfg, spec, dt, embed, pos_embed, layers, final_norm, lm_head, path)

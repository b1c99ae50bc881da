"""A model directory's config.json, normalized, and the memory it will need.

Hugging Face configs name the same things differently (GPT-2's ``n_layer``,
``n_head``, ``n_embd``, ``n_positions`` against LLaMA's ``num_hidden_layers``,
``num_attention_heads``, ``hidden_size``, ``max_position_embeddings``);
``ModelConfig`` reads both into one shape, and rejects an architecture it does
not support with the list of those it does. ``estimate()`` says, before any
allocation, how many bytes the weights, the KV cache and the work buffers of a
(dtype, max_seq_len, batch) will take.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import pygpukit as gp

from .safetensors import Checkpoint, SafetensorsError
from .spec import SPECS

__all__ = ["ARCHITECTURES", "ConfigError", "MemoryEstimate", "ModelConfig", "estimate"]

# the config.json model types with a ModelSpec
ARCHITECTURES = tuple(SPECS)
# transformers' defaults where a config.json leaves the norm epsilon out
_NORM_EPS = {"gpt2": 1e-5, "phi3": 1e-5, "mixtral": 1e-5}
# hidden_act / activation_function names -> the nn plugin's activation names
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "relu": "relu"}  # fmt: skip


class ConfigError(gp.PyGPUkitError, ValueError):
    """config.json is missing, unreadable, incomplete, or of an unsupported architecture."""


def _first(cfg: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def _layer_windows(cfg: dict[str, Any], layers: int, sliding: int | None, where: str) -> tuple[int | None, ...]:
    """Per-layer windows: transformers' ``layer_types`` ("sliding_attention" /
    "full_attention") where the config has them, else the window on every layer."""
    types = cfg.get("layer_types")
    if types is None or sliding is None:
        return (sliding,) * layers
    if not isinstance(types, list) or len(types) != layers or not set(types) <= {"sliding_attention", "full_attention"}:
        raise ConfigError(f"{where}: layer_types must list 'sliding_attention' or 'full_attention' for each of the {layers} layers")
    return tuple(sliding if t == "sliding_attention" else None for t in types)


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    num_experts: int  # 0 for dense models
    num_experts_per_tok: int
    sliding_window: int | None
    layer_windows: tuple[int | None, ...]  # each layer's sliding window (None: full attention)
    norm_eps: float
    activation: str
    raw: dict[str, Any]

    @classmethod
    def from_dict(cls, cfg: dict[str, Any], where: str = "config.json") -> ModelConfig:
        mt = str(cfg.get("model_type", "")).lower()
        if mt not in ARCHITECTURES:
            arch = cfg.get("architectures") or [mt or "?"]
            raise ConfigError(
                f"{where}: architecture {arch[0]!r} (model_type {mt!r}) is not supported; supported model types: {', '.join(ARCHITECTURES)}"
            )
        hidden = _first(cfg, "hidden_size", "n_embd")
        layers = _first(cfg, "num_hidden_layers", "n_layer")
        heads = _first(cfg, "num_attention_heads", "n_head")
        vocab = _first(cfg, "vocab_size")
        missing = [
            n
            for n, v in (("hidden_size", hidden), ("num_hidden_layers", layers), ("num_attention_heads", heads), ("vocab_size", vocab))
            if v is None
        ]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        try:
            hidden, layers, heads, vocab = int(hidden), int(layers), int(heads), int(vocab)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: hidden size, layers, heads and vocab size must be integers") from None
        if min(hidden, layers, heads, vocab) <= 0 or hidden % heads:
            raise ConfigError(f"{where}: hidden_size {hidden} must be a positive multiple of num_attention_heads {heads}")
        kv = int(_first(cfg, "num_key_value_heads", default=heads))
        if kv <= 0 or heads % kv:
            raise ConfigError(f"{where}: num_attention_heads {heads} must be a multiple of num_key_value_heads {kv}")
        inter = _first(cfg, "intermediate_size", "n_inner", "ffn_dim")
        sliding = cfg.get("sliding_window") if mt in ("mistral", "mixtral", "qwen2", "qwen3", "phi3") else None
        if sliding is not None and cfg.get("use_sliding_window") is False:
            sliding = None
        windows = _layer_windows(cfg, int(layers), None if sliding is None else int(sliding), where)
        act_name = str(_first(cfg, "hidden_act", "activation_function", default="gelu_new" if mt == "gpt2" else "silu"))
        if act_name not in _ACTIVATIONS:
            raise ConfigError(f"{where}: activation {act_name!r} is not supported; supported: {', '.join(_ACTIVATIONS)}")
        if mt == "gpt2" and cfg.get("scale_attn_by_inverse_layer_idx"):
            raise ConfigError(f"{where}: scale_attn_by_inverse_layer_idx is not supported")
        return cls(
            model_type=mt,
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv,
            head_dim=int(_first(cfg, "head_dim", default=hidden // heads)),
            intermediate_size=int(inter) if inter is not None else 4 * hidden,
            vocab_size=vocab,
            max_position_embeddings=int(_first(cfg, "max_position_embeddings", "n_positions", "n_ctx", default=2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", mt in ("gpt2", "gemma2"))),
            num_experts=int(_first(cfg, "num_local_experts", "num_experts", default=0)),
            num_experts_per_tok=int(_first(cfg, "num_experts_per_tok", default=0)),
            sliding_window=int(sliding) if sliding is not None else None,
            layer_windows=windows,
            norm_eps=float(_first(cfg, "rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps", default=_NORM_EPS.get(mt, 1e-6))),
            activation=_ACTIVATIONS[act_name],
            raw=cfg,
        )

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> ModelConfig:
        path = Path(directory) / "config.json"
        try:
            cfg = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path} is missing: a model directory needs config.json") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read it as JSON ({exc})") from None
        if not isinstance(cfg, dict):
            raise ConfigError(f"{path}: expected a JSON object")
        return cls.from_dict(cfg, str(path))

    def parameter_count(self) -> int:
        """Parameters implied by the config (the checkpoint's headers are exact; this is the fallback)."""
        h, f, kvd = self.hidden_size, self.intermediate_size, self.num_kv_heads * self.head_dim
        attn = h * self.num_heads * self.head_dim + 2 * h * kvd + self.num_heads * self.head_dim * h
        mlp_one = (2 if self.model_type == "gpt2" else 3) * h * f
        mlp = mlp_one * max(1, self.num_experts) + (h * self.num_experts if self.num_experts else 0)
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * (attn + mlp + 2 * h) + embed + h


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    kv_cache_bytes: int
    workspace_bytes: int  # activations of a prefill of max_seq_len tokens, logits

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.workspace_bytes

    def __str__(self) -> str:
        return (
            f"weights {gp.memory.format_bytes(self.weights_bytes)} + KV cache {gp.memory.format_bytes(self.kv_cache_bytes)} + "
            f"work {gp.memory.format_bytes(self.workspace_bytes)} = {gp.memory.format_bytes(self.total_bytes)}"
        )


def estimate(directory: str | os.PathLike[str], dtype: Any = "bfloat16", max_seq_len: int | None = None, batch: int = 1) -> MemoryEstimate:
    """Bytes a model will take on the device in ``dtype``, with a KV cache (in
    ``dtype``) for ``batch`` sequences of ``max_seq_len`` tokens (default: the
    model's maximum). Weights are counted from the checkpoint's headers when
    the directory has them, else from config.json; nothing is allocated."""
    cfg = ModelConfig.load(directory)
    dt = np.dtype(gp.bfloat16 if dtype == "bfloat16" else dtype)
    seq = cfg.max_position_embeddings if max_seq_len is None else max_seq_len
    if not isinstance(seq, int) or seq <= 0 or not isinstance(batch, int) or batch <= 0:
        raise ValueError(f"max_seq_len and batch must be positive ints, got {seq!r} and {batch!r}")
    if seq > cfg.max_position_embeddings:
        raise ConfigError(f"max_seq_len {seq} is longer than the model allows ({cfg.max_position_embeddings})")
    try:
        ckpt = Checkpoint(directory)
        elements = sum(int(np.prod(ckpt.info(n).shape)) for n in ckpt.keys())
    except SafetensorsError:
        elements = cfg.parameter_count()
    weights = elements * dt.itemsize
    kv = 2 * cfg.num_layers * batch * seq * cfg.num_kv_heads * cfg.head_dim * dt.itemsize
    tokens = batch * seq
    act = tokens * (3 * cfg.hidden_size + 2 * cfg.intermediate_size * max(1, cfg.num_experts_per_tok)) * dt.itemsize
    logits = batch * cfg.vocab_size * 4
    return MemoryEstimate(weights, kv, act + logits)

"""Tiny Hugging Face model directories, and a float64 NumPy forward to check
the loader against (importable: tests/ is on pytest's path).

``write_tiny_model`` writes what ``XxxForCausalLM.save_pretrained`` of
transformers 5 writes for a small random model: ``config.json`` (the same keys
and values; ``config_format="v4"`` writes the 4.x form still found on the Hub:
``torch_dtype``, ``rope_theta`` and ``rope_scaling`` instead of ``dtype`` and
``rope_parameters``, and no ``tie_word_embeddings`` where it was true by
default, as for GPT-2 and Gemma-2), ``generation_config.json``, and ``model.safetensors`` or
shards with ``model.safetensors.index.json``, with the architecture's tensor
names and layouts (GPT-2's Conv1D weights are (in, out); Phi-3's fused
``qkv_proj`` and ``gate_up_proj``; Mixtral's per-expert ``w1/w2/w3``; no
``lm_head.weight`` when tied).

``reference_logits`` reads such a directory with the ``safetensors`` package
(not with pygpukit) and runs the model in float64, one plain function per
block, following transformers' modeling code:

* masks: key j is visible to query i iff j <= i, and with a sliding window W
  also j > i - W (transformers 5 ``sliding_window_overlay``: ``kv_idx > q_idx -
  sliding_window``), so a query sees W keys including itself. Mistral, Mixtral
  and Phi-3 apply the window on every layer when ``sliding_window`` is set;
  Qwen2/3 only where ``layer_types`` says ``sliding_attention`` and
  ``use_sliding_window`` is true; Gemma-2 on ``layer_types`` (even layers by
  default).
* RoPE is the NeoX half split (``rotate_half``) over the first
  ``head_dim * partial_rotary_factor`` dims, frequencies ``theta**(-2i/dim)``,
  with the "linear" and "llama3" scalings of ``modeling_rope_utils``.
* GQA: query head h uses kv head ``h // (heads // kv_heads)`` (``repeat_kv``).
* Mixtral routing: softmax over all experts, top-k, the k weights renormalized
  to sum to 1.

transformers itself computes a few steps in float32 even in a float64 model
(RMSNorm's normalization, the eager softmax, RoPE's cos/sin, the router's
softmax); the reference does not, so the two agree to float32 rounding, not
to float64's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import safetensors
from safetensors.numpy import save_file

__all__ = ["ARCHS", "Arch", "reference_greedy", "reference_logits", "write_tiny_model"]

TRANSFORMERS_VERSION = "5.24.0"  # the version whose save_pretrained output this mirrors


@dataclass(frozen=True)
class Arch:
    """What sets one architecture apart from the LLaMA decoder."""

    architecture: str  # the class named in config.json's "architectures"
    gpt2: bool = False  # LayerNorm, learned positions, Conv1D c_attn/c_fc, gelu_new
    qkv_bias: bool = False  # Qwen2: biases on q/k/v (not o), whatever the config says
    qk_norm: bool = False  # Qwen3: RMSNorm over each head's q and k before RoPE
    fused: bool = False  # Phi-3: qkv_proj and gate_up_proj
    moe: bool = False  # Mixtral: block_sparse_moe.gate and experts.N.w1/w2/w3
    gemma: bool = False  # (1+w) norms, sqrt(hidden) embedding scale, sandwich norms, softcaps, gelu-tanh
    tie: bool = False  # tie_word_embeddings' default
    rope_theta: float = 10000.0  # transformers' default when the config has none
    eps: float = 1e-6


ARCHS: dict[str, Arch] = {
    "gpt2": Arch("GPT2LMHeadModel", gpt2=True, tie=True, eps=1e-5),
    "llama": Arch("LlamaForCausalLM"),
    "qwen2": Arch("Qwen2ForCausalLM", qkv_bias=True),
    "qwen3": Arch("Qwen3ForCausalLM", qk_norm=True),
    "mistral": Arch("MistralForCausalLM"),
    "mixtral": Arch("MixtralForCausalLM", moe=True, rope_theta=1e6, eps=1e-5),
    "phi3": Arch("Phi3ForCausalLM", fused=True, eps=1e-5),
    "gemma2": Arch("Gemma2ForCausalLM", gemma=True, tie=True),
}

_STORE_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


# ---------------------------------------------------------------- config.json


def _config(
    arch: str,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    inter: int,
    vocab: int,
    max_pos: int,
    tie: bool,
    dtype: str,
    experts: int,
    top_k: int,
) -> dict[str, Any]:
    a = ARCHS[arch]
    if a.gpt2:
        return {
            "activation_function": "gelu_new", "add_cross_attention": False, "attn_pdrop": 0.1, "bos_token_id": vocab - 1,
            "embd_pdrop": 0.1, "eos_token_id": vocab - 1, "initializer_range": 0.02, "layer_norm_epsilon": a.eps,
            "n_embd": hidden, "n_head": heads, "n_inner": inter, "n_layer": layers, "n_positions": max_pos,
            "pad_token_id": None, "reorder_and_upcast_attn": False, "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False,
            "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
            "summary_type": "cls_index", "summary_use_proj": True, "tie_word_embeddings": tie, "use_cache": True, "vocab_size": vocab,
            "dtype": dtype,
        }  # fmt: skip
    cfg: dict[str, Any] = {
        "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02,
        "intermediate_size": inter, "max_position_embeddings": max_pos, "num_attention_heads": heads,
        "num_hidden_layers": layers, "num_key_value_heads": kv_heads, "pad_token_id": None, "rms_norm_eps": a.eps,
        "rope_parameters": {"rope_theta": a.rope_theta, "rope_type": "default"}, "tie_word_embeddings": tie,
        "use_cache": True, "vocab_size": vocab, "bos_token_id": 1, "eos_token_id": 2,
    }  # fmt: skip
    head_dim = hidden // heads
    if arch == "llama":
        cfg.update(attention_bias=False, head_dim=head_dim, mlp_bias=False, pretraining_tp=1)
    elif arch in ("qwen2", "qwen3"):
        windows = {"use_sliding_window": False, "sliding_window": None, "max_window_layers": 28}
        cfg.update(windows, layer_types=None, bos_token_id=vocab - 1, eos_token_id=vocab - 1)  # layer_types: derived later
        cfg["rope_parameters"]["rope_theta"] = 1e6  # what Qwen checkpoints use
        if arch == "qwen3":  # Qwen3 states head_dim, and its checkpoints make it wider than hidden/heads
            cfg.update(attention_bias=False, head_dim=2 * head_dim)
    elif arch == "mistral":
        cfg.update(head_dim=head_dim, sliding_window=8)
    elif arch == "mixtral":
        cfg.update(
            head_dim=None, num_experts_per_tok=top_k, num_local_experts=experts, output_router_logits=False,
            router_aux_loss_coef=0.001, router_jitter_noise=0.0, sliding_window=8,
        )  # fmt: skip
    elif arch == "phi3":
        cfg.update(embd_pdrop=0.0, resid_pdrop=0.0, original_max_position_embeddings=max_pos, sliding_window=None)
        cfg.update(eos_token_id=vocab - 1, pad_token_id=vocab - 1)
        cfg["rope_parameters"]["partial_rotary_factor"] = 1.0
    elif arch == "gemma2":
        del cfg["hidden_act"]
        cfg.update(
            attention_bias=False, attn_logit_softcapping=50.0, final_logit_softcapping=30.0, head_dim=head_dim,
            hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=head_dim, sliding_window=8,
            layer_types=None,
            use_bidirectional_attention=None, pad_token_id=0, eos_token_id=1, bos_token_id=2,
        )  # fmt: skip
    cfg["dtype"] = dtype
    return cfg


def _finish_config(arch: str, cfg: dict[str, Any], overrides: dict[str, Any], config_format: str) -> dict[str, Any]:
    """Apply overrides (``rope_theta``, ``partial_rotary_factor`` and
    ``rope_scaling`` fold into ``rope_parameters`` as transformers 5 does),
    derive ``layer_types``, then stamp the saved form."""
    folded = ("rope_theta", "partial_rotary_factor", "rope_scaling")
    cfg = dict(cfg, **{k: v for k, v in overrides.items() if k not in folded})
    if "rope_parameters" in cfg:
        rope = dict(cfg["rope_parameters"])
        for key in folded[:2]:
            if key in overrides:
                rope[key] = float(overrides[key])
        if overrides.get("rope_scaling"):
            rope.update(overrides["rope_scaling"])
            rope["factor"] = float(rope["factor"])  # transformers stores factors as floats
        cfg["rope_parameters"] = rope
    if arch in ("qwen2", "qwen3") and not cfg.get("use_sliding_window"):
        cfg["sliding_window"] = None  # as Qwen2Config/Qwen3Config reset it
    if "layer_types" in cfg and "layer_types" not in overrides:  # derived from the final values, as __post_init__ does
        cfg["layer_types"] = [_default_layer_type(arch, cfg, i) for i in range(cfg["num_hidden_layers"])]
    cfg.update(model_type=arch, architectures=[ARCHS[arch].architecture], transformers_version=TRANSFORMERS_VERSION)
    if config_format == "v4":
        cfg["torch_dtype"] = cfg.pop("dtype")
        if cfg["tie_word_embeddings"] and ARCHS[arch].tie:
            del cfg["tie_word_embeddings"]  # 4.x left out what equalled PretrainedConfig's default (True)
        if "rope_parameters" in cfg:
            rope = dict(cfg.pop("rope_parameters"))
            cfg["rope_theta"] = rope.pop("rope_theta")
            if "partial_rotary_factor" in rope:
                cfg["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
            cfg["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    elif config_format != "v5":
        raise ValueError(f"config_format must be 'v5' or 'v4', got {config_format!r}")
    return dict(sorted(cfg.items()))


def _default_layer_type(arch: str, cfg: dict[str, Any], i: int) -> str:
    if arch == "gemma2":
        return "sliding_attention" if i % 2 == 0 else "full_attention"
    sliding = cfg.get("use_sliding_window") and cfg.get("sliding_window") is not None and i >= cfg.get("max_window_layers", 28)
    return "sliding_attention" if sliding else "full_attention"


# ---------------------------------------------------------------- weights


def _weights(arch: str, cfg: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights with Hugging Face's names and shapes; matrices of std
    0.8/sqrt(fan_in) (activations stay O(1), logits spread over a few units),
    norm weights 1 + N(0, 0.1^2) (Gemma stores w of (1 + w): N(0, 0.1^2))."""
    a = ARCHS[arch]

    def mat(out: int, inp: int) -> np.ndarray:
        return rng.standard_normal((out, inp)) * (0.8 / math.sqrt(inp))

    def vec(n: int, around: float = 0.0) -> np.ndarray:
        return around + 0.1 * rng.standard_normal(n)

    norm_at = 0.0 if a.gemma else 1.0
    # a tied head scores each token against its own embedding, still in the
    # residual stream; smaller embeddings keep greedy decoding from echoing
    # the last token
    embed_std = 0.05 if a.gemma or cfg["tie_word_embeddings"] else 0.5
    w: dict[str, np.ndarray] = {}
    if a.gpt2:
        h, f, v, p = cfg["n_embd"], cfg["n_inner"] or 4 * cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
        w["transformer.wte.weight"] = embed_std * rng.standard_normal((v, h))
        w["transformer.wpe.weight"] = 0.2 * rng.standard_normal((p, h))
        for i in range(cfg["n_layer"]):
            pre = f"transformer.h.{i}."
            for ln in ("ln_1", "ln_2"):
                w[pre + ln + ".weight"], w[pre + ln + ".bias"] = vec(h, 1.0), vec(h)
            # Conv1D stores (in, out): y = x @ W + b
            w[pre + "attn.c_attn.weight"], w[pre + "attn.c_attn.bias"] = mat(3 * h, h).T, vec(3 * h)
            w[pre + "attn.c_proj.weight"], w[pre + "attn.c_proj.bias"] = mat(h, h).T, vec(h)
            w[pre + "mlp.c_fc.weight"], w[pre + "mlp.c_fc.bias"] = mat(f, h).T, vec(f)
            w[pre + "mlp.c_proj.weight"], w[pre + "mlp.c_proj.bias"] = mat(h, f).T, vec(h)
        w["transformer.ln_f.weight"], w["transformer.ln_f.bias"] = vec(h, 1.0), vec(h)
        if not cfg["tie_word_embeddings"]:
            w["lm_head.weight"] = mat(v, h)
        return w
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // nh
    attn_bias, mlp_bias = bool(cfg.get("attention_bias")), bool(cfg.get("mlp_bias"))
    w["model.embed_tokens.weight"] = embed_std * rng.standard_normal((v, h))
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        norms = ["input_layernorm", "post_attention_layernorm"]
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"] if a.gemma else []
        for n in norms:
            w[pre + n + ".weight"] = vec(h, norm_at)
        at = pre + "self_attn."
        if a.fused:
            w[at + "qkv_proj.weight"] = mat((nh + 2 * nkv) * hd, h)
        else:
            for name, rows in (("q_proj", nh * hd), ("k_proj", nkv * hd), ("v_proj", nkv * hd)):
                w[at + name + ".weight"] = mat(rows, h)
                if a.qkv_bias or attn_bias:
                    w[at + name + ".bias"] = vec(rows)
        w[at + "o_proj.weight"] = mat(h, nh * hd)
        if attn_bias:
            w[at + "o_proj.bias"] = vec(h)
        if a.qk_norm:
            w[at + "q_norm.weight"], w[at + "k_norm.weight"] = vec(hd, 1.0), vec(hd, 1.0)
        if a.moe:
            moe = pre + "block_sparse_moe."
            w[moe + "gate.weight"] = 4 * mat(cfg["num_local_experts"], h)  # decisive routing
            for e in range(cfg["num_local_experts"]):
                w[f"{moe}experts.{e}.w1.weight"], w[f"{moe}experts.{e}.w3.weight"] = mat(f, h), mat(f, h)
                w[f"{moe}experts.{e}.w2.weight"] = mat(h, f)
        elif a.fused:
            w[pre + "mlp.gate_up_proj.weight"], w[pre + "mlp.down_proj.weight"] = mat(2 * f, h), mat(h, f)
        else:
            for name, shape in (("gate_proj", (f, h)), ("up_proj", (f, h)), ("down_proj", (h, f))):
                w[pre + "mlp." + name + ".weight"] = mat(*shape)
                if mlp_bias:
                    w[pre + "mlp." + name + ".bias"] = vec(shape[0])
    w["model.norm.weight"] = vec(h, norm_at)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(v, h)
    return w


def _save(directory: Path, tensors: dict[str, np.ndarray], sharded: bool) -> None:
    """model.safetensors, or shards of about equal bytes and the index save_pretrained writes."""
    meta = {"format": "pt"}
    if not sharded:
        save_file(tensors, directory / "model.safetensors", metadata=meta)
        return
    names = sorted(tensors)
    total = sum(tensors[n].nbytes for n in names)
    count = 3 if len(names) >= 3 else 2
    shards: list[list[str]] = [[] for _ in range(count)]
    done = 0
    for n in names:  # fill shard k until it holds its share of the bytes
        shards[min(count - 1, done * count // total)].append(n)
        done += tensors[n].nbytes
    groups = [s for s in shards if s]
    weight_map = {}
    for k, group in enumerate(groups):
        file = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: tensors[n] for n in group}, directory / file, metadata=meta)
        weight_map.update(dict.fromkeys(group, file))
    params = sum(t.size for t in tensors.values())
    index = {"metadata": {"total_parameters": params, "total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def write_tiny_model(
    directory: str | Path,
    arch: str,
    *,
    seed: int = 0,
    dtype: str = "float32",
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    vocab: int = 256,
    max_positions: int = 256,
    tie: bool | None = None,
    experts: int = 4,
    top_k: int = 2,
    sharded: bool = False,
    config_format: str = "v5",
    legacy_names: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """Write a random ``arch`` model into ``directory`` as transformers 5's
    ``save_pretrained`` would, and return its config dict.

    ``dtype`` is the stored dtype (float32, float16 or bfloat16). ``overrides``
    are config.json keys set after the defaults (e.g. ``sliding_window=None``,
    ``head_dim=32``, ``attention_bias=True``, ``rope_theta=5e5``,
    ``rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64}``), and
    the weights follow them. ``config_format="v4"`` writes the transformers 4
    form of the same config (see the module docstring). ``legacy_names``
    (GPT-2 only) writes the tensors as openai-community/gpt2's checkpoint has
    them: without the ``transformer.`` prefix, and with each layer's causal
    mask buffer ``h.N.attn.bias`` (1, 1, n_positions, n_positions), which a
    loader must ignore."""
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    if dtype not in _STORE_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_STORE_DTYPES)}, got {dtype!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tie = ARCHS[arch].tie if tie is None else tie
    cfg = _config(arch, hidden, layers, heads, kv_heads, intermediate, vocab, max_positions, tie, dtype, experts, top_k)
    cfg = _finish_config(arch, cfg, overrides, config_format)
    tensors = _weights(arch, _normalized(cfg), np.random.default_rng(seed))
    if legacy_names:
        if arch != "gpt2":
            raise ValueError(f"legacy_names applies to gpt2 only, not {arch!r}")
        tensors = {n.removeprefix("transformer."): t for n, t in tensors.items()}
        mask = np.tril(np.ones((max_positions, max_positions)))[None, None]
        tensors.update({f"h.{i}.attn.bias": mask for i in range(cfg["n_layer"])})
    store = _STORE_DTYPES[dtype]
    _save(directory, {n: np.ascontiguousarray(t.astype(store)) for n, t in tensors.items()}, sharded)
    (directory / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    gen = {k: cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if cfg.get(k) is not None}
    gen.update(_from_model_config=True, output_attentions=False, output_hidden_states=False, use_cache=True)
    gen["transformers_version"] = TRANSFORMERS_VERSION
    (directory / "generation_config.json").write_text(json.dumps(dict(sorted(gen.items())), indent=2) + "\n")
    return cfg


# ---------------------------------------------------------------- reading a directory


_READ_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}


def _read_tensors(directory: Path) -> dict[str, np.ndarray]:
    index = directory / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for file in files:
        for name, t in safetensors.deserialize((directory / file).read_bytes()):
            raw = np.frombuffer(bytes(t["data"]), dtype=_READ_DTYPES[t["dtype"]]).reshape(t["shape"])
            out[name] = raw.astype(np.float64)
    return out


def _normalized(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config with GPT-2's names mapped to the LLaMA ones and rope settings
    read from either the v5 ``rope_parameters`` or the v4 ``rope_theta`` /
    ``rope_scaling``, defaults filled in as transformers fills them."""
    c = dict(cfg)
    a = ARCHS[c["model_type"]]
    c.setdefault("tie_word_embeddings", a.tie)
    if a.gpt2:
        c.update(hidden_size=c["n_embd"], num_hidden_layers=c["n_layer"], num_attention_heads=c["n_head"])
        c.update(num_key_value_heads=c["n_head"], intermediate_size=c.get("n_inner") or 4 * c["n_embd"])
        return c
    c.setdefault("num_key_value_heads", c["num_attention_heads"])
    c["head_dim"] = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    rope = dict(c.get("rope_parameters") or {})
    if not rope:
        rope = dict(c.get("rope_scaling") or {})
        rope.setdefault("rope_theta", c.get("rope_theta", a.rope_theta))
        if "type" in rope:  # the oldest configs name it "type"
            rope.setdefault("rope_type", rope.pop("type"))
    rope.setdefault("rope_type", "default")
    rope.setdefault("partial_rotary_factor", c.get("partial_rotary_factor", 1.0))
    c["rope"] = rope
    return c


def _layer_windows(c: dict[str, Any]) -> list[int | None]:
    """Each layer's sliding window (None: full causal attention), as transformers 5 decides it."""
    n, mt, window = c["num_hidden_layers"], c["model_type"], c.get("sliding_window")
    if mt in ("qwen2", "qwen3") and not c.get("use_sliding_window"):
        window = None
    if window is None:
        return [None] * n
    if mt in ("mistral", "mixtral", "phi3"):
        return [window] * n
    types = c.get("layer_types") or [_default_layer_type(mt, c, i) for i in range(n)]
    return [window if t == "sliding_attention" else None for t in types]


# ---------------------------------------------------------------- blocks


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float, one_plus: bool = False) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * w (Gemma: * (1 + w))."""
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * (1.0 + w if one_plus else w)


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's gelu_new and Gemma's gelu_pytorch_tanh (the same function)."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """nn.Linear: w is (out, in)."""
    y = x @ w.T
    return y if b is None else y + b


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def rope_inv_freq(rope: dict[str, Any], head_dim: int) -> np.ndarray:
    """Inverse frequencies of the rotary dims, with linear or Llama-3 scaling."""
    dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
    inv = 1.0 / float(rope["rope_theta"]) ** (np.arange(0, dim, 2) / dim)
    kind = rope.get("rope_type", "default")
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / rope["factor"]
    if kind == "llama3":
        factor, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old / lo, inv / factor, inv)  # long waves: interpolate fully
        smooth = (old / wavelen - lo) / (hi - lo)
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)
    raise ValueError(f"the reference implements rope types default, linear and llama3, not {kind!r}")


def apply_rope(x: np.ndarray, inv_freq: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """x: (batch, heads, seq, head_dim); rotates the first 2*len(inv_freq) dims, NeoX half split."""
    angles = positions[:, None] * inv_freq[None, :]  # (seq, rot/2)
    cos, sin = np.cos(angles), np.sin(angles)
    rot = 2 * inv_freq.size
    half = rot // 2
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], axis=-1)


def causal_mask(seq: int, window: int | None) -> np.ndarray:
    """True where query i may see key j: j <= i, and i - window < j with a window."""
    i, j = np.arange(seq)[:, None], np.arange(seq)[None, :]
    visible = j <= i
    return visible & (j > i - window) if window is not None else visible


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, window: int | None = None, softcap: float | None = None
) -> np.ndarray:
    """q: (batch, heads, seq, d); k, v: (batch, kv_heads, seq, d). Returns (batch, seq, heads * d)."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # head h reads kv head h // rep
    scores = q @ k.transpose(0, 1, 3, 2) * scale
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    scores = np.where(causal_mask(q.shape[2], window), scores, -np.inf)
    out = softmax(scores) @ v
    b, h, s, d = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def swiglu(x: np.ndarray, gate: np.ndarray, up: np.ndarray, down: np.ndarray, act=silu, biases=(None, None, None)) -> np.ndarray:
    return linear(act(linear(x, gate, biases[0])) * linear(x, up, biases[1]), down, biases[2])


def mixtral_moe(x: np.ndarray, router: np.ndarray, experts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], top_k: int) -> np.ndarray:
    """Softmax over all experts, the top_k kept and renormalized, their SwiGLU outputs summed."""
    flat = x.reshape(-1, x.shape[-1])
    probs = softmax(linear(flat, router))
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :top_k]
    weights = np.take_along_axis(probs, top, axis=-1)
    weights /= weights.sum(axis=-1, keepdims=True)
    out = np.zeros_like(flat)
    for t in range(flat.shape[0]):
        for slot in range(top_k):
            w1, w2, w3 = experts[top[t, slot]]
            out[t] += weights[t, slot] * swiglu(flat[t], w1, w3, w2)
    return out.reshape(x.shape)


# ---------------------------------------------------------------- forward


def _gpt2_forward(c: dict[str, Any], w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    p = "transformer." if "transformer.wte.weight" in w else ""  # old Hub checkpoints lack the prefix
    h, nh, eps = c["n_embd"], c["n_head"], c["layer_norm_epsilon"]
    seq = ids.shape[1]
    x = w[p + "wte.weight"][ids] + w[p + "wpe.weight"][np.arange(seq)]
    for i in range(c["n_layer"]):
        pre = f"{p}h.{i}."
        y = layer_norm(x, w[pre + "ln_1.weight"], w[pre + "ln_1.bias"], eps)
        qkv = y @ w[pre + "attn.c_attn.weight"] + w[pre + "attn.c_attn.bias"]  # Conv1D: (in, out)
        q, k, v = (t.reshape(*t.shape[:2], nh, h // nh).transpose(0, 2, 1, 3) for t in np.split(qkv, 3, axis=-1))
        a = attention(q, k, v, scale=(h // nh) ** -0.5 if c.get("scale_attn_weights", True) else 1.0)
        x = x + a @ w[pre + "attn.c_proj.weight"] + w[pre + "attn.c_proj.bias"]
        y = layer_norm(x, w[pre + "ln_2.weight"], w[pre + "ln_2.bias"], eps)
        y = gelu_tanh(y @ w[pre + "mlp.c_fc.weight"] + w[pre + "mlp.c_fc.bias"])
        x = x + y @ w[pre + "mlp.c_proj.weight"] + w[pre + "mlp.c_proj.bias"]
    x = layer_norm(x, w[p + "ln_f.weight"], w[p + "ln_f.bias"], eps)
    return x @ w.get("lm_head.weight", w[p + "wte.weight"]).T


def _attention_block(c: dict[str, Any], a: Arch, w: dict[str, np.ndarray], pre: str, x: np.ndarray, window: int | None) -> np.ndarray:
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    b, s, _ = x.shape
    if a.fused:
        q, k, v = np.split(linear(x, w[pre + "qkv_proj.weight"]), [nh * hd, (nh + nkv) * hd], axis=-1)
    else:
        q, k, v = (linear(x, w[pre + n + ".weight"], w.get(pre + n + ".bias")) for n in ("q_proj", "k_proj", "v_proj"))
    q, k, v = (t.reshape(b, s, -1, hd).transpose(0, 2, 1, 3) for t in (q, k, v))
    if a.qk_norm:
        q, k = rms_norm(q, w[pre + "q_norm.weight"], c["rms_norm_eps"]), rms_norm(k, w[pre + "k_norm.weight"], c["rms_norm_eps"])
    inv_freq, pos = rope_inv_freq(c["rope"], hd), np.arange(s, dtype=np.float64)
    q, k = apply_rope(q, inv_freq, pos), apply_rope(k, inv_freq, pos)
    scale = c["query_pre_attn_scalar"] ** -0.5 if a.gemma else hd**-0.5
    out = attention(q, k, v, scale, window, c.get("attn_logit_softcapping") if a.gemma else None)
    return linear(out, w[pre + "o_proj.weight"], w.get(pre + "o_proj.bias"))


def _mlp_block(c: dict[str, Any], a: Arch, w: dict[str, np.ndarray], pre: str, x: np.ndarray) -> np.ndarray:
    if a.moe:
        moe = pre + "block_sparse_moe."
        ex = [tuple(w[f"{moe}experts.{e}.{n}.weight"] for n in ("w1", "w2", "w3")) for e in range(c["num_local_experts"])]
        return mixtral_moe(x, w[moe + "gate.weight"], ex, c["num_experts_per_tok"])
    if a.fused:
        gate, up = np.split(linear(x, w[pre + "mlp.gate_up_proj.weight"]), 2, axis=-1)
        return linear(up * silu(gate), w[pre + "mlp.down_proj.weight"])
    names = [pre + "mlp." + n for n in ("gate_proj", "up_proj", "down_proj")]
    act = gelu_tanh if a.gemma else silu
    return swiglu(x, *(w[n + ".weight"] for n in names), act=act, biases=tuple(w.get(n + ".bias") for n in names))


def _decoder_forward(c: dict[str, Any], w: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    a = ARCHS[c["model_type"]]
    eps = c["rms_norm_eps"]

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        return rms_norm(x, w[name], eps, one_plus=a.gemma)

    x = w["model.embed_tokens.weight"][ids]
    if a.gemma:
        x = x * math.sqrt(c["hidden_size"])
    for i, window in enumerate(_layer_windows(c)):
        pre = f"model.layers.{i}."
        y = _attention_block(c, a, w, pre + "self_attn.", norm(x, pre + "input_layernorm.weight"), window)
        if a.gemma:  # Gemma-2 normalizes each sublayer's output too
            x = x + norm(y, pre + "post_attention_layernorm.weight")
            x = x + norm(
                _mlp_block(c, a, w, pre, norm(x, pre + "pre_feedforward_layernorm.weight")), pre + "post_feedforward_layernorm.weight"
            )
        else:
            x = x + y
            x = x + _mlp_block(c, a, w, pre, norm(x, pre + "post_attention_layernorm.weight"))
    logits = norm(x, "model.norm.weight") @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).T
    cap = c.get("final_logit_softcapping") if a.gemma else None
    return cap * np.tanh(logits / cap) if cap else logits


def reference_logits(directory: str | Path, ids) -> np.ndarray:
    """float64 logits (batch, seq, vocab) of the model in ``directory`` for
    token ids of shape (batch, seq) or (seq,) (then batch is 1)."""
    directory = Path(directory)
    cfg = _normalized(json.loads((directory / "config.json").read_text()))
    ids = np.asarray(ids)
    if ids.ndim == 1:
        ids = ids[None, :]
    if ids.ndim != 2 or ids.shape[1] == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be integers of shape (batch, seq) or (seq,) with seq >= 1, got {ids.dtype} {ids.shape}")
    if ids.min() < 0 or ids.max() >= cfg["vocab_size"]:
        raise ValueError(f"token ids must lie in [0, {cfg['vocab_size']}), got [{ids.min()}, {ids.max()}]")
    forward = _gpt2_forward if ARCHS[cfg["model_type"]].gpt2 else _decoder_forward
    return forward(cfg, _read_tensors(directory), ids)


def reference_greedy(directory: str | Path, ids, new_tokens: int) -> list[int]:
    """Greedy decoding of one sequence: the ``new_tokens`` ids appended to
    ``ids`` (the full forward is recomputed each step)."""
    seq = [int(t) for t in np.asarray(ids).reshape(-1)]
    out = []
    for _ in range(new_tokens):
        nxt = int(np.argmax(reference_logits(directory, seq)[0, -1]))
        out.append(nxt)
        seq.append(nxt)
    return out

"""One declarative ModelSpec per architecture family, instead of a class per model.

A spec says how a family differs from the common pre-norm decoder (norm kind,
MLP activation and gating, learned or rotary positions, q/k norms, MoE) and
where each logical weight lives in a Hugging Face checkpoint. A weight's
*sources* are alternatives tried in order (names differ between checkpoint
generations); one alternative may name several tensors, concatenated along the
output axis (q, k and v into one projection; gate and up into one). ``{i}`` is
the layer index, ``{e}`` an expert index (the expert tensors are stacked).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["SPECS", "ModelSpec"]

Sources = tuple[tuple[str, ...], ...]  # alternatives, each a tuple of tensors to concatenate


def _one(*names: str) -> Sources:
    """Alternatives of one tensor each."""
    return tuple((n,) for n in names)


@dataclass(frozen=True)
class ModelSpec:
    family: str
    norm: str = "rms"  # "rms" or "layer" (epsilon and activation come from config.json)
    gated: bool = True  # gate and up projections (SwiGLU) or a plain up projection
    rotary: bool = True  # RoPE (NeoX layout) or learned absolute positions
    qk_norm: bool = False  # per-head RMSNorm of q and k before RoPE (Qwen3)
    moe: bool = False
    transposed: tuple[str, ...] = ()  # logical weights stored (in, out) (GPT-2's Conv1D), transposed on load
    # Prefixes tried in order for every name (GPT-2 checkpoints exist with and without "transformer.").
    prefixes: tuple[str, ...] = ("",)
    weights: Mapping[str, Sources] = field(default_factory=dict)
    # Tensors a checkpoint may hold that the model does not use (buffers saved by old versions).
    ignored_suffixes: tuple[str, ...] = ("rotary_emb.inv_freq",)


def _decoder(**extra: Sources) -> dict[str, Sources]:
    """The names of the LLaMA-style decoder that most families share."""
    layer = "model.layers.{i}."
    w: dict[str, Sources] = {
        "embed": _one("model.embed_tokens.weight"),
        "final_norm.weight": _one("model.norm.weight"),
        "lm_head": _one("lm_head.weight"),
        "attn_norm.weight": _one(layer + "input_layernorm.weight"),
        "mlp_norm.weight": _one(layer + "post_attention_layernorm.weight"),
        "qkv.weight": ((layer + "self_attn.q_proj.weight", layer + "self_attn.k_proj.weight", layer + "self_attn.v_proj.weight"),),
        "qkv.bias": ((layer + "self_attn.q_proj.bias", layer + "self_attn.k_proj.bias", layer + "self_attn.v_proj.bias"),),
        "o.weight": _one(layer + "self_attn.o_proj.weight"),
        "o.bias": _one(layer + "self_attn.o_proj.bias"),
        "up.weight": ((layer + "mlp.gate_proj.weight", layer + "mlp.up_proj.weight"),),
        "up.bias": ((layer + "mlp.gate_proj.bias", layer + "mlp.up_proj.bias"),),
        "down.weight": _one(layer + "mlp.down_proj.weight"),
        "down.bias": _one(layer + "mlp.down_proj.bias"),
    }
    w.update(extra)
    return w


_LAYER = "model.layers.{i}."
_LLAMA = _decoder()
_QWEN3 = _decoder(**{"q_norm.weight": _one(_LAYER + "self_attn.q_norm.weight"), "k_norm.weight": _one(_LAYER + "self_attn.k_norm.weight")})
_PHI3 = _decoder(
    **{
        "qkv.weight": _one(_LAYER + "self_attn.qkv_proj.weight"),
        "qkv.bias": _one(_LAYER + "self_attn.qkv_proj.bias"),
        "up.weight": _one(_LAYER + "mlp.gate_up_proj.weight"),
        "up.bias": _one(_LAYER + "mlp.gate_up_proj.bias"),
    }
)
# Mixtral: the router and the experts; per-expert tensors (w1 gate, w3 up, w2 down) as
# released, or the stacked tensors of transformers 5's fused experts.
_MOE = "model.layers.{i}.block_sparse_moe."
_MIXTRAL = {
    k: v for k, v in _decoder().items() if not k.startswith(("up.", "down."))
} | {
    "router.weight": _one(_MOE + "gate.weight", _LAYER + "mlp.gate.weight"),
    "experts.gate_up": ((_MOE + "experts.{e}.w1.weight", _MOE + "experts.{e}.w3.weight"), (_LAYER + "mlp.experts.gate_up_proj",)),
    "experts.down": ((_MOE + "experts.{e}.w2.weight",), (_LAYER + "mlp.experts.down_proj",)),
}  # fmt: skip
_H = "h.{i}."
_GPT2 = {
    "embed": _one("wte.weight"),
    "pos_embed": _one("wpe.weight"),
    "final_norm.weight": _one("ln_f.weight"),
    "final_norm.bias": _one("ln_f.bias"),
    "lm_head": _one("lm_head.weight"),
    "attn_norm.weight": _one(_H + "ln_1.weight"),
    "attn_norm.bias": _one(_H + "ln_1.bias"),
    "mlp_norm.weight": _one(_H + "ln_2.weight"),
    "mlp_norm.bias": _one(_H + "ln_2.bias"),
    "qkv.weight": _one(_H + "attn.c_attn.weight"),
    "qkv.bias": _one(_H + "attn.c_attn.bias"),
    "o.weight": _one(_H + "attn.c_proj.weight"),
    "o.bias": _one(_H + "attn.c_proj.bias"),
    "up.weight": _one(_H + "mlp.c_fc.weight"),
    "up.bias": _one(_H + "mlp.c_fc.bias"),
    "down.weight": _one(_H + "mlp.c_proj.weight"),
    "down.bias": _one(_H + "mlp.c_proj.bias"),
}

SPECS: dict[str, ModelSpec] = {
    "gpt2": ModelSpec(
        "gpt2", norm="layer", gated=False, rotary=False,
        transposed=("qkv.weight", "o.weight", "up.weight", "down.weight"), prefixes=("", "transformer."), weights=_GPT2, ignored_suffixes=("attn.bias", "attn.masked_bias"),
    ),
    "llama": ModelSpec("llama", weights=_LLAMA),
    "mistral": ModelSpec("mistral", weights=_LLAMA),
    "qwen2": ModelSpec("qwen2", weights=_LLAMA),
    "qwen3": ModelSpec("qwen3", qk_norm=True, weights=_QWEN3),
    "phi3": ModelSpec("phi3", weights=_PHI3),
    "mixtral": ModelSpec("mixtral", moe=True, weights=_MIXTRAL),
}  # fmt: skip

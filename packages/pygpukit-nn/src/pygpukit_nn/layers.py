"""Thin layer objects that hold GPUArrays and call the functional API: what a
model loader fills from a checkpoint and a model's forward calls. They own
no state beyond their weights (the KV cache is passed in), so one layer
serves every sequence of a batch."""

from __future__ import annotations

from typing import Any

import pygpukit as gp

from . import activations, attention, decode_attn, embedding, moe, norms
from .kv_cache import KVCache, PagedKVCache
from .positional import RotaryEmbedding

_ACTIVATIONS = {
    "silu": activations.silu,
    "gelu": activations.gelu,
    "gelu_tanh": lambda x: activations.gelu(x, "tanh"),
    "relu": activations.relu,
    "relu_squared": activations.relu_squared,
}
_GATED = {"silu": activations.swiglu, "gelu": activations.geglu, "gelu_tanh": lambda x: activations.geglu(x, None, "tanh")}


def _array(name: str, a: Any, ndim: int | None = None) -> gp.GPUArray:
    if not isinstance(a, gp.GPUArray):
        raise TypeError(f"{name} must be a GPUArray, got {type(a).__name__}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    return a


class Linear:
    """``y = x @ weight.T + bias`` with weight (out_features, in_features), as torch.nn.Linear;
    the gemm plugin serves it when installed (cuBLASLt, or the decode GEMV)."""

    def __init__(self, weight: gp.GPUArray, bias: gp.GPUArray | None = None) -> None:
        self.weight = _array("Linear: weight", weight, 2)
        if bias is not None and _array("Linear: bias", bias).shape != (weight.shape[0],):
            raise ValueError(f"Linear: bias must have shape ({weight.shape[0]},), got {bias.shape}")
        self.bias = bias

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    def __call__(self, x: gp.GPUArray) -> gp.GPUArray:
        return gp.linear(x, self.weight, self.bias)

    def __repr__(self) -> str:
        return f"Linear({self.in_features} -> {self.out_features}, {self.weight.dtype}, bias={self.bias is not None})"


class Embedding:
    """Token embedding lookup; ``as_lm_head`` gives the tied output projection."""

    def __init__(self, weight: gp.GPUArray) -> None:
        self.weight = _array("Embedding: weight", weight, 2)

    def __call__(self, ids: gp.GPUArray, check: bool = True) -> gp.GPUArray:
        return embedding.embedding(ids, self.weight, check)

    def as_lm_head(self, x: gp.GPUArray) -> gp.GPUArray:
        """Logits ``x @ weight.T`` (weights tied with the output projection)."""
        return embedding.lm_head(x, self.weight)

    def __repr__(self) -> str:
        return f"Embedding({self.weight.shape[0]}, {self.weight.shape[1]}, {self.weight.dtype})"


class RMSNorm:
    """RMSNorm over the last axis; ``add`` fuses the residual add before it."""

    def __init__(self, weight: gp.GPUArray | None, eps: float = 1e-6) -> None:
        self.weight = None if weight is None else _array("RMSNorm: weight", weight, 1)
        self.eps = float(eps)

    def __call__(self, x: gp.GPUArray) -> gp.GPUArray:
        return norms.rms_norm(x, self.weight, self.eps)

    def add(self, x: gp.GPUArray, residual: gp.GPUArray) -> tuple[gp.GPUArray, gp.GPUArray]:
        """``(rms_norm(x + residual), x + residual)``."""
        return norms.add_rms_norm(x, residual, self.weight, self.eps)


class LayerNorm:
    """LayerNorm over the last axis (weight and bias optional); ``add`` fuses the residual add."""

    def __init__(self, weight: gp.GPUArray | None = None, bias: gp.GPUArray | None = None, eps: float = 1e-5) -> None:
        self.weight = None if weight is None else _array("LayerNorm: weight", weight, 1)
        self.bias = None if bias is None else _array("LayerNorm: bias", bias, 1)
        self.eps = float(eps)

    def __call__(self, x: gp.GPUArray) -> gp.GPUArray:
        return norms.layer_norm(x, self.weight, self.bias, self.eps)

    def add(self, x: gp.GPUArray, residual: gp.GPUArray) -> tuple[gp.GPUArray, gp.GPUArray]:
        return norms.add_layer_norm(x, residual, self.weight, self.bias, self.eps)


class MLP:
    """The transformer feed-forward block. Gated (Llama, Qwen, Mistral, Gemma):
    ``down(act(gate(x)) * up(x))`` with gate and up fused into one projection
    (``gate_up``: weight (2 * intermediate, hidden), gate rows first; build it with
    ``MLP.gated_from(gate, up, down)`` from separate checkpoint tensors). Plain (GPT-2,
    Whisper): ``down(act(up(x)))``."""

    def __init__(self, up: Linear, down: Linear, activation: str = "silu", gated: bool = True) -> None:
        table = _GATED if gated else _ACTIVATIONS
        if activation not in table:
            raise ValueError(f"MLP: activation must be one of {', '.join(table)} (gated={gated}), got {activation!r}")
        width = up.out_features // 2 if gated else up.out_features
        if gated and up.out_features % 2:
            raise ValueError(f"MLP: a gated up projection has 2 * intermediate outputs, got {up.out_features}")
        if down.in_features != width or down.out_features != up.in_features:
            raise ValueError(f"MLP: down must map {width} -> {up.in_features}, got {down.in_features} -> {down.out_features}")
        self.up, self.down, self.activation, self.gated = up, down, activation, gated
        self._act = table[activation]

    @classmethod
    def gated_from(cls, gate: gp.GPUArray, up: gp.GPUArray, down: gp.GPUArray, activation: str = "silu") -> MLP:
        """From separate gate (I, H), up (I, H) and down (H, I) weights: gate and up are
        concatenated once, so a call makes one projection for both."""
        if gate.shape != up.shape or gate.dtype != up.dtype:
            raise ValueError(f"MLP: gate and up must match, got {gate.shape} {gate.dtype} and {up.shape} {up.dtype}")
        return cls(Linear(gp.concatenate([gate, up], axis=0)), Linear(down), activation, gated=True)

    def __call__(self, x: gp.GPUArray) -> gp.GPUArray:
        return self.down_proj(self.up(x))

    def down_proj(self, u: gp.GPUArray) -> gp.GPUArray:
        """The block after its up projection: ``down(act(u))`` for ``u = self.up(x)``."""
        return self.down(self._act(u))


class Attention:
    """The attention block of a decoder layer: one fused qkv projection, optional
    per-head RMSNorm of q and k (Qwen3, OLMo-2), RoPE, attention, the output
    projection. ``x`` is (batch, seq, hidden); ``positions`` (seq,) or (batch,
    seq) ints, host or device.

    Without a cache: causal prefill (``scaled_dot_product_attention``). With a
    ``KVCache`` / ``PagedKVCache``: the new k and v are appended to ``layer``
    (only the first ``counts[b]`` tokens of sequence b when given: a
    right-padded ragged batch), then up to 8 new tokens attend through
    ``decode_attention`` (split over the cached sequence); more tokens into an
    empty layer attend causally among themselves (a first prefill: padding
    after a sequence's tokens cannot reach them), and more tokens after
    cached ones through the prefill kernel over the gathered cache (all
    sequences must then have one length). ``window`` is a sliding window of
    that many keys (Mistral)."""

    def __init__(
        self,
        qkv: Linear,
        o: Linear,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        rope: RotaryEmbedding | None = None,
        q_norm: RMSNorm | None = None,
        k_norm: RMSNorm | None = None,
        window: int | None = None,
        scale: float | None = None,
    ) -> None:
        if num_heads % num_kv_heads:
            raise ValueError(f"Attention: num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
        if qkv.out_features != (num_heads + 2 * num_kv_heads) * head_dim:
            raise ValueError(f"Attention: qkv must have (num_heads + 2 * num_kv_heads) * head_dim = "
                             f"{(num_heads + 2 * num_kv_heads) * head_dim} outputs, got {qkv.out_features}")  # fmt: skip
        if o.in_features != num_heads * head_dim:
            raise ValueError(f"Attention: o must take num_heads * head_dim = {num_heads * head_dim} inputs, got {o.in_features}")
        if window is not None and window < 1:
            raise ValueError(f"Attention: window must be None or a positive number of keys, got {window}")
        self.qkv, self.o, self.rope, self.q_norm, self.k_norm = qkv, o, rope, q_norm, k_norm
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.window, self.scale = window, scale

    @classmethod
    def from_separate(
        cls, q: Linear, k: Linear, v: Linear, o: Linear, num_heads: int, num_kv_heads: int, head_dim: int, **kw: Any
    ) -> Attention:
        """From separate q, k and v projections (checkpoint tensors), concatenated once."""
        biases = [p.bias for p in (q, k, v)]
        if any(b is None for b in biases) and any(b is not None for b in biases):
            raise ValueError("Attention: q, k and v must all have a bias or none")
        bias = None if biases[0] is None else gp.concatenate(biases, axis=0)
        return cls(Linear(gp.concatenate([q.weight, k.weight, v.weight], axis=0), bias), o, num_heads, num_kv_heads, head_dim, **kw)

    def split_qkv(self, qkv: gp.GPUArray) -> tuple[gp.GPUArray, gp.GPUArray, gp.GPUArray]:
        """Views q (b, s, Hq, D), k and v (b, s, Hk, D) of the fused projection's output (b, s, (Hq + 2 Hk) D)."""
        b, s, _ = qkv.shape
        hq, hk, d = self.num_heads, self.num_kv_heads, self.head_dim
        q = qkv[..., : hq * d].reshape(b, s, hq, d)
        k = qkv[..., hq * d : (hq + hk) * d].reshape(b, s, hk, d)
        v = qkv[..., (hq + hk) * d :].reshape(b, s, hk, d)
        return q, k, v

    def __call__(
        self, x: gp.GPUArray, positions: Any, cache: KVCache | PagedKVCache | None = None, layer: int = 0, counts: Any = None
    ) -> gp.GPUArray:
        return self.attend(self.qkv(_array("Attention: x", x, 3)), positions, cache, layer, counts)

    def attend(
        self, qkv: gp.GPUArray, positions: Any, cache: KVCache | PagedKVCache | None = None, layer: int = 0, counts: Any = None
    ) -> gp.GPUArray:
        """The block after its qkv projection (``qkv``: (batch, seq, (Hq + 2 Hk) * D), as
        ``self.qkv(x)`` gives it; a model that fuses the norm into that projection
        calls this)."""
        hq, hk, d = self.num_heads, self.num_kv_heads, self.head_dim
        b, s, width = _array("Attention: qkv", qkv, 3).shape
        if width != (hq + 2 * hk) * d:
            raise ValueError(
                f"Attention: qkv must have (num_heads + 2 * num_kv_heads) * head_dim = {(hq + 2 * hk) * d} features, got {width}"
            )
        q, k, v = self.split_qkv(qkv)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.k_norm is not None:
            k = self.k_norm(k)
        # decode: RoPE and the append in one launch where a kernel takes them. Its queries sit at the last
        # s positions of every sequence, so a ragged append of several tokens (counts) takes the path below.
        if cache is not None and s <= decode_attn.MAX_TOKENS and (counts is None or s == 1):
            if self.rope is not None:
                cache.append_rotated(q, k, v, self.rope, positions, layer, counts)
            else:
                cache.append(k, v, layer, counts)
            return self.o(decode_attn.decode_attention(q, cache, layer, self.scale, self.window).reshape(b, s, hq * d))
        if self.rope is not None:
            q, k = self.rope(q, k, positions)
        window = None if self.window is None else (self.window - 1, 0)
        if cache is None or cache.max_length(layer) == 0:
            out = attention.scaled_dot_product_attention(q, k, v, causal=True, scale=self.scale, window=window, layout="bshd")
            if cache is not None:
                cache.append(k, v, layer, counts)
        else:  # more tokens after cached ones
            cache.append(k, v, layer, counts)
            lengths = cache.seq_lengths(layer)
            if (lengths != lengths[0]).any():
                raise ValueError(f"Attention: a prefill of {s} tokens over a cache needs one length per batch, got {lengths.tolist()}")
            kc, vc = cache.gather(layer)
            out = attention.scaled_dot_product_attention(
                q.transpose(0, 2, 1, 3), kc, vc, causal=True, scale=self.scale, window=window
            ).transpose(0, 2, 1, 3)
        return self.o(out.reshape(b, s, hq * d))


class MoE:
    """A mixture-of-experts MLP (Mixtral, Qwen-MoE): ``moe_forward`` over the
    router's top-k experts; w_gate_up (E, 2I, D) holds each expert's gate rows
    then its up rows, w_down (E, D, I). Needs pygpukit-gemm."""

    def __init__(
        self, router: Linear, w_gate_up: gp.GPUArray, w_down: gp.GPUArray, top_k: int, renormalize: bool = True, activation: str = "silu"
    ) -> None:
        self.router = router
        self.w_gate_up = _array("MoE: w_gate_up", w_gate_up, 3)
        self.w_down = _array("MoE: w_down", w_down, 3)
        self.top_k, self.renormalize, self.activation = top_k, renormalize, activation

    def __call__(self, x: gp.GPUArray) -> gp.GPUArray:
        return moe.moe_forward(
            x, self.router.weight, self.w_gate_up, self.w_down, self.top_k, renormalize=self.renormalize, activation=self.activation
        )

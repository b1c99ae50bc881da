"""Thin layer objects that hold GPUArrays and call the functional API: what a
model loader fills from a checkpoint and a model's forward calls. They own
no state beyond their weights (the KV cache is passed in), so one layer
serves every sequence of a batch."""

from __future__ import annotations

from typing import Any

import pygpukit as gp

from . import activations, embedding, norms

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
        return self.down(self._act(self.up(x)))

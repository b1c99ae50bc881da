"""A pygpukit-llm model with any mix of Triton and native ops (GPU only:
routing to Triton needs CUDA): prefill logits and a KV-cache decode step
agree with the all-native model within bfloat16 tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from triton_testing import rel_err

pytestmark = pytest.mark.skipif(gp.backend() != "cuda", reason="routing ops to Triton needs a CUDA GPU")

MIXES = [
    {"rms_norm": "triton", "add_rms_norm": "triton"},
    {"swiglu": "triton", "rope": "triton"},
    {"sdpa": "triton", "linear": "triton"},
    {"rms_norm": "triton", "add_rms_norm": "triton", "swiglu": "triton", "rope": "triton", "sdpa": "triton", "linear": "triton"},
]


def _logits(model, ids):
    cache = model.new_cache(1, 64)
    prefill = model(gp.from_numpy(ids[:, :-1]), None, cache).astype(gp.float32).to_numpy()[0, -1]
    pos = gp.from_numpy(np.array([[ids.shape[1] - 1]], np.int32))
    step = model(gp.from_numpy(np.ascontiguousarray(ids[:, -1:])), pos, cache).astype(gp.float32).to_numpy()[0, -1]
    return prefill, step


@pytest.mark.parametrize("routes", MIXES, ids=lambda r: "+".join(sorted(r)))
def test_llm_with_triton_and_native_ops(tmp_path, triton_plugin, routes):
    pygpukit_llm = pytest.importorskip("pygpukit_llm")
    from llm_testing import write_tiny_model

    write_tiny_model(tmp_path, "qwen2", seed=9, hidden=256, heads=4, kv_heads=2, intermediate=512, vocab=300, layers=2)
    model = pygpukit_llm.load(tmp_path, "bfloat16")
    ids = np.random.default_rng(2).integers(0, 300, (1, 40)).astype(np.int32)
    native = _logits(model, ids)
    with gp.routing(**routes):
        mixed = _logits(model, ids)
    for want, got in zip(native, mixed):
        assert rel_err(got, want) < 3e-2

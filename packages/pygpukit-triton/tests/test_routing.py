"""The plugin in the registry: every Triton implementation is listed under
backend "triton" beside the native ones, ranks below them (it runs only
where routed), routing to it works on a GPU and is refused with the reason
elsewhere; a transformer block (norms, attention with RoPE, gated MLP)
gives the same result with any mix of Triton and native ops."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.registry import REGISTRY
from triton_testing import rel_err

OPS = {"rms_norm", "layer_norm", "add_rms_norm", "add_layer_norm", "softmax", "swiglu", "geglu", "gelu", "rope", "matmul", "linear", "sdpa"}


def test_every_triton_implementation_is_listed_beside_the_native_ones(triton_plugin):
    rows = gp.ops.table()
    tri = {r.op: r for r in rows if r.backend == "triton"}
    assert set(tri) == OPS
    for op, row in tri.items():
        assert row.impl == "triton:triton" and row.priority == -1 and row.min_sm == 80
        assert any(r.op == op and r.backend == "cuda" for r in rows), op  # the native side
        if gp.backend() == "cpu":
            assert row.status == "not here: backend 'triton' needs a CUDA GPU (running on the CPU backend)"


def test_pygpukit_ops_command_shows_both_backends(triton_plugin):
    run = subprocess.run([sys.executable, "-m", "pygpukit", "ops"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    if "triton:triton" not in run.stdout:
        pytest.skip("pygpukit-triton is on the path but not installed with its entry point (the command loads installed plugins)")
    lines = [ln for ln in run.stdout.splitlines() if "rms_norm" in ln]
    assert any("triton" in ln for ln in lines) and any("nn:kernel" in ln or "cuda" in ln for ln in lines)


def test_unrouted_calls_never_take_triton(triton_plugin, rng):
    x = gp.from_numpy(rng.standard_normal((4, 64)).astype(gp.bfloat16))
    w = gp.from_numpy(rng.standard_normal(64).astype(gp.bfloat16))
    assert gp.ops.which("rms_norm", x, w, 1e-6) != "triton:triton"
    assert gp.ops.which("matmul", x, w.reshape(64, 1)) != "triton:triton"


@pytest.mark.skipif(gp.backend() != "cpu", reason="the CPU backend's refusal")
def test_routing_to_triton_without_a_gpu_says_why(triton_plugin):
    with pytest.raises(gp.RouteError, match=r"cannot route 'rms_norm' to 'triton' here .*needs a CUDA GPU"):
        gp.route("rms_norm", "triton")


def _block(rng, dtype):
    """A decoder block of pygpukit-nn layers; returns forward(x, positions)."""
    from pygpukit_nn import layers
    from pygpukit_nn.positional import RotaryEmbedding

    hid, heads, kv, hd, inter = 256, 8, 2, 32, 512
    w = lambda *s: gp.from_numpy((rng.standard_normal(s) / np.sqrt(s[-1])).astype(dtype))
    attn = layers.Attention(layers.Linear(w((heads + 2 * kv) * hd, hid)), layers.Linear(w(hid, heads * hd)), heads, kv, hd,
                            rope=RotaryEmbedding(hd, 512))  # fmt: skip
    mlp = layers.MLP(layers.Linear(w(2 * inter, hid)), layers.Linear(w(hid, inter)), "silu", gated=True)
    norm1 = layers.RMSNorm(gp.from_numpy((1 + 0.1 * rng.standard_normal(hid)).astype(dtype)))
    norm2 = layers.RMSNorm(gp.from_numpy((1 + 0.1 * rng.standard_normal(hid)).astype(dtype)))

    def forward(x, positions):
        a = attn(norm1(x), positions)
        normed, h = norm2.add(a, x)
        return h + mlp(normed)

    return forward


MIXES = {
    "all": dict(rms_norm="triton", add_rms_norm="triton", rope="triton", sdpa="triton", swiglu="triton", linear="triton"),
    "norms_and_mlp": dict(rms_norm="triton", add_rms_norm="triton", swiglu="triton"),
    "attention": dict(rope="triton", sdpa="triton"),
    "projections": dict(linear="triton"),
}


@pytest.mark.gpu
@pytest.mark.usefixtures("need_triton")
@pytest.mark.parametrize("dtype", [np.float16, gp.bfloat16])
@pytest.mark.parametrize("mix", sorted(MIXES))
def test_transformer_block_with_any_mix_of_triton_and_native(triton_plugin, rng, dtype, mix):
    forward = _block(rng, dtype)
    x = gp.from_numpy(rng.standard_normal((2, 48, 256)).astype(dtype))
    pos = np.arange(48)
    native = forward(x, pos).to_numpy()
    with gp.routing(**MIXES[mix]):
        assert REGISTRY.routes() == MIXES[mix]
        if "rms_norm" in MIXES[mix]:
            assert gp.ops.which("rms_norm", x, x[0, 0], 1e-6) == "triton:triton"
        mixed = forward(x, pos).to_numpy()
    # bfloat16: each op rounds its output to 8 bits; the block chains about ten of them
    assert rel_err(mixed, native) < (3e-2 if np.dtype(dtype) == np.dtype(gp.bfloat16) else 1e-2)
    assert np.isfinite(mixed.astype(np.float32)).all()


@pytest.mark.gpu
@pytest.mark.usefixtures("need_triton")
def test_route_picks_triton_and_unroute_restores(triton_plugin, rng):
    x = gp.from_numpy(rng.standard_normal((8, 512)).astype(gp.bfloat16))
    w = gp.from_numpy(rng.standard_normal(512).astype(gp.bfloat16))
    native = gp.nn.rms_norm(x, w, 1e-6).to_numpy()
    gp.route("rms_norm", "triton")
    try:
        assert gp.ops.which("rms_norm", x, w, 1e-6) == "triton:triton"
        routed = gp.nn.rms_norm(x, w, 1e-6).to_numpy()
    finally:
        gp.route("rms_norm", None)
    assert gp.ops.which("rms_norm", x, w, 1e-6) != "triton:triton"
    assert rel_err(routed, native) < 1e-2

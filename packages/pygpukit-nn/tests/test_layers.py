"""The layer objects against float64 NumPy: Linear, Embedding, RMSNorm and
LayerNorm (with the fused residual add), MLP gated and plain."""

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit_nn import layers


def _silu(x):
    return x / (1 + np.exp(-x))


def test_linear_norms_embedding(rng):
    x, w, b = rand(rng, (3, 4, 16), np.float32), rand(rng, (8, 16), np.float32), rand(rng, (8,), np.float32)
    lin = layers.Linear(gp.from_numpy(w.astype(np.float32)), gp.from_numpy(b.astype(np.float32)))
    assert (lin.in_features, lin.out_features) == (16, 8) and "16 -> 8" in repr(lin)
    assert rel_err(lin(gp.from_numpy(x.astype(np.float32))).to_numpy(), x @ w.T + b) < 1e-5
    gx, gr = gp.from_numpy(x.astype(np.float32)), gp.from_numpy(x[::-1].astype(np.float32).copy())
    g = rand(rng, (16,), np.float32)
    rms = layers.RMSNorm(gp.from_numpy(g.astype(np.float32)), 1e-5)
    ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * g
    assert rel_err(rms(gx).to_numpy(), ref) < 1e-5
    y, h = rms.add(gx, gr)
    hh = x + x[::-1]
    assert rel_err(h.to_numpy(), hh) < 1e-6
    assert rel_err(y.to_numpy(), hh / np.sqrt((hh * hh).mean(-1, keepdims=True) + 1e-5) * g) < 1e-5
    ln = layers.LayerNorm(None, gp.from_numpy(g.astype(np.float32)))
    c = x - x.mean(-1, keepdims=True)
    assert rel_err(ln(gx).to_numpy(), c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) + g) < 1e-5
    table = rand(rng, (50, 16), np.float32)
    emb = layers.Embedding(gp.from_numpy(table.astype(np.float32)))
    ids = np.array([[3, 49, 0], [7, 7, 1]], dtype=np.int32)
    np.testing.assert_array_equal(emb(gp.from_numpy(ids)).to_numpy(), table[ids].astype(np.float32))
    assert rel_err(emb.as_lm_head(gx).to_numpy(), x @ table.T) < 1e-5


@pytest.mark.parametrize("dtype", [np.float32, gp.bfloat16])
def test_mlp_gated_and_plain(rng, dtype):
    hdim, inter = 32, 48
    x = rand(rng, (5, hdim), dtype)
    gate, up, down = rand(rng, (inter, hdim), dtype, 0.3), rand(rng, (inter, hdim), dtype, 0.3), rand(rng, (hdim, inter), dtype, 0.3)
    mlp = layers.MLP.gated_from(*(gp.from_numpy(a.astype(dtype)) for a in (gate, up, down)))
    ref = (_silu(x @ gate.T) * (x @ up.T)) @ down.T
    tol = 1e-5 if dtype == np.float32 else 3e-2  # bf16: three roundings of intermediate products
    assert rel_err(mlp(gp.from_numpy(x.astype(dtype))).to_numpy(), ref) < tol
    plain = layers.MLP(
        layers.Linear(gp.from_numpy(up.astype(dtype))), layers.Linear(gp.from_numpy(down.astype(dtype))), "relu", gated=False
    )
    assert rel_err(plain(gp.from_numpy(x.astype(dtype))).to_numpy(), np.maximum(x @ up.T, 0) @ down.T) < tol


def test_errors():
    w = gp.zeros((8, 4), gp.float32)
    for call, exc, match in [
        (lambda: layers.Linear(np.zeros((8, 4))), TypeError, "Linear: weight must be a GPUArray"),
        (lambda: layers.Linear(gp.zeros((8,), gp.float32)), ValueError, "must be 2-D"),
        (lambda: layers.Linear(w, gp.zeros((4,), gp.float32)), ValueError, r"bias must have shape \(8,\)"),
        (
            lambda: layers.MLP(layers.Linear(w), layers.Linear(gp.zeros((4, 4), gp.float32)), "swish"),
            ValueError,
            "activation must be one of",
        ),
        (lambda: layers.MLP(layers.Linear(w), layers.Linear(gp.zeros((4, 5), gp.float32))), ValueError, "down must map 4 -> 4"),
        (lambda: layers.MLP(layers.Linear(gp.zeros((7, 4), gp.float32)), layers.Linear(w)), ValueError, "2 \\* intermediate"),
        (lambda: layers.MLP.gated_from(w, gp.zeros((8, 5), gp.float32), w), ValueError, "gate and up must match"),
        (lambda: layers.RMSNorm(gp.zeros((2, 2), gp.float32)), ValueError, "must be 1-D"),
    ]:
        with pytest.raises(exc, match=match):
            call()

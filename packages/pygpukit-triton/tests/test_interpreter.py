"""The Triton ops and user kernels on the CPU backend, run by Triton's interpreter
(TRITON_INTERPRET=1) on pygpukit's host-memory arrays: no GPU, no PyTorch.
Each op against a float64 NumPy reference and against pygpukit-nn's op."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from triton_testing import TOL, f64, rand, ref_attention, ref_gelu, ref_layer, ref_rms, ref_rope, ref_silu, ref_softmax, rel_err

pytestmark = pytest.mark.usefixtures("need_triton")
if gp.backend() != "cpu":
    pytest.skip("interpreter tests: the CPU backend (GPU runs are in test_gpu.py)", allow_module_level=True)

FLOATS = [np.float32, np.float16, gp.bfloat16]
# Triton 3.6's interpreter turns a loop bound (a 1-element array) into a Python int with
# int(ndarray), which NumPy 2.4 rejects: kernels with a runtime-bounded loop (matmul, attention)
# cannot run under it there.
LOOPS_OK = tuple(int(p) for p in np.__version__.split(".")[:2]) < (2, 4)
LOOP_REASON = f"Triton 3.6's interpreter converts loop bounds with int(1-element ndarray), an error in NumPy {np.__version__}"
# The interpreter multiplies bfloat16 tl.dot operands as their uint16 bit patterns.
BF16_DOT_REASON = "Triton 3.6's interpreter computes tl.dot on bfloat16 bit patterns (uint16), not values"


def ops():
    from pygpukit_triton import ops

    return ops


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layer", [False, True])
def test_norms_against_float64_and_nn(rng, dtype, layer):
    import pygpukit_nn.norms as nn

    dt = np.dtype(dtype)
    wide = rand(rng, (6, 2 * 72), dt)
    x = gp.from_numpy(wide)[:, 5:77]  # rows with a stride of 144 elements: read in place
    xh = wide[:, 5:77]
    w = gp.from_numpy(rand(rng, 72, np.float32))
    b = gp.from_numpy(rand(rng, 72, dt))
    if layer:
        got = ops().layer_norm(x, w, b, 1e-5)
        ref, native = ref_layer(xh, w, b, 1e-5), nn.reference_layer_norm(x, w, b, 1e-5)
    else:
        got = ops().rms_norm(x, w, 1e-6)
        ref, native = ref_rms(xh, w, 1e-6), nn.reference_rms_norm(x, w, 1e-6)
    assert got.dtype == dt and got.shape == (6, 72)
    assert rel_err(got.to_numpy(), ref) < TOL[dt]
    assert rel_err(got.to_numpy(), native.to_numpy()) < TOL[dt]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layer", [False, True])
def test_fused_add_norms_return_the_rounded_sum(rng, dtype, layer):
    dt = np.dtype(dtype)
    xh, rh = rand(rng, (3, 5, 40), dt), rand(rng, (3, 5, 40), dt)
    x, r = gp.from_numpy(xh), gp.from_numpy(rh)
    w = gp.from_numpy(rand(rng, 40, dt))
    y, h = ops().add_layer_norm(x, r, w, None, 1e-5) if layer else ops().add_rms_norm(x, r, w, 1e-6)
    hsum = (xh.astype(np.float32) + rh.astype(np.float32)).astype(dt)
    assert rel_err(h.to_numpy(), hsum) < TOL[dt]
    ref = ref_layer(hsum, w, None, 1e-5) if layer else ref_rms(hsum, w, 1e-6)
    assert rel_err(y.to_numpy(), ref) < TOL[dt]


def test_norm_without_weight_and_errors(rng):
    x = gp.from_numpy(rand(rng, (4, 33), np.float32))
    assert rel_err(ops().rms_norm(x, None, 1e-6).to_numpy(), ref_rms(x, None, 1e-6)) < 2e-5
    with pytest.raises(ValueError, match=r"weight must have shape \(33,\)"):
        ops().rms_norm(x, gp.from_numpy(np.ones(32, np.float32)), 1e-6)
    with pytest.raises(TypeError, match="x must be a GPUArray"):
        ops().layer_norm(np.ones((2, 3)), None, None, 1e-5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax_rows(rng, dtype):
    dt = np.dtype(dtype)
    xh = rand(rng, (7, 50), dt, scale=3)
    xh[2, 10:] = -np.inf  # a masked tail
    got = ops().softmax(gp.from_numpy(xh))
    assert rel_err(got.to_numpy(), ref_softmax(xh)) < TOL[dt]
    assert rel_err(got.to_numpy(), gp.softmax(gp.from_numpy(xh)).to_numpy()) < TOL[dt]
    with pytest.raises(ValueError, match="last axis"):
        ops().softmax(gp.from_numpy(xh), axis=0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_swiglu_geglu_gelu(rng, dtype):
    import pygpukit_nn.activations as nn

    dt = np.dtype(dtype)
    gu = rand(rng, (5, 2 * 48), dt)
    g, u = gu[:, :48], gu[:, 48:]
    fused = ops().swiglu(gp.from_numpy(gu))
    assert rel_err(fused.to_numpy(), ref_silu(g) * f64(u)) < TOL[dt]
    assert rel_err(fused.to_numpy(), nn.reference_swiglu(gp.from_numpy(gu)).to_numpy()) < TOL[dt]
    sep = ops().swiglu(gp.from_numpy(np.ascontiguousarray(g)), gp.from_numpy(np.ascontiguousarray(u)))
    assert rel_err(sep.to_numpy(), fused.to_numpy()) == 0
    for approx in ("none", "tanh"):
        got = ops().geglu(gp.from_numpy(gu), None, approx)
        assert rel_err(got.to_numpy(), ref_gelu(g, approx) * f64(u)) < TOL[dt]
        assert rel_err(ops().gelu(gp.from_numpy(np.ascontiguousarray(g)), approx).to_numpy(), ref_gelu(g, approx)) < TOL[dt]
    with pytest.raises(ValueError, match="approximate"):
        ops().gelu(gp.from_numpy(gu), "fast")
    with pytest.raises(ValueError, match="must be even"):
        ops().swiglu(gp.from_numpy(rand(rng, (2, 5), dt)))


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_rope_in_place_on_qkv_views(rng, layout, dtype):
    from pygpukit_nn import positional

    dt = np.dtype(dtype)
    b, s, hq, hk, d, rot = 2, 5, 3, 1, 16, 12
    qkv = rand(rng, (b, s, (hq + 2 * hk) * d), dt)
    inv, factor = positional.rope_frequencies(rot)
    cs = positional.rope_cos_sin(inv, 32, factor)
    pos = np.array([[0, 3, 31, 40, 7], [1, 2, 3, 4, -1]], dtype=np.int64)  # 40 and -1: outside the cache
    dev = gp.from_numpy(qkv)
    q = dev[..., : hq * d].reshape(b, s, hq, d)
    k = dev[..., hq * d : (hq + hk) * d].reshape(b, s, hk, d)
    q2, k2 = ops().rope(q, k, cs, gp.from_numpy(pos), layout, rot)
    assert q2 is q and k2 is k
    out = dev.to_numpy()
    qr = ref_rope(qkv[..., : hq * d].reshape(b, s, hq, d), cs, pos, layout, rot)
    kr = ref_rope(qkv[..., hq * d : (hq + hk) * d].reshape(b, s, hk, d), cs, pos, layout, rot)
    assert rel_err(out[..., : hq * d].reshape(b, s, hq, d), qr) < TOL[dt]
    assert rel_err(out[..., hq * d : (hq + hk) * d].reshape(b, s, hk, d), kr) < TOL[dt]
    assert np.array_equal(out[..., (hq + hk) * d :], qkv[..., (hq + hk) * d :])  # v untouched
    native = gp.from_numpy(qkv)
    nq = native[..., : hq * d].reshape(b, s, hq, d)
    nk = native[..., hq * d : (hq + hk) * d].reshape(b, s, hk, d)
    positional.reference(nq, nk, cs, gp.from_numpy(pos), layout, rot)
    assert rel_err(out, native.to_numpy()) < TOL[dt]


@pytest.mark.skipif(not LOOPS_OK, reason=LOOP_REASON)
@pytest.mark.parametrize("dtype", [np.float16, pytest.param(gp.bfloat16, marks=pytest.mark.skip(reason=BF16_DOT_REASON))])
def test_matmul_batched_and_broadcast(rng, dtype):
    dt = np.dtype(dtype)
    a, b = rand(rng, (3, 37, 40), dt), rand(rng, (40, 29), dt)
    got = ops().matmul(gp.from_numpy(a), gp.from_numpy(b))
    assert got.shape == (3, 37, 29) and got.dtype == dt
    assert rel_err(got.to_numpy(), f64(a) @ f64(b)) < 4e-3
    bt = gp.from_numpy(rand(rng, (29, 40), dt)).T  # a transposed view: strides, no copy
    assert rel_err(ops().matmul(gp.from_numpy(a[0]), bt).to_numpy(), f64(a[0]) @ f64(bt.to_numpy())) < 4e-3


@pytest.mark.skipif(not LOOPS_OK, reason=LOOP_REASON)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize(("sq", "sk"), [(21, 30), (40, 24), (64, 64)])  # 40 > 24: the first causal queries see no key
def test_flash_attention_gqa(rng, causal, layout, sq, sk):
    from pygpukit_nn import attention

    dt = np.dtype(np.float16)
    q, k, v = rand(rng, (2, 4, sq, 32), dt), rand(rng, (2, 2, sk, 32), dt), rand(rng, (2, 2, sk, 32), dt)
    ref = ref_attention(q, k, v, causal)
    tr = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3))) if layout == "bshd" else (lambda a: a)
    got = ops().sdpa(*(gp.from_numpy(tr(a)) for a in (q, k, v)), None, causal, None, None, None, layout).to_numpy()
    assert rel_err(tr(got), ref) < 4e-3 if layout == "bhsd" else rel_err(got, tr(ref)) < 4e-3
    native = attention.reference(*(gp.from_numpy(a) for a in (q, k, v)), None, causal)
    assert rel_err(tr(got) if layout == "bhsd" else got, tr(native.to_numpy())) < 4e-3


def test_user_vector_add_by_launch_and_direct_call(rng):
    import triton
    import triton.language as tl
    import user_kernels

    import pygpukit_triton as pt

    n = 1000
    x, y = rand(rng, n, np.float32), rand(rng, n, np.float32)
    gx, gy, out = gp.from_numpy(x), gp.from_numpy(y), gp.empty((n,), gp.float32)
    pt.launch(user_kernels.vector_add, (triton.cdiv(n, 256),), gx, gy, out, n, BLOCK=256)
    assert np.array_equal(out.to_numpy(), x + y)
    out2 = gp.empty((n,), gp.float32)
    user_kernels.vector_add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](pt.tensor(gx), pt.tensor(gy), pt.tensor(out2), n, BLOCK=128)
    assert np.array_equal(out2.to_numpy(), x + y)
    assert isinstance(tl.float32, tl.dtype)


def test_user_2d_kernel_with_strides(rng):
    import triton
    import user_kernels

    import pygpukit_triton as pt

    a = gp.from_numpy(rand(rng, (20, 33), np.float32)).T  # (33, 20) with strides (1, 33)
    out = gp.empty((33, 20), gp.float32)
    ta = pt.tensor(a)
    pt.launch(user_kernels.scale_2d, (triton.cdiv(33, 16), triton.cdiv(20, 16)), a, out, 33, 20, *ta.stride(), *pt.tensor(out).stride(),
              2.5, BM=16, BN=16)  # fmt: skip
    assert np.allclose(out.to_numpy(), 2.5 * a.to_numpy() + 1.0, rtol=1e-6)


def test_without_the_interpreter_the_cpu_backend_refuses(monkeypatch, rng):
    import pygpukit_triton as pt

    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(pt.TritonBackendError, match=r"need a CUDA GPU.*TRITON_INTERPRET=1"):
        ops().rms_norm(gp.from_numpy(rand(rng, (2, 8), np.float32)), None, 1e-6)

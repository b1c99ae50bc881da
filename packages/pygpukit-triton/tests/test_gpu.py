"""On the GPU (Triton compiles and runs for real): each Triton op against a
float64 NumPy reference and against the native op; user kernels (vector
add, a 2-D kernel with strides, an autotuned one) by ``launch`` and by a
direct call; the cached launcher; the stream a launch runs on."""

from __future__ import annotations

import numpy as np
import pytest
import user_kernels

import pygpukit as gp
from triton_testing import TOL, f64, rand, ref_attention, ref_gelu, ref_layer, ref_rms, ref_rope, ref_silu, ref_softmax, rel_err

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("need_triton")]
FLOATS = [np.float32, np.float16, gp.bfloat16]
HALF = [np.float16, gp.bfloat16]
# matmul / attention: float32 accumulation over K (or keys), output rounded once; attention's
# P is rounded to the dtype before P @ V (as flash-attn), one more half-precision rounding.
MM_TOL = {np.dtype(np.float16): 3e-3, np.dtype(gp.bfloat16): 2e-2}


def ops():
    from pygpukit_triton import ops

    return ops


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(37, 1000), (4, 8192), (3, 5, 96)])
def test_norms(rng, dtype, shape):
    dt = np.dtype(dtype)
    n = shape[-1]
    xh, rh = rand(rng, shape, dt), rand(rng, shape, dt)
    x, r = gp.from_numpy(xh), gp.from_numpy(rh)
    w, b = gp.from_numpy(rand(rng, n, np.float32)), gp.from_numpy(rand(rng, n, dt))
    y = ops().rms_norm(x, w, 1e-6)
    assert rel_err(y.to_numpy(), ref_rms(xh, w, 1e-6)) < TOL[dt]
    assert rel_err(y.to_numpy(), gp.nn.rms_norm(x, w, 1e-6).to_numpy()) < TOL[dt]
    y = ops().layer_norm(x, w, b, 1e-5)
    assert rel_err(y.to_numpy(), ref_layer(xh, w, b, 1e-5)) < TOL[dt]
    assert rel_err(y.to_numpy(), gp.nn.layer_norm(x, w, b, 1e-5).to_numpy()) < TOL[dt]
    hsum = (xh.astype(np.float32) + rh.astype(np.float32)).astype(dt)
    for fused, native, ref in (
        (ops().add_rms_norm(x, r, w, 1e-6), gp.nn.add_rms_norm(x, r, w, 1e-6), ref_rms(hsum, w, 1e-6)),
        (ops().add_layer_norm(x, r, w, b, 1e-5), gp.nn.add_layer_norm(x, r, w, b, 1e-5), ref_layer(hsum, w, b, 1e-5)),
    ):
        assert np.array_equal(fused[1].to_numpy(), native[1].to_numpy())  # x + residual rounded once: exact
        assert rel_err(fused[0].to_numpy(), ref) < TOL[dt]
        assert rel_err(fused[0].to_numpy(), native[0].to_numpy()) < TOL[dt]


@pytest.mark.parametrize("dtype", FLOATS)
def test_softmax(rng, dtype):
    dt = np.dtype(dtype)
    xh = rand(rng, (64, 3000), dt, scale=4)
    xh[5, 100:] = -np.inf
    got = ops().softmax(gp.from_numpy(xh))
    assert rel_err(got.to_numpy(), ref_softmax(xh)) < TOL[dt]
    assert rel_err(got.to_numpy(), gp.softmax(gp.from_numpy(xh)).to_numpy()) < TOL[dt]


@pytest.mark.parametrize("dtype", FLOATS)
def test_activations(rng, dtype):
    dt = np.dtype(dtype)
    gu = rand(rng, (33, 2 * 1100), dt, scale=2)
    g, u = gu[:, :1100], gu[:, 1100:]
    got = ops().swiglu(gp.from_numpy(gu))
    assert rel_err(got.to_numpy(), ref_silu(g) * f64(u)) < TOL[dt]
    assert rel_err(got.to_numpy(), gp.nn.swiglu(gp.from_numpy(gu)).to_numpy()) < TOL[dt]
    for approx in ("none", "tanh"):
        got = ops().geglu(gp.from_numpy(gu), None, approx)
        assert rel_err(got.to_numpy(), ref_gelu(g, approx) * f64(u)) < TOL[dt]
        assert rel_err(got.to_numpy(), gp.nn.geglu(gp.from_numpy(gu), None, approx).to_numpy()) < TOL[dt]
        gg = gp.from_numpy(np.ascontiguousarray(g))
        assert rel_err(ops().gelu(gg, approx).to_numpy(), ref_gelu(g, approx)) < TOL[dt]
        assert rel_err(ops().gelu(gg, approx).to_numpy(), gp.nn.gelu(gg, approx).to_numpy()) < TOL[dt]
        with gp.routing(gelu="triton"):
            assert gp.ops.which("gelu", gg, approx) == "triton:triton"
            assert rel_err(gp.nn.gelu(gg, approx).to_numpy(), ref_gelu(g, approx)) < TOL[dt]


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_rope(rng, layout, dtype):
    from pygpukit_nn import positional

    dt = np.dtype(dtype)
    b, s, hq, hk, d = 2, 40, 8, 2, 128
    qkv = rand(rng, (b, s, (hq + 2 * hk) * d), dt)
    inv, factor = positional.rope_frequencies(d)
    cs = positional.rope_cos_sin(inv, 64, factor)
    pos = rng.integers(-2, 70, size=(b, s)).astype(np.int32)  # some outside the cache
    outs = []
    for fn in (ops().rope, positional.rope_cuda):
        dev = gp.from_numpy(qkv)
        q = dev[..., : hq * d].reshape(b, s, hq, d)
        k = dev[..., hq * d : (hq + hk) * d].reshape(b, s, hk, d)
        fn(q, k, cs, gp.from_numpy(pos), layout, d)
        outs.append(dev.to_numpy())
    ref_q = ref_rope(qkv[..., : hq * d].reshape(b, s, hq, d), cs, pos, layout, d)
    assert rel_err(outs[0][..., : hq * d].reshape(b, s, hq, d), ref_q) < TOL[dt]
    assert rel_err(outs[0], outs[1]) < TOL[dt]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(("sa", "sb"), [((257, 300), (300, 129)), ((3, 64, 128), (128, 96)), ((2, 1, 33, 64), (4, 64, 16))])
def test_matmul(rng, dtype, sa, sb):
    dt = np.dtype(dtype)
    a, b = rand(rng, sa, dt), rand(rng, sb, dt)
    got = ops().matmul(gp.from_numpy(a), gp.from_numpy(b))
    ref = f64(a) @ f64(b)
    assert got.shape == ref.shape and got.dtype == dt
    assert rel_err(got.to_numpy(), ref) < MM_TOL[dt]
    assert rel_err(got.to_numpy(), gp.matmul(gp.from_numpy(a), gp.from_numpy(b)).to_numpy()) < MM_TOL[dt]


@pytest.mark.parametrize("dtype", HALF)
def test_linear_reads_the_weight_transposed_in_place(rng, dtype):
    dt = np.dtype(dtype)
    x, w, bias = rand(rng, (2, 7, 96), dt), rand(rng, (80, 96), dt), rand(rng, 80, dt)
    got = ops().linear(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(bias))
    assert rel_err(got.to_numpy(), f64(x) @ f64(w).T + f64(bias)) < MM_TOL[dt]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize(("sq", "sk"), [(100, 160), (300, 200), (1000, 1000)])  # 300 > 200: causal rows with no key
def test_flash_attention(rng, dtype, d, causal, layout, sq, sk):
    dt = np.dtype(dtype)
    q, k, v = rand(rng, (2, 8, sq, d), dt), rand(rng, (2, 2, sk, d), dt), rand(rng, (2, 2, sk, d), dt)
    ref = ref_attention(q, k, v, causal)
    tr = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 1, 3))) if layout == "bshd" else (lambda a: a)
    args = [gp.from_numpy(tr(a)) for a in (q, k, v)]
    got = ops().sdpa(*args, None, causal, None, None, None, layout).to_numpy()
    native = gp.nn.scaled_dot_product_attention(*args, causal=causal, layout=layout).to_numpy()
    assert rel_err(got, tr(ref)) < MM_TOL[dt]
    assert rel_err(got, native) < MM_TOL[dt]


def test_user_kernels_by_launch_and_direct_call(rng):
    import triton

    import pygpukit_triton as pt
    from pygpukit_triton import launcher

    n = 100_003
    x, y = rand(rng, n, np.float32), rand(rng, n, np.float32)
    gx, gy = gp.from_numpy(x), gp.from_numpy(y)
    for _ in range(3):  # the first call compiles; the next ones take the cached launcher
        out = gp.empty((n,), gp.float32)
        pt.launch(user_kernels.vector_add, (triton.cdiv(n, 1024),), gx, gy, out, n, BLOCK=1024)
        assert np.array_equal(out.to_numpy(), x + y)
    assert any(k[0] == id(user_kernels.vector_add) for k in launcher._entries)
    out = gp.empty((n,), gp.float32)
    user_kernels.vector_add[(triton.cdiv(n, 512),)](pt.tensor(gx), pt.tensor(gy), pt.tensor(out), n, BLOCK=512)
    assert np.array_equal(out.to_numpy(), x + y)
    a = gp.from_numpy(rand(rng, (300, 77), np.float32)).T  # (77, 300), strides (1, 77)
    out2 = gp.empty((77, 300), gp.float32)
    ta, to = pt.tensor(a), pt.tensor(out2)
    pt.launch(user_kernels.scale_2d, (triton.cdiv(77, 32), triton.cdiv(300, 32)), a, out2, 77, 300, *ta.stride(), *to.stride(), 0.5,
              BM=32, BN=32)  # fmt: skip
    assert np.allclose(out2.to_numpy(), 0.5 * a.to_numpy() + 1.0, rtol=1e-6)


def test_autotuned_user_kernel(rng):
    import triton

    import pygpukit_triton as pt

    for n in (5000, 5000, 123_457):  # a new key value tunes again
        x = rand(rng, n, np.float32)
        out = gp.empty((n,), gp.float32)
        pt.launch(user_kernels.scaled_copy_tuned, lambda m, n=n: (triton.cdiv(n, m["BLOCK"]),), gp.from_numpy(x), out, n, 3.0)
        assert np.allclose(out.to_numpy(), 3.0 * x, rtol=1e-6)
    assert user_kernels.scaled_copy_tuned.best_config.kwargs["BLOCK"] in (64, 256)
    # reset_to_zero: the autotuner zeroes `total` (TritonArray.zero_) before each timed run
    x = rand(rng, 70_000, np.float32)
    total = gp.zeros((1,), gp.float32)
    pt.launch(user_kernels.sum_atomic_tuned, lambda m: (triton.cdiv(70_000, m["BLOCK"]),), gp.from_numpy(x), total, 70_000)
    assert np.isclose(total.to_numpy()[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-2)


def test_triton_do_bench_times_with_pygpukit_events(rng):
    import triton
    import triton.testing

    import pygpukit_triton as pt

    n = 1 << 22
    x, out = gp.from_numpy(rand(rng, n, np.float32)), gp.empty((n,), gp.float32)
    call = lambda: pt.launch(user_kernels.vector_add, (triton.cdiv(n, 1024),), x, x, out, n, BLOCK=1024)
    ms = triton.testing.do_bench(call, warmup=5, rep=20)
    assert 0 < ms < 100  # 48 MiB moved: well under a millisecond on an H100
    median, low, high = triton.testing.do_bench(call, warmup=5, rep=20, quantiles=[0.5, 0.2, 0.8])
    assert 0 < low <= median <= high


def test_launches_run_on_pygpukits_current_stream():
    import triton

    import pygpukit_triton as pt

    n = 4096
    stream = gp.Stream()
    for direct in (False, True):
        buf = gp.zeros((n,), gp.float32)
        out = gp.empty((n,), gp.float32)
        gp.synchronize()
        with stream:
            # a slow writer, then a reader on the same stream: ordered only if both run on `stream`
            pt.launch(user_kernels.spin_then_fill, (triton.cdiv(n, 256),), buf, n, 7.0, 200_000, BLOCK=256)
            if direct:
                user_kernels.vector_add[(triton.cdiv(n, 256),)](pt.tensor(buf), pt.tensor(buf), pt.tensor(out), n, BLOCK=256)
            else:
                pt.launch(user_kernels.vector_add, (triton.cdiv(n, 256),), buf, buf, out, n, BLOCK=256)
            result = gp.empty((n,), gp.float32)
            result[...] = out
        stream.synchronize()
        assert np.array_equal(result.to_numpy(), np.full(n, 14.0, np.float32)), direct


NO_TORCH_SCRIPT = """
import sys
import numpy as np, triton
import pygpukit as gp, pygpukit_triton as pt
import user_kernels
n = 5000
x = gp.from_numpy(np.arange(n, dtype=np.float32))
out = gp.empty((n,), gp.float32)
pt.launch(user_kernels.vector_add, (triton.cdiv(n, 1024),), x, x, out, n, BLOCK=1024)
assert np.array_equal(out.to_numpy(), 2 * np.arange(n, dtype=np.float32))
user_kernels.vector_add[(triton.cdiv(n, 256),)](pt.tensor(x), pt.tensor(x), pt.tensor(out), n, BLOCK=256)
pt.launch(user_kernels.scaled_copy_tuned, lambda m: (triton.cdiv(n, m["BLOCK"]),), x, out, n, 0.5)
assert np.array_equal(out.to_numpy(), 0.5 * np.arange(n, dtype=np.float32))
assert "torch" not in sys.modules, "torch was imported"
print("OK")
"""


def test_kernels_launch_and_autotune_without_torch(tmp_path):
    import os
    import subprocess
    import sys

    from triton_testing import path_without

    tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, *path_without(tmp_path, "torch")]))
    run = subprocess.run([sys.executable, "-S", "-c", NO_TORCH_SCRIPT], capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-3000:] + run.stderr[-3000:]

"""RMSNorm, LayerNorm, the fused residual-add forms and GroupNorm against
float64 NumPy: the reference on every backend (CI), the kernel on the GPU,
and NVRTC compilation of the kernel's instantiations anywhere."""

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit_nn import functional as F
from pygpukit_nn import norms

DTYPES = [gp.float32, gp.float16, gp.bfloat16]
# Statistics in float32, one rounding of the output: bf16 / fp16 outputs are
# within half an ulp (2^-9 / 2^-12 relative) plus the float32 sums; float32
# within a few ulps of the row's sums.
TOL = {np.dtype(gp.float32): 2e-6, np.dtype(gp.float16): 2e-3, np.dtype(gp.bfloat16): 1e-2, np.dtype(gp.float64): 1e-12}


def _np_norm(h, w, b, eps, layer):
    if layer:
        h = h - h.mean(axis=-1, keepdims=True)
    y = h / np.sqrt((h * h).mean(axis=-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def _np_group_norm(x, g, w, b, eps):
    n, c = x.shape[:2]
    v = x.reshape(n, g, -1)
    v = (v - v.mean(axis=-1, keepdims=True)) / np.sqrt(v.var(axis=-1, keepdims=True) + eps)
    shape = (c,) + (1,) * (x.ndim - 2)
    return v.reshape(x.shape) * (1 if w is None else w.reshape(shape)) + (0 if b is None else b.reshape(shape))


def _inputs(rng, shape, dtype, affine=True, bias=True):
    x = (rand(rng, shape, dtype, 3.0) + 0.5).astype(dtype).astype(np.float64)  # an offset, so LayerNorm's mean matters
    w = rand(rng, shape[-1:], dtype) if affine else None
    b = rand(rng, shape[-1:], dtype) if bias else None
    return x, w, b


def _gp(a, dtype):
    return None if a is None else gp.from_numpy(a.astype(dtype))


def _check_rows(rng, shape, dtype, layer, residual):
    x, w, b = _inputs(rng, shape, dtype, bias=layer)
    r = rand(rng, shape, dtype) if residual else None
    h = x if r is None else (x + r).astype(dtype).astype(np.float64)  # the rounded residual stream
    ref = _np_norm(h, w, b, 1e-5, layer)
    gx, gw, gb, gr = _gp(x, dtype), _gp(w, dtype), _gp(b, dtype), _gp(r, dtype)
    if residual:
        y, hh = F.add_layer_norm(gx, gr, gw, gb, 1e-5) if layer else F.add_rms_norm(gx, gr, gw, 1e-5)
        np.testing.assert_array_equal(hh.to_numpy().astype(np.float64), h)
    else:
        y = F.layer_norm(gx, gw, gb, 1e-5) if layer else F.rms_norm(gx, gw, 1e-5)
    assert y.shape == x.shape and y.dtype == np.dtype(dtype)
    assert rel_err(y.to_numpy(), ref) < TOL[np.dtype(dtype)], (shape, dtype, layer, residual)


@pytest.mark.parametrize("dtype", [*DTYPES, gp.float64])
@pytest.mark.parametrize("layer", [False, True])
@pytest.mark.parametrize("residual", [False, True])
def test_row_norms_against_float64(rng, dtype, layer, residual):
    for shape in [(3, 5, 64), (7, 100)]:
        _check_rows(rng, shape, dtype, layer, residual)


def test_optional_affine_and_float32_weights(rng):
    x = _inputs(rng, (4, 48), gp.bfloat16)[0]
    gx = gp.from_numpy(x.astype(gp.bfloat16))
    assert rel_err(F.layer_norm(gx).to_numpy(), _np_norm(x, None, None, 1e-5, True)) < 1e-2
    assert rel_err(F.rms_norm(gx, None).to_numpy(), _np_norm(x, None, None, 1e-6, False)) < 1e-2
    wf = rng.standard_normal(48)  # float32 weights of a bf16 model are used as they are
    got = F.rms_norm(gx, gp.from_numpy(wf.astype(np.float32))).to_numpy()
    assert rel_err(got, _np_norm(x, wf.astype(np.float32), None, 1e-6, False)) < 1e-2


@pytest.mark.parametrize("dtype", [gp.float32, gp.bfloat16])
def test_group_norm_against_float64(rng, dtype):
    for shape, g in [((2, 6, 10), 3), ((3, 8, 4, 5), 2), ((1, 4, 7), 4)]:
        x = (rand(rng, shape, dtype, 2.0) + 1.0).astype(dtype).astype(np.float64)
        w, b = rand(rng, shape[1:2], dtype), rand(rng, shape[1:2], dtype)
        got = F.group_norm(gp.from_numpy(x.astype(dtype)), g, _gp(w, dtype), _gp(b, dtype), 1e-5)
        assert rel_err(got.to_numpy(), _np_group_norm(x, g, w, b, 1e-5)) < TOL[np.dtype(dtype)]


def test_errors():
    x = gp.zeros((4, 8), gp.float32)
    cases = [
        (lambda: F.rms_norm(np.zeros((4, 8)), None), TypeError, "x must be a GPUArray"),
        (lambda: F.rms_norm(gp.zeros((4, 8), gp.int32), None), TypeError, "x must be float16, bfloat16, float32 or float64"),
        (lambda: F.rms_norm(x, gp.zeros((7,), gp.float32)), ValueError, r"weight must have shape \(8,\), got \(7,\)"),
        (lambda: F.layer_norm(x, None, gp.zeros((8, 1), gp.float32)), ValueError, r"bias must have shape \(8,\)"),
        (lambda: F.rms_norm(x, None, -1.0), ValueError, "eps must be a non-negative number"),
        (lambda: F.rms_norm(gp.zeros((), gp.float32), None), ValueError, "at least one axis"),
        (lambda: F.add_rms_norm(x, gp.zeros((4, 8), gp.float16), None), ValueError, "residual must match"),
        (lambda: F.add_layer_norm(x, gp.zeros((4, 9), gp.float32)), ValueError, "residual must match"),
        (lambda: F.group_norm(x, 3), ValueError, "positive divisor of the 8 channels"),
        (lambda: F.group_norm(gp.zeros((8,), gp.float32), 2), ValueError, r"\(N, C, \*spatial\)"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_launch_shape():
    assert norms.VECS_PER_THREAD == 2
    assert norms.launch_shape(8192, 8) == (512, 2, 1)  # Llama-3-70B hidden in bf16: 2 x 16 bytes per thread
    assert norms.launch_shape(4096, 8) == (256, 2, 1)
    assert norms.launch_shape(128, 8) == (8, 2, 32)  # a head's q/k norm: 32 rows per block
    assert norms.launch_shape(1, 1) == (1, 1, 256)
    assert norms.launch_shape(100_000, 4) == (1024, 0, 1)  # beyond registers: the re-reading path


def test_kernels_compile(need_nvrtc):
    for ct in ("float", "pgk::half", "pgk::bfloat16"):
        for case in [(ct, ct, 8 if ct != "float" else 4, 4, 0, False, True, False, False, 512),
                     (ct, "float", 1, 1, 1, True, True, True, False, 256),
                     (ct, ct, 2, 0, 1, False, True, True, True, 1024),
                     (ct, ct, 1, 0, 0, True, False, False, False, 1024)]:  # fmt: skip
            kern = norms._kernel(*case)
            for sm in (80, 90):
                assert kern.compile(sm).image[:4] == b"\x7fELF", case


# -- the kernel (GPU) --------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layer", [False, True])
@pytest.mark.parametrize("residual", [False, True])
def test_kernel_against_float64(rng, dtype, layer, residual):
    op = ("add_" if residual else "") + ("layer_norm" if layer else "rms_norm")
    x = gp.zeros((2, 64), dtype)
    args = (x, x, None) if residual else (x, None)
    assert gp.ops.which(op, *args) == "nn:kernel"
    # odd widths (scalar and 2-wide vectors), register counts 1..8, the re-reading path, many rows
    for shape in [(1, 1), (3, 7), (5, 64), (9, 130), (2, 4096), (3, 8192), (2, 20000), (2, 70000), (1000, 96)]:
        _check_rows(rng, shape, dtype, layer, residual)


@pytest.mark.gpu
def test_kernel_layer_norm_large_offset(rng):
    """Rows of 1000 + N(0, 1) in float32: the shifted sums lose nothing to the offset."""
    x = (1000 + rng.standard_normal((64, 8192))).astype(np.float32).astype(np.float64)
    for fn in (lambda g: F.layer_norm(g), lambda g: F.add_layer_norm(g, gp.zeros_like(g))[0]):
        got = fn(gp.from_numpy(x.astype(np.float32))).to_numpy()
        assert rel_err(got, _np_norm(x, None, None, 1e-5, True)) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_strided_rows(rng, dtype):
    """A slice of a wider row (q of a fused qkv output) and a transposed array."""
    base = rand(rng, (6, 3, 256), dtype)
    w = rand(rng, (128,), dtype)
    view = gp.from_numpy(base.astype(dtype))[:, 1, 64:192]
    got = F.rms_norm(view, gp.from_numpy(w.astype(dtype)), 1e-6)
    assert rel_err(got.to_numpy(), _np_norm(base[:, 1, 64:192], w, None, 1e-6, False)) < TOL[np.dtype(dtype)]
    t = rand(rng, (64, 10), dtype)
    got = F.layer_norm(gp.from_numpy(t.astype(dtype)).T)
    assert rel_err(got.to_numpy(), _np_norm(t.T, None, None, 1e-5, True)) < TOL[np.dtype(dtype)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_group_norm(rng, dtype):
    x0 = gp.zeros((2, 4, 8), dtype)
    assert gp.ops.which("group_norm", x0, 2) == "nn:kernel"
    for shape, g in [((2, 32, 64, 64), 32), ((1, 320, 4096), 32), ((3, 6, 5), 3), ((2, 512, 31), 512)]:
        x = (rand(rng, shape, dtype, 2.0) + 1.0).astype(dtype).astype(np.float64)
        w, b = rand(rng, shape[1:2], dtype), rand(rng, shape[1:2], dtype)
        got = F.group_norm(gp.from_numpy(x.astype(dtype)), g, _gp(w, dtype), _gp(b, dtype), 1e-5)
        assert rel_err(got.to_numpy(), _np_group_norm(x, g, w, b, 1e-5)) < TOL[np.dtype(dtype)], (shape, g)


@pytest.mark.gpu
def test_kernel_matches_torch(rng):
    torch = pytest.importorskip("torch")
    x = rand(rng, (16, 4096), gp.bfloat16, 2.0)
    w = rand(rng, (4096,), gp.bfloat16)
    tx = torch.tensor(x, dtype=torch.float32).to("cuda", torch.bfloat16)
    tw = torch.tensor(w, dtype=torch.float32).to("cuda", torch.bfloat16)
    ref = torch.nn.functional.rms_norm(tx.float(), (4096,), tw.float(), 1e-6).cpu().numpy()
    got = F.rms_norm(gp.from_numpy(x.astype(gp.bfloat16)), gp.from_numpy(w.astype(gp.bfloat16)), 1e-6).to_numpy()
    assert rel_err(got, ref) < 1e-2
    ref = torch.nn.functional.layer_norm(tx.float(), (4096,), tw.float(), tw.float(), 1e-5).cpu().numpy()
    got = F.layer_norm(gp.from_numpy(x.astype(gp.bfloat16)), *(gp.from_numpy(w.astype(gp.bfloat16)),) * 2, 1e-5).to_numpy()
    assert rel_err(got, ref) < 1e-2

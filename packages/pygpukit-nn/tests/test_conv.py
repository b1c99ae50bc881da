"""Conv1d and 1-d pooling against float64 NumPy (direct loops over the
definitions): strides, padding ("same" / "valid" too), dilation, groups and
depthwise convolutions, Whisper's two input convolutions at a reduced
length; the reference everywhere, the kernels on the GPU (and against
PyTorch there), NVRTC compilation of the kernels anywhere."""

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit_nn import conv

DTYPES = [gp.float32, gp.float16, gp.bfloat16]
# float32 sums of C_in * K products rounded once to the output dtype (half an
# ulp: 2^-9 bf16, 2^-12 fp16, relative to the largest output), the bias added
# after that rounding; float32 within a few ulps of its sums.
TOL = {np.dtype(gp.float32): 1e-5, np.dtype(gp.float16): 2e-3, np.dtype(gp.bfloat16): 1e-2, np.dtype(gp.float64): 1e-12}


def _np_conv1d(x, w, b, stride, padding, dilation, groups):
    n, _, length = x.shape
    cout, cg, k = w.shape
    span = dilation * (k - 1)
    if padding == "same":
        left, right = span // 2, span - span // 2
    elif padding == "valid":
        left = right = 0
    else:
        left = right = padding
    xp = np.pad(x, ((0, 0), (0, 0), (left, right)))
    lout = (length + left + right - span - 1) // stride + 1
    # taps[n, c, j, l] = xp[n, c, l * stride + j * dilation]; out[n, co, l] = sum over co's group's (c, j)
    taps = np.stack([xp[:, :, j * dilation : j * dilation + stride * (lout - 1) + 1 : stride] for j in range(k)], axis=2)
    out = np.einsum("gock,ngckl->ngol", w.reshape(groups, cout // groups, cg, k), taps.reshape(n, groups, cg, k, lout), optimize=True)
    return out.reshape(n, cout, lout) + (0 if b is None else b[None, :, None])


def _pool_len(length, k, s, p, d, ceil):
    lout = (length + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    return lout - 1 if ceil and (lout - 1) * s >= length + p else lout


def _np_avg_pool(x, k, s, p, ceil, include):
    length = x.shape[-1]
    s = s or k
    lout = _pool_len(length, k, s, p, 1, ceil)
    out = np.empty(x.shape[:-1] + (lout,))
    for i in range(lout):
        start = i * s - p
        end = min(start + k, length + p)
        lo, hi = max(start, 0), min(end, length)
        out[..., i] = x[..., lo:hi].sum(axis=-1) / ((end - start) if include else (hi - lo))
    return out


def _np_max_pool(x, k, s, p, d, ceil):
    """Values and the position of the first maximum (of the first NaN if any)."""
    length = x.shape[-1]
    s = s or k
    lout = _pool_len(length, k, s, p, d, ceil)
    vals = np.empty(x.shape[:-1] + (lout,))
    idx = np.empty(x.shape[:-1] + (lout,), np.int64)
    for i in range(lout):
        pos = [i * s - p + j * d for j in range(k) if 0 <= i * s - p + j * d < length]
        win = x[..., pos]
        nan = np.isnan(win)
        first = np.where(nan.any(axis=-1), np.argmax(nan, axis=-1), np.argmax(np.where(nan, -np.inf, win), axis=-1))
        vals[..., i] = np.take_along_axis(win, first[..., None], -1)[..., 0]
        idx[..., i] = np.asarray(pos)[first]
    return vals, idx


def _np_adaptive(x, out):
    length = x.shape[-1]
    return np.stack([x[..., i * length // out : -(-(i + 1) * length // out)].mean(axis=-1) for i in range(out)], axis=-1)


# (N, C_in, L, C_out, K, stride, padding, dilation, groups, bias)
CONV_CASES = [
    (2, 6, 20, 4, 3, 1, 0, 1, 1, True),
    (1, 4, 17, 6, 5, 2, 2, 2, 2, False),
    (3, 6, 11, 6, 3, 1, "same", 2, 6, True),  # depthwise
    (2, 4, 9, 8, 3, 2, 1, 1, 4, True),  # depthwise, 2 outputs per channel
    (1, 5, 12, 3, 4, 3, "valid", 1, 1, False),
    (2, 3, 10, 3, 4, 1, "same", 1, 1, True),  # even kernel: the extra padding goes right
    (1, 2, 5, 3, 1, 1, 0, 1, 1, True),  # K = 1
]


def _conv(rng, dtype, case, squeeze=False):
    n, c, length, cout, k, s, p, d, g, has_b = case
    x = rand(rng, (n, c, length), dtype)
    w = rand(rng, (cout, c // g, k), dtype, 0.5)
    b = rand(rng, (cout,), dtype) if has_b else None
    gx = gp.from_numpy(x[0].astype(dtype)) if squeeze else gp.from_numpy(x.astype(dtype))
    gb = None if b is None else gp.from_numpy(b.astype(dtype))
    got = conv.conv1d(gx, gp.from_numpy(w.astype(dtype)), gb, stride=s, padding=p, dilation=d, groups=g)
    ref = _np_conv1d(x, w, b, s, p, d, g)
    ref = ref[0] if squeeze else ref
    assert got.shape == ref.shape and got.dtype == np.dtype(dtype), case
    return rel_err(got.to_numpy(), ref)


@pytest.mark.parametrize("dtype", [*DTYPES, gp.float64])
def test_conv1d_against_float64(rng, dtype):
    for case in CONV_CASES:
        assert _conv(rng, dtype, case) < TOL[np.dtype(dtype)], case
    assert _conv(rng, dtype, CONV_CASES[0], squeeze=True) < TOL[np.dtype(dtype)]


@pytest.mark.parametrize("dtype", [gp.float32, gp.bfloat16])
def test_whisper_convs(rng, dtype):
    # Whisper-tiny's encoder input: 80 mel bins -> 384, K=3 pad 1; then stride 2 (L 3000 reduced to 200)
    for case in [(1, 80, 200, 384, 3, 1, 1, 1, 1, True), (1, 384, 200, 384, 3, 2, 1, 1, 1, True)]:
        assert _conv(rng, dtype, case) < TOL[np.dtype(dtype)], case


POOL_CASES = [(3, 2, 1, False), (3, 2, 1, True), (4, None, 2, True), (2, 1, 0, False), (5, 3, 2, True), (1, 1, 0, False)]


@pytest.mark.parametrize("dtype", [*DTYPES, gp.float64])
def test_pooling_against_float64(rng, dtype):
    tol = TOL[np.dtype(dtype)]
    for shape in [(2, 3, 19), (4, 10)]:
        x = rand(rng, shape, dtype)
        gx = gp.from_numpy(x.astype(dtype))
        for k, s, p, ceil in POOL_CASES:
            for include in (True, False):
                got = conv.avg_pool1d(gx, k, s, p, ceil, include)
                ref = _np_avg_pool(x, k, s, p, ceil, include)
                assert got.shape == ref.shape and got.dtype == np.dtype(dtype)
                assert rel_err(got.to_numpy(), ref) < tol, (shape, k, s, p, ceil, include)
            for d in (1, 2):
                if p > (d * (k - 1) + 1) // 2:
                    continue
                vals, idx = conv.max_pool1d(gx, k, s, p, d, ceil, True)
                rv, ri = _np_max_pool(x, k, s, p, d, ceil)
                np.testing.assert_array_equal(vals.to_numpy().astype(np.float64), rv)  # a maximum is exact
                np.testing.assert_array_equal(idx.to_numpy(), ri)
                assert idx.dtype == np.int64
                np.testing.assert_array_equal(conv.max_pool1d(gx, k, s, p, d, ceil).to_numpy(), vals.to_numpy())
        for out in (1, 4, 7, shape[-1], shape[-1] + 3):
            got = conv.adaptive_avg_pool1d(gx, out)
            assert rel_err(got.to_numpy(), _np_adaptive(x, out)) < tol, out


def test_max_pool_nan_ties_and_inf():
    x = np.array([[1.0, np.nan, 2.0, np.nan, 5.0, 5.0, -np.inf, -np.inf, 3.0, 3.0]])
    vals, idx = conv.max_pool1d(gp.from_numpy(x), 3, 2, 1, 1, False, True)
    rv, ri = _np_max_pool(x, 3, 2, 1, 1, False)
    np.testing.assert_array_equal(vals.to_numpy(), rv)  # NaN where a window holds one
    np.testing.assert_array_equal(idx.to_numpy(), ri)
    assert idx.to_numpy().tolist() == [[1, 1, 3, 5, 8]]  # windows [-1, 1], [1, 3], [3, 5], [5, 7], [7, 9]
    # a window of -inf only points at its first position inside the row
    vals, idx = conv.max_pool1d(gp.from_numpy(np.full((1, 4), -np.inf)), 2, 2, 1, 1, False, True)
    assert idx.to_numpy().tolist() == [[0, 1, 3]] and np.all(vals.to_numpy() == -np.inf)


def test_empty_batch():
    x = gp.zeros((0, 3, 8), gp.float32)
    assert conv.conv1d(x, gp.zeros((4, 3, 3), gp.float32)).shape == (0, 4, 6)
    assert conv.avg_pool1d(x, 2).shape == (0, 3, 4)
    assert conv.max_pool1d(x, 2, return_indices=True)[1].shape == (0, 3, 4)
    assert conv.adaptive_avg_pool1d(x, 5).shape == (0, 3, 5)


def test_errors():
    f32 = gp.float32
    x, w = gp.zeros((2, 4, 10), f32), gp.zeros((6, 2, 3), f32)
    cases = [
        (lambda: conv.conv1d([1.0], w), TypeError, "x must be a GPUArray"),
        (lambda: conv.conv1d(x, w.astype(gp.float16), groups=2), TypeError, "weight must have x's dtype"),
        (lambda: conv.conv1d(gp.zeros((10,), f32), w), ValueError, r"x must be \(N, C, L\)"),
        (lambda: conv.conv1d(gp.zeros((2, 4, 0), f32), w), ValueError, "C, L >= 1"),
        (lambda: conv.conv1d(x, w), ValueError, "C_in / groups = 4"),
        (lambda: conv.conv1d(x, w, groups=3), ValueError, "groups=3 must divide"),
        (lambda: conv.conv1d(x, w, groups=0), ValueError, "groups must be at least 1"),
        (lambda: conv.conv1d(x, w, gp.zeros((5,), f32), groups=2), ValueError, r"bias must have shape \(6,\)"),
        (lambda: conv.conv1d(x, w, gp.zeros((6,), gp.float16), groups=2), TypeError, "bias must have x's dtype"),
        (lambda: conv.conv1d(x, w, stride=2, padding="same", groups=2), ValueError, "'same' needs stride 1"),
        (lambda: conv.conv1d(x, w, padding="full", groups=2), ValueError, "padding must be an int, 'valid' or 'same'"),
        (lambda: conv.conv1d(x, w, padding=-1, groups=2), ValueError, "padding must be at least 0"),
        (lambda: conv.conv1d(x, w, stride=1.5, groups=2), TypeError, "stride must be an integer"),
        (lambda: conv.conv1d(x, gp.zeros((6, 2, 12), f32), groups=2), ValueError, "shorter than the kernel's span 12"),
        (lambda: conv.conv1d(x, gp.zeros((6, 2), f32), groups=2), ValueError, r"weight must be \(C_out"),
        (lambda: conv.avg_pool1d(x, 0), ValueError, "kernel_size must be at least 1"),
        (lambda: conv.avg_pool1d(x, 3, padding=2), ValueError, "padding must be at most half"),
        (lambda: conv.avg_pool1d(x, 3, ceil_mode=1), TypeError, "ceil_mode must be a bool"),
        (lambda: conv.avg_pool1d(x, 3, count_include_pad=None), TypeError, "count_include_pad must be a bool"),
        (lambda: conv.avg_pool1d(x, 11), ValueError, "too short for kernel_size 11"),
        (lambda: conv.max_pool1d(x, 2, padding=2, dilation=1), ValueError, "padding must be at most half"),
        (lambda: conv.max_pool1d(x, 2, dilation=0), ValueError, "dilation must be at least 1"),
        (lambda: conv.max_pool1d(x, 2, return_indices="yes"), TypeError, "return_indices must be a bool"),
        (lambda: conv.max_pool1d(gp.zeros((2, 4, 10), gp.int32), 2), TypeError, "float16, bfloat16"),
        (lambda: conv.adaptive_avg_pool1d(x, 0), ValueError, "output_size must be at least 1"),
        (lambda: conv.adaptive_avg_pool1d(x, None), TypeError, "output_size must be an integer"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_kernels_compile(need_nvrtc):
    """Every instantiation in one NVRTC program per SM."""
    from pygpukit.jit import compiler

    kernels = []
    for ct in ("float", "pgk::half", "pgk::bfloat16"):
        kernels += [conv._im2col_kernel(ct), conv._depthwise_kernel(ct, True), conv._depthwise_kernel(ct, False)]
        kernels += [conv._pool_kernel(ct, mode) for mode in (0, 1, 2)]
    names = [k.func for k in kernels]
    for sm in (80, 90):
        binary = compiler.compile_source(kernels[0].source, names, sm, kernels[0].options, "conv.cu")
        assert binary.image[:4] == b"\x7fELF" and set(names) <= set(binary.lowered)


# -- the kernels (GPU) -------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_conv1d(rng, dtype):
    x, w = gp.zeros((1, 4, 8), dtype), gp.zeros((4, 4, 3), dtype)
    assert gp.ops.which("conv1d", x, w, None, 1, 0, 1, 1) == "nn:kernel"
    for case in CONV_CASES:
        assert _conv(rng, dtype, case) < TOL[np.dtype(dtype)], case
    assert _conv(rng, dtype, CONV_CASES[2], squeeze=True) < TOL[np.dtype(dtype)]
    # Whisper-base's shapes at the full length: 80 -> 512, then stride 2
    for case in [
        (1, 80, 3000, 512, 3, 1, 1, 1, 1, True),
        (1, 512, 3000, 512, 3, 2, 1, 1, 1, True),
        (3, 80, 301, 384, 3, 1, 1, 1, 1, False),
    ]:
        assert _conv(rng, dtype, case) < TOL[np.dtype(dtype)], case
    # a strided input (a slice of longer rows)
    xs = rand(rng, (2, 6, 30), dtype)
    wt = rand(rng, (4, 6, 3), dtype)
    got = conv.conv1d(gp.from_numpy(xs.astype(dtype))[:, :, 3:25], gp.from_numpy(wt.astype(dtype)), None, 2, 1)
    assert rel_err(got.to_numpy(), _np_conv1d(xs[:, :, 3:25], wt, None, 2, 1, 1, 1)) < TOL[np.dtype(dtype)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_pooling(rng, dtype):
    x = gp.zeros((2, 3, 19), dtype)
    for op, args in (("avg_pool1d", (3, 2, 1, False, True)), ("max_pool1d", (3, 2, 1, 1, False, True)), ("adaptive_avg_pool1d", (4,))):
        assert gp.ops.which(op, x, *args) == "nn:kernel"
    for shape in [(2, 3, 19), (4, 10), (1, 700, 1500)]:
        h = rand(rng, shape, dtype)
        gx = gp.from_numpy(h.astype(dtype))
        for k, s, p, ceil in POOL_CASES:
            for include in (True, False):
                assert rel_err(conv.avg_pool1d(gx, k, s, p, ceil, include).to_numpy(), _np_avg_pool(h, k, s, p, ceil, include)) < 1e-2
            vals, idx = conv.max_pool1d(gx, k, s, p, 1, ceil, True)
            rv, ri = _np_max_pool(h, k, s, p, 1, ceil)
            np.testing.assert_array_equal(vals.to_numpy().astype(np.float64), rv)
            np.testing.assert_array_equal(idx.to_numpy(), ri)
        for out in (1, 7, shape[-1] + 3):
            assert rel_err(conv.adaptive_avg_pool1d(gx, out).to_numpy(), _np_adaptive(h, out)) < TOL[np.dtype(dtype)]


@pytest.mark.gpu
def test_kernel_max_pool_nan():
    x = np.array([[1.0, np.nan, 2.0, np.nan, 5.0, 5.0, -np.inf, -np.inf, 3.0, 3.0]], np.float32)
    vals, idx = conv.max_pool1d(gp.from_numpy(x), 3, 2, 1, 1, False, True)
    assert idx.to_numpy().tolist() == [[1, 1, 3, 5, 8]]
    np.testing.assert_array_equal(vals.to_numpy(), _np_max_pool(x.astype(np.float64), 3, 2, 1, 1, False)[0])


@pytest.mark.gpu
def test_kernel_matches_torch(rng, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # torch's default rounds float32 convolutions to TF32
    F = torch.nn.functional
    g = gp.from_dlpack
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 1e-2)):
        x = torch.randn(2, 80, 3000, device="cuda", dtype=dtype)
        w1 = torch.randn(384, 80, 3, device="cuda", dtype=dtype) / 16
        b1 = torch.randn(384, device="cuda", dtype=dtype)
        w2 = torch.randn(384, 384, 3, device="cuda", dtype=dtype) / 32
        x8, w8 = x[:, :8].contiguous(), w1[:, :1].contiguous()  # depthwise: 8 channels, 48 outputs each
        for got, want in [
            (conv.conv1d(g(x), g(w1), g(b1), 1, 1), F.conv1d(x, w1, b1, 1, 1)),
            (conv.conv1d(g(x8), g(w8), None, 2, 1, 1, 8), F.conv1d(x8, w8, None, 2, 1, 1, 8)),
            (conv.avg_pool1d(g(x), 3, 2, 1, True, False), F.avg_pool1d(x, 3, 2, 1, True, False)),
            (conv.max_pool1d(g(x), 4, 3, 2, 1, True), F.max_pool1d(x, 4, 3, 2, 1, True)),
            (conv.adaptive_avg_pool1d(g(x), 13), F.adaptive_avg_pool1d(x, 13)),
        ]:
            assert rel_err(got.to_numpy().astype(np.float32), want.float().cpu().numpy()) < tol
        h = F.gelu(F.conv1d(x, w1, b1, 1, 1))
        got = conv.conv1d(g(h.contiguous()), g(w2), None, 2, 1)
        assert rel_err(got.to_numpy().astype(np.float32), F.conv1d(h, w2, None, 2, 1).float().cpu().numpy()) < tol
        vals, idx = conv.max_pool1d(g(x), 3, 2, 1, 2, False, True)
        tv, ti = F.max_pool1d(x, 3, 2, 1, 2, False, True)
        np.testing.assert_array_equal(idx.to_numpy(), ti.cpu().numpy())
        np.testing.assert_array_equal(vals.to_numpy().astype(np.float32), tv.float().cpu().numpy())

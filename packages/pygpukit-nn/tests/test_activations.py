"""Activations against float64 NumPy: the gated forms and squared ReLU (the
reference everywhere, the kernel on the GPU), core's gelu/silu/relu through
the functional API, and masked softmax / log_softmax."""

import math

import numpy as np
import pytest
from nn_testing import rand, rel_err

import pygpukit as gp
from pygpukit_nn import activations
from pygpukit_nn import functional as F

DTYPES = [gp.float32, gp.float16, gp.bfloat16]
# float32 math, one rounding: half an ulp of the output dtype relative to the
# largest value. float32 outputs also carry the float32 exp/erf/tanh errors,
# which 1 + erf(x / sqrt(2)) (torch's formula) magnifies by cancellation for
# x near -3: up to ~2e-5 relative on a lone small output.
TOL = {np.dtype(gp.float32): 5e-5, np.dtype(gp.float16): 1e-3, np.dtype(gp.bfloat16): 8e-3, np.dtype(gp.float64): 1e-13}
_erf = np.vectorize(math.erf)


def _silu(x):
    return x / (1 + np.exp(-x))


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gated(rng, dtype, shape, kind, approximate="none", separate=False):
    x = rand(rng, shape, dtype, 2.0)
    h = shape[-1] // 2
    g, u = x[..., :h], x[..., h:]
    ref = (_silu(g) if kind == "swiglu" else _gelu(g, approximate)) * u
    if separate:
        args = (gp.from_numpy(g.astype(dtype)), gp.from_numpy(u.astype(dtype)))
    else:
        args = (gp.from_numpy(x.astype(dtype)), None)
    got = F.swiglu(*args) if kind == "swiglu" else F.geglu(*args, approximate=approximate)
    assert got.shape == shape[:-1] + (h,) and got.dtype == np.dtype(dtype)
    return rel_err(got.to_numpy(), ref)


@pytest.mark.parametrize("dtype", [*DTYPES, gp.float64])
@pytest.mark.parametrize("kind,approximate", [("swiglu", "none"), ("geglu", "none"), ("geglu", "tanh")])
@pytest.mark.parametrize("separate", [False, True])
def test_gated_against_float64(rng, dtype, kind, approximate, separate):
    assert _gated(rng, dtype, (3, 5, 48), kind, approximate, separate) < TOL[np.dtype(dtype)]


@pytest.mark.parametrize("shape", [(3, 1, 96), (2, 1, 1, 64), (1, 4, 32)])
def test_gated_on_slices_with_unit_axes(rng, shape):
    """A decode step's gate/up halves: a slice of wider rows, with axes of size 1
    between the rows (their strides do not give the row stride)."""
    wide = rand(rng, (*shape[:-1], 2 * shape[-1]), np.float32, 2.0)
    view = gp.from_numpy(wide)[..., : shape[-1]]
    h = shape[-1] // 2
    ref = _silu(wide[..., :h]) * wide[..., h : shape[-1]]
    assert rel_err(F.swiglu(view).to_numpy(), ref) < TOL[np.dtype(gp.float32)]


@pytest.mark.parametrize("dtype", [*DTYPES, gp.float64])
def test_relu_squared_and_core_activations(rng, dtype):
    x = rand(rng, (7, 33), dtype, 2.0)
    x[0, 0] = np.nan
    gx = gp.from_numpy(x.astype(dtype))
    got = F.relu_squared(gx).to_numpy().astype(np.float64)
    assert np.isnan(got[0, 0])
    ref = np.maximum(x, 0) ** 2
    assert rel_err(got.ravel()[1:], ref.ravel()[1:]) < TOL[np.dtype(dtype)]
    finite = gp.from_numpy(x[1:].astype(dtype))
    assert gp.ops.which("gelu", finite, "tanh") == "nn:reference"  # a registry op (core's elementwise gelu): routable (to Triton, say)
    for got, ref in [
        (F.gelu(finite), _gelu(x[1:])),
        (F.gelu(finite, approximate="tanh"), _gelu(x[1:], "tanh")),
        (F.silu(finite), _silu(x[1:])),
        (F.relu(finite), np.maximum(x[1:], 0)),
    ]:
        assert rel_err(got.to_numpy(), ref) < max(TOL[np.dtype(dtype)], 1e-6)


def _np_masked_softmax(x, keep, log):
    z = np.where(keep, x, -np.inf)
    m = z.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(m)
    m = np.where(empty, 0, m)
    e = np.exp(z - m)
    s = e.sum(axis=-1, keepdims=True)
    if log:
        return np.where(empty, -np.inf, np.where(keep, z - m - np.log(np.where(empty, 1, s)), -np.inf))
    return np.where(empty, 0.0, e / np.where(empty, 1, s))


@pytest.mark.parametrize("dtype", [gp.float32, gp.bfloat16])
@pytest.mark.parametrize("log", [False, True])
def test_masked_softmax(rng, dtype, log):
    x = rand(rng, (2, 3, 17), dtype, 2.0)
    keep = rng.random((3, 17)) < 0.6  # broadcast over the first axis
    keep[1] = False  # a row with nothing left
    fn = F.log_softmax if log else F.softmax
    got = fn(gp.from_numpy(x.astype(dtype)), -1, gp.from_numpy(keep)).to_numpy().astype(np.float64)
    ref = _np_masked_softmax(x, np.broadcast_to(keep, x.shape), log)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    fin = np.isfinite(ref)
    assert rel_err(got[fin], ref[fin]) < (2e-6 if dtype == gp.float32 else 1e-2)
    # an additive mask: -inf where boolean False, 0 elsewhere, gives the same
    add = np.where(keep, 0.0, -np.inf).astype(np.float32)
    got2 = fn(gp.from_numpy(x.astype(dtype)), -1, gp.from_numpy(add)).to_numpy().astype(np.float64)
    np.testing.assert_array_equal(got2, got)
    # no mask: core's softmax along another axis
    got3 = fn(gp.from_numpy(x.astype(dtype)), 1).to_numpy()
    ref3 = _np_masked_softmax(np.moveaxis(x, 1, -1), np.ones((2, 17, 3), bool), log)
    assert rel_err(got3, np.moveaxis(ref3, -1, 1)) < (2e-6 if dtype == gp.float32 else 1e-2)


def test_errors():
    x = gp.zeros((4, 8), gp.float32)
    cases = [
        (lambda: F.swiglu(gp.zeros((4, 7), gp.float32)), ValueError, "must be even, got 7"),
        (lambda: F.swiglu(x, gp.zeros((4, 9), gp.float32)), ValueError, "up must match"),
        (lambda: F.swiglu(gp.zeros((4, 8), gp.int32)), TypeError, "float16, bfloat16, float32 or float64"),
        (lambda: F.geglu(x, None, "fast"), ValueError, "approximate must be 'none' or 'tanh'"),
        (lambda: F.gelu(x, "fast"), ValueError, "approximate must be 'none' or 'tanh'"),
        (lambda: F.relu_squared([1.0]), TypeError, "x must be a GPUArray"),
        (lambda: F.softmax(x, -1, gp.zeros((3,), gp.bool_)), ValueError, "does not broadcast"),
        (lambda: F.softmax(x, -1, gp.zeros((2, 4, 8), gp.bool_)), ValueError, "bigger one"),
        (lambda: F.softmax(x, -1, gp.zeros((8,), gp.int32)), TypeError, "boolean or float"),
        (lambda: F.softmax(x, -1, np.ones(8, bool)), TypeError, "mask must be a GPUArray"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_kernels_compile(need_nvrtc):
    for ct in ("float", "pgk::half", "pgk::bfloat16"):
        for act, gated, vec in [("pgk::Silu", True, 16 // (4 if ct == "float" else 2)), ("pgk::SiluFast", True, 8), ("pgk::Gelu", True, 1),
                                ("pgk::GeluTanh", True, 2), ("pgk::ReluSquared", False, 4)]:  # fmt: skip
            kern = activations._kernel(ct, act, gated, vec)
            for sm in (80, 90):
                assert kern.compile(sm).image[:4] == b"\x7fELF", (ct, act)


# -- the kernel (GPU) --------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_gated(rng, dtype):
    x = gp.zeros((2, 64), dtype)
    assert gp.ops.which("swiglu", x, None) == gp.ops.which("geglu", x, None, "none") == "nn:kernel"
    # odd halves (scalar loads), unaligned second halves, one row, many rows, Llama-3-8B's MLP width
    for shape in [(1, 2), (3, 14), (5, 18), (7, 64), (4, 2 * 14336), (3000, 40)]:
        for kind, approximate in [("swiglu", "none"), ("geglu", "none"), ("geglu", "tanh")]:
            for separate in (False, True):
                assert _gated(rng, dtype, shape, kind, approximate, separate) < TOL[np.dtype(dtype)], (shape, kind)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_relu_squared_strided(rng, dtype):
    x = rand(rng, (40, 30), dtype, 2.0)
    gx = gp.from_numpy(x.astype(dtype))
    assert gp.ops.which("relu_squared", gx) == "nn:kernel"
    for view, ref in [(gx, x), (gx[:, 3:19], x[:, 3:19]), (gx.T, x.T)]:
        assert rel_err(F.relu_squared(view).to_numpy(), np.maximum(ref, 0) ** 2) < TOL[np.dtype(dtype)]


@pytest.mark.gpu
def test_kernel_matches_torch(rng):
    torch = pytest.importorskip("torch")
    x = rand(rng, (32, 2 * 1024), gp.bfloat16, 2.0)
    t = torch.tensor(x, dtype=torch.float32, device="cuda").to(torch.bfloat16)
    g, u = t.float().chunk(2, dim=-1)
    ref = (torch.nn.functional.silu(g) * u).cpu().numpy()
    assert rel_err(F.swiglu(gp.from_numpy(x.astype(gp.bfloat16))).to_numpy(), ref) < 1e-2

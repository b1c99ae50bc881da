"""complex64 / complex128: creation, views of the parts, the elementwise
functions with complex kernels against NumPy in complex128, reductions,
matmul, indexing, and the clear errors for what complex numbers do not have."""

import warnings

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import random_array
from pygpukit import ufuncs

COMPLEX = [gp.complex64, gp.complex128]
TOL = {gp.complex64: 2e-6, gp.complex128: 1e-13}
_UFUNCS = [getattr(gp, u) for u in sorted(ufuncs._COMPLEX_UFUNCS) if isinstance(getattr(gp, u, None), ufuncs.Ufunc)]
UNARY = [u.name for u in _UFUNCS if u.nin == 1]
BINARY = [u.name for u in _UFUNCS if u.nin == 2]


def _z(rng, shape, dtype, scale=1.5):
    return (rng.uniform(-scale, scale, shape) + 1j * rng.uniform(-scale, scale, shape)).astype(dtype)


def _close(got, want, dtype, scale=1.0):
    np.testing.assert_allclose(got, want, rtol=TOL[dtype] * 4, atol=TOL[dtype] * 4 * scale, equal_nan=True)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_creation_transfer_and_parts(rng, dtype):
    z = _z(rng, (5, 7), dtype)
    g = gp.from_numpy(z)
    np.testing.assert_array_equal(g.to_numpy(), z)
    assert g.dtype == dtype and g.itemsize == np.dtype(dtype).itemsize
    np.testing.assert_array_equal(g.real.to_numpy(), z.real)
    np.testing.assert_array_equal(g.imag.to_numpy(), z.imag)
    np.testing.assert_array_equal(gp.real(g).to_numpy(), z.real)
    np.testing.assert_array_equal(gp.conj(g).to_numpy(), np.conj(z))
    np.testing.assert_allclose(gp.angle(g).to_numpy(), np.angle(z), rtol=1e-6)
    np.testing.assert_allclose(gp.angle(g, deg=True).to_numpy(), np.angle(z, deg=True), rtol=1e-5)
    # the parts are writable views
    g.imag[1:3] = 0.5
    z.imag[1:3] = 0.5
    g.real[:, ::2] *= 2
    z.real[:, ::2] *= 2
    np.testing.assert_array_equal(g.to_numpy(), z)
    np.testing.assert_array_equal(gp.full((3,), 1 - 2j, dtype).to_numpy(), np.full(3, 1 - 2j, dtype))
    np.testing.assert_array_equal(gp.zeros((2, 2), dtype).to_numpy(), np.zeros((2, 2), dtype))
    assert gp.full((2,), 1j).dtype == gp.complex128 and gp.asarray([1j, 2]).dtype == gp.complex128
    # a real array's parts
    r = gp.from_numpy(np.array([1.0, -2.0], np.float32))
    assert r.real is r and r.imag.to_numpy().tolist() == [0.0, 0.0]
    np.testing.assert_allclose(gp.angle(r).to_numpy(), [0.0, np.pi])


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_casts(rng, dtype):
    z = _z(rng, (33,), dtype)
    g = gp.from_numpy(z)
    for other in (gp.complex64, gp.complex128):
        np.testing.assert_array_equal(g.astype(other).to_numpy(), z.astype(other))
    with pytest.warns(np.exceptions.ComplexWarning):
        got = g.astype(gp.float32).to_numpy()
    np.testing.assert_array_equal(got, z.real.astype(np.float32))
    z[3] = 0
    g = gp.from_numpy(z)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(g.astype(gp.bool_).to_numpy(), z.astype(bool))  # nonzero, no warning
    for src in (np.int16, np.float32, np.float64, gp.bfloat16, np.bool_):
        x = random_array(rng, (17,), src)
        np.testing.assert_array_equal(gp.from_numpy(x).astype(dtype).to_numpy(), x.astype(np.float64).astype(dtype))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("name", UNARY)
def test_unary(rng, dtype, name):
    z = _z(rng, (257,), dtype)
    z[:3] = [0, 1, -1j]
    uf = getattr(gp, name)
    got = uf(gp.from_numpy(z)).to_numpy()
    with np.errstate(all="ignore"):
        want = uf.resolver(z.astype(np.complex128))
    want_dt = uf.resolver.resolve_dtypes((np.dtype(dtype), None))[-1]
    assert got.dtype == want_dt
    if want_dt.kind == "b":
        np.testing.assert_array_equal(got, want)
    else:
        _close(got, want.astype(got.dtype), dtype, scale=float(np.max(np.abs(want[np.isfinite(want)]))))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary(rng, dtype, name):
    a, b = _z(rng, (129,), dtype), _z(rng, (129,), dtype)
    b[:2] = [2, -3]  # small integer powers take the exact path
    a[5] = b[5]  # one equal pair
    uf = getattr(gp, name)
    got = uf(gp.from_numpy(a), gp.from_numpy(b)).to_numpy()
    with np.errstate(all="ignore"):
        want = uf.resolver(a.astype(np.complex128), b.astype(np.complex128))
    if want.dtype.kind == "b":
        np.testing.assert_array_equal(got, want)
    else:
        assert got.dtype == dtype
        _close(got, want.astype(got.dtype), dtype, scale=float(np.max(np.abs(want))))


def test_promotion_and_scalars(rng):
    x = random_array(rng, (6,), np.float32)
    g = gp.from_numpy(x)
    assert (g * 1j).dtype == gp.complex64 and (1j + g).dtype == gp.complex64
    assert (gp.arange(3) * 1j).dtype == gp.complex128
    np.testing.assert_allclose((g * (2 - 1j)).to_numpy(), x * np.complex64(2 - 1j), rtol=1e-6)
    z = gp.from_numpy(_z(rng, (6,), np.complex64))
    assert (z + gp.ones((6,), gp.bfloat16)).dtype == gp.complex64
    assert (z + gp.ones((6,), gp.float64)).dtype == gp.complex128
    assert (z * 2.5).dtype == gp.complex64 and gp.result_type(gp.float16, 1j) == gp.complex64
    zz = z.to_numpy()
    np.testing.assert_allclose((1 / z).to_numpy(), 1 / zz, rtol=1e-6)
    np.testing.assert_allclose((z**2).to_numpy(), zz**2, rtol=1e-6)
    np.testing.assert_array_equal((z == z).to_numpy(), np.ones(6, bool))
    # division by zero: inf/nan as NumPy
    with np.errstate(all="ignore"):
        want = np.array([1 + 1j, 0j], np.complex128) / np.array([0j, 0j])
    got = (gp.from_numpy(np.array([1 + 1j, 0j])) / gp.from_numpy(np.array([0j, 0j]))).to_numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_layouts(rng, dtype):
    a, b = _z(rng, (6, 8), dtype), _z(rng, (8,), dtype)
    got = (gp.from_numpy(a).T[::2] * gp.from_numpy(b)[::2, None]).to_numpy()
    _close(got, a.T[::2] * b[::2, None], dtype, 4)
    np.testing.assert_array_equal(gp.from_numpy(a).T.copy().to_numpy(), a.T)
    np.testing.assert_array_equal(gp.take(gp.from_numpy(a), [5, 0], axis=1).to_numpy(), a[:, [5, 0]])
    g = gp.from_numpy(a.copy())
    g[[1, 4]] = 2j
    g[g.real > 1] = 0
    a[[1, 4]] = 2j
    a[a.real > 1] = 0
    np.testing.assert_array_equal(g.to_numpy(), a)
    np.testing.assert_array_equal(gp.where(gp.from_numpy(a.real > 0), gp.from_numpy(a), 1j).to_numpy(), np.where(a.real > 0, a, 1j))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reductions(rng, dtype, axis):
    z = _z(rng, (40, 33), dtype)
    g = gp.from_numpy(z)
    ref = z.astype(np.complex128)
    s = gp.sum(g, axis=axis)
    assert s.dtype == dtype
    _close(s.to_numpy(), ref.sum(axis=axis), dtype, 40)
    _close(gp.mean(g, axis=axis).to_numpy(), ref.mean(axis=axis), dtype, 1)
    v = gp.var(g, axis=axis, ddof=1)
    assert v.dtype == np.var(z, axis=axis).dtype
    np.testing.assert_allclose(v.to_numpy(), np.var(ref, axis=axis, ddof=1), rtol=TOL[dtype] * 50)
    np.testing.assert_allclose(gp.std(g, axis=axis).to_numpy(), np.std(ref, axis=axis), rtol=TOL[dtype] * 50)
    _close(gp.cumsum(g, axis=axis).to_numpy(), np.cumsum(ref, axis=axis), dtype, 40)
    z[0] = 0
    g = gp.from_numpy(z)
    np.testing.assert_array_equal(gp.all(g, axis=axis).to_numpy(), np.all(z, axis=axis))
    np.testing.assert_array_equal(gp.any(g, axis=axis).to_numpy(), np.any(z, axis=axis))


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_products(rng, dtype, axis):
    # unit-ish magnitudes, so that products of 1320 factors stay in range
    shape = (40, 33)
    z = (np.exp(1j * rng.uniform(-np.pi, np.pi, shape)) * rng.uniform(0.8, 1.25, shape)).astype(dtype)
    g = gp.from_numpy(z)
    ref = z.astype(np.complex128)
    n = z.size if axis is None else shape[axis]
    p = gp.prod(g, axis=axis)
    assert p.dtype == dtype
    np.testing.assert_allclose(p.to_numpy(), ref.prod(axis=axis), rtol=TOL[dtype] * n)
    c = gp.cumprod(g, axis=axis)
    assert c.dtype == dtype
    np.testing.assert_allclose(c.to_numpy(), np.cumprod(ref, axis=axis), rtol=TOL[dtype] * n)
    # wider result dtypes, and a real input with a complex result
    wide = gp.prod(g, axis=axis, dtype=gp.complex128)
    assert wide.dtype == gp.complex128
    np.testing.assert_allclose(wide.to_numpy(), ref.prod(axis=axis), rtol=TOL[gp.complex64] * n)
    r = np.abs(z).astype(np.float32)
    pr = gp.cumprod(gp.from_numpy(r), axis=axis, dtype=dtype)
    assert pr.dtype == dtype
    np.testing.assert_allclose(pr.to_numpy(), np.cumprod(r.astype(np.float64), axis=axis), rtol=TOL[gp.complex64] * n)


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_matmul_dot_vdot(rng, dtype):
    a, b = _z(rng, (2, 5, 7), dtype), _z(rng, (7, 3), dtype)
    _close((gp.from_numpy(a) @ gp.from_numpy(b)).to_numpy(), a.astype(np.complex128) @ b, dtype, 10)
    v, w = _z(rng, (9,), dtype), _z(rng, (9,), dtype)
    _close(gp.vdot(gp.from_numpy(v), gp.from_numpy(w)).to_numpy(), np.vdot(v.astype(np.complex128), w), dtype, 10)
    _close(gp.dot(gp.from_numpy(v), gp.from_numpy(w)).to_numpy(), np.dot(v.astype(np.complex128), w), dtype, 10)
    r = random_array(rng, (7, 3), np.float32)
    _close((gp.from_numpy(a[0]) @ gp.from_numpy(r)).to_numpy(), a[0].astype(np.complex128) @ r, dtype, 10)


def test_what_complex_numbers_do_not_have(rng):
    g = gp.from_numpy(_z(rng, (4, 4), np.complex64))
    for call in (
        lambda: g < g, lambda: gp.maximum(g, g), lambda: gp.floor(g), lambda: gp.arctan2(g, g), lambda: gp.max(g),
        lambda: g.argmax(), lambda: gp.sort(g), lambda: gp.unique(g), lambda: gp.clip(g, 0, 1),
        lambda: gp.prod(g, dtype=gp.float64), lambda: gp.cumprod(g, dtype=gp.float32), lambda: gp.sum(g, dtype=gp.float32), lambda: gp.random.default_rng(0).bernoulli(size=3, dtype=gp.complex64),
    ):  # fmt: skip
        with pytest.raises(TypeError):
            call()


def test_dlpack_and_numpy_interop(rng):
    z = _z(rng, (3, 5), np.complex128)
    g = gp.from_numpy(z)
    np.testing.assert_array_equal(np.asarray(g), z)
    if gp.backend() == "cpu":
        np.testing.assert_array_equal(np.from_dlpack(g), z)
    back = gp.from_dlpack(g)
    assert back.dtype == gp.complex128
    np.testing.assert_array_equal(back.to_numpy(), z)

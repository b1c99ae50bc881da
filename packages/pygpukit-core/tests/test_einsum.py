"""gp.einsum against numpy.einsum: the common contractions, broadcasting, dtypes, paths and errors."""

import numpy as np
import pytest

import pygpukit as gp

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij->", [(3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(3, 4), (2, 4, 5)]),  # ellipses of different lengths
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 5)]),  # and broadcasting
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("ijk,jil->kl", [(3, 4, 5), (4, 3, 6)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk,kl", [(2, 3), (3, 4), (4, 5)]),
    ("ab,bc,cd,de->ae", [(2, 30), (30, 40), (40, 3), (3, 2)]),
    ("i,i,i->", [(4,), (4,), (4,)]),
    ("bi,bi->b", [(6, 7), (6, 7)]),
    ("ij,j->i", [(5, 6), (6,)]),
    ("ii,ij->j", [(3, 3), (3, 4)]),
    ("iij->ij", [(2, 2, 3)]),
    ("iji->j", [(3, 2, 3)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("Ab,ba", [(2, 3), (3, 2)]),  # implicit output in ASCII order: 'A' before 'a'
    ("bA,aB", [(2, 3), (3, 2)]),
    ("i j,j k", [(2, 3), (3, 4)]),  # spaces are ignored
    ("...", [(3, 3)]),
    ("i...->...", [(3, 4)]),
    ("i,i", [(1,), (3,)]),  # a size-1 dimension broadcasts against the same label
    ("ij,jk", [(2, 1), (3, 4)]),
    ("ab,cd,ef->abcdef", [(2, 2), (2, 1), (1, 2)]),
    ("ij,jk->ik", [(3, 0), (0, 5)]),  # empty sum: zeros
    ("ij,ij->", [(2, 0), (2, 0)]),
    ("", [()]),
]


def _operands(rng, shapes, dtype):
    return [np.asarray(rng.standard_normal(s)).astype(dtype) for s in shapes]


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize("subscripts,shapes", CASES, ids=[c[0] or "scalar" for c in CASES])
def test_against_numpy_float64(rng, subscripts, shapes, optimize):
    ops = _operands(rng, shapes, np.float64)
    got = gp.einsum(subscripts, *[gp.asarray(o) if o.ndim else gp.from_numpy(o) for o in ops], optimize=optimize)
    want = np.einsum(subscripts, *ops)
    assert got.dtype == np.float64 and got.shape == want.shape
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("subscripts,shapes", CASES, ids=[c[0] or "scalar" for c in CASES])
def test_against_numpy_float32(rng, subscripts, shapes):
    ops = _operands(rng, shapes, np.float32)
    got = gp.einsum(subscripts, *[gp.from_numpy(o) for o in ops])
    want = np.einsum(subscripts, *[o.astype(np.float64) for o in ops])
    assert got.dtype == np.float32 and got.shape == want.shape
    # float32 products accumulated in float32 over at most 40 terms of size ~1
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-5, atol=1e-5)


def test_strided_operands(rng):
    a = rng.standard_normal((6, 8, 5))
    b = rng.standard_normal((5, 9))
    ga, gb = gp.asarray(a), gp.asarray(b)
    for sub, x, y, hx, hy in [
        ("ijk,kl->ijl", ga[::2, 1::2], gb, a[::2, 1::2], b),
        ("kji,kl->ijl", ga.T, gb, a.T, b),
        ("ij,jk->ik", ga[0].T, ga[1], a[0].T, a[1]),
        ("ii->i", ga[:, :6, 0][::-1], None, a[:, :6, 0][::-1], None),
    ]:
        args = [x] if y is None else [x, y]
        hargs = [hx] if hy is None else [hx, hy]
        np.testing.assert_allclose(gp.einsum(sub, *args).to_numpy(), np.einsum(sub, *hargs), rtol=1e-12)


def test_diagonal_is_a_view():
    x = np.arange(16.0).reshape(4, 4)
    gx = gp.asarray(x)
    d = gp.einsum("ii->i", gx)
    np.testing.assert_array_equal(d.to_numpy(), np.diag(x))
    assert d.data_ptr == gx.data_ptr and d.strides == (40,)
    assert gp.einsum("ij->ji", gx).strides == (8, 32)  # a transposed view, as NumPy returns


def test_dtypes():
    i8 = np.arange(-6, 6, dtype=np.int8).reshape(3, 4) * 9  # products overflow int8: wraps as NumPy's
    i16 = np.arange(12, dtype=np.int16).reshape(4, 3)
    for sub, ops in [("ij,jk", [i8, i8.T.copy()]), ("ij,jk", [i8, i16]), ("ij,ij->", [i8, i8]), ("i,i", [i8[0], i16[:, 0]])]:
        got = gp.einsum(sub, *[gp.asarray(o) for o in ops])
        want = np.einsum(sub, *ops)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.to_numpy(), want)
    b = np.array([[True, False], [False, False]])
    got = gp.einsum("ij,jk", gp.asarray(b), gp.asarray(b))
    assert got.dtype == np.bool_ and got.to_numpy().tolist() == np.einsum("ij,jk", b, b).tolist()
    assert gp.einsum("i->", gp.asarray(np.array([True, False]))).item() is True
    h = np.linspace(0.5, 2, 12, dtype=np.float16).reshape(3, 4)
    got = gp.einsum("ij,kj->ik", gp.asarray(h), gp.asarray(h))
    assert got.dtype == np.float16
    np.testing.assert_allclose(
        got.to_numpy().astype(np.float64), np.einsum("ij,kj->ik", h.astype(np.float64), h.astype(np.float64)), rtol=2e-3
    )
    mixed = gp.einsum("i,i->i", gp.asarray(np.ones(3, np.float32)), gp.asarray(np.arange(3, dtype=np.int32)))
    assert mixed.dtype == np.float64  # NumPy: float32 with int32 gives float64
    bf = gp.einsum("ij,jk", gp.ones((2, 3), gp.bfloat16), gp.ones((3, 2), gp.bfloat16))
    assert bf.dtype == gp.bfloat16 and (bf.to_numpy().astype(np.float32) == 3).all()


def test_host_operands_and_sublists(rng):
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 5))
    np.testing.assert_allclose(gp.einsum("ij,jk", a, gp.asarray(b)).to_numpy(), a @ b, rtol=1e-12)
    s = gp.einsum(",i->i", 2.5, gp.asarray(b[0]))
    assert s.shape == (5,) and s.dtype == np.float64
    np.testing.assert_allclose(s.to_numpy(), 2.5 * b[0])
    assert gp.einsum("", 3.0).shape == ()
    ga, gb = gp.asarray(a), gp.asarray(b)
    np.testing.assert_allclose(gp.einsum(ga, [0, 1], gb, [1, 2], [0, 2]).to_numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(gp.einsum(ga, [0, 1], gb, [1, 2]).to_numpy(), a @ b, rtol=1e-12)
    np.testing.assert_allclose(gp.einsum(ga, [Ellipsis, 30]).to_numpy(), np.einsum(a, [Ellipsis, 30]), rtol=1e-12)


def test_paths(rng):
    a, b, c, d = (rng.standard_normal(s) for s in [(2, 3), (3, 40), (40, 50), (50, 2)])
    g = [gp.asarray(x) for x in (a, b, c, d)]
    want = a @ b @ c @ d
    for opt in (False, True, "greedy", "optimal", ["einsum_path", (2, 3), (1, 2), (0, 1)], ["einsum_path", (0, 1)]):
        np.testing.assert_allclose(gp.einsum("ij,jk,kl,lm->im", *g, optimize=opt).to_numpy(), want, rtol=1e-11)
    path, _ = np.einsum_path("ij,jk,kl,lm->im", a, b, c, d, optimize="greedy")
    np.testing.assert_allclose(gp.einsum("ij,jk,kl,lm->im", *g, optimize=path).to_numpy(), want, rtol=1e-11)
    with pytest.raises(TypeError, match="path"):
        gp.einsum("ij,jk,kl->il", g[0], g[1], g[2], optimize="fastest")


ERRORS = [
    ("ij,jk", [(3, 3)], "fewer operands"),
    ("ij", [(3, 3), (3,)], "more operands"),
    ("i2", [(3, 3)], "invalid subscript '2'"),
    ("ij->j->", [(3, 3)], "invalid subscript '-'"),
    ("ij-", [(3, 3)], "proper '->'"),
    ("i.j", [(3, 3)], "not part of an ellipsis"),
    ("....i", [(3, 3)], "not part of an ellipsis"),
    ("...i...", [(3,)], "not part of an ellipsis"),
    ("ijk", [(3, 3)], "too many subscripts for operand 0"),
    ("i", [(3, 3)], "more dimensions than subscripts"),
    ("ij->k", [(3, 3)], "output subscript 'k' which never appeared"),
    ("ij->ii", [(3, 3)], "output subscript 'i' multiple times"),
    ("...ij->ij", [(2, 3, 3)], "output has more dimensions"),
    ("ii", [(2, 3)], r"collapsing index 'i' don't match \(2 != 3\)"),
    ("ij,jk", [(2, 2), (3, 4)], "could not be broadcast"),
    ("...i,...i", [(2, 3), (4, 3)], "could not be broadcast"),
    ("i,i->", [(2,), (3,)], "could not be broadcast"),
]


@pytest.mark.parametrize("subscripts,shapes,match", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(subscripts, shapes, match):
    ops = [gp.ones(s, gp.float32) for s in shapes]
    with pytest.raises(ValueError, match=match):
        gp.einsum(subscripts, *ops)
    with pytest.raises(ValueError):  # NumPy agrees that this is a ValueError
        np.einsum(subscripts, *[np.ones(s, np.float32) for s in shapes])


def test_argument_errors():
    a = gp.ones((3, 3), gp.float32)
    with pytest.raises(ValueError, match="at least one operand"):
        gp.einsum("ij")
    with pytest.raises(TypeError, match="integer or an ellipsis"):
        gp.einsum(a, [0.5, 1])
    with pytest.raises(ValueError, match="valid range"):
        gp.einsum(a, [52, 1])
    with pytest.raises(TypeError):
        gp.einsum("ij", a, out=None)

"""A NumPy mirror of kernels/fft.cu, statement by statement where the index
math lives (Stockham stages, load and store modes, the radix-4/8 butterflies,
four-step passes, Bluestein), run on the host in float64. It checks the
algorithms and the plans of _fft_launch / _fft_plan without a GPU; the GPU
tests check the CUDA text itself."""

from __future__ import annotations

import numpy as np

from pygpukit_audio import _fft_launch as L
from pygpukit_audio import _fft_plan as P

H = np.sqrt(0.5)


def _rot(a, d):
    return a * (-1j if d < 0 else 1j)


def _dft4(a, b, c, d, s):
    t0, t1, t2, t3 = a + c, a - c, b + d, _rot(b - d, s)
    return t0 + t2, t1 + t3, t0 - t2, t1 - t3


def _dft(u, radix, d):
    if radix == 2:
        return [u[0] + u[1], u[0] - u[1]]
    if radix == 4:
        return list(_dft4(*u, d))
    if radix == 16:  # 4 x 4: DFTs over n2 + 4 n1, twiddles w16^(n2 k1), DFTs over n2
        a = [list(_dft4(u[n2], u[n2 + 4], u[n2 + 8], u[n2 + 12], d)) for n2 in range(4)]
        a = [[a[n2][k1] * np.exp(d * 2j * np.pi * n2 * k1 / 16) for k1 in range(4)] for n2 in range(4)]
        y = [_dft4(a[0][k1], a[1][k1], a[2][k1], a[3][k1], d) for k1 in range(4)]
        return [y[k % 4][k // 4] for k in range(16)]
    if radix == 8:
        e = _dft4(u[0], u[2], u[4], u[6], d)
        o = list(_dft4(u[1], u[3], u[5], u[7], d))
        o[1] = H * (o[1].real - d * o[1].imag) + 1j * H * (o[1].imag + d * o[1].real)
        o[2] = _rot(o[2], d)
        o[3] = H * (-o[3].real - d * o[3].imag) + 1j * H * (-o[3].imag + d * o[3].real)
        return [e[k] + o[k] for k in range(4)] + [e[k] - o[k] for k in range(4)]
    return [sum(u[q] * np.exp(d * 2j * np.pi * ((q * k) % radix) / radix) for q in range(radix)) for k in range(radix)]


def _transform(s, tw, d):
    """The Stockham stages of fft_block on rows s (batch, M)."""
    m = s.shape[-1]
    p = 1
    for radix in P.radices(m) or ():
        nb, stride = m // radix, m // (p * radix)
        i = np.arange(nb)
        u = [s[:, i + q * nb] for q in range(radix)]
        k = i % p
        if p > 1:  # w^q from the table at the powers of two q, products elsewhere
            w = {}
            for q in range(1, radix):
                lo = q & -q
                w[q] = (tw if d < 0 else np.conj(tw))[q * k * stride] if q == lo else w[q - lo] * w[lo]
            u = [u[0]] + [u[q] * w[q] for q in range(1, radix)]
        u = _dft(u, radix, d)
        j = (i - k) * radix + k
        out = np.empty_like(s)
        for q in range(radix):
            out[:, j + q * p] = u[q]
        s, p = out, p * radix
    return s


def _table(kind, n, m=0):
    return P._table(kind, n, m, np.dtype(np.complex128)).to_numpy()


def block(kind, x, n):
    """fft_block over the rows of x (batch, input length) for an n-point ``kind``."""
    d, length, load, store = L.modes(kind, n)
    if kind in ("fft", "ifft") and x.dtype.kind == "f":
        load = L.LD_REAL
    m, blue = L.block_length(length, 16)
    rtw = _table("rtw", length) if load == L.LD_IRPRE or store == L.ST_RPOST else None
    j = np.arange(length)
    if load == L.LD_C2C:
        v = x[:, :length].astype(complex)
    elif load == L.LD_REAL:
        v = x[:, :length] + 0j
    elif load == L.LD_PAIRS:
        v = x[:, 0 : 2 * length : 2] + 1j * x[:, 1 : 2 * length : 2]
    elif load == L.LD_HERM:
        low = j <= length // 2
        v = x[:, np.where(low, j, length - j)]
        v = np.where(low, v, np.conj(v))
        v[:, 0] = x[:, 0].real
    else:
        a, b = x[:, j].copy(), np.conj(x[:, length - j])
        a[:, 0], b[:, 0] = a[:, 0].real, b[:, 0].real
        v = (a + b) + 1j * (a - b) * np.conj(rtw[j])
    s = np.zeros((x.shape[0], m), complex)
    s[:, :length] = v
    tw = _table("tw", m)
    if blue:
        chirp, bhat = _table("chirp", length), _table("bhat", length, m)
        c = chirp if d < 0 else np.conj(chirp)
        s[:, :length] *= c
        s = _transform(s, tw, -1) * (bhat if d < 0 else np.conj(bhat))
        s = _transform(s, tw, 1)
        s[:, :length] *= c
    else:
        s = _transform(s, tw, d)
    z = s[:, :length]
    if store == L.ST_C2C:
        return z
    if store == L.ST_HALF:
        return z[:, : length // 2 + 1]
    if store == L.ST_REAL:
        return z.real
    if store == L.ST_IRPOST:
        return np.stack([z.real, z.imag], axis=-1).reshape(x.shape[0], 2 * length)
    k = np.arange(length + 1)
    a, b = z[:, k % length], np.conj(z[:, (length - k) % length])
    return 0.5 * ((a + b) + _rot(a - b, -1) * rtw[k])


def four_step(x, d, n1, n2):
    """The two passes of _four_step on contiguous complex rows x (batch, n1 * n2)."""
    batch, n = x.shape
    ptw = _table("tw", n)
    cols = x.reshape(batch, n1, n2).transpose(0, 2, 1).reshape(batch * n2, n1)
    y = _transform(cols.copy(), _table("tw", n1), d)  # y[(b, j2), k1]
    j2 = np.tile(np.arange(n2), batch)[:, None]
    w = ptw[(j2 * np.arange(n1)) % n]
    y = y * (w if d < 0 else np.conj(w))
    rows = y.reshape(batch, n2, n1).transpose(0, 2, 1).reshape(batch * n1, n2)  # tmp row k1
    z = _transform(rows.copy(), _table("tw", n2), d)  # z[(b, k1), k2] -> X[k1 + n1 k2]
    return z.reshape(batch, n1, n2).transpose(0, 2, 1).reshape(batch, n)


def real_four_step(x, n1, n2):
    """The two passes of _real_four_step on contiguous real rows x (batch, n1 * n2):
    the n / 2 + 1 bins of the rfft, gathered from ST_HMIRROR's stores."""
    batch, n = x.shape
    h1 = n1 // 2 + 1
    ptw = _table("tw", n)
    cols = x.reshape(batch, n1, n2).transpose(0, 2, 1).reshape(batch * n2, n1) + 0j
    y = _transform(cols, _table("tw", n1), -1)[:, :h1]  # the first L = h1 points of column (b, j2)
    y = y * ptw[(np.tile(np.arange(n2), batch)[:, None] * np.arange(h1)) % n]
    rows = y.reshape(batch, n2, h1).transpose(0, 2, 1).reshape(batch * h1, n2)  # tmp row (b, k1)
    z = _transform(rows.copy(), _table("tw", n2), -1).reshape(batch, h1, n2)
    out = np.full((batch, n // 2 + 1), np.nan, complex)
    for k1 in range(h1):
        x_ = k1 + n1 * np.arange(n2)
        direct = 2 * x_ <= n
        assert np.isnan(out[:, x_[direct]]).all()  # every bin is stored once
        out[:, x_[direct]] = z[:, k1, direct]
        if k1 != 0 and 2 * k1 != n1:
            assert np.isnan(out[:, n - x_[~direct]]).all()
            out[:, n - x_[~direct]] = np.conj(z[:, k1, ~direct])
    return out


def rows(flat, batch, irows, length, clip=(0, 0), pairs=False):
    """The rows fft_block reads: element j of row b at (b / inner) * bs + r0 + j * es
    (real pairs: 2j and 2j + 1), r0 = (b % inner) * is - shift, zero outside
    [0, clip) when clip > 0."""
    inner, bs, is_, es = irows
    row_len, shift = clip
    b = np.arange(batch)[:, None]
    r0 = (b % inner) * is_ - shift
    base = (b // inner) * bs + r0
    offs = np.arange(2 * length if pairs else length)[None, :] * es
    inside = (r0 + offs >= 0) & (r0 + offs < row_len) if row_len > 0 else np.ones((batch, offs.size), bool)
    return np.where(inside, flat[np.where(inside, base + offs, 0)], 0)

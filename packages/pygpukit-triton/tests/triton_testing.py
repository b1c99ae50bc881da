"""Float64 NumPy references and tolerances of the pygpukit-triton tests."""

from __future__ import annotations

import math
import os
import sys

import numpy as np

import pygpukit as gp

# Tolerances on the norm-wise relative error against float64: bfloat16 keeps 8
# mantissa bits (one rounding of the output: 2^-8 relative), float16 11 bits;
# float32 sees only reduction-order differences. Matmul and attention add
# accumulation over K / keys in float32 and (attention) P rounded to the dtype.
TOL = {np.dtype(gp.bfloat16): 1e-2, np.dtype(gp.float16): 2e-3, np.dtype(np.float32): 2e-5}
DOT_TOL = {np.dtype(gp.bfloat16): 2e-2, np.dtype(gp.float16): 4e-3}


def rel_err(got, ref) -> float:
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(got - ref)) / max(float(np.max(np.abs(ref))), 1e-30)) if ref.size else 0.0


def rand(rng: np.random.Generator, shape, dtype, scale: float = 1.0) -> np.ndarray:
    """Standard-normal values exactly representable in ``dtype`` (as that dtype)."""
    return (rng.standard_normal(shape) * scale).astype(dtype)


def f64(a) -> np.ndarray:
    return np.asarray(a.to_numpy() if isinstance(a, gp.GPUArray) else a).astype(np.float64)


def ref_rms(x, w, eps):
    x = f64(x)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * f64(w)


def ref_layer(x, w, b, eps):
    x = f64(x)
    c = x - x.mean(axis=-1, keepdims=True)
    y = c / np.sqrt(np.mean(c * c, axis=-1, keepdims=True) + eps)
    y = y if w is None else y * f64(w)
    return y if b is None else y + f64(b)


def ref_softmax(x):
    x = f64(x)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def ref_silu(g):
    g = f64(g)
    return g / (1 + np.exp(-g))


_erf = np.vectorize(math.erf)


def ref_gelu(g, approximate="none"):
    g = f64(g)
    if approximate == "tanh":
        return 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
    return 0.5 * g * (1 + _erf(g / math.sqrt(2)))


def ref_rope(x, cos_sin, positions, layout, rotary_dim):
    """x (T, H, D) or (B, S, H, D) float64 rotated (positions outside the cache: unchanged)."""
    x = f64(x).copy()
    cs = f64(cos_sin)
    pos = np.broadcast_to(np.asarray(positions), x.shape[:-2])
    half = rotary_dim // 2
    for idx in np.ndindex(*x.shape[:-2]):
        p = int(pos[idx])
        if not 0 <= p < cs.shape[0]:
            continue
        c, s = cs[p, 0], cs[p, 1]
        v = x[idx][..., :rotary_dim]
        a, b = (v[..., :half], v[..., half:]) if layout == "neox" else (v[..., 0::2], v[..., 1::2])
        ra, rb = a * c - b * s, b * c + a * s
        if layout == "neox":
            x[idx][..., :half], x[idx][..., half:rotary_dim] = ra, rb
        else:
            x[idx][..., 0:rotary_dim:2], x[idx][..., 1:rotary_dim:2] = ra, rb
    return x


def ref_attention(q, k, v, causal, scale=None):
    """(B, Hq, Sq, D) attention of float64 q over k, v (B, Hkv, Sk, D), GQA; a query
    that sees no key gets zeros."""
    q, k, v = f64(q), f64(k), f64(v)
    hq, sq, d = q.shape[1:]
    hkv, sk = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    k = np.repeat(k, hq // hkv, axis=1)
    v = np.repeat(v, hq // hkv, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    if causal:
        vis = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
        s = np.where(vis, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    tot = e.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", e / np.where(tot > 0, tot, 1), v)


def path_without(tmp_path, *names: str) -> list[str]:
    """sys.path with each directory that holds one of the packages ``names``
    replaced by a directory of links to everything else in it (for a subprocess
    run with ``python -S``: an environment without those packages)."""
    hidden = lambda n: any(n == p or n.startswith((f"{p}-", f"{p}.")) for p in names)
    out = []
    for i, p in enumerate(sys.path):
        if not p or not os.path.isdir(p):
            continue
        entries = os.listdir(p)
        if not any(hidden(n) for n in entries):
            out.append(p)
            continue
        shadow = tmp_path / f"path{i}"
        shadow.mkdir()
        for n in entries:
            if not hidden(n):
                os.symlink(os.path.join(p, n), shadow / n)
        out.append(str(shadow))
    return out

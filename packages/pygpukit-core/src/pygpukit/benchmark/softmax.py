"""softmax over the last axis of an (8192, 8192) bfloat16 and float32 array, and
logsumexp over the last axis in float32: GB/s of bytes read + written, against
torch.softmax / torch.logsumexp and cupyx.scipy.special where installed (NumPy
on the CPU backend, at a smaller size). Each row is read once and written once,
so the floor is (read + write) / the copy bandwidth."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import pygpukit as gp

from . import peers
from .harness import Recorder, median_time_ms


def _numpy_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _numpy_logsumexp(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return np.log(np.exp(x - m).sum(axis=-1)) + m[..., 0]


def _cases(name: str, mod, host: np.ndarray) -> dict[str, tuple[Callable[[], object], int]]:
    """case -> (call, bytes moved) for implementation ``name``; a case the peer cannot run is left out."""
    n = host.size
    lse = 4 * (n + host.shape[0])  # reads the rows, writes one float32 per row
    f32 = host.astype(np.float32)
    if name == "pygpukit":
        a32, a16 = gp.from_numpy(f32), gp.from_numpy(host.astype(gp.bfloat16))
        return {
            "softmax_bf16": (lambda: gp.softmax(a16, axis=-1), 4 * n),
            "softmax_f32": (lambda: gp.softmax(a32, axis=-1), 8 * n),
            "logsumexp_f32": (lambda: gp.logsumexp(a32, axis=-1), lse),
        }
    if name == "torch":
        t32 = mod.from_numpy(f32).cuda()
        t16 = t32.to(mod.bfloat16)
        return {
            "softmax_bf16": (lambda: mod.softmax(t16, -1), 4 * n),
            "softmax_f32": (lambda: mod.softmax(t32, -1), 8 * n),
            "logsumexp_f32": (lambda: mod.logsumexp(t32, -1), lse),
        }
    if name == "cupy":
        try:
            from cupyx.scipy import special
        except ImportError:
            return {}
        c32 = mod.asarray(f32)
        out: dict[str, tuple[Callable[[], object], int]] = {}
        if hasattr(special, "softmax"):
            out["softmax_f32"] = (lambda: special.softmax(c32, axis=-1), 8 * n)
        if hasattr(special, "logsumexp"):
            out["logsumexp_f32"] = (lambda: special.logsumexp(c32, axis=-1), lse)
        return out  # CuPy has no bfloat16
    return {
        "softmax_f32": (lambda: _numpy_softmax(f32), 8 * n),
        "logsumexp_f32": (lambda: _numpy_logsumexp(f32), lse),
    }


def bench_softmax(rec: Recorder, quick: bool) -> None:

    gpu = gp.backend() == "cuda"
    side = (2048 if quick else 8192) if gpu else (512 if quick else 2048)
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    host = np.random.default_rng(5).standard_normal((side, side), dtype=np.float32) * 3
    for name, timer, mod in peers.impls():
        for case, (fn, moved) in _cases(name, mod, host).items():
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(f"{case}_{side}x{side}", name, "GB/s", moved / ms / 1e6, True)
        peers.free(name, mod)

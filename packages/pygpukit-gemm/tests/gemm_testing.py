"""Helpers shared by the gemm plugin's tests: the mixture-of-experts cases of
the grouped products (bf16 / fp16 / float32 and fp8)."""

import numpy as np


def uneven_offsets(rng, t, e):
    """Contiguous-layout offsets (int32) of ``e`` experts over ``t`` rows: uneven
    counts, expert 1 without tokens, the last 7+ rows owned by no expert."""
    counts = rng.integers(0, 2 * t // e, e)
    counts[1] = 0
    return np.minimum(np.cumsum(counts), t - 7).astype(np.int32)


def grouped_reference(x, w, b, ends):
    """float64 (t, n) product of each expert's rows of ``x`` with ``w[e].T`` (+ ``b[e]``);
    rows past ``ends[-1]`` zero."""
    ref = np.zeros((x.shape[0], w.shape[1]))
    start = 0
    for i, end in enumerate(ends):
        ref[start:end] = x[start:end] @ w[i].T + (0 if b is None else b[i])
        start = end
    return ref

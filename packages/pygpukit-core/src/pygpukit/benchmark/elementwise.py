"""Elementwise ops on 2^26 elements (float32 and bfloat16), and exp on a
transposed (8192, 8192) float32 view against the contiguous array: GB/s of
bytes read + written, against PyTorch and CuPy where installed (NumPy on the
CPU backend, at 2^22). Each op reads its inputs once and writes once, so the
floor is bytes / the copy bandwidth."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

import pygpukit as gp

from . import peers
from .harness import Recorder, median_time_ms

# op -> number of array inputs; each runs as f(*inputs) in every implementation
UNARY = ("exp", "sqrt", "sin", "tanh", "sigmoid", "gelu", "silu", "abs", "floor", "isnan")
BINARY = ("add", "multiply", "divide", "maximum", "power", "less", "arctan2")


def _fn(name: str, op: str, mod: Any) -> Callable[..., Any] | None:
    """The implementation of ``op`` in library ``name``, or None where it has none."""
    if name == "pygpukit":
        return getattr(gp, op)
    if name == "torch":
        nn = mod.nn.functional
        return {
            "sigmoid": mod.sigmoid, "gelu": nn.gelu, "silu": nn.silu, "multiply": mod.mul, "divide": mod.div,
            "power": mod.pow, "less": mod.lt, "arctan2": mod.atan2,
        }.get(op, getattr(mod, op, None))  # fmt: skip
    if name == "cupy":
        return getattr(mod, op, None)  # CuPy has no sigmoid/gelu/silu ufuncs
    numpy_only = {"sigmoid": lambda x: 1 / (1 + np.exp(-x)), "gelu": None, "silu": lambda x: x / (1 + np.exp(-x))}
    return numpy_only[op] if op in numpy_only else getattr(np, op)


def _upload(name: str, mod: Any, host: np.ndarray, bf16: bool) -> Any:
    if name == "pygpukit":
        return gp.from_numpy(host.astype(gp.bfloat16) if bf16 else host)
    if name == "torch":
        t = mod.from_numpy(host).cuda()
        return t.to(mod.bfloat16) if bf16 else t
    if name == "cupy":
        return None if bf16 else mod.asarray(host)  # CuPy has no bfloat16
    return None if bf16 else host


def bench_elementwise(rec: Recorder, quick: bool) -> None:

    gpu = gp.backend() == "cuda"
    log2 = (22 if quick else 26) if gpu else 20
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    rng = np.random.default_rng(3)
    x_host, y_host = (np.abs(rng.standard_normal(1 << log2, dtype=np.float32)) + 0.5 for _ in range(2))
    side = (2048 if quick else 8192) if gpu else 1024
    square = rng.standard_normal((side, side), dtype=np.float32)
    impls = peers.impls()
    # Each op is measured for every implementation in turn, so that clock and
    # thermal drift over the run does not favour whichever library goes first.
    for bf16 in (False, True):
        inputs = [(name, timer, mod, _upload(name, mod, x_host, bf16), _upload(name, mod, y_host, bf16)) for name, timer, mod in impls]
        size = 2 if bf16 else 4
        for op in UNARY + BINARY:
            for name, timer, mod, x, y in inputs:
                f = _fn(name, op, mod)
                if x is None or f is None:
                    continue
                args = (x,) if op in UNARY else (x, y)
                out_size = 1 if op in ("isnan", "less") else size
                moved = (len(args) * size + out_size) << log2
                ms = median_time_ms(functools.partial(f, *args), timer, warm, reps)
                rec.add(f"{op}_{'bf16' if bf16 else 'f32'}_2^{log2}", name, "GB/s", moved / ms / 1e6, True)
        del inputs
        for name, _, mod in impls:
            peers.free(name, mod)
    for name, timer, mod in impls:
        a = _upload(name, mod, square, False)
        exp = _fn(name, "exp", mod)
        assert exp is not None  # every implementation has exp
        for layout, view in (("contig", a), ("transposed", a.T)):
            ms = median_time_ms(functools.partial(exp, view), timer, warm, reps)
            rec.add(f"exp_f32_{side}^2_{layout}", name, "GB/s", 8 * side * side / ms / 1e6, True)
        del a, view
        peers.free(name, mod)

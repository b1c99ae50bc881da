"""``pygpukit example [--dtype D] [--rows R] [--cols C]``: run the example's
ops on fresh random row-strided inputs (the first C columns of wider arrays),
compare them with float64 NumPy, and print which implementation ran. Exit
status 1 when a result is outside its tolerance."""

from __future__ import annotations

import argparse

import numpy as np

import pygpukit as gp

from . import scaled_residual_add

# result dtype -> (relative, absolute) error allowed: twice the dtype's
# rounding, float32 math for the 16-bit floats, float16's subnormal spacing
TOLERANCE = {"float16": (2**-10, 2**-24), "bfloat16": (2**-7, 0.0), "float32": (2**-20, 0.0), "float64": (2**-48, 0.0)}
ALPHA = 0.375


def _numpy_softmax(x: np.ndarray, log: bool) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def _report(what: str, impl: str, got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> bool:
    err = np.abs(got.astype(np.float64) - want)
    ok = bool(np.all(err <= bound))
    print(f"{what:<22} {impl:<28} max error {err.max():.3g} {'ok' if ok else 'FAILED'}")
    return ok


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pygpukit example", description=__doc__)
    p.add_argument("--dtype", default="float32", choices=sorted(TOLERANCE))
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--cols", type=int, default=1000)
    args = p.parse_args(argv)
    dt = np.dtype(getattr(gp, args.dtype))
    rel, tiny = TOLERANCE[args.dtype]
    rng = np.random.default_rng()
    wide = (args.rows, args.cols + 24)
    xh, rh = (rng.standard_normal(wide).astype(dt) for _ in range(2))
    x, r = gp.from_numpy(xh)[:, : args.cols], gp.from_numpy(rh)[:, : args.cols]
    x64, r64 = xh[:, : args.cols].astype(np.float64), rh[:, : args.cols].astype(np.float64)
    print(f"pygpukit {gp.__version__} ({gp.backend()}), {args.dtype} {args.rows}x{args.cols} (row stride {wide[1]})")
    impl = gp.ops.which("scaled_residual_add", x, r, ALPHA)
    got = scaled_residual_add(x, r, ALPHA).to_numpy()
    ok = _report("scaled_residual_add", impl, got, r64 + ALPHA * x64, rel * (np.abs(r64) + np.abs(ALPHA * x64)) + tiny)
    for op in ("softmax", "log_softmax"):
        want = _numpy_softmax(x64, op == "log_softmax")
        got = getattr(gp, op)(x).to_numpy()
        # a row's sum is off by a few float32 rounding errors: relative in softmax, absolute in log_softmax
        bound = 8 * rel * (np.abs(want) + (op == "log_softmax")) + tiny
        ok = _report(op, gp.ops.which(op, x), got, want, bound) and ok
    return 0 if ok else 1

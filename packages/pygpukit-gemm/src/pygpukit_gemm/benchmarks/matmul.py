"""The suite ``matmul``: ``gp.matmul`` at 8192^3 (bf16, fp16, tf32, fp32) and
``gp.linear`` (x @ W.T, W as stored by PyTorch's Linear) at LLM shapes, bf16:
M in {1, 16, 128, 2048, 8192} against the (K, N) of Llama-3-8B's projections,
in TFLOP/s against PyTorch's cuBLAS; fp8 ``scaled_mm``; decode GEMV with bf16,
int8, int4 and fp8 weights. Whichever implementation the registry picks runs
(the note names it: with this plugin, cuBLASLt for the big products)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.benchmark import peers
from pygpukit.benchmark.harness import Recorder, median_time_ms

from ..quant import quantize_weight
from . import _common

SQUARE = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}
LLM_KN = ((4096, 4096), (4096, 14336), (14336, 4096))  # attention q/o, MLP up/gate, MLP down
LLM_M = (1, 16, 128, 2048, 8192)


def _tf32(name: str, mod: Any, on: bool) -> None:
    if name == "pygpukit":
        gp.set_matmul_precision("tf32" if on else "highest")
    elif name == "torch":
        mod.backends.cuda.matmul.allow_tf32 = on


def bench_matmul(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    side = (2048 if quick else 8192) if gpu else 256
    warm, reps = ((2, 5) if quick else (3, 10)) if gpu else (1, 3)
    rng = np.random.default_rng(5)
    a_host, b_host = _common.data(rng, (side, side)), _common.data(rng, (side, side))
    impls = peers.impls()
    for label, dtype in SQUARE.items():
        for name, timer, mod in impls:
            if label == "tf32" and name not in ("pygpukit", "torch"):
                continue  # CuPy and NumPy have no TF32 switch here
            a, b = _common.to(name, mod, a_host, dtype), _common.to(name, mod, b_host, dtype)
            if a is None:
                continue
            _tf32(name, mod, label == "tf32")
            try:
                ms = median_time_ms(functools.partial(mod.matmul, a, b), timer, warm, reps)
            finally:
                _tf32(name, mod, False)
            note = gp.ops.which("matmul", a, b) if name == "pygpukit" else ""
            rec.add(f"matmul_{label}_{side}^3", name, "TFLOP/s", 2 * side**3 / ms / 1e9, True, note=note)
            del a, b
            peers.free(name, mod)
    if not gpu:
        return
    _fp8(rec, impls, side, warm, reps, rng)
    _quantized(rec, impls, quick, warm, reps, rng)
    ms_list = LLM_M[:3] if quick else LLM_M
    for k, n in LLM_KN[:1] if quick else LLM_KN:
        w_host = _common.data(rng, (n, k))
        for m in ms_list:
            x_host = _common.data(rng, (m, k))
            for name, timer, mod in impls:
                if name not in ("pygpukit", "torch"):
                    continue  # CuPy has no bfloat16
                x, w = _common.to(name, mod, x_host, "bfloat16"), _common.to(name, mod, w_host, "bfloat16")
                fn = gp.linear if name == "pygpukit" else mod.nn.functional.linear
                ms = median_time_ms(functools.partial(fn, x, w), timer, warm, reps)
                note = gp.ops.which("linear", x, w) if name == "pygpukit" else ""
                rec.add(f"linear_bf16_m{m}_k{k}_n{n}", name, "TFLOP/s", 2 * m * n * k / ms / 1e9, True, note=note)
                del x, w


def _fp8(rec: Recorder, impls: list, side: int, warm: int, reps: int, rng: np.random.Generator) -> None:
    """float8_e4m3 with per-tensor scales into bfloat16, where a plugin defines
    ``scaled_mm`` (pygpukit-gemm), against ``torch._scaled_mm``; b column-major."""
    if "scaled_mm" not in gp.ops.names():  # this plugin disabled
        return
    a_host, w_host = _common.data(rng, (side, side)), _common.data(rng, (side, side))
    for name, timer, mod in impls:
        if name == "pygpukit":
            a, b = gp.from_numpy(a_host.astype(gp.float8_e4m3fn)), gp.from_numpy(w_host.astype(gp.float8_e4m3fn)).T
            sa, sb = gp.ones((), gp.float32), gp.ones((), gp.float32)
            fn = functools.partial(gp.ops.scaled_mm, a, b, sa, sb, out_dtype=gp.bfloat16)
            note = gp.ops.which("scaled_mm", a, b, sa, sb)
        elif name == "torch" and hasattr(mod, "_scaled_mm"):
            a = mod.from_numpy(a_host).cuda().to(mod.float8_e4m3fn)
            b = mod.from_numpy(w_host).cuda().to(mod.float8_e4m3fn).t()
            sa = sb = mod.ones((), device="cuda")
            fn = functools.partial(mod._scaled_mm, a, b, sa, sb, out_dtype=mod.bfloat16)
            note = ""
        else:
            continue
        ms = median_time_ms(fn, timer, warm, reps)
        rec.add(f"scaled_mm_fp8e4m3_{side}^3", name, "TFLOP/s", 2 * side**3 / ms / 1e9, True, note=note)


def _quantized(rec: Recorder, impls: list, quick: bool, warm: int, reps: int, rng: np.random.Generator) -> None:
    """Decode GEMV (M = 1 and 8) with bf16 weights (gp.linear as the registry
    picks it, and routed to the plugin's own GEMV; torch's linear) and with
    int8 / int4 / fp8 weights and group-128 scales (``gp.ops.qlinear``, where a
    plugin defines it): microseconds per call. Targets: int8 and fp8 <= 0.6x
    and int4 <= 0.35x the time of the bf16 product at the same shape."""
    if "qlinear" not in gp.ops.names():  # this plugin disabled
        return
    for k, n in LLM_KN[1:2] if quick else LLM_KN[1:]:
        w_host = _common.data(rng, (n, k))
        w = gp.from_numpy(w_host.astype(gp.bfloat16))
        quantized = {"w8a16": "int8", "w4a16": "int4", "fp8a16": "fp8"}
        qws = {kind: quantize_weight(w, fmt) for kind, fmt in quantized.items()}
        # int4/int8 weights (29 / 59 MB here) could stay in the 50 MB L2 between
        # back-to-back calls, which a decode step's layer-to-layer walk never
        # sees: each call reads the next of several copies, 150 MB or more in all.
        copies = {kind: [q, *(_copy_weight(q) for _ in range(-(-150_000_000 // _nbytes(q)) - 1))] for kind, q in qws.items()}
        plain = [w, *(w.copy() for _ in range(-(-150_000_000 // w.nbytes) - 1))]  # the same walk for the bf16 products
        for m in (1, 8):
            x_host = _common.data(rng, (m, k))
            for name, timer, mod in impls:
                if name == "pygpukit":
                    x = gp.from_numpy(x_host.astype(gp.bfloat16))
                    runs = {"bf16": [functools.partial(gp.linear, x, c) for c in plain]}  # the registry's pick, named in the note
                    runs.update({kind: [functools.partial(gp.ops.qlinear, x, c) for c in cs] for kind, cs in copies.items()})
                elif name == "torch":
                    tx, tw = _common.to(name, mod, x_host, "bfloat16"), _common.to(name, mod, w_host, "bfloat16")
                    runs = {"bf16": [functools.partial(mod.nn.functional.linear, tx, tw)]}
                else:
                    continue
                for kind, calls in runs.items():
                    graph = name == "pygpukit" and gp.backend() == "cuda"
                    ms, note = _calls_time_ms(calls, timer, warm, reps, graph), ""
                    if name == "pygpukit":
                        which = gp.ops.which(*(("linear", x, w) if kind == "bf16" else ("qlinear", x, qws[kind])))
                        note = which + (f", per call of a graph of {len(calls)}" if graph else "")
                    rec.add(f"gemv_{kind}_m{m}_k{k}_n{n}", name, "us", ms * 1e3, False, note=note)


def _calls_time_ms(calls: list, timer: Any, warm: int, reps: int, graph: bool) -> float:
    """Time per call of ``calls`` run in turn; with ``graph``, captured in one
    CUDA graph: a ~15 us kernel outruns the host's launches, which a timing of
    eager calls would measure instead (a decode step, where these run, is a
    graph too)."""
    if graph:
        with gp.graph() as g:
            for call in calls:
                call()
        return median_time_ms(g.replay, timer, warm, reps) / len(calls)
    cycle = itertools.cycle(calls)
    return median_time_ms(lambda: next(cycle)(), timer, warm, reps)


def _nbytes(qw: Any) -> int:
    return qw.q.nbytes + qw.scales.nbytes


def _copy_weight(qw: Any) -> Any:
    return dataclasses.replace(qw, q=qw.q.copy(), scales=qw.scales.copy())

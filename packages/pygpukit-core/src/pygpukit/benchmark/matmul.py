"""Matrix products: ``gp.matmul`` at 8192^3 (bf16, fp16, tf32, fp32) and
``gp.linear`` (x @ W.T, W as stored by PyTorch's Linear) at LLM shapes, bf16:
M in {1, 16, 128, 2048, 8192} against the (K, N) of Llama-3-8B's projections,
in TFLOP/s against PyTorch's cuBLAS. Whichever implementation the registry
picks runs (the note names it: with pygpukit-gemm installed, cuBLASLt)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import numpy as np

import pygpukit as gp

from .harness import Recorder, median_time_ms

SQUARE = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}
LLM_KN = ((4096, 4096), (4096, 14336), (14336, 4096))  # attention q/o, MLP up/gate, MLP down
LLM_M = (1, 16, 128, 2048, 8192)


def _data(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) * 0.1).astype(np.float32)


def _to(name: str, mod: Any, host: np.ndarray, dtype: str) -> Any:
    if name == "pygpukit":
        return gp.from_numpy(host.astype(getattr(gp, dtype)))
    if name == "torch":
        return mod.from_numpy(host).cuda().to(getattr(mod, dtype))
    if name == "cupy":
        return None if dtype == "bfloat16" else mod.asarray(host.astype(dtype))
    return host.astype(dtype) if dtype in ("float32", "float64") else None


def _tf32(name: str, mod: Any, on: bool) -> None:
    if name == "pygpukit":
        gp.set_matmul_precision("tf32" if on else "highest")
    elif name == "torch":
        mod.backends.cuda.matmul.allow_tf32 = on


def bench_matmul(rec: Recorder, quick: bool) -> None:
    from .core import _free, _impls

    gpu = gp.backend() == "cuda"
    side = (2048 if quick else 8192) if gpu else 256
    warm, reps = ((2, 5) if quick else (3, 10)) if gpu else (1, 3)
    rng = np.random.default_rng(5)
    a_host, b_host = _data(rng, (side, side)), _data(rng, (side, side))
    impls = _impls(quick)
    for label, dtype in SQUARE.items():
        for name, timer, mod in impls:
            if label == "tf32" and name not in ("pygpukit", "torch"):
                continue  # CuPy and NumPy have no TF32 switch here
            a, b = _to(name, mod, a_host, dtype), _to(name, mod, b_host, dtype)
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
            _free(name, mod)
    if not gpu:
        return
    _fp8(rec, impls, side, warm, reps, rng)
    _quantized(rec, impls, quick, warm, reps, rng)
    ms_list = LLM_M[:3] if quick else LLM_M
    for k, n in LLM_KN[:1] if quick else LLM_KN:
        w_host = _data(rng, (n, k))
        for m in ms_list:
            x_host = _data(rng, (m, k))
            for name, timer, mod in impls:
                if name not in ("pygpukit", "torch"):
                    continue  # CuPy has no bfloat16
                x, w = _to(name, mod, x_host, "bfloat16"), _to(name, mod, w_host, "bfloat16")
                fn = gp.linear if name == "pygpukit" else mod.nn.functional.linear
                ms = median_time_ms(functools.partial(fn, x, w), timer, warm, reps)
                note = gp.ops.which("linear", x, w) if name == "pygpukit" else ""
                rec.add(f"linear_bf16_m{m}_k{k}_n{n}", name, "TFLOP/s", 2 * m * n * k / ms / 1e9, True, note=note)
                del x, w


def _fp8(rec: Recorder, impls: list, side: int, warm: int, reps: int, rng: np.random.Generator) -> None:
    """float8_e4m3 with per-tensor scales into bfloat16, where a plugin defines
    ``scaled_mm`` (pygpukit-gemm), against ``torch._scaled_mm``; b column-major."""
    if "scaled_mm" not in gp.ops.names():
        return
    a_host, w_host = _data(rng, (side, side)), _data(rng, (side, side))
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
    if "qlinear" not in gp.ops.names():
        return
    from pygpukit_gemm import quantize_weight  # the plugin that defines qlinear

    for k, n in LLM_KN[1:2] if quick else LLM_KN[1:]:
        w_host = _data(rng, (n, k))
        w = gp.from_numpy(w_host.astype(gp.bfloat16))
        quantized = {"w8a16": "int8", "w4a16": "int4", "fp8a16": "fp8"}
        qws = {kind: quantize_weight(w, fmt) for kind, fmt in quantized.items()}
        # int4/int8 weights (29 / 59 MB here) could stay in the 50 MB L2 between
        # back-to-back calls, which a decode step's layer-to-layer walk never
        # sees: each call reads the next of several copies, 150 MB or more in all.
        copies = {kind: [q, *(_copy_weight(q) for _ in range(-(-150_000_000 // _nbytes(q)) - 1))] for kind, q in qws.items()}
        plain = [w, *(w.copy() for _ in range(-(-150_000_000 // w.nbytes) - 1))]  # the same walk for the bf16 products
        for m in (1, 8):
            x_host = _data(rng, (m, k))
            for name, timer, mod in impls:
                if name == "pygpukit":
                    x = gp.from_numpy(x_host.astype(gp.bfloat16))
                    runs = {"bf16": [functools.partial(gp.linear, x, c) for c in plain]}  # the registry's pick, named in the note
                    runs.update({kind: [functools.partial(gp.ops.qlinear, x, c) for c in cs] for kind, cs in copies.items()})
                elif name == "torch":
                    tx, tw = _to(name, mod, x_host, "bfloat16"), _to(name, mod, w_host, "bfloat16")
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


def _routed(op: str, target: str, *args: Any) -> Any:
    with gp.routing(**{op: target}):
        return getattr(gp, op)(*args)


def bench_own_gemm(rec: Recorder, quick: bool) -> None:
    """The gemm plugin's own tensor-core kernel (routed to it) at 8192^3 bf16 and
    fp16 against torch's cuBLAS; and the grouped product of a mixture-of-experts
    layer (8 experts, Mixtral's 4096 -> 14336, 512 or 4096 tokens spread
    unevenly) against the sum of per-expert torch linear calls."""
    if gp.backend() != "cuda" or "grouped_linear" not in gp.ops.names():
        return
    from .core import _free, _impls

    side = 2048 if quick else 8192
    warm, reps = (2, 5) if quick else (3, 10)
    rng = np.random.default_rng(9)
    a_host, b_host = _data(rng, (side, side)), _data(rng, (side, side))
    impls = [i for i in _impls(quick) if i[0] in ("pygpukit", "torch")]
    for label, dtype in (("bf16", "bfloat16"), ("fp16", "float16")):
        for name, timer, mod in impls:
            a, b = _to(name, mod, a_host, dtype), _to(name, mod, b_host, dtype)
            fn = functools.partial(_routed, "matmul", "gemm:mma", a, b) if name == "pygpukit" else functools.partial(mod.matmul, a, b)
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(
                f"matmul_own_{label}_{side}^3", name, "TFLOP/s", 2 * side**3 / ms / 1e9, True, note="gemm:mma" if name == "pygpukit" else ""
            )
            del a, b
            _free(name, mod)
    experts, k, n = 8, 4096, 14336
    w_host = _data(rng, (experts, n, k))
    for tokens in (512,) if quick else (512, 4096):
        share = rng.dirichlet(np.full(experts, 2.0))
        counts = np.floor(share * tokens).astype(np.int64)
        counts[-1] += tokens - counts.sum()
        offs = np.cumsum(counts).astype(np.int32)
        x_host = _data(rng, (tokens, k))
        for name, timer, mod in impls:
            x, w = _to(name, mod, x_host, "bfloat16"), _to(name, mod, w_host, "bfloat16")
            if name == "pygpukit":
                fn = functools.partial(gp.ops.grouped_linear, x, w, gp.from_numpy(offs))
            else:
                bounds = list(zip([0, *offs[:-1].tolist()], offs.tolist()))
                fn = functools.partial(_per_expert, mod, x, w, bounds)
            ms = median_time_ms(fn, timer, warm, reps)
            note = gp.ops.which("grouped_linear", x, w, gp.from_numpy(offs)) if name == "pygpukit" else "per-expert F.linear"
            rec.add(f"grouped_bf16_e{experts}_t{tokens}_k{k}_n{n}", name, "TFLOP/s", 2 * tokens * n * k / ms / 1e9, True, note=note)
            del x, w
            _free(name, mod)
        _grouped_fp8(rec, impls, x_host, w_host, offs, warm, reps)


def _grouped_fp8(rec: Recorder, impls: list, x_host: np.ndarray, w_host: np.ndarray, offs: np.ndarray, warm: int, reps: int) -> None:
    """The same grouped product with e4m3 operands and row-wise scales, where a
    plugin defines grouped_scaled_linear; torch's _scaled_grouped_mm beside it
    where this torch and GPU run it."""
    if "grouped_scaled_linear" not in gp.ops.names():
        return
    from pygpukit_gemm import quantize_fp8  # the plugin that defines the op

    (tokens, k), (experts, n, _) = x_host.shape, w_host.shape
    qx = quantize_fp8(gp.from_numpy(x_host), granularity="row")
    qw = quantize_fp8(gp.from_numpy(w_host.reshape(experts * n, k)), granularity="row")
    args = (qx.data, qx.scale.reshape(tokens), qw.data.reshape(experts, n, k), qw.scale.reshape(experts, n), gp.from_numpy(offs))
    bench = f"grouped_fp8e4m3_e{experts}_t{tokens}_k{k}_n{n}"
    for name, timer, mod in impls:
        if name == "pygpukit":
            fn = functools.partial(gp.ops.grouped_scaled_linear, *args)
            note = gp.ops.which("grouped_scaled_linear", *args)
        elif name == "torch" and hasattr(mod, "_scaled_grouped_mm"):
            ta = mod.from_numpy(args[0].to_numpy().view(np.uint8)).cuda().view(mod.float8_e4m3fn)
            tb = mod.from_numpy(args[2].to_numpy().view(np.uint8)).cuda().view(mod.float8_e4m3fn).transpose(-2, -1)
            sa, sb = (mod.from_numpy(a.to_numpy()).cuda() for a in (args[1], args[3]))
            toffs = mod.from_numpy(offs).cuda()
            fn = functools.partial(mod._scaled_grouped_mm, ta, tb, sa, sb, offs=toffs, out_dtype=mod.bfloat16)
            note = "torch._scaled_grouped_mm"
            try:
                fn()
            except (RuntimeError, TypeError, ValueError) as e:  # not on this GPU / build, or another signature: say so
                print(f"  {bench}: torch._scaled_grouped_mm did not run ({str(e).splitlines()[0][:160]}); its row is left out")
                continue
        else:
            continue
        ms = median_time_ms(fn, timer, warm, reps)
        rec.add(bench, name, "TFLOP/s", 2 * tokens * n * k / ms / 1e9, True, note=note)


def _per_expert(mod: Any, x: Any, w: Any, bounds: list) -> list:
    return [mod.nn.functional.linear(x[s:e], w[i]) for i, (s, e) in enumerate(bounds)]

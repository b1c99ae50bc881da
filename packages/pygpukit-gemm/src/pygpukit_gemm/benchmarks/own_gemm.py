"""The suite ``own_gemm``: the plugin's own tensor-core kernel (routed to it)
at 8192^3 bf16 and fp16 against PyTorch's cuBLAS, and the grouped products of
a mixture-of-experts layer (bf16 and e4m3 with row-wise scales) against
per-expert PyTorch calls and ``torch._scaled_grouped_mm``. GPU only."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.benchmark import peers
from pygpukit.benchmark.harness import Recorder, median_time_ms

from ..fp8 import quantize_fp8
from . import _common


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
    side = 2048 if quick else 8192
    warm, reps = (2, 5) if quick else (3, 10)
    rng = np.random.default_rng(9)
    a_host, b_host = _common.data(rng, (side, side)), _common.data(rng, (side, side))
    impls = [i for i in peers.impls() if i[0] in ("pygpukit", "torch")]
    for label, dtype in (("bf16", "bfloat16"), ("fp16", "float16")):
        for name, timer, mod in impls:
            a, b = _common.to(name, mod, a_host, dtype), _common.to(name, mod, b_host, dtype)
            fn = functools.partial(_routed, "matmul", "gemm:mma", a, b) if name == "pygpukit" else functools.partial(mod.matmul, a, b)
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(
                f"matmul_own_{label}_{side}^3", name, "TFLOP/s", 2 * side**3 / ms / 1e9, True, note="gemm:mma" if name == "pygpukit" else ""
            )
            del a, b
            peers.free(name, mod)
    experts, k, n = 8, 4096, 14336
    w_host = _common.data(rng, (experts, n, k))
    for tokens in (512,) if quick else (512, 4096):
        share = rng.dirichlet(np.full(experts, 2.0))
        counts = np.floor(share * tokens).astype(np.int64)
        counts[-1] += tokens - counts.sum()
        offs = np.cumsum(counts).astype(np.int32)
        x_host = _common.data(rng, (tokens, k))
        for name, timer, mod in impls:
            x, w = _common.to(name, mod, x_host, "bfloat16"), _common.to(name, mod, w_host, "bfloat16")
            if name == "pygpukit":
                fn = functools.partial(gp.ops.grouped_linear, x, w, gp.from_numpy(offs))
            else:
                bounds = list(zip([0, *offs[:-1].tolist()], offs.tolist()))
                fn = functools.partial(_per_expert, mod, x, w, bounds)
            ms = median_time_ms(fn, timer, warm, reps)
            note = gp.ops.which("grouped_linear", x, w, gp.from_numpy(offs)) if name == "pygpukit" else "per-expert F.linear"
            rec.add(f"grouped_bf16_e{experts}_t{tokens}_k{k}_n{n}", name, "TFLOP/s", 2 * tokens * n * k / ms / 1e9, True, note=note)
            del x, w
            peers.free(name, mod)
        _grouped_fp8(rec, impls, x_host, w_host, offs, warm, reps)


def _grouped_fp8(rec: Recorder, impls: list, x_host: np.ndarray, w_host: np.ndarray, offs: np.ndarray, warm: int, reps: int) -> None:
    """The same grouped product with e4m3 operands and row-wise scales, where a
    plugin defines grouped_scaled_linear; torch's _scaled_grouped_mm beside it
    where this torch and GPU run it."""
    if "grouped_scaled_linear" not in gp.ops.names():  # this plugin disabled
        return
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

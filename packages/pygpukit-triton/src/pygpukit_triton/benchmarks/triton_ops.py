"""pygpukit-triton's ops beside the native ones and PyTorch: each op per
backend of ``--backends`` (native: the registry's own choice, impl
"pygpukit"; triton: the op routed to Triton, impl "pygpukit-triton"), on
the issue's shapes. Memory-bound ops in GB/s of the bytes they must move,
beside a device copy of the same array (the copy rate); matmul and
attention in TFLOP/s. Then the host time of launching a tiny Triton kernel
through ``pygpukit_triton.launch`` (the cached launcher), through a direct
call with ``tensor()`` wrappers (Triton's dispatch on pygpukit's driver),
and through Triton's own launch with torch tensors. GPU only (the
interpreter's times mean nothing)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.benchmark.harness import Recorder, host_time_us, median_time_ms
from pygpukit.benchmark.peers import gp_timer, torch_cuda, torch_timer

from .._triton import available
from ..plugin import has_nn

IMPL = {"native": "pygpukit", "triton": "pygpukit-triton"}
HQ, HKV, D = 32, 8, 128  # RoPE and attention heads (GQA 4:1), head_dim
_ROWS = ("", "rms_norm", "layer_norm", "add_rms_norm", "softmax", "swiglu", "geglu", "gelu")  # cases on (s, s) rows


def _cases(quick: bool) -> list[tuple[str, str, float, str]]:
    """(case, op routed, amount, metric); op "" is the copy reference."""
    s, m = (2048, 2048) if quick else (8192, 8192)
    sa, t = (1024, 2048) if quick else (4096, 16384)
    n = s * s * 2  # bytes of one (s, s) bfloat16 array
    tag = f"bf16_{s}x{s}"
    return [
        (f"copy_{tag}", "", 2 * n, "GB/s"),
        (f"rms_norm_{tag}", "rms_norm", 2 * n, "GB/s"),
        (f"layer_norm_{tag}", "layer_norm", 2 * n, "GB/s"),
        (f"add_rms_norm_{tag}", "add_rms_norm", 4 * n, "GB/s"),
        (f"softmax_{tag}", "softmax", 2 * n, "GB/s"),
        (f"swiglu_{tag}", "swiglu", 3 * n, "GB/s"),
        (f"geglu_{tag}", "geglu", 3 * n, "GB/s"),
        (f"gelu_{tag}", "gelu", 2 * n, "GB/s"),
        (f"rope_neox_bf16_{t}x{HQ}+{HKV}x{D}", "rope", 4 * t * (HQ + HKV) * D, "GB/s"),
        (f"matmul_bf16_{m}^3", "matmul", 2.0 * m**3, "TFLOP/s"),
        (f"sdpa_causal_gqa_bf16_1x{HQ}x{sa}x{D}", "sdpa", 4.0 * HQ * sa * sa * D / 2, "TFLOP/s"),
    ]


def _dims(case: str) -> tuple[int, ...]:
    return tuple(int(v) for v in case.replace("^3", "").replace("+", "x").split("_")[-1].split("x"))


def _gp_calls(quick: bool, rng: np.random.Generator) -> dict[str, Callable[[], object]]:
    from pygpukit_nn import positional

    nn: Any = gp.nn
    bf = lambda *shape: gp.from_numpy(np.asarray(rng.standard_normal(shape, dtype=np.float32)).astype(gp.bfloat16))
    calls: dict[str, Callable[[], object]] = {}
    for case, op, _, _ in _cases(quick):
        if op in _ROWS:
            s = _dims(case)[0]
            x, r, gu, w = bf(s, s), bf(s, s), bf(s, 2 * s), bf(s)
            ops: dict[str, Callable[[], object]] = {
                "": x.copy,
                "rms_norm": partial(nn.rms_norm, x, w, 1e-6),
                "layer_norm": partial(nn.layer_norm, x, w, w, 1e-5),
                "add_rms_norm": partial(nn.add_rms_norm, x, r, w, 1e-6),
                "softmax": partial(gp.softmax, x),
                "swiglu": partial(nn.swiglu, gu),
                "geglu": partial(nn.geglu, gu),
                "gelu": partial(nn.gelu, x),
            }
            calls[case] = ops[op]
        elif op == "rope":
            t = _dims(case)[0]
            q, k = bf(t, HQ, D), bf(t, HKV, D)
            inv, factor = positional.rope_frequencies(D)
            cs, pos = positional.rope_cos_sin(inv, t, factor), gp.from_numpy(np.arange(t, dtype=np.int32))
            calls[case] = partial(nn.apply_rope, q, k, cs, pos)
        elif op == "matmul":
            m = _dims(case)[0]
            calls[case] = partial(gp.matmul, bf(m, m), bf(m, m))
        else:
            sa = _dims(case)[2]
            q, k, v = bf(1, HQ, sa, D), bf(1, HKV, sa, D), bf(1, HKV, sa, D)
            calls[case] = partial(nn.scaled_dot_product_attention, q, k, v, causal=True)
    return calls


def _torch_calls(torch: Any, quick: bool, rng: np.random.Generator) -> dict[str, Callable[[], object]]:
    """The same cases in torch (RoPE unfused, as transformers applies it: torch has no fused op)."""
    F = torch.nn.functional
    bf = lambda *shape: torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).cuda().to(torch.bfloat16)
    calls: dict[str, Callable[[], object]] = {}
    for case, op, _, _ in _cases(quick):
        if op in _ROWS:
            s = _dims(case)[0]
            x, r, gu, w, out = bf(s, s), bf(s, s), bf(s, 2 * s), bf(s), bf(s, s)
            g, u = gu.chunk(2, dim=-1)
            table: dict[str, Callable[[], object]] = {
                "": partial(out.copy_, x),
                "rms_norm": partial(F.rms_norm, x, (s,), w, 1e-6),
                "layer_norm": partial(F.layer_norm, x, (s,), w, w, 1e-5),
                "add_rms_norm": partial(_add_then, F.rms_norm, x, r, (s,), w, 1e-6),
                "softmax": partial(torch.softmax, x, -1),
                "swiglu": partial(_gated, F.silu, g, u),
                "geglu": partial(_gated, F.gelu, g, u),
                "gelu": partial(F.gelu, x),
            }
            calls[case] = table[op]
        elif op == "rope":
            t = _dims(case)[0]
            q, k = bf(t, HQ, D), bf(t, HKV, D)
            angle = torch.outer(torch.arange(t, device="cuda", dtype=torch.float32), torch.rand(D // 2, device="cuda"))
            cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
            calls[case] = partial(_torch_rope, torch, q, k, cos, sin)
        elif op == "matmul":
            m = _dims(case)[0]
            calls[case] = partial(torch.matmul, bf(m, m), bf(m, m))
        elif op == "sdpa":
            sa = _dims(case)[2]
            q, k, v = bf(1, HQ, sa, D), bf(1, HQ, sa, D), bf(1, HQ, sa, D)  # K, V repeated to HQ heads: torch's GQA does that work
            calls[case] = partial(F.scaled_dot_product_attention, q, k, v, is_causal=True)
    return calls


def _add_then(norm: Callable[..., Any], x: Any, r: Any, *args: Any) -> tuple[Any, Any]:
    """torch's unfused residual add + norm: (norm(x + r), x + r)."""
    h = x + r
    return norm(h, *args), h


def _torch_rope(torch: Any, q: Any, k: Any, cos: Any, sin: Any) -> None:
    """RoPE (neox) in float32 as transformers computes it, written back into q and k."""
    for x in (q, k):
        a, b = x.float().chunk(2, dim=-1)
        x.copy_(torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1))


def _gated(act: Callable[..., Any], g: Any, u: Any) -> Any:
    return act(g) * u


def _rate(amount: float, ms: float, metric: str) -> float:
    return amount / ms / (1e6 if metric == "GB/s" else 1e9)


def bench_triton_ops(rec: Recorder, quick: bool) -> None:
    if not has_nn():
        print("  triton_ops: needs pygpukit-nn (pip install 'pygpukit-triton[nn]'); skipped")
        return
    if gp.backend() != "cuda" or not available():
        print("  triton_ops: needs a CUDA GPU and triton (pip install triton); skipped")
        return
    warm, reps = (2, 5) if quick else (3, 20)
    rng = np.random.default_rng(11)
    cases = _cases(quick)
    calls = _gp_calls(quick, rng)
    for backend in rec.backends:
        for case, op, amount, metric in cases:
            if backend == "triton" and not op:
                continue  # the copy is the native reference line
            with gp.routing(**{op: "triton"}) if backend == "triton" else contextlib.nullcontext():
                ms = median_time_ms(calls[case], gp_timer(), warm, reps)
            rec.add(case, IMPL[backend], metric, _rate(amount, ms, metric), True)
    del calls
    gp.memory.empty_cache()
    torch = torch_cuda()
    if torch is not None:
        tcalls = _torch_calls(torch, quick, rng)
        for case, _, amount, metric in cases:
            if case in tcalls:
                rec.add(case, "torch", metric, _rate(amount, median_time_ms(tcalls[case], torch_timer(torch), warm, reps), metric), True)
        del tcalls
        torch.cuda.empty_cache()
    _launch_overhead(rec, torch, quick)


def _launch_overhead(rec: Recorder, torch: Any, quick: bool) -> None:
    """Host time of launching a one-block vector add three ways (see the module docstring)."""
    import triton

    from .. import driver, launch, tensor
    from .tiny import tiny_add

    burst, reps = (50, 20) if quick else (50, 400)
    n = 1024
    a, b, c = (gp.zeros((n,), gp.float32) for _ in range(3))
    ta, tb, tc = tensor(a), tensor(b), tensor(c)
    run = lambda: launch(tiny_add, (1,), a, b, c, n, BLOCK=1024)
    rec.add(
        "triton_tiny_launch_host", "pygpukit", "us", host_time_us(run, gp.synchronize, burst, reps), False, note="pygpukit_triton.launch"
    )
    direct = lambda: tiny_add[(1,)](ta, tb, tc, n, BLOCK=1024)
    rec.add("triton_tiny_launch_host", "pygpukit-direct", "us", host_time_us(direct, gp.synchronize, burst, reps), False,
            note="kernel[grid](tensor(x), ...): Triton's dispatch")  # fmt: skip
    if torch is None:
        return
    x, y, z = (torch.zeros(n, device="cuda") for _ in range(3))
    triton.runtime.driver.reset_active()  # Triton's own driver (torch's device and stream) for the torch side
    try:
        torch_run = lambda: tiny_add[(1,)](x, y, z, n, BLOCK=1024)
        rec.add("triton_tiny_launch_host", "torch", "us", host_time_us(torch_run, torch.cuda.synchronize, burst, reps), False,
                note="Triton's own launch with torch tensors")  # fmt: skip
    finally:
        driver.activate()

"""pygpukit-nn's MoE and conv1d, bfloat16, against PyTorch in the same run:

- routing: router top-k (softmax, renormalized) + permute + unpermute for
  T=4096 tokens, E=8 experts, k=2, D=4096, in GB/s of the bytes it must move
  (the logits; each of the T*k rows read and written by permute, read by
  unpermute; the T output rows); the floor is those bytes over the copy rate.
  PyTorch's side: softmax + topk, a stable argsort, index_select, and the
  inverse gather with a weighted sum.
- moe_forward, Mixtral-like (E=8, k=2, D=4096, I=14336) at T=512 tokens, in
  TFLOP/s of the experts' products (6 * T * k * D * I), against a PyTorch loop
  over the experts as in transformers' Mixtral block. At T=512 each expert
  sees ~128 tokens: the 2.8 GB of expert weights bound the time (~0.85 ms at
  3.35 TB/s, ~420 TFLOP/s).
- conv1d, Whisper-base's encoder input: 80 -> 512 channels, L=3000, K=3,
  padding 1, then 512 -> 512 with stride 2, in TFLOP/s against
  torch.nn.functional.conv1d (cuDNN), bfloat16 and float32.

On the CPU backend only pygpukit runs, at small sizes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pygpukit as gp
from pygpukit.benchmark.harness import Recorder, median_time_ms
from pygpukit.benchmark.peers import free, impls

from .. import moe
from ..conv import conv1d as nn_conv1d

Cases = dict[str, tuple[Callable[[], object], float]]


def _randn(name: str, mod: Any, shape: tuple[int, ...], scale: float, dtype: str, seed: int) -> Any:
    """Standard normal * scale, made on the device."""
    if name == "pygpukit":
        return gp.random.default_rng(seed).normal(0.0, scale, size=shape, dtype=getattr(gp, dtype))
    gen = mod.Generator(device="cuda").manual_seed(seed)
    return mod.randn(shape, generator=gen, device="cuda", dtype=getattr(mod, dtype)) * scale


def _routing(name: str, mod: Any, t: int, e: int, k: int, d: int) -> Cases:
    logits = _randn(name, mod, (t, e), 2.0, "bfloat16", 1)
    x = _randn(name, mod, (t, d), 1.0, "bfloat16", 2)
    moved = 2 * t * e + 2 * (3 * t * k * d + t * d)  # bf16: logits; permute read + write, unpermute read; the output
    if name == "pygpukit":

        def route() -> object:
            w, ids = moe.router_topk(logits, k)
            xs, _, index_map = moe.permute(x, ids, e)
            return moe.unpermute(xs, index_map, w)

    else:

        def route() -> object:
            w, ids = mod.topk(mod.softmax(logits.float(), -1), k, -1)
            w = w / w.sum(-1, keepdim=True)
            flat = ids.view(-1)
            order = mod.argsort(flat, stable=True)
            xs = x.index_select(0, order // k)
            mod.cumsum(mod.bincount(flat, minlength=e), 0)  # the offsets a grouped GEMM takes
            inv = mod.empty_like(order)
            inv[order] = mod.arange(order.numel(), device="cuda")
            return (xs[inv].view(t, k, d).float() * w[..., None]).sum(1).to(x.dtype)

    return {f"moe_route_permute_T{t}_E{e}_k{k}_D{d}": (route, moved)}


def _forward(name: str, mod: Any, t: int, e: int, k: int, d: int, inter: int) -> Cases:
    x = _randn(name, mod, (t, d), 1.0, "bfloat16", 3)
    router_w = _randn(name, mod, (e, d), d**-0.5, "bfloat16", 4)
    w13 = _randn(name, mod, (e, 2 * inter, d), d**-0.5, "bfloat16", 5)
    w2 = _randn(name, mod, (e, d, inter), inter**-0.5, "bfloat16", 6)
    flops = 6 * t * k * d * inter
    if name == "pygpukit":

        def forward() -> object:
            return moe.moe_forward(x, router_w, w13, w2, k)

    else:
        F = mod.nn.functional

        def forward() -> object:  # transformers' MixtralSparseMoeBlock, with w1 and w3 fused
            w, ids = mod.topk(mod.softmax((x @ router_w.T).float(), -1), k, -1)
            w = (w / w.sum(-1, keepdim=True)).to(x.dtype)
            out = mod.zeros_like(x)
            for j in range(e):
                tok, slot = mod.where(ids == j)
                gate, up = (x[tok] @ w13[j].T).chunk(2, -1)
                out.index_add_(0, tok, (F.silu(gate) * up) @ w2[j].T * w[tok, slot, None])
            return out

    return {f"moe_forward_T{t}_E{e}_k{k}_D{d}_I{inter}": (forward, flops)}


def _conv(name: str, mod: Any, c_in: int, c_out: int, length: int) -> Cases:
    out: Cases = {}
    for dtype, tag in (("bfloat16", "bf16"), ("float32", "fp32")):
        x = _randn(name, mod, (1, c_in, length), 1.0, dtype, 7)
        w1 = _randn(name, mod, (c_out, c_in, 3), 0.1, dtype, 8)
        b1 = _randn(name, mod, (c_out,), 0.1, dtype, 9)
        h = _randn(name, mod, (1, c_out, length), 1.0, dtype, 10)
        w2 = _randn(name, mod, (c_out, c_out, 3), 0.05, dtype, 11)
        conv1d = nn_conv1d if name == "pygpukit" else mod.nn.functional.conv1d
        lout2 = (length + 2 - 3) // 2 + 1
        out[f"conv1d_{c_in}to{c_out}_L{length}_{tag}"] = (
            functools.partial(conv1d, x, w1, b1, 1, 1),
            2 * c_out * c_in * 3 * length,
        )
        out[f"conv1d_{c_out}to{c_out}_L{length}_s2_{tag}"] = (
            functools.partial(conv1d, h, w2, b1, 2, 1),
            2 * c_out * c_out * 3 * lout2,
        )
    return out


def bench_nn_moe(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    if gpu:
        route = (1024, 8, 2, 4096) if quick else (4096, 8, 2, 4096)
        ffn = (128, 8, 2, 4096, 4096) if quick else (512, 8, 2, 4096, 14336)
        length = 3000
    else:
        route, ffn, length = (256, 8, 2, 256), (16, 4, 2, 64, 128), 300
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    for name, timer, mod in impls():
        if name not in ("pygpukit", "torch"):
            continue
        for make, args, metric, scale in (
            (_routing, route, "GB/s", 1e6),
            (_forward, ffn, "TFLOP/s", 1e9),
            (_conv, (80, 512, length), "TFLOP/s", 1e9),
        ):
            if name == "pygpukit" and make is _forward and "grouped_linear" not in gp.ops.names():
                print("  nn_moe: moe_forward needs pygpukit-gemm (grouped_linear); skipped")
                continue
            for case, (fn, amount) in make(name, mod, *args).items():
                ms = median_time_ms(fn, timer, warm, reps)
                rec.add(case, name, metric, amount / ms / scale, True)
            free(name, mod)

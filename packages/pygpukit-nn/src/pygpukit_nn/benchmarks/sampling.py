"""pygpukit-nn's sampler on the issue's shape: one token per row of (8, 152064)
logits (Qwen's vocabulary) in float32 and bfloat16, with top-p 0.9, top-k 50 +
top-p 0.9, and plain temperature sampling; microseconds per call against a
plain PyTorch sampler (softmax, sort, cumsum, mask, multinomial) in the same
run (NumPy's on the CPU backend, at a smaller vocabulary). The issue's target
on an H100 is <= 60 us for top-p (its plain PyTorch sampler: 516 us); the
floor of a pass over the float32 logits is 4.9 MB / ~2.9 TB/s ~ 1.7 us, so
the time is mostly the kernel's few dependent passes and the launch."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

import pygpukit as gp
from pygpukit.benchmark.harness import Recorder, median_time_ms
from pygpukit.benchmark.peers import free, impls

from ..sampling import sample

CASES = {"top_p0.9": (0, 0.9), "top_k50_top_p0.9": (50, 0.9), "plain": (0, 1.0)}  # case -> (top_k, top_p)


def _torch_sampler(torch, t, top_k: int, top_p: float):
    probs = torch.softmax(t.float(), dim=-1)
    if top_k:
        kth = probs.topk(top_k, dim=-1).values[:, -1:]
        probs = probs.masked_fill(probs < kth, 0.0)
    if top_p < 1.0:
        sp, idx = probs.sort(dim=-1, descending=True)
        cum = sp.cumsum(dim=-1)
        sp = sp.masked_fill(cum - sp > top_p * cum[:, -1:], 0.0)
        return idx.gather(-1, torch.multinomial(sp, 1))
    return torch.multinomial(probs, 1)


def _numpy_sampler(x: np.ndarray, top_k: int, top_p: float, rng: np.random.Generator) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    probs = e / e.sum(axis=-1, keepdims=True)
    if top_k:
        kth = -np.partition(-probs, top_k - 1, axis=-1)[:, top_k - 1 : top_k]
        probs = np.where(probs >= kth, probs, 0.0)
    order = np.argsort(-probs, axis=-1)
    sp = np.take_along_axis(probs, order, axis=-1)
    cum = np.cumsum(sp, axis=-1)
    sp = np.where(cum - sp > top_p * cum[:, -1:], 0.0, sp)
    cum = np.cumsum(sp, axis=-1)
    j = (cum < rng.random((x.shape[0], 1)) * cum[:, -1:]).sum(axis=-1)
    return order[np.arange(x.shape[0]), np.minimum(j, x.shape[1] - 1)]


def _cases(name: str, mod, host: np.ndarray) -> dict[str, Callable[[], object]]:
    """case -> call for implementation ``name``; a case the peer cannot run is left out."""
    out: dict[str, Callable[[], object]] = {}
    if name == "pygpukit":
        gen = gp.random.Generator(0)
        for dt, tag in ((gp.float32, "f32"), (gp.bfloat16, "bf16")):
            x = gp.from_numpy(host.astype(dt))
            for case, (k, p) in CASES.items():
                out[f"{case}_{tag}"] = functools.partial(sample, x, top_k=k, top_p=p, generator=gen)
    elif name == "torch":
        t32 = mod.from_numpy(host).cuda()
        for t, tag in ((t32, "f32"), (t32.to(mod.bfloat16), "bf16")):
            for case, (k, p) in CASES.items():
                out[f"{case}_{tag}"] = functools.partial(_torch_sampler, mod, t, k, p)
    elif name == "numpy":
        rng = np.random.default_rng(0)
        for case, (k, p) in CASES.items():
            out[f"{case}_f32"] = functools.partial(_numpy_sampler, host, k, p, rng)
    return out


def bench_nn_sampling(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    b, v = (8, 152064) if gpu else (8, 16384 if quick else 32768)
    warm, reps = ((3, 10) if quick else (5, 30)) if gpu else (1, 3)
    host = np.random.default_rng(11).standard_normal((b, v), dtype=np.float32) * 3
    for name, timer, mod in impls():
        for case, fn in _cases(name, mod, host).items():
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(f"sample_{case}_{b}x{v}", name, "us", ms * 1e3, False)
        free(name, mod)

"""pygpukit-nn's prefill attention (the flash kernel) on the issue's shapes:
causal bfloat16 (1, 32, S, 128) for S = 1024, 2048, 4096, 8192, plus the
non-causal 4096 and a GQA (32 query / 8 KV heads) 4096 case; TFLOP/s of the
attention FLOPs (4 * B * H * S * S * D, halved for causal: the masked half
is not work) against torch.nn.functional.scaled_dot_product_attention in the
same run. The floor is tensor-core bound: the FLOPs over the mma.sync peak.
On the CPU backend, the reference at one small size."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

import pygpukit as gp
from pygpukit.benchmark.harness import Recorder, median_time_ms
from pygpukit.benchmark.peers import free, impls

from ..attention import scaled_dot_product_attention

# (name, heads, kv heads, S, causal) on the GPU
GPU_CASES = [(f"sdpa_causal_bf16_1x32x{s}x128", 32, 32, s, True) for s in (1024, 2048, 4096, 8192)] + [
    ("sdpa_bf16_1x32x4096x128", 32, 32, 4096, False),
    ("sdpa_causal_gqa8_bf16_1x32x4096x128", 32, 8, 4096, True),
]
QUICK = {"sdpa_causal_bf16_1x32x1024x128", "sdpa_causal_bf16_1x32x4096x128"}
CPU_CASES = [("sdpa_causal_bf16_1x4x256x128", 4, 4, 256, True)]


def _cases(name: str, mod, cases, rng) -> dict[str, tuple[Callable[[], object], float]]:
    """case -> (call, FLOPs); a peer without the op gets none."""
    out: dict[str, tuple[Callable[[], object], float]] = {}
    if name not in ("pygpukit", "torch"):
        return out
    attend = scaled_dot_product_attention if name == "pygpukit" else mod.nn.functional.scaled_dot_product_attention
    for case, h, hkv, s, causal in cases:
        q = rng.standard_normal((1, h, s, 128), dtype=np.float32)
        k = rng.standard_normal((1, hkv, s, 128), dtype=np.float32)
        v = rng.standard_normal((1, hkv, s, 128), dtype=np.float32)
        flops = 4.0 * h * s * s * 128 / (2 if causal else 1)
        if name == "pygpukit":
            gq, gk, gv = (gp.from_numpy(a.astype(gp.bfloat16)) for a in (q, k, v))
            out[case] = (functools.partial(attend, gq, gk, gv, causal=causal), flops)
        else:
            tq, tk, tv = (mod.from_numpy(a).cuda().to(mod.bfloat16) for a in (q, k, v))
            if hkv != h:  # the same work for torch: its GQA path repeats K and V inside
                tk, tv = tk.repeat_interleave(h // hkv, 1), tv.repeat_interleave(h // hkv, 1)
            out[case] = (functools.partial(attend, tq, tk, tv, is_causal=causal), flops)
    return out


def bench_nn_attention(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    cases = [c for c in GPU_CASES if not quick or c[0] in QUICK] if gpu else CPU_CASES
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    for name, timer, mod in impls():
        for case, (fn, flops) in _cases(name, mod, cases, np.random.default_rng(11)).items():
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(case, name, "TFLOP/s", flops / ms / 1e9, True)
        free(name, mod)

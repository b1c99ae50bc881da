"""pygpukit-nn's RoPE and embedding gather at Llama-3-8B's prefill shapes:
rope in place on q (4096, 32, 128) and k (4096, 8, 128) bfloat16 (NeoX and
GPT-J layouts, and q/k as views of a fused qkv projection output), GB/s of
the bytes of q and k read and written; against a plain PyTorch NeoX rope
(transformers' apply_rotary_pos_emb: q * cos + rotate_half(q) * sin, with cos
and sin gathered beforehand, out of place). The embedding gather of 4096
ids from a (128256, 4096) bfloat16 table, GB/s of the rows read and written,
unchecked and with the default range check (a min/max and a host sync),
against torch.nn.functional.embedding. The floor of both is those bytes
over the copy rate (the bandwidth suite). NumPy on the CPU backend, smaller."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import pygpukit as gp
from pygpukit.benchmark.harness import Recorder, median_time_ms
from pygpukit.benchmark.peers import free, impls

from ..embedding import embedding
from ..positional import RotaryEmbedding, apply_rope


def _numpy_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def _rope_cases(name: str, mod, t: int, rng) -> dict[str, tuple[Callable[[], object], int]]:
    """case -> (call, bytes moved) for q (t, 32, 128) and k (t, 8, 128)."""
    hq, hk, d = 32, 8, 128
    qkv = rng.standard_normal((t, (hq + 2 * hk) * d), dtype=np.float32)
    pos = np.arange(t)
    if name == "pygpukit":
        rope = RotaryEmbedding(d, t, base=500000.0)
        gpos = gp.from_numpy(pos.astype(np.int32))
        fused = gp.from_numpy(qkv.astype(gp.bfloat16))
        q = fused[:, : hq * d].reshape(t, hq, d).copy()
        k = fused[:, hq * d : (hq + hk) * d].reshape(t, hk, d).copy()
        qv = fused[:, : hq * d].reshape(t, hq, d)
        kv = fused[:, hq * d : (hq + hk) * d].reshape(t, hk, d)
        moved = 2 * (q.nbytes + k.nbytes)
        return {
            "rope_neox_bf16": (lambda: apply_rope(q, k, rope.cos_sin, gpos, "neox"), moved),
            "rope_gptj_bf16": (lambda: apply_rope(q, k, rope.cos_sin, gpos, "gptj"), moved),
            "rope_neox_qkv_view_bf16": (lambda: apply_rope(qv, kv, rope.cos_sin, gpos, "neox"), moved),
        }
    inv = 1.0 / 500000.0 ** (np.arange(0, d, 2) / d)
    angles = np.concatenate([pos[:, None] * inv] * 2, axis=-1)[:, None, :]  # (t, 1, d)
    if name == "torch":
        tq = mod.from_numpy(qkv[:, : hq * d].reshape(t, hq, d)).cuda().to(mod.bfloat16)
        tk = mod.from_numpy(qkv[:, hq * d : (hq + hk) * d].reshape(t, hk, d)).cuda().to(mod.bfloat16)
        cos = mod.from_numpy(np.cos(angles)).cuda().to(mod.bfloat16)
        sin = mod.from_numpy(np.sin(angles)).cuda().to(mod.bfloat16)

        def rotate_half(x):
            return mod.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)

        def torch_rope():
            return tq * cos + rotate_half(tq) * sin, tk * cos + rotate_half(tk) * sin

        return {"rope_neox_bf16": (torch_rope, 2 * (tq.nbytes + tk.nbytes))}
    if name == "numpy":
        nq = qkv[:, : hq * d].reshape(t, hq, d).copy()
        nk = qkv[:, hq * d : (hq + hk) * d].reshape(t, hk, d).copy()
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
        return {"rope_neox_f32": (lambda: (_numpy_rope(nq, cos, sin), _numpy_rope(nk, cos, sin)), 2 * (nq.nbytes + nk.nbytes))}
    return {}


def _embedding_cases(name: str, mod, n: int, vocab: int, dim: int, rng) -> dict[str, tuple[Callable[[], object], int]]:
    """case -> (call, bytes moved): n rows of ``dim`` bfloat16 gathered from ``vocab``."""
    ids = rng.integers(0, vocab, n)
    moved = 2 * n * dim * 2
    if name == "pygpukit":
        w = gp.random.standard_normal((vocab, dim)).astype(gp.bfloat16)
        gids = gp.from_numpy(ids.astype(np.int32))
        return {
            "embedding_bf16": (lambda: embedding(gids, w, False), moved),
            "embedding_checked_bf16": (lambda: embedding(gids, w), moved),
        }
    if name == "torch":
        w = mod.randn((vocab, dim), device="cuda", dtype=mod.bfloat16)
        tids = mod.from_numpy(ids).cuda()
        return {"embedding_bf16": (lambda: mod.nn.functional.embedding(tids, w), moved)}
    if name == "numpy":
        w = rng.standard_normal((vocab, dim), dtype=np.float32)
        return {"embedding_f32": (lambda: w[ids], 2 * moved)}
    return {}


def bench_nn_rope(rec: Recorder, quick: bool) -> None:
    gpu = gp.backend() == "cuda"
    t = (1024 if quick else 4096) if gpu else 256
    vocab = (32000 if quick else 128256) if gpu else 8000
    dim = 4096 if gpu else 1024
    warm, reps = ((2, 5) if quick else (3, 20)) if gpu else (1, 3)
    for name, timer, mod in impls():
        rng = np.random.default_rng(11)
        for case, (fn, moved) in _rope_cases(name, mod, t, rng).items():
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(f"{case}_{t}x32x8x128", name, "GB/s", moved / ms / 1e6, True)
        for case, (fn, moved) in _embedding_cases(name, mod, t, vocab, dim, rng).items():
            ms = median_time_ms(fn, timer, warm, reps)
            rec.add(f"{case}_{t}x{dim}_V{vocab}", name, "GB/s", moved / ms / 1e6, True)
        free(name, mod)

"""Embedding lookup and the tied output projection.

``gp.ops.embedding(ids, weight, check)``: ids int32/int64 of any shape,
weight (vocab, D); returns (*ids.shape, D) with row ids[...] of weight. With
``check`` true (the default of ``embedding``), the ids' minimum and maximum
are taken on the device and read back (one small reduction and a host sync of
two numbers), and an id outside [0, vocab) raises IndexError naming it; with
``check=False`` nothing synchronizes and such an id gives a row of zeros (the
weight is never read out of bounds).

The CUDA kernel (bfloat16, float16, float32 weights, SM 80+) copies each row
with 16-byte accesses where the row width, the weight's address and its row
stride allow (8-, 4-, 2-byte accesses otherwise); the weight needs unit
stride along D (any row stride). Other dtypes and layouts run the reference
(``gp.take``).

``lm_head(x, weight)``: logits x @ weight.T through ``gp.linear`` (the gemm
plugin's GEMM or decode GEMV when installed), for models that tie the output
projection to the embedding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ext

_INDEX = (np.dtype(np.int32), np.dtype(np.int64))
KERNEL_DTYPES = (np.dtype(gp.bfloat16), np.dtype(gp.float16), np.dtype(gp.float32))
# bytes per access -> the type the kernel moves
ACCESS = {16: "pgk::Vec<unsigned int, 4>", 8: "pgk::Vec<unsigned int, 2>", 4: "unsigned int", 2: "unsigned short"}
_INT_MAX = 2**31 - 1


def _check(ids: Any, weight: Any, check: Any) -> None:
    """Validate the operands and, with ``check``, the range of the ids (one sync)."""
    if not isinstance(ids, gp.GPUArray):
        raise TypeError(f"embedding: ids must be a GPUArray, got {type(ids).__name__}")
    if ids.dtype not in _INDEX:
        raise TypeError(f"embedding: ids must be int32 or int64, got {ids.dtype}")
    if not isinstance(weight, gp.GPUArray):
        raise TypeError(f"embedding: weight must be a GPUArray, got {type(weight).__name__}")
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be 2-D (vocab, dim), got shape {weight.shape}")
    if not isinstance(check, (bool, np.bool_)):
        raise TypeError(f"embedding: check must be a bool, got {type(check).__name__}")
    vocab = weight.shape[0]
    if check and ids.size:
        lo, hi = (int(v) for v in gp.stack([ids.min(), ids.max()]).to_numpy())
        if lo < 0 or hi >= vocab:
            bad = lo if lo < 0 else hi
            raise IndexError(f"embedding: id {bad} is out of range for a vocabulary of {vocab} rows (ids must be in [0, {vocab}))")


def reference(ids: Any, weight: Any, check: bool) -> gp.GPUArray:
    """``gp.take`` of the rows (any backend, any weight dtype); zeros for ids out of range."""
    _check(ids, weight, check)
    vocab, dim = weight.shape
    if ids.size == 0 or vocab == 0:
        return gp.zeros((*ids.shape, dim), weight.dtype)
    flat = ids.reshape(-1)
    valid = (flat >= 0) & (flat < vocab)
    rows = gp.take(weight, flat, axis=0, mode="clip")  # no synchronization: the ids were checked, or are masked below
    if not check:
        rows = gp.where(valid[:, None], rows, gp.zeros((), weight.dtype))
    return rows.reshape(*ids.shape, dim)


@cache
def gather_kernel(access: int) -> Any:
    """The kernel moving ``access`` bytes per load and store."""
    return ext.Kernel(
        ext.kernel_source(__name__, "embedding"),
        f"pgk::embedding_gather<{ACCESS[access]}>",
        signature="const void* w, long long ws, const void* ids, int ids64, void* out, long long rows, int nvec, long long vocab",
        name="embedding.cu",
        dependent_launch=True,
    )


def access_bytes(weight: Any) -> int:
    """The widest access (bytes) the row width, the weight's address and its row
    stride allow; 0 if the kernel does not take the weight (not unit-stride along D)."""
    isz = weight.itemsize
    rs, cs = weight.strides
    rs = 0 if weight.shape[0] <= 1 else rs  # a single row's stride is never used
    if (weight.shape[1] > 1 and cs != isz) or rs % isz:
        return 0
    for access in ACCESS:
        if access >= isz and (weight.shape[1] * isz) % access == 0 and weight.data_ptr % access == 0 and rs % access == 0:
            return access
    return 0


def kernel_fits(ids: Any, weight: Any, check: Any = True) -> bool:
    """Predicate of the kernel: int ids and a bf16/fp16/fp32 weight it reads as it is."""
    try:
        return (
            ids.dtype in _INDEX and ids.size <= _INT_MAX and weight.dtype in KERNEL_DTYPES and weight.ndim == 2 and access_bytes(weight) > 0
        )
    except AttributeError:
        return False


@dataclass(frozen=True, slots=True)
class _Plan:
    """A gather launch (None: nothing to copy) and its scalars: the weight's row
    stride and a row's width, both in accesses."""

    launch: ext.Launch | None
    ws: int
    nvec: int


# Launches prepared per call signature (the layouts of ids and the weight).
_plans: ext.PlanCache[tuple, _Plan] = ext.PlanCache("pygpukit_nn.embedding")


def embedding_cuda(ids: Any, weight: Any, check: bool) -> gp.GPUArray:
    """The gather kernel (``kernels/embedding.cu``); repeated call signatures skip the planning."""
    _check(ids, weight, check)
    key = (ext.layout_key(ids, 1), ext.layout_key(weight))  # ids are read at any address
    plan = _plans.get(key) or _plans.put(key, _plan(ids, weight))
    vocab, dim = weight.shape
    out = ext.empty((*ids.shape, dim), weight.dtype)
    if plan.launch is not None:
        flat = ids if ids.is_contiguous else ids.copy()
        plan.launch(weight, plan.ws, flat, int(ids.dtype == np.int64), out, ids.size, plan.nvec, vocab)
    return out


def _plan(ids: Any, weight: Any) -> _Plan:
    access = access_bytes(weight)
    nvec = weight.shape[1] * weight.itemsize // access
    bx = min(max(-(-nvec // 32) * 32, 32), 256)
    rows = ids.size
    by = max(1, min(256 // bx, rows))
    grid = -(-rows // by) if rows and nvec else 0
    ws = 0 if weight.shape[0] <= 1 else weight.strides[0] // access
    return _Plan(gather_kernel(access).launcher(grid, (bx, by)) if grid else None, ws, nvec)


def embedding(ids: gp.GPUArray, weight: gp.GPUArray, check: bool = True) -> gp.GPUArray:
    """Rows of ``weight`` (vocab, D) at ``ids`` (int32/int64, any shape): (*ids.shape, D).

    ``check`` (default True): an id outside [0, vocab) raises IndexError
    naming it (costs a device min/max and a host sync of two numbers);
    ``check=False`` never synchronizes and gives zeros for such ids.
    """
    return ext.op("embedding")(ids, weight, check)


def lm_head(x: gp.GPUArray, weight: gp.GPUArray) -> gp.GPUArray:
    """The tied output projection: logits = x @ weight.T for x (..., D) and the
    embedding weight (vocab, D), through ``gp.linear`` (the gemm plugin serves
    it when installed)."""
    return gp.linear(x, weight)


def register(registry: Any) -> None:
    ext.register_family(
        registry, "embedding", nkey=2, doc=__doc__ or "", reference=reference, cuda=embedding_cuda,
        dtypes=["int32", "int64", *KERNEL_DTYPES], min_sm=80, predicate=kernel_fits,
    )  # fmt: skip

"""The gemm plugin's hooks: cuBLASLt implementations of ``matmul`` and
``linear`` for float16, bfloat16 (SM 80+), float32 (exact, or TF32 when
``gp.set_matmul_precision("tf32")``) and float64, above core's reference
kernel (priority 10); the new op ``scaled_mm`` (fp8 with per-tensor scales,
pygpukit_gemm.scaled) with a reference implementation everywhere and
cuBLASLt's fp8 tensor cores on SM 89+; the own kernels (tensor-core GEMM,
decode GEMV) for core's and its own ops and, by op name, for pygpukit-nn's
fused decode ops ``add_rms_norm_linear`` and ``swiglu_linear``; the benchmark
suites ``matmul`` and ``own_gemm``. On a CUDA machine without cuBLASLt the
cuBLASLt implementations are not registered and the plugin's description
says why; core's kernel serves."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import pygpukit as gp
from pygpukit import ext
from pygpukit.linalg import get_matmul_precision, linear_shapes, matmul_shapes
from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__, cublaslt, epilogue, gemm_tc, gemv, grouped, quant, scaled

PRIORITY = 10
TC_PRIORITY = 5  # the own tensor-core GEMM: above core's kernel, below cuBLASLt
GEMV_PRIORITY = 11  # the own decode GEMV for linear: above cuBLASLt where it applies (decode_linear)
HALF = ["bfloat16", "float16"]
_status = {"cublaslt": "not loaded"}


# Prepared products by call signature (the operands' layouts with their
# 256-byte alignment, the bias's, the precision): a repeated call skips the
# shape logic entirely.
_prepared: ext.PlanCache[tuple[Any, ...], cublaslt.Prepared] = ext.PlanCache("pygpukit_gemm.plugin.prepared")


def matmul(a: Any, b: Any) -> gp.GPUArray:
    """``a @ b`` with NumPy's rules through cuBLASLt (operands of different float
    dtypes are converted to the result dtype first)."""
    try:
        call = _prepared.get((ext.layout_key(a, 256), ext.layout_key(b, 256), get_matmul_precision()))
    except AttributeError:  # not arrays: matmul_shapes says so
        call = None
    if call is None:
        return _matmul_first(a, b)
    return call(a.data_ptr, b.data_ptr)


def _matmul_first(a: Any, b: Any) -> gp.GPUArray:
    s = matmul_shapes(a, b)
    x, y = s.a.astype(s.out_dtype, copy=False), s.b.astype(s.out_dtype, copy=False)
    out_shape = tuple(d for i, d in enumerate((*s.batch, s.m, s.n)) if i not in s.squeeze)
    call = cublaslt.prepare(x, y, s.batch, s.m, s.n, s.k, out_shape) if x is s.a and y is s.b else None
    if call is None:  # casts, copies or an empty product: not worth keeping
        return s.finish(cublaslt.gemm(x, y, s.batch, s.m, s.n, s.k))
    _prepared.put((ext.layout_key(a, 256), ext.layout_key(b, 256), get_matmul_precision()), call)
    return call(x.data_ptr, y.data_ptr)


def _linear_key(x: Any, w: Any, bias: Any) -> tuple[Any, ...]:
    return (ext.layout_key(x, 256), ext.layout_key(w, 256), ext.layout_key(bias, 256), get_matmul_precision())


def linear(x: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    """``x @ w.T + bias`` with the bias added in cuBLASLt's epilogue; the leading
    axes of x are one M dimension (one GEMM, not a batch)."""
    try:
        call = _prepared.get(_linear_key(x, w, bias))
    except AttributeError:  # not arrays: linear_shapes says so
        call = None
    if call is None:
        return _linear_first(x, w, bias)
    return call(x.data_ptr, w.data_ptr, 0 if bias is None else bias.data_ptr)


def _linear_first(x: Any, w: Any, bias: Any) -> gp.GPUArray:
    out_features = linear_shapes(x, w, bias)
    dt = gp.result_type(x.dtype, w.dtype)
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(math.prod(lead), k).astype(dt, copy=False)  # not -1: K may be 0
    wt = w.astype(dt, copy=False).T
    b = None if bias is None else bias.astype(dt, copy=False)
    if b is not None and not b.is_contiguous:
        b = b.copy()
    m = x2.shape[0]
    same = x2.data_ptr == x.data_ptr and wt.data_ptr == w.data_ptr and (bias is None or b is bias)
    call = cublaslt.prepare(x2, wt, (), m, out_features, k, (*lead, out_features), b is not None) if same else None
    if call is None:
        return cublaslt.gemm(x2, wt, (), m, out_features, k, bias=b).reshape(*lead, out_features)
    _prepared.put(_linear_key(x, w, bias), call)
    return call(x2.data_ptr, wt.data_ptr, 0 if b is None else b.data_ptr)


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo("pygpukit-gemm", __version__, f"matmul and linear through cuBLASLt ({_status['cublaslt']})")


def _register_tensor_cores(registry: Any) -> None:
    """The own tensor-core kernel (gemm_tc.py): below cuBLASLt for matmul and
    linear (it serves where cuBLASLt is missing, or when routed to), the only
    GPU implementation of the grouped products; the own GEMV for decode rows,
    and with a fused prologue for pygpukit-nn's add_rms_norm_linear and
    swiglu_linear (registered by op name: they wait for nn's definition)."""
    ext.register_family(registry, "grouped_linear", nkey=2, doc=grouped.__doc__ or "", reference=grouped.reference)
    ext.register_family(registry, "grouped_linear_masked", nkey=2, doc=grouped.__doc__ or "", reference=grouped.reference_masked)
    half = {"backend": "cuda", "dtypes": HALF, "min_sm": 80, "name": "mma"}
    registry.register("matmul", gemm_tc.matmul, priority=TC_PRIORITY, predicate=gemm_tc.same_dtype, **half)
    registry.register("linear", gemm_tc.linear, priority=TC_PRIORITY, predicate=gemm_tc.same_dtype, **half)
    registry.register("fused_linear", gemm_tc.fused_linear, priority=TC_PRIORITY, predicate=gemm_tc.same_dtype, **half)
    registry.register("linear", gemv.linear, priority=GEMV_PRIORITY, predicate=gemv.decode_linear, **{**half, "name": "gemv"})
    gemv_fused = {**half, "name": "gemv", "priority": PRIORITY}
    registry.register("add_rms_norm_linear", gemv.add_rms_norm_linear, predicate=gemv.takes_add_rms_norm_linear, **gemv_fused)
    registry.register("swiglu_linear", gemv.swiglu_linear, predicate=gemv.takes_swiglu_linear, **gemv_fused)
    registry.register("grouped_linear", grouped.grouped_linear, priority=PRIORITY, predicate=grouped.kernel_dtypes, **half)
    registry.register("grouped_linear_masked", grouped.grouped_linear_masked, priority=PRIORITY, predicate=grouped.kernel_dtypes, **half)
    e4m3 = {"backend": "cuda", "dtypes": [grouped.FP8[0]], "min_sm": 89, "name": "mma_fp8", "priority": PRIORITY}
    # below cuBLASLt's per-tensor path; the only GPU kernel for row-wise scales
    registry.register("scaled_mm", scaled.scaled_mm_mma, predicate=scaled.fits_own_kernel, **{**e4m3, "priority": TC_PRIORITY})
    for op, reference, kernel in (
        ("grouped_scaled_linear", grouped.reference_scaled, grouped.grouped_scaled_linear),
        ("grouped_scaled_linear_masked", grouped.reference_scaled_masked, grouped.grouped_scaled_linear_masked),
    ):
        ext.register_family(registry, op, nkey=1, doc=grouped.__doc__ or "", reference=reference)
        registry.register(op, kernel, predicate=grouped.kernel_takes_scaled, **e4m3)


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    if gp.backend() == "cuda":
        try:
            lib = cublaslt.library()
            _status["cublaslt"] = f"cuBLASLt {lib.version} from {lib.path}"
        except cublaslt.CublasLtError as e:
            _status["cublaslt"] = f"unavailable: {e}"
    ext.register_family(registry, "scaled_mm", nkey=2, doc=scaled.__doc__ or "", reference=scaled.reference)
    ext.register_family(registry, "qlinear", nkey=1, doc=quant.__doc__ or "", reference=quant.reference)
    ext.register_family(registry, "fused_linear", nkey=2, doc=epilogue.__doc__ or "", reference=epilogue.reference)
    registry.register(
        "qlinear", quant.qlinear_gemv, backend="cuda", dtypes=["bfloat16", "float16", "float32"], min_sm=80, priority=PRIORITY,
        predicate=quant.decode_rows, name="gemv_q",
    )  # fmt: skip
    _register_tensor_cores(registry)
    if gp.backend() == "cuda" and _status["cublaslt"].startswith("unavailable"):
        return
    for op, fn in (("matmul", matmul), ("linear", linear), ("fused_linear", epilogue.fused_linear)):
        registry.register(op, fn, backend="cuda", dtypes=["float16", "float32", "float64"], priority=PRIORITY, name="cublaslt")
        registry.register(op, fn, backend="cuda", dtypes=["bfloat16"], min_sm=80, priority=PRIORITY, name="cublaslt_bf16")
    registry.register(
        "scaled_mm", scaled.scaled_mm, backend="cuda", dtypes=scaled.FP8, min_sm=89, priority=PRIORITY,
        predicate=scaled.fits_tensor_cores, name="cublaslt_fp8",
    )  # fmt: skip
    # Row-wise and block scales stay with the reference: cuBLASLt 13.1 on an H100
    # rejected every descriptor with those scale modes (cublasStatus 7 from the
    # heuristic, with and without fast accumulation), see docs/gemm.md.


# suite -> (module under pygpukit_gemm.benchmarks, its run function, description)
BENCHMARKS = {
    "matmul": (
        "matmul",
        "bench_matmul",
        "matmul at 8192^3 (bf16, fp16, tf32, fp32), fp8 scaled_mm, linear at Llama-3-8B shapes (TFLOP/s) and decode GEMV "
        "with bf16 / int8 / int4 / fp8 weights (us), against PyTorch",
    ),
    "own_gemm": (
        "own_gemm",
        "bench_own_gemm",
        "the own tensor-core GEMM at 8192^3 (bf16, fp16) and the grouped MoE products (bf16, fp8) against PyTorch",
    ),
}


def _suite(module: str, function: str) -> Callable[[Any, bool], None]:
    def run(rec: Any, quick: bool) -> None:
        getattr(importlib.import_module(f"pygpukit_gemm.benchmarks.{module}"), function)(rec, quick)

    return run


@hookimpl
def pygpukit_register_benchmarks(registry: Any) -> None:
    for name, (module, function, description) in BENCHMARKS.items():
        registry.register(name, _suite(module, function), description=description)

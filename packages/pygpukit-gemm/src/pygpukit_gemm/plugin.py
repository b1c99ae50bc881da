"""The gemm plugin's hooks: cuBLASLt implementations of ``matmul`` and
``linear`` for float16, bfloat16 (SM 80+), float32 (exact, or TF32 when
``gp.set_matmul_precision("tf32")``) and float64, above core's reference
kernel (priority 10); the new op ``scaled_mm`` (fp8 with per-tensor scales,
pygpukit_gemm.scaled) with a reference implementation everywhere and
cuBLASLt's fp8 tensor cores on SM 89+. On a CUDA machine without cuBLASLt nothing is
registered and the plugin's description says why; core's kernel serves."""

from __future__ import annotations

import math
from typing import Any

import pygpukit as gp
from pygpukit.linalg import get_matmul_precision, linear_shapes, matmul_shapes
from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__, cublaslt, epilogue, gemv, grouped, prologue, quant, scaled, tc

PRIORITY = 10
TC_PRIORITY = 5  # the own tensor-core GEMM: above core's kernel, below cuBLASLt
GEMV_PRIORITY = 11  # the own decode GEMV for linear: above cuBLASLt where it applies (decode_linear)
_status = {"cublaslt": "not loaded"}


# Prepared products by call signature (shapes, strides, dtypes, operand
# alignments, precision): a repeated call skips the shape logic entirely.
_prepared: dict[tuple, cublaslt.Prepared] = {}


def _align(ptr: int) -> int:
    return ptr & 255


def matmul(a: Any, b: Any) -> gp.GPUArray:
    """``a @ b`` with NumPy's rules through cuBLASLt (operands of different float
    dtypes are converted to the result dtype first)."""
    try:
        call = _prepared[
            a._shape, a._strides, a._dtype, _align(a._ptr), b._shape, b._strides, b._dtype, _align(b._ptr), get_matmul_precision()
        ]
    except (KeyError, AttributeError):
        return _matmul_first(a, b)
    return call(a._ptr, b._ptr)


def _matmul_first(a: Any, b: Any) -> gp.GPUArray:
    s = matmul_shapes(a, b)
    x, y = s.a.astype(s.out_dtype, copy=False), s.b.astype(s.out_dtype, copy=False)
    out_shape = tuple(d for i, d in enumerate((*s.batch, s.m, s.n)) if i not in s.squeeze)
    call = cublaslt.prepare(x, y, s.batch, s.m, s.n, s.k, out_shape) if x is s.a and y is s.b else None
    if call is None:  # casts, copies or an empty product: not worth keeping
        return s.finish(cublaslt.gemm(x, y, s.batch, s.m, s.n, s.k))
    _prepared[a._shape, a._strides, a._dtype, _align(a._ptr), b._shape, b._strides, b._dtype, _align(b._ptr), get_matmul_precision()] = call
    return call(x.data_ptr, y.data_ptr)


def linear(x: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    """``x @ w.T + bias`` with the bias added in cuBLASLt's epilogue; the leading
    axes of x are one M dimension (one GEMM, not a batch)."""
    try:
        bkey = None if bias is None else (bias._shape, bias._dtype, bias._contig)
        call = _prepared[
            x._shape, x._strides, x._dtype, _align(x._ptr), w._shape, w._strides, w._dtype, _align(w._ptr), bkey, get_matmul_precision()
        ]
    except (KeyError, AttributeError):
        return _linear_first(x, w, bias)
    return call(x._ptr, w._ptr, 0 if bias is None else bias._ptr)


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
    bkey = None if bias is None else (bias._shape, bias._dtype, bias._contig)
    _prepared[
        x._shape, x._strides, x._dtype, _align(x._ptr), w._shape, w._strides, w._dtype, _align(w._ptr), bkey, get_matmul_precision()
    ] = call
    return call(x2.data_ptr, wt.data_ptr, 0 if b is None else b.data_ptr)


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo("pygpukit-gemm", __version__, f"matmul and linear through cuBLASLt ({_status['cublaslt']})")


def _register_tensor_cores(registry: Any) -> None:
    """The own tensor-core kernel (tc.py): below cuBLASLt for matmul and linear
    (it serves where cuBLASLt is missing, or when routed to), the only GPU
    implementation of the grouped products; the own GEMV for decode rows, and
    with a fused prologue (prologue.py) the only GPU implementation there."""
    registry.define("add_rms_norm_linear", nkey=1, doc=prologue.__doc__ or "")
    registry.define("swiglu_linear", nkey=1, doc=prologue.__doc__ or "")
    registry.define("grouped_linear", nkey=2, doc=grouped.__doc__ or "")
    registry.define("grouped_linear_masked", nkey=2, doc=grouped.__doc__ or "")
    for backend in ("cuda", "cpu"):
        registry.register("add_rms_norm_linear", prologue.reference_add_rms_norm_linear, backend=backend, name="reference")
        registry.register("swiglu_linear", prologue.reference_swiglu_linear, backend=backend, name="reference")
        registry.register("grouped_linear", grouped.reference, backend=backend, name="reference")
        registry.register("grouped_linear_masked", grouped.reference_masked, backend=backend, name="reference")
    half = {"backend": "cuda", "dtypes": ["bfloat16", "float16"], "min_sm": 80, "name": "mma"}
    registry.register("matmul", tc.matmul, priority=TC_PRIORITY, predicate=tc.same_dtype, **half)
    registry.register("linear", tc.linear, priority=TC_PRIORITY, predicate=tc.same_dtype, **half)
    registry.register("fused_linear", tc.fused_linear, priority=TC_PRIORITY, predicate=tc.same_dtype, **half)
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
        registry.define(op, nkey=1, doc=grouped.__doc__ or "")
        for backend in ("cuda", "cpu"):
            registry.register(op, reference, backend=backend, name="reference")
        registry.register(op, kernel, predicate=grouped.kernel_takes_scaled, **e4m3)


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    if gp.backend() == "cuda":
        try:
            lib = cublaslt.library()
            _status["cublaslt"] = f"cuBLASLt {lib.version} from {lib.path}"
        except cublaslt.CublasLtError as e:
            _status["cublaslt"] = f"unavailable: {e}"
    registry.define("scaled_mm", nkey=2, doc=scaled.__doc__ or "")
    registry.define("qlinear", nkey=1, doc=quant.__doc__ or "")
    registry.define("fused_linear", nkey=2, doc=epilogue.__doc__ or "")
    for backend in ("cuda", "cpu"):
        registry.register("scaled_mm", scaled.reference, backend=backend, name="reference")
        registry.register("qlinear", quant.reference, backend=backend, name="reference")
        registry.register("fused_linear", epilogue.reference, backend=backend, name="reference")
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

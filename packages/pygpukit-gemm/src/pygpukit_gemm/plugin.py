"""The gemm plugin's hooks: cuBLASLt implementations of ``matmul`` and
``linear`` for float16, bfloat16 (SM 80+), float32 (exact, or TF32 when
``gp.set_matmul_precision("tf32")``) and float64, above core's reference
kernel (priority 10). On a CUDA machine without cuBLASLt nothing is
registered and the plugin's description says why; core's kernel serves."""

from __future__ import annotations

from typing import Any

import pygpukit as gp
from pygpukit.linalg import linear_shapes, matmul_shapes
from pygpukit.plugins import PluginInfo, hookimpl

from . import __version__, cublaslt

PRIORITY = 10
_status = {"cublaslt": "not loaded"}


def matmul(a: Any, b: Any) -> gp.GPUArray:
    """``a @ b`` with NumPy's rules through cuBLASLt (operands of different float
    dtypes are converted to the result dtype first)."""
    s = matmul_shapes(a, b)
    x, y = s.a.astype(s.out_dtype, copy=False), s.b.astype(s.out_dtype, copy=False)
    return s.finish(cublaslt.gemm(x, y, s.batch, s.m, s.n, s.k))


def linear(x: Any, w: Any, bias: Any = None) -> gp.GPUArray:
    """``x @ w.T + bias`` with the bias added in cuBLASLt's epilogue; the leading
    axes of x are one M dimension (one GEMM, not a batch)."""
    out_features = linear_shapes(x, w, bias)
    dt = gp.result_type(x.dtype, w.dtype)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1]).astype(dt, copy=False)
    wt = w.astype(dt, copy=False).T
    b = None if bias is None else bias.astype(dt, copy=False)
    if b is not None and not b.is_contiguous:
        b = b.copy()
    out = cublaslt.gemm(x2, wt, (), x2.shape[0], out_features, x.shape[-1], bias=b)
    return out.reshape(*lead, out_features)


@hookimpl
def pygpukit_plugin_info() -> PluginInfo:
    return PluginInfo("pygpukit-gemm", __version__, f"matmul and linear through cuBLASLt ({_status['cublaslt']})")


@hookimpl
def pygpukit_register_ops(registry: Any) -> None:
    if gp.backend() == "cuda":
        try:
            lib = cublaslt.library()
        except cublaslt.CublasLtError as e:
            _status["cublaslt"] = f"unavailable: {e}"
            return
        _status["cublaslt"] = f"cuBLASLt {lib.version} from {lib.path}"
    for op, fn in (("matmul", matmul), ("linear", linear)):
        registry.register(op, fn, backend="cuda", dtypes=["float16", "float32", "float64"], priority=PRIORITY, name="cublaslt")
        registry.register(op, fn, backend="cuda", dtypes=["bfloat16"], min_sm=80, priority=PRIORITY, name="cublaslt_bf16")

"""cuBLASLt, loaded at run time (ctypes) from the ``nvidia-cublas`` wheel or the
system, for matrix products of GPUArrays.

Search order: ``PYGPUKIT_CUBLASLT_PATH``, the wheel (CUDA 13 layout
``nvidia/cu13/lib``, CUDA 12 ``nvidia/cublas/lib``), then the system loader.

Row-major operands are handed to cuBLASLt (column-major) as their transposes:
C = A @ B is computed as C^T = B^T A^T, so no operand is copied when each
matrix has one unit stride (a transposed view becomes a transposed operation)
and its batch axes collapse to one stride (0 for a broadcast batch). A plan
(descriptors, layouts, the heuristic's first algorithm and its workspace size)
is built once per signature and kept; the workspace comes from the pool on
the current stream for each call, so nothing global is shared between calls.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import threading
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

import pygpukit as gp
from pygpukit import ext
from pygpukit.scheduler import sm_budget

_WHEEL_LIBS = (("cu13", "lib", "libcublasLt.so.13"), ("cublas", "lib", "libcublasLt.so.12"))
_SYSTEM_SONAMES = ("libcublasLt.so.13", "libcublasLt.so.12")
MAX_WORKSPACE = 32 << 20  # as PyTorch on Hopper

# cudaDataType / cublasComputeType_t / cublasLt enums (cublasLt.h, library_types.h)
CUDA_TYPE = {"float16": 2, "bfloat16": 14, "float32": 0, "float64": 1, "float8_e4m3fn": 28, "float8_e5m2": 29}
COMPUTE_32F, COMPUTE_32F_FAST_TF32, COMPUTE_64F = 68, 77, 70
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER, DESC_BIAS_DATA_TYPE = 3, 4, 7, 8, 26
DESC_SM_COUNT_TARGET = 15
DESC_A_SCALE_POINTER, DESC_B_SCALE_POINTER, DESC_FAST_ACCUM = 17, 18, 25
DESC_A_SCALE_MODE, DESC_B_SCALE_MODE = 31, 32
# cublasLtMatmulMatrixScale_t (float32 scales): one per tensor; a vector along the
# outer dimension (our rows of a, columns of b); per 128 elements along K; per 128x128 block
SCALE_SCALAR_32F, SCALE_OUTER_VEC_32F, SCALE_VEC128_32F, SCALE_BLK128X128_32F = 0, 3, 4, 5
LAYOUT_BATCH_COUNT, LAYOUT_STRIDED_BATCH_OFFSET = 5, 6
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = {"a": 5, "b": 6, "c": 7, "d": 8}
EPILOGUE_DEFAULT, EPILOGUE_BIAS = 1, 4
# cublasLtEpilogue_t: the activation applied to alpha*A*B + beta*C (+ bias); GELU is the tanh approximation
EPILOGUE_RELU, EPILOGUE_RELU_BIAS, EPILOGUE_GELU, EPILOGUE_GELU_BIAS = 2, 6, 32, 36
_WITH_BIAS = {EPILOGUE_DEFAULT: EPILOGUE_BIAS, EPILOGUE_RELU: EPILOGUE_RELU_BIAS, EPILOGUE_GELU: EPILOGUE_GELU_BIAS}
OP_N, OP_T = 0, 1


class CublasLtError(gp.PyGPUkitError, RuntimeError):
    """cuBLASLt could not be loaded, or one of its calls failed (the message names it)."""


class _HeuristicResult(ctypes.Structure):
    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves_count", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


def candidates() -> list[str]:
    """Paths and sonames to try, in order."""
    return [c for c, _ in ext.library_candidates("PYGPUKIT_CUBLASLT_PATH", _WHEEL_LIBS, _SYSTEM_SONAMES)]


@dataclass(frozen=True)
class OperandLayout:
    """How cuBLASLt sees one row-major operand of shape (*batch, r, c): as the
    column-major matrix (c, r) (``op`` N) or (r, c) read transposed (``op`` T)."""

    op: int
    rows: int  # of the stored column-major matrix
    cols: int
    ld: int
    batch_stride: int  # elements; 0 for a broadcast batch


def operand_layout(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> OperandLayout | None:
    """The layout of a (*batch, r, c) operand, or None when it needs a copy first
    (no unit stride in the matrix, or batch axes that are not one stride)."""
    *bshape, r, c = shape
    st = [s // itemsize for s in strides]
    *bst, sr, sc = st
    if c == 1:
        sc = 1  # a single column: its stride is never used
    if r == 1:
        sr = max(c, 1) if sc == 1 else 1
    if sc == 1 and sr >= max(c, 1):
        lay = (OP_N, c, r, sr)
    elif sr == 1 and sc >= max(r, 1):
        lay = (OP_T, r, c, sc)
    else:
        return None
    live = [(n, s) for n, s in zip(bshape, bst) if n != 1]
    if not live:
        batch_stride = 0
    elif all(s == 0 for _, s in live):
        batch_stride = 0
    else:
        # the batch axes must walk one arithmetic sequence: stride_i = stride_{i+1} * n_{i+1}
        for (_, s_outer), (n_inner, s_inner) in itertools.pairwise(live):
            if s_outer != s_inner * n_inner or s_inner == 0:
                return None
        batch_stride = live[-1][1]
    return OperandLayout(*lay, batch_stride)


class _Lib:
    """The loaded library and its handle."""

    def __init__(self) -> None:
        try:
            self.dll, self.path = ext.load_library("PYGPUKIT_CUBLASLT_PATH", _WHEEL_LIBS, _SYSTEM_SONAMES)
        except OSError as e:
            raise CublasLtError(f"cuBLASLt could not be loaded (pip install nvidia-cublas); {e}") from None
        d = self.dll
        vp, sz, i32, u64, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64
        d.cublasLtGetVersion.restype = sz
        d.cublasLtGetStatusString.restype = ctypes.c_char_p
        for name, args in {
            "cublasLtCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulDescCreate": [ctypes.POINTER(vp), i32, i32],
            "cublasLtMatmulDescSetAttribute": [vp, i32, vp, sz],
            "cublasLtMatrixLayoutCreate": [ctypes.POINTER(vp), i32, u64, u64, i64],
            "cublasLtMatrixLayoutSetAttribute": [vp, i32, vp, sz],
            "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulPreferenceSetAttribute": [vp, i32, vp, sz],
            "cublasLtMatmulPreferenceDestroy": [vp],
            "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i32, ctypes.POINTER(_HeuristicResult), ctypes.POINTER(i32)],
            "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp],
        }.items():
            fn = getattr(d, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        self.version = int(d.cublasLtGetVersion())
        handle = vp()
        self.check(d.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
        self.handle = handle.value

    def check(self, status: int, call: str) -> None:
        if status != 0:
            text = self.dll.cublasLtGetStatusString(status).decode()
            raise CublasLtError(f"{call} failed: {text} (cublasStatus {status})")

    def set_attr(self, fn: Any, obj: int, attr: int, value: ctypes._SimpleCData, call: str) -> None:
        self.check(fn(obj, attr, ctypes.byref(value), ctypes.sizeof(value)), call)


_lib: _Lib | None = None
_lib_lock = threading.Lock()


def library() -> _Lib:
    """Load cuBLASLt once (raises CublasLtError with what was tried)."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = _Lib()
    return _lib


class PlanKey(NamedTuple):
    """What a plan depends on: the dtypes of a, b and the result, the compute
    type, both operands' layouts, m and n, the batch, the alignments of cuBLASLt's
    A, B, C and D, the epilogue's bias, the fp8 scales and their modes, the
    epilogue and a C of its own, and the scheduler's SM budget (0: all SMs)."""

    dtypes: tuple[str, str, str]
    compute: int
    la: OperandLayout
    lb: OperandLayout
    m: int
    n: int
    batch: int
    aligns: tuple[int, int, int, int]
    bias: bool
    scaled: bool
    scale_modes: tuple[int, int]
    epilogue: int
    c: bool
    sms: int


@dataclass(frozen=True, slots=True)
class Plan:
    desc: int
    layouts: tuple[int, int, int]  # cuBLASLt's A (our b), B (our a), D
    algo: Any  # ctypes array, kept alive
    workspace: int
    alpha: Any
    beta: Any
    bias: bool
    scaled: bool  # per-tensor scales of the operands (fp8), device pointers set per call
    c_layout: int = 0  # C's own layout (D's shape) when beta = 1 adds a C other than D; 0: no C


_plans: ext.PlanCache[PlanKey, Plan] = ext.PlanCache("pygpukit_gemm.cublaslt.plans")
_plans_lock = threading.Lock()


def _alignment(ptr: int) -> int:
    return min(256, ptr & -ptr) if ptr else 256


def _plan(key: PlanKey) -> Plan:
    plan = _plans.get(key)
    if plan is None:
        with _plans_lock:
            plan = _plans.get(key) or _plans.put(key, _build(key))
    return plan


def _build(key: PlanKey) -> Plan:
    (ta, tb, td), compute, la, lb, m, n, batch, aligns, bias, scaled, scale_modes, epilogue, c, sms = key
    lib, d = library(), library().dll
    vp = ctypes.c_void_p
    scale = CUDA_TYPE["float64"] if compute == COMPUTE_64F else CUDA_TYPE["float32"]
    desc = vp()
    lib.check(d.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, scale), "cublasLtMatmulDescCreate")
    # cuBLASLt's A is our b (its stored layout lb), its B our a
    lib.set_attr(d.cublasLtMatmulDescSetAttribute, desc.value, DESC_TRANSA, ctypes.c_int32(lb.op), "set TRANSA")
    lib.set_attr(d.cublasLtMatmulDescSetAttribute, desc.value, DESC_TRANSB, ctypes.c_int32(la.op), "set TRANSB")
    if sms:  # the scheduler's SM budget of a best-effort task: leave the other SMs free
        lib.set_attr(d.cublasLtMatmulDescSetAttribute, desc.value, DESC_SM_COUNT_TARGET, ctypes.c_int32(sms), "set SM_COUNT_TARGET")
    if bias or epilogue != EPILOGUE_DEFAULT:
        epi = _WITH_BIAS[epilogue] if bias else epilogue
        lib.set_attr(d.cublasLtMatmulDescSetAttribute, desc.value, DESC_EPILOGUE, ctypes.c_int32(epi), "set EPILOGUE")
    if bias:
        lib.set_attr(d.cublasLtMatmulDescSetAttribute, desc.value, DESC_BIAS_DATA_TYPE, ctypes.c_int32(CUDA_TYPE[td]), "set BIAS_DATA_TYPE")
    if scaled:
        lib.set_attr(d.cublasLtMatmulDescSetAttribute, desc.value, DESC_FAST_ACCUM, ctypes.c_int8(0), "set FAST_ACCUM")
    if scaled and scale_modes != (SCALE_SCALAR_32F, SCALE_SCALAR_32F):  # left unset otherwise: older cuBLASLt lacks the attributes
        mode_a, mode_b = scale_modes
        lib.set_attr(d.cublasLtMatmulDescSetAttribute, desc.value, DESC_A_SCALE_MODE, ctypes.c_int32(mode_b), "set A_SCALE_MODE")
        lib.set_attr(d.cublasLtMatmulDescSetAttribute, desc.value, DESC_B_SCALE_MODE, ctypes.c_int32(mode_a), "set B_SCALE_MODE")
    layouts = []
    for lay, dtype, (rows, cols, ld, bstride) in (
        ("A", tb, (lb.rows, lb.cols, lb.ld, lb.batch_stride)),
        ("B", ta, (la.rows, la.cols, la.ld, la.batch_stride)),
        ("D", td, (n, m, n, m * n)),
        *((("C", td, (n, m, n, m * n)),) if c else ()),  # out of place: C's own layout, D's shape
    ):
        h = vp()
        lib.check(d.cublasLtMatrixLayoutCreate(ctypes.byref(h), CUDA_TYPE[dtype], rows, cols, ld), f"cublasLtMatrixLayoutCreate ({lay})")
        if batch > 1:
            lib.set_attr(d.cublasLtMatrixLayoutSetAttribute, h.value, LAYOUT_BATCH_COUNT, ctypes.c_int32(batch), "set BATCH_COUNT")
            lib.set_attr(
                d.cublasLtMatrixLayoutSetAttribute, h.value, LAYOUT_STRIDED_BATCH_OFFSET, ctypes.c_int64(bstride), "set BATCH_OFFSET"
            )
        layouts.append(h.value)
    c_layout = (layouts[3] or 0) if c else 0  # handles are never NULL once created
    pref = vp()
    lib.check(d.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
    try:
        lib.set_attr(
            d.cublasLtMatmulPreferenceSetAttribute,
            pref.value,
            PREF_MAX_WORKSPACE_BYTES,
            ctypes.c_uint64(MAX_WORKSPACE),
            "set MAX_WORKSPACE",
        )
        for which, align in zip("abcd", aligns):
            lib.set_attr(
                d.cublasLtMatmulPreferenceSetAttribute, pref.value, PREF_MIN_ALIGNMENT[which], ctypes.c_uint32(align), "set MIN_ALIGNMENT"
            )
        result = _HeuristicResult()
        count = ctypes.c_int(0)
        lib.check(
            d.cublasLtMatmulAlgoGetHeuristic(lib.handle, desc, layouts[0], layouts[1], c_layout or layouts[2], layouts[2], pref, 1, ctypes.byref(result), ctypes.byref(count)),
            "cublasLtMatmulAlgoGetHeuristic",
        )  # fmt: skip
    finally:
        d.cublasLtMatmulPreferenceDestroy(pref)
    if count.value < 1 or result.state != 0:
        raise CublasLtError(f"cuBLASLt has no algorithm for {ta} @ {tb} -> {td} ({m}x{n}, batch {batch}) with these layouts and alignments")
    ct = ctypes.c_double if compute == COMPUTE_64F else ctypes.c_float
    ws, beta = int(result.workspace_size), ct(1.0 if c else 0.0)
    return Plan(desc.value, (layouts[0], layouts[1], layouts[2]), result.algo, ws, ct(1.0), beta, bias, scaled, c_layout)


def compute_type(dtype: np.dtype) -> int:
    if dtype == np.float64:
        return COMPUTE_64F
    if dtype == np.float32 and gp.get_matmul_precision() == "tf32":
        return COMPUTE_32F_FAST_TF32
    return COMPUTE_32F


class Prepared:
    """One cuBLASLt product of fixed shapes, strides, dtype and alignments, ready
    to launch on new pointers: the hot path does one allocation (two with a
    workspace) and one library call."""

    __slots__ = ("_args", "_fn", "_key", "_plan", "dtype", "out_shape")

    def __init__(self, key: PlanKey, out_shape: tuple[int, ...], dtype: np.dtype) -> None:
        lib = library()
        plan = _plan(key)
        self._key, self._plan, self._fn, self.out_shape, self.dtype = key, plan, lib.dll.cublasLtMatmul, out_shape, dtype
        self._args = (lib.handle, plan.desc, ctypes.addressof(plan.alpha), ctypes.addressof(plan.beta), ctypes.addressof(plan.algo))

    def __call__(
        self, a_ptr: int, b_ptr: int, bias_ptr: int = 0, scale_a_ptr: int = 0, scale_b_ptr: int = 0, c_ptr: int = 0
    ) -> gp.GPUArray:
        """The product into a new array; ``c_ptr``: the C that a plan with one adds (beta 1)."""
        handle, desc, alpha, beta, algo = self._args
        plan = self._plan
        sms = sm_budget()
        if sms is not None:  # a best-effort task's product: a plan sized for its SMs
            plan = _plan(self._key._replace(sms=sms))
            desc, alpha, beta, algo = plan.desc, ctypes.addressof(plan.alpha), ctypes.addressof(plan.beta), ctypes.addressof(plan.algo)
        la, lb, ld = plan.layouts
        stream = ext.current_stream()
        out = ext.empty(self.out_shape, self.dtype, stream)
        ws = ext.empty((plan.workspace,), _UINT8, stream) if plan.workspace else None
        ptr = out.data_ptr
        args = (
            handle,
            desc,
            alpha,
            b_ptr,
            la,
            a_ptr,
            lb,
            beta,
            c_ptr if plan.c_layout else ptr,
            plan.c_layout or ld,
            ptr,
            ld,
            algo,
            ws.data_ptr if ws is not None else None,
            plan.workspace,
            stream,
        )
        if plan.bias or plan.scaled:
            with _plans_lock:  # bias and scale pointers live in the shared descriptor
                lib = library()
                set_attr = lib.dll.cublasLtMatmulDescSetAttribute
                if plan.bias:
                    lib.set_attr(set_attr, desc, DESC_BIAS_POINTER, ctypes.c_void_p(bias_ptr), "set BIAS_POINTER")
                if plan.scaled:  # cuBLASLt's A is our b
                    lib.set_attr(set_attr, desc, DESC_A_SCALE_POINTER, ctypes.c_void_p(scale_b_ptr), "set A_SCALE_POINTER")
                    lib.set_attr(set_attr, desc, DESC_B_SCALE_POINTER, ctypes.c_void_p(scale_a_ptr), "set B_SCALE_POINTER")
                self._launch(args, stream)
        else:
            self._launch(args, stream)
        return out

    def _launch(self, args: tuple, stream: int) -> None:
        # cuBLASLt launches outside pygpukit's launcher: its launch passes the scheduler's gate,
        # and counts there only when it succeeded (the failure raises inside the block)
        with ext.launch_gate(stream):
            status = self._fn(*args)
            if status:
                library().check(status, "cublasLtMatmul")


_UINT8 = np.dtype(np.uint8)


def prepare(
    a: gp.GPUArray,
    b: gp.GPUArray,
    batch: tuple[int, ...],
    m: int,
    n: int,
    k: int,
    out_shape: tuple[int, ...],
    bias: bool = False,
    out_dtype: np.dtype | None = None,
    scaled: bool = False,
    scale_modes: tuple[int, int] = (SCALE_SCALAR_32F, SCALE_SCALAR_32F),
    epilogue: int = EPILOGUE_DEFAULT,
    c: gp.GPUArray | None = None,
) -> Prepared | None:
    """A Prepared product for operands like ``a`` (*batch, m, k) and ``b`` (*batch,
    k, n), writing a contiguous result of ``out_shape`` (the (*batch, m, n)
    elements) in ``out_dtype`` (default: the operands' dtype, which must then be
    one); None when an operand needs a copy first or the product is empty.
    ``scaled``: fp8 operands with float32 scales, read as ``scale_modes`` (the
    cuBLASLt modes of a's and b's scales; per tensor by default). ``epilogue``:
    EPILOGUE_DEFAULT, _RELU or _GELU (with the bias when ``bias``), applied to the
    sum. ``c``: an array like the result (contiguous, of the output dtype) whose
    pointer the call takes, added with beta = 1 before the epilogue; None is
    returned for any other."""
    dt = a.dtype if out_dtype is None else out_dtype
    la = operand_layout(a.shape, a.strides, a.itemsize)
    lb = operand_layout(b.shape, b.strides, b.itemsize)
    if la is None or lb is None or (out_dtype is None and b.dtype != dt) or math.prod(out_shape) == 0 or k == 0:
        return None
    if c is not None and (c.dtype != dt or not c.is_contiguous or c.size != math.prod(out_shape)):
        return None
    c_align = 256 if c is None else _alignment(c.data_ptr)
    aligns = (_alignment(b.data_ptr), _alignment(a.data_ptr), c_align, 256)  # pool blocks are 512-byte aligned
    compute = COMPUTE_32F if scaled else compute_type(dt)
    fuse = (epilogue, c is not None)
    key = PlanKey(
        (a.dtype.name, b.dtype.name, dt.name), compute, la, lb, m, n, math.prod(batch), aligns, bias, scaled, scale_modes, *fuse, 0
    )
    return Prepared(key, out_shape, dt)


def gemm(a: gp.GPUArray, b: gp.GPUArray, batch: tuple[int, ...], m: int, n: int, k: int, bias: gp.GPUArray | None = None) -> gp.GPUArray:
    """(*batch, m, k) @ (*batch, k, n) (+ bias over the last axis) into a new
    contiguous (*batch, m, n) array, for any layouts: operands that cuBLASLt
    cannot read as they are (no unit stride, or batch axes that are not one
    stride) are copied first."""
    if k == 0 or math.prod(batch) * m * n == 0:
        out = gp.empty((*batch, m, n), a.dtype)
        if out.size:
            out[...] = 0 if bias is None else bias
        return out
    if operand_layout(a.shape, a.strides, a.itemsize) is None:
        a = a.copy()
    if operand_layout(b.shape, b.strides, b.itemsize) is None:
        b = b.copy()
    call = prepare(a, b, batch, m, n, k, (*batch, m, n), bias is not None)
    assert call is not None  # contiguous operands always have a layout
    return call(a.data_ptr, b.data_ptr, bias.data_ptr if bias is not None else 0)

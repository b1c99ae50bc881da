"""The ``signature=`` string each kernel is built with (and so the packing of
every launch of it) agrees with the kernel's parameter list in its .cu
source: the same C types in the same order, pointers as pointers. No GPU and
no NVRTC needed."""

import pytest

from pygpukit.jit.signature import find_signature
from pygpukit_gemm import gemm_tc, gemv

CFG, WG = gemm_tc.CONFIGS[0], gemm_tc.WGMMA_CONFIGS[0]
KERNELS = {
    "gemm": lambda: gemm_tc.kernel("gemm", CFG, True, "pgk::bfloat16", "pgk::Positive", True, True),
    "grouped": lambda: gemm_tc.kernel("grouped", WG, True, "pgk::half", "pgk::Positive", True, False, True),
    "masked": lambda: gemm_tc.kernel("masked", CFG, True, "pgk::bfloat16", "pgk::Positive", True, False),
    "gemm_fp8": lambda: gemm_tc.fp8_kernel("gemm_fp8", WG, "pgk::bfloat16", True, True),
    "grouped_fp8": lambda: gemm_tc.fp8_kernel("grouped_fp8", CFG, "pgk::half", True),
    "masked_fp8": lambda: gemm_tc.fp8_kernel("masked_fp8", CFG, "pgk::bfloat16", False),
    "transpose_2d": lambda: gemm_tc._transpose_kernel("pgk::half"),
    "gemv": lambda: gemv.kernel(2, "int8", "pgk::bfloat16"),
    "gemv_mma": lambda: gemv.kernel(1, "int4_mma", "pgk::half", (4, 2, 1)),
    "dequantize": lambda: gemv._dequantize_kernel("fp8", "float"),
    "gemv_mma_add_rms": lambda: gemv.fused_kernel("add_rms", 1, "pgk::bfloat16", (8, 1, 1)),
    "gemv_mma_swiglu": lambda: gemv.fused_kernel("swiglu", 2, "pgk::half", (16, 2, 1)),
}


def _codes(params):
    """Struct codes, pointers as P: what a launch packs."""
    return "".join(p.code for p in params)


@pytest.mark.parametrize("name", list(KERNELS))
def test_signature_matches_the_kernel_source(name):
    kern = KERNELS[name]()
    assert kern.func.partition("<")[0].rpartition("::")[2] == name
    declared = find_signature(kern.source, name)  # template types (T*, TX*) are pointers all the same
    assert _codes(kern.params) == _codes(declared), (name, [p.ctype for p in declared])
    # scalars agree in type (signedness too)
    assert [p.dtype for p in kern.params if not p.pointer] == [p.dtype for p in declared if not p.pointer]


def test_every_entry_point_is_checked():
    assert set(gemm_tc.SIGNATURES) | set(f"gemv_mma_{kind}" for kind in gemv.FUSED_SIGNATURES) <= set(KERNELS)

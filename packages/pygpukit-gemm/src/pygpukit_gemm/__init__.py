"""Matrix products for PyGPUkit: cuBLASLt and own NVRTC GEMM/GEMV kernels (bf16/fp16/tf32/fp8, quantized).

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. Its ops and models are registered with the core
through the plugin hooks once the op registry exists.
"""

__version__ = "0.1.0"

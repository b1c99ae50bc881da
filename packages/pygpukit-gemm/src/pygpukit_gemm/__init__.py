"""Matrix products for PyGPUkit: cuBLASLt and own NVRTC GEMM/GEMV kernels (bf16/fp16/tf32/fp8, quantized).

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only and registers its implementations through the entry
point ``gemm = pygpukit_gemm.plugin``: once installed, ``gp.matmul``, ``@`` and
``gp.linear`` use them where they apply (see ``pygpukit ops``).
"""

__version__ = "0.1.0"

from .quant import QuantizedWeight, dequantize_weight, quantize_weight

__all__ = ["QuantizedWeight", "dequantize_weight", "quantize_weight"]

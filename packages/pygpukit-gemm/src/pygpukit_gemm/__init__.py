"""Matrix products for PyGPUkit: cuBLASLt and own NVRTC GEMM/GEMV kernels (bf16/fp16/tf32/fp8, quantized).

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only and registers its implementations through the entry
point ``gemm = pygpukit_gemm.plugin``: once installed, ``gp.matmul``, ``@`` and
``gp.linear`` use them where they apply (see ``pygpukit ops``).
"""

__version__ = "0.1.0"

from .fp8 import Fp8Tensor, dequantize_fp8, quantize_fp8
from .quant import QuantizedWeight, dequantize_weight, quantize_weight

__all__ = ["Fp8Tensor", "QuantizedWeight", "dequantize_fp8", "dequantize_weight", "quantize_fp8", "quantize_weight"]

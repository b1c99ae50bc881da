"""pygpukit-gemm's suites of ``python -m pygpukit.benchmark`` (registered in
plugin.py, imported when they run): matmul (matmul.py: cuBLASLt and the
registry's picks, fp8, decode GEMV) and own_gemm (own_gemm.py: the own
tensor-core kernel and the grouped products); _common.py holds what they share."""

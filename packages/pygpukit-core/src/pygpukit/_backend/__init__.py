"""Backend implementations of the array primitives: ``cuda`` (NVRTC kernels on the
current stream) and ``cpu`` (NumPy over pool-allocated host memory). Both
expose the same methods; GPUArray reaches them through ``_runtime.get().ops``."""

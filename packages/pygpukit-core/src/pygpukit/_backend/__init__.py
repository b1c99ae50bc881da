"""Backend implementations of the array primitives: ``cuda`` (NVRTC kernels, one
module per kernel family) and ``cpu`` (NumPy over pool-allocated host memory),
with what both share beside them (``fill``, ``random``, ``sort``). Both expose
the same methods; front ends reach them through ``_runtime.get().ops``,
passing the output arrays they allocated and the stream to run on.

Imports run one way: front ends import the backend, never the reverse; a
backend sees arrays only through their attributes.
"""

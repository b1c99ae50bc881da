"""Neural-network ops for PyGPUkit: norms, activations, RoPE, attention, KV cache, sampling, MoE.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. Its ops and models are registered with the core
through the plugin hooks once the op registry exists.
"""

__version__ = "0.1.0"

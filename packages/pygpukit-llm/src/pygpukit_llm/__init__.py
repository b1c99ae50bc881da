"""LLM inference for PyGPUkit from SafeTensors checkpoints.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. Its ops and models are registered with the core
through the plugin hooks once the op registry exists.
"""

__version__ = "0.1.0"

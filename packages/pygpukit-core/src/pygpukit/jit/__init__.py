"""Run-time compilation: NVRTC loading, the disk cache, modules and ``gp.jit``."""

from .cache import Binary, cache_dir
from .compiler import choose_target, compile_source
from .kernel import JitKernel, jit

__all__ = ["Binary", "JitKernel", "cache_dir", "choose_target", "compile_source", "jit"]

"""LLM inference for PyGPUkit from SafeTensors checkpoints.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core only. So far: reading SafeTensors checkpoints (single or
sharded, memory-mapped, validated) and config.json, and estimating a model's
memory before loading it.
"""

from .config import ARCHITECTURES, ConfigError, MemoryEstimate, ModelConfig, estimate
from .model import CausalLM, DecoderLayer, LoadError, load
from .safetensors import Checkpoint, SafetensorsError, SafeTensorsFile, TensorInfo
from .spec import SPECS, ModelSpec

__version__ = "0.1.0"

__all__ = [
    "ARCHITECTURES",
    "SPECS",
    "CausalLM",
    "Checkpoint",
    "ConfigError",
    "DecoderLayer",
    "LoadError",
    "MemoryEstimate",
    "ModelConfig",
    "ModelSpec",
    "SafeTensorsFile",
    "SafetensorsError",
    "TensorInfo",
    "estimate",
    "load",
]

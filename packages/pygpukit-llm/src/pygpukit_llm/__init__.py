"""LLM inference for PyGPUkit from SafeTensors checkpoints.

A separately installed plugin package of PyGPUkit; it depends on
pygpukit-core, pygpukit-nn, pygpukit-gemm, tokenizers and jinja2. So far:
reading SafeTensors checkpoints (single or sharded, memory-mapped,
validated) and config.json, estimating a model's memory before loading it,
and the text side: tokenizer.json with its special tokens and stop ids,
chat templates, streaming detokenizing, stop strings and ``<think>`` blocks.
"""

from .chat import ChatTemplateError
from .config import ARCHITECTURES, ConfigError, MemoryEstimate, ModelConfig, estimate
from .model import CausalLM, DecoderLayer, LoadError, load
from .safetensors import Checkpoint, SafetensorsError, SafeTensorsFile, TensorInfo
from .spec import SPECS, ModelSpec
from .streaming import StopStrings, StreamDecoder
from .thinking import ThinkingStream, split_thinking
from .tokenizer import Tokenizer, TokenizerError

__version__ = "0.1.0"

__all__ = [
    "ARCHITECTURES",
    "SPECS",
    "CausalLM",
    "ChatTemplateError",
    "Checkpoint",
    "ConfigError",
    "DecoderLayer",
    "LoadError",
    "MemoryEstimate",
    "ModelConfig",
    "ModelSpec",
    "SafeTensorsFile",
    "SafetensorsError",
    "StopStrings",
    "StreamDecoder",
    "TensorInfo",
    "ThinkingStream",
    "Tokenizer",
    "TokenizerError",
    "estimate",
    "load",
    "split_thinking",
]

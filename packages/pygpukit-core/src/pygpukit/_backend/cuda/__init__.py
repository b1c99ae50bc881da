"""The CUDA backend: built-in NVRTC kernels launched on the stream the caller gives.

One module per kernel family (elementwise, reduce, indexing, random, softmax,
sort), each with its kernel name expressions, launch plans and the list of
instantiations the compile check builds. Every op writes into output arrays
the front end allocated (``GPUArray._empty``) on the stream it chose
(``streams.current_stream_handle``). Nothing here synchronizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .indexing import IndexingOps
from .random import RandomOps
from .reduce import ReduceOps
from .softmax import SoftmaxOps
from .sort import SortOps


class CudaOps(SoftmaxOps, ReduceOps, IndexingOps, RandomOps, SortOps):
    name = "cuda"

    def from_host(self, dst: Any, src: np.ndarray, stream: int) -> None:
        self.native.memcpy_htod(dst._ptr, src, stream)

    def to_host(self, out: np.ndarray, src: Any, stream: int) -> None:
        self.native.memcpy_dtoh(out, src._ptr, stream)

"""TritonArray: what Triton reads from a tensor argument (data_ptr(), a dtype
whose string ends in Triton's type name), the torch-like metadata, and the
in-place methods the autotuner's reset/restore hooks call. No Triton needed."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ext
from pygpukit_triton import TritonArray

# Triton 3.6 maps str(dtype).split(".")[-1] through its type table; these are its names
TRITON_NAMES = {
    np.float16: "float16", gp.bfloat16: "bfloat16", np.float32: "float32", np.float64: "float64", np.int8: "int8",
    np.int32: "int32", np.int64: "int64", np.uint8: "uint8", np.bool_: "bool", gp.float8_e4m3fn: "float8_e4m3fn",
    gp.float8_e5m2: "float8_e5m2",
}  # fmt: skip


def test_what_triton_reads(rng):
    base = gp.from_numpy(rng.standard_normal((6, 10)).astype(np.float32))
    view = base[1:, 2:]
    t = TritonArray(view)
    assert t.data_ptr() == view.data_ptr == base.data_ptr + (10 + 2) * 4
    for dt, name in TRITON_NAMES.items():
        assert str(TritonArray(gp.zeros((2,), dt)).dtype).split(".")[-1] == name


def test_torch_like_metadata(rng):
    a = gp.from_numpy(rng.standard_normal((4, 6)).astype(np.float16)).T
    t = TritonArray(a)
    assert t.shape == (6, 4) and t.size() == (6, 4) and t.size(1) == 4
    assert t.stride() == (1, 6) and t.stride(0) == 1
    assert t.numel() == 24 and t.dim() == 2 and t.element_size() == 2
    assert not t.is_contiguous() and TritonArray(a.copy()).is_contiguous()
    assert t.device == ("cpu" if gp.backend() == "cpu" else f"cuda:{ext.device().ordinal}")
    assert "shape=(6, 4)" in repr(t)


def test_reset_and_restore_hooks_work_in_place(rng):
    host = rng.standard_normal(16).astype(np.float32)
    a = gp.from_numpy(host)
    t = TritonArray(a)
    saved = t.clone()
    assert saved.data_ptr() != t.data_ptr()
    assert t.zero_() is t and not a.to_numpy().any()
    assert t.copy_(saved) is t
    assert np.array_equal(a.to_numpy(), host)
    assert t.copy_(t) is t and np.array_equal(a.to_numpy(), host)  # itself: nothing to do


def test_only_gpuarrays_are_wrapped():
    with pytest.raises(TypeError, match="wraps a pygpukit GPUArray, got ndarray"):
        TritonArray(np.zeros(3))

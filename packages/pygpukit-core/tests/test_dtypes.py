import numpy as np
import pytest

import pygpukit as gp
from pygpukit import _dtypes


def test_numpy_rules_for_numpy_dtypes():
    assert gp.result_type(gp.int32, gp.float32) == np.float64
    assert gp.result_type(gp.uint8, gp.int8) == np.int16
    assert gp.result_type(gp.float16, gp.float32) == np.float32
    assert gp.result_type(gp.bool_, gp.bool_) == np.bool_


def test_weak_python_scalars():
    assert gp.result_type(gp.float16, 2.5) == np.float16
    assert gp.result_type(gp.int8, 3) == np.int8
    assert gp.result_type(gp.int32, 2.5) == np.float64
    assert gp.result_type(gp.bfloat16, 2.5) == gp.bfloat16
    assert gp.result_type(gp.bool_, 1) == np.int64
    with pytest.raises(OverflowError, match="out of bounds for int8"):
        gp.result_type(gp.int8, 300)


def test_ml_dtypes_promotion():
    assert gp.result_type(gp.bfloat16, gp.float32) == np.float32
    assert gp.result_type(gp.bfloat16, gp.float16) == np.float32
    assert gp.result_type(gp.bfloat16, gp.int32) == gp.bfloat16
    assert gp.result_type(gp.float8_e4m3fn, gp.float8_e5m2) == np.float32
    assert gp.result_type(gp.float8_e4m3fn, gp.bfloat16) == gp.bfloat16


def test_as_dtype_errors():
    with pytest.raises(TypeError, match="not supported"):
        _dtypes.as_dtype(np.clongdouble)
    with pytest.raises(TypeError, match="not understood"):
        _dtypes.as_dtype("nonsense-dtype")
    with pytest.raises(TypeError, match="big-endian"):
        _dtypes.as_dtype(">f4")
    assert _dtypes.as_dtype("bfloat16") == gp.bfloat16


def test_sum_dtype():
    assert _dtypes.sum_dtype(gp.int8) == np.int64
    assert _dtypes.sum_dtype(gp.bool_) == np.int64
    assert _dtypes.sum_dtype(gp.uint8) == np.uint64
    assert _dtypes.sum_dtype(gp.bfloat16) == gp.bfloat16


def test_scalar_types_are_dtypes_not_arrays():
    # np.float32 (a class) has a `dtype` attribute too: it must be read as a dtype
    assert gp.result_type(np.bool_, np.float32) == np.float32
    assert gp.result_type(np.int8, np.uint8) == np.int16

import pytest

from pygpukit._units import format_bytes, parse_bytes


@pytest.mark.parametrize(
    "text,expected",
    [("40GiB", 40 * 2**30), ("512MB", 512 * 10**6), ("1.5 KiB", 1536), (1048576, 1048576), ("12", 12)],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["", "ten", "5 parsecs", "-5GiB"])
def test_parse_bytes_rejects(bad):
    with pytest.raises(ValueError, match="cannot parse byte size"):
        parse_bytes(bad)


def test_parse_bytes_negative_and_bool():
    with pytest.raises(ValueError, match="negative"):
        parse_bytes(-1)
    with pytest.raises(TypeError):
        parse_bytes(True)


def test_format_bytes():
    assert format_bytes(100) == "100 B"
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(3 * 2**30) == "3.00 GiB"
    assert format_bytes(5 * 2**40) == "5.00 TiB"


def test_kernel_parameter_buffers_end_with_the_parameters():
    # cuLaunchKernel rejects a buffer longer than the kernel's parameters, so the
    # Params<T> of a unary kernel must not be padded unless a Layout follows.
    import numpy as np

    from pygpukit._backend.cuda.launch import params_struct as _params_struct

    for dt, size in ((np.float32, 36), (np.int8, 27), (np.uint16, 30), (np.float64, 48)):
        assert _params_struct("@PPq", np.dtype(dt), False).size == size
        assert _params_struct("@PPq", np.dtype(dt), True).size == -(-size // 8) * 8


def test_memory_gives_the_byte_helpers_publicly():
    import pygpukit as gp

    assert gp.memory.format_bytes(3 * 1024**3 // 2) == "1.50 GiB" and gp.memory.format_bytes(512) == "512 B"
    assert gp.memory.parse_bytes("20GiB") == 20 * 1024**3

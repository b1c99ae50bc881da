"""Where run-time NVIDIA libraries are looked for (pygpukit._nvlibs): the
environment variable's file first, then the files of the nvidia-* wheels
that exist, then the system loader's sonames."""

import sys
import types

import pytest

from pygpukit import _nvlibs
from pygpukit.jit import nvrtc


def test_candidates_in_search_order(tmp_path, monkeypatch):
    for root in (tmp_path / "a", tmp_path / "b"):
        (root / "cu13" / "lib").mkdir(parents=True)
    (tmp_path / "a" / "cu13" / "lib" / "libfoo.so.13").write_bytes(b"")
    (tmp_path / "b" / "foo" / "lib").mkdir(parents=True)
    (tmp_path / "b" / "foo" / "lib" / "libfoo.so.12").write_bytes(b"")
    fake = types.ModuleType("nvidia")
    fake.__path__ = [str(tmp_path / "a"), str(tmp_path / "b")]
    monkeypatch.setitem(sys.modules, "nvidia", fake)
    monkeypatch.setenv("MY_FOO_PATH", "/opt/libfoo.so")
    wheels = (("cu13", "lib", "libfoo.so.13"), ("foo", "lib", "libfoo.so.12"))
    got = _nvlibs.candidates("MY_FOO_PATH", wheels, ("libfoo.so.13", "libfoo.so"))
    assert got == [
        ("/opt/libfoo.so", "env"),
        (str(tmp_path / "a" / "cu13" / "lib" / "libfoo.so.13"), "wheel"),
        (str(tmp_path / "b" / "foo" / "lib" / "libfoo.so.12"), "wheel"),
        ("libfoo.so.13", "system"),
        ("libfoo.so", "system"),
    ]
    monkeypatch.delenv("MY_FOO_PATH")
    assert _nvlibs.candidates("MY_FOO_PATH", (), ("libfoo.so",)) == [("libfoo.so", "system")]


def test_without_nvidia_wheels_only_the_system_is_searched(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvidia", None)  # import nvidia raises ImportError
    monkeypatch.delenv("PYGPUKIT_NVRTC_PATH", raising=False)
    assert _nvlibs.wheel_paths((("cu13", "lib", "libnvrtc.so.13"),)) == []
    assert nvrtc.candidates() == [(s, "system") for s in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")]


def test_load_first_takes_the_first_that_loads_and_lists_every_failure():
    import ctypes.util

    libc = ctypes.util.find_library("c") or "libc.so.6"
    dll, name = _nvlibs.load_first(["/nonexistent/libfoo.so", libc, "/nonexistent/libbar.so"])
    assert name == libc and dll.strlen(b"abc") == 3
    with pytest.raises(OSError, match=r"^tried /nonexistent/a\.so: .*; /nonexistent/b\.so: "):
        _nvlibs.load_first(["/nonexistent/a.so", "/nonexistent/b.so"])

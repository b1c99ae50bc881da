"""PYGPUKIT_* variables parsed one way: a bad value is an error naming the
variable, never a silent default (subprocesses where the value is read once
per process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pygpukit as gp
from pygpukit import _env


def run(code, **env):
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("value", "want"), [("1", True), ("TRUE", True), (" yes ", True), ("on", True), ("0", False), ("off", False),
                                             ("No", False), ("", None), (None, None)])  # fmt: skip
def test_flag(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("PYGPUKIT_TEST_FLAG", raising=False)
    else:
        monkeypatch.setenv("PYGPUKIT_TEST_FLAG", value)
    assert _env.flag("PYGPUKIT_TEST_FLAG", default=True) is (True if want is None else want)
    assert _env.flag("PYGPUKIT_TEST_FLAG", default=False) is (False if want is None else want)


def test_bad_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("PYGPUKIT_TEST_X", "maybe")
    with pytest.raises(gp.EnvironmentVariableError, match=r"environment variable PYGPUKIT_TEST_X='maybe': expected 1/0, true/false"):
        _env.flag("PYGPUKIT_TEST_X", False)
    with pytest.raises(gp.EnvironmentVariableError, match=r"PYGPUKIT_TEST_X='maybe': expected one of auto, cpu, cuda"):
        _env.choice("PYGPUKIT_TEST_X", ("auto", "cpu", "cuda"), "auto")
    with pytest.raises(gp.EnvironmentVariableError, match=r"PYGPUKIT_TEST_X='maybe': expected an integer >= 0"):
        _env.integer("PYGPUKIT_TEST_X", 0)
    with pytest.raises(gp.EnvironmentVariableError, match=r"PYGPUKIT_TEST_X='maybe': expected a byte size"):
        _env.nbytes("PYGPUKIT_TEST_X")
    monkeypatch.setenv("PYGPUKIT_TEST_X", "-1")
    with pytest.raises(gp.EnvironmentVariableError, match=r"expected an integer >= 0"):
        _env.integer("PYGPUKIT_TEST_X", 0)
    monkeypatch.setenv("PYGPUKIT_TEST_X", " CPU ")
    assert _env.choice("PYGPUKIT_TEST_X", ("auto", "cpu"), "auto") == "cpu"
    monkeypatch.setenv("PYGPUKIT_TEST_X", "2GiB")
    assert _env.nbytes("PYGPUKIT_TEST_X") == 2 << 30 and _env.integer("PYGPUKIT_TEST_Y_UNSET", 7) == 7
    assert issubclass(gp.EnvironmentVariableError, gp.PyGPUkitError) and issubclass(gp.EnvironmentVariableError, ValueError)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PYGPUKIT_BACKEND": "gpu"}, "PYGPUKIT_BACKEND='gpu': expected one of auto, cpu, cuda"),
        ({"PYGPUKIT_BACKEND": "cpu", "PYGPUKIT_MEMORY_LIMIT": "lots"}, "PYGPUKIT_MEMORY_LIMIT='lots': expected a byte size"),
        ({"PYGPUKIT_ALLOW_TF32": "sure"}, "PYGPUKIT_ALLOW_TF32='sure': expected 1/0"),
    ],
)
def test_a_bad_variable_stops_the_program_with_its_name(env, message):
    out = run("import pygpukit as gp; gp.zeros(3)", **env)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert "EnvironmentVariableError" in out.stderr


def test_backend_cuda_refuses_to_fall_back():
    if gp.backend() == "cuda":
        out = run("import pygpukit as gp; print(gp.backend())", PYGPUKIT_BACKEND="cuda")
        assert out.returncode == 0 and out.stdout.strip() == "cuda"
        return
    out = run("import pygpukit as gp; gp.zeros(3)", PYGPUKIT_BACKEND="cuda")
    assert out.returncode != 0 and "PYGPUKIT_BACKEND=cuda, but CUDA is not usable here" in out.stderr, out.stderr


def test_unknown_plugin_names_to_disable_are_reported():
    out = run(
        "import warnings; warnings.simplefilter('always'); import pygpukit as gp; gp.ops.names()", PYGPUKIT_DISABLE_PLUGINS="no-such-plugin"
    )
    assert out.returncode == 0 and "PYGPUKIT_DISABLE_PLUGINS names no installed plugin: no-such-plugin" in out.stderr, out.stderr


def test_an_unwritable_run_dir_is_reported_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = "import time, pygpukit as gp\nwith gp.scheduler.task('t'):\n    gp.zeros(3)\ntime.sleep(2.5)"
    out = run(code, PYGPUKIT_RUN_DIR=str(blocker / "sub"), PYGPUKIT_BACKEND="cpu")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("cannot publish the scheduler snapshot for pygpukit top") == 1 and "PYGPUKIT_RUN_DIR" in out.stderr

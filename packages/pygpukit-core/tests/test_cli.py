"""gp.info(), pygpukit doctor / info / demo."""

import json
import os
import subprocess
import sys

import pytest

import pygpukit as gp
from pygpukit import doctor
from pygpukit.cli import main


def test_info_reports_backend_and_cache(capsys):
    i = gp.info()
    assert i.backend == gp.backend()
    text = str(i)
    assert "backend" in text and i.cache_dir in text
    if i.backend == "cpu":
        assert i.fallback_reason
        assert "fallback reason" in text
    else:
        assert i.device_name and i.sm and i.total_memory > 0 and i.driver_version
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["backend"] == i.backend and data["version"] == gp.__version__


def test_fallback_is_logged_once_with_reason():
    code = "import pygpukit as gp; gp.zeros(3); gp.ones(2); print(gp.backend())"
    env = dict(os.environ, PYGPUKIT_BACKEND="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "cpu"
    assert out.stderr.count("Falling back to CPU simulation backend") == 1
    assert "PYGPUKIT_BACKEND=cpu" in out.stderr


def test_import_is_lazy():
    code = "import sys, pygpukit; print('pygpukit._native' in sys.modules, 'pygpukit._rt' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_doctor_runs_and_reports(capsys):
    code = doctor.main()
    out = capsys.readouterr().out
    assert "pygpukit._rt" in out
    checks = doctor.run_checks()
    assert code == (1 if any(c.status == doctor.FAIL for c in checks) else 0)


def test_doctor_finds_duplicate_native_modules(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d / "pygpukit").mkdir(parents=True)
        (tmp_path / d / "pygpukit" / "_native.cpython-311-x86_64-linux-gnu.so").write_bytes(b"x")
    found = doctor.native_copies([str(tmp_path / "a"), str(tmp_path / "b")])
    assert len(found["_native"]) == 2 and found["_rt"] == []


def test_doctor_reads_loaded_nvrtc_libraries(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f0-7f1 r-xp 0 08:01 1 /opt/a/libnvrtc.so.13\n"
        "7f1-7f2 r-xp 0 08:01 1 /opt/a/libnvrtc.so.13\n"
        "7f2-7f3 r-xp 0 08:01 2 /usr/lib/libnvrtc.so.12\n"
        "7f3-7f4 rw-p 0 00:00 0\n"
    )
    assert doctor.loaded_nvrtc_libraries(str(maps)) == ["/opt/a/libnvrtc.so.13", "/usr/lib/libnvrtc.so.12"]


def test_doctor_driver_vs_nvrtc():
    assert doctor.driver_vs_nvrtc(13000, (13, 0), 90, (80, 90)).status == doctor.OK
    newer = doctor.driver_vs_nvrtc(12040, (13, 5), 90, (75, 80, 90))
    assert newer.status == doctor.OK and "CUBIN" in newer.detail
    bad = doctor.driver_vs_nvrtc(12040, (13, 5), 120, (75, 80, 90))
    assert bad.status == doctor.FAIL and "nvidia-cuda-nvrtc==12.*" in bad.fix


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "a * 2 + arange(5)" in out and "max abs error" in out and "num_driver_allocs" in out


def test_plugin_commands_run_with_their_arguments(capsys):
    import pygpukit.cli as cli
    from pygpukit.plugins import hookimpl

    calls = []

    class HelloPlugin:
        @hookimpl
        def pygpukit_register_commands(self, registry):
            registry.register("hello", lambda argv: calls.append(argv) or 3, description="says hello")

    gp.plugins.register(HelloPlugin(), name="hellocmd")
    try:
        assert cli.main(["hello", "--flag", "x"]) == 3 and calls == [["--flag", "x"]]
        with pytest.raises(SystemExit):
            cli.main(["--help"])
        assert "says hello (from plugin hellocmd" in capsys.readouterr().out
        assert cli.main(["info", "--json"]) == 0 and calls == [["--flag", "x"]]
    finally:
        gp.plugins.disable("hellocmd")
    with pytest.raises(SystemExit):
        cli.main(["hello"])  # gone with its plugin


def test_a_plugin_cannot_take_a_builtin_command_name():
    from pygpukit.plugins import hookimpl

    class Shadow:
        @hookimpl
        def pygpukit_register_commands(self, registry):
            registry.register("info", lambda argv: 0)

    with pytest.warns(gp.plugins.PluginWarning, match="core's own"):
        state = gp.plugins.register(Shadow(), name="shadowcmd")
        gp.plugins.plugins()
    assert state.status.startswith("failed")

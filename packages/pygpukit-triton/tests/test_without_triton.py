"""pygpukit and pygpukit_triton without Triton installed: importing and loading
the plugin work, using Triton raises TritonNotInstalledError naming what to
install, the registry lists the Triton implementations as not runnable here,
and the rest of pygpukit keeps working. Without pygpukit-nn (an optional
dependency) the plugin registers Triton's implementations of core's ops
only. Run in subprocesses whose path hides Triton or pygpukit-nn when they
are installed here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from triton_testing import path_without

SCRIPT = textwrap.dedent(
    """
    import importlib.util, sys
    assert importlib.util.find_spec("triton") is None, "triton is still importable"
    import numpy as np
    import pygpukit as gp
    import pygpukit_triton as pt
    from pygpukit_triton import ops, plugin

    assert not pt.available()
    x = gp.from_numpy(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
    for call in (lambda: pt.launch(object(), (1,)), lambda: pt.tensor(x), lambda: ops.rms_norm(x, None, 1e-6)):
        try:
            call()
        except pt.TritonNotInstalledError as e:
            assert "pip install triton" in str(e), str(e)
            assert isinstance(e, ImportError) and isinstance(e, gp.PyGPUkitError)
        else:
            raise AssertionError("no TritonNotInstalledError")
    if "triton" not in {p.name for p in gp.plugins.plugins() if p.status == "active"}:
        gp.plugins.register(plugin, name="triton")
    rows = [r for r in gp.ops.table() if r.backend == "triton"]
    assert {r.op for r in rows} >= {"rms_norm", "softmax", "matmul", "sdpa", "rope", "swiglu"}, rows
    assert all(r.status.startswith("not here") for r in rows), rows
    assert any("triton" in r.status or "CUDA GPU" in r.status for r in rows)
    try:
        gp.route("rms_norm", "triton")
    except gp.RouteError as e:
        assert "cannot route 'rms_norm' to 'triton' here" in str(e)
    else:
        raise AssertionError("routing to triton without triton succeeded")
    ref = x.to_numpy().astype(np.float64)
    y = gp.nn.rms_norm(x, None, 1e-6).to_numpy()
    assert np.allclose(y, ref / np.sqrt((ref**2).mean(-1, keepdims=True) + 1e-6), rtol=1e-5, atol=1e-6)
    assert np.allclose(gp.softmax(x).to_numpy().sum(-1), 1, rtol=1e-5)
    assert "triton" not in sys.modules
    print("OK")
    """
)


def test_pygpukit_works_and_triton_use_names_the_install(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path_without(tmp_path, "triton")))
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, "-S", "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-3000:] + run.stderr[-3000:]


def test_importing_the_package_and_plugin_does_not_import_triton():
    code = (
        "import sys, pygpukit as gp, pygpukit_triton, pygpukit_triton.plugin, pygpukit_triton.ops\n"
        "gp.ops.table()\n"
        "assert 'triton' not in sys.modules, 'triton was imported'\n"
        "print('OK')"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "OK" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


WITHOUT_NN = textwrap.dedent(
    """
    import importlib.util, sys
    assert importlib.util.find_spec("pygpukit_nn") is None, "pygpukit_nn is still importable"
    import pygpukit as gp
    from pygpukit_triton import plugin

    if "triton" not in {p.name for p in gp.plugins.plugins() if p.status == "active"}:
        gp.plugins.register(plugin, name="triton")
    rows = [r for r in gp.ops.table() if r.backend == "triton"]
    assert {r.op for r in rows} == {"softmax", "matmul", "linear"}, rows
    (state,) = [p for p in gp.plugins.plugins() if p.name == "triton"]
    assert "not registered (pygpukit-nn is not installed): rms_norm" in state.info.description, state.info
    assert "pygpukit_nn" not in sys.modules
    print("OK")
    """
)


def test_without_nn_only_cores_ops_are_registered(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path_without(tmp_path, "pygpukit_nn")))
    run = subprocess.run([sys.executable, "-S", "-c", WITHOUT_NN], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-3000:] + run.stderr[-3000:]

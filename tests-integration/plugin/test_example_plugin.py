"""The example plugin (tests-integration/example-plugin), built and installed as
a wheel by `nox -s tests` before this directory runs (the rest of the suite
runs without it): discovered through its entry point, listed, dispatched to,
routed around, and disabled."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import pygpukit as gp


@pytest.fixture
def example():
    import pygpukit_example

    yield pygpukit_example
    gp.plugins.enable("example")
    gp.route("softmax", None)


def _x(dtype, shape=(3, 5)):
    return np.random.default_rng(1).standard_normal(shape).astype(dtype)


def test_discovered_through_its_entry_point(example):
    state = next(p for p in gp.plugins.plugins() if p.name == "example")
    assert state.status == "active"
    assert state.source.startswith("entry point example = pygpukit_example (pygpukit-example-plugin 0.3.0)")
    assert state.info == gp.plugins.PluginInfo("pygpukit-example-plugin", "0.3.0", "axpy, a float64 softmax, an affine model")


def test_new_op_dispatches(example):
    x, y = _x(np.float32), _x(np.float32)
    got = gp.ops.axpy(gp.from_numpy(x), gp.from_numpy(y), 3.0)
    np.testing.assert_allclose(got.to_numpy(), 3.0 * x.astype(np.float64) + y, rtol=1e-6)
    with pytest.raises(gp.RouteError, match=r"axpy has no implementation for \(int32, int32\)"):
        gp.ops.axpy(gp.from_numpy(x.astype(np.int32)), gp.from_numpy(y.astype(np.int32)))


def test_override_wins_for_its_dtype_only(example):
    x64 = _x(np.float64)
    before = example.calls["softmax"]
    got = gp.softmax(gp.from_numpy(x64), axis=1)
    assert example.calls["softmax"] == before + 1
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    np.testing.assert_allclose(got.to_numpy(), ref / ref.sum(1, keepdims=True), rtol=1e-12)
    gp.softmax(gp.from_numpy(_x(np.float32)))
    got = gp.softmax(gp.from_numpy(x64), axis=(0, 1))  # the predicate declines a tuple of axes
    assert example.calls["softmax"] == before + 1  # float32 and tuple axes stay with core
    np.testing.assert_allclose(got.to_numpy().sum(), 1.0, rtol=1e-12)


def test_listed_in_the_table_and_cli(example):
    status = {(r.op, r.impl, r.backend): r.status for r in gp.ops.table()}
    here = gp.backend()
    assert status[("softmax", "example:softmax64", here)] == "runs here when its predicate accepts the arguments"
    assert status[("softmax", "pygpukit:softmax", here)] == "runs here"
    assert status[("axpy", "example:axpy", here)] == "runs here"
    out = subprocess.run([sys.executable, "-m", "pygpukit", "ops", "--json"], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    assert {"op": "axpy", "impl": "example:axpy", "plugin": "example"}.items() <= next(r for r in rows if r["op"] == "axpy").items()
    out = subprocess.run([sys.executable, "-m", "pygpukit", "plugins"], capture_output=True, text=True, check=True).stdout
    assert "example 0.3.0: active" in out


def test_routed_back_to_core(example):
    before = example.calls["softmax"]
    with gp.routing(softmax="pygpukit"):
        gp.softmax(gp.from_numpy(_x(np.float64)))
    assert example.calls["softmax"] == before
    gp.route("softmax", "example")
    gp.softmax(gp.from_numpy(_x(np.float64)))
    assert example.calls["softmax"] == before + 1
    with pytest.raises(gp.RouteError, match=r"routed to 'example'.*no implementation for \(float32\)"):
        gp.softmax(gp.from_numpy(_x(np.float32)))


def test_model_registered(example):
    model = next(m for m in gp.plugins.models() if m.name == "example-affine")
    assert model.plugin == "example"
    f = model.loader(2.0, 1.0)
    np.testing.assert_allclose(f(gp.from_numpy(_x(np.float32))).to_numpy(), _x(np.float32) * 2 + 1, rtol=1e-6)


def test_disabled_at_run_time_and_by_environment(example):
    gp.plugins.disable("example")
    assert "axpy" not in gp.ops.names()
    before = example.calls["softmax"]
    gp.softmax(gp.from_numpy(_x(np.float64)))
    assert example.calls["softmax"] == before  # core again
    code = "import pygpukit as gp; print(sorted(gp.ops.names())); print([(p.name, p.status) for p in gp.plugins.plugins()])"
    env = {**os.environ, "PYGPUKIT_DISABLE_PLUGINS": "example"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout.splitlines()
    assert "axpy" not in out[0]
    assert "('example', 'disabled (PYGPUKIT_DISABLE_PLUGINS)')" in out[1]


def test_env_route(example):
    code = "import pygpukit as gp, numpy as np; import pygpukit_example as e; gp.softmax(gp.from_numpy(np.ones(3))); print(e.calls)"
    env = {**os.environ, "PYGPUKIT_ROUTE": "softmax=pygpukit"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "{'softmax': 0}"
    env["PYGPUKIT_ROUTE"] = "softmax=nowhere"
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stderr
    assert "RouteError: PYGPUKIT_ROUTE: cannot route 'softmax' to 'nowhere'" in err

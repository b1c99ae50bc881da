"""The example plugin (tests-integration/example-plugin), built and installed as
a wheel by `nox -s tests` before this directory runs (the rest of the suite
runs without it): discovered through its entry point, listed, dispatched to,
routed around, and disabled; its model, benchmark suite, command and
namespace; its kernels compile with NVRTC. These run on either backend; the
kernels run in test_example_kernels.py (GPU)."""

import json
import os
import subprocess
import sys
from importlib import metadata, resources
from pathlib import Path

import numpy as np
import pytest

import pygpukit as gp
from gp_testing import require_nvrtc
from pygpukit import ext

REPO = Path(__file__).resolve().parents[2]
OPS = ("scaled_residual_add", "softmax", "log_softmax")
NOT_HERE = "not here: backend 'cuda' needs a CUDA GPU (running on the CPU backend)"


@pytest.fixture
def example():
    import pygpukit_example

    yield pygpukit_example
    gp.plugins.enable("example")
    for op in OPS:
        gp.route(op, None)


def _run(*args, env=None, check=True):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=check, env=env)


def test_discovered_through_its_entry_point(example):
    state = next(p for p in gp.plugins.plugins() if p.name == "example")
    assert state.status == "active"
    assert state.source == "entry point example = pygpukit_example.plugin (pygpukit-example-plugin 0.4.0)"
    assert state.info == gp.plugins.PluginInfo(
        "pygpukit-example-plugin", "0.4.0", "scaled_residual_add, a softmax for row-strided arrays, an affine model"
    )
    assert example.__version__ == metadata.version("pygpukit-example-plugin")


def test_installed_from_its_wheel_with_the_kernels(example):
    assert not Path(example.__file__).resolve().is_relative_to(REPO / "tests-integration"), example.__file__
    kernels = resources.files("pygpukit_example") / "kernels"
    assert sorted(p.name for p in kernels.iterdir() if p.name.endswith(".cu")) == ["scaled_residual_add.cu", "softmax_strided.cu"]


def test_listed_in_the_table_and_cli(example):
    status = {(r.op, r.impl, r.backend): (r.status, r.priority, r.plugin) for r in gp.ops.table()}
    here, gpu = gp.backend(), gp.backend() == "cuda"
    assert status[("scaled_residual_add", "example:reference", here)] == ("runs here", 0, "example")
    assert status[("softmax", "pygpukit:softmax", here)][0] == "runs here"
    for op in OPS:
        want = "runs here when its predicate accepts the arguments" if gpu else NOT_HERE
        assert status[(op, "example:kernel", "cuda")] == (want, 10, "example")
    rows = json.loads(_run("-m", "pygpukit", "ops", "--json").stdout)
    mine = {(r["op"], r["impl"], r["backend"]) for r in rows if r["plugin"] == "example"}
    want_rows = {(op, "example:kernel", "cuda") for op in OPS}
    assert mine == want_rows | {("scaled_residual_add", "example:reference", b) for b in ("cuda", "cpu")}
    assert "example 0.4.0: active" in _run("-m", "pygpukit", "plugins").stdout


def _expected_residual(x, r, alpha):
    x64, r64 = x.astype(np.float64), r.astype(np.float64)
    return r64 + alpha * x64, np.abs(r64) + np.abs(alpha * x64)


# result dtype -> (relative, absolute) error allowed: twice the rounding of the
# result, float32 math for the 16-bit floats, float16's subnormal spacing
TOL = {gp.float16: (2**-10, 2**-24), gp.bfloat16: (2**-7, 0.0), gp.float32: (2**-20, 0.0), gp.float64: (2**-48, 0.0)}


@pytest.mark.parametrize("dtype", list(TOL), ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "every-other-row", "transposed"])
def test_reference_against_float64_numpy(example, rng, dtype, layout):
    """The op's definition, on either backend (routed to the reference), for any layout."""
    wide = {"contiguous": (5, 37), "sliced": (6, 45), "every-other-row": (10, 37), "transposed": (37, 5)}[layout]
    xh, rh = (np.asarray(rng.standard_normal(wide) * 3).astype(dtype) for _ in range(2))
    view = {
        "contiguous": lambda a: a,
        "sliced": lambda a: a[:, 3:40],
        "every-other-row": lambda a: a[::2],
        "transposed": lambda a: a.T,
    }[layout]
    x, r = view(gp.from_numpy(xh)), view(gp.from_numpy(rh))
    alpha = float(rng.uniform(-2, 2))
    with gp.routing(scaled_residual_add="example:reference"):
        got = example.scaled_residual_add(x, r, alpha)
    assert got.dtype == dtype and got.shape == x.shape
    want, scale = _expected_residual(view(xh), view(rh), alpha)
    rel, tiny = TOL[dtype]
    err = np.abs(got.to_numpy().astype(np.float64) - want)
    assert np.all(err <= rel * scale + tiny), err.max()


def test_one_op_three_names(example, rng):
    """The package's function, gp.ops.<op> and the namespace gp.example dispatch alike."""
    xh, rh = rng.standard_normal((4, 9)).astype(np.float32), rng.standard_normal((4, 9)).astype(np.float32)
    x, r = gp.from_numpy(xh), gp.from_numpy(rh)
    want = (rh.astype(np.float64) - 1.5 * xh).astype(np.float32)
    assert gp.example is example
    for fn in (example.scaled_residual_add, gp.ops.scaled_residual_add, gp.example.scaled_residual_add):
        np.testing.assert_allclose(fn(x, r, -1.5).to_numpy(), want, rtol=1e-6, atol=1e-6)
    assert gp.ops.which("scaled_residual_add", x, r, -1.5) == ("example:kernel" if gp.backend() == "cuda" else "example:reference")


def test_bad_arguments_are_named(example):
    i32 = gp.from_numpy(np.arange(6, dtype=np.int32))
    f32 = gp.from_numpy(np.arange(6, dtype=np.float32) + 1)
    with pytest.raises(TypeError, match=r"float arrays of one dtype and shape, got int32 \(6,\) and int32 \(6,\)"):
        example.scaled_residual_add(i32, i32)
    with pytest.raises(TypeError, match=r"got float32 \(6,\) and float32 \(2, 3\)"):
        example.scaled_residual_add(f32, f32.reshape(2, 3))
    with pytest.raises(TypeError, match=r"got float32 \(6,\) and float16 \(6,\)"):
        example.scaled_residual_add(f32, f32.astype(gp.float16))
    with pytest.raises(TypeError, match="alpha must be a real number, got str"):
        example.scaled_residual_add(f32, f32, "2")
    with pytest.raises(TypeError, match="must be GPUArrays, got ndarray and GPUArray"):
        example.scaled_residual_add(np.ones(6, np.float32), f32)


def test_row_layouts():
    """layout.rows_of: (rows, row stride in elements) of the arrays the kernels read in place."""
    from pygpukit_example.layout import rows_of

    a = gp.from_numpy(np.arange(4 * 6 * 10, dtype=np.float32).reshape(4, 6, 10))
    assert rows_of(a) == (24, 10)
    assert rows_of(a[:, :, :7]) == (24, 10)
    assert rows_of(a.reshape(24, 10)[::2]) == (12, 20)
    assert rows_of(a[:, ::2]) == (12, 20)  # blocks of 3 rows 20 apart, 60 apart: even
    assert rows_of(a[::2]) is None  # blocks of 6 rows 10 apart, 120 apart: uneven
    assert rows_of(a[:, :3]) is None  # rows 0-2 of each block: uneven spacing
    assert rows_of(a[:, :, ::2]) is None  # not unit-stride
    assert rows_of(a.transpose(0, 2, 1)) is None
    assert rows_of(a[:, 1:2, 2:9]) == (4, 60)  # a size-1 axis does not count
    assert rows_of(a.reshape(24, 10)[::-1, :5]) == (24, -10) and rows_of(a[:, ::-1]) is None
    assert rows_of(gp.broadcast_to(a[0, 0], (3, 10))) == (3, 0)


def test_predicates_take_only_what_the_kernels_do(example):
    from pygpukit_example import residual, softmax

    a = gp.from_numpy(np.ones((8, 1100), np.float32))
    assert softmax.takes(a[:, :1000]) and softmax.takes(a[::2, :1024], axis=1) and softmax.takes(a[:, 5:6])
    assert not softmax.takes(a)  # contiguous: pygpukit's row kernel reads it once already
    assert not softmax.takes(a[:, :1025])  # longer than a warp holds
    assert not softmax.takes(a[:, :100], axis=0) and not softmax.takes(a[:, :100], axis=(1,)) and not softmax.takes(a[:, ::2])
    assert not softmax.takes(a[:, :100].T, axis=-1)
    x, r = a[:, :100], gp.from_numpy(np.ones((8, 100), np.float32))
    assert residual.kernel_takes(x, r, 2.0) and residual.kernel_takes(r, r) and residual.kernel_takes(x, x, alpha=2)
    assert (
        not residual.kernel_takes(x.T, r.T)
        and not residual.kernel_takes(x, r[:, :99])
        and not residual.kernel_takes(x, r.astype(gp.float16))
    )
    assert not residual.kernel_takes(x[:0], r[:0]) and not residual.kernel_takes(x, r, np.float32(2.0))


def test_routing(example, rng):
    x = gp.from_numpy(rng.standard_normal((4, 40)).astype(np.float32))[:, :33]
    r = gp.from_numpy(rng.standard_normal((4, 33)).astype(np.float32))
    gp.route("scaled_residual_add", "example:reference")
    assert gp.ops.which("scaled_residual_add", x, r, 1.0) == "example:reference"
    with gp.routing(softmax="pygpukit"):
        assert gp.ops.which("softmax", x) == "pygpukit:softmax"
    if gp.backend() == "cuda":
        gp.route("softmax", "example")
        assert gp.ops.which("softmax", x) == "example:kernel"
        with pytest.raises(gp.RouteError, match="no implementation accepts these arguments; tried example:kernel"):
            gp.softmax(x.copy())  # routed to the plugin, which does not take a contiguous array
    else:
        with pytest.raises(
            gp.RouteError, match=r"cannot route 'softmax' to 'example' here \(example:kernel: backend 'cuda' needs a CUDA GPU"
        ):
            gp.route("softmax", "example")
        with pytest.raises(gp.RouteError, match="cannot route 'scaled_residual_add' to 'example:kernel' here"):
            gp.route("scaled_residual_add", "example:kernel")


def test_env_route(example):
    code = (
        "import numpy as np, pygpukit as gp; x = gp.from_numpy(np.ones((2, 3), np.float32));"
        "print(gp.ops.which('scaled_residual_add', x, x, 1.0))"
    )
    env = {**os.environ, "PYGPUKIT_ROUTE": "scaled_residual_add=example:reference"}
    assert _run("-c", code, env=env).stdout.strip() == "example:reference"
    env["PYGPUKIT_ROUTE"] = "scaled_residual_add=nowhere"
    err = _run("-c", code, env=env, check=False).stderr
    assert "RouteError: PYGPUKIT_ROUTE: cannot route 'scaled_residual_add' to 'nowhere'" in err


def test_disabled_at_run_time_and_by_environment(example, rng):
    xh = rng.standard_normal((3, 40)).astype(np.float32)
    x = gp.from_numpy(xh)[:, :30]
    gp.plugins.disable("example")
    assert "scaled_residual_add" not in gp.ops.names()
    assert not any(r.plugin == "example" for r in gp.ops.table())
    assert gp.ops.which("softmax", x) == "pygpukit:softmax"  # pygpukit's own again
    e = np.exp(xh[:, :30] - xh[:, :30].max(1, keepdims=True))
    np.testing.assert_allclose(gp.softmax(x).to_numpy(), e / e.sum(1, keepdims=True), rtol=1e-5)
    gp.plugins.enable("example")
    assert "scaled_residual_add" in gp.ops.names()
    code = "import pygpukit as gp; print(sorted(gp.ops.names())); print([(p.name, p.status) for p in gp.plugins.plugins()])"
    env = {**os.environ, "PYGPUKIT_DISABLE_PLUGINS": "example"}
    out = _run("-c", code, env=env).stdout.splitlines()
    assert "scaled_residual_add" not in out[0]
    assert "('example', 'disabled (PYGPUKIT_DISABLE_PLUGINS)')" in out[1]


def test_model_registered(example, rng):
    model = next(m for m in gp.plugins.models() if m.name == "example-affine")
    assert model.plugin == "example"
    xh = rng.standard_normal(7).astype(np.float32)
    np.testing.assert_allclose(model.loader(2.0, 1.0)(gp.from_numpy(xh)).to_numpy(), xh * 2 + 1, rtol=1e-6)


def test_command(example):
    out = _run("-m", "pygpukit", "example", "--dtype", "bfloat16", "--rows", "5", "--cols", "33").stdout
    lines = out.splitlines()
    assert lines[0].endswith("bfloat16 5x33 (row stride 57)")
    assert [line.split()[0] for line in lines[1:]] == ["scaled_residual_add", "softmax", "log_softmax"]
    assert all(line.endswith(" ok") for line in lines[1:]), out
    assert "example" in _run("-m", "pygpukit", "--help").stdout


def test_benchmark_suite(example, tmp_path):
    path = tmp_path / "bench.json"
    _run("-m", "pygpukit.benchmark", "--only", "example", "--quick", "--json", str(path))
    records = json.loads(path.read_text())
    measured = {(r["bench"].rsplit("_", 1)[0], r["impl"]) for r in records}  # without the size
    for dt in ("float32", "bfloat16"):
        assert (f"scaled_residual_add_{dt}", "reference") in measured
        assert (f"softmax_strided_{dt}", "pygpukit") in measured
        if gp.backend() == "cuda":
            assert {(f"scaled_residual_add_{dt}", "example"), (f"softmax_strided_{dt}", "example")} <= measured
    assert all(r["metric"] == "GB/s" and r["value"] > 0 for r in records)


@pytest.mark.parametrize("sm", [80, 90])
def test_kernels_compile(tmp_path, monkeypatch, sm):
    """Every instantiation the plugin may launch compiles with NVRTC (no GPU needed)."""
    require_nvrtc()
    from pygpukit_example import residual, softmax

    monkeypatch.setenv("PYGPUKIT_CACHE_DIR", str(tmp_path))
    for module in (residual, softmax):
        for expr in module.instantiations():
            kernel = ext.Kernel(module.SOURCE, expr)
            assert kernel.params[0].pointer and kernel.params[1].pointer
            binary = kernel.compile(sm=sm)
            assert binary.kind == "cubin" and binary.image[:4] == b"\x7fELF", expr

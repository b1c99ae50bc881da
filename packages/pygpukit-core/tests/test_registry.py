"""The op registry: selection by backend, dtypes, SM, priority and predicate;
routes and their errors; the dispatch cache; plugins registered explicitly
(discovery of installed plugins is tested in tests-integration)."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import _runtime
from pygpukit.plugins import hookimpl
from pygpukit.registry import REGISTRY, OpRegistry

HERE = _runtime.get().backend  # "cuda" or "cpu": the backend whose implementations run
OTHER = "cpu" if HERE == "cuda" else "cuda"


def _arr(dtype=np.float32, n=4):
    return gp.from_numpy(np.arange(n).astype(dtype))


def _tagged(tag):
    def fn(*args, **kwargs):
        return tag

    fn.__name__ = tag
    return fn


@pytest.fixture
def reg():
    return OpRegistry(load_plugins=False)


def test_priority_then_registration_order(reg):
    op = reg.define("thing", nkey=1)
    reg.register("thing", _tagged("core"), backend=HERE)
    reg.register("thing", _tagged("same_priority_later"), backend=HERE, plugin="p")
    assert op(_arr()) == "core"  # a tie goes to the earlier registration
    reg.register("thing", _tagged("higher"), backend=HERE, priority=5, plugin="p")
    assert op(_arr()) == "higher"  # registering cleared the cached choice


def test_dtypes_backend_and_sm_filter(reg):
    op = reg.define("thing", nkey=2)
    reg.register("thing", _tagged("any"), backend=HERE)
    reg.register("thing", _tagged("bf16"), backend=HERE, dtypes=[gp.bfloat16], priority=3, plugin="p")
    reg.register("thing", _tagged("elsewhere"), backend=OTHER, priority=9, plugin="p")
    reg.register("thing", _tagged("future_gpu"), backend="cuda", min_sm=999, priority=9, plugin="p")
    a, b = _arr(gp.bfloat16), _arr(np.float32)
    assert op(a, a) == "bf16"
    assert op(a, b) == "any"  # bf16 takes only (bf16, bf16)
    assert op(b, b) == "any"


def test_which_names_the_entry_when_one_function_serves_several(reg):
    reg.define("thing", nkey=1)
    fn = _tagged("shared")
    reg.register("thing", fn, backend=HERE, dtypes=[np.float32], name="f32", plugin="p")
    reg.register("thing", fn, backend=HERE, dtypes=[gp.bfloat16], name="bf16", plugin="p")
    assert reg.which("thing", _arr(np.float32)) == "p:f32" and reg.which("thing", _arr(gp.bfloat16)) == "p:bf16"


def test_predicate_is_tried_on_each_call(reg):
    op = reg.define("thing", nkey=1)
    reg.register("thing", _tagged("general"), backend=HERE)
    reg.register("thing", _tagged("small"), backend=HERE, priority=1, predicate=lambda x: x.size <= 4, plugin="p")
    assert op(_arr(n=4)) == "small"
    assert reg.which("thing", _arr(n=4)) == "p:small" and reg.which("thing", _arr(n=40)) == "pygpukit:general"
    assert op(_arr(n=40)) == "general"  # same dtype, so the same cache entry: the predicate decides
    assert op(_arr(n=2)) == "small"


def test_no_implementation_for_dtypes_lists_what_exists(reg):
    op = reg.define("thing", nkey=1)
    reg.register("thing", _tagged("f16"), backend=HERE, dtypes=["float16"], plugin="p")
    with pytest.raises(gp.RouteError, match=r"no implementation for \(float32\).*p:f16 \(backend .*, dtypes float16\)"):
        op(_arr(np.float32))


def test_keyword_arguments_non_arrays_and_stream(reg):
    op = reg.define("scale", nkey=1)
    reg.register("scale", lambda x, by=2: x * by, backend=HERE, name="scale")
    x = _arr()
    np.testing.assert_array_equal(op(x).to_numpy(), np.arange(4) * 2)
    np.testing.assert_array_equal(op(x, by=3).to_numpy(), np.arange(4) * 3)
    s = gp.Stream()
    gp.synchronize()  # x was written on the current stream; s must not read it earlier
    y = op(x, by=5, stream=s)
    s.synchronize()  # to_numpy waits for the current stream only
    np.testing.assert_array_equal(y.to_numpy(), np.arange(4) * 5)
    with pytest.raises(TypeError, match=r"stream must be a pygpukit\.Stream"):
        op(x, stream="s")
    assert op(3) == 6  # a non-array key argument resolves without the cache
    assert op.__name__ == "scale"


def test_routes(reg):
    op = reg.define("thing", nkey=1)
    reg.register("thing", _tagged("core"), backend=HERE)
    reg.register("thing", _tagged("mine"), backend=HERE, plugin="myplugin", priority=-1)
    reg.register("thing", _tagged("other"), backend=HERE, plugin="myplugin", priority=-2)
    x = _arr()
    assert op(x) == "core"
    reg.route("thing", "myplugin")
    assert op(x) == "mine" and reg.routes() == {"thing": "myplugin"}
    reg.route("thing", "myplugin:other")
    assert op(x) == "other"
    with reg.routing(thing="pygpukit"):
        assert op(x) == "core"
    assert op(x) == "other"  # the block's route is undone
    reg.route("thing", None)
    assert op(x) == "core"
    with pytest.raises(gp.RouteError, match=r"cannot route 'thing' to 'nowhere': no such .*Implementations of thing: pygpukit:core"):
        reg.route("thing", "nowhere")
    with pytest.raises(gp.RouteError, match="no op named 'nope'"):
        reg.route("nope", HERE)


def test_route_to_a_backend_that_cannot_run_here(reg):
    reg.define("thing", nkey=1)
    reg.register("thing", _tagged("core"), backend=HERE)
    reg.register("thing", _tagged("tri"), backend="triton", plugin="t")
    reg.register("thing", _tagged("far"), backend=OTHER, plugin="o")
    with pytest.raises(gp.RouteError, match=rf"cannot route 'thing' to '{OTHER}' here \(o:far: "):
        reg.route("thing", OTHER)
    if HERE == "cpu":
        with pytest.raises(gp.RouteError, match="needs a CUDA GPU"):
            reg.route("thing", "triton")
    with pytest.raises(gp.RouteError):
        with reg.routing(thing=OTHER):
            pass
    assert reg.routes() == {}


def test_routed_dtype_gap_raises_at_call(reg):
    op = reg.define("thing", nkey=1)
    reg.register("thing", _tagged("core"), backend=HERE)
    reg.register("thing", _tagged("half_only"), backend=HERE, dtypes=[np.float16], plugin="h")
    reg.route("thing", "h")
    assert op(_arr(np.float16)) == "half_only"
    with pytest.raises(gp.RouteError, match=r"routed to 'h' .* no implementation for \(int64\)"):
        op(_arr(np.int64))


def test_env_routes(reg, monkeypatch):
    reg.define("thing", nkey=1)
    reg.register("thing", _tagged("core"), backend=HERE)
    reg.register("thing", _tagged("alt"), backend=HERE, plugin="alt", priority=-1)
    monkeypatch.setenv("PYGPUKIT_ROUTE", " thing = alt ")
    reg.ensure_loaded()
    assert reg.routes() == {"thing": "alt"}
    for bad, match in (("thing", "is not op=target"), ("thing=zzz", "PYGPUKIT_ROUTE: cannot route 'thing' to 'zzz'")):
        r = OpRegistry(load_plugins=False)
        r.define("thing", nkey=1)
        monkeypatch.setenv("PYGPUKIT_ROUTE", bad)
        with pytest.raises(gp.RouteError, match=match):
            r.ensure_loaded()


def test_definition_errors(reg):
    reg.define("thing", nkey=1)
    reg.register("thing", _tagged("a"), backend=HERE, plugin="p")
    for call, match in (
        (lambda: reg.define("thing", nkey=1, plugin="q"), "plugin 'q': op 'thing' is already defined by 'pygpukit'"),
        (lambda: reg.define("bad name", nkey=1), "not a Python identifier"),
        (lambda: reg.define("other", nkey=0), "nkey must be 1 to 3"),
        (lambda: reg.register("missing", _tagged("a"), backend=HERE), "op 'missing' is not defined; defined ops: thing"),
        (lambda: reg.register("thing", _tagged("a"), backend="opencl"), "backend 'opencl' of 'thing' is not one of cuda, triton, cpu"),
        (lambda: reg.register("thing", _tagged("a"), backend=HERE, plugin="p"), "already has a .* implementation named 'p:a'"),
        (lambda: reg.register("thing", 42, backend=HERE), "must be callable"),
        (lambda: reg.register("thing", _tagged("b"), backend=HERE, dtypes=["complex512"]), "complex512"),
    ):
        with pytest.raises((gp.PluginError, TypeError), match=match):
            call()


def test_table_says_what_runs_here(reg):
    reg.define("thing", nkey=1)
    reg.register("thing", _tagged("core"), backend=HERE)
    reg.register("thing", _tagged("halfs"), backend=HERE, dtypes=[np.float16, gp.bfloat16], priority=2, plugin="p")
    reg.register("thing", _tagged("half"), backend=HERE, dtypes=[np.float16], priority=1, plugin="q")
    reg.register("thing", _tagged("big"), backend=HERE, priority=3, predicate=lambda x: x.size > 9, plugin="r")
    reg.register("thing", _tagged("far"), backend=OTHER, plugin="o")
    status = {r.impl: r.status for r in reg.table()}
    assert status["r:big"] == "runs here when its predicate accepts the arguments"
    assert status["p:halfs"] == "runs here"
    assert status["q:half"] == "outranked by p:halfs"
    assert status["pygpukit:core"] == "runs here for dtypes other than bfloat16, float16"
    assert status["o:far"].startswith("not here: ")
    reg.route("thing", "q")
    status = {r.impl: r.status for r in reg.table()}
    assert status["p:halfs"] == "routed away (thing=q)" and status["q:half"] == "runs here"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes need Python 3.11")
def test_errors_from_a_plugin_implementation_name_the_plugin(reg):
    def broken(x, flag=0):
        raise ValueError("bad shape")

    op = reg.define("thing", nkey=1)
    reg.register("thing", broken, backend=HERE, plugin="buggy")
    for call in (lambda: op(_arr()), lambda: op(_arr(), flag=1)):
        with pytest.raises(ValueError, match="bad shape") as info:
            call()
        assert "implementation 'buggy:broken' of plugin 'buggy'" in "".join(info.value.__notes__)


def test_core_ops_are_registry_ops():
    names = gp.ops.names()
    assert {"matmul", "softmax", "log_softmax"} <= set(names)
    assert gp.ops.matmul is gp.matmul and gp.ops.softmax is gp.softmax
    assert gp.ops.which("softmax", _arr()) == "pygpukit:softmax"
    rows = [r for r in gp.ops.table() if r.op == "matmul" and r.plugin == "pygpukit"]
    assert {r.backend for r in rows} == {"cuda", "cpu"}
    assert any(r.status.startswith("runs here") and r.backend == HERE for r in rows)  # for some dtypes where a plugin is installed
    assert "matmul" in gp.ops.format_table()
    with pytest.raises(AttributeError, match=r"pygpukit\.ops has no op 'nope'"):
        gp.ops.nope  # noqa: B018
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ga, gat, s = gp.from_numpy(a), gp.from_numpy(a.T.copy()), gp.Stream()
    gp.synchronize()  # the operands were written on the current stream
    c = gp.matmul(ga, gat, stream=s)
    s.synchronize()
    np.testing.assert_allclose(c.to_numpy(), a @ a.T, rtol=1e-5)


def test_gp_route_on_core_ops():
    gp.route("softmax", HERE)
    try:
        assert gp.ops.softmax(_arr()).shape == (4,)
        with pytest.raises(gp.RouteError):
            gp.route("softmax", OTHER)
    finally:
        gp.route("softmax", None)
    with gp.routing(matmul="pygpukit"):
        assert REGISTRY.routes()["matmul"] == "pygpukit"
    assert "matmul" not in REGISTRY.routes()


class _ExamplePlugin:
    """A plugin object with all three hooks, registered explicitly."""

    def __init__(self, name):
        self.name = name

    @hookimpl
    def pygpukit_plugin_info(self):
        return gp.plugins.PluginInfo(self.name, "1.2.3", "adds twice()")

    @hookimpl
    def pygpukit_register_ops(self, registry):
        op = f"{self.name}_twice"
        registry.define(op, nkey=1, doc="2 * x")
        registry.register(op, lambda x: x + x, backend=HERE, name="twice")

    @hookimpl
    def pygpukit_register_models(self, registry):
        registry.register(f"{self.name}-model", lambda path: ("loaded", path), description="a toy")


def test_explicit_plugin_register_disable_enable():
    state = gp.plugins.register(_ExamplePlugin("explicitone"))
    name = state.name
    assert name == "_ExamplePlugin"  # no name= and no __name__: named after the object's type
    assert state.status == "active" and state.info.version == "1.2.3"
    twice = gp.ops.explicitone_twice
    np.testing.assert_array_equal(twice(_arr()).to_numpy(), np.arange(4) * 2)
    model = next(m for m in gp.plugins.models() if m.name == "explicitone-model")
    assert model.plugin == name and model.loader("p") == ("loaded", "p")
    assert any(p.name == name and p.status == "active" for p in gp.plugins.plugins())
    gp.plugins.disable(name)
    assert "explicitone_twice" not in gp.ops.names()
    assert all(m.name != "explicitone-model" for m in gp.plugins.models())
    with pytest.raises(AttributeError):
        gp.ops.explicitone_twice  # noqa: B018
    assert gp.plugins.enable(name).status == "active"
    np.testing.assert_array_equal(gp.ops.explicitone_twice(_arr()).to_numpy(), np.arange(4) * 2)
    gp.plugins.disable(name)
    with pytest.raises(gp.PluginError, match="already known"):
        gp.plugins.register(object(), name=name)
    with pytest.raises(gp.PluginError, match="no plugin named 'nobody'"):
        gp.plugins.disable("nobody")


def test_a_failing_plugin_is_left_out_with_a_warning():
    class Raises:
        @hookimpl
        def pygpukit_register_ops(self, registry):
            registry.define("half_done", nkey=1)
            raise RuntimeError("cannot find my library")

    class WrongHook:
        @hookimpl
        def pygpukit_register_opz(self, registry):  # not a pygpukit hook
            pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        failed = gp.plugins.register(Raises(), name="raises")
        wrong = gp.plugins.register(WrongHook(), name="wronghook")
    assert failed.status.startswith("failed: its hooks raised RuntimeError: cannot find my library")
    assert wrong.status.startswith("failed:") and "pygpukit_register_opz" in wrong.status
    assert {str(w.message).split("'")[1] for w in caught if w.category is gp.plugins.PluginWarning} == {"raises", "wronghook"}
    assert "half_done" not in gp.ops.names()  # what it registered before failing was taken back
    np.testing.assert_allclose(gp.softmax(_arr()).to_numpy().sum(), 1.0, rtol=1e-6)  # core unaffected


def test_import_loads_neither_pluggy_nor_plugins():
    code = "import sys, pygpukit; print('pluggy' in sys.modules, [m for m in sys.modules if m.startswith('pygpukit_')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")[0]
    assert out == "False []"


def test_an_implementation_may_come_before_its_ops_definition(reg):
    impl = reg.register("later", _tagged("fast"), backend=HERE, priority=5, plugin="early")
    assert [r.status for r in reg.table() if r.op == "later"] == ["waiting: no installed, enabled plugin defines this op"]
    op = reg.define("later", nkey=1, plugin="definer")
    reg.register("later", _tagged("ref"), backend=HERE, plugin="definer")
    assert op(_arr()) == "fast" and impl.plugin == "early"
    reg.remove_plugin("definer")  # the definer goes: the early implementation waits again
    assert [r.impl for r in reg.table() if r.op == "later"] == ["early:fast"]
    op = reg.define("later", nkey=1, plugin="definer")
    assert op(_arr()) == "fast"
    reg.remove_plugin("early")
    with pytest.raises(gp.PluginError, match="not defined"):
        reg.register("other", _tagged("x"), backend=HERE)  # core's own still need the definition first

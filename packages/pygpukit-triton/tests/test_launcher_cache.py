"""The cached launcher's bookkeeping, checked without a GPU: the key separates
every call Triton would specialize differently, and a cached entry fills the
compiled launcher's parameter list (array addresses, scalars, keyword
arguments, constexprs, defaults, the autotuner's chosen config) and the grid
as Triton's own dispatch would."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import pygpukit as gp

pytestmark = pytest.mark.usefixtures("need_triton")


def axpy(x, y, out, n, alpha, BLOCK: "tl.constexpr", EVEN: "tl.constexpr" = False):  # noqa: F821, UP037
    # a Triton kernel's signature (only its parameters matter here; it is never compiled)
    pass


def _jit():
    from triton.runtime.jit import JITFunction

    return JITFunction(axpy)


def _arrays(n=64, offset=0):
    base = gp.zeros((n + 8,), gp.float32)
    return base[offset : offset + n], gp.zeros((n,), gp.float32), gp.zeros((n,), gp.float32)


def test_key_separates_what_triton_specializes():
    from pygpukit_triton import launcher

    info = launcher._Kernel(_jit())
    assert info.names == ["x", "y", "out", "n", "alpha", "BLOCK", "EVEN"]
    assert info.by_value == (False, False, False, False, False, True, True)  # BLOCK and EVEN are constexprs
    x, y, out = _arrays()
    key = lambda *a, **m: launcher._key(info, a, m)
    base = key(x, y, out, 64, 2.0, 128)
    assert key(x, y, out, 64, -7.5, 128) == base  # float values are not specialized
    assert key(x, y, out, 48, 2.0, 128) == base  # both multiples of 16, both i32
    assert key(x, y, out, 50, 2.0, 128) != base  # not a multiple of 16
    assert key(x, y, out, 1, 2.0, 128) != key(x, y, out, 17, 2.0, 128)  # 1 becomes a constexpr in Triton
    assert key(x, y, out, 2**40, 2.0, 128) != key(x, y, out, 2**4, 2.0, 128)  # i64 vs i32
    assert key(x, y, out, 64, 2.0, 256) != base  # constexpr value
    assert key(_arrays(offset=1)[0], y, out, 64, 2.0, 128) != base  # 4-byte aligned, not 16
    assert key(x.astype(gp.float16), y, out, 64, 2.0, 128) != base  # dtype
    assert key(x, y, out, 64, 2.0, BLOCK=128) != base  # keywords are keyed by name
    with pytest.raises(launcher._Uncacheable):
        key(x, y, out, (64, 1), 2.0, 128)


class _FakeLauncher:
    """A compiled kernel's launcher: records each launch."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, False

    def __init__(self):
        self.calls = []

    def launch(self, *args):
        self.calls.append(args)


class _FakeCompiled:
    def __init__(self):
        self.run = _FakeLauncher()
        self.function = 1234
        self.packed_metadata = (4, 1, 0)


@pytest.fixture
def no_device(monkeypatch):
    from pygpukit_triton import launcher

    monkeypatch.setattr(launcher, "launch_gate", lambda stream: contextlib.nullcontext())  # the fake stream 77 is no stream
    monkeypatch.setattr(launcher, "current_stream", lambda: 77)
    from triton import knobs

    monkeypatch.setattr(launcher, "_runtime_knobs", knobs.runtime)  # as after a first launch


def test_cached_entry_fills_parameters_and_grid(no_device):
    from pygpukit_triton import launcher

    jit = _jit()
    x, y, out = _arrays()
    compiled = _FakeCompiled()
    launcher._kernels.pop(id(jit), None)
    launcher._remember(jit, compiled, (x, y, out, 64), {"alpha": 0.5, "BLOCK": 128})
    x2, y2, out2 = _arrays()
    seen = {}

    def grid(meta):
        seen.update(meta)
        return (meta["n"] // meta["BLOCK"] + 1,)

    launcher.launch(jit, grid, x2, y2, out2, 64, alpha=3.0, BLOCK=128)
    (call,) = compiled.run.calls
    # grid, stream, function, cooperative, pdl, scratch, profile scratch, metadata, launch metadata, hooks, parameters
    assert call[:13] == (1, 1, 1, 77, 1234, False, False, None, None, (4, 1, 0), None, None, None)
    params = list(call[13:])
    assert params == [x2.data_ptr, y2.data_ptr, out2.data_ptr, 64, 3.0, 128, False]
    assert seen["BLOCK"] == 128 and seen["n"] == 64 and seen["x"].data_ptr() == x2.data_ptr
    launcher.launch(jit, (5, 2), x2, y2, out2, 80, alpha=1.0, BLOCK=128)  # same key: 80 is a multiple of 16 too
    assert compiled.run.calls[-1][:3] == (5, 2, 1) and compiled.run.calls[-1][-4:-2] == (80, 1.0)


def test_autotuned_entry_takes_the_chosen_config(no_device):
    import triton

    from pygpukit_triton import launcher

    jit = _jit()
    tuner = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"])(jit)
    tuner.best_config = tuner.configs[1]
    x, y, out = _arrays()
    compiled = _FakeCompiled()
    launcher._remember(tuner, compiled, (x, y, out, 64, 2.0), {})
    launcher.launch(tuner, lambda m: (m["n"] // m["BLOCK"] + 1,), x, y, out, 64, 2.0)
    assert compiled.run.calls[-1][0] == 1 and compiled.run.calls[-1][-2:] == (256, False)
    # another value of the tuning key is another entry (Triton's path, which needs a GPU)
    info = launcher._kernels[id(tuner)]
    assert launcher._key(info, (x, y, out, 64, 2.0), {}) != launcher._key(info, (x, y, out, 80, 2.0), {})


def test_bad_kernel_and_grid_are_reported():
    from pygpukit_triton import launcher

    with pytest.raises(TypeError, match=r"must be a @triton\.jit function"):
        launcher._check(np.add, (1,))
    with pytest.raises(ValueError, match="grid must be 1 to 3"):
        launcher._check(_jit(), (1, 2, 3, 4))


def test_launch_hooks_send_calls_through_triton(no_device, monkeypatch):
    from triton import knobs

    from pygpukit_triton import launcher

    jit = _jit()
    x, y, out = _arrays()
    compiled = _FakeCompiled()
    launcher._remember(jit, compiled, (x, y, out, 64, 1.5), {"BLOCK": 64})
    taken = []
    monkeypatch.setattr(launcher, "_slow", lambda *a: taken.append(a))
    hook = lambda metadata: None
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        launcher.launch(jit, (1,), x, y, out, 64, 1.5, BLOCK=64)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(taken) == 1 and compiled.run.calls == []
    launcher.launch(jit, (1,), x, y, out, 64, 1.5, BLOCK=64)
    assert len(taken) == 1 and len(compiled.run.calls) == 1


def test_cached_launch_passes_the_launch_gate_on_the_current_stream(no_device, monkeypatch):
    from pygpukit_triton import launcher

    gated = []

    @contextlib.contextmanager
    def gate(stream):
        gated.append(("enter", stream))
        yield
        gated.append(("exit", stream))

    monkeypatch.setattr(launcher, "launch_gate", gate)
    jit = _jit()
    x, y, out = _arrays()
    compiled = _FakeCompiled()
    launcher._remember(jit, compiled, (x, y, out, 64, 1.5), {"BLOCK": 64})
    launcher.launch(jit, (1,), x, y, out, 64, 1.5, BLOCK=64)
    assert gated == [("enter", 77), ("exit", 77)] and len(compiled.run.calls) == 1
    assert compiled.run.calls[0][3] == 77  # the launcher's stream is the gate's

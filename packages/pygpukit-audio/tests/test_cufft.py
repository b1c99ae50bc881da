"""The cuFFT implementation (pygpukit_audio.cufft): on any machine against a
fake library that computes with numpy.fft on the CPU backend's host memory
(the plans it makes, the layouts, streams and work areas it is given, the
normalization, irfft's input kept intact, errors); on a GPU with cuFFT
loadable, routed to and compared with NumPy."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ext
from pygpukit_audio import cufft

TYPES = {0x29: ("c2c", np.complex64), 0x2A: ("r2c", np.float32), 0x2C: ("c2r", np.complex64),
         0x69: ("c2c", np.complex128), 0x6A: ("r2c", np.float64), 0x6C: ("c2r", np.complex128)}  # fmt: skip


def _host(ptr, dtype, count):
    return np.ctypeslib.as_array((ctypes.c_char * (count * np.dtype(dtype).itemsize)).from_address(ptr)).view(dtype)


class FakeCufft:
    """cuFFT's calls as the implementation makes them, computed with numpy.fft."""

    def __init__(self, fail_plan=0):
        self.ids = itertools.count(7)
        self.plans = {}  # handle -> (n, type, batch)
        self.destroyed, self.work_areas, self.streams, self.execs = [], [], [], []
        self.fail_plan = fail_plan

    def cufftGetVersion(self, out):
        out._obj.value = 12000
        return 0

    def cufftCreate(self, out):
        out._obj.value = next(self.ids)
        return 0

    def cufftSetAutoAllocation(self, plan, auto):
        assert auto == 0  # work areas come from pygpukit's pool
        return 0

    def cufftMakePlanMany64(self, plan, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch, work):
        assert rank == 1 and not inembed and not onembed  # the basic layout: contiguous rows
        if self.fail_plan:
            return self.fail_plan
        self.plans[plan] = (n[0], typ, batch)
        work._obj.value = 4096
        return 0

    def cufftSetWorkArea(self, plan, ptr):
        self.work_areas.append(ptr.value)
        return 0

    def cufftSetStream(self, plan, stream):
        self.streams.append(stream.value or 0)
        return 0

    def cufftDestroy(self, plan):
        self.destroyed.append(plan)
        return 0

    def _exec(self, plan, src, dst, direction=None):
        n, typ, batch = self.plans[plan]
        kind, dt = TYPES[typ]
        self.execs.append((plan, kind, direction))
        cdt = np.complex128 if np.dtype(dt) in (np.float64, np.complex128) else np.complex64
        half = n // 2 + 1
        if kind == "r2c":
            x = _host(src.value, dt, batch * n).reshape(batch, n)
            _host(dst.value, cdt, batch * half)[:] = np.fft.rfft(x, axis=-1).ravel()
        elif kind == "c2r":
            x = _host(src.value, dt, batch * half).reshape(batch, half)
            real = np.float64 if cdt == np.complex128 else np.float32
            _host(dst.value, real, batch * n)[:] = (np.fft.irfft(x, n, axis=-1) * n).ravel()
            x[:] = np.nan  # cuFFT's complex-to-real transform may overwrite its input
        else:
            x = _host(src.value, dt, batch * n).reshape(batch, n)
            y = np.fft.fft(x, axis=-1) if direction == cufft.FORWARD else np.fft.ifft(x, axis=-1) * n
            _host(dst.value, dt, batch * n)[:] = y.ravel()
        return 0

    cufftExecC2C = cufftExecZ2Z = _exec
    cufftExecR2C = cufftExecC2R = cufftExecD2Z = cufftExecZ2D = _exec


@pytest.fixture
def fake(monkeypatch):
    if gp.backend() != "cpu":
        pytest.skip("the fake library computes on host memory: the CPU backend's arrays")
    lib = cufft._Lib.__new__(cufft._Lib)
    lib.dll, lib.path, lib.version = FakeCufft(), "fake", 12000
    monkeypatch.setattr(cufft, "_lib", lib)
    monkeypatch.setattr(cufft, "_plans", ext.PlanCache("test_cufft.plans", maxsize=cufft.MAX_PLANS))
    return lib.dll


def _rel(got, ref):
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-300))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_transform_against_numpy(fake, rng, dtype):
    cdt = np.complex64 if dtype == np.float32 else np.complex128
    tol = 1e-5 if dtype == np.float32 else 1e-12
    real = rng.standard_normal((3, 5, 12)).astype(dtype)
    comp = (rng.standard_normal((3, 5, 12)) + 1j * rng.standard_normal((3, 5, 12))).astype(cdt)
    for kind, x in (("fft", comp), ("fft", real), ("ifft", comp), ("rfft", real), ("irfft", comp)):
        fn, takes = cufft._implementation(kind)
        for axis, n, norm in ((-1, None, None), (1, 8, "ortho"), (0, 5, "forward"), (-1, 16, "backward")):
            ga = gp.from_numpy(x)
            assert takes(ga, n, axis, norm)
            got = fn(ga, n, axis, norm).to_numpy()
            ref = getattr(np.fft, kind)(x, n=n, axis=axis, norm=norm)
            assert got.shape == ref.shape and got.dtype == (np.dtype(dtype) if kind == "irfft" else np.dtype(cdt))
            assert _rel(got, ref) < tol, (kind, axis, n, norm)
            np.testing.assert_array_equal(ga.to_numpy(), x)  # the input is never written (irfft: a copy is)


def test_plans_are_kept_per_signature_and_evicted(fake, monkeypatch):
    x = gp.from_numpy(np.ones((4, 16), np.float32))
    rfft = cufft._implementation("rfft")[0]
    rfft(x)
    rfft(x)
    assert len(fake.plans) == 1 and len(fake.execs) == 2  # one plan, two executions
    assert fake.streams == [gp.current_stream().handle] * 2
    assert all(p for p in fake.work_areas)  # a work area from the pool before each execution
    monkeypatch.setattr(cufft._plans, "maxsize", 2)
    for n in (8, 32, 64):
        rfft(x, n)
    assert len(cufft._plans) == 2 and len(fake.destroyed) >= 1  # the oldest plans are destroyed


def test_failures_name_the_call_and_status(fake):
    fake.fail_plan = 8
    with pytest.raises(cufft.CufftError, match=r"cufftMakePlanMany64 \(n=16, batch=4\) failed: CUFFT_INVALID_SIZE \(cufftResult 8\)"):
        cufft._implementation("rfft")[0](gp.from_numpy(np.ones((4, 16), np.float32)))
    assert fake.destroyed  # the half-made plan is released


def test_missing_library_is_reported_and_not_taken(monkeypatch):
    monkeypatch.setattr(cufft, "_lib", None)
    monkeypatch.setattr(cufft, "_lib_error", None)
    monkeypatch.setenv("PYGPUKIT_CUFFT_PATH", "/nonexistent/libcufft.so.12")  # the only place left to look
    monkeypatch.setattr(cufft, "_WHEEL_LIBS", ())
    monkeypatch.setattr(cufft, "_SYSTEM_SONAMES", ())
    with pytest.raises(
        cufft.CufftError, match=r"cuFFT could not be loaded \(pip install nvidia-cufft\); tried /nonexistent/libcufft.so.12"
    ):
        cufft.library()
    assert not cufft.available()
    assert not cufft._implementation("rfft")[1](gp.from_numpy(np.ones(8, np.float32)))
    # bad arguments are left to the reference, which reports them
    assert not cufft._implementation("rfft")[1](gp.from_numpy(np.ones(8, np.float32)), 0)


def test_listed_under_every_transform():
    rows = {(r.op, r.impl): r for r in gp.ops.table()}
    for kind in ("fft", "ifft", "rfft", "irfft"):
        row = rows[kind, "audio:cufft"]
        assert row.backend == "cuda" and row.priority == 5 and rows[kind, "audio:kernel"].priority > row.priority


def test_candidates_follow_the_search_order(monkeypatch):
    monkeypatch.setenv("PYGPUKIT_CUFFT_PATH", "/opt/libcufft.so")
    cands = cufft.candidates()
    assert cands[0] == "/opt/libcufft.so" and cands[-2:] == ["libcufft.so.12", "libcufft.so.11"]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["fft", "ifft", "rfft", "irfft"])
def test_routed_to_cufft_on_the_gpu(rng, kind):
    if not cufft.available():
        pytest.skip("cuFFT is not loadable here (pip install nvidia-cufft)")
    import pygpukit_audio as audio

    x = rng.standard_normal((6, 1000)) + (1j * rng.standard_normal((6, 1000)) if kind in ("ifft", "irfft", "fft") else 0)
    for dt in (np.float32, np.float64) if kind == "rfft" else (np.complex64, np.complex128):
        xa = x.astype(dt)
        with gp.routing(**{kind: "audio:cufft"}):
            assert gp.ops.which(kind, gp.from_numpy(xa)) == "audio:cufft"
            got = getattr(audio.fft, kind)(gp.from_numpy(xa), axis=0, norm="ortho").to_numpy()
        ref = getattr(np.fft, kind)(xa, axis=0, norm="ortho")
        assert _rel(got, ref) < (1e-5 if np.dtype(dt) in (np.float32, np.complex64) else 1e-12)

"""The cuBLASLt calls, checked against a fake library on any machine: which
descriptor attributes, layouts and pointers a product hands to cuBLASLt (the
real library runs in the GPU tests)."""

import itertools

import numpy as np
import pytest

import pygpukit as gp
from pygpukit_gemm import cublaslt as cl


class FakeDll:
    def __init__(self):
        self.ids = itertools.count(100)
        self.layouts = {}  # handle -> [type, rows, cols, ld, {attr: value}]
        self.descs = {}  # handle -> [compute, scale, {attr: value}]
        self.matmuls = []

    def _new(self, out):
        out._obj.value = next(self.ids)
        return out._obj.value

    def cublasLtMatmulDescCreate(self, out, compute, scale):
        self.descs[self._new(out)] = [compute, scale, {}]
        return 0

    def cublasLtMatrixLayoutCreate(self, out, dtype, rows, cols, ld):
        self.layouts[self._new(out)] = [dtype, rows, cols, ld, {}]
        return 0

    def cublasLtMatmulPreferenceCreate(self, out):
        self._new(out)
        return 0

    def cublasLtMatmulPreferenceDestroy(self, pref):
        return 0

    def cublasLtMatmulAlgoGetHeuristic(self, handle, desc, la, lb, lc, ld, pref, n, result, count):
        result._obj.workspace_size = 4096
        result._obj.state = 0
        count._obj.value = 1
        return 0

    def cublasLtMatmul(self, *args):
        self.matmuls.append(args)
        return 0

    # set_attr targets: the fake Lib dispatches on the function identity
    cublasLtMatmulDescSetAttribute = "desc"
    cublasLtMatrixLayoutSetAttribute = "layout"
    cublasLtMatmulPreferenceSetAttribute = "pref"


class FakeLib:
    handle = 7
    version = 131000
    path = "fake"

    def __init__(self):
        self.dll = FakeDll()

    def check(self, status, call):
        assert status == 0, call

    def set_attr(self, fn, obj, attr, value, call):
        if fn == "desc":
            self.dll.descs[obj][2][attr] = value.value
        elif fn == "layout":
            self.dll.layouts[obj][4][attr] = value.value


@pytest.fixture
def fake(monkeypatch):
    lib = FakeLib()
    monkeypatch.setattr(cl, "_lib", lib)
    monkeypatch.setattr(cl, "_plans", {})
    return lib


def test_matmul_plumbing(fake):
    a = gp.from_numpy(np.ones((2, 5, 3), np.float32))  # (batch, m, k)
    w = gp.from_numpy(np.ones((4, 3), np.float32))
    b = gp.broadcast_to(w.T, (2, 3, 4))  # a transposed, broadcast operand
    call = cl.prepare(a, b, (2,), 5, 4, 3, (2, 5, 4))
    out = call(a.data_ptr, b.data_ptr)
    assert out.shape == (2, 5, 4) and out.dtype == np.float32
    (args,) = fake.dll.matmuls
    handle, desc, _, pa, la, pb, lb, _, pc, lc, pd, ld, _, ws, ws_size, stream = args
    assert stream == gp.current_stream().handle
    assert (handle, pa, pb, pc, pd, ws_size) == (7, b.data_ptr, a.data_ptr, out.data_ptr, out.data_ptr, 4096)
    assert ws is not None and lc == ld
    compute, scale, attrs = fake.dll.descs[desc]
    assert (compute, scale) == (cl.COMPUTE_32F, cl.CUDA_TYPE["float32"])
    assert attrs == {cl.DESC_TRANSA: cl.OP_T, cl.DESC_TRANSB: cl.OP_N}  # cuBLASLt's A is our b, read transposed
    # A: w (4 x 3 row-major) as column-major (3 x 4) read transposed, broadcast: batch stride 0
    assert fake.dll.layouts[la][:4] == [cl.CUDA_TYPE["float32"], 3, 4, 3]
    assert fake.dll.layouts[la][4] == {cl.LAYOUT_BATCH_COUNT: 2, cl.LAYOUT_STRIDED_BATCH_OFFSET: 0}
    assert fake.dll.layouts[lb][:4] == [cl.CUDA_TYPE["float32"], 3, 5, 3]
    assert fake.dll.layouts[lb][4][cl.LAYOUT_STRIDED_BATCH_OFFSET] == 15
    assert fake.dll.layouts[ld][:4] == [cl.CUDA_TYPE["float32"], 4, 5, 4]
    gp.set_matmul_precision("tf32")
    try:
        cl.prepare(a, b, (2,), 5, 4, 3, (2, 5, 4))(a.data_ptr, b.data_ptr)
    finally:
        gp.set_matmul_precision("highest")
    assert fake.dll.descs[fake.dll.matmuls[-1][1]][0] == cl.COMPUTE_32F_FAST_TF32


def test_bias_and_fp8_scale_plumbing(fake):
    a = gp.from_numpy(np.ones((5, 32), gp.float8_e4m3fn))
    b = gp.from_numpy(np.ones((16, 32), gp.float8_e5m2)).T
    bias = gp.from_numpy(np.ones(16, gp.bfloat16))
    sa, sb = gp.ones((), gp.float32), gp.ones((), gp.float32)
    call = cl.prepare(a, b, (), 5, 16, 32, (5, 16), True, np.dtype(gp.bfloat16), scaled=True)
    call(a.data_ptr, b.data_ptr, bias.data_ptr, sa.data_ptr, sb.data_ptr)
    args = fake.dll.matmuls[-1]
    compute, _, attrs = fake.dll.descs[args[1]]
    assert compute == cl.COMPUTE_32F
    assert attrs[cl.DESC_EPILOGUE] == cl.EPILOGUE_BIAS and attrs[cl.DESC_BIAS_POINTER] == bias.data_ptr
    assert attrs[cl.DESC_BIAS_DATA_TYPE] == cl.CUDA_TYPE["bfloat16"]
    assert (attrs[cl.DESC_A_SCALE_POINTER], attrs[cl.DESC_B_SCALE_POINTER]) == (sb.data_ptr, sa.data_ptr)  # A is our b
    types = [fake.dll.layouts[h][0] for h in (args[4], args[6], args[11])]
    assert types == [cl.CUDA_TYPE["float8_e5m2"], cl.CUDA_TYPE["float8_e4m3fn"], cl.CUDA_TYPE["bfloat16"]]
    assert attrs[cl.DESC_TRANSA] == cl.OP_T and attrs[cl.DESC_TRANSB] == cl.OP_N  # fp8 wants TN


def test_plugin_paths_on_the_fake(fake, monkeypatch):
    from pygpukit_gemm import plugin

    monkeypatch.setattr(plugin, "_prepared", {})
    x = gp.from_numpy(np.ones((3, 4), np.float32))
    w = gp.from_numpy(np.ones((6, 4), np.float32))
    bias = gp.zeros((6,), gp.float32)
    plugin.linear(x, w, bias)
    plugin.linear(x, w, bias)  # the second call takes the prepared product
    assert len(fake.dll.matmuls) == 2 and len(plugin._prepared) == 1
    plugin.linear(x, w, gp.zeros((6,), gp.float64))  # a bias of another dtype is converted, not kept
    assert len(fake.dll.matmuls) == 3 and len(plugin._prepared) == 1
    plugin.matmul(x, w.T)
    plugin.matmul(x[:, ::2], w.T[::2])  # no unit stride: copied, not kept
    assert len(fake.dll.matmuls) == 5 and len(plugin._prepared) == 2

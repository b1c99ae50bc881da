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


def test_fp8_scale_mode_plumbing(fake):
    from pygpukit_gemm import scaled

    # cublasLtMatmulDescAttributes_t and cublasLtMatmulMatrixScale_t in cublasLt.h (cuBLAS 12.9 to 13.x)
    assert (cl.DESC_A_SCALE_MODE, cl.DESC_B_SCALE_MODE) == (31, 32)
    assert (cl.SCALE_SCALAR_32F, cl.SCALE_OUTER_VEC_32F, cl.SCALE_VEC128_32F, cl.SCALE_BLK128X128_32F) == (0, 3, 4, 5)
    a = gp.from_numpy(np.ones((8, 256), gp.float8_e4m3fn))
    b = gp.from_numpy(np.ones((128, 256), gp.float8_e4m3fn)).T
    descs = {}
    for mode, modes in scaled.LT_MODES.items():
        call = cl.prepare(a, b, (), 8, 128, 256, (8, 128), False, np.dtype(gp.bfloat16), scaled=True, scale_modes=modes)
        call(a.data_ptr, b.data_ptr, 0, 16, 32)
        descs[mode] = fake.dll.matmuls[-1][1]
    assert len(set(descs.values())) == 3  # the scale modes are part of the plan's key
    attrs = {mode: fake.dll.descs[d][2] for mode, d in descs.items()}
    assert all(attrs[mode][cl.DESC_FAST_ACCUM] == 0 for mode in attrs)
    assert all((attrs[mode][cl.DESC_A_SCALE_POINTER], attrs[mode][cl.DESC_B_SCALE_POINTER]) == (32, 16) for mode in attrs)
    assert cl.DESC_A_SCALE_MODE not in attrs["tensor"] and cl.DESC_B_SCALE_MODE not in attrs["tensor"]  # the default, left unset
    assert (attrs["row"][cl.DESC_A_SCALE_MODE], attrs["row"][cl.DESC_B_SCALE_MODE]) == (cl.SCALE_OUTER_VEC_32F,) * 2
    # cuBLASLt's A is our b (128x128 weight blocks), its B our a (1x128 blocks along K)
    assert (attrs["block"][cl.DESC_A_SCALE_MODE], attrs["block"][cl.DESC_B_SCALE_MODE]) == (cl.SCALE_BLK128X128_32F, cl.SCALE_VEC128_32F)


def test_scaled_mm_hands_scales_in_cublaslt_layouts(fake, monkeypatch):
    from pygpukit_gemm import scaled

    seen = []
    lt_scales = scaled._lt_scales
    monkeypatch.setattr(scaled, "_lt_scales", lambda *args: seen.append(lt_scales(*args)) or seen[-1])
    m, k, n = 8, 320, 256  # 3 blocks along K, 2 along N
    a = gp.from_numpy(np.ones((m, k), gp.float8_e4m3fn))
    b = gp.from_numpy(np.ones((n, k), gp.float8_e4m3fn)).T
    sa = np.arange(m * 3, dtype=np.float32).reshape(m, 3)
    sb = np.arange(100, 106, dtype=np.float32).reshape(3, 2)
    scaled.scaled_mm(a, b, gp.from_numpy(sa), gp.from_numpy(sb))
    lt_a, lt_b = seen[-1]
    attrs = fake.dll.descs[fake.dll.matmuls[-1][1]][2]
    assert (attrs[cl.DESC_A_SCALE_POINTER], attrs[cl.DESC_B_SCALE_POINTER]) == (lt_b.data_ptr, lt_a.data_ptr)
    # a's scales M-major (the m scales of each K block side by side), b's K-major
    # with each N block's K scales padded to a multiple of 4
    assert lt_a.is_contiguous and lt_b.is_contiguous and lt_a.data_ptr % 16 == 0 and lt_b.data_ptr % 16 == 0
    np.testing.assert_array_equal(lt_a.to_numpy(), sa.T)
    np.testing.assert_array_equal(lt_b.to_numpy(), [[100, 102, 104, 0], [101, 103, 105, 0]])
    # scales already laid out so are read in place, where no padding is needed
    k4 = 512  # 4 blocks along K
    a4 = gp.from_numpy(np.ones((m, k4), gp.float8_e4m3fn))
    b4 = gp.from_numpy(np.ones((n, k4), gp.float8_e4m3fn)).T
    sa_in = gp.from_numpy(np.ones((4, m), np.float32)).T
    sb_in = gp.from_numpy(np.ones((2, 4), np.float32)).T  # w's (128, 128) block scales, transposed
    scaled.scaled_mm(a4, b4, sa_in, sb_in)
    assert (seen[-1][0].data_ptr, seen[-1][1].data_ptr) == (sa_in.data_ptr, sb_in.data_ptr)
    # row-wise: the (m, 1) and (1, n) vectors, contiguous (a strided one is copied)
    ra, rb = gp.from_numpy(np.repeat(sa[:, :1], 2, axis=1))[:, :1], gp.from_numpy(np.arange(n, dtype=np.float32).reshape(1, n))
    scaled.scaled_mm(a, b, ra, rb)
    lt_a, lt_b = seen[-1]
    assert lt_a.is_contiguous and lt_a.data_ptr != ra.data_ptr and lt_b.data_ptr == rb.data_ptr
    np.testing.assert_array_equal(lt_a.to_numpy(), sa[:, :1])
    modes = fake.dll.descs[fake.dll.matmuls[-1][1]][2]
    assert (modes[cl.DESC_A_SCALE_MODE], modes[cl.DESC_B_SCALE_MODE]) == (cl.SCALE_OUTER_VEC_32F,) * 2


def test_sm90_scales_registered_from_cublaslt_12_9(fake, monkeypatch):
    from pygpukit_gemm import plugin

    class Registry:
        def __init__(self):
            self.impls = []

        def define(self, op, **kwargs):
            pass

        def register(self, op, fn, **kwargs):
            self.impls.append((op, kwargs.get("name")))

    monkeypatch.setattr(plugin, "_status", {"cublaslt": "not loaded"})
    monkeypatch.setattr(plugin.gp, "backend", lambda: "cuda")
    for version, present in ((120804, False), (120900, True), (131000, True)):
        fake.version = version
        registry = Registry()
        plugin.pygpukit_register_ops(registry)
        assert ("scaled_mm", "cublaslt_fp8") in registry.impls
        assert (("scaled_mm", "cublaslt_fp8_sm90") in registry.impls) == present

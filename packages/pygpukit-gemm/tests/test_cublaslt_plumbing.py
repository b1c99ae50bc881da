"""The cuBLASLt calls, checked against a fake library on any machine: which
descriptor attributes, layouts and pointers a product hands to cuBLASLt (the
real library runs in the GPU tests)."""

import ctypes
import itertools

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ext
from pygpukit_gemm import cublaslt as cl


class FakeDll:
    def __init__(self):
        self.ids = itertools.count(100)
        self.layouts = {}  # handle -> [type, rows, cols, ld, {attr: value}]
        self.descs = {}  # handle -> [compute, scale, {attr: value}]
        self.prefs = {}  # handle -> {attr: value}
        self.heuristics = []  # (desc, A, B, C, D layouts, preference) per call
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
        self.prefs[self._new(out)] = {}
        return 0

    def cublasLtMatmulPreferenceDestroy(self, pref):
        return 0

    def cublasLtMatmulAlgoGetHeuristic(self, handle, desc, la, lb, lc, ld, pref, n, result, count):
        self.heuristics.append((desc.value, la, lb, lc, ld, pref.value))
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
        else:
            self.dll.prefs[obj][attr] = value.value


@pytest.fixture
def fake(monkeypatch):
    lib = FakeLib()
    monkeypatch.setattr(cl, "_lib", lib)
    monkeypatch.setattr(cl, "_plans", ext.PlanCache("test.cublaslt.plans"))
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

    monkeypatch.setattr(plugin, "_prepared", ext.PlanCache("test.plugin.prepared"))
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


def test_fp8_registrations(fake, monkeypatch):
    """scaled_mm on cuBLASLt takes per-tensor scales only: its row-wise and block
    scale modes were rejected by cuBLASLt 13.1 on an H100, so they stay off
    (the own e4m3 kernel, mma_fp8, takes per-tensor and row-wise scales)."""
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
    registry = Registry()
    plugin.pygpukit_register_ops(registry)
    assert sorted(name for op, name in registry.impls if op == "scaled_mm") == ["cublaslt_fp8", "mma_fp8", "reference", "reference"]


def test_epilogue_and_c_plumbing(fake):
    # cublasLtEpilogue_t in cublasLt.h (cuBLAS 12.x to 13.x)
    assert (cl.EPILOGUE_DEFAULT, cl.EPILOGUE_RELU, cl.EPILOGUE_BIAS, cl.EPILOGUE_RELU_BIAS) == (1, 2, 4, 6)
    assert (cl.EPILOGUE_GELU, cl.EPILOGUE_GELU_BIAS) == (32, 36)
    x = gp.from_numpy(np.ones((5, 8), np.float32))
    wt = gp.from_numpy(np.ones((6, 8), np.float32)).T
    bias = gp.ones((6,), gp.float32)
    res = gp.from_numpy(np.ones(31, np.float32))[1:].reshape(5, 6)  # contiguous, 4 bytes past a pool block
    descs = {}
    for epi, with_bias, c in itertools.product((cl.EPILOGUE_DEFAULT, cl.EPILOGUE_RELU, cl.EPILOGUE_GELU), (False, True), (None, res)):
        call = cl.prepare(x, wt, (), 5, 6, 8, (5, 6), with_bias, epilogue=epi, c=c)
        out = call(x.data_ptr, wt.data_ptr, bias.data_ptr if with_bias else 0, c_ptr=0 if c is None else c.data_ptr)
        args = fake.dll.matmuls[-1]
        desc, beta, pc, lc, pd, ld = args[1], args[7], args[8], args[9], args[10], args[11]
        descs[epi, with_bias, c is not None] = desc
        attrs = fake.dll.descs[desc][2]
        want = {(cl.EPILOGUE_DEFAULT, True): cl.EPILOGUE_BIAS, (cl.EPILOGUE_RELU, True): cl.EPILOGUE_RELU_BIAS}
        want[cl.EPILOGUE_GELU, True] = cl.EPILOGUE_GELU_BIAS
        if epi == cl.EPILOGUE_DEFAULT and not with_bias:
            assert cl.DESC_EPILOGUE not in attrs  # left at its default, as a plain product
        else:
            assert attrs[cl.DESC_EPILOGUE] == want.get((epi, with_bias), epi)
        assert (cl.DESC_BIAS_DATA_TYPE in attrs) == with_bias
        assert pd == out.data_ptr and ctypes.c_float.from_address(beta).value == (0.0 if c is None else 1.0)
        heuristic = fake.dll.heuristics[-1]
        assert heuristic[0] == desc and heuristic[4] == ld
        if c is None:  # in place: C is D
            assert (pc, lc) == (pd, ld) and heuristic[3] == ld
        else:  # out of place: the residual, with a layout of its own of D's shape
            assert pc == res.data_ptr and lc not in (ld, args[4], args[6]) and heuristic[3] == lc
            assert fake.dll.layouts[lc][:4] == fake.dll.layouts[ld][:4] == [cl.CUDA_TYPE["float32"], 6, 5, 6]
            assert fake.dll.prefs[heuristic[5]][cl.PREF_MIN_ALIGNMENT["c"]] == 4
    assert len(set(descs.values())) == 12  # the epilogue and the C are part of the plan's key
    # C must be a contiguous array of the result's dtype and size: anything else is for the caller to copy
    assert cl.prepare(x, wt, (), 5, 6, 8, (5, 6), c=res.astype(gp.float64)) is None
    assert cl.prepare(x, wt, (), 5, 6, 8, (5, 6), c=gp.from_numpy(np.ones((6, 5), np.float32)).T) is None


# cudaDataType -> NumPy, for the computing fake
_NP_TYPE = {code: np.dtype(getattr(gp, name)) for name, code in cl.CUDA_TYPE.items() if not name.startswith("float8")}


class ComputingDll(FakeDll):
    """A fake cuBLASLt that also computes, as its documentation says:
    D = epilogue(alpha * op(A) @ op(B) + beta * C (+ bias)), the activation
    after C, GELU the tanh approximation, in float64 from host memory (the CPU
    backend's pointers are host addresses)."""

    @staticmethod
    def _matrix(ptr, layout):
        code, rows, cols, ld, attrs = layout
        assert cl.LAYOUT_BATCH_COUNT not in attrs  # single products only
        dt = _NP_TYPE[code]
        buf = (ctypes.c_char * (((cols - 1) * ld + rows) * dt.itemsize)).from_address(ptr)
        return np.ndarray((rows, cols), dt, buf, strides=(dt.itemsize, ld * dt.itemsize))

    def cublasLtMatmul(self, handle, desc, alpha, a, la, b, lb, beta, c, lc, d, ld, *rest):
        super().cublasLtMatmul(handle, desc, alpha, a, la, b, lb, beta, c, lc, d, ld, *rest)
        compute, _, attrs = self.descs[desc]
        scalar = ctypes.c_double if compute == cl.COMPUTE_64F else ctypes.c_float
        op = {cl.OP_N: lambda m: m, cl.OP_T: lambda m: m.T}
        A = op[attrs.get(cl.DESC_TRANSA, cl.OP_N)](self._matrix(a, self.layouts[la]).astype(np.float64))
        B = op[attrs.get(cl.DESC_TRANSB, cl.OP_N)](self._matrix(b, self.layouts[lb]).astype(np.float64))
        acc = scalar.from_address(alpha).value * (A @ B)
        if scalar.from_address(beta).value:
            acc += scalar.from_address(beta).value * self._matrix(c, self.layouts[lc]).astype(np.float64)
        epi = attrs.get(cl.DESC_EPILOGUE, cl.EPILOGUE_DEFAULT)
        if epi & cl.EPILOGUE_BIAS:
            dt = _NP_TYPE[attrs[cl.DESC_BIAS_DATA_TYPE]]
            bias = np.frombuffer((ctypes.c_char * (acc.shape[0] * dt.itemsize)).from_address(attrs[cl.DESC_BIAS_POINTER]), dt)
            acc += bias.astype(np.float64)[:, None]  # the bias runs along D's rows, our columns
        if epi & cl.EPILOGUE_RELU:
            acc = np.maximum(acc, 0)
        if epi & cl.EPILOGUE_GELU:
            acc = 0.5 * acc * (1 + np.tanh(np.sqrt(2 / np.pi) * (acc + 0.044715 * acc**3)))
        out = self._matrix(d, self.layouts[ld])
        out[...] = acc.astype(out.dtype)
        return 0


@pytest.fixture
def computing(fake, monkeypatch):
    from pygpukit_gemm import epilogue

    if gp.backend() == "cuda":
        pytest.skip("the computing fake reads operands through host pointers (CPU backend)")
    fake.dll = ComputingDll()
    monkeypatch.setattr(epilogue, "_prepared", ext.PlanCache("test.epilogue.prepared"))
    return fake


def _act64(y, activation):
    from math import erf

    return {
        None: lambda v: v,
        "relu": lambda v: np.maximum(v, 0),
        "gelu": lambda v: 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2))),
        "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v**3))),
        "silu": lambda v: v / (1 + np.exp(-v)),
    }[activation](y)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"], ids=str)
def test_fused_linear_on_the_computing_fake(computing, rng, activation):
    """epilogue.fused_linear's cuBLASLt path, with cuBLASLt's documented
    semantics: what it fuses and what it leaves to core's ops give
    act(x @ w.T + b) + r, for every combination."""
    from pygpukit_gemm import epilogue

    x, w = rng.standard_normal((2, 3, 24)).astype(np.float32), rng.standard_normal((10, 24)).astype(np.float32)
    b, r = rng.standard_normal(10).astype(np.float32), rng.standard_normal((2, 3, 10)).astype(np.float32)
    gx, gw, gb, gr = map(gp.from_numpy, (x, w, b, r))
    lt_epi = {None: cl.EPILOGUE_DEFAULT, "relu": cl.EPILOGUE_RELU, "gelu_tanh": cl.EPILOGUE_GELU}.get(activation, cl.EPILOGUE_DEFAULT)
    for with_bias, with_res in itertools.product((False, True), repeat=2):
        ref = _act64(x.astype(np.float64) @ w.T.astype(np.float64) + (b if with_bias else 0), activation) + (r if with_res else 0)
        args = (gb if with_bias else None,)
        kwargs = {"activation": activation, "residual": gr if with_res else None}
        for _ in range(2):  # the first call prepares, the second takes the prepared product
            got = epilogue.fused_linear(gx, gw, *args, **kwargs).to_numpy()
            assert got.shape == (2, 3, 10) and got.dtype == np.float32
            assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-5
        matmul = computing.dll.matmuls[-1]
        attrs = computing.dll.descs[matmul[1]][2]
        with_bias_epi = {
            cl.EPILOGUE_DEFAULT: cl.EPILOGUE_BIAS,
            cl.EPILOGUE_RELU: cl.EPILOGUE_RELU_BIAS,
            cl.EPILOGUE_GELU: cl.EPILOGUE_GELU_BIAS,
        }
        assert attrs.get(cl.DESC_EPILOGUE, cl.EPILOGUE_DEFAULT) == (with_bias_epi[lt_epi] if with_bias else lt_epi)
        # the residual is C only where no activation follows it
        assert (matmul[8] == gr.data_ptr) == (with_res and activation is None)
    assert len(computing.dll.matmuls) == 8  # one library call each


def test_fused_linear_copies_and_falls_back_on_the_computing_fake(computing, rng, monkeypatch):
    from pygpukit_gemm import epilogue

    x = rng.standard_normal((7, 40)).astype(np.float16)
    w = rng.standard_normal((40, 9)).astype(np.float32)  # w given as a transposed view, of another dtype
    b, r = rng.standard_normal(9).astype(np.float32), rng.standard_normal((9, 7)).astype(np.float16)
    gx, gw, gb, gr = gp.from_numpy(x)[:, ::2], gp.from_numpy(w).T, gp.from_numpy(b), gp.from_numpy(r).T
    x64, w64 = x[:, ::2].astype(np.float64), w.T.astype(np.float64)[:, ::2]
    ref = x64 @ w64.T + b + r.T.astype(np.float32).astype(np.float64)
    gw2 = gp.from_numpy(np.ascontiguousarray(w.T[:, ::2]))
    for _ in range(2):  # strided x, mixed dtypes, a transposed residual: converted on every call
        got = epilogue.fused_linear(gx, gw2, gb, residual=gr).to_numpy()
        assert got.dtype == np.float32 and np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-5
    assert computing.dll.matmuls[-1][8] != gr.data_ptr  # C is a converted copy
    assert len(epilogue._prepared) == 1 and epilogue._prepared.get(epilogue._key(gx, gw2, gb, None, gr)).direct is None

    # a cuBLASLt without an algorithm for an activation epilogue: the plain product, the activation after it
    heuristic = ComputingDll.cublasLtMatmulAlgoGetHeuristic

    def no_gelu(self, handle, desc, *args):
        heuristic(self, handle, desc, *args)
        if self.descs[desc.value][2].get(cl.DESC_EPILOGUE) in (cl.EPILOGUE_GELU, cl.EPILOGUE_GELU_BIAS):
            args[-1]._obj.value = 0
        return 0

    monkeypatch.setattr(ComputingDll, "cublasLtMatmulAlgoGetHeuristic", no_gelu)
    x32 = gp.from_numpy(x.astype(np.float32))
    got = epilogue.fused_linear(x32, gw, gb, activation="gelu_tanh").to_numpy()
    ref = _act64(x.astype(np.float64) @ w.astype(np.float64) + b, "gelu_tanh")
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 1e-5
    assert computing.dll.descs[computing.dll.matmuls[-1][1]][2][cl.DESC_EPILOGUE] == cl.EPILOGUE_BIAS
    assert gw.data_ptr == computing.dll.matmuls[-1][3]  # w.T of w (9, 40) viewed: read in place

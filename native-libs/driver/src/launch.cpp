// launch(func, gx, gy, gz, bx, by, bz, shared_mem, stream, args[, dependent]) -> None
//
// `args` holds the kernel parameters packed in the CUDA ABI layout; it is
// handed to cuLaunchKernel with CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE. Parsing
// is done by hand (no pybind11 dispatch) to keep the host overhead small.
// `dependent` (SM 90+): launch with programmatic stream serialization, so the
// kernel's blocks may start before the previous kernel on the stream ends; the
// kernel itself waits for it (griddepcontrol.wait, pgk/pdl.cuh) before it
// touches what that work wrote.
#include "launch.h"

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "context.h"
#include "cuda_api.h"
#include "errors.h"
#include "pygpukit/launch_gate.h"
#include "stats.h"

namespace pgk {

namespace {

std::atomic<const pgk_launch_gate *> g_gate{nullptr};

inline bool parse_u64(PyObject *o, unsigned long long *out) {
  if (PyLong_Check(o)) {
    *out = PyLong_AsUnsignedLongLong(o);
  } else {
    PyObject *i = PyNumber_Index(o);
    if (i == nullptr) return false;
    *out = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
  }
  return !(*out == static_cast<unsigned long long>(-1) && PyErr_Occurred());
}

inline bool parse_u32(PyObject *o, unsigned int *out, const char *what) {
  unsigned long long v = 0;
  if (!parse_u64(o, &v)) return false;
  if (v > UINT_MAX) {
    PyErr_Format(PyExc_OverflowError, "launch(): %s=%llu does not fit in 32 bits", what, v);
    return false;
  }
  *out = static_cast<unsigned int>(v);
  return true;
}

// Selects/makes current the context when the thread_local cache says it is
// not; returns false with a Python error set on failure.
bool slow_make_current() {
  try {
    ensure_current();
    return true;
  } catch (const CudaCallError &e) {
    set_py_error(e);
  } catch (const std::exception &e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return false;
}

std::string kernel_description(CUfunction f, const unsigned int *g, const unsigned int *b, unsigned int smem,
                               unsigned long long stream) {
  const char *name = nullptr;
  if (cu.FuncGetName == nullptr || cu.FuncGetName(&name, f) != CUDA_SUCCESS || name == nullptr) name = nullptr;
  char buf[256];
  std::snprintf(buf, sizeof(buf), " grid=(%u,%u,%u) block=(%u,%u,%u) shared_mem=%u stream=0x%llx", g[0], g[1],
                g[2], b[0], b[1], b[2], smem, stream);
  std::string s = " (kernel ";
  if (name != nullptr) {
    s += "'" + std::string(name) + "'";
  } else {
    char h[32];
    std::snprintf(h, sizeof(h), "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(f)));
    s += h;
  }
  return s + buf;
}

// cuLaunchKernel with the per-thread context check, one retry when another
// library switched the context, and the PYGPUKIT_SYNC_DEBUG check. Returns
// nullptr with a Python error set on failure, else Py_None (new reference).
// One launch; `dependent` adds the programmatic-serialization attribute
// (cuLaunchKernelEx, where the driver has it; a plain launch otherwise).
CUresult launch_once(CUfunction f, const unsigned int *g, const unsigned int *b, unsigned int smem, CUstream s,
                     void **params, void **extra, bool dependent) {
  if (!dependent || cu.LaunchKernelEx == nullptr)
    return cu.LaunchKernel(f, g[0], g[1], g[2], b[0], b[1], b[2], smem, s, params, extra);
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = g[0];
  cfg.gridDimY = g[1];
  cfg.gridDimZ = g[2];
  cfg.blockDimX = b[0];
  cfg.blockDimY = b[1];
  cfg.blockDimZ = b[2];
  cfg.sharedMemBytes = smem;
  cfg.hStream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cu.LaunchKernelEx(&cfg, f, params, extra);
}

PyObject *do_launch(CUfunction f, const unsigned int *g, const unsigned int *b, unsigned int smem,
                    unsigned long long stream, void **params, void **extra, bool dependent = false) {
  if (!selected_ctx_is_current() && !slow_make_current()) return nullptr;
  CUstream s = reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
  bump(g_stats.launches);
  const int token = gate_enter(stream);
  CUresult r = launch_once(f, g, b, smem, s, params, extra, dependent);
  if (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_INVALID_HANDLE) {
    // Another library may have switched this thread's context behind the
    // thread_local cache: verify with the driver and retry once.
    CUcontext want = g_selected_ctx.load(std::memory_order_relaxed);
    CUcontext cur = nullptr;
    if (want != nullptr && cu.CtxGetCurrent(&cur) == CUDA_SUCCESS && cur != want &&
        make_current(want, true) == CUDA_SUCCESS) {
      r = launch_once(f, g, b, smem, s, params, extra, dependent);
    }
  }
  if (r != CUDA_SUCCESS) {
    set_py_cuda_error(dependent && cu.LaunchKernelEx != nullptr ? "cuLaunchKernelEx" : "cuLaunchKernel", r,
                      kernel_description(f, g, b, smem, stream) + ")");
    return nullptr;
  }
  gate_exit(token, stream);
  if (sync_debug()) {
    Py_BEGIN_ALLOW_THREADS
    r = cu.StreamSynchronize(s);
    Py_END_ALLOW_THREADS
    if (r != CUDA_SUCCESS) {
      set_py_cuda_error("cuLaunchKernel", r,
                        kernel_description(f, g, b, smem, stream) +
                            "; detected by cuStreamSynchronize after the launch, PYGPUKIT_SYNC_DEBUG=1)");
      return nullptr;
    }
  }
  Py_RETURN_NONE;
}

PyObject *py_launch(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 10 && nargs != 11) {
    PyErr_Format(PyExc_TypeError,
                 "launch(func, gx, gy, gz, bx, by, bz, shared_mem, stream, args[, dependent]) takes 10 or 11 "
                 "positional arguments (%zd given)",
                 nargs);
    return nullptr;
  }
  int dependent = 0;
  if (nargs == 11 && (dependent = PyObject_IsTrue(args[10])) < 0) return nullptr;
  unsigned long long func = 0, stream = 0;
  unsigned int g[3], b[3], smem = 0;
  if (!parse_u64(args[0], &func) || !parse_u32(args[1], &g[0], "gx") || !parse_u32(args[2], &g[1], "gy") ||
      !parse_u32(args[3], &g[2], "gz") || !parse_u32(args[4], &b[0], "bx") || !parse_u32(args[5], &b[1], "by") ||
      !parse_u32(args[6], &b[2], "bz") || !parse_u32(args[7], &smem, "shared_mem") ||
      !parse_u64(args[8], &stream)) {
    return nullptr;
  }

  PyObject *packed = args[9];
  Py_buffer view;
  bool have_view = false;
  void *data = nullptr;
  size_t size = 0;
  if (PyBytes_CheckExact(packed)) {
    data = PyBytes_AS_STRING(packed);
    size = static_cast<size_t>(PyBytes_GET_SIZE(packed));
  } else {
    if (PyObject_GetBuffer(packed, &view, PyBUF_SIMPLE) != 0) return nullptr;
    have_view = true;
    data = view.buf;
    size = static_cast<size_t>(view.len);
  }
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, data, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  CUfunction f = reinterpret_cast<CUfunction>(static_cast<uintptr_t>(func));
  PyObject *res = do_launch(f, g, b, smem, stream, nullptr, size ? extra : nullptr, dependent != 0);
  if (have_view) PyBuffer_Release(&view);
  return res;
}

// launch_u64(func, grid_x, block_x, stream, *params): the fast path of the
// built-in elementwise kernels, whose parameters are all 8-byte (pointers and
// long long): no packing in Python, one-dimensional grid and block, no shared memory.
constexpr Py_ssize_t kMaxU64Params = 16;

PyObject *py_launch_u64(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 4 || nargs > 4 + kMaxU64Params) {
    PyErr_Format(PyExc_TypeError, "launch_u64(func, grid_x, block_x, stream, *params) takes 4 to %zd arguments (%zd given)",
                 4 + kMaxU64Params, nargs);
    return nullptr;
  }
  unsigned long long func = 0, stream = 0;
  unsigned int g[3] = {1, 1, 1}, b[3] = {1, 1, 1};
  if (!parse_u64(args[0], &func) || !parse_u32(args[1], &g[0], "grid_x") || !parse_u32(args[2], &b[0], "block_x") ||
      !parse_u64(args[3], &stream)) {
    return nullptr;
  }
  unsigned long long values[kMaxU64Params];
  void *params[kMaxU64Params];
  const Py_ssize_t np = nargs - 4;
  for (Py_ssize_t i = 0; i < np; ++i) {
    // Signed values (negative long long) are passed as their two's complement bits.
    PyObject *o = args[4 + i];
    long long sv = PyLong_AsLongLong(o);
    if (sv == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      if (!parse_u64(o, &values[i])) return nullptr;
    } else {
      values[i] = static_cast<unsigned long long>(sv);
    }
    params[i] = &values[i];
  }
  CUfunction f = reinterpret_cast<CUfunction>(static_cast<uintptr_t>(func));
  return do_launch(f, g, b, 0, stream, np ? params : nullptr, nullptr);
}

bool parse_stream(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *sig,
                  unsigned long long *stream) {
  if (nargs != want) {
    PyErr_Format(PyExc_TypeError, "%s takes %zd positional arguments (%zd given)", sig, want, nargs);
    return false;
  }
  return parse_u64(args[0], stream);
}

// set_launch_gate(capsule or None)
PyObject *py_set_launch_gate(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 1) {
    PyErr_SetString(PyExc_TypeError, "set_launch_gate(gate) takes one argument (a capsule or None)");
    return nullptr;
  }
  if (args[0] == Py_None) {
    g_gate.store(nullptr, std::memory_order_release);
    Py_RETURN_NONE;
  }
  auto *gate = static_cast<const pgk_launch_gate *>(PyCapsule_GetPointer(args[0], PGK_LAUNCH_GATE_CAPSULE));
  if (gate == nullptr) return nullptr;
  if (gate->abi_version != PGK_LAUNCH_GATE_ABI || gate->struct_size < sizeof(pgk_launch_gate)) {
    PyErr_Format(PyExc_ValueError, "launch gate ABI %u (size %u) does not match this module's %u (size %zu)",
                 gate->abi_version, gate->struct_size, PGK_LAUNCH_GATE_ABI, sizeof(pgk_launch_gate));
    return nullptr;
  }
  // The gate lives for the process (the runtime leaks it), so a plain store is enough.
  g_gate.store(gate, std::memory_order_release);
  Py_RETURN_NONE;
}

// launch_gate_enter(stream) -> token; for launches made outside this module (cuBLASLt).
PyObject *py_gate_enter(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  unsigned long long stream = 0;
  if (!parse_stream(args, nargs, 1, "launch_gate_enter(stream)", &stream)) return nullptr;
  return PyLong_FromLong(gate_enter(stream));
}

// launch_gate_exit(stream, token) after that launch succeeded.
PyObject *py_gate_exit(PyObject *, PyObject *const *args, Py_ssize_t nargs) {
  unsigned long long stream = 0;
  if (!parse_stream(args, nargs, 2, "launch_gate_exit(stream, token)", &stream)) return nullptr;
  long token = PyLong_AsLong(args[1]);
  if (token == -1 && PyErr_Occurred()) return nullptr;
  gate_exit(static_cast<int>(token), stream);
  Py_RETURN_NONE;
}

}  // namespace

int gate_enter(unsigned long long stream) {
  const pgk_launch_gate *gate = g_gate.load(std::memory_order_acquire);
  if (gate == nullptr) return PGK_GATE_FREE;
  int token = gate->before(gate->ctx, stream);
  if (token == PGK_GATE_FREE) return token;
  // Work captured into a graph does not run now: nothing to pace.
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CUstream s = reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream));
  if (cu.StreamIsCapturing(s, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE) return PGK_GATE_FREE;
  if (token == PGK_GATE_WAIT) {
    Py_BEGIN_ALLOW_THREADS
    gate->wait(gate->ctx, stream);
    Py_END_ALLOW_THREADS
  }
  return token;
}

void gate_exit(int token, unsigned long long stream) {
  if (token == PGK_GATE_FREE) return;
  const pgk_launch_gate *gate = g_gate.load(std::memory_order_acquire);
  if (gate != nullptr) gate->after(gate->ctx, stream);
}

PyMethodDef launch_methods[] = {
    {"launch", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_launch)), METH_FASTCALL,
     "launch(func, gx, gy, gz, bx, by, bz, shared_mem, stream, args, dependent=False)\n--\n\n"
     "Launch a kernel; `args` is a bytes object with the parameters packed in the CUDA ABI layout. "
     "`dependent`: programmatic dependent launch (the kernel waits for its predecessor itself)."},
    {"launch_u64", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_launch_u64)), METH_FASTCALL,
     "launch_u64(func, grid_x, block_x, stream, *params)\n--\n\n"
     "Launch a kernel whose parameters are all 8-byte values (pointers, long long), 1-D grid and block."},
    {"set_launch_gate", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_set_launch_gate)),
     METH_FASTCALL,
     "set_launch_gate(gate)\n--\n\nInstall the scheduler's launch gate (a 'pygpukit.launch_gate' capsule), or None."},
    {"launch_gate_enter", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_gate_enter)),
     METH_FASTCALL,
     "launch_gate_enter(stream)\n--\n\nPass the launch gate before a launch made elsewhere (cuBLASLt); "
     "returns a token for launch_gate_exit."},
    {"launch_gate_exit", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(py_gate_exit)),
     METH_FASTCALL, "launch_gate_exit(stream, token)\n--\n\nAfter that launch succeeded."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace pgk

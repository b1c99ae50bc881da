#include <pybind11/pybind11.h>  // first: it includes Python.h

#include "cuda_api.h"
#include "errors.h"

namespace py = pybind11;

namespace pgk {

std::string cuda_error_name(int code) {
  const char *s = nullptr;
  if (cu.GetErrorName != nullptr && cu.GetErrorName(static_cast<CUresult>(code), &s) == CUDA_SUCCESS &&
      s != nullptr) {
    return s;
  }
  return "CUDA_ERROR_" + std::to_string(code);
}

std::string cuda_error_string(int code) {
  const char *s = nullptr;
  if (cu.GetErrorString != nullptr &&
      cu.GetErrorString(static_cast<CUresult>(code), &s) == CUDA_SUCCESS && s != nullptr) {
    return s;
  }
  return "unrecognized CUDA error code " + std::to_string(code);
}

CudaCallError make_cuda_error(const char *call, CUresult code, const std::string &suffix) {
  std::string name = cuda_error_name(code);
  std::string msg = std::string(call) + " failed: " + name + ": " + cuda_error_string(code) + suffix;
  return CudaCallError(call, static_cast<int>(code), name, msg);
}

void throw_cuda(const char *call, CUresult code, const std::string &suffix) {
  throw make_cuda_error(call, code, suffix);
}

namespace {

// pygpukit._errors.<name> (new reference) or nullptr with no error set when
// pygpukit._errors is not importable (then a builtin class is used instead).
py::object errors_class(const char *name) {
  static PyObject *module = nullptr;  // leaked on purpose; guarded by the GIL
  if (module == nullptr) {
    try {
      py::module_ m = py::module_::import("pygpukit._errors");
      if (module == nullptr) module = m.release().ptr();
    } catch (py::error_already_set &) {
      return py::object();
    }
  }
  PyObject *cls = PyObject_GetAttrString(module, name);
  if (cls == nullptr) {
    PyErr_Clear();
    return py::object();
  }
  return py::reinterpret_steal<py::object>(cls);
}

template <typename... Args>
void raise_instance(const char *cls_name, PyObject *fallback, const std::string &message, Args &&...args) {
  PyErr_Clear();  // the new error replaces any stale indicator
  try {
    py::object cls = errors_class(cls_name);
    if (cls) {
      py::object inst = cls(message, std::forward<Args>(args)...);
      PyErr_SetObject(cls.ptr(), inst.ptr());
      return;
    }
  } catch (py::error_already_set &e) {
    // Fall through to the builtin class below.
    (void)e;
  }
  PyErr_SetString(fallback, message.c_str());
}

}  // namespace

void set_py_error(const CudaCallError &e) {
  raise_instance("CudaError", PyExc_RuntimeError, e.what(), e.call(), e.code(), e.name());
}

void set_py_cuda_error(const char *call, CUresult code, const std::string &suffix) {
  set_py_error(make_cuda_error(call, code, suffix));
}

void set_py_nvrtc_error(const std::string &message) {
  raise_instance("NVRTCError", PyExc_RuntimeError, message);
}

void set_py_compile_error(const std::string &message, const std::string &log) {
  raise_instance("CompileError", PyExc_RuntimeError, message, log);
}

void register_exception_translators() {
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CudaCallError &e) {
      set_py_error(e);
    } catch (const CompileFailure &e) {
      set_py_compile_error(e.what(), e.log());
    } catch (const NvrtcFailure &e) {
      set_py_nvrtc_error(e.what());
    }
  });
}

}  // namespace pgk

// pygpukit._native: the CUDA driver layer. Importing it makes no CUDA call
// and loads no library; init() loads libcuda, nvrtc_load() loads NVRTC.
#include <pybind11/pybind11.h>  // first: it includes Python.h

#include "bindings.h"
#include "errors.h"
#include "launch.h"

PYBIND11_MODULE(_native, m) {
  m.doc() = "pygpukit CUDA driver layer (libcuda and NVRTC loaded at run time)";
  pgk::register_exception_translators();
  pgk::bind_device(m);
  pgk::bind_memory(m);
  pgk::bind_streams(m);
  pgk::bind_modules(m);
  pgk::bind_nvrtc(m);
  if (PyModule_AddFunctions(m.ptr(), pgk::launch_methods) != 0) throw pybind11::error_already_set();
}

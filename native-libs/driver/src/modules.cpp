// CUDA module / function bindings (cuModuleLoadData and friends).
#include <pybind11/pybind11.h>  // first: it includes Python.h

#include <string>

#include "bindings.h"
#include "context.h"
#include "cuda_api.h"
#include "errors.h"
#include "stats.h"

namespace pgk {

namespace {

// ELF (CUBIN) and fatbinary images are loaded as they are; anything else is
// taken to be PTX text, which cuModuleLoadData wants NUL-terminated.
bool needs_nul(const char *p, size_t n) {
  if (n == 0) return true;
  if (n >= 4 && p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') return false;
  if (n >= 4 && static_cast<unsigned char>(p[0]) == 0x50 && static_cast<unsigned char>(p[1]) == 0xed &&
      static_cast<unsigned char>(p[2]) == 0x55 && static_cast<unsigned char>(p[3]) == 0xba) {
    return false;  // fatbin magic 0xBA55ED50, little endian
  }
  return p[n - 1] != '\0';
}

int func_attr(CUfunction f, CUfunction_attribute a) {
  int v = 0;
  check(cu.FuncGetAttribute(&v, a, f), "cuFuncGetAttribute");
  return v;
}

}  // namespace

void bind_modules(py::module_ &m) {
  m.def(
      "module_load",
      [](py::object image) {
        ensure_current();
        BufferView view(image, false);
        const char *data = static_cast<const char *>(view.data());
        size_t n = view.size();
        std::string copy;
        if (needs_nul(data, n)) {
          copy.assign(data, n);  // std::string keeps a terminating NUL after size()
          data = copy.c_str();
        }
        bump(g_stats.module_loads);
        CUmodule mod = nullptr;
        CUresult r;
        {
          py::gil_scoped_release nogil;
          r = cu.ModuleLoadData(&mod, data);
        }
        check(r, "cuModuleLoadData");
        return as_handle(mod);
      },
      py::arg("image"), "Load a CUBIN, fatbin or PTX image (cuModuleLoadData); returns the module handle.");

  m.def(
      "module_unload",
      [](uint64_t h) {
        ensure_current();
        check(cu.ModuleUnload(as_module(h)), "cuModuleUnload");
      },
      py::arg("module"));

  m.def(
      "module_get_function",
      [](uint64_t mod, const std::string &name) {
        ensure_current();
        CUfunction f = nullptr;
        CUresult r = cu.ModuleGetFunction(&f, as_module(mod), name.c_str());
        if (r != CUDA_SUCCESS) throw_cuda("cuModuleGetFunction", r, " (function '" + name + "')");
        return as_handle(f);
      },
      py::arg("module"), py::arg("name"));

  m.def(
      "function_attributes",
      [](uint64_t h) {
        ensure_current();
        CUfunction f = as_function(h);
        py::dict d;
        d["num_regs"] = func_attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS);
        d["shared_size_bytes"] = func_attr(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
        d["local_size_bytes"] = func_attr(f, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
        d["max_threads_per_block"] = func_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
        d["const_size_bytes"] = func_attr(f, CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
        return d;
      },
      py::arg("func"));

  m.def(
      "function_set_max_dynamic_shared_memory",
      [](uint64_t h, int nbytes) {
        ensure_current();
        check(cu.FuncSetAttribute(as_function(h), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
              "cuFuncSetAttribute");
      },
      py::arg("func"), py::arg("nbytes"));
}

}  // namespace pgk

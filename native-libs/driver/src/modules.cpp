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

  m.def(
      "tensor_map_encode_2d",
      [](uint64_t ptr, uint64_t inner, uint64_t outer, uint64_t row_bytes, uint32_t box_inner, uint32_t box_rows,
         int elem_bytes) {
        if (cu.TensorMapEncodeTiled == nullptr) {
          throw_cuda("cuTensorMapEncodeTiled", CUDA_ERROR_NOT_SUPPORTED, " (this driver has no tensor-map encoder)");
        }
        CUtensorMapDataType type;
        switch (elem_bytes) {
          case 1: type = CU_TENSOR_MAP_DATA_TYPE_UINT8; break;
          case 2: type = CU_TENSOR_MAP_DATA_TYPE_UINT16; break;
          case 4: type = CU_TENSOR_MAP_DATA_TYPE_UINT32; break;
          case 8: type = CU_TENSOR_MAP_DATA_TYPE_UINT64; break;
          default: throw py::value_error("tensor_map_encode_2d: elem_bytes must be 1, 2, 4 or 8");
        }
        CUtensorMap map;
        const cuuint64_t dims[2] = {inner, outer};
        const cuuint64_t strides[1] = {row_bytes};
        const cuuint32_t box[2] = {box_inner, box_rows};
        const cuuint32_t ones[2] = {1, 1};
        CUresult r = cu.TensorMapEncodeTiled(&map, type, 2, reinterpret_cast<void *>(ptr), dims, strides, box, ones,
                                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
          throw_cuda("cuTensorMapEncodeTiled", r,
                     " (inner " + std::to_string(inner) + ", outer " + std::to_string(outer) + ", row bytes " +
                         std::to_string(row_bytes) + ", box " + std::to_string(box_inner) + "x" +
                         std::to_string(box_rows) + ")");
        }
        return py::bytes(reinterpret_cast<const char *>(&map), sizeof(map));
      },
      py::arg("ptr"), py::arg("inner"), py::arg("outer"), py::arg("row_bytes"), py::arg("box_inner"),
      py::arg("box_rows"), py::arg("elem_bytes"),
      "The 128-byte CUtensorMap of a row-major 2-D operand with the 128-byte swizzle (cuTensorMapEncodeTiled).");
}

}  // namespace pgk

#include "cuda_api.h"

#include <dlfcn.h>

#include <string>

#include "errors.h"

namespace pgk {

CudaApi cu;

namespace {

using GetProcV2 = PFN_cuGetProcAddress_v12000;  // exported as cuGetProcAddress_v2
using GetProcV1 = PFN_cuGetProcAddress_v11030;  // exported as cuGetProcAddress

struct ProcLookup {
  GetProcV2 v2 = nullptr;
  GetProcV1 v1 = nullptr;

  CUresult get(const char *sym, void **out, int version) const {
    *out = nullptr;
    if (v2 != nullptr) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      CUresult r = v2(sym, out, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
      if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS) {
        r = CUDA_ERROR_NOT_FOUND;
      }
      return r;
    }
    return v1(sym, out, version, CU_GET_PROC_ADDRESS_DEFAULT);
  }

  // 12000 first; the header's CUDA_VERSION if that fails and the ABI allows.
  CUresult get_versioned(const char *sym, void **out, bool fallback_ok) const {
    CUresult r = get(sym, out, kCudaApiVersion);
    if ((r != CUDA_SUCCESS || *out == nullptr) && fallback_ok && CUDA_VERSION != kCudaApiVersion) {
      r = get(sym, out, CUDA_VERSION);
    }
    if (r == CUDA_SUCCESS && *out == nullptr) r = CUDA_ERROR_NOT_FOUND;
    return r;
  }
};

bool g_loaded = false;

}  // namespace

void load_cuda() {
  if (g_loaded) return;
  dlerror();
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char *err = dlerror();
    throw CudaCallError("dlopen", 0, "",
                        std::string("CUDA driver not detected: libcuda.so.1 could not be loaded (") +
                            (err ? err : "unknown dlopen error") + ")");
  }
  ProcLookup lookup;
  lookup.v2 = reinterpret_cast<GetProcV2>(dlsym(lib, "cuGetProcAddress_v2"));
  if (lookup.v2 == nullptr) {
    lookup.v1 = reinterpret_cast<GetProcV1>(dlsym(lib, "cuGetProcAddress"));
  }
  if (lookup.v2 == nullptr && lookup.v1 == nullptr) {
    throw CudaCallError("dlsym", 0, "",
                        "CUDA driver not detected: libcuda.so.1 has no cuGetProcAddress "
                        "(the NVIDIA driver is too old; CUDA 12 or newer is required)");
  }

  CudaApi api;
  void *p = nullptr;
  CUresult r = CUDA_SUCCESS;
  // The error-name functions first so that later failures can be described.
  if (lookup.get_versioned("cuGetErrorName", &p, true) == CUDA_SUCCESS) {
    api.GetErrorName = reinterpret_cast<PFN_cuGetErrorName_v6000>(p);
    cu.GetErrorName = api.GetErrorName;
  }
  if (lookup.get_versioned("cuGetErrorString", &p, true) == CUDA_SUCCESS) {
    api.GetErrorString = reinterpret_cast<PFN_cuGetErrorString_v6000>(p);
    cu.GetErrorString = api.GetErrorString;
  }

#define PGK_LOAD_FIELD(field, sym, type, fallback_ok, required)                        \
  r = lookup.get_versioned(sym, &p, (fallback_ok) != 0);                               \
  if (r != CUDA_SUCCESS && (required)) {                                               \
    throw_cuda("cuGetProcAddress", r, std::string(" (entry point ") + (sym) + ")");    \
  }                                                                                    \
  api.field = reinterpret_cast<type>(p);
  PGK_CUDA_FUNCS(PGK_LOAD_FIELD)
#undef PGK_LOAD_FIELD

#if CUDA_VERSION >= 12030
  if (lookup.get("cuFuncGetName", &p, 12030) == CUDA_SUCCESS && p != nullptr) {
    api.FuncGetName = reinterpret_cast<PFN_cuFuncGetName_v12030>(p);
  }
#endif
  cu = api;
  g_loaded = true;
  // `lib` is intentionally never closed: the table points into it.
}

}  // namespace pgk

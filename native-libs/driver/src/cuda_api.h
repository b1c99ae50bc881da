// libcuda loading and the driver function-pointer table.
//
// Only cuGetProcAddress is taken with dlsym; every other entry point comes
// from cuGetProcAddress(name, ..., 12000, CU_GET_PROC_ADDRESS_DEFAULT) and is
// typed with the CUDA 12.0 ABI of that function (cudaTypedefs.h PFN_*_vNNNN).
#ifndef PYGPUKIT_CUDA_API_H
#define PYGPUKIT_CUDA_API_H

#include <cuda.h>
#include <cudaTypedefs.h>

#if CUDA_VERSION < 12000
#error "pygpukit needs cuda.h from CUDA 12.0 or newer (pip install nvidia-cuda-runtime)"
#endif

namespace pgk {

// The driver ABI version every entry point is requested for.
constexpr int kCudaApiVersion = 12000;

// X(field, "symbol", PFN type, fallback_ok, required)
// required=0: the field stays null when the driver lacks the entry point.
// fallback_ok: the signature at the header's CUDA_VERSION equals the 12.0 one,
// so the entry point may be re-requested with CUDA_VERSION if 12000 fails.
#define PGK_CUDA_FUNCS(X)                                                                    \
  X(Init, "cuInit", PFN_cuInit_v2000, 1, 1)                                                  \
  X(DriverGetVersion, "cuDriverGetVersion", PFN_cuDriverGetVersion_v2020, 1, 1)              \
  X(GetErrorName, "cuGetErrorName", PFN_cuGetErrorName_v6000, 1, 1)                          \
  X(GetErrorString, "cuGetErrorString", PFN_cuGetErrorString_v6000, 1, 1)                    \
  X(DeviceGetCount, "cuDeviceGetCount", PFN_cuDeviceGetCount_v2000, 1, 1)                    \
  X(DeviceGet, "cuDeviceGet", PFN_cuDeviceGet_v2000, 1, 1)                                   \
  X(DeviceGetName, "cuDeviceGetName", PFN_cuDeviceGetName_v2000, 1, 1)                       \
  X(DeviceGetAttribute, "cuDeviceGetAttribute", PFN_cuDeviceGetAttribute_v2000, 1, 1)        \
  X(DeviceTotalMem, "cuDeviceTotalMem", PFN_cuDeviceTotalMem_v3020, 1, 1)                    \
  X(DeviceGetUuid, "cuDeviceGetUuid", PFN_cuDeviceGetUuid_v11040, 1, 1)                      \
  X(DeviceGetPCIBusId, "cuDeviceGetPCIBusId", PFN_cuDeviceGetPCIBusId_v4010, 1, 1)           \
  X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", PFN_cuDevicePrimaryCtxRetain_v7000, 1, 1) \
  X(CtxGetCurrent, "cuCtxGetCurrent", PFN_cuCtxGetCurrent_v4000, 1, 1)                       \
  X(CtxSetCurrent, "cuCtxSetCurrent", PFN_cuCtxSetCurrent_v4000, 1, 1)                       \
  X(CtxSynchronize, "cuCtxSynchronize", PFN_cuCtxSynchronize_v2000, 0, 1)                    \
  X(CtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange",                                \
    PFN_cuCtxGetStreamPriorityRange_v5050, 1, 1)                                             \
  X(MemAlloc, "cuMemAlloc", PFN_cuMemAlloc_v3020, 1, 1)                                      \
  X(MemFree, "cuMemFree", PFN_cuMemFree_v3020, 1, 1)                                         \
  X(MemGetInfo, "cuMemGetInfo", PFN_cuMemGetInfo_v3020, 1, 1)                                \
  X(MemHostAlloc, "cuMemHostAlloc", PFN_cuMemHostAlloc_v2020, 1, 1)                          \
  X(MemFreeHost, "cuMemFreeHost", PFN_cuMemFreeHost_v2000, 1, 1)                             \
  X(MemcpyAsync, "cuMemcpyAsync", PFN_cuMemcpyAsync_v4000, 1, 1)                             \
  X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync", PFN_cuMemcpyHtoDAsync_v3020, 1, 1)                 \
  X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync", PFN_cuMemcpyDtoHAsync_v3020, 1, 1)                 \
  X(MemcpyDtoDAsync, "cuMemcpyDtoDAsync", PFN_cuMemcpyDtoDAsync_v3020, 1, 1)                 \
  X(MemsetD8Async, "cuMemsetD8Async", PFN_cuMemsetD8Async_v3020, 1, 1)                       \
  X(MemsetD32Async, "cuMemsetD32Async", PFN_cuMemsetD32Async_v3020, 1, 1)                    \
  X(StreamCreateWithPriority, "cuStreamCreateWithPriority",                                  \
    PFN_cuStreamCreateWithPriority_v5050, 1, 1)                                              \
  X(StreamDestroy, "cuStreamDestroy", PFN_cuStreamDestroy_v4000, 1, 1)                       \
  X(StreamSynchronize, "cuStreamSynchronize", PFN_cuStreamSynchronize_v2000, 1, 1)           \
  X(StreamQuery, "cuStreamQuery", PFN_cuStreamQuery_v2000, 1, 1)                             \
  X(StreamWaitEvent, "cuStreamWaitEvent", PFN_cuStreamWaitEvent_v3020, 1, 1)                 \
  X(EventCreate, "cuEventCreate", PFN_cuEventCreate_v2000, 1, 1)                             \
  X(EventDestroy, "cuEventDestroy", PFN_cuEventDestroy_v4000, 1, 1)                          \
  X(EventRecord, "cuEventRecord", PFN_cuEventRecord_v2000, 1, 1)                             \
  X(EventSynchronize, "cuEventSynchronize", PFN_cuEventSynchronize_v2000, 1, 1)              \
  X(EventQuery, "cuEventQuery", PFN_cuEventQuery_v2000, 1, 1)                                \
  X(EventElapsedTime, "cuEventElapsedTime", PFN_cuEventElapsedTime_v2000, 1, 1)              \
  X(ModuleLoadData, "cuModuleLoadData", PFN_cuModuleLoadData_v2000, 1, 1)                    \
  X(ModuleUnload, "cuModuleUnload", PFN_cuModuleUnload_v2000, 1, 1)                          \
  X(ModuleGetFunction, "cuModuleGetFunction", PFN_cuModuleGetFunction_v2000, 1, 1)           \
  X(FuncGetAttribute, "cuFuncGetAttribute", PFN_cuFuncGetAttribute_v2020, 1, 1)              \
  X(FuncSetAttribute, "cuFuncSetAttribute", PFN_cuFuncSetAttribute_v9000, 1, 1)              \
  X(LaunchKernel, "cuLaunchKernel", PFN_cuLaunchKernel_v4000, 1, 1)                         \
  /* optional: launches with attributes (programmatic dependent launch, SM 90+) */           \
  X(LaunchKernelEx, "cuLaunchKernelEx", PFN_cuLaunchKernelEx_v11060, 1, 0)                   \
  /* optional: TMA tensor maps (host-only encoder, SM 90 kernels) */                         \
  X(TensorMapEncodeTiled, "cuTensorMapEncodeTiled", PFN_cuTensorMapEncodeTiled_v12000, 1, 0) \
  X(StreamBeginCapture, "cuStreamBeginCapture", PFN_cuStreamBeginCapture_v10010, 1, 1)       \
  X(StreamEndCapture, "cuStreamEndCapture", PFN_cuStreamEndCapture_v10000, 1, 1)             \
  X(StreamIsCapturing, "cuStreamIsCapturing", PFN_cuStreamIsCapturing_v10000, 1, 1)          \
  X(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags",                                \
    PFN_cuGraphInstantiateWithFlags_v11040, 1, 1)                                            \
  X(GraphLaunch, "cuGraphLaunch", PFN_cuGraphLaunch_v10000, 1, 1)                            \
  X(GraphGetNodes, "cuGraphGetNodes", PFN_cuGraphGetNodes_v10000, 1, 1)                      \
  X(GraphExecDestroy, "cuGraphExecDestroy", PFN_cuGraphExecDestroy_v10000, 1, 1)             \
  X(GraphDestroy, "cuGraphDestroy", PFN_cuGraphDestroy_v10000, 1, 1)                        \
  /* Virtual memory management (expandable pool segments); optional: without  */           \
  /* them the driver table reports VMM unsupported and the pool uses cuMemAlloc. */         \
  X(MemGetAllocationGranularity, "cuMemGetAllocationGranularity",                            \
    PFN_cuMemGetAllocationGranularity_v10020, 1, 0)                                          \
  X(MemAddressReserve, "cuMemAddressReserve", PFN_cuMemAddressReserve_v10020, 1, 0)          \
  X(MemAddressFree, "cuMemAddressFree", PFN_cuMemAddressFree_v10020, 1, 0)                   \
  X(MemCreate, "cuMemCreate", PFN_cuMemCreate_v10020, 1, 0)                                  \
  X(MemRelease, "cuMemRelease", PFN_cuMemRelease_v10020, 1, 0)                               \
  X(MemMap, "cuMemMap", PFN_cuMemMap_v10020, 1, 0)                                           \
  X(MemUnmap, "cuMemUnmap", PFN_cuMemUnmap_v10020, 1, 0)                                     \
  X(MemSetAccess, "cuMemSetAccess", PFN_cuMemSetAccess_v10020, 1, 0)

struct CudaApi {
#define PGK_DECLARE_FIELD(field, sym, type, fallback_ok, required) type field = nullptr;
  PGK_CUDA_FUNCS(PGK_DECLARE_FIELD)
#undef PGK_DECLARE_FIELD
  // Optional (driver >= 12.3): only used to name kernels in debug messages.
  CUresult(CUDAAPI *FuncGetName)(const char **name, CUfunction hfunc) = nullptr;
};

// The table. Valid (all required fields non-null) once load_cuda() returned.
extern CudaApi cu;

// dlopen libcuda.so.1 and fill `cu`. Throws CudaCallError; idempotent but not
// thread-safe (context.cpp serializes it under the init lock).
void load_cuda();

}  // namespace pgk

#endif

// The pgk_driver_table exported to pygpukit._rt (Rust) as a PyCapsule.
// Rust calls these from any thread, without the GIL: each makes the device's
// primary context current on the calling thread first and never throws.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "context.h"
#include "cuda_api.h"
#include "errors.h"
#include "pygpukit/driver_table.h"
#include "stats.h"

namespace py = pybind11;

namespace pgk {

namespace {

inline CUstream as_stream(uint64_t h) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(h)); }
inline CUevent as_event(uint64_t h) { return reinterpret_cast<CUevent>(static_cast<uintptr_t>(h)); }

inline CUresult enter(void *ctx) {
  return make_current(static_cast<DeviceState *>(ctx)->ctx, true);
}

int t_mem_alloc(void *ctx, uint64_t size, uint64_t *out_ptr) {
  bump(g_stats.mem_alloc_calls);
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  CUdeviceptr p = 0;
  r = cu.MemAlloc(&p, static_cast<size_t>(size));
  if (r == CUDA_SUCCESS) *out_ptr = static_cast<uint64_t>(p);
  return r;
}

int t_mem_free(void *ctx, uint64_t ptr) {
  bump(g_stats.mem_free_calls);
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.MemFree(static_cast<CUdeviceptr>(ptr));
}

int t_mem_get_info(void *ctx, uint64_t *free_bytes, uint64_t *total_bytes) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  size_t f = 0, t = 0;
  r = cu.MemGetInfo(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free_bytes = f;
    *total_bytes = t;
  }
  return r;
}

int t_memcpy_async(void *ctx, uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.MemcpyAsync(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src),
                        static_cast<size_t>(size), as_stream(stream));
}

int t_memset_d8_async(void *ctx, uint64_t dst, uint8_t value, uint64_t size, uint64_t stream) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.MemsetD8Async(static_cast<CUdeviceptr>(dst), value, static_cast<size_t>(size), as_stream(stream));
}

int t_stream_synchronize(void *ctx, uint64_t stream) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.StreamSynchronize(as_stream(stream));
}

int t_device_synchronize(void *ctx) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.CtxSynchronize();
}

int t_event_create(void *ctx, uint64_t *out_event) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  CUevent ev = nullptr;
  r = cu.EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) *out_event = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ev));
  return r;
}

int t_event_destroy(void *ctx, uint64_t event) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.EventDestroy(as_event(event));
}

int t_event_record(void *ctx, uint64_t event, uint64_t stream) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.EventRecord(as_event(event), as_stream(stream));
}

int t_event_query(void *ctx, uint64_t event) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  r = cu.EventQuery(as_event(event));
  return r == CUDA_ERROR_NOT_READY ? PGK_NOT_READY : static_cast<int>(r);
}

int t_event_synchronize(void *ctx, uint64_t event) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.EventSynchronize(as_event(event));
}

int t_host_alloc(void *ctx, uint64_t size, uint64_t *out_ptr) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  void *p = nullptr;
  r = cu.MemHostAlloc(&p, static_cast<size_t>(size), CU_MEMHOSTALLOC_PORTABLE);
  if (r == CUDA_SUCCESS) *out_ptr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  return r;
}

int t_host_free(void *ctx, uint64_t ptr) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.MemFreeHost(reinterpret_cast<void *>(static_cast<uintptr_t>(ptr)));
}

int t_stream_query(void *ctx, uint64_t stream) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  r = cu.StreamQuery(as_stream(stream));
  return r == CUDA_ERROR_NOT_READY ? PGK_NOT_READY : static_cast<int>(r);
}

// ----- virtual memory management (expandable pool segments) -----

bool vmm_entry_points() {
  return cu.MemGetAllocationGranularity != nullptr && cu.MemAddressReserve != nullptr &&
         cu.MemAddressFree != nullptr && cu.MemCreate != nullptr && cu.MemRelease != nullptr &&
         cu.MemMap != nullptr && cu.MemUnmap != nullptr && cu.MemSetAccess != nullptr;
}

CUmemAllocationProp device_prop(const DeviceState &st) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = st.ordinal;
  return prop;
}

int t_vmm_granularity(void *ctx, uint64_t *out_bytes) {
  if (!vmm_entry_points()) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  const DeviceState &st = *static_cast<DeviceState *>(ctx);
  CUdevice dev = 0;
  r = cu.DeviceGet(&dev, st.ordinal);
  if (r != CUDA_SUCCESS) return r;
  int supported = 0;
  r = cu.DeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  if (r != CUDA_SUCCESS) return r;
  if (!supported) return CUDA_ERROR_NOT_SUPPORTED;
  CUmemAllocationProp prop = device_prop(st);
  size_t g = 0;
  r = cu.MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r == CUDA_SUCCESS) *out_bytes = g;
  return r;
}

int t_vmm_reserve(void *ctx, uint64_t size, uint64_t *out_va) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  CUdeviceptr va = 0;
  r = cu.MemAddressReserve(&va, static_cast<size_t>(size), 0, 0, 0);
  if (r == CUDA_SUCCESS) *out_va = static_cast<uint64_t>(va);
  return r;
}

int t_vmm_free_range(void *ctx, uint64_t va, uint64_t size) {
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  return cu.MemAddressFree(static_cast<CUdeviceptr>(va), static_cast<size_t>(size));
}

int t_vmm_map(void *ctx, uint64_t va, uint64_t size, uint64_t *out_handle) {
  bump(g_stats.mem_alloc_calls);
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  const DeviceState &st = *static_cast<DeviceState *>(ctx);
  CUmemAllocationProp prop = device_prop(st);
  CUmemGenericAllocationHandle h = 0;
  r = cu.MemCreate(&h, static_cast<size_t>(size), &prop, 0);
  if (r != CUDA_SUCCESS) return r;
  const CUdeviceptr p = static_cast<CUdeviceptr>(va);
  r = cu.MemMap(p, static_cast<size_t>(size), 0, h, 0);
  if (r != CUDA_SUCCESS) {
    cu.MemRelease(h);
    return r;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = cu.MemSetAccess(p, static_cast<size_t>(size), &access, 1);
  if (r != CUDA_SUCCESS) {
    cu.MemUnmap(p, static_cast<size_t>(size));
    cu.MemRelease(h);
    return r;
  }
  *out_handle = static_cast<uint64_t>(h);
  return CUDA_SUCCESS;
}

int t_vmm_unmap(void *ctx, uint64_t va, uint64_t size, uint64_t handle) {
  bump(g_stats.mem_free_calls);
  CUresult r = enter(ctx);
  if (r != CUDA_SUCCESS) return r;
  r = cu.MemUnmap(static_cast<CUdeviceptr>(va), static_cast<size_t>(size));
  if (r != CUDA_SUCCESS) return r;
  return cu.MemRelease(static_cast<CUmemGenericAllocationHandle>(handle));
}

// "CUDA_ERROR_OUT_OF_MEMORY: out of memory"; the strings live for the process.
const char *t_error_string(void *, int status) {
  static std::mutex mu;
  static auto *cache = new std::unordered_map<int, std::string>();  // never freed
  try {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(status);
    if (it == cache->end()) {
      std::string s = status == 0 ? std::string("CUDA_SUCCESS: no error")
                                  : cuda_error_name(status) + ": " + cuda_error_string(status);
      it = cache->emplace(status, std::move(s)).first;
    }
    return it->second.c_str();
  } catch (...) {
    return "CUDA error (no description available)";
  }
}

}  // namespace

void fill_driver_table(DeviceState &st) {
  pgk_driver_table &t = st.table;
  t.abi_version = PGK_DRIVER_TABLE_ABI;
  t.struct_size = static_cast<uint32_t>(sizeof(pgk_driver_table));
  t.ctx = &st;
  t.is_host = 0;
  t.device = st.ordinal;
  t.mem_alloc = t_mem_alloc;
  t.mem_free = t_mem_free;
  t.mem_get_info = t_mem_get_info;
  t.memcpy_async = t_memcpy_async;
  t.memset_d8_async = t_memset_d8_async;
  t.stream_synchronize = t_stream_synchronize;
  t.device_synchronize = t_device_synchronize;
  t.event_create = t_event_create;
  t.event_destroy = t_event_destroy;
  t.event_record = t_event_record;
  t.event_query = t_event_query;
  t.event_synchronize = t_event_synchronize;
  t.error_string = t_error_string;
  t.host_alloc = t_host_alloc;
  t.host_free = t_host_free;
  t.stream_query = t_stream_query;
  t.vmm_granularity = t_vmm_granularity;
  t.vmm_reserve = t_vmm_reserve;
  t.vmm_free_range = t_vmm_free_range;
  t.vmm_map = t_vmm_map;
  t.vmm_unmap = t_vmm_unmap;
}

py::object driver_table_capsule() {
  DeviceState &st = ensure_current();
  PyObject *cap = PyCapsule_New(&st.table, PGK_DRIVER_TABLE_CAPSULE, nullptr);
  if (cap == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(cap);
}

}  // namespace pgk

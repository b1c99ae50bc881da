// Driver / device bindings: init, device selection, properties, stats, table.
#include <pybind11/pybind11.h>  // first: it includes Python.h

#include <cstdio>
#include <string>

#include "bindings.h"
#include "context.h"
#include "cuda_api.h"
#include "errors.h"
#include "stats.h"

namespace pgk {

namespace {

int attr(CUdevice dev, CUdevice_attribute a) {
  int v = 0;
  check(cu.DeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
  return v;
}

// For attributes that newer drivers may deprecate or older ones lack.
int attr_or(CUdevice dev, CUdevice_attribute a, int fallback) {
  int v = 0;
  return cu.DeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : fallback;
}

py::dict device_properties(int ordinal) {
  ensure_init();
  if (device_count() == 0) throw_cuda("cuDeviceGet", CUDA_ERROR_NO_DEVICE);
  CUdevice dev = 0;
  CUresult r = cu.DeviceGet(&dev, ordinal);
  if (r != CUDA_SUCCESS) throw_cuda("cuDeviceGet", r, " (ordinal " + std::to_string(ordinal) + ")");

  char name[256] = {0};
  check(cu.DeviceGetName(name, static_cast<int>(sizeof(name) - 1), dev), "cuDeviceGetName");
  size_t total = 0;
  check(cu.DeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  char bus[64] = {0};
  check(cu.DeviceGetPCIBusId(bus, static_cast<int>(sizeof(bus) - 1), dev), "cuDeviceGetPCIBusId");
  CUuuid uuid{};
  check(cu.DeviceGetUuid(&uuid, dev), "cuDeviceGetUuid");
  std::string uuid_hex;
  for (unsigned char c : uuid.bytes) {
    char h[3];
    std::snprintf(h, sizeof(h), "%02x", static_cast<unsigned>(c));
    uuid_hex += h;
  }

  py::dict d;
  d["name"] = std::string(name);
  d["major"] = attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  d["minor"] = attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  d["total_memory"] = total;
  d["multiprocessor_count"] = attr(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  d["l2_cache_size"] = attr(dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  d["max_shared_memory_per_block"] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  d["max_shared_memory_per_block_optin"] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  d["max_threads_per_block"] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  d["warp_size"] = attr(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  d["clock_rate_khz"] = attr_or(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0);
  d["memory_clock_rate_khz"] = attr_or(dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 0);
  d["memory_bus_width"] = attr_or(dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 0);
  d["pci_bus_id"] = std::string(bus);
  d["uuid"] = uuid_hex;
  d["supports_memory_pools"] = attr_or(dev, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0) != 0;
  d["virtual_memory_management_supported"] =
      attr_or(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) != 0;
  return d;
}

}  // namespace

void bind_device(py::module_ &m) {
  m.def(
      "init",
      []() {
        py::gil_scoped_release nogil;  // cuInit can take a while
        ensure_init();
      },
      "Load libcuda.so.1 and call cuInit(0). Raises CudaError when the driver is missing or cuInit fails.");

  m.def(
      "driver_version",
      []() {
        ensure_init();
        int v = 0;
        check(cu.DriverGetVersion(&v), "cuDriverGetVersion");
        return v;
      },
      "CUDA version supported by the driver, e.g. 13000.");

  m.def("device_count", []() { return device_count(); }, "Number of CUDA devices (0 when none).");

  m.def(
      "set_device",
      [](int ordinal) {
        py::gil_scoped_release nogil;  // retaining a primary context can take a while
        set_device(ordinal);
      },
      py::arg("ordinal"), "Retain the device's primary context and make it current for later calls.");

  m.def("current_device", []() { return current_device(); },
        "The device selected by set_device() (0 before the first call).");

  m.def("device_properties", &device_properties, py::arg("ordinal"));

  m.def("driver_table", &driver_table_capsule,
        "PyCapsule 'pygpukit.driver_table' pointing at the static pgk_driver_table of the current device.");

  m.def(
      "stats",
      []() {
        py::dict d;
        d["mem_alloc_calls"] = g_stats.mem_alloc_calls.load(std::memory_order_relaxed);
        d["mem_free_calls"] = g_stats.mem_free_calls.load(std::memory_order_relaxed);
        d["launches"] = g_stats.launches.load(std::memory_order_relaxed);
        d["module_loads"] = g_stats.module_loads.load(std::memory_order_relaxed);
        return d;
      },
      "Call counters: mem_alloc_calls, mem_free_calls (driver table: mem_alloc and vmm_map, mem_free and vmm_unmap), launches, module_loads.");
}

}  // namespace pgk

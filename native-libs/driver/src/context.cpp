#include "context.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "cuda_api.h"
#include "errors.h"

namespace pgk {

void fill_driver_table(DeviceState &state);  // driver_table.cpp

std::atomic<CUcontext> g_selected_ctx{nullptr};
thread_local CUcontext t_current_ctx = nullptr;

namespace {

std::mutex g_init_mu;
std::atomic<bool> g_init_done{false};
std::unique_ptr<CudaCallError> g_init_error;  // set once, before g_init_done
std::unique_ptr<CudaCallError> g_no_device;   // cuInit said CUDA_ERROR_NO_DEVICE
bool g_sync_debug = false;

std::mutex g_device_mu;
DeviceState g_devices[kMaxDevices];
std::atomic<int> g_selected_device{-1};

void init_once() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (g_init_done.load(std::memory_order_acquire)) return;
  try {
    load_cuda();
    CUresult r = cu.Init(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
      g_no_device = std::make_unique<CudaCallError>(make_cuda_error("cuInit", r));
    } else if (r != CUDA_SUCCESS) {
      throw_cuda("cuInit", r);
    }
    const char *dbg = std::getenv("PYGPUKIT_SYNC_DEBUG");
    g_sync_debug = dbg != nullptr && std::strcmp(dbg, "1") == 0;
  } catch (const CudaCallError &e) {
    g_init_error = std::make_unique<CudaCallError>(e);
  }
  g_init_done.store(true, std::memory_order_release);
}

void require_device() {
  ensure_init();
  if (g_no_device) throw *g_no_device;
}

}  // namespace

void ensure_init() {
  if (!g_init_done.load(std::memory_order_acquire)) init_once();
  if (g_init_error) throw *g_init_error;
}

bool sync_debug() { return g_sync_debug; }

int device_count() {
  ensure_init();
  if (g_no_device) return 0;
  int n = 0;
  check(cu.DeviceGetCount(&n), "cuDeviceGetCount");
  return n;
}

CUresult make_current(CUcontext ctx, bool verify) {
  if (!verify && t_current_ctx == ctx && ctx != nullptr) return CUDA_SUCCESS;
  CUcontext cur = nullptr;
  CUresult r = cu.CtxGetCurrent(&cur);
  if (r != CUDA_SUCCESS) return r;
  if (cur != ctx) {
    r = cu.CtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS) {
      t_current_ctx = nullptr;
      return r;
    }
  }
  t_current_ctx = ctx;
  return CUDA_SUCCESS;
}

static DeviceState &retain_device(int ordinal) {
  require_device();
  if (ordinal < 0 || ordinal >= kMaxDevices) {
    throw_cuda("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE, " (ordinal " + std::to_string(ordinal) + ")");
  }
  std::lock_guard<std::mutex> lock(g_device_mu);
  DeviceState &st = g_devices[ordinal];
  if (st.ctx == nullptr) {
    CUdevice dev = 0;
    CUresult r = cu.DeviceGet(&dev, ordinal);
    if (r != CUDA_SUCCESS) throw_cuda("cuDeviceGet", r, " (ordinal " + std::to_string(ordinal) + ")");
    CUcontext ctx = nullptr;
    check(cu.DevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    st.ordinal = ordinal;
    fill_driver_table(st);
    st.ctx = ctx;
  }
  return st;
}

void set_device(int ordinal) {
  DeviceState &st = retain_device(ordinal);
  g_selected_device.store(ordinal, std::memory_order_release);
  g_selected_ctx.store(st.ctx, std::memory_order_release);
  check(make_current(st.ctx, true), "cuCtxSetCurrent");
}

int current_device() {
  int d = g_selected_device.load(std::memory_order_acquire);
  if (d >= 0) return d;
  require_device();
  return 0;
}

DeviceState &ensure_current() {
  int d = g_selected_device.load(std::memory_order_acquire);
  if (d < 0) {
    set_device(0);
    d = 0;
  }
  DeviceState &st = g_devices[d];
  check(make_current(st.ctx, true), "cuCtxSetCurrent");
  return st;
}

}  // namespace pgk

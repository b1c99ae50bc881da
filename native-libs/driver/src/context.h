// Driver initialisation, device selection and the per-thread current context.
//
// set_device() retains the device's primary context (shared with PyTorch and
// CuPy). Every call that needs a context makes the selected one current on
// the calling thread; a thread_local cache makes the check one compare.
#ifndef PYGPUKIT_CONTEXT_H
#define PYGPUKIT_CONTEXT_H

#include <cuda.h>

#include <atomic>

#include "pygpukit/driver_table.h"

namespace pgk {

constexpr int kMaxDevices = 64;

struct DeviceState {
  CUcontext ctx = nullptr;  // retained primary context; never released
  int ordinal = -1;
  pgk_driver_table table{};  // filled by fill_driver_table() (driver_table.cpp)
};

// Loads libcuda and calls cuInit(0) once; afterwards re-throws the first
// failure. cuInit returning CUDA_ERROR_NO_DEVICE is not a failure here
// (device_count() is then 0). Throws CudaCallError. Thread-safe; call it
// without the GIL if it may run the first time.
void ensure_init();
bool sync_debug();  // PYGPUKIT_SYNC_DEBUG=1 at init()

int device_count();
void set_device(int ordinal);
int current_device();  // the selected device; 0 before set_device()

// The selected device, selecting device 0 if none was; made current on this
// thread (verified against cuCtxGetCurrent). Throws CudaCallError.
DeviceState &ensure_current();

// Makes `ctx` current on the calling thread. verify=false trusts the
// thread_local cache; verify=true asks the driver (another library may have
// changed the current context). Never throws.
CUresult make_current(CUcontext ctx, bool verify);

// Hot path (launch): the selected context if it is already current here.
extern std::atomic<CUcontext> g_selected_ctx;
extern thread_local CUcontext t_current_ctx;
inline bool selected_ctx_is_current() {
  CUcontext c = g_selected_ctx.load(std::memory_order_relaxed);
  return c != nullptr && c == t_current_ctx;
}

}  // namespace pgk

#endif

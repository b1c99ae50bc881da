// C++ exceptions of the driver layer and their translation to the Python
// classes of pygpukit._errors (imported lazily, on the first error).
#ifndef PYGPUKIT_ERRORS_H
#define PYGPUKIT_ERRORS_H

#include <cuda.h>

#include <stdexcept>
#include <string>

namespace pgk {

// A failed driver call -> pygpukit._errors.CudaError(message, call, code, name).
class CudaCallError : public std::runtime_error {
 public:
  CudaCallError(std::string call, int code, std::string name, const std::string &message)
      : std::runtime_error(message), call_(std::move(call)), code_(code), name_(std::move(name)) {}
  const std::string &call() const { return call_; }
  int code() const { return code_; }
  const std::string &name() const { return name_; }

 private:
  std::string call_;
  int code_;
  std::string name_;
};

// NVRTC could not be loaded or an NVRTC call failed -> NVRTCError(message).
class NvrtcFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// NVRTC rejected a source -> CompileError(message, log).
class CompileFailure : public std::runtime_error {
 public:
  CompileFailure(const std::string &message, std::string log)
      : std::runtime_error(message), log_(std::move(log)) {}
  const std::string &log() const { return log_; }

 private:
  std::string log_;
};

// "CUDA_ERROR_OUT_OF_MEMORY" (or "CUDA_ERROR_<code>" when the driver does not know it).
std::string cuda_error_name(int code);
// The driver's description ("out of memory").
std::string cuda_error_string(int code);
// "<call> failed: <NAME>: <description><suffix>"
CudaCallError make_cuda_error(const char *call, CUresult code, const std::string &suffix = "");
[[noreturn]] void throw_cuda(const char *call, CUresult code, const std::string &suffix = "");

inline void check(CUresult r, const char *call) {
  if (r != CUDA_SUCCESS) throw_cuda(call, r);
}

// Python side; the GIL must be held. Each sets the Python error indicator.
void set_py_error(const CudaCallError &e);
void set_py_cuda_error(const char *call, CUresult code, const std::string &suffix = "");
void set_py_nvrtc_error(const std::string &message);
void set_py_compile_error(const std::string &message, const std::string &log);

// Registers a (module-local) pybind11 exception translator for the classes above.
void register_exception_translators();

}  // namespace pgk

#endif

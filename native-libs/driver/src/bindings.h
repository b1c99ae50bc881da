// Shared helpers of the pybind11 binding files (module.cpp, memory.cpp,
// streams.cpp, modules.cpp, nvrtc_bindings.cpp).
#ifndef PYGPUKIT_BINDINGS_H
#define PYGPUKIT_BINDINGS_H

// Python.h (via pybind11) must come before any system header.
#include <pybind11/pybind11.h>

#include <cuda.h>

#include <cstdint>

namespace pgk {

namespace py = pybind11;

inline CUstream as_stream(uint64_t h) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(h)); }
inline CUevent as_event(uint64_t h) { return reinterpret_cast<CUevent>(static_cast<uintptr_t>(h)); }
inline CUmodule as_module(uint64_t h) { return reinterpret_cast<CUmodule>(static_cast<uintptr_t>(h)); }
inline CUfunction as_function(uint64_t h) { return reinterpret_cast<CUfunction>(static_cast<uintptr_t>(h)); }
inline CUgraph as_graph(uint64_t h) { return reinterpret_cast<CUgraph>(static_cast<uintptr_t>(h)); }
inline CUgraphExec as_graph_exec(uint64_t h) { return reinterpret_cast<CUgraphExec>(static_cast<uintptr_t>(h)); }
template <typename T>
inline uint64_t as_handle(T p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

// A buffer-protocol view, released (GIL held) when it goes out of scope.
// Raises ValueError for a buffer that is not C-contiguous.
class BufferView {
 public:
  BufferView(py::handle obj, bool writable);
  ~BufferView() { PyBuffer_Release(&view_); }
  BufferView(const BufferView &) = delete;
  BufferView &operator=(const BufferView &) = delete;
  void *data() const { return view_.buf; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

void bind_memory(py::module_ &m);
void bind_streams(py::module_ &m);
void bind_modules(py::module_ &m);
void bind_nvrtc(py::module_ &m);
void bind_device(py::module_ &m);

py::object driver_table_capsule();  // driver_table.cpp

}  // namespace pgk

#endif

// Memory bindings: copies, memsets, pinned host memory, device synchronize.
#include <pybind11/pybind11.h>  // first: it includes Python.h

#include <string>

#include "bindings.h"
#include "context.h"
#include "cuda_api.h"
#include "errors.h"

namespace pgk {

BufferView::BufferView(py::handle obj, bool writable) {
  int flags = PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) throw py::error_already_set();
  if (!PyBuffer_IsContiguous(&view_, 'C')) {
    PyBuffer_Release(&view_);
    throw py::value_error("buffer must be C-contiguous");
  }
}

void bind_memory(py::module_ &m) {
  m.def(
      "mem_get_info",
      []() {
        ensure_current();
        size_t free_b = 0, total_b = 0;
        check(cu.MemGetInfo(&free_b, &total_b), "cuMemGetInfo");
        return py::make_tuple(free_b, total_b);
      },
      "mem_get_info() -> (free, total) in bytes for the current device.");

  m.def(
      "memcpy_htod",
      [](uint64_t dst, py::object src, uint64_t stream) {
        ensure_current();
        BufferView view(src, false);
        if (view.size() == 0) return;
        CUresult r;
        {
          py::gil_scoped_release nogil;
          r = cu.MemcpyHtoDAsync(static_cast<CUdeviceptr>(dst), view.data(), view.size(), as_stream(stream));
        }
        check(r, "cuMemcpyHtoDAsync");
      },
      py::arg("dst"), py::arg("src"), py::arg("stream"),
      "Copy a C-contiguous host buffer to device memory on `stream` (cuMemcpyHtoDAsync).");

  m.def(
      "memcpy_dtoh",
      [](py::object dst, uint64_t src, uint64_t stream) {
        ensure_current();
        BufferView view(dst, true);
        CUresult r = CUDA_SUCCESS;
        const char *call = "cuMemcpyDtoHAsync";
        {
          py::gil_scoped_release nogil;
          if (view.size() != 0) {
            r = cu.MemcpyDtoHAsync(view.data(), static_cast<CUdeviceptr>(src), view.size(), as_stream(stream));
          }
          if (r == CUDA_SUCCESS) {
            call = "cuStreamSynchronize";
            r = cu.StreamSynchronize(as_stream(stream));
          }
        }
        check(r, call);
      },
      py::arg("dst"), py::arg("src"), py::arg("stream"),
      "Copy device memory into a writable C-contiguous buffer on `stream`, then synchronize that stream.");

  m.def(
      "memcpy_dtod",
      [](uint64_t dst, uint64_t src, uint64_t nbytes, uint64_t stream) {
        ensure_current();
        if (nbytes == 0) return;
        check(cu.MemcpyDtoDAsync(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src),
                                 static_cast<size_t>(nbytes), as_stream(stream)),
              "cuMemcpyDtoDAsync");
      },
      py::arg("dst"), py::arg("src"), py::arg("nbytes"), py::arg("stream"));

  m.def(
      "memset_d8",
      [](uint64_t ptr, uint8_t value, uint64_t nbytes, uint64_t stream) {
        ensure_current();
        if (nbytes == 0) return;
        check(cu.MemsetD8Async(static_cast<CUdeviceptr>(ptr), value, static_cast<size_t>(nbytes), as_stream(stream)),
              "cuMemsetD8Async");
      },
      py::arg("ptr"), py::arg("value"), py::arg("nbytes"), py::arg("stream"));

  m.def(
      "memset_d32",
      [](uint64_t ptr, uint32_t value, uint64_t count, uint64_t stream) {
        ensure_current();
        if (count == 0) return;
        check(cu.MemsetD32Async(static_cast<CUdeviceptr>(ptr), value, static_cast<size_t>(count), as_stream(stream)),
              "cuMemsetD32Async");
      },
      py::arg("ptr"), py::arg("value"), py::arg("count"), py::arg("stream"));

  m.def(
      "host_alloc",
      [](uint64_t nbytes) {
        ensure_current();
        void *p = nullptr;
        check(cu.MemHostAlloc(&p, static_cast<size_t>(nbytes), CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
        return as_handle(p);
      },
      py::arg("nbytes"), "Allocate pinned (page-locked, portable) host memory; returns its address.");

  m.def(
      "host_free",
      [](uint64_t ptr) {
        ensure_current();
        check(cu.MemFreeHost(reinterpret_cast<void *>(static_cast<uintptr_t>(ptr))), "cuMemFreeHost");
      },
      py::arg("ptr"));

  m.def(
      "synchronize",
      []() {
        ensure_current();
        CUresult r;
        {
          py::gil_scoped_release nogil;
          r = cu.CtxSynchronize();
        }
        check(r, "cuCtxSynchronize");
      },
      "Wait for all work on the current device (cuCtxSynchronize), GIL released.");
}

}  // namespace pgk

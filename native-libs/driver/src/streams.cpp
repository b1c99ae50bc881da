// Stream, event and graph bindings. Handles are the CUstream / CUevent /
// CUgraph / CUgraphExec pointers as ints.
#include <pybind11/pybind11.h>  // first: it includes Python.h

#include "bindings.h"
#include "context.h"
#include "cuda_api.h"
#include "errors.h"
#include "launch.h"

namespace pgk {

namespace {

// CUDA_SUCCESS -> true, CUDA_ERROR_NOT_READY -> false, anything else raises.
bool ready(CUresult r, const char *call) {
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  throw_cuda(call, r);
}

}  // namespace

void bind_streams(py::module_ &m) {
  m.def(
      "stream_create",
      [](int priority, bool non_blocking) {
        ensure_current();
        CUstream s = nullptr;
        check(cu.StreamCreateWithPriority(&s, non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT, priority),
              "cuStreamCreateWithPriority");
        return as_handle(s);
      },
      py::arg("priority") = 0, py::arg("non_blocking") = true,
      "Create a stream (lower number = higher priority); returns its handle.");

  m.def(
      "stream_destroy",
      [](uint64_t h) {
        ensure_current();
        check(cu.StreamDestroy(as_stream(h)), "cuStreamDestroy");
      },
      py::arg("stream"));

  m.def(
      "stream_synchronize",
      [](uint64_t h) {
        ensure_current();
        CUresult r;
        {
          py::gil_scoped_release nogil;
          r = cu.StreamSynchronize(as_stream(h));
        }
        check(r, "cuStreamSynchronize");
      },
      py::arg("stream"));

  m.def(
      "stream_query",
      [](uint64_t h) {
        ensure_current();
        return ready(cu.StreamQuery(as_stream(h)), "cuStreamQuery");
      },
      py::arg("stream"), "True when all work on the stream has completed.");

  m.def(
      "stream_priority_range",
      []() {
        ensure_current();
        int least = 0, greatest = 0;
        check(cu.CtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange");
        return py::make_tuple(least, greatest);
      },
      "(least, greatest) stream priorities; greatest is the numerically lowest (highest priority).");

  m.def(
      "stream_wait_event",
      [](uint64_t stream, uint64_t event) {
        ensure_current();
        check(cu.StreamWaitEvent(as_stream(stream), as_event(event), 0), "cuStreamWaitEvent");
      },
      py::arg("stream"), py::arg("event"));

  m.def(
      "event_create",
      [](bool timing) {
        ensure_current();
        CUevent ev = nullptr;
        check(cu.EventCreate(&ev, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING), "cuEventCreate");
        return as_handle(ev);
      },
      py::arg("timing") = true);

  m.def(
      "event_destroy",
      [](uint64_t h) {
        ensure_current();
        check(cu.EventDestroy(as_event(h)), "cuEventDestroy");
      },
      py::arg("event"));

  m.def(
      "event_record",
      [](uint64_t ev, uint64_t stream) {
        ensure_current();
        check(cu.EventRecord(as_event(ev), as_stream(stream)), "cuEventRecord");
      },
      py::arg("event"), py::arg("stream"));

  m.def(
      "event_synchronize",
      [](uint64_t h) {
        ensure_current();
        CUresult r;
        {
          py::gil_scoped_release nogil;
          r = cu.EventSynchronize(as_event(h));
        }
        check(r, "cuEventSynchronize");
      },
      py::arg("event"));

  m.def(
      "event_query",
      [](uint64_t h) {
        ensure_current();
        return ready(cu.EventQuery(as_event(h)), "cuEventQuery");
      },
      py::arg("event"), "True when the work captured by the event has completed.");

  // -- stream capture and graphs --
  m.def(
      "stream_begin_capture",
      [](uint64_t h, int mode) {
        ensure_current();
        check(cu.StreamBeginCapture(as_stream(h), static_cast<CUstreamCaptureMode>(mode)), "cuStreamBeginCapture");
      },
      py::arg("stream"), py::arg("mode"),
      "Start capturing the stream's work into a graph (mode: 0 global, 1 thread-local, 2 relaxed).");

  m.def(
      "stream_end_capture",
      [](uint64_t h) {
        ensure_current();
        CUgraph g = nullptr;
        check(cu.StreamEndCapture(as_stream(h), &g), "cuStreamEndCapture");
        return as_handle(g);
      },
      py::arg("stream"), "End the capture; returns the graph's handle.");

  m.def(
      "stream_capture_status",
      [](uint64_t h) {
        ensure_current();
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        check(cu.StreamIsCapturing(as_stream(h), &st), "cuStreamIsCapturing");
        return static_cast<int>(st);
      },
      py::arg("stream"), "0: not capturing, 1: capturing, 2: capture invalidated by an illegal call.");

  m.def(
      "graph_instantiate",
      [](uint64_t graph) {
        ensure_current();
        CUgraphExec exec = nullptr;
        check(cu.GraphInstantiateWithFlags(&exec, as_graph(graph), 0),
              "cuGraphInstantiateWithFlags");
        return as_handle(exec);
      },
      py::arg("graph"));

  m.def(
      "graph_launch",
      [](uint64_t exec, uint64_t stream) {
        ensure_current();
        const int token = gate_enter(stream);
        check(cu.GraphLaunch(as_graph_exec(exec), as_stream(stream)),
              "cuGraphLaunch");
        gate_exit(token, stream);
      },
      py::arg("exec"), py::arg("stream"));

  m.def(
      "graph_node_count",
      [](uint64_t graph) {
        ensure_current();
        size_t n = 0;
        check(cu.GraphGetNodes(as_graph(graph), nullptr, &n), "cuGraphGetNodes");
        return n;
      },
      py::arg("graph"));

  m.def(
      "graph_exec_destroy",
      [](uint64_t exec) {
        ensure_current();
        check(cu.GraphExecDestroy(as_graph_exec(exec)), "cuGraphExecDestroy");
      },
      py::arg("exec"));

  m.def(
      "graph_destroy",
      [](uint64_t graph) {
        ensure_current();
        check(cu.GraphDestroy(as_graph(graph)), "cuGraphDestroy");
      },
      py::arg("graph"));

  m.def(
      "event_elapsed_ms",
      [](uint64_t start, uint64_t end) {
        ensure_current();
        float ms = 0.0f;
        check(cu.EventElapsedTime(&ms, as_event(start), as_event(end)), "cuEventElapsedTime");
        return static_cast<double>(ms);
      },
      py::arg("start"), py::arg("end"));
}

}  // namespace pgk

// NVRTC bindings. nvrtc_compile copies its inputs, then releases the GIL.
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.h"
#include "nvrtc_api.h"

namespace pgk {

void bind_nvrtc(py::module_ &m) {
  m.def(
      "nvrtc_load", [](const std::vector<std::string> &candidates) { return nvrtc_load(candidates); },
      py::arg("candidates"),
      "dlopen the first loadable NVRTC among `candidates` (paths or sonames); returns the file loaded.");

  m.def(
      "nvrtc_version",
      []() {
        auto v = nvrtc_version();
        return py::make_tuple(v.first, v.second);
      },
      "(major, minor) of the loaded NVRTC.");

  m.def("nvrtc_supported_archs", []() { return nvrtc_supported_archs(); },
        "Compute capabilities NVRTC can target, e.g. [75, 80, 86, 89, 90, ...].");

  m.def(
      "nvrtc_compile",
      [](const std::string &source, const std::string &name, const std::vector<std::string> &options,
         const std::vector<std::string> &name_expressions, const std::string &target) {
        CompileResult res;
        try {
          py::gil_scoped_release nogil;
          res = nvrtc_compile(source, name, options, name_expressions, target);
        } catch (const std::invalid_argument &e) {
          throw py::value_error(e.what());
        }
        py::dict lowered;
        for (const auto &kv : res.lowered) lowered[py::str(kv.first)] = py::str(kv.second);
        py::bytes image(res.image);
        py::str log = py::reinterpret_steal<py::str>(
            PyUnicode_DecodeUTF8(res.log.data(), static_cast<Py_ssize_t>(res.log.size()), "replace"));
        return py::make_tuple(image, log, lowered);
      },
      py::arg("source"), py::arg("name"), py::arg("options"), py::arg("name_expressions"), py::arg("target"),
      "Compile CUDA C++ with NVRTC; target is 'cubin' or 'ptx'. Returns (image, log, {name_expression: lowered}).");
}

}  // namespace pgk

// NVRTC, loaded with dlopen from a list of candidate paths (no link-time
// dependency). The functions here do not touch Python: compile() may run
// without the GIL, from several threads at once.
#ifndef PYGPUKIT_NVRTC_API_H
#define PYGPUKIT_NVRTC_API_H

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pgk {

// dlopen each candidate in order; returns the file actually loaded. Once
// loaded, later calls return the same path. Throws NvrtcFailure listing all
// attempts when none loads.
std::string nvrtc_load(const std::vector<std::string> &candidates);
bool nvrtc_loaded();
std::pair<int, int> nvrtc_version();
std::vector<int> nvrtc_supported_archs();

struct CompileResult {
  std::string image;  // CUBIN or PTX (PTX includes NVRTC's terminating NUL)
  std::string log;
  std::vector<std::pair<std::string, std::string>> lowered;  // name expression -> mangled name
};

// target: "cubin" or "ptx". Throws CompileFailure (log attached) when NVRTC
// rejects the source, NvrtcFailure for other NVRTC errors, std::invalid_argument
// for a bad target.
CompileResult nvrtc_compile(const std::string &source, const std::string &name,
                            const std::vector<std::string> &options,
                            const std::vector<std::string> &name_expressions, const std::string &target);

}  // namespace pgk

#endif

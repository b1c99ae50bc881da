#include "nvrtc_api.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>

#include <atomic>
#include <climits>
#include <mutex>
#include <stdexcept>

#include "errors.h"

namespace pgk {

namespace {

// The subset of nvrtc.h we use, declared here so that no NVRTC header is
// needed at build time. nvrtcResult is an int-sized enum; 0 is success.
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram *;
constexpr nvrtcResult NVRTC_SUCCESS = 0;

struct NvrtcApi {
  const char *(*GetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*Version)(int *, int *) = nullptr;
  nvrtcResult (*GetNumSupportedArchs)(int *) = nullptr;
  nvrtcResult (*GetSupportedArchs)(int *) = nullptr;
  nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *) = nullptr;
  nvrtcResult (*DestroyProgram)(nvrtcProgram *) = nullptr;
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *) = nullptr;
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *) = nullptr;
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char *) = nullptr;
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *) = nullptr;
  nvrtcResult (*GetPTX)(nvrtcProgram, char *) = nullptr;
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *) = nullptr;
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char *) = nullptr;
  nvrtcResult (*AddNameExpression)(nvrtcProgram, const char *) = nullptr;
  nvrtcResult (*GetLoweredName)(nvrtcProgram, const char *, const char **) = nullptr;
};

std::mutex g_load_mu;
std::atomic<bool> g_loaded{false};
NvrtcApi nv;  // written once under g_load_mu before g_loaded is set
std::string g_path;

template <typename T>
bool sym(void *lib, const char *name, T &out, std::string &missing) {
  out = reinterpret_cast<T>(dlsym(lib, name));
  if (out == nullptr) {
    if (!missing.empty()) missing += ", ";
    missing += name;
    return false;
  }
  return true;
}

std::string loaded_path(void *lib, const std::string &requested) {
  struct link_map *lm = nullptr;
  std::string path;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr && lm->l_name[0] != '\0') {
    path = lm->l_name;
  } else {
    path = requested;
  }
  if (!path.empty() && path[0] != '/') {
    char buf[PATH_MAX];
    if (realpath(path.c_str(), buf) != nullptr) path = buf;
  }
  return path;
}

void require_loaded() {
  if (!g_loaded.load(std::memory_order_acquire)) {
    throw NvrtcFailure("NVRTC is not loaded: call nvrtc_load() first");
  }
}

std::string result_string(nvrtcResult r) {
  const char *s = nv.GetErrorString != nullptr ? nv.GetErrorString(r) : nullptr;
  return s != nullptr ? std::string(s) : "NVRTC error " + std::to_string(r);
}

[[noreturn]] void throw_nvrtc(const char *call, nvrtcResult r, const std::string &context = "") {
  throw NvrtcFailure(std::string(call) + " failed: " + result_string(r) + context);
}

struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p != nullptr) nv.DestroyProgram(&p);
  }
};

}  // namespace

std::string nvrtc_load(const std::vector<std::string> &candidates) {
  std::lock_guard<std::mutex> lock(g_load_mu);
  if (g_loaded.load(std::memory_order_acquire)) return g_path;
  std::string tried;
  for (const std::string &cand : candidates) {
    dlerror();
    void *lib = dlopen(cand.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char *err = dlerror();
      tried += "\n  " + cand + ": " + (err ? err : "dlopen failed");
      continue;
    }
    NvrtcApi api;
    std::string missing;
    sym(lib, "nvrtcGetErrorString", api.GetErrorString, missing);
    sym(lib, "nvrtcVersion", api.Version, missing);
    sym(lib, "nvrtcGetNumSupportedArchs", api.GetNumSupportedArchs, missing);
    sym(lib, "nvrtcGetSupportedArchs", api.GetSupportedArchs, missing);
    sym(lib, "nvrtcCreateProgram", api.CreateProgram, missing);
    sym(lib, "nvrtcDestroyProgram", api.DestroyProgram, missing);
    sym(lib, "nvrtcCompileProgram", api.CompileProgram, missing);
    sym(lib, "nvrtcGetProgramLogSize", api.GetProgramLogSize, missing);
    sym(lib, "nvrtcGetProgramLog", api.GetProgramLog, missing);
    sym(lib, "nvrtcGetPTXSize", api.GetPTXSize, missing);
    sym(lib, "nvrtcGetPTX", api.GetPTX, missing);
    sym(lib, "nvrtcGetCUBINSize", api.GetCUBINSize, missing);
    sym(lib, "nvrtcGetCUBIN", api.GetCUBIN, missing);
    sym(lib, "nvrtcAddNameExpression", api.AddNameExpression, missing);
    sym(lib, "nvrtcGetLoweredName", api.GetLoweredName, missing);
    if (!missing.empty()) {
      tried += "\n  " + cand + ": loaded but lacks " + missing;
      dlclose(lib);
      continue;
    }
    nv = api;
    g_path = loaded_path(lib, cand);
    g_loaded.store(true, std::memory_order_release);
    return g_path;  // the handle stays open for the life of the process
  }
  if (candidates.empty()) tried = "\n  (no candidates given)";
  throw NvrtcFailure("NVRTC could not be loaded; tried:" + tried);
}

bool nvrtc_loaded() { return g_loaded.load(std::memory_order_acquire); }

std::pair<int, int> nvrtc_version() {
  require_loaded();
  int major = 0, minor = 0;
  nvrtcResult r = nv.Version(&major, &minor);
  if (r != NVRTC_SUCCESS) throw_nvrtc("nvrtcVersion", r);
  return {major, minor};
}

std::vector<int> nvrtc_supported_archs() {
  require_loaded();
  int n = 0;
  nvrtcResult r = nv.GetNumSupportedArchs(&n);
  if (r != NVRTC_SUCCESS) throw_nvrtc("nvrtcGetNumSupportedArchs", r);
  std::vector<int> archs(static_cast<size_t>(n > 0 ? n : 0));
  if (n > 0) {
    r = nv.GetSupportedArchs(archs.data());
    if (r != NVRTC_SUCCESS) throw_nvrtc("nvrtcGetSupportedArchs", r);
  }
  return archs;
}

CompileResult nvrtc_compile(const std::string &source, const std::string &name,
                            const std::vector<std::string> &options,
                            const std::vector<std::string> &name_expressions, const std::string &target) {
  const bool cubin = target == "cubin";
  if (!cubin && target != "ptx") {
    throw std::invalid_argument("nvrtc_compile: target must be 'cubin' or 'ptx', not '" + target + "'");
  }
  require_loaded();
  const std::string ctx = " (program '" + name + "')";

  Program prog;
  nvrtcResult r = nv.CreateProgram(&prog.p, source.c_str(), name.c_str(), 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) throw_nvrtc("nvrtcCreateProgram", r, ctx);
  for (const std::string &expr : name_expressions) {
    r = nv.AddNameExpression(prog.p, expr.c_str());
    if (r != NVRTC_SUCCESS) throw_nvrtc("nvrtcAddNameExpression", r, " ('" + expr + "')" + ctx);
  }

  std::vector<const char *> opts;
  opts.reserve(options.size());
  for (const std::string &o : options) opts.push_back(o.c_str());
  if (opts.size() > static_cast<size_t>(INT_MAX)) throw std::invalid_argument("nvrtc_compile: too many options");
  nvrtcResult cr = nv.CompileProgram(prog.p, static_cast<int>(opts.size()), opts.empty() ? nullptr : opts.data());

  CompileResult out;
  size_t log_size = 0;
  if (nv.GetProgramLogSize(prog.p, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    if (nv.GetProgramLog(prog.p, &out.log[0]) == NVRTC_SUCCESS) {
      while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
    } else {
      out.log.clear();
    }
  }
  if (cr != NVRTC_SUCCESS) {
    std::string msg = "NVRTC failed to compile '" + name + "': " + result_string(cr);
    std::string trimmed = out.log;
    while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
    if (!trimmed.empty()) msg += "\n" + trimmed;
    // NVRTC_ERROR_COMPILATION and option errors (NVRTC_ERROR_INVALID_OPTION)
    // both come with a log worth showing.
    throw CompileFailure(msg, out.log);
  }

  size_t size = 0;
  r = cubin ? nv.GetCUBINSize(prog.p, &size) : nv.GetPTXSize(prog.p, &size);
  if (r != NVRTC_SUCCESS) throw_nvrtc(cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize", r, ctx);
  if (size == 0) {
    throw NvrtcFailure(std::string("NVRTC produced no ") + (cubin ? "CUBIN" : "PTX") + ctx +
                       (cubin ? ": target 'cubin' needs a real architecture (--gpu-architecture=sm_XX)" : ""));
  }
  out.image.resize(size);
  r = cubin ? nv.GetCUBIN(prog.p, &out.image[0]) : nv.GetPTX(prog.p, &out.image[0]);
  if (r != NVRTC_SUCCESS) throw_nvrtc(cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX", r, ctx);

  for (const std::string &expr : name_expressions) {
    const char *lowered = nullptr;
    r = nv.GetLoweredName(prog.p, expr.c_str(), &lowered);
    if (r != NVRTC_SUCCESS || lowered == nullptr) throw_nvrtc("nvrtcGetLoweredName", r, " ('" + expr + "')" + ctx);
    out.lowered.emplace_back(expr, lowered);
  }
  return out;
}

}  // namespace pgk

#include "nvrtc.hpp"

#include "runtime/base/strings.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <chrono>
#include <cstdlib>

namespace autotune::cuda {
namespace {

struct NvrtcApi {
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) cubin = nullptr;
  decltype(&::nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&::nvrtcGetPTX) ptx = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) num_archs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) archs = nullptr;
  std::string error;
  std::string version_text;
};

NvrtcApi load() {
  NvrtcApi api;
  std::vector<std::string> candidates = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> dirs;
  if (const char* home = std::getenv("CUDA_HOME")) {
    dirs.push_back(std::string(home) + "/lib64/");
  }
  dirs.push_back("/usr/local/cuda/lib64/");
  for (const auto& dir : dirs) {
    for (const char* n : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
      candidates.push_back(dir + n);
    }
  }
  void* lib = nullptr;
  std::string first_error;
  for (const auto& name : candidates) {
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      break;
    }
    if (first_error.empty()) {
      const char* e = dlerror();
      first_error = e ? e : name;
    }
  }
  if (!lib) {
    api.error = "cannot load NVRTC (tried libnvrtc.so.13/.12 on the library path, $CUDA_HOME/lib64 "
                "and /usr/local/cuda/lib64): " +
                first_error;
    return api;
  }
  auto sym = [&](const char* name) {
    void* p = dlsym(lib, name);
    if (!p && api.error.empty()) {
      api.error = std::string("NVRTC lacks the symbol ") + name;
    }
    return p;
  };
#define AUTOTUNE_NVRTC_SYM(member, name)                                                           \
  api.member = reinterpret_cast<decltype(api.member)>(sym(name))
  AUTOTUNE_NVRTC_SYM(version, "nvrtcVersion");
  AUTOTUNE_NVRTC_SYM(error_string, "nvrtcGetErrorString");
  AUTOTUNE_NVRTC_SYM(create, "nvrtcCreateProgram");
  AUTOTUNE_NVRTC_SYM(destroy, "nvrtcDestroyProgram");
  AUTOTUNE_NVRTC_SYM(compile, "nvrtcCompileProgram");
  AUTOTUNE_NVRTC_SYM(log_size, "nvrtcGetProgramLogSize");
  AUTOTUNE_NVRTC_SYM(log, "nvrtcGetProgramLog");
  AUTOTUNE_NVRTC_SYM(cubin_size, "nvrtcGetCUBINSize");
  AUTOTUNE_NVRTC_SYM(cubin, "nvrtcGetCUBIN");
  AUTOTUNE_NVRTC_SYM(ptx_size, "nvrtcGetPTXSize");
  AUTOTUNE_NVRTC_SYM(ptx, "nvrtcGetPTX");
  AUTOTUNE_NVRTC_SYM(num_archs, "nvrtcGetNumSupportedArchs");
  AUTOTUNE_NVRTC_SYM(archs, "nvrtcGetSupportedArchs");
#undef AUTOTUNE_NVRTC_SYM
  if (api.error.empty()) {
    int major = 0;
    int minor = 0;
    api.version(&major, &minor);
    api.version_text = std::to_string(major) + "." + std::to_string(minor);
  }
  return api;
}

const NvrtcApi& nvrtc() {
  static const NvrtcApi api = load();
  if (!api.error.empty()) {
    throw Error(ErrorKind::compile, api.error);
  }
  return api;
}

// Owner of an nvrtcProgram; the destructor never throws.
class Program {
public:
  explicit Program(nvrtcProgram p) : m_p(p) {}
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() {
    if (m_p) {
      nvrtc().destroy(&m_p);
    }
  }
  nvrtcProgram get() const { return m_p; }

private:
  nvrtcProgram m_p;
};

std::string program_log(nvrtcProgram p) {
  size_t size = 0;
  if (nvrtc().log_size(p, &size) != NVRTC_SUCCESS || size <= 1) {
    return {};
  }
  std::string log(size, '\0');
  nvrtc().log(p, log.data());
  log.resize(size - 1);
  return log;
}

} // namespace

std::string nvrtc_version() {
  return nvrtc().version_text;
}

bool nvrtc_available(std::string* why) {
  try {
    nvrtc();
    return true;
  } catch (const Error& e) {
    if (why) {
      *why = e.what();
    }
    return false;
  }
}

std::vector<std::string> nvrtc_supported_archs() {
  const auto& api = nvrtc();
  int n = 0;
  api.num_archs(&n);
  std::vector<int> archs(size_t(n > 0 ? n : 0));
  if (n > 0) {
    api.archs(archs.data());
  }
  std::vector<std::string> out;
  for (int a : archs) {
    out.push_back("sm_" + std::to_string(a));
  }
  return out;
}

std::vector<std::string> effective_options(const CompileRequest& request) {
  std::vector<std::string> options = {"--gpu-architecture=" + request.arch};
  options.insert(options.end(), request.options.begin(), request.options.end());
  return options;
}

Result<CompileOutput> compile(const CompileRequest& request) {
  const auto& api = nvrtc();
  nvrtcProgram raw = nullptr;
  nvrtcResult rc =
      api.create(&raw, request.source.c_str(), request.name.c_str(), 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS) {
    return fail(std::string("nvrtcCreateProgram failed: ") + api.error_string(rc));
  }
  Program program(raw);
  std::vector<std::string> options = effective_options(request);
  std::vector<const char*> argv;
  for (const auto& o : options) {
    argv.push_back(o.c_str());
  }
  auto t0 = std::chrono::steady_clock::now();
  rc = api.compile(program.get(), int(argv.size()), argv.data());
  CompileOutput out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.log = program_log(program.get());
  if (rc != NVRTC_SUCCESS) {
    return fail(std::string("NVRTC could not compile ") + request.name + " (" +
                    api.error_string(rc) + ") with options: " + join(options, " "),
                out.log);
  }
  bool want_ptx = starts_with(request.arch, "compute_");
  size_t size = 0;
  rc = want_ptx ? api.ptx_size(program.get(), &size) : api.cubin_size(program.get(), &size);
  if (rc != NVRTC_SUCCESS || size == 0) {
    return fail(std::string("NVRTC produced no ") + (want_ptx ? "PTX" : "cubin") + " for " +
                    request.name + " with options: " + join(options, " "),
                out.log);
  }
  out.binary.resize(size);
  rc = want_ptx ? api.ptx(program.get(), out.binary.data())
                : api.cubin(program.get(), out.binary.data());
  if (rc != NVRTC_SUCCESS) {
    return fail(std::string("NVRTC output retrieval failed: ") + api.error_string(rc));
  }
  if (want_ptx && !out.binary.empty() && out.binary.back() == '\0') {
    out.binary.pop_back();
  }
  return out;
}

} // namespace autotune::cuda

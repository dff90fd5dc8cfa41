// NVRTC, loaded with dlopen (a deployment machine that only dispatches stored
// cubins needs no NVRTC at all). A failed compilation is a value carrying the
// program log and the options used (jitify2-style messages).
#pragma once

#include "runtime/base/error.hpp"

#include <string>
#include <vector>

namespace autotune::cuda {

struct CompileOutput {
  std::string binary; // cubin for sm_XX targets, PTX text for compute_XX targets
  std::string log;    // warnings (ptxas included) even on success
  double seconds = 0; // wall time of nvrtcCompileProgram
};

struct CompileRequest {
  std::string source;
  std::string name = "kernel.cu";
  // e.g. "sm_90a" (cubin) or "compute_90a" (PTX).
  std::string arch;
  std::vector<std::string> options; // besides --gpu-architecture
};

// "13.0" style version of the loaded NVRTC; throws Error(compile) when unavailable.
std::string nvrtc_version();
bool nvrtc_available(std::string* why = nullptr);

// The architectures this NVRTC can target, as "sm_90" style names.
std::vector<std::string> nvrtc_supported_archs();

Result<CompileOutput> compile(const CompileRequest& request);

// The full option list compile() passes, for cache keys and error messages.
std::vector<std::string> effective_options(const CompileRequest& request);

} // namespace autotune::cuda

// Parallel compilation of variants with NVRTC: a pool of worker threads (one per
// core by default), each compiling one variant at a time. NVRTC programs are
// independent, so the pool scales with cores.
#pragma once

#include "runtime/cuda/nvrtc.hpp"
#include "runtime/dispatch/variant.hpp"

#include <functional>
#include <vector>

namespace autotune {

struct CompileJob {
  const VariantSource* variant;
  Result<cuda::CompileOutput> output = Failure{"not compiled", ""};
};

// Compiles every job; `done` is called after each one (from the worker thread,
// serialized by a mutex) with the number finished so far.
void compile_all(std::vector<CompileJob>& jobs, int threads,
                 const std::function<void(CompileJob&, size_t finished)>& done);

int default_jobs();

} // namespace autotune

// A variant = one op's template instantiated for one configuration, problem
// dtype set and arch. describe_variant() computes what NVRTC compiles and the
// variant's cache key; the dispatcher (default variants) and the tuner share it.
#pragma once

#include "runtime/base/error.hpp"
#include "runtime/cuda/nvrtc.hpp"
#include "runtime/ops/op.hpp"

#include <string>
#include <vector>

namespace autotune {

struct VariantSource {
  std::string op;
  std::string config_id;
  std::string arch;
  std::string kernel;
  std::string template_hash; // sha256 of the expanded template source
  std::string nvrtc_version;
  std::vector<std::string> options; // as passed to NVRTC, --gpu-architecture included
  std::string key;                  // cache::variant_key over all of the above
  std::string key_dump;             // what was hashed, for AUTOTUNE_LOG=debug
  cuda::CompileRequest request;
};

// The expanded template source and its hash, computed once per process and path.
const std::string& template_source(const std::string& path);
const std::string& template_hash(const std::string& path);

VariantSource describe_variant(const Op& op, const Config& config, const Problem& problem,
                               const std::string& arch);

Result<cuda::CompileOutput> compile_variant(const VariantSource& variant);

} // namespace autotune

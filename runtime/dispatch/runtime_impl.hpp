// Internals of autotune::Runtime shared by the per-op API files
// (runtime/dispatch/<op>_api.cpp): the resolved-variant cache and the launch.
#pragma once

#include "autotune.hpp"

#include "cache/database.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/op.hpp"

#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>

namespace autotune {

DType to_dtype(ElementType t);

// A variant resolved for one (op, problem): loaded once, then reused by every call.
struct LoadedVariant {
  cuda::Module module;
  CUfunction function = nullptr;
  Config config;
  Selection selection;
};

struct Runtime::Impl {
  RuntimeOptions options;
  std::optional<cuda::PrimaryContext> context;
  cuda::DeviceInfo device;
  cache::DeviceRecord device_record;
  std::optional<cache::Database> db;
  mutable std::shared_mutex mutex;
  std::map<std::string, std::unique_ptr<LoadedVariant>> loaded; // op + '|' + problem key

  explicit Impl(const RuntimeOptions& o);
  // The variant for a problem: the stored winner, else the op's default variant.
  const LoadedVariant& get(const Op& op, const Problem& problem);
  void launch(const Op& op, const Problem& problem, const LoadedVariant& v, ArgPack& args,
              CUstream stream) const;

private:
  std::unique_ptr<LoadedVariant> resolve(const Op& op, const Problem& problem);
};

} // namespace autotune

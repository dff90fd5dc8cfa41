// Internals of autotune::Runtime shared by the per-op API files
// (runtime/dispatch/<op>_api.cpp): the resolved-variant cache and the launch.
#pragma once

#include "autotune.hpp"

#include "cache/database.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/op.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>

namespace autotune {

DType to_dtype(ElementType t);

// A variant resolved for one (op, problem): loaded once, then reused by every call.
struct LoadedVariant {
  cuda::Module module;
  CUfunction function = nullptr;
  Config config;
  Selection selection;
};

// What an op's API caches per call signature for the warm path (loaded variant,
// parsed shape, launch geometry), so a repeated call parses no strings.
struct PlanBase {
  virtual ~PlanBase() = default;
};

struct Runtime::Impl {
  RuntimeOptions options;
  std::optional<cuda::PrimaryContext> context;
  cuda::DeviceInfo device;
  cache::DeviceRecord device_record;
  std::optional<cache::Database> db;
  mutable std::shared_mutex mutex;
  std::map<std::string, std::unique_ptr<LoadedVariant>> loaded; // op + '|' + problem key
  std::unordered_map<std::string, std::unique_ptr<PlanBase>> plans; // op API's signature bytes

  // The plan cached under `signature`, built by make() on the first call. make()
  // runs without the lock held (it may resolve and load a variant).
  template <typename Plan, typename Make> const Plan& plan(const std::string& signature, Make&& make) {
    {
      std::shared_lock lock(mutex);
      auto it = plans.find(signature);
      if (it != plans.end()) {
        return static_cast<const Plan&>(*it->second);
      }
    }
    std::unique_ptr<PlanBase> built = std::make_unique<Plan>(make());
    std::unique_lock lock(mutex);
    auto it = plans.emplace(signature, std::move(built)).first; // keeps a concurrent twin
    return static_cast<const Plan&>(*it->second);
  }

  explicit Impl(const RuntimeOptions& o);
  // The variant for a problem: the stored winner, else the op's default variant.
  const LoadedVariant& get(const Op& op, const Problem& problem);
  void launch(const Op& op, const Problem& problem, const LoadedVariant& v, ArgPack& args,
              CUstream stream) const;

private:
  std::unique_ptr<LoadedVariant> resolve(const Op& op, const Problem& problem);
};

} // namespace autotune

// Internals of autotune::Runtime: the resolved-variant cache, the per-signature
// launch plans of the warm path, and the checks every call goes through.
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

// A variant resolved for one (op, problem): loaded once, then reused by every call.
struct LoadedVariant {
  cuda::Module module;
  CUfunction function = nullptr;
  Config config;
  Selection selection;
};

// What a call signature (an op and the values of its call fields) resolves to.
struct SignaturePlan {
  const LoadedVariant* variant = nullptr;
  std::unique_ptr<CallPlan> launch;
};

struct SignatureKey {
  const Op* op;
  CallValues values;
  bool operator==(const SignatureKey& o) const { return op == o.op && values == o.values; }
};

struct SignatureHash {
  size_t operator()(const SignatureKey& k) const noexcept;
};

struct Runtime::Impl {
  RuntimeOptions options;
  std::optional<cuda::PrimaryContext> context;
  cuda::DeviceInfo device;
  cache::DeviceRecord device_record;
  std::optional<cache::Database> db;

  // Warm calls take `mutex` shared for one lookup; it is held exclusively only to
  // insert a finished entry. Resolving (database, NVRTC, module load) runs under
  // `resolve_mutex` alone, so a compile never blocks the warm calls of other threads.
  mutable std::shared_mutex mutex;
  std::mutex resolve_mutex;
  std::map<std::string, std::unique_ptr<LoadedVariant>> loaded; // op + '|' + problem key
  std::map<std::string, std::string> cubins; // variant key -> cubin (under resolve_mutex)
  std::unordered_map<SignatureKey, SignaturePlan, SignatureHash> plans;

  explicit Impl(const RuntimeOptions& o);

  // Binds and checks a call of `op` (C args struct `args`), then finds or builds its
  // plan. Throws Error(usage) naming the argument for a bad call. A query of what a
  // call would run (`launching` false) skips the check of the memory itself.
  const SignaturePlan& prepare(const Op& op, const void* args, BoundCall& bound,
                               bool launching = true);
  // prepare(), then packs and launches on `stream`.
  void call(const Op& op, const void* args, CUstream stream);

private:
  // The variant for a problem: the stored winner, else the op's default variant.
  const LoadedVariant& get(const Op& op, const Problem& problem);
  std::unique_ptr<LoadedVariant> resolve(const Op& op, const Problem& problem);
  // The configuration of the stored winner nearest to `problem` that can run it, and
  // that winner's problem key: same device, op, NVRTC and non-size fields (dtypes,
  // flags, layout); distance = sum over size fields of weight * |log2 ratio|.
  std::optional<std::pair<Config, std::string>> nearest(const Op& op, const Problem& problem);
  // Every given tensor is device memory of this runtime's GPU and lies within its
  // allocation (driver pointer attributes; allocations seen before skip the query).
  void check_memory(const ArgsDesc& desc, const BoundCall& bound) const;
};

} // namespace autotune

// Internals of autotune::Runtime: the resolved-variant cache, the per-signature
// launch plans of the warm path, and the checks every call goes through.
#pragma once

#include "autotune.hpp"
#include "inflight.hpp"

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

struct VariantSource;

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
  std::string database_path; // options.database or the default path
  std::optional<cuda::PrimaryContext> context;
  cuda::DeviceInfo device;
  cache::DeviceRecord device_record;
  std::string device_key; // device_record.key()

  // Locks, each held briefly and never across an NVRTC compile or a tune:
  // - `mutex`: warm calls take it shared for one lookup of `plans` (or `loaded`); it
  //   is held exclusively only to insert a finished entry, so a warm call never
  //   waits on a resolve.
  // - `db_mutex`: the SQLite connection, for one query at a time.
  // - `cubin_mutex`: the per-process cubin map.
  // Resolves of different problems run in parallel; `resolving` lets one thread
  // resolve each problem key while others wanting it wait for its result (or error),
  // and `compiling` compiles each variant key once however many problems need it.
  // `tune_mutex` runs one Policy::tune at a time, so tunes do not time their
  // variants against each other on the GPU.
  mutable std::shared_mutex mutex;
  std::map<std::string, std::unique_ptr<LoadedVariant>> loaded; // op + '|' + problem key
  std::unordered_map<SignatureKey, SignaturePlan, SignatureHash> plans;
  InFlight<std::string, const LoadedVariant*> resolving;

  std::mutex db_mutex;
  std::optional<cache::Database> db;

  std::mutex cubin_mutex;
  std::map<std::string, std::shared_ptr<const std::string>> cubins; // variant key -> cubin
  InFlight<std::string, std::shared_ptr<const std::string>> compiling;

  std::mutex tune_mutex;
  Tuner tuner; // Policy::tune: options.tuner, or run_tuner_cli with the CLI found

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
  // Loads a stored winner's cubin (from the database) and checks its configuration.
  std::unique_ptr<LoadedVariant> load_winner(const Op& op, const Problem& problem,
                                             const cache::WinnerRecord& winner,
                                             const std::string& source);
  // Policy::tune: tunes the problem through `tuner`, then loads the winner it stored.
  std::unique_ptr<LoadedVariant> tune(const Op& op, const Problem& problem);
  // The cubin of a variant: compiled once per process, or found in the database.
  std::shared_ptr<const std::string> cubin_for(const VariantSource& source);
  // Opens the database at database_path read-only, after checking who may write it
  // (under db_mutex).
  void open_database();
  // The configuration of the stored winner nearest to `problem` that can run it, and
  // that winner's problem key: same device, op, NVRTC and non-size fields (dtypes,
  // flags, layout); distance = sum over size fields of weight * |log2 ratio|.
  std::optional<std::pair<Config, std::string>> nearest(const Op& op, const Problem& problem);
  // Every given tensor is device memory of this runtime's GPU and lies within its
  // allocation (driver pointer attributes; allocations seen before skip the query).
  void check_memory(const ArgsDesc& desc, const BoundCall& bound) const;
};

} // namespace autotune

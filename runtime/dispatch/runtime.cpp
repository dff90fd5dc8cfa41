#include "runtime_impl.hpp"

#include "cache/database.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/log.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/distance.hpp"
#include "runtime/ops/heuristic.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "tune.hpp"
#include "variant.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>

namespace autotune {

Runtime::Impl::Impl(const RuntimeOptions& o) : options(o) {
  // Option checks first, so that a mistake is named before the GPU is touched.
  if (o.policy == Policy::tune && !o.require_tuned) {
    check_tune_options(o, database_path);
    if (o.tuner) {
      tuner = o.tuner;
    } else {
      std::string cli = find_tuner_cli(o.tuner_path); // a missing CLI fails here, not later
      tuner = [cli](const TuneRequest& request) { run_tuner_cli(request, cli); };
    }
  } else {
    database_path = o.database.empty() ? cache::default_database_path() : o.database;
  }
  context.emplace(o.device);
  device = cuda::query_device(o.device);
  device_record.name = device.name;
  device_record.arch = device.arch();
  device_record.cc = device.cc_major * 10 + device.cc_minor;
  device_record.sm_count = device.sm_count;
  device_record.driver_version = device.driver_version;
  device_key = device_record.key();
  if (std::filesystem::exists(database_path)) {
    open_database();
  } else if (o.policy == Policy::tune) {
    log(LogLevel::info, "no tuning database at " + database_path +
                            " yet: policy tune creates it with the first winner");
  } else {
    log(LogLevel::info, "no tuning database at " + database_path + ": default variants only");
  }
}

void Runtime::Impl::open_database() {
  const std::string& path = database_path;
  // The file holds code this process will run: someone else able to write it
  // could make us launch their kernel.
  if (std::string why = cache::insecure_permissions(path); !why.empty()) {
    const char* env = std::getenv("AUTOTUNE_INSECURE_DB");
    bool refuse = options.refuse_insecure_database || (env && std::string(env) == "refuse");
    std::string message = "tuning database " + path + " holds executable code, but " + why;
    if (refuse) {
      throw Error(ErrorKind::database,
                  message + "; refusing to use it (make it writable by its owner only)");
    }
    log(LogLevel::warn, message + "; another user could make this process run their "
                                  "kernels (set AUTOTUNE_INSECURE_DB=refuse to refuse such "
                                  "files)");
  }
  db.emplace(path, cache::Database::Mode::read_only);
}

std::unique_ptr<LoadedVariant> Runtime::Impl::load_winner(const Op& op, const Problem& problem,
                                                          const cache::WinnerRecord& winner,
                                                          const std::string& source) {
  auto out = std::make_unique<LoadedVariant>();
  out->selection.problem = problem.key();
  std::string cubin, kernel;
  {
    std::lock_guard lock(db_mutex);
    auto variant = db->find_variant(winner.variant_key);
    if (!variant) {
      throw Error(ErrorKind::database, db->path() + ": winner for " + op.name() + " " +
                                           problem.key() + " names variant " + winner.variant_key +
                                           ", which is not stored");
    }
    cubin = db->load_cubin(variant->cubin_sha256);
    kernel = variant->kernel;
  }
  out->config = parse_fields(winner.config, "stored configuration");
  check_config(op_space(op), out->config, database_path + ": the winner of " + problem.key());
  out->module = cuda::load_module(cubin);
  out->function = cuda::get_function(out->module, kernel.c_str());
  out->selection.variant = winner.config;
  out->selection.source = source;
  return out;
}

std::unique_ptr<LoadedVariant> Runtime::Impl::tune(const Op& op, const Problem& problem) {
  TuneRequest request;
  request.op = op.name();
  request.problem = problem.key();
  request.database = database_path;
  request.budget_s = options.tune_budget_s;
  request.device = options.device;
  cache::WinnerRecord winner;
  {
    std::lock_guard tuning(tune_mutex);
    log(LogLevel::info, std::string("no tuned winner for ") + op.name() + " " + problem.key() +
                            ": tuning it now into " + database_path + " (policy tune)");
    winner = tune_problem(tuner, request, device_key, template_hash(op.template_path()),
                          cuda::nvrtc_version());
  }
  {
    std::lock_guard lock(db_mutex);
    if (!db) {
      open_database(); // the first tune created the file
    }
  }
  return load_winner(op, problem, winner, "tuned (policy tune)");
}

std::shared_ptr<const std::string> Runtime::Impl::cubin_for(const VariantSource& source) {
  return compiling.run(source.key, [&] {
    {
      std::lock_guard lock(cubin_mutex);
      if (auto it = cubins.find(source.key); it != cubins.end()) {
        return it->second;
      }
    }
    std::shared_ptr<const std::string> cubin;
    {
      std::lock_guard lock(db_mutex);
      if (db) {
        if (auto stored = db->find_variant(source.key)) {
          cubin = std::make_shared<const std::string>(db->load_cubin(stored->cubin_sha256));
        }
      }
    }
    if (!cubin) {
      auto compiled = compile_variant(source); // no lock held: other variants compile too
      if (!compiled) {
        throw Error(ErrorKind::compile,
                    compiled.failure().message + "\n" + compiled.failure().detail);
      }
      cubin = std::make_shared<const std::string>(std::move(compiled->binary));
    }
    std::lock_guard lock(cubin_mutex);
    return cubins.emplace(source.key, std::move(cubin)).first->second;
  });
}

// Resolves and loads the variant for a problem (slow path, no lock of the warm path
// held).
std::unique_ptr<LoadedVariant> Runtime::Impl::resolve(const Op& op, const Problem& problem) {
  const std::string& thash = template_hash(op.template_path());
  std::string nvrtc = cuda::nvrtc_version();
  std::optional<cache::WinnerRecord> winner;
  std::string hashed;
  {
    std::lock_guard lock(db_mutex);
    if (db) {
      winner = db->find_winner(device_key, op.name(), problem.key(), thash, nvrtc,
                               log_enabled(LogLevel::debug) ? &hashed : nullptr);
    }
  }
  if (winner) {
    return load_winner(op, problem, *winner, "tuned");
  }
  if (!hashed.empty()) {
    // What was hashed, so a miss can be compared field by field with
    // `autotune cache show KEY` of the entry that was expected to hit.
    std::string device_fields;
    device_record.key(&device_fields);
    log(LogLevel::debug, std::string("no tuned winner for ") + op.name() + " " + problem.key() +
                             " in " + database_path + "; winner key hashed:\n" + hashed +
                             "device key hashed:\n" + device_fields);
  }
  const Policy policy = options.require_tuned ? Policy::error : options.policy;
  auto out = std::make_unique<LoadedVariant>();
  out->selection.problem = problem.key();
  std::string source_name;
  switch (policy) {
  case Policy::error:
    throw Error(ErrorKind::not_tuned, std::string("nothing tuned for ") + op.name() + " " +
                                          problem.key() + " on " + device.name +
                                          " (the policy is error); run: autotune --arch auto "
                                          "--op " +
                                          op.name() + " --shape \"" + problem.key() + "\"");
  case Policy::tune:
    return tune(op, problem);
  case Policy::pin:
    out->config = parse_fields(options.pinned, "pinned configuration");
    source_name = "pinned";
    break;
  case Policy::nearest:
    if (auto near = nearest(op, problem)) {
      out->config = std::move(near->first);
      source_name = "nearest " + near->second;
      break;
    }
    [[fallthrough]];
  case Policy::heuristic:
    if (auto point = heuristic_config(op, problem, device)) { // sized to this GPU
      out->config = std::move(point->first);
      source_name = "heuristic " + point->second;
      break;
    }
    [[fallthrough]];
  case Policy::default_variant:
    out->config = parse_space(template_file(op.space_path()), op.space_path()).default_config;
    source_name = "default";
    break;
  }
  Result<bool> ok = false;
  try {
    // Within the op's declared limits first: a pinned or stored value of 0 must not
    // reach the op's arithmetic.
    check_config(op_space(op), out->config, source_name + " configuration");
    ok = op.check(out->config, problem, device.arch());
  } catch (const Error& e) {
    ok = fail(e.what()); // a pinned configuration that is not one of the op's
  }
  if (!ok) {
    throw Error(ErrorKind::usage, std::string("the ") + source_name + " " + op.name() +
                                      " variant (" + config_id(out->config) + ") cannot run " +
                                      problem.key() + ": " + ok.failure().message +
                                      "; tune this shape first");
  }
  VariantSource source = describe_variant(op, out->config, problem, device.arch());
  // Problems of other sizes often instantiate the same variant (the same NVRTC
  // options): compiled once per process, or found in the database.
  std::shared_ptr<const std::string> cubin = cubin_for(source);
  out->module = cuda::load_module(*cubin);
  out->function = cuda::get_function(out->module, op.kernel_name());
  out->selection.variant = config_id(out->config);
  out->selection.source = source_name;
  return out;
}

std::optional<std::pair<Config, std::string>> Runtime::Impl::nearest(const Op& op,
                                                                     const Problem& problem) {
  std::vector<cache::WinnerRecord> winners;
  {
    std::lock_guard lock(db_mutex);
    if (db) {
      winners = db->winners();
    }
  }
  const ArgsDesc& desc = op.args_desc();
  const std::string& thash = template_hash(op.template_path());
  const std::string nvrtc = cuda::nvrtc_version();
  const Space space = op_space(op); // its limits, parsed once for every stored winner
  std::optional<std::pair<Config, std::string>> best;
  double best_distance = 0;
  for (const cache::WinnerRecord& w : winners) {
    if (w.device_key != device_key || w.op != op.name() || w.nvrtc_version != nvrtc) {
      continue;
    }
    Fields theirs;
    Config config;
    try {
      theirs = parse_fields(w.problem, "stored problem");
      config = parse_fields(w.config, "stored configuration");
    } catch (const Error&) {
      continue;
    }
    const std::optional<double> size = problem_distance(desc, problem, Problem{op.name(), theirs});
    if (!size) {
      continue; // another dtype, flag or layout
    }
    // Winners of this template first, at equal distance.
    const double distance = *size + (w.template_hash == thash ? 0.0 : 0.01);
    if (best &&
        (distance > best_distance || (distance == best_distance && w.problem >= best->second))) {
      continue;
    }
    std::optional<Config> served;
    try {
      // A winner stored before a parameter existed takes its [default] value.
      config = order_config(space, config, true, "stored configuration");
      check_config(space, config, "stored configuration");
      served = serve_config(op, config, problem, device.arch());
    } catch (const Error&) {
      continue; // a configuration of another space, or outside the op's limits
    }
    if (!served) {
      continue;
    }
    best = std::make_pair(std::move(*served), w.problem);
    best_distance = distance;
  }
  // The built-in tuning points of this GPU's family (the heuristic policy's) are tuned
  // problems too: a point nearer than every stored winner answers instead (a database
  // holding only the benchmark grid says little about a sequence of 333). At equal
  // distance the stored winner, measured on this very GPU, stays.
  if (auto point = nearest_own_point(op, problem, device.arch());
      point && (!best || point->distance < best_distance)) {
    best = std::make_pair(std::move(point->config), "built-in " + point->origin);
  }
  if (best) {
    log(LogLevel::info, std::string("no tuned winner for ") + op.name() + " " + problem.key() +
                            ": using the winner of the nearest tuned problem, " + best->second);
  }
  return best;
}

const LoadedVariant& Runtime::Impl::get(const Op& op, const Problem& problem) {
  std::string key = std::string(op.name()) + '|' + problem.key();
  {
    std::shared_lock lock(mutex);
    auto it = loaded.find(key);
    if (it != loaded.end()) {
      return *it->second;
    }
  }
  // One thread resolves each key; others wanting it wait for that result, and
  // threads with other keys resolve theirs meanwhile.
  return *resolving.run(key, [&]() -> const LoadedVariant* {
    {
      std::shared_lock lock(mutex); // resolved by a round that ended meanwhile
      auto it = loaded.find(key);
      if (it != loaded.end()) {
        return it->second.get();
      }
    }
    context->make_current(); // this thread's: load_module needs it
    auto resolved = resolve(op, problem);
    // Above 48 KiB of dynamic shared memory the driver needs an opt-in per function.
    cuda::allow_dynamic_smem(resolved->function,
                             op.geometry(resolved->config, problem).dynamic_smem);
    std::unique_lock lock(mutex);
    return loaded.emplace(key, std::move(resolved)).first->second.get();
  });
}

size_t SignatureHash::operator()(const SignatureKey& k) const noexcept {
  // FNV-1a over the values: a handful of integers, hashed per call.
  uint64_t h = 1469598103934665603ull ^ reinterpret_cast<uintptr_t>(k.op);
  for (int64_t v : k.values) {
    h = (h ^ uint64_t(v)) * 1099511628211ull;
  }
  return size_t(h ^ (h >> 29));
}

const SignaturePlan& Runtime::Impl::prepare(const Op& op, const void* args, BoundCall& bound,
                                            bool launching) {
  const ArgsDesc& desc = op.args_desc();
  bind_call(desc, args, bound);
  check_layout(desc, bound);
  if (launching) {
    check_memory(desc, bound);
  }
  SignatureKey key{&op, bound.values};
  {
    std::shared_lock lock(mutex);
    auto it = plans.find(key);
    if (it != plans.end()) {
      return it->second;
    }
  }
  // First call of this signature: the problem (validated by the op), its variant
  // and the launch plan.
  Problem problem = op.make_problem(call_fields(desc, bound));
  SignaturePlan built;
  built.variant = &get(op, problem);
  built.launch = op.plan(built.variant->config, problem);
  std::unique_lock lock(mutex);
  return plans.emplace(key, std::move(built)).first->second; // keeps a concurrent twin
}

void Runtime::Impl::call(const Op& op, const void* args, CUstream stream) {
  BoundCall bound;
  const SignaturePlan& plan = prepare(op, args, bound);
  alignas(16) unsigned char kernel_args[k_kernel_args_capacity];
  plan.launch->pack(args, bound, kernel_args);
  void* params[] = {kernel_args};
  const LaunchGeometry& g = plan.launch->geometry;
  static const cuda::DriverApi& api = cuda::driver();
  AUTOTUNE_CU(api.cuLaunchKernel(plan.variant->function, g.grid[0], g.grid[1], g.grid[2],
                                 g.block[0], g.block[1], g.block[2], g.dynamic_smem, stream, params,
                                 nullptr));
}

namespace {

// Allocations whose memory was checked, per thread: a view inside one up to the
// furthest byte the driver has confirmed for it needs no driver query. A range is kept
// until newer ones push it out, or until forget_device_memory() is called (any thread).
// Memory freed and re-allocated smaller at the same address keeps its old entry, so a
// view is taken on trust only as far as views of that range already reached: one that
// reaches further is checked against the driver's current allocation.
struct KnownRange {
  uintptr_t start = 0;     // the allocation's first byte
  uintptr_t end = 0;       // one past its last byte, when the driver was last asked
  uintptr_t confirmed = 0; // one past the furthest byte of a view checked against it
  int device = -1;
};
constexpr size_t k_known_ranges = 16;
thread_local std::array<KnownRange, k_known_ranges> t_known;
thread_local size_t t_known_next = 0;
thread_local uint64_t t_known_epoch = 0;
std::atomic<uint64_t> g_memory_epoch{0};

// What the driver knows of an address: its memory type (0 for memory it does not know,
// plain host memory: cuPointerGetAttributes, unlike cuPointerGetAttribute, succeeds then),
// GPU, and the allocation holding it.
struct PointerInfo {
  CUresult result = CUDA_SUCCESS;
  unsigned int memory_type = 0;
  int ordinal = -1;
  CUdeviceptr start = 0;
  size_t size = 0;
};
PointerInfo pointer_info(const cuda::DriverApi& api, uintptr_t p) {
  PointerInfo info;
  CUpointer_attribute attributes[] = {
      CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
      CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* values[] = {&info.memory_type, &info.ordinal, &info.start, &info.size};
  info.result = api.cuPointerGetAttributes(4, attributes, values, CUdeviceptr(p));
  return info;
}

// Whether p lies in memory mapped by cuMemMap (virtual memory management) rather than
// allocated by cuMemAlloc.
bool mapped_by_vmm(const cuda::DriverApi& api, uintptr_t p) {
  if (!api.cuMemRetainAllocationHandle || !api.cuMemRelease) {
    return false;
  }
  CUmemGenericAllocationHandle handle;
  if (api.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(p)) != CUDA_SUCCESS) {
    return false;
  }
  api.cuMemRelease(handle);
  return true;
}

// In memory of virtual memory management the driver answers two questions differently:
// the pointer attributes' range is the whole reserved address range, mapped or not
// (PyTorch reserves the size of the GPU), while cuMemGetAddressRange gives the mapped
// chunk holding the address, and every query about an unmapped address fails (seen on
// driver 580; bench/vmm_probe.py shows it). The chunk of p, or an empty span where p is
// not mapped.
struct Span {
  uintptr_t base = 0;
  size_t size = 0;
};
Span mapped_chunk(const cuda::DriverApi& api, uintptr_t p) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (api.cuMemGetAddressRange(&base, &size, CUdeviceptr(p)) != CUDA_SUCCESS) {
    return {};
  }
  return {uintptr_t(base), size};
}

// PyTorch's expandable segments (and other users of virtual memory management) map
// physical chunks one after another into one reserved range. From `end`, the end of such
// a chunk, the end of the chunks mapped right after it (each cuMemMap'd memory of GPU
// `ordinal`, starting where the last one ended), as far as `last` needs: a tensor may
// span them. Stops at the first unmapped address, and never steps into cuMemAlloc memory
// that happens to follow.
uintptr_t mapped_through(uintptr_t end, uintptr_t last, int ordinal) {
  const cuda::DriverApi& api = cuda::driver();
  while (end < last) {
    const PointerInfo next = pointer_info(api, end);
    if (next.result != CUDA_SUCCESS || next.memory_type != CU_MEMORYTYPE_DEVICE ||
        next.ordinal != ordinal || !mapped_by_vmm(api, end)) {
      break;
    }
    const Span chunk = mapped_chunk(api, end);
    if (chunk.base != end || chunk.size == 0) {
      break;
    }
    end += chunk.size;
  }
  return end;
}

} // namespace

void forget_device_memory() {
  g_memory_epoch.fetch_add(1, std::memory_order_relaxed);
}

void Runtime::Impl::check_memory(const ArgsDesc& desc, const BoundCall& bound) const {
  std::array<KnownRange, k_known_ranges>& known_ranges = t_known; // one TLS lookup per call
  if (const uint64_t epoch = g_memory_epoch.load(std::memory_order_relaxed);
      epoch != t_known_epoch) {
    known_ranges.fill(KnownRange{});
    t_known_epoch = epoch;
  }
  for (int s = 0; s < bound.slots; ++s) {
    const TensorArg* t = bound.tensors[size_t(s)];
    if (!t) {
      continue;
    }
    const auto first = reinterpret_cast<uintptr_t>(t->data);
    const uintptr_t last = first + tensor_extent_bytes(*t);
    bool known = false;
    for (const KnownRange& r : known_ranges) {
      if (r.device == device.ordinal && first >= r.start && last <= r.confirmed) {
        known = true;
        break;
      }
    }
    if (known) {
      continue;
    }
    const char* name = bound.rules[size_t(s)]->name;
    const PointerInfo info = pointer_info(cuda::driver(), first);
    const CUresult r = info.result;
    const unsigned int memory_type = info.memory_type;
    const int ordinal = info.ordinal;
    const CUdeviceptr start = info.start;
    const size_t size = info.size;
    if (r != CUDA_SUCCESS ||
        (memory_type != CU_MEMORYTYPE_DEVICE && memory_type != CU_MEMORYTYPE_UNIFIED)) {
      throw Error(ErrorKind::usage,
                  std::string(desc.op) + ": " + name + " is not GPU memory (" +
                      (r != CUDA_SUCCESS ? "the driver says: " + cuda::error_string(r)
                       : memory_type == CU_MEMORYTYPE_HOST ? std::string("pinned host memory")
                                                           : std::string("host memory")) +
                      "); pass a device pointer (a CUDA tensor)");
    }
    if (ordinal != device.ordinal) {
      throw Error(ErrorKind::usage,
                  std::string(desc.op) + ": " + name + " is on GPU " + std::to_string(ordinal) +
                      ", but this runtime runs on GPU " + std::to_string(device.ordinal));
    }
    // The memory the view may touch: [begin, end).
    uintptr_t begin = uintptr_t(start);
    uintptr_t end = begin + size;
    if (size > 0 && last > first && mapped_by_vmm(cuda::driver(), first)) {
      const Span chunk = mapped_chunk(cuda::driver(), first);
      if (chunk.size > 0) {
        begin = chunk.base;
        end = mapped_through(chunk.base + chunk.size, last, ordinal);
      }
    }
    if (size > 0 && last > end) {
      throw Error(ErrorKind::usage,
                  std::string(desc.op) + ": " + name + " reaches " + std::to_string(last - begin) +
                      " bytes into its allocation, which holds " + std::to_string(end - begin) +
                      " (is the tensor smaller than its shape and strides say?)");
    }
    if (size > 0) {
      KnownRange* slot = nullptr;
      for (KnownRange& k : known_ranges) {
        if (k.device == device.ordinal && k.start == begin) {
          slot = &k; // this allocation, or an older one at its address
          break;
        }
      }
      if (slot && slot->end == end) {
        slot->confirmed = std::max(slot->confirmed, last);
      } else {
        if (!slot) {
          slot = &known_ranges[t_known_next];
          t_known_next = (t_known_next + 1) % k_known_ranges;
        }
        *slot = {begin, end, last, device.ordinal};
      }
    }
  }
}

namespace {

const Op& conv_op() {
  static const Op& op = find_op("causal_conv1d");
  return op;
}
const Op& conv_update_op() {
  static const Op& op = find_op("causal_conv1d_update");
  return op;
}
const Op& state_update_op() {
  static const Op& op = find_op("selective_state_update");
  return op;
}
const Op& attention_op() {
  static const Op& op = find_op("attention");
  return op;
}
const Op& scan_op() {
  static const Op& op = find_op("selective_scan");
  return op;
}

} // namespace

Runtime::Runtime(const RuntimeOptions& options) : m_impl(std::make_unique<Impl>(options)) {}
Runtime::~Runtime() = default;

size_t Runtime::loaded_variants() const {
  std::shared_lock lock(m_impl->mutex);
  return m_impl->loaded.size();
}

void Runtime::causal_conv1d(const CausalConv1dArgs& args, CUstream stream) {
  m_impl->call(conv_op(), &args, stream);
}

Selection Runtime::select_causal_conv1d(const CausalConv1dArgs& args) {
  BoundCall bound;
  return m_impl->prepare(conv_op(), &args, bound, false).variant->selection;
}

void Runtime::causal_conv1d_update(const CausalConv1dUpdateArgs& args, CUstream stream) {
  m_impl->call(conv_update_op(), &args, stream);
}

Selection Runtime::select_causal_conv1d_update(const CausalConv1dUpdateArgs& args) {
  BoundCall bound;
  return m_impl->prepare(conv_update_op(), &args, bound, false).variant->selection;
}

void Runtime::attention(const AttentionArgs& args, CUstream stream) {
  m_impl->call(attention_op(), &args, stream);
}

Selection Runtime::select_attention(const AttentionArgs& args) {
  BoundCall bound;
  return m_impl->prepare(attention_op(), &args, bound, false).variant->selection;
}

uint64_t Runtime::attention_workspace_size(const AttentionArgs& args) {
  BoundCall bound;
  return m_impl->prepare(attention_op(), &args, bound, false).launch->workspace_bytes;
}

void Runtime::selective_scan(const SelectiveScanArgs& args, CUstream stream) {
  m_impl->call(scan_op(), &args, stream);
}

Selection Runtime::select_selective_scan(const SelectiveScanArgs& args) {
  BoundCall bound;
  return m_impl->prepare(scan_op(), &args, bound, false).variant->selection;
}

void Runtime::selective_state_update(const SelectiveStateUpdateArgs& args, CUstream stream) {
  m_impl->call(state_update_op(), &args, stream);
}

Selection Runtime::select_selective_state_update(const SelectiveStateUpdateArgs& args) {
  BoundCall bound;
  return m_impl->prepare(state_update_op(), &args, bound, false).variant->selection;
}

std::string describe_args(const std::string& op) {
  return describe_args(find_op(op).args_desc());
}

} // namespace autotune

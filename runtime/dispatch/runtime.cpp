#include "autotune.hpp"

#include "cache/database.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/log.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/causal_conv1d.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "variant.hpp"

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>

namespace autotune {
namespace {

DType to_dtype(ElementType t) {
  switch (t) {
  case ElementType::fp32: return DType::f32;
  case ElementType::fp16: return DType::f16;
  case ElementType::bf16: return DType::bf16;
  }
  throw Error(ErrorKind::usage, "unknown element type " + std::to_string(int(t)));
}

struct Loaded {
  cuda::Module module;
  CUfunction function = nullptr;
  Config config;
  Selection selection;
};

} // namespace

struct Runtime::Impl {
  RuntimeOptions options;
  std::optional<cuda::PrimaryContext> context;
  cuda::DeviceInfo device;
  cache::DeviceRecord device_record;
  std::optional<cache::Database> db;
  mutable std::shared_mutex mutex;
  std::map<std::string, std::unique_ptr<Loaded>> loaded; // op + '|' + problem key

  explicit Impl(const RuntimeOptions& o) : options(o) {
    context.emplace(o.device);
    device = cuda::query_device(o.device);
    device_record.name = device.name;
    device_record.arch = device.arch();
    device_record.cc = device.cc_major * 10 + device.cc_minor;
    device_record.sm_count = device.sm_count;
    device_record.driver_version = device.driver_version;
    std::string path = o.database.empty() ? cache::default_database_path() : o.database;
    if (std::filesystem::exists(path)) {
      db.emplace(path, cache::Database::Mode::read_only);
    } else {
      log(LogLevel::info, "no tuning database at " + path + ": default variants only");
    }
  }

  // Resolves and loads the variant for a problem (slow path, under the write lock).
  std::unique_ptr<Loaded> resolve(const Op& op, const Problem& problem) {
    auto out = std::make_unique<Loaded>();
    out->selection.problem = problem.key();
    const std::string& thash = template_hash(op.template_path());
    std::string nvrtc = cuda::nvrtc_version();
    if (db) {
      auto winner =
          db->find_winner(device_record.key(), op.name(), problem.key(), thash, nvrtc);
      if (winner) {
        auto variant = db->find_variant(winner->variant_key);
        if (!variant) {
          throw Error(ErrorKind::database, db->path() + ": winner for " + op.name() + " " +
                                               problem.key() + " names variant " +
                                               winner->variant_key + ", which is not stored");
        }
        std::string cubin = db->load_cubin(variant->cubin_sha256);
        out->module = cuda::load_module(cubin);
        out->function = cuda::get_function(out->module, variant->kernel.c_str());
        out->config = parse_fields(winner->config, "stored configuration");
        out->selection.variant = winner->config;
        out->selection.source = "tuned";
        return out;
      }
      if (log_enabled(LogLevel::debug)) {
        log(LogLevel::debug, std::string("no tuned winner for ") + op.name() + " " +
                                 problem.key() + " on device " + device_record.key() +
                                 " (template " + thash + ", nvrtc " + nvrtc + ")");
      }
    }
    if (options.require_tuned) {
      throw Error(ErrorKind::not_tuned, std::string("nothing tuned for ") + op.name() + " " +
                                        problem.key() + " on " + device.name +
                                        " (require_tuned is set); run: autotune --arch auto --op " +
                                        op.name() + " --shape \"" + problem.key() + "\"");
    }
    Space space = parse_space(template_file(op.space_path()), op.space_path());
    out->config = space.default_config;
    auto ok = op.check(out->config, problem, device.arch());
    if (!ok) {
      throw Error(ErrorKind::usage, std::string("the default ") + op.name() + " variant (" +
                                        config_id(out->config) + ") cannot run " +
                                        problem.key() + ": " + ok.failure().message +
                                        "; tune this shape first");
    }
    VariantSource source = describe_variant(op, out->config, problem, device.arch());
    std::string cubin;
    if (db) {
      if (auto stored = db->find_variant(source.key)) {
        cubin = db->load_cubin(stored->cubin_sha256);
      }
    }
    if (cubin.empty()) {
      auto compiled = compile_variant(source);
      if (!compiled) {
        throw Error(ErrorKind::compile,
                    compiled.failure().message + "\n" + compiled.failure().detail);
      }
      cubin = compiled->binary;
    }
    out->module = cuda::load_module(cubin);
    out->function = cuda::get_function(out->module, op.kernel_name());
    out->selection.variant = config_id(out->config);
    out->selection.source = "default";
    return out;
  }

  const Loaded& get(const Op& op, const Problem& problem) {
    std::string key = std::string(op.name()) + '|' + problem.key();
    {
      std::shared_lock lock(mutex);
      auto it = loaded.find(key);
      if (it != loaded.end()) {
        return *it->second;
      }
    }
    std::unique_lock lock(mutex);
    auto it = loaded.find(key);
    if (it == loaded.end()) {
      context->make_current();
      it = loaded.emplace(key, resolve(op, problem)).first;
    }
    return *it->second;
  }
};

Runtime::Runtime(const RuntimeOptions& options) : m_impl(std::make_unique<Impl>(options)) {}
Runtime::~Runtime() = default;

size_t Runtime::loaded_variants() const {
  std::shared_lock lock(m_impl->mutex);
  return m_impl->loaded.size();
}

namespace {

struct ConvPrepared {
  Problem problem;
  CausalConv1dCall call;
};

ConvPrepared prepare(const CausalConv1dOp& op, const CausalConv1dArgs& a) {
  Fields shape = {{"B", std::to_string(a.batch)},
                  {"C", std::to_string(a.channels)},
                  {"L", std::to_string(a.length)},
                  {"W", std::to_string(a.width)},
                  {"dtype", to_string(to_dtype(a.x_type))},
                  {"wdtype", to_string(to_dtype(a.weight_type))},
                  {"bias", a.bias ? "1" : "0"},
                  {"silu", a.silu ? "1" : "0"}};
  ConvPrepared p{op.make_problem(shape), {}};
  auto& c = p.call;
  c.x = reinterpret_cast<CUdeviceptr>(a.x);
  c.weight = reinterpret_cast<CUdeviceptr>(a.weight);
  c.bias = reinterpret_cast<CUdeviceptr>(a.bias);
  c.out = reinterpret_cast<CUdeviceptr>(a.out);
  c.x_channel_stride = a.x_channel_stride < 0 ? a.length : a.x_channel_stride;
  c.x_batch_stride = a.x_batch_stride < 0 ? a.channels * c.x_channel_stride : a.x_batch_stride;
  c.out_channel_stride = a.out_channel_stride < 0 ? a.length : a.out_channel_stride;
  c.out_batch_stride =
      a.out_batch_stride < 0 ? a.channels * c.out_channel_stride : a.out_batch_stride;
  op.validate_call(p.problem, c);
  return p;
}

const CausalConv1dOp& conv_op() {
  return static_cast<const CausalConv1dOp&>(find_op("causal_conv1d"));
}

} // namespace

Selection Runtime::select_causal_conv1d(const CausalConv1dArgs& args) {
  ConvPrepared p = prepare(conv_op(), args);
  return m_impl->get(conv_op(), p.problem).selection;
}

void Runtime::causal_conv1d(const CausalConv1dArgs& args, CUstream stream) {
  const CausalConv1dOp& op = conv_op();
  ConvPrepared p = prepare(op, args);
  const Loaded& v = m_impl->get(op, p.problem);
  ArgPack pack;
  op.pack_call(v.config, p.problem, p.call, pack);
  LaunchGeometry g = op.geometry(v.config, p.problem);
  AUTOTUNE_CU(cuda::driver().cuLaunchKernel(v.function, g.grid[0], g.grid[1], g.grid[2],
                                            g.block[0], g.block[1], g.block[2], g.dynamic_smem,
                                            stream, pack.pointers(), nullptr));
}

} // namespace autotune

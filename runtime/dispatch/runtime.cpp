#include "runtime_impl.hpp"

#include "cache/database.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/log.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "variant.hpp"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>

namespace autotune {

DType to_dtype(ElementType t) {
  switch (t) {
  case ElementType::fp32: return DType::f32;
  case ElementType::fp16: return DType::f16;
  case ElementType::bf16: return DType::bf16;
  }
  throw Error(ErrorKind::usage, "unknown element type " + std::to_string(int(t)));
}

Runtime::Impl::Impl(const RuntimeOptions& o) : options(o) {
    context.emplace(o.device);
    device = cuda::query_device(o.device);
    device_record.name = device.name;
    device_record.arch = device.arch();
    device_record.cc = device.cc_major * 10 + device.cc_minor;
    device_record.sm_count = device.sm_count;
    device_record.driver_version = device.driver_version;
    std::string path = o.database.empty() ? cache::default_database_path() : o.database;
    if (std::filesystem::exists(path)) {
      // The file holds code this process will run: someone else able to write it
      // could make us launch their kernel.
      if (std::string why = cache::insecure_permissions(path); !why.empty()) {
        const char* env = std::getenv("AUTOTUNE_INSECURE_DB");
        bool refuse = o.refuse_insecure_database || (env && std::string(env) == "refuse");
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
    } else {
      log(LogLevel::info, "no tuning database at " + path + ": default variants only");
    }
  }

// Resolves and loads the variant for a problem (slow path, under the write lock).
std::unique_ptr<LoadedVariant> Runtime::Impl::resolve(const Op& op, const Problem& problem) {
    auto out = std::make_unique<LoadedVariant>();
    out->selection.problem = problem.key();
    const std::string& thash = template_hash(op.template_path());
    std::string nvrtc = cuda::nvrtc_version();
    if (db) {
      std::string hashed;
      auto winner = db->find_winner(device_record.key(), op.name(), problem.key(), thash, nvrtc,
                                    log_enabled(LogLevel::debug) ? &hashed : nullptr);
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
        // What was hashed, so a miss can be compared field by field with
        // `autotune cache show KEY` of the entry that was expected to hit.
        std::string device_fields;
        device_record.key(&device_fields);
        log(LogLevel::debug, std::string("no tuned winner for ") + op.name() + " " +
                                 problem.key() + " in " + db->path() + "; winner key hashed:\n" +
                                 hashed + "device key hashed:\n" + device_fields);
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

const LoadedVariant& Runtime::Impl::get(const Op& op, const Problem& problem) {
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
      auto resolved = resolve(op, problem);
      // Above 48 KiB of dynamic shared memory the driver needs an opt-in per function.
      cuda::allow_dynamic_smem(resolved->function,
                               op.geometry(resolved->config, problem).dynamic_smem);
      it = loaded.emplace(key, std::move(resolved)).first;
    }
    return *it->second;
  }
void Runtime::Impl::launch(const Op& op, const Problem& problem, const LoadedVariant& v,
                           ArgPack& args, CUstream stream) const {
  LaunchGeometry g = op.geometry(v.config, problem);
  AUTOTUNE_CU(cuda::driver().cuLaunchKernel(v.function, g.grid[0], g.grid[1], g.grid[2],
                                            g.block[0], g.block[1], g.block[2], g.dynamic_smem,
                                            stream, args.pointers(), nullptr));
}


Runtime::Runtime(const RuntimeOptions& options) : m_impl(std::make_unique<Impl>(options)) {}
Runtime::~Runtime() = default;

size_t Runtime::loaded_variants() const {
  std::shared_lock lock(m_impl->mutex);
  return m_impl->loaded.size();
}

} // namespace autotune

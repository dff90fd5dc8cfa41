#include "variant.hpp"

#include "cache/database.hpp"
#include "runtime/base/hash.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/ops/templates.hpp"

#include <map>
#include <mutex>

namespace autotune {
namespace {

struct Expanded {
  std::string source;
  std::string hash;
};

const Expanded& expanded(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, Expanded> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(path);
  if (it == cache.end()) {
    Expanded e;
    e.source = expand_template(path);
    e.hash = sha256_hex(e.source);
    it = cache.emplace(path, std::move(e)).first;
  }
  return it->second;
}

} // namespace

const std::string& template_source(const std::string& path) {
  return expanded(path).source;
}
const std::string& template_hash(const std::string& path) {
  return expanded(path).hash;
}

VariantSource describe_variant(const Op& op, const Config& config, const Problem& problem,
                               const std::string& arch) {
  VariantSource v;
  v.op = op.name();
  v.config_id = config_id(config);
  v.arch = arch;
  v.kernel = op.kernel_name();
  v.template_hash = template_hash(op.template_path());
  v.nvrtc_version = cuda::nvrtc_version();
  v.request.source = template_source(op.template_path());
  v.request.name = std::string(op.template_path());
  v.request.arch = arch;
  v.request.options = base_compile_options();
  for (auto& d : op.defines(config, problem)) {
    v.request.options.push_back(std::move(d));
  }
  v.options = cuda::effective_options(v.request);
  v.key = cache::variant_key(v.op, v.template_hash, v.nvrtc_version, arch, join(v.options, " "),
                             v.kernel, &v.key_dump);
  return v;
}

Result<cuda::CompileOutput> compile_variant(const VariantSource& variant) {
  return cuda::compile(variant.request);
}

} // namespace autotune

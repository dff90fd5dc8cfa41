#include "attention.hpp"
#include "causal_conv1d.hpp"
#include "causal_conv1d_update.hpp"
#include "op.hpp"
#include "selective_scan.hpp"
#include "selective_state_update.hpp"

#include "runtime/base/strings.hpp"

#include <algorithm>

namespace autotune {

namespace {
const std::vector<const Op*>& ops() {
  static const CausalConv1dOp conv;
  static const AttentionOp attention;
  static const SelectiveScanOp selective_scan;
  static const CausalConv1dUpdateOp conv_update;
  static const SelectiveStateUpdateOp state_update;
  static const std::vector<const Op*> all = {&conv, &attention, &selective_scan, &conv_update,
                                             &state_update};
  return all;
}
// Ops registered at run time (tests' fault-injection op, plugins).
std::vector<const Op*>& registered() {
  static std::vector<const Op*> extra;
  return extra;
}

std::vector<const Op*> all_ops() {
  std::vector<const Op*> out = ops();
  out.insert(out.end(), registered().begin(), registered().end());
  return out;
}

} // namespace

void register_op(const Op* op) {
  registered().push_back(op);
}

const Op& find_op(const std::string& name) {
  for (const Op* op : all_ops()) {
    if (name == op->name()) {
      return *op;
    }
  }
  std::vector<std::string> planned = {};
  for (const auto& p : planned) {
    if (name == p) {
      throw Error(ErrorKind::usage,
                  "op '" + name + "' is not built yet (built: " + join(op_names(), ", ") + ")");
    }
  }
  throw Error(ErrorKind::usage,
              "unknown op '" + name + "' (known: " + join(op_names(), ", ") + ")");
}

std::vector<std::string> op_names() {
  std::vector<std::string> out;
  for (const Op* op : all_ops()) {
    out.emplace_back(op->name());
  }
  return out;
}

std::vector<std::string> base_compile_options() {
  // -std=c++17 for constexpr/static_assert in templates; nothing from the toolkit is
  // included (templates are self-contained), so no -I is needed.
  return {"-std=c++17"};
}

std::string config_id(const Config& config) {
  return format_fields(config);
}

size_t parse_one_of(const char* op, const std::string& name, const std::string& value,
                    std::initializer_list<const char*> choices) {
  std::string listed;
  size_t i = 0;
  for (const char* c : choices) {
    if (value == c) {
      return i;
    }
    listed += std::string(i == 0 ? "'" : i + 1 == choices.size() ? " or '" : ", '") + c + "'";
    ++i;
  }
  throw Error(ErrorKind::config,
              std::string(op) + ": " + name + " must be " + listed + ", not '" + value + "'");
}

bool parse_choice(const char* op, const std::string& name, const std::string& value,
                  const char* first, const char* second) {
  return parse_one_of(op, name, value, {first, second}) == 1;
}

Result<bool> check_block_threads(int threads) {
  if (threads % 32 != 0 || threads < 32 || threads > 1024) {
    return fail("threads must be a multiple of 32 in 32..1024");
  }
  return true;
}

Config with_values(const Config& config,
                   std::initializer_list<std::pair<const char*, long long>> values) {
  Config c = config;
  for (auto& [k, v] : c) {
    for (const auto& [name, value] : values) {
      if (k == name) {
        v = std::to_string(value);
        break;
      }
    }
  }
  return c;
}

void set_value(Config& config, const std::string& name, const std::string& value) {
  for (auto& [k, v] : config) {
    if (k == name) {
      v = value;
      return;
    }
  }
  config.emplace_back(name, value);
}

VectorAccess::VectorAccess(DType dtype, long long vec)
    : esize((long long)dtype_size(dtype)), bytes(std::min<long long>(16, vec * esize)) {}

bool VectorAccess::aligned(CUdeviceptr base, std::initializer_list<long long> strides) const {
  if (base % bytes != 0) {
    return false;
  }
  for (long long s : strides) {
    if ((s * esize) % bytes != 0) {
      return false;
    }
  }
  return true;
}

std::string reference_kernel_name(const char* prefix, DType x, DType y) {
  auto suffix = [](DType t) { return t == DType::f32 ? "f32" : t == DType::f16 ? "f16" : "bf16"; };
  return std::string(prefix) + "_" + suffix(x) + "_" + suffix(y);
}

double output_rounding_tolerance(DType out, double f32) {
  switch (out) {
  case DType::bf16:
    return 1e-2;
  case DType::f16:
    return 2e-3;
  case DType::f32:
    return f32;
  }
  return 0;
}

} // namespace autotune

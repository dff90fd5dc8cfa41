#include "attention.hpp"
#include "causal_conv1d.hpp"
#include "op.hpp"
#include "selective_scan.hpp"

#include "runtime/base/strings.hpp"

namespace autotune {

namespace {
const std::vector<const Op*>& ops() {
  static const CausalConv1dOp conv;
  static const AttentionOp attention;
  static const SelectiveScanOp selective_scan;
  static const std::vector<const Op*> all = {&conv, &attention, &selective_scan};
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

} // namespace autotune

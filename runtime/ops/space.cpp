#include "space.hpp"

#include "op.hpp"
#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "templates.hpp"
#include "toml_source.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

namespace autotune {
namespace {

[[noreturn]] void throw_config(const std::string& message) {
  throw Error(ErrorKind::config, message);
}

std::string scalar_text(const toml::node& node, const std::string& source,
                        const std::string& what) {
  if (auto i = node.as_integer()) {
    return std::to_string(i->get());
  }
  if (auto s = node.as_string()) {
    return s->get();
  }
  if (auto b = node.as_boolean()) {
    return b->get() ? "1" : "0";
  }
  throw_config(where(source, node.source()) + ": " + what +
               " must be an integer, a string or a boolean");
}

// A decimal integer: an optional '-' and digits, nothing else (no '+', no spaces,
// no hex). Fails for text that is not one and for values outside long long.
Result<long long> parse_integer(const std::string& text) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value, 10);
  if (ec == std::errc::result_out_of_range) {
    return fail("is out of range");
  }
  if (text.empty() || ec != std::errc() || ptr != end) {
    return fail("is not an integer");
  }
  return value;
}

Limit parse_limit(const std::string& name, const toml::node& node, const std::string& source) {
  Limit limit;
  limit.name = name;
  limit.origin = where(source, node.source());
  const std::string usage = limit.origin + ": limits." + name +
                            " must be [min, max] (integers, min <= max) or a list of the "
                            "allowed strings";
  const toml::array* values = node.as_array();
  if (!values || values->empty()) {
    throw_config(usage);
  }
  if (values->front().is_integer()) {
    if (values->size() != 2 || !(*values)[1].is_integer()) {
      throw_config(usage);
    }
    limit.min = (*values)[0].as_integer()->get();
    limit.max = (*values)[1].as_integer()->get();
    if (limit.min > limit.max) {
      throw_config(usage);
    }
    return limit;
  }
  for (const auto& v : *values) {
    const auto* s = v.as_string();
    if (!s) {
      throw_config(usage);
    }
    if (std::find(limit.allowed.begin(), limit.allowed.end(), s->get()) != limit.allowed.end()) {
      throw_config(where(source, v.source()) + ": limits." + name + " lists '" + s->get() +
                   "' twice");
    }
    limit.allowed.push_back(s->get());
  }
  return limit;
}

// The value admitted by `limit` in canonical spelling; throws Error(config)
// "<at> <name>=<value> is out of range; <name> must be <limit> (limit declared at ...)".
std::string admit_or_throw(const Limit& limit, const std::string& value, const std::string& at) {
  Result<std::string> admitted = limit.admit(value);
  if (!admitted) {
    throw_config(at + " " + admitted.failure().message + "; " + limit.name + " must be " +
                 limit.describe() + " (limit declared at " + limit.origin + ")");
  }
  return *admitted;
}

// Throws when a parameter lists one value twice (a duplicate combination would
// compile and measure the same variant twice).
void check_distinct(const Parameter& p, const std::string& at) {
  std::set<std::string> seen;
  for (const std::string& v : p.values) {
    if (!seen.insert(v).second) {
      throw_config(at + ": " + p.name + " lists " + v + " twice");
    }
  }
}

void check_size(const Space& space, const std::string& what) {
  if (space.size() > k_max_space_size) {
    std::vector<std::string> counts;
    for (const Parameter& p : space.params) {
      counts.push_back(p.name + "=" + std::to_string(p.values.size()));
    }
    throw_config(what + " has more than " + std::to_string(k_max_space_size) +
                 " combinations of parameter values (" + join(counts, " x ") +
                 "); narrow it with --param NAME=V1|V2 or a smaller space file");
  }
}

// Checks every value and default of `space` against `limits`, rewriting them in
// canonical spelling. `owner` names whose limits they are, for messages.
void apply_limits(Space& space, const std::vector<Limit>& limits, const std::string& owner) {
  auto find = [&](const std::string& name) -> const Limit* {
    for (const Limit& l : limits) {
      if (l.name == name) {
        return &l;
      }
    }
    return nullptr;
  };
  for (Parameter& p : space.params) {
    const Limit* limit = find(p.name);
    if (!limit) {
      std::vector<std::string> names;
      for (const Limit& l : limits) {
        names.push_back(l.name);
      }
      throw_config(p.origin + ": params." + p.name + " is not a parameter of " + owner +
                   " (parameters: " + join(names, ", ") + ")");
    }
    for (std::string& v : p.values) {
      v = admit_or_throw(*limit, v, p.origin + ": [params]");
    }
    check_distinct(p, p.origin + ": params");
  }
  for (auto& [name, value] : space.default_config) {
    const Parameter* p = space.param(name);
    value =
        admit_or_throw(*find(name), value, (p ? p->default_origin : space.source) + ": [default]");
  }
}

} // namespace

std::string Limit::describe() const {
  if (integer()) {
    return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  }
  std::vector<std::string> quoted;
  for (const std::string& a : allowed) {
    quoted.push_back("'" + a + "'");
  }
  return "one of " + join(quoted, ", ");
}

Result<std::string> Limit::admit(const std::string& value) const {
  if (!integer()) {
    if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
      return fail(name + "=" + value + " is not allowed");
    }
    return value;
  }
  Result<long long> v = parse_integer(value);
  if (!v) {
    return fail(name + "=" + value + " " + v.failure().message);
  }
  if (*v < min || *v > max) {
    return fail(name + "=" + value + " is out of range");
  }
  return std::to_string(*v);
}

size_t Space::size() const {
  size_t n = params.empty() ? 0 : 1;
  for (const auto& p : params) {
    if (__builtin_mul_overflow(n, p.values.size(), &n)) {
      return std::numeric_limits<size_t>::max();
    }
  }
  return n;
}

namespace {

// The value index of each parameter in combination `index` (the last varies fastest).
std::vector<size_t> digits_of(const Space& space, size_t index) {
  std::vector<size_t> digits(space.params.size());
  for (size_t i = space.params.size(); i-- > 0;) {
    digits[i] = index % space.params[i].values.size();
    index /= space.params[i].values.size();
  }
  return digits;
}

} // namespace

Config Space::at(size_t index) const {
  const std::vector<size_t> digits = digits_of(*this, index);
  Config c;
  c.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    c.emplace_back(params[i].name, params[i].values[digits[i]]);
  }
  return c;
}

std::vector<Config> Space::enumerate() const {
  std::vector<Config> out;
  out.reserve(std::min(size(), k_max_space_size));
  for_each([&](const Config& c) { out.push_back(c); });
  return out;
}

void Space::for_each(const std::function<void(const Config&)>& visit) const {
  size_t n = size();
  if (n > k_max_space_size) {
    // parse_space and restrict_space refuse such spaces; one built by hand is a bug.
    throw Error(ErrorKind::internal,
                source + ": enumerate() of " + std::to_string(n) + " combinations");
  }
  for_each(0, n, visit);
}

void Space::for_each(size_t begin, size_t end,
                     const std::function<void(const Config&)>& visit) const {
  if (begin >= end) {
    return;
  }
  if (end > size()) {
    throw Error(ErrorKind::internal, source + ": combinations up to " + std::to_string(end) +
                                         " of " + std::to_string(size()));
  }
  Config c = at(begin);
  std::vector<size_t> digits = digits_of(*this, begin);
  for (size_t done = begin; done < end; ++done) {
    visit(c);
    // The last parameter varies fastest: advance it, carrying into the ones before.
    for (size_t i = params.size(); i-- > 0;) {
      if (++digits[i] < params[i].values.size()) {
        c[i].second = params[i].values[digits[i]];
        break;
      }
      digits[i] = 0;
      c[i].second = params[i].values[0];
    }
  }
}

const Parameter* Space::param(const std::string& name) const {
  for (const Parameter& p : params) {
    if (p.name == name) {
      return &p;
    }
  }
  return nullptr;
}

Parameter* Space::param(const std::string& name) {
  return const_cast<Parameter*>(std::as_const(*this).param(name));
}

const Limit* Space::limit(const std::string& name) const {
  for (const Limit& l : limits) {
    if (l.name == name) {
      return &l;
    }
  }
  return nullptr;
}

Space parse_space(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw_config(where(source, e.source()) + ": " + std::string(e.description()));
  }
  Space space;
  space.source = source;
  for (const auto& [key, node] : root) {
    if (key == "prune" || key == "heuristic") {
      // search priors ([[prune]], runtime/ops/priors.hpp) and built-in tuning points
      // ([[heuristic]], runtime/ops/heuristic.hpp) are read and checked there
      continue;
    }
    if (key != "params" && key != "default" && key != "limits") {
      throw_config(where(source, node.source()) + ": unknown table [" + std::string(key.str()) +
                   "] (expected [params], [default], [limits], [[prune]], [[heuristic]])");
    }
    if (!node.is_table()) {
      throw_config(where(source, node.source()) + ": " + std::string(key.str()) +
                   " must be a table ([" + std::string(key.str()) + "])");
    }
  }
  const toml::table* params = root["params"].as_table();
  if (!params || params->empty()) {
    throw_config(source + ": missing or empty [params] table");
  }
  for (const auto& [key, node] : *params) {
    Parameter p;
    p.name = std::string(key.str());
    p.origin = where(source, node.source());
    const toml::array* values = node.as_array();
    if (!values) {
      p.values.push_back(scalar_text(node, source, "params." + p.name));
    } else {
      if (values->empty()) {
        throw_config(p.origin + ": params." + p.name + " has no values");
      }
      for (const auto& v : *values) {
        p.values.push_back(scalar_text(v, source, "a value of params." + p.name));
      }
    }
    space.params.push_back(std::move(p));
  }
  // toml++ iterates tables in key order; keep the file's order instead so that
  // variant ids read in the order the author wrote the parameters.
  std::sort(space.params.begin(), space.params.end(), [&](const Parameter& a, const Parameter& b) {
    return (*params)[a.name].node()->source().begin.line <
           (*params)[b.name].node()->source().begin.line;
  });
  const toml::table* def = root["default"].as_table();
  if (!def) {
    throw_config(source + ": missing [default] table");
  }
  for (auto& p : space.params) {
    const toml::node* node = def->get(p.name);
    if (!node) {
      throw_config(where(source, def->source()) + ": [default] lacks '" + p.name + "'");
    }
    p.default_origin = where(source, node->source());
    space.default_config.emplace_back(p.name, scalar_text(*node, source, "default." + p.name));
  }
  for (const auto& [key, node] : *def) {
    if (!params->get(key.str())) {
      throw_config(where(source, node.source()) + ": [default] names '" + std::string(key.str()) +
                   "', which is not in [params]");
    }
  }
  if (const toml::table* limits = root["limits"].as_table()) {
    for (const auto& [key, node] : *limits) {
      if (!params->get(key.str())) {
        throw_config(where(source, node.source()) + ": [limits] names '" + std::string(key.str()) +
                     "', which is not in [params]");
      }
      space.limits.push_back(parse_limit(std::string(key.str()), node, source));
    }
    std::vector<Limit> ordered; // in the order of [params], for messages
    for (const Parameter& p : space.params) {
      const Limit* limit = space.limit(p.name);
      if (!limit) {
        throw_config(where(source, limits->source()) + ": [limits] declares no limit for '" +
                     p.name + "' (every parameter needs one)");
      }
      ordered.push_back(*limit);
    }
    space.limits = std::move(ordered);
    apply_limits(space, space.limits, source);
  } else {
    for (const Parameter& p : space.params) {
      check_distinct(p, p.origin + ": params");
    }
  }
  check_size(space, source);
  return space;
}

Space op_space(const Op& op) {
  const std::string source = std::string("templates/") + op.space_path();
  Space space = parse_space(template_file(op.space_path()), source);
  if (space.limits.empty()) {
    throw_config(source + ": no [limits] table; every parameter of an op's space needs one");
  }
  return space;
}

Space load_op_space(const Op& op, const std::string& space_file, const Fields& overrides) {
  Space space = op_space(op);
  if (!space_file.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(space_file, ec)) {
      throw Error(ErrorKind::io, "the space file " + space_file + " is a directory");
    }
    std::ifstream in(space_file, std::ios::binary);
    if (!in) {
      throw Error(ErrorKind::io, "cannot read the space file " + space_file);
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
      throw Error(ErrorKind::io, "cannot read the space file " + space_file);
    }
    std::vector<Limit> limits = std::move(space.limits);
    const std::string owner = std::string(op.name()) + " (" + space.source + ")";
    space = parse_space(text.str(), space_file);
    // The file's own [limits] (if any) were checked by parse_space; the op's bound
    // what the op can compute with, whatever the file says.
    apply_limits(space, limits, owner);
    space.limits.clear();
    for (const Parameter& p : space.params) {
      for (const Limit& l : limits) {
        if (l.name == p.name) {
          space.limits.push_back(l);
        }
      }
    }
  }
  restrict_space(space, overrides);
  return space;
}

void restrict_space(Space& space, const Fields& overrides) {
  std::set<std::string> seen;
  for (const auto& [name, value] : overrides) {
    const std::string what = "--param " + name + "=" + value;
    if (!seen.insert(name).second) {
      throw Error(ErrorKind::usage,
                  "--param: '" + name + "' is given twice (list its values as " + name + "=V1|V2)");
    }
    Parameter* param = space.param(name);
    if (!param) {
      std::vector<std::string> names;
      for (const auto& p : space.params) {
        names.push_back(p.name);
      }
      throw Error(ErrorKind::usage, "--param: '" + name + "' is not a parameter of " +
                                        space.source + " (parameters: " + join(names, ", ") + ")");
    }
    std::vector<std::string> values = split(value, '|');
    const Limit* limit = space.limit(name);
    for (std::string& v : values) {
      v = trim(v);
      if (v.empty()) {
        throw_config(what + ": an empty value");
      }
      if (limit) {
        v = admit_or_throw(*limit, v, what + ":");
      }
    }
    Parameter narrowed = *param;
    narrowed.values = std::move(values);
    check_distinct(narrowed, what);
    *param = std::move(narrowed);
  }
  check_size(space, space.source + " narrowed by --param");
}

namespace {

bool holds(const std::vector<std::string>& values, const std::string& v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

// `part` cut by one rule: the combinations where it applies, with its inert parameters
// narrowed, then those where it does not (the deciding parameter's other values).
void cut(const Space& part, const InertRule& rule, std::vector<Space>& out) {
  Space applies = part;
  Space rest = part;
  if (!rule.when.empty()) {
    Parameter* decide = applies.param(rule.when);
    if (!decide) {
      out.push_back(part);
      return;
    }
    std::vector<std::string> in;
    std::vector<std::string> other;
    for (const std::string& v : decide->values) {
      (holds(rule.when_values, v) ? in : other).push_back(v);
    }
    if (in.empty()) {
      out.push_back(part);
      return;
    }
    decide->values = std::move(in);
    rest.param(rule.when)->values = std::move(other);
  } else {
    rest.params.clear(); // nothing outside an unconditional rule
  }
  for (const auto& [name, value] : rule.fixed) {
    Parameter* p = applies.param(name);
    if (p && holds(p->values, value)) {
      p->values = {value};
    }
  }
  out.push_back(std::move(applies));
  if (rest.size() > 0) {
    out.push_back(std::move(rest));
  }
}

} // namespace

std::vector<Space> inert_parts(const Space& space, const std::vector<InertRule>& rules) {
  std::vector<Space> parts{space};
  for (const InertRule& rule : rules) {
    std::vector<Space> next;
    for (const Space& part : parts) {
      cut(part, rule, next);
    }
    parts = std::move(next);
  }
  return parts;
}

Config apply_inert_rules(const Config& config, const std::vector<InertRule>& rules) {
  Config out = config;
  for (const InertRule& rule : rules) {
    if (!rule.when.empty()) {
      const std::string* v = find_field(out, rule.when);
      if (!v || std::find(rule.when_values.begin(), rule.when_values.end(), *v) ==
                    rule.when_values.end()) {
        continue;
      }
    }
    for (const auto& [name, value] : rule.fixed) {
      for (auto& [n, v] : out) {
        if (n == name) {
          v = value;
        }
      }
    }
  }
  return out;
}

Config order_config(const Space& space, const Config& config, bool fill_missing,
                    const std::string& what) {
  for (const auto& [name, value] : config) {
    (void)value;
    if (!space.param(name)) {
      throw_config(what + ": '" + name + "' is not a parameter of " + space.source);
    }
  }
  Config out;
  out.reserve(space.params.size());
  for (const Parameter& p : space.params) {
    if (const std::string* v = find_field(config, p.name)) {
      out.emplace_back(p.name, *v);
    } else if (const std::string* d =
                   fill_missing ? find_field(space.default_config, p.name) : nullptr) {
      out.emplace_back(p.name, *d);
    } else {
      throw_config(what + ": names no value of '" + p.name + "' (every parameter of " +
                   space.source + " must be given)");
    }
  }
  return out;
}

void check_config(const Space& space, const Config& config, const std::string& what) {
  for (const auto& [name, value] : config) {
    const Limit* limit = space.limit(name);
    if (!limit) {
      std::vector<std::string> names;
      for (const Limit& l : space.limits) {
        names.push_back(l.name);
      }
      throw_config(what + ": '" + name + "' is not a parameter of " + space.source +
                   " (parameters: " + join(names, ", ") + ")");
    }
    admit_or_throw(*limit, value, what + ":");
  }
}

} // namespace autotune

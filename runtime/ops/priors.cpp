#include "priors.hpp"

#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"
#include "toml_source.hpp"

#include <algorithm>
#include <cctype>

namespace autotune {
namespace {

// An integer in canonical spelling, or nullopt.
std::optional<long long> as_integer(const std::string& text) {
  if (text.empty() || text.find_first_not_of("-0123456789") != std::string::npos) {
    return std::nullopt;
  }
  try {
    return parse_int(text, "value");
  } catch (const Error&) {
    return std::nullopt;
  }
}

// sm_<digits>, optionally one lower-case suffix letter (sm_90a).
bool is_arch(const std::string& a) {
  if (!starts_with(a, "sm_") || a.size() < 5) {
    return false;
  }
  size_t digits = 3;
  while (digits < a.size() && std::isdigit(static_cast<unsigned char>(a[digits]))) {
    ++digits;
  }
  return digits >= 5 &&
         (digits == a.size() ||
          (digits + 1 == a.size() && std::islower(static_cast<unsigned char>(a[digits]))));
}

// Reads one entry's conditions (`when` or `require`) against the space.
class ConditionReader {
public:
  ConditionReader(const std::string& source, const Space& space)
      : m_source(source), m_space(space) {}

  std::vector<PriorCondition> read(const toml::node& node, const std::string& key) const {
    const toml::table* table = node.as_table();
    if (!table || !table->is_inline()) {
      fail_at(m_source, node,
              "[[prune]] " + key + " must be an inline table, e.g. " + key + " = { name = value }");
    }
    std::vector<PriorCondition> out;
    for (const auto& [name, value] : *table) {
      out.push_back(condition(name, value, key));
    }
    // toml++ keeps keys sorted; messages read better in the file's order.
    auto at = [&](const PriorCondition& c) {
      const toml::source_position& p = (*table)[c.name].node()->source().begin;
      return std::make_pair(p.line, p.column);
    };
    std::sort(out.begin(), out.end(),
              [&](const PriorCondition& a, const PriorCondition& b) { return at(a) < at(b); });
    return out;
  }

private:
  PriorCondition condition(const toml::key& toml_name, const toml::node& node,
                           const std::string& key) const {
    const std::string name(toml_name.str());
    const std::string what = "[[prune]] " + key + "." + name;
    const Parameter* param = nullptr;
    for (const auto& p : m_space.params) {
      if (p.name == name) {
        param = &p;
      }
    }
    if (!param && name != k_prior_blocks) {
      std::vector<std::string> names;
      for (const auto& p : m_space.params) {
        names.push_back(p.name);
      }
      fail_at(m_source, toml_name.source(),
              what + ": '" + name + "' is not a parameter of " + m_source + " (parameters: " +
                  join(names, ", ") + "; or " + k_prior_blocks + ", the launch's block count)");
    }
    PriorCondition c;
    c.name = name;
    if (const toml::table* range = node.as_table()) {
      for (const auto& [bound, v] : *range) {
        auto i = v.as_integer();
        if ((bound.str() != "min" && bound.str() != "max") || !i) {
          fail_at(m_source, v, what + ": a range is { min = INTEGER, max = INTEGER }");
        }
        (bound.str() == "min" ? c.min : c.max) = i->get();
      }
      if (!c.min && !c.max) {
        fail_at(m_source, node, what + ": a range needs min, max or both");
      }
      if (c.min && c.max && *c.min > *c.max) {
        fail_at(m_source, node, what + ": min exceeds max");
      }
      if (param) {
        for (const auto& v : param->values) {
          if (!as_integer(v)) {
            fail_at(m_source, node,
                    what + ": a range needs an integer parameter; params." + name + " lists '" + v +
                        "'");
          }
        }
      }
      return c;
    }
    if (const toml::array* list = node.as_array()) {
      if (list->empty()) {
        fail_at(m_source, node, what + ": the list of values is empty");
      }
      for (const auto& v : *list) {
        c.values.push_back(value(v, param, what));
      }
    } else {
      c.values.push_back(value(node, param, what));
    }
    return c;
  }

  // One value in the spelling configurations use ("1", "state"), which the
  // parameter must list: a value it cannot take would make the entry a no-op, or
  // prune everything, without a word.
  std::string value(const toml::node& node, const Parameter* param, const std::string& what) const {
    std::string text;
    if (auto i = node.as_integer()) {
      text = std::to_string(i->get());
    } else if (auto s = node.as_string()) {
      text = s->get();
    } else if (auto b = node.as_boolean()) {
      text = b->get() ? "1" : "0";
    } else {
      fail_at(m_source, node, what + ": a value must be an integer, a string or a boolean");
    }
    if (!param) {
      if (!as_integer(text)) {
        fail_at(m_source, node, what + ": " + k_prior_blocks + " is an integer");
      }
      return text;
    }
    if (std::find(param->values.begin(), param->values.end(), text) == param->values.end()) {
      fail_at(m_source, node,
              what + ": '" + text + "' is not a value of params." + param->name + " (" +
                  join(param->values, ", ") + ")");
    }
    return text;
  }

  const std::string& m_source;
  const Space& m_space;
};

Prior read_prior(const toml::node& node, const std::string& source, const Space& space) {
  const toml::table* t = node.as_table();
  if (!t) {
    fail_at(source, node, "each [[prune]] entry must be a table");
  }
  Prior prior;
  prior.origin = source + ":" + std::to_string(t->source().begin.line);
  ConditionReader conditions(source, space);
  for (const auto& [key, value] : *t) {
    if (key == "arch") {
      auto add = [&](const toml::node& a) {
        auto s = a.as_string();
        if (!s || !is_arch(s->get())) {
          fail_at(source, a,
                  "[[prune]] arch: each target is a string like \"sm_90\" or \"sm_90a\"");
        }
        prior.archs.push_back(s->get());
      };
      if (const toml::array* list = value.as_array()) {
        for (const auto& a : *list) {
          add(a);
        }
      } else {
        add(value);
      }
    } else if (key == "when") {
      prior.when = conditions.read(value, "when");
    } else if (key == "require") {
      prior.require = conditions.read(value, "require");
    } else if (key == "why") {
      auto s = value.as_string();
      if (!s || trim(s->get()).empty()) {
        fail_at(source, value, "[[prune]] why must be a non-empty string (what was measured)");
      }
      prior.why = s->get();
    } else {
      fail_at(source, key.source(),
              "[[prune]]: unknown key '" + std::string(key.str()) +
                  "' (expected arch, when, require, why)");
    }
  }
  if (prior.archs.empty()) {
    fail_at(
        source, node,
        "[[prune]] needs arch = [\"sm_XY\", ...]: a prior holds for the GPUs it was measured on");
  }
  if (prior.require.empty()) {
    fail_at(source, node, "[[prune]] needs a non-empty require = { name = value, ... }");
  }
  if (prior.why.empty()) {
    fail_at(source, node, "[[prune]] needs why = \"...\" (what was measured)");
  }
  return prior;
}

} // namespace

bool PriorCondition::holds(const std::string& value) const {
  if (!values.empty()) {
    return std::find(values.begin(), values.end(), value) != values.end();
  }
  std::optional<long long> v = as_integer(value);
  return v && (!min || *v >= *min) && (!max || *v <= *max);
}

std::string PriorCondition::describe() const {
  if (values.size() == 1) {
    return name + " = " + values.front();
  }
  if (!values.empty()) {
    return name + " in {" + join(values, ", ") + "}";
  }
  if (min && max) {
    return name + " in [" + std::to_string(*min) + ", " + std::to_string(*max) + "]";
  }
  return name + (min ? " >= " + std::to_string(*min) : " <= " + std::to_string(*max));
}

bool Prior::applies_to(const std::string& arch) const {
  return std::find(archs.begin(), archs.end(), arch) != archs.end();
}

Result<bool> Priors::allow(const Op& op, const Config& config, const Problem& problem,
                           const std::string& arch) const {
  std::optional<std::string> blocks; // computed once, when an entry asks for it
  auto value_of = [&](const PriorCondition& c) -> std::string {
    if (c.name == k_prior_blocks) {
      if (!blocks) {
        LaunchGeometry g = op.geometry(config, problem);
        blocks = std::to_string((long long)g.grid[0] * g.grid[1] * g.grid[2]);
      }
      return *blocks;
    }
    const std::string* v = find_field(config, c.name);
    if (!v) {
      throw Error(ErrorKind::internal, "search prior: the configuration " + config_id(config) +
                                           " has no parameter '" + c.name + "'");
    }
    return *v;
  };
  for (const Prior& p : entries) {
    if (!p.applies_to(arch)) {
      continue;
    }
    bool applies = std::all_of(p.when.begin(), p.when.end(),
                               [&](const PriorCondition& c) { return c.holds(value_of(c)); });
    if (!applies) {
      continue;
    }
    for (const PriorCondition& c : p.require) {
      if (!c.holds(value_of(c))) {
        return fail("search prior " + p.origin + " for " + join(p.archs, "/") + ": " + p.why +
                    " (measured only with " + c.describe() + ")");
      }
    }
  }
  return true;
}

Priors parse_priors(const std::string& text, const std::string& source, const Space& space) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw Error(ErrorKind::config, where(source, e.source()) + ": " + std::string(e.description()));
  }
  Priors priors;
  const toml::node* node = root.get("prune");
  if (!node) {
    return priors;
  }
  const toml::array* entries = node->as_array();
  if (!entries || !entries->is_array_of_tables()) {
    fail_at(source, *node, "prune must be a list of tables: write each entry as [[prune]]");
  }
  for (const auto& entry : *entries) {
    priors.entries.push_back(read_prior(entry, source, space));
  }
  return priors;
}

} // namespace autotune

#include "space.hpp"

#include "runtime/base/error.hpp"
#include "runtime/base/strings.hpp"

#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include <algorithm>

namespace autotune {
namespace {

std::string where(const std::string& source, const toml::source_region& r) {
  return source + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
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
  throw Error(ErrorKind::config, where(source, node.source()) + ": " + what +
                                     " must be an integer, a string or a boolean");
}

} // namespace

size_t Space::size() const {
  size_t n = params.empty() ? 0 : 1;
  for (const auto& p : params) {
    n *= p.values.size();
  }
  return n;
}

Config Space::at(size_t index) const {
  Config c;
  c.reserve(params.size());
  std::vector<size_t> digits(params.size());
  for (size_t i = params.size(); i-- > 0;) {
    digits[i] = index % params[i].values.size();
    index /= params[i].values.size();
  }
  for (size_t i = 0; i < params.size(); ++i) {
    c.emplace_back(params[i].name, params[i].values[digits[i]]);
  }
  return c;
}

std::vector<Config> Space::enumerate() const {
  std::vector<Config> out;
  size_t n = size();
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(at(i));
  }
  return out;
}

Space parse_space(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw Error(ErrorKind::config, where(source, e.source()) + ": " + std::string(e.description()));
  }
  Space space;
  space.source = source;
  for (const auto& [key, node] : root) {
    if (key != "params" && key != "default") {
      throw Error(ErrorKind::config, where(source, node.source()) + ": unknown table [" +
                                         std::string(key.str()) + "] (expected [params], [default])");
    }
  }
  const toml::table* params = root["params"].as_table();
  if (!params || params->empty()) {
    throw Error(ErrorKind::config, source + ": missing or empty [params] table");
  }
  for (const auto& [key, node] : *params) {
    Parameter p;
    p.name = std::string(key.str());
    const toml::array* values = node.as_array();
    if (!values) {
      p.values.push_back(scalar_text(node, source, "params." + p.name));
    } else {
      if (values->empty()) {
        throw Error(ErrorKind::config,
                    where(source, node.source()) + ": params." + p.name + " has no values");
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
    throw Error(ErrorKind::config, source + ": missing [default] table");
  }
  for (const auto& p : space.params) {
    const toml::node* node = def->get(p.name);
    if (!node) {
      throw Error(ErrorKind::config, where(source, def->source()) + ": [default] lacks '" +
                                         p.name + "'");
    }
    space.default_config.emplace_back(p.name, scalar_text(*node, source, "default." + p.name));
  }
  for (const auto& [key, node] : *def) {
    bool known = false;
    for (const auto& p : space.params) {
      known = known || p.name == key.str();
    }
    if (!known) {
      throw Error(ErrorKind::config, where(source, node.source()) + ": [default] names '" +
                                         std::string(key.str()) + "', which is not in [params]");
    }
  }
  return space;
}

void restrict_space(Space& space, const Fields& overrides) {
  for (const auto& [name, value] : overrides) {
    bool found = false;
    for (auto& p : space.params) {
      if (p.name == name) {
        p.values = split(value, '|');
        found = true;
      }
    }
    if (!found) {
      std::vector<std::string> names;
      for (const auto& p : space.params) {
        names.push_back(p.name);
      }
      throw Error(ErrorKind::usage, "--param: '" + name + "' is not a parameter of " +
                                        space.source + " (parameters: " + join(names, ", ") + ")");
    }
  }
}

} // namespace autotune

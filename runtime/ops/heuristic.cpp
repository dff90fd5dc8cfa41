#include "heuristic.hpp"

#include "distance.hpp"

#include "runtime/base/error.hpp"
#include "templates.hpp"

#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

namespace autotune {
namespace {

[[noreturn]] void fail_at(const std::string& source, const toml::node& node,
                          const std::string& message) {
  const auto& r = node.source();
  throw Error(ErrorKind::config, source + ":" + std::to_string(r.begin.line) + ":" +
                                     std::to_string(r.begin.column) + ": " + message);
}

} // namespace

std::vector<HeuristicPoint> parse_heuristics(const Op& op, const std::string& text,
                                             const std::string& source, const Space& space) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw Error(ErrorKind::config, source + ": " + std::string(e.description()));
  }
  std::vector<HeuristicPoint> points;
  const toml::array* entries = root["heuristic"].as_array();
  if (!entries) {
    return points;
  }
  const ArgsDesc& desc = op.args_desc();
  for (const toml::node& node : *entries) {
    const toml::table* t = node.as_table();
    if (!t) {
      fail_at(source, node, "[[heuristic]] entries are tables");
    }
    HeuristicPoint p;
    p.origin = source + ":" + std::to_string(node.source().begin.line);
    for (const auto& [key, value] : *t) {
      if (key == "arch") {
        const toml::array* archs = value.as_array();
        if (!archs || archs->empty()) {
          fail_at(source, value, "arch is a non-empty list of targets (\"sm_90a\")");
        }
        for (const toml::node& a : *archs) {
          if (!a.is_string()) {
            fail_at(source, a, "arch entries are strings");
          }
          p.archs.push_back(*a.value<std::string>());
        }
      } else if (key == "shape" || key == "config") {
        if (!value.is_string()) {
          fail_at(source, value, std::string(key.str()) + " is a string \"k=v,...\"");
        }
        Fields f =
            parse_fields(*value.value<std::string>(), p.origin + " " + std::string(key.str()));
        if (key == "shape") {
          for (const auto& [name, v] : f) {
            bool known = false;
            for (const FieldDesc& fd : desc.fields) {
              known = known || name == fd.name;
            }
            if (!known) {
              fail_at(source, value, "'" + name + "' is not a field of " + op.name());
            }
            (void)v;
          }
          p.shape = std::move(f);
        } else {
          p.config = std::move(f);
        }
      } else {
        fail_at(source, value,
                "unknown key '" + std::string(key.str()) + "' (expected arch, shape, config)");
      }
    }
    if (p.archs.empty() || p.shape.empty() || p.config.empty()) {
      fail_at(source, node, "a [[heuristic]] entry needs arch, shape and config");
    }
    check_config(space, p.config, p.origin + " config");
    points.push_back(std::move(p));
  }
  return points;
}

std::optional<std::pair<Config, std::string>> heuristic_config(const Op& op, const Problem& problem,
                                                               const std::string& arch) {
  // Parsed once per op and process.
  static std::mutex mutex;
  static std::map<std::string, std::vector<HeuristicPoint>> cache;
  const std::vector<HeuristicPoint>* points = nullptr;
  {
    std::lock_guard lock(mutex);
    auto it = cache.find(op.name());
    if (it == cache.end()) {
      const std::string& text = template_file(op.space_path());
      it =
          cache.emplace(op.name(), parse_heuristics(op, text, op.space_path(), op_space(op))).first;
    }
    points = &it->second;
  }
  const ArgsDesc& desc = op.args_desc();
  for (bool own_family : {true, false}) {
    const HeuristicPoint* best = nullptr;
    double best_distance = 0;
    for (const HeuristicPoint& p : *points) {
      const bool mine = std::find(p.archs.begin(), p.archs.end(), arch) != p.archs.end();
      if (mine != own_family) {
        continue;
      }
      const std::optional<double> distance = point_distance(desc, p.shape, problem);
      if (!distance) {
        continue; // a flag the point names (attention's causal) differs
      }
      const double d = *distance;
      if (best && d >= best_distance) {
        continue;
      }
      try {
        if (!op.check(p.config, problem, arch)) {
          continue;
        }
      } catch (const Error&) {
        continue;
      }
      best = &p;
      best_distance = d;
    }
    if (best) {
      return std::make_pair(op.adapt(best->config, problem),
                            (own_family ? arch : best->archs.front() + "->" + arch) + " point " +
                                format_fields(best->shape));
    }
  }
  return std::nullopt;
}

} // namespace autotune

#include "heuristic.hpp"

#include "distance.hpp"

#include "runtime/base/error.hpp"
#include "templates.hpp"
#include "toml_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>

namespace autotune {

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
    // Every parameter, in the space's order: the tuner measures a point as a seed by
    // its configuration id, which must match the space's own.
    p.config = order_config(space, p.config, false, p.origin + " config");
    points.push_back(std::move(p));
  }
  return points;
}

double heuristic_waves(const LaunchGeometry& g, const cuda::DeviceInfo& device) {
  constexpr long long k_max_blocks_per_sm = 32; // sm_80 .. sm_120
  const long long threads = std::max<long long>(1, (long long)g.block[0] * g.block[1] * g.block[2]);
  const long long blocks = (long long)g.grid[0] * g.grid[1] * g.grid[2];
  const long long slots =
      device.regs_per_sm > 0 ? device.regs_per_sm / k_heuristic_regs_per_thread : 2048;
  long long resident = std::min(k_max_blocks_per_sm, std::max<long long>(1, slots / threads));
  if (g.dynamic_smem > 0 && device.smem_per_sm > 0) {
    resident = std::min(resident, std::max<long long>(1, device.smem_per_sm / g.dynamic_smem));
  }
  return double(blocks) / double(std::max(1, device.sm_count) * resident);
}

namespace {

// The point lookup of heuristic.hpp (`own_only`: among arch's own family's points only);
// `own` says whether the point is of arch's family.
struct Lookup {
  HeuristicMatch match;
  bool own = false;
};

std::optional<Lookup> heuristic_lookup(const Op& op, const Problem& problem,
                                       const std::string& arch, bool own_only) {
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
    if (own_only && !own_family) {
      break;
    }
    const HeuristicPoint* best = nullptr;
    double best_distance = 0;
    Config best_config;
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
      std::optional<Config> served = serve_config(op, p.config, problem, arch);
      if (!served) {
        continue;
      }
      best = &p;
      best_distance = d;
      best_config = std::move(*served);
    }
    if (best) {
      return Lookup{{best_config,
                     (own_family ? arch : best->archs.front() + "->" + arch) + " point " +
                         format_fields(best->shape),
                     best_distance},
                    own_family};
    }
  }
  return std::nullopt;
}

// Whether `config` can run `problem` on `device`: the op's check for its arch, and a
// dynamic shared-memory request the GPU grants.
bool runs_on(const Op& op, const Config& config, const Problem& problem,
             const cuda::DeviceInfo& device) {
  try {
    if (!op.check(config, problem, device.arch())) {
      return false;
    }
    const LaunchGeometry g = op.geometry(config, problem);
    return device.smem_per_block_optin <= 0 ||
           g.dynamic_smem <= unsigned(device.smem_per_block_optin);
  } catch (const Error&) {
    return false;
  }
}

// The wave-filling rule of heuristic.hpp: moves one parameter at a time until the
// grid fills k_heuristic_min_waves waves of `device`, or no move adds blocks.
// Returns the configuration and the moves made ("items=2,vec=4"; empty for none).
std::pair<Config, std::string> fill_waves(const Op& op, const Problem& problem, Config config,
                                          const cuda::DeviceInfo& device, double* waves_out) {
  const Space& space = op_space(op);
  auto blocks = [](const LaunchGeometry& g) {
    return (long long)g.grid[0] * g.grid[1] * g.grid[2];
  };
  LaunchGeometry geometry = op.geometry(config, problem);
  double waves = heuristic_waves(geometry, device);
  std::string moves;
  constexpr int k_max_moves = 8; // a bound on the search, not a goal: moves stop at the target
  for (int step = 0; step < k_max_moves && waves < k_heuristic_min_waves; ++step) {
    std::optional<Config> best;
    double best_waves = waves;
    std::string best_move;
    const long long current_blocks = blocks(geometry);
    for (auto param = space.params.rbegin(); param != space.params.rend(); ++param) {
      for (const std::string& value : param->values) {
        Config next = config;
        bool changed = false;
        for (auto& [k, v] : next) {
          if (k == param->name && v != value) {
            v = value;
            changed = true;
          }
        }
        if (!changed || !runs_on(op, next, problem, device)) {
          continue;
        }
        const LaunchGeometry g = op.geometry(next, problem);
        const double w = heuristic_waves(g, device);
        if (blocks(g) <= current_blocks || w <= waves) {
          continue; // no more blocks, or fewer per SM only because each holds fewer
        }
        const bool reaches = w >= k_heuristic_min_waves;
        const bool best_reaches = best && best_waves >= k_heuristic_min_waves;
        const bool better = !best || (reaches ? (!best_reaches || w < best_waves)
                                              : (!best_reaches && w > best_waves));
        if (better) {
          best = std::move(next);
          best_waves = w;
          best_move = param->name + "=" + value;
        }
      }
    }
    if (!best) {
      break;
    }
    config = std::move(*best);
    geometry = op.geometry(config, problem);
    waves = best_waves;
    moves += (moves.empty() ? "" : ",") + best_move;
  }
  *waves_out = waves;
  return {std::move(config), moves};
}

std::string format_waves(double waves) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2g", waves);
  return text;
}

} // namespace

std::optional<std::pair<Config, std::string>> heuristic_config(const Op& op, const Problem& problem,
                                                               const std::string& arch) {
  auto found = heuristic_lookup(op, problem, arch, false);
  if (!found) {
    return std::nullopt;
  }
  return std::make_pair(std::move(found->match.config), std::move(found->match.origin));
}

std::optional<std::pair<Config, std::string>> heuristic_config(const Op& op, const Problem& problem,
                                                               const cuda::DeviceInfo& device) {
  auto found = heuristic_lookup(op, problem, device.arch(), false);
  if (!found) {
    return std::nullopt;
  }
  HeuristicMatch& m = found->match;
  if (!found->own && device.sm_count > 0) {
    double waves = 0;
    auto [config, moves] = fill_waves(op, problem, m.config, device, &waves);
    m.config = std::move(config);
    m.origin += "; " + format_waves(waves) + " waves of " + std::to_string(device.sm_count) +
                " SMs" + (moves.empty() ? "" : " with " + moves);
  }
  return std::make_pair(std::move(m.config), std::move(m.origin));
}

std::optional<Config> serve_config(const Op& op, const Config& config, const Problem& problem,
                                   const std::string& arch) {
  auto valid = [&](const Config& c) {
    try {
      return op.check(c, problem, arch).ok();
    } catch (const Error&) {
      return false;
    }
  };
  // Either way with the inert parameters at the values the tuner measures (the same
  // kernel under the id a tuning run compiled).
  const std::vector<InertRule> rules = op.inert_params(problem);
  try {
    Config adapted = apply_inert_rules(op.adapt(config, problem), rules);
    if (valid(adapted)) {
      return adapted;
    }
  } catch (const Error&) {
    // adapt() refused it: the configuration as it stands may still serve
  }
  Config own = apply_inert_rules(config, rules);
  if (valid(own)) {
    return own;
  }
  return std::nullopt;
}

std::optional<HeuristicMatch> nearest_own_point(const Op& op, const Problem& problem,
                                                const std::string& arch) {
  auto found = heuristic_lookup(op, problem, arch, true);
  if (!found) {
    return std::nullopt;
  }
  return std::move(found->match);
}

} // namespace autotune

// The `heuristic` choice of a configuration for a problem nobody tuned, built into
// each op from tuning data: [[heuristic]] entries of the op's space file, each a
// tuned problem's size fields and its winner, for the GPU family it was tuned on
// (parse_space leaves them to this parser):
//
//   [[heuristic]]                          # bench/results/h100-causal_conv1d.json
//   arch = ["sm_90", "sm_90a"]
//   shape = "B=8,C=4096,L=2048,W=4"        # fields of the tuned problem: sizes, and
//                                          # flags a problem must share (causal=1)
//   config = "threads=128,vec=4,items=4,cpb=1,load=smem"
//
// For a problem, among the points whose other fields equal the problem's, the point
// nearest to it (point_distance, runtime/ops/distance.hpp) whose configuration is
// within the op's limits and can run the problem on the GPU wins: first among the points of the
// GPU's family; on a GPU with no points of its own, among all points, filtered by that GPU's limits
// (Op::check: shared memory, registers, grid); with none left, the op's [default] configuration.
#pragma once

#include "op.hpp"
#include "space.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace autotune {

struct HeuristicPoint {
  std::vector<std::string> archs; // exact target names, e.g. "sm_90a"
  Fields shape;
  Config config;
  std::string origin; // file:line of its [[heuristic]] header
};

// The [[heuristic]] entries of a space file; Error(config) naming file:line for an
// entry without arch/shape/config, an unknown shape field or a configuration outside
// the space's limits.
std::vector<HeuristicPoint> parse_heuristics(const Op& op, const std::string& text,
                                             const std::string& source, const Space& space);

// The heuristic configuration for a problem on `arch`, with a description of where
// it came from ("sm_90a point B=8,C=4096,..."), or nullopt when no point fits.
std::optional<std::pair<Config, std::string>> heuristic_config(const Op& op, const Problem& problem,
                                                               const std::string& arch);

} // namespace autotune

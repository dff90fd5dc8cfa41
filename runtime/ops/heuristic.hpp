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
//
// A GPU with no points of its own, when its SM count is known (the DeviceInfo
// overload), gets the transferred configuration sized for it: tuned on a GPU with
// other SM counts, the point's grid may leave most of this one idle. While the grid
// fills fewer than k_heuristic_min_waves waves of this GPU (blocks / (SMs x blocks
// an SM holds at once, from its thread slots, registers and shared memory)), one
// parameter moves to another value of the op's [params] list: the move that reaches
// the target with the fewest blocks, else the one with the most; ties go to the
// parameter listed last (spaces list the block shape first and the per-thread work
// and splits after it: causal_conv1d's items before its vec, attention's splits
// before its block_m). Parameters that other parameters constrain (selective_scan's
// cpb follows threads, nsplit, tsplit and cpl) rarely move alone: such ops keep the
// transferred configuration.
#pragma once

#include "op.hpp"
#include "space.hpp"

#include "runtime/cuda/device.hpp"

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

// The same on a known GPU (device.arch() names it): on a GPU with no points of its
// own the transferred configuration is also sized to the GPU's SM count, thread
// slots and shared memory (above); the description then says so ("sm_90->sm_120
// point ...; 2.0 waves of 20 SMs with items=2"). A device with sm_count 0 is the
// arch-only lookup.
std::optional<std::pair<Config, std::string>> heuristic_config(const Op& op, const Problem& problem,
                                                               const cuda::DeviceInfo& device);

// The point of `arch`'s own family nearest to `problem`, its configuration adapted to
// the problem (Op::adapt), with where it came from and its distance (point_distance):
// for the nearest policy, which weighs these built-in tuning points of the GPU family
// against the winners stored in the database (runtime/dispatch/runtime.cpp).
struct HeuristicMatch {
  Config config;
  std::string origin; // "sm_90a point B=8,C=4096,..."
  double distance = 0;
};
std::optional<HeuristicMatch> nearest_own_point(const Op& op, const Problem& problem,
                                                const std::string& arch);

// What a configuration chosen for another problem (a stored winner, a built-in point)
// runs on `problem`: Op::adapt's version where that is valid for `arch`, else the
// configuration itself where it is, else nothing (a point tuned with 16-bit inputs may
// need adapting before it serves fp32 ones; an adapted one the op refuses falls back);
// inert parameters at the values Op::inert_params fixes for the problem.
std::optional<Config> serve_config(const Op& op, const Config& config, const Problem& problem,
                                   const std::string& arch);

// The waves the grid of `config` fills on `device`: blocks / (SMs x resident blocks
// per SM), resident blocks estimated from the block's threads against the SM's
// thread slots at k_heuristic_regs_per_thread registers each, its dynamic shared
// memory against the SM's, and at most 32. Exposed for tests.
double heuristic_waves(const LaunchGeometry& geometry, const cuda::DeviceInfo& device);

// Below this many waves a transferred configuration is split further: one wave
// leaves the last blocks' SMs idle while the others finish (the tail), two halve it.
constexpr double k_heuristic_min_waves = 2.0;
// Registers per thread assumed where the kernel is not compiled yet: 32 lets an SM
// with 64K registers hold its full 2048 threads, so kernels that use more hold fewer
// blocks than estimated and the estimate errs toward splitting more.
constexpr int k_heuristic_regs_per_thread = 32;

} // namespace autotune

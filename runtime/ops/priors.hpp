// Search priors: what measurements on one GPU taught about where an op's fast
// variants are, applied when tuning on that GPU only. They live in the op's space
// file as [[prune]] entries (parse_space leaves those to this parser):
//
//   [[prune]]                                  # measured on the H100 (bench/...)
//   arch = ["sm_90", "sm_90a"]                 # the targets it holds for (exact names)
//   when = { scan = "state", ystore = "during" } # optional: the configurations it is about
//   require = { cpl = 1, yred = [0] }          # what those must satisfy to be measured
//   why = "ystore=during lost with cpl > 1 and with yred > 0 on every benchmark shape"
//
// A condition names a parameter of [params], or `blocks` (the launch's block count
// for the problem, from Op::geometry), and gives a value (equal to it), a list (one
// of them) or { min = A, max = B } (an integer range, inclusive, either end optional).
// On an arch the entry names, a configuration for which every `when` condition holds
// and some `require` condition fails is not measured; on any other arch the entry
// does nothing, so a new GPU is searched on its own terms.
//
// Rules that model every GPU alike (a register file, lanes left idle by a tile longer
// than the problem) are not priors: they stay in the op's worth_measuring().
#pragma once

#include "op.hpp"
#include "space.hpp"

#include <optional>
#include <string>
#include <vector>

namespace autotune {

struct PriorCondition {
  std::string name;                // a parameter, or k_prior_blocks
  std::vector<std::string> values; // one of these (empty for a range)
  std::optional<long long> min;    // a range (inclusive)
  std::optional<long long> max;

  // Whether the configuration's (or the launch's) value satisfies the condition.
  bool holds(const std::string& value) const;
  // "cpl = 1", "scan in {shfl, smem}", "items <= 16", "blocks in [1, 63]".
  std::string describe() const;
};

struct Prior {
  std::vector<std::string> archs;
  std::vector<PriorCondition> when;
  std::vector<PriorCondition> require;
  std::string why;
  std::string origin; // "file:line" of its [[prune]] header

  bool applies_to(const std::string& arch) const;
};

// The condition name that stands for the launch's block count on the problem.
constexpr const char* k_prior_blocks = "blocks";

struct Priors {
  std::vector<Prior> entries;

  // Whether the priors for `arch` let the configuration be measured on the problem;
  // the failure names the entry (file:line), its reason and the unmet condition.
  // `config` must pass op.check() for the problem (`blocks` asks for its geometry).
  Result<bool> allow(const Op& op, const Config& config, const Problem& problem,
                     const std::string& arch) const;
};

// Reads the [[prune]] entries of a space file's TOML text (other tables are not
// looked at). Names and values are checked against `space`, the same file's
// parameters as parse_space read them. Throws Error(config) with
// "source:line:column: ..." for a syntax error, an entry that is not a table, an
// unknown key, a missing or empty arch/require/why, an arch that is not sm_XY[a], an
// unknown parameter, a value the parameter does not list, or a range over a
// parameter that is not an integer.
Priors parse_priors(const std::string& text, const std::string& source, const Space& space);

} // namespace autotune

// An op's parameter space, read from the TOML beside its template:
//   [params]  name = [values...]   (integers or strings; every combination is a candidate)
//   [default] name = value          (the variant used when nothing is tuned)
//   [limits]  name = [min, max]     (an integer parameter: the closed range it may take)
//             name = ["a", "b"]     (a string parameter: the values it may take)
//   [[prune]] search priors, read by runtime/ops/priors.hpp (parse_space skips them)
// The ops compute with these values (divide by them, shift by them, size grids with
// them), so a value outside its limits is refused here, as a configuration error
// naming the parameter and its limits, before any op sees it. An op's own space
// declares a limit for every parameter; a user's space (--space FILE) and --param
// overrides are checked against the op's limits (load_op_space). Accepted integers
// are stored in canonical spelling ("0128" becomes "128"), so one value is one
// variant key. Errors name the file and line (STYLE.md rule 4).
#pragma once

#include "runtime/base/error.hpp"
#include "types.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace autotune {

class Op;

// enumerate() holds every combination in memory: about 0.9 KB each for
// selective_scan's 13 parameters (1.3 GB for its 1.56M combinations). 4M keeps a
// space under about 4 GB and leaves 2.7x room above the largest built-in space; a
// larger one is a configuration error, not a std::bad_alloc.
constexpr size_t k_max_space_size = size_t(1) << 22;

struct Limit {
  std::string name;
  long long min = 0; // integer parameters: the closed range
  long long max = 0;
  std::vector<std::string> allowed; // string parameters; empty for an integer parameter
  std::string origin;               // "file:line:column" of the declaration

  bool integer() const { return allowed.empty(); }
  // "an integer in [32, 1024]" or "one of 'direct', 'smem'".
  std::string describe() const;
  // The value in canonical spelling, or why it is not allowed (not an integer, out
  // of the range, not one of the allowed strings).
  Result<std::string> admit(const std::string& value) const;
};

struct Parameter {
  std::string name;
  std::vector<std::string> values;
  std::string origin;         // "file:line:column" of its values, for messages
  std::string default_origin; // "file:line:column" of its [default] value
};

struct Space {
  std::string source; // file name used in messages
  std::vector<Parameter> params;
  Config default_config;
  // One per parameter when the file has [limits] (every op's own space does) or
  // after load_op_space; empty for a user's file without [limits].
  std::vector<Limit> limits;

  // Number of combinations; saturates at SIZE_MAX instead of wrapping around.
  size_t size() const;
  // Every combination, the first parameter varying slowest.
  std::vector<Config> enumerate() const;
  // The i-th combination in enumerate() order.
  Config at(size_t index) const;
  // Calls visit(config) for every combination in enumerate() order, without holding
  // them all: one Config is updated in place (an odometer over the parameters), so a
  // space of millions costs no more memory than one combination.
  void for_each(const std::function<void(const Config&)>& visit) const;
  // The same for combinations [begin, end) of that order (end <= size()): disjoint
  // ranges can be walked by several threads at once.
  void for_each(size_t begin, size_t end, const std::function<void(const Config&)>& visit) const;
  // The limit declared for `name`, or null.
  const Limit* limit(const std::string& name) const;
  // The parameter `name`, or null.
  const Parameter* param(const std::string& name) const;
  Parameter* param(const std::string& name);
};

// Parses TOML text; throws Error(config) with "source:line:column: message" for a
// syntax error, an unknown table, a parameter without values or listing one twice,
// a [limits] table that does not declare exactly the parameters, a value outside
// its limit, or more than k_max_space_size combinations.
Space parse_space(const std::string& text, const std::string& source);

// The op's own space (templates/<op>/space.toml), which must declare a limit for
// every parameter; throws Error(config) otherwise.
Space op_space(const Op& op);

// The space a tuning run searches: the op's own, or the TOML file `space_file`
// (when not empty) checked against the op's limits, then narrowed by `overrides`
// (restrict_space). Every value of the result lies within the op's limits. Throws
// Error(io) for a file that cannot be read, Error(config) for a bad value (naming
// the file, line, parameter and limit), Error(usage) for an unknown --param name.
Space load_op_space(const Op& op, const std::string& space_file, const Fields& overrides);

// Applies overrides "name=v1|v2,..." (replaces the values of named parameters).
// Throws Error(usage) for an unknown or repeated parameter and Error(config) for
// a value outside the parameter's limit, a value given twice, or a result of more
// than k_max_space_size combinations.
void restrict_space(Space& space, const Fields& overrides);

// Parameters that cannot change the kernel (Op::inert_params): always, for the problem,
// or while another parameter holds some of its values (selective_scan's time-parallel
// forms read none of the state form's parameters). Each inert parameter comes with the
// one value the op's check() accepts for it there.
struct InertRule {
  std::string when;                     // the deciding parameter; empty: always
  std::vector<std::string> when_values; // ... while it holds one of these
  Fields fixed;                         // inert parameters and their one value
};

// `config` with the inert parameters of every rule that applies set to the rule's value:
// the id the tuner measures for the same kernel (a configuration chosen for another
// problem may carry a value this problem's kernel does not read). Parameters the
// configuration does not name are left out.
Config apply_inert_rules(const Config& config, const std::vector<InertRule>& rules);

// The space cut into disjoint parts whose union holds every combination except those in
// which a rule's inert parameter takes another value than the rule's: walking the parts
// judges each kernel once, not once per value of a parameter it does not read. A rule
// whose deciding parameter is not in the space, or an inert parameter whose [params]
// lack the rule's value (a --param restricted it away), narrows nothing.
std::vector<Space> inert_parts(const Space& space, const std::vector<InertRule>& rules);

// `config` in the space's parameter order: configuration ids (config_id) compare equal
// only so. A parameter it does not name takes the space's [default] value when
// `fill_missing` (a configuration stored before the parameter existed, whose kernel
// that value reproduces), else it is an error. Throws Error(config) starting with
// `what` for a missing parameter (unless filled) or a name the space does not have.
Config order_config(const Space& space, const Config& config, bool fill_missing,
                    const std::string& what);

// Checks a configuration that did not come from the space (a stored winner's, for
// re-timing) against the space's limits: every name must be a parameter and every
// value within its limit. Throws Error(config) starting with `what`.
void check_config(const Space& space, const Config& config, const std::string& what);

} // namespace autotune

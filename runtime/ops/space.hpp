// An op's parameter space, read from the TOML beside its template:
//   [params]  name = [values...]   (integers or strings; every combination is a candidate)
//   [default] name = value          (the variant used when nothing is tuned)
// Errors name the file and line (STYLE.md rule 4).
#pragma once

#include "types.hpp"

#include <string>
#include <vector>

namespace autotune {

struct Parameter {
  std::string name;
  std::vector<std::string> values;
};

struct Space {
  std::string source; // file name used in messages
  std::vector<Parameter> params;
  Config default_config;

  size_t size() const; // number of combinations
  // Every combination, the first parameter varying slowest.
  std::vector<Config> enumerate() const;
  // The i-th combination in enumerate() order.
  Config at(size_t index) const;
};

// Parses TOML text; throws Error(config) with "source:line:column: message".
Space parse_space(const std::string& text, const std::string& source);

// Applies overrides "name=v1|v2,..." (narrows or replaces the values of named
// parameters); throws Error(usage) for unknown parameters.
void restrict_space(Space& space, const Fields& overrides);

} // namespace autotune

// What the ops layer's TOML readers (space.cpp, priors.cpp, heuristic.cpp) share:
// toml++ with the same settings, and errors that name the file, line and column of
// the node they are about (STYLE.md rule 4). Only sources of autotune_ops include it
// (toml++ is a private dependency of that library).
#pragma once

#include "runtime/base/error.hpp"

#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 1
#include <toml++/toml.h>

#include <string>

namespace autotune {

// "source:line:column" of a region of a TOML document read from `source`.
inline std::string where(const std::string& source, const toml::source_region& r) {
  return source + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

// Throws Error(config) "source:line:column: message".
[[noreturn]] inline void fail_at(const std::string& source, const toml::source_region& region,
                                 const std::string& message) {
  throw Error(ErrorKind::config, where(source, region) + ": " + message);
}

[[noreturn]] inline void fail_at(const std::string& source, const toml::node& node,
                                 const std::string& message) {
  fail_at(source, node.source(), message);
}

} // namespace autotune

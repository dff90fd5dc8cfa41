// The value of a command-line option, shared by the CLI's commands (tune, cache,
// regress, report): `--db --param x` (a forgotten value) must not take the next option
// for it, which would, say, create a database file named "--param".
#pragma once

#include "runtime/base/error.hpp"

#include <string>

namespace autotune {

// argv[i] is the option; returns argv[i + 1] and advances i past it. Refused (usage
// error naming the option): no value, an empty one, or one that starts with "--" (a
// file of that name is reachable as ./--name). `prefix` starts the message
// ("autotune report: "); `allow_empty` leaves an empty value to the caller's own check.
inline std::string option_value(int& i, int argc, char** argv, const std::string& prefix = "",
                                bool allow_empty = false) {
  const std::string option = argv[i];
  if (i + 1 >= argc) {
    throw Error(ErrorKind::usage, prefix + option + " needs a value");
  }
  const std::string value = argv[i + 1];
  if (value.empty() && !allow_empty) {
    // `--db ""` would otherwise mean the default database, `--op ""` every op.
    throw Error(ErrorKind::usage, prefix + option + " needs a value, got an empty string");
  }
  if (value.size() > 2 && value.compare(0, 2, "--") == 0) {
    throw Error(ErrorKind::usage, prefix + option + " needs a value, not the option " + value +
                                      " (a file of that name: ./" + value + ")");
  }
  ++i;
  return value;
}

} // namespace autotune

// Running the `autotune` CLI (AUTOTUNE_CLI, set by tests/CMakeLists.txt) as a user
// would, for the CLI tests: exit code and everything it printed.
#pragma once

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace autotune::testing {

struct Run {
  int code;           // the exit status; -1 when the CLI did not exit normally
  std::string output; // stdout and stderr together
};

// Starts `env autotune args` (env: "NAME=value ..." or empty); finish() collects it.
// Split in two so that a test can run several at once.
inline FILE* start(const std::string& args, const std::string& env = "") {
  std::string cmd = env + " " + AUTOTUNE_CLI + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  return p;
}

inline Run finish(FILE* p) {
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
    out.append(buf, n);
  }
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline Run run(const std::string& args, const std::string& env = "") {
  return finish(start(args, env));
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace autotune::testing

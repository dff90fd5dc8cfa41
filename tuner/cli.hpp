#pragma once

namespace autotune {

// The `autotune` command line; returns the process exit code (DESIGN.md:
// 0 ok, 1 regression or failed check, 2 usage/config error, 3 no GPU/driver).
int run_cli(int argc, char** argv);

} // namespace autotune

// Subcommands of the `autotune` CLI besides tuning, each in its own file.
// argv[0] is the subcommand name; the return value is the exit code.
#pragma once

namespace autotune {

int run_cache_command(int argc, char** argv);   // tuner/cache_cli.cpp
int run_regress_command(int argc, char** argv); // tuner/regress.cpp
int run_report_command(int argc, char** argv);  // tuner/report_cli.cpp

} // namespace autotune

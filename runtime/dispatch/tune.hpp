// Policy::tune inside the runtime: checking its options when a runtime is created,
// and the tune-then-read-back step of a miss. The tuner itself is reached through
// the Tuner hook (autotune.hpp); this library never links it.
#pragma once

#include "autotune.hpp"

#include "cache/database.hpp"

#include <string>

namespace autotune {

// The longest budget accepted: a longer one is a typo (or `inf`); the CLI refuses
// more than a week too.
constexpr double k_max_tune_budget_s = 7 * 24 * 3600.0;

// Checks what Policy::tune needs before a runtime touches the GPU: a budget in
// (0, a week] and a database path to store winners in (`database_path`, filled with
// the absolute path). Throws Error(usage) naming the option otherwise.
void check_tune_options(const RuntimeOptions& options, std::string& database_path);

// Runs `tuner` for `request`, then reads the winner it stored for this device key,
// template hash and NVRTC version from request.database (a fresh connection, so
// what the child process committed is seen). Throws Error(not_tuned) naming the
// op, problem and database when the tuner failed or stored no winner.
cache::WinnerRecord tune_problem(const Tuner& tuner, const TuneRequest& request,
                                 const std::string& device_key, const std::string& template_hash,
                                 const std::string& nvrtc_version);

} // namespace autotune

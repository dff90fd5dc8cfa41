// What `autotune` prints on stdout: a table per problem, or JSON with --json.
#pragma once

#include "tuner.hpp"

#include <cstdio>

namespace autotune {

void print_table(const TuneReport& report, std::FILE* out, size_t top = 10);

// `autotune --json`: one object, numbers that are not finite written as null.
//   op, arch, device, database
//   seconds            the session's wall time (tune()); start_s: before the first problem
//   problems[]         in the order tuned:
//     problem, cached (a stored winner answered: nothing below was measured), space,
//     invalid, compiled, cubins_reused, compile_failures, bytes, flops, device_bytes,
//     sampled, budget_exhausted, worker_restarts (this problem's), copy_us (memory-bound
//     ops), winner, winner_us
//     seconds          the problem's wall time
//     compile_s        NVRTC wall time (also phases_s.compile)
//     phases_s         where `seconds` went (ProblemPhases, tuner.hpp), sequential, summing
//                      to `seconds`: select, setup, compile, cubin_load, measure, restart,
//                      store, recheck, and other (the bookkeeping between them)
//     worker_s         the worker's own account of its part of setup, measure, restart
//                      and recheck (WorkerSeconds, testbed.hpp): context, modules,
//                      allocate, inputs, copy, module_load, check, timing
//     search_s         the strategy's run (compile, cubin_load, measure and store of the
//                      search), what budget_s bounds (halving; 0: no budget)
//     variants[]       variant, outcome, median_us, p10_us, p90_us, samples,
//                      sm_clock_mhz, rel_err, resumed, eliminated_in_round, timed_in
//                      (the search step its timing comes from, VariantReport), message
// Readers (bench/headline.py, bench/tuning_cost.py) look fields up by name: add fields,
// never rename one.
void print_json(const TuneReport& report, std::FILE* out);

} // namespace autotune

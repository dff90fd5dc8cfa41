// One tuning session: for each problem, enumerate the op's space, drop invalid
// configurations, compile the rest in parallel (reusing cubins already in the
// database), check every variant against the reference on fresh random inputs,
// time the correct ones, and store results and the winner. Results are stored as
// they are measured, so an interrupted session resumes where it stopped.
#pragma once

#include "cache/database.hpp"
#include "runtime/ops/priors.hpp"
#include "runtime/ops/space.hpp"
#include "testbed.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace autotune {

class Progress;

// The default search (HalvingSearch, strategy.hpp) spends about k_default_budget_s of
// compiling and measuring on a problem with tuned neighbours, and k_cold_budget_factor
// times as much on one with nothing to start from. Chosen for `autotune --op attention`
// (51 shapes) to finish within 3 minutes on an H100: one cold shape (20 s allowed; its
// 234 variants compile and are measured in about 10 s) and 50 warm ones at 2 s plus
// about 0.5 s of inputs, reference and re-check each: about 150 s (an estimate, README
// "Search strategies"; bench/headline.py measures it).
constexpr double k_default_budget_s = 2.0;
constexpr double k_cold_budget_factor = 10.0;
// Seeds per problem: the winners of the nearest tuned problems, measured first and in
// full. Neighbours along one size axis (a shorter and a longer sequence) and across
// another (batch, head dim) give about four distinct winners.
constexpr int k_default_transfer = 4;

struct TuneOptions {
  std::string op;
  std::string arch = "auto";       // "auto" asks the GPU
  std::vector<std::string> shapes; // --shape strings; empty: the op's default shapes
  std::string db_path;             // empty: cache::default_database_path()
  int jobs = 0;                    // compile threads; 0: one per core
  bool compile_only = false;
  bool force = false;     // re-measure even when a winner is stored
  Fields param_overrides; // --param name=v1|v2
  std::string space_file; // --space FILE.toml replaces the op's space
  TimingProtocol protocol;
  std::string strategy = "halving";   // or "exhaustive", "random" (see samples)
  int samples = 0;                    // random: how many configurations (0: up to 4096)
  unsigned long long sample_seed = 1; // random: the same seed samples the same configurations
  // halving: seconds per problem with tuned neighbours (0: k_default_budget_s); random:
  // > 0 measures the sample by halving within it; exhaustive: must be 0.
  double budget_s = 0;
  // halving: start from the winners of this many nearest tuned problems (0: none)
  int transfer = k_default_transfer;
  double measure_timeout_s = 10; // per variant, on top of the timing cap
  double setup_timeout_s = 600;  // inputs and reference of one problem
};

struct VariantReport {
  std::string config;
  std::string variant_key;
  cache::Outcome outcome = cache::Outcome::ok;
  Timing timing;
  double rel_err = 0;
  int sm_clock_mhz = 0; // SM clock right after timing (NVML), 0 when unknown
  std::string message;
  bool reused_result = false; // measured by an earlier session (resume)
  // Successive halving cut it after this round (not a winner): on a cheap timing, or a
  // seed left out of the final round (HalvingSearch, k_final_seeds) on its full one.
  int eliminated_in_round = 0;
  // The step of the search its timing comes from: "full" (exhaustive, random), "seeds",
  // "explore", "round 2" or "final" (halving); "" when this session did not time it.
  // A string literal (static storage).
  const char* timed_in = "";
};

// Successive halving (HalvingSearch, strategy.hpp) keeps the best 1/k_halving_eta of
// each round; a round over the budget skips to a final full measurement of the best
// k_halving_eta.
constexpr int k_halving_eta = 4;

// Where a tuned problem's wall time (ProblemReport::seconds) went, in seconds, by
// what the tuning process was doing. The phases follow one another and never overlap;
// with compile_seconds they add up to `seconds` less the bookkeeping between them
// (`other` in --json). What the worker did inside setup, measure and recheck is
// ProblemReport::worker.
struct ProblemPhases {
  double select = 0;     // the space walked and judged, the seeds looked up, the candidates
                         // described (variant keys) and their stored results looked up
  double setup = 0;      // waiting for the worker's buffers, random inputs and reference
                         // (and copy timing; a worker process started for it when none
                         // was running), less the seeds' build done meanwhile (which
                         // counts as compile, cubin_load and store)
  double cubin_load = 0; // cubins read from the database (and their checksums)
  double measure = 0;    // the search's checks and timings: round trips to the worker
  double restart = 0;    // replacement workers started and set up after a FAULT or TIMEOUT
  double store = 0;      // results and the winner written to the database
  double recheck = 0;    // the second input set (inputs and reference) and the would-be
                         // winners' checks on it
  double sum() const { return select + setup + cubin_load + measure + restart + store + recheck; }
};

struct ProblemReport {
  Problem problem;
  size_t space_size = 0;
  size_t invalid = 0;       // dropped by the op's constraints, heuristics or priors
  size_t compiled = 0;      // compiled by this session
  size_t cubins_reused = 0; // found in the database instead
  size_t compile_failures = 0;
  double compile_seconds = 0; // wall time of the parallel compile
  double seconds = 0;         // wall time for the whole problem
  ProblemPhases phases;       // where `seconds` went, beside compile_seconds
  WorkerSeconds worker;       // the worker's own account of its part of it
  // The strategy's run (compiling, loading cubins, measuring, storing results; the
  // seeds built while the worker set up included): what a budget bounds. budget_s: the
  // halving budget it ran under (warm or cold), 0 when the strategy has none;
  // search_seconds over it is the budget's overrun (seeds, final round and the batch
  // in flight run whatever the budget).
  double search_seconds = 0;
  double budget_s = 0;
  bool cached = false;        // a stored winner answered; nothing ran
  std::optional<Timing> copy; // device-to-device copy of the same bytes
  std::vector<VariantReport> variants;
  std::optional<size_t> winner; // index into variants
  std::string winner_config;    // also set when cached
  double winner_us = 0;
  double bytes = 0;
  double flops = 0;
  size_t device_bytes = 0;       // GPU memory the testbed held
  size_t sampled = 0;            // random strategy: configurations drawn (0: all)
  bool budget_exhausted = false; // halving: the budget stopped exploring or skipped round 2
  // halving: the tuned problems whose winners were measured first (nearest first)
  std::vector<std::string> transferred_from;
  int worker_restarts = 0; // worker processes replaced after faults/timeouts (this problem)
  // When no configuration of the space may be measured for the problem: why (the op's
  // checks and the priors, each distinct reason with how many configurations it
  // dropped), most common first, at most k_why_none_reasons of them; why_none_more
  // counts the distinct reasons left out.
  std::vector<std::pair<std::string, size_t>> why_none;
  size_t why_none_more = 0;
};

// Enough for every reason one op's checks give a restricted space (attention's
// family=*_multicast on a causal problem: 5), the one that matters often the rarest.
constexpr size_t k_why_none_reasons = 8;

struct TuneReport {
  std::string op;
  std::string arch;
  std::string device; // empty for compile-only without a GPU
  std::string database;
  std::vector<ProblemReport> problems;
  double seconds = 0;       // wall time of the whole session
  double start_seconds = 0; // before the first problem: space, database, device, the
                            // stored winners looked up
  bool compile_failed() const;
};

TuneReport tune(const TuneOptions& options, Progress& progress);

// What a session searches: the op's space (or --space FILE, within the op's
// limits: load_op_space) narrowed by --param, and the search priors of the same file.
struct SearchSpace {
  Space space;
  Priors priors;
};

// Throws Error(io) for a --space file that cannot be read, Error(config) for a bad
// space or [[prune]] entry (file:line), Error(usage) for an unknown --param name.
SearchSpace load_search_space(const Op& op, const TuneOptions& options);

// Whether a configuration is measured on `arch` for the problem: it must run
// (Op::check), be worth the time (Op::worth_measuring) and pass the priors for the
// arch. The failure says which and why (autotune list --pruned shows it).
enum class Verdict { measure, invalid, pruned };
Verdict judge(const Op& op, const Priors& priors, const Config& config, const Problem& problem,
              const std::string& arch, std::string* why = nullptr);

struct Judged {
  Config config;
  Verdict verdict = Verdict::invalid;
  std::string why; // filled only when asked for
};

// Judges the space's combinations for the problem on `threads` threads, except those in
// which a parameter the op calls inert (Op::inert_params) takes another value than its
// one (the same kernel again). Returns the judged ones whose verdict `keep` accepts, in
// a fixed order (each part of inert_parts() in enumerate() order), and sets `skipped` to
// the number of combinations not returned (the inert ones included).
std::vector<Judged> judge_space(const Op& op, const Priors& priors, const Space& space,
                                const Problem& problem, const std::string& arch, int threads,
                                const std::function<bool(Verdict)>& keep, bool with_why,
                                size_t& skipped);

// Indices of the correct variants that survived every halving round, in order of
// preference: fastest first, except
// that medians within the fastest one's noise count as tied and ties go to the
// smallest variant id (deterministic across processes).
std::vector<size_t> preference_order(const std::vector<VariantReport>& variants);

// The configurations the strategy of `options` selects (make_strategy, strategy.hpp):
// all (halving, exhaustive), or a seeded random sample (random, or any space over
// k_max_exhaustive valid configurations).
std::vector<Config> select_strategy(std::vector<Config> configs, const TuneOptions& options,
                                    ProblemReport& report);

// A configuration to start from: the winner of a tuned problem near this one.
struct TransferSeed {
  std::string config;   // config_id
  std::string problem;  // the tuned problem it won
  int differing = 0;    // fields other than sizes that differ (compare_problems)
  double size = 0;      // size distance (+0.01 for a winner of an older template)
  bool builtin = false; // the op's built-in point for the GPU family, not a stored winner
};

// The distinct winners of the tuned problems nearest to `problem`, at most k: same op,
// device and NVRTC version; first the problems that agree on every field that is not a
// size, by size distance (runtime/ops/distance.hpp, the runtime's nearest policy), then
// those that differ in a dtype, flag or layout, fewest differences first: their
// winners are still better starting points than nothing, and they are measured, not
// trusted.
std::vector<TransferSeed> nearest_winners(const cache::Database& db, const Op& op,
                                          const std::string& device_key, const Problem& problem,
                                          size_t k);

// The first k of `nearest` (nearest first) that are valid for the problem -- among
// `valid` as the op adapts them to it (what the runtime's nearest policy runs), else as
// they are -- without repeats. Where none of the nearest few winners fitted, the search ran
// as if nothing was tuned (10x the budget): on the H100 the headline command's first
// D=128 attention problem, after only D=64 ones, took 20 s instead of 2. A winner stored
// before a parameter of `space` existed takes that parameter's [default] value
// (order_config), so it still matches its configuration in `valid`.
std::vector<TransferSeed> valid_seeds(const Op& op, const Space& space, const Problem& problem,
                                      const std::vector<Config>& valid,
                                      std::vector<TransferSeed> nearest, size_t k);

// The op's built-in point for the problem on `arch` (heuristic_config) as a seed, its id
// in `space`'s parameter order (a --space file may list them in another); none where the
// op has no point for the arch or the space lacks one of its parameters.
std::optional<TransferSeed> builtin_seed(const Op& op, const Space& space, const Problem& problem,
                                         const std::string& arch);

// Problems from --shape strings, or the op's defaults.
std::vector<Problem> load_problems(const Op& op, const std::vector<std::string>& shapes);

} // namespace autotune

// Search strategies: which of a problem's valid configurations a session measures,
// and how it spends its measuring time on them. Each strategy is one class:
//  - HalvingSearch (the default): within a time budget per problem, the winners of
//    the nearest tuned problems first (transfer), then cheap measurements of the
//    configurations nearest to the best so far, successive halving over them, and a
//    full measurement of the few left beside the best seed;
//  - ExhaustiveSearch: every configuration, in full (a space over k_max_exhaustive
//    is sampled instead: enumerating it would take hours);
//  - RandomSearch: a seeded sample, in full.
// What all of them share lives in the session (tuner.cpp): compiling, resuming
// stored results, recording compile failures, re-checking the winner on a second
// input set and storing it. A strategy sees the session only through a Bench.
#pragma once

#include "tuner.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace autotune {

// Spaces with more valid configurations than this are sampled, never enumerated.
constexpr size_t k_max_exhaustive = 4096;

// The candidates of one problem, as a strategy measures them (by index).
class Bench {
public:
  virtual ~Bench() = default;
  // Makes candidates measurable: their cubins from the database, or compiled now on
  // all cores. One that does not compile gets COMPILE_FAIL (final, stored); see
  // measurable().
  virtual void prepare(const std::vector<size_t>& indices) = 0;
  // Checks and, when correct, times candidate `i` with `protocol`; the outcome
  // replaces what variant(i) held.
  virtual void measure(size_t i, const TimingProtocol& protocol) = 0;
  // Every sample of the latest measure() call, in the order taken: what its
  // variant(i).timing summarises (empty when it timed nothing).
  virtual std::vector<double> last_samples() const = 0;
  // Stores variant(i) as the candidate's result: a resumed session reuses it
  // instead of measuring again, so only final outcomes are stored.
  virtual void store(size_t i) = 0;
  virtual VariantReport& variant(size_t i) = 0;
  // Candidate i's configuration, parsed once (its key() is variant(i).config).
  virtual const TypedConfig& config(size_t i) const = 0;
  // Progress: `measured` of the problem's `total` candidates have been measured,
  // now in `stage` ("compile", "seeds", "explore", "round 2", "final", "measure").
  virtual void progress(const std::string& stage, size_t measured, size_t total) = 0;
};

// Whether a prepared candidate can be measured (it compiled).
bool measurable(Bench& bench, size_t i);

// What a strategy is given for one problem (indices into the bench).
struct SearchInput {
  std::vector<size_t> pending; // to measure: no stored result yet
  // Of the pending ones, the winners of the nearest tuned problems, nearest first
  // (transfer; empty without).
  std::vector<size_t> seeds;
  // How many of the seeds are the op's built-in points rather than stored winners of
  // tuned problems: measured first, but they do not make the problem warm (a problem
  // with no tuned neighbour still gets the cold budget).
  size_t builtin_seeds = 0;
  // How many tuned problems of the op on this GPU the transfer found near this one,
  // whether or not their winners are valid here: with any, the problem is not cold
  // (the built-in point and the neighbours' knowledge in the space's order are a start;
  // a D=128 attention problem after only D=64 ones, whose winners do not fit it, took
  // 20 s of the headline command's 180 as a cold one).
  size_t neighbours = 0;
  // Correct results a killed session stored (full measurements): they compete in
  // the final round without being measured again.
  std::vector<size_t> measured;
  // Seconds of the search's own work the session did before calling it (the seeds
  // prepared while the worker set the problem up): a budget counts them as spent.
  double spent_s = 0;
};

class Strategy {
public:
  virtual ~Strategy() = default;
  // The configurations to measure, of the valid ones (in their order, or a seeded
  // sample, recorded in report.sampled).
  virtual std::vector<Config> select(std::vector<Config> valid, ProblemReport& report) const = 0;
  // Measures input.pending (the others' outcomes are known). On return each one it
  // measured holds its final outcome, stored, or carries eliminated_in_round (kept for
  // the report, never a winner): when only a cheap timing cut it (never stored), or,
  // under HalvingSearch, a seed the final round left out (its full measurement
  // stored); those it never measured keep the outcome they had (the session leaves
  // them out of the report).
  virtual void measure(Bench& bench, const SearchInput& input, ProblemReport& report) const = 0;
  // Seconds this strategy may spend on a problem (the ETA uses it), 0 when unbounded;
  // `warm`: the problem has tuned neighbours to start from.
  virtual double budget_s(bool warm) const {
    (void)warm;
    return 0;
  }
  // Whether it starts from the winners of the nearest tuned problems.
  virtual bool transfers() const { return false; }
};

// What the exhaustive and random searches share: every selected configuration is
// measured in full with `protocol`, and a space is sampled down to `count`
// configurations drawn with `seed`. They differ only in when they sample (select).
class SampledSearch : public Strategy {
public:
  void measure(Bench& bench, const SearchInput& input, ProblemReport& report) const override;

protected:
  SampledSearch(TimingProtocol protocol, size_t count, unsigned long long seed);
  // `count` of `valid` drawn with `seed` (recorded in report.sampled).
  std::vector<Config> draw(std::vector<Config> valid, ProblemReport& report) const;

private:
  TimingProtocol m_protocol;
  size_t m_count;
  unsigned long long m_seed;
};

class ExhaustiveSearch final : public SampledSearch {
public:
  // A space over k_max_exhaustive configurations is sampled down to `cap` with `seed`.
  ExhaustiveSearch(TimingProtocol protocol, size_t cap, unsigned long long seed);
  std::vector<Config> select(std::vector<Config> valid, ProblemReport& report) const override;
};

class RandomSearch final : public SampledSearch {
public:
  // `samples` configurations drawn with `seed`: every process (every rank of a
  // distributed session) with the same seed and space draws the same ones.
  RandomSearch(TimingProtocol protocol, size_t samples, unsigned long long seed);
  std::vector<Config> select(std::vector<Config> valid, ProblemReport& report) const override;
};

// Successive halving within a time budget per problem, starting from transfer seeds:
//  1. the seeds (winners of the nearest tuned problems, the op's built-in point) are
//     compiled and measured in full: the best of them competes in the final round, so
//     the result is never worse than it;
//  2. exploration: the other candidates are compiled in batches and measured cheaply
//     (round_protocol(full, 0, 3)), those nearest in parameter space to the best so
//     far first, one in k_explore_random_share drawn at random instead, until the
//     budget, less what the final round will take, is spent;
//  3. halving: cheap timings over k_prune_ratio times the best full one are cut, the
//     best 1/eta of the rest measured again (round 2) when the budget allows, and the
//     best eta measured in full (final) with the best k_final_seeds seeds, each in
//     k_final_passes passes interleaved with the others' (and those cut on a timing
//     taken at a much lower SM clock, k_clock_gap); the seeds left out are cut.
//     Failures are stored at once, timings only from full measurements.
// The budget covers compiling and measuring (not the problem's inputs and reference,
// nor the winner's re-check); a problem with nothing to start from (no seeds, no
// stored results, or seeds that all failed here) gets k_cold_budget_factor times as
// much. The seeds, the final round, the first eta cheap measurements of a cold
// problem, exploration until something is correct and the cheap timings of the first
// batch compiled (up to k_sunk_compile_share of its compile time) always run: a budget
// spent by them is overrun. One search tunes a session's problems one after another,
// and the session keeps to the sum of their budgets (the plan its ETA shows): what a
// problem overran is owed, and the next warm problems' budgets are cut by it, each down
// to k_budget_floor_share of its own, until what they leave unspent has paid it back (a
// cold problem keeps its whole budget: it has nothing but the built-in point to start
// from).
class HalvingSearch final : public Strategy {
public:
  using Clock = std::function<double()>; // seconds, monotonic
  // `selection` picks the configurations (exhaustive or random); `batch`: candidates
  // compiled together (about twice the compile threads keeps them busy).
  HalvingSearch(std::unique_ptr<Strategy> selection, TimingProtocol protocol, double budget_s,
                size_t batch, unsigned long long seed, Clock clock = {});
  std::vector<Config> select(std::vector<Config> valid, ProblemReport& report) const override;
  void measure(Bench& bench, const SearchInput& input, ProblemReport& report) const override;
  double budget_s(bool warm) const override;
  bool transfers() const override { return true; }

  // The protocol of `round` (0-based) of `rounds`: the full one for the last round,
  // eta^(rounds-1-round) times fewer samples and seconds before it.
  static TimingProtocol round_protocol(const TimingProtocol& full, int round, int rounds);
  // The protocol of the final round's pass `pass` (0-based) of `passes`: a passes-th
  // of the full protocol's samples, seconds and batch, so that one finalist's passes
  // take about what one full measurement does (what final_reserve counts on). The
  // batch shrinks too because a measurement takes whole batches: a slow kernel's full
  // one stops after two of 16, and four passes of 16 would take twice that. Passes
  // after the first warm up with one launch: the first paid the first-launch costs.
  static TimingProtocol pass_protocol(const TimingProtocol& full, int pass, int passes);

  // Wall seconds of one compile wave (as many candidates as compile threads: half a
  // batch) over the batches of every problem this search measured so far.
  struct Waves {
    double seconds = 0;
    double waves = 0;
  };

  // Seconds the problems measured so far took past their budgets, less what later ones
  // left unspent (never below zero: an early finish gives no later problem more than
  // its budget).
  double owed_s() const { return m_owed_s; }

private:
  std::unique_ptr<Strategy> m_selection;
  TimingProtocol m_protocol;
  double m_budget_s;
  size_t m_batch;
  unsigned long long m_seed;
  Clock m_clock;
  // A problem's first batch has no compile time of its own to go by: the waves of the
  // problems before it (one session tunes many) bound it to the waves that fit in what
  // is left of its budget. Without it, the headline command's 2 s searches compiled a
  // first batch of two waves (26-37 wgmma variants, 2.1-3.9 s) on 25 of 51 shapes.
  mutable Waves m_waves;
  // Without it the headline command's 51 attention searches (2 s budgets, 20 s for the
  // first) ran 23-45 s past their 120 s: a D=128 Hopper seed's compile wave alone takes
  // up to 3.4 s.
  mutable double m_owed_s = 0;
};

// The final round measures each finalist in this many passes, the finalists in
// alternating order from pass to pass (A B C, C B A, A B C, C B A): one session's
// medians drift by 5-15% with the GPU's clock, and finalists measured one after
// another would be ranked partly by when each was measured. With an even count, a
// finalist's k-th pass from the start and k-th from the end sit at positions that add
// up to the same for every finalist, so a steady drift moves every finalist's median
// (pool_passes: of four, the mean of the middle two) alike. Four rather than two, so
// that the median also leaves out a pass thrown off by a clock step.
constexpr int k_final_passes = 4;

// A problem's budget is cut by what earlier problems of the session overran down to
// this share of it, no further: a quarter of the default 2 s still measures the seeds
// and, after a fast seed, a first batch; the rest of the debt waits for later problems.
constexpr double k_budget_floor_share = 0.25;

// The seeds (two or more) are measured the same way, in this many passes in alternating
// order (A B, B A): they are measured first, right after the problem's first compile
// wave left the GPU idle, and final_seeds compares them within k_final_seed_tie, so a
// clock moving while they are measured must reach them alike. (One after the other, a
// seed 1% faster measured second during a 4% slowdown read 3% slower and was cut:
// tests/test_tuner_tuner.cpp.)
constexpr int k_seed_passes = 2;

// The final round also measures the best seed measured in full at the start (in
// preference_order), and up to k_final_seeds - 1 more whose early medians are within
// k_final_seed_tie of the best seed's, beside the halving finalists and in the same
// passes; their early measurement then no longer counts, and the seeds left out are
// cut. A seed is often the winner or a near tie, and its early timing against the
// finalists' late ones would be ranked partly by when each was measured, as in a
// sequential final round. The seeds were measured together (k_seed_passes), so their
// order holds but for ties within the noise: the best seed stands for the rest unless
// another ties with it. With the best one alone, the headline command's 2 s search once
// cut a seed 1% behind it (bf16 D=64 causal S=2048, 344.4 us) that then benched 5%
// faster than the winner. Each seed adds one full measurement to
// the round, which final_reserve takes out of exploration's share of the budget.
constexpr size_t k_final_seeds = 3;
constexpr double k_final_seed_tie = 1.02;

// A correct timing of this session left out of the final round, within k_prune_ratio of
// the fastest as timed, joins the round when a finalist whose timing ran at an SM clock
// at least k_clock_gap higher (NVML, read right after each timing) took more clock
// cycles than it (median x MHz): up to k_clock_finalists of them, the fewest cycles
// first, measured beside the others in the same passes. Cycles decide nothing (a lower
// clock is partly a kernel's own power draw, which it also pays in use): they only say
// that the two timings were taken under conditions too different to cut on. In the
// headline attention run of be96107, 10 cuts in 9 of 51 problems were such (clocks
// 1335-1980 MHz over the run; bench/clock_cuts.py), one of them the variant an
// exhaustive run of the problem found faster (2547 us at 1380 MHz against the winner's
// 2424 at 1725; paired later, 2.8% faster). Against the fastest timing alone the rule
// missed cuts whose winner had been timed early at a clock as low as theirs. Each adds
// one full measurement, which final_reserve takes out of exploration's share.
constexpr double k_clock_gap = 1.05;
constexpr size_t k_clock_finalists = 2;

// One finalist's passes pooled into the full measurement it stands for: the median
// of the passes' medians, p10 and p90 of all their samples (`samples_us`, every
// pass's; without them, the lowest p10 and highest p90 of the passes), the sample
// count summed. The median of the medians, not of all samples: each pass counts once,
// however many samples its stopping rule took (a noisy pass runs to its cap, and a
// pooled median would lean on the noisy moments), and a pass at a clock step is
// outvoted. `passes` must not be empty.
Timing pool_passes(const std::vector<Timing>& passes, const std::vector<double>& samples_us);

// A cheap timing this many times the best full measurement is cut before round 2
// and the final: cheap medians (16 samples, one warm-up) stay within a few percent
// of full ones, so a candidate 10% slower cannot win.
constexpr double k_prune_ratio = 1.10;
// The first exploration batch, when its compilation ran past the budget, is still
// measured cheaply while its timings take at most this share of what compiling it took:
// the compile is paid, and without it the search explores nothing beyond its seeds (a
// cheap timing costs a few ms against NVRTC's 0.05-4 s per state-form selective_scan
// variant, and one slow variant holds the whole batch: on the H100 a new shape's first
// batch of 32 took 3.5-5.3 s and was thrown away against a 2 s budget). Later batches
// past the budget are not: measuring all of them took the headline attention command
// from 171 to 187 s (13 s more of measurements over its 51 shapes).
constexpr double k_sunk_compile_share = 0.5;
// One candidate in this many is drawn at random during exploration, so a search
// around poor seeds still samples the whole space.
constexpr size_t k_explore_random_share = 4;

// Distance between two configurations of one space: parameters that differ, plus a
// tenth of |log2 ratio| for each positive integer one (block_m 128 is nearer 192
// than 64).
double config_distance(const TypedConfig& a, const TypedConfig& b);

// The strategy TuneOptions ask for: options.strategy ("halving", "exhaustive",
// "random") with budget_s, samples, sample_seed and jobs (compile batches). Throws
// Error(usage) for an unknown strategy, or a budget with exhaustive search.
std::unique_ptr<Strategy> make_strategy(const TuneOptions& options);

} // namespace autotune

// Search strategies: which of a problem's valid configurations a session measures,
// and how it spends its measuring time on them. Each strategy is one class:
//  - ExhaustiveSearch: every configuration, in full (a space over k_max_exhaustive
//    is sampled instead: enumerating it would take hours);
//  - RandomSearch: a seeded sample, in full;
//  - HalvingSearch: what another strategy selected, in rounds of successive halving.
// What all of them share lives in the session (tuner.cpp): compiling, resuming
// stored results, recording compile failures, re-checking the winner on a second
// input set and storing it. A strategy sees the session only through a Bench.
#pragma once

#include "tuner.hpp"

#include <memory>
#include <string>
#include <vector>

namespace autotune {

// Spaces with more valid configurations than this are sampled, never enumerated.
constexpr size_t k_max_exhaustive = 4096;

// The session's candidates, as a strategy measures them (by index).
class Bench {
public:
  virtual ~Bench() = default;
  // Checks and, when correct, times candidate `i` with `protocol`; the outcome
  // replaces what variant(i) held.
  virtual void measure(size_t i, const TimingProtocol& protocol) = 0;
  // Stores variant(i) as the candidate's result: a resumed session reuses it
  // instead of measuring again, so only final outcomes are stored.
  virtual void store(size_t i) = 0;
  virtual VariantReport& variant(size_t i) = 0;
  // Progress: the `done`-th of `total` candidates of `stage` is being measured.
  virtual void progress(const std::string& stage, size_t done, size_t total) = 0;
  virtual void stage_done() = 0;
};

class Strategy {
public:
  virtual ~Strategy() = default;
  // The configurations to measure, of the valid ones (in their order, or a seeded
  // sample, recorded in report.sampled).
  virtual std::vector<Config> select(std::vector<Config> valid, ProblemReport& report) const = 0;
  // Measures the candidates `pending` (indices into the bench; the others' outcomes
  // are already known). On return each holds its final outcome, stored, or carries
  // eliminated_in_round when only a cheap timing cut it (kept for the report, never
  // stored, never a winner).
  virtual void measure(Bench& bench, std::vector<size_t> pending, ProblemReport& report) const = 0;
};

class ExhaustiveSearch final : public Strategy {
public:
  // A space over k_max_exhaustive configurations is sampled down to `cap` with `seed`.
  ExhaustiveSearch(TimingProtocol protocol, size_t cap, unsigned long long seed);
  std::vector<Config> select(std::vector<Config> valid, ProblemReport& report) const override;
  void measure(Bench& bench, std::vector<size_t> pending, ProblemReport& report) const override;

private:
  TimingProtocol m_protocol;
  size_t m_cap;
  unsigned long long m_seed;
};

class RandomSearch final : public Strategy {
public:
  // `samples` configurations drawn with `seed`: every process (every rank of a
  // distributed session) with the same seed and space draws the same ones.
  RandomSearch(TimingProtocol protocol, size_t samples, unsigned long long seed);
  std::vector<Config> select(std::vector<Config> valid, ProblemReport& report) const override;
  void measure(Bench& bench, std::vector<size_t> pending, ProblemReport& report) const override;

private:
  TimingProtocol m_protocol;
  size_t m_samples;
  unsigned long long m_seed;
};

// Successive halving (k_halving_eta, tuner.hpp): every candidate gets a cheap
// measurement, the best 1/eta a longer one, and so on until one round of full
// measurements; rounds that would overrun `budget_s` are skipped, and a budget
// spent early sends only the best eta to the final round.
class HalvingSearch final : public Strategy {
public:
  // `selection` picks the configurations (exhaustive or random).
  HalvingSearch(std::unique_ptr<Strategy> selection, TimingProtocol protocol, double budget_s);
  std::vector<Config> select(std::vector<Config> valid, ProblemReport& report) const override;
  void measure(Bench& bench, std::vector<size_t> pending, ProblemReport& report) const override;

  // The protocol of `round` (0-based) of `rounds`: the full one for the last round,
  // eta^(rounds-1-round) times fewer samples and seconds before it.
  static TimingProtocol round_protocol(const TimingProtocol& full, int round, int rounds);

private:
  std::unique_ptr<Strategy> m_selection;
  TimingProtocol m_protocol;
  double m_budget_s;
};

// The strategy TuneOptions ask for: options.strategy ("exhaustive", "random",
// "halving") with samples and sample_seed; a budget_s > 0 measures the selection by
// successive halving. Throws Error(usage) for an unknown strategy, or halving
// without a budget.
std::unique_ptr<Strategy> make_strategy(const TuneOptions& options);

} // namespace autotune

#include "strategy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace autotune {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// `n` of the configurations, drawn with `seed` (all of them when n covers them).
std::vector<Config> sample(std::vector<Config> configs, size_t n, unsigned long long seed,
                           ProblemReport& report) {
  if (n >= configs.size()) {
    return configs;
  }
  std::mt19937_64 rng(seed);
  std::shuffle(configs.begin(), configs.end(), rng);
  configs.resize(n);
  report.sampled = n;
  return configs;
}

// One round: every pending candidate checked and timed with the full protocol, and
// its result stored at once.
void measure_in_full(Bench& bench, const std::vector<size_t>& pending,
                     const TimingProtocol& protocol) {
  for (size_t k = 0; k < pending.size(); ++k) {
    bench.progress("measure", k + 1, pending.size());
    bench.measure(pending[k], protocol);
    bench.store(pending[k]);
  }
  bench.stage_done();
}

} // namespace

// ---- exhaustive -----------------------------------------------------------------

ExhaustiveSearch::ExhaustiveSearch(TimingProtocol protocol, size_t cap, unsigned long long seed)
    : m_protocol(protocol), m_cap(cap), m_seed(seed) {}

std::vector<Config> ExhaustiveSearch::select(std::vector<Config> valid,
                                             ProblemReport& report) const {
  if (valid.size() <= k_max_exhaustive) {
    return valid;
  }
  return sample(std::move(valid), m_cap, m_seed, report);
}

void ExhaustiveSearch::measure(Bench& bench, std::vector<size_t> pending, ProblemReport&) const {
  measure_in_full(bench, pending, m_protocol);
}

// ---- random ---------------------------------------------------------------------

RandomSearch::RandomSearch(TimingProtocol protocol, size_t samples, unsigned long long seed)
    : m_protocol(protocol), m_samples(samples), m_seed(seed) {}

std::vector<Config> RandomSearch::select(std::vector<Config> valid, ProblemReport& report) const {
  return sample(std::move(valid), m_samples, m_seed, report);
}

void RandomSearch::measure(Bench& bench, std::vector<size_t> pending, ProblemReport&) const {
  measure_in_full(bench, pending, m_protocol);
}

// ---- successive halving -----------------------------------------------------------

HalvingSearch::HalvingSearch(std::unique_ptr<Strategy> selection, TimingProtocol protocol,
                             double budget_s)
    : m_selection(std::move(selection)), m_protocol(protocol), m_budget_s(budget_s) {}

std::vector<Config> HalvingSearch::select(std::vector<Config> valid, ProblemReport& report) const {
  return m_selection->select(std::move(valid), report);
}

TimingProtocol HalvingSearch::round_protocol(const TimingProtocol& full, int round, int rounds) {
  if (round + 1 >= rounds) {
    return full;
  }
  TimingProtocol p = full;
  double scale = std::pow(double(k_halving_eta), double(rounds - 1 - round));
  p.warmup = 1;
  p.min_samples = std::max(3, int(full.min_samples / scale));
  p.max_samples = std::max(p.min_samples, int(full.max_samples / scale));
  p.min_seconds = full.min_seconds / scale;
  p.max_seconds = std::max(0.005, full.max_seconds / scale);
  return p;
}

void HalvingSearch::measure(Bench& bench, std::vector<size_t> pending,
                            ProblemReport& report) const {
  // Enough rounds that eta^rounds covers the candidates: one left after the last cut.
  int rounds = 1;
  while (std::pow(double(k_halving_eta), double(rounds)) < double(pending.size())) {
    ++rounds;
  }
  auto start = Clock::now();
  for (int round = 0; round < rounds && !pending.empty(); ++round) {
    TimingProtocol protocol = round_protocol(m_protocol, round, rounds);
    bool last = round + 1 == rounds;
    std::string stage = rounds > 1 ? "round " + std::to_string(round + 1) : "measure";
    for (size_t k = 0; k < pending.size(); ++k) {
      bench.progress(stage, k + 1, pending.size());
      bench.measure(pending[k], protocol);
      // Failures are final in any round; timings only from the last.
      if (last || bench.variant(pending[k]).outcome != cache::Outcome::ok) {
        bench.store(pending[k]);
      }
    }
    bench.stage_done();
    if (last) {
      break;
    }
    // Keep the best 1/eta of the correct ones for a longer measurement.
    std::vector<size_t> ok;
    for (size_t i : pending) {
      if (bench.variant(i).outcome == cache::Outcome::ok) {
        ok.push_back(i);
      }
    }
    std::sort(ok.begin(), ok.end(), [&](size_t a, size_t b) {
      return bench.variant(a).timing.median_us < bench.variant(b).timing.median_us;
    });
    size_t keep = std::max<size_t>(1, (ok.size() + k_halving_eta - 1) / k_halving_eta);
    for (size_t k = keep; k < ok.size(); ++k) {
      // Measured only cheaply: kept for the report, never a winner, not stored
      // (a resumed session measures it again).
      bench.variant(ok[k]).eliminated_in_round = round + 1;
    }
    ok.resize(std::min(keep, ok.size()));
    double spent = since(start);
    double per_candidate = spent / double(std::max<size_t>(1, pending.size()));
    double next_cost = per_candidate * k_halving_eta * double(ok.size());
    if (spent + next_cost > m_budget_s && round + 2 < rounds) {
      // No time for the intermediate rounds: go straight to the final one.
      round = rounds - 2;
    }
    if (spent + next_cost > m_budget_s * 1.5) {
      // Over budget: skip to the final round with only the best eta survivors. Their
      // cheap timings cannot pick the winner: one noisy cheap median of the fastest
      // widens the tie band (preference_order) over variants a few percent slower.
      const size_t finalists = std::min<size_t>(ok.size(), k_halving_eta);
      for (size_t k = finalists; k < ok.size(); ++k) {
        bench.variant(ok[k]).eliminated_in_round = round + 1;
      }
      ok.resize(finalists);
      report.budget_exhausted = true;
      round = rounds - 2;
    }
    pending = ok;
  }
}

// ---- choosing one -------------------------------------------------------------------

std::unique_ptr<Strategy> make_strategy(const TuneOptions& o) {
  if (o.strategy != "exhaustive" && o.strategy != "random" && o.strategy != "halving") {
    throw Error(ErrorKind::usage,
                "strategy must be exhaustive, random or halving, not '" + o.strategy + "'");
  }
  if (o.strategy == "halving" && o.budget_s <= 0) {
    throw Error(ErrorKind::usage, "strategy halving needs a budget (--budget-s SECONDS)");
  }
  // Without --samples a random search draws (and an oversized space is cut to)
  // k_max_exhaustive configurations.
  size_t samples = o.samples > 0 ? size_t(o.samples) : k_max_exhaustive;
  std::unique_ptr<Strategy> s;
  if (o.strategy == "random") {
    s = std::make_unique<RandomSearch>(o.protocol, samples, o.sample_seed);
  } else {
    s = std::make_unique<ExhaustiveSearch>(o.protocol, samples, o.sample_seed);
  }
  if (o.budget_s > 0) {
    s = std::make_unique<HalvingSearch>(std::move(s), o.protocol, o.budget_s);
  }
  return s;
}

} // namespace autotune

#include "strategy.hpp"

#include "compile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <unordered_set>

namespace autotune {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
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

// Every pending candidate compiled, then checked and timed with the full protocol,
// and its result stored at once.
void measure_in_full(Bench& bench, const std::vector<size_t>& pending,
                     const TimingProtocol& protocol) {
  bench.prepare(pending);
  for (size_t k = 0; k < pending.size(); ++k) {
    bench.progress("measure", k, pending.size());
    if (measurable(bench, pending[k])) {
      bench.measure(pending[k], protocol);
      bench.variant(pending[k]).timed_in = "full";
      bench.store(pending[k]);
    }
  }
  bench.progress("measure", pending.size(), pending.size());
}

// A running mean of seconds per item (0 until something was counted).
struct Rate {
  double seconds = 0;
  double items = 0;
  void add(double s, double n = 1) {
    seconds += s;
    items += n;
  }
  bool known() const { return items > 0; }
  double mean() const { return items > 0 ? seconds / items : 0; }
};

} // namespace

bool measurable(Bench& bench, size_t i) {
  return bench.variant(i).outcome != cache::Outcome::compile_fail;
}

double config_distance(const TypedConfig& a, const TypedConfig& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string& name = a[i].first;
    // Configurations of one space list their parameters in the same order.
    int j = i < b.size() && b[i].first == name ? int(i) : b.index(name);
    if (j < 0 || b[size_t(j)].second == a[i].second) {
      continue;
    }
    d += 1;
    if (a.kind(i) == FieldList::Kind::integer && b.kind(size_t(j)) == FieldList::Kind::integer) {
      long long x = a.integer(i);
      long long y = b.integer(size_t(j));
      if (x > 0 && y > 0) {
        d += 0.1 * std::abs(std::log2(double(x) / double(y)));
      }
    }
  }
  return d;
}

// ---- sampled, measured in full (exhaustive, random) --------------------------------

SampledSearch::SampledSearch(TimingProtocol protocol, size_t count, unsigned long long seed)
    : m_protocol(protocol), m_count(count), m_seed(seed) {}

std::vector<Config> SampledSearch::draw(std::vector<Config> valid, ProblemReport& report) const {
  return sample(std::move(valid), m_count, m_seed, report);
}

void SampledSearch::measure(Bench& bench, const SearchInput& input, ProblemReport&) const {
  measure_in_full(bench, input.pending, m_protocol);
}

// ---- exhaustive -----------------------------------------------------------------

ExhaustiveSearch::ExhaustiveSearch(TimingProtocol protocol, size_t cap, unsigned long long seed)
    : SampledSearch(protocol, cap, seed) {}

std::vector<Config> ExhaustiveSearch::select(std::vector<Config> valid,
                                             ProblemReport& report) const {
  if (valid.size() <= k_max_exhaustive) {
    return valid;
  }
  return draw(std::move(valid), report);
}

// ---- random ---------------------------------------------------------------------

RandomSearch::RandomSearch(TimingProtocol protocol, size_t samples, unsigned long long seed)
    : SampledSearch(protocol, samples, seed) {}

std::vector<Config> RandomSearch::select(std::vector<Config> valid, ProblemReport& report) const {
  return draw(std::move(valid), report);
}

// ---- successive halving within a budget -------------------------------------------

HalvingSearch::HalvingSearch(std::unique_ptr<Strategy> selection, TimingProtocol protocol,
                             double budget_s, size_t batch, unsigned long long seed, Clock clock)
    : m_selection(std::move(selection)), m_protocol(protocol), m_budget_s(budget_s),
      m_batch(std::max<size_t>(1, batch)), m_seed(seed),
      m_clock(clock ? std::move(clock) : Clock(steady_seconds)) {}

std::vector<Config> HalvingSearch::select(std::vector<Config> valid, ProblemReport& report) const {
  return m_selection->select(std::move(valid), report);
}

double HalvingSearch::budget_s(bool warm) const {
  return warm ? m_budget_s : m_budget_s * k_cold_budget_factor;
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

TimingProtocol HalvingSearch::pass_protocol(const TimingProtocol& full, int pass, int passes) {
  passes = std::max(1, passes);
  auto share = [&](int n) { return std::max(1, (n + passes - 1) / passes); };
  TimingProtocol p = full;
  p.warmup = pass == 0 ? full.warmup : std::min(full.warmup, 1);
  p.min_samples = share(full.min_samples);
  p.max_samples = std::max(p.min_samples, share(full.max_samples));
  p.min_seconds = full.min_seconds / passes;
  p.max_seconds = full.max_seconds / passes;
  p.batch = share(full.batch);
  return p;
}

Timing pool_passes(const std::vector<Timing>& passes, const std::vector<double>& samples_us) {
  std::vector<double> medians;
  Timing t;
  t.p10_us = std::numeric_limits<double>::infinity();
  t.p90_us = 0;
  for (const Timing& p : passes) {
    medians.push_back(p.median_us);
    t.p10_us = std::min(t.p10_us, p.p10_us);
    t.p90_us = std::max(t.p90_us, p.p90_us);
    t.samples += p.samples;
  }
  t.median_us = percentile(medians, 0.5);
  if (!samples_us.empty()) {
    t.p10_us = percentile(samples_us, 0.1);
    t.p90_us = percentile(samples_us, 0.9);
  }
  return t;
}

namespace {

// One problem's run of HalvingSearch: the state its steps share.
class HalvingRun {
public:
  HalvingRun(Bench& bench, const SearchInput& in, const TimingProtocol& full, double warm_budget,
             double cold_budget, size_t batch, unsigned long long seed,
             const HalvingSearch::Clock& clock, HalvingSearch::Waves& waves)
      : m_bench(bench), m_in(in), m_full(full), m_cold_budget(cold_budget), m_batch(batch),
        m_clock(clock), m_t0(clock() - in.spent_s), m_waves(waves) {
    std::unordered_set<size_t> seeds(in.seeds.begin(), in.seeds.end());
    for (size_t i : in.pending) {
      if (!seeds.count(i)) {
        m_rest.push_back(i);
      }
    }
    m_random = m_rest;
    std::mt19937_64 rng(seed);
    std::shuffle(m_random.begin(), m_random.end(), rng);
    for (size_t i : in.measured) {
      if (ok(i)) {
        m_full_ok.push_back(i);
      }
    }
    m_cold = in.seeds.size() <= in.builtin_seeds && in.neighbours == 0 && m_full_ok.empty();
    m_budget = m_cold ? cold_budget : warm_budget;
  }

  // Returns whether the budget cut the search short.
  bool run() {
    measure_seeds();
    if (!m_cold && m_full_ok.empty()) {
      // Every seed failed here: the problem has nothing to start from after all.
      m_cold = true;
      m_budget = m_cold_budget;
    }
    bool stopped = explore();
    return finish() || stopped;
  }

  // The budget the run is under: warm, or cold when it had nothing to start from.
  double budget() const { return m_budget; }
  bool cold() const { return m_cold; }
  // Seconds of the search so far (with those the session spent on it before: spent_s).
  double spent() const { return m_clock() - m_t0; }

private:
  bool ok(size_t i) {
    const VariantReport& v = m_bench.variant(i);
    return v.outcome == cache::Outcome::ok && v.timing.median_us > 0;
  }
  double median(size_t i) { return m_bench.variant(i).timing.median_us; }

  // Seconds a full measurement takes: the seeds' when known, else a guess from the
  // cheap ones (the full protocol takes at least 20 ms and 20 samples).
  double full_cost() const {
    if (m_full_rate.known()) {
      return m_full_rate.mean();
    }
    return m_cheap_rate.known() ? 3 * m_cheap_rate.mean() : 0;
  }
  // What the final round will take: a full measurement of each explored candidate
  // that can still reach it (within k_prune_ratio of the best full one), at most eta,
  // of the seeds that join them (final_seeds) and of the timings cut at a lower clock
  // that join them too (clock_contenders); nothing when none of these would be
  // measured (then there is no final round, and no seed is measured again). Its
  // interleaved passes add up to about that (pass_protocol): each pass after a
  // finalist's first adds only a check and one warm-up launch.
  double final_reserve() {
    const double limit = k_prune_ratio * best_full();
    std::vector<size_t> contenders;
    for (size_t i : m_explored) {
      if (ok(i) && median(i) <= limit) {
        contenders.push_back(i);
      }
    }
    sort_by_median(contenders);
    contenders.resize(std::min<size_t>(contenders.size(), k_halving_eta));
    std::vector<size_t> finalists = final_seeds();
    finalists.insert(finalists.end(), contenders.begin(), contenders.end());
    const size_t slowed = clock_contenders(finalists).size();
    if (contenders.empty() && slowed == 0) {
      return 0;
    }
    return double(finalists.size() + slowed) * full_cost();
  }

  // The correct timings of this session, not in `finalists`, within k_prune_ratio of
  // the fastest as timed, that a finalist timed at a clock at least k_clock_gap higher
  // beats only by its clock: per clock cycle (median x MHz) the candidate is the faster.
  // At most k_clock_finalists, the fewest cycles first (k_clock_gap in strategy.hpp).
  // None where a clock is unknown.
  std::vector<size_t> clock_contenders(const std::vector<size_t>& finalists) {
    std::vector<size_t> timed;
    for (size_t i : m_full_ok) {
      if (std::find(m_in.measured.begin(), m_in.measured.end(), i) == m_in.measured.end()) {
        timed.push_back(i); // a killed session's results carry no clock of this session's
      }
    }
    for (size_t i : m_explored) {
      if (ok(i)) {
        timed.push_back(i);
      }
    }
    if (timed.empty()) {
      return {};
    }
    const double fastest = median(*std::min_element(
        timed.begin(), timed.end(), [&](size_t a, size_t b) { return median(a) < median(b); }));
    auto mhz = [&](size_t i) { return double(m_bench.variant(i).sm_clock_mhz); };
    auto cycles = [&](size_t i) { return median(i) * mhz(i); };
    std::vector<std::pair<double, size_t>> found; // (cycles, index)
    for (size_t i : timed) {
      if (mhz(i) <= 0 || median(i) > k_prune_ratio * fastest ||
          std::find(finalists.begin(), finalists.end(), i) != finalists.end()) {
        continue;
      }
      const bool slowed = std::any_of(finalists.begin(), finalists.end(), [&](size_t f) {
        return mhz(f) >= k_clock_gap * mhz(i) && cycles(i) < cycles(f);
      });
      if (slowed) {
        found.emplace_back(cycles(i), i);
      }
    }
    std::sort(found.begin(), found.end());
    std::vector<size_t> out;
    for (size_t k = 0; k < found.size() && k < k_clock_finalists; ++k) {
      out.push_back(found[k].second);
    }
    return out;
  }

  // The seeds that join the final round: the first of those measured in full here, in
  // the order the session picks a winner in (preference_order), so that the seed it
  // would have picked among them is the one measured again, and those after it whose
  // medians tie with it (k_final_seed_tie), up to k_final_seeds in all.
  std::vector<size_t> final_seeds() {
    std::vector<VariantReport> reports;
    std::vector<size_t> index;
    for (size_t i : m_in.seeds) {
      if (ok(i)) {
        reports.push_back(m_bench.variant(i));
        index.push_back(i);
      }
    }
    std::vector<size_t> out;
    for (size_t k : preference_order(reports)) {
      if (out.size() == k_final_seeds) {
        break;
      }
      if (out.empty() || median(index[k]) <= k_final_seed_tie * median(out.front())) {
        out.push_back(index[k]);
      }
    }
    return out;
  }

  void sort_by_median(std::vector<size_t>& v) {
    std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) { return median(a) < median(b); });
  }

  double best_full() {
    double best = std::numeric_limits<double>::infinity();
    for (size_t i : m_full_ok) {
      best = std::min(best, median(i));
    }
    return best;
  }

  void measure_in_full(size_t i) {
    double t = m_clock();
    m_bench.measure(i, m_full);
    m_bench.variant(i).timed_in = "seeds";
    m_full_rate.add(m_clock() - t);
    m_bench.store(i);
    if (ok(i)) {
      m_full_ok.push_back(i);
    }
  }

  // 1. The seeds: compiled and measured in full whatever the budget; two or more in
  // k_seed_passes alternating passes (measure_in_passes), so that the clock moving
  // while they are measured reaches them alike (final_seeds compares them).
  void measure_seeds() {
    if (m_in.seeds.empty()) {
      return;
    }
    m_bench.prepare(m_in.seeds);
    std::vector<size_t> seeds;
    for (size_t i : m_in.seeds) {
      if (measurable(m_bench, i)) {
        seeds.push_back(i);
      }
    }
    if (seeds.size() == 1) {
      m_bench.progress("seeds", m_done, m_in.pending.size());
      measure_in_full(seeds.front());
    } else if (!seeds.empty()) {
      measure_in_passes(seeds, k_seed_passes, "seeds");
    }
    m_done += m_in.seeds.size();
  }

  // The next `n` candidates to explore: the nearest (config_distance) to the best
  // measured so far, one in k_explore_random_share at random; all at random while
  // nothing has been measured.
  std::vector<size_t> next_batch(size_t n) {
    std::vector<size_t> centers = m_full_ok;
    for (size_t i : m_explored) {
      if (ok(i)) {
        centers.push_back(i);
      }
    }
    sort_by_median(centers);
    centers.resize(std::min<size_t>(centers.size(), k_halving_eta));
    size_t n_random = centers.empty() ? n : n / k_explore_random_share;
    std::vector<size_t> out;
    if (n_random < n) {
      struct Near {
        double distance;
        size_t center;
        size_t position;
      };
      std::vector<Near> near;
      for (size_t p = 0; p < m_rest.size(); ++p) {
        if (m_taken.count(m_rest[p])) {
          continue;
        }
        Near best{std::numeric_limits<double>::infinity(), 0, p};
        for (size_t c = 0; c < centers.size(); ++c) {
          double d = config_distance(m_bench.config(m_rest[p]), m_bench.config(centers[c]));
          if (d < best.distance) {
            best.distance = d;
            best.center = c;
          }
        }
        near.push_back(best);
      }
      size_t take = std::min(near.size(), n - n_random);
      std::partial_sort(near.begin(), near.begin() + long(take), near.end(),
                        [](const Near& a, const Near& b) {
                          if (a.distance != b.distance) {
                            return a.distance < b.distance;
                          }
                          if (a.center != b.center) {
                            return a.center < b.center; // the faster center's neighbours first
                          }
                          return a.position < b.position;
                        });
      for (size_t k = 0; k < take; ++k) {
        out.push_back(m_rest[near[k].position]);
        m_taken.insert(out.back());
      }
    }
    for (; m_next_random < m_random.size() && out.size() < n; ++m_next_random) {
      size_t i = m_random[m_next_random];
      if (!m_taken.count(i)) {
        out.push_back(i);
        m_taken.insert(i);
      }
    }
    return out;
  }

  // Whether exploration goes on whatever the budget: until something measured is
  // correct, and on a cold problem until eta were measured.
  bool must_explore() const {
    return m_full_ok.size() + m_explored_ok == 0 || (m_cold && m_explored.size() < k_halving_eta);
  }

  // 2. Cheap measurements until the budget, less the final round's share, is spent.
  bool explore() {
    const TimingProtocol cheap = HalvingSearch::round_protocol(m_full, 0, 3);
    while (m_taken.size() < m_rest.size()) {
      size_t n = m_batch;
      if (!must_explore()) {
        double left = m_budget - spent() - final_reserve();
        // Seconds per explored candidate; before the first one, half a seed's full
        // measurement (a cheap one takes 16 samples, a full one at least 20 and 20 ms).
        double per = m_cheap_rate.known() ? m_cheap_rate.mean() + m_prepare_rate.mean()
                                          : 0.5 * m_full_rate.mean();
        if (left <= 0 || (per > 0 && left < per)) {
          return true;
        }
        if (per > 0) {
          n = std::clamp<size_t>(size_t(left / per), 1, m_batch);
        }
        // Whole compile waves take their time however few candidates they hold: no
        // more waves than fit in what is left (at least one).
        if (m_waves.waves > 0) {
          const double wave_s = m_waves.seconds / m_waves.waves;
          const size_t waves = std::max<size_t>(1, size_t(left / wave_s));
          n = std::min(n, waves * threads());
        }
      }
      std::vector<size_t> batch = next_batch(n);
      if (batch.empty()) {
        return false;
      }
      double t = m_clock();
      m_bench.prepare(batch);
      const double compiled_s = m_clock() - t;
      m_prepare_rate.add(compiled_s, double(batch.size()));
      if (compiled_s > 0) {
        m_waves.seconds += compiled_s;
        m_waves.waves += double((batch.size() + threads() - 1) / threads());
      }
      const bool first = m_explored.empty();
      double measured_s = 0; // this batch's cheap timings
      for (size_t i : batch) {
        if (!measurable(m_bench, i)) {
          ++m_done;
          continue;
        }
        if (!must_explore() && spent() + m_cheap_rate.mean() + final_reserve() > m_budget &&
            (!first || measured_s + m_cheap_rate.mean() > k_sunk_compile_share * compiled_s)) {
          return true;
        }
        m_bench.progress("explore", m_done, m_in.pending.size());
        double t1 = m_clock();
        m_bench.measure(i, cheap);
        m_bench.variant(i).timed_in = "explore";
        const double took = m_clock() - t1;
        m_cheap_rate.add(took);
        measured_s += took;
        ++m_done;
        m_explored.push_back(i);
        if (ok(i)) {
          ++m_explored_ok;
        } else {
          m_bench.store(i); // a failure is final in any round
        }
      }
    }
    return false;
  }

  // Cuts `list` (sorted) to its first `keep`, marking the others as cut after `round`.
  void cut(std::vector<size_t>& list, size_t keep, int round) {
    for (size_t k = keep; k < list.size(); ++k) {
      m_bench.variant(list[k]).eliminated_in_round = round;
    }
    list.resize(std::min(keep, list.size()));
  }

  // Cheap timings more than k_prune_ratio over the best full one cannot win.
  void prune(std::vector<size_t>& list, int round) {
    double limit = k_prune_ratio * best_full();
    size_t keep = 0;
    while (keep < list.size() && median(list[keep]) <= limit) {
      ++keep;
    }
    cut(list, keep, round);
  }

  // 3. Halving over the explored candidates: round 2 when more than eta^2 are left
  // and the budget allows, then the final round: the best eta and the best seed(s)
  // (final_seeds), in full. Returns whether the budget skipped round 2.
  bool finish() {
    std::vector<size_t> left;
    for (size_t i : m_explored) {
      if (ok(i)) {
        left.push_back(i);
      }
    }
    sort_by_median(left);
    prune(left, 1);
    int round = 1;
    bool skipped = false;
    const size_t eta = k_halving_eta;
    if (left.size() > eta * eta) {
      size_t keep = (left.size() + eta - 1) / eta;
      // Round 2 takes about twice a cheap measurement per candidate.
      double cost = double(keep) * 2 * m_cheap_rate.mean();
      if (spent() + cost + final_reserve() > m_budget) {
        skipped = true;
      } else {
        cut(left, keep, round);
        const TimingProtocol longer = HalvingSearch::round_protocol(m_full, 1, 3);
        std::vector<size_t> measured;
        for (size_t k = 0; k < left.size(); ++k) {
          m_bench.progress("round 2", k, left.size());
          m_bench.measure(left[k], longer);
          m_bench.variant(left[k]).timed_in = "round 2";
          if (ok(left[k])) {
            measured.push_back(left[k]);
          } else {
            m_bench.store(left[k]);
          }
        }
        left = measured;
        sort_by_median(left);
        round = 2;
        prune(left, round);
      }
    }
    cut(left, eta, round);
    // The best seed(s) measured in the same passes as the finalists, first in the
    // round's order; seeds are never explored, so never among the finalists already.
    std::vector<size_t> finalists = final_seeds();
    finalists.insert(finalists.end(), left.begin(), left.end());
    const std::vector<size_t> slowed = clock_contenders(finalists);
    if (left.empty() && slowed.empty()) {
      // No final round: the seeds' full measurements, taken together, decide
      // (with any results a killed session stored), none measured again.
      return skipped;
    }
    for (size_t i : slowed) {
      m_bench.variant(i).eliminated_in_round = 0; // cut on its timing, back in the round
      finalists.push_back(i);
    }
    if (measure_in_passes(finalists, k_final_passes, "final")) {
      cut_seeds_left_out(finalists, round);
    }
    return skipped;
  }

  // The seeds measured in full here that the final round left out are cut after
  // `round` (their early measurement stays stored): each was slower than a seed in the
  // round when measured beside it at the start, and its early timing compared with the
  // round's later ones would be ranked partly by when each was measured, like a
  // sequential final round (k_final_seeds). Called only when something in the round
  // was correct, so that a winner remains. Results a killed session stored are neither
  // measured again nor cut (SearchInput::measured): they are not this session's.
  void cut_seeds_left_out(const std::vector<size_t>& finalists, int round) {
    for (size_t i : m_in.seeds) {
      if (ok(i) && std::find(finalists.begin(), finalists.end(), i) == finalists.end()) {
        m_bench.variant(i).eliminated_in_round = round;
      }
    }
  }

  // Each of `indices` measured in full, split into `passes` passes
  // (HalvingSearch::pass_protocol) that run in alternating order over them (A B C,
  // C B A, ...), so that the GPU's clock drifting meanwhile reaches all of them alike:
  // the seeds (k_seed_passes) and the final round (k_final_passes). Every pass checks
  // the outputs before timing them: one that fails any pass is out with that outcome,
  // stored at once. The others' passes are pooled (pool_passes) into the full
  // measurement stored for them, replacing any earlier one (a seed's in the final
  // round): the decision sees only these passes. The progress (`stage`, a string
  // literal, also each one's timed_in) counts passes.
  // Returns whether any was correct in every pass.
  bool measure_in_passes(const std::vector<size_t>& indices, int passes, const char* stage) {
    struct Entry {
      size_t index;
      std::vector<Timing> passes;
      std::vector<double> samples_us;
      double seconds = 0;
      double rel_err = 0; // the largest of its passes' (each checks on the same inputs)
      bool failed = false;
    };
    std::vector<Entry> f;
    for (size_t i : indices) {
      f.push_back(Entry{i, {}, {}});
    }
    const size_t n = f.size();
    for (int pass = 0; pass < passes; ++pass) {
      const TimingProtocol protocol = HalvingSearch::pass_protocol(m_full, pass, passes);
      for (size_t j = 0; j < n; ++j) {
        m_bench.progress(stage, size_t(pass) * n + j, size_t(passes) * n);
        Entry& x = f[pass % 2 == 0 ? j : n - 1 - j];
        if (x.failed) {
          continue;
        }
        double t = m_clock();
        m_bench.measure(x.index, protocol);
        x.seconds += m_clock() - t;
        if (!ok(x.index)) {
          x.failed = true;
          m_bench.store(x.index);
          continue;
        }
        const VariantReport& v = m_bench.variant(x.index);
        x.passes.push_back(v.timing);
        std::vector<double> samples = m_bench.last_samples();
        x.samples_us.insert(x.samples_us.end(), samples.begin(), samples.end());
        x.rel_err = std::max(x.rel_err, v.rel_err);
      }
    }
    bool any_ok = false;
    for (Entry& x : f) {
      if (x.failed) {
        continue;
      }
      VariantReport& v = m_bench.variant(x.index);
      v.timing = pool_passes(x.passes, x.samples_us);
      v.timed_in = stage;
      v.rel_err = x.rel_err;
      m_full_rate.add(x.seconds);
      m_bench.store(x.index);
      if (std::find(m_full_ok.begin(), m_full_ok.end(), x.index) == m_full_ok.end()) {
        m_full_ok.push_back(x.index); // a seed in the final round is there already
      }
      any_ok = true;
    }
    return any_ok;
  }

  Bench& m_bench;
  const SearchInput& m_in;
  const TimingProtocol& m_full;
  const double m_cold_budget;
  bool m_cold = false; // nothing to start from: no seed or stored result is correct
  double m_budget = 0;
  const size_t m_batch;
  const HalvingSearch::Clock& m_clock;
  const double m_t0;
  std::vector<size_t> m_rest;   // pending candidates that are not seeds, in order
  std::vector<size_t> m_random; // the same, shuffled
  size_t m_next_random = 0;
  std::unordered_set<size_t> m_taken; // explored, or about to be
  std::vector<size_t> m_explored;     // measured cheaply
  size_t m_explored_ok = 0;           // of them, correct
  std::vector<size_t> m_full_ok;      // correct full measurements (seeds, stored, finals)
  size_t m_done = 0;                  // pending candidates measured (or failed to compile)
  Rate m_full_rate, m_cheap_rate, m_prepare_rate;
  HalvingSearch::Waves& m_waves; // the session's, across problems

  // Compile threads: a batch is about twice as many (make_strategy).
  size_t threads() const { return std::max<size_t>(1, m_batch / 2); }
};

} // namespace

void HalvingSearch::measure(Bench& bench, const SearchInput& input, ProblemReport& report) const {
  const double owed = m_owed_s;
  auto less_owed = [owed](double budget) {
    return budget - std::min(owed, (1 - k_budget_floor_share) * budget);
  };
  // A cold problem keeps its whole budget: it has only the built-in point to start from.
  HalvingRun run(bench, input, m_protocol, less_owed(budget_s(true)), budget_s(false), m_batch,
                 m_seed, m_clock, m_waves);
  if (run.run()) {
    report.budget_exhausted = true;
  }
  report.budget_s = run.budget();
  const double planned = budget_s(!run.cold());
  m_owed_s = std::max(0.0, owed + run.spent() - planned);
}

// ---- choosing one -------------------------------------------------------------------

std::unique_ptr<Strategy> make_strategy(const TuneOptions& o) {
  if (o.strategy != "exhaustive" && o.strategy != "random" && o.strategy != "halving") {
    throw Error(ErrorKind::usage,
                "strategy must be halving, exhaustive or random, not '" + o.strategy + "'");
  }
  if (o.strategy == "exhaustive" && o.budget_s > 0) {
    throw Error(ErrorKind::usage, "a budget (--budget-s) bounds the halving search; exhaustive "
                                  "search measures every variant");
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
  // A random sample is measured in full, unless a budget asks for halving over it.
  if (o.strategy == "halving" || (o.strategy == "random" && o.budget_s > 0)) {
    int jobs = o.jobs > 0 ? o.jobs : default_jobs();
    // Twice the compile threads per batch: NVRTC times vary, and one slow compile
    // should not leave the other threads idle.
    size_t batch = std::max<size_t>(8, 2 * size_t(jobs));
    double budget = o.budget_s > 0 ? o.budget_s : k_default_budget_s;
    s = std::make_unique<HalvingSearch>(std::move(s), o.protocol, budget, batch, o.sample_seed);
  }
  return s;
}

} // namespace autotune

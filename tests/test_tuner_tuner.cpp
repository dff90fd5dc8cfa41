#include "cache/database.hpp"
#include "runtime/base/hash.hpp"
#include "runtime/cuda/nvrtc.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/heuristic.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "tuner/report.hpp"
#include "tuner/strategy.hpp"
#include "tuner/tuner.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <unistd.h>

using namespace autotune;

namespace {
VariantReport variant(const std::string& config, double median, double p10, double p90,
                      cache::Outcome outcome = cache::Outcome::ok) {
  VariantReport v;
  v.config = config;
  v.outcome = outcome;
  v.timing.median_us = median;
  v.timing.p10_us = p10;
  v.timing.p90_us = p90;
  v.timing.samples = 20;
  return v;
}

// What print_json writes for the report.
std::string json_of(const TuneReport& report) {
  char* text = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&text, &size);
  print_json(report, out);
  std::fclose(out);
  std::string json(text, size);
  std::free(text);
  return json;
}
} // namespace

TEST_CASE("winners within the measured noise are broken by variant id") {
  // b is fastest, but c lies within half of b's p10-p90 spread: tied, and "c" < "d".
  std::vector<VariantReport> v = {variant("d", 100.5, 99, 102), variant("x", 130, 129, 131),
                                  variant("c", 100.9, 99.5, 102.5),
                                  variant("a", 90, 0, 0, cache::Outcome::wrong)};
  auto order = preference_order(v);
  REQUIRE(order.size() == 3);
  CHECK(v[order[0]].config == "c");
  CHECK(v[order[1]].config == "d");
  CHECK(v[order[2]].config == "x");
  SUBCASE("outside the noise the faster one wins") {
    v[2].timing.median_us = 103;
    CHECK(v[preference_order(v)[0]].config == "d");
  }
  SUBCASE("a noisy fastest ties with nothing more than 1% slower") {
    // spread 90..110: half of it (10%) would tie "c" at 103 with "d" at 100.5
    v[0].timing.p10_us = 90;
    v[0].timing.p90_us = 110;
    v[2].timing.median_us = 102;
    CHECK(v[preference_order(v)[0]].config == "d");
    v[2].timing.median_us = 101.4; // within 1%: tied, and "c" < "d"
    CHECK(v[preference_order(v)[0]].config == "c");
  }
  SUBCASE("variants cut by successive halving never win") {
    v[2].eliminated_in_round = 1;
    v[0].eliminated_in_round = 2;
    auto survivors = preference_order(v);
    REQUIRE(survivors.size() == 1);
    CHECK(v[survivors[0]].config == "x");
  }
  SUBCASE("failed variants never appear") {
    for (auto& x : v) {
      x.outcome = cache::Outcome::fault;
    }
    CHECK(preference_order(v).empty());
  }
}

TEST_CASE("random search samples the same configurations for the same seed") {
  std::vector<Config> all;
  for (int i = 0; i < 100; ++i) {
    all.push_back({{"p", std::to_string(i)}});
  }
  TuneOptions o;
  o.strategy = "random";
  o.samples = 10;
  ProblemReport r1, r2;
  auto a = select_strategy(all, o, r1);
  auto b = select_strategy(all, o, r2);
  REQUIRE(a.size() == 10);
  CHECK(a == b);
  CHECK(r1.sampled == 10);
  o.sample_seed = 2;
  ProblemReport r3;
  CHECK(select_strategy(all, o, r3) != a);
  for (const char* name : {"exhaustive", "halving"}) {
    CAPTURE(name);
    TuneOptions e;
    e.strategy = name;
    ProblemReport r;
    CHECK(select_strategy(all, e, r).size() == 100);
    CHECK(r.sampled == 0);
  }
}

namespace {

// Candidates with fixed medians (`median_of`, candidate 0 the fastest by default),
// times `drift` of the fake clock when a measurement starts, on a fake clock: a full
// measurement takes k_full_s, a pass of the final round its share of k_full_s (what its
// protocol's seconds are of the full one's), a cheaper one k_cheap_s, compiling
// k_compile_s per candidate not built yet. Those in `wrong` fail the check, those in
// `broken` do not compile, and one in `fails_from` fails the check from its n-th
// measurement on. A measurement's samples (min_samples of them) lie within 0.5% of its
// median. Records what a strategy asked for.
constexpr double k_full_s = 0.3;
constexpr double k_cheap_s = 0.1;

// Whether p is one of the `passes` passes of the full protocol.
bool pass_of(const TimingProtocol& p, int passes) {
  for (int pass = 0; pass < passes; ++pass) {
    if (p == HalvingSearch::pass_protocol(TimingProtocol{}, pass, passes)) {
      return true;
    }
  }
  return false;
}

bool final_pass(const TimingProtocol& p) {
  return pass_of(p, k_final_passes);
}

class FakeBench final : public Bench {
public:
  explicit FakeBench(size_t n, std::set<size_t> wrong = {}, std::set<size_t> broken = {})
      : m_wrong(std::move(wrong)), m_broken(std::move(broken)), m_variants(n), measured(n, 0),
        built(n, 0) {
    for (size_t i = 0; i < n; ++i) {
      m_variants[i].config =
          std::string("p=").append(std::to_string(1000 + i)); // ids sort as indices
      m_configs.emplace_back(parse_fields(m_variants[i].config, "config"));
    }
    median_of = [](size_t i) { return 10.0 + double(i); };
  }
  void prepare(const std::vector<size_t>& indices) override {
    prepared.push_back(indices);
    for (size_t i : indices) {
      if (!built.at(i)) {
        built[i] = 1;
        clock += compile_s;
        if (m_broken.count(i)) {
          m_variants[i].outcome = cache::Outcome::compile_fail;
          stored.push_back(i);
        }
      }
    }
  }
  void measure(size_t i, const TimingProtocol& protocol) override {
    REQUIRE(built.at(i));
    REQUIRE(m_variants[i].outcome != cache::Outcome::compile_fail);
    int nth = ++measured.at(i);
    order.push_back(i);
    protocols.push_back(protocol);
    starts.push_back(clock);
    const double start = clock;
    const TimingProtocol full;
    if (protocol == full) {
      clock += k_full_s;
    } else if (final_pass(protocol) || pass_of(protocol, k_seed_passes)) {
      clock += k_full_s * protocol.max_seconds / full.max_seconds;
    } else {
      clock += k_cheap_s;
    }
    last_protocol[i] = protocol;
    VariantReport& v = m_variants.at(i);
    bool wrong = m_wrong.count(i) || (fails_from.count(i) && nth >= fails_from[i]);
    v.outcome = wrong ? cache::Outcome::wrong : cache::Outcome::ok;
    m_samples.clear();
    if (wrong) {
      v.timing = Timing{};
      return;
    }
    const double median = median_of(i) * drift(start);
    const int n = std::max(1, protocol.min_samples);
    for (int k = 0; k < n; ++k) {
      double at = n > 1 ? double(k) / double(n - 1) - 0.5 : 0; // -0.5 .. 0.5
      m_samples.push_back(median * (1 + 0.01 * at));
    }
    v.timing = Timing{percentile(m_samples, 0.5), percentile(m_samples, 0.1),
                      percentile(m_samples, 0.9), n};
    v.sm_clock_mhz = mhz_of(i, nth);
  }
  std::vector<double> last_samples() const override { return m_samples; }
  void store(size_t i) override { stored.push_back(i); }
  VariantReport& variant(size_t i) override { return m_variants.at(i); }
  const TypedConfig& config(size_t i) const override { return m_configs.at(i); }
  void progress(const std::string& stage, size_t, size_t) override { stages.insert(stage); }

  std::vector<size_t> eliminated_in(int round) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < m_variants.size(); ++i) {
      if (measured[i] && m_variants[i].eliminated_in_round == round) {
        out.push_back(i);
      }
    }
    return out;
  }
  size_t count_measured() const {
    size_t n = 0;
    for (int m : measured) {
      n += m > 0 ? 1 : 0;
    }
    return n;
  }
  void set_config(size_t i, const std::string& config) {
    m_variants.at(i).config = config;
    m_configs.at(i) = parse_fields(config, "config");
  }
  // The winner the session would pick from these measurements.
  std::string winner() {
    auto preferred = preference_order(m_variants);
    return preferred.empty() ? "" : m_variants[preferred.front()].config;
  }
  HalvingSearch::Clock fake_clock() {
    return [this] { return clock; };
  }

private:
  std::set<size_t> m_wrong;
  std::set<size_t> m_broken;
  std::vector<VariantReport> m_variants;
  std::vector<TypedConfig> m_configs;
  std::vector<double> m_samples; // of the latest measurement

public:
  std::function<double(size_t)> median_of;
  std::function<double(double)> drift = [](double) { return 1.0; };
  // The SM clock read after candidate i's nth measurement (0: unknown, as without NVML).
  std::function<int(size_t, int)> mhz_of = [](size_t, int) { return 0; };
  std::map<size_t, int> fails_from;
  double clock = 0;
  double compile_s = 0;
  std::vector<int> measured;
  std::vector<char> built;
  std::vector<size_t> order;                      // measurements in the order asked
  std::vector<TimingProtocol> protocols;          // and the protocol of each
  std::vector<double> starts;                     // and the clock when it started
  std::map<size_t, TimingProtocol> last_protocol; // each one's latest measurement's
  std::vector<size_t> stored;
  std::vector<std::vector<size_t>> prepared;
  std::set<std::string> stages;
};

std::vector<size_t> all_of(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = i;
  }
  return v;
}

SearchInput pending(size_t n, std::vector<size_t> seeds = {}) {
  SearchInput in;
  in.pending = all_of(n);
  in.seeds = std::move(seeds);
  return in;
}

HalvingSearch halving(FakeBench& bench, double budget_s, size_t batch = 16) {
  return HalvingSearch(std::make_unique<ExhaustiveSearch>(TimingProtocol{}, k_max_exhaustive, 1),
                       TimingProtocol{}, budget_s, batch, 1, bench.fake_clock());
}

// The index of the final round's first measurement.
size_t final_round_start(const FakeBench& bench) {
  size_t first = 0;
  while (first < bench.protocols.size() && !final_pass(bench.protocols[first])) {
    ++first;
  }
  return first;
}

} // namespace

TEST_CASE("exhaustive and random search compile everything, then measure each candidate once, "
          "in full, and store it") {
  TuneOptions o;
  for (const char* name : {"exhaustive", "random"}) {
    CAPTURE(name);
    o.strategy = name;
    FakeBench bench(10, {3}, {7});
    ProblemReport report;
    make_strategy(o)->measure(bench, pending(10), report);
    REQUIRE(bench.prepared.size() == 1);
    CHECK(bench.prepared[0] == all_of(10));
    std::vector<int> once(10, 1);
    once[7] = 0; // did not compile
    CHECK(bench.measured == once);
    std::vector<size_t> stored = {7, 0, 1, 2, 3, 4, 5, 6, 8, 9}; // the failure when prepared
    CHECK(bench.stored == stored);
    for (size_t i = 0; i < 10; ++i) {
      if (i != 7) {
        CHECK(bench.last_protocol[i] == o.protocol);
      }
    }
    CHECK(bench.stages == std::set<std::string>{"measure"});
    CHECK_FALSE(report.budget_exhausted);
  }
}

TEST_CASE("exhaustive search samples a space over k_max_exhaustive configurations") {
  std::vector<Config> all;
  for (size_t i = 0; i < k_max_exhaustive + 10; ++i) {
    all.push_back({{"p", std::to_string(i)}});
  }
  TuneOptions o;
  o.strategy = "exhaustive";
  ProblemReport r;
  CHECK(make_strategy(o)->select(all, r).size() == k_max_exhaustive);
  CHECK(r.sampled == k_max_exhaustive);
  all.resize(k_max_exhaustive);
  ProblemReport whole;
  CHECK(make_strategy(o)->select(all, whole).size() == k_max_exhaustive);
  CHECK(whole.sampled == 0);
}

TEST_CASE("halving within a generous budget measures everything cheaply, the best quarter "
          "again, the best four in full, and stores only final timings") {
  FakeBench bench(64, {5});
  ProblemReport report;
  halving(bench, 1e9).measure(bench, pending(64), report);
  CHECK(bench.stages == std::set<std::string>{"explore", "round 2", "final"});
  CHECK(bench.count_measured() == 64);
  // 63 correct: round 2 for the best 16, then 4 in full.
  CHECK(bench.eliminated_in(1).size() == 63 - 16);
  CHECK(bench.eliminated_in(2).size() == 16 - 4);
  std::vector<size_t> finalists = bench.eliminated_in(0);
  // The four fastest correct ones, and the wrong one (its outcome is final).
  CHECK(finalists == std::vector<size_t>{0, 1, 2, 3, 5});
  for (size_t i : {0, 1, 2, 3}) {
    CHECK(bench.measured[i] == 2 + k_final_passes); // the last round in full, in passes
    CHECK(final_pass(bench.last_protocol[i]));
  }
  CHECK(bench.last_protocol[63].min_samples < TimingProtocol{}.min_samples);
  // Stored: the failure at once, the finalists' full measurements; no cheap timing.
  CHECK(bench.stored == std::vector<size_t>{5, 0, 1, 2, 3});
  CHECK_FALSE(report.budget_exhausted);
  CHECK(bench.winner() == "p=1000");
}

TEST_CASE("the final round measures each finalist in passes, in alternating order, each pass "
          "checked") {
  static_assert(k_final_passes == 4, "the order below is written out for four passes");
  FakeBench bench(64);
  ProblemReport report;
  SUBCASE("the passes alternate, and each finalist's pooled result is stored once") {
    halving(bench, 1e9).measure(bench, pending(64), report);
    const size_t round = 4 * k_final_passes;
    REQUIRE(bench.order.size() > round);
    const std::vector<size_t> final_round(bench.order.end() - long(round), bench.order.end());
    CHECK(final_round == std::vector<size_t>{0, 1, 2, 3, 3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0});
    for (size_t k = 0; k < round; ++k) {
      CAPTURE(k);
      CHECK(bench.protocols[bench.order.size() - round + k] ==
            HalvingSearch::pass_protocol(TimingProtocol{}, int(k / 4), k_final_passes));
    }
    CHECK(bench.stored == std::vector<size_t>{0, 1, 2, 3}); // after the round, pooled
    const int per_pass =
        HalvingSearch::pass_protocol(TimingProtocol{}, 1, k_final_passes).min_samples;
    CHECK(bench.variant(0).timing.samples == k_final_passes * per_pass);
    CHECK(bench.winner() == "p=1000");
  }
  SUBCASE("a finalist failing the check in a later pass is out, with that outcome stored") {
    bench.fails_from[0] = 4; // explored, round 2, the first pass; fails the second
    halving(bench, 1e9).measure(bench, pending(64), report);
    CHECK(bench.measured[0] == 4); // not measured again
    CHECK(bench.variant(0).outcome == cache::Outcome::wrong);
    CHECK(bench.stored == std::vector<size_t>{0, 1, 2, 3}); // 0 at once, the others pooled
    CHECK(bench.measured[1] == 2 + k_final_passes);
    CHECK(bench.winner() == "p=1001");
  }
}

TEST_CASE("the final round decides on its passes pooled, so a clock drifting during it does not "
          "pick the winner") {
  // Four candidates 2% apart, candidate 0 the fastest, on a GPU that gets 8% faster per
  // second of (fake) time. Their ids run backwards, so that a tie would go to candidate 3.
  auto drifting = [](FakeBench& b) {
    b.median_of = [](size_t i) { return 100.0 + 2.0 * double(i); };
    b.drift = [](double t) { return 1.0 - 0.08 * t; };
    for (size_t i = 0; i < 4; ++i) {
      b.set_config(i, "p=" + std::to_string(1003 - i));
    }
  };
  SUBCASE("measured in full one after another, the one measured last would win") {
    FakeBench bench(4);
    drifting(bench);
    bench.prepare(all_of(4));
    bench.clock = 4 * k_cheap_s; // where the final round starts after exploring them
    for (size_t i : all_of(4)) {
      bench.measure(i, TimingProtocol{});
    }
    CHECK(bench.winner() == "p=1000"); // candidate 3, 6% slower than candidate 0
  }
  SUBCASE("interleaved, the fastest wins") {
    FakeBench bench(4);
    drifting(bench);
    ProblemReport report;
    halving(bench, 1e9).measure(bench, pending(4), report);
    CHECK(bench.stages.count("final") == 1);
    CHECK(bench.winner() == "p=1003"); // candidate 0
    // Each finalist's median is the mean of its two middle passes, which sit, in
    // alternating order, 7 and 8 passes into the round for every finalist alike.
    const double pass_s = k_full_s / k_final_passes;
    const double middle = 1.0 - 0.08 * (4 * k_cheap_s + 7.5 * pass_s);
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      const Timing& t = bench.variant(i).timing;
      CHECK(t.median_us == doctest::Approx(bench.median_of(i) * middle));
      // The spread is that of all the passes' samples: the drift over the round shows.
      CHECK(t.p90_us - t.p10_us > 0.05 * t.median_us);
    }
  }
}

TEST_CASE("a finalist's passes pool into the median of their medians and the spread of all "
          "their samples") {
  // Three quiet passes near 100 us stopped after 8 samples; one at a slower moment was
  // noisy and ran to 40.
  std::vector<double> all;
  std::vector<Timing> passes;
  for (auto [median, n] : {std::pair{100.0, 8}, {103.0, 40}, {100.5, 8}, {100.2, 8}}) {
    std::vector<double> s;
    for (int k = 0; k < n; ++k) {
      s.push_back(median + 0.1 * double(k % 3 - 1));
    }
    passes.push_back(Timing{percentile(s, 0.5), percentile(s, 0.1), percentile(s, 0.9), n});
    all.insert(all.end(), s.begin(), s.end());
  }
  const Timing pooled = pool_passes(passes, all);
  CHECK(pooled.median_us == doctest::Approx(100.35)); // (100.2 + 100.5) / 2
  CHECK(percentile(all, 0.5) > 102.0);                // what the samples' median would say
  CHECK(pooled.p10_us == doctest::Approx(percentile(all, 0.1)));
  CHECK(pooled.p90_us == doctest::Approx(percentile(all, 0.9)));
  CHECK(pooled.samples == 64);
  SUBCASE("without the samples, the passes' lowest p10 and highest p90") {
    const Timing bounds = pool_passes(passes, {});
    CHECK(bounds.median_us == doctest::Approx(100.35));
    CHECK(bounds.p10_us == doctest::Approx(99.9));
    CHECK(bounds.p90_us == doctest::Approx(103.1));
  }
}

TEST_CASE("halving compiles in batches and never measures what did not compile") {
  FakeBench bench(40, {}, {0, 17});
  ProblemReport report;
  halving(bench, 1e9, 16).measure(bench, pending(40), report);
  REQUIRE(bench.prepared.size() == 3);
  CHECK(bench.prepared[0].size() == 16);
  CHECK(bench.prepared[2].size() == 8);
  CHECK(bench.measured[0] == 0);
  CHECK(bench.measured[17] == 0);
  CHECK(bench.count_measured() == 38);
  CHECK(bench.winner() == "p=1001");
}

TEST_CASE("a cold problem explores until its budget, less the final round, is spent") {
  // 10x the budget for a problem with nothing to start from: 10 s of fake time.
  FakeBench bench(256);
  ProblemReport report;
  HalvingSearch search = halving(bench, 1.0);
  CHECK(search.budget_s(false) == doctest::Approx(10.0));
  CHECK(search.budget_s(true) == doctest::Approx(1.0));
  search.measure(bench, pending(256), report);
  CHECK(report.budget_exhausted);
  size_t explored = bench.count_measured();
  // (10 s - 4 finals * 0.3 s) / 0.1 s per cheap measurement, less round 2's share.
  CHECK(explored >= 40);
  CHECK(explored <= 90);
  CHECK(bench.clock <= 10.0 + k_full_s);
  // Finalists measured in full (in passes) and stored; no cheap timing stored.
  CHECK(bench.stored.size() == 4);
  for (size_t i : bench.stored) {
    CHECK(final_pass(bench.last_protocol[i]));
  }
}

TEST_CASE("a first batch whose compilation overran the budget is measured for up to half "
          "its compile time, not thrown away") {
  FakeBench bench(64);
  // The seed takes 0.2 + 0.3 s; the first batch (16: 2.5 s left at half a full measurement
  // each) compiles in 3.2 s, past the 3 s budget, and its 16 cheap timings take 1.6 s.
  bench.compile_s = 0.2;
  ProblemReport report;
  halving(bench, 3.0, 16).measure(bench, pending(64, {5}), report);
  CHECK(report.budget_exhausted);
  REQUIRE(bench.prepared.size() == 2); // the seed, then one batch: no second one
  CHECK(bench.prepared[1].size() == 16);
  CHECK(bench.count_measured() == 1 + 16);
  CHECK(bench.winner() == "p=1000"); // the fastest, found in the batch

  // Past the budget, the batch's timings stop at half its compile time. The seed takes
  // 0.1 + 0.3 s, the batch (11: 1.7 s left) compiles in 1.1 s; one timing fits the budget,
  // four more the 0.55 s.
  FakeBench cheap(64);
  cheap.compile_s = 0.1;
  halving(cheap, 2.1, 16).measure(cheap, pending(64, {5}), report);
  REQUIRE(cheap.prepared.size() == 2);
  CHECK(cheap.prepared[1].size() == 11);
  CHECK(cheap.count_measured() == 1 + 5);
}

TEST_CASE("a problem's first batch holds no more compile waves than the budget has room for, "
          "by the waves of the problems before it") {
  // One search (one session) over two problems. The first: the seed takes 0.2 + 0.3 s,
  // the first batch 16 candidates (no compile time known yet), compiled in 3.2 s: two
  // waves of the 8 threads a batch of 16 stands for, 1.6 s each.
  FakeBench first(64);
  FakeBench second(64);
  first.compile_s = 0.2;
  second.compile_s = 0.2;
  FakeBench* on = &first;
  HalvingSearch search(std::make_unique<ExhaustiveSearch>(TimingProtocol{}, k_max_exhaustive, 1),
                       TimingProtocol{}, 3.0, 16, 1, [&on] { return on->clock; });
  ProblemReport report;
  search.measure(first, pending(64, {5}), report);
  REQUIRE(first.prepared.size() == 2);
  CHECK(first.prepared[1].size() == 16);
  // It overran its budget, which the session owes (the next test); a problem with
  // nothing to measure, which spends none of its (cold) budget, pays that back.
  CHECK(search.owed_s() > 0);
  FakeBench empty(0);
  on = &empty;
  search.measure(empty, pending(0), report);
  CHECK(search.owed_s() == 0);
  // The second: 2.5 s left after its seed hold one 1.6 s wave, 8 candidates.
  on = &second;
  search.measure(second, pending(64, {5}), report);
  REQUIRE(second.prepared.size() >= 2);
  CHECK(second.prepared[1].size() == 8);
  CHECK(second.clock < first.clock);
}

TEST_CASE("a session keeps to the sum of its problems' budgets: what one overran is cut from "
          "the next ones' budgets, down to a share of each, until they have paid it back") {
  // Every problem: a seed (0.2 + 0.3 s), then batches of 16 compiled at 0.2 s each.
  std::vector<std::unique_ptr<FakeBench>> benches;
  FakeBench* on = nullptr;
  HalvingSearch search(std::make_unique<ExhaustiveSearch>(TimingProtocol{}, k_max_exhaustive, 1),
                       TimingProtocol{}, 3.0, 16, 1, [&on] { return on->clock; });
  auto tune = [&](SearchInput in) {
    benches.push_back(std::make_unique<FakeBench>(64));
    on = benches.back().get();
    on->compile_s = 0.2;
    ProblemReport report;
    search.measure(*on, in, report);
    return report;
  };
  // The first runs past its 3 s: the first batch's compile wave and timings run whatever
  // the budget (3.2 + 1.6 s).
  ProblemReport first = tune(pending(64, {5}));
  CHECK(first.budget_s == doctest::Approx(3.0));
  const double owed = benches.back()->clock - 3.0;
  REQUIRE(owed > 3.0 * (1 - k_budget_floor_share));
  CHECK(search.owed_s() == doctest::Approx(owed));
  // The second's budget is cut to its floor; it spends less than its planned 3 s, and
  // what it left pays part of the debt.
  ProblemReport second = tune(pending(64, {5}));
  CHECK(second.budget_s == doctest::Approx(3.0 * k_budget_floor_share));
  const double second_s = benches.back()->clock;
  CHECK(second_s < 3.0);
  CHECK(search.owed_s() == doctest::Approx(owed + second_s - 3.0));
  // Cut by what is still owed, while it is less than the floor allows.
  const double left = search.owed_s();
  REQUIRE(left < 3.0 * (1 - k_budget_floor_share));
  ProblemReport third = tune(pending(64, {5}));
  CHECK(third.budget_s == doctest::Approx(3.0 - left));
  // The session as a whole: within one problem's overrun of its plan.
  double total = 0;
  for (const auto& b : benches) {
    total += b->clock;
  }
  CHECK(total <= 3 * 3.0 + search.owed_s() + 1e-9);
  // A cold problem keeps its whole budget (10x); finishing well inside it pays
  // everything back, and the next problem has its whole budget again, no more.
  REQUIRE(search.owed_s() > 0);
  ProblemReport cold = tune(pending(64));
  CHECK(cold.budget_s == doctest::Approx(30.0));
  REQUIRE(benches.back()->clock < 30.0 - 3.0);
  CHECK(search.owed_s() == 0);
  ProblemReport fresh = tune(pending(64, {5}));
  CHECK(fresh.budget_s == doctest::Approx(3.0));
}

TEST_CASE("a problem with tuned neighbours is warm even when none of their winners fits it") {
  // Only the built-in point as a seed, but the database holds tuned neighbours.
  for (size_t neighbours : {size_t(0), size_t(3)}) {
    CAPTURE(neighbours);
    FakeBench bench(256);
    ProblemReport report;
    SearchInput in = pending(256, {5});
    in.builtin_seeds = 1;
    in.neighbours = neighbours;
    halving(bench, 1.0).measure(bench, in, report);
    CHECK(report.budget_s == doctest::Approx(neighbours > 0 ? 1.0 : 10.0));
  }
}

TEST_CASE("a cold problem over its budget still measures a few and the best of them in full") {
  FakeBench bench(64);
  ProblemReport report;
  halving(bench, 1e-9).measure(bench, pending(64), report);
  CHECK(report.budget_exhausted);
  CHECK(bench.count_measured() >= size_t(k_halving_eta));
  CHECK(bench.stored.size() >= 1);
  CHECK(bench.stored.size() <= size_t(k_halving_eta));
  CHECK_FALSE(bench.winner().empty());
}

namespace {

// 256 configurations a=1..16, b=1..16; the fastest at a=13, b=13, slower by 1 us per
// step away from it in either parameter. Candidate at(a, b) is (a, b).
void grid(FakeBench& bench) {
  for (size_t i = 0; i < 256; ++i) {
    bench.set_config(i, std::string("a=")
                            .append(std::to_string(i / 16 + 1))
                            .append(",b=")
                            .append(std::to_string(i % 16 + 1)));
  }
  bench.median_of = [](size_t i) {
    return 100.0 + std::abs(double(i / 16 + 1) - 13) + std::abs(double(i % 16 + 1) - 13);
  };
}

size_t at(size_t a, size_t b) {
  return (a - 1) * 16 + (b - 1);
}

} // namespace

TEST_CASE("seeds are measured first, in full over alternating passes, and exploration starts "
          "next to the best") {
  FakeBench bench(256);
  grid(bench);
  ProblemReport report;
  // Two seeds: (3, 3) from the nearest problem, (11, 12) from the next.
  SearchInput in = pending(256, {at(3, 3), at(11, 12)});
  halving(bench, 3.3, 8).measure(bench, in, report);
  REQUIRE(k_seed_passes == 2);
  REQUIRE(bench.order.size() >= 10);
  // Pass by pass, in alternating order: A B, B A.
  CHECK(bench.order[0] == at(3, 3));
  CHECK(bench.order[1] == at(11, 12));
  CHECK(bench.order[2] == at(11, 12));
  CHECK(bench.order[3] == at(3, 3));
  CHECK(pass_of(bench.protocols[0], k_seed_passes));
  CHECK(bench.measured[at(3, 3)] == k_seed_passes);       // never again, and cut: the final
  CHECK(bench.variant(at(3, 3)).eliminated_in_round > 0); // round has (11, 12)
  CHECK(bench.measured[at(11, 12)] == k_seed_passes + k_final_passes);
  CHECK(bench.stored.front() == at(3, 3)); // stored with its passes pooled, in seed order
  // The first batch explored: 6 nearest neighbours (the four of the faster seed
  // (11, 12) first), 2 at random.
  std::set<size_t> first(bench.order.begin() + 4, bench.order.begin() + 8);
  CHECK(first == std::set<size_t>{at(10, 12), at(12, 12), at(11, 11), at(11, 13)});
  // Within 3.3 s (3 s, and the best seed's place in the final round) the search walks
  // from (11, 12) to the optimum.
  CHECK(bench.winner() == "a=13,b=13");
}

TEST_CASE("the winner is never worse than the best seed") {
  for (double budget : {1e-9, 0.5, 1e9}) {
    CAPTURE(budget);
    FakeBench bench(256);
    grid(bench);
    ProblemReport report;
    halving(bench, budget).measure(bench, pending(256, {at(13, 13), at(1, 1)}), report);
    CHECK(bench.winner() == "a=13,b=13");
    // Measured again in the final round when there is one (not when the budget is
    // spent on the seeds), beside the finalists.
    const bool final_round = bench.stages.count("final") > 0;
    CHECK(final_round == (budget > 1));
    CHECK(bench.measured[at(13, 13)] ==
          (final_round ? k_seed_passes + k_final_passes : k_seed_passes));
    CHECK((bench.variant(at(1, 1)).eliminated_in_round > 0) == final_round);
  }
  SUBCASE("a warm problem over its budget explores nothing") {
    FakeBench bench(256);
    grid(bench);
    ProblemReport report;
    halving(bench, 1e-9).measure(bench, pending(256, {at(5, 5)}), report);
    CHECK(report.budget_exhausted);
    CHECK(bench.order == std::vector<size_t>{at(5, 5)});
    CHECK(bench.winner() == "a=5,b=5");
  }
}

TEST_CASE("the final round's passes add up to one full measurement, so the budget's reserve "
          "for it holds") {
  const TimingProtocol full;
  int least = 0; // samples: a measurement takes whole batches
  int most = 0;
  double min_s = 0;
  double max_s = 0;
  for (int pass = 0; pass < k_final_passes; ++pass) {
    CAPTURE(pass);
    const TimingProtocol p = HalvingSearch::pass_protocol(full, pass, k_final_passes);
    CHECK(p.warmup == (pass == 0 ? full.warmup : 1));
    CHECK(p.target_spread == full.target_spread);
    least += (p.min_samples + p.batch - 1) / p.batch * p.batch;
    most += p.max_samples;
    min_s += p.min_seconds;
    max_s += p.max_seconds;
  }
  CHECK(least == (full.min_samples + full.batch - 1) / full.batch * full.batch);
  CHECK(most == full.max_samples);
  CHECK(min_s == doctest::Approx(full.min_seconds));
  CHECK(max_s == doctest::Approx(full.max_seconds));
  SUBCASE("on a budget, the round ends within it, in the full measurements reserved for the "
          "four finalists and the best seed") {
    // The seeds are 116 and 124 us: the second does not tie with the first.
    REQUIRE(124.0 > k_final_seed_tie * 116.0);
    FakeBench bench(256);
    grid(bench);
    ProblemReport report;
    halving(bench, 3.0).measure(bench, pending(256, {at(5, 5), at(1, 1)}), report);
    CHECK(report.budget_exhausted);
    const size_t first = final_round_start(bench);
    REQUIRE(first + 5 * k_final_passes == bench.order.size());
    CHECK(bench.order[first] == at(5, 5)); // the best seed, first in the round's order
    CHECK(bench.measured[at(1, 1)] == k_seed_passes);
    CHECK(bench.clock - bench.starts[first] == doctest::Approx(5 * k_full_s));
    CHECK(bench.clock <= 3.0 + 1e-9);
  }
  SUBCASE("without seeds, the reserve is the four finalists'") {
    FakeBench bench(256);
    grid(bench);
    ProblemReport report;
    halving(bench, 0.3).measure(bench, pending(256), report); // cold: 3 s
    CHECK(report.budget_exhausted);
    const size_t first = final_round_start(bench);
    REQUIRE(first + 4 * k_final_passes == bench.order.size());
    CHECK(bench.clock - bench.starts[first] == doctest::Approx(4 * k_full_s));
    CHECK(bench.clock <= 3.0 + 1e-9);
    CHECK(bench.clock > 3.0 - k_cheap_s - 1e-9); // and exploration had the rest
  }
}

namespace {

// Six candidates to explore (candidate i at 100 + 3i us, 0 the fastest of them) and two
// seeds measured in full first, 6 (`seed_us`) then 7 (104.5 us: more than k_final_seed_tie
// behind seed 6, so only 6 joins the final round), on a GPU whose speed
// steps by `step` once the seeds were measured (positive: slower, as when it heats up).
void seeded(FakeBench& bench, double seed_us, double step) {
  bench.median_of = [seed_us](size_t i) {
    return i == 6 ? seed_us : i == 7 ? 104.5 : 100.0 + 3.0 * double(i);
  };
  bench.drift = [step](double t) { return t < 2 * k_full_s - 1e-9 ? 1.0 : 1.0 + step; };
}

SearchInput seeded_input(size_t builtin_seeds) {
  SearchInput in = pending(8, {6, 7});
  in.builtin_seeds = builtin_seeds; // 2: the op's built-in points, a cold problem
  return in;
}

// What the tests of seeds in the final round check whatever the drift: the best seed
// (6) measured again in the round's passes, first in its order, and its stored result
// the pooled one; the other seed measured once and cut.
void check_best_seed_in_final_round(FakeBench& bench) {
  REQUIRE(bench.stages.count("final") == 1);
  const size_t first = final_round_start(bench);
  REQUIRE(first < bench.order.size());
  CHECK((bench.order.size() - first) % k_final_passes == 0);
  CHECK(bench.order[first] == 6);
  CHECK(bench.measured[6] == k_seed_passes + k_final_passes);
  CHECK(bench.measured[7] == k_seed_passes);
  CHECK(bench.variant(7).eliminated_in_round == 1);
  CHECK(bench.variant(6).eliminated_in_round == 0);
  // Stored twice: its early measurement at once, then the pooled passes alone.
  CHECK(std::count(bench.stored.begin(), bench.stored.end(), size_t(6)) == 2);
  const int per_pass =
      HalvingSearch::pass_protocol(TimingProtocol{}, 1, k_final_passes).min_samples;
  CHECK(bench.variant(6).timing.samples == k_final_passes * per_pass);
}

// Seeds 6 (at seed_us) and 7 measured first, the GPU's speed stepping by `step` after
// them, the search run to its end; then what every such run must show.
void measure_seeded(FakeBench& bench, double seed_us, double step, size_t builtin) {
  seeded(bench, seed_us, step);
  ProblemReport report;
  halving(bench, 1e9).measure(bench, seeded_input(builtin), report);
  check_best_seed_in_final_round(bench);
}

} // namespace

TEST_CASE("a seed measured early at a fast moment does not win over a finalist that is faster "
          "beside it in the final round") {
  // Seed 6 is 2% slower than candidate 0, seed 7 4.5%; both measured at the start.
  for (size_t builtin : {size_t(0), size_t(2)}) {
    for (double step : {0.05, 0.0, -0.05}) {
      CAPTURE(builtin);
      CAPTURE(step);
      FakeBench bench(8);
      measure_seeded(bench, 102.0, step, builtin);
      CHECK(bench.winner() == "p=1000");
      if (step > 0) {
        // The GPU slowed down: both seeds' early timings beat candidate 0's in the round,
        // and either would have won on it.
        const double finalist = bench.variant(0).timing.median_us;
        CHECK(bench.median_of(6) * bench.drift(0) < finalist);
        CHECK(bench.median_of(7) * bench.drift(k_full_s) < finalist);
        CHECK(bench.variant(6).timing.median_us > finalist);
      }
    }
  }
}

TEST_CASE("a seed that is the fastest beside the finalists wins, whenever it was first "
          "measured") {
  // Seed 6 is 2% faster than candidate 0.
  for (size_t builtin : {size_t(0), size_t(2)}) {
    for (double step : {0.05, 0.0, -0.05}) {
      CAPTURE(builtin);
      CAPTURE(step);
      FakeBench bench(8);
      measure_seeded(bench, 98.0, step, builtin);
      CHECK(bench.winner() == "p=1006");
      if (step < 0) {
        // The GPU sped up: candidate 0's timing in the round beats the seed's early one,
        // and would have won on it.
        CHECK(bench.variant(0).timing.median_us < bench.median_of(6) * bench.drift(0));
      }
    }
  }
}

TEST_CASE("seeds that tie with the best seed join the final round beside it, the others are "
          "cut") {
  // Seeds 6 (100.5 us), 7 (101.5 when first measured, at a slow moment: within
  // k_final_seed_tie of 6; 99.0 from then on) and 8 (103.0: not within it); candidates
  // 0-5 at 101 + 3i. Measured again in the round, seed 7's lead decides; with the best
  // seed alone in the round, seed 6 would have won.
  FakeBench bench(9);
  bench.median_of = [&bench](size_t i) {
    if (i == 7) {
      return bench.measured[7] <= k_seed_passes ? 101.5 : 99.0;
    }
    return i == 6 ? 100.5 : i == 8 ? 103.0 : 101.0 + 3.0 * double(i);
  };
  REQUIRE(101.5 <= k_final_seed_tie * 100.5);
  REQUIRE(103.0 > k_final_seed_tie * 100.5);
  ProblemReport report;
  halving(bench, 1e9).measure(bench, pending(9, {6, 7, 8}), report);
  REQUIRE(bench.stages.count("final") == 1);
  const size_t first = final_round_start(bench);
  REQUIRE(first + 1 < bench.order.size());
  // The two tied seeds, best first, in the round's passes; the third measured once, cut.
  CHECK(bench.order[first] == 6);
  CHECK(bench.order[first + 1] == 7);
  CHECK(bench.measured[6] == k_seed_passes + k_final_passes);
  CHECK(bench.measured[7] == k_seed_passes + k_final_passes);
  CHECK(bench.measured[8] == k_seed_passes);
  CHECK(bench.variant(8).eliminated_in_round == 1);
  CHECK(bench.winner() == "p=1007");
}

TEST_CASE("seeds measured while the GPU slows down are compared in alternating passes") {
  // Seed 7 is 1% faster than seed 6; while the seeds are measured the GPU slows by 4%
  // per full measurement's time, then holds. Measured one after the other, 7 would have
  // read 3% behind 6 and been cut (more than k_final_seed_tie); in passes A B, B A both
  // see the same slowdown, 7 joins the final round and wins there.
  FakeBench bench(8);
  bench.median_of = [](size_t i) {
    return i == 6 ? 100.0 : i == 7 ? 99.0 : 103.0 + 3.0 * double(i);
  };
  bench.drift = [](double t) { return t < 2 * k_full_s - 1e-9 ? 1.0 + 0.04 * t / k_full_s : 1.0; };
  REQUIRE(99.0 * 1.04 > k_final_seed_tie * 100.0);
  ProblemReport report;
  halving(bench, 1e9).measure(bench, pending(8, {6, 7}), report);
  REQUIRE(bench.order.size() >= 4);
  CHECK(bench.order[0] == 6);
  CHECK(bench.order[1] == 7);
  CHECK(bench.order[2] == 7);
  CHECK(bench.order[3] == 6);
  REQUIRE(bench.stages.count("final") == 1);
  CHECK(bench.measured[7] == k_seed_passes + k_final_passes);
  CHECK(bench.winner() == "p=1007");
}

namespace {

// Seeds 6 (100 us, at `lead_mhz` when measured as a seed, 1725 MHz after) and 7
// (`seed_us` at `seed_mhz` when measured as a seed, 98 us at 1725 MHz after); candidates
// 0-5 at `first_us` + 3i, 1725 MHz.
void clock_seeded(FakeBench& bench, double seed_us, int seed_mhz, double first_us,
                  int lead_mhz = 1725) {
  bench.median_of = [&bench, seed_us, first_us](size_t i) {
    if (i == 7) {
      return bench.measured[7] <= k_seed_passes ? seed_us : 98.0;
    }
    return i == 6 ? 100.0 : first_us + 3.0 * double(i);
  };
  bench.mhz_of = [seed_mhz, lead_mhz](size_t i, int nth) {
    if (nth <= k_seed_passes && (i == 6 || i == 7)) {
      return i == 6 ? lead_mhz : seed_mhz;
    }
    return 1725;
  };
  ProblemReport report;
  halving(bench, 1e9).measure(bench, pending(8, {6, 7}), report);
}

} // namespace

TEST_CASE("a seed that lost while the SM clock was much lower is measured again beside the "
          "others in the final round") {
  // Seed 7 read 5% behind seed 6 (more than k_final_seed_tie) at 1380 MHz against 1725:
  // faster than 6 once scaled, so it joins the round, where it is 2% ahead.
  REQUIRE(105.0 > k_final_seed_tie * 100.0);
  REQUIRE(1380 * k_clock_gap <= 1725);
  for (double first_us : {103.0, 120.0}) {
    // 103: explored candidates reach the final round; 120: none does (more than
    // k_prune_ratio behind), and the round holds the seeds alone.
    CAPTURE(first_us);
    FakeBench bench(8);
    clock_seeded(bench, 105.0, 1380, first_us);
    REQUIRE(bench.stages.count("final") == 1);
    CHECK(bench.measured[6] == k_seed_passes + k_final_passes);
    CHECK(bench.measured[7] == k_seed_passes + k_final_passes);
    CHECK(bench.variant(7).eliminated_in_round == 0);
    CHECK(std::string(bench.variant(7).timed_in) == "final");
    CHECK(bench.winner() == "p=1007");
  }
}

TEST_CASE("a seed cut at the clock of the fastest timing joins the final round when a finalist "
          "took more clock cycles at a much higher clock") {
  // Seed 6: 100 us at 1400 MHz, the fastest as timed; seed 7: 104 us at 1380 (more than
  // k_final_seed_tie behind 6, at about its clock), 98 us later; candidates 0-5 at
  // 101 + 3i us at 1725 MHz reach the final round, and candidate 0 takes more cycles
  // than seed 7 did (101 x 1725 > 104 x 1380).
  REQUIRE(104.0 > k_final_seed_tie * 100.0);
  REQUIRE(1380 * k_clock_gap > 1400);
  REQUIRE(101.0 * 1725 > 104.0 * 1380);
  FakeBench bench(8);
  clock_seeded(bench, 104.0, 1380, 101.0, 1400);
  REQUIRE(bench.stages.count("final") == 1);
  CHECK(bench.measured[7] == k_seed_passes + k_final_passes);
  CHECK(bench.winner() == "p=1007");
}

TEST_CASE("a seed that lost at about the same SM clock, or by more than the pruning ratio, "
          "stays cut") {
  struct Case {
    double seed_us;
    int seed_mhz;
  };
  // 1680 MHz: less than k_clock_gap below 1725; 112 us: more than k_prune_ratio behind;
  // 0 MHz: no clock read.
  for (Case c : {Case{105.0, 1725}, Case{105.0, 1680}, Case{112.0, 1380}, Case{105.0, 0}}) {
    CAPTURE(c.seed_us);
    CAPTURE(c.seed_mhz);
    FakeBench bench(8);
    clock_seeded(bench, c.seed_us, c.seed_mhz, 103.0);
    CHECK(bench.measured[7] == k_seed_passes);
    CHECK(bench.variant(7).eliminated_in_round == 1);
    CHECK(std::string(bench.variant(7).timed_in) == "seeds");
    CHECK(bench.winner() == "p=1006");
  }
}

TEST_CASE("an explored candidate cut on a cheap timing at a much lower SM clock joins the final "
          "round") {
  // Candidates at 100 + i us, all within k_prune_ratio; the final round takes the best
  // k_halving_eta (0-3). Candidate 8 was timed at 108 us at 1380 MHz, 95 us at 1725.
  FakeBench bench(10);
  bench.median_of = [&bench](size_t i) {
    return i == 8 && bench.measured[8] > 1 ? 95.0 : 100.0 + double(i);
  };
  bench.mhz_of = [](size_t i, int nth) { return i == 8 && nth == 1 ? 1380 : 1725; };
  ProblemReport report;
  halving(bench, 1e9).measure(bench, pending(10), report);
  REQUIRE(bench.stages.count("final") == 1);
  CHECK(bench.measured[8] == 1 + k_final_passes);
  for (size_t i : {4, 5, 6, 7, 9}) {
    CAPTURE(i);
    CHECK(bench.measured[i] == 1);
    CHECK(bench.variant(i).eliminated_in_round == 1);
    CHECK(std::string(bench.variant(i).timed_in) == "explore");
  }
  CHECK(std::string(bench.variant(8).timed_in) == "final");
  CHECK(bench.winner() == "p=1008");
}

TEST_CASE("when nothing in the final round stays correct, the seeds' early measurements decide") {
  FakeBench bench(8);
  seeded(bench, 102.0, 0.0);
  // Candidates 0-3 (explored once) and seed 6 (measured once) fail their first pass.
  for (size_t i : {0, 1, 2, 3, 6}) {
    bench.fails_from[i] = 2;
  }
  ProblemReport report;
  halving(bench, 1e9).measure(bench, seeded_input(0), report);
  CHECK(bench.stages.count("final") == 1);
  CHECK(bench.variant(6).outcome == cache::Outcome::wrong);
  CHECK(bench.variant(7).eliminated_in_round == 0);
  CHECK(bench.winner() == "p=1007");
}

TEST_CASE("seconds the session spent on the search before it started count against the budget") {
  // Seeds built while the worker set the problem up: 3 s of a 3 s budget.
  for (double spent : {0.0, 3.0}) {
    CAPTURE(spent);
    FakeBench bench(256);
    grid(bench);
    ProblemReport report;
    SearchInput in = pending(256, {at(5, 5)});
    in.spent_s = spent;
    halving(bench, 3.0).measure(bench, in, report);
    CHECK(report.budget_s == doctest::Approx(3.0));
    if (spent > 0) {
      CHECK(report.budget_exhausted);
      CHECK(bench.order == std::vector<size_t>{at(5, 5)}); // the seed, nothing explored
    } else {
      CHECK(bench.count_measured() > 8);
    }
  }
}

TEST_CASE("a problem whose seeds all fail explores as a cold one, until something is correct") {
  // Seeds 7 and 8 fail here, and so do 24 other candidates.
  std::set<size_t> wrong = {7, 8};
  for (size_t i = 40; i < 64; ++i) {
    wrong.insert(i);
  }
  FakeBench bench(64, wrong);
  bench.median_of = [](size_t i) { return 100.0 - double(i); }; // 39 is the fastest correct
  ProblemReport report;
  HalvingSearch search = halving(bench, 1e-9, 4);
  search.measure(bench, pending(64, {7, 8}), report);
  CHECK(report.budget_exhausted);
  CHECK_FALSE(bench.winner().empty());
  CHECK(bench.count_measured() >= 2 + size_t(k_halving_eta));
}

TEST_CASE("cheap timings far above the best full one are cut before the final round") {
  FakeBench bench(64);
  // The seed (candidate 40) is fastest by far: every other timing is over 1.1x it.
  bench.median_of = [](size_t i) { return i == 40 ? 10.0 : 20.0 + double(i); };
  ProblemReport report;
  halving(bench, 1e9).measure(bench, pending(64, {40}), report);
  CHECK(bench.count_measured() == 64);
  CHECK(bench.stored == std::vector<size_t>{40}); // no final round
  CHECK(bench.stages.count("final") == 0);
  CHECK(bench.eliminated_in(1).size() == 63);
  CHECK(bench.winner() == "p=1040");
}

TEST_CASE("results a killed session stored count as measured in full") {
  FakeBench bench(16);
  bench.built[3] = 1;
  bench.measure(3, TimingProtocol{}); // stored by the session that was killed
  bench.measured[3] = 0;
  bench.order.clear();
  SearchInput in;
  for (size_t i = 0; i < 16; ++i) {
    if (i != 3) {
      in.pending.push_back(i);
    }
  }
  in.measured = {3};
  ProblemReport report;
  halving(bench, 1e9).measure(bench, in, report);
  CHECK(bench.measured[3] == 0);
  // Exploration starts next to it.
  REQUIRE_FALSE(bench.order.empty());
  CHECK((bench.order[0] == 2 || bench.order[0] == 4));
  CHECK(bench.winner() == "p=1000");
}

TEST_CASE("configurations are near when few parameters differ, and numbers by their ratio") {
  Config a = parse_fields("block_m=128,block_n=64,swizzle=xor", "config");
  CHECK(config_distance(a, a) == 0.0);
  CHECK(config_distance(a, parse_fields("block_m=128,block_n=64,swizzle=pad", "c")) == 1.0);
  double to_192 = config_distance(a, parse_fields("block_m=192,block_n=64,swizzle=xor", "c"));
  double to_64 = config_distance(a, parse_fields("block_m=64,block_n=64,swizzle=xor", "c"));
  CHECK(to_192 > 1.0);
  CHECK(to_192 < to_64);
  CHECK(to_64 == doctest::Approx(1.1));
  CHECK(config_distance(a, parse_fields("block_m=64,block_n=32,swizzle=pad", "c")) ==
        doctest::Approx(3.2));
}

TEST_CASE("the default strategy is halving from transfer seeds within the default budget") {
  TuneOptions o;
  auto s = make_strategy(o);
  CHECK(s->transfers());
  CHECK(s->budget_s(true) == doctest::Approx(k_default_budget_s));
  CHECK(s->budget_s(false) == doctest::Approx(k_default_budget_s * k_cold_budget_factor));
  o.budget_s = 5;
  CHECK(make_strategy(o)->budget_s(true) == doctest::Approx(5.0));
  o.strategy = "random";
  CHECK(make_strategy(o)->transfers()); // halving over a random sample
  o.budget_s = 0;
  CHECK_FALSE(make_strategy(o)->transfers());
  CHECK(make_strategy(o)->budget_s(true) == 0.0);
  o.strategy = "exhaustive";
  CHECK_FALSE(make_strategy(o)->transfers());
  CHECK(make_strategy(o)->budget_s(false) == 0.0);
}

TEST_CASE("an unknown strategy, or exhaustive search with a budget, is a usage error") {
  TuneOptions o;
  o.strategy = "genetic";
  CHECK_THROWS_WITH_AS(make_strategy(o), doctest::Contains("not 'genetic'"), Error);
  o.strategy = "exhaustive";
  o.budget_s = 3;
  CHECK_THROWS_WITH_AS(make_strategy(o), doctest::Contains("measures every variant"), Error);
  try {
    make_strategy(o);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
  }
}

namespace {

// A database holding winners of attention problems on one device, with the current
// template and NVRTC (what transfer looks for).
class WinnerDb {
public:
  WinnerDb()
      : m_path(std::filesystem::temp_directory_path() /
               ("autotune-transfer-" + std::to_string(::getpid()) + ".db")) {
    remove();
    m_db = std::make_unique<cache::Database>(m_path.string(), cache::Database::Mode::read_write);
    device.name = "NVIDIA H100 80GB HBM3";
    device.arch = "sm_90a";
    device.cc = 90;
    device.sm_count = 132;
    device.driver_version = 13000;
    m_db->put_device(device);
  }
  ~WinnerDb() {
    m_db.reset();
    remove();
  }
  WinnerDb(const WinnerDb&) = delete;
  WinnerDb& operator=(const WinnerDb&) = delete;

  void win(const std::string& shape, const std::string& config,
           const std::string& device_key = {}) {
    const Op& op = find_op("attention");
    Problem p = op.make_problem(parse_fields(shape, "shape"));
    cache::VariantRecord v;
    v.op = op.name();
    v.arch = device.arch;
    v.template_hash = template_hash(op.template_path());
    v.nvrtc_version = cuda::nvrtc_version();
    v.options = std::string("-D").append(config);
    v.config = config;
    v.kernel = op.kernel_name();
    v.key = cache::variant_key(v.op, v.template_hash, v.nvrtc_version, v.arch, v.options, v.kernel);
    std::string cubin = std::string("cubin of ").append(config);
    v.cubin_sha256 = sha256_hex(cubin);
    m_db->put_variant(v, cubin);
    cache::WinnerRecord w;
    w.device_key = device_key.empty() ? device.key() : device_key;
    w.op = op.name();
    w.problem = p.key();
    w.template_hash = v.template_hash;
    w.nvrtc_version = v.nvrtc_version;
    w.variant_key = v.key;
    w.config = config;
    w.kernel = v.kernel;
    w.median_us = 100;
    m_db->put_winner(w);
  }

  std::vector<std::string> seeds(const std::string& shape, size_t k,
                                 const std::string& device_key = {}) {
    const Op& op = find_op("attention");
    Problem p = op.make_problem(parse_fields(shape, "shape"));
    std::vector<std::string> out;
    for (const TransferSeed& s :
         nearest_winners(*m_db, op, device_key.empty() ? device.key() : device_key, p, k)) {
      out.push_back(s.config);
    }
    return out;
  }

  cache::DeviceRecord device;

private:
  void remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::filesystem::remove(m_path.string() + suffix);
    }
  }
  std::filesystem::path m_path;
  std::unique_ptr<cache::Database> m_db;
};

} // namespace

TEST_CASE("transfer seeds are the distinct winners of the nearest tuned problems on this GPU") {
  if (!cuda::nvrtc_available()) {
    MESSAGE("skipped: the winners are keyed by the NVRTC version, and NVRTC is not loadable");
    return;
  }
  WinnerDb db;
  const std::string bf16 = ",H=32,D=64,dtype=bf16";
  db.win("B=4,S=4096" + bf16, "c2");               // size distance 1 (B)
  db.win("B=8,S=2048" + bf16, "c2");               // 2 (Sq, Sk), the same winner
  db.win("B=16,S=1024" + bf16, "c1");              // 5
  db.win("B=1,S=16384" + bf16, "c3");              // 7
  db.win("B=8,S=4096,H=32,D=64,dtype=fp16", "c4"); // another dtype
  db.win("B=8,S=4096" + bf16 + ",causal=1", "c5"); // another flag, and further
  db.win("B=8,S=4096" + bf16, "c6", "another-device");
  const std::string query = "B=8,S=4096" + bf16;
  CHECK(db.seeds(query, 2) == std::vector<std::string>{"c2", "c1"});
  CHECK(db.seeds(query, 3) == std::vector<std::string>{"c2", "c1", "c3"});
  // Past the problems that agree on every other field: those that differ in one.
  CHECK(db.seeds(query, 5) == std::vector<std::string>{"c2", "c1", "c3", "c4", "c5"});
  CHECK(db.seeds(query, 0).empty());
  SUBCASE("a problem's own stored winner (re-tuned with --force) comes first") {
    db.win(query, "c7");
    CHECK(db.seeds(query, 1) == std::vector<std::string>{"c7"});
  }
  SUBCASE("winners of another GPU are not transferred") {
    cache::DeviceRecord other = db.device;
    other.sm_count = 114;
    CHECK(db.seeds(query, 4, other.key()).empty());
    CHECK(db.seeds(query, 4, "another-device") == std::vector<std::string>{"c6"});
  }
}

TEST_CASE("transfer seeds are the nearest winners valid for the problem, adapted where the op "
          "adapts them, without repeats") {
  const Op& op = find_op("attention");
  const Problem d128 = op.make_problem(parse_fields("B=8,H=16,S=2048,D=128", "shape"));
  const Problem d64 = op.make_problem(parse_fields("B=8,H=32,S=2048,D=64", "shape"));
  const Space space = parse_space(template_file(op.space_path()), op.space_path());
  std::vector<Config> valid;
  std::string only64; // valid at D=64, not at D=128 as it is or adapted
  for (const Config& c : space.enumerate()) {
    const bool ok128 = bool(op.check(c, d128, "sm_90a"));
    if (ok128) {
      valid.push_back(c);
    } else if (only64.empty() && op.check(c, d64, "sm_90a") &&
               !op.check(op.adapt(c, d128), d128, "sm_90a")) {
      only64 = config_id(c);
    }
  }
  // Two valid configurations the op keeps as they are for this problem.
  std::vector<std::string> kept;
  for (const Config& c : valid) {
    if (kept.size() < 2 && config_id(op.adapt(c, d128)) == config_id(c)) {
      kept.push_back(config_id(c));
    }
  }
  REQUIRE(kept.size() == 2);
  REQUIRE(!only64.empty());
  const std::string a = kept[0], b = kept[1];
  auto seed = [](const std::string& config, const std::string& problem) {
    TransferSeed t;
    t.config = config;
    t.problem = problem;
    return t;
  };
  const std::vector<TransferSeed> nearest = {seed(only64, "p0"), seed(a, "p1"), seed(a, "p2"),
                                             seed("block_m=notanumber", "p3"), seed(b, "p4")};
  std::vector<TransferSeed> got = valid_seeds(op, space, d128, valid, nearest, 4);
  REQUIRE(got.size() == 2);
  CHECK(got[0].config == a);
  CHECK(got[0].problem == "p1");
  CHECK(got[1].config == b);
  CHECK(valid_seeds(op, space, d128, valid, nearest, 1).size() == 1);

  // A decoding winner (four warps share each 16-row tile) borrowed by a prefill problem
  // is adapted to one warp per 16 rows, which is valid there.
  const Problem prefill = op.make_problem(parse_fields("B=2,Hq=8,Hkv=2,S=300,D=128", "shape"));
  const std::string decode = "block_m=16,block_n=64,warps=4,stages=2,swizzle=xor,q=regs,splits=1,"
                             "family=mma";
  std::vector<Config> valid_prefill;
  for (const Config& c : space.enumerate()) {
    if (op.check(c, prefill, "sm_90")) {
      valid_prefill.push_back(c);
    }
  }
  got = valid_seeds(op, space, prefill, valid_prefill, {seed(decode, "decode")}, 4);
  REQUIRE(got.size() == 1);
  CHECK(got[0].config != decode);
  CHECK(got[0].config.find("block_m=64,") != std::string::npos);
}

TEST_CASE("a winner stored before a parameter existed is a seed with that parameter's default") {
  const Op& op = find_op("selective_scan");
  const Space space = op_space(op);
  const Problem p = op.make_problem(parse_fields("B=4,D=5120,L=2047,N=16", "shape"));
  const Config with = parse_fields("threads=64,items=32,cpb=16,nsplit=4,scan=state,vec=8,poly=0,"
                                   "minblocks=1,tsplit=1,bc=pair,cpl=1,ystore=after,yred=1,"
                                   "ragged=regs",
                                   "config");
  REQUIRE(op.check(with, p, "sm_90a"));
  TransferSeed old;
  old.config = "threads=64,items=32,cpb=16,nsplit=4,scan=state,vec=8,poly=0,minblocks=1,"
               "tsplit=1,bc=pair,cpl=1,ystore=after,yred=1"; // no ragged yet
  old.problem = "B=4,D=5120,L=2048,N=16";
  TransferSeed removed = old;
  removed.config += ",retired=3"; // a parameter since removed: not a seed
  const std::vector<TransferSeed> got = valid_seeds(op, space, p, {with}, {removed, old}, 4);
  REQUIRE(got.size() == 1);
  CHECK(got[0].config == config_id(with));
}

TEST_CASE("the built-in seed takes the order of the searched space's parameters") {
  const Op& op = find_op("causal_conv1d");
  const Problem p = op.make_problem(parse_fields("B=4,C=4096,L=2048,W=4", "shape"));
  const auto own = builtin_seed(op, op_space(op), p, "sm_90a");
  REQUIRE(own);
  CHECK(own->builtin);
  // A --space file listing the same parameters in another order.
  const Space reordered = parse_space("[params]\nload = [\"direct\", \"smem\"]\n"
                                      "cpb = [1, 2, 4, 8]\nitems = [1, 2, 4]\nvec = [4, 8]\n"
                                      "threads = [64, 128, 256, 512]\n[default]\n"
                                      "load = \"direct\"\ncpb = 1\nitems = 2\nvec = 8\n"
                                      "threads = 128\n",
                                      "mine.toml");
  const auto mine = builtin_seed(op, reordered, p, "sm_90a");
  REQUIRE(mine);
  CHECK(mine->config.rfind("load=", 0) == 0);
  CHECK(config_id(order_config(op_space(op), parse_fields(mine->config, "c"), false, "c")) ==
        own->config);
  // A space without one of the op's parameters has no built-in seed.
  const Space fewer =
      parse_space("[params]\nthreads = [128]\n[default]\nthreads = 128\n", "f.toml");
  CHECK_FALSE(builtin_seed(op, fewer, p, "sm_90a"));
}

TEST_CASE("every built-in point is measured as a seed on its own shape") {
  // The tuner finds a seed among the measured configurations by its id: a point that
  // names too few parameters, or is pruned on its own shape, would be dropped silently.
  for (const char* name : {"causal_conv1d", "selective_scan", "attention"}) {
    const Op& op = find_op(name);
    const SearchSpace search = load_search_space(op, TuneOptions{});
    for (const HeuristicPoint& point :
         parse_heuristics(op, template_file(op.space_path()), op.space_path(), search.space)) {
      if (std::find(point.archs.begin(), point.archs.end(), "sm_90a") == point.archs.end()) {
        continue;
      }
      CAPTURE(point.origin);
      const Problem p = op.make_problem(point.shape);
      const auto seed = heuristic_config(op, p, "sm_90a");
      REQUIRE(seed);
      size_t skipped = 0;
      bool found = false;
      for (const Judged& j : judge_space(
               op, search.priors, search.space, p, "sm_90a", 2,
               [](Verdict v) { return v == Verdict::measure; }, false, skipped)) {
        found = found || config_id(j.config) == config_id(seed->first);
      }
      CHECK(found);
    }
  }
}

TEST_CASE("the --json report writes null, not nan, for numbers that are not finite") {
  TuneReport report;
  report.op = "causal_conv1d";
  ProblemReport p;
  p.problem = find_op("causal_conv1d").make_problem(parse_fields("B=1,C=8,L=16", "shape"));
  p.winner_us = std::nan("");
  VariantReport wrong;
  wrong.config = "threads=128,vec=8,items=2,cpb=1,load=direct";
  wrong.outcome = cache::Outcome::wrong;
  wrong.rel_err = std::nan("");
  wrong.timing.median_us = std::numeric_limits<double>::infinity();
  p.variants.push_back(wrong);
  report.problems.push_back(p);
  const std::string json = json_of(report);
  CHECK(json.find("nan") == std::string::npos);
  CHECK(json.find("inf") == std::string::npos);
  CHECK(json.find("\"rel_err\":null") != std::string::npos);
  CHECK(json.find("\"winner_us\":null") != std::string::npos);
  CHECK(json.find("\"median_us\":null") != std::string::npos);
}

TEST_CASE("the --json report splits each problem's wall time into phases that add up to it") {
  TuneReport report;
  report.op = "causal_conv1d";
  report.seconds = 9.5;
  report.start_seconds = 0.25;
  ProblemReport p;
  p.problem = find_op("causal_conv1d").make_problem(parse_fields("B=1,C=8,L=16", "shape"));
  p.seconds = 4;
  p.compile_seconds = 1;
  p.phases.select = 0.125;
  p.phases.setup = 0.5;
  p.phases.cubin_load = 0.25;
  p.phases.measure = 1.5;
  p.phases.restart = 0.0625;
  p.phases.store = 0.0625;
  p.phases.recheck = 0.25;
  p.worker.context = 0.375;
  p.worker.inputs = 0.0625;
  p.worker.timing = 1.25;
  p.search_seconds = 3.25;
  p.budget_s = 2;
  report.problems.push_back(p);
  const std::string json = json_of(report);
  CHECK(json.find("\"seconds\":9.5000,\"start_s\":0.2500,\"problems\":[") != std::string::npos);
  CHECK(json.find("\"compile_s\":1.0000,\"seconds\":4.0000,") != std::string::npos);
  CHECK(json.find("\"search_s\":3.2500,\"budget_s\":2.0000,") != std::string::npos);
  // 4 s less the phases' 2.75 s and the compile's 1 s.
  CHECK(json.find("\"phases_s\":{\"select\":0.1250,\"setup\":0.5000,\"compile\":1.0000,"
                  "\"cubin_load\":0.2500,\"measure\":1.5000,\"restart\":0.0625,\"store\":0.0625,"
                  "\"recheck\":0.2500,\"other\":0.2500}") != std::string::npos);
  CHECK(json.find("\"worker_s\":{\"context\":0.3750,\"modules\":0.0000,\"allocate\":0.0000,"
                  "\"inputs\":0.0625,\"copy\":0.0000,\"module_load\":0.0000,\"check\":0.0000,"
                  "\"timing\":1.2500}") != std::string::npos);
  SUBCASE("a problem whose phases cover its time has nothing left for other") {
    report.problems[0].seconds = 3.5;
    const std::string again = json_of(report);
    CHECK(again.find("\"other\":0.0000}") != std::string::npos);
  }
}

TEST_CASE("a persistent attention variant with no more tiles than blocks is measured only where "
          "its tile order differs from the plain grid's (causal)") {
  const Op& op = find_op("attention");
  const Config persistent = parse_fields("block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,"
                                         "q=smem,splits=1,family=wgmma_persistent",
                                         "config");
  // 8 query blocks x 4 heads: 32 tiles, a grid of 32 blocks of one tile each.
  for (const char* causal : {"0", "1"}) {
    CAPTURE(causal);
    const Problem p = op.make_problem(
        parse_fields(std::string("B=1,H=4,S=1024,D=128,causal=") + causal, "shape"));
    std::string why;
    const Verdict v = judge(op, Priors{}, persistent, p, "sm_90a", &why);
    if (std::string(causal) == "0") {
      CHECK(v == Verdict::pruned);
      CHECK(why.find("is the plain one") != std::string::npos);
    } else {
      CHECK(v == Verdict::measure);
    }
  }
}

TEST_CASE("the walk over a space skips only inert combinations and keeps a fixed order on any "
          "number of threads") {
  const Op& op = find_op("selective_scan");
  Space s = op_space(op);
  restrict_space(s, {{"threads", "64|128"},
                     {"items", "32|64"},
                     {"cpb", "4|16"},
                     {"nsplit", "1|4"},
                     {"minblocks", "1"},
                     {"tsplit", "1|2"},
                     {"cpl", "1|2"},
                     {"yred", "0|1"}});
  const Priors priors = load_search_space(op, TuneOptions{}).priors;
  for (const char* shape : {"B=2,D=2560,L=8192,N=16", "B=3,D=1536,L=1001,N=16"}) {
    CAPTURE(shape);
    const Problem p = op.make_problem(parse_fields(shape, "t"));
    std::set<std::string> full;
    size_t pruned = 0;
    s.for_each([&](const Config& c) {
      const Verdict v = judge(op, priors, c, p, "sm_90a");
      if (v == Verdict::measure) {
        full.insert(config_id(c));
      }
      pruned += v == Verdict::pruned ? 1 : 0;
    });
    REQUIRE(full.size() > 20);
    size_t skipped = 0;
    auto measured = [](Verdict v) { return v == Verdict::measure; };
    const std::vector<Judged> one =
        judge_space(op, priors, s, p, "sm_90a", 1, measured, false, skipped);
    CHECK(skipped == s.size() - one.size());
    std::set<std::string> walked;
    for (const Judged& j : one) {
      CHECK(j.verdict == Verdict::measure);
      walked.insert(config_id(j.config));
    }
    CHECK(walked == full);
    CHECK(walked.size() == one.size()); // each once
    const std::vector<Judged> four =
        judge_space(op, priors, s, p, "sm_90a", 4, measured, false, skipped);
    REQUIRE(four.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      CHECK(four[i].config == one[i].config);
    }
    // Pruned combinations come back with their reason when asked for.
    const std::vector<Judged> with_pruned = judge_space(
        op, priors, s, p, "sm_90a", 3, [](Verdict v) { return v != Verdict::invalid; }, true,
        skipped);
    size_t reasons = 0;
    for (const Judged& j : with_pruned) {
      reasons += j.verdict == Verdict::pruned && !j.why.empty() ? 1 : 0;
    }
    CHECK(reasons > 0);
    CHECK(reasons <= pruned);
  }
}

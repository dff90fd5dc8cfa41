#include "tuner/strategy.hpp"
#include "tuner/tuner.hpp"

#include <doctest/doctest.h>

#include <map>
#include <set>

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
  SUBCASE("exhaustive search keeps everything") {
    TuneOptions e;
    ProblemReport r;
    CHECK(select_strategy(all, e, r).size() == 100);
    CHECK(r.sampled == 0);
  }
}

namespace {

// Candidates with fixed medians: measuring takes no time; those in `wrong` fail
// the check. Records what a strategy asked for.
class FakeBench final : public Bench {
public:
  explicit FakeBench(size_t n, std::set<size_t> wrong = {})
      : m_wrong(std::move(wrong)), m_variants(n), measured(n, 0) {
    for (size_t i = 0; i < n; ++i) {
      m_variants[i].config = std::to_string(1000 + i); // ids sort as the indices do
    }
  }
  void measure(size_t i, const TimingProtocol& protocol) override {
    ++measured.at(i);
    last_protocol[i] = protocol.min_samples;
    VariantReport& v = m_variants.at(i);
    v.outcome = m_wrong.count(i) ? cache::Outcome::wrong : cache::Outcome::ok;
    double median = 10.0 + double(i); // candidate 0 is the fastest
    v.timing = m_wrong.count(i) ? Timing{} : Timing{median, median, median, protocol.min_samples};
  }
  void store(size_t i) override { stored.push_back(i); }
  VariantReport& variant(size_t i) override { return m_variants.at(i); }
  void progress(const std::string& stage, size_t, size_t) override { stages.insert(stage); }
  void stage_done() override {}

  std::vector<size_t> eliminated_in(int round) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < m_variants.size(); ++i) {
      if (m_variants[i].eliminated_in_round == round) {
        out.push_back(i);
      }
    }
    return out;
  }

private:
  std::set<size_t> m_wrong;
  std::vector<VariantReport> m_variants;

public:
  std::vector<int> measured;
  std::map<size_t, int> last_protocol; // min_samples of each one's latest measurement
  std::vector<size_t> stored;
  std::set<std::string> stages;
};

std::vector<size_t> all_of(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = i;
  }
  return v;
}

} // namespace

TEST_CASE("exhaustive and random search measure each candidate once, in full, and store it") {
  TuneOptions o;
  for (const char* name : {"exhaustive", "random"}) {
    CAPTURE(name);
    o.strategy = name;
    FakeBench bench(10, {3});
    ProblemReport report;
    make_strategy(o)->measure(bench, all_of(10), report);
    CHECK(bench.measured == std::vector<int>(10, 1));
    CHECK(bench.stored == all_of(10));
    for (size_t i = 0; i < 10; ++i) {
      CHECK(bench.last_protocol[i] == o.protocol.min_samples);
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
  ProblemReport r;
  CHECK(make_strategy(o)->select(all, r).size() == k_max_exhaustive);
  CHECK(r.sampled == k_max_exhaustive);
  all.resize(k_max_exhaustive);
  ProblemReport whole;
  CHECK(make_strategy(o)->select(all, whole).size() == k_max_exhaustive);
  CHECK(whole.sampled == 0);
}

TEST_CASE("successive halving keeps the best quarter per round and stores only final timings") {
  TuneOptions o;
  o.budget_s = 1e9;
  FakeBench bench(64, {5});
  ProblemReport report;
  make_strategy(o)->measure(bench, all_of(64), report);
  // 64 candidates: rounds of 64 (cheap), 16 of the 63 correct, then 4 in full.
  CHECK(bench.stages == std::set<std::string>{"round 1", "round 2", "round 3"});
  CHECK(bench.eliminated_in(1).size() == 63 - 16);
  CHECK(bench.eliminated_in(2).size() == 16 - 4);
  std::vector<size_t> finalists = bench.eliminated_in(0);
  // The four fastest correct ones, and the wrong one (its outcome is final).
  CHECK(finalists == std::vector<size_t>{0, 1, 2, 3, 5});
  for (size_t i : {0, 1, 2, 3}) {
    CHECK(bench.measured[i] == 3);
    CHECK(bench.last_protocol[i] == o.protocol.min_samples); // the last round is in full
  }
  CHECK(bench.last_protocol[63] < o.protocol.min_samples);
  // Stored: the failure at once, the finalists' full measurements; no cheap timing.
  CHECK(bench.stored == std::vector<size_t>{5, 0, 1, 2, 3});
  CHECK_FALSE(report.budget_exhausted);
  std::vector<VariantReport> v;
  for (size_t i = 0; i < 64; ++i) {
    v.push_back(bench.variant(i));
  }
  CHECK(v[preference_order(v).front()].config == "1000");
}

TEST_CASE("successive halving over its budget measures only the best eta in full") {
  TuneOptions o;
  o.budget_s = 1e-12; // spent by the first, cheap round
  FakeBench bench(64);
  ProblemReport report;
  make_strategy(o)->measure(bench, all_of(64), report);
  CHECK(report.budget_exhausted);
  CHECK(bench.stages == std::set<std::string>{"round 1", "round 3"});
  CHECK(bench.eliminated_in(0) == std::vector<size_t>{0, 1, 2, 3});
  CHECK(bench.stored == std::vector<size_t>{0, 1, 2, 3});
  for (size_t i : {0, 1, 2, 3}) {
    CHECK(bench.last_protocol[i] == o.protocol.min_samples);
  }
}

TEST_CASE("halving with few candidates is one full round") {
  TuneOptions o;
  o.strategy = "halving";
  o.budget_s = 10;
  FakeBench bench(4);
  ProblemReport report;
  make_strategy(o)->measure(bench, all_of(4), report);
  CHECK(bench.stages == std::set<std::string>{"measure"});
  CHECK(bench.stored == all_of(4));
}

TEST_CASE("an unknown strategy, or halving without a budget, is a usage error") {
  TuneOptions o;
  o.strategy = "genetic";
  CHECK_THROWS_WITH_AS(make_strategy(o), doctest::Contains("not 'genetic'"), Error);
  o.strategy = "halving";
  CHECK_THROWS_WITH_AS(make_strategy(o), doctest::Contains("needs a budget"), Error);
  try {
    make_strategy(o);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::usage);
  }
}

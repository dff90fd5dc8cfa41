#include "tuner/tuner.hpp"

#include <doctest/doctest.h>

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

// Progress of a tuning run: the status line on a terminal, plain lines in a log,
// nothing when quiet, and the ETA of the run from a fake clock.
#include "tuner/progress.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

using namespace autotune;

namespace {

// A Progress writing to a temporary file on a clock the test moves.
struct Harness {
  std::FILE* file = std::tmpfile();
  double clock = 0;
  Progress progress;

  explicit Harness(Progress::Mode mode, int width = 200)
      : progress(
            mode, file, [this] { return clock; }, width) {}
  ~Harness() { std::fclose(file); }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  std::string text() {
    std::fflush(file);
    std::rewind(file);
    std::string out;
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, file)) > 0) {
      out.append(buf, n);
    }
    return out;
  }
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

std::vector<Progress::Planned> unbounded(size_t n) {
  return std::vector<Progress::Planned>(n);
}

std::vector<Progress::Planned> budgeted(size_t n, double budget_s) {
  std::vector<Progress::Planned> plan(n);
  for (auto& p : plan) {
    p.budget_s = budget_s;
  }
  return plan;
}

} // namespace

TEST_CASE("durations read as minutes:seconds, hours when needed, -- when unknown") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(7.4) == "0:07");
  CHECK(format_duration(59.6) == "1:00");
  CHECK(format_duration(754) == "12:34");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(-1) == "--");
}

TEST_CASE("the ETA of an unbounded run is the measured rate times the variants left") {
  Harness h(Progress::Mode::quiet);
  h.progress.start_run("attention", unbounded(3));
  CHECK(h.progress.eta_s() == -1); // nothing measured yet, nothing bounds it
  h.progress.start_problem(0, "B=1", 100);
  CHECK(h.progress.eta_s() == -1);
  h.clock = 10;
  h.progress.measuring("measure", 10, 100, 10);
  // 1 s per variant: 90 left here, and 100 in each of the two problems to come.
  CHECK(h.progress.eta_s() == doctest::Approx(90 + 2 * 100));
  h.clock = 100;
  h.progress.measuring("measure", 100, 100, 100);
  h.progress.finish_problem({false, "x=1", 5.0, 100, 100});
  CHECK(h.progress.eta_s() == doctest::Approx(200));
  SUBCASE("problems the database answers count nothing") {
    std::vector<Progress::Planned> plan = unbounded(3);
    plan[2].cached = true;
    h.progress.start_run("attention", plan);
    h.progress.start_problem(0, "B=1", 100);
    h.clock += 50;
    h.progress.measuring("measure", 50, 100, 50);
    CHECK(h.progress.eta_s() == doctest::Approx(50 + 100));
  }
}

TEST_CASE("the ETA of a budgeted run comes from the budgets, or the rate when it is faster") {
  Harness h(Progress::Mode::quiet);
  h.progress.start_run("attention", budgeted(4, 2.0));
  // Nothing measured: every problem takes its budget.
  CHECK(h.progress.eta_s() == doctest::Approx(8.0));
  h.progress.start_problem(0, "B=1", 200);
  h.clock = 0.5;
  CHECK(h.progress.eta_s() == doctest::Approx(1.5 + 3 * 2.0));
  h.progress.measuring("explore", 10, 200, 10);
  // 0.05 s per variant: 200 variants would take 10 s, so the budget bounds each.
  CHECK(h.progress.eta_s() == doctest::Approx(1.5 + 3 * 2.0));
  h.clock = 3.0; // inputs, reference and re-check took 1 s beyond the budget
  h.progress.finish_problem({false, "x=1", 5.0, 3.0, 60});
  CHECK(h.progress.eta_s() == doctest::Approx(3 * 3.0));
  SUBCASE("a problem with few candidates finishes before its budget") {
    h.progress.start_problem(1, "B=2", 4);
    // rate: 3 s for 60 variants = 0.05 s each; 4 candidates: 0.2 s.
    CHECK(h.progress.eta_s() == doctest::Approx(0.2 + 2 * 0.2));
  }
}

TEST_CASE("plain progress writes a line per problem start and finish, and at most one every "
          "few seconds between them") {
  Harness h(Progress::Mode::plain);
  h.progress.start_run("attention", budgeted(2, 2.0));
  h.progress.start_problem(0, "B=8,H=32,S=2048", 234);
  for (int k = 0; k < 100; ++k) {
    h.clock += 0.1; // 10 s of measuring, an update every 0.1 s
    h.progress.best("block_m=128", 840.0);
    h.progress.measuring("explore", size_t(k), 234, size_t(k));
  }
  h.progress.finish_problem({false, "block_m=128", 840.0, 10.0, 100});
  std::string text = h.text();
  INFO(text);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(text.find("\033") == std::string::npos);
  CHECK(text.find("[1/2] attention B=8,H=32,S=2048: 234 candidates, budget 2.0 s\n") == 0);
  // 10 s between start and finish: one line at 5 s and one at 10 s at most.
  CHECK(count(text, "\n") <= 4);
  CHECK(count(text, "\n") >= 3);
  CHECK(text.find("explore ") != std::string::npos);
  CHECK(text.find("best 840.0 us (block_m=128)") != std::string::npos);
  CHECK(text.find("[1/2] done in 10 s, 100 variants measured: block_m=128 840.0 us; 0:10 "
                  "elapsed, ETA 0:") != std::string::npos);
  SUBCASE("a problem with tuned neighbours says how many of their winners it starts from") {
    h.progress.start_problem(1, "B=4,H=32,S=4096", 234, 3);
    CHECK(h.text().find("[2/2] attention B=4,H=32,S=4096: 234 candidates, budget 2.0 s, "
                        "starting from 3 tuned neighbours' winners\n") != std::string::npos);
  }
  SUBCASE("the op's built-in point is named apart from the neighbours' winners") {
    h.progress.start_problem(1, "B=4,H=32,S=4096", 234, 1, 1);
    CHECK(h.text().find("starting from 1 tuned neighbour's winner and the op's built-in "
                        "point\n") != std::string::npos);
  }
  SUBCASE("a problem that starts from the built-in point only says so") {
    h.progress.start_problem(1, "B=4,H=32,S=4096", 234, 0, 1);
    CHECK(h.text().find("budget 2.0 s, starting from the op's built-in point\n") !=
          std::string::npos);
  }
  SUBCASE("a problem the database answers is one line") {
    size_t before = count(h.text(), "\n");
    std::vector<Progress::Planned> plan(1);
    plan[0].cached = true;
    h.progress.start_run("attention", plan);
    h.progress.start_problem(0, "B=1", 0);
    h.progress.finish_problem({true, "block_m=64", 12.5, 0, 0});
    std::string all = h.text();
    CHECK(count(all, "\n") == before + 1);
    CHECK(all.find("[1/1] attention B=1: stored winner block_m=64 12.50 us\n") !=
          std::string::npos);
  }
}

TEST_CASE("terminal progress redraws one line in place, at most ten times a second, and "
          "clears it at the end") {
  Harness h(Progress::Mode::terminal, 120);
  h.progress.start_run("attention", budgeted(51, 2.0));
  h.progress.start_problem(2, "B=8,Hq=32,Hkv=32,Sq=2048,Sk=2048,D=64,causal=0,dtype=bf16", 234);
  h.progress.best("block_m=128,block_n=64,warps=4,stages=1,swizzle=xor,q=regs,splits=1", 840);
  for (int k = 0; k < 100; ++k) {
    h.clock += 0.01; // 1 s of updates, 100 of them
    h.progress.measuring("explore", size_t(k), 234, size_t(k));
  }
  std::string text = h.text();
  INFO(text);
  CHECK(text.find('\n') == std::string::npos);
  size_t redraws = count(text, "\r\033[K");
  CHECK(redraws >= 10);
  CHECK(redraws <= 13); // the start, a new stage, then at most one per 0.1 s
  // Each redraw fits the width.
  size_t last = text.rfind("\r\033[K");
  std::string line = text.substr(last + 4);
  CHECK(line.size() <= 119);
  // Throttled: the last redraw shows an update of the last 0.1 s, not necessarily the last.
  CHECK(line.find("[3/51] explore 9") == 0);
  CHECK(line.find("/234 | 0:01 elapsed, ETA 1:3") != std::string::npos);
  CHECK(line.find(" | best 840.0 us block_m=128,block_n=64,warps=4,stages=1,swizz... | B=") !=
        std::string::npos);
  CHECK(h.progress.status().find("[3/51] explore 99/234 | 0:01 elapsed, ETA 1:3") == 0);
  SUBCASE("a narrow terminal keeps the counts and the ETA") {
    Harness narrow(Progress::Mode::terminal, 50);
    narrow.progress.start_run("attention", budgeted(51, 2.0));
    narrow.progress.start_problem(2, "B=8,Hq=32", 234);
    narrow.progress.best("block_m=128,block_n=64", 840);
    narrow.clock = 0.7;
    narrow.progress.measuring("explore", 7, 234, 7);
    std::string t = narrow.text();
    std::string last_line = t.substr(t.rfind("\r\033[K") + 4);
    CHECK(last_line.find("[3/51] explore 7/234 | 0:01 elapsed, ETA 1:37") == 0);
    CHECK(last_line.size() == 49);
  }
  h.progress.finish();
  CHECK(h.text().substr(h.text().size() - 4) == "\r\033[K");
  SUBCASE("the status names the stage's share of the problem") {
    h.progress.measuring("final", 1, 4, 57);
    CHECK(h.progress.status().find("[3/51] final 1/4, 57/234 measured | 0:01 elapsed, ETA ") == 0);
    CHECK(h.progress.status().find("| B=8,Hq=32,") != std::string::npos);
  }
  SUBCASE("a message clears the line and stands on its own") {
    h.progress.measuring("explore", 1, 234, 1);
    h.progress.message("worker replaced");
    CHECK(h.text().find("\r\033[Kworker replaced\n") != std::string::npos);
  }
}

TEST_CASE("quiet progress writes nothing") {
  Harness h(Progress::Mode::quiet);
  h.progress.start_run("attention", unbounded(1));
  h.progress.start_problem(0, "B=1", 10);
  h.progress.compiling(5, 10);
  h.progress.measuring("measure", 3, 10, 3);
  h.progress.message("hello");
  h.progress.finish_problem({false, "x=1", 1.0, 1.0, 10});
  h.progress.finish();
  CHECK(h.text().empty());
}

// The tuner's robustness on a GPU: a space with planted bad variants (one that
// does not compile, one that writes out of bounds, one that never ends, one that
// computes the wrong values, one that asks for too much shared memory) mixed with
// good ones. The session must finish, record the right outcome for each, pick a
// good winner and leave a sound database. And: a session killed with SIGKILL
// resumes where it stopped.
#include "cache/database.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"
#include "tuner/progress.hpp"
#include "tuner/tuner.hpp"

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace autotune;
namespace fs = std::filesystem;

namespace {

// y = 2x + 1 over N floats, with planted failures selected by AT_MODE.
constexpr const char* k_fault_kernel = R"(
#if AT_MODE == 2
#error "planted compile failure"
#endif
extern "C" __global__ void __launch_bounds__(AT_THREADS) fault_kernel(const float* x, float* y,
                                                                       long long n) {
  long long i = (long long)blockIdx.x * AT_THREADS + threadIdx.x;
#if AT_MODE == 4
  // Never ends: the clock is opaque to the compiler.
  long long start = clock64();
  while (clock64() >= start) {
  }
#endif
#if AT_MODE == 6
  extern __shared__ float scratch[];
  scratch[threadIdx.x] = 0.0f;
#endif
  if (i < n) {
#if AT_MODE == 3
    y[i + (1ll << 40)] = 2.0f * x[i] + 1.0f; // far outside any allocation
#elif AT_MODE == 5
    y[i] = 2.0f * x[i] + 1.25f;
#else
    y[i] = 2.0f * x[i] + 1.0f;
#endif
  }
}
)";

constexpr const char* k_fault_reference = R"(
extern "C" __global__ void fault_ref(const float* x, float* y, long long n) {
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += 256ll * gridDim.x) {
    y[i] = x[i] * 2.0f + 1.0f;
  }
}
)";

constexpr const char* k_fault_space = R"(
[params]
threads = [128, 256]
mode = ["good", "compile_fail", "oob", "hang", "wrong", "smem"]
[limits]
threads = [32, 1024]
mode = ["good", "compile_fail", "oob", "hang", "wrong", "smem"]
[default]
threads = 128
mode = "good"
)";

int mode_number(const std::string& m) {
  static const std::map<std::string, int> k = {{"good", 0}, {"compile_fail", 2}, {"oob", 3},
                                               {"hang", 4}, {"wrong", 5},        {"smem", 6}};
  return k.at(m);
}

class FaultOp final : public Op {
public:
  const char* name() const override { return "fault_injection"; }
  const char* kernel_name() const override { return "fault_kernel"; }
  const char* template_path() const override { return "test/fault/kernel.cuh"; }
  const char* space_path() const override { return "test/fault/space.toml"; }
  const char* reference_path() const override { return "test/fault/reference.cuh"; }
  std::vector<std::string> default_shapes() const override { return {"N=1000000"}; }
  Problem make_problem(const Fields& shape) const override {
    Problem p;
    p.op = name();
    p.fields = {{"N", std::to_string(parse_int(*find_field(shape, "N"), "N"))}};
    return p;
  }
  Result<bool> check(const Config&, const Problem&, const std::string&) const override {
    return true;
  }
  std::vector<std::string> defines(const Config& c, const Problem&) const override {
    return {"-DAT_THREADS=" + *find_field(c, "threads"),
            "-DAT_MODE=" + std::to_string(mode_number(*find_field(c, "mode")))};
  }
  LaunchGeometry geometry(const Config& c, const Problem& p) const override {
    LaunchGeometry g;
    unsigned t = unsigned(parse_int(*find_field(c, "threads"), "threads"));
    g.block[0] = t;
    g.grid[0] = unsigned((p.get_int("N") + t - 1) / t);
    if (*find_field(c, "mode") == "smem") {
      g.dynamic_smem = 1u << 20; // more than any GPU offers a block
    }
    return g;
  }
  std::vector<TensorSpec> tensors(const Problem& p) const override {
    size_t n = size_t(p.get_int("N"));
    return {{"x", DType::f32, n, false, -1.0f, 1.0f}, {"y", DType::f32, n, true}};
  }
  void pack(const Config&, const Problem& p, const std::vector<CUdeviceptr>& t,
            ArgPack& args) const override {
    args.add(t.at(0));
    args.add(t.at(1));
    args.add((long long)p.get_int("N"));
  }
  std::string reference_kernel(const Problem&) const override { return "fault_ref"; }
  LaunchGeometry reference_geometry(const Problem&) const override {
    LaunchGeometry g;
    g.block[0] = 256;
    g.grid[0] = 1024;
    return g;
  }
  void pack_reference(const Problem& p, const std::vector<CUdeviceptr>& t,
                      const std::vector<CUdeviceptr>& ref, ArgPack& args) const override {
    args.add(t.at(0));
    args.add(ref.at(0));
    args.add((long long)p.get_int("N"));
  }
  double tolerance(const Problem&) const override { return 1e-6; }
  double bytes(const Problem& p) const override { return 8.0 * double(p.get_int("N")); }
};

// Registered at start-up, so the worker processes (this same executable) know it too.
const bool k_registered = [] {
  static FaultOp op;
  register_op(&op);
  register_template("test/fault/kernel.cuh", k_fault_kernel);
  register_template("test/fault/reference.cuh", k_fault_reference);
  register_template("test/fault/space.toml", k_fault_space);
  return true;
}();

fs::path temp_db(const char* tag) {
  return fs::temp_directory_path() /
         (std::string("autotune-") + tag + "-" + std::to_string(::getpid()) + ".db");
}

void remove_db(const fs::path& db) {
  for (const char* suffix : {"", "-wal", "-shm"}) {
    fs::remove(db.string() + suffix);
  }
}

std::string integrity(const fs::path& db) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, nullptr) == SQLITE_OK);
  std::string out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

long long count_rows(const fs::path& db, const char* table) {
  sqlite3* h = nullptr;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(h);
    return 0;
  }
  sqlite3_busy_timeout(h, 2000);
  sqlite3_stmt* st = nullptr;
  long long n = 0;
  std::string sql = std::string("SELECT count(*) FROM ") + table;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return n;
}

// The first column of the first row of `sql`, or NaN.
double query_double(const fs::path& db, const char* sql) {
  sqlite3* h = nullptr;
  double v = std::nan("");
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(h, sql, -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      v = sqlite3_column_double(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(h);
  return v;
}

std::string self_dir() {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(n > 0);
  exe[n] = '\0';
  return fs::path(exe).parent_path().string();
}

// The autotune CLI beside this test binary (.device/) or one level up (build/).
std::string find_cli() {
  for (const char* rel : {"/autotune", "/../autotune"}) {
    std::string p = self_dir() + rel;
    if (fs::exists(p)) {
      return p;
    }
  }
  FAIL("the autotune CLI was not found beside the test binary");
  return {};
}

} // namespace

TEST_CASE("planted failures get their outcomes and a good variant wins") {
  REQUIRE(k_registered);
  fs::path db = temp_db("faults");
  remove_db(db);
  TuneOptions o;
  o.op = "fault_injection";
  o.db_path = db.string();
  o.measure_timeout_s = 2;
  o.strategy = "exhaustive"; // every planted variant measured and stored
  Progress quiet(false);
  TuneReport report = tune(o, quiet);
  REQUIRE(report.problems.size() == 1);
  const ProblemReport& p = report.problems[0];
  std::map<std::string, cache::Outcome> expected = {
      {"good", cache::Outcome::ok},     {"compile_fail", cache::Outcome::compile_fail},
      {"oob", cache::Outcome::fault},   {"hang", cache::Outcome::timeout},
      {"wrong", cache::Outcome::wrong}, {"smem", cache::Outcome::resource}};
  REQUIRE(p.variants.size() == 12);
  for (const auto& v : p.variants) {
    Fields f = parse_fields(v.config, "config");
    const std::string& mode = *find_field(f, "mode");
    CAPTURE(v.config);
    CAPTURE(v.message);
    CHECK(cache::to_string(v.outcome) == std::string(cache::to_string(expected.at(mode))));
    if (mode == "compile_fail") {
      CHECK(v.message.find("planted compile failure") != std::string::npos);
    }
  }
  REQUIRE(p.winner.has_value());
  CHECK(p.variants[*p.winner].config.find("mode=good") != std::string::npos);
  CHECK(p.worker_restarts >= 4); // two faults and two timeouts
  CHECK(integrity(db) == "ok");
  CHECK(count_rows(db, "results") == 12);
  remove_db(db);
}

TEST_CASE("a tuning session killed with SIGKILL resumes where it stopped") {
  fs::path db = temp_db("resume");
  remove_db(db);
  std::string cli = find_cli();
  std::string shape = "B=4,C=1024,L=4096,W=4,dtype=bf16";
  // Exhaustive: every result is stored as it is measured (halving stores only final ones).
  std::vector<std::string> args = {cli,          "--arch",    "auto", "--op",      "causal_conv1d",
                                   "--shape",    shape,       "--db", db.string(), "--quiet",
                                   "--strategy", "exhaustive"};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, cli.c_str(), nullptr, nullptr, argv.data(), environ) == 0);
  // Wait until some results are stored, then kill the session mid-measurement.
  auto start = std::chrono::steady_clock::now();
  while (count_rows(db, "results") < 10 &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(120)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  long long before = count_rows(db, "results");
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(before >= 10);
  CHECK(integrity(db) == "ok");
  CHECK(count_rows(db, "winners") == 0);

  TuneOptions o;
  o.op = "causal_conv1d";
  o.shapes = {shape};
  o.db_path = db.string();
  o.strategy = "exhaustive";
  Progress quiet(false);
  TuneReport report = tune(o, quiet);
  const ProblemReport& p = report.problems.at(0);
  size_t resumed = 0;
  for (const auto& v : p.variants) {
    resumed += v.reused_result ? 1 : 0;
  }
  CHECK(resumed >= size_t(before));
  CHECK(p.compiled == 0); // every cubin was stored by the killed session
  REQUIRE(p.winner.has_value());
  CHECK(integrity(db) == "ok");
  CHECK(count_rows(db, "winners") == 1);
  remove_db(db);
}

TEST_CASE("successive halving within a budget still finds a correct winner") {
  fs::path db = temp_db("halving");
  remove_db(db);
  TuneOptions o;
  o.op = "causal_conv1d";
  o.shapes = {"B=8,C=2048,L=2048,W=4,dtype=bf16"};
  o.db_path = db.string();
  o.budget_s = 2;
  Progress quiet(false);
  auto t0 = std::chrono::steady_clock::now();
  TuneReport report = tune(o, quiet);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ProblemReport& p = report.problems.at(0);
  REQUIRE(p.winner.has_value());
  const VariantReport& w = p.variants[*p.winner];
  CHECK(w.outcome == cache::Outcome::ok);
  CHECK(w.eliminated_in_round == 0);
  CHECK(w.timing.median_us > 0);
  // The winner's full measurement is stored, and it is the one the winner row quotes.
  CHECK(query_double(db, "SELECT r.median_us FROM results r JOIN winners w ON "
                         "r.variant_key = w.variant_key AND r.problem = w.problem") ==
        doctest::Approx(w.timing.median_us));
  MESSAGE("halving: " << p.variants.size() << " candidates, " << seconds << " s, winner "
                      << p.winner_config << " " << p.winner_us << " us");
  remove_db(db);
}

TEST_CASE("successive halving over its budget measures only the best few in full") {
  fs::path db = temp_db("halving_spent");
  remove_db(db);
  TuneOptions o;
  o.op = "causal_conv1d";
  o.shapes = {"B=8,C=2048,L=2048,W=4,dtype=bf16"};
  o.db_path = db.string();
  o.budget_s = 0.01; // spent by the first, cheap round
  Progress quiet(false);
  TuneReport report = tune(o, quiet);
  const ProblemReport& p = report.problems.at(0);
  CHECK(p.budget_exhausted);
  REQUIRE(p.winner.has_value());
  size_t finalists = 0;
  for (const VariantReport& v : p.variants) {
    if (v.outcome == cache::Outcome::ok && v.eliminated_in_round == 0) {
      ++finalists;
    }
  }
  CHECK(finalists >= 1);
  // The best eta of the cheap round, and the seeds (here the op's built-in point for
  // the GPU family), which are always measured in full.
  CHECK(finalists <= size_t(k_halving_eta) + p.transferred_from.size());
  // Only the finalists' full measurements are stored as timings.
  CHECK(query_double(db, "SELECT COUNT(*) FROM results WHERE outcome = 'OK'") ==
        doctest::Approx(double(finalists)));
  CHECK(query_double(db, "SELECT r.median_us FROM results r JOIN winners w ON "
                         "r.variant_key = w.variant_key AND r.problem = w.problem") ==
        doctest::Approx(p.variants[*p.winner].timing.median_us));
  remove_db(db);
}

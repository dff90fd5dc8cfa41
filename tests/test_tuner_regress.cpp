// `autotune regress` on the committed fixtures: exit codes, the listing of
// missing entries, JUnit and Markdown reports, and --retime without a GPU.
#include "runtime/cuda/driver.hpp"
#include "tests/cli_support.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

namespace fs = std::filesystem;

using namespace autotune::testing;

namespace {

const fs::path k_fixtures = fs::path(AUTOTUNE_SOURCE_DIR) / "tests" / "fixtures";

std::string fixture(const std::string& name) {
  return (k_fixtures / name).string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class TempDir {
public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    m_dir = fs::temp_directory_path() /
            ("autotune_test_regress_" + std::to_string(random()) + "_" + std::to_string(++counter));
    fs::create_directories(m_dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_dir, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& leaf) const { return (m_dir / leaf).string(); }

private:
  fs::path m_dir;
};

} // namespace

TEST_CASE("regress on the clean fixture exits 0 and lists the missing entries") {
  std::string before = slurp(fixture("regress_baseline.db"));
  Run r = run("regress --baseline " + fixture("regress_baseline.db") + " --current " +
              fixture("regress_clean.db"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "0 regressions"));
  CHECK(has(r.output, "1 faster"));
  CHECK(has(r.output, "missing in current: causal_conv1d B=2,C=1024,L=512"));
  CHECK(has(r.output, "missing in baseline: causal_conv1d B=16,C=4096,L=1024"));
  CHECK(slurp(fixture("regress_baseline.db")) == before);
}

TEST_CASE("regress on the planted fixture exits 1 and reports it in JUnit and Markdown") {
  TempDir dir;
  std::string junit = dir.file("regress.xml");
  std::string md = dir.file("regress.md");
  Run r = run("regress --baseline " + fixture("regress_baseline.db") + " --current " +
              fixture("regress_planted.db") + " --junit " + junit + " --markdown " + md);
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(has(r.output, "1 regressions"));
  CHECK(has(r.output, "REGRESSION: causal_conv1d B=1,C=8192,L=4096"));
  CHECK(has(r.output, "slower by 30.0%"));

  std::string xml = slurp(junit);
  CHECK(has(xml, "<testsuite name=\"autotune.regress\" tests=\"4\" failures=\"1\""));
  CHECK(has(xml, "<failure message=\"slower by 30.0%"));
  std::string markdown = slurp(md);
  CHECK(has(markdown, "| REGRESSION | causal_conv1d | `B=1,C=8192,L=4096"));
  CHECK(has(markdown, "**1 regressions**"));

  SUBCASE("a threshold above the change passes it") {
    CHECK(run("regress --baseline " + fixture("regress_baseline.db") + " --current " +
              fixture("regress_planted.db") + " --threshold 40")
              .code == 0);
  }
  SUBCASE("a selector that leaves the planted entry out passes") {
    CHECK(run("regress --baseline " + fixture("regress_baseline.db") + " --current " +
              fixture("regress_planted.db") + " --shape x=fp16")
              .code == 0);
  }
}

TEST_CASE("regress compares a schema version 1 baseline without changing it") {
  std::string before = slurp(fixture("schema_v1.db"));
  Run r = run("regress --baseline " + fixture("schema_v1.db") + " --current " +
              fixture("regress_clean.db"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r.output, "missing in current: causal_conv1d B=8,C=4096,L=2048,W=4 on"));
  CHECK(slurp(fixture("schema_v1.db")) == before);
}

TEST_CASE("regress command-line errors exit 2") {
  CHECK(run("regress").code == 2);
  CHECK(run("regress --current " + fixture("regress_clean.db")).code == 2);
  CHECK(run("regress --baseline " + fixture("regress_baseline.db")).code == 2);
  CHECK(run("regress --baseline a.db --current b.db --retime").code == 2);
  CHECK(run("regress --baseline " + fixture("regress_baseline.db") + " --current " +
            fixture("regress_clean.db") + " --threshold -3")
            .code == 2);
  Run r = run("regress --baseline /nonexistent/a.db --current " + fixture("regress_clean.db"));
  CHECK(r.code == 2);
  CHECK(has(r.output, "/nonexistent/a.db"));
}

TEST_CASE("regress --retime without a GPU exits 3 with a clear error") {
  std::string why;
  if (autotune::cuda::gpu_available(&why)) {
    MESSAGE("skipped: a GPU driver is present (the GPU tests cover --retime)");
    return;
  }
  Run r = run("regress --retime --baseline " + fixture("regress_baseline.db"));
  INFO(r.output);
  CHECK(r.code == 3);
  CHECK(has(r.output, "needs a GPU"));
}

// Issue 18: --junit and --markdown overwrote any existing file, a database included.
TEST_CASE("regress reports never overwrite a file without --force, nor an input database") {
  TempDir dir;
  const std::string compare = "regress --baseline " + fixture("regress_baseline.db") +
                              " --current " + fixture("regress_planted.db");
  std::string existing = dir.file("existing.db");
  fs::copy_file(fixture("regress_clean.db"), existing);
  std::string before = slurp(existing);

  for (const char* option : {"--junit", "--markdown"}) {
    CAPTURE(option);
    Run r = run(compare + " " + option + " " + existing);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, existing + " exists; add --force to overwrite it"));
    CHECK_FALSE(has(r.output, "REGRESSION")); // refused before comparing anything
    CHECK(slurp(existing) == before);

    r = run(compare + " " + option + " " + fixture("regress_baseline.db") + " --force");
    CHECK(r.code == 2);
    CHECK(has(r.output, "is an input database"));
    r = run(compare + " " + option + " " + dir.file("."));
    CHECK(r.code == 2);
    CHECK(has(r.output, "is a directory"));
    r = run(compare + " " + option + " ''");
    CHECK(r.code == 2);
  }
  CHECK(run(compare + " --junit " + dir.file("same") + " --markdown " + dir.file("same")).code ==
        2);
  CHECK_FALSE(fs::exists(dir.file("same")));

  // --force replaces the file, whole.
  Run r = run(compare + " --junit " + existing + " --force");
  CHECK(r.code == 1);
  CHECK(has(slurp(existing), "<testsuite name=\"autotune.regress\""));
  size_t files = 0;
  for ([[maybe_unused]] const fs::directory_entry& e : fs::directory_iterator(dir.file("."))) {
    ++files;
  }
  CHECK(files == 1); // no staging file left behind
  CHECK(slurp(fixture("regress_baseline.db")).rfind("SQLite format 3", 0) == 0);
}

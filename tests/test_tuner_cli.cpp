// The CLI's contracts, run as a user would: exit codes and messages for bad input,
// compile-only without a GPU, list output.
#include "cache/database.hpp"
#include "runtime/cuda/driver.hpp"
#include "tests/cli_support.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

using namespace autotune::testing;

namespace {

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() /
               ("autotune-cli-" + std::to_string(::getpid()) + "-" + std::to_string(rand()));
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

} // namespace

TEST_CASE("bad command lines exit 2 with a message naming the problem") {
  auto r = run("--arch sm_90a --op conv2d --compile-only");
  CHECK(r.code == 2);
  CHECK(r.output.find("unknown op 'conv2d'") != std::string::npos);

  r = run("--arch sm_90a --op causal_conv1d --compile-only --shape \"B=8,C\"");
  CHECK(r.code == 2);
  CHECK(r.output.find("not of the form key=value") != std::string::npos);

  r = run("--arch sm_90a --op causal_conv1d --compile-only --shape \"B=8,C=64,L=128,W=7\"");
  CHECK(r.code == 2);
  CHECK(r.output.find("W=7 is not supported") != std::string::npos);

  r = run("--op causal_conv1d");
  CHECK(r.code == 2);
  CHECK(r.output.find("--arch is required") != std::string::npos);

  r = run("--arch sm_90a --op causal_conv1d --frobnicate");
  CHECK(r.code == 2);
  CHECK(r.output.find("unknown option '--frobnicate'") != std::string::npos);
}

TEST_CASE("a TOML typo in a space file is reported with file and line, exit 2") {
  fs::path dir = temp_dir();
  fs::path space = dir / "space.toml";
  std::ofstream(space) << "[params]\nthreads = [128\n";
  auto r = run("--arch sm_90a --op causal_conv1d --compile-only --space " + space.string() +
               " --db " + (dir / "t.db").string());
  CHECK(r.code == 2);
  CHECK(r.output.find(space.string() + ":2:") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "t.db"));
  fs::remove_all(dir);
}

TEST_CASE("an unwritable database path exits 2 and names the path") {
  fs::path dir = temp_dir();
  fs::path blocker = dir / "file";
  std::ofstream(blocker) << "not a directory";
  std::string db = (blocker / "sub" / "tuning.db").string();
  auto r = run("--arch sm_90a --op causal_conv1d --compile-only --param threads=128 --param "
               "vec=8 --param items=2 --shape \"B=1,C=64,L=256\" --db " + db);
  CHECK(r.code == 2);
  CHECK(r.output.find(db) != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a corrupt database is refused without being changed") {
  fs::path dir = temp_dir();
  fs::path db = dir / "tuning.db";
  std::ofstream(db, std::ios::binary) << std::string(3000, '\x5a');
  std::string before = slurp(db);
  auto r = run("--arch sm_90a --op causal_conv1d --compile-only --param threads=128 "
               "--shape \"B=1,C=64,L=256\" --db " + db.string());
  CHECK(r.code == 2);
  CHECK(r.output.find(db.string()) != std::string::npos);
  CHECK(slurp(db) == before);
  fs::remove_all(dir);
}

TEST_CASE("compile-only builds every valid variant without a GPU and a rerun compiles nothing") {
  fs::path dir = temp_dir();
  std::string db = (dir / "tuning.db").string();
  std::string args = "--arch sm_90a --op causal_conv1d --compile-only --shape "
                     "\"B=8,C=4096,L=2048,W=4,dtype=bf16,silu=1\" --quiet --json --db " + db;
  auto r = run(args);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("\"compile_failures\":0") != std::string::npos);
  CHECK(r.output.find("\"cubins_reused\":0") != std::string::npos);
  auto again = run(args);
  REQUIRE(again.code == 0);
  CHECK(again.output.find("\"compiled\":0") != std::string::npos);
  autotune::cache::Database d(db, autotune::cache::Database::Mode::read_only);
  CHECK(d.schema_version() == autotune::cache::k_schema_version);
  fs::remove_all(dir);
}

TEST_CASE("list prints the valid variants as JSON lines") {
  auto r = run("list --op causal_conv1d --arch sm_90 --shape \"B=8,C=4096,L=2048\"");
  REQUIRE(r.code == 0);
  size_t lines = 0;
  size_t pos = 0;
  while ((pos = r.output.find("{\"op\":\"causal_conv1d\"", pos)) != std::string::npos) {
    ++lines;
    ++pos;
  }
  CHECK(lines > 50);
  CHECK(r.output.find("\"variant\":\"threads=128,vec=8,items=2,cpb=1,load=direct\"") !=
        std::string::npos);
  CHECK(r.output.find("\"params\":{\"threads\":128,") != std::string::npos);
}

TEST_CASE("tuning without a GPU exits 3 with a clear message") {
  if (autotune::cuda::gpu_available()) {
    MESSAGE("a GPU is present: the no-GPU exit code is not exercised here");
    return;
  }
  auto r = run("--arch auto --op causal_conv1d --shape \"B=1,C=64,L=256\"");
  CHECK(r.code == 3);
  CHECK(r.output.find("no GPU") != std::string::npos);
}

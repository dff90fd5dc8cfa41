// Policy tune without a GPU (runtime/dispatch/tune.*): the options a runtime refuses
// before touching the GPU, the command line the default tuner runs, and the errors of
// a tune that fails (fake CLIs: shell scripts in a temporary directory).
#include "cache/database.hpp"
#include "env_support.hpp"
#include "runtime/base/error.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/dispatch/tune.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

using namespace autotune;
namespace fs = std::filesystem;

using autotune::testing::ScopedEnv;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "autotune-tune-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  // An executable shell script `name` with `body` after its #! line.
  std::string script(const std::string& name, const std::string& body) const {
    fs::path p = path / name;
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(p, fs::perms::owner_all);
    return p.string();
  }
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* const k_problem = "B=2,C=256,L=1000,W=4,x=bf16,w=bf16,bias=1,silu=1,init_states=0,"
                              "final_states=0,layout=bcl";

TuneRequest request_in(const TempDir& dir) {
  TuneRequest r;
  r.op = "causal_conv1d";
  r.problem = k_problem;
  r.database = (dir.path / "tuning.db").string();
  r.budget_s = 2;
  return r;
}

} // namespace

TEST_CASE("the default tuner runs the CLI with the documented command line, without a shell") {
  TempDir dir;
  const fs::path args = dir.path / "args";
  // One argument per line, so that a shell splitting the problem key would show.
  const std::string cli = dir.script(
      "autotune", "printf '%s\\n' \"$@\" > '" + args.string() +
                      "'\necho \"CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}\" >> '" +
                      args.string() + "'\necho 'a result table nobody should see'");
  TuneRequest r = request_in(dir);
  const std::string expected_args = "--arch\nauto\n--op\ncausal_conv1d\n--shape\n" +
                                    std::string(k_problem) + "\n--db\n" + r.database +
                                    "\n--budget-s\n";

  SUBCASE("device 0 keeps the environment as it is") {
    ScopedEnv visible("CUDA_VISIBLE_DEVICES", nullptr);
    run_tuner_cli(r, cli);
    CHECK(read(args) == expected_args + "2\n--quiet\nCUDA_VISIBLE_DEVICES=unset\n");
  }
  SUBCASE("a fractional budget is passed as it is") {
    r.budget_s = 0.5;
    run_tuner_cli(r, cli);
    CHECK(read(args).find("\n--budget-s\n0.5\n--quiet\n") != std::string::npos);
  }
  SUBCASE("another GPU is the child's only GPU") {
    r.device = 1;
    SUBCASE("counted from CUDA_VISIBLE_DEVICES when it is set") {
      ScopedEnv visible("CUDA_VISIBLE_DEVICES", "3, 5");
      run_tuner_cli(r, cli);
      CHECK(read(args).find("CUDA_VISIBLE_DEVICES=5\n") != std::string::npos);
    }
    SUBCASE("the ordinal itself otherwise") {
      ScopedEnv visible("CUDA_VISIBLE_DEVICES", nullptr);
      run_tuner_cli(r, cli);
      CHECK(read(args).find("CUDA_VISIBLE_DEVICES=1\n") != std::string::npos);
    }
    SUBCASE("a GPU outside CUDA_VISIBLE_DEVICES is refused") {
      ScopedEnv visible("CUDA_VISIBLE_DEVICES", "3");
      r.device = 2;
      CHECK_THROWS_WITH_AS(run_tuner_cli(r, cli),
                           doctest::Contains("GPU 2 is not among CUDA_VISIBLE_DEVICES=3"), Error);
    }
  }
  SUBCASE("AUTOTUNE_CLI finds it when no path is given") {
    ScopedEnv env("AUTOTUNE_CLI", cli.c_str());
    run_tuner_cli(r);
    CHECK(read(args).rfind(expected_args, 0) == 0);
  }
}

TEST_CASE("a tuner CLI that fails makes the tune fail with its command, status and output") {
  TempDir dir;
  TuneRequest r = request_in(dir);
  SUBCASE("a non-zero exit") {
    const std::string cli =
        dir.script("autotune", "echo 'progress line'\necho 'error: no GPU found' >&2\nexit 3");
    try {
      run_tuner_cli(r, cli);
      FAIL("a failing CLI must throw");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(e.kind() == ErrorKind::not_tuned);
      CHECK(what.find(cli + " --arch auto --op causal_conv1d --shape B=2,C=256") !=
            std::string::npos);
      CHECK(what.find("exited with status 3 (no GPU or driver)") != std::string::npos);
      CHECK(what.find("error: no GPU found") != std::string::npos);
    }
  }
  SUBCASE("exit 1, through tune_problem") {
    const std::string cli = dir.script("autotune", "exit 1");
    Tuner tuner = [&](const TuneRequest& q) { run_tuner_cli(q, cli); };
    CHECK_THROWS_WITH_AS(tune_problem(tuner, r, "device", "thash", "nvrtc"),
                         doctest::Contains("exited with status 1"), Error);
  }
  SUBCASE("killed by a signal") {
    const std::string cli = dir.script("autotune", "kill -9 $$");
    CHECK_THROWS_WITH_AS(run_tuner_cli(r, cli), doctest::Contains("was killed by signal 9"), Error);
  }
  SUBCASE("a path that is not executable") {
    const fs::path plain = dir.path / "plain";
    std::ofstream(plain) << "not a program\n";
    CHECK_THROWS_WITH_AS(
        run_tuner_cli(r, plain.string()),
        doctest::Contains(("tuner_path " + plain.string() + " is not an executable").c_str()),
        Error);
  }
  SUBCASE("AUTOTUNE_CLI naming nothing") {
    const std::string missing = (dir.path / "missing").string();
    ScopedEnv env("AUTOTUNE_CLI", missing.c_str());
    CHECK_THROWS_WITH_AS(find_tuner_cli(), doctest::Contains(("AUTOTUNE_CLI=" + missing).c_str()),
                         Error);
  }
  SUBCASE("no CLI anywhere: the error names where it looked") {
    ScopedEnv env("AUTOTUNE_CLI", nullptr);
    // The test binary lies in build/tests: no `autotune` beside it, in build/bin or bin.
    CHECK_THROWS_WITH_AS(find_tuner_cli(),
                         doctest::Contains("the autotune CLI was not found (tuner_path is empty, "
                                           "AUTOTUNE_CLI is unset, and there is no executable at"),
                         Error);
  }
}

TEST_CASE("a tuner that succeeds but stores no winner is an error, never a fallback") {
  TempDir dir;
  TuneRequest r = request_in(dir);
  const std::string cli = dir.script("autotune", "exit 0");
  Tuner tuner = [&](const TuneRequest& q) { run_tuner_cli(q, cli); };
  SUBCASE("no database at all") {
    CHECK_THROWS_WITH_AS(tune_problem(tuner, r, "device", "thash", "nvrtc"),
                         doctest::Contains("the tuner finished, but no winner is stored for "
                                           "causal_conv1d B=2,C=256"),
                         Error);
  }
  SUBCASE("a database without this problem's winner") {
    { cache::Database created(r.database, cache::Database::Mode::read_write); }
    try {
      tune_problem(tuner, r, "device", "thash", "nvrtc");
      FAIL("no winner stored must throw");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::not_tuned);
      CHECK(std::string(e.what()).find("no winner is stored for causal_conv1d " +
                                       std::string(k_problem) + " in " + r.database) !=
            std::string::npos);
    }
  }
  SUBCASE("a hook that throws something else is reported as a failed tune") {
    Tuner broken = [](const TuneRequest&) { throw std::runtime_error("out of disk"); };
    try {
      tune_problem(broken, r, "device", "thash", "nvrtc");
      FAIL("a throwing hook must throw");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::not_tuned);
      CHECK(std::string(e.what()) ==
            "policy tune of causal_conv1d " + std::string(k_problem) + " failed: out of disk");
    }
  }
}

TEST_CASE("policy tune's options are refused before the GPU is touched") {
  TempDir dir;
  RuntimeOptions o;
  o.policy = Policy::tune;
  o.database = (dir.path / "tuning.db").string();
  o.tuner = [](const TuneRequest&) {};
  std::string path;

  SUBCASE("a budget that is not a positive number of seconds up to a week") {
    for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e9}) {
      o.tune_budget_s = bad;
      CHECK_THROWS_WITH_AS(check_tune_options(o, path), doctest::Contains("tune_budget_s must be"),
                           Error);
      CHECK_THROWS_WITH_AS(Runtime{o}, doctest::Contains("tune_budget_s must be"), Error);
    }
  }
  SUBCASE("no database path: nowhere to store the winner") {
    o.database.clear();
    ScopedEnv db("AUTOTUNE_DB", nullptr), xdg("XDG_CACHE_HOME", nullptr), home("HOME", nullptr);
    CHECK_THROWS_WITH_AS(Runtime{o},
                         doctest::Contains("policy tune stores each winner in the runtime's "
                                           "database, and this runtime has none"),
                         Error);
  }
  SUBCASE("a database path that is a directory") {
    o.database = dir.path.string();
    CHECK_THROWS_WITH_AS(Runtime{o}, doctest::Contains("is a directory"), Error);
  }
  SUBCASE("no CLI for the default tuner") {
    o.tuner = nullptr;
    o.tuner_path = (dir.path / "no-such-autotune").string();
    CHECK_THROWS_WITH_AS(Runtime{o}, doctest::Contains(("tuner_path " + o.tuner_path).c_str()),
                         Error);
  }
  SUBCASE("good options pass, and the database path is made absolute") {
    o.database = "relative.db";
    check_tune_options(o, path);
    CHECK(path == (fs::current_path() / "relative.db").string());
  }
}

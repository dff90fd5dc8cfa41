// The CLI's contracts, run as a user would: exit codes and messages for bad input,
// compile-only without a GPU, list output.
#include "cache/database.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/nvrtc.hpp"
#include "tests/cli_support.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

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

TEST_CASE("search options: halving by default, exhaustive without a budget, transfer in range") {
  auto r = run("--help");
  CHECK(r.code == 0);
  CHECK(has(r.output, "halving (default)"));
  CHECK(has(r.output, "--transfer K"));
  r = run("--op causal_conv1d --arch auto --strategy exhaustive --budget-s 3");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--budget-s bounds the halving search"));
  for (const char* bad : {"-1", "65", "x"}) {
    r = run(std::string("--op causal_conv1d --arch auto --transfer ") + bad);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, "--transfer"));
  }
  r = run("--op causal_conv1d --arch auto --strategy greedy");
  CHECK(r.code == 2);
  CHECK(has(r.output, "--strategy must be halving, exhaustive or random, not 'greedy'"));
  // Accepted (then stopped by the missing GPU): a budget alone, no transfer, halving alone.
  for (const char* ok : {"--budget-s 0.5", "--transfer 0", "--strategy halving",
                         "--strategy random --samples 4 --budget-s 1"}) {
    r = run(std::string("--op causal_conv1d --arch auto ") + ok, "CUDA_VISIBLE_DEVICES=");
    INFO(ok);
    INFO(r.output);
    CHECK(r.code == 3);
  }
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
               "vec=8 --param items=2 --shape \"B=1,C=64,L=256\" --db " +
               db);
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
               "--shape \"B=1,C=64,L=256\" --db " +
               db.string());
  CHECK(r.code == 2);
  CHECK(r.output.find(db.string()) != std::string::npos);
  CHECK(slurp(db) == before);
  fs::remove_all(dir);
}

TEST_CASE("compile-only builds every valid variant without a GPU and a rerun compiles nothing") {
  fs::path dir = temp_dir();
  std::string db = (dir / "tuning.db").string();
  std::string args = "--arch sm_90a --op causal_conv1d --compile-only --shape "
                     "\"B=8,C=4096,L=2048,W=4,dtype=bf16,silu=1\" --quiet --json --db " +
                     db;
  auto r = run(args);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("\"compile_failures\":0") != std::string::npos);
  CHECK(r.output.find("\"cubins_reused\":0") != std::string::npos);
  CHECK(r.output.find("\"phases_s\":{\"select\":") != std::string::npos);
  CHECK(r.output.find("\"worker_s\":{\"context\":0.0000,") != std::string::npos); // no worker
  auto again = run(args);
  REQUIRE(again.code == 0);
  CHECK(again.output.find("\"compiled\":0") != std::string::npos);
  autotune::cache::Database d(db, autotune::cache::Database::Mode::read_only);
  CHECK(d.schema_version() == autotune::cache::k_schema_version);
  fs::remove_all(dir);
}

TEST_CASE("a restriction that leaves no variant for a problem says why, in the table and "
          "the JSON") {
  fs::path dir = temp_dir();
  const std::string args =
      "--arch sm_90a --op attention --compile-only --shape \"B=4,H=16,S=4096,D=128,causal=1\" "
      "--param family=wgmma_multicast --param warps=4 --param swizzle=xor --param q=smem "
      "--param splits=1 --quiet --db " +
      (dir / "tuning.db").string();
  auto r = run(args);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("no variant of the space runs this problem") != std::string::npos);
  CHECK(r.output.find("not for causal or windowed attention") != std::string::npos);
  auto j = run(args + " --json");
  INFO(j.output);
  REQUIRE(j.code == 0);
  CHECK(j.output.find("\"why_none\":[{\"reason\":") != std::string::npos);
  // A problem with variants to build reports none.
  auto ok = run("--arch sm_90a --op attention --compile-only --shape "
                "\"B=4,H=16,S=4096,D=128,causal=0\" --param family=wgmma_multicast --param "
                "block_m=128 --param block_n=128 --param stages=2 --quiet --json --db " +
                (dir / "tuning.db").string());
  INFO(ok.output);
  REQUIRE(ok.code == 0);
  CHECK(ok.output.find("\"why_none\"") == std::string::npos);
  CHECK(ok.output.find("\"compiled\":1") != std::string::npos);
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

namespace {

// Quotes one argument for `sh -c` (popen).
std::string quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

const char* k_small_conv_space =
    "[params]\nthreads = [64, 128]\nvec = [8]\nitems = [1, 2]\ncpb = [1, 2]\nload = [\"direct\"]\n"
    "[default]\nthreads = 128\nvec = 8\nitems = 2\ncpb = 1\nload = \"direct\"\n";

} // namespace

// Issue 18: each of these crashed `autotune list` with SIGFPE, or was compiled with a
// value narrowed to int. Now each is a configuration error (exit 2) naming the
// parameter and its limits.
TEST_CASE("tuning parameters outside their limits exit 2 naming the parameter, never crash") {
  struct Case {
    const char* args;
    const char* expect;
  };
  const Case cases[] = {
      {"list --op causal_conv1d --arch sm_90 --param cpb=0", "cpb must be an integer in [1, 1024]"},
      {"list --op causal_conv1d --arch sm_90 --param items=0",
       "items must be an integer in [1, 64]"},
      {"list --op attention --arch sm_90 --param block_m=0",
       "block_m must be an integer in [16, 512]"},
      {"list --op causal_conv1d --arch sm_90 --param threads=4294967424",
       "threads=4294967424 is out of range"},
      {"list --op causal_conv1d --arch sm_90 --param cpb=-1", "cpb=-1 is out of range"},
      {"list --op causal_conv1d --arch sm_90 --param threads=abc", "threads=abc is not an integer"},
      {"list --op selective_scan --arch sm_90 --param yred=9", "yred must be an integer in [0, 2]"},
      {"--arch sm_90a --op causal_conv1d --compile-only --param cpb=0", "cpb=0 is out of range"},
  };
  for (const Case& c : cases) {
    Run r = run(c.args);
    INFO(c.args);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, "configuration error"));
    CHECK(has(r.output, c.expect));
  }
}

TEST_CASE("a --space file with zeros exits 2 naming its file and line, and writes nothing") {
  fs::path dir = temp_dir();
  std::string db = (dir / "t.db").string();
  struct Case {
    const char* op;
    std::string text;
    const char* expect;
  };
  std::string conv = k_small_conv_space;
  std::string cpb0 = conv;
  cpb0.replace(cpb0.find("cpb = [1, 2]"), 12, "cpb = [0, 2]");
  std::string items0 = conv;
  items0.replace(items0.find("items = [1, 2]"), 14, "items = [0]");
  const Case cases[] = {
      {"causal_conv1d", cpb0, ":5:7: [params] cpb=0 is out of range"},
      {"causal_conv1d", items0, ":4:9: [params] items=0 is out of range"},
      {"attention",
       "[params]\nblock_m = [0, 64]\nblock_n = [64]\nwarps = [4]\nstages = [1]\nswizzle = "
       "[\"xor\"]\nq = [\"smem\"]\n[default]\nblock_m = 64\nblock_n = 64\nwarps = 4\nstages = "
       "1\nswizzle = \"xor\"\nq = \"smem\"\n",
       ":2:11: [params] block_m=0 is out of range"},
  };
  for (const Case& c : cases) {
    fs::path space = dir / "space.toml";
    std::ofstream(space) << c.text;
    for (const char* command : {"list --arch sm_90", "--arch sm_90a --compile-only"}) {
      std::string args =
          std::string(command) + " --op " + c.op + " --space " + space.string() + " --db " + db;
      Run r = run(args);
      INFO(args);
      INFO(r.output);
      CHECK(r.code == 2);
      CHECK(has(r.output, space.string() + c.expect));
    }
  }
  CHECK_FALSE(fs::exists(db));
  fs::remove_all(dir);
}

TEST_CASE("accepted nonsense from issue 18 is refused with exit 2 and a message") {
  fs::path dir = temp_dir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  };
  std::string huge = "[params]\n";
  std::string huge_default = "[default]\n";
  for (int i = 0; i < 30; ++i) {
    // Appended, not `"p" + std::to_string(i)`: GCC 12 -O2 reports a false
    // -Wrestrict on that form.
    huge.append("p").append(std::to_string(i)).append(" = [1, 2, 3, 4]\n");
    huge_default.append("p").append(std::to_string(i)).append(" = 1\n");
  }
  struct Case {
    std::string args;
    std::string expect;
  };
  const std::string list = "list --op causal_conv1d --arch sm_90 ";
  const std::string tune = "--op causal_conv1d --arch sm_90a --compile-only ";
  std::vector<Case> cases = {
      {"list --op causal_conv1d --arch sm_abc", "'sm_abc' is not 'auto' or an sm_XY[a] target"},
      {"list --op causal_conv1d --arch sm_75", "need sm_80 or newer"},
      {tune + "--jobs 4294967297", "--jobs: 4294967297 is out of range"},
      {tune + "--jobs 0", "--jobs: 0 is out of range"},
      {"--op causal_conv1d --arch auto --strategy random --samples 4294967297",
       "--samples: 4294967297 is out of range"},
      {"--op causal_conv1d --arch auto --timeout-s inf", "--timeout-s: expected a positive number"},
      {"--op causal_conv1d --arch auto --timeout-s nan", "--timeout-s: expected a positive number"},
      {"--op causal_conv1d --arch auto --budget-s 1e308", "more than a week"},
      {"--op causal_conv1d --arch auto --top -1", "--top: -1 is out of range"},
      {"--op causal_conv1d --arch auto --seed -5", "--seed: -5 is out of range"},
      {tune + "--db ''", "--db needs a path, got an empty string"},
      {tune + "--space ''", "--space needs a path"},
      // A forgotten value: the next option is not taken for it (no file "--param").
      {tune + "--db --param threads=128", "--db needs a value, not the option --param"},
      {"report --db --json", "autotune report: --db needs a value, not the option --json"},
      {"cache ls --db --json", "--db needs a value, not the option --json"},
      {"regress --baseline --current b.db", "--baseline needs a value, not the option --current"},
      {list + "--shapes " + write("empty.toml", "[causal_conv1d]\nshapes = []\n"),
       "empty.toml:2:10: [causal_conv1d] shapes = [] lists no shape"},
      {list + "--shapes " +
           write("sub.toml", "[causal_conv1d]\nshapes = [{B = 1, C = 64, L = 128}]\n"
                             "[causal_conv1d.extra]\nW = 3\n"),
       "sub.toml:3:1: [causal_conv1d] extra is a list or table"},
      {list + "--shapes " + write("op.toml", "[causal_conv]\nshapes = [{B = 1}]\n"),
       "op.toml:1:1: 'causal_conv' is not an op's table"},
      {list + "--shapes " +
           write("type.toml",
                 "[causal_conv1d]\ndtype = 1.5\nshapes = [{B = 1, C = 64, L = 128}]\n"),
       "type.toml:2:9: [causal_conv1d] dtype must be an integer, a string or a boolean"},
      {list + "--shapes " +
           write("field.toml", "[causal_conv1d]\nshapes = [{B = 1, C = 64, L = 1.5}]\n"),
       "field.toml:2:31: shape field L must be an integer"},
      {list + "--shapes " + dir.string(), dir.string() + " is a directory, not a TOML file"},
      {list + "--shapes " + (dir / "missing.toml").string(), "missing.toml does not exist"},
      {list + "--space " + write("huge.toml", huge + huge_default),
       "huge.toml has more than 4194304 combinations"},
  };
  if (autotune::cuda::nvrtc_available()) {
    cases.push_back({"list --op causal_conv1d --arch sm_999", "cannot target sm_999"});
    cases.push_back({tune + "--arch sm_999", "cannot target sm_999"});
  }
  for (const Case& c : cases) {
    Run r = run(c.args);
    INFO(c.args);
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(has(r.output, c.expect));
  }
  fs::remove_all(dir);
}

// The command line and the --shape, --shapes and --space parsers, fed random and
// mutated input: every run exits 0, 1, 2 or 3 with a message (never a signal,
// never an internal error) and leaves every input file as it was.
TEST_CASE("fuzz: the command line exits 0-3 with a message and never changes an input") {
  fs::path dir = temp_dir();
  const fs::path fixtures = fs::path(AUTOTUNE_SOURCE_DIR) / "tests" / "fixtures";
  auto path = [&](const std::string& leaf) { return (dir / leaf).string(); };
  auto write = [&](const std::string& leaf, const std::string& text) {
    std::ofstream(dir / leaf, std::ios::binary) << text;
    return path(leaf);
  };
  const std::string conv_space = write("conv.toml", k_small_conv_space);
  const std::string scan_space =
      write("scan.toml", "[params]\nthreads = [32, 64]\nitems = [16]\ncpb = [1, 2]\nnsplit = [1]\n"
                         "scan = [\"shfl\"]\nvec = [8]\npoly = [0]\nminblocks = [1]\n[default]\n"
                         "threads = 32\nitems = 16\ncpb = 1\nnsplit = 1\nscan = \"shfl\"\nvec = 8\n"
                         "poly = 0\nminblocks = 1\n");
  const std::string shapes = write(
      "shapes.toml", "[causal_conv1d]\ndtype = \"bf16\"\nshapes = [{B = 1, C = 64, L = 256}, "
                     "{B = 2, C = 128, L = 512, W = 3}]\n[attention]\nshapes = [{B = 1, H = 2, "
                     "S = 128, D = 64}]\n[selective_scan]\nshapes = [{B = 1, D = 64, L = 256, "
                     "N = 16}]\n");
  fs::copy_file(fixtures / "regress_baseline.db", dir / "base.db");
  fs::copy_file(fixtures / "regress_clean.db", dir / "clean.db");
  const std::vector<std::string> inputs = {conv_space, scan_space, shapes, path("base.db"),
                                           path("clean.db")};
  std::vector<std::string> contents;
  for (const std::string& input : inputs) {
    contents.push_back(slurp(input));
  }

  // AUTOTUNE_FUZZ_SEED=N explores other inputs; CI runs the fixed default.
  const char* seed_text = std::getenv("AUTOTUNE_FUZZ_SEED");
  const unsigned seed = seed_text ? unsigned(std::strtoul(seed_text, nullptr, 10)) : 18u;
  std::mt19937 random(seed);
  auto pick = [&](const std::vector<std::string>& pool) { return pool[random() % pool.size()]; };
  auto mutate = [&](std::string text) {
    const std::vector<std::string> tokens = {
        "0", "-1", "4294967424", "1.5", "[",        "]",      "{",    "}",
        ",", "=",  "\n",         "\"",  "[params]", "shapes", "true", "99999999999999999999"};
    for (int e = int(random() % 4); e >= 0; --e) {
      size_t at = random() % (text.size() + 1);
      if (random() % 2) {
        text.insert(at, pick(tokens));
      } else {
        text.erase(at, random() % 6);
      }
    }
    return text;
  };
  const std::vector<std::string> numbers = {
      "0", "-1",  "1",   "2",     "128", "4294967297", "1.5",  "abc",
      "",  "inf", "nan", "1e308", "-0",  " 8",         "0x10", "99999999999999999999"};
  const std::vector<std::string> ops = {"causal_conv1d", "attention", "selective_scan", "conv2d",
                                        ""};
  const std::vector<std::string> archs = {"sm_90",  "sm_90a", "sm_80", "auto",   "sm_999",
                                          "sm_abc", "sm_",    "",      "sm_90x", "compute_90"};
  const std::vector<std::string> shape_values = {"B=8,C=4096,L=2048,W=4",
                                                 "B=1048576,C=1048576,L=16777216",
                                                 "H=8,Hq=16,S=128,D=64",
                                                 "B=1,H=1,S=128,Sq=64,D=64",
                                                 "B=0",
                                                 "B=,C=1",
                                                 "=",
                                                 ",,,",
                                                 "B=1,C=64,L=256,dtype=fp8",
                                                 "B=1,D=64,L=256,N=16,G=3",
                                                 "B=-1,C=64,L=128",
                                                 "B=1,C=64,L=128,W=4,W=4"};
  const std::vector<std::string> params = {"cpb",     "threads", "items",  "vec",  "load",
                                           "block_m", "warps",   "nsplit", "yred", "bogus"};
  const std::vector<std::string> junk = {"--op",    "--arch", "--param", "-",      "--",
                                         "--shape", "x",      "--db",    "--help", "\xc3\xa9",
                                         "$HOME",   "a b",    "'",       "--json", "--space"};
  // New files commands may write; a regress report may also name an input database,
  // which must be refused.
  const std::vector<std::string> outputs = {path("out.db"), dir.string(), ""};
  const std::vector<std::string> reports = {path("out.db"), path("base.db"), dir.string(), ""};

  auto started = std::chrono::steady_clock::now();
  int runs = 0;
  for (; runs < 600 && std::chrono::steady_clock::now() - started < std::chrono::seconds(40);
       ++runs) {
    std::string mutated =
        write("mutated.toml", mutate(slurp(pick({conv_space, scan_space, shapes}))));
    std::vector<std::string> args;
    int command = int(random() % 10);
    std::string op = pick(ops);
    auto option = [&](const std::string& name, const std::string& value) {
      args.push_back(name);
      args.push_back(value);
    };
    switch (command) {
    case 0:
    case 1:
    case 2: {
      if (command == 0) {
        args.push_back("list");
      }
      option("--op", op);
      option("--arch", pick(archs));
      for (int n = int(random() % 4); n > 0; --n) {
        switch (random() % 9) {
        case 0:
          option("--shape", random() % 3 ? pick(shape_values) : mutate(pick(shape_values)));
          break;
        case 1:
          option("--shapes", pick({shapes, mutated, dir.string(), path("missing.toml")}));
          break;
        case 2:
          option("--space", pick({conv_space, mutated}));
          break;
        case 3:
          option("--param",
                 pick(params)
                     .append("=")
                     .append(pick(numbers))
                     .append(random() % 2 ? std::string("|").append(pick(numbers)) : ""));
          break;
        case 4:
          option(pick({"--jobs", "--samples", "--top", "--seed"}), pick(numbers));
          break;
        case 5:
          option(pick({"--timeout-s", "--budget-s"}), pick(numbers));
          break;
        case 6:
          option("--strategy", pick({"random", "halving", "exhaustive", "greedy"}));
          break;
        case 7:
          option("--db", pick({path("target.db"), ""}));
          break;
        default:
          args.push_back(pick({"--json", "--quiet", "--force"}));
        }
      }
      if (op == "selective_scan") {
        // Its own space has 1.5M combinations: listing them takes seconds.
        option("--space", scan_space);
      }
      break;
    }
    case 3:
      args = {"cache", "ls", "--db", pick({path("base.db"), mutated, ""})};
      option(pick({"--op", "--device", "--shape"}), pick(shape_values));
      break;
    case 4:
      args = {"cache", "show", pick({"a", "ffff", "", "0000000000"}), "--db", path("base.db")};
      break;
    case 5:
      args = {"cache", "verify", pick({path("base.db"), mutated, dir.string()})};
      break;
    case 6:
      args = {"cache", "import", pick({path("base.db"), path("clean.db"), mutated, ""}), "--db",
              pick({path("target.db"), "", dir.string()})};
      break;
    case 7:
      args = {"cache", pick({"merge", "export"}), pick(outputs), path("clean.db")};
      if (args[1] == "export") {
        args.back() = "--db";
        args.push_back(path("clean.db"));
        option("--shape", pick(shape_values));
      }
      break;
    default:
      args = {"regress", "--baseline", path("base.db"), "--current",
              pick({path("clean.db"), mutated})};
      option(pick({"--junit", "--markdown"}), pick(reports));
      option("--threshold", pick(numbers));
      if (random() % 4 == 0) {
        args.push_back("--force");
      }
    }
    for (int n = int(random() % 3); n > 0; --n) {
      args.insert(args.begin() + long(random() % (args.size() + 1)), pick(junk));
    }
    std::string line;
    for (const std::string& a : args) {
      line += quote(a) + " ";
    }
    // No GPU, so that a tune the fuzzer happens to spell correctly stops at once.
    Run r = run(line, "CUDA_VISIBLE_DEVICES=");
    INFO(line);
    INFO(r.output);
    CHECK((r.code >= 0 && r.code <= 3));
    CHECK((r.code == 0 || !r.output.empty()));
    CHECK_FALSE(has(r.output, "internal error"));
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO(inputs[i]);
      REQUIRE(slurp(inputs[i]) == contents[i]);
    }
    std::error_code ec;
    fs::remove(path("out.db"), ec);
  }
  MESSAGE(runs << " command lines, seed " << seed);
  CHECK(runs >= 50);
  fs::remove_all(dir);
}

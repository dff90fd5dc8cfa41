#include "env_support.hpp"
#include "runtime/base/error.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>

using namespace autotune;
using autotune::testing::ScopedEnv;
namespace fs = std::filesystem;

TEST_CASE("the causal_conv1d space parses from its embedded TOML") {
  const Op& op = find_op("causal_conv1d");
  Space s = parse_space(template_file(op.space_path()), op.space_path());
  REQUIRE(s.params.size() == 5);
  CHECK(s.params[0].name == "threads");
  CHECK(s.params[4].name == "load");
  CHECK(s.size() == 4 * 2 * 4 * 4 * 3);
  auto all = s.enumerate();
  CHECK(all.size() == s.size());
  std::set<std::string> ids;
  for (const auto& c : all) {
    ids.insert(config_id(c));
  }
  CHECK(ids.size() == all.size());
  CHECK(config_id(s.default_config) == "threads=128,vec=8,items=2,cpb=1,load=direct");
}

TEST_CASE("for_each walks the space in enumerate() order, each combination once") {
  for (const char* name : {"attention", "causal_conv1d", "selective_scan"}) {
    CAPTURE(name);
    Space s = op_space(find_op(name));
    size_t i = 0;
    bool in_order = true;
    s.for_each([&](const Config& c) {
      // Space::at decodes the index on its own: an independent check of the odometer.
      in_order = in_order && ((s.size() > 100000 && i % 997 != 0) || c == s.at(i));
      ++i;
    });
    CHECK(in_order);
    CHECK(i == s.size());
  }
  Space small = parse_space("[params]\na = [1, 2]\nb = [\"x\", \"y\", \"z\"]\n[default]\na = 1\nb "
                            "= \"x\"\n",
                            "small.toml");
  std::vector<std::string> seen;
  small.for_each([&](const Config& c) { seen.push_back(config_id(c)); });
  std::vector<std::string> listed;
  for (const Config& c : small.enumerate()) {
    listed.push_back(config_id(c));
  }
  CHECK(seen == listed);
  CHECK(seen ==
        std::vector<std::string>{"a=1,b=x", "a=1,b=y", "a=1,b=z", "a=2,b=x", "a=2,b=y", "a=2,b=z"});
}

TEST_CASE("space TOML errors name the file, line and column") {
  SUBCASE("a syntax error") {
    // toml++ reports where it noticed: the next table header after the open array.
    std::string text = "[params]\nthreads = [64, 128\n[default]\nthreads = 64\n";
    CHECK_THROWS_WITH_AS(parse_space(text, "my.toml"),
                         doctest::Contains("my.toml:3:1: Error while parsing array"), Error);
  }
  SUBCASE("a misspelled table") {
    std::string text = "[params]\nthreads = [64]\n[defualt]\nthreads = 64\n";
    CHECK_THROWS_WITH_AS(parse_space(text, "my.toml"),
                         doctest::Contains("my.toml:3:1: unknown table [defualt]"), Error);
  }
  SUBCASE("a default naming an unknown parameter") {
    std::string text = "[params]\nthreads = [64]\n[default]\nthreads = 64\nthread = 2\n";
    CHECK_THROWS_WITH_AS(parse_space(text, "my.toml"), doctest::Contains("my.toml:5:"), Error);
  }
  SUBCASE("a default missing a parameter") {
    std::string text = "[params]\nthreads = [64]\nvec = [4]\n[default]\nthreads = 64\n";
    CHECK_THROWS_WITH_AS(parse_space(text, "my.toml"), doctest::Contains("lacks 'vec'"), Error);
  }
  SUBCASE("a value of the wrong type") {
    std::string text = "[params]\nthreads = [64, 1.5]\n[default]\nthreads = 64\n";
    CHECK_THROWS_WITH_AS(parse_space(text, "my.toml"), doctest::Contains("my.toml:2:"), Error);
  }
}

TEST_CASE("parameter overrides narrow the space and reject unknown names") {
  const Op& op = find_op("causal_conv1d");
  Space s = parse_space(template_file(op.space_path()), op.space_path());
  restrict_space(s, {{"threads", "128"}, {"load", "direct"}});
  CHECK(s.size() == 2 * 4 * 4);
  CHECK_THROWS_WITH_AS(restrict_space(s, {{"thread", "128"}}),
                       doctest::Contains("'thread' is not a parameter"), Error);
}

namespace {
size_t total_size(const std::vector<Space>& parts) {
  size_t n = 0;
  for (const Space& p : parts) {
    n += p.size();
  }
  return n;
}
} // namespace

TEST_CASE("inert parameters are walked at their one value, where their rule applies") {
  const Space s = parse_space("[params]\nform = [\"a\", \"b\", \"c\"]\nx = [1, 2, 3]\n"
                              "y = [1, 2]\nz = [\"p\", \"q\"]\n"
                              "[default]\nform = \"a\"\nx = 1\ny = 1\nz = \"p\"\n",
                              "t.toml");
  SUBCASE("a conditional rule cuts the space into the forms it covers and the others") {
    const std::vector<Space> parts =
        inert_parts(s, {{"form", {"b", "c"}, {{"x", "1"}, {"y", "2"}}}});
    REQUIRE(parts.size() == 2);
    CHECK(parts[0].params[0].values == std::vector<std::string>{"b", "c"});
    CHECK(parts[0].params[1].values == std::vector<std::string>{"1"});
    CHECK(parts[0].params[2].values == std::vector<std::string>{"2"});
    CHECK(parts[1].params[0].values == std::vector<std::string>{"a"});
    CHECK(parts[1].size() == 3 * 2 * 2);
    CHECK(total_size(parts) == 2 * 2 + 12);
  }
  SUBCASE("an unconditional rule narrows the whole space; rules apply in turn") {
    const std::vector<Space> parts =
        inert_parts(s, {{"form", {"a"}, {{"x", "2"}}}, {"", {}, {{"z", "q"}}}});
    REQUIRE(parts.size() == 2);
    CHECK(total_size(parts) == 1 * 1 * 2 * 1 + 2 * 3 * 2 * 1);
  }
  SUBCASE("a rule narrows nothing where the space lacks its value or its parameter") {
    CHECK(total_size(inert_parts(s, {{"form", {"a"}, {{"x", "7"}}}})) == s.size());
    CHECK(total_size(inert_parts(s, {{"mode", {"a"}, {{"x", "1"}}}})) == s.size());
    CHECK(total_size(inert_parts(s, {{"form", {"d"}, {{"x", "1"}}}})) == s.size());
  }
  SUBCASE("ranges of the walk join into enumerate() order") {
    std::vector<Config> joined;
    for (size_t b = 0; b < s.size(); b += 5) {
      s.for_each(b, std::min(s.size(), b + 5), [&](const Config& c) { joined.push_back(c); });
    }
    CHECK(joined == s.enumerate());
  }
}

TEST_CASE("selective_scan's parameters that a problem or a kernel form does not read are inert") {
  const Op& op = find_op("selective_scan");
  const Space s = op_space(op);
  const Problem aligned = op.make_problem(parse_fields("B=2,D=2560,L=8192,N=16", "t"));
  const Problem ragged = op.make_problem(parse_fields("B=2,D=2560,L=8191,N=16", "t"));
  const std::vector<Space> ragged_parts = inert_parts(s, op.inert_params(ragged));
  const std::vector<Space> aligned_parts = inert_parts(s, op.inert_params(aligned));
  // The two time-parallel forms walk the state form's six parameters (3 x 2 x 3 x 2 x 3 x 2
  // values) at one value each; for an aligned length the state form walks ragged at one.
  const size_t state = s.size() / 3;
  CHECK(total_size(ragged_parts) == state + 2 * state / 216);
  CHECK(total_size(aligned_parts) == state / 2 + 2 * state / 216);
  // A space restricted to another value of ragged is not narrowed by that rule.
  Space shift_only = s;
  restrict_space(shift_only, {{"ragged", "shift"}, {"scan", "state"}});
  CHECK(total_size(inert_parts(shift_only, op.inert_params(aligned))) == shift_only.size());
}

TEST_CASE("templates expand their includes once and carry line markers") {
  std::string src = expand_template("causal_conv1d/kernel.cuh");
  CHECK(src.find("struct __align__(2) at_bf16") != std::string::npos);
  CHECK(src.find("# 1 \"common/numeric.cuh\"") != std::string::npos);
  CHECK(src.find("#include \"common") == std::string::npos);
  CHECK_THROWS_WITH_AS(template_file("nope/kernel.cuh"), doctest::Contains("nope/kernel.cuh"),
                       Error);
}

TEST_CASE("AUTOTUNE_TEMPLATE_DIR overlays the embedded templates, and must be a directory") {
  const std::string embedded = template_file("causal_conv1d/space.toml");
  const auto dir =
      std::filesystem::temp_directory_path() / ("autotune-overlay-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "causal_conv1d");
  std::ofstream(dir / "causal_conv1d" / "space.toml") << "# overlaid\n";
  {
    ScopedEnv overlay("AUTOTUNE_TEMPLATE_DIR", dir.c_str());
    CHECK(template_file("causal_conv1d/space.toml") == "# overlaid\n");
    CHECK(template_file("causal_conv1d/kernel.cuh").size() > 0); // not overlaid: embedded
  }
  {
    ScopedEnv typo("AUTOTUNE_TEMPLATE_DIR", (dir / "typo").c_str());
    try {
      (void)template_file("causal_conv1d/space.toml");
      FAIL("a missing overlay directory was read as the embedded templates");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::config);
      CHECK(std::string(e.what()).find("is not a directory") != std::string::npos);
    }
  }
  CHECK(template_file("causal_conv1d/space.toml") == embedded);
  std::filesystem::remove_all(dir);
}

TEST_CASE("unknown and unbuilt ops are usage errors") {
  CHECK_THROWS_WITH_AS(find_op("conv2d"), doctest::Contains("unknown op 'conv2d'"), Error);
}

namespace {

// The message of the Error(config) that `body` throws; fails the test otherwise.
template <typename F> std::string config_error(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::config);
    return e.what();
  }
  FAIL("expected an Error(config)");
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const char* k_small_space = "[params]\nthreads = [64, 128]\nvec = [8]\nitems = [2]\ncpb = [1, 2]\n"
                            "load = [\"direct\"]\n[default]\nthreads = 128\nvec = 8\nitems = 2\n"
                            "cpb = 1\nload = \"direct\"\n";

// A space file the test writes and removes.
class SpaceFile {
public:
  explicit SpaceFile(const std::string& text) {
    static int counter = 0;
    m_path = (fs::temp_directory_path() / ("autotune_test_space_" + std::to_string(::getpid()) +
                                           "_" + std::to_string(++counter) + ".toml"))
                 .string();
    std::ofstream(m_path, std::ios::binary) << text;
  }
  ~SpaceFile() {
    std::error_code ec;
    fs::remove(m_path, ec);
  }
  SpaceFile(const SpaceFile&) = delete;
  SpaceFile& operator=(const SpaceFile&) = delete;
  const std::string& path() const { return m_path; }

private:
  std::string m_path;
};

} // namespace

TEST_CASE("every op's space declares a limit for every parameter, and its values lie within") {
  for (const std::string& name : op_names()) {
    CAPTURE(name);
    Space s = op_space(find_op(name));
    REQUIRE(s.limits.size() == s.params.size());
    for (size_t i = 0; i < s.params.size(); ++i) {
      CHECK(s.limits[i].name == s.params[i].name);
      for (const std::string& v : s.params[i].values) {
        CHECK(s.limits[i].admit(v).ok());
      }
    }
    check_config(s, s.default_config, "default");
  }
}

// Issue 18: `--param cpb=0` crashed `autotune list` with SIGFPE, and
// `--param threads=4294967424` was compiled as threads=128.
TEST_CASE("a --param value outside its limit is a configuration error naming it and the limit") {
  struct Case {
    const char* op;
    const char* name;
    const char* value;
    const char* expect;
  };
  const Case cases[] = {
      {"causal_conv1d", "cpb", "0", "cpb=0 is out of range; cpb must be an integer in [1, 1024]"},
      {"causal_conv1d", "items", "0",
       "items=0 is out of range; items must be an integer in [1, 64]"},
      {"attention", "block_m", "0",
       "block_m=0 is out of range; block_m must be an integer in [16, 512]"},
      {"causal_conv1d", "threads", "4294967424", "threads=4294967424 is out of range"},
      {"causal_conv1d", "cpb", "-1", "cpb=-1 is out of range"},
      {"causal_conv1d", "cpb", "99999999999999999999", "cpb=99999999999999999999 is out of range"},
      {"causal_conv1d", "threads", "abc", "threads=abc is not an integer"},
      {"causal_conv1d", "threads", "1.5", "threads=1.5 is not an integer"},
      {"causal_conv1d", "threads", "0x80", "threads=0x80 is not an integer"},
      {"causal_conv1d", "threads", "+128", "threads=+128 is not an integer"},
      {"causal_conv1d", "load", "fast",
       "load=fast is not allowed; load must be one of 'direct', 'smem'"},
      {"selective_scan", "yred", "40",
       "yred=40 is out of range; yred must be an integer in [0, 2]"},
      {"selective_scan", "nsplit", "0", "nsplit=0 is out of range"},
      {"attention", "warps", "0", "warps=0 is out of range"},
      {"attention", "splits", "0|1", "splits=0 is out of range"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    CAPTURE(c.value);
    Space s = op_space(find_op(c.op));
    std::string message = config_error([&] { restrict_space(s, {{c.name, c.value}}); });
    CHECK(contains(message, c.expect));
    CHECK(contains(message, std::string("--param ") + c.name + "=" + c.value));
    CHECK(contains(message, std::string("templates/") + c.op + "/space.toml:"));
  }
}

TEST_CASE("--param values are canonical, distinct and not empty") {
  Space s = op_space(find_op("causal_conv1d"));
  restrict_space(s, {{"threads", "0128| 64"}});
  CHECK(s.params[0].values == std::vector<std::string>{"128", "64"});
  Space t = op_space(find_op("causal_conv1d"));
  CHECK(contains(config_error([&] { restrict_space(t, {{"cpb", "1|01"}}); }), "lists 1 twice"));
  CHECK(contains(config_error([&] { restrict_space(t, {{"cpb", "1||2"}}); }), "empty value"));
  CHECK_THROWS_WITH_AS(restrict_space(t, {{"cpb", "1"}, {"cpb", "2"}}),
                       doctest::Contains("'cpb' is given twice"), Error);
}

TEST_CASE("a --space file is checked against the op's limits, naming file and line") {
  const Op& op = find_op("causal_conv1d");
  SUBCASE("a value of 0 in [params]") {
    std::string text = k_small_space;
    text.replace(text.find("cpb = [1, 2]"), 12, "cpb = [0, 2]");
    SpaceFile file(text);
    std::string message = config_error([&] { load_op_space(op, file.path(), {}); });
    CHECK(contains(message, file.path() + ":5:7: [params] cpb=0 is out of range"));
    CHECK(contains(message, "[1, 1024]"));
  }
  SUBCASE("items = 0 in [default]") {
    std::string text = k_small_space;
    text.replace(text.find("items = 2\n"), 10, "items = 0\n");
    SpaceFile file(text);
    std::string message = config_error([&] { load_op_space(op, file.path(), {}); });
    CHECK(contains(message, file.path() + ":10:9: [default] items=0 is out of range"));
  }
  SUBCASE("attention block_m = 0") {
    SpaceFile file("[params]\nblock_m = [0]\nblock_n = [64]\nwarps = [4]\nstages = [1]\n"
                   "swizzle = [\"xor\"]\nq = [\"smem\"]\n[default]\nblock_m = 0\nblock_n = 64\n"
                   "warps = 4\nstages = 1\nswizzle = \"xor\"\nq = \"smem\"\n");
    CHECK(contains(config_error([&] { load_op_space(find_op("attention"), file.path(), {}); }),
                   "block_m=0 is out of range"));
  }
  SUBCASE("a parameter the op does not have") {
    std::string text = k_small_space;
    text.replace(text.find("[default]"), 9, "cbp = [1]\n[default]\ncbp = 1");
    SpaceFile file(text);
    CHECK(contains(config_error([&] { load_op_space(op, file.path(), {}); }),
                   "params.cbp is not a parameter of causal_conv1d"));
  }
  SUBCASE("the file's own [limits] cannot widen the op's") {
    std::string text = k_small_space;
    text.replace(text.find("cpb = [1, 2]"), 12, "cpb = [0, 2]");
    text += "[limits]\nthreads = [1, 4096]\nvec = [1, 64]\nitems = [0, 64]\ncpb = [0, 64]\n"
            "load = [\"direct\"]\n";
    SpaceFile file(text);
    CHECK(contains(config_error([&] { load_op_space(op, file.path(), {}); }),
                   "cpb=0 is out of range; cpb must be an integer in [1, 1024]"));
  }
  SUBCASE("a sound file, narrowed by --param, in canonical spelling") {
    std::string text = k_small_space;
    text.replace(text.find("threads = [64, 128]"), 19, "threads = [64, \"0128\"]");
    SpaceFile file(text);
    Space s = load_op_space(op, file.path(), {{"cpb", "2"}});
    CHECK(s.params[0].values == std::vector<std::string>{"64", "128"});
    CHECK(s.size() == 2);
    CHECK(s.limit("cpb") != nullptr);
    CHECK_THROWS_WITH_AS(load_op_space(op, file.path(), {{"cpb", "0"}}),
                         doctest::Contains("cpb=0 is out of range"), Error);
  }
  SUBCASE("a directory or a missing file is an I/O error") {
    CHECK_THROWS_WITH_AS(load_op_space(op, fs::temp_directory_path().string(), {}),
                         doctest::Contains("is a directory"), Error);
    CHECK_THROWS_WITH_AS(load_op_space(op, "/nonexistent/space.toml", {}),
                         doctest::Contains("cannot read the space file"), Error);
  }
}

TEST_CASE("[limits] tables are checked themselves") {
  std::string base = "[params]\nthreads = [64]\nload = [\"direct\"]\n[default]\nthreads = 64\n"
                     "load = \"direct\"\n";
  SUBCASE("a parameter without a limit") {
    CHECK(contains(
        config_error([&] { parse_space(base + "[limits]\nthreads = [32, 1024]\n", "l.toml"); }),
        "declares no limit for 'load'"));
  }
  SUBCASE("a limit for no parameter") {
    CHECK(contains(config_error([&] {
                     parse_space(base + "[limits]\nthreads = [32, 1024]\nload = [\"direct\"]\n"
                                        "thread = [1, 2]\n",
                                 "l.toml");
                   }),
                   "l.toml:10:10: [limits] names 'thread'"));
  }
  SUBCASE("min above max, three numbers, mixed types, a repeated string") {
    for (const char* bad : {"[1024, 32]", "[32, 64, 1024]", "[32, \"x\"]", "32", "[]"}) {
      CAPTURE(bad);
      CHECK(contains(config_error([&] {
                       parse_space(base + "[limits]\nthreads = " + bad + "\nload = [\"direct\"]\n",
                                   "l.toml");
                     }),
                     "l.toml:8:11: limits.threads must be [min, max]"));
    }
    CHECK(contains(config_error([&] {
                     parse_space(base + "[limits]\nthreads = [32, 1024]\nload = [\"direct\", "
                                        "\"direct\"]\n",
                                 "l.toml");
                   }),
                   "lists 'direct' twice"));
  }
  SUBCASE("an op space without [limits] is refused by op_space only") {
    Space s = parse_space(base, "l.toml");
    CHECK(s.limits.empty());
    CHECK(s.size() == 1);
  }
}

// Issue 18: a huge --space ended in "internal error: std::bad_alloc".
TEST_CASE("a space of too many combinations is a configuration error naming it") {
  std::string text = "[params]\n";
  std::string def = "[default]\n";
  for (int i = 0; i < 40; ++i) {
    // Appended, not `"p" + std::to_string(i)`: GCC 12 -O2 reports a false
    // -Wrestrict on that form.
    text.append("p").append(std::to_string(i)).append(" = [1, 2, 3, 4, 5, 6, 7, 8]\n");
    def.append("p").append(std::to_string(i)).append(" = 1\n");
  }
  std::string message = config_error([&] { parse_space(text + def, "huge.toml"); });
  CHECK(contains(message, "huge.toml has more than 4194304 combinations"));
  CHECK(contains(message, "--param"));

  // --param can grow a space past the cap too.
  Space s = op_space(find_op("causal_conv1d"));
  auto values = [](int from, int to) {
    std::string out = std::to_string(from);
    for (int v = from + 1; v <= to; ++v) {
      out.append("|").append(std::to_string(v));
    }
    return out;
  };
  std::string many = values(32, 1024);
  std::string items = values(1, 64);
  std::string cpbs = values(1, 200);
  CHECK(contains(config_error([&] {
                   restrict_space(s, {{"threads", many}, {"items", items}, {"cpb", cpbs}});
                 }),
                 "narrowed by --param has more than"));

  Space overflow;
  overflow.params.assign(70, Parameter{"p", {"1", "2"}, "", ""});
  CHECK(overflow.size() == std::numeric_limits<size_t>::max());
}

TEST_CASE("a stored configuration outside the limits is refused before an op computes with it") {
  Space s = op_space(find_op("causal_conv1d"));
  check_config(s, {{"threads", "128"}, {"cpb", "4"}}, "stored");
  CHECK(contains(config_error([&] {
                   check_config(s, {{"cpb", "0"}}, "stored cpb=0");
                 }),
                 "stored cpb=0: cpb=0 is out of range"));
  CHECK(contains(config_error([&] {
                   check_config(s, {{"warps", "4"}}, "stored");
                 }),
                 "'warps' is not a parameter"));
}

// Random and mutated space files and --param values: every outcome is a Space
// whose values lie within the op's limits, or an autotune::Error; never another
// exception (std::bad_alloc, std::out_of_range) or a crash.
TEST_CASE("fuzz: space parsing and --param fail only with autotune errors") {
  const Op& op = find_op("causal_conv1d");
  const Space limits = op_space(op);
  const std::string seed_text = template_file(op.space_path());
  const std::vector<std::string> tokens = {"0",          "-1",
                                           "4294967424", "99999999999999999999",
                                           "1.5",        "\"abc\"",
                                           "[",          "]",
                                           "{",          "}",
                                           ",",          "=",
                                           "\n",         "[params]",
                                           "[default]",  "[limits]",
                                           "true",       "\"\"",
                                           "#",          "'",
                                           "cpb",        "threads = [32, 1024]",
                                           "\xff",       "1e9",
                                           "[[x]]"};
  std::mt19937 random(18);
  int parsed = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string text = seed_text;
    int edits = 1 + int(random() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = random() % (text.size() + 1);
      switch (random() % 3) {
      case 0:
        text.insert(at, tokens[random() % tokens.size()]);
        break;
      case 1:
        text.erase(at, random() % 8);
        break;
      default:
        if (at < text.size()) {
          text[at] = char(random() % 128);
        }
      }
    }
    std::string value = tokens[random() % tokens.size()];
    for (int v = int(random() % 4); v > 0; --v) {
      value.append("|").append(tokens[random() % tokens.size()]);
    }
    CAPTURE(text);
    CAPTURE(value);
    try {
      Space s = parse_space(text, "fuzz.toml");
      ++parsed;
      for (const Parameter& p : s.params) {
        for (const std::string& v : p.values) {
          const Limit* own = s.limit(p.name);
          CHECK((own == nullptr || own->admit(v).ok()));
        }
      }
      restrict_space(s, {{s.params[random() % s.params.size()].name, value}});
      CHECK(s.size() <= k_max_space_size);
    } catch (const Error&) {
    } catch (const std::exception& e) {
      FAIL("not an autotune::Error: " << e.what());
    }
    try {
      Space s = op_space(op);
      restrict_space(s, {{s.params[random() % s.params.size()].name, value}});
      for (const Parameter& p : s.params) {
        for (const std::string& v : p.values) {
          CHECK(s.limit(p.name)->admit(v).ok());
        }
      }
    } catch (const Error&) {
    } catch (const std::exception& e) {
      FAIL("not an autotune::Error: " << e.what());
    }
  }
  CHECK(parsed > 0); // some mutations keep the file valid, so the parsed path is exercised
}

TEST_CASE("inert rules set a configuration's inert parameters where they apply") {
  const std::vector<InertRule> rules{{"scan", {"shfl", "smem"}, {{"tsplit", "1"}, {"bc", "f32"}}},
                                     {"", {}, {{"ragged", "regs"}}}};
  const Config state =
      parse_fields("scan=state,tsplit=2,bc=pair,ragged=async,threads=64", "config");
  CHECK(format_fields(apply_inert_rules(state, rules)) ==
        "scan=state,tsplit=2,bc=pair,ragged=regs,threads=64");
  const Config shfl = parse_fields("scan=shfl,tsplit=2,bc=pair,ragged=async", "config");
  CHECK(format_fields(apply_inert_rules(shfl, rules)) == "scan=shfl,tsplit=1,bc=f32,ragged=regs");
  SUBCASE("a parameter the configuration does not name is not added") {
    const Config few = parse_fields("scan=smem,threads=32", "config");
    CHECK(format_fields(apply_inert_rules(few, rules)) == "scan=smem,threads=32");
  }
}

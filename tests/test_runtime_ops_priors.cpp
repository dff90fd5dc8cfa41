// Search priors ([[prune]] in a space file): they prune on the archs they name and
// nowhere else, their conditions read as written, and a bad entry is a
// configuration error naming the file and line.
#include "runtime/base/error.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/priors.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

using namespace autotune;

namespace {

const Op& scan() {
  return find_op("selective_scan");
}

Problem problem(const std::string& shape) {
  return scan().make_problem(parse_fields(shape, "shape"));
}

// A configuration of the selective_scan space, from the default with `changes`.
Config config(const std::string& changes) {
  Config c = op_space(scan()).default_config;
  for (const auto& [name, value] : parse_fields(changes, "config")) {
    bool found = false;
    for (auto& [n, v] : c) {
      if (n == name) {
        v = value;
        found = true;
      }
    }
    REQUIRE(found);
  }
  return c;
}

Priors priors(const std::string& text) {
  return parse_priors(text, "my.toml", op_space(scan()));
}

bool allowed(const Priors& p, const Config& c, const Problem& pr, const std::string& arch) {
  return bool(p.allow(scan(), c, pr, arch));
}

} // namespace

TEST_CASE("a search prior prunes on the archs it names and nowhere else") {
  Priors p = priors(R"(
[[prune]]   # measured on the H100
arch = ["sm_90", "sm_90a"]
when = { scan = "state", ystore = "during" }
require = { cpl = 1 }
why = "ystore=during never won with cpl > 1"
)");
  REQUIRE(p.entries.size() == 1);
  CHECK(p.entries[0].origin == "my.toml:2");
  Problem pr = problem("B=8,D=2048,L=2048,N=16");
  Config hit = config("scan=state,ystore=during,cpl=2");
  CHECK_FALSE(allowed(p, hit, pr, "sm_90"));
  CHECK_FALSE(allowed(p, hit, pr, "sm_90a"));
  CHECK(allowed(p, hit, pr, "sm_80"));
  CHECK(allowed(p, hit, pr, "sm_120"));
  CHECK(allowed(p, hit, pr, "sm_100a"));
  SUBCASE("the failure names the entry, its reason and the unmet condition") {
    auto r = p.allow(scan(), hit, pr, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message ==
          "search prior my.toml:2 for sm_90/sm_90a: ystore=during never won with cpl > 1 "
          "(measured only with cpl = 1)");
  }
  SUBCASE("outside `when` the entry does nothing") {
    CHECK(allowed(p, config("scan=state,ystore=after,cpl=2"), pr, "sm_90"));
    CHECK(allowed(p, config("scan=shfl,ystore=during,cpl=2"), pr, "sm_90"));
  }
  SUBCASE("configurations meeting `require` pass") {
    CHECK(allowed(p, config("scan=state,ystore=during,cpl=1"), pr, "sm_90"));
  }
}

TEST_CASE("prior conditions: one value, a list, a range, and the launch's block count") {
  Priors p = priors(R"(
[[prune]]
arch = "sm_90"
when = { scan = ["shfl", "smem"] }
require = { items = { max = 16 }, nsplit = [1, 2], minblocks = { min = 1, max = 2 } }
why = "time-parallel scans measured in a small range"

[[prune]]
arch = ["sm_90"]
when = { scan = "state", blocks = { max = 63 } }
require = { cpb = { max = 8 } }
why = "too few blocks for the GPU at this cpb"
)");
  REQUIRE(p.entries.size() == 2);
  CHECK(p.entries[0].require[0].describe() == "items <= 16");
  CHECK(p.entries[0].require[1].describe() == "nsplit in {1, 2}");
  CHECK(p.entries[0].require[2].describe() == "minblocks in [1, 2]");
  Problem pr = problem("B=8,D=2048,L=2048,N=16");
  CHECK(allowed(p, config("scan=shfl,items=16,nsplit=2,minblocks=2"), pr, "sm_90"));
  CHECK_FALSE(allowed(p, config("scan=shfl,items=32"), pr, "sm_90"));
  CHECK_FALSE(allowed(p, config("scan=smem,nsplit=4"), pr, "sm_90"));
  CHECK_FALSE(allowed(p, config("scan=shfl,minblocks=4"), pr, "sm_90"));
  SUBCASE("blocks is the launch grid's size for the problem") {
    // State form with 32 lanes of one state group: cpb = 32 channels per block.
    Config wide = config("scan=state,threads=32,items=32,cpb=32,nsplit=1");
    REQUIRE(scan().check(wide, problem("B=1,D=1024,L=2048,N=16"), "sm_90"));
    CHECK_FALSE(allowed(p, wide, problem("B=1,D=1024,L=2048,N=16"), "sm_90")); // 32 blocks
    CHECK(allowed(p, wide, problem("B=2,D=1024,L=2048,N=16"), "sm_90"));       // 64 blocks
    CHECK(allowed(p, wide, problem("B=1,D=1024,L=2048,N=16"), "sm_80"));
  }
}

TEST_CASE("the op's own priors hold on the H100 only") {
  // templates/selective_scan/space.toml: the rules measured on the H100.
  const Op& op = scan();
  Space space = op_space(op);
  Priors p = parse_priors(template_file(op.space_path()), space.source, space);
  REQUIRE_FALSE(p.entries.empty());
  Problem pr = problem("B=8,D=2048,L=2048,N=16");
  const std::string base = "threads=128,items=32,cpb=16,nsplit=8,scan=state,";
  struct Case {
    std::string config;
    const char* why;
  };
  for (const Case& c : {
           Case{base + "yred=0", "plain store after the scan, partner lanes exist"},
           Case{base + "yred=1,ystore=during", "shuffles during the scan"},
           Case{"threads=64,items=32,cpb=32,nsplit=4,scan=state,cpl=2,ystore=during",
                "during with two channels per lane"},
           Case{"threads=64,items=8,cpb=1,nsplit=1,scan=smem,poly=2", "smem scan, polynomial"},
           Case{"threads=64,items=32,cpb=2,nsplit=1,scan=shfl", "time-parallel, long runs"},
       }) {
    CAPTURE(c.why);
    Config cfg = config(c.config);
    REQUIRE(op.check(cfg, pr, "sm_90a"));
    CHECK_FALSE(p.allow(op, cfg, pr, "sm_90a"));
    CHECK_FALSE(p.allow(op, cfg, pr, "sm_90"));
    CHECK(p.allow(op, cfg, pr, "sm_80"));
    CHECK(p.allow(op, cfg, pr, "sm_120"));
  }
  CHECK(p.allow(op, config(base + "yred=1"), pr, "sm_90a"));
  CHECK(p.allow(op, config(base + "yred=0,ystore=during"), pr, "sm_90a"));
  CHECK(p.allow(op, config("threads=32,items=32,cpb=32,nsplit=1,scan=state"), pr, "sm_90a"));
}

TEST_CASE("bad [[prune]] entries are configuration errors naming the file and line") {
  auto fails = [](const std::string& text, const std::string& expected) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(priors(text), doctest::Contains(expected.c_str()), Error);
    try {
      priors(text);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::config);
    }
  };
  const std::string head = "[[prune]]\narch = [\"sm_90\"]\nwhy = \"measured\"\n";
  SUBCASE("an unknown parameter") {
    fails(head + "require = { cpll = 1 }\n", "my.toml:4:");
    fails(head + "require = { cpll = 1 }\n", "'cpll' is not a parameter of my.toml");
    fails(head + "when = { sacn = \"state\" }\nrequire = { cpl = 1 }\n", "my.toml:4:");
  }
  SUBCASE("a value the parameter does not list") {
    fails(head + "require = { cpl = 3 }\n", "my.toml:4:");
    fails(head + "require = { cpl = 3 }\n", "'3' is not a value of params.cpl (1, 2, 4)");
    fails(head + "when = { scan = \"fast\" }\nrequire = { cpl = 1 }\n",
          "'fast' is not a value of params.scan");
    fails(head + "require = { cpl = [] }\n", "the list of values is empty");
  }
  SUBCASE("a range over a string parameter, or a malformed range") {
    fails(head + "require = { scan = { max = 2 } }\n", "a range needs an integer parameter");
    fails(head + "require = { cpl = { most = 2 } }\n", "my.toml:4:");
    fails(head + "require = { cpl = { min = 4, max = 2 } }\n", "min exceeds max");
    fails(head + "require = { cpl = {} }\n", "a range needs min, max or both");
    fails(head + "require = { blocks = \"many\" }\n", "blocks is an integer");
  }
  SUBCASE("an unknown key, or a missing arch, require or why") {
    fails(head + "require = { cpl = 1 }\nwhn = { scan = \"state\" }\n",
          "my.toml:5:1: [[prune]]: unknown key 'whn'");
    fails("[[prune]]\nwhy = \"x\"\nrequire = { cpl = 1 }\n", "my.toml:1:1: [[prune]] needs arch");
    fails("[[prune]]\narch = [\"sm_90\"]\nwhy = \"x\"\n",
          "my.toml:1:1: [[prune]] needs a non-empty require");
    fails(head + "require = {}\n", "needs a non-empty require");
    fails("[[prune]]\narch = [\"sm_90\"]\nrequire = { cpl = 1 }\n",
          "my.toml:1:1: [[prune]] needs why");
    fails("[[prune]]\narch = [\"sm_90\"]\nwhy = \" \"\nrequire = { cpl = 1 }\n", "my.toml:3:");
  }
  SUBCASE("an arch that is not a target name") {
    fails("[[prune]]\narch = [\"90\"]\nwhy = \"x\"\nrequire = { cpl = 1 }\n",
          "my.toml:2:9: [[prune]] arch");
    fails("[[prune]]\narch = [\"sm_90\", \"H100\"]\nwhy = \"x\"\nrequire = { cpl = 1 }\n",
          "my.toml:2:");
  }
  SUBCASE("prune written as one table, or conditions outside inline tables") {
    fails("[prune]\narch = [\"sm_90\"]\n", "my.toml:1:1: prune must be a list of tables");
    fails(head + "require = { cpl = 1 }\n[prune.when]\nscan = \"state\"\n",
          "when must be an inline table");
  }
  SUBCASE("a TOML syntax error") {
    fails(head + "require = { cpl = 1\n", "my.toml:4:");
  }
}

#include "runtime/base/error.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

#include <set>

using namespace autotune;

TEST_CASE("the causal_conv1d space parses from its embedded TOML") {
  const Op& op = find_op("causal_conv1d");
  Space s = parse_space(template_file(op.space_path()), op.space_path());
  REQUIRE(s.params.size() == 5);
  CHECK(s.params[0].name == "threads");
  CHECK(s.params[4].name == "load");
  CHECK(s.size() == 4 * 2 * 3 * 3 * 2);
  auto all = s.enumerate();
  CHECK(all.size() == s.size());
  std::set<std::string> ids;
  for (const auto& c : all) {
    ids.insert(config_id(c));
  }
  CHECK(ids.size() == all.size());
  CHECK(config_id(s.default_config) == "threads=128,vec=8,items=2,cpb=1,load=direct");
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
  CHECK(s.size() == 2 * 3 * 3);
  CHECK_THROWS_WITH_AS(restrict_space(s, {{"thread", "128"}}),
                       doctest::Contains("'thread' is not a parameter"), Error);
}

TEST_CASE("templates expand their includes once and carry line markers") {
  std::string src = expand_template("causal_conv1d/kernel.cuh");
  CHECK(src.find("struct __align__(2) at_bf16") != std::string::npos);
  CHECK(src.find("# 1 \"common/numeric.cuh\"") != std::string::npos);
  CHECK(src.find("#include \"common") == std::string::npos);
  CHECK_THROWS_WITH_AS(template_file("nope/kernel.cuh"), doctest::Contains("nope/kernel.cuh"),
                       Error);
}

TEST_CASE("unknown and unbuilt ops are usage errors") {
  CHECK_THROWS_WITH_AS(find_op("conv2d"), doctest::Contains("unknown op 'conv2d'"), Error);
}

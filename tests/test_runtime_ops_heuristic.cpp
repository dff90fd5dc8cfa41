// The heuristic policy's built-in tuning points (runtime/ops/heuristic.hpp): every
// op's [[heuristic]] entries parse and lie within its limits, the nearest point of
// the GPU's family wins, flags a point names must match, and a GPU with no points of
// its own takes the nearest point its limits allow.
#include "runtime/ops/heuristic.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

using namespace autotune;

namespace {

Problem problem(const char* op, const char* shape) {
  return find_op(op).make_problem(parse_fields(shape, "shape"));
}

} // namespace

TEST_CASE("every op's heuristic points parse and lie within its limits") {
  for (std::string name : {"causal_conv1d", "attention", "selective_scan"}) {
    CAPTURE(name);
    const Op& op = find_op(name);
    auto points =
        parse_heuristics(op, template_file(op.space_path()), op.space_path(), op_space(op));
    CHECK(points.size() >= 4);
  }
}

TEST_CASE("the heuristic picks the nearest point of the GPU's family that can run the problem") {
  SUBCASE("causal_conv1d near the long-sequence point") {
    auto c = heuristic_config(find_op("causal_conv1d"),
                              problem("causal_conv1d", "B=1,C=4096,L=12000,W=4"), "sm_90a");
    REQUIRE(c);
    CHECK(format_fields(c->first) == "threads=512,vec=8,items=4,cpb=1,load=smem");
    CHECK(c->second == "sm_90a point B=1,C=4096,L=16384,W=4");
  }
  SUBCASE("attention: a causal problem takes a causal point") {
    const Op& op = find_op("attention");
    auto causal =
        heuristic_config(op, problem("attention", "B=4,H=16,S=3000,D=128,causal=1"), "sm_90a");
    auto full =
        heuristic_config(op, problem("attention", "B=4,H=16,S=3000,D=128,causal=0"), "sm_90a");
    REQUIRE(causal);
    REQUIRE(full);
    CHECK(causal->second.find("causal=1") != std::string::npos);
    CHECK(full->second.find("causal=0") != std::string::npos);
  }
  SUBCASE("selective_scan") {
    auto c = heuristic_config(find_op("selective_scan"),
                              problem("selective_scan", "B=2,D=3072,L=1500,N=16"), "sm_90a");
    REQUIRE(c);
    CHECK(format_fields(c->first).find("scan=state") != std::string::npos);
  }
  SUBCASE("a GPU with no points of its own takes another family's that fits it") {
    auto c = heuristic_config(find_op("causal_conv1d"),
                              problem("causal_conv1d", "B=8,C=4096,L=2048,W=4"), "sm_120");
    REQUIRE(c);
    CHECK(c->second.rfind("sm_90->sm_120 point", 0) == 0);
  }
}

TEST_CASE("a bad heuristic entry names its file and line") {
  const Op& op = find_op("causal_conv1d");
  const Space space = op_space(op);
  CHECK_THROWS_WITH_AS(
      parse_heuristics(op,
                       "[[heuristic]]\narch = [\"sm_90\"]\nshape = \"B=1,Q=2\"\n"
                       "config = \"threads=128,vec=8,items=2,cpb=1,load=direct\"\n",
                       "x.toml", space),
      doctest::Contains("x.toml:3"), Error);
  CHECK_THROWS_WITH_AS(
      parse_heuristics(op, "[[heuristic]]\narch = [\"sm_90\"]\nshape = \"B=1\"\n", "x.toml", space),
      doctest::Contains("needs arch, shape and config"), Error);
  CHECK_THROWS_WITH_AS(
      parse_heuristics(op,
                       "[[heuristic]]\narch = [\"sm_90\"]\nshape = \"B=1\"\n"
                       "config = \"threads=128,vec=8,items=2,cpb=0,load=direct\"\n",
                       "x.toml", space),
      doctest::Contains("cpb"), Error);
}

TEST_CASE("a configuration from another problem is adapted where its tile would idle") {
  const Op& conv = find_op("causal_conv1d");
  Config tuned = parse_fields("threads=128,vec=4,items=4,cpb=1,load=smem", "config");
  SUBCASE("a short sequence: fewer items per thread, then more channels per block") {
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=64,C=1536,L=333,W=2"))) ==
          "threads=128,vec=4,items=1,cpb=1,load=smem");
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=64,C=1536,L=100,W=4"))) ==
          "threads=128,vec=4,items=1,cpb=4,load=smem");
  }
  SUBCASE("a long sequence keeps the configuration") {
    CHECK(conv.adapt(tuned, problem("causal_conv1d", "B=2,C=4096,L=4095,W=3")) == tuned);
  }
  SUBCASE("the heuristic's choice comes adapted") {
    auto c = heuristic_config(conv, problem("causal_conv1d", "B=64,C=3072,L=333,W=2"), "sm_90a");
    REQUIRE(c);
    CHECK(conv.worth_measuring(c->first, problem("causal_conv1d", "B=64,C=3072,L=333,W=2")));
  }
}

// The distance between problems that the runtime's nearest policy and the tuner's
// transfer share: doublings of size fields, weighted; other fields must agree.
#include "runtime/ops/distance.hpp"
#include "runtime/ops/op.hpp"

#include <doctest/doctest.h>

#include <cmath>

using namespace autotune;

namespace {

Problem attention(const std::string& shape) {
  return find_op("attention").make_problem(parse_fields(shape, "shape"));
}

const ArgsDesc& attention_desc() {
  return find_op("attention").args_desc();
}

} // namespace

TEST_CASE("size fields count by doublings, weighted by FieldDesc::distance") {
  const ArgsDesc& desc = attention_desc();
  Problem a = attention("B=8,H=32,S=2048,D=64,dtype=bf16");
  SUBCASE("a problem is at distance 0 from itself") {
    CHECK(problem_distance(desc, a, a) == 0.0);
  }
  SUBCASE("B halved and S doubled: one doubling each of B, Sq and Sk") {
    Problem b = attention("B=4,H=32,S=4096,D=64,dtype=bf16");
    REQUIRE(problem_distance(desc, a, b).has_value());
    CHECK(*problem_distance(desc, a, b) == doctest::Approx(3.0));
    CHECK(*problem_distance(desc, b, a) == doctest::Approx(3.0));
  }
  SUBCASE("the head dim weighs 4 per doubling") {
    Problem b = attention("B=8,H=32,S=2048,D=128,dtype=bf16");
    CHECK(*problem_distance(desc, a, b) == doctest::Approx(4.0));
  }
  SUBCASE("sizes that are not powers of two count by their log ratio") {
    Problem b = attention("B=8,H=32,S=3000,D=64,dtype=bf16");
    CHECK(*problem_distance(desc, a, b) == doctest::Approx(2 * std::log2(3000.0 / 2048.0)));
  }
}

TEST_CASE("problems that differ in a field that is not a size have no distance") {
  const ArgsDesc& desc = attention_desc();
  Problem a = attention("B=8,H=32,S=2048,D=64,dtype=bf16");
  for (const char* other : {"B=8,H=32,S=2048,D=64,dtype=fp16", "B=8,H=32,S=2048,D=64,causal=1",
                            "B=8,H=32,S=2048,D=64,layout=bhsd", "B=8,H=32,S=2048,D=64,lse=1"}) {
    CAPTURE(other);
    Problem b = attention(other);
    CHECK_FALSE(problem_distance(desc, a, b).has_value());
    ProblemDistance d = compare_problems(desc, a, b);
    CHECK(d.comparable);
    CHECK(d.differing == 1);
    CHECK(d.size == 0.0);
  }
  Problem both = attention("B=4,H=32,S=2048,D=64,dtype=fp16,causal=1");
  ProblemDistance d = compare_problems(desc, a, both);
  CHECK(d.differing == 2);
  CHECK(d.size == doctest::Approx(1.0));
}

TEST_CASE("problems whose fields do not line up, or whose sizes are not numbers, are not "
          "comparable") {
  const ArgsDesc& desc = attention_desc();
  Problem a = attention("B=8,H=32,S=2048,D=64");
  // Problem fields are set whole (FieldList): change a copy of their text.
  auto changed = [&](auto&& change) {
    Fields f = a.fields.text();
    change(f);
    Problem p = a;
    p.fields = f;
    return p;
  };
  Problem shorter = changed([](Fields& f) { f.pop_back(); });
  CHECK_FALSE(compare_problems(desc, a, shorter).comparable);
  Problem renamed = changed([](Fields& f) { f[0].first = "batch"; });
  CHECK_FALSE(compare_problems(desc, a, renamed).comparable);
  for (const char* bad : {"0", "-4", "x", "", "inf", "nan", "8x"}) {
    CAPTURE(bad);
    Problem damaged = changed([&](Fields& f) { f[0].second = bad; });
    CHECK_FALSE(compare_problems(desc, a, damaged).comparable);
    CHECK_FALSE(problem_distance(desc, damaged, a).has_value());
  }
}

TEST_CASE("each op weighs the fields its kernels are instantiated for") {
  const Op& conv = find_op("causal_conv1d");
  Problem w4 = conv.make_problem(parse_fields("B=8,C=4096,L=2048,W=4", "shape"));
  Problem w2 = conv.make_problem(parse_fields("B=8,C=4096,L=2048,W=2", "shape"));
  CHECK(*problem_distance(conv.args_desc(), w4, w2) == doctest::Approx(4.0));
  const Op& scan = find_op("selective_scan");
  Problem n16 = scan.make_problem(parse_fields("B=8,D=2048,L=2048,N=16", "shape"));
  Problem n8 = scan.make_problem(parse_fields("B=8,D=2048,L=4096,N=8", "shape"));
  CHECK(*problem_distance(scan.args_desc(), n16, n8) == doctest::Approx(5.0));
}

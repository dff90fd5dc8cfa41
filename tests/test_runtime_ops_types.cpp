// Typed problem fields and configurations (FieldList): parsed once, read without
// parsing, and spelled exactly as the string form they replace, so stored problem
// keys, configuration ids and variant keys do not change.
#include "runtime/base/error.hpp"
#include "runtime/base/hash.hpp"
#include "runtime/base/strings.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/space.hpp"

#include <doctest/doctest.h>

using namespace autotune;

TEST_CASE("a field list types each value once and keeps its text and canonical key") {
  FieldList f = parse_fields("B=8,dtype=bf16,layout=bshd,w=fp32,n=-3", "f");
  REQUIRE(f.size() == 5);
  CHECK(f.key() == "B=8,dtype=bf16,layout=bshd,w=fp32,n=-3");
  CHECK(f.key() == format_fields(f));
  CHECK(f.kind(0) == FieldList::Kind::integer);
  CHECK(f.integer(0) == 8);
  CHECK(f.kind(1) == FieldList::Kind::dtype);
  CHECK(f.dtype(1) == DType::bf16);
  CHECK(f.kind(2) == FieldList::Kind::word);
  CHECK(f.dtype(3) == DType::f32);
  CHECK(f.integer(4) == -3);
  CHECK(f.index("layout") == 2);
  CHECK(f.index("nope") == -1);
  SUBCASE("assigning new fields types them again") {
    f = Fields{{"B", "16"}, {"x", "half"}};
    CHECK(f.key() == "B=16,x=half");
    CHECK(f.integer(0) == 16);
    CHECK(f.kind(1) == FieldList::Kind::word); // only canonical dtype names are typed
  }
  SUBCASE("equal lists are equal by their key") {
    CHECK(f == FieldList(parse_fields("B=8,dtype=bf16,layout=bshd,w=fp32,n=-3", "f")));
    CHECK(f != FieldList(parse_fields("B=8", "f")));
  }
}

TEST_CASE("a problem reads its typed fields, with the errors the text gave") {
  Problem p{"demo", Fields{{"B", "4"}, {"x", "fp16"}, {"y", "float"}, {"layout", "bcl"}}};
  CHECK(p.key() == "B=4,x=fp16,y=float,layout=bcl");
  CHECK(p.get_int("B") == 4);
  CHECK(p.get_dtype("x") == DType::f16);
  CHECK(p.get_dtype("y") == DType::f32); // an alias parse_dtype accepts
  CHECK(p.get("layout") == "bcl");
  CHECK_THROWS_WITH_AS(p.get_int("layout"), "demo field layout: expected an integer, got 'bcl'",
                       Error);
  CHECK_THROWS_WITH_AS(p.get("C"), "demo problem has no field 'C'", Error);
  CHECK_THROWS_AS(p.get_dtype("layout"), Error);
}

namespace {

// What the databases store for an op's benchmark problems under its default
// configuration: the problem keys, and per problem the NVRTC options (with the
// template hash, NVRTC version and arch, the variant key) and launch geometry.
struct Canonical {
  std::string first_key;
  std::string default_config;
  std::string keys_sha256;
  std::string variants_sha256;
  size_t problems = 0;
};

Canonical canonical(const Op& op) {
  Canonical out;
  Config c = op_space(op).default_config;
  out.default_config = config_id(c);
  std::string keys;
  std::string variants;
  for (const std::string& shape : op.default_shapes()) {
    Problem p = op.make_problem(parse_fields(shape, "shape"));
    if (out.first_key.empty()) {
      out.first_key = p.key();
    }
    LaunchGeometry g = op.geometry(c, p);
    keys += p.key() + "\n";
    variants += p.key() + "|" + join(op.defines(c, p), " ") + "|" + std::to_string(g.grid[0]) +
                "," + std::to_string(g.grid[1]) + "," + std::to_string(g.grid[2]) + "," +
                std::to_string(g.block[0]) + "," + std::to_string(g.dynamic_smem) + "\n";
    ++out.problems;
  }
  out.keys_sha256 = sha256_hex(keys);
  out.variants_sha256 = sha256_hex(variants);
  return out;
}

} // namespace

// Pinned with the string-typed Problem (before FieldList): a change here changes
// the tuning keys of every stored winner. Re-pin only for a deliberate change of an
// op's fields, defaults or space, never for a refactoring.
TEST_CASE("the benchmark problems and default configurations keep their stored spelling") {
  SUBCASE("attention") {
    Canonical c = canonical(find_op("attention"));
    CHECK(c.problems == 51);
    CHECK(c.first_key ==
          "B=32,Hq=32,Hkv=32,Sq=512,Sk=512,D=64,causal=0,dtype=bf16,lse=0,layout=bshd");
    CHECK(c.default_config ==
          "block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=1,family=mma");
    CHECK(c.keys_sha256 == "2951b662427edb223abe983e531df9dd3a96623618c7034f461513b9ab31ea3e");
    CHECK(c.variants_sha256 == "a3366c7719d3191c6cd4f3251e8a8360967a1916932363c4df0a8e14da2e5907");
  }
  SUBCASE("causal_conv1d") {
    Canonical c = canonical(find_op("causal_conv1d"));
    CHECK(c.problems == 5);
    CHECK(c.first_key == "B=8,C=4096,L=2048,W=4,x=bf16,w=bf16,bias=1,silu=1,init_states=0,"
                         "final_states=0,layout=bcl");
    CHECK(c.default_config == "threads=128,vec=8,items=2,cpb=1,load=direct");
    CHECK(c.keys_sha256 == "7244f8f6961b716e51fa76f6ef0f9182ecd27e291d65ad5045ee70e5927b85b1");
    CHECK(c.variants_sha256 == "2e3839d25b7a02996d3d09f01b3de3c1512476547f5b53b2c254ea3d02bccbff");
  }
  SUBCASE("selective_scan") {
    Canonical c = canonical(find_op("selective_scan"));
    CHECK(c.problems == 4);
    CHECK(c.first_key == "B=8,D=2048,L=2048,N=16,G=1,dtype=bf16,var_bc=1,delta_bias=1,softplus=1,"
                         "has_d=1,has_z=1,last_state=0");
    CHECK(c.default_config == "threads=32,items=16,cpb=1,nsplit=1,scan=shfl,vec=8,poly=0,"
                              "minblocks=1,tsplit=1,bc=f32,cpl=1,ystore=after,yred=0,ragged=regs");
    CHECK(c.keys_sha256 == "ff4c287a354be26139b3f2ff49503a735020d7757bba8c6b4b9085c0a2fa6ed5");
    CHECK(c.variants_sha256 == "f1ae735679c0895e4e7e0d5a6cb63c2da7bd4fd0ab11022306fb07a400e98f02");
  }
}

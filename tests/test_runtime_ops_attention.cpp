#include "runtime/base/error.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/attention.hpp"
#include "runtime/ops/heuristic.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

using namespace autotune;

namespace {
const AttentionOp& attn() {
  return static_cast<const AttentionOp&>(find_op("attention"));
}
Problem problem(const std::string& shape) {
  return attn().make_problem(parse_fields(shape, "t"));
}
Config config(const std::string& text) {
  return parse_fields(text, "config");
}
const char* k_fa2 = "block_m=128,block_n=64,warps=4,stages=1,swizzle=xor,q=smem";
} // namespace

TEST_CASE("attention problems are canonical, with documented defaults") {
  Problem p = problem("B=8,H=16,S=2048,D=128");
  CHECK(p.key() == "B=8,Hq=16,Hkv=16,Sq=2048,Sk=2048,D=128,causal=0,dtype=bf16,lse=0,layout=bshd");
  CHECK(problem("B=1,Hq=32,Hkv=8,Sq=3,Sk=70,D=64,causal=true,dtype=float16,lse=1,layout=bhsd")
            .key() == "B=1,Hq=32,Hkv=8,Sq=3,Sk=70,D=64,causal=1,dtype=fp16,lse=1,layout=bhsd");
  CHECK(attn().default_shapes().size() == 51);
  for (const auto& s : attn().default_shapes()) {
    CHECK_NOTHROW(problem(s));
  }
}

TEST_CASE("bad attention shapes are rejected with the field named") {
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,S=8,D=100"), doctest::Contains("D=100 is not supported"),
                       Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,S=8,D=24"), doctest::Contains("D=24 is not supported"),
                       Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,S=8,D=264"), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,Hq=6,Hkv=4,S=8,D=64"),
                       doctest::Contains("not a multiple of Hkv"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,D=64"), doctest::Contains("missing field 'Sq'"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,S=8,D=64,dropout=1"), doctest::Contains("unknown field"),
                       Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,S=8,D=64,window=3"),
                       doctest::Contains("window=3 must be 0 or 1"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,S=8,D=64,softcap=30"),
                       doctest::Contains("softcap=30 must be 0 or 1"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,S=8,D=64,dtype=fp32"), doctest::Contains("fp32"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=4,S=8,D=64,layout=sbhd"), doctest::Contains("layout"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=8,Hq=16,S=128,D=64"), doctest::Contains("Hq and H disagree"),
                       Error);
  CHECK_THROWS_WITH_AS(problem("B=1,H=8,S=128,Sq=64,D=64"), doctest::Contains("Sq and S disagree"),
                       Error);
  CHECK(problem("B=1,H=8,Hq=8,S=128,D=64").key().find("Hq=8,") != std::string::npos);
}

TEST_CASE("attention configuration constraints drop what cannot run") {
  Problem d128 = problem("B=8,H=16,S=2048,D=128");
  CHECK(attn().check(config(k_fa2), d128, "sm_80"));
  SUBCASE("rows per warp") {
    for (const char* c : {"block_m=48,block_n=64,warps=4,stages=1,swizzle=xor,q=smem",
                          "block_m=320,block_n=64,warps=4,stages=1,swizzle=xor,q=smem"}) {
      auto r = attn().check(config(c), d128, "sm_90a");
      REQUIRE_FALSE(r);
      CHECK(r.failure().message.find("query rows") != std::string::npos);
    }
  }
  SUBCASE("warps sharing rows split whole 16-key steps, and only decoding blocks are measured") {
    Problem decode = problem("B=8,Hq=32,Hkv=8,Sq=1,Sk=1024,D=128,causal=1,paged=1,page=256");
    Config four = config("block_m=16,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=4");
    CHECK(attn().check(four, decode, "sm_90a"));
    CHECK(attn().worth_measuring(four, decode));
    // Valid on a long problem too (the kernel takes any Sq), but not worth measuring.
    Config four_whole = config("block_m=16,block_n=64,warps=4,stages=2,swizzle=xor,q=smem");
    CHECK(attn().check(four_whole, d128, "sm_90a"));
    auto long_rows = attn().worth_measuring(four_whole, d128);
    REQUIRE_FALSE(long_rows);
    CHECK(long_rows.failure().message.find("decoding") != std::string::npos);
    auto r = attn().check(config("block_m=16,block_n=48,warps=4,stages=2,swizzle=xor,q=smem"),
                          decode, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("16-key") != std::string::npos);
  }
  SUBCASE("a decoding winner of warps sharing rows, borrowed by a longer problem, gets a "
          "warp per 16 rows") {
    Config four = config("block_m=16,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=4");
    Problem decode = problem("B=8,Hq=32,Hkv=8,Sq=1,Sk=1024,D=128,causal=1,paged=1,page=256");
    CHECK(attn().adapt(four, decode) == four); // 4 grouped heads as rows: one block holds them
    Problem prefill = problem("B=8,Hq=32,Hkv=8,Sq=20,Sk=1024,D=128,causal=1,paged=1,page=256");
    // 20 query rows per head; 256 query blocks fill the GPU twice: no key splits.
    const Config wider = attn().adapt(four, prefill);
    CHECK(wider == config("block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=1"));
    CHECK(attn().check(wider, prefill, "sm_90a"));
    Config eight = config("block_m=32,block_n=128,warps=8,stages=1,swizzle=xor,q=smem,splits=1");
    CHECK(attn().adapt(eight, d128) ==
          config("block_m=128,block_n=128,warps=8,stages=1,swizzle=xor,q=smem,splits=1"));
    Config hopper =
        config("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma");
    CHECK(attn().adapt(hopper, d128) == hopper);
    // A Hopper tile of two consumers for a problem of fewer query tiles than fill the GPU:
    // one consumer, twice the blocks; 64-row tiles and problems that fill it stay.
    const Problem short_q = problem("B=2,Hq=8,Hkv=1,Sq=100,Sk=1023,D=64,causal=1,dtype=fp16");
    const Config two = config("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,"
                              "splits=1,family=wgmma_persistent");
    const Config one = attn().adapt(two, short_q);
    CHECK(one == config("block_m=64,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                        "family=wgmma_persistent"));
    CHECK(attn().check(one, short_q, "sm_90a"));
    CHECK(attn().adapt(one, short_q) == one);
    CHECK(attn().adapt(two, problem("B=16,Hq=48,Hkv=1,Sq=100,Sk=1023,D=128,causal=1")) == two);
    // Without a causal order, a persistent grid of no more tiles than blocks is the plain
    // one: the plain family of the same schedule (what the tuner measures).
    const Problem short_nc = problem("B=3,Hq=32,Hkv=32,Sq=4,Sk=333,D=64");
    const Config overlap_p = config("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,"
                                    "q=smem,splits=1,family=wgmma_overlap_persistent");
    const Config plain = attn().adapt(overlap_p, short_nc);
    CHECK(plain == config("block_m=64,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                          "family=wgmma_overlap"));
    CHECK(attn().check(plain, short_nc, "sm_90a"));
    CHECK(attn().worth_measuring(plain, short_nc));
    // At most 64 query rows a head, however many heads: 64-row blocks; ping-pong (two
    // consumers) becomes the plain schedule.
    const Problem few_rows = problem("B=64,Hq=32,Hkv=32,Sq=16,Sk=1000,D=256");
    const Config pp = config("block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,"
                             "splits=1,family=wgmma_pingpong");
    CHECK(attn().adapt(pp, few_rows) ==
          config("block_m=64,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                 "family=wgmma"));
    CHECK(attn().check(attn().adapt(pp, few_rows), few_rows, "sm_90a"));
    const Problem few_rows64 = problem("B=64,Hq=32,Hkv=32,Sq=16,Sk=1000,D=64,softcap=1");
    CHECK(attn().adapt(config("block_m=128,block_n=128,warps=4,stages=1,swizzle=pad,q=smem,"
                              "splits=1,family=mma"),
                       few_rows64) == config("block_m=64,block_n=128,warps=4,stages=1,"
                                             "swizzle=pad,q=smem,splits=1,family=mma"));
    // A three-stage ring over fewer than four key tiles keeps two (either family).
    const Problem short_k = problem("B=16,Hq=32,Hkv=32,Sq=300,Sk=300,D=64");
    CHECK(attn().adapt(config("block_m=128,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,"
                              "splits=1,family=wgmma"),
                       short_k) == config("block_m=128,block_n=128,warps=4,stages=2,"
                                          "swizzle=xor,q=smem,splits=1,family=wgmma"));
    CHECK(attn().adapt(config("block_m=64,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,"
                              "splits=1,family=mma"),
                       short_k) == config("block_m=64,block_n=128,warps=4,stages=2,"
                                          "swizzle=xor,q=smem,splits=1,family=mma"));
    const Problem long_nc = problem("B=4,Hq=32,Hkv=32,Sq=4096,Sk=4096,D=64");
    CHECK(attn().adapt(overlap_p, long_nc) == overlap_p); // 1024 tiles: the loop pays
    // A decoding point's key splits over a shorter cache: two key tiles a split at least.
    const Config split4 = config("block_m=64,block_n=128,warps=4,stages=1,swizzle=pad,q=regs,"
                                 "splits=4,family=mma");
    auto splits_for = [&](int sk) {
      const Problem p = problem("B=4,H=16,Sq=1,Sk=" + std::to_string(sk) + ",D=64,causal=1");
      const Config a = attn().adapt(split4, p);
      CHECK(attn().check(a, p, "sm_90a"));
      CHECK(attn().worth_measuring(a, p));
      const std::string* s = find_field(a, "splits");
      REQUIRE(s != nullptr);
      return *s;
    };
    CHECK(splits_for(333) == "1");  // 3 key tiles
    CHECK(splits_for(600) == "2");  // 5
    CHECK(splits_for(1024) == "4"); // 8: as it was
    CHECK(splits_for(4096) == "4"); // 64 blocks x 4: two an SM
  }
  SUBCASE("a decoding point takes the problem's own key splits and stages") {
    const Config point = config("block_m=32,block_n=128,warps=4,stages=1,swizzle=xor,q=regs,"
                                "splits=4,family=mma");
    auto adapted = [&](const std::string& shape) {
      const Problem p = problem(shape);
      const Config a = attn().adapt(point, p);
      CHECK(attn().check(a, p, "sm_90a"));
      CHECK(attn().worth_measuring(a, p));
      const std::string* splits = find_field(a, "splits");
      const std::string* stages = find_field(a, "stages");
      REQUIRE(splits != nullptr);
      REQUIRE(stages != nullptr);
      return *splits + "/" + *stages;
    };
    // One query row a block (MHA): B x Hkv blocks, doubled up to 256 (two an SM).
    CHECK(adapted("B=1,Hq=32,Hkv=32,Sq=1,Sk=2000,D=128") == "8/1"); // 32 blocks
    CHECK(adapted("B=2,Hq=32,Hkv=32,Sq=1,Sk=8000,D=128") == "4/1"); // 64
    CHECK(adapted("B=16,Hq=32,Hkv=32,Sq=1,Sk=700,D=128") == "1/1"); // 512
    // Grouped heads as rows: 8 rows of each of 4 K/V heads; 8 blocks split 16 ways, each
    // alone on its SM: two stages. 256 blocks share SMs: the point's one.
    CHECK(adapted("B=2,Hq=32,Hkv=4,Sq=1,Sk=32768,D=128") == "16/2");
    CHECK(adapted("B=32,Hq=32,Hkv=8,Sq=1,Sk=16384,D=128") == "1/1");
    // Three key tiles, no split: two stages for a block alone on its SM, one where
    // blocks share SMs.
    CHECK(adapted("B=4,Hq=16,Hkv=16,Sq=1,Sk=333,D=64") == "1/2");  // 64 blocks
    CHECK(adapted("B=64,Hq=12,Hkv=12,Sq=1,Sk=200,D=64") == "1/1"); // 768
    CHECK(adapted("B=8,Hq=32,Hkv=4,Sq=1,Sk=1500,D=64") == "4/2");  // 32 x 4, 3 tiles each
    // One key tile: one stage.
    CHECK(adapted("B=2,Hq=8,Hkv=8,Sq=1,Sk=100,D=128") == "1/1");
    // A few new queries a head (speculative decoding): the group's 4 x 4 rows in one
    // block too, 32 blocks split 4 ways, two stages.
    CHECK(adapted("B=4,Hq=32,Hkv=8,Sq=4,Sk=1500,D=128") == "4/2");
    // A longer problem: a warp per 16 rows, the point's splits up to the fill (256 query
    // blocks of 64 rows fill the GPU twice: none).
    CHECK(attn().adapt(point, problem("B=1,H=8,Sq=2048,Sk=2048,D=128")) ==
          config("block_m=64,block_n=128,warps=4,stages=1,swizzle=xor,q=regs,splits=1,"
                 "family=mma"));
    CHECK(attn().adapt(point, problem("B=1,H=2,Sq=256,Sk=8192,D=128")) == // 8 blocks
          config("block_m=64,block_n=128,warps=4,stages=1,swizzle=xor,q=regs,splits=4,"
                 "family=mma"));
  }
  SUBCASE("registers") {
    auto r = attn().check(config("block_m=128,block_n=128,warps=4,stages=1,swizzle=xor,q=regs"),
                          d128, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("registers") != std::string::npos);
  }
  SUBCASE("shared memory depends on the arch") {
    Config c = config("block_m=128,block_n=64,warps=8,stages=3,swizzle=xor,q=smem");
    CHECK(attn().check(c, d128, "sm_90a"));
    auto r = attn().check(c, d128, "sm_86");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("shared memory") != std::string::npos);
  }
  SUBCASE("the default variant runs every head dim on every arch") {
    Space space = parse_space(template_file(attn().space_path()), attn().space_path());
    for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_120"}) {
      for (const char* d : {"64", "128", "256"}) {
        CHECK(attn().check(space.default_config,
                           problem(std::string("B=1,H=2,S=100,D=") + d + ",causal=1"), arch));
      }
    }
  }
  SUBCASE("unknown parameters are configuration errors") {
    CHECK_THROWS_AS(attn().check(config("block_m=128,block_n=64,warps=4,stages=1,swizzle=xor,"
                                        "q=smem,clusters=2"),
                                 d128, "sm_90a"),
                    Error);
  }
}

TEST_CASE("split-KV variants serve problems with few query blocks, with a sized workspace") {
  Problem decode = problem("B=2,Hq=8,Hkv=2,Sq=1,Sk=4096,D=128");
  Config split4 = config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=4");
  REQUIRE(attn().check(split4, decode, "sm_90a"));
  CHECK(attn().worth_measuring(split4, decode));
  // The 4 query heads of a K/V head run as 4 rows of it: one query block per (batch,
  // K/V head), four splits of it.
  CHECK(attn().geometry(split4, decode).grid[0] == 4);
  CHECK(attn().geometry(split4, decode).grid[1] == 2);
  // A counter per query block (4, padded to 16 bytes), then partial O and LSE per split
  // and row (2 x 8 rows).
  CHECK(attn().workspace_bytes(split4, decode) == size_t((4 + 4 * 16 * 1 * 129) * 4));
  CHECK(attn().workspace_bytes(config(k_fa2), decode) == 0);
  // The tuner's tensors carry a zero-filled workspace for the most splits.
  auto t = attn().tensors(decode);
  REQUIRE(t.back().name == "workspace");
  CHECK(t.back().lo == 0.0f);
  CHECK(t.back().hi == 0.0f);
  CHECK_FALSE(t.back().output);
  SUBCASE("large problems are not split") {
    auto r = attn().check(split4, problem("B=8,H=16,S=2048,D=128"), "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("split-KV is for problems") != std::string::npos);
    CHECK(attn().tensors(problem("B=8,H=16,S=2048,D=128")).back().name == "o");
  }
  SUBCASE("splits are powers of two up to 16, with two key tiles each") {
    CHECK_FALSE(attn().check(config(std::string(k_fa2) + ",splits=3"), decode, "sm_90a"));
    CHECK(attn().check(config(std::string(k_fa2) + ",splits=16"), decode, "sm_90a"));
    CHECK_FALSE(attn().check(config(std::string(k_fa2) + ",splits=32"), decode, "sm_90a"));
    CHECK_FALSE(attn().worth_measuring(split4, problem("B=1,H=2,Sq=1,Sk=256,D=128")));
  }
  SUBCASE("a call without the workspace is refused with the size it needs") {
    AttentionCall call;
    call.q = call.k = call.v = call.o = 256;
    ArgPack args;
    CHECK_THROWS_WITH_AS(attn().pack_call(split4, decode, call, args),
                         doctest::Contains("workspace of 33040 bytes"), Error);
  }
}

TEST_CASE("decoding with grouped heads runs each group's query heads as rows of its K/V head") {
  const auto has = [](const std::vector<std::string>& defines, const std::string& d) {
    return std::find(defines.begin(), defines.end(), d) != defines.end();
  };
  const Config c = config(k_fa2);
  SUBCASE("one query row, Hq = 4 Hkv: Hkv heads of 4 rows, causal a no-op") {
    const Problem p = problem("B=3,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128,causal=1,lse=1");
    const LaunchGeometry g = attn().geometry(c, p);
    CHECK(g.grid[0] == 1);
    CHECK(g.grid[1] == 8);
    CHECK(g.grid[2] == 3);
    CHECK(has(attn().defines(c, p), "-DAT_CAUSAL=0"));
    // The tensors are the described ones: q, o [3, 32, 1, 128], lse [3, 32, 1].
    const auto t = attn().tensors(p);
    CHECK(t[0].elements == size_t(3 * 32 * 128));
    CHECK(t[4].elements == size_t(3 * 32));
  }
  SUBCASE("several queries a head, or a window: rows of the group's heads in turn") {
    // 4 heads x 5 queries: 20 rows of each of the 8 K/V heads, still causal (each row
    // masked at its own query's diagonal), AT_GROUPED; the Hopper family refuses it.
    const Problem p = problem("B=3,Hq=32,Hkv=8,Sq=5,Sk=4096,D=128,causal=1,lse=1");
    const LaunchGeometry g = attn().geometry(c, p);
    CHECK(g.grid[0] == 1);
    CHECK(g.grid[1] == 8);
    CHECK(has(attn().defines(c, p), "-DAT_CAUSAL=1"));
    CHECK(has(attn().defines(c, p), "-DAT_GROUPED=1"));
    const auto t = attn().tensors(p);
    CHECK(t[0].elements == size_t(3 * 32 * 5 * 128));
    CHECK(t[4].elements == size_t(3 * 32 * 5));
    // The work counted is the described problem's: 32 heads of 5 queries, causal.
    const double pairs = 4092 + 4093 + 4094 + 4095 + 4096;
    CHECK(attn().flops(p) == doctest::Approx(4.0 * 3 * 32 * pairs * 128));
    const Config wgmma = config("block_m=64,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,"
                                "splits=1,family=wgmma");
    const Result<bool> refused = attn().check(wgmma, p, "sm_90a");
    REQUIRE_FALSE(refused.ok());
    CHECK_MESSAGE(refused.failure().message.find("as rows") != std::string::npos,
                  refused.failure().message);
    // One query under a window: the same form (the window is the row's query's).
    const Problem w = problem("B=3,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128,window=1");
    CHECK(attn().geometry(c, w).grid[1] == 8);
    CHECK(has(attn().defines(c, w), "-DAT_GROUPED=1"));
    // The single-query form needs no AT_GROUPED: its rows are one stride apart.
    CHECK_FALSE(
        has(attn().defines(c, problem("B=3,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128")), "-DAT_GROUPED=1"));
  }
  SUBCASE("not past 16 queries, with ALiBi or with one query head per K/V head") {
    for (const auto& [shape, heads] :
         {std::pair{"B=3,Hq=32,Hkv=8,Sq=17,Sk=4096,D=128", 32u},
          std::pair{"B=3,Hq=32,Hkv=8,Sq=1,Sk=4096,D=128,alibi=1", 32u},
          std::pair{"B=3,Hq=32,Hkv=8,Sq=4,Sk=4096,D=128,alibi=1", 32u},
          std::pair{"B=3,Hq=8,Hkv=8,Sq=1,Sk=4096,D=128,causal=1", 8u}}) {
      CAPTURE(shape);
      CHECK(attn().geometry(c, problem(shape)).grid[1] == heads);
      CHECK_FALSE(has(attn().defines(c, problem(shape)), "-DAT_GROUPED=1"));
    }
    CHECK(has(attn().defines(c, problem("B=3,Hq=8,Hkv=8,Sq=1,Sk=4096,D=128,causal=1")),
              "-DAT_CAUSAL=1"));
  }
}

TEST_CASE("attention geometry, tensors and FLOPs follow the problem") {
  Problem p = problem("B=3,Hq=8,Hkv=2,Sq=1000,Sk=1000,D=64,causal=1,lse=1");
  LaunchGeometry g = attn().geometry(config(k_fa2), p);
  CHECK(g.block[0] == 128);
  CHECK(g.grid[0] == 8); // ceil(1000 / 128)
  CHECK(g.grid[1] == 8);
  CHECK(g.grid[2] == 3);
  CHECK(g.dynamic_smem == (128 + 2 * 64) * 64 * 2);
  auto t = attn().tensors(p);
  REQUIRE(t.size() == 5);
  CHECK(t[1].elements == size_t(3 * 2 * 1000 * 64));
  CHECK(t[4].name == "lse");
  CHECK(t[4].dtype == DType::f32);
  CHECK(attn().flops(p) == doctest::Approx(4.0 * 3 * 8 * 1000 * 1000 * 64 / 2));
  CHECK_FALSE(attn().memory_bound());
  // Bottom-right causal with Sq < Sk: query i sees i + Sk - Sq + 1 keys.
  Problem r = problem("B=1,H=1,Sq=2,Sk=5,D=64,causal=1");
  CHECK(attn().flops(r) == doctest::Approx(4.0 * (4 + 5) * 64));
  // ... and with Sq > Sk the first Sq - Sk queries see none: 0, 0, 0, 1, 2 keys.
  Problem tall = problem("B=1,H=1,Sq=5,Sk=2,D=64,causal=1");
  CHECK(attn().flops(tall) == doctest::Approx(4.0 * (1 + 2) * 64));
  // The grid covers every query block, also those whose rows see no key (they store
  // O = 0 and LSE = -inf and exit).
  CHECK(attn().geometry(config(k_fa2), problem("B=1,H=2,Sq=1000,Sk=1,D=64,causal=1")).grid[0] == 8);
  AttentionOp::Strides bshd = AttentionOp::contiguous_strides(p, 8, 1000);
  CHECK(bshd.seq == 8 * 64);
  CHECK(bshd.head == 64);
}

TEST_CASE("attention variants compile for every target arch") {
  // One variant per arch keeps this cheap (an attention kernel takes about a
  // second of NVRTC); sm_90a and sm_120 are the ends of the range.
  Problem p = problem("B=1,Hq=8,Hkv=2,Sq=100,Sk=300,D=128,causal=1,lse=1,dtype=fp16");
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_120"}) {
    CAPTURE(arch);
    Config c = config(std::string(arch) == "sm_90a" ? k_fa2
                                                    : "block_m=64,block_n=64,warps=4,stages=2,"
                                                      "swizzle=pad,q=regs");
    REQUIRE(attn().check(c, p, arch));
    auto out = compile_variant(describe_variant(attn(), c, p, arch));
    REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().detail));
    CHECK(!out->binary.empty());
  }
  // A split-KV variant at both ends of the range.
  for (const char* arch : {"sm_80", "sm_120"}) {
    CAPTURE(arch);
    Config c = config("block_m=64,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=4");
    REQUIRE(attn().check(c, p, arch));
    auto out = compile_variant(describe_variant(attn(), c, p, arch));
    REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().detail));
  }
}

TEST_CASE("the Hopper attention family (family=wgmma) is valid on sm_90a only, for the shapes it "
          "handles") {
  const char* k_wg = "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                     "family=wgmma";
  Problem d128 = problem("B=8,H=16,S=2048,D=128,causal=1");
  CHECK(attn().check(config(k_wg), d128, "sm_90a"));
  auto refused = [&](const std::string& c, const Problem& p, const std::string& arch,
                     const char* why) {
    CAPTURE(c);
    auto r = attn().check(config(c), p, arch);
    REQUIRE_FALSE(r);
    CHECK_MESSAGE(r.failure().message.find(why) != std::string::npos, r.failure().message);
  };
  SUBCASE("other archs") {
    for (const char* arch : {"sm_80", "sm_89", "sm_90", "sm_100", "sm_120"}) {
      refused(k_wg, d128, arch, "needs sm_90a");
    }
  }
  SUBCASE("head dims under 64 take tiles of 64 columns, over 128 those of 192 or 256") {
    // (the columns past D zero-filled by TMA): the same shared memory as D=64 / 192 / 256,
    // and at D over 128 one block an SM (a 128 x 128 tile of 2 stages does not fit).
    for (int D : {32, 40, 48, 56}) {
      CAPTURE(D);
      const Problem pd = problem("B=1,H=2,S=256,D=" + std::to_string(D));
      CHECK(attn().check(config(k_wg), pd, "sm_90a"));
      CHECK(attn().geometry(config(k_wg), pd).dynamic_smem ==
            attn().geometry(config(k_wg), problem("B=1,H=2,S=256,D=64")).dynamic_smem);
    }
    const char* fa3 = "block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                      "family=wgmma";
    for (int D : {136, 160, 192, 200, 248}) {
      CAPTURE(D);
      const Problem pd = problem("B=1,H=2,S=256,D=" + std::to_string(D));
      CHECK(attn().check(config(fa3), pd, "sm_90a"));
      const long long cols = D <= 192 ? 192 : 256;
      CHECK(attn().geometry(config(fa3), pd).dynamic_smem ==
            (128 + 2 * 2 * 80) * cols * 2 + 8 * (2 + 4 * 2) + 1024);
      CHECK_FALSE(attn().check(config(k_wg), pd, "sm_90a"));
      const auto defs = attn().defines(config(fa3), pd);
      CHECK(std::find(defs.begin(), defs.end(), "-DAT_ONE_P=0") != defs.end());
    }
  }
  SUBCASE("head dims between 64 and 128 take the tiles of 128 (the columns past D zero)") {
    for (int D : {72, 80, 96, 112}) {
      CAPTURE(D);
      const Problem pd = problem("B=1,H=2,S=256,D=" + std::to_string(D));
      CHECK(attn().check(config(k_wg), pd, "sm_90a"));
      CHECK(attn().geometry(config(k_wg), pd).dynamic_smem ==
            attn().geometry(config(k_wg), problem("B=1,H=2,S=256,D=128")).dynamic_smem);
    }
  }
  SUBCASE("D=256: O takes 128 registers of the 240, K/V stages 512 bytes a key") {
    const Problem d256 = problem("B=2,H=8,S=4096,D=256");
    // FlashAttention-3's D=256 tile: 128 x 80, 2 stages (Q 64 KiB + 4 x 40 KiB).
    const Config fa3 = config("block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,"
                              "splits=1,family=wgmma");
    CHECK(attn().check(fa3, d256, "sm_90a"));
    CHECK(
        attn().check(fa3, problem("B=1,Hq=8,Hkv=2,Sq=300,Sk=200,D=256,causal=1,lse=1"), "sm_90a"));
    const LaunchGeometry g = attn().geometry(fa3, d256);
    CHECK(g.block[0] == 384);
    CHECK(g.dynamic_smem == (128 + 2 * 2 * 80) * 256 * 2 + 8 * (2 + 4 * 2) + 1024);
    CHECK(g.dynamic_smem <= 227 * 1024);
    const auto defs = attn().defines(fa3, d256);
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_HEAD_DIM=256") != defs.end());
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_BLOCK_N=80") != defs.end());
    CHECK(attn().check(config("block_m=128,block_n=96,warps=4,stages=1,swizzle=xor,q=smem,"
                              "splits=1,family=wgmma"),
                       d256, "sm_90a"));
    CHECK(attn().check(config("block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,"
                              "splits=1,family=wgmma_pingpong"),
                       d256, "sm_90a"));
    // One consumer: one block per SM even where the shared memory fits twice (two blocks
    // of 256 threads cap the registers at 128 on entry; m64n256k16 does not compile).
    const Config one = config("block_m=64,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,"
                              "splits=1,family=wgmma");
    CHECK(attn().check(one, d256, "sm_90a"));
    const auto one_defs = attn().defines(one, d256);
    CHECK(std::find(one_defs.begin(), one_defs.end(), "-DAT_MIN_BLOCKS=1") != one_defs.end());
    const auto one_d128 = attn().defines(one, problem("B=2,H=8,S=4096,D=128"));
    CHECK(std::find(one_d128.begin(), one_d128.end(), "-DAT_MIN_BLOCKS=2") != one_d128.end());
    // O (128) + S (64) + P (32): over 240.
    refused("block_m=128,block_n=128,warps=4,stages=1,swizzle=xor,q=smem,splits=1,family=wgmma",
            d256, "sm_90a", "registers per consumer");
    // Three consumers get 160.
    refused("block_m=192,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=1,family=wgmma",
            d256, "sm_90a", "registers per consumer");
    // Overlapped, D=256 keeps one P set (two beside O spilled 64 bytes at block_n=64).
    CHECK(attn().check(config("block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,"
                              "splits=1,family=wgmma_overlap"),
                       d256, "sm_90a"));
    // The persistent tile loop spills beside O (ptxas: 68 bytes at block_n=64).
    refused("block_m=128,block_n=64,warps=4,stages=1,swizzle=xor,q=smem,splits=1,"
            "family=wgmma_persistent",
            d256, "sm_90a", "registers per consumer");
    // Q 64 KiB + 2 x 2 x 48 KiB: over 227 KiB.
    refused("block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma",
            d256, "sm_90a", "shared memory");
    refused("block_m=128,block_n=80,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma",
            d256, "sm_90a", "shared memory");
    // The sm_90a built-in points include D=256 wgmma tiles: an untuned D=256 problem takes
    // the Hopper family (the ping-pong 128 x 80 tile), one with softcap the portable one.
    for (const char* shape : {"B=2,H=8,S=4096,D=256", "B=2,H=8,S=4096,D=256,causal=1",
                              "B=32,H=16,S=512,D=256,dtype=fp16", "B=1,H=16,S=16384,D=256"}) {
      CAPTURE(shape);
      const auto h = heuristic_config(attn(), problem(shape), "sm_90a");
      REQUIRE(h);
      const std::string* fam = find_field(h->first, "family");
      REQUIRE(fam != nullptr);
      CHECK(*fam == "wgmma_pingpong");
      CHECK(attn().check(h->first, problem(shape), "sm_90a"));
    }
    // K or V broadcast with expand (a stride of 0): tensor maps cannot step it, so the
    // Hopper family refuses the problem and its heuristic is a portable point.
    refused("block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
            "family=wgmma_pingpong",
            problem("B=2,H=8,S=4096,D=256,bcast=1"), "sm_90a", "stride of 0");
    // At D=256 the portable point that fits is a decoding point's tile, widened to a warp
    // per 16 rows (64 x 128, Q in shared memory).
    const auto h256 = heuristic_config(attn(), problem("B=2,H=8,S=4096,D=256,bcast=1"), "sm_90a");
    REQUIRE(h256);
    const std::string* fam256 = find_field(h256->first, "family");
    CHECK((fam256 == nullptr || *fam256 == "mma"));
    CHECK(attn().check(h256->first, problem("B=2,H=8,S=4096,D=256,bcast=1"), "sm_90a"));
    const auto h128 = heuristic_config(attn(), problem("B=4,H=16,S=4096,D=128,bcast=1"), "sm_90a");
    REQUIRE(h128);
    const std::string* fam128 = find_field(h128->first, "family");
    CHECK((fam128 == nullptr || *fam128 == "mma"));
    // Softcap and ALiBi are built by both families: such a problem takes the Hopper point.
    for (const char* shape :
         {"B=2,H=8,S=4096,D=256,softcap=1", "B=4,H=16,S=4096,D=128,causal=1,alibi=1"}) {
      CAPTURE(shape);
      const auto h = heuristic_config(attn(), problem(shape), "sm_90a");
      REQUIRE(h);
      const std::string* fam = find_field(h->first, "family");
      REQUIRE(fam != nullptr);
      CHECK(fam->rfind("wgmma", 0) == 0);
      CHECK(attn().check(h->first, problem(shape), "sm_90a"));
    }
  }
  SUBCASE("one canonical value for the portable family's parameters") {
    refused("block_m=128,block_n=128,warps=8,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma",
            d128, "sm_90a", "warps=4");
    refused("block_m=128,block_n=128,warps=4,stages=2,swizzle=pad,q=smem,splits=1,family=wgmma",
            d128, "sm_90a", "swizzle=xor");
    refused("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=regs,splits=1,family=wgmma",
            d128, "sm_90a", "q=smem");
    refused("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=2,family=wgmma",
            problem("B=1,H=2,Sq=1,Sk=4096,D=128"), "sm_90a", "splits=1");
  }
  SUBCASE("ping-pong: between 2 or 3 consumers with 2+ stages") {
    CHECK(
        attn().check(config("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                            "family=wgmma_pingpong"),
                     d128, "sm_90a"));
    refused("block_m=64,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
            "family=wgmma_pingpong",
            d128, "sm_90a", "needs 2 or 3 consumer");
    refused("block_m=128,block_n=128,warps=4,stages=1,swizzle=xor,q=smem,splits=1,"
            "family=wgmma_pingpong",
            d128, "sm_90a", "2+ stages");
    refused("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
            "family=wgmma_pingpong",
            d128, "sm_90", "needs sm_90a");
  }
  SUBCASE("overlap: 2+ stages; two P sets where they fit beside O and S, else one") {
    auto defs_of = [&](const std::string& c) { return attn().defines(config(c), d128); };
    auto has = [](const std::vector<std::string>& defs, const char* d) {
      return std::find(defs.begin(), defs.end(), d) != defs.end();
    };
    const std::string two = "block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                            "family=wgmma_overlap";
    CHECK(attn().check(config(two), d128, "sm_90a"));
    refused("block_m=128,block_n=96,warps=4,stages=1,swizzle=xor,q=smem,splits=1,"
            "family=wgmma_overlap",
            d128, "sm_90a", "2+ stages");
    CHECK(has(defs_of(two), "-DAT_OVERLAP=1"));
    CHECK(has(defs_of(two), "-DAT_ONE_P=0"));
    // O (64) + S (64) + two P sets (64) and the softmax's temporaries spill at 240: one
    // P set (FlashAttention-3's order), up to 192 keys; a persistent block's loop takes
    // 24 more, so 176 keys fit only without it.
    for (const char* c : {"block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                          "family=wgmma_overlap",
                          "block_m=128,block_n=192,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                          "family=wgmma_overlap",
                          "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                          "family=wgmma_overlap_persistent"}) {
      CAPTURE(c);
      CHECK(attn().check(config(c), d128, "sm_90a"));
      CHECK(has(defs_of(c), "-DAT_ONE_P=1"));
    }
    refused("block_m=128,block_n=176,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
            "family=wgmma_overlap_persistent",
            d128, "sm_90a", "registers per consumer");
    // Not overlapped: no P set to choose.
    CHECK(has(defs_of("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                      "family=wgmma"),
              "-DAT_ONE_P=0"));
  }
  SUBCASE("persistent: a Hopper schedule, one block per SM slot looping over the tiles") {
    const Problem big = problem("B=4,H=16,S=4096,D=128");
    const Config c = config("block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                            "family=wgmma_persistent");
    CHECK(attn().check(c, big, "sm_90a"));
    CHECK(attn().worth_measuring(c, big));
    const LaunchGeometry g = attn().geometry(c, big);
    CHECK(g.grid[0] == 132); // 32 query blocks x 16 heads x 4 batches = 2048 tiles
    CHECK(g.grid[1] == 1);
    CHECK(g.grid[2] == 1);
    const LaunchGeometry plain = attn().geometry(
        config("block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"),
        big);
    // A second Q tile, its two barriers and the two tiles' indices.
    CHECK(g.dynamic_smem == plain.dynamic_smem + 128 * 128 * 2 + 16 + 8);
    const auto defs = attn().defines(c, big);
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_PERSISTENT=1") != defs.end());
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_OVERLAP=0") != defs.end());
    // The tile loop's registers: D=128 block_n=96 overlapped fits two P sets without it,
    // one with it.
    const Config wide = config("block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,"
                               "splits=1,family=wgmma_overlap_persistent");
    CHECK(attn().check(wide, big, "sm_90a"));
    const auto wide_defs = attn().defines(wide, big);
    CHECK(std::find(wide_defs.begin(), wide_defs.end(), "-DAT_ONE_P=1") != wide_defs.end());
    CHECK(attn().check(config("block_m=128,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,"
                              "splits=1,family=wgmma_overlap_persistent"),
                       big, "sm_90a"));
    // No more tiles than blocks: the plain schedule already runs it.
    const Problem small = problem("B=1,H=4,S=1024,D=128");
    CHECK_FALSE(attn().worth_measuring(c, small));
  }
  SUBCASE("tiles") {
    refused("block_m=256,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma",
            d128, "sm_90a", "64 per consumer");
    refused("block_m=128,block_n=32,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma",
            d128, "sm_90a", "block_n must be");
    // Three consumers get 160 registers: O (64) + S (64) + P (32) do not fit.
    refused("block_m=192,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma",
            d128, "sm_90a", "registers per consumer");
    // 64 + 2 * 3 * 192 rows of 256 bytes: over 227 KiB.
    refused("block_m=64,block_n=192,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma",
            d128, "sm_90a", "shared memory");
  }
  SUBCASE("a configuration without family is the portable one") {
    CHECK(attn().check(config(k_fa2), d128, "sm_80"));
    CHECK(attn().geometry(config(k_fa2), d128).block[0] == 128);
    const auto defs = attn().defines(config(k_fa2), d128);
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_WGMMA=1") == defs.end());
    CHECK_THROWS_WITH_AS(
        attn().check(config(std::string(k_fa2) + ",family=tma"), d128, "sm_90a"),
        doctest::Contains("family must be 'mma', 'wgmma', 'wgmma_pingpong', 'wgmma_overlap', "
                          "'wgmma_persistent', 'wgmma_overlap_persistent', 'wgmma_multicast' or "
                          "'wgmma_overlap_multicast'"),
        Error);
  }
  SUBCASE("multicast: clusters of two query blocks of a head, each loading half of every "
          "K/V tile, for non-causal windowless problems only") {
    const std::string mc = "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                           "family=wgmma_multicast";
    const Problem nc = problem("B=8,H=16,S=2048,D=128");
    CHECK(attn().check(config(mc), nc, "sm_90a"));
    const auto defs = attn().defines(config(mc), nc);
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_CLUSTER=2") != defs.end());
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_OVERLAP=0") != defs.end());
    // Without the family the cluster define is absent (the text compiled before it).
    const auto plain = attn().defines(config(k_wg), nc);
    CHECK(std::none_of(plain.begin(), plain.end(),
                       [](const std::string& s) { return s.rfind("-DAT_CLUSTER", 0) == 0; }));
    const auto over =
        attn().defines(config("block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                              "family=wgmma_overlap_multicast"),
                       nc);
    CHECK(std::find(over.begin(), over.end(), "-DAT_OVERLAP=1") != over.end());
    CHECK(std::find(over.begin(), over.end(), "-DAT_CLUSTER=2") != over.end());
    // Whole pairs of query blocks: 3 blocks of 128 rows (Sq=300) launch 4.
    CHECK(attn().geometry(config(mc), problem("B=1,H=2,S=300,D=128")).grid[0] == 4);
    CHECK(attn().geometry(config(mc), nc).grid[0] == 16);
    refused(mc, d128, "sm_90a", "not for causal or windowed");
    refused(mc, problem("B=8,H=16,S=2048,D=128,window=1"), "sm_90a", "not for causal or windowed");
    refused(mc, problem("B=8,H=16,S=100,D=128"), "sm_90a", "no second to share with");
    refused(mc, nc, "sm_90", "needs sm_90a");
  }
  SUBCASE("geometry: a producer warpgroup beside block_m / 64 consumers; tiles, 1 KiB of "
          "alignment and the barriers in shared memory") {
    LaunchGeometry g = attn().geometry(config(k_wg), d128);
    CHECK(g.block[0] == 384);
    CHECK(g.grid[0] == 16);
    CHECK(g.dynamic_smem == (128 + 2 * 2 * 128) * 128 * 2 + 8 * (2 + 4 * 2) + 1024);
    const auto defs = attn().defines(config(k_wg), d128);
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_WGMMA=1") != defs.end());
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_BF16=1") != defs.end());
    CHECK(std::find(defs.begin(), defs.end(), "-DAT_MIN_BLOCKS=1") != defs.end());
    // One consumer whose shared memory fits twice per SM: two blocks per SM.
    const auto two = attn().defines(
        config("block_m=64,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma"),
        problem("B=8,H=16,S=2048,D=64"));
    CHECK(std::find(two.begin(), two.end(), "-DAT_MIN_BLOCKS=2") != two.end());
    CHECK(attn()
              .geometry(config("block_m=64,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,"
                               "splits=1,family=wgmma"),
                        problem("B=8,H=16,S=2048,D=64"))
              .block[0] == 256);
  }
  SUBCASE("the space's default and heuristic points stay portable") {
    Space space = parse_space(template_file(attn().space_path()), attn().space_path());
    const std::string* f = find_field(space.default_config, "family");
    REQUIRE(f);
    CHECK(*f == "mma");
    size_t wgmma = 0;
    for (const Config& c : space.enumerate()) {
      const std::string* fam = find_field(c, "family");
      wgmma += fam && *fam == "wgmma" && attn().check(c, d128, "sm_90a");
    }
    CHECK(wgmma > 0);
  }
}

TEST_CASE("Hopper attention variants compile for sm_90a with wgmma, TMA and setmaxnreg") {
  // Both dtypes, the three head dims, the three consumer counts.
  struct Case {
    const char* shape;
    const char* config;
  };
  const Case cases[] = {
      {"B=1,Hq=8,Hkv=2,Sq=100,Sk=300,D=128,causal=1,lse=1,dtype=fp16",
       "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"},
      {"B=1,H=4,S=300,D=64,dtype=bf16,layout=bhsd",
       "block_m=192,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"},
      {"B=1,H=4,S=300,D=128,causal=1,dtype=bf16",
       "block_m=64,block_n=176,warps=4,stages=1,swizzle=xor,q=smem,splits=1,family=wgmma"},
      {"B=1,H=4,S=300,D=64,dtype=fp16",
       "block_m=64,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma"},
      {"B=2,Hq=4,Hkv=1,Sq=300,Sk=200,D=128,causal=1,dtype=bf16",
       "block_m=128,block_n=64,warps=4,stages=4,swizzle=xor,q=smem,splits=1,"
       "family=wgmma_pingpong"},
      {"B=1,Hq=8,Hkv=2,Sq=300,Sk=200,D=256,causal=1,lse=1,dtype=bf16",
       "block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"},
      {"B=1,H=4,S=300,D=256,dtype=fp16",
       "block_m=64,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"},
      {"B=1,H=4,S=300,D=128,dtype=bf16",
       "block_m=128,block_n=112,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"},
      {"B=1,Hq=6,Hkv=2,S=300,D=96,causal=1,lse=1,dtype=bf16",
       "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma"},
      {"B=1,H=4,S=300,D=80,dtype=fp16",
       "block_m=128,block_n=96,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
       "family=wgmma_overlap"},
      // Overlapped with one P set (two do not fit beside O at 128 keys).
      {"B=3,H=4,S=300,D=128,causal=1,dtype=bf16",
       "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
       "family=wgmma_overlap_persistent"},
  };
  for (const Case& c : cases) {
    const std::string id = c.config;
    CAPTURE(id);
    Problem p = problem(c.shape);
    REQUIRE(attn().check(config(c.config), p, "sm_90a"));
    auto out = compile_variant(describe_variant(attn(), config(c.config), p, "sm_90a"));
    REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().detail));
    CHECK(!out->binary.empty());
  }
}

TEST_CASE("attention problems name their features only when on, so older keys stay") {
  const std::string plain =
      "B=2,Hq=8,Hkv=8,Sq=1000,Sk=1000,D=80,causal=1,dtype=bf16,lse=0,layout=bshd";
  CHECK(problem("B=2,H=8,S=1000,D=80,causal=1").key() == plain);
  CHECK(problem("B=2,H=8,S=1000,D=80,causal=1,window=0,softcap=0,alibi=0").key() == plain);
  CHECK(problem("B=2,H=8,S=1000,D=80,causal=1,window=1").key() == plain + ",window=1");
  CHECK(problem("B=2,H=8,S=1000,D=80,alibi=1,softcap=1,window=1")
            .key()
            .find("layout=bshd,window=1,softcap=1,alibi=1") != std::string::npos);
  // Head dims: every multiple of 8 in 32..256.
  for (int d = 32; d <= 256; d += 8) {
    CAPTURE(d);
    CHECK_NOTHROW(problem("B=1,H=2,S=100,D=" + std::to_string(d)));
  }
}

TEST_CASE("attention head dims off the multiples of 64 pad to whole MMA steps") {
  Space space = parse_space(template_file(attn().space_path()), attn().space_path());
  SUBCASE("the default variant runs every head dim on every arch") {
    for (const char* arch : {"sm_80", "sm_86", "sm_90a", "sm_120"}) {
      for (int d = 32; d <= 256; d += 8) {
        CAPTURE(arch);
        CAPTURE(d);
        CHECK(attn().check(space.default_config,
                           problem("B=1,H=2,S=100,D=" + std::to_string(d) + ",causal=1"), arch));
      }
    }
  }
  SUBCASE("shared memory and registers count the padded head dim") {
    // D=40 computes on 48 columns, D=200 on 208; D=64 on 64 (nothing added).
    Config c = config(k_fa2);
    CHECK(attn().geometry(c, problem("B=1,H=2,S=100,D=40")).dynamic_smem == (128 + 128) * 48 * 2);
    CHECK(attn().geometry(c, problem("B=1,H=2,S=100,D=200")).dynamic_smem == (128 + 128) * 208 * 2);
    CHECK(attn().geometry(c, problem("B=1,H=2,S=100,D=64")).dynamic_smem == (128 + 128) * 64 * 2);
  }
  SUBCASE("tiles that do not split over the loading threads are refused") {
    // D=40: 6 chunks per row load as 8 columns, so 256 threads step 32 rows.
    auto r = attn().check(config("block_m=128,block_n=48,warps=8,stages=1,swizzle=pad,q=smem"),
                          problem("B=1,H=2,S=100,D=40"), "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("multiples of 32 at D=40") != std::string::npos);
  }
  SUBCASE("the space has valid variants for every head dim") {
    for (int d = 32; d <= 256; d += 8) {
      CAPTURE(d);
      Problem p = problem("B=2,H=8,S=1000,D=" + std::to_string(d));
      size_t valid = 0;
      for (const Config& c : space.enumerate()) {
        valid += attn().check(c, p, "sm_90a") ? 1 : 0;
      }
      CHECK(valid > 10);
    }
  }
}

TEST_CASE("the Hopper family runs sliding windows; it refuses softcap and ALiBi, so the "
          "portable one runs them") {
  const char* k_wg = "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,"
                     "family=wgmma";
  const auto has = [](const std::vector<std::string>& defines, const std::string& d) {
    return std::find(defines.begin(), defines.end(), d) != defines.end();
  };
  const Problem plain = problem("B=8,H=16,S=2048,D=128,causal=1");
  CHECK(attn().check(config(k_wg), plain, "sm_90a"));
  CHECK_FALSE(has(attn().defines(config(k_wg), plain), "-DAT_WINDOW=1"));
  const Problem window = problem("B=8,H=16,S=2048,D=128,causal=1,window=1");
  CHECK(attn().check(config(k_wg), window, "sm_90a"));
  CHECK(has(attn().defines(config(k_wg), window), "-DAT_WINDOW=1"));
  for (const auto& [feature, define] :
       {std::pair{"softcap=1", "-DAT_SOFTCAP=1"}, std::pair{"alibi=1", "-DAT_ALIBI=1"}}) {
    CAPTURE(feature);
    Problem p = problem(std::string("B=8,H=16,S=2048,D=128,causal=1,") + feature);
    CHECK(attn().check(config(k_wg), p, "sm_90a"));
    CHECK(has(attn().defines(config(k_wg), p), define));
    CHECK_FALSE(has(attn().defines(config(k_wg), plain), define));
    CHECK(attn().check(config(k_fa2), p, "sm_90a"));
  }
}

TEST_CASE("attention features compile in only when the problem has them") {
  auto has = [](const std::vector<std::string>& defines, const std::string& d) {
    return std::find(defines.begin(), defines.end(), d) != defines.end();
  };
  auto plain = attn().defines(config(k_fa2), problem("B=1,H=2,S=100,D=64,causal=1"));
  for (const char* d : {"-DAT_WINDOW=1", "-DAT_SOFTCAP=1", "-DAT_ALIBI=1"}) {
    CHECK_FALSE(has(plain, d));
  }
  auto all = attn().defines(config(k_fa2),
                            problem("B=1,H=2,S=100,D=64,causal=1,window=1,softcap=1,alibi=1"));
  for (const char* d : {"-DAT_WINDOW=1", "-DAT_SOFTCAP=1", "-DAT_ALIBI=1"}) {
    CHECK(has(all, d));
  }
  SUBCASE("the tuner's inputs carry the slopes after the other tensors") {
    auto t = attn().tensors(problem("B=1,H=2,S=100,D=64,alibi=1,lse=1"));
    REQUIRE(t.back().name == "alibi_slopes");
    CHECK(t.back().dtype == DType::f32);
    CHECK(t.back().elements == 2);
    CHECK_FALSE(t.back().output);
  }
  SUBCASE("a windowed problem counts only the pairs its window keeps") {
    // The tuner's window: Sk/4 = 250 keys left, none right (causal).
    double full = attn().flops(problem("B=1,H=1,S=1000,D=64,causal=1"));
    double windowed = attn().flops(problem("B=1,H=1,S=1000,D=64,causal=1,window=1"));
    CHECK(windowed < full);
    double pairs = 0;
    for (int i = 0; i < 1000; ++i) {
      pairs += std::min(i, 250) + 1;
    }
    CHECK(windowed == doctest::Approx(4.0 * pairs * 64));
  }
}

TEST_CASE("attention calls with bad feature values are refused naming the argument") {
  Problem p = problem("B=1,H=2,S=100,D=64,causal=1,window=1,softcap=1,alibi=1");
  AttentionCall call;
  call.q = call.k = call.v = call.o = 256;
  call.window_left = 16;
  call.window_right = -1;
  call.softcap = 30;
  call.alibi_slopes = 512;
  ArgPack ok;
  CHECK_NOTHROW(attn().pack_call(config(k_fa2), p, call, ok));
  auto refused = [&](AttentionCall c, const char* message) {
    ArgPack args;
    CHECK_THROWS_WITH_AS(attn().pack_call(config(k_fa2), p, c, args), doctest::Contains(message),
                         Error);
  };
  AttentionCall c = call;
  c.window_left = -2;
  refused(c, "window_left must be -1 (unbounded) or a number of keys >= 0, not -2");
  c = call;
  c.window_right = -7;
  refused(c, "window_right must be -1");
  c = call;
  c.softcap = -1;
  refused(c, "softcap must be positive and finite (0: off)");
  c = call;
  c.softcap = std::nan("");
  refused(c, "softcap must be positive and finite");
  c = call;
  c.alibi_slopes = 0;
  refused(c, "alibi_slopes is NULL");
  // 0 is the default scale (1/sqrt(D)); a negative one is refused, never replaced by it.
  c = call;
  c.scale = 0;
  CHECK_NOTHROW(attn().pack_call(config(k_fa2), p, c, ok));
  c.scale = -0.125;
  refused(c, "scale must be positive and finite");
  c.scale = std::nan("");
  refused(c, "scale must be positive and finite");
}

// The heuristic policy's built-in tuning points (runtime/ops/heuristic.hpp): every
// op's [[heuristic]] entries parse and lie within its limits, the nearest point of
// the GPU's family wins, flags a point names must match, and a GPU with no points of
// its own takes the nearest point its limits allow, sized to the GPU's SM count when
// that is known.
#include "runtime/ops/heuristic.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>

using namespace autotune;

namespace {

Problem problem(const char* op, const char* shape) {
  return find_op(op).make_problem(parse_fields(shape, "shape"));
}

// A GPU as query_device reports it: 64K registers and 228 KiB of shared memory per
// SM (sm_80 .. sm_120 class).
cuda::DeviceInfo gpu(int cc_major, int cc_minor, int sm_count) {
  cuda::DeviceInfo d;
  d.cc_major = cc_major;
  d.cc_minor = cc_minor;
  d.sm_count = sm_count;
  d.regs_per_sm = 65536;
  d.smem_per_sm = 228 * 1024;
  d.smem_per_block_optin = 227 * 1024;
  return d;
}

// What a policy serves for `problem` on sm_90a passes the op's check and is a variant
// the tuner itself would measure (worth_measuring), the reason named when it is not.
void check_measured(const Op& op, const Config& config, const Problem& problem) {
  CHECK(op.check(config, problem, "sm_90a"));
  const Result<bool> worth = op.worth_measuring(config, problem);
  const std::string why =
      format_fields(config) + ": " + (worth.ok() ? "" : worth.failure().message);
  CHECK_MESSAGE(worth.ok(), why);
}

// Every configuration the op's sm_90a points (not only the nearest) serve to `problem`,
// as the nearest policy serves a stored winner of the grid: each passes check_measured.
int check_every_point(const Op& op, const Problem& problem) {
  static std::map<std::string, std::vector<HeuristicPoint>> points;
  auto it = points.find(op.name());
  if (it == points.end()) {
    it = points
             .emplace(op.name(), parse_heuristics(op, template_file(op.space_path()),
                                                  op.space_path(), op_space(op)))
             .first;
  }
  int served = 0;
  for (const HeuristicPoint& point : it->second) {
    if (std::find(point.archs.begin(), point.archs.end(), "sm_90a") == point.archs.end()) {
      continue;
    }
    CAPTURE(point.origin);
    const auto s = serve_config(op, point.config, problem, "sm_90a");
    if (s) {
      check_measured(op, *s, problem);
      ++served;
    }
  }
  return served;
}

// check_measured for what the heuristic serves `shape` (it must serve one) and for what
// every sm_90a point serves it; returns how many points served it.
int check_served(const Op& op, const std::string& shape) {
  CAPTURE(shape);
  const Problem p = op.make_problem(parse_fields(shape, "shape"));
  const auto h = heuristic_config(op, p, "sm_90a");
  REQUIRE(h);
  check_measured(op, h->first, p);
  return check_every_point(op, p);
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
    CHECK(format_fields(c->first) == "threads=256,vec=8,items=8,cpb=1,load=direct");
    CHECK(c->second == "sm_90a point B=1,C=4096,L=16384,W=4,layout=bcl");
  }
  SUBCASE("causal_conv1d: channel-last x takes a channel-last point, channel-first never") {
    const Op& op = find_op("causal_conv1d");
    auto last = heuristic_config(op, problem("causal_conv1d", "B=8,C=4096,L=2000,W=4,layout=blc"),
                                 "sm_90a");
    REQUIRE(last);
    CHECK(last->second == "sm_90a point B=8,C=4096,L=2048,W=4,layout=blc");
    CHECK(format_fields(last->first) == "threads=64,vec=4,items=4,cpb=1,load=direct");
    auto first = heuristic_config(op, problem("causal_conv1d", "B=2,C=4096,L=3000,W=4"), "sm_90a");
    REQUIRE(first);
    CHECK(first->second.find("layout=bcl") != std::string::npos);
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
  SUBCASE("attention on sm_90a takes the Hopper family where it can run") {
    const Op& op = find_op("attention");
    auto config_on = [&](const char* shape, const char* arch) {
      auto c = heuristic_config(op, problem("attention", shape), arch);
      REQUIRE(c);
      return format_fields(c->first);
    };
    // Nearest to B=4,H=16,S=4096,D=128,causal=1, where a wgmma point comes first; sm_90
    // without the `a` features takes the portable points.
    const char* near = "B=4,Hq=16,Hkv=16,Sq=3500,Sk=3500,D=128,causal=1";
    CHECK(config_on(near, "sm_90a").find("family=wgmma") != std::string::npos);
    CHECK(config_on(near, "sm_90").find("family=mma") != std::string::npos);
    // A grid shape on sm_90a takes its own sm_90a point (the Hopper family's winner), not
    // the portable point of the same shape listed for sm_90 and sm_90a.
    const char* grid = "B=8,Hq=16,Hkv=16,Sq=2048,Sk=2048,D=128,causal=1";
    CHECK(config_on(grid, "sm_90a").find("family=wgmma") != std::string::npos);
    CHECK(config_on(grid, "sm_90").find("family=mma") != std::string::npos);
    // D=256 takes the Hopper D=256 point on sm_90a; on sm_90 no point's tiles fit its
    // shared memory, and the runtime then takes [default].
    const char* d256 = "B=2,Hq=16,Hkv=16,Sq=3000,Sk=3000,D=256,causal=0";
    CHECK(config_on(d256, "sm_90a").find("family=wgmma_pingpong") != std::string::npos);
    const auto d256_sm90 = heuristic_config(op, problem("attention", d256), "sm_90");
    CHECK((!d256_sm90 || format_fields(d256_sm90->first).find("family=mma") != std::string::npos));
    // Every wgmma point can run the problem it was measured on, in both dtypes.
    auto points =
        parse_heuristics(op, template_file(op.space_path()), op.space_path(), op_space(op));
    int hopper_points = 0;
    for (const HeuristicPoint& p : points) {
      if (format_fields(p.config).find("family=wgmma") == std::string::npos) {
        continue;
      }
      ++hopper_points;
      for (const char* dtype : {"bf16", "fp16"}) {
        Fields f = p.shape;
        f.emplace_back("dtype", dtype);
        CAPTURE(format_fields(f));
        CHECK(op.check(p.config, op.make_problem(f), "sm_90a"));
      }
    }
    CHECK(hopper_points == 29);
  }
  SUBCASE("attention: a decoding step takes a decoding point, split-KV at a small batch") {
    const Op& op = find_op("attention");
    for (const char* cache : {",paged=1,page=256", ",kvcache=1", ""}) {
      CAPTURE(cache);
      auto c = heuristic_config(
          op,
          problem("attention",
                  (std::string("B=6,Hq=32,Hkv=8,Sq=1,Sk=20000,D=128") + cache).c_str()),
          "sm_90a");
      REQUIRE(c);
      CHECK(c->second.find("Sq=1") != std::string::npos);
      // 48 blocks (6 x 8 K/V heads of 4 rows): 4 splits fill two blocks an SM.
      CHECK(format_fields(c->first).find("splits=4") != std::string::npos);
    }
    // A page that the nearest point's block_n does not divide: the next point that fits.
    auto small_page = heuristic_config(
        op, problem("attention", "B=60,Hq=32,Hkv=8,Sq=1,Sk=3000,D=128,paged=1,page=64"), "sm_90a");
    REQUIRE(small_page);
    CHECK(format_fields(small_page->first).find("block_n=64") != std::string::npos);
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
  // A point names every parameter (one added to the space later must be added to it).
  CHECK_THROWS_WITH_AS(parse_heuristics(op,
                                        "[[heuristic]]\narch = [\"sm_90\"]\nshape = \"B=1\"\n"
                                        "config = \"threads=128,vec=8,items=2,cpb=1\"\n",
                                        "x.toml", space),
                       doctest::Contains("names no value of 'load'"), Error);
  // Given in another order, it comes back in the space's.
  const auto points = parse_heuristics(op,
                                       "[[heuristic]]\narch = [\"sm_90\"]\nshape = \"B=1\"\n"
                                       "config = \"load=direct,cpb=1,threads=128,vec=8,items=2\"\n",
                                       "x.toml", space);
  REQUIRE(points.size() == 1);
  CHECK(format_fields(points[0].config) == "threads=128,vec=8,items=2,cpb=1,load=direct");
}

TEST_CASE("a configuration from another problem is adapted where its tile would idle") {
  const Op& conv = find_op("causal_conv1d");
  Config tuned = parse_fields("threads=128,vec=4,items=4,cpb=1,load=smem", "config");
  SUBCASE("a short sequence: one tile per row, rows packed into the block") {
    // 16-byte vectors, 16 threads a row, one tile of 512 covers 333 (65% of the lanes
    // busy, 64 bytes per thread), where 3 tiles of 128 ran 1.7x slower; the rows are
    // ragged and 8 of them make whole vectors, so the staged tile runs as spans.
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=64,C=1536,L=333,W=2"))) ==
          "threads=128,vec=8,items=4,cpb=8,load=span");
    // 4 threads a row (64 contiguous bytes), one tile of 128 covers 100.
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=64,C=1536,L=100,W=4"))) ==
          "threads=128,vec=8,items=4,cpb=32,load=span");
    // fp32: 16-byte vectors are 4 elements, so 32 threads a row make the tile of 512.
    CHECK(format_fields(
              conv.adapt(tuned, problem("causal_conv1d", "B=64,C=1536,L=333,W=2,x=fp32,w=fp32"))) ==
          "threads=128,vec=4,items=4,cpb=4,load=span");
    // Spans need cpb * L to be a multiple of the vector: a block of 64 threads packs 4
    // rows of 333 (16 threads a row), and takes 8 rows of 16 threads as spans.
    Config four = parse_fields("threads=64,vec=8,items=4,cpb=1,load=smem", "config");
    CHECK(format_fields(conv.adapt(four, problem("causal_conv1d", "B=64,C=1536,L=333,W=2"))) ==
          "threads=128,vec=8,items=4,cpb=8,load=span");
    // Rows of whole vectors keep the staged rows (spans are for ragged rows).
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=64,C=1536,L=96,W=4"))) ==
          "threads=128,vec=8,items=4,cpb=32,load=smem");
    // A span winner keeps its tile where it fits the row (B=64, C=3072, L=333's tuned
    // winner at C=1536), and is adapted as a staged tile where it does not.
    Config spans = parse_fields("threads=128,vec=4,items=8,cpb=8,load=span", "config");
    CHECK(conv.adapt(spans, problem("causal_conv1d", "B=64,C=1536,L=333,W=2")) == spans);
    CHECK(format_fields(conv.adapt(spans, problem("causal_conv1d", "B=64,C=1536,L=100,W=4"))) ==
          "threads=128,vec=8,items=4,cpb=32,load=span");
    CHECK(format_fields(conv.adapt(spans, problem("causal_conv1d", "B=64,C=1536,L=96,W=4"))) ==
          "threads=128,vec=8,items=4,cpb=32,load=smem");
    // The direct path keeps whole warps per row: 4 rows of 32 threads, tile 512
    // (items=4 would load as much per thread with half the lanes past the row), where
    // rows are whole vectors; ragged short rows take the staged path.
    Config direct = parse_fields("threads=128,vec=8,items=2,cpb=1,load=direct", "config");
    CHECK(format_fields(conv.adapt(direct, problem("causal_conv1d", "B=64,C=1536,L=336,W=2"))) ==
          "threads=128,vec=8,items=2,cpb=4,load=direct");
    CHECK(format_fields(conv.adapt(direct, problem("causal_conv1d", "B=64,C=1536,L=333,W=2"))) ==
          "threads=128,vec=8,items=4,cpb=8,load=span");
  }
  SUBCASE("a row that nearly fills its tile keeps the configuration") {
    CHECK(conv.adapt(tuned, problem("causal_conv1d", "B=4,C=5120,L=2000,W=4")) == tuned);
  }
  SUBCASE("a longer row takes one tile of the widest aligned vectors, odd rows the direct path") {
    // Two tiles of 2048 at L=4095, odd: one of 128 threads x 8 x 4 on the direct path,
    // the shape's own tuned winner.
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=2,C=4096,L=4095,W=3"))) ==
          "threads=128,vec=8,items=4,cpb=1,load=direct");
    // L=3000 (a multiple of 8) keeps the staged path: 128 threads x 8 x 4 (tile 4096).
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=8,C=768,L=3000,W=4"))) ==
          "threads=128,vec=8,items=4,cpb=1,load=smem");
    // L=8192: a row of 256 threads.
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=8,C=2048,L=8192,W=4"))) ==
          "threads=256,vec=8,items=4,cpb=1,load=smem");
    // The tile fits but the rows are odd for 8-byte vectors on the staged path.
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=4,C=2560,L=2047,W=4"))) ==
          "threads=128,vec=8,items=4,cpb=2,load=direct");
  }
  SUBCASE("a grid under one wave of thread slots takes fewer vectors a thread") {
    // 4096 rows of 512: 4 vectors a thread take 16 threads a row (65536 in all), 2 take
    // 32 (131072), 1 takes 64 (262144, the most a tile of one row allows); still under a
    // wave, so the direct path.
    Config packed = parse_fields("threads=128,vec=8,items=4,cpb=8,load=smem", "config");
    CHECK(format_fields(conv.adapt(packed, problem("causal_conv1d", "B=2,C=2048,L=512,W=4"))) ==
          "threads=128,vec=8,items=1,cpb=2,load=direct");
    // The same from a tile of twice the row (the short-row rule, then the wave).
    Config point = parse_fields("threads=128,vec=4,items=4,cpb=2,load=smem", "config");
    CHECK(format_fields(conv.adapt(point, problem("causal_conv1d", "B=2,C=2048,L=512,W=4"))) ==
          "threads=128,vec=8,items=1,cpb=2,load=direct");
    // B=2, C=768, L=2047 (odd): 256 threads a row of 1 vector, 393216 threads.
    CHECK(format_fields(conv.adapt(tuned, problem("causal_conv1d", "B=2,C=768,L=2047,W=4"))) ==
          "threads=256,vec=8,items=1,cpb=1,load=direct");
  }
  SUBCASE("the heuristic's choice comes adapted") {
    auto c = heuristic_config(conv, problem("causal_conv1d", "B=64,C=3072,L=333,W=2"), "sm_90a");
    REQUIRE(c);
    CHECK(conv.worth_measuring(c->first, problem("causal_conv1d", "B=64,C=3072,L=333,W=2")));
  }
}

TEST_CASE("selective_scan's bf16 points serve fp32 and fixed B/C problems with fp32 staging") {
  const Op& op = find_op("selective_scan");
  auto pick = [&](const char* shape) {
    auto c = heuristic_config(op, problem("selective_scan", shape), "sm_90a");
    REQUIRE(c);
    return std::make_pair(format_fields(c->first), c->second);
  };
  const std::string lanes64 = "threads=64,items=32,cpb=16,nsplit=4,scan=state,vec=8,poly=0,"
                              "minblocks=1,tsplit=1,bc=f32,";
  const std::string lanes128 = "threads=128,items=64,cpb=16,nsplit=8,scan=state,vec=8,poly=0,"
                               "minblocks=1,tsplit=1,";
  // The nearest point (bc=pair) is adapted, not passed over for a farther one.
  auto fixed = pick("B=4,D=5120,L=2048,N=16,var_bc=0");
  CHECK(fixed.first.rfind(lanes64, 0) == 0);
  CHECK(fixed.second == "sm_90a point B=4,D=5120,L=2048,N=16");
  CHECK(pick("B=4,D=5120,L=2048,N=16,dtype=fp32").first.rfind(lanes64, 0) == 0);
  // A small batch with variable B/C staged as fp32 takes the 64-thread lane shape; with
  // pairs, or with B/C fixed (in registers), the 128-thread one.
  CHECK(pick("B=2,D=2560,L=3000,N=16,dtype=fp32").first.rfind(lanes64, 0) == 0);
  CHECK(pick("B=2,D=2560,L=3000,N=16").first.rfind(lanes128 + "bc=pair", 0) == 0);
  CHECK(pick("B=2,D=2560,L=3000,N=16,dtype=fp16").first.rfind(lanes128 + "bc=pair", 0) == 0);
  CHECK(pick("B=2,D=2560,L=3000,N=16,var_bc=0").first.rfind(lanes128 + "bc=f32", 0) == 0);
}

TEST_CASE("a GPU with no points of its own gets the transferred configuration sized to its SMs") {
  const Op& conv = find_op("causal_conv1d");
  const Problem p = problem("causal_conv1d", "B=2,C=2048,L=2048,W=4");
  SUBCASE("the grid's waves count blocks an SM holds at once") {
    LaunchGeometry g;
    g.grid[0] = 4096;
    g.block[0] = 128;
    CHECK(heuristic_waves(g, gpu(12, 0, 20)) == doctest::Approx(4096.0 / (20 * 16)));
    g.block[0] = 32; // 64 blocks of 32 threads fit, but an SM holds 32 blocks at most
    CHECK(heuristic_waves(g, gpu(12, 0, 20)) == doctest::Approx(4096.0 / (20 * 32)));
    g.block[0] = 128;
    g.dynamic_smem = 100 * 1024; // shared memory holds 2 of them
    CHECK(heuristic_waves(g, gpu(12, 0, 20)) == doctest::Approx(4096.0 / (20 * 2)));
  }
  SUBCASE("a small GPU fills its waves with the point's configuration") {
    auto c = heuristic_config(conv, p, gpu(12, 0, 20));
    REQUIRE(c);
    CHECK(format_fields(c->first) == "threads=128,vec=8,items=2,cpb=1,load=direct");
    CHECK(c->second == "sm_90->sm_120 point B=8,C=4096,L=2048,W=4,layout=bcl; 13 waves of 20 SMs");
  }
  SUBCASE("a large GPU splits the rows into shorter chunks until two waves") {
    // 4096 blocks of 128 threads on 200 SMs of 16 blocks each: 1.3 waves; items=1
    // doubles the blocks.
    auto c = heuristic_config(conv, p, gpu(12, 0, 200));
    REQUIRE(c);
    CHECK(format_fields(c->first) == "threads=128,vec=8,items=1,cpb=1,load=direct");
    CHECK(c->second ==
          "sm_90->sm_120 point B=8,C=4096,L=2048,W=4,layout=bcl; 2.6 waves of 200 SMs with "
          "items=1");
    CHECK(conv.check(c->first, p, "sm_120"));
  }
  SUBCASE("a GPU with points of its own keeps its point, whatever its SM count") {
    auto own = heuristic_config(conv, p, gpu(9, 0, 200));
    auto by_arch = heuristic_config(conv, p, "sm_90a");
    REQUIRE(own);
    REQUIRE(by_arch);
    CHECK(*own == *by_arch);
  }
  SUBCASE("an unknown SM count is the arch-only lookup") {
    auto c = heuristic_config(conv, p, gpu(12, 0, 0));
    REQUIRE(c);
    CHECK(*c == *heuristic_config(conv, p, "sm_120"));
  }
  SUBCASE("every op's choice runs on the GPU") {
    struct Case {
      const char* op;
      const char* shape;
    };
    for (Case k : {Case{"attention", "B=1,H=8,S=1024,D=128,causal=1"},
                   Case{"selective_scan", "B=1,D=1024,L=1024,N=16"},
                   Case{"causal_conv1d", "B=1,C=256,L=1000,W=3"}}) {
      CAPTURE(k.op);
      const Op& op = find_op(k.op);
      Problem q = problem(k.op, k.shape);
      for (int sms : {8, 80, 400}) {
        CAPTURE(sms);
        auto c = heuristic_config(op, q, gpu(8, 6, sms));
        REQUIRE(c);
        CHECK(op.check(c->first, q, "sm_86"));
        CHECK(c->second.find(" SMs") != std::string::npos);
      }
    }
  }
}

TEST_CASE("a configuration from another problem serves adapted, else as it stands, else not") {
  const Op& scan = find_op("selective_scan");
  const Config pair = parse_fields("threads=128,items=64,cpb=16,nsplit=8,scan=state,vec=8,poly=0,"
                                   "minblocks=1,tsplit=1,bc=pair,cpl=1,ystore=after,yred=1,"
                                   "ragged=regs",
                                   "config");
  SUBCASE("pairs need 16-bit inputs: an fp32 problem gets the adapted fp32 staging") {
    const Problem fp32 = problem("selective_scan", "B=2,D=2560,L=3000,N=16,dtype=fp32");
    CHECK_FALSE(scan.check(pair, fp32, "sm_90a"));
    auto served = serve_config(scan, pair, fp32, "sm_90a");
    REQUIRE(served);
    CHECK(scan.check(*served, fp32, "sm_90a"));
    CHECK(*find_field(*served, "bc") == "f32");
  }
  SUBCASE("a bf16 problem gets what adapt makes of it, which is valid") {
    const Problem bf16 = problem("selective_scan", "B=2,D=2560,L=3000,N=16");
    auto served = serve_config(scan, pair, bf16, "sm_90a");
    REQUIRE(served);
    CHECK(format_fields(*served) == format_fields(scan.adapt(pair, bf16)));
  }
  SUBCASE("a winner of a ragged length serves an aligned one with the tuner's inert value") {
    const Config async = parse_fields("threads=128,items=64,cpb=16,nsplit=8,scan=state,vec=8,"
                                      "poly=0,minblocks=1,tsplit=1,bc=pair,cpl=1,"
                                      "ystore=after,yred=1,ragged=async",
                                      "config");
    const Problem aligned = problem("selective_scan", "B=1,D=5120,L=2048,N=16");
    auto served = serve_config(scan, async, aligned, "sm_90a");
    REQUIRE(served);
    CHECK(*find_field(*served, "ragged") == "regs");
    // A ragged length takes whole vectors on shifted timelines (adapt).
    const Problem ragged = problem("selective_scan", "B=1,D=5120,L=2047,N=16");
    served = serve_config(scan, async, ragged, "sm_90a");
    REQUIRE(served);
    CHECK(*find_field(*served, "ragged") == "shift");
  }
  SUBCASE("a Hopper-only attention configuration serves no sm_80 GPU") {
    const Op& attn = find_op("attention");
    const Config wgmma = parse_fields("block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,"
                                      "q=smem,splits=1,family=wgmma",
                                      "config");
    const Problem p = problem("attention", "B=2,H=8,S=1024,D=128,dtype=bf16");
    CHECK(serve_config(attn, wgmma, p, "sm_90a"));
    CHECK_FALSE(serve_config(attn, wgmma, p, "sm_80"));
  }
}

TEST_CASE("every decoding step the sm_90 points serve runs a variant the tuner would measure") {
  // Decoding shapes nobody tuned, over batch, heads (MHA to MQA), cache lengths, head
  // dims, a few new queries and paged caches: the heuristic's adapted configuration
  // passes the op's check and is one the tuner itself would measure (no key split of
  // fewer than two key tiles, no third stage for a short cache, no idle warps), with
  // its grid within two blocks an SM wherever it splits the keys.
  const Op& attn = find_op("attention");
  int served = 0;
  for (int b : {1, 3, 8, 24, 64}) {
    for (auto [hq, hkv] : {std::pair{32, 32}, {32, 8}, {28, 4}, {64, 8}, {16, 1}}) {
      for (int sk : {1, 100, 333, 777, 1024, 4095, 20000}) {
        for (int d : {64, 128}) {
          for (const char* extra : {",Sq=1", ",Sq=4", ",Sq=1,paged=1,page=256"}) {
            const std::string shape = "B=" + std::to_string(b) + ",Hq=" + std::to_string(hq) +
                                      ",Hkv=" + std::to_string(hkv) + ",Sk=" + std::to_string(sk) +
                                      ",D=" + std::to_string(d) + extra;
            CAPTURE(shape);
            const Problem p = problem("attention", shape.c_str());
            const auto h = heuristic_config(attn, p, "sm_90a");
            REQUIRE(h);
            check_measured(attn, h->first, p);
            const LaunchGeometry g = attn.geometry(h->first, p);
            const std::string* splits = find_field(h->first, "splits");
            if (splits != nullptr && *splits != "1") {
              CHECK((long long)g.grid[0] * g.grid[1] * g.grid[2] <= 256);
            }
            ++served;
          }
        }
      }
    }
  }
  CHECK(served == 5 * 5 * 7 * 2 * 3);
}

TEST_CASE("every prefill problem the sm_90 points serve runs a variant the tuner would measure") {
  // Problems nobody tuned over batch, heads (MHA, GQA, MQA), 16 to 4095 query rows (keys
  // as many or twice), head dims 40 to 256, causal, fp16, window, softcap, ALiBi and
  // packed sequences: the
  // heuristic's adapted configuration is one the tuner itself would measure (no 128-row
  // block over at most 64 rows, no persistent grid that is the plain one).
  const Op& attn = find_op("attention");
  int served = 0;
  for (int b : {1, 2, 4, 16, 64}) {
    for (auto [hq, hkv] : {std::pair{32, 32}, {32, 8}, {16, 1}, {12, 12}}) {
      for (int sq : {16, 100, 333, 1000, 4095}) {
        for (int sk : {sq, 2 * sq}) {
          for (int d : {40, 64, 96, 128, 160, 256}) {
            for (const char* extra : {"", ",causal=1", ",dtype=fp16,causal=1", ",window=1",
                                      ",softcap=1", ",alibi=1,causal=1", ",varlen=1,causal=1"}) {
              const std::string shape = "B=" + std::to_string(b) + ",Hq=" + std::to_string(hq) +
                                        ",Hkv=" + std::to_string(hkv) +
                                        ",Sq=" + std::to_string(sq) + ",Sk=" + std::to_string(sk) +
                                        ",D=" + std::to_string(d) + extra;
              CAPTURE(shape);
              const Problem p = problem("attention", shape.c_str());
              const auto h = heuristic_config(attn, p, "sm_90a");
              if (!h) {
                continue; // no point fits (the runtime's [default])
              }
              check_measured(attn, h->first, p);
              ++served;
            }
          }
        }
      }
    }
  }
  CHECK(served > 3500);
}

TEST_CASE(
    "a tuned attention winner served to another problem is a variant the tuner would measure") {
  // The winners of the H100 benchmark grid and feature sections
  // (bench/results/h100-attention*.md), each served by the nearest policy to problems of
  // 1 to 4095 query rows, MHA to MQA, head dims 64-256: adapted, what serves passes the
  // op's check and worth_measuring (no 3-stage ring over fewer than 4 key tiles, no
  // persistent grid that is the plain one, no 128-row block over 16 rows).
  const Op& attn = find_op("attention");
  const Space& space = op_space(attn);
  const char* winners[] = {
      "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma_overlap_"
      "persistent",
      "block_m=128,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma_"
      "persistent",
      "block_m=128,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma_overlap_"
      "persistent",
      "block_m=128,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma_"
      "persistent",
      "block_m=128,block_n=48,warps=4,stages=1,swizzle=pad,q=smem,splits=1,family=mma",
      "block_m=128,block_n=64,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma_pingpong",
      "block_m=128,block_n=64,warps=4,stages=4,swizzle=xor,q=smem,splits=1,family=wgmma_overlap_"
      "persistent",
      "block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma_overlap",
      "block_m=128,block_n=80,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma_pingpong",
      "block_m=128,block_n=80,warps=4,stages=4,swizzle=xor,q=smem,splits=1,family=wgmma_overlap_"
      "persistent",
      "block_m=128,block_n=96,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma",
      "block_m=128,block_n=96,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma_overlap",
      "block_m=16,block_n=128,warps=4,stages=1,swizzle=xor,q=regs,splits=1,family=mma",
      "block_m=16,block_n=128,warps=4,stages=1,swizzle=xor,q=smem,splits=1,family=mma",
      "block_m=16,block_n=128,warps=4,stages=1,swizzle=xor,q=smem,splits=4,family=mma",
      "block_m=16,block_n=128,warps=4,stages=1,swizzle=xor,q=smem,splits=8,family=mma",
      "block_m=16,block_n=128,warps=4,stages=2,swizzle=xor,q=regs,splits=2,family=mma",
      "block_m=16,block_n=128,warps=4,stages=3,swizzle=xor,q=regs,splits=1,family=mma",
      "block_m=16,block_n=128,warps=4,stages=3,swizzle=xor,q=regs,splits=2,family=mma",
      "block_m=16,block_n=128,warps=4,stages=3,swizzle=xor,q=regs,splits=8,family=mma",
      "block_m=192,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma",
      "block_m=192,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma",
      "block_m=192,block_n=128,warps=4,stages=3,swizzle=xor,q=smem,splits=1,family=wgmma_pingpong",
      "block_m=32,block_n=128,warps=4,stages=1,swizzle=xor,q=regs,splits=4,family=mma",
      "block_m=64,block_n=128,warps=4,stages=2,swizzle=xor,q=smem,splits=1,family=wgmma_overlap_"
      "persistent",
  };
  int served = 0;
  for (int b : {1, 2, 4, 16, 64}) {
    for (auto [hq, hkv] : {std::pair{32, 32}, {32, 8}, {16, 1}}) {
      for (int sq : {1, 16, 100, 1000, 4095}) {
        for (int d : {64, 128, 256}) {
          for (const char* extra : {"", ",causal=1", ",dtype=fp16,causal=1"}) {
            const std::string shape = "B=" + std::to_string(b) + ",Hq=" + std::to_string(hq) +
                                      ",Hkv=" + std::to_string(hkv) + ",Sq=" + std::to_string(sq) +
                                      ",Sk=" + std::to_string(sq == 1 ? 3000 : sq) +
                                      ",D=" + std::to_string(d) + extra;
            CAPTURE(shape);
            const Problem p = problem("attention", shape.c_str());
            for (const char* w : winners) {
              CAPTURE(w);
              const Config c = order_config(space, parse_fields(w, "winner"), true, "winner");
              const auto s = serve_config(attn, c, p, "sm_90a");
              if (!s) {
                continue; // cannot run this problem: the nearest policy takes the next winner
              }
              check_measured(attn, *s, p);
              ++served;
            }
          }
        }
      }
    }
  }
  CHECK(served > 10000);
}

TEST_CASE("every selective_scan problem the sm_90 points serve runs a variant the tuner would "
          "measure") {
  // Problems nobody tuned over batch, Mamba channel counts, odd and long lengths, state
  // sizes, dtypes, B/C fixed or variable (one or several groups), the optional inputs
  // and the last state: the heuristic's adapted configuration (blocks sized to the GPU,
  // the small-batch lane shape, fp32 staging where pairs do not fit) passes the op's
  // check and is one the tuner itself would measure.
  const Op& scan = find_op("selective_scan");
  int served = 0, others = 0;
  for (int b : {1, 2, 3, 8, 64}) {
    for (int d : {768, 1536, 2560, 5120}) {
      for (int l : {1, 100, 333, 2047, 4096, 16384}) {
        for (const char* extra :
             {",N=16,dtype=bf16", ",N=16,dtype=fp16,var_bc=B", ",N=16,dtype=fp32",
              ",N=16,var_bc=0,has_z=0", ",N=16,G=4,last_state=1", ",N=8,has_d=0,delta_bias=0",
              ",N=4,softplus=0"}) {
          const std::string shape = "B=" + std::to_string(b) + ",D=" + std::to_string(d) +
                                    ",L=" + std::to_string(l) + extra;
          others += check_served(scan, shape);
          ++served;
        }
      }
    }
  }
  CHECK(served == 5 * 4 * 6 * 7);
  CHECK(others > 3 * served);
}

TEST_CASE("every causal_conv1d problem the sm_90 points serve runs a variant the tuner would "
          "measure") {
  // Problems nobody tuned over batch, channel counts, short, odd and long lengths, widths,
  // dtypes, both layouts and the optional inputs: the heuristic's adapted configuration
  // passes the op's check and is one the tuner itself would measure.
  const Op& conv = find_op("causal_conv1d");
  int served = 0, others = 0;
  for (int b : {1, 2, 8, 64}) {
    for (int c : {64, 768, 2560, 5120}) {
      for (int l : {1, 7, 100, 333, 2047, 4096, 16384}) {
        for (const char* extra :
             {",W=4", ",W=2,dtype=fp16,silu=0", ",W=3,dtype=fp32,bias=0", ",W=4,layout=blc",
              ",W=4,layout=blc,init_states=1", ",W=4,final_states=1"}) {
          const std::string shape = "B=" + std::to_string(b) + ",C=" + std::to_string(c) +
                                    ",L=" + std::to_string(l) + extra;
          others += check_served(conv, shape);
          ++served;
        }
      }
    }
  }
  CHECK(served == 4 * 4 * 7 * 6);
  CHECK(others > 3 * served);
}

TEST_CASE("on GPUs without points of their own every op serves variants that run there") {
  // A100 (108 SMs, 164 KiB of shared memory an SM), RTX 3090 / 4090 / 5090 class (sm_86,
  // sm_89, sm_120: 100 KiB): the H100's points transferred and sized to the GPU, or the
  // op's [default] where none fits (D=256 attention on the 100 KiB GPUs), pass the op's
  // check for that architecture and fit its shared memory.
  struct Gpu {
    int major, minor, sms, smem_kib;
  };
  for (Gpu g :
       {Gpu{8, 0, 108, 164}, Gpu{8, 6, 84, 100}, Gpu{8, 9, 128, 100}, Gpu{12, 0, 170, 100}}) {
    cuda::DeviceInfo device = gpu(g.major, g.minor, g.sms);
    device.smem_per_sm = g.smem_kib * 1024;
    device.smem_per_block_optin = (g.smem_kib - 1) * 1024;
    const std::string arch = device.arch();
    CAPTURE(arch);
    std::vector<std::pair<const char*, std::string>> shapes;
    for (int b : {1, 32}) {
      for (int s : {1, 100, 4095}) {
        for (int d : {64, 96, 128, 256}) {
          for (const char* x : {"", ",causal=1,dtype=fp16"}) {
            shapes.emplace_back("attention", "B=" + std::to_string(b) +
                                                 ",H=16,Sq=" + std::to_string(s) +
                                                 ",Sk=" + std::to_string(s == 1 ? 3000 : s) +
                                                 ",D=" + std::to_string(d) + x);
          }
        }
      }
      for (int l : {1, 100, 2047, 16384}) {
        for (const char* x : {",C=2048,W=4", ",C=768,W=3,dtype=fp32", ",C=2560,W=4,layout=blc"}) {
          shapes.emplace_back("causal_conv1d",
                              "B=" + std::to_string(b) + ",L=" + std::to_string(l) + x);
        }
        for (const char* x : {",D=2048,N=16", ",D=768,N=16,dtype=fp32", ",D=5120,N=16,var_bc=0"}) {
          shapes.emplace_back("selective_scan",
                              "B=" + std::to_string(b) + ",L=" + std::to_string(l) + x);
        }
      }
    }
    for (const auto& [name, shape] : shapes) {
      CAPTURE(shape);
      const Op& op = find_op(name);
      const Problem p = problem(name, shape.c_str());
      const auto h = heuristic_config(op, p, device);
      const Config c = h ? h->first : op_space(op).default_config;
      CHECK(op.check(c, p, arch));
      CHECK(op.geometry(c, p).dynamic_smem <= unsigned(device.smem_per_block_optin));
    }
  }
}

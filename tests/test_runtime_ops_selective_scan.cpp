#include "runtime/base/error.hpp"
#include "runtime/dispatch/variant.hpp"
#include "runtime/ops/selective_scan.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace autotune;

namespace {
const SelectiveScanOp& scan() {
  return static_cast<const SelectiveScanOp&>(find_op("selective_scan"));
}
Problem problem(const std::string& shape) {
  return scan().make_problem(parse_fields(shape, "t"));
}
Config config(const std::string& text) {
  return parse_fields(text, "config");
}
const char* k_default = "threads=32,items=16,cpb=1,nsplit=1,scan=shfl,vec=8,poly=0,minblocks=1";
} // namespace

TEST_CASE("selective_scan problems are canonical, with the Mamba-1 defaults") {
  CHECK(problem("N=16,L=2048,D=2048,B=8").key() ==
        "B=8,D=2048,L=2048,N=16,G=1,dtype=bf16,var_bc=1,delta_bias=1,softplus=1,has_d=1,"
        "has_z=1,last_state=0");
  CHECK(problem("B=1,D=4,L=3,N=4,G=2,dtype=float32,has_z=false,last_state=true").key() ==
        "B=1,D=4,L=3,N=4,G=2,dtype=fp32,var_bc=1,delta_bias=1,softplus=1,has_d=1,has_z=0,"
        "last_state=1");
  for (const auto& s : scan().default_shapes()) {
    CHECK_NOTHROW(problem(s));
  }
}

TEST_CASE("selective_scan takes B and C fixed or variable independently, as mamba-ssm does") {
  // var_bc: 0 both fixed, 1 both variable (the spellings stored before the mixes),
  // B or C: only that one variable.
  CHECK(problem("B=2,D=8,L=32,N=4,var_bc=B").key() ==
        "B=2,D=8,L=32,N=4,G=1,dtype=bf16,var_bc=B,delta_bias=1,softplus=1,has_d=1,has_z=1,"
        "last_state=0");
  CHECK(problem("B=2,D=8,L=32,N=4,G=2,var_bc=c").get("var_bc") == "C");
  CHECK(problem("B=2,D=8,L=32,N=4,var_bc=true").get("var_bc") == "1");
  CHECK(problem("B=2,D=8,L=32,N=4,var_bc=false").get("var_bc") == "0");
  CHECK_THROWS_WITH_AS(problem("B=2,D=8,L=32,N=4,var_bc=2"),
                       doctest::Contains("var_bc=2 must be 0 (B and C fixed), 1 (both variable), "
                                         "B or C (only that one variable)"),
                       Error);

  const Problem only_b = problem("B=3,D=10,L=1000,N=16,var_bc=B,last_state=1");
  const Problem only_c = problem("B=3,D=10,L=1000,N=16,G=2,var_bc=C,dtype=fp32");
  SUBCASE("the variable one is [B, G, N, L] of u's type, the fixed one [D, N] fp32") {
    auto t = scan().tensors(only_b);
    CHECK(t[3].name == "B");
    CHECK(t[3].dtype == DType::bf16);
    CHECK(t[3].elements == 3 * 16 * 1000);
    CHECK(t[4].name == "C");
    CHECK(t[4].dtype == DType::f32);
    CHECK(t[4].elements == 10 * 16);
    auto u = scan().tensors(only_c);
    CHECK(u[3].dtype == DType::f32);
    CHECK(u[3].elements == 10 * 16);
    CHECK(u[4].dtype == DType::f32); // fp32 u: variable C is fp32 too
    CHECK(u[4].elements == 3 * 2 * 16 * 1000);
  }
  SUBCASE("bytes count one variable and one fixed tensor") {
    const double row = 3.0 * 10 * 1000 * 2;
    CHECK(scan().bytes(only_b) == doctest::Approx(4 * row + 3.0 * 16 * 1000 * 2 + 10 * 16 * 4 +
                                                  10 * 16 * 4 + 2 * 10 * 4 + 3 * 10 * 16 * 4));
  }
  SUBCASE("the kernel is told which one varies") {
    auto has = [](const std::vector<std::string>& d, const std::string& flag) {
      return std::find(d.begin(), d.end(), flag) != d.end();
    };
    auto db = scan().defines(config(k_default), only_b);
    CHECK(has(db, "-DAT_VAR_B=1"));
    CHECK(has(db, "-DAT_VAR_C=0"));
    auto dc = scan().defines(config(k_default), only_c);
    CHECK(has(dc, "-DAT_VAR_B=0"));
    CHECK(has(dc, "-DAT_VAR_C=1"));
    auto both = scan().defines(config(k_default), problem("B=3,D=10,L=1000,N=16"));
    CHECK(has(both, "-DAT_VAR_B=1"));
    CHECK(has(both, "-DAT_VAR_C=1"));
  }
  SUBCASE("only the variable one is staged in shared memory") {
    const Problem both = problem("B=3,D=10,L=1000,N=16");
    // time-parallel default: NSLICE rows per variable tensor of 32 lanes x (16 + 4) words
    CHECK(scan().geometry(config(k_default), both).dynamic_smem == 2 * 16 * 32 * 20 * 4);
    CHECK(scan().geometry(config(k_default), only_b).dynamic_smem == 16 * 32 * 20 * 4);
    // state form: one N-row block of 32 + 4 words fewer than with both variable
    Config st = config("threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1");
    CHECK(scan().geometry(st, only_b).dynamic_smem ==
          scan().geometry(st, both).dynamic_smem - 16 * 36 * 4);
    CHECK(scan().geometry(st, only_c).dynamic_smem == scan().geometry(st, only_b).dynamic_smem);
  }
  SUBCASE("packed (B, C) pairs need both variable; groups need the block in one group") {
    Config pair = config("threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,"
                         "minblocks=1,bc=pair");
    CHECK(scan().check(pair, problem("B=3,D=64,L=1000,N=16"), "sm_90a"));
    auto r = scan().check(pair, problem("B=3,D=64,L=1000,N=16,var_bc=C"), "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("bc=pair packs 16-bit variable B and C (both variable)") !=
          std::string::npos);
    auto g =
        scan().check(config("threads=64,items=8,cpb=2,nsplit=1,scan=shfl,vec=8,poly=0,minblocks=1"),
                     problem("B=1,D=12,L=64,N=16,G=4,var_bc=B"), "sm_90a");
    REQUIRE_FALSE(g);
    CHECK(g.failure().message.find("cpb must divide D/G") != std::string::npos);
  }
  SUBCASE("the default variant runs the mixes") {
    for (const char* s : {"B=1,D=1,L=1,N=1,var_bc=B", "B=3,D=7,L=5,N=64,G=7,var_bc=C,dtype=fp32",
                          "B=1,D=5,L=9,N=33,var_bc=C"}) {
      CAPTURE(s);
      CHECK(scan().check(config(k_default), problem(s), "sm_80"));
    }
  }
}

TEST_CASE("bad selective_scan shapes are rejected with the field named") {
  CHECK_THROWS_WITH_AS(problem("B=8,D=64,L=10"), doctest::Contains("missing field 'N'"), Error);
  CHECK_THROWS_WITH_AS(problem("B=8,D=64,L=10,N=128"), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(problem("B=8,D=64,L=10,N=16,G=3"), doctest::Contains("must divide D"),
                       Error);
  CHECK_THROWS_WITH_AS(problem("B=8,D=64,L=10,N=16,G=2,var_bc=0"),
                       doctest::Contains("needs a variable B or C"), Error);
  CHECK_THROWS_WITH_AS(problem("B=8,D=64,L=10,N=16,W=4"), doctest::Contains("unknown field 'W'"),
                       Error);
  CHECK_THROWS_WITH_AS(problem("B=8,D=64,L=10,N=16,has_z=2"), doctest::Contains("must be 0 or 1"),
                       Error);
}

TEST_CASE("selective_scan configuration constraints drop what cannot run") {
  Problem p = problem("B=8,D=2048,L=2048,N=16");
  CHECK(scan().check(config(k_default), p, "sm_90a"));
  CHECK(
      scan().check(config("threads=128,items=16,cpb=4,nsplit=1,scan=shfl,vec=8,poly=2,minblocks=1"),
                   p, "sm_90a"));
  SUBCASE("scan groups must be whole warps") {
    auto r =
        scan().check(config("threads=64,items=8,cpb=2,nsplit=2,scan=shfl,vec=8,poly=0,minblocks=1"),
                     p, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("whole warps") != std::string::npos);
  }
  SUBCASE("vectors must divide a thread's steps") {
    CHECK_FALSE(
        scan().check(config("threads=32,items=4,cpb=1,nsplit=1,scan=shfl,vec=8,poly=0,minblocks=1"),
                     p, "sm_90a"));
  }
  SUBCASE("channels of a block share one B/C group") {
    Problem g = problem("B=1,D=12,L=64,N=16,G=4"); // 3 channels per group
    auto r =
        scan().check(config("threads=64,items=8,cpb=2,nsplit=1,scan=shfl,vec=8,poly=0,minblocks=1"),
                     g, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("cpb must divide D/G") != std::string::npos);
  }
  SUBCASE("the default variant runs every accepted problem") {
    for (const char* s :
         {"B=1,D=1,L=1,N=1", "B=3,D=7,L=5,N=64,G=7,dtype=fp32", "B=1,D=5,L=9,N=33,var_bc=0"}) {
      CAPTURE(s);
      CHECK(scan().check(config(k_default), problem(s), "sm_80"));
    }
  }
  SUBCASE("the staged states shrink to fit 48 KiB") {
    Problem big = problem("B=1,D=64,L=4096,N=64,dtype=fp32");
    // 2 x 64 states x 640 words of fp32 exceed the 96 KiB staging budget.
    int slice = scan().state_slice(config(k_default), big);
    CHECK(slice >= 1);
    CHECK(slice < 64);
    CHECK(64 % slice == 0);
  }
  SUBCASE("the shared-memory scan with a polynomial share is skipped by an H100 prior only") {
    // templates/selective_scan/space.toml, tests/test_runtime_ops_priors.cpp
    Config c = config("threads=64,items=8,cpb=1,nsplit=1,scan=smem,vec=8,poly=2,minblocks=1");
    CHECK(scan().check(c, p, "sm_90a"));
    CHECK(scan().worth_measuring(c, p));
  }
  SUBCASE("register caps that would spill are not measured") {
    Config c = config("threads=512,items=8,cpb=16,nsplit=1,scan=shfl,vec=8,poly=0,minblocks=2");
    CHECK(scan().check(c, p, "sm_90a"));
    CHECK_FALSE(scan().worth_measuring(c, p));
  }
  SUBCASE("more than 48 KiB of shared memory is dynamic, within every arch's limit") {
    LaunchGeometry g = scan().geometry(config(k_default), p);
    CHECK(g.dynamic_smem == 2 * 16 * 32 * (16 + 4) * 4); // all 16 states staged at once
    Config big = config("threads=512,items=16,cpb=4,nsplit=2,scan=smem,vec=8,poly=0,minblocks=1");
    for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_120"}) {
      CAPTURE(arch);
      CHECK(scan().check(big, p, arch));
    }
  }
  SUBCASE("the state-parallel form needs cpb = warps * 32 / nsplit and nsplit dividing N") {
    CHECK(scan().check(
        config("threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=4"), p,
        "sm_90a"));
    auto r = scan().check(
        config("threads=128,items=32,cpb=8,nsplit=8,scan=state,vec=8,poly=0,minblocks=4"), p,
        "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("cpb must equal warps / tsplit * 32 / nsplit * cpl (16)") !=
          std::string::npos);
    Problem n4 = problem("B=1,D=64,L=100,N=4");
    CHECK_FALSE(scan().check(
        config("threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1"), n4,
        "sm_90a"));
    // Dynamic shared memory: 2 x 16 channel rows + 2 x 16 state rows (B, C) + 8 x 17
    // partial rows of 32 + 4 words, and the slice exchange (2 x tsplit x 16 channels x
    // 16 states floats); bc=pair packs B and C into one row per state. u and z stay in
    // registers.
    LaunchGeometry g = scan().geometry(
        config("threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=4"), p);
    CHECK(g.dynamic_smem == (2 * 16 + 2 * 16 + 8 * 17) * 36 * 4 + 2 * 16 * 16 * 4);
    LaunchGeometry gp = scan().geometry(
        config("threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=4,bc=pair"),
        p);
    CHECK(gp.dynamic_smem == g.dynamic_smem - 16 * 36 * 4);
    // Partial-y blocks 34 rows apart for 4 lanes per channel (lanes (1, c) and (0, c + 1)
    // would share banks 33 rows apart); 17 (CPB + 1) served 8 lanes per channel above.
    LaunchGeometry g4 = scan().geometry(
        config("threads=128,items=32,cpb=32,nsplit=4,scan=state,vec=8,poly=0,minblocks=1"), p);
    CHECK(g4.dynamic_smem == (2 * 32 + 2 * 16 + 4 * 34) * 36 * 4 + 2 * 32 * 16 * 4);
    CHECK_FALSE(scan().check(
        config("threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=4,bc=pair"),
        problem("B=8,D=2048,L=2048,N=16,dtype=fp32"), "sm_90a"));
    SUBCASE("time slices divide the warps and the chunk") {
      Config t2 = config("threads=256,items=32,cpb=32,nsplit=4,scan=state,vec=8,poly=0,"
                         "minblocks=1,tsplit=2");
      CHECK(scan().check(t2, p, "sm_90a"));
      CHECK(scan().geometry(t2, p).grid[0] == 8 * 2048 / 32);
      CHECK_FALSE(scan().check(config("threads=256,items=32,cpb=8,nsplit=4,scan=state,vec=8,"
                                      "poly=0,minblocks=1,tsplit=4"),
                               p, "sm_90a")); // 8 / 4 = 2 warps per slice: cpb 16
      CHECK_FALSE(scan().check(config("threads=32,items=16,cpb=1,nsplit=1,scan=shfl,vec=8,"
                                      "poly=0,minblocks=1,tsplit=2"),
                               p, "sm_90a")); // the time-parallel forms have no slices
    }
    CHECK(g.grid[0] == 8 * 2048 / 16);
    SUBCASE("several channels per lane: cpl channels share one lane's B/C reads") {
      Config c2 = config("threads=64,items=32,cpb=32,nsplit=4,scan=state,vec=8,poly=0,"
                         "minblocks=1,cpl=2");
      CHECK(scan().check(c2, p, "sm_90a"));
      CHECK(scan().geometry(c2, p).grid[0] == 8 * 2048 / 32);
      // cpb is warps * 32 / nsplit * cpl
      CHECK_FALSE(scan().check(config("threads=128,items=32,cpb=16,nsplit=4,scan=state,vec=8,"
                                      "poly=0,minblocks=1,cpl=2"),
                               p, "sm_90a"));
      // at most 16 (channel, state) pairs per lane
      auto wide = scan().check(config("threads=64,items=32,cpb=64,nsplit=1,scan=state,vec=8,"
                                      "poly=0,minblocks=1,cpl=2"),
                               p, "sm_90a");
      REQUIRE_FALSE(wide);
      CHECK(wide.failure().message.find("at most 16 (channel, state) pairs") != std::string::npos);
      CHECK_FALSE(scan().check(config("threads=128,items=32,cpb=48,nsplit=4,scan=state,vec=8,"
                                      "poly=0,minblocks=1,cpl=3"),
                               p, "sm_90a"));
      CHECK_FALSE(scan().check(config("threads=256,items=32,cpb=32,nsplit=4,scan=state,vec=8,"
                                      "poly=0,minblocks=1,cpl=2,tsplit=2"),
                               p, "sm_90a")); // slices with one channel per lane only
      CHECK_FALSE(scan().check(config("threads=32,items=16,cpb=1,nsplit=1,scan=shfl,vec=8,"
                                      "poly=0,minblocks=1,cpl=2"),
                               p, "sm_90a")); // the time-parallel forms have one channel
    }
    SUBCASE("partial y stored during the recurrence: one time slice, the state form only") {
      Config during = config("threads=64,items=64,cpb=8,nsplit=8,scan=state,vec=8,poly=0,"
                             "minblocks=1,ystore=during");
      CHECK(scan().check(during, p, "sm_90a"));
      CHECK(scan().worth_measuring(during, p));
      auto sliced = scan().check(config("threads=256,items=32,cpb=32,nsplit=4,scan=state,vec=8,"
                                        "poly=0,minblocks=1,tsplit=2,ystore=during"),
                                 p, "sm_90a");
      REQUIRE_FALSE(sliced);
      CHECK(sliced.failure().message.find("ystore=during needs tsplit=1") != std::string::npos);
      CHECK_FALSE(scan().check(config("threads=32,items=16,cpb=1,nsplit=1,scan=shfl,vec=8,"
                                      "poly=0,minblocks=1,ystore=during"),
                               p, "sm_90a"));
      CHECK_THROWS_WITH_AS(scan().check(config("threads=64,items=64,cpb=8,nsplit=8,scan=state,"
                                               "vec=8,poly=0,minblocks=1,ystore=early"),
                                        p, "sm_90a"),
                           doctest::Contains("ystore must be 'after' or 'during', not 'early'"),
                           Error);
      // Three-valued parameters name all three.
      CHECK_THROWS_WITH_AS(scan().check(config("threads=64,items=64,cpb=8,nsplit=8,scan=state,"
                                               "vec=8,poly=0,minblocks=1,ragged=late"),
                                        p, "sm_90a"),
                           doctest::Contains("ragged must be 'regs', 'async' or 'shift', not "
                                             "'late'"),
                           Error);
      CHECK_THROWS_WITH_AS(scan().check(config("threads=64,items=64,cpb=8,nsplit=8,scan=tree,"
                                               "vec=8,poly=0,minblocks=1"),
                                        p, "sm_90a"),
                           doctest::Contains("scan must be 'shfl', 'smem' or 'state', not 'tree'"),
                           Error);
      // with one channel per lane only on the H100: a search prior (space.toml), not the op's
      CHECK(scan().worth_measuring(config("threads=64,items=32,cpb=32,nsplit=4,scan=state,"
                                          "vec=8,poly=0,minblocks=1,cpl=2,ystore=during"),
                                   p));
    }
  }
  SUBCASE("partial y summed by shuffle levels: 2^yred lanes per channel, the state form only") {
    const std::string base = "threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,"
                             "minblocks=1,";
    for (int yred = 0; yred <= 2; ++yred) {
      CHECK(scan().check(config(base + "yred=" + std::to_string(yred)), p, "sm_90a"));
    }
    auto three = scan().check(config(base + "yred=3"), p, "sm_90a");
    REQUIRE_FALSE(three);
    CHECK(three.failure().message.find("yred (shuffle levels over the partial y) must be 0..2") !=
          std::string::npos);
    // two levels need 4 lanes per channel
    CHECK_FALSE(scan().check(config("threads=128,items=32,cpb=64,nsplit=2,scan=state,vec=8,"
                                    "poly=0,minblocks=1,yred=2"),
                             p, "sm_90a"));
    CHECK(scan().check(config("threads=128,items=32,cpb=64,nsplit=2,scan=state,vec=8,poly=0,"
                              "minblocks=1,yred=1"),
                       p, "sm_90a"));
    CHECK_FALSE(scan().check(config("threads=32,items=16,cpb=1,nsplit=1,scan=shfl,vec=8,poly=0,"
                                    "minblocks=1,yred=1"),
                             p, "sm_90a"));
    // Each level halves the partial-y rows (8 lanes per channel: 8 x 17, 4 x 18, 2 x 20
    // rows of 32 + 4 words): the stride puts the 16 lanes of a float2 pass (yred=1) or
    // the 32 of a one-word pass (yred=2) on distinct banks.
    const long long staged = (2 * 16 + 2 * 16) * 36 * 4 + 2 * 16 * 16 * 4;
    CHECK(scan().geometry(config(base + "yred=0"), p).dynamic_smem == staged + 8 * 17 * 36 * 4);
    CHECK(scan().geometry(config(base + "yred=1"), p).dynamic_smem == staged + 4 * 18 * 36 * 4);
    CHECK(scan().geometry(config(base + "yred=2"), p).dynamic_smem == staged + 2 * 20 * 36 * 4);
    // Which schedule is measured with which yred is an H100 search prior (space.toml,
    // tests/test_runtime_ops_priors.cpp): the op measures every one.
    for (const char* schedule :
         {"yred=0", "yred=1", "yred=2", "yred=0,ystore=during", "yred=1,ystore=during"}) {
      CHECK(scan().worth_measuring(config(base + schedule), p));
    }
    CHECK(scan().worth_measuring(config("threads=32,items=32,cpb=32,nsplit=1,scan=state,vec=8,"
                                        "poly=0,minblocks=1"),
                                 p));
    CHECK_THROWS_WITH_AS(scan().check(config(base + "yred=x"), p, "sm_90a"),
                         doctest::Contains("yred"), Error);
  }
  SUBCASE("a ragged L takes its next chunk in registers, through shared memory or shifted") {
    const std::string pair = "threads=128,items=64,cpb=16,nsplit=8,scan=state,vec=8,poly=0,"
                             "minblocks=1,bc=pair,yred=1,";
    const Problem ragged = problem("B=2,D=2560,L=8191,N=16");
    const Problem aligned = problem("B=2,D=2560,L=8192,N=16");
    auto has = [](const std::vector<std::string>& defines, const char* d) {
      return std::find(defines.begin(), defines.end(), d) != defines.end();
    };
    CHECK(has(scan().defines(config(pair + "ragged=regs"), ragged), "-DAT_RAGGED=1"));
    CHECK(has(scan().defines(config(pair + "ragged=async"), ragged), "-DAT_RAGGED=2"));
    CHECK(has(scan().defines(config(pair + "ragged=shift"), ragged), "-DAT_RAGGED=3"));
    CHECK_FALSE(has(scan().defines(config(pair + "ragged=async"), aligned), "-DAT_RAGGED=2"));
    CHECK_FALSE(has(scan().defines(config(pair + "ragged=shift"), aligned), "-DAT_RAGGED=3"));
    // The shared-memory tile: per row of u, delta, z (16 channels each) and of B and C
    // (16 states each), 64 bf16 steps in 9 blocks of 16 bytes; an offset per channel (4
    // ints) and per B/C row; two 16-byte alignments.
    const long long tile = (3 * 16 + 2 * 16) * 9 * 16 + (4 * 16 + 2 * 16) * 4 + 2 * 15;
    CHECK(scan().geometry(config(pair + "ragged=async"), ragged).dynamic_smem ==
          scan().geometry(config(pair + "ragged=regs"), ragged).dynamic_smem + tile);
    CHECK(scan().check(config(pair + "ragged=async"), ragged, "sm_90a"));
    CHECK(scan().worth_measuring(config(pair + "ragged=async"), ragged));
    // ragged=shift lays out the same tile (its calls whose rows disagree run as async)
    // and has room for 8 classes of channels: 8 * ceil(320 / 16) blocks a batch.
    const LaunchGeometry shifted = scan().geometry(config(pair + "ragged=shift"), ragged);
    CHECK(shifted.dynamic_smem ==
          scan().geometry(config(pair + "ragged=async"), ragged).dynamic_smem);
    CHECK(shifted.grid[0] == 2 * 8 * 20);
    CHECK(
        scan().geometry(config(pair + "ragged=shift"), problem("B=2,D=1000,L=8191,N=16")).grid[0] ==
        2 * 8 * 8); // 125 channels a class: 8 blocks of 16
    CHECK(scan().check(config(pair + "ragged=shift"), ragged, "sm_90a"));
    CHECK(scan().worth_measuring(config(pair + "ragged=shift"), ragged));
    CHECK_FALSE(scan().worth_measuring(config(pair + "ragged=shift"), aligned));
    // Where L is a multiple of vec both build the same kernel: measured once.
    CHECK(scan().worth_measuring(config(pair + "ragged=regs"), aligned));
    CHECK_FALSE(scan().worth_measuring(config(pair + "ragged=async"), aligned));
    // The time-parallel scans have one ragged path.
    CHECK_FALSE(scan().check(config(std::string(k_default) + ",ragged=async"), ragged, "sm_90a"));
    CHECK_THROWS_WITH_AS(scan().check(config(pair + "ragged=smem"), ragged, "sm_90a"),
                         doctest::Contains("ragged"), Error);
  }
  SUBCASE("tuning skips state-parallel variants whose registers cannot fit") {
    Config c = config("threads=512,items=64,cpb=64,nsplit=8,scan=state,vec=8,poly=0,minblocks=2");
    CHECK(scan().check(c, p, "sm_90a"));
    CHECK_FALSE(scan().worth_measuring(c, p));
  }
  SUBCASE("unknown parameters are configuration errors") {
    CHECK_THROWS_AS(scan().check(config("threads=32,items=16,cpb=1,nsplit=1,scan=fast,vec=8,"
                                        "poly=0,minblocks=1"),
                                 p, "sm_90a"),
                    Error);
  }
}

TEST_CASE("selective_scan geometry, tensors and effective bytes follow the problem") {
  Problem p = problem("B=3,D=10,L=1000,N=16");
  LaunchGeometry g = scan().geometry(config("threads=128,items=8,cpb=4,nsplit=1,scan=shfl,vec=8,"
                                            "poly=0,minblocks=1"),
                                     p);
  CHECK(g.block[0] == 128);
  CHECK(g.grid[0] == 3 * 3); // ceil(10 / 4) channel blocks per batch
  auto t = scan().tensors(p);
  REQUIRE(t.size() == 9); // u delta A B C D z delta_bias out
  CHECK(t[3].name == "B");
  CHECK(t[3].bytes() == 3 * 1 * 16 * 1000 * 2);
  CHECK(t.back().output);
  // bench/shapes.toml: 4*B*D*L*2 + 2*B*N*L*2, plus A, D and delta_bias (fp32).
  Problem bench = problem("B=8,D=2048,L=2048,N=16");
  CHECK(scan().bytes(bench) == doctest::Approx(4.0 * 8 * 2048 * 2048 * 2 + 2.0 * 8 * 16 * 2048 * 2 +
                                               2048 * 16 * 4 + 2 * 2048 * 4));
  CHECK(scan().exponentials(bench) == doctest::Approx(8.0 * 2048 * 2048 * 16));
  auto fixed = scan().tensors(problem("B=1,D=4,L=8,N=4,var_bc=0,has_z=0,last_state=1"));
  CHECK(fixed[3].dtype == DType::f32);
  CHECK(fixed[3].elements == 16);
  CHECK(fixed.back().name == "last_state");
}

TEST_CASE("NVRTC compiles selective_scan for sm_80, sm_89, sm_90a and sm_120 without a GPU") {
  // A handful of compiles only: each takes about a second on one core.
  const Op& op = scan();
  Problem bench = problem("B=8,D=2048,L=2048,N=16");
  for (const char* arch : {"sm_80", "sm_89", "sm_90a", "sm_120"}) {
    CAPTURE(arch);
    // The default (time-parallel) variant and a state-parallel one with time slices
    // and packed B/C.
    for (const char* c : {k_default, "threads=128,items=32,cpb=16,nsplit=4,scan=state,vec=8,"
                                     "poly=1,minblocks=2,tsplit=2,bc=pair"}) {
      CAPTURE(c);
      REQUIRE(op.check(config(c), bench, arch));
      VariantSource v = describe_variant(op, config(c), bench, arch);
      auto out = compile_variant(v);
      REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().message + out.failure().detail));
      CHECK(out->binary.substr(1, 3) == "ELF");
    }
  }
  // The other paths: shared-memory scan, split states, fixed B/C, all optional parts.
  Problem other = problem("B=2,D=8,L=100,N=8,var_bc=0,dtype=fp32,last_state=1");
  VariantSource v = describe_variant(
      op, config("threads=128,items=4,cpb=2,nsplit=2,scan=smem,vec=4,poly=8,minblocks=1"), other,
      "sm_90a");
  auto out = compile_variant(v);
  REQUIRE_MESSAGE(out.ok(), (out.ok() ? "" : out.failure().message + out.failure().detail));
  // One fixed and one variable B/C: the state form and a time-parallel one with groups.
  for (const auto& [shape, c] :
       {std::pair{"B=2,D=64,L=100,N=16,var_bc=B,dtype=bf16",
                  "threads=128,items=32,cpb=16,nsplit=8,scan=state,vec=8,poly=0,minblocks=1"},
        std::pair{"B=2,D=64,L=100,N=16,G=2,var_bc=C,dtype=fp16,last_state=1",
                  "threads=128,items=8,cpb=2,nsplit=2,scan=smem,vec=8,poly=3,minblocks=1"}}) {
    CAPTURE(shape);
    VariantSource m = describe_variant(op, config(c), problem(shape), "sm_90a");
    auto mixed = compile_variant(m);
    REQUIRE_MESSAGE(mixed.ok(),
                    (mixed.ok() ? "" : mixed.failure().message + mixed.failure().detail));
  }
}

TEST_CASE("a state-form configuration borrowed for a small batch gets more lanes per channel "
          "until the problem fills 256 blocks and 768 warps") {
  const auto field = [](const Config& c, const char* key) {
    const std::string* v = find_field(c, key);
    REQUIRE(v != nullptr);
    return *v;
  };
  // The B=8, D=2048 point's configuration: 32 blocks of 64 channels at B=2.
  const Config grid_point = config("threads=128,items=32,cpb=64,nsplit=2,scan=state,vec=8,poly=0,"
                                   "minblocks=1,tsplit=1,bc=f32,cpl=1,ystore=after,yred=1");
  SUBCASE("too few blocks: cpb halves while nsplit doubles, threads stay") {
    // 20480 channels in blocks of 128: 160 blocks; of 64: 320 (2560 warps).
    const Config wide = config("threads=256,items=32,cpb=128,nsplit=2,scan=state,vec=8,poly=0,"
                               "minblocks=1,tsplit=1,bc=f32,cpl=1,ystore=after,yred=1");
    const Problem p = problem("B=2,D=10240,L=512,N=16");
    const Config c = scan().adapt(wide, p);
    CHECK(field(c, "cpb") == "64");
    CHECK(field(c, "nsplit") == "4");
    CHECK(field(c, "threads") == "256");
    CHECK(scan().check(c, p, "sm_90a"));
  }
  SUBCASE("then, with enough blocks but too few warps, threads double and cpb stays") {
    // One warp of 32 channels: 640 blocks, 640 warps at B=2, D=10240.
    const Config narrow = config("threads=32,items=32,cpb=32,nsplit=1,scan=state,vec=8,poly=0,"
                                 "minblocks=1,tsplit=1,bc=f32,cpl=1,ystore=after,yred=1");
    const Problem p = problem("B=2,D=10240,L=4096,N=16");
    const Config c = scan().adapt(narrow, p);
    CHECK(field(c, "cpb") == "32");
    CHECK(field(c, "threads") == "64"); // 1280 warps
    CHECK(field(c, "nsplit") == "2");
    CHECK(scan().check(c, p, "sm_90a"));
  }
  SUBCASE("a problem that already fills the GPU keeps the configuration") {
    const Problem big = problem("B=16,D=1536,L=1024,N=16");
    CHECK(scan().adapt(grid_point, big) == grid_point);
  }
  SUBCASE("a small batch takes 16 channels a block, B/C as pairs, lanes by its channels") {
    // Up to 6144 channels: 128 threads of 64 steps, 8 lanes a channel; ragged or not.
    for (const char* shape :
         {"B=2,D=2048,L=333,N=16", "B=2,D=3072,L=512,N=16", "B=1,D=5120,L=2047,N=16"}) {
      CAPTURE(std::string(shape));
      const Problem p = problem(shape);
      const Config c = scan().adapt(grid_point, p);
      CHECK(field(c, "threads") == "128");
      CHECK(field(c, "items") == "64");
      CHECK(field(c, "cpb") == "16");
      CHECK(field(c, "nsplit") == "8");
      CHECK(field(c, "bc") == "pair");
      CHECK(field(c, "yred") == "2");
      CHECK(field(c, "ystore") == "after");
      CHECK(scan().check(c, p, "sm_90a"));
    }
    // Above, up to 16384: 64 threads of 32 steps, 4 lanes a channel.
    for (const char* shape :
         {"B=8,D=1536,L=1500,N=16", "B=4,D=2048,L=333,N=16", "B=8,D=2048,L=2048,N=16"}) {
      CAPTURE(std::string(shape));
      const Problem p = problem(shape);
      const Config c = scan().adapt(grid_point, p);
      CHECK(field(c, "threads") == "64");
      CHECK(field(c, "items") == "32");
      CHECK(field(c, "cpb") == "16");
      CHECK(field(c, "nsplit") == "4");
      CHECK(field(c, "bc") == "pair");
      CHECK(field(c, "yred") == "1");
      CHECK(field(c, "ystore") == "after");
      CHECK(field(c, "minblocks") == "1");
      CHECK(scan().check(c, p, "sm_90a"));
    }
    // More channels keep the point's lanes and B/C rows.
    const Config wide = scan().adapt(grid_point, problem("B=16,D=2048,L=1000,N=16"));
    CHECK(field(wide, "items") == "32");
    CHECK(field(wide, "bc") == "f32");
    // fp32 inputs have no pairs to stage.
    const Config f32 = scan().adapt(grid_point, problem("B=2,D=2048,L=333,N=16,dtype=fp32"));
    CHECK(field(f32, "bc") == "f32");
  }
  SUBCASE("ragged rows take whole vectors on shifted timelines") {
    for (const char* shape : {"B=1,D=5120,L=2047,N=16", "B=2,D=2560,L=8191,N=16",
                              "B=2,D=2048,L=333,N=16", "B=8,D=1536,L=1500,N=16",
                              "B=32,D=2048,L=1001,N=16", "B=2,D=2048,L=333,N=16,dtype=fp32"}) {
      CAPTURE(std::string(shape));
      const Problem p = problem(shape);
      const Config c = scan().adapt(grid_point, p);
      CHECK(field(c, "ragged") == "shift");
      CHECK(scan().check(c, p, "sm_90a"));
    }
    // Aligned rows keep the vector build (ragged unread).
    const Config c = scan().adapt(grid_point, problem("B=2,D=2560,L=8192,N=16"));
    const std::string* v = find_field(c, "ragged");
    CHECK((v == nullptr || *v == "regs"));
  }
  SUBCASE("N caps the lanes per channel") {
    const Problem few_states = problem("B=1,D=256,L=2048,N=4");
    const Config c = scan().adapt(grid_point, few_states);
    CHECK(field(c, "nsplit") == "4");
  }
}

#include "runtime/base/error.hpp"
#include "runtime/ops/causal_conv1d.hpp"
#include "runtime/ops/space.hpp"
#include "runtime/ops/templates.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace autotune;

namespace {
const Op& conv() {
  return find_op("causal_conv1d");
}
Problem problem(const std::string& shape) {
  return conv().make_problem(parse_fields(shape, "t"));
}
Config config(const std::string& text) {
  return parse_fields(text, "config");
}
} // namespace

TEST_CASE("causal_conv1d problems are canonical, with documented defaults") {
  Problem p = problem("C=4096,B=8,L=2048,dtype=bf16");
  CHECK(
      p.key() ==
      "B=8,C=4096,L=2048,W=4,x=bf16,w=bf16,bias=1,silu=1,init_states=0,final_states=0,layout=bcl");
  CHECK(problem("B=1,C=2,L=3,W=2,dtype=fp32,wdtype=bf16,bias=false,silu=0").key() ==
        "B=1,C=2,L=3,W=2,x=fp32,w=bf16,bias=0,silu=0,init_states=0,final_states=0,layout=bcl");
  CHECK(problem("B=1,C=2,L=3,dtype=float16").get("x") == "fp16");
}

TEST_CASE("bad causal_conv1d shapes are rejected with the field named") {
  CHECK_THROWS_WITH_AS(problem("B=8,C=64,L=10,W=5"), doctest::Contains("W=5 is not supported"),
                       Error);
  CHECK_THROWS_WITH_AS(problem("B=8,L=10"), doctest::Contains("missing field 'C'"), Error);
  CHECK_THROWS_WITH_AS(problem("B=8,C=4,L=10,D=3"), doctest::Contains("unknown field 'D'"), Error);
  CHECK_THROWS_WITH_AS(problem("B=8,C=4,L=10,dtype=int8"), doctest::Contains("unknown dtype"),
                       Error);
  CHECK_THROWS_WITH_AS(problem("B=0,C=4,L=10"), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,C=4,L=10,layout=bdl"),
                       doctest::Contains("layout 'bdl' is not one of bcl"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,C=4,L=10,silu=2"), doctest::Contains("must be 0 or 1"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,C=4,L=10,seq_idx=1"),
                       doctest::Contains("needs channel-last x (layout=blc)"), Error);
  CHECK_THROWS_WITH_AS(problem("B=1,C=4,L=10,layout=blc,seq_idx=1,final_states=1"),
                       doctest::Contains("takes no initial or final states"), Error);
  // B*C*L overflows 64 bits: refused, not wrapped around below the limit
  CHECK_THROWS_WITH_AS(problem("B=1048576,C=1048576,L=16777216"), doctest::Contains("too large"),
                       Error);
}

TEST_CASE("configuration constraints drop what cannot run") {
  Problem p = problem("B=8,C=4096,L=2048");
  CHECK(conv().check(config("threads=128,vec=8,items=2,cpb=1,load=direct"), p, "sm_90a"));
  SUBCASE("the shuffle path needs whole warps per channel") {
    auto r = conv().check(config("threads=64,vec=8,items=1,cpb=4,load=direct"), p, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("whole warps") != std::string::npos);
    CHECK(conv().check(config("threads=64,vec=8,items=1,cpb=4,load=smem"), p, "sm_90a"));
  }
  SUBCASE("shared-memory tiles over 48 KiB") {
    Problem f32 = problem("B=8,C=4096,L=65536,dtype=fp32");
    auto r = conv().check(config("threads=512,vec=8,items=4,cpb=1,load=smem"), f32, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("48 KiB") != std::string::npos);
  }
  SUBCASE("tiles far longer than the sequence") {
    Problem short_rows = problem("B=8,C=4096,L=64");
    Config c = config("threads=512,vec=8,items=4,cpb=1,load=direct");
    CHECK(conv().check(c, short_rows, "sm_90a")); // it runs: the runtime's default may need it
    CHECK_FALSE(conv().worth_measuring(c, short_rows));
  }
  SUBCASE("unknown parameters are configuration errors") {
    CHECK_THROWS_AS(conv().check(config("threads=128,vec=8,items=2,cpb=1,load=fast"), p, "sm_90a"),
                    Error);
  }
}

TEST_CASE("launch geometry covers every channel and position") {
  Problem p = problem("B=3,C=10,L=1000,W=4");
  LaunchGeometry g = conv().geometry(config("threads=128,vec=8,items=2,cpb=4,load=smem"), p);
  CHECK(g.block[0] == 128);
  CHECK(g.grid[0] == 3 * 3); // ceil(10 / 4) channel groups per batch
  CHECK(g.grid[1] == 2);     // tile = 32 threads * 8 * 2 = 512 positions
}

TEST_CASE("a length that is not a multiple of the vector builds the ragged-row kernel") {
  const auto& op = static_cast<const CausalConv1dOp&>(conv());
  Config c = config("threads=128,vec=8,items=2,cpb=1,load=direct");
  auto has_ragged = [](const std::vector<std::string>& defines) {
    return std::find(defines.begin(), defines.end(), "-DAT_RAGGED=1") != defines.end();
  };
  CHECK_FALSE(has_ragged(op.defines(c, problem("B=2,C=64,L=4096,W=4"))));
  CHECK(has_ragged(op.defines(c, problem("B=2,C=64,L=4095,W=4"))));
  CHECK(has_ragged(op.defines(c, problem("B=2,C=64,L=3,W=4"))));
  // vec=4 divides 1000, vec=8 does not
  CHECK_FALSE(has_ragged(op.defines(config("threads=128,vec=4,items=2,cpb=1,load=smem"),
                                    problem("B=2,C=64,L=1004,W=4"))));

  SUBCASE("vector accesses: where rows are aligned, and always for ragged rows") {
    auto mode = [&](const char* shape, CUdeviceptr x, CUdeviceptr out, long long xbs, long long xcs,
                    long long obs, long long ocs) {
      Problem p = problem(shape);
      CausalConv1dPlan plan = op.conv_plan(c, p);
      CausalConv1dCall call;
      call.x = x;
      call.out = out;
      call.x_batch_stride = xbs;
      call.x_channel_stride = xcs;
      call.out_batch_stride = obs;
      call.out_channel_stride = ocs;
      return op.kernel_args(plan, call).vector_mode;
    };
    const CUdeviceptr a = 1 << 20, b = 1 << 24;
    // aligned shapes: vectors only where every row starts on a 16-byte boundary
    CHECK(mode("B=2,C=64,L=4096,W=4", a, b, 64 * 4096, 4096, 64 * 4096, 4096) == 1);
    CHECK(mode("B=2,C=64,L=4096,W=4", a + 2, b, 64 * 4096, 4096, 64 * 4096, 4096) == 0);
    CHECK(mode("B=2,C=64,L=4096,W=4", a, b, 64 * 4100, 4100, 64 * 4096, 4096) == 0);
    // ragged: vectors whatever the offsets and strides (rows of x and out at different
    // shifts are realigned in the kernel)
    CHECK(mode("B=2,C=64,L=4095,W=4", a, b, 64 * 4095, 4095, 64 * 4095, 4095) == 1);
    CHECK(mode("B=2,C=64,L=4095,W=4", a + 6, b + 6, 64 * 4095, 4095, 64 * 4095, 4095) == 1);
    CHECK(mode("B=2,C=64,L=4095,W=4", a + 6, b, 64 * 4095, 4095, 64 * 4095, 4095) == 1);
    // mamba's view of x (batch stride L, channel stride B*L) against a contiguous out
    CHECK(mode("B=2,C=64,L=4095,W=4", a, b, 4095, 2 * 4095, 64 * 4095, 4095) == 1);
  }

  SUBCASE("spans (vector_mode 2) only where every block's rows are one aligned run") {
    const Config spans = parse_fields("threads=128,vec=8,items=4,cpb=8,load=span", "config");
    const Problem p = problem("B=2,C=64,L=333,W=2");
    REQUIRE(op.check(spans, p, "sm_90a"));
    auto mode = [&](const Config& config, CUdeviceptr x, CUdeviceptr out, long long xbs,
                    long long xcs, long long obs, long long ocs) {
      CausalConv1dCall call;
      call.x = x;
      call.out = out;
      call.x_batch_stride = xbs;
      call.x_channel_stride = xcs;
      call.out_batch_stride = obs;
      call.out_channel_stride = ocs;
      return op.kernel_args(op.conv_plan(config, p), call).vector_mode;
    };
    const CUdeviceptr a = 1 << 20, b = 1 << 24;
    const long long L = 333, CL = 64 * 333; // C * L is a multiple of 8
    // contiguous x and out, aligned: runs
    CHECK(mode(spans, a, b, CL, L, CL, L) == 2);
    // a channel slice of a contiguous [B, 2C, L] (xz.chunk(2, dim=1)): rows back to back
    CHECK(mode(spans, a, b, 2 * CL, L, CL, L) == 2);
    // a base off the vector, rows not back to back (padded rows, Mamba-1's [2C, B*L]
    // projection), a batch stride off the vector: the staged ragged path
    CHECK(mode(spans, a + 2, b, CL, L, CL, L) == 1);
    CHECK(mode(spans, a, b + 6, CL, L, CL, L) == 1);
    CHECK(mode(spans, a, b, 64 * 336, 336, CL, L) == 1);
    CHECK(mode(spans, a, b, L, 2 * L, CL, L) == 1);
    CHECK(mode(spans, a, b, CL + 3, L, CL, L) == 1);
    // the same call with a staged configuration: never runs
    const Config staged = parse_fields("threads=128,vec=8,items=4,cpb=8,load=smem", "config");
    CHECK(mode(staged, a, b, CL, L, CL, L) == 1);
    // cpb * L off the vector, or a tile shorter than the row: spans refused by check()
    CHECK_FALSE(
        op.check(parse_fields("threads=64,vec=8,items=4,cpb=4,load=span", "config"), p, "sm_90a"));
    CHECK_FALSE(
        op.check(parse_fields("threads=128,vec=8,items=2,cpb=8,load=span", "config"), p, "sm_90a"));
    CHECK_FALSE(op.check(spans, problem("B=2,C=64,L=333,W=2,layout=blc"), "sm_90a"));
  }
}

TEST_CASE("tensors and effective bytes follow the problem") {
  Problem p = problem("B=2,C=8,L=16,W=3,dtype=bf16,wdtype=fp32,bias=1");
  auto t = conv().tensors(p);
  REQUIRE(t.size() == 4);
  CHECK(t[0].name == "x");
  CHECK(t[0].bytes() == 2 * 8 * 16 * 2);
  CHECK(t[1].bytes() == 8 * 3 * 4);
  CHECK(t[3].output);
  CHECK(conv().bytes(p) == doctest::Approx(2.0 * 2 * 8 * 16 * 2 + 8 * 4 * 4));
  CHECK(conv().tensors(problem("B=2,C=8,L=16,bias=0")).size() == 3);
  auto with_states = conv().tensors(problem("B=2,C=8,L=16,W=4,init_states=1,final_states=1"));
  REQUIRE(with_states.size() == 6);
  CHECK(with_states[3].name == "initial_states");
  CHECK(with_states[3].elements == 2 * 8 * 3);
  CHECK(with_states[5].name == "final_states");
  CHECK(with_states[5].output);
}

TEST_CASE("packed sequences (seq_idx) join the key only when on, with their int32 ids") {
  const auto& op = static_cast<const CausalConv1dOp&>(conv());
  CHECK(problem("B=2,C=8,L=16,layout=blc,seq_idx=0").key().find("seq_idx") == std::string::npos);
  Problem p = problem("B=2,C=8,L=16,layout=blc,seq_idx=1");
  CHECK(p.key() == "B=2,C=8,L=16,W=4,x=bf16,w=bf16,bias=1,silu=1,init_states=0,final_states=0,"
                   "layout=blc,seq_idx=1");
  auto defines = op.defines(config("threads=64,vec=4,items=4,cpb=1,load=direct"), p);
  CHECK(std::find(defines.begin(), defines.end(), "-DAT_SEQ_IDX=1") != defines.end());
  auto t = op.tensors(p);
  REQUIRE(t.back().name == "seq_idx");
  REQUIRE(t.back().values.size() == 2 * 16);
  // nondecreasing ids per row up to its padding (-1, the odd row's last eighth), a
  // sequence shorter than the filter among them
  const std::vector<int>& ids = t.back().values;
  for (size_t b = 0; b < 2; ++b) {
    for (size_t i = 1; i < 16; ++i) {
      if (ids[b * 16 + i] >= 0) {
        CHECK(ids[b * 16 + i] >= ids[b * 16 + i - 1]);
      }
    }
  }
  CHECK(std::count(ids.begin(), ids.begin() + 16, 1) <= 2);
  CHECK(std::count(ids.begin(), ids.begin() + 16, -1) == 0);
  CHECK(std::count(ids.begin() + 16, ids.end(), -1) == 2);
  CHECK(ids.back() == -1);
  CHECK(conv().bytes(p) ==
        doctest::Approx(conv().bytes(problem("B=2,C=8,L=16,layout=blc")) + 4.0 * 2 * 16));
}

TEST_CASE("channel-last x (layout blc) has its own kernel form, launch and vectors") {
  const auto& op = static_cast<const CausalConv1dOp&>(conv());
  Problem p = problem("B=8,C=4096,L=2048,W=4,layout=blc");
  CHECK(p.get("layout") == "blc");
  Config c = config("threads=128,vec=8,items=4,cpb=1,load=direct");
  CHECK(op.check(c, p, "sm_90a"));
  SUBCASE("one form: cpb=1 and direct loads, which the tuner walks alone") {
    auto r = op.check(config("threads=128,vec=8,items=4,cpb=2,load=direct"), p, "sm_90a");
    REQUIRE_FALSE(r);
    CHECK(r.failure().message.find("channel-last") != std::string::npos);
    CHECK_FALSE(op.check(config("threads=128,vec=8,items=4,cpb=1,load=smem"), p, "sm_90a"));
    // fp32 pairs are 8 bytes but cover less than the W-1 halo kernel.cuh asserts
    CHECK_FALSE(op.check(config("threads=128,vec=2,items=4,cpb=1,load=direct"),
                         problem("B=8,C=4096,L=2048,W=4,layout=blc,dtype=fp32"), "sm_90a"));
    // the ring (3 steps of items vectors a thread) fits in 48 KiB of static shared memory
    auto big = op.check(config("threads=256,vec=8,items=8,cpb=1,load=direct"), p, "sm_90a");
    REQUIRE_FALSE(big);
    CHECK(big.failure().message.find("ring of 98304 bytes exceeds 48 KiB") != std::string::npos);
    auto rules = op.inert_params(p);
    REQUIRE(rules.size() == 1);
    CHECK(rules[0].when.empty());
    CHECK(rules[0].fixed == Fields{{"cpb", "1"}, {"load", "direct"}});
    CHECK(op.inert_params(problem("B=8,C=4096,L=2048")).empty());
    // a channel-first winner serves it in its one form
    CHECK(op.adapt(config("threads=256,vec=4,items=2,cpb=4,load=smem"), p) ==
          config("threads=256,vec=4,items=2,cpb=1,load=direct"));
  }
  SUBCASE("the kernel is channel_last.cuh's, its lanes covering the channel vectors") {
    auto defines = op.defines(c, p);
    CHECK(std::find(defines.begin(), defines.end(), "-DAT_CHANNEL_LAST=1") != defines.end());
    CHECK(std::find(defines.begin(), defines.end(), "-DAT_CL_LANES=128") != defines.end());
    CHECK(std::find(defines.begin(), defines.end(), "-DAT_RAGGED=1") == defines.end());
    // 5 vectors of 8 channels: 8 lanes, 16 position chunks a block of 128
    auto narrow = op.defines(c, problem("B=2,C=40,L=1001,W=4,layout=blc"));
    CHECK(std::find(narrow.begin(), narrow.end(), "-DAT_CL_LANES=8") != narrow.end());
    CHECK(std::find(narrow.begin(), narrow.end(), "-DAT_RAGGED=1") == narrow.end());
  }
  SUBCASE("the grid covers every channel vector and position, in chunks of whole steps") {
    LaunchGeometry g = op.geometry(c, p);
    CausalConv1dPlan plan = op.conv_plan(c, p);
    CHECK(g.block[0] == 128);
    CHECK(g.grid[0] == 8 * 4); // 512 channel vectors / 128 lanes, per batch
    CHECK(plan.chunk % 4 == 0);
    CHECK((long long)g.grid[1] * plan.chunk >= 2048);
    CHECK((long long)(g.grid[1] - 1) * plan.chunk < 2048);
    // about two waves of threads (132 SMs x 2048 on the H100): 8*512*2048/4 threads of
    // one step each would be 7.8 waves, so 3 steps; but at least 4, which keeps 2 waves
    CHECK(plan.chunk == 16);
    // 1 step would fill two waves; 4 steps keep half a wave (4*640*256 / 4 threads)
    CHECK(op.conv_plan(config("threads=64,vec=4,items=8,cpb=1,load=direct"),
                       problem("B=4,C=2560,L=2047,W=4,layout=blc"))
              .chunk == 32);
    // fewer threads than half a wave even at one step: one step
    CHECK(op.conv_plan(config("threads=64,vec=8,items=8,cpb=1,load=direct"),
                       problem("B=2,C=2048,L=2048,W=4,layout=blc"))
              .chunk == 8);
    // a row shorter than one step: one chunk of the whole row
    Problem tiny = problem("B=1,C=16,L=3,W=4,layout=blc");
    CHECK(op.conv_plan(c, tiny).chunk == 3);
    CHECK(op.geometry(c, tiny).grid[1] == 1);
    CHECK_FALSE(op.worth_measuring(c, tiny)); // steps of 4 positions never run whole
    CHECK(op.worth_measuring(config("threads=128,vec=8,items=1,cpb=1,load=direct"), tiny));
    // the longest rows: chunks grow to keep the grid's y under 65535; positions stay in
    // 32-bit ints, or the configuration is refused
    Problem longest = problem("B=1,C=8,L=1073741824,W=4,layout=blc");
    LaunchGeometry lg = op.geometry(c, longest);
    CHECK(lg.grid[1] <= 65535);
    CHECK((long long)lg.grid[1] * 128 * op.conv_plan(c, longest).chunk >= 1073741824LL);
    CHECK(op.check(c, longest, "sm_90a"));
    auto edge = op.check(c, problem("B=1,C=8,L=2147483647,W=4,layout=blc"), "sm_90a");
    CHECK_FALSE(edge);
    CHECK(edge.failure().message.find("32-bit positions") != std::string::npos);
  }
  SUBCASE("vectors where every position's channels start aligned") {
    CausalConv1dPlan plan = op.conv_plan(c, p);
    auto mode = [&](CUdeviceptr x, long long xbs, long long xls) {
      CausalConv1dCall call;
      call.x = x;
      call.out = 1 << 24;
      call.x_batch_stride = xbs;
      call.x_channel_stride = call.out_channel_stride = 1;
      call.x_length_stride = xls;
      call.out_batch_stride = 2048LL * 4096;
      call.out_length_stride = 4096;
      CausalConv1dKernelArgs a = op.kernel_args(plan, call);
      CHECK(a.x_length_stride == xls);
      CHECK(a.out_length_stride == 4096);
      CHECK(a.chunk == plan.chunk);
      return a.vector_mode;
    };
    const CUdeviceptr a = 1 << 20;
    CHECK(mode(a, 2048LL * 4096, 4096) == 1);
    // Mamba-2's xBC: a slice of the in_proj output's last dimension
    CHECK(mode(a + 2 * 4096, 2048LL * 8480, 8480) == 1);
    CHECK(mode(a + 2 * 4100, 2048LL * 8484, 8484) == 0);
  }
}

// runtime/ops/selective_state_update: mamba-ssm's decoding step of the selective scan read
// off its call in both of mamba-ssm's forms (Mamba-1 without heads, Mamba-2 with heads,
// groups and broadcast views of stride 0), every mistake refused by name, and the kernel's
// argument packed for an in-place update. No GPU.
#include "call_support.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/ops/call.hpp"
#include "runtime/ops/op.hpp"
#include "runtime/ops/selective_state_update.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <string>

using namespace autotune;
using namespace autotune::testing;

namespace {

Tensor make(uintptr_t address, int32_t dtype, std::initializer_list<int64_t> shape,
            std::initializer_list<int64_t> strides = {}) {
  return tensor(reinterpret_cast<const void*>(address), ElementType(dtype), shape, strides);
}

const Op& state_update_op() {
  return find_op("selective_state_update");
}

std::string problem_of(const autotune_selective_state_update_args& a) {
  const ArgsDesc& d = state_update_op().args_desc();
  BoundCall b;
  bind_call(d, &a, b);
  check_layout(d, b);
  return state_update_op().make_problem(call_fields(d, b)).key();
}

void refused(const autotune_selective_state_update_args& a, const std::string& message) {
  const ArgsDesc& d = state_update_op().args_desc();
  BoundCall b;
  std::string what;
  try {
    bind_call(d, &a, b);
    check_layout(d, b);
    state_update_op().make_problem(call_fields(d, b));
  } catch (const Error& e) {
    what = e.what();
    CHECK(e.kind() == ErrorKind::usage);
  }
  CHECK_MESSAGE(what.find(message) != std::string::npos,
                "expected '" << message << "' in '" << what << "'");
}

// Mamba-1's step: bf16 activations and state, fp32 A, D and dt_bias, no heads.
autotune_selective_state_update_args mamba1(int64_t B = 2, int64_t P = 64, int64_t N = 16) {
  autotune_selective_state_update_args a{};
  a.state = make(0x100000, AUTOTUNE_BF16, {B, P, N});
  a.x = make(0x200000, AUTOTUNE_BF16, {B, P});
  a.dt = make(0x210000, AUTOTUNE_BF16, {B, P});
  a.A = make(0x220000, AUTOTUNE_FP32, {P, N});
  a.B = make(0x230000, AUTOTUNE_BF16, {B, N});
  a.C = make(0x240000, AUTOTUNE_BF16, {B, N});
  a.D = make(0x250000, AUTOTUNE_FP32, {P});
  a.z = make(0x260000, AUTOTUNE_BF16, {B, P});
  a.dt_bias = make(0x270000, AUTOTUNE_FP32, {P});
  a.out = make(0x280000, AUTOTUNE_BF16, {B, P});
  a.dt_softplus = 1;
  return a;
}

// Mamba-2's step: heads of 64 channels, groups, A, dt, D and dt_bias broadcast per head.
autotune_selective_state_update_args mamba2(int64_t B = 2, int64_t H = 8, int64_t G = 2) {
  const int64_t P = 64, N = 128;
  autotune_selective_state_update_args a{};
  a.state = make(0x100000, AUTOTUNE_FP32, {B, H, P, N});
  a.x = make(0x200000, AUTOTUNE_BF16, {B, H, P});
  a.dt = make(0x210000, AUTOTUNE_BF16, {B, H, P}, {H, 1, 0});
  a.A = make(0x220000, AUTOTUNE_FP32, {H, P, N}, {1, 0, 0});
  a.B = make(0x230000, AUTOTUNE_BF16, {B, G, N});
  a.C = make(0x240000, AUTOTUNE_BF16, {B, G, N});
  a.D = make(0x250000, AUTOTUNE_FP32, {H, P}, {1, 0});
  a.dt_bias = make(0x270000, AUTOTUNE_FP32, {H, P}, {1, 0});
  a.out = make(0x280000, AUTOTUNE_BF16, {B, H, P});
  a.dt_softplus = 1;
  return a;
}

} // namespace

TEST_CASE("selective_state_update: the problem is read off mamba-ssm's two forms") {
  CHECK(problem_of(mamba1()) ==
        "B=2,H=1,P=64,N=16,G=1,dtype=bf16,sdtype=bf16,bcdtype=bf16,adtype=fp32,pdtype=fp32,"
        "heads=0,has_D=1,has_z=1,dt_bias=1,softplus=1,gather=0");
  // Mamba-2's A, one value a head viewed over (P, N), is told apart (a_bcast: the kernel
  // reads one A a row); a full [H, P, N] A keeps the key without the field.
  CHECK(problem_of(mamba2()) ==
        "B=2,H=8,P=64,N=128,G=2,dtype=bf16,sdtype=fp32,bcdtype=bf16,adtype=fp32,pdtype=fp32,"
        "heads=1,has_D=1,has_z=0,dt_bias=1,softplus=1,gather=0,a_bcast=1");
  auto full_a = mamba2();
  full_a.A = make(0x220000, AUTOTUNE_FP32, {8, 64, 128});
  CHECK(problem_of(full_a) ==
        "B=2,H=8,P=64,N=128,G=2,dtype=bf16,sdtype=fp32,bcdtype=bf16,adtype=fp32,pdtype=fp32,"
        "heads=1,has_D=1,has_z=0,dt_bias=1,softplus=1,gather=0");
  auto per_state = mamba2(); // A varying over n only (stride 0 over P): not a_bcast
  per_state.A = make(0x220000, AUTOTUNE_FP32, {8, 64, 128}, {128, 0, 1});
  CHECK(problem_of(per_state).find("a_bcast") == std::string::npos);
  SUBCASE("rows of a larger state selected by index; E is not part of the key") {
    auto a = mamba1();
    a.state = make(0x100000, AUTOTUNE_BF16, {160, 64, 16});
    a.state_batch_indices = make(0x300000, AUTOTUNE_INT32, {2});
    const std::string key = problem_of(a);
    CHECK(key.find("gather=1") != std::string::npos);
    a.state = make(0x100000, AUTOTUNE_BF16, {5, 64, 16});
    CHECK(problem_of(a) == key);
  }
  SUBCASE("no D, no dt_bias: the parameters' dtype falls back to fp32") {
    auto a = mamba1();
    a.D = a.dt_bias = Tensor{};
    CHECK(problem_of(a).find("pdtype=fp32,heads=0,has_D=0,has_z=1,dt_bias=0") != std::string::npos);
  }
}

TEST_CASE("selective_state_update: mistakes are refused by name") {
  SUBCASE("groups that do not divide the heads") {
    refused(mamba2(2, 8, 3), "G=3 groups must divide the H=8 heads");
  }
  SUBCASE("x without heads beside a state with them") {
    auto a = mamba2();
    a.x = make(0x200000, AUTOTUNE_BF16, {2, 64});
    refused(a, "x implies H=1, but state gives H=8");
  }
  SUBCASE("a state of another batch and no indices") {
    auto a = mamba1();
    a.state = make(0x100000, AUTOTUNE_BF16, {3, 64, 16});
    refused(a, "x has shape [2, 64]");
  }
  SUBCASE("dt of another dtype than x") {
    auto a = mamba1();
    a.dt = make(0x210000, AUTOTUNE_FP32, {2, 64});
    refused(a, "dt is fp32 but must have the dtype of x");
  }
  SUBCASE("D and dt_bias of different dtypes") {
    auto a = mamba1();
    a.dt_bias = make(0x270000, AUTOTUNE_BF16, {64});
    refused(a, "dt_bias is bf16 but must have the dtype of D");
  }
  SUBCASE("C with another state size than B") {
    auto a = mamba1();
    a.C = make(0x240000, AUTOTUNE_BF16, {2, 32});
    refused(a, "C has shape [2, 32]");
  }
  SUBCASE("more states than a row takes") {
    auto a = mamba1(2, 64, 300);
    refused(a, "N=300");
  }
  SUBCASE("an out whose elements overlap") {
    auto a = mamba1();
    a.out = make(0x280000, AUTOTUNE_BF16, {2, 64}, {0, 1});
    refused(a, "out");
  }
  SUBCASE("indices that are not int32") {
    auto a = mamba1();
    a.state_batch_indices = make(0x300000, AUTOTUNE_FP32, {2});
    refused(a, "state_batch_indices");
  }
}

TEST_CASE("selective_state_update: the kernel's argument indexes both forms the same way") {
  SUBCASE("Mamba-1: the head strides are 0, A and D have no head dimension") {
    auto a = mamba1(2, 64, 16);
    const ArgsDesc& d = state_update_op().args_desc();
    BoundCall b;
    bind_call(d, &a, b);
    const Problem p = state_update_op().make_problem(call_fields(d, b));
    const Config config = {{"threads", "128"}, {"lanes", "4"}};
    REQUIRE(bool(state_update_op().check(config, p, "sm_80")));
    const auto plan = state_update_op().plan(config, p);
    CHECK(plan->geometry.grid[0] == 4); // 128 rows, 32 a block
    const auto k = packed_args<SelectiveStateUpdateKernelArgs>(*plan, &a, b);
    CHECK(k.state_in == k.state_out);
    CHECK(k.heads == 1);
    CHECK(k.dim == 64);
    CHECK(k.groups == 1);
    CHECK(k.entries == 2);
    CHECK(k.x_stride[0] == 64);
    CHECK(k.x_stride[1] == 0);
    CHECK(k.x_stride[2] == 1);
    CHECK(k.A_stride[0] == 0);
    CHECK(k.A_stride[1] == 16);
    CHECK(k.D_stride[0] == 0);
    CHECK(k.D_stride[1] == 1);
    CHECK(k.B_stride[1] == 0);
    CHECK(k.state_stride[0] == 64 * 16);
    CHECK(k.state_stride[1] == 0);
    CHECK(k.state_stride[2] == 16);
  }
  SUBCASE("Mamba-2: broadcast views keep their stride 0") {
    auto a = mamba2(2, 8, 2);
    const ArgsDesc& d = state_update_op().args_desc();
    BoundCall b;
    bind_call(d, &a, b);
    const Problem p = state_update_op().make_problem(call_fields(d, b));
    const auto plan = state_update_op().plan({{"threads", "256"}, {"lanes", "32"}}, p);
    const auto k = packed_args<SelectiveStateUpdateKernelArgs>(*plan, &a, b);
    CHECK(k.heads == 8);
    CHECK(k.groups == 2);
    CHECK(k.dt_stride[2] == 0);
    CHECK(k.A_stride[0] == 1);
    CHECK(k.A_stride[1] == 0);
    CHECK(k.A_stride[2] == 0);
    CHECK(k.D_stride[1] == 0);
    CHECK(k.z_stride[0] == 0); // no z
  }
  SUBCASE("configurations the kernel cannot take are invalid") {
    const Problem p =
        state_update_op().make_problem(parse_fields("B=2,H=4,P=64,N=128,heads=1", "t"));
    CHECK_FALSE(bool(state_update_op().check({{"threads", "128"}, {"lanes", "3"}}, p, "sm_90a")));
    CHECK_FALSE(bool(state_update_op().check({{"threads", "128"}, {"lanes", "1"}}, p, "sm_90a")));
    CHECK_FALSE(bool(state_update_op().check({{"threads", "128"}, {"lanes", "2"}}, p, "sm_90a")));
    CHECK(bool(state_update_op().check({{"threads", "128"}, {"lanes", "4"}}, p, "sm_90a")));
    const Problem small = state_update_op().make_problem(parse_fields("B=2,P=64,N=8", "t"));
    CHECK_FALSE(
        bool(state_update_op().check({{"threads", "128"}, {"lanes", "16"}}, small, "sm_90a")));
  }
}

TEST_CASE("selective_state_update: a configuration from another problem adapts its lanes to N") {
  // Many rows (B=64, 5120 channels): about 8 states a lane with A, B and C element by
  // element, 16 with loads=words; at most 32 a lane and at most N lanes.
  const Config elements = {{"threads", "128"}, {"lanes", "4"}, {"loads", "elements"}};
  const Config words = {{"threads", "128"}, {"lanes", "4"}, {"loads", "words"}};
  for (const auto& [n, by_element, by_word] : {std::tuple{2, "1", "1"},
                                               {16, "2", "1"},
                                               {24, "2", "1"},
                                               {64, "8", "4"},
                                               {128, "16", "8"},
                                               {256, "32", "16"}}) {
    CAPTURE(n);
    const Problem p =
        state_update_op().make_problem(parse_fields("B=64,P=5120,N=" + std::to_string(n), "shape"));
    for (const auto& [config, lanes, loads] :
         {std::tuple{elements, by_element, "elements"}, {words, by_word, "words"}}) {
      const Config adapted = state_update_op().adapt(config, p);
      CHECK(format_fields(adapted) ==
            std::string("threads=128,lanes=") + lanes + ",loads=" + loads);
      CHECK(bool(state_update_op().check(adapted, p, "sm_90a")));
    }
  }
  SUBCASE("few rows take more lanes until a wave of threads (132 x 128) or a state a lane") {
    const auto lanes_for = [&](const char* shape) {
      const Problem p = state_update_op().make_problem(parse_fields(shape, "shape"));
      return format_fields(state_update_op().adapt(words, p));
    };
    // One sequence of Mamba-1 2.8B: 5120 rows, 4 lanes (20480 threads).
    CHECK(lanes_for("B=1,P=5120,N=16") == "threads=128,lanes=4,loads=words");
    // 128 rows: 32 lanes would make 4096 threads, but N=16 stops at 16 lanes.
    CHECK(lanes_for("B=2,P=64,N=16") == "threads=128,lanes=16,loads=words");
    CHECK(lanes_for("B=2,P=64,N=128") == "threads=128,lanes=32,loads=words");
  }
}

// runtime/ops/causal_conv1d_update: the decoding step's problem read off its call (states
// of mamba-ssm's and vLLM's lengths, channel-last views, gathered rows), every mistake
// refused by name, and the kernel's argument packed for an in-place update. No GPU.
#include "call_support.hpp"
#include "runtime/dispatch/autotune.hpp"
#include "runtime/ops/call.hpp"
#include "runtime/ops/causal_conv1d_update.hpp"
#include "runtime/ops/op.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>

using namespace autotune;
using namespace autotune::testing;

namespace {

Tensor make(uintptr_t address, int32_t dtype, std::initializer_list<int64_t> shape,
            std::initializer_list<int64_t> strides = {}) {
  return tensor(reinterpret_cast<const void*>(address), ElementType(dtype), shape, strides);
}

const Op& update_op() {
  return find_op("causal_conv1d_update");
}

std::string problem_of(const autotune_causal_conv1d_update_args& a) {
  const ArgsDesc& d = update_op().args_desc();
  BoundCall b;
  bind_call(d, &a, b);
  check_layout(d, b);
  return update_op().make_problem(call_fields(d, b)).key();
}

void refused(const autotune_causal_conv1d_update_args& a, const std::string& message) {
  const ArgsDesc& d = update_op().args_desc();
  BoundCall b;
  std::string what;
  try {
    bind_call(d, &a, b);
    check_layout(d, b);
    update_op().make_problem(call_fields(d, b));
  } catch (const Error& e) {
    what = e.what();
    CHECK(e.kind() == ErrorKind::usage);
  }
  CHECK_MESSAGE(what.find(message) != std::string::npos,
                "expected '" << message << "' in '" << what << "'");
}

// One token of a Mamba block: x [B, C] unsqueezed, mamba-ssm's state of W inputs.
autotune_causal_conv1d_update_args step(int64_t B = 4, int64_t C = 64, int64_t S = 4) {
  autotune_causal_conv1d_update_args a{};
  a.x = make(0x10000, AUTOTUNE_BF16, {B, C, 1}, {C, 1, 1});
  a.conv_state = make(0x20000, AUTOTUNE_BF16, {B, C, S});
  a.weight = make(0x30000, AUTOTUNE_FP32, {C, 4});
  a.bias = make(0x40000, AUTOTUNE_FP32, {C});
  a.out = make(0x50000, AUTOTUNE_BF16, {B, C, 1});
  a.silu = 1;
  return a;
}

} // namespace

TEST_CASE("causal_conv1d_update: the problem is read off the tensors") {
  auto a = step();
  CHECK(problem_of(a) == "B=4,C=64,L=1,W=4,S=4,dtype=bf16,wdtype=fp32,bias=1,silu=1,circular=0,"
                         "gather=0");
  SUBCASE("vLLM's state of W-1 inputs, a circular buffer, three new positions") {
    a.x = make(0x10000, AUTOTUNE_BF16, {4, 64, 3});
    a.out = make(0x50000, AUTOTUNE_BF16, {4, 64, 3});
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {4, 64, 3});
    a.cache_seqlens = make(0x60000, AUTOTUNE_INT32, {4});
    CHECK(problem_of(a) ==
          "B=4,C=64,L=3,W=4,S=3,dtype=bf16,wdtype=fp32,bias=1,silu=1,circular=1,gather=0");
  }
  SUBCASE("rows of a larger state selected by index; E is not part of the key") {
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {640, 64, 4});
    a.conv_state_indices = make(0x60000, AUTOTUNE_INT32, {4});
    const std::string key = problem_of(a);
    CHECK(key.find("gather=1") != std::string::npos);
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {7, 64, 4});
    CHECK(problem_of(a) == key);
  }
  SUBCASE("channel-last views of x, out and the state (causal-conv1d's tests) are read in "
          "place") {
    a.x = make(0x10000, AUTOTUNE_BF16, {4, 64, 5}, {5 * 64, 1, 64});
    a.out = make(0x50000, AUTOTUNE_BF16, {4, 64, 5}, {5 * 64, 1, 64});
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {4, 64, 6}, {6 * 64, 1, 64});
    CHECK(problem_of(a).find("L=5,W=4,S=6") != std::string::npos);
  }
}

TEST_CASE("causal_conv1d_update: mistakes are refused by name") {
  auto a = step();
  SUBCASE("a state shorter than the filter's window") {
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {4, 64, 2});
    refused(a, "state length S=2 is not supported (S must be in W-1=3..64)");
  }
  SUBCASE("a state longer than the kernel keeps") {
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {4, 64, 65});
    refused(a, "S=65");
  }
  SUBCASE("a state of another dtype") {
    a.conv_state = make(0x20000, AUTOTUNE_FP16, {4, 64, 4});
    refused(a, "conv_state");
  }
  SUBCASE("a state with another batch and no indices") {
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {5, 64, 4});
    refused(a, "conv_state");
  }
  SUBCASE("a state of other channels") {
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {4, 32, 4});
    refused(a, "conv_state");
  }
  SUBCASE("indices that are not int32, or of another length") {
    a.conv_state_indices = make(0x60000, AUTOTUNE_FP32, {4});
    refused(a, "conv_state_indices");
    a.conv_state_indices = make(0x60000, AUTOTUNE_INT32, {3});
    refused(a, "conv_state_indices");
  }
  SUBCASE("cache lengths of another length") {
    a.cache_seqlens = make(0x60000, AUTOTUNE_INT32, {5});
    refused(a, "cache_seqlens");
  }
  SUBCASE("a width outside 2..4") {
    a.weight = make(0x30000, AUTOTUNE_FP32, {64, 5});
    refused(a, "width W=5 is not supported");
  }
  SUBCASE("an out that overlaps itself") {
    a.out = make(0x50000, AUTOTUNE_BF16, {4, 64, 1}, {0, 1, 1});
    refused(a, "out");
  }
  SUBCASE("a state that overlaps itself (it is written)") {
    a.conv_state = make(0x20000, AUTOTUNE_BF16, {4, 64, 4}, {4, 0, 1});
    refused(a, "conv_state");
  }
  SUBCASE("a misaligned x") {
    a.x = make(0x10001, AUTOTUNE_BF16, {4, 64, 1}, {64, 1, 1});
    refused(a, "x");
  }
}

TEST_CASE("causal_conv1d_update: the kernel's argument updates the state in place") {
  auto a = step(2, 48, 4);
  a.x = make(0x10000, AUTOTUNE_BF16, {2, 48, 3}, {3 * 48, 1, 48}); // channel-last
  a.out = make(0x50000, AUTOTUNE_BF16, {2, 48, 3});
  a.conv_state = make(0x20000, AUTOTUNE_BF16, {9, 48, 4}, {48 * 4, 1, 48});
  a.conv_state_indices = make(0x60000, AUTOTUNE_INT32, {2});
  a.cache_seqlens = make(0x70000, AUTOTUNE_INT32, {2});
  const ArgsDesc& d = update_op().args_desc();
  BoundCall b;
  bind_call(d, &a, b);
  const Problem p = update_op().make_problem(call_fields(d, b));
  const Config config = {{"threads", "32"}};
  REQUIRE(bool(update_op().check(config, p, "sm_80")));
  const auto plan = update_op().plan(config, p);
  CHECK(plan->geometry.grid[0] == 2); // 48 channels, 32 a block
  CHECK(plan->geometry.grid[1] == 2);
  CHECK(plan->geometry.block[0] == 32);
  CHECK(plan->workspace_bytes == 0);
  const auto k = packed_args<CausalConv1dUpdateKernelArgs>(*plan, &a, b);
  CHECK(k.state_in == 0x20000);
  CHECK(k.state_out == 0x20000);
  CHECK(k.cache_seqlens == 0x70000);
  CHECK(k.state_indices == 0x60000);
  CHECK(k.batch == 2);
  CHECK(k.channels == 48);
  CHECK(k.length == 3);
  CHECK(k.entries == 9);
  CHECK(k.x_channel_stride == 1);
  CHECK(k.x_length_stride == 48);
  CHECK(k.out_channel_stride == 3);
  CHECK(k.state_entry_stride == 48 * 4);
  CHECK(k.state_channel_stride == 1);
  CHECK(k.state_pos_stride == 48);
  const auto defines = update_op().defines(config, p);
  for (const char* expected : {"-DAT_STATE_LEN=4", "-DAT_WIDTH=4", "-DAT_CIRCULAR=1",
                               "-DAT_GATHER=1", "-DAT_X_T=at_bf16", "-DAT_W_T=float"}) {
    CHECK(std::find(defines.begin(), defines.end(), std::string(expected)) != defines.end());
  }
}

TEST_CASE("causal_conv1d_update: the tuner's tensors define every output") {
  const Problem p =
      update_op().make_problem(parse_fields("B=3,C=40,L=2,W=3,S=5,circular=1,gather=1", "t"));
  const auto t = update_op().tensors(p);
  REQUIRE(t.size() == 8);
  CHECK(t[3].name == "conv_state");
  CHECK(t[4].name == "cache_seqlens");
  CHECK(t[4].values.size() == 3);
  CHECK(t[5].name == "conv_state_indices");
  // a permutation: every row of the new state is written once
  CHECK(t[5].values == std::vector<int>{2, 1, 0});
  CHECK(t[6].output);
  CHECK(t[7].name == "new_state");
  CHECK(t[7].elements == size_t(3 * 40 * 5));
  SUBCASE("a configuration outside the block limits is invalid") {
    CHECK_FALSE(bool(update_op().check({{"threads", "48"}}, p, "sm_90a")));
  }
}

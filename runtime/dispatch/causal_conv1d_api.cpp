// Runtime::causal_conv1d and friends: argument conversion and validation, then
// the shared variant cache of Runtime::Impl.
#include "runtime/ops/causal_conv1d.hpp"
#include "runtime_impl.hpp"

#include <cstring>

namespace autotune {
namespace {

struct ConvPrepared {
  Problem problem;
  CausalConv1dCall call;
};

// Pointers and strides of a call; negative strides mean contiguous.
CausalConv1dCall to_call(const CausalConv1dArgs& a) {
  CausalConv1dCall c;
  c.x = reinterpret_cast<CUdeviceptr>(a.x);
  c.weight = reinterpret_cast<CUdeviceptr>(a.weight);
  c.bias = reinterpret_cast<CUdeviceptr>(a.bias);
  c.out = reinterpret_cast<CUdeviceptr>(a.out);
  c.initial_states = reinterpret_cast<CUdeviceptr>(a.initial_states);
  c.final_states = reinterpret_cast<CUdeviceptr>(a.final_states);
  c.x_channel_stride = a.x_channel_stride < 0 ? a.length : a.x_channel_stride;
  c.x_batch_stride = a.x_batch_stride < 0 ? a.channels * c.x_channel_stride : a.x_batch_stride;
  c.out_channel_stride = a.out_channel_stride < 0 ? a.length : a.out_channel_stride;
  c.out_batch_stride =
      a.out_batch_stride < 0 ? a.channels * c.out_channel_stride : a.out_batch_stride;
  return c;
}

ConvPrepared prepare(const CausalConv1dOp& op, const CausalConv1dArgs& a) {
  Fields shape = {{"B", std::to_string(a.batch)},
                  {"C", std::to_string(a.channels)},
                  {"L", std::to_string(a.length)},
                  {"W", std::to_string(a.width)},
                  {"dtype", to_string(to_dtype(a.x_type))},
                  {"wdtype", to_string(to_dtype(a.weight_type))},
                  {"bias", a.bias ? "1" : "0"},
                  {"silu", a.silu ? "1" : "0"},
                  {"init_states", a.initial_states ? "1" : "0"},
                  {"final_states", a.final_states ? "1" : "0"}};
  ConvPrepared p{op.make_problem(shape), to_call(a)};
  op.validate_call(p.problem, p.call);
  return p;
}

const CausalConv1dOp& conv_op() {
  return static_cast<const CausalConv1dOp&>(find_op("causal_conv1d"));
}

} // namespace

Selection Runtime::select_causal_conv1d(const CausalConv1dArgs& args) {
  ConvPrepared p = prepare(conv_op(), args);
  return m_impl->get(conv_op(), p.problem).selection;
}

namespace {

// The fields of a call that decide its problem, as bytes: the warm path's key.
std::string signature(const CausalConv1dArgs& a) {
  struct {
    int64_t b, c, l, w;
    int32_t x_type, w_type;
    uint8_t bias, silu, init, fin;
  } s;
  std::memset(&s, 0, sizeof s); // padding bytes are part of the key
  s.b = a.batch;
  s.c = a.channels;
  s.l = a.length;
  s.w = a.width;
  s.x_type = int32_t(a.x_type);
  s.w_type = int32_t(a.weight_type);
  s.bias = a.bias != nullptr;
  s.silu = a.silu;
  s.init = a.initial_states != nullptr;
  s.fin = a.final_states != nullptr;
  return std::string("causal_conv1d|") + std::string(reinterpret_cast<const char*>(&s), sizeof s);
}

struct ConvPlan : PlanBase {
  const LoadedVariant* variant = nullptr;
  CausalConv1dPlan plan;
};

} // namespace

void Runtime::causal_conv1d(const CausalConv1dArgs& args, CUstream stream) {
  const CausalConv1dOp& op = conv_op();
  // Slow path once per signature: full validation, problem, variant, plan.
  const ConvPlan& p = m_impl->plan<ConvPlan>(signature(args), [&] {
    ConvPrepared prepared = prepare(op, args);
    ConvPlan built;
    built.variant = &m_impl->get(op, prepared.problem);
    built.plan = op.plan(built.variant->config, prepared.problem);
    return built;
  });
  CausalConv1dCall call = to_call(args);
  op.validate_call(p.plan.shape, call);
  CausalConv1dKernelArgs kernel_args = op.kernel_args(p.plan, call);
  void* params[] = {&kernel_args};
  const LaunchGeometry& g = p.plan.geometry;
  AUTOTUNE_CU(cuda::driver().cuLaunchKernel(p.variant->function, g.grid[0], g.grid[1], g.grid[2],
                                            g.block[0], g.block[1], g.block[2], g.dynamic_smem,
                                            stream, params, nullptr));
}

} // namespace autotune

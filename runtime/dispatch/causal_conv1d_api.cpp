// Runtime::causal_conv1d and friends: argument conversion and validation, then
// the shared variant cache of Runtime::Impl.
#include "runtime/ops/causal_conv1d.hpp"
#include "runtime_impl.hpp"

namespace autotune {
namespace {

struct ConvPrepared {
  Problem problem;
  CausalConv1dCall call;
};

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
  ConvPrepared p{op.make_problem(shape), {}};
  auto& c = p.call;
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
  op.validate_call(p.problem, c);
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

void Runtime::causal_conv1d(const CausalConv1dArgs& args, CUstream stream) {
  const CausalConv1dOp& op = conv_op();
  ConvPrepared p = prepare(op, args);
  const LoadedVariant& v = m_impl->get(op, p.problem);
  ArgPack pack;
  op.pack_call(v.config, p.problem, p.call, pack);
  m_impl->launch(op, p.problem, v, pack, stream);
}

} // namespace autotune

// C ABI entry points for causal_conv1d.
#include "c_api_impl.hpp"

namespace {

using autotune::c_api::element_type;

autotune::CausalConv1dArgs convert(const autotune_causal_conv1d_args* a) {
  if (!a) {
    throw autotune::Error(autotune::ErrorKind::usage, "causal_conv1d: args is NULL");
  }
  autotune::CausalConv1dArgs c;
  c.x = a->x;
  c.weight = a->weight;
  c.bias = a->bias;
  c.out = a->out;
  c.batch = a->batch;
  c.channels = a->channels;
  c.length = a->length;
  c.width = a->width;
  c.x_type = element_type(a->x_dtype, "causal_conv1d: x_dtype");
  c.weight_type = element_type(a->weight_dtype, "causal_conv1d: weight_dtype");
  c.silu = a->silu != 0;
  c.x_batch_stride = a->x_batch_stride;
  c.x_channel_stride = a->x_channel_stride;
  c.out_batch_stride = a->out_batch_stride;
  c.out_channel_stride = a->out_channel_stride;
  c.initial_states = a->initial_states;
  c.final_states = a->final_states;
  return c;
}

} // namespace

using autotune::c_api::guarded;
using autotune::c_api::runtime_of;
using autotune::c_api::write_selection;

extern "C" {

int autotune_causal_conv1d(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                           void* stream) {
  return guarded(
      [&] { runtime_of(rt).causal_conv1d(convert(args), static_cast<CUstream>(stream)); });
}

int autotune_causal_conv1d_variant(autotune_runtime* rt, const autotune_causal_conv1d_args* args,
                                   char* buffer, uint64_t size) {
  return guarded([&] {
    write_selection(runtime_of(rt).select_causal_conv1d(convert(args)), buffer, size);
  });
}

} // extern "C"

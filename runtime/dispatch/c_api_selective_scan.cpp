// C ABI entry points for selective_scan.
#include "c_api_impl.hpp"

namespace {

using autotune::c_api::element_type;

autotune::SelectiveScanArgs convert(const autotune_selective_scan_args* a) {
  if (!a) {
    throw autotune::Error(autotune::ErrorKind::usage, "selective_scan: args is NULL");
  }
  autotune::SelectiveScanArgs c;
  c.u = a->u;
  c.delta = a->delta;
  c.A = a->A;
  c.B = a->B;
  c.C = a->C;
  c.D = a->D;
  c.z = a->z;
  c.delta_bias = a->delta_bias;
  c.out = a->out;
  c.last_state = a->last_state;
  c.batch = a->batch;
  c.dim = a->dim;
  c.length = a->length;
  c.dstate = a->dstate;
  c.groups = a->groups;
  c.type = element_type(a->dtype, "selective_scan: dtype");
  c.variable_bc = a->variable_bc != 0;
  c.delta_softplus = a->delta_softplus != 0;
  for (int i = 0; i < 2; ++i) {
    c.u_strides[i] = a->u_strides[i];
    c.delta_strides[i] = a->delta_strides[i];
    c.z_strides[i] = a->z_strides[i];
    c.out_strides[i] = a->out_strides[i];
  }
  for (int i = 0; i < 3; ++i) {
    c.b_strides[i] = a->b_strides[i];
    c.c_strides[i] = a->c_strides[i];
  }
  return c;
}

} // namespace

using autotune::c_api::guarded;
using autotune::c_api::runtime_of;
using autotune::c_api::write_selection;

extern "C" {

int autotune_selective_scan(autotune_runtime* rt, const autotune_selective_scan_args* args,
                            void* stream) {
  return guarded(
      [&] { runtime_of(rt).selective_scan(convert(args), static_cast<CUstream>(stream)); });
}

int autotune_selective_scan_variant(autotune_runtime* rt, const autotune_selective_scan_args* args,
                                    char* buffer, uint64_t size) {
  return guarded([&] {
    write_selection(runtime_of(rt).select_selective_scan(convert(args)), buffer, size);
  });
}

} // extern "C"

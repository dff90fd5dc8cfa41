// C ABI entry points for attention.
#include "c_api_impl.hpp"

namespace {

using autotune::c_api::element_type;

autotune::AttentionArgs convert(const autotune_attention_args* a) {
  if (!a) {
    throw autotune::Error(autotune::ErrorKind::usage, "attention: args is NULL");
  }
  autotune::AttentionArgs c;
  c.q = a->q;
  c.k = a->k;
  c.v = a->v;
  c.o = a->o;
  c.lse = a->lse;
  c.batch = a->batch;
  c.heads_q = a->heads_q;
  c.heads_kv = a->heads_kv;
  c.seq_q = a->seq_q;
  c.seq_k = a->seq_k;
  c.head_dim = a->head_dim;
  c.type = element_type(a->dtype, "attention: dtype");
  c.causal = a->causal != 0;
  c.layout_bhsd = a->layout_bhsd != 0;
  c.scale = a->scale;
  c.workspace = a->workspace;
  c.workspace_bytes = a->workspace_bytes;
  for (int i = 0; i < 3; ++i) {
    c.q_strides[i] = a->q_strides[i];
    c.k_strides[i] = a->k_strides[i];
    c.v_strides[i] = a->v_strides[i];
    c.o_strides[i] = a->o_strides[i];
  }
  return c;
}

} // namespace

using autotune::c_api::guarded;
using autotune::c_api::runtime_of;
using autotune::c_api::write_selection;

extern "C" {

int autotune_attention(autotune_runtime* rt, const autotune_attention_args* args, void* stream) {
  return guarded(
      [&] { runtime_of(rt).attention(convert(args), static_cast<CUstream>(stream)); });
}

int autotune_attention_workspace_size(autotune_runtime* rt, const autotune_attention_args* args,
                                      uint64_t* bytes) {
  return guarded([&] {
    if (!bytes) {
      throw autotune::Error(autotune::ErrorKind::usage, "attention: bytes is NULL");
    }
    *bytes = runtime_of(rt).attention_workspace_size(convert(args));
  });
}

int autotune_attention_variant(autotune_runtime* rt, const autotune_attention_args* args,
                               char* buffer, uint64_t size) {
  return guarded([&] {
    write_selection(runtime_of(rt).select_attention(convert(args)), buffer, size);
  });
}

} // extern "C"

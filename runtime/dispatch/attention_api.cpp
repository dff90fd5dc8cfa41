// Runtime::attention and friends: argument conversion and validation, then the
// shared variant cache of Runtime::Impl.
#include "runtime/ops/attention.hpp"
#include "runtime_impl.hpp"

namespace autotune {
namespace {

struct AttentionPrepared {
  Problem problem;
  AttentionCall call;
};

AttentionPrepared prepare(const AttentionOp& op, const AttentionArgs& a) {
  // The tuning bucket of the strides: Q's head stride above its sequence stride
  // is the [B,H,S,D] family.
  bool bhsd = a.layout_bhsd;
  if (a.q_strides[1] >= 0 && a.q_strides[2] >= 0) {
    bhsd = a.q_strides[1] > a.q_strides[2];
  }
  Fields shape = {{"B", std::to_string(a.batch)},
                  {"Hq", std::to_string(a.heads_q)},
                  {"Hkv", std::to_string(a.heads_kv)},
                  {"Sq", std::to_string(a.seq_q)},
                  {"Sk", std::to_string(a.seq_k)},
                  {"D", std::to_string(a.head_dim)},
                  {"causal", a.causal ? "1" : "0"},
                  {"dtype", to_string(to_dtype(a.type))},
                  {"lse", a.lse ? "1" : "0"},
                  {"layout", bhsd ? "bhsd" : "bshd"}};
  AttentionPrepared p{op.make_problem(shape), {}};
  // Negative strides: contiguous in the layout the caller named.
  Problem named = p.problem;
  for (auto& [k, v] : named.fields) {
    if (k == "layout") {
      v = a.layout_bhsd ? "bhsd" : "bshd";
    }
  }
  auto strides = [&](const int64_t (&s)[3], long long heads, long long seq, long long& bs,
                     long long& hs, long long& ss) {
    AttentionOp::Strides c = AttentionOp::contiguous_strides(named, heads, seq);
    bs = s[0] < 0 ? c.batch : s[0];
    hs = s[1] < 0 ? c.head : s[1];
    ss = s[2] < 0 ? c.seq : s[2];
  };
  auto& c = p.call;
  c.q = reinterpret_cast<CUdeviceptr>(a.q);
  c.k = reinterpret_cast<CUdeviceptr>(a.k);
  c.v = reinterpret_cast<CUdeviceptr>(a.v);
  c.o = reinterpret_cast<CUdeviceptr>(a.o);
  c.lse = reinterpret_cast<CUdeviceptr>(a.lse);
  strides(a.q_strides, a.heads_q, a.seq_q, c.q_batch_stride, c.q_head_stride, c.q_seq_stride);
  strides(a.k_strides, a.heads_kv, a.seq_k, c.k_batch_stride, c.k_head_stride, c.k_seq_stride);
  strides(a.v_strides, a.heads_kv, a.seq_k, c.v_batch_stride, c.v_head_stride, c.v_seq_stride);
  strides(a.o_strides, a.heads_q, a.seq_q, c.o_batch_stride, c.o_head_stride, c.o_seq_stride);
  c.scale = a.scale > 0 ? a.scale : 0.0;
  c.workspace = reinterpret_cast<CUdeviceptr>(a.workspace);
  c.workspace_bytes = size_t(a.workspace_bytes);
  op.validate_call(p.problem, c);
  return p;
}

const AttentionOp& attention_op() {
  return static_cast<const AttentionOp&>(find_op("attention"));
}

} // namespace

Selection Runtime::select_attention(const AttentionArgs& args) {
  AttentionPrepared p = prepare(attention_op(), args);
  return m_impl->get(attention_op(), p.problem).selection;
}

uint64_t Runtime::attention_workspace_size(const AttentionArgs& args) {
  const AttentionOp& op = attention_op();
  AttentionPrepared p = prepare(op, args);
  return op.workspace_bytes(m_impl->get(op, p.problem).config, p.problem);
}

void Runtime::attention(const AttentionArgs& args, CUstream stream) {
  const AttentionOp& op = attention_op();
  AttentionPrepared p = prepare(op, args);
  const LoadedVariant& v = m_impl->get(op, p.problem);
  ArgPack pack;
  op.pack_call(v.config, p.problem, p.call, pack);
  m_impl->launch(op, p.problem, v, pack, stream);
}

} // namespace autotune

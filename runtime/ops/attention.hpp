// attention: O = softmax(scale * Q K^T + mask) V, optional LSE (fp32 [B, Hq, Sq]).
// Causal masks are bottom-right aligned (query i sees keys j <= i + Sk - Sq), as in
// FlashAttention; GQA/MQA when Hkv divides Hq (query head h reads kv head
// h / (Hq / Hkv)).
//
// Causal with Sq > Sk, the rows i < Sq - Sk see no key. Their O is exactly 0, as
// flash-attn defines it (its tests' reference zero-fills such rows), and their LSE is
// -inf, the log of an empty sum: merging this result with attention over other keys
// by log-sum-exp (LSE = log(e^LSE1 + e^LSE2), O = sum e^(LSEi - LSE) Oi) then weighs
// it 0. flash-attn 2 writes +inf there instead (flash_fwd_kernel.h, softmax.h);
// flash-attn 3 writes -inf for a block of such rows and from its split-KV combine.
//
// Problem fields: B, Hq, Hkv, Sq, Sk, D, causal, dtype, lse, layout. The layout
// ("bshd": [B, S, H, D], "bhsd": [B, H, S, D]) is the tuning bucket of the strides;
// a runtime call may pass any strides with a contiguous last dimension. The softmax
// scale is a call argument, not a problem field: it changes no instruction (the
// tuner uses 1/sqrt(D)).
#pragma once

#include "op.hpp"

namespace autotune {

// Device pointers and strides of one call, in elements. lse is 0 unless the
// problem has lse=1.
struct AttentionCall {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;
  long long q_batch_stride = 0, q_head_stride = 0, q_seq_stride = 0;
  long long k_batch_stride = 0, k_head_stride = 0, k_seq_stride = 0;
  long long v_batch_stride = 0, v_head_stride = 0, v_seq_stride = 0;
  long long o_batch_stride = 0, o_head_stride = 0, o_seq_stride = 0;
  double scale = 0; // 0: 1/sqrt(D)
  // Split-KV variants only: zero-filled before the first call (each call leaves it
  // zero-filled where the counters live); AttentionOp::workspace_bytes says how much.
  CUdeviceptr workspace = 0;
  size_t workspace_bytes = 0;
};

class AttentionOp final : public Op {
public:
  const char* name() const override { return "attention"; }
  const char* kernel_name() const override { return "attention_fwd"; }
  const char* template_path() const override { return "attention/kernel.cuh"; }
  const char* space_path() const override { return "attention/space.toml"; }
  const char* reference_path() const override { return "attention/reference.cuh"; }

  std::vector<std::string> default_shapes() const override;
  Problem make_problem(const Fields& shape) const override;
  Result<bool> check(const Config& config, const Problem& problem,
                     const std::string& arch) const override;
  Result<bool> worth_measuring(const Config& config, const Problem& problem) const override;
  std::vector<std::string> defines(const Config& config, const Problem& problem) const override;
  LaunchGeometry geometry(const Config& config, const Problem& problem) const override;
  std::vector<TensorSpec> tensors(const Problem& problem) const override;
  void pack(const Config& config, const Problem& problem, const std::vector<CUdeviceptr>& tensors,
            ArgPack& args) const override;
  std::string reference_kernel(const Problem& problem) const override;
  LaunchGeometry reference_geometry(const Problem& problem) const override;
  void pack_reference(const Problem& problem, const std::vector<CUdeviceptr>& tensors,
                      const std::vector<CUdeviceptr>& reference_outputs,
                      ArgPack& args) const override;
  double tolerance(const Problem& problem) const override;
  double bytes(const Problem& problem) const override;
  double flops(const Problem& problem) const override;
  bool memory_bound() const override { return false; }

  // Contiguous strides of the problem's layout (elements), for tensors of `heads`.
  struct Strides {
    long long batch, head, seq;
  };
  static Strides contiguous_strides(const Problem& problem, long long heads, long long seq);

  // Bytes of workspace a variant needs for a problem (0 unless it splits the keys).
  size_t workspace_bytes(const Config& config, const Problem& problem) const;

  const ArgsDesc& args_desc() const override;
  std::unique_ptr<CallPlan> plan(const Config& config, const Problem& problem) const override;
  void pack_call(const Config& config, const Problem& problem, const AttentionCall& call,
                 ArgPack& args) const;
};

} // namespace autotune

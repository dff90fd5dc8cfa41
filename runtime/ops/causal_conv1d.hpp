// causal_conv1d: out[b,c,t] = act(bias[c] + sum_{k<W} w[c,k] x[b,c,t-W+1+k]).
#pragma once

#include "op.hpp"

namespace autotune {

// Device pointers and strides of one call (elements, not bytes). x and out are
// [B, C, L] with a contiguous last dimension; weight is [C, W] contiguous.
struct CausalConv1dCall {
  CUdeviceptr x = 0;
  CUdeviceptr weight = 0;
  CUdeviceptr bias = 0; // 0 when the problem has no bias
  CUdeviceptr out = 0;
  CUdeviceptr initial_states = 0; // [B, C, W-1]; 0 when the problem has init_states=0
  CUdeviceptr final_states = 0;   // [B, C, W-1]; 0 when the problem has final_states=0
  long long x_batch_stride = 0;
  long long x_channel_stride = 0;
  long long out_batch_stride = 0;
  long long out_channel_stride = 0;
};

class CausalConv1dOp final : public Op {
public:
  const char* name() const override { return "causal_conv1d"; }
  const char* kernel_name() const override { return "causal_conv1d_fwd"; }
  const char* template_path() const override { return "causal_conv1d/kernel.cuh"; }
  const char* space_path() const override { return "causal_conv1d/space.toml"; }
  const char* reference_path() const override { return "causal_conv1d/reference.cuh"; }

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

  // Validates a user's call (null pointers, strides) before packing it.
  void validate_call(const Problem& problem, const CausalConv1dCall& call) const;
  void pack_call(const Config& config, const Problem& problem, const CausalConv1dCall& call,
                 ArgPack& args) const;
};

} // namespace autotune

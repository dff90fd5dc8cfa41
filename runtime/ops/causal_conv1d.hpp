// causal_conv1d: out[b,c,t] = act(bias[c] + sum_{k<W} w[c,k] x[b,c,t-W+1+k]).
#pragma once

#include "op.hpp"

namespace autotune {

// Device pointers and strides of one call (elements, not bytes). x and out are
// [B, C, L] with a contiguous last dimension (layout bcl) or a contiguous channel
// dimension (layout blc: the channel strides are 1, the length strides are not);
// weight is [C, W] contiguous.
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
  long long x_length_stride = 1;
  long long out_length_stride = 1;
  CUdeviceptr seq_idx = 0; // int32 [B, L]; 0 when the problem has no seq_idx
  long long seq_idx_batch_stride = 0;
};

// The problem's numbers, parsed once (the problem itself is strings).
struct CausalConv1dShape {
  long long B = 0, C = 0, L = 0, W = 0;
  DType x = DType::bf16, w = DType::bf16;
  bool bias = false, silu = false, init_states = false, final_states = false;
  bool channel_last = false; // layout blc
  bool seq_idx = false;      // packed sequences (channel-last only)
  static CausalConv1dShape of(const Problem& problem);
};

// The kernel's by-value argument: struct ConvArgs of templates/causal_conv1d/kernel.cuh,
// field for field (tests/test_runtime_ops_kernel_args.cpp compiles the kernel with NVRTC
// and checks every offset and the size against this).
struct CausalConv1dKernelArgs {
  CUdeviceptr x, weight, bias, out, initial_states, final_states;
  int batch, channels, length;
  long long x_batch_stride, x_channel_stride, out_batch_stride, out_channel_stride;
  int vector_mode; // 0 scalar, 1 vector loads and stores, 2 spans (kernel.cuh)
  long long x_length_stride, out_length_stride; // channel-last only
  int chunk;                                    // channel-last: positions per thread
  CUdeviceptr seq_idx;                          // channel-last: int32 [B, L] or 0
  long long seq_idx_batch_stride;
};

// Everything a launch of one variant on one problem needs besides the call's
// pointers and strides: what the runtime keeps per call signature.
struct CausalConv1dPlan final : CallPlan {
  CausalConv1dShape shape;
  int vec = 0;
  int cpb = 0;
  bool span = false; // load=span: vector_mode 2 where the call's rows form aligned runs
  int chunk = 0;     // channel-last: positions per thread
  size_t pack(const void* args, const BoundCall& call, void* out) const override;
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
  std::vector<InertRule> inert_params(const Problem& problem) const override;
  Config adapt(const Config& config, const Problem& problem) const override;
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

  const ArgsDesc& args_desc() const override;
  std::unique_ptr<CallPlan> plan(const Config& config, const Problem& problem) const override;

  CausalConv1dPlan conv_plan(const Config& config, const Problem& problem) const;
  CausalConv1dKernelArgs kernel_args(const CausalConv1dPlan& plan,
                                     const CausalConv1dCall& call) const;

private:
  // Whether adapt()'s candidate runs the problem (check() on sm_80, the oldest GPU the
  // runtime supports; a refusal by exception counts as no).
  bool fits(const Config& config, const Problem& problem) const;
  // adapt() for the row paths (no spans): short rows here, long ones below.
  Config adapt_rows(const Config& config, const Problem& problem) const;
  // adapt() for rows at least half of the configuration's tile long.
  Config adapt_long_rows(const Config& config, const Problem& problem) const;
};

} // namespace autotune

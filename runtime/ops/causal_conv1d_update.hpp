// causal_conv1d_update: the decoding step of causal_conv1d. L new positions of x (usually
// 1) against each sequence's rolling state of its last S inputs, which the same launch
// updates (causal-conv1d's causal_conv1d_update; templates/causal_conv1d_update/).
#pragma once

#include "op.hpp"

namespace autotune {

// The problem's numbers, parsed once.
struct CausalConv1dUpdateShape {
  long long B = 0, C = 0, L = 0, W = 0, S = 0;
  DType x = DType::bf16, w = DType::bf16;
  bool bias = false, silu = false;
  bool circular = false; // cache_seqlens given: the state is a circular buffer
  bool gather = false;   // conv_state_indices given: sequence b's state is row indices[b]
  static CausalConv1dUpdateShape of(const Problem& problem);
};

// The kernel's by-value argument: struct UpdateArgs of
// templates/causal_conv1d_update/kernel.cuh, field for field
// (tests/test_runtime_ops_kernel_args.cpp checks the offsets and size with NVRTC).
struct CausalConv1dUpdateKernelArgs {
  CUdeviceptr x, weight, bias, out, state_in, state_out, cache_seqlens, state_indices;
  int batch, channels, length, entries;
  long long x_batch_stride, x_channel_stride, x_length_stride;
  long long out_batch_stride, out_channel_stride, out_length_stride;
  long long state_entry_stride, state_channel_stride, state_pos_stride;
};

struct CausalConv1dUpdatePlan final : CallPlan {
  size_t pack(const void* args, const BoundCall& call, void* out) const override;
};

class CausalConv1dUpdateOp final : public Op {
public:
  const char* name() const override { return "causal_conv1d_update"; }
  const char* kernel_name() const override { return "causal_conv1d_update_fwd"; }
  const char* template_path() const override { return "causal_conv1d_update/kernel.cuh"; }
  const char* space_path() const override { return "causal_conv1d_update/space.toml"; }
  const char* reference_path() const override { return "causal_conv1d_update/reference.cuh"; }

  std::vector<std::string> default_shapes() const override;
  Problem make_problem(const Fields& shape) const override;
  Result<bool> check(const Config& config, const Problem& problem,
                     const std::string& arch) const override;
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
};

} // namespace autotune

// selective_state_update: one decoding step of the Mamba selective scan (mamba-ssm's
// selective_state_update), the state updated in place by the same launch
// (templates/selective_state_update/). Mamba-1's form (no head dimension) is H = 1.
#pragma once

#include "op.hpp"

namespace autotune {

// The problem's numbers, parsed once.
struct SelectiveStateUpdateShape {
  long long B = 0, H = 0, P = 0, N = 0, G = 0;
  DType x = DType::bf16, state = DType::bf16, bc = DType::f32, a = DType::f32, p = DType::f32;
  bool heads = false; // tensors with a head dimension (Mamba-2); else H = 1
  bool has_D = false, has_z = false, dt_bias = false, softplus = false;
  bool gather = false;  // state_batch_indices given
  bool a_bcast = false; // A's last stride is 0: one value a row (Mamba-2's broadcast view)
  static SelectiveStateUpdateShape of(const Problem& problem);
};

// The kernel's by-value argument: struct StateUpdateArgs of
// templates/selective_state_update/kernel.cuh, field for field
// (tests/test_runtime_ops_kernel_args.cpp checks the offsets and size with NVRTC).
struct SelectiveStateUpdateKernelArgs {
  CUdeviceptr x, dt, dt_bias, A, B, C, D, z, out, state_in, state_out, state_indices;
  int batch, heads, dim, groups, entries;
  long long x_stride[3], dt_stride[3], z_stride[3], out_stride[3];
  long long dt_bias_stride[2], D_stride[2];
  long long A_stride[3];
  long long B_stride[3], C_stride[3];
  long long state_stride[4];
};

struct SelectiveStateUpdatePlan final : CallPlan {
  size_t pack(const void* args, const BoundCall& call, void* out) const override;
};

class SelectiveStateUpdateOp final : public Op {
public:
  const char* name() const override { return "selective_state_update"; }
  const char* kernel_name() const override { return "selective_state_update_fwd"; }
  const char* template_path() const override { return "selective_state_update/kernel.cuh"; }
  const char* space_path() const override { return "selective_state_update/space.toml"; }
  const char* reference_path() const override { return "selective_state_update/reference.cuh"; }

  std::vector<std::string> default_shapes() const override;
  Problem make_problem(const Fields& shape) const override;
  Result<bool> check(const Config& config, const Problem& problem,
                     const std::string& arch) const override;
  // The lanes per row for this problem's N: about 8 states a lane (the H100's winners:
  // 2 lanes at N=16, 16 at N=128), within 1..32, at most N and at least N / 32 (registers).
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
};

} // namespace autotune

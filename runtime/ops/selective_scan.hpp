// selective_scan: the Mamba-1 selective scan forward (see templates/selective_scan/kernel.cuh
// for the recurrence). Problem fields: B, D, L, N, G, dtype (u/delta/z/out and
// variable B/C), var_bc (0: B and C fixed, 1: both variable, B or C: only that one
// variable, as mamba-ssm's independent is_variable_B / is_variable_C), delta_bias,
// softplus, has_d, has_z, last_state.
#pragma once

#include "op.hpp"

namespace autotune {

// Device pointers and strides of one call (elements, not bytes). u, delta, z, out
// are [B, D, L] with a contiguous last dimension; a variable B or C is [B, G, N, L]
// with a contiguous last dimension; A [D, N], a fixed B or C [D, N], D and
// delta_bias [D] and last_state [B, D, N] are contiguous fp32.
struct SelectiveScanCall {
  CUdeviceptr u = 0, delta = 0, A = 0, B = 0, C = 0;
  CUdeviceptr D = 0;          // 0 unless has_d
  CUdeviceptr z = 0;          // 0 unless has_z
  CUdeviceptr delta_bias = 0; // 0 unless delta_bias
  CUdeviceptr out = 0;
  CUdeviceptr last_state = 0; // 0 unless last_state
  long long u_batch_stride = 0, u_dim_stride = 0;
  long long delta_batch_stride = 0, delta_dim_stride = 0;
  long long z_batch_stride = 0, z_dim_stride = 0;
  long long out_batch_stride = 0, out_dim_stride = 0;
  long long b_batch_stride = 0, b_group_stride = 0, b_state_stride = 0;
  long long c_batch_stride = 0, c_group_stride = 0, c_state_stride = 0;
};

// The kernel's by-value argument: struct ScanArgs of templates/selective_scan/kernel.cuh,
// field for field (tests/test_runtime_ops_kernel_args.cpp compiles the kernel with NVRTC
// and checks every offset and the size against this).
struct SelectiveScanKernelArgs {
  CUdeviceptr u, delta, A, B, C, D, z, delta_bias, out, last_state;
  int batch, dim, length, groups;
  long long u_bs, u_ds, delta_bs, delta_ds, z_bs, z_ds, out_bs, out_ds;
  long long b_bs, b_gs, b_ns, c_bs, c_gs, c_ns;
  int vector_ok;
  int ch_mod;
};

class SelectiveScanOp final : public Op {
public:
  const char* name() const override { return "selective_scan"; }
  const char* kernel_name() const override { return "selective_scan_fwd"; }
  const char* template_path() const override { return "selective_scan/kernel.cuh"; }
  const char* space_path() const override { return "selective_scan/space.toml"; }
  const char* reference_path() const override { return "selective_scan/reference.cuh"; }

  std::vector<std::string> default_shapes() const override;
  Problem make_problem(const Fields& shape) const override;
  Result<bool> check(const Config& config, const Problem& problem,
                     const std::string& arch) const override;
  Result<bool> worth_measuring(const Config& config, const Problem& problem) const override;
  Config adapt(const Config& config, const Problem& problem) const override;
  std::vector<InertRule> inert_params(const Problem& problem) const override;
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
  // Exponentials per call (B*D*L*N): with bytes(), the floor of the op on a GPU is
  // max(bytes / copy bandwidth, exps / exp-unit rate).
  double exponentials(const Problem& problem) const;

  const ArgsDesc& args_desc() const override;
  std::unique_ptr<CallPlan> plan(const Config& config, const Problem& problem) const override;
  void pack_call(const Config& config, const Problem& problem, const SelectiveScanCall& call,
                 ArgPack& args) const;
  // The states staged in shared memory at once for config and problem (0: none fit).
  int state_slice(const Config& config, const Problem& problem) const;
};

} // namespace autotune

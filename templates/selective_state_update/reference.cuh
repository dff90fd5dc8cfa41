// Reference selective state update (one Mamba decoding step): one thread per row
// (b, h, p) (a grid-stride loop of 256-thread blocks), computed in float64 from the
// stored (rounded) inputs exactly as the update is written, written as fp32.
// Deliberately simple: it shares no code with kernel.cuh, so a bug there cannot hide in
// both. x, dt and z use the strides xs0, xs1, xs2 (batch, head, dim); state_in the
// strides ss0..ss3 (entry, head, dim, state). A is contiguous [H, P, N], B and C
// contiguous [B, G, N], D and dt_bias contiguous [H, P]; each of these groups is read
// through its dtype code (bc_code, a_code, p_code: 0 fp32, 1 fp16, 2 bf16, as
// AUTOTUNE_FP32/FP16/BF16), which keeps one kernel per (x dtype, state dtype). dt_bias,
// D, z and state_indices may be null. e = state_indices[b] (or b when null); an e
// outside [0, E) is padding: out_ref 0, no state written. out_ref: [B, H, P] contiguous
// fp32; state_ref: [E, H, P, N] contiguous fp32, the new state of each row some b
// selects (other rows are not written).
#include "common/numeric.cuh"

// Element i of an fp32, fp16 or bf16 array (code 0, 1, 2) as a double.
__device__ __forceinline__ double selective_state_update_ref_load(const void* p, long long i,
                                                                  int code) {
  if (code == 1) {
    return at_to_float(static_cast<const at_f16*>(p)[i]);
  }
  if (code == 2) {
    return at_to_float(static_cast<const at_bf16*>(p)[i]);
  }
  return static_cast<const float*>(p)[i];
}

#define AT_DEFINE_STATE_UPDATE_REF(XT, ST, NAME)                                                   \
  extern "C" __global__ void selective_state_update_ref_##NAME(                                    \
      const XT* x, const XT* dt, const void* dt_bias, const void* A, const void* B, const void* C, \
      const void* D, const XT* z, const ST* state_in, const int* state_indices, float* out_ref,    \
      float* state_ref, int batch, int heads, int dim, int dstate, int groups, int entries,        \
      int softplus, int bc_code, int a_code, int p_code, int a_bcast, long long xs0,               \
      long long xs1, long long xs2, long long ss0, long long ss1, long long ss2, long long ss3) {  \
    long long rows = static_cast<long long>(batch) * heads * dim;                                  \
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < rows; i += 256ll * gridDim.x) {       \
      long long p = i % dim;                                                                       \
      long long h = (i / dim) % heads;                                                             \
      long long b = i / dim / heads;                                                               \
      long long g = h / (heads / groups);                                                          \
      long long e = state_indices ? static_cast<long long>(state_indices[b]) : b;                  \
      if (e < 0 || e >= entries) {                                                                 \
        out_ref[i] = 0.0f;                                                                         \
        continue;                                                                                  \
      }                                                                                            \
      long long xi = b * xs0 + h * xs1 + p * xs2;                                                  \
      long long hp = h * dim + p;                                                                  \
      double xv = at_to_float(x[xi]);                                                              \
      double d = at_to_float(dt[xi]);                                                              \
      if (dt_bias) {                                                                               \
        d += selective_state_update_ref_load(dt_bias, hp, p_code);                                 \
      }                                                                                            \
      if (softplus && d <= 20.0) {                                                                 \
        d = log1p(exp(d));                                                                         \
      }                                                                                            \
      double y = 0.0;                                                                              \
      for (long long n = 0; n < dstate; ++n) {                                                     \
        double s = at_to_float(state_in[e * ss0 + h * ss1 + p * ss2 + n * ss3]);                   \
        double a = selective_state_update_ref_load(A, a_bcast ? hp : hp * dstate + n, a_code);     \
        double bn = selective_state_update_ref_load(B, (b * groups + g) * dstate + n, bc_code);    \
        double cn = selective_state_update_ref_load(C, (b * groups + g) * dstate + n, bc_code);    \
        s = s * exp(d * a) + d * bn * xv;                                                          \
        state_ref[((e * heads + h) * dim + p) * dstate + n] = static_cast<float>(s);               \
        /* out from the state as stored (rounded to ST), as the kernel and mamba-ssm do */         \
        y += static_cast<double>(at_to_float(at_from_float<ST>(static_cast<float>(s)))) * cn;      \
      }                                                                                            \
      if (D) {                                                                                     \
        y += selective_state_update_ref_load(D, hp, p_code) * xv;                                  \
      }                                                                                            \
      if (z) {                                                                                     \
        double zv = at_to_float(z[xi]);                                                            \
        y *= zv / (1.0 + exp(-zv));                                                                \
      }                                                                                            \
      out_ref[i] = static_cast<float>(y);                                                          \
    }                                                                                              \
  }

AT_DEFINE_STATE_UPDATE_REF(float, float, f32_f32)
AT_DEFINE_STATE_UPDATE_REF(float, at_f16, f32_f16)
AT_DEFINE_STATE_UPDATE_REF(float, at_bf16, f32_bf16)
AT_DEFINE_STATE_UPDATE_REF(at_f16, float, f16_f32)
AT_DEFINE_STATE_UPDATE_REF(at_f16, at_f16, f16_f16)
AT_DEFINE_STATE_UPDATE_REF(at_f16, at_bf16, f16_bf16)
AT_DEFINE_STATE_UPDATE_REF(at_bf16, float, bf16_f32)
AT_DEFINE_STATE_UPDATE_REF(at_bf16, at_f16, bf16_f16)
AT_DEFINE_STATE_UPDATE_REF(at_bf16, at_bf16, bf16_bf16)

// Reference selective scan: one thread per (batch, channel) walks the sequence in
// order, exactly as the recurrence is written. Exponentials, softplus and SiLU use
// the accurate fp32 library functions (expf, log1pf); the state and y accumulate in
// float64. Contiguous tensors only (the tuner's layout); outputs are fp32. B and C
// are each, independently, variable (b_var / c_var, [B, G, N, L]) or fixed (b_fixed
// / c_fixed, [D, N]): of each pair exactly one is non-null.
// Deliberately simple and sharing no code with kernel.cuh, so a bug there cannot
// hide in both. The GPU tests check it against a float64 CPU reference.
#include "common/numeric.cuh"

// Largest N the op accepts (runtime/ops/selective_scan.cpp).
#define AT_REF_MAX_N 64

#define AT_DEFINE_SCAN_REF(XT, NAME)                                                               \
  extern "C" __global__ void selective_scan_ref_##NAME(                                            \
      const XT* u, const XT* delta, const float* A, const XT* b_var, const XT* c_var,              \
      const float* b_fixed, const float* c_fixed, const float* dskip, const XT* z,                 \
      const float* delta_bias, float* out, float* last_state, int batch, int dim, int length,      \
      int dstate, int groups, int softplus) {                                                      \
    long long i = blockIdx.x * 128ll + threadIdx.x;                                                \
    if (i >= static_cast<long long>(batch) * dim) {                                                \
      return;                                                                                      \
    }                                                                                              \
    const long long d = i % dim;                                                                   \
    const long long b = i / dim;                                                                   \
    const long long g = d / (dim / groups);                                                        \
    const long long row = (b * dim + d) * length;                                                  \
    const long long bc_row = (b * groups + g) * dstate * static_cast<long long>(length);           \
    double h[AT_REF_MAX_N];                                                                        \
    for (int n = 0; n < dstate; ++n) {                                                             \
      h[n] = 0.0;                                                                                  \
    }                                                                                              \
    for (int t = 0; t < length; ++t) {                                                             \
      float x = at_to_float(delta[row + t]) + (delta_bias ? delta_bias[d] : 0.0f);                 \
      if (softplus) {                                                                              \
        x = x > 20.0f ? x : log1pf(expf(x));                                                       \
      }                                                                                            \
      const double uu = at_to_float(u[row + t]);                                                   \
      double y = 0.0;                                                                              \
      for (int n = 0; n < dstate; ++n) {                                                           \
        const double bn =                                                                          \
            b_var ? at_to_float(b_var[bc_row + n * static_cast<long long>(length) + t])            \
                  : b_fixed[d * dstate + n];                                                       \
        const double cn =                                                                          \
            c_var ? at_to_float(c_var[bc_row + n * static_cast<long long>(length) + t])            \
                  : c_fixed[d * dstate + n];                                                       \
        h[n] = static_cast<double>(expf(x * A[d * dstate + n])) * h[n] + double(x) * bn * uu;      \
        y += cn * h[n];                                                                            \
      }                                                                                            \
      if (dskip) {                                                                                 \
        y += static_cast<double>(dskip[d]) * uu;                                                   \
      }                                                                                            \
      if (z) {                                                                                     \
        const double zz = at_to_float(z[row + t]);                                                 \
        y *= zz / (1.0 + exp(-zz));                                                                \
      }                                                                                            \
      out[row + t] = static_cast<float>(y);                                                        \
    }                                                                                              \
    if (last_state) {                                                                              \
      for (int n = 0; n < dstate; ++n) {                                                           \
        last_state[(b * dim + d) * dstate + n] = static_cast<float>(h[n]);                         \
      }                                                                                            \
    }                                                                                              \
  }

AT_DEFINE_SCAN_REF(float, f32)
AT_DEFINE_SCAN_REF(at_f16, f16)
AT_DEFINE_SCAN_REF(at_bf16, bf16)

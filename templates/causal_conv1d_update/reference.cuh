// Reference causal conv1d decoding step: one thread per (b, c) (a grid-stride loop of
// 256-thread blocks), accumulated in float64 from the stored (rounded) inputs, written as
// fp32. Deliberately simple: it shares no code with kernel.cuh, so a bug there cannot
// hide in both. x uses the strides xbs, xcs, xls (batch, channel, position); state_in
// is contiguous [E, C, S]. row = state_indices[b] (or b when null); a row outside
// [0, E) is padding: out_ref 0, no state written. cache_seqlens null: the state is the
// last S inputs (the W-1 before x are its end), shifted left by L with x appended;
// else a ring whose inputs before x end at cache_seqlens[b] - 1 and x's last min(L, S)
// inputs are written from (cache_seqlens[b] + t) mod S. out_ref: [B, C, L] contiguous
// fp32; state_ref: [E, C, S] contiguous fp32, the new state of each row some b selects
// (other rows are not written).
#include "common/numeric.cuh"

#define AT_DEFINE_UPDATE_REF(XT, WT, NAME)                                                         \
  extern "C" __global__ void causal_conv1d_update_ref_##NAME(                                      \
      const XT* x, const WT* w, const WT* bias, const XT* state_in, const int* cache_seqlens,      \
      const int* state_indices, float* out_ref, float* state_ref, int batch, int channels,         \
      int length, int width, int state_len, int entries, int silu, long long xbs, long long xcs,   \
      long long xls) {                                                                             \
    long long n = static_cast<long long>(batch) * channels;                                        \
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += 256ll * gridDim.x) {          \
      long long c = i % channels;                                                                  \
      long long b = i / channels;                                                                  \
      long long row = state_indices ? static_cast<long long>(state_indices[b]) : b;                \
      float* o = out_ref + (b * channels + c) * length;                                            \
      if (row < 0 || row >= entries) {                                                             \
        for (long long t = 0; t < length; ++t) {                                                   \
          o[t] = 0.0f;                                                                             \
        }                                                                                          \
        continue;                                                                                  \
      }                                                                                            \
      const XT* s = state_in + (row * channels + c) * state_len;                                   \
      float* ns = state_ref + (row * channels + c) * state_len;                                    \
      const XT* xr = x + b * xbs + c * xcs;                                                        \
      long long p = cache_seqlens ? static_cast<long long>(cache_seqlens[b]) : 0;                  \
      for (long long t = 0; t < length; ++t) {                                                     \
        double acc = bias ? static_cast<double>(at_to_float(bias[c])) : 0.0;                       \
        for (int k = 0; k < width; ++k) {                                                          \
          long long q = t - (width - 1) + k; /* input position; before 0: from the state */        \
          double v;                                                                                \
          if (q >= 0) {                                                                            \
            v = at_to_float(xr[q * xls]);                                                          \
          } else if (cache_seqlens) {                                                              \
            v = at_to_float(s[(((p + q) % state_len) + state_len) % state_len]);                   \
          } else {                                                                                 \
            v = at_to_float(s[state_len + q]);                                                     \
          }                                                                                        \
          acc += static_cast<double>(at_to_float(w[c * width + k])) * v;                           \
        }                                                                                          \
        if (silu) {                                                                                \
          acc = acc / (1.0 + exp(-acc));                                                           \
        }                                                                                          \
        o[t] = static_cast<float>(acc);                                                            \
      }                                                                                            \
      if (cache_seqlens) {                                                                         \
        for (long long j = 0; j < state_len; ++j) {                                                \
          ns[j] = at_to_float(s[j]);                                                               \
        }                                                                                          \
        for (long long t = length > state_len ? length - state_len : 0; t < length; ++t) {         \
          ns[(((p + t) % state_len) + state_len) % state_len] = at_to_float(xr[t * xls]);          \
        }                                                                                          \
      } else {                                                                                     \
        for (long long j = 0; j < state_len; ++j) {                                                \
          /* position j + L of the sequence "old state, then x" */                                 \
          long long q = j + length;                                                                \
          ns[j] = q < state_len ? at_to_float(s[q]) : at_to_float(xr[(q - state_len) * xls]);      \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }

AT_DEFINE_UPDATE_REF(float, float, f32_f32)
AT_DEFINE_UPDATE_REF(float, at_f16, f32_f16)
AT_DEFINE_UPDATE_REF(float, at_bf16, f32_bf16)
AT_DEFINE_UPDATE_REF(at_f16, float, f16_f32)
AT_DEFINE_UPDATE_REF(at_f16, at_f16, f16_f16)
AT_DEFINE_UPDATE_REF(at_f16, at_bf16, f16_bf16)
AT_DEFINE_UPDATE_REF(at_bf16, float, bf16_f32)
AT_DEFINE_UPDATE_REF(at_bf16, at_f16, bf16_f16)
AT_DEFINE_UPDATE_REF(at_bf16, at_bf16, bf16_bf16)

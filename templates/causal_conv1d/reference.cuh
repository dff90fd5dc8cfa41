// Reference causal conv1d: one thread per output, accumulated in float64 from the
// stored (rounded) inputs, written as fp32. Deliberately simple: it shares no code
// with kernel.cuh, so a bug there cannot hide in both.
#include "common/numeric.cuh"

#define AT_DEFINE_CONV_REF(XT, WT, NAME)                                                           \
  extern "C" __global__ void causal_conv1d_ref_##NAME(                                             \
      const XT* x, const WT* w, const WT* bias, float* out, int batch, int channels, int length,   \
      int width, int silu, long long xbs, long long xcs) {                                         \
    long long n = static_cast<long long>(batch) * channels * length;                               \
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += 256ll * gridDim.x) {          \
      long long t = i % length;                                                                    \
      long long c = (i / length) % channels;                                                       \
      long long b = i / (static_cast<long long>(length) * channels);                               \
      double acc = bias ? static_cast<double>(at_to_float(bias[c])) : 0.0;                         \
      for (int k = 0; k < width; ++k) {                                                            \
        long long s = t - (width - 1) + k;                                                         \
        if (s >= 0) {                                                                              \
          acc += static_cast<double>(at_to_float(w[c * width + k])) *                              \
                 static_cast<double>(at_to_float(x[b * xbs + c * xcs + s]));                       \
        }                                                                                          \
      }                                                                                            \
      if (silu) {                                                                                  \
        acc = acc / (1.0 + exp(-acc));                                                             \
      }                                                                                            \
      out[i] = static_cast<float>(acc);                                                            \
    }                                                                                              \
  }

AT_DEFINE_CONV_REF(float, float, f32_f32)
AT_DEFINE_CONV_REF(float, at_f16, f32_f16)
AT_DEFINE_CONV_REF(float, at_bf16, f32_bf16)
AT_DEFINE_CONV_REF(at_f16, float, f16_f32)
AT_DEFINE_CONV_REF(at_f16, at_f16, f16_f16)
AT_DEFINE_CONV_REF(at_f16, at_bf16, f16_bf16)
AT_DEFINE_CONV_REF(at_bf16, float, bf16_f32)
AT_DEFINE_CONV_REF(at_bf16, at_f16, bf16_f16)
AT_DEFINE_CONV_REF(at_bf16, at_bf16, bf16_bf16)

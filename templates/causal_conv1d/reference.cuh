// Reference causal conv1d: one thread per output, accumulated in float64 from the
// stored (rounded) inputs, written as fp32. Deliberately simple: it shares no code
// with kernel.cuh, so a bug there cannot hide in both. x and out share the strides
// xbs, xcs, xls (batch, channel, position): channel-first or channel-last. seq (int32,
// batch stride sbs) or null: x at s counts for the output at t only when seq[s] == seq[t],
// and the output at t is 0 where seq[t] < 0 (padding).
#include "common/numeric.cuh"

#define AT_DEFINE_CONV_REF(XT, WT, NAME)                                                           \
  extern "C" __global__ void causal_conv1d_ref_##NAME(                                             \
      const XT* x, const WT* w, const WT* bias, const XT* init, float* out, float* final_out,      \
      int batch, int channels, int length, int width, int silu, long long xbs, long long xcs,      \
      long long xls, const int* seq, long long sbs) {                                              \
    long long n = static_cast<long long>(batch) * channels * length;                               \
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n; i += 256ll * gridDim.x) {          \
      long long t = i % length;                                                                    \
      long long c = (i / length) % channels;                                                       \
      long long b = i / (static_cast<long long>(length) * channels);                               \
      double acc = bias ? static_cast<double>(at_to_float(bias[c])) : 0.0;                         \
      for (int k = 0; k < width; ++k) {                                                            \
        long long s = t - (width - 1) + k;                                                         \
        double xv = 0.0;                                                                           \
        if (s >= 0 && seq && seq[b * sbs + s] != seq[b * sbs + t]) {                               \
          xv = 0.0;                                                                                \
        } else if (s >= 0) {                                                                       \
          xv = at_to_float(x[b * xbs + c * xcs + s * xls]);                                        \
        } else if (init) {                                                                         \
          xv = at_to_float(init[(b * channels + c) * (width - 1) + (width - 1) + s]);              \
        }                                                                                          \
        acc += static_cast<double>(at_to_float(w[c * width + k])) * xv;                            \
      }                                                                                            \
      if (silu) {                                                                                  \
        acc = acc / (1.0 + exp(-acc));                                                             \
      }                                                                                            \
      if (seq && seq[b * sbs + t] < 0) {                                                           \
        acc = 0.0;                                                                                 \
      }                                                                                            \
      out[b * xbs + c * xcs + t * xls] = static_cast<float>(acc);                                  \
      if (final_out && t >= length - (width - 1)) {                                                \
        long long k = t - (length - (width - 1));                                                  \
        final_out[(b * channels + c) * (width - 1) + k] =                                          \
            at_to_float(x[b * xbs + c * xcs + t * xls]);                                           \
      }                                                                                            \
      if (final_out && t == length - 1 && length < width - 1) {                                    \
        /* fewer inputs than the state holds: its front comes from the initial state */            \
        for (long long k = 0; k < (width - 1) - length; ++k) {                                     \
          long long s = -(width - 1) + length + k;                                                 \
          final_out[(b * channels + c) * (width - 1) + k] =                                        \
              init ? at_to_float(init[(b * channels + c) * (width - 1) + (width - 1) + s]) : 0.0f; \
        }                                                                                          \
      }                                                                                            \
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

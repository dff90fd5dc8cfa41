// Kernels the tuner and the GPU tests use around every variant: fresh random
// inputs, NaN poison for outputs, and a comparison against a reference that
// reports the relative L2 error, the largest absolute error and how many outputs
// are not finite (a poisoned output that nobody wrote stays NaN and is caught).
#include "common/numeric.cuh"

__device__ __forceinline__ unsigned long long at_mix(unsigned long long z) {
  // splitmix64 finalizer: a counter-based generator, so every element is independent.
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#define AT_DEFINE_TESTING(T, NAME)                                                                 \
  extern "C" __global__ void at_fill_uniform_##NAME(T* p, unsigned long long n,                    \
                                                    unsigned long long seed, float lo, float hi) { \
    for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n;                          \
         i += 256ull * gridDim.x) {                                                                \
      float u = static_cast<float>(at_mix(seed ^ (i * 0x2545f4914f6cdd1dull)) >> 40) *             \
                (1.0f / 16777216.0f);                                                              \
      p[i] = at_from_float<T>(lo + (hi - lo) * u);                                                 \
    }                                                                                              \
  }                                                                                                \
  /* acc: [0] sum (out-ref)^2, [1] sum ref^2, [2] max |out-ref|, [3] non-finite count */           \
  extern "C" __global__ void at_compare_##NAME(const T* out, const float* ref,                     \
                                               unsigned long long n, double* acc) {                \
    double d2 = 0, r2 = 0, mx = 0, bad = 0;                                                        \
    for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n;                          \
         i += 256ull * gridDim.x) {                                                                \
      float o = at_to_float(out[i]);                                                               \
      float r = ref[i];                                                                            \
      if (!isfinite(o)) {                                                                          \
        /* the reference's own infinity (attention's -inf LSE of a row with no key) is */          \
        /* right; NaN, the poison, equals nothing */                                               \
        bad += o == r ? 0 : 1;                                                                     \
        continue;                                                                                  \
      }                                                                                            \
      double d = static_cast<double>(o) - r;                                                       \
      d2 += d * d;                                                                                 \
      r2 += static_cast<double>(r) * r;                                                            \
      mx = fmax(mx, fabs(d));                                                                      \
    }                                                                                              \
    for (int s = 16; s > 0; s /= 2) {                                                              \
      d2 += __shfl_down_sync(0xffffffffu, d2, s);                                                  \
      r2 += __shfl_down_sync(0xffffffffu, r2, s);                                                  \
      mx = fmax(mx, __shfl_down_sync(0xffffffffu, mx, s));                                         \
      bad += __shfl_down_sync(0xffffffffu, bad, s);                                                \
    }                                                                                              \
    if (threadIdx.x % 32 == 0) {                                                                   \
      atomicAdd(acc + 0, d2);                                                                      \
      atomicAdd(acc + 1, r2);                                                                      \
      atomicAdd(acc + 3, bad);                                                                     \
      /* non-negative doubles order like their bit patterns */                                     \
      atomicMax(reinterpret_cast<unsigned long long*>(acc + 2),                                    \
                static_cast<unsigned long long>(__double_as_longlong(mx)));                        \
    }                                                                                              \
  }                                                                                                \
  extern "C" __global__ void at_to_float_##NAME(const T* in, float* out, unsigned long long n) {   \
    for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n;                          \
         i += 256ull * gridDim.x) {                                                                \
      out[i] = at_to_float(in[i]);                                                                 \
    }                                                                                              \
  }

AT_DEFINE_TESTING(float, f32)
AT_DEFINE_TESTING(at_f16, f16)
AT_DEFINE_TESTING(at_bf16, bf16)
